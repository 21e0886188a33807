"""The strict Anthropic Messages emulator, driven by the real ``anthropic`` SDK over real HTTP."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock

from reasonstate.testing import Fault, ModelAction, ToolCallSpec, count_tokens
from reasonstate.testing.anthropic import AnthropicEmulator

MODEL = "claude-sonnet-4-6"
THINKING = {"type": "enabled", "budget_tokens": 2048}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
LONG_SYSTEM = "You are a meticulous weather assistant. " * 120  # 4800 chars = 1200 tokens
DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


def call_weather(city: str = "Paris", reasoning: str | None = "I should call get_weather.") -> ModelAction:
    return ModelAction.call(
        ToolCallSpec("get_weather", {"city": city}), reasoning=reasoning, text="Checking."
    )


@pytest.fixture
def emu() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator() as emulator:
        yield emulator


@pytest.fixture
def client(emu: AnthropicEmulator) -> Iterator[anthropic.Anthropic]:
    c = emu.client()
    yield c
    c.close()


def tokens(block: Any) -> int:
    """The documented per-block token rule: count_tokens of the compact JSON without cache_control."""
    if isinstance(block, str):
        block = {"type": "text", "text": block}
    stripped = {k: v for k, v in block.items() if k != "cache_control"}
    return count_tokens(json.dumps(stripped, separators=(",", ":"), ensure_ascii=False))


def prompt_tokens(body: dict[str, Any]) -> list[int]:
    """Per-block tokens of a recorded request, in prompt order (tools → system → messages)."""
    out = [tokens(t) for t in body.get("tools", [])]
    system = body.get("system")
    out += [tokens(system)] if isinstance(system, str) else [tokens(b) for b in system or []]
    for msg in body["messages"]:
        content = msg["content"]
        out += [tokens(content)] if isinstance(content, str) else [tokens(b) for b in content]
    return out


def first_turn(client: anthropic.Anthropic, emu: AnthropicEmulator, **kw: Any) -> tuple[Any, list[Any]]:
    """Ask for the weather; return the response and the messages for the follow-up with its tool result."""
    emu.script.extend([call_weather()])
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    kw.setdefault("thinking", THINKING)
    resp = client.messages.create(model=MODEL, max_tokens=4096, tools=TOOLS, messages=messages, **kw)
    tool_id = next(b.id for b in resp.content if b.type == "tool_use")
    messages = [
        *messages,
        resp.to_param(),
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "18C"}]},
    ]
    return resp, messages


def bad_request(client: anthropic.Anthropic, messages: list[Any], **kw: Any) -> anthropic.BadRequestError:
    kw.setdefault("thinking", THINKING)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=4096, tools=TOOLS, messages=messages, **kw)
    return info.value


def message_of(err: anthropic.APIStatusError) -> str:
    assert isinstance(err.body, dict)
    return str(err.body["error"]["message"])


def as_dicts(resp_param: Any) -> dict[str, Any]:
    """A deep, plain-dict copy of ``Message.to_param()`` (its content holds SDK models)."""
    content = [
        b.model_dump(exclude_none=True) if hasattr(b, "model_dump") else b for b in resp_param["content"]
    ]
    return {"role": resp_param["role"], "content": copy.deepcopy(content)}


# -- round trip ------------------------------------------------------------------------------------------
def test_round_trip_parses_thinking_redacted_text_and_tool_use(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    emu.script.extend(
        [
            ModelAction(
                reasoning="I should call get_weather.",
                redacted=True,
                text="Let me check.",
                tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),),
            )
        ]
    )
    resp = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking=THINKING,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Hi"}],
    )
    assert [type(b) for b in resp.content] == [ThinkingBlock, RedactedThinkingBlock, TextBlock, ToolUseBlock]
    thinking, redacted, text, tool = resp.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "I should call get_weather."
    assert thinking.signature and emu.verify_thinking(MODEL, thinking.thinking, thinking.signature)
    assert isinstance(redacted, RedactedThinkingBlock) and emu.verify_redacted(MODEL, redacted.data)
    assert isinstance(text, TextBlock) and text.text == "Let me check."
    assert isinstance(tool, ToolUseBlock)
    assert (tool.id, tool.name, tool.input) == ("toolu_emu_001", "get_weather", {"city": "Paris"})
    assert (resp.id, resp.type, resp.role, resp.model) == ("msg_emu_001", "message", "assistant", MODEL)
    assert resp.stop_reason == "tool_use"
    assert resp.usage.output_tokens == count_tokens("I should call get_weather.") + count_tokens(
        "Let me check."
    ) + count_tokens('{"city":"Paris"}')
    assert resp.usage.service_tier == "standard"
    assert emu.script.taken == 1


def test_replay_via_to_param_is_accepted(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    _, messages = first_turn(client, emu)
    emu.script.extend([ModelAction.answer("It is 18C.", reasoning="Report it.")])
    resp = client.messages.create(
        model=MODEL, max_tokens=4096, thinking=THINKING, tools=TOOLS, messages=messages
    )
    assert resp.stop_reason == "end_turn"
    assert [b.type for b in resp.content] == ["thinking", "text"]
    sent = emu.requests[-1].json()["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["thinking", "text", "tool_use"]


def test_thinking_disabled_generates_no_thinking_block(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    emu.script.extend([ModelAction.answer("Hello.", reasoning="hidden")])
    resp = client.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "Hi"}])
    assert [b.type for b in resp.content] == ["text"]
    assert resp.usage.output_tokens == count_tokens("Hello.")


def test_display_omitted_returns_empty_thinking_with_verifiable_signature(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    resp, messages = first_turn(client, emu, thinking={"type": "adaptive", "display": "omitted"})
    block = resp.content[0]
    assert isinstance(block, ThinkingBlock) and block.thinking == "" and block.signature
    assert resp.usage.output_tokens_details is not None
    assert resp.usage.output_tokens_details.thinking_tokens == count_tokens("I should call get_weather.")
    emu.script.extend([ModelAction.answer("18C.")])
    ok = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "adaptive", "display": "omitted"},
        tools=TOOLS,
        messages=messages,
    )
    assert ok.content[-1].type == "text"


def test_max_tokens_action_sets_stop_reason(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    emu.script.extend([ModelAction(text="Cut", stop="max_tokens")])
    resp = client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "Hi"}])
    assert resp.stop_reason == "max_tokens"


def test_transform_hook_can_add_unknown_block_type() -> None:
    def add_block(message: dict[str, Any]) -> dict[str, Any]:
        message["content"].append({"type": "future_block", "payload": 1})
        return message

    with AnthropicEmulator([ModelAction.answer("hi")], transform=add_block) as emu, emu.client() as c:
        raw = c.messages.with_raw_response.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
        )
        assert [b["type"] for b in raw.json()["content"]] == ["text", "future_block"]


def test_async_client_round_trip(emu: AnthropicEmulator) -> None:
    emu.script.extend([call_weather()])

    async def run() -> Any:
        async with emu.async_client() as c:
            return await c.messages.create(
                model=MODEL,
                max_tokens=4096,
                thinking=THINKING,
                tools=TOOLS,
                messages=[{"role": "user", "content": "Hi"}],
            )

    resp = asyncio.run(run())
    assert [b.type for b in resp.content] == ["thinking", "text", "tool_use"]


# -- continuation rules ----------------------------------------------------------------------------------
def test_missing_thinking_before_tool_use_is_rejected_with_vendor_text_and_envelope(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    _, messages = first_turn(client, emu)
    messages[1] = {
        "role": "assistant",
        "content": [b for b in as_dicts(messages[1])["content"] if b["type"] != "thinking"],
    }
    err = bad_request(client, messages)
    assert err.status_code == 400
    expected = (
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. "
        "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
        "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
        "thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please "
        f"consult our documentation at {DOCS}"
    )
    assert err.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": expected},
        "request_id": err.request_id,
    }
    assert err.request_id is not None and err.request_id.startswith("req_emu_")
    assert emu.script.taken == 1  # the rejected request consumed nothing


def test_missing_thinking_reports_found_tool_use(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    """Pain point: openai/openai-agents-python#1704 (a LiteLLM path dropped the thinking block inside the
    chain: "Expected `thinking`... found `tool_use`")."""
    _, messages = first_turn(client, emu)
    messages[1] = {
        "role": "assistant",
        "content": [b for b in as_dicts(messages[1])["content"] if b["type"] == "tool_use"],
    }
    assert message_of(bad_request(client, messages)).startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`."
    )


def test_thinking_in_final_assistant_message_with_thinking_disabled_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    emu.script.extend([ModelAction.answer("Sure.", reasoning="Think first.")])
    first = client.messages.create(
        model=MODEL, max_tokens=4096, thinking=THINKING, messages=[{"role": "user", "content": "Hi"}]
    )
    messages = [{"role": "user", "content": "Hi"}, first.to_param()]
    err = bad_request(client, messages, thinking={"type": "disabled"})
    assert message_of(err) == (
        "messages.1.content.0: When thinking is disabled, an `assistant` message in the final position "
        "cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."
    )


def test_edited_thinking_text_invalidates_signature(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    _, messages = first_turn(client, emu)
    messages[1] = as_dicts(messages[1])
    messages[1]["content"][0]["thinking"] += " "
    assert (
        message_of(bad_request(client, messages))
        == "messages.1.content.0: Invalid `signature` in `thinking` block"
    )


def test_edited_signature_is_rejected(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    _, messages = first_turn(client, emu)
    messages[1] = as_dicts(messages[1])
    sig = messages[1]["content"][0]["signature"]
    messages[1]["content"][0]["signature"] = ("A" if sig[5] != "A" else "B").join([sig[:5], sig[6:]])
    assert (
        message_of(bad_request(client, messages))
        == "messages.1.content.0: Invalid `signature` in `thinking` block"
    )


def test_empty_signature_is_rejected(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    _, messages = first_turn(client, emu)
    messages[1] = as_dicts(messages[1])
    messages[1]["content"][0]["signature"] = ""
    assert (
        message_of(bad_request(client, messages))
        == "messages.1.content.0: Invalid `signature` in `thinking` block"
    )


def test_signature_is_bound_to_model(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    _, messages = first_turn(client, emu)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="claude-opus-4-1", max_tokens=4096, thinking=THINKING, tools=TOOLS, messages=messages
        )
    assert message_of(info.value) == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_signature_from_another_emulator_secret_is_rejected(
    client: anthropic.Anthropic, emu: AnthropicEmulator
) -> None:
    other = AnthropicEmulator(secret=b"another secret")
    forged = {"type": "thinking", "thinking": "t", "signature": other.sign_thinking(MODEL, "t")}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [forged, {"type": "text", "text": "Hello"}]},
        {"role": "user", "content": "Again"},
    ]
    assert (
        message_of(bad_request(client, messages))
        == "messages.1.content.0: Invalid `signature` in `thinking` block"
    )


def test_tampered_redacted_data_is_rejected(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    emu.script.extend(
        [ModelAction(reasoning="r", redacted=True, tool_calls=(ToolCallSpec("get_weather", {}),))]
    )
    resp = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking=THINKING,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Hi"}],
    )
    assistant = as_dicts(resp.to_param())
    assistant["content"][1]["data"] = "RW1vcGFxdWU="
    messages = [
        {"role": "user", "content": "Hi"},
        assistant,
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": resp.content[2].id, "content": "x"}],
        },  # type: ignore[union-attr]
    ]
    assert message_of(bad_request(client, messages)) == (
        "messages.1.content.1: Invalid `data` in `redacted_thinking` block"
    )


def test_dropped_thinking_block_in_latest_assistant_message_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    emu.script.extend(
        [ModelAction(reasoning="r", redacted=True, tool_calls=(ToolCallSpec("get_weather", {}),))]
    )
    resp = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking=THINKING,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Hi"}],
    )
    assistant = as_dicts(resp.to_param())
    del assistant["content"][1]  # drop the redacted block
    tool_id = resp.content[2].id  # type: ignore[union-attr]
    messages = [
        {"role": "user", "content": "Hi"},
        assistant,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "x"}]},
    ]
    assert message_of(bad_request(client, messages)) == (
        "messages.1.content.1: `thinking` or `redacted_thinking` blocks in the latest assistant message "
        "cannot be modified. These blocks must remain as they were in the original response."
    )


def test_reordered_thinking_blocks_in_latest_assistant_message_are_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    emu.script.extend(
        [ModelAction(reasoning="r", redacted=True, tool_calls=(ToolCallSpec("get_weather", {}),))]
    )
    resp = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking=THINKING,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Hi"}],
    )
    assistant = as_dicts(resp.to_param())
    assistant["content"][0], assistant["content"][1] = assistant["content"][1], assistant["content"][0]
    tool_id = resp.content[2].id  # type: ignore[union-attr]
    messages = [
        {"role": "user", "content": "Hi"},
        assistant,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "x"}]},
    ]
    assert message_of(bad_request(client, messages)).startswith(
        "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest assistant message "
        "cannot be modified."
    )


def test_tool_use_without_tool_result_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    resp, messages = first_turn(client, emu)
    messages[2] = {"role": "user", "content": "never mind"}
    tool_id = resp.content[-1].id
    assert tool_id == "toolu_emu_001"
    assert message_of(bad_request(client, messages)) == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_emu_001. Each `tool_use` block must have a corresponding `tool_result` block in the next "
        "message."
    )


def test_tool_result_without_tool_use_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    _, messages = first_turn(client, emu)
    messages[2]["content"].append({"type": "tool_result", "tool_use_id": "toolu_unknown", "content": "?"})
    assert message_of(bad_request(client, messages)) == (
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_unknown. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
    )


def test_budget_below_1024_is_rejected(client: anthropic.Anthropic) -> None:
    err = bad_request(
        client, [{"role": "user", "content": "Hi"}], thinking={"type": "enabled", "budget_tokens": 512}
    )
    assert message_of(err) == "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"


def test_budget_not_below_max_tokens_is_rejected(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model=MODEL,
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 2048},
            messages=[{"role": "user", "content": "Hi"}],
        )
    assert message_of(info.value) == (
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
        f"{DOCS}#max-tokens-and-context-window-size"
    )


def test_unknown_block_type_is_rejected(client: anthropic.Anthropic) -> None:
    messages: list[Any] = [{"role": "user", "content": [{"type": "hologram", "data": "x"}]}]
    assert message_of(bad_request(client, messages)).startswith(
        "messages.0.content.0: Input tag 'hologram' found using 'type' does not match any of the "
        "expected tags: 'text', 'image', "
    )


def test_first_message_must_be_user(client: anthropic.Anthropic) -> None:
    err = bad_request(client, [{"role": "assistant", "content": "Hi"}], thinking={"type": "disabled"})
    assert message_of(err) == 'messages: first message must use the "user" role'


def test_roles_must_alternate(client: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert message_of(bad_request(client, messages)) == (
        'messages: roles must alternate between "user" and "assistant", '
        'but found multiple "user" roles in a row'
    )


def test_more_than_four_cache_control_blocks_is_rejected(client: anthropic.Anthropic) -> None:
    cc = {"type": "ephemeral"}
    content = [{"type": "text", "text": f"part {i}", "cache_control": cc} for i in range(5)]
    err = bad_request(client, [{"role": "user", "content": content}])
    assert message_of(err) == "A maximum of 4 blocks with cache_control may be provided. Found 5."


# -- prompt cache ----------------------------------------------------------------------------------------
def usage_tuple(resp: Any) -> tuple[int, int, int]:
    u = resp.usage
    return (u.input_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens)


def test_cache_figures_on_a_growing_conversation(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    cc = {"type": "ephemeral"}
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": cc}]
    emu.script.extend(
        [call_weather(), ModelAction.answer("It is 18C.", reasoning="Report."), ModelAction.answer("Bye.")]
    )

    # turn 1: breakpoints on the system prompt (block 2) and the question (block 3)
    messages: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?", "cache_control": cc}]}
    ]
    r1 = client.messages.create(
        model=MODEL, max_tokens=4096, thinking=THINKING, tools=TOOLS, system=system, messages=messages
    )
    t1 = prompt_tokens(emu.requests[-1].json())
    assert len(t1) == 3 and t1[0] + t1[1] >= 1024
    assert usage_tuple(r1) == (0, sum(t1), 0)
    assert r1.usage.cache_creation is not None
    assert r1.usage.cache_creation.ephemeral_5m_input_tokens == sum(t1)
    assert r1.usage.cache_creation.ephemeral_1h_input_tokens == 0

    # turn 2: the question's marker moves to the tool result; the 3-block prefix is read back
    messages[0]["content"][0].pop("cache_control")
    tool_id = r1.content[-1].id  # type: ignore[union-attr]
    messages += [
        r1.to_param(),
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": tool_id, "content": "18C", "cache_control": cc}
            ],
        },
    ]
    r2 = client.messages.create(
        model=MODEL, max_tokens=4096, thinking=THINKING, tools=TOOLS, system=system, messages=messages
    )
    t2 = prompt_tokens(emu.requests[-1].json())
    assert t2[:3] == t1
    assert usage_tuple(r2) == (0, sum(t2) - sum(t1), sum(t1))

    # turn 3: a new question without its own marker: the whole previous prompt is read, the rest is input
    messages[-1]["content"][0].pop("cache_control")
    messages += [r2.to_param(), {"role": "user", "content": "Thanks!"}]
    r3 = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking=THINKING,
        tools=TOOLS,
        system=system,
        messages=messages,
        cache_control=cc,  # top-level: marks the last block
    )
    t3 = prompt_tokens(emu.requests[-1].json())
    assert t3[: len(t2)] == t2
    assert usage_tuple(r3) == (0, sum(t3) - sum(t2), sum(t2))
    # literal figures, so a change in the rule is visible
    assert (sum(t1), sum(t2), sum(t3)) == (1253, 1335, 1381)


def test_prefix_below_minimum_cacheable_length_is_not_cached(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    cc = {"type": "ephemeral"}
    system = [{"type": "text", "text": "Short system prompt.", "cache_control": cc}]
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    for _ in range(2):
        r = client.messages.create(
            model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
        total = sum(prompt_tokens(emu.requests[-1].json()))
        assert usage_tuple(r) == (total, 0, 0)


def test_minimum_cacheable_length_is_configurable() -> None:
    cc = {"type": "ephemeral"}
    system = [{"type": "text", "text": "Short system prompt.", "cache_control": cc}]
    with (
        AnthropicEmulator([ModelAction.answer("a"), ModelAction.answer("b")], cache_min_tokens=5) as emu,
        emu.client() as c,
    ):
        r1 = c.messages.create(
            model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
        r2 = c.messages.create(
            model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Ho"}]
        )
        sys_tokens, msg_tokens = prompt_tokens(emu.requests[-1].json())
        assert sys_tokens == tokens(system[0]) == 12
        assert usage_tuple(r1) == (msg_tokens, sys_tokens, 0)
        assert usage_tuple(r2) == (msg_tokens, 0, sys_tokens)


def test_cache_is_keyed_by_model(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    client.messages.create(
        model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
    )
    r = client.messages.create(
        model="claude-haiku-4-5", max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
    )
    assert r.usage.cache_read_input_tokens == 0 and r.usage.cache_creation_input_tokens == tokens(system[0])


def test_one_hour_ttl_is_reported_separately(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    system = [
        {"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
    ]
    emu.script.extend([ModelAction.answer("a")])
    r = client.messages.create(
        model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
    )
    assert r.usage.cache_creation is not None
    assert r.usage.cache_creation.ephemeral_1h_input_tokens == tokens(system[0]) == 1207
    assert r.usage.cache_creation.ephemeral_5m_input_tokens == tokens(system[1])
    assert r.usage.input_tokens == tokens("Hi")


def test_a_cache_entry_expires_after_its_ttl_and_a_read_refreshes_it(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    """§4.4: the default lifetime is 5 minutes, refreshed each time the cached content is used."""
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    emu.script.extend([ModelAction.answer(x) for x in "abcd"])

    def read() -> int:
        r = client.messages.create(
            model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
        return r.usage.cache_read_input_tokens or 0

    assert read() == 0
    emu.advance(299)
    assert read() == 1207  # within 5 minutes: read, and the lifetime starts again
    emu.advance(299)
    assert read() == 1207  # 598 s after the write, 299 s after the read that refreshed it
    emu.advance(301)
    assert read() == 0  # 301 s without use: expired


def test_a_one_hour_entry_outlives_five_minutes(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    emu.script.extend([ModelAction.answer(x) for x in "abc"])
    reads = []
    for gap in (0, 3599, 3601):
        emu.advance(gap)
        r = client.messages.create(
            model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
        reads.append(r.usage.cache_read_input_tokens)
    assert reads == [0, 1207, 0]


def test_the_date_header_is_the_emulators_clock(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    from email.utils import parsedate_to_datetime

    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}
    first = parsedate_to_datetime(client.messages.with_raw_response.create(**kw).headers["date"])
    emu.advance(3600)
    second = parsedate_to_datetime(client.messages.with_raw_response.create(**kw).headers["date"])
    assert 3600 <= (second - first).total_seconds() <= 3602


def test_reads_look_back_at_most_lookback_blocks() -> None:
    cc = {"type": "ephemeral"}
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": cc}]
    actions = [ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")]
    with AnthropicEmulator(actions, lookback_blocks=2) as emu, emu.client() as c:
        c.messages.create(
            model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
        plain = [{"type": "text", "text": LONG_SYSTEM}]
        near = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x"},
                    {"type": "text", "text": "y", "cache_control": cc},
                ],
            }
        ]
        r_near = c.messages.create(model=MODEL, max_tokens=100, system=plain, messages=near)
        assert r_near.usage.cache_read_input_tokens == tokens(system[0])  # hit 2 blocks before the breakpoint
        far_blocks: list[Any] = [{"type": "text", "text": w} for w in ("p", "q", "r")]
        far_blocks[-1]["cache_control"] = cc
        r_far = c.messages.create(
            model=MODEL, max_tokens=100, system=plain, messages=[{"role": "user", "content": far_blocks}]
        )
        assert r_far.usage.cache_read_input_tokens == 0  # the system prefix is 3 blocks back


def test_failed_requests_do_not_write_the_cache(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    emu.inject(AnthropicEmulator.server_error())
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(
            model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
    emu.script.extend([ModelAction.answer("a")])
    r = client.messages.create(
        model=MODEL, max_tokens=100, system=system, messages=[{"role": "user", "content": "Hi"}]
    )
    assert r.usage.cache_read_input_tokens == 0 and r.usage.cache_creation_input_tokens == 1207


def test_count_tokens_endpoint_counts_every_prompt_block(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    result = client.messages.count_tokens(
        model=MODEL, tools=TOOLS, messages=[{"role": "user", "content": "Hi"}]
    )
    assert result.input_tokens == tokens(TOOLS[0]) + tokens("Hi")
    assert emu.script.taken == 0


# -- streaming -------------------------------------------------------------------------------------------
def test_stream_yields_final_message_with_full_thinking_and_signature(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    reasoning = "Long reasoning about the weather in Paris, step by step."
    emu.script.extend(
        [
            ModelAction(
                reasoning=reasoning,
                redacted=True,
                text="Checking now.",
                tool_calls=(ToolCallSpec("get_weather", {"city": "Paris", "unit": "C"}),),
            )
        ]
    )
    with client.messages.stream(
        model=MODEL,
        max_tokens=4096,
        thinking=THINKING,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Hi"}],
    ) as stream:
        final = stream.get_final_message()
    thinking, redacted, text, tool = final.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == reasoning
    assert emu.verify_thinking(MODEL, reasoning, thinking.signature)
    assert isinstance(redacted, RedactedThinkingBlock) and emu.verify_redacted(MODEL, redacted.data)
    assert isinstance(text, TextBlock) and text.text == "Checking now."
    assert isinstance(tool, ToolUseBlock) and tool.input == {"city": "Paris", "unit": "C"}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == count_tokens(reasoning) + count_tokens(
        "Checking now."
    ) + count_tokens('{"city":"Paris","unit":"C"}')
    # the streamed message replays like a non-streamed one
    emu.script.extend([ModelAction.answer("18C.")])
    messages = [
        {"role": "user", "content": "Hi"},
        final.to_param(),
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "18C"}]},
    ]
    assert client.messages.create(
        model=MODEL, max_tokens=4096, thinking=THINKING, tools=TOOLS, messages=messages
    ).content


def test_stream_event_sequence(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    emu.script.extend([call_weather()])
    events = list(
        client.messages.create(
            model=MODEL,
            max_tokens=4096,
            thinking=THINKING,
            tools=TOOLS,
            stream=True,
            messages=[{"role": "user", "content": "Hi"}],
        )
    )
    kinds = [e.type if e.type != "content_block_delta" else e.delta.type for e in events]
    assert kinds[:3] == ["message_start", "content_block_start", "thinking_delta"]
    thinking_stop = kinds.index("content_block_stop")
    assert kinds[thinking_stop - 1] == "signature_delta"
    assert "input_json_delta" in kinds and "text_delta" in kinds
    assert kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]
    assert start.type == "message_start"
    assert start.message.content == [] and start.message.usage.cache_read_input_tokens == 0
    raw = emu.requests[-1]
    assert raw.json()["stream"] is True


def test_truncated_stream_makes_the_sdk_raise(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    emu.script.extend([call_weather()])
    emu.inject(Fault.truncate_stream(4))
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        client.messages.stream(
            model=MODEL,
            max_tokens=4096,
            thinking=THINKING,
            tools=TOOLS,
            messages=[{"role": "user", "content": "Hi"}],
        ) as stream,
    ):
        stream.get_final_message()


# -- faults and auth -------------------------------------------------------------------------------------
def test_rate_limited_fault_raises_rate_limit_error_without_consuming_script(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    emu.script.extend([ModelAction.answer("ok")])
    emu.inject(AnthropicEmulator.rate_limited())
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    assert info.value.status_code == 429
    assert isinstance(info.value.body, dict) and info.value.body["error"]["type"] == "rate_limit_error"
    assert emu.script.taken == 0
    assert client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
    ).content


def test_overloaded_fault_raises_529(client: anthropic.Anthropic, emu: AnthropicEmulator) -> None:
    emu.inject(AnthropicEmulator.overloaded())
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    assert info.value.status_code == 529
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": info.value.request_id,
    }


def test_delay_fault_with_client_timeout_raises_api_timeout_error(emu: AnthropicEmulator) -> None:
    emu.inject(Fault.delay(0.5))
    with emu.client(timeout=0.1) as c, pytest.raises(anthropic.APITimeoutError):
        c.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}])


def test_x_api_key_header_is_accepted(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    emu.script.extend([ModelAction.answer("ok")])
    resp = client.messages.create(
        model=MODEL,
        max_tokens=10,
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"Authorization": anthropic.omit, "x-api-key": "test-key"},
    )
    assert resp.content[0].type == "text"
    headers = emu.requests[-1].headers
    assert headers["x-api-key"] == "test-key" and "authorization" not in headers


def test_bearer_token_is_accepted(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    emu.script.extend([ModelAction.answer("ok")])
    client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    assert emu.requests[-1].headers["authorization"] == "Bearer test-key"


def test_no_auth_header_is_401(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    emu.script.extend([ModelAction.answer("ok")])
    with pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers={"Authorization": anthropic.omit},
        )
    assert info.value.status_code == 401
    assert info.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "x-api-key header is required"},
        "request_id": info.value.request_id,
    }
    assert emu.script.taken == 0


# -- pytest plugin fixtures ------------------------------------------------------------------------------
def test_plugin_fixtures_give_a_running_emulator_and_client(
    anthropic_emulator: AnthropicEmulator, anthropic_client: anthropic.Anthropic
) -> None:
    anthropic_emulator.script.extend([ModelAction.answer("hello")])
    resp = anthropic_client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
    )
    assert resp.content[0].type == "text" and str(anthropic_client.base_url).startswith(
        anthropic_emulator.base_url
    )


def test_async_plugin_fixture(anthropic_emulator: AnthropicEmulator, async_anthropic_client: Any) -> None:
    anthropic_emulator.script.extend([ModelAction.answer("hello")])

    async def run() -> Any:
        async with async_anthropic_client as c:
            return await c.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "Hi"}]
            )

    assert asyncio.run(run()).content[0].text == "hello"


def test_cache_control_on_a_thinking_block_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    # inspect_ai PR #3967, LeenHawk/gproxy#67: thinking blocks cannot be cache breakpoints
    _, messages = first_turn(client, emu)
    assistant = dict(messages[1])
    content = [dict(b) for b in assistant["content"]]
    content[0]["cache_control"] = {"type": "ephemeral"}
    messages[1] = {**assistant, "content": content}
    assert message_of(bad_request(client, messages)) == (
        "messages.1.content.0.thinking.cache_control: Extra inputs are not permitted"
    )


# -- model aliases ---------------------------------------------------------------------------------------
ALIAS = "claude-sonnet-4-5"
DATED = "claude-sonnet-4-5-20250929"
HI: list[Any] = [{"role": "user", "content": "Hi"}]


# the SDK warns that some of these models are deprecated; that is not what these tests are about
deprecated_models_ok = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


def _create(client: anthropic.Anthropic, model: str, messages: list[Any], **kw: Any) -> Any:
    """``messages.create`` with tools and thinking on: a ``Message`` (a stream with ``stream=True``)."""
    kw.setdefault("thinking", THINKING)
    return client.messages.create(model=model, max_tokens=4096, tools=TOOLS, messages=messages, **kw)


def _tool_step(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str, *, reasoning: str | None = "Call it."
) -> tuple[anthropic.types.Message, list[Any]]:
    """One tool call produced under ``model`` (thinking + redacted thinking); the follow-up messages."""
    action = ModelAction(
        reasoning=reasoning, redacted=True, text="Checking.", tool_calls=(ToolCallSpec("get_weather", {}),)
    )
    emu.script.extend([action])
    resp = _create(client, model, [{"role": "user", "content": "Weather in Paris?"}])
    tool_id = next(b.id for b in resp.content if b.type == "tool_use")
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        resp.to_param(),
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "18C"}]},
    ]
    return resp, messages


def test_the_alias_table_holds_the_documented_aliases_and_cites_its_source() -> None:
    from reasonstate.testing import anthropic as module

    assert module.DOCS_MODELS_OVERVIEW == "https://docs.anthropic.com/en/docs/about-claude/models/overview"
    assert module.__doc__ is not None and module.DOCS_MODELS_OVERVIEW in module.__doc__
    assert {
        "claude-sonnet-4-5": "claude-sonnet-4-5-20250929",
        "claude-opus-4-1": "claude-opus-4-1-20250805",
        "claude-haiku-4-5": "claude-haiku-4-5-20251001",
    }.items() <= module.MODEL_ALIASES.items()


@deprecated_models_ok
@pytest.mark.parametrize(
    ("alias", "dated"),
    [
        ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
        ("claude-opus-4-1", "claude-opus-4-1-20250805"),
        ("claude-haiku-4-5", "claude-haiku-4-5-20251001"),
    ],
)
def test_an_alias_is_answered_with_its_dated_id(
    emu: AnthropicEmulator, client: anthropic.Anthropic, alias: str, dated: str
) -> None:
    emu.script.extend([ModelAction.answer("Hello.")])
    raw = client.messages.with_raw_response.create(model=alias, max_tokens=100, messages=HI)
    assert raw.http_response.json()["model"] == dated
    assert raw.parse().model == dated
    assert emu.requests[-1].json()["model"] == alias  # the SDK sent the alias


@deprecated_models_ok
def test_a_streamed_answer_to_an_alias_names_the_dated_id_in_message_start(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    emu.script.extend([call_weather(), call_weather()])
    events = list(_create(client, ALIAS, HI, stream=True))
    start = events[0]
    assert start.type == "message_start" and start.message.model == DATED
    with client.messages.stream(
        model=ALIAS, max_tokens=4096, thinking=THINKING, tools=TOOLS, messages=HI
    ) as s:
        assert s.get_final_message().model == DATED


@deprecated_models_ok
@pytest.mark.parametrize("name", [DATED, "claude-sonnet-4-6", "claude-opus-4-20250514"])
def test_a_dated_or_dateless_id_is_echoed_unchanged(
    emu: AnthropicEmulator, client: anthropic.Anthropic, name: str
) -> None:
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    raw = client.messages.with_raw_response.create(model=name, max_tokens=100, messages=HI)
    assert raw.http_response.json()["model"] == name
    events = list(client.messages.create(model=name, max_tokens=100, messages=HI, stream=True))
    assert events[0].type == "message_start" and events[0].message.model == name


@deprecated_models_ok
def test_the_constructor_adds_and_overrides_aliases() -> None:
    extra = {"claude-house": "claude-sonnet-4-6", "claude-sonnet-4-5": "claude-sonnet-4-5"}
    with AnthropicEmulator(aliases=extra) as emu, emu.client() as client:
        emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")])
        models = [
            client.messages.create(model=m, max_tokens=100, messages=HI).model
            for m in ("claude-house", "claude-sonnet-4-5", "claude-opus-4-1")
        ]
    assert models == ["claude-sonnet-4-6", "claude-sonnet-4-5", "claude-opus-4-1-20250805"]
    assert emu.resolve_model("claude-house") == "claude-sonnet-4-6"


@deprecated_models_ok
@pytest.mark.parametrize(
    ("produced", "replayed"), [(ALIAS, ALIAS), (ALIAS, DATED), (DATED, ALIAS), (DATED, DATED)]
)
@pytest.mark.parametrize("reasoning", ["Call it.", None], ids=["thinking", "redacted_only"])
def test_thinking_produced_under_an_alias_or_its_dated_id_verifies_under_either(
    emu: AnthropicEmulator, client: anthropic.Anthropic, produced: str, replayed: str, reasoning: str | None
) -> None:
    resp, messages = _tool_step(emu, client, produced, reasoning=reasoning)
    assert resp.model == DATED
    emu.script.extend([ModelAction.answer("It is 18C.", reasoning="Report it.")])
    final = _create(client, replayed, messages)
    assert (final.stop_reason, final.model) == ("end_turn", DATED)
    sent = emu.requests[-1].json()["messages"][1]["content"]
    expected = ["thinking"] * (reasoning is not None) + ["redacted_thinking", "text", "tool_use"]
    assert [b["type"] for b in sent] == expected
    # a later turn still verifies every earlier block under the other name
    messages += [final.to_param(), {"role": "user", "content": "And tomorrow?"}]
    emu.script.extend([ModelAction.answer("Also 18C.", reasoning="Same.")])
    assert _create(client, produced, messages).model == DATED


@deprecated_models_ok
@pytest.mark.parametrize(
    "other", ["claude-opus-4-1", "claude-opus-4-1-20250805", "claude-sonnet-4-6", "claude-sonnet-4-20250514"]
)
@pytest.mark.parametrize(
    ("reasoning", "message"),
    [
        ("Call it.", "messages.1.content.0: Invalid `signature` in `thinking` block"),
        (None, "messages.1.content.0: Invalid `data` in `redacted_thinking` block"),
    ],
    ids=["thinking", "redacted_only"],
)
def test_thinking_produced_under_an_alias_still_fails_under_another_model(
    emu: AnthropicEmulator, client: anthropic.Anthropic, other: str, reasoning: str | None, message: str
) -> None:
    _, messages = _tool_step(emu, client, ALIAS, reasoning=reasoning)
    with pytest.raises(anthropic.BadRequestError) as info:
        _create(client, other, messages)
    err = info.value
    assert err.status_code == 400
    assert err.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": err.request_id,
    }
    assert err.request_id is not None and err.request_id.startswith("req_emu_")
    assert emu.script.taken == 1  # the rejected request consumed nothing


def test_the_signature_helpers_treat_an_alias_and_its_dated_id_as_one_model(emu: AnthropicEmulator) -> None:
    signature = emu.sign_thinking(ALIAS, "t")
    assert emu.verify_thinking(DATED, "t", signature) and emu.verify_thinking(ALIAS, "t", signature)
    assert not emu.verify_thinking("claude-opus-4-1", "t", signature)
    data = emu.issue_redacted(DATED)
    assert emu.verify_redacted(ALIAS, data) and not emu.verify_redacted("claude-sonnet-4-6", data)


@deprecated_models_ok
@pytest.mark.parametrize(("first", "second"), [(ALIAS, DATED), (DATED, ALIAS)])
def test_an_alias_and_its_dated_id_share_the_prompt_cache(
    emu: AnthropicEmulator, client: anthropic.Anthropic, first: str, second: str
) -> None:
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")])

    def ask(model: str) -> tuple[int, int]:
        r = client.messages.create(model=model, max_tokens=100, system=system, messages=HI)
        return r.usage.cache_creation_input_tokens or 0, r.usage.cache_read_input_tokens or 0

    written = tokens(system[0])
    assert ask(first) == (written, 0)
    assert ask(second) == (0, written)
    assert ask("claude-opus-4-1") == (written, 0)  # another model has a cache of its own


# -- request rules closed after an independent review ----------------------------------------------------
# Each rule: one test that the real SDK gets the vendor's exact status and error body, one that the valid
# variant of the same request is still accepted (docs/protocols.md §4.1, §4.3, §4.6).
PRESERVED = "claude-opus-5-5"
ADAPTIVE = {"type": "adaptive"}
PLATFORM_DOCS = "https://platform.claude.com/docs/en/build-with-claude/extended-thinking"


def rejected_body(err: anthropic.APIStatusError, message: str) -> None:
    """The exact status and error body of a vendor 400 (``request_id`` is the response header's)."""
    assert err.status_code == 400
    assert err.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": err.request_id,
    }
    assert str(err.request_id).startswith("req_emu_")


def create(client: anthropic.Anthropic, **kw: Any) -> Any:
    kw.setdefault("model", MODEL)
    kw.setdefault("max_tokens", 4096)
    kw.setdefault("messages", [{"role": "user", "content": "Weather in Paris?"}])
    return client.messages.create(**kw)


def rejected(client: anthropic.Anthropic, **kw: Any) -> anthropic.BadRequestError:
    with pytest.raises(anthropic.BadRequestError) as info:
        create(client, **kw)
    return info.value


def turn_on(
    client: anthropic.Anthropic, emu: AnthropicEmulator, model: str, *, system: str = "Be brief.", **kw: Any
) -> list[Any]:
    """One tool-calling turn on ``model``; the messages of the follow-up (replayed blocks, tool result)."""
    emu.script.extend([ModelAction(reasoning="Call the tool.", redacted=True, tool_calls=(WEATHER,))])
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    kw.setdefault("thinking", ADAPTIVE)
    resp = create(client, model=model, system=system, tools=TOOLS, messages=messages, **kw)
    tool_id = next(b.id for b in resp.content if b.type == "tool_use")
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": "18C"}
    return [*messages, as_dicts(resp.to_param()), {"role": "user", "content": [result]}]


WEATHER = ToolCallSpec("get_weather", {"city": "Paris"})


# 1. strict base64 (signature / redacted data): an extra "=" or any byte after the padding is not the value
@pytest.mark.parametrize("model", [MODEL, PRESERVED], ids=["unpadded", "padded"])
@pytest.mark.parametrize("suffix", ["=", "==", "=A", "A"])
def test_a_signature_with_extra_padding_or_a_trailing_byte_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str, suffix: str
) -> None:
    messages = turn_on(client, emu, model)
    signature = messages[1]["content"][0]["signature"]
    assert signature.endswith("=") == (model == PRESERVED)  # 45 bytes encode unpadded, 77 with one "="
    messages[1]["content"][0]["signature"] = signature + suffix
    err = rejected(client, model=model, system="Be brief.", thinking=ADAPTIVE, tools=TOOLS, messages=messages)
    rejected_body(err, "messages.1.content.0: Invalid `signature` in `thinking` block")
    assert emu.script.taken == 1


@pytest.mark.parametrize("model", [MODEL, PRESERVED], ids=["unpadded", "padded"])
@pytest.mark.parametrize("suffix", ["=", "==", "=A", "A"])
def test_redacted_data_with_extra_padding_or_a_trailing_byte_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str, suffix: str
) -> None:
    messages = turn_on(client, emu, model)
    messages[1]["content"][1]["data"] += suffix
    err = rejected(client, model=model, system="Be brief.", thinking=ADAPTIVE, tools=TOOLS, messages=messages)
    rejected_body(err, "messages.1.content.1: Invalid `data` in `redacted_thinking` block")


@pytest.mark.parametrize("model", [MODEL, PRESERVED], ids=["unpadded", "padded"])
def test_signature_and_redacted_data_exactly_as_issued_are_accepted(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str
) -> None:
    messages = turn_on(client, emu, model)
    emu.script.extend([ModelAction.answer("18C in Paris.")])
    resp = create(client, model=model, system="Be brief.", thinking=ADAPTIVE, tools=TOOLS, messages=messages)
    assert resp.content[-1].type == "text"
    assert emu.verify_redacted(model, messages[1]["content"][1]["data"])


# 2. forced tool_choice with extended thinking
@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_forced_tool_choice_with_extended_thinking_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic, tool_choice: Any
) -> None:
    err = rejected(client, thinking=THINKING, tools=TOOLS, tool_choice=tool_choice)
    rejected_body(err, "Thinking may not be enabled when tool_choice forces tool use.")
    assert emu.script.taken == 0


@pytest.mark.parametrize(
    ("tool_choice", "thinking"),
    [({"type": "auto"}, THINKING), ({"type": "none"}, THINKING), ({"type": "any"}, None)],
    ids=["auto+thinking", "none+thinking", "any+no_thinking"],
)
def test_auto_or_none_tool_choice_with_thinking_and_forcing_without_it_are_accepted(
    emu: AnthropicEmulator, client: anthropic.Anthropic, tool_choice: Any, thinking: Any
) -> None:
    emu.script.extend([call_weather()])
    kw = {"thinking": thinking} if thinking is not None else {}
    resp = create(client, tools=TOOLS, tool_choice=tool_choice, **kw)
    assert resp.stop_reason == "tool_use"


# 3. sampling options with thinking on (enabled or adaptive)
@pytest.mark.parametrize("thinking", [THINKING, ADAPTIVE], ids=["enabled", "adaptive"])
@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            {"temperature": 0.5},
            "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. "
            f"Please consult our documentation at {PLATFORM_DOCS}",
        ),
        (
            {"temperature": 0},
            "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. "
            f"Please consult our documentation at {PLATFORM_DOCS}",
        ),
        (
            {"top_p": 0.9},
            "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled or in adaptive "
            f"mode. Please consult our documentation at {PLATFORM_DOCS}",
        ),
        (
            {"top_k": 40},
            "`top_k` must be unset when thinking is enabled or in adaptive mode. Please consult our "
            f"documentation at {PLATFORM_DOCS}",
        ),
    ],
    ids=["temperature", "temperature_0", "top_p", "top_k"],
)
def test_sampling_modifications_with_thinking_are_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic, thinking: Any, option: Any, message: str
) -> None:
    rejected_body(rejected(client, thinking=thinking, extra_body=option), message)
    assert emu.script.taken == 0


@pytest.mark.parametrize(
    ("thinking", "option"),
    [
        (THINKING, {"temperature": 1}),
        (ADAPTIVE, {"temperature": 1.0}),
        (THINKING, {"top_p": 0.95}),
        (ADAPTIVE, {"top_p": 1}),
        (None, {"temperature": 0.2, "top_p": 0.5, "top_k": 40}),
        ({"type": "disabled"}, {"temperature": 0, "top_k": 5}),
    ],
    ids=["temperature_1", "temperature_1.0", "top_p_0.95", "top_p_1", "no_thinking", "disabled"],
)
def test_sampling_options_thinking_allows_and_any_without_thinking_are_accepted(
    emu: AnthropicEmulator, client: anthropic.Anthropic, thinking: Any, option: Any
) -> None:
    emu.script.extend([ModelAction.answer("Sunny.")])
    kw = {"thinking": thinking} if thinking is not None else {}
    assert create(client, **kw, extra_body=option).content[-1].type == "text"


# 4. manual thinking on a model that only accepts adaptive thinking
ADAPTIVE_ONLY_TEXT = (
    '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
    '"output_config.effort" to control thinking behavior.'
)


@pytest.mark.parametrize(
    "model", ["claude-opus-4-7", "claude-opus-4-8", "claude-sonnet-5", "claude-fable-5-1", PRESERVED]
)
def test_enabled_thinking_on_an_adaptive_only_model_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str
) -> None:
    rejected_body(rejected(client, model=model, thinking=THINKING), ADAPTIVE_ONLY_TEXT)
    assert emu.script.taken == 0


@pytest.mark.parametrize(
    ("model", "thinking"),
    [
        ("claude-opus-4-7", ADAPTIVE),
        (PRESERVED, ADAPTIVE),
        ("claude-sonnet-4-6", THINKING),  # deprecated there, still accepted
        ("claude-sonnet-4-5", THINKING),
        ("claude-opus-4-20250514", THINKING),
        ("claude-3-7-sonnet-20250219", THINKING),
    ],
)
def test_adaptive_thinking_there_and_enabled_thinking_on_earlier_models_are_accepted(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str, thinking: Any
) -> None:
    emu.script.extend([ModelAction.answer("Sunny.", reasoning="Easy.")])
    assert create(client, model=model, thinking=thinking).content[0].type == "thinking"


# 5. preserved thinking: a replayed block is bound to the exact prefix it was produced on
BOUND = (
    "Invalid `signature` in `thinking` block. The block is bound to a different conversation. Remove the "
    'block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)


@pytest.mark.parametrize("model", [PRESERVED, "claude-fable-5-1", "claude-sonnet-5-5", "claude-haiku-5-5"])
@pytest.mark.parametrize("change", ["system", "tools", "earlier_message"])
def test_a_changed_prefix_before_a_preserved_thinking_block_is_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str, change: str
) -> None:
    messages = turn_on(client, emu, model)
    kw: dict[str, Any] = {"system": "Be brief.", "tools": TOOLS}
    if change == "system":
        kw["system"] = "Be very brief."
    elif change == "tools":
        kw["tools"] = [{**TOOLS[0], "description": "The weather."}]
    else:
        messages[0] = {"role": "user", "content": "Weather in Rome?"}
    err = rejected(client, model=model, thinking=ADAPTIVE, messages=messages, **kw)
    rejected_body(err, f"messages.1.content.0: {BOUND}")
    assert emu.script.taken == 1


def test_a_dropped_earlier_turn_invalidates_every_later_preserved_block(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    messages = turn_on(client, emu, PRESERVED)
    emu.script.extend([ModelAction.answer("18C.", reasoning="Answer it.")])
    final = create(
        client, model=PRESERVED, system="Be brief.", thinking=ADAPTIVE, tools=TOOLS, messages=messages
    )
    history = [*messages, as_dicts(final.to_param()), {"role": "user", "content": "And Rome?"}]
    # leaving the first turn's redacted block out changes the prefix of every block after it
    history[1]["content"] = [history[1]["content"][0], history[1]["content"][2]]
    err = rejected(
        client, model=PRESERVED, system="Be brief.", thinking=ADAPTIVE, tools=TOOLS, messages=history
    )
    rejected_body(err, f"messages.3.content.0: {BOUND}")


@pytest.mark.parametrize("model", [PRESERVED, "claude-fable-5-1"])
def test_an_unchanged_prefix_is_accepted_whatever_its_cache_breakpoints(
    emu: AnthropicEmulator, client: anthropic.Anthropic, model: str
) -> None:
    messages = turn_on(client, emu, model)
    # a moved breakpoint and a string spelled as a text block are the same prefix
    messages[0] = {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}
    messages[2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    emu.script.extend([ModelAction.answer("18C.", reasoning="Answer it.")])
    final = create(client, model=model, system=system, thinking=ADAPTIVE, tools=TOOLS, messages=messages)
    # and the turn after it, append-only, keeps every block of both earlier responses valid
    history = [*messages, as_dicts(final.to_param()), {"role": "user", "content": "And Rome?"}]
    emu.script.extend([ModelAction.answer("22C.")])
    create(client, model=model, system="Be brief.", thinking=ADAPTIVE, tools=TOOLS, messages=history)
    assert emu.script.taken == 3


def test_other_models_keep_unbound_signatures(emu: AnthropicEmulator, client: anthropic.Anthropic) -> None:
    messages = turn_on(client, emu, "claude-opus-5")
    assert not messages[1]["content"][0]["signature"].endswith("=")  # no prefix digest inside
    emu.script.extend([ModelAction.answer("18C.")])
    create(
        client, model="claude-opus-5", system="Changed.", thinking=ADAPTIVE, tools=TOOLS, messages=messages
    )


def test_drop_block_removes_the_unbound_blocks_and_reports_them(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    messages = turn_on(client, emu, PRESERVED)
    emu.script.extend([ModelAction.answer("18C.")])
    resp = client.beta.messages.create(
        model=PRESERVED,
        max_tokens=4096,
        system="Be very brief.",
        thinking={"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
        tools=TOOLS,
        messages=messages,
        betas=["thinking-binding-controls-2026-08-01"],
    )
    assert [(t.type, t.path, t.reason) for t in resp.input_transformations or []] == [
        ("thinking_dropped", "messages.1.content.0", "prefix_binding_mismatch"),
        ("thinking_dropped", "messages.1.content.1", "prefix_binding_mismatch"),
    ]
    # the dropped blocks are not in the prompt the model was shown
    kept = [b for b in messages[1]["content"] if b["type"] not in ("thinking", "redacted_thinking")]
    shown = [{"type": "text", "text": "Be very brief."}, *messages[:1], {**messages[1], "content": kept}]
    total = resp.usage.input_tokens + resp.usage.cache_read_input_tokens
    assert total == sum(map(tokens, TOOLS)) + sum(
        tokens(b) for b in [shown[0], shown[1]["content"], *kept, *messages[2]["content"]]
    )


def test_drop_block_with_an_unchanged_prefix_drops_nothing(
    emu: AnthropicEmulator, client: anthropic.Anthropic
) -> None:
    messages = turn_on(client, emu, PRESERVED)
    emu.script.extend([ModelAction.answer("18C.")])
    resp = client.beta.messages.create(
        model=PRESERVED,
        max_tokens=4096,
        system="Be brief.",
        thinking={"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
        tools=TOOLS,
        messages=messages,
        betas=["thinking-binding-controls-2026-08-01"],
    )
    assert resp.input_transformations == []


def test_block_binding_without_its_beta_header_is_rejected(client: anthropic.Anthropic) -> None:
    err = rejected(
        client,
        model=PRESERVED,
        thinking={"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
    )
    rejected_body(
        err,
        "thinking.block_binding: requires the `anthropic-beta: thinking-binding-controls-2026-08-01` header",
    )


@pytest.mark.parametrize(
    ("key", "accepted"),
    [
        *[("city", True), ("ship_to.address.city", True), ("a-b_C9", True), ("x" * 64, True)],
        *[("x" * 65, False), ("my key", False), ("città", False), ("", False), ("a/b", False)],
    ],
)
def test_tool_property_keys_outside_the_documented_pattern_are_rejected(
    emu: AnthropicEmulator, client: anthropic.Anthropic, key: str, accepted: bool
) -> None:
    # docs/protocols.md §4.2: properties keys match ^[a-zA-Z0-9_.-]{1,64}$ (the 400 quoted from users)
    emu.script.extend([ModelAction.answer("ok")])
    tools: Any = [{"name": "t", "input_schema": {"type": "object", "properties": {key: {"type": "string"}}}}]
    request = {
        "model": MODEL,
        "max_tokens": 64,
        "tools": tools,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if accepted:
        assert client.messages.create(**request).content[0].text == "ok"
        return
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**request)
    assert caught.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "tools.0.custom.input_schema.properties: Property keys should match pattern "
        "'^[a-zA-Z0-9_.-]{1,64}$'",
    }


# -- deterministic answers -------------------------------------------------------------------------------
def _weather_by_request(body: dict[str, Any]) -> ModelAction:
    """A responder: a tool call for the question, an answer for its result (decided by the request)."""
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and last[0].get("type") == "tool_result":
        return ModelAction.answer(f"It is {last[0]['content']}.", reasoning="Read the result.")
    return ModelAction(
        reasoning=f"Call the tool for: {last}", redacted=True, tool_calls=(ToolCallSpec("get_weather", {}),)
    )


def _raw_answer(client: anthropic.Anthropic, messages: list[Any]) -> dict[str, Any]:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=4096, tools=TOOLS, thinking=THINKING, messages=messages
    )
    data: dict[str, Any] = json.loads(raw.http_response.content)
    return data


def test_a_deterministic_emulator_answers_a_request_with_the_same_bytes_every_time() -> None:
    """deterministic=True: nonces and ids derive from the secret and the request body, so a retried
    request (the answer lost with a killed worker) gets the very answer, from this emulator or another
    with the same secret, and the answer still replays (its signatures verify)."""
    question = [{"role": "user", "content": "Weather in Paris?"}]
    with (
        AnthropicEmulator(_weather_by_request, secret="s", deterministic=True) as a,
        AnthropicEmulator(_weather_by_request, secret="s", deterministic=True) as b,
    ):
        first, again, elsewhere = (
            _raw_answer(a.client(), question),
            _raw_answer(a.client(), question),
            _raw_answer(b.client(), question),
        )
        assert first == again == elsewhere
        assert [block["type"] for block in first["content"]] == ["thinking", "redacted_thinking", "tool_use"]
        assert first["id"].startswith("msg_emu_") and len(first["id"]) == len("msg_emu_") + 24
        other = _raw_answer(a.client(), [{"role": "user", "content": "Weather in Rome?"}])
        assert other["id"] != first["id"]
        assert other["content"][2]["id"] != first["content"][2]["id"]
        assert other["content"][0]["signature"] != first["content"][0]["signature"]
        tool_id = first["content"][2]["id"]
        follow_up = [
            *question,
            {"role": "assistant", "content": first["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "18C"}]},
        ]
        assert _raw_answer(b.client(), follow_up) == _raw_answer(a.client(), follow_up)
        assert _raw_answer(a.client(), follow_up)["content"][1]["text"] == "It is 18C."
        edited = copy.deepcopy(follow_up)
        edited[1]["content"][0]["thinking"] += " (edited)"
        with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
            _raw_answer(a.client(), edited)


def test_by_default_the_same_request_gets_fresh_nonces_and_ids() -> None:
    question = [{"role": "user", "content": "Weather in Paris?"}]
    with AnthropicEmulator(_weather_by_request) as emu:
        first, again = _raw_answer(emu.client(), question), _raw_answer(emu.client(), question)
    assert (first["id"], again["id"]) == ("msg_emu_001", "msg_emu_002")
    assert first["content"][0]["signature"] != again["content"][0]["signature"]
    assert first["content"][2]["id"] != again["content"][2]["id"]


def test_a_nonce_given_to_sign_thinking_is_twelve_bytes() -> None:
    emu = AnthropicEmulator(secret="s")
    signed = emu.sign_thinking(MODEL, "t", nonce=bytes(12))
    assert signed == emu.sign_thinking(MODEL, "t", nonce=bytes(12))
    assert emu.verify_thinking(MODEL, "t", signed)
    assert emu.verify_redacted(MODEL, emu.issue_redacted(MODEL, nonce=bytes(12)))
    with pytest.raises(ValueError, match="12 bytes"):
        emu.sign_thinking(MODEL, "t", nonce=b"short")
    with pytest.raises(TypeError, match="deterministic"):
        AnthropicEmulator(deterministic=1)  # type: ignore[arg-type]
