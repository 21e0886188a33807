"""The one place reasonstate does I/O: a request goes out through the vendor SDK, the answer comes back.

One skeleton serves every SDK family (``anthropic``, ``openai``: both expose ``<resource>.with_raw_response
.create``, whose HTTP response gives the exact bytes the SDK sent and received). :func:`call` and
:func:`acall` differ only where they await. Streamed answers are fed line by line to the codec's pure
assembler (:mod:`reasonstate.adapters.streams`) as raw bytes (split at CR/LF only: ``iter_lines``
would also split inside a JSON string at U+2028), so a streamed and a non-streamed answer decode alike.
Every streamed answer goes through :func:`open_stream` / :func:`aopen_stream`: iterating the
:class:`Streaming` they return feeds each chunk to the assembler as it arrives and yields the
:class:`~reasonstate.adapters.streams.StreamEvent` values it recorded (``Session.stream``);
``call(stream=True)`` is the same object read to its end, so there is one decode path.

google-genai has no raw-response wrapper: its calls go through :func:`_genai_call` / :func:`_genai_acall`
(the section at the end), which read the exact bytes from the client's own ``httpx2`` client through its
event hooks (for a streamed answer, by teeing the bytes the SDK reads, as it reads them).

Failures: the SDK's status errors become :class:`~reasonstate.errors.VendorError` (or the codec's more
specific subclass), its other errors a ``VendorError`` — a :class:`~reasonstate.errors.StreamInterrupted`
while streaming, as is any transport error that escapes the SDK mid-stream. The SDK's exception is kept as
``__cause__``; reasonstate's own errors pass through.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import attrs

from reasonstate.adapters.base import Adapter, Assembler, VendorRequest
from reasonstate.adapters.streams import StreamEvent
from reasonstate.errors import (
    InvalidOption,
    MalformedResponse,
    ProtocolViolation,
    ReasonStateError,
    StreamInterrupted,
    VendorError,
)

__all__ = [
    "AsyncStreaming",
    "CallResult",
    "Streaming",
    "acall",
    "aopen_stream",
    "call",
    "open_stream",
    "sdk_kwargs",
    "status_message",
]


@attrs.frozen(slots=True)
class CallResult:
    """What a vendor call returned: the response JSON as received (or assembled) and the bytes sent."""

    response: Any
    request_body: bytes | None = None


def call(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    """One vendor call on a sync client (a streamed one is :func:`open_stream` read to its end)."""
    if stream:
        with open_stream(adapter, client, request) as streaming:
            for _ in streaming:
                pass
            return streaming.result()
    if adapter.endpoint.sdk == GENAI:
        return _genai_call(adapter, client, request)
    with _Translated(adapter, request, False):
        raw = _resource(client, adapter).with_raw_response.create(**sdk_kwargs(request.kwargs))
    http = raw.http_response
    return CallResult(_json(http.content, adapter), http.request.content)


async def acall(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    """One vendor call on an async client: :func:`call` with awaits."""
    if stream:
        async with await aopen_stream(adapter, client, request) as streaming:
            async for _ in streaming:
                pass
            return await streaming.result()
    if adapter.endpoint.sdk == GENAI:
        return await _genai_acall(adapter, client, request)
    with _Translated(adapter, request, False):
        raw = await _resource(client, adapter).with_raw_response.create(**sdk_kwargs(request.kwargs))
    http = raw.http_response
    return CallResult(_json(http.content, adapter), http.request.content)


# -- a streamed answer, read as it arrives ------------------------------------------------------------------
#
# One path for every streamed answer: the body's chunks are fed, as they arrive, to the codec's assembler;
# iterating a ``Streaming`` yields the assembler's StreamEvents after each chunk, and ``result()`` is the
# assembled answer once the body has ended. ``call(stream=True)`` is exactly this, read to the end.


class Streaming:
    """A streamed answer on a sync client, open: iterate it for its :class:`StreamEvent` values as the
    bytes arrive; once iteration ends, :meth:`result` is the answer assembled from exactly those bytes.

    ``close()`` (or leaving the ``with`` block) closes the HTTP response, read to its end or not;
    idempotent. Failures while reading are translated as in :func:`call` with ``stream=True``
    (:class:`StreamInterrupted` for a dropped connection, :class:`VendorError` for an error event).
    """

    def __init__(
        self,
        assembler: Assembler,
        pull: Callable[[], bytes | None],
        close: Callable[[], None],
        request_body: Callable[[], bytes | None],
        translated: Callable[[], contextlib.AbstractContextManager[None]],
        pending: bytes | None = None,
    ) -> None:
        self._assembler, self._pull, self._close = assembler, pull, close
        self._request_body, self._translated = request_body, translated
        self._pending = pending
        self._ended = False
        self._closed = False

    def __iter__(self) -> Iterator[StreamEvent]:
        while not self._ended:
            chunk: bytes | None
            failed: ReasonStateError | None = None
            with self._translated():
                if self._pending is not None:
                    chunk, self._pending = self._pending, None
                else:
                    chunk = self._pull()
                if chunk is None:
                    self._ended = True
                    break
                try:
                    self._assembler.feed_bytes(chunk)
                except ReasonStateError as exc:  # what the chunk showed before its error is shown first
                    failed = exc
            yield from self._assembler.events()
            if failed is not None:
                raise failed

    def result(self) -> CallResult:
        """The assembled answer (the body must have been read to its end: iterate first)."""
        if not self._ended:
            raise ProtocolViolation("the stream was not read to its end")
        try:
            with self._translated():
                return CallResult(self._assembler.finish(), self._request_body())
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                self._close()

    def __enter__(self) -> Streaming:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStreaming:
    """:class:`Streaming` on an async client: ``async for`` it, ``await result()``, ``await aclose()``."""

    def __init__(
        self,
        assembler: Assembler,
        pull: Callable[[], Awaitable[bytes | None]],
        close: Callable[[], Awaitable[None]],
        request_body: Callable[[], bytes | None],
        translated: Callable[[], contextlib.AbstractContextManager[None]],
        pending: bytes | None = None,
    ) -> None:
        self._assembler, self._pull, self._close = assembler, pull, close
        self._request_body, self._translated = request_body, translated
        self._pending = pending
        self._ended = False
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        while not self._ended:
            chunk: bytes | None
            failed: ReasonStateError | None = None
            with self._translated():
                if self._pending is not None:
                    chunk, self._pending = self._pending, None
                else:
                    chunk = await self._pull()
                if chunk is None:
                    self._ended = True
                    break
                try:
                    self._assembler.feed_bytes(chunk)
                except ReasonStateError as exc:  # what the chunk showed before its error is shown first
                    failed = exc
            for event in self._assembler.events():
                yield event
            if failed is not None:
                raise failed

    async def result(self) -> CallResult:
        """The assembled answer (the body must have been read to its end: iterate first)."""
        if not self._ended:
            raise ProtocolViolation("the stream was not read to its end")
        try:
            with self._translated():
                return CallResult(self._assembler.finish(), self._request_body())
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                await self._close()

    async def __aenter__(self) -> AsyncStreaming:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def open_stream(adapter: Adapter, client: Any, request: VendorRequest) -> Streaming:
    """Send the streamed form of ``request`` on a sync client; the answer is read as it is iterated.

    Raises before any byte is read when the vendor refuses the request (its status error) or the endpoint
    does not stream (:class:`ProtocolViolation`)."""
    assembler, kwargs = _streamed(adapter, request)
    if adapter.endpoint.sdk == GENAI:
        return _genai_open(adapter, client, request, assembler)
    translated = functools.partial(_Translated, adapter, request, True)
    with translated():
        http = _resource(client, adapter).with_raw_response.create(**kwargs).http_response
    chunks = http.iter_bytes()
    sent = http.request.content
    return Streaming(assembler, lambda: next(chunks, None), http.close, lambda: sent, translated)


async def aopen_stream(adapter: Adapter, client: Any, request: VendorRequest) -> AsyncStreaming:
    """:func:`open_stream` on an async client."""
    assembler, kwargs = _streamed(adapter, request)
    if adapter.endpoint.sdk == GENAI:
        return await _genai_aopen(adapter, client, request, assembler)
    translated = functools.partial(_Translated, adapter, request, True)
    with translated():
        http = (await _resource(client, adapter).with_raw_response.create(**kwargs)).http_response
    chunks = http.aiter_bytes()
    sent = http.request.content

    async def pull() -> bytes | None:
        return await anext(chunks, None)

    return AsyncStreaming(assembler, pull, http.aclose, lambda: sent, translated)


#: the request fields that hold the history: the codecs build these lists afresh for every request, out of
#: plain dicts they own (the memoized closed runs included), so they go to the SDK as they are
_HISTORY_FIELDS = frozenset({"messages", "input", "contents"})


def sdk_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What goes to the vendor SDK: ``kwargs`` with every other value a plain deep copy (no
    :class:`~reasonstate.state.frozen.FrozenDict` / ``FrozenList`` left), so an SDK that edits its input
    in place (google-genai's schema transformer rewrites ``response_schema``) breaks nothing and changes
    nothing in the session, whose options stay frozen. The bytes sent are the same: a plain copy is equal,
    key order included."""
    return {k: v if k in _HISTORY_FIELDS else _plain(v) for k, v in kwargs.items()}


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if kind is tuple:
        return tuple(_plain(v) for v in value)
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _streamed(adapter: Adapter, request: VendorRequest) -> tuple[Assembler, dict[str, Any]]:
    """A fresh assembler, and the kwargs of the streamed form of ``request``."""
    endpoint = adapter.endpoint
    if endpoint.assembler is None:
        raise ProtocolViolation(
            f"{endpoint.label} does not stream here; create the session with stream=False"
        )
    kwargs = {**sdk_kwargs(request.kwargs), "stream": True}
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


class _Translated:
    """The SDK's failures inside the block as reasonstate errors (:func:`_failure`, or
    :func:`_genai_failure` for google-genai), the SDK's exception kept as ``__cause__``; reasonstate's own
    errors pass through. A plain class rather than a generator context manager: it wraps every request."""

    __slots__ = ("_adapter", "_request", "_stream")

    def __init__(self, adapter: Adapter, request: VendorRequest, stream: bool) -> None:
        self._adapter, self._request, self._stream = adapter, request, stream

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if not isinstance(exc, Exception):
            return  # no exception, or a BaseException (KeyboardInterrupt, ...): it propagates as it is
        translate = _genai_failure if self._adapter.endpoint.sdk == GENAI else _failure
        failure = translate(self._adapter, self._request, exc, stream=self._stream)
        if failure is not exc:
            raise failure from exc


def _failure(adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool) -> Exception:
    """The SDK's failure ``exc`` as the reasonstate error to raise from it (``exc`` itself when it passes
    through): a status error → :class:`VendorError` (or the codec's more specific one), another SDK error →
    :class:`VendorError` (:class:`StreamInterrupted` while streaming), any other error while streaming →
    :class:`StreamInterrupted`; reasonstate's own errors pass through."""
    if isinstance(exc, ReasonStateError):
        return exc
    sdk = importlib.import_module(adapter.endpoint.sdk)
    label = adapter.endpoint.label
    if isinstance(exc, sdk.APIStatusError):
        status_error = adapter.endpoint.status_error
        specific = status_error(exc, request) if status_error is not None else None
        if specific is not None:
            return specific
        return VendorError(status_message(label, exc), status=exc.status_code, body=exc.body)
    if isinstance(exc, sdk.APIError):
        cls = StreamInterrupted if stream else VendorError
        return cls(f"{label} call failed: {type(exc).__name__}: {exc}")
    if stream:
        return StreamInterrupted(f"the stream broke: {type(exc).__name__}: {exc}")
    return exc


# -- google-genai: the exact bytes through the client's httpx2 event hooks --------------------------------
#
# google-genai parses every answer into pydantic models (re-encoding signatures, dropping unknown fields)
# and has no raw-response wrapper. Its HTTP goes through an httpx2 client the ``genai.Client`` holds (the one
# the user passed with ``HttpOptions(httpx_client=...)``, or the one the SDK built): reasonstate adds one
# request hook and one response hook to it (idempotently, once per httpx2 client) and never replaces the
# client. The hooks do nothing unless the current context has an exchange open: a call opens one in a
# ``ContextVar``, so concurrent calls (threads, tasks) and the user's own calls on the same client never see
# each other's bytes. The request hook keeps the body the SDK serialized; the response hook reads the body
# (decoded) before the SDK parses it, or, for a streamed answer, wraps the response's ``iter_bytes`` /
# ``aiter_bytes`` so the decoded chunks the SDK reads are kept as it reads them (:func:`_genai_open`): the
# SDK's reading drives ours, chunk by chunk. With a retry the last exchange wins. Automatic continuation is
# off in every request (the codec sets it), so one SDK call is one exchange.

GENAI = "google.genai"


@attrs.define(slots=True)
class _Exchange:
    """The bytes of the HTTP exchange behind one SDK call (the last one, after any retry).

    ``tee`` (a streamed call): the response body is not read by the hook; the response's ``iter_bytes`` /
    ``aiter_bytes`` are wrapped, so every chunk the SDK reads is also appended to ``tee``, as it is read;
    ``response`` is that response (closed by reasonstate when the stream is left early)."""

    request_body: bytes | None = None
    response_body: bytes | None = None
    tee: list[bytes] | None = None
    response: Any = None


_EXCHANGE: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar(
    "reasonstate_genai_exchange", default=None
)
_HOOKS_LOCK = threading.Lock()


def _on_request(request: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is not None:
        exchange.request_body, exchange.response_body = bytes(request.content), None
        if exchange.tee is not None:
            exchange.tee.clear()


def _on_response(response: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is None:
        return
    if exchange.tee is None:
        exchange.response_body = response.read()
        return
    exchange.response = response
    if response.is_success:  # an error status: the SDK reads the body and raises
        original, tee = response.iter_bytes, exchange.tee

        def iter_bytes(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            for chunk in original(*args, **kwargs):
                tee.append(chunk)
                yield chunk

        response.iter_bytes = iter_bytes


async def _aon_request(request: Any) -> None:
    _on_request(request)


async def _aon_response(response: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is None:
        return
    if exchange.tee is None:
        exchange.response_body = await response.aread()
        return
    exchange.response = response
    if response.is_success:
        original, tee = response.aiter_bytes, exchange.tee

        async def aiter_bytes(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
            async for chunk in original(*args, **kwargs):
                tee.append(chunk)
                yield chunk

        response.aiter_bytes = aiter_bytes


def _genai_call(adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
    models, api_client = _genai_target(client, is_async=False)
    with _Translated(adapter, request, False), _Capture(api_client, is_async=False) as exchange:
        models.generate_content(**_raw_response(request))
    return _genai_result(adapter, exchange)


async def _genai_acall(adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
    """:func:`_genai_call` with awaits, on ``client.aio.models``."""
    models, api_client = _genai_target(client, is_async=True)
    with _Translated(adapter, request, False), _Capture(api_client, is_async=True) as exchange:
        await models.generate_content(**_raw_response(request))
    return _genai_result(adapter, exchange)


def _raw_response(request: VendorRequest) -> dict[str, Any]:
    """The request's kwargs with ``config.should_return_http_response`` (google-genai's documented option:
    "the raw HTTP response will be returned in the 'sdk_http_response' field"): the SDK hands back the
    answer unparsed, as ``with_raw_response`` does for the other SDKs, instead of converting it to pydantic
    models reasonstate would discard (it decodes the exact bytes). The option is not sent: the request
    bytes are the same (~0.25 ms saved per call at 10 turns of history, benchmarks/overhead_gemini.py)."""
    kwargs = sdk_kwargs(request.kwargs)
    kwargs["config"]["should_return_http_response"] = True
    return kwargs


_END = object()


def _genai_open(adapter: Adapter, client: Any, request: VendorRequest, assembler: Assembler) -> Streaming:
    """A streamed Gemini call: the SDK's own ``generate_content_stream`` is stepped, and the bytes it reads
    are the ones teed to the assembler (the exchange is current only while the SDK runs, one step at a
    time: no other call on the client sees it). The first step (which sends the request) runs here."""
    models, api_client = _genai_target(client, is_async=False)
    _install_hooks(api_client, is_async=False)
    exchange = _Exchange(tee=[])
    steps: Iterator[Any] | None = None

    def pull() -> bytes | None:
        nonlocal steps
        token = _EXCHANGE.set(exchange)
        try:
            if steps is None:
                steps = iter(models.generate_content_stream(**sdk_kwargs(request.kwargs)))
            ended = next(steps, _END) is _END
        finally:
            _EXCHANGE.reset(token)
        return _teed(exchange, ended)

    def close() -> None:
        if steps is not None and hasattr(steps, "close"):
            steps.close()
        if exchange.response is not None:
            exchange.response.close()

    translated = functools.partial(_Translated, adapter, request, True)
    with translated():
        first = pull()
    return Streaming(assembler, pull, close, lambda: exchange.request_body, translated, first)


async def _genai_aopen(
    adapter: Adapter, client: Any, request: VendorRequest, assembler: Assembler
) -> AsyncStreaming:
    """:func:`_genai_open` with awaits, on ``client.aio.models``."""
    models, api_client = _genai_target(client, is_async=True)
    _install_hooks(api_client, is_async=True)
    exchange = _Exchange(tee=[])
    steps: AsyncIterator[Any] | None = None

    async def pull() -> bytes | None:
        nonlocal steps
        token = _EXCHANGE.set(exchange)
        try:
            if steps is None:
                steps = aiter(await models.generate_content_stream(**sdk_kwargs(request.kwargs)))
            ended = await anext(steps, _END) is _END
        finally:
            _EXCHANGE.reset(token)
        return _teed(exchange, ended)

    async def close() -> None:
        if steps is not None and hasattr(steps, "aclose"):
            await steps.aclose()
        if exchange.response is not None:
            await exchange.response.aclose()

    translated = functools.partial(_Translated, adapter, request, True)
    with translated():
        first = await pull()
    return AsyncStreaming(assembler, pull, close, lambda: exchange.request_body, translated, first)


def _teed(exchange: _Exchange, ended: bool) -> bytes | None:
    """The bytes the SDK read since the last step; None once it has ended and nothing is left."""
    if exchange.response is None:
        raise InvalidOption(
            "the genai.Client answered without an HTTP exchange through its httpx2 client (a replay or "
            "custom API client?): reasonstate needs the exact bytes"
        )
    assert exchange.tee is not None
    data = b"".join(exchange.tee)
    exchange.tee.clear()
    return None if ended and not data else data


def _genai_target(client: Any, *, is_async: bool) -> tuple[Any, Any]:
    """``(models resource, the SDK's API client)``: a ``genai.Client`` serves sync calls on ``.models``
    and async calls on ``.aio.models``; a ``client.aio`` (``AsyncClient``) serves async calls only."""
    owner = client.aio if is_async and hasattr(client, "aio") else client
    return owner.models, owner._api_client


class _Capture:
    """The exchange of the one SDK call made inside the block: the capture hooks installed on the client,
    a new :class:`_Exchange` current in this context for the block, and the previous one back after it."""

    __slots__ = ("_api_client", "_async", "_exchange", "_token")

    def __init__(self, api_client: Any, *, is_async: bool) -> None:
        self._api_client, self._async = api_client, is_async

    def __enter__(self) -> _Exchange:
        _install_hooks(self._api_client, is_async=self._async)
        self._exchange = _Exchange()
        self._token = _EXCHANGE.set(self._exchange)
        return self._exchange

    def __exit__(self, *exc: object) -> None:
        _EXCHANGE.reset(self._token)


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
        if http is not None and _on_request in http.event_hooks["request"]:
            return  # installed before (a sync client has no per-loop inner clients)
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


def _genai_result(adapter: Adapter, exchange: _Exchange) -> CallResult:
    """The answer as received: the JSON body."""
    body = exchange.response_body
    if body is None:
        raise InvalidOption(
            "the genai.Client answered without an HTTP exchange through its httpx2 client (a replay or "
            "custom API client?): reasonstate needs the exact bytes"
        )
    return CallResult(_json(body, adapter), exchange.request_body)


def _genai_failure(adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool) -> Exception:
    """google-genai's failure ``exc`` as the reasonstate error to raise from it (``exc`` itself when it
    passes through): ``errors.APIError`` (``ClientError`` 4xx, ``ServerError`` 5xx) → :class:`VendorError`
    with the status and the error envelope; httpx2/httpx transport errors → :class:`VendorError`
    (:class:`StreamInterrupted` while streaming); the SDK refusing the kwargs before sending (pydantic) →
    :class:`ProtocolViolation`; an answer it cannot parse → :class:`MalformedResponse`. The caller raises
    it ``from exc``, so the SDK's exception is kept as ``__cause__``."""
    if isinstance(exc, ReasonStateError):
        return exc
    errors = importlib.import_module("google.genai.errors")
    import pydantic

    label = adapter.endpoint.label
    if isinstance(exc, errors.APIError):
        status = exc.code if isinstance(exc.code, int) else None
        message = f"{label} {exc.code} {exc.status}: {exc.message}"
        status_error = adapter.endpoint.status_error
        specific = status_error(exc, request) if status_error is not None else None
        if specific is not None:
            return specific
        return VendorError(message, status=status, body=exc.details)
    if isinstance(exc, pydantic.ValidationError):
        return ProtocolViolation(f"google-genai refused the request before sending it: {exc}")
    if isinstance(exc, errors.UnknownApiResponseError):
        return MalformedResponse(f"{label} answered with something that is not JSON: {exc}")
    if stream:
        return StreamInterrupted(f"the stream broke: {type(exc).__name__}: {exc}")
    if _is_transport_error(exc):
        return VendorError(f"{label} call failed: {type(exc).__name__}: {exc}")
    return exc


def _is_transport_error(exc: BaseException) -> bool:
    """An httpx2 (or httpx) transport failure: timeout, connection error, protocol error."""
    return any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx2", "httpx")
        for cls in type(exc).__mro__
    )
