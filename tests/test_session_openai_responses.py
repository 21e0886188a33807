"""The core on the OpenAI Responses API, end to end: real ``openai`` SDK, real HTTP, the strict emulator.

Each test names the docs/protocols.md §1 rule or the painpoint (painpoints.md section B) it pins down.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import attrs
import openai
import pytest

import reasonstate as rs
from reasonstate.adapters.openai_responses import (
    CHAIN_FALLBACK,
    INPUT_TRANSFORMATIONS,
    REASONING_UNREPLAYABLE,
    OpenAIResponsesAdapter,
    PreviousResponseNotFound,
)
from reasonstate.policies import Drop, Keep, KeepLast
from reasonstate.state import EventKind, OpaquePart, Usage
from reasonstate.testing import Fault, ModelAction, ToolCallSpec
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests._snapshots import payloads, redigest

MODEL = "gpt-5.5"
# long enough that the stable prefix alone passes OpenAI's 1,024-token caching minimum
SYSTEM = "You are a careful travel assistant. Always check the weather first. " * 70
WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = rs.Tool(
    name="get_time",
    description="Local time for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
# unusual spacing and key order: must go back byte for byte, never json.loads -> json.dumps
ODD_ARGS = '{ "city" :  "Paris",\t"units":"C" }'


def chain() -> list[ModelAction]:
    """reasoning → 2 parallel calls (one with odd raw arguments); reasoning → 1 call; reasoning → answer."""
    return [
        ModelAction(
            reasoning="Two cities: call the weather tool for both, in parallel.",
            tool_calls=(
                ToolCallSpec("get_weather", {"city": "Paris", "units": "C"}, raw_arguments=ODD_ARGS),
                ToolCallSpec("get_weather", {"city": "Rome"}),
            ),
        ),
        ModelAction(
            reasoning="Paris is mild. Check the local time in Rome too.",
            tool_calls=(ToolCallSpec("get_time", {"city": "Rome"}),),
        ),
        ModelAction(reasoning="I have everything; Rome is warmer.", text="Rome is warmer than Paris."),
    ]


def answer(i: int) -> ModelAction:
    return ModelAction(reasoning=f"Thinking about follow-up {i}.", text=f"Follow-up answer {i}.")


@pytest.fixture
def emulator() -> Iterator[OpenAIResponsesEmulator]:
    with OpenAIResponsesEmulator() as emu:
        yield emu


def make_session(emulator: OpenAIResponsesEmulator, **kw: Any) -> rs.Session:
    options: dict[str, Any] = {
        "system": SYSTEM,
        "tools": [WEATHER, CLOCK],
        "reasoning": {"effort": "medium", "summary": "auto"},
    }
    options.update(kw)
    return rs.Session(emulator.client(), model=MODEL, **options)


def run_chain(session: rs.Session, question: str = "Paris or Rome: which is warmer?") -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"city": c.arguments.get("city")} for c in reply.tool_calls})
    return reply


def body(emulator: OpenAIResponsesEmulator, i: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(emulator.requests[i].body)
    return data


def types(items: list[dict[str, Any]]) -> list[str]:
    return [str(i.get("type", "message")) for i in items]


def _layers(session: rs.Session) -> tuple[Any, ...]:
    return (session.history, session.continuation, session.execution, session.state)


# -- stateless replay (§1.4 B) ----------------------------------------------------------------------------


def test_every_output_item_of_a_parallel_tool_chain_is_replayed_byte_identical_in_order(
    emulator: OpenAIResponsesEmulator,
) -> None:
    """Pain points: pydantic-ai 2.68 on stubs (tool-call argument strings re-serialized on Responses);
    microsoft/agent-framework#4644 (an unstreamed reasoning item with a summary lost its
    ``encrypted_content``); OpenRouterTeam/ai-sdk-provider PR #472 (#171) (re-stringified tool-call input
    drifted key order across turns)."""
    emulator.script.extend(chain())
    session = make_session(emulator)
    run_chain(session)
    steps = session.history.turns[0].steps
    for k in range(2):
        sent = emulator.requests[k + 1].body
        payloads = [c.payload for c in steps[k].continuation]
        positions = [sent.index(p) for p in payloads]  # each payload byte for byte, in order
        assert positions == sorted(positions)
    first_replay = body(emulator, 1)["input"]
    assert types(first_replay) == [
        "message",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert first_replay[1:4] == [json.loads(c.payload) for c in steps[0].continuation]
    # the unstreamed reasoning item goes back with its summary AND its encrypted content
    reasoning = first_replay[1]
    assert reasoning["summary"][0]["text"] == "Two cities: call the weather tool for both, in parallel."
    assert reasoning["encrypted_content"]
    # the odd arguments string, escaped by the SDK's JSON encoder and nothing else
    assert json.dumps(ODD_ARGS).encode() in emulator.requests[1].body
    assert first_replay[2]["arguments"] == ODD_ARGS
    assert session.history.turns[0].steps[0].tool_calls[0].raw_arguments == ODD_ARGS


def test_tool_outputs_follow_the_models_declared_order_whatever_order_they_are_given_in(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator)
    first, second = session.send("Paris or Rome?").tool_calls
    session.send_tool_results({second.id: {"t": 22, "city": "Rome"}, first.id: {"city": "Paris", "t": 18}})
    outputs = body(emulator, 1)["input"][4:]
    assert outputs == [
        {"type": "function_call_output", "call_id": first.id, "output": '{"city":"Paris","t":18}'},
        {"type": "function_call_output", "call_id": second.id, "output": '{"city":"Rome","t":22}'},
    ]


def test_stateless_requests_ask_for_encrypted_content_and_pass_reasoning_options_through(
    emulator: OpenAIResponsesEmulator,
) -> None:
    """Pain points: openai/openai-agents-python#919 and openai/openai-agents-js#546 (store=False without
    reasoning.encrypted_content: 404)
    and PR #2068 (stored ``rs_`` ids fail under zero data retention behind a load balancer; only
    ``encrypted_content`` is portable)."""
    emulator.script.extend([answer(0)])
    session = make_session(
        emulator, reasoning={"effort": "high", "summary": "detailed", "context": "all_turns"}
    )
    session.send("hi")
    sent = body(emulator, 0)
    assert sent["store"] is False
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert sent["reasoning"] == {"effort": "high", "summary": "detailed", "context": "all_turns"}
    assert sent["instructions"] == SYSTEM
    assert [t["name"] for t in sent["tools"]] == ["get_time", "get_weather"]
    assert sent["prompt_cache_key"] == "rs-" + session.prefix.fingerprint[len("sha256:") :][:32]


def test_prompt_cache_key_is_stable_across_a_prefix_change_and_overridable(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend([answer(0), answer(1), answer(2)])
    session = make_session(emulator)
    session.send("one")
    session.change_prefix(system="A new system prompt.")
    session.send("two")
    assert body(emulator, 0)["prompt_cache_key"] == body(emulator, 1)["prompt_cache_key"]
    make_session(emulator, prompt_cache_key="user-42").send("three")
    assert body(emulator, 2)["prompt_cache_key"] == "user-42"


def test_keep_is_append_only_across_turns(emulator: OpenAIResponsesEmulator) -> None:
    emulator.script.extend([*chain(), answer(1), answer(2)])
    session = make_session(emulator, policy=Keep())
    run_chain(session)
    session.send("And tomorrow?")
    session.send("And next week?")
    for i in range(1, len(emulator.requests)):
        before, after = body(emulator, i - 1)["input"], body(emulator, i)["input"]
        assert after[: len(before)] == before
    assert all(r.divergence is None for r in session.execution)


# -- pairing under policies (§1.4 B.1/B.2; vercel/ai c883c47, pydantic-ai thinking.md) -------------------


def test_drop_replays_the_closed_turns_items_id_less_so_no_item_lacks_its_reasoning(
    emulator: OpenAIResponsesEmulator,
) -> None:
    """Pain point: vercel/ai@c883c47 (pruned reasoning leaves msg_/fc_ items without their reasoning item)."""
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator, policy=Drop())
    run_chain(session)
    session.send("And tomorrow?")  # the emulator answers 400 to any fc_/msg_ id without its rs_ item
    turn0 = body(emulator, 3)["input"][:8]
    assert "reasoning" not in types(turn0)
    calls = [i for i in turn0 if i.get("type") == "function_call"]
    assert [sorted(c) for c in calls] == [["arguments", "call_id", "name", "status", "type"]] * 3
    assert [c["call_id"] for c in calls] == ["call_emu_001", "call_emu_002", "call_emu_003"]
    assert calls[0]["arguments"] == ODD_ARGS
    final = turn0[-1]
    assert final == {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "output_text", "text": "Rome is warmer than Paris.", "annotations": [], "logprobs": []}
        ],
    }


def test_the_same_drop_with_item_ids_kept_is_what_the_vendor_rejects(
    emulator: OpenAIResponsesEmulator,
) -> None:
    """Pain point: vercel/ai@c883c47 (pruned reasoning leaves msg_/fc_ items without their reasoning item)."""
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator, policy=Keep())
    run_chain(session)
    naive = [i for i in session.next_request("And tomorrow?").kwargs["input"] if i.get("type") != "reasoning"]
    with emulator.client() as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input=naive, store=False)
    assert "was provided without its required 'reasoning' item: 'rs_emu_001'" in str(info.value)


def test_keep_last_compaction_stays_pairable_and_is_traced(emulator: OpenAIResponsesEmulator) -> None:
    emulator.script.extend([*chain(), answer(1), answer(2)])
    session = make_session(emulator, policy=KeepLast(1))
    run_chain(session)
    session.send("And tomorrow?")
    session.send("And next week?")  # turn 0 compacted when turn 1 closed
    turn0 = body(emulator, 4)["input"][:8]
    assert "reasoning" not in types(turn0) and all("id" not in i for i in turn0)
    assert "reasoning" in types(body(emulator, 4)["input"][8:])


def test_reasoning_with_nothing_after_it_is_never_replayed(emulator: OpenAIResponsesEmulator) -> None:
    """Pain point: pydantic/pydantic-ai thinking.md (reasoning item without its required following item)."""
    # docs/protocols.md §1.4 B.6: a truncated output holding only a reasoning item cannot be replayed
    emulator.script.extend([ModelAction(reasoning="cut short", stop="max_tokens"), answer(1)])
    session = make_session(emulator)
    reply = session.send("hi")
    assert reply.stop_reason == "max_output_tokens" and reply.text == ""
    session.send("try again")
    assert types(body(emulator, 1)["input"]) == ["message", "message"]


def test_reasoning_from_another_model_is_withheld_and_its_items_go_id_less(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator)
    run_chain(session)
    session.switch_model("gpt-5.6")
    session.send("And tomorrow?")  # a blob sent to another model would be 400 invalid_encrypted_content
    sent = body(emulator, 3)
    assert sent["model"] == "gpt-5.6"
    assert "reasoning" not in types(sent["input"])
    assert all("id" not in i for i in sent["input"])
    withheld = session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)[0].data
    assert withheld["count"] == 3 and withheld["models"] == [MODEL]


# -- stateful mode (§1.4 A) ----------------------------------------------------------------------------


def test_stateful_chaining_sends_only_new_items_and_the_previous_response_id(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator, store=True)
    run_chain(session)
    session.send("And tomorrow?")
    sent = [body(emulator, i) for i in range(4)]
    assert "previous_response_id" not in sent[0]
    assert [s.get("previous_response_id") for s in sent[1:]] == [
        "resp_emu_001",
        "resp_emu_002",
        "resp_emu_003",
    ]
    assert types(sent[1]["input"]) == ["function_call_output", "function_call_output"]
    assert types(sent[2]["input"]) == ["function_call_output"]
    assert sent[3]["input"] == [{"role": "user", "content": "And tomorrow?"}]
    assert all(s["store"] is True and s["instructions"] == SYSTEM for s in sent)
    assert session.trace.of_kind(CHAIN_FALLBACK) == []


def test_a_restored_stateful_session_continues_the_stored_chain_byte_identically(
    emulator: OpenAIResponsesEmulator,
) -> None:
    # whether a response is stored is part of the history (and so of the snapshot): a restored session
    # refers to it by id exactly as the original would have; a server that lost it answers 404 (below)
    emulator.script.extend([*chain()[:1], *chain()[1:2], answer(9)])
    session = make_session(emulator, store=True)
    reply = session.send("Paris or Rome?")
    results = {c.id: "ok" for c in reply.tool_calls}
    expected = session.next_request(results=results).kwargs
    snap = rs.SessionSnapshot.model_validate_json(session.snapshot().model_dump_json())
    restored = rs.Session.restore(snap, emulator.client())
    assert restored.next_request(results=results).kwargs == expected
    reply = restored.send_tool_results(results)
    sent = body(emulator, 1)
    assert sent["previous_response_id"] == "resp_emu_001"
    assert types(sent["input"]) == ["function_call_output", "function_call_output"]
    assert restored.trace.of_kind(CHAIN_FALLBACK) == []
    restored.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    assert body(emulator, 2)["previous_response_id"] == "resp_emu_002"


def test_stateful_drop_falls_back_because_the_server_chain_still_holds_the_reasoning(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend([*chain(), answer(1)])
    session = make_session(emulator, store=True, policy=Drop())
    run_chain(session)
    session.send("And tomorrow?")
    assert "previous_response_id" not in body(emulator, 3)
    assert "reasoning" not in types(body(emulator, 3)["input"])
    assert session.trace.of_kind(CHAIN_FALLBACK)[0].data["reason"] == "history_rewritten"


def test_an_expired_previous_response_is_a_typed_404_and_the_retry_replays_in_full(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator, store=True)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    emulator.expire()
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(PreviousResponseNotFound) as info:
        session.send_tool_results(results)
    assert info.value.status == 404 and isinstance(info.value.__cause__, openai.NotFoundError)
    assert "Previous response with id 'resp_emu_001' not found." in str(info.value)
    assert _layers(session) == before
    session.send_tool_results(results)
    assert "previous_response_id" not in body(emulator, 2)
    assert session.trace.of_kind(CHAIN_FALLBACK)[0].data["reason"] == "expired"


# -- cache prediction (§1.5) -----------------------------------------------------------------------------


@pytest.mark.parametrize("store", [False, True], ids=["stateless", "stateful"])
def test_emulator_cached_tokens_equal_the_sdk_prediction_on_every_request(
    emulator: OpenAIResponsesEmulator, store: bool
) -> None:
    emulator.script.extend([*chain(), answer(1), *chain(), answer(2)])
    session = make_session(emulator, store=store)
    run_chain(session)
    session.send("follow-up")
    run_chain(session, "and again?")
    session.send("last")
    predicted = [r.predicted_cache_read for r in session.execution]
    reported = [r.usage.cache_read for r in session.execution]
    assert predicted == reported
    assert reported[0] == 0 and all(r >= 1024 and r % 128 == 0 for r in reported[1:])
    assert session.report().predicted_matches == 8


def test_after_a_policy_rewrite_only_the_breaking_request_is_unpredictable(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend([*chain(), answer(1), answer(2)])
    session = make_session(emulator, policy=Drop())
    run_chain(session)
    session.send("And tomorrow?")
    session.send("And next week?")
    predicted = [r.predicted_cache_read for r in session.execution]
    reported = [r.usage.cache_read for r in session.execution]
    assert predicted[3] is None  # the dropped reasoning item may match partially: unknowable
    assert [p for i, p in enumerate(predicted) if i != 3] == [r for i, r in enumerate(reported) if i != 3]


def test_usage_is_normalized_with_cached_tokens_disjoint(emulator: OpenAIResponsesEmulator) -> None:
    """Pain point: BerriAI/litellm#35127 (the cached tokens of a Responses usage dropped)."""
    emulator.script.extend([answer(0), answer(1)])
    session = make_session(emulator)
    session.send("hi")
    session.send("again")
    # reported: input_tokens 1406 (cached_tokens 1280, cache_write_tokens 0), output_tokens 12, of which
    # reasoning_tokens 7 ("Thinking about follow-up 1." = 27 bytes)
    assert session.execution[1].usage == Usage(
        uncached_input=126, cache_read=1280, cache_write=0, output=12, reasoning=7
    )
    assert session.execution[1].usage.prompt_tokens == 1406


# -- streaming (§1.6) ------------------------------------------------------------------------------------


def _state(session: rs.Session) -> list[Any]:
    """Payloads (encrypted_content carries a random nonce: masked), parts, usage and stop reasons."""
    masked = [
        json.dumps({k: "-" if k == "encrypted_content" else v for k, v in json.loads(c.payload).items()})
        for c in session.continuation
    ]
    steps = [(s.parts, s.usage, s.stop_reason, s.response_id) for t in session.history.turns for s in t.steps]
    return [masked, steps]


def test_streamed_and_non_streamed_runs_produce_identical_state() -> None:
    """Pain point: microsoft/agent-framework#4852 (streamed reasoning loses its rs_ id)."""
    states = []
    for stream in (False, True):
        with OpenAIResponsesEmulator([*chain(), answer(1)], secret=b"same") as emu:
            session = make_session(emu, stream=stream)
            run_chain(session)
            session.send("And tomorrow?")
            states.append(_state(session))
            # the full blob came from response.output_item.done, not the partial output_item.added copy
            blob = json.loads(session.continuation[0].payload)["encrypted_content"]
            assert emu.verify_encrypted_content(blob, model=MODEL, item_id="rs_emu_001")
    assert states[0] == states[1]


def test_a_truncated_stream_is_a_typed_error_and_a_retry_sends_the_same_bytes(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator, stream=True)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    emulator.inject(Fault.truncate_stream(after_events=5))
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(rs.StreamInterrupted):
        session.send_tool_results(results)
    assert _layers(session) == before
    session.send_tool_results(results)
    assert emulator.requests[-1].body == emulator.requests[-2].body


# -- vendor errors and bad input -------------------------------------------------------------------------


def test_tampered_encrypted_content_is_the_vendors_400_as_a_typed_error_and_changes_nothing(
    emulator: OpenAIResponsesEmulator,
) -> None:
    """Pain point: OpenHands/software-agent-sdk#1242 ("encrypted content ... could not be verified")."""
    # OpenHands/software-agent-sdk#1242: "The encrypted content ... could not be verified"
    emulator.script.extend(chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    snap = json.loads(session.snapshot().model_dump_json())
    value = payloads(snap, 0)[0]
    value["encrypted_content"] = value["encrypted_content"][:-6] + "AAAAA="
    redigest(snap)
    tampered = rs.Session.restore(rs.SessionSnapshot.model_validate(snap).sealed(), emulator.client())
    before = _layers(tampered)
    with pytest.raises(rs.VendorError) as info:
        tampered.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    assert info.value.status == 400 and isinstance(info.value.__cause__, openai.BadRequestError)
    assert "could not be verified" in str(info.value)
    assert _layers(tampered) == before
    assert tampered.trace.events[-1].kind == EventKind.CALL_FAILED


@pytest.mark.parametrize(
    "fault",
    [OpenAIResponsesEmulator.rate_limited(), OpenAIResponsesEmulator.server_error(), Fault.drop_connection()],
    ids=["429", "500", "dropped"],
)
def test_vendor_failures_are_typed_and_a_retry_sends_the_same_bytes(
    emulator: OpenAIResponsesEmulator, fault: Fault
) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    emulator.inject(fault)
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(rs.VendorError) as info:
        session.send_tool_results(results)
    assert isinstance(info.value.__cause__, openai.APIError)
    assert _layers(session) == before
    session.send_tool_results(results)
    assert emulator.requests[-1].body == emulator.requests[-2].body


def test_malformed_vendor_json_is_a_typed_error_and_changes_nothing(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend([answer(0)])
    session = make_session(emulator)
    emulator.inject(Fault.raw(200, b'{"id": "resp_1", "output": [{"type": "reas'))
    with pytest.raises(rs.MalformedResponse):
        session.send("hello")
    assert len(session.history) == 0 and session.execution == ()
    session.send("hello")
    assert emulator.requests[0].body == emulator.requests[1].body


def test_an_unknown_output_item_type_is_kept_verbatim_never_dropped_and_replayed(
    emulator: OpenAIResponsesEmulator,
) -> None:
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search"}}

    def add_item(response: dict[str, Any]) -> dict[str, Any]:
        if any(o["type"] == "function_call" for o in response["output"]):
            response["output"].append(search)
        return response

    emulator.transform = add_item
    emulator.script.extend([*chain()[:1], ModelAction(reasoning="ok", text="Done."), answer(1)])
    session = make_session(emulator, policy=Drop())
    reply = session.send("Paris or Rome?")
    step = session.history.turns[0].steps[0]
    assert step.parts[3] == OpaquePart(type="web_search_call", continuation=3)
    session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    assert body(emulator, 1)["input"][4] == search
    session.send("And tomorrow?")
    # Drop is clamped for the step holding it: the unknown item and its step's reasoning stay
    assert types(body(emulator, 2)["input"][:7]) == [
        "message",
        "reasoning",
        "function_call",
        "function_call",
        "web_search_call",
        "function_call_output",
        "function_call_output",
    ]
    clamped = session.trace.of_kind(EventKind.POLICY_CLAMPED)[0].data
    assert clamped["reasons"] == [
        "step 0: items of unknown type ['web_search_call'] may need their reasoning item"
    ]


def test_tool_results_for_unknown_call_ids_are_refused_and_change_nothing(
    emulator: OpenAIResponsesEmulator,
) -> None:
    emulator.script.extend(chain())
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    before = _layers(session)
    with pytest.raises(rs.ToolResultError, match="unknown tool call ids"):
        session.send_tool_results({"call_nope": "x", **{c.id: "ok" for c in reply.tool_calls}})
    assert _layers(session) == before and len(emulator.requests) == 1


def test_a_response_without_encrypted_content_does_not_wedge_a_stateless_session(
    emulator: OpenAIResponsesEmulator,
) -> None:
    """Pain point: openai/openai-agents-python#919 (reasoning item without its blob: 404 after)."""

    # openai/openai-agents-python#919: a reasoning item without its blob is a 404 on every later request
    def strip_blob(response: dict[str, Any]) -> dict[str, Any]:
        for item in response["output"]:
            item.pop("encrypted_content", None)
        return response

    emulator.transform = strip_blob
    emulator.script.extend(chain()[:2])
    session = make_session(emulator)
    reply = session.send("Paris or Rome?")
    session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    sent = body(emulator, 1)["input"]
    assert "reasoning" not in types(sent) and all("id" not in i for i in sent)
    event = session.trace.of_kind(REASONING_UNREPLAYABLE)[0].data
    assert event["items"] == ["rs_emu_001"]


def test_input_transformations_from_the_response_are_traced(emulator: OpenAIResponsesEmulator) -> None:
    withheld = [{"id": "rs_emu_001", "type": "reasoning", "action": "removed", "reason": "turn_boundary"}]

    def report(response: dict[str, Any]) -> dict[str, Any]:
        if response["id"] == "resp_emu_002":
            response["input_transformations"] = withheld
        return response

    emulator.transform = report
    emulator.script.extend([answer(0), answer(1)])
    session = make_session(emulator)
    session.send("hi")
    session.send("again")
    events = session.trace.of_kind(INPUT_TRANSFORMATIONS)
    assert [e.data for e in events] == [{"response_id": "resp_emu_002", "items": withheld}]


# -- snapshots, async -----------------------------------------------------------------------------------


def test_snapshot_to_json_and_restore_gives_a_byte_identical_next_request() -> None:
    with OpenAIResponsesEmulator([*chain()[:1], answer(9), answer(9)], secret=b"s") as emu:
        session = make_session(emu, policy=KeepLast(2))
        reply = session.send("Paris or Rome?")
        text = session.snapshot().model_dump_json()
        restored = rs.Session.restore(rs.SessionSnapshot.model_validate_json(text), emu.client())
        assert restored.history == session.history and restored.execution == session.execution
        results = {c.id: {"ok": True} for c in reply.tool_calls}
        session.send_tool_results(results)
        restored.send_tool_results(results)
        assert emu.requests[-1].body == emu.requests[-2].body


def test_openai_clients_get_this_adapter() -> None:
    with OpenAIResponsesEmulator() as emu:
        assert isinstance(rs.Session(emu.client(), model=MODEL)._adapter, OpenAIResponsesAdapter)


def test_async_session_runs_a_streamed_stateful_tool_chain(emulator: OpenAIResponsesEmulator) -> None:
    emulator.script.extend(chain())

    async def main() -> rs.AsyncSession:
        client = emulator.async_client()
        session = rs.AsyncSession(
            client, model=MODEL, system="s", tools=[WEATHER, CLOCK], stream=True, store=True
        )
        reply = await session.send("Paris or Rome?")
        while reply.tool_calls:
            reply = await session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
        await client.close()
        return session

    session = asyncio.run(main())
    assert session.state is rs.TurnState.IDLE
    assert session.history.turns[0].final_text == "Rome is warmer than Paris."
    assert [len(s.continuation) for s in session.history.turns[0].steps] == [3, 2, 2]
    assert body(emulator, 2)["previous_response_id"] == "resp_emu_002"


# -- what models really send ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_arguments_that_are_not_a_json_object_are_kept_raw_replayed_and_never_executed(
    emulator: OpenAIResponsesEmulator, stream: bool
) -> None:
    broken = '{"city": "Paris", '  # cut mid-object
    emulator.script.extend(
        [
            ModelAction(
                reasoning="Weather first.", tool_calls=(ToolCallSpec("get_weather", raw_arguments=broken),)
            ),
            answer(1),
        ]
    )
    ran: list[Any] = []
    weather = attrs.evolve(WEATHER, handler=lambda **kw: ran.append(kw) or "sunny")
    session = make_session(emulator, tools=[weather, CLOCK], stream=stream)
    reply = session.run("Paris?")
    assert reply.text == "Follow-up answer 1." and ran == []
    call = session.history.turns[0].steps[0].tool_calls[0]
    assert (call.arguments, call.raw_arguments) == (None, broken)
    expected = "arguments are not valid JSON: Expecting property name enclosed in double quotes (char 18)"
    assert call.arguments_error == expected
    replayed = [i for i in body(emulator, 1)["input"] if i.get("type") == "function_call"]
    assert replayed[0]["arguments"] == broken  # byte for byte
    output = [i for i in body(emulator, 1)["input"] if i.get("type") == "function_call_output"]
    assert output == [
        {
            "type": "function_call_output",
            "call_id": call.id,
            "output": f"invalid arguments for 'get_weather': {call.arguments_error}",
        }
    ]
