"""The one place reasonstate does I/O: a request goes out through the vendor SDK, the answer comes back.

One skeleton serves every SDK family (``anthropic``, ``openai``: both expose ``<resource>.with_raw_response
.create``, whose HTTP response gives the exact bytes the SDK sent and received). :func:`call` and
:func:`acall` differ only where they await. Streamed answers are fed line by line to the codec's pure
assembler (:mod:`reasonstate.adapters.streams`) as raw bytes (split at CR/LF only: ``iter_lines``
would also split inside a JSON string at U+2028), so a streamed and a non-streamed answer decode alike.

google-genai has no raw-response wrapper: its calls go through :func:`_genai_call` / :func:`_genai_acall`
(the section at the end), which read the exact bytes from the client's own ``httpx2`` client through its
event hooks.

Failures: the SDK's status errors become :class:`~reasonstate.errors.VendorError` (or the codec's more
specific subclass), its other errors a ``VendorError`` — a :class:`~reasonstate.errors.StreamInterrupted`
while streaming, as is any transport error that escapes the SDK mid-stream. The SDK's exception is kept as
``__cause__``; reasonstate's own errors pass through.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from reasonstate.adapters.base import Adapter, Assembler, VendorRequest
from reasonstate.errors import (
    InvalidOption,
    MalformedResponse,
    ProtocolViolation,
    ReasonStateError,
    StreamInterrupted,
    VendorError,
)

__all__ = ["CallResult", "acall", "call", "status_message"]


@attrs.frozen(slots=True)
class CallResult:
    """What a vendor call returned: the response JSON as received (or assembled) and the bytes sent."""

    response: Any
    request_body: bytes | None = None


def call(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    """One vendor call on a sync client."""
    if adapter.endpoint.sdk == GENAI:
        return _genai_call(adapter, client, request, stream)
    with _translated(adapter, request, stream):
        create = _resource(client, adapter).with_raw_response.create
        if not stream:
            raw = create(**request.kwargs)
            return CallResult(_json(raw.http_response.content, adapter), raw.http_response.request.content)
        assembler, kwargs = _streamed(adapter, request)
        http = create(**kwargs).http_response
        try:
            for chunk in http.iter_bytes():
                assembler.feed_bytes(chunk)
        finally:
            http.close()
        return CallResult(assembler.finish(), http.request.content)


async def acall(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    """One vendor call on an async client: :func:`call` with awaits."""
    if adapter.endpoint.sdk == GENAI:
        return await _genai_acall(adapter, client, request, stream)
    with _translated(adapter, request, stream):
        create = _resource(client, adapter).with_raw_response.create
        if not stream:
            raw = await create(**request.kwargs)
            return CallResult(_json(raw.http_response.content, adapter), raw.http_response.request.content)
        assembler, kwargs = _streamed(adapter, request)
        http = (await create(**kwargs)).http_response
        try:
            async for chunk in http.aiter_bytes():
                assembler.feed_bytes(chunk)
        finally:
            await http.aclose()
        return CallResult(assembler.finish(), http.request.content)


def _streamed(adapter: Adapter, request: VendorRequest) -> tuple[Assembler, dict[str, Any]]:
    """A fresh assembler, and the kwargs of the streamed form of ``request``."""
    endpoint = adapter.endpoint
    if endpoint.assembler is None:
        raise ProtocolViolation(
            f"{endpoint.label} does not stream here; create the session with stream=False"
        )
    kwargs = {**request.kwargs, "stream": True}
    if endpoint.stream_options:
        kwargs["stream_options"] = {**(request.kwargs.get("stream_options") or {}), **endpoint.stream_options}
    return endpoint.assembler(), kwargs


def _resource(client: Any, adapter: Adapter) -> Any:
    target = client
    for name in adapter.endpoint.resource:
        target = getattr(target, name)
    return target


def _json(body: bytes, adapter: Adapter) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise MalformedResponse(f"{adapter.endpoint.label} response is not JSON: {body[:80]!r}") from exc


def status_message(label: str, exc: Any) -> str:
    """``"<label> <status> <type>: <message>"`` from an SDK status error.

    The SDKs expose the body differently: Anthropic the whole envelope (``{"error": {...}}``), openai the
    inner error object; both are read.
    """
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        body = body["error"]
    if isinstance(body, Mapping) and "message" in body:
        return f"{label} {exc.status_code} {body.get('type')}: {body.get('message')}"
    return f"{label} {exc.status_code}: {exc}"


@contextlib.contextmanager
def _translated(adapter: Adapter, request: VendorRequest, stream: bool) -> Iterator[None]:
    sdk = importlib.import_module(adapter.endpoint.sdk)
    label = adapter.endpoint.label
    try:
        yield
    except sdk.APIStatusError as exc:
        status_error = adapter.endpoint.status_error
        specific = status_error(exc, request) if status_error is not None else None
        if specific is not None:
            raise specific from exc
        raise VendorError(status_message(label, exc), status=exc.status_code, body=exc.body) from exc
    except sdk.APIError as exc:
        cls = StreamInterrupted if stream else VendorError
        raise cls(f"{label} call failed: {type(exc).__name__}: {exc}") from exc
    except ReasonStateError:
        raise
    except Exception as exc:
        if stream:
            raise StreamInterrupted(f"the stream broke: {type(exc).__name__}: {exc}") from exc
        raise


# -- google-genai: the exact bytes through the client's httpx2 event hooks --------------------------------
#
# google-genai parses every answer into pydantic models (re-encoding signatures, dropping unknown fields)
# and has no raw-response wrapper. Its HTTP goes through an httpx2 client the ``genai.Client`` holds (the one
# the user passed with ``HttpOptions(httpx_client=...)``, or the one the SDK built): reasonstate adds one
# request hook and one response hook to it (idempotently, once per httpx2 client) and never replaces the
# client. The hooks do nothing unless the current context has an exchange open: a call opens one in a
# ``ContextVar``, so concurrent calls (threads, tasks) and the user's own calls on the same client never see
# each other's bytes. The request hook keeps the body the SDK serialized; the response hook reads the body
# (decoded, for a streamed answer the whole SSE body) before the SDK parses it. With a retry the last
# exchange wins. Automatic continuation is off in every request (the codec sets it), so one SDK call is one
# exchange.

GENAI = "google.genai"


@attrs.define(slots=True)
class _Exchange:
    """The bytes of the HTTP exchange behind one SDK call (the last one, after any retry)."""

    request_body: bytes | None = None
    response_body: bytes | None = None


_EXCHANGE: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar(
    "reasonstate_genai_exchange", default=None
)
_HOOKS_LOCK = threading.Lock()


def _on_request(request: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is not None:
        exchange.request_body, exchange.response_body = bytes(request.content), None


def _on_response(response: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is not None:
        exchange.response_body = response.read()


async def _aon_request(request: Any) -> None:
    _on_request(request)


async def _aon_response(response: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is not None:
        exchange.response_body = await response.aread()


def _genai_call(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    models, api_client = _genai_target(client, is_async=False)
    with _genai_translated(adapter, request, stream), _exchange(api_client, is_async=False) as exchange:
        assembler = _streamed(adapter, request)[0] if stream else None
        if assembler is not None:
            for _ in models.generate_content_stream(**request.kwargs):
                pass  # the SDK parses the chunks; the answer is read from the bytes the hook kept
        else:
            models.generate_content(**request.kwargs)
        return _genai_result(adapter, exchange, assembler)


async def _genai_acall(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    """:func:`_genai_call` with awaits, on ``client.aio.models``."""
    models, api_client = _genai_target(client, is_async=True)
    with _genai_translated(adapter, request, stream), _exchange(api_client, is_async=True) as exchange:
        assembler = _streamed(adapter, request)[0] if stream else None
        if assembler is not None:
            async for _ in await models.generate_content_stream(**request.kwargs):
                pass
        else:
            await models.generate_content(**request.kwargs)
        return _genai_result(adapter, exchange, assembler)


def _genai_target(client: Any, *, is_async: bool) -> tuple[Any, Any]:
    """``(models resource, the SDK's API client)``: a ``genai.Client`` serves sync calls on ``.models``
    and async calls on ``.aio.models``; a ``client.aio`` (``AsyncClient``) serves async calls only."""
    owner = client.aio if is_async and hasattr(client, "aio") else client
    return owner.models, owner._api_client


@contextlib.contextmanager
def _exchange(api_client: Any, *, is_async: bool) -> Iterator[_Exchange]:
    _install_hooks(api_client, is_async=is_async)
    exchange = _Exchange()
    token = _EXCHANGE.set(exchange)
    try:
        yield exchange
    finally:
        _EXCHANGE.reset(token)


def _install_hooks(api_client: Any, *, is_async: bool) -> None:
    """Add the capture hooks to the httpx2 client the SDK sends this call's request through (once)."""
    hooks: tuple[Any, Any]
    if is_async:
        uses_aiohttp = getattr(api_client, "_use_aiohttp", None)
        if callable(uses_aiohttp) and uses_aiohttp():
            raise InvalidOption(
                "this genai.Client sends async requests through aiohttp, whose exchange reasonstate cannot "
                "read: build it with HttpOptions(httpx_async_client=httpx2.AsyncClient()) (or "
                "async_client_args={'transport': ...}) so they go through httpx2"
            )
        http, hooks = api_client._async_httpx_client, (_aon_request, _aon_response)
    else:
        google_auth = getattr(api_client, "_use_google_auth_sync", None)
        if callable(google_auth) and google_auth():
            raise InvalidOption(
                "this genai.Client sends requests through a google-auth requests session (mTLS), whose "
                "exchange reasonstate cannot read: pass HttpOptions(httpx_client=httpx2.Client(...))"
            )
        http, hooks = api_client._httpx_client, (_on_request, _on_response)
    if http is None:
        raise InvalidOption("this genai.Client has no httpx2 client for these calls")
    with _HOOKS_LOCK:
        _add_hooks(http, hooks)
        # google-genai's default async client sends through one inner client per event loop, built from
        # its construction kwargs (``_PerLoopAsyncClientMixin``): the hooks go on those as well, under the
        # lock it builds them under, so none is built from the kwargs as they were before
        kwargs = getattr(http, "_client_kwargs", None)
        if not isinstance(kwargs, dict):
            return
        with getattr(http, "_loop_clients_lock", None) or contextlib.nullcontext():
            existing = kwargs.get("event_hooks") or {}
            if hooks[0] not in existing.get("request", ()):
                kwargs["event_hooks"] = {
                    "request": [*existing.get("request", ()), hooks[0]],
                    "response": [*existing.get("response", ()), hooks[1]],
                }
            for inner in list(dict(getattr(http, "_loop_clients", None) or {}).values()):
                _add_hooks(inner, hooks)


def _add_hooks(http: Any, hooks: tuple[Any, Any]) -> None:
    current = http.event_hooks
    if hooks[0] in current["request"]:
        return
    # a new mapping, so a request being sent meanwhile iterates the old lists undisturbed
    http.event_hooks = {
        "request": [*current["request"], hooks[0]],
        "response": [*current["response"], hooks[1]],
    }


def _genai_result(adapter: Adapter, exchange: _Exchange, assembler: Assembler | None) -> CallResult:
    """The answer as received: the JSON body, or the SSE body assembled into the same JSON."""
    body = exchange.response_body
    if body is None:
        raise InvalidOption(
            "the genai.Client answered without an HTTP exchange through its httpx2 client (a replay or "
            "custom API client?): reasonstate needs the exact bytes"
        )
    if assembler is None:
        return CallResult(_json(body, adapter), exchange.request_body)
    assembler.feed_bytes(body)
    return CallResult(assembler.finish(), exchange.request_body)


@contextlib.contextmanager
def _genai_translated(adapter: Adapter, request: VendorRequest, stream: bool) -> Iterator[None]:
    """google-genai's failures as reasonstate errors: ``errors.APIError`` (``ClientError`` 4xx,
    ``ServerError`` 5xx) → :class:`VendorError` with the status and the error envelope; httpx2/httpx
    transport errors → :class:`VendorError` (:class:`StreamInterrupted` while streaming); the SDK refusing
    the kwargs before sending (pydantic) → :class:`ProtocolViolation`; an answer it cannot parse →
    :class:`MalformedResponse`. The SDK's exception is kept as ``__cause__``."""
    errors = importlib.import_module("google.genai.errors")
    import pydantic

    label = adapter.endpoint.label
    try:
        yield
    except errors.APIError as exc:
        status = exc.code if isinstance(exc.code, int) else None
        message = f"{label} {exc.code} {exc.status}: {exc.message}"
        status_error = adapter.endpoint.status_error
        specific = status_error(exc, request) if status_error is not None else None
        if specific is not None:
            raise specific from exc
        raise VendorError(message, status=status, body=exc.details) from exc
    except ReasonStateError:
        raise
    except pydantic.ValidationError as exc:
        raise ProtocolViolation(f"google-genai refused the request before sending it: {exc}") from exc
    except errors.UnknownApiResponseError as exc:
        raise MalformedResponse(f"{label} answered with something that is not JSON: {exc}") from exc
    except Exception as exc:
        if stream:
            raise StreamInterrupted(f"the stream broke: {type(exc).__name__}: {exc}") from exc
        if _is_transport_error(exc):
            raise VendorError(f"{label} call failed: {type(exc).__name__}: {exc}") from exc
        raise


def _is_transport_error(exc: BaseException) -> bool:
    """An httpx2 (or httpx) transport failure: timeout, connection error, protocol error."""
    return any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx2", "httpx")
        for cls in type(exc).__mro__
    )
