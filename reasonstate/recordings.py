"""Recordings and what ``reasonstate inspect``, ``report`` and ``diff`` print about them.

A recording is either a snapshot (``session.snapshot().model_dump_json()``: all four layers, checked as
``Session.restore`` checks it) or a JSONL trace (:class:`~reasonstate.export.jsonl.JSONLExporter`: the trace
layer only, from which the requests' usage and the turns' user messages are read back).

Invariants: opaque payloads (signatures, encrypted items) are shown as kind, size and digest prefix, never
their bytes; a file that is neither form raises :class:`RecordingError` naming the line or field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from reasonstate.cache.pricing import Cost, Pricing
from reasonstate.cache.pricing import total as total_cost
from reasonstate.errors import ReasonStateError
from reasonstate.state import EventKind, ExecutionRecord, History, Trace, Usage

if TYPE_CHECKING:
    from reasonstate.export.html import ReportPage
    from reasonstate.snapshot import SessionSnapshot

__all__ = [
    "Recording",
    "RecordingError",
    "check_model_flag",
    "inspect_text",
    "load",
    "of_snapshot",
    "report_html",
    "report_page",
    "report_text",
]


class RecordingError(ReasonStateError, ValueError):
    """A file that is neither a session snapshot nor a JSONL trace (or is damaged)."""


@attrs.frozen
class Recording:
    """What a file holds: the trace always; history and execution records for a snapshot."""

    path: str
    kind: str  # "snapshot" or "trace"
    trace: Trace
    history: History | None = None
    records: Sequence[ExecutionRecord] = ()
    vendor: str = ""
    api: str = ""
    model: str = ""


def load(path: str | Path) -> Recording:
    """The recording in ``path`` (snapshot JSON or JSONL trace), verified; :class:`RecordingError` else."""
    from reasonstate.errors import SnapshotError
    from reasonstate.export.jsonl import TraceFileError, read_trace
    from reasonstate.snapshot import SessionSnapshot

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"cannot read {path}: {exc}") from exc
    try:
        first = json.loads(text)
    except ValueError:
        first = None
    if isinstance(first, Mapping) and "history" in first and "execution" in first:
        try:
            snap = SessionSnapshot.load(text)
        except (SnapshotError, ReasonStateError) as exc:
            raise RecordingError(f"{path}: {exc}") from exc
        return of_snapshot(snap, str(path))
    try:
        trace = read_trace(path)
    except TraceFileError as exc:
        raise RecordingError(f"{path} is neither a session snapshot nor a JSONL trace: {exc}") from exc
    if not len(trace):
        raise RecordingError(f"{path} is neither a session snapshot nor a JSONL trace: no events")
    return Recording(str(path), "trace", trace)


def of_snapshot(snap: SessionSnapshot, where: str) -> Recording:
    """The recording of a verified snapshot (a file's, or a stored session's: ``store.export(id)``);
    ``where`` names it in what is printed."""
    from reasonstate.snapshot import restored_layers

    layers = restored_layers(snap)
    trace = Trace(layers.trace.events[:-1])  # without the session.restored event restoring added
    return Recording(
        where, "snapshot", trace, layers.history, layers.records, snap.vendor, snap.api, snap.model
    )


# -- inspect -------------------------------------------------------------------------------------------------


def inspect_text(rec: Recording, *, events: int = 12) -> str:
    """The four layers of ``rec`` as text (the newest ``events`` trace events in full)."""
    out: list[str] = [
        f"{rec.path}: {rec.kind}"
        + (f" of a session on {rec.vendor}/{rec.api}, model {rec.model}" if rec.vendor else "")
    ]
    out.append("")
    out.append(f"== trace: {len(rec.trace)} events")
    counts: dict[str, int] = {}
    for e in rec.trace:
        counts[e.kind] = counts.get(e.kind, 0) + 1
    out.extend(f"   {kind:<24} {n}" for kind, n in sorted(counts.items()))
    if len(rec.trace):
        out.append(f"   newest {min(events, len(rec.trace))}:")
        for e in rec.trace.events[-events:]:
            out.append(f"   #{e.seq:<4} {e.kind:<22} {_brief(e.data)}")
    out.append("")
    if rec.history is None:
        out.append(
            "== history, continuation, execution: not in a trace file (a snapshot holds them); read from"
        )
        out.append("   the trace: " + _turns_from_trace(rec.trace))
        requests = _requests_from_trace(rec.trace)
        out.append("")
        out.append(f"== requests in the trace: {len(requests)}")
        out.extend(
            _request_rows(
                [
                    (r["index"], r["turn"], r["model"], r["usage"], r["predicted"], r["divergence"])
                    for r in requests
                ]
            )
        )
        return "\n".join(out)
    out.append(f"== history: {len(rec.history.turns)} turns")
    fold = rec.history.fold
    if fold is not None:
        out.append(
            f"   turns 0..{fold.through} are folded: requests carry a {len(fold.summary)}-character summary "
            "in their place"
        )
    for turn in rec.history.turns:
        view = (
            "open"
            if turn.view is None
            else f"closed, {turn.view.policy}, reasoning kept {list(turn.view.keep_reasoning)}"
        )
        out.append(f"   turn {turn.index} ({view}): user {_quote(turn.user)}")
        for i, step in enumerate(turn.steps):
            parts = ", ".join(type(p).__name__.removesuffix("Part").lower() for p in step.parts) or "none"
            calls = ", ".join(f"{c.name}({c.raw_arguments})" for c in step.tool_calls)
            out.append(f"      step {i}: {step.model}, {step.stop_reason}; parts: {parts}")
            if calls:
                out.append(f"         calls: {_quote(calls, 100)}; results: {len(step.tool_results)}")
            if step.text:
                out.append(f"         text: {_quote(step.text)}")
    out.append("")
    payloads = [
        (t.index, i, c)
        for t in rec.history.turns
        for i, s in enumerate(t.steps)
        for c in s.continuation
        if not c.bare  # provenance only: its step's item is its parts rendered, no payload kept
    ]
    out.append(f"== continuation: {len(payloads)} payloads (opaque: kind, size and digest only)")
    for turn_index, step_index, c in payloads:
        bound = "bound to its model" if c.model_bound else "not model-bound"
        out.append(
            f"   turn {turn_index} step {step_index}: {c.vendor}/{c.api} {c.kind} from {c.model}, "
            f"{len(c.payload)} bytes, {c.digest[:19]}…, {bound}"
        )
    out.append("")
    out.append(f"== execution: {len(rec.records)} requests")
    out.extend(
        _request_rows(
            [(r.index, r.turn, r.model, r.usage, r.predicted_cache_read, r.divergence) for r in rec.records]
        )
    )
    return "\n".join(out)


def _request_rows(rows: Iterable[tuple[int, int, str, Usage, int | None, int | None]]) -> list[str]:
    lines = [
        "   #    turn  model                      prompt  cache read  cache write  output  predicted  "
        "diverged at"
    ]
    for index, turn, model, u, predicted, divergence in rows:
        lines.append(
            f"   {index:<4} {turn:<5} {model[:26]:<26} {u.prompt_tokens:>6}  {u.cache_read:>10}  "
            f"{u.cache_write:>11}  {u.output:>6}  {_opt(predicted):>9}  {_opt(divergence):>11}"
        )
    return lines


# -- report --------------------------------------------------------------------------------------------------


def report_text(rec: Recording, pricing: Pricing | None = None, model: str | None = None) -> str:
    """Cost and cache per turn of ``rec`` at ``pricing`` (default: the packaged table). A trace names the
    model only as the vendor echoed it (``response_model``); ``model`` prices requests that lack it."""
    table = Pricing.default() if pricing is None else pricing
    rows: list[tuple[int, str, Usage]] = []
    if rec.kind == "snapshot":
        rows = [(r.turn, r.model, r.usage) for r in rec.records]
    else:
        rows = [(r["turn"], r["model"] or (model or ""), r["usage"]) for r in _requests_from_trace(rec.trace)]
    by_turn: dict[int, list[tuple[str, Usage]]] = {}
    for turn, m, u in rows:
        by_turn.setdefault(turn, []).append((m, u))
    at = "the packaged price table" if pricing is None else "the given prices"
    out = [f"{rec.path}: cost and cache per turn (USD at {at})"]
    out.append("turn  requests  prompt tok  cache read tok  cache read %  write tok  output tok  cost USD")
    costs: list[Cost | None] = []
    totals = [0, 0, 0, 0, 0]
    for turn in sorted(by_turn):
        items = by_turn[turn]
        turn_costs = [table.cost(m, u) if m else None for m, u in items]
        cost = total_cost(turn_costs)
        costs.extend(turn_costs)
        prompt = sum(u.prompt_tokens for _, u in items)
        read = sum(u.cache_read for _, u in items)
        write = sum(u.cache_write for _, u in items)
        output = sum(u.output for _, u in items)
        for k, v in enumerate((len(items), prompt, read, write, output)):
            totals[k] += v
        out.append(
            f"{turn:<5} {len(items):>8}  {prompt:>10}  {read:>14}  {_share(read, prompt):>12}  {write:>9}  "
            f"{output:>10}  {_usd(cost):>8}"
        )
    n, prompt, read, write, output = totals
    out.append(
        f"{'all':<5} {n:>8}  {prompt:>10}  {read:>14}  {_share(read, prompt):>12}  {write:>9}  {output:>10}  "
        f"{_usd(total_cost(costs)):>8}"
    )
    unpriced = sorted({m or "(model not recorded)" for _, m, u in rows if not m or table.price(m) is None})
    if unpriced:
        out.append(
            f"no price for {', '.join(unpriced)}: cost unknown (pass --prices FILE, or --model for a trace)"
        )
    return "\n".join(out)


def report_page(rec: Recording, pricing: Pricing | None = None, model: str | None = None) -> ReportPage:
    """The figures ``reasonstate report --html`` draws: per request its tokens by kind and USD at
    ``pricing`` (the packaged table by default; ``model`` prices a trace's requests that name none), the
    trace's ``cache.break`` events (cause, JSON path, sentence), and USD per turn. Figures and names only:
    no history text, no continuation payload."""
    from reasonstate.export.html import BreakRow, ReportPage, RequestRow, TurnRow

    table = Pricing.default() if pricing is None else pricing
    if rec.kind == "snapshot":
        rows = [(r.index, r.turn, r.model, r.usage) for r in rec.records]
    else:
        rows = [
            (r["index"], r["turn"], r["model"] or (model or ""), r["usage"])
            for r in _requests_from_trace(rec.trace)
        ]
    requests: list[RequestRow] = []
    by_turn: dict[int, list[Cost | None]] = {}
    for index, turn, m, u in rows:
        cost = table.cost(m, u) if m else None
        by_turn.setdefault(turn, []).append(cost)
        requests.append(
            RequestRow(
                index,
                turn,
                m,
                u.uncached_input,
                u.cache_read,
                u.cache_write,
                u.output,
                None if cost is None else cost.total,
            )
        )
    breaks = [
        BreakRow(
            index=e.data["index"] if isinstance(e.data.get("index"), int) else -1,
            unit=e.data.get("unit") if isinstance(e.data.get("unit"), int) else None,
            cause=str(e.data.get("cause", "")),
            path=str(e.data.get("path", "")),
            why=str(e.data.get("why", "")),
            declared=e.data.get("declared") is True,
        )
        for e in rec.trace.of_kind(EventKind.CACHE_BREAK)
    ]
    turns = []
    for turn in sorted(by_turn):
        turn_cost = total_cost(by_turn[turn])
        turns.append(TurnRow(turn, len(by_turn[turn]), None if turn_cost is None else turn_cost.total))
    unpriced = sorted({m or "(model not recorded)" for _, _, m, _ in rows if not m or table.price(m) is None})
    prices = "the packaged price table" if pricing is None else "the given prices"
    return ReportPage(rec.path, prices, tuple(requests), tuple(breaks), tuple(turns), tuple(unpriced))


def report_html(rec: Recording, pricing: Pricing | None = None, model: str | None = None) -> str:
    """:func:`report_page` as one self-contained HTML page (:func:`reasonstate.export.html.render`)."""
    from reasonstate.export.html import render

    return render(report_page(rec, pricing, model))


def check_model_flag(rec: Recording, model: str) -> None:
    """:class:`RecordingError` when ``report --model`` would change nothing, rather than ignore it: a
    snapshot records each request's model, and a trace whose every request names its model needs none.
    ``model`` prices the requests of a trace that do not name one."""
    if rec.kind == "snapshot":
        models = sorted({r.model for r in rec.records})
        raise RecordingError(
            f"--model prices the requests of a JSONL trace that do not name their model; this snapshot "
            f"records each request's model ({', '.join(models) or 'no requests'})"
        )
    named = {r["model"] for r in _requests_from_trace(rec.trace)}
    if "" not in named and None not in named:
        raise RecordingError(
            f"--model prices the requests that do not name their model, and every request of this trace "
            f"names one ({', '.join(sorted(map(str, named))) or 'no requests'}); --prices FILE prices "
            "them otherwise"
        )


# -- reading a trace back ------------------------------------------------------------------------------------


def _requests_from_trace(trace: Trace) -> list[dict[str, Any]]:
    """One entry per request.sent with its response.received (index, turn, model, usage, predicted,
    divergence), in order; a request without a response (a failed call) is left out."""
    turn = 0
    sent: dict[int, dict[str, Any]] = {}
    done: list[dict[str, Any]] = []
    for e in trace:
        data = e.data
        if e.kind == EventKind.TURN_OPENED:
            turn = int(data.get("turn", turn))
        elif e.kind == EventKind.REQUEST_SENT:
            sent[int(data.get("index", len(sent)))] = {
                "index": int(data.get("index", 0)),
                "turn": turn,
                "predicted": data.get("predicted_cache_read"),
                "divergence": data.get("divergence"),
            }
        elif e.kind == EventKind.RESPONSE_RECEIVED:
            entry = sent.pop(int(data.get("index", -1)), None)
            if entry is None:
                continue
            raw = data.get("usage")
            usage: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            entry["usage"] = Usage.of(
                **{
                    k: usage.get(k)
                    for k in ("uncached_input", "cache_read", "cache_write", "output", "reasoning")
                }
            )
            model = data.get("response_model")
            entry["model"] = model if isinstance(model, str) else ""
            done.append(entry)
    return done


def _turns_from_trace(trace: Trace) -> str:
    turns = [e.data for e in trace if e.kind == EventKind.TURN_OPENED]
    closed = sum(1 for e in trace if e.kind == EventKind.TURN_CLOSED)
    return f"{len(turns)} turns opened ({closed} closed); first user message: " + (
        _quote(str(turns[0].get("user", ""))) if turns else "none"
    )


def _brief(data: Mapping[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= 90 else text[:89] + "…"


def _quote(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 1] + "…")


def _opt(value: Any) -> str:
    return "-" if value is None else str(value)


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _usd(cost: Cost | None) -> str:
    return "unknown" if cost is None else f"{cost.total:.6f}"


# -- diff ----------------------------------------------------------------------------------------------------


_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


def api_of_body(body: Any) -> str | None:
    """Which vendor API a request body is for, from its shape: ``contents`` (Gemini generateContent),
    ``input`` (OpenAI Responses; the Gemini Interactions API by its own keys and step types); with
    ``messages``: Chat Completions when a message has a ``system`` / ``developer`` / ``tool`` role or
    ``tool_calls``, Anthropic Messages when the body has ``system`` or ``thinking`` or a message holds
    Anthropic-only blocks, else Chat Completions (``--api`` decides)."""
    if not isinstance(body, Mapping):
        return None
    if "contents" in body:
        return "generate_content"
    if "input" in body:
        return "interactions" if _interactions_shape(body) else "responses"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    dicts = [m for m in messages if isinstance(m, Mapping)]
    if any(m.get("role") in ("system", "developer", "tool") or "tool_calls" in m for m in dicts):
        return "chat"
    blocks = [
        b for m in dicts if isinstance(m.get("content"), list) for b in m["content"] if isinstance(b, Mapping)
    ]
    if "system" in body or "thinking" in body or any(b.get("type") in _ANTHROPIC_BLOCKS for b in blocks):
        return "messages"
    return "chat"


#: the step types only the Gemini Interactions API's ``input`` holds (docs/protocols.md §5.6)
_INTERACTIONS_STEPS = frozenset({"user_input", "model_output", "thought", "function_result"})


def _interactions_shape(body: Mapping[str, Any]) -> bool:
    """An ``input`` body of the Gemini Interactions API: its own top-level keys or its own step types."""
    if "system_instruction" in body or "previous_interaction_id" in body or "generation_config" in body:
        return True
    steps = body.get("input")
    return isinstance(steps, list) and any(
        isinstance(s, Mapping) and s.get("type") in _INTERACTIONS_STEPS for s in steps
    )


def _apis_of_body(body: Any) -> frozenset[str]:
    """The APIs a request body's shape fits (empty: cannot tell). A ``messages`` body with neither Chat
    nor Anthropic markers fits both."""
    found = api_of_body(body)
    if found is None:
        return frozenset()
    if found == "chat" and isinstance(body, Mapping):
        messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
        if not any(m.get("role") in ("system", "developer", "tool") or "tool_calls" in m for m in messages):
            return frozenset({"chat", "messages"})
    return frozenset({found})


def _shape_note(body: Any) -> str:
    """What gave the body's shape away: its top-level keys."""
    keys = sorted(body) if isinstance(body, Mapping) else []
    return f"top-level keys {', '.join(keys[:8])}{', ...' if len(keys) > 8 else ''}"


def diff_text(
    a_path: str | Path, b_path: str | Path, *, api: str | None = None, model: str | None = None
) -> str:
    """Where and why request body ``b`` stops extending request body ``a`` (the cause from the guard's
    vocabulary, the JSON path of the first differing value), or that it extends it."""
    from reasonstate.adapters import APIS, view_of
    from reasonstate.cache.divergence import explain

    bodies = []
    for path in (a_path, b_path):
        try:
            bodies.append(json.loads(Path(path).read_bytes()))
        except (OSError, ValueError) as exc:
            raise RecordingError(f"{path} is not a JSON request body: {exc}") from exc
    if api is not None and api in APIS:
        for path, body in zip((a_path, b_path), bodies, strict=True):
            fits = _apis_of_body(body)
            if fits and api not in fits:
                raise RecordingError(
                    f"--api {api}: {path} is not a {api} request body; its shape is that of "
                    f"{' or '.join(sorted(fits))} ({_shape_note(body)})"
                )
    kinds = {api or api_of_body(b) for b in bodies}
    if None in kinds:
        raise RecordingError("cannot tell which API these bodies are for: pass --api " + "|".join(APIS))
    if len(kinds) != 1:
        raise RecordingError(
            f"the two bodies are for different APIs ({sorted(map(str, kinds))}): no shared prefix"
        )
    kind = kinds.pop()
    assert kind is not None
    if kind not in APIS:
        raise RecordingError(f"--api must be one of {', '.join(APIS)}")
    first, second = (view_of(kind, b, model) for b in bodies)
    found = explain(first, second)
    head = f"{b_path} against {a_path} ({kind}, {len(first.units)} → {len(second.units)} prefix units):"
    if found is None:
        return f"{head}\n  extends it: every prefix unit of the first is unchanged at the start of the second"
    unit = second.units[found.unit] if found.unit < len(second.units) else first.units[found.unit]
    lines = [
        head,
        f"  diverges at prefix unit {found.unit} ({unit.section}), path {found.path}",
        f"  cause: {found.cause}",
        f"  the cache can serve at most the first {found.unit} units of the second request",
    ]
    if found.cause == "server_cleared":
        cleared = sorted(
            second.cleared - first.cleared, key=lambda p: [int(n) for n in re.findall(r"\d+", p)]
        )
        lines.append(
            "  the second request's context_management clears, server-side, before the vendor reads and "
            f"caches it (docs/protocols.md §4.7): {', '.join(cleared)}"
        )
    return "\n".join(lines)
