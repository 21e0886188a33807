"""Cause analysis of a prefix-cache break, on request bodies as sent (the parsed wire JSON).

A request is read as the vendor reads it: a chain of :class:`Unit` values in prompt order — the model, the
prompt-relevant options, each tool, the system prompt, then the history (one unit per content block on
Anthropic, per input item on Responses, per message on chat, per content on Gemini; docs/protocols.md
§1.5, §3.4, §4.4, §5.3). :func:`explain` finds the first unit where a request stops extending an earlier
one, the JSON path of the first differing value inside it, and names the cause from :data:`CAUSES`.
:func:`lost_continuation` finds reasoning payloads an answer ended a tool call with that the next request
of the chain does not carry back. Both are pure and never raise on odd input (a missing key is an
absent value). Opaque payloads appear in results only as digests.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal, get_args

import attrs

from reasonstate.cache.guard import common_prefix_len
from reasonstate.state.continuation import digest_of

__all__ = [
    "CAUSES",
    "Cause",
    "Divergence",
    "Unit",
    "View",
    "explain",
    "lost_continuation",
    "starts_conversation",
    "view_of",
]

Cause = Literal[
    "system_changed",
    "tools_changed",
    "tools_reordered",
    "tool_schema_reserialized",
    "history_rewritten",
    "reasoning_dropped",
    "compacted",
    "arguments_reserialized",
    "timestamp_in_prefix",
    "model_changed",
    "options_changed",
]
#: the vocabulary of break causes (issue 12), in the order above
CAUSES: tuple[Cause, ...] = get_args(Cause)

#: the API names (``Adapter.api``) this module reads
APIS = ("messages", "responses", "chat", "generate_content")

Section = Literal["model", "options", "tools", "system", "history"]

#: top-level keys that are per-call sampling or delivery knobs, not part of what a prefix cache keys on
_NOT_OPTIONS = frozenset(
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
#: prompt keys of each API (the model, tools, system and history units); everything else is an option
_PROMPT_KEYS = {
    "messages": frozenset({"model", "tools", "system", "messages"}),
    "responses": frozenset({"model", "tools", "instructions", "input"}),
    "chat": frozenset({"model", "tools", "messages"}),
    "generate_content": frozenset({"model", "tools", "systemInstruction", "contents"}),
}

# dates and clock times: what a prompt template puts in a prefix when it stamps "now"
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}([T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?|\b\d{1,2}:\d{2}(:\d{2})?\b"
)


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
    carrying ``cache_control``; ``prefix_units``: the units up to the end of the system prompt."""

    api: str
    model: str
    units: tuple[Unit, ...]
    breakpoints: tuple[int, ...] = ()
    prefix_units: int = 0
    #: each unit's ``key``, in order (what prefix comparisons and cache predictions read)
    keys: tuple[str, ...] = attrs.field(
        init=False, default=attrs.Factory(lambda v: tuple(u.key for u in v.units), takes_self=True)
    )

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


_ENCODERS = {
    sort: json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=sort).encode
    for sort in (False, True)
}


def _compact(value: Any, *, sort: bool) -> str:
    return _ENCODERS[sort](value)


def _without(value: Any, keys: frozenset[str]) -> Any:
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if k not in keys}
    return value


def _no_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


_CACHE_CONTROL = frozenset({"cache_control"})
_SYSTEM_ROLES = ("system", "developer")
_ITEM_METADATA = frozenset({"id", "status"})


def view_of(api: str, body: Any, model: str | None = None) -> View:
    """The prefix units of a request body (``model``: for Gemini, whose model is in the URL)."""
    if not isinstance(body, Mapping):
        body = {}
    name = str(model if model is not None else body.get("model", ""))
    units: list[Unit] = []
    breakpoints: list[int] = []
    sort = api != "messages"  # Anthropic's cache keys on the JSON as received; the others render items
    namespace = name if api != "responses" else f"{name}|{body.get('prompt_cache_key') or ''}"
    units.append(Unit("model", "$.model", name, namespace))
    options = _options(api, body)
    units.append(Unit("options", "$", options, _compact(options, sort=True)))

    def add(section: Section, path: str, value: Any, key_value: Any, role: str = "") -> None:
        if api == "messages" and isinstance(value, Mapping) and "cache_control" in value:
            breakpoints.append(len(units) + 1)
        units.append(Unit(section, path, value, role + _compact(key_value, sort=sort)))

    for i, tool in enumerate(_list(body.get("tools"))):
        add("tools", f"$.tools[{i}]", tool, _without(tool, _CACHE_CONTROL))
    if api == "messages":
        system = body.get("system")
        if isinstance(system, str):
            add("system", "$.system", system, {"type": "text", "text": system})
        for i, block in enumerate(_list(system)):
            add("system", f"$.system[{i}]", block, _without(block, _CACHE_CONTROL))
        prefix = len(units)
        for i, message in enumerate(_list(body.get("messages"))):
            m = message if isinstance(message, Mapping) else {}
            role, content = f"{m.get('role')}:", m.get("content")
            if isinstance(content, str):
                add("history", f"$.messages[{i}].content", content, {"type": "text", "text": content}, role)
            for j, block in enumerate(_list(content)):
                add("history", f"$.messages[{i}].content[{j}]", block, _without(block, _CACHE_CONTROL), role)
        if body.get("cache_control") and units:
            breakpoints.append(len(units))
    elif api == "responses":
        if body.get("instructions") is not None:
            add("system", "$.instructions", body["instructions"], body["instructions"])
        prefix = len(units)
        items = body.get("input")
        if isinstance(items, str):
            add("history", "$.input", items, {"content": items, "role": "user"})
        for i, item in enumerate(_list(items)):
            add("history", f"$.input[{i}]", item, _without(item, _ITEM_METADATA))
    elif api == "chat":
        messages = _list(body.get("messages"))
        prefix = len(units)
        for i, message in enumerate(messages):
            m = message if isinstance(message, Mapping) else {}
            leading = all(
                isinstance(x, Mapping) and x.get("role") in _SYSTEM_ROLES for x in messages[: i + 1]
            )
            add("system" if leading else "history", f"$.messages[{i}]", message, _no_nulls(m))
            if leading:
                prefix = len(units)
    else:  # generate_content
        system = body.get("systemInstruction")
        if system is not None:
            add("system", "$.systemInstruction", system, system)
        prefix = len(units)
        for i, content in enumerate(_list(body.get("contents"))):
            add("history", f"$.contents[{i}]", content, _no_nulls(content))
    return View(api, name, tuple(units), tuple(sorted(set(breakpoints))), prefix)


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _options(api: str, body: Mapping[str, Any]) -> dict[str, Any]:
    prompt = _PROMPT_KEYS.get(api, frozenset())
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key in prompt or key in _NOT_OPTIONS:
            continue
        if isinstance(value, Mapping) and key in ("generationConfig", "generation_config"):
            value = {k: v for k, v in value.items() if k not in _NOT_OPTIONS}
            if not value:
                continue
        out[key] = value
    return out


def starts_conversation(view: View) -> bool:
    """Whether ``view``'s history holds nothing but user input (no answer of the model yet): the first
    request of a conversation, whatever earlier request it shares its tools and system prompt with."""
    history = [u.value for u in view.units if u.section == "history"]
    if view.api == "messages":
        return all(u.key.startswith("user:") for u in view.units if u.section == "history")
    return all(
        isinstance(v, str)
        or (isinstance(v, Mapping) and v.get("role", "user") == "user" and "type" not in v)
        or (isinstance(v, Mapping) and v.get("type") == "message" and v.get("role") == "user")
        for v in history
    )


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
    if after is None or (cause == "reasoning_dropped" and _reasoning_only(previous.api, before.value)):
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
    if after is None:
        return "history_rewritten"  # the later request is a strict prefix: a rewind
    api = previous.api
    if _reasoning_only(api, before.value) and not _reasoning_only(api, after.value):
        return "reasoning_dropped"
    stripped = _reasoning_fields(api, before.value) and not _reasoning_fields(api, after.value)
    if stripped and _strip_reasoning(api, before.value) == _strip_reasoning(api, after.value):
        return "reasoning_dropped"
    if _has_call(before.value) and _arguments(before.value) == _arguments(after.value):
        return "arguments_reserialized"
    if _masked(before.value) == _masked(after.value):
        return "timestamp_in_prefix"
    if current.history_units < previous.history_units:
        return "compacted"
    return "history_rewritten"


def _masked(value: Any) -> str:
    return _TIMESTAMP.sub("<t>", _compact(value, sort=True))


def _reasoning_only(api: str, value: Any) -> bool:
    """A unit that is nothing but reasoning (a thinking block, a reasoning item, a content of thoughts)."""
    if not isinstance(value, Mapping):
        return False
    if api == "messages":
        return value.get("type") in ("thinking", "redacted_thinking")
    if api == "responses":
        return value.get("type") == "reasoning"
    if api == "generate_content":
        parts = _list(value.get("parts"))
        return bool(parts) and all(isinstance(p, Mapping) and p.get("thought") for p in parts)
    return False


def _reasoning_fields(api: str, value: Any) -> bool:
    """Whether a unit carries reasoning inside it (DeepSeek ``reasoning_content``, Gemini thought parts and
    thought signatures)."""
    return bool(_strip_reasoning(api, value) != value)


def _strip_reasoning(api: str, value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    if api == "chat":
        return {k: v for k, v in value.items() if k not in ("reasoning_content", "reasoning")}
    if api == "generate_content":
        parts = [
            {k: v for k, v in p.items() if k not in ("thoughtSignature", "thought_signature")}
            for p in _list(value.get("parts"))
            if isinstance(p, Mapping) and not p.get("thought")
        ]
        return {**value, "parts": parts}
    return value


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _has_call(value: Any) -> bool:
    return any(
        isinstance(v, Mapping)
        and (v.get("type") in ("tool_use", "function_call") or "functionCall" in v or "function" in v)
        for v in _walk(value)
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
            if k not in a or a[k] != b[k] or _compact(a[k], sort=False) != _compact(b[k], sort=False):
                return _first_difference(a.get(k), b[k], f"{path}.{k}") if k in a else f"{path}.{k}"
        for k in a:
            if k not in b:
                return f"{path}.{k}"
        return path
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if _compact(x, sort=False) != _compact(y, sort=False):
                return _first_difference(x, y, f"{path}[{i}]")
        return f"{path}[{min(len(a), len(b))}]"
    return path


# -- continuation -------------------------------------------------------------------------------------------


def lost_continuation(api: str, response: Any, body: Any) -> tuple[str, ...]:
    """Digests of the reasoning payloads ``response`` ended a tool call with that ``body`` (the request
    answering that call) does not carry back: thinking signatures and redacted data (Anthropic, §4.3),
    encrypted reasoning items (Responses, §1.4), ``reasoning_content`` (DeepSeek, §3.3), thought signatures
    (Gemini, §5.4). Empty unless ``body`` answers a call ``response`` made."""
    try:
        return tuple(_lost(api, response, body))
    except Exception:  # odd shapes: nothing to say, never an error
        return ()


def _digest(value: Any) -> str:
    return digest_of(str(value).encode())


def _lost(api: str, response: Any, body: Any) -> Iterator[str]:
    if not isinstance(response, Mapping) or not isinstance(body, Mapping):
        return
    if api == "messages":
        content = _list(response.get("content"))
        calls = {b.get("id") for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"}
        if not calls:
            return
        sent = list(_walk(body.get("messages")))
        if not any(isinstance(v, Mapping) and v.get("tool_use_id") in calls for v in sent):
            return
        carried = {
            v.get("signature") or v.get("data")
            for v in sent
            if isinstance(v, Mapping) and v.get("type") in ("thinking", "redacted_thinking")
        }
        for b in content:
            if isinstance(b, Mapping) and b.get("type") in ("thinking", "redacted_thinking"):
                payload = b.get("signature") or b.get("data")
                if payload and payload not in carried:
                    yield _digest(payload)
    elif api == "responses":
        output = _list(response.get("output"))
        calls = {
            i.get("call_id") for i in output if isinstance(i, Mapping) and i.get("type") == "function_call"
        }
        answered = any(
            isinstance(v, Mapping) and v.get("type") == "function_call_output" and v.get("call_id") in calls
            for v in _list(body.get("input"))
        )
        if not calls or not answered or body.get("previous_response_id") == response.get("id"):
            return
        ids = {v.get("id") for v in _list(body.get("input")) if isinstance(v, Mapping)}
        blobs = {v.get("encrypted_content") for v in _list(body.get("input")) if isinstance(v, Mapping)}
        for item in output:
            if not isinstance(item, Mapping) or item.get("type") != "reasoning":
                continue
            blob = item.get("encrypted_content")
            if (blob and blob not in blobs) or (not blob and item.get("id") not in ids):
                yield _digest(blob or item.get("id"))
    elif api == "chat":
        choices = _list(response.get("choices"))
        message = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
        if not isinstance(message, Mapping) or not message.get("reasoning_content"):
            return
        calls = {c.get("id") for c in _list(message.get("tool_calls")) if isinstance(c, Mapping)}
        messages = [m for m in _list(body.get("messages")) if isinstance(m, Mapping)]
        if not calls or not any(m.get("role") == "tool" and m.get("tool_call_id") in calls for m in messages):
            return
        for m in messages:
            ids = {c.get("id") for c in _list(m.get("tool_calls")) if isinstance(c, Mapping)}
            if m.get("role") == "assistant" and ids & calls:
                if m.get("reasoning_content") != message["reasoning_content"]:
                    yield _digest(message["reasoning_content"])
                return
    elif api == "generate_content":
        candidates = _list(response.get("candidates"))
        first = candidates[0].get("content") if candidates and isinstance(candidates[0], Mapping) else None
        parts = _list(first.get("parts")) if isinstance(first, Mapping) else []
        if not any(isinstance(p, Mapping) and "functionCall" in p for p in parts):
            return
        contents = _list(body.get("contents"))
        last = contents[-1] if contents and isinstance(contents[-1], Mapping) else {}
        if not any(isinstance(p, Mapping) and "functionResponse" in p for p in _list(last.get("parts"))):
            return
        sent = list(_walk(contents))
        # the SDK holds signatures as bytes and re-encodes them (URL-safe alphabet): compare the bytes
        carried = {_b64(v.get("thoughtSignature")) for v in sent if isinstance(v, Mapping)}
        for p in parts:
            signature = p.get("thoughtSignature") if isinstance(p, Mapping) else None
            if signature and _b64(signature) not in carried:
                yield _digest(signature)


def _b64(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.urlsafe_b64decode(value.replace("+", "-").replace("/", "_") + "=" * (-len(value) % 4))
    except ValueError:
        return value.encode()
