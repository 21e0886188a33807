"""``TokenIds``: a view of a shared append-only buffer behaves exactly like the tuple of its ids.

The oracle is plain tuples and ``hashlib`` over ``array('q')`` bytes: every operation of a view (slices,
equality, extension, the seal, the shared prefix) is checked against what the same tuple gives.
"""

from __future__ import annotations

import array
import hashlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reasonstate.state import ExecutionRecord, TokenIds, Usage, ids_digest, ids_seal

IDS = st.lists(st.integers(min_value=0, max_value=2**40), max_size=40)
SMALL = st.lists(st.integers(min_value=0, max_value=3), max_size=12)  # collisions: shared prefixes


def sha(ids: tuple[int, ...]) -> str:
    return "sha256:" + hashlib.sha256(array.array("q", ids).tobytes()).hexdigest()


def lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(IDS, st.data())
def test_a_view_reads_like_its_tuple(ids: list[int], data: st.DataObject) -> None:
    t = tuple(ids)
    v = TokenIds(ids)
    assert len(v) == len(t) and v.as_tuple() == t and tuple(v) == t and tuple(reversed(v)) == t[::-1]
    assert v == t and t == v and (v != t) is False and hash(v) == hash(t)
    assert v != list(t) and v != (*t, 0)
    start = data.draw(st.integers(-50, 50) | st.none())
    stop = data.draw(st.integers(-50, 50) | st.none())
    step = data.draw(st.sampled_from([None, 1, 2, -1, 3]))
    assert v[start:stop:step] == t[start:stop:step]
    assert tuple(v.after(start or 0)) == t[max(start or 0, 0) :]
    for i in range(-len(t), len(t)):
        assert v[i] == t[i]
    with pytest.raises(IndexError):
        v[len(t)]
    if t:
        assert t[0] in v
    assert pickle.loads(pickle.dumps(v)) == v
    assert ids_digest(v) == ids_digest(t) == sha(t)


@given(SMALL, SMALL, SMALL, st.data())
def test_extensions_share_the_buffer_and_never_change_an_earlier_view(
    base: list[int], first: list[int], second: list[int], data: st.DataObject
) -> None:
    v = TokenIds(base)
    a = v.extended(first)
    assert a == (*base, *first) and v == tuple(base)
    same = v.extended(first)  # a retry: the buffer already holds these ids after v
    assert same == a
    at = data.draw(st.integers(0, len(base)))
    b = v.extended(second, at=at)  # a fork: another continuation of v's first ``at`` ids
    assert b == (*base[:at], *second)
    assert a == (*base, *first) and v == tuple(base)  # nothing seen before changed
    c = a.extended(second)
    assert c == (*base, *first, *second) and b == (*base[:at], *second)
    with pytest.raises(ValueError):
        v.extended(first, at=len(base) + 1)


@given(SMALL, SMALL, SMALL, SMALL)
def test_seals_and_shared_prefixes_equal_the_tuple_figures(
    base: list[int], add: list[int], completion: list[int], other: list[int]
) -> None:
    p = TokenIds(base)
    q = p.extended(add)
    r = TokenIds(other)
    for view in (p, q, r, p):  # p again: its buffer's running hash is past it by now
        t = view.as_tuple()
        assert view.digest_with(completion) == sha((*t, *completion)) == ids_seal(view, tuple(completion))
        assert ids_seal(t, tuple(completion)) == sha((*t, *completion))
        for prompt in (p, q, r):
            pt = prompt.as_tuple()
            assert view.common_prefix_len(prompt) == lcp(t, pt) == view.common_prefix_len(pt)
            assert view.shared_with(prompt, completion) == lcp(t, (*pt, *completion))


def test_a_record_seal_covers_prompt_and_completion_whatever_holds_the_prompt() -> None:
    p = TokenIds([5, 6, 7]).extended([8])
    record = ExecutionRecord(
        index=0,
        turn=0,
        step=0,
        request_digest="sha256:0",
        request_bytes=0,
        prefix_fingerprint="f",
        units=0,
        breakpoints=(),
        divergence=None,
        predicted_cache_read=None,
        usage=Usage(),
        duration_s=0.0,
        model="m",
        prompt_ids=p,
        completion_ids=(9,),
        ids_seal=sha((5, 6, 7, 8, 9)),
    )
    record.verify_ids()
    object.__setattr__(record, "prompt_ids", (5, 6, 7, 8))
    record.verify_ids()
    object.__setattr__(record, "prompt_ids", (5, 6, 7, 1))
    with pytest.raises(Exception, match="changed since they were recorded"):
        record.verify_ids()


def test_a_view_is_immutable() -> None:
    v = TokenIds([1, 2])
    with pytest.raises(AttributeError):
        v._n = 1  # type: ignore[misc]


def test_ids_no_live_view_covers_are_rewritten_in_place_and_covered_ones_fork() -> None:
    v = TokenIds([1, 2, 3])
    probe = v.extended([4, 5])  # a request built to predict, then dropped
    del probe
    real = v.extended([6, 7])
    assert real == (1, 2, 3, 6, 7) and real._buf is v._buf  # the dropped ids were rewritten: no copy
    other = v.extended([8])  # ``real`` is alive: its ids stay, this one forks
    assert other == (1, 2, 3, 8) and other._buf is not v._buf
    assert real == (1, 2, 3, 6, 7) and v == (1, 2, 3)
    assert real.digest_with((9,)) == sha((1, 2, 3, 6, 7, 9))
