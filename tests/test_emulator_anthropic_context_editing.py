"""Anthropic context editing in the strict emulator (docs/protocols.md §4.7), through the real SDK.

Oracles are hand-written: the documented per-block token rule (``tokens`` below, module docstring of the
emulator) and the ``applied_edits`` shape of the SDK's ``BetaContextManagementResponse``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from reasonstate.testing import ModelAction, ToolCallSpec, count_tokens
from reasonstate.testing.anthropic import AnthropicEmulator

MODEL = "claude-sonnet-4-6"
BETA = "context-management-2025-06-27"
THINKING = {"type": "enabled", "budget_tokens": 2048}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "get_time",
        "description": "Local time in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
]
CLEAR_THINKING_KEEP_1 = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}


def tokens(block: Any) -> int:
    if isinstance(block, str):
        block = {"type": "text", "text": block}
    stripped = {k: v for k, v in block.items() if k != "cache_control"}
    return count_tokens(json.dumps(stripped, separators=(",", ":"), ensure_ascii=False))


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    total = sum(tokens(t) for t in TOOLS)
    for msg in messages:
        content = msg["content"]
        total += tokens(content) if isinstance(content, str) else sum(tokens(b) for b in content)
    return total


@pytest.fixture
def emu() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator(cache_min_tokens=64) as emulator:
        yield emulator


@pytest.fixture
def client(emu: AnthropicEmulator) -> Iterator[anthropic.Anthropic]:
    c = emu.client()
    yield c
    c.close()


def plain(client: anthropic.Anthropic, messages: list[dict[str, Any]]) -> Any:
    """One request with thinking and the tools, no edits."""
    return client.messages.create(
        model=MODEL,
        max_tokens=4096,
        tools=TOOLS,
        thinking=THINKING,
        messages=messages,  # type: ignore[arg-type]
    )


def chain(client: anthropic.Anthropic, emu: AnthropicEmulator, calls: list[str]) -> list[dict[str, Any]]:
    """One assistant turn with thinking per tool call (``calls`` names the tools), each answered."""
    emu.script.extend(
        [
            ModelAction.call(ToolCallSpec(name, {"city": "Paris"}), reasoning=f"Use {name} #{i}.")
            for i, name in enumerate(calls)
        ]
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather and time in Paris?"}]
    for i in range(len(calls)):
        resp = plain(client, messages)
        use = next(b for b in resp.content if b.type == "tool_use")
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in resp.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": f"r{i}" * 40}],
            },
        ]
    return messages


def edited(client: anthropic.Anthropic, messages: list[dict[str, Any]], edits: list[Any], **kw: Any) -> Any:
    return client.beta.messages.create(
        model=MODEL,
        max_tokens=4096,
        tools=TOOLS,  # type: ignore[arg-type]
        thinking=THINKING,  # type: ignore[arg-type]
        messages=messages,  # type: ignore[arg-type]
        context_management={"edits": edits},
        betas=[BETA],
        **kw,
    )


def test_clear_thinking_keeps_the_last_turn_and_reports_the_cleared_tokens(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    """A turn runs from one human message to the next: a tool loop is one assistant turn ("an assistant
    conversation turn may include multiple content blocks (e.g. when using tools)", the context-editing
    page), so ``keep: 1`` never clears inside the open loop and clears every block of an earlier turn."""
    messages = chain(client, emu, ["get_weather", "get_time", "get_weather"])
    emu.script.extend([ModelAction.answer("x", reasoning="r")])
    assert edited(client, messages, [CLEAR_THINKING_KEEP_1]).context_management.applied_edits == []
    emu.script.extend(
        [
            ModelAction.answer("18C, noon.", reasoning="Done."),
            ModelAction.call(ToolCallSpec("get_weather", {"city": "Rome"}), reasoning="Now Rome."),
            ModelAction.answer("Rome: 20C.", reasoning="Answer."),
        ]
    )
    for question in (None, "And Rome?"):
        if question is not None:
            messages.append({"role": "user", "content": question})
        resp = plain(client, messages)
        messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in resp.content]}
        )
    use = next(b for b in messages[-1]["content"] if b["type"] == "tool_use")
    messages.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "20C"}]}
    )
    resp = edited(client, messages, [CLEAR_THINKING_KEEP_1])
    thinking = [
        b for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "thinking"
    ]
    assert len(thinking) == 5  # turn 1: three calls and the answer; turn 2: one call (the open loop)
    cleared = sum(tokens(t) for t in thinking[:4])
    assert resp.context_management.to_dict() == {
        "applied_edits": [
            {"type": "clear_thinking_20251015", "cleared_thinking_turns": 1, "cleared_input_tokens": cleared}
        ]
    }
    assert resp.usage.input_tokens == prompt_tokens(messages) - cleared


def test_keep_all_clears_nothing_and_keeps_the_cache_hit(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    messages = chain(client, emu, ["get_weather", "get_time"])
    # a text beside the first tool result is a human message: the second call opens a turn of its own
    messages[2]["content"].append({"type": "text", "text": "And the time?"})
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")])
    first = edited(client, messages, [{"type": "clear_thinking_20251015", "keep": "all"}])
    assert first.context_management.applied_edits == []
    again = edited(client, messages, [{"type": "clear_thinking_20251015", "keep": "all"}])
    assert again.usage.cache_read_input_tokens == prompt_tokens(messages)
    # clearing rewrites the prefix at the first cleared turn: the cached entry (unedited) no longer matches
    cut = edited(client, messages, [CLEAR_THINKING_KEEP_1])
    assert cut.context_management.applied_edits[0].cleared_thinking_turns == 1
    assert cut.usage.cache_read_input_tokens == 0


def test_streamed_context_management_arrives_in_the_final_message_delta(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    messages = chain(client, emu, ["get_weather", "get_time"])
    emu.script.extend([ModelAction.answer("x", reasoning="r"), ModelAction.answer("x", reasoning="r")])
    plain = edited(client, messages, [CLEAR_THINKING_KEEP_1])
    with client.beta.messages.stream(
        model=MODEL,
        max_tokens=4096,
        tools=TOOLS,  # type: ignore[arg-type]
        thinking=THINKING,  # type: ignore[arg-type]
        messages=messages,  # type: ignore[arg-type]
        context_management={"edits": [CLEAR_THINKING_KEEP_1]},
        betas=[BETA],
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = next(e for e in events if e.type == "message_start")
    assert start.message.context_management is None
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.context_management is not None
    assert delta.context_management.to_dict() == plain.context_management.to_dict()
    assert final.context_management is not None
    assert final.context_management.to_dict() == plain.context_management.to_dict()


def test_clear_tool_uses_replaces_old_results_and_spares_excluded_tools(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    messages = chain(client, emu, ["get_weather", "get_time", "get_weather", "get_time"])
    emu.script.extend([ModelAction.answer("done")] * 3)
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 3},
        "keep": {"type": "tool_uses", "value": 1},
        "exclude_tools": ["get_time"],
    }
    resp = edited(client, messages, [edit])
    placeholder = {"type": "tool_result", "tool_use_id": "", "content": "[cleared to save context]"}
    results = [
        b for m in messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]
    ]
    saved = sum(
        tokens(r) - tokens({**placeholder, "tool_use_id": r["tool_use_id"]}) for r in (results[0], results[2])
    )
    assert resp.context_management.to_dict() == {
        "applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": saved}
        ]
    }
    # below the trigger: nothing; clear_at_least above what can be cleared: nothing
    assert (
        edited(
            client, messages, [{**edit, "trigger": {"type": "tool_uses", "value": 5}}]
        ).context_management.applied_edits
        == []
    )
    least = {**edit, "clear_at_least": {"type": "input_tokens", "value": saved + 1}}
    assert edited(client, messages, [least]).context_management.applied_edits == []


@pytest.mark.parametrize(
    ("edits", "thinking", "betas", "message"),
    [
        (
            [{"type": "clear_everything"}],
            THINKING,
            [BETA],
            "context_management.edits.0: Input tag 'clear_everything' found using 'type' does not match "
            "any of the expected tags: 'clear_tool_uses_20250919', 'clear_thinking_20251015'",
        ),
        (
            [{"type": "clear_tool_uses_20250919"}, CLEAR_THINKING_KEEP_1],
            THINKING,
            [BETA],
            "context_management.edits.1: `clear_thinking_20251015` must be the first edit in "
            "`context_management.edits`",
        ),
        (
            [CLEAR_THINKING_KEEP_1],
            {"type": "disabled"},
            [BETA],
            "context_management.edits.0: `clear_thinking_20251015` requires `thinking` to be enabled "
            "or adaptive",
        ),
        ([CLEAR_THINKING_KEEP_1], THINKING, [], "context_management: Extra inputs are not permitted"),
        # the SDK's BetaClearToolUses20250919EditParam declares six fields; pydantic refuses any other
        (
            [{"type": "clear_tool_uses_20250919", "keep_all": True}],
            THINKING,
            [BETA],
            "context_management.edits.0.keep_all: Extra inputs are not permitted",
        ),
        (
            [{**CLEAR_THINKING_KEEP_1, "trigger": {"type": "tool_uses", "value": 1}}],
            THINKING,
            [BETA],
            "context_management.edits.0.trigger: Extra inputs are not permitted",
        ),
        (
            [{"type": "clear_tool_uses_20250919", "clear_tool_inputs": "yes"}],
            THINKING,
            [BETA],
            "context_management.edits.0.clear_tool_inputs: Input should be a valid boolean or a valid list",
        ),
    ],
)
def test_invalid_context_management_is_the_vendors_400(
    emu: AnthropicEmulator, client: anthropic.Anthropic, edits: Any, thinking: Any, betas: Any, message: str
) -> None:
    emu.script.extend([ModelAction.answer("unused")])
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.messages.create(
            model=MODEL,
            max_tokens=4096,
            thinking=thinking,
            messages=[{"role": "user", "content": "hi"}],
            context_management={"edits": edits},
            betas=betas,
        )
    assert info.value.body["error"] == {"type": "invalid_request_error", "message": message}  # type: ignore[index]
    assert len(emu.script) == 1  # nothing consumed
