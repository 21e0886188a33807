"""Normalized usage (``rs.Usage``), prices as data and cost, and the cache metrics of seed 004.

The oracles are the vendors' own field definitions written out by hand (docs/protocols.md §1.5, §3.4, §4.4,
§5.3) and arithmetic on hand-picked prices, never the code under test.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reasonstate as rs
from reasonstate.adapters import anthropic as anthropic_codec
from reasonstate.adapters import gemini as gemini_codec
from reasonstate.adapters import openai_chat as chat_codec
from reasonstate.adapters import openai_responses as responses_codec
from reasonstate.state import ExecutionRecord
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests.conftest import make_session, sonnet_usd

COUNTS = st.integers(0, 10**9)
ODD = st.one_of(st.none(), st.integers(-(10**6), -1), st.booleans(), st.text(max_size=3), st.floats(), COUNTS)


def _invariants(u: rs.Usage) -> None:
    for name in ("uncached_input", "cache_read", "cache_write", "output", "cache_write_1h"):
        value = getattr(u, name)
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, name
    assert u.input_total == u.uncached_input + u.cache_read + u.cache_write == u.prompt_tokens
    assert u.cache_write_1h <= u.cache_write
    assert u.reasoning is None or 0 <= u.reasoning <= u.output


# -- each vendor's fields, consistent: the normalized figures are the vendor's own ---------------------------


@given(inp=COUNTS, read=COUNTS, five=COUNTS, hour=COUNTS, out=COUNTS, thinking=st.one_of(st.none(), COUNTS))
def test_anthropic_parts_are_disjoint_and_sum_to_the_prompt(
    inp: int, read: int, five: int, hour: int, out: int, thinking: int | None
) -> None:
    """Pain point: BerriAI/litellm#15945 (whether prompt tokens include cached ones differs by vendor)."""
    raw: dict[str, Any] = {
        "input_tokens": inp,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": five + hour,
        "cache_creation": {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour},
        "output_tokens": out,
    }
    if thinking is not None:
        raw["output_tokens_details"] = {"thinking_tokens": min(thinking, out)}
    u = anthropic_codec._usage(raw)
    _invariants(u)
    assert (u.uncached_input, u.cache_read, u.cache_write, u.cache_write_1h) == (inp, read, five + hour, hour)
    assert u.input_total == inp + read + five + hour  # "the whole prompt is input + creation + read"
    assert u.output == out and u.reasoning == (None if thinking is None else min(thinking, out))


@given(total=COUNTS, data=st.data())
def test_openai_cached_tokens_are_inside_input_tokens(total: int, data: st.DataObject) -> None:
    """Pain point: BerriAI/litellm#15945 (whether prompt tokens include cached ones differs by vendor)."""
    cached = data.draw(st.integers(0, total))
    out = data.draw(COUNTS)
    reasoning = data.draw(st.integers(0, out))
    raw = {
        "input_tokens": total,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
    }
    u = responses_codec._usage(raw)
    _invariants(u)
    assert (u.input_total, u.cache_read, u.uncached_input) == (total, cached, total - cached)
    assert (u.output, u.reasoning) == (out, reasoning)


@given(hit=COUNTS, miss=COUNTS, out=COUNTS)
def test_deepseek_hit_plus_miss_is_the_prompt(hit: int, miss: int, out: int) -> None:
    """Pain point: BerriAI/litellm#15945 (whether prompt tokens include cached ones differs by vendor)."""
    raw = {
        "prompt_tokens": hit + miss,
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": miss,
        "completion_tokens": out,
    }
    u = chat_codec._usage(raw, "deepseek")
    _invariants(u)
    assert (u.input_total, u.cache_read, u.uncached_input, u.output) == (hit + miss, hit, miss, out)


@given(prompt=COUNTS, candidates=COUNTS, thoughts=COUNTS, data=st.data())
def test_gemini_cached_content_is_inside_the_prompt_and_thoughts_are_output(
    prompt: int, candidates: int, thoughts: int, data: st.DataObject
) -> None:
    """Pain point: microsoft/agent-framework#6637 (Gemini cached and thoughts counts dropped)."""
    cached = data.draw(st.integers(0, prompt))
    raw = {
        "promptTokenCount": prompt,
        "cachedContentTokenCount": cached,
        "candidatesTokenCount": candidates,
        "thoughtsTokenCount": thoughts,
    }
    u = gemini_codec._usage(raw)
    _invariants(u)
    assert (u.input_total, u.cache_read) == (prompt, cached)
    assert (u.output, u.reasoning) == (candidates + thoughts, thoughts)


# -- odd figures never fail the call: a missing, negative or non-integer count is 0 --------------------------


@given(
    fields=st.dictionaries(
        st.sampled_from(
            [
                "input_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
                "output_tokens",
                "prompt_tokens",
                "completion_tokens",
                "prompt_cache_hit_tokens",
                "prompt_cache_miss_tokens",
                "promptTokenCount",
                "cachedContentTokenCount",
                "candidatesTokenCount",
                "thoughtsTokenCount",
            ]
        ),
        ODD,
    ),
    nested=ODD,
)
def test_missing_negative_or_odd_figures_give_a_valid_usage_for_every_vendor(
    fields: dict[str, Any], nested: Any
) -> None:
    raw = {
        **fields,
        "cache_creation": {"ephemeral_1h_input_tokens": nested},
        "output_tokens_details": {"thinking_tokens": nested, "reasoning_tokens": nested},
        "input_tokens_details": {"cached_tokens": nested},
        "prompt_tokens_details": {"cached_tokens": nested},
        "completion_tokens_details": {"reasoning_tokens": nested},
    }
    for u in (
        anthropic_codec._usage(raw),
        responses_codec._usage(raw),
        chat_codec._usage(raw, "deepseek"),
        chat_codec._usage(raw, "openai"),
        gemini_codec._usage(raw),
    ):
        _invariants(u)


def test_a_usage_that_breaks_an_invariant_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        rs.Usage(uncached_input=-1)
    with pytest.raises(ValueError, match="exceeds output"):
        rs.Usage(output=3, reasoning=4)
    with pytest.raises(ValueError, match="exceeds cache_write"):
        rs.Usage(cache_write=1, cache_write_1h=2)


# -- prices --------------------------------------------------------------------------------------------------


def test_cost_is_each_disjoint_part_times_its_price() -> None:
    price = rs.Price("m", input=3.0, cache_read=0.3, cache_write_5m=3.75, cache_write_1h=6.0, output=15.0)
    usage = rs.Usage(
        uncached_input=1_000, cache_read=10_000, cache_write=3_000, cache_write_1h=1_000, output=500
    )
    cost = price.cost(usage)
    # by hand: 1000*3 + 10000*0.3 + 2000*3.75 + 1000*6 + 500*15 = 3000 + 3000 + 7500 + 6000 + 7500 (per 1M)
    assert cost.input == pytest.approx(0.003)
    assert cost.cache_read == pytest.approx(0.003)
    assert cost.cache_write == pytest.approx(0.0135)
    assert cost.output == pytest.approx(0.0075)
    assert cost.total == pytest.approx(0.027)


def test_the_packaged_table_prices_every_model_the_emulators_default_to_with_a_source_and_date() -> None:
    table = rs.Pricing.default()
    for model in ("claude-sonnet-4-6", "gpt-5.5", "gemini-3-flash", "deepseek-v4-pro"):
        price = table.price(model)
        assert price is not None, model
        assert price.source.startswith("https://") and len(price.date) == 10
        assert price.cache_read < price.input <= price.cache_write_5m <= price.cache_write_1h


def test_a_dated_model_id_is_priced_as_the_model_it_extends_and_an_unknown_model_costs_none() -> None:
    table = rs.Pricing.default()
    assert table.price("claude-sonnet-4-6-20260217") is table.price("claude-sonnet-4-6")
    assert table.price("gemini-3-flash-preview") is table.price("gemini-3-flash")
    assert table.price("claude-sonnet-4-60") is None  # not at a "-" boundary
    assert table.cost("no-such-model", rs.Usage(output=10)) is None


def test_prices_are_overridable_in_code_and_from_a_file(tmp_path: Path) -> None:
    table = rs.Pricing.default().with_prices(
        {"model": "claude-sonnet-4-6", "input": 1, "cache_read": 0, "output": 2}
    )
    assert table.cost("claude-sonnet-4-6", rs.Usage(uncached_input=10**6, output=10**6)).total == 3.0
    assert rs.Pricing.default().price("claude-sonnet-4-6").input == 3.0  # type: ignore[union-attr]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": [{"model": "mine", "input": 2, "cache_read": 1, "output": 4}]}))
    loaded = rs.Pricing.load(path)
    assert (
        loaded.cost("mine", rs.Usage(uncached_input=10**6, cache_read=10**6, cache_write=10**6)).total == 5.0
    )
    path.write_text("not json")
    with pytest.raises(rs.InvalidOption):
        rs.Pricing.load(path)
    with pytest.raises(rs.InvalidOption):
        rs.Pricing.default().with_prices({"model": "x", "input": -1, "cache_read": 0, "output": 0})


# -- the session's report ------------------------------------------------------------------------------------


def test_a_sessions_cost_per_request_turn_and_session_add_up_at_the_reported_usage(
    emulator: AnthropicEmulator,
) -> None:
    session = make_session(emulator)
    for i in range(3):
        emulator.script.extend([ModelAction.answer(f"Answer {i}.", reasoning="Thinking. " * 40)])
        session.send(f"Question {i}?")
    price = rs.Pricing.default().price("claude-sonnet-4-6")
    assert price is not None
    report = session.report()
    by_hand = [sonnet_usd(r.usage) for r in session.execution]
    assert [c.total for c in report.cost_per_request if c is not None] == pytest.approx(by_hand)
    assert report.cost is not None and report.cost.total == pytest.approx(sum(by_hand))
    assert [t for t, _ in report.cost_per_turn] == [0, 1, 2]
    assert sum(c.total for _, c in report.cost_per_turn if c is not None) == pytest.approx(sum(by_hand))
    assert "$" in str(report)
    unpriced = session.report(pricing=rs.Pricing())
    assert unpriced.cost is None and "cost unknown" in str(unpriced)


def test_metrics_of_a_deepseek_session_with_a_kv_geometry() -> None:
    with OpenAIChatEmulator(dialect="deepseek") as emu:
        session = rs.Session(
            emu.client(), model="deepseek-v4-pro", dialect="deepseek", system="Be brief. " * 50
        )
        for i in range(4):
            emu.script.extend([ModelAction.answer(f"Answer {i}.", reasoning="Thinking. " * 30)])
            session.send(f"Question {i}?")
    records = session.execution
    kv = rs.KVConfig(layers=4, kv_heads=2, head_dim=8, dtype="bf16")
    m = session.report(kv=kv).metrics
    assert m is not None
    assert m.cached_input_tokens == sum(r.usage.cache_read for r in records) > 0
    assert m.uncached_prefill_tokens == sum(r.usage.uncached_input for r in records)
    last = records[-1].usage
    assert m.active_context_length == last.prompt_tokens + last.output
    assert m.kv_bytes_per_session == m.active_context_length * 2 * 4 * 2 * 8 * 2
    # each request re-read all of the previous prompt from the cache: no history was prefilled again
    assert all(b.usage.cache_read >= a.usage.prompt_tokens for a, b in itertools.pairwise(records))
    assert m.recomputed_history_tokens == 0
    assert rs.KVConfig(bytes_per_token=70).bytes_per_token == 70
    with pytest.raises(rs.InvalidOption):
        rs.KVConfig(layers=1, kv_heads=1, head_dim=1, dtype="float8_e5m2x")


def test_a_snapshot_with_an_impossible_usage_is_refused_as_a_snapshot_error(
    emulator: AnthropicEmulator,
) -> None:
    session = make_session(emulator)
    emulator.script.extend([ModelAction.answer("Fine.", reasoning="Thinking. " * 10)])
    session.send("Hi?")
    data = json.loads(session.snapshot().model_dump_json())
    fields = [f.name for f in attrs.fields(ExecutionRecord) if f.name != "index"]
    usage = data["execution"][0][fields.index("usage")]
    usage[[f.name for f in attrs.fields(rs.Usage)].index("output")] = -5
    with pytest.raises(rs.SnapshotError):
        rs.Session.restore(json.dumps(data), emulator.client())
