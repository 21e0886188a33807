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
from reasonstate.testing.script import ModelAction, Responder, Script

if TYPE_CHECKING:
    import openai

__all__ = [
    "DOCS_GPT5_MODEL",
    "MODEL_ALIASES",
    "OpenAIFamilyEmulator",
    "Transform",
    "canonical_json",
    "openai_cached_tokens",
    "openai_error",
    "shared_item_tokens",
    "shared_tokens",
]

DOCS_GPT5_MODEL = "https://platform.openai.com/docs/models/gpt-5"

#: Alias → the dated snapshot id OpenAI answers with (``DOCS_GPT5_MODEL``, "Snapshots").
MODEL_ALIASES: dict[str, str] = {
    "gpt-5": "gpt-5-2025-08-07",
    "gpt-5-mini": "gpt-5-mini-2025-08-07",
    "gpt-5-nano": "gpt-5-nano-2025-08-07",
}


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


class OpenAIFamilyEmulator(ScriptedEmulator):
    """Base of the OpenAI-family emulators: the common lifecycle plus real ``openai`` clients.

    Use it as a context manager (or :meth:`start`/:meth:`stop`). ``base_url`` is the server root
    (``http://127.0.0.1:PORT``); :meth:`client` points the SDK at ``root + sdk_path`` (``/v1`` for OpenAI).
    Every request must carry ``Authorization: Bearer <anything>`` or it is answered 401
    (docs/protocols.md §0).
    The handler runs under one lock, so concurrent requests see a consistent store and cache.
    ``aliases`` is the complete alias → dated id table this emulator resolves (each subclass merges its
    defaults with the caller's entries before it gets here).
    """

    sdk_path = "/v1"

    def __init__(
        self,
        script: Script | Iterable[ModelAction] | Responder = (),
        *,
        secret: bytes | str | None = None,
        transform: Transform | None = None,
        name: str = "openai-emulator",
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            self._routes(), name=name, script=script, secret=secret, transform=transform, aliases=aliases
        )

    # -- subclass hooks ----------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        raise NotImplementedError

    # -- clients -----------------------------------------------------------------------------------
    def client(self, **kw: Any) -> openai.OpenAI:
        """A real ``openai.OpenAI`` pointed at this emulator (``max_retries=0``; ``kw`` overrides)."""
        with needs("openai"):
            import openai

        return openai.OpenAI(**self._client_kwargs(kw))

    def async_client(self, **kw: Any) -> openai.AsyncOpenAI:
        """A real ``openai.AsyncOpenAI`` pointed at this emulator (``max_retries=0``; ``kw`` overrides)."""
        with needs("openai"):
            import openai

        return openai.AsyncOpenAI(**self._client_kwargs(kw))

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
    @staticmethod
    def _unauthorized(request: RecordedRequest) -> JSONResponse | None:
        auth = request.headers.get("authorization", "")
        if auth.startswith("Bearer ") and auth[len("Bearer ") :].strip():
            return None
        message = (
            "You didn't provide an API key. You need to provide your API key in an Authorization header "
            "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        )
        return openai_error(401, message, code=None)

    @classmethod
    def _json_body(cls, request: RecordedRequest) -> dict[str, Any] | JSONResponse:
        """The JSON object of an authorized request that names a model, or what OpenAI answers instead:
        401 without a bearer key (checked first), 400 for a body that is not a JSON object or has no
        string ``model``."""
        denied = cls._unauthorized(request)
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
        return body
