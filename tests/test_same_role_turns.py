"""Consecutive turns of one role (docs/protocols.md §4.2): the Messages API combines consecutive user or
assistant turns into one, and the strict emulator refuses them outright (as the API once did), so the codec
sends them as one message itself. They arise when a step has nothing to send: an empty final answer
(``content: []``). ``tests/test_what_models_send.py`` covers the request right after such an answer (the
open turn merged into the closed history); here the merge sits *inside* the closed history, which the codec
memoizes as one run extended turn by turn, on every later request. Real anthropic SDK, real HTTP.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator

EMPTY = ModelAction()  # no reasoning, no text, no tool calls: content []


def _messages(body: bytes) -> list[dict[str, Any]]:
    """The request's messages without cache_control markers (breakpoints move from request to request)."""
    messages: list[dict[str, Any]] = json.loads(body)["messages"]
    return [
        {**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]}
        for m in messages
    ]


def _user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_empty_answer_inside_the_closed_history_goes_as_one_user_message_on_every_later_request(
    stream: bool,
) -> None:
    with AnthropicEmulator([EMPTY, ModelAction.answer("Here."), ModelAction.answer("Again.")]) as emu:
        session = rs.Session(emu.client(), model="claude-sonnet-4-6", max_tokens=1024, stream=stream)
        session.send("Say nothing.")
        assert session.send("Now say something.").text == "Here."
        assert session.send("And again?").text == "Again."  # the strict emulator answered 200
        bodies = [r.body for r in emu.requests]
    merged = [_user("Say nothing.", "Now say something."), _assistant("Here.")]
    assert _messages(bodies[1]) == merged[:1]
    assert _messages(bodies[2]) == [*merged, _user("And again?")]
    # the history keeps both turns as they happened: the merge is only how they are sent
    assert [t.user for t in session.history.turns] == ["Say nothing.", "Now say something.", "And again?"]
    assert session.history.turns[0].steps[0].parts == ()
