"""Capture: how the guard keeps a copy of each exchange a watched client has (an ``httpx2`` response hook
that keeps the request bytes, and byte streams that record the response as the SDK reads it).

Imported only when a client is instrumented (``httpx2`` comes with the vendor SDKs, not with reasonstate).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx2

if TYPE_CHECKING:
    from reasonstate.guard import _Exchange

__all__ = ["add_hook", "replace_body", "tee"]

Done = Callable[["_Exchange"], None]


class _SyncTee(httpx2.SyncByteStream):
    """Passes every chunk through unchanged, keeping a reference to it; reports the capture once, at close
    (the SDK closes a response when it has read it, or gives up on it)."""

    def __init__(self, inner: Any, capture: _Exchange, done: Done) -> None:
        self._inner, self._capture, self._done, self._closed = inner, capture, done, False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._capture.chunks.append(chunk)
            yield chunk
        self._capture.complete = True

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            if not self._closed:
                self._closed = True
                self._done(self._capture)


class _AsyncTee(httpx2.AsyncByteStream):
    """:class:`_SyncTee` for an async response."""

    def __init__(self, inner: Any, capture: _Exchange, done: Done) -> None:
        self._inner, self._capture, self._done, self._closed = inner, capture, done, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._capture.chunks.append(chunk)
            yield chunk
        self._capture.complete = True

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            if not self._closed:
                self._closed = True
                self._done(self._capture)


def tee(stream: Any, capture: _Exchange, done: Done) -> Any:
    """A stream yielding what ``stream`` yields, recording it into ``capture``."""
    if isinstance(stream, httpx2.AsyncByteStream):
        return _AsyncTee(stream, capture, done)
    return _SyncTee(stream, capture, done)


def add_hook(
    http: Any, on_response: Callable[[Any], None], on_request: Callable[[Any], None] | None = None
) -> None:
    """Append a response hook calling ``on_response`` (and a request hook calling ``on_request``, run after
    the client's own) to ``http`` (sync or async), keeping its others."""
    hook: Any
    before: Any = on_request
    if isinstance(http, httpx2.Client):
        hook = on_response
    else:

        async def hook(response: Any) -> None:
            on_response(response)

        if on_request is not None:

            async def before(request: Any) -> None:
                on_request(request)

    _append(http, hook, before)
    # google-genai's default async client builds one inner client per event loop from its kwargs
    kwargs = getattr(http, "_client_kwargs", None)
    if isinstance(kwargs, dict):
        with getattr(http, "_loop_clients_lock", None) or contextlib.nullcontext():
            existing = kwargs.get("event_hooks") or {}
            kwargs["event_hooks"] = {
                "request": [*existing.get("request", ()), *([before] if before else [])],
                "response": [*existing.get("response", ()), hook],
            }
            for inner in list(dict(getattr(http, "_loop_clients", None) or {}).values()):
                _append(inner, hook, before)


def _append(http: Any, hook: Any, before: Any = None) -> None:
    current = http.event_hooks
    # a new mapping, so a request being sent meanwhile iterates the old lists undisturbed
    http.event_hooks = {
        "request": [*current["request"], *([before] if before else [])],
        "response": [*current["response"], hook],
    }


def replace_body(request: Any, body: bytes) -> None:
    """Send ``body`` instead of the request's own (mend mode), with its length."""
    request._content = body
    request.stream = httpx2.ByteStream(body)
    request.headers["Content-Length"] = str(len(body))
