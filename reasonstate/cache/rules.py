"""Each vendor's prefix cache, as data: granularity, minimums, breakpoints and lookback, with the source.

The predictor (:mod:`reasonstate.cache.predict`), the Anthropic breakpoint placement and the guard read these
values; nothing about a vendor's cache is written anywhere else. Every entry cites ``docs/protocols.md``.
"""

from __future__ import annotations

from typing import Literal

import attrs

__all__ = [
    "ANTHROPIC",
    "DEEPSEEK",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "SELF_HOSTED_CHAT",
    "TOKENS_SGLANG",
    "TOKENS_VLLM",
    "CacheRules",
    "Scheme",
]

#: ``breakpoints``: explicit ``cache_control`` markers (Anthropic); ``items``: automatic caching of any
#: earlier prompt, matched by input item (OpenAI Responses); ``messages``: the same, per chat message
#: (OpenAI Chat, vLLM, SGLang); ``persisted``: DeepSeek's disk cache of request and output units;
#: ``tokens``: a self-hosted engine's KV blocks over token ids
Scheme = Literal["breakpoints", "items", "messages", "persisted", "tokens"]


@attrs.frozen(slots=True)
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
        """The minimum cacheable prompt length for ``model``."""
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


ANTHROPIC = CacheRules(
    scheme="breakpoints",
    source="docs/protocols.md §4.4",
    min_tokens=1024,
    min_tokens_by_model=((("opus-4-5", "opus-4-6", "haiku-4-5"), 4096), (("haiku-3",), 2048)),
    max_breakpoints=4,
    lookback_units=20,
)
OPENAI_RESPONSES = CacheRules(scheme="items", source="docs/protocols.md §1.5", min_tokens=1024, step=128)
OPENAI_CHAT = CacheRules(scheme="messages", source="docs/protocols.md §1.5, §2.1", min_tokens=1024, step=128)
DEEPSEEK = CacheRules(scheme="persisted", source="docs/protocols.md §3.4")
#: vLLM automatic prefix caching and SGLang RadixAttention behind the chat API: full 16-token KV blocks
SELF_HOSTED_CHAT = CacheRules(scheme="messages", source="docs/protocols.md §2.2", block=16)
TOKENS_VLLM = CacheRules(scheme="tokens", source="docs/protocols.md §2.2 (vLLM block_size 16)", block=16)
TOKENS_SGLANG = CacheRules(scheme="tokens", source="docs/protocols.md §2.2 (SGLang page_size 1)", block=1)
