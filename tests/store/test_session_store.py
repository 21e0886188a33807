"""A session persisted as it goes and continued elsewhere, on the embedded SQLite store: every commit is one
appended entry (a delta after the first), a load anywhere sends the very bytes the writer would have, and
conflicts, failures and edits keep the contract of docs/concepts/store.md."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.errors import SessionConflict, SnapshotError, StoreError
from reasonstate.store import SQLiteStore
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from tests.conftest import CLOCK, MODEL, SYSTEM, THINKING, WEATHER, answer, run_chain, three_step_chain

OPTIONS: dict[str, Any] = {
    "system": SYSTEM,
    "tools": [WEATHER, CLOCK],
    "max_tokens": 4096,
    "thinking": THINKING,
}


def script() -> list[Any]:
    return [*three_step_chain(), answer(1), *three_step_chain(), answer(2)]


def wire(request: rs.session.VendorRequest) -> str:
    """A request's keyword arguments as the JSON the SDK sends (key order kept)."""
    return json.dumps(request.kwargs, ensure_ascii=False, default=str)


def drive(session: rs.Session, start: int, stop: int) -> None:
    """Turns ``start`` to ``stop - 1`` of the conversation (a tool chain on even turns, a plain answer
    on odd ones)."""
    for i in range(start, stop):
        if i % 2 == 0:
            run_chain(session, f"Question {i}: Paris or Rome?")
        else:
            session.send(f"Follow-up {i}")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


def test_every_commit_is_one_appended_entry_and_a_load_continues_byte_identically(db: Path) -> None:
    with AnthropicEmulator(script()) as emu:
        store = SQLiteStore(db)
        first = rs.Session(emu.client(), model=MODEL, store=store, session_id="conv", **OPTIONS)
        assert first.version == 1  # the id is taken at construction
        drive(first, 0, 2)
        assert first.version == 1 + 4  # three chain steps and one answer
        kinds = [e.kind for e in store.read("conv")]
        assert kinds == ["checkpoint", "delta", "delta", "delta", "delta"]
        # another handle on the file (another process would open its own): the session goes on
        second = rs.Session.load(SQLiteStore(db), "conv", emu.client(), tools=[WEATHER, CLOCK])
        assert second.history == first.history
        assert second.execution == first.execution
        for text in ("probe", "Question 2: Paris or Rome?"):
            assert wire(second.next_request(text)) == wire(first.next_request(text))
        expected = json.dumps(first.next_request("Question 2: Paris or Rome?").kwargs, separators=(",", ":"))
        sent = len(emu.requests)
        drive(second, 2, 4)  # the emulator checks every replayed signature byte for byte
        assert json.loads(emu.requests[sent].body) == json.loads(expected)
        third = rs.Session.load(SQLiteStore(db), "conv", emu.client())
        assert third.history == second.history
        assert third.execution == second.execution
        assert wire(third.next_request("next")) == wire(second.next_request("next"))
        exported = rs.SessionSnapshot.load(store.export("conv"))
        assert exported.history == second.snapshot().history
        assert exported.execution == second.snapshot().execution


def test_deltas_do_not_grow_with_the_session(db: Path) -> None:
    actions = [answer(i) for i in range(60)]
    with AnthropicEmulator(actions) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="long", **OPTIONS)
        for i in range(60):
            session.send(f"turn {i}")
    sizes = [len(e.body) for e in store.read("long")[1:]]
    assert max(sizes[40:]) < 1.3 * max(sizes[5:15])


def test_a_second_writer_conflicts_and_keeps_the_reply_it_paid_for(db: Path) -> None:
    """openai/openai-agents-python#4205, #4988 (concurrent pops returned the same item) and
    langchain-ai/langgraph#8796 (two workers forked one checkpoint chain): two workers continue one
    session; the second to commit writes nothing, gets SessionConflict with its reply, and sends nothing
    more from its stale object. The stored history has one line of turns."""
    with AnthropicEmulator([answer(i) for i in range(5)]) as emu:
        store = SQLiteStore(db)
        origin = rs.Session(emu.client(), model=MODEL, store=store, session_id="c", **OPTIONS)
        origin.send("hello")
        a = rs.Session.load(SQLiteStore(db), "c", emu.client())
        b = rs.Session.load(SQLiteStore(db), "c", emu.client())
        a.send("from worker a")
        with pytest.raises(SessionConflict) as info:
            b.send("from worker b")
        assert info.value.reply is not None and isinstance(info.value.reply, rs.Reply)
        assert (info.value.expected, info.value.found) == (2, 3)
        sent = len(emu.requests)
        with pytest.raises(SessionConflict):
            b.send("again")
        assert len(emu.requests) == sent  # nothing sent from a stale object
        stored = rs.Session.load(store, "c", emu.client())
        assert [t.user for t in stored.history.turns] == ["hello", "from worker a"]


def test_a_new_session_on_a_taken_id_conflicts_before_anything_is_sent(db: Path) -> None:
    with AnthropicEmulator([answer(0)]) as emu:
        store = SQLiteStore(db)
        rs.Session(emu.client(), model=MODEL, store=store, session_id="taken", **OPTIONS)
        with pytest.raises(SessionConflict):
            rs.Session(emu.client(), model=MODEL, store=store, session_id="taken", **OPTIONS)
        assert emu.requests == []


def test_a_failing_store_keeps_the_reply_and_the_next_append_writes_it(db: Path) -> None:
    with AnthropicEmulator([answer(i) for i in range(3)]) as emu:
        store = SQLiteStore(db, timeout=0.05)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="f", **OPTIONS)
        session.send("one")
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(StoreError) as info:
            session.send("two")
        assert not isinstance(info.value, SessionConflict)
        assert isinstance(info.value.reply, rs.Reply)
        assert len(session.history) == 2  # kept in memory
        assert len(rs.Session.load(SQLiteStore(db), "f", emu.client()).history) == 1
        blocker.execute("ROLLBACK")
        assert session.flush() == session.version
        loaded = rs.Session.load(SQLiteStore(db), "f", emu.client())
        assert loaded.history == session.history
        session.send("three")
        assert rs.Session.load(SQLiteStore(db), "f", emu.client()).history == session.history


def test_a_row_edited_in_the_database_is_refused_on_load(db: Path) -> None:
    with AnthropicEmulator(three_step_chain()) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="e", **OPTIONS)
        run_chain(session)
    raw = sqlite3.connect(db, isolation_level=None)
    seq, body = raw.execute(
        "SELECT seq, body FROM reasonstate_entries WHERE session_id='e' AND seq=2"
    ).fetchone()
    head, packed = bytes(body).split(b"\n", 1)
    text = zlib.decompress(packed, -15)  # the first delta after the checkpoint: no preset dictionary
    # (a payload is written as a JSON value or, in a delta, as its text: a string of escaped JSON)
    edited = re.sub(rb'(signature\\?":\\?")', rb"\1X", text, count=1)
    assert edited != text
    repacker = zlib.compressobj(6, zlib.DEFLATED, -15)
    repacked = repacker.compress(edited) + repacker.flush()
    flipped = packed[:20] + bytes([packed[20] ^ 0x40]) + packed[21:]
    for forged in (repacked, flipped):
        raw.execute(
            "UPDATE reasonstate_entries SET body=? WHERE session_id='e' AND seq=?",
            (head + b"\n" + forged, seq),
        )
        with AnthropicEmulator([]) as emu, pytest.raises(SnapshotError):
            rs.Session.load(SQLiteStore(db), "e", emu.client())


def test_load_of_a_missing_session_is_a_store_error(db: Path) -> None:
    with AnthropicEmulator([]) as emu, pytest.raises(StoreError, match="no session"):
        rs.Session.load(SQLiteStore(db), "nope", emu.client())


def test_a_long_tool_chain_writes_each_step_once(db: Path) -> None:
    from reasonstate.testing import ModelAction, ToolCallSpec

    steps = [
        ModelAction(
            reasoning=f"Step {i}: look again. " * 6, tool_calls=(ToolCallSpec("get_time", {"city": "Rome"}),)
        )
        for i in range(30)
    ]
    with AnthropicEmulator([*steps, answer(0)]) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="chain", **OPTIONS)
        reply = session.send("Keep checking the time in Rome.")
        while reply.tool_calls:
            reply = session.send_tool_results({c.id: {"time": "12:00"} for c in reply.tool_calls})
        sizes = [len(e.body) for e in store.read("chain")[1:]]
        assert len(sizes) == 31
        assert max(sizes[20:30]) < 1.2 * max(sizes[2:10])  # step 30 costs what step 3 did
        loaded = rs.Session.load(SQLiteStore(db), "chain", emu.client())
        assert loaded.history == session.history
        assert wire(loaded.next_request("and now?")) == wire(session.next_request("and now?"))


def test_export_and_import_move_a_session_between_stores_in_the_snapshot_format(tmp_path: Path) -> None:
    with AnthropicEmulator([*three_step_chain(), answer(1)]) as emu:
        source = SQLiteStore(tmp_path / "a.db")
        session = rs.Session(emu.client(), model=MODEL, store=source, session_id="moved", **OPTIONS)
        run_chain(session)
        snapshot = source.export("moved")
        assert snapshot.history == session.snapshot().history
        assert snapshot.execution == session.snapshot().execution
        target = SQLiteStore(":memory:")
        assert target.import_(snapshot.model_dump_json(), "moved-here") == 1
        with pytest.raises(SessionConflict):
            target.import_(snapshot, "moved-here")
        moved = rs.Session.load(target, "moved-here", emu.client())
        assert wire(moved.next_request("more?")) == wire(session.next_request("more?"))
        moved.send("more?")  # accepted by the emulator: the signatures came through byte for byte
        assert target.version("moved-here") == 2
        with pytest.raises(StoreError, match="no session"):
            target.export("absent")


class _LostReply(SQLiteStore):
    """A real SQLite store whose next append is written, then reported failed (a time-out after the
    server committed: the reply was lost on the way back)."""

    lose_next = False

    def _append(self, session_id: str, expected: int, entries: Any, ttl: float | None) -> None:
        super()._append(session_id, expected, entries, ttl)
        if self.lose_next:
            self.lose_next = False
            raise StoreError("the store timed out (after committing)")


def test_an_append_whose_reply_was_lost_is_adopted_not_conflicted(db: Path) -> None:
    with AnthropicEmulator([answer(i) for i in range(3)]) as emu:
        store = _LostReply(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="lost", **OPTIONS)
        session.send("one")
        store.lose_next = True
        with pytest.raises(StoreError) as info:
            session.send("two")
        assert not isinstance(info.value, SessionConflict) and isinstance(info.value.reply, rs.Reply)
        assert store.version("lost") == 3  # it was written all the same
        session.send("three")  # builds on the entry that landed: no conflict, no duplicate
        assert session.version == store.version("lost") == 4
        loaded = rs.Session.load(SQLiteStore(db), "lost", emu.client())
        assert [t.user for t in loaded.history.turns] == ["one", "two", "three"]
        assert loaded.history == session.history


def test_each_delta_is_compressed_against_the_one_before(db: Path) -> None:
    with AnthropicEmulator([answer(i) for i in range(6)]) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="z", **OPTIONS)
        for i in range(6):
            session.send(f"turn {i}")
    previous = b""
    for entry in store.read("z")[1:]:
        head, packed = entry.body.split(b"\n", 1)
        assert head.startswith(b"rs-delta/4 sha256:")
        assert head[18:] == hashlib.sha256(packed).hexdigest().encode()  # the digest of the stored bytes
        unpacker = zlib.decompressobj(-15, zdict=previous) if previous else zlib.decompressobj(-15)
        text = unpacker.decompress(packed) + unpacker.flush()
        assert json.loads(text)["turns"] >= 0
        if previous:  # what repeats the delta before costs next to nothing
            assert len(packed) < len(text) / 3
        previous = text


def _digested(version: bytes, plain: bytes) -> bytes:
    """An older delta's head line: its version and the digest of its JSON (written by hand, as the older
    formats were)."""
    return version + b" sha256:" + hashlib.sha256(plain).hexdigest().encode() + b"\n"


def _rewrite_deltas(
    raw: sqlite3.Connection, session_id: str, body_of: Callable[[bytes, bytes], bytes]
) -> list[tuple[int, bytes]]:
    """Rewrite each stored ``rs-delta/4`` delta of ``session_id`` as ``body_of(json, packed)`` (the JSON it
    packs, inflated by hand with the previous delta's JSON as the dictionary, and its stored deflate stream);
    return the rows as they were."""
    rows: list[tuple[int, bytes]] = raw.execute(
        "SELECT seq, body FROM reasonstate_entries WHERE session_id=? AND kind='delta' ORDER BY seq",
        (session_id,),
    ).fetchall()
    previous = b""
    for seq, body in rows:
        _head, packed = bytes(body).split(b"\n", 1)
        unpacker = zlib.decompressobj(-15, zdict=previous) if previous else zlib.decompressobj(-15)
        previous = unpacker.decompress(packed) + unpacker.flush()
        raw.execute(
            "UPDATE reasonstate_entries SET body=? WHERE session_id=? AND seq=?",
            (body_of(previous, packed), session_id, seq),
        )
    return rows


def test_uncompressed_deltas_written_before_still_load(db: Path) -> None:
    """``rs-delta/1`` bodies (the JSON as it is) load; a session continued from them writes ``rs-delta/4``
    ones."""
    with AnthropicEmulator([answer(i) for i in range(4)]) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="old", **OPTIONS)
        for i in range(3):
            session.send(f"turn {i}")
        raw = sqlite3.connect(db, isolation_level=None)
        _rewrite_deltas(raw, "old", lambda plain, _packed: _digested(b"rs-delta/1", plain) + plain)
        loaded = rs.Session.load(SQLiteStore(db), "old", emu.client())
        assert loaded.history == session.history
        assert wire(loaded.next_request("next")) == wire(session.next_request("next"))
        loaded.send("turn 3")
        assert store.read("old")[-1].body.startswith(b"rs-delta/4 ")
        again = rs.Session.load(SQLiteStore(db), "old", emu.client())
        assert again.history == loaded.history


def test_deltas_larger_than_the_compression_window_load(db: Path) -> None:
    """Replies of ~50 KB (a delta and its dictionary beyond DEFLATE's 32 KB window) write and read back."""
    long = [
        ModelAction(reasoning=f"Long thought {i}. " * 2500, text=f"Long answer {i}. " * 2500)
        for i in range(3)
    ]
    with AnthropicEmulator(long) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="big", **OPTIONS)
        for i in range(3):
            session.send(f"turn {i}")
        assert all(len(e.body) < 40_000 for e in store.read("big")[1:])
        loaded = rs.Session.load(SQLiteStore(db), "big", emu.client())
        assert loaded.history == session.history
        assert wire(loaded.next_request("next")) == wire(session.next_request("next"))


def test_the_store_errors_are_named_on_the_package() -> None:
    """Issue 22 names them rs.SessionConflict and rs.StoreError: an application catches them without
    importing reasonstate.errors."""
    assert rs.SessionConflict is SessionConflict and rs.StoreError is StoreError
    assert {"SessionConflict", "StoreError"} <= set(rs.__all__)
    assert issubclass(rs.SessionConflict, rs.StoreError)


def test_a_load_changes_nothing_so_loading_workers_never_conflict(db: Path) -> None:
    """A worker that only loads and flushes writes nothing (a load adds no trace event): two such
    workers do not conflict, and neither does the writer that comes after them."""
    with AnthropicEmulator([answer(0), answer(1)]) as emu:
        store = SQLiteStore(db)
        writer = rs.Session(emu.client(), model=MODEL, store=store, session_id="quiet", **OPTIONS)
        writer.send("one")
        version = store.version("quiet")
        a = rs.Session.load(SQLiteStore(db), "quiet", emu.client())
        b = rs.Session.load(SQLiteStore(db), "quiet", emu.client())
        assert a.flush() == b.flush() == version == store.version("quiet")
        assert a.trace == writer.trace
        writer.send("two")  # the writer is not stale: nobody wrote
        assert store.version("quiet") == version + 1


def _decisions(session: rs.Session) -> list[tuple[Any, ...]]:
    """The trace as (seq, kind), with the data of the events a commit defers (the rest carries timings
    and signature digests that differ from run to run)."""
    deferred = ("policy.decision", "turn.closed")
    return [(e.seq, e.kind, dict(e.data) if e.kind in deferred else None) for e in session.trace.events]


def test_a_decision_held_back_by_a_commit_is_completed_by_a_session_loaded_elsewhere(db: Path) -> None:
    """A keep-all ``policy.decision`` (and the ``turn.closed`` after it) waits for the next request,
    which computes its cache figures for free, so the entry a commit writes holds it back. A session
    loaded from that entry in another process completes it with its own next request, and the log then
    replays to the trace a single process would have: no event lost, the figures the same."""
    with AnthropicEmulator([answer(i) for i in range(4)]) as emu:
        control = rs.Session(emu.client(), model=MODEL, **OPTIONS)
        for i in range(4):
            control.send(f"turn {i}")
    with AnthropicEmulator([answer(i) for i in range(4)]) as emu:
        writer = rs.Session(emu.client(), model=MODEL, store=SQLiteStore(db), session_id="h", **OPTIONS)
        for i in range(2):
            writer.send(f"turn {i}")  # no flush: the writer just stops
        worker = rs.Session.load(SQLiteStore(db), "h", emu.client())
        for i in range(2, 4):
            worker.send(f"turn {i}")
        replayed = rs.Session.load(SQLiteStore(db), "h", emu.client())
    expected = _decisions(control)
    assert [kind for _, kind, _ in expected].count("policy.decision") == 4
    assert _decisions(worker) == expected
    assert _decisions(replayed) == expected


def test_a_session_that_only_loads_writes_no_held_back_decision(db: Path) -> None:
    """The log holds a held-back decision already: a worker that loads and flushes writes nothing, and
    the writer goes on without a conflict, writing the decision complete with its next request."""
    with AnthropicEmulator([answer(0), answer(1)]) as emu:
        store = SQLiteStore(db)
        writer = rs.Session(emu.client(), model=MODEL, store=store, session_id="q", **OPTIONS)
        writer.send("one")
        version = store.version("q")
        loaded = rs.Session.load(SQLiteStore(db), "q", emu.client())
        assert loaded.flush() == version == store.version("q")
        writer.send("two")
        assert store.version("q") == version + 1
        assert _decisions(rs.Session.load(SQLiteStore(db), "q", emu.client())) == _decisions(writer)


def test_deltas_whose_digest_is_of_their_json_written_before_still_load(db: Path) -> None:
    """``rs-delta/3`` bodies (compressed, the digest of the JSON, checked after decompressing: written
    before the digest moved to the stored bytes) load as they did, an edited one is refused, and a session
    continued from them writes ``rs-delta/4`` ones."""
    with AnthropicEmulator([answer(i) for i in range(4)]) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="v3", **OPTIONS)
        for i in range(3):
            session.send(f"turn {i}")
        raw = sqlite3.connect(db, isolation_level=None)
        rows = _rewrite_deltas(raw, "v3", lambda plain, packed: _digested(b"rs-delta/3", plain) + packed)
        loaded = rs.Session.load(SQLiteStore(db), "v3", emu.client())
        assert loaded.history == session.history
        assert wire(loaded.next_request("next")) == wire(session.next_request("next"))
        loaded.send("turn 3")
        assert store.read("v3")[-1].body.startswith(b"rs-delta/4 ")
        assert rs.Session.load(SQLiteStore(db), "v3", emu.client()).history == loaded.history
        seq, body = rows[-1]
        edited = bytes(body).replace(b"rs-delta/4 sha256:", b"rs-delta/3 sha256:", 1)  # a JSON digest no more
        raw.execute("UPDATE reasonstate_entries SET body=? WHERE session_id='v3' AND seq=?", (edited, seq))
        with pytest.raises(SnapshotError, match="digest"):
            rs.Session.load(SQLiteStore(db), "v3", emu.client())


def test_compressed_deltas_without_held_events_written_before_still_load(db: Path) -> None:
    """``rs-delta/2`` bodies (compressed, no ``held``: written before held-back events were stored) load
    as they did."""
    with AnthropicEmulator([answer(i) for i in range(3)]) as emu:
        store = SQLiteStore(db)
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id="v2", **OPTIONS)
        for i in range(3):
            session.send(f"turn {i}")
        raw = sqlite3.connect(db, isolation_level=None)
        rows = raw.execute(
            "SELECT seq, body FROM reasonstate_entries WHERE session_id='v2' AND kind='delta' ORDER BY seq"
        ).fetchall()
        previous, rewritten = b"", b""
        for seq, body in rows:
            _head, packed = bytes(body).split(b"\n", 1)
            unpacker = zlib.decompressobj(-15, zdict=previous) if previous else zlib.decompressobj(-15)
            previous = unpacker.decompress(packed) + unpacker.flush()
            data = json.loads(previous)
            data.pop("held", None)
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
            packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=rewritten) if rewritten else None
            packer = packer or zlib.compressobj(6, zlib.DEFLATED, -15)
            body2 = b"rs-delta/2 sha256:" + hashlib.sha256(text).hexdigest().encode() + b"\n"
            body2 += packer.compress(text) + packer.flush()
            rewritten = text
            raw.execute("UPDATE reasonstate_entries SET body=? WHERE session_id='v2' AND seq=?", (body2, seq))
        loaded = rs.Session.load(SQLiteStore(db), "v2", emu.client())
        assert loaded.history == session.history
        assert loaded.execution == session.execution
        assert wire(loaded.next_request("next")) == wire(session.next_request("next"))
