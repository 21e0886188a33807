"""``reasonstate prr``: bundled templates by name, the legend, and a tokenizer that is not the template's."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from reasonstate.tokens import (
    LEGEND,
    TEMPLATE_NAMES,
    ChatTemplateRenderer,
    TokenizerMismatch,
    main,
    run_matrix,
    template_path,
    unknown_special_tokens,
)

ROOT = Path(__file__).resolve().parents[2]

# which bundled tokenizer belongs with which bundled template (the others have no bundled tokenizer)
MATCHING = {("qwen3.6", "qwen3.6"), ("qwen3.6", "qwen3.5"), ("deepseek-v3.1", "deepseek-v4")}
TOKENIZERS = ("qwen3.6", "qwen3.5", "deepseek-v4")


def test_a_bundled_template_is_found_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--template", "glm-4.6"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "PRR drift matrix: glm-4.6.jinja (family glm-4.6, tokenizer none)"


def test_a_file_path_still_works_and_wins_over_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qwen3.6").write_text(template_path("kimi-k2-thinking").read_text())
    assert main(["--template", "qwen3.6"]) == 0  # the file in the working directory, a Kimi template
    assert "(family kimi-k2," in capsys.readouterr().out


def test_an_unknown_template_lists_the_bundled_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--template", "llama-5"]) == 2
    err = capsys.readouterr().err
    assert "'llama-5'" in err and all(name in err for name in TEMPLATE_NAMES)


def test_the_table_is_followed_by_a_legend_of_every_cell_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--template", "gpt-oss-20b"]) == 0
    out = capsys.readouterr().out
    table, legend = out.split("\n\nlegend:\n")
    cells = {c for line in table.splitlines()[2:] for c in line.split()[2:]}
    assert any(c.startswith("break@") for c in cells) and "n/a" in cells
    assert "legend:\n" + legend.rstrip("\n") == LEGEND
    for kind in ("ok ", "break@N", "n/a", "error: T", "re-render", "bridge", "exit status"):
        assert kind in legend


def test_json_output_has_no_legend(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["--template", "glm-4.6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["family"] == "glm-4.6"


@pytest.mark.parametrize(("template", "tokenizer"), sorted(itertools.product(TEMPLATE_NAMES, TOKENIZERS)))
def test_the_special_tokens_check_accepts_exactly_the_matching_pairs(template: str, tokenizer: str) -> None:
    renderer = ChatTemplateRenderer.from_files(template_path(template), tokenizer)
    assert (unknown_special_tokens(renderer) == ()) == ((template, tokenizer) in MATCHING)


def test_a_mismatched_tokenizer_is_refused_before_anything_is_measured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(TokenizerMismatch, match=r"<\|user\|>"):
        run_matrix(template_path("glm-4.6"), "qwen3.6")
    assert main(["--template", "deepseek-v3.1", "--tokenizer", "qwen3.6"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        "TokenizerMismatch: tokenizer 'qwen3.6' does not match template deepseek-v3.1.jinja" in captured.err
    )
    assert "<｜User｜>" in captured.err


def test_through_the_reasonstate_command() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "reasonstate.cli",
            "prr",
            "--template",
            "qwen3.6",
            "--tokenizer",
            "deepseek-v4",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2 and "TokenizerMismatch" in out.stderr and "<|im_start|>" in out.stderr
    assert (
        subprocess.run(
            [sys.executable, "-m", "reasonstate.cli", "prr", "--help"],
            capture_output=True,
            cwd=ROOT,
            timeout=60,
        ).returncode
        == 0
    )
