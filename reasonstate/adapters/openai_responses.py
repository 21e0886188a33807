"""OpenAI Responses API adapter (protocols.md §1): sans-I/O encode/decode plus the SDK call.

Two modes, chosen by the ``store`` request option:

* **stateless** (default, ``store=False``; protocols.md §1.4 B): every request carries the whole
  transcript. ``include=["reasoning.encrypted_content"]`` is always asked for (without it a stateless
  replay is the 404 of openai/openai-agents-python#919); every output item goes back verbatim, in its
  original order — ``reasoning`` with its ``encrypted_content`` and ``summary``, ``function_call`` with its
  ``arguments`` string exactly as received, ``message`` — followed by one ``function_call_output`` per
  ``call_id`` in the model's declared order.
* **stateful** (``store=True``; §1.4 A): ``previous_response_id`` plus only the new items. The chain is used
  only when the server is known to hold exactly what a full replay would send:
  ``units[:len(chain)] == chain`` where ``chain = records[-1].blocks + (digests of the last step's output
  items)``. Otherwise — after :meth:`OpenAIResponsesAdapter.restored`, after a model switch, when the last
  step has no response id, after a 404 for the previous response, or when a policy rewrote the replayed
  history — the request is a full replay (still ``store=True``) and the trace gets a ``chain.fallback``
  event naming the reason. ``encrypted_content`` is asked for in this mode too, so a fallback can always
  replay reasoning statelessly.

  A 404 ``previous_response_not_found`` (the stored response expired or was deleted) raises
  :class:`PreviousResponseNotFound`; the session is unchanged and the adapter forgets the chain, so the
  retry is a traced full replay. A retry therefore does *not* send the same bytes — on purpose.

Rules encoded here (protocols.md §1.4 B):

* pairing: a reasoning item goes back only immediately followed by the item that followed it (B.1); a
  reasoning item with no non-reasoning item after it in its own output is never replayed (B.6,
  inspect_ai PR #1990). When a step's reasoning is not sent (a policy dropped it, it was produced by
  another model, or it cannot be replayed), the items it produced are replayed *id-less* (``id`` removed,
  and ``status`` for a message; ``call_id`` kept), so no item refers to a reasoning item that is absent
  (B.2; vercel/ai c883c47, pydantic-ai thinking.md ``openai_send_reasoning_ids=False``);
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

Cache prediction (§1.5): OpenAI caches every earlier prompt of the same model and key, and reports
``0`` under 1024 matched tokens, else the largest ``1024 + 128k <= matched``. ``matched`` is the longest
token prefix shared with any earlier prompt. It is known exactly when the longest unit prefix ``M`` this
request shares with an earlier request is itself an earlier request's whole prompt (whose
``input_tokens`` the vendor reported) and no earlier request diverges *inside* unit ``M`` (a partial item
match is unknowable). Otherwise the answer is ``None``, unless every earlier prompt had fewer than 1024
tokens (then ``0``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from reasonstate.adapters.base import CallResult, DecodedStep, ProtocolRules, VendorRequest
from reasonstate.adapters.wire import (
    int_field,
    parse_json_body,
    status_message,
    translated_errors,
    unit_digest,
)
from reasonstate.cache.guard import RECENT, divergence
from reasonstate.errors import (
    ContinuationMismatch,
    MalformedResponse,
    StreamInterrupted,
    VendorError,
)
from reasonstate.prefix import Prefix
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
    TurnView,
    Usage,
    digest_of,
)

__all__ = [
    "CHAIN_FALLBACK",
    "ENCRYPTED_CONTENT",
    "INPUT_TRANSFORMATIONS",
    "REASONING_UNREPLAYABLE",
    "OpenAIResponsesAdapter",
    "PreviousResponseNotFound",
    "ResponsesRules",
    "openai_cached_tokens",
]

VENDOR = "openai"
API = "responses"
ENCRYPTED_CONTENT = "reasoning.encrypted_content"
#: trace event kinds this adapter adds
CHAIN_FALLBACK = "chain.fallback"
INPUT_TRANSFORMATIONS = "input.transformations"
REASONING_UNREPLAYABLE = "reasoning.unreplayable"
#: what an item produced after a dropped reasoning item loses when replayed id-less (§1.4 B.2; a message
#: without ``id`` is an EasyInputMessage, which has no ``status``)
_ID_KEYS: dict[str, tuple[str, ...]] = {"function_call": ("id",), "message": ("id", "status")}
_MIN_CACHED = 1024
_CACHE_STEP = 128


class PreviousResponseNotFound(VendorError):
    """404 ``previous_response_not_found``: the stored chain is gone (expired, deleted, other project).

    Nothing was committed; the adapter forgets the chain, so retrying makes a full replay (traced as
    ``chain.fallback`` with reason ``expired``).
    """


def openai_cached_tokens(matched_tokens: int) -> int:
    """OpenAI's reported ``cached_tokens`` for a matched prefix (protocols.md §1.5)."""
    if matched_tokens < _MIN_CACHED:
        return 0
    return _MIN_CACHED + _CACHE_STEP * ((matched_tokens - _MIN_CACHED) // _CACHE_STEP)


@attrs.frozen(slots=True)
class ResponsesRules(ProtocolRules):
    """OpenAI Responses rules: the base clamp, plus — a step holding an output item of a type we do not
    model keeps its reasoning (we cannot replay that item id-less, and it may need its reasoning item:
    protocols.md §1.4 B.2)."""

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
    """One input item: the JSON value sent (shared, read-only) and its unit digest."""

    value: Any
    unit: str


@attrs.frozen(slots=True)
class _TurnEncoding:
    """A turn's input items, shared read-only between requests while the turn stays the same."""

    turn: Turn
    model: str
    by_reference: bool
    items: tuple[_Item, ...]
    replayed: tuple[Continuation, ...]
    withheld: tuple[Continuation, ...]
    seal: str

    def verify(self) -> None:
        """Re-check every replayed payload: one hash per turn, per-payload checks only on a mismatch."""
        if digest_of(b"".join(c.payload for c in self.replayed)) != self.seal:
            for c in self.replayed:
                c.verify()
            raise ContinuationMismatch("a replayed payload changed since capture")


class OpenAIResponsesAdapter:
    """The Responses API codec. ``strict_tools`` (optional) sets ``strict`` on every function tool."""

    vendor = VENDOR
    api = API

    def __init__(self, *, strict_tools: bool | None = None) -> None:
        self._strict = strict_tools
        self.rules: ProtocolRules = ResponsesRules(
            vendor=VENDOR, api=API, reasoning_only_steps_keep_reasoning=False
        )
        self._memo: dict[int, _TurnEncoding] = {}
        # response ids this process saw created with store=True (a chain can start from them), and the
        # ones the server answered 404 for
        self._stored: set[str] = set()
        self._expired: set[str] = set()
        self._restored = False

    # -- encode ------------------------------------------------------------------------------------------
    def encode(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        options: Mapping[str, Any],
        records: Sequence[ExecutionRecord],
    ) -> VendorRequest:
        """Build the ``responses.create`` kwargs for the next call on ``history``."""
        store = options.get("store", False) is True
        cache_key = self._cache_key(prefix, options, records)
        tools: list[dict[str, Any]] = []
        for t in prefix.tools:
            tool: dict[str, Any] = {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            }
            if self._strict is not None:
                tool["strict"] = self._strict
            tools.append(tool)
        units: list[str] = [unit_digest({"model": model, "prompt_cache_key": cache_key})]
        if prefix.system:
            units.append(unit_digest({"instructions": prefix.system}))
        if tools:
            units.append(unit_digest({"tools": tools}))
        n_head = len(units)
        items: list[_Item] = []
        for user, answer in prefix.few_shots:
            items.append(_message_item("user", user))
            items.append(_message_item("assistant", answer))
        withheld: list[Continuation] = []
        memo: dict[int, _TurnEncoding] = {}
        for turn in history.turns:
            encoded = self._memo.get(id(turn))
            if (
                encoded is None
                or encoded.turn is not turn
                or encoded.model != model
                or encoded.by_reference != store
            ):
                encoded = _encode_turn(turn, model, by_reference=store)
            else:
                encoded.verify()
            if turn.closed:  # a closed turn's view is frozen: its encoding is too
                memo[id(turn)] = encoded
            items.extend(encoded.items)
            withheld.extend(encoded.withheld)
        self._memo = memo
        units.extend(i.unit for i in items)

        events: list[tuple[str, Mapping[str, Any]]] = []
        previous: str | None = None
        start = 0
        if store:
            last = _last_step(history)
            if last is not None:
                base, reason = self._chain(last, model, units, records)
                if reason is None:
                    previous, start = last.response_id, base - n_head
                else:
                    events.append(
                        (CHAIN_FALLBACK, {"reason": reason, "previous_response_id": last.response_id})
                    )
        kwargs: dict[str, Any] = {"model": model}
        if prefix.system:
            kwargs["instructions"] = prefix.system
        if tools:
            kwargs["tools"] = tools
        kwargs["input"] = [i.value for i in items[start:]]
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
            kwargs=kwargs, units=tuple(units), withheld=tuple(withheld), events=tuple(events)
        )

    @staticmethod
    def _cache_key(
        prefix: Prefix, options: Mapping[str, Any], records: Sequence[ExecutionRecord]
    ) -> str | None:
        if "prompt_cache_key" in options:
            key = options["prompt_cache_key"]
            return None if key is None else str(key)
        fingerprint = records[0].prefix_fingerprint if records else prefix.fingerprint
        return "rs-" + fingerprint.removeprefix("sha256:")[:32]

    def _chain(
        self, last: Step, model: str, units: Sequence[str], records: Sequence[ExecutionRecord]
    ) -> tuple[int, str | None]:
        """``(units the server already holds, None)`` when ``previous_response_id`` can be used, else
        ``(0, reason)``."""
        rid = last.response_id
        if rid is None:
            return 0, "no_response_id"
        if rid in self._expired:
            return 0, "expired"
        if rid not in self._stored:
            return 0, "restored" if self._restored else "not_stored"
        if last.model != model:
            return 0, "model_switch"
        if not records:
            return 0, "not_stored"
        chain = (*records[-1].blocks, *(c.digest for c in last.continuation))
        if len(units) < len(chain) or tuple(units[: len(chain)]) != chain:
            return 0, "history_rewritten"
        return len(chain), None

    # -- cache prediction --------------------------------------------------------------------------------
    def predict_cache_read(self, request: VendorRequest, records: Sequence[ExecutionRecord]) -> int | None:
        """``cached_tokens`` as OpenAI will report it, or None when not knowable (module doc, §1.5)."""
        units = tuple(request.units)
        same = [r for r in records[-RECENT:] if r.blocks and units and r.blocks[0] == units[0]]
        if not same:
            return 0
        shared: list[int] = []
        for r in same:
            d = divergence(units, r.blocks)
            shared.append(len(r.blocks) if d is None else d)
        m = max(shared)
        known = next(
            (r.usage.prompt_tokens for r, s in zip(same, shared, strict=True) if s == len(r.blocks) == m),
            None,
        )
        inside = any(s == m < len(r.blocks) for r, s in zip(same, shared, strict=True)) and m < len(units)
        if known is None or inside:
            # nothing can share more tokens than it had
            return 0 if max(r.usage.prompt_tokens for r in same) < _MIN_CACHED else None
        return openai_cached_tokens(known)

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, response: Any, model: str) -> DecodedStep:
        """Split a ``response`` object (the JSON as received) into the four layers' material.

        Payload provenance is the *requested* model: OpenAI echoes a dated snapshot name
        (``o3`` → ``o3-2025-04-16``), and what later requests are compared against is the requested name.
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
                    model=model,
                    kind=kind,
                    value=item,
                    model_bound=kind == "reasoning",
                )
            )
        rid = response.get("id")
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
        return DecodedStep(
            parts=tuple(parts),
            continuation=tuple(payloads),
            stop_reason=stop,
            usage=_usage(response.get("usage")),
            model=model,
            response_id=rid if isinstance(rid, str) else None,
            events=tuple(events),
        )

    def restored(self) -> None:
        """The session was restored: no stored response is known to still exist (next request replays)."""
        self._stored.clear()
        self._restored = True

    # -- I/O -----------------------------------------------------------------------------------------------
    def call(self, client: Any, request: VendorRequest, stream: bool) -> CallResult:
        """One ``responses.create`` call: the response JSON as received, and the bytes the SDK sent."""
        import openai

        kwargs = dict(request.kwargs)
        status_error = functools.partial(self._status_error, kwargs=kwargs)
        with translated_errors(openai, "OpenAI", stream, status_error):
            if stream:
                raw = client.responses.with_raw_response.create(**kwargs, stream=True)
                http = raw.http_response
                try:
                    final = _final_response(http.iter_lines())
                finally:
                    http.close()
                result = CallResult(final, http.request.content)
            else:
                raw = client.responses.with_raw_response.create(**kwargs)
                body = raw.http_response.content
                result = CallResult(
                    parse_json_body(body, "OpenAI response"), raw.http_response.request.content
                )
        self._note_stored(kwargs, result.response)
        return result

    async def acall(self, client: Any, request: VendorRequest, stream: bool) -> CallResult:
        """The async twin of :meth:`call`."""
        import openai

        kwargs = dict(request.kwargs)
        status_error = functools.partial(self._status_error, kwargs=kwargs)
        with translated_errors(openai, "OpenAI", stream, status_error):
            if stream:
                raw = await client.responses.with_raw_response.create(**kwargs, stream=True)
                http = raw.http_response
                try:
                    reader = _SSEReader()
                    async for line in http.aiter_lines():
                        reader.feed(line)
                    final = reader.finish()
                finally:
                    await http.aclose()
                result = CallResult(final, http.request.content)
            else:
                raw = await client.responses.with_raw_response.create(**kwargs)
                body = raw.http_response.content
                result = CallResult(
                    parse_json_body(body, "OpenAI response"), raw.http_response.request.content
                )
        self._note_stored(kwargs, result.response)
        return result

    def _note_stored(self, kwargs: Mapping[str, Any], response: Any) -> None:
        if (
            kwargs.get("store") is True
            and isinstance(response, Mapping)
            and isinstance(response.get("id"), str)
        ):
            self._stored.add(response["id"])

    def _status_error(self, exc: Any, kwargs: Mapping[str, Any]) -> VendorError:
        body = getattr(exc, "body", None)
        message = status_message("OpenAI", exc)
        previous = kwargs.get("previous_response_id")
        code, param = getattr(exc, "code", None), getattr(exc, "param", None)
        gone = code == "previous_response_not_found" or param == "previous_response_id"
        if exc.status_code == 404 and previous is not None and gone:
            # the server no longer holds the chain: forget it, so the retry replays in full (traced)
            self._stored.discard(previous)
            self._expired.add(previous)
            return PreviousResponseNotFound(message, status=404, body=body)
        return VendorError(message, status=exc.status_code, body=body)


# -- encoding helpers ---------------------------------------------------------------------------------------


def _message_item(role: str, text: str) -> _Item:
    value = {"role": role, "content": text}
    return _Item(value, unit_digest(value))


def _last_step(history: History) -> Step | None:
    for turn in reversed(history.turns):
        if turn.steps:
            return turn.steps[-1]
    return None


def _encode_turn(turn: Turn, model: str, *, by_reference: bool) -> _TurnEncoding:
    """The turn's items: its user message, each step's output items, each step's tool outputs.

    ``by_reference``: reasoning items without ``encrypted_content`` may be sent (the server resolves them
    from storage, ``store=True`` only: §1.4 B.5).
    """
    items: list[_Item] = [_message_item("user", turn.user)]
    replayed: list[Continuation] = []
    withheld: list[Continuation] = []
    last = len(turn.steps) - 1
    for i, step in enumerate(turn.steps):
        keep = turn.view is None or turn.view.keep_reasoning[i]
        summary = turn.view.summary if turn.view is not None and i == last else None
        if summary is not None:
            items.append(_message_item("assistant", f"(Summary of my earlier reasoning: {summary})"))
        items.extend(_step_items(step, keep, model, by_reference, replayed, withheld))
        for r in step.tool_results:
            value = {"type": "function_call_output", "call_id": r.call_id, "output": r.content}
            items.append(_Item(value, unit_digest(value)))
    seal = digest_of(b"".join(c.payload for c in replayed))
    return _TurnEncoding(turn, model, by_reference, tuple(items), tuple(replayed), tuple(withheld), seal)


def _step_items(
    step: Step,
    keep: bool,
    model: str,
    by_reference: bool,
    replayed: list[Continuation],
    withheld: list[Continuation],
) -> Iterable[_Item]:
    payloads = step.continuation
    reasoning_absent = False  # the latest reasoning item of this step is not being sent
    for k, c in enumerate(payloads):
        if not c.replayable_to(VENDOR, API, model):
            withheld.append(c)
            if c.kind == "reasoning":
                reasoning_absent = True
            continue
        value = c.shared_value()  # digest-verified; never mutated (id-less copies are new dicts)
        if c.kind == "reasoning":
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


# -- decoding helpers ---------------------------------------------------------------------------------------


def _part(kind: str, item: Mapping[str, Any], i: int) -> Part:
    if kind == "reasoning":
        summary = item.get("summary", [])
        if not isinstance(summary, list):
            raise MalformedResponse(f"output[{i}]: reasoning summary is not a list")
        content = item.get("content")
        raw = [p.get("text") for p in content if isinstance(p, Mapping)] if isinstance(content, list) else []
        shown = [p.get("text") for p in summary if isinstance(p, Mapping)]
        texts = [t for t in (raw or shown) if isinstance(t, str)]
        text = "\n\n".join(texts)
        return ReasoningPart(text=text, redacted=not text, continuation=i)
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
            raise MalformedResponse(f"output[{i}]: function_call needs call_id, name and an arguments string")
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        # raw_arguments is the truth (replayed byte for byte); parsed is a convenience for handlers
        return ToolCallPart(
            id=call_id,
            name=name,
            arguments=parsed if isinstance(parsed, dict) else {},
            raw_arguments=arguments,
            continuation=i,
        )
    if kind == "message":
        content = item.get("content")
        if not isinstance(content, list):
            raise MalformedResponse(f"output[{i}]: message without a content list")
        text = "".join(
            str(p.get("text") if p.get("type") == "output_text" else p.get("refusal", ""))
            for p in content
            if isinstance(p, Mapping)
        )
        return TextPart(text=text, continuation=i)
    return OpaquePart(type=kind, continuation=i)


def _usage(raw: Any) -> Usage:
    """``input_tokens`` includes cached (and cache-written) tokens; Usage keeps them disjoint (§1.5)."""
    if not isinstance(raw, Mapping):
        return Usage()
    details = raw.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    out_details = raw.get("output_tokens_details")
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, Mapping) else None
    cached = int_field(details.get("cached_tokens"))
    written = int_field(details.get("cache_write_tokens"))
    return Usage(
        uncached_input=max(0, int_field(raw.get("input_tokens")) - cached - written),
        cache_read=cached,
        cache_write=written,
        output=int_field(raw.get("output_tokens")),
        reasoning=reasoning if isinstance(reasoning, int) else None,
    )


class _SSEReader:
    """Rebuilds the final ``response`` object from the SSE stream, in wire key order (protocols.md §1.6).

    The output items are taken from ``response.output_item.done`` (the ``added`` copy of a reasoning item
    "may be incomplete": §1.2), the rest from ``response.completed``/``response.incomplete``; the JSON is
    parsed as sent, so a streamed session holds the same payload bytes as a non-streamed one.
    """

    def __init__(self) -> None:
        self._data: list[str] = []
        self._items: dict[int, Any] = {}
        self._terminal: dict[str, Any] | None = None

    def feed(self, line: str) -> None:
        if line == "":
            self._dispatch()
        elif line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)

    def _dispatch(self) -> None:
        if not self._data:
            return
        text, self._data = "\n".join(self._data), []
        try:
            event = json.loads(text)
        except ValueError as exc:
            raise MalformedResponse(f"stream event is not JSON: {text[:80]!r}") from exc
        if not isinstance(event, dict):
            raise MalformedResponse("stream event is not an object")
        kind = event.get("type")
        if kind == "response.output_item.done" and isinstance(event.get("output_index"), int):
            self._items[event["output_index"]] = event.get("item")
        elif kind in ("response.completed", "response.incomplete") and isinstance(
            event.get("response"), dict
        ):
            self._terminal = event["response"]
        elif kind == "response.failed":
            response = event.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            raise VendorError(f"OpenAI response failed: {error}", body=error)
        elif kind == "error":
            raise VendorError(f"OpenAI stream error: {event.get('message')}", body=event)

    def finish(self) -> dict[str, Any]:
        self._dispatch()
        if self._terminal is None:
            raise StreamInterrupted("the stream ended before response.completed")
        output = self._terminal.get("output")
        if isinstance(output, list) and output:
            merged = [self._items.get(i, item) for i, item in enumerate(output)]
        else:
            merged = [self._items[i] for i in sorted(self._items)]
        return {**self._terminal, "output": merged}


def _final_response(lines: Iterable[str]) -> dict[str, Any]:
    reader = _SSEReader()
    for line in lines:
        reader.feed(line)
    return reader.finish()
