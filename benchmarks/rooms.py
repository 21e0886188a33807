"""How many reasonstate rooms one steady-state request crosses (issue: one turn engine, one room per vendor).

Traces a warmed-up Anthropic session against the local emulator with ``sys.setprofile`` and counts the
reasonstate files (outside ``testing/`` and ``state/``, which are the emulator and the values) and the
distinct functions entered by one ``send``, one ``send_tool_results`` and one ``stream`` (sync and async).
The target is at most 6 files for each. The policy the caller configured is counted apart (the ``policy``
column): a turn-closing request calls its ``decide`` once, exactly as it would call a policy the caller
wrote (which lives outside reasonstate and so is not counted at all); the built-in ``Keep`` lives in
``policies/``, so the column shows what choosing a built-in adds.

    .venv/bin/python benchmarks/rooms.py            # the table
    .venv/bin/python benchmarks/rooms.py --files    # and the files each call entered
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import reasonstate as rs
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator

ROOT = pathlib.Path(rs.__file__).resolve().parent
EXCLUDED = ("testing", "state")
POLICY = "policies"
TARGET = 6
MODEL = "claude-sonnet-4-6"
WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


#: the session every row measures: tools and extended thinking, so a turn is a tool chain with reasoning
OPTIONS: dict[str, Any] = {
    "model": MODEL,
    "tools": [WEATHER],
    "max_tokens": 4096,
    "thinking": {"type": "enabled", "budget_tokens": 2048},
}


def _room(frame: FrameType) -> str | None:
    path = pathlib.Path(frame.f_code.co_filename)
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] in EXCLUDED:
        return None
    return str(rel)


def traced(fn: Callable[[], Any]) -> tuple[set[str], set[tuple[str, str]]]:
    files: set[str] = set()
    functions: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        room = _room(frame)
        if room is not None:
            files.add(room)
            functions.add((room, frame.f_code.co_qualname if hasattr(frame.f_code, "co_qualname") else ""))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return files, functions


def _script(turns: int) -> list[ModelAction]:
    actions: list[ModelAction] = []
    for i in range(turns):
        actions.append(
            ModelAction(
                reasoning=f"Look it up {i}.", tool_calls=(ToolCallSpec("get_weather", {"city": "Rome"}),)
            )
        )
        actions.append(ModelAction(reasoning=f"Answer {i}.", text=f"Warm {i}."))
    return actions


def sync_rows() -> list[tuple[str, set[str], set[tuple[str, str]]]]:
    with AnthropicEmulator(script=_script(8)) as emu:
        session = rs.Session(emu.client(max_retries=0), **OPTIONS)
        for i in range(2):  # steady state: every module imported, memos warm
            reply = session.send(f"warm-up {i}")
            session.send_tool_results({c.id: {"temp_c": 20} for c in reply.tool_calls})
        holder: dict[str, Any] = {}
        rows = []
        files, fns = traced(lambda: holder.__setitem__("r", session.send("question")))
        rows.append(("Session.send", files, fns))
        calls = holder["r"].tool_calls
        files, fns = traced(lambda: session.send_tool_results({c.id: {"temp_c": 21} for c in calls}))
        rows.append(("send_tool_results, closing", files, fns))

        def streamed() -> None:
            with session.stream("streamed question") as stream:
                for _ in stream:
                    pass

        files, fns = traced(streamed)
        rows.append(("Session.stream", files, fns))
        return rows


def mid_chain_row() -> tuple[str, set[str], set[tuple[str, str]]]:
    """``send_tool_results`` inside a chain: the model answers the results with another call, so the turn
    stays open (no policy runs); the row above it closes the turn."""
    call = ModelAction(reasoning="Look it up.", tool_calls=(ToolCallSpec("get_weather", {"city": "Rome"}),))
    chain = [call, call, ModelAction(reasoning="Answer.", text="Warm.")]
    with AnthropicEmulator(script=chain * 3) as emu:
        session = rs.Session(emu.client(max_retries=0), **OPTIONS)
        for i in range(2):
            session.send(f"warm-up {i}")
            for _ in range(2):
                session.send_tool_results({c.id: {"temp_c": 20} for c in session.pending_calls})
        session.send("question")
        pending = session.pending_calls
        files, fns = traced(lambda: session.send_tool_results({c.id: {"temp_c": 21} for c in pending}))
        return ("send_tool_results, mid-chain", files, fns)


def async_rows() -> list[tuple[str, set[str], set[tuple[str, str]]]]:
    with AnthropicEmulator(script=_script(8)) as emu:
        session = rs.AsyncSession(emu.async_client(max_retries=0), **OPTIONS)
        loop = asyncio.new_event_loop()
        try:
            for i in range(2):
                reply = loop.run_until_complete(session.send(f"warm-up {i}"))
                loop.run_until_complete(
                    session.send_tool_results({c.id: {"temp_c": 20} for c in reply.tool_calls})
                )

            async def streamed() -> None:
                async with session.stream("streamed question") as stream:
                    async for _ in stream:
                        pass

            files, fns = traced(lambda: loop.run_until_complete(session.send("question")))
            rows = [("AsyncSession.send", files, fns)]
            loop.run_until_complete(
                session.send_tool_results({c.id: {"t": 1} for c in session.pending_calls})
            )
            files, fns = traced(lambda: loop.run_until_complete(streamed()))
            rows.append(("AsyncSession.stream", files, fns))
            return rows
        finally:
            loop.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", action="store_true", help="list the files each call entered")
    args = parser.parse_args()
    rows = [*sync_rows(), mid_chain_row(), *async_rows()]
    print(
        f"{'call':<30} {'files':>5} {'functions':>9}   (outside testing/, state/, the configured policy;"
        f" target <= {TARGET})"
    )
    worst = 0
    for name, files, fns in rows:
        own = {f for f in files if f.split("/")[0] != POLICY}
        worst = max(worst, len(own))
        policy = f"+{len(files) - len(own)} policy" if files - own else ""
        print(f"{name:<30} {len(own):>5} {len(fns):>9}   {policy}".rstrip())
        if args.files:
            for f in sorted(files):
                print(f"    {f}")
    ok = worst <= TARGET
    print(f"most files entered by one call: {worst} ({'meets' if ok else 'misses'} the target of {TARGET})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
