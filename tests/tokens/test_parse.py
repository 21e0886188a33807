"""parse_response: a partition on the close tag, never a strip; tool calls kept parsed and raw."""

from __future__ import annotations

import pytest

from reasonstate.tokens import ChatTemplateRenderer, InvalidUTF8, ToolCallParseError

from .conftest import WEATHER_TOOL

CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"  # noqa: E501


def test_reasoning_is_the_partition_before_the_close_tag_unstripped(qwen: ChatTemplateRenderer) -> None:
    parsed = qwen.parse_response("  Think.\n\n\n</think>\n\nAnswer.<|im_end|>")
    assert parsed.reasoning == "  Think.\n\n\n"
    assert parsed.content == "\n\nAnswer."
    assert parsed.reasoning + "</think>" + parsed.content + "<|im_end|>" == parsed.completion
    assert parsed.finished and not parsed.reasoning_truncated


def test_completion_without_close_tag_is_truncated_reasoning(qwen: ChatTemplateRenderer) -> None:
    parsed = qwen.parse_response("Day one could start")
    assert (parsed.reasoning, parsed.content, parsed.finished, parsed.reasoning_truncated) == (
        "Day one could start",
        "",
        False,
        True,
    )


def test_thinking_disabled_prompt_makes_everything_content(qwen: ChatTemplateRenderer) -> None:
    parsed = qwen.parse_response("4<|im_end|>", enable_thinking=False)
    assert (parsed.reasoning, parsed.content) == (None, "4")


def test_tool_call_kept_parsed_for_execution_and_raw_for_continuation(qwen: ChatTemplateRenderer) -> None:
    parsed = qwen.parse_response(f"Weather.\n</think>\n\n{CALL}<|im_end|>", tools=[WEATHER_TOOL])
    (call,) = parsed.tool_calls
    assert call.arguments == {"city": "Paris", "days": 3}
    assert call.raw == CALL
    assert call.raw_parameters == (("city", "Paris"), ("days", "3"))
    assert parsed.message["tool_calls"][0]["function"]["arguments"] == {"city": "Paris", "days": "3"}


def test_tool_call_cut_by_max_tokens_keeps_the_complete_parameters(qwen: ChatTemplateRenderer) -> None:
    cut = CALL[: CALL.index("<parameter=days>") + len("<parameter=days>\n")]
    parsed = qwen.parse_response(f"W.\n</think>\n\n{cut}", tools=[WEATHER_TOOL])
    (call,) = parsed.tool_calls
    assert (call.arguments, call.complete, parsed.finished) == ({"city": "Paris"}, False, False)


def test_tool_call_without_function_header_is_a_typed_error(qwen: ChatTemplateRenderer) -> None:
    with pytest.raises(ToolCallParseError) as info:
        qwen.parse_response("W.\n</think>\n\n<tool_call>\nget_weather(city=Paris)\n</tool_call><|im_end|>")
    assert info.value.raw == "<tool_call>\nget_weather(city=Paris)\n</tool_call>"


def test_unclosed_parameter_in_a_finished_call_is_a_typed_error(qwen: ChatTemplateRenderer) -> None:
    broken = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis</function>\n</tool_call>"
    with pytest.raises(ToolCallParseError, match="not closed"):
        qwen.parse_response(f"W.\n</think>\n\n{broken}<|im_end|>")


def test_deepseek_arguments_that_are_not_json_are_a_typed_error(deepseek: ChatTemplateRenderer) -> None:
    completion = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>city=Paris<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    )
    with pytest.raises(ToolCallParseError, match="not JSON"):
        deepseek.parse_response(completion)


def test_deepseek_keeps_the_argument_text_verbatim_in_history(deepseek: ChatTemplateRenderer) -> None:
    completion = (
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city":"Paris"}<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    )
    parsed = deepseek.parse_response(completion)
    assert parsed.tool_calls[0].arguments == {"city": "Paris"}
    assert parsed.message["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'


def test_completion_ids_cut_inside_a_character_are_invalid_utf8(qwen: ChatTemplateRenderer) -> None:
    tok = qwen.tokenizer
    assert tok is not None
    lead_byte = next(i for i in range(300) if tok.token_bytes(i) == b"\xf0")  # first byte of a 4-byte char
    with pytest.raises(InvalidUTF8) as info:
        qwen.parse_response([*qwen.encode("Answer: "), lead_byte])
    assert info.value.offset == len(b"Answer: ")
