"""Stream assembly, one pure unit per vendor: feed the lines of a server-sent-events stream, get the JSON
object the vendor's non-streamed endpoint returns for the same answer (docs/protocols.md §1.6, §2, §3, §4.5).

Sans-I/O: nothing here imports a vendor SDK, opens a socket or reads a clock. The caller moves the bytes
(``http.iter_lines()``, ``http.iter_bytes()``, a file, a test transcript) and calls ``feed`` per line (or
``feed_bytes`` per chunk), then ``finish()`` once the body has ended.

* :class:`SSEParser` — the one SSE parser (WHATWG "server-sent events" line rules): ``data:`` with or
  without one leading space, several ``data`` lines joined by ``"\\n"``, a blank line dispatches, lines
  starting with ``:`` are comments, ``event:`` names the event, ``id``/``retry``/unknown fields are
  ignored. Lines end at CR, LF or CRLF and nowhere else.
* :class:`AnthropicAssembler` — Messages (§4.5): the ``message`` object of a non-streamed call.
* :class:`ResponsesAssembler` — Responses (§1.6): the ``response`` object of a non-streamed call.
* :class:`ChatAssembler` — Chat Completions and its dialects (§2, §3): the ``chat.completion`` object.
* :class:`GeminiAssembler` — Gemini ``streamGenerateContent?alt=sse`` (§5.5): the
  ``GenerateContentResponse`` object.

Each assembler's invariant, for a server that streams what it would return: ``finish(stream(r)) == r``,
key order included (so both serialize to the same compact JSON bytes, and a streamed session captures
the same continuation payload bytes as a non-streamed one). Where the stream does not carry the non-streamed
key order, the assembler restores the order the non-streamed wire uses; the class docstrings say where.

Deltas: as it is fed, every assembler also records what the caller may see at once, as
:class:`StreamEvent` values taken with ``events()`` (``reasoning`` / ``text`` fragments and ``tool_call``
fragments), so a session streaming to its caller reads the same bytes once, through the same assembler
(:meth:`reasonstate.Session.stream`). Invariant: the ``delta`` of the ``reasoning`` events concatenated
is the reasoning text the codec decodes from ``finish()``, and likewise for ``text`` (where the codec joins
pieces with a separator, the separator is emitted as a delta of its own); the events are a view, never an
input: ``finish()`` does not depend on whether or when they were taken.

Errors (from :mod:`reasonstate.errors`): an event that is not JSON, or not the shape the protocol
requires, is :class:`MalformedResponse`; an error the stream reports is :class:`VendorError` (body = the
vendor's error object); a stream that ends before its terminal event is :class:`StreamInterrupted` —
wherever it was cut: an event the body ended inside of is discarded, never parsed (the standard's rule),
so a cut JSON line is an interruption, not a malformed answer.

Line splitting: feed *SSE* lines. ``str.splitlines`` (which ``httpx2``'s ``iter_lines`` uses) also splits
at U+0085, U+2028, U+2029 and other characters a JSON encoder may leave unescaped inside a string, which
cuts one ``data`` line in two; ``feed_bytes`` splits at CR/LF only and is safe for any payload.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from reasonstate.errors import MalformedResponse, StreamInterrupted, VendorError

__all__ = [
    "AnthropicAssembler",
    "ChatAssembler",
    "GeminiAssembler",
    "ResponsesAssembler",
    "SSEEvent",
    "SSEParser",
    "StreamAssembler",
    "StreamEvent",
]

_TERMINATOR = re.compile(r"\r\n|\r|\n")
_BYTES_TERMINATOR = re.compile(rb"\r\n|\r|\n")


# -- SSE ---------------------------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class SSEEvent:
    """One dispatched server-sent event: its ``event:`` name (None when the event had no ``event`` field)
    and its data (the ``data`` lines joined by ``"\\n"``)."""

    event: str | None
    data: str


class SSEParser:
    """Server-sent events from lines: ``feed(line)`` returns the events that line completed.

    Invariant: for events ``e`` framed as ``event: <name>\\ndata: <line 1>\\ndata: <line 2>...\\n\\n``,
    ``[x for line in lines(frame(e)) for x in feed(line)] == e`` and then ``finish() is None``.

    ``feed`` takes one line without its terminator; a string holding CR, LF or CRLF is split there first
    (a trailing terminator just ends its line), so ``feed("data: x\\n")`` is ``feed("data: x")``.
    ``feed_bytes`` takes raw body chunks of any size (UTF-8; a CRLF split across two chunks is one
    terminator). A leading byte-order mark is dropped, as the standard says.

    ``finish()`` ends the body. An event the body ended inside of (its blank line never came) is
    discarded, as the standard says and as the vendor SDKs' decoders do: a cut stream never yields a cut
    event. ``finish()`` returns what was discarded (for a diagnostic), or None when the body ended between
    events.
    """

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []
        self._started = False
        self._pending = b""  # feed_bytes: the unterminated last line so far
        self._after_cr = False  # feed_bytes: the last chunk ended with CR (maybe half of a CRLF)

    def feed(self, line: str) -> list[SSEEvent]:
        """The events completed by ``line`` (normally zero or one)."""
        parts = _TERMINATOR.split(line)
        if len(parts) > 1 and parts[-1] == "":
            parts.pop()
        events: list[SSEEvent] = []
        for part in parts:
            self._line(part, events)
        return events

    def feed_bytes(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by a raw chunk of the body."""
        if not chunk:
            return []
        if self._after_cr:  # the last chunk ended with CR: an LF starting this one completes that CRLF
            self._after_cr = False
            chunk = chunk.removeprefix(b"\n")
        buffer = self._pending + chunk
        lines = _BYTES_TERMINATOR.split(buffer)
        self._pending = lines.pop()  # the unterminated rest (b"" when the buffer ended a line)
        self._after_cr = buffer.endswith(b"\r")
        events: list[SSEEvent] = []
        for raw in lines:
            self._line(_decode(raw), events)
        return events

    def finish(self) -> str | None:
        """The body ended: the data of an unfinished event (discarded), or None if there was none."""
        pending, self._pending = self._pending, b""
        if pending:  # an unterminated last line (maybe cut inside a character): it joins the discarded event
            self._line(pending.decode("utf-8", "replace"), [])
        discarded, event = self._data, self._event
        self._data, self._event = [], None
        return "\n".join(discarded) if discarded or event is not None else None

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not self._started:
            self._started = True
            line = line.removeprefix("\ufeff")
        if line == "":
            self._dispatch(events)
            return
        if line.startswith(":"):
            return  # a comment (keep-alive)
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        # id, retry and unknown fields do not change an event's name or data

    def _dispatch(self, events: list[SSEEvent]) -> None:
        data, event = self._data, self._event
        self._data, self._event = [], None
        if data:  # an event without data lines is not dispatched (the standard)
            events.append(SSEEvent(event=event or None, data="\n".join(data)))


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedResponse(f"stream line is not UTF-8: {raw[:80]!r}") from exc


# -- what the caller sees while the answer streams ---------------------------------------------------------

#: the kinds of :class:`StreamEvent`
STREAM_EVENT_KINDS = ("reasoning", "text", "tool_call")


@attrs.frozen(slots=True)
class StreamEvent:
    """A fragment of a model's answer, as it arrives (``session.stream(...)``; ``run(on_event=...)``).

    ``kind`` is ``"reasoning"`` (visible reasoning: Anthropic thinking, an OpenAI reasoning summary,
    ``reasoning_content``, a Gemini thought), ``"text"`` (the answer) or ``"tool_call"``. ``delta`` is the
    new text: for a tool call, a fragment of its arguments' JSON text as the vendor streams it (Gemini
    sends each call whole: its arguments in one compact-JSON delta); the first event of a call may have an
    empty delta. Tool-call events also carry ``call_id`` (the vendor's id for the call; None only where the
    vendor streams a call without one, as Gemini may: ``reply.tool_calls[index].id`` is then the id
    reasonstate derives), ``name`` (the tool's name, once known) and ``index`` (the call's position among
    the reply's tool calls). Reasoning and text events have ``call_id``, ``name`` and ``index`` None.

    Invariant: the deltas of one kind, concatenated in order, are ``reply.reasoning`` / ``reply.text`` of
    the :class:`~reasonstate.Reply` the same answer gives (opaque payloads, such as signatures and
    encrypted reasoning, are never in an event).
    """

    kind: str
    delta: str
    call_id: str | None = None
    name: str | None = None
    index: int | None = None


# -- the assembler protocol --------------------------------------------------------------------------------


class StreamAssembler:
    """Feed an SSE stream line by line (or chunk by chunk), then ``finish()`` for the final response.

    Subclasses handle one parsed event at a time (``_event``) and build the result (``_result``);
    ``assemble(lines)`` is ``feed`` every line, then ``finish()``.
    """

    def __init__(self) -> None:
        self._parser = SSEParser()
        self._out: list[StreamEvent] = []

    def events(self) -> list[StreamEvent]:
        """The :class:`StreamEvent` values recorded since the last call, in order (and forgets them)."""
        out, self._out = self._out, []
        return out

    def _emit(
        self,
        kind: str,
        delta: str,
        *,
        call_id: str | None = None,
        name: str | None = None,
        index: int | None = None,
    ) -> None:
        if delta or kind == "tool_call":
            self._out.append(StreamEvent(kind, delta, call_id, name, index))

    @classmethod
    def assemble(cls, lines: Iterable[str]) -> dict[str, Any]:
        """The final response of a whole stream given as lines."""
        assembler = cls()
        for line in lines:
            assembler.feed(line)
        return assembler.finish()

    def feed(self, line: str) -> None:
        """One SSE line (without its terminator)."""
        for event in self._parser.feed(line):
            self._event(event)

    def feed_bytes(self, chunk: bytes) -> None:
        """One raw chunk of the response body (split at CR/LF only: safe for any payload)."""
        for event in self._parser.feed_bytes(chunk):
            self._event(event)

    def finish(self) -> dict[str, Any]:
        """The body ended: the final response, or the error the stream amounts to."""
        cut = self._parser.finish()
        try:
            return self._result()
        except StreamInterrupted as exc:
            if cut is None:
                raise
            raise StreamInterrupted(f"{exc}; the body ended inside an event: {cut[:80]!r}") from exc

    def _event(self, event: SSEEvent) -> None:
        raise NotImplementedError

    def _result(self) -> dict[str, Any]:
        raise NotImplementedError


def _json_object(event: SSEEvent, what: str) -> dict[str, Any]:
    try:
        value = json.loads(event.data)
    except ValueError as exc:
        raise MalformedResponse(f"{what} is not JSON: {event.data[:80]!r}") from exc
    if not isinstance(value, dict):
        raise MalformedResponse(f"{what} is not a JSON object")
    return value


def _in_wire_order(value: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """``value`` with the keys named in ``order`` in that order; every other key stays right after the
    key it followed in ``value`` (at the front when it came first)."""
    after: dict[str | None, list[str]] = {}
    anchor: str | None = None
    for key in value:
        if key in order:
            anchor = key
        else:
            after.setdefault(anchor, []).append(key)
    out = {key: value[key] for key in after.get(None, ())}
    for key in order:
        if key in value:
            out[key] = value[key]
            out.update((extra, value[extra]) for extra in after.get(key, ()))
    return out


# -- Anthropic Messages (§4.5) ----------------------------------------------------------------------------

#: the top-level key order of a non-streamed Messages response (docs/protocols.md §4.6; the emulator's body)
_MESSAGE_ORDER = ("id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage")
#: the usage key order of a non-streamed response (§4.6 example; the rest in the order §4.4 lists them)
_USAGE_ORDER = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cache_creation",
    "output_tokens",
    "output_tokens_details",
    "server_tool_use",
    "service_tier",
    "speed",
    "inference_geo",
)
#: the key order of each known block type in a non-streamed response (§4.6)
_BLOCK_ORDER: dict[str, tuple[str, ...]] = {
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "text": ("type", "text", "citations"),
    "tool_use": ("type", "id", "name", "input"),
}
#: block types whose ``input`` is streamed as ``input_json_delta`` (the SDK's ``TRACKS_TOOL_INPUT``)
_TOOL_INPUT_BLOCKS = ("tool_use", "server_tool_use")
#: delta type -> the block type it extends
_DELTA_BLOCK: dict[str, tuple[str, ...]] = {
    "text_delta": ("text",),
    "citations_delta": ("text",),
    "thinking_delta": ("thinking",),
    "signature_delta": ("thinking",),
    "input_json_delta": _TOOL_INPUT_BLOCKS,
}


@attrs.define(slots=True)
class _OpenBlock:
    value: dict[str, Any]
    partial_json: list[str] | None = None  # input_json_delta pieces, once one arrived
    stopped: bool = False
    call: int | None = None  # a tool_use block: its position among the message's tool calls


class AnthropicAssembler(StreamAssembler):
    """The Messages ``message`` object from its SSE stream (docs/protocols.md §4.5).

    Invariant: for a server that streams what it would return, ``finish(stream(m)) == m`` with the same
    key order (§4.6): top level ``id, type, role, model, content, stop_reason, stop_sequence, usage``;
    blocks ``thinking``: ``type, thinking, signature``; ``redacted_thinking``: ``type, data``; ``text``:
    ``type, text`` (+ ``citations``); ``tool_use``: ``type, id, name, input``; usage ``input_tokens,
    cache_creation_input_tokens, cache_read_input_tokens, cache_creation, output_tokens,
    output_tokens_details, server_tool_use, service_tier, ...``. The stream does not carry that order (a
    ``message_start`` usage has no final ``output_tokens``, a thinking block's signature arrives last), so
    these keys are put in it; any other key stays right after the key it followed on the wire.

    Assembly:

    * ``message_start`` gives the skeleton (its ``content`` blocks, normally none, count as complete);
    * ``content_block_start`` opens block ``index`` (which must be the next one); ``text_delta``,
      ``thinking_delta`` append; ``signature_delta`` sets the signature; ``citations_delta`` appends its
      ``citation`` to ``citations``; ``input_json_delta`` pieces are concatenated and, at
      ``content_block_stop``, the block's ``input`` is their JSON parse (``{}`` when they concatenate to
      nothing); text that is not a JSON object stays the block's ``input`` as a string (never a silent
      ``{}``: the decoder reads it as a call with broken arguments). A block
      that got no ``input_json_delta`` keeps the ``input`` it started with. A delta of an unknown type,
      or of a type that does not fit its block, is :class:`MalformedResponse`: it would be lost;
    * ``message_delta``: every non-null field of ``delta`` (``stop_reason``, ``stop_sequence``, ...) is
      set on the message and every non-null ``usage`` field replaces the ``message_start`` one (counts are
      cumulative; a null or absent one leaves the ``message_start`` value: what the SDK's accumulator
      does), so ``output_tokens`` comes from the delta and the cache fields from ``message_start`` unless
      the delta has them;
    * ``message_stop`` ends the message; later events are ignored. Without it: :class:`StreamInterrupted`;
    * ``error`` → :class:`VendorError` with the event as body; ``ping`` and unknown event types are ignored
      (Anthropic may add event types).

    The event type is the JSON ``type`` field (the SSE ``event:`` name when that is missing).
    """

    def __init__(self) -> None:
        super().__init__()
        self._message: dict[str, Any] | None = None
        self._blocks: list[_OpenBlock] = []
        self._stopped = False
        self._calls = 0

    def _event(self, event: SSEEvent) -> None:
        if self._stopped:
            return
        data = _json_object(event, "stream event")
        kind = data.get("type", event.event)
        if kind == "error":
            error = data.get("error")
            detail = (
                f"{error.get('type')}: {error.get('message')}" if isinstance(error, Mapping) else str(error)
            )
            raise VendorError(f"Anthropic stream error: {detail}", body=data)
        if kind == "message_start":
            self._start(data)
        elif kind == "content_block_start":
            self._require_message(kind)
            self._block_start(data)
        elif kind == "content_block_delta":
            self._require_message(kind)
            self._block_delta(self._open_block(data, kind), data.get("delta"))
        elif kind == "content_block_stop":
            self._require_message(kind)
            _close_block(self._open_block(data, kind), data["index"])
        elif kind == "message_delta":
            self._message_delta(self._require_message(kind), data)
        elif kind == "message_stop":
            self._require_message(kind)
            self._close()
        # ping, and event types this module does not know, change nothing

    def _start(self, data: Mapping[str, Any]) -> None:
        if self._message is not None:
            raise MalformedResponse("a second message_start in one stream")
        message = data.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content", []), list):
            raise MalformedResponse("message_start without a message object")
        self._message = dict(message)
        for block in message.get("content", []):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise MalformedResponse("message_start content holds an untyped block")
            self._blocks.append(_OpenBlock(dict(block), stopped=True))

    def _require_message(self, kind: Any) -> dict[str, Any]:
        if self._message is None:
            raise MalformedResponse(f"{kind} before message_start")
        return self._message

    def _block_start(self, data: Mapping[str, Any]) -> None:
        index, block = data.get("index"), data.get("content_block")
        if index != len(self._blocks):
            raise MalformedResponse(f"content_block_start index {index!r}, expected {len(self._blocks)}")
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise MalformedResponse(f"content_block_start {index} without a typed content_block")
        opened = _OpenBlock(dict(block))
        self._blocks.append(opened)
        kind = block["type"]
        if kind == "tool_use":
            opened.call, self._calls = self._calls, self._calls + 1
            self._emit_call(opened, "")
        elif kind in ("text", "thinking") and isinstance(block.get(kind), str):
            self._emit("text" if kind == "text" else "reasoning", block[kind])

    def _emit_call(self, block: _OpenBlock, delta: str) -> None:
        call_id, name = block.value.get("id"), block.value.get("name")
        self._emit(
            "tool_call",
            delta,
            call_id=call_id if isinstance(call_id, str) else None,
            name=name if isinstance(name, str) else None,
            index=block.call,
        )

    def _open_block(self, data: Mapping[str, Any], kind: str) -> _OpenBlock:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self._blocks):
            raise MalformedResponse(f"{kind} for content block {index!r}, which was never started")
        block = self._blocks[index]
        if block.stopped:
            raise MalformedResponse(f"{kind} for content block {index} after its content_block_stop")
        return block

    def _block_delta(self, block: _OpenBlock, delta: Any) -> None:
        if not isinstance(delta, Mapping):
            raise MalformedResponse("content_block_delta without a delta object")
        kind, target = delta.get("type"), block.value["type"]
        if target not in _DELTA_BLOCK.get(str(kind), ()):
            raise MalformedResponse(f"a {kind!r} delta for a {target!r} block")
        value = block.value
        if kind == "citations_delta":
            citations = value.get("citations")
            value["citations"] = [*(citations if isinstance(citations, list) else ()), delta.get("citation")]
            return
        field, text = {
            "text_delta": ("text", delta.get("text")),
            "thinking_delta": ("thinking", delta.get("thinking")),
            "signature_delta": ("signature", delta.get("signature")),
            "input_json_delta": ("partial_json", delta.get("partial_json")),
        }[str(kind)]
        if not isinstance(text, str):
            raise MalformedResponse(f"a {kind} without a string {field}")
        if kind == "input_json_delta":
            block.partial_json = [*(block.partial_json or ()), text]
            if block.call is not None:
                self._emit_call(block, text)
        elif kind == "signature_delta":
            value["signature"] = text  # delivered once, whole, before content_block_stop (§4.5)
        else:
            previous = value.get(field)
            value[field] = (previous if isinstance(previous, str) else "") + text
            self._emit("text" if kind == "text_delta" else "reasoning", text)

    def _message_delta(self, message: dict[str, Any], data: Mapping[str, Any]) -> None:
        delta, usage = data.get("delta", {}), data.get("usage", {})
        if not isinstance(delta, Mapping) or not isinstance(usage, Mapping):
            raise MalformedResponse("message_delta with a non-object delta or usage")
        message.update((k, v) for k, v in delta.items() if v is not None)
        if usage:
            start = message.get("usage")
            merged = dict(start) if isinstance(start, Mapping) else {}
            merged.update((k, v) for k, v in usage.items() if v is not None)
            message["usage"] = merged

    def _close(self) -> None:
        for i, block in enumerate(self._blocks):
            if not block.stopped:
                raise MalformedResponse(f"message_stop while content block {i} is still open")
        self._stopped = True

    def _result(self) -> dict[str, Any]:
        if not self._stopped or self._message is None:
            raise StreamInterrupted("the stream ended before message_stop")
        message = dict(self._message)
        message["content"] = [
            _in_wire_order(b.value, _BLOCK_ORDER.get(str(b.value["type"]), ())) for b in self._blocks
        ]
        if isinstance(message.get("usage"), Mapping):
            message["usage"] = _in_wire_order(message["usage"], _USAGE_ORDER)
        return _in_wire_order(message, _MESSAGE_ORDER)


def _close_block(block: _OpenBlock, index: int) -> None:
    if block.partial_json is not None:
        text = "".join(block.partial_json)
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            value = None
        # a model cut short (max_tokens) or confused streams argument text that is not a JSON object: the
        # text itself is kept as ``input`` (never a silent {}), and the decoder reads it as a broken call
        block.value["input"] = value if isinstance(value, dict) else text
    block.stopped = True


# -- OpenAI Responses (§1.6) ------------------------------------------------------------------------------


class ResponsesAssembler(StreamAssembler):
    """The Responses ``response`` object from its SSE stream (docs/protocols.md §1.6).

    Invariant: for a server that streams what it would return, ``finish(stream(r)) == r``, in wire key
    order: the JSON of the terminal event is parsed as sent. The output items are taken from
    ``response.output_item.done`` (the ``added`` copy of a reasoning item "may be incomplete": §1.2),
    everything else from ``response.completed``/``response.incomplete``: when the terminal response has a
    non-empty ``output``, item ``i`` is the ``output_item.done`` item of index ``i`` (or the terminal's own
    item ``i`` when none arrived); when it has none, the ``done`` items in index order.

    ``response.failed`` → :class:`VendorError` (body = the response's ``error``); ``error`` →
    :class:`VendorError` (body = the event); no terminal event → :class:`StreamInterrupted`; an event that
    is not a JSON object → :class:`MalformedResponse`. The event type is the JSON ``type`` field.
    """

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[int, Any] = {}
        self._terminal: dict[str, Any] | None = None
        self._calls: dict[int, tuple[str | None, str | None, int]] = {}  # output index -> id, name, position
        self._reasoning_at: tuple[Any, Any] | None = None  # (output index, content index) of raw reasoning

    def _event(self, event: SSEEvent) -> None:
        data = _json_object(event, "stream event")
        kind = data.get("type")
        shown = isinstance(kind, str) and kind.endswith(".delta")
        if shown or kind == "response.reasoning_summary_part.added":
            self._delta(str(kind), data)
        elif kind == "response.output_item.added":
            item = data.get("item")
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
                call = (
                    call_id if isinstance(call_id, str) else None,
                    name if isinstance(name, str) else None,
                    len(self._calls),
                )
                at = data.get("output_index")
                if isinstance(at, int) and not isinstance(at, bool):
                    self._calls[at] = call
                self._emit(
                    "tool_call",
                    arguments if isinstance(arguments, str) else "",
                    call_id=call[0],
                    name=call[1],
                    index=call[2],
                )
        if kind == "response.output_item.done" and isinstance(data.get("output_index"), int):
            self._items[data["output_index"]] = data.get("item")
        elif kind in ("response.completed", "response.incomplete") and isinstance(data.get("response"), dict):
            self._terminal = data["response"]
        elif kind == "response.failed":
            response = data.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            raise VendorError(f"OpenAI response failed: {error}", body=error)
        elif kind == "error":
            raise VendorError(f"OpenAI stream error: {data.get('message')}", body=data)

    def _delta(self, kind: str, data: Mapping[str, Any]) -> None:
        """What the caller sees of a delta event. The codec joins an item's summary (or raw reasoning)
        parts with a blank line: the separator is emitted when the next part starts."""
        delta = data.get("delta")
        if kind == "response.reasoning_summary_part.added":
            if data.get("summary_index", 0) != 0:
                self._emit("reasoning", "\n\n")
            return
        if not isinstance(delta, str):
            return
        if kind == "response.reasoning_summary_text.delta":
            self._emit("reasoning", delta)
        elif kind == "response.reasoning_text.delta":
            where = (data.get("output_index"), data.get("content_index", 0))
            if where != self._reasoning_at and where[1] != 0:  # the next part of the same item
                self._emit("reasoning", "\n\n")
            self._reasoning_at = where
            self._emit("reasoning", delta)
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            self._emit("text", delta)
        elif kind == "response.function_call_arguments.delta":
            at = data.get("output_index")
            call = self._calls.get(at) if isinstance(at, int) and not isinstance(at, bool) else None
            if call is not None:
                self._emit("tool_call", delta, call_id=call[0], name=call[1], index=call[2])

    def _result(self) -> dict[str, Any]:
        if self._terminal is None:
            raise StreamInterrupted("the stream ended before response.completed")
        output = self._terminal.get("output")
        if not isinstance(output, list):  # the non-streamed answer without it is refused too
            raise MalformedResponse("the terminal response event has no output list")
        if output:
            merged = [self._items.get(i, item) for i, item in enumerate(output)]
        else:
            merged = [self._items[i] for i in sorted(self._items)]
        return {**self._terminal, "output": merged}


# -- Chat Completions (§2, §3) ----------------------------------------------------------------------------

#: the key order of a non-streamed ``choices[0].message`` (then any other delta field, first seen first)
_CHAT_MESSAGE_ORDER = ("role", "content", "reasoning", "reasoning_content", "tool_calls")
_DONE = "[DONE]"


class ChatAssembler(StreamAssembler):
    """The ``chat.completion`` object from its SSE stream (docs/protocols.md §2, §3; ``include_usage`` on).

    Invariant: for a server that streams what it would return, ``finish(stream(c)) == c`` on
    ``choices[0].message`` (key order ``role, content, reasoning, reasoning_content, tool_calls``, then
    any other delta field in first-seen order), ``finish_reason``, ``usage``, ``id``, ``created``,
    ``model`` and ``system_fingerprint``; the result is ``{id, object: "chat.completion", created, model,
    [system_fingerprint], choices: [{index: 0, message, logprobs: null, finish_reason}], usage}``.

    Assembly (choice 0 only): string deltas of a field concatenate; a field that only ever came as null
    stays null; any other field takes its last non-null value; ``role`` defaults to ``"assistant"`` and
    ``content`` to null. Tool calls are keyed by ``index``: ``id``/``type`` take the last string seen,
    ``function.name``/``function.arguments`` concatenate (``arguments`` is kept as the exact string).
    ``id``, ``created``, ``model``, ``system_fingerprint`` come from the first chunk that has them,
    ``usage`` from the last non-null one.

    A chunk with an ``error`` key → :class:`VendorError` (body = that error); a chunk that is not a JSON
    object → :class:`MalformedResponse`; no ``finish_reason`` or no ``data: [DONE]`` →
    :class:`StreamInterrupted`. Events after ``[DONE]`` are ignored. A chunk is one SSE event (``data``
    lines up to a blank line, as servers frame them), not one ``data`` line.
    """

    _HEAD: ClassVar[tuple[str, ...]] = ("id", "created", "model", "system_fingerprint")

    def __init__(self) -> None:
        super().__init__()
        self._head: dict[str, Any] = {}
        self._usage: Any = None
        self._finish_reason: str | None = None
        self._done = False
        self._fields: dict[str, list[Any]] = {}  # delta key -> pieces, in first-seen order
        self._calls: dict[int, dict[str, Any]] = {}
        self._reasoning_key: str | None = None  # the first reasoning field seen: the one shown as it comes

    def _event(self, event: SSEEvent) -> None:
        if self._done:
            return
        if event.data.strip() == _DONE:
            self._done = True
            return
        chunk = _json_object(event, "stream chunk")
        if "error" in chunk:
            raise VendorError(f"the stream reported an error: {chunk['error']}", body=chunk["error"])
        for key in self._HEAD:
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise MalformedResponse("a stream chunk's choices is not a list")
        for choice in choices or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("finish_reason"), str):
                self._finish_reason = choice["finish_reason"]
            delta = choice.get("delta")
            delta = {} if delta is None else delta
            if not isinstance(delta, Mapping):
                raise MalformedResponse("a choice delta is not an object")
            for key, value in delta.items():
                if key == "tool_calls":
                    self._call_deltas(value)
                elif key == "role":  # names the message (some servers repeat it): not text to join
                    if value is not None and not isinstance(value, str):
                        raise MalformedResponse("a delta role is not a string")
                    if value is not None:
                        self._fields["role"] = [value]
                else:
                    self._fields.setdefault(key, []).append(value)
                    self._show(key, value)

    def _show(self, key: str, value: Any) -> None:
        """A text or reasoning delta as a :class:`StreamEvent`. Some servers stream the same reasoning
        under both ``reasoning`` and ``reasoning_content``: only the first of the two seen is shown."""
        if not isinstance(value, str):
            return
        if key == "content":
            self._emit("text", value)
        elif key in ("reasoning", "reasoning_content"):
            if self._reasoning_key is None:
                self._reasoning_key = key
            if key == self._reasoning_key:
                self._emit("reasoning", value)

    def _call_deltas(self, deltas: Any) -> None:
        if deltas is not None and not isinstance(deltas, list):
            raise MalformedResponse("a delta's tool_calls is not a list")
        for delta in deltas or ():
            if not isinstance(delta, Mapping):
                raise MalformedResponse("a tool_calls delta is not an object")
            index = delta.get("index")
            if isinstance(index, bool) or not isinstance(index, int):
                raise MalformedResponse("a tool_calls delta has no integer index")
            call = self._calls.setdefault(
                index,
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            for key in ("id", "type"):
                if delta.get(key) is not None and not isinstance(delta[key], str):
                    raise MalformedResponse(f"a tool_calls delta's {key} is not a string")
                if isinstance(delta.get(key), str):
                    call[key] = delta[key]
            function = delta.get("function")
            function = {} if function is None else function
            if not isinstance(function, Mapping):
                raise MalformedResponse("a tool_calls delta has a non-object function")
            for key in ("name", "arguments"):
                piece = function.get(key)
                if piece is not None and not isinstance(piece, str):
                    raise MalformedResponse(f"a tool_calls delta's function.{key} is not a string")
                if isinstance(piece, str):
                    call["function"][key] += piece
            arguments = function.get("arguments")
            self._emit(
                "tool_call",
                arguments if isinstance(arguments, str) else "",
                call_id=call["id"],
                name=call["function"]["name"] or None,
                index=sorted(self._calls).index(index),
            )

    def _result(self) -> dict[str, Any]:
        if self._finish_reason is None or not self._done:
            raise StreamInterrupted("the stream ended before its finish_reason and [DONE]")
        fields = self._fields
        message: dict[str, Any] = {}
        for key in _CHAT_MESSAGE_ORDER:
            if key == "tool_calls":
                if self._calls:
                    message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
            elif key in fields or key in ("role", "content"):
                message[key] = _joined(fields.get(key, []))
        message["role"] = message["role"] or "assistant"
        for key, pieces in fields.items():
            if key not in message:
                message[key] = _joined(pieces)
        head = self._head
        completion: dict[str, Any] = {
            "id": head.get("id"),
            "object": "chat.completion",
            "created": head.get("created"),
            "model": head.get("model"),
        }
        if "system_fingerprint" in head:
            completion["system_fingerprint"] = head["system_fingerprint"]
        completion["choices"] = [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish_reason}
        ]
        completion["usage"] = self._usage
        return completion


def _joined(pieces: list[Any]) -> Any:
    """String deltas concatenate; a field that only ever came as null stays null; else the last value."""
    strings = [p for p in pieces if isinstance(p, str)]
    if strings:
        if len(strings) != len([p for p in pieces if p is not None]):
            raise MalformedResponse("a streamed text field mixes text with other values")
        return "".join(strings)
    values = [p for p in pieces if p is not None]
    return values[-1] if values else None


# -- Gemini generateContent (§5.5) ------------------------------------------------------------------------


class GeminiAssembler(StreamAssembler):
    """The ``GenerateContentResponse`` of a ``streamGenerateContent?alt=sse`` stream (docs/protocols.md §5.5).

    Each event's data is a ``GenerateContentResponse`` chunk; the answer is their union. Invariant, for a
    server that streams what it would return (each Part whole, or a text Part cut into consecutive text
    fragments, its signature on the last one or on an empty-text fragment after them): ``finish(stream(r))
    == r``, key order included (the response and candidate keys the API writes in proto field order are
    put in that order; content and Part keys stay in first-seen order), so a streamed and a non-streamed
    call capture the same Part payload bytes.

    Assembly, per candidate (by ``index``, else position): the Parts of every chunk are appended in order,
    except that a text fragment continues the previous Part when both are text Parts with the same
    ``thought`` flag and the previous one has no ``thoughtSignature`` yet (a signature ends its Part: a
    signed Part is never merged with another, §5.4): its text is appended and its other fields (the
    signature) are added. Function calls and every other Part stay whole. Any other candidate or top-level
    field takes its last value (``usageMetadata`` is cumulative, on the last chunk), keys in first-seen
    order. A chunk with an ``error`` → :class:`VendorError` (body = that error); a chunk that is not a JSON
    object → :class:`MalformedResponse`; a stream whose first candidate never got a ``finishReason`` →
    :class:`StreamInterrupted` (the API has no end-of-stream event).
    """

    def __init__(self) -> None:
        super().__init__()
        self._response: dict[str, Any] = {}
        self._candidates: dict[int, dict[str, Any]] = {}  # index -> candidate fields (content built last)
        self._contents: dict[int, dict[str, Any]] = {}  # index -> content fields other than parts
        self._parts: dict[int, list[dict[str, Any]]] = {}
        self._shown_calls = 0

    def _event(self, event: SSEEvent) -> None:
        chunk = _json_object(event, "stream chunk")
        error = chunk.get("error")
        if error is not None:
            detail = error.get("message") if isinstance(error, Mapping) else error
            raise VendorError(f"Gemini stream error: {detail}", body=chunk)
        for key, value in chunk.items():
            if key == "candidates":
                if not isinstance(value, list):
                    raise MalformedResponse("a stream chunk's candidates is not a list")
                self._response.setdefault("candidates", None)
                for position, candidate in enumerate(value):
                    self._candidate(position, candidate)
            else:
                self._response[key] = value

    def _candidate(self, position: int, candidate: Any) -> None:
        if not isinstance(candidate, Mapping):
            raise MalformedResponse("a stream chunk's candidate is not an object")
        index = candidate.get("index", position)
        index = index if isinstance(index, int) and not isinstance(index, bool) else position
        fields = self._candidates.setdefault(index, {})
        for key, value in candidate.items():
            if key != "content":
                fields[key] = value
                continue
            fields.setdefault("content", None)
            if not isinstance(value, Mapping):
                raise MalformedResponse("a stream chunk's candidate content is not an object")
            content = self._contents.setdefault(index, {})
            parts = self._parts.setdefault(index, [])
            for name, field in value.items():
                if name != "parts":
                    content[name] = field
                    continue
                content.setdefault("parts", None)
                if not isinstance(field, list):
                    raise MalformedResponse("a stream chunk's content parts is not a list")
                for part in field:
                    if not isinstance(part, Mapping):
                        raise MalformedResponse("a stream chunk's part is not an object")
                    _add_part(parts, part)
                    if index == 0:
                        self._show(part)

    def _show(self, part: Mapping[str, Any]) -> None:
        """A Part of the first candidate (the one the codec decodes) as a :class:`StreamEvent`."""
        call = part.get("functionCall")
        if isinstance(call, Mapping):
            call_id, name = call.get("id"), call.get("name")
            self._emit(
                "tool_call",
                json.dumps(call.get("args", {}), ensure_ascii=False, separators=(",", ":")),
                call_id=call_id if isinstance(call_id, str) else None,
                name=name if isinstance(name, str) else None,
                index=self._shown_calls,
            )
            self._shown_calls += 1
        elif isinstance(part.get("text"), str):
            self._emit("reasoning" if part.get("thought") else "text", part["text"])

    def _result(self) -> dict[str, Any]:
        first = self._candidates.get(min(self._candidates)) if self._candidates else None
        if first is None or not isinstance(first.get("finishReason"), str):
            if not self._candidates and "promptFeedback" in self._response:
                return dict(self._response)  # a blocked prompt: no candidate ever comes
            raise StreamInterrupted("the stream ended before the candidate's finishReason")
        candidates = []
        for index in sorted(self._candidates):
            candidate = dict(self._candidates[index])
            if index in self._contents:
                content = dict(self._contents[index])
                if "parts" in content:
                    content["parts"] = self._parts[index]
                candidate["content"] = content
            candidates.append(_in_wire_order(candidate, _GEMINI_CANDIDATE_ORDER))
        return _in_wire_order({**self._response, "candidates": candidates}, _GEMINI_RESPONSE_ORDER)


def _add_part(parts: list[dict[str, Any]], part: Mapping[str, Any]) -> None:
    """Append a streamed Part, or continue the previous text Part with it (see :class:`GeminiAssembler`)."""
    previous = parts[-1] if parts else None
    if (
        previous is not None
        and isinstance(previous.get("text"), str)
        and isinstance(part.get("text"), str)
        and previous.get("thought") == part.get("thought")
        and "thoughtSignature" not in previous
        and not any(key not in _TEXT_FIELDS for key in (*previous, *part))
    ):
        previous["text"] += part["text"]
        for key, value in part.items():
            if key != "text":
                previous[key] = value
        return
    parts.append(dict(part))


#: the key order of a non-streamed response and candidate (proto field order, as the REST API writes them:
#: §5.5); the last chunk carries ``finishReason`` and ``usageMetadata`` after the keys every chunk has
_GEMINI_RESPONSE_ORDER = ("candidates", "promptFeedback", "usageMetadata", "modelVersion", "responseId")
_GEMINI_CANDIDATE_ORDER = (
    "content",
    "finishReason",
    "finishMessage",
    "index",
    "safetyRatings",
    "citationMetadata",
    "tokenCount",
    "groundingMetadata",
    "avgLogprobs",
    "logprobsResult",
    "urlContextMetadata",
)
#: the fields of a text Part that may be streamed in fragments (types.Part, §5.1)
_TEXT_FIELDS = frozenset({"text", "thought", "thoughtSignature"})
