"""The prefix guard: where a request diverges from an earlier one.

It works on prefix units (one digest per tool, system block or message content block, in prompt order,
as each codec defines them) or on token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["common_prefix_len", "divergence"]


def common_prefix_len(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The largest ``n`` with ``a[:n] == b[:n]`` (slice comparisons, so it runs at C speed)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def divergence(units: Sequence[str], previous: Sequence[str]) -> int | None:
    """The first unit index where ``units`` differs from ``previous``; None when ``units`` extends it.

    Invariant: ``units[:d] == previous[:d]`` and (``d == len(previous)`` or ``units[d] != previous[d]``)
    for the returned ``d``, except that None means ``units[:len(previous)] == previous``.
    """
    d = common_prefix_len(tuple(units), tuple(previous))
    return None if d == len(previous) else d
