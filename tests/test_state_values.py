"""The hot path rebuilds a few state values with their constructors instead of ``attrs.evolve`` (which
introspects the class on every call): ``Turn.with_steps`` / ``Turn.with_view`` and the commit's ``Layers``.
A field those constructors forget would be silently reset to its default on the next step. The tests here
fail when that happens, whatever the fields are: the turn's by giving every field a value of its own and
checking that the ``with_`` methods carry each one; the commit's by a carried field whose loss a vendor
would see (a payload stripped after a rejection must stay out of every later request)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

import reasonstate as rs
from reasonstate.state import Continuation, EventKind
from reasonstate.state.history import Turn, TurnView
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from tests._snapshots import payloads, redigest


class _Own:
    """A value no default equals: a field that comes back as something else was not carried."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _turn_with_a_value_of_its_own_in_every_field() -> Turn:
    return Turn(**{f.name.lstrip("_"): _Own(f"the original {f.name}") for f in attrs.fields(Turn) if f.init})


@pytest.mark.parametrize("method", ["with_steps", "with_view"])
def test_with_steps_and_with_view_carry_every_other_field_of_the_turn(method: str) -> None:
    turn = _turn_with_a_value_of_its_own_in_every_field()
    replaced = method.removeprefix("with_")
    new = _Own(f"the new {replaced}")
    rebuilt = getattr(turn, method)(new)
    assert getattr(rebuilt, replaced) is new
    for field in attrs.fields(Turn):
        if field.init and field.name != replaced:
            assert getattr(rebuilt, field.name) is getattr(turn, field.name), field.name


def test_with_methods_give_the_value_evolve_gives() -> None:
    turn = Turn(3, "hi")
    view = TurnView((), policy="keep")
    assert turn.with_view(view) == attrs.evolve(turn, view=view)
    assert turn.with_steps(()).view is None
    assert turn.with_view(view).with_steps(()) == attrs.evolve(turn, view=view)


WEATHER = rs.Tool(
    name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}}
)
CALL = ModelAction(
    reasoning="Need the weather.", tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),)
)


def _tampered(session: rs.Session) -> rs.SessionSnapshot:
    """The snapshot with the first turn's thinking signature edited (and the snapshot re-sealed)."""
    snap = json.loads(session.snapshot().model_dump_json())
    for value in payloads(snap, 0):
        if "signature" in value:
            value["signature"] = value["signature"][:-8] + ("A" * 7) + value["signature"][-1]
            redigest(snap)
            break
    return rs.SessionSnapshot.model_validate(snap).model_copy(
        update={"on_rejected_continuation": "strip_and_retry"}
    )


def _assistant_blocks(request: Any) -> list[list[str]]:
    messages = json.loads(request.body)["messages"]
    return [[b["type"] for b in m["content"]] for m in messages if m["role"] == "assistant"]


def test_a_payload_stripped_after_a_rejection_stays_out_of_every_later_request() -> None:
    """The commit rebuilds the layers with their ``stripped`` digests carried over (docs/protocols.md §4.3:
    a rejected signature is rejected again; the session leaves it out for good after one retry)."""
    with AnthropicEmulator() as emu:
        emu.script.extend(
            [CALL, ModelAction.answer("Mild.", reasoning="ok")]
            + [ModelAction.answer(f"Yes {i}.", reasoning=f"r{i}") for i in range(3)]
        )
        session = rs.Session(
            emu.client(max_retries=0),
            model="claude-sonnet-4-6",
            tools=[WEATHER],
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
        )
        reply = session.send("Paris weather?")
        session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
        session = rs.Session.restore(_tampered(session).sealed(), emu.client(max_retries=0))
        for question in ("Sure?", "Really?", "Tomorrow?"):
            session.send(question)
        assert len(emu.requests) == 2 + 1 + 1 + 2  # one rejection, its retry, then two plain requests
        for request in emu.requests[-3:]:  # the retry and every request after it: the bad block left out
            assert _assistant_blocks(request)[:2] == [["tool_use"], ["thinking", "text"]]
        assert len(session.trace.of_kind(EventKind.CALL_FAILED)) == 1
        assert len(session.trace.of_kind(EventKind.CONTINUATION_STRIPPED)) == 1


def test_a_provenance_only_continuation_is_shared_keeps_no_bytes_and_keeps_the_replay_rules() -> None:
    """Issue 21: a step whose item is its parts rendered keeps one provenance-only value, shared (with its
    one-tuple) by every step of the same origin, restored as that same value; it has no payload to read and
    still says where the step's reasoning may go."""
    from reasonstate.state.continuation import FIRST_PARTY, provenance_only, shared_bare

    one = provenance_only(vendor="deepseek", api="chat", model="deepseek-v4-pro", kind="message")
    assert provenance_only(vendor="deepseek", api="chat", model="deepseek-v4-pro", kind="message") is one
    (c,) = one
    assert (c.bare, c.payload, c.model_bound, c.platform) == (True, b"", False, FIRST_PARTY)
    assert c.digest == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    c.verify()
    assert c.value is None and c.checked() is None
    # not bound to its model (DeepSeek's reasoning_content goes back after a model switch, §3.3), bound to
    # its vendor, API and platform
    assert c.replayable_to("deepseek", "chat", "deepseek-flash")
    assert not c.replayable_to("openai", "chat", "deepseek-v4-pro")
    assert not c.replayable_to("deepseek", "responses", "deepseek-v4-pro")
    assert not c.replayable_to("deepseek", "chat", "deepseek-v4-pro", "azure")
    other = provenance_only(vendor="deepseek", api="chat", model="deepseek-flash", kind="message")
    assert other is not one and other != one
    restored = Continuation.restored(
        vendor="deepseek", api="chat", model="deepseek-v4-pro", kind="message", payload=b"", model_bound=False
    )
    assert restored is c
    assert shared_bare((attrs.evolve(c),)) is one  # an equal value in a tuple of its own: the shared one
    kept = Continuation.capture(vendor="deepseek", api="chat", model="m", kind="message", value={"a": 1})
    assert not kept.bare and shared_bare((kept,)) == (kept,)
