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

from reasonstate.demo import agent, job, sections
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
    """Pain point: dimagi/open-chat-studio#3625 (second-precision time in the system prompt)."""
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
    flowing = " ".join(text.split())  # plain text wraps at 100 columns
    for r in result.rejections:
        assert " ".join(f"{r.vendor} 400: {r.message}".split()) in flowing
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
    """Pain point: Reasonix REASONING_PROVIDERS.md (reasoning_content replay: strip mode vs full mode)."""
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


# -- the cache-first coding agent (section 5) ------------------------------------------------------------
@pytest.fixture(scope="module")
def coding_agent() -> tuple[agent.AgentRun, str]:
    buffer = io.StringIO()
    run = sections.agent(PlainOutput(buffer))
    return run, buffer.getvalue()


def test_the_agent_runs_32_turns_of_tool_chains_and_follow_ups(
    coding_agent: tuple[agent.AgentRun, str],
) -> None:
    run, _ = coding_agent
    assert run.turns == agent.TURNS == 32
    # 16 tickets of 4 model calls (search, two reads, edit, answer), 2 more in the storm; 16 follow-ups of 1
    assert len(run.requests) == 16 * 4 + 2 + 16
    assert [r.turn for r in run.requests if r.turn % 2] == list(range(1, 32, 2))
    assert sum(1 for name, _ in run.calls if name == "edit_file") == run.edits_applied == 16


def test_the_agent_hits_the_maximum_on_every_request_that_is_not_a_declared_break(
    coding_agent: tuple[agent.AgentRun, str],
) -> None:
    run, _ = coding_agent
    assert run.meets_target and run.worst_of_maximum >= agent.TARGET
    assert len(run.measured()) == len(run.requests) - 1 - sum(r.declared_break for r in run.requests)
    assert run.reordered_steps == 0
    assert run.hit_ratio > 0.95  # the prompt is almost all history the server already holds


def test_the_agent_table_names_its_units_and_reads_in_one_line(
    coding_agent: tuple[agent.AgentRun, str],
) -> None:
    run, text = coding_agent
    table = agent.agent_table(run)
    _assert_units(table)
    assert len(table.reading) == 1
    assert len(table.rows) == 8  # blocks of 4 turns
    assert table.rows[-1][4] == f"{100 * run.hit_ratio:.1f}"  # the last cumulative ratio is the whole run's
    assert "5. A cache-first coding agent" in text
    assert " ".join(table.reading[0].split()) in " ".join(text.split())  # plain text wraps at 100 columns
    assert "\x1b[" not in text


def test_only_agent_is_a_demo_part() -> None:
    from reasonstate.demo import parser

    assert parser().parse_args(["--only", "agent"]).only == "agent"


def test_the_agent_context_folds_twice_each_a_declared_break(
    coding_agent: tuple[agent.AgentRun, str],
) -> None:
    run, _ = coding_agent
    assert run.folds == 2
    assert sum(f for f, _ in run.events_by_turn) == 2
    assert sum(r.declared_break for r in run.requests) == 2  # every cache break is a fold
    assert max(r.prompt for r in run.requests) < agent.FOLD_THRESHOLD_TOKENS + 2_000


def test_the_persist_part_runs_the_job_through_the_embedded_store() -> None:
    """Issue 22: SQLiteStore is what make demo uses: three workers take the session's turns through one
    file, a stale worker is refused with its paid reply, and a load sends what the writer would."""
    from reasonstate.demo.persist import TURNS, persist_table, run_persisted

    run = run_persisted()
    assert len(run.rows) == TURNS
    assert [int(r[2]) for r in run.rows] == sorted(int(r[2]) for r in run.rows)  # versions only grow
    assert run.conflict_refused and run.paid_reply_kept and run.next_request_equal
    assert run.stored_bytes <= 1.5 * run.received_bytes
    assert "refused with SessionConflict" in persist_table(run).reading[0]


# -- plain text fits 100 columns, and says what its terms mean (issue 24 item 4) --------------------------
def test_a_plain_table_wraps_its_headers_then_its_text_cells_to_fit_the_width() -> None:
    table = Table(
        "t",
        (
            "vendor",
            "what the plain loop does",
            "plain: refused request (#, from 0)",
            "rs.Session: requests (count)",
        ),
        (
            (
                "Anthropic",
                "reply stored as text + tool calls, rendered back: thinking blocks dropped",
                "1",
                "8",
            ),
        ),
        ("a reading long enough to wrap: " + "word " * 30,),
        labels=2,
    )
    lines = table.plain(width=60).splitlines()
    assert lines == [
        "t",
        "                                         plain:",
        "                                        refused",
        "                                        request  rs.Session:",
        "                                            (#,     requests",
        "vendor     what the plain loop does     from 0)      (count)",
        "---------  ---------------------------  -------  -----------",
        "Anthropic  reply stored as text + tool        1            8",
        "           calls, rendered back:",
        "           thinking blocks dropped",
        "> a reading long enough to wrap: word word word word word",
        "  word word word word word word word word word word word",
        "  word word word word word word word word word word word",
        "  word word word",
    ]


@pytest.mark.long
def test_the_whole_demo_piped_fits_100_columns_and_explains_its_terms() -> None:
    """Issue 24 item 4: piped, 99 lines of make demo were wider than 120 columns (up to 479), and "PRR",
    "declared breaks" and "storm breaks" appeared without a word on what they are."""
    out = subprocess.run(
        [sys.executable, "-m", "reasonstate.cli", "demo"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,  # piped: plain text
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) > 200 and "6. Sessions that outlive a process" in out.stdout
    wide = [(n, len(line)) for n, line in enumerate(lines) if len(line) > 100]
    assert not wide, wide
    # where each term first appears, it is explained
    for term, explained in [
        ("PRR", "PRR (Parse-Render Roundtrip):"),
        ("declared break", "declared break: a cache break"),
        ("storm break", "storm break: the storm breaker suppressed"),
        ("n/a", "n/a: the prefix diverged"),
    ]:
        first = next(i for i, line in enumerate(lines) if term in line.lower() or term in line)
        assert explained.lower() in " ".join(lines[first : first + 3]).lower(), (term, lines[first])
