"""What the OpenAI-family emulators share on top of the common lifecycle (:class:`ScriptedEmulator`): real
``openai`` clients, OpenAI's error envelope, bearer auth, fault helpers, and the token-level prefix
arithmetic both cache simulations stand on.

The emulators themselves live next door: :mod:`reasonstate.testing.openai_responses`
(``POST /v1/responses``) and :mod:`reasonstate.testing.openai_chat` (``POST /v1/chat/completions`` with
the openai, deepseek, vllm and sglang dialects). Like every emulator they are written from
docs/protocols.md alone and never import ``reasonstate.adapters``, ``reasonstate.session`` or
``reasonstate.state``; the ``openai`` SDK is imported only inside :meth:`OpenAIFamilyEmulator.client`
and :meth:`OpenAIFamilyEmulator.async_client`, so this module imports without it.

Model aliases (both emulators; stated once here). OpenAI answers a request for a model *alias* with the
dated snapshot id it points to: ``"model": "gpt-5"`` comes back as ``"model": "gpt-5-2025-08-07"``.
:data:`MODEL_ALIASES` is taken from the "Snapshots" section of https://platform.openai.com/docs/models/gpt-5
(and the gpt-5-mini / gpt-5-nano pages it links to). Each emulator resolves the requested name with
:meth:`OpenAIFamilyEmulator.resolve_model` (one lookup, not transitive; a dated id or an unknown name is
returned unchanged) and uses the resolved id for the response's ``model`` (JSON and every streamed event
or chunk that carries it) and for everything it binds to a model (encrypted reasoning content, prompt-cache
namespaces, DeepSeek's persisted units), so an alias and its dated id are one model. The constructors'
``aliases={alias: model_id}`` add entries or override them (map an alias to itself to stop resolving it).

Token arithmetic (used by both emulators, stated once here):
  * the prompt of a request is one text ``P`` (each emulator's docstring defines its rendering);
  * ``prompt_tokens = count_tokens(P) = ceil(len(P.encode()) / 4)``, i.e. token ``i`` is the byte slice
    ``P[4i:4i+4]`` (the last token may be shorter);
  * two prompts share their first ``t`` tokens iff those byte slices are equal, so
    ``shared_tokens(P, Q) = lcp // 4``, or ``ceil(lcp / 4)`` when ``P == Q`` (``lcp`` is the length of
    their common byte prefix): :func:`shared_tokens`;
  * item-aligned variant (the Responses emulator): the prompt is a sequence of rendered items, each its
    own token run (``count_tokens(item)``; token ``i`` of an item is its byte slice ``[4i:4i+4]``), so
    ``prompt_tokens = Σ count_tokens(item)`` and two prompts share every token of their common leading
    items plus ``lcp // 4`` tokens of the first item where they differ: :func:`shared_item_tokens`. A
    prompt that extends an earlier one therefore shares exactly that earlier prompt's token count;
  * OpenAI's rule (docs/protocols.md §1.5): nothing is cached below 1024 prompt tokens, and hits come in
    128-token increments above 1024: :func:`openai_cached_tokens`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reasonstate._extras import needs
from reasonstate.testing._server import (
    Fault,
    JSONResponse,
    RecordedRequest,
    Route,
    ScriptedEmulator,
    Transform,
)
from reasonstate.testing._tool_schema import schema_problem
from reasonstate.testing.script import ModelAction, Responder, Script

if TYPE_CHECKING:
    import openai

__all__ = [
    "DOCS_GPT5_MODEL",
    "DOCS_MODELS",
    "KNOWN_MODELS",
    "MODEL_ALIASES",
    "REASONING_EFFORTS",
    "OpenAIFamilyEmulator",
    "Transform",
    "canonical_json",
    "effort_error",
    "masked_key",
    "openai_cached_tokens",
    "openai_error",
    "shared_item_tokens",
    "shared_tokens",
    "tool_schema_error",
]

DOCS_GPT5_MODEL = "https://platform.openai.com/docs/models/gpt-5"

#: Alias → the dated snapshot id OpenAI answers with (``DOCS_GPT5_MODEL``, "Snapshots").
MODEL_ALIASES: dict[str, str] = {
    "gpt-5": "gpt-5-2025-08-07",
    "gpt-5-mini": "gpt-5-mini-2025-08-07",
    "gpt-5-nano": "gpt-5-nano-2025-08-07",
}

DOCS_MODELS = "https://platform.openai.com/docs/models"

#: The model ids the OpenAI emulators serve (``DOCS_MODELS``: the current GPT-5 family and the reasoning
#: models still listed, plus the dated ids of :data:`MODEL_ALIASES`). Any other ``model`` is OpenAI's
#: unknown-model error: 404 ``model_not_found`` "The model `X` does not exist or you do not have access to
#: it." ([3P] rd-1-2022/ai-openai-helloworld#9, continuedev/continue#10832).
KNOWN_MODELS: frozenset[str] = frozenset(
    {
        *MODEL_ALIASES.values(),
        "gpt-5.1",
        "gpt-5.2",
        "gpt-5.4",
        "gpt-5.5",
        "gpt-5.5-pro",
        "gpt-5.6",
        "gpt-4.1",
        "gpt-4o",
        "o3",
        "o4-mini",
    }
)

#: ``reasoning.effort`` (Responses) and ``reasoning_effort`` (Chat Completions) values ([SDK] openai
#: ``types/shared/reasoning_effort.py``); another value is 400 ``invalid_value`` "Invalid value: 'X'.
#: Supported values are: ..." ([3P] stanford-crfm/helm#3501).
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def openai_error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """OpenAI's error envelope ``{"error": {"message", "type", "param", "code"}}`` (docs/protocols.md §0)."""
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return JSONResponse(status, body, dict(headers or {}))


def masked_key(key: str) -> str:
    """A key as OpenAI's 401 quotes it: whole when short, else its first 8 and last 4 characters around
    one ``*`` per hidden character ([3P] continuedev/continue#9358 ``kk``, #12778 ``YOUR_OPE***_KEY``)."""
    if len(key) <= 12:
        return key
    return key[:8] + "*" * (len(key) - 12) + key[-4:]


def effort_error(value: Any, param: str) -> JSONResponse:
    """OpenAI's 400 for a reasoning effort outside :data:`REASONING_EFFORTS`."""
    supported = ", ".join(f"'{e}'" for e in REASONING_EFFORTS[:-1]) + f", and '{REASONING_EFFORTS[-1]}'"
    message = f"Invalid value: {value!r}. Supported values are: {supported}."
    return openai_error(400, message, param=param, code="invalid_value")


def tool_schema_error(tools: Any, *, nested: bool) -> JSONResponse | None:
    """OpenAI's 400 ``invalid_function_parameters`` for the first function tool whose ``parameters`` is
    not a valid object schema (None when all are). ``nested``: Chat Completions' ``{"type": "function",
    "function": {...}}`` (param ``tools[i].function.parameters``), else the Responses flat form.
    Source: [3P] github/github-mcp-server#1548, bytedance/trae-agent#173, alibaba/spring-ai-alibaba#4576."""
    if not isinstance(tools, list):
        return None
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue
        spec = tool.get("function") if nested else tool
        if not isinstance(spec, dict) or "parameters" not in spec:
            continue  # a function without parameters takes none
        problem = schema_problem(spec["parameters"])
        if problem is not None:
            param = f"tools[{i}].function.parameters" if nested else f"tools[{i}].parameters"
            message = f"Invalid schema for function '{spec.get('name')}': {problem}."
            return openai_error(400, message, param=param, code="invalid_function_parameters")
    return None


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept as is: the rendering the cache simulations tokenise."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def shared_tokens(prompt: bytes, earlier: bytes) -> int:
    """How many leading tokens ``prompt`` shares with ``earlier`` (4-byte tokens, see the module doc)."""
    lo, hi = 0, min(len(prompt), len(earlier))
    while lo < hi:  # binary search on slice equality: the comparisons run in C
        mid = (lo + hi + 1) // 2
        if prompt[:mid] == earlier[:mid]:
            lo = mid
        else:
            hi = mid - 1
    if lo == len(prompt) == len(earlier):
        return math.ceil(lo / 4)
    return lo // 4


def shared_item_tokens(prompt: Sequence[bytes], earlier: Sequence[bytes]) -> int:
    """How many leading tokens two item-aligned prompts share (see the module doc).

    Every token of the common leading items, plus ``lcp // 4`` tokens of the first pair of items that
    differ (each item's tokens start at its own first byte, so a partial match never crosses an item).
    """
    shared = 0
    for mine, theirs in zip(prompt, earlier, strict=False):
        if mine == theirs:
            shared += math.ceil(len(mine) / 4)
            continue
        lcp = 0
        limit = min(len(mine), len(theirs))
        while lcp < limit and mine[lcp] == theirs[lcp]:
            lcp += 1
        return shared + lcp // 4
    return shared


def openai_cached_tokens(prompt_tokens: int, matched_tokens: int) -> int:
    """OpenAI's reported ``cached_tokens`` (docs/protocols.md §1.5).

    ``0`` when the prompt is under 1024 tokens or the match is; otherwise the largest ``1024 + 128k``
    that is ``<= matched_tokens``.
    """
    if prompt_tokens < 1024 or matched_tokens < 1024:
        return 0
    return 1024 + 128 * ((matched_tokens - 1024) // 128)


#: the ``api-version`` the Azure clients of :meth:`OpenAIFamilyEmulator.client` send (any is accepted)
AZURE_API_VERSION = "2025-04-01-preview"
#: the secret an Azure emulator signs with by default: not OpenAI's, so neither verifies the other's blobs
AZURE_SECRET = b"reasonstate-emulator-secret-v1:azure"
#: Azure's 401 message (SciSharp/BotSharp#386, microsoft/semantic-kernel#10337)
AZURE_DENIED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key "
    "for an active subscription and use a correct regional API endpoint for your resource."
)


def _on_azure(route: Route) -> Route:
    """``route`` at Azure's paths: ``/v1/x`` (or ``/x``) served at ``/openai/x``, ``/openai/v1/x`` and
    ``/openai/deployments/{name}/x`` (how ``openai.AzureOpenAI`` builds them: openai/lib/azure.py)."""
    tail = re.sub(r"^/v1(?=/)", "", route.pattern)
    return Route(route.method, r"/openai(?:/v1|/deployments/[^/]+)?" + tail, route.handler)


class OpenAIFamilyEmulator(ScriptedEmulator):
    """Base of the OpenAI-family emulators: the common lifecycle plus real ``openai`` clients.

    Use it as a context manager (or :meth:`start`/:meth:`stop`). ``base_url`` is the server root
    (``http://127.0.0.1:PORT``); :meth:`client` points the SDK at ``root + sdk_path`` (``/v1`` for OpenAI).
    Every request must carry ``Authorization: Bearer <key>`` with a key of ``api_key`` (``test-key`` or
    ``emulator-key`` by default): no key is 401 "You didn't provide an API key...", another key 401
    ``invalid_api_key`` (docs/protocols.md §0). A ``model`` outside the vendor's table is refused
    (:meth:`_unknown_model`).
    The handler runs under one lock, so concurrent requests see a consistent store and cache.
    ``aliases`` is the complete alias → dated id table this emulator resolves (each subclass merges its
    defaults with the caller's entries before it gets here).

    ``platform="azure"`` serves the API as Azure OpenAI does (docs/protocols.md §10.3), for a real
    ``openai.AzureOpenAI`` (:meth:`client` builds one): the paths under ``/openai`` (``/openai/responses``,
    ``/openai/v1/...``, ``/openai/deployments/{name}/chat/completions``), the key in an ``api-key`` header
    (an Entra ID bearer token works too), Azure's 401 body ``{"error": {"code": "401", "message": "Access
    denied due to invalid subscription key or wrong API endpoint. ..."}}`` (SciSharp/BotSharp#386), and
    its own default secret: an ``encrypted_content`` blob issued by Azure does not verify on OpenAI's own
    API or the other way round (another service, another key), the 400 ``invalid_encrypted_content``.
    ``resource=`` names the Azure resource this emulator stands for: each resource seals with a key of its
    own, so another resource's blob is refused alike (docs/protocols.md §10.1).
    """

    sdk_path = "/v1"
    #: ``"openai"`` (api.openai.com, or the compatible server of a chat dialect) or ``"azure"``
    platform = "openai"

    def __init__(
        self,
        script: Script | Iterable[ModelAction] | Responder = (),
        *,
        secret: bytes | str | None = None,
        transform: Transform | None = None,
        name: str = "openai-emulator",
        aliases: Mapping[str, str] | None = None,
        api_key: str | Iterable[str] | None = None,
        known_models: Iterable[str] = KNOWN_MODELS,
        models: Iterable[str] = (),
        platform: str = "openai",
        resource: str | None = None,
    ) -> None:
        if platform not in ("openai", "azure"):
            raise ValueError(f"platform must be 'openai' or 'azure', got {platform!r}")
        if resource is not None and platform != "azure":
            raise ValueError("resource= names an Azure OpenAI resource: pass platform='azure'")
        self.platform = platform
        routes = self._routes()
        if platform == "azure":
            routes = [_on_azure(r) for r in routes]
            if secret is None:  # each resource seals with its own key (docs/protocols.md §10.1, §10.3)
                secret = AZURE_SECRET if resource is None else AZURE_SECRET + b":" + resource.encode()
        super().__init__(
            routes,
            name=name,
            script=script,
            secret=secret,
            transform=transform,
            aliases=aliases,
            api_key=api_key,
            known_models=known_models,
            models=models,
        )

    # -- subclass hooks ----------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        raise NotImplementedError

    # -- clients -----------------------------------------------------------------------------------
    def client(self, **kw: Any) -> openai.OpenAI:
        """A real ``openai.OpenAI`` pointed at this emulator (``max_retries=0``; ``kw`` overrides); on
        ``platform="azure"`` a real ``openai.AzureOpenAI`` (``azure_endpoint``, ``api_version``)."""
        with needs("openai"):
            import openai

        if self.platform == "azure":
            return openai.AzureOpenAI(**self._azure_kwargs(kw))
        return openai.OpenAI(**self._client_kwargs(kw))

    def async_client(self, **kw: Any) -> openai.AsyncOpenAI:
        """A real ``openai.AsyncOpenAI`` pointed at this emulator (``max_retries=0``; ``kw`` overrides); on
        ``platform="azure"`` a real ``openai.AsyncAzureOpenAI``."""
        with needs("openai"):
            import openai

        if self.platform == "azure":
            return openai.AsyncAzureOpenAI(**self._azure_kwargs(kw))
        return openai.AsyncOpenAI(**self._client_kwargs(kw))

    def _azure_kwargs(self, kw: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "azure_endpoint": self.base_url,
            "api_key": "test-key",
            "api_version": AZURE_API_VERSION,
            "max_retries": 0,
            **kw,
        }

    # -- faults ------------------------------------------------------------------------------------
    @staticmethod
    def rate_limited(retry_after: float = 1.0) -> Fault:
        """A 429 in OpenAI's shape (``code: rate_limit_exceeded``) with a ``retry-after`` header."""
        message = f"Rate limit reached for requests. Please try again in {retry_after:g}s."
        body = {
            "error": {"message": message, "type": "requests", "param": None, "code": "rate_limit_exceeded"}
        }
        return Fault.http(429, body, {"retry-after": f"{retry_after:g}"})

    @staticmethod
    def server_error() -> Fault:
        """A 500 in OpenAI's shape."""
        message = "The server had an error while processing your request. Sorry about that!"
        return Fault.http(
            500, {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
        )

    # -- request plumbing shared by the handlers ---------------------------------------------------
    def _unauthorized(self, request: RecordedRequest) -> JSONResponse | None:
        auth = request.headers.get("authorization", "")
        key = auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else ""
        if self.platform == "azure":
            # Azure reads the resource key from ``api-key`` (or an Entra ID bearer token): one 401 for
            # both a missing and a wrong key (docs/protocols.md §10.3)
            key = request.headers.get("api-key", "") or key
            if self.key_accepted(key):
                return None
            return JSONResponse(401, {"error": {"code": "401", "message": AZURE_DENIED}})
        if not key:
            message = (
                "You didn't provide an API key. You need to provide your API key in an Authorization header "
                "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
            return openai_error(401, message, code=None)
        if self.key_accepted(key):
            return None
        return self._invalid_key(key)

    def _invalid_key(self, key: str) -> JSONResponse:
        """The vendor's 401 for a key it did not issue ([3P] continuedev/continue#9358)."""
        message = (
            f"Incorrect API key provided: {masked_key(key)}. You can find your API key at "
            "https://platform.openai.com/account/api-keys."
        )
        return openai_error(401, message, code="invalid_api_key")

    def _unknown_model(self, model: str) -> JSONResponse | None:
        """The vendor's answer to a ``model`` it does not serve (None when it does)."""
        if self.knows_model(model):
            return None
        message = f"The model `{model}` does not exist or you do not have access to it."
        return openai_error(404, message, code="model_not_found")

    def _json_body(self, request: RecordedRequest) -> dict[str, Any] | JSONResponse:
        """The JSON object of an authorized request that names a served model, or what OpenAI answers
        instead: 401 without a bearer key or with one it did not issue (checked first), 400 for a body
        that is not a JSON object or has no string ``model``, then :meth:`_unknown_model`."""
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        try:
            body = request.json()
        except ValueError:
            return openai_error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return openai_error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body.get("model"), str):
            return openai_error(400, "you must provide a model parameter", param="model")
        unknown = self._unknown_model(body["model"])
        return unknown if unknown is not None else body
