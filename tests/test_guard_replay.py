"""Replay checked against its source, and mend mode (issue 25 items 1-2): each request is compared with the
answers it replays, not only with the previous request, and ``rs.instrument(client, mend=True)`` restores in
the outgoing body what a client lost or altered.

Every request is built by hand the way a framework builds it (its defect written out in the test) and sent
by the real vendor SDK over real HTTP to the strict emulators. The oracles are the bytes the emulator
served (its answers, read from the SDK's own objects), the bodies it received, its 200 or 400, and
hand-written argument strings; never the guard."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anthropic
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
from tests.test_guard import _OPAQUE, FUNCTION, QUESTION, SYSTEM, VENDORS, _anthropic_kwargs, _at

#: the model's own argument string, with the spacing a model may emit (hand-written: the oracle)
SPACED = '{"city":  "Rome"}'
#: what pydantic-ai 2.68 sends back for it (painpoints H.45: re-serialized, compact)
COMPACT = '{"city":"Rome"}'


def _spaced_call(body: Any) -> ModelAction:
    last = json.dumps((body.get("messages") or body.get("input") or [{}])[-1])
    if "function_call_output" in last or '"tool"' in last:
        return ModelAction(reasoning="Rome is 22C.", text="Rome is 22C.")
    return ModelAction(
        reasoning="Check Rome.",
        tool_calls=(ToolCallSpec("get_weather", {"city": "Rome"}, raw_arguments=SPACED),),
    )


def _kinds(record: rs.GuardRecord) -> list[tuple[str, str]]:
    return [(w.kind, w.path) for w in record.warnings]


# -- re-serialized argument strings: stable from the first replay on, so only the source shows them --


def _responses_reserialized(client: Any) -> None:
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
        replayed = item.model_dump(exclude_none=True)
        if item.type == "function_call":
            replayed["arguments"] = json.dumps(json.loads(item.arguments), separators=(",", ":"))
        items.append(replayed)
    call = next(i for i in first.output if i.type == "function_call")
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "22C"})
    second = client.responses.create(input=items, **kwargs)
    items.extend(i.model_dump(exclude_none=True) for i in second.output)
    items.append({"role": "user", "content": "And tomorrow?"})
    client.responses.create(input=items, **kwargs)


def _deepseek_reserialized(client: Any) -> None:
    kwargs: dict[str, Any] = {
        "model": "deepseek-reasoner",
        "tools": [{"type": "function", "function": FUNCTION}],
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    first = client.chat.completions.create(messages=messages, **kwargs).choices[0].message
    replayed = first.model_dump(exclude_none=True)
    for call in replayed["tool_calls"]:
        call["function"]["arguments"] = json.dumps(
            json.loads(call["function"]["arguments"]), separators=(",", ":")
        )
    messages.append(replayed)
    messages.append({"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "22C"})
    second = client.chat.completions.create(messages=messages, **kwargs).choices[0].message
    messages.append({"role": "assistant", "content": second.content})
    messages.append({"role": "user", "content": "And tomorrow?"})
    client.chat.completions.create(messages=messages, **kwargs)


RESERIALIZING = {
    "responses": (
        lambda: OpenAIResponsesEmulator(Script(_spaced_call)),
        _responses_reserialized,
        "$.input[2]",
    ),
    "deepseek": (
        lambda: OpenAIChatEmulator(Script(_spaced_call), dialect="deepseek"),
        _deepseek_reserialized,
        "$.messages[2].tool_calls[0].function",
    ),
}


@pytest.mark.parametrize("vendor", sorted(RESERIALIZING))
def test_reserialized_arguments_are_altered_at_their_first_replay(vendor: str) -> None:
    """Pain point: pydantic-ai 2.68 re-serializes tool-call argument strings (painpoints H.45); the
    request-to-request compare never sees it, since every replay carries the same compact string."""
    make, chain, at = RESERIALIZING[vendor]
    with make() as emulator:
        client = emulator.client()
        guard = rs.instrument(client)
        chain(client)
        sent = [json.loads(r.body) for r in emulator.requests]
    records = guard.records
    assert _at(sent[1], f"{at}.arguments") == COMPACT  # the defect, as the server received it
    assert _kinds(records[1]) == [("continuation_altered", f"{at}.arguments")]
    assert records[1].warnings[0].detail == f"arguments re-serialized: {SPACED!r} went back as {COMPACT!r}"
    assert _kinds(records[0]) == _kinds(records[2]) == []  # reported once, where it first happens


@pytest.mark.parametrize("vendor", sorted(RESERIALIZING))
def test_mend_sends_the_argument_string_the_model_wrote(vendor: str) -> None:
    make, chain, at = RESERIALIZING[vendor]
    with make() as emulator:
        client = emulator.client()
        guard = rs.instrument(client, mend=True)
        chain(client)
        sent = [json.loads(r.body) for r in emulator.requests]
    records = guard.records
    assert [_at(body, f"{at}.arguments") for body in sent[1:]] == [SPACED, SPACED]
    assert _kinds(records[1]) == [("continuation_altered", f"{at}.arguments"), ("mended", f"{at}.arguments")]
    assert _kinds(records[2]) == [
        ("mended", f"{at}.arguments")
    ]  # every request mended; the defect named once
    assert all(r.status == 200 for r in records)


# -- Gemini: a dummy signature on the unsigned parallel call, already in the first replay --

GEMINI_3 = "gemini-3-pro-preview"


def _parallel(body: Any) -> ModelAction:
    last = json.dumps(body["contents"][-1])
    if "functionResponse" in last:
        return ModelAction(reasoning="Both known.", text="Rome is warmer.")
    return ModelAction(
        reasoning="Check both.",
        tool_calls=(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Rome"}),
        ),
    )


def _gemini_dummy_on_rome(client: Any) -> list[Any]:
    """The unsigned parallel Rome call given the dummy signature, in the answer's own content (painpoints
    H.46; real LiteLLM 1.110.2 also splits the calls into contents of their own: the recorded sequence in
    ``tests/test_guard_frameworks.py``). Returns the answer's parts as served (the SDK's objects)."""
    from google.genai import types

    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**FUNCTION)])],
    )
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]
    first = client.models.generate_content(model=GEMINI_3, contents=contents, config=config)
    parts = first.candidates[0].content.parts
    calls = [p for p in parts if p.function_call]
    replayed = [
        p.model_copy(update={"thought_signature": b"skip_thought_signature_validator"})
        if p is calls[1]
        else p
        for p in parts
    ]
    contents.append(types.Content(role="model", parts=replayed))
    contents.append(
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(name="get_weather", response={"temperature": t})
                for t in ("18C", "22C")
            ],
        )
    )
    client.models.generate_content(model=GEMINI_3, contents=contents, config=config)
    return list(parts)


def test_a_dummy_signature_on_the_unsigned_parallel_call_is_altered_in_the_first_replay() -> None:
    """Pain point: LiteLLM's dummy Gemini ``thoughtSignature`` (painpoints D.22, H.46), there from the first
    replay inside the chain: the request-to-request compare never saw it."""
    with GeminiEmulator(_parallel) as emulator:
        client = emulator.client()
        guard = rs.instrument(client)
        parts = _gemini_dummy_on_rome(client)
        sent = json.loads(emulator.requests[1].body)
    rome = next(j for j, p in enumerate(sent["contents"][1]["parts"]) if "functionCall" in p and j > 0)
    assert parts[rome].thought_signature is None  # served unsigned (§5.4: only the first call is signed)
    path = f"$.contents[1].parts[{rome}].thoughtSignature"
    assert _at(sent, path)  # the defect, as the server received it
    records = guard.records
    assert _kinds(records[1]) == [("continuation_altered", path)]
    assert (
        "the dummy 'skip_thought_signature_validator' added where the answer had none"
        in records[1].warnings[0].detail
    )


def test_mend_takes_the_dummy_off_and_keeps_the_served_signature_on_its_part() -> None:
    with GeminiEmulator(_parallel) as emulator:
        client = emulator.client()
        guard = rs.instrument(client, mend=True)
        parts = _gemini_dummy_on_rome(client)
        sent = json.loads(emulator.requests[1].body)
    replayed = sent["contents"][1]["parts"]
    signed = [j for j, p in enumerate(replayed) if "thoughtSignature" in p]
    served = [j for j, p in enumerate(parts) if p.thought_signature]
    assert signed == served  # every signature on the Part it came on, none added
    records = guard.records
    assert [k for k, _ in _kinds(records[1])] == ["continuation_altered", "mended"]
    assert all(r.status == 200 for r in records)


# -- Anthropic: a replaced signature is refused by the vendor; mend restores the served one --


def _anthropic_replaced_signature(client: Any) -> tuple[str, list[dict[str, Any]]]:
    """A tool chain whose replayed thinking block carries another answer's (valid) signature."""
    other = client.messages.create(messages=[{"role": "user", "content": "Warm up."}], **_anthropic_kwargs())
    foreign = next(b.signature for b in other.content if b.type == "thinking")
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = client.messages.create(messages=history, **_anthropic_kwargs())
    content = [b.model_dump(exclude_none=True) for b in first.content]
    served = next(b["signature"] for b in content if b["type"] == "thinking")
    for block in content:
        if block["type"] == "thinking":
            block["signature"] = foreign
    history.append({"role": "assistant", "content": content})
    call = next(b for b in first.content if b.type == "tool_use")
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "22C"}]}
    )
    try:
        client.messages.create(messages=history, **_anthropic_kwargs())
    except Exception as exc:  # the strict vendor refuses the foreign signature
        assert "signature" in str(exc), exc
    return served, history


def _answers_with_a_call(body: Any) -> ModelAction:
    last = json.dumps(body["messages"][-1])
    if "tool_result" in last:
        return ModelAction(reasoning="Rome is 22C.", text="Rome is 22C.")
    if "Warm up" in last:
        return ModelAction(
            reasoning="Warming up.", tool_calls=(ToolCallSpec("get_weather", {"city": "Oslo"}),)
        )
    return ModelAction(reasoning="Check Rome.", tool_calls=(ToolCallSpec("get_weather", {"city": "Rome"}),))


@pytest.mark.parametrize("mend", [False, True], ids=["mend-off", "mend-on"])
def test_a_replaced_thinking_signature_is_named_and_mended(mend: bool) -> None:
    """Pain point: anthropics/anthropic-sdk-python#1598 (a block re-serialized or from another answer: 400
    "Invalid signature in thinking block")."""
    with AnthropicEmulator(_answers_with_a_call) as emulator:
        client = emulator.client()
        guard = rs.instrument(client, mend=mend)
        served, _ = _anthropic_replaced_signature(client)
        sent = json.loads(emulator.requests[2].body)
    records = guard.records
    path = "$.messages[1].content[0].signature"
    assert [(k, p) for k, p in _kinds(records[2]) if k != "vendor_error"][:1] == [
        ("continuation_altered", path)
    ]
    if mend:
        assert _at(sent, path) == served
        assert records[2].status == 200
        assert ("mended", path) in _kinds(records[2])
    else:
        assert _at(sent, path) != served
        assert records[2].status == 400


# -- a faithful replay is sent as it was, byte for byte --


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_mend_on_a_faithful_replay_changes_not_one_byte(vendor: str) -> None:
    make, chain = VENDORS[vendor]
    runs = []
    for mend in (None, True):
        with make() as emulator:
            client = emulator.client()
            guard = rs.instrument(client, mend=True) if mend else None
            chain(client)
            # the emulators mint fresh opaque payloads per run: those values aside, the runs are identical
            runs.append(
                [(r.method, r.path, _OPAQUE.sub(rb'"\1":"<opaque>"', r.body)) for r in emulator.requests]
            )
            if guard is not None:
                assert [w for r in guard.records for w in r.warnings] == []
                # what was sent is what the SDK built: the guard's capture and the server agree
                assert [r.request_bytes for r in guard.records] == [len(r.body) for r in emulator.requests]
    assert runs[0] == runs[1]


def test_instrumenting_again_with_the_other_mend_is_refused() -> None:
    with AnthropicEmulator(_answers_with_a_call) as emulator:
        client = emulator.client()
        guard = rs.instrument(client)
        assert rs.instrument(client) is guard
        with pytest.raises(rs.InvalidOption, match="mend=False"):
            rs.instrument(client, mend=True)


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_mend_restores_what_a_client_left_out_and_the_vendor_accepts_it(vendor: str) -> None:
    """Pain points: openai/openai-agents-python#1704 (LiteLLM drops Anthropic thinking), #919 (encrypted
    reasoning left out), langchain-ai/langchain#37713 (``reasoning_content`` not sent back), google/adk-python
    #3705 (thought signature lost): the chains of ``tests/test_guard.py`` with the payload left out, which a
    strict vendor refuses without mend (``test_continuation_lost_is_caught_for_each_vendor``)."""
    make, chain = VENDORS[vendor]
    with make() as emulator:
        client = emulator.client()
        guard = rs.instrument(client, mend=True)
        chain(client, drop=True)  # no 400: every request accepted
    records = guard.records
    assert all(r.status == 200 for r in records)
    kinds = [k for k, _ in _kinds(records[1])]
    assert kinds == ["continuation_lost", "mended"]


def test_an_answer_matched_by_a_guess_is_named_but_never_mended() -> None:
    """Gemini 2.5 gives its calls no id: two conversations asking the same call are two answers the same
    name and args find. A request leaving the signature out is reported, and sent as it was."""
    make, chain = VENDORS["gemini"]
    with make() as emulator:
        client = emulator.client()
        guard = rs.instrument(client, mend=True)
        chain(client)  # a first conversation: get_weather(Paris), signed
        chain(client, drop=True)  # the same question again, its signature left out
        sent = json.loads(emulator.requests[4].body)
    records = guard.records
    assert "thoughtSignature" not in json.dumps(sent["contents"][1])  # not mended: the match is a guess
    assert [k for k, _ in _kinds(records[4])] == ["continuation_lost"]


# -- Anthropic parallel tool uses: back in one message, or split into turns (LiteLLM 1.110) --


def _both_cities(body: Any) -> ModelAction:
    if "tool_result" in json.dumps(body["messages"][-1]):
        return ModelAction(reasoning="Both known.", text="Rome is warmer.")
    return ModelAction(
        reasoning="Check both.",
        tool_calls=(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Rome"}),
        ),
    )


def _parallel_chain(client: Any, split: str | None) -> None:
    """A question answered with two tool uses, sent back in the answer's one message; or, with ``split``,
    the second tool use in an assistant turn of its own (``"calls"``: nothing else in it, as LiteLLM 1.110
    sends it; ``"text"``: a text block of the client's before it)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = client.messages.create(messages=history, **_anthropic_kwargs())
    blocks = [b.model_dump(exclude_none=True) for b in first.content]
    uses = [b for b in blocks if b["type"] == "tool_use"]
    results = [
        {"type": "tool_result", "tool_use_id": u["id"], "content": t}
        for u, t in zip(uses, ("18C", "22C"), strict=True)
    ]
    if split is None:
        history += [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
    else:
        extra = [{"type": "text", "text": "And Rome."}] if split == "text" else []
        history += [
            {"role": "assistant", "content": blocks[:-1]},
            {"role": "user", "content": results[:1]},
            {"role": "assistant", "content": [*extra, blocks[-1]]},
            {"role": "user", "content": results[1:]},
        ]
    with contextlib.suppress(anthropic.BadRequestError):  # the vendor refuses a split: the guard records it
        client.messages.create(messages=history, **_anthropic_kwargs())


def test_parallel_tool_uses_replayed_in_one_message_get_no_finding_and_no_mend() -> None:
    with AnthropicEmulator(_both_cities) as emulator:
        client = emulator.client()
        guard = rs.instrument(client, mend=True)
        _parallel_chain(client, split=None)
        sent = json.loads(emulator.requests[1].body)
    assert [_kinds(r) for r in guard.records] == [[], []]
    assert len(sent["messages"]) == 3


def test_a_split_turn_holding_more_than_the_answer_is_named_but_never_merged() -> None:
    """Merging turns is a mend only where the split turns hold the answer's tool uses and nothing else."""
    with AnthropicEmulator(_both_cities) as emulator:
        client = emulator.client()
        guard = rs.instrument(client, mend=True)
        _parallel_chain(client, split="text")
        sent = json.loads(emulator.requests[1].body)
    records = guard.records
    assert [(k, p) for k, p in _kinds(records[1]) if k != "vendor_error"] == [
        ("continuation_altered", "$.messages[3].content[1]")
    ]
    assert len(sent["messages"]) == 5  # sent as the client built it
    assert records[1].status == 400
