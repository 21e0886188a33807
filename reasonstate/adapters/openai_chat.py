"""OpenAI Chat Completions codec, five dialects: openai, deepseek, vllm, sglang, openrouter (docs/protocols.md
§2, §3).

Rules encoded here, each from docs/protocols.md:
  * every assistant message is replayed from the verbatim continuation payload of the response message
    (``choices[0].message`` as received: key order, unknown extra fields and the tool-call ``arguments``
    string byte for byte); the only edits ever made are removing the reasoning field when the frozen view
    says so and the rules allow, and Compress's summary note in a closed turn's final answer. A message
    whose bytes are its parts rendered (``_rendered``: role, content, DeepSeek's ``reasoning_content``,
    tool calls, in that order) keeps no payload, only a shared provenance-only continuation
    (:func:`~reasonstate.state.continuation.provenance_only`; issue 21), and is replayed from its parts:
    the same bytes. A step whose payload belongs to another vendor or API is rendered from its canonical
    parts (content and tool calls with their raw arguments, no reasoning);
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
  * openrouter (§2.3): reasoning is read from ``reasoning``; the message's ``reasoning_details`` list (each
    element a ``reasoning.text`` with its ``signature``, a ``reasoning.encrypted`` with its ``data`` or a
    ``reasoning.summary``, with ``id``, ``format`` naming the upstream family and ``index``) goes back
    verbatim, in order, inside the message it came in, so the upstream's own rules hold (an Anthropic model
    behind OpenRouter still gets its signed thinking back inside the open chain). The details are bound to
    the model that produced them: after a switch to another model they are withheld (with ``reasoning``),
    the message goes from its canonical parts. Usage: ``prompt_tokens_details.cached_tokens`` and
    ``cache_write_tokens``; the reported ``cost`` is a ``usage.reported_cost`` trace event, never in a prompt;
  * tool results are ``{"role": "tool", "tool_call_id", "content"}`` messages in the model's declared call
    order (the session refuses results for unknown ids before anything is sent);
  * deepseek (§3.3): an empty answer (no text, no tool calls) is committed but no assistant message goes
    for it (DeepSeek refuses an empty one), and the two user messages around it go as ONE user message,
    their texts as ``text`` parts in order (DeepSeek reads ``text`` parts) — the same-role merge the
    Anthropic and Gemini codecs make (§4.2, §5.2), here by the list codecs' one join,
    :func:`~reasonstate.adapters.base.extend_joined`, inside the memoized closed history too;
  * streaming (``stream_options.include_usage``) assembles the deltas into the message JSON a non-streamed
    call returns (wire key order: role, content, reasoning, tool_calls), so both give the same state; a
    stream without ``finish_reason`` and ``[DONE]`` is :class:`~reasonstate.errors.StreamInterrupted`.

Prefix units (``VendorRequest.units``): one for the tool list, then one per message, each the digest of the
message *as the server renders it* (fields the dialect ignores on input removed), so a change the server
cannot see is not a cache break. Invariant: ``units(encode(h)) == units(encode(h'))[:len]`` whenever ``h'``
only appends to ``h`` (append-only history), except at a DeepSeek join: the user message before an empty
answer is sent joined to the next one from then on.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal

import attrs

from reasonstate.adapters import replay
from reasonstate.adapters.base import (
    DecodedStep,
    Encodings,
    Endpoint,
    Join,
    ListRun,
    ProtocolRules,
    Room,
    Seal,
    SSEEvent,
    StreamAssembler,
    VendorRequest,
    closed_run,
    count,
    exact_list,
    extend_joined,
    head_value,
    json_object,
    key_shared,
    open_turn_encoding,
    part_strings,
    payload_digest,
    shared_dict,
    summary_note,
)
from reasonstate.adapters.declared import check_call, declared, object_parameters
from reasonstate.adapters.replay import ReplayFinding, Source
from reasonstate.cache.divergence import (
    View,
    ViewBuilder,
    compact_key,
    listed,
    model_name,
    request_body,
    stripped_inside,
    without_nulls,
)
from reasonstate.cache.rules import CacheRules
from reasonstate.errors import (
    ContinuationMismatch,
    InvalidOption,
    MalformedResponse,
    StreamInterrupted,
    VendorError,
)
from reasonstate.prefix import Prefix, Tool, canonical_json
from reasonstate.state import (
    FIRST_PARTY,
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
    bound,
    digest_of,
    parse_arguments,
    thaw,
)
from reasonstate.state.continuation import provenance_only, sharing
from reasonstate.state.units import UnitBuffer

__all__ = [
    "DEEPSEEK",
    "OPENAI_CHAT",
    "OPENROUTER",
    "REPORTED_COST",
    "ROOM",
    "SELF_HOSTED_CHAT",
    "ChatAssembler",
    "ChatRoom",
    "Dialect",
    "OpenAIChatAdapter",
]

#: this API's prefix cache, as data (docs/protocols.md; the schemes are :mod:`reasonstate.cache.rules`)
OPENAI_CHAT = CacheRules(
    scheme="messages",
    source="docs/protocols.md §1.5, §2.1",
    min_tokens=1024,
    step=128,
    # §1.5: in memory 5 to 10 minutes unused, at most an hour; extended (the default of organisations
    # without zero data retention, and of gpt-5.5 on) up to 24 hours: unnamed, either
    lifetime=(300, 86400),
)
DEEPSEEK = CacheRules(scheme="persisted", source="docs/protocols.md §3.4")
#: vLLM automatic prefix caching and SGLang RadixAttention behind the chat API: full 16-token KV blocks
SELF_HOSTED_CHAT = CacheRules(scheme="messages", source="docs/protocols.md §2.2", block=16)

API = "chat"
Dialect = Literal["openai", "deepseek", "vllm", "sglang", "openrouter"]
DIALECTS: tuple[Dialect, ...] = ("openai", "deepseek", "vllm", "sglang", "openrouter")
_KIND = "message"
_REASONING_FIELDS = ("reasoning", "reasoning_content")
#: what a dropped (or foreign) reasoning removes from a message: the text fields and OpenRouter's
#: ``reasoning_details`` list (docs/protocols.md §2.3)
_DROPPED_FIELDS = (*_REASONING_FIELDS, "reasoning_details")
#: where each dialect puts reasoning on output, in read order (docs/protocols.md §2.2, §3.2)
_READ: dict[str, tuple[str, ...]] = {
    "openai": (),
    "deepseek": ("reasoning_content",),
    "vllm": ("reasoning", "reasoning_content"),
    "sglang": ("reasoning_content",),
    "openrouter": ("reasoning",),
}
#: reasoning fields a server does not read on input (docs/protocols.md §2.2; vllm-project/vllm#38488)
_UNREAD: dict[str, tuple[str, ...]] = {
    "openai": _REASONING_FIELDS,
    "deepseek": ("reasoning",),
    "vllm": ("reasoning_content",),
    "sglang": (),
    "openrouter": ("reasoning_content",),
}
#: OpenRouter forwards the upstream's prompt cache and reports it as ``cached_tokens`` (docs/protocols.md
#: §2.3): at message granularity, the minimum and rounding are the upstream's, so none is assumed here
OPENROUTER = CacheRules(scheme="messages", source="docs/protocols.md §2.3")
_CACHE = {
    "openai": OPENAI_CHAT,
    "deepseek": DEEPSEEK,
    "vllm": SELF_HOSTED_CHAT,
    "sglang": SELF_HOSTED_CHAT,
    "openrouter": OPENROUTER,
}


def _unit(value: Any) -> str:
    return digest_of(canonical_json(value).encode())


def _system_unit(system: str, dialect: str) -> str:
    """The unit of the system message ``system`` (as :meth:`OpenAIChatAdapter.encode` adds it)."""
    return _unit(_server_view({"role": "system", "content": system}, dialect))


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

    messages: tuple[Mapping[str, Any], ...]
    units: tuple[str, ...]
    withheld: tuple[Continuation, ...]
    seal: Seal  # the replayed payloads, checked before every send

    def verify(self) -> None:
        self.seal.check()

    @property
    def values(self) -> tuple[Mapping[str, Any], ...]:
        return self.messages


def _text_parts(content: Any) -> list[Any]:
    return list(content) if isinstance(content, list) else [{"type": "text", "text": content}]


def _users_joined(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    """DeepSeek (docs/protocols.md §3.3): two user messages in a row — the messages around an empty answer,
    which sends nothing — go as one, each text a ``text`` part in order (DeepSeek V4 reads ``text`` parts:
    its 400 for any other is "unknown variant `image_url`, expected `text`", rikkahub/rikkahub#1433). No
    text is changed or joined with a separator; None for any other pair."""
    if before.get("role") != "user" or after.get("role") != "user":
        return None
    joined = {"role": "user", "content": [*_text_parts(before["content"]), *_text_parts(after["content"])]}
    return joined, _unit(_server_view(joined, "deepseek"))


#: the same-role join per dialect: only DeepSeek leaves an answer out of the request (the empty one)
_JOINS: dict[str, Join | None] = {"deepseek": _users_joined}


# -- stream assembly: the non-streamed answer from its SSE stream (docs/protocols.md §2, §3) -----------------

#: the key order of a non-streamed ``choices[0].message`` (then any other delta field, first seen first)
_CHAT_MESSAGE_ORDER = ("role", "content", "reasoning", "reasoning_content", "reasoning_details", "tool_calls")
_DONE = "[DONE]"
#: every top-level field of the messages a memoized run keeps as key-sharing dicts (the assistant message
#: as received, §2, §3; user and tool messages): a closed set, so the holder classes stay few
#: (:func:`~reasonstate.adapters.base.key_shared`); a message with another field is kept as it is
_KEPT_FIELDS = frozenset(
    {
        *_CHAT_MESSAGE_ORDER,
        "tool_call_id",
        "name",
        "refusal",
        "annotations",
        "audio",
        "function_call",
    }
)
_USER_FIELDS = ("role", "content")
#: the fields of a kept message's ``tool_calls`` entries and of their ``function`` (§2), likewise
_CALL_FIELDS = frozenset({"id", "type", "function", "index"})
_FUNCTION_FIELDS = frozenset({"name", "arguments"})


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

    def _complete(self) -> bool:
        return self._done

    def _event(self, event: SSEEvent) -> None:
        if self._done:
            return
        if event.data.strip() == _DONE:
            self._done = True
            return
        chunk = json_object(event, "stream chunk")
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
    """String deltas concatenate; lists merge by their elements' ``index`` (:func:`_merged`); a field that
    only ever came as null stays null; else the last value."""
    strings = [p for p in pieces if isinstance(p, str)]
    values = [p for p in pieces if p is not None]
    if strings:
        if len(strings) != len(values):
            raise MalformedResponse("a streamed text field mixes text with other values")
        return "".join(strings)
    if values and all(isinstance(v, list) for v in values):
        return _merged(values)
    return values[-1] if values else None


def _merged(lists: list[list[Any]]) -> list[Any]:
    """A list field streamed in pieces (``reasoning_details`` on OpenRouter, Kimi and other servers):
    elements that are objects with an integer ``index`` are one element per ``(type, index)``, built piece
    by piece (``text``, ``summary`` and ``data`` concatenate, any other field takes its last non-null value,
    keys in first-seen order), and come out by ``index``, then in first-seen order; elements without an
    index follow as they came. A list with no indexed element is a value: the last one sent wins. So a
    streamed answer commits what the same answer unstreamed holds (issue 23 item 6; docs/protocols.md
    §2.2)."""
    merged: dict[tuple[Any, int], dict[str, Any]] = {}
    order: list[tuple[int, int, Any]] = []  # (index, first seen, element or merge key)
    for items in lists:
        for item in items:
            index = item.get("index") if isinstance(item, Mapping) else None
            kind = item.get("type") if isinstance(item, Mapping) else None
            # an element without an integer index, or whose type is no name (a list: no key to merge by, and
            # decode refuses it), is kept as it came
            named = kind is None or isinstance(kind, str)
            if isinstance(index, bool) or not isinstance(index, int) or not named:
                order.append((-1, len(order), ("raw", item)))
                continue
            assert isinstance(item, Mapping)
            key = (kind, index)
            into = merged.get(key)
            if into is None:
                merged[key] = dict(item)
                order.append((index, len(order), ("merged", key)))
                continue
            for field, value in item.items():
                if field in _CONCATENATED and isinstance(value, str) and isinstance(into.get(field), str):
                    into[field] += value
                elif value is not None:
                    into[field] = value
                elif field not in into:
                    into[field] = None
    if not merged:  # no element carries an index: the field is a value, the last one sent wins
        return lists[-1]
    raw = [entry for entry in order if entry[0] < 0]
    indexed = sorted((entry for entry in order if entry[0] >= 0), key=lambda e: (e[0], e[1]))
    return [_in_order(merged[ref]) if kind == "merged" else ref for _, _, (kind, ref) in [*indexed, *raw]]


#: the key order of a ``reasoning_details`` element in an unstreamed answer (OpenRouter's documented
#: examples, docs/protocols.md §2.3); any other key follows in first-seen order
_DETAIL_ORDER = ("type", "text", "summary", "data", "signature", "id", "format", "index")


def _in_order(element: dict[str, Any]) -> dict[str, Any]:
    """A merged element with its keys in the unstreamed order: pieces bring the keys in any order (the
    ``signature`` last, the ``format`` first or last), so a streamed answer commits the same bytes as the
    unstreamed one."""
    ordered = {k: element[k] for k in _DETAIL_ORDER if k in element}
    ordered.update((k, v) for k, v in element.items() if k not in ordered)
    return ordered


#: the fields of a streamed list element that arrive in pieces (the text shown, the opaque data); every
#: other field (``type``, ``id``, ``format``, ``signature``, ``index``) is whole in the piece that has it
_CONCATENATED = frozenset({"text", "summary", "data"})


#: the SDK method a chat call goes to, as error messages name it
SDK_LABEL = "openai chat.completions.create"
#: the host words of a dialect's own API (its models only): DeepSeek's api.deepseek.com, OpenAI's
_OWN_HOST = {"openai": "openai.com", "deepseek": "deepseek.com"}
#: the ``reasoning_effort`` values DeepSeek takes in the OpenAI format (its mapping table,
#: https://api-docs.deepseek.com/guides/thinking_mode); any other is its 400 (docs/protocols.md §0.2).
#: ``none`` is the Responses format's way to turn thinking off; here that is ``thinking={"type":
#: "disabled"}``
_DEEPSEEK_EFFORTS = ("minimal", "low", "medium", "high", "xhigh", "max", "ultra")


class OpenAIChatAdapter:
    """The Chat Completions codec for one dialect; ``vendor`` is the dialect name, ``api`` is ``"chat"``."""

    api = API

    def __init__(self, dialect: str = "openai", *, platform: str = FIRST_PARTY, scope: str = "") -> None:
        if dialect not in DIALECTS:
            raise InvalidOption(f"unknown chat dialect {dialect!r}; expected one of {DIALECTS}")
        #: where the client's requests are served (Azure for ``openai.AzureOpenAI``, docs/protocols.md §10):
        #: this dialect's messages go back verbatim only there
        self.platform = platform
        #: the platform and the resource it binds payloads to (``scope``: "" when unknown or unbound, §10.1)
        self.binding = bound(platform, scope)
        self.dialect: Dialect = dialect
        self.vendor: str = dialect
        self.rules = ProtocolRules(vendor=dialect, api=API, tool_steps_keep_reasoning=dialect == "deepseek")
        self.cache = _CACHE[dialect]
        # ``stream_options.include_usage``: the usage arrives in the last chunk (docs/protocols.md §2.1)
        self.endpoint = Endpoint(
            sdk="openai",
            resource=("chat", "completions"),
            label=f"{dialect} chat",
            assembler=ChatAssembler,
            stream_options={"include_usage": True},
        )

    def check_call(self, client: Any, model: str, options: Mapping[str, Any], tools: Sequence[Tool]) -> None:
        """Refuse, before any request, what can never be sent (docs/protocols.md §9): an option
        ``chat.completions.create`` does not declare (the SDK raises ``TypeError`` for it; a server's own
        parameter goes in ``extra_body``) or a value its annotation rules out; ``thinking`` is this codec's
        own for the OpenAI-compatible dialects (§3.1) and not an OpenAI option; another vendor's model id
        only on a dialect's own host (vLLM and SGLang serve any model); a misspelling of an id the SDK
        lists (dialect ``openai``); a tool whose ``parameters`` is not an object schema (§2.2)."""
        own_host = _OWN_HOST.get(self.dialect)
        check_call(
            client,
            sdk="openai",
            resource=self.endpoint.resource,
            label=SDK_LABEL,
            vendor=self.dialect if own_host is not None else None,
            only_on=own_host,
            model=model,
            options=options,
            own=frozenset() if self.dialect == "openai" else frozenset({"thinking"}),
            family="gpt-" if self.dialect == "openai" else None,
            unknown=""
            if self.dialect == "openai"
            else f" (a {self.dialect} server's own parameter goes in extra_body={{...}})",
        )
        object_parameters(tools, "a function's parameters", "docs/protocols.md §2.2")
        effort = options.get("reasoning_effort")
        if self.dialect == "deepseek" and effort is not None and effort not in _DEEPSEEK_EFFORTS:
            raise InvalidOption(
                f"reasoning_effort={effort!r} is not one DeepSeek takes ({', '.join(_DEEPSEEK_EFFORTS)}; "
                'thinking={"type": "disabled"} turns thinking off), docs/protocols.md §0.2'
            )

    # -- encode ------------------------------------------------------------------------------------------
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
        """The ``chat.completions.create`` kwargs for the next call on ``history`` (last turn open)."""
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.offered_parameters,
                },
            }
            for t in prefix.tools
        ]
        messages: list[Mapping[str, Any]] = []
        units = UnitBuffer([_unit(tools)] if tools else [])

        def add(message: Mapping[str, Any]) -> None:
            messages.append(message)
            units.append(_unit(_server_view(message, self.dialect)))

        if prefix.system:  # its unit shared by every session on this system text and dialect (head_value)
            messages.append({"role": "system", "content": prefix.system})
            units.append(head_value(_system_unit, prefix.system, self.dialect))
        for user, answer in prefix.few_shots:
            add({"role": "user", "content": user})
            add({"role": "assistant", "content": answer})
        n_head = len(units)
        closed = len(history.turns) - (history.open_turn is not None)  # all but the open turn (no copy)
        memo = encodings if encodings is not None else Encodings()
        run = self._closed_run(history.turns, model, memo, closed)
        run.check()  # the replayed payloads of every closed turn, by identity (re-hashed only if replaced)
        messages.extend(run.values)  # the head ends with a system or assistant message: never a join
        units.extend_packed(*run.unit_raw())  # packed, joined at C speed (issue 21)
        withheld: list[Continuation] = list(run.withheld)
        if history.open_turn is not None:
            build = functools.partial(self._encode_turn, model=model)
            encoded = open_turn_encoding(history.turns[-1], build, model, "docs/protocols.md §2.2, §3.3")
            extend_joined(messages, units, encoded.messages, encoded.units, _JOINS.get(self.dialect))
            withheld.extend(encoded.withheld)
        kwargs: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        for key, value in options.items():
            if key == "thinking":  # DeepSeek's toggle is not an SDK parameter (docs/protocols.md §3.1)
                kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "thinking": value}
            elif key == "extra_body":
                kwargs["extra_body"] = {**dict(value), **kwargs.get("extra_body", {})}
            else:
                kwargs[key] = value
        return VendorRequest(
            kwargs=kwargs, units=units.done(), model=model, prefix_units=n_head, withheld=tuple(withheld)
        )

    def _closed_run(
        self, turns: tuple[Turn, ...], model: str, encodings: Encodings, n: int | None = None
    ) -> ListRun:
        """The run of ``turns[:n]`` (all closed; all of them without ``n``) for ``model`` (a
        :class:`ListRun`: messages never merge across turns here)."""

        def encode(turn: Turn) -> _TurnEncoding:  # kept only as its place in the run (issue 21: memory)
            return self._encode_turn(turn, model=model, kept=True)

        empty = ListRun(join=_JOINS.get(self.dialect))
        key = (API, "run", self.dialect, model, self.binding)
        return closed_run(turns, key, encode, empty, encodings, n)

    def _encode_turn(self, turn: Turn, *, model: str, kept: bool = False) -> _TurnEncoding:
        """A turn's messages, their units, the payloads withheld from ``model`` and its seal. ``kept``: the
        messages go into a memoized run, kept for the session's life, so each is a key-sharing dict of its
        fields in their order (:func:`~reasonstate.adapters.base.shared_dict`; issue 21: ~100 bytes where
        a dict display takes ~180 on CPython 3.11); the open turn's, built per request, are dict displays.
        Either way the messages are equal, key order included: the same bytes are sent."""
        messages: list[Mapping[str, Any]] = [
            shared_dict(_USER_FIELDS, ("user", turn.user)) if kept else {"role": "user", "content": turn.user}
        ]
        replayed: list[Continuation] = []
        withheld: list[Continuation] = []
        for i, step in enumerate(turn.steps):
            if self._empty_on_deepseek(turn, i, step):
                # DeepSeek refuses an assistant message with neither content nor tool_calls
                # (docs/protocols.md §3.3): the empty answer stays committed, no message is sent for it, and
                # the user message before it is joined to the next one (_users_joined)
                withheld.extend(step.continuation)
                continue
            messages.append(self._assistant(turn, i, step, model, replayed, withheld))
            if self._flattens(step):
                messages.append({"role": "user", "content": _results_as_text(step)})
                continue
            # the session stores results in the model's declared call order (history invariant)
            messages.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in step.tool_results
            )
        units = tuple(_unit(_server_view(m, self.dialect)) for m in messages)
        if kept:  # each later message is a value of its own (never the memo's or the payload's): rebuilt
            kept_messages = (messages[0], *(_kept_message(m) for m in messages[1:]))
            return _TurnEncoding(kept_messages, units, tuple(withheld), Seal.of(replayed))
        return _TurnEncoding(tuple(messages), units, tuple(withheld), Seal.of(replayed))

    def payload_units(self, step: Step) -> dict[str, tuple[str, ...]]:
        """The prefix unit the step's message payload is when replayed as received (the message as the server
        reads it) → that payload's digest: lets an exporter tell which units of a request were payloads
        sent verbatim."""
        return {
            _unit(_server_view(c.value, self.dialect)): (c.digest,)
            for c in step.continuation
            if not c.bare and isinstance(c.value, Mapping)
        }

    def _assistant(
        self,
        turn: Turn,
        index: int,
        step: Step,
        model: str,
        replayed: list[Continuation],
        withheld: list[Continuation],
    ) -> Mapping[str, Any]:
        summary = turn.view.summary if turn.view is not None and index == len(turn.steps) - 1 else None
        c = _own_message(step, self.vendor, self.binding)
        if c is None:
            withheld.extend(step.continuation)
            if self._flattens(step):
                return _with_summary(_calls_as_text(step), summary)
            return _with_summary(_canonical_message(step), summary)
        payload: Mapping[str, Any]
        if c.bare:
            # no payload kept: the message is its parts rendered, the bytes received (checked at decode)
            payload = _rendered(step.parts, self.dialect)
        else:
            # digest-verified, parsed once for the memoized run, sharing the history's strings (nothing
            # parsed is kept in the continuation: issue 21); a plain value, for the SDK's exact-type fast path
            payload = sharing(c.checked(), tuple(s for p in step.parts for s in part_strings(p)))
            if not isinstance(payload, Mapping):
                raise ContinuationMismatch("a chat message payload is not a JSON object")
            replayed.append(c)
        keep = turn.view is None or turn.view.keep_reasoning[index]
        if self.rules.tool_steps_keep_reasoning and payload.get("tool_calls"):
            keep = True  # DeepSeek §3.3, whatever the view says: no policy can override it
        elif not c.replayable_to(self.vendor, API, model, self.binding):
            keep = False  # another model's reasoning is never sent to this one
            withheld.append(c)
        rename = self.dialect == "vllm" and "reasoning" not in payload and "reasoning_content" in payload
        # an empty answer (content null, no tool calls) is not a valid assistant message: content is
        # required unless there are tool calls (§2), so it goes back as ""
        empty = payload.get("content") is None and not payload.get("tool_calls")
        if keep and summary is None and not rename and not empty:
            verbatim: Mapping[str, Any] = payload
            return verbatim
        message: dict[str, Any] = {}
        for key, value in payload.items():
            if key in _DROPPED_FIELDS and not keep:
                continue
            # vLLM reads only ``reasoning`` on input: an older server's ``reasoning_content`` goes back there
            message["reasoning" if rename and key == "reasoning_content" else key] = value
        if empty:
            message["content"] = ""
        return _with_summary(message, summary)

    def _empty_on_deepseek(self, turn: Turn, index: int, step: Step) -> bool:
        """Invariant: on DeepSeek an empty answer (no text, no tool calls, no fold summary to carry) is in
        the history and the trace, and in no request."""
        if self.dialect != "deepseek" or step.tool_calls or step.text:
            return False
        return turn.view is None or turn.view.summary is None or index != len(turn.steps) - 1

    def _flattens(self, step: Step) -> bool:
        """DeepSeek requires the original ``reasoning_content`` on every assistant message with
        ``tool_calls`` (§3.3); a step another vendor produced has none to give, so its tool exchange goes as
        plain text (the calls in the assistant message, the results in a user message) — nothing vanishes
        and no reasoning is invented."""
        foreign = _own_message(step, self.vendor, self.binding) is None
        return self.dialect == "deepseek" and bool(step.tool_calls) and foreign

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        """Split a chat completion (the JSON object as received) into the four layers' material."""
        if not isinstance(response, Mapping):
            raise MalformedResponse("chat completion is not a JSON object")
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise MalformedResponse("chat completion has no choices")
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            raise MalformedResponse("choices[0] has no message object")
        parts = self._parts(message)
        # OpenRouter's reasoning_details (§2.3) may hold only opaque data (reasoning.encrypted): reasoning too
        has_reasoning = any(isinstance(p, ReasoningPart) for p in parts) or bool(
            message.get("reasoning_details")
        )
        # DeepSeek's reasoning_content is unsigned text the API requires back (§3.3), even after a model
        # switch; elsewhere reasoning is the producing model's own and is not shown to another
        model_bound = has_reasoning and self.dialect != "deepseek"
        continuation: tuple[Continuation, ...]
        if not model_bound and _rendered_as_received(message, self.dialect):
            # the message is its parts rendered (_rendered), byte for byte: no payload is kept, only who
            # produced it, shared (issue 21: the answer kept once); the request is the same
            continuation = provenance_only(
                vendor=self.vendor, api=API, model=request.model, kind=_KIND, platform=self.binding
            )
        else:
            # the message's bytes as received (key order, strings as they came), their digest derived
            continuation = (
                Continuation.capture(
                    vendor=self.vendor,
                    api=API,
                    model=request.model,
                    kind=_KIND,
                    value=message,
                    model_bound=model_bound,
                    platform=self.binding,
                ),
            )
        finish = choices[0].get("finish_reason")
        rid = response.get("id")
        echoed = response.get("model")
        return DecodedStep(
            parts=tuple(parts),
            continuation=continuation,
            stop_reason=finish if isinstance(finish, str) else "unknown",
            usage=_usage(response.get("usage"), self.dialect),
            model=request.model,
            response_id=rid if isinstance(rid, str) else None,
            response_model=echoed if isinstance(echoed, str) else None,
            # DeepSeek persists a cache unit at the end of each output (§3.4)
            output_unit=_unit(_generated_view(message, self.dialect)),
            events=_reported_cost(response.get("usage")) if self.dialect == "openrouter" else (),
        )

    def _parts(self, message: Mapping[str, Any]) -> list[Part]:
        """Canonical parts of a response message, after checking that every field that goes back verbatim
        has the type the input schema requires (an accepted message is one the server accepts replayed)."""
        if message.get("role") != "assistant":
            raise MalformedResponse("the response message's role is not 'assistant'")
        parts: list[Part] = []
        for field in _READ[self.dialect]:
            if not isinstance(message.get(field), (str, type(None))):
                raise MalformedResponse(f"the message's {field} is not a string")
        details = message.get("reasoning_details")
        if details is not None and not (
            isinstance(details, list)
            and all(isinstance(d, Mapping) and isinstance(d.get("type"), str) for d in details)
        ):
            raise MalformedResponse("the message's reasoning_details is not a list of typed objects")
        for field in _READ[self.dialect]:
            if isinstance(message.get(field), str):
                parts.append(ReasoningPart(text=message[field], continuation=0))
                break
        content = message.get("content")
        if isinstance(content, list):  # content parts (some servers): the text parts, in order
            for k, p in enumerate(content):
                text_part = isinstance(p, Mapping) and p.get("type") == "text"
                if not isinstance(p, Mapping) or (text_part and not isinstance(p.get("text"), str)):
                    raise MalformedResponse(f"message content[{k}] is not a content part with a string text")
            content = "".join(p["text"] for p in content if isinstance(p.get("text"), str))
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
            if "type" in call and not isinstance(call["type"], str):
                raise MalformedResponse(f"tool_calls[{i}].type is not a string")
            name, raw = function.get("name"), function.get("arguments")
            if not isinstance(name, str) or not isinstance(raw, str):
                raise MalformedResponse(f"tool_calls[{i}] needs a function name and an arguments string")
            # arguments go back as the exact string received (raw_arguments), never re-serialized
            arguments, error = parse_arguments(raw)
            parts.append(
                ToolCallPart(
                    id=call["id"],
                    name=name,
                    arguments=arguments,
                    raw_arguments=raw,
                    continuation=0,
                    arguments_error=error,
                )
            )
        return parts


def _own_message(step: Step, vendor: str, platform: str = FIRST_PARTY) -> Continuation | None:
    """The step's chat message payload from this dialect's server on this platform, or None (another
    vendor's or platform's step)."""
    return next(
        (
            p
            for p in step.continuation
            if p.kind == _KIND and p.api == API and p.vendor == vendor and p.goes_to(platform)
        ),
        None,
    )


#: what an answer without text holds as ``content`` when the server wrote it (the DeepSeek API writes ``""``,
#: docs/protocols.md §3.2; the others null): the value :func:`_rendered` gives back
_NO_TEXT: dict[str, str | None] = {"deepseek": ""}


def _rendered(parts: Sequence[Part], dialect: str) -> dict[str, Any]:
    """The assistant message the parts of a step without a payload stand for on ``dialect`` (a plain
    value, new each call; its strings the parts' own): keys ``role``, ``content``, then on DeepSeek
    ``reasoning_content`` when there is a reasoning part, then ``tool_calls`` when there are calls, each
    ``{"id", "type": "function", "function": {"name", "arguments"}}`` with the exact argument text.
    ``content`` is the text, or without text what the dialect's server writes (:data:`_NO_TEXT`).

    Invariant: a step keeps no payload only when ``compact(_rendered(parts, dialect))`` is the message's
    exact bytes as received (:func:`_rendered_as_received`), so replaying this is replaying the message.
    """
    text = "".join(p.text for p in parts if isinstance(p, TextPart))
    message: dict[str, Any] = {"role": "assistant", "content": text or _NO_TEXT.get(dialect)}
    reasoning = [p.text for p in parts if isinstance(p, ReasoningPart)]
    if reasoning and dialect == "deepseek":
        message["reasoning_content"] = "".join(reasoning)
    calls = [
        {"id": p.id, "type": "function", "function": {"name": p.name, "arguments": p.raw_arguments}}
        for p in parts
        if isinstance(p, ToolCallPart)
    ]
    if calls:
        message["tool_calls"] = calls
    return message


#: the keys of a message :func:`_rendered` writes, in their order, by (DeepSeek reasoning, tool calls)
_RENDERED_KEYS = {
    (False, False): ["role", "content"],
    (False, True): ["role", "content", "tool_calls"],
    (True, False): ["role", "content", "reasoning_content"],
    (True, True): ["role", "content", "reasoning_content", "tool_calls"],
}
_CALL_KEYS = ["id", "type", "function"]
_FUNCTION_KEYS = ["name", "arguments"]


def _rendered_as_received(message: Mapping[str, Any], dialect: str) -> bool:
    """True when :func:`_rendered` gives back ``message``'s exact bytes from the parts decoded from it
    (:meth:`OpenAIChatAdapter._parts`): the message then needs no payload kept beside its parts.

    The parts hold every string of such a message (its text, DeepSeek's reasoning, each call's id, name and
    argument text), so the bytes are the same when its shape is the one rendered: exactly the keys
    :func:`_rendered` writes, in its order; ``content`` a non-empty string, or the dialect's
    :data:`_NO_TEXT`; on DeepSeek ``reasoning_content`` a string; ``tool_calls`` a non-empty list of
    ``{"id", "type": "function", "function": {"name", "arguments"}}``, keys in that order (the strings'
    types are checked by ``_parts``). A cheaper test than rendering: nothing is built (the fuzz and the
    decode table of tests/test_session_openai_chat.py hold it to the bytes rendered by hand). Reasoning is
    rendered only on DeepSeek (elsewhere it is bound to its model, so its message keeps its payload).
    """
    if type(message) is not dict:
        return False
    reasoning = dialect == "deepseek" and "reasoning_content" in message
    calls = message.get("tool_calls")
    if list(message) != _RENDERED_KEYS[reasoning, calls is not None]:
        return False
    content = message["content"]
    if not (content is _NO_TEXT.get(dialect) if content is None else type(content) is str):
        return False
    if content == "" and _NO_TEXT.get(dialect) != "":
        return False
    if reasoning and type(message["reasoning_content"]) is not str:
        return False
    if calls is None:
        return True
    if type(calls) is not list or not calls:
        return False
    for call in calls:
        if type(call) is not dict or list(call) != _CALL_KEYS or call["type"] != "function":
            return False
        function = call["function"]
        if type(function) is not dict or list(function) != _FUNCTION_KEYS:
            return False
    return True


def _kept_message(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` rebuilt as key-sharing dicts for a memoized run (:func:`~reasonstate.adapters.base.
    key_shared`; issue 21): the message and each of its ``tool_calls`` entries and their ``function``, each
    of its fields in their order, as a new dict and list (what it was built from is not changed); anything
    else is shared, not copied. Equal to ``message``, key order included: the same bytes are sent."""
    shared = key_shared(message, _KEPT_FIELDS)
    calls = shared.get("tool_calls") if shared is not message else None
    if type(calls) is list and calls:
        shared["tool_calls"] = exact_list([_kept_call(c) for c in calls])
    kept: Mapping[str, Any] = shared
    return kept


def _kept_call(call: Any) -> Any:
    shared = key_shared(call, _CALL_FIELDS)
    if shared is not call and type(shared.get("function")) is dict:
        shared["function"] = key_shared(shared["function"], _FUNCTION_FIELDS)
    return shared


def _calls_as_text(step: Step) -> dict[str, Any]:
    calls = "\n".join(
        f"[called {c.name} (id {c.id}) with arguments {c.raw_arguments}]" for c in step.tool_calls
    )
    text = f"{step.text}\n\n{calls}" if step.text else calls
    return {"role": "assistant", "content": text}


def _results_as_text(step: Step) -> str:
    return "\n".join(
        f"[result of call {r.call_id}{' (error)' if r.is_error else ''}]: {r.content}"
        for r in step.tool_results
    )


def _canonical_message(step: Step) -> dict[str, Any]:
    """A step as an assistant message from its canonical parts: text and tool calls with their exact raw
    arguments; no reasoning (another vendor's reasoning is never disguised as this server's field)."""
    message: dict[str, Any] = {"role": "assistant", "content": step.text or (None if step.tool_calls else "")}
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
        for c in step.tool_calls
    ]
    if calls:
        message["tool_calls"] = calls
    return message


def _with_summary(message: Mapping[str, Any], summary: str | None) -> Mapping[str, Any]:
    if summary is None:
        return message
    note = summary_note(summary)
    content = message.get("content")
    return {**message, "content": f"{note}\n\n{content}" if isinstance(content, str) and content else note}


def _usage(raw: Any, dialect: str) -> Usage:
    """Normalized usage. DeepSeek: hit → cache_read, miss → uncached_input (§3.4); else cached_tokens."""
    if not isinstance(raw, Mapping):
        return Usage()
    prompt, output = count(raw.get("prompt_tokens")), count(raw.get("completion_tokens"))
    out_details = raw.get("completion_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, Mapping) else None
    if dialect == "deepseek" and isinstance(raw.get("prompt_cache_hit_tokens"), int):
        # hit + miss is the prompt (docs/protocols.md §3.4)
        hit, miss = count(raw["prompt_cache_hit_tokens"]), raw.get("prompt_cache_miss_tokens")
        uncached = miss if isinstance(miss, int) else prompt - hit
        return Usage.of(uncached_input=uncached, cache_read=hit, output=output, reasoning=reasoning)
    in_details = raw.get("prompt_tokens_details")
    details = in_details if isinstance(in_details, Mapping) else {}
    cached, written = count(details.get("cached_tokens")), count(details.get("cache_write_tokens"))
    return Usage.of(
        uncached_input=prompt - cached - written,
        cache_read=cached,
        cache_write=written,
        output=output,
        reasoning=reasoning,
    )


# -- the room: what the guard, the commit and the exporters read of the Chat Completions API ----------------

#: the prompt keys of a chat body (the model, tools and message units); the rest are options
_PROMPT_KEYS = frozenset({"model", "tools", "messages"})
_SYSTEM_ROLES = ("system", "developer")


class _Reasoning:
    """Reasoning rides inside an assistant message (``reasoning_content``, ``reasoning``: §3.3)."""

    def reasoning_only(self, value: Any) -> bool:
        return False

    def without_reasoning(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {k: v for k, v in value.items() if k not in _DROPPED_FIELDS}

    def dropped_inside(self, before: Any, after: Any) -> bool:
        return stripped_inside(self, before, after)


class ChatRoom(Room):
    """Chat Completions and its dialects (docs/protocols.md §2, §3) as the guard and the commit read it."""

    api: ClassVar[str] = API

    def declared_options(self) -> tuple[str, frozenset[str]]:
        """The options the installed SDK's ``chat.completions.create`` declares (ImportError: no SDK)."""
        from openai.resources.chat.completions import Completions

        return SDK_LABEL, declared(Completions.create, SDK_LABEL).names

    def serves(self, path: str) -> bool:
        return path.endswith("/chat/completions")

    def view(self, body: Any, model: str | None = None) -> View:
        """One unit per tool and per message without its null fields (§3.4: the server renders messages
        through its chat template); the leading system and developer messages are the system prompt."""
        body = request_body(body)
        name = model_name(body, model)
        b = ViewBuilder(API, body, name, name, prompt=_PROMPT_KEYS, sort=True)
        for i, tool in enumerate(listed(body.get("tools"))):
            b.add("tools", f"$.tools[{i}]", tool, tool)
        messages = listed(body.get("messages"))
        b.prefix = len(b.units)
        for i, message in enumerate(messages):
            m = message if isinstance(message, Mapping) else {}
            leading = all(
                isinstance(x, Mapping) and x.get("role") in _SYSTEM_ROLES for x in messages[: i + 1]
            )
            b.add("system" if leading else "history", f"$.messages[{i}]", message, without_nulls(m))
            if leading:
                b.prefix = len(b.units)
        return b.view(_REASONING)

    def usage(self, raw: Mapping[str, Any]) -> Usage:
        return _usage(raw, _dialect_of(raw))

    def cache_rules(self, model: str, raw_usage: Mapping[str, Any] | None) -> CacheRules:
        return _CACHE[_dialect_of(raw_usage)]

    # docs/protocols.md §1.5: ``prompt_cache_retention`` (sent, or echoed in a Responses answer) names
    # the retention: in memory an unused prefix lives 5 to 10 minutes, at most an hour; extended, up to
    # 24 hours
    retention_key: ClassVar[str] = "prompt_cache_retention"
    retention_lifetimes: ClassVar[Mapping[str, tuple[int, int]]] = {
        "in_memory": (300, 3600),
        "24h": (300, 86400),
    }

    def assembler(self) -> ChatAssembler:
        return ChatAssembler()

    def output_unit(self, response: Mapping[str, Any]) -> str | None:
        """The message as generated, rendered as a chat unit is (§3.4: DeepSeek persists it)."""
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            return None
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            return None
        shown = {k: v for k, v in message.items() if v is not None and k != "reasoning"}
        return self.view({"messages": [shown]}).units[-1].key

    replay_marker: ClassVar[bytes] = b"tool_calls"

    def _source(self, response: Mapping[str, Any]) -> Source | None:
        """The answer's tool calls (id, name, argument string) and its ``reasoning_content`` (§3.3: an
        assistant message that made tool calls keeps its original ``reasoning_content`` in every later
        request)."""
        choices = listed(response.get("choices"))
        message = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
        if not isinstance(message, Mapping):
            return None
        calls = tuple(
            {"id": c["id"], "name": c["function"].get("name"), "arguments": c["function"].get("arguments")}
            for c in listed(message.get("tool_calls"))
            if isinstance(c, Mapping)
            and isinstance(c.get("id"), str)
            and isinstance(c.get("function"), Mapping)
        )
        if not calls:
            return None
        reasoning = message.get("reasoning_content")
        # OpenRouter (§2.3): reasoning_details go back verbatim with the message that made the calls
        details = message.get("reasoning_details")
        details = thaw(details) if isinstance(details, list) and details else None
        head = {
            "reasoning_content": reasoning if isinstance(reasoning, str) else None,
            "reasoning_details": details,
        }
        items = (head, *calls)
        payloads = [c["arguments"] for c in calls if isinstance(c["arguments"], str)]
        if isinstance(reasoning, str):
            payloads.append(reasoning)
        for detail in details or ():
            payloads.extend(
                detail[k]
                for k in ("signature", "data")
                if isinstance(detail, Mapping) and isinstance(detail.get(k), str)
            )
        return replay.source(frozenset(c["id"] for c in calls), items, payloads, positional=False)

    def _check(self, source: Source, body: dict[str, Any], mend: bool, out: list[ReplayFinding]) -> None:
        """Each replayed call (found by its id) against the call that came: its name and argument string
        byte for byte; the message carrying the first call against the answer's ``reasoning_content``."""
        report = replay.Report(out, mend)
        head, *calls = source.items
        first = calls[0]["id"]
        for i, message in enumerate(listed(body.get("messages"))):
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            for j, call in enumerate(listed(message.get("tool_calls"))):
                function = call.get("function") if isinstance(call, dict) else None
                came = next((c for c in calls if c["id"] == call.get("id")), None) if function else None
                if came is None or not isinstance(function, dict):
                    continue
                at = f"$.messages[{i}].tool_calls[{j}].function"
                for key in ("name", "arguments"):
                    if function.get(key) != came[key]:
                        what = (
                            "re-serialized"
                            if key == "arguments" and replay.same_json(function.get(key), came[key])
                            else "changed"
                        )
                        was, now = replay.shown(came[key]), replay.shown(function.get(key))
                        report.altered(
                            f"{at}.{key}",
                            f"{key} {what}: {was} went back as {now}",
                            functools.partial(function.__setitem__, key, came[key]),
                        )
                if call.get("id") == first and head.get("reasoning_details"):
                    self._check_details(message, head["reasoning_details"], f"$.messages[{i}]", report)
                reasoning = head["reasoning_content"]
                if call.get("id") != first or not reasoning:
                    continue
                sent = message.get("reasoning_content")
                path = f"$.messages[{i}].reasoning_content"
                restore = functools.partial(message.__setitem__, "reasoning_content", reasoning)
                if sent is None:
                    report.lost(path, f"reasoning_content {replay.digest(reasoning)} left out", restore)
                elif sent != reasoning:
                    report.altered(
                        path,
                        f"reasoning_content {replay.digest(reasoning)} went back as {replay.digest(sent)}",
                        restore,
                    )

    @staticmethod
    def _check_details(message: dict[str, Any], came: list[Any], at: str, report: replay.Report) -> None:
        """OpenRouter's ``reasoning_details`` (§2.3) against the list that came: left out, or changed in any
        element (a lost signature, a merged or reordered list); payloads shown as digests."""
        sent = message.get("reasoning_details")
        path = f"{at}.reasoning_details"
        whole = canonical_json(came)
        restore = functools.partial(message.__setitem__, "reasoning_details", thaw(came))
        if not sent:
            report.lost(path, f"reasoning_details {replay.digest(whole)} left out", restore)
        elif _no_nulls(sent) != _no_nulls(came):  # a null ``id`` left out (``exclude_none``) is no change
            shown = replay.digest(canonical_json(sent))
            report.altered(path, f"reasoning_details {replay.digest(whole)} went back as {shown}", restore)

    def cache_keys(self, view: View, raw_usage: Mapping[str, Any] | None) -> tuple[str, ...]:
        """On DeepSeek, each message keyed as the server renders it (§3.3: ``reasoning_content`` is read on
        a message with ``tool_calls`` only, ``reasoning`` never), as the codec's units are
        (``_server_view``): a plain answer replayed with its reasoning is not the unit persisted at the
        end of its output (which had it), so it does not extend that unit."""
        dialect = _dialect_of(raw_usage)
        if dialect != "deepseek":
            return view.keys
        return tuple(
            compact_key(_server_view(without_nulls(u.value), dialect), sort=True)
            if u.section != "tools" and isinstance(u.value, Mapping) and u.path.startswith("$.messages[")
            else u.key
            for u in view.units
        )

    def _lost(self, response: Mapping[str, Any], body: Mapping[str, Any]) -> Iterator[str]:
        """DeepSeek's ``reasoning_content`` the answer to a tool call must carry back (§3.3)."""
        choices = listed(response.get("choices"))
        message = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
        if not isinstance(message, Mapping) or not message.get("reasoning_content"):
            return
        calls = {c.get("id") for c in listed(message.get("tool_calls")) if isinstance(c, Mapping)}
        messages = [m for m in listed(body.get("messages")) if isinstance(m, Mapping)]
        if not calls or not any(m.get("role") == "tool" and m.get("tool_call_id") in calls for m in messages):
            return
        for m in messages:
            ids = {c.get("id") for c in listed(m.get("tool_calls")) if isinstance(c, Mapping)}
            if m.get("role") == "assistant" and ids & calls:
                if m.get("reasoning_content") != message["reasoning_content"]:
                    yield payload_digest(message["reasoning_content"])
                return


#: the trace event of the cost OpenRouter reports with each answer (docs/protocols.md §2.3)
REPORTED_COST = "usage.reported_cost"


def _reported_cost(raw: Any) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    """OpenRouter's ``usage.cost`` (credits) as a trace event, next to the normalized usage: billed figures
    the vendor gives are recorded as given, never recomputed (§2.3, §8)."""
    cost = raw.get("cost") if isinstance(raw, Mapping) else None
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        return ()
    return ((REPORTED_COST, {"cost": cost, "unit": "credits"}),)


def _no_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


def _dialect_of(raw_usage: Mapping[str, Any] | None) -> str:
    """The dialect a plain client's answer shows: DeepSeek reports its cache hits and misses (§3.4)."""
    if raw_usage is not None and "prompt_cache_hit_tokens" in raw_usage:
        return "deepseek"
    # OpenRouter reports the call's ``cost`` in its usage (docs/protocols.md §2.3)
    return "openrouter" if raw_usage is not None and "cost" in raw_usage else "openai"


_REASONING = _Reasoning()
ROOM = ChatRoom()
