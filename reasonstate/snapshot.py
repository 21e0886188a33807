"""Persisted session snapshots (pydantic, at the edge): JSON in, JSON out, byte-identical continuation.

Continuation payloads are stored as their exact UTF-8 JSON text with the capture digest, token ids with the
seal taken when they were recorded; restoring re-verifies every digest and seal, so a snapshot edited on disk
is refused rather than sent (:class:`~reasonstate.errors.ContinuationMismatch`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pydantic

from reasonstate.errors import ContinuationMismatch, InvalidOption, ReasonStateError, SnapshotError
from reasonstate.policies import Fold, Policy, policy_from_spec
from reasonstate.prefix import Prefix, Tool, canonical_json
from reasonstate.state import (
    Continuation,
    EventKind,
    ExecutionRecord,
    Folded,
    History,
    OpaquePart,
    Part,
    ReasoningPart,
    Records,
    Step,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Trace,
    TraceEvent,
    Turn,
    TurnView,
    UnitChain,
    Usage,
    digest_of,
    thaw,
)

if TYPE_CHECKING:
    from reasonstate.engine import Layers

__all__ = [
    "SessionSnapshot",
    "history_from_snapshot",
    "history_to_snapshot",
    "restore_args",
    "restored_layers",
    "session_snapshot",
]

#: 2: an integrity digest over the content; tool calls may have no arguments (``arguments_error``);
#: 3: a record holds its unit count, the unit digests of the newest requests are kept once (``units``)
SNAPSHOT_VERSION = 3


class SessionSnapshot(pydantic.BaseModel):
    """A whole session: provenance, prefix, policy, options, the four layers, and the turn state.

    ``digest`` is ``sha256`` over the canonical JSON of every other field, taken when the snapshot was made:
    :meth:`checked` (which ``Session.restore`` calls) refuses a snapshot edited since. It detects accidents
    and careless edits, not an attacker (there is no secret); the continuation payloads keep their own
    capture digests, checked too.
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    version: int = SNAPSHOT_VERSION
    vendor: str
    api: str
    model: str
    state: str
    system: str
    tools: list[dict[str, Any]]
    few_shots: list[list[str]]
    policy: dict[str, Any]
    #: ``Fold.spec()`` when the session folds (its ``summarize`` is code: pass ``fold=`` to restore); absent
    #: from the JSON (and from the digest) when it does not, so older snapshots still read
    fold: dict[str, Any] | None = None
    stream: bool = False
    foreign_reasoning: str = "drop"
    on_rejected_continuation: str = "raise"
    options: dict[str, Any]
    history: list[dict[str, Any]]
    execution: list[dict[str, Any]]
    #: the unit digests of each model's newest requests, once (``Records.chains``): per model its newest
    #: request's whole tuple and each earlier one's difference from the next newer, ``[seq, shared, tail]``
    units: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    trace: list[dict[str, Any]]
    digest: str = ""

    def content_digest(self) -> str:
        """``sha256`` over the canonical JSON of every field but ``digest``."""
        exclude = {"digest"} if self.fold is not None else {"digest", "fold"}
        content = self.model_dump(mode="json", exclude=exclude)
        return digest_of(canonical_json(content).encode())

    def sealed(self) -> SessionSnapshot:
        """This snapshot with its digest taken now: for tools that build or edit snapshots on purpose
        (migrations, tests). Payload digests are not touched and are still checked on restore."""
        return self.model_copy(update={"digest": self.content_digest()})

    def checked(self) -> SessionSnapshot:
        """This snapshot, or :class:`~reasonstate.errors.SnapshotError` when its version is unknown or its
        content changed since it was taken."""
        if self.version != SNAPSHOT_VERSION:
            raise SnapshotError(
                f"snapshot version {self.version} is not one this reasonstate reads ({SNAPSHOT_VERSION})"
            )
        # the specific check first: an edited payload or token id is a ContinuationMismatch
        try:
            history_from_snapshot(self.history)
            _records_from(self.execution, self.units)
        except ReasonStateError:
            raise
        except (ValueError, TypeError, KeyError) as exc:  # a value no session could have produced
            raise SnapshotError(f"not a valid snapshot: {type(exc).__name__}: {exc}") from exc
        if self.digest != self.content_digest():
            raise SnapshotError(
                "the snapshot was edited after it was taken: its content digest does not match"
            )
        return self

    @classmethod
    def load(cls, data: SessionSnapshot | str | bytes | Mapping[str, Any]) -> SessionSnapshot:
        """A checked snapshot from a ``SessionSnapshot``, its JSON text or bytes, or its dict form;
        :class:`~reasonstate.errors.SnapshotError` for anything else."""
        if isinstance(data, SessionSnapshot):
            return data.checked()
        try:
            if isinstance(data, (str, bytes, bytearray)):
                snapshot = cls.model_validate_json(data)
            elif isinstance(data, Mapping):
                snapshot = cls.model_validate(dict(data))
            else:
                raise SnapshotError(f"cannot restore from {type(data).__name__}: pass a snapshot or its JSON")
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'snapshot'}: {e['msg']}" for e in exc.errors()[:5]
            )
            raise SnapshotError(f"not a valid snapshot: {problems}") from exc
        return snapshot.checked()


def _part_to(p: Part) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"t": "text", "text": p.text, "c": p.continuation}
    if isinstance(p, ReasoningPart):
        return {"t": "reasoning", "text": p.text, "redacted": p.redacted, "c": p.continuation}
    if isinstance(p, ToolCallPart):
        return {
            "t": "tool_call",
            "id": p.id,
            "name": p.name,
            "raw": p.raw_arguments,
            "arguments": None if p.arguments is None else dict(p.arguments),
            "c": p.continuation,
            "error": p.arguments_error,
        }
    return {"t": "opaque", "type": p.type, "c": p.continuation}


def _part_from(d: dict[str, Any]) -> Part:
    t = d["t"]
    if t == "text":
        return TextPart(text=d["text"], continuation=d["c"])
    if t == "reasoning":
        return ReasoningPart(text=d["text"], redacted=d["redacted"], continuation=d["c"])
    if t == "tool_call":
        return ToolCallPart(
            id=d["id"],
            name=d["name"],
            arguments=d["arguments"],
            raw_arguments=d["raw"],
            continuation=d["c"],
            arguments_error=d.get("error"),
        )
    return OpaquePart(type=d["type"], continuation=d["c"])


def _continuation_from(d: dict[str, Any]) -> Continuation:
    payload = d["payload"].encode()
    if digest_of(payload) != d["digest"]:
        raise ContinuationMismatch(f"snapshot {d['vendor']} {d['kind']} payload does not match its digest")
    return Continuation(
        vendor=d["vendor"],
        api=d["api"],
        model=d["model"],
        kind=d["kind"],
        payload=payload,
        digest=d["digest"],
        model_bound=d["model_bound"],
    )


def history_to_snapshot(history: History) -> list[dict[str, Any]]:
    """The history as JSON data: payloads as their exact UTF-8 text with their capture digests."""
    return [
        {
            "index": t.index,
            "user": t.user,
            "view": None
            if t.view is None
            else {"keep": list(t.view.keep_reasoning), "policy": t.view.policy, "summary": t.view.summary},
            # the fold (History.fold) rides on the last turn it covers: turns 0..this one are folded
            **(
                {"folded_into": history.fold.summary}
                if history.fold is not None and history.fold.through == t.index
                else {}
            ),
            "steps": [
                {
                    "parts": [_part_to(p) for p in s.parts],
                    "continuation": [
                        {
                            "vendor": c.vendor,
                            "api": c.api,
                            "model": c.model,
                            "kind": c.kind,
                            "payload": c.payload.decode(),
                            "digest": c.digest,
                            "model_bound": c.model_bound,
                        }
                        for c in s.continuation
                    ],
                    "stop_reason": s.stop_reason,
                    "usage": {
                        "uncached_input": s.usage.uncached_input,
                        "cache_read": s.usage.cache_read,
                        "cache_write": s.usage.cache_write,
                        "output": s.usage.output,
                        "reasoning": s.usage.reasoning,
                        "cache_write_1h": s.usage.cache_write_1h,
                    },
                    "model": s.model,
                    "response_id": s.response_id,
                    "response_stored": s.response_stored,
                    "tool_results": [
                        {"call_id": r.call_id, "content": r.content, "is_error": r.is_error}
                        for r in s.tool_results
                    ],
                }
                for s in t.steps
            ],
        }
        for t in history.turns
    ]


def history_from_snapshot(turns: list[dict[str, Any]]) -> History:
    """The inverse of :func:`history_to_snapshot`; a payload that no longer matches its digest raises
    :class:`~reasonstate.errors.ContinuationMismatch`."""
    marks = [(t["index"], t["folded_into"]) for t in turns if "folded_into" in t]
    if len(marks) > 1 or any(not isinstance(s, str) or not s for _, s in marks):
        raise ValueError("a history holds at most one fold, whose summary is non-empty text")
    fold = Folded(through=int(marks[0][0]), summary=marks[0][1]) if marks else None
    history = History(
        tuple(
            Turn(
                index=t["index"],
                user=t["user"],
                view=None
                if t["view"] is None
                else TurnView(
                    keep_reasoning=tuple(t["view"]["keep"]),
                    policy=t["view"]["policy"],
                    summary=t["view"]["summary"],
                ),
                steps=tuple(
                    Step(
                        parts=tuple(_part_from(p) for p in s["parts"]),
                        continuation=tuple(_continuation_from(c) for c in s["continuation"]),
                        stop_reason=s["stop_reason"],
                        usage=Usage(**s["usage"]),
                        model=s["model"],
                        response_id=s.get("response_id"),
                        response_stored=bool(s.get("response_stored", False)),
                        tool_results=tuple(ToolResultPart(**r) for r in s["tool_results"]),
                    )
                    for s in t["steps"]
                ),
            )
            for t in turns
        )
    )
    return history.with_fold(fold)


def session_snapshot(
    *,
    vendor: str,
    api: str,
    model: str,
    state: str,
    prefix: Prefix,
    policy: Policy,
    fold: Fold | None,
    stream: bool,
    foreign_reasoning: str,
    on_rejected_continuation: str,
    options: Mapping[str, Any],
    layers: Layers,
) -> SessionSnapshot:
    """A session's whole state as a :class:`SessionSnapshot`."""
    snapshot = SessionSnapshot(
        vendor=vendor,
        api=api,
        model=model,
        state=state,
        system=prefix.system,
        tools=[
            t.canonical() | {"parallel_safe": t.parallel_safe, "timeout": t.timeout} for t in prefix.tools
        ],
        few_shots=[list(p) for p in prefix.few_shots],
        policy=policy.spec(),
        fold=fold.spec() if fold is not None else None,
        stream=stream,
        foreign_reasoning=foreign_reasoning,
        on_rejected_continuation=on_rejected_continuation,
        # insertion order kept: the vendor call's bytes must not change across a restore
        options=json.loads(json.dumps(dict(options), ensure_ascii=False)),
        history=history_to_snapshot(layers.history),
        execution=[_record_to_dict(r) for r in layers.records],
        units=[_chain_to_dict(c) for c in layers.records.chains],
        trace=[{"seq": e.seq, "kind": e.kind, "at": e.at, "data": thaw(e.data)} for e in layers.trace],
    )
    return snapshot.sealed()


def restored_layers(snap: SessionSnapshot) -> Layers:
    """The layers a snapshot holds, every payload digest and token-id seal verified, plus a ``session
    .restored`` event."""
    from reasonstate.engine import Layers

    history = history_from_snapshot(snap.history)
    records = _records_from(snap.execution, snap.units)
    trace = Trace(
        tuple(TraceEvent(seq=e["seq"], kind=e["kind"], data=e["data"], at=e["at"]) for e in snap.trace)
    ).appended(EventKind.RESTORED, turns=len(history), requests=len(records))
    return Layers.of(history, trace, records)


def restore_args(
    snap: SessionSnapshot, tools: Sequence[Tool] | None, policy: Policy | None, fold: Fold | None = None
) -> dict[str, Any]:
    """The ``Session`` constructor arguments of a snapshot; ``tools`` re-attach handlers by name. A
    snapshot of a folding session needs ``fold`` (its ``summarize`` is code): :class:`InvalidOption`
    without it."""
    if snap.fold is not None and fold is None:
        raise InvalidOption(
            f"the snapshot's session folds its history ({snap.fold}); pass fold=Fold(...) to restore(): "
            "its summarize callable is code and is not in the snapshot"
        )
    handlers = {t.name: t for t in tools or ()}
    restored_tools = [
        Tool(
            name=t["name"],
            description=t["description"],
            parameters=t["parameters"],
            handler=handlers[t["name"]].handler if t["name"] in handlers else None,
            parallel_safe=bool(t.get("parallel_safe", False)),
            flatten=bool(t.get("flatten", True)),
            timeout=t.get("timeout"),
        )
        for t in snap.tools
    ]
    return {
        "model": snap.model,
        "system": snap.system,
        "tools": restored_tools,
        "few_shots": [tuple(p) for p in snap.few_shots],
        "policy": policy if policy is not None else policy_from_spec(snap.policy),
        "fold": fold,
        "stream": snap.stream,
        "foreign_reasoning": snap.foreign_reasoning,
        "on_rejected_continuation": snap.on_rejected_continuation,
        **snap.options,
    }


def _record_to_dict(r: ExecutionRecord) -> dict[str, Any]:
    data = attrs.asdict(r, recurse=False)
    data["usage"] = attrs.asdict(r.usage)
    data["breakpoints"] = list(r.breakpoints)
    for key in ("prompt_ids", "completion_ids"):
        data[key] = list(data[key]) if data[key] is not None else None
    return data


def _record_from_dict(d: Mapping[str, Any]) -> ExecutionRecord:
    ids = {k: tuple(d[k]) if d.get(k) is not None else None for k in ("prompt_ids", "completion_ids")}
    record = ExecutionRecord(
        **{
            **d,
            **ids,
            "usage": Usage(**d["usage"]),
            "breakpoints": tuple(d["breakpoints"]),
        }
    )
    record.verify_ids()
    return record


def _chain_to_dict(c: UnitChain) -> dict[str, Any]:
    return {
        "model": c.model,
        "seq": c.seq,
        "units": list(c.units),
        "older": [[seq, shared, list(tail)] for seq, shared, tail in c.older],
    }


def _chain_from_dict(d: Mapping[str, Any]) -> UnitChain:
    older = tuple((int(seq), int(shared), tuple(tail)) for seq, shared, tail in d["older"])
    return UnitChain(model=d["model"], seq=int(d["seq"]), units=tuple(d["units"]), older=older)


def _records_from(execution: Sequence[Mapping[str, Any]], units: Sequence[Mapping[str, Any]]) -> Records:
    """The records and their unit chains (``ValueError`` when a chain does not fit its records)."""
    records = [_record_from_dict(r) for r in execution]
    return Records.restored(records, [_chain_from_dict(c) for c in units])
