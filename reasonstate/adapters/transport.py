"""The one place reasonstate does I/O: a request goes out through the vendor SDK, the answer comes back.

One skeleton serves every SDK family (``anthropic``, ``openai``: both expose ``<resource>.with_raw_response
.create``, whose HTTP response gives the exact bytes the SDK sent and received). :func:`call` and
:func:`acall` differ only where they await. Streamed answers are fed line by line to the codec's pure
assembler (:mod:`reasonstate.adapters.streams`) as raw bytes (split at CR/LF only: ``iter_lines``
would also split inside a JSON string at U+2028), so a streamed and a non-streamed answer decode alike.

Failures: the SDK's status errors become :class:`~reasonstate.errors.VendorError` (or the codec's more
specific subclass), its other errors a ``VendorError`` — a :class:`~reasonstate.errors.StreamInterrupted`
while streaming, as is any transport error that escapes the SDK mid-stream. The SDK's exception is kept as
``__cause__``; reasonstate's own errors pass through.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from reasonstate.adapters.base import Adapter, Assembler, VendorRequest
from reasonstate.errors import (
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
