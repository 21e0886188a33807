"""OpenAI Responses API codec (docs/protocols.md §1): pure encode/decode.

Two modes, chosen by the ``store`` request option:

* **stateless** (default, ``store=False``; docs/protocols.md §1.4 B): every request carries the whole
  transcript. ``include=["reasoning.encrypted_content"]`` is always asked for (without it a stateless
  replay is the 404 of openai/openai-agents-python#919); every output item goes back verbatim, in its
  original order — ``reasoning`` with its ``encrypted_content`` and ``summary``, ``function_call`` with its
  ``arguments`` string exactly as received, ``message`` — followed by one ``function_call_output`` per
  ``call_id`` in the model's declared order.
* **stateful** (``store=True``; §1.4 A): ``previous_response_id`` plus only the new items. The chain is used
  only when the server is known to hold exactly what a full replay would send:
  ``units[:len(chain)] == chain`` where ``chain = records.newest_units() + (digests of the last step's output
  items)``. Otherwise — after :meth:`OpenAIResponsesAdapter.restored`, after a model switch, when the last
  step has no response id, after a 404 for the previous response, or when a policy rewrote the replayed
  history — the request is a full replay (still ``store=True``) and the trace gets a ``chain.fallback``
  event naming the reason. ``encrypted_content`` is asked for in this mode too, so a fallback can always
  replay reasoning statelessly.

  A 404 ``previous_response_not_found`` (the stored response expired or was deleted) raises
  :class:`PreviousResponseNotFound`; the session is unchanged and the adapter forgets the chain, so the
  retry is a traced full replay. A retry therefore does *not* send the same bytes — on purpose.

Rules encoded here (docs/protocols.md §1.4 B):

* pairing: a reasoning item goes back only immediately followed by the item that followed it (B.1); a
  reasoning item with no non-reasoning item after it in its own output is never replayed (B.6,
  inspect_ai PR #1990). When a step's reasoning is not sent (a policy dropped it, it was produced by
  another model, or it cannot be replayed), the items it produced are replayed *id-less* (``id`` removed,
  and ``status`` for a message; ``call_id`` kept), so no item refers to a reasoning item that is absent
  (B.2; vercel/ai c883c47, pydantic-ai thinking.md ``openai_send_reasoning_ids=False``). A step whose
  payloads belong to another vendor or API is rendered from its canonical parts (assistant text as a
  message, tool calls as id-less ``function_call`` items with their raw arguments; no reasoning);
* output items of types this adapter does not model are kept verbatim, replayed, never dropped; a step
  holding one keeps its reasoning (:class:`ResponsesRules`), since the item may depend on it;
* a reasoning item without ``encrypted_content`` (a server that did not return it) can only be resolved
  by id from storage (B.5): it is replayed only with ``store=True``; statelessly it is treated as dropped
  and the decode traces ``reasoning.unreplayable``;
* ``prompt_cache_key`` (§1.1) defaults to ``"rs-" + the first 32 hex digits of the prefix fingerprint of
  the session's first request`` (``records[0]``), so it is stable for the session, across
  ``change_prefix`` and across snapshot/restore; the ``prompt_cache_key`` option overrides it (``None``:
  not sent). ``reasoning`` (``effort``, ``summary``, ``context``) and every other option pass through.
* ``input_transformations`` (§1.2: reasoning inputs the server withheld) are traced as
  ``input.transformations``.

Prefix units (for the guard and the cache prediction): one pseudo-unit for the cache namespace (model +
``prompt_cache_key``), one for ``instructions``, one for the tool list, then one per input item of the
*full* transcript (in both modes: a chained request is the same prompt server-side).

Cache prediction (§1.5): :data:`OPENAI_RESPONSES`, scheme ``items``.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from reasonstate.adapters import replay
from reasonstate.adapters.base import (
    DecodedStep,
    Encodings,
    Endpoint,
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
    json_object,
    key_shared,
    open_turn_encoding,
    part_strings,
    payload_of,
    summary_note,
    unit_digest,
)
from reasonstate.adapters.declared import check_call, declared, object_parameters
from reasonstate.adapters.replay import ReplayFinding, Source
from reasonstate.adapters.transport import status_message
from reasonstate.cache.divergence import ReasoningUnits, View, ViewBuilder, listed, model_name, request_body
from reasonstate.cache.rules import CacheRules
from reasonstate.errors import MalformedResponse, PolicyConflict, StreamInterrupted, VendorError
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
    TurnView,
    Usage,
    as_records,
    bound,
    parse_arguments,
)
from reasonstate.state.continuation import sharing
from reasonstate.state.units import UnitBuffer, UnitSeq, as_units

__all__ = [
    "CHAIN_FALLBACK",
    "CONTEXT_COMPACTED",
    "ENCRYPTED_CONTENT",
    "INPUT_TRANSFORMATIONS",
    "OPENAI_RESPONSES",
    "REASONING_UNREPLAYABLE",
    "ROOM",
    "OpenAIResponsesAdapter",
    "PreviousResponseNotFound",
    "ResponsesAssembler",
    "ResponsesRoom",
    "ResponsesRules",
]

#: this API's prefix cache, as data (docs/protocols.md; the schemes are :mod:`reasonstate.cache.rules`)
OPENAI_RESPONSES = CacheRules(
    scheme="items",
    source="docs/protocols.md §1.5",
    min_tokens=1024,
    step=128,
    # §1.5: in memory 5 to 10 minutes unused, at most an hour; extended (the default of organisations
    # without zero data retention, and of gpt-5.5 on) up to 24 hours: unnamed, either
    lifetime=(300, 86400),
)

VENDOR = "openai"
#: the output items that are visible history any model may read (the canonical parts say all they hold);
#: every other item, a ``reasoning`` or one of a type this adapter does not know (a ``compaction`` item with
#: its ``encrypted_content``), is bound to the model that produced it and never sent to another (issue 23
#: item 7; docs/protocols.md)
_UNBOUND_KINDS = frozenset({"message", "function_call"})
API = "responses"
ENCRYPTED_CONTENT = "reasoning.encrypted_content"
#: trace event kinds this adapter adds
CHAIN_FALLBACK = "chain.fallback"
#: a compaction item arrived (§1.9): the engine cites it as the declared cause of the next cache break
CONTEXT_COMPACTED = EventKind.CONTEXT_COMPACTED
INPUT_TRANSFORMATIONS = "input.transformations"
REASONING_UNREPLAYABLE = "reasoning.unreplayable"
#: what an item produced after a dropped reasoning item loses when replayed id-less (§1.4 B.2; a message
#: without ``id`` is an EasyInputMessage, which has no ``status``)
_ID_KEYS: dict[str, tuple[str, ...]] = {"function_call": ("id",), "message": ("id", "status")}
#: every top-level field of the input items a memoized run keeps as key-sharing dicts (messages, reasoning,
#: function calls and their outputs, compaction items, §1.3, §1.4, §1.9): a closed set, so the holder classes
#: stay few (:func:`~reasonstate.adapters.base.key_shared`); an item with another field is kept as it is
_ITEM_FIELDS = frozenset(
    {
        "type",
        "id",
        "status",
        "role",
        "content",
        "summary",
        "encrypted_content",
        "call_id",
        "name",
        "arguments",
        "output",
        "phase",
        "namespace",
    }
)
#: the fields of the parts inside an item's ``content`` or ``summary`` list (output_text, summary_text,
#: reasoning_text), likewise kept as key-sharing dicts
_ITEM_PART_FIELDS = frozenset({"type", "text", "annotations", "logprobs"})


class PreviousResponseNotFound(VendorError):
    """404 ``previous_response_not_found``: the stored chain is gone (expired, deleted, other project).

    Nothing was committed; ``response_id`` is the id the server no longer holds. The session records it
    in the trace and never refers to it again, so retrying makes a full replay (traced as
    ``chain.fallback`` with reason ``expired``).
    """

    def __init__(self, message: str, *, response_id: str, status: int | None = 404, body: object = None):
        super().__init__(message, status=status, body=body)
        self.response_id = response_id


def _previous_response_lost(exc: Any, request: VendorRequest) -> VendorError | None:
    """A 404 for the ``previous_response_id`` sent is :class:`PreviousResponseNotFound`."""
    previous = request.kwargs.get("previous_response_id")
    code, param = getattr(exc, "code", None), getattr(exc, "param", None)
    gone = code == "previous_response_not_found" or param == "previous_response_id"
    if exc.status_code == 404 and isinstance(previous, str) and gone:
        return PreviousResponseNotFound(
            status_message("OpenAI", exc), response_id=previous, body=getattr(exc, "body", None)
        )
    return None


_UNVERIFIED = re.compile(r"The encrypted content (\S{4})\.\.\.(\S{4}) could not be verified")


def _blamed_items(request: VendorRequest, error: VendorError) -> tuple[Any, ...]:
    """The reasoning items whose ``encrypted_content`` a 400 ``invalid_encrypted_content`` names (by its
    first and last four characters, docs/protocols.md §1.8)."""
    blamed = []
    for head, tail in _UNVERIFIED.findall(str(error)):
        for item in request.kwargs.get("input", []):
            blob = item.get("encrypted_content") if isinstance(item, Mapping) else None
            if isinstance(blob, str) and blob.startswith(head) and blob.endswith(tail):
                blamed.append(item)
    return tuple(blamed)


@attrs.frozen(slots=True)
class ResponsesRules(ProtocolRules):
    """OpenAI Responses rules: the base clamp, plus — a step holding an output item of a type we do not
    model keeps its reasoning (we cannot replay that item id-less, and it may need its reasoning item:
    docs/protocols.md §1.4 B.2)."""

    def clamp(self, turn: Turn, view: TurnView) -> tuple[TurnView, tuple[str, ...]]:
        view, reasons = ProtocolRules.clamp(self, turn, view)
        keep = list(view.keep_reasoning)
        extra: list[str] = []
        for i, step in enumerate(turn.steps):
            if keep[i] or not any(isinstance(p, ReasoningPart) for p in step.parts):
                continue
            opaque = sorted({p.type for p in step.parts if isinstance(p, OpaquePart)})
            if opaque:
                keep[i] = True
                extra.append(f"step {i}: items of unknown type {opaque} may need their reasoning item")
        if not extra:
            return view, reasons
        return attrs.evolve(view, keep_reasoning=tuple(keep)), (*reasons, *extra)


@attrs.frozen(slots=True)
class _Item:
    """One input item: the JSON value sent (frozen or built here) and its unit digest."""

    value: Any
    unit: str


@attrs.frozen(slots=True)
class _TurnEncoding:
    """A turn's input items, shared read-only between requests while the turn stays the same."""

    items: tuple[_Item, ...]
    withheld: tuple[Continuation, ...]
    seal: Seal  # the replayed payloads, checked before every send

    def verify(self) -> None:
        self.seal.check()

    @property
    def values(self) -> tuple[Any, ...]:
        return tuple(i.value for i in self.items)

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(i.unit for i in self.items)


def _is_compaction(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "compaction"


#: the run of no turns; its runs keep the index of their newest compaction item (§1.9) as they grow
_EMPTY_RUN = ListRun(marks=_is_compaction)


def _closed_run(
    turns: tuple[Turn, ...],
    model: str,
    store: bool,
    encodings: Encodings,
    platform: str,
    n: int | None = None,
) -> ListRun:
    """The run of ``turns[:n]`` (all closed; all of them without ``n``); a turn's items depend on the
    model, the platform and ``store``."""

    def encode(turn: Turn) -> _TurnEncoding:  # kept only as its place in the run (issue 21: memory)
        return _encode_turn(turn, model=model, by_reference=store, platform=platform, kept=True)

    return closed_run(turns, (API, "run", model, store, platform), encode, _EMPTY_RUN, encodings, n)


# -- stream assembly: the non-streamed answer from its SSE stream (docs/protocols.md §1.6) -------------------


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

    def _complete(self) -> bool:
        return self._terminal is not None

    def _event(self, event: SSEEvent) -> None:
        data = json_object(event, "stream event")
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


#: the SDK method a Responses call goes to, as error messages name it
SDK_LABEL = "openai responses.create"


class OpenAIResponsesAdapter:
    """The Responses API codec. ``strict_tools`` (optional) sets ``strict`` on every function tool."""

    vendor = VENDOR
    api = API
    endpoint = Endpoint(
        sdk="openai",
        resource=("responses",),
        label="OpenAI",
        assembler=ResponsesAssembler,
        status_error=_previous_response_lost,
        blame=lambda request, error: _blamed_items(request, error),
    )
    cache = OPENAI_RESPONSES

    def __init__(
        self, *, strict_tools: bool | None = None, platform: str = FIRST_PARTY, scope: str = ""
    ) -> None:
        self._strict = strict_tools
        #: where the client's requests are served (docs/protocols.md §10): payloads go back only there
        self.platform = platform
        #: the platform and the resource it binds payloads to (``scope``: "" when unknown or unbound, §10.1)
        self.binding = bound(platform, scope)
        self.rules: ProtocolRules = ResponsesRules(
            vendor=VENDOR, api=API, reasoning_only_steps_keep_reasoning=False
        )

    def check_call(self, client: Any, model: str, options: Mapping[str, Any], tools: Sequence[Tool]) -> None:
        """Refuse, before any request, what can never be sent (docs/protocols.md §9): an option
        ``responses.create`` does not declare or a value its annotation rules out, a misspelling of a model
        id the installed SDK lists, another vendor's model id on OpenAI's own host (any other host may
        serve any model: a proxy, a compatible server), a tool whose ``parameters`` is not an object
        schema (§1.3)."""
        check_call(
            client,
            sdk="openai",
            resource=self.endpoint.resource,
            label=SDK_LABEL,
            vendor=VENDOR,
            only_on="openai.com",
            model=model,
            options=options,
            family="gpt-",
        )
        object_parameters(tools, "a function tool's parameters", "docs/protocols.md §1.3")

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
        """Build the ``responses.create`` kwargs for the next call on ``history``."""
        store = options.get("store", False) is True
        cache_key = _cache_key(prefix, options, records)
        tools: list[dict[str, Any]] = []
        for t in prefix.tools:
            tool: dict[str, Any] = {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.offered_parameters,
            }
            if self._strict is not None:
                tool["strict"] = self._strict
            tools.append(tool)
        units = UnitBuffer([unit_digest({"model": model, "prompt_cache_key": cache_key})])
        if prefix.system:
            units.append(unit_digest({"instructions": prefix.system}))
        if tools:
            units.append(unit_digest({"tools": tools}))
        n_head = len(units)
        values: list[Any] = []  # the input items, one unit each after the head's
        for user, answer in prefix.few_shots:
            for item in (_message_item("user", user), _message_item("assistant", answer)):
                values.append(item.value)
                units.append(item.unit)
        closed = len(history.turns) - (history.open_turn is not None)  # all but the open turn (no copy)
        memo = encodings if encodings is not None else Encodings()
        run = _closed_run(history.turns, model, store, memo, self.binding, closed)
        run.check()  # the replayed payloads of every closed turn, by identity (re-hashed only if replaced)
        n_few = len(values)
        values.extend(run.values)
        units.extend_packed(*run.unit_raw())  # packed, joined at C speed (issue 21)
        withheld: list[Continuation] = list(run.withheld)
        if history.open_turn is not None:
            build = functools.partial(_encode_turn, model=model, by_reference=store, platform=self.binding)
            encoded = open_turn_encoding(history.turns[-1], build, model, "docs/protocols.md §1.4")
            values.extend(encoded.values)
            units.extend(encoded.units)
            withheld.extend(encoded.withheld)
        request_units = units.done()

        conversation = options.get("conversation")
        # §1.9: the newest compaction item carries every item before it: the units are what the server
        # renders (from that item on). Stateless, the items before it are dropped too (the vendor's latency
        # tip); chained by id or conversation they are not sent anyway ("do not manually prune"). The
        # closed turns' newest one is kept by their run: only the open turn's items are looked at here
        at = _newest_compaction(values, n_few + len(run.values))
        if at is None and run.marked >= 0:
            at = n_few + run.marked
        at = at or 0
        if at:
            request_units = request_units[:n_head] + request_units[n_head + at :]
            if not store and conversation is None:
                values, at = values[at:], 0
        events: list[tuple[str, Mapping[str, Any]]] = []
        previous: str | None = None
        start = 0
        if store:
            last = _last_step(history)
            if last is not None:
                base, reason = _chain(last, model, request_units, records, lost_responses, n_head)
                if reason is None:
                    previous, start = last.response_id, base - n_head + at
                else:
                    events.append(
                        (CHAIN_FALLBACK, {"reason": reason, "previous_response_id": last.response_id})
                    )
        if conversation is not None:
            held = _held_by_conversation(history, request_units, records, n_head)
            start = held - n_head + at if held else 0
        kwargs: dict[str, Any] = {"model": model}
        if prefix.system:
            kwargs["instructions"] = prefix.system
        if tools:
            kwargs["tools"] = tools
        kwargs["input"] = values[start:] if start else values  # the list is this request's own
        if previous is not None:
            kwargs["previous_response_id"] = previous
        include = list(options.get("include") or ())
        if ENCRYPTED_CONTENT not in include:
            include.append(ENCRYPTED_CONTENT)
        kwargs["include"] = include
        kwargs["store"] = store
        if cache_key is not None:
            kwargs["prompt_cache_key"] = cache_key
        for key, value in options.items():
            if key not in ("include", "store", "prompt_cache_key", "stream"):
                kwargs[key] = value
        return VendorRequest(
            kwargs=kwargs,
            units=request_units,
            model=model,
            prefix_units=n_head,
            withheld=tuple(withheld),
            events=tuple(events),
        )

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        """Split a ``response`` object (the JSON as received) into the four layers' material.

        Payload provenance is the *requested* model: OpenAI echoes a dated snapshot name for an alias
        (``gpt-5`` → ``gpt-5-2025-08-07``, docs/protocols.md §0), and later requests name the requested one.
        """
        if not isinstance(response, Mapping) or not isinstance(response.get("output"), list):
            raise MalformedResponse("Responses API response has no output list")
        status = response.get("status")
        if status == "failed":
            error = response.get("error")
            raise VendorError(f"OpenAI response failed: {error}", body=error)
        parts: list[Part] = []
        payloads: list[Continuation] = []
        events: list[tuple[str, Mapping[str, Any]]] = []
        unreplayable: list[str] = []
        stateless = response.get("store") is False
        for i, item in enumerate(response["output"]):
            if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
                raise MalformedResponse(f"output[{i}] is not a typed item")
            kind = item["type"]
            parts.append(_part(kind, item, i))
            if kind == "reasoning" and stateless and not item.get("encrypted_content"):
                unreplayable.append(str(item.get("id")))
            payloads.append(
                Continuation.capture(
                    vendor=VENDOR,
                    api=API,
                    model=request.model,
                    kind=kind,
                    value=item,
                    model_bound=kind not in _UNBOUND_KINDS,
                    platform=self.binding,
                )
            )
        rid = response.get("id")
        compactions = [c for c in payloads if c.kind == "compaction"]
        if compactions:  # §1.9: the next stateless request starts at this item: a declared rewrite
            events.append(
                (
                    CONTEXT_COMPACTED,
                    {
                        "response_id": rid,
                        "digest": compactions[-1].digest,
                        "summary": "the vendor compacted the context: its compaction item replaces every "
                        "earlier item (docs/protocols.md §1.9)",
                    },
                )
            )
        transformations = response.get("input_transformations")
        if isinstance(transformations, list) and transformations:
            events.append((INPUT_TRANSFORMATIONS, {"response_id": rid, "items": transformations}))
        if unreplayable:
            events.append(
                (
                    REASONING_UNREPLAYABLE,
                    {
                        "response_id": rid,
                        "items": unreplayable,
                        "reason": "no encrypted_content under store=false: replayed as dropped",
                    },
                )
            )
        details = response.get("incomplete_details")
        stop = status if isinstance(status, str) else "unknown"
        if status == "incomplete" and isinstance(details, Mapping) and isinstance(details.get("reason"), str):
            stop = details["reason"]
        echoed = response.get("model")
        return DecodedStep(
            parts=tuple(parts),
            continuation=tuple(payloads),
            stop_reason=stop,
            usage=_usage(response.get("usage")),
            model=request.model,
            response_id=rid if isinstance(rid, str) else None,
            response_stored=isinstance(rid, str) and request.kwargs.get("store") is True,
            response_model=echoed if isinstance(echoed, str) else None,
            events=tuple(events),
        )


# -- encoding helpers ---------------------------------------------------------------------------------------


def _cache_key(prefix: Prefix, options: Mapping[str, Any], records: Sequence[ExecutionRecord]) -> str | None:
    if "prompt_cache_key" in options:
        key = options["prompt_cache_key"]
        return None if key is None else str(key)
    fingerprint = records[0].prefix_fingerprint if records else prefix.fingerprint
    return "rs-" + fingerprint.removeprefix("sha256:")[:32]


def _server_chain(last: Step, records: Sequence[ExecutionRecord], n_head: int) -> UnitSeq:
    """The units the server holds after the last step: the newest request's units and the step's output
    items, from the step's compaction item on when it brought one (§1.9: the units are what it renders).
    Packed as the records keep them: joined at C speed (issue 21: own CPU per request)."""
    held = UnitBuffer(as_records(records).newest_units())
    held.extend([c.digest for c in last.continuation])
    compactions = [c.digest for c in last.continuation if c.kind == "compaction"]
    if compactions:
        chain = tuple(held.done())
        at = len(chain) - 1 - chain[::-1].index(compactions[-1])
        return (*chain[:n_head], *chain[at:])
    return held.done()


def _chain(
    last: Step,
    model: str,
    units: Sequence[str],
    records: Sequence[ExecutionRecord],
    lost: frozenset[str],
    n_head: int,
) -> tuple[int, str | None]:
    """``(units the server already holds, None)`` when ``previous_response_id`` can be used, else
    ``(0, reason)``."""
    rid = last.response_id
    if rid is None:
        return 0, "no_response_id"
    if rid in lost:
        return 0, "expired"
    if not last.response_stored or not records:
        return 0, "not_stored"
    if last.model != model:
        return 0, "model_switch"
    chain = _server_chain(last, records, n_head)
    if len(units) < len(chain) or as_units(units[: len(chain)]) != chain:
        return 0, "history_rewritten"
    return len(chain), None


def _held_by_conversation(
    history: History, units: Sequence[str], records: Sequence[ExecutionRecord], n_head: int
) -> int:
    """How many leading units the ``conversation`` already holds (§1.10: every earlier request's input and
    output join it): the newest request's units and the last step's output items. The request sends only
    what follows. A history rewritten since (a policy dropped reasoning) cannot be sent: the conversation
    keeps the items as they went."""
    last = _last_step(history)
    if last is None or not records:
        return 0  # the first request on a (new) conversation sends every item
    chain = _server_chain(last, records, n_head)
    if as_units(units[: len(chain)]) != chain:
        raise PolicyConflict(
            "conversation= keeps every earlier item server-side as it was sent; this history was rewritten "
            "since (a policy dropped or summarized reasoning, or the model changed): use Keep, or "
            "previous_response_id / stateless items (docs/protocols.md §1.10)"
        )
    return len(chain)


def _newest_compaction(values: Sequence[Any], start: int = 0) -> int | None:
    """The index of the newest ``compaction`` item among the input items ``values[start:]`` (§1.9), None
    when there is none. An item of another model is never among them (rendered canonically: a compaction
    has no canonical form), so only a compaction this model can read cuts the input. (Few-shot items are
    plain messages, never a compaction.)"""
    for i in range(len(values) - 1, start - 1, -1):
        if _is_compaction(values[i]):
            return i
    return None


def _message_item(role: str, text: str) -> _Item:
    value = {"role": role, "content": text}
    return _Item(value, unit_digest(value))


def _last_step(history: History) -> Step | None:
    for turn in reversed(history.turns):
        if turn.steps:
            return turn.steps[-1]
    return None


def _encode_turn(
    turn: Turn, *, model: str, by_reference: bool, platform: str = FIRST_PARTY, kept: bool = False
) -> _TurnEncoding:
    """The turn's items: its user message, each step's output items, each step's tool outputs.

    ``by_reference``: reasoning items without ``encrypted_content`` may be sent (the server resolves them
    from storage, ``store=True`` only: §1.4 B.5). ``kept``: the items go into a memoized run, kept for the
    session's life, so each is rebuilt as key-sharing dicts (:func:`_kept_item`; issue 21); the open
    turn's, built per request, stay as built. Either way the values are equal, key order included.
    """
    items: list[_Item] = [_message_item("user", turn.user)]
    replayed: list[Continuation] = []
    withheld: list[Continuation] = []
    last = len(turn.steps) - 1
    for i, step in enumerate(turn.steps):
        keep = turn.view is None or turn.view.keep_reasoning[i]
        summary = turn.view.summary if turn.view is not None and i == last else None
        if summary is not None:
            items.append(_message_item("assistant", summary_note(summary)))
        items.extend(_step_items(step, keep, model, by_reference, replayed, withheld, platform))
        for r in step.tool_results:
            value = {"type": "function_call_output", "call_id": r.call_id, "output": r.content}
            items.append(_Item(value, unit_digest(value)))
    if kept:
        return _TurnEncoding(tuple(_kept_item(i) for i in items), tuple(withheld), Seal.of(replayed))
    return _TurnEncoding(tuple(items), tuple(withheld), Seal.of(replayed))


def _kept_item(item: _Item) -> _Item:
    """``item`` with its value as key-sharing dicts (:func:`~reasonstate.adapters.base.shared_dict`, issue
    21: ~100 bytes where a dict display takes ~180 on CPython 3.11): the item itself and the parts of its
    ``content`` or ``summary`` list, each of its fields in their order; anything else is shared, not copied.
    Equal to the item's value, key order included, so the same bytes are sent. Only for values built fresh
    for this turn's encoding (the rebuilt dicts replace them, nothing else holds them)."""
    value = item.value
    if type(value) is not dict:
        return item
    shared = key_shared(value, _ITEM_FIELDS)
    if shared is value:
        return item
    for key in ("content", "summary"):
        parts = shared.get(key)
        if type(parts) is list and parts:
            shared[key] = exact_list([key_shared(p, _ITEM_PART_FIELDS) for p in parts])
    return _Item(shared, item.unit)


def _step_items(
    step: Step,
    keep: bool,
    model: str,
    by_reference: bool,
    replayed: list[Continuation],
    withheld: list[Continuation],
    platform: str = FIRST_PARTY,
) -> Iterable[_Item]:
    payloads = step.continuation
    withheld.extend(c for c in payloads if not c.replayable_to(VENDOR, API, model, platform))
    reasoning_absent = False  # the latest reasoning item of this step is not being sent
    for part in step.parts:
        c = payload_of(step, part)
        if c is None or not c.replayable_to(VENDOR, API, model, platform):
            if isinstance(part, ReasoningPart) or (c is not None and c.kind == "reasoning"):
                reasoning_absent = True
            item = _canonical_item(part)
            if item is not None:
                yield item
            continue
        # digest-verified, parsed once for the memoized run, sharing the history's strings (nothing parsed
        # is kept in the continuation: issue 21); a plain value, for the SDK's exact-type fast path
        value = sharing(c.checked(), part_strings(part))
        if c.kind == "reasoning":
            k = part.continuation or 0
            following = payloads[k + 1] if k + 1 < len(payloads) else None
            paired = following is not None and following.kind != "reasoning"  # §1.4 B.1, B.6
            replayable = by_reference or bool(value.get("encrypted_content"))
            reasoning_absent = not (keep and paired and replayable)
            if not reasoning_absent:
                replayed.append(c)
                yield _Item(value, c.digest)
            continue
        strip = _ID_KEYS.get(c.kind)
        replayed.append(c)  # the source of what is sent, verified with the turn's seal
        if reasoning_absent and strip is not None:
            idless = {key: v for key, v in value.items() if key not in strip}
            yield _Item(idless, unit_digest(idless))
            continue
        yield _Item(value, c.digest)


def _canonical_item(part: Part) -> _Item | None:
    """A part as an input item when its payload cannot be sent (another vendor or API): text as an
    assistant message, a tool call id-less with its exact raw arguments (§1.3); reasoning and items of
    unknown types have no canonical form (foreign reasoning is never disguised as a reasoning item)."""
    if isinstance(part, TextPart):
        return _message_item("assistant", part.text) if part.text else None
    if isinstance(part, ToolCallPart):
        value = {
            "type": "function_call",
            "call_id": part.id,
            "name": part.name,
            "arguments": part.raw_arguments,
        }
        return _Item(value, unit_digest(value))
    return None


# -- decoding helpers ---------------------------------------------------------------------------------------


def _part(kind: str, item: Mapping[str, Any], i: int) -> Part:
    """The canonical part of an output item, after checking every field that goes back verbatim has the type
    the input schema requires (§1.2, §1.3): an item accepted here is one the vendor accepts replayed."""
    if kind == "reasoning":
        summary, content = item.get("summary"), item.get("content")
        if not _text_parts(summary):
            raise MalformedResponse(f"output[{i}]: a reasoning item needs a summary list of text parts")
        if "content" in item and not _text_parts(content):
            raise MalformedResponse(f"output[{i}]: reasoning content is not a list of text parts")
        if not isinstance(item.get("encrypted_content"), (str, type(None))):
            raise MalformedResponse(f"output[{i}]: encrypted_content is not a string")
        if "id" in item and not isinstance(item["id"], str):
            raise MalformedResponse(f"output[{i}]: a reasoning item id is not a string")
        texts = [p["text"] for p in (content or summary or ())]
        text = "\n\n".join(texts)
        return ReasoningPart(text=text, redacted=not text, continuation=i)
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
            raise MalformedResponse(f"output[{i}]: function_call needs call_id, name and an arguments string")
        if not isinstance(item.get("id"), (str, type(None))):
            raise MalformedResponse(f"output[{i}]: a function_call id is not a string")
        # raw_arguments is the truth (replayed byte for byte); parsed is a convenience for handlers
        parsed, error = parse_arguments(arguments)
        return ToolCallPart(
            id=call_id,
            name=name,
            arguments=parsed,
            raw_arguments=arguments,
            continuation=i,
            arguments_error=error,
        )
    if kind == "message":
        content = item.get("content")
        if item.get("role") != "assistant" or not isinstance(item.get("id"), (str, type(None))):
            raise MalformedResponse(f"output[{i}]: an output message needs role assistant and a string id")
        if not isinstance(content, list):
            raise MalformedResponse(f"output[{i}]: message without a content list")
        texts = []
        for k, p in enumerate(content):
            kind_k = p.get("type") if isinstance(p, Mapping) else None
            known = {"output_text": "text", "refusal": "refusal"}
            field = known.get(kind_k) if isinstance(kind_k, str) else ""
            if field is None:
                continue  # a content part of another type: kept verbatim in the payload, no text
            if not field or not isinstance(p.get(field), str):
                raise MalformedResponse(f"output[{i}].content[{k}] is not a typed part with a string {field}")
            texts.append(p[field])
        return TextPart(text="".join(texts), continuation=i)
    return OpaquePart(type=kind, continuation=i)


def _text_parts(value: Any) -> bool:
    """A list of ``{"type": ..., "text": str}`` (a reasoning summary or raw reasoning content)."""
    return isinstance(value, list) and all(
        isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in value
    )


def _usage(raw: Any) -> Usage:
    """``input_tokens`` includes cached (and cache-written) tokens; Usage keeps them disjoint (§1.5)."""
    if not isinstance(raw, Mapping):
        return Usage()
    details = raw.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    out_details = raw.get("output_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, Mapping) else None
    cached = count(details.get("cached_tokens"))
    written = count(details.get("cache_write_tokens"))
    return Usage.of(
        uncached_input=count(raw.get("input_tokens")) - cached - written,
        cache_read=cached,
        cache_write=written,
        output=raw.get("output_tokens"),
        reasoning=reasoning,
    )


# -- the room: what the guard, the commit and the exporters read of the Responses API -----------------------

#: the prompt keys of a Responses body (the model, tools, system and history units); the rest are options
_PROMPT_KEYS = frozenset({"model", "tools", "instructions", "input"})
#: item fields that are bookkeeping, not prompt: the item's id and status are not rendered into the prompt
_ITEM_METADATA = frozenset({"id", "status"})


class ResponsesRoom(Room):
    """The Responses API (docs/protocols.md §1) as the guard and the commit read it."""

    api: ClassVar[str] = API

    def declared_options(self) -> tuple[str, frozenset[str]]:
        """The options the installed SDK's ``responses.create`` declares (ImportError: no SDK)."""
        from openai.resources.responses import Responses

        return SDK_LABEL, declared(Responses.create, SDK_LABEL).names

    def serves(self, path: str) -> bool:
        return path.endswith("/responses")

    def view(self, body: Any, model: str | None = None) -> View:
        """One unit per tool, the instructions, and one per input item without its id and status (§1.5);
        the model unit's key is the cache namespace: the model and the ``prompt_cache_key``."""
        body = request_body(body)
        name = model_name(body, model)
        namespace = f"{name}|{body.get('prompt_cache_key') or ''}"
        b = ViewBuilder(API, body, name, namespace, prompt=_PROMPT_KEYS, sort=True)
        for i, tool in enumerate(listed(body.get("tools"))):
            b.add("tools", f"$.tools[{i}]", tool, tool)
        if body.get("instructions") is not None:
            b.add("system", "$.instructions", body["instructions"], body["instructions"])
        b.prefix = len(b.units)
        items = body.get("input")
        if isinstance(items, str):
            b.add("history", "$.input", items, {"content": items, "role": "user"})
        listing = listed(items)
        # §1.9: the server renders the input from its newest compaction item on (the item replaces what came
        # before it), so a request that replays those items and one that dropped them are the same prompt
        start = _newest_compaction(listing) or 0
        for i, item in enumerate(listing[start:], start):
            kept = (
                {k: v for k, v in item.items() if k not in _ITEM_METADATA}
                if isinstance(item, Mapping)
                else item
            )
            b.add("history", f"$.input[{i}]", item, kept)
        return b.view(_REASONING)

    def usage(self, raw: Mapping[str, Any]) -> Usage:
        return _usage(raw)

    def cache_rules(self, model: str, raw_usage: Mapping[str, Any] | None) -> CacheRules:
        return OPENAI_RESPONSES

    # docs/protocols.md §1.5: ``prompt_cache_retention`` (sent, or echoed in a Responses answer) names
    # the retention: in memory an unused prefix lives 5 to 10 minutes, at most an hour; extended, up to
    # 24 hours
    retention_key: ClassVar[str] = "prompt_cache_retention"
    retention_lifetimes: ClassVar[Mapping[str, tuple[int, int]]] = {
        "in_memory": (300, 3600),
        "24h": (300, 86400),
    }

    def assembler(self) -> ResponsesAssembler:
        return ResponsesAssembler()

    replay_marker: ClassVar[bytes] = b"function_call"

    def _source(self, response: Mapping[str, Any]) -> Source | None:
        """The answer's reasoning items (id, encrypted content, summary) and function calls (id, call id,
        name, argument string), in output order (§1.4: a stateless chain sends them back as input items)."""
        items = tuple(
            {k: i[k] for k in _REPLAYED[i["type"]] if k in i}
            for i in listed(response.get("output"))
            if isinstance(i, Mapping) and i.get("type") in _REPLAYED
        )
        calls = [i for i in items if i["type"] == "function_call" and isinstance(i.get("call_id"), str)]
        if not calls:
            return None
        payloads = [i.get("encrypted_content") or "" for i in items if i["type"] == "reasoning"]
        payloads += [c["arguments"] for c in calls if isinstance(c.get("arguments"), str)]
        return replay.source(frozenset(c["call_id"] for c in calls), items, payloads, positional=False)

    def _check(self, source: Source, body: dict[str, Any], mend: bool, out: list[ReplayFinding]) -> None:
        """Each replayed function call (by its call id) against the call that came (name, argument string
        byte for byte, item id); each reasoning item that came before it (by its id, else the reasoning
        item just before the call) against its id and encrypted content. A request chained with
        ``previous_response_id`` carries them server-side (§1.4): nothing to compare."""
        if body.get("previous_response_id"):
            return
        items = listed(body.get("input"))
        report = replay.Report(out, mend)
        came_calls = [i for i in source.items if i["type"] == "function_call"]
        at = {
            i.get("call_id"): x
            for x, i in enumerate(items)
            if isinstance(i, dict) and i.get("type") == "function_call"
        }
        first = next((at[c["call_id"]] for c in came_calls if c["call_id"] in at), None)
        if first is None:
            return
        for came in came_calls:
            x = at.get(came["call_id"])
            if x is None:
                continue
            item = items[x]
            for key in ("name", "arguments", "id"):
                if key in came and key in item and item[key] != came[key]:
                    what = (
                        "re-serialized"
                        if key == "arguments" and replay.same_json(item[key], came[key])
                        else "changed"
                    )
                    was, now = replay.shown(came[key]), replay.shown(item[key])
                    report.altered(
                        f"$.input[{x}].{key}",
                        f"{key} {what}: {was} went back as {now}",
                        functools.partial(item.__setitem__, key, came[key]),
                    )
        reasoning = [i for i in source.items if i["type"] == "reasoning"]
        for k, came in enumerate(reasoning):
            x = next(
                (
                    x
                    for x, i in enumerate(items)
                    if isinstance(i, dict)
                    and i.get("type") == "reasoning"
                    and came.get("id")
                    and i.get("id") == came["id"]
                ),
                None,
            )
            if x is None and k == len(reasoning) - 1 and first > 0:
                before = items[first - 1]
                if isinstance(before, dict) and before.get("type") == "reasoning" and not before.get("id"):
                    x = first - 1
            blob = came.get("encrypted_content")
            if x is None:
                if blob or came.get("id"):
                    report.lost(
                        f"$.input[{first}]",
                        f"reasoning item {replay.digest(blob or came.get('id'))} left out",
                        functools.partial(items.insert, first, copy.deepcopy(came)),
                    )
                continue
            item = items[x]
            sent = item.get("encrypted_content")
            restore = functools.partial(item.__setitem__, "encrypted_content", blob)
            if blob and sent is None:
                report.lost(
                    f"$.input[{x}].encrypted_content",
                    f"encrypted_content {replay.digest(blob)} left out",
                    restore,
                )
            elif blob and sent != blob:
                report.altered(
                    f"$.input[{x}].encrypted_content",
                    f"encrypted_content {replay.digest(blob)} went back as {replay.digest(sent)}",
                    restore,
                )


#: the fields of an answer's output items a stateless replay carries back unchanged (§1.4)
_REPLAYED = {
    "reasoning": ("type", "id", "summary", "encrypted_content"),
    "function_call": ("type", "id", "call_id", "name", "arguments"),
}

_REASONING = ReasoningUnits(frozenset({"reasoning"}))  # reasoning items are units of their own (§1.4)
ROOM = ResponsesRoom()
