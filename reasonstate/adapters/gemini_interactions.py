"""Gemini **Interactions API** codec (docs/protocols.md §5.6, google-genai 3.x ``client.interactions``).

``encode`` gives the keyword arguments of ``client.interactions.create(model=..., input=[steps], ...)``;
``decode`` reads the ``Interaction`` JSON exactly as received (the transport captures it from the client's
own HTTP exchange, as for generateContent).

Two modes, chosen by the ``store`` session option (the server's default is ``store: true``, §5.6, so this
codec always sends the flag):

* **stateless** (default, ``store=False``): every request carries the whole transcript as typed steps — a
  ``user_input`` step per user message, each model step as received (``thought`` with its ``signature``
  and ``summary``, ``model_output``, ``function_call``), one ``function_result`` per call in the model's
  declared order. A thought step goes back verbatim, in place (§5.6: the current turn's function calls are
  validated against it);
* **stateful** (``store=True``): ``previous_interaction_id`` (the last interaction's id) plus only the new
  steps, used only when the server is known to hold exactly what a full replay would send (the same rule as
  Responses' ``previous_response_id``, §1.4 A): same model, the last step stored and answered with an id,
  the replayed history unchanged. Otherwise the request is a full replay (still ``store=True``) and the
  trace gets a ``chain.fallback`` event naming the reason. The interaction id is continuation state bound
  to its model (§5.6): after a model switch it is never sent.

Bindings: a ``thought`` step (and a step of a type this codec does not model) is model-bound; a
``model_output`` and a ``function_call`` are visible history any model may read. A step whose payloads
may not be sent (another vendor, API — generateContent included — or model) is rendered from its
canonical parts (text as ``model_output``, calls as ``function_call`` with their ids and arguments); its
reasoning is never disguised as a thought. Inside the open chain such a step is refused with
:class:`~reasonstate.errors.ContinuationMismatch` before anything is sent.

Usage (§5.6): ``total_input_tokens`` includes ``total_cached_tokens``; output is ``total_output_tokens +
total_thought_tokens``. Prefix units: the model, ``system_instruction``, the tool list, then one per step
of the *full* transcript (in both modes: a chained request is the same prompt server-side).
"""

from __future__ import annotations

import functools
import json
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
    in_wire_order,
    json_object,
    open_turn_encoding,
    part_strings,
    payload_of,
    summary_note,
    unit_digest,
)
from reasonstate.adapters.declared import object_parameters, refuse_foreign
from reasonstate.adapters.replay import ReplayFinding, Source
from reasonstate.cache.divergence import (
    ReasoningUnits,
    Unit,
    View,
    ViewBuilder,
    compact_key,
    listed,
    model_name,
    request_body,
)
from reasonstate.cache.rules import CacheRules
from reasonstate.errors import InvalidOption, MalformedResponse, StreamInterrupted, VendorError
from reasonstate.prefix import Prefix, Tool
from reasonstate.state import (
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
    as_records,
    thaw,
)
from reasonstate.state.continuation import FIRST_PARTY, sharing
from reasonstate.state.units import UnitBuffer, as_units

__all__ = [
    "CHAIN_FALLBACK",
    "INTERACTIONS",
    "ROOM",
    "InteractionsAdapter",
    "InteractionsAssembler",
    "InteractionsRoom",
    "PreviousInteractionNotFound",
]

#: this API's prefix cache: Gemini implicit caching, the same rules and minimums as generateContent's
#: (docs/protocols.md §5.3, §5.6), by step
INTERACTIONS = CacheRules(
    scheme="items",
    source="docs/protocols.md §5.6",
    min_tokens=4096,
    min_tokens_by_model=((("gemini-2.5",), 2048),),
)

VENDOR = "google"
API = "interactions"
CHAIN_FALLBACK = "chain.fallback"
_RULE = "docs/protocols.md §5.6"
#: the step kinds any model may read when their payload cannot go back (their canonical parts say it all)
_UNBOUND_KINDS = frozenset({"model_output", "function_call"})
#: what the session builds itself: the transcript, the prefix and the chain are its state; one SDK call
#: must be one HTTP exchange (automatic continuation would merge several answers)
_OWNED = frozenset(
    {"input", "system_instruction", "tools", "previous_interaction_id", "automatic_continuation", "agent"}
)
#: the options ``interactions.create`` takes besides those (google-genai 3.6.1 ``CreateModelInteraction``)
_OPTIONS = frozenset(
    {
        "store",
        "generation_config",
        "safety_settings",
        "service_tier",
        "response_format",
        "response_mime_type",
        "response_modalities",
        "labels",
        "background",
        "stream",
        "webhook_config",
    }
)


class PreviousInteractionNotFound(VendorError):
    """404 for the ``previous_interaction_id`` sent: the stored interaction is gone. Nothing was committed;
    the session never refers to it again, so a retry is a full replay (``chain.fallback`` ``expired``)."""

    def __init__(self, message: str, *, response_id: str, status: int | None = 404, body: object = None):
        super().__init__(message, status=status, body=body)
        self.response_id = response_id


def _previous_lost(exc: Any, request: VendorRequest) -> VendorError | None:
    previous = request.kwargs.get("previous_interaction_id")
    if getattr(exc, "status_code", None) == 404 and isinstance(previous, str):
        return PreviousInteractionNotFound(
            f"Gemini interactions 404: {exc}", response_id=previous, body=getattr(exc, "body", None)
        )
    return None


@attrs.frozen(slots=True)
class InteractionsRules(ProtocolRules):
    """The Interactions rules, plus the options this codec cannot honour (refused at construction)."""

    def refuse(self, model: str, options: Mapping[str, Any]) -> str | None:
        owned = sorted(k for k in options if k in _OWNED)
        if owned:
            return f"{owned} are built by the session (transcript, prefix and chain are its state)"
        if options.get("background"):
            return "background=True returns before the answer exists; a session waits for its answer"
        unknown = sorted(k for k in options if k not in _OPTIONS)
        if unknown:
            return f"{unknown} are not options of google-genai interactions.create (docs/protocols.md §5.6)"
        return None


@attrs.frozen(slots=True)
class _Item:
    value: Any
    unit: str


@attrs.frozen(slots=True)
class _TurnEncoding:
    items: tuple[_Item, ...]
    withheld: tuple[Continuation, ...]
    seal: Seal

    def verify(self) -> None:
        self.seal.check()

    @property
    def values(self) -> tuple[Any, ...]:
        return tuple(i.value for i in self.items)

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(i.unit for i in self.items)


_EMPTY_RUN = ListRun()


# -- stream assembly (docs/protocols.md §5.6) -----------------------------------------------------------

#: the key order of an Interaction and of its steps as the non-streamed answer writes them
_ORDER = ("id", "status", "model", "previous_interaction_id", "steps", "usage")
_STEP_ORDER: dict[str, tuple[str, ...]] = {
    "thought": ("type", "signature", "summary"),
    "model_output": ("type", "content"),
    "function_call": ("type", "id", "name", "arguments"),
}


class InteractionsAssembler(StreamAssembler):
    """The ``Interaction`` of a ``stream: true`` answer (docs/protocols.md §5.6).

    ``interaction.created`` gives the head, each ``step.start`` opens step ``index`` (its fields as sent),
    ``step.delta`` adds to it (``text`` pieces to a model_output's last text content, ``thought_summary``
    pieces to a thought's summary, ``thought_signature`` sets its ``signature``, ``arguments_delta``
    pieces to a call's argument string, parsed at ``step.stop``), ``interaction.completed`` gives the
    status and usage. Invariant: ``finish(stream(r)) == r`` in the wire key order (:data:`_ORDER`,
    :data:`_STEP_ORDER`). An ``error`` event → :class:`VendorError`; no ``interaction.completed`` →
    :class:`StreamInterrupted`."""

    def __init__(self) -> None:
        super().__init__()
        self._head: dict[str, Any] = {}
        self._steps: dict[int, dict[str, Any]] = {}
        self._arguments: dict[int, str] = {}
        self._done: dict[str, Any] | None = None
        self._shown_calls = 0

    def _complete(self) -> bool:
        return self._done is not None

    def _event(self, event: SSEEvent) -> None:
        data = json_object(event, "stream event")
        kind = data.get("event_type")
        if kind == "interaction.created" and isinstance(data.get("interaction"), Mapping):
            self._head = dict(data["interaction"])
        elif kind == "step.start" and isinstance(data.get("index"), int):
            step = data.get("step")
            if not isinstance(step, Mapping):
                raise MalformedResponse("a step.start event without a step")
            self._steps[data["index"]] = dict(step)
            if step.get("type") == "function_call":
                self._call(step)
        elif kind == "step.delta" and isinstance(data.get("index"), int):
            self._delta(data["index"], data.get("delta"))
        elif kind == "step.stop" and data.get("index") in self._arguments:
            index = data["index"]
            try:
                self._steps[index]["arguments"] = json.loads(self._arguments.pop(index))
            except ValueError as exc:
                raise MalformedResponse("streamed function_call arguments are not JSON") from exc
        elif kind == "interaction.completed" and isinstance(data.get("interaction"), Mapping):
            self._done = dict(data["interaction"])
        elif kind == "error":
            raise VendorError(f"Gemini interactions stream error: {data.get('error')}", body=data)

    def _call(self, step: Mapping[str, Any]) -> None:
        args = step.get("arguments")
        self._emit(
            "tool_call",
            json.dumps(args, ensure_ascii=False, separators=(",", ":")) if isinstance(args, Mapping) else "",
            call_id=step.get("id") if isinstance(step.get("id"), str) else None,
            name=step.get("name") if isinstance(step.get("name"), str) else None,
            index=self._shown_calls,
        )
        self._shown_calls += 1

    def _delta(self, index: int, delta: Any) -> None:
        step = self._steps.get(index)
        if step is None or not isinstance(delta, Mapping):
            raise MalformedResponse(f"a step.delta for step {index} that never started")
        kind = delta.get("type")
        if kind == "thought_signature":
            step["signature"] = delta.get("signature")
        elif kind == "thought_summary":
            content = delta.get("content")
            if isinstance(content, Mapping) and isinstance(content.get("text"), str):
                summary = step.setdefault("summary", [])
                if summary and summary[-1].get("type") == "text":
                    summary[-1]["text"] += content["text"]
                else:
                    summary.append(dict(content))
                self._emit("reasoning", content["text"])
        elif kind == "text" and isinstance(delta.get("text"), str):
            contents = step.setdefault("content", [])
            if contents and contents[-1].get("type") == "text":
                contents[-1]["text"] += delta["text"]
            else:
                contents.append({"type": "text", "text": delta["text"]})
            self._emit("text", delta["text"])
        elif kind == "arguments_delta" and isinstance(delta.get("arguments"), str):
            self._arguments[index] = self._arguments.get(index, "") + delta["arguments"]

    def _result(self) -> dict[str, Any]:
        if self._done is None:
            raise StreamInterrupted("the stream ended before interaction.completed")
        steps = []
        for index in sorted(self._steps):
            step = self._steps[index]
            if step.get("type") == "thought":
                step.setdefault("summary", [])
            steps.append(in_wire_order(step, _STEP_ORDER.get(str(step.get("type")), ("type",))))
        return in_wire_order({**self._head, **self._done, "steps": steps}, _ORDER)


class InteractionsAdapter:
    """The Interactions codec for ``google.genai.Client`` (sync ``client.interactions``, async
    ``client.aio.interactions``). ``min_cacheable`` overrides the implicit-cache minimum prompt length."""

    vendor = VENDOR
    api = API
    endpoint = Endpoint(
        sdk="google.genai.interactions",
        resource=("interactions",),
        label="Gemini interactions",
        assembler=InteractionsAssembler,
        status_error=_previous_lost,
    )

    def __init__(self, *, min_cacheable: int | None = None, platform: str = FIRST_PARTY) -> None:
        #: the Gemini API (first-party) or ``"vertex"`` (Vertex AI serves the Interactions API too,
        #: docs/protocols.md §5.6): thought signatures go back only to the platform that made them
        self.platform = platform
        cache = INTERACTIONS
        if min_cacheable is not None:
            cache = attrs.evolve(cache, min_tokens=min_cacheable, min_tokens_by_model=())
        self.cache = cache
        self.rules: ProtocolRules = InteractionsRules(vendor=VENDOR, api=API)

    def check_call(self, client: Any, model: str, options: Mapping[str, Any], tools: Sequence[Tool]) -> None:
        """Another vendor's model id, an option ``interactions.create`` does not take, a tool whose
        parameters are not an object schema: refused before any request (docs/protocols.md §9)."""
        refuse_foreign(client, model, "gemini", "interactions")
        reason = self.rules.refuse(model, options)
        if reason is not None:
            raise InvalidOption(reason)
        store = options.get("store")
        if store is not None and not isinstance(store, bool):
            raise InvalidOption("store= must be a bool (docs/protocols.md §5.6)")
        object_parameters(tools, "an Interactions function tool's parameters", _RULE)

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
        """Build the ``interactions.create`` kwargs for the next call on ``history``."""
        store = options.get("store", False) is True
        tools = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.offered_parameters,
            }
            for t in prefix.tools
        ]
        units = UnitBuffer([unit_digest({"model": model})])
        if prefix.system:
            units.append(unit_digest({"system_instruction": prefix.system}))
        if tools:
            units.append(unit_digest({"tools": tools}))
        n_head = len(units)
        values: list[Any] = []
        for user, answer in prefix.few_shots:
            for item in (_user_step(user), _output_step(answer)):
                values.append(item.value)
                units.append(item.unit)
        closed = history.turns[:-1] if history.open_turn is not None else history.turns
        memo = encodings if encodings is not None else Encodings()

        platform = self.platform

        def encode(turn: Turn) -> _TurnEncoding:
            return _encode_turn(turn, model=model, platform=platform)

        run = closed_run(closed, (API, "run", model, platform), encode, _EMPTY_RUN, memo)
        run.check()
        values.extend(run.values)
        units.extend_packed(*run.unit_raw())  # packed, joined at C speed (issue 21)
        withheld: list[Continuation] = list(run.withheld)
        if history.open_turn is not None:
            build = functools.partial(_encode_turn, model=model, platform=platform)
            encoded = open_turn_encoding(history.turns[-1], build, model, _RULE)
            values.extend(encoded.values)
            units.extend(encoded.units)
            withheld.extend(encoded.withheld)
        request_units = units.done()
        events: list[tuple[str, Mapping[str, Any]]] = []
        previous: str | None = None
        start = 0
        if store:
            last = _last_step(history)
            if last is not None:
                base, reason = _chain(last, model, request_units, records, lost_responses)
                if reason is None:
                    previous, start = last.response_id, base - n_head
                else:
                    events.append(
                        (CHAIN_FALLBACK, {"reason": reason, "previous_interaction_id": last.response_id})
                    )
        kwargs: dict[str, Any] = {"model": model, "input": values[start:]}
        if prefix.system:
            kwargs["system_instruction"] = prefix.system
        if tools:
            kwargs["tools"] = tools
        if previous is not None:
            kwargs["previous_interaction_id"] = previous
        kwargs["store"] = store
        for key, value in options.items():
            if key not in ("store", "stream"):
                kwargs[key] = value
        return VendorRequest(
            kwargs=kwargs,
            units=request_units,
            model=model,
            prefix_units=n_head,
            withheld=tuple(withheld),
            events=tuple(events),
        )

    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        """Split an ``Interaction`` (the JSON as received) into the layers' material; payloads bound to the
        requested model. User and function-result steps echoed back are not the model's: skipped."""
        if not isinstance(response, Mapping) or not isinstance(response.get("steps"), list):
            raise MalformedResponse("Gemini interaction has no steps list")
        status = response.get("status")
        if status == "failed":
            raise VendorError(
                f"Gemini interaction failed: {response.get('errors')}", body=response.get("errors")
            )
        parts: list[Part] = []
        payloads: list[Continuation] = []
        for i, step in enumerate(response["steps"]):
            if not isinstance(step, Mapping) or not isinstance(step.get("type"), str):
                raise MalformedResponse(f"steps[{i}] is not a typed step")
            kind = step["type"]
            if kind in ("user_input", "function_result"):
                continue
            parts.append(_part(kind, step, i, len(payloads)))
            payloads.append(
                Continuation.capture(
                    vendor=VENDOR,
                    api=API,
                    model=request.model,
                    kind=kind,
                    value=step,
                    model_bound=kind not in _UNBOUND_KINDS,
                    platform=self.platform,
                )
            )
        iid = response.get("id")
        echoed = response.get("model")
        return DecodedStep(
            parts=tuple(parts),
            continuation=tuple(payloads),
            stop_reason=status if isinstance(status, str) else "unknown",
            usage=_usage(response.get("usage")),
            model=request.model,
            response_id=iid if isinstance(iid, str) else None,
            response_stored=isinstance(iid, str) and request.kwargs.get("store") is True,
            response_model=echoed if isinstance(echoed, str) else None,
        )


# -- encoding helpers ---------------------------------------------------------------------------------------


def _user_step(text: str) -> _Item:
    value = {"type": "user_input", "content": [{"type": "text", "text": text}]}
    return _Item(value, unit_digest(value))


def _output_step(text: str) -> _Item:
    value = {"type": "model_output", "content": [{"type": "text", "text": text}]}
    return _Item(value, unit_digest(value))


def _last_step(history: History) -> Step | None:
    for turn in reversed(history.turns):
        if turn.steps:
            return turn.steps[-1]
    return None


def _chain(
    last: Step,
    model: str,
    units: Sequence[str],
    records: Sequence[ExecutionRecord],
    lost: frozenset[str],
) -> tuple[int, str | None]:
    """``(units the server already holds, None)`` when ``previous_interaction_id`` can be used, else
    ``(0, reason)``: the interaction id is bound to its model (§5.6)."""
    iid = last.response_id
    if iid is None:
        return 0, "no_response_id"
    if iid in lost:
        return 0, "expired"
    if not last.response_stored or not records:
        return 0, "not_stored"
    if last.model != model:
        return 0, "model_switch"
    held = UnitBuffer(as_records(records).newest_units())  # packed as the records keep them (issue 21)
    held.extend([c.digest for c in last.continuation])
    chain = held.done()
    if len(units) < len(chain) or as_units(units[: len(chain)]) != chain:
        return 0, "history_rewritten"
    return len(chain), None


def _encode_turn(turn: Turn, *, model: str, platform: str = FIRST_PARTY) -> _TurnEncoding:
    """The turn's steps: its user input, each model step's steps, each step's function results."""
    items: list[_Item] = [_user_step(turn.user)]
    replayed: list[Continuation] = []
    withheld: list[Continuation] = []
    last = len(turn.steps) - 1
    for i, step in enumerate(turn.steps):
        keep = turn.view is None or turn.view.keep_reasoning[i]
        summary = turn.view.summary if turn.view is not None and i == last else None
        if summary is not None:
            items.append(_output_step(summary_note(summary)))
        items.extend(_step_items(step, keep, model, replayed, withheld, platform))
        for r in step.tool_results:
            value: dict[str, Any] = {"type": "function_result", "call_id": r.call_id, "result": r.content}
            if r.is_error:
                value["is_error"] = True
            items.append(_Item(value, unit_digest(value)))
    return _TurnEncoding(tuple(items), tuple(withheld), Seal.of(replayed))


def _step_items(
    step: Step,
    keep: bool,
    model: str,
    replayed: list[Continuation],
    withheld: list[Continuation],
    platform: str = FIRST_PARTY,
) -> Iterable[_Item]:
    withheld.extend(c for c in step.continuation if not c.replayable_to(VENDOR, API, model, platform))
    for part in step.parts:
        c = payload_of(step, part)
        if c is None or not c.replayable_to(VENDOR, API, model, platform):
            item = _canonical_item(part)
            if item is not None:
                yield item
            continue
        if c.kind == "thought" and not keep:
            continue  # a closed turn's reasoning a policy dropped: the whole thought step (§5.6)
        replayed.append(c)
        # parsed once for the memoized run, sharing the history's strings (issue 21: nothing parsed is kept
        # in the continuation); a plain value
        yield _Item(sharing(c.checked(), part_strings(part)), c.digest)


def _canonical_item(part: Part) -> _Item | None:
    """A part as a step when its payload cannot be sent: text as model_output, a call as function_call
    (no signature rides on a call here, §5.6); reasoning and unknown steps have no canonical form."""
    if isinstance(part, TextPart):
        return _output_step(part.text) if part.text else None
    if isinstance(part, ToolCallPart):
        arguments = part.arguments if isinstance(part.arguments, Mapping) else {}
        value = {"type": "function_call", "id": part.id, "name": part.name, "arguments": thaw(arguments)}
        return _Item(value, unit_digest(value))
    return None


# -- decoding helpers ---------------------------------------------------------------------------------------


def _texts(content: Any, where: str) -> str:
    if not isinstance(content, list):
        raise MalformedResponse(f"{where} is not a list of content")
    texts = []
    for c in content:
        if not isinstance(c, Mapping):
            raise MalformedResponse(f"{where} holds content that is not an object")
        if c.get("type") == "text":
            if not isinstance(c.get("text"), str):
                raise MalformedResponse(f"{where}: a text content without a string text")
            texts.append(c["text"])
    return "".join(texts)


def _part(kind: str, step: Mapping[str, Any], i: int, k: int) -> Part:
    """The canonical part of a model step (``k``: its payload's index), after checking every field that
    goes back verbatim has the type the input schema requires."""
    if kind == "thought":
        signature = step.get("signature")
        if signature is not None and not isinstance(signature, str):
            raise MalformedResponse(f"steps[{i}]: a thought signature is not a string")
        text = _texts(step.get("summary", []), f"steps[{i}].summary")
        return ReasoningPart(text=text, redacted=not text, continuation=k)
    if kind == "model_output":
        return TextPart(text=_texts(step.get("content", []), f"steps[{i}].content"), continuation=k)
    if kind == "function_call":
        call_id, name, arguments = step.get("id"), step.get("name"), step.get("arguments")
        if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, Mapping):
            raise MalformedResponse(f"steps[{i}]: function_call needs an id, a name and an arguments object")
        return ToolCallPart(
            id=call_id,
            name=name,
            arguments=arguments,
            raw_arguments=json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
            continuation=k,
        )
    return OpaquePart(type=kind, continuation=k)


def _usage(raw: Any) -> Usage:
    """``total_input_tokens`` includes ``total_cached_tokens``; Usage keeps them disjoint (§5.6)."""
    if not isinstance(raw, Mapping):
        return Usage()
    cached = count(raw.get("total_cached_tokens"))
    thoughts = raw.get("total_thought_tokens")
    return Usage.of(
        uncached_input=count(raw.get("total_input_tokens")) - cached,
        cache_read=cached,
        output=count(raw.get("total_output_tokens")) + count(thoughts),
        reasoning=thoughts,
    )


# -- the room ---------------------------------------------------------------------------------------------

#: the prompt keys of a request body; ``previous_interaction_id`` names stored prompt (:meth:`continued`),
#: so it is no option whose change breaks the cache
_PROMPT_KEYS = frozenset({"model", "tools", "system_instruction", "input", "previous_interaction_id"})


class InteractionsRoom(Room):
    """The Gemini Interactions API (docs/protocols.md §5.6) as the guard and the commit read it."""

    api: ClassVar[str] = API

    def declared_options(self) -> tuple[str, frozenset[str]]:
        return "google-genai interactions.create", _OPTIONS

    def serves(self, path: str) -> bool:
        return path.endswith("/interactions")

    def view(self, body: Any, model: str | None = None) -> View:
        """One unit per tool, the system instruction, and one per input step (§5.6). A request chained
        with ``previous_interaction_id`` holds only its new steps: the server prepends what it stored."""
        body = request_body(body)
        name = model_name(body, model)
        b = ViewBuilder(API, body, name, name, prompt=_PROMPT_KEYS, sort=True)
        for i, tool in enumerate(listed(body.get("tools"))):
            b.add("tools", f"$.tools[{i}]", tool, tool)
        if body.get("system_instruction") is not None:
            b.add("system", "$.system_instruction", body["system_instruction"], body["system_instruction"])
        b.prefix = len(b.units)
        steps = body.get("input")
        if isinstance(steps, str):
            b.add(
                "history",
                "$.input",
                steps,
                {"type": "user_input", "content": [{"type": "text", "text": steps}]},
            )
        for i, step in enumerate(listed(steps)):
            b.add("history", f"$.input[{i}]", step, step)
        return b.view(_REASONING)

    def continued(self, view: View, body: Mapping[str, Any], recent: Iterable[tuple[View, Any]]) -> View:
        """A request chained with ``previous_interaction_id`` as the server reads it (§5.6): this request's
        head, the stored interaction's history (its request's history units and its answer's steps, the
        newest recent answer with that id), then the new input steps. Unchanged when the guard did not see
        that interaction (the prompt it stands for is unknown)."""
        previous = body.get("previous_interaction_id")
        if not isinstance(previous, str):
            return view
        for earlier, answer in recent:
            if earlier.api != API or not isinstance(answer, Mapping) or answer.get("id") != previous:
                continue
            stored = [
                Unit("history", f"$.previous_interaction_id.steps[{i}]", step, compact_key(step, sort=True))
                for i, step in enumerate(listed(answer.get("steps")))
                if isinstance(step, Mapping) and step.get("type") not in ("user_input", "function_result")
            ]
            units = (
                *view.units[: view.prefix_units],
                *earlier.units[earlier.prefix_units :],
                *stored,
                *view.units[view.prefix_units :],
            )
            return View(API, view.model, units, (), view.prefix_units, _REASONING)
        return view

    def usage(self, raw: Mapping[str, Any]) -> Usage:
        return _usage(raw)

    def cache_rules(self, model: str, raw_usage: Mapping[str, Any] | None) -> CacheRules:
        return INTERACTIONS

    def assembler(self) -> InteractionsAssembler:
        return InteractionsAssembler()

    replay_marker: ClassVar[bytes] = b"function_call"

    def _source(self, response: Mapping[str, Any]) -> Source | None:
        """The answer's thought steps (signature, summary) and function calls (id, name, arguments)."""
        steps = tuple(
            dict(s)
            for s in listed(response.get("steps"))
            if isinstance(s, Mapping) and s.get("type") in ("thought", "function_call")
        )
        calls = [s for s in steps if s["type"] == "function_call" and isinstance(s.get("id"), str)]
        if not calls:
            return None
        payloads = [s.get("signature") or "" for s in steps if s["type"] == "thought"]
        return replay.source(frozenset(c["id"] for c in calls), steps, payloads, positional=False)

    def _check(self, source: Source, body: dict[str, Any], mend: bool, out: list[ReplayFinding]) -> None:
        """Each thought step that came before a replayed call, by its signature: left out or altered. A
        request chained by ``previous_interaction_id`` carries them server-side: nothing to compare."""
        if body.get("previous_interaction_id"):
            return
        steps = body.get("input")
        if not isinstance(steps, list):
            return
        report = replay.Report(out, mend)
        ids = {s.get("id") for s in source.items if s["type"] == "function_call"}
        sent = [x for x, s in enumerate(steps) if isinstance(s, dict) and s.get("type") == "thought"]
        first = next(
            (
                x
                for x, s in enumerate(steps)
                if isinstance(s, dict) and s.get("type") == "function_call" and s.get("id") in ids
            ),
            None,
        )
        if first is None:
            return
        for came in (s for s in source.items if s["type"] == "thought"):
            signature = came.get("signature")
            if any(steps[x].get("signature") == signature for x in sent):
                continue
            before = [x for x in sent if x < first]
            if before and steps[before[-1]].get("summary") == came.get("summary"):
                x = before[-1]
                now = replay.digest(steps[x].get("signature"))
                report.altered(
                    f"$.input[{x}].signature",
                    f"signature {replay.digest(signature)} went back as {now}",
                    functools.partial(steps[x].__setitem__, "signature", signature),
                )
            else:
                report.lost(
                    f"$.input[{first}]",
                    f"thought step {replay.digest(signature)} left out",
                    functools.partial(steps.insert, first, dict(came)),
                )


_REASONING = ReasoningUnits(frozenset({"thought"}))  # thought steps are units of their own (§5.6)
ROOM = InteractionsRoom()
