"""Protocol continuation: vendor-opaque payloads exactly as received, with provenance and a capture digest.

Invariants (the rules the whole SDK stands on):
  * ``payload`` is never edited: it is the block/item JSON as the vendor sent it (UTF-8 bytes);
  * ``digest == sha256(payload)`` at capture, and :meth:`Continuation.checked` re-verifies it before every
    send, so a payload changed in memory or in a snapshot is refused, never sent;
  * a continuation is replayed only to the vendor, api and model that produced it (signatures are
    model-bound: anthropics/anthropic-sdk-python#1598), see :meth:`Continuation.replayable_to`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

from reasonstate.errors import ContinuationMismatch
from reasonstate.state.frozen import freeze

__all__ = ["Continuation", "compact", "digest_of"]

_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def compact(value: Any) -> bytes:
    """Compact JSON, keys in their given order, non-ASCII kept as it is (never escaped): how payloads are
    captured and sent, and what prefix units are digests of."""
    return _DUMPS(value).encode()


def digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


@attrs.frozen(slots=True)
class Continuation:
    """One vendor-opaque payload (a thinking block, a reasoning item, a content block we do not model).

    ``kind`` is the vendor's own type name (``thinking``, ``redacted_thinking``, ``reasoning``, ...);
    ``model_bound`` says whether only the producing model may receive it.
    """

    vendor: str
    api: str
    model: str
    kind: str
    payload: bytes = attrs.field(repr=False)
    digest: str
    model_bound: bool = True
    # (digest, parsed value): the payload parsed once, re-used while the digest still verifies
    _parsed: list[Any] = attrs.field(factory=list, init=False, eq=False, repr=False)
    # (payload, digest): the very objects last found to match. ``bytes`` and ``str`` are immutable, so while
    # both attributes still hold them the match still holds and nothing is re-hashed; any replaced
    # attribute (an edit in memory) is hashed again
    _verified: list[Any] = attrs.field(factory=list, init=False, eq=False, repr=False)

    @classmethod
    def capture(
        cls,
        *,
        vendor: str,
        api: str,
        model: str,
        kind: str,
        value: Any,
        model_bound: bool = True,
        parsed: bool = True,
    ) -> Continuation:
        """Capture a decoded JSON value as received (key order and string bytes preserved).

        ``value`` is a JSON value as decoded (``json.loads``), so ``json.loads(payload) == value``: with
        ``parsed`` (for codecs that replay :attr:`value`) its frozen copy is memoized as the payload's
        parsed value at once, not parsed again from the bytes on the first replay.
        """
        payload = compact(value)
        digest = digest_of(payload)
        captured = cls(
            vendor=vendor,
            api=api,
            model=model,
            kind=kind,
            payload=payload,
            digest=digest,
            model_bound=model_bound,
        )
        captured._verified[:] = [payload, digest]  # the digest was just taken of these very bytes
        if parsed:
            captured._parsed[:] = [digest, freeze(value)]
        return captured

    def verify(self) -> None:
        """Raise :class:`ContinuationMismatch` unless ``sha256(payload) == digest``."""
        payload, digest, seen = self.payload, self.digest, self._verified
        if seen and seen[0] is payload and seen[1] is digest:
            return
        if digest_of(payload) != digest:
            raise ContinuationMismatch(
                f"{self.vendor} {self.kind} payload changed since capture (digest {digest[:19]}…)"
            )
        seen[:] = [payload, digest]

    def checked(self) -> Any:
        """The payload as a fresh, mutable JSON value, after :meth:`verify`."""
        self.verify()
        return json.loads(self.payload)

    @property
    def value(self) -> Any:
        """The payload's JSON value, frozen (:func:`~reasonstate.state.frozen.freeze`), after :meth:`verify`.

        Parsed once (from the verified bytes, or taken at capture from the very value the bytes were
        serialized from) and shared between requests: nothing can change it, so what a request sends is
        what was captured. The memo is tied to the digest it was parsed under.
        """
        self.verify()
        memo = self._parsed
        if memo and memo[0] == self.digest:
            return memo[1]
        value = freeze(json.loads(self.payload))
        memo[:] = [self.digest, value]
        return value

    def replayable_to(self, vendor: str, api: str, model: str) -> bool:
        """True when this payload may be sent to ``vendor``/``api``/``model``."""
        if self.vendor != vendor or self.api != api:
            return False
        return not self.model_bound or self.model == model
