"""Anthropic Messages API adapter (protocols.md §4): sans-I/O encode/decode plus the SDK call.

Rules encoded here, each from protocols.md §4.3/§4.4:
  * inside the open tool chain every ``thinking``/``redacted_thinking`` block goes back unmodified, in its
    original position, with the ``tool_use`` blocks it preceded (the assistant content is replayed from the
    verbatim continuation payloads, never rebuilt from parsed values);
  * a closed turn's reasoning is replayed or dropped as whole blocks, never edited (signatures fail on any
    edit, re-serialization, reorder or merge: anthropics/anthropic-sdk-python#1598);
  * thinking blocks from another model or vendor are never sent (signatures are model-bound; sending them
    wedges sessions: openclaw/openclaw#120596, anomalyco/opencode#25005); they are withheld and traced;
  * blocks of unknown types are kept verbatim as opaque continuation and replayed to the same model;
  * ``cache_control`` breakpoints (at most 4): end of the stable prefix, the last unit before a divergence
    from the previous request, the previous request's end, and the newest message;
  * a thinking block without a signature (an interrupted stream: pydantic/pydantic-ai#7597) is malformed
    and never committed.
"""

from __future__ import annotations

import bisect
import functools
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from reasonstate.adapters.base import CallResult, DecodedStep, ProtocolRules, VendorRequest
from reasonstate.adapters.wire import int_field, parse_json_body, translated_errors, unit_digest
from reasonstate.cache.guard import RECENT, divergence, predict_breakpoint_cache
from reasonstate.errors import ContinuationMismatch, MalformedResponse, StreamInterrupted
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
    Usage,
    digest_of,
)

__all__ = ["AnthropicAdapter", "min_cacheable_tokens"]

VENDOR = "anthropic"
API = "messages"
_REASONING_KINDS = frozenset({"thinking", "redacted_thinking"})
_UNBOUND_KINDS = frozenset({"text", "tool_use"})
_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
_DEFAULT_MAX_TOKENS = 4096
PRESERVED_THINKING_MODELS = ("fable-5", "opus-5-5", "sonnet-5-5", "haiku-5-5")


def min_cacheable_tokens(model: str) -> int:
    """Minimum cacheable prompt length by model (protocols.md §4.4; verify per model)."""
    m = model.lower()
    if any(k in m for k in ("opus-4-5", "opus-4-6", "haiku-4-5")):
        return 4096
    if "haiku-3" in m:
        return 2048
    return 1024


_PAYLOAD = operator.attrgetter("payload")


@attrs.frozen(slots=True)
class _TurnEncoding:
    """One turn's messages as (role, blocks, unit digests), shared read-only between requests."""

    turn: Turn
    model: str
    messages: tuple[tuple[str, list[Any], list[str]], ...]
    replayed: tuple[Continuation, ...]
    withheld: tuple[Continuation, ...]
    seal: str  # digest of the replayed payloads, each verified against its own digest when sealed

    def verify(self) -> None:
        """Re-check every replayed payload: one hash per turn, per-payload checks only on a mismatch."""
        if digest_of(b"".join(map(_PAYLOAD, self.replayed))) != self.seal:
            for c in self.replayed:
                c.verify()
            raise ContinuationMismatch("a replayed payload changed since capture")


class AnthropicAdapter:
    """The Messages API codec. ``min_cacheable`` overrides the per-model minimum cacheable length."""

    vendor = VENDOR
    api = API

    def __init__(self, *, min_cacheable: int | None = None, lookback_units: int = 20) -> None:
        self._min_cacheable = min_cacheable
        # closed turns' encodings by id(turn), rebuilt each request from the turns still in history
        self._memo: dict[int, _TurnEncoding] = {}
        self.rules = ProtocolRules(
            vendor=VENDOR,
            api=API,
            max_cache_breakpoints=4,
            cache_lookback_units=lookback_units,
            min_cacheable_tokens=min_cacheable or 1024,
            # preserved thinking: each block is checked against the exact system/tools/messages before it
            # (Fable 5.x, Opus 5.5; Sonnet/Haiku 5.5 blocks are account-bound too) - protocols.md §4.3
            append_only_models=PRESERVED_THINKING_MODELS,
        )

    def min_tokens(self, model: str) -> int:
        return self._min_cacheable if self._min_cacheable is not None else min_cacheable_tokens(model)

    # -- encode ------------------------------------------------------------------------------------------
    def encode(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        options: Mapping[str, Any],
        records: Sequence[ExecutionRecord],
    ) -> VendorRequest:
        """Build the ``messages.create`` kwargs for the next call on ``history`` (whose last turn is open)."""
        tools = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            for t in prefix.tools
        ]
        system: list[dict[str, Any]] = [{"type": "text", "text": prefix.system}] if prefix.system else []
        messages: list[dict[str, Any]] = []
        units: list[str] = [unit_digest(t) for t in tools] + [unit_digest(b) for b in system]
        n_head = len(units)
        # unit index of each message's first block: locating a unit is a bisect, not a table per block
        starts: list[int] = []
        withheld: list[Continuation] = []

        def add(role: str, blocks: list[Any], digests: list[str]) -> None:
            starts.append(len(units))
            messages.append({"role": role, "content": blocks})
            units.extend(digests)

        for user, answer in prefix.few_shots:
            add("user", *_text_block(user))
            add("assistant", *_text_block(answer))
        prefix_units = len(units)
        memo: dict[int, _TurnEncoding] = {}
        for turn in history.turns:
            encoded = self._memo.get(id(turn))
            if encoded is None or encoded.turn is not turn or encoded.model != model:
                encoded = self._encode_turn(turn, model)
            else:
                encoded.verify()
            if turn.closed:  # a closed turn's view is frozen: its encoding is too
                memo[id(turn)] = encoded
            withheld.extend(encoded.withheld)
            for role, blocks, digests in encoded.messages:
                add(role, blocks, digests)
        self._memo = memo

        def block_at(k: int) -> tuple[list[Any], int]:
            mi = bisect.bisect_right(starts, k) - 1
            message = messages[mi]
            # content lists may be shared with a memoized turn: copy before marking a block
            content = message["content"] = list(message["content"])
            return content, k - starts[mi]

        def markable(k: int) -> bool:
            # thinking blocks cannot carry cache_control
            if k < n_head:
                return True
            content, bi = block_at(k)
            return content[bi].get("type") not in _REASONING_KINDS

        breakpoints = self._breakpoints(units, prefix_units, records, markable)
        n_tools = len(tools)
        for b in breakpoints:
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
            if key != "max_tokens":
                kwargs[key] = value
        return VendorRequest(
            kwargs=kwargs, units=tuple(units), breakpoints=breakpoints, withheld=tuple(withheld)
        )

    def _encode_turn(self, turn: Turn, model: str) -> _TurnEncoding:
        messages: list[tuple[str, list[Any], list[str]]] = [("user", *_text_block(turn.user))]
        withheld: list[Continuation] = []
        for i, step in enumerate(turn.steps):
            messages.append(("assistant", *self._assistant_content(turn, i, step, model, withheld)))
            if step.tool_results:
                pairs = [_tool_result(r.call_id, r.content, r.is_error) for r in step.tool_results]
                messages.append(("user", [dict(b) for b, _ in pairs], [d for _, d in pairs]))
        replayed = tuple(
            c
            for step in turn.steps
            for c in step.continuation
            if c.digest in {d for _, _, ds in messages for d in ds}
        )
        for c in replayed:
            c.verify()
        seal = digest_of(b"".join(c.payload for c in replayed))
        return _TurnEncoding(turn, model, tuple(messages), replayed, tuple(withheld), seal)

    def _assistant_content(
        self, turn: Turn, index: int, step: Step, model: str, withheld: list[Continuation]
    ) -> tuple[list[Any], list[str]]:
        keep_reasoning = turn.view is None or turn.view.keep_reasoning[index]
        summary = turn.view.summary if turn.view is not None and index == len(turn.steps) - 1 else None
        blocks: list[Any] = []
        digests: list[str] = []
        if summary is not None:
            note: dict[str, Any] = {"type": "text", "text": f"(Summary of my earlier reasoning: {summary})"}
            blocks.append(note)
            digests.append(unit_digest(note))
        for c in step.continuation:
            reasoning = c.kind in _REASONING_KINDS
            if reasoning and not keep_reasoning:
                continue
            if not c.replayable_to(VENDOR, API, model):
                withheld.append(c)
                continue
            # digest-verified on every request; the parsed value is shared, never mutated (markers copy)
            blocks.append(c.shared_value())
            digests.append(c.digest)
        return blocks, digests

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
            previous = records[-1].blocks
            d = divergence(units, previous)
            if d is None:
                points.add(len(previous))
            elif d > 0:
                # keep what earlier requests cached readable: mark the longest earlier request that is
                # still a prefix of this one (else the shared part itself, so later requests can hit it)
                ends = [
                    len(r.blocks)
                    for r in records[-RECENT:]
                    if len(r.blocks) <= d and tuple(units[: len(r.blocks)]) == r.blocks
                ]
                points.add(max(ends) if ends else d)
        for p in list(points):
            q = p
            while q > 0 and not markable(q - 1):
                q -= 1
            points.discard(p)
            points.add(q)
        ordered = sorted(p for p in points if p > 0)
        if len(ordered) > self.rules.max_cache_breakpoints:
            # the stable prefix and the newest message matter most; keep the latest in between
            ordered = [ordered[0], *ordered[-(self.rules.max_cache_breakpoints - 1) :]]
        return tuple(ordered)

    def predict_cache_read(self, request: VendorRequest, records: Sequence[ExecutionRecord]) -> int | None:
        model = str(request.kwargs["model"])
        n_prefix = len(request.kwargs.get("tools", ())) + len(request.kwargs.get("system", ()))
        return predict_breakpoint_cache(
            request.units,
            request.breakpoints,
            [r for r in records if r.model == model],
            lookback=self.rules.cache_lookback_units or 20,
            min_tokens=self.min_tokens(model),
            prefix_units=n_prefix,
        )

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, response: Any, model: str) -> DecodedStep:
        """Split a Messages response (the JSON object as received) into the four layers' material."""
        if not isinstance(response, Mapping) or not isinstance(response.get("content"), list):
            raise MalformedResponse("Anthropic response has no content list")
        got_model = response.get("model")
        produced_by = got_model if isinstance(got_model, str) and got_model else model
        parts: list[Part] = []
        payloads: list[Continuation] = []
        for i, block in enumerate(response["content"]):
            if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                raise MalformedResponse(f"content[{i}] is not a typed block")
            kind = block["type"]
            parts.append(_part(kind, block, i))
            payloads.append(
                Continuation.capture(
                    vendor=VENDOR,
                    api=API,
                    model=produced_by,
                    kind=kind,
                    value=block,
                    model_bound=kind not in _UNBOUND_KINDS,
                )
            )
        stop = response.get("stop_reason")
        return DecodedStep(
            parts=tuple(parts),
            continuation=tuple(payloads),
            stop_reason=stop if isinstance(stop, str) else "unknown",
            usage=_usage(response.get("usage")),
            model=produced_by,
            response_id=response.get("id") if isinstance(response.get("id"), str) else None,
        )

    def restored(self) -> None:
        """Nothing server-side to lose: every request carries the whole conversation."""

    # -- I/O -----------------------------------------------------------------------------------------------
    def call(self, client: Any, request: VendorRequest, stream: bool) -> CallResult:
        """One ``messages`` call: the response JSON object exactly as received, and the bytes sent."""
        import anthropic

        with translated_errors(anthropic, "Anthropic", stream):
            if stream:
                with client.messages.stream(**request.kwargs) as events:
                    stopped = False
                    for event in events:
                        stopped = stopped or event.type == "message_stop"
                    if not stopped:
                        raise StreamInterrupted("the stream ended before message_stop")
                    final = _message_dict(events.get_final_message())
                    return CallResult(final, events.response.request.content)
            raw = client.messages.with_raw_response.create(**request.kwargs)
            return CallResult(
                parse_json_body(raw.http_response.content, "Anthropic response"),
                raw.http_response.request.content,
            )

    async def acall(self, client: Any, request: VendorRequest, stream: bool) -> CallResult:
        """The async twin of :meth:`call`."""
        import anthropic

        with translated_errors(anthropic, "Anthropic", stream):
            if stream:
                async with client.messages.stream(**request.kwargs) as events:
                    stopped = False
                    async for event in events:
                        stopped = stopped or event.type == "message_stop"
                    if not stopped:
                        raise StreamInterrupted("the stream ended before message_stop")
                    final = _message_dict(await events.get_final_message())
                    return CallResult(final, events.response.request.content)
            raw = await client.messages.with_raw_response.create(**request.kwargs)
            return CallResult(
                parse_json_body(raw.http_response.content, "Anthropic response"),
                raw.http_response.request.content,
            )


def _text_block(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    block, digest = _text_unit(text)
    return [dict(block)], [digest]


# History blocks we build ourselves are the same on every request: their digests are memoized (the
# returned dicts are copied before use, so the cache cannot be mutated through a request).
@functools.lru_cache(maxsize=1 << 16)
def _text_unit(text: str) -> tuple[dict[str, Any], str]:
    block = {"type": "text", "text": text}
    return block, unit_digest(block)


@functools.lru_cache(maxsize=1 << 16)
def _tool_result(call_id: str, content: str, is_error: bool) -> tuple[dict[str, Any], str]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block, unit_digest(block)


def _part(kind: str, block: Mapping[str, Any], i: int) -> Part:
    if kind == "thinking":
        text, sig = block.get("thinking"), block.get("signature")
        if not isinstance(text, str) or not isinstance(sig, str) or not sig:
            raise MalformedResponse(f"content[{i}]: thinking block without a signature")
        return ReasoningPart(text=text, continuation=i)
    if kind == "redacted_thinking":
        if not isinstance(block.get("data"), str) or not block["data"]:
            raise MalformedResponse(f"content[{i}]: redacted_thinking block without data")
        return ReasoningPart(text="", redacted=True, continuation=i)
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise MalformedResponse(f"content[{i}]: text block without text")
        return TextPart(text=block["text"], continuation=i)
    if kind == "tool_use":
        cid, name, args = block.get("id"), block.get("name"), block.get("input")
        if not isinstance(cid, str) or not isinstance(name, str) or not isinstance(args, Mapping):
            raise MalformedResponse(f"content[{i}]: tool_use block needs id, name and an input object")
        raw = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        return ToolCallPart(id=cid, name=name, arguments=args, raw_arguments=raw, continuation=i)
    return OpaquePart(type=kind, continuation=i)


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, Mapping):
        return Usage()
    details = raw.get("output_tokens_details")
    thinking = details.get("thinking_tokens") if isinstance(details, Mapping) else None
    return Usage(
        uncached_input=int_field(raw.get("input_tokens")),
        cache_read=int_field(raw.get("cache_read_input_tokens")),
        cache_write=int_field(raw.get("cache_creation_input_tokens")),
        output=int_field(raw.get("output_tokens")),
        reasoning=thinking if isinstance(thinking, int) else None,
    )


#: the key order of each known block type in a non-streamed response (protocols.md §4.6)
_WIRE_ORDER: dict[str, tuple[str, ...]] = {
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "text": ("type", "text", "citations"),
    "tool_use": ("type", "id", "name", "input"),
}


def _message_dict(message: Any) -> dict[str, Any]:
    """A streamed, SDK-accumulated ``Message`` as the JSON object a non-streamed call would return.

    The SDK's models dump fields in their own (alphabetical) order; known block types are put back in
    the wire order so a streamed session holds the same bytes as a non-streamed one.
    """
    data: dict[str, Any] = message.to_dict(mode="json")
    content = []
    for block in data.get("content", []):
        order = _WIRE_ORDER.get(block.get("type"))
        if order is not None:
            known = {k: block[k] for k in order if k in block}
            block = {**known, **{k: v for k, v in block.items() if k not in known}}
        content.append(block)
    data["content"] = content
    return data
