"""The session-store paths tests/store/test_session_store.py leaves out: AsyncSession on the async stores
(send, tool chains, streams, load, conflicts), ``stream()`` and ``run()`` persisting each step, a store
failure inside a tool chain followed by the next append or ``flush()``, the checks of ``store=`` and
``session_id=``, a prefix or model change between turns (a checkpoint entry), and a DeepSeek session.

Async and cross-backend tests run on SQLite, PostgreSQL and Redis (tests/store/backends.py); the failure
tests hold SQLite's write lock from another connection, a real failure of the real store.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.errors import InvalidOption, SessionConflict, StoreError
from reasonstate.policies import Fold, KeepLast
from reasonstate.store import AsyncSQLiteStore, SQLiteStore
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests import conftest as anthropic_case
from tests import test_fold_and_scratch as fold_case
from tests import test_session_openai_chat as chat_case
from tests.store.backends import BACKENDS, Backend, open_backend
from tests.store.test_peer_issues import anthropic_session, assert_one_line, same_next_request, users, wire

OPTIONS: dict[str, Any] = {
    "system": anthropic_case.SYSTEM,
    "tools": [anthropic_case.WEATHER, anthropic_case.CLOCK],
    "max_tokens": 4096,
    "thinking": anthropic_case.THINKING,
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with open_backend(request.param, tmp_path) as b:
        yield b


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


def results_for(reply: rs.Reply) -> dict[str, Any]:
    return {c.id: {"city": c.arguments["city"], "tool": c.name} for c in reply.tool_calls}


def kinds(store: Any, session_id: str) -> list[str]:
    return [e.kind for e in store.read(session_id)]


# -- AsyncSession on the async stores ------------------------------------------------------------------------
def test_async_session_persists_a_tool_chain_and_a_stream_and_loads_byte_identically(
    backend: Backend,
) -> None:
    script = [*anthropic_case.three_step_chain(), anthropic_case.answer(1), anthropic_case.answer(2)]
    script += [anthropic_case.answer(3)]

    async def main(emu: AnthropicEmulator) -> None:
        store = backend.aopen()
        other = backend.aopen()
        try:
            session = rs.AsyncSession(emu.async_client(), model=anthropic_case.MODEL, **OPTIONS)
            assert session.version == 0 and session.session_id is None
            session = rs.AsyncSession(
                emu.async_client(), model=anthropic_case.MODEL, store=store, session_id="a", **OPTIONS
            )
            assert session.version == 0  # an AsyncSession takes its id with its first call
            reply = await session.send("Paris or Rome: which is warmer?")
            assert session.version == 2 and await store.version("a") == 2
            while reply.tool_calls:
                before = session.version
                reply = await session.send_tool_results(results_for(reply))
                assert session.version == before + 1 == await other.version("a")
            async with session.stream("And tomorrow?") as stream:
                events = [e async for e in stream]
            assert events and stream.reply.text == "Follow-up answer 1."
            assert session.version == 5 and await other.version("a") == 5
            entries = await other.read("a")
            assert [e.kind for e in entries] == ["checkpoint"] + ["delta"] * 4

            loaded = await rs.AsyncSession.load(other, "a", emu.async_client())
            assert loaded.history == session.history and loaded.execution == session.execution
            assert wire(loaded.next_request("Thanks")) == wire(session.next_request("Thanks"))
            first = len(emu.requests)
            await loaded.send("Thanks")
            with pytest.raises(SessionConflict) as info:  # the first object is one version behind
                await session.send("Thanks")
            assert emu.requests[-1].body == emu.requests[first].body
            assert isinstance(info.value.reply, rs.Reply)
            assert (info.value.expected, info.value.found) == (5, 6)
            sent = len(emu.requests)
            with pytest.raises(SessionConflict):
                await session.send("again")
            with pytest.raises(SessionConflict):
                async with session.stream("again"):
                    pass
            with pytest.raises(SessionConflict):
                await session.flush()
            assert len(emu.requests) == sent  # nothing more from the stale object

            taken = rs.AsyncSession(
                emu.async_client(), model=anthropic_case.MODEL, store=store, session_id="a", **OPTIONS
            )
            with pytest.raises(SessionConflict):
                await taken.send("a new session on a taken id")
            assert len(emu.requests) == sent  # refused before anything was paid for
            with pytest.raises(StoreError, match="no session"):
                await rs.AsyncSession.load(other, "absent", emu.async_client())
            last = await rs.AsyncSession.load(store, "a", emu.async_client())
            assert users(last) == [
                "Paris or Rome: which is warmer?",
                "And tomorrow?",
                "Thanks",
            ]
        finally:
            await store.close()
            await other.close()

    with AnthropicEmulator(script) as emu:
        asyncio.run(main(emu))


# -- stream() and run() persist each step --------------------------------------------------------------------
def handled_tools(log: list[str]) -> list[rs.Tool]:
    def weather(city: str) -> dict[str, Any]:
        log.append(f"weather {city}")
        return {"city": city, "temp": 20}

    def clock(city: str) -> dict[str, Any]:
        log.append(f"time {city}")
        return {"city": city, "time": "12:00"}

    return [
        rs.Tool(
            name=anthropic_case.WEATHER.name,
            description=anthropic_case.WEATHER.description,
            parameters=anthropic_case.WEATHER.parameters,
            handler=weather,
        ),
        rs.Tool(
            name=anthropic_case.CLOCK.name,
            description=anthropic_case.CLOCK.description,
            parameters=anthropic_case.CLOCK.parameters,
            handler=clock,
        ),
    ]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run-on_event"])
def test_run_persists_each_step_before_the_next_is_sent(db: Path, streamed: bool) -> None:
    log: list[str] = []
    tools = handled_tools(log)
    script = [*anthropic_case.three_step_chain(), anthropic_case.answer(1), anthropic_case.answer(2)]
    with AnthropicEmulator(script) as emu:
        store, watcher = SQLiteStore(db), SQLiteStore(db)
        options = {**OPTIONS, "tools": tools}
        session = rs.Session(emu.client(), model=anthropic_case.MODEL, store=store, session_id="r", **options)
        seen: list[tuple[int, int]] = []  # (requests made so far, stored version) at each request's events

        def on_event(event: rs.StreamEvent) -> None:
            seen.append((len(emu.requests), watcher.version("r")))

        reply = session.run("Paris or Rome: which is warmer?", on_event=on_event if streamed else None)
        assert reply.text and log == ["weather Paris", "weather Rome", "time Rome"]
        assert session.version == 4 and kinds(watcher, "r") == ["checkpoint"] + ["delta"] * 3
        if streamed:  # while request k streams, the k - 1 steps before it are stored
            assert sorted(set(seen)) == [(1, 1), (2, 2), (3, 3)]
        loaded = rs.Session.load(SQLiteStore(db), "r", emu.client(), tools=tools)
        assert loaded.history == session.history and loaded.execution == session.execution
        same_next_request(session, loaded, emu, "Thanks", lambda s, t: s.run(t))


def test_stream_and_stream_tool_results_persist_each_step(db: Path) -> None:
    with AnthropicEmulator([*anthropic_case.three_step_chain(), anthropic_case.answer(1)]) as emu:
        store = SQLiteStore(db)
        session = anthropic_session(emu, store=store, session_id="s")
        with session.stream("Paris or Rome: which is warmer?") as stream:
            for _ in stream:
                pass
        reply = stream.reply
        assert session.version == 2
        while reply.tool_calls:
            with session.stream_tool_results(results_for(reply)) as stream:
                for _ in stream:
                    pass
            reply = stream.reply
            assert SQLiteStore(db).version("s") == session.version
        assert session.version == 4
        with session.stream("left early") as stream:
            for _ in stream:
                break  # leaving before the end commits nothing, so nothing is stored
        assert session.version == 4 == SQLiteStore(db).version("s")
        loaded = rs.Session.load(SQLiteStore(db), "s", emu.client())
        assert loaded.history == session.history and loaded.execution == session.execution
        assert wire(loaded.next_request("next")) == wire(session.next_request("next"))


def test_async_run_and_stream_persist_each_step(backend: Backend) -> None:
    log: list[str] = []
    tools = handled_tools(log)
    script = [*anthropic_case.three_step_chain() * 2, anthropic_case.answer(1)]

    async def main(emu: AnthropicEmulator) -> None:
        store, watcher = backend.aopen(), backend.aopen()
        try:
            session = rs.AsyncSession(
                emu.async_client(),
                model=anthropic_case.MODEL,
                store=store,
                session_id="ar",
                **{**OPTIONS, "tools": tools},
            )
            seen: list[tuple[int, int]] = []

            async def on_event(event: rs.StreamEvent) -> None:
                seen.append((len(emu.requests), await watcher.version("ar")))

            await session.run("Paris or Rome?")
            assert session.version == 4 == await watcher.version("ar")
            await session.run("And again, streamed", on_event=on_event)
            assert sorted(set(seen)) == [(4, 4), (5, 5), (6, 6)]
            assert session.version == 7
            reply = await session.send("One more")
            assert reply.text == "Follow-up answer 1."
            entries = await watcher.read("ar")
            assert [e.kind for e in entries] == ["checkpoint"] + ["delta"] * 7
            loaded = await rs.AsyncSession.load(watcher, "ar", emu.async_client(), tools=tools)
            assert loaded.history == session.history and loaded.execution == session.execution
            assert wire(loaded.next_request("x")) == wire(session.next_request("x"))
        finally:
            await store.close()
            await watcher.close()

    with AnthropicEmulator(script) as emu:
        asyncio.run(main(emu))
    assert len(log) == 6


# -- a store failure inside a tool chain ---------------------------------------------------------------------
def test_a_store_failure_mid_chain_is_written_by_the_next_append_and_by_flush(db: Path) -> None:
    script = [*anthropic_case.three_step_chain(), *(anthropic_case.answer(i) for i in range(3))]
    with AnthropicEmulator(script) as emu:
        session = anthropic_session(emu, store=SQLiteStore(db, timeout=0.05), session_id="f")
        reply = session.send("Paris or Rome: which is warmer?")
        assert reply.tool_calls and session.version == 2
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(StoreError) as info:
            session.send_tool_results(results_for(reply))
        assert not isinstance(info.value, SessionConflict)
        reply = info.value.reply
        assert isinstance(reply, rs.Reply) and reply.tool_calls  # the chain goes on from the kept reply
        assert session.version == 2 and len(session.execution) == 2
        # a reload sees the last complete commit: the first step, its calls still pending
        mid = rs.Session.load(SQLiteStore(db), "f", emu.client())
        assert len(mid.execution) == 1 and mid.state == rs.TurnState.AWAITING_TOOL_RESULTS
        blocker.execute("ROLLBACK")
        reply = session.send_tool_results(results_for(reply))  # this append writes both commits
        assert reply.text and session.version == 3
        assert kinds(SQLiteStore(db), "f") == ["checkpoint", "delta", "delta"]
        loaded = rs.Session.load(SQLiteStore(db), "f", emu.client())
        assert loaded.history == session.history and loaded.execution == session.execution

        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError):
            session.send("Thanks")
        with pytest.raises(StoreError):
            session.flush()  # still locked: still kept
        assert len(session.history) == 2 and SQLiteStore(db).version("f") == 3
        blocker.execute("ROLLBACK")
        assert session.flush() == 4
        assert session.flush() == 4  # nothing left to write
        loaded = rs.Session.load(SQLiteStore(db), "f", emu.client())
        assert loaded.history == session.history and loaded.execution == session.execution
        same_next_request(session, loaded, emu, "Bye", lambda s, t: s.send(t))


def test_an_async_store_failure_keeps_the_reply_and_flush_writes_it(db: Path) -> None:
    async def main(emu: AnthropicEmulator) -> None:
        store = AsyncSQLiteStore(db, timeout=0.05)
        try:
            session = rs.AsyncSession(
                emu.async_client(), model=anthropic_case.MODEL, store=store, session_id="af", **OPTIONS
            )
            reply = await session.send("Paris or Rome: which is warmer?")
            blocker = sqlite3.connect(db, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError) as info:
                await session.send_tool_results(results_for(reply))
            assert isinstance(info.value.reply, rs.Reply) and info.value.reply.tool_calls
            blocker.execute("ROLLBACK")
            assert await session.flush() == 3
            loaded = await rs.AsyncSession.load(store, "af", emu.async_client())
            assert loaded.history == session.history and loaded.execution == session.execution
            assert loaded.state == rs.TurnState.AWAITING_TOOL_RESULTS
            reply = info.value.reply
            while reply.tool_calls:  # the loaded session finishes the chain
                reply = await loaded.send_tool_results(results_for(reply))
            assert reply.text and loaded.version == 4
        finally:
            await store.close()

    with AnthropicEmulator(anthropic_case.three_step_chain()) as emu:
        asyncio.run(main(emu))


# -- the checks of store= and session_id= --------------------------------------------------------------------
def test_store_and_session_id_are_checked_before_anything_is_written(db: Path) -> None:
    with AnthropicEmulator([anthropic_case.answer(0)]) as emu:
        store, astore = SQLiteStore(db), AsyncSQLiteStore(db)
        client, aclient = emu.client(), emu.async_client()
        for bad in (object(), {}, str(db), db, 42):
            with pytest.raises(InvalidOption, match="store="):
                rs.Session(client, model=anthropic_case.MODEL, store=bad, session_id="x", **OPTIONS)
            with pytest.raises(InvalidOption, match="store="):
                rs.AsyncSession(aclient, model=anthropic_case.MODEL, store=bad, **OPTIONS)
        with pytest.raises(InvalidOption, match="sync store"):
            rs.Session(client, model=anthropic_case.MODEL, store=astore, session_id="x", **OPTIONS)
        with pytest.raises(InvalidOption, match="async store"):
            rs.AsyncSession(aclient, model=anthropic_case.MODEL, store=store, session_id="x", **OPTIONS)
        with pytest.raises(InvalidOption, match="pass store="):
            rs.Session(client, model=anthropic_case.MODEL, session_id="x", **OPTIONS)
        for bad_id in ("", "a\0b", "x" * 257, 42, b"bytes"):
            with pytest.raises(InvalidOption, match="session_id="):
                rs.Session(client, model=anthropic_case.MODEL, store=store, session_id=bad_id, **OPTIONS)
        with pytest.raises(InvalidOption, match="flush"):
            rs.Session(client, model=anthropic_case.MODEL, **OPTIONS).flush()
        with pytest.raises(InvalidOption, match="sync store"):
            rs.Session.load(astore, "x", client)  # type: ignore[arg-type]
        with pytest.raises(InvalidOption, match="async store"):
            asyncio.run(rs.AsyncSession.load(store, "x", aclient))  # type: ignore[arg-type]
        assert store.sessions() == [] and emu.requests == []
        # store=True/False stays the OpenAI Responses request option, not a session store: on an Anthropic
        # client it is an option the SDK does not declare
        with pytest.raises(InvalidOption, match="openai responses"):
            rs.Session(client, model=anthropic_case.MODEL, store=False, **OPTIONS)
        # the default id: a fresh random one, taken at construction
        auto = rs.Session(client, model=anthropic_case.MODEL, store=store, **OPTIONS)
        assert auto.session_id and auto.version == 1
        assert [i.session_id for i in store.sessions()] == [auto.session_id]
        longest = rs.Session(client, model=anthropic_case.MODEL, store=store, session_id="é" * 256, **OPTIONS)
        assert longest.version == 1
        asyncio.run(astore.close())


# -- a prefix or model change between turns ------------------------------------------------------------------
def test_a_change_between_turns_is_a_checkpoint_and_loads(backend: Backend) -> None:
    script = [anthropic_case.answer(i) for i in range(6)]
    with AnthropicEmulator(script) as emu:
        store = backend.open()
        session = anthropic_session(emu, store=store, session_id="c")
        session.send("one")
        session.change_prefix(system=anthropic_case.SYSTEM + " Answer in French.")
        assert session.flush() == 3  # written at once by flush: a checkpoint
        assert kinds(store, "c") == ["checkpoint"]  # a read starts at the newest checkpoint
        loaded = rs.Session.load(backend.open(), "c", emu.client())
        assert loaded.prefix == session.prefix and loaded.history == session.history
        assert wire(loaded.next_request("two")) == wire(session.next_request("two"))
        session.send("two")
        session.switch_model("claude-opus-4-1")
        session.send("three")  # the change is written with the next commit, as a checkpoint
        assert session.version == 5 and kinds(store, "c") == ["checkpoint"]
        session.send("four")
        assert kinds(store, "c") == ["checkpoint", "delta"]
        loaded = rs.Session.load(backend.open(), "c", emu.client())
        assert loaded.model == "claude-opus-4-1" and loaded.prefix == session.prefix
        assert loaded.history == session.history and loaded.execution == session.execution
        assert list(loaded.trace.events) == list(session.trace.events)  # a load adds no event
        same_next_request(session, loaded, emu, "five", lambda s, t: s.send(t))
        assert users(rs.Session.load(backend.open(), "c", emu.client())) == [
            "one",
            "two",
            "three",
            "four",
            "five",
        ]


# -- DeepSeek (Chat Completions, reasoning_content) ----------------------------------------------------------
def test_a_deepseek_session_round_trips_mid_chain(backend: Backend) -> None:
    script = [*chat_case.chain(), chat_case.follow_up(1), *chat_case.chain(), chat_case.follow_up(2)]
    with OpenAIChatEmulator(script, dialect="deepseek") as emu:
        writer = chat_case.session_on(emu, "deepseek", store=backend.open(), session_id="ds")
        reply = writer.send("Paris or Rome: which is warmer?")
        assert reply.tool_calls
        # loaded mid-chain, its calls pending: it finishes the chain (reasoning_content replayed)
        mid = rs.Session.load(backend.open(), "ds", emu.client())
        assert mid.state == rs.TurnState.AWAITING_TOOL_RESULTS
        while reply.tool_calls:
            reply = mid.send_tool_results({c.id: {"city": c.arguments["city"]} for c in reply.tool_calls})
        mid.send("Thanks")
        assert_one_line(backend.open(), "ds")
        loaded = rs.Session.load(backend.open(), "ds", emu.client())
        assert loaded.history == mid.history and loaded.execution == mid.execution
        sent = json.loads(emu.requests[1].body)["messages"]
        assert any(m.get("reasoning_content") for m in sent if m["role"] == "assistant")
        same_next_request(mid, loaded, emu, "Madrid or Lisbon?", chat_case.run_chain)


# -- rewrites of the past: a policy's views, a fold, a switch to another vendor ------------------------------
def test_a_policy_rewriting_earlier_views_is_a_delta_and_loads(backend: Backend) -> None:
    """KeepLast(1) compacts an earlier turn's view when a later one closes: the delta replaces the turns
    from the first changed one on, and a load rebuilds the very history (and the next request)."""
    turn = [*anthropic_case.three_step_chain(), anthropic_case.answer(1)]
    script = turn * 2 + [anthropic_case.answer(2)] * 2
    with AnthropicEmulator(script) as emu:
        writer = anthropic_session(emu, store=backend.open(), session_id="p", policy=KeepLast(1))
        anthropic_case.run_chain(writer, "Paris or Rome?")
        writer.send("And tomorrow?")
        anthropic_case.run_chain(writer, "Madrid or Lisbon?")
        writer.send("Thanks")
        views = [t.view for t in writer.history.turns]
        assert len(set(views)) > 1  # the policy did rewrite earlier views
        assert kinds(backend.open(), "p") == ["checkpoint"] + ["delta"] * 8
        loaded = rs.Session.load(backend.open(), "p", emu.client())
        assert loaded.history == writer.history and loaded.execution == writer.execution
        same_next_request(writer, loaded, emu, "Bye", lambda s, t: s.send(t))


def test_a_fold_is_a_checkpoint_and_a_load_needs_its_summarize(backend: Backend) -> None:
    with AnthropicEmulator(fold_case.script()) as emu:
        plain = fold_case.session_on(emu, "anthropic")
        for q in fold_case.Q[:3]:
            fold_case.turn(plain, q)
        threshold = fold_case.context_after(plain)
    summarize = fold_case.Summarizer()
    fold = Fold(threshold, fold_case.KEEP_TAIL, summarize)
    with AnthropicEmulator([*fold_case.script(), anthropic_case.answer(9)]) as emu:
        writer = fold_case.session_on(emu, "anthropic", fold=fold, store=backend.open(), session_id="fold")
        for q in fold_case.Q[:3]:
            fold_case.turn(writer, q)
        assert writer.history.fold is not None
        assert kinds(backend.open(), "fold")[0] == "checkpoint" and writer.version > 1
        with pytest.raises(InvalidOption, match="fold="):
            rs.Session.load(backend.open(), "fold", emu.client())
        loaded = rs.Session.load(backend.open(), "fold", emu.client(), fold=fold)
        assert loaded.history == writer.history and loaded.history.fold == writer.history.fold
        fold_case.turn(loaded, fold_case.Q[3])  # after the fold: a delta again
        assert kinds(backend.open(), "fold")[-1] == "delta"
        again = rs.Session.load(backend.open(), "fold", emu.client(), fold=fold)
        assert again.history == loaded.history
        same_next_request(loaded, again, emu, fold_case.Q[4], lambda s, t: s.send(t))


def test_a_switch_to_another_vendor_is_a_checkpoint_and_loads_on_that_vendor(backend: Backend) -> None:
    script = [*anthropic_case.three_step_chain(), anthropic_case.answer(1)]
    with AnthropicEmulator(script) as claude, OpenAIChatEmulator(dialect="deepseek") as deepseek:
        deepseek.script.extend([chat_case.follow_up(1), chat_case.follow_up(2), chat_case.follow_up(3)])
        writer = anthropic_session(claude, store=backend.open(), session_id="sw")
        anthropic_case.run_chain(writer, "Paris or Rome?")
        writer.switch(deepseek.client(), model="deepseek-v4-pro", dialect="deepseek")
        assert writer.flush() == 5 and kinds(backend.open(), "sw") == ["checkpoint"]
        writer.send("And now on DeepSeek?")
        loaded = rs.Session.load(backend.open(), "sw", deepseek.client())
        assert loaded.model == "deepseek-v4-pro"
        assert loaded.history == writer.history and loaded.execution == writer.execution
        same_next_request(writer, loaded, deepseek, "Thanks", lambda s, t: s.send(t))


def test_a_store_failure_at_the_end_of_a_stream_keeps_the_streamed_reply(db: Path) -> None:
    with AnthropicEmulator([anthropic_case.answer(1), anthropic_case.answer(2)]) as emu:
        session = anthropic_session(emu, store=SQLiteStore(db, timeout=0.05), session_id="sf")
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError) as info, session.stream("Streamed, the store locked") as stream:
            for _ in stream:
                pass
        assert stream.reply is info.value.reply and stream.reply.text == "Follow-up answer 1."
        assert len(session.history) == 1 and SQLiteStore(db).version("sf") == 1
        blocker.execute("ROLLBACK")
        with session.stream("And now?") as stream:  # the next append writes both turns
            for _ in stream:
                pass
        assert session.version == 2
        loaded = rs.Session.load(SQLiteStore(db), "sf", emu.client())
        assert loaded.history == session.history and loaded.execution == session.execution


# -- export, import, delete, expiry, as a session sees them -------------------------------------------------
def test_export_import_and_delete_round_trip_through_sessions(backend: Backend) -> None:
    script = [*anthropic_case.three_step_chain(), *(anthropic_case.answer(i) for i in range(4))]
    with AnthropicEmulator(script) as emu:
        store = backend.open()
        writer = anthropic_session(emu, store=store, session_id="a")
        anthropic_case.run_chain(writer, "Paris or Rome?")
        writer.send("Thanks")
        snapshot = store.export("a")
        assert snapshot.history == writer.snapshot().history
        assert snapshot.execution == writer.snapshot().execution
        assert store.import_(snapshot, "b") == 1
        with pytest.raises(SessionConflict):
            store.import_(snapshot, "a")
        assert sorted(i.session_id for i in store.sessions()) == ["a", "b"]
        copy = rs.Session.load(backend.open(), "b", emu.client())
        assert copy.history == writer.history and copy.execution == writer.execution
        assert wire(copy.next_request("Next")) == wire(writer.next_request("Next"))
        copy.send("Next")  # the copy goes on under its own id; "a" is untouched
        assert store.version("b") == 2 and store.version("a") == 5
        assert store.delete("a") is True
        with pytest.raises(StoreError, match="no session"):
            rs.Session.load(backend.open(), "a", emu.client())
        with pytest.raises(SessionConflict) as info:  # the deleted session's object is refused
            writer.send("Still there?")
        assert info.value.found == 0
        again = rs.Session.load(backend.open(), "b", emu.client())
        assert users(again) == ["Paris or Rome?", "Thanks", "Next"]


def test_an_expired_session_is_gone_and_its_object_conflicts(backend: Backend) -> None:
    with AnthropicEmulator([anthropic_case.answer(i) for i in range(3)]) as emu:
        writer = anthropic_session(emu, store=backend.open(ttl=1.0), session_id="t")
        writer.send("one")
        assert backend.open().version("t") == 2
        time.sleep(1.5)
        with pytest.raises(StoreError, match="no session"):
            rs.Session.load(backend.open(), "t", emu.client())
        with pytest.raises(SessionConflict) as info:
            writer.send("two")
        assert (info.value.expected, info.value.found) == (2, 0)
        assert isinstance(info.value.reply, rs.Reply)
        fresh = anthropic_session(emu, store=backend.open(ttl=1.0), session_id="t")  # the id is free again
        assert fresh.version == 1
