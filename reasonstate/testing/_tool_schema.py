"""Whether a tool's parameter schema is one the vendors accept: a JSON Schema whose root is an object schema.

Both Anthropic (``tools.N.custom.input_schema``) and OpenAI (``parameters`` of a function tool) refuse a
tool whose schema is not a JSON Schema of ``type: "object"``, or is not valid JSON Schema at all (docs/
protocols.md §0, "Emulator strictness"). :func:`schema_problem` finds the first such fault and says what
it is in the words of a JSON Schema validator (``'strng' is not valid under any of the given schemas``,
``[] is not of type 'object', 'boolean'``), which is how OpenAI words it; each emulator wraps it in its
vendor's envelope.

It checks the keywords whose shape draft 2020-12 fixes and that tool schemas use (``type``,
``properties``, ``required``, ``items``, ``enum``, ``anyOf``/``oneOf``/``allOf``/``not``,
``additionalProperties``, ``$defs``/``definitions``), recursively; unknown keywords are allowed, as the
meta-schema allows them.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JSON_TYPES", "root_type_problem", "schema_problem"]

#: The primitive type names of JSON Schema (draft 2020-12, validation §6.1.1).
JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "contains", "if", "then", "else")


def _show(value: Any) -> str:
    """A value as a JSON Schema validator quotes it (Python ``repr`` style, as OpenAI's messages do)."""
    return repr(value) if not isinstance(value, (dict, list)) else json.dumps(value)


def root_type_problem(schema: Any) -> str | None:
    """What is wrong with the root of a tool schema (None when it is an object schema): the root must be a
    JSON object whose ``type`` is ``"object"``."""
    if not isinstance(schema, dict):
        return f"{_show(schema)} is not of type 'object', 'boolean'"
    kind = schema.get("type")
    if kind != "object":
        shown = json.dumps(kind if isinstance(kind, str) else str(kind))
        return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: {shown}'"
    return None


def schema_problem(schema: Any) -> str | None:
    """The first fault of ``schema`` as a tool's parameter schema, or None when it is a valid object schema.

    Invariant: ``schema_problem(s) is None`` implies ``s`` is a dict with ``s["type"] == "object"`` whose
    sub-schemas are all dicts or booleans with well-formed ``type``/``required``/``enum`` keywords.
    """
    return root_type_problem(schema) or _subschema_problem(schema)


def _subschema_problem(schema: Any) -> str | None:
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"{_show(schema)} is not of type 'object', 'boolean'"
    kind = schema.get("type")
    if kind is not None:
        names = kind if isinstance(kind, list) else [kind]
        if not names or any(not isinstance(n, str) or n not in JSON_TYPES for n in names):
            return f"{_show(kind)} is not valid under any of the given schemas"
    required = schema.get("required")
    if required is not None and (
        not isinstance(required, list) or any(not isinstance(r, str) for r in required)
    ):
        return f"{_show(required)} is not of type 'array'"
    enum = schema.get("enum")
    if enum is not None and not isinstance(enum, list):
        return f"{_show(enum)} is not of type 'array'"
    for key in _SUBSCHEMA_MAPS:
        members = schema.get(key)
        if members is None:
            continue
        if not isinstance(members, dict):
            return f"{_show(members)} is not of type 'object'"
        for member in members.values():
            problem = _subschema_problem(member)
            if problem is not None:
                return problem
    for key in _SUBSCHEMA_LISTS:
        members = schema.get(key)
        if members is None:
            continue
        if not isinstance(members, list) or not members:
            return f"{_show(members)} is not of type 'array'"
        for member in members:
            problem = _subschema_problem(member)
            if problem is not None:
                return problem
    for key in _SUBSCHEMAS:
        if key in schema:
            problem = _subschema_problem(schema[key])
            if problem is not None:
                return problem
    return None
