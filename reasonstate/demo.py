"""``reasonstate demo``: one scripted agent job under several between-turn policies, side by side.

The job: 12 user turns of a travel-desk agent; every third turn runs a tool chain (two parallel weather
calls, then a long itinerary lookup), the others are plain follow-ups. Reasoning is long and answers short,
as with real reasoning models. By default it runs on the embedded emulators (Anthropic Messages,
OpenAI Responses stateless and stateful, DeepSeek chat, Gemini; no API key), then one conversation that
switches vendor between turns, the token-level PRR matrix and a token-in/token-out session; ``--live``
runs the same turns against each real API whose key is set (ANTHROPIC_API_KEY, OPENAI_API_KEY,
DEEPSEEK_API_KEY, GEMINI_API_KEY).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.policies import Drop, Keep, KeepLast, Policy

__all__ = ["VENDORS", "main", "run_job"]

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


def run_job(client: Any, policy: Policy, model: str, **options: Any) -> rs.Session:
    session = rs.Session(client, model=model, system=SYSTEM, tools=TOOLS, policy=policy, **options)
    for q in questions():
        session.run(q)
    return session


def _row(name: str, session: rs.Session) -> list[str]:
    r = session.report()
    predicted = sum(x.predicted_cache_read or 0 for x in session.execution)
    unknown = r.requests - r.predicted_total
    return [
        name,
        str(r.requests),
        f"{sum(x.request_bytes for x in session.execution) / 1024:,.0f}",
        f"{r.prompt_tokens:,}",
        f"{r.cache_read_share:.1%}",
        f"{r.cache_read:,}",
        f"{predicted:,}" + (f" (+{unknown} n/a)" if unknown else ""),
        f"{r.predicted_matches}/{r.predicted_total}",
        f"{r.active_context_tokens:,}",
        str(r.protocol_errors),
    ]


HEADER = [
    "policy",
    "requests",
    "sent KB",
    "input tokens",
    "cache-read share",
    "cache reads (vendor)",
    "cache reads (SDK predicted)",
    "exact",
    "active context",
    "protocol errors",
]


def table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


POLICIES: list[tuple[str, Callable[[], Policy]]] = [
    ("Keep()", Keep),
    ("Drop()", Drop),
    ("KeepLast(1)", lambda: KeepLast(1)),
]


@attrs.frozen
class Vendor:
    """One API the demo runs the job on: how to build the emulator, the live client, the options."""

    title: str
    key_env: str
    model: str
    live_model: str
    options: Mapping[str, Any]
    emulator: Callable[[list[Any]], Any]
    live_client: Callable[[], Any]
    session_kwargs: Mapping[str, Any] = attrs.field(factory=dict)


def _anthropic_emulator(actions: list[Any]) -> Any:
    from reasonstate.testing.anthropic import AnthropicEmulator

    return AnthropicEmulator(actions)


def _responses_emulator(actions: list[Any]) -> Any:
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    return OpenAIResponsesEmulator(actions)


def _deepseek_emulator(actions: list[Any]) -> Any:
    from reasonstate.testing.openai_chat import OpenAIChatEmulator

    return OpenAIChatEmulator(actions, dialect="deepseek")


def _gemini_emulator(actions: list[Any]) -> Any:
    from reasonstate.testing.gemini import GeminiEmulator

    return GeminiEmulator(actions)


def _gemini_live() -> Any:
    from google import genai

    return genai.Client()


def _anthropic_live() -> Any:
    import anthropic

    return anthropic.Anthropic()


def _openai_live() -> Any:
    import openai

    return openai.OpenAI()


def _deepseek_live() -> Any:
    import openai

    return openai.OpenAI(base_url="https://api.deepseek.com", api_key=os.environ["DEEPSEEK_API_KEY"])


VENDORS = [
    Vendor(
        "Anthropic Messages",
        "ANTHROPIC_API_KEY",
        MODEL,
        LIVE_MODEL,
        {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}},
        _anthropic_emulator,
        _anthropic_live,
    ),
    Vendor(
        "OpenAI Responses, stateless (store=False, encrypted reasoning replayed)",
        "OPENAI_API_KEY",
        "gpt-5.5",
        os.environ.get("REASONSTATE_DEMO_OPENAI_MODEL", "gpt-5.5"),
        {"store": False, "reasoning": {"effort": "medium", "summary": "auto"}},
        _responses_emulator,
        _openai_live,
    ),
    Vendor(
        "OpenAI Responses, stateful (store=True, previous_response_id)",
        "OPENAI_API_KEY",
        "gpt-5.5",
        os.environ.get("REASONSTATE_DEMO_OPENAI_MODEL", "gpt-5.5"),
        {"store": True, "reasoning": {"effort": "medium", "summary": "auto"}},
        _responses_emulator,
        _openai_live,
    ),
    Vendor(
        "DeepSeek chat completions (thinking mode, reasoning_content)",
        "DEEPSEEK_API_KEY",
        "deepseek-v4-pro",
        os.environ.get("REASONSTATE_DEMO_DEEPSEEK_MODEL", "deepseek-v4-pro"),
        {"reasoning_effort": "high"},
        _deepseek_emulator,
        _deepseek_live,
        {"dialect": "deepseek"},
    ),
    Vendor(
        "Gemini generateContent (thought signatures on their Parts)",
        "GEMINI_API_KEY",
        "gemini-3-flash",
        os.environ.get("REASONSTATE_DEMO_GEMINI_MODEL", "gemini-3-flash"),
        {"thinking_config": {"include_thoughts": True}},
        _gemini_emulator,
        _gemini_live,
    ),
]


def vendor_section(vendor: Vendor, live: bool) -> str:
    rows = []
    for name, make in POLICIES:
        if live:
            session = run_job(
                vendor.live_client(), make(), vendor.live_model, **vendor.session_kwargs, **vendor.options
            )
        else:
            with vendor.emulator(scripted_actions()) as emulator:
                client = emulator.client()
                session = run_job(client, make(), vendor.model, **vendor.session_kwargs, **vendor.options)
                client.close()
        rows.append(_row(name, session))
    where = "the real API" if live else "its emulator (127.0.0.1)"
    return f"{vendor.title} — {TURNS} user turns, tool chains with parallel calls, on {where}\n" + table(rows)


#: the vendors one session moves through in :func:`switch_section`, with the options each takes
SWITCH_ROUTE: list[tuple[str, Callable[[list[Any]], Any], str, Mapping[str, Any]]] = [
    (
        "Anthropic",
        _anthropic_emulator,
        MODEL,
        {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}},
    ),
    (
        "OpenAI Responses",
        _responses_emulator,
        "gpt-5.5",
        {"reasoning": {"effort": "medium", "summary": "auto"}},
    ),
    ("Gemini", _gemini_emulator, "gemini-3-flash", {"thinking_config": {"include_thoughts": True}}),
    ("DeepSeek", _deepseek_emulator, "deepseek-v4-pro", {"dialect": "deepseek"}),
]


SWITCH_HEADER = [
    "turn",
    "vendor",
    "requests",
    "withheld (foreign payloads)",
    "opaque kinds withheld",
    "protocol errors",
]


def switch_section() -> str:
    """One conversation that moves vendor between turns (``Session.switch``): what each vendor was sent of
    the earlier vendors' state. Opaque continuation never crosses; earlier steps go in the new API's own
    format; every request is accepted by that vendor's strict emulator."""
    asked = questions()[: len(SWITCH_ROUTE)]
    actions = scripted_actions()
    lines = [
        "One conversation, switching vendor between turns (Session.switch) — on the emulators",
        table(_switch_rows(asked, actions), SWITCH_HEADER),
        "withheld: payloads of earlier vendors left out of this vendor's requests (signatures, encrypted",
        "items, model-bound reasoning); their text and tool calls were sent in this vendor's own format.",
    ]
    return "\n".join(lines)


def _switch_rows(asked: list[str], actions: list[Any]) -> list[list[str]]:
    from contextlib import ExitStack

    rows: list[list[str]] = []
    per_turn: list[list[Any]] = []  # every third turn is a tool chain: three model calls
    for i in range(TURNS):
        n = 3 if i % 3 == 0 else 1
        start = sum(len(t) for t in per_turn)
        per_turn.append(actions[start : start + n])
    with ExitStack() as stack:
        session: rs.Session | None = None
        for i, (name, make, model, options) in enumerate(SWITCH_ROUTE):
            emulator = stack.enter_context(make(list(per_turn[i])))
            client = emulator.client()
            stack.callback(client.close)
            if session is None:
                session = rs.Session(client, model=model, system=SYSTEM, tools=TOOLS, **options)
            else:
                session.switch(client, model=model, **options)
            before = len(session.trace)
            session.run(asked[i])
            events = session.trace.events[before:]
            withheld = [e for e in events if e.kind == "continuation.withheld"]
            kinds = sorted(
                {k for e in withheld for k in e.data["kinds"] if k.endswith(("thinking", "reasoning"))}
            )
            rows.append(
                [
                    str(i),
                    name,
                    str(sum(1 for e in events if e.kind == "request.sent")),
                    str(max((e.data["count"] for e in withheld), default=0)),
                    ", ".join(kinds) or "-",
                    str(session.report().protocol_errors),
                ]
            )
    return rows


def main(argv: Sequence[str] = ()) -> int:
    live = "--live" in argv
    ran = 0
    for vendor in VENDORS:
        if live and not os.environ.get(vendor.key_env):
            print(f"{vendor.title}: skipped (--live needs {vendor.key_env})\n")
            continue
        print(vendor_section(vendor, live))
        print()
        ran += 1
    if live and not ran:
        return 2
    print("cache reads (vendor) is what the server reported; (SDK predicted) what reasonstate expected")
    print("before sending; 'exact' counts the requests where the two agree, out of those it could")
    print("predict (n/a: the prefix diverged inside an item, so the token count is not knowable).")
    print("sent KB is the request bytes on the wire. Protocol errors must be 0.")
    if live:
        return 0
    print()
    print(switch_section())
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
