"""Between-turn reasoning policies: Keep, Drop, Compress, KeepLast, CacheAware.

A policy runs once, when a turn closes (its final answer arrived), and returns the frozen
:class:`~reasonstate.state.TurnView` of that turn: which steps' reasoning later requests replay. The
session then clamps the view with the adapter's ``ProtocolRules`` (a policy can never produce a request the
vendor rejects) and records the decision, with its predicted cache effect, in the trace. A policy never
runs inside an open tool chain: inside a chain every continuation goes back verbatim.

Only :class:`KeepLast` ever revisits an earlier turn: keeping the last ``n`` turns means dropping turn
``t - n`` when turn ``t`` closes. That is an explicit compaction of the past and costs a cache break at the
rewritten turn each time; the trace says so.

Cost model: with a reusable generated branch, keeping costs ``|U|`` prefill next turn and
dropping costs ``|A| + |U|``, but dropping shortens every later context by ``|R|``. So dropping pays when
reasoning is long relative to the answer (:class:`CacheAware`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from reasonstate.errors import InvalidOption
from reasonstate.state import History, Step, Turn, TurnView

__all__ = [
    "FOLD_INSTRUCTION",
    "CacheAware",
    "Compress",
    "Drop",
    "Fold",
    "Keep",
    "KeepLast",
    "Policy",
    "ServerClear",
    "ServerCompact",
    "is_policy",
    "policy_from_spec",
]


class Policy(Protocol):
    """Decides closed turns' views. ``decide`` returns views by turn index (the closed turn at least).

    Invariants the session relies on (and checks: a policy that breaks them, or raises, closes the turn
    under :class:`Keep`, traced as ``policy.failed``):
      * ``decide`` is called once per closed turn, never inside an open tool chain, and must not mutate
        ``history`` (it is immutable anyway);
      * each returned :class:`~reasonstate.state.TurnView` has one ``keep_reasoning`` flag per step of its
        turn, and only turns up to ``closed`` are named;
      * the views are then clamped by the vendor's ``ProtocolRules`` and frozen: a policy cannot produce a
        request the vendor rejects;
      * ``spec()`` is JSON-serializable and, for a policy :func:`policy_from_spec` knows, rebuilds an equal
        policy (that is how a snapshot stores it).
    """

    @property
    def name(self) -> str:
        """A stable identifier, recorded in every view and trace event the policy decides."""
        ...

    def decide(self, history: History, closed: int) -> Mapping[int, TurnView]:
        """The views of ``history.turns[closed]`` (just closed) and of any earlier turn to rewrite."""
        ...

    def spec(self) -> dict[str, Any]:
        """The policy as JSON data (``{"policy": name, ...parameters}``) for snapshots."""
        ...


def _count(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """An integer >= 0, else :class:`InvalidOption` naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOption(
            f"{type(instance).__name__}({attribute.name}=...) must be an integer >= 0, got {value!r}"
        )


def _amount(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A number >= 0, else :class:`InvalidOption` naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidOption(
            f"{type(instance).__name__}({attribute.name}=...) must be a number >= 0, got {value!r}"
        )


def _summarizer(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        raise InvalidOption(
            f"Compress(summarize=...) must be a callable taking the closed Turn and returning the summary "
            f"text, got {value!r}"
        )


def is_policy(value: object) -> bool:
    """Whether ``value`` has the :class:`Policy` shape (``name``, ``decide``, ``spec``)."""
    return (
        isinstance(getattr(value, "name", None), str)
        and callable(getattr(value, "decide", None))
        and callable(getattr(value, "spec", None))
    )


def _view(turn: Turn, keep: bool, policy: str, summary: str | None = None) -> TurnView:
    return TurnView(keep_reasoning=tuple(keep for _ in turn.steps), policy=policy, summary=summary)


@attrs.frozen(slots=True)
class Keep:
    """Replay every step's reasoning forever (append-only; best prefix-cache reuse).

    Invariant: never causes a cache break; each later request extends the previous one.
    """

    name: str = attrs.field(default="keep", init=False)

    def decide(self, history: History, closed: int) -> Mapping[int, TurnView]:
        return {closed: _view(history.turns[closed], True, self.name)}

    def spec(self) -> dict[str, Any]:
        return {"policy": self.name}


@attrs.frozen(slots=True)
class Drop:
    """Drop a closed turn's reasoning (where the protocol allows); keep its answer and tool exchange.

    Invariants: decides only the turn that just closed (never revisits one), so it costs at most one cache
    break per turn, at that turn; steps the vendor requires to keep their reasoning (DeepSeek tool-calling
    steps, reasoning-only steps) keep it, with a ``policy.clamped`` event.
    """

    name: str = attrs.field(default="drop", init=False)

    def decide(self, history: History, closed: int) -> Mapping[int, TurnView]:
        return {closed: _view(history.turns[closed], False, self.name)}

    def spec(self) -> dict[str, Any]:
        return {"policy": self.name}


@attrs.frozen(slots=True)
class Compress:
    """Replace a closed turn's reasoning with ``summarize(turn)`` (a short text note in its final step).

    An empty summary is the same as :class:`Drop`. The summary is plain text in the assistant's answer,
    never a fake reasoning block (foreign reasoning re-rendered as text makes models mimic it:
    pydantic/pydantic-ai#5869). ``summarize`` runs synchronously inside the ``send`` that closed the turn;
    if it raises, the turn closes under :class:`Keep` (traced). Holds code, so
    :func:`policy_from_spec` cannot rebuild it: pass it again to ``Session.restore(..., policy=...)``.
    """

    summarize: Callable[[Turn], str] = attrs.field(eq=False, validator=_summarizer)
    name: str = attrs.field(default="compress", init=False)

    def decide(self, history: History, closed: int) -> Mapping[int, TurnView]:
        turn = history.turns[closed]
        summary = self.summarize(turn).strip() or None
        return {closed: _view(turn, False, self.name, summary)}

    def spec(self) -> dict[str, Any]:
        return {"policy": self.name}


@attrs.frozen(slots=True)
class KeepLast:
    """Keep the reasoning of the last ``n`` closed turns; drop it from older ones (a traced compaction).

    Invariants: when turn ``t`` closes it keeps ``t`` and drops turn ``t - n`` (``n == 0`` is :class:`Drop`);
    rewriting turn ``t - n`` is a cache break there on every turn, declared in the trace. On models whose
    history must stay append-only (Anthropic preserved thinking, docs/protocols.md §4.3) the rewrite is
    refused by the rules and only the closing turn is decided.
    """

    n: int = attrs.field(validator=_count)
    name: str = attrs.field(default="keep_last", init=False)

    def decide(self, history: History, closed: int) -> Mapping[int, TurnView]:
        turn = history.turns[closed]
        views = {closed: _view(turn, self.n > 0, self.name)}
        old = closed - self.n
        if self.n > 0 and old >= 0:
            past = history.turns[old]
            if past.view is not None and any(past.view.keep_reasoning):
                views[old] = _view(past, False, self.name)
        return views

    def spec(self) -> dict[str, Any]:
        return {"policy": self.name, "n": self.n}


def _tokens(text: str) -> int:
    return math.ceil(len(text.encode()) / 4)


def reasoning_tokens(step: Step) -> int:
    """The step's reasoning size: the vendor's reported reasoning tokens, else an estimate from text."""
    if step.usage.reasoning is not None:
        return step.usage.reasoning
    return _tokens(step.reasoning_text)


def answer_tokens(step: Step) -> int:
    """The step's answer size: its text, tool-call names and raw arguments (4 UTF-8 bytes a token)."""
    return _tokens(step.text) + sum(_tokens(c.raw_arguments) + _tokens(c.name) for c in step.tool_calls)


@attrs.frozen(slots=True)
class CacheAware:
    """Drop a closed turn's reasoning when it is long relative to what dropping re-prefills.

    The cost model: dropping re-prefills roughly the turn's answer ``A`` once and saves its reasoning
    ``R`` on each of the ``future_turns`` later requests. Drop iff ``R >= min_reasoning_tokens`` and
    ``R * future_turns >= ratio * A``; keep otherwise. ``R`` is the vendor's reported reasoning tokens
    where reported, else estimated from the text (one token per 4 UTF-8 bytes); ``A`` is estimated.

    Invariant: a pure function of the closed turn and the parameters; like :class:`Drop` it never revisits
    an earlier turn.
    """

    ratio: float = attrs.field(default=4.0, validator=_amount)
    min_reasoning_tokens: int = attrs.field(default=256, validator=_count)
    future_turns: float = attrs.field(default=1.0, validator=_amount)
    name: str = attrs.field(default="cache_aware", init=False)

    def decide(self, history: History, closed: int) -> Mapping[int, TurnView]:
        turn = history.turns[closed]
        r = sum(reasoning_tokens(s) for s in turn.steps)
        a = sum(answer_tokens(s) for s in turn.steps)
        drop = r >= self.min_reasoning_tokens and r * self.future_turns >= self.ratio * a
        return {closed: _view(turn, not drop, self.name)}

    def spec(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "ratio": self.ratio,
            "min_reasoning_tokens": self.min_reasoning_tokens,
            "future_turns": self.future_turns,
        }


#: what ``Fold.summarize`` is asked to do (the preservation instruction of the cache-first runtime): it
#: precedes the transcript of the folded head in the one string ``summarize`` receives
FOLD_INSTRUCTION = (
    "Summarize the conversation transcript below so that it can replace the transcript in the context of "
    "the assistant continuing this conversation. Preserve: the user's original goals; the constraints the "
    "user set, especially what they do not want; the decisions made and why; the files seen or changed "
    "(paths and what changed); the tool results that are still relevant (exact values where they matter); "
    "the open todos. Do not summarize turn by turn and leave out anything superseded. Write plain text, "
    "no preamble."
)


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOption(f"Fold({attribute.name}=...) must be an integer >= 1, got {value!r}")


def _fold_summarizer(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        raise InvalidOption(
            f"Fold(summarize=...) must be a callable taking the instruction and transcript (one string) "
            f"and returning the summary text, got {value!r}"
        )


@attrs.frozen(slots=True)
class Fold:
    """Fold the head of a long conversation into one summary, only when the context passes a threshold.

    Passed as ``Session(..., fold=Fold(...))`` next to a between-turn reasoning ``policy`` (which still
    decides each closed turn's view; ``Fold`` only decides whether and where to fold). When a turn closes
    and the context — the newest request's vendor-reported prompt plus its output (``Report.
    active_context_tokens``; estimated from the rendered history only when the vendor reported no usage)
    — is ``>= threshold_tokens``, the session folds once:

    * the cut is at a turn boundary (a user message): the tail kept is the longest run of the most recent
      closed turns whose estimated size is ``<= keep_tail_tokens`` (a turn's size: its user message, kept
      reasoning — the vendor's reported reasoning tokens where reported — visible text, tool calls and
      tool results as replayed under its view, one token per 4 UTF-8 bytes);
    * ``summarize`` gets :data:`FOLD_INSTRUCTION` followed by the head (every earlier turn, after the
      previous fold's summary if there is one) as a plain-text transcript, and returns the summary;
    * every later request renders ``[synthetic user intro, summary as the assistant] + tail + new turn``
      (``History.rendered``); the folded turns' opaque continuation is never sent again;
    * it is traced as ``context.folded`` and the next request's cache break cites it (a declared break);
      the requests after it extend each other again (append-only).

    A ``summarize`` that raises or returns no text skips the fold (traced as ``context.folded`` with an
    ``error``): the session goes on exactly as without it. Never inside an open tool chain. Holds code, so
    a snapshot keeps only ``spec()``: pass ``fold=`` again to ``Session.restore``.
    """

    threshold_tokens: int = attrs.field(validator=_positive)
    keep_tail_tokens: int = attrs.field(validator=_count)
    summarize: Callable[[str], str] = attrs.field(eq=False, validator=_fold_summarizer)
    name: str = attrs.field(default="fold", init=False)

    def __attrs_post_init__(self) -> None:
        if self.keep_tail_tokens >= self.threshold_tokens:
            raise InvalidOption(
                f"Fold(keep_tail_tokens={self.keep_tail_tokens}) must be below threshold_tokens="
                f"{self.threshold_tokens}: the tail kept after a fold must leave room below the threshold"
            )

    def prompt(self, transcript: str) -> str:
        """The one string ``summarize`` receives: the instruction, then the head's transcript."""
        return f"{FOLD_INSTRUCTION}\n\n<transcript>\n{transcript}\n</transcript>"

    def spec(self) -> dict[str, Any]:
        """``{"fold": "fold", "threshold_tokens": ..., "keep_tail_tokens": ...}`` (``summarize`` is code)."""
        return {
            "fold": self.name,
            "threshold_tokens": self.threshold_tokens,
            "keep_tail_tokens": self.keep_tail_tokens,
        }


def policy_from_spec(spec: Mapping[str, Any]) -> Policy:
    """Rebuild a policy from ``spec()`` (Compress needs its callable and cannot be rebuilt)."""
    name = spec.get("policy")
    if name == "keep":
        return Keep()
    if name == "drop":
        return Drop()
    if name == "keep_last":
        return KeepLast(int(spec["n"]))
    if name == "cache_aware":
        return CacheAware(
            ratio=float(spec["ratio"]),
            min_reasoning_tokens=int(spec["min_reasoning_tokens"]),
            future_turns=float(spec["future_turns"]),
        )
    raise InvalidOption(f"cannot rebuild policy {name!r} from a snapshot; pass policy= to restore()")


def _keep_thinking(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value != "all":
        _positive(instance, attribute, value)


@attrs.frozen(slots=True)
class ServerClear:
    """Anthropic context editing as the session's choice (docs/protocols.md §4.7): the vendor clears old
    thinking (and, with ``clear_tool_uses``, old tool results) server-side before the model reads the prompt.

    Passed as ``Session(..., fold=ServerClear(...))`` on the Messages API: every request then carries
    ``context_management={"edits": [...]}`` and the beta header; the session's history is never edited
    (thinking and tool results still go back verbatim, the latest turn's thinking included, so the open
    tool chain is untouched), and each clear the vendor reports is traced as ``context.cleared``.
    ``thinking_keep="all"`` (the default) keeps every thinking turn: the most cache hits. An integer keeps
    that many of the most recent thinking turns (a turn runs from one user prompt to the next, its tool loop
    included, so the open loop is never cleared): each clear rewrites the prompt the vendor caches from the
    first cleared block on. ``clear_tool_uses`` is the ``clear_tool_uses_20250919`` edit's fields
    (``trigger``, ``keep``, ``clear_at_least``, ``exclude_tools``, ``clear_tool_inputs``), sent as given;
    another field is refused before any request.

    Invariant: the session's request units are those of the prompt the vendor reads after the edits, so
    its cache prediction equals the reported read, and each clear is a declared ``cache.break`` with cause
    ``server_cleared``; a ``tool_uses`` trigger is predicted, an ``input_tokens`` trigger or a
    ``clear_at_least`` (the vendor's own token count decides) gives a None prediction.
    """

    thinking_keep: int | str = attrs.field(default="all", validator=_keep_thinking)
    clear_tool_uses: Mapping[str, Any] | None = None
    name: str = attrs.field(default="server_clear", init=False)
    api: str = attrs.field(default="messages", init=False)

    def request_option(self) -> dict[str, Any]:
        """The ``context_management`` request option this policy sends."""
        keep: Any = (
            "all" if self.thinking_keep == "all" else {"type": "thinking_turns", "value": self.thinking_keep}
        )
        edits: list[dict[str, Any]] = [{"type": "clear_thinking_20251015", "keep": keep}]
        if self.clear_tool_uses is not None:
            edits.append({**dict(self.clear_tool_uses), "type": "clear_tool_uses_20250919"})
        return {"edits": edits}


@attrs.frozen(slots=True)
class ServerCompact:
    """OpenAI Responses server-side compaction as the session's choice (docs/protocols.md §1.9).

    Passed as ``Session(..., fold=ServerCompact(threshold_tokens=N))`` on the Responses API: every request
    carries ``context_management=[{"type": "compaction", "compact_threshold": N}]``; the compaction item
    the vendor returns is model-bound continuation state and the rewrite a declared ``compacted`` break
    (what the session already does for that option).
    """

    threshold_tokens: int = attrs.field(validator=_positive)
    name: str = attrs.field(default="server_compact", init=False)
    api: str = attrs.field(default="responses", init=False)

    def request_option(self) -> list[dict[str, Any]]:
        """The ``context_management`` request option this policy sends."""
        return [{"type": "compaction", "compact_threshold": self.threshold_tokens}]
