"""Caller text that is not valid Unicode (issue 23, item 1, the caller's half): ``send("hi \\ud800")`` and a
tool result ``"x\\ud800"`` ended in a bare ``UnicodeEncodeError``. A lone surrogate (half of a UTF-16 pair,
a valid JSON escape) has no UTF-8 form, so no request can carry it: the session refuses it before sending,
with a typed error naming where, and nothing changes."""

from __future__ import annotations

import pytest

import reasonstate as rs
from reasonstate.testing.anthropic import AnthropicEmulator
from tests.conftest import answer, make_session, three_step_chain


def test_a_user_message_with_a_lone_surrogate_is_invalid_input() -> None:
    with AnthropicEmulator([answer(0)]) as emu:
        session = make_session(emu)
        with pytest.raises(rs.InvalidInput, match=r"index 3 is half of a UTF-16 surrogate pair"):
            session.send("hi \ud800 there")
        assert emu.requests == [] and len(session.history) == 0 and session.state is rs.TurnState.IDLE
        assert session.send("hi \U0001f600 there").text  # a whole pair (the emoji) is fine


def test_a_tool_result_with_a_lone_surrogate_is_a_tool_result_error_naming_the_call() -> None:
    with AnthropicEmulator(three_step_chain()) as emu:
        session = make_session(emu)
        reply = session.send("Paris or Rome?")
        before = session.history
        first = reply.tool_calls[0].id
        results = {c.id: "fine" for c in reply.tool_calls} | {first: {"temp": "x\udc00"}}
        with pytest.raises(rs.ToolResultError, match=first):
            session.send_tool_results(results)
        assert session.history == before and session.state is rs.TurnState.AWAITING_TOOL_RESULTS
        assert len(emu.requests) == 1
        session.send_tool_results({c.id: "fine" for c in reply.tool_calls})
