"""The values a memoized run of closed turns keeps for the session's life (issue 21: state in memory) are
key-sharing dicts (PEP 412, :func:`reasonstate.adapters.base.shared_dict`): plain ``dict`` values equal,
key order included, to the wire values written out by hand here (so the bytes sent cannot change), and
smaller than the same dict written as a display (so the memory win cannot silently regress).

The sessions run on the strict emulators through the real SDKs; the runs are built by the codecs' own
run builders from the session's closed history with a fresh memo (the oracle is the hand-written values,
with only the vendor's opaque values, signatures and call ids, read back from what the session received).
"""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.adapters import anthropic, openai_responses
from reasonstate.adapters.base import Encodings, key_shared, shared_dict
from reasonstate.state.continuation import FIRST_PARTY
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import THINKING, WEATHER

CPYTHON = platform.python_implementation() == "CPython"
ACTIONS = [
    ModelAction.call(
        ToolCallSpec("get_weather", {"city": "Paris"}, raw_arguments='{"city": "Paris"}'),
        reasoning="Check Paris.",
    ),
    ModelAction.answer("Mild.", reasoning="It is mild."),
    ModelAction.answer("Bye.", reasoning="Done."),
]


def _talk(session: rs.Session) -> None:
    """A tool chain (one call, its result, an answer) and one more turn: two closed turns."""
    reply = session.send("Weather in Paris?")
    session.send_tool_results({c.id: {"city": "Paris"} for c in reply.tool_calls})
    session.send("Thanks?")


def _all_dicts(value: Any) -> list[dict[str, Any]]:
    """Every dict in ``value`` at any depth (itself first)."""
    if isinstance(value, dict):
        return [value, *(d for v in value.values() for d in _all_dicts(v))]
    if isinstance(value, (list, tuple)):
        return [d for v in value for d in _all_dicts(v)]
    return []


def _check_kept(kept: tuple[Any, ...], expected: list[dict[str, Any]], shared: list[dict[str, Any]]) -> None:
    """``kept`` equals ``expected``: the same plain dicts (``type is dict``), keys in the same order, the
    same compact JSON; each of ``shared`` (the run's messages and blocks) is smaller than its display."""
    assert list(kept) == expected
    for got, want in zip(_all_dicts(list(kept)), _all_dicts(expected), strict=True):
        assert type(got) is dict
        assert list(got) == list(want)
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    assert json.dumps(list(kept), **compact) == json.dumps(expected, **compact)  # type: ignore[arg-type]
    if CPYTHON:  # PEP 412 split tables: a CPython layout (and the issue 21 figures are CPython's)
        for value in shared:
            display = {k: v for k, v in value.items()}  # a combined table, as a dict display builds
            assert sys.getsizeof(value) < sys.getsizeof(display), value


def test_the_anthropic_run_keeps_key_sharing_dicts_equal_to_the_wire_values() -> None:
    with AnthropicEmulator(ACTIONS) as emu:
        model = "claude-sonnet-4-5"
        session = rs.Session(emu.client(), model=model, tools=[WEATHER], thinking=THINKING, max_tokens=4096)
        _talk(session)
    signatures = [json.loads(c.payload)["signature"] for c in session.continuation if c.kind == "thinking"]
    call_id = session.history.turns[0].steps[0].tool_calls[0].id
    run = anthropic._closed_run(session.history.turns, model, 0, Encodings(), FIRST_PARTY)

    def thinking(text: str, i: int) -> dict[str, Any]:
        return {"type": "thinking", "thinking": text, "signature": signatures[i]}

    expected: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                thinking("Check Paris.", 0),
                {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": '{"city":"Paris"}'}],
        },
        {"role": "assistant", "content": [thinking("It is mild.", 1), {"type": "text", "text": "Mild."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks?"}]},
        {"role": "assistant", "content": [thinking("Done.", 2), {"type": "text", "text": "Bye."}]},
    ]
    # every message and every content block (the tool call's parsed input is the SDK's, not the run's)
    shared = [*run.messages, *(b for m in run.messages for b in m["content"])]
    assert len(shared) == 6 + 9
    _check_kept(run.messages, expected, shared)


def test_the_deepseek_run_keeps_key_sharing_dicts_equal_to_the_wire_values() -> None:
    with OpenAIChatEmulator(ACTIONS, dialect="deepseek") as emu:
        model = "deepseek-v4-pro"
        session = rs.Session(emu.client(), model=model, dialect="deepseek", tools=[WEATHER])
        _talk(session)
    call_id = session.history.turns[0].steps[0].tool_calls[0].id
    run = session._adapter._closed_run(session.history.turns, model, Encodings())  # type: ignore[attr-defined]
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    expected: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Check Paris.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": '{"city":"Paris"}'},
        {"role": "assistant", "content": "Mild.", "reasoning_content": "It is mild."},
        {"role": "user", "content": "Thanks?"},
        {"role": "assistant", "content": "Bye.", "reasoning_content": "Done."},
    ]
    calls = [c for m in run.values for c in m.get("tool_calls", ())]
    assert len(calls) == 1
    # every message, every tool call and its function
    _check_kept(run.values, expected, [*run.values, *calls, *(c["function"] for c in calls)])


def test_a_shared_dict_is_a_plain_dict_of_its_fields_in_order() -> None:
    value = shared_dict(("b", "a"), (1, [2]))
    assert type(value) is dict and value == {"b": 1, "a": [2]} and list(value) == ["b", "a"]
    value["c"] = 3  # still a dict in every respect: a new key un-shares its table, nothing else
    assert json.dumps(value) == '{"b": 1, "a": [2], "c": 3}'
    outside = {"type": "text", "unknown": 1}
    assert key_shared(outside, frozenset({"type", "text"})) is outside  # a field outside the set: as it is
    inside = {"text": "x", "type": "text"}
    copied = key_shared(inside, frozenset({"type", "text"}))
    assert copied == inside and copied is not inside and list(copied) == ["text", "type"]


@pytest.mark.skipif(not CPYTHON, reason="PEP 412 split tables are CPython's layout")
def test_a_shared_dict_is_smaller_than_a_display_from_the_first_one() -> None:
    """The holder class is warmed: even the first dicts of a new field tuple are small."""
    first = shared_dict(("only_here_x", "only_here_y"), ("x", "y"))
    assert sys.getsizeof(first) < sys.getsizeof({"only_here_x": "x", "only_here_y": "y"})


def test_the_responses_run_keeps_key_sharing_items_equal_to_the_items_as_built_per_request() -> None:
    """Input items and the parts of their ``content`` / ``summary`` lists; the oracle is the same turns
    encoded as the open turn is (dict displays, parsed from the payload bytes), each user message and
    function_call_output also written out here."""
    with OpenAIResponsesEmulator(ACTIONS) as emu:
        model = "gpt-5.5"
        session = rs.Session(emu.client(), model=model, tools=[WEATHER])
        _talk(session)
    turns = session.history.turns
    run = openai_responses._closed_run(turns, model, False, Encodings(), FIRST_PARTY)
    built = [
        i.value
        for t in turns
        for i in openai_responses._encode_turn(t, model=model, by_reference=False).items
    ]
    call_id = turns[0].steps[0].tool_calls[0].id
    assert built[0] == {"role": "user", "content": "Weather in Paris?"}
    assert built[3] == {"type": "function_call_output", "call_id": call_id, "output": '{"city":"Paris"}'}
    assert built[6] == {"role": "user", "content": "Thanks?"}
    kinds = ["reasoning", "function_call", "function_call_output", "reasoning", "message", "reasoning"]
    assert [v["type"] for v in built if "type" in v] == [*kinds, "message"]
    parts = [
        p for v in run.values for key in ("content", "summary") if type(v.get(key)) is list for p in v[key]
    ]
    assert len(parts) == 5  # three summaries, two output_text parts
    _check_kept(run.values, built, [*run.values, *parts])
