"""Vendor adapters: one room (module) per vendor API, and the registry that finds a room by its API name.

A room holds everything its API means: the sans-I/O codec (``encode``/``decode``), its stream assembler, its
usage parser, its cache rules, the view of its request bodies and its error mapping (docs/adding-a-vendor.md).
Vendor SDKs are imported only inside the adapter's call, so this package imports without them.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import re
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from reasonstate.adapters.anthropic import AnthropicAdapter
from reasonstate.adapters.base import Adapter, DecodedStep, ProtocolRules, Room, VendorRequest
from reasonstate.cache.divergence import View
from reasonstate.errors import InvalidOption
from reasonstate.state import FIRST_PARTY
from reasonstate.state.continuation import bound
from reasonstate.state.frozen import remember

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
    "platform_for",
    "room",
    "room_for_path",
    "scope_for",
    "view_of",
    "wire_scope",
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


#: API name → its room, once its module was imported (every commit reads its API's room: a dict lookup,
#: not an import)
_ROOM_OF: dict[str, Room] = {}


def room(api: str) -> Room:
    """The room of an API name (a key of :data:`APIS`)."""
    found = _ROOM_OF.get(api)
    if found is not None:
        return found
    module = _ROOMS.get(api)
    if module is None:
        raise InvalidOption(f"no room for api {api!r}; expected one of {', '.join(APIS)}")
    return _ROOM_OF.setdefault(api, cast(Room, importlib.import_module(module).ROOM))


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
    another SDK), the top-level modules of its MRO, whether it is async (:func:`client_is_async`), and the
    platform its type serves (:data:`_PLATFORM_MODULES`; google-genai's is per client, not per type)."""

    genai: str | None
    modules: frozenset[str]
    is_async: bool | None
    platform: str = FIRST_PARTY


#: the SDK modules whose clients call a cloud platform, not the vendor's own API (docs/protocols.md §10.2):
#: ``anthropic.AnthropicBedrock`` / ``AnthropicBedrockMantle`` (and async), ``anthropic.AnthropicVertex``
#: (and async), ``openai.AzureOpenAI`` (and async)
_PLATFORM_MODULES = (
    ("anthropic.lib.bedrock", "bedrock"),
    ("anthropic.lib.vertex", "vertex"),
    ("openai.lib.azure", "azure"),
)


def _platform_of_type(mro: tuple[type, ...]) -> str:
    for c in mro:
        for module, platform in _PLATFORM_MODULES:
            if c.__module__ == module or c.__module__.startswith(module + "."):
                return platform
    return FIRST_PARTY


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
        elif "botocore" in modules:  # boto3 has no async client (docs/protocols.md §11)
            is_async = False
        elif not modules & {"anthropic", "openai"}:
            is_async = None
        else:
            is_async = any(c.__name__.startswith("Async") for c in mro)
        kind = _KINDS.setdefault(cls, _ClientKind(genai, modules, is_async, _platform_of_type(mro)))
    return kind


def client_is_async(client: Any) -> bool | None:
    """True for the SDKs' async clients (``AsyncAnthropic``, ``AsyncOpenAI``, google-genai's
    ``client.aio``), False for their sync clients, None for a client that serves both (google-genai's
    ``genai.Client``: ``client.models`` sync, ``client.aio.models`` async) or of no SDK this package knows."""
    return _kind(client).is_async


def platform_for(client: Any) -> str:
    """Where a vendor client's requests are served: ``"bedrock"``, ``"vertex"`` (Anthropic on Vertex AI, or
    google-genai built with ``vertexai=True``), ``"azure"``, else :data:`~reasonstate.state.FIRST_PARTY`
    (docs/protocols.md §10.2). From the client's type (google-genai: its ``vertexai`` flag)."""
    kind = _kind(client)
    if kind.genai is None:
        return kind.platform
    # genai.Client has it; its .aio (AsyncClient) keeps it on the API client it shares
    flag = getattr(client, "vertexai", None)
    if flag is None:
        flag = getattr(getattr(client, "_api_client", None), "vertexai", None)
    return "vertex" if flag is True else FIRST_PARTY


#: a long-term Bedrock API key: ``ABSK`` + base64 of ``BedrockAPIKey-<id>-at-<account id>:<secret>``; only the
#: part before ``:`` is ever read (the IAM user it names and its account), never the secret after it
_LONG_TERM_KEY = re.compile(r"BedrockAPIKey-[A-Za-z0-9]+-at-(\d{12})")
#: an AWS access key id (``AKIA…`` long-term, ``ASIA…`` temporary): an identifier, not a secret
_ACCESS_KEY_ID = re.compile(r"[A-Z0-9]{16,128}")
_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d+")


def _b64_text(data: str) -> str | None:
    try:
        return base64.b64decode(data + "=" * (-len(data) % 4), validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        return None


def _bedrock_api_key_identity(key: str) -> str | None:
    """Who a Bedrock API key acts for, read from the key's documented public part, or None (not a form
    known here). A long-term key (``ABSK…``) names its account: ``account:<12 digits>``; a short-term key
    (``bedrock-api-key-`` + base64 of a SigV4 pre-signed URL) names the access key id of the credentials
    that signed it in ``X-Amz-Credential``: ``key:<id>``. The secret, the signature and the session token in
    the key are never kept (docs/protocols.md §10.4)."""
    if key.startswith("ABSK"):
        text = _b64_text(key[4:])
        found = _LONG_TERM_KEY.fullmatch(text.partition(":")[0]) if text else None
        return f"account:{found.group(1)}" if found else None
    if key.startswith("bedrock-api-key-"):
        text = _b64_text(key[len("bedrock-api-key-") :])
        if text is None:
            return None
        query = parse_qs(urlsplit(text if "://" in text else "https://" + text).query)
        credential = unquote(query.get("X-Amz-Credential", [""])[0]).split("/")
        if _ACCESS_KEY_ID.fullmatch(credential[0]):
            return f"key:{credential[0]}"
    return None


def _bedrock_scope(client: Any) -> str:
    """The account scope of an ``AnthropicBedrock`` client: ``<identity>/<region>``, or ``""`` (unknown).

    The account id itself is not on the client (it would take an STS call), so the identity is the most
    the client states: a long-term API key's account (``account:123456789012``), else the access key id of
    the credentials (``key:AKIA…``: ``aws_access_key``, or the one a short-term API key was signed with),
    else the named profile (``profile:<name>``). Two keys or profiles of one account are two scopes, and
    the region is part of the scope: a switch between them withholds payloads the other might have taken,
    never the other way. Credentials resolved by botocore's default chain at request time are not on the
    client: the scope is unknown (docs/protocols.md §10.1)."""
    region = getattr(client, "aws_region", None)
    api_key = getattr(client, "api_key", None)
    access_key = getattr(client, "aws_access_key", None)
    profile = getattr(client, "aws_profile", None)
    identity: str | None = None
    if isinstance(api_key, str) and api_key:
        identity = _bedrock_api_key_identity(api_key)
    elif isinstance(access_key, str) and _ACCESS_KEY_ID.fullmatch(access_key):
        identity = f"key:{access_key}"
    elif isinstance(profile, str) and profile:
        identity = f"profile:{profile}"
    if identity is None or not isinstance(region, str) or not _REGION.fullmatch(region):
        return ""
    return f"{identity}/{region}"


def _azure_scope(client: Any) -> str:
    """The resource of an ``AzureOpenAI`` client: the host (and a non-default port) of its base URL
    (``azure_endpoint`` or ``base_url``), lower-cased: ``res.openai.azure.com`` (docs/protocols.md §10.3)."""
    url = getattr(client, "base_url", None)
    if url is None:
        return ""
    try:
        parts = urlsplit(str(url))
        host, port = parts.hostname, parts.port
    except ValueError:
        return ""
    if not host:
        return ""
    return host.lower() + (f":{port}" if port is not None and port != 443 else "")


#: SigV4's ``Authorization`` header: ``AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/<service>/...``
_SIGV4_CREDENTIAL = re.compile(r"AWS4-HMAC-SHA256 Credential=([A-Z0-9]{16,128})/\d{8}/([a-z0-9-]+)/")
#: a Bedrock runtime host names its region: ``bedrock-runtime.us-east-1.amazonaws.com``
_BEDROCK_HOST = re.compile(r"bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com")


def wire_scope(host: str, authorization: str) -> str:
    """The AWS account scope a request was sent for, read from the wire as :func:`scope_for` reads it from
    the client (``key:AKIA…/us-east-1``, ``account:123456789012/us-east-1``), ``""`` when its
    ``Authorization`` header says none (another platform, an API key of no known form). The access key
    id and region of a SigV4 signature's credential scope; a Bedrock API key's identity with the region
    of a ``bedrock-runtime`` host. Never the signature, the secret or a token (docs/protocols.md §10.1,
    §10.7)."""
    signed = _SIGV4_CREDENTIAL.match(authorization)
    if signed is not None:
        return f"key:{signed.group(1)}/{signed.group(2)}"
    if authorization[:7].lower() != "bearer ":
        return ""
    identity = _bedrock_api_key_identity(authorization[7:].strip())
    if identity is None:
        return ""
    region = _BEDROCK_HOST.fullmatch(host.lower())
    return f"{identity}/{region.group(1)}" if region else identity


def scope_for(client: Any) -> str:
    """The account or resource a vendor client's platform binds its payloads to, ``""`` when the platform
    binds none or the client does not say (docs/protocols.md §10.1): for ``AnthropicBedrock`` the AWS
    identity and region (:func:`_bedrock_scope`), for ``AzureOpenAI`` the resource host. Never a secret."""
    return _scope(client, platform_for(client))


def _scope(client: Any, platform: str) -> str:
    """:func:`scope_for` on a client whose platform is known already."""
    if platform == "bedrock":
        return _bedrock_scope(client)
    if platform == "azure":
        return _azure_scope(client)
    return ""


#: the adapters :func:`adapter_for` builds with their default configuration, one per API (and chat
#: dialect) and process: an adapter holds configuration only (never per-session state: that is in the
#: session's ``Encodings``), so every session may share it
_DEFAULT_ADAPTERS: dict[str, Adapter] = {}
#: ``id`` of each adapter in :data:`_DEFAULT_ADAPTERS` → its key (never removed, as the adapters are not: an
#: id found here is its adapter's for the life of the process)
_DEFAULT_KEYS: dict[int, str] = {}


def _default(key: str, build: Callable[[], Adapter]) -> Adapter:
    adapter = _DEFAULT_ADAPTERS.get(key)
    if adapter is None:
        adapter = _DEFAULT_ADAPTERS.setdefault(key, build())
        _DEFAULT_KEYS[id(adapter)] = key
    return adapter


def shared_name(adapter: Adapter) -> str | None:
    """The key of ``adapter`` among the process-wide default adapters (None: it is not one of them): a
    value that names it (:func:`shared_adapter`) without holding it, as the registry holds it for good."""
    key = _DEFAULT_KEYS.get(id(adapter))
    return key if key is not None and _DEFAULT_ADAPTERS.get(key) is adapter else None


def shared_adapter(name: str) -> Adapter:
    """The default adapter :func:`shared_name` gave ``name`` for."""
    return _DEFAULT_ADAPTERS[name]


#: (client type, dialect, api) → the adapter :func:`adapter_for` chose, for the choices that read nothing
#: but the client's type (the Messages and Chat Completions clients of a platform whose scope is not read
#: from the client: not Bedrock's or Azure's); a google-genai client's under (client type, dialect, api,
#: platform), its platform read from the instance each time (``vertexai``). The Responses host check and a
#: boto3 client's service are read from the instance, so those are never kept. An adapter is shared
#: configuration (:data:`_DEFAULT_ADAPTERS`), so the entry cannot go stale; bounded, cleared when full.
_BY_TYPE: dict[tuple[Any, ...], Adapter] = {}
_BY_TYPE_MAX = 64
#: the platforms whose payload scope :func:`_scope` reads from the client instance
_INSTANCE_SCOPED = ("bedrock", "azure")


def _by_type(key: tuple[Any, ...], keep: bool, adapter: Adapter) -> Adapter:
    """``adapter``, kept in :data:`_BY_TYPE` under ``key`` when ``keep``."""
    return remember(_BY_TYPE, key, adapter, _BY_TYPE_MAX) if keep else adapter


def _anthropic(platform: str, dialect: str = "anthropic", scope: str = "") -> Callable[[], Adapter]:
    return lambda: AnthropicAdapter(platform=platform, dialect=dialect, scope=scope)


def _interactions(platform: str) -> Callable[[], Adapter]:
    def build() -> Adapter:
        from reasonstate.adapters.gemini_interactions import InteractionsAdapter

        return InteractionsAdapter(platform=platform)

    return build


def _gemini(platform: str) -> Callable[[], Adapter]:
    def build() -> Adapter:
        from reasonstate.adapters.gemini import GeminiAdapter

        return GeminiAdapter(platform=platform)

    return build


def _converse() -> Adapter:
    from reasonstate.adapters.bedrock_converse import BedrockConverseAdapter

    return BedrockConverseAdapter()


def _service(client: Any) -> str | None:
    """A botocore client's service name (``bedrock-runtime``), read from its public ``meta``."""
    meta = getattr(client, "meta", None)
    model = getattr(meta, "service_model", None)
    name = getattr(model, "service_name", None)
    return name if isinstance(name, str) else None


def _responses(platform: str, scope: str = "") -> Callable[[], Adapter]:
    def build() -> Adapter:
        from reasonstate.adapters.openai_responses import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter(platform=platform, scope=scope)

    return build


def _chat(dialect: str, platform: str, scope: str = "") -> Callable[[], Adapter]:
    def build() -> Adapter:
        from reasonstate.adapters.openai_chat import OpenAIChatAdapter

        return OpenAIChatAdapter(dialect=dialect, platform=platform, scope=scope)

    return build


def adapter_for(client: Any, *, dialect: str | None = None, api: str | None = None) -> Adapter:
    """The adapter for a vendor client, chosen from its type (without importing the vendor SDK).

    ``anthropic.Anthropic`` → Messages. ``openai.OpenAI`` → Responses by default; ``api="chat"`` or a
    ``dialect`` (``"openai"``, ``"deepseek"``, ``"vllm"``, ``"sglang"``) → Chat Completions.
    ``google.genai.Client`` (or its ``.aio``) → Gemini generateContent, or with ``api="interactions"`` the
    Interactions API. The platform comes from the client too (:func:`platform_for`): ``AnthropicBedrock``/
    ``AnthropicVertex`` → Messages on Bedrock/Vertex, ``AzureOpenAI`` → Responses or Chat on Azure,
    google-genai with ``vertexai=True`` → Vertex; a boto3 ``bedrock-runtime`` client → Bedrock Converse. The
    adapter is one shared per process for each API, platform (and dialect) and the account or resource the
    platform binds payloads to (:func:`scope_for`): adapters hold configuration only.
    """
    key: tuple[Any, ...] = (type(client), dialect, api)
    plain_key = (dialect is None or type(dialect) is str) and (api is None or type(api) is str)
    if plain_key:
        found = _BY_TYPE.get(key)
        if found is not None:
            return found
    kind = _kind(client)
    platform = platform_for(client)
    if kind.genai is not None and plain_key:  # google-genai: the platform is the instance's (vertexai)
        key = (*key, platform)
        found = _BY_TYPE.get(key)
        if found is not None:
            return found
    scope = _scope(client, platform)
    at = "" if platform == FIRST_PARTY else f"@{bound(platform, scope)}"
    if kind.genai is not None:
        if dialect is not None or api not in (None, "generate_content", "interactions"):
            raise InvalidOption(
                "the google-genai client speaks generateContent (the default) or api='interactions' "
                "(the Interactions API) here: pass no dialect="
            )
        if api == "interactions":
            # Vertex AI serves it too: the SDK sends it to {api_version}/projects/P/locations/L/interactions
            # (docs/protocols.md §5.6)
            return _by_type(key, plain_key, _default(f"interactions{at}", _interactions(platform)))
        return _by_type(key, plain_key, _default(f"generate_content{at}", _gemini(platform)))
    modules = kind.modules
    if "anthropic" in modules:
        from reasonstate.adapters.anthropic import DIALECTS as MESSAGES_DIALECTS

        if api not in (None, "messages"):
            raise InvalidOption("the Anthropic client speaks the Messages API only: pass no api=")
        if dialect not in (None, "anthropic"):
            # an Anthropic-compatible endpoint (docs/protocols.md §10.8): a platform of its own
            if dialect not in MESSAGES_DIALECTS or platform != FIRST_PARTY:
                raise InvalidOption(
                    f"unknown Messages dialect {dialect!r} for {type(client).__name__}; expected one of "
                    f"{MESSAGES_DIALECTS} on an anthropic.Anthropic client"
                )
            return _by_type(key, plain_key, _default(f"messages@{dialect}", _anthropic(platform, dialect)))
        adapter = _default(f"messages{at}", _anthropic(platform, scope=scope))
        return _by_type(key, plain_key and platform not in _INSTANCE_SCOPED, adapter)
    if "openai" in modules:
        if dialect is not None or api == "chat":
            from reasonstate.adapters.openai_chat import DIALECTS

            chosen = dialect or "openai"
            if chosen not in DIALECTS:
                raise InvalidOption(f"unknown chat dialect {dialect!r}; expected one of {DIALECTS}")
            adapter = _default(f"chat:{chosen}{at}", _chat(chosen, platform, scope))
            return _by_type(key, plain_key and platform not in _INSTANCE_SCOPED, adapter)
        if api not in (None, "responses"):
            raise InvalidOption(f"unknown api {api!r} for an OpenAI client; use 'responses' or 'chat'")
        host = str(getattr(client, "base_url", ""))
        for name in ("deepseek", "vllm", "sglang"):
            if name in host.lower():
                raise InvalidOption(
                    f"this is an OpenAI client for {host}: for an OpenAI-compatible server pass "
                    f"dialect={name!r} (the Responses API is OpenAI's own)"
                )
        return _default(f"responses{at}", _responses(platform, scope))
    if "botocore" in modules and _service(client) == "bedrock-runtime":
        if dialect is not None or api not in (None, "converse"):
            raise InvalidOption(
                "a bedrock-runtime client speaks Converse only here: pass no dialect= or api="
            )
        return _default("converse", _converse)
    raise InvalidOption(
        f"no adapter for client type {type(client).__module__}.{type(client).__qualname__}: pass an "
        "anthropic, openai or google-genai client, or adapter="
    )
