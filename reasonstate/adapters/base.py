"""The adapter contract: a pure codec (``encode``/``decode``), its rules as data, and where the SDK call goes.

An adapter object holds configuration only (dialect, rules): the memos of an encoding live in the
:class:`Encodings` its caller owns and hands in (a session's, one per adapter it uses; a fresh one per call
when none is given). Everything a request depends on is an argument: ``encode`` is a pure function of the
session's layers (the same prefix, history, model, options and records always give the same kwargs, and so
the same bytes, whatever the memo holds: its entries are keyed so that a stale one cannot be read),
``decode`` a pure function of the vendor's JSON answer and the request that produced it. What must be
carried between calls is a value in the four layers (and so in every snapshot). The I/O is
:mod:`reasonstate.adapters.transport`; the cache predictor is :mod:`reasonstate.cache`. Each vendor API's
module is its room: its codec, its stream assembler (on :class:`StreamAssembler`, below), its cache rules
entry, and a :class:`Room` with what the guard, the commit and the exporters read of it
(docs/adding-a-vendor.md).

Streams, the vendor-neutral part: the SSE parser, the :class:`StreamEvent` a caller sees while an answer
streams, and :class:`StreamAssembler`, the base of each vendor room's assembler (feed the lines of a
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

import array
import functools
import itertools
import json
import operator
import re
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableSequence, Sequence
from typing import Any, ClassVar, Protocol, TypeVar, cast

import attrs

from reasonstate.adapters.replay import ReplayFinding, Source
from reasonstate.cache.divergence import View
from reasonstate.cache.rules import CacheRules
from reasonstate.errors import ContinuationMismatch, MalformedResponse, StreamInterrupted, VendorError
from reasonstate.prefix import Prefix
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
    TurnView,
    Usage,
    digest_of,
)
from reasonstate.state.continuation import _STRINGS, FIRST_PARTY, compact, edits
from reasonstate.state.frozen import remember
from reasonstate.state.units import RAW, SHELF_LOCK, Units, UnitSeq, as_units, pack, raw_digest

__all__ = [
    "FOREIGN_REASONING",
    "Adapter",
    "Assembler",
    "DecodedStep",
    "Encodings",
    "Endpoint",
    "Join",
    "ListEncoding",
    "ListRun",
    "ProtocolRules",
    "Room",
    "Run",
    "SSEEvent",
    "SSEParser",
    "Seal",
    "Seals",
    "StreamAssembler",
    "StreamEvent",
    "VendorRequest",
    "binding_of",
    "closed_run",
    "compact",
    "count",
    "exact_list",
    "extend_joined",
    "foreign_reasoning_as_text",
    "head_value",
    "in_wire_order",
    "json_object",
    "key_shared",
    "open_turn_encoding",
    "packed",
    "part_strings",
    "payload_digest",
    "payload_of",
    "platform_of",
    "request_digest",
    "shared_dict",
    "summary_note",
    "unit_digest",
    "without_payloads",
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
        #: (events, bytes) of what came after the answer was complete and was no JSON object: ignored
        self._trailing = (0, 0)
        #: per (kind, index): a high surrogate that ended the last delta, held for the next one
        self._held: dict[tuple[str, int | None], str] = {}

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
        # a delta ending in the first half of a UTF-16 pair keeps that half for the next delta of its kind,
        # so an emoji cut across two events reaches the caller whole (docs/protocols.md §0.3); a half that
        # never finds its pair is never shown: the answer is refused when it is committed
        held = self._held.pop((kind, index), "") if self._held else ""
        if held:  # the pair joined into its one character (a lone half stays as it is)
            delta = (held + delta).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        if delta and "\ud800" <= delta[-1] <= "\udbff":
            self._held[(kind, index)], delta = delta[-1], delta[:-1]
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
            self._dispatch(event)

    def feed_bytes(self, chunk: bytes) -> None:
        """One raw chunk of the response body (split at CR/LF only: safe for any payload)."""
        for event in self._parser.feed_bytes(chunk):
            self._dispatch(event)

    def _dispatch(self, event: SSEEvent) -> None:
        """``_event``, except for garbage after a complete answer (issue 23 item 4): once the vendor's final
        event arrived (:meth:`_complete`), an event that is no JSON object is counted and skipped, so the
        answer that was paid for is committed, with a ``stream.trailing_data`` warning in the trace. Only a
        stream that breaks before its answer is complete loses it."""
        if self._complete():
            data = event.data.strip()
            if data and data != "[DONE]":
                try:
                    whole = isinstance(json.loads(data), dict)
                except ValueError:
                    whole = False
                if not whole:
                    n, size = self._trailing
                    self._trailing = (n + 1, size + len(data))
                    return
        self._event(event)

    def _complete(self) -> bool:
        """The vendor's final event arrived: the answer is whole (each room says which event that is)."""
        return False

    def complete(self) -> bool:
        """True once the answer is whole: what the body may still hold is not part of it."""
        return self._complete()

    def cut_after_complete(self) -> None:
        """The rest of the body could not be read (the SDK refused it, the connection dropped) after the
        answer was whole: counted as trailing data, the answer kept."""
        n, size = self._trailing
        self._trailing = (n + 1, size)

    def warnings(self) -> tuple[tuple[str, Mapping[str, Any]], ...]:
        """The trace events the stream adds to the answer's commit (garbage after the final event)."""
        n, size = self._trailing
        if not n:
            return ()
        return (("stream.trailing_data", {"events": n, "bytes": size}),)

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


# -- prefix units: the compact JSON bytes of one piece of a request (a tool, a system block, a message or
# content block) and the digest divergences compare, piece by piece (docs/protocols.md §1.5, §3.4, §4.4)


def unit_digest(value: Any) -> str:
    """The digest of one prefix unit: ``digest_of(compact(value))``."""
    return digest_of(compact(value))


#: ``(fn, *arguments)`` → ``fn(*arguments)``, for a codec's pure functions of what a session's prefix holds
#: (its model name, its system text): a service builds its sessions on the same few of them, so a fresh
#: session's first request reads these values (a unit digest, a system block) instead of building them
#: (issue 21: a fresh session's constant costs). Keyed by the arguments' values, each an exact ``str`` (so
#: an entry is always true); values are shared as :meth:`Encodings.call`'s are (a caller copies one before
#: changing it). Bounded: at most :data:`_HEADS_MAX` entries, of texts of at most :data:`_HEAD_CHARS`
#: characters in all, cleared when full.
_HEADS: dict[tuple[Any, ...], Any] = {}
_HEADS_MAX = 256
_HEAD_CHARS = 1 << 16


def head_value(fn: Callable[..., _T], *args: str) -> _T:
    """``fn(*args)`` for a pure ``fn`` of the ``str`` values of a session's prefix, shared between sessions
    (:data:`_HEADS`)."""
    if not all(type(a) is str for a in args) or sum(map(len, args)) > _HEAD_CHARS:
        return fn(*args)
    key = (fn, *args)
    found = _HEADS.get(key, _MISSING)
    value: _T = remember(_HEADS, key, fn(*args), _HEADS_MAX) if found is _MISSING else found
    return value


def count(value: Any) -> int:
    """A usage figure, or 0 when the vendor left it out or sent something that is not a non-negative
    integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def summary_note(summary: str) -> str:
    """The text Compress puts before a closed turn's final answer in place of its dropped reasoning."""
    return f"(Summary of my earlier reasoning: {summary})"


#: how earlier steps' visible reasoning reaches a model that cannot take their payloads (another vendor or
#: model): ``drop`` (default) leaves it out; ``text`` shows it as clearly delimited plain text in the
#: assistant message, never disguised as the new vendor's native reasoning
FOREIGN_REASONING = ("drop", "text")


def foreign_reasoning_as_text(
    history: History,
    vendor: str,
    api: str,
    model: str,
    *,
    encodings: Encodings | None = None,
    platform: str = FIRST_PARTY,
) -> History:
    """``history`` with each reasoning part that ``vendor``/``api``/``model`` on ``platform`` cannot receive
    as its own payload turned into a delimited text part (rendered canonically by every codec).

    Pure, and memoized per closed turn in ``encodings`` (the session's; a fresh one when none is given): the
    same turn gives the same new turn value, so its encodings are reused across requests. Invariant: a turn
    with nothing foreign is returned as is.
    """
    memo = encodings if encodings is not None else Encodings()

    def view(turn: Turn) -> Turn:
        steps = tuple(_step_with_text(step, vendor, api, model, platform) for step in turn.steps)
        if all(a is b for a, b in zip(steps, turn.steps, strict=True)):
            return turn
        return attrs.evolve(turn, steps=steps)

    key: tuple[str, ...] = ("foreign_reasoning_text", vendor, api, model)
    if platform != FIRST_PARTY:  # (a memo serves one codec, so one platform: the key only says which)
        key = (*key, platform)
    turns = tuple(
        memo.encoded(turn, key, functools.partial(view, turn)) if turn.closed else view(turn)
        for turn in history.turns
    )
    if all(a is b for a, b in zip(turns, history.turns, strict=True)):
        return history
    return history.with_turns(turns)


def _step_with_text(step: Step, vendor: str, api: str, model: str, platform: str) -> Step:
    parts: list[Part] = []
    changed = False
    for part in step.parts:
        payload = payload_of(step, part)
        if (
            isinstance(part, ReasoningPart)
            and part.text
            and (payload is None or not payload.replayable_to(vendor, api, model, platform))
        ):
            note = (
                f"(Earlier reasoning by {step.model}, shown as plain text:)\n{part.text}\n"
                "(End of earlier reasoning.)\n\n"
            )
            # same position and payload index: codecs see a part whose payload they may not send, so
            # they render it canonically, as text
            parts.append(TextPart(text=note, continuation=part.continuation))
            changed = True
        else:
            parts.append(part)
    return attrs.evolve(step, parts=tuple(parts)) if changed else step


def without_payloads(
    history: History, digests: frozenset[str], *, encodings: Encodings | None = None
) -> History:
    """``history`` with the payloads whose digest is in ``digests`` made unreplayable (vendor
    ``"stripped"``), so every codec renders their parts canonically: how a continuation a vendor rejected
    is left out of later requests. Pure, memoized per closed turn in ``encodings`` (the session's; a fresh
    one when none is given); a turn without them is returned as is.
    """
    if not digests:
        return history
    memo = encodings if encodings is not None else Encodings()
    key = ("stripped", tuple(sorted(digests)))

    def view(turn: Turn) -> Turn:
        steps = tuple(
            attrs.evolve(
                step,
                continuation=tuple(
                    attrs.evolve(c, vendor="stripped") if c.digest in digests else c
                    for c in step.continuation
                ),
            )
            if any(c.digest in digests for c in step.continuation)
            else step
            for step in turn.steps
        )
        if all(a is b for a, b in zip(steps, turn.steps, strict=True)):
            return turn
        return attrs.evolve(turn, steps=steps)

    turns = tuple(
        memo.encoded(turn, key, functools.partial(view, turn)) if turn.closed else view(turn)
        for turn in history.turns
    )
    if all(a is b for a, b in zip(turns, history.turns, strict=True)):
        return history
    return history.with_turns(turns)


@attrs.frozen(slots=True)
class Seal:
    """The payloads an encoding was built from, each checked against its digest when sealed.

    ``check`` runs before every send. ``bytes`` are immutable, so while a continuation still holds the very
    payload and digest objects it was sealed with, ``sha256(payload) == digest`` still holds and nothing is
    re-hashed; a replaced attribute (an edit in memory) is re-hashed, and a sealed encoding whose source
    changed is refused either way: :class:`ContinuationMismatch`, never a send. The payload compared is the
    one stored (:attr:`~reasonstate.state.Continuation.stored_payload`): None for a payload kept as its
    strings (immutable too, verified when sealed), which an edit in memory replaces by the bytes set.
    """

    #: (continuation, its payload as stored, its digest as kept: the payload object itself, since it was
    #: verified, or the continuation itself for one kept as its strings)
    entries: tuple[tuple[Continuation, bytes | None, object], ...]

    @classmethod
    def of(cls, payloads: Sequence[Continuation]) -> Seal:
        for c in payloads:
            c.verify()
        return cls(tuple((c, _PAYLOAD(c), _DIGEST(c)) for c in payloads))

    def check(self) -> None:
        for c, payload, digest in self.entries:
            if _PAYLOAD(c) is not payload or _DIGEST(c) is not digest:
                c.verify()
                raise ContinuationMismatch(f"a replayed {c.vendor} {c.kind} payload changed since capture")


#: held while a shelf (:func:`shelved`) is checked and extended: an append and the length check before it are
#: one step, so two values extended from one shelf at once never both append to it
_SHELF = SHELF_LOCK

_I = TypeVar("_I")
_L = TypeVar("_L", bound="MutableSequence[Any]")


def shelved(shelf: _L, n: int, new: Iterable[Any]) -> _L:
    """``shelf[:n]`` followed by ``new``, as an append-only list (or array) shared by the values extended
    from one another: ``shelf`` itself, extended in place, when ``n`` is its whole length (every value reads
    only its own first items, so the longer list changes nothing it sees); else a copy of its first ``n`` (a
    value extended from an earlier one: a fork). Python work in proportion to ``new``, never to ``n``
    (issue 21: own CPU per request). From nothing (``n == 0``) always a new list: an empty value may be a
    shared constant (a codec's empty run), which no session's items may be appended to."""
    if n:
        with _SHELF:
            if len(shelf) == n:
                shelf.extend(new)
                return shelf
    grown = cast(_L, shelf[:n])
    grown.extend(new)
    return grown


def packed(units: Sequence[str]) -> bytes:
    """``units`` packed for a run's unit shelf (32 bytes each): ``ValueError`` for a unit that is not a
    digest string (a codec's units are ``digest_of`` values, always)."""
    raw = pack(units)
    if raw is None:
        odd = [u for u in units if raw_digest(u) is None]
        raise ValueError(f"a run's units are sha256 digests, got {odd!r}")
    return raw


def upto(shelf: list[_I], n: int) -> Sequence[_I]:
    """The first ``n`` items of a shelf (:func:`shelved`): the list itself when that is all of it (never to be
    changed by the caller), else a copy."""
    return shelf if len(shelf) == n else shelf[:n]


class Seals:
    """The seals of a run of turns, flat: their entries side by side (continuation, payload, digest), so
    that :meth:`check` is identity comparisons at C speed; on a mismatch the entry that changed is found and
    refused as :meth:`Seal.check` refuses it. Flat, not one :class:`Seal` per turn: a closed turn costs the
    run three references, nothing more (issue 21: state in memory).

    The three lists are shelves (:func:`shelved`) shared by the seals extended from one another: a value
    reads its first ``len(self)`` entries, and :meth:`extended` appends the new entries in place (Python
    work in proportion to them, no copy of the earlier ones: issue 21, own CPU per request).

    ``_payloads`` and ``_digests`` are None while every entry is a payload kept as its strings, as sealed
    (payload slot None, digest slot the strings' marker: a thinking block's, mostly): nothing to keep per
    entry beside the continuation, and :meth:`check` compares the slots with those two constants at C speed
    (issue 21: state in memory). The first other entry makes them lists (of the entries so far, then kept).

    ``_checked`` is ``(count of edits, k)``: at that count of edits in memory
    (:func:`~reasonstate.state.continuation.edits`) the first ``k`` entries were found unchanged. While the
    count is the same they still are, so :meth:`check` looks only at the entries after them; a value
    extended from (or cut out of) this one shares those entries, and what was found of them."""

    __slots__ = ("_checked", "_digests", "_n", "_payloads", "_sealed")

    _sealed: list[Continuation]
    #: None: every entry's is None (see above)
    _payloads: list[bytes | None] | None
    #: each continuation's digest as kept when sealed (its payload object: :class:`Seal`), never a string;
    #: None: every entry's is the strings' marker (see above)
    _digests: list[object] | None
    _n: int
    _checked: tuple[int, int]

    def __init__(
        self,
        sealed: Iterable[Continuation] = (),
        payloads: Iterable[bytes | None] = (),
        digests: Iterable[object] = (),
    ) -> None:
        kept, stored, marks = list(sealed), list(payloads), list(digests)
        if not len(kept) == len(stored) == len(marks):
            raise ValueError("Seals: as many payloads and digests as continuations")
        strings = all(p is None for p in stored) and all(d is _STRINGS for d in marks)
        self._sealed, self._payloads, self._digests = (
            kept,
            None if strings else stored,
            None if strings else marks,
        )
        self._n = len(kept)
        self._checked = (-1, 0)

    @classmethod
    def _of(
        cls,
        sealed: list[Continuation],
        payloads: list[bytes | None] | None,
        digests: list[object] | None,
        n: int,
        checked: tuple[int, int],
    ) -> Seals:
        self = cls.__new__(cls)
        self._sealed, self._payloads, self._digests, self._n = sealed, payloads, digests, n
        self._checked = (checked[0], min(checked[1], n))
        return self

    def __len__(self) -> int:
        return self._n

    @property
    def sealed(self) -> Sequence[Continuation]:
        return upto(self._sealed, self._n)

    @property
    def payloads(self) -> Sequence[bytes | None]:
        return [None] * self._n if self._payloads is None else upto(self._payloads, self._n)

    @property
    def digests(self) -> Sequence[str]:
        """The sealed payloads' digests (``"sha256:<hex>"``, derived when read)."""
        return [c.digest for c in self.sealed]

    def extended(self, seals: Sequence[Seal]) -> Seals:
        entries = [entry for seal in seals for entry in seal.entries]
        if not entries:
            return self
        n = self._n
        sealed = shelved(self._sealed, n, [e[0] for e in entries])
        payloads, digests = self._payloads, self._digests
        if payloads is None or digests is None:
            if all(e[1] is None and e[2] is _STRINGS for e in entries):
                return Seals._of(sealed, None, None, n + len(entries), self._checked)
            payloads, digests = [None] * n, [_STRINGS] * n  # the first other entry: lists from now on
        payloads = shelved(payloads, n, [e[1] for e in entries])
        digests = shelved(digests, n, [e[2] for e in entries])
        return Seals._of(sealed, payloads, digests, n + len(entries), self._checked)

    def prefix(self, n: int) -> Seals:
        """The seals of the first ``n`` entries (the same shelves, read shorter)."""
        return Seals._of(self._sealed, self._payloads, self._digests, min(n, self._n), self._checked)

    def check(self) -> None:
        """``Seal.check`` of every entry, in work in proportion to the entries added since the last check
        while no continuation was edited in memory meanwhile (:func:`~reasonstate.state.continuation.edits`;
        else of all of them): two list comparisons at C speed, each element compared by identity first (an
        attribute replaced by an equal object is no change: the request is the same; a different one is
        refused as ``Seal.check`` refuses it). No Python-level pass over the run's entries (issue 21: own
        CPU per request)."""
        count = edits()  # read before the entries are: an edit after this read is seen by the next check
        seen, k = self._checked
        n = self._n
        if seen != count:
            k = 0
        if k < n:
            # slices: a shelf extended by another value meanwhile reads longer; these are this one's entries
            sealed = self._sealed[k:n]
            if self._payloads is None or self._digests is None:
                # every entry as sealed: payload slot None, digest slot the marker (identity, at C speed)
                m = n - k
                if not all(map(operator.is_, map(_PAYLOAD, sealed), itertools.repeat(None, m))) or not all(
                    map(operator.is_, map(_DIGEST, sealed), itertools.repeat(_STRINGS, m))
                ):
                    Seal(tuple(zip(sealed, [None] * m, [_STRINGS] * m, strict=True))).check()
            else:
                payloads, digests = self._payloads[k:n], self._digests[k:n]
                if list(map(_PAYLOAD, sealed)) != payloads or list(map(_DIGEST, sealed)) != digests:
                    Seal(tuple(zip(sealed, payloads, digests, strict=True))).check()
        self._checked = (count, n)


_MISSING: Any = object()
#: a continuation's payload, and its digest as kept (the payload object itself while they match: the slot is
#: read, never the derived ``digest``, so a check hashes nothing)
_PAYLOAD, _DIGEST = operator.attrgetter("stored_payload"), operator.attrgetter("_digest")


class TurnEncoding(Protocol):
    """A codec's encoding of one turn: what it withheld, and a check of the payloads it was built from."""

    @property
    def withheld(self) -> tuple[Continuation, ...]: ...

    def verify(self) -> None: ...


_E = TypeVar("_E", bound=TurnEncoding)
_T = TypeVar("_T")


def open_turn_encoding(turn: Turn, build: Callable[[Turn], _E], model: str, rule: str) -> _E:
    """The open turn's encoding, built fresh; :class:`ContinuationMismatch` (nothing sent) if it would
    withhold a payload: inside a tool chain the vendor requires the chain's continuation back (``rule``
    cites where), so the request would fail anyway. (A closed turn's encoding is built once per codec key
    and its payloads re-verified on every request: :func:`closed_run`.)"""
    encoded = build(turn)
    if encoded.withheld:
        sources = sorted({f"{c.vendor}/{c.model}" for c in encoded.withheld})
        raise ContinuationMismatch(
            f"the open tool chain holds {len(encoded.withheld)} payload(s) from {sources} that "
            f"{model} cannot accept, and the vendor requires them back ({rule}). Nothing was sent."
        )
    return encoded


class Run(Protocol):
    """A codec's encoding of a run of closed turns (the whole closed history), shared between requests.

    Invariants: ``r.extended(ts, [encode(t) for t in ts])`` is the run of ``(*r.turns, *ts)``; and for
    ``(p, j) = r.prefix(k)``: ``j <= k`` and ``p`` is the run of ``r.turns[:j]``, equal to the one built by
    extending the empty run turn by turn (``j < k`` only where a turn's first message was merged into the
    one before it: the message at that cut is not kept unmerged)."""

    @property
    def turns(self) -> Sequence[Turn]: ...

    def extended(self, turns: Sequence[Turn], encodings: Sequence[Any]) -> Any:
        """This run followed by ``turns`` (encoded as ``encodings``): a run of the same type."""
        ...

    def prefix(self, k: int) -> tuple[Any, int]:
        """The run of the first ``j <= k`` of its turns (the latest cut it can make there) and ``j``."""
        ...


_R = TypeVar("_R", bound=Run)


class _Entries(weakref.ref[Any]):
    """A turn's (or prefix's) memo entries, and the weak reference to it they are found by: one object per
    memoized turn. ``key`` is the ``id`` it is filed under; when the object dies its entries are cleared
    and unfiled (the callback)."""

    __slots__ = ("key", "values")

    def __new__(cls, obj: Any, callback: Callable[[Any], None], key: int) -> _Entries:
        return super().__new__(cls, obj, callback)

    def __init__(self, obj: Any, callback: Callable[[Any], None], key: int) -> None:
        # weakref.ref's own __init__ only checks the arguments __new__ took
        self.key = key
        self.values: dict[Hashable, Any] = {}


class Encodings:
    """Encoding memos: what codecs derived from turn and prefix values, by (turn or prefix, key), and the
    newest run of closed turns per run key (:func:`closed_run`). One belongs to a session (handed to
    ``Adapter.encode`` and the history views) and is replaced when the session moves to another adapter; a
    caller that hands none gets a fresh one per call.

    Keyed so that a stale entry cannot be read: an entry is found by the very turn (or prefix) object it
    was built from (checked through a weak reference, so a reused ``id`` never matches) and goes with that
    object. Turns and prefixes are immutable and a changed one is a new object without entries, so an
    entry is true for as long as it can be read. The values themselves hold no memo: this object is where
    memos live.

    Size: a closed turn is kept once, in its place in the newest run of each run key (a run holds the
    request values themselves, and per turn a few offsets where it may be cut): no per-turn encoding, node
    or entry (issue 21: state in memory). :meth:`call` keeps only what the current and the previous
    request used (:meth:`next_request`), so the per-text entries of closed turns do not pile up.
    """

    __slots__ = ("_calls", "_older", "_runs", "_turns")

    def __init__(self) -> None:
        self._turns = _Filed()
        self._runs: dict[Hashable, Any] = {}
        self._calls: dict[tuple[Hashable, ...], Any] = {}
        self._older: dict[tuple[Hashable, ...], Any] = {}

    def call(self, fn: Callable[..., _T], *args: Hashable) -> _T:
        """``fn(*args)`` for a pure ``fn`` of immutable arguments (a text, a call id), computed once while
        requests keep using it: the blocks and digests a codec builds for the same text on every request
        (the open turn, few-shots, the head). Keyed by the arguments' values, so an entry is always true.
        Callers copy a returned mutable value before changing it."""
        key = (fn, *args)
        found = self._calls.get(key, _MISSING)
        if found is _MISSING:
            found = self._older.pop(key, _MISSING)
            if found is _MISSING:
                found = fn(*args)
            self._calls[key] = found
        result: _T = found
        return result

    def next_request(self) -> None:
        """A new request is being encoded: :meth:`call` entries that neither it nor the previous one uses
        are dropped when the next one starts (an entry is recomputed if it is needed again later)."""
        if self._calls:
            self._older, self._calls = self._calls, {}

    def _entries(self, turn: Turn | Prefix) -> dict[Hashable, Any] | None:
        hit = self._turns.get(id(turn))
        if hit is not None and hit() is turn:
            return hit.values
        return None

    def ref(self, turn: Turn) -> weakref.ref[Turn]:
        """A weak reference to ``turn``: the one its entries are filed under (made if it has none)."""
        hit = self._turns.get(id(turn))
        if hit is not None and hit() is turn:
            return hit
        return self._new_entries(turn)

    def encoded(self, turn: Turn, key: Hashable, build: Callable[[], _T]) -> _T:
        """``build()``, computed once per ``key`` for this turn object and shared afterwards. Callers
        re-verify the payloads an encoding was built from before each send."""
        return self._once(turn, key, build)

    def derived(self, prefix: Prefix, key: Hashable, build: Callable[[], _T]) -> _T:
        """``build()``, computed once per ``key`` for this prefix object (a codec's encoded tools and
        system blocks) and shared afterwards: it must be immutable, or copied before it is changed."""
        return self._once(prefix, key, build)

    def _once(self, turn: Turn | Prefix, key: Hashable, build: Callable[[], _T]) -> _T:
        entries = self._entries(turn)
        if entries is None:
            entries = self._new_entries(turn).values
        elif key in entries:
            found: _T = entries[key]
            return found
        value = entries[key] = build()
        return value

    def get(self, turn: Turn, key: Hashable) -> Any:
        """The value memoized for ``turn`` under ``key`` (None if there is none)."""
        entries = self._entries(turn)
        return entries.get(key) if entries is not None else None

    def remember(self, turn: Turn, key: Hashable, value: Any) -> None:
        """Memoize ``value`` for ``turn`` under ``key`` (replacing what was there)."""
        entries = self._entries(turn)
        if entries is None:
            entries = self._new_entries(turn).values
        entries[key] = value

    def _new_entries(self, turn: Turn | Prefix) -> _Entries:
        key = id(turn)
        entries = self._turns[key] = _Entries(turn, self._turns, key)
        return entries

    def newest(self, key: Hashable) -> Any:
        """The newest run memoized under ``key`` (None: none yet)."""
        return self._runs.get(key)

    def keep_newest(self, key: Hashable, run: Any) -> None:
        self._runs[key] = run


class _Filed(dict[int, _Entries]):
    """The memo entries by the ``id`` of their turn or prefix; also the callback of each :class:`_Entries`
    (one object: no callback object per memo), which clears and unfiles an entry when its object dies."""

    __slots__ = ()

    def __call__(self, ref: _Entries) -> None:
        ref.values.clear()  # a value may refer back to its turn: no cycle outlives the turn
        if self.get(ref.key) is ref:
            del self[ref.key]


def closed_run(
    turns: tuple[Turn, ...],
    key: Hashable,
    encode: Callable[[Turn], Any],
    empty: _R,
    encodings: Encodings,
    n: int | None = None,
) -> _R:
    """The run of ``turns[:n]`` (all closed; ``n``: all of them unless given, so that a caller holding the
    history's turns with the open one last need not copy them) memoized under ``key`` in ``encodings``: the
    newest run memoized there cut after the turns it shares with them (checked by identity, at C speed),
    extended by the turns after them (each encoded with ``encode``). ``empty`` is the run of no turns;
    ``key`` must tell apart runs that ``empty`` does.

    Only the newest run of a key is kept, and nothing per turn outside it: a request on the history the
    last one ended with pays the turns closed since (one each) and identity checks; a history with an
    earlier turn rewritten (a policy's new view) pays a C-speed cut of the run and the turns from the
    rewritten one on."""
    count = len(turns) if n is None else n
    newest: _R | None = encodings.newest(key)
    run, k = empty, 0
    if newest is not None:
        done = newest.turns
        shared = min(len(done), count)
        # the first turn that differs (``shared`` when none does before it), found at C speed (``turns`` may
        # hold one more, the open turn: a difference there or past ``done`` counts as ``shared``)
        k = min(
            next(itertools.compress(itertools.count(), map(operator.is_not, done, turns)), shared), shared
        )
        if k == len(done):
            if k == count:
                return newest  # the common case: the closed history did not change since the last request
            run = newest
        else:
            run, k = newest.prefix(k)
    if k < count:
        new = turns[k:count]
        run = cast(_R, run.extended(new, [encode(turn) for turn in new]))
    encodings.keep_newest(key, run)
    return run


class ListEncoding(Protocol):
    """A turn's encoding as a list of request values (messages or input items) and their unit digests."""

    @property
    def values(self) -> Sequence[Any]: ...

    @property
    def units(self) -> Sequence[str]: ...

    @property
    def withheld(self) -> tuple[Continuation, ...]: ...

    @property
    def seal(self) -> Seal: ...


def _cuts() -> array.array[int]:
    return array.array("I")


#: how a codec joins a request value to the value before it when the vendor must get the two as one (two
#: messages of one role in a row), as ``(joined value, its unit digest)``; None: the two stay apart
Join = Callable[[Any, Any], "tuple[Any, str] | None"]


def extend_joined(
    values: list[Any],
    units: MutableSequence[str],
    new: Sequence[Any],
    new_units: Sequence[str],
    join: Join | None,
) -> bool:
    """Append ``new`` (one unit each) to ``values`` (whose last unit is ``units[-1]``), its first value joined
    to the last one already there where ``join`` says so; whether it was. The joined value replaces the
    last one as a new value: that one may be shared with a memoized run and is never changed.

    This is the one same-role merge of the list codecs: a step with nothing to send (an empty answer) leaves
    the messages around it side by side, and where the vendor refuses two of one role in a row they go as
    one, in order, on every later request (inside the memoized closed history too: :class:`ListRun`)."""
    if join is not None and values and new:
        both = join(values[-1], new[0])
        if both is not None:
            values[-1], units[-1] = both
            values.extend(new[1:])
            units.extend(new_units[1:])
            return True
    values.extend(new)
    units.extend(new_units)
    return False


_CUT = 5  # per turn in ``ListRun.cuts``: values, units, withheld, seals, and whether its first value joined


class ShelvedRun:
    """What a run of closed turns kept on shelves (:func:`shelved`) reads of them: ``width`` cuts per turn,
    the first three where the run of the turns up to it ends in its value, unit and withheld shelves; a run
    reads its first ``n`` turns' worth of each (:func:`upto`)."""

    __slots__ = ()
    #: how many cuts a turn has in ``cuts``
    width: ClassVar[int]
    turn_shelf: list[Turn]
    #: the units packed (:class:`~reasonstate.state.units.Units`: 32 bytes each, issue 21)
    unit_shelf: bytearray
    withheld_shelf: list[Continuation]
    seals: Seals
    cuts: array.array[int]
    n: int

    def _ends(self) -> tuple[int, int, int]:
        """Where this run's values, units and withheld payloads end in their shelves."""
        if not self.n:
            return 0, 0, 0
        k = self.width * self.n - self.width
        cuts = self.cuts
        return cuts[k], cuts[k + 1], cuts[k + 2]

    @property
    def turns(self) -> Sequence[Turn]:
        return upto(self.turn_shelf, self.n)

    @property
    def units(self) -> Units:
        shelf, end = self.unit_raw()
        return Units(bytes(shelf[:end]))

    def unit_raw(self) -> tuple[bytearray, int]:
        """This run's units packed, to be joined into a request's (:meth:`UnitBuffer.extend_packed
        <reasonstate.state.units.UnitBuffer.extend_packed>`): the shelf (never to be changed by the
        caller; another run may append to it meanwhile) and how many of its bytes are this run's."""
        return self.unit_shelf, self._ends()[1] * RAW

    @property
    def withheld(self) -> Sequence[Continuation]:
        return upto(self.withheld_shelf, self._ends()[2])

    def check(self) -> None:
        """Refuse a payload changed since its capture (:meth:`Seals.check`)."""
        self.seals.check()


@attrs.frozen(slots=True, eq=False)
class ListRun(ShelvedRun):
    """The run of closed turns of a codec whose request is a flat list (OpenAI Chat messages, OpenAI
    Responses input items): its turns' values and units side by side, copied into a request at C speed.
    With ``join`` (:func:`extend_joined`), a turn's first value may be joined to the value before it.

    Built incrementally (:func:`closed_run`), as the Anthropic and Gemini runs are: the run of turns
    ``0..k`` extends the run of ``0..k-1``, so a request pays one turn's work to extend it and identity
    checks of its payloads to verify it, not a Python pass over every turn. Never changed once built.
    ``cuts`` holds, per turn, where the run of the turns up to it ends (values, units, withheld, seals) and
    whether the turn's first value was joined to the one before it: :meth:`prefix` reads them.

    Storage: the turns, values, units, withheld payloads and cuts are shelves (:func:`shelved`) shared by
    the runs extended from one another; a run reads the first ``n`` turns' worth of each (:attr:`turns`,
    :attr:`values`, ...), so extending the newest run appends the new turns' items in place, no copy of
    the earlier ones (issue 21: own CPU per request). A join replaces the run's last value: that extension
    copies the shelves first (a fork), so the runs sharing them still read their own last value.

    With ``marks`` (a predicate on values), ``marked`` is the index of the newest value it holds of (-1:
    none), kept as the run grows: a codec that needs it (the newest Responses ``compaction`` item,
    docs/protocols.md §1.9) reads it without a Python pass over the values on every request (issue 21).
    """

    turn_shelf: list[Turn] = attrs.field(factory=list)
    value_shelf: list[Any] = attrs.field(factory=list)
    unit_shelf: bytearray = attrs.field(factory=bytearray)
    withheld_shelf: list[Continuation] = attrs.field(factory=list)
    seals: Seals = attrs.field(factory=Seals)
    cuts: array.array[int] = attrs.field(factory=_cuts)
    join: Join | None = None
    marks: Callable[[Any], bool] | None = None
    marked: int = -1
    #: how many turns this run holds (its share of the shelves)
    n: int = 0

    width: ClassVar[int] = _CUT

    @property
    def values(self) -> Sequence[Any]:
        return upto(self.value_shelf, self._ends()[0])

    def extended(self, turns: Sequence[Turn], encodings: Sequence[ListEncoding]) -> ListRun:
        """This run followed by ``turns`` (encoded as ``encodings``), built in one pass over them."""
        n_values, n_units, n_withheld = self._ends()
        # the new values and units (one unit per value) are built apart, after the run's last value (which a
        # join may replace), and appended to the shelves (issue 21: own CPU per request)
        last_value = self.value_shelf[n_values - 1 : n_values]
        end = n_units * RAW
        last_unit = list(Units(bytes(self.unit_shelf[end - RAW : end]))) if n_units else []
        values, units = list(last_value), list(last_unit)
        withheld: list[Continuation] = []
        kept = n_values - len(values)
        cuts, sealed = array.array("I"), len(self.seals)
        for encoded in encodings:
            joined = extend_joined(values, units, encoded.values, encoded.units, self.join)
            withheld.extend(encoded.withheld)
            sealed += len(encoded.seal.entries)
            cuts.extend((kept + len(values), kept + len(units), n_withheld + len(withheld), sealed, joined))
        # the last value already there may have been replaced by a join: it is looked at again
        marked = _newest_marked(values, self.marks, 0)
        marked = kept + marked if marked >= 0 else self.marked if self.marked < kept else -1
        n = self.n
        if not last_value or (values[0] is last_value[0] and units[0] is last_unit[0]):
            value_shelf = shelved(self.value_shelf, n_values, values[len(last_value) :])
            unit_shelf = shelved(self.unit_shelf, n_units * RAW, packed(units[len(last_unit) :]))
        else:  # a join replaced the run's last value: the runs sharing the shelves keep theirs (a fork)
            value_shelf = self.value_shelf[:kept] + values
            unit_shelf = self.unit_shelf[: (n_units - len(last_unit)) * RAW] + packed(units)
        return ListRun(
            shelved(self.turn_shelf, n, turns),
            value_shelf,
            unit_shelf,
            shelved(self.withheld_shelf, n_withheld, withheld),
            self.seals.extended([e.seal for e in encodings]),
            shelved(self.cuts, _CUT * n, cuts),
            self.join,
            self.marks,
            marked,
            n + len(turns),
        )

    def prefix(self, k: int) -> tuple[ListRun, int]:
        """The run of the first ``j <= k`` turns: the latest cut before a turn whose first value was not
        joined to the value before it (the value at such a cut is not kept as it was before the join). It
        reads the same shelves, shorter."""
        j, cuts = k, self.cuts
        while 0 < j < self.n and cuts[_CUT * j + 4]:
            j -= 1
        if j == 0:
            return ListRun(join=self.join, marks=self.marks), 0
        v, s = cuts[_CUT * j - _CUT], cuts[_CUT * j - 2]
        marked = self.marked if self.marked < v else _newest_marked(self.value_shelf[:v], self.marks, 0)
        run = ListRun(
            self.turn_shelf,
            self.value_shelf,
            self.unit_shelf,
            self.withheld_shelf,
            self.seals.prefix(s),
            self.cuts,
            self.join,
            self.marks,
            marked,
            j,
        )
        return run, j


def part_strings(part: Part) -> tuple[str, ...]:
    """The history's own strings of ``part`` (its text, or a call's id, name and argument text): what a
    payload's value parsed for a memo shares (:func:`~reasonstate.state.continuation.sharing`)."""
    if isinstance(part, (TextPart, ReasoningPart)):
        return (part.text,) if part.text else ()
    if isinstance(part, ToolCallPart):
        return (part.id, part.name, part.raw_arguments)
    return ()


#: how many throwaway instances warm a holder class (:func:`_holder`)
_WARM = 48


def shared_dict(fields: tuple[str, ...], values: Iterable[Any]) -> dict[str, Any]:
    """The dict of ``fields`` (in this order) to ``values`` (as many) as a key-sharing dict (PEP 412): the
    ``__dict__`` of an instance of the holder class of ``fields``, whose key table every dict of those fields
    shares: ~90 to ~130 bytes for one to five fields instead of ~180 to ~300 for a dict display (CPython 3.11;
    issue 21: a memoized run of closed turns holds a few such dicts per turn for the session's life).

    Invariant: the result is a plain ``dict`` in every respect (``type(d) is dict``; the vendor SDKs'
    exact-type fast paths, ``json``, equality and key order are those of ``dict(zip(fields, values))``).
    Fields are only ever set in the class's order, so the table stays shared. For values kept in a memoized
    run (built once per closed value, read on every request); a per-request temporary is a dict display,
    which is cheaper to build."""
    shared: dict[str, Any] = _holder(fields)().__dict__
    # into the split table in the class's order, as setattr would, ~2x faster (an update from a dict would
    # not do: it un-shares the table); not strict: a strict zip costs as much again, and every caller gives
    # as many values as fields (a literal pair, or a dict's keys and values)
    shared.update(zip(fields, values, strict=False))
    return shared


@functools.lru_cache(maxsize=256)
def _holder(fields: tuple[str, ...]) -> type:
    """The holder class of dicts of ``fields`` in this order (:func:`shared_dict`). Warmed: CPython sizes
    an instance's values by its class's key table, which shrinks to the fields held as instances holding
    them are made; the first few dozen instances would each take ~300 bytes."""
    cls = type("_Fields", (), {"__doc__": f"A dict of the fields {fields}.", "__module__": __name__})
    for _ in range(_WARM):
        holder = cls()
        for key in fields:
            setattr(holder, key, None)
    return cls


def exact_list(items: list[_I]) -> list[_I]:
    """A copy of ``items`` of exactly its length: a list built by appends or a comprehension over-allocates
    (up to ~12% spare slots), and a memoized run keeps its lists for the session's life (issue 21)."""
    return items[:]


def key_shared(value: Any, fields: frozenset[str]) -> Any:
    """``value`` (a dict whose keys are all among ``fields``: those of a closed set of wire shapes, so the
    holder classes stay few) as a key-sharing dict of its keys in their order (:func:`shared_dict`); any
    other value (another type, a key outside ``fields``: a shape seen rarely, e.g. restored) as it is.
    Only the top level is rebuilt; nested values are shared, not copied."""
    if type(value) is not dict or not fields.issuperset(value):
        return value
    return shared_dict(tuple(value), value.values())


def _newest_marked(values: Sequence[Any], marks: Callable[[Any], bool] | None, start: int) -> int:
    """The index of the newest of ``values[start:]`` that ``marks`` holds of (-1: none, or no ``marks``)."""
    if marks is not None:
        for i in range(len(values) - 1, start - 1, -1):
            if marks(values[i]):
                return i
    return -1


def payload_of(step: Step, part: Part) -> Continuation | None:
    """The verbatim payload a canonical part was decoded from, or None (a part built without one)."""
    i = part.continuation
    return step.continuation[i] if i is not None and 0 <= i < len(step.continuation) else None


@attrs.frozen(slots=True)
class ProtocolRules:
    """What a vendor API requires of a request, as data the session and policies obey.

    * ``tool_steps_keep_reasoning``: a step that made tool calls keeps its reasoning in every later request
      (DeepSeek thinking mode, docs/protocols.md §3.3); policies cannot drop it.
    * ``reasoning_only_steps_keep_reasoning``: a step whose only output is reasoning keeps it (an assistant
      message may not be empty).
    * ``append_only_models``: models whose replayed reasoning must sit on an unchanged prefix; for them
      only the closing turn's view is decided and earlier views are never rewritten.
    """

    vendor: str
    api: str
    tool_steps_keep_reasoning: bool = False
    reasoning_only_steps_keep_reasoning: bool = True
    #: model-name fragments whose reasoning is bound to the exact prefix it was produced on, so a closed
    #: turn's view can never be rewritten later (Anthropic preserved thinking, docs/protocols.md §4.3)
    append_only_models: tuple[str, ...] = ()

    def refuse(self, model: str, options: Mapping[str, Any]) -> str | None:
        """Why ``options`` can never work on ``model`` (a request the vendor always rejects), or None.
        Checked when a session is built or switched, before any request."""
        return None

    def may_rewrite_past(self, model: str) -> bool:
        """Whether a policy may change an earlier closed turn's view (``KeepLast`` compaction)."""
        return not any(fragment in model for fragment in self.append_only_models)

    def clamp(self, turn: Turn, view: TurnView) -> tuple[TurnView, tuple[str, ...]]:
        """The closest view to ``view`` that the vendor accepts, and why each change was made.

        Invariant (every override keeps it): a clamp only turns keep flags on, so a keep-all view comes back
        as it is (the session does not clamp a keep-all view on that ground)."""
        keep = list(view.keep_reasoning)
        reasons: list[str] = []
        for i, step in enumerate(turn.steps):
            if keep[i] or not _has_reasoning(step.parts):
                continue
            if self.tool_steps_keep_reasoning and step.tool_calls:
                keep[i] = True
                reasons.append(f"step {i}: tool-calling steps keep their reasoning ({self.vendor} rule)")
            elif self.reasoning_only_steps_keep_reasoning and all(_is_reasoning(p) for p in step.parts):
                keep[i] = True
                reasons.append(f"step {i}: output is reasoning only; an empty assistant message is invalid")
        if not reasons:
            return view, ()
        return attrs.evolve(view, keep_reasoning=tuple(keep)), tuple(reasons)


def _is_reasoning(part: Part) -> bool:
    return isinstance(part, ReasoningPart)


def _has_reasoning(parts: Sequence[Part]) -> bool:
    return any(_is_reasoning(p) for p in parts)


def _units(units: Iterable[str]) -> UnitSeq:
    return as_units(units)


@attrs.frozen(slots=True)
class VendorRequest:
    """The exact keyword arguments of one vendor SDK call, plus what the cache prediction needs.

    ``model`` is the model the session asked for: the provenance every payload of the answer is bound to
    (vendors echo a dated id for an alias: docs/protocols.md §0). ``units`` holds one digest per prefix unit
    (tool, system block, message content block) in prompt order, packed where every one is a digest string
    (:class:`~reasonstate.state.units.Units`: equal to the tuple of strings, each read as ``"sha256:<hex>"``);
    ``prefix_units`` how many of them are the
    stable prefix; ``breakpoints`` the unit counts at which the request asks for a cache write.
    ``withheld`` lists continuations not sent because they belong to another vendor or model (their steps
    are rendered from canonical parts instead). ``prompt_ids``: token-in adapters, the prompt as token ids.
    """

    kwargs: Mapping[str, Any]
    units: UnitSeq = attrs.field(converter=_units)
    model: str = ""
    breakpoints: tuple[int, ...] = ()
    prefix_units: int = 0
    withheld: tuple[Continuation, ...] = ()
    #: (event kind, data) pairs the session adds to the trace when the request succeeds, e.g. a
    #: stateful chain that fell back to a full replay
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    prompt_ids: Sequence[int] | None = None
    #: the declared tools in the vendor's shape, for a decode that must read arguments by their types
    tools: tuple[Any, ...] = ()
    #: False when the prompt the vendor caches depends on something only the vendor knows (an Anthropic
    #: context edit triggered by its own token count, docs/protocols.md §4.7): no cache read is predicted
    predictable: bool = True


def request_digest(kwargs: Mapping[str, Any], body: bytes | None = None) -> tuple[str, int]:
    """``(sha256 digest, size)`` of the request body the SDK sent (else of the kwargs' compact JSON)."""
    if body is None:
        body = json.dumps(kwargs, ensure_ascii=False, separators=(",", ":"), default=str).encode()
    return digest_of(body), len(body)


@attrs.frozen(slots=True)
class DecodedStep:
    """A decoded response: canonical parts, verbatim payloads, stop reason, normalized usage."""

    parts: tuple[Part, ...]
    continuation: tuple[Continuation, ...]
    stop_reason: str
    usage: Usage
    model: str
    response_id: str | None = None
    #: the vendor keeps this response server-side (OpenAI ``store=true``): a later request may refer to it
    response_stored: bool = False
    #: the model name the vendor echoed (a dated id for an alias); provenance is ``model``, never this
    response_model: str | None = None
    #: token-in, token-out adapters: the prompt sent and the completion sampled, as token ids
    prompt_ids: Sequence[int] | None = None
    completion_ids: tuple[int, ...] | None = None
    #: the digest of the output as generated, where the vendor caches it as a prompt unit (DeepSeek)
    output_unit: str | None = None
    #: (event kind, data) pairs the session adds to the trace after the response event, e.g. the
    #: reasoning inputs a vendor reports it withheld (OpenAI ``input_transformations``)
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()


class Assembler(Protocol):
    """Feed the body of a streamed answer; ``finish`` returns the JSON a non-streamed call returns;
    ``events`` the :class:`~reasonstate.adapters.base.StreamEvent` values fed since it was last called."""

    def feed_bytes(self, chunk: bytes) -> None: ...

    def finish(self) -> dict[str, Any]: ...

    def events(self) -> list[StreamEvent]: ...

    def warnings(self) -> tuple[tuple[str, Mapping[str, Any]], ...]: ...

    def complete(self) -> bool: ...

    def cut_after_complete(self) -> None: ...


@attrs.frozen(slots=True)
class Endpoint:
    """Where a codec's requests go and how its answers come back, as data for the transport.

    ``sdk``: the SDK module (for its exception classes); ``resource``: the path on the client
    (``("chat", "completions")`` → ``client.chat.completions``); ``label``: for error messages;
    ``assembler``: builds the pure stream assembler of a streamed answer (None: the API is not streamed
    here); ``stream_options``: merged into ``stream_options`` of a streamed request; ``status_error``: a
    more specific error for an SDK status error, or None for the generic :class:`VendorError`;
    ``blame``: the values of the request a vendor's rejection names (a thinking block at
    ``messages.N.content.M``, the reasoning item whose encrypted content did not verify, ...), for
    ``on_rejected_continuation="strip_and_retry"``; None: this vendor's rejections are never stripped.
    """

    sdk: str
    resource: tuple[str, ...]
    label: str
    assembler: Callable[[], Assembler] | None = None
    stream_options: Mapping[str, Any] | None = None
    status_error: Callable[[Any, VendorRequest], VendorError | None] | None = None
    blame: Callable[[VendorRequest, VendorError], tuple[Any, ...]] | None = None


class Adapter(Protocol):
    """One vendor API: a pure codec plus its rules as data. The transport does the I/O."""

    vendor: str
    api: str
    rules: ProtocolRules
    cache: CacheRules
    endpoint: Endpoint

    def encode(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        options: Mapping[str, Any],
        records: Sequence[ExecutionRecord],
        *,
        lost_responses: frozenset[str] = frozenset(),
        encodings: Encodings | None = None,
    ) -> VendorRequest:
        """The next request on ``history`` (whose last turn is open). ``lost_responses``: response ids the
        vendor said it no longer holds (derived from the trace), never referred to again. ``encodings``: the
        caller's memo, reused across its requests (None: a fresh one, so nothing is reused)."""
        ...

    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        """The answer to ``request``, split into the layers' material; payloads bound to ``request.model``."""
        ...


def platform_of(adapter: Any) -> str:
    """Where ``adapter``'s requests are served: its ``platform`` (``"bedrock"``, ``"vertex"``, ``"azure"``,
    docs/protocols.md §10), first-party for an adapter that names none (one of the caller's own)."""
    platform = getattr(adapter, "platform", FIRST_PARTY)
    return platform if isinstance(platform, str) else FIRST_PARTY


def binding_of(adapter: Any) -> str:
    """Where ``adapter``'s payloads are bound: its ``binding`` (the platform and the account or resource
    it binds payloads to, ``"bedrock#account:…/us-east-1"``, docs/protocols.md §10.1), else its platform
    (:func:`platform_of`: an adapter that names no scope binds to its platform only)."""
    binding = getattr(adapter, "binding", None)
    return binding if isinstance(binding, str) else platform_of(adapter)


# -- the room: what a vendor API means, beyond its codec ----------------------------------------------------


def payload_digest(value: Any) -> str:
    """How an opaque payload (a signature, an encrypted item, reasoning text) appears in a finding."""
    return digest_of(str(value).encode())


#: SDK call options that are no field of the JSON body (the SDK reads them itself)
_SDK_ONLY = frozenset({"extra_body", "extra_headers", "extra_query", "timeout"})


class Room:
    """Everything one vendor API means that the guard, the commit and the exporters read, as public
    functions of that API's module (its room): which URL paths it serves, the view of its request bodies as
    its prefix cache reads them, its usage parser, its cache rules, its stream assembler, and the reasoning
    payloads a request failed to carry back. The registry (:mod:`reasonstate.adapters`) finds a room by its
    :attr:`api`; nothing outside a room branches on an API name.

    The defaults here are the common case; a room overrides what its API does differently.
    """

    #: the API name (``Adapter.api``, the registry key)
    api: ClassVar[str] = ""
    #: where a JSON answer reports its usage
    usage_key: ClassVar[str] = "usage"

    def serves(self, path: str) -> bool:
        """Whether a request to this URL path is a call of this API (for a guard on a plain client)."""
        return False

    def streamed(self, path: str) -> bool:
        """Whether the URL path alone says the answer streams (else the content type tells)."""
        return False

    def model_from_path(self, path: str, body: Any) -> str:
        """The model a request to ``path`` with ``body`` (the parsed JSON) asks for."""
        return str(body.get("model", "")) if isinstance(body, Mapping) else ""

    def view(self, body: Any, model: str | None = None) -> View:
        """The prefix units of a request body as the vendor's prefix cache reads them (``model``: where the
        model is not in the body). Pure; never raises on odd input."""
        raise NotImplementedError

    #: whether the SDK sends a call's keyword arguments as the request's JSON body (``extra_body`` merged
    #: into it): then :meth:`sent_body` reads a request back from its kwargs, and a session keeps its
    #: previous request as those kwargs (values its memoized runs hold anyway) instead of a copy of the
    #: body's bytes (issue 21: state in proportion to the content)
    kwargs_are_body: ClassVar[bool] = True

    def kept_body(
        self, kwargs: Mapping[str, Any], body: bytes | None, previous: bytes | Mapping[str, Any] | None
    ) -> bytes | Mapping[str, Any] | None:
        """The newest request as a session keeps it for the cause of the next cache break
        (``Layers.last_body``), from the SDK keyword arguments ``kwargs`` it was sent from, the exact
        ``body`` bytes received on the wire (None: not captured) and what was kept of the request before
        (``previous``). Invariant: :meth:`view` reads the kept value as it reads ``body``, so the cause
        named is the one the bytes give (a value kept as bytes is read against the next request's
        bytes). The default: the body read back from the kwargs (:meth:`sent_body`, values the memoized
        runs hold anyway), else the bytes."""
        return self.sent_body(kwargs) or body

    def sent_body(self, kwargs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The JSON body a call with the SDK keyword arguments ``kwargs`` sends, as :meth:`view` reads it,
        or None when the SDK reshapes its arguments (then only the bytes on the wire say it; docs/protocols.md
        §6). Pure: builds a new top-level mapping, shares every value of ``kwargs``."""
        if not self.kwargs_are_body:
            return None
        body = {k: v for k, v in kwargs.items() if k not in _SDK_ONLY}
        extra = kwargs.get("extra_body")
        if isinstance(extra, Mapping):
            body.update(extra)  # the SDK merges it into the JSON body's top level
        return body

    def starts_conversation(self, view: View) -> bool:
        """Whether ``view``'s history holds nothing but user input (no answer of the model yet): the first
        request of a conversation, whatever earlier request it shares its tools and system prompt with."""
        return all(
            isinstance(v, str)
            or (isinstance(v, Mapping) and v.get("role", "user") == "user" and "type" not in v)
            or (isinstance(v, Mapping) and v.get("type") == "message" and v.get("role") == "user")
            for v in (u.value for u in view.units if u.section == "history")
        )

    def raw_usage(self, response: Mapping[str, Any]) -> Any:
        """The usage object of a JSON answer, as the vendor wrote it (None when it has none)."""
        return response.get(self.usage_key)

    def usage(self, raw: Mapping[str, Any]) -> Usage:
        """Normalized usage from the vendor's usage object (the codec's own parser)."""
        raise NotImplementedError

    def cache_rules(self, model: str, raw_usage: Mapping[str, Any] | None) -> CacheRules:
        """The prefix-cache rules of the server that answered (``raw_usage`` tells dialects apart)."""
        raise NotImplementedError

    def cache_lifetime(
        self, rules: CacheRules, body: Mapping[str, Any], response: Any
    ) -> tuple[int, int] | None:
        """How long the cache entries ``body`` (a parsed request, answered with ``response``, None when
        unreadable) writes live unused, in seconds, as ``(shortest, longest)`` (None: the vendor documents
        no lifetime): the rules' figure unless the request or its answer names a retention of
        :attr:`retention_lifetimes` under :attr:`retention_key`. Never an error."""
        if self.retention_key:
            for holder in (response, body):
                named = holder.get(self.retention_key) if isinstance(holder, Mapping) else None
                if isinstance(named, str) and named in self.retention_lifetimes:
                    return self.retention_lifetimes[named]
        return rules.lifetime

    #: the request (and answer) field naming a cache retention, and each retention's lifetime
    retention_key: ClassVar[str] = ""
    retention_lifetimes: ClassVar[Mapping[str, tuple[int, int]]] = {}

    def assembler(self) -> Assembler:
        """A fresh stream assembler for a streamed answer of this API."""
        raise NotImplementedError

    def output_unit(self, response: Mapping[str, Any]) -> str | None:
        """The unit key of the answer as generated, where the vendor caches it as a prompt unit
        (DeepSeek's persisted output, docs/protocols.md §3.4); None elsewhere."""
        return None

    def continued(self, view: View, body: Mapping[str, Any], recent: Iterable[tuple[View, Any]]) -> View:
        """``view`` as the server reads it: for a request that continues a stored answer by its id (the
        Interactions API's ``previous_interaction_id``, docs/protocols.md §5.6), the stored prompt (the
        earlier request's history and its answer's output, found in ``recent``: the guard's recent
        ``(view, answer)`` pairs, newest first) before the new input. Chaining by id is not a divergence.
        The default: every request holds its whole prompt."""
        return view

    def cache_keys(self, view: View, raw_usage: Mapping[str, Any] | None) -> tuple[str, ...]:
        """``view``'s unit keys as the server that answered (``raw_usage`` tells dialects apart) renders
        them into its prompt: what the guard predicts the cache read from and records for later
        predictions, as a session's request units are (the codec's). ``view.keys`` unless the server
        leaves some field of a unit unread."""
        return view.keys

    #: a byte string every answer with something to carry back contains (the tool-call marker): an answer
    #: without it is not parsed for a :class:`~reasonstate.adapters.replay.Source`
    replay_marker: ClassVar[bytes] = b""

    def replay_source(self, response: Any) -> Source | None:
        """What ``response`` (the parsed answer) gave that later requests must carry back verbatim: None
        when it made no tool call (nothing anchors a replay). Never an error."""
        if not isinstance(response, Mapping):
            return None
        try:
            return self._source(response)
        except Exception:
            return None

    def check_replay(self, source: Source, body: Any, *, mend: bool = False) -> list[ReplayFinding]:
        """``body`` (a parsed request) compared with the answer ``source`` was read from, for the items of
        that answer the body replays (found by their ids; none found: no finding). ``mend``: restore each
        lost or altered field in ``body`` itself (the caller's own copy) and add a ``mended`` finding for
        it. Never an error (odd shapes: nothing to say)."""
        if not isinstance(body, dict):
            return []
        findings: list[ReplayFinding] = []
        try:
            self._check(source, body, mend, findings)
        except Exception:
            return findings  # what was found before the odd shape stands
        return findings

    def _source(self, response: Mapping[str, Any]) -> Source | None:
        return None

    def _check(self, source: Source, body: dict[str, Any], mend: bool, out: list[ReplayFinding]) -> None:
        return None
