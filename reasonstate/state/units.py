"""Unit digests kept packed: a request's prefix units as 32 raw bytes each, read as ``"sha256:<hex>"``.

A unit digest is ``digest_of(compact(value))`` (:func:`~reasonstate.state.continuation.digest_of`): the
string ``"sha256:"`` and 64 lowercase hex digits, a 120-byte Python object. The session keeps the units of
every closed turn (a codec's run of closed turns) and of its newest requests (the records' unit chains), so
they are kept as their 32 raw bytes, side by side in one ``bytes`` or ``bytearray`` (issue 21: state in
proportion to the content), and the string is made only where one is read.

Invariant: ``list(Units.of(ds)) == list(ds)`` and ``Units.of(ds) == tuple(ds)`` for any strings ``ds``;
two :class:`Units` are equal when their digests are (one C-speed comparison of their bytes).
"""

from __future__ import annotations

import binascii
import threading
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from typing import Any, overload

__all__ = ["RAW", "UnitBuffer", "UnitSeq", "Units", "as_units", "pack", "raw_digest"]

#: bytes per packed digest
RAW = 32
#: held while a shelf (an append-only list or bytearray shared by the values extended from one another) is
#: extended, and while a :class:`UnitBuffer` reads the shelves it holds by reference
SHELF_LOCK = threading.Lock()
_PREFIX = "sha256:"
_UNHEX = binascii.unhexlify


def raw_digest(digest: Any) -> bytes | None:
    """The 32 bytes of ``digest`` when it is a digest string as :func:`digest_of` makes them
    (``"sha256:"`` and 64 lowercase hex digits), else None: ``"sha256:" + raw_digest(d).hex() == d``."""
    out = bytearray()
    return bytes(out) if _packed_into(out, (digest,)) else None


def pack(digests: Iterable[str]) -> bytes | None:
    """``digests`` packed (32 bytes each, in order); None when one of them is not a digest string."""
    out = bytearray()
    return bytes(out) if _packed_into(out, digests) else None


def _packed_into(out: bytearray, digests: Iterable[str]) -> bool:
    """Append ``digests`` packed to ``out``; False (``out`` then holds a part of them) when one of them is
    not a digest string. :func:`raw_digest`, inline: one call per request's list, not per unit."""
    # unhexlify reads upper case too: the round trip keeps only the exact form, so that
    # ``"sha256:" + raw.hex()`` gives the string back (a few times faster than bytes.fromhex + islower)
    for d in digests:
        if type(d) is not str or len(d) != 71 or not d.startswith(_PREFIX):
            return False
        hexed = d[7:]
        try:
            raw = _UNHEX(hexed)
        except ValueError:  # binascii.Error: not hex digits
            return False
        if raw.hex() != hexed:
            return False
        out += raw
    return True


class Units(Sequence[str]):
    """An immutable sequence of digest strings held as their packed bytes (``raw``: 32 per unit).

    Reads make the strings (``units[i]``, iteration); slices are :class:`Units` (a copy of their bytes);
    ``==`` with another :class:`Units` compares the bytes, with a tuple the strings (so a value equals the
    tuple of strings it stands for, and hashes as it does). ``+`` joins bytes.
    """

    __slots__ = ("raw",)

    raw: bytes

    def __init__(self, raw: bytes = b"") -> None:
        if len(raw) % RAW:
            raise ValueError(f"Units: {len(raw)} bytes is not a whole number of {RAW}-byte digests")
        object.__setattr__(self, "raw", bytes(raw) if type(raw) is not bytes else raw)

    @classmethod
    def of(cls, digests: Iterable[str]) -> Units | tuple[str, ...]:
        """``digests`` as :class:`Units` when every one is a digest string, else as a tuple (a sequence of
        other strings, kept as it is)."""
        if type(digests) is Units:
            return digests
        items = tuple(digests)
        raw = pack(items)
        return items if raw is None else cls(raw)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Units is immutable (cannot set {name})")

    def __len__(self) -> int:
        return len(self.raw) // RAW

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Units: ...
    def __getitem__(self, i: int | slice) -> str | Units:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step == 1:
                return Units(self.raw[start * RAW : max(stop, start) * RAW])
            raw = self.raw
            return Units(b"".join(raw[k * RAW : k * RAW + RAW] for k in range(start, stop, step)))
        k = _index(i, len(self), "Units")
        return _PREFIX + self.raw[k * RAW : k * RAW + RAW].hex()

    def __iter__(self) -> Iterator[str]:
        raw = self.raw
        for k in range(0, len(raw), RAW):
            yield _PREFIX + raw[k : k + RAW].hex()

    def __contains__(self, value: object) -> bool:
        found = raw_digest(value)
        if found is None:
            return False
        raw, at = self.raw, self.raw.find(found)
        while at >= 0 and at % RAW:
            at = raw.find(found, at + 1)
        return at >= 0

    def __eq__(self, other: object) -> bool:
        if type(other) is Units:
            return self.raw == other.raw
        if isinstance(other, tuple):
            return len(other) == len(self) and tuple(self) == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the equal tuple's

    def __add__(self, other: Sequence[str]) -> Units | tuple[str, ...]:
        if type(other) is Units:
            return Units(self.raw + other.raw)
        if isinstance(other, tuple):
            raw = pack(other)
            return (*self, *other) if raw is None else Units(self.raw + raw) if raw else self
        return NotImplemented

    def __radd__(self, other: Sequence[str]) -> Units | tuple[str, ...]:
        if isinstance(other, tuple):
            raw = pack(other)
            return (*other, *self) if raw is None else Units(raw + self.raw) if raw else self
        return NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Units, (self.raw,))

    def common(self, other: Units) -> int:
        """The largest ``n`` with ``self[:n] == other[:n]``: comparisons of their bytes, at C speed."""
        a, b = self.raw, other.raw
        if len(a) < len(b):
            a, b = b, a
        if a.startswith(b):  # the common case, one extending the other: no copy
            return len(b) // RAW
        lo, hi = 0, len(b) // RAW  # a[:lo] == b[:lo] and a[:hi] != b[:hi], in units
        while hi - lo > 1:  # each step compares only the half it asks about: n bytes copied in all
            mid = (lo + hi) // 2
            if a.startswith(b[lo * RAW : mid * RAW], lo * RAW):
                lo = mid
            else:
                hi = mid
        return lo


#: a request's units as the session keeps them: packed (:class:`Units`), or a tuple where one is not a
#: digest string
UnitSeq = tuple[str, ...] | Units


def as_units(units: Iterable[str]) -> UnitSeq:
    """``units`` as kept: a :class:`Units` or a tuple as it is (no copy), any other iterable as a tuple
    (never packed here: packing is the codecs' work, once per unit)."""
    if type(units) is Units or type(units) is tuple:
        return units
    return tuple(units)


class UnitBuffer(MutableSequence[str]):
    """A request's units while a codec builds them: digest strings appended one by one, a run's packed
    units (:class:`Units`, or a shelf's bytes) joined at C speed; :meth:`done` gives the request's units.

    A run's shelf is held by reference until :meth:`done` joins everything in one copy (under
    :data:`SHELF_LOCK`, which every shelf extension holds: a shelf is append-only, and this reads only
    the bytes it had when it was handed over). Packed while every unit is a digest string; a unit of
    another form turns it into a plain list (the request's units are then a tuple, as before)."""

    __slots__ = ("_buf", "_held", "_list", "_parts")

    def __init__(self, units: Iterable[str] = ()) -> None:
        self._buf: bytearray = bytearray()
        #: (buffer, its length when handed over) of the bytes before ``_buf``, and their sum
        self._parts: list[tuple[bytes | bytearray | memoryview, int]] = []
        self._held = 0
        self._list: list[str] | None = None
        if units and not (type(units) is list and _packed_into(self._buf, units)):
            del self._buf[:]
            self.extend(units)

    def __len__(self) -> int:
        if self._list is not None:
            return len(self._list)
        return (self._held + len(self._buf)) // RAW

    def _flat(self) -> bytearray:
        """The packed units as one bytearray (the parts held by reference copied in)."""
        if self._parts:
            flat = bytearray(self._joined())
            self._parts, self._buf, self._held = [], flat, 0
        return self._buf

    def _joined(self) -> bytes:
        chunks: list[bytes | bytearray | memoryview] = []
        with SHELF_LOCK:
            for b, k in self._parts:
                chunks.append(b if len(b) == k else b[:k])
            chunks.append(self._buf)
            return b"".join(chunks)

    def _plain(self) -> list[str]:
        if self._list is None:
            self._list = list(Units(bytes(self._flat())))
            self._buf = bytearray()
        return self._list

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> UnitBuffer: ...
    def __getitem__(self, i: int | slice) -> str | UnitBuffer:
        if isinstance(i, slice):
            return UnitBuffer(self.done()[i])
        return self._list[i] if self._list is not None else _item(self._flat(), i)

    @overload
    def __setitem__(self, i: int, value: str) -> None: ...
    @overload
    def __setitem__(self, i: slice, value: Iterable[str]) -> None: ...
    def __setitem__(self, i: int | slice, value: Any) -> None:
        if self._list is None and isinstance(i, int):
            raw = raw_digest(value)
            if raw is not None:
                buf = self._flat()
                k = _index(i, len(buf) // RAW, "UnitBuffer")
                buf[k * RAW : k * RAW + RAW] = raw
                return
        self._plain()[i] = value

    def __delitem__(self, i: int | slice) -> None:
        del self._plain()[i]

    def insert(self, index: int, value: str) -> None:
        self._plain().insert(index, value)

    def append(self, value: str) -> None:
        if self._list is None and _packed_into(self._buf, (value,)):
            return
        self._plain().append(value)

    def extend(self, values: Iterable[str]) -> None:
        if self._list is None:
            if type(values) is Units:
                self.extend_packed(values.raw)
                return
            items = values if isinstance(values, (list, tuple)) else list(values)
            at = len(self._buf)
            if _packed_into(self._buf, items):
                return
            del self._buf[at:]
            self._plain().extend(items)
            return
        self._list.extend(values)

    def extend_packed(self, raw: bytes | bytearray | memoryview, size: int | None = None) -> None:
        """Append packed units (32 bytes each): the first ``size`` bytes of ``raw`` (all of them unless
        given). A run's shelf (or a view of immutable bytes) is held by reference until :meth:`done`, which
        reads those bytes only."""
        size = len(raw) if size is None else size
        if self._list is not None:
            self._list.extend(Units(bytes(raw[:size])))
        elif size < 1024:
            self._buf += raw[:size]
        else:
            if self._buf:
                self._parts.append((bytes(self._buf), len(self._buf)))
                self._held += len(self._buf)
                self._buf = bytearray()
            self._parts.append((raw, size))
            self._held += size

    def done(self) -> UnitSeq:
        """The units built: :class:`Units`, or a tuple where one is not a digest string."""
        if self._list is not None:
            return tuple(self._list)
        units = _NEW(Units)
        _SET(units, "raw", self._joined() if self._parts else bytes(self._buf))
        return units


def _index(i: int, n: int, what: str) -> int:
    """Index ``i`` of a sequence of ``n`` units, counted from the end when negative (IndexError out of
    range, as a list's)."""
    k = i + n if i < 0 else i
    if not 0 <= k < n:
        raise IndexError(f"{what} index out of range")
    return k


def _item(buf: bytearray, i: int) -> str:
    k = _index(i, len(buf) // RAW, "UnitBuffer")
    return _PREFIX + buf[k * RAW : k * RAW + RAW].hex()


_NEW, _SET = object.__new__, object.__setattr__  # a Units made without the checks of its __init__
