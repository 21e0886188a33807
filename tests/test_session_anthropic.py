"""The core on Anthropic, end to end: real ``anthropic`` SDK, real HTTP, the strict emulator."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import attrs
import pytest

import reasonstate as rs
from reasonstate.policies import CacheAware, Compress, Drop, Keep, KeepLast
from reasonstate.state import EventKind, OpaquePart, ReasoningPart, Records
from reasonstate.testing import Fault, ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from tests._snapshots import payloads, redigest
from tests.conftest import (
    CLOCK as CLOCK_TOOL,
)
from tests.conftest import (
    MODEL,
    THINKING,
    answer,
    body,
    call,
    make_session,
    run_chain,
    strip_cache_control,
    three_step_chain,
)
from tests.conftest import (
    WEATHER as WEATHER_TOOL,
)


def _layers(session: rs.Session) -> tuple[Any, ...]:
    return (session.history, session.continuation, session.execution, session.state)


# -- byte-exact continuation inside the tool chain ------------------------------------------------------


def test_every_thinking_block_of_a_three_step_chain_is_replayed_byte_identical_in_order(
    emulator: AnthropicEmulator,
) -> None:
    """Pain point: anthropics/anthropic-sdk-python#1598 (re-serialized or reordered: bad signature).

    The oracle is the response as received on the wire: every block the model sent goes back byte for
    byte, in order (the opaque ones from their payloads, the tool calls rendered from their parts: a
    canonical tool_use block keeps no payload, issue 21)."""
    import httpx2 as httpx

    received: list[bytes] = []

    def keep(response: httpx.Response) -> None:
        response.read()
        received.append(response.content)

    emulator.script.extend(three_step_chain())
    session = make_session(
        emulator, client=emulator.client(http_client=httpx.Client(event_hooks={"response": [keep]}))
    )
    run_chain(session)
    steps = session.history.turns[0].steps
    assert len(emulator.requests) == 3
    for k in range(2):
        sent = emulator.requests[k + 1].body
        payloads = [c.payload for c in steps[k].continuation]
        # every payload of step k (thinking, redacted_thinking) appears byte for byte, in order
        positions = [sent.index(p) for p in payloads]
        assert positions == sorted(positions)
        # the content array as received, compact on the wire: these are its bytes
        raw = received[k]
        array = json.dumps(json.loads(raw)["content"], separators=(",", ":"), ensure_ascii=False).encode()
        assert array in raw
        assistant = b'{"role":"assistant","content":' + array + b"}"
        assert sent.count(assistant) == 1
        assert json.loads(assistant) == body(emulator, k + 1)["messages"][1 + 2 * k]
    kinds = [c.kind for c in steps[0].continuation]
    assert kinds == ["thinking", "redacted_thinking"]
    assert [p.continuation for p in steps[0].parts] == [0, 1, None, None]


def test_parallel_tool_results_follow_the_models_declared_order_whatever_order_they_are_given_in(
    emulator: AnthropicEmulator,
) -> None:
    """Pain point: stanfordnlp/dspy#10216 (tool results serialized in insertion order: after a Postgres jsonb
    round trip every call missed the cache)."""
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    first, second = reply.tool_calls
    session.send_tool_results({second.id: {"t": 22, "city": "Rome"}, first.id: {"city": "Paris", "t": 18}})
    results = body(emulator, 1)["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results] == [first.id, second.id]
    # JSON results are canonical (sorted keys), so a jsonb round trip cannot change the bytes
    assert [r["content"] for r in results] == ['{"city":"Paris","t":18}', '{"city":"Rome","t":22}']


def test_system_and_tools_bytes_are_identical_in_every_request(emulator: AnthropicEmulator) -> None:
    emulator.script.extend([*three_step_chain(), answer(1), answer(2)])
    session = make_session(emulator, policy=Drop())
    run_chain(session)
    session.send("And tomorrow?")
    session.send("And next week?")
    systems = {json.dumps(body(emulator, i)["system"]) for i in range(5)}
    tools = {json.dumps(body(emulator, i)["tools"]) for i in range(5)}
    assert len(systems) == 1 and len(tools) == 1


#: the ``tools`` of a request for the two tools below, written out by hand: the tools in name order, each
#: as the adapter builds it (name, description, input_schema), every schema key sorted at every depth, the
#: order of a list (``required``) as declared
SORTED_TOOLS = (
    b'"tools":[{"name":"book_table","description":"Book a table","input_schema":{"properties":{"party":'
    b'{"properties":{"names":{"items":{"type":"string"},"type":"array"},"size":{"minimum":1,"type":"integer"}},'
    b'"required":["size"],"type":"object"},"when":{"description":"local time","format":"date-time",'
    b'"type":"string"}},"required":["when","party"],"type":"object"}},{"name":"zone_time","description":'
    b'"Local time","input_schema":{"properties":{"zone":{"type":"string"}},"type":"object"}}]'
)


def test_tools_go_out_in_name_order_with_every_schema_key_sorted_whatever_order_they_are_declared_in(
    emulator: AnthropicEmulator,
) -> None:
    """Pain point #27 (maximhq/bifrost PR #2082): tool schemas serialized in a
    non-deterministic key order break the prompt cache on every request; sorting the keys cut the cost by
    72-90%. The tools are declared out of name order and their schemas' keys unsorted at every depth; the
    bytes on the wire are compared with :data:`SORTED_TOOLS`, written by hand."""
    booking = rs.Tool(
        name="book_table",
        description="Book a table",
        parameters={
            "type": "object",
            "required": ["when", "party"],
            "properties": {
                "when": {"type": "string", "format": "date-time", "description": "local time"},
                "party": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "names": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
        },
    )
    zone = rs.Tool(
        name="zone_time",
        description="Local time",
        parameters={"type": "object", "properties": {"zone": {"type": "string"}}},
    )
    emulator.script.extend([answer(1), answer(2)])
    session = make_session(emulator, tools=[zone, booking])
    session.send("A table for two tonight?")
    session.send("And tomorrow?")
    assert [emulator.requests[i].body.count(SORTED_TOOLS) for i in range(2)] == [1, 1]


# -- between-turn policies ---------------------------------------------------------------------------------


def _next_turn_assistants(emulator: AnthropicEmulator, request: int) -> list[list[str]]:
    """The block types of each assistant message of turn 0 as sent in ``request``."""
    messages = body(emulator, request)["messages"]
    return [[b["type"] for b in m["content"]] for m in messages[:6] if m["role"] == "assistant"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            Keep(),
            [
                ["thinking", "redacted_thinking", "tool_use", "tool_use"],
                ["thinking", "tool_use"],
                ["thinking", "text"],
            ],
        ),
        (Drop(), [["tool_use", "tool_use"], ["tool_use"], ["text"]]),
        (
            KeepLast(1),
            [
                ["thinking", "redacted_thinking", "tool_use", "tool_use"],
                ["thinking", "tool_use"],
                ["thinking", "text"],
            ],
        ),
        (
            Compress(lambda turn: "compared Paris and Rome"),
            [["tool_use", "tool_use"], ["tool_use"], ["text", "text"]],
        ),
    ],
    ids=["keep", "drop", "keep_last_1", "compress"],
)
def test_next_user_turn_request_is_exactly_what_the_policy_says_and_the_one_after_extends_it(
    emulator: AnthropicEmulator, policy: Any, expected: list[list[str]]
) -> None:
    emulator.script.extend([*three_step_chain(), answer(1), answer(2)])
    session = make_session(emulator, policy=policy)
    run_chain(session)
    session.send("And tomorrow?")
    assert _next_turn_assistants(emulator, 3) == expected
    if isinstance(policy, Compress):
        note = body(emulator, 3)["messages"][5]["content"][0]["text"]
        assert note == "(Summary of my earlier reasoning: compared Paris and Rome)"
    # the turn-0 blocks that remain are the captured payloads, untouched
    sent = emulator.requests[3].body
    for step, kinds in zip(session.history.turns[0].steps, expected, strict=True):
        keep = "thinking" in kinds
        for c in step.continuation:
            assert (c.payload in sent) == (keep or c.kind not in ("thinking", "redacted_thinking"))
    # append-only afterwards: request 4 starts with request 3's messages (markers aside)
    session.send("And next week?")
    before = strip_cache_control(body(emulator, 3)["messages"])
    after = strip_cache_control(body(emulator, 4)["messages"])
    if not isinstance(policy, KeepLast):
        assert after[: len(before)] == before
    else:
        # KeepLast(1) compacts turn 0 when turn 1 closes: a traced rewrite of the past, then append-only
        assert _next_turn_assistants(emulator, 4) == [["tool_use", "tool_use"], ["tool_use"], ["text"]]
        decision = session.trace.of_kind(EventKind.POLICY_DECISION)[1]
        assert set(decision.data["views"]) == {"0", "1"}
        assert decision.data["divergence_unit"] is not None


def test_keep_is_append_only_across_turns(emulator: AnthropicEmulator) -> None:
    emulator.script.extend([*three_step_chain(), *(answer(i) for i in range(4))])
    session = make_session(emulator, policy=Keep())
    run_chain(session)
    for i in range(4):
        session.send(f"follow-up {i}")
    for i in range(1, len(emulator.requests)):
        before = strip_cache_control(body(emulator, i - 1)["messages"])
        after = strip_cache_control(body(emulator, i)["messages"])
        assert after[: len(before)] == before
    assert all(r.divergence is None for r in session.execution)


def test_cache_aware_drops_long_reasoning_with_a_short_answer_and_keeps_the_rest(
    emulator: AnthropicEmulator,
) -> None:
    emulator.script.extend(
        [
            ModelAction(reasoning="Long deliberation. " * 200, text="Yes."),
            ModelAction(reasoning="Short.", text="A long and detailed answer. " * 30),
        ]
    )
    session = make_session(emulator, policy=CacheAware(ratio=4.0, min_reasoning_tokens=64))
    session.send("Q1")
    session.send("Q2")
    views = [t.view for t in session.history.turns]
    assert [v.keep_reasoning for v in views if v] == [(False,), (True,)]


def test_policy_decision_is_traced_with_its_predicted_cache_effect(emulator: AnthropicEmulator) -> None:
    emulator.script.extend([*three_step_chain(), answer(1)])
    session = make_session(emulator, policy=Drop())
    run_chain(session)
    decision = session.trace.of_kind(EventKind.POLICY_DECISION)[0].data
    # dropping turn 0's reasoning diverges right after its user message (units: 2 tools, 1 system, 1 user)
    assert decision["divergence_unit"] == 4
    first_request_tokens = session.execution[0].usage.prompt_tokens
    assert decision["predicted_cache_read"] == first_request_tokens
    assert decision["keep_cache_read"] == session.execution[-1].usage.prompt_tokens
    assert decision["cache_tokens_lost"] == decision["keep_cache_read"] - first_request_tokens
    session.send("And tomorrow?")
    assert session.execution[-1].usage.cache_read == first_request_tokens
    brk = session.trace.of_kind(EventKind.CACHE_BREAK)[0].data
    assert brk["unit"] == 4 and brk["why"].startswith("policy.decision")


# -- cache prediction -----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [Keep(), Drop(), KeepLast(1)], ids=["keep", "drop", "keep_last"])
def test_emulator_cache_reads_equal_the_sdk_prediction_on_every_request(
    emulator: AnthropicEmulator, policy: Any
) -> None:
    emulator.script.extend([*three_step_chain(), answer(1), *three_step_chain(), answer(2), answer(3)])
    session = make_session(emulator, policy=policy)
    run_chain(session)
    session.send("follow-up")
    run_chain(session, "and again?")
    session.send("one more")
    session.send("last")
    predicted = [r.predicted_cache_read for r in session.execution]
    reported = [r.usage.cache_read for r in session.execution]
    assert None not in predicted
    assert predicted == reported
    assert reported[0] == 0 and all(r > 0 for r in reported[1:])


# -- failures leave the session unchanged ----------------------------------------------------------------


def test_tampered_signature_gets_the_vendors_400_as_a_typed_error_and_the_session_is_unchanged(
    emulator: AnthropicEmulator,
) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    # storage that rewrites a signature and "fixes" the digest (the case a digest alone cannot catch)
    snap = json.loads(session.snapshot().model_dump_json())
    value = payloads(snap, 0)[0]
    value["signature"] = value["signature"][:-4] + "AAA="
    redigest(snap)
    tampered = rs.Session.restore(rs.SessionSnapshot.model_validate(snap).sealed(), emulator.client())
    before = _layers(tampered)
    with pytest.raises(rs.VendorError) as info:
        tampered.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    assert info.value.status == 400
    assert isinstance(info.value.__cause__, anthropic.BadRequestError)
    assert "Invalid `signature` in `thinking` block" in str(info.value)
    assert _layers(tampered) == before
    assert tampered.trace.events[-1].kind == EventKind.CALL_FAILED
    # the untampered session goes on: the script was not consumed by the refused request
    session.send_tool_results({c.id: "ok" for c in reply.tool_calls})


def test_a_payload_changed_in_memory_is_refused_before_anything_is_sent(emulator: AnthropicEmulator) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    step = session.history.turns[0].steps[0]
    object.__setattr__(step.continuation[0], "payload", step.continuation[0].payload.replace(b"Two", b"Six"))
    sent = len(emulator.requests)
    with pytest.raises(rs.ContinuationMismatch):
        session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    assert len(emulator.requests) == sent
    assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS


@pytest.mark.parametrize(
    "fault",
    [AnthropicEmulator.rate_limited(), AnthropicEmulator.overloaded(), Fault.drop_connection()],
    ids=["429", "529", "dropped"],
)
def test_vendor_failures_are_typed_and_a_retry_sends_the_same_bytes(
    emulator: AnthropicEmulator, fault: Fault
) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    emulator.inject(fault)
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(rs.VendorError) as info:
        session.send_tool_results(results)
    assert isinstance(info.value.__cause__, anthropic.APIError)
    assert _layers(session) == before
    session.send_tool_results(results)
    assert emulator.requests[-1].body == emulator.requests[-2].body


def test_a_timeout_is_a_typed_error_and_changes_nothing(emulator: AnthropicEmulator) -> None:
    emulator.script.extend([answer(0)])
    session = rs.Session(
        emulator.client(timeout=0.3),
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    emulator.inject(Fault.delay(1.0))
    with pytest.raises(rs.VendorError) as info:
        session.send("hello")
    assert isinstance(info.value.__cause__, anthropic.APITimeoutError)
    assert _layers(session) == ((session.history), (), (), rs.TurnState.IDLE)
    assert len(session.history) == 0


def test_a_stream_dropped_mid_thinking_raises_and_loses_nothing_already_committed(
    emulator: AnthropicEmulator,
) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator, stream=True)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    emulator.inject(
        Fault.truncate_stream(after_events=4)
    )  # message_start, ping, block start, one thinking delta
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(rs.StreamInterrupted):
        session.send_tool_results(results)
    assert _layers(session) == before
    session.send_tool_results(results)
    assert emulator.requests[-1].body == emulator.requests[-2].body
    # the cut response was generated (and consumed) server-side, but only the retried one is committed
    steps = session.history.turns[0].steps
    assert len(steps) == 2 and len(session.execution) == 2
    assert isinstance(steps[1].parts[0], ReasoningPart)
    assert steps[1].parts[0].text == "I have everything; Rome is warmer."


def test_streamed_and_non_streamed_sessions_capture_identical_payloads() -> None:
    payloads = []
    for stream in (False, True):
        with AnthropicEmulator(three_step_chain(), secret=b"same-secret") as emu:
            session = make_session(emu, stream=stream)
            run_chain(session)
            # signatures and redacted data carry a random nonce; every other byte, key order included,
            # must be the same
            payloads.append(
                [
                    json.dumps(
                        {
                            k: "-" if k in ("signature", "data") else v
                            for k, v in json.loads(c.payload).items()
                        }
                    )
                    for c in session.continuation
                ]
            )
    assert payloads[0] == payloads[1]


# -- bad input -------------------------------------------------------------------------------------------


def test_malformed_vendor_json_is_a_typed_error_and_changes_nothing(emulator: AnthropicEmulator) -> None:
    emulator.script.extend([answer(0)])
    session = make_session(emulator)
    emulator.inject(Fault.raw(200, b'{"id": "msg_1", "content": [{"type": "te'))
    with pytest.raises(rs.MalformedResponse):
        session.send("hello")
    assert len(session.history) == 0 and session.execution == ()
    session.send("hello")
    assert emulator.requests[0].body == emulator.requests[1].body


def test_a_thinking_block_without_signature_is_malformed_and_never_committed(
    emulator: AnthropicEmulator,
) -> None:
    """Pain point: pydantic/pydantic-ai#7597 (signature="" from an interrupted stream was replayed)."""
    # pydantic/pydantic-ai#7597: an interrupted stream left signature="" and wedged every later turn
    emulator.script.extend([answer(0)])
    session = make_session(emulator)
    emulator.inject(
        Fault.raw(
            200,
            json.dumps(
                {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [
                        {"type": "thinking", "thinking": "x", "signature": ""},
                        {"type": "text", "text": "hi"},
                    ],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
            ).encode(),
        )
    )
    with pytest.raises(rs.MalformedResponse):
        session.send("hello")
    assert session.continuation == ()


def test_an_unknown_content_block_type_is_kept_verbatim_and_replayed(emulator: AnthropicEmulator) -> None:
    extra = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "weather"},
    }

    def add_block(message: dict[str, Any]) -> dict[str, Any]:
        if message["stop_reason"] == "tool_use":
            message["content"].insert(2, extra)
        return message

    emulator.transform = add_block
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    step = session.history.turns[0].steps[0]
    assert isinstance(step.parts[2], OpaquePart) and step.parts[2].type == "server_tool_use"
    session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    sent = body(emulator, 1)["messages"][1]["content"]
    assert sent[2] == extra


def test_tool_results_for_unknown_ids_are_refused_and_change_nothing(emulator: AnthropicEmulator) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    with pytest.raises(rs.ToolResultError, match="unknown tool call ids"):
        session.send_tool_results({"toolu_nope": "x", **{c.id: "ok" for c in reply.tool_calls}})
    with pytest.raises(rs.ToolResultError, match="missing results"):
        session.send_tool_results({reply.tool_calls[0].id: "ok"})
    assert _layers(session) == before and len(emulator.requests) == 1


def test_a_result_that_is_not_json_serializable_is_refused(emulator: AnthropicEmulator) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    for bad in (object(), float("nan"), {"set": {1, 2}}):
        with pytest.raises(rs.ToolResultError, match="not JSON-serializable"):
            session.send_tool_results({c.id: bad for c in reply.tool_calls})
    assert _layers(session) == before


def test_illegal_transitions_raise_and_change_nothing(emulator: AnthropicEmulator) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    with pytest.raises(rs.IllegalTransition, match="no tool calls are pending"):
        session.send_tool_results({})
    session.send("Paris or Rome?")
    before = _layers(session)
    with pytest.raises(rs.IllegalTransition, match="tool results are pending"):
        session.send("another question")
    with pytest.raises(rs.IllegalTransition):
        session.switch_model("claude-opus-4-7")
    assert _layers(session) == before
    assert isinstance(rs.IllegalTransition("x"), rs.ReasonStateError)


# -- snapshots, model changes, async ---------------------------------------------------------------------


def test_snapshot_to_json_and_restore_gives_a_byte_identical_next_request() -> None:
    with AnthropicEmulator([*three_step_chain()[:1], answer(9), answer(9)], secret=b"s") as emu:
        session = make_session(emu, policy=KeepLast(2))
        reply = session.send("Paris or Rome?")
        text = session.snapshot().model_dump_json()
        restored = rs.Session.restore(rs.SessionSnapshot.model_validate_json(text), emu.client())
        assert restored.history == session.history and restored.execution == session.execution
        results = {c.id: {"ok": True} for c in reply.tool_calls}
        session.send_tool_results(results)
        restored.send_tool_results(results)
        assert emu.requests[-1].body == emu.requests[-2].body
        assert restored.policy == KeepLast(2)


def test_a_snapshot_edited_on_disk_is_refused_on_restore(emulator: AnthropicEmulator) -> None:
    emulator.script.extend(three_step_chain())
    session = make_session(emulator)
    session.send("Paris or Rome?")
    text = session.snapshot().model_dump_json().replace("Two cities", "Six cities")
    with pytest.raises(rs.ContinuationMismatch):
        rs.Session.restore(rs.SessionSnapshot.model_validate_json(text), emulator.client())


def test_thinking_from_another_model_is_never_sent_and_the_withholding_is_traced(
    emulator: AnthropicEmulator,
) -> None:
    """Pain points: anomalyco/opencode#25005 (Sonnet-to-Opus switch: "Invalid signature"),
    vybestack/llxprt-code#2335 and tailcallhq/forgecode#2646 (the same after a mid-session model switch)."""
    emulator.script.extend([*three_step_chain(), answer(1)])
    session = make_session(emulator)
    run_chain(session)
    # Claude 4.7 takes adaptive thinking only (docs/protocols.md §4.1): a switch with its own options
    session.switch(emulator.client(), model="claude-opus-4-7", max_tokens=4096, thinking={"type": "adaptive"})
    session.send("And tomorrow?")
    sent = body(emulator, 3)
    assert sent["model"] == "claude-opus-4-7"
    types = [b["type"] for m in sent["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert "thinking" not in types and "redacted_thinking" not in types
    withheld = session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)[0].data
    assert withheld["count"] == 4 and withheld["models"] == [MODEL]


def test_async_session_runs_a_streamed_tool_chain(emulator: AnthropicEmulator) -> None:
    import asyncio

    emulator.script.extend(three_step_chain())

    async def main() -> rs.AsyncSession:
        client = emulator.async_client()
        session = rs.AsyncSession(
            client,
            model=MODEL,
            system="s",
            tools=[rs.Tool(name="get_weather"), rs.Tool(name="get_time")],
            stream=True,
            max_tokens=4096,
            thinking={"type": "adaptive"},
        )
        reply = await session.send("Paris or Rome?")
        while reply.tool_calls:
            reply = await session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
        await client.close()
        return session

    session = asyncio.run(main())
    assert session.state is rs.TurnState.IDLE
    assert session.history.turns[0].final_text == "Rome is warmer (22C) than Paris (18C)."
    # tool calls and plain text keep no payload either: the codec renders them byte for byte (issue 21)
    assert [len(s.continuation) for s in session.history.turns[0].steps] == [2, 1, 1]


def test_run_executes_handlers_and_parallel_safe_calls_concurrently(emulator: AnthropicEmulator) -> None:
    emulator.script.extend(three_step_chain())
    seen: list[str] = []

    def weather(city: str) -> dict[str, Any]:
        seen.append(city)
        return {"city": city, "temp": {"Paris": 18, "Rome": 22}[city]}

    tools = [
        rs.Tool(name="get_weather", parameters={"type": "object"}, handler=weather, parallel_safe=True),
        rs.Tool(name="get_time", parameters={"type": "object"}, handler=lambda city: "14:00"),
    ]
    session = rs.Session(
        emulator.client(),
        model=MODEL,
        tools=tools,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    reply = session.run("Paris or Rome?")
    assert reply.text == "Rome is warmer (22C) than Paris (18C)."
    assert sorted(seen) == ["Paris", "Rome"]
    results = body(emulator, 1)["messages"][2]["content"]
    assert [r["content"] for r in results] == ['{"city":"Paris","temp":18}', '{"city":"Rome","temp":22}']


def test_report_sums_usage_and_counts_exact_predictions(emulator: AnthropicEmulator) -> None:
    emulator.script.extend([*three_step_chain(), answer(1)])
    session = make_session(emulator, policy=Drop())
    run_chain(session)
    session.send("more")
    report = session.report()
    assert report.requests == 4
    assert report.prompt_tokens == sum(r.usage.prompt_tokens for r in session.execution)
    assert report.predicted_matches == report.predicted_total == 4
    assert report.protocol_errors == 0
    assert "4 requests" in str(report)


def test_tool_calls_carry_arguments_parsed_and_raw(emulator: AnthropicEmulator) -> None:
    emulator.script.extend(
        [ModelAction(reasoning="r", tool_calls=(call("get_weather", city="Zürich", units="C"),))]
    )
    session = make_session(emulator)
    reply = session.send("Zürich?")
    assert reply.tool_calls[0].arguments == {"city": "Zürich", "units": "C"}
    assert reply.tool_calls[0].raw_arguments == '{"city":"Zürich","units":"C"}'


def test_streamed_usage_reports_cache_reads_like_non_streamed(emulator: AnthropicEmulator) -> None:
    """Pain point: BerriAI/litellm#11789 (streamed Anthropic cache reads billed as regular input)."""
    # BerriAI/litellm#11789: streamed Anthropic cache reads were billed as regular input
    emulator.script.extend([*three_step_chain(), answer(1)])
    session = make_session(emulator, stream=True, policy=Drop())
    run_chain(session)
    session.send("more")
    reads = [r.usage.cache_read for r in session.execution]
    assert reads == [r.predicted_cache_read for r in session.execution]
    assert all(r > 0 for r in reads[1:])
    assert all(
        r.usage.uncached_input + r.usage.cache_read + r.usage.cache_write == r.usage.prompt_tokens
        for r in session.execution
    )


def test_signature_only_thinking_blocks_are_replayed_not_dropped(emulator: AnthropicEmulator) -> None:
    """Pain point: openai/openai-agents-python#4155 (signature-only thinking "" dropped as empty)."""
    # openai/openai-agents-python PR #4155, BerriAI/litellm PR #38809: display "omitted" gives thinking ""
    emulator.script.extend(three_step_chain())
    session = make_session(
        emulator, thinking={"type": "enabled", "budget_tokens": 2048, "display": "omitted"}
    )
    run_chain(session)
    first = json.loads(session.history.turns[0].steps[0].continuation[0].payload)
    assert first["thinking"] == "" and first["signature"]
    assert session.history.turns[0].steps[0].continuation[0].payload in emulator.requests[1].body


def test_changing_the_prefix_is_a_traced_event_and_explains_the_cache_break(
    emulator: AnthropicEmulator,
) -> None:
    emulator.script.extend([answer(0), answer(1)])
    session = make_session(emulator)
    session.send("first")
    old = session.prefix.fingerprint
    session.change_prefix(system="A new system prompt.")
    assert session.prefix.fingerprint != old
    session.send("second")
    changed = session.trace.of_kind(EventKind.PREFIX_CHANGED)[0].data
    assert changed["old"] == old and changed["new"] == session.prefix.fingerprint
    brk = session.trace.of_kind(EventKind.CACHE_BREAK)[0].data
    assert brk["unit"] == 2 and brk["why"].startswith("prefix.changed")
    assert session.execution[-1].usage.cache_read == 0


def test_prefix_bytes_do_not_depend_on_declaration_order() -> None:
    """Pain point: pydantic/logfire#1930 (tool list order flips and busts the cache)."""
    a = rs.Prefix(system="s", tools=(WEATHER_TOOL, CLOCK_TOOL))
    b = rs.Prefix(system="s", tools=(CLOCK_TOOL, WEATHER_TOOL))
    assert a.canonical_bytes == b.canonical_bytes and a.fingerprint == b.fingerprint
    assert a.fingerprint == "sha256:" + __import__("hashlib").sha256(a.canonical_bytes).hexdigest()


def test_deepseek_style_rules_clamp_a_policy_and_the_clamp_is_traced() -> None:
    from reasonstate.adapters import ProtocolRules
    from reasonstate.state import Step, ToolCallPart, Turn, TurnView, Usage

    rules = ProtocolRules(vendor="deepseek", api="chat", tool_steps_keep_reasoning=True)
    tool_step = Step(
        parts=(ReasoningPart("r"), ToolCallPart("c1", "f", {}, "{}")),
        continuation=(),
        stop_reason="tool_calls",
        usage=Usage(),
        model="m",
    )
    final = Step(parts=(ReasoningPart("r2"),), continuation=(), stop_reason="stop", usage=Usage(), model="m")
    view, reasons = rules.clamp(Turn(0, "u", (tool_step, final)), TurnView((False, False), "drop"))
    assert view.keep_reasoning == (True, True)
    assert len(reasons) == 2 and "tool-calling steps keep their reasoning" in reasons[0]


def test_a_clock_time_in_the_system_prompt_is_flagged(emulator: AnthropicEmulator) -> None:
    """Pain points: dimagi/open-chat-studio#3625 and earendil-works/pi#1873 (a second-precision time in the
    system prompt busts the cache every turn)."""
    # dimagi/open-chat-studio#3625, HKUDS/nanobot#226: second-precision time in the prefix
    session = make_session(emulator, system="Now is 2026-11-29 14:03:59 UTC. Be brief.")
    event = session.trace.of_kind(EventKind.PREFIX_VOLATILE)[0]
    assert event.data["spans"] == ["14:03:59"]
    iso = make_session(emulator, system="Now: 2026-12-01T03:32:20.123456+00:00. Be brief.")  # isoformat()
    assert iso.trace.of_kind(EventKind.PREFIX_VOLATILE)[0].data["spans"] == ["03:32:20.123456"]
    assert (
        make_session(emulator, system="Today is 2026-11-29.").trace.of_kind(EventKind.PREFIX_VOLATILE) == []
    )


def test_keep_last_cannot_rewrite_the_past_on_preserved_thinking_models(emulator: AnthropicEmulator) -> None:
    # docs/protocols.md §4.3 preserved thinking: a block is invalid once anything before it changed
    emulator.script.extend([answer(0), answer(1), answer(2)])
    session = make_session(emulator, policy=KeepLast(1))
    session.switch(emulator.client(), model="claude-opus-5-5", max_tokens=4096, thinking={"type": "adaptive"})
    for i in range(3):
        session.send(f"q{i}")
    assert [t.view.keep_reasoning for t in session.history.turns if t.view] == [(True,), (True,), (True,)]
    clamped = session.trace.of_kind(EventKind.POLICY_CLAMPED)
    assert [e.data["turn"] for e in clamped] == [0, 1]
    assert "append-only" in clamped[0].data["reasons"][0]
    for i in range(1, 3):
        before = strip_cache_control(body(emulator, i - 1)["messages"])
        assert strip_cache_control(body(emulator, i)["messages"])[: len(before)] == before


def test_request_fields_the_session_owns_cannot_be_passed_as_options(emulator: AnthropicEmulator) -> None:
    with pytest.raises(rs.InvalidOption, match="built by the session"):
        make_session(emulator, messages=[{"role": "user", "content": "smuggled"}])
    assert issubclass(rs.InvalidOption, ValueError)


def test_a_breakpoint_that_would_land_on_a_thinking_block_moves_back(emulator: AnthropicEmulator) -> None:
    # the vendor refuses cache_control on thinking blocks (inspect_ai PR #3967)
    from reasonstate.adapters import AnthropicAdapter

    emulator.script.extend([*three_step_chain()])
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    adapter = AnthropicAdapter()
    results = {c.id: "ok" for c in reply.tool_calls}
    request = session.next_request(results=results)
    # units: 2 tools, 1 system, 1 user (3), thinking (4), redacted_thinking (5), tool_use (6, 7), ...
    # an earlier request that diverged right after the redacted block would mark it (breakpoint 6)
    units = (*request.units[:6], "sha256:other")
    earlier = Records.of([(attrs.evolve(session.execution[-1], units=len(units)), units)])
    attempt = session._tools_attempt(results)
    moved = adapter.encode(
        session.prefix, attempt.history, MODEL, {"max_tokens": 4096, "thinking": THINKING}, earlier
    )
    assert moved.breakpoints == (3, 4, 10)  # moved back past both reasoning blocks to the user message
    marked = [b for m in moved.kwargs["messages"] for b in m["content"] if "cache_control" in b]
    assert all(b["type"] not in ("thinking", "redacted_thinking") for b in marked)
    client = emulator.client()
    client.messages.create(**moved.kwargs)  # the strict emulator accepts it


def test_one_call_at_a_time_a_concurrent_send_is_refused(emulator: AnthropicEmulator) -> None:
    import asyncio

    emulator.script.extend([answer(0), answer(1)])
    emulator.inject(Fault.delay(0.4))

    async def main() -> tuple[rs.AsyncSession, BaseException | None]:
        client = emulator.async_client()
        session = rs.AsyncSession(client, model=MODEL, max_tokens=4096, thinking=THINKING)
        first = asyncio.create_task(session.send("first"))
        await asyncio.sleep(0.1)
        assert session.state is rs.TurnState.AWAITING_MODEL
        try:
            await session.send("second")
            refused = None
        except rs.IllegalTransition as exc:
            refused = exc
        await first
        await client.close()
        return session, refused

    session, refused = asyncio.run(main())
    assert refused is not None and "a model call is in flight" in str(refused)
    assert [t.user for t in session.history.turns] == ["first"]
    assert len(emulator.requests) == 1


def test_a_cancelled_call_changes_nothing(emulator: AnthropicEmulator) -> None:
    """A send cancelled while the vendor holds its request leaves the session as it was. The cancel comes
    once the emulator has the request (it records a request before holding it), not after a fixed sleep:
    on a loaded machine 0.1 s was sometimes too early, and the request never reached the emulator."""
    import asyncio

    emulator.script.extend([answer(0), answer(1)])
    emulator.inject(Fault.delay(2.0))

    async def main() -> rs.AsyncSession:
        client = emulator.async_client()
        session = rs.AsyncSession(client, model=MODEL, max_tokens=4096, thinking=THINKING)
        task = asyncio.create_task(session.send("first"))
        for _ in range(1000):  # up to 10 s for the request to arrive
            if emulator.requests:
                break
            await asyncio.sleep(0.01)
        assert len(emulator.requests) == 1 and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert session.state is rs.TurnState.IDLE and len(session.history) == 0 and session.execution == ()
        await session.send("first")
        await client.close()
        return session

    session = asyncio.run(main())
    assert emulator.requests[0].body == emulator.requests[1].body
    assert len(session.history) == 1


def test_a_closed_session_refuses_calls_but_can_still_be_snapshotted(emulator: AnthropicEmulator) -> None:
    emulator.script.extend([answer(0)])
    session = make_session(emulator)
    session.send("q")
    session.close()
    with pytest.raises(rs.IllegalTransition, match="the session is closed"):
        session.send("again")
    assert session.snapshot().state == "closed"


@pytest.mark.parametrize("stream", [False, True])
def test_a_plain_text_answer_keeps_no_payload_and_goes_back_byte_for_byte(
    emulator: AnthropicEmulator, stream: bool
) -> None:
    """Issue 21: a text block whose bytes are the ones the codec renders from its text keeps no payload (no
    second copy of the answer in memory), and the next request still carries the answer exactly as the
    vendor sent it: the oracle is the content array as received on the wire (non-streamed: the response
    body's own bytes; streamed: the thinking payload as captured and the text written out by hand)."""
    import httpx2 as httpx

    received: list[bytes] = []

    def keep(response: httpx.Response) -> None:
        response.read()
        received.append(response.content)

    http = httpx.Client(event_hooks={"response": [keep]})
    emulator.script.extend([answer(0), answer(1), answer(1)])
    session = rs.Session(
        emulator.client(http_client=http), model=MODEL, max_tokens=4096, thinking=THINKING, stream=stream
    )
    session.send("First?")
    # a snapshot restores it byte-identically: the restored session's next request is the original's
    text = session.snapshot().model_dump_json()
    restored = rs.Session.restore(rs.SessionSnapshot.model_validate_json(text), emulator.client())
    assert restored.history == session.history
    session.send("Second?")
    restored.send("Second?")
    assert emulator.requests[2].body == emulator.requests[1].body
    step = session.history.turns[0].steps[0]
    assert [c.kind for c in step.continuation] == ["thinking"]
    assert [type(p).__name__ for p in step.parts] == ["ReasoningPart", "TextPart"]
    assert [p.continuation for p in step.parts] == [0, None]
    thinking = step.continuation[0].payload
    expected = (
        b'{"role":"assistant","content":[' + thinking + b',{"type":"text","text":"Follow-up answer 0."}]}'
    )
    if not stream:  # the response's content array, byte for byte as the vendor wrote it
        raw = received[0]
        start = raw.index(b'"content":[') + len(b'"content":')
        array = json.dumps(json.loads(raw)["content"], separators=(",", ":"), ensure_ascii=False).encode()
        assert raw[start : start + len(array)] == array  # compact on the wire: these are the bytes received
        assert expected == b'{"role":"assistant","content":' + array + b"}"
    sent = emulator.requests[1].body
    assert sent.count(expected) == 1
    assert body(emulator, 1)["messages"][1] == json.loads(expected)
