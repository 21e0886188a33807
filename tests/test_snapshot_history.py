"""The snapshot's compact history form: an exact round trip of every value a history holds, payloads
whose bytes are not JSON a round trip keeps, the digest that refuses an edited payload, size, version."""

from __future__ import annotations

import json
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.snapshot import SNAPSHOT_VERSION, history_from_snapshot, history_to_snapshot
from reasonstate.state import (
    Continuation,
    Folded,
    History,
    OpaquePart,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Turn,
    TurnView,
    Usage,
)
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator


def _raw(kind: str, payload: bytes, bound: bool = True) -> Continuation:
    return Continuation.restored(
        vendor="v", api="a", model="m", kind=kind, payload=payload, model_bound=bound
    )


def _history() -> History:
    captured = Continuation.capture(
        vendor="v", api="a", model="m", kind="thinking", value={"type": "thinking", "thinking": "é\u2028"}
    )
    odd = (
        _raw("float", b'{"x":1.0,"y":1e+16}'),  # floats: kept as text
        _raw("spaced", b'{"a": 1}', bound=False),  # not compact JSON
        _raw("dup", b'{"a":1,"a":2}'),  # a duplicate key a parse would lose
        _raw("nan", b'{"a":NaN}'),
        _raw("bytes", b"not json at all"),
    )
    step0 = Step(
        parts=(
            ReasoningPart(text="é\u2028", continuation=0),
            ReasoningPart(text="", redacted=True, continuation=1),
            TextPart(text="said"),
            ToolCallPart(id="c1", name="f", arguments={"a": 1}, raw_arguments='{"a":1}', continuation=2),
            ToolCallPart(id="c2", name="f", arguments={"a": 1}, raw_arguments='{"a":1.0}'),  # not derivable
            ToolCallPart(id="c3", name="f", arguments=None, raw_arguments="{bad", arguments_error="broken"),
            ToolCallPart(id="c4", name="f", arguments={}, raw_arguments=""),
            OpaquePart(type="x", continuation=3),
        ),
        continuation=(captured, *odd),
        stop_reason="tool_use",
        usage=Usage(
            uncached_input=1, cache_read=2, cache_write=3, output=4, reasoning=None, cache_write_1h=2
        ),
        model="m",
        tool_results=(
            ToolResultPart(call_id="c1", content="ok"),
            ToolResultPart(call_id="c2", content="no", is_error=True),
        ),
        response_id="r1",
        response_stored=True,
    )
    step1 = Step(
        parts=(TextPart(text="done", continuation=0),),
        continuation=(odd[1],),
        stop_reason="end",
        usage=Usage(output=2, reasoning=0),
        model="m2",
    )
    turns = (
        Turn(0, "q0", (step0, step1), TurnView((False, True), policy="p", summary="s")),
        Turn(1, "q1", (step1,), TurnView((True,), policy="keep")),
        Turn(7, "odd index", (), None),
    )
    return History(turns, Folded(through=0, summary="folded"))


def test_the_compact_history_restores_equal_with_the_very_payload_bytes() -> None:
    history = _history()
    data = json.loads(json.dumps(history_to_snapshot(history), ensure_ascii=False))
    restored = history_from_snapshot(data)
    assert restored == history
    pairs = zip(
        (c for t in restored.turns for s in t.steps for c in s.continuation),
        (c for t in history.turns for s in t.steps for c in s.continuation),
        strict=True,
    )
    for got, want in pairs:
        assert (got.payload, got.digest) == (want.payload, want.digest)
    # what JSON cannot give back exactly is written as text; the rest as JSON values
    forms = [len(c) for t in data["turns"] for s in t[1] for c in s[1]]
    assert forms[:6] == [2, 3, 3, 3, 3, 3]


def test_an_edited_payload_is_refused_by_the_history_digest() -> None:
    data = history_to_snapshot(_history())
    data["turns"][0][1][0][1][0][1]["thinking"] = "edited"
    with pytest.raises(rs.ContinuationMismatch):
        history_from_snapshot(data)
    data = history_to_snapshot(_history())
    data["turns"][0][1][0][1][1][1] = '{"x":2.0,"y":1e+16}'
    with pytest.raises(rs.ContinuationMismatch):
        history_from_snapshot(data)


def _session(emu: AnthropicEmulator, turns: int) -> rs.Session:
    session = rs.Session(
        emu.client(),
        model="claude-sonnet-4-6",
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    for i in range(turns):
        session.send(f"Question {i}?")
    return session


def test_the_history_part_is_close_to_the_content_it_holds() -> None:
    script = [ModelAction.answer("Short answer.", reasoning="Short thought. " * 4) for _ in range(30)]
    with AnthropicEmulator(script) as emu:
        session = _session(emu, 30)
        content = sum(
            len(t.user.encode())
            + sum(len(s.text.encode()) + len(s.reasoning_text.encode()) for s in t.steps)
            + sum(len(c.payload) for s in t.steps for c in s.continuation)
            for t in session.history.turns
        )
        text = session.snapshot().model_dump_json()
        part = len(json.dumps(json.loads(text)["history"], ensure_ascii=False, separators=(",", ":")))
        assert part <= 1.4 * content
        restored = rs.Session.restore(text, emu.client())
        assert restored.history == session.history


def test_a_snapshot_of_another_version_is_refused_naming_it() -> None:
    with AnthropicEmulator([ModelAction.answer("a", reasoning="r")]) as emu:
        session = _session(emu, 1)
        old = json.loads(session.snapshot().model_dump_json())
        old["version"] = SNAPSHOT_VERSION - 1
        old["history"] = []  # the v2 history was a list of turn objects
        with pytest.raises(rs.SnapshotError, match=f"version {SNAPSHOT_VERSION - 1} is not one"):
            rs.Session.restore(json.dumps(old), emu.client())


@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s["options"].update(max_tokens=5),  # an option
        lambda s: s.update(system=s["system"] + " "),  # one space more
        lambda s: s["execution"][0].__setitem__(-1, s["execution"][0][-1]),  # none: the same value back
        lambda s: s.update(fold={"threshold_tokens": 1}),  # a field the digest leaves out while it is None
    ],
)
def test_a_snapshot_edited_after_it_was_taken_is_refused_and_an_unedited_one_restores(edit: Any) -> None:
    """Issue 21: the restore's content check reads the digest off the validated fields (no JSON-mode copy
    of a 2,000-turn snapshot) and falls back to the written form; either way an edit that changes the
    content is refused and the snapshot as taken restores."""
    with AnthropicEmulator([ModelAction.answer("a", reasoning="r")] * 2) as emu:
        session = _session(emu, 1)
        text = session.snapshot().model_dump_json()
        assert rs.Session.restore(text, emu.client()).history == session.history
        data = json.loads(text)
        before = json.dumps(data, sort_keys=True)
        edit(data)
        if json.dumps(data, sort_keys=True) == before:
            assert rs.Session.restore(json.dumps(data), emu.client()).history == session.history
        else:
            with pytest.raises(rs.SnapshotError):
                rs.Session.restore(json.dumps(data), emu.client())
