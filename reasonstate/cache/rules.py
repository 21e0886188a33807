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

from collections.abc import Sequence
from typing import Literal, Protocol

import attrs

from reasonstate.state import UNIT_WINDOW, ExecutionRecord, Records, TokenIds, as_records
from reasonstate.state.execution import UnitUse, common_prefix_len
from reasonstate.state.units import UnitSeq, as_units

__all__ = [
    "NEVER",
    "CacheRules",
    "PredictedRequest",
    "Scheme",
    "common_prefix_len",
    "divergence",
    "predict_cache_read",
    "predict_request",
    "shared_tokens",
]


# -- the bare measure of where two unit chains (or token-id sequences) part (``common_prefix_len``, from
# the state layer, which keeps the records' units): read by the prediction here, by every request's
# execution record (its divergence from the previous one) and by the cause analysis


def divergence(units: Sequence[str], previous: Sequence[str]) -> int | None:
    """The first unit index where ``units`` differs from ``previous``; None when ``units`` extends it.

    Invariant: ``units[:d] == previous[:d]`` and (``d == len(previous)`` or ``units[d] != previous[d]``)
    for the returned ``d``, except that None means ``units[:len(previous)] == previous``.
    """
    d = common_prefix_len(as_units(units), as_units(previous))
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
    * ``recent``: how many earlier requests a prediction considers (caches live minutes, not sessions);
      at most :data:`~reasonstate.state.UNIT_WINDOW`, the requests whose units the records keep;
    * ``lifetime``: how long an unused entry lives, in seconds, as ``(shortest, longest)`` the vendor
      documents (equal when it documents one figure; None when it documents none): the guard tells an
      expired entry from a vendor's miss with it (a room may read the request's own ttl option instead).
    """

    scheme: Scheme
    source: str
    min_tokens: int = 0
    min_tokens_by_model: tuple[tuple[tuple[str, ...], int], ...] = ()
    step: int = 1
    block: int = 1
    max_breakpoints: int = 0
    lookback_units: int = 0
    recent: int = attrs.field(default=UNIT_WINDOW)
    lifetime: tuple[int, int] | None = None

    @recent.validator
    def _check_recent(self, _attribute: object, value: int) -> None:
        if not 1 <= value <= UNIT_WINDOW:
            raise ValueError(f"CacheRules.recent must be between 1 and {UNIT_WINDOW}, got {value}")

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
    @property
    def predictable(self) -> bool: ...


def predict_request(
    rules: CacheRules,
    request: PredictedRequest,
    records: Sequence[ExecutionRecord],
) -> int | None:
    """:func:`predict_cache_read` for ``request``: the cache read the vendor will report for it (None: not
    knowable). A request that is not ``predictable`` (what the vendor caches depends on something only it
    knows: an Anthropic context edit triggered by its own token count, docs/protocols.md §4.7): None."""
    if not request.predictable:
        return None
    return predict_cache_read(
        rules,
        request.model,
        request.units,
        records,
        breakpoints=request.breakpoints,
        prefix_units=request.prefix_units,
        prompt_ids=request.prompt_ids,
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
) -> int | None:
    """What the vendor will report as cache read for a request with these prefix ``units``.

    ``breakpoints`` and ``prefix_units`` matter for explicit breakpoints, ``prompt_ids`` for token-level
    engines. ``records`` are the session's earlier successful requests, oldest first, as
    :class:`~reasonstate.state.Records` (which keeps the units of each model's newest requests; an empty
    sequence: none); their unit chains hold what an earlier prediction would have to remember.

    Each earlier request's shared prefix with this one is derived from its unit chain: one comparison with
    each model's newest request, then a few units per earlier request, so a prediction costs the same at
    1,000 turns as at 100 (no comparison of the request with each of the ``recent`` earlier ones).
    """
    window = as_records(records)
    if rules.scheme == "breakpoints":  # entries of other models are never read: the newest of this model
        return _breakpoints(rules, model, units, window, breakpoints, prefix_units)
    since = max(len(window) - rules.recent, 0)
    if rules.scheme == "items":
        return _items(rules, model, units, window, since)
    if rules.scheme == "tokens":
        return _tokens(rules, prompt_ids or (), window[since:])
    return _messages(rules, model, units, window, since)


def _breakpoints(
    rules: CacheRules,
    model: str,
    units: Sequence[str],
    records: Records,
    breakpoints: Sequence[int],
    prefix_units: int,
) -> int | None:
    """Explicit breakpoints (docs/protocols.md §4.4), over the newest ``recent`` requests of ``model``.

    A cache entry exists for every earlier request's full unit chain (its last breakpoint is its newest
    message) when its prompt had at least the model's minimum. An entry is read when it is an exact prefix
    of this request ending at most ``lookback_units`` before one of this request's breakpoints. The hit is
    the largest such entry's token count. When nothing known matches but an earlier request with the same
    stable prefix may have cached that prefix alone (of unknown size), the answer is None.
    """
    minimum = rules.minimum(model)
    q = as_units(units)
    # (position, record, shared units with this request): a record is a prefix when it shares all of it
    entries = records.shares(q, model=model, limit=rules.recent)
    best, lookback = 0, rules.lookback_units
    best_units = 0
    for _, rec, shared in entries:
        n = rec.units
        # only entries a breakpoint reaches can be read
        for b in breakpoints:
            if n <= b <= n + lookback:
                break
        else:
            continue
        if shared == n:
            tokens = rec.usage.prompt_tokens
            if tokens >= minimum and tokens > best:
                best, best_units = tokens, n
    # every breakpoint of an earlier request wrote an entry (§4.4); one that ends inside that request, is
    # a prefix of this one, lies beyond the best known entry and a breakpoint here reaches has a size no
    # record tells (a plain client marking every answer, after a server-side clear: §4.7)
    for _, rec, shared in entries:
        if rec.usage.prompt_tokens < minimum:
            continue
        for p in rec.breakpoints:
            inside = prefix_units < p < rec.units and best_units < p <= shared
            if inside and any(p <= b <= p + lookback for b in breakpoints):
                return None
    if best == 0 and prefix_units:
        # a prefix-alone entry is no longer than its request: below the minimum, it was never cached
        head = min(len(q), prefix_units)  # rec[:prefix_units] == q[:prefix_units], from the shared length
        for _, rec, shared in entries:
            reached = rec.usage.prompt_tokens >= minimum
            if reached and min(rec.units, prefix_units) == head and shared >= head and shared != rec.units:
                return None
    return best


def _items(rules: CacheRules, model: str, units: Sequence[str], records: Records, since: int) -> int | None:
    """Automatic caching by input item (OpenAI Responses, docs/protocols.md §1.5).

    OpenAI caches every earlier prompt of the same namespace (``units[0]``: model + ``prompt_cache_key``).
    ``matched`` is the longest token prefix shared with any earlier prompt; it is known exactly when the
    longest unit prefix ``M`` this request shares with an earlier request is itself an earlier request's
    whole prompt and no earlier request diverges *inside* unit ``M``. Otherwise None, unless every earlier
    prompt was below the minimum (then 0).
    """
    q = as_units(units)
    # the same namespace: the first unit is shared
    same = [(r, s) for _, r, s in records.shares(q, since=since) if s and r.units]
    if not same:
        return 0
    m = max(s for _, s in same)
    known = next((r.usage.prompt_tokens for r, s in same if s == r.units == m), None)
    inside = any(s == m < r.units for r, s in same) and m < len(q)
    if known is None or inside:
        # nothing can share more tokens than it had
        return 0 if max(r.usage.prompt_tokens for r, _ in same) < rules.minimum(model) else None
    return rules.reported(known, model)


def _messages(
    rules: CacheRules, model: str, units: Sequence[str], records: Records, since: int
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
    q = as_units(units)
    # what each earlier request of the model shares with this one; its chain is a prefix of this one when
    # it shares all of it, and (DeepSeek) its chain plus its output unit when, beyond that, the next unit
    # is the output
    entries = records.shares(q, model=model, since=since)
    # the longest known chain that is a prefix; equal chains: the newest figure. Read newest first, so a
    # chain no longer than the best found is passed over before its output unit is compared (a packed
    # unit is made a string to be compared: one or two per request, not one per earlier request)
    best_len, best = -1, 0
    for _, r, shared in reversed(entries):
        n = r.units
        if shared != n:
            continue
        if n > best_len:
            best_len, best = n, r.usage.prompt_tokens
        if persisted and n + 1 > best_len and n < len(q):
            output = r.output_unit
            if output is not None and q[n] == output:
                best_len, best = n + 1, r.usage.prompt_tokens + r.usage.output
    best_len = max(best_len, 0)
    if persisted:
        if all(shared <= best_len for _, _, shared in entries):
            return best
        # an earlier request shares more than ``K``: compare the earlier requests' own chains (rare: after
        # the history was rewritten), rebuilt from the window once
        tuples = records.tuples(model=model, since=since)
        chains = [(tuples[p], r, shared) for p, r, shared in entries]
        known: set[Sequence[str]] | None = None
        for i, (blocks, _, shared) in enumerate(chains):
            if shared <= best_len:
                continue
            for earlier, _, _ in chains[:i]:
                common = common_prefix_len(blocks, earlier)
                if best_len < common <= shared:
                    known = _known_chains(chains) if known is None else known
                    if blocks[:common] not in known:
                        return None
        return best
    if any(shared > best_len for _, _, shared in entries):
        return None
    if rules.block == 1:
        return rules.reported(best, model)
    # the last prompt token is always computed: an identical prompt reuses at most prompt_tokens - 1
    reusable = best - 1 if best_len == len(q) else best
    return rules.block * (max(reusable, 0) // rules.block)


def _known_chains(chains: Sequence[tuple[UnitSeq, UnitUse, int]]) -> set[Sequence[str]]:
    """Every unit chain whose size DeepSeek reported: each request's, and each request's with its output
    (packed and plain chains of equal units are equal and hash alike)."""
    known: set[Sequence[str]] = set()
    for blocks, r, _ in chains:
        known.add(blocks)
        if r.output_unit is not None:
            known.add((*blocks, r.output_unit))
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
    query = TokenIds.of(prompt)  # the session's prompts are views of shared buffers: compared in O(1)
    n = len(query) - 1
    for r in records:
        p, c = r.prompt_ids, r.completion_ids
        if p is None or c is None:
            continue
        limit = min(n, len(p) + len(c) - 1)
        if limit > best:
            best = max(best, min(query.shared_with(p, c), limit))
    return best
