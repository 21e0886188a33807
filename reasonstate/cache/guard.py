"""The prefix guard: first divergence between requests, and the cache read an explicit-breakpoint cache
should report.

Both work on prefix units (one digest per tool, system block or message content block, in prompt order).
Token counts are never estimated here: they are learned from what the vendor reported for earlier
requests (a request's prompt tokens are the token count of its whole unit chain), so a prediction is
either exact or ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence

from reasonstate.state import ExecutionRecord

__all__ = ["divergence", "predict_breakpoint_cache"]

#: how many earlier requests the predictor considers (vendor caches live minutes, not sessions)
RECENT = 64


def divergence(units: Sequence[str], previous: Sequence[str]) -> int | None:
    """The first unit index where ``units`` differs from ``previous``; None when ``units`` extends it.

    Invariant: ``units[:d] == previous[:d]`` and (``d == len(previous)`` or ``units[d] != previous[d]``)
    for the returned ``d``, except that None means ``units[:len(previous)] == previous``.
    """
    n = min(len(units), len(previous))
    if tuple(units[:n]) == tuple(previous[:n]) and len(units) >= len(previous):
        return None
    lo, hi = 0, n
    # binary search on prefix equality: tuple slices compare in C, so this is O(n) with a tiny constant
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tuple(units[:mid]) == tuple(previous[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def predict_breakpoint_cache(
    units: Sequence[str],
    breakpoints: Sequence[int],
    records: Sequence[ExecutionRecord],
    *,
    lookback: int,
    min_tokens: int,
    prefix_units: int,
) -> int | None:
    """The cache read an Anthropic-style cache reports for a request (protocols.md §4.4).

    A cache entry exists for every earlier request's full unit chain (its last breakpoint is its newest
    message) when its prompt had at least ``min_tokens`` tokens. An entry is read when it is an exact
    prefix of this request ending at most ``lookback`` units before one of this request's breakpoints.
    The hit is the largest such entry's token count. When nothing known matches but an earlier request
    with the same stable prefix may have cached that prefix alone (of unknown size), the answer is None.
    """
    best = 0
    matched_prefix_only = False
    units_t = tuple(units)
    for rec in reversed(records[-RECENT:]):
        n = len(rec.blocks)
        if n > len(units_t) or units_t[:n] != rec.blocks:
            if prefix_units and rec.blocks[:prefix_units] == units_t[:prefix_units]:
                matched_prefix_only = True
            continue
        tokens = rec.usage.prompt_tokens
        if tokens < min_tokens or tokens <= best:
            continue
        if any(n <= b <= n + lookback for b in breakpoints):
            best = tokens
    if best == 0 and matched_prefix_only:
        return None
    return best
