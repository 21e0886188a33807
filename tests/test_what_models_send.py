"""What models really send: empty final replies and broken tool-call arguments (docs/protocols.md §2, §4.2).

Anthropic can answer ``content: []`` with ``end_turn``. The step is committed (it was paid for), and the
next request must still be one the vendor accepts: an assistant message may not be empty, so the empty step
sends nothing and the two user turns around it go as one user turn (the API combines consecutive turns of
one role). A model cut short mid-arguments streams text that is not a JSON object: the call is kept with
``arguments is None`` and the reason, never executed, and the chain goes on. Real SDKs, real HTTP, the
strict emulators.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.testing import Fault, ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

EMPTY = ModelAction()  # no reasoning, no text, no tool calls


def bodies(emulator: Any) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in emulator.requests]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_empty_anthropic_final_reply_leaves_a_session_the_vendor_accepts(stream: bool) -> None:
    with AnthropicEmulator() as emu:
        emu.script.extend([EMPTY, ModelAction.answer("Here.")])
        session = rs.Session(emu.client(), model="claude-sonnet-4-6", max_tokens=1024, stream=stream)
        first = session.send("Say nothing.")
        assert (first.text, first.stop_reason) == ("", "end_turn")
        assert session.history.turns[0].closed and len(session.continuation) == 0
        assert session.send("Now say something.").text == "Here."
        assert bodies(emu)[1]["messages"] == [
            {
                "role": "user",
                "content": [
                    # a breakpoint at the previous request's end, one at the newest block (§4.4)
                    {"type": "text", "text": "Say nothing.", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "Now say something.", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ]


def test_an_empty_responses_final_reply_leaves_a_session_the_vendor_accepts() -> None:
    with OpenAIResponsesEmulator() as emu:
        emu.script.extend([EMPTY, ModelAction.answer("Here.")])
        session = rs.Session(emu.client(), model="gpt-5.5")
        session.send("Say nothing.")
        assert session.send("Now say something.").text == "Here."
        sent = bodies(emu)[1]["input"]
        assert sent[0] == {"role": "user", "content": "Say nothing."}
        assert sent[-1] == {"role": "user", "content": "Now say something."}


@pytest.mark.parametrize("dialect", ["openai", "deepseek", "vllm"])
def test_an_empty_chat_final_reply_leaves_a_session_the_vendor_accepts(dialect: str) -> None:
    with OpenAIChatEmulator(dialect=dialect) as emu:
        emu.script.extend([EMPTY, ModelAction.answer("Here.")])
        model = {"openai": "gpt-5.5", "deepseek": "deepseek-v4-pro"}.get(dialect, "m")
        session = rs.Session(emu.client(), model=model, dialect=dialect)
        session.send("Say nothing.")
        assert session.send("Now say something.").text == "Here."
        sent = bodies(emu)[1]["messages"]
        if dialect == "deepseek":
            # DeepSeek refuses an assistant message with neither content nor tool calls (docs/protocols.md
            # §3.3, carlrobertoh/ProxyAI#834): the empty answer is committed and not sent back, and the two
            # user turns around it go as one user message (as on Anthropic and Gemini)
            assert sent == [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Say nothing."},
                        {"type": "text", "text": "Now say something."},
                    ],
                }
            ]
            return
        # content is required on an assistant message without tool calls: null goes back as ""
        assert sent[1]["content"] == "" and sent[1]["role"] == "assistant"
        assert sent[-1] == {"role": "user", "content": "Now say something."}


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def test_a_streamed_anthropic_tool_call_with_broken_arguments_is_never_executed_and_the_chain_goes_on() -> (
    None
):
    # a model cut short mid-arguments streams text that is not a JSON object: never a silent {}
    broken = '{"city": "Par'
    message = {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [],
    }
    usage = {"input_tokens": 10, "output_tokens": 1}
    stream = "".join(
        [
            _sse("message_start", {"type": "message_start", "message": {**message, "usage": usage}}),
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {
                        "type": "tool_use",
                        "id": "toolu_x1",
                        "name": "get_weather",
                        "input": {},
                    },
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": broken},
                },
            ),
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                    "usage": usage,
                },
            ),
            _sse("message_stop", {"type": "message_stop"}),
        ]
    )
    ran: list[Any] = []
    weather = rs.Tool(name="get_weather", handler=lambda **kw: ran.append(kw) or "sunny")
    with AnthropicEmulator() as emu:
        emu.inject(Fault.raw(200, stream.encode(), "text/event-stream"))
        emu.script.extend([ModelAction.answer("Sorry, say the city again?")])
        session = rs.Session(
            emu.client(), model="claude-sonnet-4-6", max_tokens=1024, tools=[weather], stream=True
        )
        reply = session.run("Weather in Paris?")
        assert reply.text == "Sorry, say the city again?" and ran == []
        call = session.history.turns[0].steps[0].tool_calls[0]
        assert (call.arguments, call.raw_arguments) == (None, broken)
        assert (
            call.arguments_error == "arguments are not valid JSON: Unterminated string starting at (char 9)"
        )
        sent = bodies(emu)[1]["messages"]
        assert sent[1]["content"] == [
            {"type": "tool_use", "id": "toolu_x1", "name": "get_weather", "input": {}}
        ]
        result = sent[2]["content"][0]
        assert (result["tool_use_id"], result["is_error"]) == ("toolu_x1", True)
        assert result["content"] == f"invalid arguments for 'get_weather': {call.arguments_error}"
