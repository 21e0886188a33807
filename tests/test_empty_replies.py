"""Empty replies (issue 23, item 3): an answer with no text and no tool calls. It was paid for, so it is
committed (a step in the history, its usage in the records, the trace), but no later request may carry
what the vendor rejects. On DeepSeek an empty answer went back in every later request as
``{"role": "assistant", "content": ""}``, which DeepSeek answers with 400 "Invalid assistant message:
content or tool_calls must be set" (carlrobertoh/ProxyAI#834): the session could never be continued. Rules
per vendor in docs/protocols.md §3.3 (DeepSeek), §4.2 (Anthropic), §1.4 (Responses); Gemini's is not
verified (§7): its codec sends no empty content, which the test pins."""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

import openai
import pytest

import reasonstate as rs
from reasonstate.testing import ModelAction
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests.test_switching import Vendor

EMPTY = ModelAction()  # no reasoning, no text, no tool calls


def _sent(v: Vendor) -> Any:
    body = json.loads(v.emulator.requests[-1].body)
    return body.get("messages") or body.get("input") or body.get("contents")


def test_deepseek_refuses_an_empty_assistant_message_with_its_own_400() -> None:
    """The emulator's deepseek dialect, as the vendor: the text and envelope of carlrobertoh/ProxyAI#834."""
    with OpenAIChatEmulator([ModelAction(text="x")], dialect="deepseek") as emu:
        client = emu.client(max_retries=0)
        for content in ("", None):
            messages: Any = [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": content},
                {"role": "user", "content": "again"},
            ]
            with pytest.raises(openai.BadRequestError) as caught:
                client.chat.completions.create(model="deepseek-v4-pro", messages=messages)
            assert caught.value.body == {
                "message": "Invalid assistant message: content or tool_calls must be set",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_deepseek_an_empty_answer_is_committed_and_never_sent_back(stream: bool) -> None:
    """Issue 23 item 3: no empty assistant message, and no two user messages in a row either (the retired
    deepseek-reasoner refused them; V4 is unconfirmed, docs/protocols.md §3.3, §7): the user messages
    around the empty answer go as one, each text a ``text`` part, on every later request."""
    joined = {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}]}
    with ExitStack() as stack:
        v = Vendor("deepseek", stack)
        v.emulator.script.extend([EMPTY, ModelAction(text="Now I answer."), ModelAction(text="And again.")])
        session = rs.Session(v.client, model=v.model, stream=stream, **v.options)
        assert session.send("hi").text == ""
        assert len(session.history) == 1 and len(session.history.turns[0].steps) == 1
        assert session.send("again").text == "Now I answer."  # accepted by the strict emulator
        assert _sent(v) == [joined]
        assert session.send("and again").text == "And again."  # the join is inside the closed history now
        sent = _sent(v)
        assert [sent[0], sent[2]] == [joined, {"role": "user", "content": "and again"}]
        assert (sent[1]["role"], sent[1]["content"]) == ("assistant", "Now I answer.")
        assert len(sent) == 3
    assert [len(t.steps) for t in session.history.turns] == [1, 1, 1]  # every answer is committed
    assert session.history.turns[0].steps[0].text == ""


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_deepseek_a_session_with_an_empty_answer_passes_the_successive_messages_rule(stream: bool) -> None:
    """Were DeepSeek V4 to refuse two user messages in a row as the retired deepseek-reasoner did (§3.3:
    unconfirmed, §7), the session would still go on: every request passes the emulator's legacy check
    (two user messages in a row were sent before issue 23's join, and refused there)."""
    script = [EMPTY, ModelAction(text="Now I answer."), ModelAction(text="And again.")]
    with OpenAIChatEmulator(script, dialect="deepseek", legacy_reject_successive=True) as emu:
        session = rs.Session(
            emu.client(max_retries=0), model="deepseek-v4-pro", dialect="deepseek", stream=stream
        )
        assert session.send("hi").text == ""
        assert session.send("again").text == "Now I answer."
        assert session.send("and again").text == "And again."


def test_deepseek_the_user_messages_around_two_empty_answers_go_as_one() -> None:
    with ExitStack() as stack:
        v = Vendor("deepseek", stack)
        v.emulator.script.extend([EMPTY, EMPTY, ModelAction(text="At last.")])
        session = rs.Session(v.client, model=v.model, **v.options)
        assert session.send("one").text == session.send("two").text == ""
        assert session.send("three").text == "At last."
        assert _sent(v) == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "one"},
                    {"type": "text", "text": "two"},
                    {"type": "text", "text": "three"},
                ],
            }
        ]


def test_anthropic_an_empty_answer_is_committed_and_sends_no_empty_message() -> None:
    """Anthropic: ``messages.N: all messages must have non-empty content except for the optional final
    assistant message`` (anthropics/claude-code#3196); the codec merges the two user turns."""
    with ExitStack() as stack:
        v = Vendor("anthropic", stack)
        v.emulator.script.extend([EMPTY, ModelAction(text="Now I answer.")])
        session = rs.Session(v.client, model=v.model, **v.options)
        assert session.send("hi").text == "" and len(session.history) == 1
        assert session.send("again").text == "Now I answer."
        assert all(m["content"] for m in _sent(v)) and [m["role"] for m in _sent(v)] == ["user"]


def test_gemini_an_empty_answer_is_committed_and_sends_no_empty_content() -> None:
    with ExitStack() as stack:
        v = Vendor("gemini", stack)
        v.emulator.script.extend([EMPTY, ModelAction(text="Now I answer.")])
        session = rs.Session(v.client, model=v.model, **v.options)
        assert session.send("hi").text == "" and len(session.history) == 1
        assert session.send("again").text == "Now I answer."
        assert all(c["parts"] for c in _sent(v)) and [c["role"] for c in _sent(v)] == ["user"]


def test_responses_an_empty_answer_goes_back_as_the_items_the_vendor_sent() -> None:
    """Responses: output items go back as received (§1.4); the empty message is the vendor's own item."""
    with ExitStack() as stack:
        v = Vendor("responses", stack)
        v.emulator.script.extend([EMPTY, ModelAction(text="Now I answer.")])
        session = rs.Session(v.client, model=v.model, **v.options)
        assert session.send("hi").text == "" and len(session.history) == 1
        assert session.send("again").text == "Now I answer."
        items = _sent(v)
        assert items[0] == {"role": "user", "content": "hi"} and items[-1] == {
            "role": "user",
            "content": "again",
        }
