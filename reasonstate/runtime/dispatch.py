"""Tool dispatch for ``Session.run``: each call's handler, parallel-safe runs concurrently, errors as results.

Invariant: the results map has exactly the calls' ids, and the session sends them in the model's declared
order whatever order the handlers finish in (the history invariant). A failing handler is a tool result
(``is_error``), never a session failure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import attrs

from reasonstate.prefix import Prefix

__all__ = ["ToolResult", "dispatch", "dispatch_timed"]


@attrs.frozen(slots=True)
class ToolResult:
    """A tool result with an error flag; plain values passed to ``send_tool_results`` mean success.

    ``content`` is sent as is when it is a string, else as canonical JSON (sorted keys, compact), so equal
    results give equal bytes; a value that is not JSON-serializable is a
    :class:`~reasonstate.errors.ToolResultError` before anything is sent.
    """

    content: Any
    is_error: bool = False


class _Call(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Any: ...

    @property
    def arguments_error(self) -> str | None: ...


def dispatch(prefix: Prefix, calls: Sequence[_Call]) -> dict[str, Any]:
    """Run each call's handler; consecutive parallel-safe calls run concurrently."""
    return dispatch_timed(prefix, calls)[0]


def dispatch_timed(prefix: Prefix, calls: Sequence[_Call]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """:func:`dispatch`, plus one timing per call in the calls' order: ``id``, ``name``, ``started_at``
    (wall time), ``duration_s`` and ``is_error`` (the handler raised, or could not be called). No argument
    or result is in a timing: they are content."""
    timings: dict[str, dict[str, Any]] = {}

    def run_one(call: _Call) -> Any:
        started, t0 = time.time(), time.perf_counter()
        value = run_handler(call)
        timings[call.id] = {
            "id": call.id,
            "name": call.name,
            "started_at": started,
            "duration_s": round(time.perf_counter() - t0, 6),
            "is_error": isinstance(value, ToolResult) and value.is_error,
        }
        return value

    def run_handler(call: _Call) -> Any:
        tool = prefix.tool(call.name)
        if tool is None or tool.handler is None:
            return ToolResult(f"no handler for tool {call.name!r}", is_error=True)
        if call.arguments is None:  # never run a handler on arguments the model did not finish or botched
            return ToolResult(f"invalid arguments for {call.name!r}: {call.arguments_error}", is_error=True)
        try:
            return tool.handler(**call.arguments)
        except Exception as exc:  # a failing tool is a tool result, not a session failure
            return ToolResult(f"{type(exc).__name__}: {exc}", is_error=True)

    results: dict[str, Any] = {}
    chunk: list[_Call] = []

    def flush() -> None:
        if len(chunk) > 1:
            with ThreadPoolExecutor(max_workers=min(8, len(chunk))) as pool:
                for call, value in zip(chunk, pool.map(run_one, chunk), strict=True):
                    results[call.id] = value
        elif chunk:
            results[chunk[0].id] = run_one(chunk[0])
        chunk.clear()

    for call in calls:
        tool = prefix.tool(call.name)
        if tool is not None and tool.parallel_safe:
            chunk.append(call)
            continue
        flush()
        results[call.id] = run_one(call)
    flush()
    return results, [timings[c.id] for c in calls if c.id in timings]
