"""The guard around other frameworks' clients (issue 25 item 4): pydantic-ai and the OpenAI Agents SDK, each
driving the real ``openai`` client against the strict emulators, two user turns, each a tool chain.

Mend off, the guard names each defect at the first request where it happens; mend on, the emulator accepts
every request and the replayed continuation bytes equal what the emulator served. A framework that already
replays correctly (the OpenAI Agents SDK on these APIs) gets no finding, and mend on changes not one byte.
The oracles: the bodies the emulator received and the argument string it served (written by hand here)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

import reasonstate as rs
from reasonstate.testing import (
    AnthropicEmulator,
    GeminiEmulator,
    ModelAction,
    OpenAIChatEmulator,
    OpenAIResponsesEmulator,
    Script,
    ToolCallSpec,
)
from tests.test_guard import _OPAQUE, _at

# the recorder's scripted model (importable without LiteLLM): the emulators answer the replay as they
# answered LiteLLM
_spec = importlib.util.spec_from_file_location(
    "record_litellm", Path(__file__).parent.parent / "benchmarks" / "corpus" / "record_litellm.py"
)
assert _spec is not None and _spec.loader is not None
_recorded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recorded)

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


# -- LiteLLM 1.110.2, recorded: its requests replayed through the guard against fresh emulators --

#: recorded by benchmarks/corpus/record_litellm.py (the OpenAI Agents SDK's LitellmModel driving real
#: LiteLLM against the emulators, in a separate venv): the header, then one case per vendor
LITELLM = Path(__file__).parent.parent / "benchmarks" / "corpus" / "litellm_sequences.jsonl"
_LITELLM_EMULATORS: dict[str, Callable[[], Any]] = {
    "anthropic": lambda: AnthropicEmulator(_recorded.anthropic_model),
    "gemini": lambda: GeminiEmulator(_recorded.gemini_model),
}


def _litellm(vendor: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in LITELLM.read_text().splitlines()]
    assert lines[0]["litellm"] == "1.110.2"
    return next(case for case in lines[1:] if case["vendor"] == vendor)


def _replay_litellm(vendor: str, mend: bool) -> tuple[list[int], list[Any], list[rs.GuardRecord]]:
    """Each recorded request body, byte for byte, through a guarded ``httpx2`` client, each to a fresh
    emulator (the recorded signatures verify there: one default secret; a fresh one has issued nothing
    the replay could collide with). The emulator judges every request; where it accepts one LiteLLM's run
    also had accepted, the guard reads the recorded answer (what LiteLLM read and replayed from), else the
    emulator's own. Returns the emulator's statuses, the bodies it received and the guard's records."""
    case = _litellm(vendor)
    statuses: list[int] = []
    received: list[Any] = []
    recorded = iter(case["exchanges"])

    def answer(request: httpx2.Request) -> httpx2.Response:
        exchange = next(recorded)
        with _LITELLM_EMULATORS[vendor]() as emulator:
            live = httpx2.post(
                emulator.base_url + request.url.path, content=request.read(), headers=request.headers
            )
            received.append(emulator.requests[0].json())
        statuses.append(live.status_code)
        ok = live.status_code == exchange["status"] == 200
        content = exchange["response"].encode() if ok else live.content
        return httpx2.Response(
            live.status_code, headers={"content-type": "application/json"}, content=content
        )

    headers = {"content-type": "application/json", "x-api-key": "test-key", "x-goog-api-key": "test-key"}
    with httpx2.Client(transport=httpx2.MockTransport(answer), base_url="https://recorded.invalid") as http:
        guard = rs.instrument(http, mend=mend)
        for exchange in case["exchanges"]:
            http.post(exchange["path"], content=exchange["request"].encode(), headers=headers)
        return statuses, received, list(guard.records)


def _named(records: list[rs.GuardRecord]) -> list[list[tuple[str, str]]]:
    return [[(w.kind, w.path) for w in r.warnings if w.kind != "vendor_error"] for r in records]


@pytest.mark.parametrize("vendor", sorted(_LITELLM_EMULATORS))
def test_litellm_recording_replays_to_the_verdicts_litellm_got(vendor: str) -> None:
    """The replay is faithful: a fresh emulator answers each recorded request as it answered LiteLLM."""
    statuses, _, _ = _replay_litellm(vendor, mend=False)
    assert statuses == [e["status"] for e in _litellm(vendor)["exchanges"]]


def test_litellm_anthropic_parallel_calls_split_into_turns_are_named_at_their_first_request() -> None:
    """Pain points: openai/openai-agents-python#1704, painpoints H.46 (LiteLLM 1.110 through LitellmModel):
    the answer's two parallel tool uses go back as two assistant turns, the thinking block only on the
    first, so the last one opens with ``tool_use`` and the vendor answers 400. (Without parallel calls the
    recording showed LiteLLM 1.110.2 replaying thinking faithfully: the hand-written "thinking dropped"
    shape is this split.)"""
    statuses, sent, records = _replay_litellm("anthropic", mend=False)
    assert [m["role"] for m in sent[1]["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[1]["messages"][3]["content"][0]["type"] == "tool_use"  # the defect, as the server received it
    assert _named(records) == [[], [("continuation_altered", "$.messages[3].content[0]")]]
    assert statuses == [200, 400]


def test_litellm_anthropic_with_mend_sends_the_answer_in_one_turn_and_is_accepted() -> None:
    statuses, sent, records = _replay_litellm("anthropic", mend=True)
    served = json.loads(_litellm("anthropic")["exchanges"][0]["response"])["content"]
    assert sent[1]["messages"][1:] == [
        {"role": "assistant", "content": served},  # the answer's blocks, byte for byte, in their order
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_emu_001", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "toolu_emu_002", "content": "22C"},
            ],
        },
    ]
    assert [k for k, _ in _named(records)[1]] == ["continuation_altered", "mended"]
    assert statuses == [200, 200]


def test_litellm_gemini_added_ids_and_dummies_are_named_at_their_first_request() -> None:
    """Pain points: painpoints D.22, H.46 (LiteLLM 1.110: calls given ids of its own, the unsigned parallel
    call given the dummy ``skip_thought_signature_validator``, and after the 400 every call's signature
    replaced by the dummy)."""
    _, sent, records = _replay_litellm("gemini", mend=False)
    assert sent[1]["contents"][3]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"
    assert _named(records) == [
        [],
        [
            ("continuation_altered", "$.contents[1].parts[0].function_call.id"),
            ("continuation_altered", "$.contents[3].parts[0].function_call.id"),
            ("continuation_altered", "$.contents[3].parts[0].thoughtSignature"),
        ],
        [("continuation_altered", "$.contents[1].parts[0].thoughtSignature")],
        [],
        [("continuation_altered", "$.contents[7].parts[0].function_call.id")],
        [],
    ]


def test_litellm_gemini_with_mend_sends_the_served_part_and_is_accepted_in_the_first_turn() -> None:
    statuses, sent, records = _replay_litellm("gemini", mend=True)
    served = json.loads(_litellm("gemini")["exchanges"][0]["response"])["candidates"][0]["content"]["parts"]
    # the Paris call as the emulator served it (no id of LiteLLM's), its signature the served bytes
    assert sent[2]["contents"][1]["parts"][0] == {
        "function_call": served[1]["functionCall"],
        "thoughtSignature": served[1]["thoughtSignature"],
    }
    assert (
        sent[1]["contents"][3]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"
    )  # kept
    assert [k for k, _ in _named(records)[1]] == [
        *["continuation_altered", "mended"] * 2,
        "continuation_altered",
    ]
    # the second turn's Paris call has the same name and args as the first's: a guess, never mended
    assert statuses == [200, 200, 200, 200, 400, 200]
