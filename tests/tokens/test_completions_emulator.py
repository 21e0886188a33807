"""VLLMCompletionsEmulator through the real openai SDK: token-id prompts, token ids back, block cache hits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reasonstate.testing.completions import ScriptedCompletion, VLLMCompletionsEmulator
from reasonstate.tokens import ChatTemplateRenderer

openai = pytest.importorskip("openai")

IM_END = 248046
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
FOLLOW_UP = [{"role": "user", "content": "And 3+3?"}]


@pytest.fixture
def emulator(qwen: ChatTemplateRenderer) -> Iterator[VLLMCompletionsEmulator]:
    with VLLMCompletionsEmulator(codec=qwen, eos_token_ids=[IM_END]) as emu:
        yield emu


def _client(emu: VLLMCompletionsEmulator) -> Any:
    return openai.OpenAI(base_url=emu.base_url + "/v1", api_key="k", max_retries=0)


def test_token_id_prompt_returns_text_and_token_ids(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add("Simple.\n</think>\n\n4<|im_end|>")
    prompt = qwen.encode(qwen.render_text(QUESTION))
    response = _client(emulator).completions.create(
        model="qwen3.6", prompt=prompt, max_tokens=64, extra_body={"return_token_ids": True}
    )
    choice = response.choices[0]
    assert choice.text == "Simple.\n</think>\n\n4"  # the end-of-sequence token is not printed
    assert choice.finish_reason == "stop"
    extra = choice.model_extra or {}
    assert extra["token_ids"] == qwen.encode("Simple.\n</think>\n\n4<|im_end|>")
    assert extra["prompt_token_ids"] == prompt
    assert emulator.server.requests[0].json()["prompt"] == prompt


def test_max_tokens_cuts_the_completion_with_finish_reason_length(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add("Simple arithmetic: two plus two.\n</think>\n\n4<|im_end|>")
    response = _client(emulator).completions.create(
        model="m",
        prompt=qwen.encode(qwen.render_text(QUESTION)),
        max_tokens=3,
        extra_body={"return_token_ids": True},
    )
    choice = response.choices[0]
    assert (choice.text, choice.finish_reason) == ("Simple arithmetic:", "length")
    assert len((choice.model_extra or {})["token_ids"]) == 3
    assert response.usage.completion_tokens == 3


def test_token_ids_are_only_returned_when_asked(emulator: VLLMCompletionsEmulator) -> None:
    emulator.add([1, 2, IM_END])
    response = _client(emulator).completions.create(model="m", prompt=[5, 6, 7], max_tokens=8)
    assert "token_ids" not in (response.choices[0].model_extra or {})


def test_cached_tokens_count_full_blocks_of_16_only(emulator: VLLMCompletionsEmulator) -> None:
    emulator.add([900] * 10, [901] * 5)
    client = _client(emulator)
    first = client.completions.create(model="m", prompt=list(range(1000, 1040)), max_tokens=64)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    # 40 prompt + 10 sampled tokens: blocks of tokens[0:49] hold KV, so 3 full blocks (48 tokens) are cached
    second = client.completions.create(
        model="m", prompt=[*range(1000, 1040), *[900] * 10, 7, 8, 9], max_tokens=64
    )
    assert second.usage.prompt_tokens_details.cached_tokens == 48


def test_a_changed_early_token_invalidates_every_later_block(emulator: VLLMCompletionsEmulator) -> None:
    emulator.add([900], [901])
    client = _client(emulator)
    client.completions.create(model="m", prompt=list(range(1000, 1064)), max_tokens=8)
    changed = [*range(1000, 1020), 5, *range(1021, 1064)]  # token 20 differs: block 1 onwards misses
    again = client.completions.create(model="m", prompt=changed, max_tokens=8)
    assert again.usage.prompt_tokens_details.cached_tokens == 16


def test_bridged_prompt_hits_the_cache_and_the_rerendered_one_does_not(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    reasoning = "The user asks for two plus two. Adding two and two gives four; nothing else is needed here."
    completion = reasoning + "\n</think>\n\n4<|im_end|>"
    emulator.add(completion, "6<|im_end|>", completion, "6<|im_end|>")
    client = _client(emulator)
    prompt = qwen.encode(qwen.render_text(QUESTION))
    first = client.completions.create(
        model="m", prompt=prompt, max_tokens=256, extra_body={"return_token_ids": True}
    )
    completion_ids = (first.choices[0].model_extra or {})["token_ids"]

    bridged = qwen.bridge_to_next_turn(prompt, completion_ids, FOLLOW_UP)
    assert bridged is not None and bridged.token_ids is not None
    hit = client.completions.create(model="m", prompt=list(bridged.token_ids), max_tokens=8)
    shared = len(prompt) + len(completion_ids) - 1  # the last sampled token has no KV yet
    assert (len(prompt), len(completion_ids)) == (17, 26)
    assert hit.usage.prompt_tokens_details.cached_tokens == shared // 16 * 16 == 32

    emulator.reset_prefix_cache()
    client.completions.create(model="m", prompt=prompt, max_tokens=256)  # warm the same first turn again
    parsed = qwen.parse_response(completion_ids, prompt=qwen.decode(prompt))
    rerendered = qwen.encode(qwen.render_text([*QUESTION, parsed.message, *FOLLOW_UP]))
    miss = client.completions.create(model="m", prompt=rerendered, max_tokens=8)
    # default flags drop the reasoning from history at token 15: not even the first block hits
    assert miss.usage.prompt_tokens_details.cached_tokens == 0


def test_text_prompt_without_a_codec_is_a_400(qwen: ChatTemplateRenderer) -> None:
    with VLLMCompletionsEmulator([[1]]) as emu, pytest.raises(openai.BadRequestError) as info:
        _client(emu).completions.create(model="m", prompt="hello", max_tokens=4)
    assert info.value.status_code == 400
    assert emu.served == []


def test_scripted_token_ids_without_codec_are_served_with_empty_text() -> None:
    with VLLMCompletionsEmulator([ScriptedCompletion(token_ids=(7, 8), finish_reason="stop")]) as emu:
        response = _client(emu).completions.create(
            model="m", prompt=[1, 2], max_tokens=4, extra_body={"return_token_ids": True}
        )
    assert response.choices[0].text == ""
    assert (response.choices[0].model_extra or {})["token_ids"] == [7, 8]
