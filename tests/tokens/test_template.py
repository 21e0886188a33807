"""Rendering is apply_chat_template's; token fields exist only with a tokenizer; bad input is typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from reasonstate.errors import ReasonStateError
from reasonstate.tokens import (
    STRUCTURE,
    ChatTemplateRenderer,
    Renderer,
    TemplateRenderError,
    TokenizerNotFound,
    TokenizerRequired,
    UnknownTemplateFamily,
    load_tokenizer,
    template_path,
)
from reasonstate.tokens.template import ChatTemplate

from .conftest import WEATHER_TOOL


def test_qwen_render_is_the_chatml_prompt_with_an_open_think_block(qwen: ChatTemplateRenderer) -> None:
    text = qwen.render_text([{"role": "user", "content": "What is 2+2?"}])
    assert text == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n"


def test_tojson_keeps_non_ascii_and_transformers_spacing(qwen: ChatTemplateRenderer) -> None:
    tool = {"type": "function", "function": {"name": "météo", "parameters": {}}}
    text = qwen.render_text([{"role": "user", "content": "x"}], tools=[tool])
    assert '\n{"type": "function", "function": {"name": "météo", "parameters": {}}}\n</tools>' in text


def test_tojson_accepts_transformers_keyword_arguments() -> None:
    template = ChatTemplate("{{ x | tojson(indent=2, sort_keys=True) }}|{{ y | tojson(ensure_ascii=True) }}")
    assert template.render([], x={"b": 1, "a": 2}, y="é") == '{\n  "a": 2,\n  "b": 1\n}|"\\u00e9"'


def test_trim_and_lstrip_blocks_and_loopcontrols_are_on() -> None:
    source = "{% for i in [1, 2, 3] %}\n    {% if i == 2 %}{% break %}{% endif %}\n{{ i }}\n{% endfor %}"
    assert ChatTemplate(source).render([]) == "1\n"


def test_strftime_now_uses_the_injected_clock() -> None:
    from datetime import datetime

    template = ChatTemplate("{{ strftime_now('%Y-%m-%d') }}", now=lambda: datetime(2025, 8, 5))
    assert template.render([]) == "2025-08-05"


def test_render_token_ids_encode_the_text_and_special_tokens_are_atomic(qwen: ChatTemplateRenderer) -> None:
    rendered = qwen.render([{"role": "user", "content": "hi"}])
    assert rendered.token_ids is not None
    assert rendered.token_ids[:3] == (248045, 846, 198)  # <|im_start|> user \n
    assert rendered.token_ids[-2:] == (248068, 198)  # <think> \n
    assert qwen.decode(rendered.token_ids) == rendered.text


def test_message_indices_attribute_each_token_and_mark_the_generation_prompt(
    qwen: ChatTemplateRenderer,
) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    rendered = qwen.render(messages)
    assert rendered.token_ids is not None and rendered.message_indices is not None
    assert len(rendered.message_indices) == len(rendered.token_ids)
    by_message = {
        k: qwen.decode(
            [t for t, i in zip(rendered.token_ids, rendered.message_indices, strict=True) if i == k]
        )
        for k in (0, 1, STRUCTURE)
    }
    assert by_message == {
        0: "Be brief.",
        1: "hi",
        STRUCTURE: (
            "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<think>\n"
        ),
    }


def test_message_indices_follow_a_message_whose_history_rendering_is_rewritten(
    qwen: ChatTemplateRenderer,
) -> None:
    # the past assistant turn loses its reasoning (default flags) but its content is still its own
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "reasoning_content": "greet back"},
        {"role": "user", "content": "bye"},
    ]
    rendered = qwen.render(messages)
    assert rendered.token_ids is not None and rendered.message_indices is not None
    owned = [
        qwen.decode([t]) for t, i in zip(rendered.token_ids, rendered.message_indices, strict=True) if i == 1
    ]
    assert "".join(owned) == "hello"


def test_chat_template_renderer_implements_the_renderer_protocol(qwen: ChatTemplateRenderer) -> None:
    assert isinstance(qwen, Renderer)


def test_string_level_renderer_has_no_token_fields(glm: ChatTemplateRenderer) -> None:
    rendered = glm.render([{"role": "user", "content": "hi"}])
    assert rendered.text == "[gMASK]<sop><|user|>\nhi<|assistant|>"
    assert rendered.token_ids is None and rendered.message_indices is None


def test_token_operation_on_string_level_renderer_is_a_typed_error(glm: ChatTemplateRenderer) -> None:
    with pytest.raises(TokenizerRequired):
        glm.encode("hi")
    with pytest.raises(TokenizerRequired):
        glm.bridge_to_next_turn([1], [2], [{"role": "user", "content": "x"}])


def test_unknown_tokenizer_name_is_tokenizer_not_found() -> None:
    with pytest.raises(TokenizerNotFound, match="unknown tokenizer 'llama-9'"):
        ChatTemplateRenderer.from_files(template_path("qwen3.6"), "llama-9")
    assert issubclass(TokenizerNotFound, ReasonStateError)
    with pytest.raises(TokenizerNotFound):
        load_tokenizer("gpt2")


def test_template_raise_exception_is_template_render_error(qwen: ChatTemplateRenderer) -> None:
    with pytest.raises(TemplateRenderError, match="No user query found in messages"):
        qwen.render_text([{"role": "system", "content": "only a system message"}])


def test_template_type_error_is_template_render_error(deepseek: ChatTemplateRenderer) -> None:
    # DeepSeek V3.1 concatenates arguments as a string: a dict does not fit the template
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    with pytest.raises(TemplateRenderError, match="TypeError"):
        deepseek.render_text(messages, tools=[WEATHER_TOOL])


def test_template_that_does_not_compile_is_template_render_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.jinja"
    path.write_text("{% for m in messages %}<function=example_function_name>")
    with pytest.raises(TemplateRenderError, match="cannot compile"):
        ChatTemplateRenderer.from_files(path)


def test_template_of_an_unknown_family_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "plain.jinja"
    path.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(UnknownTemplateFamily):
        ChatTemplateRenderer.from_files(path)
