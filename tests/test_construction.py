"""Mistakes in configuration are typed errors when the Session, Tool or policy is built, naming the argument.

Each case was found by trying the SDK as a new user would; before, each surfaced late as a plain Python
error or a vendor 400. ``rs.InvalidOption`` is a ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

import reasonstate as rs
from reasonstate.policies import CacheAware, Compress, KeepLast
from reasonstate.testing.anthropic import AnthropicEmulator

WEATHER = rs.Tool(name="get_weather", parameters={"type": "object", "properties": {}})


@pytest.fixture(scope="module")
def emulator() -> Any:
    with AnthropicEmulator() as emu:
        yield emu


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"model": 123}, "model="),
        ({"model": ""}, "model="),
        ({"system": 42}, "system="),
        ({"tools": [{"name": "get_weather"}]}, "tools[0]"),
        ({"tools": WEATHER}, "tools="),
        ({"few_shots": [("q",)]}, "few_shots[0]"),
        ({"policy": "drop"}, "policy="),
        ({"stream": "yes"}, "stream="),
        ({"messages": []}, "['messages']"),
    ],
    ids=[
        "model-int",
        "model-empty",
        "system",
        "tools-dict",
        "tools-not-a-list",
        "few-shots",
        "policy",
        "stream",
        "owned",
    ],
)
def test_a_bad_session_argument_is_an_invalid_option_naming_it(
    emulator: AnthropicEmulator, kwargs: dict[str, Any], names: str
) -> None:
    options = {"model": "claude-sonnet-4-6", **kwargs}
    with pytest.raises(rs.InvalidOption) as info:
        rs.Session(emulator.client(), **options)
    assert names in str(info.value)
    assert isinstance(info.value, ValueError) and len(emulator.requests) == 0


def test_a_client_of_no_known_sdk_is_refused() -> None:
    with pytest.raises(rs.InvalidOption, match="client, or adapter="):
        rs.Session(object(), model="m")


def test_a_sync_session_refuses_an_async_client_and_the_reverse(emulator: AnthropicEmulator) -> None:
    with pytest.raises(rs.InvalidOption, match=r"AsyncAnthropic is an async client: use rs\.AsyncSession"):
        rs.Session(anthropic.AsyncAnthropic(api_key="test-key", base_url=emulator.base_url), model="m")
    with pytest.raises(rs.InvalidOption, match=r"Anthropic is a sync client: use rs\.Session"):
        rs.AsyncSession(emulator.client(), model="m")
    with pytest.raises(rs.InvalidOption, match="AsyncOpenAI is an async client"):
        rs.Session(openai.AsyncOpenAI(api_key="test-key", base_url="http://127.0.0.1:9/v1"), model="m")


def test_an_openai_client_for_deepseek_without_a_dialect_is_told_which_to_pass() -> None:
    client = openai.OpenAI(api_key="test-key", base_url="https://api.deepseek.com")
    with pytest.raises(rs.InvalidOption, match="pass dialect='deepseek'"):
        rs.Session(client, model="deepseek-v4-pro")
    rs.Session(client, model="deepseek-v4-pro", dialect="deepseek")  # and with it, it works


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: rs.Tool(name=123), "Tool(name=...)"),
        (lambda: rs.Tool(name="has space"), "Tool(name=...)"),
        (lambda: rs.Tool(name="t" * 65), "Tool(name=...)"),
        (lambda: rs.Tool(name="t", parameters="str"), "Tool(parameters=...)"),
        (lambda: rs.Tool(name="t", parameters={"default": object()}), "Tool(parameters=...)"),
        (lambda: rs.Tool(name="t", description=3), "Tool(description=...)"),
        (lambda: rs.Tool(name="t", handler="f"), "Tool(handler=...)"),
        (lambda: KeepLast(-1), "KeepLast(n=...)"),
        (lambda: KeepLast(True), "KeepLast(n=...)"),
        (lambda: Compress(summarize=None), "Compress(summarize=...)"),
        (lambda: CacheAware(ratio=-1.0), "CacheAware(ratio=...)"),
    ],
    ids=[
        "tool-name-int",
        "tool-name-space",
        "tool-name-long",
        "tool-parameters-str",
        "tool-parameters-not-json",
        "tool-description",
        "tool-handler",
        "keep-last-negative",
        "keep-last-bool",
        "compress-none",
        "cache-aware-ratio",
    ],
)
def test_a_bad_tool_or_policy_argument_is_an_invalid_option_naming_it(build: Any, message: str) -> None:
    with pytest.raises(rs.InvalidOption) as info:
        build()
    assert message in str(info.value)


def test_duplicate_tool_names_are_refused(emulator: AnthropicEmulator) -> None:
    with pytest.raises(rs.InvalidOption, match="tool names must be unique"):
        rs.Session(emulator.client(), model="m", tools=[WEATHER, WEATHER])


def test_thinking_a_model_always_rejects_is_refused_at_construction_and_at_a_switch(
    emulator: AnthropicEmulator,
) -> None:
    enabled = {"type": "enabled", "budget_tokens": 2048}
    with pytest.raises(rs.InvalidOption, match="claude-opus-4-7 takes adaptive thinking only"):
        rs.Session(emulator.client(), model="claude-opus-4-7", max_tokens=4096, thinking=enabled)
    session = rs.Session(emulator.client(), model="claude-sonnet-4-6", max_tokens=4096, thinking=enabled)
    with pytest.raises(rs.InvalidOption, match="claude-opus-5-5 takes adaptive thinking only"):
        session.switch_model("claude-opus-5-5")
    assert session.model == "claude-sonnet-4-6" and len(session.trace) == 0
    with pytest.raises(rs.InvalidOption, match="tool_choice forces tool use"):
        rs.Session(
            emulator.client(),
            model="claude-sonnet-4-6",
            max_tokens=4096,
            thinking=enabled,
            tool_choice={"type": "any"},
        )
    assert len(emulator.requests) == 0
