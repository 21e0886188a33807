"""Vendor adapters: one room (module) per vendor API, and the registry that finds a room by its API name.

A room holds everything its API means: the sans-I/O codec (``encode``/``decode``), its stream assembler, its
usage parser, its cache rules, the view of its request bodies and its error mapping (docs/adding-a-vendor.md).
Vendor SDKs are imported only inside the adapter's call, so this package imports without them.
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from reasonstate.adapters.anthropic import AnthropicAdapter
from reasonstate.adapters.base import Adapter, DecodedStep, ProtocolRules, Room, VendorRequest
from reasonstate.cache.divergence import View
from reasonstate.errors import InvalidOption

__all__ = [
    "APIS",
    "Adapter",
    "AnthropicAdapter",
    "DecodedStep",
    "ProtocolRules",
    "Room",
    "VendorRequest",
    "adapter_for",
    "client_is_async",
    "room",
    "room_for_path",
    "view_of",
]

#: the registry: each API name (``Adapter.api``) and the module of its room (its ``ROOM``). Adding a vendor
#: API is one new room module and one line here
_ROOMS: dict[str, str] = {
    "messages": "reasonstate.adapters.anthropic",
    "responses": "reasonstate.adapters.openai_responses",
    "chat": "reasonstate.adapters.openai_chat",
    "generate_content": "reasonstate.adapters.gemini",
}
#: the API names the registry knows, in registry order
APIS: tuple[str, ...] = tuple(_ROOMS)


def room(api: str) -> Room:
    """The room of an API name (a key of :data:`APIS`)."""
    module = _ROOMS.get(api)
    if module is None:
        raise InvalidOption(f"no room for api {api!r}; expected one of {', '.join(APIS)}")
    return cast(Room, importlib.import_module(module).ROOM)


def room_for_path(path: str) -> Room | None:
    """The room whose API serves a request to this URL path, or None (a path no room knows)."""
    for api in APIS:
        found = room(api)
        if found.serves(path):
            return found
    return None


def view_of(api: str, body: Any, model: str | None = None) -> View:
    """The prefix units of a request body as ``api``'s prefix cache reads them (``model``: for an API whose
    model is in the URL, Gemini's). Pure; never raises on odd input."""
    return room(api).view(body, model)


def _sdk_modules(client: Any) -> set[str]:
    return {cls.__module__.split(".")[0] for cls in type(client).__mro__}


def _genai_class(client: Any) -> str | None:
    """``"Client"`` / ``"AsyncClient"`` for google-genai's clients (or subclasses), else None."""
    return next((c.__name__ for c in type(client).__mro__ if c.__module__.startswith("google.genai")), None)


def client_is_async(client: Any) -> bool | None:
    """True for the SDKs' async clients (``AsyncAnthropic``, ``AsyncOpenAI``, google-genai's
    ``client.aio``), False for their sync clients, None for a client that serves both (google-genai's
    ``genai.Client``: ``client.models`` sync, ``client.aio.models`` async) or of no SDK this package knows."""
    genai = _genai_class(client)
    if genai is not None:
        return True if genai == "AsyncClient" else None
    modules = _sdk_modules(client)
    if not modules & {"anthropic", "openai"}:
        return None
    return any(cls.__name__.startswith("Async") for cls in type(client).__mro__)


def adapter_for(client: Any, *, dialect: str | None = None, api: str | None = None) -> Adapter:
    """The adapter for a vendor client, chosen from its type (without importing the vendor SDK).

    ``anthropic.Anthropic`` → Messages. ``openai.OpenAI`` → Responses by default; ``api="chat"`` or a
    ``dialect`` (``"openai"``, ``"deepseek"``, ``"vllm"``, ``"sglang"``) → Chat Completions.
    ``google.genai.Client`` (or its ``.aio``) → Gemini generateContent.
    """
    if _genai_class(client) is not None:
        if dialect is not None or api not in (None, "generate_content"):
            raise InvalidOption(
                "the google-genai client speaks generateContent only here: pass no dialect= or api="
            )
        from reasonstate.adapters.gemini import GeminiAdapter

        return GeminiAdapter()
    modules = _sdk_modules(client)
    if "anthropic" in modules:
        if dialect is not None or api not in (None, "messages"):
            raise InvalidOption("the Anthropic client speaks the Messages API only: pass no dialect= or api=")
        return AnthropicAdapter()
    if "openai" in modules:
        if dialect is not None or api == "chat":
            from reasonstate.adapters.openai_chat import DIALECTS, OpenAIChatAdapter

            if (dialect or "openai") not in DIALECTS:
                raise InvalidOption(f"unknown chat dialect {dialect!r}; expected one of {DIALECTS}")
            return OpenAIChatAdapter(dialect=dialect or "openai")
        if api not in (None, "responses"):
            raise InvalidOption(f"unknown api {api!r} for an OpenAI client; use 'responses' or 'chat'")
        host = str(getattr(client, "base_url", ""))
        for name in ("deepseek", "vllm", "sglang"):
            if name in host.lower():
                raise InvalidOption(
                    f"this is an OpenAI client for {host}: for an OpenAI-compatible server pass "
                    f"dialect={name!r} (the Responses API is OpenAI's own)"
                )
        from reasonstate.adapters.openai_responses import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter()
    raise InvalidOption(
        f"no adapter for client type {type(client).__module__}.{type(client).__qualname__}: pass an "
        "anthropic, openai or google-genai client, or adapter="
    )
