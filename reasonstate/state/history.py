"""Canonical history: turns of steps, append-only, with each closed turn's frozen reasoning view.

A turn is one user message and every model call (step) until the final answer. A step holds the model's
output as canonical parts, the verbatim continuation payloads it came with, and the tool results that
answered its calls. A closed turn carries a :class:`TurnView`: which steps' reasoning the next requests
replay (decided once, when the turn closed; only an explicit, traced compaction may change it).

Invariants:
  * ``History.with_*`` return new values; nothing is mutated in place;
  * the open turn (if any) is the last one, and has no view;
  * ``Step.tool_results`` follow the model's declared call order: ``[r.call_id for r in tool_results] ==
    [c.id for c in tool_calls]``.

Size (issue 21: state in proportion to the content): the values a turn holds many of (steps, parts, views)
have no ``__weakref__`` slot (8 bytes each; only a :class:`Turn` is weakly referenced, by the codecs' memo).
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Mapping
from typing import Any

import attrs

from reasonstate.errors import ToolResultError
from reasonstate.state.continuation import Continuation
from reasonstate.state.execution import PackedUsage, Usage, packed_usage, unpacked_usage
from reasonstate.state.frozen import freeze, interned

__all__ = [
    "FOLD_INTRO",
    "Folded",
    "History",
    "OpaquePart",
    "Part",
    "ReasoningPart",
    "Step",
    "TextPart",
    "ToolCallPart",
    "ToolResult",
    "ToolResultPart",
    "Turn",
    "TurnView",
    "parse_arguments",
    "parse_json_object",
    "result_text",
]


@attrs.frozen(slots=True, weakref_slot=False)
class TextPart:
    """Visible text of a step (the answer, or text between tool calls), exactly as decoded.

    ``continuation`` is the index, in the step's ``continuation``, of the payload the text was decoded
    from, or None.
    """

    text: str
    continuation: int | None = None


@attrs.frozen(slots=True, weakref_slot=False)
class ReasoningPart:
    """Reasoning text as the vendor showed it (may be empty for omitted/redacted reasoning).

    What goes back to the model that produced it is the payload at ``continuation`` (signed block,
    encrypted item, ...), verbatim; another vendor or model gets at most this text, and only with
    ``foreign_reasoning="text"``.
    """

    text: str
    redacted: bool = False
    continuation: int | None = None


def frozen_arguments(value: Any) -> Mapping[str, Any] | None:
    return None if value is None else freeze(value)


@attrs.frozen(slots=True, weakref_slot=False)
class ToolCallPart:
    """A tool call: ``arguments`` parsed for execution, ``raw_arguments`` exactly as received.

    ``arguments`` is None when ``raw_arguments`` is not a JSON object (models do send broken JSON);
    ``arguments_error`` then says why. Such a call is replayed byte for byte, never executed.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] | None = attrs.field(converter=frozen_arguments)
    raw_arguments: str = ""
    continuation: int | None = None
    arguments_error: str | None = None

    def parsed_arguments(self) -> Mapping[str, Any]:
        """The arguments as a JSON object, for an API that takes objects: ``raw_arguments`` parsed (key
        order kept) when it is a JSON object, else ``arguments`` (``{}`` when there are none)."""
        try:
            value = json.loads(self.raw_arguments)
        except ValueError:
            value = None
        result: Mapping[str, Any] = freeze(value) if isinstance(value, dict) else self.arguments or freeze({})
        return result


def parse_arguments(raw: str) -> tuple[Mapping[str, Any] | None, str | None]:
    """``(arguments, None)`` when ``raw`` is a JSON object (an empty string counts as ``{}``), else
    ``(None, why)``: how every decoder reads a tool call's argument text."""
    if not raw.strip():
        return {}, None
    return parse_json_object(raw)


def parse_json_object(raw: str) -> tuple[Mapping[str, Any] | None, str | None]:
    """``(value, None)`` when ``raw`` is a JSON object, else ``(None, why)`` (an empty string is not one)."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON: {exc.msg} (char {exc.pos})"
    if not isinstance(value, dict):
        return None, f"arguments are JSON {type(value).__name__}, not an object"
    return value, None


@attrs.frozen(slots=True, weakref_slot=False)
class ToolResultPart:
    """A tool result as sent: ``content`` is the exact string (JSON values are serialized canonically)."""

    call_id: str
    content: str
    is_error: bool = False

    @classmethod
    def of(cls, call_id: str, value: Any) -> ToolResultPart:
        """The part for the result ``value`` of call ``call_id`` (:func:`result_text`): equal results give
        equal bytes (stanfordnlp/dspy#10216); a value that is not JSON is a
        :class:`~reasonstate.errors.ToolResultError` naming the call, before anything is sent."""
        try:
            text, is_error = result_text(value)
        except ToolResultError as exc:
            raise ToolResultError(f"result for {call_id!r} is {exc}") from exc
        return cls(call_id=call_id, content=text, is_error=is_error)


@attrs.frozen(slots=True)
class ToolResult:
    """A tool result with an error flag; plain values passed to ``send_tool_results`` mean success.

    ``content`` is sent as is when it is a string, else as canonical JSON (sorted keys, compact), so equal
    results give equal bytes; a value that is not JSON-serializable is a
    :class:`~reasonstate.errors.ToolResultError` before anything is sent (under ``run``, where a handler
    returned it: an error result saying so). A handler may return one to report a failure itself.
    """

    content: Any
    is_error: bool = False


def result_text(value: Any) -> tuple[str, bool]:
    """``(text, is_error)`` of a result: a string as is, any other JSON value as canonical JSON (sorted keys,
    compact, non-ASCII kept); :class:`~reasonstate.errors.ToolResultError` when it is not JSON."""
    is_error = False
    if isinstance(value, ToolResult):
        is_error, value = value.is_error, value.content
    if isinstance(value, str):
        return value, is_error
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolResultError(f"not JSON-serializable: {exc}") from exc
    return text, is_error


@attrs.frozen(slots=True, weakref_slot=False)
class OpaquePart:
    """A block of a type we do not model; kept verbatim in its continuation, never dropped."""

    type: str
    continuation: int


Part = TextPart | ReasoningPart | ToolCallPart | OpaquePart


#: the shared flag tuples of :class:`TurnView`: every tuple of up to 4 flags (30 of them), made once
_FLAGS: dict[tuple[bool, ...], tuple[bool, ...]] = {
    flags: flags for n in range(1, 5) for flags in itertools.product((True, False), repeat=n)
}


def _shared_flags(flags: tuple[bool, ...]) -> tuple[bool, ...]:
    """The shared tuple equal to ``flags`` (of bools) when there is one, else ``flags``."""
    if type(flags) is tuple and len(flags) <= 4 and all(type(f) is bool for f in flags):
        return _FLAGS.get(flags, flags)
    return flags


def _shared_name(name: str) -> str:
    """One object for equal short names (a stop reason): ``sys.intern`` for an exact ``str``."""
    return sys.intern(name) if type(name) is str else name


def _usage_repr(packed: Any) -> str:
    return repr(unpacked_usage(packed))


@attrs.frozen(slots=True, weakref_slot=False)
class Step:
    """One model call: its output parts, verbatim continuation payloads, stop reason, and tool results.

    ``usage`` is kept packed into one ``int`` and rebuilt, equal, when read (``Step(usage=u).usage == u``;
    ``==``, ``hash`` and ``attrs.evolve`` as before)."""

    parts: tuple[Part, ...]
    continuation: tuple[Continuation, ...]
    #: one object per reason name (``end_turn``, ``tool_use``, ...), not one per step
    stop_reason: str = attrs.field(converter=_shared_name)
    #: the ``usage`` given, packed into one ``int`` (:func:`~reasonstate.state.execution.packed_usage`,
    #: shared with the request's record); read as :attr:`usage`
    _usage: PackedUsage = attrs.field(alias="usage", converter=packed_usage, repr=_usage_repr)
    model: str
    tool_results: tuple[ToolResultPart, ...] = ()
    response_id: str | None = None
    #: the vendor keeps this response server-side (OpenAI ``store=true``), so the next request may refer
    #: to it by ``response_id`` instead of replaying it (docs/protocols.md §1.4 A)
    response_stored: bool = False

    @property
    def usage(self) -> Usage:
        """The request's token usage (kept packed: issue 21, state in proportion to the content)."""
        return unpacked_usage(self._usage)

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        """The step's tool calls, in the model's declared order."""
        return tuple(p for p in self.parts if isinstance(p, ToolCallPart))

    @property
    def reasoning_text(self) -> str:
        """Every reasoning part's text, joined (empty when the vendor showed none)."""
        return "".join(p.text for p in self.parts if isinstance(p, ReasoningPart))

    @property
    def text(self) -> str:
        """Every text part, joined: the step's visible answer."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


@attrs.frozen(slots=True, weakref_slot=False)
class TurnView:
    """How a closed turn is replayed from now on.

    ``keep_reasoning[i]`` says whether step i's reasoning goes back; ``summary`` (Compress) replaces the
    dropped reasoning with one text note in the final step. ``policy`` names who decided.
    """

    #: equal short flag tuples are one object (most closed turns have ``(True,)``)
    keep_reasoning: tuple[bool, ...] = attrs.field(converter=_shared_flags)
    policy: str
    summary: str | None = None

    @property
    def keeps_all(self) -> bool:
        """True when the view replays the turn as it was (every step's reasoning, no summary)."""
        return all(self.keep_reasoning) and self.summary is None


#: the shared views: equal views without a summary are one object (issue 21: most closed turns have the
#: same view, and one per turn was 64 bytes of each turn's state); bounded, beyond it a view is its own
_VIEWS: dict[tuple[tuple[bool, ...], str], TurnView] = {}
_VIEWS_MAX = 1024


def _shared_view(view: TurnView | None) -> TurnView | None:
    """The shared view equal to ``view`` when it has no summary (a value: equal views are
    interchangeable), else ``view``."""
    if type(view) is not TurnView or view.summary is not None or type(view.policy) is not str:
        return view
    if len(view.keep_reasoning) > 4:  # only the short views are shared
        return view
    return interned(_VIEWS, (view.keep_reasoning, view.policy), view, _VIEWS_MAX)


@attrs.frozen(slots=True)
class Turn:
    """A user message and the steps that answered it; ``view`` is None while the turn is open."""

    index: int
    user: str
    steps: tuple[Step, ...] = ()
    #: equal views without a summary are one shared object
    view: TurnView | None = attrs.field(default=None, converter=_shared_view)

    def with_steps(self, steps: tuple[Step, ...]) -> Turn:
        """This turn with ``steps`` (a new value: a codec's memo has no entry for it)."""
        return Turn(self.index, self.user, steps, self.view)

    def with_view(self, view: TurnView | None) -> Turn:
        """This turn with ``view`` (a new value: a codec's memo has no entry for it)."""
        return Turn(self.index, self.user, self.steps, view)

    @property
    def closed(self) -> bool:
        """True once the turn's final answer arrived and its view was decided."""
        return self.view is not None

    @property
    def final_text(self) -> str:
        """The last step's text (the answer, once the turn is closed)."""
        return self.steps[-1].text if self.steps else ""


#: the synthetic user message that opens a folded history; the summary answers it as the assistant
FOLD_INTRO = "[Summary of the earlier conversation follows]"


@attrs.frozen(slots=True)
class Folded:
    """A fold (:class:`~reasonstate.policies.Fold`): turns ``0..through`` are replaced, in every request
    from now on, by ``summary``.

    The turns stay in the history (the canonical record, with their continuation payloads); they are
    never rendered again. Requests render the folded history as :meth:`History.rendered` says: a synthetic
    user message :data:`FOLD_INTRO`, the summary as one assistant message, then the tail turns. A later
    fold replaces this value (its summary covers this one's).
    """

    through: int
    summary: str
    # the synthetic turn, built with the fold (a value derived from the summary, never set later), so the
    # codecs' per-turn memoization (by identity) reuses it for every request of this fold
    _turn: Turn = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(lambda f: _summary_turn(f.summary), takes_self=True),
    )

    def turn(self) -> Turn:
        """The synthetic closed turn that stands for the folded head (index -1: no real turn has it)."""
        return self._turn


def _summary_turn(summary: str) -> Turn:
    step = Step(parts=(TextPart(summary),), continuation=(), stop_reason="end_turn", usage=Usage(), model="")
    return Turn(-1, FOLD_INTRO, (step,), TurnView((True,), policy="fold"))


@attrs.frozen(slots=True)
class History:
    """The turns of a session, oldest first (``turns[i].index == i``); only the last may be open.

    ``fold`` (None unless a :class:`~reasonstate.policies.Fold` folded the head) says which turns are
    replaced by a summary in requests; every ``with_*`` keeps it.
    """

    turns: tuple[Turn, ...] = ()
    fold: Folded | None = None

    @property
    def open_turn(self) -> Turn | None:
        """The last turn when it is still open (a tool chain in progress), else None."""
        if self.turns and not self.turns[-1].closed:
            return self.turns[-1]
        return None

    # The ``with_*`` copies are tuple concatenations: one C-speed pass over the turns each (``(*t, x)``
    # builds a list, copies it into a tuple and frees it: three), and every request makes a few of them
    # (issue 21: own CPU per request).
    def with_turn(self, turn: Turn) -> History:
        """A new history with ``turn`` appended."""
        return History(tuple(self.turns) + (turn,), self.fold)  # noqa: RUF005 (one pass)

    def with_last_turn(self, turn: Turn) -> History:
        """A new history with the last turn replaced by ``turn``."""
        return History(tuple(self.turns[:-1]) + (turn,), self.fold)  # noqa: RUF005 (one pass)

    def with_view(self, index: int, view: TurnView) -> History:
        """A new history with turn ``index``'s view set to ``view``."""
        turns = tuple(self.turns)
        i = range(len(turns))[index]  # a negative index counts from the end, as before
        return History(turns[:i] + (turns[i].with_view(view),) + turns[i + 1 :], self.fold)  # noqa: RUF005

    def with_fold(self, fold: Folded | None) -> History:
        """A new history whose turns ``0..fold.through`` are folded into ``fold.summary``."""
        return History(self.turns, fold)

    def with_turns(self, turns: tuple[Turn, ...]) -> History:
        """A new history with ``turns`` (same length, same indices) and this history's fold."""
        return History(turns, self.fold)

    def rendered(self) -> History:
        """What requests are built from: this history when nothing is folded, else the synthetic summary
        turn (:meth:`Folded.turn`) followed by the turns after ``fold.through``, keeping their indices.

        The synthetic pair (a user message, then the summary as the assistant's answer) keeps every
        vendor's role rules: the conversation still starts with a user message and roles alternate
        (docs/protocols.md §4.3 for Anthropic; Gemini and Chat Completions accept the same shape).
        """
        if self.fold is None:
            return self
        return History((self.fold.turn(), *self.turns[self.fold.through + 1 :]))

    def __len__(self) -> int:
        return len(self.turns)
