"""The strict Gemini ``generateContent`` emulator, driven by the real ``google-genai`` SDK over real HTTP
(and by plain HTTP where a REST client's spelling is the point). Rules: docs/protocols.md §0, §5."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from google import genai
from google.genai import errors
from google.genai import types as gt

from reasonstate.testing import Fault, ModelAction, ToolCallSpec, count_tokens
from reasonstate.testing.gemini import GeminiEmulator

MODEL = "gemini-3-flash"
TOOLS = [
    gt.Tool(
        function_declarations=[
            gt.FunctionDeclaration(
                name=name,
                description=f"{name} for a city",
                parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
            )
            for name in ("get_weather", "get_time")
        ]
    )
]
CONFIG = gt.GenerateContentConfig(tools=TOOLS, thinking_config=gt.ThinkingConfig(include_thoughts=True))
DOCS = "https://ai.google.dev/gemini-api/docs/thought-signatures"
CORRUPTED = "Corrupted thought signature."


def missing(name: str, position: int) -> str:
    """The vendor's missing-signature text (docs/protocols.md §5.4, as reported in the wild)."""
    return (
        "Function call is missing a thought_signature in functionCall parts. This is required for tools to "
        "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
        f"data, function call `default_api:{name}` , position {position}. Please refer to "
        "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
    )


def call(name: str, **arguments: Any) -> ToolCallSpec:
    return ToolCallSpec(name, arguments)


def user(text: str) -> gt.Content:
    return gt.Content(role="user", parts=[gt.Part(text=text)])


def results(*names: str) -> gt.Content:
    return gt.Content(
        role="user", parts=[gt.Part.from_function_response(name=n, response={"ok": True}) for n in names]
    )


def sent(emu: GeminiEmulator, i: int = -1) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(emu.requests[i].body)
    return data


def post(
    emu: GeminiEmulator,
    payload: Any,
    *,
    model: str = MODEL,
    method: str = "generateContent",
    query: str = "",
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    """A plain REST request, as a non-SDK client would send it."""
    url = f"{emu.base_url}/v1beta/models/{model}:{method}{query}"
    hdrs = {"x-goog-api-key": "test-key"} if headers is None else headers
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    with httpx2.Client(trust_env=False) as http:
        return http.post(url, content=body, headers={"content-type": "application/json", **hdrs})


def rejected(response: httpx2.Response) -> str:
    """The message of a 400 INVALID_ARGUMENT answer (asserting the envelope)."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert set(error) == {"code", "message", "status"}
    message: str = error["message"]
    return message


def client_error(exc: pytest.ExceptionInfo[errors.ClientError]) -> str:
    assert (exc.value.code, exc.value.status) == (400, "INVALID_ARGUMENT")
    return str(exc.value.message)


def wire(part: gt.Part) -> dict[str, Any]:
    """The core of an SDK part as the wire has it (no signature)."""
    if part.function_call is not None:
        return {"functionCall": {"name": part.function_call.name, "args": part.function_call.args or {}}}
    core: dict[str, Any] = {"text": part.text}
    if part.thought:
        core["thought"] = True
    return core


def b64(raw: bytes | None) -> str:
    assert raw is not None
    return base64.b64encode(raw).decode()


@pytest.fixture
def emu() -> Iterator[GeminiEmulator]:
    with GeminiEmulator() as emulator:
        yield emulator


@pytest.fixture
def client(emu: GeminiEmulator) -> Iterator[genai.Client]:
    with emu.client() as c:
        yield c


def chain(emu: GeminiEmulator, client: genai.Client, model: str = MODEL) -> list[gt.Content]:
    """Turn 1 of a sequential chain: 2 parallel calls → 1 call → answer, history replayed as received.

    Returns the contents of the third request (user, step 1, its results, step 2, its results)."""
    emu.script.extend(
        [
            ModelAction.call(
                call("get_weather", city="Paris"), call("get_weather", city="Rome"), reasoning="Two cities."
            ),
            ModelAction.call(call("get_time", city="Rome"), reasoning="And the time in Rome."),
            ModelAction.answer("Rome is warmer.", reasoning="Done."),
        ]
    )
    contents = [user("Paris or Rome: which is warmer?")]
    first = client.models.generate_content(model=model, contents=contents, config=CONFIG)
    contents += [first.candidates[0].content, results("get_weather", "get_weather")]
    second = client.models.generate_content(model=model, contents=contents, config=CONFIG)
    contents += [second.candidates[0].content, results("get_time")]
    return contents


def without_signatures(content: gt.Content) -> gt.Content:
    parts = [p.model_copy(update={"thought_signature": None}) for p in content.parts or []]
    return content.model_copy(update={"parts": parts})


# -- routes, auth, envelope (§0) ----------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", ["v1", "v1beta"])
def test_the_sdk_reaches_both_api_versions_with_its_key_header(api_version: str) -> None:
    with GeminiEmulator([ModelAction.answer("Hi.")]) as emu, emu.client(api_version=api_version) as client:
        response = client.models.generate_content(model=MODEL, contents="Hello")
        assert emu.requests[-1].path == f"/{api_version}/models/{MODEL}:generateContent"
        assert emu.requests[-1].headers["x-goog-api-key"] == "test-key"
        assert response.text == "Hi."
        assert (response.model_version, response.response_id) == (MODEL, "emu-resp-001")


def test_the_default_sdk_version_is_v1(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("Hi.")])
    with genai.Client(api_key="test-key", http_options=gt.HttpOptions(base_url=emu.base_url)) as client:
        client.models.generate_content(model=MODEL, contents="Hello")
    assert emu.requests[-1].path.startswith("/v1/models/")


def test_a_request_without_a_key_is_403_permission_denied(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("Hi.")])
    response = post(emu, {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}, headers={})
    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "code": 403,
            "message": "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API.",
            "status": "PERMISSION_DENIED",
        }
    }
    assert emu.script.taken == 0


def test_the_key_may_come_in_the_query(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("Hi.")])
    response = post(emu, {"contents": [{"parts": [{"text": "Hi"}]}]}, headers={}, query="?key=test-key")
    assert response.status_code == 200
    assert response.json()["candidates"][0]["content"] == {"role": "model", "parts": [{"text": "Hi."}]}


def test_the_fixtures_give_a_running_emulator_and_sync_and_async_clients(
    gemini_emulator: GeminiEmulator, gemini_client: genai.Client, async_gemini_client: Any
) -> None:
    gemini_emulator.script.extend([ModelAction.answer("sync"), ModelAction.answer("async")])
    assert gemini_client.models.generate_content(model=MODEL, contents="a").text == "sync"

    async def ask() -> str | None:
        async with async_gemini_client as aio:  # closes this event loop's connection pool
            return (await aio.models.generate_content(model=MODEL, contents="b")).text

    assert asyncio.run(ask()) == "async"
    assert [r.path for r in gemini_emulator.requests] == [f"/v1/models/{MODEL}:generateContent"] * 2


# -- responses: thoughts, calls, signatures where Gemini puts them (§5.3, §5.4) ----------------------------


def test_thought_parts_precede_the_answer_and_thinking_is_counted_either_way(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    reasoning = "The user greets me; answer briefly."
    emu.script.extend([ModelAction.answer("Hello!", reasoning=reasoning)] * 2)
    shown = client.models.generate_content(model=MODEL, contents="Hi", config=CONFIG)
    parts = shown.candidates[0].content.parts
    assert [(p.text, p.thought) for p in parts] == [(reasoning, True), ("Hello!", None)]
    hidden = client.models.generate_content(model=MODEL, contents="Hi")
    assert [p.text for p in hidden.candidates[0].content.parts] == ["Hello!"]
    for response in (shown, hidden):
        usage = response.usage_metadata
        assert usage is not None
        assert usage.thoughts_token_count == count_tokens(reasoning)
        assert usage.candidates_token_count == count_tokens("Hello!")
        assert usage.total_token_count == usage.prompt_token_count + 2 + count_tokens(reasoning)


def test_a_single_call_is_signed_on_its_function_call_part_and_has_no_id(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    emu.script.extend([ModelAction.call(call("get_weather", city="Paris"))])
    response = client.models.generate_content(model=MODEL, contents="Weather in Paris?", config=CONFIG)
    (part,) = response.candidates[0].content.parts
    assert part.function_call is not None
    assert (part.function_call.name, part.function_call.args, part.function_call.id) == (
        "get_weather",
        {"city": "Paris"},
        None,
    )
    assert emu.verify_signature(MODEL, wire(part), b64(part.thought_signature))
    assert response.candidates[0].finish_reason == gt.FinishReason.STOP


def test_parallel_calls_are_signed_only_on_the_first_function_call_part(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    emu.script.extend(
        [
            ModelAction.call(
                call("get_weather", city="Paris"), call("get_weather", city="Rome"), reasoning="Both."
            )
        ]
    )
    response = client.models.generate_content(model=MODEL, contents="Paris and Rome?", config=CONFIG)
    thought, first, second = response.candidates[0].content.parts
    assert (thought.thought, thought.thought_signature) == (True, None)
    assert first.thought_signature is not None and second.thought_signature is None
    assert emu.verify_signature(MODEL, wire(first), b64(first.thought_signature))
    assert not emu.verify_signature(MODEL, wire(second), b64(first.thought_signature))


def test_an_answer_without_calls_is_signed_on_its_last_part_only_if_the_model_thought(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    emu.script.extend([ModelAction.answer("Rome.", reasoning="Warmer there."), ModelAction.answer("Rome.")])
    thought, text = (
        client.models.generate_content(model=MODEL, contents="?", config=CONFIG).candidates[0].content.parts
    )
    assert thought.thought_signature is None
    assert emu.verify_signature(MODEL, {"text": "Rome."}, b64(text.thought_signature))
    (plain,) = (
        client.models.generate_content(model=MODEL, contents="?", config=CONFIG).candidates[0].content.parts
    )
    assert plain.thought_signature is None


def test_served_signatures_start_with_plus_slash_so_the_sdk_resends_a_different_string(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    emu.script.extend([ModelAction.call(call("get_weather", city="Paris")), ModelAction.answer("18C.")])
    first = client.models.generate_content(model=MODEL, contents=[user("Paris?")], config=CONFIG)
    served = first.candidates[0].content.parts[0].thought_signature
    assert b64(served).startswith("+/")
    contents = [user("Paris?"), first.candidates[0].content, results("get_weather")]
    assert client.models.generate_content(model=MODEL, contents=contents, config=CONFIG).text == "18C."
    resent = sent(emu)["contents"][1]["parts"][0]["thoughtSignature"]
    assert resent.startswith("-_") and base64.urlsafe_b64decode(resent) == served  # §5.1


def test_max_tokens_finishes_with_max_tokens(emu: GeminiEmulator, client: genai.Client) -> None:
    emu.script.extend([ModelAction(text="Rome is", stop="max_tokens")])
    response = client.models.generate_content(model=MODEL, contents="?")
    assert response.candidates[0].finish_reason == gt.FinishReason.MAX_TOKENS
    assert response.text == "Rome is"


def test_an_alias_is_answered_with_its_versioned_model_and_signatures_bind_to_that_model() -> None:
    aliases = {"gemini-flash-latest": "gemini-3-flash-preview-09-2026"}
    action = ModelAction.call(call("get_weather", city="Paris"))
    with GeminiEmulator([action], aliases=aliases) as emu, emu.client() as client:
        response = client.models.generate_content(model="gemini-flash-latest", contents="?", config=CONFIG)
    assert response.model_version == "gemini-3-flash-preview-09-2026"
    part = response.candidates[0].content.parts[0]
    for model in ("gemini-flash-latest", "gemini-3-flash-preview-09-2026"):
        assert emu.verify_signature(model, wire(part), b64(part.thought_signature))
    assert not emu.verify_signature("gemini-3-pro", wire(part), b64(part.thought_signature))


def test_the_documented_alias_table_answers_with_the_recorded_version(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("Percy")])
    response = post(emu, {"contents": [{"parts": [{"text": "?"}]}]}, model="gemini-1.5-flash-latest")
    assert response.json()["modelVersion"] == "gemini-1.5-flash-002"


def test_gemini_2_5_signs_the_first_part_and_never_validates(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    model = "gemini-2.5-flash"
    contents = chain(emu, client, model=model)
    first = contents[1].parts[0]
    assert first.thought is True and first.thought_signature is not None  # the first part, whatever its type
    stripped = [contents[0], without_signatures(contents[1]), contents[2], without_signatures(contents[3])]
    reply = client.models.generate_content(model=model, contents=[*stripped, contents[4]], config=CONFIG)
    assert reply.text == "Rome is warmer."


def test_a_2_5_model_with_thinking_off_neither_thinks_nor_signs(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    emu.script.extend([ModelAction.call(call("get_weather", city="Paris"), reasoning="x")])
    config = gt.GenerateContentConfig(tools=TOOLS, thinking_config=gt.ThinkingConfig(thinking_budget=0))
    response = client.models.generate_content(model="gemini-2.5-flash", contents="?", config=config)
    (part,) = response.candidates[0].content.parts
    assert part.thought_signature is None
    assert response.usage_metadata.thoughts_token_count is None


# -- signature validation on the current turn (§5.4) --------------------------------------------------------


def test_a_sequential_chain_replaying_each_step_as_received_passes(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    contents = chain(emu, client)
    final = client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert final.text == "Rome is warmer."
    steps = [c for c in sent(emu)["contents"] if c["role"] == "model"]
    assert [[("thoughtSignature" in p) for p in c["parts"]] for c in steps] == [
        [False, True, False],  # thought, first call (signed), parallel call
        [False, True],
    ]


def test_chats_keep_the_signatures_in_their_history(emu: GeminiEmulator, client: genai.Client) -> None:
    emu.script.extend([ModelAction.call(call("get_weather", city="Paris")), ModelAction.answer("18C.")])
    chat = client.chats.create(model=MODEL, config=CONFIG)
    chat.send_message("Weather in Paris?")
    reply = chat.send_message(gt.Part.from_function_response(name="get_weather", response={"temp_c": 18}))
    assert reply.text == "18C."


@pytest.mark.parametrize(("step", "name", "position"), [(1, "get_weather", 2), (3, "get_time", 4)])
def test_a_dropped_signature_in_any_step_of_the_current_turn_is_refused_with_its_position(
    emu: GeminiEmulator, client: genai.Client, step: int, name: str, position: int
) -> None:
    contents = chain(emu, client)
    contents[step] = without_signatures(contents[step])
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert client_error(exc) == missing(name, position)
    assert exc.value.details == {
        "error": {"code": 400, "message": missing(name, position), "status": "INVALID_ARGUMENT"}
    }
    assert len(emu.script) == 1  # the final answer is still queued


def test_a_signature_moved_to_the_second_parallel_call_is_refused(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    contents = chain(emu, client)[:3]
    thought, first, second = contents[1].parts
    moved = [
        thought,
        first.model_copy(update={"thought_signature": None}),
        second.model_copy(update={"thought_signature": first.thought_signature}),
    ]
    contents[1] = gt.Content(role="model", parts=moved)
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert client_error(exc) == missing("get_weather", 2)


def test_a_signature_moved_onto_the_thought_part_is_refused(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    contents = chain(emu, client)[:3]
    thought, first, second = contents[1].parts
    moved = [
        thought.model_copy(update={"thought_signature": first.thought_signature}),
        first.model_copy(update={"thought_signature": None}),
        second,
    ]
    contents[1] = gt.Content(role="model", parts=moved)
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert client_error(exc) == missing("get_weather", 2)


def test_an_edited_signature_is_corrupted(emu: GeminiEmulator, client: genai.Client) -> None:
    contents = chain(emu, client)
    thought, part = contents[3].parts
    raw = bytearray(part.thought_signature or b"")
    raw[-1] ^= 0x01
    edited = part.model_copy(update={"thought_signature": bytes(raw)})
    contents[3] = gt.Content(role="model", parts=[thought, edited])
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert client_error(exc) == CORRUPTED


def test_edited_call_arguments_under_their_signature_are_corrupted(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    # emulator strictness: the signature binds the part it was issued on (module docstring)
    contents = chain(emu, client)
    thought, part = contents[3].parts
    edited = part.model_copy(
        update={"function_call": gt.FunctionCall(name="get_time", args={"city": "Oslo"})}
    )
    contents[3] = gt.Content(role="model", parts=[thought, edited])
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert client_error(exc) == CORRUPTED


def test_another_models_signature_is_corrupted(emu: GeminiEmulator, client: genai.Client) -> None:
    contents = chain(emu, client, model="gemini-3-pro")
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert client_error(exc) == CORRUPTED


def test_a_signature_from_another_emulator_secret_is_corrupted(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    contents = chain(emu, client)
    with (
        GeminiEmulator([ModelAction.answer("x")], secret=b"another organisation") as other,
        other.client() as other_client,
        pytest.raises(errors.ClientError) as exc,
    ):
        other_client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert client_error(exc) == CORRUPTED


def test_earlier_turns_are_not_validated(emu: GeminiEmulator, client: genai.Client) -> None:
    contents = chain(emu, client)
    contents += [gt.Content(role="model", parts=[gt.Part(text="Rome is warmer.")]), user("And Oslo?")]
    contents[1], contents[3] = without_signatures(contents[1]), without_signatures(contents[3])
    reply = client.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    assert reply.text == "Rome is warmer."  # the chain's queued answer


def test_a_function_response_message_does_not_start_a_turn(emu: GeminiEmulator) -> None:
    # text after the results in the same message does: the history before it is then an earlier turn
    emu.script.extend([ModelAction.answer("ok")])
    model_turn = {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {}}}]}
    answer = {"functionResponse": {"name": "get_weather", "response": {}}}
    only_results = [
        {"role": "user", "parts": [{"text": "?"}]},
        model_turn,
        {"role": "user", "parts": [answer]},
    ]
    assert rejected(post(emu, {"contents": only_results})) == missing("get_weather", 2)
    with_text = [*only_results[:2], {"role": "user", "parts": [answer, {"text": "Also: hi."}]}]
    assert post(emu, {"contents": with_text}).status_code == 200


@pytest.mark.parametrize(
    "sentinel", ["skip_thought_signature_validator", "context_engineering_is_the_way_to_go"]
)
def test_the_documented_dummy_signatures_skip_validation(sentinel: str) -> None:
    contents = [
        {"role": "user", "parts": [{"text": "?"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "get_weather", "args": {}}, "thoughtSignature": sentinel}],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {}}}]},
    ]
    with GeminiEmulator([ModelAction.answer("ok")]) as emu:
        assert post(emu, {"contents": contents}).status_code == 200
    with GeminiEmulator([ModelAction.answer("ok")], accept_sentinels=False) as strict:
        assert rejected(post(strict, {"contents": contents})) == CORRUPTED


def test_the_sdk_spelling_of_a_dummy_signature_is_accepted_too(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    emu.script.extend([ModelAction.answer("ok")])
    hand_built = gt.Part(
        function_call=gt.FunctionCall(name="get_weather", args={}),
        thought_signature=b"skip_thought_signature_validator",
    )
    contents = [user("?"), gt.Content(role="model", parts=[hand_built]), results("get_weather")]
    assert client.models.generate_content(model=MODEL, contents=contents, config=CONFIG).text == "ok"


# -- base64 (§5.1, §5.4) ------------------------------------------------------------------------------------


def replay_with(emu: GeminiEmulator, signature: str) -> httpx2.Response:
    """Turn 1 step 1 over REST, then its replay with the signature spelled as given."""
    emu.script.extend([ModelAction.call(call("get_weather", city="Paris")), ModelAction.answer("18C.")])
    ask = [{"role": "user", "parts": [{"text": "Paris?"}]}]
    step = post(emu, {"contents": ask}).json()["candidates"][0]["content"]
    step["parts"][0]["thoughtSignature"] = (
        signature(step["parts"][0]["thoughtSignature"]) if callable(signature) else signature
    )
    answer = {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {}}}]}
    return post(emu, {"contents": [*ask, step, answer]})


@pytest.mark.parametrize(
    "spell",
    [
        lambda s: s,
        lambda s: base64.urlsafe_b64encode(base64.b64decode(s)).decode(),
        lambda s: s.rstrip("="),
        lambda s: base64.urlsafe_b64encode(base64.b64decode(s)).decode().rstrip("="),
    ],
    ids=["standard", "urlsafe", "standard-unpadded", "urlsafe-unpadded"],
)
def test_every_base64_spelling_of_the_same_bytes_is_the_same_signature(
    emu: GeminiEmulator, spell: Any
) -> None:
    assert replay_with(emu, spell).status_code == 200


@pytest.mark.parametrize(
    "spell",
    [
        lambda s: s[:-1],  # one "=" short
        lambda s: s + "=",  # one "=" too many
        lambda s: s + "AA",  # bytes after the padding
        lambda s: s.replace("+", "-", 1),  # two alphabets in one string
        lambda s: "not base64!",
    ],
    ids=["short-padding", "extra-padding", "trailing-bytes", "mixed-alphabets", "garbage"],
)
def test_malformed_base64_is_a_decoding_error_naming_the_field(emu: GeminiEmulator, spell: Any) -> None:
    emu.script.extend([ModelAction.call(call("get_weather", city="Paris"))])
    step = post(emu, {"contents": [{"parts": [{"text": "Paris?"}]}]}).json()["candidates"][0]["content"]
    bad = spell(step["parts"][0]["thoughtSignature"])
    step["parts"][0]["thoughtSignature"] = bad
    answer = {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {}}}]}
    contents = [{"role": "user", "parts": [{"text": "Paris?"}]}, step, answer]
    assert rejected(post(emu, {"contents": contents})) == (
        "Invalid value at 'contents[1].parts[0].thought_signature' (TYPE_BYTES), "
        f'Base64 decoding failed for "{bad}"'
    )


def test_non_canonical_trailing_bits_are_not_the_same_bytes(emu: GeminiEmulator) -> None:
    # "AB==" decodes (leniently) to the byte of "AA==": a strict decoder refuses the spelling
    contents = [
        {"role": "user", "parts": [{"text": "?"}]},
        {"role": "model", "parts": [{"text": "x", "thoughtSignature": "AB=="}]},
        {"role": "user", "parts": [{"text": "?"}]},
    ]
    assert "Base64 decoding failed" in rejected(post(emu, {"contents": contents}))


# -- request validation (§5.2) -------------------------------------------------------------------------------


def test_snake_case_and_camel_case_field_names_are_both_accepted_and_render_alike() -> None:
    step_one = ModelAction.call(call("get_weather", city="Paris"), reasoning="Call it.")
    with GeminiEmulator([step_one, ModelAction.answer("18C.")], cache_min_tokens=1) as emu:
        first = post(
            emu,
            {
                "system_instruction": {"parts": [{"text": "Be brief."}]},
                "contents": [{"role": "user", "parts": [{"text": "Paris?"}]}],
                "generation_config": {"thinking_config": {"include_thoughts": True, "thinking_level": "LOW"}},
            },
        ).json()
        thought, signed = first["candidates"][0]["content"]["parts"]
        assert thought == {"text": "Call it.", "thought": True}
        snake_step = {
            "role": "model",
            "parts": [
                {"text": "Call it.", "thought": True},
                {"function_call": signed["functionCall"], "thought_signature": signed["thoughtSignature"]},
            ],
        }
        answer = {"function_response": {"name": "get_weather", "response": {}}}
        second = post(
            emu,
            {
                "systemInstruction": {"parts": [{"text": "Be brief."}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "Paris?"}]},
                    snake_step,
                    {"role": "user", "parts": [answer]},
                ],
                "generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "LOW"}},
            },
        )
    assert second.status_code == 200, second.text
    # the other spelling renders the same prompt: the first request is an exact prefix of the second
    assert (
        second.json()["usageMetadata"]["cachedContentTokenCount"]
        == first["usageMetadata"]["promptTokenCount"]
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"contents": [], "x": 1}, 'Invalid JSON payload received. Unknown name "x": Cannot find field.'),
        (
            {"contents": [{"parts": [{"text": "?", "txt": 1}]}]},
            'Invalid JSON payload received. Unknown name "txt" at '
            "'contents[0].parts[0]': Cannot find field.",
        ),
        ({"contents": []}, "* GenerateContentRequest.contents: contents is not specified\n"),
        (
            {"contents": [{"role": "assistant", "parts": [{"text": "?"}]}]},
            "Please use a valid role: user, model.",
        ),
        (
            {"contents": [{"role": "user", "parts": []}]},
            "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.\n",
        ),
        (
            {
                "contents": [
                    {"parts": [{"text": "?"}]},
                    {"role": "model", "parts": [{"thoughtSignature": "AAAA"}]},
                ]
            },
            "* GenerateContentRequest.contents[1].parts[0].data: required oneof field 'data' must have one "
            "initialized field\n",
        ),
        (
            {
                "contents": [{"parts": [{"text": "?"}]}],
                "generationConfig": {"thinkingConfig": {"thinkingBudget": 128, "thinkingLevel": "LOW"}},
            },
            "You can only set only one of thinking budget and thinking level.",
        ),
        (
            {
                "contents": [{"parts": [{"text": "?"}]}],
                "generationConfig": {"thinkingConfig": {"thinkingBudget": -5}},
            },
            "The thinking budget (-5) is invalid.",
        ),
    ],
    ids=[
        "unknown-top",
        "unknown-part",
        "no-contents",
        "role",
        "empty-parts",
        "signature-only-part",
        "budget-and-level",
        "budget",
    ],
)
def test_malformed_requests_are_refused_with_the_vendor_text(
    emu: GeminiEmulator, payload: dict[str, Any], message: str
) -> None:
    emu.script.extend([ModelAction.answer("x")])
    assert rejected(post(emu, payload)) == message
    assert emu.script.taken == 0


def test_the_sdk_thinking_budget_and_level_together_are_refused(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    config = gt.GenerateContentConfig(
        thinking_config=gt.ThinkingConfig(thinking_budget=128, thinking_level="LOW")
    )
    with pytest.raises(errors.ClientError) as exc:
        client.models.generate_content(model=MODEL, contents="?", config=config)
    assert client_error(exc) == "You can only set only one of thinking budget and thinking level."


CALL = {
    "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
    "thoughtSignature": "skip_thought_signature_validator",
}
ANSWER = {"functionResponse": {"name": "get_weather", "response": {"temp_c": 18}}}
COUNT_MISMATCH = (
    "Please ensure that the number of function response parts is equal to the number of function call parts "
    "of the function call turn."
)


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        (
            [
                {"role": "user", "parts": [{"text": "?"}]},
                {"role": "model", "parts": [CALL, CALL]},
                {"role": "user", "parts": [ANSWER]},
            ],
            COUNT_MISMATCH,
        ),
        (
            [
                {"role": "user", "parts": [{"text": "?"}]},
                {"role": "model", "parts": [CALL]},
                {"role": "user", "parts": [{"text": "??"}]},
            ],
            COUNT_MISMATCH,
        ),
        (
            [{"role": "user", "parts": [{"text": "?"}]}, {"role": "user", "parts": [ANSWER]}],
            "Please ensure that function response turn comes immediately after a function call turn.",
        ),
        (
            [{"role": "model", "parts": [CALL]}, {"role": "user", "parts": [ANSWER]}],
            "Please ensure that function call turn comes immediately after a user turn or after a function "
            "response turn.",
        ),
        (
            # the FAQ's interleaving of a parallel response: FC1+sig, FR1, FC2, FR2
            [
                {"role": "user", "parts": [{"text": "?"}]},
                {"role": "model", "parts": [CALL]},
                {"role": "user", "parts": [ANSWER]},
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}],
                },
                {"role": "user", "parts": [ANSWER]},
            ],
            missing("get_weather", 4),
        ),
    ],
    ids=["fewer-responses", "no-responses", "response-without-call", "call-first", "interleaved-parallel"],
)
def test_function_calls_and_responses_must_pair_up(
    emu: GeminiEmulator, contents: list[dict[str, Any]], message: str
) -> None:
    emu.script.extend([ModelAction.answer("x")])
    assert rejected(post(emu, {"contents": contents})) == message


# -- usage and the implicit prefix cache (§5.3) --------------------------------------------------------------


def test_prompt_tokens_follow_the_documented_rendering(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("Hi.")])
    usage = post(emu, {"contents": [{"parts": [{"text": "Hello"}]}]}).json()["usageMetadata"]
    rendered = '{"parts":[{"text":"Hello"}],"role":"user"}'  # 42 bytes
    assert usage == {
        "promptTokenCount": 11,
        "candidatesTokenCount": 1,
        "totalTokenCount": 12,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 11}],
    }
    assert count_tokens(rendered) == 11


SYSTEM = "You are a careful travel assistant; always check the weather first. " * 260  # 17,680 chars


def test_extending_a_long_prompt_hits_exactly_the_earlier_prompt(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    emu.script.extend([ModelAction.call(call("get_weather", city="Paris")), ModelAction.answer("18C.")])
    config = gt.GenerateContentConfig(tools=TOOLS, system_instruction=SYSTEM)
    first = client.models.generate_content(model=MODEL, contents=[user("Paris?")], config=config)
    assert first.usage_metadata.cached_content_token_count is None
    assert first.usage_metadata.prompt_token_count > 4096
    contents = [user("Paris?"), first.candidates[0].content, results("get_weather")]
    second = client.models.generate_content(model=MODEL, contents=contents, config=config)
    usage = second.usage_metadata
    assert usage is not None
    assert usage.cached_content_token_count == first.usage_metadata.prompt_token_count
    assert usage.cache_tokens_details[0].token_count == usage.cached_content_token_count
    assert usage.prompt_token_count > usage.cached_content_token_count  # §5.3: includes it


def test_a_shared_prefix_below_the_model_minimum_is_not_cached(
    emu: GeminiEmulator, client: genai.Client
) -> None:
    short = "Be brief. " * 1000  # ~2,500 tokens: over gemini-2.5's 2,048, under gemini-3's 4,096
    emu.script.extend([ModelAction.answer("a")] * 4)
    for model, expect_hit in (("gemini-3-flash", False), ("gemini-2.5-flash", True)):
        config = gt.GenerateContentConfig(system_instruction=short)
        client.models.generate_content(model=model, contents="one", config=config)
        second = client.models.generate_content(model=model, contents="two", config=config)
        cached = second.usage_metadata.cached_content_token_count
        assert (cached is not None and cached > 2048) is expect_hit, model


def test_the_cache_is_per_model_and_can_be_cleared(emu: GeminiEmulator, client: genai.Client) -> None:
    emu.script.extend([ModelAction.answer("a")] * 4)
    config = gt.GenerateContentConfig(system_instruction=SYSTEM)
    client.models.generate_content(model=MODEL, contents="one", config=config)
    other = client.models.generate_content(model="gemini-3-pro", contents="one", config=config)
    assert other.usage_metadata.cached_content_token_count is None
    emu.clear_cache()
    again = client.models.generate_content(model=MODEL, contents="one", config=config)
    assert again.usage_metadata.cached_content_token_count is None
    hit = client.models.generate_content(model=MODEL, contents="one", config=config)
    assert hit.usage_metadata.cached_content_token_count == hit.usage_metadata.prompt_token_count


def test_cache_min_tokens_overrides_the_table() -> None:
    with GeminiEmulator([ModelAction.answer("a")] * 2, cache_min_tokens=1) as emu:
        first = post(emu, {"contents": [{"parts": [{"text": "Hello"}]}]}).json()["usageMetadata"]
        second = post(emu, {"contents": [{"parts": [{"text": "Hello"}]}]}).json()["usageMetadata"]
    assert "cachedContentTokenCount" not in first
    assert second["cachedContentTokenCount"] == second["promptTokenCount"] == 11


# -- streaming (§5.5) ----------------------------------------------------------------------------------------


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The documented merge: adjacent text pieces with the same thought flag join, the signature goes on
    the merged part; everything else is taken as it is; finishReason and usage from the last chunk."""
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for piece in chunk["candidates"][0]["content"].get("parts", []):
            last = parts[-1] if parts else None
            if (
                "text" in piece
                and last is not None
                and "text" in last
                and bool(last.get("thought")) == bool(piece.get("thought"))
            ):
                last["text"] += piece["text"]
                if "thoughtSignature" in piece:
                    last["thoughtSignature"] = piece["thoughtSignature"]
            else:
                parts.append(dict(piece))
    final = chunks[-1]
    return {
        "parts": parts,
        "finishReason": final["candidates"][0]["finishReason"],
        "usageMetadata": final["usageMetadata"],
    }


def sse_chunks(response: httpx2.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"] == "text/event-stream"
    events = response.content.split(b"\r\n\r\n")
    assert events[-1] == b""
    return [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]


def unsigned(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in p.items() if k != "thoughtSignature"} for p in parts]


@pytest.mark.parametrize(
    "action",
    [
        ModelAction.answer("Rome is warmer than Paris today.", reasoning="Compare 18C and 22C."),
        ModelAction.call(
            call("get_weather", city="Paris"), call("get_weather", city="Rome"), reasoning="Both."
        ),
    ],
    ids=["answer", "parallel-calls"],
)
def test_a_stream_assembles_to_exactly_the_non_streamed_answer(
    emu: GeminiEmulator, action: ModelAction
) -> None:
    emu.script.extend([action, action])
    payload = {
        "contents": [{"role": "user", "parts": [{"text": "Paris or Rome?"}]}],
        "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
    }
    whole = post(emu, payload).json()
    emu.clear_cache()
    chunks = sse_chunks(post(emu, payload, method="streamGenerateContent", query="?alt=sse"))
    assert len(chunks) > 2
    assert all(c["modelVersion"] == MODEL and c["responseId"] == "emu-resp-002" for c in chunks)
    assert all(len(c["candidates"][0]["content"]["parts"]) == 1 for c in chunks)
    assert all("usageMetadata" not in c and "finishReason" not in c["candidates"][0] for c in chunks[:-1])
    merged = assemble(chunks)
    candidate = whole["candidates"][0]
    assert unsigned(merged["parts"]) == unsigned(candidate["content"]["parts"])
    assert [("thoughtSignature" in p) for p in merged["parts"]] == [
        ("thoughtSignature" in p) for p in candidate["content"]["parts"]
    ]
    for part in merged["parts"]:
        if "thoughtSignature" in part:
            assert emu.verify_signature(MODEL, part, part["thoughtSignature"])
    assert (merged["finishReason"], merged["usageMetadata"]) == (
        candidate["finishReason"],
        whole["usageMetadata"],
    )


def test_a_streamed_answer_delivers_its_signature_on_an_empty_text_part_last(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("Rome is warmer.", reasoning="22C beats 18C.")])
    payload = {"contents": [{"role": "user", "parts": [{"text": "?"}]}]}
    chunks = sse_chunks(post(emu, payload, method="streamGenerateContent", query="?alt=sse"))
    pieces = [c["candidates"][0]["content"]["parts"][0] for c in chunks]
    assert "".join(p["text"] for p in pieces) == "Rome is warmer."
    assert [set(p) for p in pieces] == [{"text"}] * (len(pieces) - 1) + [{"text", "thoughtSignature"}]
    assert pieces[-1]["text"] == ""
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert emu.verify_signature(MODEL, {"text": "Rome is warmer."}, pieces[-1]["thoughtSignature"])


def test_the_stream_route_without_alt_sse_returns_the_chunks_as_one_json_array(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("Hello there.")])
    response = post(emu, {"contents": [{"parts": [{"text": "?"}]}]}, method="streamGenerateContent")
    chunks = response.json()
    assert isinstance(chunks, list)
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "Hello there."


def test_the_sdk_streams_sync_and_the_chain_continues(emu: GeminiEmulator, client: genai.Client) -> None:
    emu.script.extend(
        [ModelAction.call(call("get_weather", city="Paris"), reasoning="Call."), ModelAction.answer("18C.")]
    )
    chunks = list(
        client.models.generate_content_stream(model=MODEL, contents=[user("Paris?")], config=CONFIG)
    )
    assert emu.requests[-1].path == f"/v1/models/{MODEL}:streamGenerateContent"
    assert emu.requests[-1].query == {"alt": ["sse"]}
    parts = [p for c in chunks for p in c.candidates[0].content.parts]
    assert "".join(p.text for p in parts if p.thought) == "Call."
    (signed,) = [p for p in parts if p.function_call is not None]
    assert signed.thought_signature is not None  # a function call part arrives whole, signed
    assert chunks[-1].usage_metadata is not None and chunks[0].usage_metadata is None
    step = gt.Content(role="model", parts=[gt.Part(text="Call.", thought=True), signed])
    reply = client.models.generate_content(
        model=MODEL, contents=[user("Paris?"), step, results("get_weather")], config=CONFIG
    )
    assert reply.text == "18C."


@pytest.mark.parametrize("api_version", ["v1", "v1beta"])
def test_the_async_client_generates_and_streams(emu: GeminiEmulator, api_version: str) -> None:
    emu.script.extend(
        [ModelAction.call(call("get_weather", city="Paris")), ModelAction.answer("Eighteen degrees.")]
    )

    async def run() -> tuple[gt.GenerateContentResponse, str]:
        async with emu.async_client(api_version=api_version) as aio:
            first = await aio.models.generate_content(model=MODEL, contents=[user("Paris?")], config=CONFIG)
            contents = [user("Paris?"), first.candidates[0].content, results("get_weather")]
            stream = await aio.models.generate_content_stream(model=MODEL, contents=contents, config=CONFIG)
            text = "".join([chunk.text or "" async for chunk in stream])
        return first, text

    first, text = asyncio.run(run())
    assert first.candidates[0].content.parts[0].thought_signature is not None
    assert text == "Eighteen degrees."
    assert [r.path for r in emu.requests] == [
        f"/{api_version}/models/{MODEL}:generateContent",
        f"/{api_version}/models/{MODEL}:streamGenerateContent",
    ]


# -- faults -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "kind", "code", "status"),
    [
        (GeminiEmulator.rate_limited(), errors.ClientError, 429, "RESOURCE_EXHAUSTED"),
        (GeminiEmulator.server_error(), errors.ServerError, 500, "INTERNAL"),
        (GeminiEmulator.overloaded(), errors.ServerError, 503, "UNAVAILABLE"),
    ],
    ids=["429", "500", "503"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_vendor_faults_surface_as_api_errors_and_consume_nothing(
    emu: GeminiEmulator,
    client: genai.Client,
    fault: Fault,
    kind: type[errors.APIError],
    code: int,
    status: str,
    stream: bool,
) -> None:
    emu.script.extend([ModelAction.answer("after")])
    emu.inject(fault)
    with pytest.raises(kind) as exc:
        if stream:
            list(client.models.generate_content_stream(model=MODEL, contents="?"))
        else:
            client.models.generate_content(model=MODEL, contents="?")
    assert isinstance(exc.value, errors.APIError)
    assert (exc.value.code, exc.value.status) == (code, status)
    assert exc.value.details["error"]["code"] == code
    assert client.models.generate_content(model=MODEL, contents="?").text == "after"


def test_a_rejected_request_consumes_nothing_and_feeds_no_cache(emu: GeminiEmulator) -> None:
    emu.script.extend([ModelAction.answer("a")])
    long = {"systemInstruction": {"parts": [{"text": SYSTEM}]}}
    bad = post(emu, {**long, "contents": [{"role": "assistant", "parts": [{"text": "one"}]}]})
    assert bad.status_code == 400 and emu.script.taken == 0
    good = post(emu, {**long, "contents": [{"parts": [{"text": "one"}]}]}).json()
    assert "cachedContentTokenCount" not in good["usageMetadata"]
