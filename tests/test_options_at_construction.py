"""Configuration mistakes are refused when the session is built (issue 24 item 1), checked against what the
installed vendor SDK itself declares (docs/protocols.md §9), through the real SDK clients on the emulators.

Before, each of these escaped at the first ``send`` as the SDK's raw ``TypeError`` or was sent as it was
(``store="yes"`` went out as ``store: false``). Every refusal is an ``rs.InvalidOption`` naming the argument
and, where one exists, the accepted spelling; each test asserts the emulator saw no request, and the tests
on a live session that its state did not change.

The oracles are hand-written from the vendors' documents and the SDKs' own source, never from the code under
test: ``max_tokens: int`` (anthropic ``Messages.create``), ``store: Optional[bool]`` and the
``reasoning.effort`` literals (openai ``Responses.create``), Anthropic's ``input_schema`` whose ``type`` is
``Literal["object"]`` (anthropic ``types/tool_param.py``), OpenAI's "schema must be a JSON Schema of
'type: \"object\"'" (alibaba/spring-ai-alibaba#4576).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import reasonstate as rs
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

SONNET = "claude-sonnet-4-6"
WEATHER = rs.Tool(
    name="get_weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def gpt() -> Iterator[OpenAIResponsesEmulator]:
    with OpenAIResponsesEmulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def chat() -> Iterator[OpenAIChatEmulator]:
    with OpenAIChatEmulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiEmulator]:
    with GeminiEmulator() as emu:
        yield emu


def refused(emulator: Any, build: Any, *names: str) -> str:
    """Build, expect ``InvalidOption`` whose message names each of ``names``; nothing was sent."""
    before = len(emulator.requests)
    with pytest.raises(rs.InvalidOption) as info:
        build()
    message = str(info.value)
    for name in names:
        assert name in message, message
    assert len(emulator.requests) == before
    return message


# -- Anthropic -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "names"),
    [
        # anthropic Messages.create declares ``max_tokens: int``; the SDK sends "4096" as a JSON string
        ({"max_tokens": "4096"}, ("max_tokens=", "integer")),
        # ``store`` is the Responses API's (openai ``Responses.create``), not a Messages parameter
        ({"store": False}, ("store=", "anthropic messages.create", "openai responses.create")),
        ({"reasoning": {"effort": "high"}}, ("reasoning=", "openai responses.create")),
        # ThinkingConfigEnabledParam.budget_tokens: Required[int]
        ({"thinking": {"type": "enabled", "budget_tokens": "2048"}}, ("thinking=", "budget_tokens")),
        ({"thinking": {"type": "enabld", "budget_tokens": 2048}}, ("thinking=",)),
    ],
    ids=["max-tokens-str", "store-is-openai", "reasoning-is-openai", "budget-str", "thinking-type"],
)
def test_an_anthropic_option_the_sdk_does_not_declare_is_refused_at_construction(
    claude: AnthropicEmulator, options: dict[str, Any], names: tuple[str, ...]
) -> None:
    refused(claude, lambda: rs.Session(claude.client(), model=SONNET, **options), *names)


def test_a_model_of_another_vendor_is_refused_on_an_anthropic_client(claude: AnthropicEmulator) -> None:
    message = refused(claude, lambda: rs.Session(claude.client(), model="gpt-5.5"), "model='gpt-5.5'")
    assert "OpenAI" in message and "Anthropic" in message


def test_a_misspelled_claude_model_is_refused_with_the_listed_spelling(claude: AnthropicEmulator) -> None:
    """``sonet`` is no word of any id the anthropic SDK's ``ModelParam`` lists; ``sonnet`` is."""
    refused(
        claude,
        lambda: rs.Session(claude.client(), model="claude-sonet-4-6"),
        "model='claude-sonet-4-6'",
        "did you mean 'claude-sonnet-4-6'",
    )


def test_a_claude_model_newer_than_the_sdk_list_is_accepted(claude: AnthropicEmulator) -> None:
    """Known words, unknown version: the SDK's list may be older than the model, so it is not refused."""
    rs.Session(claude.client(), model="claude-sonnet-9-9")
    rs.Session(claude.client(), model="claude-ember-6")  # a new family word, unlike any listed


def test_an_anthropic_client_without_credentials_is_refused_before_anything_is_sent(
    claude: AnthropicEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK raised its own ``TypeError("Could not resolve authentication method ...")`` at the first
    send; now the session is never built."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    client = anthropic.Anthropic(base_url=claude.base_url, max_retries=0)
    assert client.api_key is None
    sent = len(claude.requests)
    with pytest.raises(rs.MissingCredentials, match="api_key="):
        rs.Session(client, model=SONNET)
    with pytest.raises(rs.InvalidOption):  # the subclass keeps the one error a caller catches
        rs.Session(client, model=SONNET)
    assert len(claude.requests) == sent
    # a key in a default header is a credential the SDK sends
    rs.Session(
        anthropic.Anthropic(base_url=claude.base_url, default_headers={"X-Api-Key": "k"}), model=SONNET
    )


@pytest.mark.parametrize(
    ("parameters", "names"),
    [
        ({"type": "strin"}, ("parameters.type", "'strin'", "did you mean 'string'")),
        (
            {"type": "object", "properties": {"city": {"type": "strng"}}},
            ("parameters.properties.city.type", "'strng'"),
        ),
        (
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["town"]},
            ("parameters.required", "'town'"),
        ),
        ({"type": "object", "properties": {"x": {"type": "array", "items": {"type": "numbr"}}}}, ("items",)),
    ],
    ids=["type-typo", "nested-type-typo", "required-missing", "items-type-typo"],
)
def test_a_tool_schema_that_is_not_json_schema_is_refused(
    parameters: dict[str, Any], names: tuple[str, ...]
) -> None:
    with pytest.raises(rs.InvalidOption) as info:
        rs.Tool(name="get_weather", parameters=parameters)
    for name in names:
        assert name in str(info.value)


def test_a_tool_whose_parameters_are_not_an_object_is_refused_by_anthropic_and_openai(
    claude: AnthropicEmulator, gpt: OpenAIResponsesEmulator, chat: OpenAIChatEmulator
) -> None:
    """A valid JSON schema, but Anthropic's ``input_schema.type`` is ``Literal["object"]`` and OpenAI
    answers 400 "schema must be a JSON Schema of 'type: \"object\"'" (alibaba/spring-ai-alibaba#4576)."""
    scalar = rs.Tool(name="echo", parameters={"type": "string"})
    refused(claude, lambda: rs.Session(claude.client(), model=SONNET, tools=[scalar]), "'echo'", "object")
    refused(gpt, lambda: rs.Session(gpt.client(), model="gpt-5.5", tools=[scalar]), "'echo'", "object")
    refused(
        chat,
        lambda: rs.Session(chat.client(), model="deepseek-chat", dialect="deepseek", tools=[scalar]),
        "'echo'",
    )


def test_a_live_session_refuses_a_bad_switch_and_a_bad_tool_and_changes_nothing(
    claude: AnthropicEmulator,
) -> None:
    claude.script.extend([ModelAction(text="Hello.")])
    session = rs.Session(claude.client(), model=SONNET, tools=[WEATHER])
    session.send("hi")
    sent = len(claude.requests)
    before = session.snapshot()
    with pytest.raises(rs.InvalidOption, match=r"gpt-5\.5"):
        session.switch_model("gpt-5.5")
    with pytest.raises(rs.InvalidOption, match="object"):
        session.change_prefix(tools=[rs.Tool(name="echo", parameters={"type": "string"})])
    with pytest.raises(rs.InvalidOption, match="max_tokens"):
        session.switch(claude.client(), model=SONNET, max_tokens="many")
    assert session.snapshot() == before
    assert session.model == SONNET and session.prefix.tools == (WEATHER,)
    assert len(claude.requests) == sent


def test_report_arguments_are_type_checked(claude: AnthropicEmulator) -> None:
    """``report(pricing="x")`` raised ``AttributeError: 'str' object has no attribute 'cost'``."""
    session = rs.Session(claude.client(), model=SONNET)
    with pytest.raises(rs.InvalidOption, match=r"pricing=.*rs\.Pricing"):
        session.report(pricing="x")  # type: ignore[arg-type]
    with pytest.raises(rs.InvalidOption, match=r"kv=.*rs\.KVConfig"):
        session.report(kv={"layers": 32})  # type: ignore[arg-type]
    assert session.report(pricing=rs.Pricing.default()).requests == 0


def test_an_async_session_checks_its_options_alike(claude: AnthropicEmulator) -> None:
    refused(
        claude,
        lambda: rs.AsyncSession(claude.async_client(), model=SONNET, max_tokens="4096"),
        "max_tokens=",
    )


# -- OpenAI Responses ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"temprature": 0.5}, ("temprature=", "did you mean 'temperature'")),
        ({"store": "yes"}, ("store=", "True or False")),
        ({"thinking": {"type": "enabled"}}, ("thinking=", "anthropic messages.create")),
        # openai ``Reasoning.effort``: Literal["none", "minimal", "low", "medium", "high", "xhigh", ...]
        ({"reasoning": {"effort": "hgih"}}, ("reasoning=", "effort", "'high'")),
        ({"reasoning": {"efort": "high"}}, ("reasoning=", "'efort'", "did you mean 'effort'")),
        ({"max_output_tokens": "4096"}, ("max_output_tokens=",)),
    ],
    ids=["misspelled", "store-str", "thinking-is-anthropic", "effort-literal", "reasoning-key", "int-str"],
)
def test_an_openai_option_the_sdk_does_not_declare_is_refused_at_construction(
    gpt: OpenAIResponsesEmulator, options: dict[str, Any], names: tuple[str, ...]
) -> None:
    refused(gpt, lambda: rs.Session(gpt.client(), model="gpt-5.5", **options), *names)


def test_declared_openai_options_are_accepted_and_sent(gpt: OpenAIResponsesEmulator) -> None:
    """No false refusal: an ``int`` where the SDK says ``float``, a full ``reasoning`` object, ``store``."""
    gpt.script.extend([ModelAction(text="Hi.")])
    session = rs.Session(
        gpt.client(),
        model="gpt-5.5",
        temperature=1,
        reasoning={"effort": "high", "summary": "auto"},
        store=False,
        max_output_tokens=256,
    )
    sent = len(gpt.requests)
    assert session.send("hello").text == "Hi."
    assert len(gpt.requests) == sent + 1


def test_another_vendors_model_is_refused_only_on_openais_own_host(gpt: OpenAIResponsesEmulator) -> None:
    """api.openai.com serves OpenAI's models only; any other host (a proxy, a compatible server, this
    emulator) may serve any id, which cannot be known here."""
    official = openai.OpenAI(api_key="sk-test", base_url="https://api.openai.com/v1", max_retries=0)
    with pytest.raises(rs.InvalidOption, match="Anthropic"):
        rs.Session(official, model=SONNET)
    rs.Session(gpt.client(), model=SONNET)


def test_a_misspelled_gpt_model_is_refused(gpt: OpenAIResponsesEmulator) -> None:
    refused(gpt, lambda: rs.Session(gpt.client(), model="gpt-5-mnii"), "'gpt-5-mini'")


# -- Chat Completions dialects -------------------------------------------------------------------------------


def test_thinking_is_a_deepseek_option_and_not_an_openai_one(chat: OpenAIChatEmulator) -> None:
    """DeepSeek's toggle goes in ``extra_body`` (docs/protocols.md §3.1); OpenAI's chat has none."""
    rs.Session(chat.client(), model="deepseek-chat", dialect="deepseek", thinking={"type": "enabled"})
    refused(
        chat,
        lambda: rs.Session(chat.client(), model="gpt-5.5", api="chat", thinking={"type": "enabled"}),
        "thinking=",
    )


@pytest.mark.parametrize("effort", ["none", "hihg"])
def test_a_reasoning_effort_deepseek_does_not_take_is_refused_at_construction(
    chat: OpenAIChatEmulator, effort: str
) -> None:
    """DeepSeek answers ``reasoning_effort: "none"`` with its deserializer's 400 (nextai-translator#1879);
    ``none`` is an OpenAI effort, so the SDK's annotation alone lets it through."""
    refused(
        chat,
        lambda: rs.Session(
            chat.client(), model="deepseek-v4-pro", dialect="deepseek", reasoning_effort=effort
        ),
        "reasoning_effort=",
        "high",
    )
    rs.Session(chat.client(), model="deepseek-v4-pro", dialect="deepseek", reasoning_effort="max")
    rs.Session(chat.client(), model="gpt-5.5", dialect="openai", reasoning_effort="none")  # OpenAI takes it


def test_a_servers_own_parameter_is_refused_with_extra_body_advice(chat: OpenAIChatEmulator) -> None:
    """openai's ``chat.completions.create`` raises ``TypeError`` for ``top_k``; vLLM reads it in the body."""
    refused(
        chat,
        lambda: rs.Session(chat.client(), model="Qwen/Qwen3-8B", dialect="vllm", top_k=20),
        "top_k=",
        "extra_body",
    )
    rs.Session(chat.client(), model="Qwen/Qwen3-8B", dialect="vllm", extra_body={"top_k": 20})
    rs.Session(chat.client(), model="claude-anything", dialect="vllm")  # a vLLM server serves any id


# -- Gemini --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"temprature": 0.5}, ("temprature=", "did you mean 'temperature'")),
        ({"thinking_config": {"thinking_budget": "lots"}}, ("thinking_config.thinking_budget",)),
        ({"reasoning": {"effort": "high"}}, ("reasoning=", "openai responses.create")),
    ],
    ids=["misspelled", "budget-str", "reasoning-is-openai"],
)
def test_a_gemini_option_that_is_no_config_field_is_refused(
    gemini: GeminiEmulator, options: dict[str, Any], names: tuple[str, ...]
) -> None:
    refused(gemini, lambda: rs.Session(gemini.client(), model="gemini-2.5-flash", **options), *names)


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"max_output_tokens": "4096"}, ("max_output_tokens=", "valid integer")),
        ({"candidate_count": True}, ("candidate_count=", "valid integer")),
        ({"temperature": "0.5"}, ("temperature=", "valid number")),
        ({"thinking_config": {"include_thoughts": "yes"}}, ("thinking_config.include_thoughts=",)),
    ],
    ids=["max-output-tokens-str", "candidate-count-bool", "temperature-str", "include-thoughts-str"],
)
def test_a_gemini_option_of_the_wrong_type_is_refused_not_coerced(
    gemini: GeminiEmulator, options: dict[str, Any], names: tuple[str, ...]
) -> None:
    """Issue 24: google-genai coerces its config in pydantic's lax mode, so ``max_output_tokens="4096"``
    was accepted where ``max_tokens="4096"`` is refused on the other vendors' clients."""
    refused(gemini, lambda: rs.Session(gemini.client(), model="gemini-2.5-flash", **options), *names)


def test_gemini_options_of_the_declared_types_are_accepted(gemini: GeminiEmulator) -> None:
    """An enum spelled as its string in any letter case (the SDK's enums are case-insensitive), an int
    where a float is declared, and SDK objects are accepted."""
    from google.genai import types

    rs.Session(
        gemini.client(),
        model="gemini-3-flash",
        max_output_tokens=4096,
        temperature=1,
        thinking_config={"thinking_level": "low", "include_thoughts": True},
        safety_settings=[{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
        stop_sequences=["END"],
    )
    rs.Session(
        gemini.client(), model="gemini-3-flash", thinking_config=types.ThinkingConfig(thinking_budget=64)
    )


def test_a_gemini_tool_whose_parameters_are_not_an_object_is_refused(gemini: GeminiEmulator) -> None:
    """Gemini's ``parametersJsonSchema`` "must describe an object" (docs/protocols.md §0.2); the emulator
    refuses it too (tests/test_emulator_strictness.py)."""
    scalar = rs.Tool(name="echo", parameters={"type": "string"})
    refused(gemini, lambda: rs.Session(gemini.client(), model="gemini-2.5-flash", tools=[scalar]), "'echo'")
    rs.Session(gemini.client(), model="gemini-2.5-flash", tools=[WEATHER])


def test_a_model_of_another_vendor_is_refused_on_a_gemini_client(gemini: GeminiEmulator) -> None:
    refused(gemini, lambda: rs.Session(gemini.client(), model=SONNET), "Anthropic")
    rs.Session(gemini.client(), model="gemini-2.5-flash", thinking_config={"include_thoughts": True})
