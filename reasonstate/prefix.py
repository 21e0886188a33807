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

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from reasonstate.state.frozen import freeze

__all__ = ["Prefix", "Tool", "canonical_json"]


_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b")


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys and non-ASCII kept: the one serialization of our own values."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _frozen_schema(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema key-sorted and frozen: a caller's later edit of its own dict changes nothing here."""
    result: Mapping[str, Any] = freeze(json.loads(canonical_json(dict(value))))
    return result


@attrs.frozen(slots=True)
class Tool:
    """A tool the model may call. ``parameters`` is a JSON schema (stored key-sorted).

    ``handler`` (optional) is what ``Session.run`` calls with the parsed arguments; ``parallel_safe`` lets
    the runtime run it concurrently with other parallel-safe calls of the same step.
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}, converter=_frozen_schema
    )
    handler: Callable[..., Any] | None = attrs.field(default=None, eq=False, repr=False)
    parallel_safe: bool = False

    def canonical(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _sorted_tools(tools: Sequence[Tool]) -> tuple[Tool, ...]:
    return tuple(sorted(tools, key=lambda t: t.name))


def _pairs(pairs: Sequence[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(u), str(a)) for u, a in pairs)


@attrs.frozen(slots=True)
class Prefix:
    """System prompt + tools + few-shot (user, assistant) pairs; see the module invariants."""

    system: str = ""
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_sorted_tools)
    few_shots: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)

    @tools.validator
    def _unique_names(self, _attr: object, tools: Sequence[Tool]) -> None:
        names = [t.name for t in tools]
        if len(names) != len(set(names)):
            raise ValueError(f"tool names must be unique, got {names}")

    @property
    def canonical_bytes(self) -> bytes:
        return canonical_json(
            {
                "system": self.system,
                "tools": [t.canonical() for t in self.tools],
                "few_shots": [list(p) for p in self.few_shots],
            }
        ).encode()

    @property
    def fingerprint(self) -> str:
        return "sha256:" + hashlib.sha256(self.canonical_bytes).hexdigest()

    def volatile_spans(self) -> list[str]:
        """Clock times with seconds in the system prompt: they change every request across sessions
        and bust the prefix cache (dimagi/open-chat-studio#3625, earendil-works/pi#1873). Put the date
        in the prefix and the exact time in the newest user message instead."""
        return _CLOCK.findall(self.system)

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)
