"""Memos live outside the values, in one cache the session owns (issue 20 item 4).

A session owns one :class:`~reasonstate.adapters.base.Encodings` and hands it to every encode and every
history view (stripped payloads, foreign reasoning as text), so a closed turn is derived once, not on every
request; a switch to another adapter starts a new one; an adapter object holds configuration only.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.adapters.base import Encodings
from reasonstate.state import EventKind, Turn
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests._snapshots import payloads, redigest
from tests.conftest import WEATHER

ANTHROPIC = {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}
CALL = ModelAction(
    reasoning="Need the weather.", tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),)
)


def _derived(session: rs.Session, key: Any) -> list[Any]:
    """The view of each closed turn the session's memo holds under ``key`` (None: none memoized)."""
    return [session._encodings.get(t, key) for t in session.history.turns if t.closed]


def _derived_once(seen: list[list[Any]]) -> None:
    """After each request, every closed turn but the one it closed has its view memoized (the turn it
    closed is a new value, derived by the next request), and that view is the very object the first
    request that saw the turn closed derived: derived once."""
    for earlier, later in itertools.pairwise(seen):
        assert all(x is not None for x in later[:-1])
        assert all(x is y for x, y in zip(earlier, later, strict=False) if x is not None)
    assert sum(x is not None for x in seen[-1]) >= 2


def test_foreign_reasoning_as_text_derives_each_closed_turn_once_after_a_switch() -> None:
    with AnthropicEmulator() as a, OpenAIResponsesEmulator() as b:
        a.script.extend([CALL, ModelAction.answer("Mild.", reasoning="Now I can answer.")])
        b.script.extend([ModelAction.answer(f"ok {i}", reasoning="r") for i in range(3)])
        session = rs.Session(
            a.client(max_retries=0),
            model="claude-sonnet-4-6",
            tools=[WEATHER],
            foreign_reasoning="text",
            **ANTHROPIC,
        )
        reply = session.send("Paris weather?")
        session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
        before = session._encodings
        session.switch(b.client(max_retries=0), model="gpt-5.5")
        assert session._encodings is not before  # another codec: a new memo
        key = ("foreign_reasoning_text", "openai", "responses", "gpt-5.5")
        seen: list[list[Any]] = []
        for i in range(3):
            session.send(f"And {i}?")
            seen.append(_derived(session, key))
        first = seen[0][0]
        assert first is not None and first is not session.history.turns[0]  # its reasoning became text
        _derived_once(seen)
        shown = json.loads(b.requests[-1].body)["input"]
        assert any("(Earlier reasoning by claude-sonnet-4-6" in str(i.get("content")) for i in shown)


def test_stripped_payloads_derive_each_closed_turn_once_after_strip_and_retry() -> None:
    with AnthropicEmulator() as emu:
        emu.script.extend([CALL, ModelAction.answer("Mild.", reasoning="ok")])
        emu.script.extend([ModelAction.answer(f"Yes {i}.") for i in range(3)])
        session = rs.Session(
            emu.client(max_retries=0), model="claude-sonnet-4-6", tools=[WEATHER], **ANTHROPIC
        )
        reply = session.send("Paris weather?")
        session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
        snap = json.loads(session.snapshot().model_dump_json())
        value = payloads(snap, 0)[0]
        value["signature"] = value["signature"][:-8] + "A" * 7 + value["signature"][-1]
        redigest(snap)
        tampered = rs.SessionSnapshot.model_validate(snap).model_copy(
            update={"on_rejected_continuation": "strip_and_retry"}
        )
        session = rs.Session.restore(tampered.sealed(), emu.client(max_retries=0))
        seen: list[list[Any]] = []
        for i in range(3):
            assert session.send(f"Sure {i}?").text == f"Yes {i}."
            (stripped,) = session.trace.of_kind(EventKind.CONTINUATION_STRIPPED)
            seen.append(_derived(session, ("stripped", tuple(sorted(stripped.data["digests"])))))
        assert seen[0][0] is not None and seen[0][0] is not session.history.turns[0]
        _derived_once(seen)


@pytest.mark.parametrize("api", ["anthropic", "responses"])
def test_an_adapter_holds_no_memo(api: str) -> None:
    emulator: Any = AnthropicEmulator() if api == "anthropic" else OpenAIResponsesEmulator()
    with emulator as emu:
        emu.script.extend([CALL, ModelAction.answer("Mild.", reasoning="ok"), ModelAction.answer("Yes.")])
        options = ANTHROPIC if api == "anthropic" else {}
        model = "claude-sonnet-4-6" if api == "anthropic" else "gpt-5.5"
        session = rs.Session(emu.client(max_retries=0), model=model, tools=[WEATHER], **options)
        adapter = session._adapter
        attributes = dict(vars(adapter))
        reply = session.send("Paris weather?")
        session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
        session.send("Sure?")
        history = session.history.with_turn(Turn(index=len(session.history.turns), user="Next?"))
        first = adapter.encode(session.prefix, history, model, session._options, session.execution)
        again = adapter.encode(session.prefix, history, model, session._options, session.execution)
        assert first == again  # a fresh memo per call: the same request, nothing kept between
        after = vars(adapter)
        assert after.keys() == attributes.keys() and all(after[k] is v for k, v in attributes.items())
        assert not any(isinstance(v, Encodings) for v in after.values())


def test_a_prefix_holds_no_memo_its_codec_head_is_in_the_session_memo() -> None:
    import attrs

    from reasonstate.prefix import Prefix

    assert [f.name for f in attrs.fields(Prefix)] == ["system", "tools", "few_shots"]
    with AnthropicEmulator() as emu:
        emu.script.extend([ModelAction.answer("Hi.", reasoning="ok")])
        session = rs.Session(
            emu.client(max_retries=0), model="claude-sonnet-4-6", tools=[WEATHER], **ANTHROPIC
        )
        session.send("Hello")

        def rebuilt() -> Any:
            raise AssertionError("the request did not memoize the head of this prefix")

        tools, system, units = session._encodings.derived(session.prefix, ("messages", "head"), rebuilt)
        assert [t["name"] for t in tools] == ["get_weather"] and len(units) == 1 + len(system)
        # another prefix object, equal or not, finds nothing of this one's
        assert Encodings().derived(session.prefix, ("messages", "head"), lambda: None) is None


def test_the_per_text_memo_keeps_what_the_last_two_requests_used_and_a_closed_turn_no_entry() -> None:
    """Memory linear with a small constant (issue 21: cost at both ends): a closed turn's texts are in the
    memoized run, so the per-text entries do not pile up, and a closed turn is kept only as its place in
    the newest run: no per-turn encoding, node or entry."""
    with AnthropicEmulator() as emu:
        emu.script.extend([ModelAction.answer(f"a{i}", reasoning="r") for i in range(12)])
        session = rs.Session(
            emu.client(max_retries=0), model="claude-sonnet-4-6", few_shots=[("Hi?", "Hello.")], **ANTHROPIC
        )
        for i in range(12):
            session.send(f"q{i}?")
        memo = session._encodings
        assert len(memo._calls) + len(memo._older) <= 6  # few-shots, the newest user texts
        assert all(memo._entries(turn) is None for turn in session.history.turns)
        assert len(memo._turns) == 1  # the prefix's (its codec head)
        (run,) = memo._runs.values()
        # the run's turns are a shelf shared by the runs extended from one another (a list)
        assert tuple(run.turns) in (session.history.turns[:-1], session.history.turns)
