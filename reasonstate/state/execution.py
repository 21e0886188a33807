"""Physical execution: what each request cost and how it met the prefix cache. Derived, never fed back.

Usage is normalized across vendors: ``uncached_input`` + ``cache_read`` + ``cache_write`` is the whole
prompt (Anthropic reports these disjointly; OpenAI's ``input_tokens`` includes cached tokens, so the adapter
subtracts). ``prompt_tokens`` is derived, not stored.
"""

from __future__ import annotations

import array
from collections.abc import Sequence

import attrs

from reasonstate.errors import ContinuationMismatch
from reasonstate.state.continuation import digest_of

__all__ = ["ExecutionRecord", "Usage", "ids_digest"]


def ids_digest(ids: Sequence[int]) -> str:
    """``sha256`` of token ids as 64-bit integers: what a record's ids are checked against before reuse."""
    return digest_of(array.array("q", ids).tobytes())


@attrs.frozen(slots=True)
class Usage:
    """Normalized token usage of one request.

    Invariant, for every vendor: ``uncached_input + cache_read + cache_write`` is the whole prompt
    (:attr:`prompt_tokens`); ``reasoning`` is the reasoning part of ``output`` when the vendor reports it,
    else None.
    """

    uncached_input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int | None = None

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token: ``uncached_input + cache_read + cache_write``."""
        return self.uncached_input + self.cache_read + self.cache_write

    @property
    def cache_read_share(self) -> float:
        """``cache_read / prompt_tokens`` (0.0 for an empty prompt)."""
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else 0.0


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
