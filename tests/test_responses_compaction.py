"""Responses compaction (docs/protocols.md §1.9, issue 26 item 2): the emulator's server-side compaction and
``POST /v1/responses/compact``, through the real ``openai`` SDK over real HTTP; then a session that carries a
compaction item as model-bound continuation state."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import attrs
import openai
import pytest
from openai.types.responses import ResponseCompactionItem

import reasonstate as rs
from reasonstate.adapters.base import Encodings
from reasonstate.adapters.openai_responses import CHAIN_FALLBACK
from reasonstate.state import EventKind, History, Turn
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

MODEL = "gpt-5.5"
ENC = ["reasoning.encrypted_content"]
COMPACT_AT = [{"type": "compaction", "compact_threshold": 40}]
REASON = "Reason: Encrypted content could not be decrypted or parsed."


@pytest.fixture
def emu() -> Iterator[OpenAIResponsesEmulator]:
    with OpenAIResponsesEmulator() as emulator:
        yield emulator


@pytest.fixture
def client(emu: OpenAIResponsesEmulator) -> Iterator[openai.OpenAI]:
    with emu.client() as c:
        yield c


def _dump(response: Any) -> list[dict[str, Any]]:
    return [o.model_dump(exclude_none=True) for o in response.output]


def _tokens(*items: dict[str, Any]) -> int:
    """The emulator's documented token count of rendered input items, written out here (module doc of
    reasonstate.testing.openai_responses): sorted-key compact JSON without id/status, 4 bytes a token."""
    return sum(
        math.ceil(
            len(
                json.dumps(
                    {k: v for k, v in i.items() if k not in ("id", "status")},
                    ensure_ascii=False,
                    separators=(",", ":"),
                    sort_keys=True,
                ).encode()
            )
            / 4
        )
        for i in items
    )


LONG = {"role": "user", "content": "Summarize the whole design discussion so far. " * 8}


def _compacted(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> Any:
    emu.script.extend([ModelAction(text="Done.", reasoning="Short.")])
    return client.responses.create(
        model=MODEL, input=[LONG], include=ENC, store=False, context_management=COMPACT_AT
    )


def test_crossing_the_threshold_puts_a_compaction_item_before_the_reply(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    response = _compacted(emu, client)
    first = response.output[0]
    assert isinstance(first, ResponseCompactionItem)
    assert first.id.startswith("cmp_") and first.encrypted_content.startswith("gAAAAAB")
    assert [o.type for o in response.output] == ["compaction", "reasoning", "message"]


def test_below_the_threshold_there_is_no_compaction(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction(text="Hi.")])
    big = [{"type": "compaction", "compact_threshold": 10_000}]
    response = client.responses.create(model=MODEL, input="Hello", store=False, context_management=big)
    assert [o.type for o in response.output] == ["reasoning", "message"]


def test_the_compaction_item_replaces_the_items_before_it(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    """Replaying everything and replaying from the compaction item on is the same prompt (the vendor's
    latency tip: items before the newest compaction item may be dropped)."""
    output = _dump(_compacted(emu, client))
    nxt = {"role": "user", "content": "Thanks"}
    emu.script.extend([ModelAction(text="A."), ModelAction(text="B.")])
    whole = client.responses.create(model=MODEL, input=[LONG, *output, nxt], include=ENC, store=False)
    pruned = client.responses.create(model=MODEL, input=[*output, nxt], include=ENC, store=False)
    assert whole.usage is not None and pruned.usage is not None
    assert whole.usage.input_tokens == pruned.usage.input_tokens == _tokens(*output, nxt)


def test_a_tampered_compaction_item_is_the_vendors_400(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    """openclaw/openclaw#110075, openai/codex#35334: after compaction the item does not decrypt."""
    output = _dump(_compacted(emu, client))
    blob = output[0]["encrypted_content"]
    output[0]["encrypted_content"] = blob[:-6] + ("A" if blob[-6] != "A" else "B") + blob[-5:]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input=[*output, {"role": "user", "content": "x"}], store=False)
    assert caught.value.code == "invalid_encrypted_content"
    assert caught.value.body == {
        "message": f"The encrypted content for item cmp_em...._001 could not be verified. {REASON}",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_encrypted_content",
    }
    idless = {k: v for k, v in output[0].items() if k != "id"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input=[idless], store=False)
    shown = idless["encrypted_content"]
    assert caught.value.body is not None
    assert caught.value.body["message"] == (
        f"The encrypted content {shown[:4]}...{shown[-4:]} could not be verified. {REASON}"
    )


def test_a_compaction_item_is_bound_to_its_model(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    output = _dump(_compacted(emu, client))
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-5.4", input=[output[0]], store=False)
    assert caught.value.code == "invalid_encrypted_content"


def test_the_compact_endpoint_returns_the_user_messages_then_one_compaction_item(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction(text="Paris.", reasoning="Easy.")])
    first = client.responses.create(model=MODEL, input="Capital of France?", include=ENC, store=False)
    window = [{"role": "user", "content": "Capital of France?"}, *_dump(first)]
    compacted = client.responses.compact(model=MODEL, input=window)
    assert compacted.object == "response.compaction"
    assert [o.type for o in compacted.output] == ["message", "compaction"]
    emu.script.extend([ModelAction(text="Berlin.")])
    # the SDK types a user message of the output as its output message: dump without its warning
    items = [o.model_dump(exclude_none=True, warnings=False) for o in compacted.output]
    nxt = [*items, {"role": "user", "content": "And Germany?"}]
    answer = client.responses.create(model=MODEL, input=nxt, include=ENC, store=False)
    assert answer.output_text == "Berlin."


# -- the session: a compaction item is continuation state bound to its model ---------------------------------

TOOLS = [
    rs.Tool(
        name="get_weather",
        description="w",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
]
WEATHER = ToolCallSpec("get_weather", {"city": "Paris"})
TASK = "Look up the weather in Paris, then summarize the whole design discussion so far. " * 3


def _chain(emu: OpenAIResponsesEmulator, *, stream: bool) -> rs.Session:
    """A tool chain with reasoning whose first request crosses the threshold: compaction, then the call."""
    emu.script.extend(
        [
            ModelAction.call(WEATHER, reasoning="Need the weather."),
            ModelAction(text="Sunny in Paris.", reasoning="Tool said sunny."),
            ModelAction(text="Yes.", reasoning="Still sunny."),
        ]
    )
    session = rs.Session(
        emu.client(), model=MODEL, store=False, tools=TOOLS, context_management=COMPACT_AT, stream=stream
    )
    reply = session.send(TASK)
    session.send_tool_results({reply.tool_calls[0].id: "sunny"})
    return session


def test_a_session_keeps_the_compaction_item_bound_to_its_model_and_replays_it_verbatim(
    emu: OpenAIResponsesEmulator,
) -> None:
    """issue 26: the compaction item is a continuation payload (model-bound), replayed byte for byte."""
    session = _chain(emu, stream=False)
    kinds = [(c.kind, c.model_bound) for c in session.continuation]
    assert kinds[0] == ("compaction", True)
    sent = json.loads(emu.requests[-1].body)["input"]
    received = json.loads(emu.requests[0].body)  # the first request crossed the threshold
    assert "context_management" in received
    compaction = json.loads(session.continuation[0].payload)
    assert sent[0] == compaction  # verbatim, and the items it replaces are dropped (§1.9)
    session.send("Still sunny?")  # the replayed item verified: the emulator accepted it


def test_after_a_model_switch_the_compaction_item_is_never_sent(emu: OpenAIResponsesEmulator) -> None:
    session = _chain(emu, stream=False)
    blob = json.loads(session.continuation[0].payload)["encrypted_content"]
    session.switch_model("gpt-5.4")
    session.send("Still sunny?")  # the emulator would refuse the item under gpt-5.4 (400)
    assert blob.encode() not in emu.requests[-1].body


def test_streamed_and_unstreamed_compaction_give_the_same_state() -> None:
    states = []
    for stream in (False, True):
        with OpenAIResponsesEmulator() as emu:
            session = _chain(emu, stream=stream)
            masked = [
                {k: "-" if k == "encrypted_content" else v for k, v in json.loads(c.payload).items()}
                for c in session.continuation
            ]
            steps = [(s.parts, s.usage, s.stop_reason) for t in session.history.turns for s in t.steps]
            states.append((masked, steps))
    assert states[0] == states[1]


def test_a_restored_session_sends_the_compaction_item_byte_identically(emu: OpenAIResponsesEmulator) -> None:
    session = _chain(emu, stream=False)
    expected = session.next_request("Still sunny?").kwargs
    snap = rs.SessionSnapshot.model_validate_json(session.snapshot().model_dump_json())
    restored = rs.Session.restore(snap, emu.client())
    assert json.dumps(restored.next_request("Still sunny?").kwargs) == json.dumps(expected)
    restored.send("Still sunny?")


SYSTEM = "You are a careful assistant for a weather desk. Answer briefly and cite the tool. " * 60


def _long_session(emu: OpenAIResponsesEmulator) -> rs.Session:
    """Prompts above the 1024-token cache minimum; only the first request crosses the threshold."""
    emu.script.extend(
        [
            ModelAction.call(WEATHER, reasoning="Need the weather."),
            ModelAction(text="Sunny in Paris.", reasoning="Tool said sunny."),
            ModelAction(text="Yes.", reasoning="Still sunny."),
            ModelAction(text="No.", reasoning="Nothing else."),
        ]
    )
    threshold = [{"type": "compaction", "compact_threshold": 1500}]
    session = rs.Session(
        emu.client(), model=MODEL, system=SYSTEM, store=False, tools=TOOLS, context_management=threshold
    )
    reply = session.send(TASK * 4)
    session.send_tool_results({reply.tool_calls[0].id: "sunny"})
    session.send("Still sunny?")
    session.send("Anything else?")
    return session


def test_the_request_after_a_compaction_drops_what_the_item_replaces(emu: OpenAIResponsesEmulator) -> None:
    """§1.9 latency tip: stateless, the input starts at the newest compaction item."""
    session = _long_session(emu)
    second = json.loads(emu.requests[1].body)["input"]
    assert second[0] == json.loads(session.continuation[0].payload)
    assert [i.get("type") for i in second] == [
        "compaction",
        "reasoning",
        "function_call",
        "function_call_output",
    ]


def test_a_compaction_is_a_declared_cache_break_and_every_other_prediction_is_exact(
    emu: OpenAIResponsesEmulator,
) -> None:
    session = _long_session(emu)
    """Requests 1 and 3 cross the threshold (1526 and 1579 tokens of 1500): each next request starts at the
    new compaction item, a break the trace declares; the others extend their predecessor."""
    breaks = session.trace.of_kind(EventKind.CACHE_BREAK)
    declared = [(b.data["index"], b.data["cause"], b.data["declared"]) for b in breaks]
    assert declared == [(1, "compacted", True), (3, "compacted", True)]
    assert all(b.data["why"].startswith("context.compacted: ") for b in breaks)
    assert sum(c.kind == "compaction" for c in session.continuation) == 2
    predicted = [r.predicted_cache_read for r in session.execution]
    reported = [r.usage.cache_read for r in session.execution]
    assert reported[2] >= 1024  # a real cache read, predicted exactly
    assert [predicted[0], predicted[2]] == [reported[0], reported[2]]


# -- guard mode on a plain client (issue 26 item 5) ----------------------------------------------------------


def test_the_guard_sees_a_compaction_as_a_compacted_rewrite_and_predicts_the_rest(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    """A plain client appends every output item as the compaction guide says (no pruning): the server
    renders from the compaction item on, the guard reads the request the same way."""
    guard = rs.instrument(client)
    emu.script.extend([ModelAction(text=f"Answer {i}.", reasoning="Think.") for i in range(3)])
    threshold = [{"type": "compaction", "compact_threshold": 1500}]
    kw: dict[str, Any] = {"model": MODEL, "instructions": SYSTEM, "include": ENC, "store": False}
    items: list[Any] = [{"role": "user", "content": TASK * 6}]
    for question in ("Still sunny?", "Anything else?"):
        response = client.responses.create(input=items, context_management=threshold, **kw)
        items += [*_dump(response), {"role": "user", "content": question}]
    client.responses.create(input=items, context_management=threshold, **kw)
    records = guard.records
    assert [o.get("type") for o in json.loads(emu.requests[1].body)["input"]][:2] == [None, "compaction"]
    assert records[1].divergence is not None and records[1].divergence.cause == "compacted"
    assert records[2].divergence is None and records[2].warnings == ()
    assert records[2].reported_cache_read is not None and records[2].reported_cache_read >= 1024
    assert records[2].predicted_cache_read == records[2].reported_cache_read


# -- conversations (§1.10): the third way of chaining ------------------------------------------------------


def test_a_session_on_a_conversation_sends_only_the_new_items(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    conversation = client.conversations.create()
    emu.script.extend(
        [
            ModelAction.call(WEATHER, reasoning="Need the weather."),
            ModelAction(text="Sunny.", reasoning="Tool said sunny."),
            ModelAction(text="Yes.", reasoning="Still."),
        ]
    )
    session = rs.Session(client, model=MODEL, tools=TOOLS, conversation=conversation.id)
    reply = session.send("Weather in Paris?")
    session.send_tool_results({reply.tool_calls[0].id: "sunny"})
    session.send("Still sunny?")
    bodies = [json.loads(r.body) for r in emu.requests[1:]]  # [0] created the conversation
    assert [b["conversation"] for b in bodies] == [conversation.id] * 3
    assert "previous_response_id" not in bodies[2]
    assert [[i.get("type", "user") for i in b["input"]] for b in bodies] == [
        ["user"],
        ["function_call_output"],
        ["user"],
    ]
    # what the conversation holds is what a stateless session would have sent, item for item
    held = emu.conversation_items(conversation.id)
    assert [i.get("type", "user") for i in held] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
        "user",
        "reasoning",
        "message",
    ]
    assert held[1] == json.loads(session.continuation[0].payload)


def test_conversation_and_previous_response_id_are_mutually_exclusive(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL, input="x", conversation=conversation.id, previous_response_id="resp_emu_001"
        )
    assert caught.value.code == "mutually_exclusive_parameters"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="x", conversation="conv_unknown")


def test_the_demo_row_shows_one_declared_compaction_break_and_exact_predictions() -> None:
    from reasonstate.demo.compaction import compaction_table

    table = compaction_table()
    assert [r[5] for r in table.rows] == ["-", "compacted (declared)", "-"]
    assert table.rows[1][1].startswith("compaction ") and table.rows[2][3] == table.rows[2][4] != "0"


# -- switches: a compaction item never reaches another vendor or model ------------------------------------


@pytest.mark.parametrize("other", ["anthropic", "gemini", "deepseek", "gpt-5.4"])
def test_a_switch_after_a_compaction_sends_no_foreign_opaque_bytes_and_back_it_continues(
    emu: OpenAIResponsesEmulator, other: str
) -> None:
    """issue 26: the compaction item stays with gpt-5.5; the other side gets the visible history only, and
    back on gpt-5.5 the emulator verifies the item again."""
    from reasonstate.testing.anthropic import AnthropicEmulator
    from reasonstate.testing.gemini import GeminiEmulator
    from reasonstate.testing.openai_chat import OpenAIChatEmulator

    session = _chain(emu, stream=False)
    newest = [c for c in session.continuation if c.kind == "compaction"][-1]  # both requests compacted
    blob = json.loads(newest.payload)["encrypted_content"].encode()
    if other == "gpt-5.4":
        session.switch_model("gpt-5.4")
        session.send("Still sunny?")
        assert blob not in emu.requests[-1].body
    else:
        make, model, options = {
            "anthropic": (
                AnthropicEmulator,
                "claude-sonnet-4-6",
                {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}},
            ),
            "gemini": (GeminiEmulator, "gemini-3-flash", {"thinking_config": {"include_thoughts": True}}),
            "deepseek": (
                lambda: OpenAIChatEmulator(dialect="deepseek"),
                "deepseek-v4-pro",
                {"dialect": "deepseek"},
            ),
        }[other]
        with make() as theirs:
            theirs.script.extend([ModelAction(text="Other.", reasoning="Other side.")])
            client = theirs.client() if other == "gemini" else theirs.client(max_retries=0)
            session.switch(client, model=model, **options)
            session.send("Still sunny?")
            assert all(blob not in r.body for r in theirs.requests)
    if other == "gpt-5.4":
        session.switch_model(MODEL)
    else:
        session.switch(emu.client(), model=MODEL, context_management=COMPACT_AT)
    emu.script.extend([ModelAction(text="Back.", reasoning="Back on 5.5.")])
    session.send("And now?")  # the emulator verified every item it got
    assert blob in emu.requests[-1].body  # its own model reads it again


def test_inspect_shows_the_compaction_as_a_bound_payload_and_the_declared_break(
    emu: OpenAIResponsesEmulator, tmp_path: Any
) -> None:
    from reasonstate.recordings import inspect_text, load

    session = _long_session(emu)
    saved = tmp_path / "session.json"
    saved.write_text(session.snapshot().model_dump_json())
    text = inspect_text(load(saved), events=200)
    compaction = session.continuation[0]
    size, digest = len(compaction.payload), compaction.digest[:19]
    line = f"openai/responses compaction from gpt-5.5, {size} bytes, {digest}…, bound to its model"
    assert f"turn 0 step 0: {line}" in text
    assert "context.compacted" in text and "compacted" in text
    blob = json.loads(compaction.payload)["encrypted_content"]
    assert blob not in text and blob[:40] not in text  # opaque: kind, size and digest only


def test_a_streamed_compaction_announces_the_pass_and_parses_to_the_same_item(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction(text="Done.", reasoning="Short.")])
    kinds: list[str] = []
    with client.responses.stream(
        model=MODEL, input=[LONG], include=ENC, store=False, context_management=COMPACT_AT
    ) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_response()
    assert "response.compaction.compacting" in kinds
    items = _dump(final)
    assert items[0]["type"] == "compaction" and items[0]["id"] == "cmp_emu_001"


@pytest.mark.parametrize("chaining", ["store", "conversation"])
def test_chained_by_id_after_a_compaction_the_prediction_stays_exact(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, chaining: str
) -> None:
    """Chained by ``previous_response_id`` or a conversation, nothing is pruned by the client (§1.9), but
    the server renders from the compaction item on: the units say so, the break is declared and the
    requests after it are predicted exactly."""
    emu.script.extend(
        [
            ModelAction.call(WEATHER, reasoning="Need the weather."),
            ModelAction(text="Sunny in Paris.", reasoning="Tool said sunny."),
            ModelAction(text="Yes.", reasoning="Still sunny."),
            ModelAction(text="No.", reasoning="Nothing else."),
        ]
    )
    threshold = [{"type": "compaction", "compact_threshold": 1500}]
    way: dict[str, Any] = (
        {"store": True} if chaining == "store" else {"conversation": client.conversations.create().id}
    )
    session = rs.Session(client, model=MODEL, system=SYSTEM, tools=TOOLS, context_management=threshold, **way)
    reply = session.send(TASK * 4)
    session.send_tool_results({reply.tool_calls[0].id: "sunny"})
    session.send("Still sunny?")
    session.send("Anything else?")
    bodies = [json.loads(r.body) for r in emu.requests if r.path == "/v1/responses"]
    assert [len(b["input"]) for b in bodies] == [1, 1, 1, 1]  # only the new items, every time
    assert session.trace.of_kind(CHAIN_FALLBACK) == []
    breaks = session.trace.of_kind(EventKind.CACHE_BREAK)
    assert [(b.data["index"], b.data["cause"], b.data["declared"]) for b in breaks] == [
        (1, "compacted", True),
        (3, "compacted", True),
    ]
    predicted = [r.predicted_cache_read for r in session.execution]
    reported = [r.usage.cache_read for r in session.execution]
    assert reported[2] >= 1024
    assert [predicted[0], predicted[2]] == [reported[0], reported[2]]


def test_the_memoized_run_keeps_its_newest_compaction_item_as_a_fresh_encoding_finds_it(
    emu: OpenAIResponsesEmulator,
) -> None:
    """The closed turns' run keeps the index of its newest compaction item as it grows and as it is cut
    (issue 21: no pass over the input items per request): every history built from the session's turns,
    on the session's memo (extended, then cut shorter) or a fresh one, starts its stateless input at its
    newest compaction item, the only one it sends (§1.9), and has the units of fresh turn objects (which
    memoize nothing)."""
    session = _long_session(emu)
    turns = session.history.turns
    assert sum(c.kind == "compaction" for c in session.continuation) == 2
    adapter, options = session._adapter, dict(session._options)

    def fresh_units(history: History) -> tuple[str, ...]:
        copy = History(tuple(attrs.evolve(t) for t in history.turns))
        return adapter.encode(session.prefix, copy, session.model, options, [], encodings=Encodings()).units

    for k in [len(turns), 1, 2, 3, len(turns), 2, 1, len(turns)]:
        history = History((*turns[:k], Turn(index=k, user="Next?")))
        had = any(c.kind == "compaction" for t in turns[:k] for s in t.steps for c in s.continuation)
        for memo in (session._encodings, Encodings()):
            request = adapter.encode(session.prefix, history, session.model, options, [], encodings=memo)
            kinds = [item.get("type") for item in request.kwargs["input"]]
            assert kinds.count("compaction") == (1 if had else 0), (k, kinds)
            assert not had or kinds[0] == "compaction", (k, kinds)
            assert request.units == fresh_units(history), k
