"""Google Gemini ``generateContent`` codec (docs/protocols.md §5, google-genai 3.x): pure encode/decode.

``encode`` gives the keyword arguments of ``client.models.generate_content(model=..., contents=[...],
config={...})``: ``contents`` are REST-shaped content dicts (the SDK reads both its Python names and the
camelCase REST names), ``config`` a ``GenerateContentConfig`` as a dict (``system_instruction``, ``tools``,
then every session option: ``thinking_config={"include_thoughts": True}``, ``temperature``, ...).
``decode`` reads the ``GenerateContentResponse`` JSON exactly as received (camelCase REST), which the
transport captures from the client's own HTTP exchange.

Rules encoded here, each from docs/protocols.md §5.4:
  * one continuation per Part, its payload the Part's JSON as received, except that a text or thought
    Part whose first field is ``text`` is kept without it: the history's part holds the text, once, and
    it is put back first when the Part is sent (:func:`_capture`, :func:`_sent_part`; the same bytes, the
    same unit). A payload with nothing opaque left (``{"thought":true}``) is one value per model. A model
    turn goes back as the list of its Parts, in order: a ``thoughtSignature`` stays on the exact Part it
    came on, and no Part is ever merged, moved or split ("you must return the signature in the exact part
    in which it was received"; Gemini 3 rejects a function call without its signature in the current turn
    with a 400);
  * a Part carrying a signature or ``thought: true`` is model-bound: it goes back to the model that
    produced it only. A step whose payloads may not be sent (another vendor, API or model) is rendered
    from its canonical parts: text as ``{"text"}``, calls as ``{"functionCall": {"name", "args"}}`` (no
    signature, no id); foreign reasoning is never disguised as a thought. Inside the open tool chain such
    a step would be rejected (the current turn is validated), so it is refused with
    :class:`~reasonstate.errors.ContinuationMismatch` before anything is sent;
  * a closed turn whose reasoning a policy dropped loses its ``thought`` Parts as whole Parts; every other
    Part (signature included) goes back as received (earlier turns are not validated, §5.4);
  * function responses go back in one user content, in the model's declared call order, each named after
    its call and carrying the call's ``id`` when the call had one (Gemini 3 may send none). A call without
    an id gets a stable ``ToolCall.id`` derived from the response id (or, without one, from the request and
    the answer) and its Part index, so it is the same after restore and replay;
  * a result is sent as ``response``: a result whose text is a JSON object goes as that object, an error
    as ``{"error": text}``, any other text as ``{"output": text}`` (the API's documented keys);
  * provenance is the requested model (``modelVersion`` is echoed and traced, never used to bind);
  * usage: ``promptTokenCount`` includes ``cachedContentTokenCount``, so ``uncached = prompt - cached``;
    output is ``candidatesTokenCount + thoughtsTokenCount`` (``totalTokenCount`` = prompt + candidates +
    toolUsePrompt + thoughts, §5.3), reasoning ``thoughtsTokenCount``. ``toolUsePromptTokenCount``
    (server-side tools) is not part of the prompt this session sent and is not counted.

Prefix units (divergence, prediction): a namespace unit (the model: implicit caching is per model), one
for ``systemInstruction``, one for the tool list, then one per content: the digest of its role and its
Parts' digests, so a content is one unit however the SDK spells it on the wire.

Cache prediction (§5.3): :data:`GEMINI`.
"""

from __future__ import annotations

import array
import base64
import copy
import functools
import json
import re
from collections.abc import Mapping, MutableSequence, Sequence
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
    SSEEvent,
    StreamAssembler,
    VendorRequest,
    closed_run,
    compact,
    count,
    exact_list,
    head_value,
    in_wire_order,
    json_object,
    key_shared,
    open_turn_encoding,
    part_strings,
    payload_of,
    shared_dict,
    summary_note,
    unit_digest,
)
from reasonstate.adapters.declared import elsewhere, object_parameters, refuse_foreign, suggestion
from reasonstate.adapters.replay import ReplayFinding, Source
from reasonstate.cache import rules as cache_rules
from reasonstate.cache.divergence import (
    View,
    ViewBuilder,
    listed,
    model_name,
    request_body,
    stripped_inside,
    without_nulls,
)
from reasonstate.cache.rules import CacheRules
from reasonstate.errors import InvalidOption, MalformedResponse, StreamInterrupted, VendorError
from reasonstate.prefix import Prefix, Tool
from reasonstate.state import (
    FIRST_PARTY,
    Continuation,
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
    digest_of,
    freeze,
)
from reasonstate.state.continuation import sharing
from reasonstate.state.frozen import interned, thaw
from reasonstate.state.units import RAW, UnitBuffer, Units, UnitSeq

__all__ = ["GEMINI", "ROOM", "GeminiAdapter", "GeminiAssembler", "GeminiRules", "GenerateContentRoom"]

#: this API's prefix cache, as data: Gemini implicit caching (on by default for 2.5+, none before):
#: automatic, any earlier prompt of the same model, by content, reported exactly; the minimum prompt size
#: from the 2026-10 caching page (3.x Flash / 3.1 Pro / 4: 4096, 2.5: 2048; the 2026-05 page listed 1024
#: for Flash models)
GEMINI = CacheRules(
    scheme="items",
    source="docs/protocols.md §5.3",
    min_tokens=4096,
    min_tokens_by_model=(
        (("gemini-2.5",), 2048),
        (("gemini-1.", "gemini-2.0"), cache_rules.NEVER),
    ),
)

VENDOR = "google"
API = "generate_content"
#: continuation kinds: a thought part, a text part, a function call, else the Part's data field name
THOUGHT, TEXT, FUNCTION_CALL = "thought", "text", "functionCall"
#: the parts that are visible history any model may read when unsigned (text, a function call); a thought,
#: a signed part and a part of a kind this adapter does not know are bound to the model that produced them
#: and never sent to another (issue 23 item 7; docs/protocols.md)
_UNBOUND_KINDS = frozenset({TEXT, FUNCTION_CALL})
#: Part fields that describe the data field next to them rather than being one (types.Part, §5.1)
_PART_METADATA = frozenset(
    {"thought", "thoughtSignature", "partMetadata", "videoMetadata", "mediaResolution"}
)
#: every Part field google-genai 3.6.1 can send back (``types.Part``; its models refuse any other field, so
#: a Part holding one could never be replayed: it is refused when decoded, not on every later request)
_PART_FIELDS = frozenset(
    {
        "text",
        "thought",
        "thoughtSignature",
        "functionCall",
        "functionResponse",
        "inlineData",
        "fileData",
        "executableCode",
        "codeExecutionResult",
        "videoMetadata",
        "mediaResolution",
        "toolCall",
        "toolResponse",
        "partMetadata",
        "audioTranscription",
        "mediaProcessing",
        "speechMetadata",
        "documentMetadata",
        "spreadsheetMetadata",
        "audioMetadata",
    }
)
_FUNCTION_CALL_FIELDS = frozenset({"id", "name", "args", "partialArgs", "willContinue"})
#: config fields the session builds itself or must control: the contents and prefix are its state, and
#: one SDK call must be one HTTP exchange (automatic continuation and automatic function calling would
#: send more requests and merge their answers: the captured answer would not be the answer decoded); the
#: transport asks for the raw HTTP response of an unstreamed call (``should_return_http_response``)
_OWNED_CONFIG = (
    "contents",
    "config",
    "system_instruction",
    "automatic_continuation",
    "should_return_http_response",
)


@attrs.frozen(slots=True)
class GeminiRules(ProtocolRules):
    """The generateContent rules, plus the options this codec cannot honour (refused at construction)."""

    def refuse(self, model: str, options: Mapping[str, Any]) -> str | None:
        owned = sorted(k for k in options if k in _OWNED_CONFIG)
        if owned:
            return (
                f"{owned} are built by the session (contents, system prompt and tools are its state; one "
                "call is one request, so automatic continuation is off; the answer is read raw)"
            )
        candidates = options.get("candidate_count")
        if candidates not in (None, 1):
            return "candidate_count must be 1: a session continues one answer (the first candidate)"
        if options.get("automatic_function_calling") is not None:
            return "automatic_function_calling is the SDK's tool loop; use Session.run with Tool handlers"
        return None


@attrs.frozen(slots=True)
class _TurnEncoding:
    """A turn's contents as ``(role, parts, part digests, unit)``, shared read-only between requests."""

    contents: tuple[tuple[str, tuple[Any, ...], tuple[str, ...], str], ...]
    withheld: tuple[Continuation, ...]
    seal: Seal  # the replayed payloads, checked before every send

    def verify(self) -> None:
        self.seal.check()


# -- stream assembly: the non-streamed answer from its SSE stream (docs/protocols.md §5.5) -------------------


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

    def _complete(self) -> bool:
        first = self._candidates.get(min(self._candidates)) if self._candidates else None
        return first is not None and isinstance(first.get("finishReason"), str)

    def _event(self, event: SSEEvent) -> None:
        chunk = json_object(event, "stream chunk")
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
            candidates.append(in_wire_order(candidate, _GEMINI_CANDIDATE_ORDER))
        return in_wire_order({**self._response, "candidates": candidates}, _GEMINI_RESPONSE_ORDER)


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


#: the SDK model the session's options fill (its fields are the generateContent ``config``)
SDK_LABEL = "google-genai GenerateContentConfig"


@functools.cache
def _config_fields() -> frozenset[str]:
    """The fields (and their camelCase aliases) the installed SDK's ``GenerateContentConfig`` declares."""
    from google.genai import types

    fields = types.GenerateContentConfig.model_fields
    return frozenset(fields) | frozenset(f.alias for f in fields.values() if f.alias)


def check_config(options: Mapping[str, Any]) -> None:
    """:class:`InvalidOption` unless every option is a ``GenerateContentConfig`` field whose value fits the
    field's declared type strictly, as the other rooms check theirs (docs/protocols.md §9): the SDK's own
    model coerces in pydantic's lax mode (``max_output_tokens="4096"`` → 4096, ``candidate_count=True`` →
    1), which would hide a mistake another vendor's session refuses. Each option given as plain JSON values
    is validated in strict JSON mode, so an enum may still be spelled as its string (``"LOW"``, ``"low"``:
    the SDK's enums are case-insensitive) and a float field takes an int; an option holding SDK objects is
    validated as the SDK does. Nothing is checked without the SDK installed."""
    if not options:
        return
    key = repr(sorted(options.items()))
    if key in _ACCEPTED:  # accepted with the SDK installed: no import statement to run again
        return
    try:
        import pydantic
        from google.genai import types
    except ImportError:
        return
    names = _config_fields()
    for name in options:
        if name not in names:
            raise InvalidOption(
                f"{name}= is not an option of {SDK_LABEL}{suggestion(name, names)}"
                f"{elsewhere(name, SDK_LABEL)}"
            )
    plain = thaw(dict(options))
    try:
        types.GenerateContentConfig.model_validate(plain)
        for name, value in plain.items():
            try:
                as_json = json.dumps({name: value}, allow_nan=False)
            except (TypeError, ValueError):  # SDK objects, callables: the SDK's own (lax) check above
                continue
            types.GenerateContentConfig.model_validate_json(as_json, strict=True)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error.get("loc", ()))
        raise InvalidOption(f"{where}= is not what {SDK_LABEL} declares: {error['msg']}") from None
    if len(_ACCEPTED) >= 1024:
        _ACCEPTED.clear()
    _ACCEPTED.add(key)


#: the option sets :func:`check_config` found valid (their repr): a service builds its sessions with the same
#: few, and a second check of one is a set lookup
_ACCEPTED: set[str] = set()


class GeminiAdapter:
    """The generateContent codec for ``google.genai.Client`` (sync ``client.models``, async
    ``client.aio.models``). ``min_cacheable`` overrides the implicit-cache minimum prompt length."""

    vendor = VENDOR
    api = API
    endpoint = Endpoint(
        sdk="google.genai",
        resource=("models",),
        label="Gemini",
        assembler=GeminiAssembler,
    )

    def __init__(self, *, min_cacheable: int | None = None, platform: str = FIRST_PARTY) -> None:
        #: the Gemini API (first-party) or ``"vertex"`` (docs/protocols.md §10): payloads go back only there
        self.platform = platform
        cache = GEMINI
        if min_cacheable is not None:
            cache = attrs.evolve(cache, min_tokens=min_cacheable, min_tokens_by_model=())
        self.cache = cache
        self.rules: ProtocolRules = GeminiRules(vendor=VENDOR, api=API)

    def check_call(self, client: Any, model: str, options: Mapping[str, Any], tools: Sequence[Tool]) -> None:
        """Refuse, before any request, what can never be sent (docs/protocols.md §9): another vendor's model
        id (google-genai calls Google's API; the SDK ships no list of Gemini ids, so a misspelled one is
        the vendor's to refuse), an option that is not a ``GenerateContentConfig`` field or a value the
        SDK's model rejects (:func:`check_config`), a tool whose parameters are not an object schema (its
        ``parametersJsonSchema`` "must describe an object", docs/protocols.md §0.2)."""
        refuse_foreign(client, model, "gemini", "generateContent")
        check_config(options)
        object_parameters(tools, "Gemini's parametersJsonSchema", "docs/protocols.md §0.2")

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
        """Build the ``models.generate_content`` kwargs for the next call on ``history``."""
        memo = encodings if encodings is not None else Encodings()
        memo.next_request()  # the per-text memo keeps what this request and the previous one use
        # the head's values are shared by every session on this model and system text (head_value)
        units = UnitBuffer([head_value(_head_unit, "model", model)])
        config: dict[str, Any] = {}
        if prefix.system:
            config["system_instruction"] = head_value(_system_instruction, prefix.system)
            units.append(head_value(_head_unit, "systemInstruction", prefix.system))
        if prefix.tools:
            config["tools"], unit = memo.call(_tools, prefix.tools)
            units.append(unit)
        n_head = len(units)
        contents: list[dict[str, Any]] = []
        # the last content's role, parts and part digests, while it may still grow (same-role merge)
        last: _Last | None = None

        def add(role: str, parts: Sequence[Any], digests: Sequence[str], unit: str) -> None:
            nonlocal last
            last = _add(contents, units, last, role, parts, digests, unit)

        for user, answer in prefix.few_shots:
            add(*_text_content("user", user, memo))
            add(*_text_content("model", answer, memo))
        closed = history.turns[:-1] if history.open_turn is not None else history.turns
        run = _closed_run(closed, model, memo, self.platform)
        run.check()  # the replayed payloads of every closed turn, by identity (re-hashed only if replaced)
        at = len(units)
        if run.contents:
            # a run starts with a user content and few-shots end with a model one: never a merge here
            contents.extend(run.contents)
            units.extend(run.units)  # packed: joined at C speed (issue 21)
            last = run.last
        withheld: list[Continuation] = list(run.withheld)
        if history.open_turn is not None:
            build = functools.partial(_encode_turn, model=model, memo=memo, platform=self.platform)
            # the current turn's signatures are validated (§5.4): the open chain is refused if it would
            # withhold
            encoded = open_turn_encoding(history.turns[-1], build, model, _RULE)
            withheld.extend(encoded.withheld)
            for role, parts, digests, unit in encoded.contents:
                add(role, parts, digests, unit)
        for key, value in options.items():
            if key != "stream":
                config[key] = value
        config["automatic_continuation"] = False  # one call, one exchange: the captured answer is decoded
        # of its exact length (a list grown by appends keeps up to ~12% spare slots): the session keeps it
        # as the previous request's body (kept_body; issue 21)
        contents = exact_list(contents)
        kwargs: dict[str, Any] = {"model": model, "contents": contents, "config": config}
        request_units = units.done()
        run.adopt(request_units, at)  # the closed history's units kept once, in the records (issue 21)
        return VendorRequest(
            kwargs=kwargs,
            units=request_units,
            model=model,
            prefix_units=n_head,
            withheld=tuple(withheld),
        )

    # -- decode ------------------------------------------------------------------------------------------
    def payload_units(self, step: Step) -> dict[str, tuple[str, ...]]:
        """:func:`payload_units`: for exporters, which prefix units of a request were payloads."""
        return payload_units(step)

    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        """Split a ``GenerateContentResponse`` (the JSON as received) into the layers' material.

        The first candidate is the answer. Payloads are bound to the model the request asked for.
        """
        if not isinstance(response, Mapping):
            raise MalformedResponse("Gemini response is not a JSON object")
        candidates = response.get("candidates")
        if not candidates:
            feedback = response.get("promptFeedback")
            reason = feedback.get("blockReason") if isinstance(feedback, Mapping) else None
            if reason is not None:
                raise VendorError(f"Gemini blocked the prompt: {reason}", body=feedback)
            raise MalformedResponse("Gemini response has no candidates")
        if not isinstance(candidates, list) or not isinstance(candidates[0], Mapping):
            raise MalformedResponse("Gemini candidates is not a list of objects")
        candidate = candidates[0]
        content = candidate.get("content")
        raw_parts = content.get("parts") if isinstance(content, Mapping) else None
        if raw_parts is None:
            raw_parts = []  # a candidate stopped before any output (MAX_TOKENS, SAFETY) has no content
        if not isinstance(raw_parts, list):
            raise MalformedResponse("Gemini candidate content parts is not a list")
        rid = response.get("responseId")
        rid = rid if isinstance(rid, str) and rid else None
        call_ids = _CallIds(rid, request, raw_parts)
        parts: list[Part] = []
        payloads: list[Continuation] = []
        for i, raw in enumerate(raw_parts):
            part, kind = _part(raw, i, call_ids)
            parts.append(part)
            signed = raw.get("thoughtSignature") is not None
            payloads.append(_capture(raw, part, kind, request.model, signed, self.platform))
        stop = candidate.get("finishReason")
        echoed = response.get("modelVersion")
        return DecodedStep(
            parts=tuple(parts),
            continuation=tuple(payloads),
            stop_reason=stop if isinstance(stop, str) else "unknown",
            usage=_usage(response.get("usageMetadata")),
            model=request.model,
            response_id=rid,
            response_model=echoed if isinstance(echoed, str) else None,
        )


# -- encoding helpers ---------------------------------------------------------------------------------------


_RULE = "docs/protocols.md §5.4"
#: a content that may still grow by a same-role merge: its role, Parts and Part digests
_Last = tuple[str, tuple[Any, ...], tuple[str, ...]]


def _add(
    contents: list[dict[str, Any]],
    units: MutableSequence[str],
    last: _Last | None,
    role: str,
    parts: Sequence[Any],
    digests: Sequence[str],
    unit: str,
) -> _Last:
    """Append one content (and its unit); return it as the new last content.

    Consecutive contents of one role arise when a step has nothing to send (an empty answer): they go as one
    content, its unit recomputed; the Parts themselves are untouched. The merged content is a new dict and
    list: the one it replaces may be shared with a memoized run.
    """
    if last is not None and last[0] == role:
        merged: _Last = (role, (*last[1], *parts), (*last[2], *digests))
        contents[-1] = _content(role, list(merged[1]))
        units[-1] = _content_unit(role, merged[2])
        return merged
    contents.append(_content(role, list(parts)))
    units.append(unit)
    return role, tuple(parts), tuple(digests)


_CONTENT_FIELDS = ("role", "parts")
_TEXT_FIELDS_ONLY = ("text",)
_FUNCTION_RESPONSE_FIELDS = ("functionResponse",)


def _content(role: str, parts: list[Any]) -> dict[str, Any]:
    """``{"role": role, "parts": parts}`` as a key-sharing dict (:func:`shared_dict`)."""
    return shared_dict(_CONTENT_FIELDS, (role, parts))


def _text(text: str) -> dict[str, Any]:
    """``{"text": text}`` as a key-sharing dict (:func:`shared_dict`)."""
    return shared_dict(_TEXT_FIELDS_ONLY, (text,))


def _function_response_part(body: Any) -> dict[str, Any]:
    """``{"functionResponse": body}`` as a key-sharing dict (:func:`shared_dict`)."""
    return shared_dict(_FUNCTION_RESPONSE_FIELDS, (body,))


def _key_shared(part: Any) -> Any:
    """A Part's dict (its fields in their order) as a key-sharing dict (:func:`shared_dict`); a Part with a
    field google-genai does not declare (never decoded: a restored one) stays as it is."""
    return key_shared(part, _PART_FIELDS)


def _cuts() -> array.array[int]:
    return array.array("H")  # 2 bytes a figure while they fit (issue 21), then 4 (:meth:`_Run.extended`)


def _unit_cell(units: UnitSeq) -> list[Any]:
    """A run's unit cell (:class:`_Run`): ``units`` from their start."""
    return [units, 0]


@attrs.frozen(slots=True)
class _Run:
    """The contents of a run of closed turns (the whole closed history), shared between requests.

    Built incrementally (:func:`~reasonstate.adapters.base.closed_run`), as the Anthropic codec's: the run
    of turns ``0..k`` extends the run of ``0..k-1``, so a request pays one turn's work to extend it and
    identity checks of its payloads to verify it. Its dicts and lists are never changed once built (a
    merge with the open turn replaces the last content). ``cuts`` holds, per turn, where the run of the
    turns up to it ends (contents, withheld, seals), so a :meth:`prefix` is slices.

    Its units (one per content) are kept in one cell, ``[seq, start]``: they are ``seq[start : start +
    len(contents)]``. A run is built holding its own (``start`` 0); once a request built on it holds them
    at the same place, :meth:`adopt` points the cell at that request's units, which the session's records
    keep as its newest request's: the closed history's units are kept once, not twice (issue 21: 32 bytes
    a content).

    A payload with nothing opaque in it (``{"thought":true}``: :func:`_capture` shares one value among
    every Part of its origin that has it) is sealed once per run, at its first entry (``once``: its id →
    (the value, that entry's position)): every later turn replaying the very same object adds no seal
    entry (issue 21: three references a turn). An edit of it in memory is still refused before a send:
    :meth:`Seals.check <reasonstate.adapters.base.Seals.check>` looks at every entry again after an edit,
    that first one included, and a prefix of the run keeps only what its own entries sealed.
    """

    turns: tuple[Turn, ...] = ()
    contents: tuple[dict[str, Any], ...] = ()
    _units: list[Any] = attrs.field(default=(), alias="units", converter=_unit_cell, eq=False, repr=False)
    last: _Last | None = None
    withheld: tuple[Continuation, ...] = ()
    seals: Seals = attrs.field(factory=Seals)
    cuts: array.array[int] = attrs.field(factory=_cuts)
    once: dict[int, tuple[Continuation, int]] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def units(self) -> UnitSeq:
        """The run's units, one per content (packed: :class:`~reasonstate.state.units.Units`)."""
        seq: UnitSeq = self._units[0]
        start: int = self._units[1]
        n = len(self.contents)
        return seq if start == 0 and len(seq) == n else seq[start : start + n]

    def adopt(self, request: UnitSeq, at: int) -> None:
        """Hold this run's units as ``request[at : at + len(contents)]`` when those are its very units (a
        request built on the run, whose units the records keep; not when a merge with the open turn
        replaced the last one). The cell's value only changes to equal units: every read is the same."""
        seq, _ = self._units
        n = len(self.contents)
        if not n or seq is request or type(request) is not Units or len(request) < at + n:
            return
        mine = self.units
        if type(mine) is Units and request.raw.startswith(mine.raw, at * RAW):
            self._units[:] = (request, at)

    def check(self) -> None:
        self.seals.check()

    def extended(self, turns: Sequence[Turn], encodings: Sequence[_TurnEncoding]) -> _Run:
        """This run followed by ``turns`` (encoded as ``encodings``), built in one pass."""
        contents, units, last = list(self.contents), UnitBuffer(self.units), self.last
        withheld = list(self.withheld)
        cuts, sealed = array.array(self.cuts.typecode, self.cuts), len(self.seals)
        once, seals = self.once, []
        for encoded in encodings:
            for role, parts, part_digests, unit in encoded.contents:
                last = _add(contents, units, last, role, parts, part_digests, unit)
            withheld.extend(encoded.withheld)
            entries: list[tuple[Continuation, bytes | None, object]] = []
            for entry in encoded.seal.entries:
                c, payload = entry[0], entry[1]
                if type(payload) is bytes and len(payload) <= _SEALED_ONCE_BYTES:
                    found = once.get(id(c))
                    if found is not None and found[0] is c:
                        continue  # sealed at an earlier entry of this run
                    if len(once) < _SEALED_ONCE_MAX:
                        once = dict(once) if once is self.once else once
                        once[id(c)] = (c, sealed + len(entries))
                entries.append(entry)
            seals.append(encoded.seal if len(entries) == len(encoded.seal.entries) else Seal(tuple(entries)))
            sealed += len(entries)
            ends = (len(contents), len(withheld), sealed)
            if cuts.typecode == "H" and max(ends) > 0xFFFF:
                cuts = array.array("I", cuts)
            cuts.extend(ends)
        return _Run(
            (*self.turns, *turns),
            tuple(contents),
            units.done(),
            last,
            tuple(withheld),
            self.seals.extended(seals),
            cuts,
            once,
        )

    def prefix(self, k: int) -> tuple[_Run, int]:
        """The run of the first ``j <= k`` turns, the latest cut after a model content. Every turn opens
        with the user's content, merged into a user content that ends the turn before it, so the content at
        such a cut is not kept as it was before the merge; and a model content is never merged into by
        what follows (a turn's first content, the open turn's included), so the cut run's ``last`` (read
        only to merge) is None."""
        j = k
        while 0 < j < len(self.turns) and self.contents[self.cuts[3 * j - 3] - 1]["role"] != "model":
            j -= 1
        if j == 0:
            return _EMPTY_RUN, 0
        c, w, s = self.cuts[3 * j - 3 : 3 * j]
        run = _Run(
            self.turns[:j],
            self.contents[:c],
            self.units[:c],
            None if j < len(self.turns) else self.last,
            self.withheld[:w],
            self.seals.prefix(s),
            self.cuts[: 3 * j],
            {key: v for key, v in self.once.items() if v[1] < s},
        )
        return run, j


_EMPTY_RUN = _Run()
#: the payloads a run seals once (:class:`_Run`): at most this many bytes (the shared ones, with nothing
#: opaque in them, are a few bytes: ``{"thought":true}``), at most this many per run
_SEALED_ONCE_BYTES = 64
_SEALED_ONCE_MAX = 64


def _closed_run(turns: tuple[Turn, ...], model: str, encodings: Encodings, platform: str) -> _Run:
    """The run of ``turns`` (all closed). A content's unit depends on that content only, so a run does not
    depend on what precedes it (the prefix head, few-shots)."""

    def encode(turn: Turn) -> _TurnEncoding:  # kept only as its place in the run (issue 21: memory)
        return _encode_turn(turn, model=model, memo=encodings, platform=platform)

    return closed_run(turns, (API, "run", model, platform), encode, _EMPTY_RUN, encodings)


# The prefix is the same on every request of a session, and so are the history's texts and results: the
# units below are memoized in the session's Encodings, the head's (model, system text) between sessions
# (head_value); values are frozen, or copied before use.
def _head_unit(key: str, value: str) -> str:
    return unit_digest({key: value})


def _system_instruction(system: str) -> Any:
    """The ``system_instruction`` config value (frozen: one object shared by the requests that use it)."""
    return freeze({"parts": [{"text": system}]})


def _tools(tools: tuple[Tool, ...]) -> tuple[Any, str]:
    """The ``tools`` config value, one tool of function declarations (names sorted by the Prefix, schemas
    key-sorted: stable bytes; frozen, shared by the requests that use it), and its unit;
    ``parameters_json_schema`` passes the JSON schema through the SDK untouched (``parameters`` would be
    converted to its own Schema type)."""
    declarations = tuple(
        freeze({"name": t.name, "description": t.description, "parameters_json_schema": t.offered_parameters})
        for t in tools
    )
    return freeze([{"function_declarations": list(declarations)}]), unit_digest({"tools": declarations})


def _content_unit(role: str, digests: Sequence[str]) -> str:
    """One content's prefix unit: its role and its Parts' digests (each memoized), hashed together."""
    return digest_of("\n".join((role, *digests)).encode())


def _text_part(text: str) -> tuple[dict[str, Any], str]:
    part: dict[str, Any] = freeze({"text": text})
    return part, unit_digest(part)


def _text_content(role: str, text: str, memo: Encodings) -> tuple[str, tuple[Any, ...], tuple[str, ...], str]:
    part, digest, unit = memo.call(_text_unit, role, text)
    return role, (_text(part["text"]),), (digest,), unit


def _text_unit(role: str, text: str) -> tuple[dict[str, Any], str, str]:
    part, digest = _text_part(text)
    return part, digest, _content_unit(role, (digest,))


def _function_response(
    name: str, call_id: str | None, content: str, is_error: bool
) -> tuple[dict[str, Any], str]:
    """A ``functionResponse`` Part (§5.1). Memoized (:meth:`Encodings.call`): history's results are the same
    on every request (the returned dict is copied before use)."""
    response: Any
    if is_error:
        response = {"error": content}
    else:
        try:
            response = json.loads(content)
        except ValueError:
            response = None
        if not isinstance(response, dict):
            response = {"output": content}
    body: dict[str, Any] = {"name": name, "response": response}
    if call_id is not None:
        body = {"id": call_id, **body}
    part: dict[str, Any] = freeze({"functionResponse": body})
    return part, unit_digest(part)


def _encode_turn(turn: Turn, *, model: str, memo: Encodings, platform: str = FIRST_PARTY) -> _TurnEncoding:
    contents = [_text_content("user", turn.user, memo)]
    replayed: list[Continuation] = []
    withheld: list[Continuation] = []
    last = len(turn.steps) - 1
    for i, step in enumerate(turn.steps):
        keep = turn.view is None or turn.view.keep_reasoning[i]
        summary = turn.view.summary if turn.view is not None and i == last else None
        parts, digests, call_ids = _model_parts(step, keep, model, replayed, withheld, platform)
        if summary is not None:
            note, digest = memo.call(_text_part, summary_note(summary))
            parts.insert(0, _text(note["text"]))
            digests.insert(0, digest)
        if parts:  # a step with nothing this model may see (foreign reasoning only) adds no content
            contents.append(("model", tuple(parts), tuple(digests), _content_unit("model", digests)))
        if step.tool_results:
            names = {c.id: c.name for c in step.tool_calls}
            pairs = [
                memo.call(
                    _function_response, names[r.call_id], call_ids.get(r.call_id), r.content, r.is_error
                )
                for r in step.tool_results
            ]
            results = tuple(_function_response_part(p["functionResponse"]) for p, _ in pairs)
            result_digests = tuple(d for _, d in pairs)
            contents.append(("user", results, result_digests, _content_unit("user", result_digests)))
    return _TurnEncoding(tuple(contents), tuple(withheld), Seal.of(replayed))


def payload_units(step: Step) -> dict[str, tuple[str, ...]]:
    """The content units a model step is when every Part goes back as received (reasoning kept, or its
    thought Parts dropped whole) → the payload digests in it, for exporters; a step with a Part that has
    no payload gives none."""
    payloads = [payload_of(step, part) for part in step.parts]
    if not payloads or any(c is None for c in payloads):
        return {}
    sent = [
        (c, _sent_part(c, part)[1]) for c, part in zip(payloads, step.parts, strict=True) if c is not None
    ]
    units = {_content_unit("model", tuple(d for _, d in sent)): tuple(c.digest for c, _ in sent)}
    kept = [(c, d) for c, d in sent if c.kind != THOUGHT]
    if kept:
        units[_content_unit("model", tuple(d for _, d in kept))] = tuple(c.digest for c, _ in kept)
    return units


def _model_parts(
    step: Step,
    keep_reasoning: bool,
    model: str,
    replayed: list[Continuation],
    withheld: list[Continuation],
    platform: str = FIRST_PARTY,
) -> tuple[list[Any], list[str], dict[str, str]]:
    """A step's Parts: each Part's verbatim payload where this model may receive it, else the canonical
    part (text, calls; reasoning has no canonical form). Also the vendor id of each replayed call that had
    one, for its function response."""
    parts: list[Any] = []
    digests: list[str] = []
    call_ids: dict[str, str] = {}
    withheld.extend(c for c in step.continuation if not c.replayable_to(VENDOR, API, model, platform))
    for part in step.parts:
        payload = payload_of(step, part)
        if payload is not None and payload.replayable_to(VENDOR, API, model, platform):
            if payload.kind == THOUGHT and not keep_reasoning:
                continue  # dropped as a whole Part, never edited
            replayed.append(payload)
            value, digest = _sent_part(payload, part)
            if isinstance(part, ToolCallPart):
                vendor_id = value[FUNCTION_CALL].get("id")
                if isinstance(vendor_id, str):
                    call_ids[part.id] = vendor_id
            parts.append(value)
            digests.append(digest)
            continue
        canonical = _canonical_part(part)
        if canonical is not None:
            parts.append(canonical)
            digests.append(unit_digest(canonical))
    return parts, digests, call_ids


def _sent_part(payload: Continuation, part: Part) -> tuple[Any, str]:
    """The Part ``payload`` was captured from, as it goes back, and its digest (the digest of the Part's
    bytes as received: a content's unit is the same whichever form the payload is in).

    Digest-verified (:meth:`Continuation.checked`), parsed once for the memoized run (never changed once
    built, like every value of the run), sharing the history's strings and, at its top level, its key table
    with every Part of the same fields (issue 21: nothing parsed is kept in the continuation). A payload
    whose text was left out (:func:`_capture`: a text or thought payload without ``text`` whose part has
    text) gets the part's text back as its first field, which gives the bytes received; any other payload
    (a call, a Part captured whole, as every Part was before) is the Part itself."""
    value = sharing(payload.checked(), part_strings(part))
    text = part.text if isinstance(part, (TextPart, ReasoningPart)) else None
    if text and payload.kind in _TEXT_KINDS and type(value) is dict and "text" not in value:
        whole = _key_shared({"text": text, **value})
        return whole, unit_digest(whole)
    return _key_shared(value), payload.digest


def _canonical_part(part: Part) -> dict[str, Any] | None:
    """A part as a Gemini Part when its payload cannot be sent: no signature, no foreign call id, and no
    reasoning (another model's reasoning is never disguised as a thought)."""
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, ToolCallPart):
        return {"functionCall": {"name": part.name, "args": part.parsed_arguments()}}
    return None


# -- decoding helpers ---------------------------------------------------------------------------------------


#: the kinds of Part whose text the history's part holds (a text Part, a thought)
_TEXT_KINDS = frozenset({TEXT, THOUGHT})
#: the payloads with nothing opaque in them (no signature: ``{"thought":true}``, ``{}``), one value per
#: origin and bytes, shared by every Part they come on (issue 21: a session of thoughts holds one, not one
#: per turn); bounded, beyond it a payload is its own value
_SHARED: dict[tuple[str, bytes, str, bool, str], Continuation] = {}
_SHARED_MAX = 1024


def _capture(
    raw: Mapping[str, Any], part: Part, kind: str, model: str, signed: bool, platform: str
) -> Continuation:
    """A Part's continuation (docs/protocols.md §5.4): the Part as received, except that the text of a text
    or thought Part whose first field is ``text`` is left out (``elided``): the history's part holds it, and
    :func:`_sent_part` puts it back first, so the Part goes back as the very bytes received (text first,
    then the payload's fields in their order). What is opaque (the signature) is in the payload, as
    received; only the visible text is held once. A payload with no signature left (an unsigned thought is
    ``{"thought":true}``) is one value shared by every Part of its origin that has it."""
    value: Any = raw
    text = getattr(part, "text", None) if kind in _TEXT_KINDS else None
    if text and next(iter(raw)) == "text":
        value = {k: v for k, v in raw.items() if k != "text"}
    bound = signed or kind not in _UNBOUND_KINDS
    key = None
    if value is not raw and not signed:
        key = (kind, compact(value), model, bound, platform)
        found = _SHARED.get(key)
        if found is not None:
            return found
    captured = Continuation.capture(
        vendor=VENDOR,
        api=API,
        model=model,
        kind=kind,
        value=value,
        model_bound=bound,
        platform=platform,
        strings=True,  # ``{"thoughtSignature": ...}``: kept as its string, the one the Part sent holds
    )
    return captured if key is None else interned(_SHARED, key, captured, _SHARED_MAX)


_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class _CallIds:
    """Stable ids for function calls the vendor sent without one: ``<base>-<part index>``, where the base
    is the response id, or (without one) a digest of the request's prefix units and the answer's Parts.
    The id lives in the history afterwards, so restore and replay see the same one."""

    def __init__(self, response_id: str | None, request: VendorRequest, parts: list[Any]) -> None:
        self._response_id = response_id
        self._request = request
        self._parts = parts
        self._base: str | None = None

    def derived(self, index: int) -> str:
        if self._base is None:
            if self._response_id is not None:
                # tool-call ids other APIs accept (``^[a-zA-Z0-9_-]+$``), for a switch to another vendor
                self._base = _ID_UNSAFE.sub("_", self._response_id)
            else:
                seen = compact([list(self._request.units), self._parts])
                self._base = digest_of(seen).removeprefix("sha256:")[:24]
        return f"gemini-call-{self._base}-{index}"


def _part(raw: Any, i: int, call_ids: _CallIds) -> tuple[Part, str]:
    """A Part as a canonical part, and the kind its payload is captured under."""
    if not isinstance(raw, Mapping):
        raise MalformedResponse(f"parts[{i}] is not an object")
    if not _PART_FIELDS.issuperset(raw):
        unknown = sorted(str(k) for k in raw if k not in _PART_FIELDS)
        raise MalformedResponse(f"parts[{i}]: fields {unknown} that google-genai cannot send back")
    signature = raw.get("thoughtSignature")
    if signature is not None and not _is_base64(signature):
        # the field is bytes (proto3 JSON: base64, either alphabet, §5.1): anything else is refused on replay
        raise MalformedResponse(f"parts[{i}]: thoughtSignature is not base64")
    thought = raw.get("thought")
    if thought is not None and not isinstance(thought, bool):
        raise MalformedResponse(f"parts[{i}]: thought is not a boolean")
    if FUNCTION_CALL in raw:
        return _function_call(raw[FUNCTION_CALL], i, call_ids), FUNCTION_CALL
    text = raw.get("text")
    if thought:
        if text is not None and not isinstance(text, str):
            raise MalformedResponse(f"parts[{i}]: thought text is not a string")
        return ReasoningPart(text=text or "", redacted=not text, continuation=i), THOUGHT
    if "text" in raw:
        if not isinstance(text, str):
            raise MalformedResponse(f"parts[{i}]: text is not a string")
        return TextPart(text=text, continuation=i), TEXT
    kind = next((k for k in raw if k not in _PART_METADATA), None)
    if kind is None:  # a Part with a signature and nothing else: kept and replayed as it came
        kind = "thoughtSignature" if signature is not None else "empty"
    return OpaquePart(type=kind, continuation=i), kind


def _is_base64(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except ValueError:
        return False
    return True


def _function_call(call: Any, i: int, call_ids: _CallIds) -> ToolCallPart:
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not call["name"]:
        raise MalformedResponse(f"parts[{i}]: functionCall needs a name")
    unknown = sorted(k for k in call if k not in _FUNCTION_CALL_FIELDS)
    if unknown:
        raise MalformedResponse(f"parts[{i}]: functionCall fields {unknown} google-genai cannot send back")
    args = call.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        # the API sends args as a JSON object (§5.1); anything else is not a call we can replay or run
        raise MalformedResponse(f"parts[{i}]: functionCall args is not an object")
    vendor_id = call.get("id")
    if vendor_id is not None and not isinstance(vendor_id, str):
        raise MalformedResponse(f"parts[{i}]: functionCall id is not a string")
    raw = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    return ToolCallPart(
        id=vendor_id or call_ids.derived(i),
        name=call["name"],
        arguments=args,
        raw_arguments=raw,
        continuation=i,
    )


def _usage(raw: Any) -> Usage:
    """``promptTokenCount`` includes ``cachedContentTokenCount``; Usage keeps them disjoint (§5.3)."""
    if not isinstance(raw, Mapping):
        return Usage()
    cached = count(raw.get("cachedContentTokenCount"))
    thoughts = raw.get("thoughtsTokenCount")
    return Usage.of(
        uncached_input=count(raw.get("promptTokenCount")) - cached,
        cache_read=cached,
        output=count(raw.get("candidatesTokenCount")) + count(thoughts),
        reasoning=thoughts,
    )


# -- the room: what the guard, the commit and the exporters read of generateContent -------------------------

#: the prompt keys of a generateContent body (the tools, system and history units); the rest are options
_PROMPT_KEYS = frozenset({"model", "tools", "systemInstruction", "contents"})
_SIGNATURE_FIELDS = ("thoughtSignature", "thought_signature")


class _Reasoning:
    """Thought parts and thought signatures ride inside a content (§5.4)."""

    def reasoning_only(self, value: Any) -> bool:
        if not isinstance(value, Mapping):
            return False
        parts = listed(value.get("parts"))
        return bool(parts) and all(isinstance(p, Mapping) and p.get("thought") for p in parts)

    def without_reasoning(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        parts = [
            {k: v for k, v in p.items() if k not in _SIGNATURE_FIELDS}
            for p in listed(value.get("parts"))
            if isinstance(p, Mapping) and not p.get("thought")
        ]
        return {**value, "parts": parts}

    def dropped_inside(self, before: Any, after: Any) -> bool:
        """``after`` is ``before`` without its thought Parts, each left out whole and every other Part as it
        was, signature included (what a policy that drops reasoning sends, §5.4); or without its thoughts
        and its signatures both (:func:`stripped_inside`: a client that strips them)."""
        if isinstance(before, Mapping) and isinstance(after, Mapping) and before != after:
            parts = listed(before.get("parts"))
            kept = [p for p in parts if not (isinstance(p, Mapping) and p.get("thought"))]
            if len(kept) < len(parts) and {**before, "parts": kept} == after:
                return True
        return stripped_inside(self, before, after)


class GenerateContentRoom(Room):
    """Gemini generateContent (docs/protocols.md §5) as the guard and the commit read it."""

    api: ClassVar[str] = API
    #: google-genai moves ``config`` fields to the body's top level (``systemInstruction``, ``tools``,
    #: ``generationConfig``) in camelCase: only the bytes on the wire say what a request sent
    kwargs_are_body: ClassVar[bool] = False

    def declared_options(self) -> tuple[str, frozenset[str]]:
        """The config fields the installed SDK declares (ImportError: no SDK)."""
        return SDK_LABEL, _config_fields()

    def kept_body(
        self, kwargs: Mapping[str, Any], body: bytes | None, previous: bytes | Mapping[str, Any] | None
    ) -> bytes | Mapping[str, Any] | None:
        """The body as :class:`_SentBody`: the ``contents`` the kwargs held (the memoized run's dicts, no
        copy) and every other top-level field as the wire had it. Those fields are what google-genai makes
        of ``model`` and ``config`` alone (``systemInstruction``, ``tools``, ``generationConfig``, ...;
        docs/protocols.md §5.1), so they are read from the bytes once, when the model or the config changes,
        and shared with ``previous`` otherwise (issue 21: a copy of the whole body was ~0.5x the content).
        ``contents`` go on the wire as the SDK's dump of these dicts (Parts keyed as received, signatures
        re-sent in the URL-safe alphabet): the same Parts, so two kept bodies differ where the two bodies
        sent do. A body of at most 1 KB is kept as its bytes until one is read back (nothing parsed on a
        fresh session's first sends; never after, as the two forms spell signatures apart: the engine reads
        bytes against bytes). Without the bytes and nothing to share: None (the cause then comes from the
        records)."""
        model, config, contents = kwargs.get("model"), kwargs.get("config"), kwargs.get("contents")
        if isinstance(previous, _SentBody) and previous.model == model and previous.config == config:
            head: Mapping[str, Any] = previous  # its contents are replaced
        elif body is not None and len(body) <= _KEPT_AS_BYTES and not isinstance(previous, _SentBody):
            return body  # (once read back, never bytes again: the two forms spell signatures apart)
        elif body is not None:
            try:
                parsed = json.loads(body)
            except ValueError:
                return body
            if not isinstance(parsed, dict):
                return body
            parsed.pop("contents", None)  # the kwargs' own go in instead
            head = _sharing(parsed, _values_of(config))
        else:
            return None
        return _SentBody(head, contents, model, config)

    usage_key: ClassVar[str] = "usageMetadata"

    def serves(self, path: str) -> bool:
        return ":generateContent" in path or ":streamGenerateContent" in path

    def streamed(self, path: str) -> bool:
        return ":streamGenerateContent" in path

    def model_from_path(self, path: str, body: Any) -> str:
        """The model is in the URL: ``.../models/{model}:generateContent``."""
        tail = path.rsplit("/models/", 1)[-1]
        return tail.split(":", 1)[0]

    def view(self, body: Any, model: str | None = None) -> View:
        """One unit per tool, the system instruction, and one per content without its null fields (§5.3)."""
        body = request_body(body)
        name = model_name(body, model)
        b = ViewBuilder(API, body, name, name, prompt=_PROMPT_KEYS, sort=True)
        for i, tool in enumerate(listed(body.get("tools"))):
            b.add("tools", f"$.tools[{i}]", tool, tool)
        system = body.get("systemInstruction")
        if system is not None:
            b.add("system", "$.systemInstruction", system, system)
        b.prefix = len(b.units)
        for i, content in enumerate(listed(body.get("contents"))):
            b.add("history", f"$.contents[{i}]", content, without_nulls(content))
        return b.view(_REASONING)

    def usage(self, raw: Mapping[str, Any]) -> Usage:
        return _usage(raw)

    def cache_rules(self, model: str, raw_usage: Mapping[str, Any] | None) -> CacheRules:
        return GEMINI

    def assembler(self) -> GeminiAssembler:
        return GeminiAssembler()

    replay_marker: ClassVar[bytes] = b"functionCall"

    def _source(self, response: Mapping[str, Any]) -> Source | None:
        """The answer's function-call parts in order: the call (id where the model gave one, name, args)
        and the thought signature on its Part, or None (§5.4: parallel calls sign only the first)."""
        candidates = listed(response.get("candidates"))
        content = candidates[0].get("content") if candidates and isinstance(candidates[0], Mapping) else None
        parts = listed(content.get("parts")) if isinstance(content, Mapping) else []
        calls = tuple(
            {
                "id": p["functionCall"].get("id"),
                "name": p["functionCall"].get("name"),
                "args": p["functionCall"].get("args"),
                "thoughtSignature": p.get("thoughtSignature"),
            }
            for p in parts
            if isinstance(p, Mapping) and isinstance(p.get("functionCall"), Mapping)
        )
        if not calls:
            return None
        payloads = [c["thoughtSignature"] for c in calls if isinstance(c["thoughtSignature"], str)]
        return replay.source(
            frozenset(_call_key(c) for c in calls),
            calls,
            payloads,
            positional=True,
            marks=frozenset(str(c["id"] or c["name"]) for c in calls),
        )

    def _check(self, source: Source, body: dict[str, Any], mend: bool, out: list[ReplayFinding]) -> None:
        """Each replayed function call (by its id, else by its name and args where one Part alone matches,
        or one alone carries the signature that came) against its Part as it came: the signature on that
        very Part (§5.4: not moved, not merged, not replaced, none added), its args (key order included).
        A signature left out counts in the current turn (the one Gemini validates: §5.4)."""
        contents = listed(body.get("contents"))
        turn = max(
            (
                i
                for i, c in enumerate(contents)
                if isinstance(c, Mapping)
                and c.get("role", "user") == "user"
                and any(
                    isinstance(p, Mapping) and "functionResponse" not in p and "function_response" not in p
                    for p in listed(c.get("parts"))
                )
            ),
            default=-1,
        )
        report = replay.Report(out, mend)
        for call in source.items:
            found = _replayed_call(contents, call)
            if found is None:
                continue
            i, j = found
            parts = contents[i]["parts"]
            part = parts[j]
            path = f"$.contents[{i}].parts[{j}]"
            came, sent = call["thoughtSignature"], part.get("thoughtSignature")
            replayed = _call_of(part)
            if not call.get("id") and replayed.get("id"):
                # the signature is bound to the Part as it came (§5.4): a call id the model did not give
                # (LiteLLM 1.110 adds its own) is refused as a corrupted signature
                report.altered(
                    f"{path}.{'functionCall' if 'functionCall' in part else 'function_call'}.id",
                    f"call id {replay.shown(replayed['id'])} added where the answer had none",
                    functools.partial(replayed.pop, "id"),
                )
            if came is not None and sent is not None and _b64(came) != _b64(sent):
                report.altered(
                    f"{path}.thoughtSignature",
                    f"thoughtSignature {replay.digest(came)} went back as {_shown(sent)}",
                    functools.partial(part.__setitem__, "thoughtSignature", came),
                )
            elif came is None and sent is not None:
                # a call replayed first of its content must be signed (§5.4): a framework that split the
                # parallel calls into contents of their own needs the dummy there, so it is not taken off
                first = next(j_ for j_, p in enumerate(parts) if isinstance(p, Mapping) and _call_of(p))
                report.altered(
                    f"{path}.thoughtSignature",
                    f"thoughtSignature {_shown(sent)} added where the answer had none"
                    + (" (the call split into a content of its own)" if first == j else ""),
                    functools.partial(part.pop, "thoughtSignature") if first != j else None,
                )
            elif came is not None and sent is None:
                moved = next(
                    (
                        x
                        for x, p in enumerate(parts)
                        if isinstance(p, dict) and _b64(p.get("thoughtSignature")) == _b64(came)
                    ),
                    None,
                )
                if moved is not None:
                    report.altered(
                        f"$.contents[{i}].parts[{moved}].thoughtSignature",
                        f"thoughtSignature {replay.digest(came)} moved from parts[{j}] to parts[{moved}]",
                        functools.partial(_move_signature, parts, moved, j),
                    )
                elif i > turn:
                    report.lost(
                        f"{path}.thoughtSignature",
                        f"thoughtSignature {replay.digest(came)} left out",
                        functools.partial(part.__setitem__, "thoughtSignature", came),
                    )
            args = _call_of(part).get("args")
            if json.dumps(args) != json.dumps(call["args"]):
                what = "re-serialized" if args == call["args"] else "changed"
                report.altered(
                    f"{path}.functionCall.args",
                    f"args {what}: {replay.shown(json.dumps(call['args']))} went back as "
                    f"{replay.shown(json.dumps(args))}",
                    functools.partial(_call_of(part).__setitem__, "args", copy.deepcopy(call["args"])),
                )


#: the largest body kept as its bytes (as small as the fields read from it; nothing parsed on a fresh
#: session's first sends)
_KEPT_AS_BYTES = 1024


def _values_of(config: Any) -> dict[Any, list[Any]]:
    """Every JSON object, array and string inside ``config`` (the session's memoized and option values):
    strings by value, objects by their keys, arrays by their length, for :func:`_sharing`."""
    pool: dict[Any, list[Any]] = {}
    stack = [config]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            pool.setdefault(value, [value])
        elif isinstance(value, dict):
            stack.extend(value.values())
            pool.setdefault(("dict", *value), []).append(value)
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
            if isinstance(value, list):  # a tuple is sent as a JSON array, but is not one
                pool.setdefault(("list", len(value)), []).append(value)
    return pool


def _sharing(value: Any, pool: Mapping[Any, list[Any]]) -> Any:
    """``value`` (parsed from the wire) with each string, object or array that has the same JSON text as
    one in ``pool`` (:func:`_same_json`) that very object: the body's fields hold the session's values, not
    copies (the system instruction, the tools' schemas)."""
    if type(value) is str:
        return pool.get(value, (value,))[0]
    if type(value) is dict:
        key: Any = ("dict", *value)
    elif type(value) is list:
        key = ("list", len(value))
    else:
        return value
    for candidate in pool.get(key, ()):
        if candidate == value and _same_json(candidate, value):
            return candidate
    if isinstance(value, dict):
        return {k: _sharing(v, pool) for k, v in value.items()}
    return [_sharing(v, pool) for v in value]


def _same_json(a: Any, b: Any) -> bool:
    """Whether two equal values have the same JSON text: objects with their keys in one order, and no
    ``1`` standing for ``true`` or ``1.0`` (equal in Python, other bytes)."""
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b)


class _SentBody(dict[str, Any]):
    """A generateContent request as a session keeps it for the next cache break's cause
    (:meth:`GenerateContentRoom.kept_body`): a JSON body, the wire's top-level fields (from ``head``; their
    values shared between requests with one model and config) with the request's ``contents``. ``model``
    and ``config`` are the kwargs those fields were made from (``config`` holds values the session's memos
    hold)."""

    __slots__ = ("config", "model")

    def __init__(self, head: Mapping[str, Any], contents: Any, model: Any, config: Any) -> None:
        super().__init__(head)
        self["contents"] = contents
        self.model, self.config = model, config


def _b64(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.urlsafe_b64decode(value.replace("+", "-").replace("/", "_") + "=" * (-len(value) % 4))
    except ValueError:
        return value.encode()


_REASONING = _Reasoning()
ROOM = GenerateContentRoom()


def _call_key(call: Mapping[str, Any]) -> str:
    """How a function call is found again: its id, else its name and its args (as a JSON value)."""
    if call.get("id"):
        return f"id:{call['id']}"
    return f"call:{call.get('name')}:{json.dumps(call.get('args'), sort_keys=True)}"


def _replayed_call(contents: list[Any], call: Mapping[str, Any]) -> tuple[int, int] | None:
    """Where ``call`` sits in a request's model contents: by its id; without one, the Part with its name
    and args, when exactly one matches or exactly one of those carries its signature (else None: a guess)."""
    matches = [
        (i, j)
        for i, c in enumerate(contents)
        if isinstance(c, Mapping) and c.get("role") == "model"
        for j, p in enumerate(listed(c.get("parts")))
        if isinstance(p, dict)
        and _call_of(p)
        and (
            _call_of(p).get("id") == call["id"]
            if call.get("id")
            else (_call_of(p).get("name"), _call_of(p).get("args")) == (call["name"], call["args"])
        )
    ]
    if len(matches) == 1:
        return matches[0]
    signed = [
        (i, j)
        for i, j in matches
        if call.get("thoughtSignature") is not None
        and _b64(contents[i]["parts"][j].get("thoughtSignature")) == _b64(call["thoughtSignature"])
    ]
    return signed[0] if len(signed) == 1 else None


def _call_of(part: Mapping[str, Any]) -> dict[str, Any]:
    """A Part's function call, its key in camelCase or snake_case (proto JSON reads both; LiteLLM 1.110
    writes ``function_call``), or an empty dict."""
    call = part.get("functionCall", part.get("function_call"))
    return call if isinstance(call, dict) else {}


def _move_signature(parts: list[Any], wrong: int, right: int) -> None:
    parts[right]["thoughtSignature"] = parts[wrong].pop("thoughtSignature")


#: the sentinel some frameworks write on a call the model did not sign (docs/protocols.md §5.4)
_DUMMY = frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"})


def _shown(signature: Any) -> str:
    """A signature as a finding shows it: a digest, or the dummy by name (as text or as base64 of it)."""
    dummy = signature if signature in _DUMMY else (_b64(signature) or b"").decode("ascii", "replace")
    return f"the dummy {dummy!r}" if dummy in _DUMMY else replay.digest(signature)
