"""OpenRouter as a chat dialect (issue 27 item 3; docs/protocols.md §2.3): the real ``openai`` SDK over real
HTTP against the emulator's openrouter dialect. The oracles are hand-written ``reasoning_details`` lists in
OpenRouter's documented shape (https://openrouter.ai/docs/guides/best-practices/reasoning-tokens), never
the codec's own output."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

import reasonstate as rs
from reasonstate.adapters.base import VendorRequest
from reasonstate.adapters.openai_chat import REPORTED_COST, ChatAssembler, OpenAIChatAdapter
from reasonstate.policies import Drop
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests.conftest import CLOCK, WEATHER

CLAUDE = "anthropic/claude-sonnet-4.5"
GPT = "openai/gpt-5"
PARIS = '{ "city" :  "Paris" }'
R0 = "The user asks about Paris. I will check the weather first."
R1 = "Mild in Paris. Now the local time."
ANSWER = "Paris is mild (18C) and it is noon."


def chain() -> list[ModelAction]:
    return [
        ModelAction.call(ToolCallSpec("get_weather", raw_arguments=PARIS), reasoning=R0),
        ModelAction.call(ToolCallSpec("get_time", raw_arguments='{"city":"Paris"}'), reasoning=R1),
        ModelAction.answer(ANSWER, reasoning="All done."),
    ]


def session_on(emu: OpenAIChatEmulator, model: str = CLAUDE, **kw: Any) -> rs.Session:
    return rs.Session(emu.client(), model=model, dialect="openrouter", tools=[WEATHER, CLOCK], **kw)


def run_chain(session: rs.Session, question: str = "Weather and time in Paris?") -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"ok": c.name} for c in reply.tool_calls})
    return reply


def body(emu: OpenAIChatEmulator, i: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(emu.requests[i].body)
    return data


def assistant_messages(emu: OpenAIChatEmulator, i: int) -> list[dict[str, Any]]:
    return [m for m in body(emu, i)["messages"] if m["role"] == "assistant"]


def test_the_dialect_is_accepted_and_claude_details_go_back_verbatim_through_a_tool_chain() -> None:
    """Was ``InvalidOption: unknown chat dialect 'openrouter'`` (issue 27)."""
    with OpenAIChatEmulator(chain(), dialect="openrouter") as emu:
        session = session_on(emu)
        reply = run_chain(session)
        assert reply.text == ANSWER
        m0 = assistant_messages(emu, 1)[0]
        # hand-written oracle: OpenRouter's documented reasoning.text element for a Claude upstream
        assert [list(d) for d in m0["reasoning_details"]] == [
            ["type", "text", "signature", "id", "format", "index"]
        ]
        assert m0["reasoning_details"][0]["type"] == "reasoning.text"
        assert m0["reasoning_details"][0]["text"] == R0
        assert m0["reasoning_details"][0]["format"] == "anthropic-claude-v1"
        assert m0["reasoning"] == R0
        # the payload captured is what goes back, byte for byte, in order, in both later requests
        steps = session.history.turns[0].steps
        assert steps[0].continuation[0].payload in emu.requests[1].body
        assert steps[0].continuation[0].payload in emu.requests[2].body
        assert steps[1].continuation[0].payload in emu.requests[2].body
        assert assistant_messages(emu, 2)[0] == m0


def test_the_emulator_forwards_anthropics_400_when_the_chain_drops_its_thinking() -> None:
    """pydantic/pydantic-ai#3757 shape: "a final assistant message must start with a thinking block"."""
    with OpenAIChatEmulator(chain(), dialect="openrouter") as emu:
        client = emu.client()
        first = client.chat.completions.create(
            model=CLAUDE, messages=[{"role": "user", "content": "Weather?"}], tools=[_tool("get_weather")]
        )
        message = first.model_dump(exclude_none=True)["choices"][0]["message"]
        call = message["tool_calls"][0]
        dropped = {k: v for k, v in message.items() if k not in ("reasoning", "reasoning_details")}
        tool = {"role": "tool", "tool_call_id": call["id"], "content": "18C"}
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model=CLAUDE,
                messages=[{"role": "user", "content": "Weather?"}, dropped, tool],
                tools=[_tool("get_weather")],
            )
        error = caught.value.body
        assert isinstance(error, dict) and error["code"] == 400
        assert error["metadata"]["provider_name"] == "Anthropic"
        assert "must start with a thinking block" in json.loads(error["metadata"]["raw"])["error"]["message"]
        # and a tampered signature is Anthropic's invalid-signature 400
        tampered = json.loads(json.dumps(message))
        tampered["reasoning_details"][0]["signature"] = (
            "A" + tampered["reasoning_details"][0]["signature"][1:]
        )
        with pytest.raises(openai.BadRequestError, match="Provider returned error") as caught:
            client.chat.completions.create(
                model=CLAUDE,
                messages=[{"role": "user", "content": "Weather?"}, tampered, tool],
                tools=[_tool("get_weather")],
            )
        assert isinstance(caught.value.body, dict)
        assert "Invalid `signature`" in caught.value.body["metadata"]["raw"]


def _tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
    }


@pytest.mark.parametrize("model", [CLAUDE, GPT, "google/gemini-2.5-pro", "moonshotai/kimi-k2.5"])
def test_streamed_and_unstreamed_give_the_same_state_for_every_upstream_family(model: str) -> None:
    states, bodies = [], []
    for stream in (False, True):
        with OpenAIChatEmulator(chain(), dialect="openrouter") as emu:
            session = session_on(emu, model, stream=stream)
            run_chain(session)
            states.append((session.history, [(r.units, r.usage) for r in session.execution]))
            bodies.append([body(emu, i)["messages"] for i in range(3)])
    assert states[0] == states[1]
    assert bodies[0] == bodies[1]


def test_usage_normalizes_cached_tokens_and_the_reported_cost_is_traced() -> None:
    adapter = OpenAIChatAdapter("openrouter")
    response = {
        "id": "gen-1",
        "model": CLAUDE,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 40,
            "total_tokens": 1240,
            "cost": 0.0042,
            "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 100},
            "completion_tokens_details": {"reasoning_tokens": 12},
        },
    }
    decoded = adapter.decode(response, VendorRequest(kwargs={}, units=(), model=CLAUDE, prefix_units=0))
    assert (decoded.usage.cache_read, decoded.usage.cache_write, decoded.usage.uncached_input) == (
        1024,
        100,
        76,
    )
    assert (decoded.usage.output, decoded.usage.reasoning) == (40, 12)
    assert decoded.events == ((REPORTED_COST, {"cost": 0.0042, "unit": "credits"}),)


@pytest.mark.parametrize("stream", [False, True])
def test_each_answers_reported_cost_is_in_the_trace(stream: bool) -> None:
    with OpenAIChatEmulator(chain(), dialect="openrouter") as emu:
        session = session_on(emu, stream=stream)
        run_chain(session)
        costs = [e.data["cost"] for e in session.trace if e.kind == REPORTED_COST]
    assert len(costs) == 3 and all(c > 0 for c in costs)


def test_a_switch_to_another_upstream_sends_no_foreign_reasoning_details() -> None:
    """The details are bound to the model that produced them (docs/protocols.md §2.3): after a switch to
    an OpenAI model the Claude-signed text never goes (the emulator refuses a foreign ``format``)."""
    with OpenAIChatEmulator(
        [*chain(), ModelAction.answer("Still mild.", reasoning="Nothing new.")], dialect="openrouter"
    ) as emu:
        session = session_on(emu)
        run_chain(session)
        session.switch_model(GPT)
        reply = session.send("And tomorrow?")
        assert reply.text == "Still mild."
        sent = body(emu, 3)
        assert sent["model"] == GPT
        assert all("reasoning_details" not in m and "reasoning" not in m for m in sent["messages"])
        assert b"anthropic-claude-v1" not in emu.requests[3].body


def test_snapshot_and_restore_give_a_byte_identical_next_request() -> None:
    with OpenAIChatEmulator(
        [*chain()[:1], ModelAction.answer("a"), ModelAction.answer("a")], dialect="openrouter"
    ) as emu:
        session = session_on(emu, policy=Drop())
        reply = session.send("Weather in Paris?")
        text = session.snapshot().model_dump_json()
        restored = rs.Session.restore(
            rs.SessionSnapshot.model_validate_json(text),
            emu.client(),
            adapter=OpenAIChatAdapter("openrouter"),
        )
        assert restored.history == session.history
        results = {c.id: {"ok": True} for c in reply.tool_calls}
        session.send_tool_results(results)
        restored.send_tool_results(results)
        assert emu.requests[-1].body == emu.requests[-2].body


# -- streams in the vendors' documented shapes (hand-written) -----------------------------------------------


def _sse(deltas: list[dict[str, Any]], model: str) -> list[str]:
    lines: list[str] = []
    for delta in [*deltas, None]:
        choice = {"index": 0, "delta": delta or {}, "finish_reason": None if delta is not None else "stop"}
        chunk = {
            "id": "gen-9",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": model,
            "choices": [choice],
        }
        lines += ["data: " + json.dumps(chunk), ""]
    return [*lines, "data: [DONE]", ""]


def test_a_kimi_stream_of_17_reasoning_pieces_commits_all_17() -> None:
    """Recorded Kimi K2.5 stream (issue 27): 17 ``reasoning_details`` pieces became one (``'. '``)."""
    pieces = [f"Step {i} of the plan" for i in range(16)] + [". "]
    deltas = [{"role": "assistant", "content": ""}]
    deltas += [
        {
            "reasoning": p,
            "reasoning_details": [{"type": "reasoning.text", "text": p, "format": "unknown", "index": 0}],
        }
        for p in pieces
    ]
    deltas.append({"content": "Done."})
    message = ChatAssembler.assemble(_sse(deltas, "moonshotai/kimi-k2.5"))["choices"][0]["message"]
    assert message["reasoning_details"] == [
        {"type": "reasoning.text", "text": "".join(pieces), "format": "unknown", "index": 0}
    ]
    assert message["reasoning"] == "".join(pieces)


def test_an_openrouter_stream_keeps_the_thinking_text_its_512_character_signature_signs() -> None:
    """Recorded OpenRouter stream (issue 27): the signature went back without the text it signs. Here the
    stream is hand-written in OpenRouter's shape; the unstreamed element is the oracle, key order included."""
    signature = "ErcBCkgIBhABGAIiQ" + "s" * 495
    text = "Let me think about Paris. The user wants the weather."
    unstreamed = {
        "type": "reasoning.text",
        "text": text,
        "signature": signature,
        "id": None,
        "format": "anthropic-claude-v1",
        "index": 0,
    }
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    for k in range(0, len(text), 9):
        head = {"type": "reasoning.text", "text": text[k : k + 9], "index": 0}
        if k == 0:
            head |= {"id": None, "format": "anthropic-claude-v1"}
        deltas.append({"reasoning": text[k : k + 9], "reasoning_details": [head]})
    deltas.append(
        {"reasoning_details": [{"type": "reasoning.text", "text": "", "signature": signature, "index": 0}]}
    )
    message = ChatAssembler.assemble(_sse(deltas, CLAUDE))["choices"][0]["message"]
    assert len(signature) == 512
    assert json.dumps(message["reasoning_details"]) == json.dumps([unstreamed])


# -- guard mode ----------------------------------------------------------------------------------------------


def _framework_chain(client: openai.OpenAI, *, drop: bool) -> None:
    """What a framework does by hand: dump the answer, (maybe lose its details), send the tool result."""
    tools = [_tool("get_weather")]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(model=CLAUDE, messages=messages, tools=tools).choices[0].message
    replayed = first.model_dump(exclude_none=True)  # the null ids go: not a change
    if drop:
        replayed.pop("reasoning_details")
    messages += [replayed, {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "18C"}]
    client.chat.completions.create(model=CLAUDE, messages=messages, tools=tools)


def test_the_guard_names_lost_reasoning_details_and_mend_puts_them_back() -> None:
    """Pain point: braintrustdata/braintrust-sdk-javascript#1883 (OpenRouter reasoning fields dropped)."""
    with OpenAIChatEmulator(chain(), dialect="openrouter") as emu:
        client = emu.client()
        guard = rs.instrument(client, mend=True)
        _framework_chain(client, drop=True)  # without mend, the emulator's forwarded Anthropic 400
        kinds = [w.kind for w in guard.records[1].warnings]
        sent = body(emu, 1)["messages"][1]
    assert "continuation_lost" in kinds and "mended" in kinds, kinds
    lost = next(w for w in guard.records[1].warnings if w.kind == "continuation_lost")
    assert lost.path == "$.messages[1].reasoning_details" and "sha256:" in lost.detail
    assert sent["reasoning_details"][0]["text"] == R0


def test_the_guard_is_quiet_on_a_faithful_replay() -> None:
    with OpenAIChatEmulator(chain(), dialect="openrouter") as emu:
        client = emu.client()
        guard = rs.instrument(client)
        _framework_chain(client, drop=False)
    assert all(
        w.kind not in ("continuation_lost", "continuation_altered") for r in guard.records for w in r.warnings
    )


def test_reasonstate_emulate_serves_the_openrouter_dialect() -> None:
    """``reasonstate emulate chat --dialect openrouter``: a real client gets Claude-format details."""
    import io
    import threading
    import time

    from reasonstate.testing.standalone import serve

    out, stop = io.StringIO(), threading.Event()
    server = threading.Thread(
        target=serve, args=("chat",), kwargs={"dialect": "openrouter", "out": out, "stop": stop}
    )
    server.start()
    try:
        for _ in range(200):
            if "OPENAI_API_KEY" in out.getvalue():
                break
            time.sleep(0.02)
        env = dict(line.removeprefix("export ").split("=", 1) for line in out.getvalue().splitlines()[1:3])
        client = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0)
        message = client.chat.completions.create(model=CLAUDE, messages=[{"role": "user", "content": "hi"}])
        details = message.choices[0].message.model_dump()["reasoning_details"]
    finally:
        stop.set()
        server.join()
    assert details[0]["format"] == "anthropic-claude-v1" and details[0]["signature"]


def test_the_reported_cost_is_summed_in_the_report() -> None:
    """docs/protocols.md §2.3, §8: each OpenRouter answer's ``usage.cost`` (credits), here written by hand
    into the answers, sums into ``session.report().reported_cost``, beside the price-table ``cost``; a
    session whose vendor reports none has ``None``."""
    costs = iter([0.0042, 0.00125, 0.0003])

    def billed(completion: dict[str, Any]) -> dict[str, Any]:
        return {**completion, "usage": {**completion["usage"], "cost": next(costs)}}

    with OpenAIChatEmulator(chain(), dialect="openrouter", transform=billed) as emu:
        session = session_on(emu)
        run_chain(session)
    assert session.report().reported_cost == pytest.approx(0.00575)
    with OpenAIChatEmulator([ModelAction.answer("hi")]) as plain:
        other = rs.Session(plain.client(), model="gpt-5.5", api="chat")
        other.send("Hi?")
    assert other.report().reported_cost is None
