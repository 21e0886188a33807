"""The JSON wire every adapter shares: compact bytes, prefix-unit digests, body parsing, error texts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reasonstate.errors import MalformedResponse
from reasonstate.state import digest_of

__all__ = ["compact", "int_field", "parse_json_body", "status_message", "unit_digest"]


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
