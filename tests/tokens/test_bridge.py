"""bridge_to_next_turn: ``B[:len(p) + len(c)] == p + c``, whatever the model wrote and wherever it stopped.

(Qwen and DeepSeek here: no stop token of theirs is rewritten. GPT-OSS's sampled ``<|return|>`` is written
``<|end|>``, so there only ``B[:len(p) + len(c) - 1] == (p + c)[:-1]``: see ``test_bridge_direct.py``.)

That equation holds by construction (the bridge copies ``p + c``); what it appends is checked here against
literal text, with prompts rendered and tokenized directly (``direct.py``) and completions written by hand.
Whether the whole bridged prompt is what the template renders is checked against a direct jinja2 render in
``test_bridge_direct.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonstate.tokens import CARRIED, STRUCTURE, ChatTemplateRenderer, ToolCallParseError
from reasonstate.tokens.families import CallSpec, ModelTurn
from reasonstate.tokens.matrix import TOOLS
from reasonstate.tokens.vocab import decode_lossy

from . import direct

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
FOLLOW_UP = [{"role": "user", "content": "And 3+3?"}]


def test_bridge_appends_only_the_new_turn_and_the_generation_prompt(qwen: ChatTemplateRenderer) -> None:
    p = direct.qwen_ids(direct.render("qwen3.6", QUESTION))
    c = direct.qwen_ids("Simple arithmetic.\n</think>\n\n4<|im_end|>")
    bridged = qwen.bridge_to_next_turn(p, c, FOLLOW_UP)
    assert bridged is not None and bridged.token_ids is not None
    assert bridged.token_ids[: len(p) + len(c)] == tuple(p + c)
    assert direct.qwen_text(bridged.token_ids[len(p) + len(c) :]) == (
        "\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_bridge_message_indices_mark_carried_new_and_structure_tokens(qwen: ChatTemplateRenderer) -> None:
    p = direct.qwen_ids(direct.render("qwen3.6", QUESTION))
    c = direct.qwen_ids("Simple.\n</think>\n\n4<|im_end|>")
    bridged = qwen.bridge_to_next_turn(p, c, FOLLOW_UP)
    assert bridged is not None and bridged.token_ids is not None and bridged.message_indices is not None
    n = len(p) + len(c)
    assert bridged.message_indices[:n] == (CARRIED,) * n
    owned = [t for t, i in zip(bridged.token_ids, bridged.message_indices, strict=True) if i == 0]
    assert direct.qwen_text(owned) == "And 3+3?"
    assert set(bridged.message_indices[n:]) == {0, STRUCTURE}


def test_bridge_closes_a_truncated_completion_with_the_turn_close_token(qwen: ChatTemplateRenderer) -> None:
    p = direct.qwen_ids(direct.render("qwen3.6", QUESTION))
    c = direct.qwen_ids("Simple arithmetic")  # max_tokens: no </think>, no <|im_end|>
    bridged = qwen.bridge_to_next_turn(p, c, FOLLOW_UP)
    assert bridged is not None and bridged.token_ids is not None
    assert bridged.token_ids[: len(p) + len(c)] == tuple(p + c)
    assert bridged.token_ids[len(p) + len(c)] == direct.qwen_special("<|im_end|>")  # no synthesized </think>
    assert direct.qwen_text(bridged.token_ids).endswith(
        "Simple arithmetic<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_bridge_refuses_assistant_messages(qwen: ChatTemplateRenderer) -> None:
    p = direct.qwen_ids(direct.render("qwen3.6", QUESTION))
    assistant = {"role": "assistant", "content": "4"}
    assert qwen.bridge_to_next_turn(p, direct.qwen_ids("4<|im_end|>"), [assistant]) is None


def test_bridge_of_tool_results_matches_the_templates_tool_turn(qwen: ChatTemplateRenderer) -> None:
    messages = [{"role": "user", "content": "Weather in Paris and Rome?"}]
    prompt = direct.render("qwen3.6", messages, list(TOOLS))
    completion = (  # Qwen3.6's output format, written by hand (template L53, L105-L130)
        "Two calls.\n</think>\n\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>"
    )
    results = [
        {"role": "tool", "tool_call_id": "call_0", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_1", "content": "Rainy"},
    ]
    p, c = direct.qwen_ids(prompt), direct.qwen_ids(completion)
    bridged = qwen.bridge_to_next_turn(p, c, results, list(TOOLS))
    assert bridged is not None and bridged.token_ids is not None
    assert direct.qwen_text(bridged.token_ids[len(p) + len(c) :]) == (
        "\n<|im_start|>user\n<tool_response>\nSunny\n</tool_response>\n<tool_response>\nRainy\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_deepseek_bridge_after_truncation_appends_end_of_sentence(deepseek: ChatTemplateRenderer) -> None:
    p = direct.deepseek_ids(direct.render("deepseek-v3.1", QUESTION, thinking=True))
    c = direct.deepseek_ids("Let me add")
    bridged = deepseek.bridge_to_next_turn(p, c, FOLLOW_UP, thinking=True)
    assert bridged is not None and bridged.token_ids is not None
    assert bridged.token_ids[: len(p) + len(c)] == tuple(p + c)
    assert bridged.token_ids[len(p) + len(c)] == direct.deepseek_special("<｜end▁of▁sentence｜>")
    assert direct.deepseek_text(bridged.token_ids[len(p) :]) == (
        "Let me add<｜end▁of▁sentence｜><｜User｜>And 3+3?<｜Assistant｜><think>"
    )


def test_string_level_bridge_for_glm_reuses_the_stop_header(glm: ChatTemplateRenderer) -> None:
    prompt = direct.render("glm-4.6", QUESTION)
    completion = "\n<think>Add.</think>\n4<|user|>"  # GLM stops on the next role's header
    bridged = glm.bridge_text(prompt, completion, FOLLOW_UP)
    assert bridged == prompt + completion + "\nAnd 3+3?<|assistant|>"


# -- property: 64 randomized multi-turn rollouts per model ----------------------------------------------
# The prefix equation is true by construction; these rollouts (completions from the family writers, cut
# anywhere) guard against the bridge crashing or appending nothing. The oracle is test_bridge_direct.py.

_ALPHABET = st.sampled_from([*"abcxyz .,:;!?{}\"'\t\n", "é", "中文", "🙂", "  ", "\n\n", "1.5", "true"])
_TEXT = st.lists(_ALPHABET, max_size=12).map("".join)
_CALL = st.builds(
    lambda name, city, days: CallSpec(name, {"city": city, "days": days}),
    st.sampled_from(["get_weather", "search_flights"]),
    _TEXT,
    st.integers(0, 9),
)
_TURN = st.builds(
    ModelTurn,
    reasoning=st.one_of(st.none(), _TEXT),
    content=_TEXT,
    calls=st.lists(_CALL, max_size=2).map(tuple),
    finished=st.booleans(),
)


def _rollout(renderer: ChatTemplateRenderer, data: st.DataObject, **kwargs: Any) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": data.draw(_TEXT)},
    ]
    tools = list(TOOLS)
    prompt_text = renderer.render_text(messages, tools, True, **kwargs)
    p = renderer.encode(prompt_text)
    for _ in range(data.draw(st.integers(1, 4), label="turns")):
        turn = data.draw(_TURN, label="turn")
        state = renderer.family.prompt_state(_tail(renderer, p))
        c = renderer.encode(renderer.family.write(turn, state))
        if not turn.finished:  # max_tokens lands on any token, even inside a multi-byte character
            c = c[: data.draw(st.integers(0, len(c)), label="cut")]
        new_messages = _next_messages(renderer, p, c, turn, data)
        bridged = renderer.bridge_to_next_turn(p, c, new_messages, tools, **kwargs)
        assert bridged is not None and bridged.token_ids is not None and bridged.message_indices is not None
        assert bridged.token_ids[: len(p) + len(c)] == tuple(p + c)
        assert len(bridged.message_indices) == len(bridged.token_ids)
        appended = bridged.token_ids[len(p) + len(c) :]
        assert appended, "a bridge always appends at least the new turn"
        p = list(bridged.token_ids)


def _tail(renderer: ChatTemplateRenderer, ids: list[int]) -> str:
    assert renderer.tokenizer is not None
    return decode_lossy(renderer.tokenizer, ids[-8:])


def _next_messages(
    renderer: ChatTemplateRenderer, p: list[int], c: list[int], turn: ModelTurn, data: st.DataObject
) -> list[dict[str, Any]]:
    if turn.finished and turn.calls:
        try:
            parsed = renderer.parse_response(c, prompt=_tail(renderer, p))
        except ToolCallParseError:
            parsed = None
        if parsed is not None and parsed.tool_calls:
            return [
                {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": data.draw(_TEXT)}
                for call in parsed.tool_calls
            ]
    return [{"role": "user", "content": data.draw(_TEXT)}]


@settings(max_examples=64)  # slow examples (whole sessions or rollouts): capped below the profile's 100
@given(data=st.data())
def test_bridge_keeps_the_exact_prefix_over_random_rollouts_qwen(
    qwen: ChatTemplateRenderer, data: st.DataObject
) -> None:
    _rollout(qwen, data)


@settings(max_examples=64)  # slow examples (whole sessions or rollouts): capped below the profile's 100
@given(data=st.data())
def test_bridge_keeps_the_exact_prefix_over_random_rollouts_deepseek_v4(
    deepseek: ChatTemplateRenderer, data: st.DataObject
) -> None:
    _rollout(deepseek, data, thinking=True)


@pytest.mark.parametrize("flags", [{}, {"preserve_thinking": True}])
def test_rerender_path_breaks_where_the_bridge_does_not(
    qwen: ChatTemplateRenderer, flags: dict[str, Any]
) -> None:
    # the same exchange both ways: a client's re-render (direct) after the parsed message vs the bridge
    prompt = direct.render("qwen3.6", QUESTION, **flags)
    completion = "Simple arithmetic.\n\n\n</think>\n\n4<|im_end|>"
    message = {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic.\n\n\n"}
    rerendered = direct.qwen_ids(direct.render("qwen3.6", [*QUESTION, message, *FOLLOW_UP], **flags))
    p, c = direct.qwen_ids(prompt), direct.qwen_ids(completion)
    bridged = qwen.bridge_to_next_turn(p, c, FOLLOW_UP, **flags)
    assert bridged is not None and bridged.token_ids is not None
    assert rerendered[: len(p) + len(c)] != p + c
    assert list(bridged.token_ids[: len(p) + len(c)]) == p + c
