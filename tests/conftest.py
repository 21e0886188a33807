"""Shared helpers: a scripted agent on the Anthropic emulator with a real ``anthropic`` client, and the one
hypothesis settings profile every property runs under, and the ``long`` marker that starts a test first.

Profiles: ``suite`` (what ``make test`` runs) gives each property 100 examples; ``fuzz`` is selected when
``REASONSTATE_FUZZ_EXAMPLES`` is set and gives each property that many (``make fuzz``: 20,000). No deadline
in either: the properties drive real SDK clients over loopback HTTP, whose timing the load of the machine
decides. A property that states its own ``max_examples`` does so because one example is a whole session
(a cap below the profile's), never for volume.

``@pytest.mark.long``: a single test of ten seconds or more (a whole demo, a pytest run in a subprocess, a
session grown past a window). ``make test`` splits the collection between its workers and an idle worker
steals only tests not yet started, so a long test started last leaves the other core idle until it ends;
marked tests run first, in their collection order, and everything else keeps its order. Mark only tests
that share no module-scoped fixture with unmarked ones (moving them would build the fixture twice).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import reasonstate as rs
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator

settings.register_profile(
    "suite", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fuzz",
    settings.get_profile("suite"),
    max_examples=int(os.environ.get("REASONSTATE_FUZZ_EXAMPLES", 20000)),
)
settings.load_profile("fuzz" if os.environ.get("REASONSTATE_FUZZ_EXAMPLES") else "suite")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long: a test of ten seconds or more, started before the others")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # a stable sort: the same order in every xdist worker (they must collect alike), long tests first
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


MODEL = "claude-sonnet-4-6"
THINKING = {"type": "enabled", "budget_tokens": 2048}
# long enough that the stable prefix alone passes the 1,024-token minimum cacheable length
SYSTEM = "You are a careful travel assistant. " + "Always check the weather before advising. " * 120

WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = rs.Tool(
    name="get_time",
    description="Local time for a city",
    parameters={"properties": {"city": {"type": "string"}}, "type": "object"},
)


def call(name: str, **arguments: Any) -> ToolCallSpec:
    return ToolCallSpec(name, arguments)


def three_step_chain() -> list[ModelAction]:
    """reasoning+redacted → 2 parallel calls; reasoning → 1 call; reasoning → final answer."""
    return [
        ModelAction(
            reasoning="Two cities: call the weather tool for both, in parallel.",
            redacted=True,
            tool_calls=(call("get_weather", city="Paris"), call("get_weather", city="Rome")),
        ),
        ModelAction(
            reasoning="Paris is mild. Check the local time in Rome too.",
            tool_calls=(call("get_time", city="Rome"),),
        ),
        ModelAction(
            reasoning="I have everything; Rome is warmer.", text="Rome is warmer (22C) than Paris (18C)."
        ),
    ]


def answer(i: int) -> ModelAction:
    return ModelAction(reasoning=f"Thinking about follow-up {i}. " * 8, text=f"Follow-up answer {i}.")


def sonnet_usd(usage: rs.Usage) -> float:
    """The oracle of the cost tests: ``usage`` at claude-sonnet-4-6's published prices, written out by hand
    (USD per 1M tokens: input 3, cache read 0.30, 5-minute cache write 3.75, output 15; docs/protocols.md §8),
    never read from the price table under test."""
    return (
        usage.uncached_input * 3 + usage.cache_read * 0.3 + usage.cache_write * 3.75 + usage.output * 15
    ) / 1e6


def body(emulator: AnthropicEmulator, i: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(emulator.requests[i].body)
    return data


def as_read_by_vendor(value: Any) -> str:
    """A JSON value as a vendor reads it, as comparable text: keys in any order, base64 signatures as their
    bytes (google-genai re-encodes a Part's ``thoughtSignature`` urlsafe and sorts keys on the wire)."""

    def norm(v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: base64.urlsafe_b64decode(x.replace("+", "-").replace("/", "_")).hex()
                if k == "thoughtSignature" and isinstance(x, str)
                else norm(x)
                for k, x in v.items()
            }
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return json.dumps(norm(value), sort_keys=True, ensure_ascii=False)


def strip_cache_control(value: Any) -> Any:
    """A request value without its cache_control markers (they move; the prefix does not)."""
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def run_chain(session: rs.Session, question: str = "Paris or Rome: which is warmer?") -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results(
            {c.id: {"city": c.arguments["city"], "tool": c.name} for c in reply.tool_calls}
        )
    return reply


@pytest.fixture
def emulator() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator() as emu:
        yield emu


def make_session(emulator: AnthropicEmulator, client: Any = None, **kw: Any) -> rs.Session:
    options: dict[str, Any] = {
        "system": SYSTEM,
        "tools": [WEATHER, CLOCK],
        "max_tokens": 4096,
        "thinking": THINKING,
    }
    options.update(kw)
    return rs.Session(emulator.client() if client is None else client, model=MODEL, **options)


def assert_memoized_runs_encode_as_fresh(session: rs.Session, options: dict[str, Any] | None = None) -> None:
    """A codec memoizes the closed history as a run extended turn by turn, kept on its newest turn only:
    any sequence of histories built from ``session``'s turns (shorter, longer, an earlier view rewritten,
    branches sharing turns) must give the very request an encoding from scratch gives. Fresh turn objects
    (``attrs.evolve``) memoize nothing, so they are the oracle."""
    import random

    import attrs

    from reasonstate.adapters.base import Encodings, compact
    from reasonstate.state import History, Turn, TurnView

    turns = session.history.turns
    adapter, prefix, model = session._adapter, session.prefix, session.model
    options = dict(session._options) if options is None else options
    memo = session._encodings  # the session's memo, as its own requests left it

    def request(
        history: tuple[Turn, ...], encodings: Encodings = memo
    ) -> tuple[bytes, tuple[str, ...], list[str]]:
        full = History((*history, Turn(index=len(history), user="Next?")))
        r = adapter.encode(prefix, full, model, options, [], encodings=encodings)
        return compact(r.kwargs), r.units, [c.digest for c in r.withheld]

    def fresh(history: tuple[Turn, ...]) -> tuple[bytes, tuple[str, ...], list[str]]:
        return request(tuple(attrs.evolve(t) for t in history), Encodings())

    dropped = [attrs.evolve(t, view=TurnView((False,) * len(t.steps), policy="drop")) for t in turns]
    rng = random.Random(9)
    seen = set()
    for _ in range(40):
        k = rng.randint(0, len(turns))
        history = list(turns[:k])
        if k and rng.random() < 0.3:  # an earlier view rewritten (KeepLast), the turns after it shared
            j = rng.randrange(k)
            history[j] = dropped[j]
        got = request(tuple(history))
        assert got == fresh(tuple(history))
        seen.add(got[0])
    assert len(seen) > 10  # the histories differ: the property is not checked on one request
