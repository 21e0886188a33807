"""The seed's findings, reproduced on the real Qwen3.6 template and tokenizer.

Conversation: ``user: What is 2+2?``; the prompt ends in ``<|im_start|>assistant\\n<think>\\n`` (70 chars,
17 tokens); the model answers; the client adds ``user: And 3+3?`` and re-renders.
"""

from __future__ import annotations

import pytest

from reasonstate.tokens import ChatTemplateRenderer, InvalidUTF8, check_roundtrip
from reasonstate.tokens.matrix import TOOLS, _coerce, _reserialize

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
FOLLOW_UP = [{"role": "user", "content": "And 3+3?"}]
ANSWER = "Simple arithmetic.\n</think>\n\n4<|im_end|>"
PROMPT_CHARS, PROMPT_TOKENS = 70, 17


def test_prompt_length_the_offsets_below_are_measured_from(qwen: ChatTemplateRenderer) -> None:
    prompt = qwen.render_text(QUESTION)
    assert (len(prompt), len(qwen.encode(prompt))) == (PROMPT_CHARS, PROMPT_TOKENS)


def test_default_flags_new_user_turn_drops_historical_thinking(qwen: ChatTemplateRenderer) -> None:
    result = check_roundtrip(qwen, QUESTION, ANSWER, FOLLOW_UP)
    # the break is the first reasoning character: "<think>\n" itself is gone from the history
    assert result.string_offset == 62 == PROMPT_CHARS - len("<think>\n")
    assert result.string_context == (
        "tart|>assistant\n<think>\nSimple a",
        "tart|>assistant\n4<|im_end|>\n<|im",
    )
    assert result.token_offset == 15 == PROMPT_TOKENS - 2
    assert result.previous_ids is not None and result.next_ids is not None
    assert qwen.decode(result.previous_ids[15:17]) == "<think>\n"
    assert qwen.decode(result.next_ids[15:17]) == "4<|im_end|>"
    assert (result.string_ok, result.token_ok) == (False, False)


def test_preserve_thinking_fixes_the_new_user_turn(qwen: ChatTemplateRenderer) -> None:
    result = check_roundtrip(qwen, QUESTION, ANSWER, FOLLOW_UP, preserve_thinking=True)
    assert (result.string_ok, result.token_ok) == (True, True)
    assert result.next_text[len(result.previous_text) :] == (
        "\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_extra_blank_lines_at_the_end_of_reasoning_are_trimmed(qwen: ChatTemplateRenderer) -> None:
    completion = "Simple arithmetic.\n\n\n</think>\n\n4<|im_end|>"
    result = check_roundtrip(qwen, QUESTION, completion, FOLLOW_UP, preserve_thinking=True)
    assert result.string_offset == 89 == PROMPT_CHARS + len("Simple arithmetic.\n")
    assert result.string_context == (
        "ple arithmetic.\n\n\n</think>\n\n4<|i",
        "ple arithmetic.\n</think>\n\n4<|im_",
    )
    assert result.token_offset == 20
    assert result.token_context == (
        "\n|Simple| arithmetic|.|\n\n\n|</think>|\n\n|4",
        "\n|Simple| arithmetic|.|\n|</think>|\n\n|4",
    )


def test_truncated_reasoning_gets_a_synthesized_close_tag_on_rerender(qwen: ChatTemplateRenderer) -> None:
    result = check_roundtrip(qwen, QUESTION, "Simple arithmetic", FOLLOW_UP, preserve_thinking=True)
    assert result.parsed.reasoning_truncated
    # the model never wrote "</think>": the template writes it, and an empty answer, after its last token
    assert result.next_text[len(result.previous_text) :].startswith(
        "\n</think>\n\n<|im_end|>\n<|im_start|>user"
    )


def test_truncated_reasoning_ending_in_blank_lines_breaks_even_with_preserve_thinking(
    qwen: ChatTemplateRenderer,
) -> None:
    result = check_roundtrip(qwen, QUESTION, "Simple arithmetic.\n\n", FOLLOW_UP, preserve_thinking=True)
    assert result.string_offset == PROMPT_CHARS + len("Simple arithmetic.\n") == 89
    assert result.next_text[88:98] == "\n</think>\n"


def test_truncated_reasoning_breaks_with_default_flags(qwen: ChatTemplateRenderer) -> None:
    result = check_roundtrip(qwen, QUESTION, "Simple arithmetic", FOLLOW_UP)
    assert (result.string_offset, result.token_offset) == (63, 15)


FLIGHTS = [{"role": "user", "content": "Direct flights from Paris under 500?"}]
FLIGHT_CALL = (
    "Search with filters.\n</think>\n\n<tool_call>\n<function=search_flights>\n<parameter=origin>\nPAR\n"
    '</parameter>\n<parameter=filters>\n{"max_price":500,"direct":true}\n</parameter>\n</function>\n'
    "</tool_call><|im_end|>"
)
RESULT = [{"role": "tool", "tool_call_id": "call_0", "content": "2 flights"}]


def test_raw_xml_parameters_roundtrip_exactly(qwen: ChatTemplateRenderer) -> None:
    result = check_roundtrip(qwen, FLIGHTS, FLIGHT_CALL, RESULT, list(TOOLS))
    assert (result.string_ok, result.token_ok) == (True, True)


@pytest.mark.parametrize("rewrite", [_reserialize, _coerce], ids=["reserialized", "coerced"])
def test_reserialized_arguments_break_the_prefix(qwen: ChatTemplateRenderer, rewrite: object) -> None:
    result = check_roundtrip(qwen, FLIGHTS, FLIGHT_CALL, RESULT, list(TOOLS), history_rewrite=rewrite)  # type: ignore[arg-type]
    assert result.string_offset == 1612
    assert result.string_context == ('s>\n{"max_price":500,"direct":tru', 's>\n{"max_price": 500, "direct": ')
    assert result.token_offset == 387


def test_deepseek_reserialized_arguments_break_the_prefix(deepseek: ChatTemplateRenderer) -> None:
    completion = (
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city":"Paris","days":3}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    )
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    kept = check_roundtrip(deepseek, messages, completion, RESULT, list(TOOLS))
    assert (kept.string_ok, kept.token_ok) == (True, True)
    redone = check_roundtrip(
        deepseek, messages, completion, RESULT, list(TOOLS), history_rewrite=_reserialize
    )
    assert (redone.string_offset, redone.token_offset) == (137, 16)
    assert redone.string_context == ('ol▁sep｜>{"city":"Paris","days":3', 'ol▁sep｜>{"city": "Paris", "days"')


def test_completion_ids_are_the_models_tokens_not_a_reencoding(qwen: ChatTemplateRenderer) -> None:
    # a model may sample a non-canonical tokenization; re-rendering re-tokenizes it canonically
    tok = qwen.tokenizer
    assert tok is not None
    split = [*qwen.encode("Sim"), *qwen.encode("ple"), *qwen.encode(" arithmetic.\n</think>\n\n4<|im_end|>")]
    assert qwen.decode(split) == ANSWER and split != qwen.encode(ANSWER)
    result = check_roundtrip(qwen, QUESTION, split, FOLLOW_UP, preserve_thinking=True)
    assert (result.string_ok, result.token_offset) == (True, PROMPT_TOKENS)


def test_completion_ids_that_are_not_utf8_are_a_typed_error(qwen: ChatTemplateRenderer) -> None:
    tok = qwen.tokenizer
    assert tok is not None
    lead_byte = next(i for i in range(300) if tok.token_bytes(i) == b"\xf0")
    with pytest.raises(InvalidUTF8):
        check_roundtrip(qwen, QUESTION, [*qwen.encode("Simple"), lead_byte], FOLLOW_UP)
