"""The stable prefix of every request: system prompt, tools, few-shot examples.

Invariants:
  * ``canonical_bytes`` depends only on the content, never on dict insertion order or the order tools were
    listed in (tools are sorted by name; JSON schemas are key-sorted). Tool-schema key order and
    inventory order drifting between requests are classic cache busters (maximhq/bifrost PR #2082,
    pydantic/logfire#1930, anthropics/claude-code#92033);
  * ``fingerprint == "sha256:" + sha256(canonical_bytes)``;
  * a session's prefix changes only through ``Session.change_prefix``, which is a traced event.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from reasonstate.errors import InvalidOption
from reasonstate.state.frozen import compact_encoder, freeze

__all__ = ["MAX_DEPTH", "MAX_LEAVES", "Prefix", "Tool", "canonical_json", "flat_schema"]


# a clock time with seconds, also inside an ISO 8601 timestamp (``2026-12-01T03:32:20.123456``), where no
# word boundary precedes the hour
_CLOCK = re.compile(r"(?<![\d:])\d{1,2}:\d{2}:\d{2}(?:\.\d+)?(?![\d:])")


#: one encoder for :func:`canonical_json` (``json.dumps`` with options builds a new one on every call)
_CANONICAL = compact_encoder(sort_keys=True)


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys and non-ASCII kept: the one serialization of our own values (the same
    text as ``json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))``)."""
    return _CANONICAL(value)


#: the tool-name rule both vendors state: Anthropic ``^[a-zA-Z0-9_-]{1,64}$``, OpenAI "a-z, A-Z, 0-9,
#: underscores and dashes, at most 64" (docs/protocols.md §1.1, §4.2)
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _frozen_schema(value: Any) -> Mapping[str, Any]:
    """The schema key-sorted and frozen: a caller's later edit of its own dict changes nothing here."""
    if not isinstance(value, Mapping):
        raise InvalidOption(f"Tool(parameters=...) must be a JSON schema object (a dict), got {value!r}")
    try:
        text = canonical_json(dict(value))
    except (TypeError, ValueError) as exc:
        raise InvalidOption(f"Tool(parameters=...) is not JSON-serializable: {exc}") from exc
    plain = json.loads(text)
    mistake = _schema_mistake(plain)
    if mistake is not None:
        raise InvalidOption(f"Tool(parameters=...) is not a valid JSON schema: {mistake}")
    result: Mapping[str, Any] = freeze(plain)
    return result


#: the JSON Schema type names (JSON Schema Validation §6.1.1); anything else is a typo no vendor accepts
_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
#: keywords whose value is one subschema, a list of them, or a map of names to them
_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "$defs", "definitions", "patternProperties")


def _schema_mistake(schema: Any, at: str = "parameters") -> str | None:
    """The first mistake in a JSON schema that no vendor accepts, naming where (None: none found): a
    subschema that is not an object (or ``true``/``false``), a ``type`` that is not a JSON Schema type
    name, a ``required`` that is not a list of names or names a property ``properties`` does not define.
    A small structural check, not the metaschema: what it finds is always a mistake."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, Mapping):
        return f"{at} is {type(schema).__name__} {schema!r:.40}, not a schema object"
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        bad = [k for k in kinds if not isinstance(k, str) or k not in _JSON_TYPES]
        if bad:
            close = difflib.get_close_matches(str(bad[0]), sorted(_JSON_TYPES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"{at}.type {bad[0]!r} is not a JSON Schema type{hint}; one of {sorted(_JSON_TYPES)}"
    properties = schema.get("properties")
    required = schema.get("required")
    if required is not None:
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            return f"{at}.required must be a list of property names, got {required!r:.60}"
        if isinstance(properties, Mapping):
            missing = [r for r in required if r not in properties]
            if missing:
                return f"{at}.required names {missing[0]!r}, which {at}.properties does not define"
    for key in _ONE:
        if key in schema:
            found = _schema_mistake(schema[key], f"{at}.{key}")
            if found is not None:
                return found
    for key in _LIST:
        value = schema.get(key)
        if value is not None:
            if not isinstance(value, list):
                return f"{at}.{key} must be a list of schemas"
            for i, sub in enumerate(value):
                found = _schema_mistake(sub, f"{at}.{key}[{i}]")
                if found is not None:
                    return found
    for key in _MAP:
        value = schema.get(key)
        if value is not None:
            if not isinstance(value, Mapping):
                return f"{at}.{key} must be an object mapping names to schemas"
            for name, sub in value.items():
                found = _schema_mistake(sub, f"{at}.{key}.{name}")
                if found is not None:
                    return found
    return None


# -- the flat schema a tool offers (runtime/repair.py re-nests the flat arguments) -------------------------

#: object levels a tool's parameters may nest before they are flattened (``{"a": {"b": x}}`` is 2 levels)
MAX_DEPTH = 2
#: leaves (non-object properties) a tool's parameters may have before they are flattened
MAX_LEAVES = 10

# Anthropic's property-key rule ``^[a-zA-Z0-9_.-]{1,64}$`` (docs/protocols.md §4.2): a flat name must fit it
_FLAT_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,64}")
# what an object node may hold for its flat form to say the same thing (anything else: not flattened)
_OBJECT_KEYS = frozenset({"type", "properties", "required", "description", "title", "additionalProperties"})


def _is_object(node: Any) -> bool:
    return (
        isinstance(node, Mapping)
        and node.get("type") == "object"
        and isinstance(node.get("properties"), Mapping)
    )


def _depth_and_leaves(node: Mapping[str, Any]) -> tuple[int, int]:
    depth, leaves = 1, 0
    for child in node["properties"].values():
        if _is_object(child) and child["properties"]:
            d, n = _depth_and_leaves(child)
            depth, leaves = max(depth, d + 1), leaves + n
        else:
            leaves += 1
    return depth, leaves


def _flat_properties(
    node: Mapping[str, Any], path: str, required: bool, notes: tuple[str, ...]
) -> Iterator[tuple[str, Any, bool]]:
    """``(flat name, leaf schema, required)`` of every leaf under ``node``; a leaf is required when it and
    every object above it are required (an optional object's required keys cannot be said flat)."""
    inner = set(node.get("required") or ())
    for name, child in node["properties"].items():
        flat = f"{path}.{name}" if path else name
        if _is_object(child) and child["properties"]:
            note = (*notes, f"{flat}: {child['description']}") if child.get("description") else notes
            yield from _flat_properties(child, flat, required and name in inner, note)
        else:
            leaf = dict(child)
            if notes:
                leaf["description"] = " / ".join((*notes, str(leaf.get("description", "")))).rstrip(" /")
            yield flat, leaf, required and name in inner


def _flattenable(node: Mapping[str, Any]) -> bool:
    """Every object node says only what a flat form can say, and no property name holds a dot (a flat name
    must split back into exactly one path)."""
    for name, child in node["properties"].items():
        if not isinstance(name, str) or "." in name:
            return False
        nested = _is_object(child) and child["properties"]
        if nested and (set(child) - _OBJECT_KEYS or not _flattenable(child)):
            return False
    return True


def flat_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` with dotted flat property names, or None when it needs none or cannot take one.

    Flattened only when the schema is an object whose properties nest deeper than :data:`MAX_DEPTH` levels
    or have more than :data:`MAX_LEAVES` leaves, every nested object is plain (type, properties, required,
    description, title, additionalProperties: no ``$ref``, ``anyOf``, ...), no property name has a dot and
    every flat name fits the vendors' 64-character rule. A leaf keeps its own schema; the descriptions of
    the objects above it are prefixed to its description (``"address: Where to ship / The city"``); the
    flat name is required when the leaf and every object above it are required. The top level keeps its
    other keys (``description``, ``additionalProperties``, ...). Deterministic: equal schemas, equal output.
    """
    if not _is_object(schema) or not _flattenable(schema):
        return None
    depth, leaves = _depth_and_leaves(schema)
    if depth <= MAX_DEPTH and leaves <= MAX_LEAVES:
        return None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, leaf, needed in _flat_properties(schema, "", True, ()):
        if not _FLAT_NAME.fullmatch(name):
            return None
        properties[name] = leaf
        if needed:
            required.append(name)
    flat = {k: v for k, v in schema.items() if k not in ("properties", "required")}
    flat["properties"] = properties
    if required:
        flat["required"] = required
    return flat


def _tool_name(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not _TOOL_NAME.fullmatch(value):
        raise InvalidOption(
            f"Tool(name=...) must be 1-64 letters, digits, '_' or '-' (the vendors' rule), got {value!r}"
        )


def _text(what: str) -> Callable[[object, Any, Any], None]:
    def check(instance: object, attribute: Any, value: Any) -> None:
        if not isinstance(value, str):
            raise InvalidOption(f"{what} must be a string, got {type(value).__name__} {value!r:.80}")

    return check


def _handler(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        raise InvalidOption(f"Tool(handler=...) must be a callable or None, got {value!r}")


def _flag(what: str) -> Callable[[object, Any, Any], None]:
    def check(instance: object, attribute: Any, value: Any) -> None:
        if not isinstance(value, bool):
            raise InvalidOption(f"{what} must be True or False, got {value!r}")

    return check


def check_timeout(what: str, value: Any) -> float | None:
    """``value`` as a timeout in seconds (a finite number > 0) or None; anything else is
    :class:`~reasonstate.errors.InvalidOption` naming ``what``."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidOption(f"{what} must be a number of seconds > 0 (or None for no limit), got {value!r}")
    return float(value)


def _seconds(instance: object, attribute: Any, value: Any) -> None:
    check_timeout("Tool(timeout=...)", value)


@attrs.frozen(slots=True)
class Tool:
    """A tool the model may call. ``parameters`` is a JSON schema (stored key-sorted).

    ``handler`` (optional) is what ``Session.run`` calls with the parsed arguments (a plain function or an
    ``async def``); ``parallel_safe`` lets the runtime run it concurrently with other parallel-safe calls of
    the same step; ``timeout`` (seconds, optional) bounds one run of the handler: past it the model gets an
    error result (``run(tool_timeout=)`` is the default for tools without one).

    ``offered_parameters`` is the schema every request sends: ``parameters`` itself, or, with ``flatten``
    (the default) and parameters nesting deeper than 2 object levels or with more than 10 leaves, their
    dotted flat form (:func:`flat_schema`: ``"address.city"``), computed once
    here so the tools bytes are the same in every request. ``Session.run`` re-nests the model's flat
    arguments before the handler runs; the history keeps them as the model sent them.

    Invariants: ``name`` matches ``[a-zA-Z0-9_-]{1,64}`` (both vendors' rule) and anything else invalid is
    :class:`~reasonstate.errors.InvalidOption` at construction; ``parameters`` is copied, key-sorted and
    frozen, so a later edit of the caller's dict changes no request; ``handler`` is code, not data: it is
    not part of equality, of the prefix bytes or of a snapshot; ``parallel_safe`` and ``timeout`` are
    runtime settings: in snapshots, never in the prefix bytes.
    """

    name: str = attrs.field(validator=_tool_name)
    description: str = attrs.field(default="", validator=_text("Tool(description=...)"))
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}, converter=_frozen_schema
    )
    handler: Callable[..., Any] | None = attrs.field(default=None, eq=False, repr=False, validator=_handler)
    parallel_safe: bool = attrs.field(default=False, validator=_flag("Tool(parallel_safe=...)"))
    flatten: bool = attrs.field(default=True, validator=_flag("Tool(flatten=...)"))
    timeout: float | None = attrs.field(default=None, validator=_seconds)
    offered_parameters: Mapping[str, Any] = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(lambda self: self._offered(), takes_self=True),
    )

    def _offered(self) -> Mapping[str, Any]:
        flat = flat_schema(self.parameters) if self.flatten else None
        if flat is None:
            return self.parameters
        offered: Mapping[str, Any] = freeze(flat)
        return offered

    @property
    def flattened(self) -> bool:
        """Whether the model is offered the dotted flat form of ``parameters``."""
        return self.offered_parameters is not self.parameters

    def canonical(self) -> dict[str, Any]:
        """The tool as data (name, description, parameters, and ``flatten: false`` when flattening is
        off): what the prefix bytes are made of."""
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if not self.flatten:
            data["flatten"] = False
        return data


def _sorted_tools(tools: Any) -> tuple[Tool, ...]:
    if tools == () and type(tools) is tuple:  # no tools (the default): nothing to check or sort
        return ()
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise InvalidOption(f"tools=... must be a list of rs.Tool, got {type(tools).__name__}")
    for i, tool in enumerate(tools):
        if not isinstance(tool, Tool):
            raise InvalidOption(
                f"tools[{i}] must be an rs.Tool(name=..., description=..., parameters=...), "
                f"got {type(tool).__name__} {tool!r:.80}"
            )
    return tuple(sorted(tools, key=lambda t: t.name))


def _pairs(pairs: Any) -> tuple[tuple[str, str], ...]:
    if pairs == () and type(pairs) is tuple:  # no few-shots (the default)
        return ()
    if isinstance(pairs, (str, bytes, Mapping)) or not isinstance(pairs, Sequence):
        raise InvalidOption(
            f"few_shots=... must be a list of (user, assistant) string pairs, got {pairs!r:.80}"
        )
    out = []
    for i, pair in enumerate(pairs):
        if (
            isinstance(pair, (str, bytes))
            or not isinstance(pair, Sequence)
            or len(pair) != 2
            or not all(isinstance(x, str) for x in pair)
        ):
            raise InvalidOption(
                f"few_shots[{i}] must be a (user, assistant) pair of strings, got {pair!r:.80}"
            )
        out.append((pair[0], pair[1]))
    return tuple(out)


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@attrs.frozen(slots=True)
class Prefix:
    """System prompt + tools + few-shot (user, assistant) pairs: the stable start of every request.

    Invariants: tools are sorted by name and their names are unique; ``canonical_bytes`` depends only on the
    content (never on insertion or listing order); ``fingerprint == "sha256:" + sha256(canonical_bytes)``;
    a session's prefix changes only through ``Session.change_prefix``, a traced event.
    """

    system: str = attrs.field(default="", validator=_text("system=..."))
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_sorted_tools)
    few_shots: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)

    @tools.validator
    def _unique_names(self, _attr: object, tools: Sequence[Tool]) -> None:
        names = [t.name for t in tools]
        if len(names) != len(set(names)):
            raise InvalidOption(f"tool names must be unique, got {names}")

    @property
    def canonical_bytes(self) -> bytes:
        """Compact key-sorted JSON of system, tools (by name) and few-shots: equal content, equal bytes."""
        return canonical_json(
            {
                "system": self.system,
                "tools": [t.canonical() for t in self.tools],
                "few_shots": [list(p) for p in self.few_shots],
            }
        ).encode()

    @property
    def fingerprint(self) -> str:
        """``"sha256:" + sha256(canonical_bytes)``. Computed on each read (a prefix holds no memo): a
        session reads it once per prefix; what codecs derive from a prefix is memoized in the caller's
        ``Encodings``."""
        return "sha256:" + _sha256_hex(self.canonical_bytes)

    def volatile_spans(self) -> list[str]:
        """Clock times with seconds in the system prompt: they change every request across sessions
        and bust the prefix cache (dimagi/open-chat-studio#3625, earendil-works/pi#1873). Put the date
        in the prefix and the exact time in the newest user message instead."""
        return _CLOCK.findall(self.system)

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return next((t for t in self.tools if t.name == name), None)
