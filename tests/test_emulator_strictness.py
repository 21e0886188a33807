"""The emulators are as strict as the vendors (issue 24 item 2): keys, models, tool schemas and reasoning
efforts the vendors refuse are refused with the vendor's status and envelope; what an emulator signs
verifies on a restarted one (the signing secret is stable); and the answers carry every field a recorded
real answer carries (docs/protocols.md §0 "Emulator strictness").

Each expected error body below is written out by hand from the vendor's recorded text (sources in
docs/protocols.md), never built from the emulator's own constants. The SDK calls go through the real
vendor SDKs, raw where reasonstate would refuse the option before sending; where reasonstate cannot know
(a key, a model id), the session is driven too, to show the typed error and the unchanged state.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.testing import (
    AnthropicEmulator,
    GeminiEmulator,
    ModelAction,
    OpenAIChatEmulator,
    OpenAIResponsesEmulator,
    ToolCallSpec,
)
from tests.conftest import WEATHER

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parent.parent
USER = [{"role": "user", "content": "Weather in Paris?"}]
WRONG_KEY = "sk-wrong-key-123456"  # 19 characters: OpenAI shows the first 8 and the last 4
CALL = ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="Check Paris first.")
DONE = ModelAction.answer("18C in Paris.", reasoning="Report it.")


def anthropic_error(exc: pytest.ExceptionInfo[Any]) -> dict[str, Any]:
    body = exc.value.response.json()
    assert body["type"] == "error" and body["request_id"].startswith("req_emu_")
    return dict(body["error"])


def openai_error(exc: pytest.ExceptionInfo[Any]) -> dict[str, Any]:
    return dict(exc.value.response.json()["error"])


# -- keys --------------------------------------------------------------------------------------------------
def test_anthropic_refuses_a_key_it_did_not_issue_with_401_invalid_x_api_key() -> None:
    with AnthropicEmulator([DONE]) as emu, emu.client(api_key=WRONG_KEY) as client:
        with pytest.raises(anthropic.AuthenticationError) as exc:
            client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=USER)
        assert exc.value.status_code == 401
        assert anthropic_error(exc) == {"type": "authentication_error", "message": "invalid x-api-key"}
        assert len(emu.script) == 1


def test_a_wrong_key_is_a_vendor_error_and_the_session_is_unchanged() -> None:
    with AnthropicEmulator([DONE]) as emu, emu.client(api_key=WRONG_KEY) as client:
        session = rs.Session(client, model="claude-sonnet-4-6", max_tokens=256)
        with pytest.raises(rs.VendorError) as exc:
            session.send("Hi")
        assert exc.value.status == 401 and isinstance(exc.value.__cause__, anthropic.AuthenticationError)
        assert session.history.turns == () and len(session.execution) == 0


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        (
            "openai",
            {
                "message": "Incorrect API key provided: sk-wrong*******3456. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            },
        ),
        (
            "deepseek",
            {
                "message": "Authentication Fails, Your api key: ****3456 is invalid",
                "type": "authentication_error",
                "param": None,
                "code": "invalid_request_error",
            },
        ),
    ],
)
def test_chat_refuses_a_key_it_did_not_issue_in_the_vendors_words(dialect: Any, expected: Any) -> None:
    model = "deepseek-v4-pro" if dialect == "deepseek" else "gpt-5.5"
    with OpenAIChatEmulator([DONE], dialect=dialect) as emu, emu.client(api_key=WRONG_KEY) as client:
        with pytest.raises(openai.AuthenticationError) as exc:
            client.chat.completions.create(model=model, messages=USER)
        assert exc.value.status_code == 401 and openai_error(exc) == expected


def test_responses_refuses_a_key_it_did_not_issue_and_a_short_key_is_shown_whole() -> None:
    with OpenAIResponsesEmulator([DONE]) as emu, emu.client(api_key="kk") as client:
        with pytest.raises(openai.AuthenticationError) as exc:
            client.responses.create(model="gpt-5.5", input="Hi")
        assert openai_error(exc)["message"].startswith("Incorrect API key provided: kk. ")
        assert openai_error(exc)["code"] == "invalid_api_key"


def test_gemini_refuses_a_key_it_did_not_issue_with_400_api_key_invalid() -> None:
    from google.genai import errors

    with (
        GeminiEmulator([DONE]) as emu,
        emu.client(api_key=WRONG_KEY) as client,
        pytest.raises(errors.ClientError) as exc,
    ):
        client.models.generate_content(model="gemini-3-flash", contents="Hi")
    assert exc.value.code == 400 and exc.value.status == "INVALID_ARGUMENT"
    assert exc.value.message == "API key not valid. Please pass a valid API key."
    assert exc.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"


def test_the_api_key_option_names_the_one_key_accepted() -> None:
    with AnthropicEmulator([DONE], api_key="team-key") as emu:
        with emu.client() as default, pytest.raises(anthropic.AuthenticationError):
            default.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=USER)
        with emu.client(api_key="team-key") as client:
            assert client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=USER).content


def test_a_vllm_server_without_api_key_takes_any_key_and_with_one_refuses_others() -> None:
    with OpenAIChatEmulator([DONE], dialect="vllm") as emu, emu.client(api_key="EMPTY") as client:
        assert client.chat.completions.create(model="Qwen/Qwen3.6-27B", messages=USER).choices
    with (
        OpenAIChatEmulator([DONE], dialect="vllm", api_key="local") as emu,
        emu.client(api_key="EMPTY") as client,
        pytest.raises(openai.AuthenticationError),
    ):
        client.chat.completions.create(model="Qwen/Qwen3.6-27B", messages=USER)


# -- unknown models ----------------------------------------------------------------------------------------
def test_anthropic_answers_an_unknown_model_with_404_not_found_error() -> None:
    """anthropics/claude-code#5349: ``404 {"type":"error","error":{"type":"not_found_error","message":"model:
    sonnet4"}}``."""
    with AnthropicEmulator([DONE]) as emu, emu.client() as client:
        with pytest.raises(anthropic.NotFoundError) as exc:
            client.messages.create(model="claude-sonnet-9", max_tokens=64, messages=USER)
        assert exc.value.status_code == 404
        assert anthropic_error(exc) == {"type": "not_found_error", "message": "model: claude-sonnet-9"}
        assert len(emu.script) == 1


def test_an_unknown_model_is_a_vendor_error_and_the_session_is_unchanged() -> None:
    with OpenAIResponsesEmulator([DONE]) as emu, emu.client() as client:
        session = rs.Session(client, model="gpt-9")
        with pytest.raises(rs.VendorError) as exc:
            session.send("Hi")
        assert exc.value.status == 404 and isinstance(exc.value.__cause__, openai.NotFoundError)
        assert session.history.turns == () and len(session.execution) == 0
        assert len(emu.script) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_openai_answers_an_unknown_model_with_404_model_not_found(stream: bool) -> None:
    with (
        OpenAIResponsesEmulator([DONE]) as emu,
        emu.client() as client,
        pytest.raises(openai.NotFoundError) as exc,
    ):
        client.responses.create(model="gpt-9", input="Hi", stream=stream)
    assert openai_error(exc) == {
        "message": "The model `gpt-9` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }


def test_deepseek_answers_an_unknown_model_with_400_model_not_exist() -> None:
    """ConardLi/easy-dataset#9: ``400 {"error":{"message":"Model Not Exist","type":"invalid_request_error",
    "param":null,"code":"invalid_request_error"}}``."""
    with (
        OpenAIChatEmulator([DONE], dialect="deepseek") as emu,
        emu.client() as client,
        pytest.raises(openai.BadRequestError) as exc,
    ):
        client.chat.completions.create(model="deepseek-r1", messages=USER)
    assert openai_error(exc) == {
        "message": "Model Not Exist",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }


@pytest.mark.parametrize("version", ["v1", "v1beta"])
def test_gemini_answers_an_unknown_model_with_404_not_found(version: str) -> None:
    """google/adk-python#200: ``404 NOT_FOUND ... models/X is not found for API version v1beta, or is not
    supported for generateContent. Call ListModels ...``."""
    from google.genai import errors

    with (
        GeminiEmulator([DONE]) as emu,
        emu.client(api_version=version) as client,
        pytest.raises(errors.ClientError) as exc,
    ):
        client.models.generate_content(model="gemini-1.0-pro", contents="Hi")
    assert exc.value.code == 404 and exc.value.status == "NOT_FOUND"
    assert exc.value.message == (
        f"models/gemini-1.0-pro is not found for API version {version}, or is not supported for "
        "generateContent. Call ListModels to see the list of available models and their supported methods."
    )


def test_the_models_option_serves_an_extra_id() -> None:
    with OpenAIChatEmulator([DONE], models=["ft:gpt-5:acme::abc123"]) as emu, emu.client() as client:
        reply = client.chat.completions.create(model="ft:gpt-5:acme::abc123", messages=USER)
    assert reply.model == "ft:gpt-5:acme::abc123"


# -- tool schemas ------------------------------------------------------------------------------------------
ANTHROPIC_BAD_SCHEMA = (
    "tools.0.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12 "
    "(https://json-schema.org/draft/2020-12). Learn more about tool use at "
    "https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview."
)
NOT_AN_OBJECT = {"type": "string"}
NOT_JSON_SCHEMA = {"type": "object", "properties": {"city": {"type": "strng"}}}
EMPTY_OBJECT = {"type": "object", "properties": {}}


@pytest.mark.parametrize("schema", [NOT_AN_OBJECT, NOT_JSON_SCHEMA], ids=["not-object", "not-json-schema"])
def test_anthropic_refuses_a_tool_schema_that_is_not_an_object_json_schema(schema: Any) -> None:
    """anthropics/claude-code#86664: ``tools.17.custom.input_schema: JSON schema is invalid...``."""
    tool = {"name": "get_weather", "description": "Weather", "input_schema": schema}
    with (
        AnthropicEmulator([DONE]) as emu,
        emu.client() as client,
        pytest.raises(anthropic.BadRequestError) as exc,
    ):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=USER, tools=[tool])
    assert anthropic_error(exc) == {"type": "invalid_request_error", "message": ANTHROPIC_BAD_SCHEMA}


def test_openai_refuses_a_function_whose_parameters_are_not_an_object_schema() -> None:
    """alibaba/spring-ai-alibaba#4576: ``Invalid schema for function 'sendEmailTool': schema must be a JSON
    Schema of 'type: "object"', got 'type: "string"'.``"""
    tool = {"type": "function", "name": "get_weather", "parameters": NOT_AN_OBJECT}
    with (
        OpenAIResponsesEmulator([DONE]) as emu,
        emu.client() as client,
        pytest.raises(openai.BadRequestError) as exc,
    ):
        client.responses.create(model="gpt-5.5", input="Hi", tools=[tool])  # type: ignore[list-item]
    assert openai_error(exc) == {
        "message": "Invalid schema for function 'get_weather': schema must be a JSON Schema of "
        "'type: \"object\"', got 'type: \"string\"'.",
        "type": "invalid_request_error",
        "param": "tools[0].parameters",
        "code": "invalid_function_parameters",
    }


def test_openai_chat_refuses_parameters_that_are_not_json_schema() -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": NOT_JSON_SCHEMA}}
    with (
        OpenAIChatEmulator([DONE]) as emu,
        emu.client() as client,
        pytest.raises(openai.BadRequestError) as exc,
    ):
        client.chat.completions.create(model="gpt-5.5", messages=USER, tools=[tool])  # type: ignore[list-item]
    error = openai_error(exc)
    assert error["param"] == "tools[0].function.parameters" and error["code"] == "invalid_function_parameters"
    assert error["message"] == (
        "Invalid schema for function 'get_weather': 'strng' is not valid under any of the given schemas."
    )


@pytest.mark.parametrize(
    ("parameters", "shown"),
    [({}, "null"), ({"type": "string"}, '"string"')],
    ids=["empty", "string"],
)
def test_deepseek_refuses_a_function_whose_parameters_are_not_an_object_schema(
    parameters: dict[str, Any], shown: str
) -> None:
    """end-4/dots-hyprland#3640 (POSTed to api.deepseek.com): ``"parameters": {}`` is ``400 Invalid schema
    for function 'get_shell_config': schema must be a JSON Schema of 'type: "object"', got 'type: null'.``
    and ``{"type": "object", "properties": {}}`` is 200. DeepSeek's envelope: param null, code repeating
    the type."""
    tool = {"type": "function", "function": {"name": "get_shell_config", "parameters": parameters}}
    fine = {"type": "function", "function": {"name": "get_shell_config", "parameters": EMPTY_OBJECT}}
    with OpenAIChatEmulator([DONE], dialect="deepseek") as emu, emu.client() as client:
        with pytest.raises(openai.BadRequestError) as exc:
            client.chat.completions.create(model="deepseek-v4-pro", messages=USER, tools=[tool])  # type: ignore[list-item]
        assert len(emu.script) == 1  # a refused request consumes nothing
        client.chat.completions.create(model="deepseek-v4-pro", messages=USER, tools=[fine])  # type: ignore[list-item]
    assert openai_error(exc) == {
        "message": "Invalid schema for function 'get_shell_config': schema must be a JSON Schema of "
        f"'type: \"object\"', got 'type: {shown}'.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }


def test_deepseek_takes_a_function_without_parameters_and_faults_below_the_top() -> None:
    """Unconfirmed for DeepSeek, so accepted (docs/protocols.md §0.2): no ``parameters`` at all, and an
    object schema with a bad type inside."""
    bare = {"type": "function", "function": {"name": "now"}}
    inner = {"type": "function", "function": {"name": "get_weather", "parameters": NOT_JSON_SCHEMA}}
    with OpenAIChatEmulator([DONE, DONE], dialect="deepseek") as emu, emu.client() as client:
        client.chat.completions.create(model="deepseek-v4-pro", messages=USER, tools=[bare])  # type: ignore[list-item]
        client.chat.completions.create(model="deepseek-v4-pro", messages=USER, tools=[inner])  # type: ignore[list-item]
        assert len(emu.script) == 0


def gemini_tools(declaration: dict[str, Any]) -> dict[str, Any]:
    """A REST generateContent body offering one function declaration."""
    return {"contents": [{"parts": [{"text": "Hi"}]}], "tools": [{"functionDeclarations": [declaration]}]}


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {**WEATHER_SCHEMA, "additionalProperties": False},
            'Invalid JSON payload received. Unknown name "additionalProperties" at '
            "'tools[0].function_declarations[0].parameters': Cannot find field.",
        ),
        (
            {"type": "object", "properties": {"unit": {"type": "string", "const": "C"}}},
            'Invalid JSON payload received. Unknown name "const" at '
            "'tools[0].function_declarations[0].parameters.properties[0].value': Cannot find field.",
        ),
        (
            {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": ["string", "null"]}},
            },
            'Invalid JSON payload received. Unknown name "type" at '
            "'tools[0].function_declarations[0].parameters.properties[1].value': Proto field is not "
            "repeating, cannot start list.",
        ),
        (
            {"type": "object", "properties": {"days": {"type": "integer", "enum": [1, 2]}}},
            "Invalid value at 'tools[0].function_declarations[0].parameters.properties[0].value.enum[0]' "
            "(TYPE_STRING), 1",
        ),
        (
            {"type": "object", "properties": {"city": {"description": "a city"}}},
            "* GenerateContentRequest.tools[0].function_declarations[0].parameters.properties[city].type: "
            "must be specified when not using one_of, any_of or all_of fields\n",
        ),
    ],
    ids=["unknown-keyword", "unknown-nested-keyword", "type-list", "enum-not-string", "no-type"],
)
def test_gemini_refuses_parameters_outside_its_openapi_subset(parameters: Any, message: str) -> None:
    """``parameters`` is the API's ``Schema`` (an OpenAPI 3.0 subset read as proto JSON), not JSON Schema.
    The texts: thClaws/thClaws#172 and openswarm-ai/openswarm#24 (unknown names, enum members),
    zed-industries/zed#44875 (``const`` in a property), brightwave-inc/tidebreak#1516 (a type list),
    danny-avila/LibreChat#6971 (a property without a type)."""
    from tests.test_emulator_gemini import post

    with GeminiEmulator([DONE]) as emu:
        response = post(emu, gemini_tools({"name": "get_weather", "parameters": parameters}))
        assert len(emu.script) == 1
    assert response.status_code == 400
    assert response.json() == {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


def test_gemini_refuses_a_type_it_has_no_name_for_through_the_sdk() -> None:
    """google-genai sends a type it does not know as it was given (with a warning); the API answers
    ``Invalid value at '...type' (type.googleapis.com/google.ai.generativelanguage.v1beta.Type), "enum"``
    (google-gemini/deprecated-generative-ai-js#320, zereight/gitlab-mcp#166)."""
    from google.genai import errors, types

    with pytest.warns(UserWarning, match="strin is not a valid Type"):
        declaration = types.FunctionDeclaration(
            name="get_weather",
            parameters={"type": "OBJECT", "properties": {"city": {"type": "strin"}}},  # type: ignore[arg-type]
        )
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[declaration])])
    with (
        GeminiEmulator([DONE]) as emu,
        emu.client(api_version="v1beta") as client,
        pytest.raises(errors.ClientError) as exc,
    ):
        client.models.generate_content(model="gemini-3-flash", contents="Hi", config=config)
    assert exc.value.code == 400 and exc.value.status == "INVALID_ARGUMENT"
    assert exc.value.message == (
        "Invalid value at 'tools[0].function_declarations[0].parameters.properties[0].value.type' "
        '(type.googleapis.com/google.ai.generativelanguage.v1beta.Type), "strin"'
    )


def test_gemini_takes_its_subset_in_any_letter_case_and_json_schema_in_parameters_json_schema() -> None:
    """The docs' REST examples write ``"type": "object"``; the SDK sends ``"OBJECT"``. JSON Schema
    keywords the subset lacks are fine in ``parametersJsonSchema`` (what reasonstate sends)."""
    from tests.test_emulator_gemini import post

    lower = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}}}
    upper = {"type": "OBJECT", "properties": {"city": {"anyOf": [{"type": "STRING"}, {"type": "NULL"}]}}}
    json_schema = {**WEATHER_SCHEMA, "additionalProperties": False, "$defs": {}}
    with GeminiEmulator([DONE, DONE, DONE]) as emu:
        answers = [
            post(emu, gemini_tools({"name": "get_weather", "parameters": lower})),
            post(emu, gemini_tools({"name": "get_weather", "parameters": upper})),
            post(emu, gemini_tools({"name": "get_weather", "parametersJsonSchema": json_schema})),
        ]
    assert [a.status_code for a in answers] == [200, 200, 200]


@pytest.mark.parametrize(
    "declaration",
    [
        {"name": "echo", "parametersJsonSchema": {"type": "string"}},
        {"name": "echo", "parametersJsonSchema": WEATHER_SCHEMA, "parameters": WEATHER_SCHEMA},
    ],
    ids=["not-an-object", "both-fields"],
)
def test_gemini_refuses_a_json_schema_that_does_not_describe_an_object(declaration: dict[str, Any]) -> None:
    """https://ai.google.dev/api/caching#FunctionDeclaration: the schema "must describe an object" and is
    "mutually exclusive with parameters". The vendor's wording is unconfirmed: only the status is
    asserted."""
    from tests.test_emulator_gemini import post

    with GeminiEmulator([DONE]) as emu:
        response = post(emu, gemini_tools(declaration))
    assert response.status_code == 400 and response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "function_declarations[0]" in response.json()["error"]["message"]


# -- reasoning efforts -------------------------------------------------------------------------------------
def test_responses_refuses_an_unknown_reasoning_effort() -> None:
    """stanford-crfm/helm#3501: ``Invalid value: 'self.reasoning_effort'. Supported values are: 'low',
    'medium', and 'high'.`` (the list is the SDK's ``ReasoningEffort`` today)."""
    with OpenAIResponsesEmulator([DONE]) as emu, emu.client() as client:
        with pytest.raises(openai.BadRequestError) as exc:
            client.responses.create(model="gpt-5.5", input="Hi", reasoning={"effort": "hihg"})  # type: ignore[typeddict-item]
        assert len(emu.script) == 1
    assert openai_error(exc) == {
        "message": "Invalid value: 'hihg'. Supported values are: 'none', 'minimal', 'low', 'medium', "
        "'high', 'xhigh', and 'max'.",
        "type": "invalid_request_error",
        "param": "reasoning.effort",
        "code": "invalid_value",
    }


def test_chat_refuses_an_unknown_reasoning_effort() -> None:
    with (
        OpenAIChatEmulator([DONE]) as emu,
        emu.client() as client,
        pytest.raises(openai.BadRequestError) as exc,
    ):
        client.chat.completions.create(model="gpt-5.5", messages=USER, reasoning_effort="hihg")  # type: ignore[arg-type]
    assert openai_error(exc)["param"] == "reasoning_effort"
    assert openai_error(exc)["code"] == "invalid_value"


@pytest.mark.parametrize("effort", ["none", "hihg"])
def test_deepseek_refuses_an_unknown_reasoning_effort_in_its_deserializers_words(effort: str) -> None:
    """nextai-translator/nextai-translator#1879: ``Failed to deserialize the JSON body into the target type:
    reasoning_effort: unknown variant `none`, expected one of `high`, `low`, `medium`, `max`, `xhigh` at
    line 1 column 68`` (``none`` is the Responses format's way to switch thinking off, not this one's). The
    column is where the value ends in the body as sent: found here by hand in the recorded body."""
    with OpenAIChatEmulator([DONE], dialect="deepseek") as emu, emu.client() as client:
        with pytest.raises(openai.BadRequestError) as exc:
            client.chat.completions.create(
                model="deepseek-v4-pro",
                messages=USER,
                reasoning_effort=effort,  # type: ignore[arg-type]
            )
        sent = emu.requests[-1].body
    assert b"\n" not in sent
    column = sent.index(b'"reasoning_effort"') + len(f'"reasoning_effort":"{effort}"')
    assert openai_error(exc) == {
        "message": "Failed to deserialize the JSON body into the target type: reasoning_effort: unknown "
        f"variant `{effort}`, expected one of `high`, `low`, `medium`, `max`, `xhigh`, `minimal`, `ultra` "
        f"at line 1 column {column}",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"])
def test_deepseek_takes_every_effort_its_mapping_table_lists(effort: str) -> None:
    """https://api-docs.deepseek.com/guides/thinking_mode: minimal, low → low; medium, high, xhigh → high;
    max, ultra → max."""
    with OpenAIChatEmulator([DONE], dialect="deepseek") as emu, emu.client() as client:
        reply = client.chat.completions.create(
            model="deepseek-v4-pro",
            messages=USER,
            reasoning_effort=effort,  # type: ignore[arg-type]
        )
    assert reply.choices[0].message.content == "18C in Paris."


def test_anthropic_refuses_an_unknown_effort() -> None:
    with (
        AnthropicEmulator([DONE]) as emu,
        emu.client() as client,
        pytest.raises(anthropic.BadRequestError) as exc,
    ):
        client.messages.create(
            model="claude-opus-4-7",
            max_tokens=64,
            messages=USER,
            extra_body={"output_config": {"effort": "hihg"}},
        )
    assert anthropic_error(exc) == {
        "type": "invalid_request_error",
        "message": "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'",
    }


@pytest.mark.parametrize("level", ["low", "high", "LOW", "High"])
def test_gemini_takes_a_thinking_level_in_any_letter_case(level: str) -> None:
    """A recorded exchange answered ``thinking_level: "low"`` / ``"high"`` with 200 (issue 24). The SDK
    upper-cases the level itself, so the request goes out raw, as a REST caller sends it."""
    from tests.test_emulator_gemini import post

    def config(thinking_level: str) -> dict[str, Any]:
        return {
            "contents": [{"parts": [{"text": "Hi"}]}],
            "generationConfig": {"thinkingConfig": {"thinkingLevel": thinking_level}},
        }

    with GeminiEmulator([DONE]) as emu:
        response = post(emu, config(level))
        refused = post(emu, config("hihg"))
    assert response.status_code == 200 and response.json()["candidates"][0]["content"]["parts"][-1]["text"]
    assert refused.status_code == 400 and refused.json()["error"]["status"] == "INVALID_ARGUMENT"


# -- a stable signing secret ---------------------------------------------------------------------------------
def test_an_anthropic_snapshot_continues_on_a_fresh_emulator() -> None:
    """docs/howto/snapshots.md: take a snapshot, restore it against a restarted emulator, continue. The
    replayed thinking signature must verify on the new emulator (no ``400 Invalid signature``)."""
    with AnthropicEmulator([CALL]) as first, first.client() as client:
        session = rs.Session(client, model="claude-sonnet-4-6", tools=[WEATHER], max_tokens=4096,
                             thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
        reply = session.send("Weather in Paris?")
        snapshot = session.snapshot().model_dump_json()
    with AnthropicEmulator([DONE]) as fresh, fresh.client() as client:
        restored = rs.Session.restore(snapshot, client, tools=[WEATHER])
        final = restored.send_tool_results({reply.tool_calls[0].id: {"temp_c": 18}})
        replayed = fresh.requests[-1].json()["messages"][1]["content"][0]
    assert final.text == "18C in Paris." and replayed["type"] == "thinking" and replayed["signature"]


def test_another_secret_is_another_organisation_whose_signatures_do_not_verify() -> None:
    with AnthropicEmulator([CALL]) as first, first.client() as client:
        session = rs.Session(client, model="claude-sonnet-4-6", tools=[WEATHER], max_tokens=4096,
                             thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
        reply = session.send("Weather in Paris?")
        snapshot = session.snapshot().model_dump_json()
    with AnthropicEmulator([DONE], secret="another organisation") as other, other.client() as client:
        restored = rs.Session.restore(snapshot, client, tools=[WEATHER])
        history, continuation = restored.history, restored.continuation
        with pytest.raises(rs.VendorError) as exc:
            restored.send_tool_results({reply.tool_calls[0].id: {"temp_c": 18}})
        assert exc.value.status == 400 and "Invalid `signature`" in str(exc.value)
        assert restored.history == history and restored.continuation == continuation


def test_a_responses_snapshot_continues_on_a_fresh_emulator() -> None:
    kw: dict[str, Any] = {"tools": [WEATHER], "reasoning": {"effort": "medium"}, "store": False}
    with OpenAIResponsesEmulator([CALL]) as first, first.client() as client:
        session = rs.Session(client, model="gpt-5.5", **kw)
        reply = session.send("Weather in Paris?")
        snapshot = session.snapshot().model_dump_json()
    with OpenAIResponsesEmulator([DONE]) as fresh, fresh.client() as client:
        restored = rs.Session.restore(snapshot, client, tools=[WEATHER])
        final = restored.send_tool_results({reply.tool_calls[0].id: {"temp_c": 18}})
        sent = fresh.requests[-1].json()["input"]
    assert final.text == "18C in Paris."
    assert any(item.get("type") == "reasoning" and item.get("encrypted_content") for item in sent)


def test_a_gemini_snapshot_continues_on_a_fresh_emulator() -> None:
    with GeminiEmulator([CALL]) as first, first.client() as client:
        session = rs.Session(client, model="gemini-3-flash", tools=[WEATHER])
        reply = session.send("Weather in Paris?")
        snapshot = session.snapshot().model_dump_json()
    with GeminiEmulator([DONE]) as fresh, fresh.client() as client:
        restored = rs.Session.restore(snapshot, client, tools=[WEATHER])
        final = restored.send_tool_results({reply.tool_calls[0].id: {"temp_c": 18}})
        sent = fresh.requests[-1].json()["contents"]
    assert final.text == "18C in Paris."
    assert any("thoughtSignature" in part for content in sent for part in content.get("parts", []))


@contextmanager
def emulate(*args: str) -> Iterator[dict[str, str]]:
    """``reasonstate emulate ARGS --port 0`` as a subprocess; yields the variables it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "reasonstate.cli", "emulate", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        printed = {"base_url": proc.stdout.readline().strip().split("=", 1)[1]}
        while (line := proc.stdout.readline()).startswith("export "):
            name, value = line[len("export ") :].strip().split("=", 1)
            printed[name] = value
        printed["comment"] = line
        yield printed
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()


def test_a_snapshot_continues_on_a_restarted_reasonstate_emulate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``reasonstate emulate anthropic`` processes, one after the other: the second verifies the
    thinking signature the first issued, as the vendor's never expire."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    first_script, second_script = tmp_path / "first.json", tmp_path / "second.json"
    first_script.write_text(json.dumps([{"reasoning": "Check Paris.", "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Paris"}}]}]))  # fmt: skip
    second_script.write_text(json.dumps([{"reasoning": "Report it.", "text": "18C in Paris."}]))
    with emulate("anthropic", "--script", str(first_script)) as printed:
        assert "accepted API keys: emulator-key, test-key" in printed["comment"]
        client = anthropic.Anthropic(
            base_url=printed["ANTHROPIC_BASE_URL"], api_key=printed["ANTHROPIC_API_KEY"]
        )
        session = rs.Session(client, model="claude-sonnet-4-6", tools=[WEATHER], max_tokens=4096,
                             thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
        reply = session.send("Weather in Paris?")
        snapshot = session.snapshot().model_dump_json()
    with emulate("anthropic", "--script", str(second_script)) as printed:
        client = anthropic.Anthropic(
            base_url=printed["ANTHROPIC_BASE_URL"], api_key=printed["ANTHROPIC_API_KEY"]
        )
        restored = rs.Session.restore(snapshot, client, tools=[WEATHER])
        final = restored.send_tool_results({reply.tool_calls[0].id: {"temp_c": 18}})
    assert final.text == "18C in Paris."


def test_emulate_with_api_key_exports_that_key_and_refuses_the_default_ones() -> None:
    with emulate("responses", "--api-key", "team-key", "--secret", "ours") as printed:
        assert printed["OPENAI_API_KEY"] == "team-key"
        assert "accepted API keys: team-key; signing secret: --secret" in printed["comment"]
        with (
            openai.OpenAI(base_url=printed["OPENAI_BASE_URL"], api_key="test-key", max_retries=0) as client,
            pytest.raises(openai.AuthenticationError),
        ):
            client.responses.create(model="gpt-5.5", input="Hi")


# -- complete shapes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_usage_carries_inference_geo(stream: bool) -> None:
    """Recorded responses carry ``"service_tier": "standard", "inference_geo": "not_available"``."""
    with AnthropicEmulator([DONE]) as emu, emu.client() as client:
        if stream:
            events = list(client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=USER,
                                                 stream=True))  # fmt: skip
            usage = events[0].message.usage
        else:
            usage = client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=USER).usage
    assert usage.inference_geo == "not_available" and usage.service_tier == "standard"


RECORDED_GPT5_FIELDS = {  # a recorded gpt-5 response (beingglitch/aihub src/api.md), request without them
    "background": False,
    "max_tool_calls": None,
    "safety_identifier": None,
    "service_tier": "default",
    "temperature": 1.0,
    "top_logprobs": 0,
    "top_p": 1.0,
    "user": None,
    "prompt_cache_retention": None,
}


def test_a_responses_object_carries_the_recorded_fields() -> None:
    with OpenAIResponsesEmulator([DONE]) as emu, emu.client() as client:
        body = client.responses.with_raw_response.create(model="gpt-5", input="Hi").http_response.json()
    assert {k: body.get(k, "missing") for k in RECORDED_GPT5_FIELDS} == RECORDED_GPT5_FIELDS
    assert "completed_at" not in body and "moderation" not in body


def test_a_gpt_5_5_response_carries_completed_at_moderation_retention_and_streamed_tool_usage() -> None:
    with OpenAIResponsesEmulator([DONE, DONE]) as emu, emu.client() as client:
        body = client.responses.with_raw_response.create(model="gpt-5.5", input="Hi").http_response.json()
        events = list(client.responses.create(model="gpt-5.5", input="Hi", stream=True))
    assert isinstance(body["completed_at"], int) and body["completed_at"] >= body["created_at"]
    assert body["moderation"] is None and body["prompt_cache_retention"] == "24h"
    assert events[0].response.completed_at is None
    final = events[-1].response
    assert events[-1].type == "response.completed" and final.completed_at is not None
    assert final.tool_usage is not None and final.tool_usage.web_search.num_requests == 0
    assert final.tool_usage.image_gen.total_tokens == 0
