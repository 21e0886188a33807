"""Prices as data, cost per request, and the cache metrics of seed 004 (docs/protocols.md §8).

The packaged table (``pricing.json``) gives, per model, USD per 1,000,000 tokens for uncached input, cache
reads, cache writes by TTL (5 minutes, 1 hour) and output, each row with its source and the date it was
read. Prices change: the table is a dated reference, never a rule; :meth:`Pricing.with_prices` and
:meth:`Pricing.load` put the caller's own figures first.

Invariants:
  * a request's cost is the sum over the four disjoint parts of its :class:`~reasonstate.state.Usage`
    (``uncached_input``, ``cache_read``, ``cache_write`` split by TTL, ``output`` with reasoning inside
    it) times that part's price: nothing is billed twice, nothing left out;
  * a model with no price costs ``None`` (unknown), never 0;
  * a dated model id the vendor echoes (``claude-sonnet-4-6-20260217``, ``gemini-3-flash-preview``) is
    priced as the longest table model it extends at a ``-`` boundary.

Not modelled: long-context tiers (prices that rise past 200K / 272K prompt tokens), batch and flex
discounts, DeepSeek's peak/off-peak hours, Gemini's explicit-cache storage fees.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from reasonstate.errors import InvalidOption
from reasonstate.state import ExecutionRecord, Usage

__all__ = ["Cost", "KVConfig", "Metrics", "Price", "Pricing", "metrics", "total"]

PER = 1_000_000


def _rate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidOption(
            f"Price.{attribute.name} must be a non-negative number (USD per 1M tokens), got {value!r}"
        )


@attrs.frozen(slots=True)
class Cost:
    """USD of one request (or a sum of them), by part: ``total == input + cache_read + cache_write +
    output``."""

    input: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    output: float = 0.0

    @property
    def total(self) -> float:
        return self.input + self.cache_read + self.cache_write + self.output

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.input + other.input,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            self.output + other.output,
        )


@attrs.frozen(slots=True)
class Price:
    """One model's prices in USD per 1,000,000 tokens, with where and when they were read."""

    model: str
    input: float = attrs.field(validator=_rate)
    cache_read: float = attrs.field(validator=_rate)
    cache_write_5m: float = attrs.field(validator=_rate)
    cache_write_1h: float = attrs.field(validator=_rate)
    output: float = attrs.field(validator=_rate)
    source: str = ""
    date: str = ""

    def cost(self, usage: Usage) -> Cost:
        """What ``usage`` costs at these prices (see the module's invariants)."""
        five_minute = usage.cache_write - usage.cache_write_1h
        return Cost(
            input=usage.uncached_input * self.input / PER,
            cache_read=usage.cache_read * self.cache_read / PER,
            cache_write=(five_minute * self.cache_write_5m + usage.cache_write_1h * self.cache_write_1h)
            / PER,
            output=usage.output * self.output / PER,
        )


def _rows(prices: Mapping[str, Price]) -> dict[str, Price]:
    return dict(prices)


@attrs.frozen(slots=True)
class Pricing:
    """A price table: :meth:`default` (the packaged one), :meth:`load` (a JSON file of the same shape),
    :meth:`with_prices` (overrides). Immutable: every change is a new table."""

    prices: Mapping[str, Price] = attrs.field(factory=dict, converter=_rows)

    @classmethod
    def default(cls) -> Pricing:
        """The packaged table (``reasonstate/cache/pricing.json``)."""
        return _default()

    @classmethod
    def load(cls, path: str | Path) -> Pricing:
        """A table from a JSON file shaped like the packaged one (``{"models": [{"model": ..., "input": ...,
        "cache_read": ..., "cache_write_5m": ..., "cache_write_1h": ..., "output": ..., "source": ...,
        "date": ...}]}``); :class:`~reasonstate.errors.InvalidOption` for anything else."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidOption(f"cannot read a price table from {path}: {exc}") from exc
        return cls.from_mapping(data)

    @classmethod
    def from_mapping(cls, data: Any) -> Pricing:
        rows = data.get("models") if isinstance(data, Mapping) else None
        if not isinstance(rows, list):
            raise InvalidOption('a price table is {"models": [...]}, one object per model')
        return cls({}).with_prices(*(_price(row) for row in rows))

    def with_prices(self, *prices: Price | Mapping[str, Any]) -> Pricing:
        """This table with ``prices`` added or replacing the rows of the same model (a mapping is a
        row of the JSON shape; ``cache_write_5m`` / ``cache_write_1h`` default to ``input``)."""
        rows = dict(self.prices)
        for p in prices:
            price = p if isinstance(p, Price) else _price(p)
            rows[price.model] = price
        return Pricing(rows)

    def price(self, model: str) -> Price | None:
        """The row for ``model``: exact, else the longest model it extends at a ``-`` boundary."""
        exact = self.prices.get(model)
        if exact is not None:
            return exact
        best: Price | None = None
        for name, price in self.prices.items():
            if model.startswith(name + "-") and (best is None or len(name) > len(best.model)):
                best = price
        return best

    def cost(self, model: str, usage: Usage) -> Cost | None:
        """What ``usage`` on ``model`` costs; None when the table has no price for it."""
        price = self.price(model)
        return price.cost(usage) if price is not None else None


def _price(row: Any) -> Price:
    if not isinstance(row, Mapping) or not isinstance(row.get("model"), str) or not row["model"]:
        raise InvalidOption(f"a price row needs a model name: {row!r:.120}")
    missing = [k for k in ("input", "cache_read", "output") if k not in row]
    if missing:
        raise InvalidOption(f"the price row of {row['model']} lacks {missing}")
    return Price(
        model=row["model"],
        input=row["input"],
        cache_read=row["cache_read"],
        cache_write_5m=row.get("cache_write_5m", row["input"]),
        cache_write_1h=row.get("cache_write_1h", row.get("cache_write_5m", row["input"])),
        output=row["output"],
        source=str(row.get("source", "")),
        date=str(row.get("date", "")),
    )


@functools.lru_cache(maxsize=1)
def _default() -> Pricing:
    text = resources.files("reasonstate.cache").joinpath("pricing.json").read_text(encoding="utf-8")
    return Pricing.from_mapping(json.loads(text))


# -- the metrics of seed 004 ------------------------------------------------------------------------------

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
}


@attrs.frozen(slots=True)
class KVConfig:
    """The KV cache geometry of a self-hosted model: ``bytes_per_token = 2 (K and V) × layers × kv_heads ×
    head_dim × dtype bytes`` (read them from the model's ``config.json``: ``num_hidden_layers``,
    ``num_key_value_heads``, ``head_dim`` or ``hidden_size / num_attention_heads``). Architectures that
    compress the KV cache (MLA, sliding windows, SSM layers) need their own figure: pass
    ``bytes_per_token`` directly."""

    layers: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    dtype: str = "bfloat16"
    bytes_per_token_override: int | None = attrs.field(default=None, alias="bytes_per_token")

    def __attrs_post_init__(self) -> None:
        if self.bytes_per_token_override is None:
            if self.dtype not in _DTYPE_BYTES:
                raise InvalidOption(
                    f"KVConfig dtype must be one of {sorted(_DTYPE_BYTES)}, got {self.dtype!r}"
                )
            if min(self.layers, self.kv_heads, self.head_dim) <= 0:
                raise InvalidOption("KVConfig needs layers, kv_heads and head_dim > 0 (or bytes_per_token=)")
        elif self.bytes_per_token_override <= 0:
            raise InvalidOption("KVConfig bytes_per_token must be > 0")

    @property
    def bytes_per_token(self) -> int:
        if self.bytes_per_token_override is not None:
            return self.bytes_per_token_override
        return 2 * self.layers * self.kv_heads * self.head_dim * _DTYPE_BYTES[self.dtype]


@attrs.frozen(slots=True)
class Metrics:
    """What to watch besides the hit ratio (seed 004): dropping reasoning may lower the hit ratio and
    still lower the cost, by shortening the context every later request carries.

    * ``cached_input_tokens``: input tokens the vendor served from its cache (no prefill);
    * ``uncached_prefill_tokens``: input tokens actually prefilled (uncached input and cache writes);
    * ``recomputed_history_tokens``: per request, the part of the previous request's prompt (history the
      vendor had already processed) that was prefilled again instead of read from the cache — what a
      rewrite of history (dropped reasoning, a compaction) or an expired cache costs;
    * ``active_context_length``: the newest request's prompt plus its output (what the next request
      starts from);
    * ``kv_bytes_per_session``: that context's KV cache size for a :class:`KVConfig` (None without one).
    """

    requests: int
    cached_input_tokens: int
    uncached_prefill_tokens: int
    recomputed_history_tokens: int
    active_context_length: int
    kv_bytes_per_session: int | None


def metrics(records: Sequence[ExecutionRecord], kv: KVConfig | None = None) -> Metrics:
    """:class:`Metrics` of a session's execution records (oldest first)."""
    recomputed = 0
    for previous, record in itertools.pairwise(records):
        history = min(previous.usage.prompt_tokens, record.usage.prompt_tokens)
        recomputed += max(0, history - record.usage.cache_read)
    active = records[-1].usage.prompt_tokens + records[-1].usage.output if records else 0
    return Metrics(
        requests=len(records),
        cached_input_tokens=sum(r.usage.cache_read for r in records),
        uncached_prefill_tokens=sum(r.usage.uncached_input + r.usage.cache_write for r in records),
        recomputed_history_tokens=recomputed,
        active_context_length=active,
        kv_bytes_per_session=active * kv.bytes_per_token if kv is not None else None,
    )


def total(costs: Iterable[Cost | None]) -> Cost | None:
    """The sum of ``costs``; None if any is unknown."""
    out = Cost()
    for c in costs:
        if c is None:
            return None
        out = out + c
    return out
