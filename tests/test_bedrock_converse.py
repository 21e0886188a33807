"""Bedrock Converse (issue 27 item 4; docs/protocols.md §11): the real boto3 ``bedrock-runtime`` client
over real HTTP (SigV4-signed, the AWS event-stream framing for ``converse_stream``) against the strict
emulator. Oracles are hand-written Converse JSON and event-stream bytes from the botocore service model,
never the codec's own output."""

from __future__ import annotations

import binascii
import json
from typing import Any

import botocore.exceptions
import pytest

import reasonstate as rs
from reasonstate.adapters import adapter_for
from reasonstate.adapters.base import VendorRequest
from reasonstate.adapters.bedrock_converse import BedrockConverseAdapter, ConverseAssembler, EventStreamParser
from reasonstate.errors import MalformedResponse, StreamInterrupted
from reasonstate.policies import Drop
from reasonstate.testing import AnthropicEmulator, Fault, ModelAction, ToolCallSpec
from reasonstate.testing.bedrock import BedrockConverseEmulator
from tests.conftest import CLOCK, WEATHER

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
THINKING = {"additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}}
R0 = "Weather first, then the time."
R1 = "Mild. Now the clock."


def chain(redacted: bool = False) -> list[ModelAction]:
    first = ModelAction.call(ToolCallSpec("get_weather", raw_arguments='{"city":"Paris"}'), reasoning=R0)
    if redacted:
        first = ModelAction(reasoning=R0, tool_calls=first.tool_calls, redacted=True)
    return [
        first,
        ModelAction.call(ToolCallSpec("get_time", raw_arguments='{"city":"Paris"}'), reasoning=R1),
        ModelAction.answer("Paris: 18C at noon.", reasoning="Done."),
    ]


def session_on(emu: BedrockConverseEmulator, **kw: Any) -> rs.Session:
    return rs.Session(emu.client(), model=MODEL, tools=[WEATHER, CLOCK], **{**THINKING, **kw})


def run_chain(session: rs.Session) -> rs.Reply:
    reply = session.send("Weather and time in Paris?")
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"ok": c.name} for c in reply.tool_calls})
    return reply


def layers(session: rs.Session) -> tuple[Any, ...]:
    return (session.history, session.continuation, session.execution, session.state)


def body(emu: BedrockConverseEmulator, i: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(emu.requests[i].body)
    return data


def test_a_boto3_client_is_routed_to_converse() -> None:
    with BedrockConverseEmulator() as emu:
        adapter = adapter_for(emu.client())
    assert (adapter.vendor, adapter.api) == ("bedrock", "converse")


@pytest.mark.parametrize("redacted", [False, True])
def test_reasoning_goes_back_in_place_and_unmodified_through_a_tool_chain(redacted: bool) -> None:
    """The emulator refuses a chain whose thinking is missing, re-signed or whose blob changed."""
    with BedrockConverseEmulator(chain(redacted)) as emu:
        session = session_on(emu)
        assert run_chain(session).text == "Paris: 18C at noon."
        answer0 = session.history.turns[0].steps[0].continuation[0].value
        sent = body(emu, 1)["messages"][1]
        assert sent == json.loads(json.dumps(answer0))  # the message as received, blocks in place
        first = sent["content"][0]["reasoningContent"]["reasoningText"]
        assert first["text"] == R0 and len(first["signature"]) == 44
        if redacted:
            assert set(sent["content"][1]["reasoningContent"]) == {"redactedContent"}
        assert [b for m in body(emu, 2)["messages"] for b in m["content"]][1:3] == sent["content"][:2]


def test_dropping_the_thinking_inside_the_chain_is_bedrocks_validation_exception() -> None:
    """pydantic/pydantic-ai#3757: "a final assistant message must start with a thinking block"."""
    with BedrockConverseEmulator(chain()) as emu:
        client = emu.client()
        ask = {"role": "user", "content": [{"text": "Weather?"}]}
        tools = {
            "tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}]
        }
        out = client.converse(modelId=MODEL, messages=[ask], toolConfig=tools, **THINKING)["output"][
            "message"
        ]
        use = next(b["toolUse"] for b in out["content"] if "toolUse" in b)
        result = {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "18C"}]}}],
        }
        dropped = {"role": "assistant", "content": [b for b in out["content"] if "reasoningContent" not in b]}
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            client.converse(modelId=MODEL, messages=[ask, dropped, result], toolConfig=tools, **THINKING)
        error = caught.value.response
        assert error["Error"]["Code"] == "ValidationException"
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert "must start with a thinking block" in error["Error"]["Message"]


def test_streamed_and_unstreamed_give_the_same_state_and_requests() -> None:
    states, bodies = [], []
    for stream in (False, True):
        with BedrockConverseEmulator(chain(redacted=True)) as emu:
            session = session_on(emu, stream=stream)
            run_chain(session)
            states.append((session.history, [(r.units, r.usage) for r in session.execution]))
            bodies.append([emu.requests[i].body for i in range(3)])
    assert states[0] == states[1]
    assert bodies[0] == bodies[1]


def test_snapshot_and_restore_give_a_byte_identical_next_request() -> None:
    with BedrockConverseEmulator([*chain()[:1], ModelAction.answer("a", reasoning="x")] * 2) as emu:
        session = session_on(emu)
        reply = session.send("Weather?")
        restored = rs.Session.restore(
            rs.SessionSnapshot.model_validate_json(session.snapshot().model_dump_json()), emu.client()
        )
        assert restored.history == session.history
        results = {c.id: {"ok": True} for c in reply.tool_calls}
        session.send_tool_results(results)
        restored.send_tool_results(results)
        assert emu.requests[-1].body == emu.requests[-2].body


def test_a_switch_between_bedrock_and_the_first_party_api_sends_nothing_foreign() -> None:
    """pydantic/pydantic-ai#3757: after a fallback between Bedrock and the first-party API, the other
    platform's signed thinking must not be sent (it does not verify there: 400)."""
    with (
        BedrockConverseEmulator([*chain()[:1], ModelAction.answer("back", reasoning="r")]) as bedrock,
        AnthropicEmulator([ModelAction.answer("first-party", reasoning="fp")]) as anthropic,
    ):
        session = session_on(bedrock)
        reply = session.send("Weather?")
        session.send_tool_results({c.id: {"ok": True} for c in reply.tool_calls})
        session.switch(anthropic.client(), model="claude-sonnet-4-5", **{"max_tokens": 2048})
        assert session.send("And now?").text == "first-party"
        sent = anthropic.requests[-1].body
        assert (
            b"reasoningContent" not in sent
            and json.loads(sent)["messages"][1]["content"][0]["type"] != "thinking"
        )
        assert bedrock.requests[-1].body.count(b'"signature"') == 1  # only Bedrock's own, back to Bedrock


def test_usage_is_normalized_from_bedrocks_fields() -> None:
    """AWS's prompt-caching example: inputTokens excludes the cached part, totalTokens sums all four."""
    response = {
        "output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
        "stopReason": "end_turn",
        "usage": {
            "inputTokens": 4,
            "outputTokens": 59,
            "totalTokens": 4075,
            "cacheReadInputTokens": 4012,
            "cacheWriteInputTokens": 0,
        },
        "metrics": {"latencyMs": 10},
    }
    decoded = BedrockConverseAdapter().decode(response, VendorRequest(kwargs={}, units=(), model=MODEL))
    usage = decoded.usage
    assert (usage.uncached_input, usage.cache_read, usage.cache_write, usage.output) == (4, 4012, 0, 59)


@pytest.mark.parametrize("stream", [False, True])
def test_cache_points_close_the_prefix_and_the_request_and_predictions_are_exact(stream: bool) -> None:
    """The session puts a cachePoint after the stable prefix and at the end of each request: each request
    reads the one before it (above Claude's 1,024-token minimum) and the prediction equals the report."""
    system = "You are a careful travel assistant. " * 150
    with BedrockConverseEmulator([*chain(), ModelAction.answer("Still cold.", reasoning="r")]) as emu:
        session = session_on(emu, system=system, stream=stream)
        run_chain(session)
        session.send("And tomorrow?")
        sent = body(emu, 1)
    records = list(session.execution)
    assert [r.usage.cache_read > 0 for r in records] == [False, True, True, True]
    assert all(r.predicted_cache_read == r.usage.cache_read for r in records), [
        (r.predicted_cache_read, r.usage.cache_read) for r in records
    ]
    assert sent["system"][-1] == {"cachePoint": {"type": "default"}}
    assert sent["messages"][-1]["content"][-1] == {"cachePoint": {"type": "default"}}
    # replayed assistant messages carry no cache point: they go back as they came
    assert all(
        "cachePoint" not in b for m in sent["messages"] if m["role"] == "assistant" for b in m["content"]
    )


def test_a_cache_point_in_the_system_prompt_writes_then_reads() -> None:
    with BedrockConverseEmulator([ModelAction.answer("a"), ModelAction.answer("b")]) as emu:
        client = emu.client()
        system = [{"text": "You are careful. " * 300}, {"cachePoint": {"type": "default"}}]
        ask = [{"role": "user", "content": [{"text": "hi"}]}]
        first = client.converse(modelId=MODEL, system=system, messages=ask)["usage"]
        second = client.converse(modelId=MODEL, system=system, messages=ask)["usage"]
    assert first["cacheWriteInputTokens"] > 0 and first["cacheReadInputTokens"] == 0
    assert second["cacheReadInputTokens"] == first["cacheWriteInputTokens"]
    assert (
        BedrockConverseAdapter()
        .decode(
            {
                "output": {"message": {"role": "assistant", "content": []}},
                "stopReason": "end_turn",
                "usage": second,
            },
            VendorRequest(kwargs={}, units=(), model=MODEL),
        )
        .usage.cache_read
        == second["cacheReadInputTokens"]
    )


# -- the event stream, hand-framed ----------------------------------------------------------------------


def _frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """One event-stream message written from AWS's framing spec, independently of the emulator."""
    headers = b""
    for name, value in (
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ):
        headers += (
            bytes([len(name)]) + name.encode() + b"\x07" + len(value).to_bytes(2, "big") + value.encode()
        )
    data = json.dumps(payload).encode()
    prelude = (16 + len(headers) + len(data)).to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    message = prelude + binascii.crc32(prelude).to_bytes(4, "big") + headers + data
    return message + binascii.crc32(message).to_bytes(4, "big")


def test_the_assembler_reads_a_hand_framed_stream_cut_anywhere() -> None:
    signature = "Eq" + "s" * 510
    stream = b"".join(
        [
            _frame("messageStart", {"role": "assistant"}),
            _frame(
                "contentBlockDelta",
                {"delta": {"reasoningContent": {"text": "Let me "}}, "contentBlockIndex": 0},
            ),
            _frame(
                "contentBlockDelta",
                {"delta": {"reasoningContent": {"text": "think."}}, "contentBlockIndex": 0},
            ),
            _frame(
                "contentBlockDelta",
                {"delta": {"reasoningContent": {"signature": signature}}, "contentBlockIndex": 0},
            ),
            _frame("contentBlockStop", {"contentBlockIndex": 0}),
            _frame(
                "contentBlockStart",
                {
                    "start": {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather"}},
                    "contentBlockIndex": 1,
                },
            ),
            _frame(
                "contentBlockDelta", {"delta": {"toolUse": {"input": '{"city":'}}, "contentBlockIndex": 1}
            ),
            _frame(
                "contentBlockDelta", {"delta": {"toolUse": {"input": '"Paris"}'}}, "contentBlockIndex": 1}
            ),
            _frame("contentBlockStop", {"contentBlockIndex": 1}),
            _frame("messageStop", {"stopReason": "tool_use"}),
            _frame(
                "metadata",
                {
                    "usage": {"inputTokens": 3, "outputTokens": 9, "totalTokens": 12},
                    "metrics": {"latencyMs": 1},
                },
            ),
        ]
    )
    expected = {
        "role": "assistant",
        "content": [
            {"reasoningContent": {"reasoningText": {"text": "Let me think.", "signature": signature}}},
            {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather", "input": {"city": "Paris"}}},
        ],
    }
    for size in (1, 7, 64, len(stream)):
        assembler = ConverseAssembler()
        for k in range(0, len(stream), size):
            assembler.feed_bytes(stream[k : k + size])
        response = assembler.finish()
        assert response["output"]["message"] == expected and response["stopReason"] == "tool_use"


def test_a_bad_crc_is_malformed_and_a_cut_stream_is_interrupted() -> None:
    frame = bytearray(_frame("messageStart", {"role": "assistant"}))
    frame[-1] ^= 1
    with pytest.raises(MalformedResponse):
        EventStreamParser().feed(bytes(frame))
    assembler = ConverseAssembler()
    assembler.feed_bytes(_frame("messageStart", {"role": "assistant"}))
    with pytest.raises(StreamInterrupted):
        assembler.finish()


def test_a_truncated_converse_stream_is_interrupted_and_changes_nothing() -> None:
    with BedrockConverseEmulator(chain()) as emu:
        session = session_on(emu, stream=True)
        reply = session.send("Weather?")
        before = layers(session)
        emu.inject(Fault.truncate_stream(3))
        results = {c.id: {"ok": True} for c in reply.tool_calls}
        with pytest.raises(StreamInterrupted):
            session.send_tool_results(results)
        assert layers(session) == before
        session.send_tool_results(results)
        assert emu.requests[-1].body == emu.requests[-2].body


def test_a_validation_exception_is_a_typed_error_and_changes_nothing() -> None:
    """An unknown model id on an emulator that serves a list: Bedrock's 400, raised as VendorError."""
    with BedrockConverseEmulator(chain(), models=[MODEL]) as emu:
        session = rs.Session(emu.client(), model="anthropic.claude-nope-v1:0", tools=[WEATHER], **THINKING)
        before = layers(session)
        with pytest.raises(rs.VendorError) as caught:
            session.send("Weather?")
        assert caught.value.status == 400
        assert "model identifier is invalid" in str(caught.value)
        assert layers(session) == before


def test_drop_removes_the_reasoning_of_a_closed_turn_and_nothing_else() -> None:
    with BedrockConverseEmulator([*chain(), ModelAction.answer("Still cold.", reasoning="r")]) as emu:
        session = session_on(emu, policy=Drop())
        run_chain(session)
        session.send("And tomorrow?")
        messages = body(emu, 3)["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert all("reasoningContent" not in b for m in assistant for b in m["content"])
    assert [b["toolUse"]["toolUseId"] for m in assistant for b in m["content"] if "toolUse" in b] == [
        "tooluse_001",
        "tooluse_002",
    ]


def test_the_guard_cannot_watch_a_boto3_client_and_says_so() -> None:
    """boto3 sends through urllib3, not httpx2: ``rs.instrument`` refuses it with a clear TypeError."""
    with BedrockConverseEmulator() as emu, pytest.raises(TypeError, match="httpx2"):
        rs.instrument(emu.client())


def test_an_async_session_refuses_the_sync_only_boto3_client_before_anything_is_sent() -> None:
    with BedrockConverseEmulator() as emu, pytest.raises(rs.InvalidOption, match="sync client"):
        rs.AsyncSession(emu.client(), model=MODEL)
    assert emu.requests == []


def test_an_option_converse_does_not_take_is_refused_before_anything_is_sent() -> None:
    """``max_tokens`` is the Messages API's; Converse takes ``inferenceConfig={"maxTokens": ...}``."""
    with BedrockConverseEmulator() as emu:
        with pytest.raises(rs.InvalidOption, match=r"max_tokens.*inferenceConfig"):
            rs.Session(emu.client(), model=MODEL, max_tokens=1024)
        session = rs.Session(emu.client(), model=MODEL, inferenceConfig={"maxTokens": 1024})
        assert emu.requests == [] and session.history.turns == ()


def test_converse_payloads_are_bound_to_bedrock_and_never_go_to_messages() -> None:
    """Issue 27: a Converse payload's provenance reads (bedrock, converse, model) on the Bedrock platform
    (docs/protocols.md §10.1, §11), so neither the Messages API on Bedrock (``AnthropicBedrock``, the same
    model id) nor the first-party API ever gets its signed reasoning."""
    with (
        BedrockConverseEmulator([*chain()[:1], ModelAction.answer("back", reasoning="r")]) as converse,
        AnthropicEmulator([ModelAction.answer("messages", reasoning="m")], platform="bedrock") as messages,
        AnthropicEmulator([ModelAction.answer("first-party", reasoning="fp")]) as first,
    ):
        session = session_on(converse)
        reply = session.send("Weather?")
        session.send_tool_results({c.id: {"ok": True} for c in reply.tool_calls})
        own = [c for c in session.continuation if c.api == "converse"]
        assert own and {(c.vendor, c.api, c.model, c.platform) for c in own} == {
            ("bedrock", "converse", MODEL, "bedrock")
        }
        for c in own:
            assert not c.replayable_to("bedrock", "converse", MODEL)  # first-party: another platform
            assert not c.replayable_to("anthropic", "messages", MODEL, "bedrock")
            assert c.replayable_to("bedrock", "converse", MODEL, "bedrock")
        signed = [s for c in own for s in json.loads(c.payload).get("content", []) if "reasoningContent" in s]
        signatures = [s["reasoningContent"]["reasoningText"]["signature"] for s in signed]
        assert signatures
        session.switch(messages.client(), model=MODEL, **{"max_tokens": 2048})
        assert session.send("And now?").text == "messages"
        session.switch(first.client(), model="claude-sonnet-4-5", **{"max_tokens": 2048})
        assert session.send("And then?").text == "first-party"
        sent = b"".join(r.body for r in [*messages.requests, *first.requests])
        assert b"reasoningContent" not in sent and not [s for s in signatures if s.encode() in sent]


def test_a_converse_snapshot_from_before_the_platform_binding_restores_on_bedrock() -> None:
    """A Converse snapshot written before its payloads were bound to Bedrock (five-field origins, header
    platform first-party) restores on Converse, its payloads read as Bedrock's, and the next request is
    byte-identical to the live session's."""
    with BedrockConverseEmulator([*chain()[:1], ModelAction.answer("a", reasoning="x")] * 2) as emu:
        session = session_on(emu)
        reply = session.send("Weather?")
        data = json.loads(session.snapshot().model_dump_json())
        assert data["platform"] == "bedrock"
        assert {o[5] for o in data["history"]["origins"]} == {"bedrock"}
        data["platform"] = "first-party"  # as the earlier reasonstate wrote it
        data["history"]["origins"] = [o[:5] for o in data["history"]["origins"]]
        old = rs.SessionSnapshot.model_validate(data).sealed()
        restored = rs.Session.restore(old, emu.client())
        assert restored.continuation == session.continuation
        assert {c.platform for c in restored.continuation} == {"bedrock"}
        results = {c.id: {"ok": True} for c in reply.tool_calls}
        session.send_tool_results(results)
        restored.send_tool_results(results)
        assert emu.requests[-1].body == emu.requests[-2].body
