"""Persisted session snapshots (pydantic, at the edge): JSON in, JSON out, byte-identical continuation.

Continuation payloads are stored as their exact UTF-8 JSON text with the capture digest; restoring
re-verifies every digest, so a snapshot edited on disk is refused rather than sent
(:class:`~reasonstate.errors.ContinuationMismatch`).
"""

from __future__ import annotations

from typing import Any

import pydantic

from reasonstate.errors import ContinuationMismatch
from reasonstate.state import (
    Continuation,
    History,
    OpaquePart,
    Part,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Turn,
    TurnView,
    Usage,
    digest_of,
)

__all__ = ["SessionSnapshot", "history_from_snapshot", "history_to_snapshot"]

SNAPSHOT_VERSION = 1


class SessionSnapshot(pydantic.BaseModel):
    """A whole session: provenance, prefix, policy, options, the four layers, and the turn state."""

    model_config = pydantic.ConfigDict(extra="forbid")

    version: int = SNAPSHOT_VERSION
    vendor: str
    api: str
    model: str
    state: str
    system: str
    tools: list[dict[str, Any]]
    few_shots: list[list[str]]
    policy: dict[str, Any]
    stream: bool = False
    options: dict[str, Any]
    history: list[dict[str, Any]]
    execution: list[dict[str, Any]]
    trace: list[dict[str, Any]]


def _part_to(p: Part) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"t": "text", "text": p.text, "c": p.continuation}
    if isinstance(p, ReasoningPart):
        return {"t": "reasoning", "text": p.text, "redacted": p.redacted, "c": p.continuation}
    if isinstance(p, ToolCallPart):
        return {
            "t": "tool_call",
            "id": p.id,
            "name": p.name,
            "raw": p.raw_arguments,
            "arguments": dict(p.arguments),
            "c": p.continuation,
        }
    return {"t": "opaque", "type": p.type, "c": p.continuation}


def _part_from(d: dict[str, Any]) -> Part:
    t = d["t"]
    if t == "text":
        return TextPart(text=d["text"], continuation=d["c"])
    if t == "reasoning":
        return ReasoningPart(text=d["text"], redacted=d["redacted"], continuation=d["c"])
    if t == "tool_call":
        return ToolCallPart(
            id=d["id"], name=d["name"], arguments=d["arguments"], raw_arguments=d["raw"], continuation=d["c"]
        )
    return OpaquePart(type=d["type"], continuation=d["c"])


def _continuation_from(d: dict[str, Any]) -> Continuation:
    payload = d["payload"].encode()
    if digest_of(payload) != d["digest"]:
        raise ContinuationMismatch(f"snapshot {d['vendor']} {d['kind']} payload does not match its digest")
    return Continuation(
        vendor=d["vendor"],
        api=d["api"],
        model=d["model"],
        kind=d["kind"],
        payload=payload,
        digest=d["digest"],
        model_bound=d["model_bound"],
    )


def history_to_snapshot(history: History) -> list[dict[str, Any]]:
    return [
        {
            "index": t.index,
            "user": t.user,
            "view": None
            if t.view is None
            else {"keep": list(t.view.keep_reasoning), "policy": t.view.policy, "summary": t.view.summary},
            "steps": [
                {
                    "parts": [_part_to(p) for p in s.parts],
                    "continuation": [
                        {
                            "vendor": c.vendor,
                            "api": c.api,
                            "model": c.model,
                            "kind": c.kind,
                            "payload": c.payload.decode(),
                            "digest": c.digest,
                            "model_bound": c.model_bound,
                        }
                        for c in s.continuation
                    ],
                    "stop_reason": s.stop_reason,
                    "usage": {
                        "uncached_input": s.usage.uncached_input,
                        "cache_read": s.usage.cache_read,
                        "cache_write": s.usage.cache_write,
                        "output": s.usage.output,
                        "reasoning": s.usage.reasoning,
                    },
                    "model": s.model,
                    "response_id": s.response_id,
                    "tool_results": [
                        {"call_id": r.call_id, "content": r.content, "is_error": r.is_error}
                        for r in s.tool_results
                    ],
                }
                for s in t.steps
            ],
        }
        for t in history.turns
    ]


def history_from_snapshot(turns: list[dict[str, Any]]) -> History:
    return History(
        tuple(
            Turn(
                index=t["index"],
                user=t["user"],
                view=None
                if t["view"] is None
                else TurnView(
                    keep_reasoning=tuple(t["view"]["keep"]),
                    policy=t["view"]["policy"],
                    summary=t["view"]["summary"],
                ),
                steps=tuple(
                    Step(
                        parts=tuple(_part_from(p) for p in s["parts"]),
                        continuation=tuple(_continuation_from(c) for c in s["continuation"]),
                        stop_reason=s["stop_reason"],
                        usage=Usage(**s["usage"]),
                        model=s["model"],
                        response_id=s.get("response_id"),
                        tool_results=tuple(ToolResultPart(**r) for r in s["tool_results"]),
                    )
                    for s in t["steps"]
                ),
            )
            for t in turns
        )
    )
