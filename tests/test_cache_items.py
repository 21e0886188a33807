"""The ``items`` cache predictor (OpenAI Responses §1.5, Gemini §5.3) derives each earlier request's shared
prefix with this one from the newest request and the earlier requests' own shared prefixes (memoized per
pair of records), instead of comparing every earlier request with this one. Here it is checked against the
direct definition on random unit chains: prefixes of each other, diverging, repeated, shorter and longer
than the request, across several requests on the same records (so the memo is hit), and after a record was
changed in memory.
"""

from __future__ import annotations

import gc

import attrs
from hypothesis import given
from hypothesis import strategies as st

from reasonstate.cache import rules
from reasonstate.cache.rules import common_prefix_len
from reasonstate.state import ExecutionRecord, Usage

UNITS = st.lists(st.sampled_from("abc"), min_size=1, max_size=12).map(lambda u: ("ns", *u))


def _record(index: int, blocks: tuple[str, ...], prompt: int) -> ExecutionRecord:
    return ExecutionRecord(
        index=index,
        turn=index,
        step=0,
        request_digest="-",
        request_bytes=0,
        prefix_fingerprint="-",
        blocks=blocks,
        breakpoints=(),
        divergence=None,
        predicted_cache_read=None,
        usage=Usage(uncached_input=prompt),
        duration_s=0.0,
        model="gemini-3-flash",
    )


def _reference(
    rules_: rules.CacheRules, model: str, units: tuple[str, ...], records: list[ExecutionRecord]
) -> int | None:
    """The predictor's definition: the request compared with every earlier one (docs/protocols.md §1.5)."""
    same = [r for r in records if r.blocks and units and r.blocks[0] == units[0]]
    if not same:
        return 0
    shared = [common_prefix_len(units, r.blocks) for r in same]
    m = max(shared)
    pairs = list(zip(same, shared, strict=True))
    known = next((r.usage.prompt_tokens for r, s in pairs if s == len(r.blocks) == m), None)
    inside = any(s == m < len(r.blocks) for r, s in pairs) and m < len(units)
    if known is None or inside:
        return 0 if max(r.usage.prompt_tokens for r in same) < rules_.minimum(model) else None
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
    records = [_record(i, c, 4 + 3 * len(c)) for i, c in enumerate(chains)]
    if data.draw(st.booleans()):  # another namespace in between (another model, another cache key)
        records.insert(data.draw(st.integers(0, len(records))), _record(99, ("other", "a"), 50))
    cache = rules.CacheRules(scheme="items", source="test", min_tokens=data.draw(st.integers(0, 40)), step=3)
    memo = rules.PredictionMemo()
    for _ in range(3):  # the same records again: the memoized pairs must give the same answers
        units = data.draw(st.one_of(st.sampled_from(chains), UNITS, st.just(chains[-1] + ("a", "b"))))
        same = [r for r in records if r.blocks[0] == units[0]]
        assert rules._shared(units, same, memo) == [common_prefix_len(units, r.blocks) for r in same]
        got = rules.predict_cache_read(cache, "gemini-3-flash", units, records, memo=memo)
        assert got == _reference(cache, "gemini-3-flash", units, records[-cache.recent :])


def test_a_record_changed_in_memory_is_compared_again() -> None:
    a, b = _record(0, ("ns", "a"), 10), _record(1, ("ns", "a", "b", "c"), 20)
    q = ("ns", "a", "b", "c", "d")
    memo = rules.PredictionMemo()
    assert rules._shared(q, [a, b], memo) == [2, 4]
    object.__setattr__(a, "blocks", ("ns", "a", "b", "x"))  # the pair's memo no longer holds
    assert rules._shared(q, [a, b], memo) == [3, 4]
    a2 = attrs.evolve(a, blocks=("ns", "z"))  # another record in the same place
    assert rules._shared(q, [a2, b], memo) == [1, 4]


def test_the_memo_goes_with_its_records() -> None:
    records = [_record(i, ("ns", *"abc"[: i + 1]), 10) for i in range(3)]
    memo = rules.PredictionMemo()
    rules._shared(("ns", "a", "b", "c"), records, memo)
    keys = {id(r) for r in records[1:]}
    assert keys <= set(memo._pairs)
    del records
    gc.collect()
    assert not keys & set(memo._pairs)


@given(data=st.data())
def test_predicting_as_a_session_does_equals_the_direct_definition(data: st.DataObject) -> None:
    """A session predicts each request before its record exists, and the record keeps that very unit
    tuple: the shortcut that answers from the newest record alone (when it is a prefix of the request and
    was contained in no earlier request) is taken here, and must agree with the definition."""
    chains = _chains(data.draw)
    cache = rules.CacheRules(scheme="items", source="test", min_tokens=data.draw(st.integers(0, 40)), step=3)
    records: list[ExecutionRecord] = []
    memo = rules.PredictionMemo()  # the session's: the finding of each prediction is kept in it
    fresh = data.draw(st.booleans())  # a new tuple per request (as codecs build them), or a repeated one
    for i, chain in enumerate(chains):
        units = tuple(list(chain)) if fresh else chain  # the very tuple the record keeps as its blocks
        expected = _reference(cache, "gemini-3-flash", units, records[-cache.recent :])
        assert rules.predict_cache_read(cache, "gemini-3-flash", units, records, memo=memo) == expected
        records.append(_record(i, units, 4 + 3 * len(units)))


def test_the_shortcut_is_taken_on_an_append_only_session() -> None:
    cache = rules.CacheRules(scheme="items", source="test", min_tokens=0, step=1)
    records: list[ExecutionRecord] = []
    chain: tuple[str, ...] = ("ns",)
    memo = rules.PredictionMemo()
    for i in range(5):
        chain = (*chain, f"u{i}")
        rules.predict_cache_read(cache, "gemini-3-flash", chain, records, memo=memo)
        records.append(_record(i, chain, 10 * (i + 1)))
    # the newest record was remembered as contained in no earlier request: a request extending it is
    # answered from it alone (the slow path would compare every record)
    assert rules._extends_uncontained((*chain, "next"), records[-1].blocks, memo, cache.recent)
    assert rules.predict_cache_read(cache, "gemini-3-flash", (*chain, "next"), records, memo=memo) == 50
    # a request that does not extend the newest record takes the full comparison, and so does a record
    # whose units have no finding in the memo (restored from a snapshot: another tuple), or only one made
    # over a narrower window of records, or in another memo
    assert not rules._extends_uncontained(("ns", "u0", "x"), records[-1].blocks, memo, cache.recent)
    assert not rules._extends_uncontained(
        (*chain, "next"), tuple(list(records[-1].blocks)), memo, cache.recent
    )
    assert not rules._extends_uncontained((*chain, "next"), records[-1].blocks, memo, cache.recent + 1)
    assert not rules._extends_uncontained((*chain, "next"), records[-1].blocks, rules.PredictionMemo(), 64)
