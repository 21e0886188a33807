"""A user's mistake at the ``reasonstate`` command ends in one line saying what to do, never a traceback
(issue 24 item 7): a binary template, a missing optional dependency (the ``pip install`` to run), a
``--api`` the bodies do not fit, a ``--model`` that would change nothing, and a subcommand's own usage on a
usage error. A bare install is made by blocking the import (``sys.modules[name] = None``: Python's own
"import halted" path, a ``ModuleNotFoundError`` like a missing package's) in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.cli import main
from reasonstate.export.jsonl import JSONLExporter
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

ROOT = Path(__file__).resolve().parent.parent
SONNET = "claude-sonnet-4-6"


def bare(blocked: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``reasonstate ARGV`` in a process where ``blocked`` cannot be imported."""
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        f"from reasonstate.cli import main\nraise SystemExit(main({list(argv)!r}))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- prr -----------------------------------------------------------------------------------------------------


def test_a_binary_template_is_one_line_not_a_unicode_traceback(tmp_path: Path) -> None:
    template = tmp_path / "model.bin"
    template.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" * 8)
    out = subprocess.run(
        [sys.executable, "-m", "reasonstate.cli", "prr", "--template", str(template)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and str(template) in out.stderr and "not UTF-8" in out.stderr


# -- missing extras ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocked", "argv", "install"),
    [
        ("httpx2", ("demo", "--only", "opening"), "pip install 'reasonstate[anthropic,openai,gemini]'"),
        ("anthropic", ("demo", "--only", "opening"), "pip install 'reasonstate[anthropic,openai,gemini]'"),
        ("jinja2", ("prr", "--template", "qwen3.6"), "pip install 'reasonstate[tokens]'"),
    ],
    ids=["demo-httpx2", "demo-anthropic", "prr-jinja2"],
)
def test_a_missing_extra_is_one_line_naming_the_pip_install(
    blocked: str, argv: tuple[str, ...], install: str
) -> None:
    out = bare(blocked, *argv)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last == f"reasonstate {argv[0]}: {blocked} is not installed: {install}"


@pytest.mark.parametrize(
    ("emulator", "blocked", "extra"),
    [
        (AnthropicEmulator, "anthropic", "anthropic"),
        (OpenAIResponsesEmulator, "openai", "openai"),
        (GeminiEmulator, "google", "gemini"),
    ],
)
def test_an_emulator_client_without_its_sdk_names_the_extra(
    emulator: Any, blocked: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulator() as emu:
        monkeypatch.setitem(sys.modules, blocked, None)
        with pytest.raises(ModuleNotFoundError) as info:
            emu.client()
    assert str(info.value) == f"{blocked} is not installed: pip install 'reasonstate[{extra}]'"
    assert info.value.__suppress_context__  # the one line, not the import machinery's chain


# -- diff --api ----------------------------------------------------------------------------------------------

#: hand-written Messages bodies (docs/protocols.md §4.6): a system prompt and a user message
ANTHROPIC_A = {
    "model": SONNET,
    "max_tokens": 1024,
    "system": "You are the travel desk.",
    "messages": [{"role": "user", "content": "Paris?"}],
}
ANTHROPIC_B = {**ANTHROPIC_A, "system": "You are the travel desk. Be brief."}
#: a Responses body (docs/protocols.md §1.1): ``input`` items
RESPONSES = {"model": "gpt-5.5", "input": [{"role": "user", "content": "Paris?"}], "store": False}


def write(tmp_path: Path, name: str, body: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


def test_diff_refuses_an_api_the_bodies_do_not_fit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before: ``--api responses`` on Anthropic bodies answered "extends it" (no unit of either body)."""
    a, b = write(tmp_path, "a.json", ANTHROPIC_A), write(tmp_path, "b.json", ANTHROPIC_B)
    code, out, err = run(capsys, "diff", a, b, "--api", "responses")
    assert code == 1 and out == ""
    assert "a.json is not a responses request body" in err and "messages" in err and "system" in err
    code, out, _ = run(capsys, "diff", a, b, "--api", "messages")
    assert code == 0 and "cause: system_changed" in out
    r = write(tmp_path, "r.json", RESPONSES)
    code, _, err = run(capsys, "diff", r, r, "--api", "chat")
    assert code == 1 and "responses" in err


def test_diff_accepts_an_api_a_plain_messages_body_may_be(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Only user messages: Chat Completions and Anthropic Messages alike; ``--api`` decides."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Paris?"}]}
    a = write(tmp_path, "plain.json", body)
    for api in ("chat", "messages"):
        code, out, _ = run(capsys, "diff", a, a, "--api", api)
        assert code == 0 and f"({api}," in out


# -- report --model ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("report")
    snapshot, trace = folder / "session.json", folder / "trace.jsonl"
    with AnthropicEmulator([ModelAction.answer("Warm.")]) as emulator:
        session = rs.Session(emulator.client(), model=SONNET, exporters=[JSONLExporter(trace)])
        session.send("Weather in Paris?")
        session.close()
    snapshot.write_text(session.snapshot().model_dump_json())
    return snapshot, trace


def test_report_model_is_refused_where_it_would_change_nothing(
    recorded: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``--model`` was silently ignored on a snapshot and on a trace naming every model."""
    snapshot, trace = recorded
    code, out, err = run(capsys, "report", str(snapshot), "--model", "gpt-5.5")
    assert code == 1 and out == ""
    assert "snapshot records each request's model" in err and SONNET in err
    code, _, err = run(capsys, "report", str(trace), "--model", "gpt-5.5")
    assert code == 1 and "every request of this trace names one" in err


def test_report_model_prices_the_trace_requests_that_name_none(
    recorded: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, trace = recorded
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    for line in lines:
        line.get("data", line).pop("response_model", None)
    anonymous = tmp_path / "anonymous.jsonl"
    anonymous.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, unpriced, _ = run(capsys, "report", str(anonymous))
    assert code == 0 and "(model not recorded)" in unpriced
    code, priced, _ = run(capsys, "report", str(anonymous), "--model", SONNET)
    assert code == 0 and "(model not recorded)" not in priced
    code, named, _ = run(capsys, "report", str(trace))
    assert priced.splitlines()[1:] == named.splitlines()[1:]


# -- usage errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["emulate", "anthropic", "--bogus"], "usage: reasonstate emulate "),
        (["emulate", "anthropic", "--dialect", "vllm"], "usage: reasonstate emulate "),
        (["report", "x.json", "--bogus"], "usage: reasonstate report "),
        (["inspect", "x.json", "--bogus"], "usage: reasonstate inspect "),
        (["diff", "a.json", "b.json", "--bogus"], "usage: reasonstate diff "),
        (["store", "list", "sqlite:///x.db", "--bogus"], "usage: reasonstate store list "),
    ],
)
def test_a_usage_error_prints_the_subcommands_own_usage(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith(usage), err
