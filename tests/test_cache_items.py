"""The ``items`` cache predictor (OpenAI Responses §1.5, Gemini §5.3) derives each earlier request's shared
prefix with this one from the records' unit chains (``Records``: the newest request's units, and each
earlier request's difference from the next newer one), instead of comparing every earlier request with
this one. Here it is checked against the direct definition on random unit chains: prefixes of each other,
diverging, repeated, shorter and longer than the request, across several requests on the same records,
and with requests of another model in between.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonstate.cache import rules
from reasonstate.cache.rules import common_prefix_len
from reasonstate.state import UNIT_WINDOW, ExecutionRecord, Records, Usage

UNITS = st.lists(st.sampled_from("abc"), min_size=1, max_size=12).map(lambda u: ("ns", *u))


def _record(
    index: int, blocks: tuple[str, ...], prompt: int, model: str = "gemini-3-flash"
) -> ExecutionRecord:
    return ExecutionRecord(
        index=index,
        turn=index,
        step=0,
        request_digest="-",
        request_bytes=0,
        prefix_fingerprint="-",
        units=len(blocks),
        breakpoints=(),
        divergence=None,
        predicted_cache_read=None,
        usage=Usage(uncached_input=prompt),
        duration_s=0.0,
        model=model,
    )


Pair = tuple[ExecutionRecord, tuple[str, ...]]


def _reference(rules_: rules.CacheRules, model: str, units: tuple[str, ...], pairs: list[Pair]) -> int | None:
    """The predictor's definition: the request compared with every earlier one (docs/protocols.md §1.5)."""
    same = [(r, b) for r, b in pairs if b and units and b[0] == units[0]]
    if not same:
        return 0
    shared = [(r, b, common_prefix_len(units, b)) for r, b in same]
    m = max(s for _, _, s in shared)
    known = next((r.usage.prompt_tokens for r, b, s in shared if s == len(b) == m), None)
    inside = any(s == m < len(b) for _, b, s in shared) and m < len(units)
    if known is None or inside:
        return 0 if max(r.usage.prompt_tokens for r, _ in same) < rules_.minimum(model) else None
    return rules_.reported(known, model)


def _chains(draw: st.DrawFn) -> list[tuple[str, ...]]:
    """Unit chains as a session makes them: mostly each extending the one before, sometimes diverging."""
    chains = [draw(UNITS)]
    for _ in range(draw(st.integers(0, 8))):
        previous = chains[-1]
        kind = draw(st.sampled_from(["extend", "extend", "diverge", "repeat", "other"]))
        if kind == "extend":
            chains.append((*previous, *draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=4))))
        elif kind == "diverge":
            cut = draw(st.integers(1, len(previous)))
            chains.append((*previous[:cut], *draw(st.lists(st.sampled_from("xyz"), max_size=4))))
        elif kind == "repeat":
            chains.append(tuple(previous))  # an equal chain, another tuple
        else:
            chains.append(draw(UNITS))
    return chains


@given(data=st.data())
def test_shared_prefixes_and_predictions_equal_the_direct_definition(data: st.DataObject) -> None:
    chains = _chains(data.draw)
    pairs: list[Pair] = [(_record(i, c, 4 + 3 * len(c)), c) for i, c in enumerate(chains)]
    if data.draw(st.booleans()):  # another namespace in between (another cache key; or another model)
        model = data.draw(st.sampled_from(["gemini-3-flash", "gemini-3-pro"]))
        pairs.insert(
            data.draw(st.integers(0, len(pairs))), (_record(99, ("other", "a"), 50, model), ("other", "a"))
        )
    records = Records.of(pairs)
    cache = rules.CacheRules(scheme="items", source="test", min_tokens=data.draw(st.integers(0, 40)), step=3)
    for _ in range(3):  # the same records again
        units = data.draw(st.one_of(st.sampled_from(chains), UNITS, st.just(chains[-1] + ("a", "b"))))
        shares = records.shares(units)
        assert [s for _, _, s in shares] == [common_prefix_len(units, b) for _, b in pairs]
        assert [records.units_of(i) for i in range(len(pairs))] == [b for _, b in pairs]
        got = rules.predict_cache_read(cache, "gemini-3-flash", units, records)
        assert got == _reference(cache, "gemini-3-flash", units, pairs[-cache.recent :])


@given(data=st.data())
def test_predicting_as_a_session_does_equals_the_direct_definition(data: st.DataObject) -> None:
    """A session predicts each request before its record exists, then appends the record with the very
    unit tuple it predicted; the window of recent requests is narrower than the session here, so requests
    leave the chains as the session grows."""
    chains = _chains(data.draw) * data.draw(st.integers(1, 3))
    recent = data.draw(st.integers(1, 4))
    cache = rules.CacheRules(
        scheme="items", source="test", min_tokens=data.draw(st.integers(0, 40)), step=3, recent=recent
    )
    records = Records()
    pairs: list[Pair] = []
    for i, chain in enumerate(chains):
        units = tuple(list(chain))  # a new tuple per request, as codecs build them
        expected = _reference(cache, "gemini-3-flash", units, pairs[-cache.recent :])
        assert rules.predict_cache_read(cache, "gemini-3-flash", units, records) == expected
        record = _record(i, units, 4 + 3 * len(units))
        records = records.appended(record, units)
        pairs.append((record, units))


def test_the_window_keeps_each_models_newest_requests_and_one_tuple_each() -> None:
    # an append-only session: every earlier request's difference is empty, one tuple holds all the units
    records = Records()
    chain: tuple[str, ...] = ("ns",)
    for i in range(3 * UNIT_WINDOW):
        chain = (*chain, f"u{i}")
        records = records.appended(_record(i, chain, 10 * (i + 1)), chain)
    (kept,) = records.chains
    assert kept.units is chain and len(kept.older) == UNIT_WINDOW - 1
    assert all(tail == () for _, _, tail in kept.older)
    assert records.units_of(-UNIT_WINDOW) == chain[: len(chain) - UNIT_WINDOW + 1]
    assert records.units_of(-UNIT_WINDOW - 1) is None  # older than the window
    # another model's requests do not push this model's out of its window
    other = records.appended(_record(999, ("other",), 5, "gemini-3-pro"), ("other",))
    assert other.chain("gemini-3-flash") == kept and other.newest_units() == ("other",)
    assert other.units_of(-2) == chain
    cache = rules.CacheRules(scheme="items", source="test", min_tokens=0, step=1)
    assert rules.predict_cache_read(cache, "gemini-3-flash", (*chain, "next"), records) == 30 * UNIT_WINDOW


def test_a_plain_sequence_of_records_is_refused() -> None:
    cache = rules.CacheRules(scheme="items", source="test")
    record = _record(0, ("ns",), 10)
    assert rules.predict_cache_read(cache, "gemini-3-flash", ("ns",), []) == 0
    with pytest.raises(TypeError, match="without their units"):
        rules.predict_cache_read(cache, "gemini-3-flash", ("ns",), [record])
    with pytest.raises(ValueError, match="counts 1 units"):
        Records().appended(record, ("ns", "x"))
    with pytest.raises(ValueError, match="recent"):
        rules.CacheRules(scheme="items", source="test", recent=UNIT_WINDOW + 1)


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_the_common_prefix_of_long_tuples_compared_again_is_the_one_a_scan_finds(data: st.DataObject) -> None:
    """Issue 21: a request's units are compared with the previous request's several times, and the
    second comparison of the same two long tuples reads back the first one's figure; whatever pairs come
    in whatever order (the same objects, equal copies, other pairs in between), the figure is the naive
    scan's."""
    base = tuple(f"u{i}" for i in range(300))
    pairs = []
    for _ in range(4):
        cut = data.draw(st.integers(0, 300))
        tail = data.draw(st.lists(st.sampled_from("xyz"), max_size=5))
        pairs.append((*base[:cut], *tail))
    pairs.append(tuple(base))
    for _ in range(12):
        a = data.draw(st.sampled_from(pairs))
        b = data.draw(st.sampled_from(pairs))
        if data.draw(st.booleans()):
            a = tuple(list(a))  # an equal copy: another object
        naive = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert common_prefix_len(a, b) == naive
        assert common_prefix_len(a, b) == naive  # read back
