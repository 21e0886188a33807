"""Each vendor's prefix cache, as data (granularity, minimums, breakpoints and lookback, with the source),
and the cache read a vendor will report for a request, predicted from that data before it is sent.

Token counts are never estimated: they are learned from what the vendor reported for earlier requests (a
request's prompt tokens are the token count of its whole unit chain), so a prediction is either exact or
``None`` (not knowable). One function per :data:`Scheme`, all reading :class:`CacheRules`. Each vendor's
entry lives in its room (``reasonstate.adapters.anthropic.ANTHROPIC``, ``openai_responses.OPENAI_RESPONSES``,
``openai_chat.OPENAI_CHAT`` / ``DEEPSEEK`` / ``SELF_HOSTED_CHAT``, ``gemini.GEMINI``, ``tokens.TOKENS_VLLM``
/ ``TOKENS_SGLANG``), where its codec and its breakpoint placement read it; every entry cites
``docs/protocols.md``.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import attrs

from reasonstate.state import ExecutionRecord

__all__ = [
    "NEVER",
    "CacheRules",
    "PredictedRequest",
    "PredictionMemo",
    "Scheme",
    "common_prefix_len",
    "divergence",
    "predict_cache_read",
    "predict_request",
    "shared_tokens",
]


# -- the bare measure of where two unit chains (or token-id sequences) part: read by the prediction here,
# by every request's execution record (its divergence from the previous one) and by the cause analysis


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


#: ``breakpoints``: explicit ``cache_control`` markers (Anthropic); ``items``: automatic caching of any
#: earlier prompt, matched by input item (OpenAI Responses); ``messages``: the same, per chat message
#: (OpenAI Chat, vLLM, SGLang); ``persisted``: DeepSeek's disk cache of request and output units;
#: ``tokens``: a self-hosted engine's KV blocks over token ids
Scheme = Literal["breakpoints", "items", "messages", "persisted", "tokens"]


@attrs.frozen(slots=True, cache_hash=True)
class CacheRules:
    """How one vendor API's prefix cache behaves.

    * ``min_tokens``: nothing is cached (or reported) below this many matched tokens; per model where the
      vendor's table differs (``min_tokens_by_model``: model-name fragments → minimum, first match wins);
    * ``step``: past the minimum, the reported hit is rounded down to ``min_tokens + step * k``
      (``step == 1``: exact); for ``tokens``/``messages`` on a self-hosted engine, ``block`` is the KV block;
    * ``max_breakpoints`` / ``lookback_units``: explicit breakpoints per request, and how many units before
      a breakpoint the vendor looks for an earlier cache entry;
    * ``recent``: how many earlier requests a prediction considers (caches live minutes, not sessions).
    """

    scheme: Scheme
    source: str
    min_tokens: int = 0
    min_tokens_by_model: tuple[tuple[tuple[str, ...], int], ...] = ()
    step: int = 1
    block: int = 1
    max_breakpoints: int = 0
    lookback_units: int = 0
    recent: int = 64

    def minimum(self, model: str) -> int:
        """The minimum cacheable prompt length for ``model`` (a few fragment searches)."""
        m = model.lower()
        for fragments, tokens in self.min_tokens_by_model:
            if any(f in m for f in fragments):
                return tokens
        return self.min_tokens

    def reported(self, matched: int, model: str = "") -> int:
        """The cache read the vendor reports for ``matched`` shared prompt tokens."""
        floor = self.minimum(model)
        if matched < floor:
            return 0
        return floor + self.step * ((matched - floor) // self.step)


#: a minimum no prompt reaches: the model has no implicit cache
NEVER = 1 << 62


class PredictedRequest(Protocol):
    """A request as the cache prediction reads it (an adapter's ``VendorRequest``)."""

    @property
    def model(self) -> str: ...
    @property
    def units(self) -> Sequence[str]: ...
    @property
    def breakpoints(self) -> Sequence[int]: ...
    @property
    def prefix_units(self) -> int: ...
    @property
    def prompt_ids(self) -> Sequence[int] | None: ...


def predict_request(
    rules: CacheRules,
    request: PredictedRequest,
    records: Sequence[ExecutionRecord],
    memo: PredictionMemo | None = None,
) -> int | None:
    """:func:`predict_cache_read` for ``request``: the cache read the vendor will report for it (None: not
    knowable); ``memo``: the session's prediction memo (None: a fresh one)."""
    return predict_cache_read(
        rules,
        request.model,
        request.units,
        records,
        breakpoints=request.breakpoints,
        prefix_units=request.prefix_units,
        prompt_ids=request.prompt_ids,
        memo=memo,
    )


def predict_cache_read(
    rules: CacheRules,
    model: str,
    units: Sequence[str],
    records: Sequence[ExecutionRecord],
    *,
    breakpoints: Sequence[int] = (),
    prefix_units: int = 0,
    prompt_ids: Sequence[int] | None = None,
    memo: PredictionMemo | None = None,
) -> int | None:
    """What the vendor will report as cache read for a request with these prefix ``units``.

    ``breakpoints`` and ``prefix_units`` matter for explicit breakpoints, ``prompt_ids`` for token-level
    engines. ``records`` are the session's earlier successful requests, oldest first. ``memo``: what
    earlier predictions on these records learned (the caller's, one per session or guard; None: a fresh
    one, so nothing is reused). The answer is the same whatever the memo holds.
    """
    if rules.scheme == "breakpoints":  # entries of other models are never read: filter before the window
        own: list[ExecutionRecord] = []
        for r in reversed(records):  # the newest ``recent`` of this model, without a pass over all records
            if r.model == model:
                own.append(r)
                if len(own) == rules.recent:
                    break
        own.reverse()
        return _breakpoints(rules, model, units, own, breakpoints, prefix_units)
    recent = records[-rules.recent :]
    if rules.scheme == "items":
        return _items(rules, model, units, recent, PredictionMemo() if memo is None else memo)
    if rules.scheme == "tokens":
        return _tokens(rules, prompt_ids or (), recent)
    return _messages(rules, model, units, recent)


def _breakpoints(
    rules: CacheRules,
    model: str,
    units: Sequence[str],
    records: Sequence[ExecutionRecord],
    breakpoints: Sequence[int],
    prefix_units: int,
) -> int | None:
    """Explicit breakpoints (docs/protocols.md §4.4).

    A cache entry exists for every earlier request's full unit chain (its last breakpoint is its newest
    message) when its prompt had at least the model's minimum. An entry is read when it is an exact prefix
    of this request ending at most ``lookback_units`` before one of this request's breakpoints. The hit is
    the largest such entry's token count. When nothing known matches but an earlier request with the same
    stable prefix may have cached that prefix alone (of unknown size), the answer is None.
    """
    minimum = rules.minimum(model)
    units_t = tuple(units)

    def is_prefix(rec: ExecutionRecord) -> bool:
        n = len(rec.blocks)
        return n <= len(units_t) and units_t[:n] == rec.blocks

    best, lookback = 0, rules.lookback_units
    for rec in records:
        n = len(rec.blocks)
        # only entries a breakpoint reaches can be read: checked first, it spares the prefix comparison
        for b in breakpoints:
            if n <= b <= n + lookback:
                break
        else:
            continue
        if is_prefix(rec):
            tokens = rec.usage.prompt_tokens
            if tokens >= minimum and tokens > best:
                best = tokens
    if best == 0 and prefix_units:
        # a prefix-alone entry is no longer than its request: below the minimum, it was never cached
        head = units_t[:prefix_units]
        for rec in records:
            reached = rec.usage.prompt_tokens >= minimum
            if reached and rec.blocks[:prefix_units] == head and not is_prefix(rec):
                return None
    return best


def _items(
    rules: CacheRules,
    model: str,
    units: Sequence[str],
    records: Sequence[ExecutionRecord],
    memo: PredictionMemo,
) -> int | None:
    """Automatic caching by input item (OpenAI Responses, docs/protocols.md §1.5).

    OpenAI caches every earlier prompt of the same namespace (``units[0]``: model + ``prompt_cache_key``).
    ``matched`` is the longest token prefix shared with any earlier prompt; it is known exactly when the
    longest unit prefix ``M`` this request shares with an earlier request is itself an earlier request's
    whole prompt and no earlier request diverges *inside* unit ``M``. Otherwise None, unless every earlier
    prompt was below the minimum (then 0).
    """
    q = tuple(units)  # a tuple keeps its identity (the memo's finding is found by it)
    newest = records[-1] if records else None
    if newest is not None and newest.blocks and _extends_uncontained(q, newest.blocks, memo, rules.recent):
        # the newest request is a prefix of this one and shared fewer units than its own length with every
        # earlier request: then each earlier one shares with this request what it shared with the newest
        # (fewer units than the newest has), so the newest is the longest match, known exactly, and
        # nothing diverges inside it: the loop below would find the same
        memo.remember(q, rules.recent, contained=len(newest.blocks) == len(q))
        return rules.reported(newest.usage.prompt_tokens, model)
    same = [r for r in records if r.blocks and q and r.blocks[0] == q[0]]
    if not same:
        memo.remember(q, rules.recent, contained=False)
        return 0
    shared = _shared(q, same, memo)
    m = max(shared)
    memo.remember(q, rules.recent, contained=m >= len(q))
    known = next(
        (r.usage.prompt_tokens for r, s in zip(same, shared, strict=True) if s == len(r.blocks) == m),
        None,
    )
    inside = any(s == m < len(r.blocks) for r, s in zip(same, shared, strict=True)) and m < len(q)
    if known is None or inside:
        # nothing can share more tokens than it had
        return 0 if max(r.usage.prompt_tokens for r in same) < rules.minimum(model) else None
    return rules.reported(known, model)


#: how many predictions' findings a :class:`PredictionMemo` keeps (the one read is the newest record's:
#: its request's prediction, with the policy's and the fold's predictions at most since)
_KEPT = 8


class PredictionMemo:
    """What the ``items`` predictor learned from earlier predictions, for later ones on the same records:
    one belongs to a session (next to its encoding memo, replaced when it moves to another adapter) or a
    guard, and is handed to :func:`predict_cache_read`. Memos live here, never on the values.

    * whether some earlier request shared all of a predicted request's units (``contained``), found by the
      very unit tuple the prediction read (held, so its ``id`` cannot be reused while the entry lives; the
      newest few only) and read only by a prediction whose window of records is no wider. The request's
      record keeps that tuple as its ``blocks``, so the next request can be answered from the newest
      record alone;
    * the shared length of two consecutive records' blocks, found by the very record objects (weak
      references: an entry goes with its record) and blocks (a record changed in memory is compared again).

    Keyed so that a stale entry cannot be read, and an answer is the same whatever the memo holds.
    """

    __slots__ = ("_contained", "_pairs")

    def __init__(self) -> None:
        self._contained: dict[int, tuple[tuple[str, ...], int, bool]] = {}
        self._pairs: dict[
            int,
            tuple[
                weakref.ref[ExecutionRecord],
                weakref.ref[ExecutionRecord],
                tuple[str, ...],
                tuple[str, ...],
                int,
            ],
        ] = {}

    def contained(self, units: tuple[str, ...], recent: int) -> bool | None:
        """Whether some earlier request (of the newest ``recent`` or more) shared all of ``units`` when this
        very tuple was predicted (None: not predicted here with such a window, or no longer kept)."""
        hit = self._contained.get(id(units))
        return hit[2] if hit is not None and hit[0] is units and hit[1] >= recent else None

    def remember(self, units: tuple[str, ...], recent: int, *, contained: bool) -> None:
        """Note what a prediction of ``units`` over the newest ``recent`` records found."""
        found = self._contained
        key = id(units)
        found.pop(key, None)
        found[key] = (units, recent, contained)
        if len(found) > _KEPT:
            del found[next(iter(found))]

    def pair_shared(self, later: ExecutionRecord, earlier: ExecutionRecord) -> int:
        """``common_prefix_len(later.blocks, earlier.blocks)``, computed once per pair of records."""
        pairs = self._pairs
        key = id(later)
        hit = pairs.get(key)
        if (
            hit is not None
            and hit[0]() is later
            and hit[1]() is earlier
            and hit[2] is later.blocks
            and hit[3] is earlier.blocks
        ):
            return hit[4]
        d = common_prefix_len(later.blocks, earlier.blocks)
        pairs[key] = (
            weakref.ref(later, functools.partial(_forget, pairs, key)),
            weakref.ref(earlier),
            later.blocks,
            earlier.blocks,
            d,
        )
        return d


def _forget(pairs: dict[int, Any], key: int, ref: weakref.ref[ExecutionRecord]) -> None:
    hit = pairs.get(key)
    if hit is not None and hit[0] is ref:
        del pairs[key]


def _extends_uncontained(
    q: tuple[str, ...], blocks: tuple[str, ...], memo: PredictionMemo, recent: int
) -> bool:
    """Whether ``blocks`` (the newest record's units) is a prefix of ``q`` and, when its request was
    predicted with ``memo`` (over a window of at least ``recent`` records), no earlier request shared all
    of its units."""
    if memo.contained(blocks, recent) is not False:
        return False
    n = len(blocks)
    return n <= len(q) and q[:n] == blocks


def _shared(q: tuple[str, ...], records: Sequence[ExecutionRecord], memo: PredictionMemo) -> list[int]:
    """``common_prefix_len(q, r.blocks)`` for each record, oldest first, without comparing ``q`` with each.

    The newest record is compared directly. Each earlier one follows from the record after it: with ``s``
    that record's shared length with ``q`` and ``d`` the two records' own shared length (memoized: records
    never change), the answer is ``min(s, d)`` when ``s != d``; only when ``s == d`` are the units past
    ``d`` compared. A session's requests mostly extend each other, so a request costs one comparison with
    the newest record instead of up to :attr:`CacheRules.recent` (~2.5 ms at 1,000 turns, where records
    restored from a snapshot share no unit objects with the request and every unit is compared by value).
    """
    out = [0] * len(records)
    later: ExecutionRecord | None = None
    s = 0
    for i in range(len(records) - 1, -1, -1):
        r = records[i]
        if later is None:
            s = common_prefix_len(q, r.blocks)
        else:
            d = memo.pair_shared(later, r)
            s = min(s, d) if s != d else d + common_prefix_len(q[d:], r.blocks[d:])
        out[i] = s
        later = r
    return out


def _messages(
    rules: CacheRules, model: str, units: Sequence[str], records: Sequence[ExecutionRecord]
) -> int | None:
    """Automatic caching per chat message: OpenAI Chat, vLLM/SGLang, DeepSeek (``persisted``).

    An earlier request's whole unit chain has its reported ``prompt_tokens``; on DeepSeek its chain plus
    its output unit (``ExecutionRecord.output_unit``: the step's message as generated) has ``prompt_tokens
    + completion_tokens`` (docs/protocols.md §3.4: a unit is persisted at the end of the model output). Let
    ``K`` be the longest such known chain that is a prefix of this request. The prediction is exact unless
    an earlier request shares more than ``K`` with this one while ending elsewhere (the shared run then
    ends inside tokens never reported): None.

    * OpenAI (§1.5): 0 below 1024 shared tokens, else ``1024 + 128k <= shared``;
    * vLLM/SGLang (``block`` 16): full blocks of ``min(shared, prompt_tokens - 1)``;
    * DeepSeek (§3.4): the tokens of ``K``; None when a common prefix DeepSeek persisted between two
      earlier requests is longer than ``K`` and of unknown size.
    """
    persisted = rules.scheme == "persisted"
    recs = [r for r in records if r.model == model]
    q = tuple(units)
    # what each earlier request shares with this one; its chain is a prefix of this one when it shares all
    # of it, and (DeepSeek) its chain plus its output unit when, beyond that, the next unit is the output
    shares = [_common(q, r.blocks) for r in recs]
    best_len, best = 0, 0  # the longest known chain that is a prefix; equal chains: the newest figure
    for r, shared in zip(recs, shares, strict=True):
        n = len(r.blocks)
        if shared != n:
            continue
        if n >= best_len:
            best_len, best = n, r.usage.prompt_tokens
        output = r.output_unit
        if persisted and output is not None and n < len(q) and q[n] == output and n + 1 >= best_len:
            best_len, best = n + 1, r.usage.prompt_tokens + r.usage.output
    if persisted:
        known: set[tuple[str, ...]] | None = None
        for i, r in enumerate(recs):
            if shares[i] <= best_len:
                continue
            for earlier in recs[:i]:
                common = _common(r.blocks, earlier.blocks)
                if best_len < common <= shares[i]:
                    known = _known_chains(recs) if known is None else known
                    if r.blocks[:common] not in known:
                        return None
        return best
    if any(s > best_len for s in shares):
        return None
    if rules.block == 1:
        return rules.reported(best, model)
    # the last prompt token is always computed: an identical prompt reuses at most prompt_tokens - 1
    reusable = best - 1 if best_len == len(q) else best
    return rules.block * (max(reusable, 0) // rules.block)


def _known_chains(records: Sequence[ExecutionRecord]) -> set[tuple[str, ...]]:
    """Every unit chain whose size DeepSeek reported: each request's, and each request's with its output."""
    known: set[tuple[str, ...]] = set()
    for r in records:
        known.add(r.blocks)
        if r.output_unit is not None:
            known.add((*r.blocks, r.output_unit))
    return known


def _tokens(rules: CacheRules, prompt: Sequence[int], records: Sequence[ExecutionRecord]) -> int:
    """A self-hosted engine's KV blocks (vLLM automatic prefix caching, SGLang RadixAttention).

    A finished request leaves the full blocks of ``(p + c)[:-1]`` cached, and a new prompt ``q`` hits the
    longest run of whole blocks of ``q[:-1]`` that some earlier sequence shares::

        cached(q) == max over earlier (p, c) of  lcp(q[:-1], (p + c)[:-1]) // block * block
    """
    return shared_tokens(prompt, records) // rules.block * rules.block


def shared_tokens(prompt: Sequence[int], records: Sequence[ExecutionRecord]) -> int:
    """``max over earlier (p, c) of lcp(q[:-1], (p + c)[:-1])``: the prompt tokens whose KV exists."""
    best = 0
    query = list(prompt[: len(prompt) - 1])
    for r in records:
        if r.prompt_ids is None or r.completion_ids is None:
            continue
        seq = [*r.prompt_ids, *r.completion_ids]
        best = max(best, common_prefix_len(query, seq[: len(seq) - 1]))
    return best


def _common(a: Sequence[str], b: Sequence[str]) -> int:
    return common_prefix_len(tuple(a), tuple(b))
