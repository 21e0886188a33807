"""The trace layer: every event of a session, append-only.

Events are generic frozen values (``kind`` + JSON-able ``data``) so exporters (JSONL, OpenTelemetry) read
them without knowing each kind. Redaction happens at export, never by mutating an event: the trace may hold
raw reasoning text, and opaque payloads appear only as digests.

Storage (the cost of a long session grows by a small constant per event):

  * A :class:`Trace` value is a shared append-only store plus its length ``n``: it sees the store's first
    ``n`` events only, so every earlier value stays valid and unchanged. :meth:`Trace.extended` appends
    in place when the value is the store's newest (work in proportion to the events added, never a copy
    of the trace); a value extended from an older length (a retry, a discarded attempt: a fork) first
    copies its own ``n`` events into a new store, so two values extended from one base never see each
    other's events.
  * Each event is kept as compact JSON bytes (dict keys as the id of a shape, in the process-wide table of
    key tuples :data:`_SHAPES`: no store keeps one of its own; a ``sha256:<hex>`` digest as its 32 bytes in
    base64; a string equal to the one at the same place of the previous event of that shape as a reference
    to one shared copy), one line each in chunks of :data:`_CHUNK` events compressed once full (a chunk of
    a turn's events compresses to ~40%: the same shapes and values turn after turn), its kind as an
    interned id (one byte), its wall time once per batch; no per-kind index is kept (a kind's positions
    are a C-speed scan of the kind bytes).
    :class:`TraceEvent` values are built on access (``events``, iteration,
    :meth:`Trace.of_kind`); the store keeps only its newest :data:`_TAIL_MAX` events as built (their
    kinds at once), each older one encoded when a newer one pushes it out: a short-lived session (one
    built per HTTP request, one ``send``) never encodes events nobody reads back, a reader of what was
    just appended (a store's delta entry) decodes few, and a session of any length holds no more than
    those few events built (the rest is bytes). Decoding
    gives back exactly the frozen data (``decoded == freeze(data)``, same key order, same types); an event
    the codec cannot hold (data that is not plain JSON, a ``seq`` that is not its index) is kept as its
    :class:`TraceEvent`.
  * :meth:`Trace.to_compact` / :meth:`Trace.from_compact`: the snapshot's form of the same bytes
    (zlib-compressed, base64), read back to an equal trace; anything that does not decode is a
    ``ValueError``. Its header lists the shapes its events use, each at its id (the others: ``[]``); a
    trace written by another process (other ids for the same keys) is read back with this process's ids,
    its events' bytes rewritten once when the ids differ.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import json
import threading
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, pairwise
from typing import Any, overload

import attrs

from reasonstate.state.frozen import FrozenDict, FrozenList, compact_encoder, freeze

__all__ = ["EventKind", "Trace", "TraceEvent", "TraceEvents"]


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
    #: the vendor compacted the context server-side and sent an opaque item that stands for what came
    #: before it (OpenAI Responses compaction, docs/protocols.md §1.9): a declared cache break
    CONTEXT_COMPACTED = "context.compacted"
    #: the vendor cleared thinking or tool results server-side before the model read the prompt
    #: (Anthropic context editing, docs/protocols.md §4.7): the prompt it cached is the edited one
    CONTEXT_CLEARED = "context.cleared"
    #: a stream sent data that is no JSON event after its final event: skipped, the answer committed
    #: (``events``, ``bytes``: how much; never the data itself)
    STREAM_TRAILING = "stream.trailing_data"


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


# -- the codec ----------------------------------------------------------------------------------------------

#: kind names ↔ ids, process-wide (kinds are a few dozen constants); the snapshot carries the names it uses
_KIND_NAMES: list[str] = []
_KIND_IDS: dict[str, int] = {}
_KIND_LOCK = threading.Lock()

_DIGEST_PREFIX = "sha256:"
_HEX = frozenset("0123456789abcdef")
#: a string at least this long, equal to the previous one at its place, is a reference to one shared copy
_SHARED_MIN = 6
#: dict key sets learned as shapes, process-wide (beyond: a dict is kept with its keys); digit keys are never
#: learned
_MAX_SHAPES = 4096
#: the dict shapes (key tuples) learned, process-wide, and their ids: the event data of a session is a few
#: dozen shapes, the same in every session, so no store keeps a table of its own (~2.6 KB each); a store
#: notes which ids its events use (:attr:`_Store.used`) and its snapshot carries those
#: the shapes of a session's common events (engine.py: a turn opened and closed, its requests and responses
#: with their usage, reasoning, the closing decision and its views, tool calls, runs and results), first and
#: in this order: every process gives them the same ids, so a snapshot written by one reads back in another
#: without rewriting an event (a shape missing here is learned like any other, only later)
_SEEDED: tuple[tuple[str, ...], ...] = (
    ("turn", "user"),
    ("index", "request_digest", "bytes", "prefix_fingerprint", "divergence", "predicted_cache_read"),
    ("index", "stop_reason", "usage", "duration_s", "response_id", "response_model"),
    ("uncached_input", "cache_read", "cache_write", "output", "reasoning"),
    ("turn", "step", "text", "payload_digests"),
    ("turn", "policy", "views", "summary", "divergence_unit", "predicted_cache_read", "reprefill_tokens"),
    ("keep_reasoning", "summary"),
    ("turn", "steps"),
    ("turn", "calls"),
    ("id", "name", "arguments"),
    ("id", "name", "started_at", "duration_s", "is_error", "outcome"),
    ("turn", "call_ids"),
)
_SHAPES: list[tuple[str, ...]] = list(_SEEDED)
_SHAPE_IDS: dict[tuple[str, ...], int] = {keys: i for i, keys in enumerate(_SEEDED)}
#: how many of its newest events a store keeps as built, not encoded yet: the four a ``send`` commits (a
#: fresh session's first send encodes none; a store's delta entry finds them built and decodes the two
#: before them, the previous turn's decision and close). An event built costs ~0.5 KB where its bytes
#: cost ~30 B: this is most of a young session's trace
_TAIL_MAX = 4
#: events per compressed chunk of the store (~8 turns: a chunk compresses to ~40% of its bytes)
_CHUNK = 48
#: one id per store (the key of the newest chunk read, :meth:`_Store._lines`)
_TOKENS = itertools.count()
#: the newest chunk read, process-wide: (store token, chunk index, its byte length, its event bytes); the
#: open chunk only grows, so its length tells whether its lines read before are all of them
_READ: tuple[int, int, int, list[bytes]] | None = None
_LIST = -1  # the head of an encoded list; a dict is ``[shape id, *values]``
_dumps = compact_encoder()
_loads = json.loads


class _Raw(Exception):
    """Data the codec does not hold (not plain JSON): the event is kept as its :class:`TraceEvent`."""


def _kind_id(kind: str) -> int:
    found = _KIND_IDS.get(kind)
    if found is not None:
        return found
    if type(kind) is not str:
        raise TypeError(f"an event kind is a str, got {type(kind).__name__}")
    with _KIND_LOCK:
        return _KIND_IDS.setdefault(kind, _intern_kind(kind))


def _intern_kind(kind: str) -> int:
    _KIND_NAMES.append(kind)
    return len(_KIND_NAMES) - 1


def _deflate(data: bytes | bytearray) -> bytes:
    """``data`` raw-deflate compressed (no zlib header: a chunk is read back by this module only)."""
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    return z.compress(data) + z.flush()


def _learnable(keys: tuple[Any, ...]) -> bool:
    return all(type(k) is str and not k[:1].isdigit() for k in keys)


def _shape_id(keys: tuple[Any, ...]) -> int | None:
    """The process-wide id of the dict shape ``keys``, learned now if need be (None: not learnable, or
    the table is full: the dict is kept with its keys). An id, once given, names the same keys forever."""
    found = _SHAPE_IDS.get(keys)
    if found is not None:
        return found
    if len(_SHAPES) >= _MAX_SHAPES or not _learnable(keys):
        return None
    with _KIND_LOCK:
        found = _SHAPE_IDS.get(keys)
        if found is None and len(_SHAPES) < _MAX_SHAPES:
            _SHAPES.append(keys)  # before its id is published: a reader finds the keys of any id it sees
            found = _SHAPE_IDS[keys] = len(_SHAPES) - 1
        return found


def _remapped(x: Any, ids: Mapping[int, int | None], table: Sequence[tuple[str, ...]]) -> Any:
    """An event's bytes (parsed, valid against ``table``) with each dict shape id ``i`` replaced by
    ``ids[i]``, or the dict kept with its keys where that is None (a restore into this process)."""
    if type(x) is list:
        head, values = x[0], [_remapped(v, ids, table) if type(v) in (list, dict) else v for v in x[1:]]
        if head == _LIST:
            return [_LIST, *values]
        new = ids[head]
        return dict(zip(table[head], values, strict=True)) if new is None else [new, *values]
    if type(x) is dict:
        return {k: _remapped(v, ids, table) for k, v in x.items()}
    return x


class _Store:
    """The append-only events behind every :class:`Trace` value extended from one another.

    Invariants: events ``0..len-1`` never change once appended (only appended to, under ``lock``);
    ``kinds[i]`` is event ``i``'s kind id from its append on (one byte each while the ids fit); the events
    from ``pending[0]`` on are ``pending[1]`` as built (not encoded yet, at most :data:`_TAIL_MAX`), every
    earlier event ``i`` has its bytes (empty for an event kept whole in ``raw``: None while none is; never a
    line break: compact JSON) as line ``i % _CHUNK`` of chunk ``i // _CHUNK``, and its time ``run_at[k]``
    for the last ``run_start[k] <= i``. A chunk is :data:`_CHUNK` events, each ended by ``\n``:
    ``chunks[k]`` raw-deflate compressed once full, ``open`` the one being filled, as is; the string table
    and the process-wide
    shape table only grow, so an event decodes the same forever; ``used`` has the bit of each shape id
    its encoded events hold. ``pending`` is replaced, never emptied in place, so a reader that
    took it before an encoding still finds its event there.
    """

    __slots__ = (
        "chunks",
        "kinds",
        "last",
        "lock",
        "open",
        "pending",
        "raw",
        "run_at",
        "run_start",
        "string_ids",
        "strings",
        "token",
        "used",
    )

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.open = bytearray()
        self.kinds = array("B")
        self.token = next(_TOKENS)
        self.run_start = array("I")
        self.run_at = array("d")
        self.raw: dict[int, TraceEvent] | None = None
        #: the process-wide shape ids its events use, as bits (``1 << id``): what its snapshot carries
        self.used = 0
        self.strings: list[str] = []
        self.string_ids: dict[str, int] = {}
        #: per place (``shape << 16 | position``) the last string seen there (an encoding hint only: two
        #: places sharing a key only miss a reference, an event decodes the same)
        self.last: dict[int, str] = {}
        self.lock = threading.Lock()
        #: (position of the first event not encoded yet, those events as built)
        self.pending: tuple[int, list[TraceEvent]] = (0, [])

    def __len__(self) -> int:
        return len(self.kinds)

    def prefix(self, n: int) -> _Store:
        """A new store holding this one's first ``n`` events (a fork; under ``lock``)."""
        self.encode_pending()
        new = _Store()
        full, part = divmod(n, _CHUNK)
        new.chunks = self.chunks[:full]
        if part:
            new.open = bytearray(b"".join(line + b"\n" for line in self._lines(full)[:part]))
        new.kinds = self.kinds[:n]
        runs = bisect.bisect_left(self.run_start, n)
        new.run_start, new.run_at = self.run_start[:runs], self.run_at[:runs]
        if self.raw:
            new.raw = {i: e for i, e in self.raw.items() if i < n} or None
        new.used = self.used
        new.strings, new.string_ids = list(self.strings), dict(self.string_ids)
        new.last = dict(self.last)
        new.pending = (n, [])
        return new

    # -- appending (under lock) ----------------------------------------------------------------------------
    def append(self, events: Sequence[TraceEvent]) -> None:
        """Append ``events`` (from position ``len`` on): their kinds now, built; the oldest events built
        beyond the newest :data:`_TAIL_MAX` encoded."""
        kinds = self.kinds
        for event in events:
            kid = _kind_id(event.kind)
            if kid > 0xFF and kinds.typecode != "I":
                kinds = self.kinds = array("I", kinds)
            kinds.append(kid)
        pending = self.pending[1]
        pending += events
        if len(pending) > _TAIL_MAX:
            self.encode_pending(len(pending) - _TAIL_MAX)

    def encode_pending(self, count: int | None = None) -> None:
        """Encode the oldest ``count`` events built (all by default), under ``lock`` or before the store is
        shared. ``pending`` is replaced after, so a reader finds each event in it or in its bytes."""
        start, pending = self.pending
        if not pending:
            return
        count = len(pending) if count is None else count
        for i, event in enumerate(pending[:count], start):
            self._encode(i, event)
        self.pending = (start + count, pending[count:])

    def _encode(self, i: int, event: TraceEvent) -> None:
        """Event ``i``'s bytes, or the event kept whole when the codec cannot hold it."""
        at = event.at
        try:
            if event.seq != i or type(at) is not float:
                raise _Raw
            encoded = _dumps(self._enc(event.data, None)).encode("utf-8", "surrogatepass")
        except (_Raw, ValueError, TypeError, RecursionError):
            if self.raw is None:
                self.raw = {}
            self.raw[i] = event
            encoded = b""
        self.open += encoded
        self.open += b"\n"
        if (i + 1) % _CHUNK == 0:  # a full chunk: compressed once, for good
            self.chunks.append(_deflate(self.open))
            self.open = bytearray()
        if not encoded and self.raw and i in self.raw:
            return  # its time is its own
        if not self.run_at or self.run_at[-1] != at:
            self.run_start.append(i)
            self.run_at.append(at)

    def _enc(self, v: Any, slot: int | None) -> Any:
        t = type(v)
        if t is str:
            if slot is not None and len(v) >= _SHARED_MIN:
                last = self.last.get(slot)
                if last == v:
                    sid = self.string_ids.get(v)
                    if sid is None:
                        sid = self.string_ids[v] = len(self.strings)
                        self.strings.append(v)
                    return f"~#{sid}"
                self.last[slot] = v
            if len(v) == 71 and v.startswith(_DIGEST_PREFIX) and _HEX.issuperset(v[7:]):
                return "~" + binascii.b2a_base64(bytes.fromhex(v[7:]), newline=False).decode()[:-1]
            return "~" + v if v[:1] == "~" else v
        if t is int or t is float or t is bool or v is None:
            return v
        if t is FrozenDict or t is dict or (t is not FrozenList and isinstance(v, Mapping)):
            keys = tuple(v)
            shape = _SHAPE_IDS.get(keys)
            if shape is None:
                shape = _shape_id(keys)
                if shape is None:
                    if not all(type(k) is str for k in keys):
                        raise _Raw
                    return {k: self._enc(x, None) for k, x in v.items()}
            self.used |= 1 << shape
            out: list[Any] = [shape]
            append = out.append
            for i, x in enumerate(v.values()):
                tx = type(x)
                # numbers, None and short strings that are no reference (nor look like one) stay as they
                # are: the common values, without a call each
                if (tx is int or x is None or tx is bool or tx is float) or (
                    tx is str and len(x) < _SHARED_MIN and x[:1] != "~"
                ):
                    append(x)
                else:
                    append(self._enc(x, shape << 16 | i))
            return out
        if t is list or t is tuple or t is FrozenList:
            return [_LIST, *[self._enc(x, None) for x in v]]
        raise _Raw

    # -- reading --------------------------------------------------------------------------------------------
    def event(self, i: int) -> TraceEvent:
        """Event ``i`` (``0 <= i < len``), built from its bytes (or as built, not encoded yet)."""
        start, pending = self.pending
        if i >= start:
            return pending[i - start]
        raw = self.raw
        if raw:
            kept = raw.get(i)
            if kept is not None:
                return kept
        data = self._dec(_loads(self.line(i).decode("utf-8", "surrogatepass")))
        at = self.run_at[bisect.bisect_right(self.run_start, i) - 1]
        return TraceEvent(i, _KIND_NAMES[self.kinds[i]], data, at)

    def check(self, i: int) -> None:
        """Raise ``ValueError`` (or the error :meth:`event` would raise) unless event ``i``'s bytes decode:
        the checks of :meth:`event` without building the event (a restore reads every event once)."""
        if self.raw and i in self.raw:
            return
        self._valid(_loads(self.line(i).decode("utf-8", "surrogatepass")), _SHAPES, {})

    def line(self, i: int) -> bytes:
        """Event ``i``'s bytes (``i`` encoded: before ``pending[0]``)."""
        return self._lines(i // _CHUNK)[i % _CHUNK]

    def _lines(self, k: int) -> list[bytes]:
        """The event bytes of chunk ``k`` (the open one when ``k == len(chunks)``). The newest chunk read
        (the open one until it grows) is kept once per process, never per store: a read in order
        decompresses (or splits) each chunk once."""
        global _READ
        chunks = self.chunks
        size = len(self.open) if k >= len(chunks) else -1
        read = _READ
        if read is not None and read[0] == self.token and read[1] == k and read[2] == size:
            return read[3]
        if size >= 0:
            lines = bytes(self.open).split(b"\n")[:-1]
        else:
            lines = zlib.decompress(chunks[k], wbits=-15).split(b"\n")[:-1]
        _READ = (self.token, k, size, lines)
        return lines

    def lines(self, n: int) -> list[bytes]:
        """The bytes of events ``0..n-1`` (all encoded), in order."""
        out: list[bytes] = []
        for k in range(min(-(-n // _CHUNK), len(self.chunks))):
            out += zlib.decompress(self.chunks[k], wbits=-15).split(b"\n")[:-1]
        if len(out) < n:
            out += self._lines(len(self.chunks))
        return out[:n]

    def positions(self, kid: int, end: int) -> list[int]:
        """The positions before ``end`` of the events of kind id ``kid``, in order (no event built)."""
        kinds = self.kinds
        if kinds.typecode != "B":
            return [i for i, k in enumerate(kinds[:end]) if k == kid]
        flat, mark, out = kinds.tobytes(), bytes((kid,)), []
        i = flat.find(mark, 0, end)
        while i >= 0:
            out.append(i)
            i = flat.find(mark, i + 1, end)
        return out

    def last_position(self, kid: int, end: int) -> int:
        """The position of the newest event of kind id ``kid`` before ``end`` (-1: none)."""
        kinds = self.kinds
        if kinds.typecode != "B":
            return next((i for i in range(min(end, len(kinds)) - 1, -1, -1) if kinds[i] == kid), -1)
        return kinds.tobytes().rfind(bytes((kid,)), 0, end)

    def _valid(self, x: Any, shapes: Sequence[tuple[str, ...]], heads: dict[int, None]) -> None:
        """:meth:`_dec`'s checks of ``x`` against the shape table ``shapes``, building nothing; the dict
        shape ids met are added to ``heads``, in the order they were encoded."""
        t = type(x)
        if t is str:
            if x[:1] != "~" or x[1:2] == "~":
                return
            if x[1:2] == "#":
                self.strings[int(x[2:])]
                return
            raw = binascii.a2b_base64(x[1:] + "=") if len(x) == 44 else b""
            if len(raw) != 32:
                raise ValueError(f"not an encoded digest: {x!r:.60}")
        elif t is list:
            head = x[0]
            if type(head) is not int:
                raise ValueError(f"not an encoded dict or list: {x!r:.60}")
            if head != _LIST:
                if head < 0:
                    raise ValueError(f"not an encoded dict or list: {x!r:.60}")
                keys = shapes[head]
                if len(keys) != len(x) - 1:
                    raise ValueError(f"dict shape {head} has {len(keys)} keys, not {len(x) - 1}")
                heads[head] = None
            for v in x[1:]:
                if type(v) is not int:
                    self._valid(v, shapes, heads)
        elif t is dict:
            for v in x.values():
                self._valid(v, shapes, heads)

    def _dec(self, x: Any) -> Any:
        t = type(x)
        if t is str:
            if x[:1] != "~":
                return x
            if x[1:2] == "~":
                return x[1:]
            if x[1:2] == "#":
                return self.strings[int(x[2:])]
            raw = binascii.a2b_base64(x[1:] + "=") if len(x) == 44 else b""
            if len(raw) != 32:
                raise ValueError(f"not an encoded digest: {x!r:.60}")
            return _DIGEST_PREFIX + raw.hex()
        if t is list:
            head = x[0]
            if type(head) is not int:
                raise ValueError(f"not an encoded dict or list: {x!r:.60}")
            if head == _LIST:
                return FrozenList([self._dec(v) for v in x[1:]])
            if head < 0:
                raise ValueError(f"not an encoded dict or list: {x!r:.60}")
            keys = _SHAPES[head]
            if len(keys) != len(x) - 1:
                raise ValueError(f"dict shape {head} has {len(keys)} keys, not {len(x) - 1}")
            return FrozenDict(zip(keys, [self._dec(v) for v in x[1:]], strict=True))
        if t is dict:
            return FrozenDict({k: self._dec(v) for k, v in x.items()})
        return x


class _Held:
    """A batch's events from its deferred one on (positions ``start`` on), outside the store until the
    deferred one is completed: by :meth:`Trace.settle` with figures known some other way, or else by its
    ``complete`` when any reader first looks. Settling appends them to the store, as extending would have
    (the same data, the batch's wall time), and is done once, under the store's ``lock`` (no lock of its
    own: one per session is enough, issue 21)."""

    __slots__ = ("at", "complete", "items", "start")

    def __init__(
        self,
        start: int,
        at: float,
        items: list[tuple[str, Mapping[str, Any]]],
        complete: Callable[[], Mapping[str, Any]],
    ) -> None:
        self.start, self.at, self.items = start, at, items
        self.complete: Callable[[], Mapping[str, Any]] | None = complete

    def settle(self, trace: Trace, completion: Mapping[str, Any] | None) -> None:
        store = trace._store  # the store it was held on: a trace's store changes only here
        with store.lock:
            complete = self.complete
            if complete is None:
                trace._held = None
                return
            extra = complete() if completion is None else completion
            (kind, data), *rest = self.items
            events = [
                TraceEvent(self.start, kind, {**data, **extra}, self.at),
                *(TraceEvent(self.start + 1 + i, k, d, self.at) for i, (k, d) in enumerate(rest)),
            ]
            if len(store) != self.start:  # another value was extended from an older one meanwhile
                store = store.prefix(self.start)
            store.append(events)
            self.complete, self.items = None, []
            trace._store, trace._held = store, None


def _as_event(e: Any) -> TraceEvent:
    if not isinstance(e, TraceEvent):
        raise TypeError(f"a Trace holds TraceEvent values, got {type(e).__name__}")
    return e


class Trace:
    """An append-only sequence of :class:`TraceEvent`; ``appended`` / ``extended`` return a new value.

    ``Trace(events)`` holds the given events; a value is immutable in behaviour (its length and events never
    change), equal to another with the same events, and extending it never changes it (module docstring).
    """

    __slots__ = ("_held", "_n", "_store")
    _store: _Store
    _n: int
    #: the newest batch from its deferred event on, not in the store until settled (None: nothing held)
    _held: _Held | None

    def __init__(self, events: Iterable[TraceEvent] = ()) -> None:
        store = _Store()
        store.append([_as_event(e) for e in events])
        self._store, self._n, self._held = store, len(store), None

    @classmethod
    def _of(cls, store: _Store, n: int, held: _Held | None = None) -> Trace:
        trace = cls.__new__(cls)
        trace._store, trace._n, trace._held = store, n, held
        return trace

    def _settled(self) -> Trace:
        """This trace with its held events in the store (a no-op when nothing is held): every read that
        looks at events goes through here, so a deferred event is completed before anyone sees it."""
        held = self._held
        if held is not None:
            held.settle(self, None)
        return self

    @property
    def events(self) -> TraceEvents:
        """The events, in order: a read-only sequence (indexing and slicing build the events read)."""
        return TraceEvents(self)

    def appended(self, kind: str, **data: Any) -> Trace:
        """A new trace with one event appended (``seq`` is its position); this trace is unchanged."""
        return self.extended(((kind, data),))

    def extended(
        self,
        items: Iterable[tuple[str, Mapping[str, Any]]],
        deferred: tuple[int, Callable[[], Mapping[str, Any]]] | None = None,
        at: float | None = None,
    ) -> Trace:
        """The trace with one event per ``(kind, data)`` appended, in order, stamped with one wall time
        (now, or ``at``: a batch read back from a store keeps its own): a request's events are one batch.
        Work in proportion to the events added (module docstring).

        ``deferred``: ``(k, complete)``, the batch's event ``k`` is completed by ``complete()`` (its data
        is ``{**data, **complete()}``), called when the event is first read, or never if :meth:`settle`
        gives the figures first. Until then that event and the ones after it are held outside the store;
        every read of the trace completes them first, so no reader can tell."""
        self._settled()
        n, now = self._n, time.time() if at is None else at
        batch = list(items)
        if not batch:
            return self
        k = len(batch) if deferred is None else deferred[0]
        added = [TraceEvent(n + i, kind, data, now) for i, (kind, data) in enumerate(batch[:k])]
        store = self._store
        with store.lock:
            if len(store) != n:  # a fork: another value was extended from this one (or a shorter one)
                store = store.prefix(n)
            store.append(added)
        if deferred is None:
            return Trace._of(store, n + len(added))
        held = _Held(n + k, now, batch[k:], deferred[1])
        return Trace._of(store, n + len(batch), held)

    def settle(self, completion: Mapping[str, Any]) -> None:
        """Complete this trace's deferred event with ``completion`` (what its ``complete`` would return,
        known some other way) unless it was completed already; nothing happens when none is held."""
        held = self._held
        if held is not None:
            held.settle(self, completion)

    def held_events(self) -> list[TraceEvent]:
        """The events a deferred one holds back (it first, its data not completed yet; empty when none is
        held): what a store writes so that whoever continues the session completes them."""
        held = self._held
        if held is None or held.complete is None:
            return []
        return [TraceEvent(held.start + i, k, d, held.at) for i, (k, d) in enumerate(held.items)]

    def completion(self) -> Callable[[], Mapping[str, Any]] | None:
        """The ``complete`` of this trace's deferred event while it is not completed (else None)."""
        held = self._held
        return None if held is None else held.complete

    def completed(self) -> Trace:
        """This trace with a deferred event completed now (its ``complete`` run): what a reader forces."""
        return self._settled()

    def ready(self) -> int:
        """How many events are complete: the position of a deferred event not completed yet, else the
        length (nothing is completed by asking)."""
        held = self._held
        return self._n if held is None or held.complete is None else held.start

    def complete_events(self, start: int) -> list[TraceEvent]:
        """The events from ``start`` to :meth:`ready`, without completing a deferred one (a store writes
        these now and the deferred event with the next request, which completes it for free)."""
        return [self._store.event(i) for i in range(start, self.ready())]

    @property
    def deferred(self) -> bool:
        """Whether this trace holds a deferred event not completed yet."""
        held = self._held
        return held is not None and held.complete is not None

    def kinds(self, start: int = 0) -> list[str]:
        """The kinds of the events from position ``start`` on, in order (no event built or completed)."""
        store, n = self._store, self._n
        held = self._held
        stored = n if held is None or held.complete is None else held.start
        out = [_KIND_NAMES[k] for k in store.kinds[start:stored]]
        if stored < n and held is not None:
            out.extend(kind for kind, _ in held.items[max(start - stored, 0) :])
        return out

    def event(self, i: int) -> TraceEvent:
        """The event at position ``i`` (negative from the end)."""
        n = self._n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("trace index out of range")
        if self._held is not None:
            self._settled()
        return self._store.event(i)

    def positions(self, kind: str) -> Sequence[int]:
        """The positions (``seq``) of the events of ``kind``, in order (no event built)."""
        self._settled()
        kid = _KIND_IDS.get(kind)
        return () if kid is None else self._store.positions(kid, self._n)

    def last_of(self, kinds: Iterable[str], before: int | None = None) -> TraceEvent | None:
        """The newest event of one of ``kinds`` before position ``before`` (default: the end), or None."""
        self._settled()
        end = self._n if before is None else min(before, self._n)
        best = -1
        for kind in kinds:
            kid = _KIND_IDS.get(kind)
            if kid is not None:
                best = max(best, self._store.last_position(kid, end))
        return self.event(best) if best >= 0 else None

    def of_kind(self, kind: str) -> list[TraceEvent]:
        """The events of ``kind`` (an :class:`EventKind` constant), in order."""
        return [self.event(i) for i in self.positions(kind)]

    def __iter__(self) -> Iterator[TraceEvent]:
        return map(self._settled().event, range(self._n))

    def __len__(self) -> int:
        return self._n

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        if self._n != other._n:
            return False
        self._settled(), other._settled()
        return self._store is other._store or all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Trace({self._n} events)"

    # -- the snapshot's form -------------------------------------------------------------------------------
    def to_compact(self, jsonable: Callable[[Any], Any] | None = None) -> dict[str, Any]:
        """The trace as JSON data: ``{"codec": "trace/1", "events": n, "z": ...}``, ``z`` the base64 of the
        zlib-compressed event bytes after a header line (kinds, times, byte lengths, tables). Events kept
        whole (data that is not plain JSON) ride in the header as JSON (``jsonable`` turns a value JSON
        does not hold into one it does). :meth:`from_compact` reads it back to an equal trace."""
        self._settled()
        store, n = self._store, self._n
        with store.lock:
            store.encode_pending()
            lines = store.lines(n)
        runs = bisect.bisect_left(store.run_start, n)
        kinds, used = store.kinds[:n], store.used
        header = {
            "kinds": _KIND_NAMES[: max(kinds) + 1] if kinds else [],
            "k": kinds.tolist(),
            "rs": store.run_start[:runs].tolist(),
            "ra": store.run_at[:runs].tolist(),
            "len": [len(line) for line in lines],
            # the shapes its events use, at their ids (an id no event uses: an empty list)
            "shapes": [list(_SHAPES[i]) if used >> i & 1 else [] for i in range(used.bit_length())],
            "strings": store.strings,
            "raw": [
                [i, e.seq, e.kind, e.at, _thawed(e.data)]
                for i, e in sorted((store.raw or {}).items())
                if i < n
            ],
        }
        head = json.dumps(header, ensure_ascii=False, separators=(",", ":"), default=jsonable)
        payload = head.encode("utf-8", "surrogatepass") + b"\n" + b"".join(lines)
        return {"codec": "trace/1", "events": n, "z": base64.b64encode(zlib.compress(payload)).decode()}

    @classmethod
    def from_compact(cls, data: Mapping[str, Any]) -> Trace:
        """The trace :meth:`to_compact` wrote; ``ValueError`` for anything it could not have written
        (every event is decoded once here, so a trace read back never fails later)."""
        try:
            return cls._from_compact(data)
        except ValueError:
            raise
        except (
            AttributeError,
            IndexError,
            KeyError,
            OverflowError,
            TypeError,
            UnicodeDecodeError,
            binascii.Error,
            zlib.error,
        ) as exc:
            raise ValueError(f"not a compact trace: {type(exc).__name__}: {exc}") from exc

    @classmethod
    def _from_compact(cls, data: Mapping[str, Any]) -> Trace:
        if not isinstance(data, Mapping) or data.get("codec") != "trace/1":
            raise ValueError("not a compact trace (codec trace/1)")
        payload = zlib.decompress(base64.b64decode(data["z"], validate=True))
        cut = payload.index(b"\n")
        header = json.loads(payload[:cut].decode("utf-8", "surrogatepass"))
        n = data["events"]
        lengths, kinds = header["len"], header["k"]
        if type(n) is not int or len(lengths) != n or len(kinds) != n:
            raise ValueError("a compact trace whose event count, lengths and kinds disagree")
        store = _Store()
        blob = payload[cut + 1 :]
        store.pending = (n, [])
        if any(type(x) is not int or x < 0 for x in lengths) or sum(lengths) != len(blob):
            raise ValueError("a compact trace whose event bytes do not add up")
        if b"\n" in blob:
            raise ValueError("a compact trace's event holds a line break")
        lines = [blob[a:b] for a, b in pairwise((0, *accumulate(lengths)))]
        full = n // _CHUNK
        ids = [_kind_id(str(k)) for k in header["kinds"]]
        store.kinds = array("B" if max(ids, default=0) <= 0xFF else "I", (ids[k] for k in kinds))
        store.run_start, store.run_at = array("I", header["rs"]), array("d", header["ra"])
        starts = store.run_start
        if len(starts) != len(store.run_at) or any(b <= a for a, b in pairwise(starts)):
            raise ValueError("a compact trace's times are not in order")
        table = [tuple(str(k) for k in s) for s in header["shapes"]]
        store.strings = [str(s) for s in header["strings"]]
        store.string_ids = {s: i for i, s in enumerate(store.strings)}
        raw: dict[int, TraceEvent] = {}
        for i, seq, kind, at, event_data in header["raw"]:
            if not 0 <= i < n or lengths[i]:
                raise ValueError("a compact trace's whole event is not at an empty place")
            raw[i] = TraceEvent(seq, str(kind), event_data, at)
        store.raw = raw or None
        heads: dict[int, None] = {}
        for i in range(n):  # every event decodes, and has a time
            if i not in raw and (not starts or starts[0] > i):
                raise ValueError("a compact trace's event has no time")
            if i not in raw:
                store._valid(_loads(lines[i].decode("utf-8", "surrogatepass")), table, heads)
        # the snapshot's shape ids as this process's (learned in the order the events use them, as the
        # writer did): the same ids when this process learned them in the same order (the seeded ones
        # always), else every event's bytes are rewritten once with this process's ids
        shapes = {head: _shape_id(table[head]) for head in heads}
        for new in shapes.values():
            if new is not None:
                store.used |= 1 << new
        if any(new != head for head, new in shapes.items()):
            for i in range(n):
                if i not in raw:
                    x = _remapped(_loads(lines[i].decode("utf-8", "surrogatepass")), shapes, table)
                    lines[i] = _dumps(x).encode("utf-8", "surrogatepass")
        store.chunks = [
            _deflate(b"".join(line + b"\n" for line in lines[k * _CHUNK : (k + 1) * _CHUNK]))
            for k in range(full)
        ]
        store.open = bytearray(b"".join(line + b"\n" for line in lines[full * _CHUNK :]))
        return cls._of(store, n)


def _thawed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thawed(v) for v in value]
    return value


class TraceEvents(Sequence[TraceEvent]):
    """A trace's events as a read-only sequence: ``len``, indexing (a slice is a tuple of the events in
    it), iteration, ``reversed``; equal to any sequence of the same events (a tuple or list included)."""

    __slots__ = ("_trace",)

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __len__(self) -> int:
        return len(self._trace)

    @overload
    def __getitem__(self, index: int) -> TraceEvent: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[TraceEvent, ...]: ...
    def __getitem__(self, index: int | slice) -> TraceEvent | tuple[TraceEvent, ...]:
        if isinstance(index, slice):
            return tuple(map(self._trace.event, range(*index.indices(len(self._trace)))))
        return self._trace.event(index)

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self._trace)

    def __reversed__(self) -> Iterator[TraceEvent]:
        return map(self._trace.event, range(len(self._trace) - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TraceEvents):
            return self._trace == other._trace
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._trace)

    def __repr__(self) -> str:
        return f"TraceEvents({len(self)} events)"
