"""The turn engine is sans-I/O: a turn driven by hand, with no socket, behaves as ``send`` does.

``Engine.turn`` yields the request to send and takes back the answer (``.send``) or the I/O's exception
(``.throw``); the drivers in ``session.py`` (sessions and streams) are loops around exactly this. The answers
fed in here are the Anthropic Messages API's documented examples (docs.anthropic.com, "Messages" and
"Tool use": the response bodies as printed there); the client is never asked to send anything (its base
URL is a closed port).
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import reasonstate as rs
from reasonstate.adapters.transport import CallResult
from reasonstate.engine import TRANSITIONS, TurnState, finished
from reasonstate.state import EventKind

MODEL = "claude-sonnet-4-6"
#: docs.anthropic.com, Messages API, example response
ANSWER: dict[str, Any] = {
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [{"type": "text", "text": "Hi! My name is Claude."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 2095, "output_tokens": 503},
}
#: docs.anthropic.com, tool use, example response
TOOL_USE: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5},
}
WEATHER = rs.Tool(
    name="get_weather",
    description="Get the current weather in a given location",
    parameters={"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
)


def offline_session(**kw: Any) -> rs.Session:
    client = anthropic.Anthropic(api_key="test-key", base_url="http://127.0.0.1:9", max_retries=0)
    return rs.Session(client, model=MODEL, max_tokens=1024, tools=[WEATHER], **kw)


def test_a_turn_driven_by_hand_yields_the_request_and_commits_the_answer_it_is_given() -> None:
    session = offline_session()
    expected = session.next_request("Hello, Claude")
    turn = session.turn(session._user_attempt("Hello, Claude"))
    request = next(turn)  # begin: encoded, in flight
    assert session.state is TurnState.AWAITING_MODEL
    assert request.kwargs == expected.kwargs
    reply = finished(turn, CallResult(ANSWER))
    assert (reply.text, reply.stop_reason, reply.usage.output) == ("Hi! My name is Claude.", "end_turn", 503)
    assert session.state is TurnState.IDLE
    assert [r.usage.prompt_tokens for r in session.execution] == [2095]


def test_an_exception_thrown_into_a_turn_comes_back_out_and_changes_nothing_but_the_trace() -> None:
    session = offline_session()
    before = (session.history, session.execution, len(session.trace))
    turn = session.turn(session._user_attempt("Hello, Claude"))
    next(turn)
    failure = rs.VendorError("anthropic 529 overloaded_error: Overloaded", status=529)
    with pytest.raises(rs.VendorError) as info:
        turn.throw(failure)
    assert info.value is failure
    assert session.state is TurnState.IDLE
    assert (session.history, session.execution) == before[:2]
    (event,) = session.trace.events[before[2] :]
    assert (event.kind, event.data["status"]) == (EventKind.CALL_FAILED, 529)


def test_a_failure_inside_a_tool_chain_goes_back_to_awaiting_tool_results() -> None:
    session = offline_session()
    turn = session.turn(session._user_attempt("What is the weather like in San Francisco?"))
    next(turn)
    reply = finished(turn, CallResult(TOOL_USE))
    assert session.state is TurnState.AWAITING_TOOL_RESULTS
    results = {reply.tool_calls[0].id: {"temp_f": 59}}
    turn = session.turn(session._tools_attempt(results))
    next(turn)
    with pytest.raises(rs.VendorError):
        turn.throw(rs.VendorError("anthropic 500 api_error", status=500))
    assert session.state is TurnState.AWAITING_TOOL_RESULTS
    assert [c.id for c in session.pending_calls] == ["toolu_01A09q90qw90lq917835lq9"]


def test_once_a_stream_is_open_a_failure_ends_the_turn_recorded() -> None:
    session = offline_session()
    turn = session.turn(session._user_attempt("Hello, Claude"))
    request = next(turn)
    assert turn.send(None) is request  # opened: the engine waits for the answer the caller reads
    with pytest.raises(rs.StreamInterrupted):
        turn.throw(rs.StreamInterrupted("the stream broke: RemoteProtocolError"))
    assert session.state is TurnState.IDLE
    assert [e.data["error"] for e in session.trace.of_kind(EventKind.CALL_FAILED)] == ["StreamInterrupted"]
    assert session.execution == ()


def test_every_move_into_a_call_has_its_failure_and_retry_rows_back() -> None:
    begins = {(s, a) for (s, a), t in TRANSITIONS.items() if t is TurnState.AWAITING_MODEL and a != "retry"}
    assert begins == {(TurnState.IDLE, "send"), (TurnState.AWAITING_TOOL_RESULTS, "send_tool_results")}
    for origin, action in begins:
        assert TRANSITIONS[(TurnState.AWAITING_MODEL, f"{action} failed")] is origin
        assert TRANSITIONS[(origin, "retry")] is TurnState.AWAITING_MODEL
