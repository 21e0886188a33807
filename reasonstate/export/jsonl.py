"""The trace layer as JSON Lines: one event per line, appended and flushed as it happens.

Each line is ``{"session": id, "seq": n, "kind": ..., "at": wall time, "data": {...}}`` (the snapshot's
trace form plus the session id), compact UTF-8 JSON. :func:`read_trace` reads a file back into a
:class:`~reasonstate.state.Trace`.

Invariants:
  * every event is written as one whole line and flushed to the operating system before the next one,
    so a process killed at any point leaves every earlier event on complete lines and at most one torn
    last line, which :func:`read_trace` ignores (``fsync=True`` also forces each line to the disk, for
    power loss);
  * ``read_trace(path) == session.trace`` for a file one session wrote from its start;
  * the trace holds opaque payloads only as digests (:mod:`reasonstate.state.trace`), so nothing opaque is
    ever in the file; visible reasoning and messages are, as in the trace (it is the whole trace layer).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from reasonstate.errors import ReasonStateError
from reasonstate.export import ExportContext
from reasonstate.state import Trace, TraceEvent, thaw

__all__ = ["JSONLExporter", "TraceFileError", "read_trace"]

_log = logging.getLogger("reasonstate.export")


class TraceFileError(ReasonStateError, ValueError):
    """A JSONL trace file that is not one: a complete line that is not an event, or events of several
    sessions read without naming one."""


def event_line(event: TraceEvent, session_id: str) -> bytes:
    """One event as its JSONL line (newline included)."""
    record = {
        "session": session_id,
        "seq": event.seq,
        "kind": event.kind,
        "at": event.at,
        "data": thaw(event.data),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"


class JSONLExporter:
    """Appends every trace event of its sessions to ``path`` (created if missing, never truncated).

    One exporter may serve several sessions: each line names its session. The file is opened on the
    first event and closed when the last session using it closes. A write that fails (disk full, file
    removed) is logged and counted in ``failures``; the session goes on.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.failures = 0
        self.written = 0
        self._file: IO[bytes] | None = None
        self._open: set[str] = set()
        self._lock = threading.Lock()

    def export(self, events: Sequence[TraceEvent], context: ExportContext) -> None:
        """Write one line per event and flush (``fsync`` too when asked); a failed write is counted."""
        with self._lock:
            self._open.add(context.session_id)
            for event in events:
                try:
                    line = event_line(event, context.session_id)
                    if self._file is None:
                        self._file = open(self.path, "ab")  # noqa: SIM115 (kept open between events)
                    self._file.write(line)
                    self._file.flush()
                    if self.fsync:
                        os.fsync(self._file.fileno())
                    self.written += 1
                except (OSError, ValueError, TypeError) as exc:
                    self.failures += 1
                    _log.warning(
                        "JSONL export of event %d (%s) to %s failed: %s",
                        event.seq,
                        event.kind,
                        self.path,
                        type(exc).__name__,
                    )

    def close(self, context: ExportContext) -> None:
        """The session is done; the file is closed when no session using it is left open."""
        with self._lock:
            self._open.discard(context.session_id)
            if not self._open and self._file is not None:
                self._file.close()
                self._file = None

    @staticmethod
    def read(path: str | os.PathLike[str], session: str | None = None) -> Trace:
        """:func:`read_trace`."""
        return read_trace(path, session)


def read_trace(path: str | os.PathLike[str], session: str | None = None) -> Trace:
    """The events of ``path`` as a :class:`~reasonstate.state.Trace`, in file order.

    ``session`` picks one session's events; it is required when the file holds several sessions, unless
    they continue each other (``seq`` runs 0, 1, 2, ... across them: a session restored from a snapshot
    of the one before, writing on to the same file). A torn last line (no
    newline: the writer died mid-line) is ignored; any other line that is not an event raises
    :class:`TraceFileError`.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    complete = lines[:-1]  # the part after the last newline is empty or a torn line
    records: list[dict[str, Any]] = []
    for number, line in enumerate(complete, 1):
        try:
            record = json.loads(line)
            event = TraceEvent(seq=record["seq"], kind=record["kind"], data=record["data"], at=record["at"])
            sid = record["session"]
        except (ValueError, KeyError, TypeError) as exc:
            raise TraceFileError(f"{path}:{number}: not a trace event ({type(exc).__name__}: {exc})") from exc
        records.append({"session": sid, "event": event})
    sessions = list(dict.fromkeys(r["session"] for r in records))
    continued = [r["event"].seq for r in records] == list(range(len(records)))
    if session is None and len(sessions) > 1 and not continued:
        raise TraceFileError(f"{path} holds {len(sessions)} sessions {sessions}: pass session=")
    return Trace(tuple(r["event"] for r in records if session is None or r["session"] == session))
