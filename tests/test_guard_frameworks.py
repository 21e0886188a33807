"""The guard around other frameworks' clients (issue 25 item 4): pydantic-ai and the OpenAI Agents SDK, each
driving the real ``openai`` client against the strict emulators, two user turns, each a tool chain.

Mend off, the guard names each defect at the first request where it happens; mend on, the emulator accepts
every request and the replayed continuation bytes equal what the emulator served. A framework that already
replays correctly (the OpenAI Agents SDK on these APIs) gets no finding, and mend on changes not one byte.
The oracles: the bodies the emulator received and the argument string it served (written by hand here)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.testing import ModelAction, OpenAIChatEmulator, OpenAIResponsesEmulator, Script, ToolCallSpec
from tests.test_guard import _OPAQUE, _at

#: the model's own argument string, as the emulator serves it (with a model's odd spacing)
SPACED = '{"city":  "Rome"}'
QUESTIONS = ("Rome?", "And tomorrow?")


def _script(body: Any) -> ModelAction:
    last = json.dumps((body.get("messages") or body.get("input") or [{}])[-1])
    if "function_call_output" in last or '"tool"' in last:
        return ModelAction(reasoning="Rome is 22C.", text="Rome is 22C.")
    return ModelAction(
        reasoning="Check Rome.",
        tool_calls=(ToolCallSpec("get_weather", {"city": "Rome"}, raw_arguments=SPACED),),
    )


EMULATORS: dict[str, Callable[[], Any]] = {
    "responses": lambda: OpenAIResponsesEmulator(Script(_script)),
    "deepseek": lambda: OpenAIChatEmulator(Script(_script), dialect="deepseek"),
}
#: where the first replayed call's arguments sit in each turn's chain request (request 1 and request 3)
ARGUMENTS = {
    "responses": ("$.input[2].arguments", "$.input[8].arguments"),
    "deepseek": (
        "$.messages[2].tool_calls[0].function.arguments",
        "$.messages[6].tool_calls[0].function.arguments",
    ),
}


async def _pydantic_ai(api: str, client: Any) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(openai_client=client)
    model = (
        OpenAIResponsesModel("gpt-5", provider=provider)
        if api == "responses"
        else OpenAIChatModel("deepseek-reasoner", provider=provider)
    )
    agent = Agent(model, instructions="Be brief.")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return "22C"

    history: list[Any] = []
    for question in QUESTIONS:
        history = (await agent.run(question, message_history=history)).all_messages()


async def _openai_agents(api: str, client: Any) -> None:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    model: Any = (
        OpenAIResponsesModel("gpt-5", openai_client=client)
        if api == "responses"
        else OpenAIChatCompletionsModel("deepseek-reasoner", openai_client=client)
    )

    @function_tool
    def get_weather(city: str) -> str:
        return "22C"

    agent = Agent(name="weather", instructions="Be brief.", model=model, tools=[get_weather])
    items: list[Any] = []
    for question in QUESTIONS:
        items = (await Runner.run(agent, [*items, {"role": "user", "content": question}])).to_input_list()


def _run(framework: Callable[[str, Any], Any], api: str, mend: bool | None) -> tuple[list[bytes], Any]:
    with EMULATORS[api]() as emulator:
        client = emulator.async_client()
        guard = rs.instrument(client, mend=mend) if mend is not None else None
        asyncio.run(framework(api, client))
        return [r.body for r in emulator.requests], guard


def _kinds(guard: Any) -> list[list[tuple[str, str]]]:
    return [[(w.kind, w.path) for w in r.warnings] for r in guard.records]


@pytest.mark.parametrize("api", sorted(EMULATORS))
def test_pydantic_ai_reserialized_arguments_are_named_at_their_first_request(api: str) -> None:
    """Pain point: pydantic-ai 2.68 re-serializes the model's argument strings (painpoints H.45), the same
    from the first replay on: only the answer itself shows the change."""
    pytest.importorskip("pydantic_ai")
    bodies, guard = _run(_pydantic_ai, api, mend=False)
    first, second = ARGUMENTS[api]
    assert _at(json.loads(bodies[1]), first) == '{"city":"Rome"}'  # the defect, as the server received it
    assert _kinds(guard) == [[], [("continuation_altered", first)], [], [("continuation_altered", second)]]


@pytest.mark.parametrize("api", sorted(EMULATORS))
def test_pydantic_ai_with_mend_sends_the_served_arguments_and_is_accepted(api: str) -> None:
    pytest.importorskip("pydantic_ai")
    bodies, guard = _run(_pydantic_ai, api, mend=True)
    first, second = ARGUMENTS[api]
    sent = [json.loads(b) for b in bodies]
    assert [_at(sent[i], first) for i in (1, 2, 3)] == [SPACED] * 3
    assert _at(sent[3], second) == SPACED
    assert all(r.status == 200 for r in guard.records)
    assert [k for k, _ in _kinds(guard)[1]] == ["continuation_altered", "mended"]


@pytest.mark.parametrize("mend", [False, True], ids=["mend-off", "mend-on"])
@pytest.mark.parametrize("api", sorted(EMULATORS))
def test_openai_agents_replays_faithfully_and_mend_changes_not_one_byte(api: str, mend: bool) -> None:
    pytest.importorskip("agents")
    bare, _ = _run(_openai_agents, api, mend=None)
    guarded, guard = _run(_openai_agents, api, mend=mend)
    assert _kinds(guard) == [[], [], [], []]
    assert all(r.status == 200 for r in guard.records)
    # the emulators mint fresh opaque payloads per run: those values aside, the runs are identical
    assert [_OPAQUE.sub(rb'"\1":"<opaque>"', b) for b in bare] == [
        _OPAQUE.sub(rb'"\1":"<opaque>"', b) for b in guarded
    ]
    assert _at(json.loads(guarded[1]), ARGUMENTS[api][0]) == SPACED
