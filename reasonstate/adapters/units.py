"""Prefix units: the compact JSON bytes of one piece of a request, and the digest the cache guard compares.

Every codec builds its request from these pieces (a tool, a system block, a message or content block), so
the guard and the predictor can compare requests piece by piece (docs/protocols.md §1.5, §3.4, §4.4).
"""

from __future__ import annotations

import json
from typing import Any

from reasonstate.state import digest_of

__all__ = ["compact", "count", "unit_digest"]


def compact(value: Any) -> bytes:
    """Compact JSON, keys in their given order, non-ASCII kept: how payloads are captured and sent."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def unit_digest(value: Any) -> str:
    """The digest of one prefix unit: ``digest_of(compact(value))``."""
    return digest_of(compact(value))


def count(value: Any) -> int:
    """A usage figure, or 0 when the vendor left it out or sent something that is not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
