"""Anthropic context editing as the emulator applies it (docs/protocols.md §4.7).

``context_management={"edits": [...]}`` (beta header ``context-management-2025-06-27``) asks the API to
edit the prompt server-side before the model sees it: ``clear_thinking_20251015`` removes thinking blocks
of all but the last ``keep`` assistant turns that have thinking, ``clear_tool_uses_20250919`` replaces the
results of all but the last ``keep`` tool uses with a placeholder once ``trigger`` is reached. The edited
prompt is what the model sees and what the prompt cache is looked up with; the response reports
``context_management.applied_edits``. Written from the vendor docs and the SDK's beta types, never from
our adapters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "CLEARED_TOOL_RESULT",
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "CONTEXT_MANAGEMENT_BETA",
    "ContextEditReject",
    "apply_context_management",
    "check_context_management",
]

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
CLEAR_THINKING = "clear_thinking_20251015"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
#: the text a cleared tool result is replaced with ([UNCONFIRMED] wording: the docs say "placeholder text")
CLEARED_TOOL_RESULT = "[cleared to save context]"

_DEFAULT_TRIGGER = {"type": "input_tokens", "value": 100_000}
_DEFAULT_TOOL_KEEP = {"type": "tool_uses", "value": 3}
_DEFAULT_THINKING_KEEP = {"type": "thinking_turns", "value": 1}
_REASONING = ("thinking", "redacted_thinking")
#: the fields of each edit (the SDK's ``BetaClearThinking20251015EditParam`` /
#: ``BetaClearToolUses20250919EditParam``); any other is refused as pydantic's extra input
_FIELDS = {
    CLEAR_THINKING: frozenset({"type", "keep"}),
    CLEAR_TOOL_USES: frozenset(
        {"type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"}
    ),
}


class ContextEditReject(Exception):
    """A ``context_management`` the API refuses (400 ``invalid_request_error`` with this message)."""


def _count(value: Any, path: str, kinds: tuple[str, ...], *, minimum: int = 0) -> dict[str, Any]:
    if not isinstance(value, dict) or value.get("type") not in kinds:
        raise ContextEditReject(
            f"{path}: Input tag {value!r} found using 'type' does not match expected tags"
        )
    n = value.get("value")
    if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
        raise ContextEditReject(f"{path}.value: Input should be greater than or equal to {minimum}")
    return value


def check_context_management(value: Any, betas: frozenset[str], thinking_on: bool) -> list[dict[str, Any]]:
    """The request's edits, validated as the API does; raises :class:`ContextEditReject`."""
    if CONTEXT_MANAGEMENT_BETA not in betas:
        raise ContextEditReject("context_management: Extra inputs are not permitted")
    if not isinstance(value, dict) or not isinstance(value.get("edits", []), list):
        raise ContextEditReject("context_management.edits: Input should be a valid list")
    for key in value:
        if key != "edits":
            raise ContextEditReject(f"context_management.{key}: Extra inputs are not permitted")
    edits: list[dict[str, Any]] = value.get("edits", [])
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        path = f"context_management.edits.{i}"
        if kind not in (CLEAR_THINKING, CLEAR_TOOL_USES):
            raise ContextEditReject(
                f"{path}: Input tag {kind!r} found using 'type' does not match any of the expected tags: "
                f"'{CLEAR_TOOL_USES}', '{CLEAR_THINKING}'"
            )
        assert isinstance(edit, dict)
        for key in edit:
            if key not in _FIELDS[kind]:
                raise ContextEditReject(f"{path}.{key}: Extra inputs are not permitted")
        if kind == CLEAR_THINKING:
            if i != 0:
                raise ContextEditReject(
                    f"{path}: `{CLEAR_THINKING}` must be the first edit in `context_management.edits`"
                )
            if not thinking_on:
                raise ContextEditReject(
                    f"{path}: `{CLEAR_THINKING}` requires `thinking` to be enabled or adaptive"
                )
            keep = edit.get("keep", _DEFAULT_THINKING_KEEP)
            if keep != "all" and not (isinstance(keep, dict) and keep.get("type") == "all"):
                _count(keep, f"{path}.keep", ("thinking_turns",), minimum=1)
        else:
            _count(edit.get("trigger", _DEFAULT_TRIGGER), f"{path}.trigger", ("input_tokens", "tool_uses"))
            _count(edit.get("keep", _DEFAULT_TOOL_KEEP), f"{path}.keep", ("tool_uses",))
            if edit.get("clear_at_least") is not None:
                _count(edit["clear_at_least"], f"{path}.clear_at_least", ("input_tokens",))
            excluded = edit.get("exclude_tools")
            if excluded is not None and not (
                isinstance(excluded, list) and all(isinstance(t, str) for t in excluded)
            ):
                raise ContextEditReject(f"{path}.exclude_tools: Input should be a valid list")
            inputs = edit.get("clear_tool_inputs")
            if not (
                inputs is None
                or isinstance(inputs, bool)
                or (isinstance(inputs, list) and all(isinstance(t, str) for t in inputs))
            ):
                raise ContextEditReject(
                    f"{path}.clear_tool_inputs: Input should be a valid boolean or a valid list"
                )
    return edits


def apply_context_management(
    body: Mapping[str, Any], edits: list[dict[str, Any]], tokens: Callable[[Mapping[str, Any]], int]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The body as the model sees it after ``edits`` and the ``applied_edits`` report (edits that cleared
    something; ``cleared_input_tokens`` is the prompt's size before minus after, by ``tokens``)."""
    out = dict(body)
    out["messages"] = copy.deepcopy(list(body["messages"]))
    applied: list[dict[str, Any]] = []
    for edit in edits:
        before = tokens(out)
        if edit["type"] == CLEAR_THINKING:
            cleared = _clear_thinking(out["messages"], edit.get("keep", _DEFAULT_THINKING_KEEP))
            if cleared:
                applied.append(
                    {
                        "type": CLEAR_THINKING,
                        "cleared_thinking_turns": cleared,
                        "cleared_input_tokens": before - tokens(out),
                    }
                )
        else:
            trial = copy.deepcopy(out["messages"])
            cleared = _clear_tool_uses(trial, edit, before)
            if not cleared:
                continue
            saved = before - tokens({**out, "messages": trial})
            least = edit.get("clear_at_least")
            if least is not None and saved < least["value"]:
                continue  # "context will only be modified if at least this many tokens can be removed"
            out["messages"] = trial
            applied.append(
                {"type": CLEAR_TOOL_USES, "cleared_tool_uses": cleared, "cleared_input_tokens": saved}
            )
    return out, applied


def _content(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _human(message: Mapping[str, Any]) -> bool:
    """A user message that starts a turn: anything but a message of tool results only."""
    content = message.get("content")
    if message.get("role") != "user":
        return False
    return not isinstance(content, list) or any(b.get("type") != "tool_result" for b in content)


def _clear_thinking(messages: list[dict[str, Any]], keep: Any) -> int:
    """Clear the thinking of all but the last ``keep`` assistant turns with thinking. An assistant turn runs
    from one human message to the next: with tools it spans several assistant messages ("an assistant
    conversation turn may include multiple content blocks (e.g. when using tools) and multiple thinking
    blocks", the context-editing page), so the open tool loop is one turn and is never cleared first."""
    if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
        return 0
    turns: list[list[int]] = []
    for n, m in enumerate(messages):
        if _human(m) or not turns:
            turns.append([])
        if m.get("role") == "assistant":
            turns[-1].append(n)
    thinking = [
        t for t in turns if any(b.get("type") in _REASONING for n in t for b in _content(messages[n]))
    ]
    doomed = thinking[: max(0, len(thinking) - int(keep["value"]))]
    for turn in doomed:
        for n in turn:
            messages[n] = {
                **messages[n],
                "content": [b for b in _content(messages[n]) if b.get("type") not in _REASONING],
            }
    return len(doomed)


def _clear_tool_uses(messages: list[dict[str, Any]], edit: Mapping[str, Any], prompt_tokens: int) -> int:
    trigger = edit.get("trigger", _DEFAULT_TRIGGER)
    uses = [
        (n, m, b)
        for n, msg in enumerate(messages)
        if msg.get("role") == "assistant"
        for m, b in enumerate(_content(msg))
        if b.get("type") == "tool_use"
    ]
    reached = prompt_tokens if trigger["type"] == "input_tokens" else len(uses)
    if reached < trigger["value"]:
        return 0
    keep = int(edit.get("keep", _DEFAULT_TOOL_KEEP)["value"])
    excluded = set(edit.get("exclude_tools") or ())
    inputs = edit.get("clear_tool_inputs") or False
    results = {
        b.get("tool_use_id"): b
        for msg in messages
        if msg.get("role") == "user"
        for b in _content(msg)
        if b.get("type") == "tool_result"
    }
    cleared = 0
    for _n, _m, use in uses[: max(0, len(uses) - keep)]:
        result = results.get(use.get("id"))
        if use.get("name") in excluded or result is None or result.get("content") == CLEARED_TOOL_RESULT:
            continue
        result["content"] = CLEARED_TOOL_RESULT
        if inputs is True or (isinstance(inputs, list) and use.get("name") in inputs):
            use["input"] = {}
        cleared += 1
    return cleared
