"""Nothing paid is lost when a policy fails; one session is used by one caller at a time, many in parallel.

Real ``anthropic`` SDK, real HTTP, the strict emulator.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.policies import Compress
from reasonstate.state import EventKind, History, Turn, TurnView
from reasonstate.testing import Fault, ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator

MODEL = "claude-sonnet-4-6"
THINKING = {"type": "enabled", "budget_tokens": 2048}


@pytest.fixture
def emulator() -> Any:
    with AnthropicEmulator() as emu:
        yield emu


def _session(emulator: AnthropicEmulator, **kw: Any) -> rs.Session:
    return rs.Session(emulator.client(max_retries=0), model=MODEL, max_tokens=4096, thinking=THINKING, **kw)


def _boom(turn: Turn) -> str:
    raise RuntimeError("summarizer down")


class _Malformed:
    """A policy whose view has the wrong number of keep flags."""

    name = "malformed"

    def decide(self, history: History, closed: int) -> Mapping[int, TurnView]:
        return {closed: TurnView(keep_reasoning=(), policy=self.name)}

    def spec(self) -> dict[str, Any]:
        return {"policy": self.name}


@pytest.mark.parametrize(
    ("policy", "error"),
    [(Compress(_boom), "RuntimeError"), (_Malformed(), "PolicyConflict")],
    ids=["raises", "malformed"],
)
def test_a_failing_policy_keeps_the_paid_reply_closes_under_keep_and_is_traced_and_logged(
    emulator: AnthropicEmulator, policy: Any, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.script.extend(
        [ModelAction.answer("Rome.", reasoning="warm"), ModelAction.answer("Yes.", reasoning="r")]
    )
    session = _session(emulator, policy=policy)
    with caplog.at_level(logging.WARNING, logger="reasonstate"):
        reply = session.send("Paris or Rome?")
    assert reply.text == "Rome."
    turn = session.history.turns[0]
    assert turn.view == TurnView(keep_reasoning=(True,), policy="keep")
    failed = session.trace.of_kind(EventKind.POLICY_FAILED)
    assert [(e.data["policy"], e.data["error"]) for e in failed] == [(policy.name, error)]
    assert f"policy {policy.name} failed on turn 0; the turn closes under Keep" in caplog.text
    assert session.report().requests == 1 and session.report().failed_calls == 0
    session.send("Sure?")  # and the session goes on: the kept thinking block is replayed
    replayed = json.loads(emulator.requests[1].body)["messages"][1]["content"]
    assert [b["type"] for b in replayed] == ["thinking", "text"]


def test_a_second_thread_using_the_same_session_during_a_call_gets_illegal_transition(
    emulator: AnthropicEmulator,
) -> None:
    emulator.script.extend([ModelAction.answer("Rome.")])
    emulator.inject(Fault.delay(0.5))  # the first call is in flight for half a second
    session = _session(emulator)
    started = threading.Event()
    results: list[Any] = []

    def first() -> None:
        started.set()
        results.append(session.send("Paris or Rome?"))

    thread = threading.Thread(target=first)
    thread.start()
    started.wait()
    while session.state is not rs.TurnState.AWAITING_MODEL:
        pass
    with pytest.raises(rs.IllegalTransition, match="in flight"):
        session.send("And Oslo?")
    thread.join()
    assert results[0].text == "Rome." and len(emulator.requests) == 1
    assert len(session.history) == 1


def test_a_second_task_using_the_same_session_during_a_call_gets_illegal_transition(
    emulator: AnthropicEmulator,
) -> None:
    emulator.script.extend([ModelAction.answer("Rome.")])
    emulator.inject(Fault.delay(0.3))

    async def main() -> list[Any]:
        session = rs.AsyncSession(
            emulator.async_client(max_retries=0), model=MODEL, max_tokens=4096, thinking=THINKING
        )
        return await asyncio.gather(
            session.send("Paris or Rome?"), session.send("And Oslo?"), return_exceptions=True
        )

    first, second = asyncio.run(main())
    assert isinstance(first, rs.Reply) and first.text == "Rome."
    assert isinstance(second, rs.IllegalTransition)
    assert len(emulator.requests) == 1


def _expected_bodies(n: int) -> list[bytes]:
    """What each of ``n`` sessions sends, one after another (the control)."""
    with AnthropicEmulator() as emu:
        for i in range(n):
            emu.script.extend([ModelAction.answer(f"a{i}", reasoning=f"r{i}")] * 1)
            session = _session(emu)
            session.send(f"question {i}")
        return [r.body for r in emu.requests]


def test_many_sessions_in_parallel_threads_share_nothing_mutable() -> None:
    n = 8
    expected = _expected_bodies(n)
    emulators = [AnthropicEmulator().start() for _ in range(n)]
    try:
        for i, emu in enumerate(emulators):
            emu.script.extend([ModelAction.answer(f"a{i}", reasoning=f"r{i}")])
        sessions = [_session(emu) for emu in emulators]
        threads = [threading.Thread(target=s.send, args=(f"question {i}",)) for i, s in enumerate(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [emu.requests[0].body for emu in emulators] == expected
        assert [s.history.turns[0].final_text for s in sessions] == [f"a{i}" for i in range(n)]
    finally:
        for emu in emulators:
            emu.stop()


def test_many_async_sessions_in_parallel_tasks_share_nothing_mutable() -> None:
    n = 8
    expected = _expected_bodies(n)
    emulators = [AnthropicEmulator().start() for _ in range(n)]
    try:
        for i, emu in enumerate(emulators):
            emu.script.extend([ModelAction.answer(f"a{i}", reasoning=f"r{i}")])

        async def main() -> list[rs.Reply]:
            sessions = [
                rs.AsyncSession(
                    emu.async_client(max_retries=0), model=MODEL, max_tokens=4096, thinking=THINKING
                )
                for emu in emulators
            ]
            return await asyncio.gather(*(s.send(f"question {i}") for i, s in enumerate(sessions)))

        replies = asyncio.run(main())
        assert [emu.requests[0].body for emu in emulators] == expected
        assert [r.text for r in replies] == [f"a{i}" for i in range(n)]
    finally:
        for emu in emulators:
            emu.stop()
