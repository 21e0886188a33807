"""The fault matrix: every vendor failure, on every adapter, streamed and not, changes nothing but the trace.

Faults × adapters × modes (each cell is one parametrized case):

* faults: 429 with ``Retry-After``, 500, 503, 529, a read timeout, the connection reset before the first
  byte, a malformed JSON body, missing required fields (the top-level container; the one field of the
  step the session needs to continue: a tool call's id, or the completion's token ids), a field of the
  wrong type in an otherwise valid answer (a thinking ``signature`` that is a number, an
  ``encrypted_content`` that is a number, a reasoning string that is a list, a token id outside the
  vocabulary: accepted, it would go back to the vendor and be refused there), and — streamed only —
  the answer's stream cut at EVERY event boundary (``Fault.truncate_stream(k)`` for each ``0 <= k < N``,
  ``N`` the events of the scripted answer, counted from the emulator's own stream by
  :func:`stream_events`): mid-reasoning, before and after the signature / encrypted reasoning,
  mid-arguments, before the terminal event;
* adapters: Anthropic Messages, Responses ``store=False``, Responses ``store=True`` (chained by
  ``previous_response_id``), Chat ``deepseek``, Chat ``vllm``, Tokens (``/v1/completions``, not streamed);
* modes: streamed and not. Not meaningful, hence absent: Tokens streamed (the adapter refuses to stream),
  ``missing_top`` on a streamed chat answer (chat chunks have no top-level container to leave out: a chunk
  without ``choices`` is legal).

Every case runs the same three-step tool chain (reasoning + two parallel calls; reasoning + one call;
reasoning + the answer) and puts the fault on the second request, the one answering the first step's tool
results, so the session has state to corrupt and the faulted answer holds reasoning, its signature or
encrypted content, and a tool call's arguments. The emulators answer with a responder (the action is a
function of the tool results the request carries), so a request the fault let through to the "model"
(a timeout, a cut stream) does not shift the script. Clients have ``max_retries=0`` and a short timeout:
reasonstate has no retry layer of its own, so one fault is exactly one request.

For every case:

1. the failure is a typed :class:`reasonstate.ReasonStateError` — :class:`VendorError` (with ``status``)
   for an HTTP error, a timeout or a reset; :class:`StreamInterrupted` for a cut stream and for a timeout or
   reset while streaming (reasonstate.adapters.transport); :class:`MalformedResponse` for a body that is
   not JSON, lacks required fields or holds a field of the wrong type — with the SDK's (or the
   transport's / the JSON parser's) exception as ``__cause__`` wherever there is one;
2. ``session.history``, ``session.continuation``, ``session.execution`` (and the turn state) are exactly
   what they were, and the trace gained exactly one ``call.failed`` event, naming the error;
3. the emulator received exactly one request for the failed call;
4. the retry, with the fault cleared, sends byte-identical request bytes (the emulator's recorded bodies);
5. the session then completes the chain to its final answer, every request accepted by the strict emulator
   (which verifies every replayed signature, encrypted blob and reasoning string);
6. "paid steps lost" — answers the emulated model produced that the session never committed — is exactly
   what the fault implies: 0 when the fault answered in the model's place, 1 for a timeout (the model
   answers after the client gave up) and for a cut stream (the model's whole answer, of which the client
   saw a part).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import attrs
import httpx2
import openai
import pytest

import reasonstate as rs
from reasonstate.adapters.tokens import TokenAdapter
from reasonstate.state import EventKind
from reasonstate.testing import Fault, ModelAction, RecordedRequest, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.completions import ScriptedCompletion, VLLMCompletionsEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from reasonstate.tokens import ChatTemplateRenderer, template_path

# -- the scripted chain ------------------------------------------------------------------------------------

TIMEOUT = 1.0  # the client's timeout (every request of the chain answers in milliseconds on loopback)
DELAY = 1.4  # Fault.delay: longer than TIMEOUT, so the client's read timeout fires

SYSTEM = "You are a careful travel assistant. Use the tools for facts."
WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = rs.Tool(
    name="get_time",
    description="Local time for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
QUESTION = "Paris or Rome: which is warmer?"
R0 = "Two cities: call the weather tool for both, in parallel."
R1 = "Paris is mild. Check the local time in Rome too, before answering."
R2 = "I have everything; Rome is warmer."
ANSWER = "Rome is warmer (22C) than Paris (18C)."
# odd spacing on purpose (string-typed argument wire formats): they must go back byte for byte
PARIS, ROME, ROME_TIME = '{ "city" :  "Paris" }', '{"city":"Rome"  }', '{"city": "Rome"}'

ACTIONS = (
    ModelAction(
        reasoning=R0,
        redacted=True,  # Anthropic: a redacted_thinking block too (the other emulators ignore it)
        tool_calls=(
            ToolCallSpec("get_weather", {"city": "Paris"}, raw_arguments=PARIS),
            ToolCallSpec("get_weather", {"city": "Rome"}, raw_arguments=ROME),
        ),
    ),
    ModelAction(
        reasoning=R1, tool_calls=(ToolCallSpec("get_time", {"city": "Rome"}, raw_arguments=ROME_TIME),)
    ),
    ModelAction(reasoning=R2, text=ANSWER),
)


def _step_of(text: str) -> int:
    """Which step a request asks for, from the tool results it carries (``result-<step>``)."""
    return 2 if "result-1" in text else 1 if "result-0" in text else 0


def respond(body: Any) -> ModelAction:
    return ACTIONS[_step_of(json.dumps(body))]


# Qwen3.6's output format (reasoning, "\n</think>\n\n", the answer or XML tool calls, <|im_end|>)
def _qwen_call(name: str, city: str) -> str:
    return (
        f"<tool_call>\n<function={name}>\n<parameter=city>\n{city}\n</parameter>\n</function>\n</tool_call>"
    )


COMPLETIONS = (
    f"{R0}\n</think>\n\n{_qwen_call('get_weather', 'Paris')}\n{_qwen_call('get_weather', 'Rome')}<|im_end|>",
    f"{R1}\n</think>\n\n{_qwen_call('get_time', 'Rome')}<|im_end|>",
    f"{R2}\n</think>\n\n{ANSWER}<|im_end|>",
)


@functools.cache
def qwen() -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path("qwen3.6"), "qwen3.6")


def results(reply: rs.Reply, step: int) -> dict[str, str]:
    return {c.id: f"result-{step}" for c in reply.tool_calls}


# -- one adapter under test: emulator + session ------------------------------------------------------------

ADAPTERS = ("anthropic", "responses", "responses_store", "deepseek", "vllm", "tokens")
STREAMING = tuple(a for a in ADAPTERS if a != "tokens")
MODELS = {
    "anthropic": "claude-sonnet-4-6",
    "responses": "gpt-5.5",
    "responses_store": "gpt-5.5",
    "deepseek": "deepseek-v4-pro",
    "vllm": "qwen3",
    "tokens": "qwen3.6",
}


def family(adapter: str) -> str:
    return {"anthropic": "anthropic", "responses": "responses", "responses_store": "responses"}.get(
        adapter, "tokens" if adapter == "tokens" else "chat"
    )


@attrs.define
class Rig:
    adapter: str
    emulator: Any
    session: rs.Session
    sdk: Any  # the SDK module whose exceptions the transport translates

    @property
    def requests(self) -> list[RecordedRequest]:
        emu = self.emulator
        return list(emu.server.requests if isinstance(emu, VLLMCompletionsEmulator) else emu.requests)

    def inject(self, fault: Fault) -> None:
        emu = self.emulator
        (emu.server if isinstance(emu, VLLMCompletionsEmulator) else emu).inject(fault)

    def answered(self) -> int:
        """How many answers the emulated model has produced (paid for), delivered or not."""
        if isinstance(self.emulator, VLLMCompletionsEmulator):
            return len(self.emulator.served)
        return int(self.emulator.script.taken)


@contextlib.contextmanager
def rig(adapter: str, stream: bool) -> Iterator[Rig]:
    common: dict[str, Any] = {"system": SYSTEM, "tools": [WEATHER, CLOCK], "stream": stream}
    model = MODELS[adapter]
    if adapter == "anthropic":
        with AnthropicEmulator(respond) as emu:
            client = emu.client(timeout=TIMEOUT, max_retries=0)
            thinking = {"type": "enabled", "budget_tokens": 2048}
            yield Rig(
                adapter,
                emu,
                rs.Session(client, model=model, max_tokens=4096, thinking=thinking, **common),
                anthropic,
            )
    elif adapter in ("responses", "responses_store"):
        with OpenAIResponsesEmulator(respond) as emu:
            client = emu.client(timeout=TIMEOUT, max_retries=0)
            session = rs.Session(
                client,
                model=model,
                store=adapter == "responses_store",
                reasoning={"effort": "medium", "summary": "auto"},
                **common,
            )
            yield Rig(adapter, emu, session, openai)
    elif adapter in ("deepseek", "vllm"):
        with OpenAIChatEmulator(respond, dialect=adapter) as emu:
            client = emu.client(timeout=TIMEOUT, max_retries=0)
            yield Rig(adapter, emu, rs.Session(client, model=model, dialect=adapter, **common), openai)
    else:
        renderer = qwen()

        def completion(prompt: Any) -> ScriptedCompletion:
            return ScriptedCompletion(text=COMPLETIONS[_step_of(renderer.decode(prompt))])

        im_end = renderer.tokenizer.special_id("<|im_end|>") if renderer.tokenizer else None
        with VLLMCompletionsEmulator(
            tokenizer="qwen3.6", eos_token_ids=[im_end or 0], responder=completion
        ) as emu:
            client = openai.OpenAI(
                base_url=emu.base_url + "/v1", api_key="test-key", max_retries=0, timeout=TIMEOUT
            )
            session = rs.Session(
                client, model=model, adapter=TokenAdapter(renderer), max_tokens=512, **common
            )
            yield Rig(adapter, emu, session, openai)


@functools.cache
def stream_events(adapter: str) -> int:
    """How many SSE events the emulator streams for the faulted (second) answer of the chain.

    Counted on the emulator itself: the chain's second request, as the session sent it, is posted again
    raw and the events of the streamed body are counted (each event ends with a blank line; the emulators
    frame JSON compactly, so no event holds one). The cut cases cover ``0 <= k < N``; ``k = N`` is a whole
    stream, asserted by :func:`test_the_whole_stream_is_n_events`.
    """
    with rig(adapter, stream=True) as r:
        reply = r.session.send(QUESTION)
        r.session.send_tool_results(results(reply, 0))
        sent = r.requests[-1]
        headers = {
            "content-type": "application/json",
            "x-api-key": "test-key",
            "anthropic-version": "2023-06-01",
            "authorization": "Bearer test-key",
        }
        body = httpx2.post(
            r.emulator.base_url + sent.path, content=sent.body, headers=headers, timeout=10
        ).content
    return body.count(b"\n\n")


# -- the faults --------------------------------------------------------------------------------------------


def http_fault(adapter: str, status: int) -> Fault:
    """A vendor-shaped error answer (429 with ``Retry-After``)."""
    headers = {"retry-after": "1"} if status == 429 else {}
    if adapter == "anthropic":
        kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
        return Fault.http(
            status, {"type": "error", "error": {"type": kind, "message": f"emulated {status}"}}, headers
        )
    kind = {429: "requests"}.get(status, "server_error")
    body = {"error": {"message": f"emulated {status}", "type": kind, "param": None, "code": None}}
    return Fault.http(status, body, headers)


def _sse(*events: tuple[str | None, Any]) -> bytes:
    out = b""
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        out += (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()
    return out


_ANTHROPIC_USAGE = {"input_tokens": 10, "output_tokens": 5}
_ANTHROPIC_HEAD = {"id": "msg_bad", "type": "message", "role": "assistant", "model": MODELS["anthropic"]}
_THINKING = {"type": "thinking", "thinking": R1, "signature": "c2lnbmF0dXJl"}


def _anthropic_body(kind: str) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "type": "tool_use",
        "id": "toolu_bad",
        "name": "get_time",
        "input": {"city": "Rome"},
    }
    if kind == "missing_field":
        del tool["id"]
    thinking = {**_THINKING, "signature": 12345} if kind == "wrong_type" else _THINKING
    body: dict[str, Any] = {
        **_ANTHROPIC_HEAD,
        "content": [thinking, tool],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": _ANTHROPIC_USAGE,
    }
    if kind == "missing_top":
        del body["content"]
    return body


def _anthropic_stream(kind: str) -> bytes:
    start = {
        **_ANTHROPIC_HEAD,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _ANTHROPIC_USAGE,
    }
    if kind == "malformed":
        return _sse(
            ("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", '{"type":"content_block_start","index":0,"content_block":{"type":"thin'),
        )
    if kind == "missing_top":  # message_start without its message
        return _sse(("message_start", {"type": "message_start"}), ("message_stop", {"type": "message_stop"}))
    tool: dict[str, Any] = {"type": "tool_use", "name": "get_time", "input": {}}
    if kind != "missing_field":
        tool = {"type": "tool_use", "id": "toolu_bad", **tool}
    signature: Any = 12345 if kind == "wrong_type" else "c2lnbmF0dXJl"

    def delta(index: int, **value: Any) -> tuple[str, Any]:
        return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": value})

    return _sse(
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
        ),
        delta(0, type="thinking_delta", thinking=R1),
        delta(0, type="signature_delta", signature=signature),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": tool}),
        delta(1, type="input_json_delta", partial_json='{"city": "Rome"}'),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    )


def _responses_body(kind: str) -> dict[str, Any]:
    reasoning: dict[str, Any] = {
        "id": "rs_bad",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": R1}],
        "encrypted_content": "gAAAAABbad",
        "status": "completed",
    }
    call: dict[str, Any] = {
        "id": "fc_bad",
        "type": "function_call",
        "call_id": "call_bad",
        "name": "get_time",
        "arguments": ROME_TIME,
        "status": "completed",
    }
    if kind == "missing_field":
        del call["call_id"]
    if kind == "wrong_type":
        reasoning["encrypted_content"] = 12345
    body: dict[str, Any] = {
        "id": "resp_bad",
        "object": "response",
        "created_at": 1760000000,
        "status": "completed",
        "model": MODELS["responses"],
        "output": [reasoning, call],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    if kind == "missing_top":
        del body["output"]
    return body


def _responses_stream(kind: str) -> bytes:
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "resp_bad", "object": "response", "status": "in_progress", "output": []},
    }
    if kind == "malformed":
        return _sse(
            ("response.created", created),
            ("response.in_progress", '{"type":"response.in_progress","sequence_number":1,"response":{"id'),
        )
    body = _responses_body(kind)
    done = [
        (
            "response.output_item.done",
            {"type": "response.output_item.done", "sequence_number": 1 + i, "output_index": i, "item": item},
        )
        for i, item in enumerate(body.get("output", []))
    ]
    completed = {"type": "response.completed", "sequence_number": 9, "response": body}
    return _sse(("response.created", created), *done, ("response.completed", completed))


def _chat_body(kind: str) -> dict[str, Any]:
    call: dict[str, Any] = {
        "id": "call_bad",
        "type": "function",
        "function": {"name": "get_time", "arguments": ROME_TIME},
    }
    if kind == "missing_field":
        del call["id"]
    thought: Any = [R1] if kind == "wrong_type" else R1  # a list where each dialect reads its reasoning
    message = {"role": "assistant", "content": "", "reasoning_content": thought, "reasoning": thought}
    message["tool_calls"] = [call]
    body: dict[str, Any] = {
        "id": "chatcmpl-bad",
        "object": "chat.completion",
        "created": 1760000000,
        "model": "m",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    if kind == "missing_top":
        del body["choices"]
    return body


def _chat_stream(kind: str) -> bytes:
    head = {"id": "chatcmpl-bad", "object": "chat.completion.chunk", "created": 1760000000, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        return (None, {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    if kind == "malformed":
        return _sse(
            chunk({"role": "assistant", "content": ""}),
            (None, '{"id":"chatcmpl-bad","choices":[{"index":0,"delta":{"reasoning_con'),
        )
    opening: dict[str, Any] = {
        "index": 0,
        "type": "function",
        "function": {"name": "get_time", "arguments": ""},
    }
    if kind != "missing_field":
        opening["id"] = "call_bad"
    thought: Any = [R1] if kind == "wrong_type" else R1
    return _sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": thought, "reasoning": thought}),
        chunk({"tool_calls": [opening]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ROME_TIME}}]}),
        chunk({}, "tool_calls"),
        (None, "[DONE]"),
    )


def _tokens_body(kind: str) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": "x", "finish_reason": "stop", "token_ids": [1, 2]}
    if kind == "missing_field":
        del choice["token_ids"]
    if kind == "wrong_type":  # an id outside the tokenizer's vocabulary
        choice["token_ids"] = [1, 2, 10**9]
    body: dict[str, Any] = {
        "id": "cmpl-bad",
        "object": "text_completion",
        "model": "qwen3.6",
        "choices": [choice],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2},
    }
    if kind == "missing_top":
        del body["choices"]
    return body


_BODIES: dict[str, Callable[[str], dict[str, Any]]] = {
    "anthropic": _anthropic_body,
    "responses": _responses_body,
    "chat": _chat_body,
    "tokens": _tokens_body,
}
_STREAMS: dict[str, Callable[[str], bytes]] = {
    "anthropic": _anthropic_stream,
    "responses": _responses_stream,
    "chat": _chat_stream,
}


def body_fault(adapter: str, kind: str, stream: bool) -> Fault:
    """A 200 answer whose body is malformed JSON, lacks required fields, or holds a field of the wrong type
    that would go back to the vendor (a thinking signature, ``encrypted_content``, the reasoning string) or
    that cannot be decoded (a token id outside the vocabulary)."""
    fam = family(adapter)
    if stream:
        return Fault.raw(200, _STREAMS[fam](kind), "text/event-stream")
    if kind == "malformed":
        text = json.dumps(_BODIES[fam]("valid"), separators=(",", ":"))
        return Fault.raw(200, text[: len(text) // 2].encode())
    return Fault.raw(200, json.dumps(_BODIES[fam](kind)).encode())


STATUS = {"429": 429, "500": 500, "503": 503, "529": 529}
FAULTS = (*STATUS, "timeout", "reset", "malformed", "missing_top", "missing_field", "wrong_type")


def make_fault(adapter: str, fault: str, stream: bool) -> Fault:
    if fault in STATUS:
        return http_fault(adapter, STATUS[fault])
    if fault == "timeout":
        return Fault.delay(DELAY)
    if fault == "reset":
        return Fault.drop_connection()
    if fault.startswith("cut@"):
        return Fault.truncate_stream(after_events=int(fault[4:]))
    return body_fault(adapter, fault, stream)


def expected_error(fault: str, stream: bool) -> type[rs.ReasonStateError]:
    if fault in STATUS:
        return rs.VendorError
    if fault in ("timeout", "reset"):
        return rs.StreamInterrupted if stream else rs.VendorError
    if fault.startswith("cut@"):
        return rs.StreamInterrupted
    return rs.MalformedResponse


def check_cause(rig_: Rig, fault: str, exc: BaseException) -> None:
    """The SDK's (or the transport's / the JSON parser's) exception is ``__cause__`` wherever there is one."""
    cause = exc.__cause__
    sdk = rig_.sdk
    if fault in STATUS:
        assert isinstance(cause, sdk.APIStatusError), repr(cause)
        assert cause.status_code == STATUS[fault]
        if fault == "429":  # the vendor's Retry-After reaches the caller (through the SDK error)
            assert cause.response.headers.get("retry-after") == "1"
    elif fault == "timeout":
        assert isinstance(cause, sdk.APITimeoutError), repr(cause)
    elif fault == "reset":
        assert isinstance(cause, sdk.APIConnectionError) and not isinstance(cause, sdk.APITimeoutError), repr(
            cause
        )
    elif fault.startswith("cut@"):
        assert isinstance(cause, (httpx2.TransportError, sdk.APIError)), repr(cause)
    elif fault == "malformed":
        assert isinstance(cause, ValueError), repr(cause)


def cases() -> list[Any]:
    out = []
    for adapter in ADAPTERS:
        for stream in (False, True):
            if stream and adapter not in STREAMING:
                continue
            for fault in FAULTS:
                if stream and fault == "missing_top" and family(adapter) == "chat":
                    continue
                out.append(
                    pytest.param(
                        adapter, stream, fault, id=f"{adapter}-{'stream' if stream else 'json'}-{fault}"
                    )
                )
    return out


def _events_or_none(adapter: str) -> int:
    """:func:`stream_events` at collection; 0 cut cases if the probe itself fails (then
    :func:`test_the_whole_stream_is_n_events` calls it again and shows why)."""
    try:
        return stream_events(adapter)
    except Exception:
        return 0


def cut_cases() -> list[Any]:
    return [
        pytest.param(adapter, True, f"cut@{k}", id=f"{adapter}-stream-cut@{k}")
        for adapter in STREAMING
        for k in range(_events_or_none(adapter))
    ]


#: answers the emulated model produced that the session never committed, per fault (see the docstring)
LOST = {"timeout": 1, "cut": 1}


# -- the matrix --------------------------------------------------------------------------------------------


def _layers(session: rs.Session) -> tuple[Any, ...]:
    return (session.history, session.continuation, session.execution, session.state)


@pytest.mark.parametrize(("adapter", "stream", "fault"), [*cases(), *cut_cases()])
def test_a_fault_changes_nothing_but_the_trace_and_the_retry_sends_the_same_bytes(
    adapter: str, stream: bool, fault: str
) -> None:
    with rig(adapter, stream) as r:
        session = r.session
        reply = session.send(QUESTION)
        assert [c.name for c in reply.tool_calls] == ["get_weather", "get_weather"]
        given = results(reply, 0)
        before, trace_before = _layers(session), session.trace.events
        sent_before, answered_before = len(r.requests), r.answered()

        r.inject(make_fault(adapter, fault, stream))
        with pytest.raises(rs.ReasonStateError) as info:
            session.send_tool_results(given)
        exc = info.value

        # 1. typed, with the cause
        assert type(exc) is expected_error(fault, stream), f"{type(exc).__name__}: {exc}"
        check_cause(r, fault, exc)
        if fault in STATUS:
            assert isinstance(exc, rs.VendorError) and exc.status == STATUS[fault]
        # 2. nothing changed but the trace, which gained exactly one call.failed naming the error
        assert _layers(session) == before
        assert session.trace.events[: len(trace_before)] == trace_before
        new = session.trace.events[len(trace_before) :]
        assert [e.kind for e in new] == [EventKind.CALL_FAILED]
        assert new[0].data["error"] == type(exc).__name__
        assert new[0].data["status"] == (STATUS.get(fault) if fault in STATUS else None)
        # 3. one fault, one request (no retry layer anywhere)
        assert len(r.requests) == sent_before + 1

        # 4. the retry sends the same bytes
        reply = session.send_tool_results(given)
        faulted, retried = r.requests[sent_before:]
        assert retried.body == faulted.body
        assert [(c.name, dict(c.arguments or {})) for c in reply.tool_calls] == [
            ("get_time", {"city": "Rome"})
        ]

        # 5. and the chain goes on to its final answer, every request accepted by the strict emulator
        reply = session.send_tool_results(results(reply, 1))
        assert reply.tool_calls == () and reply.text.strip() == ANSWER
        assert session.state is rs.TurnState.IDLE
        assert len(session.execution) == 3 and len(r.requests) == sent_before + 3
        assert len(session.trace.of_kind(EventKind.CALL_FAILED)) == 1

        # 6. paid steps lost: what the emulated model answered and the session never committed
        expected = LOST.get(fault.split("@")[0], 0)
        deadline = time.monotonic() + DELAY + 3
        while r.answered() - answered_before < 2 + expected and time.monotonic() < deadline:
            time.sleep(0.02)  # a timed-out request reaches the model only after DELAY
        assert r.answered() - answered_before - 2 == expected


@pytest.mark.parametrize("adapter", STREAMING)
def test_the_whole_stream_is_n_events(adapter: str) -> None:
    """The cut cases cover every boundary: truncating after N events cuts nothing, so N is the whole
    stream, and truncating after N - 1 cuts before the terminal event."""
    n = stream_events(adapter)
    assert n >= 8  # message/response start, reasoning deltas, signature or blob, argument deltas, terminal
    for k, fails in ((n - 1, True), (n, False)):
        with rig(adapter, stream=True) as r:
            reply = r.session.send(QUESTION)
            r.inject(Fault.truncate_stream(after_events=k))
            if fails:
                with pytest.raises(rs.StreamInterrupted):
                    r.session.send_tool_results(results(reply, 0))
            else:
                assert r.session.send_tool_results(results(reply, 0)).tool_calls
