"""Switching vendor or model mid-session (docs/protocols.md §0, §1.4, §3.3, §4.3).

For every ordered pair of vendor families (Anthropic, OpenAI Responses, DeepSeek chat, Gemini: 12 pairs),
a session runs a tool chain on the first, switches between turns, and runs a tool chain on the second: the
second vendor's strict emulator accepts every request, no byte of the first vendor's opaque continuation
(signatures, redacted data, encrypted items, reasoning bound to a model) appears in any request to it, the
trace records the switch and the withholding, and a snapshot taken after the switch restores onto the new
vendor with a byte-identical next request. Real SDKs, real HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.state import EventKind, ReasoningPart
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def chain(tag: str) -> list[ModelAction]:
    """reasoning → a tool call; reasoning → the answer."""
    return [
        ModelAction(
            reasoning=f"{tag}: I need the weather first.",
            tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),),
        ),
        ModelAction(reasoning=f"{tag}: now I can answer.", text=f"{tag}: Paris is mild."),
    ]


class Vendor:
    """One vendor family: its emulator, a client, the model and the options a session uses there."""

    def __init__(self, name: str, stack: ExitStack) -> None:
        self.name = name
        if name == "anthropic":
            self.emulator: Any = stack.enter_context(AnthropicEmulator())
            self.model = "claude-sonnet-4-6"
            self.options: dict[str, Any] = {
                "max_tokens": 4096,
                "thinking": {"type": "enabled", "budget_tokens": 2048},
            }
        elif name == "responses":
            self.emulator = stack.enter_context(OpenAIResponsesEmulator())
            self.model = "gpt-5.5"
            self.options = {"reasoning": {"effort": "medium", "summary": "auto"}}
        elif name == "gemini":
            self.emulator = stack.enter_context(GeminiEmulator())
            self.model = "gemini-3-flash"
            self.options = {"thinking_config": {"include_thoughts": True}}
        else:
            self.emulator = stack.enter_context(OpenAIChatEmulator(dialect="deepseek"))
            self.model = "deepseek-v4-pro"
            self.options = {"dialect": "deepseek"}
        self.client = self.emulator.client() if name == "gemini" else self.emulator.client(max_retries=0)

    def bodies(self) -> list[bytes]:
        return [r.body for r in self.emulator.requests]


FAMILIES = ("anthropic", "responses", "deepseek", "gemini")
PAIRS = [(a, b) for a in FAMILIES for b in FAMILIES if a != b]


@pytest.fixture
def vendors() -> Iterator[Callable[[str], Vendor]]:
    with ExitStack() as stack:
        made: dict[str, Vendor] = {}

        def get(name: str) -> Vendor:
            if name not in made:
                made[name] = Vendor(name, stack)
            return made[name]

        yield get


def run_chain(session: rs.Session, question: str) -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"temp_c": 18} for c in reply.tool_calls})
    return reply


def opaque_values(session: rs.Session) -> list[str]:
    """Every opaque string of the session's payloads: signatures, redacted data, encrypted content, ids of
    reasoning items, and reasoning_content bound to its vendor."""
    out: list[str] = []
    for c in session.continuation:
        value = c.value
        for key in (
            "signature",
            "data",
            "encrypted_content",
            "reasoning_content",
            "reasoning",
            "thoughtSignature",
        ):
            field = value.get(key) if hasattr(value, "get") else None
            if isinstance(field, str) and len(field) >= 8:
                out.append(field)
        if c.kind == "reasoning" and isinstance(value.get("id"), str):
            out.append(value["id"])
    # a chat message that is its parts rendered keeps no payload (issue 21), only who produced it: its
    # reasoning_content is its reasoning part's text, bound to its vendor all the same
    for turn in session.history.turns:
        for step in turn.steps:
            for part in step.parts:
                payload = step.continuation[part.continuation] if part.continuation is not None else None
                if isinstance(part, ReasoningPart) and payload is not None and payload.bare:
                    out.extend([part.text] if len(part.text) >= 8 else [])
    return out


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
def test_a_session_continues_on_another_vendor_with_no_foreign_payload_byte(
    vendors: Callable[[str], Vendor], first: str, second: str
) -> None:
    """Pain points: openclaw/openclaw#120596 (thinking persisted without its signature after a model
    change wedged the session), CommonstackAI/UncommonRoute#19 (a router switching providers sent
    another vendor's signature)."""
    a, b = vendors(first), vendors(second)
    a.emulator.script.extend(chain("A"))
    b.emulator.script.extend(chain("B"))
    options = dict(a.options)
    session = rs.Session(a.client, model=a.model, system="You are terse.", tools=[WEATHER], **options)
    assert run_chain(session, "Paris weather?").text == "A: Paris is mild."
    secrets = opaque_values(session)
    assert secrets, "the first vendor left opaque continuation to protect"

    session.switch(b.client, model=b.model, **b.options)
    assert run_chain(session, "And tomorrow?").text == "B: Paris is mild."  # no 400 on the way
    sent = b.bodies()
    assert len(sent) == 2
    for body in sent:
        text = body.decode()
        assert not [s for s in secrets if s in text], "a foreign payload byte reached the new vendor"
        assert "Paris weather?" in text and "A: Paris is mild." in text  # the earlier turn is there
    # and so is its tool result: a JSON string inside the JSON body, or (Gemini) the object itself
    first = sent[0].decode()
    assert '{\\"temp_c\\":18}' in first or '"response": {"temp_c": 18}' in first
    changed = session.trace.of_kind(EventKind.VENDOR_CHANGED)
    assert [e.data["new"]["model"] for e in changed] == [b.model]
    assert session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)

    snap = session.snapshot()
    expected = {
        "anthropic": ("anthropic", "messages"),
        "responses": ("openai", "responses"),
        "gemini": ("google", "generate_content"),
    }
    assert (snap.vendor, snap.api, snap.model) == (*expected.get(second, ("deepseek", "chat")), b.model)
    b.emulator.script.extend([ModelAction.answer("B: again.", reasoning="r")] * 2)
    restored = rs.Session.restore(snap.model_dump_json(), b.client)
    restored.send("Once more?")
    session.send("Once more?")
    assert b.bodies()[-1] == b.bodies()[-2]  # byte-identical next request after restore


def test_a_switch_inside_an_open_tool_chain_is_refused(vendors: Callable[[str], Vendor]) -> None:
    a, b = vendors("anthropic"), vendors("responses")
    a.emulator.script.extend(chain("A"))
    session = rs.Session(a.client, model=a.model, tools=[WEATHER], **a.options)
    session.send("Paris weather?")
    before = (session.history, session.trace)
    with pytest.raises(rs.IllegalTransition, match="only allowed between turns"):
        session.switch(b.client, model=b.model)
    assert (session.history, session.trace) == before


@pytest.mark.parametrize("mode", ["drop", "text"])
def test_earlier_visible_reasoning_follows_foreign_reasoning(
    vendors: Callable[[str], Vendor], mode: str
) -> None:
    a, b = vendors("anthropic"), vendors("responses")
    a.emulator.script.extend(chain("A"))
    b.emulator.script.extend([ModelAction.answer("B: ok.", reasoning="r")])
    session = rs.Session(a.client, model=a.model, tools=[WEATHER], foreign_reasoning=mode, **a.options)
    run_chain(session, "Paris weather?")
    session.switch(b.client, model=b.model, **b.options)
    session.send("And tomorrow?")
    items = json.loads(b.bodies()[0])["input"]
    assert not [i for i in items if i.get("type") == "reasoning"]  # never disguised as native reasoning
    texts = [i["content"] for i in items if i.get("role") == "assistant"]
    shown = [t for t in texts if "I need the weather first." in t]
    if mode == "drop":
        assert shown == []
    else:
        assert shown == [
            "(Earlier reasoning by claude-sonnet-4-6, shown as plain text:)\nA: I need the weather first.\n"
            "(End of earlier reasoning.)\n\n"
        ]
