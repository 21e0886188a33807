"""The drift matrix over the standard scenarios; the bridge column never breaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasonstate.tokens import Matrix, main, run_matrix, template_path
from reasonstate.tokens.matrix import demo_section


def _cells(matrix: Matrix) -> dict[tuple[str, str], tuple[str, str]]:
    return {(r.scenario, r.switch): (str(r.string), str(r.bridge)) for r in matrix.rows}


@pytest.fixture(scope="module")
def qwen_matrix() -> Matrix:
    return run_matrix(template_path("qwen3.6"), "qwen3.6")


def test_qwen_matrix_runs_every_scenario_under_every_switch_the_template_reads(qwen_matrix: Matrix) -> None:
    assert {r.switch for r in qwen_matrix.rows} == {
        "default",
        "preserve_thinking=True",
        "enable_thinking=False",
    }
    assert len(qwen_matrix.rows) == 8 * 3


def test_qwen_matrix_default_flags(qwen_matrix: Matrix) -> None:
    rows = {r.scenario: (str(r.string), str(r.token)) for r in qwen_matrix.rows if r.switch == "default"}
    assert rows == {
        "tool_call_then_result": ("ok", "ok"),
        "user_turn_after_final": ("break@1460", "break@344"),
        "parallel_tool_calls": ("ok", "ok"),
        "final_answer_no_tools": ("break@66", "break@18"),
        "reasoning_truncated": ("break@81", "break@16"),
        "reasoning_trailing_blank_lines": ("break@1491", "break@352"),
        "args_reserialized": ("ok", "ok"),
        "xml_params_coerced": ("break@1612", "break@387"),
    }


def test_qwen_matrix_preserve_thinking_fixes_only_the_dropped_thinking(qwen_matrix: Matrix) -> None:
    rows = {r.scenario: str(r.string) for r in qwen_matrix.rows if r.switch == "preserve_thinking=True"}
    assert [s for s, cell in rows.items() if cell != "ok"] == [
        "reasoning_trailing_blank_lines",
        "xml_params_coerced",
    ]


def test_bridge_column_never_breaks(qwen_matrix: Matrix) -> None:
    assert {str(r.bridge) for r in qwen_matrix.rows} == {"ok"}


def test_deepseek_v4_matrix_drops_reasoning_in_thinking_mode_and_breaks_on_reserialized_args() -> None:
    matrix = run_matrix(template_path("deepseek-v3.1"), "deepseek-v4")
    breaks = {
        (r.scenario, r.switch): (str(r.string), str(r.token))
        for r in matrix.rows
        if r.string.status == "break"
    }
    assert breaks == {
        ("tool_call_then_result", "thinking=True"): ("break@71", "break@10"),
        ("parallel_tool_calls", "thinking=True"): ("break@69", "break@9"),
        ("final_answer_no_tools", "thinking=True"): ("break@59", "break@11"),
        ("reasoning_truncated", "thinking=True"): ("break@73", "break@11"),
        ("reasoning_trailing_blank_lines", "thinking=True"): ("break@71", "break@10"),
        ("args_reserialized", "default"): ("break@148", "break@20"),
        ("args_reserialized", "thinking=True"): ("break@71", "break@11"),
    }
    assert {str(r.bridge) for r in matrix.rows} <= {"ok", "n/a"}


def test_glm_4_6_string_matrix() -> None:
    matrix = run_matrix(template_path("glm-4.6"))
    assert _cells(matrix) == {
        ("tool_call_then_result", "default"): ("ok", "ok"),
        ("tool_call_then_result", "enable_thinking=False"): ("ok", "ok"),
        ("user_turn_after_final", "default"): ("break@988", "ok"),
        ("user_turn_after_final", "enable_thinking=False"): ("ok", "ok"),
        ("parallel_tool_calls", "default"): ("ok", "ok"),
        ("parallel_tool_calls", "enable_thinking=False"): ("ok", "ok"),
        ("final_answer_no_tools", "default"): ("break@58", "ok"),
        ("final_answer_no_tools", "enable_thinking=False"): ("ok", "ok"),
        ("reasoning_truncated", "default"): ("break@72", "ok"),
        ("reasoning_truncated", "enable_thinking=False"): ("ok", "ok"),
        ("reasoning_trailing_blank_lines", "default"): ("break@1012", "ok"),
        ("reasoning_trailing_blank_lines", "enable_thinking=False"): ("ok", "ok"),
        ("args_reserialized", "default"): ("ok", "ok"),
        ("args_reserialized", "enable_thinking=False"): ("ok", "ok"),
        ("xml_params_coerced", "default"): ("break@1155", "ok"),
        ("xml_params_coerced", "enable_thinking=False"): ("break@1143", "ok"),
    }
    # GLM-4.6 replaces old thinking with an empty block and strips whitespace before </think>
    detail = matrix.cell("reasoning_trailing_blank_lines").string.detail
    assert detail == "('all get_weather.\\n\\n\\n</think>\\n<too', 'all get_weather.</think>\\n<tool_c')"


def test_kimi_k2_thinking_string_matrix() -> None:
    matrix = run_matrix(template_path("kimi-k2-thinking"))
    assert _cells(matrix) == {
        ("tool_call_then_result", "default"): ("ok", "ok"),
        ("user_turn_after_final", "default"): ("break@719", "ok"),
        ("parallel_tool_calls", "default"): ("ok", "ok"),
        ("final_answer_no_tools", "default"): ("break@194", "ok"),
        ("reasoning_truncated", "default"): ("break@208", "ok"),
        ("reasoning_trailing_blank_lines", "default"): ("ok", "ok"),  # Kimi does not strip reasoning
        ("args_reserialized", "default"): ("break@862", "ok"),
        ("xml_params_coerced", "default"): ("n/a", "n/a"),
    }


def test_gpt_oss_string_matrix() -> None:
    matrix = run_matrix(template_path("gpt-oss-20b"))
    assert _cells(matrix) == {
        ("tool_call_then_result", "default"): ("ok", "ok"),
        ("user_turn_after_final", "default"): ("break@695", "ok"),  # analysis dropped once a final exists
        ("parallel_tool_calls", "default"): ("n/a", "n/a"),  # the template renders one call per message
        ("final_answer_no_tools", "default"): ("break@329", "ok"),
        ("reasoning_truncated", "default"): ("break@343", "ok"),
        ("reasoning_trailing_blank_lines", "default"): ("ok", "ok"),
        ("args_reserialized", "default"): ("break@849", "ok"),  # arguments|tojson
        ("xml_params_coerced", "default"): ("n/a", "n/a"),
    }


def test_string_level_matrix_reports_token_cells_as_not_applicable() -> None:
    matrix = run_matrix(template_path("kimi-k2-thinking"))
    assert {r.token.status for r in matrix.rows} == {"n/a"}


def test_cli_prints_the_matrix_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--template", str(template_path("glm-4.6"))]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "PRR drift matrix: glm-4.6.jinja (family glm-4.6, tokenizer none)"
    assert "user_turn_after_final             default                     break@988" in out


def test_cli_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--template", str(template_path("kimi-k2-thinking")), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    row = next(r for r in payload["rows"] if r["scenario"] == "args_reserialized")
    assert row["string"]["status"] == "break" and row["string"]["offset"] == 862
    assert row["bridge"] == {"status": "ok", "offset": None, "detail": ""}


def test_cli_unknown_tokenizer_exits_two(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--template", str(template_path("qwen3.6")), "--tokenizer", "llama-9"]) == 2
    assert "TokenizerNotFound" in capsys.readouterr().err


def test_cli_template_that_raises_is_an_error_cell_not_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "raising.jinja"
    path.write_text("<function=example_function_name>{{ raise_exception('unsupported') }}")
    assert main(["--template", str(path)]) == 1
    out = capsys.readouterr().out.split("legend:")[0]
    assert "error: TemplateRenderError" in out and " ok" not in out


def test_demo_section_shows_qwen_default_and_preserve_thinking_with_the_bridge() -> None:
    text = demo_section()
    lines = text.splitlines()
    assert lines[0] == "PRR drift matrix: qwen3.6.jinja (family qwen3.6, tokenizer qwen3.6)"
    assert sum("preserve_thinking=True" in line for line in lines) == 8
    assert "enable_thinking" not in text
