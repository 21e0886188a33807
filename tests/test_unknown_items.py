"""Output items and blocks of a type the adapter does not know (issue 23, item 7): kept verbatim and bound to
the vendor, API and model that produced them, like every continuation payload, so they are never sent to
another model. The probe that found it: a Responses ``compaction`` item (``encrypted_content`` inside) was
still sent after ``switch_model`` to another model."""

from __future__ import annotations

import json
from typing import Any

import reasonstate as rs
from reasonstate.adapters.anthropic import AnthropicAdapter
from reasonstate.adapters.base import VendorRequest
from reasonstate.adapters.gemini import GeminiAdapter
from reasonstate.adapters.openai_responses import OpenAIResponsesAdapter
from reasonstate.testing import ModelAction
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

SECRET = "gAAAAABinventedOpaqueStateThatOnlyItsModelMayRead=="


def _request(model: str) -> VendorRequest:
    return VendorRequest(kwargs={}, units=("u",), model=model)


def test_anthropic_binds_a_block_of_an_unknown_type() -> None:
    response = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "Hi."}, {"type": "invented_state", "data": SECRET}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
    step = AnthropicAdapter().decode(response, _request("claude-sonnet-4-6"))
    # a plain text block keeps no payload (the codec renders it from its part byte for byte, issue 21): the
    # unknown block's payload is the only one, and its part points at it
    assert [(c.kind, c.model_bound) for c in step.continuation] == [("invented_state", True)]
    assert [p.continuation for p in step.parts] == [None, 0]
    assert SECRET.encode() in step.continuation[0].payload
    # a text block that is not the canonical one (citations) keeps its payload, bound to no model
    response["content"] = [{"type": "text", "text": "Hi.", "citations": None}, *response["content"][1:]]
    step = AnthropicAdapter().decode(response, _request("claude-sonnet-4-6"))
    assert [(c.kind, c.model_bound) for c in step.continuation] == [("text", False), ("invented_state", True)]
    assert [p.continuation for p in step.parts] == [0, 1]


def test_responses_binds_an_item_of_an_unknown_type() -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5.5",
        "output": [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": SECRET},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hi.", "annotations": []}],
            },
        ],
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
    step = OpenAIResponsesAdapter().decode(response, _request("gpt-5.5"))
    assert [(c.kind, c.model_bound) for c in step.continuation] == [("compaction", True), ("message", False)]


def test_gemini_binds_a_part_of_a_kind_the_adapter_does_not_read() -> None:
    """google-genai's Part holds only the fields it declares (a field it does not know could not be sent
    back, and is MalformedResponse); a declared one the adapter has no canonical part for is bound."""
    response = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"text": "Hi."}, {"executableCode": {"code": SECRET, "language": "PYTHON"}}],
                },
                "finishReason": "STOP",
            }
        ]
    }
    step = GeminiAdapter().decode(response, _request("gemini-3-flash"))
    assert [(c.kind, c.model_bound) for c in step.continuation] == [("text", False), ("executableCode", True)]


def _with_compaction(payload: dict[str, Any]) -> dict[str, Any]:
    """What a server that compacted the context answers: an opaque item before the message."""
    if payload.get("object") == "response" and isinstance(payload.get("output"), list):
        item = {"type": "compaction", "id": "cmp_emu_1", "encrypted_content": SECRET}
        return {**payload, "output": [item, *payload["output"]]}
    return payload


def test_an_unknown_responses_item_is_never_sent_to_another_model() -> None:
    with OpenAIResponsesEmulator([ModelAction(text="Noted.")], transform=_with_compaction) as emu:
        session = rs.Session(emu.client(), model="gpt-5.5", store=False, reasoning={"effort": "low"})
        session.send("Remember: the code is 42.")
        same = json.dumps(session.next_request("And the code?").kwargs)
        assert SECRET in same  # kept verbatim for the model that produced it
        session.switch_model("gpt-5.4")
        other = json.dumps(session.next_request("And the code?").kwargs)
        assert SECRET not in other
        assert "Noted." in other  # the visible history still goes


def test_anthropic_keeps_a_tool_call_payload_only_when_its_block_is_not_the_rendered_one() -> None:
    """Issue 21: a tool_use block whose bytes are those the codec renders from its part (keys type, id,
    name, input in that order; the input's key order as received) keeps no payload; any other block (keys
    in another order, a field the codec does not write) keeps its payload, bound to no model."""
    canonical = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"b": 1, "a": [2.5, "é"]}}
    reordered = {"id": "toolu_2", "type": "tool_use", "name": "f", "input": {}}
    extra = {"type": "tool_use", "id": "toolu_3", "name": "f", "input": {}, "caller": {"type": "direct"}}
    response = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [canonical, reordered, extra],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
    step = AnthropicAdapter().decode(response, _request("claude-sonnet-4-6"))
    assert [(c.kind, c.model_bound) for c in step.continuation] == [("tool_use", False), ("tool_use", False)]
    assert [p.continuation for p in step.parts] == [None, 0, 1]
    assert step.continuation[0].payload == b'{"id":"toolu_2","type":"tool_use","name":"f","input":{}}'
    assert step.parts[0].raw_arguments == '{"b":1,"a":[2.5,"é"]}'
