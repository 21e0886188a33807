"""The fleet test of issue 22: 8 worker processes serve interleaved turns of 40 sessions from one queue,
through SQLite (a file), PostgreSQL and Redis, while workers are SIGKILLed at random and at chosen points;
no turn is lost or duplicated, no history forks, and every session ends with the history, the execution
records and the next request bytes of a single-process control run.

How it is bounded and deterministic (the machinery is in tests/store/_fleet.py):

- one deterministic Anthropic emulator (``deterministic=True``, a responder that reads the request) runs
  in this process; a request sent twice gets the same bytes, so a turn retried after a kill (the model
  answered, the worker died before the append) continues exactly as the control run did. Nothing is
  cached (``cache_min_tokens`` above every prompt), so the usage too is a function of the request;
- the supervisor kills a random busy worker every ``KILL_EVERY`` acks and tells about a tenth of the
  first deliveries to kill themselves at one of three points (the model answered / one step of a chain
  stored / the whole turn stored, not acked); another tenth are delivered twice at once, so two workers
  race on one turn and one of them gets ``SessionConflict``;
- every wait has a time-out and the run has a deadline; every worker is killed and reaped on the way out.

Workers start from a ``forkserver`` that imported ``anthropic`` and ``reasonstate`` once: a spawned worker
pays about 4 s of CPU for the ``anthropic`` import alone, and this test starts a new one after every kill
(about 30 per store; with ``REASONSTATE_FLEET_START=spawn``, on a 2-core machine at load 16, SQLite got
through 87 of the 120 turns in the 240 s deadline, its workers having used 50 s of CPU). A forked worker
is still a fresh process with its own store connection and nothing of this process (its emulator thread,
its connections).

The figures (turns, kills, deaths, conflicts, lost/duplicated/forked, CPU and wall time) are in every
assertion message, and ``pytest -s tests/store/test_fleet.py`` prints them for each store.
``REASONSTATE_FLEET_SESSIONS`` / ``_TURNS`` change the size (default 40 x 3), ``REASONSTATE_FLEET_SEED``
the supervisor's choices of victims, self-kills and duplicates.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import reasonstate as rs
from reasonstate.testing.anthropic import AnthropicEmulator
from tests.store import _fleet, services

SESSIONS = int(os.environ.get("REASONSTATE_FLEET_SESSIONS", "40"))
TURNS = int(os.environ.get("REASONSTATE_FLEET_TURNS", "3"))
WORKERS = 8
KILL_EVERY = 8
START = os.environ.get("REASONSTATE_FLEET_START", "forkserver")
PROBE = "[probe] one more question"


def _context() -> Any:
    context = multiprocessing.get_context(START)
    if START == "forkserver":  # imported once in the server; each worker is forked from it
        context.set_forkserver_preload(
            [
                "anthropic",
                "reasonstate",
                "tests.store._fleet",
                "reasonstate.store.postgres",
                "reasonstate.store.redis",
            ]
        )
    return context


def _wire(request: Any) -> str:
    return json.dumps(request.kwargs, ensure_ascii=False, default=str)


def _records(session: rs.Session) -> list[Any]:
    """The execution records but their wall-clock durations."""
    return [attrs.evolve(r, duration_s=0.0) for r in session.execution]


@attrs.frozen
class Control:
    """One session as a single process plays it, with no store and no kills."""

    history: Any
    records: list[Any]
    next_request: str
    requests: list[bytes]  # the distinct request bodies, in order


@pytest.fixture(scope="module")
def model() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator(
        _fleet.respond, secret=_fleet.SECRET, deterministic=True, cache_min_tokens=10**9
    ) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def control(model: AnthropicEmulator) -> dict[int, Control]:
    start = len(model.requests)
    client = model.client()
    sessions = {s: _fleet.control_session(client) for s in range(SESSIONS)}
    for k in range(TURNS):  # interleaved as a fleet would, though any order gives the same
        for s, session in sessions.items():
            _fleet.play(session, s, k)
    bodies: dict[int, list[bytes]] = {s: [] for s in sessions}
    for r in model.requests[start:]:
        tag = _fleet.tag_of(r.body)
        assert tag is not None
        bodies[tag].append(r.body)
    return {
        s: Control(
            session.history, _records(session), _wire(session.next_request(PROBE)), _fleet.distinct(bodies[s])
        )
        for s, session in sessions.items()
    }


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Where the fleet keeps its sessions: its own SQLite file, PostgreSQL schema or Redis key prefix."""
    kind = request.param
    if kind == "sqlite":
        yield kind, {"path": str(tmp_path / "fleet.db"), "timeout": 30.0}
    elif kind == "postgres":
        pytest.importorskip("reasonstate.store.postgres", reason="PostgresStore is not on this branch")
        import psycopg
        from psycopg import sql

        url = services.postgres_url()
        schema = f"rs_fleet_{secrets.token_hex(6)}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            yield kind, {"dsn": url, "schema": schema, "timeout": 30.0}
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '10s'")
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    else:
        pytest.importorskip("reasonstate.store.redis", reason="RedisStore is not on this branch")
        import redis

        url = services.redis_url()
        prefix = f"rs-fleet-{secrets.token_hex(6)}:"
        try:
            yield kind, {"url": url, "prefix": prefix, "timeout": 30.0}
        finally:
            r = redis.Redis.from_url(url)
            try:
                keys = list(r.scan_iter(match=prefix + "*", count=1000))
                if keys:
                    r.delete(*keys)
            finally:
                r.close()


def test_a_fleet_killed_at_random_loses_duplicates_and_forks_nothing(
    model: AnthropicEmulator, control: dict[int, Control], spec: tuple[str, dict[str, Any]]
) -> None:
    """8 workers, 40 sessions x 3 turns (a two-step tool chain with thinking and redacted thinking, a
    plain answer, a one-call chain: every signature goes through the store and back to the emulator,
    which verifies it), SIGKILLs throughout: 0 lost, 0 duplicated, 0 forked; every session's history,
    records, stored version, requests and next request equal the control run's."""
    store = _fleet.open_store(spec)  # creates the schema once, before the workers race to
    start = len(model.requests)
    began = time.monotonic()
    figures = _fleet.Fleet(
        _context(),
        spec,
        model.base_url,
        sessions=SESSIONS,
        turns=TURNS,
        workers=WORKERS,
        kill_every=KILL_EVERY,
        seed=sum(map(ord, spec[0])) + int(os.environ.get("REASONSTATE_FLEET_SEED", "0")),
        deadline=240.0,
    ).run()
    sent: dict[int, list[bytes]] = {s: [] for s in range(SESSIONS)}
    cut = 0
    for r in model.requests[start:]:
        try:
            r.json()
        except ValueError:  # a worker killed while it sent the body: the emulator answered 400
            cut += 1
            continue
        tag = _fleet.tag_of(r.body)
        assert tag is not None, (r.method, r.path, r.body[:300])
        sent[tag].append(r.body)
    lost = duplicated = forked = 0
    notes: list[str] = []
    client = model.client()
    try:
        for s, expected in control.items():
            sid = _fleet.session_id(s)
            session = rs.Session.load(store, sid, client, tools=_fleet.TOOLS)
            users = [t.user for t in session.history.turns]
            wanted = [_fleet.user_text(s, k) for k in range(TURNS)]
            lost += sum(1 for text in wanted if text not in users)
            duplicated += len(users) - len(set(users))
            checks = {
                "history": session.history == expected.history,
                "records": _records(session) == expected.records,
                # one entry per model call (a checkpoint first), none more: no write was repeated
                "version": session.version == 1 + len(expected.requests),
                # every request sent (retries too) is the control's, in its order
                "requests": _fleet.distinct(sent[s]) == expected.requests,
                # the request of the stored final step (a stale racer may send an older one after it)
                "last request": _fleet.distinct(sent[s])[-1:] == expected.requests[-1:],
                "next request": _wire(session.next_request(PROBE)) == expected.next_request,
            }
            if not all(checks.values()):
                forked += users == wanted  # the right turns, other contents: a history that forked
                notes.append(
                    f"{sid}: turns {users}, version {session.version}, {len(sent[s])} requests, "
                    f"{len(_fleet.distinct(sent[s]))} distinct (control {len(expected.requests)}); "
                    f"differs in {[name for name, ok in checks.items() if not ok]}"
                )
    finally:
        store.close()
    wall = time.monotonic() - began
    report = (
        f"[{spec[0]}] {figures}; lost {lost}, duplicated {duplicated}, forked {forked}; "
        f"{len(model.requests) - start} requests sent ({cut} cut short by a kill); wall {wall:.1f}s "
        f"on {os.cpu_count()} cores at load {os.getloadavg()[0]:.1f}"
        + "".join(f"\n  {note}" for note in notes)
    )
    print(report)
    assert (lost, duplicated, forked, notes) == (0, 0, 0, []), report
    assert figures.acks == SESSIONS * TURNS, report
    assert figures.deaths >= 5 and figures.kills >= 3, f"too few kills to mean anything: {report}"
    assert figures.served["already"] + figures.served["resumed"] > 0, report


def test_a_turn_served_again_is_acked_continued_or_reloaded_never_repeated(
    model: AnthropicEmulator, control: dict[int, Control], tmp_path: Path
) -> None:
    """The worker's three ways in, one at a time in this process: a turn the store already holds is acked
    without a model call; a chain whose worker died after its first step is continued from the store; a
    second delivery racing the first meets SessionConflict, reloads and finds the turn done. The session
    ends as the control run's."""
    from reasonstate.store import SQLiteStore

    store = SQLiteStore(tmp_path / "one.db")
    client = model.client()
    sent = len(model.requests)
    assert _fleet.serve_turn(store, client, 0, 0) == _fleet.Done("fresh", 3, 0)
    assert _fleet.serve_turn(store, client, 0, 0) == _fleet.Done("already", 0, 0)  # died before its ack
    assert len(model.requests) == sent + 3
    # a worker died after the first step of turn 2's chain: the next one continues it
    _fleet.serve_turn(store, client, 0, 1)
    rs.Session.load(store, _fleet.session_id(0), client, tools=_fleet.TOOLS).send(_fleet.user_text(0, 2))
    assert _fleet.serve_turn(store, client, 0, 2) == _fleet.Done("resumed", 1, 0)
    # two deliveries of one turn: the one that appends second conflicts, reloads, and finds it done
    racer = _fleet._open(store, client, 1)
    assert _fleet.serve_turn(store, client, 1, 0).how == "fresh"
    with pytest.raises(rs.SessionConflict):
        racer.send(_fleet.user_text(1, 0))
    assert _fleet.serve_turn(store, client, 1, 0) == _fleet.Done("already", 0, 0)
    final = rs.Session.load(store, _fleet.session_id(0), client, tools=_fleet.TOOLS)
    assert final.history == control[0].history
    assert _records(final) == control[0].records
    assert _wire(final.next_request(PROBE)) == control[0].next_request
    store.close()
