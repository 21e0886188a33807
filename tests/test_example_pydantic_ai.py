"""examples/pydantic_ai_side_by_side.py (issue 12 item 6): a pydantic-ai agent's client under
``rs.instrument`` next to the same task on ``rs.Session``, over real HTTP against the Anthropic emulator.

The example runs shortened to two turns (four requests per side). The oracles are independent of the
guard: the request bodies the emulator received, parsed here; each side's own usage accounting
(pydantic-ai's ``RunUsage``, the session's report); the emulator's 200 answers (it verifies every replayed
thinking signature, docs/protocols.md §4.3); and figures written out by hand.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import sonnet_usd, strip_cache_control

pytest.importorskip("pydantic_ai")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pydantic_ai_side_by_side.py"
TURNS = 2
CLOCK, PLAIN, DEFAULTS, SESSION = (
    "pydantic-ai + clock",
    "pydantic-ai",
    "pydantic-ai, no cache setting",
    "rs.Session",
)


#: the example module, its sides and its printed report
Run = tuple[ModuleType, dict[str, Any], str]


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pydantic_ai_side_by_side", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module of the classes it builds
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run() -> Run:
    example = _example()
    sides = example.run(TURNS)
    return example, sides, example.report(sides)


def _bodies(side: Any) -> list[dict[str, Any]]:
    return [json.loads(b) for b in side.bodies]


def _extends(earlier: dict[str, Any], later: dict[str, Any]) -> bool:
    """``later`` sends ``earlier``'s whole prompt first: same model, thinking, tools and system, and
    ``earlier``'s messages as its first messages (cache_control markers aside: they are not the prefix)."""
    a, b = strip_cache_control(earlier), strip_cache_control(later)
    same = all(a.get(k) == b.get(k) for k in ("model", "thinking", "tools", "system"))
    return same and b["messages"][: len(a["messages"])] == a["messages"]


def test_every_side_ran_the_whole_scripted_task(run: Run) -> None:
    _, sides, _ = run
    assert list(sides) == [CLOCK, PLAIN, DEFAULTS, SESSION]
    for side in sides.values():
        assert side.error is None
        assert side.answers == ("Rome (22C) is warmer than Paris (18C).", "It is 09:00 in Rome.")


def test_the_guard_records_one_entry_per_request_the_framework_made(
    run: Run,
) -> None:
    _, sides, _ = run
    for side in sides.values():
        # two turns, each a tool call and its answer: 4 requests reached the emulator, 4 records
        assert len(side.bodies) == 4
        assert [r.index for r in side.records] == [0, 1, 2, 3]
        assert [r.status for r in side.records] == [200] * 4
        assert [r.request_bytes for r in side.records] == [len(b) for b in side.bodies]


def test_the_hit_ratios_are_the_sides_own_accounting(run: Run) -> None:
    _, sides, text = run
    for side in sides.values():
        assert (side.cache_read, side.prompt_tokens) == side.own_usage
        assert side.hit_ratio == side.own_usage[0] / side.own_usage[1]
    # written out from the example's run: the clocked agent reads the cache on 2 of 4 requests, the session
    # on 3 (its first request has nothing to read)
    assert sides[CLOCK].own_usage == (1727 + 1941, 1727 + 1881 + 1941 + 2024)
    assert sides[SESSION].own_usage == (1427 + 1559 + 1624, 1427 + 1559 + 1624 + 1697)
    assert f"{sides[CLOCK].hit_ratio:.1%}" == "48.4%" and f"{sides[SESSION].hit_ratio:.1%}" == "73.1%"
    assert sides[DEFAULTS].own_usage[0] == 0
    for name, ratio in ((CLOCK, "48.4%"), (PLAIN, "73.3%"), (DEFAULTS, "0.0%"), (SESSION, "73.1%")):
        assert re.search(rf"^{re.escape(name)} .* {re.escape(ratio)} ", text, re.M), name


def test_costs_are_the_published_prices_of_the_reported_usage(
    run: Run,
) -> None:
    _, sides, _ = run
    for side in sides.values():
        assert side.cost == pytest.approx(sum(sonnet_usd(r.usage) for r in side.records))
    # the breaks cost: the clocked agent pays more than the same agent without the clock
    assert sides[CLOCK].cost > sides[PLAIN].cost


def test_a_clock_in_pydantic_ais_instructions_breaks_the_prefix_at_every_new_turn(
    run: Run,
) -> None:
    _, sides, text = run
    side = sides[CLOCK]
    assert side.causes == ((2, "timestamp_in_prefix", "$.system[2].text"),)
    bodies = _bodies(side)
    # inside a turn, the tool chain's answer extends its call
    assert _extends(bodies[0], bodies[1]) and _extends(bodies[2], bodies[3])
    # the next turn: pydantic-ai evaluated the instructions again; only the minute in the third system block
    # differs, the history was carried unchanged
    before, after = bodies[1], bodies[2]
    assert before["system"][:2] == after["system"][:2] and before["tools"] == after["tools"]
    assert (before["system"][2]["text"], after["system"][2]["text"]) == (
        "Now: 2026-12-01 09:00.",
        "Now: 2026-12-01 09:01.",
    )
    assert after["messages"][: len(before["messages"])] == before["messages"]
    assert side.records[2].reported_cache_read == 0
    assert "timestamp_in_prefix at $.system[2].text" in text


@pytest.mark.parametrize("name", [PLAIN, DEFAULTS, SESSION])
def test_without_the_clock_every_request_extends_the_previous_one(run: Run, name: str) -> None:
    _, sides, _ = run
    side = sides[name]
    assert side.causes == ()
    bodies = _bodies(side)
    assert all(_extends(a, b) for a, b in itertools.pairwise(bodies))
    # the guard's prediction is what the emulator reported on every request
    assert [r.predicted_cache_read for r in side.records] == [r.reported_cache_read for r in side.records]


def test_pydantic_ai_caches_nothing_without_its_cache_setting(
    run: Run,
) -> None:
    _, sides, _ = run
    # no breakpoint anywhere in what it sent (docs/protocols.md §4.4: nothing is written without one)
    assert all(b"cache_control" not in body for body in sides[DEFAULTS].bodies)
    assert b"cache_control" in sides[PLAIN].bodies[0]
    assert [r.reported_cache_read for r in sides[DEFAULTS].records] == [0, 0, 0, 0]


def test_pydantic_ai_carries_the_thinking_signatures_back(run: Run) -> None:
    _, sides, _ = run
    for side in sides.values():
        assert side.warnings == ()  # no continuation_lost, nothing else
        bodies = _bodies(side)
        # each tool chain's answer replays the thinking block before the calls; the emulator answered 200, so
        # every signature verified unedited
        for i in (1, 3):
            calls = [m for m in bodies[i]["messages"] if m["role"] == "assistant"][-1]
            assert calls["content"][0]["type"] == "thinking" and calls["content"][0]["signature"]
            assert calls["content"][-1]["type"] == "tool_use"


def test_main_prints_the_comparison(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    example, _, _ = run
    sides = example.main(1)
    out = capsys.readouterr().out
    assert out.startswith("req pydantic-ai + clock")
    # one turn: nothing to break yet
    assert all(len(s.records) == 2 and s.causes == () for s in sides.values())


def test_the_guard_page_shows_what_the_whole_example_prints(capsys: pytest.CaptureFixture[str]) -> None:
    page = (EXAMPLE.parent.parent / "docs" / "howto" / "guard.md").read_text()
    shown = page.split("$ python examples/pydantic_ai_side_by_side.py\n", 1)[1].split("\n```", 1)[0]
    sides = _example().main()
    assert capsys.readouterr().out.rstrip("\n") == shown
    # the figures the page's text and the closing note quote
    ratios = {name: f"{side.hit_ratio:.1%}" for name, side in sides.items()}
    assert ratios == {CLOCK: "38.0%", PLAIN: "78.4%", DEFAULTS: "0.0%", SESSION: "78.2%"}
    assert sides[CLOCK].causes == (
        (2, "timestamp_in_prefix", "$.system[2].text"),
        (4, "timestamp_in_prefix", "$.system[2].text"),
    )


def test_pydantic_ai_evaluates_instructions_before_every_model_request() -> None:
    """The framework behaviour the guard page states: a tool chain's second request already carries the
    instructions evaluated again (so a clock with seconds breaks every request)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from reasonstate.testing import AnthropicEmulator, ModelAction, ToolCallSpec

    script = [ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"})), ModelAction.answer("18C.")]
    evaluations = itertools.count()
    with AnthropicEmulator(script) as emulator:
        model = AnthropicModel(
            "claude-sonnet-4-6", provider=AnthropicProvider(anthropic_client=emulator.async_client())
        )
        agent = Agent(model, model_settings=AnthropicModelSettings(max_tokens=1024))

        @agent.instructions
        def tick() -> str:
            return f"evaluation {next(evaluations)}"

        @agent.tool_plain
        def get_weather(city: str) -> str:
            """Current weather for a city."""
            return "18C"

        assert agent.run_sync("Paris?").output == "18C."
        systems = [json.loads(r.body)["system"][-1]["text"] for r in emulator.requests]
    assert systems == ["evaluation 0", "evaluation 1"]
