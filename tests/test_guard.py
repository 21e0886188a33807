"""Guard mode (issue 12 items 3-4): ``rs.instrument(client)`` on plain vendor clients, driven over real HTTP
against the emulators. Every request here is built by hand (the vendor's documented request shape) and sent
by the real SDK; the oracles are the emulators' recorded bodies and reported usage, never the guard."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

import reasonstate as rs
from reasonstate.cache.divergence import CAUSES
from reasonstate.testing import (
    AnthropicEmulator,
    Fault,
    GeminiEmulator,
    ModelAction,
    OpenAIChatEmulator,
    OpenAIResponsesEmulator,
    ToolCallSpec,
)

CLAUDE = "claude-sonnet-4-6"
SYSTEM = "You are a careful travel assistant. Today is 2026-12-01 03:40. " + "Check the weather first. " * 400
WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CLOCK = {
    "name": "get_time",
    "description": "Local time for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
THINKING = {"type": "enabled", "budget_tokens": 2048}
ANSWER_AFTER_RESULTS = ModelAction(reasoning="Paris is mild, so the answer is Paris.", text="Paris is 18C.")


def _asks(body: Any) -> ModelAction:
    """The scripted model: a question gets reasoning and a weather call, tool results get an answer."""
    last = (body.get("messages") or body.get("input") or body.get("contents") or [{}])[-1]
    text = json.dumps(last)
    if "tool_result" in text or "function_call_output" in text or "functionResponse" in text:
        return ANSWER_AFTER_RESULTS
    if isinstance(last, dict) and last.get("role") == "tool":
        return ANSWER_AFTER_RESULTS
    return ModelAction(
        reasoning="Check the weather in Paris.",
        tool_calls=(ToolCallSpec("get_weather", {"city": "Paris", "unit": "C"}),),
    )


@pytest.fixture
def claude() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator(_asks) as emulator:
        yield emulator


def _anthropic_kwargs(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": CLAUDE,
        "max_tokens": 4096,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": [copy.deepcopy(WEATHER), copy.deepcopy(CLOCK)],
        "thinking": dict(THINKING),
    }
    kwargs.update(overrides)
    return kwargs


def _marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a breakpoint on the last block (how a caller keeps its tool chain cached)."""
    out = copy.deepcopy(messages)
    last = out[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def _closed_turn(client: Any) -> list[dict[str, Any]]:
    """A question, a thinking + tool-use answer, its result, a thinking + text answer, a new question."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Paris or Rome: which is warmer?"}]
    first = client.messages.create(messages=_marked(history), **_anthropic_kwargs())
    history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
    call = next(b for b in first.content if b.type == "tool_use")
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]}
    )
    second = client.messages.create(messages=_marked(history), **_anthropic_kwargs())
    history.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]}
    )
    history.append({"role": "user", "content": "And tomorrow?"})
    return history


def _drop_thinking(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(history)
    out[1]["content"] = [b for b in out[1]["content"] if b["type"] != "thinking"]
    return out


def _reorder_arguments(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(history)
    block = next(b for b in out[1]["content"] if b["type"] == "tool_use")
    block["input"] = dict(reversed(list(block["input"].items())))
    return out


def _rewrite_question(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(history)
    out[0]["content"] = "Rome or Paris: which is warmer?"
    return out


def _answer_again(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The closed turn, then a second one answered with thinking: the first turn is no longer the last."""
    # the closed turn's last thinking block again (its signature covers its text, not its place)
    thinking = next(b for b in history[3]["content"] if b["type"] == "thinking")
    again = [copy.deepcopy(thinking), {"type": "text", "text": "Warmer tomorrow."}]
    return [
        *copy.deepcopy(history),
        {"role": "assistant", "content": again},
        {"role": "user", "content": "Sure?"},
    ]


def _compact(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Summary so far: Paris is 18C and warmer than Rome."},
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        history[-1],
    ]


def _system(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


def _reserialized_schema() -> dict[str, Any]:
    tool = copy.deepcopy(WEATHER)
    schema = tool["input_schema"]
    tool["input_schema"] = {
        k: schema[k] for k in ("properties", "required", "type")
    }  # same schema, new order
    return tool


#: cause -> (how the second request's kwargs differ, the history it sends, the JSON path the guard names)
VARIANTS: dict[str, tuple[dict[str, Any], Callable[[list[dict[str, Any]]], list[dict[str, Any]]], str]] = {
    "system_changed": ({"system": _system(SYSTEM.replace("careful", "cautious"))}, list, "$.system[0].text"),
    "timestamp_in_prefix": ({"system": _system(SYSTEM.replace("03:40", "03:41"))}, list, "$.system[0].text"),
    "tools_changed": (
        {"tools": [copy.deepcopy(WEATHER), {**CLOCK, "description": "The local time"}]},
        list,
        "$.tools[1].description",
    ),
    "tools_reordered": ({"tools": [copy.deepcopy(CLOCK), copy.deepcopy(WEATHER)]}, list, "$.tools[0]"),
    "tool_schema_reserialized": (
        {"tools": [_reserialized_schema(), copy.deepcopy(CLOCK)]},
        list,
        "$.tools[0].input_schema",
    ),
    "model_changed": ({"model": "claude-opus-4-1"}, list, "$.model"),
    "options_changed": (
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        list,
        "$.thinking.budget_tokens",
    ),
    "reasoning_dropped": ({}, _drop_thinking, "$.messages[1].content[0]"),
    "arguments_reserialized": ({}, _reorder_arguments, "$.messages[1].content[1].input"),
    "history_rewritten": ({}, _rewrite_question, "$.messages[0].content"),
    "compacted": ({}, _compact, "$.messages[0].content"),
    # Anthropic context editing (docs/protocols.md §4.7): the vendor clears the closed turn's thinking
    "server_cleared": (
        {
            "extra_body": {
                "context_management": {
                    "edits": [
                        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
                    ]
                }
            },
            "extra_headers": {"anthropic-beta": "context-management-2025-06-27"},
        },
        _answer_again,
        "$.messages[1].content[0]",
    ),
}


def _documented_causes() -> list[str]:
    """The causes the guide's "Causes" table lists (docs/howto/guard.md), in its order."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "howto" / "guard.md").read_text()
    table = page.split("\n## Causes\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE)


def test_every_cause_is_documented_and_each_one_is_produced_by_a_variant_below() -> None:
    """The vocabulary a caller reads (``Divergence.cause``) is the one the guide documents, word for word,
    and every word of it is produced from real request bytes by one variant of
    :func:`test_each_cause_is_named_from_the_sdks_own_request_bytes` (a cause no test produces, or one the
    guide does not explain, fails here)."""
    documented = _documented_causes()
    assert len(documented) == len(set(documented)) > 0
    assert sorted(CAUSES) == sorted(documented) == sorted(VARIANTS)


@pytest.mark.parametrize("cause", sorted(VARIANTS))
def test_each_cause_is_named_from_the_sdks_own_request_bytes(claude: AnthropicEmulator, cause: str) -> None:
    """Pain point: openclaw/openclaw#82939 (a cache drop with "no tracked cache input change")."""
    client = claude.client()
    guard = rs.instrument(client)
    history = _closed_turn(client)
    client.messages.create(messages=_marked(history), **_anthropic_kwargs())
    overrides, edit, path = VARIANTS[cause]
    try:
        client.messages.create(messages=_marked(edit(history)), **_anthropic_kwargs(**overrides))
    except anthropic.BadRequestError:
        # thinking signatures are bound to the model that made them (docs/protocols.md §4.3): the vendor
        # refuses them under another one; the guard still records the request and its cause
        assert cause == "model_changed"
    records = guard.records
    assert len(records) == len(claude.requests) == 4
    # the first three extend each other: no divergence
    assert [r.divergence for r in records[:3]] == [None, None, None]
    last = records[3]
    assert last.previous == 2
    assert last.divergence is not None
    assert (last.divergence.cause, last.divergence.path) == (cause, path)
    # the guard read the bytes the emulator received: the oracle parses them itself
    sent = json.loads(claude.requests[3].body)
    assert _at(sent, path) is not None or cause in ("reasoning_dropped",)


def _at(body: Any, path: str) -> Any:
    """The value at a ``$.a[0].b`` path of a parsed body (a hand-written walker: the oracle)."""
    value = body
    for token in path[2:].replace("[", ".[").split(".") if path != "$" else []:
        if not token:
            continue
        value = value[int(token[1:-1])] if token.startswith("[") else value[token]
    return value


# -- one tool chain per vendor, as a hand-written loop on the plain SDK --------------------------------------

QUESTION = "Paris or Rome: which is warmer?"
FUNCTION = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _anthropic_chain(client: Any, *, drop: bool = False, stream: bool = False) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = client.messages.create(messages=_marked(history), **_anthropic_kwargs())
    content = [b.model_dump(exclude_none=True) for b in first.content]
    if drop:
        content = [b for b in content if b["type"] != "thinking"]
    history.append({"role": "assistant", "content": content})
    call = next(b for b in first.content if b.type == "tool_use")
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]}
    )
    if stream:
        with client.messages.stream(messages=_marked(history), **_anthropic_kwargs()) as events:
            second = events.get_final_message()
    else:
        second = client.messages.create(messages=_marked(history), **_anthropic_kwargs())
    history.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]}
    )
    history.append({"role": "user", "content": "And tomorrow?"})
    client.messages.create(messages=_marked(history), **_anthropic_kwargs())


def _responses_chain(client: Any, *, drop: bool = False, stream: bool = False) -> None:
    kwargs: dict[str, Any] = {
        "model": "gpt-5",
        "instructions": SYSTEM,
        "tools": [{"type": "function", **FUNCTION}],
        "reasoning": {"effort": "low"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    items: list[Any] = [{"role": "user", "content": QUESTION}]
    first = client.responses.create(input=items, **kwargs)
    for item in first.output:
        if drop and item.type == "reasoning":
            continue
        replay = item.model_dump(exclude_none=True)
        if drop:
            replay.pop("id", None)  # an id-less call is how a client legally leaves reasoning out
        items.append(replay)
    call = next(i for i in first.output if i.type == "function_call")
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "18C"})
    if stream:
        with client.responses.stream(input=items, **kwargs) as events:
            second = events.get_final_response()
    else:
        second = client.responses.create(input=items, **kwargs)
    items.extend(i.model_dump(exclude_none=True) for i in second.output)
    items.append({"role": "user", "content": "And tomorrow?"})
    client.responses.create(input=items, **kwargs)


def _deepseek_chain(client: Any, *, drop: bool = False, stream: bool = False) -> None:
    kwargs: dict[str, Any] = {
        "model": "deepseek-reasoner",
        "tools": [{"type": "function", "function": FUNCTION}],
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    first = client.chat.completions.create(messages=messages, **kwargs).choices[0].message
    replay = first.model_dump(exclude_none=True)
    if drop:
        replay.pop("reasoning_content", None)
    messages.append(replay)
    messages.append({"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "18C"})
    if stream:
        streamed = {"stream": True, "stream_options": {"include_usage": True}}
        pieces = list(client.chat.completions.create(messages=messages, **streamed, **kwargs))
        text = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
        messages.append({"role": "assistant", "content": text})
    else:
        second = client.chat.completions.create(messages=messages, **kwargs).choices[0].message
        messages.append({"role": "assistant", "content": second.content})
    messages.append({"role": "user", "content": "And tomorrow?"})
    client.chat.completions.create(messages=messages, **kwargs)


def _gemini_chain(client: Any, *, drop: bool = False, stream: bool = False) -> None:
    from google.genai import types

    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**FUNCTION)])],
        thinking_config=types.ThinkingConfig(include_thoughts=False),
    )
    model = "gemini-2.5-flash"
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]
    first = client.models.generate_content(model=model, contents=contents, config=config)
    answer = first.candidates[0].content
    if drop:
        answer = types.Content(
            role="model", parts=[p.model_copy(update={"thought_signature": None}) for p in answer.parts]
        )
    contents.append(answer)
    call = next(p.function_call for p in first.candidates[0].content.parts if p.function_call)
    response = types.Part.from_function_response(name=call.name, response={"temperature": "18C"})
    contents.append(types.Content(role="user", parts=[response]))
    if stream:
        chunks = list(client.models.generate_content_stream(model=model, contents=contents, config=config))
        text = "".join(c.text or "" for c in chunks)
    else:
        text = client.models.generate_content(model=model, contents=contents, config=config).text or ""
    contents.append(types.Content(role="model", parts=[types.Part(text=text)]))
    contents.append(types.Content(role="user", parts=[types.Part(text="And tomorrow?")]))
    client.models.generate_content(model=model, contents=contents, config=config)


VENDORS: dict[str, tuple[Callable[[], Any], Callable[..., None]]] = {
    "anthropic": (lambda: AnthropicEmulator(_asks), _anthropic_chain),
    "responses": (lambda: OpenAIResponsesEmulator(_script()), _responses_chain),
    "deepseek": (lambda: OpenAIChatEmulator(_script(), dialect="deepseek"), _deepseek_chain),
    "gemini": (lambda: GeminiEmulator(_asks), _gemini_chain),
}


def _script() -> Any:
    from reasonstate.testing import Script

    return Script(_asks)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_predicted_equals_reported_on_every_request_that_extends_the_last(vendor: str, stream: bool) -> None:
    make, chain = VENDORS[vendor]
    with make() as emulator:
        client = emulator.client()
        guard = rs.instrument(client)
        chain(client, stream=stream)
        records = guard.records
    assert len(records) == len(emulator.requests) == 3
    assert [r.streamed for r in records] == [False, stream, False]
    for record in records:
        assert record.divergence is None, record
        assert record.warnings == (), record
        assert record.usage is not None
        assert record.predicted_cache_read == record.reported_cache_read == record.usage.cache_read
    # the cache was really read (the chain extends a prompt above every vendor's minimum)
    assert records[2].reported_cache_read is not None and records[2].reported_cache_read > 1024


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_continuation_lost_is_caught_for_each_vendor(vendor: str) -> None:
    """Pain point: LiteLLM 1.110 on stubs (thinking blocks and thought parts dropped inside the chain)."""
    make, chain = VENDORS[vendor]
    with make() as emulator:
        client = emulator.client()
        guard = rs.instrument(client)
        try:
            chain(client, drop=True)
        except Exception as exc:  # a strict vendor refuses the request; the guard recorded it anyway
            assert "400" in str(exc) or "reasoning" in str(exc).lower(), exc
        records = guard.records
    kinds = [[w.kind for w in r.warnings] for r in records]
    assert "continuation_lost" in kinds[1], kinds
    lost = next(w for w in records[1].warnings if w.kind == "continuation_lost")
    assert re.search(r"sha256:[0-9a-f]+ left out$", lost.detail), lost  # a digest, never the payload
    assert lost.path.startswith("$.")
    assert all("continuation_lost" not in k for i, k in enumerate(kinds) if i != 1)


_OPAQUE = re.compile(rb'"(signature|encrypted_content|thoughtSignature|data)": ?"[^"]*"')


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_the_guard_sends_nothing_of_its_own_and_changes_no_byte(vendor: str) -> None:
    make, chain = VENDORS[vendor]
    runs = []
    for guarded in (False, True):
        with make() as emulator:
            client = emulator.client()
            guard = rs.instrument(client) if guarded else None
            chain(client, stream=True)
            received = [(r.method, r.path, r.body) for r in emulator.requests]
            if guard is not None:
                assert len(guard.records) == len(received) == 3
                # what the guard read is what the server received, byte for byte
                assert [r.request_bytes for r in guard.records] == [len(b) for _, _, b in received]
        # the emulators mint fresh opaque payloads per run: those values aside, the runs are identical
        runs.append([(m, p, _OPAQUE.sub(rb'"\1":"<opaque>"', b)) for m, p, b in received])
    assert runs[0] == runs[1]


def test_instrumenting_twice_is_one_guard_and_one_hook(claude: AnthropicEmulator) -> None:
    client = claude.client()
    assert rs.instrument(client) is rs.instrument(client)
    client.messages.create(messages=[{"role": "user", "content": QUESTION}], **_anthropic_kwargs())
    assert len(rs.instrument(client).records) == 1


def test_an_async_client_is_watched_too(claude: AnthropicEmulator) -> None:
    import asyncio

    client = claude.async_client()
    guard = rs.instrument(client)

    async def run() -> None:
        await client.messages.create(messages=[{"role": "user", "content": QUESTION}], **_anthropic_kwargs())
        async with client.messages.stream(
            messages=[{"role": "user", "content": QUESTION}], **_anthropic_kwargs()
        ) as events:
            await events.get_final_message()

    asyncio.run(run())
    records = guard.records
    assert [r.streamed for r in records] == [False, True]
    assert all(r.usage is not None and r.warnings == () for r in records)


# -- bad input: a finding on the record, never an exception in the caller's request path ---------------------


def test_a_request_body_that_is_not_json_is_a_finding(claude: AnthropicEmulator) -> None:
    client = claude.client()
    guard = rs.instrument(client)
    answer = client._client.post(
        f"{claude.base_url}/v1/messages", content=b"not json {", headers={"x-api-key": "test-key"}
    )
    assert answer.status_code == 400  # the emulator's own answer reached the caller untouched
    (record,) = guard.records
    assert {w.kind for w in record.warnings} == {"request_not_json", "vendor_error"}
    assert record.usage is None and record.divergence is None


def test_a_stream_cut_short_is_a_finding(claude: AnthropicEmulator) -> None:
    client = claude.client()
    guard = rs.instrument(client)
    claude.inject(Fault.truncate_stream(after_events=3))
    with (
        pytest.raises(Exception) as raised,
        client.messages.stream(messages=[{"role": "user", "content": QUESTION}], **_anthropic_kwargs()) as s,
    ):
        s.get_final_message()
    assert "reasonstate" not in type(raised.value).__module__  # the SDK's own error, not ours
    (record,) = guard.records
    assert [w.kind for w in record.warnings] == ["stream_cut_short"]
    assert record.usage is None and record.predicted_cache_read is None


@pytest.mark.parametrize(
    ("usage", "kinds", "read"),
    [
        (None, ["usage_missing"], None),
        ({"input_tokens": -5, "output_tokens": 3, "cache_read_input_tokens": -1}, ["usage_invalid"], 0),
    ],
    ids=["missing", "negative"],
)
def test_missing_or_negative_usage_is_a_finding(usage: Any, kinds: list[str], read: int | None) -> None:
    def transform(body: dict[str, Any]) -> dict[str, Any]:
        if usage is None:
            body.pop("usage", None)
        else:
            body["usage"] = usage
        return body

    with AnthropicEmulator(_asks, transform=transform) as emulator:
        client = emulator.client()
        guard = rs.instrument(client)
        client.messages.create(messages=[{"role": "user", "content": QUESTION}], **_anthropic_kwargs())
        (record,) = guard.records
    assert [w.kind for w in record.warnings] == kinds
    assert record.reported_cache_read == read
    if usage is not None:  # normalized as the codec normalizes: a negative count is 0
        assert record.usage == rs.Usage(uncached_input=0, cache_read=0, output=3)


def test_a_client_the_guard_cannot_watch_is_refused_at_instrument_time() -> None:
    with pytest.raises(TypeError, match="httpx2"):
        rs.instrument(object())


# -- the session names its cache breaks with the guard's analysis ------------------------------------------


def _session_on(emulator: AnthropicEmulator, **kw: Any) -> tuple[rs.Session, rs.Guard]:
    client = emulator.client()
    guard = rs.instrument(client)  # the session's own requests, watched on the wire
    tools = [rs.Tool(t["name"], t["description"], t["input_schema"]) for t in (WEATHER, CLOCK)]
    session = rs.Session(client, model=CLAUDE, system=SYSTEM, tools=tools, thinking=THINKING, **kw)
    return session, guard


def _breaks(session: rs.Session) -> list[dict[str, Any]]:
    from reasonstate.state import EventKind

    return [dict(e.data) for e in session.trace.of_kind(EventKind.CACHE_BREAK)]


def test_a_session_break_from_its_policy_names_the_decision_and_agrees_with_the_guard(
    claude: AnthropicEmulator,
) -> None:
    from reasonstate.policies import Drop

    session, guard = _session_on(claude, policy=Drop())
    reply = session.send(QUESTION)
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
    session.send("And tomorrow?")
    (brk,) = _breaks(session)
    assert brk["cause"] == "reasoning_dropped"
    assert brk["decision"].startswith("policy.decision: drop") and brk["why"] == brk["decision"]
    # the thinking block of turn 0's first answer, as the emulator received it the time before
    assert brk["path"] == "$.messages[1].content[0]"
    assert (
        json.loads(claude.requests[brk["index"] - 1].body)["messages"][1]["content"][0]["type"] == "thinking"
    )
    record = guard.records[brk["index"]]
    assert record.divergence is not None
    assert (record.divergence.cause, record.divergence.path) == (brk["cause"], brk["path"])


@pytest.mark.parametrize(
    ("change", "cause", "path"),
    [
        ({"system": SYSTEM.replace("careful", "cautious")}, "system_changed", "$.system[0].text"),
        ({"system": SYSTEM.replace("03:40", "03:45")}, "timestamp_in_prefix", "$.system[0].text"),
        ("tools", "tools_changed", "$.tools[0].description"),
    ],
    ids=["system", "timestamp", "tools"],
)
def test_a_prefix_change_is_named_by_what_changed(
    claude: AnthropicEmulator, change: Any, cause: str, path: str
) -> None:
    """Pain point: anthropics/claude-code#92033 (a tool list changed mid-session re-bills the whole
    prefix): the guard names the change that broke the cache, here the tools, as it names a system edit."""
    session, guard = _session_on(claude)
    claude.script.extend([ModelAction(text="one"), ModelAction(text="two")])
    session.send("first")
    if change == "tools":
        clock = rs.Tool("get_time", "The local time", CLOCK["input_schema"])
        session.change_prefix(tools=[clock if t.name == "get_time" else t for t in session.prefix.tools])
    else:
        session.change_prefix(**change)
    session.send("second")
    (brk,) = _breaks(session)
    assert (brk["cause"], brk["path"]) == (cause, path)
    assert brk["why"].startswith("prefix.changed")  # declared: the exporters keep calling it so
    # the path names the changed value in the bytes the emulator received
    before, after = (_at(json.loads(r.body), path) for r in claude.requests)
    assert before != after and (change != "tools" or after == "The local time")
    divergence = guard.records[1].divergence
    assert divergence is not None and (divergence.cause, divergence.path) == (cause, path)


def test_a_model_switch_is_model_changed() -> None:
    with OpenAIResponsesEmulator([ModelAction(text="one"), ModelAction(text="two")]) as emulator:
        client = emulator.client()
        guard = rs.instrument(client)
        session = rs.Session(client, model="gpt-5", system=SYSTEM)
        session.send("first")
        session.switch_model("gpt-5-mini")
        session.send("second")
        (brk,) = _breaks(session)
        divergence = guard.records[1].divergence
    assert (brk["cause"], brk["path"]) == ("model_changed", "$.model")
    assert brk["why"].startswith("model.changed")
    assert divergence is not None and (divergence.cause, divergence.path) == ("model_changed", "$.model")


def test_interleaved_conversations_are_told_apart(claude: AnthropicEmulator) -> None:
    client = claude.client()
    guard = rs.instrument(client)
    first: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    second: list[dict[str, Any]] = [{"role": "user", "content": "Oslo or Bergen: which is wetter?"}]
    for history in (first, second, first, second):  # two agents on one client, turn by turn
        reply = client.messages.create(messages=_marked(history), **_anthropic_kwargs())
        history.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
        )
        calls = [b for b in reply.content if b.type == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": "x"} for c in calls]
        history.append({"role": "user", "content": results or "Next?"})
    records = guard.records
    # the second conversation starts fresh (same tools and system: no break); each later request
    # continues its own conversation
    assert [r.divergence for r in records] == [None] * 4
    assert [r.previous for r in records] == [None, None, 0, 1]
    # request 1 reads the system prompt's own entry, whose size no earlier report told: not knowable
    assert [r.predicted_cache_read for r in records] == [
        0,
        None,
        *(r.reported_cache_read for r in records[2:]),
    ]


def test_google_genai_async_requests_are_watched_through_the_same_guard() -> None:
    import asyncio

    from google.genai import types

    with GeminiEmulator(_asks) as emulator, emulator.client() as client:
        guard = rs.instrument(client)
        assert rs.instrument(client.aio) is guard  # one genai.Client: one guard for both sides
        contents = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]

        async def run() -> None:
            await client.aio.models.generate_content(model="gemini-2.5-flash", contents=contents)
            stream = await client.aio.models.generate_content_stream(
                model="gemini-2.5-flash", contents=contents
            )
            async for _ in stream:
                pass

        asyncio.run(run())
        client.models.generate_content(model="gemini-2.5-flash", contents=contents)
        records = guard.records
    assert len(records) == len(emulator.requests) == 3
    assert [r.streamed for r in records] == [False, True, False]
    assert all(r.usage is not None and r.warnings == () for r in records)


def test_unread_records_do_not_pile_up_whole_bodies(claude: AnthropicEmulator) -> None:
    from reasonstate.guard import _DRAIN

    client = claude.client()
    guard = rs.instrument(client)
    for i in range(_DRAIN + 2):
        client.messages.create(model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": f"q{i}"}])
    assert len(guard._pending) < _DRAIN  # analysed in a batch by the hook itself
    assert [r.index for r in guard.records] == list(range(_DRAIN + 2))


def test_a_miss_nothing_in_the_requests_explains_is_the_providers(claude: AnthropicEmulator) -> None:
    """Within the cache lifetime (no time passed): ``provider_miss`` (issue 25, item 3)."""
    client = claude.client()
    guard = rs.instrument(client)
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = client.messages.create(messages=_marked(history), **_anthropic_kwargs())
    history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
    call = next(b for b in first.content if b.type == "tool_use")
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "x"}]}
    )
    claude.clear_cache()  # the vendor evicted the entry: the request still extends the last one
    client.messages.create(messages=_marked(history), **_anthropic_kwargs())
    second = guard.records[1]
    assert second.divergence is None and second.reported_cache_read == 0
    assert second.predicted_cache_read is not None and second.predicted_cache_read > 0
    assert [w.kind for w in second.warnings] == ["provider_miss"]
