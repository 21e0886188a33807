"""Physical execution: what each request cost and how it met the prefix cache. Derived, never fed back.

Usage is normalized across vendors: ``uncached_input`` + ``cache_read`` + ``cache_write`` is the whole
prompt (Anthropic reports these disjointly; OpenAI's ``input_tokens`` includes cached tokens, so the adapter
subtracts). ``prompt_tokens`` is derived, not stored.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from typing import Any

import attrs

from reasonstate.errors import ContinuationMismatch
from reasonstate.state.continuation import digest_of

__all__ = ["ExecutionRecord", "Usage", "ids_digest"]


def ids_digest(ids: Sequence[int]) -> str:
    """``sha256`` of token ids as 64-bit integers: what a record's ids are checked against before reuse."""
    return digest_of(array.array("q", ids).tobytes())


#: the one type a count may have (``bool`` is an ``int`` subclass and is not a count)
_INT = frozenset({int})
_COUNTS = ("uncached_input", "cache_read", "cache_write", "output", "cache_write_1h")


@attrs.frozen(slots=True)
class Usage:
    """Normalized token usage of one request, the same for every vendor (docs/protocols.md §1.5, §3.4,
    §4.4, §5.3 say how each vendor's fields map here).

    Invariants (checked on construction: a value that breaks one is refused with ``ValueError``):

    * every count is a non-negative ``int``;
    * the prompt is split three ways with nothing counted twice: ``input_total == uncached_input +
      cache_read + cache_write`` (Anthropic reports the parts; OpenAI, DeepSeek and Gemini report a total
      that includes the cached part, which the codec subtracts);
    * ``cache_write_1h <= cache_write`` (the part written with the 1-hour TTL, billed higher; Anthropic);
    * ``output`` is every generated token, reasoning included; ``reasoning`` is the part of it the
      vendor reports as reasoning (``None``: not reported), so ``reasoning <= output``.

    A streamed and a non-streamed call of the same answer give equal values.
    """

    uncached_input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int | None = None
    cache_write_1h: int = 0

    def __attrs_post_init__(self) -> None:
        # one check of every field (a validator per field costs a call each, on every response decoded)
        values = (self.uncached_input, self.cache_read, self.cache_write, self.output, self.cache_write_1h)
        if not (_INT.issuperset(map(type, values)) and min(values) >= 0):
            bad = next(n for n, v in zip(_COUNTS, values, strict=True) if not (type(v) is int and v >= 0))
            raise ValueError(f"Usage.{bad} must be a non-negative integer, got {getattr(self, bad)!r}")
        if self.reasoning is not None:
            if type(self.reasoning) is not int or self.reasoning < 0:
                raise ValueError(f"Usage.reasoning must be a non-negative integer, got {self.reasoning!r}")
            if self.reasoning > self.output:
                raise ValueError(f"Usage.reasoning {self.reasoning} exceeds output {self.output}")
        if self.cache_write_1h > self.cache_write:
            raise ValueError(
                f"Usage.cache_write_1h {self.cache_write_1h} exceeds cache_write {self.cache_write}"
            )

    @property
    def input_total(self) -> int:
        """Every prompt token: ``uncached_input + cache_read + cache_write``."""
        return self.uncached_input + self.cache_read + self.cache_write

    @property
    def prompt_tokens(self) -> int:
        """Same as :attr:`input_total`."""
        return self.uncached_input + self.cache_read + self.cache_write

    @property
    def cache_read_share(self) -> float:
        """``cache_read / input_total`` (0.0 for an empty prompt)."""
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else 0.0

    @classmethod
    def of(
        cls,
        *,
        uncached_input: Any = 0,
        cache_read: Any = 0,
        cache_write: Any = 0,
        output: Any = 0,
        reasoning: Any = None,
        cache_write_1h: Any = 0,
    ) -> Usage:
        """A Usage from vendor figures as received: a missing, non-integer or negative count is 0, a
        reasoning count is capped at ``output`` and the 1-hour write at ``cache_write`` (a vendor's odd
        figure never fails the call whose answer was already paid for)."""
        figures = (uncached_input, cache_read, cache_write, output, cache_write_1h)
        if not (_INT.issuperset(map(type, figures)) and min(figures) >= 0):  # an odd figure: clean each
            uncached_input, cache_read, cache_write, output, cache_write_1h = map(_clean, figures)
        thinking = None if reasoning is None or not _is_int(reasoning) else min(max(reasoning, 0), output)
        one_hour = min(cache_write_1h, cache_write)
        return cls(uncached_input, cache_read, cache_write, output, thinking, one_hour)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _clean(value: Any) -> int:
    return value if _is_int(value) and value > 0 else 0


@attrs.frozen(slots=True)
class ExecutionRecord:
    """One successful request.

    ``blocks`` is the request's prefix-unit chain: the running digest after each unit (tool, system block,
    message content block), so the first divergence from an earlier request is the first index where the
    chains differ. ``predicted_cache_read`` is what the SDK expected before sending (None: not knowable).
    """

    index: int
    turn: int
    step: int
    request_digest: str
    request_bytes: int
    prefix_fingerprint: str
    blocks: tuple[str, ...]
    breakpoints: tuple[int, ...]
    divergence: int | None
    predicted_cache_read: int | None
    usage: Usage
    duration_s: float
    model: str
    #: self-hosted models (token-in, token-out): the exact prompt and completion token ids
    prompt_ids: tuple[int, ...] | None = None
    completion_ids: tuple[int, ...] | None = None
    #: the digest of the step's output as the model generated it, where a vendor caches it as a unit of
    #: later prompts (DeepSeek persists a unit at the end of each output: docs/protocols.md §3.4)
    output_unit: str | None = None
    #: ``ids_digest(prompt_ids + completion_ids)`` taken when the record was made: ids restored from a
    #: snapshot or changed in memory are refused, never reused as a prompt prefix
    ids_seal: str | None = None

    def verify_ids(self) -> None:
        """Raise :class:`~reasonstate.errors.ContinuationMismatch` unless the token ids match their seal."""
        if self.prompt_ids is None and self.completion_ids is None:
            return
        ids = (*(self.prompt_ids or ()), *(self.completion_ids or ()))
        if self.ids_seal is None or ids_digest(ids) != self.ids_seal:
            raise ContinuationMismatch(f"request {self.index}: token ids changed since they were recorded")
