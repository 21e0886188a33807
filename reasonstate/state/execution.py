"""Physical execution: what each request cost and how it met the prefix cache. Derived, never fed back.

Usage is normalized across vendors: ``uncached_input`` + ``cache_read`` + ``cache_write`` is the whole
prompt (Anthropic reports these disjointly; OpenAI's ``input_tokens`` includes cached tokens, so the adapter
subtracts). ``prompt_tokens`` is derived, not stored.

A record keeps how many prefix units its request had (``units``), never the units themselves: the unit
digests of the newest requests live once in :class:`Records` (the session's sequence of records), as the
newest request's full unit tuple per model plus, for each earlier request in the window, its difference
from the next newer one. The execution layer grows by a small constant per request, not with the square of
the session's length (issue 21).
"""

from __future__ import annotations

import itertools
import threading
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, NoReturn, overload

import attrs

from reasonstate.errors import ContinuationMismatch
from reasonstate.state.tokenids import TokenIds, ids_digest
from reasonstate.state.units import Units, UnitSeq, as_units

__all__ = [
    "UNIT_WINDOW",
    "ExecutionRecord",
    "Records",
    "UnitChain",
    "UnitUse",
    "Usage",
    "as_records",
    "common_prefix_len",
    "ids_digest",
    "ids_seal",
]


def ids_seal(prompt_ids: Sequence[int] | None, completion_ids: Sequence[int] | None) -> str | None:
    """``ids_digest(prompt_ids + completion_ids)`` (None without ids): a record's seal. A prompt held as a
    :class:`~reasonstate.state.tokenids.TokenIds` is hashed from its buffer's running hash on (only what it
    adds to the prompt sealed before it)."""
    if prompt_ids is None and completion_ids is None:
        return None
    if isinstance(prompt_ids, TokenIds):
        return prompt_ids.digest_with(completion_ids or ())
    return ids_digest((*(prompt_ids or ()), *(completion_ids or ())))


#: the one type a count may have (``bool`` is an ``int`` subclass and is not a count)
_INT = frozenset({int})
_COUNTS = ("uncached_input", "cache_read", "cache_write", "output", "cache_write_1h")


@attrs.frozen(slots=True, weakref_slot=False)
class Usage:
    """Normalized token usage of one request, the same for every vendor (docs/protocols.md §1.5, §3.4,
    §4.4, §5.3 say how each vendor's fields map here).

    Invariants (checked on construction: a value that breaks one is refused with ``ValueError``):

    * every count is a non-negative ``int``;
    * the prompt is split three ways with nothing counted twice: ``input_total == uncached_input +
      cache_read + cache_write`` (Anthropic reports the parts; OpenAI, DeepSeek and Gemini report a total
      that includes the cached part, which the codec subtracts);
    * ``cache_write_1h <= cache_write`` (the part written with the 1-hour TTL, billed higher; Anthropic);
    * ``output`` is every generated token, reasoning included; ``reasoning`` is the part of it the
      vendor reports as reasoning (``None``: not reported), so ``reasoning <= output``.

    A streamed and a non-streamed call of the same answer give equal values.

    Size: no ``__weakref__`` slot (one value per step, issue 21: state in proportion to the content).
    """

    uncached_input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int | None = None
    cache_write_1h: int = 0

    def __attrs_post_init__(self) -> None:
        # one check of every field (a validator per field costs a call each, on every response decoded)
        values = (self.uncached_input, self.cache_read, self.cache_write, self.output, self.cache_write_1h)
        if not (_INT.issuperset(map(type, values)) and min(values) >= 0):
            bad = next(n for n, v in zip(_COUNTS, values, strict=True) if not (type(v) is int and v >= 0))
            raise ValueError(f"Usage.{bad} must be a non-negative integer, got {getattr(self, bad)!r}")
        if self.reasoning is not None:
            if type(self.reasoning) is not int or self.reasoning < 0:
                raise ValueError(f"Usage.reasoning must be a non-negative integer, got {self.reasoning!r}")
            if self.reasoning > self.output:
                raise ValueError(f"Usage.reasoning {self.reasoning} exceeds output {self.output}")
        if self.cache_write_1h > self.cache_write:
            raise ValueError(
                f"Usage.cache_write_1h {self.cache_write_1h} exceeds cache_write {self.cache_write}"
            )

    @property
    def input_total(self) -> int:
        """Every prompt token: ``uncached_input + cache_read + cache_write``."""
        return self.uncached_input + self.cache_read + self.cache_write

    @property
    def prompt_tokens(self) -> int:
        """Same as :attr:`input_total`."""
        return self.uncached_input + self.cache_read + self.cache_write

    @property
    def cache_read_share(self) -> float:
        """``cache_read / input_total`` (0.0 for an empty prompt)."""
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else 0.0

    @classmethod
    def of(
        cls,
        *,
        uncached_input: Any = 0,
        cache_read: Any = 0,
        cache_write: Any = 0,
        output: Any = 0,
        reasoning: Any = None,
        cache_write_1h: Any = 0,
    ) -> Usage:
        """A Usage from vendor figures as received: a missing, non-integer or negative count is 0, a
        reasoning count is capped at ``output`` and the 1-hour write at ``cache_write`` (a vendor's odd
        figure never fails the call whose answer was already paid for)."""
        figures = (uncached_input, cache_read, cache_write, output, cache_write_1h)
        if not (_INT.issuperset(map(type, figures)) and min(figures) >= 0):  # an odd figure: clean each
            uncached_input, cache_read, cache_write, output, cache_write_1h = map(_clean, figures)
        thinking = None if reasoning is None or not _is_int(reasoning) else min(max(reasoning, 0), output)
        one_hour = min(cache_write_1h, cache_write)
        return cls(uncached_input, cache_read, cache_write, output, thinking, one_hour)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _clean(value: Any) -> int:
    return value if _is_int(value) and value > 0 else 0


#: a :class:`Usage` packed into one ``int`` (:func:`packed_usage`), or a value kept as it is
PackedUsage = int | Usage
#: the packed ints of the newest usages packed, by value, oldest first (bounded): a step and the record of
#: its request pack one value, a few requests apart, into one shared ``int``
_PACKED: dict[Usage, int] = {}
_PACKED_MAX = 512
_PACKED_LOCK = threading.Lock()


def packed_usage(usage: Any) -> Any:
    """``usage`` as one ``int`` when it is a :class:`Usage` (not a subclass): its six counts side by side
    in lanes of one width, ``cache_read`` lowest and ``cache_write_1h`` highest (a count that is 0, as the
    1-hour write mostly is, takes no bits there), ``reasoning + 1`` in its lane (0: None), the width in
    the low 8 bits. ~36 bytes where a Usage takes 80 and its counts above 256 take 28 each (issue 21:
    one value per step, kept for the session's life). Any other value (a packed one, a subclass, an odd
    value) comes back as it is. Equal usages packed close together are one ``int`` object.

    Invariant: ``unpacked_usage(packed_usage(u)) == u`` for every ``u``.
    """
    if type(usage) is not Usage:
        return usage
    found = _PACKED.get(usage)
    if found is not None:
        return found
    r = usage.reasoning
    lanes = (
        usage.cache_read,
        usage.uncached_input,
        usage.cache_write,
        usage.output,
        0 if r is None else r + 1,
        usage.cache_write_1h,
    )
    width = max(lanes).bit_length() or 1
    if width > 255:  # pragma: no cover - a count of 2**255 tokens
        return usage
    packed = 0
    for lane in reversed(lanes):
        packed = (packed << width) | lane
    packed = (packed << 8) | width
    with _PACKED_LOCK:
        if len(_PACKED) >= _PACKED_MAX:
            del _PACKED[next(iter(_PACKED))]
        return _PACKED.setdefault(usage, packed)


_new, _set = object.__new__, object.__setattr__


def unpacked_usage(packed: Any) -> Usage:
    """The :class:`Usage` :func:`packed_usage` packed (a value that is not an ``int`` comes back as it
    is). Built without the constructor's checks: the counts are those of a Usage that passed them."""
    if type(packed) is not int:
        return packed  # type: ignore[no-any-return]
    width = packed & 255
    mask = (1 << width) - 1
    packed >>= 8
    usage = _new(Usage)
    _set(usage, "cache_read", packed & mask)
    packed >>= width
    _set(usage, "uncached_input", packed & mask)
    packed >>= width
    _set(usage, "cache_write", packed & mask)
    packed >>= width
    _set(usage, "output", packed & mask)
    packed >>= width
    reasoning = packed & mask
    _set(usage, "reasoning", reasoning - 1 if reasoning else None)
    _set(usage, "cache_write_1h", packed >> width)
    return usage


@attrs.frozen(slots=True)
class ExecutionRecord:
    """One successful request.

    ``units`` is how many prefix units (tool, system block, message content block, input item: one digest
    each, of that unit alone) the request had; the digests themselves are kept once for the newest
    requests by the :class:`Records` the record belongs to (:meth:`Records.units_of`). ``divergence`` is
    the first unit index where the request differs from the previous one (None: it extends it).
    ``predicted_cache_read`` is what the SDK expected before sending (None: not knowable).
    """

    index: int
    turn: int
    step: int
    request_digest: str
    request_bytes: int
    prefix_fingerprint: str
    units: int
    breakpoints: tuple[int, ...]
    divergence: int | None
    predicted_cache_read: int | None
    usage: Usage
    duration_s: float
    model: str
    #: self-hosted models (token-in, token-out): the exact prompt and completion token ids; the prompt as a
    #: :class:`~reasonstate.state.tokenids.TokenIds` when the adapter gives one (a view sharing its storage
    #: with the earlier prompts it extends: a token session's records grow with the tokens it adds)
    prompt_ids: Sequence[int] | None = None
    completion_ids: tuple[int, ...] | None = None
    #: the digest of the step's output as the model generated it, where a vendor caches it as a unit of
    #: later prompts (DeepSeek persists a unit at the end of each output: docs/protocols.md §3.4)
    output_unit: str | None = None
    #: ``ids_digest(prompt_ids + completion_ids)`` taken when the record was made: ids restored from a
    #: snapshot or changed in memory are refused, never reused as a prompt prefix
    ids_seal: str | None = None

    def verify_ids(self) -> None:
        """Raise :class:`~reasonstate.errors.ContinuationMismatch` unless the token ids match their seal."""
        if self.prompt_ids is None and self.completion_ids is None:
            return
        if self.ids_seal is None or ids_seal(self.prompt_ids, self.completion_ids) != self.ids_seal:
            raise ContinuationMismatch(f"request {self.index}: token ids changed since they were recorded")


class UnitUse(NamedTuple):
    """What a cache prediction reads of an earlier request (:meth:`Records.shares`): its unit count, usage
    and output unit, the same values as its :class:`ExecutionRecord`'s, read without building the record."""

    units: int
    usage: Usage
    output_unit: str | None
    breakpoints: tuple[int, ...] = ()


#: the newest comparison of two long tuples, ``(a, b, common_prefix_len(a, b))``: both held, so neither id
#: can be reused while it is here. A request's units are compared with the previous request's several times
#: (its breakpoints, its cache prediction, the commit, the closing decision's effect): the tuples are
#: immutable, so the figure is read back instead of copying and comparing them again (issue 21: own CPU)
_NEWEST: list[tuple[Any, Any, int]] = [((), (), 0)]
_MEMO_MIN = 256  # shorter tuples are compared again (cheaper than keeping them)


def common_prefix_len(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The largest ``n`` with ``a[:n] == b[:n]`` (slice comparisons, so it runs at C speed). The common
    case, one extending the other, compares without copying the longer one's head when the shorter is whole
    (``a[:n]`` of a sequence of length ``n`` is an equal copy of it; issue 21: own CPU per request); the
    same two long tuples compared again (by identity) give the figure found the last time, so their items
    must be immutable values (unit digests, unit keys: every caller's)."""
    n = min(len(a), len(b))
    ta, tb = type(a), type(b)
    memo = n >= _MEMO_MIN and (ta is tuple or ta is Units) and (tb is tuple or tb is Units)
    if memo:
        newest = _NEWEST[0]
        if newest[0] is a and newest[1] is b:
            return newest[2]
        found = _common_prefix_len(a, b, n)
        _NEWEST[0] = (a, b, found)
        return found
    return _common_prefix_len(a, b, n)


def _packed_common(a: Sequence[Any], b: Sequence[Any], n: int) -> int:
    """:func:`common_prefix_len` where one side (at least) is :class:`~reasonstate.state.units.Units`: the
    bytes compared when both are (the other packed when it can be: a sequence of digest strings)."""
    ua = a if type(a) is Units else Units.of(a)
    ub = b if type(b) is Units else Units.of(b)
    if type(ua) is Units and type(ub) is Units:
        return ua.common(ub)
    return _common_prefix_len(tuple(a), tuple(b), n)  # another string among them: compared as strings


def _common_prefix_len(a: Sequence[Any], b: Sequence[Any], n: int) -> int:
    if type(a) is Units or type(b) is Units:
        return _packed_common(a, b, n)
    if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


#: how many of each model's newest requests keep their unit digests (a cache prediction reads at most
#: this many earlier requests: ``CacheRules.recent`` is at most this)
UNIT_WINDOW = 64

#: an earlier request in a :class:`UnitChain`: ``(seq, shared, tail)``, its units being
#: ``newer[:shared] + tail`` where ``newer`` is the next newer request of the chain
Delta = tuple[int, int, UnitSeq]


@attrs.frozen(slots=True)
class UnitChain:
    """The unit digests of one model's newest requests (at most :data:`UNIT_WINDOW`).

    ``units`` is the newest request's whole tuple (``seq``: its position in the session's records);
    ``older`` holds each earlier request of the model, newest first, as its difference from the next newer
    one: ``(seq, shared, tail)`` with ``shared == common_prefix_len(older, newer)`` and ``tail ==
    older[shared:]`` (empty when the newer request extends it, as a conversation's requests mostly do).
    """

    model: str
    seq: int
    units: UnitSeq
    older: tuple[Delta, ...] = ()

    def appended(self, seq: int, units: UnitSeq, shared: int | None = None) -> UnitChain:
        """The chain with ``units`` (request ``seq``) as its newest; ``shared``: ``common_prefix_len(units,
        self.units)`` when the caller has it (one C-speed comparison otherwise)."""
        s = common_prefix_len(units, self.units) if shared is None else shared
        tail = self.units[s:] if s < len(self.units) else ()
        return UnitChain(self.model, seq, units, ((self.seq, s, tail), *self.older[: UNIT_WINDOW - 2]))

    def shared(self, q: UnitSeq, since: int = 0, limit: int = UNIT_WINDOW) -> list[tuple[int, int]]:
        """``(seq, common_prefix_len(q, units of request seq))`` for the newest ``limit`` requests of the
        chain from request ``since`` on, newest first.

        One comparison with the newest tuple; each earlier request follows from the next newer one: with
        ``s`` the newer one's shared length and ``(shared, tail)`` the earlier one's difference, it is
        ``s`` when ``s < shared`` (they agree before ``shared`` and ``q`` left the newer one before it),
        else ``shared`` plus what ``q`` shares with ``tail`` from there (a few units at most)."""
        s = common_prefix_len(q, self.units)
        out = [(self.seq, s)]
        if limit <= 1:
            return out
        for seq, shared, tail in self.older:
            if seq < since:
                break
            if s >= shared:
                s = shared + common_prefix_len(q[shared : shared + len(tail)], tail) if tail else shared
            out.append((seq, s))
            if len(out) == limit:
                break
        return out

    def tuples(self, since: int = 0) -> list[tuple[int, UnitSeq]]:
        """``(seq, units)`` of every request of the chain from ``since`` on, newest first, rebuilt (a copy
        of each: for the rare reader that needs whole tuples)."""
        units = self.units
        out = [(self.seq, units)]
        for seq, shared, tail in self.older:
            if seq < since:
                break
            units = units[:shared] + tail
            out.append((seq, units))
        return out

    def from_seq(self, start: int) -> UnitChain:
        """The chain without the requests before ``start``."""
        keep = 0
        while keep < len(self.older) and self.older[keep][0] >= start:
            keep += 1
        return self if keep == len(self.older) else attrs.evolve(self, older=self.older[:keep])


#: how many of the newest records a :class:`Records` value keeps as built objects (the engine reads the
#: previous one, a store's next delta the newest; older ones are packed and rebuilt on access, and the
#: cache prediction reads their :class:`UnitUse` from the columns)
_BUILT = 2
_SHA256 = "sha256:"
_HEXDIGITS = frozenset("0123456789abcdef")
#: the int columns of a packed record, in order (None is -1 for the two that may be None)
_INT_FIELDS = ("index", "turn", "step", "request_bytes", "units", "divergence", "predicted_cache_read")
#: a packed row's ints: the fields, then the ids of its fingerprint and model, then the end of its breakpoints
#: in ``bps`` (one array for the three: a session's packed rows hold few containers)
_ROW = len(_INT_FIELDS) + 3
_BP_END = _ROW - 1
#: how many shared strings a :class:`_Packed` finds by a scan before it keeps a dict of them
_FEW_NAMES = 8
_INT_MAX = 1 << 31  # a column is a C int: a record with a larger figure is kept whole


class _Packed:
    """The records older than a :class:`Records` value's built tail, packed: per record a row of ten 4-byte
    ints (seven fields, the fingerprint and model as ids in a table of shared strings, the end of its
    breakpoints: record ``i``'s are ``bps[end(i-1):end(i)]``), its request digest's 32 bytes, its
    duration, its breakpoints (4 bytes each) and its usage (the step's own value). A record the columns
    cannot hold exactly (token ids, a digest of another form, a figure of 2**31 or more) is kept as built
    in ``raw`` (None until there is one).

    Append-only and shared by every value extended from one another, as the trace's store is: a value
    reads the first ``n`` rows it was made with, so later appends never change what it sees; a value
    extended from fewer rows than the store holds copies its rows first (a fork).
    """

    __slots__ = (
        "bps",
        "digests",
        "durations",
        "ints",
        "lock",
        "name_ids",
        "names",
        "outputs",
        "raw",
        "usages",
    )

    def __init__(self) -> None:
        self.ints = array("i")  # per record a row of _ROW
        self.digests = bytearray()
        self.durations = array("d")
        self.bps = array("I")
        #: each record's usage: the step's own value while the record is among the newest
        #: :data:`UNIT_WINDOW` (which the cache prediction reads on every request), then packed
        #: (:func:`packed_usage`: the step's own ``int``, issue 21)
        self.usages: list[PackedUsage] = []
        #: each record's output unit, by row; None until a record has one (most vendors never do; where
        #: one does, nearly every record does: a list, not a dict by row, issue 21)
        self.outputs: list[str | None] | None = None
        #: the shared strings (fingerprints, models) the rows name by index; found by a C-speed scan while
        #: there are few (a session has one or two of each), by ``name_ids`` (None until then) beyond
        self.names: list[Any] = []
        self.name_ids: dict[Any, int] | None = None
        self.raw: dict[int, ExecutionRecord] | None = None
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.usages)

    def prefix(self, n: int) -> _Packed:
        new = _Packed()
        new.ints = self.ints[: n * _ROW]
        new.digests = self.digests[: n * 32]
        new.durations = self.durations[:n]
        new.bps = self.bps[: self._bp_end(n - 1)]
        new.usages = self.usages[:n]
        new.outputs = None if self.outputs is None else self.outputs[:n]
        new.names = list(self.names)
        new.name_ids = None if self.name_ids is None else dict(self.name_ids)
        if self.raw is not None:
            new.raw = {i: r for i, r in self.raw.items() if i < n} or None
        return new

    def _bp_end(self, i: int) -> int:
        """Where record ``i``'s breakpoints end in ``bps`` (0 for ``i == -1``)."""
        return self.ints[i * _ROW + _BP_END] if i >= 0 else 0

    def _id(self, value: Any) -> int:
        names, ids = self.names, self.name_ids
        if ids is not None:
            found = ids.get(value)
            if found is None:
                found = ids[value] = len(names)
                names.append(value)
            return found
        try:
            return names.index(value)
        except ValueError:
            names.append(value)
            if len(names) > _FEW_NAMES:
                self.name_ids = {name: k for k, name in enumerate(names)}
            return len(names) - 1

    def append(self, r: ExecutionRecord) -> None:
        i = len(self.usages)
        digest = r.request_digest
        packable = (
            r.prompt_ids is None
            and r.completion_ids is None
            and r.ids_seal is None
            and type(digest) is str
            and len(digest) == 71
            and digest.startswith(_SHA256)
            and _HEXDIGITS.issuperset(digest[7:])
            and all(type(v) is int or v is None for v in (r.divergence, r.predicted_cache_read))
            and all(type(getattr(r, f)) is int for f in ("index", "turn", "step", "request_bytes", "units"))
            and type(r.duration_s) is float
            and type(r.model) is str
            and type(r.prefix_fingerprint) is str
            and type(r.breakpoints) is tuple
            and all(type(b) is int and 0 <= b < _INT_MAX for b in r.breakpoints)
        )
        if packable:
            ints = (r.index, r.turn, r.step, r.request_bytes, r.units, r.divergence, r.predicted_cache_read)
            packable = all(v is None or 0 <= v < _INT_MAX for v in ints)
        if not packable:
            if self.raw is None:
                self.raw = {}
            self.raw[i] = r
            self.ints.extend((0,) * (_ROW - 1))
            self.digests += bytes(32)
            self.durations.append(0.0)
        else:
            self.ints.extend(-1 if v is None else v for v in ints)
            self.ints.extend((self._id(r.prefix_fingerprint), self._id(r.model)))
            self.digests += bytes.fromhex(digest[7:])
            self.durations.append(r.duration_s)
            self.bps.extend(r.breakpoints)
        self.ints.append(len(self.bps))
        self.usages.append(r.usage)
        if i >= UNIT_WINDOW:
            self.usages[i - UNIT_WINDOW] = packed_usage(self.usages[i - UNIT_WINDOW])
        if self.outputs is not None:
            self.outputs.append(r.output_unit)
        elif r.output_unit is not None:
            self.outputs = [*itertools.repeat(None, i), r.output_unit]

    def record(self, i: int) -> ExecutionRecord:
        raw = self.raw.get(i) if self.raw else None
        if raw is not None:
            return raw
        k = i * _ROW
        index, turn, step, size, units, divergence, predicted, fingerprint, model = self.ints[k : k + _BP_END]
        return ExecutionRecord(
            index=index,
            turn=turn,
            step=step,
            request_digest=_SHA256 + self.digests[i * 32 : i * 32 + 32].hex(),
            request_bytes=size,
            prefix_fingerprint=self.names[fingerprint],
            units=units,
            breakpoints=self._breakpoints(i),
            divergence=None if divergence < 0 else divergence,
            predicted_cache_read=None if predicted < 0 else predicted,
            usage=unpacked_usage(self.usages[i]),
            duration_s=self.durations[i],
            model=self.names[model],
            output_unit=None if self.outputs is None else self.outputs[i],
        )

    def _breakpoints(self, i: int) -> tuple[int, ...]:
        return tuple(self.bps[self._bp_end(i - 1) : self._bp_end(i)])

    def use(self, i: int) -> UnitUse:
        """Record ``i``'s :class:`UnitUse`, read from the columns (nothing else built)."""
        return self.uses((i,))[0]

    def run(self, start: int, stop: int) -> list[UnitUse]:
        """:meth:`uses` of the rows ``start`` to ``stop`` (the newest of a one-model session: what the
        cache prediction reads on every request), built from slices of the columns at C speed when no row
        among them is kept whole and each holds its :class:`Usage` (the window's rows do)."""
        if start >= stop:
            return []
        usages = self.usages[start:stop]
        if self.raw and any(start <= i < stop for i in self.raw):
            return self.uses(range(start, stop))
        if not _USAGE.issuperset(map(type, usages)):
            return self.uses(range(start, stop))
        units = self.ints[start * _ROW + 4 : stop * _ROW : _ROW]
        ends = self.ints[start * _ROW + _BP_END : stop * _ROW : _ROW]
        first = self._bp_end(start - 1)
        if ends[-1] == first:  # no row has a breakpoint
            marks: Iterable[tuple[int, ...]] = itertools.repeat((), stop - start)
        else:
            bps = self.bps
            marks = [tuple(bps[a:b]) for a, b in zip(itertools.chain((first,), ends[:-1]), ends, strict=True)]
        outputs = self.outputs
        found = itertools.repeat(None) if outputs is None else outputs[start:stop]
        rows = zip(units, usages, found, marks, strict=False)
        return list(map(tuple.__new__, itertools.repeat(UnitUse), rows))

    def uses(self, rows: Iterable[int]) -> list[UnitUse]:
        """The :class:`UnitUse` of each record in ``rows``, read from the columns in one loop."""
        raw, ints, usages, outputs, bps, new = (
            self.raw,
            self.ints,
            self.usages,
            self.outputs,
            self.bps,
            tuple.__new__,
        )
        out: list[UnitUse] = []
        for i in rows:
            r = raw.get(i) if raw else None
            if r is not None:
                out.append(new(UnitUse, (r.units, r.usage, r.output_unit, r.breakpoints)))
                continue
            usage = usages[i]  # the window's rows (read on every request) hold their Usage: no call
            if not isinstance(usage, Usage):
                usage = unpacked_usage(usage)
            k = i * _ROW
            marks = tuple(bps[ints[k - _ROW + _BP_END] if i else 0 : ints[k + _BP_END]])
            out.append(new(UnitUse, (ints[k + 4], usage, None if outputs is None else outputs[i], marks)))
        return out


class Records(Sequence[ExecutionRecord]):
    """The session's execution records, oldest first (a sequence), with the unit digests of the newest ones.

    ``chains`` holds one :class:`UnitChain` per model the records name (the newest request's model last),
    so every request among each model's newest :data:`UNIT_WINDOW` has its unit tuple, kept once: a
    request adds its record, one comparison with its model's previous newest tuple and a small difference
    (Python work independent of the session's length). ``offset``: how many older records were dropped
    (a guard keeps only its newest); a request's ``seq`` is ``offset +`` its position. Immutable:
    :meth:`appended` returns a new value; two are equal when their records and chains are (a plain tuple
    compares with the records alone).

    Storage (issue 21: state in proportion to the content): the newest :data:`_BUILT` records are kept as
    built (the same objects on every read); the older ones packed in a shared append-only
    :class:`_Packed` and rebuilt, equal to what was appended, when read (``records[i]``, iteration).
    """

    __slots__ = ("_chains", "_n", "_offset", "_packed", "_tail")

    _chains: tuple[UnitChain, ...]
    _offset: int
    #: None while no record is packed (``_n == 0``): a young session holds no empty columns
    _packed: _Packed | None
    _n: int
    _tail: tuple[ExecutionRecord, ...]

    def __init__(
        self, records: Iterable[ExecutionRecord] = (), chains: tuple[UnitChain, ...] = (), offset: int = 0
    ) -> None:
        packed: _Packed | None
        if isinstance(records, Records):
            packed, n, tail = records._packed, records._n, records._tail
        else:
            items = tuple(records)
            packed, n, tail = None, 0, items
            if len(items) > _BUILT:
                packed = _Packed()
                for r in items[: len(items) - _BUILT]:
                    packed.append(r)
                n, tail = len(packed), items[len(items) - _BUILT :]
        self._set(packed, n, tail, chains, offset)

    def _set(
        self,
        packed: _Packed | None,
        n: int,
        tail: tuple[ExecutionRecord, ...],
        chains: tuple[UnitChain, ...],
        offset: int,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "_packed", packed)
        set_(self, "_n", n)
        set_(self, "_tail", tail)
        set_(self, "_chains", chains)
        set_(self, "_offset", offset)

    @classmethod
    def _of(
        cls,
        packed: _Packed | None,
        n: int,
        tail: tuple[ExecutionRecord, ...],
        chains: tuple[UnitChain, ...],
        offset: int,
    ) -> Records:
        self = cls.__new__(cls)
        self._set(packed, n, tail, chains, offset)
        return self

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"Records is immutable (cannot set {name})")

    def __len__(self) -> int:
        return self._n + len(self._tail)

    @overload
    def __getitem__(self, i: int) -> ExecutionRecord: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[ExecutionRecord, ...]: ...
    def __getitem__(self, i: int | slice) -> ExecutionRecord | tuple[ExecutionRecord, ...]:
        n = self._n
        if isinstance(i, slice):
            start, stop, step = i.indices(n + len(self._tail))
            if step == 1 and start >= n:
                return self._tail[start - n : max(stop - n, 0)]
            return tuple(self[k] for k in range(start, stop, step))
        if i < 0:
            i += n + len(self._tail)
        if i >= n:
            return self._tail[i - n]  # IndexError past the end, as a tuple's
        if i < 0:
            raise IndexError("Records index out of range")
        return self._rows().record(i)

    def __iter__(self) -> Iterator[ExecutionRecord]:
        if self._n:
            packed = self._rows()
            for i in range(self._n):
                yield packed.record(i)
        yield from self._tail

    def _rows(self) -> _Packed:
        """The packed rows (only read where ``_n > 0``, so there are some)."""
        packed = self._packed
        assert packed is not None
        return packed

    def __bool__(self) -> bool:
        return bool(self._n or self._tail)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Records):
            return (
                len(self) == len(other)
                and self._chains == other._chains
                and self._offset == other._offset
                and tuple(self) == tuple(other)
            )
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: tuple[ExecutionRecord, ...]) -> tuple[ExecutionRecord, ...]:
        return (*self, *other)

    def __repr__(self) -> str:
        return f"Records({tuple(self)!r})"

    @property
    def chains(self) -> tuple[UnitChain, ...]:
        return self._chains

    @property
    def offset(self) -> int:
        return self._offset

    @classmethod
    def of(cls, pairs: Iterable[tuple[ExecutionRecord, Sequence[str]]]) -> Records:
        """Records from ``(record, its units)`` pairs, oldest first (tests, migrations)."""
        out = cls()
        for record, units in pairs:
            out = out.appended(record, units)
        return out

    @classmethod
    def restored(
        cls, records: Sequence[ExecutionRecord], chains: Sequence[UnitChain], offset: int = 0
    ) -> Records:
        """Records from their parts as a snapshot holds them; ``ValueError`` unless every chain fits its
        records (its model, each request's unit count, at most one chain per model, the newest record's
        chain last)."""
        out = cls(records, tuple(chains), offset)
        seen: set[str] = set()
        end = offset + len(records)
        for chain in chains:
            if chain.model in seen:
                raise ValueError(f"two unit chains for model {chain.model!r}")
            seen.add(chain.model)
            previous = chain.seq
            n = len(chain.units)
            lengths = [(chain.seq, n)]
            for seq, shared, tail in chain.older:
                if not (isinstance(seq, int) and offset <= seq < previous and 0 <= shared <= n):
                    raise ValueError(f"unit chain of {chain.model!r}: request {seq} is out of order")
                if not all(isinstance(u, str) for u in tail):
                    raise ValueError(f"unit chain of {chain.model!r}: a unit is not a digest")
                previous, n = seq, shared + len(tail)
                lengths.append((seq, n))
            for seq, count in lengths:
                if not offset <= seq < end:
                    raise ValueError(f"unit chain of {chain.model!r}: request {seq} is not recorded")
                record = records[seq - offset]
                if record.model != chain.model or record.units != count:
                    raise ValueError(f"unit chain of {chain.model!r} does not fit request {seq}")
        if records and (not chains or chains[-1].seq != end - 1):
            raise ValueError("the newest request's units are missing")
        return out

    def appended(
        self,
        record: ExecutionRecord,
        units: Sequence[str],
        *,
        shared: int | None = None,
        keep: int | None = None,
    ) -> Records:
        """These records and ``record`` (whose request had ``units``) after them. ``shared``:
        ``common_prefix_len(units, self.newest_units())`` when the caller has it; ``keep``: drop all but
        the newest ``keep`` records (a guard)."""
        units = as_units(units)
        if record.units != len(units):
            raise ValueError(f"the record counts {record.units} units, its request has {len(units)}")
        seq = self._offset + len(self)
        chains = list(self._chains)
        chain = UnitChain(record.model, seq, units)
        for k, c in enumerate(chains):
            if c.model == record.model:
                chain = c.appended(seq, units, shared if c.seq == seq - 1 else None)
                del chains[k]
                break
        chains.append(chain)
        offset = self._offset
        if keep is not None:  # a guard's few newest records stay built (never packed: no repacking)
            cut = max(len(self) + 1 - keep, 0)
            if cut:
                offset += cut
                chains = [c.from_seq(offset) for c in chains if c.seq >= offset]
            return Records._of(None, 0, (*self[cut:], record), tuple(chains), offset)
        packed, n, tail = self._packed, self._n, (*self._tail, record)
        if len(tail) > _BUILT:
            # the oldest built record moves to the packed rows: in place when this value's rows are the
            # store's newest, else into a copy of its own rows (a fork: the other value keeps its own);
            # the first one into new rows (no value holds them yet)
            if packed is None:
                packed = _Packed()
                packed.append(tail[0])
            else:
                with packed.lock:
                    if len(packed) != n:
                        packed = packed.prefix(n)
                    packed.append(tail[0])
            n, tail = n + 1, tail[1:]
        return Records._of(packed, n, tail, tuple(chains), offset)

    def newest_units(self) -> UnitSeq:
        """The units of the newest request (``()`` when there is none)."""
        return self._chains[-1].units if self._chains and len(self) else ()

    def chain(self, model: str) -> UnitChain | None:
        """``model``'s unit chain (None: no request of it is kept)."""
        for c in self._chains:
            if c.model == model:
                return c
        return None

    def units_of(self, position: int) -> UnitSeq | None:
        """The units of the request at ``position`` (negative: from the end), rebuilt from the window;
        None when it is older than its model's newest :data:`UNIT_WINDOW`."""
        record = self[position]
        seq = self._offset + (position % len(self))
        chain = self.chain(record.model)
        if chain is None:
            return None
        if chain.seq == seq:
            return chain.units
        return next((u for s, u in chain.tuples(seq) if s == seq), None)

    def shares(
        self, units: Sequence[str], *, model: str | None = None, since: int = 0, limit: int = UNIT_WINDOW
    ) -> list[tuple[int, UnitUse, int]]:
        """``(position, what the cache reads of its record, common_prefix_len(units, its units))`` for
        every kept request at or after position ``since`` (of ``model`` only, and its newest ``limit`` of
        them, when given), oldest first. One comparison with each model's newest tuple, then a few small
        ones per request; no record is built."""
        q = as_units(units)
        start = self._offset + since
        rows: list[int] = []
        shared: list[int] = []
        offset = self._offset
        for c in self._chains:
            if model is not None and c.model != model:
                continue
            if c.seq < start:
                continue
            for seq, s in c.shared(q, start, limit):
                rows.append(seq - offset)
                shared.append(s)
        if not rows:
            return []
        n, tail = self._n, self._tail
        low, high = rows[-1], rows[0] + 1
        if len(self._chains) == 1 and high - low == len(rows):
            # one chain's consecutive rows, newest first (a one-model session): read oldest first as column
            # slices, the built tail's rows (the newest) after them
            uses = self._rows().run(low, min(high, n)) if low < n else []
            uses += [_tail_use(tail[i - n]) for i in range(max(low, n), high)]
            shared.reverse()
            return list(zip(range(low, high), uses, shared, strict=True))
        inner = [i for i in rows if i < n]
        packed = self._rows().uses(inner) if inner else []
        if len(packed) < len(rows):  # the built tail's rows: the newest, last in each chain's run
            found = iter(packed)
            packed = [_tail_use(tail[i - n]) if i >= n else next(found) for i in rows]
        out = list(zip(rows, packed, shared, strict=True))
        out.sort()  # by position: each request is in one chain, so no two entries tie on it
        return out

    def tuples(self, *, model: str, since: int = 0) -> dict[int, UnitSeq]:
        """position → units of every kept request of ``model`` at or after ``since``, rebuilt."""
        chain = self.chain(model)
        if chain is None:
            return {}
        return {seq - self._offset: u for seq, u in chain.tuples(self._offset + since)}


_USAGE = frozenset({Usage})


def _tail_use(r: ExecutionRecord) -> UnitUse:
    return UnitUse(r.units, r.usage, r.output_unit, r.breakpoints)


EMPTY = Records()


def as_records(records: Sequence[ExecutionRecord]) -> Records:
    """``records`` as :class:`Records` (an empty sequence: the empty one); ``TypeError`` for a non-empty
    plain sequence, whose requests' units are not known."""
    if isinstance(records, Records):
        return records
    if not records:
        return EMPTY
    raise TypeError(
        "execution records without their units: pass the session's Records (Session.execution) or build "
        "one with Records.of((record, units) ...)"
    )
