"""Folding the head of a long conversation into one summary (:class:`~reasonstate.policies.Fold`).

:func:`folded` runs once per closed turn, after the turn's answer is committed and its reasoning view is
decided, and returns the layers either unchanged, or with the history folded
(:meth:`~reasonstate.state.History.with_fold`) and a ``context.folded`` event appended, or with only a
``context.folded`` event carrying ``error`` (the summarizer failed: nothing else changes).

Sizes, in tokens:
  * the context: the newest request's vendor-reported prompt plus its output (what
    :func:`reasonstate.cache.pricing.metrics` calls ``active_context_length``); when the vendor reported
    no usage at all, an estimate: the prefix's canonical bytes plus :func:`turn_tokens` of every rendered
    turn, one token per 4 UTF-8 bytes;
  * a turn: :func:`turn_tokens`, an estimate from what is replayed of it under its view.

Invariants: pure but for the ``summarize`` call; never raises (any failure is the traced, skipped fold);
never folds an open turn (the caller calls it only when a turn closed); the cut is always at a turn
boundary, after the previous fold.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import attrs

from reasonstate.cache.rules import CacheRules, PredictedRequest, divergence, predict_request
from reasonstate.policies import Fold, reasoning_tokens
from reasonstate.prefix import Prefix, canonical_json
from reasonstate.state import FOLD_INTRO, EventKind, Folded, History, Records, Trace, Turn, TurnView

__all__ = ["context_tokens", "folded", "transcript", "turn_tokens"]


# What folding reads of the session's values, as protocols: the runtime sits below the adapters and the
# engine (pyproject.toml, [tool.importlinter]), so it names no class of theirs.


class _Layers(Protocol):
    """The session's layers (the engine's ``Layers``): an attrs value folding evolves."""

    @property
    def history(self) -> History: ...
    @property
    def trace(self) -> Trace: ...
    @property
    def records(self) -> Records: ...


class _Rules(Protocol):
    """The adapter's :class:`~reasonstate.adapters.base.ProtocolRules`, as far as folding obeys them."""

    def may_rewrite_past(self, model: str) -> bool: ...
    def clamp(self, turn: Turn, view: TurnView) -> tuple[TurnView, tuple[str, ...]]: ...


class _Adapter(Protocol):
    """An adapter's rules and cache rules (the codec itself is the ``encode`` the session hands in)."""

    @property
    def rules(self) -> _Rules: ...
    @property
    def cache(self) -> CacheRules: ...


_L = TypeVar("_L", bound=_Layers)


def _tokens(text: str) -> int:
    return math.ceil(len(text.encode()) / 4)


def turn_tokens(turn: Turn) -> int:
    """A turn's size as replayed under its view, estimated at one token per 4 UTF-8 bytes of each text:
    the user message; per step its reasoning when the view keeps it (the vendor's reported reasoning
    tokens where reported), its visible text, each tool call's name and raw arguments, each tool result.
    JSON framing and role markers are not counted."""
    total = _tokens(turn.user)
    for i, step in enumerate(turn.steps):
        if turn.view is None or turn.view.keep_reasoning[i]:
            total += reasoning_tokens(step)
        total += _tokens(step.text)
        total += sum(_tokens(c.name) + _tokens(c.raw_arguments) for c in step.tool_calls)
        total += sum(_tokens(r.content) for r in step.tool_results)
    if turn.view is not None and turn.view.summary:
        total += _tokens(turn.view.summary)
    return total


def context_tokens(layers: _Layers, prefix: Prefix) -> tuple[int, str]:
    """``(size, how)``: the newest request's reported prompt + output (``how == "usage"``), or, when it
    reported no usage, the estimate from the prefix and the rendered history (``"estimate"``)."""
    records = layers.records
    if records:
        usage = records[-1].usage
        if usage.prompt_tokens or usage.output:
            return usage.prompt_tokens + usage.output, "usage"
    head = _tokens(prefix.system) + sum(
        _tokens(
            canonical_json({"name": t.name, "description": t.description, "parameters": dict(t.parameters)})
        )
        for t in prefix.tools
    )
    head += sum(_tokens(u) + _tokens(a) for u, a in prefix.few_shots)
    return head + sum(turn_tokens(t) for t in layers.history.rendered().turns), "estimate"


def transcript(history: History, start: int, stop: int) -> str:
    """The plain-text transcript of turns ``start..stop-1`` (after the current fold's summary, if any):
    user messages, the assistant's visible text, tool calls with their raw arguments and tool results.
    Reasoning is left out (it is the model's scratch work, not the conversation)."""
    lines: list[str] = []
    if history.fold is not None:
        lines.append(f"[Summary of the conversation before this point]\n{history.fold.summary}")
    for turn in history.turns[start:stop]:
        lines.append(f"User: {turn.user}")
        for step in turn.steps:
            if step.text:
                lines.append(f"Assistant: {step.text}")
            results = {r.call_id: r for r in step.tool_results}
            for call in step.tool_calls:
                lines.append(f"Assistant called {call.name}({call.raw_arguments})")
                result = results.get(call.id)
                if result is not None:
                    flag = " (error)" if result.is_error else ""
                    lines.append(f"Tool result{flag} for {call.name}: {result.content}")
    return "\n".join(lines)


def folded(
    layers: _L,
    fold: Fold,
    *,
    adapter: _Adapter,
    prefix: Prefix,
    model: str,
    encode: Callable[[History], PredictedRequest],
) -> _L:
    """The layers after the turn that just closed, folded when the context is ``>= fold.threshold_tokens``
    (see the module docstring); ``encode`` is how the session builds a request on a history (used only to
    predict where the next request diverges)."""
    history = layers.history
    if not history.turns or not history.turns[-1].closed:
        return layers
    size, how = context_tokens(layers, prefix)
    if size < fold.threshold_tokens:
        return layers
    closed = history.turns[-1].index
    start = history.fold.through + 1 if history.fold is not None else 0
    cut, tail = len(history.turns), 0
    while cut > start:
        need = turn_tokens(history.turns[cut - 1])
        if tail + need > fold.keep_tail_tokens:
            break
        cut, tail = cut - 1, tail + need
    base = {
        "turn": closed,
        "tokens_before": size,
        "measured_by": how,
        "threshold_tokens": fold.threshold_tokens,
    }
    if cut == start:
        return _traced(
            layers,
            {**base, "skipped": True, "reason": "every turn since the last fold fits in keep_tail_tokens"},
        )
    try:
        summary = fold.summarize(fold.prompt(transcript(history, start, cut)))
        if not isinstance(summary, str) or not summary.strip():
            raise TypeError(f"summarize returned {type(summary).__name__} {summary!r:.60}, not summary text")
        summary = summary.strip()
        new = history.with_fold(Folded(through=cut - 1, summary=summary))
        reasons: list[str] = []
        if not adapter.rules.may_rewrite_past(model):
            # reasoning bound to its exact prefix (Anthropic preserved thinking, docs/protocols.md §4.3)
            # is invalid once the head before it is replaced: the tail's reasoning is left out
            for turn in new.turns[cut:]:
                if turn.view is None or not any(turn.view.keep_reasoning):
                    continue
                drop = TurnView(tuple(False for _ in turn.steps), policy=fold.name, summary=turn.view.summary)
                view, why = adapter.rules.clamp(turn, drop)
                new = new.with_view(turn.index, view)
                reasons.append(f"turn {turn.index}: reasoning left out ({model} binds it to its prefix)")
                reasons.extend(f"turn {turn.index}: {w}" for w in why)
        request = encode(new)
        records = layers.records
        unit = divergence(request.units, records.newest_units()) if records else None
        predicted = predict_request(adapter.cache, request, records)
    except Exception as exc:  # the summarizer is user code: a failed fold is skipped, never half-applied
        return _traced(
            layers,
            {
                **base,
                "skipped": True,
                "error": type(exc).__name__,
                "message": f"{type(exc).__name__}: {exc}",
            },
        )
    head = sum(turn_tokens(t) for t in history.turns[start:cut])
    if history.fold is not None:
        head += _tokens(FOLD_INTRO) + _tokens(history.fold.summary)
    after = max(0, size - head) + _tokens(FOLD_INTRO) + _tokens(summary)
    data = {
        **base,
        "folded_turns": cut - start,
        "first_folded": start,
        "through": cut - 1,
        "tail_turns": len(history.turns) - cut,
        "tail_tokens_estimate": tail,
        "tokens_after_estimate": after,
        "summary_chars": len(summary),
        "summary_digest": "sha256:" + hashlib.sha256(summary.encode()).hexdigest(),
        "divergence_unit": unit,
        "predicted_cache_read": predicted,
        "summary": f"folded turns {start}..{cut - 1} into a {len(summary)}-character summary "
        f"(context {size} tokens >= {fold.threshold_tokens})",
    }
    if reasons:
        data["tail_clamped"] = reasons
    return _evolved(layers, history=new, trace=layers.trace.appended(EventKind.CONTEXT_FOLDED, **data))


def _traced(layers: _L, data: dict[str, object]) -> _L:
    return _evolved(layers, trace=layers.trace.appended(EventKind.CONTEXT_FOLDED, **data))


def _evolved(layers: _L, **changes: Any) -> _L:
    """``attrs.evolve`` of the layers (the engine's ``Layers``, an attrs value; a protocol here)."""
    return cast(_L, attrs.evolve(cast(Any, layers), **changes))
