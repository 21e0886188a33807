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

__all__ = ["compaction_table"]


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
