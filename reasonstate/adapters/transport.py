"""The one place reasonstate does I/O: a request goes out through the vendor SDK, the answer comes back.

One transport protocol (:class:`_Transport`), two implementations, chosen by the endpoint's SDK from
:data:`_TRANSPORTS` (a registry, not a branch): :class:`_RawResponse` for the SDKs with a raw-response
wrapper (``anthropic``, ``openai``: ``<resource>.with_raw_response.create``, whose HTTP response gives the
exact bytes the SDK sent and received) and :class:`_GenAI` for ``google-genai`` (no such wrapper: the exact
bytes are read from the client's own ``httpx2`` client through its event hooks; for a streamed answer, by
teeing the bytes the SDK reads, as it reads them).

Sync and async share every body. An I/O step longer than one SDK call is written once as a *flow*: a
generator that yields each call to make (``functools.partial(sdk_method, **kwargs)``) and receives its
result (or its exception, thrown in); :func:`_run` drives a flow on a sync client by calling, :func:`_arun`
on an async one by awaiting. Streamed answers are fed chunk by chunk to the codec's pure assembler
(:mod:`reasonstate.adapters.base`) as raw bytes (split at CR/LF only: ``iter_lines`` would also split
inside a JSON string at U+2028), so a streamed and a non-streamed answer decode alike. Every streamed
answer goes through :func:`open_stream` / :func:`aopen_stream`: iterating the :class:`Streaming` /
:class:`AsyncStreaming` they return feeds each chunk to the assembler as it arrives and yields the
:class:`~reasonstate.adapters.base.StreamEvent` values it recorded (``Session.stream``); the two differ
only in how they pull a chunk. ``call(stream=True)`` is the same object read to its end, so there is one
decode path.

What goes to the SDK is a plain copy (:func:`sdk_kwargs`): an SDK that edits its input in place changes
nothing in the session.

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
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

import attrs

from reasonstate.adapters.base import Adapter, Assembler, StreamEvent, VendorRequest
from reasonstate.errors import (
    InvalidOption,
    MalformedResponse,
    ProtocolViolation,
    ReasonStateError,
    StreamInterrupted,
    VendorError,
)
from reasonstate.state.frozen import thaw

__all__ = [
    "AsyncStreaming",
    "CallResult",
    "Streaming",
    "acall",
    "adrive",
    "aopen_stream",
    "call",
    "drive",
    "open_stream",
    "plain_text",
    "sdk_kwargs",
    "status_message",
]

_T = TypeVar("_T")


@attrs.frozen(slots=True)
class CallResult:
    """What a vendor call returned: the response JSON as received (or assembled) and the bytes sent."""

    response: Any
    request_body: bytes | None = None
    #: trace events the call adds to its commit (a stream's ``stream.trailing_data`` warning)
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    #: every string of ``response`` is known to be valid Unicode (read off the body's bytes,
    #: :func:`plain_text`), so the engine skips its own pass over the value (docs/protocols.md §0.3)
    plain_text: bool = False


def call(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    """One vendor call on a sync client (a streamed one is :func:`open_stream` read to its end)."""
    if stream:
        return open_stream(adapter, client, request).drained()
    return _TRANSPORTS[adapter.endpoint.sdk].call(adapter, client, request)


async def acall(adapter: Adapter, client: Any, request: VendorRequest, stream: bool) -> CallResult:
    """:func:`call` on an async client."""
    if stream:
        return await (await aopen_stream(adapter, client, request)).drained()
    return await _TRANSPORTS[adapter.endpoint.sdk].acall(adapter, client, request)


def open_stream(adapter: Adapter, client: Any, request: VendorRequest) -> Streaming:
    """Send the streamed form of ``request`` on a sync client; the answer is read as it is iterated.

    Raises before any byte is read when the vendor refuses the request (its status error) or the endpoint
    does not stream (:class:`ProtocolViolation`)."""
    assembler = _assembler(adapter)
    opening = _TRANSPORTS[adapter.endpoint.sdk].opening(adapter, client, request, _SYNC)
    return Streaming(assembler, *_run(opening))


async def aopen_stream(adapter: Adapter, client: Any, request: VendorRequest) -> AsyncStreaming:
    """:func:`open_stream` on an async client."""
    assembler = _assembler(adapter)
    opening = _TRANSPORTS[adapter.endpoint.sdk].opening(adapter, client, request, _ASYNC)
    return AsyncStreaming(assembler, *await _arun(opening))


# -- flows: one body for sync and async ---------------------------------------------------------------------

#: an I/O step written once: yields each SDK call to make, receives its result (or its exception)
_Flow = Generator[Callable[[], Any], Any, _T]


class _Driving(Generic[_T]):
    """One flow being driven: the call it asks for now (``call``), what came back, and its result."""

    __slots__ = ("_failure", "_flow", "_sent", "call", "result")

    def __init__(self, flow: _Flow[_T]) -> None:
        self._flow = flow
        self._sent: Any = None
        self._failure: BaseException | None = None
        self.call: Callable[[], Any] = _nothing

    def asks(self) -> bool:
        """Whether the flow asks for another call (``call``); once it returned, ``result`` is set."""
        try:
            if self._failure is None:
                self.call = self._flow.send(self._sent)
            else:
                failure, self._failure = self._failure, None
                self.call = self._flow.throw(failure)
        except StopIteration as stop:
            self.result: _T = stop.value
            return False
        return True

    def answer(self) -> None:
        try:
            self._sent = self.call()
        except BaseException as exc:
            self._failure = exc

    async def aanswer(self) -> None:
        try:
            self._sent = await self.call()
        except BaseException as exc:
            self._failure = exc


def _nothing() -> None:
    return None


def _run(flow: _Flow[_T]) -> _T:
    """Drive ``flow`` on a sync client: each call it asks for is made here."""
    driving = _Driving(flow)
    while driving.asks():
        driving.answer()
    return driving.result


async def _arun(flow: _Flow[_T]) -> _T:
    """Drive ``flow`` on an async client: each call it asks for is awaited here."""
    driving = _Driving(flow)
    while driving.asks():
        await driving.aanswer()
    return driving.result


#: a sans-I/O flow (a generator yielding the calls it needs, receiving their results) driven on a sync or an
#: async client: the transport's own flows, and the session's store writes
drive = _run
adrive = _arun


@attrs.frozen(slots=True)
class _Flavor:
    """How a flow reads and closes on a sync or an async client (the only differences between them)."""

    is_async: bool
    #: ``iter`` / ``aiter`` over what the SDK's streaming call returned, ``next`` / ``anext`` on it
    iterate: Callable[[Any], Any]
    step: Callable[[Any, Any], Any]
    #: the response body's chunks (``iter_bytes`` / ``aiter_bytes``) and the closing method's name
    chunks: str
    close: str
    #: a flow's driver (:func:`_run` / :func:`_arun`)
    run: Callable[[_Flow[Any]], Any]


_SYNC = _Flavor(False, iter, next, "iter_bytes", "close", _run)
_ASYNC = _Flavor(True, aiter, anext, "aiter_bytes", "aclose", _arun)


# -- a streamed answer, read as it arrives ------------------------------------------------------------------
#
# One path for every streamed answer: the body's chunks are fed, as they arrive, to the codec's assembler;
# iterating a ``Streaming`` yields the assembler's StreamEvents after each chunk, and ``result()`` is the
# assembled answer once the body has ended. ``call(stream=True)`` is exactly this, read to the end.

#: what opening a stream gives: pull (the next chunk; None once the body ended), close, the bytes sent, the
#: translating context and the first chunk when opening already read it
_Opened = tuple[
    Callable[[], Any],
    Callable[[], Any],
    Callable[[], "bytes | None"],
    Callable[[], contextlib.AbstractContextManager[None]],
    "bytes | None",
]


class _Reading:
    """What :class:`Streaming` and :class:`AsyncStreaming` share: the assembler fed chunk by chunk, the end,
    the assembled result; they differ only in how they pull a chunk and close the response."""

    __slots__ = (
        "_assembler",
        "_close",
        "_closed",
        "_ended",
        "_pending",
        "_pull",
        "_request_body",
        "_translated",
    )

    def __init__(
        self,
        assembler: Assembler,
        pull: Callable[[], Any],
        close: Callable[[], Any],
        request_body: Callable[[], bytes | None],
        translated: Callable[[], contextlib.AbstractContextManager[None]],
        pending: bytes | None = None,
    ) -> None:
        self._assembler, self._pull, self._close = assembler, pull, close
        self._request_body, self._translated = request_body, translated
        self._pending = pending
        self._ended = False
        self._closed = False

    def _first(self) -> bytes | None:
        chunk, self._pending = self._pending, None
        return chunk

    def _fed(self, chunk: bytes | None) -> ReasonStateError | None:
        """Feed one pulled chunk (None: the body ended); a decoding error is given back, to be raised
        after the events the chunk showed before it."""
        if chunk is None:
            self._ended = True
            return None
        try:
            self._assembler.feed_bytes(chunk)
        except ReasonStateError as exc:
            return exc
        return None

    def _kept(self) -> bool:
        """After a failure reading the body: True (the stream ends, the answer kept, the failure counted
        as trailing data) when the answer was already whole; False: the failure stands."""
        if not self._assembler.complete():
            return False
        self._assembler.cut_after_complete()
        self._ended = True
        return True

    def _shown(self, failed: ReasonStateError | None) -> Iterator[StreamEvent]:
        yield from self._assembler.events()
        if failed is not None:
            raise failed

    def _assembled(self) -> CallResult:
        if not self._ended:
            raise ProtocolViolation("the stream was not read to its end")
        with self._translated():
            return CallResult(self._assembler.finish(), self._request_body(), self._assembler.warnings())

    def _closing(self) -> bool:
        """True the first time only (closing is idempotent)."""
        closing, self._closed = not self._closed, True
        return closing


class Streaming(_Reading):
    """A streamed answer on a sync client, open: iterate it for its :class:`StreamEvent` values as the
    bytes arrive; once iteration ends, :meth:`result` is the answer assembled from exactly those bytes.

    ``close()`` (or leaving the ``with`` block) closes the HTTP response, read to its end or not;
    idempotent. Failures while reading are translated as in :func:`call` with ``stream=True``
    (:class:`StreamInterrupted` for a dropped connection, :class:`VendorError` for an error event).
    """

    __slots__ = ()

    def __iter__(self) -> Iterator[StreamEvent]:
        while not self._ended:
            try:
                with self._translated():
                    chunk = self._pull() if self._pending is None else self._first()
            except ReasonStateError:
                if not self._kept():
                    raise
                break
            yield from self._shown(self._fed(chunk))

    def result(self) -> CallResult:
        """The assembled answer (the body must have been read to its end: iterate first)."""
        try:
            return self._assembled()
        finally:
            self.close()

    def drained(self) -> CallResult:
        """Read to its end, closed: the assembled answer (``call(stream=True)``)."""
        with self:
            for _ in self:
                pass
            return self.result()

    def close(self) -> None:
        if self._closing():
            with contextlib.suppress(Exception):
                self._close()

    def __enter__(self) -> Streaming:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStreaming(_Reading):
    """:class:`Streaming` on an async client: ``async for`` it, ``await result()``, ``await aclose()``."""

    __slots__ = ()

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        while not self._ended:
            try:
                with self._translated():
                    chunk = await self._pull() if self._pending is None else self._first()
            except ReasonStateError:
                if not self._kept():
                    raise
                break
            for event in self._shown(self._fed(chunk)):
                yield event

    async def result(self) -> CallResult:
        """The assembled answer (the body must have been read to its end: iterate first)."""
        try:
            return self._assembled()
        finally:
            await self.aclose()

    async def drained(self) -> CallResult:
        """:meth:`Streaming.drained` with awaits."""
        async with self:
            async for _ in self:
                pass
            return await self.result()

    async def aclose(self) -> None:
        if self._closing():
            with contextlib.suppress(Exception):
                await self._close()

    async def __aenter__(self) -> AsyncStreaming:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _assembler(adapter: Adapter) -> Assembler:
    """A fresh assembler for the endpoint's stream (:class:`ProtocolViolation` when it does not stream)."""
    endpoint = adapter.endpoint
    if endpoint.assembler is None:
        raise ProtocolViolation(
            f"{endpoint.label} does not stream here; create the session with stream=False"
        )
    return endpoint.assembler()


#: the request fields that hold the history: the codecs build these lists afresh for every request, out of
#: plain dicts they own (the memoized closed runs included), so they go to the SDK as they are
_HISTORY_FIELDS = frozenset({"messages", "input", "contents"})


def sdk_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What goes to the vendor SDK: ``kwargs`` with every other value a plain deep copy (no
    :class:`~reasonstate.state.frozen.FrozenDict` / ``FrozenList`` left), so an SDK that edits its input
    in place (google-genai's schema transformer rewrites ``response_schema``) breaks nothing and changes
    nothing in the session, whose options stay frozen. The bytes sent are the same: a plain copy is equal,
    key order included. The history lists are not copied: a deep copy of them would be a pass over the
    whole history on every request, which the memoized runs exist to avoid."""
    return {k: v if k in _HISTORY_FIELDS else thaw(v) for k, v in kwargs.items()}


def _history_in_extra_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` (a plain copy, :func:`sdk_kwargs`) for an openai ``create`` with each history list
    (``messages``, ``input``) given as an empty list and its value in ``extra_body``: the SDK sends the same
    bytes and skips its typed walk over the history (``maybe_transform``, the larger part of its request
    preparation at a short history, and a pass over the whole history at a long one).

    Why the bytes are the same: ``create`` transforms the named arguments into its body, in its own key
    order, with the empty list at the history's place; ``_build_request`` then merges ``extra_body`` into
    that body (``{**body, **extra_body}``: a key already there keeps its place and takes the new value),
    and a caller's own ``extra_body`` is merged after the history, so it still wins over every field as it
    did. The transform of the history itself gives back an equal copy of it: the codecs build it of plain
    JSON values (str, int, float, bool, None, dicts, lists), the openai request types of these fields have no
    key alias and no format (``PropertyInfo`` only discriminates unions there), and an equal copy dumps to
    the same JSON (docs/protocols.md §6). ``tests/test_transport_openai_body.py`` sends every request both
    ways and compares the bytes. Anything else (not a list, a non-mapping ``extra_body``) goes as it was.
    What differs is only what a wrapper of ``create`` itself sees (tracing instrumentation reading the
    ``messages`` argument finds the history in ``extra_body``)."""
    moved = {key: kwargs[key] for key in _HISTORY_FIELDS if type(kwargs.get(key)) is list}
    extra = kwargs.get("extra_body")
    if not moved or not (extra is None or isinstance(extra, dict)):
        return kwargs
    given = {**kwargs, **{key: [] for key in moved}}
    given["extra_body"] = {**moved, **extra} if extra else moved
    return given


def plain_text(body: bytes) -> bool:
    """Whether every string ``json.loads(body)`` gives is valid Unicode, read off the bytes at C speed:
    strict UTF-8 (``json.loads`` lets encoded surrogates through) and no ``\\uD...`` escape (a surrogate
    is only ever written as one; no NUL byte, which only a UTF-16 or UTF-32 body has, where ``json.loads``
    would read other escapes than these bytes show). False only means "not known": the engine then checks
    the value."""
    if b"\x00" in body or (b"\\u" in body and (b"\\ud" in body or b"\\uD" in body)):
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json(body: bytes, adapter: Adapter) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise MalformedResponse(f"{adapter.endpoint.label} response is not JSON: {body[:80]!r}") from exc


# -- the transport protocol ---------------------------------------------------------------------------------


class _Transport(Protocol):
    """How one SDK family sends a request and reads the exact bytes back."""

    def call(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        """One unstreamed call on a sync client (a plain copy of the kwargs goes to the SDK)."""
        ...

    async def acall(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        """:meth:`call` on an async client."""
        ...

    def opening(
        self, adapter: Adapter, client: Any, request: VendorRequest, flavor: _Flavor
    ) -> _Flow[_Opened]:
        """The flow that sends the streamed form of ``request`` and gives what the stream reads and closes
        with."""
        ...

    def failure(
        self, adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool, sent: bool = False
    ) -> Exception:
        """The SDK's failure ``exc`` as the reasonstate error to raise from it (``exc`` when it passes)."""
        ...


class _Translated:
    """The SDK's failures inside the block as reasonstate errors (the transport's :meth:`_Transport.failure`),
    the SDK's exception kept as ``__cause__``; reasonstate's own errors pass through. A plain class rather
    than a generator context manager: it wraps every request."""

    __slots__ = ("_adapter", "_request", "_sent", "_stream")

    def __init__(
        self, adapter: Adapter, request: VendorRequest, stream: bool, sent: Callable[[], bool] | None = None
    ) -> None:
        self._adapter, self._request, self._stream, self._sent = adapter, request, stream, sent

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if not isinstance(exc, Exception):
            return  # no exception, or a BaseException (KeyboardInterrupt, ...): it propagates as it is
        adapter = self._adapter
        sent = self._sent is not None and self._sent()
        failure = _TRANSPORTS[adapter.endpoint.sdk].failure(
            adapter, self._request, exc, stream=self._stream, sent=sent
        )
        if failure is not exc:
            raise failure from exc


# -- anthropic, openai: with_raw_response -------------------------------------------------------------------


class _RawResponse:
    """``<resource>.with_raw_response.create``: the SDK's HTTP response holds the exact bytes both ways.

    ``untyped_history``: the SDK's ``create`` walks the body with its typed transform (openai's
    ``maybe_transform``), which for the history fields gives back an equal copy of the plain JSON the codec
    built (:func:`_history_in_extra_body`): the history is then handed over through ``extra_body`` instead,
    where the SDK merges it into the same place of the same body without the walk. Everything else
    ``create`` does (its other fields, headers, options, timeout, retries, streaming, errors) is as before,
    and the bytes sent are the same (docs/protocols.md §6)."""

    __slots__ = ("_untyped_history",)

    def __init__(self, *, untyped_history: bool = False) -> None:
        self._untyped_history = untyped_history

    def _kwargs(self, request: VendorRequest) -> dict[str, Any]:
        kwargs = sdk_kwargs(request.kwargs)
        return _history_in_extra_body(kwargs) if self._untyped_history else kwargs

    def call(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        with _Translated(adapter, request, False):
            raw = _resource(client, adapter).with_raw_response.create(**self._kwargs(request))
        return _raw_result(adapter, raw.http_response)

    async def acall(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        with _Translated(adapter, request, False):
            raw = await _resource(client, adapter).with_raw_response.create(**self._kwargs(request))
        return _raw_result(adapter, raw.http_response)

    def opening(
        self, adapter: Adapter, client: Any, request: VendorRequest, flavor: _Flavor
    ) -> _Flow[_Opened]:
        kwargs = {**self._kwargs(request), "stream": True}
        stream_options = adapter.endpoint.stream_options
        if stream_options:
            kwargs["stream_options"] = {**(request.kwargs.get("stream_options") or {}), **stream_options}
        translated = functools.partial(_Translated, adapter, request, True)
        with translated():
            raw = yield functools.partial(_resource(client, adapter).with_raw_response.create, **kwargs)
        http = raw.http_response
        sent = http.request.content
        pull = functools.partial(flavor.step, getattr(http, flavor.chunks)(), None)
        return pull, getattr(http, flavor.close), lambda: sent, translated, None

    def failure(
        self, adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool, sent: bool = False
    ) -> Exception:
        """A status error → :class:`VendorError` (or the codec's more specific one), another SDK error →
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


def _raw_result(adapter: Adapter, http: Any) -> CallResult:
    body = http.content
    return CallResult(_json(body, adapter), http.request.content, plain_text=plain_text(body))


def _resource(client: Any, adapter: Adapter) -> Any:
    target = client
    for name in adapter.endpoint.resource:
        target = getattr(target, name)
    return target


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
# ``aiter_bytes`` so the decoded chunks the SDK reads are kept as it reads them (:class:`_GenAIStream`): the
# SDK's reading drives ours, chunk by chunk. With a retry the last exchange wins. Automatic continuation is
# off in every request (the codec sets it), so one SDK call is one exchange.


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


async def _aon_request(request: Any) -> None:
    _on_request(request)


def _on_response(response: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is not None and _body_wanted(exchange, response):
        exchange.response_body = response.read()


async def _aon_response(response: Any) -> None:
    exchange = _EXCHANGE.get()
    if exchange is not None and _body_wanted(exchange, response):
        exchange.response_body = await response.aread()


def _body_wanted(exchange: _Exchange, response: Any) -> bool:
    """Whether the hook reads the whole body now (an unstreamed call); for a streamed one the response's
    chunk iterators are teed instead (an error status: the SDK reads the body and raises)."""
    tee = exchange.tee
    if tee is None:
        return True
    exchange.response = response
    if response.is_success:
        response.iter_bytes = _teeing(response.iter_bytes, tee)
        response.aiter_bytes = _ateeing(response.aiter_bytes, tee)
    return False


def _teeing(original: Callable[..., Iterator[bytes]], tee: list[bytes]) -> Callable[..., Iterator[bytes]]:
    def iter_bytes(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        for chunk in original(*args, **kwargs):
            tee.append(chunk)
            yield chunk

    return iter_bytes


def _ateeing(
    original: Callable[..., AsyncIterator[bytes]], tee: list[bytes]
) -> Callable[..., AsyncIterator[bytes]]:
    async def aiter_bytes(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        async for chunk in original(*args, **kwargs):
            tee.append(chunk)
            yield chunk

    return aiter_bytes


_END = object()


class _GenAI:
    """google-genai: ``models.generate_content`` / ``generate_content_stream`` (``client.aio.models`` on an
    async client), the bytes read through the capture hooks."""

    def call(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        return _run(self._calling(adapter, client, request, _SYNC))

    async def acall(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        return await _arun(self._calling(adapter, client, request, _ASYNC))

    def _calling(
        self, adapter: Adapter, client: Any, request: VendorRequest, flavor: _Flavor
    ) -> _Flow[CallResult]:
        models, api_client = _genai_target(client, is_async=flavor.is_async)
        with (
            _Translated(adapter, request, False),
            _Capturing(api_client, is_async=flavor.is_async) as exchange,
        ):
            yield functools.partial(models.generate_content, **_raw_response(request))
        return _genai_result(adapter, exchange)

    def opening(
        self, adapter: Adapter, client: Any, request: VendorRequest, flavor: _Flavor
    ) -> _Flow[_Opened]:
        """A streamed Gemini call: the SDK's own ``generate_content_stream`` is stepped, and the bytes it
        reads are the ones teed to the assembler (the exchange is current only while the SDK runs, one step
        at a time: no other call on the client sees it). The first step (which sends the request) runs here.
        google-genai has no ``stream`` flag: the method is the difference."""
        models, api_client = _genai_target(client, is_async=flavor.is_async)
        _install_hooks(api_client, is_async=flavor.is_async)
        stream = _GenAIStream(models.generate_content_stream, sdk_kwargs(request.kwargs), flavor)
        translated = functools.partial(
            _Translated, adapter, request, True, lambda: stream.exchange.response is not None
        )
        with translated():
            first = yield from stream.pulling()
        return stream.pull, stream.close, stream.request_body, translated, first

    def failure(
        self, adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool, sent: bool = False
    ) -> Exception:
        return _genai_failure(adapter, request, exc, stream=stream, sent=sent)


class _GenAIStream:
    """One streamed google-genai call: the SDK's stream stepped one chunk at a time, the exchange current
    only while it runs. ``opener``: the SDK method that opens the stream (generateContent's
    ``generate_content_stream``; ``interactions.create`` with ``stream=True``)."""

    __slots__ = ("_flavor", "_kwargs", "_opener", "_steps", "exchange")

    def __init__(self, opener: Any, kwargs: dict[str, Any], flavor: _Flavor) -> None:
        self._opener, self._kwargs, self._flavor = opener, kwargs, flavor
        self._steps: Any = None
        self.exchange = _Exchange(tee=[])

    def pulling(self) -> _Flow[bytes | None]:
        """The bytes the SDK read in its next step; None once it has ended and nothing is left."""
        token = _EXCHANGE.set(self.exchange)
        try:
            if self._steps is None:
                opened = yield functools.partial(self._opener, **self._kwargs)
                self._steps = self._flavor.iterate(opened)
            ended = (yield functools.partial(self._flavor.step, self._steps, _END)) is _END
        finally:
            _EXCHANGE.reset(token)
        return _teed(self.exchange, ended)

    def pull(self) -> Any:
        return self._flavor.run(self.pulling())

    def close(self) -> Any:
        return self._flavor.run(self._closing())

    def _closing(self) -> _Flow[None]:
        name = self._flavor.close
        if self._steps is not None and hasattr(self._steps, name):
            yield getattr(self._steps, name)
        if self.exchange.response is not None:
            yield getattr(self.exchange.response, name)

    def request_body(self) -> bytes | None:
        return self.exchange.request_body


def _raw_response(request: VendorRequest) -> dict[str, Any]:
    """The request's kwargs (a plain copy) with ``config.should_return_http_response`` (google-genai's
    documented option: "the raw HTTP response will be returned in the 'sdk_http_response' field"): the SDK
    hands back the answer unparsed, as ``with_raw_response`` does for the other SDKs, instead of converting
    it to pydantic models reasonstate would discard (it decodes the exact bytes). The option is not sent:
    the request bytes are the same (~0.25 ms saved per call at 10 turns of history,
    benchmarks/overhead_gemini.py)."""
    kwargs = sdk_kwargs(request.kwargs)
    kwargs["config"]["should_return_http_response"] = True
    return kwargs


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


class _Capturing:
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
    return CallResult(_json(body, adapter), exchange.request_body, plain_text=plain_text(body))


def _genai_failure(
    adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool, sent: bool = False
) -> Exception:
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
    if stream and sent and isinstance(exc, (*_UNREADABLE, errors.UnknownApiResponseError)):
        # the request went out and a streamed chunk is what the SDK cannot read: the answer is malformed,
        # as the same body unstreamed would be (issue 23 item 5), not a request refused before sending
        return MalformedResponse(
            f"{label} streamed a chunk google-genai cannot read: {type(exc).__name__}: {exc}"
        )
    if isinstance(exc, pydantic.ValidationError):
        return ProtocolViolation(f"google-genai refused the request before sending it: {exc}")
    if isinstance(exc, errors.UnknownApiResponseError):
        return MalformedResponse(f"{label} answered with something that is not JSON: {exc}")
    if stream:
        return StreamInterrupted(f"the stream broke: {type(exc).__name__}: {exc}")
    if _is_transport_error(exc):
        return VendorError(f"{label} call failed: {type(exc).__name__}: {exc}")
    return exc


class _GenAIInteractions:
    """google-genai's Interactions API: ``client.interactions.create`` (``client.aio.interactions`` on an
    async client), the bytes read through the same capture hooks (the SDK sends through the
    ``genai.Client``'s own httpx2 client, docs/protocols.md §5.6). ``automatic_continuation=False``: one
    call is one exchange (the SDK would otherwise resume a long decode in further requests and merge them);
    no ``stream`` flag in the kwargs unless streamed."""

    def call(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        return _run(self._calling(adapter, client, request, _SYNC))

    async def acall(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        return await _arun(self._calling(adapter, client, request, _ASYNC))

    def _calling(
        self, adapter: Adapter, client: Any, request: VendorRequest, flavor: _Flavor
    ) -> _Flow[CallResult]:
        resource, api_client = _interactions_target(client, is_async=flavor.is_async)
        with (
            _Translated(adapter, request, False),
            _Capturing(api_client, is_async=flavor.is_async) as exchange,
        ):
            kwargs = sdk_kwargs(request.kwargs)
            yield functools.partial(resource.with_raw_response.create, **kwargs, automatic_continuation=False)
        return _genai_result(adapter, exchange)

    def opening(
        self, adapter: Adapter, client: Any, request: VendorRequest, flavor: _Flavor
    ) -> _Flow[_Opened]:
        resource, api_client = _interactions_target(client, is_async=flavor.is_async)
        _install_hooks(api_client, is_async=flavor.is_async)
        kwargs = {**sdk_kwargs(request.kwargs), "stream": True, "automatic_continuation": False}
        stream = _GenAIStream(resource.create, kwargs, flavor)
        translated = functools.partial(
            _Translated, adapter, request, True, lambda: stream.exchange.response is not None
        )
        with translated():
            first = yield from stream.pulling()
        return stream.pull, stream.close, stream.request_body, translated, first

    def failure(
        self, adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool, sent: bool = False
    ) -> Exception:
        """The Interactions SDK's ``APIStatusError`` (``status_code``, ``body`` = Google's error envelope)
        → :class:`VendorError` (or the codec's specific error); everything else as generateContent's."""
        if isinstance(exc, ReasonStateError):
            return exc
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and hasattr(exc, "body"):
            specific = adapter.endpoint.status_error
            found = specific(exc, request) if specific is not None else None
            if found is not None:
                return found
            body = exc.body
            error = body.get("error") if isinstance(body, Mapping) else None
            shown = error.get("message") if isinstance(error, Mapping) else exc
            kind = error.get("status") if isinstance(error, Mapping) else None
            return VendorError(
                f"{adapter.endpoint.label} {status} {kind}: {shown}", status=status, body=error
            )
        return _genai_failure(adapter, request, exc, stream=stream, sent=sent)


def _interactions_target(client: Any, *, is_async: bool) -> tuple[Any, Any]:
    """``(interactions resource, the SDK's API client)`` (see :func:`_genai_target`)."""
    owner = client.aio if is_async and hasattr(client, "aio") else client
    return owner.interactions, owner._api_client


#: what google-genai raises reading a streamed chunk it cannot parse (pydantic's errors are ValueErrors; a
#: number where it expects an enum name is an AttributeError inside the SDK)
_UNREADABLE: tuple[type[Exception], ...] = (ValueError, TypeError, KeyError, AttributeError)


def _is_transport_error(exc: BaseException) -> bool:
    """An httpx2 (or httpx) transport failure: timeout, connection error, protocol error."""
    return any(
        cls.__name__ == "TransportError" and cls.__module__.split(".")[0] in ("httpx2", "httpx")
        for cls in type(exc).__mro__
    )


# -- boto3 (botocore): the exact bytes through the client's own event hooks ----------------------------

#: the exchange of the boto3 call running in this context (the client's hooks write into it)
_BOTO_EXCHANGE: contextvars.ContextVar[_Exchange | None] = contextvars.ContextVar(
    "boto_exchange", default=None
)


def _boto_before_send(request: Any = None, **_: Any) -> None:
    exchange = _BOTO_EXCHANGE.get()
    if exchange is not None and request is not None:
        body = request.body
        exchange.request_body = body if isinstance(body, bytes) else (body or "").encode()


def _boto_after_call(http_response: Any = None, **_: Any) -> None:
    exchange = _BOTO_EXCHANGE.get()
    if exchange is not None and http_response is not None:
        exchange.response = http_response


def _boto_hooks(client: Any) -> None:
    """botocore's documented events (``before-send``, ``after-call``) on this client: the request body as
    signed and sent, and the HTTP response (its body unread for an event stream). Registering under a
    ``unique_id`` is idempotent in botocore: a client already hooked is left as it is."""
    events = client.meta.events
    events.register("before-send.bedrock-runtime", _boto_before_send, unique_id="reasonstate-before-send")
    events.register("after-call.bedrock-runtime", _boto_after_call, unique_id="reasonstate-after-call")


def _boto_response(exchange: _Exchange) -> Any:
    if exchange.response is None:
        raise InvalidOption(
            "the bedrock-runtime client answered without an HTTP exchange its events showed (a stubbed or "
            "wrapped client?): reasonstate needs the exact bytes"
        )
    return exchange.response


class _Boto3:
    """boto3 ``bedrock-runtime`` (``converse`` / ``converse_stream``; docs/protocols.md §11): sync only (boto3
    has no async client); the bytes read through botocore's event hooks, a stream's body pulled raw and fed
    to the codec's event-stream assembler (botocore's own parsing of it is never run)."""

    def call(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        _boto_hooks(client)
        exchange = _Exchange()
        token = _BOTO_EXCHANGE.set(exchange)
        try:
            with _Translated(adapter, request, False):
                _resource(client, adapter)(**sdk_kwargs(request.kwargs))
        finally:
            _BOTO_EXCHANGE.reset(token)
        body = _boto_response(exchange).content
        return CallResult(_json(body, adapter), exchange.request_body, plain_text=plain_text(body))

    async def acall(self, adapter: Adapter, client: Any, request: VendorRequest) -> CallResult:
        raise InvalidOption("boto3 has no async client: use rs.Session with a bedrock-runtime client")

    def opening(
        self, adapter: Adapter, client: Any, request: VendorRequest, flavor: _Flavor
    ) -> _Flow[_Opened]:
        if flavor.is_async:
            raise InvalidOption("boto3 has no async client: use rs.Session with a bedrock-runtime client")
        _boto_hooks(client)
        exchange = _Exchange()
        method = getattr(client, adapter.endpoint.resource[0] + "_stream")
        translated = functools.partial(_Translated, adapter, request, True)
        token = _BOTO_EXCHANGE.set(exchange)
        try:
            with translated():
                yield functools.partial(method, **sdk_kwargs(request.kwargs))
        finally:
            _BOTO_EXCHANGE.reset(token)
        raw = _boto_response(exchange).raw
        chunks = raw.stream(4096, decode_content=False)
        pull = functools.partial(next, chunks, None)
        sent = exchange.request_body
        return pull, raw.close, lambda: sent, translated, None

    def failure(
        self, adapter: Adapter, request: VendorRequest, exc: Exception, *, stream: bool, sent: bool = False
    ) -> Exception:
        """botocore's ``ClientError`` → :class:`VendorError` with the HTTP status and ``{"message",
        "__type"}``; its other errors → :class:`VendorError` (:class:`StreamInterrupted` while streaming)."""
        if isinstance(exc, ReasonStateError):
            return exc
        errors = importlib.import_module("botocore.exceptions")
        label = adapter.endpoint.label
        if isinstance(exc, errors.ClientError):
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            body = {"message": error.get("Message"), "__type": error.get("Code")}
            return VendorError(
                f"{label} {status} {error.get('Code')}: {error.get('Message')}", status=status, body=body
            )
        if isinstance(exc, errors.BotoCoreError) or stream:
            cls = StreamInterrupted if stream else VendorError
            return cls(f"{label} call failed: {type(exc).__name__}: {exc}")
        return exc


#: the transport of each endpoint SDK (``Endpoint.sdk``): adding an SDK family is one line here
_TRANSPORTS: dict[str, _Transport] = {
    "anthropic": _RawResponse(),
    # openai's create walks its body with a typed transform; the anthropic SDK's does not (2.16)
    "openai": _RawResponse(untyped_history=True),
    "google.genai": _GenAI(),
    "boto3": _Boto3(),
    "google.genai.interactions": _GenAIInteractions(),
}
