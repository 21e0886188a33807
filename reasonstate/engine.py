"""The turn engine: one request, begin → send → finish | fail → recover, written once, sans-I/O.

:meth:`Engine.turn` is a generator that never touches a socket (the way httpx drives one ``auth_flow``
from both its clients): it yields the :class:`~reasonstate.adapters.base.VendorRequest` to send and
receives what the sending did, by ``.send()`` (the answer, or ``None``: a stream opened, its answer comes
once the caller has read it) or ``.throw()`` (the exception the I/O raised). The four drivers are short
loops around it: ``Session`` and ``AsyncSession`` (``transport.call`` / ``acall``), ``Stream`` and
``AsyncStream`` (``transport.open_stream`` / ``aopen_stream``, then the caller's reading)::

    turn = session.turn(attempt)        begin: encode, predict, IDLE|AWAITING_TOOL_RESULTS → AWAITING_MODEL
    request = next(turn)
    try: result = send(request)         the driver's I/O
    except exc: request = turn.throw(exc)   fail (back where the call came from), or recover: the retry
    reply = turn.send(result)           finish: decode, commit every layer at once (StopIteration.value)

States and legal moves are data (:data:`TRANSITIONS`, h11-style: guard *and* target; anything absent
raises :class:`~reasonstate.errors.IllegalTransition`)::

    IDLE ──send──────────────▶ AWAITING_MODEL ──answer──────────────────▶ IDLE   (turn closed, policy applied)
    AWAITING_TOOL_RESULTS ──send_tool_results──▶ AWAITING_MODEL ──tool_calls──▶ AWAITING_TOOL_RESULTS
    AWAITING_MODEL ──send failed──▶ IDLE        ──send_tool_results failed──▶ AWAITING_TOOL_RESULTS
    IDLE | AWAITING_TOOL_RESULTS ──retry──▶ AWAITING_MODEL      (the recovery's one retry, after the failure)
    IDLE | AWAITING_TOOL_RESULTS ──close──▶ CLOSED

Invariants:
  * a call that fails (vendor error, timeout, dropped stream, malformed response, bad input) changes nothing
    but the trace, where the failure is recorded: history, continuation and execution are exactly as before
    and a retry sends the same bytes (except after a lost stored response, which the retry replays);
  * the recovery (``on_rejected_continuation="strip_and_retry"``) retries once, never in a loop: the
    failure and the stripping are traced, then the same call goes out without exactly the payloads the
    vendor's 400 named;
  * inside an open tool chain every continuation payload is replayed verbatim; a policy runs only when a
    turn closes, its decision is clamped by the adapter's ``ProtocolRules`` and frozen, so the following
    requests extend the new prefix (append-only);
  * tool results are sent in the model's declared call order, whatever order they are given in, and JSON
    values are serialized canonically (sorted keys), so equal results give equal bytes
    (stanfordnlp/dspy#10216).

The second half of this module is the commit (:func:`commit`): what one answered request adds to the
layers — the step, its execution record, its trace events, and, when the answer closes the turn, the
policy's frozen views. It is pure: it takes the layers as they were and returns them as they are after the
answer, or raises and changes nothing (the engine swaps all layers at once). The trace events it appends,
in order: ``turn.opened`` (first step), ``tool.results`` (results sent), the request's own events,
``continuation.withheld``, ``request.sent``, ``cache.break`` (the request diverged from the previous one,
with the cause), ``response.received``, the decoder's events, ``reasoning.captured``, then ``tool.calls``
or the closing events (``policy.clamped``, ``policy.decision`` with its predicted cache effect,
``turn.closed``).
"""

from __future__ import annotations

import bisect
import enum
import json
import logging
import re
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from reasonstate.adapters import APIS, room, shared_adapter, shared_name, view_of
from reasonstate.adapters.base import (
    Adapter,
    DecodedStep,
    Encodings,
    VendorRequest,
    binding_of,
    compact,
    foreign_reasoning_as_text,
    request_digest,
    without_payloads,
)
from reasonstate.cache.divergence import Divergence, explain
from reasonstate.cache.rules import common_prefix_len, divergence, predict_request
from reasonstate.errors import IllegalTransition, PolicyConflict, ReasonStateError, VendorError
from reasonstate.export import WARNED_KINDS, Publisher
from reasonstate.policies import Keep, Policy, answer_tokens, reasoning_tokens
from reasonstate.prefix import Prefix
from reasonstate.state import (
    Continuation,
    EventKind,
    ExecutionRecord,
    History,
    Records,
    Step,
    ToolCallPart,
    ToolResultPart,
    Trace,
    TurnView,
    Usage,
    ids_seal,
)
from reasonstate.state.continuation import unicode_reply
from reasonstate.state.frozen import FrozenDict, FrozenList
from reasonstate.state.history import frozen_arguments

if TYPE_CHECKING:
    from reasonstate.adapters.transport import CallResult

__all__ = [
    "TRANSITIONS",
    "Attempt",
    "Engine",
    "InFlight",
    "Layers",
    "Reply",
    "ToolCall",
    "TurnFlow",
    "TurnState",
    "commit",
    "encoded",
    "failed",
    "finished",
    "lost_responses",
    "predict",
    "stripped_payloads",
]

_log = logging.getLogger("reasonstate")


# -- the turn state machine ----------------------------------------------------------------------------------


class TurnState(enum.Enum):
    """Where a session is in its turn state machine (``session.state``); the value is stored in snapshots.

    Invariants: every call is checked against the transition table before anything is sent (a call it does
    not allow raises :class:`~reasonstate.errors.IllegalTransition`); a failed model call returns the
    session to the state it came from; a policy runs only on the move from ``AWAITING_MODEL`` to ``IDLE``.

    * ``IDLE``: between turns (no open turn). ``send``, ``run``, ``change_prefix``, ``switch_model``,
      ``switch``, ``snapshot`` and ``close`` are allowed.
    * ``AWAITING_MODEL``: one model call is in flight; any other call (another thread or task) raises.
    * ``AWAITING_TOOL_RESULTS``: the last reply made tool calls (``session.pending_calls``); only
      ``send_tool_results``, ``snapshot`` and ``close`` are allowed.
    * ``CLOSED``: after ``close()``; the four layers stay readable and ``snapshot`` still works.
    """

    IDLE = "idle"
    """Between turns: no turn is open; a user message may start one."""
    AWAITING_MODEL = "awaiting_model"
    """A model call is in flight (one call at a time per session)."""
    AWAITING_TOOL_RESULTS = "awaiting_tool_results"
    """The model made tool calls; their results must be sent before anything else."""
    CLOSED = "closed"
    """Closed: no further calls; the layers and ``snapshot()`` remain available."""


_I, _M, _T, _C = TurnState.IDLE, TurnState.AWAITING_MODEL, TurnState.AWAITING_TOOL_RESULTS, TurnState.CLOSED
#: (state, action) → the state it leads to; anything absent is an IllegalTransition (h11-style: rules are
#: data). ``answer`` / ``tool_calls`` are the model's two kinds of reply; ``<action> failed`` takes a failed
#: call back to where ``<action>`` came from; ``retry`` is the recovery's one retry after that failure.
TRANSITIONS: dict[tuple[TurnState, str], TurnState] = {
    (_I, "send"): _M,
    (_I, "change_prefix"): _I,
    (_I, "switch_model"): _I,
    (_I, "switch"): _I,
    (_I, "snapshot"): _I,
    (_I, "retry"): _M,
    (_I, "close"): _C,
    (_M, "answer"): _I,
    (_M, "tool_calls"): _T,
    (_M, "send failed"): _I,
    (_M, "send_tool_results failed"): _T,
    (_T, "send_tool_results"): _M,
    (_T, "snapshot"): _T,
    (_T, "retry"): _M,
    (_T, "close"): _C,
    (_C, "snapshot"): _C,
}


@attrs.frozen(slots=True)
class Attempt:
    """A tentative next history, built on ``base`` by ``action`` (``send`` / ``send_tool_results``):
    committed only if the call succeeds and nothing else was committed since ``base``."""

    base: History
    history: History
    action: str
    results_given: tuple[ToolResultPart, ...] = ()


@attrs.frozen(slots=True)
class InFlight:
    """One request in flight: what was sent, what was predicted, and the action that began it (a failure
    goes back by ``<action> failed``)."""

    attempt: Attempt
    request: VendorRequest
    predicted: int | None
    started: float
    retry: bool = False


@attrs.frozen(slots=True)
class Reply:
    """What one model call produced, as committed to the history (step ``step`` of turn ``turn``).

    ``text`` and ``reasoning`` are the step's visible text and reasoning joined in order (reasoning is empty
    when the vendor sends none or only opaque/redacted blocks); ``tool_calls`` are in the model's declared
    order, each with the id :meth:`Session.send_tool_results` expects; ``usage`` is the normalized
    :class:`~reasonstate.state.Usage` of this one request. A reply never carries an opaque payload
    (signatures, encrypted items): those stay in the continuation layer.
    """

    text: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    stop_reason: str
    turn: int
    step: int


#: the engine's generator: yields the request to send, receives the answer (None: a stream opened), returns
#: the committed reply
TurnFlow = Generator[VendorRequest, "CallResult | None", Reply]


class Engine:
    """The turn engine a session is: its state, the layers, and one request's begin → send → finish | fail
    → recover (:meth:`turn`). No I/O: the drivers (``Session``, ``AsyncSession``, ``Stream``,
    ``AsyncStream``) do it. The session's construction, switching and snapshots are in
    :mod:`reasonstate.session`."""

    _adapter: Adapter
    _prefix: Prefix
    _fingerprint: str  # the prefix's, read once per prefix (set by _set_prefix only)
    _model: str
    _options: Mapping[str, Any]
    _policy: Policy
    _on_rejected: str
    _foreign_reasoning: str
    _scratch: dict[str, Any]
    #: the session's one encoding memo, handed to every encode and view (a new adapter: a new one)
    _encodings: Encodings
    _state: TurnState
    # one call at a time: the state check and the move to AWAITING_MODEL happen under this lock
    _lock: threading.Lock
    _publisher: Publisher | None = None
    _layers: Layers  # set by _set_layers only

    def _set_layers(self, layers: Layers) -> None:
        """Every state change is this call: the trace events it appended go to the logger and the exporters
        (:mod:`reasonstate.export`), after the change, in order. With no exporter, nothing to warn about
        and INFO off (the common case), the publisher is only told how far the trace was handed out."""
        self._layers = layers
        publisher = self._publisher
        if publisher is None:
            return
        if not publisher.exporters and publisher.started and not _log.isEnabledFor(logging.INFO):
            trace = layers.trace
            cursor = publisher.cursor
            if len(trace) <= cursor or (
                not _log.isEnabledFor(logging.WARNING) or WARNED_KINDS.isdisjoint(trace.kinds(cursor))
            ):
                publisher.cursor = len(trace)
                return
        publisher.publish(layers.trace)

    def _set_prefix(self, prefix: Prefix, fingerprint: str | None = None) -> None:
        """``fingerprint``: ``prefix.fingerprint`` when the caller has it already (a hash less)."""
        self._prefix, self._fingerprint = prefix, prefix.fingerprint if fingerprint is None else fingerprint

    def _traced(self, kind: str, **data: Any) -> None:
        self._set_layers(attrs.evolve(self._layers, trace=self._layers.trace.appended(kind, **data)))

    def _move(self, action: str) -> None:
        self._state = self._require(action)

    def _require(self, action: str) -> TurnState:
        """The state ``action`` leads to, or :class:`IllegalTransition` when the table has no such move."""
        target = TRANSITIONS.get((self._state, action))
        if target is not None:
            return target
        state = self._state
        if state is TurnState.AWAITING_TOOL_RESULTS and action == "send":
            turn = self._layers.history.open_turn
            ids = [c.id for c in turn.steps[-1].tool_calls] if turn is not None else []
            why = f"tool results are pending for {ids}; send them before a user message"
        elif state is TurnState.IDLE and action == "send_tool_results":
            why = "no tool calls are pending"
        elif state is TurnState.AWAITING_MODEL:
            why = f"{action}: a model call is in flight (one call at a time per session)"
        elif state is TurnState.CLOSED:
            why = f"{action}: the session is closed"
        else:
            why = f"{action} is only allowed between turns, not inside a tool chain"
        raise IllegalTransition(why)

    def _encode(
        self, history: History, stripped: frozenset[str] | None = None, layers: Layers | None = None
    ) -> VendorRequest:
        """The request on ``history`` as rendered (a fold's summary in place of the folded turns), leaving
        out the payloads a vendor rejected (``stripped``: the session's own set unless given). ``layers``:
        the records and sets to build on (the session's current ones unless given)."""
        return encoded(
            self._adapter,
            self._prefix,
            history,
            self._model,
            self._options,
            self._layers if layers is None else layers,
            foreign_reasoning=self._foreign_reasoning,
            encodings=self._encodings,
            stripped=stripped,
        )

    # -- one request: begin → send (the driver) → finish | fail → recover ---------------------------------
    def turn(self, attempt: Attempt) -> TurnFlow:
        """The sans-I/O flow of one request (module docstring): begin, then yield the request until it was
        sent (a failure thrown in is recovered — the retry's request yielded — or recorded and re-raised),
        then, for a stream, yield once more until its answer is read; finish with the answer."""
        call = self._begin(attempt)
        while True:
            try:
                result = yield call.request
            except BaseException as exc:
                call = self._retry_or_raise(call, exc)
                continue
            break
        while result is None:  # a stream opened: the caller reads it; a failure from here is not retried
            try:
                result = yield call.request
            except BaseException as exc:
                self._fail(call, exc)
                raise
        return self._finish(call, result)

    def _begin(self, attempt: Attempt) -> InFlight:
        """Encode and predict (pure; raises before anything is sent), then mark the call in flight.

        The check and the move to AWAITING_MODEL are atomic: a second thread or task using the session
        at the same time gets :class:`IllegalTransition`, and so does an attempt built on a history that
        another call has changed since.
        """
        request = self._encode(attempt.history)
        predicted = predict(self._adapter, request, self._layers.records)
        trace = self._layers.trace
        if trace.deferred:  # the closing decision's effect is this request's own (KeptEffect)
            kept = trace.completion()
            if isinstance(kept, KeptEffect) and kept.fits(self, attempt):
                trace.settle(kept.figures(request, predicted))
        with self._lock:
            if self._state is TurnState.AWAITING_MODEL or attempt.base is not self._layers.history:
                raise IllegalTransition(
                    "a model call is in flight or just changed this session (one call at a time per "
                    "session; use one session per concurrent conversation)"
                )
            self._move(attempt.action)
        return InFlight(attempt, request, predicted, time.perf_counter())

    def _finish(self, call: InFlight, result: CallResult) -> Reply:
        """Decode the answer and commit every layer at once; any failure is :meth:`_fail`."""
        try:
            # text that is not valid Unicode is refused whole, a pair cut across deltas joined
            # (docs/protocols.md §0.3): what commits can always be encoded, snapshotted and sent back
            response = result.response
            if not result.plain_text:
                response = unicode_reply(response, f"the {self._adapter.endpoint.label} answer")
            decoded = self._adapter.decode(response, call.request)
            if result.events:
                decoded = attrs.evolve(decoded, events=(*decoded.events, *result.events))
            layers, step = commit(
                self._layers,
                call.attempt.history,
                call.attempt.results_given,
                call.request,
                call.predicted,
                decoded,
                result.request_body,
                time.perf_counter() - call.started,
                adapter=self._adapter,
                prefix=self._prefix,
                fingerprint=self._fingerprint,
                model=self._model,
                options=self._options,
                policy=self._policy,
                encodings=self._encodings,
                foreign_reasoning=self._foreign_reasoning,
            )
        except BaseException as exc:
            self._fail(call, exc)
            raise
        turn = layers.history.turns[-1]
        calls = step.tool_calls
        interrupted: BaseException | None = None
        if not calls:
            layers, interrupted = self._folded(layers)
        self._set_layers(layers)
        self._move("tool_calls" if calls else "answer")
        if not calls:
            self._scratch.clear()
        if interrupted is not None:
            raise interrupted
        return Reply(
            text=step.text,
            reasoning=step.reasoning_text,
            tool_calls=tuple(ToolCall.of(c) for c in calls),
            usage=step.usage,
            stop_reason=step.stop_reason,
            turn=turn.index,
            step=len(turn.steps) - 1,
        )

    def _folded(self, layers: Layers) -> tuple[Layers, BaseException | None]:
        """The committed ``layers`` of a closed turn, folded when the session folds (the session's
        ``Fold``; the runtime's work): ``(layers, None)`` here. An interruption while folding comes back
        as the second item: the answer is paid for, it stays committed, unfolded."""
        return layers, None

    def _recovery(self, call: InFlight, exc: BaseException) -> InFlight | None:
        """With ``on_rejected_continuation="strip_and_retry"``: the same call once more, without exactly the
        payloads the vendor's 400 names (their steps rendered canonically), the failure and the stripping
        recorded in the trace. None (raise) when the rejection names no payload of this session, when the
        vendor's rules do not allow leaving them out (inside the open tool chain the codec refuses), or
        when this call is already a retry: never a loop, never a forged signature."""
        blame = self._adapter.endpoint.blame
        if (
            self._on_rejected != "strip_and_retry"
            or blame is None
            or not isinstance(exc, VendorError)
            or exc.status != 400
            or call.retry
        ):
            return None
        sent = {compact(v) for v in blame(call.request, exc)}
        offending = [c for c in self._payloads() if c.payload in sent]
        if not offending:
            return None
        digests = self._layers.stripped | {c.digest for c in offending}
        try:
            request = self._encode(call.attempt.history, digests)
        except ReasonStateError:
            return None
        self._fail(call, exc)
        self._move("retry")
        self._set_layers(attrs.evolve(self._layers, stripped=digests))
        self._traced(
            EventKind.CONTINUATION_STRIPPED,
            digests=[c.digest for c in offending],
            kinds=[c.kind for c in offending],
            reason=str(exc),
            summary=f"{len(offending)} payload(s) the vendor rejected are left out; their steps are rendered "
            "canonically from now on",
        )
        predicted = predict(self._adapter, request, self._layers.records)
        return attrs.evolve(call, request=request, predicted=predicted, retry=True)

    def _payloads(self) -> Iterable[Continuation]:
        return (c for t in self._layers.history.turns for s in t.steps for c in s.continuation)

    def _retry_or_raise(self, call: InFlight, exc: BaseException) -> InFlight:
        """After ``exc``: the recovery's retry, or else the failure recorded and ``exc`` raised."""
        retry = self._recovery(call, exc)
        if retry is None:
            self._fail(call, exc)
            raise exc
        return retry

    def _fail(self, call: InFlight, exc: BaseException) -> None:
        """Back to the state the call came from; a reasonstate error is traced (cancellation is not)."""
        self._move(f"{call.attempt.action} failed")
        if not isinstance(exc, ReasonStateError):
            return
        data: dict[str, Any] = {
            "error": type(exc).__name__,
            "message": str(exc),
            "status": exc.status if isinstance(exc, VendorError) else None,
            "units": len(call.request.units),
            "duration_s": round(time.perf_counter() - call.started, 6),
        }
        lost = getattr(exc, "response_id", None)
        if lost is not None:  # the vendor no longer holds this stored response: never refer to it again
            data["lost_response_id"] = lost
            self._set_layers(attrs.evolve(self._layers, lost=self._layers.lost | {str(lost)}))
        self._traced(EventKind.CALL_FAILED, **data)


def finished(turn: TurnFlow, result: CallResult) -> Reply:
    """Send the answer into ``turn`` and give the reply it committed."""
    try:
        turn.send(result)
    except StopIteration as stop:
        reply: Reply = stop.value
        return reply
    raise AssertionError("the turn engine asked for another request after its answer")


def failed(turn: TurnFlow, exc: BaseException) -> None:
    """Throw ``exc`` into ``turn`` once its stream opened (recorded as the call's failure, never retried);
    ``exc`` itself does not propagate."""
    try:
        turn.throw(exc)
    except BaseException as raised:
        if raised is not exc:
            raise
        return
    raise AssertionError("the turn engine retried a call whose stream had opened")


# -- the commit: what one answered request adds to the layers ------------------------------------------


@attrs.frozen(slots=True)
class ToolCall:
    """A tool call the model made: ``arguments`` parsed (frozen), ``raw_arguments`` exactly as received.

    ``arguments`` is None when the model's argument text is not a JSON object; ``arguments_error`` says
    why. ``Session.run`` never calls a handler with such a call: the model gets an error result instead.
    ``scavenged`` marks a call ``Session.run`` found in a reply's text or reasoning (the model emitted no
    tool call; :func:`reasonstate.runtime.repair.scavenge`): it is in no history step.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] | None = attrs.field(converter=frozen_arguments)
    raw_arguments: str = ""
    arguments_error: str | None = None
    scavenged: bool = False

    @classmethod
    def of(cls, part: ToolCallPart) -> ToolCall:
        return cls(part.id, part.name, part.arguments, part.raw_arguments, part.arguments_error)


#: the empty set of ids, one object shared by every layers value that has none
_NO_IDS: frozenset[str] = frozenset()


@attrs.frozen(slots=True)
class Layers:
    """The session's history, trace and execution records: swapped as one value, so a commit is atomic.

    ``lost`` (response ids the vendor no longer holds) and ``stripped`` (digests of payloads a vendor
    rejected and the session leaves out) are derived from the trace — :func:`lost_responses`,
    :func:`stripped_payloads` — and kept here as they grow, so no request rescans the trace.
    """

    history: History = attrs.field(factory=History)
    trace: Trace = attrs.field(factory=Trace)
    #: the execution records with the unit digests of the newest requests (kept once, not per record)
    records: Records = attrs.field(factory=Records)
    lost: frozenset[str] = _NO_IDS
    stripped: frozenset[str] = _NO_IDS
    #: the newest request as sent (for the cause of the next cache break; not snapshotted): its body as
    #: the SDK kwargs it was sent from where the vendor's room reads a body from them (values the memoized
    #: runs hold anyway), else the exact bytes (issue 21: one request body was ~0.5x the content)
    last_body: bytes | Mapping[str, Any] | None = None

    @classmethod
    def of(cls, history: History, trace: Trace, records: Records) -> Layers:
        """The layers with their derived sets computed from ``trace`` (a restore)."""
        return cls(history, trace, records, lost_responses(trace), stripped_payloads(trace))


def lost_responses(trace: Trace) -> frozenset[str]:
    """Response ids the vendor said it no longer holds (a traced 404 for ``previous_response_id``)."""
    lost = frozenset(
        str(e.data["lost_response_id"])
        for e in trace.of_kind(EventKind.CALL_FAILED)
        if e.data.get("lost_response_id") is not None
    )
    return lost or _NO_IDS


def stripped_payloads(trace: Trace) -> frozenset[str]:
    """Digests of the payloads a vendor rejected and the session left out (``continuation.stripped``)."""
    stripped = frozenset(d for e in trace.of_kind(EventKind.CONTINUATION_STRIPPED) for d in e.data["digests"])
    return stripped or _NO_IDS


def encoded(
    adapter: Adapter,
    prefix: Prefix,
    history: History,
    model: str,
    options: Mapping[str, Any],
    layers: Layers,
    *,
    foreign_reasoning: str = "drop",
    encodings: Encodings | None = None,
    stripped: frozenset[str] | None = None,
) -> VendorRequest:
    """The session's request on ``history`` as rendered (a fold's summary in place of the folded turns),
    built on ``layers`` (its records, the response ids lost and the payloads left out: ``stripped``, the
    layers' own set unless given), foreign reasoning as text when ``foreign_reasoning == "text"``. Every
    request the session sends and every request its policy decision predicts is this call, so a decision
    predicts the request the session will send on the same history."""
    if history.fold is not None:
        history = history.rendered()
    stripped = layers.stripped if stripped is None else stripped
    if stripped:
        history = without_payloads(history, stripped, encodings=encodings)
    if foreign_reasoning == "text":
        history = foreign_reasoning_as_text(
            history, adapter.vendor, adapter.api, model, encodings=encodings, platform=binding_of(adapter)
        )
    return adapter.encode(
        prefix,
        history,
        model,
        options,
        layers.records,
        lost_responses=layers.lost,
        encodings=encodings,
    )


def predict(
    adapter: Adapter,
    request: VendorRequest,
    records: Sequence[ExecutionRecord],
) -> int | None:
    """The cache read the vendor will report for ``request`` (None: not knowable). With no earlier request
    every scheme of :func:`predict_request` predicts 0 (nothing of this session is cached yet): a fresh
    session's first request is told so without the scheme's walk (issue 21: constant costs)."""
    if not records:
        return 0 if request.predictable else None
    return predict_request(adapter.cache, request, records)


def commit(
    layers: Layers,
    history: History,
    results_given: tuple[ToolResultPart, ...],
    request: VendorRequest,
    predicted: int | None,
    decoded: DecodedStep,
    request_body: bytes | None,
    duration: float,
    *,
    adapter: Adapter,
    prefix: Prefix,
    fingerprint: str,
    model: str,
    options: Mapping[str, Any],
    policy: Policy,
    encodings: Encodings | None = None,
    foreign_reasoning: str = "drop",
) -> tuple[Layers, Step]:
    """The layers after ``decoded`` answered ``request`` (sent on ``history``, whose last turn is open);
    ``fingerprint`` is ``prefix.fingerprint``; ``encodings``: the session's encoding memo (the policy's
    effect is predicted on a request encoded with it; a fresh one when none is given);
    ``foreign_reasoning``: the session's option, so that the request the policy's effect is predicted on is
    encoded as the session's next request will be (:func:`encoded`)."""
    turn = history.open_turn
    assert turn is not None
    step = Step(
        parts=decoded.parts,
        continuation=decoded.continuation,
        stop_reason=decoded.stop_reason,
        usage=decoded.usage,
        model=decoded.model,
        response_id=decoded.response_id,
        response_stored=decoded.response_stored,
    )
    turn = turn.with_steps((*turn.steps, step))
    history = history.with_last_turn(turn)
    digest, size = request_digest(request.kwargs, request_body)
    records = layers.records
    previous = records[-1] if records else None
    # one C-speed comparison with the previous request's units (the records keep them once)
    before = records.newest_units()
    shared = common_prefix_len(request.units, before)
    ids = ids_seal(decoded.prompt_ids, decoded.completion_ids)
    record = ExecutionRecord(
        index=len(records),
        turn=turn.index,
        step=len(turn.steps) - 1,
        request_digest=digest,
        request_bytes=size,
        prefix_fingerprint=fingerprint,
        units=len(request.units),
        breakpoints=request.breakpoints,
        divergence=None if previous is None or shared == len(before) else shared,
        predicted_cache_read=predicted,
        usage=decoded.usage,
        duration_s=duration,
        model=model,
        prompt_ids=decoded.prompt_ids,
        completion_ids=decoded.completion_ids,
        output_unit=decoded.output_unit,
        ids_seal=ids,
    )
    # the request as the next one's cause analysis reads it (kept in the layers)
    sent = _as_sent(adapter.api, request, request_body, layers.last_body)
    trace = layers.trace
    # this request's events, appended as one batch; the ones built here are frozen as built (FrozenDict /
    # FrozenList all the way down), so the trace's freeze passes them through without a copy
    events: list[tuple[str, Mapping[str, Any]]] = []
    if len(turn.steps) == 1:
        events.append((EventKind.TURN_OPENED, FrozenDict(turn=turn.index, user=turn.user)))
    if results_given:
        events.append(
            (EventKind.TOOL_RESULTS, {"turn": turn.index, "call_ids": [r.call_id for r in results_given]})
        )
    events.extend(request.events)
    if request.withheld:
        events.append(
            (
                EventKind.CONTINUATION_WITHHELD,
                {
                    "count": len(request.withheld),
                    "reason": "produced by another vendor or model: rendered from canonical parts",
                    "models": sorted({c.model for c in request.withheld}),
                    "kinds": sorted({f"{c.vendor}:{c.kind}" for c in request.withheld}),
                    "digests": [c.digest for c in request.withheld],
                },
            )
        )
    events.append(
        (
            EventKind.REQUEST_SENT,
            FrozenDict(
                index=record.index,
                request_digest=digest,
                bytes=size,
                prefix_fingerprint=record.prefix_fingerprint,
                divergence=record.divergence,
                predicted_cache_read=predicted,
            ),
        )
    )
    if record.divergence is not None and previous is not None:
        # the cause is read from the two requests' bytes and the events before this request's own
        # like with like: a previous request kept as its bytes is read against this one's bytes
        now = request_body if isinstance(layers.last_body, bytes) and request_body is not None else sent
        broken = _why_diverged(trace, len(trace), record, previous, adapter.api, layers.last_body, now)
        events.append((EventKind.CACHE_BREAK, {"index": record.index, "unit": record.divergence, **broken}))
    usage = decoded.usage  # the step keeps it packed: this is the same value, not rebuilt
    events.append(
        (
            EventKind.RESPONSE_RECEIVED,
            FrozenDict(
                index=record.index,
                stop_reason=step.stop_reason,
                usage=FrozenDict(
                    uncached_input=usage.uncached_input,
                    cache_read=usage.cache_read,
                    cache_write=usage.cache_write,
                    output=usage.output,
                    reasoning=usage.reasoning,
                ),
                duration_s=round(duration, 6),
                response_id=decoded.response_id,
                response_model=decoded.response_model,
            ),
        )
    )
    events.extend(decoded.events)
    reasoning = step.reasoning_text
    if reasoning or any(c.kind.endswith("thinking") for c in step.continuation):
        events.append(
            (
                EventKind.REASONING,
                FrozenDict(
                    turn=turn.index,
                    step=len(turn.steps) - 1,
                    text=reasoning,
                    payload_digests=FrozenList(c.digest for c in step.continuation if c.model_bound),
                ),
            )
        )
    records = records.appended(record, request.units, shared=shared)
    tool_calls = step.tool_calls
    deferred = None
    if tool_calls:
        calls = [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in tool_calls]
        events.append((EventKind.TOOL_CALLS, {"turn": turn.index, "calls": calls}))
    else:
        history, deferred = _close_turn(
            history,
            events,
            # what the next request is built on; not the previous body (a held decision's effect keeps
            # these layers until it is read: with the body, two whole requests per session, issue 21)
            Layers(layers.history, layers.trace, records, layers.lost, layers.stripped, None),
            adapter=adapter,
            prefix=prefix,
            model=model,
            options=options,
            policy=policy,
            encodings=encodings,
            foreign_reasoning=foreign_reasoning,
        )
    trace = trace.extended(events, deferred)
    return Layers(history, trace, records, layers.lost, layers.stripped, sent), step


def _as_sent(api: str, request: VendorRequest, body: bytes | None, previous: _Sent) -> _Sent:
    """What the layers keep of the newest request for the next cache break's cause: what its room keeps
    (:meth:`~reasonstate.adapters.base.Room.kept_body`: its body read back from its kwargs, values the
    memoized runs hold anyway, where it can), else its ``body`` bytes."""
    return room(api).kept_body(request.kwargs, body, previous) if api in APIS else body


def _why_diverged(
    trace: Trace,
    since: int,
    record: ExecutionRecord,
    previous: ExecutionRecord,
    api: str,
    before: _Sent,
    body: _Sent,
) -> dict[str, Any]:
    """The cause of a cache break: ``cause`` (a word of :data:`reasonstate.cache.divergence.CAUSES`), ``path``
    (the JSON path of the first difference) and ``why`` (a sentence; it starts with the traced event that
    declared the change — ``prefix.changed``, ``model.changed``, ``context.folded``, ``policy.decision`` —
    when there is one) and ``declared`` (whether the change was declared before the request: a prefix or
    model change, a fold, or a policy decision that predicted the divergence).

    The cause comes from the guard's analysis of the two requests' bodies (:func:`explain`), the same as
    guard mode's; the session adds what only it knows: the model switch or prefix change it traced, and,
    for dropped reasoning, the policy decision that dropped it (``decision``).
    """
    found = _explained(api, before, body, previous.model, record.model)
    sent = trace.last_of((EventKind.REQUEST_SENT,), since)
    after = sent.seq if sent is not None else -1
    # the decisions since the previous request that changed a view (dropped reasoning or summarized)
    decisions = [
        e
        for e in map(trace.event, _between(trace, EventKind.POLICY_DECISION, after, since))
        if _changes_a_view(e.data.get("views"))
    ]
    # a fold since the previous request (not a skipped one) replaced the head by its summary
    folds = [
        e
        for e in map(trace.event, _between(trace, EventKind.CONTEXT_FOLDED, after, since))
        if not e.data.get("skipped")
    ]
    # a compaction the vendor made since the previous request (docs/protocols.md §1.9): the input now
    # starts at its item
    compacted = [trace.event(i) for i in _between(trace, EventKind.CONTEXT_COMPACTED, after, since)]
    cause: str
    decision: str | None = None
    out_cleared: list[str] | None = None
    declared = True  # a model or prefix change the session made (traced, or seen in the records)
    if record.model != previous.model:
        cause, path = "model_changed", "$.model"
        why = _cause(trace, (EventKind.MODEL_CHANGED,), f"model {previous.model} → {record.model}")
    elif _between(trace, EventKind.VENDOR_CHANGED, after, since):
        # another platform (or vendor) under the same model name: another service, whose history holds
        # the withheld payloads rendered canonically (docs/protocols.md §10.1), declared by the switch
        cause = found.cause if found is not None else "history_rewritten"
        path = found.path if found is not None else "$"
        why = _cause(trace, (EventKind.VENDOR_CHANGED,), "the session moved to another platform")
    elif record.prefix_fingerprint != previous.prefix_fingerprint:
        cause = found.cause if found is not None else "system_changed"
        path = found.path if found is not None else "$"
        why = _cause(trace, (EventKind.PREFIX_CHANGED,), "the stable prefix changed")
    else:
        if found is not None:
            cause, path = found.cause, found.path
        else:  # the bytes were not kept (a restored session): a view change is the known change
            cause, path = ("reasoning_dropped" if decisions else "history_rewritten"), "$"
        why = f"{cause} at {path}" if found is not None else f"prefix unit {record.divergence} differs"
        declared = False
        if decisions:
            decision = why = f"{decisions[-1].kind}: {decisions[-1].data.get('summary', '')}".strip()
            # declared when the newest policy decision before this request predicted the divergence
            newest = trace.last_of((EventKind.POLICY_DECISION,))
            declared = newest is not None and newest.data.get("divergence_unit") is not None
        if folds:
            if found is None:
                cause = "compacted"
            decision = why = f"{folds[-1].kind}: {folds[-1].data.get('summary', '')}".strip()
            declared = True
        if compacted:
            cause = "compacted"
            decision = why = f"{compacted[-1].kind}: {compacted[-1].data.get('summary', '')}".strip()
            declared = True
        if cause == "server_cleared":
            # the request's own context_management asked the vendor to clear these blocks before it read
            # (and cached) the prompt (docs/protocols.md §4.7): declared by the request, and predicted
            cleared = _newly_cleared(api, before, body, previous.model, record.model)
            why = (
                f"server_cleared at {path}: the request's context_management clears {len(cleared)} "
                "block(s) server-side (docs/protocols.md §4.7)"
            )
            declared = True
            out_cleared = cleared
    # ``declared``: the break's cause is a change the trace declared before this request (the exporters
    # and the logger read this field, never the sentence in ``why``)
    out: dict[str, Any] = {"cause": cause, "path": path, "why": why, "declared": declared}
    if decision is not None:
        out["decision"] = decision
    if out_cleared is not None:
        out["cleared"] = out_cleared
    return out


def _newly_cleared(api: str, before: _Sent, body: _Sent, was: str, model: str) -> list[str]:
    """The JSON paths the vendor clears server-side in ``body`` and did not in ``before`` (§4.7)."""
    if before is None or body is None or api not in APIS:
        return []
    try:
        old = view_of(api, _parsed(before), was).cleared
        new = view_of(api, _parsed(body), model).cleared
    except ValueError:
        return []
    return sorted(new - old, key=lambda p: [int(n) for n in re.findall(r"\d+", p)])


def _changes_a_view(views: Any) -> bool:
    """Whether a ``policy.decision``'s views drop reasoning or summarize a turn."""
    if not isinstance(views, Mapping):
        return False
    return any(
        isinstance(v, Mapping) and (not all(v.get("keep_reasoning") or ()) or v.get("summary") is not None)
        for v in views.values()
    )


def _explained(api: str, before: _Sent, body: _Sent, was: str, model: str) -> Divergence | None:
    """The guard's cause analysis of two request bodies (bytes, or read back from the kwargs:
    :func:`_as_sent`), or None when either is missing or unreadable."""
    if before is None or body is None or api not in APIS:
        return None
    try:
        return explain(view_of(api, _parsed(before), was), view_of(api, _parsed(body), model))
    except ValueError:
        return None


#: a request as the layers keep it for the next cause analysis (:attr:`Layers.last_body`)
_Sent = bytes | Mapping[str, Any] | None


def _parsed(body: bytes | Mapping[str, Any]) -> Any:
    return json.loads(body) if isinstance(body, bytes) else body


def _cause(trace: Trace, kinds: Iterable[str], fallback: str) -> str:
    event = trace.last_of(kinds)
    if event is not None:
        return f"{event.kind}: {event.data.get('summary', '')}".strip()
    return fallback


def _between(trace: Trace, kind: str, after: int, before: int) -> list[int]:
    """The positions of ``kind``'s events strictly between ``after`` and ``before`` (none built)."""
    seqs = trace.positions(kind)
    return list(seqs[bisect.bisect_right(seqs, after) : bisect.bisect_left(seqs, before)])


def _close_turn(
    history: History,
    events: list[tuple[str, Mapping[str, Any]]],
    layers: Layers,
    *,
    adapter: Adapter,
    prefix: Prefix,
    model: str,
    options: Mapping[str, Any],
    policy: Policy,
    encodings: Encodings | None,
    foreign_reasoning: str,
) -> tuple[History, tuple[int, KeptEffect] | None]:
    """The policy decides the closed turn's view (and KeepLast an earlier one), clamped by the rules; the
    decision's events are added to ``events``. ``layers``: what the next request is built on (its records
    end with this answer's).

    With the history as decided, the second item is None, or, when every view the policy decided keeps
    everything, ``(position of the policy.decision event in events, its predicted cache effect)``: that
    event's effect is deferred (:meth:`Trace.extended`), computed when the trace is first read, or else
    given by the next request, which predicts the very same figures for itself (:class:`KeptEffect`)."""
    before = history
    turn = history.turns[-1]
    try:
        views = _decided(policy, history, turn.index)
    except Exception as exc:  # the reply is paid for: it is kept whatever the policy does
        keep = TurnView(tuple(True for _ in turn.steps), policy=Keep().name)
        views = {turn.index: keep}
        message = f"{type(exc).__name__}: {exc}"
        _log.warning(
            "policy %s failed on turn %d; the turn closes under Keep: %s", policy.name, turn.index, message
        )
        events.append(
            (
                EventKind.POLICY_FAILED,
                {"turn": turn.index, "policy": policy.name, "error": type(exc).__name__, "message": message},
            )
        )
    if not adapter.rules.may_rewrite_past(model):
        for index in sorted(i for i in views if i != turn.index):
            del views[index]
            reason = (
                f"{model}: history must stay append-only (later reasoning is bound to the prefix it was "
                "produced on), so an earlier turn's view cannot change"
            )
            clamp = {"turn": index, "policy": policy.name, "reasons": [reason]}
            events.append((EventKind.POLICY_CLAMPED, clamp))
    for index in sorted(views):
        view = views[index]
        if not view.keeps_all:  # a clamp only turns keep flags on: a keep-all view stands as it is
            view, reasons = adapter.rules.clamp(history.turns[index], view)
            if reasons:
                clamped = {"turn": index, "policy": policy.name, "reasons": list(reasons)}
                events.append((EventKind.POLICY_CLAMPED, clamped))
        history = history.with_view(index, view)
    closed = history.turns[-1]
    assert closed.view is not None
    kept: KeptEffect | None = None
    if all(v is not None and v.keeps_all for v in (history.turns[i].view for i in views)):
        kept = KeptEffect(adapter, prefix, history, model, options, layers, encodings, foreign_reasoning)
        effect: Mapping[str, Any] = {}
    else:
        effect = _predict_effect(
            history,
            before,
            views.keys(),
            layers,
            adapter,
            prefix,
            model,
            options,
            encodings,
            foreign_reasoning,
        )
    order = sorted(views)
    data: Mapping[str, Any]
    if kept is not None:  # held until its effect is known: built when read (_HeldDecision)
        data = _HeldDecision(history, tuple(order), policy.name)
    else:
        data = _decision_data(history, order, policy.name, effect)
    events.append((EventKind.POLICY_DECISION, data))
    deferred = None if kept is None else (len(events) - 1, kept)
    events.append((EventKind.TURN_CLOSED, FrozenDict(turn=closed.index, steps=len(closed.steps))))
    return history, deferred


def _decision_data(
    history: History, order: Sequence[int], policy: str, effect: Mapping[str, Any]
) -> FrozenDict:
    """A ``policy.decision`` event's data: the views of the turns ``order`` as ``history`` holds them, and
    ``effect`` (scalars: the whole event is frozen as built)."""
    decided = FrozenDict(
        (str(i), FrozenDict(keep_reasoning=FrozenList(v.keep_reasoning), summary=v.summary))
        for i, v in ((i, history.turns[i].view) for i in order)
        if v is not None
    )
    return FrozenDict(
        turn=history.turns[-1].index,
        policy=policy,
        views=decided,
        summary=f"{policy} on turn(s) {list(order)}",
        **effect,
    )


class _HeldDecision(Mapping[str, Any]):
    """The data of a keep-all ``policy.decision`` whose effect is deferred (:class:`KeptEffect`): what
    :func:`_decision_data` gives (no effect), built when first read, from the history as decided (an
    immutable value the held effect keeps anyway). The trace reads it when it completes or writes the held
    event (a frozen copy each time), so a held decision keeps no dicts of its own until then (issue 21:
    ~0.6 KB of every session's state)."""

    __slots__ = ("_built", "_history", "_order", "_policy")

    def __init__(self, history: History, order: tuple[int, ...], policy: str) -> None:
        self._history, self._order, self._policy = history, order, policy
        self._built: FrozenDict | None = None

    def _data(self) -> FrozenDict:
        built = self._built
        if built is None:
            built = self._built = _decision_data(self._history, self._order, self._policy, {})
        return built

    def __getitem__(self, key: str) -> Any:
        return self._data()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())


class KeptEffect:
    """The predicted cache effect of a decision that keeps every view it decided (``Keep``, and most
    closes of the others): ``divergence_unit`` and ``predicted_cache_read`` of the next request, which is
    :func:`encoded` on ``history`` as decided over ``layers`` (:func:`_predict_effect`), and
    ``reprefill_tokens`` 0.

    Called (once) when the ``policy.decision`` event is first read. The next request's begin computes
    the same two figures for itself: when it is a ``send`` on exactly this history, prefix, model,
    options and records (:meth:`fits`), it only adds its new user message past the history as decided,
    and no cache rule reads a unit no earlier request sent, so its own divergence and prediction are this
    decision's, and settle the event without a second encode (:meth:`figures`)."""

    __slots__ = (
        "_adapter",
        "encodings",
        "foreign_reasoning",
        "history",
        "lost",
        "model",
        "options",
        "prefix",
        "records",
        "stripped",
    )

    #: the adapter, or its name when it is a process-wide default one (:func:`shared_name`): a held
    #: decision, which the trace keeps until it is read, then reaches no adapter configuration
    _adapter: Adapter | str

    def __init__(
        self,
        adapter: Adapter,
        prefix: Prefix,
        history: History,
        model: str,
        options: Mapping[str, Any],
        layers: Layers,
        encodings: Encodings | None,
        foreign_reasoning: str,
    ) -> None:
        self._adapter = shared_name(adapter) or adapter
        self.prefix, self.history, self.model = prefix, history, model
        # only what the next request is built on from the layers (records, lost, stripped): not their
        # history or trace, which a held decision would keep alive until read (issue 21)
        self.records, self.lost, self.stripped = layers.records, layers.lost, layers.stripped
        self.options, self.encodings = options, encodings
        self.foreign_reasoning = foreign_reasoning

    @property
    def adapter(self) -> Adapter:
        """The adapter the decision was made with."""
        adapter = self._adapter
        return shared_adapter(adapter) if isinstance(adapter, str) else adapter

    def __call__(self) -> dict[str, Any]:
        adapter = self.adapter
        request = encoded(
            adapter,
            self.prefix,
            self.history,
            self.model,
            self.options,
            Layers(records=self.records, lost=self.lost, stripped=self.stripped),
            foreign_reasoning=self.foreign_reasoning,
            encodings=self.encodings,
        )
        return self.figures(request, predict(adapter, request, self.records))

    def figures(self, request: VendorRequest, predicted: int | None) -> dict[str, Any]:
        """The effect, from a request on this history (or one that only adds a user message) and its
        prediction over these records."""
        d = divergence(request.units, self.records.newest_units())
        return {"divergence_unit": d, "predicted_cache_read": predicted, "reprefill_tokens": 0}

    def fits(self, engine: Engine, attempt: Attempt) -> bool:
        """Whether ``attempt`` is a user message sent on exactly the state this decision was made on."""
        now = engine._layers
        return (
            attempt.action == "send"
            and attempt.base is self.history
            and now.records is self.records
            and engine._adapter is self.adapter
            and engine._prefix is self.prefix
            and engine._options is self.options
            and engine._model == self.model
            and engine._foreign_reasoning == self.foreign_reasoning
            and now.lost == self.lost
            and now.stripped == self.stripped
        )


def _decided(policy: Policy, history: History, closed: int) -> dict[int, TurnView]:
    """The policy's views, checked: :class:`PolicyConflict` for a view that does not fit its turn."""
    decided = policy.decide(history, closed)
    if not isinstance(decided, Mapping):
        raise PolicyConflict(
            f"{policy.name}.decide returned {type(decided).__name__}, not a mapping of views"
        )
    views = dict(decided)
    if closed not in views:
        views[closed] = TurnView(tuple(True for _ in history.turns[closed].steps), policy=policy.name)
    for index, view in views.items():
        if (
            not isinstance(index, int)
            or not 0 <= index <= closed
            or not isinstance(view, TurnView)
            or len(view.keep_reasoning) != len(history.turns[index].steps)
            or not (view.summary is None or isinstance(view.summary, str))
        ):
            raise PolicyConflict(
                f"{policy.name} returned a view for turn {index!r} that does not fit it "
                "(a TurnView with one keep flag per step)"
            )
        if index != closed and history.turns[index].view is None:
            raise PolicyConflict(f"{policy.name} decided turn {index}, which is not closed")
    return views


def _predict_effect(
    history: History,
    before: History,
    changed: Iterable[int],
    layers: Layers,
    adapter: Adapter,
    prefix: Prefix,
    model: str,
    options: Mapping[str, Any],
    encodings: Encodings | None,
    foreign_reasoning: str,
) -> dict[str, Any]:
    """Where the next request will diverge from this one, and what that costs in cache reads, for a
    decision that changes a view (a keep-all one is :class:`KeptEffect`, the same figures deferred).

    One predictor: ``predicted_cache_read`` is :func:`predict` (the vendor's rules: minimum, rounding,
    breakpoints, persisted units) of the request :func:`encoded` builds on ``history`` as decided, over
    the same records, the same call that gives the next request its own ``predicted_cache_read``; the next
    request only adds its new user message past that history, and no rule lets a unit the earlier
    requests never sent be read. ``keep_cache_read`` is the same prediction for the history as
    ``Keep`` would have left it (``before``, the closed turn kept whole), so ``cache_tokens_lost`` is
    the difference of two predictions, never of a prediction and a token count.
    """
    indices = list(changed)
    records = layers.records
    views = [history.turns[i].view for i in indices]

    def predicted_on(h: History) -> tuple[VendorRequest, int | None]:
        request = encoded(
            adapter,
            prefix,
            h,
            model,
            options,
            layers,
            foreign_reasoning=foreign_reasoning,
            encodings=encodings,
        )
        return request, predict(adapter, request, records)

    request, predicted = predicted_on(history)
    d = divergence(request.units, records.newest_units())
    closed = before.turns[-1]
    kept = TurnView(tuple(True for _ in closed.steps), policy=Keep().name)
    keep_read = predicted_on(before.with_view(closed.index, kept))[1]
    dropped = 0
    for i, view in zip(indices, views, strict=True):
        for k, step in enumerate(history.turns[i].steps):
            if view is None or not view.keep_reasoning[k]:
                dropped += reasoning_tokens(step)
    lost = keep_read - predicted if predicted is not None and keep_read is not None else None
    answer = sum(answer_tokens(s) for i in indices for s in history.turns[i].steps)
    return {
        "divergence_unit": d,
        "predicted_cache_read": predicted,
        "keep_cache_read": keep_read,
        "cache_tokens_lost": lost,
        "dropped_reasoning_tokens": dropped,
        "reprefill_tokens": max(0, lost - dropped) if lost is not None else None,
        "answer_tokens": answer,
    }
