"""The trace layer: every event of a session, append-only.

Events are generic frozen values (``kind`` + JSON-able ``data``) so exporters (JSONL, OpenTelemetry) read
them without knowing each kind. Redaction happens at export, never by mutating an event: the trace may hold
raw reasoning text, and opaque payloads appear only as digests.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from reasonstate.state.frozen import freeze

__all__ = ["EventKind", "Trace", "TraceEvent"]


class EventKind:
    """The event kinds a session emits (string constants, stable for exporters)."""

    TURN_OPENED = "turn.opened"
    TURN_CLOSED = "turn.closed"
    REQUEST_SENT = "request.sent"
    RESPONSE_RECEIVED = "response.received"
    CALL_FAILED = "call.failed"
    REASONING = "reasoning.captured"
    TOOL_CALLS = "tool.calls"
    TOOL_RESULTS = "tool.results"
    #: ``Session.run`` executed the handlers of a step's calls: per call its start (wall time) and duration
    TOOL_EXECUTED = "tool.executed"
    #: ``Session.run`` repaired a tool call before running it (``repair``: ``flatten``, ``scavenge``,
    #: ``arguments_completed`` or ``arguments_invalid``); the continuation bytes are never touched
    TOOL_REPAIRED = "tool.repaired"
    #: the storm breaker suppressed a call (same tool, same arguments, 3 times within the last 6 calls)
    TOOL_SUPPRESSED = "tool.suppressed"
    POLICY_DECISION = "policy.decision"
    POLICY_CLAMPED = "policy.clamped"
    POLICY_FAILED = "policy.failed"
    CACHE_BREAK = "cache.break"
    PREFIX_CHANGED = "prefix.changed"
    PREFIX_VOLATILE = "prefix.volatile"
    CONTINUATION_WITHHELD = "continuation.withheld"
    MODEL_CHANGED = "model.changed"
    VENDOR_CHANGED = "vendor.changed"
    CONTINUATION_STRIPPED = "continuation.stripped"
    RESTORED = "session.restored"
    #: :class:`~reasonstate.policies.Fold` summarized the head of the history (a declared cache break)
    CONTEXT_FOLDED = "context.folded"


@attrs.frozen(slots=True)
class TraceEvent:
    """One event: its position in the session (``seq``), wall time, kind and JSON-able data.

    Invariants: ``seq`` is the event's index in its trace; ``data`` is frozen and holds digests and sizes of
    opaque payloads, never the payloads themselves.
    """

    seq: int
    kind: str
    #: frozen (:func:`~reasonstate.state.frozen.freeze`): an exporter or caller cannot change the record
    data: Mapping[str, Any] = attrs.field(converter=freeze)
    at: float = attrs.field(factory=time.time)


@attrs.frozen(slots=True)
class Trace:
    """An append-only sequence of :class:`TraceEvent`; ``appended`` returns a new value."""

    events: tuple[TraceEvent, ...] = ()

    def appended(self, kind: str, **data: Any) -> Trace:
        """A new trace with one event appended (``seq`` is its position); this trace is unchanged."""
        return Trace((*self.events, TraceEvent(seq=len(self.events), kind=kind, data=data)))

    def extended(self, items: Iterable[tuple[str, Mapping[str, Any]]]) -> Trace:
        """The trace with one event per ``(kind, data)`` appended, in order, stamped with one wall time:
        a request's events are one batch, so the session copies its trace once per request, not per event."""
        n, now = len(self.events), time.time()
        added = [TraceEvent(n + i, kind, data, now) for i, (kind, data) in enumerate(items)]
        return Trace((*self.events, *added)) if added else self

    def of_kind(self, kind: str) -> list[TraceEvent]:
        """The events of ``kind`` (an :class:`EventKind` constant), in order."""
        return [e for e in self.events if e.kind == kind]

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)
