"""The turn state machine: the one class everything revolves around.

States and legal transitions (anything else raises :class:`~reasonstate.errors.IllegalTransition`)::

    IDLE ──send(text)──▶ AWAITING_MODEL ──reply without tool calls──▶ IDLE   (turn closed, policy applied)
                                        ──reply with tool calls────▶ AWAITING_TOOL_RESULTS
    AWAITING_TOOL_RESULTS ──send_tool_results(...)──▶ AWAITING_MODEL
    IDLE | AWAITING_TOOL_RESULTS ──close()──▶ CLOSED

Invariants:
  * a call that fails (vendor error, timeout, dropped stream, malformed response, bad input) changes nothing
    but the trace, where the failure is recorded: history, continuation and execution are exactly as before
    and a retry sends the same bytes;
  * inside an open tool chain every continuation payload is replayed verbatim; a policy runs only when a
    turn closes, its decision is clamped by the adapter's ``ProtocolRules`` and frozen, so the following
    requests extend the new prefix (append-only);
  * tool results are sent in the model's declared call order, whatever order they are given in, and JSON
    values are serialized canonically (sorted keys), so equal results give equal bytes
    (stanfordnlp/dspy#10216).

``Session`` and ``AsyncSession`` share :class:`_Core`; they differ only where they await.
"""

from __future__ import annotations

import copy
import enum
import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import attrs

from reasonstate.adapters import Adapter, adapter_for
from reasonstate.adapters.base import CallResult, DecodedStep, VendorRequest, request_digest
from reasonstate.cache.guard import divergence
from reasonstate.errors import (
    IllegalTransition,
    InvalidOption,
    ReasonStateError,
    ToolResultError,
    VendorError,
)
from reasonstate.policies import Keep, Policy, answer_tokens, policy_from_spec, reasoning_tokens
from reasonstate.prefix import Prefix, Tool
from reasonstate.snapshot import SessionSnapshot, history_from_snapshot, history_to_snapshot
from reasonstate.state import (
    Continuation,
    EventKind,
    ExecutionRecord,
    History,
    Step,
    ToolResultPart,
    Trace,
    Turn,
    TurnView,
    Usage,
)

__all__ = ["AsyncSession", "Reply", "Report", "Session", "ToolCall", "ToolResult", "TurnState"]


class TurnState(enum.Enum):
    IDLE = "idle"
    AWAITING_MODEL = "awaiting_model"
    AWAITING_TOOL_RESULTS = "awaiting_tool_results"
    CLOSED = "closed"


#: the calls each state allows; anything else is an IllegalTransition (h11-style: the rules are data)
_ALLOWED: dict[TurnState, frozenset[str]] = {
    TurnState.IDLE: frozenset({"send", "change_prefix", "switch_model", "snapshot", "close"}),
    TurnState.AWAITING_MODEL: frozenset(),
    TurnState.AWAITING_TOOL_RESULTS: frozenset({"send_tool_results", "snapshot", "close"}),
    TurnState.CLOSED: frozenset({"snapshot"}),
}


@attrs.frozen(slots=True)
class ToolCall:
    """A tool call the model made: ``arguments`` parsed, ``raw_arguments`` exactly as received."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    raw_arguments: str


@attrs.frozen(slots=True)
class ToolResult:
    """A tool result with an error flag; plain values passed to ``send_tool_results`` mean success."""

    content: Any
    is_error: bool = False


@attrs.frozen(slots=True)
class Reply:
    """What one model call produced."""

    text: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    stop_reason: str
    turn: int
    step: int


@attrs.frozen(slots=True)
class Report:
    """Cache and cost summary of a session, derived from the execution layer and the trace."""

    requests: int
    prompt_tokens: int
    cache_read: int
    cache_write: int
    output_tokens: int
    predicted_matches: int
    predicted_total: int
    active_context_tokens: int
    protocol_errors: int
    failed_calls: int

    @property
    def cache_read_share(self) -> float:
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else 0.0

    def __str__(self) -> str:
        return (
            f"{self.requests} requests, {self.prompt_tokens} prompt tokens "
            f"({self.cache_read_share:.1%} cache reads, {self.cache_write} written), "
            f"{self.output_tokens} output; predictions exact on {self.predicted_matches}/"
            f"{self.predicted_total}; active context {self.active_context_tokens}; "
            f"protocol errors {self.protocol_errors}, failed calls {self.failed_calls}"
        )


@attrs.frozen(slots=True)
class _Attempt:
    """A tentative next state: committed only if the call succeeds."""

    history: History
    results_given: tuple[ToolResultPart, ...] = ()


def _serialize_result(call_id: str, value: Any) -> ToolResultPart:
    is_error = False
    if isinstance(value, ToolResult):
        is_error, value = value.is_error, value.content
    if isinstance(value, str):
        return ToolResultPart(call_id=call_id, content=value, is_error=is_error)
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolResultError(f"result for {call_id!r} is not JSON-serializable: {exc}") from exc
    return ToolResultPart(call_id=call_id, content=text, is_error=is_error)


_S = TypeVar("_S", bound="_Core")

#: request fields the session builds itself; passing them as options would bypass the state machine
_SDK_OWNED = frozenset({"messages", "input", "prompt", "instructions", "previous_response_id", "model"})


class _Core:
    """Everything but the I/O: state, transitions, encode/decode bookkeeping, policies, snapshots."""

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        system: str = "",
        tools: Sequence[Tool] = (),
        few_shots: Sequence[tuple[str, str]] = (),
        policy: Policy | None = None,
        adapter: Adapter | None = None,
        dialect: str | None = None,
        api: str | None = None,
        stream: bool = False,
        **request_options: Any,
    ) -> None:
        owned = sorted(_SDK_OWNED.intersection(request_options))
        if owned:
            raise InvalidOption(
                f"{owned} are built by the session from its state; pass system=, tools=, few_shots= "
                "and the turns through send()"
            )
        self._client = client
        self._adapter: Adapter = (
            adapter if adapter is not None else adapter_for(client, dialect=dialect, api=api)
        )
        self._model = model
        self._prefix = Prefix(system=system, tools=tuple(tools), few_shots=tuple(few_shots))
        self._policy: Policy = Keep() if policy is None else policy
        self._stream = stream
        self._options: dict[str, Any] = dict(request_options)
        self._state = TurnState.IDLE
        self._history = History()
        self._trace = Trace()
        self._records: tuple[ExecutionRecord, ...] = ()
        volatile = self._prefix.volatile_spans()
        if volatile:
            self._trace = self._trace.appended(
                EventKind.PREFIX_VOLATILE,
                spans=volatile,
                advice="a clock time in the system prompt changes every session and busts the prefix "
                "cache; keep the date in the prefix and the time in the newest user message",
            )

    # -- the four layers -------------------------------------------------------------------------------
    @property
    def history(self) -> History:
        """Canonical history (layer 2)."""
        return self._history

    @property
    def trace(self) -> Trace:
        """Every event (layer 1)."""
        return self._trace

    @property
    def continuation(self) -> tuple[Continuation, ...]:
        """Every vendor-opaque payload, in history order (layer 3; derived from the history)."""
        return tuple(c for t in self._history.turns for s in t.steps for c in s.continuation)

    @property
    def execution(self) -> tuple[ExecutionRecord, ...]:
        """One record per successful request (layer 4)."""
        return self._records

    @property
    def state(self) -> TurnState:
        return self._state

    @property
    def prefix(self) -> Prefix:
        return self._prefix

    @property
    def model(self) -> str:
        return self._model

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def pending_calls(self) -> tuple[ToolCall, ...]:
        """The calls awaiting results (empty unless AWAITING_TOOL_RESULTS)."""
        turn = self._history.open_turn
        if self._state is not TurnState.AWAITING_TOOL_RESULTS or turn is None:
            return ()
        return tuple(ToolCall(c.id, c.name, c.arguments, c.raw_arguments) for c in turn.steps[-1].tool_calls)

    # -- transitions -------------------------------------------------------------------------------------
    def _require(self, action: str) -> None:
        """Raise :class:`IllegalTransition` unless ``action`` is legal in the current state."""
        if action in _ALLOWED[self._state]:
            return
        state = self._state
        if state is TurnState.AWAITING_TOOL_RESULTS and action == "send":
            ids = [c.id for c in self.pending_calls]
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

    def _begin_user(self, text: str) -> _Attempt:
        self._require("send")
        if not isinstance(text, str) or not text:
            raise IllegalTransition("a user message must be a non-empty string")
        turn = Turn(index=len(self._history), user=text)
        return _Attempt(history=self._history.with_turn(turn))

    def _begin_tools(self, results: Mapping[str, Any]) -> _Attempt:
        self._require("send_tool_results")
        turn = self._history.open_turn
        assert turn is not None
        step = turn.steps[-1]
        declared = [c.id for c in step.tool_calls]
        if not isinstance(results, Mapping):
            raise ToolResultError("tool results must be a mapping of call id to result")
        unknown = [k for k in results if k not in declared]
        if unknown:
            raise ToolResultError(f"unknown tool call ids {unknown}; pending: {declared}")
        missing = [k for k in declared if k not in results]
        if missing:
            raise ToolResultError(f"missing results for tool calls {missing}")
        parts = tuple(_serialize_result(cid, results[cid]) for cid in declared)
        steps = (*turn.steps[:-1], attrs.evolve(step, tool_results=parts))
        history = self._history.with_last_turn(attrs.evolve(turn, steps=steps))
        return _Attempt(history=history, results_given=parts)

    def _prepare(self, attempt: _Attempt) -> tuple[VendorRequest, int | None]:
        request = self._adapter.encode(
            self._prefix, attempt.history, self._model, self._options, self._records
        )
        return request, self._adapter.predict_cache_read(request, self._records)

    def _failed(self, request: VendorRequest, exc: BaseException) -> None:
        status = exc.status if isinstance(exc, VendorError) else None
        self._trace = self._trace.appended(
            EventKind.CALL_FAILED,
            error=type(exc).__name__,
            message=str(exc),
            status=status,
            units=len(request.units),
        )

    def _commit(
        self,
        attempt: _Attempt,
        request: VendorRequest,
        predicted: int | None,
        result: CallResult,
        started: float,
    ) -> Reply:
        decoded: DecodedStep = self._adapter.decode(result.response, self._model)
        duration = time.perf_counter() - started
        history = attempt.history
        turn = history.open_turn
        assert turn is not None
        step = Step(
            parts=decoded.parts,
            continuation=decoded.continuation,
            stop_reason=decoded.stop_reason,
            usage=decoded.usage,
            model=decoded.model,
            response_id=decoded.response_id,
        )
        turn = attrs.evolve(turn, steps=(*turn.steps, step))
        history = history.with_last_turn(turn)
        digest, size = request_digest(request.kwargs, result.request_body)
        previous = self._records[-1].blocks if self._records else ()
        record = ExecutionRecord(
            index=len(self._records),
            turn=turn.index,
            step=len(turn.steps) - 1,
            request_digest=digest,
            request_bytes=size,
            prefix_fingerprint=self._prefix.fingerprint,
            blocks=request.units,
            breakpoints=request.breakpoints,
            divergence=divergence(request.units, previous) if previous else None,
            predicted_cache_read=predicted,
            usage=decoded.usage,
            duration_s=duration,
            model=self._model,
            prompt_ids=decoded.prompt_ids,
            completion_ids=decoded.completion_ids,
        )
        trace = self._trace
        if len(turn.steps) == 1:
            trace = trace.appended(EventKind.TURN_OPENED, turn=turn.index, user=turn.user)
        if attempt.results_given:
            trace = trace.appended(
                EventKind.TOOL_RESULTS,
                turn=turn.index,
                call_ids=[r.call_id for r in attempt.results_given],
            )
        for kind, data in request.events:
            trace = trace.appended(kind, **data)
        if request.withheld:
            trace = trace.appended(
                EventKind.CONTINUATION_WITHHELD,
                count=len(request.withheld),
                reason="produced by another vendor or model",
                models=sorted({c.model for c in request.withheld}),
            )
        trace = trace.appended(
            EventKind.REQUEST_SENT,
            index=record.index,
            request_digest=digest,
            bytes=size,
            prefix_fingerprint=record.prefix_fingerprint,
            divergence=record.divergence,
            predicted_cache_read=predicted,
        )
        if record.divergence is not None:
            trace = trace.appended(
                EventKind.CACHE_BREAK,
                index=record.index,
                unit=record.divergence,
                why=self._why_diverged(record.divergence),
            )
        trace = trace.appended(
            EventKind.RESPONSE_RECEIVED,
            index=record.index,
            stop_reason=step.stop_reason,
            usage=attrs.asdict(step.usage),
            duration_s=round(duration, 6),
            response_id=decoded.response_id,
        )
        for kind, data in decoded.events:
            trace = trace.appended(kind, **data)
        if step.reasoning_text or any(c.kind.endswith("thinking") for c in step.continuation):
            trace = trace.appended(
                EventKind.REASONING,
                turn=turn.index,
                step=len(turn.steps) - 1,
                text=step.reasoning_text,
                payload_digests=[c.digest for c in step.continuation if c.model_bound],
            )
        if step.tool_calls:
            trace = trace.appended(
                EventKind.TOOL_CALLS,
                turn=turn.index,
                calls=[{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in step.tool_calls],
            )
            state = TurnState.AWAITING_TOOL_RESULTS
        else:
            history, trace = self._close_turn(history, trace, request, record)
            state = TurnState.IDLE
        # commit: every layer at once
        self._history, self._trace, self._state = history, trace, state
        self._records = (*self._records, record)
        return Reply(
            text=step.text,
            reasoning=step.reasoning_text,
            tool_calls=tuple(ToolCall(c.id, c.name, c.arguments, c.raw_arguments) for c in step.tool_calls),
            usage=step.usage,
            stop_reason=step.stop_reason,
            turn=turn.index,
            step=len(turn.steps) - 1,
        )

    def _why_diverged(self, unit: int) -> str:
        for event in reversed(self._trace.events):
            if event.kind in (EventKind.POLICY_DECISION, EventKind.PREFIX_CHANGED, EventKind.MODEL_CHANGED):
                return f"{event.kind}: {event.data.get('summary', '')}".strip()
        return f"request differs from the previous one at prefix unit {unit}"

    def _close_turn(
        self, history: History, trace: Trace, request: VendorRequest, record: ExecutionRecord
    ) -> tuple[History, Trace]:
        turn = history.turns[-1]
        views = dict(self._policy.decide(history, turn.index))
        views.setdefault(turn.index, TurnView(tuple(True for _ in turn.steps), policy=self._policy.name))
        if not self._adapter.rules.may_rewrite_past(self._model):
            for index in sorted(i for i in views if i != turn.index):
                del views[index]
                trace = trace.appended(
                    EventKind.POLICY_CLAMPED,
                    turn=index,
                    policy=self._policy.name,
                    reasons=[
                        f"{self._model}: history must stay append-only (later reasoning is bound to "
                        "the prefix it was produced on), so an earlier turn's view cannot change"
                    ],
                )
        for index in sorted(views):
            target = history.turns[index]
            view, reasons = self._adapter.rules.clamp(target, views[index])
            if reasons:
                trace = trace.appended(
                    EventKind.POLICY_CLAMPED, turn=index, policy=self._policy.name, reasons=list(reasons)
                )
            history = history.with_view(index, view)
        closed = history.turns[-1]
        assert closed.view is not None
        effect = self._predict_effect(history, views.keys(), record)
        trace = trace.appended(
            EventKind.POLICY_DECISION,
            turn=closed.index,
            policy=self._policy.name,
            views={
                str(i): {"keep_reasoning": list(v.keep_reasoning), "summary": v.summary}
                for i, v in ((i, history.turns[i].view) for i in sorted(views))
                if v is not None
            },
            summary=f"{self._policy.name} on turn(s) {sorted(views)}",
            **effect,
        )
        trace = trace.appended(EventKind.TURN_CLOSED, turn=closed.index, steps=len(closed.steps))
        return history, trace

    def _predict_effect(self, history: History, changed: Any, record: ExecutionRecord) -> dict[str, Any]:
        """Where the next request will diverge from this one, and what that costs in cache reads."""
        keep_read = record.usage.prompt_tokens
        if all(v is not None and v.keeps_all for v in (history.turns[i].view for i in changed)):
            return {"divergence_unit": None, "predicted_cache_read": keep_read, "reprefill_tokens": 0}
        records = (*self._records, record)
        request = self._adapter.encode(self._prefix, history, self._model, self._options, records)
        d = divergence(request.units, record.blocks)
        predicted = self._adapter.predict_cache_read(request, records)
        dropped = sum(
            reasoning_tokens(s)
            for i in changed
            for k, s in enumerate(history.turns[i].steps)
            if not history.turns[i].view or not history.turns[i].view.keep_reasoning[k]
        )
        lost = keep_read - predicted if predicted is not None else None
        answer = sum(answer_tokens(s) for i in changed for s in history.turns[i].steps)
        return {
            "divergence_unit": d,
            "predicted_cache_read": predicted,
            "keep_cache_read": keep_read,
            "cache_tokens_lost": lost,
            "dropped_reasoning_tokens": dropped,
            "reprefill_tokens": max(0, lost - dropped) if lost is not None else None,
            "answer_tokens": answer,
        }

    # -- prefix and model changes ----------------------------------------------------------------------
    def change_prefix(
        self,
        *,
        system: str | None = None,
        tools: Sequence[Tool] | None = None,
        few_shots: Sequence[tuple[str, str]] | None = None,
    ) -> Prefix:
        """Replace parts of the stable prefix (IDLE only). Traced: every later request re-prefills."""
        self._require("change_prefix")
        new = Prefix(
            system=self._prefix.system if system is None else system,
            tools=self._prefix.tools if tools is None else tuple(tools),
            few_shots=self._prefix.few_shots if few_shots is None else tuple(few_shots),
        )
        if new.fingerprint != self._prefix.fingerprint:
            self._trace = self._trace.appended(
                EventKind.PREFIX_CHANGED,
                old=self._prefix.fingerprint,
                new=new.fingerprint,
                summary="system/tools/few-shots changed: the whole prompt is re-prefilled",
            )
            self._prefix = new
        return new

    def switch_model(self, model: str) -> None:
        """Use another model from the next turn on (IDLE only).

        Reasoning payloads bound to the old model are withheld from then on (never sent to another model:
        anomalyco/opencode#25005); the trace records the switch and each withholding.
        """
        self._require("switch_model")
        if model != self._model:
            self._trace = self._trace.appended(
                EventKind.MODEL_CHANGED,
                old=self._model,
                new=model,
                summary=f"model {self._model} → {model}: earlier model-bound reasoning is withheld",
            )
            self._model = model

    def close(self) -> None:
        """No further calls; the four layers stay readable (and a snapshot can still be taken)."""
        self._require("close")
        self._state = TurnState.CLOSED

    # -- reporting and snapshots -----------------------------------------------------------------------
    def report(self) -> Report:
        """Derived from the execution and trace layers."""
        recs = self._records
        predicted = [r for r in recs if r.predicted_cache_read is not None]
        failures = self._trace.of_kind(EventKind.CALL_FAILED)
        return Report(
            requests=len(recs),
            prompt_tokens=sum(r.usage.prompt_tokens for r in recs),
            cache_read=sum(r.usage.cache_read for r in recs),
            cache_write=sum(r.usage.cache_write for r in recs),
            output_tokens=sum(r.usage.output for r in recs),
            predicted_matches=sum(1 for r in predicted if r.predicted_cache_read == r.usage.cache_read),
            predicted_total=len(predicted),
            active_context_tokens=recs[-1].usage.prompt_tokens + recs[-1].usage.output if recs else 0,
            protocol_errors=sum(1 for e in failures if e.data.get("status") == 400),
            failed_calls=len(failures),
        )

    def next_request(
        self, text: str | None = None, results: Mapping[str, Any] | None = None
    ) -> VendorRequest:
        """The request the next ``send(text)`` / ``send_tool_results(results)`` would make (no I/O).

        The kwargs are a deep copy: changing them changes nothing in the session.
        """
        attempt = self._begin_tools(results) if results is not None else self._begin_user(text or "")
        request = self._prepare(attempt)[0]
        return attrs.evolve(request, kwargs=copy.deepcopy(dict(request.kwargs)))

    def snapshot(self) -> SessionSnapshot:
        """Everything needed to continue elsewhere with a byte-identical next request."""
        self._require("snapshot")
        return SessionSnapshot(
            vendor=self._adapter.vendor,
            api=self._adapter.api,
            model=self._model,
            state=self._state.value,
            system=self._prefix.system,
            tools=[t.canonical() | {"parallel_safe": t.parallel_safe} for t in self._prefix.tools],
            few_shots=[list(p) for p in self._prefix.few_shots],
            policy=self._policy.spec(),
            stream=self._stream,
            # insertion order kept: the vendor call's bytes must not change across a restore
            options=json.loads(json.dumps(self._options, ensure_ascii=False)),
            history=history_to_snapshot(self._history),
            execution=[_record_to_dict(r) for r in self._records],
            trace=[{"seq": e.seq, "kind": e.kind, "at": e.at, "data": dict(e.data)} for e in self._trace],
        )

    def _restore_from(self, snap: SessionSnapshot) -> None:
        from reasonstate.state import TraceEvent

        self._state = TurnState(snap.state)
        self._history = history_from_snapshot(snap.history)
        self._records = tuple(_record_from_dict(r) for r in snap.execution)
        self._trace = Trace(
            tuple(TraceEvent(seq=e["seq"], kind=e["kind"], data=e["data"], at=e["at"]) for e in snap.trace)
        ).appended(EventKind.RESTORED, turns=len(self._history), requests=len(self._records))
        self._adapter.restored()

    @classmethod
    def restore(
        cls: type[_S],
        snapshot: SessionSnapshot,
        client: Any,
        *,
        tools: Sequence[Tool] | None = None,
        policy: Policy | None = None,
        adapter: Adapter | None = None,
    ) -> _S:
        """Continue a snapshot on ``client``; the next request is byte-identical to the original's.

        ``tools`` re-attaches handlers by name (handlers are code, not data); ``policy`` is needed when
        the snapshot's policy cannot be rebuilt (``Compress``).
        """
        routing: dict[str, Any] = {}
        if adapter is None and snapshot.api == "chat":
            routing["dialect"] = snapshot.vendor  # chat adapters are named after their dialect
        session = cls(client, adapter=adapter, **routing, **cls._restore_args(snapshot, tools, policy))
        if (session._adapter.vendor, session._adapter.api) != (snapshot.vendor, snapshot.api):
            raise IllegalTransition(
                f"snapshot is from {snapshot.vendor}/{snapshot.api}; this client gives "
                f"{session._adapter.vendor}/{session._adapter.api} (pass adapter=)"
            )
        session._restore_from(snapshot)
        return session

    @classmethod
    def _restore_args(
        cls, snap: SessionSnapshot, tools: Sequence[Tool] | None, policy: Policy | None
    ) -> dict[str, Any]:
        handlers = {t.name: t for t in tools or ()}
        restored_tools = [
            Tool(
                name=t["name"],
                description=t["description"],
                parameters=t["parameters"],
                handler=handlers[t["name"]].handler if t["name"] in handlers else None,
                parallel_safe=bool(t.get("parallel_safe", False)),
            )
            for t in snap.tools
        ]
        return {
            "model": snap.model,
            "system": snap.system,
            "tools": restored_tools,
            "few_shots": [tuple(p) for p in snap.few_shots],
            "policy": policy if policy is not None else policy_from_spec(snap.policy),
            "stream": snap.stream,
            **snap.options,
        }


def _record_to_dict(r: ExecutionRecord) -> dict[str, Any]:
    data = attrs.asdict(r, recurse=False)
    data["usage"] = attrs.asdict(r.usage)
    data["blocks"] = list(r.blocks)
    data["breakpoints"] = list(r.breakpoints)
    for key in ("prompt_ids", "completion_ids"):
        data[key] = list(data[key]) if data[key] is not None else None
    return data


def _record_from_dict(d: Mapping[str, Any]) -> ExecutionRecord:
    ids = {k: tuple(d[k]) if d.get(k) is not None else None for k in ("prompt_ids", "completion_ids")}
    return ExecutionRecord(
        **{
            **d,
            **ids,
            "usage": Usage(**d["usage"]),
            "blocks": tuple(d["blocks"]),
            "breakpoints": tuple(d["breakpoints"]),
        }
    )


class Session(_Core):
    """A synchronous session over a sync vendor client (``anthropic.Anthropic``, ...).

    ``rs.Session(client, model=..., system=..., tools=[...], policy=..., stream=False, **request_options)``;
    extra keyword arguments go to the vendor call unchanged (``max_tokens``, ``thinking``, ...).
    """

    def send(self, text: str) -> Reply:
        """Open a turn with a user message and make one model call."""
        return self._call(self._begin_user(text))

    def send_tool_results(self, results: Mapping[str, Any]) -> Reply:
        """Answer every pending call (any order; sent in the model's declared order) and call the model."""
        return self._call(self._begin_tools(results))

    def run(self, text: str, *, max_steps: int = 32) -> Reply:
        """``send(text)``, then execute tool handlers and send their results until the final answer."""
        reply = self.send(text)
        for _ in range(max_steps):
            if not reply.tool_calls:
                return reply
            reply = self.send_tool_results(_dispatch(self._prefix, reply.tool_calls))
        raise IllegalTransition(f"no final answer after {max_steps} steps; tool results are pending")

    def _call(self, attempt: _Attempt) -> Reply:
        request, predicted = self._prepare(attempt)
        started, previous = time.perf_counter(), self._state
        self._state = TurnState.AWAITING_MODEL
        try:
            raw = self._adapter.call(self._client, request, self._stream)
            return self._commit(attempt, request, predicted, raw, started)
        except ReasonStateError as exc:
            self._state = previous
            self._failed(request, exc)
            raise
        except BaseException:  # cancelled (asyncio) or interrupted: nothing was committed
            self._state = previous
            raise


class AsyncSession(_Core):
    """The asyncio twin of :class:`Session` for async clients (``anthropic.AsyncAnthropic``, ...)."""

    async def send(self, text: str) -> Reply:
        return await self._call(self._begin_user(text))

    async def send_tool_results(self, results: Mapping[str, Any]) -> Reply:
        return await self._call(self._begin_tools(results))

    async def run(self, text: str, *, max_steps: int = 32) -> Reply:
        reply = await self.send(text)
        for _ in range(max_steps):
            if not reply.tool_calls:
                return reply
            reply = await self.send_tool_results(_dispatch(self._prefix, reply.tool_calls))
        raise IllegalTransition(f"no final answer after {max_steps} steps; tool results are pending")

    async def _call(self, attempt: _Attempt) -> Reply:
        request, predicted = self._prepare(attempt)
        started, previous = time.perf_counter(), self._state
        self._state = TurnState.AWAITING_MODEL
        try:
            raw = await self._adapter.acall(self._client, request, self._stream)
            return self._commit(attempt, request, predicted, raw, started)
        except ReasonStateError as exc:
            self._state = previous
            self._failed(request, exc)
            raise
        except BaseException:  # cancelled (asyncio) or interrupted: nothing was committed
            self._state = previous
            raise


def _dispatch(prefix: Prefix, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """Run each call's handler; consecutive parallel-safe calls run concurrently. Errors become results."""

    def run_one(call: ToolCall) -> Any:
        tool = prefix.tool(call.name)
        if tool is None or tool.handler is None:
            return ToolResult(f"no handler for tool {call.name!r}", is_error=True)
        try:
            return tool.handler(**call.arguments)
        except Exception as exc:  # a failing tool is a tool result, not a session failure
            return ToolResult(f"{type(exc).__name__}: {exc}", is_error=True)

    results: dict[str, Any] = {}
    chunk: list[ToolCall] = []

    def flush() -> None:
        if len(chunk) > 1:
            with ThreadPoolExecutor(max_workers=min(8, len(chunk))) as pool:
                for call, value in zip(chunk, pool.map(run_one, chunk), strict=True):
                    results[call.id] = value
        elif chunk:
            results[chunk[0].id] = run_one(chunk[0])
        chunk.clear()

    for call in calls:
        tool = prefix.tool(call.name)
        if tool is not None and tool.parallel_safe:
            chunk.append(call)
            continue
        flush()
        results[call.id] = run_one(call)
    flush()
    return results
