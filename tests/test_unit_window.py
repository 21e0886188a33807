"""The execution layer keeps each request's unit count, and the unit digests of the newest requests once
(``Records``: per model the newest request's tuple and each earlier one's difference from the next newer),
so it grows by a small constant per request (issue 21: the records held every request's whole tuple, and a
snapshot of a 2,000-turn session was 450 MB). A long session restored from its snapshot predicts and sends
exactly what the original does; a snapshot whose units were edited, or of the old format, is refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.policies import Keep, KeepLast
from reasonstate.state import UNIT_WINDOW, Records, UnitChain
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests import test_session_openai_responses as responses
from tests.conftest import answer, make_session

#: past the unit window: the oldest requests' units are gone from the records, the window's are diffs
TURNS = UNIT_WINDOW + 8
#: the growth of a snapshot per turn, measured over two halves of this many turns
GROWTH_TURNS = 100


def _grown(session: rs.Session, turns: int) -> None:
    for i in range(turns):
        session.send(f"Question {i}?")


def _execution_bytes(snapshot: rs.SessionSnapshot) -> int:
    data = json.loads(snapshot.model_dump_json())
    return len(json.dumps(data["execution"])) + len(json.dumps(data["units"]))


@pytest.mark.long
@pytest.mark.parametrize(
    ("vendor", "rewrites"), [("anthropic", False), ("responses", False), ("responses", True)]
)
def test_a_restored_long_session_predicts_and_sends_what_the_original_does(
    vendor: str, rewrites: bool
) -> None:
    emulator: Any
    if vendor == "anthropic":
        emulator = AnthropicEmulator([answer(i) for i in range(2 * TURNS + 2)], secret=b"s")
    else:
        emulator = OpenAIResponsesEmulator([responses.answer(i) for i in range(2 * TURNS + 2)])
    with emulator as emu:
        # KeepLast rewrites earlier turns: requests diverge, the older requests' differences are not empty
        # (and the prediction is not knowable); under Keep each request extends the one before
        policy = KeepLast(2) if rewrites else Keep()
        session = (make_session if vendor == "anthropic" else responses.make_session)(emu, policy=policy)
        _grown(session, TURNS)
        (chain,) = session.execution.chains
        assert len(chain.older) == UNIT_WINDOW - 1
        assert any(tail for _, _, tail in chain.older) == rewrites
        restored = rs.Session.restore(
            rs.SessionSnapshot.model_validate_json(session.snapshot().model_dump_json()), emu.client()
        )
        assert restored.execution == session.execution  # the records and their unit chains
        session.send("And the next one?")
        restored.send("And the next one?")
        assert emu.requests[-1].body == emu.requests[-2].body
        ours, theirs = session.execution[-1], restored.execution[-1]
        assert (ours.predicted_cache_read is None) == rewrites
        assert theirs.predicted_cache_read == ours.predicted_cache_read
        assert theirs.divergence == ours.divergence
        assert restored.execution.chains == session.execution.chains


def test_the_execution_part_of_a_snapshot_grows_by_a_constant_per_turn() -> None:
    with AnthropicEmulator([answer(i) for i in range(2 * GROWTH_TURNS)], secret=b"s") as emu:
        session = make_session(emu)
        _grown(session, GROWTH_TURNS // 2)
        half = _execution_bytes(session.snapshot())
        _grown(session, GROWTH_TURNS // 2)
        full = _execution_bytes(session.snapshot())
    # each turn adds one record and three unit digests (the whole tuples made it grow with the square)
    assert full - half < 1.2 * half


def test_a_snapshot_with_an_edited_unit_or_of_the_old_format_is_refused() -> None:
    with AnthropicEmulator([answer(i) for i in range(4)], secret=b"s") as emu:
        session = make_session(emu)
        _grown(session, 3)
        data = json.loads(session.snapshot().model_dump_json())
    rs.SessionSnapshot.load(data)
    edited = json.loads(json.dumps(data))
    edited["units"][0]["units"][-1] = "sha256:" + "0" * 64
    with pytest.raises(rs.SnapshotError, match="edited"):
        rs.SessionSnapshot.load(edited)
    cut = json.loads(json.dumps(data))
    cut["units"][0]["units"].pop()  # sealed again: the seal is right, the chain does not fit its records
    with pytest.raises(rs.SnapshotError, match="does not fit"):
        rs.SessionSnapshot.load(rs.SessionSnapshot.model_validate(cut).sealed().model_dump())
    old = json.loads(json.dumps(data))
    old["version"] = 2
    with pytest.raises(rs.SnapshotError, match="version 2"):
        rs.SessionSnapshot.load(old)


def test_records_refuse_a_chain_that_does_not_fit_them() -> None:
    with AnthropicEmulator([answer(i) for i in range(3)], secret=b"s") as emu:
        session = make_session(emu)
        _grown(session, 2)
    records = session.execution
    (chain,) = records.chains
    assert Records.restored(tuple(records), [chain]) == records
    with pytest.raises(ValueError, match="missing"):
        Records.restored(tuple(records), [])
    with pytest.raises(ValueError, match="does not fit"):
        Records.restored(tuple(records), [UnitChain("other-model", chain.seq, chain.units, chain.older)])
    with pytest.raises(ValueError, match="out of order"):
        Records.restored(tuple(records), [UnitChain(chain.model, chain.seq, chain.units, ((5, 0, ()),))])
