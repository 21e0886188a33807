"""What one answered request adds to the layers: the step, its execution record, its trace events, and —
when the answer closes the turn — the policy's frozen views.

:func:`commit` is pure: it takes the layers as they were and returns them as they are after the answer, or
raises and changes nothing (the session swaps all layers at once). The trace events it appends, in order:
``turn.opened`` (first step), ``tool.results`` (results sent), the request's own events, ``continuation
.withheld``, ``request.sent``, ``cache.break`` (the request diverged from the previous one, with the cause),
``response.received``, the decoder's events, ``reasoning.captured``, then ``tool.calls`` or the closing
events (``policy.clamped``, ``policy.decision`` with its predicted cache effect, ``turn.closed``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from reasonstate.adapters import APIS, view_of
from reasonstate.adapters.base import Adapter, DecodedStep, VendorRequest, request_digest
from reasonstate.cache.divergence import Divergence, divergence, explain
from reasonstate.cache.rules import predict_cache_read
from reasonstate.errors import PolicyConflict
from reasonstate.policies import Keep, Policy, answer_tokens, reasoning_tokens
from reasonstate.prefix import Prefix
from reasonstate.state import (
    EventKind,
    ExecutionRecord,
    History,
    Step,
    ToolCallPart,
    ToolResultPart,
    Trace,
    TurnView,
    ids_digest,
)
from reasonstate.state.frozen import FrozenDict, FrozenList
from reasonstate.state.history import frozen_arguments

__all__ = ["Layers", "ToolCall", "commit", "lost_responses", "predict", "stripped_payloads"]

_log = logging.getLogger("reasonstate")


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


@attrs.frozen(slots=True)
class Layers:
    """The session's history, trace and execution records: swapped as one value, so a commit is atomic.

    ``lost`` (response ids the vendor no longer holds) and ``stripped`` (digests of payloads a vendor
    rejected and the session leaves out) are derived from the trace — :func:`lost_responses`,
    :func:`stripped_payloads` — and kept here as they grow, so no request rescans the trace.
    """

    history: History = attrs.field(factory=History)
    trace: Trace = attrs.field(factory=Trace)
    records: tuple[ExecutionRecord, ...] = ()
    lost: frozenset[str] = frozenset()
    stripped: frozenset[str] = frozenset()
    #: the exact bytes of the newest request (for the cause of the next cache break; not snapshotted)
    last_body: bytes | None = None

    @classmethod
    def of(cls, history: History, trace: Trace, records: tuple[ExecutionRecord, ...]) -> Layers:
        """The layers with their derived sets computed from ``trace`` (a restore)."""
        return cls(history, trace, records, lost_responses(trace), stripped_payloads(trace))


def lost_responses(trace: Trace) -> frozenset[str]:
    """Response ids the vendor said it no longer holds (a traced 404 for ``previous_response_id``)."""
    return frozenset(
        str(e.data["lost_response_id"])
        for e in trace.of_kind(EventKind.CALL_FAILED)
        if e.data.get("lost_response_id") is not None
    )


def stripped_payloads(trace: Trace) -> frozenset[str]:
    """Digests of the payloads a vendor rejected and the session left out (``continuation.stripped``)."""
    return frozenset(d for e in trace.of_kind(EventKind.CONTINUATION_STRIPPED) for d in e.data["digests"])


def predict(adapter: Adapter, request: VendorRequest, records: tuple[ExecutionRecord, ...]) -> int | None:
    """The cache read the vendor will report for ``request`` (None: not knowable)."""
    return predict_cache_read(
        adapter.cache,
        request.model,
        request.units,
        records,
        breakpoints=request.breakpoints,
        prefix_units=request.prefix_units,
        prompt_ids=request.prompt_ids,
    )


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
    model: str,
    options: Mapping[str, Any],
    policy: Policy,
) -> tuple[Layers, Step]:
    """The layers after ``decoded`` answered ``request`` (sent on ``history``, whose last turn is open)."""
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
    ids = None
    if decoded.prompt_ids is not None or decoded.completion_ids is not None:
        ids = ids_digest((*(decoded.prompt_ids or ()), *(decoded.completion_ids or ())))
    record = ExecutionRecord(
        index=len(records),
        turn=turn.index,
        step=len(turn.steps) - 1,
        request_digest=digest,
        request_bytes=size,
        prefix_fingerprint=prefix.fingerprint,
        blocks=request.units,
        breakpoints=request.breakpoints,
        divergence=divergence(request.units, previous.blocks) if previous else None,
        predicted_cache_read=predicted,
        usage=decoded.usage,
        duration_s=duration,
        model=model,
        prompt_ids=decoded.prompt_ids,
        completion_ids=decoded.completion_ids,
        output_unit=decoded.output_unit,
        ids_seal=ids,
    )
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
        broken = _why_diverged(
            trace, len(trace), record, previous, adapter.api, layers.last_body, request_body
        )
        events.append((EventKind.CACHE_BREAK, {"index": record.index, "unit": record.divergence, **broken}))
    usage = step.usage
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
    records = (*records, record)
    tool_calls = step.tool_calls
    if tool_calls:
        calls = [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in tool_calls]
        events.append((EventKind.TOOL_CALLS, {"turn": turn.index, "calls": calls}))
    else:
        history = _close_turn(
            history,
            events,
            records,
            adapter=adapter,
            prefix=prefix,
            model=model,
            options=options,
            policy=policy,
        )
    trace = trace.extended(events)
    return Layers(history, trace, records, layers.lost, layers.stripped, request_body), step


def _why_diverged(
    trace: Trace,
    since: int,
    record: ExecutionRecord,
    previous: ExecutionRecord,
    api: str,
    before: bytes | None,
    body: bytes | None,
) -> dict[str, Any]:
    """The cause of a cache break: ``cause`` (a word of :data:`reasonstate.guard.analysis.CAUSES`), ``path``
    (the JSON path of the first difference) and ``why`` (a sentence; it starts with the traced event that
    declared the change — ``prefix.changed``, ``model.changed``, ``context.folded``, ``policy.decision`` —
    when there is one) and ``declared`` (whether the change was declared before the request: a prefix or
    model change, a fold, or a policy decision that predicted the divergence).

    The cause comes from the guard's analysis of the two requests' bytes (:func:`explain`), the same as
    guard mode's; the session adds what only it knows: the model switch or prefix change it traced, and,
    for dropped reasoning, the policy decision that dropped it (``decision``).
    """
    found = _explained(api, before, body, previous.model, record.model)
    sent = [e.seq for e in trace.of_kind(EventKind.REQUEST_SENT)]
    after = sent[-1] if sent else -1
    # the decisions since the previous request that changed a view (dropped reasoning or summarized)
    decisions = [
        e
        for e in trace.events[after + 1 : since]
        if e.kind == EventKind.POLICY_DECISION and _changes_a_view(e.data.get("views"))
    ]
    # a fold since the previous request (not a skipped one) replaced the head by its summary
    folds = [
        e
        for e in trace.events[after + 1 : since]
        if e.kind == EventKind.CONTEXT_FOLDED and not e.data.get("skipped")
    ]
    cause: str
    decision: str | None = None
    declared = True  # a model or prefix change the session made (traced, or seen in the records)
    if record.model != previous.model:
        cause, path = "model_changed", "$.model"
        why = _cause(trace, (EventKind.MODEL_CHANGED,), f"model {previous.model} → {record.model}")
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
            newest = next(e for e in reversed(trace.events) if e.kind == EventKind.POLICY_DECISION)
            declared = newest.data.get("divergence_unit") is not None
        if folds:
            if found is None:
                cause = "compacted"
            decision = why = f"{folds[-1].kind}: {folds[-1].data.get('summary', '')}".strip()
            declared = True
    # ``declared``: the break's cause is a change the trace declared before this request (the exporters
    # and the logger read this field, never the sentence in ``why``)
    out: dict[str, Any] = {"cause": cause, "path": path, "why": why, "declared": declared}
    if decision is not None:
        out["decision"] = decision
    return out


def _changes_a_view(views: Any) -> bool:
    """Whether a ``policy.decision``'s views drop reasoning or summarize a turn."""
    if not isinstance(views, Mapping):
        return False
    return any(
        isinstance(v, Mapping) and (not all(v.get("keep_reasoning") or ()) or v.get("summary") is not None)
        for v in views.values()
    )


def _explained(api: str, before: bytes | None, body: bytes | None, was: str, model: str) -> Divergence | None:
    """The guard's cause analysis of two request bodies, or None when either is missing or unreadable."""
    if before is None or body is None or api not in APIS:
        return None
    try:
        return explain(view_of(api, json.loads(before), was), view_of(api, json.loads(body), model))
    except ValueError:
        return None


def _cause(trace: Trace, kinds: Iterable[str], fallback: str) -> str:
    for event in reversed(trace.events):
        if event.kind in kinds:
            return f"{event.kind}: {event.data.get('summary', '')}".strip()
    return fallback


def _close_turn(
    history: History,
    events: list[tuple[str, Mapping[str, Any]]],
    records: tuple[ExecutionRecord, ...],
    *,
    adapter: Adapter,
    prefix: Prefix,
    model: str,
    options: Mapping[str, Any],
    policy: Policy,
) -> History:
    """The policy decides the closed turn's view (and KeepLast an earlier one), clamped by the rules; the
    decision's events are added to ``events``."""
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
    effect = _predict_effect(history, views.keys(), records, adapter, prefix, model, options)
    order = sorted(views)
    decided = FrozenDict(
        (str(i), FrozenDict(keep_reasoning=FrozenList(v.keep_reasoning), summary=v.summary))
        for i, v in ((i, history.turns[i].view) for i in order)
        if v is not None
    )
    # effect's values are scalars: the whole event is frozen as built
    data = FrozenDict(
        turn=closed.index,
        policy=policy.name,
        views=decided,
        summary=f"{policy.name} on turn(s) {order}",
        **effect,
    )
    events.append((EventKind.POLICY_DECISION, data))
    events.append((EventKind.TURN_CLOSED, FrozenDict(turn=closed.index, steps=len(closed.steps))))
    return history


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
    changed: Iterable[int],
    records: tuple[ExecutionRecord, ...],
    adapter: Adapter,
    prefix: Prefix,
    model: str,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """Where the next request will diverge from this one, and what that costs in cache reads."""
    indices = list(changed)
    record = records[-1]
    keep_read = record.usage.prompt_tokens
    views = [history.turns[i].view for i in indices]
    if all(v is not None and v.keeps_all for v in views):
        return {"divergence_unit": None, "predicted_cache_read": keep_read, "reprefill_tokens": 0}
    request = adapter.encode(prefix, history.rendered(), model, options, records)
    d = divergence(request.units, record.blocks)
    predicted = predict(adapter, request, records)
    dropped = 0
    for i, view in zip(indices, views, strict=True):
        for k, step in enumerate(history.turns[i].steps):
            if view is None or not view.keep_reasoning[k]:
                dropped += reasoning_tokens(step)
    lost = keep_read - predicted if predicted is not None else None
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
