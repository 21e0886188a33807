"""The same small agent task written with pydantic-ai and with ``rs.Session``, each guarded, side by side.

    python examples/pydantic_ai_side_by_side.py

Needs ``pip install 'reasonstate[anthropic]' 'pydantic-ai-slim[anthropic]'`` (pydantic-ai is a dev-only
dependency of reasonstate). No API key: both sides talk to reasonstate's local Anthropic emulator through a
real ``anthropic`` client, and the emulator answers both from the same script (same reasoning, same tool
calls, same answers), so only what each side *sends* differs. To guard real calls, hand the provider an
``anthropic.AsyncAnthropic()`` instead of ``emulator.async_client()``.

The pydantic-ai agent is written the way its users write one: an ``AnthropicModel`` on an
``AnthropicProvider(anthropic_client=...)``, thinking on through ``AnthropicModelSettings``, two
``@agent.tool_plain`` tools, several user turns carried with ``message_history=result.all_messages()``, and
the framework's own prompt-caching switch (``anthropic_cache=True``). The one reasonstate line is
``guard = rs.instrument(client)`` on the client handed to the provider. Three pydantic-ai variants separate
what the framework does from what a habit does:

* ``pydantic-ai + clock``: the agent as commonly written, with ``@agent.instructions`` stamping the current
  time (pydantic-ai evaluates instructions before every model request and sends them as the last system
  block; here the clock moves a minute per user turn, as if each question came a minute later);
* ``pydantic-ai``: the same agent without the clock;
* ``pydantic-ai, no cache setting``: the same agent with the framework's defaults.

The ``rs.Session`` side runs the same task on the same tools and rules; it carries the same clock, in the new
user message (the volatile end of the prompt, where it breaks nothing). For every request the guard's record
gives where the prefix broke (``divergence.path`` and ``.cause``) and its warnings (``continuation_lost``
when an opaque continuation of the previous answer went missing); the cache-hit ratio is cache reads over
prompt tokens (``rs.Usage.cache_read / input_total``, summed), the cost is the packaged price table's.
A request the emulator rejects (it refuses what the vendor refuses, e.g. a thinking block without its
signature) is reported as a finding, not hidden.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.testing import AnthropicEmulator, ModelAction, ToolCallSpec

MODEL = "claude-sonnet-4-6"
THINKING = {"type": "enabled", "budget_tokens": 2048}  # the Session's; the agent's settings spell it out
RULES = "You are a careful travel assistant. " + "Check the weather before advising. " * 150

#: (the minute the user asks, the question); each turn is one ``agent.run`` / ``session.run``
TURNS = (
    ("2026-12-01 09:00", "Paris or Rome: which is warmer?"),
    ("2026-12-01 09:01", "What time is it in Rome?"),
    ("2026-12-01 09:02", "What should I pack for Rome?"),
)

#: what the model does, one action per request, the same for every side
SCRIPT = (
    ModelAction.call(
        ToolCallSpec("get_weather", {"city": "Paris"}),
        ToolCallSpec("get_weather", {"city": "Rome"}),
        reasoning="Two cities: ask for both forecasts at once.",
    ),
    ModelAction.answer("Rome (22C) is warmer than Paris (18C).", reasoning="Rome is warmer."),
    ModelAction.call(ToolCallSpec("get_local_time", {"city": "Rome"}), reasoning="Ask for the local time."),
    ModelAction.answer("It is 09:00 in Rome.", reasoning="Read the clock."),
    ModelAction.answer("Light layers and sunglasses: Rome is mild.", reasoning="Mild weather, pack light."),
)
#: how many scripted requests the first n turns make (two per turn with a tool call, one without)
REQUESTS_PER_TURN = (2, 2, 1)


def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "celsius": {"Paris": 18, "Rome": 22}.get(city, 20)}


def get_local_time(city: str) -> str:
    """Local time in a city."""
    return "09:00"


@attrs.frozen
class Side:
    """One run of the task: the guard's records, the bodies the emulator received, the answers, and the
    finding that stopped it (a rejected request), if any."""

    name: str
    records: tuple[rs.GuardRecord, ...]
    bodies: tuple[bytes, ...]
    answers: tuple[str, ...]
    #: (cache read, prompt tokens) as the side's own accounting has them: pydantic-ai's ``RunUsage`` summed
    #: over the runs, the session's ``report()``; the guard's figures must agree with it
    own_usage: tuple[int, int]
    error: str | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(r.usage.input_total for r in self.records if r.usage is not None)

    @property
    def cache_read(self) -> int:
        return sum(r.usage.cache_read for r in self.records if r.usage is not None)

    @property
    def hit_ratio(self) -> float:
        """Cache reads over prompt tokens, over every request of the run."""
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else 0.0

    def costs(self, pricing: rs.Pricing | None = None) -> tuple[rs.Cost | None, ...]:
        table = pricing or rs.Pricing.default()
        return tuple(None if r.usage is None else table.cost(r.model, r.usage) for r in self.records)

    @property
    def cost(self) -> float:
        return sum(c.total for c in self.costs() if c is not None)

    @property
    def causes(self) -> tuple[tuple[int, str, str], ...]:
        """(request, cause, path) of every request that breaks its conversation's prefix."""
        return tuple((r.index, r.divergence.cause, r.divergence.path) for r in self.records if r.divergence)

    @property
    def warnings(self) -> tuple[tuple[int, str], ...]:
        return tuple((r.index, w.kind) for r in self.records for w in r.warnings)


# -- the pydantic-ai side: the framework's code, untouched but for the one guard line ------------------------


async def _pydantic_ai(name: str, turns: int, *, cache: bool, clock: bool) -> Side:
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider

    now = [TURNS[0][0]]
    with AnthropicEmulator(list(SCRIPT)) as emulator:
        client = emulator.async_client()
        guard = rs.instrument(client)  # the one line
        model = AnthropicModel(MODEL, provider=AnthropicProvider(anthropic_client=client))
        settings = AnthropicModelSettings(
            max_tokens=4096, anthropic_thinking={"type": "enabled", "budget_tokens": 2048}
        )
        if cache:
            settings["anthropic_cache"] = True
        agent = Agent(model, instructions=RULES, model_settings=settings)
        if clock:

            @agent.instructions
            def current_time() -> str:
                return f"Now: {now[0]}."

        agent.tool_plain(get_weather)
        agent.tool_plain(get_local_time)

        history: list[Any] = []
        answers: list[str] = []
        read = prompt = 0
        error = None
        for minute, question in TURNS[:turns]:
            now[0] = minute
            try:
                result = await agent.run(question, message_history=history)
            except Exception as exc:  # a request the strict emulator refused: a finding, reported below
                error = f"{type(exc).__name__}: {exc}"
                break
            history = result.all_messages()
            answers.append(str(result.output))
            usage = result.usage  # this run's requests (pydantic-ai counts cache reads inside input_tokens)
            read, prompt = read + usage.cache_read_tokens, prompt + usage.input_tokens
        bodies = tuple(r.body for r in emulator.requests)
        return Side(name, guard.records, bodies, tuple(answers), (read, prompt), error)


# -- the same task on rs.Session ----------------------------------------------------------------------------


def _session(turns: int) -> Side:
    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [
        rs.Tool(name="get_weather", description="Current weather for a city.", parameters=city,
                handler=get_weather, parallel_safe=True),
        rs.Tool(name="get_local_time", description="Local time in a city.", parameters=city,
                handler=get_local_time),
    ]  # fmt: skip
    with AnthropicEmulator(list(SCRIPT)) as emulator:
        client = emulator.client()
        guard = rs.instrument(client)  # the same measurement on both sides
        session = rs.Session(
            client, model=MODEL, system=RULES, tools=tools, max_tokens=4096, thinking=THINKING
        )
        answers = [session.run(f"Now: {minute}. {question}").text for minute, question in TURNS[:turns]]
        own = session.report()
        bodies = tuple(r.body for r in emulator.requests)
        return Side("rs.Session", guard.records, bodies, tuple(answers), (own.cache_read, own.prompt_tokens))


def run(turns: int = len(TURNS)) -> dict[str, Side]:
    """Run the task through every side; ``turns`` shortens it (the scripted replies stay the same)."""

    async def frameworks() -> list[Side]:
        return [
            await _pydantic_ai("pydantic-ai + clock", turns, cache=True, clock=True),
            await _pydantic_ai("pydantic-ai", turns, cache=True, clock=False),
            await _pydantic_ai("pydantic-ai, no cache setting", turns, cache=False, clock=False),
        ]

    sides = [*asyncio.run(frameworks()), _session(turns)]
    return {side.name: side for side in sides}


# -- printing ----------------------------------------------------------------------------------------------


def _cell(record: rs.GuardRecord | None) -> str:
    if record is None:
        return "-"
    usage = record.usage
    read = f"read {usage.cache_read:>4}/{usage.input_total:<4}" if usage is not None else "no usage"
    read += f" (pred {record.predicted_cache_read})"
    what = f"{record.divergence.cause} at {record.divergence.path}" if record.divergence else "extends"
    warned = "".join(f" [{w.kind}]" for w in record.warnings)
    return f"{read} {what}{warned}"


def report(sides: dict[str, Side], left: str = "pydantic-ai + clock", right: str = "rs.Session") -> str:
    """The per-request comparison of two sides, then every side's totals and findings."""
    a, b = sides[left], sides[right]
    lines = [f"{'req':<4}{left:<66}{right}"]
    for i, (x, y) in enumerate(itertools.zip_longest(a.records, b.records)):
        lines.append(f"{i:<4}{_cell(x):<66}{_cell(y)}")
    lines.append("")
    lines.append(f"{'side':<32}{'requests':>9}{'prompt':>8}{'read':>7}{'hit ratio':>11}{'USD':>11}  breaks")
    for side in sides.values():
        breaks = ", ".join(f"#{i} {cause}" for i, cause, _ in side.causes) or "none"
        lines.append(
            f"{side.name:<32}{len(side.records):>9}{side.prompt_tokens:>8}{side.cache_read:>7}"
            f"{side.hit_ratio:>11.1%}{side.cost:>11.6f}  {breaks}"
        )
        for i, kind in side.warnings:
            lines.append(f"{'':<32}warning on request {i}: {kind}")
        if (side.cache_read, side.prompt_tokens) != side.own_usage:
            lines.append(f"{'':<32}its own accounting differs: read/prompt {side.own_usage}")
        if side.error is not None:
            lines.append(f"{'':<32}finding: the emulator refused a request: {side.error}")
    return "\n".join(lines)


def main(turns: int = len(TURNS)) -> dict[str, Side]:
    sides = run(turns)
    print(report(sides))
    return sides


def requests_of(turns: int, script: Sequence[int] = REQUESTS_PER_TURN) -> int:
    """How many requests the first ``turns`` turns make when nothing is refused."""
    return sum(script[:turns])


if __name__ == "__main__":
    main()
