"""Unit digests kept packed (issue 21): ``Units`` reads as the tuple of ``"sha256:<hex>"`` strings it
stands for.

The oracle is hashlib and hand-built strings, never the code under test."""

from __future__ import annotations

import gc
import hashlib

import attrs
import pytest

from reasonstate.errors import ContinuationMismatch
from reasonstate.state import Continuation, ExecutionRecord, Usage
from reasonstate.state.execution import Records, UnitChain, common_prefix_len
from reasonstate.state.units import UnitBuffer, Units, as_units, raw_digest

_NONE: tuple[str, ...] = ()


def _record(i: int, units: int) -> ExecutionRecord:
    return ExecutionRecord(
        index=i,
        turn=i,
        step=0,
        request_digest=_d(-i),
        request_bytes=100,
        prefix_fingerprint=_d(7),
        units=units,
        breakpoints=(),
        divergence=None,
        predicted_cache_read=None,
        usage=Usage(uncached_input=5),
        duration_s=0.5,
        model="m",
    )


def _d(i: int) -> str:
    return "sha256:" + hashlib.sha256(str(i).encode()).hexdigest()


def test_units_read_as_their_strings() -> None:
    strings = tuple(_d(i) for i in range(5))
    units = Units.of(strings)
    assert type(units) is Units and len(units.raw) == 5 * 32
    assert units == strings and strings == units and tuple(units) == strings
    assert units[0] == strings[0] and units[-1] == strings[-1] and list(units) == list(strings)
    assert units[1:3] == strings[1:3] and type(units[1:3]) is Units and units[::2] == strings[::2]
    assert hash(units) == hash(strings) and {strings: 1}[units] == 1
    assert strings[2] in units and _d(9) not in units and "x" not in units
    assert units + Units.of(strings[:1]) == (*strings, strings[0]) and units + _NONE == strings
    with pytest.raises(IndexError):
        units[5]


def test_other_strings_stay_a_tuple() -> None:
    assert Units.of(("a", _d(1))) == ("a", _d(1)) and type(Units.of(("a",))) is tuple
    upper = "sha256:" + hashlib.sha256(b"1").hexdigest().upper()
    assert raw_digest(upper) is None and raw_digest(_d(1)) == hashlib.sha256(b"1").digest()
    assert raw_digest("sha256:" + "g" * 64) is None and raw_digest(_d(1)[:-1]) is None


def test_common_prefix_len_packed_agrees_with_strings() -> None:
    a = tuple(_d(i) for i in range(300))
    for b in (a, a[:120], (*a[:77], _d(-1), *a[78:]), (_d(-2),), (), (*a, _d(1000))):
        expected = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        assert common_prefix_len(Units.of(a), Units.of(b)) == expected
        assert common_prefix_len(Units.of(a), b) == expected  # one side plain strings
        assert common_prefix_len(a, Units.of(b)) == expected


def test_buffer_packs_until_another_string() -> None:
    buf = UnitBuffer([_d(0)])
    buf.extend(Units.of((_d(1), _d(2))))
    buf.append(_d(3))
    buf[-1] = _d(4)
    assert len(buf) == 4 and buf[1] == _d(1)
    done = buf.done()
    assert type(done) is Units and done == (_d(0), _d(1), _d(2), _d(4))
    other = UnitBuffer([_d(0)])
    other.extend([_d(1), "x"])  # one string that is no digest: all of them kept as strings
    assert other.done() == (_d(0), _d(1), "x") and len(other) == 3
    buf.append("tools")  # not a digest: the request's units are strings from here on
    assert buf.done() == (_d(0), _d(1), _d(2), _d(4), "tools") and type(buf.done()) is tuple


def test_records_keep_packed_units_equal_to_strings() -> None:
    strings = [tuple(_d(k) for k in range(n)) for n in (3, 5, 4)]
    packed = Records.of((_record(i, len(u)), Units.of(u)) for i, u in enumerate(strings))
    plain = Records.of((_record(i, len(u)), u) for i, u in enumerate(strings))
    assert packed.newest_units() == strings[-1] and type(packed.newest_units()) is Units
    assert [packed.units_of(i) for i in range(3)] == [plain.units_of(i) for i in range(3)]
    assert packed.chains == plain.chains and packed == plain
    assert as_units(strings[0]) is strings[0]
    chain = UnitChain("m", 0, Units.of(strings[0])).appended(1, Units.of(strings[1]))
    assert chain.older == ((0, 3, ()),)


def test_a_payload_keeps_no_digest_string_and_still_refuses_an_edit() -> None:
    c = Continuation.capture(
        vendor="v", api="a", model="m", kind="thinking", value={"type": "thinking", "x": 1}
    )
    expected = "sha256:" + hashlib.sha256(b'{"type":"thinking","x":1}').hexdigest()
    assert c.digest == expected and c.payload == b'{"type":"thinking","x":1}'
    assert not [o for o in gc.get_referents(c) if isinstance(o, str) and o.startswith("sha256:")]
    c.verify()
    assert attrs.evolve(c, vendor="stripped").digest == expected  # provenance changed, payload kept
    attrs.evolve(c, vendor="stripped").verify()
    edited = attrs.evolve(c, payload=b'{"type":"thinking","x":2}')
    assert edited.digest == expected  # the digest captured, not the new bytes'
    with pytest.raises(ContinuationMismatch):
        edited.verify()
    given = Continuation(vendor="v", api="a", model="m", kind="k", payload=b"{}", digest="sha256:" + "0" * 64)
    assert given.digest == "sha256:" + "0" * 64
    with pytest.raises(ContinuationMismatch):
        given.verify()
    same = Continuation(vendor="v", api="a", model="m", kind="thinking", payload=c.payload, digest=expected)
    assert same == c and hash(same) == hash(c)
    same.verify()
    object.__setattr__(same, "payload", b'{"type":"thinking","x":3}')  # an edit in memory
    with pytest.raises(ContinuationMismatch):
        same.verify()


def test_a_shelf_grown_after_it_was_handed_over_is_read_as_it_was() -> None:
    shelf = bytearray(b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(40)))
    buf = UnitBuffer([_d(-1)])
    buf.extend_packed(shelf, 32 * 39)  # a run's share of a shelf: its first 39 units
    shelf += bytes(32)  # another run appends to the shared shelf meanwhile
    assert buf.done() == (_d(-1), *(_d(i) for i in range(39))) and len(buf) == 40
