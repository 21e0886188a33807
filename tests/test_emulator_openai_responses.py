"""The OpenAI Responses emulator, driven by the real ``openai`` SDK over real HTTP (docs/protocols.md §1)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from reasonstate.testing import Fault, ModelAction, ToolCallSpec
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

MODEL = "gpt-5.5"
ENC = ["reasoning.encrypted_content"]
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "w",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True,
    }
]
WEATHER = ToolCallSpec("get_weather", {"city": "Paris"})


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


def _tool_turn(emu: OpenAIResponsesEmulator, client: openai.OpenAI, **kw: Any) -> Any:
    """One stateless call that returns [reasoning, function_call]."""
    emu.script.extend([ModelAction.call(WEATHER, reasoning="Need the weather tool.")])
    return client.responses.create(
        model=MODEL, input="Weather in Paris?", tools=TOOLS, include=ENC, store=False, **kw
    )


def _message(error: openai.APIStatusError) -> str:
    """The vendor's own text: the SDK prefixes ``str(error)`` with the status, ``body`` is the inner error."""
    assert isinstance(error.body, dict)
    return str(error.body["message"])


def _output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": '{"temp_c":18}'}


USER = {"role": "user", "content": "Weather in Paris?"}


# -- output shape and round trip ----------------------------------------------------------------------


def test_tool_call_output_is_reasoning_then_function_call(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    r = _tool_turn(emu, client)
    assert r.id == "resp_emu_001"
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    rs, fc = r.output
    assert rs.id == "rs_emu_001"
    assert [s.text for s in rs.summary] == ["Need the weather tool."]
    assert rs.encrypted_content is not None and rs.encrypted_content.startswith("gAAAAAB")
    assert emu.verify_encrypted_content(rs.encrypted_content, model=MODEL, item_id="rs_emu_001")
    assert (fc.id, fc.call_id, fc.name, fc.arguments) == (
        "fc_emu_001",
        "call_emu_001",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert r.status == "completed"
    assert r.input_transformations == []


def test_encrypted_content_only_when_included(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r")])
    r = client.responses.create(model=MODEL, input="hi", tools=TOOLS)
    assert r.output[0].type == "reasoning"
    assert r.output[0].encrypted_content is None


def test_dumped_output_replays_and_blob_goes_back_byte_identical(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    r = _tool_turn(emu, client)
    emu.script.extend([ModelAction.answer("18 °C in Paris.", reasoning="Got it.")])
    r2 = client.responses.create(
        model=MODEL, input=[USER, *_dump(r), _output("call_emu_001")], tools=TOOLS, include=ENC, store=False
    )
    assert r2.output_text == "18 °C in Paris."
    sent = emu.requests[-1].json()["input"]
    assert sent[1]["encrypted_content"] == r.output[0].encrypted_content
    assert sent[2]["arguments"] == '{"city":"Paris"}'


def test_raw_arguments_are_emitted_verbatim(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    raw = '{ "city" : "Paris",  "unit":"C" }'
    emu.script.extend([ModelAction.call(ToolCallSpec("get_weather", raw_arguments=raw))])
    r = client.responses.create(model=MODEL, input="hi", tools=TOOLS)
    assert r.output[1].arguments == raw


def test_answer_emits_reasoning_then_message(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.answer("Hello.", reasoning="Greet.")])
    r = client.responses.create(model=MODEL, input="hi")
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[1].id == "msg_emu_001"
    assert r.output_text == "Hello."


def test_effort_none_emits_no_reasoning_item(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.answer("Hello.", reasoning="hidden")])
    r = client.responses.create(model=MODEL, input="hi", reasoning={"effort": "none"})
    assert [o.type for o in r.output] == ["message"]
    assert r.usage is not None and r.usage.output_tokens_details.reasoning_tokens == 0


def test_max_tokens_stop_gives_incomplete_response(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction(reasoning="long", text="partial", stop="max_tokens")])
    r = client.responses.create(model=MODEL, input="hi")
    assert r.status == "incomplete"
    assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[-1].status == "incomplete"


def test_reasoning_context_echo_is_the_effective_value(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")])
    old = client.responses.create(model="gpt-5.5", input="hi")
    new = client.responses.create(model="gpt-5.6", input="hi")
    explicit = client.responses.create(model="gpt-5.6", input="hi", reasoning={"context": "current_turn"})
    assert [x.reasoning.context if x.reasoning else None for x in (old, new, explicit)] == [
        "current_turn",
        "all_turns",
        "current_turn",
    ]


def test_usage_counts_reasoning_text_and_tool_call_tokens(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    # reasoning "Need the weather tool." = 22 bytes -> 6 tokens; "get_weather" + '{"city":"Paris"}' = 27 -> 7
    r = _tool_turn(emu, client)
    assert r.usage is not None
    assert r.usage.output_tokens_details.reasoning_tokens == 6
    assert r.usage.output_tokens == 13
    assert r.usage.total_tokens == r.usage.input_tokens + 13
    assert r.usage.input_tokens_details.cache_write_tokens == 0


# -- pairing rules (§1.4 B) -----------------------------------------------------------------------------


def _bad_request(client: openai.OpenAI, input: list[dict[str, Any]]) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input=input, tools=TOOLS, include=ENC, store=False)
    return info.value


def test_reasoning_without_its_following_item_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    rs, _fc = _dump(_tool_turn(emu, client))
    error = _bad_request(client, [USER, rs, _output("call_emu_001")])
    assert error.status_code == 400
    assert (
        _message(error)
        == "Item 'rs_emu_001' of type 'reasoning' was provided without its required following item."
    )
    assert (error.type, error.param, error.code) == ("invalid_request_error", "input", None)


def test_reasoning_followed_by_another_calls_item_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend(
        [ModelAction.call(WEATHER, ToolCallSpec("get_weather", {"city": "Rome"}), reasoning="two")]
    )
    rs, fc1, fc2 = _dump(
        client.responses.create(model=MODEL, input="hi", tools=TOOLS, include=ENC, store=False)
    )
    error = _bad_request(client, [USER, rs, fc2, fc1, _output("call_emu_001"), _output("call_emu_002")])
    assert (
        _message(error)
        == "Item 'rs_emu_001' of type 'reasoning' was provided without its required following item."
    )


def test_function_call_with_id_without_its_reasoning_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    _rs, fc = _dump(_tool_turn(emu, client))
    error = _bad_request(client, [USER, fc, _output("call_emu_001")])
    assert _message(error) == (
        "Item 'fc_emu_001' of type 'function_call' was provided without its required 'reasoning' item: "
        "'rs_emu_001'."
    )
    assert error.param == "input"


def test_message_with_id_without_its_reasoning_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.answer("Hello.", reasoning="Greet.")])
    _rs, msg = _dump(client.responses.create(model=MODEL, input="hi", include=ENC, store=False))
    error = _bad_request(
        client, [{"role": "user", "content": "hi"}, msg, {"role": "user", "content": "again"}]
    )
    assert (
        _message(error)
        == "Item 'msg_emu_001' was provided without its required 'reasoning' item: 'rs_emu_001'."
    )


def test_id_less_replay_without_reasoning_is_accepted(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    _rs, fc = _dump(_tool_turn(emu, client))
    fc.pop("id")
    emu.script.extend([ModelAction.answer("18 °C")])
    r = client.responses.create(
        model=MODEL, input=[USER, fc, _output("call_emu_001")], tools=TOOLS, store=False
    )
    assert r.output_text == "18 °C"


def test_function_call_output_with_unknown_call_id_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    error = _bad_request(client, [USER, _output("call_nope")])
    assert _message(error) == "No tool call found for function call output with call_id call_nope."
    assert emu.script.taken == 0


def test_function_call_without_output_followed_by_more_input_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    error = _bad_request(client, [USER, *_dump(_tool_turn(emu, client)), {"role": "user", "content": "and?"}])
    assert _message(error) == "No tool output found for function call call_emu_001."


def test_unknown_input_item_type_is_rejected(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    error = _bad_request(client, [USER, {"type": "telepathy", "content": "x"}])
    assert _message(error) == (
        "Invalid value: 'telepathy'. Supported values are: 'message', 'reasoning', 'function_call', "
        "'function_call_output', 'item_reference'."
    )
    assert (error.param, error.code) == ("input[1].type", "invalid_value")


# -- encrypted content (§1.2, §1.8) ----------------------------------------------------------------------


def test_tampered_encrypted_content_is_rejected(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    rs, fc = _dump(_tool_turn(emu, client))
    blob = rs["encrypted_content"]
    rs["encrypted_content"] = blob[:-6] + ("A" if blob[-6] != "A" else "B") + blob[-5:]
    error = _bad_request(client, [USER, rs, fc, _output("call_emu_001")])
    tampered = rs["encrypted_content"]
    assert _message(error) == f"The encrypted content {tampered[:4]}...{tampered[-4:]} could not be verified."
    assert (error.type, error.param, error.code) == (
        "invalid_request_error",
        None,
        "invalid_encrypted_content",
    )


@pytest.mark.parametrize("suffix", ["A", "=", "==", "-"], ids=["char", "pad", "pads", "alphabet_char"])
def test_encrypted_content_with_anything_after_its_padding_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, suffix: str
) -> None:
    # strict decoding: a lenient base64 decoder reads these as the minted bytes, the vendor does not
    rs, fc = _dump(_tool_turn(emu, client))
    blob = rs["encrypted_content"]
    assert blob.endswith("==")  # this reasoning text mints a blob with two padding characters
    rs["encrypted_content"] = sent = blob + suffix
    error = _bad_request(client, [USER, rs, fc, _output("call_emu_001")])
    assert error.status_code == 400
    assert error.body == {
        "message": f"The encrypted content {sent[:4]}...{sent[-4:]} could not be verified.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_encrypted_content",
    }
    assert emu.script.taken == 1
    assert not emu.verify_encrypted_content(sent, model=MODEL)


def test_encrypted_content_exactly_as_minted_padding_included_is_accepted(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    rs, fc = _dump(_tool_turn(emu, client))
    assert rs["encrypted_content"].endswith("==")
    emu.script.extend([ModelAction.answer("18C in Paris.")])
    r = client.responses.create(
        model=MODEL, input=[USER, rs, fc, _output("call_emu_001")], tools=TOOLS, include=ENC, store=False
    )
    assert r.output_text == "18C in Paris."
    assert emu.verify_encrypted_content(rs["encrypted_content"], model=MODEL, item_id="rs_emu_001")


def test_encrypted_content_from_another_model_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    rs, fc = _dump(_tool_turn(emu, client))
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="gpt-5.6",
            input=[USER, rs, fc, _output("call_emu_001")],
            tools=TOOLS,
            include=ENC,
            store=False,
        )
    assert info.value.code == "invalid_encrypted_content"


def test_encrypted_content_from_another_emulator_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    rs, fc = _dump(_tool_turn(emu, client))
    with OpenAIResponsesEmulator(secret=b"another organisation") as other, other.client() as other_client:
        error = _bad_request(other_client, [USER, rs, fc, _output("call_emu_001")])
    assert error.code == "invalid_encrypted_content"


# -- store, references, chaining (§1.4 A, B.5) ------------------------------------------------------------

NOT_PERSISTED = (
    "Item with id '{}' not found. Items are not persisted when `store` is set to false. "
    "Try again with `store` set to true, or remove this item from your input."
)


def test_reasoning_by_id_without_encrypted_content_under_store_false_is_404(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    rs, fc = _dump(_tool_turn(emu, client))
    del rs["encrypted_content"]
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(
            model=MODEL, input=[USER, rs, fc, _output("call_emu_001")], tools=TOOLS, store=False
        )
    assert info.value.status_code == 404
    assert _message(info.value) == NOT_PERSISTED.format("rs_emu_001")
    assert info.value.param == "input"


def test_item_reference_to_unstored_function_call_is_404(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    _tool_turn(emu, client)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(
            model=MODEL, input=[USER, {"type": "item_reference", "id": "fc_emu_001"}], store=False
        )
    assert _message(info.value) == NOT_PERSISTED.format("fc_emu_001")


def test_item_references_resolve_stored_items(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r"), ModelAction.answer("done")])
    r = client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS)
    refs = [{"type": "item_reference", "id": o.id} for o in r.output]
    r2 = client.responses.create(model=MODEL, input=[USER, *refs, _output("call_emu_001")], tools=TOOLS)
    assert r2.output_text == "done"


def test_previous_response_id_prepends_the_stored_chain(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r"), ModelAction.answer("18 °C")])
    r = client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS)
    r2 = client.responses.create(
        model=MODEL, previous_response_id=r.id, input=[_output("call_emu_001")], tools=TOOLS
    )
    assert r2.output_text == "18 °C"
    assert r2.previous_response_id == "resp_emu_001"
    assert emu.requests[-1].json()["input"] == [_output("call_emu_001")]
    assert emu.stored_response_ids() == ["resp_emu_001", "resp_emu_002"]


def test_chained_function_call_output_without_the_chain_is_rejected(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r")])
    client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input=[_output("call_emu_001")], tools=TOOLS)
    assert _message(info.value) == "No tool call found for function call output with call_id call_emu_001."


def test_previous_response_id_of_unstored_response_is_404(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    r = _tool_turn(emu, client)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=MODEL, previous_response_id=r.id, input=[_output("call_emu_001")])
    assert _message(info.value) == "Previous response with id 'resp_emu_001' not found."
    assert (info.value.param, info.value.code) == ("previous_response_id", "previous_response_not_found")


def test_expired_previous_response_is_404(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r")])
    r = client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS)
    emu.expire(r.id)
    assert emu.stored_response_ids() == []
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=MODEL, previous_response_id=r.id, input=[_output("call_emu_001")])
    assert info.value.code == "previous_response_not_found"


def test_hosted_tool_items_are_accepted_as_input(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.answer("ok")])
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}
    assert client.responses.create(model=MODEL, input=[USER, search]).output_text == "ok"


def test_rejected_request_consumes_no_action_and_is_not_stored(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.answer("kept")])
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input=[USER, _output("call_x")])
    assert emu.script.taken == 0 and emu.stored_response_ids() == []
    assert client.responses.create(model=MODEL, input="hi").output_text == "kept"


# -- prompt cache (§1.5) ------------------------------------------------------------------------------------

# instructions render as '{"instructions":"' + 4600 x + '"}' = 4619 bytes -> 1155 tokens (its own run), then
# the user item '{"content":"second question","role":"user"}' (43 bytes) -> 11 tokens: 1166 tokens. The two
# prompts share the instructions item (1155) + len('{"content":"') // 4 = 3 tokens of the user item = 1158
# tokens -> largest 1024 + 128k <= 1158 is 1152.
LONG = "x" * 4600


def _ask(emu: OpenAIResponsesEmulator, client: openai.OpenAI, text: str, **kw: Any) -> Any:
    emu.script.extend([ModelAction.answer("ok")])
    r = client.responses.create(model=MODEL, instructions=LONG, input=text, **kw)
    assert r.usage is not None
    return r.usage


def test_cached_tokens_are_the_shared_prefix_rounded_to_128(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    first = _ask(emu, client, "first question")
    second = _ask(emu, client, "second question")
    assert (first.input_tokens, first.input_tokens_details.cached_tokens) == (1166, 0)
    assert (second.input_tokens, second.input_tokens_details.cached_tokens) == (1166, 1152)


def test_prompt_under_1024_tokens_reports_no_cache(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    client.responses.create(model=MODEL, instructions="x" * 4000, input="q")
    r = client.responses.create(model=MODEL, instructions="x" * 4000, input="q")
    assert r.usage is not None and r.usage.input_tokens == 1013  # ceil(4019/4) + ceil(29/4)
    assert r.usage.input_tokens_details.cached_tokens == 0


def test_prompt_cache_key_separates_caches(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    _ask(emu, client, "first question", prompt_cache_key="user-1")
    other = _ask(emu, client, "second question", prompt_cache_key="user-2")
    same = _ask(emu, client, "second question", prompt_cache_key="user-1")
    assert other.input_tokens_details.cached_tokens == 0
    assert same.input_tokens_details.cached_tokens == 1152


def test_identical_prompt_hits_up_to_the_last_128_boundary(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    _ask(emu, client, "second question")
    again = _ask(emu, client, "second question")
    assert again.input_tokens_details.cached_tokens == 1152  # 1166 shared -> 1024 + 128


def test_a_request_extending_an_earlier_one_shares_exactly_its_input_tokens(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.answer("ok"), ModelAction.answer("ok")])
    instructions = "x" * 4555  # rendered: 4574 bytes -> 1144 tokens
    first = client.responses.create(model=MODEL, instructions=instructions, input="q?")
    assistant = {"role": "assistant", "content": "ok"}
    items = [{"role": "user", "content": "q?"}, assistant, {"role": "user", "content": "more"}]
    second = client.responses.create(model=MODEL, instructions=instructions, input=items)
    assert first.usage is not None and second.usage is not None
    # + '{"content":"q?","role":"user"}' (30 bytes, 8 tokens) = 1152; every one of them is reused, so
    # the hit is exactly 1152 (byte-level sharing across items would have given 1151 -> 1024)
    assert first.usage.input_tokens == 1152
    assert second.usage.input_tokens == 1152 + 9 + 8
    assert second.usage.input_tokens_details.cached_tokens == 1152


@pytest.mark.parametrize(
    ("model", "retention", "gaps", "reads"),
    [
        # §1.5: in memory, gone an hour after the last use; a read starts the hour again
        ("gpt-5", "in_memory", (3599, 3599, 3601), [1152, 1152, 0]),
        # extended (named, or gpt-5.5's only one): up to 24 hours
        ("gpt-5", "24h", (3601, 86399, 86401), [1152, 1152, 0]),
        ("gpt-5.5", None, (86401,), [0]),
    ],
)
def test_an_unused_prompt_is_forgotten_after_its_retention(
    emu: OpenAIResponsesEmulator,
    client: openai.OpenAI,
    model: str,
    retention: str | None,
    gaps: tuple[int, ...],
    reads: list[int],
) -> None:
    instructions = "x" * 4555  # rendered with the input: 1152 tokens
    kw: dict[str, Any] = {"model": model, "instructions": instructions, "input": "q?"}
    if retention is not None:
        kw["prompt_cache_retention"] = retention
    emu.script.extend([ModelAction.answer("ok") for _ in range(len(gaps) + 1)])
    client.responses.create(**kw)
    got = []
    for gap in gaps:
        emu.advance(gap)
        usage = client.responses.create(**kw).usage
        assert usage is not None
        got.append(usage.input_tokens_details.cached_tokens)
    assert got == reads


# -- streaming (§1.6) ---------------------------------------------------------------------------------------

STREAM_ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
    "response.output_item.done",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]


def test_responses_stream_parses_to_the_same_items(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="Need the weather tool.")])
    with client.responses.stream(
        model=MODEL, input="Weather?", tools=TOOLS, include=ENC, store=False
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.type for e in events] == STREAM_ORDER
    assert [e.sequence_number for e in events] == list(range(len(STREAM_ORDER)))
    added, done = events[2], events[9]
    assert added.type == "response.output_item.added" and done.type == "response.output_item.done"
    full = done.item.encrypted_content  # type: ignore[union-attr]
    assert full is not None and added.item.encrypted_content == full[: len(full) // 2]  # type: ignore[union-attr]
    assert final.output[0].model_dump(exclude_none=True)["encrypted_content"] == full
    assert final.output[1].arguments == '{"city":"Paris"}'  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens == 6


def test_create_stream_true_yields_text_deltas(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.answer("Hello there, Paris!", reasoning="Greet.")])
    stream = client.responses.create(model=MODEL, input="hi", stream=True)
    events = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello there, Paris!"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Hello there, Paris!"


def test_streamed_items_replay_like_plain_ones(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r"), ModelAction.answer("18 °C")])
    with client.responses.stream(
        model=MODEL, input="Weather in Paris?", tools=TOOLS, include=ENC, store=False
    ) as s:
        final = s.get_final_response()
    r2 = client.responses.create(
        model=MODEL,
        input=[USER, *_dump(final), _output("call_emu_001")],
        tools=TOOLS,
        include=ENC,
        store=False,
    )
    assert r2.output_text == "18 °C"


# -- faults, auth, async ------------------------------------------------------------------------------------


def test_rate_limited_fault_raises_rate_limit_error_without_consuming_the_script(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.answer("later")])
    emu.inject(emu.rate_limited())
    with pytest.raises(openai.RateLimitError) as info:
        client.responses.create(model=MODEL, input="hi")
    assert info.value.status_code == 429 and info.value.code == "rate_limit_exceeded"
    assert client.responses.create(model=MODEL, input="hi").output_text == "later"


def test_server_error_fault_raises_internal_server_error(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.inject(emu.server_error())
    with pytest.raises(openai.InternalServerError) as info:
        client.responses.create(model=MODEL, input="hi")
    assert info.value.type == "server_error"


def test_truncated_stream_never_completes(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="Need the weather tool.")])
    emu.inject(Fault.truncate_stream(after_events=4))
    seen: list[str] = []
    with (
        pytest.raises(openai.APIError),
        client.responses.stream(model=MODEL, input="hi", tools=TOOLS) as stream,
    ):
        seen.extend(e.type for e in stream)
    assert seen == STREAM_ORDER[:4]


def test_missing_bearer_token_is_401(emu: OpenAIResponsesEmulator) -> None:
    request = urllib.request.Request(
        emu.base_url + "/v1/responses",
        data=json.dumps({"model": MODEL, "input": "hi"}).encode(),
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 401
    assert json.loads(info.value.read())["error"]["type"] == "invalid_request_error"


def test_async_client_round_trip(emu: OpenAIResponsesEmulator) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r"), ModelAction.answer("18 °C")])

    async def run() -> str:
        async with emu.async_client() as client:
            r = await client.responses.create(
                model=MODEL, input="Weather in Paris?", tools=TOOLS, include=ENC
            )
            items = [USER, *_dump(r), _output("call_emu_001")]
            r2 = await client.responses.create(model=MODEL, input=items, tools=TOOLS, include=ENC)
            return r2.output_text

    assert asyncio.run(run()) == "18 °C"


def test_transform_rewrites_the_response(client: openai.OpenAI) -> None:
    def drop_usage(body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k != "usage"}

    with OpenAIResponsesEmulator([ModelAction.answer("hi")], transform=drop_usage) as emu, emu.client() as c:
        assert c.responses.create(model=MODEL, input="hi").usage is None


def test_fixture_client_talks_to_fixture_emulator(
    openai_responses_emulator: OpenAIResponsesEmulator, responses_client: openai.OpenAI
) -> None:
    openai_responses_emulator.script.extend([ModelAction.answer("from the plugin")])
    assert responses_client.responses.create(model=MODEL, input="hi").output_text == "from the plugin"
    assert str(responses_client.base_url) == openai_responses_emulator.base_url + "/v1/"


def test_clear_cache_forgets_earlier_prompts(emu: OpenAIResponsesEmulator, client: openai.OpenAI) -> None:
    _ask(emu, client, "second question")
    emu.clear_cache()
    assert _ask(emu, client, "second question").input_tokens_details.cached_tokens == 0


# -- model aliases (https://platform.openai.com/docs/models/gpt-5) -----------------------------------------

ALIAS = "gpt-5"
DATED = "gpt-5-2025-08-07"


def _stateless_tool_turn(emu: OpenAIResponsesEmulator, client: openai.OpenAI, model: str) -> Any:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="Need the weather tool.")])
    return client.responses.create(model=model, input=[USER], tools=TOOLS, include=ENC, store=False)


def _replay(client: openai.OpenAI, model: str, first: Any) -> Any:
    return client.responses.create(
        model=model,
        input=[USER, *_dump(first), _output("call_emu_001")],
        tools=TOOLS,
        include=ENC,
        store=False,
    )


def test_the_alias_table_holds_the_documented_aliases_and_cites_its_source() -> None:
    from reasonstate.testing import openai as family
    from reasonstate.testing import openai_responses as module

    assert module.MODEL_ALIASES is family.MODEL_ALIASES
    assert {"gpt-5": "gpt-5-2025-08-07", "gpt-5-mini": "gpt-5-mini-2025-08-07"}.items() <= (
        module.MODEL_ALIASES.items()
    )
    url = "https://platform.openai.com/docs/models/gpt-5"
    assert url == family.DOCS_GPT5_MODEL
    assert all(m.__doc__ is not None and url in m.__doc__ for m in (family, module))


@pytest.mark.parametrize(
    ("alias", "dated"), [("gpt-5", "gpt-5-2025-08-07"), ("gpt-5-mini", "gpt-5-mini-2025-08-07")]
)
def test_an_alias_is_answered_with_its_dated_id(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, alias: str, dated: str
) -> None:
    emu.script.extend([ModelAction.answer("Hello.", reasoning="Greet.")])
    raw = client.responses.with_raw_response.create(model=alias, input="hi")
    assert raw.http_response.json()["model"] == dated
    assert raw.parse().model == dated
    assert emu.requests[-1].json()["model"] == alias  # the SDK sent the alias


def test_every_streamed_event_that_names_the_model_names_the_dated_id(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI
) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r")])
    with client.responses.stream(model=ALIAS, input="Weather?", tools=TOOLS, include=ENC, store=False) as s:
        events = list(s)
        final = s.get_final_response()
    named = {e.type: e.response.model for e in events if hasattr(e, "response")}
    assert named == {"response.created": DATED, "response.in_progress": DATED, "response.completed": DATED}
    assert final.model == DATED


@pytest.mark.parametrize("name", [DATED, "gpt-5.5", "gpt-5-mini-2025-08-07"])
def test_a_dated_id_or_an_unknown_name_is_echoed_unchanged(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, name: str
) -> None:
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    raw = client.responses.with_raw_response.create(model=name, input="hi")
    assert raw.http_response.json()["model"] == name
    events = list(client.responses.create(model=name, input="hi", stream=True))
    assert [e.response.model for e in events if hasattr(e, "response")] == [name, name, name]


def test_the_constructor_adds_and_overrides_aliases() -> None:
    extra = {"house-model": "gpt-5.5", "gpt-5-mini": "gpt-5-mini"}
    with OpenAIResponsesEmulator(aliases=extra) as emu, emu.client() as client:
        emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")])
        models = [
            client.responses.create(model=m, input="hi").model for m in ("house-model", "gpt-5-mini", "gpt-5")
        ]
    assert models == ["gpt-5.5", "gpt-5-mini", DATED]


@pytest.mark.parametrize(("produced", "replayed"), [(ALIAS, ALIAS), (ALIAS, DATED), (DATED, ALIAS)])
def test_encrypted_content_minted_under_an_alias_or_its_dated_id_verifies_under_either(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, produced: str, replayed: str
) -> None:
    first = _stateless_tool_turn(emu, client, produced)
    assert first.model == DATED
    blob = first.output[0].encrypted_content
    assert emu.verify_encrypted_content(blob, model=ALIAS) and emu.verify_encrypted_content(blob, model=DATED)
    emu.script.extend([ModelAction.answer("18 °C in Paris.", reasoning="Got it.")])
    second = _replay(client, replayed, first)
    assert (second.output_text, second.model) == ("18 °C in Paris.", DATED)
    assert emu.requests[-1].json()["input"][1]["encrypted_content"] == blob


@pytest.mark.parametrize("other", ["gpt-5-mini", "gpt-5-mini-2025-08-07", "gpt-5.5", "gpt-5-nano-2025-08-07"])
def test_encrypted_content_minted_under_an_alias_still_fails_under_another_model(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, other: str
) -> None:
    first = _stateless_tool_turn(emu, client, ALIAS)
    blob = first.output[0].encrypted_content
    assert not emu.verify_encrypted_content(blob, model=other)
    with pytest.raises(openai.BadRequestError) as info:
        _replay(client, other, first)
    assert info.value.status_code == 400
    assert info.value.body == {
        "message": f"The encrypted content {blob[:4]}...{blob[-4:]} could not be verified.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_encrypted_content",
    }
    assert emu.script.taken == 1  # the rejected request consumed nothing


@pytest.mark.parametrize(("first", "second"), [(ALIAS, DATED), (DATED, ALIAS)])
def test_an_alias_and_its_dated_id_share_the_prompt_cache(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, first: str, second: str
) -> None:
    def ask(model: str, text: str) -> int:
        emu.script.extend([ModelAction.answer("ok")])
        r = client.responses.create(model=model, instructions=LONG, input=text)
        assert r.usage is not None
        return r.usage.input_tokens_details.cached_tokens

    assert ask(first, "first question") == 0
    assert ask(second, "second question") == 1152
    assert ask("gpt-5-mini", "second question") == 0  # another model has a cache of its own


@pytest.mark.parametrize(("first", "second"), [(ALIAS, DATED), (DATED, ALIAS)])
def test_a_response_stored_under_an_alias_or_its_dated_id_continues_under_either(
    emu: OpenAIResponsesEmulator, client: openai.OpenAI, first: str, second: str
) -> None:
    emu.script.extend([ModelAction.call(WEATHER, reasoning="r"), ModelAction.answer("18 °C", reasoning="ok")])
    r = client.responses.create(model=first, input="Weather in Paris?", tools=TOOLS, include=ENC, store=True)
    # the stored chain holds the reasoning item with its blob: it is verified against the resolved model
    r2 = client.responses.create(
        model=second, previous_response_id=r.id, input=[_output("call_emu_001")], tools=TOOLS, include=ENC
    )
    assert (r2.output_text, r2.previous_response_id, r2.model) == ("18 °C", r.id, DATED)
    assert emu.stored_response_ids() == [r.id, r2.id]
