"""A complete streamed answer followed by garbage (issue 23, item 4): the probe found Anthropic and DeepSeek
committing the answer while Responses and Gemini raised MalformedResponse and discarded an answer that was
paid for. Now every vendor commits it, with a ``stream.trailing_data`` warning in the trace (how many events
and bytes, never the data); only a stream that breaks before its final event loses the answer."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import Fault, ModelAction
from tests.test_switching import FAMILIES, Vendor

GARBAGE = b"data: {this is not json\n\nevent: ping\ndata: \x7b\x7b\n\n"


@pytest.mark.parametrize("family", FAMILIES)
def test_garbage_after_the_final_event_commits_the_answer_with_a_warning(family: str) -> None:
    with ExitStack() as stack:
        v = Vendor(family, stack)
        v.emulator.script.extend(
            [ModelAction(reasoning="Think.", text="The answer is 4."), ModelAction(text="5")]
        )
        session = rs.Session(v.client, model=v.model, stream=True, **v.options)
        v.emulator.inject(Fault.trailing(GARBAGE))
        reply = session.send("2 + 2?")
        assert reply.text == "The answer is 4."
        assert len(session.history) == 1
        warnings = session.trace.of_kind(EventKind.STREAM_TRAILING)
        assert len(warnings) == 1 and warnings[0].data["events"] >= 1  # google-genai stops at the first
        assert "not json" not in repr(warnings[0].data)
        assert session.send("and 2 + 3?").text == "5"  # the next request replays the committed answer


@pytest.mark.parametrize("family", FAMILIES)
def test_a_stream_cut_before_its_final_event_still_commits_nothing(family: str) -> None:
    with ExitStack() as stack:
        v = Vendor(family, stack)
        v.emulator.script.extend([ModelAction(text="The answer is 4.")])
        session = rs.Session(v.client, model=v.model, stream=True, **v.options)
        v.emulator.inject(Fault.truncate_stream(after_events=1))
        with pytest.raises(rs.StreamInterrupted):
            session.send("2 + 2?")
        assert len(session.history) == 0
