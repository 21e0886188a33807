"""OpenAI Chat Completions adapter, four dialects: openai, deepseek, vllm, sglang (protocols.md §2, §3).

Rules encoded here, each from protocols.md:
  * every assistant message is replayed from the verbatim continuation payload of the response message
    (``choices[0].message`` as received: key order, unknown extra fields and the tool-call ``arguments``
    string byte for byte); the only edits ever made are removing the reasoning field when the frozen view
    says so and the rules allow, and Compress's summary note in a closed turn's final answer;
  * openai (§2.1): Chat Completions never returns reasoning, so there is none to replay;
    ``reasoning_effort`` and ``prompt_cache_key`` pass through as request options;
  * deepseek (§3.3): every assistant message that carried ``tool_calls`` keeps its original
    ``reasoning_content`` in every later request, in the tool loop and in all later turns
    (``ProtocolRules(tool_steps_keep_reasoning=True)``; the session clamps policies and the encoder enforces
    it again, so this adapter never produces the 400 "The reasoning_content in the thinking mode must be
    passed back to the API." — anomalyco/opencode#25058, langchain-ai/langchain#37713,
    continuedev/continue#10193). Reasoning of turns
    without tool calls is ignored by the API and may be dropped. ``thinking=`` is sent as
    ``extra_body={"thinking": ...}`` (§3.1);
  * vllm (§2.2): reasoning is read from ``reasoning`` (falling back to ``reasoning_content``) and goes
    back as ``reasoning``, the only field vLLM reads on input (vllm-project/vllm#38488);
    sglang: ``reasoning_content``;
  * tool results are ``{"role": "tool", "tool_call_id", "content"}`` messages in the model's declared call
    order (the session refuses results for unknown ids before anything is sent);
  * streaming (``stream_options.include_usage``) assembles the deltas into the message JSON a non-streamed
    call returns (wire key order: role, content, reasoning, tool_calls), so both give the same state; a
    stream without ``finish_reason`` and ``[DONE]`` is :class:`~reasonstate.errors.StreamInterrupted`.

Prefix units (``VendorRequest.units``): one for the tool list, then one per message, each the digest of the
message *as the server renders it* (fields the dialect ignores on input removed), so a change the server
cannot see is not a cache break. Invariant: ``units(encode(h)) == units(encode(h'))[:len]`` whenever ``h'``
only appends to ``h`` (append-only history).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs

from reasonstate.adapters.base import CallResult, DecodedStep, ProtocolRules, VendorRequest
from reasonstate.adapters.wire import int_field, parse_json_body, translated_errors
from reasonstate.cache.guard import RECENT
from reasonstate.errors import (
    ContinuationMismatch,
    MalformedResponse,
    StreamInterrupted,
    VendorError,
)
from reasonstate.prefix import Prefix, canonical_json
from reasonstate.state import (
    Continuation,
    ExecutionRecord,
    History,
    Part,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    Turn,
    Usage,
    digest_of,
)

__all__ = ["Dialect", "OpenAIChatAdapter"]

API = "chat"
Dialect = Literal["openai", "deepseek", "vllm", "sglang"]
DIALECTS: tuple[Dialect, ...] = ("openai", "deepseek", "vllm", "sglang")
_KIND = "message"
_REASONING_FIELDS = ("reasoning", "reasoning_content")
#: where each dialect puts reasoning on output, in read order (protocols.md §2.2, §3.2)
_READ: dict[str, tuple[str, ...]] = {
    "openai": (),
    "deepseek": ("reasoning_content",),
    "vllm": ("reasoning", "reasoning_content"),
    "sglang": ("reasoning_content",),
}
#: reasoning fields a server does not read on input (protocols.md §2.2; vllm-project/vllm#38488)
_UNREAD: dict[str, tuple[str, ...]] = {
    "openai": _REASONING_FIELDS,
    "deepseek": ("reasoning",),
    "vllm": ("reasoning_content",),
    "sglang": (),
}
_WIRE_ORDER = ("role", "content", *_REASONING_FIELDS, "tool_calls")
_OPENAI_MIN_CACHED = 1024  # protocols.md §1.5: nothing cached below 1024 tokens, then 128-token steps
_OPENAI_STEP = 128
_SELF_HOSTED_BLOCK = 16  # vLLM/SGLang prefix cache: full KV blocks of 16 tokens


def _unit(value: Any) -> str:
    return digest_of(canonical_json(value).encode())


def _server_view(message: Mapping[str, Any], dialect: str) -> dict[str, Any]:
    """The message as the server renders it into the prompt: null values and unread fields removed.

    DeepSeek reads ``reasoning_content`` only on messages with ``tool_calls`` (§3.3: otherwise ignored).
    """
    unread = _UNREAD[dialect]
    if dialect == "deepseek" and not message.get("tool_calls"):
        unread = _REASONING_FIELDS
    return {k: v for k, v in message.items() if v is not None and k not in unread}


def _generated_view(message: Mapping[str, Any], dialect: str) -> dict[str, Any]:
    """The response message as the model generated it: its reasoning included wherever the server reads it."""
    return {k: v for k, v in message.items() if v is not None and k not in _UNREAD[dialect]}


@attrs.frozen(slots=True)
class _TurnEncoding:
    """One turn's messages and unit digests, shared read-only between requests while the turn is closed."""

    turn: Turn
    model: str
    messages: tuple[Mapping[str, Any], ...]
    units: tuple[str, ...]
    replayed: tuple[Continuation, ...]
    withheld: tuple[Continuation, ...]
    #: (step index, digest of the step's message as generated): DeepSeek's end-of-output cache unit
    generated: tuple[tuple[int, str], ...]


class OpenAIChatAdapter:
    """The Chat Completions codec for one dialect; ``vendor`` is the dialect name, ``api`` is ``"chat"``."""

    api = API

    def __init__(self, dialect: str = "openai") -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"unknown chat dialect {dialect!r}; expected one of {DIALECTS}")
        self.dialect: Dialect = dialect
        self.vendor: str = dialect
        self.rules = ProtocolRules(vendor=dialect, api=API, tool_steps_keep_reasoning=dialect == "deepseek")
        self._memo: dict[int, _TurnEncoding] = {}
        # (turn, step) -> digest of that step's message as generated; rebuilt by every encode
        self._generated: dict[tuple[int, int], str] = {}

    # -- encode ------------------------------------------------------------------------------------------
    def encode(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        options: Mapping[str, Any],
        records: Sequence[ExecutionRecord],
    ) -> VendorRequest:
        """The ``chat.completions.create`` kwargs for the next call on ``history`` (last turn open)."""
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
            }
            for t in prefix.tools
        ]
        messages: list[Mapping[str, Any]] = []
        units: list[str] = [_unit(tools)] if tools else []

        def add(message: Mapping[str, Any]) -> None:
            messages.append(message)
            units.append(_unit(_server_view(message, self.dialect)))

        if prefix.system:
            add({"role": "system", "content": prefix.system})
        for user, answer in prefix.few_shots:
            add({"role": "user", "content": user})
            add({"role": "assistant", "content": answer})
        memo: dict[int, _TurnEncoding] = {}
        generated: dict[tuple[int, int], str] = {}
        withheld: list[Continuation] = []
        for turn in history.turns:
            encoded = self._memo.get(id(turn))
            if encoded is None or encoded.turn is not turn or encoded.model != model:
                encoded = self._encode_turn(turn, model)
            else:
                for c in encoded.replayed:  # a payload changed in memory is refused, never sent
                    c.verify()
            if turn.closed:  # a closed turn's view is frozen: so is its encoding
                memo[id(turn)] = encoded
            messages.extend(encoded.messages)
            units.extend(encoded.units)
            withheld.extend(encoded.withheld)
            generated.update({(turn.index, i): d for i, d in encoded.generated})
        self._memo, self._generated = memo, generated
        kwargs: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        for key, value in options.items():
            if key == "thinking":  # DeepSeek's toggle is not an SDK parameter (protocols.md §3.1)
                kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "thinking": value}
            elif key == "extra_body":
                kwargs["extra_body"] = {**dict(value), **kwargs.get("extra_body", {})}
            else:
                kwargs[key] = value
        return VendorRequest(kwargs=kwargs, units=tuple(units), withheld=tuple(withheld))

    def _encode_turn(self, turn: Turn, model: str) -> _TurnEncoding:
        messages: list[Mapping[str, Any]] = [{"role": "user", "content": turn.user}]
        replayed: list[Continuation] = []
        withheld: list[Continuation] = []
        generated: list[tuple[int, str]] = []
        for i, step in enumerate(turn.steps):
            c, payload = _message_payload(step)
            replayed.append(c)
            generated.append((i, _unit(_generated_view(payload, self.dialect))))
            messages.append(self._assistant(turn, i, c, payload, model, withheld))
            # the session stores results in the model's declared call order (history invariant)
            messages.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in step.tool_results
            )
        units = tuple(_unit(_server_view(m, self.dialect)) for m in messages)
        return _TurnEncoding(
            turn, model, tuple(messages), units, tuple(replayed), tuple(withheld), tuple(generated)
        )

    def _assistant(
        self,
        turn: Turn,
        index: int,
        c: Continuation,
        payload: Mapping[str, Any],
        model: str,
        withheld: list[Continuation],
    ) -> Mapping[str, Any]:
        keep = turn.view is None or turn.view.keep_reasoning[index]
        if self.rules.tool_steps_keep_reasoning and payload.get("tool_calls"):
            keep = True  # DeepSeek §3.3, whatever the view says: no policy can override it
        elif not c.replayable_to(self.vendor, API, model):
            keep = False  # another model's reasoning is never sent to this one
            withheld.append(c)
        summary = turn.view.summary if turn.view is not None and index == len(turn.steps) - 1 else None
        rename = self.dialect == "vllm" and "reasoning" not in payload and "reasoning_content" in payload
        if keep and summary is None and not rename:
            return payload  # the verbatim payload, shared read-only
        message: dict[str, Any] = {}
        for key, value in payload.items():
            if key in _REASONING_FIELDS and not keep:
                continue
            # vLLM reads only ``reasoning`` on input: an older server's ``reasoning_content`` goes back there
            message["reasoning" if rename and key == "reasoning_content" else key] = value
        if summary is not None:
            note = f"(Summary of my earlier reasoning: {summary})"
            content = message.get("content")
            message["content"] = f"{note}\n\n{content}" if isinstance(content, str) and content else note
        return message

    # -- cache prediction --------------------------------------------------------------------------------
    def predict_cache_read(self, request: VendorRequest, records: Sequence[ExecutionRecord]) -> int | None:
        """The cache read the server will report, or None where it is not knowable from earlier usage.

        Token counts are learned, never estimated: an earlier request's whole unit chain has its reported
        ``prompt_tokens``; on DeepSeek its chain plus its replayed-as-generated output message has
        ``prompt_tokens + completion_tokens`` (§3.4: a unit is persisted at the end of the model output).
        Let ``K`` be the longest such known chain that is a prefix of this request. The prediction is
        exact unless an earlier request shares more than ``K`` with this one while ending elsewhere (the
        shared run then ends inside tokens never reported): None.

        * openai (§1.5): ``0`` below 1024 shared tokens, else ``1024 + 128k <= shared``;
        * vllm/sglang: full 16-token blocks of ``min(shared, prompt_tokens - 1)``;
        * deepseek (§3.4): the tokens of ``K``; None when a common prefix DeepSeek persisted between two
          earlier requests is longer than ``K`` and of unknown size.
        """
        model = request.kwargs.get("model")
        recs = [r for r in records[-RECENT:] if r.model == model]
        q = request.units
        known: dict[tuple[str, ...], int] = {}
        for r in recs:
            known[r.blocks] = r.usage.prompt_tokens
            out = self._generated.get((r.turn, r.step))
            if self.dialect == "deepseek" and out is not None:
                with_output: tuple[str, ...] = (*r.blocks, out)
                known[with_output] = r.usage.prompt_tokens + r.usage.output
        best_len, best = 0, 0
        for chain, tokens in known.items():
            n = len(chain)
            if n <= len(q) and n >= best_len and q[:n] == chain:
                best_len, best = n, max(best, tokens) if n == best_len else tokens
        shares = [_common(q, r.blocks) for r in recs]
        if self.dialect == "deepseek":
            for i, r in enumerate(recs):
                if shares[i] <= best_len:
                    continue
                for earlier in recs[:i]:
                    common = _common(r.blocks, earlier.blocks)
                    if best_len < common <= shares[i] and r.blocks[:common] not in known:
                        return None
            return best
        if any(s > best_len for s in shares):
            return None
        if self.dialect == "openai":
            if best < _OPENAI_MIN_CACHED:
                return 0
            return _OPENAI_MIN_CACHED + _OPENAI_STEP * ((best - _OPENAI_MIN_CACHED) // _OPENAI_STEP)
        # the last prompt token is always computed: an identical prompt reuses at most prompt_tokens - 1
        reusable = best - 1 if best_len == len(q) else best
        return _SELF_HOSTED_BLOCK * (max(reusable, 0) // _SELF_HOSTED_BLOCK)

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, response: Any, model: str) -> DecodedStep:
        """Split a chat completion (the JSON object as received) into the four layers' material."""
        if not isinstance(response, Mapping):
            raise MalformedResponse("chat completion is not a JSON object")
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise MalformedResponse("chat completion has no choices")
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            raise MalformedResponse("choices[0] has no message object")
        got_model = response.get("model")
        produced_by = got_model if isinstance(got_model, str) and got_model else model
        parts = self._parts(message)
        has_reasoning = any(isinstance(p, ReasoningPart) for p in parts)
        payload = Continuation.capture(
            vendor=self.vendor,
            api=API,
            model=produced_by,
            kind=_KIND,
            value=message,
            # DeepSeek's reasoning_content is unsigned text the API requires back (§3.3), even after a
            # model switch; elsewhere reasoning is the producing model's own and is not shown to another
            model_bound=has_reasoning and self.dialect != "deepseek",
        )
        finish = choices[0].get("finish_reason")
        rid = response.get("id")
        return DecodedStep(
            parts=tuple(parts),
            continuation=(payload,),
            stop_reason=finish if isinstance(finish, str) else "unknown",
            usage=_usage(response.get("usage"), self.dialect),
            model=produced_by,
            response_id=rid if isinstance(rid, str) else None,
        )

    def _parts(self, message: Mapping[str, Any]) -> list[Part]:
        parts: list[Part] = []
        for field in _READ[self.dialect]:
            if isinstance(message.get(field), str):
                parts.append(ReasoningPart(text=message[field], continuation=0))
                break
        content = message.get("content")
        if isinstance(content, list):  # content parts (some servers): the text parts, in order
            content = "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, Mapping) and isinstance(p.get("text"), str)
            )
        if isinstance(content, str):
            if content:
                parts.append(TextPart(text=content, continuation=0))
        elif content is not None:
            raise MalformedResponse("message content is neither a string, a list of parts, nor null")
        calls = message.get("tool_calls")
        if calls is None:
            return parts
        if not isinstance(calls, list):
            raise MalformedResponse("message tool_calls is not a list")
        for i, call in enumerate(calls):
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(call.get("id"), str):
                raise MalformedResponse(f"tool_calls[{i}] needs an id and a function")
            name, raw = function.get("name"), function.get("arguments")
            if not isinstance(name, str) or not isinstance(raw, str):
                raise MalformedResponse(f"tool_calls[{i}] needs a function name and an arguments string")
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                raise MalformedResponse(
                    f"tool_calls[{i}].function.arguments is not JSON: {raw[:80]!r}"
                ) from exc
            if not isinstance(arguments, dict):
                raise MalformedResponse(f"tool_calls[{i}].function.arguments is not a JSON object")
            # arguments go back as the exact string received (raw_arguments), never re-serialized
            parts.append(
                ToolCallPart(id=call["id"], name=name, arguments=arguments, raw_arguments=raw, continuation=0)
            )
        return parts

    def restored(self) -> None:
        """Nothing server-side to lose: every request carries the whole conversation."""
        self._memo.clear()
        self._generated.clear()

    # -- I/O -----------------------------------------------------------------------------------------------
    def call(self, client: Any, request: VendorRequest, stream: bool) -> CallResult:
        """One ``chat.completions`` call: the completion JSON as received (or assembled), the bytes sent."""
        import openai

        with translated_errors(openai, f"{self.vendor} chat", stream):
            create = client.chat.completions.with_raw_response.create
            if not stream:
                raw = create(**request.kwargs)
                return CallResult(
                    parse_json_body(raw.http_response.content, "chat completion"),
                    raw.http_response.request.content,
                )
            raw = create(**_streaming(request.kwargs))
            http = raw.http_response
            try:
                return CallResult(_assemble(http.iter_lines()), http.request.content)
            finally:
                http.close()

    async def acall(self, client: Any, request: VendorRequest, stream: bool) -> CallResult:
        """The async twin of :meth:`call`."""
        import openai

        with translated_errors(openai, f"{self.vendor} chat", stream):
            create = client.chat.completions.with_raw_response.create
            if not stream:
                raw = await create(**request.kwargs)
                return CallResult(
                    parse_json_body(raw.http_response.content, "chat completion"),
                    raw.http_response.request.content,
                )
            raw = await create(**_streaming(request.kwargs))
            http = raw.http_response
            try:
                lines = [line async for line in http.aiter_lines()]
                return CallResult(_assemble(lines), http.request.content)
            finally:
                await http.aclose()


def _message_payload(step: Step) -> tuple[Continuation, Mapping[str, Any]]:
    for c in step.continuation:
        if c.kind == _KIND and c.api == API:
            value = c.shared_value()  # digest-verified; shared, never mutated
            if not isinstance(value, Mapping):
                raise ContinuationMismatch("a chat message payload is not a JSON object")
            return c, value
    raise ContinuationMismatch("a step has no chat message payload to replay")


def _common(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _usage(raw: Any, dialect: str) -> Usage:
    """Normalized usage. DeepSeek: hit → cache_read, miss → uncached_input (§3.4); else cached_tokens."""
    if not isinstance(raw, Mapping):
        return Usage()
    prompt, output = int_field(raw.get("prompt_tokens")), int_field(raw.get("completion_tokens"))
    out_details = raw.get("completion_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, Mapping) else None
    reasoning = reasoning if isinstance(reasoning, int) else None
    if dialect == "deepseek" and isinstance(raw.get("prompt_cache_hit_tokens"), int):
        hit, miss = raw["prompt_cache_hit_tokens"], raw.get("prompt_cache_miss_tokens")
        uncached = miss if isinstance(miss, int) else max(prompt - hit, 0)
        return Usage(uncached_input=uncached, cache_read=hit, output=output, reasoning=reasoning)
    in_details = raw.get("prompt_tokens_details")
    details = in_details if isinstance(in_details, Mapping) else {}
    cached, written = int_field(details.get("cached_tokens")), int_field(details.get("cache_write_tokens"))
    return Usage(
        uncached_input=max(prompt - cached - written, 0),
        cache_read=cached,
        cache_write=written,
        output=output,
        reasoning=reasoning,
    )


def _streaming(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    options = dict(kwargs.get("stream_options") or {})
    return {**kwargs, "stream": True, "stream_options": {**options, "include_usage": True}}


def _assemble(lines: Iterable[str]) -> dict[str, Any]:
    """The chat completion a non-streamed call would have returned, from the SSE lines of a stream.

    Invariant: for a server that streams what it would return, ``_assemble(stream(c)) == c`` on
    ``choices[0].message`` (wire key order role, content, reasoning fields, tool_calls, then the rest),
    ``finish_reason``, ``usage``, ``id`` and ``model``. No ``finish_reason`` or no ``[DONE]`` →
    :class:`StreamInterrupted`.
    """
    head: dict[str, Any] = {}
    usage: Any = None
    finish: str | None = None
    done = False
    fields: dict[str, list[Any]] = {}  # delta key -> pieces, in first-seen order
    calls: dict[int, dict[str, Any]] = {}
    for line in _data_lines(lines):
        if line == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(line)
        except ValueError as exc:
            raise MalformedResponse(f"stream chunk is not JSON: {line[:80]!r}") from exc
        if not isinstance(chunk, Mapping):
            raise MalformedResponse("stream chunk is not a JSON object")
        if "error" in chunk:
            raise VendorError(f"the stream reported an error: {chunk['error']}", body=chunk["error"])
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk and key not in head:
                head[key] = chunk[key]
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("finish_reason"), str):
                finish = choice["finish_reason"]
            delta = choice.get("delta") or {}
            for key, value in delta.items():
                if key == "tool_calls":
                    _add_call_deltas(calls, value)
                else:
                    fields.setdefault(key, []).append(value)
    if finish is None or not done:
        raise StreamInterrupted("the stream ended before its finish_reason and [DONE]")
    message: dict[str, Any] = {}
    for key in _WIRE_ORDER:
        if key == "tool_calls":
            if calls:
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
        elif key in fields or key in ("role", "content"):
            message[key] = _joined(fields.get(key, []))
    message["role"] = message["role"] or "assistant"
    for key, pieces in fields.items():
        if key not in message:
            message[key] = _joined(pieces)
    completion: dict[str, Any] = {
        "id": head.get("id"),
        "object": "chat.completion",
        "created": head.get("created"),
        "model": head.get("model"),
    }
    if "system_fingerprint" in head:
        completion["system_fingerprint"] = head["system_fingerprint"]
    completion["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]
    completion["usage"] = usage
    return completion


def _data_lines(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


def _joined(pieces: list[Any]) -> Any:
    """String deltas concatenate; a field that only ever came as null stays null; else the last value."""
    strings = [p for p in pieces if isinstance(p, str)]
    if strings:
        return "".join(strings)
    values = [p for p in pieces if p is not None]
    return values[-1] if values else None


def _add_call_deltas(calls: dict[int, dict[str, Any]], deltas: Any) -> None:
    for delta in deltas or ():
        if not isinstance(delta, Mapping):
            raise MalformedResponse("a tool_calls delta is not an object")
        call = calls.setdefault(
            int_field(delta.get("index")),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if isinstance(delta.get("id"), str):
            call["id"] = delta["id"]
        if isinstance(delta.get("type"), str):
            call["type"] = delta["type"]
        function = delta.get("function") or {}
        for key in ("name", "arguments"):
            if isinstance(function.get(key), str):
                call["function"][key] += function[key]
