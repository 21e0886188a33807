"""The adapter contract: a sans-I/O codec (``encode``/``decode``), declared ``ProtocolRules``, a thin call.

``encode`` is deterministic: the same prefix, history, options and request log always give the same
kwargs (and so the same bytes). ``decode`` splits a vendor response into canonical parts, verbatim
continuation payloads and normalized usage, or raises :class:`~reasonstate.errors.MalformedResponse`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from reasonstate.prefix import Prefix
from reasonstate.state import (
    Continuation,
    ExecutionRecord,
    History,
    Part,
    ReasoningPart,
    Turn,
    TurnView,
    Usage,
)

__all__ = ["Adapter", "CallResult", "DecodedStep", "ProtocolRules", "VendorRequest", "request_digest"]


@attrs.frozen(slots=True)
class ProtocolRules:
    """What a vendor API requires of a request, as data the session and policies obey.

    * ``tool_steps_keep_reasoning``: a step that made tool calls keeps its reasoning in every later request
      (DeepSeek thinking mode, protocols.md §3.3); policies cannot drop it.
    * ``reasoning_only_steps_keep_reasoning``: a step whose only output is reasoning keeps it (an assistant
      message may not be empty).
    * ``max_cache_breakpoints`` / ``cache_lookback_units`` / ``min_cacheable_tokens``: explicit prefix
      caching (Anthropic, protocols.md §4.4); 0 breakpoints means automatic caching.
    * ``append_only_models``: models whose replayed reasoning must sit on an unchanged prefix; for them
      only the closing turn's view is decided and earlier views are never rewritten.
    """

    vendor: str
    api: str
    tool_steps_keep_reasoning: bool = False
    reasoning_only_steps_keep_reasoning: bool = True
    max_cache_breakpoints: int = 0
    cache_lookback_units: int | None = None
    min_cacheable_tokens: int = 0
    #: model-name fragments whose reasoning is bound to the exact prefix it was produced on, so a closed
    #: turn's view can never be rewritten later (Anthropic preserved thinking, protocols.md §4.3)
    append_only_models: tuple[str, ...] = ()

    def may_rewrite_past(self, model: str) -> bool:
        """Whether a policy may change an earlier closed turn's view (``KeepLast`` compaction)."""
        return not any(fragment in model for fragment in self.append_only_models)

    def clamp(self, turn: Turn, view: TurnView) -> tuple[TurnView, tuple[str, ...]]:
        """The closest view to ``view`` that the vendor accepts, and why each change was made."""
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


@attrs.frozen(slots=True)
class VendorRequest:
    """The exact keyword arguments of one vendor SDK call, plus what the cache guard needs.

    ``units`` holds one digest per prefix unit (tool, system block, message content block) in prompt
    order; ``breakpoints`` the unit counts at which the request asks for a cache write. ``withheld`` lists
    continuations not sent because they belong to another vendor or model.
    """

    kwargs: Mapping[str, Any]
    units: tuple[str, ...]
    breakpoints: tuple[int, ...] = ()
    withheld: tuple[Continuation, ...] = ()
    #: (event kind, data) pairs the session adds to the trace when the request succeeds, e.g. a
    #: stateful chain that fell back to a full replay
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()


def request_digest(kwargs: Mapping[str, Any], body: bytes | None = None) -> tuple[str, int]:
    """``(sha256 digest, size)`` of the request body the SDK sent (else of the kwargs' compact JSON)."""
    if body is None:
        body = json.dumps(kwargs, ensure_ascii=False, separators=(",", ":"), default=str).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest(), len(body)


@attrs.frozen(slots=True)
class CallResult:
    """What a vendor call returned: the response JSON as received and the request body the SDK sent."""

    response: Any
    request_body: bytes | None = None


@attrs.frozen(slots=True)
class DecodedStep:
    """A decoded response: canonical parts, verbatim payloads, stop reason, normalized usage."""

    parts: tuple[Part, ...]
    continuation: tuple[Continuation, ...]
    stop_reason: str
    usage: Usage
    model: str
    response_id: str | None = None
    #: token-in, token-out adapters: the prompt sent and the completion sampled, as token ids
    prompt_ids: tuple[int, ...] | None = None
    completion_ids: tuple[int, ...] | None = None
    #: (event kind, data) pairs the session adds to the trace after the response event, e.g. the
    #: reasoning inputs a vendor reports it withheld (OpenAI ``input_transformations``)
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()


class Adapter(Protocol):
    """One vendor API. ``encode``/``decode`` are pure; ``call``/``acall`` are the only I/O."""

    vendor: str
    api: str
    rules: ProtocolRules

    def encode(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        options: Mapping[str, Any],
        records: Sequence[ExecutionRecord],
    ) -> VendorRequest: ...

    def decode(self, response: Any, model: str) -> DecodedStep: ...

    def predict_cache_read(
        self, request: VendorRequest, records: Sequence[ExecutionRecord]
    ) -> int | None: ...

    def restored(self) -> None:
        """The session was restored from a snapshot: server-side state (response chains) may be gone."""
        ...

    def call(self, client: Any, request: VendorRequest, stream: bool) -> CallResult: ...

    async def acall(self, client: Any, request: VendorRequest, stream: bool) -> CallResult: ...
