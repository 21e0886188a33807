"""Anthropic context editing as a session option (docs/protocols.md §4.7, issue 26 item 3), through the real
``anthropic`` SDK against the strict emulator. Oracles: the hand-written request fields below."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator

MODEL = "claude-sonnet-4-6"
THINKING = {"type": "enabled", "budget_tokens": 2048}
SYSTEM = "You are a careful assistant for a weather desk. Answer briefly and cite the tool. " * 60
BETA = "context-management-2025-06-27"
KEEP_ALL = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
KEEP_ONE = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]}
WEATHER = ToolCallSpec("get_weather", {"city": "Paris"})
RESULT = "Sunny, 21C, a light wind from the west, no rain expected before the evening. " * 3


TOOLS = [
    rs.Tool(
        name="get_weather",
        description="Current weather for a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
]


@pytest.fixture
def emu() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator() as emulator:
        yield emulator


def _chain(emu: AnthropicEmulator, edits: Any, *, stream: bool = False) -> rs.Session:
    """Two tool-chain turns with thinking, then a plain turn, under ``context_management=edits``."""
    emu.script.extend(
        [
            ModelAction.call(WEATHER, reasoning="Need the weather."),
            ModelAction(text="Sunny in Paris.", reasoning="Tool said sunny."),
            ModelAction.call(WEATHER, reasoning="Check again."),
            ModelAction(text="Still sunny.", reasoning="Same answer."),
            ModelAction(text="Yes.", reasoning="Nothing new."),
        ]
    )
    session = rs.Session(
        emu.client(),
        model=MODEL,
        system=SYSTEM,
        tools=TOOLS,
        thinking=THINKING,
        context_management=edits,
        stream=stream,
    )
    for question in ("Weather in Paris?", "And now?"):
        reply = session.send(question)
        session.send_tool_results({reply.tool_calls[0].id: "sunny"})
    session.send("Sure?")
    return session


def test_every_request_carries_the_edits_and_the_beta_header(emu: AnthropicEmulator) -> None:
    _chain(emu, KEEP_ALL)
    assert len(emu.requests) == 5
    for request in emu.requests:
        assert json.loads(request.body)["context_management"] == KEEP_ALL
        assert BETA in request.headers["anthropic-beta"].split(",")


def test_keep_all_clears_nothing_and_every_cache_prediction_is_exact(emu: AnthropicEmulator) -> None:
    """issue 26: ``keep: "all"`` keeps the most cache hits; nothing is cleared, nothing breaks."""
    session = _chain(emu, KEEP_ALL)
    predicted = [r.predicted_cache_read for r in session.execution]
    reported = [r.usage.cache_read for r in session.execution]
    assert reported[1:] == predicted[1:] and all(r >= 1024 for r in reported[1:])
    assert predicted[0] == reported[0] == 0
    assert not [e for e in session.trace.events if e.kind == EventKind.CONTEXT_CLEARED]


def test_a_server_clear_is_traced_with_the_vendors_applied_edits(emu: AnthropicEmulator) -> None:
    session = _chain(emu, KEEP_ONE)
    cleared = [e for e in session.trace.events if e.kind == EventKind.CONTEXT_CLEARED]
    assert cleared, "the vendor reported applied_edits: the session must trace them"
    assert cleared[0].data["applied_edits"][0]["type"] == "clear_thinking_20251015"
    assert cleared[0].data["applied_edits"][0]["cleared_thinking_turns"] >= 1
    # the client's history is not edited: the thinking still goes back verbatim (the server clears it)
    last = json.loads(emu.requests[-1].body)["messages"]
    assert (
        sum(b.get("type") == "thinking" for m in last if m["role"] == "assistant" for b in m["content"]) == 4
    )


def test_streamed_and_unstreamed_give_the_same_state() -> None:
    states = []
    for stream in (False, True):
        with AnthropicEmulator() as emu:
            session = _chain(emu, KEEP_ONE, stream=stream)
            steps = [(s.parts, s.usage, s.stop_reason) for t in session.history.turns for s in t.steps]
            cleared = [e.data for e in session.trace.events if e.kind == EventKind.CONTEXT_CLEARED]
            states.append((steps, [c["applied_edits"] for c in cleared]))
    assert states[0] == states[1]


def test_a_restored_session_sends_the_same_request_byte_identically(emu: AnthropicEmulator) -> None:
    session = _chain(emu, KEEP_ALL)
    expected = session.next_request("Again?").kwargs
    snap = rs.SessionSnapshot.model_validate_json(session.snapshot().model_dump_json())
    restored = rs.Session.restore(snap, emu.client())
    assert json.dumps(restored.next_request("Again?").kwargs) == json.dumps(expected)
    emu.script.extend([ModelAction(text="Yes.", reasoning="r")])
    restored.send("Again?")


@pytest.mark.parametrize(
    ("edits", "thinking"),
    [
        ({"edits": [{"type": "clear_thinking_20251015"}]}, {"type": "disabled"}),
        ({"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}]}, THINKING),
        ({"edits": [{"type": "clear_everything"}]}, THINKING),
    ],
)
def test_edits_the_vendor_refuses_are_refused_before_any_request(
    emu: AnthropicEmulator, edits: Any, thinking: Any
) -> None:
    with pytest.raises(rs.errors.InvalidOption, match=r"docs/protocols\.md §4\.7"):
        rs.Session(emu.client(), model=MODEL, thinking=thinking, context_management=edits)
    assert emu.requests == []


# -- the policies: rs.policies.ServerClear / ServerCompact (issue 26 items 2, 3) ----------------------------


def test_server_clear_sends_the_documented_edits(emu: AnthropicEmulator) -> None:
    emu.script.extend([ModelAction(text="a", reasoning="r")] * 2)
    rs.Session(emu.client(), model=MODEL, thinking=THINKING, fold=rs.policies.ServerClear()).send("hi")
    assert json.loads(emu.requests[-1].body)["context_management"] == KEEP_ALL
    policy = rs.policies.ServerClear(
        thinking_keep=2,
        clear_tool_uses={"trigger": {"type": "tool_uses", "value": 4}, "exclude_tools": ["x"]},
    )
    rs.Session(emu.client(), model=MODEL, thinking=THINKING, fold=policy).send("hi")
    assert json.loads(emu.requests[-1].body)["context_management"] == {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "tool_uses", "value": 4},
                "exclude_tools": ["x"],
            },
        ]
    }


def test_server_policies_run_only_on_their_api(emu: AnthropicEmulator) -> None:
    with pytest.raises(rs.errors.InvalidOption, match="responses API"):
        rs.Session(emu.client(), model=MODEL, fold=rs.policies.ServerCompact(threshold_tokens=1000))
    with pytest.raises(rs.errors.InvalidOption, match="not both"):
        rs.Session(
            emu.client(),
            model=MODEL,
            thinking=THINKING,
            fold=rs.policies.ServerClear(),
            context_management=KEEP_ALL,
        )
    with pytest.raises(rs.errors.InvalidOption):
        rs.policies.ServerClear(thinking_keep=0)


def test_server_compact_asks_the_responses_api_to_compact_and_keeps_the_item_bound() -> None:
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    with OpenAIResponsesEmulator() as emu:
        emu.script.extend([ModelAction(text="Done.", reasoning="Short.")])
        session = rs.Session(
            emu.client(), model="gpt-5.5", store=False, fold=rs.policies.ServerCompact(threshold_tokens=40)
        )
        session.send("Summarize the whole design discussion so far. " * 8)
        body = json.loads(emu.requests[0].body)
        assert body["context_management"] == [{"type": "compaction", "compact_threshold": 40}]
        assert next((c.kind, c.model_bound) for c in session.continuation) == ("compaction", True)
        assert [e for e in session.trace.events if e.kind == EventKind.CONTEXT_COMPACTED]


def test_a_switch_to_responses_and_back_sends_no_foreign_bytes(emu: AnthropicEmulator) -> None:
    """The edits are Anthropic options: a switch replaces them; no signature crosses to OpenAI."""
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    session = _chain(emu, KEEP_ONE)
    signatures = [
        b["signature"]
        for m in json.loads(emu.requests[-1].body)["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "thinking"
    ]
    with OpenAIResponsesEmulator() as other:
        other.script.extend([ModelAction(text="Sunny.", reasoning="r")])
        session.switch(other.client(), model="gpt-5.5", store=False)
        session.send("Weather?")
        body = other.requests[-1].body
        assert "context_management" not in json.loads(body)
        assert not [s for s in signatures if s.encode() in body]
        encrypted = [
            json.loads(c.payload)["encrypted_content"]
            for c in session.continuation
            if c.vendor == "openai" and c.kind == "reasoning"
        ]
        emu.script.extend([ModelAction(text="Back.", reasoning="r")])
        session.switch(emu.client(), model=MODEL, thinking=THINKING, context_management=KEEP_ONE)
        session.send("Back?")
    back = emu.requests[-1].body
    assert json.loads(back)["context_management"] == KEEP_ONE
    assert encrypted and not [e for e in encrypted if e.encode() in back]


# -- guard mode on a plain client (issue 26 item 5) ----------------------------------------------------------


def _plain(edits: Any) -> list[Any]:
    """Four plain-client turns with thinking through ``client.beta.messages.create(context_management=)``,
    every assistant answer marked for caching; the guard's records."""
    with AnthropicEmulator() as emu:
        client = emu.client()
        guard = rs.instrument(client)
        emu.script.extend([ModelAction(text=f"A{i}", reasoning=f"think {i}") for i in range(4)])
        messages: list[Any] = [{"role": "user", "content": "Q0"}]
        system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        for i in range(4):
            r = client.beta.messages.create(
                model=MODEL,
                max_tokens=4096,
                thinking=THINKING,  # type: ignore[arg-type]
                system=system,  # type: ignore[arg-type]
                messages=messages,
                context_management=edits,
                betas=[BETA],
            )
            answer = [b.model_dump(exclude_none=True) for b in r.content]
            answer[-1]["cache_control"] = {"type": "ephemeral"}
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"Q{i + 1}"}]
        return list(guard.records)


def test_the_guard_predicts_keep_all_exactly() -> None:
    records = _plain(KEEP_ALL)
    assert all(r.divergence is None and r.warnings == () for r in records)
    assert [r.predicted_cache_read for r in records] == [r.reported_cache_read for r in records]
    assert records[-1].reported_cache_read >= 1024


def test_the_guard_reads_a_server_clear_as_server_cleared_and_never_mispredicts() -> None:
    """Before: the guard predicted the unedited prompt and warned ``provider_miss`` on every clear; then it
    read the clear as ``reasoning_dropped`` and predicted 1,237 where the vendor read 1,251 at the second
    clear (an entry the plain client's marker on an earlier answer wrote, whose size no request tells)."""
    records = _plain(KEEP_ONE)
    assert [r.predicted_cache_read for r in records[:3]] == [r.reported_cache_read for r in records[:3]]
    third = records[2]
    assert third.divergence is not None and third.divergence.cause == "server_cleared"
    assert third.divergence.path == "$.messages[1].content[0]"  # the first thinking the vendor clears
    assert all(r.warnings == () for r in records)
    fourth = records[3]
    assert fourth.divergence is not None and fourth.divergence.cause == "server_cleared"
    assert fourth.divergence.path == "$.messages[3].content[0]"
    assert fourth.reported_cache_read == 1251 and fourth.predicted_cache_read is None


# -- the session models the clear (issue 26: prediction == reported through several clears) -----------------


def _clearing(
    emu: AnthropicEmulator, policy: rs.policies.ServerClear, turns: int = 4, client: Any = None
) -> rs.Session:
    """``turns`` user turns, each a weather call with thinking then an answer with thinking."""
    for i in range(turns):
        emu.script.extend(
            [
                ModelAction.call(WEATHER, reasoning=f"Need the weather {i}."),
                ModelAction(text=f"Sunny {i}.", reasoning=f"Tool said sunny {i}."),
            ]
        )
    session = rs.Session(
        client or emu.client(), model=MODEL, system=SYSTEM, tools=TOOLS, thinking=THINKING, fold=policy
    )
    for i in range(turns):
        reply = session.send(f"Weather {i}?")
        session.send_tool_results({reply.tool_calls[0].id: RESULT})
    return session


def test_a_session_predicts_every_request_through_several_thinking_clears(emu: AnthropicEmulator) -> None:
    """Before: the session predicted the unedited prompt (1,360 where the vendor read 1,288) and declared no
    break. Now its units are the edited prompt's: every prediction is exact, and each clear is a declared
    ``server_cleared`` break naming the blocks the vendor cleared (the whole earlier turn: a tool loop is
    one assistant turn, so the open loop is never cleared)."""
    session = _clearing(emu, rs.policies.ServerClear(thinking_keep=1))
    predicted = [r.predicted_cache_read for r in session.execution]
    reported = [r.usage.cache_read for r in session.execution]
    assert predicted == reported and all(r >= 1024 for r in reported[1:])
    breaks = [e.data for e in session.trace.events if e.kind == EventKind.CACHE_BREAK]
    assert [b["index"] for b in breaks] == [3, 5, 7]  # the second request of each later turn
    assert all(b["cause"] == "server_cleared" and b["declared"] for b in breaks)
    # turn 0's two assistant messages (the call, the answer): messages 1 and 3, thinking first
    assert breaks[0]["cleared"] == ["$.messages[1].content[0]", "$.messages[3].content[0]"]
    assert breaks[0]["path"] == "$.messages[1].content[0]"
    cleared = [
        e.data["applied_edits"][0] for e in session.trace.events if e.kind == EventKind.CONTEXT_CLEARED
    ]
    assert [c["cleared_thinking_turns"] for c in cleared] == [1, 1, 2, 2, 3]
    # the client's history is never edited: every thinking block still goes back verbatim
    last = json.loads(emu.requests[-1].body)["messages"]
    assert sum(b["type"] == "thinking" for m in last if m["role"] == "assistant" for b in m["content"]) == 7


@pytest.mark.parametrize(
    "policy",
    [
        rs.policies.ServerClear(thinking_keep=1),
        rs.policies.ServerClear(
            clear_tool_uses={
                "trigger": {"type": "tool_uses", "value": 2},
                "keep": {"type": "tool_uses", "value": 1},
            }
        ),
    ],
    ids=["clear_thinking", "clear_tool_uses"],
)
def test_the_guard_on_the_sessions_client_predicts_what_the_session_predicts(
    emu: AnthropicEmulator, policy: rs.policies.ServerClear
) -> None:
    """One rule (issue 21 item 5): the guard reading the session's own bytes sees the same edited prompt,
    predicts the same figures and explains each clear as ``server_cleared``."""
    client = emu.client()
    guard = rs.instrument(client)
    session = _clearing(emu, policy, turns=3, client=client)
    records = list(guard.records)
    assert [r.predicted_cache_read for r in records] == [r.predicted_cache_read for r in session.execution]
    assert [r.reported_cache_read for r in records] == [r.usage.cache_read for r in session.execution]
    assert [r.index for r in records if r.divergence is not None] == [3, 5]
    assert {r.divergence.cause for r in records if r.divergence is not None} == {"server_cleared"}
    assert all(r.warnings == () for r in records)


def test_clear_tool_uses_is_predicted_and_declared(emu: AnthropicEmulator) -> None:
    """``clear_tool_uses_20250919`` with a ``tool_uses`` trigger: once two tool uses are in the prompt the
    vendor replaces every result but the last one's (and, with ``clear_tool_inputs``, its input); the
    session predicts the edited prompt exactly and declares each clear."""
    policy = rs.policies.ServerClear(
        clear_tool_uses={
            "trigger": {"type": "tool_uses", "value": 2},
            "keep": {"type": "tool_uses", "value": 1},
            "clear_tool_inputs": True,
        }
    )
    session = _clearing(emu, policy, turns=3)
    predicted = [r.predicted_cache_read for r in session.execution]
    assert predicted == [r.usage.cache_read for r in session.execution]
    breaks = [e.data for e in session.trace.events if e.kind == EventKind.CACHE_BREAK]
    # the second call (request 2) answered: request 3 holds two tool uses, the first one's input and
    # result cleared; request 5 clears the second one's
    assert [(b["index"], b["cause"], b["declared"]) for b in breaks] == [
        (3, "server_cleared", True),
        (5, "server_cleared", True),
    ]
    assert breaks[0]["cleared"] == ["$.messages[1].content[1]", "$.messages[2].content[0]"]
    applied = [e.data["applied_edits"] for e in session.trace.events if e.kind == EventKind.CONTEXT_CLEARED]
    assert [a[0]["cleared_tool_uses"] for a in applied] == [1, 1, 2]
    # the client's history is not edited: the results still go back as given
    sent = json.loads(emu.requests[-1].body)["messages"]
    assert [
        b["content"] for m in sent if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"
    ] == [RESULT] * 3


def test_a_clear_the_vendors_token_count_triggers_is_not_predicted(emu: AnthropicEmulator) -> None:
    """An ``input_tokens`` trigger (the edit's default) depends on the vendor's own count: None, not a
    guess."""
    policy = rs.policies.ServerClear(clear_tool_uses={"trigger": {"type": "input_tokens", "value": 1300}})
    session = _clearing(emu, policy, turns=2)
    assert [r.predicted_cache_read for r in session.execution] == [None] * 4


def test_an_edit_field_the_sdk_does_not_declare_is_refused_before_any_request(emu: AnthropicEmulator) -> None:
    policy = rs.policies.ServerClear(
        clear_tool_uses={"trigger": {"type": "tool_uses", "value": 2}, "keep_all": 1}
    )
    with pytest.raises(rs.errors.InvalidOption, match=r"unknown field\(s\) keep_all.*§4\.7"):
        rs.Session(emu.client(), model=MODEL, thinking=THINKING, fold=policy)
    assert emu.requests == []


def test_the_demo_row_shows_declared_clears_and_exact_predictions() -> None:
    from reasonstate.demo.compaction import context_editing_table

    table = context_editing_table()
    assert [r[5] for r in table.rows] == [
        "-",
        "-",
        "-",
        "server_cleared (declared)",
        "-",
        "server_cleared (declared)",
    ]
    assert all(r[3] == r[4] for r in table.rows)  # predicted == the vendor's read, every request
    assert [r[1] for r in table.rows][3] == "3 sent, 1 turn(s) cleared"


def test_reasonstate_diff_names_the_clear_and_what_it_cleared(emu: AnthropicEmulator, tmp_path: Path) -> None:
    """``reasonstate diff`` on the session's own request bodies: the clear's cause and the blocks cleared."""
    from reasonstate.cli import main

    _clearing(emu, rs.policies.ServerClear(thinking_keep=1), turns=2)
    first, second = tmp_path / "2.json", tmp_path / "3.json"
    first.write_bytes(emu.requests[2].body)
    second.write_bytes(emu.requests[3].body)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["diff", str(first), str(second)]) == 0
    text = buffer.getvalue()
    assert "cause: server_cleared" in text and "path $.messages[1].content[0]" in text
    assert text.rstrip().endswith("$.messages[1].content[0], $.messages[3].content[0]")
