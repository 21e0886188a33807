"""Sessions on a model ALIAS, end to end: real SDKs, real HTTP, emulators that answer like the vendors.

Vendors answer an alias with the dated snapshot id in the response's ``model`` field (Anthropic
``claude-sonnet-4-5`` → ``claude-sonnet-4-5-20250929``, OpenAI ``gpt-5`` → ``gpt-5-2025-08-07``), and
treat the two names as one model: a thinking block or an encrypted reasoning item produced under the alias
is valid when sent back under the alias. A session asked for the alias must therefore keep replaying its
continuation payloads verbatim inside a tool chain and in later turns, although every response names
another string than the one the session asked for.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import CLOCK, SYSTEM, THINKING, WEATHER, answer, run_chain, three_step_chain

# the SDK warns that claude-sonnet-4-5 is deprecated; that is not what these tests are about
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

CLAUDE_ALIAS = "claude-sonnet-4-5"
CLAUDE_DATED = "claude-sonnet-4-5-20250929"
GPT_ALIAS = "gpt-5"
GPT_DATED = "gpt-5-2025-08-07"
_REASONING_BLOCKS = ("thinking", "redacted_thinking")


class Responses:
    """An emulator ``transform`` that keeps a copy of every successful response it lets through."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(copy.deepcopy(payload))
        return payload


def _bodies(emulator: AnthropicEmulator | OpenAIResponsesEmulator) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in emulator.requests]


def _withheld(session: rs.Session) -> list[Any]:
    return [e.data for e in session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)]


# -- Anthropic Messages --------------------------------------------------------------------------------------


def _reasoning_blocks(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in content if b.get("type") in _REASONING_BLOCKS]


@pytest.fixture
def claude() -> Iterator[tuple[AnthropicEmulator, Responses]]:
    responses = Responses()
    with AnthropicEmulator(transform=responses) as emulator:
        yield emulator, responses


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_aliased_claude_tool_chain_replays_its_thinking_blocks_verbatim_and_is_accepted(
    claude: tuple[AnthropicEmulator, Responses], stream: bool
) -> None:
    emulator, responses = claude
    emulator.script.extend([*three_step_chain(), answer(1)])
    session = rs.Session(
        emulator.client(),
        model=CLAUDE_ALIAS,
        system=SYSTEM,
        tools=[WEATHER, CLOCK],
        thinking=THINKING,
        max_tokens=4096,
        stream=stream,
    )
    # send → tool calls → send_tool_results → tool calls → send_tool_results → final answer; the emulator
    # answers each step 400 "Expected `thinking`..." if the open chain's thinking blocks are not sent back
    reply = run_chain(session)
    assert _withheld(session) == []
    assert reply.text == "Rome is warmer (22C) than Paris (18C)."
    sent = _bodies(emulator)
    assert len(sent) == 3 and emulator.script.taken == 3
    assert [b["model"] for b in sent] == [CLAUDE_ALIAS] * 3  # the session keeps asking for the alias
    assert [r["model"] for r in responses.seen] == [CLAUDE_DATED] * 3  # the vendor answers the snapshot
    for k in range(2):
        issued = _reasoning_blocks(responses.seen[k]["content"])
        assert issued  # thinking (+ redacted thinking on the first step)
        assistant = sent[k + 1]["messages"][1 + 2 * k]
        assert assistant["role"] == "assistant"
        # verbatim, in order, first in the message: the signed text and signature / data unchanged
        assert assistant["content"][: len(issued)] == issued
        for block in issued:
            assert str(block.get("signature") or block.get("data")).encode() in emulator.requests[k + 1].body

    # the next user turn (policy Keep) sends every thinking block of the closed turn back, under the alias
    session.send("And tomorrow?")
    follow_up = _bodies(emulator)[3]
    assert follow_up["model"] == CLAUDE_ALIAS
    replayed = [b for m in follow_up["messages"] if m["role"] == "assistant" for b in m["content"]]
    issued_all = [b for r in responses.seen[:3] for b in _reasoning_blocks(r["content"])]
    assert _reasoning_blocks(replayed) == issued_all
    assert _withheld(session) == []


# -- OpenAI Responses ----------------------------------------------------------------------------------------

GPT_SYSTEM = "You are a careful travel assistant. Always check the weather first."
GPT_REASONING = {"effort": "medium", "summary": "auto"}


def _gpt_chain() -> list[ModelAction]:
    """reasoning → 2 parallel calls; reasoning → 1 call; reasoning → answer; a follow-up answer."""
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
        ModelAction(reasoning="I have everything; Rome is warmer.", text="Rome is warmer than Paris."),
        ModelAction(reasoning="Same again tomorrow.", text="Tomorrow too."),
    ]


def _gpt_run_chain(session: rs.Session) -> rs.Reply:
    reply = session.send("Paris or Rome: which is warmer?")
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"city": c.arguments.get("city")} for c in reply.tool_calls})
    return reply


def _reasoning_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if i.get("type") == "reasoning"]


def _types(items: list[dict[str, Any]]) -> list[str]:
    return [str(i.get("type", "message")) for i in items]


@pytest.fixture
def gpt() -> Iterator[tuple[OpenAIResponsesEmulator, Responses]]:
    responses = Responses()
    with OpenAIResponsesEmulator(transform=responses) as emulator:
        yield emulator, responses


def _gpt_session(emulator: OpenAIResponsesEmulator, *, store: bool, stream: bool) -> rs.Session:
    return rs.Session(
        emulator.client(),
        model=GPT_ALIAS,
        system=GPT_SYSTEM,
        tools=[WEATHER, CLOCK],
        reasoning=GPT_REASONING,
        store=store,
        stream=stream,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_aliased_gpt5_stateless_tool_chain_replays_its_encrypted_reasoning_and_is_accepted(
    gpt: tuple[OpenAIResponsesEmulator, Responses], stream: bool
) -> None:
    emulator, responses = gpt
    emulator.script.extend(_gpt_chain())
    session = _gpt_session(emulator, store=False, stream=stream)
    reply = _gpt_run_chain(session)
    assert _withheld(session) == []
    assert reply.text == "Rome is warmer than Paris."
    session.send("And tomorrow?")
    assert _withheld(session) == []
    sent = _bodies(emulator)
    assert len(sent) == 4 and emulator.script.taken == 4
    assert [(b["model"], b["store"]) for b in sent] == [(GPT_ALIAS, False)] * 4
    assert "reasoning.encrypted_content" in sent[0]["include"]
    assert [r["model"] for r in responses.seen] == [GPT_DATED] * 4
    issued = [_reasoning_items(r["output"])[0] for r in responses.seen]
    assert all(isinstance(i.get("encrypted_content"), str) for i in issued)
    # every request replays every reasoning item issued so far, blob and id unchanged, in order; the
    # emulator verified each blob against the resolved model (gpt-5 and gpt-5-2025-08-07 are one model)
    for k in (1, 2, 3):
        replayed = _reasoning_items(sent[k]["input"])
        assert [(i.get("id"), i.get("encrypted_content")) for i in replayed] == [
            (i["id"], i["encrypted_content"]) for i in issued[:k]
        ]
        for item in issued[:k]:
            assert item["encrypted_content"].encode() in emulator.requests[k].body
    # each reasoning item still precedes the item that followed it in its response
    assert _types(sent[1]["input"]) == [
        "message",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_aliased_gpt5_stateful_tool_chain_continues_the_stored_chain(
    gpt: tuple[OpenAIResponsesEmulator, Responses], stream: bool
) -> None:
    emulator, responses = gpt
    emulator.script.extend(_gpt_chain())
    session = _gpt_session(emulator, store=True, stream=stream)
    reply = _gpt_run_chain(session)
    assert _withheld(session) == []
    assert reply.text == "Rome is warmer than Paris."
    session.send("And tomorrow?")
    assert _withheld(session) == []
    sent = _bodies(emulator)
    assert len(sent) == 4 and emulator.script.taken == 4
    assert [(b["model"], b["store"]) for b in sent] == [(GPT_ALIAS, True)] * 4
    assert [r["model"] for r in responses.seen] == [GPT_DATED] * 4
    # the reasoning stays in the server's stored chain: each request continues the previous response
    # and sends only what is new (the alias and the dated id are one model for the stored chain too)
    assert "previous_response_id" not in sent[0]
    assert [b.get("previous_response_id") for b in sent[1:]] == [r["id"] for r in responses.seen[:3]]
    assert _types(sent[1]["input"]) == ["function_call_output", "function_call_output"]
    assert _types(sent[2]["input"]) == ["function_call_output"]
    assert sent[3]["input"] == [{"role": "user", "content": "And tomorrow?"}]
    assert emulator.stored_response_ids() == [r["id"] for r in responses.seen]
