"""Tool-call repair for ``Session.run``: pure functions over values, no I/O, no session state.

Three repairs, each reported as a ``tool.repaired`` trace event by the session (``repair`` names it):

* ``flatten`` — a tool whose JSON-schema parameters nest deeper than :data:`~reasonstate.prefix.MAX_DEPTH`
  object levels or have more than :data:`~reasonstate.prefix.MAX_LEAVES` leaves is offered with dotted flat
  property names (:func:`~reasonstate.prefix.flat_schema`, once, when the :class:`~reasonstate.prefix.Tool`
  is built, so every request sends the same bytes); the model's flat arguments are re-nested before the
  handler runs (:func:`nest_arguments`);
* ``scavenge`` — a reply without a tool call whose text or reasoning holds one (a DeepSeek DSML invoke block
  or a JSON object naming a known tool) gives the calls :func:`scavenge` finds;
* ``arguments_completed`` / ``arguments_invalid`` — argument text that is a JSON object cut short is
  completed only when the completion is unambiguous (:func:`json_completion`) and the result has the
  schema's required keys; anything else is an explicit invalid-arguments error for the model, never a
  handler run on ``{}``.

Invariant: nothing here sees or returns a continuation payload; the caller runs handlers on the repaired
values and keeps the model's own bytes (raw arguments, reasoning, signatures) exactly as received.

The flat schema a tool offers is the prefix's (:mod:`reasonstate.prefix`, below the runtime); this module
reads it from the :class:`~reasonstate.prefix.Tool` and re-nests what the model sends back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

import attrs

from reasonstate.prefix import Tool
from reasonstate.state.history import parse_json_object

__all__ = [
    "Found",
    "json_completion",
    "missing_required",
    "nest_arguments",
    "repaired",
    "scavenge",
    "scavenged_message",
]

# -- flat arguments ----------------------------------------------------------------------------------------


def nest_arguments(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]] | None:
    """The flat arguments of a flattened tool re-nested into its own schema's shape, and the flat names that
    were split; None when two names claim the same place (``"a"`` and ``"a.b"``).

    Only dotted names are split (a flattened schema has no dotted name of its own); any other key is kept
    as given. ``{"address.city": "Paris", "name": "Ann"}`` → ``{"address": {"city": "Paris"}, "name":
    "Ann"}``, ``["address.city"]``.
    """
    nested: dict[str, Any] = {}
    split: list[str] = []
    for key, value in arguments.items():
        if "." not in key:
            if key in nested:
                return None
            nested[key] = value
            continue
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                return None
            node = child
        if leaf in node:
            return None
        node[leaf] = value
        split.append(key)
    return nested, split


def missing_required(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The names ``schema`` lists as required (top level) that ``arguments`` lacks, in schema order."""
    return [name for name in schema.get("required") or () if name not in arguments]


# -- truncated JSON ----------------------------------------------------------------------------------------

_LITERALS = ("true", "false", "null")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WS = " \t\n\r"


class _Ambiguous(Exception):
    pass


def _string_end(text: str, i: int) -> int:
    """The index after the closing quote of the string opening at ``text[i]``, or -1 when the text ends
    inside it."""
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        else:
            i += 1
    return -1


def json_completion(text: str) -> str | None:
    """The closers that complete ``text``, a JSON object cut short, or None when the completion is not
    unambiguous (or nothing is missing, or the text is broken somewhere else).

    Completable: the text is a JSON object whose only missing bytes are the closing ``]`` / ``}`` of its
    open containers, i.e. it stops right after a complete value (string, ``true``/``false``/``null``, or a
    closed object or array), possibly followed by whitespace. Ambiguous (None), because more than closers
    is missing or the value the model meant is unknown:

    * inside a string (a key, or a value cut at an unknown point: ``{"city": "Par``);
    * a number at the very end (``{"n": 12`` may have been ``125``);
    * a truncated literal (``{"ok": tru``);
    * after a key, a colon or a comma (``{"a"``, ``{"a":``, ``{"a": 1,``): a dangling key or element;
    * an open object or array with nothing in it (``{``, ``{"a": [``): what it held is unknown.

    ``json.loads(text + json_completion(text))`` is then a dict.
    """
    stack: list[str] = []  # "{" or "["
    # what the innermost container expects next: "key", "colon", "value", "more" (comma or close);
    # "first" = first key or close, "first_value" = first element or close
    expect = "start"
    i, n = 0, len(text)
    try:
        while i < n:
            c = text[i]
            if c in _WS:
                i += 1
                continue
            if expect == "done":
                return None
            if expect in ("key", "first") and c == '"':
                end = _string_end(text, i)
                if end < 0:
                    raise _Ambiguous
                i, expect = end, "colon"
            elif expect == "colon" and c == ":":
                i, expect = i + 1, "value"
            elif expect == "more" and c == ",":
                i, expect = i + 1, "key" if stack[-1] == "{" else "value"
            elif (expect == "more" and c in "}]") or (expect, c) in (("first", "}"), ("first_value", "]")):
                if (stack[-1], c) not in (("{", "}"), ("[", "]")):
                    return None
                stack.pop()
                i, expect = i + 1, "more" if stack else "done"
            elif expect == "start":
                if c != "{":
                    return None
                stack.append("{")
                i, expect = i + 1, "first"
            elif expect in ("value", "first_value"):
                if c in "{[":
                    stack.append(c)
                    i, expect = i + 1, "first" if c == "{" else "first_value"
                elif c == '"':
                    end = _string_end(text, i)
                    if end < 0:
                        raise _Ambiguous
                    i, expect = end, "more"
                elif c in "-0123456789":
                    match = _NUMBER.match(text, i)
                    if match is None or match.end() == n:
                        raise _Ambiguous
                    i, expect = match.end(), "more"
                else:
                    word = next((w for w in _LITERALS if text.startswith(w, i)), None)
                    if word is None:
                        if any(w.startswith(text[i:]) for w in _LITERALS):
                            raise _Ambiguous  # a literal cut short
                        return None
                    i, expect = i + len(word), "more"
            else:
                return None
    except _Ambiguous:
        return None
    if expect != "more" or not stack:
        return None
    closers = "".join("}" if c == "{" else "]" for c in reversed(stack))
    try:
        value = json.loads(text + closers)
    except ValueError:
        return None
    return closers if isinstance(value, dict) else None


# -- scavenge ----------------------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Found:
    """A tool call found in a reply's text or reasoning.

    ``raw_arguments`` is the argument text as found (a DSML block's parameters rendered as canonical JSON,
    or the JSON object's arguments); ``arguments`` is its parsed object, None when it is not one (then
    ``arguments_error`` says why); ``source`` is ``"dsml"`` or ``"json"``; ``where`` is ``"text"`` or
    ``"reasoning"``.
    """

    name: str
    arguments: Mapping[str, Any] | None
    raw_arguments: str
    arguments_error: str | None
    source: str
    where: str


# DeepSeek V3.2's tool-call encoding (``<｜DSML｜function_calls>``; V4 writes ``<｜DSML｜tool_calls>``), one
# invoke per call; a parameter with ``string="true"`` is its text as it stands, ``string="false"`` is JSON
# (docs/protocols.md §3.2)
_DSML = "｜DSML｜"
_INVOKE = re.compile(rf'<{_DSML}invoke\s+name="([^"]*)"\s*>(.*?)</{_DSML}invoke>', re.S)
_PARAMETER = re.compile(
    rf'<{_DSML}parameter\s+name="([^"]*)"(?:\s+string="(true|false)")?\s*>(.*?)</{_DSML}parameter>', re.S
)
# the call shapes models write as plain JSON: {"name", "arguments"|"parameters"|"input"|"args"},
# {"tool"|"tool_name", ...} and OpenAI's {"function": {"name", "arguments"}}
_NAME_KEYS = ("name", "tool", "tool_name")
_ARGUMENT_KEYS = ("arguments", "parameters", "input", "args")


def _dsml(text: str, tools: frozenset[str], where: str) -> list[Found]:
    found = []
    for name, body in _INVOKE.findall(text):
        if name not in tools:
            continue
        arguments: dict[str, Any] = {}
        error = None
        for key, is_string, value in _PARAMETER.findall(body):
            if is_string == "false":
                try:
                    arguments[key] = json.loads(value)
                except ValueError as exc:
                    error = f"parameter {key!r} is not valid JSON: {exc}"
            else:
                arguments[key] = value
        raw = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        found.append(Found(name, None if error else arguments, raw, error, "dsml", where))
    return found


_OBJECT_START = re.compile(r'\{\s*"')
#: failed parse attempts per text before the search for JSON calls gives up (each may read to the end of
#: the text, so an unbounded search is quadratic in a long reasoning full of braces)
_MAX_ATTEMPTS = 256


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every top-level JSON object in ``text`` (an object inside one that was read is not read again)."""
    decoder = json.JSONDecoder()
    failed, start = 0, 0
    while failed < _MAX_ATTEMPTS:
        match = _OBJECT_START.search(text, start)
        if match is None:
            return
        try:
            value, end = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            failed, start = failed + 1, match.start() + 1
            continue
        if isinstance(value, dict):
            yield value
        start = end


def _json_call(value: Mapping[str, Any], tools: frozenset[str], where: str) -> Found | None:
    function = value.get("function")
    if isinstance(function, Mapping):
        value = function
    name = next((value[k] for k in _NAME_KEYS if isinstance(value.get(k), str)), None)
    if name not in tools:
        return None
    key = next((k for k in _ARGUMENT_KEYS if k in value), None)
    if key is None:
        return None
    arguments = value[key]
    if isinstance(arguments, str):  # OpenAI's shape: the arguments as JSON text
        parsed, error = parse_json_object(arguments)
        return Found(str(name), parsed, arguments, error, "json", where)
    if not isinstance(arguments, dict):
        return None
    raw = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return Found(str(name), arguments, raw, None, "json", where)


def scavenge(text: str, reasoning: str, tools: Iterable[str]) -> list[Found]:
    """The tool calls a reply's ``text`` or ``reasoning`` holds, naming one of ``tools``; [] when none.

    Looked for in this order, the first place that holds any call giving all of them (so a call the model
    thought about and then wrote is not found twice): DSML invoke blocks in the text, then in the
    reasoning, then JSON call objects in the text, then in the reasoning. A call naming an unknown tool is
    never found; a DSML parameter marked ``string="false"`` whose value is not JSON makes the call's
    ``arguments`` None (the caller answers it with an invalid-arguments error).
    """
    names = frozenset(tools)
    # a reply that names no tool holds no call (and is not parsed for one)
    text, reasoning = (s if any(name in s for name in names) else "" for s in (text, reasoning))
    for where, source in (("text", text), ("reasoning", reasoning)):
        if _DSML in source:
            found = _dsml(source, names, where)
            if found:
                return found
    for where, source in (("text", text), ("reasoning", reasoning)):
        calls = [c for c in (_json_call(v, names, where) for v in _json_objects(source)) if c is not None]
        if calls:
            return calls
    return []


# -- the calls ``Session.run`` executes ------------------------------------------------------------------


class _CallToRepair(Protocol):
    """A tool call as repair reads it (the session's ``ToolCall``)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Mapping[str, Any] | None: ...

    @property
    def raw_arguments(self) -> str: ...

    @property
    def arguments_error(self) -> str | None: ...


_C = TypeVar("_C", bound=_CallToRepair)


def _evolve(call: _C, **changes: Any) -> _C:
    """``attrs.evolve`` of a call (a :class:`~reasonstate.engine.ToolCall`, an attrs value)."""
    return cast(_C, attrs.evolve(cast(Any, call), **changes))


def repaired(tool: Tool | None, call: _C) -> tuple[_C, list[dict[str, Any]]]:
    """``call`` as its handler must see it, and the ``tool.repaired`` events that say what changed.

    Argument text that is not a JSON object is completed when :func:`json_completion` allows it and the
    completed object has the required keys of the schema the model was offered (``arguments_completed``);
    otherwise the call keeps ``arguments=None`` with an ``arguments_error`` the model gets back as an
    error result (``arguments_invalid``). A flattened tool's dotted names are then re-nested
    (``flatten``). Only ``arguments`` and ``arguments_error`` change: ``raw_arguments`` stays the model's.
    """
    if tool is None:
        return call, []
    head = {"call_id": call.id, "tool": call.name}
    arguments = call.arguments
    events: list[dict[str, Any]] = []
    if arguments is None:
        closers = json_completion(call.raw_arguments)
        if closers is None:
            return call, [{"repair": "arguments_invalid", **head, "error": call.arguments_error}]
        completed = json.loads(call.raw_arguments + closers)
        missing = missing_required(completed, tool.offered_parameters)
        if missing:
            error = f"arguments were cut short: closing them with {closers!r} leaves required {missing} out"
            invalid = _evolve(call, arguments_error=error)
            return invalid, [{"repair": "arguments_invalid", **head, "error": error}]
        arguments = completed
        events.append({"repair": "arguments_completed", **head, "added": closers})
    if tool.flattened:
        nested = nest_arguments(arguments)
        if nested is None:
            error = "arguments name one place twice (a flat name and an object above it)"
            invalid = _evolve(call, arguments=None, arguments_error=error)
            return invalid, [*events, {"repair": "arguments_invalid", **head, "error": error}]
        arguments, split = nested
        if split:
            events.append({"repair": "flatten", **head, "split": split})
    if not events:
        return call, []
    return _evolve(call, arguments=arguments, arguments_error=None), events


def scavenged_message(calls: Sequence[Any], results: Sequence[tuple[str, bool]]) -> str:
    """The user message that answers calls found in a reply's text or reasoning: each call's name, the
    arguments the model wrote and its result (``content``, ``is_error``), in the order found.

    The vendor never emitted these calls, so their results cannot be tool results (a tool result must
    answer a tool call of the assistant message before it); a user message is valid on every API.
    """
    parts = [
        f"Your last reply wrote {len(calls)} tool call(s) in its text or reasoning instead of calling the "
        "tool(s); they were run as written:"
    ]
    for call, (content, is_error) in zip(calls, results, strict=True):
        error = ' is_error="true"' if is_error else ""
        parts.append(
            f'<tool_result name="{call.name}" arguments={json.dumps(call.raw_arguments, ensure_ascii=False)}'
            f"{error}>\n{content}\n</tool_result>"
        )
    return "\n".join(parts)
