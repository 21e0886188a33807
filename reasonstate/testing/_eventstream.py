"""The AWS event-stream binary framing (``application/vnd.amazon.eventstream``) the Bedrock emulators
write: Converse's ``converse-stream`` and the Messages API's ``invoke-with-response-stream``
(docs/protocols.md §10.4, §11.4). Each message is ``total length, headers length`` (big-endian uint32),
the prelude's CRC32, headers (``:event-type``, ``:content-type: application/json``, ``:message-type:
event``; string-typed, 7), the JSON payload, and the CRC32 of all before."""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Mapping
from typing import Any

__all__ = ["event_message"]


def event_message(event_type: str, payload: Mapping[str, Any]) -> bytes:
    """One AWS event-stream message (module docstring): prelude, its CRC32, headers, payload, CRC32."""
    headers = b""
    for name, value in (
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ):
        raw = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    head = prelude + struct.pack(">I", binascii.crc32(prelude))
    message = head + headers + body
    return message + struct.pack(">I", binascii.crc32(message))
