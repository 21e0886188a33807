"""The execution records older than the newest ``UNIT_WINDOW`` are packed (a few ints, the digest's 32
bytes, references to shared values) and rebuilt equal on access, so the execution layer costs a small
constant per request (issue 21: session state <= 3x the content; each record was ~500 bytes of Python
objects). Reading, iterating, slicing, comparing and forking behave as they did on a tuple of records.
"""

from __future__ import annotations

import hashlib
import sys

import attrs
import pytest

from reasonstate.state import UNIT_WINDOW, ExecutionRecord, Records, Usage
from reasonstate.state.execution import packed_usage, unpacked_usage
from reasonstate.state.history import Step, TextPart

N = 3 * UNIT_WINDOW + 5


def _record(i: int, *, model: str = "m", ids: bool = False) -> ExecutionRecord:
    """A record written field by field (the oracle the rebuilt ones are compared with)."""
    return ExecutionRecord(
        index=i,
        turn=i // 2,
        step=i % 2,
        request_digest="sha256:" + hashlib.sha256(str(i).encode()).hexdigest(),
        request_bytes=1000 + 37 * i,
        prefix_fingerprint="sha256:" + "ab" * 32,
        units=i + 3,
        breakpoints=(2, i + 3),
        divergence=None if i % 5 else i,
        predicted_cache_read=None if i % 7 == 0 else 10 * i,
        usage=Usage(uncached_input=5 + i, cache_read=100 * i, output=7),
        duration_s=0.001 * i + 1e-9,
        model=model,
        prompt_ids=(1, 2, i) if ids else None,
        output_unit=f"out-{i}" if i % 3 == 0 else None,
    )


def _grown(records: list[ExecutionRecord]) -> Records:
    out = Records()
    for r in records:
        out = out.appended(r, [f"u{k}" for k in range(r.units)], shared=None)
    return out


def test_every_record_reads_back_equal_to_what_was_appended() -> None:
    originals = [_record(i, ids=i == 10) for i in range(N)]
    records = _grown(originals)
    assert len(records) == N
    assert list(records) == originals
    assert [records[i] for i in range(N)] == originals
    assert [records[i - N] for i in range(N)] == originals
    assert records[5:9] == tuple(originals[5:9])
    assert records[-3:] == tuple(originals[-3:])
    assert records == tuple(originals)
    assert records[10].prompt_ids == (1, 2, 10)  # a record the columns cannot hold is kept whole
    with pytest.raises(IndexError):
        records[N]


def test_the_newest_records_are_the_objects_appended() -> None:
    originals = [_record(i) for i in range(N)]
    records = _grown(originals)
    assert all(records[i] is originals[i] for i in range(N - 2, N))


def test_two_values_appended_to_one_base_never_see_each_others_records() -> None:
    base = _grown([_record(i) for i in range(N)])
    a = base.appended(_record(N, model="a"), ["x"] * (N + 3))
    b = base.appended(_record(N, model="b"), ["y"] * (N + 3))
    a2 = a.appended(_record(N + 1, model="a"), ["x"] * (N + 4))
    b2 = b.appended(_record(N + 1, model="b"), ["y"] * (N + 4))
    assert [r.model for r in a2[N:]] == ["a", "a"]
    assert [r.model for r in b2[N:]] == ["b", "b"]
    assert list(base) == [_record(i) for i in range(N)]
    assert len(base) == N
    assert a2[:N] == b2[:N] == tuple(base)


def test_packed_records_cost_a_small_constant_each() -> None:
    originals = [_record(i) for i in range(1000)]
    records = _grown(originals)
    packed = records._packed
    assert packed is not None
    # the ints hold each row's fingerprint and model ids and breakpoint end too
    size = sum(sys.getsizeof(x) for x in (packed.ints, packed.digests, packed.durations, packed.usages))
    size += sys.getsizeof(packed.outputs)
    assert size / len(packed) < 150  # each built record with its own ints and digest: ~500 bytes


def test_the_cache_reads_each_requests_figures_without_building_its_record() -> None:
    """Issue 21: only the newest records stay built; the cache prediction reads the unit count, usage and
    output unit of every request in the window from the packed columns, equal to the records'."""
    originals = [_record(i) for i in range(N)]
    originals[N - 10] = attrs.evolve(originals[N - 10], request_bytes=1 << 31)  # past a C int: kept whole
    records = _grown(originals)
    shares = records.shares([f"u{k}" for k in range(N + 3)])
    assert [p for p, _, _ in shares] == list(range(N - UNIT_WINDOW, N))
    for position, use, shared in shares:
        r = originals[position]
        assert (use.units, use.usage, use.output_unit) == (r.units, r.usage, r.output_unit)
        assert shared == r.units
    assert records[N - 10] is originals[N - 10] and list(records) == originals
    assert [r.breakpoints for r in records] == [(2, i + 3) for i in range(N)]


_USAGES = [
    Usage(),
    Usage(uncached_input=5, output=7),
    Usage(uncached_input=0, cache_read=15950, cache_write=64, output=19, reasoning=15),
    Usage(uncached_input=3, cache_read=1, cache_write=2, output=0, reasoning=0),  # reasoning 0 is not None
    Usage(
        uncached_input=1 << 40, cache_read=(1 << 200) + 3, cache_write=9, output=1 << 33, reasoning=1 << 32
    ),
    Usage(uncached_input=1, cache_read=2, cache_write=300, output=4, reasoning=None, cache_write_1h=299),
]


@pytest.mark.parametrize("usage", _USAGES, ids=range(len(_USAGES)))
def test_a_usage_packs_into_one_int_and_reads_back_equal(usage: Usage) -> None:
    """A step's usage (and an old record's) is kept as one int, rebuilt equal on access (issue 21: a Usage
    was 80 bytes and each count above 256 28 more, per step)."""
    packed = packed_usage(usage)
    assert type(packed) is int
    back = unpacked_usage(packed)
    assert type(back) is Usage and back == usage
    assert [getattr(back, f.name) for f in attrs.fields(Usage)] == [
        getattr(usage, f.name) for f in attrs.fields(Usage)
    ]
    assert back.prompt_tokens == usage.uncached_input + usage.cache_read + usage.cache_write
    assert packed_usage(Usage(*attrs.astuple(usage))) == packed  # equal values, equal packings


def test_a_value_that_is_not_a_usage_is_kept_as_it_is() -> None:
    class Mine(Usage):
        pass

    mine = Mine(uncached_input=1)
    assert packed_usage(mine) is mine and unpacked_usage(mine) is mine


def test_a_step_keeps_its_usage_packed_and_reads_it_back() -> None:
    usage = _USAGES[2]
    step = Step(parts=(TextPart("Hi."),), continuation=(), stop_reason="end_turn", usage=usage, model="m")
    assert step.usage == usage and type(step.usage) is Usage
    assert step == Step(
        parts=(TextPart("Hi."),), continuation=(), stop_reason="end_turn", usage=usage, model="m"
    )
    assert step != attrs.evolve(step, usage=_USAGES[1])
    assert attrs.evolve(step, usage=_USAGES[1]).usage == _USAGES[1]
    assert attrs.evolve(step, model="n").usage == usage  # the packed value carried as it is
    assert repr(usage) in repr(step)
    assert hash(step) == hash(attrs.evolve(step, model="m"))


def test_an_old_records_usage_is_the_steps_own_int() -> None:
    """A record leaving the window keeps its usage packed: the very int its step keeps (packed from the same
    value a few requests before), so a request's usage is held once."""
    usages = [Usage(uncached_input=i, cache_read=1000 + i, output=7) for i in range(N)]
    steps = [Step(parts=(), continuation=(), stop_reason="end_turn", usage=u, model="m") for u in usages[:N]]
    records = _grown([attrs.evolve(_record(i), usage=usages[i]) for i in range(N)])
    packed = records._packed
    old = len(packed) - UNIT_WINDOW
    assert old > 0
    assert all(packed.usages[i] is steps[i]._usage for i in range(old))
    assert all(type(packed.usages[i]) is Usage for i in range(old, len(packed)))  # the window: as given
    assert [r.usage for r in records] == usages


def test_a_young_records_holds_no_packed_columns_and_many_models_read_back() -> None:
    """Issue 21 (fixed cost of a young session): no columns until a record is packed; the shared strings
    (models, fingerprints) are found by a scan while few and by a table beyond, equal either way."""
    two = _grown([_record(0), _record(1)])
    assert two._packed is None and list(two) == [_record(0), _record(1)]
    originals = [_record(i, model=f"model-{i % 13}") for i in range(N)]
    records = _grown(originals)
    assert records._packed is not None and records._packed.name_ids is not None
    assert list(records) == originals
    fork = _grown(originals[:20]).appended(_record(20, model="other"), ["u"] * 23)
    assert [r.model for r in fork] == [r.model for r in originals[:20]] + ["other"]
