"""Gemini stream failures after the request was sent (issue 23, item 5): a streamed chunk that google-genai
cannot read was reported as ``ProtocolViolation`` "google-genai refused the request before sending it",
although the request had been sent, and ``finishReason: 5`` as ``StreamInterrupted``. Both are now what the
same body unstreamed is, ``MalformedResponse``, with the session unchanged and the failure traced; a request
the SDK refuses before sending is still a ``ProtocolViolation``."""

from __future__ import annotations

import json

import pytest

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import Fault, ModelAction
from reasonstate.testing.gemini import GeminiEmulator

MODEL = "gemini-3-flash"


_CHUNKS = {
    # a candidate whose parts is an object: no google-genai model reads it
    "unreadable": {
        "candidates": [{"content": {"role": "model", "parts": {"not": "a list"}}, "finishReason": "STOP"}]
    },
    # a finish reason given as a number
    "finish-5": {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "Hi."}]}, "finishReason": 5}]
    },
}


@pytest.mark.parametrize("case", sorted(_CHUNKS))
def test_a_streamed_chunk_the_sdk_cannot_read_is_malformed_not_refused(case: str) -> None:
    body = b"data: " + json.dumps(_CHUNKS[case]).encode() + b"\r\n\r\n"
    with GeminiEmulator([ModelAction(text="Hi.")]) as emu:
        session = rs.Session(emu.client(), model=MODEL, stream=True)
        emu.inject(Fault.raw(200, body, content_type="text/event-stream"))
        try:
            session.send("hello")
        except rs.ReasonStateError as exc:
            assert isinstance(exc, rs.MalformedResponse), repr(exc)
        else:
            pytest.skip("google-genai read this chunk: nothing to classify")  # pragma: no cover
        assert len(emu.requests) == 1  # it was sent
        assert len(session.history) == 0
        assert session.trace.of_kind(EventKind.CALL_FAILED)
        assert session.send("hello").text == "Hi."  # the session goes on as it was


def test_a_request_the_sdk_would_refuse_is_refused_when_the_session_is_built() -> None:
    """What google-genai refuses before sending (an option of the wrong type) is an ``InvalidOption`` when the
    session is built (issue 24: options are checked against what the SDK declares), not at the first send."""
    with GeminiEmulator([ModelAction(text="Hi.")]) as emu:
        with pytest.raises(rs.InvalidOption, match="include_thoughts"):
            rs.Session(emu.client(), model=MODEL, stream=True, thinking_config={"include_thoughts": {"x": 1}})
        assert emu.requests == []
