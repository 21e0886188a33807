"""The Chat Completions emulator (openai, deepseek, vllm, sglang dialects), driven by the real ``openai``
SDK over real HTTP (docs/protocols.md §2, §3)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from reasonstate.testing import Fault, ModelAction, ToolCallSpec
from reasonstate.testing.openai_chat import Dialect, OpenAIChatEmulator

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
WEATHER = ToolCallSpec("get_weather", {"city": "Paris"})
USER: Any = {"role": "user", "content": "Weather in Paris?"}
THINK = "User wants weather; call the tool."


def _tokens(*parts: Any) -> int:
    """The documented rendering: canonical JSON per segment, each tokenized on its own, 4 bytes per token."""
    return sum(
        math.ceil(len(json.dumps(p, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()) / 4)
        for p in parts
    )


def _message(error: openai.APIStatusError) -> str:
    assert isinstance(error.body, dict)
    return str(error.body["message"])


@pytest.fixture
def deepseek() -> Iterator[tuple[OpenAIChatEmulator, openai.OpenAI]]:
    with OpenAIChatEmulator(dialect="deepseek") as emu, emu.client() as client:
        yield emu, client


def _emulator(dialect: Dialect, *actions: ModelAction, **kw: Any) -> OpenAIChatEmulator:
    return OpenAIChatEmulator(list(actions), dialect=dialect, **kw)


def _tool_turn(client: openai.OpenAI, **kw: Any) -> tuple[Any, list[Any]]:
    """First call of a tool loop; returns the completion and the follow-up messages (dump + tool result)."""
    r = client.chat.completions.create(model="deepseek-v4-pro", messages=[USER], tools=TOOLS, **kw)
    m = r.choices[0].message
    tool = {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": '{"temp_c":18}'}
    return r, [USER, m.model_dump(exclude_none=True), tool]


# -- DeepSeek: reasoning_content (§3.2, §3.3) -------------------------------------------------------------


def test_deepseek_message_carries_reasoning_content_and_tool_call(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK)])
    r, _ = _tool_turn(client)
    m = r.choices[0].message
    assert m.model_extra == {"reasoning_content": THINK}
    assert m.content == ""
    assert [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls] == [
        ("call_001", "get_weather", '{"city":"Paris"}')
    ]
    assert r.choices[0].finish_reason == "tool_calls"
    assert emu.requests[0].path == "/chat/completions"  # DeepSeek's base URL has no /v1


def test_deepseek_dumped_message_replays_reasoning_content(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend(
        [ModelAction.call(WEATHER, reasoning=THINK), ModelAction.answer("18 °C", reasoning="ok")]
    )
    _, messages = _tool_turn(client)
    r = client.chat.completions.create(model="deepseek-v4-pro", messages=messages, tools=TOOLS)
    assert r.choices[0].message.content == "18 °C"
    assert emu.requests[-1].json()["messages"][1]["reasoning_content"] == THINK


def test_deepseek_missing_reasoning_content_is_rejected(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK)])
    _, messages = _tool_turn(client)
    del messages[1]["reasoning_content"]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="deepseek-v4-pro", messages=messages, tools=TOOLS)
    assert (
        _message(info.value) == "The reasoning_content in the thinking mode must be passed back to the API."
    )
    assert (info.value.type, info.value.param, info.value.code) == (
        "invalid_request_error",
        None,
        "invalid_request_error",
    )


def test_deepseek_missing_reasoning_content_is_rejected_in_later_user_turns(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK)])
    _, messages = _tool_turn(client)
    del messages[1]["reasoning_content"]
    later = [*messages, {"role": "assistant", "content": "18 °C"}, {"role": "user", "content": "And Rome?"}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="deepseek-v4-pro", messages=later)


def test_deepseek_assistant_without_tool_calls_needs_no_reasoning_content(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.answer("fine")])
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, USER]
    r = client.chat.completions.create(model="deepseek-v4-pro", messages=history)
    assert r.choices[0].message.content == "fine"


def test_deepseek_thinking_disabled_drops_reasoning_and_the_rule(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK), ModelAction.answer("18 °C")])
    off = {"extra_body": {"thinking": {"type": "disabled"}}}
    r, messages = _tool_turn(client, **off)
    assert r.choices[0].message.model_extra == {}
    assert r.usage is not None and r.usage.completion_tokens_details is not None
    assert r.usage.completion_tokens_details.reasoning_tokens == 0
    r2 = client.chat.completions.create(model="deepseek-v4-pro", messages=messages, tools=TOOLS, **off)
    assert r2.choices[0].message.content == "18 °C"


def test_deepseek_altered_reasoning_content_is_rejected(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK)])
    _, messages = _tool_turn(client)
    messages[1]["reasoning_content"] = THINK + " "
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="deepseek-v4-pro", messages=messages, tools=TOOLS)
    assert info.value.code == "emulator_reasoning_mismatch"


def test_deepseek_altered_reasoning_is_accepted_without_replay_verification() -> None:
    with _emulator("deepseek", verify_replay=False) as emu, emu.client() as client:
        emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK), ModelAction.answer("ok")])
        _, messages = _tool_turn(client)
        messages[1]["reasoning_content"] = ""
        r = client.chat.completions.create(model="deepseek-v4-pro", messages=messages, tools=TOOLS)
        assert r.choices[0].message.content == "ok"


def test_legacy_reasoner_rejects_reasoning_content_in_input() -> None:
    with _emulator("deepseek", legacy_reject_reasoning=True) as emu, emu.client() as client:
        messages = [USER, {"role": "assistant", "content": "x", "reasoning_content": "y"}, USER]
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="deepseek-reasoner", messages=messages)
        assert _message(info.value) == (
            "The reasoning_content is an intermediate result for display purposes only and will not be "
            "included in the context for inference. Please remove the reasoning_content from your message to "
            "reduce network traffic."
        )


def test_legacy_reasoner_refuses_successive_messages_of_one_role_with_its_own_400() -> None:
    """The retired deepseek-reasoner's text and envelope (deepseek-ai/DeepSeek-R1#21, xerrors/Yuxi#126;
    docs/protocols.md §3.3); one user message of ``text`` parts is accepted."""
    with _emulator("deepseek", legacy_reject_successive=True) as emu, emu.client() as client:
        emu.script.extend([ModelAction.answer("ok")])
        for messages, at in (
            ([USER, USER], (0, 1)),
            ([USER, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}], (1, 2)),
        ):
            with pytest.raises(openai.BadRequestError) as info:
                client.chat.completions.create(model="deepseek-reasoner", messages=messages)
            assert info.value.body == {
                "message": f"deepseek-reasoner does not support successive user or assistant messages "
                f"(messages[{at[0]}] and messages[{at[1]}] in your input). You should interleave the "
                "user/assistant messages in the message sequence.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
        r = client.chat.completions.create(
            model="deepseek-reasoner", messages=[{"role": "user", "content": parts}]
        )
        assert r.choices[0].message.content == "ok"


# -- DeepSeek: cache units (§3.4) ---------------------------------------------------------------------------


def test_deepseek_continuation_hits_the_persisted_input_plus_output(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend(
        [ModelAction.call(WEATHER, reasoning=THINK), ModelAction.answer("18 °C", reasoning="ok")]
    )
    r1, messages = _tool_turn(client)
    r2 = client.chat.completions.create(model="deepseek-v4-pro", messages=messages, tools=TOOLS)
    assert r1.usage is not None and r2.usage is not None
    assert (r1.usage.prompt_tokens, r1.usage.model_extra) == (
        46,
        {"prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 46},
    )
    # unit persisted at the end of request 1's output: tools + user + the assistant message (A+B);
    # segments of 136, 45 and 210 bytes -> 34 + 12 + 53 tokens, i.e. request 1's prompt + completion tokens
    hit = _tokens({"tools": TOOLS}, USER, messages[1])
    assert hit == 99 == r1.usage.prompt_tokens + r1.usage.completion_tokens
    assert r2.usage.prompt_tokens == _tokens({"tools": TOOLS}, *messages) == 117  # + the 69-byte tool result
    assert r2.usage.model_extra == {"prompt_cache_hit_tokens": 99, "prompt_cache_miss_tokens": 18}
    assert r2.usage.prompt_tokens_details is not None and r2.usage.prompt_tokens_details.cached_tokens == 99


def test_deepseek_common_prefix_of_two_requests_becomes_a_unit(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")])
    system = {"role": "system", "content": "You are terse. " * 40}
    hits = []
    for question in ("A?", "B?", "C?"):
        r = client.chat.completions.create(
            model="deepseek-v4-pro", messages=[system, {"role": "user", "content": question}]
        )
        assert r.usage is not None and r.usage.model_extra is not None
        hits.append(r.usage.model_extra["prompt_cache_hit_tokens"])
    # A+B, then A+C misses but persists A, then A+D hits A (the api-docs kv_cache example)
    assert hits == [0, 0, _tokens(system)]
    assert hits[2] == 158  # '{"content":"You are terse. ...","role":"system"}' = 630 bytes


def test_deepseek_units_are_per_model(deepseek: tuple[OpenAIChatEmulator, openai.OpenAI]) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    client.chat.completions.create(model="deepseek-v4-pro", messages=[USER])
    r = client.chat.completions.create(model="deepseek-v4-flash", messages=[USER])
    assert r.usage is not None and r.usage.model_extra == {
        "prompt_cache_hit_tokens": 0,
        "prompt_cache_miss_tokens": 12,
    }


# -- OpenAI dialect: pairing and cache --------------------------------------------------------------------


@pytest.fixture
def chat() -> Iterator[tuple[OpenAIChatEmulator, openai.OpenAI]]:
    """The openai dialect, also serving ``deepseek-v4-pro``: the shared tool-loop helpers name that model in
    every dialect, and OpenAI's table does not have it (``models=`` adds it, as for a fine-tune)."""
    with OpenAIChatEmulator(dialect="openai", models=("deepseek-v4-pro",)) as emu, emu.client() as client:
        yield emu, client


def test_openai_dialect_exposes_no_reasoning_but_counts_it(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = chat
    emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK)])
    r, _ = _tool_turn(client)
    m = r.choices[0].message
    assert m.model_extra == {} and m.content is None
    assert r.usage is not None and r.usage.completion_tokens_details is not None
    assert r.usage.completion_tokens_details.reasoning_tokens == 9  # 34 bytes
    assert emu.requests[0].path == "/v1/chat/completions"


def test_tool_message_without_preceding_tool_calls_is_rejected(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    _, client = chat
    messages: Any = [USER, {"role": "tool", "tool_call_id": "call_001", "content": "18"}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-5.5", messages=messages)
    assert _message(info.value) == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
        "'tool_calls'."
    )
    assert (info.value.param, info.value.code) == ("messages.[1].role", None)


def test_unanswered_tool_call_is_rejected(chat: tuple[OpenAIChatEmulator, openai.OpenAI]) -> None:
    emu, client = chat
    emu.script.extend([ModelAction.call(WEATHER, ToolCallSpec("get_weather", {"city": "Rome"}))])
    _, messages = _tool_turn(client)
    messages.append({"role": "user", "content": "and?"})
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-5.5", messages=messages, tools=TOOLS)
    assert _message(info.value) == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        "'tool_call_id'. The following tool_call_ids did not have response messages: call_002"
    )
    assert info.value.param == "messages.[3].role"


def test_tool_result_for_an_unknown_call_id_is_rejected(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = chat
    emu.script.extend([ModelAction.call(WEATHER)])
    _, messages = _tool_turn(client)
    messages[2]["tool_call_id"] = "call_999"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-5.5", messages=messages, tools=TOOLS)
    assert _message(info.value) == (
        "Invalid parameter: 'tool_call_id' of 'call_999' not found in 'tool_calls' of previous message."
    )


def test_openai_cached_tokens_follow_the_1024_plus_128k_rule(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = chat
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    system = {"role": "system", "content": "x" * 4600}
    usages = []
    for question in ("first question", "second question"):
        r = client.chat.completions.create(
            model="gpt-5.5", messages=[system, {"role": "user", "content": question}]
        )
        usages.append(r.usage)
    # '{"content":"' + 4600 x + '","role":"system"}' = 4630 bytes -> 1158 tokens shared (whole segments
    # only) -> 1024 + 128 = 1152; the prompt is 1158 + ceil(42 / 4) = 1169 tokens
    assert [(u.prompt_tokens, u.prompt_tokens_details.cached_tokens) for u in usages] == [
        (1169, 0),
        (1169, 1152),
    ]


def test_raw_arguments_are_emitted_verbatim(chat: tuple[OpenAIChatEmulator, openai.OpenAI]) -> None:
    emu, client = chat
    raw = '{ "city" :"Paris" }'
    emu.script.extend([ModelAction.call(ToolCallSpec("get_weather", raw_arguments=raw))])
    r, _ = _tool_turn(client)
    assert r.choices[0].message.tool_calls[0].function.arguments == raw


def test_max_tokens_stop_gives_finish_reason_length(chat: tuple[OpenAIChatEmulator, openai.OpenAI]) -> None:
    emu, client = chat
    emu.script.extend([ModelAction(text="cut", stop="max_tokens")])
    r = client.chat.completions.create(model="gpt-5.5", messages=[USER])
    assert r.choices[0].finish_reason == "length"


def test_both_routes_answer(chat: tuple[OpenAIChatEmulator, openai.OpenAI]) -> None:
    emu, _ = chat
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    with emu.client(base_url=emu.base_url) as bare:
        assert (
            bare.chat.completions.create(model="gpt-5.5", messages=[USER]).choices[0].message.content == "a"
        )
    with emu.client() as v1:
        assert v1.chat.completions.create(model="gpt-5.5", messages=[USER]).choices[0].message.content == "b"
    assert [r.path for r in emu.requests] == ["/chat/completions", "/v1/chat/completions"]


# -- vLLM / SGLang (§2.2) -------------------------------------------------------------------------------


def test_vllm_message_has_reasoning_and_its_alias() -> None:
    with _emulator("vllm", ModelAction.call(WEATHER, reasoning=THINK)) as emu, emu.client() as client:
        r, _ = _tool_turn(client)
        assert r.choices[0].message.model_extra == {"reasoning": THINK, "reasoning_content": THINK}


def test_vllm_input_reads_only_reasoning() -> None:
    answers = [ModelAction.answer("a"), ModelAction.answer("b"), ModelAction.answer("c")]
    with _emulator("vllm", *answers) as emu, emu.client() as client:
        sizes = []
        for extra in ({}, {"reasoning_content": "r" * 400}, {"reasoning": "r" * 400}):
            history = [USER, {"role": "assistant", "content": "18", **extra}, USER]
            r = client.chat.completions.create(model="qwen3", messages=history)
            assert r.usage is not None
            sizes.append(r.usage.prompt_tokens)
        assert (
            sizes[0] == sizes[1] and sizes[2] == sizes[0] + 104
        )  # ',"reasoning":"' + 400 r + '"' = 416 bytes


def test_vllm_cached_tokens_count_full_16_token_blocks() -> None:
    with _emulator("vllm", ModelAction.answer("a"), ModelAction.answer("b")) as emu, emu.client() as client:
        system = {"role": "system", "content": "x" * 200}
        usages = []
        for _ in range(2):
            r = client.chat.completions.create(model="qwen3", messages=[system, USER])
            usages.append(r.usage)
        # identical prompts of 230 + 45 bytes: 58 + 12 = 70 tokens shared; the last token is always
        # computed -> 69 -> 4 blocks
        assert [(u.prompt_tokens, u.prompt_tokens_details.cached_tokens) for u in usages] == [
            (70, 0),
            (70, 64),
        ]


def test_vllm_stream_carries_reasoning_deltas() -> None:
    with _emulator("vllm", ModelAction.answer("Sunny.", reasoning=THINK)) as emu, emu.client() as client:
        chunks = list(client.chat.completions.create(model="qwen3", messages=[USER], stream=True))
        reasoning = "".join(c.choices[0].delta.model_extra.get("reasoning", "") for c in chunks if c.choices)
        assert reasoning == THINK
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Sunny."


def test_sglang_message_has_reasoning_content() -> None:
    with _emulator("sglang", ModelAction.answer("Sunny.", reasoning=THINK)) as emu, emu.client() as client:
        r = client.chat.completions.create(model="qwen3", messages=[USER])
        assert r.choices[0].message.model_extra == {"reasoning_content": THINK}


# -- streaming ---------------------------------------------------------------------------------------------


def test_deepseek_stream_sends_reasoning_before_tool_calls_and_usage_last(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.call(WEATHER, reasoning=THINK)])
    stream = client.chat.completions.create(
        model="deepseek-v4-pro",
        messages=[USER],
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    kinds = []
    for c in chunks[:-1]:
        delta = c.choices[0].delta
        kinds.append(
            "reasoning" if delta.model_extra.get("reasoning_content") else "tool" if delta.tool_calls else "-"
        )
    first_tool = kinds.index("tool")
    assert set(kinds[1:first_tool]) == {"reasoning"} and "reasoning" not in kinds[first_tool:]
    reasoning = "".join(c.choices[0].delta.model_extra.get("reasoning_content", "") for c in chunks[:-1])
    arguments = "".join(
        (c.choices[0].delta.tool_calls or [])[0].function.arguments or ""  # type: ignore[union-attr]
        for c in chunks[:-1]
        if c.choices[0].delta.tool_calls
    )
    assert (reasoning, arguments) == (THINK, '{"city":"Paris"}')
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_extra == {"prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 46}


def test_stream_without_include_usage_has_no_usage_chunk(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = chat
    emu.script.extend([ModelAction.answer("hi")])
    chunks = list(client.chat.completions.create(model="gpt-5.5", messages=[USER], stream=True))
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"


# -- faults ------------------------------------------------------------------------------------------------


def test_rate_limited_fault_raises_rate_limit_error(
    deepseek: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.answer("later")])
    emu.inject(emu.rate_limited())
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="deepseek-v4-pro", messages=[USER])
    assert emu.script.taken == 0
    assert client.chat.completions.create(model="deepseek-v4-pro", messages=[USER]).choices[
        0
    ].message.content == ("later")


def test_server_error_fault_raises_internal_server_error(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = chat
    emu.inject(emu.server_error())
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-5.5", messages=[USER])


def test_truncated_stream_raises_mid_iteration(deepseek: tuple[OpenAIChatEmulator, openai.OpenAI]) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.answer("Sunny in Paris today.", reasoning=THINK)])
    emu.inject(Fault.truncate_stream(after_events=3))
    seen = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(model="deepseek-v4-pro", messages=[USER], stream=True):
            seen.append(chunk)
    assert len(seen) == 3


def test_transform_rewrites_the_completion() -> None:
    def rename(body: dict[str, Any]) -> dict[str, Any]:
        body["choices"][0]["message"]["content"] = "rewritten"
        return body

    with OpenAIChatEmulator([ModelAction.answer("x")], transform=rename) as emu, emu.client() as client:
        assert (
            client.chat.completions.create(model="gpt-5.5", messages=[USER]).choices[0].message.content
            == "rewritten"
        )


def test_fixture_clients_talk_to_their_emulators(
    deepseek_emulator: OpenAIChatEmulator,
    deepseek_client: openai.OpenAI,
    vllm_emulator: OpenAIChatEmulator,
    vllm_client: openai.OpenAI,
) -> None:
    deepseek_emulator.script.extend([ModelAction.answer("ds", reasoning="r")])
    vllm_emulator.script.extend([ModelAction.answer("vl", reasoning="r")])
    ds = deepseek_client.chat.completions.create(model="deepseek-v4-pro", messages=[USER]).choices[0].message
    vl = vllm_client.chat.completions.create(model="qwen3", messages=[USER]).choices[0].message
    assert (ds.content, ds.model_extra) == ("ds", {"reasoning_content": "r"})
    assert (vl.content, vl.model_extra) == ("vl", {"reasoning": "r", "reasoning_content": "r"})


def test_clear_cache_forgets_persisted_units(deepseek: tuple[OpenAIChatEmulator, openai.OpenAI]) -> None:
    emu, client = deepseek
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    client.chat.completions.create(model="deepseek-v4-pro", messages=[USER])
    emu.clear_cache()
    r = client.chat.completions.create(model="deepseek-v4-pro", messages=[USER])
    assert r.usage is not None and r.usage.model_extra is not None
    assert r.usage.model_extra["prompt_cache_hit_tokens"] == 0


# -- model aliases (https://platform.openai.com/docs/models/gpt-5) -----------------------------------------


def test_the_alias_table_is_openais_and_cites_its_source() -> None:
    from reasonstate.testing import openai as family
    from reasonstate.testing import openai_chat as module

    assert module.MODEL_ALIASES is family.MODEL_ALIASES
    assert module.MODEL_ALIASES["gpt-5"] == "gpt-5-2025-08-07"
    assert module.__doc__ is not None and "https://platform.openai.com/docs/models/gpt-5" in module.__doc__


@pytest.mark.parametrize(
    ("alias", "dated"), [("gpt-5", "gpt-5-2025-08-07"), ("gpt-5-mini", "gpt-5-mini-2025-08-07")]
)
def test_openai_dialect_answers_an_alias_with_its_dated_id(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI], alias: str, dated: str
) -> None:
    emu, client = chat
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    raw = client.chat.completions.with_raw_response.create(model=alias, messages=[USER])
    assert raw.http_response.json()["model"] == dated
    assert raw.parse().model == dated
    chunks = list(
        client.chat.completions.create(
            model=alias, messages=[USER], stream=True, stream_options={"include_usage": True}
        )
    )
    assert {c.model for c in chunks} == {dated}


@pytest.mark.parametrize("name", ["gpt-5-2025-08-07", "gpt-5.5"])
def test_openai_dialect_echoes_a_dated_id_unchanged(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI], name: str
) -> None:
    emu, client = chat
    emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
    assert client.chat.completions.create(model=name, messages=[USER]).model == name
    assert {c.model for c in client.chat.completions.create(model=name, messages=[USER], stream=True)} == {
        name
    }


def test_other_dialects_have_no_default_aliases_but_take_the_constructors() -> None:
    extra = {"deepseek-latest": "deepseek-v4-pro"}
    # vLLM serves any name (no table), so ``gpt-5`` shows that no OpenAI alias is resolved there
    with _emulator("vllm", *[ModelAction.answer("a")] * 3, aliases=extra) as emu, emu.client() as client:
        models = [
            client.chat.completions.create(model=m, messages=[USER]).model
            for m in ("gpt-5", "deepseek-latest", "deepseek-v4-pro")
        ]
    assert models == ["gpt-5", "deepseek-v4-pro", "deepseek-v4-pro"]


def test_openai_dialect_alias_and_dated_id_share_the_prompt_cache(
    chat: tuple[OpenAIChatEmulator, openai.OpenAI],
) -> None:
    emu, client = chat
    system = {"role": "system", "content": "x" * 4600}

    def ask(model: str, question: str) -> int:
        emu.script.extend([ModelAction.answer("ok")])
        r = client.chat.completions.create(
            model=model, messages=[system, {"role": "user", "content": question}]
        )
        assert r.usage is not None and r.usage.prompt_tokens_details is not None
        return r.usage.prompt_tokens_details.cached_tokens or 0

    assert ask("gpt-5", "first question") == 0
    assert ask("gpt-5-2025-08-07", "second question") == 1152  # see the 1024 + 128k test above
    assert ask("gpt-5", "third question") == 1152
    assert ask("gpt-5-mini", "second question") == 0  # another model has a cache of its own


def test_deepseek_units_of_an_alias_are_its_models() -> None:
    with _emulator("deepseek", aliases={"deepseek-latest": "deepseek-v4-pro"}) as emu, emu.client() as client:
        emu.script.extend([ModelAction.answer("a"), ModelAction.answer("b")])
        client.chat.completions.create(model="deepseek-latest", messages=[USER])
        r = client.chat.completions.create(model="deepseek-v4-pro", messages=[USER])
    assert r.usage is not None and r.usage.model_extra is not None
    assert r.usage.model_extra["prompt_cache_hit_tokens"] == r.usage.prompt_tokens
