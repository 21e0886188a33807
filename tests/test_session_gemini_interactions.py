"""The Gemini Interactions API room (docs/protocols.md §5.6): the real ``google-genai`` client over HTTP to
the strict emulator, sync and async, streamed and not, stateless and stateful.

Each test names the §5.6 rule it pins down; the oracles are the emulator's own answers (it does not import
the adapters) and hand-written vendor bodies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx2
import pytest

import reasonstate as rs
from reasonstate.adapters import adapter_for
from reasonstate.adapters.gemini_interactions import (
    CHAIN_FALLBACK,
    InteractionsAdapter,
    InteractionsAssembler,
    PreviousInteractionNotFound,
)
from reasonstate.prefix import Prefix
from reasonstate.state import EventKind, History
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.gemini_interactions import GeminiInteractionsEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

MODEL = "gemini-3-flash-preview"
WEATHER = rs.Tool(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
SYSTEM = "You are terse."


def chain(tag: str = "A") -> list[ModelAction]:
    """Two sequential tool steps with thinking (the first with parallel calls), then the answer."""
    return [
        ModelAction.call(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Oslo"}),
            reasoning=f"{tag}: Paris and Oslo first.",
        ),
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Rome"}), reasoning=f"{tag}: now Rome."),
        ModelAction.answer(f"{tag}: Rome is warmer.", reasoning=f"{tag}: compare."),
    ]


@pytest.fixture
def emulator() -> Iterator[GeminiInteractionsEmulator]:
    with GeminiInteractionsEmulator(cache_min_tokens=32) as emu:
        yield emu


def session_on(emu: GeminiInteractionsEmulator, **options: Any) -> rs.Session:
    return rs.Session(
        emu.client(),
        model=MODEL,
        adapter=InteractionsAdapter(min_cacheable=32),
        system=SYSTEM,
        tools=[WEATHER],
        **options,
    )


def run_chain(session: rs.Session, question: str, *, stream: bool = False) -> rs.Reply:
    def one(send: Any, arg: Any) -> rs.Reply:
        if not stream:
            return send(arg)  # type: ignore[no-any-return]
        opener = session.stream if send == session.send else session.stream_tool_results
        with opener(arg) as s:
            for _ in s:
                pass
        return s.reply

    reply = one(session.send, question)
    while reply.tool_calls:
        reply = one(session.send_tool_results, {c.id: {"temp_c": 20} for c in reply.tool_calls})
    return reply


def bodies(emu: GeminiInteractionsEmulator) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in emu.requests]


# -- the codec on a hand-written answer (§5.6) -------------------------------------------------------------

DOCUMENTED = {
    "id": "v1_ChdMU0FR",
    "status": "requires_action",
    "model": MODEL,
    "steps": [
        {"type": "thought", "signature": "EpYDCpMDAb4+9vs=", "summary": [{"type": "text", "text": "Plan."}]},
        {"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": {"city": "Paris"}},
    ],
    "usage": {
        "total_input_tokens": 5000,
        "total_cached_tokens": 4096,
        "total_output_tokens": 12,
        "total_thought_tokens": 30,
        "total_tokens": 5042,
    },
}


def test_google_genai_clients_choose_the_interactions_room_only_when_asked() -> None:
    with GeminiInteractionsEmulator() as emu:
        client = emu.client()
        assert adapter_for(client).api == "generate_content"
        assert adapter_for(client, api="interactions").api == "interactions"
        assert adapter_for(client.aio, api="interactions").api == "interactions"
        with pytest.raises(rs.InvalidOption):
            adapter_for(client, api="responses")


def test_decode_keeps_each_step_verbatim_and_normalizes_usage() -> None:
    """§5.6: thought steps are model-bound continuation, calls and outputs visible history; usage's
    ``total_input_tokens`` includes the cached tokens."""
    adapter = InteractionsAdapter()
    request = adapter.encode(Prefix(), History(), MODEL, {}, [])
    step = adapter.decode(json.loads(json.dumps(DOCUMENTED)), request)
    assert [c.kind for c in step.continuation] == ["thought", "function_call"]
    assert [c.model_bound for c in step.continuation] == [True, False]
    assert (
        step.continuation[0].payload
        == json.dumps(DOCUMENTED["steps"][0], separators=(",", ":"), ensure_ascii=False).encode()
    )
    assert step.response_id == "v1_ChdMU0FR"
    assert (step.usage.uncached_input, step.usage.cache_read, step.usage.output, step.usage.reasoning) == (
        904,
        4096,
        42,
        30,
    )


def test_the_assembler_rebuilds_the_answer_from_its_documented_deltas() -> None:
    """§5.6 streaming: thought-signature deltas ``{"type": "thought_signature", "signature": ...}``, summary
    pieces, arguments as ``arguments_delta`` strings: ``finish(stream(r)) == r``, key order included."""
    events = [
        {"event_type": "interaction.created", "interaction": {"id": "v1_ChdMU0FR", "status": "in_progress"}},
        {"event_type": "step.start", "index": 0, "step": {"type": "thought"}},
        {"event_type": "step.delta", "index": 0, "delta": {"type": "thought_summary",
                                                            "content": {"type": "text", "text": "Pl"}}},
        {"event_type": "step.delta", "index": 0, "delta": {"type": "thought_summary",
                                                            "content": {"type": "text", "text": "an."}}},
        {"event_type": "step.delta", "index": 0, "delta": {"type": "thought_signature",
                                                            "signature": "EpYDCpMDAb4+9vs="}},
        {"event_type": "step.stop", "index": 0},
        {"event_type": "step.start", "index": 1,
         "step": {"type": "function_call", "id": "fc_1", "name": "get_weather"}},
        {"event_type": "step.delta", "index": 1,
         "delta": {"type": "arguments_delta", "arguments": '{"city":'}},
        {"event_type": "step.delta", "index": 1,
         "delta": {"type": "arguments_delta", "arguments": '"Paris"}'}},
        {"event_type": "step.stop", "index": 1},
        {"event_type": "interaction.completed", "interaction": {
            "id": "v1_ChdMU0FR", "status": "requires_action", "model": MODEL, "usage": DOCUMENTED["usage"]}},
    ]  # fmt: skip
    lines: list[str] = []
    for e in events:
        lines += [f"event: {e['event_type']}", "data: " + json.dumps(e), ""]
    assembled = InteractionsAssembler.assemble(lines)
    assert json.dumps(assembled) == json.dumps(DOCUMENTED)


# -- end to end ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_a_stateless_tool_chain_sends_every_thought_step_back_verbatim(
    emulator: GeminiInteractionsEmulator, stream: bool
) -> None:
    """§5.6 stateless: the full thought steps with their signatures go back in place, as received."""
    emulator.script.extend(chain())
    session = session_on(emulator)
    assert run_chain(session, "Paris or Rome?", stream=stream).text == "A: Rome is warmer."
    sent = bodies(emulator)
    assert [b["store"] for b in sent] == [False] * 3  # the server's default is store=true
    assert all("previous_interaction_id" not in b for b in sent)
    answers = [s for s in session.history.turns[0].steps]
    for k in (1, 2):
        # every model step of every earlier answer is in the request, byte-equal in JSON
        earlier = [json.loads(c.payload) for a in answers[:k] for c in a.continuation]
        replayed = [s for s in sent[k]["input"] if s["type"] in ("thought", "function_call")]
        assert replayed == earlier
    assert [s["type"] for s in sent[2]["input"]] == [
        "user_input",
        "thought",
        "function_call",
        "function_call",
        "function_result",
        "function_result",
        "thought",
        "function_call",
        "function_result",
    ]
    # the results in the model's declared call order
    calls = [s["id"] for s in sent[2]["input"] if s["type"] == "function_call"]
    assert [s["call_id"] for s in sent[2]["input"] if s["type"] == "function_result"] == calls
    report = session.report()
    assert report.predicted_matches == report.predicted_total == 3


def test_streamed_and_unstreamed_sessions_hold_the_same_state() -> None:
    """The assembler gives the answer the non-streamed call returns: the same payload bytes, parts, usage
    and request bytes (the emulator's signatures carry random nonces: each is named by its order, taken
    from the emulator's own answers)."""
    seen = []
    for stream in (False, True):
        with GeminiInteractionsEmulator(chain(), cache_min_tokens=32) as emu:
            session = session_on(emu)
            run_chain(session, "Paris or Rome?", stream=stream)
            steps = session.history.turns[0].steps
            signatures = [json.loads(c.payload).get("signature") for s in steps for c in s.continuation]
            names = {sig: f"SIG{i}" for i, sig in enumerate(x for x in signatures if x)}

            def named(text: str, names: dict[str, str] = names) -> str:
                for sig, name in names.items():
                    text = text.replace(sig, name)
                return text

            seen.append(
                (
                    [named(c.payload.decode()) for s in steps for c in s.continuation],
                    [s.parts for s in steps],
                    [s.usage for s in steps],
                    # the streamed request differs by its ``"stream": true`` only
                    [named(r.body.decode().replace(',"stream":true', "")) for r in emu.requests],
                    [c.digest for s in steps for c in s.continuation if c.kind != "thought"],
                )
            )
    assert len(seen[0][0]) == 7 and "SIG2" in seen[0][0][5]
    assert seen[0] == seen[1]


def test_a_stateful_session_chains_by_interaction_id(emulator: GeminiInteractionsEmulator) -> None:
    """§5.6 stateful: ``store: true`` and ``previous_interaction_id`` + only the new steps; the cache read
    the session predicts equals the emulator's on every request."""
    emulator.script.extend([*chain(), ModelAction.answer("A: again.", reasoning="r")])
    session = session_on(emulator, store=True)
    run_chain(session, "Paris or Rome?")
    session.send("And tomorrow?")
    sent = bodies(emulator)
    assert [b.get("previous_interaction_id") for b in sent] == [
        None,
        "int_emu_001",
        "int_emu_002",
        "int_emu_003",
    ]
    assert [[s["type"] for s in b["input"]] for b in sent[1:]] == [
        ["function_result", "function_result"],
        ["function_result"],
        ["user_input"],
    ]
    records = session.execution
    assert [r.predicted_cache_read for r in records] == [r.usage.cache_read for r in records]
    assert records[-1].usage.cache_read > 0
    report = session.report()
    assert report.predicted_matches == report.predicted_total == 4


def test_a_model_switch_drops_the_interaction_id_and_the_thoughts(
    emulator: GeminiInteractionsEmulator,
) -> None:
    """§5.6: the interaction id and the thought signatures are bound to their model: after
    ``switch_model`` the request is a full replay without either (traced ``chain.fallback``)."""
    emulator.script.extend([*chain(), ModelAction.answer("B: ok.", reasoning="r")])
    session = session_on(emulator, store=True)
    run_chain(session, "Paris or Rome?")
    session.switch_model("gemini-3.1-pro-preview")
    session.send("And tomorrow?")
    last = bodies(emulator)[-1]
    assert "previous_interaction_id" not in last and last["model"] == "gemini-3.1-pro-preview"
    assert [s["type"] for s in last["input"]] == [
        "user_input", "function_call", "function_call", "function_result", "function_result",
        "function_call", "function_result", "model_output", "user_input",
    ]  # fmt: skip
    fallbacks = session.trace.of_kind(CHAIN_FALLBACK)
    assert [e.data["reason"] for e in fallbacks] == ["model_switch"]


def test_snapshot_restore_sends_the_same_next_request(emulator: GeminiInteractionsEmulator) -> None:
    for store in (False, True):
        emulator.script.extend([*chain(), ModelAction.answer("x", reasoning="r"), ModelAction.answer("x")])
        session = session_on(emulator, store=store)
        run_chain(session, "Paris or Rome?")
        snap = session.snapshot().model_dump_json()
        restored = rs.Session.restore(snap, emulator.client(), adapter=InteractionsAdapter(min_cacheable=32))
        restored.send("Once more?")
        session.send("Once more?")
        assert emulator.requests[-1].body == emulator.requests[-2].body
        restored_default = rs.Session.restore(snap, emulator.client())  # the room from the snapshot's api
        assert restored_default.snapshot().api == "interactions"


def test_the_async_client_streams_and_sends(emulator: GeminiInteractionsEmulator) -> None:
    emulator.script.extend(chain())

    async def main() -> str:
        session = rs.AsyncSession(
            emulator.client().aio,
            model=MODEL,
            api="interactions",
            tools=[WEATHER],
        )
        async with session.stream("Paris or Rome?") as s:
            async for _ in s:
                pass
        reply = s.reply
        while reply.tool_calls:
            reply = await session.send_tool_results({c.id: {"temp_c": 20} for c in reply.tool_calls})
        return reply.text

    assert asyncio.run(main()) == "A: Rome is warmer."


def test_a_lost_interaction_is_its_own_error_and_the_retry_replays(
    emulator: GeminiInteractionsEmulator,
) -> None:
    """§5.6: a ``previous_interaction_id`` the server no longer holds is a 404; the session is unchanged
    and its retry is a full replay (``chain.fallback`` ``expired``)."""
    emulator.script.extend([*chain(), ModelAction.answer("again", reasoning="r")])
    session = session_on(emulator, store=True)
    run_chain(session, "Paris or Rome?")
    emulator.stored.clear()
    before = session.snapshot().model_dump_json()
    with pytest.raises(PreviousInteractionNotFound) as caught:
        session.send("And tomorrow?")
    assert caught.value.status == 404 and caught.value.response_id == "int_emu_003"
    assert session.history == rs.Session.restore(before, emulator.client()).history
    assert session.send("And tomorrow?").text == "again"
    assert "previous_interaction_id" not in bodies(emulator)[-1]
    assert [e.data["reason"] for e in session.trace.of_kind(CHAIN_FALLBACK)] == ["expired"]


def test_a_signature_the_server_cannot_verify_is_its_400_and_changes_nothing() -> None:
    """§5.6: thought signatures are verified by the server that issued them; a transcript carried to
    another organisation's server (another secret) is the vendor's 400 ``Corrupted thought signature.``,
    a :class:`rs.VendorError` with the status and envelope; the session is left as it was."""
    with GeminiInteractionsEmulator(chain()) as first:
        session = session_on(first)
        reply = session.send("Paris or Rome?")
        snap = session.snapshot().model_dump_json()
    with GeminiInteractionsEmulator(chain(), secret="another-organisation") as other:
        moved = rs.Session.restore(snap, other.client(), adapter=InteractionsAdapter(min_cacheable=32))
        before = moved.snapshot().model_dump_json()
        with pytest.raises(rs.VendorError) as caught:
            moved.send_tool_results({c.id: {"temp_c": 20} for c in reply.tool_calls})
        assert caught.value.status == 400 and "Corrupted thought signature." in str(caught.value)
        assert caught.value.body == {
            "code": 400,
            "message": "Corrupted thought signature.",
            "status": "INVALID_ARGUMENT",
        }
        after = json.loads(moved.snapshot().model_dump_json())
        assert after["history"] == json.loads(before)["history"]
        assert other.script.taken == 0


# -- the emulator's strictness, with hand-written bodies (§5.6) ---------------------------------------------


def post(emu: GeminiInteractionsEmulator, body: Any, key: str | None = "test-key") -> httpx2.Response:
    headers = {"x-goog-api-key": key} if key else {}
    return httpx2.post(f"{emu.base_url}/v1/interactions", json=body, headers=headers, trust_env=False)


def test_the_emulator_refuses_what_the_vendor_refuses(emulator: GeminiInteractionsEmulator) -> None:
    emulator.script.extend(
        [
            ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="r"),
            ModelAction.answer("ok"),
        ]
    )
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    assert post(emulator, {"model": MODEL, "input": "hi"}, key=None).status_code == 403
    unknown = post(emulator, {"model": MODEL, "input": "hi", "temperature": 1})
    assert unknown.status_code == 400
    assert unknown.json() == {
        "error": {
            "code": 400,
            "message": 'Invalid JSON payload received. Unknown name "temperature": Cannot find field.',
            "status": "INVALID_ARGUMENT",
        }
    }
    user = {"type": "user_input", "content": [{"type": "text", "text": "Paris?"}]}
    step_field = post(emulator, {"model": MODEL, "input": [{**user, "role": "user"}]})
    assert step_field.status_code == 400
    assert "Unknown name \"role\" at 'input[0]'" in step_field.json()["error"]["message"]
    ok = post(emulator, {"model": MODEL, "input": [user], "tools": tools, "store": True})
    assert ok.status_code == 200
    answer = ok.json()
    thought, call = answer["steps"]
    assert thought["type"] == "thought" and call["type"] == "function_call"
    result = {"type": "function_result", "call_id": call["id"], "result": "20C"}

    tampered = {**thought, "signature": thought["signature"][:-4] + "AAA="}
    bad = post(emulator, {"model": MODEL, "input": [user, tampered, call, result], "tools": tools})
    assert (bad.status_code, bad.json()["error"]["message"]) == (400, "Corrupted thought signature.")
    other_model = post(
        emulator, {"model": "gemini-3.1-pro-preview", "input": [user, thought, call, result], "tools": tools}
    )
    assert other_model.status_code == 400  # a signature is bound to the model that made it
    missing = post(emulator, {"model": MODEL, "input": [user, call, result], "tools": tools})
    assert missing.status_code == 400
    assert "Function call is missing a thought_signature" in missing.json()["error"]["message"]
    orphan = post(emulator, {"model": MODEL, "input": [user, result], "tools": tools})
    assert orphan.status_code == 400

    gone = post(emulator, {"model": MODEL, "input": [result], "previous_interaction_id": "int_nope"})
    assert (gone.status_code, gone.json()["error"]["status"]) == (404, "NOT_FOUND")
    foreign = post(
        emulator,
        {"model": "gemini-3.1-pro-preview", "input": [result], "previous_interaction_id": answer["id"]},
    )
    assert (foreign.status_code, foreign.json()["error"]["status"]) == (400, "INVALID_ARGUMENT")
    content = post(emulator, {"model": MODEL, "input": {"type": "text", "text": "hi"}})  # one user turn
    assert content.status_code == 200 and content.json()["steps"][-1]["type"] == "model_output"
    assert emulator.script.taken == 2  # nothing refused consumed the script


# -- switching to and from the Interactions API (§0: nothing opaque crosses) --------------------------------


def _family(name: str, stack: ExitStack) -> tuple[Any, Any, str, dict[str, Any], dict[str, Any]]:
    """``(emulator, client, model, options, switch routing)`` of one API family."""
    if name == "interactions":
        emu: Any = stack.enter_context(GeminiInteractionsEmulator())
        return emu, emu.client(), "gemini-3-flash", {}, {"api": "interactions"}
    if name == "gemini":
        emu = stack.enter_context(GeminiEmulator())
        return emu, emu.client(), "gemini-3-flash", {"thinking_config": {"include_thoughts": True}}, {}
    if name == "anthropic":
        emu = stack.enter_context(AnthropicEmulator())
        options = {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}
        return emu, emu.client(max_retries=0), "claude-sonnet-4-6", options, {}
    emu = stack.enter_context(OpenAIResponsesEmulator())
    options = {"reasoning": {"effort": "medium", "summary": "auto"}}
    return emu, emu.client(max_retries=0), "gpt-5.5", options, {}


def _secrets(session: rs.Session) -> list[str]:
    """Every opaque string the session holds: signatures, encrypted content, interaction ids (a
    generateContent response id is no continuation: calls without an id are named after it)."""
    out = [
        s.response_id
        for t in session.history.turns
        for s in t.steps
        if s.response_id and s.continuation and s.continuation[0].api == "interactions"
    ]
    for c in session.continuation:
        value = json.loads(c.payload)
        if isinstance(value, dict):
            for key in ("signature", "thoughtSignature", "encrypted_content", "data"):
                if isinstance(value.get(key), str) and len(value[key]) >= 8:
                    out.append(value[key])
            if c.kind == "reasoning" and isinstance(value.get("id"), str):
                out.append(value["id"])
    return out


_OTHERS = ("gemini", "anthropic", "responses")
SWITCHES = [*(("interactions", o) for o in _OTHERS), *((o, "interactions") for o in _OTHERS)]


@pytest.mark.parametrize(("first", "second"), SWITCHES, ids=[f"{a}-to-{b}" for a, b in SWITCHES])
def test_switching_to_and_from_interactions_sends_no_foreign_byte(first: str, second: str) -> None:
    """Pain points: openclaw/openclaw#120596, CommonstackAI/UncommonRoute#19 (another API's signature sent
    after a switch). Between generateContent and Interactions the model is the same: the API binds."""
    with ExitStack() as stack:
        emu_a, client_a, model_a, options_a, _ = _family(first, stack)
        emu_b, client_b, model_b, options_b, routing_b = _family(second, stack)
        routing_a = {"api": "interactions"} if first == "interactions" else {}
        store = {"store": True} if first == "interactions" else {}
        emu_a.script.extend(chain("A"))
        emu_b.script.extend([*chain("B"), *[ModelAction.answer("B: again.", reasoning="r")] * 2])
        session = rs.Session(
            client_a, model=model_a, system=SYSTEM, tools=[WEATHER], **routing_a, **options_a, **store
        )
        assert run_chain(session, "Paris or Rome?").text == "A: Rome is warmer."
        secrets = _secrets(session)
        assert len(secrets) >= 3, "the first API left opaque continuation to protect"
        session.switch(client_b, model=model_b, **routing_b, **options_b)
        assert run_chain(session, "And tomorrow?").text == "B: Rome is warmer."  # no 400 on the way
        sent = [r.body.decode() for r in emu_b.requests]
        assert len(sent) == 3
        for text in sent:
            assert not [s for s in secrets if s in text], "a foreign payload byte reached the new API"
            assert "Paris or Rome?" in text and "A: Rome is warmer." in text
        assert session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)
        snap = session.snapshot().model_dump_json()
        restored = rs.Session.restore(snap, client_b)
        restored.send("Once more?")
        session.send("Once more?")
        assert emu_b.requests[-1].body == emu_b.requests[-2].body  # byte-identical after restore


# -- the guard on a plain client (§5.6: chaining by id is not a divergence) -------------------------------

_TOOLS = [{"type": "function", "name": "get_weather", "description": "w", "parameters": {"type": "object"}}]
_USER = {"type": "user_input", "content": [{"type": "text", "text": "Paris?"}]}
_NEXT = {"type": "user_input", "content": [{"type": "text", "text": "And tomorrow?"}]}


def _plain_loop(client: Any, *, store: bool, drop: bool = False, stream: bool = False) -> None:
    """An agent's own loop on ``client.interactions.create``: stateless (the steps sent back as dumped by
    the SDK) or chained by ``previous_interaction_id``."""
    common = {"model": MODEL, "tools": _TOOLS, "system_instruction": SYSTEM * 20, "store": store}
    common["automatic_continuation"] = False
    first = client.interactions.create(input=[_USER], **common)
    steps = [s.model_dump(exclude_none=True) for s in first.steps]
    result = {"type": "function_result", "call_id": steps[-1]["id"], "result": "18C"}
    if store:
        second = client.interactions.create(input=[result], previous_interaction_id=first.id, **common)
        client.interactions.create(input=[_NEXT], previous_interaction_id=second.id, **common)
        return
    history = [_USER, *(s for s in steps if not (drop and s["type"] == "thought")), result]
    if stream:
        for _ in client.interactions.create(input=history, stream=True, **common):
            pass
        answer = [{"type": "model_output", "content": [{"type": "text", "text": "A: ok."}]}]
    else:
        second = client.interactions.create(input=history, **common)
        answer = [s.model_dump(exclude_none=True) for s in second.steps]
    client.interactions.create(input=[*history, *answer, _NEXT], **common)


@pytest.mark.parametrize(
    ("store", "stream"),
    [(False, False), (False, True), (True, False)],
    ids=["stateless", "streamed", "chained"],
)
def test_the_guard_predicts_every_read_and_sees_no_break_in_a_chain_by_id(store: bool, stream: bool) -> None:
    import attrs

    from reasonstate.adapters.gemini_interactions import INTERACTIONS

    script = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="r1"),
        ModelAction.answer("A: ok.", reasoning="r2"),
        ModelAction.answer("A: again.", reasoning="r3"),
    ]
    with GeminiInteractionsEmulator(script, cache_min_tokens=32) as emu:
        client = emu.client()
        guard = rs.instrument(client, cache=attrs.evolve(INTERACTIONS, min_tokens=32, min_tokens_by_model=()))
        _plain_loop(client, store=store, stream=stream)
        records = guard.records
    assert [r.api for r in records] == ["interactions"] * 3
    assert [r.streamed for r in records] == [False, stream, False]
    for record in records:
        assert record.divergence is None and record.warnings == (), record
        assert record.predicted_cache_read == record.reported_cache_read
    assert records[2].reported_cache_read is not None and records[2].reported_cache_read > 0


def test_the_guard_reports_a_thought_step_left_out() -> None:
    """Pain point: frameworks that rebuild a transcript without the reasoning (LiteLLM 1.110 on Gemini):
    inside the chain the emulator refuses it and the guard names what was lost."""
    script = [ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="r1")]
    with GeminiInteractionsEmulator(script) as emu:
        client = emu.client()
        guard = rs.instrument(client)
        with pytest.raises(Exception, match="thought_signature"):
            _plain_loop(client, store=False, drop=True)
        records = guard.records
    assert records[1].status == 400
    lost = [w for w in records[1].warnings if w.kind == "continuation_lost"]
    assert len(lost) == 1 and lost[0].path == "$.input[1]" and "sha256:" in lost[0].detail


def test_the_demo_row_chains_by_id_and_predicts_every_read() -> None:
    """The demo's Interactions row (reasonstate.demo.job): Keep chains every request after the first by
    ``previous_interaction_id`` and sends the fewest bytes; every knowable cache read is predicted."""
    from reasonstate.demo import job

    vendor = next(v for v in job.VENDORS if v.key == "interactions")
    table, stats = job.vendor_table(vendor, live=False)
    keep, drop, last = stats
    assert [s.protocol_errors for s in stats] == [0, 0, 0]
    assert all(s.matches == s.requests - s.unknown for s in stats)
    assert keep.unknown == 0 and keep.sent_bytes < min(drop.sent_bytes, last.sent_bytes)
    assert keep.cache_share > drop.cache_share > 0
    assert "previous_interaction_id" in table.reading[0] and "chain.fallback" in table.reading[0]


def test_mend_puts_the_thought_step_back_and_the_chain_goes_through() -> None:
    """The same framework loop under ``rs.instrument(client, mend=True)``: the thought step the loop left
    out goes back, as it came, before its call; the emulator accepts the chain."""
    script = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="r1"),
        ModelAction.answer("A: ok.", reasoning="r2"),
        ModelAction.answer("A: again.", reasoning="r3"),
    ]
    with GeminiInteractionsEmulator(script) as emu:
        client = emu.client()
        guard = rs.instrument(client, mend=True)
        _plain_loop(client, store=False, drop=True)
        records = guard.records
        first = json.loads(emu.requests[0].body)
        sent = json.loads(emu.requests[1].body)["input"]
    assert [r.status for r in records] == [200, 200, 200]
    assert [w.kind for w in records[1].warnings] == ["continuation_lost", "mended"]
    assert [s["type"] for s in sent] == ["user_input", "thought", "function_call", "function_result"]
    assert first["store"] is False and sent[1]["summary"] == [{"type": "text", "text": "r1"}]


def test_a_stored_session_loads_onto_the_interactions_room(tmp_path: Any) -> None:
    """``Session.load`` rebuilds an Interactions session from the embedded store (the room from the
    stored API, not google-genai's default generateContent) and sends what the writer would."""
    from reasonstate.store import SQLiteStore

    store = SQLiteStore(str(tmp_path / "sessions.db"))
    with GeminiInteractionsEmulator([*chain(), ModelAction.answer("x"), ModelAction.answer("x")]) as emu:
        writer = rs.Session(
            emu.client(), model=MODEL, api="interactions", tools=[WEATHER], store=store, session_id="s1"
        )
        run_chain(writer, "Paris or Rome?")
        loaded = rs.Session.load(store, "s1", emu.client())
        assert loaded.snapshot().api == "interactions"
        loaded.send("Once more?")
        rs.Session.restore(writer.snapshot().model_dump_json(), emu.client()).send("Once more?")
        assert emu.requests[-1].body == emu.requests[-2].body  # what the writer would send
        body = json.loads(emu.requests[-1].body)
    assert sum(s["type"] == "thought" for s in body["input"]) == 3  # every thought step went back


def test_reasonstate_diff_tells_an_interactions_body_from_a_responses_one() -> None:
    from reasonstate.recordings import api_of_body

    assert api_of_body({"model": MODEL, "input": [_USER], "store": False}) == "interactions"
    assert api_of_body({"model": MODEL, "input": "hi", "previous_interaction_id": "int_1"}) == "interactions"
    assert api_of_body({"model": "gpt-5.5", "input": [{"role": "user", "content": "hi"}]}) == "responses"


def test_reasonstate_emulate_gemini_serves_the_interactions_api_too() -> None:
    """``reasonstate emulate gemini``: one server, both Google APIs; its default responder reads an
    Interactions body (tools, the user's text, function results)."""
    from reasonstate.testing.standalone import build_emulator, environment

    with build_emulator("gemini") as emu:
        from google import genai
        from google.genai import types

        env = environment("gemini", emu.base_url)
        client = genai.Client(
            api_key=env["GEMINI_API_KEY"],
            http_options=types.HttpOptions(
                base_url=env["GOOGLE_GEMINI_BASE_URL"], client_args={"trust_env": False}
            ),
        )
        session = rs.Session(client, model=MODEL, api="interactions", tools=[WEATHER])
        reply = session.send("Paris")
        assert [(c.name, c.arguments) for c in reply.tool_calls] == [("get_weather", {})]
        assert (
            session.send_tool_results({reply.tool_calls[0].id: "20C"}).text
            == "Echo: 1 tool result(s) received"
        )
        assert [r.path for r in emu.requests] == ["/v1/interactions", "/v1/interactions"]


# -- Vertex AI serves the Interactions API too (§5.6) ------------------------------------------------------


def test_on_vertex_a_tool_chain_goes_to_the_project_path_bound_to_vertex() -> None:
    """google-genai 3.6.1 sends a Vertex client's ``interactions.create`` to
    ``/v1beta1/projects/P/locations/L/interactions`` with its OAuth token: the session works there as on the
    Gemini API, and every thought step is bound to the Vertex platform (provenance (vertex, interactions,
    model)), so it never goes to the Gemini API's Interactions room with the same model."""
    with (
        GeminiInteractionsEmulator(chain(), cache_min_tokens=32, platform="vertex") as vertex,
        GeminiInteractionsEmulator(chain("B"), cache_min_tokens=32) as gemini,
    ):
        client = vertex.client()
        assert adapter_for(client, api="interactions").platform == "vertex"
        session = rs.Session(client, model=MODEL, api="interactions", system=SYSTEM, tools=[WEATHER])
        assert run_chain(session, "Paris or Rome?").text == "A: Rome is warmer."
        assert [r.path for r in vertex.requests] == [
            "/v1beta1/projects/emulator-project/locations/us-central1/interactions"
        ] * 3
        assert all(r.headers["authorization"] == "Bearer test-key" for r in vertex.requests)
        thoughts = [c for c in session.continuation if c.kind == "thought"]
        assert thoughts and {c.platform for c in thoughts} == {"vertex"}
        sent = bodies(vertex)
        assert sum(s["type"] == "thought" for s in sent[2]["input"]) == 2  # replayed in place, verbatim
        # the same model on the Gemini API: another service, the Vertex signatures stay behind
        session.switch(gemini.client(), model=MODEL, api="interactions")
        assert run_chain(session, "And Oslo?").text == "B: Rome is warmer."
        wire = b"".join(r.body for r in gemini.requests)
        assert not [c for c in thoughts if json.loads(c.payload)["signature"].encode() in wire]
    # a request without the token is Google's 401
    with GeminiInteractionsEmulator(platform="vertex") as vertex:
        response = httpx2.post(
            f"{vertex.base_url}/v1beta1/projects/p/locations/l/interactions",
            json={"model": MODEL, "input": "hi"},
        )
        assert response.status_code == 401
        assert response.json()["error"]["status"] == "UNAUTHENTICATED"
