"""Recovery from a rejected continuation (docs/protocols.md §1.8, §4.3): ``on_rejected_continuation``.

``"raise"`` (default): the vendor's 400 is a typed error and nothing changes. ``"strip_and_retry"``: the
payloads the rejection names are left out (their steps rendered canonically), the call is retried once, and
the trace records the failure and the stripping; it never loops and never forges anything. Inside the open
tool chain the vendor's rules do not allow leaving a payload out, so the error is raised. Real SDKs, real
HTTP, the strict emulators; the tampering is done on a snapshot, re-sealed on purpose.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests._snapshots import payloads, redigest

WEATHER = rs.Tool(
    name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}}
)
CALL = ModelAction(
    reasoning="Need the weather.", tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),)
)


def _tampered(session: rs.Session, turn: int, key: str) -> rs.SessionSnapshot:
    """The session's snapshot with the first payload of ``turn`` holding ``key`` edited (and re-sealed)."""
    snap = json.loads(session.snapshot().model_dump_json())
    for value in payloads(snap, turn):
        if key in value:
            value[key] = value[key][:-8] + ("A" * 7) + value[key][-1]
            redigest(snap)
            return rs.SessionSnapshot.model_validate(snap).sealed()
    raise AssertionError(f"no payload with {key!r}")


def _anthropic(emu: AnthropicEmulator, **kw: Any) -> rs.Session:
    return rs.Session(
        emu.client(max_retries=0),
        model="claude-sonnet-4-6",
        tools=[WEATHER],
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
        **kw,
    )


def _closed_turn_then_tamper(emu: Any, session: rs.Session, key: str, mode: str) -> rs.Session:
    reply = session.send("Paris weather?")
    session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
    snap = _tampered(session, 0, key).model_copy(update={"on_rejected_continuation": mode}).sealed()
    return rs.Session.restore(snap, emu.client(max_retries=0))


def test_strip_and_retry_leaves_out_exactly_the_rejected_thinking_block_retries_once_and_audits() -> None:
    """Pain point: openclaw/openclaw#101836 (a present-but-invalid signature was not stripped)."""
    with AnthropicEmulator() as emu:
        emu.script.extend([CALL, ModelAction.answer("Mild.", reasoning="ok"), ModelAction.answer("Yes.")])
        session = _closed_turn_then_tamper(emu, _anthropic(emu), "signature", "strip_and_retry")
        reply = session.send("Sure?")
        assert reply.text == "Yes."
        rejected, retried = (json.loads(r.body) for r in emu.requests[-2:])
        blocks = [[b["type"] for b in m["content"]] for m in rejected["messages"] if m["role"] == "assistant"]
        assert blocks == [["thinking", "tool_use"], ["thinking", "text"]]
        after = [[b["type"] for b in m["content"]] for m in retried["messages"] if m["role"] == "assistant"]
        assert after == [["tool_use"], ["thinking", "text"]]  # only the rejected block is gone
        failed = session.trace.of_kind(EventKind.CALL_FAILED)
        stripped = session.trace.of_kind(EventKind.CONTINUATION_STRIPPED)
        assert [e.data["status"] for e in failed] == [400] and len(stripped) == 1
        bad = session.history.turns[0].steps[0].continuation[0]
        assert stripped[0].data["digests"] == [bad.digest] and stripped[0].data["kinds"] == ["thinking"]
        assert "Invalid `signature` in `thinking` block" in stripped[0].data["reason"]
        assert session.report().requests == 3 and session.report().failed_calls == 1


def test_by_default_a_rejected_continuation_is_raised_and_nothing_changes() -> None:
    with AnthropicEmulator() as emu:
        emu.script.extend([CALL, ModelAction.answer("Mild.", reasoning="ok")])
        session = _closed_turn_then_tamper(emu, _anthropic(emu), "signature", "raise")
        before = (session.history, session.execution)
        with pytest.raises(rs.VendorError) as info:
            session.send("Sure?")
        assert info.value.status == 400 and (session.history, session.execution) == before
        assert session.trace.of_kind(EventKind.CONTINUATION_STRIPPED) == []


def test_strip_and_retry_never_loops_and_never_strips_inside_the_open_tool_chain() -> None:
    with AnthropicEmulator() as emu:
        emu.script.extend([CALL])
        session = _anthropic(emu, on_rejected_continuation="strip_and_retry")
        reply = session.send("Paris weather?")
        snap = _tampered(session, 0, "signature")
        restored = rs.Session.restore(snap, emu.client(max_retries=0))
        sent = len(emu.requests)
        with pytest.raises(rs.VendorError) as info:
            restored.send_tool_results({c.id: "18C" for c in reply.tool_calls})
        # the vendor requires the open chain's thinking back: leaving it out is not allowed, so no retry
        assert info.value.status == 400 and len(emu.requests) == sent + 1
        assert restored.trace.of_kind(EventKind.CONTINUATION_STRIPPED) == []


def test_strip_and_retry_on_an_encrypted_reasoning_item_the_server_cannot_verify() -> None:
    with OpenAIResponsesEmulator() as emu:
        emu.script.extend([CALL, ModelAction.answer("Mild.", reasoning="ok"), ModelAction.answer("Yes.")])
        session = rs.Session(emu.client(max_retries=0), model="gpt-5.5", tools=[WEATHER])
        session = _closed_turn_then_tamper(emu, session, "encrypted_content", "strip_and_retry")
        assert session.send("Sure?").text == "Yes."
        retried = json.loads(emu.requests[-1].body)["input"]
        reasoning = [i for i in retried if i.get("type") == "reasoning"]
        assert len(reasoning) == 1  # the second step's item; the rejected one is left out
        calls = [i for i in retried if i.get("type") == "function_call"]
        assert "id" not in calls[0]  # its function call goes id-less: nothing refers to the absent item
        assert len(session.trace.of_kind(EventKind.CONTINUATION_STRIPPED)) == 1


def test_gemini_rejections_are_never_stripped_its_signatures_are_checked_inside_the_chain_only() -> None:
    # docs/protocols.md §5.4: only the current turn's signatures are validated, and the current turn is the
    # open tool chain, where they must go back; "Corrupted thought signature." names no part either
    from reasonstate.testing.gemini import GeminiEmulator

    with GeminiEmulator() as emu:
        emu.script.extend([CALL])
        session = rs.Session(
            emu.client(),
            model="gemini-3-flash",
            tools=[WEATHER],
            thinking_config={"include_thoughts": True},
            on_rejected_continuation="strip_and_retry",
        )
        reply = session.send("Paris weather?")
        snap = _tampered(session, 0, "thoughtSignature")
        restored = rs.Session.restore(snap, emu.client())
        sent = len(emu.requests)
        with pytest.raises(rs.VendorError) as info:
            restored.send_tool_results({c.id: "18C" for c in reply.tool_calls})
        assert info.value.status == 400 and len(emu.requests) == sent + 1  # raised, never retried
        assert restored.trace.of_kind(EventKind.CONTINUATION_STRIPPED) == []
