"""Exporting the trace layer: the :class:`Exporter` protocol, what an exporter sees, and the ``reasonstate``
logger's records.

A session hands every new trace event to its exporters (``rs.Session(..., exporters=[...])``), in trace
order, right after the transition that appended it: a commit's events arrive together, after the commit,
so an exporter reads the layers as they are *with* the events (the execution record a ``request.sent``
names is already there). Exporters shipped here: :class:`reasonstate.export.jsonl.JSONLExporter` (the
whole trace, one event per line) and :class:`reasonstate.export.otel.OTelExporter` (OpenTelemetry spans
and metrics, GenAI semantic conventions; the only module that imports ``opentelemetry``).

Invariants:
  * an exporter never breaks the caller: an exception out of ``export`` or ``close`` is logged (WARNING,
    logger ``reasonstate.export``) and counted in the exporter's ``failures``, and the session goes on;
  * every event reaches every exporter exactly once, in ``seq`` order (a session restored with
    ``exporters=`` exports from its ``session.restored`` event on: earlier events were the original
    session's to export);
  * the ``reasonstate`` logger's records carry digests, sizes, token counts, kinds and names: never a
    payload, a message or reasoning text. With logging disabled a transition costs one
    ``Logger.isEnabledFor`` per level checked.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from reasonstate.prefix import Prefix
from reasonstate.state import EventKind, History, Records, Step, Trace, TraceEvent

__all__ = [
    "WARNED_KINDS",
    "ExportContext",
    "Exporter",
    "Publisher",
    "declared_break",
    "log_events",
    "provider_name",
]

_log = logging.getLogger("reasonstate")
_export_log = logging.getLogger("reasonstate.export")


@runtime_checkable
class Exporter(Protocol):
    """What a session calls with its trace events.

    ``export`` is called once when the session is created (``events`` may be empty: the session starts),
    then after every transition that appended events, with those events in order. ``close`` is called by
    ``Session.close()``. ``failures`` counts the calls that raised (the session increments it) and any
    delivery the exporter itself knows failed. Both methods run on the caller's thread, inside ``send``:
    they must only enqueue or do short, bounded work.
    """

    failures: int

    def export(self, events: Sequence[TraceEvent], context: ExportContext) -> None: ...

    def close(self, context: ExportContext) -> None: ...


#: ``gen_ai.provider.name`` for each reasonstate vendor (the GenAI semantic conventions' well-known
#: values; a vendor not listed is named as reasonstate names it)
_PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "google": "gcp.gemini", "deepseek": "deepseek"}


def provider_name(vendor: str) -> str:
    """The ``gen_ai.provider.name`` value for a reasonstate vendor name."""
    return _PROVIDERS.get(vendor, vendor)


@attrs.frozen(slots=True)
class ExportContext:
    """One session as its exporters see it at one transition: a stable id and the session's state right
    after the transition whose events are being exported.

    A value built by the session from what an exporter reads (its vendor, API, model, prefix and policy
    name, and the layers, all immutable), so an exporter may keep it and read it later, on another thread:
    it still describes that transition. ``session_id`` is unique per session object
    (``gen_ai.conversation.id``, the JSONL ``session`` field). ``units`` is the adapter's ``payload_units``
    when it has one (see :meth:`payload_units`).
    """

    session_id: str
    #: the session's vendor (``anthropic``, ``openai``, ``deepseek``, ...) at this transition
    vendor: str
    #: the session's API (``messages``, ``responses``, ``chat``, ...) at this transition
    api: str
    model: str
    prefix: Prefix
    #: the session's policy's name
    policy: str
    #: the canonical history as it is with this transition's events
    history: History
    #: the execution records as they are with this transition's events
    execution: Records
    #: the whole trace up to and including this transition's events
    trace: Trace
    #: digests of the payloads a vendor rejected and the session leaves out
    stripped: frozenset[str] = frozenset()
    units: Callable[[Step], Mapping[str, tuple[str, ...]]] | None = attrs.field(
        default=None, eq=False, repr=False
    )

    @property
    def provider(self) -> str:
        """``gen_ai.provider.name`` of the session's vendor."""
        return provider_name(self.vendor)

    def payload_units(self, step: Step) -> Mapping[str, tuple[str, ...]]:
        """The prefix units ``step``'s payloads are when the adapter replays them as received → the payload
        digests each carries: a payload's own digest where it is a whole unit (an Anthropic content block,
        a Responses input item); the adapter's ``payload_units`` where units are built around payloads (a
        chat message as the server reads it, a Gemini content of Parts)."""
        if self.units is not None:
            return self.units(step)
        return {c.digest: (c.digest,) for c in step.continuation}


class Publisher:
    """The session's side: hands the events appended since the last call to the logger and the exporters.

    ``cursor`` is how many events were already handed out; :meth:`publish` hands out ``trace[cursor:]``.
    ``context`` is the session's: its :class:`ExportContext` right now, given this publisher's
    ``session_id`` (called only when there are exporters).
    """

    __slots__ = ("_session_id", "context", "cursor", "exporters", "started")

    def __init__(
        self, exporters: Sequence[Exporter], context: Callable[[str], ExportContext], cursor: int = 0
    ) -> None:
        self.exporters = tuple(exporters)
        self.context = context
        self._session_id: str | None = None
        self.cursor = cursor
        # whether the exporters had their first call (the session's start); with none, nothing to start,
        # so the session's fast path (Engine._set_layers) holds from its first transition on and never
        # reads (and so completes) a deferred event only a reader needs
        self.started = not self.exporters

    @property
    def session_id(self) -> str:
        """A random id, drawn when first read (a session without exporters never needs one)."""
        if self._session_id is None:
            self._session_id = uuid.uuid4().hex
        return self._session_id

    @staticmethod
    def checked(exporters: Any) -> tuple[Exporter, ...]:
        """``exporters`` as a tuple, or :class:`~reasonstate.errors.InvalidOption` for anything that is not
        a sequence of objects with ``export`` and ``close``."""
        if exporters == () and type(exporters) is tuple:  # the default: nothing to check
            return ()
        from reasonstate.errors import InvalidOption

        if isinstance(exporters, (str, bytes)) or not isinstance(exporters, Sequence):
            raise InvalidOption(f"exporters= must be a list of exporters, got {type(exporters).__name__}")
        for i, exporter in enumerate(exporters):
            if not all(callable(getattr(exporter, m, None)) for m in ("export", "close")):
                raise InvalidOption(
                    f"exporters[{i}] must have export(events, context) and close(context), "
                    f"got {exporter!r:.80}"
                )
        return tuple(exporters)

    def publish(self, trace: Trace) -> None:
        events = trace.events
        n = len(events)
        if n <= self.cursor:
            if n < self.cursor:  # a replaced trace (restore): nothing new to hand out
                self.cursor = n
            if self.started or not self.exporters:
                return
        new = events[self.cursor :]
        self.cursor = n
        if new:
            log_events(new)
        self.started = True
        if not self.exporters:
            return
        context = self.context(self.session_id)
        for exporter in self.exporters:
            try:
                exporter.export(new, context)
            except Exception as exc:
                self._failed(exporter, "export", exc)

    def close(self) -> None:
        context = self.context(self.session_id)
        for exporter in self.exporters:
            try:
                exporter.close(context)
            except Exception as exc:
                self._failed(exporter, "close", exc)

    @staticmethod
    def _failed(exporter: Exporter, what: str, exc: Exception) -> None:
        # an exporter without a writable counter is still logged
        with contextlib.suppress(Exception):
            exporter.failures += 1
        _export_log.warning(
            "exporter %s failed in %s (%s); the session goes on",
            type(exporter).__name__,
            what,
            type(exc).__name__,
        )


# -- the reasonstate logger ---------------------------------------------------------------------------------


def declared_break(event: TraceEvent) -> bool:
    """Whether a ``cache.break`` event was declared before its request: its ``declared`` field, which the
    commit sets when the cause is a prefix or model change, a vendor switch or a fold (``context.folded``),
    or when the policy decision it cites predicted the divergence (``divergence_unit``). A break a Keep
    decision did not predict (a vendor rejection left a payload out, say) was not declared, nor is one
    whose event has no such field."""
    return event.data.get("declared") is True


def log_events(events: Sequence[TraceEvent]) -> None:
    """The ``reasonstate`` logger's records for ``events``: DEBUG per request, INFO per turn close and fold,
    WARNING for undeclared cache breaks, withheld continuation, clamped policies, recovered failures and
    a fold skipped because ``summarize`` failed.
    Digests, sizes, counts and names only."""
    log = _log
    debug = log.isEnabledFor(logging.DEBUG)
    if not debug and not log.isEnabledFor(logging.INFO):
        if not log.isEnabledFor(logging.WARNING) or WARNED_KINDS.isdisjoint(map(_KIND, events)):
            return  # the common case: a request's events, none of them a warning
        for event in events:
            if event.kind in WARNED_KINDS:
                _log_event(event)
        return
    for event in events:
        _log_event(event)


def _log_event(event: TraceEvent) -> None:
    kind, data, log = event.kind, event.data, _log
    if kind == EventKind.REQUEST_SENT:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request %s sent: %s, %d bytes, prefix %s, divergence %s, predicted cache read %s",
                data.get("index"),
                data.get("request_digest"),
                data.get("bytes", 0),
                str(data.get("prefix_fingerprint", ""))[:19],
                data.get("divergence"),
                data.get("predicted_cache_read"),
            )
    elif kind == EventKind.RESPONSE_RECEIVED:
        if log.isEnabledFor(logging.DEBUG):
            usage = data.get("usage") or {}
            log.debug(
                "response %s: stop %s, cache read %s, cache write %s, output %s tokens, %.3f s",
                data.get("index"),
                data.get("stop_reason"),
                usage.get("cache_read"),
                usage.get("cache_write"),
                usage.get("output"),
                data.get("duration_s") or 0.0,
            )
    elif kind == EventKind.POLICY_DECISION:
        if log.isEnabledFor(logging.INFO):
            log.info(
                "turn %s closed: policy %s, next divergence %s, predicted cache read %s, "
                "cache tokens lost %s",
                data.get("turn"),
                data.get("policy"),
                data.get("divergence_unit"),
                data.get("predicted_cache_read"),
                data.get("cache_tokens_lost", 0),
            )
    elif kind == EventKind.CACHE_BREAK:
        why = str(data.get("why", ""))
        declared = declared_break(event)
        level = logging.INFO if declared else logging.WARNING
        if log.isEnabledFor(level):
            cause = why if declared else f"not declared by any traced change ({why})"
            log.log(
                level,
                "cache break at request %s, prefix unit %s: %s",
                data.get("index"),
                data.get("unit"),
                cause,
            )
    elif kind == EventKind.CONTINUATION_WITHHELD:
        log.warning(
            "%s continuation payload(s) withheld (%s): produced by another vendor or model",
            data.get("count"),
            ", ".join(data.get("kinds") or ()),
        )
    elif kind == EventKind.POLICY_CLAMPED:
        log.warning(
            "policy %s clamped on turn %s: %d rule(s) applied",
            data.get("policy"),
            data.get("turn"),
            len(data.get("reasons") or ()),
        )
    elif kind == EventKind.CONTINUATION_STRIPPED:
        log.warning(
            "recovered: the vendor rejected %d replayed payload(s) (%s); left out and retried once",
            len(data.get("digests") or ()),
            ", ".join(data.get("kinds") or ()),
        )
    elif kind == _CHAIN_FALLBACK:
        log.warning("recovered: the stored response chain was replaced by a full replay")
    elif kind == EventKind.CALL_FAILED:
        if log.isEnabledFor(logging.INFO):
            log.info("call failed: %s (status %s)", data.get("error"), data.get("status"))
    elif kind in _SWITCHES and log.isEnabledFor(logging.INFO):
        log.info("%s: every later request re-prefills from the change on", kind)
    elif kind == EventKind.CONTEXT_FOLDED:
        if data.get("error") is not None:
            log.warning(
                "fold skipped after turn %s: summarize failed (%s)", data.get("turn"), data.get("error")
            )
        elif not data.get("skipped") and log.isEnabledFor(logging.INFO):
            log.info(
                "context folded after turn %s: turns %s..%s summarized (%s tokens >= %s); the next request "
                "re-prefills from the first message",
                data.get("turn"),
                data.get("first_folded"),
                data.get("through"),
                data.get("tokens_before"),
                data.get("threshold_tokens"),
            )


_SWITCHES = frozenset({EventKind.MODEL_CHANGED, EventKind.VENDOR_CHANGED, EventKind.PREFIX_CHANGED})

#: the OpenAI Responses adapter's event for a lost stored chain, replayed in full (a recovery)
_CHAIN_FALLBACK = "chain.fallback"

#: the event kinds logged at WARNING (cache.break only when undeclared: decided in _log_event); the engine
#: reads it to skip the publisher on a state change with no exporter and nothing to log
_KIND = operator.attrgetter("kind")
WARNED_KINDS = frozenset(
    {
        EventKind.CACHE_BREAK,
        EventKind.CONTINUATION_WITHHELD,
        EventKind.POLICY_CLAMPED,
        EventKind.CONTINUATION_STRIPPED,
        EventKind.CONTEXT_FOLDED,  # only a failed summarize (decided in _log_event)
        EventKind.STREAM_TRAILING,
        _CHAIN_FALLBACK,
    }
)
