"""The demo's compaction row: one Responses session whose vendor compacts the context server-side
(docs/protocols.md §1.9), against the emulator, with the figures of each request.

One table row per request: the input items sent, the prompt tokens, the cache read the vendor reported and
the one reasonstate predicted, and the cache break the trace declared (``compacted`` where the request
starts at a compaction item).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reasonstate.demo.render import Table
from reasonstate.state import EventKind

__all__ = ["compaction_table", "context_editing_table"]


def _cause(broken: Mapping[str, Any] | None) -> str:
    """A trace's ``cache.break`` as a cell: its cause and whether the trace declared it first."""
    if broken is None:
        return "-"
    return f"{broken['cause']} ({'declared' if broken['declared'] else 'undeclared'})"


_SYSTEM = "You are a careful assistant for a weather desk. Answer briefly and cite the tool. " * 60
_TASK = "Look up the weather in Paris, then summarize the whole design discussion so far. " * 12


def compaction_table() -> Table:
    """Run the session on a fresh emulator and tabulate it."""
    import reasonstate as rs
    from reasonstate.testing import ModelAction, ToolCallSpec
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    tool = rs.Tool(
        name="get_weather",
        description="The weather in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    script = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="Need the weather."),
        ModelAction(text="Sunny in Paris.", reasoning="The tool said sunny."),
        ModelAction(text="Yes.", reasoning="Still sunny."),
    ]
    threshold = [{"type": "compaction", "compact_threshold": 1500}]
    with OpenAIResponsesEmulator(script) as emu, emu.client() as client:
        session = rs.Session(
            client, model="gpt-5.5", system=_SYSTEM, tools=[tool], context_management=threshold
        )
        reply = session.send(_TASK)
        session.send_tool_results({reply.tool_calls[0].id: "sunny"})
        session.send("Still sunny?")
        sent = [json.loads(r.body) for r in emu.requests]
    breaks = {e.data["index"]: e.data for e in session.trace.of_kind(EventKind.CACHE_BREAK)}
    rows = []
    for record, body in zip(session.execution, sent, strict=True):
        items = [str(i.get("type", "user")) for i in body["input"]]
        broken = breaks.get(record.index)
        rows.append(
            (
                str(record.index),
                " ".join(items),
                str(record.usage.prompt_tokens),
                str(record.usage.cache_read),
                "n/a" if record.predicted_cache_read is None else str(record.predicted_cache_read),
                _cause(broken),
            )
        )
    compacted = sum(c.kind == "compaction" for c in session.continuation)
    return Table(
        "Server-side compaction (OpenAI Responses, emulated): one session",
        (
            "request",
            "input items sent",
            "prompt tokens",
            "cache read, vendor",
            "SDK predicted",
            "cache break",
        ),
        tuple(rows),
        (
            "A request whose prompt crosses compact_threshold=1500 is answered after a compaction item "
            f"(here {compacted}), kept as continuation bound to gpt-5.5, never sent to another model. The "
            "next request starts at the newest item (what the server renders): a cache break the trace "
            "declares; the requests that extend their predecessor are predicted exactly.",
        ),
        labels=2,
    )


def context_editing_table() -> Table:
    """The context-editing row (docs/protocols.md §4.7): one Anthropic session under
    ``ServerClear(thinking_keep=1)`` on a fresh emulator, three user turns with a tool call each; one row per
    request with the thinking blocks sent and the ones the vendor read, the figures and the break declared.

    Invariant: the session's history is never edited (every thinking block goes back); the vendor clears
    the thinking of all but the last turn before it reads and caches, and the prediction is of that prompt.
    """
    import reasonstate as rs
    from reasonstate.testing import ModelAction, ToolCallSpec
    from reasonstate.testing.anthropic import AnthropicEmulator

    tool = rs.Tool(
        name="get_weather",
        description="The weather in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    turns = 3
    script: list[ModelAction] = []
    for i in range(turns):
        script.append(
            ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning=f"Need it {i}.")
        )
        script.append(ModelAction(text=f"Sunny ({i}).", reasoning=f"The tool said sunny {i}."))
    with AnthropicEmulator(script) as emu, emu.client() as client:
        session = rs.Session(
            client,
            model="claude-sonnet-4-6",
            system=_SYSTEM,
            tools=[tool],
            thinking={"type": "enabled", "budget_tokens": 2048},
            fold=rs.policies.ServerClear(thinking_keep=1),
        )
        for i in range(turns):
            reply = session.send(f"Weather in Paris, take {i}?")
            session.send_tool_results({reply.tool_calls[0].id: "sunny"})
        sent = [json.loads(r.body) for r in emu.requests]
    breaks = {e.data["index"]: e.data for e in session.trace.of_kind(EventKind.CACHE_BREAK)}
    cleared = {
        e.data["response_id"]: sum(a.get("cleared_thinking_turns", 0) for a in e.data["applied_edits"])
        for e in session.trace.of_kind(EventKind.CONTEXT_CLEARED)
    }
    rows = []
    for record, body, step in zip(
        session.execution, sent, (s for t in session.history.turns for s in t.steps), strict=True
    ):
        thinking = sum(
            b.get("type") == "thinking"
            for m in body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
        )
        rows.append(
            (
                str(record.index),
                f"{thinking} sent, {cleared.get(step.response_id or '', 0)} turn(s) cleared",
                str(record.usage.prompt_tokens),
                str(record.usage.cache_read),
                "n/a" if record.predicted_cache_read is None else str(record.predicted_cache_read),
                _cause(breaks.get(record.index)),
            )
        )
    return Table(
        "Context editing (Anthropic, emulated): one session under ServerClear(thinking_keep=1)",
        ("request", "thinking blocks", "prompt tokens", "cache read, vendor", "SDK predicted", "cache break"),
        tuple(rows),
        (
            "Every thinking block goes back verbatim; the vendor clears those of all but the last turn "
            "(a tool loop is one turn) before it reads and caches the prompt. The session predicts that "
            "edited prompt: each clear is a declared server_cleared break and every prediction equals the "
            "vendor's read.",
        ),
        labels=2,
    )
