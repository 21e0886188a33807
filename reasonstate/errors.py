"""One exception hierarchy under :class:`ReasonStateError`.

Every error raised by reasonstate leaves the session exactly as it was before the call that raised it:
nothing is appended, nothing is half-applied, and retrying sends the same bytes.
"""

from __future__ import annotations

__all__ = [
    "ContinuationMismatch",
    "IllegalTransition",
    "InvalidInput",
    "InvalidOption",
    "MalformedResponse",
    "MissingCredentials",
    "PolicyConflict",
    "ProtocolViolation",
    "ReasonStateError",
    "SessionConflict",
    "SnapshotError",
    "StoreError",
    "StreamInterrupted",
    "ToolResultError",
    "VendorError",
]


class ReasonStateError(Exception):
    """Base of every error reasonstate raises."""


class InvalidOption(ReasonStateError, ValueError):
    """A session option the SDK owns (``messages``, ``tools``, ...) or cannot use, given at construction."""


class MissingCredentials(InvalidOption):
    """The client has no credentials the vendor SDK could send (no API key, token or auth header), found
    when the session is built: the SDK would fail only at the first request."""


class IllegalTransition(ReasonStateError):
    """A call the turn state machine does not allow now (e.g. a user message while tool results are due)."""


class InvalidInput(IllegalTransition, ValueError):
    """Caller text that cannot be sent: not a non-empty string, or not valid Unicode (a lone surrogate, half
    of a UTF-16 pair, has no UTF-8 form and no vendor accepts it); the message names where. Nothing is sent
    and nothing changes."""


class ToolResultError(IllegalTransition):
    """Tool results that do not fit the pending calls: unknown or missing call ids, non-JSON values."""


class ProtocolViolation(ReasonStateError):
    """A request that would break a vendor rule declared in the adapter's ``ProtocolRules``."""


class ContinuationMismatch(ProtocolViolation):
    """A continuation payload whose digest changed since capture, or that belongs to another vendor/model."""


class SnapshotError(ReasonStateError, ValueError):
    """A snapshot that cannot be restored: not JSON, not a snapshot, an unknown version, a missing field, or
    content edited after it was taken (its integrity digest no longer matches). Nothing is restored."""


class PolicyConflict(ReasonStateError):
    """A policy asked for something the vendor's protocol rules forbid and that cannot be clamped."""


class VendorError(ReasonStateError):
    """The vendor call failed (HTTP error, timeout, dropped connection); ``__cause__`` is the SDK's exception.

    ``status`` is the HTTP status when there was one; ``body`` the vendor's error envelope when parsed.
    """

    def __init__(self, message: str, *, status: int | None = None, body: object = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class StreamInterrupted(VendorError):
    """A streamed response ended before the vendor's terminal event; nothing of it is committed."""


class MalformedResponse(VendorError):
    """The vendor answered with something the adapter cannot decode (bad JSON, missing required fields)."""


class StoreError(ReasonStateError):
    """The session store could not do what was asked: unreachable, a write failed or timed out, a row it
    holds cannot be read (edited, or encrypted under another key), or a lease is held by another worker.

    ``reply`` is the :class:`~reasonstate.session.Reply` a session call had already paid for when the
    store failed after it (None otherwise): the in-memory session keeps it committed, and the delta not
    written goes out with the next successful append (or ``session.flush()``). Nothing in the store is
    deleted or half-written by a failure: a reader sees the last complete commit.
    """

    def __init__(self, message: str, *, reply: object = None) -> None:
        super().__init__(message)
        self.reply = reply


class SessionConflict(StoreError):
    """Another writer appended to the session first: this append was built on version ``expected``, the
    store holds ``found``. Nothing was written, and the history did not fork. ``reply`` (when a session
    call raised it) is the answer that was paid for; reload the session (``Session.load``) and decide.
    """

    def __init__(
        self, message: str, *, session_id: str, expected: int, found: int, reply: object = None
    ) -> None:
        super().__init__(message, reply=reply)
        self.session_id = session_id
        self.expected = expected
        self.found = found
