"""``run()``'s tool dispatch (reasonstate/runtime/dispatch.py): declared order, barriers, async handlers, a
loop that is never blocked, raising and hanging handlers, and the storm breaker — real SDK clients over HTTP
against the emulators; every expectation is read back from the request bytes the emulator recorded."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests.conftest import MODEL, body

OBJECT = {"type": "object", "properties": {}}
FINAL = ModelAction.answer("done")


def tool(name: str, handler: Callable[..., Any], **kw: Any) -> rs.Tool:
    return rs.Tool(name=name, parameters=OBJECT, handler=handler, **kw)


def session_on(emu: AnthropicEmulator, tools: list[rs.Tool]) -> rs.Session:
    return rs.Session(emu.client(), model=MODEL, tools=tools, max_tokens=1024)


def async_session_on(emu: AnthropicEmulator, tools: list[rs.Tool]) -> rs.AsyncSession:
    return rs.AsyncSession(emu.async_client(), model=MODEL, tools=tools, max_tokens=1024)


def sent_results(emu: AnthropicEmulator, i: int) -> list[dict[str, Any]]:
    """The tool_result blocks request ``i`` carried (its last message), as the SDK put them on the wire."""
    blocks: list[dict[str, Any]] = body(emu, i)["messages"][-1]["content"]
    assert all(b["type"] == "tool_result" for b in blocks)
    return blocks


def declared_ids(emu: AnthropicEmulator, i: int) -> list[str]:
    """The ids of the tool_use blocks the model declared, in order, as replayed in request ``i``."""
    assistant = body(emu, i)["messages"][-2]
    return [b["id"] for b in assistant["content"] if b["type"] == "tool_use"]


def executed(session: rs.Session | rs.AsyncSession) -> list[dict[str, Any]]:
    return [dict(t) for e in session.trace.of_kind(EventKind.TOOL_EXECUTED) for t in e.data["calls"]]


@pytest.fixture
def emu() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator() as emulator:
        yield emulator


# -- declared order ------------------------------------------------------------------------------------------
@settings(max_examples=12)  # slow examples (whole sessions or rollouts): capped below the profile's 100
@given(delays=st.lists(st.sampled_from([0.0, 0.01, 0.02, 0.04]), min_size=2, max_size=6))
def test_results_go_back_in_declared_order_whatever_order_the_handlers_finish_in(delays: list[float]) -> None:
    finished: list[int] = []

    def work(n: int) -> dict[str, int]:
        time.sleep(delays[n])
        finished.append(n)
        return {"n": n}

    calls = [ToolCallSpec("work", {"n": n}) for n in range(len(delays))]
    with AnthropicEmulator([ModelAction.call(*calls), FINAL]) as emu:
        session = session_on(emu, [tool("work", work, parallel_safe=True)])
        assert session.run("go").text == "done"
        results = sent_results(emu, 1)
        assert [r["tool_use_id"] for r in results] == declared_ids(emu, 1)
        assert [r["content"] for r in results] == [f'{{"n":{n}}}' for n in range(len(delays))]
        assert sorted(finished) == list(range(len(delays)))


def test_a_call_that_finishes_first_is_still_sent_last_when_declared_last(emu: AnthropicEmulator) -> None:
    finished: list[str] = []

    def slow(tag: str) -> str:
        time.sleep({"a": 0.15, "b": 0.0}[tag])
        finished.append(tag)
        return tag

    emu.script.extend(
        [ModelAction.call(ToolCallSpec("slow", {"tag": "a"}), ToolCallSpec("slow", {"tag": "b"})), FINAL]
    )
    session = session_on(emu, [tool("slow", slow, parallel_safe=True)])
    session.run("go")
    assert finished == ["b", "a"]  # b finished first ...
    assert [r["content"] for r in sent_results(emu, 1)] == ["a", "b"]  # ... and is sent second, as declared


# -- barriers --------------------------------------------------------------------------------------------
def test_a_non_parallel_safe_call_is_a_barrier_between_concurrent_groups() -> None:
    spans: dict[str, tuple[float, float]] = {}

    def timed(tag: str) -> str:
        start = time.perf_counter()
        time.sleep(0.1)
        spans[tag] = (start, time.perf_counter())
        return f"did {tag}"

    order = ["a", "b", "write", "c", "d"]
    calls = [ToolCallSpec("write" if t == "write" else "read", {"tag": t}) for t in order]
    tools = [tool("read", timed, parallel_safe=True), tool("write", timed)]
    with OpenAIChatEmulator([ModelAction.call(*calls), FINAL], dialect="deepseek") as emu:
        session = rs.Session(emu.client(), model="deepseek-v4-pro", dialect="deepseek", tools=tools)
        assert session.run("go").text == "done"
        sent = json.loads(emu.requests[1].body)["messages"]
    (a, b, w, c, d) = (spans[t] for t in order)

    def overlap(x: tuple[float, float], y: tuple[float, float]) -> bool:
        return x[0] < y[1] and y[0] < x[1]

    assert overlap(a, b) and overlap(c, d)  # within a parallel group: concurrent
    assert max(a[1], b[1]) <= w[0] and w[1] <= min(c[0], d[0])  # nothing crosses the barrier
    declared = [c["id"] for c in sent[-len(order) - 1]["tool_calls"]]
    tool_messages = sent[-len(order) :]
    assert [m["role"] for m in tool_messages] == ["tool"] * len(order)
    assert [m["tool_call_id"] for m in tool_messages] == declared
    assert [m["content"] for m in tool_messages] == [f"did {t}" for t in order]


# -- async handlers ----------------------------------------------------------------------------------------
async def lookup(city: str) -> dict[str, Any]:
    await asyncio.sleep(0.01)
    return {"city": city, "temp": {"Paris": 18, "Rome": 22}[city]}


TWO_LOOKUPS = ModelAction.call(
    ToolCallSpec("lookup", {"city": "Paris"}), ToolCallSpec("lookup", {"city": "Rome"})
)
LOOKED_UP = ['{"city":"Paris","temp":18}', '{"city":"Rome","temp":22}']


@pytest.mark.parametrize("parallel_safe", [True, False])
def test_an_async_handler_is_awaited_under_a_sync_session(
    emu: AnthropicEmulator, parallel_safe: bool
) -> None:
    emu.script.extend([TWO_LOOKUPS, FINAL])
    session = session_on(emu, [tool("lookup", lookup, parallel_safe=parallel_safe)])
    assert session.run("Paris or Rome?").text == "done"
    assert [r["content"] for r in sent_results(emu, 1)] == LOOKED_UP
    assert [t["outcome"] for t in executed(session)] == ["ok", "ok"]


@pytest.mark.parametrize("parallel_safe", [True, False])
def test_an_async_handler_is_awaited_under_an_async_session(
    emu: AnthropicEmulator, parallel_safe: bool
) -> None:
    emu.script.extend([TWO_LOOKUPS, FINAL])

    async def main() -> rs.AsyncSession:
        session = async_session_on(emu, [tool("lookup", lookup, parallel_safe=parallel_safe)])
        assert (await session.run("Paris or Rome?")).text == "done"
        return session

    session = asyncio.run(main())
    assert [r["content"] for r in sent_results(emu, 1)] == LOOKED_UP
    assert session.state is rs.TurnState.IDLE


def test_an_async_callable_object_runs_on_the_async_sessions_own_loop(emu: AnthropicEmulator) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    class Lookup:  # async __call__: awaited as a task on the session's loop, not run on a thread
        async def __call__(self, city: str) -> str:
            loops.append(asyncio.get_running_loop())
            return city

    emu.script.extend([TWO_LOOKUPS, FINAL])

    async def main() -> asyncio.AbstractEventLoop:
        await async_session_on(emu, [tool("lookup", Lookup(), parallel_safe=True)]).run("go")
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert loops == [loop, loop]
    assert [r["content"] for r in sent_results(emu, 1)] == ["Paris", "Rome"]


def test_async_session_run_never_blocks_the_event_loop(emu: AnthropicEmulator) -> None:
    ticks = [0]
    seen: dict[str, int] = {}

    def blocking(tag: str) -> str:  # a plain sync handler that blocks its thread
        seen["start"] = ticks[0]
        time.sleep(0.3)
        seen["end"] = ticks[0]
        return tag

    emu.script.extend([ModelAction.call(ToolCallSpec("blocking", {"tag": "x"})), FINAL])

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.01)
            ticks[0] += 1

    async def main() -> None:
        task = asyncio.create_task(ticker())
        await async_session_on(emu, [tool("blocking", blocking)]).run("go")
        task.cancel()

    asyncio.run(main())
    assert seen["end"] - seen["start"] >= 10  # ~30 ticks of 10 ms while the handler slept 300 ms


# -- failing handlers ---------------------------------------------------------------------------------------
def test_a_raising_handler_is_an_error_result_the_model_sees_and_the_run_goes_on(
    emu: AnthropicEmulator,
) -> None:
    def broken(path: str) -> str:
        raise FileNotFoundError(f"no such file: {path}")

    emu.script.extend(
        [ModelAction.call(ToolCallSpec("read", {"path": "a.txt"}), ToolCallSpec("ok", {})), FINAL]
    )
    session = session_on(emu, [tool("read", broken), tool("ok", lambda: "fine")])
    assert session.run("read it").text == "done"
    error, fine = sent_results(emu, 1)
    assert error["is_error"] is True and error["content"] == "FileNotFoundError: no such file: a.txt"
    assert "is_error" not in fine and fine["content"] == "fine"
    assert [t["outcome"] for t in executed(session)] == ["error", "ok"]


def test_a_hanging_sync_handler_times_out_into_an_error_result(emu: AnthropicEmulator) -> None:
    release = threading.Event()

    def hangs() -> str:
        release.wait(10)
        return "too late"

    emu.script.extend([ModelAction.call(ToolCallSpec("hangs", {}), ToolCallSpec("quick", {})), FINAL])
    tools = [
        tool("hangs", hangs, parallel_safe=True, timeout=0.2),
        tool("quick", lambda: "q", parallel_safe=True),
    ]
    session = session_on(emu, tools)
    started = time.perf_counter()
    try:
        assert session.run("go").text == "done"
        elapsed = time.perf_counter() - started
    finally:
        release.set()
    assert elapsed < 2.0  # the abandoned thread is not waited for
    timed_out, quick = sent_results(emu, 1)
    assert timed_out["is_error"] is True
    assert timed_out["content"].startswith("timeout: hangs did not finish within 0.2 s")
    assert quick["content"] == "q"
    timings = executed(session)
    assert [t["outcome"] for t in timings] == ["timeout", "ok"]
    assert 0.2 <= timings[0]["duration_s"] < 1.5


def test_run_tool_timeout_cancels_a_hanging_async_handler_and_spares_a_hung_sync_one(
    emu: AnthropicEmulator,
) -> None:
    cancelled = threading.Event()
    release = threading.Event()

    async def sleeps() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    def blocks() -> str:
        release.wait(10)
        return "never"

    emu.script.extend([ModelAction.call(ToolCallSpec("sleeps", {}), ToolCallSpec("blocks", {})), FINAL])

    async def main() -> None:
        session = async_session_on(emu, [tool("sleeps", sleeps), tool("blocks", blocks)])
        assert (await session.run("go", tool_timeout=0.2)).text == "done"

    started = time.perf_counter()
    try:
        asyncio.run(main())  # returns: nothing joins the thread of the hung handler
        elapsed = time.perf_counter() - started
    finally:
        release.set()
    assert elapsed < 2.0
    assert cancelled.is_set()
    results = sent_results(emu, 1)
    assert [r["is_error"] for r in results] == [True, True]
    assert [r["content"].split(" did not")[0] for r in results] == ["timeout: sleeps", "timeout: blocks"]


def test_a_result_that_is_not_json_is_an_error_result_not_a_stuck_session(emu: AnthropicEmulator) -> None:
    emu.script.extend([ModelAction.call(ToolCallSpec("odd", {})), FINAL])
    session = session_on(emu, [tool("odd", lambda: {1, 2})])
    assert session.run("go").text == "done"
    (result,) = sent_results(emu, 1)
    assert result["is_error"] is True
    assert result["content"] == (
        "odd returned a result that is not JSON-serializable: Object of type set is not JSON serializable"
    )


# -- storm breaker ----------------------------------------------------------------------------------------
def read_steps(*paths: str) -> list[ModelAction]:
    return [ModelAction.call(ToolCallSpec("read", {"path": p})) for p in paths]


def counting_reader() -> tuple[rs.Tool, list[str]]:
    reads: list[str] = []

    def read(path: str) -> str:
        reads.append(path)
        return f"contents of {path}"

    return tool("read", read), reads


def test_the_same_call_twice_within_six_calls_runs_both_times(emu: AnthropicEmulator) -> None:
    emu.script.extend([*read_steps("a", "a"), FINAL])
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    session.run("go")
    assert reads == ["a", "a"]
    assert session.trace.of_kind(EventKind.TOOL_SUPPRESSED) == []


def test_the_third_same_call_within_six_calls_is_suppressed_with_an_explanation(
    emu: AnthropicEmulator,
) -> None:
    same_reversed = ModelAction.call(ToolCallSpec("read", {"path": "a", "limit": 5}))
    emu.script.extend(
        [
            ModelAction.call(ToolCallSpec("read", {"limit": 5, "path": "a"})),
            ModelAction.call(ToolCallSpec("other", {}), ToolCallSpec("read", {"limit": 5, "path": "a"})),
            same_reversed,  # the same arguments in another key order: the same call
            FINAL,
        ]
    )
    reads: list[str] = []

    def read(path: str, limit: int) -> str:
        reads.append(path)
        return "text"

    session = session_on(emu, [tool("read", read), tool("other", lambda: "o")])
    assert session.run("go").text == "done"
    assert reads == ["a", "a"]  # the third never ran
    (result,) = sent_results(emu, 3)
    assert result["is_error"] is True
    assert result["content"].startswith(
        "suppressed: read was called with the same arguments 3 times in the last 6 calls;"
    )
    (event,) = session.trace.of_kind(EventKind.TOOL_SUPPRESSED)
    assert dict(event.data) == {
        "turn": 0,
        "call_id": declared_ids(emu, 3)[0],
        "name": "read",
        "count": 3,
        "repeats": 3,
        "window": 6,
    }
    assert [t["outcome"] for t in executed(session)] == ["ok", "ok", "ok", "suppressed"]


def test_three_same_calls_spread_over_more_than_six_calls_all_run(emu: AnthropicEmulator) -> None:
    # turn 0: a; turn 1: b c d e f, then a (5 calls between: one earlier a in the window), then a again
    emu.script.extend([*read_steps("a"), FINAL, *read_steps("b", "c", "d", "e", "f", "a", "a"), FINAL])
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    session.run("first")
    session.run("second")
    assert reads == ["a", "b", "c", "d", "e", "f", "a", "a"]
    assert session.trace.of_kind(EventKind.TOOL_SUPPRESSED) == []


def test_three_same_calls_spread_over_more_than_six_calls_of_one_step_all_run(
    emu: AnthropicEmulator,
) -> None:
    paths = ["a", "b", "c", "d", "e", "f", "a", "a"]
    emu.script.extend([ModelAction.call(*(ToolCallSpec("read", {"path": p}) for p in paths)), FINAL])
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    session.run("go")
    assert reads == paths
    assert [r.get("is_error", False) for r in sent_results(emu, 1)] == [False] * len(paths)


def test_a_new_user_turn_starts_the_storm_window_afresh(emu: AnthropicEmulator) -> None:
    # the same read once per turn (a test run after each request, say) is no storm
    emu.script.extend([*read_steps("a", "a"), FINAL, *read_steps("a"), FINAL, *read_steps("a"), FINAL])
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    for text in ("first", "second", "third"):
        session.run(text)
    assert reads == ["a", "a", "a", "a"]
    assert session.trace.of_kind(EventKind.TOOL_SUPPRESSED) == []


def test_earlier_steps_of_the_turn_count_toward_the_storm_window(emu: AnthropicEmulator) -> None:
    emu.script.extend([*read_steps("a"), FINAL, *read_steps("a", "a", "a"), FINAL])
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    session.run("first")
    session.run("second")
    assert reads == ["a", "a", "a"]
    assert sent_results(emu, 5)[0]["content"].startswith("suppressed: read")


def test_the_storm_breaker_on_deepseek_answers_in_the_tool_message() -> None:
    reader, reads = counting_reader()
    with OpenAIChatEmulator(
        [*read_steps("a"), FINAL, *read_steps("a", "a", "a"), FINAL], dialect="deepseek"
    ) as emu:
        session = rs.Session(emu.client(), model="deepseek-v4-pro", dialect="deepseek", tools=[reader])
        session.run("first")
        session.run("second")
        last = json.loads(emu.requests[5].body)["messages"][-1]
    assert reads == ["a", "a", "a"]
    assert last["role"] == "tool" and last["content"].startswith(
        "suppressed: read was called with the same arguments 3 times in the last 6 calls;"
    )


def test_parallel_repeats_in_one_step_and_a_custom_breaker(emu: AnthropicEmulator) -> None:
    emu.script.extend([ModelAction.call(*(ToolCallSpec("read", {"path": "a"}) for _ in range(3))), FINAL] * 2)
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    session.run("first")
    assert reads == ["a", "a"]
    assert [r.get("is_error", False) for r in sent_results(emu, 1)] == [False, False, True]
    reads.clear()
    session.run("second", storm_breaker=None)  # off: everything runs
    assert reads == ["a", "a", "a"]


def test_storm_breaker_and_timeouts_are_validated() -> None:
    for bad in ({"repeats": 1}, {"repeats": 3, "window": 2}, {"repeats": True}, {"window": 6.0}):
        with pytest.raises(rs.InvalidOption):
            rs.StormBreaker(**bad)
    assert rs.StormBreaker() == rs.StormBreaker(repeats=3, window=6)
    for bad_timeout in (0, -1, "1", True, float("nan"), float("inf")):
        with pytest.raises(rs.InvalidOption, match="timeout"):
            rs.Tool(name="t", timeout=bad_timeout)
    assert rs.Tool(name="t", timeout=1).timeout == 1


@pytest.mark.parametrize("options", [{"tool_timeout": 0}, {"tool_timeout": "1"}, {"storm_breaker": 3}])
def test_bad_run_options_are_refused_before_anything_is_sent(
    emu: AnthropicEmulator, options: dict[str, Any]
) -> None:
    session = session_on(emu, [])
    with pytest.raises(rs.InvalidOption):
        session.run("go", **options)
    assert emu.requests == [] and len(session.history) == 0 and session.state is rs.TurnState.IDLE


def test_a_tool_timeout_survives_a_snapshot(emu: AnthropicEmulator) -> None:
    reader = rs.Tool(
        name="read", parameters=OBJECT, handler=lambda path: path, timeout=0.5, parallel_safe=True
    )
    session = session_on(emu, [reader])
    restored = rs.Session.restore(session.snapshot(), emu.client(), tools=[reader])
    assert restored.prefix.tool("read") == reader
    assert restored.prefix.canonical_bytes == session.prefix.canonical_bytes


def test_otel_tool_spans_name_the_outcome_and_the_turn_carries_the_suppression(
    emu: AnthropicEmulator,
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from reasonstate.export.otel import OTelExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    release = threading.Event()
    reader, _ = counting_reader()
    hangs = tool("hangs", lambda: release.wait(10), timeout=0.1)
    emu.script.extend(
        [
            ModelAction.call(
                *(ToolCallSpec("read", {"path": "a"}) for _ in range(3)), ToolCallSpec("hangs", {})
            ),
            FINAL,
        ]
    )
    session = rs.Session(
        emu.client(), model=MODEL, tools=[reader, hangs], max_tokens=1024, exporters=[OTelExporter(provider)]
    )
    try:
        session.run("go")
    finally:
        release.set()
    session.close()
    finished = spans.get_finished_spans()
    tool_spans = sorted(
        (s for s in finished if s.name.startswith("execute_tool ")), key=lambda s: s.start_time or 0
    )
    errors = [(s.name, (s.attributes or {}).get("error.type")) for s in tool_spans]
    assert sorted(errors, key=str) == sorted(
        [
            ("execute_tool read", None),
            ("execute_tool read", None),
            ("execute_tool read", "suppressed"),
            ("execute_tool hangs", "timeout"),
        ],
        key=str,
    )
    (turn,) = [s for s in finished if s.name.startswith("reasonstate.turn")]
    (event,) = [e for e in turn.events if e.name == EventKind.TOOL_SUPPRESSED]
    assert dict(event.attributes or {}) == {
        "reasonstate.turn": 0,
        "reasonstate.call_id": declared_ids(emu, 1)[2],
        "reasonstate.name": "read",
        "reasonstate.count": 3,
        "reasonstate.repeats": 3,
        "reasonstate.window": 6,
    }


def test_change_prefix_with_the_same_bytes_still_attaches_handlers_and_timeouts(
    emu: AnthropicEmulator,
) -> None:
    release = threading.Event()
    emu.script.extend([ModelAction.call(ToolCallSpec("slow", {})), FINAL])
    session = session_on(emu, [rs.Tool(name="slow", parameters=OBJECT)])  # no handler yet
    session.change_prefix(tools=[tool("slow", lambda: release.wait(10), timeout=0.1)])
    try:
        session.run("go")
    finally:
        release.set()
    assert sent_results(emu, 1)[0]["content"].startswith("timeout: slow")
    assert session.trace.of_kind(EventKind.PREFIX_CHANGED) == []  # same bytes: no cache break


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None])
def test_a_bad_max_steps_is_refused_before_anything_is_sent(emu: AnthropicEmulator, bad: Any) -> None:
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    with pytest.raises(rs.errors.InvalidOption, match="max_steps"):
        session.run("go", max_steps=bad)
    assert emu.requests == [] and reads == [] and session.state is rs.TurnState.IDLE
    assert len(session.history) == 0


def test_reaching_max_steps_leaves_the_chain_open_and_says_so(emu: AnthropicEmulator) -> None:
    emu.script.extend(read_steps("a", "b", "c"))
    reader, reads = counting_reader()
    session = session_on(emu, [reader])
    with pytest.raises(
        rs.errors.IllegalTransition, match="no final answer after 2 steps; tool results are pending"
    ):
        session.run("go", max_steps=2)
    # the first reply's calls and the second's ran; the third reply's calls wait for their results
    assert reads == ["a", "b"] and len(emu.requests) == 3
    assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS
    assert [c.arguments for c in session.pending_calls] == [{"path": "c"}]
