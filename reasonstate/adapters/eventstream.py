"""The AWS event-stream binary framing (``application/vnd.amazon.eventstream``) Bedrock streams in: Converse's
``converse_stream`` (docs/protocols.md §11.4) and the Messages API's ``invoke-with-response-stream``
(§10.4), read from the raw body chunk by chunk with each message's prelude and CRC32s checked."""

from __future__ import annotations

import binascii
import struct
from typing import Any

from reasonstate.errors import MalformedResponse

__all__ = ["EventStreamParser"]


class EventStreamParser:
    """AWS event-stream messages from raw bytes: ``(headers, payload)`` per whole message. Each message is
    ``total length``, ``headers length`` (big-endian uint32), the CRC32 of those 8 bytes, the headers
    (name length byte, name, type byte, value), the payload and the CRC32 of everything before it; a CRC
    that does not match is :class:`MalformedResponse`."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[dict[str, Any], bytes]]:
        self._buffer += chunk
        out: list[tuple[dict[str, Any], bytes]] = []
        while len(self._buffer) >= 12:
            total, headers_length = struct.unpack(">II", self._buffer[:8])
            if struct.unpack(">I", self._buffer[8:12])[0] != binascii.crc32(self._buffer[:8]):
                raise MalformedResponse("an event-stream message's prelude CRC does not match")
            if total < 16 + headers_length:
                raise MalformedResponse("an event-stream message is shorter than its headers")
            if len(self._buffer) < total:
                break
            message, self._buffer = self._buffer[:total], self._buffer[total:]
            if struct.unpack(">I", message[-4:])[0] != binascii.crc32(message[:-4]):
                raise MalformedResponse("an event-stream message's CRC does not match")
            headers = _headers(message[12 : 12 + headers_length])
            out.append((headers, message[12 + headers_length : -4]))
        return out

    def pending(self) -> int:
        return len(self._buffer)


def _headers(raw: bytes) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    i = 0
    while i < len(raw):
        n = raw[i]
        name = raw[i + 1 : i + 1 + n].decode()
        kind = raw[i + 1 + n]
        i += 2 + n
        if kind in (6, 7):  # byte array, string: uint16 length
            (length,) = struct.unpack(">H", raw[i : i + 2])
            value: Any = raw[i + 2 : i + 2 + length]
            headers[name] = value.decode() if kind == 7 else value
            i += 2 + length
        elif kind in (0, 1):  # true, false
            headers[name] = kind == 0
        else:
            size = {2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}.get(kind)
            if size is None:
                raise MalformedResponse(f"an event-stream header has unknown type {kind}")
            headers[name] = raw[i : i + size]
            i += size
    return headers
