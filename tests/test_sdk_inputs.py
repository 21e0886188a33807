"""What goes to a vendor SDK is a plain copy: the session's frozen options never reach it.

google-genai's schema transformer edits ``response_schema`` in place (``_transformers.process_schema``:
"Updates the schema and each sub-schema inplace"), so a frozen value handed to the SDK fails inside the
call (``TypeError: FrozenDict is immutable``; inside a stream, a ``StreamInterrupted``), and a plain value
the session kept would be changed under it. Each test drives the REAL SDK against its strict emulator,
wraps the SDK's own entry point to record what it was handed (and, for google-genai, to run the SDK's
in-place transformer on it, as the SDK does for a plain dict), and checks: the call works, unstreamed and
streamed, sync and async; the bytes sent carry the option exactly; the session's options stay frozen and
unchanged.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Callable
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.state.frozen import FrozenDict, FrozenList
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "number"}},
    "required": ["city", "temp_c"],
}
ANSWER = '{"city": "Paris", "temp_c": 18}'


#: the history lists: the codecs build them per request around the closed runs they memoize, and the
#: replayed payloads inside them go as they are (a deep copy would be a pass over the whole history on every
#: request); every other value the SDK gets must be a plain copy
HISTORY = ("messages", "input", "contents")


def frozen_options(kwargs: dict[str, Any]) -> list[str]:
    """The paths of every frozen container in ``kwargs`` outside the history lists."""
    return [p for k, v in kwargs.items() if k not in HISTORY for p in frozen_inside(v, f"$.{k}")]


def frozen_inside(value: Any, path: str = "$") -> list[str]:
    """The paths of every frozen container in ``value``."""
    if isinstance(value, (FrozenDict, FrozenList)):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in frozen_inside(v, f"{path}.{k}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in frozen_inside(v, f"{path}[{i}]")]
    return []


class Handed:
    """Wraps an SDK method: records the kwargs it was handed (their frozen paths), then calls it."""

    def __init__(self, edit: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.frozen: list[list[str]] = []
        self._edit = edit

    def wrap(self, original: Any, *, is_async: bool = False) -> Any:
        def seen(kwargs: dict[str, Any]) -> None:
            self.frozen.append(frozen_options(kwargs))
            if self._edit is not None:
                self._edit(kwargs)

        if is_async:

            async def acall(this: Any, *args: Any, **kwargs: Any) -> Any:
                seen(kwargs)
                return await original(this, *args, **kwargs)

            return acall

        def call(this: Any, *args: Any, **kwargs: Any) -> Any:
            seen(kwargs)
            return original(this, *args, **kwargs)

        return call


def _genai_transforms_in_place(kwargs: dict[str, Any]) -> None:
    # what google-genai does to a dict schema it is given (t_schema → process_schema, in place)
    from google.genai import _transformers

    schema = (kwargs.get("config") or {}).get("response_schema")
    if isinstance(schema, dict):
        _transformers.process_schema(schema, None)


@pytest.fixture
def genai_handed(monkeypatch: pytest.MonkeyPatch) -> Handed:
    from google.genai import models

    handed = Handed(_genai_transforms_in_place)
    for name in ("generate_content", "generate_content_stream"):
        monkeypatch.setattr(models.Models, name, handed.wrap(getattr(models.Models, name)))
        async_original = getattr(models.AsyncModels, name)
        monkeypatch.setattr(models.AsyncModels, name, handed.wrap(async_original, is_async=True))
    return handed


def _read(session: rs.Session, stream: bool, text: str) -> rs.Reply:
    if not stream:
        return session.send(text)
    with session.stream(text) as streamed:
        for _ in streamed:
            pass
    return streamed.reply


async def _aread(session: rs.AsyncSession, stream: bool, text: str) -> rs.Reply:
    if not stream:
        return await session.send(text)
    async with session.stream(text) as streamed:
        async for _ in streamed:
            pass
    return streamed.reply


def _generation(emulator: GeminiEmulator, i: int) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(emulator.requests[i].body)["generationConfig"]
    return config


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
@pytest.mark.parametrize("key", ["response_schema", "response_json_schema"])
def test_a_gemini_response_schema_goes_to_the_sdk_as_a_plain_copy(
    genai_handed: Handed, key: str, stream: bool
) -> None:
    with GeminiEmulator([ModelAction(text=ANSWER), ModelAction(text=ANSWER)]) as emu:
        session = rs.Session(
            emu.client(), model="gemini-3-pro-preview", response_mime_type="application/json", **{key: SCHEMA}
        )
        assert _read(session, stream, "Weather in Paris as JSON?").text == ANSWER
        assert _read(session, stream, "And again?").text == ANSWER
        first, second = _generation(emu, 0), _generation(emu, 1)
    assert genai_handed.frozen == [[], []]
    camel = {"response_schema": "responseSchema", "response_json_schema": "responseJsonSchema"}[key]
    assert first[camel] == second[camel]  # the SDK's edit of its copy does not carry over to the next call
    assert first[camel]["required"] == ["city", "temp_c"]
    if key == "response_json_schema":  # sent as given (the SDK does not transform it)
        assert first[camel] == SCHEMA
    assert isinstance(session._options[key], FrozenDict)
    assert session._options[key] == SCHEMA


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
@pytest.mark.parametrize("key", ["response_schema", "response_json_schema"])
def test_a_gemini_response_schema_goes_to_the_async_sdk_as_a_plain_copy(
    genai_handed: Handed, key: str, stream: bool
) -> None:
    with GeminiEmulator([ModelAction(text=ANSWER)]) as emu:
        session = rs.AsyncSession(
            emu.async_client(),
            model="gemini-3-pro-preview",
            response_mime_type="application/json",
            **{key: SCHEMA},
        )
        assert asyncio.run(_aread(session, stream, "Weather in Paris as JSON?")).text == ANSWER
        assert _generation(emu, 0)[
            {"response_schema": "responseSchema", "response_json_schema": "responseJsonSchema"}[key]
        ]["required"] == ["city", "temp_c"]
    assert genai_handed.frozen == [[]]
    assert session._options[key] == SCHEMA


JSON_FORMAT = {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
WEATHER = rs.Tool(name="get_weather", description="Weather for a city.", parameters=SCHEMA)

#: vendor → (its emulator, the SDK module and resource classes whose ``create`` it is handed to, the session
#: arguments, what the request body must carry): options each SDK transforms (the OpenAI SDK's structured
#: output ``text.format`` / ``response_format``, Anthropic's ``tools`` schemas and ``metadata``)
OTHER_SDKS: dict[str, tuple[Any, str, tuple[str, str], dict[str, Any], dict[str, Any]]] = {
    "openai-responses": (
        OpenAIResponsesEmulator,
        "openai.resources.responses",
        ("Responses", "AsyncResponses"),
        {"model": "gpt-5.5", "text": {"format": JSON_FORMAT}, "metadata": {"run": "weather"}},
        {"text": {"format": JSON_FORMAT}, "metadata": {"run": "weather"}},
    ),
    "openai-chat": (
        OpenAIChatEmulator,
        "openai.resources.chat.completions",
        ("Completions", "AsyncCompletions"),
        {"model": "gpt-5.5", "dialect": "openai", "response_format": RESPONSE_FORMAT},
        {"response_format": RESPONSE_FORMAT},
    ),
    "anthropic": (
        AnthropicEmulator,
        "anthropic.resources.messages",
        ("Messages", "AsyncMessages"),
        {
            "model": "claude-sonnet-4-6",
            "tools": [WEATHER],
            "max_tokens": 4096,
            "metadata": {"user_id": "user-42"},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        },
        {"metadata": {"user_id": "user-42"}, "thinking": {"type": "enabled", "budget_tokens": 1024}},
    ),
}


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
@pytest.mark.parametrize("vendor", sorted(OTHER_SDKS))
def test_options_the_sdk_transforms_go_to_it_as_plain_copies(
    monkeypatch: pytest.MonkeyPatch, vendor: str, stream: bool
) -> None:
    emulator, module_name, (sync_name, async_name), arguments, carried = OTHER_SDKS[vendor]
    module = importlib.import_module(module_name)
    handed, ahanded = Handed(), Handed()
    for owner, hand, is_async in ((sync_name, handed, False), (async_name, ahanded, True)):
        cls = getattr(module, owner)
        monkeypatch.setattr(cls, "create", hand.wrap(cls.create, is_async=is_async))
    with emulator([ModelAction(text=ANSWER), ModelAction(text=ANSWER)]) as emu:
        session = rs.Session(emu.client(), **arguments)
        assert _read(session, stream, "Weather in Paris as JSON?").text == ANSWER
        asession = rs.AsyncSession(emu.async_client(), **arguments)
        assert asyncio.run(_aread(asession, stream, "Weather in Paris as JSON?")).text == ANSWER
        bodies = [json.loads(r.body) for r in emu.requests]
    assert handed.frozen == ahanded.frozen == [[]]
    assert [{k: b[k] for k in carried} for b in bodies] == [carried] * 2
    if vendor == "anthropic":
        assert [b["tools"][0]["input_schema"]["required"] for b in bodies] == [["city", "temp_c"]] * 2
    assert all(isinstance(session._options[k], FrozenDict) for k in carried)
