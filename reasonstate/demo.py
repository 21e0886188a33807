"""``reasonstate demo``: one scripted agent job under several between-turn policies, side by side.

The job: 12 user turns of a travel-desk agent; every third turn runs a tool chain (two parallel weather
calls, then a long itinerary lookup), the others are plain follow-ups. Reasoning is long and answers short,
as with real reasoning models. By default it runs against the embedded Anthropic emulator (no API key);
``--live`` runs the same turns against the real API when ANTHROPIC_API_KEY is set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import reasonstate as rs
from reasonstate.policies import Drop, Keep, KeepLast, Policy

__all__ = ["main", "run_anthropic"]

TURNS = 12
MODEL = "claude-sonnet-4-6"
LIVE_MODEL = os.environ.get("REASONSTATE_DEMO_MODEL", "claude-sonnet-4-6")
SYSTEM = (
    "You are the travel desk of a small agency. Use the tools for facts; never guess weather or times. "
    "Answer in two sentences at most. " + "Policy: prefer trains under 6 hours; flag strikes and heat. " * 60
)
CITIES = ["Paris", "Rome", "Oslo", "Lisbon", "Vienna", "Prague", "Madrid", "Berlin"]


def _weather(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": 10 + (sum(map(ord, city)) % 20), "sky": "clear"}


def _itinerary(origin: str, destination: str) -> str:
    legs = [f"leg {i}: {origin}->{destination} via hub {i}, 2h{i:02d}, seat map row {i}" for i in range(40)]
    return "\n".join(legs)  # a long tool result, as real search tools return


TOOLS = [
    rs.Tool(
        name="get_weather",
        description="Current weather for a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        handler=_weather,
        parallel_safe=True,
    ),
    rs.Tool(
        name="find_itinerary",
        description="Train itineraries between two cities",
        parameters={
            "type": "object",
            "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}},
            "required": ["origin", "destination"],
        },
        handler=_itinerary,
    ),
]


def questions() -> list[str]:
    out = []
    for i in range(TURNS):
        a, b = CITIES[i % len(CITIES)], CITIES[(i + 3) % len(CITIES)]
        if i % 3 == 0:
            out.append(f"Compare the weather in {a} and {b}, then find me a train between them.")
        else:
            out.append(f"Follow-up {i}: is the {a}-{b} trip still a good idea for a family?")
    return out


def scripted_actions() -> list[Any]:
    """What the emulated model does for :func:`questions`, call by call."""
    from reasonstate.testing import ModelAction, ToolCallSpec

    actions: list[ModelAction] = []
    for i in range(TURNS):
        a, b = CITIES[i % len(CITIES)], CITIES[(i + 3) % len(CITIES)]
        think = f"Turn {i}: weigh weather, duration, strikes and heat for {a} and {b}. " * 12
        if i % 3 == 0:
            actions.append(
                ModelAction(
                    reasoning=think,
                    redacted=True,
                    tool_calls=(
                        ToolCallSpec("get_weather", {"city": a}),
                        ToolCallSpec("get_weather", {"city": b}),
                    ),
                )
            )
            actions.append(
                ModelAction(
                    reasoning=f"Weather is known; now the train {a}->{b}. " * 6,
                    tool_calls=(ToolCallSpec("find_itinerary", {"origin": a, "destination": b}),),
                )
            )
        actions.append(ModelAction(reasoning=think, text=f"{a} to {b}: fine by train; pack for the weather."))
    return actions


def run_anthropic(client: Any, policy: Policy, model: str, **options: Any) -> rs.Session:
    session = rs.Session(client, model=model, system=SYSTEM, tools=TOOLS, policy=policy, **options)
    for q in questions():
        session.run(q)
    return session


def _row(name: str, session: rs.Session) -> list[str]:
    r = session.report()
    predicted = sum(x.predicted_cache_read or 0 for x in session.execution)
    return [
        name,
        str(r.requests),
        f"{r.prompt_tokens:,}",
        f"{r.cache_read_share:.1%}",
        f"{r.cache_read:,}",
        f"{predicted:,}",
        f"{r.predicted_matches}/{r.predicted_total}",
        f"{r.active_context_tokens:,}",
        str(r.protocol_errors),
    ]


HEADER = [
    "policy",
    "requests",
    "input tokens",
    "cache-read share",
    "cache reads (vendor)",
    "cache reads (SDK predicted)",
    "exact",
    "active context",
    "protocol errors",
]


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(HEADER), line(["-" * w for w in widths]), *(line(r) for r in rows)])


POLICIES: list[tuple[str, Callable[[], Policy]]] = [
    ("Keep()", Keep),
    ("Drop()", Drop),
    ("KeepLast(1)", lambda: KeepLast(1)),
]


def anthropic_section(live: bool) -> str:
    rows = []
    thinking = {"type": "enabled", "budget_tokens": 2048}
    for name, make in POLICIES:
        if live:
            import anthropic

            session = run_anthropic(
                anthropic.Anthropic(), make(), LIVE_MODEL, max_tokens=4096, thinking=thinking
            )
        else:
            from reasonstate.testing.anthropic import AnthropicEmulator

            with AnthropicEmulator(scripted_actions()) as emulator:
                client = emulator.client()
                session = run_anthropic(client, make(), MODEL, max_tokens=4096, thinking=thinking)
                client.close()
        rows.append(_row(name, session))
    where = "the real Anthropic API" if live else "the Anthropic Messages emulator (127.0.0.1)"
    return f"Anthropic Messages — {TURNS} user turns, tool chains with parallel calls, on {where}\n" + table(
        rows
    )


def main(argv: Sequence[str] = ()) -> int:
    live = "--live" in argv
    if live and not os.environ.get("ANTHROPIC_API_KEY"):
        print("--live needs ANTHROPIC_API_KEY")
        return 2
    print(anthropic_section(live))
    print()
    print("cache reads (vendor) is what the server reported; (SDK predicted) what reasonstate expected")
    print("before sending. 'exact' counts requests where the two agree. Protocol errors must be 0.")
    try:
        from reasonstate.tokens.matrix import demo_section
    except ImportError:  # the `tokens` extra is not installed
        print("\n(PRR section skipped: pip install 'reasonstate[tokens]')")
    else:
        from reasonstate.tokens.session_demo import token_demo_section

        print()
        print(demo_section())
        print()
        print(token_demo_section())
    return 0
