"""Where two requests part, and why: the vendor-neutral half of a cache-break analysis.

A request is read as the vendor's prefix cache reads it: a :class:`View`, a chain of :class:`Unit` values
in prompt order — the model, the prompt-relevant options, each tool, the system prompt, then the history
(one unit per content block on Anthropic, per input item on Responses, per message on chat, per content on
Gemini; docs/protocols.md §1.5, §3.4, §4.4, §5.3). Each vendor room builds the views of its request bodies
(``reasonstate.adapters.view_of``) and hands them what only it knows about its units (which hold reasoning:
a :class:`Reasoning`), so :func:`explain` stays vendor-neutral: it finds the first unit where a request stops
extending an earlier one, the JSON path of the first differing value inside it, and names the cause from
:data:`CAUSES`. The bare chain measures it reads (:func:`~reasonstate.cache.rules.common_prefix_len`,
:func:`~reasonstate.cache.rules.divergence`) are the predictor's, in :mod:`reasonstate.cache.rules`.
Everything here is pure and never raises on odd input (a missing key is an absent value).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Protocol, get_args

import attrs

from reasonstate.cache.rules import common_prefix_len
from reasonstate.state.frozen import compact_encoder

__all__ = [
    "CAUSES",
    "NOT_OPTIONS",
    "NO_REASONING",
    "Cause",
    "Divergence",
    "Reasoning",
    "Section",
    "Unit",
    "View",
    "ViewBuilder",
    "compact_key",
    "explain",
    "listed",
    "model_name",
    "options_of",
    "request_body",
    "walk",
    "without_nulls",
]


# -- unit chains --------------------------------------------------------------------------------------------


# -- views --------------------------------------------------------------------------------------------------

Cause = Literal[
    "system_changed",
    "tools_changed",
    "tools_reordered",
    "tool_schema_reserialized",
    "history_rewritten",
    "reasoning_dropped",
    "compacted",
    "server_cleared",
    "arguments_reserialized",
    "timestamp_in_prefix",
    "model_changed",
    "options_changed",
]
#: the vocabulary of break causes (issue 12), in the order above
CAUSES: tuple[Cause, ...] = get_args(Cause)

Section = Literal["model", "options", "tools", "system", "history"]

#: top-level keys that are per-call sampling or delivery knobs, not part of what a prefix cache keys on
NOT_OPTIONS = frozenset(
    {
        "stream",
        "stream_options",
        "max_tokens",
        "max_output_tokens",
        "max_completion_tokens",
        "maxOutputTokens",
        "temperature",
        "top_p",
        "topP",
        "top_k",
        "topK",
        "seed",
        "stop",
        "stop_sequences",
        "stopSequences",
        "metadata",
        "user",
        "store",
        "include",
        "service_tier",
        "n",
        "candidateCount",
        "previous_response_id",
        "prompt_cache_key",
        "cache_control",
        "labels",
    }
)

# dates and clock times: what a prompt template puts in a prefix when it stamps "now"
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}([T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?|\b\d{1,2}:\d{2}(:\d{2})?\b"
)


class Reasoning(Protocol):
    """What a vendor room knows about the reasoning inside its units (a view carries its room's)."""

    def reasoning_only(self, value: Any) -> bool:
        """Whether a unit is nothing but reasoning (a thinking block, a reasoning item, thought parts)."""
        ...

    def without_reasoning(self, value: Any) -> Any:
        """The unit with the reasoning it carries inside taken out (``value`` itself when it has none)."""
        ...

    def dropped_inside(self, before: Any, after: Any) -> bool:
        """Whether unit ``after`` is unit ``before`` with reasoning it carried inside left out, and nothing
        else changed (:func:`stripped_inside` unless the vendor's rules keep part of it)."""
        ...


def stripped_inside(reading: Reasoning, before: Any, after: Any) -> bool:
    """Whether ``before`` carried reasoning inside, ``after`` carries none, and without it they are equal:
    the reasoning a unit carries left out whole (a chat message's ``reasoning_content``)."""
    bare_before = reading.without_reasoning(before)
    bare_after = reading.without_reasoning(after)
    return bool(bare_before != before) and not bool(bare_after != after) and bool(bare_before == bare_after)


class _NoReasoning:
    """Units that never carry reasoning."""

    def reasoning_only(self, value: Any) -> bool:
        return False

    def without_reasoning(self, value: Any) -> Any:
        return value

    def dropped_inside(self, before: Any, after: Any) -> bool:
        return False


NO_REASONING: Reasoning = _NoReasoning()


@attrs.frozen(slots=True)
class ReasoningUnits:
    """Units that are reasoning by their ``type`` alone (a thinking block, a reasoning item, a thought step):
    a unit is reasoning or it is not, and none carries reasoning inside."""

    types: frozenset[str]

    def reasoning_only(self, value: Any) -> bool:
        return isinstance(value, Mapping) and value.get("type") in self.types

    def without_reasoning(self, value: Any) -> Any:
        return value

    def dropped_inside(self, before: Any, after: Any) -> bool:
        return False


@attrs.frozen(slots=True)
class Unit:
    """One prefix unit: its section, its JSON path in the body, the value sent, and ``key``: the bytes the
    vendor's cache compares (compact JSON; sorted keys where the vendor renders through a template)."""

    section: Section
    path: str
    value: Any
    key: str


@attrs.frozen(slots=True)
class View:
    """A request as the vendor's prefix cache reads it. ``breakpoints`` (Anthropic): 1-based unit indices
    carrying ``cache_control``; ``prefix_units``: the units up to the end of the system prompt;
    ``reasoning``: the room's reading of the reasoning inside its units."""

    api: str
    model: str
    units: tuple[Unit, ...]
    breakpoints: tuple[int, ...] = ()
    prefix_units: int = 0
    reasoning: Reasoning = attrs.field(default=NO_REASONING, eq=False, repr=False)
    #: each unit's ``key``, in order (what prefix comparisons and cache predictions read)
    keys: tuple[str, ...] = attrs.field(
        init=False, default=attrs.Factory(lambda v: tuple(u.key for u in v.units), takes_self=True)
    )
    #: JSON paths of the blocks the vendor clears server-side before it reads the prompt (Anthropic
    #: context editing, docs/protocols.md §4.7): left out of ``units``, or keyed as the vendor reads them
    cleared: frozenset[str] = attrs.field(default=frozenset(), eq=False, repr=False)
    #: False when what the vendor caches depends on its own token count (an edit triggered by it, §4.7)
    predictable: bool = attrs.field(default=True, eq=False, repr=False)

    @property
    def history_units(self) -> int:
        return sum(1 for u in self.units if u.section == "history")


@attrs.frozen(slots=True)
class Divergence:
    """Where a request stopped extending the previous one of its conversation.

    ``unit``: the index of the first differing prefix unit; ``path``: the JSON path of the first differing
    value inside it (in the later request, or in the earlier one when the later request ends there);
    ``cause``: a word of :data:`CAUSES`; ``decision``: for ``reasoning_dropped`` seen by a session, the
    policy decision that dropped it (a guard on a plain client cannot know it: None).
    """

    unit: int
    path: str
    cause: Cause
    decision: str | None = None


# -- what the rooms build views with ------------------------------------------------------------------------

_ENCODERS = {sort: compact_encoder(sort_keys=sort) for sort in (False, True)}


def compact_key(value: Any, *, sort: bool) -> str:
    """The compact JSON a cache compares (sorted keys where the vendor renders through a template)."""
    return _ENCODERS[sort](value)


def without_nulls(value: Any) -> Any:
    """``value`` with every ``null`` member of an object left out, at any depth: what a unit key reads of
    a message or content whose SDK writes absent fields as ``null`` (a cache keys on the rendered prompt, in
    which an absent field and a null one read alike)."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def listed(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else no items (odd input is an absent value)."""
    return list(value) if isinstance(value, list) else []


def options_of(body: Mapping[str, Any], prompt_keys: frozenset[str]) -> dict[str, Any]:
    """The options of ``body`` a prefix cache keys on: every top-level key but the prompt's
    (``prompt_keys``) and the per-call knobs (:data:`NOT_OPTIONS`, also inside a generation config)."""
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key in prompt_keys or key in NOT_OPTIONS:
            continue
        if isinstance(value, Mapping) and key in ("generationConfig", "generation_config"):
            value = {k: v for k, v in value.items() if k not in NOT_OPTIONS}
            if not value:
                continue
        out[key] = value
    return out


class ViewBuilder:
    """A request's units, collected in prompt order by a room: the model and options units first.

    ``namespace`` is the model unit's key (what the cache is partitioned by: the model, on Responses also
    the ``prompt_cache_key``); ``sort``: whether unit keys sort their JSON keys (the vendor renders items
    through a template) or keep them as sent (Anthropic's cache keys on the JSON as received)."""

    def __init__(
        self,
        api: str,
        body: Mapping[str, Any],
        name: str,
        namespace: str,
        *,
        prompt: frozenset[str],
        sort: bool,
    ) -> None:
        self.api, self.name, self.sort = api, name, sort
        options = options_of(body, prompt)
        self.units: list[Unit] = [
            Unit("model", "$.model", name, namespace),
            Unit("options", "$", options, compact_key(options, sort=True)),
        ]
        self.breakpoints: list[int] = []
        #: how many units the stable prefix holds (set by the room once its system prompt is in)
        self.prefix = 0
        #: the paths the vendor clears server-side (:attr:`View.cleared`)
        self.cleared: list[str] = []
        self.predictable = True

    def add(self, section: Section, path: str, value: Any, key_value: Any, role: str = "") -> None:
        """One unit: ``value`` as sent at ``path``, keyed on ``role`` + the compact JSON of ``key_value``."""
        self.units.append(Unit(section, path, value, role + compact_key(key_value, sort=self.sort)))

    def view(self, reasoning: Reasoning = NO_REASONING) -> View:
        return View(
            self.api,
            self.name,
            tuple(self.units),
            tuple(sorted(set(self.breakpoints))),
            self.prefix,
            reasoning,
            frozenset(self.cleared),
            self.predictable,
        )


def request_body(body: Any) -> Mapping[str, Any]:
    """``body`` when it is a JSON object, else an empty one (a view of odd input is a view of nothing)."""
    return body if isinstance(body, Mapping) else {}


def model_name(body: Mapping[str, Any], model: str | None) -> str:
    """The model of a request: ``model`` where the model is not in the body (Gemini: the URL), else the
    body's."""
    return str(model if model is not None else body.get("model", ""))


def walk(value: Any) -> Iterator[Any]:
    """``value`` and every value nested in it, depth first."""
    yield value
    if isinstance(value, Mapping):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


# -- the cause ----------------------------------------------------------------------------------------------


def explain(previous: View, current: View) -> Divergence | None:
    """Where and why ``current`` stops extending ``previous``; None when it extends it unit by unit.

    Invariant: None iff ``current.keys[:len(previous.keys)] == previous.keys``; otherwise ``unit`` is the
    first index where the two chains differ (or ``len(current.keys)`` when ``current`` is a strict prefix).
    """
    a, b = previous.keys, current.keys
    d = common_prefix_len(b, a)
    if d == len(a):
        return None
    before = previous.units[d]
    after = current.units[d] if d < len(current.units) else None
    cause = _cause(previous, current, d, before, after)
    if (
        after is None
        or cause == "server_cleared"
        or (cause == "reasoning_dropped" and previous.reasoning.reasoning_only(before.value))
    ):
        path = before.path  # where the earlier request had what this one lacks
    elif cause == "tools_reordered" or before.path != after.path:
        path = after.path
    else:
        path = _first_difference(before.value, after.value, after.path)
    return Divergence(d, path, cause)


def _cause(previous: View, current: View, d: int, before: Unit, after: Unit | None) -> Cause:
    sections = {before.section, after.section if after is not None else before.section}
    if "model" in sections:
        return "model_changed"
    if "options" in sections:
        return "options_changed"
    if "tools" in sections:
        old = [u for u in previous.units if u.section == "tools"]
        new = [u for u in current.units if u.section == "tools"]
        if sorted(u.key for u in old) == sorted(u.key for u in new):
            return "tools_reordered"
        if len(old) == len(new) and all(o.value == n.value for o, n in zip(old, new, strict=True)):
            return "tool_schema_reserialized"  # equal values, other bytes: key order or spelling
        return "tools_changed"
    if "system" in sections:
        if after is not None and _masked(before.value) == _masked(after.value):
            return "timestamp_in_prefix"
        return "system_changed"
    if before.path in current.cleared and before.path not in previous.cleared:
        # the vendor's context editing cleared this block from the prompt it caches (Anthropic,
        # docs/protocols.md §4.7): the request asked for it, the client's history is unchanged
        return "server_cleared"
    if after is None:
        return "history_rewritten"  # the later request is a strict prefix: a rewind
    if isinstance(after.value, Mapping) and after.value.get("type") == "compaction":
        # the history now starts at a vendor compaction item standing for what came before it
        # (OpenAI Responses, docs/protocols.md §1.9)
        return "compacted"
    reading = previous.reasoning
    if reading.reasoning_only(before.value) and not reading.reasoning_only(after.value):
        return "reasoning_dropped"
    # the earlier unit carried reasoning inside it, this one is it without that reasoning (the room's rule:
    # a Gemini content keeps the signatures on its other Parts, docs/protocols.md §5.4)
    if reading.dropped_inside(before.value, after.value):
        return "reasoning_dropped"
    if _has_call(before.value) and _arguments(before.value) == _arguments(after.value):
        return "arguments_reserialized"
    if _masked(before.value) == _masked(after.value):
        return "timestamp_in_prefix"
    if current.history_units < previous.history_units:
        return "compacted"
    return "history_rewritten"


def _masked(value: Any) -> str:
    return _TIMESTAMP.sub("<t>", compact_key(value, sort=True))


def _has_call(value: Any) -> bool:
    return any(
        isinstance(v, Mapping)
        and (v.get("type") in ("tool_use", "function_call") or "functionCall" in v or "function" in v)
        for v in walk(value)
    )


def _arguments(value: Any) -> Any:
    """``value`` with every argument string parsed and every mapping order-free (a comparison key)."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if k == "arguments" and isinstance(v, str):
                with contextlib.suppress(ValueError):
                    v = json.loads(v)
            out[k] = _arguments(v)
        return out
    if isinstance(value, list):
        return [_arguments(v) for v in value]
    return value


def _first_difference(a: Any, b: Any, path: str) -> str:
    """The JSON path of the first value where ``a`` and ``b`` differ (keys in ``b``'s order)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if list(a) != list(b) and dict(a) == dict(b):
            return path  # the same members in another order
        for k in b:
            if k not in a or a[k] != b[k] or compact_key(a[k], sort=False) != compact_key(b[k], sort=False):
                return _first_difference(a.get(k), b[k], f"{path}.{k}") if k in a else f"{path}.{k}"
        for k in a:
            if k not in b:
                return f"{path}.{k}"
        return path
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if compact_key(x, sort=False) != compact_key(y, sort=False):
                return _first_difference(x, y, f"{path}[{i}]")
        return f"{path}[{min(len(a), len(b))}]"
    return path
