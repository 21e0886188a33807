"""OpenTelemetry export: spans and metrics per the GenAI semantic conventions, plus reasonstate's own layers.

``rs.Session(client, ..., exporters=[OTelExporter()])``. The span tree of a session::

    reasonstate.session                      (gen_ai.conversation.id, provider, model)
      reasonstate.turn                       (one per user turn; policy decision and clamp)
        chat {model}                         (one per model call, CLIENT; usage, cache, continuation)
        execute_tool {tool name}             (one per tool call executed)

Attribute names are the GenAI conventions' (``gen_ai.*``, checked against
``opentelemetry/semconv/_incubating/attributes/gen_ai_attributes.py`` of opentelemetry-semantic-conventions
0.66b2 by ``tests/test_export_otel.py``) and ours (``reasonstate.*``); docs/export.md lists them all with
their source. Metrics: ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` histograms,
and ``reasonstate.cache.hit_ratio`` (cache read / prompt tokens per call).

Invariants:
  * this is the only reasonstate module that imports ``opentelemetry``;
  * ``send`` only enqueues: the exporter builds spans and records metrics on its own worker thread
    (``background=True``, the default; the times are the session's, so nothing is skewed by the queue),
    in trace order, and ``Session.close()`` returns once the session's spans are ended. How and when they
    leave the process is the tracer/meter provider's choice (a ``BatchSpanProcessor``: no I/O anywhere
    near ``send``);
  * opaque payloads (signatures, encrypted content, redacted thinking, token ids) are never exported, with
    content capture on or off: only their digests and sizes. Messages, visible reasoning, tool arguments
    and results are exported only with ``capture_content=True`` or
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, as span events and tool attributes;
  * span times are the session's own: a chat span starts ``duration_s`` before its answer was recorded
    and ends then; a tool span covers the handler's run (``Session.run``) or, for results the caller sent
    itself, the time from the calls to the request that sent the results (``reasonstate.tool.timing``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

try:
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by tests/test_imports.py
    raise ImportError("reasonstate.export.otel needs OpenTelemetry: pip install 'reasonstate[otel]'") from exc

from reasonstate.export import ExportContext, declared_break
from reasonstate.state import (
    EventKind,
    ExecutionRecord,
    OpaquePart,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    TraceEvent,
    as_records,
)
from reasonstate.state.units import UnitSeq

__all__ = ["CAPTURE_ENV", "OTelExporter"]

#: the environment variable the GenAI instrumentations read to switch content capture on
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# -- GenAI semantic-convention names (the strings of opentelemetry.semconv._incubating) ---------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
CONVERSATION = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"
TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
CACHE_HIT_RATIO = "reasonstate.cache.hit_ratio"
#: the span event that carries captured content (the conventions' inference details event)
DETAILS_EVENT = "gen_ai.client.inference.operation.details"

CHAT = "chat"
EXECUTE_TOOL = "execute_tool"
SESSION_SPAN = "reasonstate.session"
TURN_SPAN = "reasonstate.turn"

# the bucket boundaries the conventions advise for the two client histograms
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_RATIO_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)

#: session-level events recorded as span events (switches, prefix changes, recoveries, restores, folds)
_SESSION_EVENTS = frozenset(
    {
        EventKind.MODEL_CHANGED,
        EventKind.VENDOR_CHANGED,
        EventKind.PREFIX_CHANGED,
        EventKind.PREFIX_VOLATILE,
        EventKind.CONTINUATION_STRIPPED,
        EventKind.RESTORED,
        EventKind.CONTEXT_FOLDED,
    }
)


_log = logging.getLogger("reasonstate.export")

#: (events, context, wall time of the call, done) — ``done`` marks a close (context) or a flush (no context)
_Item = tuple[tuple[TraceEvent, ...], "ExportContext | None", float, "threading.Event | None"]


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _version() -> str:
    try:
        return importlib.metadata.version("reasonstate")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _scalars(data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The scalar values of an event's data as attributes (nested values: their length only)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, (str, bool, int, float)):
            out[f"{prefix}.{key}"] = value
        elif isinstance(value, (list, tuple, Mapping)):
            out[f"{prefix}.{key}.count"] = len(value)
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@attrs.define
class _PendingCall:
    name: str
    at: float
    arguments: str
    timing: Mapping[str, Any] | None = None


@attrs.define
class _SessionSpans:
    """What the exporter holds for one session between batches."""

    session: Span
    turn: Span | None = None
    turn_index: int | None = None
    #: tool calls the model made whose spans are not ended yet, by call id
    calls: dict[str, _PendingCall] = attrs.field(factory=dict)
    #: the prefix units the session's payloads are when replayed as received → the payload digests in each
    payloads: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    #: the previous request's prefix units, and (unit position, payload digests) of the payload units
    units: UnitSeq = ()
    replayed: list[tuple[int, tuple[str, ...]]] = attrs.field(factory=list)
    #: sha256 over the digests in ``replayed``, each followed by a newline
    hash: Any = attrs.field(factory=hashlib.sha256)
    count: int = 0
    requests: int = 0
    failed: int = 0


class OTelExporter:
    """Spans and metrics for every session it is attached to (see the module docstring).

    ``tracer_provider`` / ``meter_provider``: the providers to use (default: the global ones, a no-op until
    the application sets them). ``capture_content``: export messages, visible reasoning and tool
    arguments/results (default off; the ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``
    environment variable switches it on too). ``background=False`` builds the spans inside ``send``
    instead of on the worker thread. ``failures`` counts batches whose spans could not be built (logged;
    the session goes on). :meth:`flush` waits for the queue to drain.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
        *,
        background: bool = True,
    ) -> None:
        version = _version()
        self._tracer: Tracer = trace.get_tracer("reasonstate", version, tracer_provider=tracer_provider)
        meter = metrics.get_meter("reasonstate", version, meter_provider=meter_provider)
        self._tokens: Histogram = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._duration: Histogram = meter.create_histogram(
            OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._hit_ratio: Histogram = meter.create_histogram(
            CACHE_HIT_RATIO,
            unit="1",
            description="Prompt-cache read tokens over prompt tokens, per model call",
            explicit_bucket_boundaries_advisory=_RATIO_BUCKETS,
        )
        env = os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"
        self.capture_content = bool(capture_content) or env
        self.failures = 0
        self.background = background
        #: how long ``close`` waits for the worker to reach it
        self.close_timeout = 10.0
        self._sessions: dict[str, _SessionSpans] = {}
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None

    # -- the Exporter protocol ----------------------------------------------------------------------------
    def export(self, events: Sequence[TraceEvent], context: ExportContext) -> None:
        """Queue the events (``background``) or build their spans now. Never raises in background mode: a
        failure there is logged and counted in ``failures``."""
        if self.background:
            self._put((tuple(events), context, time.time(), None))
        else:
            self._spans(events, context, time.time())

    def close(self, context: ExportContext) -> None:
        """End the session's open spans (its turn, then the session span). In background mode this waits
        for the worker to reach it (at most ``close_timeout`` seconds), so every span of the session has
        been handed to the tracer provider when ``Session.close()`` returns."""
        if not self.background:
            self._close(context, time.time())
            return
        done = threading.Event()
        self._put(((), context, time.time(), done))
        done.wait(self.close_timeout)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event queued so far has become spans; False on timeout."""
        if not self.background:
            return True
        done = threading.Event()
        self._put(((), None, time.time(), done))
        return done.wait(timeout)

    # -- the worker ---------------------------------------------------------------------------------------
    def _put(self, item: _Item) -> None:
        self._queue.put(item)
        worker = self._worker
        if worker is None or not worker.is_alive():
            with self._lock:
                if self._worker is None or not self._worker.is_alive():  # first use, or after a fork
                    self._worker = threading.Thread(target=self._work, name="reasonstate-otel", daemon=True)
                    self._worker.start()

    def _work(self) -> None:
        while True:
            events, context, at, done = self._queue.get()
            try:
                if done is None and context is not None:
                    self._spans(events, context, at)
                elif context is not None:
                    self._close(context, at)
            except Exception as exc:  # never lost silently, never fatal to the worker
                self.failures += 1
                _log.warning("OTel export of %d event(s) failed: %s", len(events), type(exc).__name__)
            finally:
                if done is not None:
                    done.set()

    def _spans(self, events: Sequence[TraceEvent], context: ExportContext, at: float) -> None:
        with self._lock:
            state = self._sessions.get(context.session_id)
            if state is None:
                state = self._sessions[context.session_id] = self._open_session(context, events, at)
            self._batch(state, events, context)

    def _close(self, context: ExportContext, now: float) -> None:
        with self._lock:
            state = self._sessions.pop(context.session_id, None)
            if state is None:
                return
            for call_id, pending in list(state.calls.items()):
                if pending.timing is not None:  # executed, results never sent
                    self._tool_span(state, call_id, pending, now, None, context)
            if state.turn is not None:
                state.turn.end(_ns(now))
            state.session.set_attribute("reasonstate.session.requests", state.requests)
            state.session.set_attribute("reasonstate.session.failed_calls", state.failed)
            state.session.end(_ns(now))

    # -- spans ----------------------------------------------------------------------------------------------
    def _open_session(self, context: ExportContext, events: Sequence[TraceEvent], at: float) -> _SessionSpans:
        start = events[0].at if events else at
        span = self._tracer.start_span(
            SESSION_SPAN,
            start_time=_ns(start),
            attributes={
                CONVERSATION: context.session_id,
                PROVIDER: context.provider,
                REQUEST_MODEL: context.model,
                "reasonstate.api": context.api,
                "reasonstate.prefix.fingerprint": context.prefix.fingerprint,
                "reasonstate.policy.name": context.policy,
            },
        )
        return _SessionSpans(session=span)

    def _open_turn(self, state: _SessionSpans, index: int, start: float, context: ExportContext) -> Span:
        if state.turn is not None and state.turn_index == index:
            return state.turn
        if state.turn is not None:  # a turn left open (its first call failed and was never retried)
            state.turn.end(_ns(start))
        state.turn = self._tracer.start_span(
            TURN_SPAN,
            context=trace.set_span_in_context(state.session),
            start_time=_ns(start),
            attributes={CONVERSATION: context.session_id, "reasonstate.turn.index": index},
        )
        state.turn_index = index
        return state.turn

    def _parent(self, state: _SessionSpans) -> Span:
        return state.turn if state.turn is not None else state.session

    def _batch(self, state: _SessionSpans, events: Sequence[TraceEvent], context: ExportContext) -> None:
        """One transition's events, in order (the order :func:`reasonstate.engine.commit` appends)."""
        call_start = next(
            (
                e.at - float(e.data.get("duration_s") or 0.0)
                for e in events
                if e.kind == EventKind.RESPONSE_RECEIVED
            ),
            None,
        )
        request: dict[str, TraceEvent] = {}
        chat: Span | None = None
        chat_end = 0.0
        for event in events:
            kind, data = event.kind, event.data
            if kind == EventKind.TURN_OPENED:
                self._open_turn(state, int(data["turn"]), call_start or event.at, context)
            elif kind == EventKind.TOOL_EXECUTED:
                for timing in data.get("calls") or ():
                    pending = state.calls.get(str(timing["id"]))
                    if pending is not None:
                        pending.timing = timing
            elif kind == EventKind.TOOL_REPAIRED:
                self._parent(state).add_event(
                    "reasonstate.tool.repaired", _repair_attributes(data), timestamp=_ns(event.at)
                )
            elif kind == EventKind.TOOL_RESULTS:
                end = call_start if call_start is not None else event.at
                for call_id in data.get("call_ids") or ():
                    pending = state.calls.pop(str(call_id), None)
                    if pending is not None:
                        self._tool_span(state, str(call_id), pending, end, int(data["turn"]), context)
            elif kind in (EventKind.CONTINUATION_WITHHELD, EventKind.REQUEST_SENT, EventKind.CACHE_BREAK):
                request[kind] = event
            elif kind == EventKind.RESPONSE_RECEIVED:
                chat = self._chat_span(state, event, request, context)
                chat_end = event.at
                request = {}
            elif kind == EventKind.REASONING:
                if chat is not None:
                    digests = list(data.get("payload_digests") or ())
                    chat.set_attribute("reasonstate.reasoning.payload_digests", digests)
                    chat.set_attribute(
                        "reasonstate.reasoning.visible_chars", len(str(data.get("text") or ""))
                    )
            elif kind == EventKind.TOOL_CALLS:
                calls = list(data.get("calls") or ())
                if chat is not None:
                    chat.set_attribute("reasonstate.tool_calls.count", len(calls))
                for call in calls:
                    state.calls[str(call["id"])] = _PendingCall(
                        name=str(call["name"]), at=event.at, arguments=str(call.get("arguments") or "")
                    )
            elif kind == EventKind.POLICY_CLAMPED:
                turn = self._parent(state)
                reasons = [str(r) for r in data.get("reasons") or ()]
                turn.set_attribute("reasonstate.policy.clamped", True)
                turn.add_event(
                    "reasonstate.policy.clamped",
                    {
                        "reasonstate.turn.index": int(data["turn"]),
                        "reasonstate.policy.clamp_reasons": reasons,
                    },
                    timestamp=_ns(event.at),
                )
            elif kind == EventKind.POLICY_DECISION:
                self._decision(state, data, context)
            elif kind == EventKind.POLICY_FAILED:
                self._parent(state).add_event(
                    "reasonstate.policy.failed",
                    {"reasonstate.policy.name": str(data.get("policy")), ERROR_TYPE: str(data.get("error"))},
                    timestamp=_ns(event.at),
                )
            elif kind == EventKind.TURN_CLOSED:
                if chat is not None:
                    chat.end(_ns(chat_end))
                    chat = None
                if state.turn is not None:
                    state.turn.set_attribute("reasonstate.turn.steps", int(data.get("steps") or 0))
                    state.turn.end(_ns(event.at))
                    state.turn, state.turn_index = None, None
            elif kind == EventKind.CALL_FAILED:
                self._failed_span(state, event, context)
            elif kind in _SESSION_EVENTS:
                self._switch(state, event)
            else:  # an adapter's own event (a chain fallback, input transformations): counts and names only
                target = chat if chat is not None else self._parent(state)
                target.add_event(kind, _scalars(_without_text(data), "reasonstate"), timestamp=_ns(event.at))
        if chat is not None:
            chat.end(_ns(chat_end))

    def _chat_span(
        self,
        state: _SessionSpans,
        event: TraceEvent,
        request: Mapping[str, TraceEvent],
        context: ExportContext,
    ) -> Span:
        data = event.data
        index = int(data["index"])
        record = context.execution[index]
        step = context.history.turns[record.turn].steps[record.step]
        usage = data.get("usage") or {}
        prompt = int(usage.get("uncached_input", 0)) + int(usage.get("cache_read", 0))
        prompt += int(usage.get("cache_write", 0))
        cache_read = int(usage.get("cache_read", 0))
        duration = float(data.get("duration_s") or 0.0)
        response_model = data.get("response_model")
        attributes: dict[str, Any] = {
            OPERATION: CHAT,
            PROVIDER: context.provider,
            REQUEST_MODEL: record.model,
            FINISH_REASONS: [str(data.get("stop_reason"))],
            INPUT_TOKENS: prompt,
            OUTPUT_TOKENS: int(usage.get("output", 0)),
            CACHE_READ: cache_read,
            CACHE_CREATION: int(usage.get("cache_write", 0)),
            CONVERSATION: context.session_id,
            "reasonstate.api": context.api,
            "reasonstate.request.index": index,
            "reasonstate.turn.index": record.turn,
            "reasonstate.step.index": record.step,
            "reasonstate.request.digest": record.request_digest,
            "reasonstate.request.bytes": record.request_bytes,
            "reasonstate.prefix.fingerprint": record.prefix_fingerprint,
            "reasonstate.prefix.units": record.units,
            "reasonstate.cache.reported_read": cache_read,
        }
        if response_model:
            attributes[RESPONSE_MODEL] = str(response_model)
        if data.get("response_id"):
            attributes[RESPONSE_ID] = str(data["response_id"])
        if usage.get("reasoning") is not None:
            attributes[REASONING_TOKENS] = int(usage["reasoning"])
        if record.predicted_cache_read is not None:
            attributes["reasonstate.cache.predicted_read"] = record.predicted_cache_read
            attributes["reasonstate.cache.prediction_exact"] = record.predicted_cache_read == cache_read
        if record.divergence is not None:
            attributes["reasonstate.cache.divergence_unit"] = record.divergence
        broken = request.get(EventKind.CACHE_BREAK)
        if broken is not None:
            why = str(broken.data.get("why", ""))
            attributes["reasonstate.cache.break.unit"] = int(broken.data.get("unit") or 0)
            # the vocabulary word (reasonstate.guard.CAUSES); a trace recorded before it existed has only why
            attributes["reasonstate.cache.break.cause"] = str(broken.data.get("cause") or why)
            attributes["reasonstate.cache.break.why"] = why
            if broken.data.get("path"):
                attributes["reasonstate.cache.break.path"] = str(broken.data["path"])
            attributes["reasonstate.cache.break.declared"] = declared_break(broken)
        count, digest = _replayed(state, record, as_records(context.execution).units_of(index))
        attributes["reasonstate.continuation.replayed.count"] = count
        attributes["reasonstate.continuation.replayed.digest"] = digest
        held = request.get(EventKind.CONTINUATION_WITHHELD)
        withheld = held.data if held is not None else None
        attributes["reasonstate.continuation.withheld.count"] = int(withheld["count"]) if withheld else 0
        if withheld:
            attributes["reasonstate.continuation.withheld.digests"] = [str(d) for d in withheld["digests"]]
            attributes["reasonstate.continuation.withheld.kinds"] = [str(k) for k in withheld["kinds"]]
        if context.stripped:
            attributes["reasonstate.continuation.stripped.count"] = len(context.stripped)
        # the payloads kept (a provenance-only value keeps none: its item is the step's parts rendered)
        captured = [c for c in step.continuation if not c.bare]
        attributes["reasonstate.continuation.captured.count"] = len(captured)
        attributes["reasonstate.continuation.captured.digests"] = [c.digest for c in captured]
        attributes["reasonstate.continuation.captured.bytes"] = sum(len(c.payload) for c in captured)
        attributes["reasonstate.continuation.captured.kinds"] = [c.kind for c in captured]
        if record.ids_seal is not None:  # token ids: a digest and counts, never the ids
            attributes["reasonstate.token_ids.digest"] = record.ids_seal
            attributes["reasonstate.token_ids.prompt"] = len(record.prompt_ids or ())
            attributes["reasonstate.token_ids.completion"] = len(record.completion_ids or ())
        start = event.at - duration
        span = self._tracer.start_span(
            f"{CHAT} {record.model}",
            context=trace.set_span_in_context(self._parent(state)),
            kind=SpanKind.CLIENT,
            start_time=_ns(start),
            attributes=attributes,
        )
        if self.capture_content:
            span.add_event(
                DETAILS_EVENT,
                {
                    INPUT_MESSAGES: _json(_input_messages(context, record)),
                    OUTPUT_MESSAGES: _json([_output_message(step)]),
                },
                timestamp=_ns(event.at),
            )
        state.payloads.update(context.payload_units(step))
        state.requests += 1
        metric = {OPERATION: CHAT, PROVIDER: context.provider, REQUEST_MODEL: record.model}
        if response_model:
            metric[RESPONSE_MODEL] = str(response_model)
        self._tokens.record(prompt, {**metric, TOKEN_TYPE: "input"})
        self._tokens.record(int(usage.get("output", 0)), {**metric, TOKEN_TYPE: "output"})
        self._duration.record(duration, metric)
        if prompt:
            self._hit_ratio.record(cache_read / prompt, metric)
        return span

    def _failed_span(self, state: _SessionSpans, event: TraceEvent, context: ExportContext) -> None:
        data = event.data
        duration = float(data.get("duration_s") or 0.0)
        start = event.at - duration
        if state.turn is None:
            history = context.history
            open_turn = history.open_turn
            index = open_turn.index if open_turn is not None else len(history)
            self._open_turn(state, index, start, context)
        error = str(data.get("error") or "error")
        attributes: dict[str, Any] = {
            OPERATION: CHAT,
            PROVIDER: context.provider,
            REQUEST_MODEL: context.model,
            ERROR_TYPE: error,
            CONVERSATION: context.session_id,
            "reasonstate.api": context.api,
        }
        if data.get("status") is not None:
            attributes[HTTP_STATUS] = int(data["status"])
        if data.get("lost_response_id") is not None:
            attributes["reasonstate.lost_response_id"] = str(data["lost_response_id"])
        span = self._tracer.start_span(
            f"{CHAT} {context.model}",
            context=trace.set_span_in_context(self._parent(state)),
            kind=SpanKind.CLIENT,
            start_time=_ns(start),
            attributes=attributes,
        )
        span.set_status(Status(StatusCode.ERROR, error))
        span.end(_ns(event.at))
        state.failed += 1
        metric = {
            OPERATION: CHAT,
            PROVIDER: context.provider,
            REQUEST_MODEL: context.model,
            ERROR_TYPE: error,
        }
        self._duration.record(duration, metric)

    def _tool_span(
        self,
        state: _SessionSpans,
        call_id: str,
        pending: _PendingCall,
        end: float | None,
        turn: int | None,
        context: ExportContext,
    ) -> None:
        timing = pending.timing
        if timing is not None:
            start = float(timing["started_at"])
            stop = start + float(timing["duration_s"])
            how = "measured"
        else:
            start, stop, how = pending.at, end if end is not None else time.time(), "between_calls"
        attributes: dict[str, Any] = {
            OPERATION: EXECUTE_TOOL,
            TOOL_NAME: pending.name,
            TOOL_CALL_ID: call_id,
            TOOL_TYPE: "function",
            CONVERSATION: context.session_id,
            "reasonstate.tool.timing": how,
        }
        result = _tool_result(context, turn, call_id) if turn is not None else None
        failed = (timing is not None and bool(timing.get("is_error"))) or (result is not None and result[1])
        # the runtime's outcome names why (``timeout``, ``suppressed`` by the storm breaker); else tool_error
        outcome = str(timing.get("outcome") or "") if timing is not None else ""
        error_type = outcome if outcome in ("timeout", "suppressed") else "tool_error"
        if failed:
            attributes[ERROR_TYPE] = error_type
        if self.capture_content:
            attributes[TOOL_ARGUMENTS] = pending.arguments
            if result is not None:
                attributes[TOOL_RESULT] = result[0]
        span = self._tracer.start_span(
            f"{EXECUTE_TOOL} {pending.name}",
            context=trace.set_span_in_context(self._parent(state)),
            kind=SpanKind.INTERNAL,
            start_time=_ns(start),
            attributes=attributes,
        )
        if failed:
            span.set_status(Status(StatusCode.ERROR, error_type))
        span.end(_ns(stop))

    def _decision(self, state: _SessionSpans, data: Mapping[str, Any], context: ExportContext) -> None:
        turn = self._parent(state)
        attributes: dict[str, Any] = {"reasonstate.policy.name": str(data.get("policy"))}
        for key in (
            "divergence_unit",
            "predicted_cache_read",
            "keep_cache_read",
            "cache_tokens_lost",
            "dropped_reasoning_tokens",
            "reprefill_tokens",
        ):
            value = data.get(key)
            if isinstance(value, int):
                attributes[f"reasonstate.policy.{key}"] = value
        views = data.get("views") or {}
        mine = views.get(str(data.get("turn")))
        if isinstance(mine, Mapping):
            kept = [bool(k) for k in mine.get("keep_reasoning") or ()]
            attributes["reasonstate.policy.kept_reasoning_steps"] = sum(kept)
            attributes["reasonstate.policy.dropped_reasoning_steps"] = len(kept) - sum(kept)
            attributes["reasonstate.policy.summarized"] = mine.get("summary") is not None
        attributes["reasonstate.policy.turns_decided"] = len(views)
        turn.set_attributes(attributes)

    def _switch(self, state: _SessionSpans, event: TraceEvent) -> None:
        data = event.data
        attributes: dict[str, Any] = {}
        if event.kind == EventKind.MODEL_CHANGED:
            attributes = {
                "reasonstate.old.model": str(data["old"]),
                "reasonstate.new.model": str(data["new"]),
            }
        elif event.kind == EventKind.VENDOR_CHANGED:
            for side in ("old", "new"):
                for key in ("vendor", "api", "model"):
                    attributes[f"reasonstate.{side}.{key}"] = str(data[side][key])
        elif event.kind == EventKind.PREFIX_CHANGED:
            attributes = {
                "reasonstate.old.fingerprint": str(data["old"]),
                "reasonstate.new.fingerprint": str(data["new"]),
            }
        elif event.kind == EventKind.CONTINUATION_STRIPPED:
            attributes = {
                "reasonstate.continuation.stripped.digests": [str(d) for d in data.get("digests") or ()],
                "reasonstate.continuation.stripped.kinds": [str(k) for k in data.get("kinds") or ()],
            }
        elif event.kind == EventKind.RESTORED:
            attributes = _scalars(data, "reasonstate.restored")
        elif event.kind == EventKind.CONTEXT_FOLDED:  # sizes, counts, the summary's digest (not its text)
            attributes = _scalars(data, "reasonstate.context.folded")
        elif event.kind == EventKind.PREFIX_VOLATILE:
            attributes = {"reasonstate.prefix.volatile_spans": len(data.get("spans") or ())}
        target = state.session if event.kind != EventKind.CONTINUATION_STRIPPED else self._parent(state)
        target.add_event(event.kind, attributes, timestamp=_ns(event.at))


def _replayed(state: _SessionSpans, record: ExecutionRecord, units: UnitSeq | None) -> tuple[int, str]:
    """How many payloads this request carried as received, and ``sha256`` over their digests in prompt
    order (each followed by a newline).

    Incremental: the units this request shares with the previous one (up to ``record.divergence``) carried
    the same payloads then (a payload in them was captured before that request), so only the units after
    the shared run are looked up, and the running hash is rebuilt only when the request diverged before
    a replayed payload. ``units``: the request's (None, read as none: older than the records keep, which a
    request being exported never is)."""
    units = () if units is None else units
    shared = 0 if not state.units else (len(state.units) if record.divergence is None else record.divergence)
    shared = min(shared, len(units))
    replayed = state.replayed
    if replayed and replayed[-1][0] >= shared:  # diverged before some of them: rebuild (rare)
        del replayed[next(k for k, (i, _d) in enumerate(replayed) if i >= shared) :]
        state.hash = hashlib.sha256()
        state.count = 0
        for _i, kept in replayed:
            state.count += len(kept)
            for d in kept:
                state.hash.update(f"{d}\n".encode())
    payloads = state.payloads
    for i in range(shared, len(units)):
        found = payloads.get(units[i])
        if found is not None:
            replayed.append((i, found))
            state.count += len(found)
            for d in found:
                state.hash.update(f"{d}\n".encode())
    state.units = units
    return state.count, "sha256:" + state.hash.copy().hexdigest()


def _repair_attributes(data: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tool.repaired`` event as attributes: the call, the repair and what it changed (the closers
    added, where a scavenged call was found, how many flat names were split), never argument values."""
    attributes: dict[str, Any] = {
        TOOL_NAME: str(data.get("tool")),
        TOOL_CALL_ID: str(data.get("call_id")),
        "reasonstate.tool.repair": str(data.get("repair")),
    }
    for key in ("added", "source", "where"):
        if isinstance(data.get(key), str):
            attributes[f"reasonstate.tool.repair.{key}"] = data[key]
    if isinstance(data.get("split"), (list, tuple)):
        attributes["reasonstate.tool.repair.split_count"] = len(data["split"])
    if data.get("repair") == "arguments_invalid":
        attributes[ERROR_TYPE] = "invalid_arguments"
    return attributes


def _without_text(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """An adapter event's data without free text (a vendor's reason may quote a request)."""
    return {k: v for k, v in data.items() if not (isinstance(v, str) and k in ("reason", "message", "text"))}


# -- captured content (only with capture on): canonical parts, never a payload ----------------------
def _input_messages(context: ExportContext, record: ExecutionRecord) -> list[dict[str, Any]]:
    """What this call added to the conversation: the user message (first step) or the tool results."""
    turn = context.history.turns[record.turn]
    if record.step == 0:
        return [{"role": "user", "parts": [{"type": "text", "content": turn.user}]}]
    previous = turn.steps[record.step - 1]
    return [
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": r.call_id, "response": r.content}],
        }
        for r in previous.tool_results
    ]


def _output_message(step: Step) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for part in step.parts:
        payload = (
            step.continuation[part.continuation]
            if part.continuation is not None and 0 <= part.continuation < len(step.continuation)
            else None
        )
        opaque = {"digest": payload.digest, "size": len(payload.payload)} if payload is not None else {}
        if isinstance(part, ReasoningPart):
            if part.redacted:
                parts.append({"type": "reasoning", "redacted": True, **opaque})
            else:
                parts.append({"type": "reasoning", "content": part.text})
        elif isinstance(part, TextPart):
            parts.append({"type": "text", "content": part.text})
        elif isinstance(part, ToolCallPart):
            parts.append(
                {"type": "tool_call", "id": part.id, "name": part.name, "arguments": part.raw_arguments}
            )
        elif isinstance(part, OpaquePart):
            parts.append({"type": "opaque", "vendor_type": part.type, **opaque})
    return {"role": "assistant", "parts": parts, "finish_reason": step.stop_reason}


def _tool_result(context: ExportContext, turn: int, call_id: str) -> tuple[str, bool] | None:
    """(content, is_error) of the result sent for ``call_id`` in ``turn`` (None: not found)."""
    turns = context.history.turns
    if not 0 <= turn < len(turns):
        return None
    for step in reversed(turns[turn].steps):
        for result in step.tool_results:
            if result.call_id == call_id:
                return result.content, result.is_error
    return None
