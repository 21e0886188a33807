"""``reasonstate demo``: its opening measures what goes wrong without the library (on the strict emulators,
from the vendors' own HTTP answers), its tables carry units and a reading, and its flags behave.

Only the opening section runs here (a few seconds); the policy tables reuse the sessions the other tests
cover, and the token sections have their own tests (tests/tokens)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reasonstate.demo import job, sections
from reasonstate.demo.opening import Opening
from reasonstate.demo.render import PlainOutput, RichOutput, Table, make_output

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def opening() -> tuple[Opening, str]:
    buffer = io.StringIO()
    result = sections.opening(PlainOutput(buffer))
    return result, buffer.getvalue()


def test_plain_loops_that_lose_continuation_state_get_each_vendors_400(opening: tuple[Opening, str]) -> None:
    result, _ = opening
    by_vendor = {r.vendor: r for r in result.rejections}
    assert set(by_vendor) == {"Anthropic", "DeepSeek", "Gemini"}
    assert {r.status for r in result.rejections} == {400}
    assert result.plain_400s == 3
    # the tool chain's second call, the first to replay the lost state (docs/protocols.md §4.3, §3.3, §5.4)
    assert {r.request for r in result.rejections} == {1}
    assert (
        "Expected `thinking` or `redacted_thinking`, but found `tool_use`" in by_vendor["Anthropic"].message
    )
    assert by_vendor["DeepSeek"].message == (
        "The reasoning_content in the thinking mode must be passed back to the API."
    )
    assert "Function call is missing a thought_signature" in by_vendor["Gemini"].message


def test_the_same_job_through_the_session_gets_no_http_error(opening: tuple[Opening, str]) -> None:
    result, _ = opening
    assert {s.vendor for s in result.sessions} == {"Anthropic", "DeepSeek", "Gemini"}
    for run in result.sessions:
        assert run.statuses == (200,) * 8, run  # 4 user turns, the first a 3-call tool chain
    assert result.session_errors == 0


def test_a_clock_in_the_system_prompt_loses_cache_hits_the_session_keeps(
    opening: tuple[Opening, str],
) -> None:
    result, _ = opening
    series = {plain.vendor: (plain, session) for plain, session in result.cache}
    assert set(series) == {"Anthropic", "DeepSeek"}
    for plain, session in series.values():
        assert plain.statuses == session.statuses == (200,) * 8
        assert len(plain.cached) == len(session.cached) == 8
        assert session.cached[0] == plain.cached[0] == 0  # nothing to hit yet
        # from the second request on, the session reads more from cache than the plain loop, every time
        assert all(s > p for p, s in zip(plain.cached[1:], session.cached[1:], strict=True))
    anthropic_plain, anthropic_session = series["Anthropic"]
    assert anthropic_plain.field == "cache_read_input_tokens"
    assert sum(anthropic_plain.cached) == 0
    # Anthropic reads back exactly the previous request's prompt (its automatic breakpoint)
    assert anthropic_session.cached[1:] == anthropic_session.prompt[:-1]
    assert series["DeepSeek"][0].field == "prompt_cache_hit_tokens"
    assert result.lost_hits() == 14
    advice = {s.volatile_advice for s in result.sessions}
    assert len(advice) == 1 and "clock time in the system prompt" in str(advice.pop())


def test_the_opening_prints_the_vendor_messages_and_the_cached_tokens_as_plain_text(
    opening: tuple[Opening, str],
) -> None:
    result, text = opening
    assert "\x1b[" not in text  # no terminal codes when the output is not a TTY
    for r in result.rejections:
        assert f"{r.vendor} 400: {r.message}" in text
    assert "1. Without reasonstate" in text
    table = text.split("Prefix cache with the current time")[1]
    total = next(line for line in table.splitlines() if line.startswith("total"))
    _, session_anthropic = result.cache[0]
    assert f"{sum(session_anthropic.cached):,}" in total and "0 (0%)" in total
    assert sum(line.startswith("> ") for line in text.splitlines()) == 2  # one reading per table


def test_every_opening_column_names_its_unit(opening: tuple[Opening, str]) -> None:
    result, _ = opening
    for table in sections.opening_tables(result):
        _assert_units(table)
        assert len(table.reading) == 1


def _assert_units(table: Table) -> None:
    for name in table.header[table.labels :]:
        assert "(" in name and name.endswith(")"), (table.title, name)


def test_deepseek_policy_rows_are_identical_and_the_reading_says_why() -> None:
    vendor = next(v for v in job.VENDORS if v.key == "deepseek")
    table, stats = job.vendor_table(vendor, live=False)
    _assert_units(table)
    assert len({(s.input_tokens, s.cache_read, s.active_context) for s in stats}) == 1
    keep, drop, _ = stats
    assert keep.sent_bytes > drop.sent_bytes  # Keep sends reasoning_content DeepSeek ignores on plain answers
    assert table.reading[0].startswith("Identical token rows") and "§3.3" in table.reading[0]


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "reasonstate.cli", "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_prints_the_usage_and_runs_nothing() -> None:
    out = _demo("--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: reasonstate demo")
    assert "--live" in out.stdout and "Without reasonstate" not in out.stdout


def test_an_unknown_flag_is_a_usage_error() -> None:
    out = _demo("--bogus")
    assert out.returncode == 2
    assert "unrecognized arguments: --bogus" in out.stderr
    assert out.stdout == ""


def test_neither_reasonstate_nor_the_demo_module_imports_rich() -> None:
    code = "import sys, reasonstate, reasonstate.demo; print('rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_rich_output_and_anything_else_plain_text() -> None:
    assert isinstance(make_output(io.StringIO()), PlainOutput)
    assert isinstance(make_output(_Terminal(), plain=True), PlainOutput)
    terminal = _Terminal()
    out = make_output(terminal)
    assert isinstance(out, RichOutput)
    with out.status("working"):
        out.table(Table("t [x]", ("name", "size (tokens)"), (("a", "1,024"),), ("reading [y]",)))
    text = terminal.getvalue()
    assert "t [x]" in text and "size (tokens)" in text and "1,024" in text and "reading [y]" in text


def test_the_policy_and_switch_tables_name_their_units() -> None:
    _assert_units(Table("policies", job.HEADER, ()))
    _assert_units(Table("switch", job.SWITCH_HEADER, (), labels=2))


def test_live_without_any_key_says_which_to_set_and_exits_2() -> None:
    keys = {v.key_env for v in job.VENDORS}
    env = {k: v for k, v in os.environ.items() if k not in keys}
    out = subprocess.run(
        [sys.executable, "-m", "reasonstate.cli", "demo", "--live"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert all(k in out.stderr for k in keys) and out.stdout == ""
