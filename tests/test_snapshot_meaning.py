"""Snapshots that pass the seal but are wrong (issue 23, item 2): edited, then resealed with the public
``SessionSnapshot.sealed()``, they are refused by meaning, as ``SnapshotError`` naming the field; no restored
session can be wedged, send turns out of order, or repeat a tool-call id."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.testing.anthropic import AnthropicEmulator
from tests._snapshots import redigest
from tests.conftest import CLOCK, MODEL, SYSTEM, THINKING, WEATHER, answer, run_chain, three_step_chain

OPTIONS: dict[str, Any] = {
    "system": SYSTEM,
    "tools": [WEATHER, CLOCK],
    "max_tokens": 4096,
    "thinking": THINKING,
}


@pytest.fixture(scope="module")
def pending() -> Iterator[tuple[dict[str, Any], AnthropicEmulator]]:
    """A snapshot of a session with two closed turns (a tool chain, an answer) and a third awaiting tool
    results, as JSON data, and the emulator it ran on."""
    with AnthropicEmulator([*three_step_chain(), answer(1), *three_step_chain()]) as emu:
        session = rs.Session(emu.client(), model=MODEL, **OPTIONS)
        run_chain(session)
        session.send("hello")
        session.send("Paris or Rome?")
        yield session.snapshot().model_dump(mode="json"), emu


def restored(
    data: dict[str, Any], emu: AnthropicEmulator, edit: Callable[[dict[str, Any]], None]
) -> rs.Session:
    d = json.loads(json.dumps(data))
    edit(d)
    redigest(d)
    snap = rs.SessionSnapshot.model_validate(d).sealed()
    return rs.Session.restore(snap.model_dump_json(), emu.client())


def _indexed(d: dict[str, Any]) -> list[Any]:
    turns: list[Any] = d["history"]["turns"]
    for i, t in enumerate(turns):
        while len(t) < 3:
            t.append(None)
        if len(t) < 4:
            t.append(i)
    return turns


def test_an_unknown_state_is_a_snapshot_error_naming_it(pending: Any) -> None:
    with pytest.raises(rs.SnapshotError, match="state: 'dancing'"):
        restored(*pending, lambda d: d.update(state="dancing"))


def test_a_state_that_disagrees_with_the_history_is_refused(pending: Any) -> None:
    """The wedge the probe found: ``awaiting_tool_results`` on an idle history restored, and
    ``send_tool_results({})`` then hit a bare AssertionError."""
    with pytest.raises(rs.SnapshotError, match="idle"):
        restored(*pending, lambda d: d.update(state="idle"))

    def close_last(d: dict[str, Any]) -> None:
        turns = d["history"]["turns"]
        turns.pop()
        d["state"] = "awaiting_tool_results"

    with pytest.raises(rs.SnapshotError, match="no pending tool calls"):
        restored(*pending, close_last)


def test_turns_out_of_order_are_refused(pending: Any) -> None:
    def reverse(d: dict[str, Any]) -> None:
        turns = _indexed(d)
        turns[0], turns[1] = turns[1], turns[0]

    with pytest.raises(rs.SnapshotError, match=r"turns\[0\]: its index is 1"):
        restored(*pending, reverse)


def test_a_duplicated_turn_is_refused_before_it_repeats_a_tool_use_id(pending: Any) -> None:
    def duplicate(d: dict[str, Any]) -> None:
        turns = _indexed(d)
        turns.insert(1, json.loads(json.dumps(turns[0])))
        for i, t in enumerate(turns):
            t[3] = i

    with pytest.raises(rs.SnapshotError, match="appears twice"):
        restored(*pending, duplicate)


def test_a_version_written_as_text_is_not_coerced(pending: Any) -> None:
    data, _ = pending
    d = dict(data, version="3")
    with pytest.raises(rs.SnapshotError, match="version"):
        rs.SessionSnapshot.load(json.dumps(d))


def test_tools_that_are_not_tools_are_an_invalid_option(pending: Any) -> None:
    data, emu = pending
    with pytest.raises(rs.InvalidOption, match="tools="):
        rs.Session.restore(json.dumps(data), emu.client(), tools="x")  # type: ignore[arg-type]


def test_the_unedited_snapshot_still_restores_and_continues(pending: Any) -> None:
    data, emu = pending
    session = rs.Session.restore(json.dumps(data), emu.client())
    assert session.state is rs.TurnState.AWAITING_TOOL_RESULTS
    calls = session.pending_calls
    reply = session.send_tool_results({c.id: {"ok": True} for c in calls})
    assert reply is not None
