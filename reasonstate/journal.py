"""A session as an append-only log: the checkpoint and delta entries a store keeps (:mod:`reasonstate.store`).

A **checkpoint** body is a whole :class:`~reasonstate.SessionSnapshot` (its JSON, sealed with its content
digest). A **delta** body is what the commits since the previous entry changed, in proportion to that:

    rs-delta/4 sha256:<hex of the stored bytes after the newline>\\n<the JSON below, raw DEFLATE>
    {"state": turn state, "turns": k,
     "history": compact history of the turns from k on,
     "records": [record row, ...], "units": [[shared, [unit, ...]], ...],
     "trace": [[seq, kind, at, data], ...], "held": [[seq, kind, at, data], ...]}

``turns``: the previous history's first ``k`` turns are kept as they were, the rest replaced by the delta's
(``"steps": m``, when present: the delta's first turn keeps turn ``k``'s first ``m`` steps and holds only
the steps after them, so a long tool chain writes each step once)
(an open turn gains steps, a closed one its view; a fold or any change before ``k`` is a checkpoint
instead); ``history`` is :func:`~reasonstate.snapshot.history_to_snapshot`'s form of those turns, with
its own payload digest, each payload as its exact text (``embed=False``: no parse and re-encode per
payload); ``records`` are the new execution records in the snapshot's row form; ``units``
gives each new record's request units as ``(shared, tail)`` against the newest earlier request of its
model (replayed through ``Records.appended``, the very call the session makes, so the unit window comes
back equal); ``trace`` the new events, times kept; ``held`` (when present): the events a deferred one
holds back (a keep-all ``policy.decision`` whose figures the next request computes for free, and the
events after it), its data not completed: the next entry writes them completed (from the same ``seq``,
so they replace these), and a session loaded from this entry holds them back again, so whoever continues
the session completes them (:meth:`reasonstate.Session.load`).

The JSON is compressed (raw DEFLATE) with the session's previous delta JSON as the preset dictionary (none
after a checkpoint): consecutive deltas repeat their keys, tables and shapes, so what a delta stores is
mostly what is new in it (a short turn's delta is about half the response bytes it records). A reader
replays the deltas in order anyway, so it always holds the dictionary; the digest is of the stored
(compressed) bytes, checked before decompressing (a tenth of the bytes to hash). ``rs-delta/1`` bodies
(the JSON uncompressed), ``rs-delta/2`` ones (no ``held``) and ``rs-delta/3`` ones (the digest of the
JSON, checked after decompressing), written before, still read.

Invariants: replaying a session's entries gives layers equal to those it wrote from (so the next request's
bytes are the same); a body edited in the store is refused (:class:`~reasonstate.errors.SnapshotError` for
a delta's digest or a snapshot's, :class:`~reasonstate.errors.ContinuationMismatch` for a payload); a
delta never repeats what an earlier entry holds, so its size and the work to make it follow what the
commits added, not the session's length.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import zlib
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
from pydantic_core import to_json, to_jsonable_python

from reasonstate.errors import ReasonStateError, SnapshotError
from reasonstate.snapshot import (
    SessionSnapshot,
    _chain_to_dict,
    _record_from_row,
    _record_to_row,
    _records_to,
    check_meaning,
    history_from_snapshot,
    history_to_snapshot,
    restored_layers,
)
from reasonstate.state import ExecutionRecord, Folded, History, Trace, TraceEvent, Turn, thaw
from reasonstate.state.execution import common_prefix_len
from reasonstate.state.units import UnitBuffer, UnitSeq

if TYPE_CHECKING:
    from reasonstate.engine import Layers

__all__ = [
    "CHECKPOINT",
    "DELTA",
    "AsyncLog",
    "Entry",
    "Log",
    "Mark",
    "Replayed",
    "checkpoint_body",
    "delta_body",
    "replay",
    "snapshot_of",
]

CHECKPOINT = "checkpoint"
DELTA = "delta"
_KINDS = (CHECKPOINT, DELTA)
_DELTA_TAG = b"rs-delta/4 sha256:"
#: the tag of a compressed delta whose digest is of its JSON, not of its stored bytes (written before;
#: still read)
_TEXT_DIGEST_TAG = b"rs-delta/3 sha256:"
#: the tag of a compressed delta without ``held`` (written before; still read)
_HELDLESS_TAG = b"rs-delta/2 sha256:"
#: the tag of an uncompressed delta (written before deltas were compressed; still read)
_PLAIN_TAG = b"rs-delta/1 sha256:"
#: the DEFLATE level and memory level of a delta: a delta is a few KB against a preset dictionary of a few
#: KB, so zlib's defaults (6 and 8) mostly pay for setting up tables sized for far more (on real deltas,
#: callgrind: 2 and 4 cost 147K instructions a delta instead of 265K, for 281 bytes instead of 255)
_LEVEL = 2
_MEMORY = 4
#: how many of the newest turns a mark keeps (a commit changes the open turn, or closes it and opens one)
_TAIL = 2


@attrs.frozen(slots=True)
class Entry:
    """One row of a session's log: ``seq`` its place (1, 2, ...), ``kind`` ``"checkpoint"`` or
    ``"delta"``, ``body`` the bytes as the session wrote them (before any sealing by the store)."""

    seq: int
    kind: str
    body: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")

    def __attrs_post_init__(self) -> None:
        if type(self.seq) is not int or self.seq < 1:
            raise ValueError(f"an entry's seq is a positive int, got {self.seq!r}")
        if self.kind not in _KINDS:
            raise ValueError(f"an entry's kind is one of {_KINDS}, got {self.kind!r}")
        if not isinstance(self.body, bytes):
            raise TypeError(f"an entry's body is bytes, got {type(self.body).__name__}")


class Log(Protocol):
    """What a session needs of a synchronous store (:class:`reasonstate.store.Store` is one)."""

    def append(self, session_id: str, expected: int, entries: Sequence[Entry]) -> int: ...

    def read(self, session_id: str) -> list[Entry]: ...

    def version(self, session_id: str) -> int: ...


class AsyncLog(Protocol):
    """What an async session needs of an asyncio store (:class:`reasonstate.store.AsyncStore` is one)."""

    def append(self, session_id: str, expected: int, entries: Sequence[Entry]) -> Awaitable[int]: ...

    def read(self, session_id: str) -> Awaitable[list[Entry]]: ...

    def version(self, session_id: str) -> Awaitable[int]: ...


@attrs.frozen(slots=True)
class Mark:
    """How far a session's log goes: its ``version``, what the delta after it needs of the layers it holds,
    plus ``header``: the objects whose change needs a checkpoint (prefix, model, adapter, policy, fold,
    options, stream...), compared by identity; ``text``: the JSON of the newest entry when it is a delta
    (the next delta's preset dictionary), else empty.

    Of the layers it keeps no whole tuple, only what a delta reads: ``turns`` (how many), ``tail`` (the
    last :data:`_TAIL` turns: the open one a tool chain extends), ``fold``; the number of trace
    ``events``; of the records ``records`` (how many), ``offset``, ``last`` (the newest, by identity:
    records only ever append) and ``chains``: each model's newest request, ``(model, seq)`` (its units
    stay in the records' window). So replacing a mark frees nothing in proportion to the session: the
    history, records and unit tuples it was made from go when the session moves on, as they would
    without a store."""

    version: int
    turns: int
    tail: tuple[Turn, ...]
    fold: Folded | None
    events: int
    records: int
    offset: int
    last: ExecutionRecord | None
    chains: tuple[tuple[str, int], ...]
    header: tuple[Any, ...]
    state: str
    text: bytes = attrs.field(default=b"", repr=False)

    @classmethod
    def of(
        cls, version: int, layers: Layers, events: int, header: tuple[Any, ...], state: str, text: bytes = b""
    ) -> Mark:
        """The mark of a log at ``version`` holding ``layers`` (their first ``events`` trace events)."""
        turns, records = layers.history.turns, layers.records
        return cls(
            version,
            len(turns),
            turns[-_TAIL:],
            layers.history.fold,
            events,
            len(records),
            records.offset,
            records[-1] if records else None,
            tuple((c.model, c.seq) for c in records.chains),
            header,
            state,
            text,
        )

    def holds(self, layers: Layers, changed: int | None, state: str) -> bool:
        """Whether the log holds ``layers`` and ``state`` already (``changed``: as for
        :func:`delta_body`)."""
        records = layers.records
        return (
            changed is None
            and self.events == layers.trace.ready()
            and self.records == len(records)
            and self.offset == records.offset
            and (not records or _same(records[-1], self.last))
            and self.state == state
        )

    def newest(self, model: str) -> int | None:
        """The ``seq`` of ``model``'s newest request the log holds (None: none)."""
        return next((seq for m, seq in self.chains if m == model), None)


def _same(record: ExecutionRecord, last: ExecutionRecord | None) -> bool:
    """Whether ``record`` is the record a mark noted: the same object, or (an older record is kept packed
    and built again when read: :class:`~reasonstate.state.execution.Records`) an equal one. One record's
    fields compared, never the whole list."""
    return record is last or record == last


# -- writing -----------------------------------------------------------------------------------------------
def checkpoint_body(snapshot: SessionSnapshot | str | bytes) -> bytes:
    """A checkpoint's bytes: the snapshot's JSON (checked first: an edited snapshot is refused)."""
    snap = SessionSnapshot.load(snapshot)
    return snap.model_dump_json().encode()


def delta_body(mark: Mark, layers: Layers, state: str, changed: int | None) -> tuple[bytes, bytes] | None:
    """The delta from ``mark`` to ``layers`` as ``(body, its JSON)`` (None: it cannot be one; write a
    checkpoint). ``changed``: the first turn that may differ from the history ``mark`` was made from (None:
    it is that history; the session notes it as its history changes, see ``Session._set_layers``), so
    ``layers.history.turns[:changed]`` are that history's. Work in proportion to what changed: nothing
    here walks the history, the records or the trace."""
    new = layers.history
    if mark.fold != new.fold or len(new.turns) < mark.turns:
        return None
    records = layers.records
    n_old, n_new = mark.records, len(records)
    if (
        n_new < n_old
        or records.offset != mark.offset
        or n_new - n_old >= 64
        or (n_old and not _same(records[n_old - 1], mark.last))  # records only ever append
    ):
        return None
    trace = layers.trace
    if trace.ready() < mark.events:
        return None
    keep = mark.turns if changed is None else min(changed, mark.turns)
    added = new.turns[keep:]
    steps = 0
    back = mark.turns - keep  # turn keep is the mark's tail[-back]
    if 0 < back <= len(mark.tail) and added:
        # the turn a commit changed most often: the open one, which gained steps (and maybe its view)
        was, grown = mark.tail[-back], added[0]
        if was.index == grown.index and was.user == grown.user:
            steps = common_prefix_len(was.steps, grown.steps)
            if steps:
                added = (grown.with_steps(grown.steps[steps:]), *added[1:])
    tail = History(added)
    rows: list[list[Any]] = []
    units: list[list[Any]] = []
    newest: dict[str, tuple[int, UnitSeq | None]] = {}
    previous = mark.last
    offset = records.offset
    for position in range(n_old, n_new):
        record = records[position]
        rows.append(_record_to_row(record, previous))
        previous = record
        mine = records.units_of(position)
        if mine is None:
            return None
        before = newest.get(record.model)
        if before is None:
            held = mark.newest(record.model)
            before = (-1, ()) if held is None else (held, None)  # its units: from the window, if needed
        seq = offset + position
        now = records.chain(record.model)
        if now is not None and now.seq == seq and now.older and now.older[0][0] == before[0]:
            shared = now.older[0][1]  # the chain holds it: common_prefix_len(mine, before's units)
        else:
            theirs = before[1] if before[1] is not None else records.units_of(before[0] - offset)
            if theirs is None:
                return None
            shared = common_prefix_len(mine, theirs)
        units.append([shared, list(mine[shared:])])
        newest[record.model] = (seq, mine)
    # a deferred event (a keep-all policy.decision whose figures the next request completes) and the ones
    # after it go with the next entry: reading it now would pay for an encode the next request saves
    # (an event's data is frozen JSON, dict and list subclasses, which pydantic-core encodes through a slow
    # path, ~4x plain ones: thawed first, same bytes; anything not JSON goes through the snapshot's
    # to_jsonable_python, :func:`_dumps`)
    events = [[e.seq, e.kind, e.at, thaw(e.data)] for e in trace.complete_events(mark.events)]
    data: dict[str, Any] = {
        "state": state,
        "turns": keep,
        "history": history_to_snapshot(tail, embed=False),
        "records": rows,
        "units": units,
        "trace": events,
    }
    if steps:
        data["steps"] = steps
    holding = trace.held_events()
    if holding:
        data["held"] = [[e.seq, e.kind, e.at, thaw(e.data)] for e in holding]
    text = _dumps(data)
    packed = _deflated(text, mark.text)
    return _DELTA_TAG + hashlib.sha256(packed).hexdigest().encode() + b"\n" + packed, text


def _dumps(data: Any) -> bytes:
    """Compact JSON, non-ASCII kept, keys in order: pydantic-core's encoder (a delta's JSON costs a tenth
    of the standard library's; ``json.loads`` reads it back to equal values: floats are written shortest,
    as ``repr`` writes them), anything not JSON through the snapshot's ``to_jsonable_python``."""
    return to_json(data, fallback=to_jsonable_python)


def _deflated(text: bytes, previous: bytes) -> bytes:
    """``text`` as raw DEFLATE with ``previous`` as its preset dictionary, the window no larger than the
    two need (a smaller window is cheaper to set up; a reader's largest one reads any)."""
    wbits = -min(15, max(9, (len(text) + len(previous)).bit_length()))
    if previous:
        packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, wbits, _MEMORY, zdict=previous)
    else:
        packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, wbits, _MEMORY)
    return packer.compress(text) + packer.flush()


# -- reading -----------------------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class Replayed:
    """A log read back: the checkpoint's snapshot (its header fields), the layers after every delta, the
    turn state, the version, and the newest delta's JSON (empty when the newest entry is the checkpoint)."""

    snapshot: SessionSnapshot
    layers: Layers
    state: str
    version: int
    text: bytes = attrs.field(default=b"", repr=False)
    #: the newest entry's ``held`` events (module docstring), the deferred one first, not completed
    held: tuple[TraceEvent, ...] = ()


def _delta(entry: Entry, previous: bytes) -> tuple[dict[str, Any], bytes]:
    """A delta's data and JSON; ``previous``: the JSON of the delta before it (empty after a checkpoint)."""
    body = entry.body
    cut = body.find(b"\n")
    if cut < 0 or not body.startswith((_DELTA_TAG, _TEXT_DIGEST_TAG, _HELDLESS_TAG, _PLAIN_TAG)):
        raise SnapshotError(f"entry {entry.seq} is not a reasonstate delta")
    digest, text = body[len(_DELTA_TAG) : cut], body[cut + 1 :]  # (the tags are of one length)
    of_stored = body.startswith(_DELTA_TAG)  # the digest is of the stored bytes: checked before anything
    if of_stored and hashlib.sha256(text).hexdigest().encode() != digest:
        raise SnapshotError(
            f"entry {entry.seq} was edited after it was written: its digest does not match (refused, "
            "nothing sent)"
        )
    if not body.startswith(_PLAIN_TAG):
        unpacker = zlib.decompressobj(-15, zdict=previous) if previous else zlib.decompressobj(-15)
        try:
            text = unpacker.decompress(text) + unpacker.flush()
        except zlib.error:
            raise SnapshotError(
                f"entry {entry.seq} was edited after it was written: it does not decompress (refused, "
                "nothing sent)"
            ) from None
        if not unpacker.eof or unpacker.unused_data:
            raise SnapshotError(f"entry {entry.seq} was edited after it was written: it is cut or extended")
    if not of_stored and hashlib.sha256(text).hexdigest().encode() != digest:
        raise SnapshotError(
            f"entry {entry.seq} was edited after it was written: its digest does not match (refused, "
            "nothing sent)"
        )
    data = json.loads(text)
    if not isinstance(data, dict):
        raise SnapshotError(f"entry {entry.seq} is not a delta object")
    return data, text


def replay(entries: Sequence[Entry]) -> Replayed:
    """The session a log holds: its newest checkpoint, then every delta after it, each verified (an
    edited body: :class:`~reasonstate.errors.SnapshotError` or
    :class:`~reasonstate.errors.ContinuationMismatch`; nothing partial is returned)."""
    from reasonstate.engine import Layers

    if not entries or entries[0].kind != CHECKPOINT:
        raise SnapshotError("a stored session starts with a checkpoint entry")
    for a, b in itertools.pairwise(entries):
        if b.seq != a.seq + 1:
            raise SnapshotError(f"the stored session's entries skip from {a.seq} to {b.seq}")
    snap = SessionSnapshot.load(entries[0].body)
    state = snap.state
    if len(entries) == 1:
        return Replayed(snap, _layers_of(snap), state, entries[0].seq)
    base = restored_layers(snap)  # verifies; its trace ends with a session.restored event we do not keep
    records = base.records
    events = list(base.trace.events[: len(base.trace) - 1])
    turns = base.history.turns
    fold = base.history.fold
    text = b""
    held: list[Any] = []
    try:
        for entry in entries[1:]:
            if entry.kind == CHECKPOINT:
                raise SnapshotError(f"entry {entry.seq}: a checkpoint after the first entry read")
            data, text = _delta(entry, text)
            keep = data["turns"]
            if type(keep) is not int or not 0 <= keep <= len(turns):
                raise SnapshotError(f"entry {entry.seq} keeps {keep!r} turns of {len(turns)}")
            added = history_from_snapshot(data["history"]).turns
            steps = data.get("steps", 0)
            if steps:
                was = turns[keep] if keep < len(turns) else None
                if was is None or not added or type(steps) is not int or not 0 < steps <= len(was.steps):
                    raise SnapshotError(f"entry {entry.seq} extends a turn that is not there")
                added = (added[0].with_steps((*was.steps[:steps], *added[0].steps)), *added[1:])
            turns = (*turns[:keep], *added)
            for row, (shared, tail) in zip(data["records"], data["units"], strict=True):
                record = _record_from_row(len(records), row, records[-1] if records else None)
                chain = records.chain(record.model)
                before = chain.units if chain is not None else ()
                if type(shared) is not int or not 0 <= shared <= len(before):
                    raise SnapshotError(f"entry {entry.seq}: a record's units do not fit")
                units = UnitBuffer(before[:shared])  # packed: joined at C speed (issue 21)
                units.extend(tail)
                records = records.appended(record, units.done())
            for seq, kind, at, event_data in data["trace"]:
                if seq != len(events):
                    raise SnapshotError(f"entry {entry.seq}: trace event {seq} out of order")
                events.append(TraceEvent(seq=seq, kind=kind, data=event_data, at=at))
            held = data.get("held", [])
            state = data["state"]
        kept = tuple(TraceEvent(seq=seq, kind=kind, data=d, at=at) for seq, kind, at, d in held)
        if kept and [e.seq for e in kept] != list(range(len(events), len(events) + len(kept))):
            raise SnapshotError(f"entry {entries[-1].seq}: its held trace events are out of order")
    except ReasonStateError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise SnapshotError(f"a stored delta is not valid: {type(exc).__name__}: {exc}") from exc
    history = History(turns, fold)
    check_meaning(history, state, snap.vendor, snap.api)
    layers = Layers.of(history, Trace(events), records)
    return Replayed(snap, layers, state, entries[-1].seq, text, kept)


def _layers_of(snap: SessionSnapshot) -> Layers:
    from reasonstate.engine import Layers

    base = restored_layers(snap)
    return Layers.of(base.history, Trace(base.trace.events[: len(base.trace) - 1]), base.records)


def snapshot_of(entries: Sequence[Entry]) -> SessionSnapshot:
    """The stored session as one :class:`~reasonstate.SessionSnapshot` (today's format), sealed."""
    r = replay(entries)
    if len(entries) == 1:
        return r.snapshot
    layers = r.layers
    return r.snapshot.model_copy(
        update={
            "state": r.state,
            "history": history_to_snapshot(layers.history),
            "execution": _records_to(layers.records),
            "units": [_chain_to_dict(c) for c in layers.records.chains],
            "trace": layers.trace.to_compact(to_jsonable_python),
        }
    ).sealed()
