"""JSONL export of the trace layer, end to end on the emulators with the real SDKs: the file reads back into
the session's trace, survives ``kill -9`` between events, and a write that fails never fails the session.

The independent oracle for what a file must hold is the session's snapshot (pydantic's serialization of the
trace, not the exporter's).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.export.jsonl import JSONLExporter, TraceFileError, read_trace
from reasonstate.snapshot import trace_from_snapshot
from reasonstate.state import EventKind, Trace, TraceEvent
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from tests._export_support import VENDORS, Recorder, run_agent, vendor_session

ROOT = Path(__file__).resolve().parent.parent


def snapshot_trace(session: rs.Session) -> Trace:
    """The trace as the session's snapshot serializes it (pydantic JSON, parsed back)."""
    return trace_from_snapshot(json.loads(session.snapshot().model_dump_json())["trace"])


@pytest.mark.parametrize("vendor", VENDORS)
def test_the_file_reads_back_into_the_sessions_trace(vendor: str, tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with vendor_session(vendor, Recorder()) as (_emu, make):
        exporter = JSONLExporter(path)
        session = make(exporters=[exporter])
        run_agent(session)
    back = JSONLExporter.read(path)
    assert back == session.trace == snapshot_trace(session)
    assert [e.seq for e in back] == list(range(len(session.trace)))
    kinds = {e.kind for e in back}
    assert {EventKind.TOOL_EXECUTED, EventKind.TOOL_CALLS, EventKind.POLICY_DECISION} <= kinds
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == len(back) == exporter.written
    assert exporter.failures == 0


def test_tool_executed_times_each_handler_between_the_calls(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with vendor_session("anthropic", Recorder()) as (_emu, make):
        session = make(exporters=[JSONLExporter(path)])
        run_agent(session)
    trace = read_trace(path)
    executed = trace.of_kind(EventKind.TOOL_EXECUTED)
    calls = trace.of_kind(EventKind.TOOL_CALLS)
    assert [[c["id"] for c in e.data["calls"]] for e in executed] == [
        [c["id"] for c in e.data["calls"]] for e in calls
    ]
    for before, run in zip(calls, executed, strict=True):
        for timing in run.data["calls"]:
            assert before.at <= timing["started_at"] <= timing["started_at"] + timing["duration_s"] <= run.at
            assert timing["is_error"] is False


def test_one_file_may_hold_several_sessions_each_read_back_by_its_id(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    exporter = JSONLExporter(path)
    with AnthropicEmulator([ModelAction.answer("One."), ModelAction.answer("Two.")]) as emu:
        first = rs.Session(emu.client(), model="claude-sonnet-4-6", max_tokens=512, exporters=[exporter])
        second = rs.Session(emu.client(), model="claude-sonnet-4-6", max_tokens=512, exporters=[exporter])
        first.send("first?")
        second.send("second?")
        first.close()
        second.close()
    with pytest.raises(TraceFileError, match="2 sessions"):
        read_trace(path)
    ids = list(dict.fromkeys(json.loads(line)["session"] for line in path.read_text().splitlines()))
    assert [read_trace(path, session=i) for i in ids] == [first.trace, second.trace]


def test_a_torn_last_line_is_ignored_and_a_broken_complete_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with AnthropicEmulator([ModelAction.answer("One.")]) as emu:
        session = rs.Session(
            emu.client(), model="claude-sonnet-4-6", max_tokens=512, exporters=[JSONLExporter(path)]
        )
        session.send("first?")
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"session":"x","seq":99,"kind":"turn.op')
    assert read_trace(path) == session.trace
    lines = whole.split(b"\n")
    path.write_bytes(b"\n".join([lines[0], b'{"not": "an event"}', *lines[1:]]))
    with pytest.raises(TraceFileError, match=":2: not a trace event"):
        read_trace(path)


def test_a_restored_session_appends_from_its_restored_event_on(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with AnthropicEmulator([ModelAction.answer("One."), ModelAction.answer("Two.")]) as emu:
        session = rs.Session(
            emu.client(), model="claude-sonnet-4-6", max_tokens=512, exporters=[JSONLExporter(path)]
        )
        session.send("first?")
        snapshot = session.snapshot()
        restored = rs.Session.restore(snapshot, emu.client(), exporters=[JSONLExporter(path)])
        restored.send("second?")
    back = read_trace(path)
    assert back == restored.trace  # the original's events, then the restored session's from session.restored
    (restore_event,) = back.of_kind(EventKind.RESTORED)
    assert restore_event.seq == len(session.trace)


def test_a_write_that_fails_is_logged_and_counted_and_the_session_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "no-such-directory" / "trace.jsonl"
    exporter = JSONLExporter(path)
    caplog.set_level(logging.WARNING, logger="reasonstate.export")
    with AnthropicEmulator([ModelAction.answer("One.")]) as emu:
        session = rs.Session(emu.client(), model="claude-sonnet-4-6", max_tokens=512, exporters=[exporter])
        reply = session.send("first?")
    assert reply.text == "One." and session.report().requests == 1
    assert exporter.failures == len(session.trace) > 0 and exporter.written == 0
    failures = [r for r in caplog.records if r.name == "reasonstate.export"]
    assert len(failures) == exporter.failures
    assert all("FileNotFoundError" in r.getMessage() for r in failures)


# -- kill -9 between events ----------------------------------------------------------------------------------

_WRITER = """
import json, sys
import reasonstate as rs
from reasonstate.export.jsonl import JSONLExporter
from reasonstate.snapshot import trace_from_snapshot
from reasonstate.state import thaw
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator

tool = rs.Tool(name="get_weather", parameters={"type": "object"}, handler=lambda city: {"c": 20})
n = [0]

def respond(request):
    n[0] += 1
    if n[0] % 2:
        return ModelAction(reasoning="Check it.", tool_calls=(ToolCallSpec("get_weather", {"city": "Rome"}),))
    return ModelAction(reasoning="Done.", text="Mild.")

with AnthropicEmulator(respond) as emu:
    session = rs.Session(emu.client(), model="claude-sonnet-4-6", tools=[tool], max_tokens=4096,
                         thinking={"type": "enabled", "budget_tokens": 2048},
                         exporters=[JSONLExporter(sys.argv[1])])
    for turn in range(10_000):
        session.run(f"Weather, turn {turn}?")
        trace = trace_from_snapshot(json.loads(session.snapshot().model_dump_json())["trace"])
        print(json.dumps([{"seq": e.seq, "kind": e.kind, "at": e.at, "data": thaw(e.data)} for e in trace]),
              flush=True)
"""


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.011])
def test_a_process_killed_between_events_leaves_every_earlier_event_readable(
    tmp_path: Path, delay: float
) -> None:
    path = tmp_path / "trace.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    printed: list[Any] = []
    try:
        for _ in range(6):  # six whole turns done, their traces printed after send returned
            line = process.stdout.readline()
            assert line, process.stderr.read().decode() if process.stderr else ""
            printed.append(json.loads(line))
        time.sleep(delay)  # somewhere inside a later turn
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    # whatever it printed before the kill, in whole lines (the kill may cut the last one short)
    for line in process.stdout.read().split(b"\n")[:-1]:
        if line.strip():
            printed.append(json.loads(line))
    process.stdout.close()
    if process.stderr is not None:
        process.stderr.close()
    last = Trace(
        tuple(TraceEvent(seq=e["seq"], kind=e["kind"], data=e["data"], at=e["at"]) for e in printed[-1])
    )
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    for line in complete.splitlines():  # every complete line is an event
        json.loads(line)
    back = read_trace(path)
    # everything the session had when it last printed is in the file, unchanged, in order ...
    assert len(back) >= len(last) and Trace(back.events[: len(last)]) == last
    # ... and what follows is the start of the next turn, event after event
    assert [e.seq for e in back] == list(range(len(back)))
    assert all(e.kind in vars(EventKind).values() for e in back)
