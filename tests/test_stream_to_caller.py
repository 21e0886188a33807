"""Streaming to the caller: ``session.stream(...)`` / ``stream_tool_results(...)`` / ``run(on_event=...)``.

Every test drives a real vendor SDK client over real HTTP against the emulators. "The same answer": two
twin emulators share a secret, and the second serves, through its ``transform`` hook, exactly the messages
the first produced (the first records them): the non-streamed ``send()`` session and the streamed one get
the same answer (signatures, encrypted items, ids and timestamps included), the second as an SSE stream
framed by the emulator itself. Their committed state must then be the same, byte for byte for payloads.

Per adapter (Anthropic, Responses stateless and ``store=True``, Chat openai/deepseek/vllm/sglang, Gemini):
* streamed state == sent state (snapshot JSON: history, continuation payloads, records, trace; only wall
  times, durations and the digest/size of the request bytes — which carry ``"stream": true`` — differ), the
  same Replies, and the requests identical but for the stream flags;
* the events of each kind concatenate to ``reply.reasoning`` / ``reply.text``; tool-call events carry
  the reply's call ids and names, their deltas the arguments' JSON text;
* the first event arrives while the rest of the body is held by the server (``Fault.hold_stream``);
* ``break`` commits nothing and closes the response (the server sees the client go);
* a stream cut mid-answer commits nothing (the failure is traced, as for ``send()``);
* the async twins, and ``run(on_event=...)``.
The token adapter does not stream: ``stream()`` raises ProtocolViolation before anything is sent.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest

import reasonstate as rs
from reasonstate.snapshot import trace_from_snapshot
from reasonstate.state import EventKind, thaw
from reasonstate.testing import Fault, ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import WEATHER

SYSTEM = "You are a careful travel assistant. Use the tools for facts."
CLOCK = rs.Tool(
    name="get_time",
    description="Local time for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
QUESTION = "Paris or Rome: which is warmer?"
ANSWER = "Rome is warmer (22C) than Paris (18C). Caf\u00e9 \u4e2d\u6587 \U0001f600"
ACTIONS = (
    ModelAction(
        reasoning="Two cities: call the weather tool for both, in parallel.",
        redacted=True,
        tool_calls=(
            ToolCallSpec("get_weather", {"city": "Paris"}, raw_arguments='{ "city" :  "Paris" }'),
            ToolCallSpec("get_weather", {"city": "Rome"}, raw_arguments='{"city":"Rome"  }'),
        ),
    ),
    ModelAction(
        reasoning="Paris is mild. Check the local time in Rome too.",
        tool_calls=(ToolCallSpec("get_time", {"city": "Rome"}),),
    ),
    ModelAction(reasoning="I have everything; Rome is warmer.", text=ANSWER),
)

ADAPTERS = ("anthropic", "responses", "responses_store", "chat", "deepseek", "vllm", "sglang", "gemini")
CHAT_MODELS = {"chat": "gpt-5.5", "deepseek": "deepseek-v4-pro", "vllm": "qwen3", "sglang": "qwen3"}


def _step_of(body: Any) -> int:
    text = json.dumps(body)
    return 2 if "result-1" in text else 1 if "result-0" in text else 0


def respond(body: Any) -> ModelAction:
    """The chain's answer for a request (from the tool results it carries), whatever was sent before."""
    return ACTIONS[_step_of(body)]


def results(reply: rs.Reply, step: int) -> dict[str, str]:
    return {c.id: f"result-{step}" for c in reply.tool_calls}


class Alternate:
    """The ``transform`` that gives two sessions the same answers on one emulator: the sessions take turns
    (A, B, A, B, ...); each of A's messages is kept, and B's next message is replaced by it (a deep copy).
    The emulator issued it, so its signatures, encrypted items and ids verify when B replays them."""

    def __init__(self) -> None:
        self.kept: Any = None
        self.calls = 0

    def __call__(self, message: Any) -> Any:
        self.calls += 1
        if self.calls % 2:
            self.kept = copy.deepcopy(message)
            return message
        return copy.deepcopy(self.kept)


def emulator(adapter: str, transform: Callable[[Any], Any] | None = None) -> Any:
    kw: dict[str, Any] = {"secret": "twin", "transform": transform}
    if adapter == "anthropic":
        return AnthropicEmulator(respond, **kw)
    if adapter.startswith("responses"):
        return OpenAIResponsesEmulator(respond, **kw)
    if adapter == "gemini":
        return GeminiEmulator(respond, **kw)
    return OpenAIChatEmulator(respond, dialect="openai" if adapter == "chat" else adapter, **kw)  # type: ignore[arg-type]


def client_of(emu: Any, *, is_async: bool = False) -> Any:
    return emu.async_client() if is_async else emu.client()


def session_on(emu: Any, adapter: str, *, is_async: bool = False, **kw: Any) -> Any:
    cls = rs.AsyncSession if is_async else rs.Session
    client = client_of(emu, is_async=is_async)
    common: dict[str, Any] = {"system": SYSTEM, "tools": [WEATHER, CLOCK], **kw}
    if adapter == "anthropic":
        thinking = {"type": "enabled", "budget_tokens": 2048}
        return cls(client, model="claude-sonnet-4-6", max_tokens=4096, thinking=thinking, **common)
    if adapter.startswith("responses"):
        return cls(
            client,
            model="gpt-5.5",
            store=adapter == "responses_store",
            reasoning={"effort": "medium", "summary": "auto"},
            **common,
        )
    if adapter == "gemini":
        return cls(client, model="gemini-3-flash", thinking_config={"include_thoughts": True}, **common)
    dialect = "openai" if adapter == "chat" else adapter
    return cls(client, model=CHAT_MODELS[adapter], dialect=dialect, **common)


@attrs.define
class Streamed:
    """What one streamed call showed and returned."""

    events: list[rs.StreamEvent]
    reply: rs.Reply


def read(stream: rs.Stream) -> Streamed:
    with stream as opened:
        events = list(opened)
    return Streamed(events, opened.reply)


async def aread(stream: rs.AsyncStream) -> Streamed:
    async with stream as opened:
        events = [event async for event in opened]
    return Streamed(events, opened.reply)


def both_chains(sent: rs.Session, streamed: rs.Session) -> tuple[list[rs.Reply], list[Streamed]]:
    """The chain on ``sent`` (``send``) and on ``streamed`` (``stream``), step by step in turn."""
    replies, out = [sent.send(QUESTION)], [read(streamed.stream(QUESTION))]
    while replies[-1].tool_calls:
        step = len(replies) - 1
        replies.append(sent.send_tool_results(results(replies[-1], step)))
        out.append(read(streamed.stream_tool_results(results(out[-1].reply, step))))
    return replies, out


async def both_chains_async(
    sent: rs.Session, streamed: rs.AsyncSession
) -> tuple[list[rs.Reply], list[Streamed]]:
    replies, out = [sent.send(QUESTION)], [await aread(streamed.stream(QUESTION))]
    while replies[-1].tool_calls:
        step = len(replies) - 1
        replies.append(sent.send_tool_results(results(replies[-1], step)))
        out.append(await aread(streamed.stream_tool_results(results(out[-1].reply, step))))
    return replies, out


#: what differs between a streamed and a sent call of the same answer: wall times, durations, and the
#: digest and size of the request bytes (the streamed request says ``"stream": true``)
_VOLATILE = frozenset({"at", "duration_s", "request_digest", "request_bytes", "bytes", "calls"})


def state(session: Any) -> Any:
    """The session's committed state as JSON (the snapshot: history with every payload's bytes, records,
    trace), without what necessarily differs between two runs of the same answer (:data:`_VOLATILE`)."""

    def masked(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: "<volatile>" if k in _VOLATILE else masked(v) for k, v in value.items()}
        if isinstance(value, list):
            return [masked(v) for v in value]
        return value

    snapshot = json.loads(session.snapshot().model_dump_json())
    # the trace's compact form, as its events (each one's time and request digest masked like the rest)
    snapshot["trace"] = [
        {"seq": e.seq, "kind": e.kind, "at": e.at, "data": thaw(e.data)}
        for e in trace_from_snapshot(snapshot["trace"])
    ]
    # the records as named fields (the snapshot writes them as rows), so their volatile fields are masked
    snapshot["execution"] = json.loads(json.dumps([attrs.asdict(r) for r in session.execution]))
    snapshot.pop("stream")  # the session's option (what send() does), not committed state
    snapshot.pop("content_digest", None)
    snapshot.pop("digest", None)
    return masked(snapshot)


def payloads(session: Any) -> list[bytes]:
    return [c.payload for c in session.continuation]


def without_stream_flags(body: bytes) -> Any:
    data = json.loads(body)
    data.pop("stream", None)
    data.pop("stream_options", None)
    return data


def check_events(got: Streamed) -> None:
    """The events are the reply, as it arrived."""
    kinds = {e.kind for e in got.events}
    assert kinds <= {"reasoning", "text", "tool_call"}
    assert "".join(e.delta for e in got.events if e.kind == "reasoning") == got.reply.reasoning
    assert "".join(e.delta for e in got.events if e.kind == "text") == got.reply.text
    for e in got.events:
        if e.kind != "tool_call":
            assert (e.call_id, e.name, e.index) == (None, None, None)
    calls = got.reply.tool_calls
    assert sorted({e.index for e in got.events if e.kind == "tool_call"}) == list(range(len(calls)))
    for i, call in enumerate(calls):
        mine = [e for e in got.events if e.kind == "tool_call" and e.index == i]
        assert {e.call_id for e in mine} <= {call.id, None}
        assert {e.name for e in mine if e.name is not None} == {call.name}
        assert json.loads("".join(e.delta for e in mine)) == call.arguments


# -- streamed == sent --------------------------------------------------------------------------------------


def check_same(adapter: str, emu: Any, sent: Any, streamed: Any) -> None:
    assert payloads(streamed) == payloads(sent)
    assert streamed.history == sent.history
    assert state(streamed) == state(sent)
    assert streamed.state is rs.TurnState.IDLE
    # the same requests (A's and B's in turn), but for the stream flags
    requests = emu.requests
    assert len(requests) == 6
    for a, b in zip(requests[::2], requests[1::2], strict=True):
        if adapter == "gemini":
            assert b.body == a.body and b.path.endswith(":streamGenerateContent")
        elif adapter == "vllm":
            assert b.body == a.body
        else:
            assert without_stream_flags(b.body) == without_stream_flags(a.body)
            assert json.loads(b.body)["stream"] is True


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_streamed_chain_commits_what_the_sent_chain_commits(adapter: str) -> None:
    """vLLM is the one vendor whose streamed answer is not its non-streamed answer: its message carries
    the reasoning as ``reasoning`` and ``reasoning_content``, its stream as ``reasoning`` only (the
    emulator's docstring), so the payload captured from a stream is the one a ``stream=True`` session's
    ``send()`` captures: that is what it is compared with."""
    with emulator(adapter, Alternate()) as emu:
        sent = session_on(emu, adapter, stream=adapter == "vllm")
        streamed = session_on(emu, adapter)
        replies, got = both_chains(sent, streamed)
        assert [s.reply for s in got] == replies
        check_same(adapter, emu, sent, streamed)
        for one in got:
            check_events(one)
        if adapter != "chat":  # OpenAI's chat API keeps the reasoning hidden
            assert [e for one in got for e in one.events if e.kind == "reasoning"]
        assert [e for one in got for e in one.events if e.kind == "tool_call"]


@pytest.mark.parametrize("adapter", ["anthropic", "responses_store", "deepseek", "gemini"])
def test_the_async_stream_commits_what_the_sent_chain_commits(adapter: str) -> None:
    with emulator(adapter, Alternate()) as emu:
        sent = session_on(emu, adapter)

        async def main() -> tuple[list[rs.Reply], list[Streamed], Any]:
            session = session_on(emu, adapter, is_async=True)
            replies, got = await both_chains_async(sent, session)
            return replies, got, session

        replies, got, streamed = asyncio.run(main())
        assert [s.reply for s in got] == replies
        check_same(adapter, emu, sent, streamed)
        for one in got:
            check_events(one)


def test_on_a_stream_true_session_the_records_are_equal_to_the_last_byte() -> None:
    """``stream()`` sends the streamed form of the request: on a ``stream=True`` session, exactly what
    ``send()`` sends, so even the records' request digests are equal."""
    with emulator("anthropic", Alternate()) as emu:
        sent, streamed = session_on(emu, "anthropic", stream=True), session_on(emu, "anthropic", stream=True)
        both_chains(sent, streamed)
        assert [r.request_digest for r in streamed.execution] == [r.request_digest for r in sent.execution]
        assert [r.request_bytes for r in streamed.execution] == [r.request_bytes for r in sent.execution]
        requests = emu.requests
        assert [r.body for r in requests[::2]] == [r.body for r in requests[1::2]]


#: the number of SSE events each emulator sends up to (and with) the first one that shows a delta:
#: Anthropic message_start, ping, content_block_start, thinking delta; Responses created, in_progress,
#: item added, summary part added, summary delta; chat: the role chunk, a reasoning or content chunk;
#: Gemini: the first chunk holds a thought
FIRST_DELTA = {
    "anthropic": 4,
    "responses": 5,
    "responses_store": 5,
    "chat": 2,
    "deepseek": 2,
    "vllm": 2,
    "sglang": 2,
    "gemini": 1,
}

# -- as the bytes arrive -----------------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_first_event_arrives_before_the_response_has_ended(adapter: str) -> None:
    release = threading.Event()
    with emulator(adapter) as emu:
        session = session_on(emu, adapter)
        # every emulator's first reasoning delta is within its first few events
        emu.inject(Fault.hold_stream(FIRST_DELTA[adapter], release, seconds=20))
        with session.stream(QUESTION) as stream:
            events = iter(stream)
            started = time.monotonic()
            first = next(events)
            # the rest of the body is still held by the server (it would let it go after 20 s)
            assert time.monotonic() - started < 10
            assert first.kind in ("reasoning", "text", "tool_call")
            release.set()
            rest = list(events)
        check_events(Streamed([first, *rest], stream.reply))


def test_the_first_async_event_arrives_before_the_response_has_ended() -> None:
    release = threading.Event()
    with emulator("anthropic") as emu:

        async def main() -> None:
            session = session_on(emu, "anthropic", is_async=True)
            async with session.stream(QUESTION) as stream:
                events = aiter(stream)
                started = time.monotonic()
                first = await anext(events)
                assert time.monotonic() - started < 10 and first.kind == "reasoning"
                release.set()
                rest = [e async for e in events]
            check_events(Streamed([first, *rest], stream.reply))

        emu.inject(Fault.hold_stream(FIRST_DELTA["anthropic"], release, seconds=20))
        asyncio.run(main())


# -- leaving early, breaking ---------------------------------------------------------------------------------


def _before(session: Any) -> tuple[Any, ...]:
    return (session.state, session.history, payloads(session), session.execution, session.trace)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_leaving_a_stream_early_commits_nothing_and_closes_the_response(adapter: str) -> None:
    release, gone = threading.Event(), threading.Event()
    with emulator(adapter) as emu:
        session = session_on(emu, adapter)
        first = session.send(QUESTION)  # a tool chain is open: the early exit is mid-chain
        before = _before(session)
        emu.inject(Fault.hold_stream(FIRST_DELTA[adapter], release, client_gone=gone, seconds=20))
        with session.stream_tool_results(results(first, 0)) as stream:
            for _ in stream:
                break
        assert gone.wait(10), "the HTTP response of the abandoned stream was not closed"
        release.set()
        assert _before(session) == before
        assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS
        with pytest.raises(rs.IllegalTransition, match="not read to its end"):
            _ = stream.reply
        # and the session goes on as if the abandoned call had never been made
        reply = session.send_tool_results(results(first, 0))
        assert reply.tool_calls and reply.step == 1


def test_an_exception_inside_the_block_commits_nothing() -> None:
    with emulator("deepseek") as emu:
        session = session_on(emu, "deepseek")
        before = _before(session)
        with pytest.raises(KeyError), session.stream(QUESTION) as stream:
            for event in stream:
                raise KeyError(event.kind)
        assert _before(session) == before
        assert session.state is rs.TurnState.IDLE


def test_an_unread_stream_commits_nothing() -> None:
    with emulator("responses") as emu:
        session = session_on(emu, "responses")
        before = _before(session)
        with session.stream(QUESTION):
            pass
        assert _before(session) == before
        assert len(emu.requests) == 1  # it was sent: entering the block sends


def test_a_stream_is_opened_and_read_once_and_only_inside_its_block() -> None:
    with emulator("anthropic") as emu:
        session = session_on(emu, "anthropic")
        stream = session.stream(QUESTION)
        with pytest.raises(rs.IllegalTransition, match="open the stream first"):
            list(stream)
        with stream:
            events = list(stream)
            with pytest.raises(rs.IllegalTransition, match="read once"):
                list(stream)
        with pytest.raises(rs.IllegalTransition, match="opened once"), stream:
            pass
        assert events and stream.reply.tool_calls
        # one call at a time: while a stream is open the session is busy
        with session.stream_tool_results(results(stream.reply, 0)) as busy:
            with pytest.raises(rs.IllegalTransition):
                session.send("another")
            list(busy)


def test_leaving_an_async_stream_early_commits_nothing() -> None:
    release, gone = threading.Event(), threading.Event()
    with emulator("gemini") as emu:

        async def main() -> None:
            session = session_on(emu, "gemini", is_async=True)
            before = _before(session)
            emu.inject(Fault.hold_stream(FIRST_DELTA["gemini"], release, client_gone=gone, seconds=20))
            async with session.stream(QUESTION) as stream:
                async for _ in stream:
                    break
            assert _before(session) == before
            assert await asyncio.to_thread(gone.wait, 10)
            release.set()
            reply = await session.send(QUESTION)
            assert reply.tool_calls

        asyncio.run(main())


# -- broken streams ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_stream_cut_mid_answer_commits_nothing(adapter: str) -> None:
    with emulator(adapter) as emu:
        session = session_on(emu, adapter)
        first = session.send(QUESTION)
        before = _before(session)
        emu.inject(Fault.truncate_stream(3))
        seen: list[rs.StreamEvent] = []
        with pytest.raises(rs.StreamInterrupted), session.stream_tool_results(results(first, 0)) as stream:
            seen.extend(stream)
        assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS
        assert (session.history, payloads(session), session.execution) == before[1:4]
        # the failure is traced, as a failed send() is, and nothing else is
        added = session.trace.events[len(before[4].events) :]
        assert [e.kind for e in added] == [EventKind.CALL_FAILED]
        assert added[0].data["error"] == "StreamInterrupted"
        # a retry sends the same request and goes on
        reply = session.send_tool_results(results(first, 0))
        assert reply.tool_calls


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_stream_cut_at_any_event_boundary_commits_nothing(adapter: str) -> None:
    """The answer's stream cut after k events, for every k until the whole stream goes through: each cut
    raises StreamInterrupted and leaves the session as it was (the events shown before the cut are never
    committed); the uncut stream then commits the step."""
    with emulator(adapter) as emu:
        session = session_on(emu, adapter)
        first = session.send(QUESTION)
        before = _before(session)
        for cut in range(200):
            emu.inject(Fault.truncate_stream(cut))
            try:
                with session.stream_tool_results(results(first, 0)) as stream:
                    for _ in stream:
                        pass
            except rs.StreamInterrupted:
                assert (session.state, session.history, session.execution) == before[:2] + before[3:4]
                assert payloads(session) == before[2]
                continue
            break
        assert cut > 3  # how many cuts were tried before the whole stream went through
        assert stream.reply.tool_calls and len(session.execution) == 2
        failed = session.trace.of_kind(EventKind.CALL_FAILED)
        assert len(failed) == cut and {e.data["error"] for e in failed} == {"StreamInterrupted"}


def test_a_vendor_error_before_the_stream_starts_is_raised_on_entering_and_commits_nothing() -> None:
    with emulator("anthropic") as emu:
        session = session_on(emu, "anthropic")
        before = _before(session)
        emu.inject(AnthropicEmulator.overloaded())
        with pytest.raises(rs.VendorError) as caught, session.stream(QUESTION):
            pytest.fail("entered a refused stream")
        assert caught.value.status == 529
        assert session.state is rs.TurnState.IDLE
        assert (session.history, session.execution) == before[1:4:2]


def test_an_error_event_mid_stream_commits_nothing() -> None:
    error = (
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    start = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_x","type":"message",'
        b'"role":"assistant","model":"claude-sonnet-4-6","content":[],"stop_reason":null,'
        b'"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Rome"}}\n\n'
    )
    with emulator("anthropic") as emu:
        session = session_on(emu, "anthropic")
        before = _before(session)
        emu.inject(Fault.raw(200, start + error, "text/event-stream"))
        seen: list[rs.StreamEvent] = []
        with pytest.raises(rs.VendorError, match="overloaded"), session.stream(QUESTION) as stream:
            seen.extend(stream)
        assert [e.delta for e in seen] == ["Rome"]  # shown as it came; never committed
        assert (session.state, session.history, session.execution) == before[:2] + before[3:4]


def test_the_async_stream_cut_mid_answer_commits_nothing() -> None:
    with emulator("responses_store") as emu:

        async def main() -> None:
            session = session_on(emu, "responses_store", is_async=True)
            before = _before(session)
            emu.inject(Fault.truncate_stream(5))
            with pytest.raises(rs.StreamInterrupted):
                async with session.stream(QUESTION) as stream:
                    async for _ in stream:
                        pass
            assert (session.state, session.history, session.execution) == before[:2] + before[3:4]
            assert (await session.send(QUESTION)).tool_calls

        asyncio.run(main())


# -- run(on_event=...) ---------------------------------------------------------------------------------


def _handlers() -> list[rs.Tool]:
    def weather(city: str) -> str:
        return f"result-{0 if city in ('Paris', 'Rome') else 9}"

    return [attrs.evolve(WEATHER, handler=weather), attrs.evolve(CLOCK, handler=lambda city: "result-1")]


@pytest.mark.parametrize("adapter", ["anthropic", "responses_store", "vllm", "gemini"])
def test_run_on_event_sees_every_step_as_it_streams(adapter: str) -> None:
    with emulator(adapter) as emu:
        session = session_on(emu, adapter, tools=_handlers())
        events: list[rs.StreamEvent] = []
        reply = session.run(QUESTION, on_event=events.append)
        assert reply.text == ANSWER and session.state is rs.TurnState.IDLE
        steps = [step for t in session.history.turns for step in t.steps]
        assert len(steps) == len(session.execution) == 3
        assert "".join(e.delta for e in events if e.kind == "reasoning") == "".join(
            step.reasoning_text for step in steps
        )
        assert "".join(e.delta for e in events if e.kind == "text") == ANSWER
        calls = [c for step in steps for c in step.tool_calls]
        shown = {e.call_id for e in events if e.kind == "tool_call"}
        assert shown == {c.id for c in calls} or (
            adapter == "gemini" and shown <= {c.id for c in calls} | {None}
        )
        # each request was streamed
        assert all(
            r.path.endswith(":streamGenerateContent") or json.loads(r.body).get("stream")
            for r in emu.requests
        )


@pytest.mark.parametrize("awaited", [False, True], ids=["plain callback", "async callback"])
def test_async_run_on_event(awaited: bool) -> None:
    with emulator("deepseek") as emu:

        async def main() -> tuple[rs.Reply, list[rs.StreamEvent]]:
            session = session_on(emu, "deepseek", is_async=True, tools=_handlers())
            events: list[rs.StreamEvent] = []

            async def collect(event: rs.StreamEvent) -> None:
                await asyncio.sleep(0)
                events.append(event)

            callback = collect if awaited else events.append
            return await session.run(QUESTION, on_event=callback), events

        reply, events = asyncio.run(main())
        assert reply.text == ANSWER
        assert "".join(e.delta for e in events if e.kind == "text") == ANSWER
        assert "".join(e.delta for e in events if e.kind == "reasoning")


def test_an_on_event_callback_that_raises_ends_the_run_and_commits_nothing_of_that_call() -> None:
    with emulator("anthropic") as emu:
        session = session_on(emu, "anthropic", tools=_handlers())
        seen: list[rs.StreamEvent] = []

        def stop_at_text(event: rs.StreamEvent) -> None:
            seen.append(event)
            if event.kind == "text":
                raise RuntimeError("enough")

        with pytest.raises(RuntimeError, match="enough"):
            session.run(QUESTION, on_event=stop_at_text)
        # the two tool steps were committed; the final answer's call was left: nothing of it
        assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS
        assert len(session.execution) == 2 and seen[-1].kind == "text"


# -- the token adapter does not stream -----------------------------------------------------------------------


def test_the_token_adapter_refuses_to_stream_before_sending_anything() -> None:
    import openai

    from reasonstate.adapters.tokens import TokenAdapter
    from reasonstate.testing.completions import VLLMCompletionsEmulator
    from reasonstate.tokens import ChatTemplateRenderer, template_path

    renderer = ChatTemplateRenderer.from_files(template_path("qwen3.6"), "qwen3.6")
    with VLLMCompletionsEmulator(tokenizer="qwen3.6", eos_token_ids=[0]) as emu:
        client = openai.OpenAI(base_url=emu.base_url + "/v1", api_key="test-key", max_retries=0)
        session = rs.Session(client, model="qwen3.6", adapter=TokenAdapter(renderer), max_tokens=64)
        before = _before(session)
        with pytest.raises(rs.ProtocolViolation, match="does not stream"), session.stream(QUESTION):
            pass
        with pytest.raises(rs.ProtocolViolation, match="does not stream"):
            session.run(QUESTION, on_event=print)
        assert _before(session) == before
        assert emu.server.requests == []


def test_stream_event_is_public_and_frozen() -> None:
    event = rs.StreamEvent("text", "hi")
    assert (event.call_id, event.name, event.index) == (None, None, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.delta = "x"  # type: ignore[misc]
    assert {"StreamEvent", "Stream", "AsyncStream"} <= set(rs.__all__)


# -- the README's example ----------------------------------------------------------------------------------


def test_the_readme_streaming_example_runs_against_the_emulator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = re.search(r"## Streaming\n.*?```python\n(.*?)```", readme, re.S)
    assert code is not None
    with AnthropicEmulator([ModelAction(reasoning="Compare. ", text="Rome is warmer.")]) as emu:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        exec(compile(code.group(1), "README.md", "exec"), {})
        assert json.loads(emu.requests[0].body)["stream"] is True
    assert capsys.readouterr().out.splitlines() == ["Compare. Rome is warmer.", "Rome is warmer."]


# -- the assemblers' events, fed by hand (pure) ------------------------------------------------------------


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def test_responses_summary_parts_are_joined_in_the_events_as_the_codec_joins_them() -> None:
    from reasonstate.adapters.openai_responses import ResponsesAssembler

    assembler = ResponsesAssembler()
    where = {"item_id": "rs_1", "output_index": 0}
    assembler.feed_bytes(
        _sse(
            {"type": "response.reasoning_summary_part.added", **where, "summary_index": 0},
            {"type": "response.reasoning_summary_text.delta", **where, "summary_index": 0, "delta": "One."},
            {"type": "response.reasoning_summary_part.added", **where, "summary_index": 1},
            {"type": "response.reasoning_summary_text.delta", **where, "summary_index": 1, "delta": "Two."},
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": "",
                },
            },
            {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"city":'},
            {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '"Rome"}'},
            {"type": "response.output_text.delta", "output_index": 2, "delta": "Hi"},
        )
    )
    events = assembler.events()
    assert "".join(e.delta for e in events if e.kind == "reasoning") == "One.\n\nTwo."
    calls = [e for e in events if e.kind == "tool_call"]
    assert {(e.call_id, e.name, e.index) for e in calls} == {("call_1", "get_weather", 0)}
    assert "".join(e.delta for e in calls) == '{"city":"Rome"}'
    assert [e.delta for e in events if e.kind == "text"] == ["Hi"]
    assert assembler.events() == []  # taken once


def test_chat_reasoning_streamed_under_both_names_is_shown_once() -> None:
    from reasonstate.adapters.openai_chat import ChatAssembler

    assembler = ChatAssembler()
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"reasoning": "Hm.", "reasoning_content": "Hm."}}]}
    call = {"index": 0, "id": "call_9", "function": {"name": "get_time", "arguments": "{}"}}
    assembler.feed_bytes(_sse(chunk, {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}))
    events = assembler.events()
    assert [(e.kind, e.delta) for e in events] == [("reasoning", "Hm."), ("tool_call", "{}")]
    assert (events[1].call_id, events[1].name, events[1].index) == ("call_9", "get_time", 0)


def test_gemini_parts_of_the_first_candidate_become_events() -> None:
    from reasonstate.adapters.gemini import GeminiAssembler

    assembler = GeminiAssembler()
    parts = [
        {"text": "Thinking", "thought": True},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}, "thoughtSignature": "c2ln"},
        {"text": "Done"},
    ]
    assembler.feed_bytes(
        _sse(*({"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}]} for p in parts))
    )
    events = assembler.events()
    assert [(e.kind, e.delta) for e in events] == [
        ("reasoning", "Thinking"),
        ("tool_call", '{"city":"Rome"}'),
        ("text", "Done"),
    ]
    assert (events[1].call_id, events[1].name, events[1].index) == (None, "get_weather", 0)
