"""Persisted session snapshots (pydantic, at the edge): JSON in, JSON out, byte-identical continuation.

Continuation payloads are stored as their exact UTF-8 JSON text with the capture digest, token ids with the
seal taken when they were recorded; restoring re-verifies every digest and seal, so a snapshot edited on disk
is refused rather than sent (:class:`~reasonstate.errors.ContinuationMismatch`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pydantic
from pydantic_core import to_jsonable_python

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
    TokenIds,
    ToolCallPart,
    ToolResultPart,
    Trace,
    TraceEvent,
    Turn,
    TurnView,
    UnitChain,
    Usage,
    digest_of,
    parse_arguments,
    thaw,
)
from reasonstate.state.continuation import FIRST_PARTY, compact, recorded_platform, shared_bare
from reasonstate.state.units import Units

if TYPE_CHECKING:
    from reasonstate.engine import Layers

__all__ = [
    "SessionSnapshot",
    "check_meaning",
    "history_from_snapshot",
    "history_to_snapshot",
    "restore_args",
    "restored_layers",
    "session_snapshot",
    "trace_from_snapshot",
]

#: 2: an integrity digest over the content; tool calls may have no arguments (``arguments_error``);
#: 3: the history in its compact form (:func:`history_to_snapshot`): positional, names in tables, payloads
#: as JSON values, one digest over the payloads' capture digests; a record holds its unit count, the unit
#: digests of the newest requests are kept once (``units``); the trace in its compact form. A snapshot of
#: another version is refused (:class:`~reasonstate.errors.SnapshotError` naming both versions), never read
#: as this one
SNAPSHOT_VERSION = 3


class SessionSnapshot(pydantic.BaseModel):
    """A whole session: provenance, prefix, policy, options, the four layers, and the turn state.

    ``digest`` is ``sha256`` over the canonical JSON of every other field, taken when the snapshot was made:
    :meth:`checked` (which ``Session.restore`` calls) refuses a snapshot edited since. It detects accidents
    and careless edits, not an attacker (there is no secret); the continuation payloads keep their own
    capture digests, checked too.
    """

    model_config = pydantic.ConfigDict(extra="forbid")

    version: pydantic.StrictInt = SNAPSHOT_VERSION
    vendor: pydantic.StrictStr
    api: pydantic.StrictStr
    model: pydantic.StrictStr
    #: where the session's requests were served (docs/protocols.md §10): a snapshot of a session on Bedrock
    #: restores onto a Bedrock client only. Left out of the digest when first-party, so snapshots taken
    #: before platforms were recorded (all first-party) still verify
    platform: pydantic.StrictStr = FIRST_PARTY
    #: the turn state (``TurnState`` value) the session was in: one that agrees with the history
    #: (:func:`check_meaning`)
    state: pydantic.StrictStr
    system: str
    tools: list[dict[str, Any]]
    few_shots: list[list[str]]
    policy: dict[str, Any]
    #: ``Fold.spec()`` when the session folds (its ``summarize`` is code: pass ``fold=`` to restore); absent
    #: from the JSON (and from the digest) when it does not, so older snapshots still read
    fold: dict[str, Any] | None = None
    stream: pydantic.StrictBool = False
    foreign_reasoning: str = "drop"
    on_rejected_continuation: str = "raise"
    options: dict[str, Any]
    #: the compact form of :func:`history_to_snapshot`
    history: dict[str, Any]
    #: one row per execution record (``_RECORD_FIELDS`` order, ``index`` its position)
    execution: list[list[Any]]
    #: the unit digests of each model's newest requests, once (``Records.chains``): per model its newest
    #: request's whole tuple and each earlier one's difference from the next newer, ``[seq, shared, tail]``
    units: list[dict[str, Any]] = pydantic.Field(default_factory=list)
    #: the trace's compact form (:meth:`Trace.to_compact`: ``{"codec": "trace/1", ...}``); a list of event
    #: dicts (``seq``, ``kind``, ``at``, ``data``) is the earlier form, still read
    trace: dict[str, Any] | list[dict[str, Any]]
    digest: str = ""

    def content_digest(self) -> str:
        """``sha256`` over the canonical JSON of every field but ``digest``."""
        exclude = {"digest"} if self.fold is not None else {"digest", "fold"}
        if self.platform == FIRST_PARTY:
            exclude.add("platform")
        content = self.model_dump(mode="json", exclude=exclude)
        return digest_of(canonical_json(content).encode())

    def _shared_digest(self) -> str:
        """:meth:`content_digest` read off the fields themselves, without pydantic's JSON-mode copy of the
        whole snapshot (issue 21: ~0.1 s of a 2,000-turn restore): the same text wherever the fields hold
        plain JSON values, as a validated snapshot's do; "" where they hold anything else (the check then
        takes :meth:`content_digest`)."""
        exclude = {"digest"} if self.fold is not None else {"digest", "fold"}
        content = {name: getattr(self, name) for name in type(self).model_fields if name not in exclude}
        try:
            return digest_of(canonical_json(content).encode())
        except (TypeError, ValueError):
            return ""

    def sealed(self) -> SessionSnapshot:
        """This snapshot with its digest taken now: for tools that build or edit snapshots on purpose
        (migrations, tests). Payload digests are not touched and are still checked on restore."""
        return self.model_copy(update={"digest": self.content_digest()})

    def checked(self) -> SessionSnapshot:
        """This snapshot, or :class:`~reasonstate.errors.SnapshotError` when its version is unknown or its
        content changed since it was taken."""
        self._checked_parts()
        return self

    def _checked_parts(self) -> tuple[History, Records]:
        """:meth:`checked`, giving the history and records the check read (built once: a restore uses
        them, issue 21: a 2,000-turn restore built both twice)."""
        if self.version != SNAPSHOT_VERSION:
            raise SnapshotError(
                f"snapshot version {self.version} is not one this reasonstate reads ({SNAPSHOT_VERSION})"
            )
        # the specific check first: an edited payload or token id is a ContinuationMismatch
        try:
            history = history_from_snapshot(self.history)
            records = _records_from(self.execution, self.units)
        except ReasonStateError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:  # no session made it
            raise SnapshotError(f"not a valid snapshot: {type(exc).__name__}: {exc}") from exc
        if self.digest != self._shared_digest() and self.digest != self.content_digest():
            raise SnapshotError(
                "the snapshot was edited after it was taken: its content digest does not match"
            )
        check_meaning(history, self.state, self.vendor, self.api)
        return history, records

    @classmethod
    def load(cls, data: SessionSnapshot | str | bytes | Mapping[str, Any]) -> SessionSnapshot:
        """A checked snapshot from a ``SessionSnapshot``, its JSON text or bytes, or its dict form;
        :class:`~reasonstate.errors.SnapshotError` for anything else."""
        return cls.loaded(data)[0]

    @classmethod
    def loaded(
        cls, data: SessionSnapshot | str | bytes | Mapping[str, Any]
    ) -> tuple[SessionSnapshot, History, Records]:
        """:meth:`load`, with the history and records its check read (for :func:`restored_layers`)."""
        if isinstance(data, SessionSnapshot):
            return data, *data._checked_parts()
        try:
            if isinstance(data, (str, bytes, bytearray)):
                snapshot = cls.model_validate_json(data)
            elif isinstance(data, Mapping):
                snapshot = cls.model_validate(dict(data))
            else:
                raise SnapshotError(f"cannot restore from {type(data).__name__}: pass a snapshot or its JSON")
        except pydantic.ValidationError as exc:
            _check_version(data)
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'snapshot'}: {e['msg']}" for e in exc.errors()[:5]
            )
            raise SnapshotError(f"not a valid snapshot: {problems}") from exc
        return snapshot, *snapshot._checked_parts()


# -- the history part (docs: the module docstring) ------------------------------------------------------
#
# Positional arrays, trailing defaults left out, repeated names written once in a table:
#
#   {"turns": [turn, ...], "names": [str, ...], "origins": [origin, ...], "views": [view, ...],
#    "fold": [through, summary] (absent without a fold), "digest": "sha256:..." (absent without payloads)}
#   turn   = [user, [step, ...], view | null, index]   (index left out when it is the turn's position, then
#            view left out while the turn is open)
#   step   = [[part, ...], [continuation, ...], stop_reason name, usage, model name, response_id,
#             [[call_id, content, 1 when is_error], ...], 1 when response_stored]   (trailing defaults out)
#   usage  = [uncached_input, cache_read, cache_write, output, reasoning, cache_write_1h] (defaults out)
#   part   = [0, text, c] | [1, text, c, 1 when redacted] | [2, id, name, raw, c, error, arguments] |
#            [3, type, c]   (c, redacted left out when None/False; error and arguments when they are what
#            parse_arguments(raw) gives)
#   continuation = [origin, payload JSON value] | [origin, payload text, 1]   (the text form for bytes that
#            are not compact JSON a JSON round trip keeps, e.g. with a float, NaN or a duplicate key)
#   origin = [vendor, api, model, kind, 1 when model_bound, platform]   (platform left out when first-party,
#            docs/protocols.md §10.1)
#   view = [[keep flags], policy, summary]
#
# A payload's capture digest is sha256 of its bytes, so it is derived on restore, not stored; ``digest`` is
# sha256 over the capture digests of every payload in order, taken from the history values when the snapshot
# is made: a payload edited since (in memory or in the snapshot) is a ContinuationMismatch on restore.

_USAGE_DEFAULTS = (0, 0, 0, 0, None, 0)


def _trimmed(values: list[Any], defaults: Sequence[Any]) -> list[Any]:
    """``values`` without the trailing entries that are their default (``defaults`` are those of the last
    ``len(defaults)`` entries; equal and of the same type, so ``1`` is not ``True``)."""
    n, first = len(values), len(values) - len(defaults)
    while n > first:
        value, default = values[n - 1], defaults[n - 1 - first]
        if type(value) is not type(default) or value != default:
            break
        n -= 1
    return values[:n]


class _Table:
    """Distinct hashable values in first-seen order, each written once and referred to by its index."""

    __slots__ = ("index", "values")

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any) -> int:
        i = self.index.get(value)
        if i is None:
            i = self.index[value] = len(self.values)
            self.values.append(value)
        return i


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _no_float(text: str) -> Any:
    raise ValueError(text)


#: a payload's JSON (one decoder, built once), refusing floats and NaN/Infinity
_payload_json = json.JSONDecoder(parse_float=_no_float, parse_constant=_no_constant).decode


def _embedded(payload: bytes) -> Any:
    """The payload's JSON value when writing it as a value and reading it back gives these very bytes
    (compact JSON without floats or NaN: the snapshot's JSON encoder writes those its own way), else _TEXT."""
    try:
        # (json.loads with hooks builds a decoder per call; what it decodes other than UTF-8 never gives
        # these bytes back, so reading UTF-8 only changes no answer)
        value = _payload_json(payload.decode("utf-8", "surrogatepass"))
    except ValueError:
        return _TEXT
    return value if compact(value) == payload else _TEXT


_TEXT: Any = object()


def _check_version(data: str | bytes | bytearray | Mapping[str, Any]) -> None:
    """:class:`~reasonstate.errors.SnapshotError` naming the version when ``data`` is a snapshot of another
    version (whose fields need not be this version's: the version is what to report)."""
    try:
        found = (json.loads(data) if isinstance(data, (str, bytes, bytearray)) else data).get("version")
    except (ValueError, AttributeError):
        return
    if found is not None and found != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"snapshot version {found} is not one this reasonstate reads ({SNAPSHOT_VERSION})"
        )


def _part_to(p: Part) -> list[Any]:
    c = p.continuation
    if isinstance(p, TextPart):
        return [0, p.text] if c is None else [0, p.text, c]
    if isinstance(p, ReasoningPart):
        if p.redacted:
            return [1, p.text, c, 1]
        return [1, p.text] if c is None else [1, p.text, c]
    if isinstance(p, ToolCallPart):
        entry = [2, p.id, p.name, p.raw_arguments, c]
        parsed, error = parse_arguments(p.raw_arguments)
        arguments = None if p.arguments is None else thaw(p.arguments)
        same = error == p.arguments_error and (
            arguments is None
            if parsed is None
            else arguments is not None and compact(parsed) == compact(arguments)
        )
        return entry if same else [*entry, p.arguments_error, arguments]
    return [3, p.type, c]


def _part_from(d: list[Any]) -> Part:
    t = d[0]
    c = d[2] if len(d) > 2 else None
    if t == 0:
        return TextPart(text=d[1], continuation=c)
    if t == 1:
        return ReasoningPart(text=d[1], redacted=len(d) > 3 and bool(d[3]), continuation=c)
    if t == 2:
        raw = d[3]
        arguments, error = (d[6], d[5]) if len(d) > 5 else parse_arguments(raw)
        return ToolCallPart(
            id=d[1],
            name=d[2],
            arguments=arguments,
            raw_arguments=raw,
            continuation=d[4],
            arguments_error=error,
        )
    if t == 3:
        return OpaquePart(type=d[1], continuation=d[2])
    raise ValueError(f"unknown part type {t!r}")


def history_to_snapshot(history: History, *, embed: bool = True) -> dict[str, Any]:
    """The history as compact JSON data (the layout above); payloads as JSON values where that gives their
    exact bytes back, else as their exact UTF-8 text (``embed=False``: always as text, which saves parsing
    and re-encoding each payload to check the round trip: the store's deltas, reasonstate/journal.py)."""
    names, origins, views = _Table(), _Table(), _Table()
    digests: list[str] = []
    turns: list[list[Any]] = []
    for position, t in enumerate(history.turns):
        steps: list[list[Any]] = []
        for s in t.steps:
            continuation: list[list[Any]] = []
            for c in s.continuation:
                origin = origins(
                    (c.vendor, c.api, c.model, c.kind, 1 if c.model_bound else 0)
                    if c.platform == FIRST_PARTY
                    else (c.vendor, c.api, c.model, c.kind, 1 if c.model_bound else 0, c.platform)
                )
                value = _embedded(c.payload) if embed else _TEXT
                continuation.append(
                    [origin, value] if value is not _TEXT else [origin, c.payload.decode(), 1]
                )
                digests.append(c.digest)
            u = s.usage
            usage = [u.uncached_input, u.cache_read, u.cache_write, u.output, u.reasoning, u.cache_write_1h]
            step = [
                [_part_to(p) for p in s.parts],
                continuation,
                names(s.stop_reason),
                _trimmed(usage, _USAGE_DEFAULTS),
                names(s.model),
                s.response_id,
                [[r.call_id, r.content, 1] if r.is_error else [r.call_id, r.content] for r in s.tool_results],
                1 if s.response_stored else 0,
            ]
            steps.append(_trimmed(step, (None, [], 0)))
        view = None
        if t.view is not None:
            v = t.view
            view = views((v.keep_reasoning, v.policy, v.summary))
        turn: list[Any] = [t.user, steps, view, t.index]
        turns.append(turn if t.index != position else turn[:2] if view is None else turn[:3])
    data: dict[str, Any] = {
        "turns": turns,
        "names": names.values,
        "origins": [list(o) for o in origins.values],
        "views": [
            [[1 if k else 0 for k in keep], policy, summary]
            if summary is not None
            else [[1 if k else 0 for k in keep], policy]
            for keep, policy, summary in views.values
        ],
    }
    if history.fold is not None:
        data["fold"] = [history.fold.through, history.fold.summary]
    if digests:
        data["digest"] = digest_of("".join(digests).encode())
    return data


#: the largest payload a restore shares with an equal one of the same origin (:func:`history_from_snapshot`)
_SHARED_BYTES = 64


def history_from_snapshot(data: Mapping[str, Any]) -> History:
    """The inverse of :func:`history_to_snapshot`: equal to the history it was made from. A payload that
    no longer matches the capture digests raises :class:`~reasonstate.errors.ContinuationMismatch`."""
    names = [_shared(n) for n in data["names"]]
    # an origin's sixth field is its platform, absent for first-party payloads (and in every snapshot
    # written before platforms were recorded: they are first-party, docs/protocols.md §10.1, but for a
    # vendor that is a platform, Bedrock's Converse, §11)
    origins = [
        (
            _shared(o[0]),
            _shared(o[1]),
            _shared(o[2]),
            _shared(o[3]),
            bool(o[4]),
            _shared(o[5]) if len(o) > 5 else recorded_platform(o[0], FIRST_PARTY),
        )
        for o in data["origins"]
    ]
    views = [
        TurnView(
            keep_reasoning=tuple(bool(k) for k in v[0]), policy=v[1], summary=v[2] if len(v) > 2 else None
        )
        for v in data["views"]
    ]
    digests: list[str] = []
    # the small payloads read so far by origin and bytes: equal ones are one value, as when captured (a
    # payload with nothing opaque in it, e.g. Gemini's ``{"thought":true}``, is shared: issue 21)
    small: dict[tuple[int, bytes], Continuation] = {}

    def continuation_from(d: list[Any], texts: Mapping[str, str]) -> Continuation:
        c = _continuation_from(d, texts)
        if len(c.payload) <= _SHARED_BYTES:
            c = small.setdefault((d[0], c.payload), c)
        digests.append(c.digest)
        return c

    def _continuation_from(d: list[Any], texts: Mapping[str, str]) -> Continuation:
        vendor, api, model, kind, bound, platform = origins[d[0]]
        if len(d) > 2:
            if d[2] != 1:
                raise ValueError(f"unknown payload form {d[2]!r}")
            c = Continuation.restored(
                vendor=vendor,
                api=api,
                model=model,
                kind=kind,
                payload=d[1].encode(),
                model_bound=bound,
                platform=platform,
            )
        else:
            value = d[1]
            if texts and type(value) is dict:  # the step's reasoning text, one string object (issue 21)
                value = {k: texts.get(v, v) if type(v) is str else v for k, v in value.items()}
            c = Continuation.restored(
                vendor=vendor,
                api=api,
                model=model,
                kind=kind,
                payload=compact(value),
                model_bound=bound,
                value=value,
                platform=platform,
                strings=True,  # a thinking block as the session captured it: its strings (issue 21)
            )
        return c

    def step_from(s: list[Any]) -> Step:
        parts = tuple(_part_from(p) for p in s[0])
        texts = {p.text: p.text for p in parts if type(p) is ReasoningPart and p.text}
        return Step(
            parts=parts,
            continuation=shared_bare(tuple(continuation_from(c, texts) for c in s[1])),
            stop_reason=names[s[2]],
            usage=Usage(*s[3]),
            model=names[s[4]],
            response_id=s[5] if len(s) > 5 else None,
            tool_results=tuple(
                ToolResultPart(call_id=r[0], content=r[1], is_error=len(r) > 2 and bool(r[2]))
                for r in (s[6] if len(s) > 6 else ())
            ),
            response_stored=len(s) > 7 and bool(s[7]),
        )

    turns = tuple(
        Turn(
            index=t[3] if len(t) > 3 else position,
            user=t[0],
            steps=tuple(step_from(s) for s in t[1]),
            view=views[t[2]] if len(t) > 2 and t[2] is not None else None,
        )
        for position, t in enumerate(data["turns"])
    )
    if digests and data.get("digest") != digest_of("".join(digests).encode()):
        raise ContinuationMismatch(
            "a continuation payload in the snapshot changed since capture: its bytes no longer match the "
            "capture digests the snapshot was taken with"
        )
    fold = None
    if "fold" in data:
        through, summary = data["fold"]
        if type(through) is not int or not isinstance(summary, str) or not summary:
            raise ValueError("a history holds at most one fold, whose summary is non-empty text")
        fold = Folded(through=through, summary=summary)
    return History(turns, fold)


#: the turn states a snapshot may hold: never mid-call (a snapshot is refused while a call is in flight)
_SNAPSHOT_STATES = ("idle", "awaiting_tool_results", "closed")
#: the APIs whose requests the vendor refuses when two tool calls share an id (docs/protocols.md)
_UNIQUE_CALL_IDS = frozenset({("anthropic", "messages"), ("openai", "responses")})


def check_meaning(history: History, state: str, vendor: str, api: str) -> None:
    """:class:`~reasonstate.errors.SnapshotError` naming the field unless the history and the turn state
    make sense together, so that no restored session can be wedged or send what no session would: turns in
    order (``turns[i].index == i``), only the last one open, the state one a snapshot holds and agreeing
    with the history (``awaiting_tool_results`` exactly when the open turn's last step made tool calls,
    ``idle`` with no open turn), and tool-call ids unique where the vendor requires it. A sealed snapshot
    edited with ``sealed()`` is checked by meaning here, not only by its digest."""
    if state not in _SNAPSHOT_STATES:
        raise SnapshotError(f"state: {state!r} is not a turn state a snapshot holds {_SNAPSHOT_STATES}")
    turns = history.turns
    last = len(turns) - 1
    for i, t in enumerate(turns):
        if t.index != i:
            raise SnapshotError(f"history.turns[{i}]: its index is {t.index}; turns must be in order")
        if i < last and t.view is None:
            raise SnapshotError(f"history.turns[{i}] is open, but only the last turn may be")
    open_turn = history.open_turn
    pending = open_turn is not None and bool(open_turn.steps) and bool(open_turn.steps[-1].tool_calls)
    if state == "awaiting_tool_results" and not pending:
        raise SnapshotError("state: 'awaiting_tool_results', but the history has no pending tool calls")
    if state == "idle" and open_turn is not None:
        raise SnapshotError("state: 'idle', but the last turn of the history is open")
    if open_turn is not None and state != "closed" and not pending:
        raise SnapshotError("history: the last turn is open but waits for nothing (no tool calls)")
    if (vendor, api) in _UNIQUE_CALL_IDS:
        seen: set[str] = set()
        for t in turns:
            for step in t.steps:
                for call in step.tool_calls:
                    if call.id in seen:
                        raise SnapshotError(
                            f"history.turns[{t.index}]: tool call id {call.id!r} appears twice; "
                            f"{vendor} refuses a request that repeats one"
                        )
                    seen.add(call.id)


def _shared(name: str) -> str:
    """One object for equal short names (vendor, api, model, kind): restored histories share them."""
    return sys.intern(name) if type(name) is str else name


def session_snapshot(
    *,
    vendor: str,
    api: str,
    model: str,
    state: str,
    prefix: Prefix,
    platform: str = FIRST_PARTY,
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
        platform=platform,
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
        execution=_records_to(layers.records),
        units=[_chain_to_dict(c) for c in layers.records.chains],
        trace=layers.trace.to_compact(to_jsonable_python),
    )
    return snapshot.sealed()


def restored_layers(snap: SessionSnapshot, parts: tuple[History, Records] | None = None) -> Layers:
    """The layers a snapshot holds, every payload digest and token-id seal verified, plus a ``session
    .restored`` event. ``parts``: the history and records :meth:`SessionSnapshot.loaded` read from
    ``snap`` (built here when not given)."""
    from reasonstate.engine import Layers

    if parts is None:
        parts = history_from_snapshot(snap.history), _records_from(snap.execution, snap.units)
    history, records = parts
    trace = trace_from_snapshot(snap.trace).appended(
        EventKind.RESTORED, turns=len(history), requests=len(records)
    )
    return Layers.of(history, trace, records)


def trace_from_snapshot(trace: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Trace:
    """The trace a snapshot holds: its compact form (:meth:`Trace.from_compact`) or the earlier list of
    event dicts; :class:`~reasonstate.errors.SnapshotError` for anything else."""
    try:
        if isinstance(trace, Mapping):
            return Trace.from_compact(trace)
        return Trace(
            tuple(TraceEvent(seq=e["seq"], kind=e["kind"], data=e["data"], at=e["at"]) for e in trace)
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise SnapshotError(f"not a valid snapshot trace: {type(exc).__name__}: {exc}") from exc


def restore_args(
    snap: SessionSnapshot, tools: Sequence[Tool] | None, policy: Policy | None, fold: Fold | None = None
) -> dict[str, Any]:
    """The ``Session`` constructor arguments of a snapshot; ``tools`` re-attach handlers by name. A
    snapshot of a folding session needs ``fold`` (its ``summarize`` is code): :class:`InvalidOption`
    without it."""
    if tools is not None and (
        isinstance(tools, (str, bytes)) or not all(isinstance(t, Tool) for t in _iterable(tools, "tools"))
    ):
        raise InvalidOption(f"tools= is a list of rs.Tool (handlers re-attached by name), got {tools!r:.80}")
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


def _iterable(value: Any, name: str) -> Sequence[Any]:
    try:
        return list(value)
    except TypeError:
        raise InvalidOption(f"{name}= is a list, got {value!r:.80}") from None


#: an execution record in the snapshot: a list of its fields in this order (``index`` is its position,
#: ``usage`` a list in :class:`Usage` field order); trailing fields at their defaults are left out, and a
#: ``prefix_fingerprint`` or ``model`` equal to the previous record's is written as ``0``
_RECORD_FIELDS = tuple(f.name for f in attrs.fields(ExecutionRecord) if f.name != "index")
_RECORD_USAGE_FIELDS = tuple(f.name for f in attrs.fields(Usage))
_SAME_AS_PREVIOUS = ("prefix_fingerprint", "model")


def _without_defaults(values: list[Any], defaults: Sequence[Any]) -> list[Any]:
    n = len(values)
    while n and defaults[n - 1] is not _NO_DEFAULT and values[n - 1] == defaults[n - 1]:
        n -= 1
    return values[:n]


_NO_DEFAULT = object()
_RECORD_DEFAULTS = tuple(
    _NO_DEFAULT if f.default is attrs.NOTHING else f.default
    for f in attrs.fields(ExecutionRecord)
    if f.name != "index"
)
_RECORD_USAGE_DEFAULTS = tuple(
    _NO_DEFAULT if f.default is attrs.NOTHING else f.default for f in attrs.fields(Usage)
)


def _prompt_to_row(prompt: Sequence[int], previous: ExecutionRecord | None) -> list[Any]:
    """A record's prompt ids: ``[shared, [id, ...]]`` when it shares ``shared > 0`` ids with the previous
    record's prompt + completion (``prompt == (p + c)[:shared] + tail``: a bridged prompt writes only what
    it added), else the list of its ids."""
    ids = TokenIds.of(prompt)
    if previous is not None and previous.prompt_ids is not None and previous.completion_ids is not None:
        shared = ids.shared_with(previous.prompt_ids, previous.completion_ids)
        if shared:
            return [shared, ids.after(shared).tolist()]
    return ids.as_array().tolist()


def _prompt_from_row(index: int, value: list[Any], previous: ExecutionRecord | None) -> TokenIds:
    """The inverse of :func:`_prompt_to_row`: a view extending the previous record's prompt buffer (a
    restored session's records share storage as the original's did)."""
    if len(value) == 2 and isinstance(value[1], list):
        shared, tail = value
        p = previous.prompt_ids if previous is not None else None
        c = previous.completion_ids if previous is not None else None
        if type(shared) is not int or p is None or c is None or not 0 < shared <= len(p) + len(c):
            raise ValueError(f"execution record {index}: its prompt extends no earlier prompt")
        base = TokenIds.of(p)
        if shared <= len(base):
            return base.extended(tail, at=shared)
        return base.extended([*c[: shared - len(base)], *tail])
    return TokenIds(value)


def _record_to_row(r: ExecutionRecord, previous: ExecutionRecord | None) -> list[Any]:
    row: list[Any] = []
    for name in _RECORD_FIELDS:
        value = getattr(r, name)
        if name == "prompt_ids" and value is not None:
            value = _prompt_to_row(value, previous)
        elif name == "usage":
            value = _without_defaults(
                [getattr(value, u) for u in _RECORD_USAGE_FIELDS], _RECORD_USAGE_DEFAULTS
            )
        elif name in _SAME_AS_PREVIOUS and previous is not None and value == getattr(previous, name):
            value = 0
        elif isinstance(value, tuple):
            value = list(value)
        row.append(value)
    return _without_defaults(row, _RECORD_DEFAULTS)


def _record_from_row(index: int, row: Sequence[Any], previous: ExecutionRecord | None) -> ExecutionRecord:
    if not isinstance(row, list) or len(row) > len(_RECORD_FIELDS):
        raise ValueError(f"execution record {index} is not a record row")
    fields: dict[str, Any] = {}
    for name, value in zip(_RECORD_FIELDS, row, strict=False):
        if name == "usage":
            if not isinstance(value, list) or len(value) > len(_RECORD_USAGE_FIELDS):
                raise ValueError(f"execution record {index}: usage is not a usage row")
            value = Usage(**dict(zip(_RECORD_USAGE_FIELDS, value, strict=False)))
        elif name == "prompt_ids" and isinstance(value, list):
            value = _prompt_from_row(index, value, previous)
        elif name in _SAME_AS_PREVIOUS and value == 0 and not isinstance(value, bool):
            if previous is None:
                raise ValueError(f"execution record {index}: {name} refers to no earlier record")
            value = getattr(previous, name)
        elif isinstance(value, list):
            value = tuple(value)
        fields[name] = value
    record = ExecutionRecord(index=index, **fields)
    record.verify_ids()
    return record


def _records_to(records: Sequence[ExecutionRecord]) -> list[list[Any]]:
    rows, previous = [], None
    for r in records:
        rows.append(_record_to_row(r, previous))
        previous = r
    return rows


def _chain_to_dict(c: UnitChain) -> dict[str, Any]:
    return {
        "model": c.model,
        "seq": c.seq,
        "units": list(c.units),
        "older": [[seq, shared, list(tail)] for seq, shared, tail in c.older],
    }


def _chain_from_dict(d: Mapping[str, Any]) -> UnitChain:
    """A unit chain as the session keeps it: its digests packed (:class:`~reasonstate.state.units.Units`,
    equal to the strings the snapshot holds; a unit of another form keeps the chain's strings as they are)."""
    older = tuple((int(seq), int(shared), Units.of(tail) if tail else ()) for seq, shared, tail in d["older"])
    return UnitChain(model=d["model"], seq=int(d["seq"]), units=Units.of(d["units"]), older=older)


def _records_from(execution: Sequence[Any], units: Sequence[Mapping[str, Any]]) -> Records:
    """The records and their unit chains (``ValueError`` when a chain does not fit its records)."""
    records: list[ExecutionRecord] = []
    for i, row in enumerate(execution):
        records.append(_record_from_row(i, row, records[-1] if records else None))
    return Records.restored(records, [_chain_from_dict(c) for c in units])
