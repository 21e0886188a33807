"""Chat Completions end to end (openai, deepseek, vllm, sglang dialects): the real ``openai`` SDK over real
HTTP against the strict emulator (docs/protocols.md §2, §3)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import attrs
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reasonstate as rs
from reasonstate.adapters import adapter_for
from reasonstate.adapters.openai_chat import DEEPSEEK, ChatAssembler, OpenAIChatAdapter
from reasonstate.cache.rules import predict_cache_read
from reasonstate.policies import CacheAware, Compress, Drop, Keep, KeepLast
from reasonstate.state import EventKind, ExecutionRecord, ReasoningPart, Records, Usage
from reasonstate.testing import Fault, ModelAction, ToolCallSpec
from reasonstate.testing.openai_chat import Dialect, OpenAIChatEmulator
from tests._snapshots import redigest
from tests.conftest import CLOCK, WEATHER

MODELS: dict[str, str] = {
    "openai": "gpt-5.5",
    "deepseek": "deepseek-v4-pro",
    "vllm": "qwen3",
    "sglang": "qwen3",
}
# long enough that the OpenAI dialect's prefix passes the 1,024-token minimum
SYSTEM = "You are a careful travel assistant. " + "Always check the weather before advising. " * 110
# odd spacing on purpose: the arguments must go back as the exact string received
PARIS = '{ "city" :  "Paris" }'
ROME = '{"city":"Rome"  }'
ROME_TIME = '{"city": "Rome"}'
R0 = "Two cities: call the weather tool for both, in parallel."
R1 = "Paris is mild. Check the local time in Rome too."
R2 = "I have everything; Rome is warmer."
ANSWER = "Rome is warmer (22C) than Paris (18C)."


def chain() -> list[ModelAction]:
    """reasoning → 2 parallel calls; reasoning → 1 call; reasoning → final answer."""
    return [
        ModelAction.call(
            ToolCallSpec("get_weather", raw_arguments=PARIS),
            ToolCallSpec("get_weather", raw_arguments=ROME),
            reasoning=R0,
        ),
        ModelAction.call(ToolCallSpec("get_time", raw_arguments=ROME_TIME), reasoning=R1),
        ModelAction.answer(ANSWER, reasoning=R2),
    ]


def follow_up(i: int) -> ModelAction:
    return ModelAction.answer(f"Follow-up answer {i}.", reasoning=f"Thinking about follow-up {i}. " * 6)


def session_on(emu: OpenAIChatEmulator, dialect: Dialect, **kw: Any) -> rs.Session:
    options: dict[str, Any] = {"system": SYSTEM, "tools": [WEATHER, CLOCK]}
    options.update(kw)
    return rs.Session(emu.client(), model=MODELS[dialect], dialect=dialect, **options)


def run_chain(session: rs.Session, question: str = "Paris or Rome: which is warmer?") -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"city": c.arguments["city"]} for c in reply.tool_calls})
    return reply


def body(emu: OpenAIChatEmulator, i: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(emu.requests[i].body)
    return data


def layers(session: rs.Session) -> tuple[Any, ...]:
    return (session.history, session.continuation, session.execution, session.state)


@pytest.fixture
def deepseek() -> Iterator[OpenAIChatEmulator]:
    with OpenAIChatEmulator(dialect="deepseek") as emu:
        yield emu


# the three assistant messages of chain() exactly as the DeepSeek emulator returns them
M0: dict[str, Any] = {
    "role": "assistant",
    "content": "",
    "reasoning_content": R0,
    "tool_calls": [
        {"id": "call_001", "type": "function", "function": {"name": "get_weather", "arguments": PARIS}},
        {"id": "call_002", "type": "function", "function": {"name": "get_weather", "arguments": ROME}},
    ],
}
M1: dict[str, Any] = {
    "role": "assistant",
    "content": "",
    "reasoning_content": R1,
    "tool_calls": [
        {"id": "call_003", "type": "function", "function": {"name": "get_time", "arguments": ROME_TIME}}
    ],
}
M2: dict[str, Any] = {"role": "assistant", "content": ANSWER, "reasoning_content": R2}
TOOL_RESULTS = [
    {"role": "tool", "tool_call_id": "call_001", "content": '{"city":"Paris"}'},
    {"role": "tool", "tool_call_id": "call_002", "content": '{"city":"Rome"}'},
    {"role": "tool", "tool_call_id": "call_003", "content": '{"city":"Rome"}'},
]
SYS = {"role": "system", "content": SYSTEM}
Q0 = {"role": "user", "content": "Paris or Rome: which is warmer?"}


def turn0(m2: dict[str, Any]) -> list[dict[str, Any]]:
    return [Q0, M0, *TOOL_RESULTS[:2], M1, TOOL_RESULTS[2], m2]


# -- byte-exact replay inside the tool chain (docs/protocols.md §3.3) --------------------------------------


def test_arguments_and_reasoning_content_go_back_byte_exact_through_a_parallel_chain(
    deepseek: OpenAIChatEmulator,
) -> None:
    """Pain point: langchain-ai/langchain#37713 (reasoning_content stored but not sent back).
    Pain point: pydantic-ai 2.68 on stubs (tool-call argument strings re-serialized on DeepSeek).
    """
    # langchain-ai/langchain#37713, continuedev/continue#10193: reasoning_content stored but not sent back
    deepseek.script.extend(chain())
    session = session_on(deepseek, "deepseek")
    run_chain(session)
    assert body(deepseek, 1)["messages"] == [SYS, Q0, M0, *TOOL_RESULTS[:2]]
    assert body(deepseek, 2)["messages"] == [SYS, Q0, M0, *TOOL_RESULTS[:2], M1, TOOL_RESULTS[2]]
    steps = session.history.turns[0].steps
    # each message is its parts rendered byte for byte, so no payload is kept, only who produced it
    # (issue 21); the requests carry the response messages' bytes unchanged (the hand-written M0, M1)
    assert [(c.bare, c.vendor, c.api, c.model) for s in steps for c in s.continuation] == [
        (True, "deepseek", "chat", MODELS["deepseek"])
    ] * 3
    assert session.continuation == ()
    wire = [json.dumps(m, separators=(",", ":")).encode() for m in (M0, M1)]
    assert deepseek.requests[1].body.count(wire[0]) == 1
    assert deepseek.requests[2].body.count(wire[0]) == 1
    assert deepseek.requests[2].body.count(wire[1]) == 1
    assert [c.raw_arguments for c in steps[0].tool_calls] == [PARIS, ROME]
    assert dict(steps[0].tool_calls[0].arguments) == {"city": "Paris"}


def test_parallel_tool_results_are_sent_in_the_models_declared_order(deepseek: OpenAIChatEmulator) -> None:
    deepseek.script.extend(chain())
    session = session_on(deepseek, "deepseek")
    first, second = session.send("Paris or Rome?").tool_calls
    session.send_tool_results({second.id: {"t": 22, "city": "Rome"}, first.id: {"city": "Paris", "t": 18}})
    assert body(deepseek, 1)["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "call_001", "content": '{"city":"Paris","t":18}'},
        {"role": "tool", "tool_call_id": "call_002", "content": '{"city":"Rome","t":22}'},
    ]


def test_tool_definitions_are_function_tools_in_a_stable_order(deepseek: OpenAIChatEmulator) -> None:
    """Pain point: pydantic/logfire#1930 (tool list order flips and busts the cache)."""
    deepseek.script.extend([follow_up(0)])
    session_on(deepseek, "deepseek", tools=[WEATHER, CLOCK]).send("hi")
    assert [t["function"]["name"] for t in body(deepseek, 0)["tools"]] == ["get_time", "get_weather"]
    assert body(deepseek, 0)["tools"][1] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "type": "object",
            },
        },
    }


# -- DeepSeek: the protocol rule no policy can override (docs/protocols.md §3.3) ----------------------------


NOTE = "(Summary of my earlier reasoning: compared Paris and Rome)\n\n" + ANSWER
PLAIN = {"role": "assistant", "content": ANSWER}


@pytest.mark.parametrize(
    ("policy", "final"),
    [
        (Keep(), M2),
        (Drop(), PLAIN),
        (KeepLast(1), M2),
        (Compress(lambda turn: "compared Paris and Rome"), {"role": "assistant", "content": NOTE}),
        (CacheAware(ratio=0.0, min_reasoning_tokens=0), PLAIN),
    ],
    ids=["keep", "drop", "keep_last_1", "compress", "cache_aware"],
)
def test_deepseek_tool_turns_keep_reasoning_content_under_every_policy(
    deepseek: OpenAIChatEmulator, policy: Any, final: dict[str, Any]
) -> None:
    """Pain points: continuedev/continue#10193 ("Missing reasoning_content field in the assistant message");
    earendil-works/pi#3635, QwenLM/qwen-code#3578 and qwersyk/Newelle#404 (DeepSeek V4 over the
    OpenAI-compatible path; a "remove thinking from history" toggle that stripped it from tool turns too)."""
    deepseek.script.extend([*chain(), follow_up(1), follow_up(2)])
    session = session_on(deepseek, "deepseek", policy=policy)
    run_chain(session)
    session.send("And tomorrow?")
    q1 = {"role": "user", "content": "And tomorrow?"}
    assert body(deepseek, 3)["messages"] == [SYS, *turn0(final), q1]
    if not isinstance(policy, Keep) and not isinstance(policy, KeepLast):
        clamped = session.trace.of_kind(EventKind.POLICY_CLAMPED)[0].data
        assert clamped["turn"] == 0 and len(clamped["reasons"]) == 2
    session.send("And next week?")
    sent = body(deepseek, 4)["messages"]
    if isinstance(policy, KeepLast):
        # KeepLast(1) compacts turn 0 when turn 1 closes: only the plain answer loses its reasoning
        assert sent[1:8] == turn0(PLAIN)
    else:
        assert sent[: len(body(deepseek, 3)["messages"])] == body(deepseek, 3)["messages"]
    assert all(m.get("reasoning_content") for m in sent if m.get("tool_calls"))


def test_deepseek_400_for_missing_reasoning_content_is_a_typed_error_and_changes_nothing(
    deepseek: OpenAIChatEmulator,
) -> None:
    deepseek.script.extend(chain())
    session = session_on(deepseek, "deepseek")
    reply = session.send("Paris or Rome?")
    # storage that strips reasoning_content (what langchain-deepseek sends): the message keeps no payload
    # (its parts rendered are its bytes, issue 21), so the reasoning part goes; the snapshot is re-sealed
    snap = json.loads(session.snapshot().model_dump_json())
    step = snap["history"]["turns"][0][1][0]
    assert [c[1:] for c in step[1]] == [["", 1]]  # the provenance-only value: no payload bytes
    parts = step[0]
    assert [p[0] for p in parts] == [1, 2, 2]  # reasoning, two tool calls
    del parts[0]
    redigest(snap)
    edited = rs.SessionSnapshot.model_validate(snap).sealed()  # an edit made on purpose, re-sealed
    tampered = rs.Session.restore(edited, deepseek.client(), adapter=OpenAIChatAdapter("deepseek"))
    before = layers(tampered)
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(rs.VendorError) as info:
        tampered.send_tool_results(results)
    assert info.value.status == 400
    assert isinstance(info.value.__cause__, openai.BadRequestError)
    assert str(info.value) == (
        "deepseek chat 400 invalid_request_error: "
        "The reasoning_content in the thinking mode must be passed back to the API."
    )
    assert layers(tampered) == before
    assert tampered.trace.events[-1].kind == EventKind.CALL_FAILED
    assert tampered.report().protocol_errors == 1
    # our own session never produces it, and the refused request consumed no script action
    session.send_tool_results(results)
    assert deepseek.script.taken == 2


def test_deepseek_thinking_option_goes_in_the_body_and_reasoning_effort_passes_through(
    deepseek: OpenAIChatEmulator,
) -> None:
    deepseek.script.extend([ModelAction.answer("Hi."), ModelAction.answer("Bye.")])
    session = session_on(
        deepseek, "deepseek", thinking={"type": "disabled"}, reasoning_effort="high", max_tokens=512
    )
    reply = session.send("hi")
    sent = body(deepseek, 0)
    assert (sent["thinking"], sent["reasoning_effort"], sent["max_tokens"]) == (
        {"type": "disabled"},
        "high",
        512,
    )
    # thinking off: no reasoning_content, no reasoning tokens
    assert reply.reasoning == "" and reply.usage.reasoning == 0
    # the answer is its text part rendered: no payload kept (issue 21), and it goes back byte for byte
    assert session.history.turns[0].steps[0].continuation[0].bare
    session.send("bye")
    assert deepseek.requests[1].body.count(b'{"role":"assistant","content":"Hi."}') == 1


def test_deepseek_usage_maps_hit_to_cache_read_and_miss_to_uncached(deepseek: OpenAIChatEmulator) -> None:
    deepseek.script.extend(chain()[:2])
    session = session_on(deepseek, "deepseek")
    reply = session.send("Paris or Rome?")
    reply = session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    first, second = (r.usage for r in session.execution)
    # request 0 hits nothing; request 1 hits the unit persisted at the end of request 0's output
    assert first == Usage(uncached_input=first.prompt_tokens, cache_read=0, output=first.output, reasoning=14)
    assert second.cache_read == first.prompt_tokens + first.output
    assert second.uncached_input == 2 * 14  # two tool messages of 54 bytes, 14 tokens each
    assert second.reasoning == 12  # "Paris is mild. Check the local time in Rome too." = 48 bytes


# -- vLLM, SGLang, OpenAI (docs/protocols.md §2) -----------------------------------------------------------


def test_vllm_reads_reasoning_and_replays_it_as_reasoning() -> None:
    with OpenAIChatEmulator(chain(), dialect="vllm") as emu:
        session = session_on(emu, "vllm")
        reply = session.send("Paris or Rome?")
        assert reply.reasoning == R0
        session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
        replayed = body(emu, 1)["messages"][2]
        # verbatim: vLLM's output carries both names; its input side reads only ``reasoning``
        assert list(replayed) == ["role", "content", "reasoning", "reasoning_content", "tool_calls"]
        assert replayed["reasoning"] == R0


def test_vllm_reasoning_under_the_deprecated_name_goes_back_as_reasoning() -> None:
    def old_vllm(completion: dict[str, Any]) -> dict[str, Any]:
        completion["choices"][0]["message"].pop("reasoning", None)
        return completion

    with OpenAIChatEmulator(chain(), dialect="vllm", transform=old_vllm) as emu:
        session = session_on(emu, "vllm")
        reply = session.send("Paris or Rome?")
        assert reply.reasoning == R0
        session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
        replayed = body(emu, 1)["messages"][2]
        assert (
            list(replayed) == ["role", "content", "reasoning", "tool_calls"] and replayed["reasoning"] == R0
        )


def test_vllm_drop_removes_reasoning_from_every_step_of_a_closed_turn() -> None:
    with OpenAIChatEmulator([*chain(), follow_up(1)], dialect="vllm") as emu:
        session = session_on(emu, "vllm", policy=Drop())
        run_chain(session)
        session.send("And tomorrow?")
        assistants = [m for m in body(emu, 3)["messages"] if m["role"] == "assistant"]
        assert [sorted(m) for m in assistants] == [
            ["content", "role", "tool_calls"],
            ["content", "role", "tool_calls"],
            ["content", "role"],
        ]
        assert session.trace.of_kind(EventKind.POLICY_CLAMPED) == []


def test_sglang_replays_reasoning_content() -> None:
    with OpenAIChatEmulator(chain(), dialect="sglang") as emu:
        session = session_on(emu, "sglang")
        reply = session.send("Paris or Rome?")
        session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
        assert body(emu, 1)["messages"][2]["reasoning_content"] == R0


def test_openai_dialect_has_no_reasoning_to_replay_and_passes_options_through() -> None:
    with OpenAIChatEmulator(chain(), dialect="openai") as emu:
        session = session_on(emu, "openai", reasoning_effort="low", prompt_cache_key="trip-planner")
        run_chain(session)
        sent = body(emu, 2)
        assert (sent["reasoning_effort"], sent["prompt_cache_key"]) == ("low", "trip-planner")
        assert sent["messages"][2] == {
            "role": "assistant",
            "content": None,
            "tool_calls": M0["tool_calls"],
        }
        assert session.history.turns[0].steps[0].reasoning_text == ""
        # reasoning was generated (and billed) even though it is never shown
        assert session.execution[0].usage.reasoning == 14  # R0: 56 bytes


# -- cache prediction --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "policy", "unknowable"),
    [
        ("deepseek", Keep(), []),
        ("deepseek", Drop(), []),
        ("deepseek", KeepLast(1), []),
        ("deepseek", Compress(lambda turn: "compared"), []),
        ("vllm", Keep(), []),
        ("vllm", Drop(), []),
        ("sglang", Keep(), []),
        # KeepLast(1) rewrites turn t-1 when turn t closes; sglang renders reasoning, so the prompt is cut
        # inside history at a point no earlier request ended at: its token count was never reported
        ("sglang", KeepLast(1), [7, 8]),
        ("openai", Keep(), []),
        ("openai", Drop(), []),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "name", None),
)
def test_emulator_cache_reads_equal_the_sdk_prediction_wherever_it_is_knowable(
    dialect: Dialect, policy: Any, unknowable: list[int]
) -> None:
    script = [*chain(), follow_up(1), *chain(), follow_up(2), follow_up(3)]
    with OpenAIChatEmulator(script, dialect=dialect) as emu:
        session = session_on(emu, dialect, policy=policy)
        run_chain(session)
        session.send("follow-up")
        run_chain(session, "and again?")
        session.send("one more")
        session.send("last")
    records = session.execution
    assert [r.index for r in records if r.predicted_cache_read is None] == unknowable
    assert all(r.divergence is not None for r in records if r.predicted_cache_read is None)
    assert [r.predicted_cache_read for r in records if r.predicted_cache_read is not None] == [
        r.usage.cache_read for r in records if r.predicted_cache_read is not None
    ]
    reported = [r.usage.cache_read for r in records]
    assert reported[0] == 0 and all(r > 0 for r in reported[1:])
    assert session.report().predicted_matches == 9 - len(unknowable)


def test_deepseek_tool_steps_hit_the_unit_at_the_end_of_the_model_output(
    deepseek: OpenAIChatEmulator,
) -> None:
    deepseek.script.extend([*chain(), follow_up(1)])
    session = session_on(deepseek, "deepseek")
    run_chain(session)
    session.send("And tomorrow?")
    r = session.execution
    # in the tool loop: the previous input plus the replayed output (prompt + completion tokens)
    assert r[1].usage.cache_read == r[0].usage.prompt_tokens + r[0].usage.output
    assert r[2].usage.cache_read == r[1].usage.prompt_tokens + r[1].usage.output
    # after a plain answer: its reasoning is not read back (§3.3), so only the previous input is reused
    assert r[3].usage.cache_read == r[2].usage.prompt_tokens


def _record(index: int, blocks: tuple[str, ...], prompt: int, output: int = 5) -> ExecutionRecord:
    return ExecutionRecord(
        index=index,
        turn=index,
        step=0,
        request_digest="-",
        request_bytes=0,
        prefix_fingerprint="-",
        units=len(blocks),
        breakpoints=(),
        divergence=None,
        predicted_cache_read=None,
        usage=Usage(uncached_input=prompt, output=output),
        duration_s=0.0,
        model="deepseek-v4-pro",
    )


def test_deepseek_prediction_is_none_only_past_a_persisted_prefix_of_unknown_size() -> None:
    # api-docs kv_cache: A+B, then A+C persists A; a client that never sent A alone cannot know its size
    records = Records.of([(_record(0, ("a", "b"), 10), ("a", "b")), (_record(1, ("a", "c"), 12), ("a", "c"))])

    def predict(*units: str) -> int | None:
        return predict_cache_read(DEEPSEEK, "deepseek-v4-pro", units, records)

    assert predict("a", "d") is None  # hits the unknown unit (a)
    assert predict("a", "b", "x") == 10  # extends request 0's whole input: known
    assert predict("e") == 0  # shares nothing


# -- streaming -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["openai", "deepseek", "sglang"])
def test_streamed_and_non_streamed_runs_produce_identical_state(dialect: Dialect) -> None:
    states = []
    bodies = []
    for stream in (False, True):
        with OpenAIChatEmulator([*chain(), follow_up(1)], dialect=dialect) as emu:
            session = session_on(emu, dialect, stream=stream)
            run_chain(session)
            session.send("And tomorrow?")
            states.append(
                (
                    session.history,
                    [(r.units, r.usage, r.predicted_cache_read) for r in session.execution],
                    session.execution.chains,
                )
            )
            bodies.append(
                [
                    {k: v for k, v in body(emu, i).items() if k not in ("stream", "stream_options")}
                    for i in range(4)
                ]
            )
    assert states[0] == states[1]
    assert bodies[0] == bodies[1]


def test_vllm_streamed_reasoning_is_replayed_as_reasoning() -> None:
    with OpenAIChatEmulator(chain(), dialect="vllm") as emu:
        session = session_on(emu, "vllm", stream=True)
        run_chain(session)
        # the stream carries only ``reasoning`` deltas, so that is all the assembled message holds
        assert body(emu, 1)["messages"][2]["reasoning"] == R0
        assert [r.predicted_cache_read for r in session.execution] == [
            r.usage.cache_read for r in session.execution
        ]


def test_a_truncated_stream_is_interrupted_and_changes_nothing(deepseek: OpenAIChatEmulator) -> None:
    deepseek.script.extend(chain())
    session = session_on(deepseek, "deepseek", stream=True)
    reply = session.send("Paris or Rome?")
    before = layers(session)
    deepseek.inject(Fault.truncate_stream(after_events=3))  # role chunk and two reasoning deltas
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(rs.StreamInterrupted):
        session.send_tool_results(results)
    assert layers(session) == before
    session.send_tool_results(results)
    assert deepseek.requests[-1].body == deepseek.requests[-2].body
    step = session.history.turns[0].steps[1]
    # the cut response was generated server-side; only the retried one is committed
    assert isinstance(step.parts[0], ReasoningPart) and step.parts[0].text == R2


def test_a_stream_without_finish_reason_and_done_is_interrupted(deepseek: OpenAIChatEmulator) -> None:
    deepseek.script.extend([follow_up(0)])
    session = session_on(deepseek, "deepseek", stream=True)
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}],
    }
    deepseek.inject(Fault.raw(200, b"data: " + json.dumps(chunk).encode() + b"\n\n", "text/event-stream"))
    with pytest.raises(rs.StreamInterrupted, match="finish_reason"):
        session.send("hi")
    assert len(session.history) == 0 and session.execution == ()
    assert session.send("hi").text == "Follow-up answer 0."


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=60)  # slow examples (whole sessions or rollouts): capped below the profile's 100
@given(
    reasoning=st.one_of(st.none(), _text),
    content=st.one_of(st.none(), _text),
    arguments=st.lists(_text, max_size=3),
    cut=st.integers(min_value=1, max_value=7),
)
def test_assembling_any_split_of_a_message_gives_the_message_back(
    reasoning: str | None, content: str | None, arguments: list[str], cut: int
) -> None:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "f", "arguments": a}}
        for i, a in enumerate(arguments)
    ]
    if calls:
        message["tool_calls"] = calls

    def pieces(text: str) -> list[str]:
        return [text[i : i + cut] for i in range(0, len(text), cut)]

    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": None if content is None else ""}]
    deltas += [{"reasoning_content": p} for p in pieces(reasoning or "")] if reasoning is not None else []
    if reasoning == "":
        deltas.append({"reasoning_content": ""})
    deltas += [{"content": p} for p in pieces(content or "")]
    for i, a in enumerate(arguments):
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        )
        deltas += [{"tool_calls": [{"index": i, "function": {"arguments": p}}]} for p in pieces(a)]
    lines = [
        "data: "
        + json.dumps({"id": "x", "model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
        for d in deltas
    ]
    lines += ['data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', "data: [DONE]"]
    events = [part for line in lines for part in (line, "")]  # each data line is one SSE event
    assembled = ChatAssembler.assemble(events)["choices"][0]["message"]
    assert json.dumps(assembled) == json.dumps(message)


# -- failures and bad input leave the session unchanged ------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [OpenAIChatEmulator.rate_limited(), OpenAIChatEmulator.server_error(), Fault.drop_connection()],
    ids=["429", "500", "dropped"],
)
def test_vendor_failures_are_typed_and_a_retry_sends_the_same_bytes(
    deepseek: OpenAIChatEmulator, fault: Fault
) -> None:
    deepseek.script.extend(chain())
    session = session_on(deepseek, "deepseek")
    reply = session.send("Paris or Rome?")
    before = layers(session)
    deepseek.inject(fault)
    results = {c.id: "ok" for c in reply.tool_calls}
    with pytest.raises(rs.VendorError) as info:
        session.send_tool_results(results)
    assert isinstance(info.value.__cause__, openai.APIError)
    assert layers(session) == before
    session.send_tool_results(results)
    assert deepseek.requests[-1].body == deepseek.requests[-2].body


def test_malformed_vendor_json_is_a_typed_error_and_changes_nothing(deepseek: OpenAIChatEmulator) -> None:
    deepseek.script.extend([follow_up(0)])
    session = session_on(deepseek, "deepseek")
    deepseek.inject(Fault.raw(200, b'{"id": "chatcmpl-1", "choices": [{"message": {"role": "assis'))
    with pytest.raises(rs.MalformedResponse):
        session.send("hello")
    assert len(session.history) == 0 and session.execution == ()
    session.send("hello")
    assert deepseek.requests[0].body == deepseek.requests[1].body


def test_tool_call_arguments_that_are_not_a_json_object_are_kept_raw_replayed_and_never_executed(
    deepseek: OpenAIChatEmulator,
) -> None:
    raw = '{"city": "Par'  # what a model cut short or confused really sends
    deepseek.script.extend(
        [
            ModelAction.call(ToolCallSpec("get_weather", raw_arguments=raw), reasoning="r"),
            ModelAction.answer("Sorry.", reasoning="r2"),
        ]
    )
    ran: list[Any] = []
    weather = attrs.evolve(WEATHER, handler=lambda **kw: ran.append(kw) or "sunny")
    session = session_on(deepseek, "deepseek", tools=[weather, CLOCK])
    reply = session.run("hello")
    assert reply.text == "Sorry." and ran == []  # the handler never saw half an argument object
    call = session.history.turns[0].steps[0].tool_calls[0]
    assert call.arguments is None and call.raw_arguments == raw
    assert call.arguments_error == "arguments are not valid JSON: Unterminated string starting at (char 9)"
    second = body(deepseek, 1)["messages"]
    assert second[2]["tool_calls"][0]["function"]["arguments"] == raw  # replayed byte for byte
    assert second[3] == {
        "role": "tool",
        "tool_call_id": call.id,
        "content": f"invalid arguments for 'get_weather': {call.arguments_error}",
    }


def test_a_tool_result_for_an_unknown_call_id_is_refused_before_anything_is_sent(
    deepseek: OpenAIChatEmulator,
) -> None:
    deepseek.script.extend(chain())
    session = session_on(deepseek, "deepseek")
    reply = session.send("Paris or Rome?")
    before = layers(session)
    with pytest.raises(rs.ToolResultError, match="unknown tool call ids"):
        session.send_tool_results({"call_999": "x", **{c.id: "ok" for c in reply.tool_calls}})
    assert layers(session) == before and len(deepseek.requests) == 1


def test_an_unknown_extra_field_on_the_message_is_kept_verbatim_and_replayed(
    deepseek: OpenAIChatEmulator,
) -> None:
    def add_field(completion: dict[str, Any]) -> dict[str, Any]:
        completion["choices"][0]["message"]["x_vendor_trace"] = {"span": "a1", "n": [1, 2]}
        return completion

    deepseek.transform = add_field
    deepseek.script.extend(chain())
    session = session_on(deepseek, "deepseek")
    reply = session.send("Paris or Rome?")
    session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
    replayed = body(deepseek, 1)["messages"][2]
    assert replayed == {**M0, "x_vendor_trace": {"span": "a1", "n": [1, 2]}}
    assert list(replayed)[-1] == "x_vendor_trace"


# -- snapshots, async, routing ------------------------------------------------------------------------------


def test_snapshot_and_restore_give_a_byte_identical_next_request(deepseek: OpenAIChatEmulator) -> None:
    deepseek.script.extend([*chain()[:1], follow_up(9), follow_up(9)])
    session = session_on(deepseek, "deepseek", policy=Drop())
    reply = session.send("Paris or Rome?")
    text = session.snapshot().model_dump_json()
    restored = rs.Session.restore(
        rs.SessionSnapshot.model_validate_json(text), deepseek.client(), adapter=OpenAIChatAdapter("deepseek")
    )
    assert restored.history == session.history and restored.execution == session.execution
    results = {c.id: {"ok": True} for c in reply.tool_calls}
    session.send_tool_results(results)
    restored.send_tool_results(results)
    assert deepseek.requests[-1].body == deepseek.requests[-2].body


def test_async_session_runs_a_streamed_deepseek_tool_chain(deepseek: OpenAIChatEmulator) -> None:
    deepseek.script.extend(chain())

    async def main() -> rs.AsyncSession:
        client = deepseek.async_client()
        session = rs.AsyncSession(
            client, model="deepseek-v4-pro", dialect="deepseek", tools=[WEATHER, CLOCK], stream=True
        )
        reply = await session.send("Paris or Rome?")
        while reply.tool_calls:
            reply = await session.send_tool_results({c.id: "ok" for c in reply.tool_calls})
        await client.close()
        return session

    session = asyncio.run(main())
    assert session.state is rs.TurnState.IDLE
    assert session.history.turns[0].final_text == ANSWER
    assert body(deepseek, 2)["messages"][1] == M0


def test_adapter_for_routes_dialects_to_the_chat_adapter_with_their_rules() -> None:
    client = openai.OpenAI(api_key="test-key", base_url="http://127.0.0.1:9/v1")
    deepseek = adapter_for(client, dialect="deepseek")
    assert isinstance(deepseek, OpenAIChatAdapter)
    assert (deepseek.vendor, deepseek.api, deepseek.rules.tool_steps_keep_reasoning) == (
        "deepseek",
        "chat",
        True,
    )
    chat = adapter_for(client, api="chat")
    assert (chat.vendor, chat.rules.tool_steps_keep_reasoning) == ("openai", False)
    with pytest.raises(rs.InvalidOption, match="unknown chat dialect"):
        OpenAIChatAdapter("ollama")


def test_a_deepseek_snapshot_restores_onto_the_chat_adapter_without_naming_it(
    deepseek_emulator: OpenAIChatEmulator,
) -> None:
    deepseek_emulator.script.extend(
        [ModelAction(reasoning="r", text="a"), ModelAction(reasoning="r2", text="b")]
    )
    session = rs.Session(deepseek_emulator.client(), model="deepseek-v4-pro", dialect="deepseek")
    session.send("hi")
    restored = rs.Session.restore(session.snapshot(), deepseek_emulator.client())
    assert (restored.snapshot().vendor, restored.snapshot().api) == ("deepseek", "chat")
    restored.send("again")
    # a snapshot never continues on an adapter that speaks another protocol
    foreign = session.snapshot().model_copy(update={"api": "responses"}).sealed()
    with pytest.raises(rs.IllegalTransition, match="snapshot is from deepseek/responses"):
        rs.Session.restore(foreign, deepseek_emulator.client())


# -- issue 21: a message that is its parts rendered keeps no payload, only who produced it -----------------


def _wire(message: dict[str, Any]) -> bytes:
    """A message's compact bytes as the SDK sends them (keys in the order written here)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_deepseek_message_keeps_no_payload_and_every_request_carries_its_bytes(
    deepseek: OpenAIChatEmulator, stream: bool
) -> None:
    """Issue 21: the DeepSeek messages are their parts rendered (role, content, reasoning_content,
    tool_calls), so no payload is kept for them, only one shared provenance-only value; every later
    request still carries each message byte for byte, before and after a snapshot and restore. The oracle
    is the messages written by hand (M0, M1, M2: keys in the wire order)."""
    deepseek.script.extend([*chain(), follow_up(1), follow_up(2), follow_up(2)])
    session = session_on(deepseek, "deepseek", stream=stream, policy=Keep())
    run_chain(session)
    session.send("And tomorrow?")
    wire = [_wire(m) for m in (M0, M1, M2)]
    assert deepseek.requests[1].body.count(wire[0]) == 1
    assert deepseek.requests[2].body.count(wire[1]) == 1
    assert [deepseek.requests[3].body.count(w) for w in wire] == [1, 1, 1]
    steps = [s for t in session.history.turns for s in t.steps]
    (bare,) = steps[0].continuation
    assert (bare.bare, bare.payload, bare.vendor, bare.api, bare.kind, bare.model, bare.model_bound) == (
        True,
        b"",
        "deepseek",
        "chat",
        "message",
        MODELS["deepseek"],
        False,
    )
    # one shared value in one shared tuple for every step of this origin: nothing kept per step
    assert all(s.continuation is steps[0].continuation for s in steps)
    assert session.continuation == ()
    restored = rs.Session.restore(session.snapshot().model_dump_json(), deepseek.client())
    assert restored.history == session.history
    assert all(s.continuation is steps[0].continuation for t in restored.history.turns for s in t.steps)
    session.send("And next week?")
    restored.send("And next week?")
    assert deepseek.requests[-1].body == deepseek.requests[-2].body
    assert [deepseek.requests[-1].body.count(w) for w in wire] == [1, 1, 1]


CALL = {"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": PARIS}}


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ({"role": "assistant", "content": "Hi.", "reasoning_content": "Because."}, False),
        ({"role": "assistant", "content": "Hi."}, False),
        (
            {"role": "assistant", "content": "", "reasoning_content": "Weather first.", "tool_calls": [CALL]},
            False,
        ),
        (
            {"role": "assistant", "content": "Let me look.", "reasoning_content": "", "tool_calls": [CALL]},
            False,
        ),
        # anything the parts cannot say keeps the payload: key order, a null, an extra field, a call's index,
        # content parts, a call without its type
        ({"content": "Hi.", "role": "assistant"}, True),
        ({"role": "assistant", "reasoning_content": "Because.", "content": "Hi."}, True),
        ({"role": "assistant", "content": None, "reasoning_content": "W.", "tool_calls": [CALL]}, True),
        ({"role": "assistant", "content": "Hi.", "reasoning_content": None}, True),
        ({"role": "assistant", "content": "Hi.", "reasoning_content": "Because.", "x_trace": 1}, True),
        (
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "W.",
                "tool_calls": [{"index": 0, **CALL}],
            },
            True,
        ),
        ({"role": "assistant", "content": [{"type": "text", "text": "Hi."}]}, True),
        (
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "W.",
                "tool_calls": [{"id": "call_9", "function": {"name": "get_weather", "arguments": "{}"}}],
            },
            True,
        ),
    ],
)
def test_a_deepseek_message_keeps_its_payload_unless_its_parts_render_to_its_bytes(
    message: dict[str, Any], kept: bool
) -> None:
    """Issue 21: a message keeps no payload only when its parts, rendered, give back its exact bytes; either
    way the next request carries it byte for byte (the oracle: the message written here)."""
    from reasonstate.adapters.base import VendorRequest
    from reasonstate.prefix import Prefix
    from reasonstate.state import History, Step, Turn, TurnView

    adapter = OpenAIChatAdapter("deepseek")
    model = MODELS["deepseek"]
    response = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "prompt_cache_hit_tokens": 0},
    }
    decoded = adapter.decode(response, VendorRequest(kwargs={}, units=("u",), model=model))
    (c,) = decoded.continuation
    assert c.bare is not kept
    assert c.payload == (_wire(message) if kept else b"")
    step = Step(decoded.parts, decoded.continuation, "stop", decoded.usage, model)
    closed = History((Turn(0, "Hi?", (step,), TurnView((True,), policy="keep")), Turn(1, "Next?")))
    still_open = History((Turn(0, "Hi?", (step,)),))
    # from the memoized closed run, and as the open turn's message
    for history in (closed, still_open):
        sent = adapter.encode(Prefix(), history, model, {}, ()).kwargs["messages"][1]
        assert _wire(sent) == _wire(message)


def test_a_model_switch_on_deepseek_still_sends_the_reasoning_and_never_to_another_vendor(
    deepseek: OpenAIChatEmulator,
) -> None:
    """A provenance-only value keeps the rules of a payload: DeepSeek's reasoning_content goes back after a
    switch to another DeepSeek model (§3.3: the API requires it, it is not bound to its model), and is
    withheld from a switch to another vendor (the oracle: the hand-written M0 bytes, and the reasoning text
    absent from the other vendor's body)."""
    from reasonstate.testing.anthropic import AnthropicEmulator

    deepseek.script.extend([*chain(), follow_up(1)])
    session = session_on(deepseek, "deepseek")
    run_chain(session)
    session.switch_model("deepseek-v4-flash")
    session.send("And tomorrow?")
    assert deepseek.requests[-1].body.count(_wire(M0)) == 1
    assert json.loads(deepseek.requests[-1].body)["model"] == "deepseek-v4-flash"
    with AnthropicEmulator() as anthropic:
        anthropic.script.extend([ModelAction.answer("Fine.")])
        session.switch(anthropic.client(), model="claude-sonnet-4-6", max_tokens=1024)
        session.send("And the day after?")
        sent = anthropic.requests[-1].body.decode()
    for reasoning in (R0, R1, R2, "Thinking about follow-up 1."):
        assert json.dumps(reasoning)[1:-1] not in sent
    assert ANSWER in sent
    withheld = session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)[-1].data
    assert withheld["count"] == 4 and withheld["kinds"] == ["deepseek:message"]
