"""The core on Gemini generateContent: the pure codec on the documented example (docs/protocols.md §5.5),
the stream assembler, then end to end with the real ``google-genai`` SDK against the strict emulator.

Each test names the docs/protocols.md §5 rule it pins down.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import httpx2
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

import reasonstate as rs
from reasonstate.adapters import adapter_for, client_is_async
from reasonstate.adapters.base import VendorRequest, compact
from reasonstate.adapters.gemini import GeminiAdapter, GeminiAssembler
from reasonstate.policies import Drop, Keep, KeepLast
from reasonstate.prefix import Prefix
from reasonstate.state import (
    Continuation,
    EventKind,
    History,
    OpaquePart,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    Turn,
    TurnView,
    Usage,
)
from reasonstate.testing import Fault, ModelAction, ToolCallSpec, count_tokens
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from tests.conftest import assert_memoized_runs_encode_as_fresh

# -- the documented example (§5.5): a thought part and a signed function call -----------------------------

SIGNATURE = "AAFvcGFxdWUtZ2VtaW5pLXNpZ25hdHVyZf8="  # b"\x00\x01opaque-gemini-signature\xff"
OTHER_SIGNATURE = base64.b64encode(b"\x02another signature").decode()
DOCUMENTED_RESPONSE: dict[str, Any] = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "**Planning** I need the weather.", "thought": True},
                    {
                        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                        "thoughtSignature": SIGNATURE,
                    },
                ],
            },
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 1200,
        "candidatesTokenCount": 20,
        "totalTokenCount": 1320,
        "cachedContentTokenCount": 1024,
        "thoughtsTokenCount": 100,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 1200}],
        "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 1024}],
    },
    "modelVersion": "gemini-3-flash",
    "responseId": "emu-resp-001",
}
WEATHER = rs.Tool(
    name="get_weather",
    description="w",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def _request(model: str = "gemini-3-flash") -> VendorRequest:
    return VendorRequest(kwargs={}, units=("u",), model=model)


def test_the_documented_response_decodes_to_one_payload_per_part_as_received() -> None:
    step = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request())
    thought, call = step.parts
    assert thought == ReasoningPart(text="**Planning** I need the weather.", continuation=0)
    assert isinstance(call, ToolCallPart)
    assert (call.name, dict(call.arguments or {}), call.raw_arguments) == (
        "get_weather",
        {"city": "Paris"},
        '{"city":"Paris"}',
    )
    parts = DOCUMENTED_RESPONSE["candidates"][0]["content"]["parts"]
    # the thought's text is held once, by its part: its payload is the rest of the Part as received
    assert [c.payload for c in step.continuation] == [
        b'{"thought":true}',
        json.dumps(parts[1], ensure_ascii=False, separators=(",", ":")).encode(),
    ]
    assert [compact(p) for p in parts_of(step)] == [
        json.dumps(p, ensure_ascii=False, separators=(",", ":")).encode() for p in parts
    ]
    assert [(c.kind, c.model_bound) for c in step.continuation] == [("thought", True), ("functionCall", True)]
    assert {(c.vendor, c.api, c.model) for c in step.continuation} == {
        ("google", "generate_content", "gemini-3-flash")
    }


def test_usage_is_normalized_prompt_includes_cached_and_output_includes_thoughts() -> None:
    """Pain points: microsoft/agent-framework#6637 and google-gemini/gemini-cli#14524 (Gemini cached and
    thoughts counts dropped)."""
    # §5.3: promptTokenCount includes cachedContentTokenCount; total = prompt + candidates + thoughts
    step = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request())
    assert step.usage == Usage(uncached_input=176, cache_read=1024, cache_write=0, output=120, reasoning=100)
    assert (
        step.usage.prompt_tokens + step.usage.output
        == DOCUMENTED_RESPONSE["usageMetadata"]["totalTokenCount"]
    )
    assert (step.stop_reason, step.response_id) == ("STOP", "emu-resp-001")


def test_provenance_is_the_requested_model_and_the_echoed_version_is_only_traced() -> None:
    step = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request("gemini-flash-latest"))
    assert step.model == "gemini-flash-latest"
    assert step.response_model == "gemini-3-flash"
    assert {c.model for c in step.continuation} == {"gemini-flash-latest"}


def test_a_call_without_a_vendor_id_gets_a_stable_id_from_the_response_id_and_its_part_index() -> None:
    a = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request())
    b = GeminiAdapter().decode(json.loads(json.dumps(DOCUMENTED_RESPONSE)), _request())
    assert a.parts[1].id == b.parts[1].id == "gemini-call-emu-resp-001-1"  # type: ignore[union-attr]


def test_a_vendor_call_id_is_kept() -> None:
    response = json.loads(json.dumps(DOCUMENTED_RESPONSE))
    response["candidates"][0]["content"]["parts"][1]["functionCall"]["id"] = "fc-7"
    step = GeminiAdapter().decode(response, _request())
    assert step.parts[1].id == "fc-7"  # type: ignore[union-attr]


@pytest.mark.parametrize("args", ['{"city":"Paris"}', ["Paris"], 3])
def test_function_call_args_that_are_not_an_object_are_malformed(args: Any) -> None:
    response = json.loads(json.dumps(DOCUMENTED_RESPONSE))
    response["candidates"][0]["content"]["parts"][1]["functionCall"]["args"] = args
    with pytest.raises(rs.MalformedResponse, match="args is not an object"):
        GeminiAdapter().decode(response, _request())


def test_unsigned_text_is_unbound_and_unknown_parts_are_kept_opaque() -> None:
    response = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Hi."}, {"executableCode": {"code": "1"}}]},
                "finishReason": "STOP",
            }
        ]
    }
    step = GeminiAdapter().decode(response, _request())
    assert step.parts == (
        TextPart(text="Hi.", continuation=0),
        OpaquePart(type="executableCode", continuation=1),
    )
    # a part of a kind the adapter does not know is bound to its model (issue 23 item 7)
    assert [c.model_bound for c in step.continuation] == [False, True]


def test_a_blocked_prompt_is_a_vendor_error() -> None:
    with pytest.raises(rs.VendorError, match="blocked the prompt: SAFETY"):
        GeminiAdapter().decode({"promptFeedback": {"blockReason": "SAFETY"}}, _request())


def test_encode_replays_each_part_as_received_and_answers_in_declared_order() -> None:
    step = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request())
    from reasonstate.state import Step, ToolResultPart

    done = Step(
        parts=step.parts,
        continuation=step.continuation,
        stop_reason=step.stop_reason,
        usage=step.usage,
        model=step.model,
        tool_results=(ToolResultPart(call_id=step.parts[1].id, content='{"temp_c":18}'),),  # type: ignore[union-attr]
    )
    history = History((Turn(index=0, user="Weather in Paris?", steps=(done,)),))
    request = GeminiAdapter().encode(Prefix(tools=[WEATHER]), history, "gemini-3-flash", {}, [])
    contents = request.kwargs["contents"]
    # §5.5: the model turn goes back part for part, the signature on the function call part
    assert contents[1] == DOCUMENTED_RESPONSE["candidates"][0]["content"] | {"role": "model"}
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp_c": 18}}}],
    }
    assert request.kwargs["config"]["tools"] == [
        {
            "function_declarations": [
                {
                    "name": "get_weather",
                    "description": "w",
                    "parameters_json_schema": {"properties": {"city": {"type": "string"}}, "type": "object"},
                }
            ]
        }
    ]


def test_a_part_whose_text_is_not_its_first_field_is_kept_whole_and_each_part_goes_back_as_received() -> None:
    """§5.4 (issue 21): a text or thought Part whose first field is ``text`` is captured without it (its part
    holds the text once) and put back first; a Part in any other key order is captured whole. Either way
    the replayed Part has the received fields in the received order, and its unit is the digest of the
    received bytes."""
    raw_parts: list[dict[str, Any]] = [
        {"thought": True, "text": "Plan: answer in one word."},  # text not first: kept whole
        {"text": "Thinking on.", "thought": True, "thoughtSignature": SIGNATURE},  # signed thought
        {"text": "Yes.", "thoughtSignature": OTHER_SIGNATURE},
        {"text": "Unsigned tail."},
    ]
    response = {
        "candidates": [
            {"content": {"role": "model", "parts": raw_parts}, "finishReason": "STOP", "index": 0}
        ],
        "responseId": "r-order",
    }
    step = GeminiAdapter().decode(response, _request())
    assert [c.payload for c in step.continuation] == [
        b'{"thought":true,"text":"Plan: answer in one word."}',
        b'{"thought":true,"thoughtSignature":"' + SIGNATURE.encode() + b'"}',
        b'{"thoughtSignature":"' + OTHER_SIGNATURE.encode() + b'"}',
        b"{}",
    ]
    assert [c.digest for c in step.continuation] == [
        "sha256:" + hashlib.sha256(c.payload).hexdigest() for c in step.continuation
    ]
    done = Step(step.parts, step.continuation, step.stop_reason, step.usage, step.model)
    history = History((Turn(index=0, user="Yes or no?", steps=(done,)), Turn(index=1, user="Sure?")))
    request = GeminiAdapter().encode(Prefix(), history, "gemini-3-flash", {}, [])
    sent_parts = request.kwargs["contents"][1]["parts"]
    assert [list(p.items()) for p in sent_parts] == [list(p.items()) for p in raw_parts]
    # the content's unit is that of the Parts as received (the same as when every payload was whole)
    whole = [hashlib.sha256(compact(p)).hexdigest() for p in raw_parts]
    unit = (
        "sha256:" + hashlib.sha256("\n".join(("model", *(f"sha256:{d}" for d in whole))).encode()).hexdigest()
    )
    assert request.units[2] == unit


def test_unsigned_thoughts_of_one_model_hold_one_payload_and_their_texts_once(
    emulator: GeminiEmulator,
) -> None:
    """Issue 21: an unsigned thought's payload is ``{"thought":true}``, one value for every such Part of
    the model (nothing opaque in it), also after a restore; each part holds its own text, and the
    thoughts go back as they came."""
    recorder = Recorder()
    emulator.transform = recorder
    emulator.script.extend([answer(1), answer(2), answer(3), answer(3)])
    session = make_session(emulator)
    for question in ("One?", "Two?"):
        session.send(question)
    thoughts = [t.steps[0].continuation[0] for t in session.history.turns]
    assert thoughts[0] is thoughts[1] and thoughts[0].payload == b'{"thought":true}'
    texts = [t.steps[0].parts[0].text for t in session.history.turns]  # type: ignore[union-attr]
    assert texts == ["Thinking about follow-up 1. " * 6, "Thinking about follow-up 2. " * 6]
    restored = rs.Session.restore(session.snapshot().model_dump_json(), emulator.client())
    assert restored.history == session.history
    again = [t.steps[0].continuation[0] for t in restored.history.turns]
    assert again[0] is again[1]
    restored.send("Three?")
    session.send("Three?")
    assert emulator.requests[-1].body == emulator.requests[-2].body
    received = [r["candidates"][0]["content"]["parts"] for r in recorder.responses[:2]]
    contents = sent(emulator, 3)["contents"]
    for content, parts in zip((contents[1], contents[3]), received, strict=True):
        assert_parts_sent_as_received(content["parts"], parts)


def test_a_shared_thought_payload_is_one_per_model_and_platform() -> None:
    """The one ``{"thought":true}`` value is shared only between Parts of one origin: another model or
    platform has its own, bound to it (a thought never goes to another model, §5.4)."""
    flash = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request("gemini-3-flash")).continuation[0]
    again = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request("gemini-3-flash")).continuation[0]
    pro = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request("gemini-3-pro")).continuation[0]
    vertex = GeminiAdapter(platform="vertex").decode(DOCUMENTED_RESPONSE, _request("gemini-3-flash"))
    assert again is flash and pro is not flash and vertex.continuation[0] is not flash
    assert [(c.model, c.platform, c.payload) for c in (flash, pro, vertex.continuation[0])] == [
        ("gemini-3-flash", "first-party", b'{"thought":true}'),
        ("gemini-3-pro", "first-party", b'{"thought":true}'),
        ("gemini-3-flash", "vertex", b'{"thought":true}'),
    ]
    assert not flash.replayable_to("google", "generate_content", "gemini-3-pro")
    assert not flash.replayable_to("google", "generate_content", "gemini-3-flash", "vertex")


def test_a_snapshot_holding_whole_parts_restores_to_the_same_next_request(emulator: GeminiEmulator) -> None:
    """Snapshots taken before text was left out of payloads hold every Part whole (§5.4): they restore, and
    the next request is byte for byte the one the session that took them sends."""
    emulator.script.extend([*chain(), answer(1), answer(2), answer(2), answer(2)])
    session = make_session(emulator)
    run_chain(session)
    session.send("And tomorrow?")
    snapshot = session.snapshot()
    data = json.loads(snapshot.model_dump_json())
    history = data["history"]
    origins = history["origins"]
    digests = []
    wholes = 0
    for turn in history["turns"]:
        for step in turn[1]:
            texts = {p[2]: p[1] for p in step[0] if p[0] in (0, 1) and len(p) > 2}
            for i, c in enumerate(step[1]):
                kind = origins[c[0]][3]
                if kind in ("text", "thought") and "text" not in c[1] and texts.get(i):
                    c[1] = {"text": texts[i], **c[1]}
                    wholes += 1
                digests.append("sha256:" + hashlib.sha256(compact(c[1])).hexdigest())
    assert wholes == 6  # 4 thoughts and 2 answers: what is now left out was in every payload
    history["digest"] = "sha256:" + hashlib.sha256("".join(digests).encode()).hexdigest()
    old = type(snapshot).model_validate(data).sealed()
    restored = rs.Session.restore(old, emulator.client())
    texts = [c.payload for c in restored.continuation if c.kind in ("text", "thought")]
    assert len(texts) == 6 and all(p.startswith(b'{"text":') for p in texts)
    for s in (restored, session, rs.Session.restore(snapshot, emulator.client())):
        s.send("And the day after?")
    assert emulator.requests[-3].body == emulator.requests[-2].body == emulator.requests[-1].body
    assert [r.divergence for r in restored.execution][-1] == [r.divergence for r in session.execution][-1]


def test_the_sdk_sends_the_replayed_turn_as_documented() -> None:
    """The documented second request (§5.5), as the real SDK serializes our kwargs.

    Pain point: cita-777/metapi#60 and lbjlaq/Antigravity-Manager#1513 (proxies lost the signature, or sent
    ``thought_signature`` where the wire wants ``thoughtSignature``)."""
    sent: list[bytes] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.content)
        return httpx2.Response(200, json=DOCUMENTED_RESPONSE)

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    client = genai.Client(
        api_key="test-key",
        http_options=genai_types.HttpOptions(base_url="http://gemini.test", httpx_client=http),
    )
    session = rs.Session(client, model="gemini-3-flash", tools=[WEATHER])
    reply = session.send("Weather in Paris?")
    session.send_tool_results({reply.tool_calls[0].id: {"temp_c": 18}})
    second = json.loads(sent[1])
    assert second["contents"][1:] == [
        {
            "parts": [
                {"text": "**Planning** I need the weather.", "thought": True},
                {
                    "functionCall": {"args": {"city": "Paris"}, "name": "get_weather"},
                    "thoughtSignature": SIGNATURE,
                },
            ],
            "role": "model",
        },
        {
            "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp_c": 18}}}],
            "role": "user",
        },
    ]


def test_the_genai_client_picks_the_gemini_adapter_and_serves_sync_and_async() -> None:
    client = genai.Client(
        api_key="test-key", http_options=genai_types.HttpOptions(base_url="http://gemini.test")
    )
    assert isinstance(adapter_for(client), GeminiAdapter)
    assert client_is_async(client) is None  # client.models and client.aio.models
    assert client_is_async(client.aio) is True
    rs.Session(client, model="gemini-3-flash")
    rs.AsyncSession(client, model="gemini-3-flash")
    rs.AsyncSession(client.aio, model="gemini-3-flash")
    with pytest.raises(rs.InvalidOption, match="async client"):
        rs.Session(client.aio, model="gemini-3-flash")


@pytest.mark.parametrize(
    "options",
    [
        {"contents": []},
        {"system_instruction": "x"},
        {"candidate_count": 2},
        {"automatic_continuation": True},
        {"should_return_http_response": False},
    ],
)
def test_options_the_session_owns_are_refused_at_construction(options: dict[str, Any]) -> None:
    client = genai.Client(
        api_key="test-key", http_options=genai_types.HttpOptions(base_url="http://gemini.test")
    )
    with pytest.raises(rs.InvalidOption):
        rs.Session(client, model="gemini-3-flash", **options)


# -- the stream assembler (§5.5) ----------------------------------------------------------------------------


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)


def test_a_stream_of_whole_parts_assembles_to_the_documented_response() -> None:
    parts = DOCUMENTED_RESPONSE["candidates"][0]["content"]["parts"]
    first = {
        "candidates": [{"content": {"role": "model", "parts": parts[:1]}, "index": 0}],
        "modelVersion": "gemini-3-flash",
        "responseId": "emu-resp-001",
    }
    last = json.loads(json.dumps(DOCUMENTED_RESPONSE))
    last["candidates"][0]["content"]["parts"] = parts[1:]
    assembler = GeminiAssembler()
    body = _sse(first, last)
    for i in range(0, len(body), 7):  # any chunking of the body
        assembler.feed_bytes(body[i : i + 7])
    result = assembler.finish()
    assert result["candidates"] == DOCUMENTED_RESPONSE["candidates"]
    assert result["usageMetadata"] == DOCUMENTED_RESPONSE["usageMetadata"]
    assert json.dumps(result["candidates"][0]["content"]["parts"]) == json.dumps(parts)


def test_text_fragments_join_until_the_signature_that_ends_their_part() -> None:
    fragments = [{"text": "Rome is "}, {"text": "warmer.", "thoughtSignature": SIGNATURE}, {"text": "P.S."}]
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [f]}, "index": 0}]} for f in fragments]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    assembler = GeminiAssembler()
    assembler.feed_bytes(_sse(*chunks))
    parts = assembler.finish()["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "Rome is warmer.", "thoughtSignature": SIGNATURE}, {"text": "P.S."}]


def test_a_stream_without_a_finish_reason_is_interrupted() -> None:
    assembler = GeminiAssembler()
    assembler.feed_bytes(_sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "Ro"}]}}]}))
    with pytest.raises(rs.StreamInterrupted):
        assembler.finish()


def test_a_stream_error_chunk_is_a_vendor_error() -> None:
    assembler = GeminiAssembler()
    with pytest.raises(rs.VendorError, match="overloaded"):
        assembler.feed_bytes(_sse({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}))


def test_signatures_decode_to_the_same_bytes_whatever_base64_alphabet_the_sdk_resends() -> None:
    # §5.1: the SDK re-sends signatures in the URL-safe alphabet; the bytes are what must not change
    assert base64.urlsafe_b64decode("-_-_AA==") == base64.b64decode("+/+/AA==")


# -- end to end: the real SDK against the strict emulator ---------------------------------------------------

MODEL = "gemini-3-flash"
# long enough that the stable prefix alone passes gemini-3's 4,096-token implicit-cache minimum (§5.3)
SYSTEM = "You are a careful travel assistant. Always check the weather before advising. " * 230
CLOCK = rs.Tool(
    name="get_time",
    description="Local time for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
THOUGHTS = {"include_thoughts": True}


def chain() -> list[ModelAction]:
    """thought → 2 parallel calls; thought → 1 call; thought → final answer (each step signed, §5.4)."""
    return [
        ModelAction(
            reasoning="Two cities: call the weather tool for both, in parallel.",
            tool_calls=(
                ToolCallSpec("get_weather", {"city": "Paris"}),
                ToolCallSpec("get_weather", {"city": "Rome"}),
            ),
        ),
        ModelAction(
            reasoning="Paris is mild. Check the local time in Rome too.",
            tool_calls=(ToolCallSpec("get_time", {"city": "Rome"}),),
        ),
        ModelAction(
            reasoning="I have everything; Rome is warmer.", text="Rome is warmer (22C) than Paris (18C)."
        ),
    ]


def answer(i: int) -> ModelAction:
    return ModelAction(reasoning=f"Thinking about follow-up {i}. " * 6, text=f"Follow-up answer {i}.")


@pytest.fixture
def emulator() -> Iterator[GeminiEmulator]:
    with GeminiEmulator() as emu:
        yield emu


class Recorder:
    """The emulator's ``transform`` hook: keeps every response exactly as the emulator answered it."""

    def __init__(self, edit: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        self.responses: list[dict[str, Any]] = []
        self._edit = edit

    def __call__(self, response: dict[str, Any]) -> dict[str, Any]:
        if self._edit is not None:
            self._edit(len(self.responses), response)
        self.responses.append(json.loads(json.dumps(response)))
        return response


def make_session(emulator: GeminiEmulator, client: Any = None, **kw: Any) -> rs.Session:
    options: dict[str, Any] = {"system": SYSTEM, "tools": [WEATHER, CLOCK], "thinking_config": THOUGHTS}
    options.update(kw)
    return rs.Session(client if client is not None else emulator.client(), model=MODEL, **options)


def run_chain(session: rs.Session, question: str = "Paris or Rome: which is warmer?") -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results(
            {c.id: {"city": (c.arguments or {}).get("city"), "tool": c.name} for c in reply.tool_calls}
        )
    return reply


def sent(emulator: GeminiEmulator, i: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(emulator.requests[i].body)
    return data


def signature_bytes(part: Mapping[str, Any]) -> bytes | None:
    """A part's signature as bytes: the SDK re-sends the URL-safe alphabet (§5.1), so compare decoded."""
    value = part.get("thoughtSignature")
    if value is None:
        return None
    return base64.urlsafe_b64decode(value.replace("+", "-").replace("/", "_"))


def without_signature(part: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k != "thoughtSignature"}


def parts_of(step: Step) -> list[dict[str, Any]]:
    """Each Part of ``step`` as the session holds it to send back (§5.4): its payload, the part's text put
    back as its first field where the payload left it out (a text or thought Part whose text came first)."""
    whole = []
    for c, part in zip(step.continuation, step.parts, strict=True):
        value = json.loads(c.payload)
        text = getattr(part, "text", "")
        if c.kind in ("text", "thought") and text and "text" not in value:
            value = {"text": text, **value}
        whole.append(value)
    return whole


def assert_parts_sent_as_received(sent_parts: list[Any], received: list[Any]) -> None:
    """Same Parts, in the same order, each signature on the very Part it came on, with the same bytes."""
    assert [without_signature(p) for p in sent_parts] == [without_signature(p) for p in received]
    assert [signature_bytes(p) for p in sent_parts] == [signature_bytes(p) for p in received]


def _layers(session: rs.Session) -> tuple[Any, ...]:
    return (session.history, session.continuation, session.execution, session.state)


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_every_signature_goes_back_on_its_part_with_its_bytes_in_the_chain_and_in_later_turns(
    emulator: GeminiEmulator, stream: bool
) -> None:
    """Pain points: google/adk-python#3705 and google/adk-js#149 (thought_signature lost after several tool
    calls), google/adk-python#4650 (a LiteLLM regression lost the signatures of parallel calls) and
    vercel/ai#10344 (Gemini 3 in a tool loop)."""
    recorder = Recorder()
    emulator.transform = recorder
    emulator.script.extend([*chain(), answer(1), answer(2)])
    session = make_session(emulator, stream=stream)  # Keep: closed turns go back as they were
    run_chain(session)
    session.send("And tomorrow?")
    session.send("And the day after?")
    received = [r["candidates"][0]["content"]["parts"] for r in recorder.responses]
    for parts in received:  # signed: the first call of a step with calls, else the last part (§5.4)
        calls = [p for p in parts if "functionCall" in p]
        assert signature_bytes(calls[0] if calls else parts[-1])
    # contents: user 0, step 0 at 1, results 2, step 1 at 3, results 4, step 2 at 5, user 6, step 3 at 7, ...
    where = {0: 1, 1: 3, 2: 5, 3: 7, 4: 9}
    for step, index in where.items():
        for request in range(step + 1, len(emulator.requests)):
            assert_parts_sent_as_received(sent(emulator, request)["contents"][index]["parts"], received[step])
    # the first call of the parallel step carries the signature; the second goes back without one (§5.4)
    first_step = sent(emulator, 1)["contents"][1]["parts"]
    assert [("thoughtSignature" in p, "functionCall" in p) for p in first_step] == [
        (False, False),
        (True, True),
        (False, True),
    ]
    assert session.report().protocol_errors == 0


def test_one_continuation_per_part_each_the_part_as_received(emulator: GeminiEmulator) -> None:
    recorder = Recorder()
    emulator.transform = recorder
    emulator.script.extend(chain())
    session = make_session(emulator)
    run_chain(session)
    for step, response in zip(session.history.turns[0].steps, recorder.responses, strict=True):
        parts = response["candidates"][0]["content"]["parts"]
        assert [compact(p) for p in parts_of(step)] == [compact(p) for p in parts]
        # no copy of a part's text in its payload: the text is the part's (§5.4, issue 21)
        assert not any(c.kind in ("text", "thought") and b'"text":' in c.payload for c in step.continuation)
        assert [c.model_bound for c in step.continuation] == [
            bool(p.get("thought")) or "thoughtSignature" in p for p in parts
        ]


def test_parallel_results_go_back_in_declared_order_named_after_their_calls(emulator: GeminiEmulator) -> None:
    emulator.script.extend(chain()[:2])
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    paris, rome = reply.tool_calls
    assert (paris.id, rome.id) == ("gemini-call-emu-resp-001-1", "gemini-call-emu-resp-001-2")
    session.send_tool_results({rome.id: {"temp_c": 22}, paris.id: {"temp_c": 18}})  # any order
    results = sent(emulator, 1)["contents"][2]
    assert results == {
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp_c": 18}}},
            {"functionResponse": {"name": "get_weather", "response": {"temp_c": 22}}},
        ],
        "role": "user",
    }


def test_drop_leaves_out_closed_turns_thought_parts_whole_and_keeps_every_other_part(
    emulator: GeminiEmulator,
) -> None:
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator, policy=Drop())
    run_chain(session)
    session.send("And tomorrow?")
    contents = sent(emulator, 3)["contents"]
    steps = session.history.turns[0].steps
    for index, step in zip((1, 3, 5), steps, strict=True):
        kept = [p for p, c in zip(parts_of(step), step.continuation, strict=True) if c.kind != "thought"]
        assert_parts_sent_as_received(contents[index]["parts"], kept)  # signatures stay on their parts
    assert not any(p.get("thought") for c in contents[:6] for p in c["parts"])
    assert contents[6:] == [{"parts": [{"text": "And tomorrow?"}], "role": "user"}]


def test_keep_last_rewrites_only_the_turn_that_falls_out_of_the_window(emulator: GeminiEmulator) -> None:
    emulator.script.extend([answer(0), answer(1), answer(2)])
    session = make_session(emulator, policy=KeepLast(1))
    for question in ("one?", "two?", "three?"):
        session.send(question)
    last = sent(emulator, 2)["contents"]
    assert [any(p.get("thought") for p in c["parts"]) for c in last] == [False, False, False, True, False]
    first = session.history.turns[0].steps[0]
    assert_parts_sent_as_received(last[1]["parts"], parts_of(first)[1:])


def test_streamed_and_unstreamed_calls_give_the_same_state_and_the_payload_bytes_as_received() -> None:
    """Pain point: pydantic/pydantic-ai#3539 (the signature on the following part lost when streaming)."""
    histories, states, bodies = [], [], []
    for stream in (False, True):
        recorder = Recorder()
        with GeminiEmulator([*chain(), answer(1)], transform=recorder) as emu:
            session = make_session(emu, stream=stream)
            run_chain(session)
            session.send("And tomorrow?")
        # the whole state and every request sent, signatures aside (each emulator signs with its own
        # random nonces; each run's signatures are checked against what it received just below)
        states.append((_unsigned_history(session.history), session.state))
        bodies.append([_unsigned_body(r.body) for r in emu.requests])
        received = [r["candidates"][0]["content"]["parts"] for r in recorder.responses]
        steps = [s for t in session.history.turns for s in t.steps]
        assert [[compact(p) for p in parts_of(s)] for s in steps] == [
            [compact(p) for p in r] for r in received
        ]
        assert [s.usage for s in steps] == [_usage_of(r) for r in recorder.responses]
        histories.append([(s.parts, s.stop_reason, s.usage) for s in steps])
        if stream:
            assert all(r.query.get("alt") == ["sse"] for r in emu.requests)
            assert all(r.path.endswith(":streamGenerateContent") for r in emu.requests)
    assert histories[0] == histories[1]
    assert states[0] == states[1]
    assert bodies[0] == bodies[1]  # every request, the later turn's included, signatures aside


def _unsigned_history(history: History) -> list[Any]:
    """Every field of every turn and step, each payload as its JSON without ``thoughtSignature``."""
    return [
        (
            t.index,
            t.user,
            t.view,
            [
                (
                    s.parts,
                    s.stop_reason,
                    s.usage,
                    s.model,
                    s.tool_results,
                    s.response_id,
                    s.response_stored,
                    [(c.vendor, c.api, c.model, c.kind, c.model_bound, _unsigned(c)) for c in s.continuation],
                )
                for s in t.steps
            ],
        )
        for t in history.turns
    ]


def _unsigned(payload: Continuation) -> dict[str, Any]:
    return without_signature(json.loads(payload.payload))


def _unsigned_body(body: bytes) -> Any:
    data = json.loads(body)
    for content in data["contents"]:
        content["parts"] = [without_signature(p) for p in content["parts"]]
    return data


def _usage_of(response: Mapping[str, Any]) -> Usage:
    """§5.3 by hand: prompt includes cached; output = candidates + thoughts; absent counts are 0."""
    u = response["usageMetadata"]
    prompt, cached = u["promptTokenCount"], u.get("cachedContentTokenCount", 0)
    thoughts = u.get("thoughtsTokenCount")
    return Usage(
        uncached_input=prompt - cached,
        cache_read=cached,
        output=u.get("candidatesTokenCount", 0) + (thoughts or 0),
        reasoning=thoughts,
    )


def test_usage_figures_are_exact(emulator: GeminiEmulator) -> None:
    recorder = Recorder()
    emulator.transform = recorder
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator)
    run_chain(session)
    reply = session.send("And tomorrow?")
    for record, response in zip(session.execution, recorder.responses, strict=True):
        u = response["usageMetadata"]
        assert record.usage == _usage_of(response)
        assert record.usage.prompt_tokens == u["promptTokenCount"]
        assert record.usage.prompt_tokens + record.usage.output == u["totalTokenCount"]
    reasoning = "Thinking about follow-up 1. " * 6
    assert reply.usage.reasoning == count_tokens(reasoning)
    assert reply.usage.output == count_tokens(reasoning) + count_tokens("Follow-up answer 1.")
    assert reply.usage.cache_read > 0


@pytest.mark.parametrize("policy", [Keep(), Drop(), KeepLast(1)], ids=["keep", "drop", "keep_last"])
@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_cache_predictions_are_exact_against_the_emulator(policy: Any, stream: bool) -> None:
    with GeminiEmulator([*chain(), answer(1), answer(2), *chain(), answer(3)]) as emu:
        session = make_session(emu, policy=policy, stream=stream)
        run_chain(session)
        session.send("And tomorrow?")
        session.send("And the day after?")
        run_chain(session, "And Madrid or Lisbon?")
        session.send("Thanks?")
    report = session.report()
    assert report.predicted_total >= 6
    assert report.predicted_matches == report.predicted_total
    assert report.cache_read > 0


def test_the_recorded_request_digest_is_of_the_exact_bytes_the_emulator_received(
    emulator: GeminiEmulator,
) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator)
    run_chain(session)
    for record, request in zip(session.execution, emulator.requests, strict=True):
        assert record.request_digest == "sha256:" + hashlib.sha256(request.body).hexdigest()
        assert record.request_bytes == len(request.body)


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_a_missing_signature_is_the_vendors_400_as_a_vendor_error_and_changes_nothing(
    emulator: GeminiEmulator, stream: bool
) -> None:
    def strip(i: int, response: dict[str, Any]) -> None:  # something between us and Gemini lost it
        if i == 0:
            for part in response["candidates"][0]["content"]["parts"]:
                part.pop("thoughtSignature", None)

    emulator.transform = Recorder(strip)
    emulator.script.extend(chain())
    session = make_session(emulator, stream=stream)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    results = {c.id: "ok" for c in reply.tool_calls}
    for _ in range(2):
        with pytest.raises(rs.VendorError) as caught:
            session.send_tool_results(results)
        assert caught.value.status == 400
        assert "Function call is missing a thought_signature" in str(caught.value)
        assert caught.value.body["error"]["status"] == "INVALID_ARGUMENT"  # type: ignore[index]
        assert isinstance(caught.value.__cause__, genai_errors.ClientError)
        assert _layers(session) == before
        assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS
    assert emulator.requests[1].body == emulator.requests[2].body  # a retry sends the same bytes
    assert session.report().protocol_errors == 2
    assert emulator.script.taken == 1


def test_a_corrupted_signature_is_refused_by_the_vendor_and_changes_nothing(emulator: GeminiEmulator) -> None:
    def corrupt(i: int, response: dict[str, Any]) -> None:
        if i == 0:
            part = response["candidates"][0]["content"]["parts"][1]
            raw = base64.b64decode(part["thoughtSignature"])
            part["thoughtSignature"] = base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()

    emulator.transform = Recorder(corrupt)
    emulator.script.extend(chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    with pytest.raises(rs.VendorError, match="Corrupted thought signature") as caught:
        session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    assert caught.value.status == 400
    assert _layers(session) == before


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
@pytest.mark.parametrize("api_version", ["v1", "v1beta"])
def test_both_api_versions_carry_a_signed_chain(
    emulator: GeminiEmulator, api_version: str, stream: bool
) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator, emulator.client(api_version=api_version), stream=stream)
    reply = run_chain(session)
    assert reply.text == "Rome is warmer (22C) than Paris (18C)."
    method = "streamGenerateContent" if stream else "generateContent"
    assert {r.path for r in emulator.requests} == {f"/{api_version}/models/{MODEL}:{method}"}
    assert session.report().protocol_errors == 0


def test_snapshot_to_json_and_restore_gives_a_byte_identical_next_request(emulator: GeminiEmulator) -> None:
    first, second, final = chain()
    emulator.script.extend([first, second, second, final, final, answer(1), answer(1)])
    session = make_session(emulator, policy=Drop())
    reply = session.send("Paris or Rome?")
    text = session.snapshot().model_dump_json()
    restored = rs.Session.restore(text, emulator.client())
    assert restored.history == session.history and restored.execution == session.execution
    results = {c.id: {"ok": True} for c in reply.tool_calls}
    session.send_tool_results(results)
    restored.send_tool_results(results)
    assert emulator.requests[-1].body == emulator.requests[-2].body
    # across a closed turn too (Drop's view is part of the snapshot)
    for s in (session, restored):
        s.send_tool_results({c.id: "ok" for c in s.pending_calls})
    snap = rs.Session.restore(session.snapshot().model_dump_json().encode(), emulator.client())
    snap.send("And tomorrow?")
    session.send("And tomorrow?")
    assert emulator.requests[-1].body == emulator.requests[-2].body


def test_an_unstreamed_answer_is_read_raw_and_the_sdk_never_parses_it(
    emulator: GeminiEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's own raw-response option (``should_return_http_response``): the answer the session
    decodes is never also converted to pydantic models by the SDK, sync or async, and the request bytes
    are those of the SDK call on ``next_request``'s kwargs (the option is not sent)."""
    parsed: list[Any] = []
    real = genai_types.GenerateContentResponse._from_response.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(cls)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(genai_types.GenerateContentResponse, "_from_response", classmethod(counting))
    emulator.script.extend([answer(1), answer(2), answer(3)])
    client = emulator.client()
    session = make_session(emulator, client)
    expected = session.next_request("Paris?").kwargs
    client.models.generate_content(**json.loads(json.dumps(expected)))  # the raw call parses its answer
    assert len(parsed) == 1
    reply = session.send("Paris?")
    assert reply.text and len(parsed) == 1
    assert emulator.requests[1].body == emulator.requests[0].body

    async def main() -> rs.Reply:
        async_session = rs.AsyncSession(client, model=MODEL, thinking_config=THOUGHTS)
        return await async_session.send("Rome?")

    assert asyncio.run(main()).text and len(parsed) == 1


def test_an_async_session_takes_the_same_genai_client_and_calls_client_aio(emulator: GeminiEmulator) -> None:
    emulator.script.extend([*chain(), *chain()])
    client = emulator.client()

    async def main(stream: bool) -> rs.Reply:
        session = rs.AsyncSession(
            client,
            model=MODEL,
            system=SYSTEM,
            tools=[WEATHER, CLOCK],
            stream=stream,
            thinking_config=THOUGHTS,
        )
        reply = await session.send("Paris or Rome?")
        while reply.tool_calls:
            reply = await session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
        assert session.report().predicted_matches == session.report().predicted_total
        return reply

    unstreamed = asyncio.run(main(False))
    emulator.clear_cache()  # each session predicts from its own requests
    streamed = asyncio.run(main(True))
    assert unstreamed.text == streamed.text == "Rome is warmer (22C) than Paris (18C)."
    assert [r.path.rsplit(":", 1)[1] for r in emulator.requests] == [
        *["generateContent"] * 3,
        *["streamGenerateContent"] * 3,
    ]


def test_sessions_sharing_one_client_in_threads_each_capture_their_own_exchange(
    emulator: GeminiEmulator,
) -> None:
    emulator.script.extend([answer(i) for i in range(8)])
    client = emulator.client()
    sessions = [make_session(emulator, client) for _ in range(8)]

    def run(i: int) -> None:
        sessions[i].send(f"Question {i}?")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(run, range(8)))
    bodies = {"sha256:" + hashlib.sha256(r.body).hexdigest(): r.json() for r in emulator.requests}
    for i, session in enumerate(sessions):
        (record,) = session.execution
        assert bodies[record.request_digest]["contents"][0]["parts"] == [{"text": f"Question {i}?"}]
    hooks = client._api_client._httpx_client.event_hooks
    assert len(hooks["request"]) == len(hooks["response"]) == 1  # installed once, whatever the traffic


def test_a_model_switch_renders_earlier_bound_parts_canonically_never_as_thoughts(
    emulator: GeminiEmulator,
) -> None:
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator)
    run_chain(session)
    session.switch_model("gemini-3-pro")
    session.send("And tomorrow?")
    contents = sent(emulator, 3)["contents"]
    assert not any("thoughtSignature" in p or p.get("thought") for c in contents[:6] for p in c["parts"])
    assert contents[1]["parts"] == [
        {"functionCall": {"args": {"city": "Paris"}, "name": "get_weather"}},
        {"functionCall": {"args": {"city": "Rome"}, "name": "get_weather"}},
    ]
    assert contents[5]["parts"] == [{"text": "Rome is warmer (22C) than Paris (18C)."}]
    assert session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)


def test_the_open_chain_refuses_payloads_it_would_have_to_withhold() -> None:
    step = GeminiAdapter().decode(DOCUMENTED_RESPONSE, _request("gemini-2.5-flash"))
    from reasonstate.state import Step

    open_turn = Turn(
        index=0,
        user="Weather?",
        steps=(Step(step.parts, step.continuation, step.stop_reason, step.usage, step.model),),
    )
    with pytest.raises(rs.ContinuationMismatch, match="Nothing was sent"):
        GeminiAdapter().encode(Prefix(), History((open_turn,)), "gemini-3-flash", {}, [])


def test_a_cut_stream_is_interrupted_and_changes_nothing(emulator: GeminiEmulator) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator, stream=True)
    before = _layers(session)
    emulator.inject(Fault.truncate_stream(after_events=2))
    with pytest.raises(rs.StreamInterrupted):
        session.send("Paris or Rome?")
    assert _layers(session) == before
    assert run_chain(session).text == "Rome is warmer (22C) than Paris (18C)."


@pytest.mark.parametrize("fault", ["rate_limited", "server_error", "overloaded"])
def test_vendor_status_errors_are_typed_vendor_errors(emulator: GeminiEmulator, fault: str) -> None:
    emulator.inject(getattr(GeminiEmulator, fault)())
    session = make_session(emulator)
    with pytest.raises(rs.VendorError) as caught:
        session.send("Paris or Rome?")
    assert caught.value.status in (429, 500, 503)
    assert isinstance(caught.value.__cause__, genai_errors.APIError)
    assert session.history == History()


def test_gemini_2_5_signs_the_first_part_and_it_goes_back_on_that_part(emulator: GeminiEmulator) -> None:
    # 2.5 signs the first part of a step with calls, here its thought part; optional, never validated (§5.4)
    recorder = Recorder()
    emulator.transform = recorder
    emulator.script.extend(chain())
    session = rs.Session(
        emulator.client(), model="gemini-2.5-flash", tools=[WEATHER, CLOCK], thinking_config=THOUGHTS
    )
    run_chain(session)
    first = recorder.responses[0]["candidates"][0]["content"]["parts"]
    assert first[0].get("thought") is True and signature_bytes(first[0])
    for request in (1, 2):
        assert_parts_sent_as_received(sent(emulator, request)["contents"][1]["parts"], first)


def test_switching_vendors_renders_the_other_vendors_steps_canonically_both_ways(
    emulator: GeminiEmulator,
) -> None:
    calls = chain()[0]
    done = ModelAction(reasoning="Done.", text="Rome is warmer.")
    emulator.script.extend([calls, done])
    with AnthropicEmulator([calls, done, answer(1)]) as anthropic_emulator:
        anthropic_options = {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}
        session = rs.Session(
            anthropic_emulator.client(), model="claude-sonnet-4-6", tools=[WEATHER], **anthropic_options
        )
        run_chain(session)
        session.switch(emulator.client(), model=MODEL, thinking_config=THOUGHTS)
        run_chain(session, "And again?")
        contents = sent(emulator, 1)["contents"]
        assert contents[:4] == [
            {"parts": [{"text": "Paris or Rome: which is warmer?"}], "role": "user"},
            {
                "parts": [
                    {"functionCall": {"args": {"city": "Paris"}, "name": "get_weather"}},
                    {"functionCall": {"args": {"city": "Rome"}, "name": "get_weather"}},
                ],
                "role": "model",
            },
            {
                "parts": [
                    {
                        "functionResponse": {
                            "name": "get_weather",
                            "response": {"city": "Paris", "tool": "get_weather"},
                        }
                    },
                    {
                        "functionResponse": {
                            "name": "get_weather",
                            "response": {"city": "Rome", "tool": "get_weather"},
                        }
                    },
                ],
                "role": "user",
            },
            {"parts": [{"text": "Rome is warmer."}], "role": "model"},
        ]
        session.switch(anthropic_emulator.client(), model="claude-sonnet-4-6", **anthropic_options)
        assert session.send("Thanks?").text == "Follow-up answer 1."
        gemini_turn = json.loads(anthropic_emulator.requests[-1].body)["messages"][5]
        assert [b["type"] for b in gemini_turn["content"]] == ["tool_use", "tool_use"]  # no foreign thought


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_an_empty_answer_sends_nothing_and_the_user_contents_around_it_go_as_one(stream: bool) -> None:
    # a candidate without parts (content {"role": "model"}) leaves a step with nothing to send; a content
    # without parts is refused (§5.2), so the two user contents around it are one, on every later request
    # (the second inside the closed history the codec memoizes)
    with GeminiEmulator([ModelAction(), answer(1), answer(2)]) as emu:
        session = make_session(emu, stream=stream)
        assert session.send("Say nothing.").text == ""
        assert session.send("Now say something.").text == "Follow-up answer 1."
        assert session.send("And again?").text == "Follow-up answer 2."
        merged = {"parts": [{"text": "Say nothing."}, {"text": "Now say something."}], "role": "user"}
        assert sent(emu, 1)["contents"] == [merged]
        third = sent(emu, 2)["contents"]
        assert [third[0], third[2]] == [merged, {"parts": [{"text": "And again?"}], "role": "user"}]
        assert [p.get("thought", False) for p in third[1]["parts"]] == [True, False]
    assert session.history.turns[0].steps[0].parts == ()
    # how much of the merged content the cache shares with the first prompt is not knowable: None there
    assert [r.predicted_cache_read is None for r in session.execution] == [False, True, False]
    report = session.report()
    assert report.predicted_matches == report.predicted_total == 2


def test_a_payload_changed_in_memory_in_a_closed_turn_is_refused_and_nothing_is_sent(
    emulator: GeminiEmulator,
) -> None:
    # closed turns are encoded once and shared between requests; their payloads are re-checked before
    # every send (the Seal), so an edit in memory is refused there too, never sent
    emulator.script.extend([*chain(), answer(1), answer(2)])
    session = make_session(emulator)
    run_chain(session)
    session.send("And tomorrow?")  # the chain's turn is now inside the memoized closed history
    payload = session.history.turns[0].steps[1].continuation[1]  # the signed call of the second step
    original = payload.payload
    object.__setattr__(payload, "payload", original.replace(b"Rome", b"Oslo", 1))
    before, sent_so_far = _layers(session), len(emulator.requests)
    with pytest.raises(rs.ContinuationMismatch):
        session.send("And the day after?")
    assert (_layers(session), len(emulator.requests)) == (before, sent_so_far)
    object.__setattr__(payload, "payload", original)
    assert session.send("And the day after?").text == "Follow-up answer 2."
    assert_parts_sent_as_received(
        sent(emulator, sent_so_far)["contents"][3]["parts"],
        parts_of(session.history.turns[0].steps[1]),
    )


def test_the_memoized_closed_history_encodes_as_a_fresh_one_whatever_the_order_of_requests() -> None:
    with GeminiEmulator([*chain(), answer(1), ModelAction(), answer(2), answer(3), answer(4)]) as emu:
        session = make_session(emu)
        run_chain(session)
        for question in ("One?", "Nothing?", "Two?", "Three?", "Four?"):
            session.send(question)
    assert_memoized_runs_encode_as_fresh(session, options={})


# -- the cause of a cache break: the session's reading agrees with the guard's, on the bytes received -------


def _break_scenario(session: rs.Session, scenario: str) -> None:
    """Turns that break the prefix cache once (or more) the way ``scenario`` says."""
    run_chain(session)
    session.send("And tomorrow?")
    if scenario == "system":
        session.change_prefix(system=SYSTEM.replace("careful", "cautious"))
    elif scenario == "timestamp":
        session.change_prefix(system=SYSTEM + " It is 03:40.")
        session.send("Noted?")
        session.change_prefix(system=SYSTEM + " It is 03:45.")
    elif scenario == "tools":
        session.change_prefix(tools=[rs.Tool("get_time", "The local time", CLOCK.parameters), WEATHER])
    elif scenario == "model":
        session.switch_model("gemini-3-pro")
    session.send("And the day after?")
    session.send("And next week?")


@pytest.mark.parametrize(
    ("scenario", "policy", "causes"),
    [
        # a closed turn's thought Parts left out whole, its signed Parts kept (§5.4): reasoning dropped, for
        # the guard reading the bytes and for the session alike
        ("drop", Drop(), ["reasoning_dropped"]),
        ("keep_last", KeepLast(1), ["reasoning_dropped", "reasoning_dropped"]),
        ("system", Keep(), ["system_changed"]),
        ("timestamp", Keep(), ["system_changed", "timestamp_in_prefix"]),
        ("tools", Keep(), ["tools_changed"]),
        ("model", Keep(), ["model_changed"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_cache_break_is_named_as_the_guard_names_it_from_the_bytes_received(
    scenario: str, policy: Any, causes: list[str]
) -> None:
    """The session reads the cause of a break from the previous request as it kept it (issue 21: not a copy
    of its bytes); the guard, watching the same client, reads it from the bytes on the wire: they agree on
    every break, cause and JSON path, and the path names a value that differs in the bodies the emulator
    received."""
    with GeminiEmulator() as emu:
        emu.script.extend([*chain(), *(answer(i) for i in range(6))])
        client = emu.client()
        guard = rs.instrument(client)
        session = make_session(emu, client=client, policy=policy)
        _break_scenario(session, scenario)
        breaks = [dict(e.data) for e in session.trace.of_kind(EventKind.CACHE_BREAK)]
        records = guard.records
        bodies = [json.loads(r.body) for r in emu.requests]
    assert [b["cause"] for b in breaks] == causes
    for brk in breaks:
        divergence = records[brk["index"]].divergence
        assert divergence is not None
        assert (brk["cause"], brk["path"]) == (divergence.cause, divergence.path)
        if brk["cause"] != "model_changed":
            before, after = (_at(bodies[i], brk["path"]) for i in (brk["index"] - 1, brk["index"]))
            assert before != after


def _model_content(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


_THOUGHT = {"text": "Plan the answer.", "thought": True}
_SIGNED = {"text": "Paris.", "thoughtSignature": SIGNATURE}


@pytest.mark.parametrize(
    ("after", "cause"),
    [
        # what a policy that drops reasoning sends: the thought Part left out whole, the signature kept
        (_model_content(_SIGNED), "reasoning_dropped"),
        # a client that strips thoughts and signatures alike
        (_model_content({"text": "Paris."}), "reasoning_dropped"),
        # not a drop: the signature changed, the thought edited, or the visible text changed as well
        (_model_content(_THOUGHT, {**_SIGNED, "thoughtSignature": OTHER_SIGNATURE}), "history_rewritten"),
        (_model_content({**_THOUGHT, "text": "Plan it."}, _SIGNED), "history_rewritten"),
        (_model_content({**_SIGNED, "text": "Rome."}), "history_rewritten"),
    ],
    ids=["thoughts_dropped", "thoughts_and_signatures_stripped", "signature", "thought", "text"],
)
def test_the_cause_of_a_break_at_a_model_content_names_dropped_thoughts(
    after: dict[str, Any], cause: str
) -> None:
    """The one reading the guard and the session share (``explain`` over the room's views, §5.4): thought
    Parts left out whole are dropped reasoning even though the other Parts keep their signatures."""
    from reasonstate.adapters import view_of
    from reasonstate.cache.divergence import explain

    user = {"role": "user", "parts": [{"text": "Capital of France?"}]}
    next_user = {"role": "user", "parts": [{"text": "And Italy?"}]}
    before = {"contents": [user, _model_content(_THOUGHT, _SIGNED), next_user]}
    now = {"contents": [user, after, next_user]}
    found = explain(view_of("generate_content", before, MODEL), view_of("generate_content", now, MODEL))
    assert found is not None and (found.path.startswith("$.contents[1]"), found.cause) == (True, cause)


_MISSING_AT = object()


def _at(body: Any, path: str) -> Any:
    """The value at a JSON path like ``$.contents[3].parts[0]`` (a sentinel where there is none)."""
    import re

    value = body
    for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", path):
        try:
            value = value[name] if name else value[int(index)]
        except (KeyError, IndexError, TypeError):
            return _MISSING_AT
    return value


def test_the_kept_request_holds_the_sessions_own_system_prompt_and_schemas(emulator: GeminiEmulator) -> None:
    """What a session keeps of its newest request for the next break's cause reads as the body received,
    and holds no copy of what the session holds anyway (issue 21): the system prompt is the prefix's own
    string (here ~18 KB, more than the whole conversation), each tool schema the very object the request
    was built from, the contents the request's own list."""
    emulator.script.extend([answer(0), answer(1)])
    session = make_session(emulator)
    session.send("One?")
    request = session.next_request("Two?")
    session.send("Two?")
    kept = session._layers.last_body
    wire = sent(emulator, 1)
    assert isinstance(kept, Mapping) and {k: v for k, v in kept.items() if k != "contents"} == {
        k: v for k, v in wire.items() if k != "contents"
    }
    assert [c["role"] for c in kept["contents"]] == [c["role"] for c in wire["contents"]]
    assert kept["contents"] == request.kwargs["contents"]
    assert kept["systemInstruction"]["parts"][0]["text"] is session.prefix.system
    declared = kept.config["tools"][0]["function_declarations"]  # type: ignore[attr-defined]
    # the SDK sends the declarations name-sorted, keys sorted, the schema under its Python name
    schemas = {d["name"]: d["parameters_json_schema"] for d in kept["tools"][0]["functionDeclarations"]}
    assert len(schemas) == len(declared) == 2
    assert all(schemas[d["name"]] == d["parameters_json_schema"] for d in declared)
    # (the two tools' schemas are equal: one object may stand for both)
    assert all(any(s is d["parameters_json_schema"] for d in declared) for s in schemas.values())


def test_the_cause_is_read_like_with_like_when_the_kept_form_changes() -> None:
    """A short session keeps its newest request as its bytes (at most 1 KB), a longer one as the contents
    it sent (where google-genai re-spells the signatures): the break at the request that crosses from one
    to the other is read bytes against bytes, so every break is still named as the guard names it."""
    with GeminiEmulator() as emu:
        emu.script.extend(answer(i) for i in range(7))
        client = emu.client()
        guard = rs.instrument(client)
        session = make_session(emu, client=client, system="Be brief.", tools=[], policy=KeepLast(1))
        forms = []
        for i in range(7):
            # short while the body is kept as bytes, then long: the form changes at a later break, whose
            # first changed content comes after a signed one that did not change
            session.send(f"Q{i}?" + (" Tell me more." * 40 if i >= 3 else ""))
            forms.append(type(session._layers.last_body).__name__)
        breaks = [dict(e.data) for e in session.trace.of_kind(EventKind.CACHE_BREAK)]
        records = guard.records
    assert forms[0] == "bytes" and forms[-1] == "_SentBody"
    crossing = forms.index("_SentBody")
    assert crossing == 3 and crossing in [b["index"] for b in breaks]  # a break read across the two forms
    assert len(breaks) == 5
    for brk in breaks:
        divergence = records[brk["index"]].divergence
        assert divergence is not None
        assert (brk["cause"], brk["path"]) == (divergence.cause, divergence.path)


def test_a_shared_thought_payload_is_sealed_once_and_an_edit_of_it_is_still_refused(
    emulator: GeminiEmulator,
) -> None:
    """An unsigned thought's payload (``{"thought":true}``) is one value shared by every turn that has one;
    the memoized closed history seals it once, at its first entry, yet an edit of it in memory is refused
    before a send, also once the run was cut (an earlier turn's view rewritten), and nothing is sent."""
    emulator.script.extend(ModelAction(reasoning=f"Thinking {i}.", text=f"Answer {i}.") for i in range(7))
    session = make_session(emulator)
    for i in range(4):
        session.send(f"Question {i}?")
    thoughts = [t.steps[0].continuation[0] for t in session.history.turns]
    assert thoughts[0].payload == b'{"thought":true}' and all(c is thoughts[0] for c in thoughts)
    runs = [v for v in session._encodings._runs.values() if hasattr(v, "once")]
    assert runs and all(len([c for c in r.seals.sealed if c is thoughts[0]]) == 1 for r in runs)
    for cut in (False, True):
        if cut:  # a policy's new view of an earlier turn: the next request cuts the memoized run
            turns = list(session.history.turns)
            turns[1] = turns[1].with_view(TurnView((False,), policy="drop"))
            session._layers = attrs.evolve(
                session._layers, history=session._layers.history.with_turns(tuple(turns))
            )
        original = thoughts[0].payload
        object.__setattr__(thoughts[0], "payload", b'{"thought":false}')
        before, sent_so_far = _layers(session), len(emulator.requests)
        with pytest.raises(rs.ContinuationMismatch):
            session.send("And now?")
        assert (_layers(session), len(emulator.requests)) == (before, sent_so_far)
        object.__setattr__(thoughts[0], "payload", original)
        session.send("And now?")
    assert_memoized_runs_encode_as_fresh(session, options={})


def test_a_run_s_cuts_widen_past_two_bytes() -> None:
    """A memoized run keeps its per-turn cuts in 2 bytes a figure while they fit, and widens them to 4 past
    65,535 (a cut is a count of contents, withheld payloads or seals), reading the same figures."""
    import array

    from reasonstate.adapters.base import Encodings, Seals
    from reasonstate.adapters.gemini import _encode_turn, _Run

    turn = Turn(index=0, user="Hi?", steps=(), view=TurnView((), policy="keep"))
    encoded = _encode_turn(turn, model=MODEL, memo=Encodings())
    run = _Run((), (), (), None, (), Seals(), array.array("H"))
    small = run.extended([turn], [encoded])
    assert small.cuts.typecode == "H" and list(small.cuts) == [1, 0, 0]
    many = ({"role": "model", "parts": []},) * 0xFFFF  # contents up to the last 2-byte figure
    near = _Run((turn,), many, (), None, (), Seals(), array.array("H", [0xFFFF, 0, 0]))
    wide = near.extended([turn], [encoded])
    assert wide.cuts.typecode == "I" and list(wide.cuts) == [0xFFFF, 0, 0, 0x10000, 0, 0]
