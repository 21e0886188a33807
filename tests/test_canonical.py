"""Canonical rendering: a step whose payloads cannot be sent (another vendor produced them) goes out as the
receiving vendor's own shapes, built from its canonical parts, and the strict emulator accepts it.

Every session here is driven through the real vendor SDK over real HTTP against a strict emulator. The
foreign step is built by hand from ``reasonstate.state`` values and put into a real session through a
snapshot (as benchmarks/overhead.py does). The expected requests are written out by hand below; the
oracle is what the emulator recorded on the wire (for the token adapter: the prompt ids decoded by the
tokenizer package itself, never by our renderer).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, cast

import attrs
import openai
import pytest

import reasonstate as rs
from reasonstate.adapters.tokens import TokenAdapter
from reasonstate.snapshot import history_to_snapshot
from reasonstate.state import (
    Continuation,
    EventKind,
    History,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Turn,
    TurnView,
    Usage,
)
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.completions import VLLMCompletionsEmulator
from reasonstate.testing.openai_chat import Dialect, OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests._snapshots import set_vendor
from tests.test_integrity import (
    IM_END,
    RIG_NAMES,
    SYSTEM,
    caller_schema,
    layers,
    make_rig,
    open_chain,
    qwen_renderer,
    qwen_text,
    results_for,
)

Q0 = "Paris weather for two days?"
Q1 = "And what should I pack?"
SAID = "Let me check the weather."
FINAL = "Paris will be 18C and dry."
THOUGHT = "FOREIGN-THOUGHT: the user wants Paris; call the weather tool."
THOUGHT_2 = "FOREIGN-THOUGHT-2: mild and dry; answer briefly."
SIGNATURE = "FOREIGN-SIGNATURE-0123456789"
CALL_ID = "call_foreign_1"
# the raw argument string as the other vendor produced it: odd spacing, "days" before "city"
RAW = '{ "days": 2 ,"city" :  "Paris" }'
PARSED = {"city": "Paris", "days": 2}  # the parsed arguments, in another key order: never what is sent
RESULT = '{"temp_c":18}'
ANSWER = "Pack a light jacket."
R_ANSWER = "Mild weather: a light jacket."


def _capture(kind: str, value: Any, model_bound: bool) -> Continuation:
    return Continuation.capture(
        vendor="othervendor", api="x", model="m", kind=kind, value=value, model_bound=model_bound
    )


def foreign_history() -> History:
    """One closed turn another vendor produced: reasoning, text and a tool call (answered), then an answer."""
    step0 = Step(
        parts=(
            ReasoningPart(text=THOUGHT, continuation=0),
            TextPart(text=SAID, continuation=1),
            ToolCallPart(id=CALL_ID, name="get_weather", arguments=PARSED, raw_arguments=RAW, continuation=2),
        ),
        continuation=(
            _capture("reasoning", {"type": "reasoning", "text": THOUGHT, "signature": SIGNATURE}, True),
            _capture("text", {"type": "text", "text": SAID}, False),
            _capture(
                "tool_call", {"type": "tool_call", "id": CALL_ID, "name": "get_weather", "args": RAW}, False
            ),
        ),
        stop_reason="tool_calls",
        usage=Usage(),
        model="m",
        tool_results=(ToolResultPart(call_id=CALL_ID, content=RESULT),),
    )
    step1 = Step(
        parts=(ReasoningPart(text=THOUGHT_2, continuation=0), TextPart(text=FINAL, continuation=1)),
        continuation=(
            _capture("reasoning", {"type": "reasoning", "text": THOUGHT_2, "signature": SIGNATURE}, True),
            _capture("text", {"type": "text", "text": FINAL}, False),
        ),
        stop_reason="stop",
        usage=Usage(),
        model="m",
    )
    turn = Turn(index=0, user=Q0, steps=(step0, step1), view=TurnView((True, True), policy="keep"))
    return History((turn,))


FOREIGN_DIGESTS = [c.digest for t in foreign_history().turns for s in t.steps for c in s.continuation]


def resealed(snapshot: rs.SessionSnapshot) -> rs.SessionSnapshot:
    """A snapshot edited on purpose, with its whole-content digest retaken where snapshots carry one."""
    sealed = getattr(snapshot, "sealed", None)
    return sealed() if callable(sealed) else snapshot


@attrs.define
class Target:
    """A vendor API on its emulator, and a session on it whose history is :func:`foreign_history`."""

    name: str
    emulator: Any
    session: rs.Session

    @property
    def requests(self) -> list[Any]:
        reqs: list[Any] = self.emulator.server.requests if self.name == "tokens" else self.emulator.requests
        return reqs

    def body(self) -> dict[str, Any]:
        (request,) = self.requests
        data: dict[str, Any] = json.loads(request.body)
        return data


def _with_foreign_history(session: rs.Session, client: Any, adapter: Any = None) -> rs.Session:
    snap = session.snapshot().model_copy(update={"history": history_to_snapshot(foreign_history())})
    return rs.Session.restore(resealed(snap), client, adapter=adapter)


def _weather() -> rs.Tool:
    return rs.Tool(name="get_weather", description="Current weather for a city", parameters=caller_schema())


@contextlib.contextmanager
def target(name: str) -> Iterator[Target]:
    answer = ModelAction.answer(ANSWER, reasoning=R_ANSWER)
    if name == "anthropic":
        with AnthropicEmulator([answer]) as emu:
            client = emu.client()
            s = rs.Session(
                client,
                model="claude-sonnet-4-6",
                system=SYSTEM,
                tools=[_weather()],
                max_tokens=4096,
                thinking={"type": "enabled", "budget_tokens": 2048},
            )
            yield Target(name, emu, _with_foreign_history(s, client))
            client.close()
    elif name == "responses":
        with OpenAIResponsesEmulator([answer]) as emu, emu.client() as client:
            s = rs.Session(client, model="gpt-5.5", system=SYSTEM, tools=[_weather()], store=False)
            yield Target(name, emu, _with_foreign_history(s, client))
    elif name in ("chat-openai", "chat-vllm"):
        dialect = name.removeprefix("chat-")
        model = {"openai": "gpt-5.5", "vllm": "qwen3"}[dialect]
        with OpenAIChatEmulator([answer], dialect=cast(Dialect, dialect)) as emu, emu.client() as client:
            s = rs.Session(client, model=model, dialect=dialect, system=SYSTEM, tools=[_weather()])
            yield Target(name, emu, _with_foreign_history(s, client))
    elif name == "tokens":
        completion = f"{R_ANSWER}\n</think>\n\n{ANSWER}<|im_end|>"
        with VLLMCompletionsEmulator([completion], tokenizer="qwen3.6", eos_token_ids=[IM_END]) as emu:
            client = openai.OpenAI(base_url=emu.base_url + "/v1", api_key="test-key", max_retries=0)
            adapter = TokenAdapter(qwen_renderer())
            s = rs.Session(
                client, model="qwen3.6", adapter=adapter, system=SYSTEM, tools=[_weather()], max_tokens=512
            )
            yield Target(name, emu, _with_foreign_history(s, client, TokenAdapter(qwen_renderer())))
            client.close()
    else:  # pragma: no cover
        raise AssertionError(name)


TARGETS = ("anthropic", "responses", "chat-openai", "chat-vllm", "tokens")


@pytest.fixture(params=TARGETS)
def foreign(request: pytest.FixtureRequest) -> Iterator[Target]:
    with target(request.param) as t:
        yield t


def strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


# -- what each vendor must receive, written by hand ---------------------------------------------------------

ANTHROPIC_MESSAGES = [
    {"role": "user", "content": [{"type": "text", "text": Q0}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": SAID},
            {"type": "tool_use", "id": CALL_ID, "name": "get_weather", "input": {"days": 2, "city": "Paris"}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": CALL_ID, "content": RESULT}]},
    {"role": "assistant", "content": [{"type": "text", "text": FINAL}]},
    {"role": "user", "content": [{"type": "text", "text": Q1}]},
]
RESPONSES_INPUT = [
    {"role": "user", "content": Q0},
    {"role": "assistant", "content": SAID},
    {"type": "function_call", "call_id": CALL_ID, "name": "get_weather", "arguments": RAW},
    {"type": "function_call_output", "call_id": CALL_ID, "output": RESULT},
    {"role": "assistant", "content": FINAL},
    {"role": "user", "content": Q1},
]
CHAT_MESSAGES = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": Q0},
    {
        "role": "assistant",
        "content": SAID,
        "tool_calls": [
            {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": RAW}}
        ],
    },
    {"role": "tool", "tool_call_id": CALL_ID, "content": RESULT},
    {"role": "assistant", "content": FINAL},
    {"role": "user", "content": Q1},
]
# Qwen3.6's template (reasonstate/tokens/templates/qwen3.6.jinja) on those messages: an assistant message
# before the last user query is "<|im_start|>assistant\n" + content (+ "\n\n" + each call's XML with its
# parameters in the arguments' own order, values as strings or JSON), tool results are wrapped in a user
# turn, and the generation prompt opens a think block.
TOKENS_TAIL = (
    f"<|im_start|>user\n{Q0}<|im_end|>\n"
    f"<|im_start|>assistant\n{SAID}\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=days>\n2\n</parameter>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    "<|im_end|>\n"
    f"<|im_start|>user\n<tool_response>\n{RESULT}\n</tool_response><|im_end|>\n"
    f"<|im_start|>assistant\n{FINAL}<|im_end|>\n"
    f"<|im_start|>user\n{Q1}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n"
)


# -- a closed turn from another vendor --------------------------------------------------------------------


def test_a_foreign_closed_turn_is_sent_as_the_vendors_own_text_tool_call_and_tool_result(
    foreign: Target,
) -> None:
    reply = foreign.session.send(Q1)
    assert reply.text == ANSWER  # the strict emulator answered 200
    body = foreign.body()
    if foreign.name == "anthropic":
        assert strip_cache_control(body["messages"]) == ANTHROPIC_MESSAGES
        # input = the raw arguments parsed, their key order kept (not the parsed dict's order)
        assert b'"input":{"days":2,"city":"Paris"}' in foreign.requests[0].body
    elif foreign.name == "responses":
        assert body["input"] == RESPONSES_INPUT
        assert json.dumps(RAW).encode() in foreign.requests[0].body
    elif foreign.name.startswith("chat"):
        assert body["messages"] == CHAT_MESSAGES
        assert json.dumps(RAW).encode() in foreign.requests[0].body
    else:
        text = qwen_text(body["prompt"])
        assert text.startswith("<|im_start|>system\n# Tools\n")
        assert text.endswith(TOKENS_TAIL)


def test_no_foreign_reasoning_or_signature_is_sent(foreign: Target) -> None:
    """Pain point: pydantic/pydantic-ai#5869 (foreign reasoning re-rendered as text in the request)."""
    foreign.session.send(Q1)
    sent = foreign.requests[0].body
    if foreign.name == "tokens":
        sent = qwen_text(foreign.body()["prompt"]).encode()
    for secret in (THOUGHT, THOUGHT_2, SIGNATURE, "FOREIGN-"):
        assert secret.encode() not in sent
    assert b'"othervendor"' not in sent


def test_the_withheld_foreign_payloads_are_traced_by_digest(foreign: Target) -> None:
    foreign.session.send(Q1)
    events = foreign.session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)
    assert [(e.data["count"], e.data["digests"], e.data["models"]) for e in events] == [
        (5, FOREIGN_DIGESTS, ["m"])
    ]


# -- inside an open tool chain a payload that cannot be replayed is refused ---------------------------------


@pytest.mark.parametrize("name", RIG_NAMES)
def test_an_unreplayable_payload_in_the_open_chain_is_refused_before_anything_is_sent(name: str) -> None:
    with make_rig(name) as rig:
        session = rig.session()
        reply = open_chain(rig, session)
        snap = json.loads(session.snapshot().model_dump_json())
        set_vendor(snap, -1, -1, "othervendor")  # the payload bytes (and so their digests) are unchanged
        restored = rig.restore(resealed(rs.SessionSnapshot.model_validate(snap)))
        assert [c.vendor for c in restored.continuation] == ["othervendor"] * len(session.continuation)
        before, sent = layers(restored), len(rig.requests)
        rig.queue("answer")
        with pytest.raises(rs.ContinuationMismatch) as info:
            restored.send_tool_results(results_for(reply))
        assert isinstance(info.value, rs.ProtocolViolation)
        assert len(rig.requests) == sent
        assert layers(restored) == before
        assert restored.state is rs.TurnState.AWAITING_TOOL_RESULTS


# -- a model alias: provenance is the requested model, the echoed dated id is traced -----------------------

ALIAS = "claude-sonnet-4-5"
DATED = "claude-sonnet-4-5-20250929"


def _alias_actions() -> list[ModelAction]:
    return [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="Check Paris."),
        ModelAction.answer("Paris is mild.", reasoning="Done."),
    ]


def _alias_session(client: Any) -> rs.Session:
    return rs.Session(
        client,
        model=ALIAS,
        system=SYSTEM,
        tools=[_weather()],
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
    )


def test_an_alias_keeps_the_requested_model_as_the_provenance_of_every_payload() -> None:
    with AnthropicEmulator(_alias_actions()) as emu:
        client = emu.client()
        session = _alias_session(client)
        reply = session.send(Q0)
        # the tool call keeps no payload (rendered from its part byte for byte, issue 21)
        assert [c.kind for c in session.continuation] == ["thinking"]
        assert [c.model for c in session.continuation] == [ALIAS]
        assert session.history.turns[0].steps[0].model == ALIAS
        # the thinking block goes back to the alias it was produced under, and the emulator verifies it
        assert session.send_tool_results({c.id: "18C" for c in reply.tool_calls}).text == "Paris is mild."
        assert json.loads(emu.requests[1].body)["model"] == ALIAS
        client.close()


def test_the_trace_records_the_dated_model_id_the_vendor_echoed_for_an_alias() -> None:
    with AnthropicEmulator(_alias_actions()) as emu:
        client = emu.client()
        session = _alias_session(client)
        session.send(Q0)
        (event,) = session.trace.of_kind(EventKind.RESPONSE_RECEIVED)
        assert event.data["response_model"] == DATED
        assert json.loads(emu.requests[0].body)["model"] == ALIAS
        client.close()
