"""The agent-cache benchmark in short (benchmarks/agent_cache.py runs the long one in ``make bench``).

The oracle (:func:`reasonstate.demo.agent.request_maxima`) is checked first on hand-written request and
response bodies with hand-counted tokens; then a short run of the coding agent shows rs.Session reaching
the maximum on every request, and the naive loop (clock in the system prompt, results in completion order)
missing it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reasonstate.demo import agent

SYSTEM = {"role": "system", "content": "abcd"}  # {"content":"abcd","role":"system"}: 34 bytes, 9 tokens
USER = {"role": "user", "content": "hi"}  # {"content":"hi","role":"user"}: 30 bytes, 8 tokens
#: {"content":"","reasoning_content":"think","role":"assistant","tool_calls":[{"function":{"arguments":"{}",
#: "name":"f"},"id":"c1","type":"function"}]}: 147 bytes, 37 tokens
CALLED = {
    "role": "assistant",
    "content": "",
    "reasoning_content": "think",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
ANSWER = {"role": "assistant", "content": "done", "reasoning_content": "long thoughts"}


def _response(message: dict[str, object]) -> dict[str, object]:
    return {"choices": [{"message": message}]}


def test_the_maximum_is_the_prefix_shared_with_the_previous_request_and_its_output() -> None:
    exchanges = [
        ({"messages": [SYSTEM, USER]}, _response(CALLED)),
        # replays the output as generated, then the tool result: shares system + user + the output
        ({"messages": [SYSTEM, USER, CALLED, RESULT]}, _response(ANSWER)),
        # a rewritten user message: only the system message is shared
        ({"messages": [SYSTEM, {"role": "user", "content": "hello"}]}, _response(ANSWER)),
    ]
    assert agent.request_maxima(exchanges) == [None, 9 + 8 + 37, 9]


def test_a_plain_answer_replayed_with_its_reasoning_shares_only_the_previous_input() -> None:
    # DeepSeek ignores reasoning_content on an assistant message without tool calls (docs/protocols.md
    # §3.3), so the replayed answer is not the output unit as generated (which carries it, §3.4)
    exchanges = [
        ({"messages": [SYSTEM, USER]}, _response(ANSWER)),
        ({"messages": [SYSTEM, USER, ANSWER, USER]}, _response(ANSWER)),
    ]
    assert agent.request_maxima(exchanges) == [None, 9 + 8]


def test_the_tools_are_the_first_segment() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    # {"tools":[{"function":{"name":"f"},"type":"function"}]}: 53 bytes, 14 tokens
    exchanges = [
        ({"tools": tools, "messages": [SYSTEM, USER]}, _response(ANSWER)),
        ({"tools": tools, "messages": [{"role": "system", "content": "abce"}, USER]}, _response(ANSWER)),
    ]
    assert agent.request_maxima(exchanges) == [None, 14]


def test_results_in_completion_order_are_counted_as_reordered() -> None:
    two = {**CALLED, "tool_calls": [{"id": "a"}, {"id": "b"}]}
    in_order = [two, {"role": "tool", "tool_call_id": "a"}, {"role": "tool", "tool_call_id": "b"}]
    swapped = [two, {"role": "tool", "tool_call_id": "b"}, {"role": "tool", "tool_call_id": "a"}]
    assert agent.reordered_steps([{"messages": in_order}]) == 0
    assert agent.reordered_steps([{"messages": swapped}, {"messages": [*swapped, USER]}]) == 1


def test_a_request_below_its_maximum_misses_the_target() -> None:
    rows = (
        agent.RequestFigures(turn=0, prompt=100, hit=0, output=10, maximum=None),
        agent.RequestFigures(turn=0, prompt=200, hit=100, output=10, maximum=100),
        agent.RequestFigures(turn=1, prompt=300, hit=98, output=10, maximum=100),
        agent.RequestFigures(turn=1, prompt=300, hit=0, output=10, maximum=250, declared_break=True),
    )
    run = agent.AgentRun("x", 2, rows, folds=1, storm_breaks=0, cost_usd=0.0)
    assert [r.maximum for r in run.measured()] == [100, 100]  # the first and the declared break left out
    assert run.of_maximum == pytest.approx(198 / 200)
    assert run.worst_of_maximum == pytest.approx(0.98)
    assert not run.meets_target


SHORT = 8  # turns: four tickets (the storm in turn 6) and four follow-ups; under the fold threshold


@pytest.fixture(scope="module")
def runs() -> tuple[agent.AgentRun, agent.AgentRun]:
    return agent.run_session(SHORT), agent.run_naive(SHORT)


def test_the_session_reaches_the_maximum_on_every_request(
    runs: tuple[agent.AgentRun, agent.AgentRun],
) -> None:
    session, _ = runs
    assert len(session.requests) == 4 * 4 + 2 + 4  # tickets: 4 requests (+2 for the storm); follow-ups: 1
    assert session.requests[0].hit == 0 and session.requests[0].maximum is None
    assert len(session.measured()) == len(session.requests) - 1  # no break in a short run
    assert all(r.hit == r.maximum for r in session.measured())
    assert session.meets_target and session.of_maximum == 1.0
    assert session.predicted == (len(session.requests), len(session.requests))
    assert session.reordered_steps == 0


def test_the_naive_loop_misses_the_target_and_costs_more(runs: tuple[agent.AgentRun, agent.AgentRun]) -> None:
    session, naive = runs
    assert len(naive.requests) == len(session.requests)
    assert not naive.meets_target  # its second request shares the tools but the server has no unit there
    assert naive.hit_ratio < 0.2 < 0.9 < session.hit_ratio
    assert session.cost_usd < naive.cost_usd / 3
    # the cost from the wire's usage at the packaged prices is the session's own report
    assert session.reported_cost_usd == pytest.approx(session.cost_usd, rel=1e-9)
    assert naive.reordered_steps >= 1  # the module read, named first, finishes after the test file's


def test_both_loops_ran_the_scripted_tools(runs: tuple[agent.AgentRun, agent.AgentRun]) -> None:
    storm_read = ("read_file", json.dumps({"path": "app/auth.py"}))  # turn 6 is ticket 3: app/auth.py
    session, naive = runs
    assert session.edits_applied == naive.edits_applied == 4  # every ticket's edit found its line
    assert naive.calls.count(storm_read) == 3  # no breaker in the naive loop: the storm ran in full


def test_the_session_breaks_the_storm_once(runs: tuple[agent.AgentRun, agent.AgentRun]) -> None:
    session, _ = runs
    assert session.storm_breaks == 1
    assert session.events_by_turn[agent.STORM_TURN] == (0, 1)
    assert session.calls.count(("read_file", json.dumps({"path": "app/auth.py"}))) == 2


def test_the_fold_summary_keeps_the_goal_the_settings_and_the_files() -> None:
    head = (
        "user: Ticket 100: LIMIT_0 is too low\nassistant: search LIMIT_0\ntool: app/net.py:3: LIMIT_0 = 0\n"
        "tool: read tests/test_cache.py\nuser: Ticket 104: LIMIT_4 is too low\ntool: edited app/db.py"
    )
    assert agent.summarize(head) == (
        "Summary of the earlier conversation. Goal: raise LIMIT_* settings tenfold, one ticket per turn, "
        "with the smallest edit. Constraints: search before reading, read before editing, no new files. "
        "Settings already handled: LIMIT_0, LIMIT_4. Files seen or changed: app/db.py, app/net.py, "
        "tests/test_cache.py. Open todos: none."
    )


def test_the_benchmark_script_prints_both_runs_and_exits_0_on_target() -> None:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "benchmarks/agent_cache.py", "--turns", str(SHORT)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = re.findall(r"^(rs\.Session|naive loop) +(\d+) ", out.stdout, re.M)
    assert rows == [("rs.Session", "22"), ("naive loop", "22")]  # the side-by-side table
    assert "worst request 100.00%" in out.stdout
