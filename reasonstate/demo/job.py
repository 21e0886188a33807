"""The demo's agent job and its policy tables: one scripted job under several between-turn policies.

The job: 12 user turns of a travel-desk agent; every third turn runs a tool chain (two parallel weather
calls, then a long itinerary lookup), the others are plain follow-ups. Reasoning is long and answers short,
as with real reasoning models. It runs on the embedded emulators (Anthropic Messages, OpenAI Responses
stateless and stateful, DeepSeek chat, Gemini generateContent and the Interactions API; no API key) or,
with ``live=True``, against the real APIs. Every function here returns data (:class:`PolicyStats`,
:class:`reasonstate.demo.render.Table`); printing is :mod:`reasonstate.demo.sections`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.demo.render import Table
from reasonstate.policies import Drop, Keep, KeepLast, Policy

__all__ = ["POLICIES", "SWITCH_ROUTE", "VENDORS", "PolicyStats", "Vendor", "policy_stats", "run_job"]

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
    #: which reading :func:`reading` gives under this vendor's table
    key: str = ""


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


def _interactions_emulator(actions: list[Any]) -> Any:
    from reasonstate.testing.gemini_interactions import GeminiInteractionsEmulator

    return GeminiInteractionsEmulator(actions)


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
        key="anthropic",
    ),
    Vendor(
        "OpenAI Responses, stateless (store=False, encrypted reasoning replayed)",
        "OPENAI_API_KEY",
        "gpt-5.5",
        os.environ.get("REASONSTATE_DEMO_OPENAI_MODEL", "gpt-5.5"),
        {"store": False, "reasoning": {"effort": "medium", "summary": "auto"}},
        _responses_emulator,
        _openai_live,
        key="responses-stateless",
    ),
    Vendor(
        "OpenAI Responses, stateful (store=True, previous_response_id)",
        "OPENAI_API_KEY",
        "gpt-5.5",
        os.environ.get("REASONSTATE_DEMO_OPENAI_MODEL", "gpt-5.5"),
        {"store": True, "reasoning": {"effort": "medium", "summary": "auto"}},
        _responses_emulator,
        _openai_live,
        key="responses-stateful",
    ),
    Vendor(
        "DeepSeek chat completions (thinking mode, reasoning_content)",
        "DEEPSEEK_API_KEY",
        "deepseek-v4-pro",
        os.environ.get("REASONSTATE_DEMO_DEEPSEEK_MODEL", "deepseek-v4-pro"),
        {"reasoning_effort": "high"},
        _deepseek_emulator,
        _deepseek_live,
        session_kwargs={"dialect": "deepseek"},
        key="deepseek",
    ),
    Vendor(
        "Gemini generateContent (thought signatures on their Parts)",
        "GEMINI_API_KEY",
        "gemini-3-flash",
        os.environ.get("REASONSTATE_DEMO_GEMINI_MODEL", "gemini-3-flash"),
        {"thinking_config": {"include_thoughts": True}},
        _gemini_emulator,
        _gemini_live,
        key="gemini",
    ),
    Vendor(
        "Gemini Interactions API, stateful (store=True, previous_interaction_id)",
        "GEMINI_API_KEY",
        "gemini-3-flash",
        os.environ.get("REASONSTATE_DEMO_GEMINI_MODEL", "gemini-3-flash"),
        {"store": True},
        _interactions_emulator,
        _gemini_live,
        session_kwargs={"api": "interactions"},
        key="interactions",
    ),
]


#: the vendors one session moves through in :func:`switch_table`, with the options each takes
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


# -- the policy tables ------------------------------------------------------------------------------------
@attrs.frozen
class PolicyStats:
    """One policy's run of the job, as the vendor reported it (usage) and as the SDK predicted it."""

    policy: str
    requests: int
    sent_bytes: int
    input_tokens: int
    cache_read: int
    predicted: int  # SDK-predicted cache reads over the requests it could predict
    unknown: int  # requests whose cache read was not knowable in advance
    matches: int  # requests where prediction == vendor report
    active_context: int
    protocol_errors: int
    #: every request's prompt tokens, in order
    prompts: tuple[int, ...] = ()

    @property
    def cache_share(self) -> float:
        return self.cache_read / self.input_tokens if self.input_tokens else 0.0

    @property
    def sent_kb(self) -> float:
        return self.sent_bytes / 1024

    @classmethod
    def of(cls, name: str, session: rs.Session) -> PolicyStats:
        r = session.report()
        return cls(
            policy=name,
            requests=r.requests,
            sent_bytes=sum(x.request_bytes for x in session.execution),
            input_tokens=r.prompt_tokens,
            cache_read=r.cache_read,
            predicted=sum(x.predicted_cache_read or 0 for x in session.execution),
            unknown=r.requests - r.predicted_total,
            matches=r.predicted_matches,
            active_context=r.active_context_tokens,
            protocol_errors=r.protocol_errors,
            prompts=tuple(x.usage.prompt_tokens for x in session.execution),
        )

    def row(self) -> tuple[str, ...]:
        return (
            self.policy,
            str(self.requests),
            f"{self.sent_kb:,.0f}",
            f"{self.input_tokens:,}",
            f"{self.cache_share:.1%}",
            f"{self.cache_read:,}",
            f"{self.predicted:,}" + (f" (+{self.unknown} n/a)" if self.unknown else ""),
            f"{self.matches}/{self.requests - self.unknown}",
            f"{self.active_context:,}",
            str(self.protocol_errors),
        )


HEADER = (
    "policy",
    "requests (count)",
    "sent (KB)",
    "input (tokens)",
    "cache-read share (% of input)",
    "cache reads, vendor (tokens)",
    "cache reads, SDK predicted (tokens)",
    "exact (requests)",
    "active context (tokens)",
    "protocol errors (count)",
)


def policy_stats(vendor: Vendor, live: bool) -> list[PolicyStats]:
    """The job under each of :data:`POLICIES`, on the vendor's emulator (or its real API when ``live``)."""
    out = []
    for name, make in POLICIES:
        if live:
            client = vendor.live_client()
            session = run_job(client, make(), vendor.live_model, **vendor.session_kwargs, **vendor.options)
        else:
            with vendor.emulator(scripted_actions()) as emulator:
                client = emulator.client()
                session = run_job(client, make(), vendor.model, **vendor.session_kwargs, **vendor.options)
                client.close()
        out.append(PolicyStats.of(name, session))
    return out


#: Gemini 3 Flash caches implicitly from this many prompt tokens (docs/protocols.md §5.3, 2026-10 page)
GEMINI_CACHE_MINIMUM = 4096


def reading(vendor: Vendor, stats: Sequence[PolicyStats], live: bool = False) -> str:
    """One line that says what the table shows and why, from its own figures (model-specific reasons only
    for the emulated models, whose rules are known)."""
    by = {s.policy: s for s in stats}
    keep, drop, last = by["Keep()"], by["Drop()"], by["KeepLast(1)"]
    kb = f"{keep.sent_kb:,.0f}/{drop.sent_kb:,.0f}/{last.sent_kb:,.0f} KB"
    if vendor.key == "deepseek" and keep.input_tokens == drop.input_tokens == last.input_tokens:
        return (
            "Identical token rows: DeepSeek needs reasoning_content back on every tool-call message under "
            "any policy and ignores it on plain answers (docs/protocols.md §3.3), so the policy only changes "
            f"the bytes sent (Keep/Drop/KeepLast {kb}), not the prompt or its cache."
        )
    if vendor.key == "gemini" and not live:
        big = {s.policy: sum(p >= GEMINI_CACHE_MINIMUM for p in s.prompts) for s in stats}
        return (
            f"Gemini 3 Flash caches implicitly only from {GEMINI_CACHE_MINIMUM:,} prompt tokens "
            f"(docs/protocols.md §5.3): Keep's prompts reach it on {big['Keep()']}/{keep.requests} requests, "
            f"Drop's on {big['Drop()']} and KeepLast(1)'s on {big['KeepLast(1)']}, hence their low share."
        )
    if vendor.key == "responses-stateful":
        return (
            f"Same tokens as stateless, but Keep sends only the new items after previous_response_id "
            f"(Keep/Drop/KeepLast {kb}); a policy that rewrites closed turns forces a full replay at the "
            "next turn (traced as chain.fallback)."
        )
    if vendor.key == "interactions":
        return (
            f"Chained by previous_interaction_id, Keep sends only the new steps (Keep/Drop/KeepLast {kb}) "
            f"and reads {keep.cache_share:.0%} from cache; Drop and KeepLast(1) rewrite closed turns, so the "
            "next turn is a full replay without the id (traced as chain.fallback) and the prefix breaks: "
            f"{drop.cache_share:.0%} and {last.cache_share:.0%} (docs/protocols.md §5.6)."
        )
    if vendor.key == "anthropic" and last.cache_share < drop.cache_share:
        return (
            f"Keep replays every thinking block: most bytes ({kb}), highest share ({keep.cache_share:.0%}); "
            "KeepLast(1) rewrites the turn before last each time a turn closes, so the prefix breaks further "
            f"back than under Drop ({last.cache_share:.0%} vs {drop.cache_share:.0%})."
        )
    return (
        f"Keep replays all reasoning (Keep/Drop/KeepLast {kb}) and reads {keep.cache_share:.0%} from cache; "
        f"Drop {drop.cache_share:.0%}, KeepLast(1) {last.cache_share:.0%}: rewriting closed turns breaks the "
        "cached prefix."
    )


def vendor_table(vendor: Vendor, live: bool) -> tuple[Table, list[PolicyStats]]:
    stats = policy_stats(vendor, live)
    where = "the real API" if live else "its emulator (127.0.0.1)"
    title = f"{vendor.title} — {TURNS} user turns, tool chains with parallel calls, on {where}"
    table = Table(title, HEADER, tuple(s.row() for s in stats), (reading(vendor, stats, live),))
    return table, stats


SWITCH_HEADER = (
    "turn",
    "vendor",
    "requests (count)",
    "withheld foreign payloads (count)",
    "opaque kinds withheld (vendor:kind)",
    "protocol errors (count)",
)


def switch_table() -> Table:
    """One conversation that moves vendor between turns (``Session.switch``): what each vendor was sent of
    the earlier vendors' state. Opaque continuation never crosses; earlier steps go in the new API's own
    format; every request is accepted by that vendor's strict emulator."""
    asked = questions()[: len(SWITCH_ROUTE)]
    rows = _switch_rows(asked, scripted_actions())
    errors = sum(int(r[5]) for r in rows)
    withheld = rows[-1][3]
    return Table(
        "One conversation, switching vendor between turns (Session.switch) — on the emulators",
        SWITCH_HEADER,
        tuple(tuple(r) for r in rows),
        (
            f"{errors} protocol errors: each vendor got the earlier vendors' text and tool calls in its own "
            f"format, and none of their opaque payloads (signatures, encrypted items, model-bound reasoning: "
            f"{withheld} withheld by the last turn).",
        ),
        labels=2,
    )
