"""Anthropic Messages API codec (docs/protocols.md §4): pure encode/decode.

Rules encoded here, each from docs/protocols.md §4.3/§4.4:
  * inside the open tool chain every ``thinking``/``redacted_thinking`` block goes back unmodified, in its
    original position, with the ``tool_use`` blocks it preceded (the assistant content is replayed from the
    verbatim continuation payloads, never rebuilt from parsed values);
  * a closed turn's reasoning is replayed or dropped as whole blocks, never edited (signatures fail on any
    edit, re-serialization, reorder or merge: anthropics/anthropic-sdk-python#1598);
  * thinking blocks from another model or vendor are never sent (signatures are model-bound; sending them
    wedges sessions: openclaw/openclaw#120596, anomalyco/opencode#25005); they are withheld and traced, and
    the step is rendered from its canonical parts (text and tool calls; foreign reasoning is never disguised
    as a thinking block). Inside the open tool chain a withheld payload would make the request fail, so it
    is refused with :class:`~reasonstate.errors.ContinuationMismatch` before anything is sent;
  * provenance is the requested model: a dated id echoed for an alias is the same model (§0);
  * blocks of unknown types are kept verbatim as opaque continuation and replayed to the same model;
  * ``cache_control`` breakpoints (at most 4): end of the stable prefix, the last unit before a divergence
    from the previous request, the previous request's end, and the newest message;
  * a thinking block without a signature (an interrupted stream: pydantic/pydantic-ai#7597) is malformed
    and never committed.
"""

from __future__ import annotations

import array
import base64
import bisect
import copy
import functools
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping, MutableSequence, Sequence
from typing import Any, ClassVar

import attrs

from reasonstate.adapters import replay
from reasonstate.adapters.base import (
    DecodedStep,
    Encodings,
    Endpoint,
    ProtocolRules,
    Room,
    Seal,
    Seals,
    ShelvedRun,
    SSEEvent,
    StreamAssembler,
    VendorRequest,
    closed_run,
    compact,
    exact_list,
    head_value,
    in_wire_order,
    json_object,
    key_shared,
    open_turn_encoding,
    packed,
    part_strings,
    payload_of,
    shared_dict,
    shelved,
    summary_note,
    unit_digest,
    upto,
)
from reasonstate.adapters.declared import check_call, declared, object_parameters
from reasonstate.adapters.eventstream import EventStreamParser
from reasonstate.adapters.replay import ReplayFinding, Source
from reasonstate.cache.divergence import (
    ReasoningUnits,
    Section,
    View,
    ViewBuilder,
    listed,
    model_name,
    request_body,
)
from reasonstate.cache.rules import CacheRules, divergence
from reasonstate.errors import (
    InvalidOption,
    MalformedResponse,
    MissingCredentials,
    StreamInterrupted,
    VendorError,
)
from reasonstate.prefix import Prefix, Tool
from reasonstate.state import (
    FIRST_PARTY,
    Continuation,
    EventKind,
    ExecutionRecord,
    History,
    OpaquePart,
    Part,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    Turn,
    Usage,
    as_records,
    bound,
    parse_arguments,
)
from reasonstate.state.continuation import sharing
from reasonstate.state.units import RAW, UnitBuffer, Units, UnitSeq

__all__ = ["ANTHROPIC", "ROOM", "AnthropicAdapter", "AnthropicAssembler", "MessagesRoom"]

#: this API's prefix cache, as data (docs/protocols.md; the schemes are :mod:`reasonstate.cache.rules`)
ANTHROPIC = CacheRules(
    scheme="breakpoints",
    source="docs/protocols.md §4.4",
    min_tokens=1024,
    min_tokens_by_model=((("opus-4-5", "opus-4-6", "haiku-4-5"), 4096), (("haiku-3",), 2048)),
    max_breakpoints=4,
    lookback_units=20,
    lifetime=(300, 300),
)
#: an entry's lifetime per ``cache_control.ttl``, refreshed by each read (docs/protocols.md §4.4)
_TTL_SECONDS = {"5m": 300, "1h": 3600}

VENDOR = "anthropic"
API = "messages"
_REASONING_KINDS = frozenset({"thinking", "redacted_thinking"})
#: a message's fields, in the order sent; a memoized run's messages share their key table (issue 21)
_MESSAGE_FIELDS = ("role", "content")
#: every field of the content blocks a memoized run keeps as key-sharing dicts (text, thinking,
#: redacted_thinking, tool_use, tool_result and the server tools' blocks, §4.2): a closed set, so the holder
#: classes stay few (:func:`~reasonstate.adapters.base.key_shared`); a block with another field is kept as
#: it is
_BLOCK_FIELDS = frozenset(
    {
        "type",
        "text",
        "citations",
        "thinking",
        "signature",
        "data",
        "id",
        "name",
        "input",
        "tool_use_id",
        "content",
        "is_error",
        "caller",
    }
)
#: the fields of an answer's content blocks a replay must carry back unchanged (§4.3)
_REPLAYED = {
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "tool_use": ("type", "id", "name", "input"),
}
_UNBOUND_KINDS = frozenset({"text", "tool_use"})
_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
_DEFAULT_MAX_TOKENS = 4096
PRESERVED_THINKING_MODELS = ("fable-5", "opus-5-5", "sonnet-5-5", "haiku-5-5")
#: how many earlier requests breakpoint placement looks back at
_RECENT = ANTHROPIC.recent


@attrs.frozen(slots=True)
class _TurnEncoding:
    """One turn's messages as (role, blocks, unit digests), shared read-only between requests."""

    turn: Turn
    model: str
    messages: tuple[tuple[str, list[Any], list[str]], ...]
    withheld: tuple[Continuation, ...]
    seal: Seal  # the replayed payloads, checked before every send

    def verify(self) -> None:
        self.seal.check()


_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)-(\d{1,2})(?!\d)")


def adaptive_only(model: str) -> bool:
    """Models that take ``thinking: {"type": "adaptive"}`` only: Claude 4.7 and later, Fable and Mythos
    (docs/protocols.md §4.1)."""
    m = model.lower()
    if "fable" in m or "mythos" in m:
        return True
    found = _CLAUDE_VERSION.search(m)
    return found is not None and (int(found[1]), int(found[2])) >= (4, 7)


@attrs.frozen(slots=True)
class AnthropicRules(ProtocolRules):
    """The Messages rules, plus the thinking configurations the vendor always rejects (§4.1)."""

    def refuse(self, model: str, options: Mapping[str, Any]) -> str | None:
        thinking = options.get("thinking")
        kind = thinking.get("type") if isinstance(thinking, Mapping) else None
        if kind == "enabled" and adaptive_only(model):
            return (
                f"{model} takes adaptive thinking only (docs/protocols.md §4.1): pass "
                "thinking={'type': 'adaptive'} (switch to it with session.switch(client, model=..., "
                "thinking={'type': 'adaptive'}, ...))"
            )
        choice = options.get("tool_choice")
        if kind == "enabled" and isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"):
            return "thinking may not be enabled when tool_choice forces tool use (docs/protocols.md §4.1)"
        if "context_management" in options:
            return _refuse_context_management(options["context_management"], kind)
        return None


# -- stream assembly: the non-streamed answer from its SSE stream (docs/protocols.md §4.5) -------------------

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
      the delta has them; a non-null ``context_management`` (context editing's ``applied_edits``,
      docs/protocols.md §4.7) is set on the message;
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

    def _complete(self) -> bool:
        return self._stopped

    def _event(self, event: SSEEvent) -> None:
        if self._stopped:
            return
        data = json_object(event, "stream event")
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
        managed = data.get("context_management")
        if managed is not None:  # context editing's applied_edits come in the final delta (§4.7)
            message["context_management"] = managed

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
            in_wire_order(b.value, _BLOCK_ORDER.get(str(b.value["type"]), ())) for b in self._blocks
        ]
        if isinstance(message.get("usage"), Mapping):
            message["usage"] = in_wire_order(message["usage"], _USAGE_ORDER)
        return in_wire_order(message, _MESSAGE_ORDER)


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


#: the SDK method a Messages call goes to, as error messages name it
SDK_LABEL = "anthropic messages.create"


_AUTH_HEADERS = ("x-api-key", "authorization")


def _check_credentials(client: Any) -> None:
    """:class:`MissingCredentials` when an ``anthropic`` client has nothing to authenticate with: the SDK
    checks only when it builds the first request ("Could not resolve authentication method"), after the
    session has begun a turn. What it accepts: ``api_key``, ``auth_token``, a ``credentials`` provider, or an
    ``X-Api-Key`` / ``Authorization`` default header."""
    if type(client).__module__.split(".")[0] != "anthropic":
        return
    if getattr(client, "api_key", None) or getattr(client, "auth_token", None):
        return
    if getattr(client, "_token_cache", None) is not None:  # a credentials= provider fills it per request
        return
    headers = getattr(client, "default_headers", None) or {}
    if any(k.lower() in _AUTH_HEADERS and isinstance(v, str) and v for k, v in headers.items()):
        return
    raise MissingCredentials(
        "this Anthropic client has no credentials: pass api_key= (or set ANTHROPIC_API_KEY before "
        "building the client), auth_token=, credentials=, or an X-Api-Key / Authorization default header; "
        "nothing was sent"
    )


#: the Anthropic-compatible endpoints (``dialect=``, docs/protocols.md §10.8): each is its own platform of the
#: Messages API (a payload goes back only there); DeepSeek and Kimi take the thinking of every earlier
#: tool-calling message back (their chat APIs' ``reasoning_content`` rule, §3.3), unsigned
DIALECTS = ("anthropic", "deepseek", "kimi", "minimax")
_UNSIGNED_DIALECTS = frozenset({"deepseek", "kimi"})


class BedrockMessagesAssembler(AnthropicAssembler):
    """The Messages ``message`` object from Bedrock's ``invoke-with-response-stream`` (docs/protocols.md
    §10.4): AWS event-stream messages (:class:`EventStreamParser`, CRCs checked) whose ``chunk`` payload
    ``{"bytes": base64}`` holds one Messages stream event's JSON, assembled as the first-party SSE stream
    is (the SDK's ``anthropic/lib/bedrock/_stream_decoder.py`` reads them so). An exception message is
    :class:`VendorError`; a body cut inside a message or before ``message_stop`` is
    :class:`StreamInterrupted`."""

    def __init__(self) -> None:
        super().__init__()
        self._frames = EventStreamParser()

    def feed_bytes(self, chunk: bytes) -> None:
        for headers, payload in self._frames.feed(chunk):
            if headers.get(":message-type") == "exception":
                kind = headers.get(":exception-type", "exception")
                try:
                    detail = json.loads(payload).get("message")
                except (ValueError, AttributeError):
                    detail = payload[:80]
                raise VendorError(f"Bedrock stream {kind}: {detail}", body={"type": kind, "message": detail})
            if headers.get(":event-type") != "chunk":
                continue
            try:
                data = base64.b64decode(json.loads(payload)["bytes"], validate=True).decode()
            except (ValueError, KeyError, TypeError) as exc:
                raise MalformedResponse(
                    f"a Bedrock stream chunk is not {{bytes: base64}}: {payload[:80]!r}"
                ) from exc
            self._dispatch(SSEEvent(None, data))

    def feed(self, line: str) -> None:  # pragma: no cover - the event stream is binary
        raise MalformedResponse("a Bedrock Messages stream is binary (AWS event stream), not lines")

    def finish(self) -> dict[str, Any]:
        pending = self._frames.pending()
        try:
            return self._result()
        except StreamInterrupted as exc:
            if not pending:
                raise
            raise StreamInterrupted(f"{exc}; the body ended inside an event-stream message") from exc


class AnthropicAdapter:
    """The Messages API codec. ``min_cacheable`` overrides the per-model minimum cacheable length,
    ``lookback_units`` the vendor's breakpoint lookback (docs/protocols.md §4.4). ``dialect``: an
    Anthropic-compatible endpoint (:data:`DIALECTS`, §10.8), whose payloads are bound to it as a platform."""

    vendor = VENDOR
    api = API
    endpoint = Endpoint(
        sdk="anthropic",
        resource=("messages",),
        label="Anthropic",
        assembler=AnthropicAssembler,
        blame=lambda request, error: _blamed_blocks(request, error),
    )

    def __init__(
        self,
        *,
        min_cacheable: int | None = None,
        lookback_units: int = 20,
        platform: str = FIRST_PARTY,
        dialect: str = "anthropic",
        scope: str = "",
    ) -> None:
        if dialect not in DIALECTS:
            raise InvalidOption(f"unknown Messages dialect {dialect!r}; expected one of {DIALECTS}")
        self.dialect = dialect
        #: where the client's requests are served (docs/protocols.md §10): payloads go back only there; a
        #: compatible endpoint is a platform of its own
        self.platform = platform if dialect == "anthropic" else dialect
        #: the platform and the account it binds payloads to (``scope``: "" when unknown or unbound,
        #: docs/protocols.md §10.1): what payloads are captured with and replayed to
        self.binding = bound(self.platform, scope if dialect == "anthropic" else "")
        if self.platform == "bedrock":  # invoke-with-response-stream: the AWS event stream (§10.4)
            self.endpoint = attrs.evolve(self.endpoint, assembler=BedrockMessagesAssembler)
        cache = attrs.evolve(ANTHROPIC, lookback_units=lookback_units)
        if min_cacheable is not None:
            cache = attrs.evolve(cache, min_tokens=min_cacheable, min_tokens_by_model=())
        self.cache = cache
        self.rules: ProtocolRules = AnthropicRules(
            vendor=VENDOR,
            api=API,
            # preserved thinking: each block is checked against the exact system/tools/messages before it
            # (Fable 5.x, Opus 5.5; Sonnet/Haiku 5.5 blocks are account-bound too) - docs/protocols.md §4.3
            append_only_models=PRESERVED_THINKING_MODELS,
            # DeepSeek / Kimi: every tool-calling step keeps its thinking, whatever a policy says (§10.8)
            tool_steps_keep_reasoning=dialect in _UNSIGNED_DIALECTS,
        )

    def check_call(self, client: Any, model: str, options: Mapping[str, Any], tools: Sequence[Tool]) -> None:
        """Refuse, before any request, what can never be sent (docs/protocols.md §9): a client with no
        credentials, a model id of another vendor or misspelling one the installed SDK lists, an option
        ``messages.create`` does not declare or a value its annotation rules out, a tool whose
        ``input_schema`` is not an object schema (§4.2)."""
        if self.platform == FIRST_PARTY or self.dialect != "anthropic":  # Bedrock / Vertex: AWS / Google
            _check_credentials(client)
        check_call(
            client,
            sdk="anthropic",
            resource=self.endpoint.resource,
            label=SDK_LABEL,
            vendor=VENDOR if self.dialect == "anthropic" else self.dialect,
            model=model,
            options=options,
            own=frozenset({"context_management"}),  # a beta field, sent in extra_body (§4.7)
            family="claude-",
        )
        object_parameters(tools, "Anthropic's input_schema", "docs/protocols.md §4.2")

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
        """Build the ``messages.create`` kwargs for the next call on ``history`` (whose last turn is open)."""
        memo = encodings if encodings is not None else Encodings()
        memo.next_request()  # the per-text memo keeps what this request and the previous one use
        head = memo.derived(prefix, (API, "head"), functools.partial(_head, prefix))
        head_tools, head_system, head_units = head
        # shared with every request on this prefix: the lists are copied, and a marked block is a new dict
        tools, system, units = list(head_tools), list(head_system), UnitBuffer(head_units)
        n_head = len(units)
        few: list[tuple[str, list[Any], list[str]]] = []
        for user, answer in prefix.few_shots:
            few.append(("user", *_text_block(user, memo)))
            few.append(("assistant", *_text_block(answer, memo)))
        offset = n_head + sum(len(d) for _, _, d in few)
        # the closed turns: all but the open one, read in place (no copy of the history's turns)
        closed = len(history.turns) - (history.open_turn is not None)
        run = _closed_run(history.turns, model, offset, memo, self.binding, closed)
        # the run's lists are shared between requests: copied here, and message dicts are replaced, never
        # changed, when a block is marked or two turns of one role merge
        messages: list[dict[str, Any]] = []
        # unit index of each message's first block (a bisect finds a unit's block); an array, as the run's
        starts: array.array[int] = array.array("I")
        for role, blocks, digests in few:
            _append(messages, starts, units, role, blocks, digests)
        prefix_units = len(units)
        messages.extend(run.messages)
        starts.extend(run.starts)
        run.add_units(units)  # packed, joined at C speed (issue 21)
        run.check()
        withheld: list[Continuation] = list(run.withheld)
        if history.open_turn is not None:
            build = functools.partial(_encode_turn, model=model, memo=memo, platform=self.binding)
            encoded = open_turn_encoding(history.turns[-1], build, model, _RULE)
            withheld.extend(encoded.withheld)
            for role, blocks, digests in encoded.messages:
                _append(messages, starts, units, role, blocks, digests)

        def block_at(k: int) -> tuple[list[Any], int]:
            mi = bisect.bisect_right(starts, k) - 1
            # messages and content lists may be shared with memoized turns: copy before marking a block
            content = list(messages[mi]["content"])
            messages[mi] = {**messages[mi], "content": content}
            return content, k - starts[mi]

        def markable(k: int) -> bool:
            # thinking blocks cannot carry cache_control
            if k < n_head:
                return True
            content, bi = block_at(k)
            return content[bi].get("type") not in _REASONING_KINDS

        # the vendor's context editing (§4.7): the prompt it reads and caches is the edited one, so the units
        # (and the breakpoints, counted in them) are the edited prompt's; the messages sent are unchanged
        edits = server_edits(options.get("context_management"), messages)
        sent_units = units.done()
        if type(sent_units) is Units:
            # the run reads its units out of this request's, which the records keep (issue 21: memory)
            run_key = _run_key(model, offset, self.binding)
            if memo.newest(run_key) is run:
                memo.keep_newest(run_key, run.in_request(sent_units))
        # one unit per content block from the first message on (what :func:`_edited_units` maps); counted
        # only when the vendor edits something (the edits walk the messages anyway)
        if edits and starts and len(units) - starts[0] != sum(len(m["content"]) for m in messages):
            edits = ServerEdits(known=False)  # not this request's layout: predict nothing rather than wrong
        if edits:
            edited, at = _edited_units(sent_units, messages, starts, edits)
            request_units = edited.done()
            breakpoints = self._breakpoints(request_units, prefix_units, records, lambda q: markable(at[q]))
            marked = tuple(at[b - 1] + 1 for b in breakpoints)  # in the units of the messages sent
        else:
            # one copy of the units, which the breakpoints compare and the request keeps (issue 21: own CPU)
            request_units = sent_units
            breakpoints = self._breakpoints(request_units, prefix_units, records, markable)
            marked = breakpoints
        n_tools = len(tools)
        for b in marked:
            k = b - 1  # the unit that carries the marker
            if k < n_tools:
                tools[k] = {**tools[k], "cache_control": _EPHEMERAL}
            elif k < n_head:
                system[k - n_tools] = {**system[k - n_tools], "cache_control": _EPHEMERAL}
            else:
                content, bi = block_at(k)
                content[bi] = {**content[bi], "cache_control": _EPHEMERAL}
        kwargs: dict[str, Any] = {
            "model": model,
            "max_tokens": options.get("max_tokens", _DEFAULT_MAX_TOKENS),
        }
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = tools
        kwargs["messages"] = messages
        for key, value in options.items():
            if key == "context_management":  # the beta field and its header (docs/protocols.md §4.7)
                kwargs["extra_body"] = {**kwargs.get("extra_body", {}), key: value}
                headers = dict(kwargs.get("extra_headers") or {})
                betas = [b.strip() for b in str(headers.get("anthropic-beta", "")).split(",") if b.strip()]
                if CONTEXT_MANAGEMENT_BETA not in betas:
                    betas.append(CONTEXT_MANAGEMENT_BETA)
                kwargs["extra_headers"] = {**headers, "anthropic-beta": ",".join(betas)}
            elif key == "extra_headers":
                merged = {**dict(value), **dict(kwargs.get("extra_headers") or {})}
                if "anthropic-beta" in value and "anthropic-beta" in merged:
                    own = [b for b in str(value["anthropic-beta"]).split(",") if b.strip()]
                    ours = [b for b in str(merged["anthropic-beta"]).split(",") if b.strip() not in own]
                    merged["anthropic-beta"] = ",".join([*own, *ours])
                kwargs["extra_headers"] = merged
            elif key == "extra_body":
                kwargs["extra_body"] = {**dict(value), **kwargs.get("extra_body", {})}
            elif key != "max_tokens":
                kwargs[key] = value
        return VendorRequest(
            kwargs=kwargs,
            units=request_units,
            model=model,
            breakpoints=breakpoints,
            prefix_units=n_head,
            withheld=tuple(withheld),
            predictable=edits.known,
        )

    def _breakpoints(
        self,
        units: Sequence[str],
        prefix_units: int,
        records: Sequence[ExecutionRecord],
        markable: Callable[[int], bool],
    ) -> tuple[int, ...]:
        points = {len(units)}
        if prefix_units:
            points.add(prefix_units)
        if records:
            window = as_records(records)
            previous = window.newest_units()
            d = divergence(units, previous)
            if d is None:
                points.add(len(previous))
            elif d > 0:
                # keep what earlier requests cached readable: mark the longest earlier request that is
                # still a prefix of this one (else the shared part itself, so later requests can hit it)
                since = max(len(window) - _RECENT, 0)
                ends = [r.units for _, r, s in window.shares(units, since=since) if s == r.units <= d]
                points.add(max(ends) if ends else d)
        for p in list(points):
            q = p
            while q > 0 and not markable(q - 1):
                q -= 1
            points.discard(p)
            points.add(q)
        ordered = sorted(p for p in points if p > 0)
        limit = self.cache.max_breakpoints
        if len(ordered) > limit:
            # the stable prefix and the newest message matter most; keep the latest in between
            ordered = [ordered[0], *ordered[-(limit - 1) :]]
        return tuple(ordered)

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        """Split a Messages response (the JSON object as received) into the four layers' material.

        Payloads are bound to the model the request asked for, not the echoed ``model`` (a dated id for an
        alias, docs/protocols.md §0): the session's next request names the same model it asked for.
        """
        if not isinstance(response, Mapping) or not isinstance(response.get("content"), list):
            raise MalformedResponse("Anthropic response has no content list")
        echoed = response.get("model")
        produced_by = request.model
        parts: list[Part] = []
        payloads: list[Continuation] = []
        for i, block in enumerate(response["content"]):
            if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                raise MalformedResponse(f"content[{i}] is not a typed block")
            kind = block["type"]
            if _canonical_text(block):
                # a plain text block is what the codec renders from its part, byte for byte: no payload is
                # kept for it (issue 21: state in proportion to the content); the request is the same
                parts.append(TextPart(text=block["text"]))
                continue
            part = _part(kind, block, i, self.dialect not in _UNSIGNED_DIALECTS)
            if isinstance(part, ToolCallPart) and _rendered_as_received(block, part):
                # likewise a tool call whose block is the one rendered from its part
                parts.append(attrs.evolve(part, continuation=None))
                continue
            # the part's payload is the next one kept (plain text and canonical tool calls keep none)
            parts.append(attrs.evolve(part, continuation=len(payloads)) if len(payloads) != i else part)
            payloads.append(
                Continuation.capture(
                    vendor=VENDOR,
                    api=API,
                    model=produced_by,
                    kind=kind,
                    value=block,
                    # DeepSeek / Kimi thinking is unsigned text their API wants back after a model change
                    # too (as the chat dialect's reasoning_content, §3.3)
                    model_bound=kind not in _UNBOUND_KINDS and self.dialect not in _UNSIGNED_DIALECTS,
                    parsed=False,  # replayed from the bytes (``checked``), never as ``value``
                    platform=self.binding,
                    # a thinking block ``{"type", "thinking", "signature"}`` (a redacted one's ``{"type",
                    # "data"}``) is kept as its strings, shared with its part and the memo's block sent
                    # back; its bytes are rendered from them, the same (issue 21: not kept twice)
                    strings=kind in _REASONING_KINDS,
                )
            )
        stop = response.get("stop_reason")
        events: list[tuple[str, Mapping[str, Any]]] = []
        managed = response.get("context_management")
        applied = managed.get("applied_edits") if isinstance(managed, Mapping) else None
        if isinstance(applied, list) and applied:  # §4.7: the vendor edited the prompt it read
            events.append(
                (
                    EventKind.CONTEXT_CLEARED,
                    {
                        "response_id": response.get("id"),
                        "applied_edits": [dict(e) for e in applied if isinstance(e, Mapping)],
                        "summary": "the vendor cleared context server-side before the model read the prompt "
                        "(docs/protocols.md §4.7)",
                    },
                )
            )
        return DecodedStep(
            parts=tuple(parts),
            continuation=tuple(payloads),
            events=tuple(events),
            stop_reason=stop if isinstance(stop, str) else "unknown",
            usage=_usage(response.get("usage")),
            model=produced_by,
            response_id=response.get("id") if isinstance(response.get("id"), str) else None,
            response_model=echoed if isinstance(echoed, str) else None,
        )


_BLOCK_PATH = re.compile(r"messages\.(\d+)\.content\.(\d+): Invalid `(?:signature|data)`")


def _blamed_blocks(request: VendorRequest, error: VendorError) -> tuple[Any, ...]:
    """The thinking / redacted blocks a 400 names (``messages.N.content.M: Invalid `signature` in
    `thinking` block``, docs/protocols.md §4.3), as sent (without a ``cache_control`` marker)."""
    messages = request.kwargs.get("messages", [])
    blamed = []
    for n, m in _BLOCK_PATH.findall(str(error)):
        try:
            block = messages[int(n)]["content"][int(m)]
        except (IndexError, KeyError, TypeError):
            continue
        blamed.append({k: v for k, v in block.items() if k != "cache_control"})
    return tuple(blamed)


_RULE = "docs/protocols.md §4.3"

#: the beta header context editing needs (docs/protocols.md §4.7)
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
_CLEAR_THINKING = "clear_thinking_20251015"
_EDITS = frozenset({_CLEAR_THINKING, "clear_tool_uses_20250919"})
#: each edit's fields (the SDK's ``BetaClearThinking20251015EditParam`` and
#: ``BetaClearToolUses20250919EditParam``, docs/protocols.md §4.7)
_EDIT_FIELDS = {
    _CLEAR_THINKING: frozenset({"type", "keep"}),
    "clear_tool_uses_20250919": frozenset(
        {"type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"}
    ),
}


#: what a tool result cleared by ``clear_tool_uses_20250919`` reads (the docs say "placeholder text"; this
#: wording is the emulator's, [UNCONFIRMED]: docs/protocols.md §4.7)
CLEARED_TOOL_RESULT = "[cleared to save context]"
_CLEAR_TOOL_USES = "clear_tool_uses_20250919"


@attrs.frozen(slots=True)
class ServerEdits:
    """What a request's ``context_management`` edits change in the prompt the vendor reads and caches
    (docs/protocols.md §4.7), over the messages as sent.

    ``thinking``: the messages whose thinking and redacted-thinking blocks are cleared; ``blocks``: the
    blocks replaced, by ``(message, block)`` index, as the vendor reads them (a cleared tool result, a tool
    use with its input cleared); ``known``: False when an edit's effect depends on the vendor's own token
    count (a ``clear_tool_uses_20250919`` with an ``input_tokens`` trigger or a ``clear_at_least``), so
    nothing about the edited prompt can be predicted.
    """

    thinking: frozenset[int] = frozenset()
    blocks: Mapping[tuple[int, int], Any] = attrs.field(factory=dict)
    known: bool = True

    def __bool__(self) -> bool:
        return bool(self.thinking or self.blocks)


def _turns(messages: Sequence[Any]) -> list[list[int]]:
    """The assistant messages of each assistant turn: a turn runs from one human message (a user message
    that is not tool results only) to the next, so a tool loop is one turn (docs/protocols.md §4.7)."""
    turns: list[list[int]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            continue
        content = m.get("content")
        human = m.get("role") == "user" and (
            not isinstance(content, list)
            or any(not isinstance(b, Mapping) or b.get("type") != "tool_result" for b in content)
        )
        if human or not turns:
            turns.append([])
        if m.get("role") == "assistant":
            turns[-1].append(i)
    return turns


def server_edits(value: Any, messages: Sequence[Any]) -> ServerEdits:
    """The edits of a ``context_management`` option as the vendor applies them to ``messages``
    (docs/protocols.md §4.7); the one rule the session's request units and the guard's view both read.

    ``clear_thinking_20251015`` with ``keep: {"type": "thinking_turns", "value": N}`` (default N = 1)
    clears the thinking of every assistant turn with thinking but the last N (``keep: "all"``: none).
    ``clear_tool_uses_20250919`` with a ``tool_uses`` trigger, once the request holds that many tool uses,
    replaces the result of every tool use but the last ``keep`` (default 3) whose tool is not in
    ``exclude_tools`` by :data:`CLEARED_TOOL_RESULT`, and clears its input when ``clear_tool_inputs`` is
    true or names its tool.
    """
    edits = value.get("edits") if isinstance(value, Mapping) else None
    if not isinstance(edits, list):
        return ServerEdits()
    thinking: frozenset[int] = frozenset()
    blocks: dict[tuple[int, int], Any] = {}
    known = True
    for edit in edits:
        if not isinstance(edit, Mapping):
            continue
        if edit.get("type") == _CLEAR_THINKING:
            thinking = _cleared_thinking(edit.get("keep", {"type": "thinking_turns", "value": 1}), messages)
        elif edit.get("type") == _CLEAR_TOOL_USES:
            trigger = edit.get("trigger", {"type": "input_tokens", "value": 100_000})
            least = edit.get("clear_at_least")
            if not isinstance(trigger, Mapping) or trigger.get("type") != "tool_uses" or least:
                known = False  # the vendor's token count decides
                continue
            blocks.update(_cleared_tool_uses(edit, trigger, messages))
    return ServerEdits(thinking, blocks, known)


def _cleared_thinking(keep: Any, messages: Sequence[Any]) -> frozenset[int]:
    if not isinstance(keep, Mapping) or keep.get("type") != "thinking_turns":
        return frozenset()  # "all" or {"type": "all"}: nothing cleared
    n = keep.get("value")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return frozenset()
    with_thinking = [
        t
        for t in _turns(messages)
        if any(
            isinstance(b, Mapping) and b.get("type") in _REASONING_KINDS
            for i in t
            for b in listed(messages[i].get("content"))
        )
    ]
    return frozenset(i for t in with_thinking[: max(0, len(with_thinking) - n)] for i in t)


def _cleared_tool_uses(
    edit: Mapping[str, Any], trigger: Mapping[str, Any], messages: Sequence[Any]
) -> dict[tuple[int, int], Any]:
    uses = [
        (i, j, b)
        for i, m in enumerate(messages)
        if isinstance(m, Mapping) and m.get("role") == "assistant"
        for j, b in enumerate(listed(m.get("content")))
        if isinstance(b, Mapping) and b.get("type") == "tool_use"
    ]
    if len(uses) < int(trigger.get("value", 0)):
        return {}
    keep = edit.get("keep", {"type": "tool_uses", "value": 3})
    kept = int(keep.get("value", 3)) if isinstance(keep, Mapping) else 3
    excluded = set(edit.get("exclude_tools") or ())
    inputs = edit.get("clear_tool_inputs") or False
    results = {
        b.get("tool_use_id"): (i, j, b)
        for i, m in enumerate(messages)
        if isinstance(m, Mapping) and m.get("role") == "user"
        for j, b in enumerate(listed(m.get("content")))
        if isinstance(b, Mapping) and b.get("type") == "tool_result"
    }
    out: dict[tuple[int, int], Any] = {}
    for i, j, use in uses[: max(0, len(uses) - kept)]:
        found = results.get(use.get("id"))
        if use.get("name") in excluded or found is None:
            continue
        ri, rj, result = found
        out[ri, rj] = {**_without(result, _CACHE_CONTROL), "content": CLEARED_TOOL_RESULT}
        if inputs is True or (isinstance(inputs, list) and use.get("name") in inputs):
            out[i, j] = {**_without(use, _CACHE_CONTROL), "input": {}}
    return out


def _edited_units(
    units: UnitSeq, messages: Sequence[Mapping[str, Any]], starts: Sequence[int], edits: ServerEdits
) -> tuple[UnitBuffer, list[int]]:
    """The unit chain of the prompt as the vendor edits it (:func:`server_edits`) and, for each of its
    units, the index of the unit sent it stands for. Units before the first message are never edited.
    (A unit kept is copied as its slice: packed units stay packed, never made strings.)"""
    out = UnitBuffer(units[: starts[0]] if starts else units)
    at: list[int] = list(range(len(out)))
    for i, first in enumerate(starts):
        for j, block in enumerate(messages[i]["content"]):
            k = first + j
            if i in edits.thinking and isinstance(block, Mapping) and block.get("type") in _REASONING_KINDS:
                continue
            replaced = edits.blocks.get((i, j))
            if replaced is None:
                out.extend(units[k : k + 1])
            else:
                out.append(unit_digest(replaced))
            at.append(k)
    return out, at


def _refuse_context_management(value: Any, thinking: Any) -> str | None:
    """Why the vendor would refuse ``context_management`` (docs/protocols.md §4.7), else None."""
    edits = value.get("edits") if isinstance(value, Mapping) else None
    if not isinstance(edits, list):
        return "context_management must be {'edits': [...]} (docs/protocols.md §4.7)"
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, Mapping) else None
        if kind not in _EDITS:
            return f"context_management edit {i}: unknown type {kind!r} (docs/protocols.md §4.7)"
        if kind == _CLEAR_THINKING and i != 0:
            return f"context_management: {_CLEAR_THINKING} must be the first edit (docs/protocols.md §4.7)"
        if kind == _CLEAR_THINKING and thinking not in ("enabled", "adaptive"):
            return f"context_management: {_CLEAR_THINKING} needs thinking enabled (docs/protocols.md §4.7)"
        unknown = sorted(set(edit) - _EDIT_FIELDS[kind])
        if unknown:
            return (
                f"context_management edit {i} ({kind}): unknown field(s) {', '.join(unknown)}; it takes "
                f"{', '.join(sorted(_EDIT_FIELDS[kind]))} (docs/protocols.md §4.7)"
            )
    return None


_Head = tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...], tuple[str, ...]]


def _head(prefix: Prefix) -> _Head:
    """The tools and system blocks of ``prefix`` and their unit digests (built once per prefix; without
    tools, shared by every session on the same system text: :func:`head_value`)."""
    if not prefix.tools:
        return head_value(_system_head, prefix.system)
    tools = tuple(
        {"name": t.name, "description": t.description, "input_schema": dict(t.offered_parameters)}
        for t in prefix.tools
    )
    system = ({"type": "text", "text": prefix.system},) if prefix.system else ()
    return tools, system, tuple(unit_digest(b) for b in (*tools, *system))


def _system_head(system: str) -> _Head:
    """:func:`_head` of a prefix with no tools and the system text ``system``."""
    blocks = ({"type": "text", "text": system},) if system else ()
    return (), blocks, tuple(unit_digest(b) for b in blocks)


def _append(
    messages: list[dict[str, Any]],
    starts: MutableSequence[int],
    units: MutableSequence[str],
    role: str,
    blocks: list[Any],
    digests: list[str],
) -> None:
    """Add one message's blocks. Consecutive turns of one role are one turn to the vendor (§4.2); they
    arise when a step has nothing to send (an empty final answer: content []), and are merged here into a
    new message dict (the old one may be shared with a memoized run)."""
    if messages and messages[-1]["role"] == role:
        messages[-1] = {"role": role, "content": [*messages[-1]["content"], *blocks]}
    else:
        starts.append(len(units))
        messages.append({"role": role, "content": blocks})
    units.extend(digests)


def _cuts() -> array.array[int]:
    return array.array("I")


def _narrow_cuts() -> array.array[int]:
    """A run's empty cuts: 2 bytes a figure while every one fits (issue 21), see :func:`_cut_shelf`."""
    return array.array("H")


def _cut_shelf(shelf: array.array[int], n: int, new: list[int]) -> array.array[int]:
    """``shelf[:n]`` followed by ``new`` (:func:`~reasonstate.adapters.base.shelved`), widened to 4 bytes a
    figure (a copy: the runs sharing the narrow shelf keep it) when one of ``new`` does not fit in 2."""
    if shelf.typecode == "H" and new and max(new) > 0xFFFF:
        shelf = array.array("I", shelf[:n])
    return shelved(shelf, n, new)


@attrs.frozen(slots=True, eq=False)
class _Run(ShelvedRun):
    """The encoding of a run of closed turns (the whole closed history), shared between requests; its
    lists and dicts are never changed once built (a marked or merged message is a new dict).

    Built incrementally (:func:`~reasonstate.adapters.base.closed_run`): the run of turns ``0..k`` extends
    the run of ``0..k-1``, so each request pays one turn's work to extend it and identity checks of its
    payloads to verify it. Its first unit is unit ``offset`` of the request. ``starts`` holds each
    message's first unit (relative to ``offset``); ``cuts`` per turn where the run of the turns up to it
    ends (messages, units, withheld, seals), so a :meth:`prefix` reads them.

    Storage: turns, messages, starts, withheld payloads and cuts are shelves
    (:func:`~reasonstate.adapters.base.shelved`) shared by the runs extended from one another; a run reads
    its first ``n`` turns' worth of each, so extending the newest run appends in place, no copy of the
    earlier items (issue 21: own CPU per request). A merge (§4.2) replaces the run's last message: that
    extension copies the message shelf first (a fork), so the runs sharing it still read their own.

    Units (packed, 32 bytes each): the run's units are ``unit_src[unit_start:unit_start + m] + unit_tail``
    (``m``: all of them but the tail's), ``unit_src`` an immutable ``bytes`` that may hold other units
    around them. After a request is built the run reads its units out of that request's own packed units
    (:meth:`in_request`), which the records keep as the newest request's: one copy of the closed history's
    digests in memory, not one in the run and another in the records (issue 21: state in memory). Only
    the units of the turns closed since are the run's own (``unit_tail``).
    """

    offset: int
    turn_shelf: list[Turn] = attrs.field(factory=list)
    message_shelf: list[dict[str, Any]] = attrs.field(factory=list)
    start_shelf: array.array[int] = attrs.field(factory=_cuts)
    #: immutable bytes holding the run's units from ``unit_start`` on (but the tail's), and maybe others
    unit_src: bytes = b""
    unit_start: int = 0
    #: the packed units of the run's newest turns, not in ``unit_src``
    unit_tail: bytes = b""
    withheld_shelf: list[Continuation] = attrs.field(factory=list)
    seals: Seals = attrs.field(factory=Seals)
    cuts: array.array[int] = attrs.field(factory=_narrow_cuts)
    #: how many turns this run holds (its share of the shelves)
    n: int = 0

    #: per turn in ``cuts``: messages (and starts), units, withheld, seals
    width: ClassVar[int] = 4

    @property
    def messages(self) -> Sequence[dict[str, Any]]:
        return upto(self.message_shelf, self._ends()[0])

    @property
    def starts(self) -> array.array[int]:
        m = self._ends()[0]
        return self.start_shelf if len(self.start_shelf) == m else self.start_shelf[:m]

    def _unit_parts(self) -> tuple[memoryview | bytes, bytes]:
        """The run's packed units as (the part read out of ``unit_src``, the tail)."""
        size = self._ends()[1] * RAW - len(self.unit_tail)
        start = self.unit_start
        head = memoryview(self.unit_src)[start : start + size] if size else b""
        return head, self.unit_tail

    @property
    def units(self) -> Units:
        head, tail = self._unit_parts()
        return Units(bytes(head) + tail)

    def unit_raw(self) -> tuple[bytearray, int]:
        """Not kept as one shelf here: :meth:`add_units` joins the run's units into a request's."""
        head, tail = self._unit_parts()
        return bytearray(head) + tail, len(head) + len(tail)

    def add_units(self, units: UnitBuffer) -> None:
        """Append the run's packed units to ``units`` (held by reference, joined at C speed: issue 21)."""
        head, tail = self._unit_parts()
        if len(head):
            units.extend_packed(head)
        if tail:
            units.extend_packed(tail)

    def in_request(self, request: Units) -> _Run:
        """This run reading its units out of ``request``, the packed units of a request its units were
        joined into (:meth:`add_units`) from unit ``offset`` on; else (the units there are not this run's
        by their length or by the bytes at the ends of its two parts) this run. O(1) beside the tail:
        no pass over the bytes (issue 21: own CPU per request)."""
        size = self._ends()[1] * RAW
        start = self.offset * RAW
        raw = request.raw
        if (
            not size
            or len(raw) < start + size
            or (raw is self.unit_src and start == self.unit_start and not self.unit_tail)
        ):
            return self
        head, tail = self._unit_parts()
        at = start + len(head)
        if raw[at : start + size] != tail or (len(head) and raw[at - RAW : at] != bytes(head[-RAW:])):
            return self
        return _Run(
            self.offset,
            self.turn_shelf,
            self.message_shelf,
            self.start_shelf,
            raw,
            start,
            b"",
            self.withheld_shelf,
            self.seals,
            self.cuts,
            self.n,
        )

    def extended(self, turns: Sequence[Turn], encodings: Sequence[_TurnEncoding]) -> _Run:
        """This run followed by ``turns`` (encoded as ``encodings``), built in one pass over them."""
        # the new messages and units are built apart, after the run's last message (which a merge may
        # replace, §4.2), and appended to the shelves (issue 21: own CPU per request)
        offset, n = self.offset, self.n
        n_messages, n_units, n_withheld = self._ends()
        last = self.message_shelf[n_messages - 1 : n_messages]
        messages, starts = list(last), array.array("I")
        kept = n_messages - len(messages)
        units: list[str] = []
        withheld: list[Continuation] = []
        cuts: list[int] = []
        sealed = len(self.seals)
        for encoded in encodings:
            for role, blocks, block_digests in encoded.messages:
                # the run keeps its messages for the session's life: key-sharing dicts (issue 21)
                if messages and messages[-1]["role"] == role:  # as _append merges
                    merged = [*messages[-1]["content"], *blocks]
                    messages[-1] = shared_dict(_MESSAGE_FIELDS, (role, merged))
                else:
                    starts.append(offset + n_units + len(units))
                    messages.append(shared_dict(_MESSAGE_FIELDS, (role, blocks)))
                units.extend(block_digests)
            withheld.extend(encoded.withheld)
            sealed += len(encoded.seal.entries)
            cuts.extend((kept + len(messages), n_units + len(units), n_withheld + len(withheld), sealed))
        if not last or messages[0] is last[0]:
            message_shelf = shelved(self.message_shelf, n_messages, messages[len(last) :])
        else:  # a merge replaced the run's last message: the runs sharing the shelf keep theirs (a fork)
            message_shelf = self.message_shelf[:kept] + messages
        return _Run(
            offset,
            shelved(self.turn_shelf, n, turns),
            message_shelf,
            shelved(self.start_shelf, n_messages, starts),
            self.unit_src,
            self.unit_start,
            self.unit_tail + packed(units),
            shelved(self.withheld_shelf, n_withheld, withheld),
            self.seals.extended([e.seal for e in encodings]),
            _cut_shelf(self.cuts, 4 * n, cuts),
            n + len(turns),
        )

    def prefix(self, k: int) -> tuple[_Run, int]:
        """The run of the first ``j <= k`` turns, the latest cut after an assistant message: every turn
        opens with a user message, merged (§4.2) into a user message that ends the turn before it, so the
        message at such a cut is not kept as it was before the merge. It reads the same shelves, shorter."""
        j, messages, cuts = k, self.message_shelf, self.cuts
        while 0 < j < self.n and messages[cuts[4 * j - 4] - 1]["role"] != "assistant":
            j -= 1
        if j == 0:
            return _Run(self.offset), 0
        # the first j turns' units: the tail cut where they end (or none of it, all in ``unit_src``)
        size, tail = cuts[4 * j - 3] * RAW, self.unit_tail
        in_src = self._ends()[1] * RAW - len(tail)
        run = _Run(
            self.offset,
            self.turn_shelf,
            self.message_shelf,
            self.start_shelf,
            self.unit_src,
            self.unit_start,
            tail[: size - in_src] if size > in_src else b"",
            self.withheld_shelf,
            self.seals.prefix(cuts[4 * j - 1]),
            self.cuts,
            j,
        )
        return run, j


def _closed_run(
    turns: tuple[Turn, ...],
    model: str,
    offset: int,
    encodings: Encodings,
    platform: str,
    n: int | None = None,
) -> _Run:
    """The run of ``turns[:n]`` (all closed; all of them without ``n``), for requests whose history starts
    at unit ``offset``."""

    def encode(turn: Turn) -> _TurnEncoding:  # kept only as its place in the run (issue 21: memory)
        return _encode_turn(turn, model=model, memo=encodings, platform=platform, kept=True)

    return closed_run(turns, _run_key(model, offset, platform), encode, _Run(offset), encodings, n)


def _run_key(model: str, offset: int, platform: str) -> tuple[Any, ...]:
    """The memo key of the runs of closed turns of ``model`` from unit ``offset`` (:func:`_closed_run`)."""
    return (API, "run", model, offset, platform)


def _encode_turn(
    turn: Turn, *, model: str, memo: Encodings, platform: str = FIRST_PARTY, kept: bool = False
) -> _TurnEncoding:
    """A turn's messages (role, blocks, unit digests), payloads withheld from ``model`` and its seal.
    ``kept``: the blocks go into a memoized run, kept for the session's life, so each is a key-sharing
    dict (:func:`_kept_block`; issue 21); the open turn's, built per request, are dict displays."""
    keep = _kept_block if kept else _plain_block
    messages: list[tuple[str, list[Any], list[str]]] = [("user", *_text_block(turn.user, memo, keep))]
    withheld: list[Continuation] = []
    replayed: list[Continuation] = []
    for i, step in enumerate(turn.steps):
        blocks, digests = _assistant_content(turn, i, step, model, replayed, withheld, platform, kept)
        if blocks:  # a step with nothing this model may see (foreign reasoning only) adds no message
            messages.append(("assistant", blocks, digests))
        if step.tool_results:
            pairs = [memo.call(_tool_result, r.call_id, r.content, r.is_error) for r in step.tool_results]
            messages.append(("user", exact_list([keep(b) for b, _ in pairs]), [d for _, d in pairs]))
    return _TurnEncoding(turn, model, tuple(messages), tuple(withheld), Seal.of(replayed))


def _assistant_content(
    turn: Turn,
    index: int,
    step: Step,
    model: str,
    replayed: list[Continuation],
    withheld: list[Continuation],
    platform: str = FIRST_PARTY,
    kept: bool = False,
) -> tuple[list[Any], list[str]]:
    """A step's content blocks: each part from its verbatim payload where this model may receive it, else
    rendered from the canonical part (text, tool calls); reasoning goes back only as its own payload.
    ``kept``: the blocks go into a memoized run (key-sharing dicts, :func:`_kept_block`)."""
    keep_reasoning = turn.view is None or turn.view.keep_reasoning[index]
    summary = turn.view.summary if turn.view is not None and index == len(turn.steps) - 1 else None
    blocks: list[Any] = []
    digests: list[str] = []
    if summary is not None:
        note: dict[str, Any] = {"type": "text", "text": summary_note(summary)}
        blocks.append(_kept_block(note) if kept else note)
        digests.append(unit_digest(note))
    withheld.extend(c for c in step.continuation if not c.replayable_to(VENDOR, API, model, platform))
    for part in step.parts:
        payload = payload_of(step, part)
        if payload is not None and payload.replayable_to(VENDOR, API, model, platform):
            if payload.kind in _REASONING_KINDS and not keep_reasoning:
                continue
            replayed.append(payload)
            # a plain value parsed from the digest-verified bytes: the bytes captured are the bytes sent,
            # and the SDK's exact-type fast path applies (it walks frozen subclasses through slow ABC checks)
            # (kept in the memoized run for the session's life, sharing the history's strings: issue 21)
            value = sharing(payload.checked(), part_strings(part))
            if kept:
                value = key_shared(value, _BLOCK_FIELDS)
            if payload.kind == "tool_use" and isinstance(value.get("input"), str):
                # broken streamed arguments: the vendor takes only an object here (§4.2), so the call goes
                # back with an empty one; its result tells the model the arguments were invalid
                sent = {**value, "input": {}}
                blocks.append(_kept_block(sent) if kept else sent)
                digests.append(unit_digest(sent))
                continue
            blocks.append(value)
            digests.append(payload.digest)
            continue
        block = _canonical_block(part)
        if block is not None:
            blocks.append(_kept_block(block) if kept else block)
            digests.append(unit_digest(block))
    return (exact_list(blocks) if kept else blocks), digests


def _canonical_text(block: Mapping[str, Any]) -> bool:
    """True when ``block`` is a text block whose compact bytes are those :func:`_canonical_block` renders
    from its text: exactly the keys ``type``, ``text`` in that order, a non-empty string text (an empty
    one is rendered as no block). Such a block needs no payload: replaying the part is replaying it.

    Invariant: ``_canonical_text(b)`` implies
    ``compact(b) == compact(_canonical_block(TextPart(b["text"])))``.
    """
    if type(block) is not dict or len(block) != 2:
        return False
    keys = iter(block)
    if next(keys) != "type" or next(keys) != "text" or block["type"] != "text":
        return False
    text = block["text"]
    return type(text) is str and text != ""


def _rendered_as_received(block: Mapping[str, Any], part: Part) -> bool:
    """True when :func:`_canonical_block` renders ``part`` to the very bytes of ``block`` (its keys in
    the same order, the same values): the block needs no payload kept beside its part."""
    if type(block) is not dict:
        return False
    rendered = _canonical_block(part)
    if rendered is None or list(rendered) != list(block):
        return False
    try:
        return compact(rendered) == compact(block)
    except (TypeError, ValueError):
        return False


def _canonical_block(part: Part) -> dict[str, Any] | None:
    """A part as a block of this API when its payload cannot be sent; reasoning and opaque parts have no
    canonical form here (another vendor's reasoning is never disguised as a thinking block).

    A plain value (a tool call's input parsed from its exact argument text, key order kept): the bytes of
    the frozen arguments, and the SDK's exact-type fast path applies."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ToolCallPart):
        arguments = json.loads(compact(part.parsed_arguments()))
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": arguments}
    return None


def _text_block(
    text: str, memo: Encodings, copy: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """A text's one block (a copy of the memo's, made by ``copy``: a dict display unless given) and its
    unit digest."""
    block, digest = memo.call(_text_unit, text)
    return [dict(block) if copy is None else copy(block)], [digest]


def _plain_block(block: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``block`` as a dict display (a per-request value)."""
    return dict(block)


def _kept_block(block: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``block`` for a memoized run, kept for the session's life: a key-sharing dict of its
    fields in their order (:func:`~reasonstate.adapters.base.shared_dict`, issue 21: ~100 bytes where a
    dict display takes ~180 on CPython 3.11), or a dict display for a block with a field outside
    :data:`_BLOCK_FIELDS`. Equal to ``block``, key order included, so the bytes sent are the same."""
    shared: dict[str, Any] = key_shared(block, _BLOCK_FIELDS)
    return dict(block) if shared is block else shared


# History blocks we build ourselves are the same on every request: their digests are memoized in the
# session's Encodings (the returned dicts are copied before use, so the memo cannot be mutated through a
# request).
def _text_unit(text: str) -> tuple[dict[str, Any], str]:
    block = {"type": "text", "text": text}
    return block, unit_digest(block)


def _tool_result(call_id: str, content: str, is_error: bool) -> tuple[dict[str, Any], str]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block, unit_digest(block)


def _part(kind: str, block: Mapping[str, Any], i: int, signed: bool = True) -> Part:
    if kind == "thinking":
        text, sig = block.get("thinking"), block.get("signature")
        # DeepSeek / Kimi sign nothing: an empty or absent signature is theirs to take back (§10.8)
        if not isinstance(text, str) or (signed and (not isinstance(sig, str) or not sig)):
            raise MalformedResponse(f"content[{i}]: thinking block without a signature")
        return ReasoningPart(text=text, continuation=i)
    if kind == "redacted_thinking":
        if not isinstance(block.get("data"), str) or not block["data"]:
            raise MalformedResponse(f"content[{i}]: redacted_thinking block without data")
        return ReasoningPart(text="", redacted=True, continuation=i)
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise MalformedResponse(f"content[{i}]: text block without text")
        if not isinstance(block.get("citations"), (list, type(None))):
            raise MalformedResponse(f"content[{i}]: text block citations is not a list")
        return TextPart(text=block["text"], continuation=i)
    if kind == "tool_use":
        cid, name, args = block.get("id"), block.get("name"), block.get("input")
        if not isinstance(cid, str) or not isinstance(name, str):
            raise MalformedResponse(f"content[{i}]: tool_use block needs an id and a name")
        if isinstance(args, str):  # a stream whose argument text was not a JSON object (streams.py)
            parsed, error = parse_arguments(args)
            return ToolCallPart(
                id=cid, name=name, arguments=parsed, raw_arguments=args, continuation=i, arguments_error=error
            )
        if not isinstance(args, Mapping):
            raise MalformedResponse(f"content[{i}]: tool_use block needs an input object")
        raw = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        return ToolCallPart(id=cid, name=name, arguments=args, raw_arguments=raw, continuation=i)
    return OpaquePart(type=kind, continuation=i)


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, Mapping):
        return Usage()
    details = raw.get("output_tokens_details")
    creation = raw.get("cache_creation")
    # the parts are disjoint: the whole prompt is input + creation + read (docs/protocols.md §4.4)
    return Usage.of(
        uncached_input=raw.get("input_tokens"),
        cache_read=raw.get("cache_read_input_tokens"),
        cache_write=raw.get("cache_creation_input_tokens"),
        output=raw.get("output_tokens"),
        reasoning=details.get("thinking_tokens") if isinstance(details, Mapping) else None,
        cache_write_1h=creation.get("ephemeral_1h_input_tokens") if isinstance(creation, Mapping) else 0,
    )


# -- the room: what the guard, the commit and the exporters read of the Messages API ------------------------

#: the prompt keys of a Messages body (the model, tools, system and history units); the rest are options
#: ``context_management`` is read as part of the prompt: the view is of the prompt its edits leave (§4.7)
_PROMPT_KEYS = frozenset({"model", "tools", "system", "messages", "context_management"})
_CACHE_CONTROL = frozenset({"cache_control"})


def _without(value: Any, keys: frozenset[str]) -> Any:
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if k not in keys}
    return value


#: a Messages call on a platform: Bedrock ``/model/{id}/invoke``, Vertex AI ``.../publishers/anthropic/models/
#: {model}:rawPredict`` or ``:streamRawPredict`` (docs/protocols.md §10.4, §10.5)
_PLATFORM_PATH = re.compile(
    r"/model/(?P<bedrock>[^/]+)/invoke$|/publishers/anthropic/models/(?P<vertex>[^/:]+):(?:stream)?rawPredict$",
    re.IGNORECASE,
)


class MessagesRoom(Room):
    """The Messages API (docs/protocols.md §4) as the guard and the commit read it."""

    api: ClassVar[str] = API

    def declared_options(self) -> tuple[str, frozenset[str]]:
        """The options the installed SDK's ``messages.create`` declares (ImportError: no SDK)."""
        from anthropic.resources.messages import Messages

        return SDK_LABEL, declared(Messages.create, SDK_LABEL).names

    def serves(self, path: str) -> bool:
        # the first-party path, and the platforms' (docs/protocols.md §10.4, §10.5): Bedrock's invoke (its
        # streamed form is AWS event-stream framing, not SSE: not read here) and Vertex AI's rawPredict
        return path.endswith("/messages") or _PLATFORM_PATH.search(path) is not None

    def streamed(self, path: str) -> bool:
        return path.endswith(":streamRawPredict")

    def model_from_path(self, path: str, body: Any) -> str:
        """The model in the body (first-party), else the one a platform's path names (its own id)."""
        found = _PLATFORM_PATH.search(path)
        if found is None:
            return super().model_from_path(path, body)
        return urllib.parse.unquote(found.group("bedrock") or found.group("vertex") or "")

    def view(self, body: Any, model: str | None = None) -> View:
        """One unit per tool, system block and message content block (§4.4), keyed on the JSON as sent
        without its ``cache_control`` (Anthropic's cache compares the blocks as received); ``breakpoints``:
        the units carrying ``cache_control``, and the last unit when the body asks for automatic caching."""
        body = request_body(body)
        name = model_name(body, model)
        b = ViewBuilder(API, body, name, name, prompt=_PROMPT_KEYS, sort=False)

        def add(section: Section, path: str, value: Any, key_value: Any, role: str = "") -> None:
            if isinstance(value, Mapping) and "cache_control" in value:
                b.breakpoints.append(len(b.units) + 1)
            b.add(section, path, value, key_value, role)

        for i, tool in enumerate(listed(body.get("tools"))):
            add("tools", f"$.tools[{i}]", tool, _without(tool, _CACHE_CONTROL))
        system = body.get("system")
        if isinstance(system, str):
            add("system", "$.system", system, {"type": "text", "text": system})
        for i, block in enumerate(listed(system)):
            add("system", f"$.system[{i}]", block, _without(block, _CACHE_CONTROL))
        b.prefix = len(b.units)
        messages = listed(body.get("messages"))
        # the vendor edits the prompt before it reads (and caches) it: the view is of the edited prompt
        edits = server_edits(body.get("context_management"), messages)  # (§4.7)
        b.predictable = edits.known
        for i, message in enumerate(messages):
            m = message if isinstance(message, Mapping) else {}
            role, content = f"{m.get('role')}:", m.get("content")
            if isinstance(content, str):
                add("history", f"$.messages[{i}].content", content, {"type": "text", "text": content}, role)
            for j, block in enumerate(listed(content)):
                reasoning = isinstance(block, Mapping) and block.get("type") in _REASONING_KINDS
                if i in edits.thinking and reasoning:
                    b.cleared.append(f"$.messages[{i}].content[{j}]")
                    continue
                key = edits.blocks.get((i, j))
                if key is not None:
                    b.cleared.append(f"$.messages[{i}].content[{j}]")
                else:
                    key = _without(block, _CACHE_CONTROL)
                add("history", f"$.messages[{i}].content[{j}]", block, key, role)
        if body.get("cache_control") and b.units:
            b.breakpoints.append(len(b.units))
        return b.view(_REASONING)

    def starts_conversation(self, view: View) -> bool:
        return all(u.key.startswith("user:") for u in view.units if u.section == "history")

    def usage(self, raw: Mapping[str, Any]) -> Usage:
        return _usage(raw)

    def cache_rules(self, model: str, raw_usage: Mapping[str, Any] | None) -> CacheRules:
        return ANTHROPIC

    def cache_lifetime(
        self, rules: CacheRules, body: Mapping[str, Any], response: Any
    ) -> tuple[int, int] | None:
        """The ttls of the request's breakpoints (§4.4: ``5m`` unless ``1h``): the shortest and longest."""
        seconds = {_TTL_SECONDS.get(str(c.get("ttl", "5m")), 300) for c in _cache_controls(body)}
        return (min(seconds), max(seconds)) if seconds else rules.lifetime

    def assembler(self) -> AnthropicAssembler:
        return AnthropicAssembler()

    replay_marker: ClassVar[bytes] = b"tool_use"

    def _source(self, response: Mapping[str, Any]) -> Source | None:
        """The answer's thinking and redacted-thinking blocks and its tool-use blocks, in their order (§4.3:
        the assistant message sent back carries them complete, unmodified and in their original order)."""
        blocks = tuple(
            {k: b[k] for k in _REPLAYED[b["type"]] if k in b}
            for b in listed(response.get("content"))
            if isinstance(b, Mapping) and b.get("type") in _REPLAYED
        )
        calls = frozenset(b["id"] for b in blocks if b["type"] == "tool_use" and isinstance(b.get("id"), str))
        if not calls:
            return None
        payloads = [
            b.get("signature") or b.get("data") or "" for b in blocks if b["type"] in _REASONING_KINDS
        ]
        # parallel tool uses go back in one message (§4.3): a framework splitting them into turns of their
        # own keeps every payload verbatim, so only a parse tells (answers with one call keep the fast path)
        return replay.source(calls, blocks, payloads, positional=len(calls) > 1)

    def _check(self, source: Source, body: dict[str, Any], mend: bool, out: list[ReplayFinding]) -> None:
        """The assistant message replaying the answer (the one holding its tool-use ids) against it: each
        reasoning block by its place among the message's reasoning blocks (its signature or data, and its
        thinking text), each tool use by its id (name and input, key order included). A reasoning block
        left out counts only inside the tool loop (every later user message is tool results: §4.3); a
        block present but changed counts anywhere (signatures of earlier turns are validated too)."""
        messages = listed(body.get("messages"))
        at = next(
            (
                i
                for i, m in enumerate(messages)
                if isinstance(m, dict)
                and m.get("role") == "assistant"
                and any(
                    isinstance(b, Mapping) and b.get("id") in source.anchors for b in listed(m.get("content"))
                )
            ),
            None,
        )
        if at is None:
            return
        content = messages[at]["content"]
        in_loop = all(
            isinstance(m, Mapping)
            and m.get("role") == "user"
            and isinstance(m.get("content"), list)
            and all(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in m["content"])
            for m in messages[at + 1 :]
            if not (isinstance(m, Mapping) and m.get("role") == "assistant")
        )
        report = replay.Report(out, mend)
        came = [b for b in source.items if b["type"] in _REASONING_KINDS]
        sent = [j for j, b in enumerate(content) if isinstance(b, dict) and b.get("type") in _REASONING_KINDS]
        for k, block in enumerate(came):
            payload_key = "signature" if block["type"] == "thinking" else "data"
            payload = block.get(payload_key)
            path = f"$.messages[{at}].content"
            if k < len(sent):
                j = sent[k]
                other = content[j]
                for key in (payload_key, "thinking") if block["type"] == "thinking" else (payload_key,):
                    if other.get(key) != block.get(key):
                        what = "signature" if key == "signature" else key
                        was, now = replay.digest(block.get(key)), replay.digest(other.get(key))
                        report.altered(
                            f"{path}[{j}].{key}",
                            f"{what} {was} went back as {now}"
                            + (
                                ""
                                if other.get("type") == block["type"]
                                else f" (in a {other.get('type')} block)"
                            ),
                            functools.partial(_restore_block, content, j, block),
                        )
                        break
            elif in_loop:
                # put back where it came: before the block that followed it in the answer (its first tool use)
                nxt = next(
                    (b for b in source.items[source.items.index(block) + 1 :] if b["type"] == "tool_use"),
                    None,
                )
                j = next(
                    (
                        x
                        for x, b in enumerate(content)
                        if nxt is not None and isinstance(b, Mapping) and b.get("id") == nxt.get("id")
                    ),
                    len(content),
                )
                report.lost(
                    f"{path}[{j}]",
                    f"{block['type']} block {replay.digest(payload)} left out",
                    functools.partial(content.insert, j, copy.deepcopy(block)),
                )
                if mend:  # the block is in place now: the next one left out goes after it
                    sent = sorted([x + 1 if x >= j else x for x in sent] + [j])
        for block in source.items:
            if block["type"] != "tool_use":
                continue
            use = next(
                ((x, b) for x, b in enumerate(content) if isinstance(b, dict) and b.get("id") == block["id"]),
                None,
            )
            if use is None:
                _report_split(body, at, block, source.anchors, report)
                continue
            j, other = use
            for key in ("name", "input"):
                if key in block and json.dumps(other.get(key)) != json.dumps(block[key]):
                    what = "re-serialized" if other.get(key) == block[key] else "changed"
                    report.altered(
                        f"$.messages[{at}].content[{j}].{key}",
                        f"tool_use {key} {what}: {replay.shown(json.dumps(block[key]))} went back as "
                        f"{replay.shown(json.dumps(other.get(key)))}",
                        functools.partial(other.__setitem__, key, copy.deepcopy(block[key])),
                    )


_REASONING = ReasoningUnits(_REASONING_KINDS)  # thinking blocks are units of their own (§4.3)
ROOM = MessagesRoom()


def _report_split(
    body: dict[str, Any], at: int, block: Mapping[str, Any], ids: frozenset[str], report: replay.Report
) -> None:
    """A tool use of the answer replayed in another assistant message than the rest of it (parallel calls
    split into turns of their own, as LiteLLM 1.110 does): the answer's reasoning no longer precedes it, and
    the vendor refuses a tool chain whose last assistant message opens with it (§4.3). Mended by merging
    the turns back into the answer's shape, only where the split turns hold nothing but the answer's own
    tool uses and the user turns between them nothing but tool results (:func:`_merge_split`)."""
    messages = body["messages"]
    for m, message in enumerate(messages):
        if m == at or not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        for x, other in enumerate(listed(message.get("content"))):
            if isinstance(other, Mapping) and other.get("id") == block["id"]:
                mergeable = _split_turns(messages, at, ids)
                report.altered(
                    f"$.messages[{m}].content[{x}]",
                    f"tool_use {block['id']} split from its answer (the rest in messages[{at}]) into "
                    "an assistant message of its own, without the reasoning that preceded it",
                    functools.partial(_merge_split, messages, at, mergeable) if mergeable else None,
                )
                return


def _split_turns(messages: list[Any], at: int, ids: frozenset[str]) -> int | None:
    """The index of the last message of an answer split after ``at`` when the turns after it are exactly:
    tool results, an assistant message of tool uses only, tool results, ... and every assistant message
    holding one of the answer's tool uses (``ids``) is among them; else None (no mend)."""
    end = None
    for m in range(at + 1, len(messages)):
        message = messages[m]
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), list):
            break
        blocks = message["content"]
        kind = "tool_result" if message.get("role") == "user" else "tool_use"
        if (m - at) % 2 != (1 if kind == "tool_result" else 0) or not blocks:
            break
        if not all(isinstance(b, Mapping) and b.get("type") == kind for b in blocks):
            break
        if kind == "tool_result":
            end = m
    for m, message in enumerate(messages):
        if (
            m != at
            and isinstance(message, Mapping)
            and message.get("role") == "assistant"
            and any(isinstance(b, Mapping) and b.get("id") in ids for b in listed(message.get("content")))
            and not (end is not None and at < m < end)
        ):
            return None
    return end


def _merge_split(messages: list[Any], at: int, end: int) -> None:
    """The answer's tool uses back in one assistant message, after its reasoning, and their results in the
    one user message after it (the shape the answer came in, §4.3)."""
    uses = [b for m in range(at + 2, end, 2) for b in messages[m]["content"]]
    results = [b for m in range(at + 1, end + 1, 2) for b in messages[m]["content"]]
    messages[at]["content"].extend(uses)
    messages[at + 1]["content"] = results
    del messages[at + 2 : end + 1]


def _restore_block(content: list[Any], j: int, block: Mapping[str, Any]) -> None:
    """Content block ``j`` as it came (``block``), keeping the keys the caller added (``cache_control``)."""
    extra = {k: v for k, v in content[j].items() if k == "cache_control"}
    content[j] = {**copy.deepcopy(dict(block)), **extra}


def _cache_controls(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every ``cache_control`` object of a request body: on tools, system blocks, message content blocks
    and the request itself (§4.4)."""
    holders: list[Any] = [body, *listed(body.get("tools")), *listed(body.get("system"))]
    for message in listed(body.get("messages")):
        if isinstance(message, Mapping):
            holders.extend(listed(message.get("content")))
    return [
        h["cache_control"]
        for h in holders
        if isinstance(h, Mapping) and isinstance(h.get("cache_control"), Mapping)
    ]
