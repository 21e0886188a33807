"""Stream assembly, the vendor-neutral part: the SSE parser, the :class:`StreamEvent` a caller sees while
an answer streams, and :class:`StreamAssembler`, the base of each vendor room's assembler (feed the lines of a
server-sent-events stream, get the JSON object the vendor's non-streamed endpoint returns for the same
answer: docs/protocols.md §1.6, §2, §3, §4.5, §5.5).

Sans-I/O: nothing here imports a vendor SDK, opens a socket or reads a clock. The caller moves the bytes
(``http.iter_lines()``, ``http.iter_bytes()``, a file, a test transcript) and calls ``feed`` per line (or
``feed_bytes`` per chunk), then ``finish()`` once the body has ended.

* :class:`SSEParser` — the one SSE parser (WHATWG "server-sent events" line rules): ``data:`` with or
  without one leading space, several ``data`` lines joined by ``"\\n"``, a blank line dispatches, lines
  starting with ``:`` are comments, ``event:`` names the event, ``id``/``retry``/unknown fields are
  ignored. Lines end at CR, LF or CRLF and nowhere else.
* the assemblers live in their vendor's room: ``anthropic.AnthropicAssembler`` (Messages, §4.5),
  ``openai_responses.ResponsesAssembler`` (Responses, §1.6), ``openai_chat.ChatAssembler`` (Chat
  Completions and its dialects, §2, §3), ``gemini.GeminiAssembler`` (``streamGenerateContent?alt=sse``,
  §5.5); each room's ``assembler()`` builds one.

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
from typing import Any

import attrs

from reasonstate.errors import MalformedResponse, StreamInterrupted

__all__ = [
    "SSEEvent",
    "SSEParser",
    "StreamAssembler",
    "StreamEvent",
    "in_wire_order",
    "json_object",
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


def json_object(event: SSEEvent, what: str) -> dict[str, Any]:
    try:
        value = json.loads(event.data)
    except ValueError as exc:
        raise MalformedResponse(f"{what} is not JSON: {event.data[:80]!r}") from exc
    if not isinstance(value, dict):
        raise MalformedResponse(f"{what} is not a JSON object")
    return value


def in_wire_order(value: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
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
