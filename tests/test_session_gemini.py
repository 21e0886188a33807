"""The core on Gemini generateContent: the pure codec on the documented example (docs/protocols.md §5.5),
the stream assembler, then end to end with the real ``google-genai`` SDK against the strict emulator.

Each test names the docs/protocols.md §5 rule it pins down.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx2
import pytest
from google import genai
from google.genai import types as genai_types

import reasonstate as rs
from reasonstate.adapters import adapter_for, client_is_async
from reasonstate.adapters.base import VendorRequest
from reasonstate.adapters.gemini import GeminiAdapter
from reasonstate.adapters.streams import GeminiAssembler
from reasonstate.prefix import Prefix
from reasonstate.state import History, OpaquePart, ReasoningPart, TextPart, ToolCallPart, Turn, Usage

# -- the documented example (§5.5): a thought part and a signed function call -----------------------------

SIGNATURE = "AAFvcGFxdWUtZ2VtaW5pLXNpZ25hdHVyZf8="  # b"\x00\x01opaque-gemini-signature\xff"
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
    assert [c.payload for c in step.continuation] == [
        json.dumps(p, ensure_ascii=False, separators=(",", ":")).encode() for p in parts
    ]
    assert [(c.kind, c.model_bound) for c in step.continuation] == [("thought", True), ("functionCall", True)]
    assert {(c.vendor, c.api, c.model) for c in step.continuation} == {
        ("google", "generate_content", "gemini-3-flash")
    }


def test_usage_is_normalized_prompt_includes_cached_and_output_includes_thoughts() -> None:
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
    assert [c.model_bound for c in step.continuation] == [False, False]


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


def test_the_sdk_sends_the_replayed_turn_as_documented() -> None:
    """The documented second request (§5.5), as the real SDK serializes our kwargs."""
    sent: list[bytes] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.content)
        return httpx2.Response(200, json=DOCUMENTED_RESPONSE)

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    client = genai.Client(
        api_key="k", http_options=genai_types.HttpOptions(base_url="http://gemini.test", httpx_client=http)
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
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url="http://gemini.test"))
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
    [{"contents": []}, {"system_instruction": "x"}, {"candidate_count": 2}, {"automatic_continuation": True}],
)
def test_options_the_session_owns_are_refused_at_construction(options: dict[str, Any]) -> None:
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url="http://gemini.test"))
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
