"""Switching among the routes of one model family never sends a foreign payload (issue 27, "every ordered
pair"): Claude through the first-party Messages API, through Bedrock Converse (boto3), through the Messages
API on Bedrock (``AnthropicBedrock``, invoke) and on Vertex AI (``AnthropicVertex``), and through
OpenRouter's chat dialect: every ordered pair of the five. Each route's strict emulator refuses a
signature it did not issue, and the oracle is every signature the first route produced, looked for in
every byte the second route received. pydantic/pydantic-ai#3757: after a fallback between platforms,
"final assistant message must start with a thinking block" or an invalid signature."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.testing import AnthropicEmulator, ModelAction, ToolCallSpec
from reasonstate.testing.bedrock import BedrockConverseEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests.conftest import THINKING, WEATHER

ROUTES = ("anthropic", "bedrock", "openrouter", "bedrock-invoke", "vertex")


def actions(tag: str) -> list[ModelAction]:
    return [
        ModelAction.call(
            ToolCallSpec("get_weather", raw_arguments='{"city":"Oslo"}'), reasoning=f"{tag}: weather."
        ),
        ModelAction.answer(f"{tag}: cold.", reasoning=f"{tag}: done."),
    ]


@contextlib.contextmanager
def route(name: str) -> Iterator[tuple[Any, Any, str, dict[str, Any]]]:
    """(emulator, client, model, options) of one route."""
    script = actions(name)
    if name == "anthropic":
        with AnthropicEmulator(script) as emu:
            yield emu, emu.client(), "claude-sonnet-4-6", {"max_tokens": 4096, "thinking": THINKING}
    elif name in ("bedrock-invoke", "vertex"):
        platform = "bedrock" if name == "bedrock-invoke" else "vertex"
        model = (
            "anthropic.claude-sonnet-4-5-20250929-v1:0"
            if platform == "bedrock"
            else "claude-sonnet-4-5@20250929"
        )
        with AnthropicEmulator(script, platform=platform) as emu:
            yield emu, emu.client(), model, {"max_tokens": 4096, "thinking": THINKING}
    elif name == "bedrock":
        with BedrockConverseEmulator(script) as emu:
            options = {
                "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}}
            }
            yield emu, emu.client(), "anthropic.claude-sonnet-4-5-20250929-v1:0", options
    else:
        with OpenAIChatEmulator(script, dialect="openrouter") as emu:
            yield emu, emu.client(), "anthropic/claude-sonnet-4.5", {"dialect": "openrouter"}


def chain(session: rs.Session, question: str) -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"temp": -3} for c in reply.tool_calls})
    return reply


def signatures(session: rs.Session) -> set[str]:
    found: set[str] = set()
    for turn in session.history.turns:
        for step in turn.steps:
            for c in step.continuation:
                found.update(re.findall(rb'"signature":"([^"]+)"', c.payload))
    return {s.decode() for s in found}


@pytest.mark.parametrize(("first", "second"), list(itertools.permutations(ROUTES, 2)))
def test_a_switch_between_claude_routes_sends_nothing_foreign(first: str, second: str) -> None:
    with (
        route(first) as (_, client_a, model_a, options_a),
        route(second) as (emu_b, client_b, model_b, options_b),
    ):
        session = rs.Session(client_a, model=model_a, tools=[WEATHER], **options_a)
        assert chain(session, "Weather in Oslo?").text == f"{first}: cold."
        foreign = signatures(session)
        assert foreign  # the first route signed its thinking
        dialect = options_b.pop("dialect", None)
        session.switch(client_b, model=model_b, dialect=dialect, **options_b)
        assert chain(session, "And tomorrow?").text == f"{second}: cold."
        received = b"".join(r.body for r in emu_b.requests)
        assert not any(s.encode() in received for s in foreign)
        assert not any(s.encode() in received.replace(b"\\/", b"/") for s in foreign)
        # the second route's own chain went back with its own signed thinking
        assert signatures(session) - foreign
        assert json.loads(emu_b.requests[-1].body)  # a request it accepted
