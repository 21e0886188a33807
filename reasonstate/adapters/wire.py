"""The JSON wire every adapter shares: compact bytes, prefix-unit digests, body parsing, vendor errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from reasonstate.errors import MalformedResponse, ReasonStateError, StreamInterrupted, VendorError
from reasonstate.state import digest_of

__all__ = [
    "compact",
    "int_field",
    "parse_json_body",
    "status_message",
    "translated_errors",
    "unit_digest",
]


def compact(value: Any) -> bytes:
    """Compact JSON, keys in their given order, non-ASCII kept: how payloads are captured and sent."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def unit_digest(value: Any) -> str:
    """The digest of one prefix unit: ``digest_of(compact(value))``."""
    return digest_of(compact(value))


def int_field(value: Any) -> int:
    """A usage figure, or 0 when the vendor left it out or sent something that is not an integer."""
    return value if isinstance(value, int) else 0


def parse_json_body(body: bytes, what: str) -> Any:
    """The response body as JSON, or :class:`MalformedResponse` naming ``what`` it should have been."""
    try:
        return json.loads(body)
    except ValueError as exc:
        raise MalformedResponse(f"{what} is not JSON: {body[:80]!r}") from exc


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
def translated_errors(
    sdk: Any,
    label: str,
    stream: bool,
    status_error: Callable[[Any], VendorError] | None = None,
) -> Iterator[None]:
    """Vendor SDK and transport failures as :class:`VendorError` subclasses, the SDK's own exception as
    ``__cause__``; reasonstate's errors pass through.

    ``sdk`` is the vendor module (``anthropic``, ``openai``): its ``APIStatusError`` becomes a
    ``VendorError`` with the status and body (or whatever ``status_error`` builds), any other ``APIError``
    a ``VendorError`` — a ``StreamInterrupted`` while streaming, as is any transport error that escapes
    the SDK mid-stream (httpx2 protocol errors).
    """
    try:
        yield
    except sdk.APIStatusError as exc:
        if status_error is not None:
            raise status_error(exc) from exc
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
