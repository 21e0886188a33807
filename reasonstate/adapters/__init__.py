"""Vendor adapters: one room (module) per vendor API, and the registry that finds a room by its API name.

A room holds everything its API means: the sans-I/O codec (``encode``/``decode``), its stream assembler, its
usage parser, its cache rules, the view of its request bodies and its error mapping (docs/adding-a-vendor.md).
Vendor SDKs are imported only inside the adapter's call, so this package imports without them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

import attrs

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
    "interactions": "reasonstate.adapters.gemini_interactions",
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


@attrs.frozen(slots=True)
class _ClientKind:
    """What the type of a client says: google-genai's class name (``"Client"`` / ``"AsyncClient"``, None for
    another SDK), the top-level modules of its MRO, and whether it is async (:func:`client_is_async`)."""

    genai: str | None
    modules: frozenset[str]
    is_async: bool | None


#: client type → its kind: a pure function of the type (its MRO), computed once per type and process
_KINDS: dict[type, _ClientKind] = {}


def _kind(client: Any) -> _ClientKind:
    cls = type(client)
    kind = _KINDS.get(cls)
    if kind is None:
        mro = cls.__mro__
        # google-genai's clients (or subclasses): "Client" / "AsyncClient"
        genai = next((c.__name__ for c in mro if c.__module__.startswith("google.genai")), None)
        modules = frozenset(c.__module__.split(".")[0] for c in mro)
        if genai is not None:
            is_async: bool | None = True if genai == "AsyncClient" else None
        elif not modules & {"anthropic", "openai"}:
            is_async = None
        else:
            is_async = any(c.__name__.startswith("Async") for c in mro)
        kind = _KINDS.setdefault(cls, _ClientKind(genai, modules, is_async))
    return kind


def client_is_async(client: Any) -> bool | None:
    """True for the SDKs' async clients (``AsyncAnthropic``, ``AsyncOpenAI``, google-genai's
    ``client.aio``), False for their sync clients, None for a client that serves both (google-genai's
    ``genai.Client``: ``client.models`` sync, ``client.aio.models`` async) or of no SDK this package knows."""
    return _kind(client).is_async


#: the adapters :func:`adapter_for` builds with their default configuration, one per API (and chat
#: dialect) and process: an adapter holds configuration only (never per-session state: that is in the
#: session's ``Encodings``), so every session may share it
_DEFAULT_ADAPTERS: dict[str, Adapter] = {}


def _default(key: str, build: Callable[[], Adapter]) -> Adapter:
    adapter = _DEFAULT_ADAPTERS.get(key)
    if adapter is None:
        adapter = _DEFAULT_ADAPTERS.setdefault(key, build())
    return adapter


def _gemini() -> Adapter:
    from reasonstate.adapters.gemini import GeminiAdapter

    return GeminiAdapter()


def _interactions() -> Adapter:
    from reasonstate.adapters.gemini_interactions import InteractionsAdapter

    return InteractionsAdapter()


def _responses() -> Adapter:
    from reasonstate.adapters.openai_responses import OpenAIResponsesAdapter

    return OpenAIResponsesAdapter()


def _chat(dialect: str) -> Callable[[], Adapter]:
    def build() -> Adapter:
        from reasonstate.adapters.openai_chat import OpenAIChatAdapter

        return OpenAIChatAdapter(dialect=dialect)

    return build


def adapter_for(client: Any, *, dialect: str | None = None, api: str | None = None) -> Adapter:
    """The adapter for a vendor client, chosen from its type (without importing the vendor SDK).

    ``anthropic.Anthropic`` → Messages. ``openai.OpenAI`` → Responses by default; ``api="chat"`` or a
    ``dialect`` (``"openai"``, ``"deepseek"``, ``"vllm"``, ``"sglang"``) → Chat Completions.
    ``google.genai.Client`` (or its ``.aio``) → Gemini generateContent; ``api="interactions"`` → the
    Interactions API. The adapter is one shared per
    process for each API (and dialect): adapters hold configuration only.
    """
    kind = _kind(client)
    if kind.genai is not None:
        if dialect is not None or api not in (None, "generate_content", "interactions"):
            raise InvalidOption(
                "the google-genai client speaks generateContent (the default) or api='interactions' "
                "(the Interactions API) here: pass no dialect="
            )
        if api == "interactions":
            return _default("interactions", _interactions)
        return _default("generate_content", _gemini)
    modules = kind.modules
    if "anthropic" in modules:
        if dialect is not None or api not in (None, "messages"):
            raise InvalidOption("the Anthropic client speaks the Messages API only: pass no dialect= or api=")
        return _default("messages", AnthropicAdapter)
    if "openai" in modules:
        if dialect is not None or api == "chat":
            from reasonstate.adapters.openai_chat import DIALECTS

            chosen = dialect or "openai"
            if chosen not in DIALECTS:
                raise InvalidOption(f"unknown chat dialect {dialect!r}; expected one of {DIALECTS}")
            return _default(f"chat:{chosen}", _chat(chosen))
        if api not in (None, "responses"):
            raise InvalidOption(f"unknown api {api!r} for an OpenAI client; use 'responses' or 'chat'")
        host = str(getattr(client, "base_url", ""))
        for name in ("deepseek", "vllm", "sglang"):
            if name in host.lower():
                raise InvalidOption(
                    f"this is an OpenAI client for {host}: for an OpenAI-compatible server pass "
                    f"dialect={name!r} (the Responses API is OpenAI's own)"
                )
        return _default("responses", _responses)
    raise InvalidOption(
        f"no adapter for client type {type(client).__module__}.{type(client).__qualname__}: pass an "
        "anthropic, openai or google-genai client, or adapter="
    )
