"""What models really send: an empty final reply must not wedge the session (docs/protocols.md §4.2).

Anthropic can answer ``content: []`` with ``end_turn``. The step is committed (it was paid for), and the
next request must still be one the vendor accepts: an assistant message may not be empty, so the empty step
sends nothing and the two user turns around it go as one user turn (the API combines consecutive turns of
one role). Real SDKs, real HTTP, the strict emulators.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.testing import ModelAction
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
        session = rs.Session(emu.client(), model="m", dialect=dialect)
        session.send("Say nothing.")
        assert session.send("Now say something.").text == "Here."
        sent = bodies(emu)[1]["messages"]
        # content is required on an assistant message without tool calls: null goes back as ""
        assert sent[1]["content"] == "" and sent[1]["role"] == "assistant"
        assert sent[-1] == {"role": "user", "content": "Now say something."}
