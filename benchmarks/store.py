"""What the session store costs (issue 22): per commit by history length, per send, per worker, per byte.

Four measurements in one run, on the Anthropic Messages case of ``overhead.py`` (extended thinking, short
turns: the harshest case for the per-turn ratios, since each reply is small):

1. **per-commit store cost** at 10, 100 and 1,000 turns of history: the time of ``session._write`` (the
   append step a ``send`` ends with: ``_unwritten`` computes the delta entry, then ``store.append`` writes
   it) plus the store's work during the commit before it (``session._note_turns``: the session notes
   which turns each new history changed, so the write never walks the history), split into the delta
   part and the store part (``store.append`` alone); in wall time (``perf_counter``) and in this
   process's CPU time (``process_time``: a burst of load elsewhere barely moves it), each with its own
   ratio, and the target holds for both. One session is grown for
   real to 1,000 turns (``Session.send`` on a SQLite store, so its log is 1,001 real entries); each
   backend then holds its first 11, 101 and 1,001 entries under new ids, and ``Session.load`` continues
   them. A repeat makes one send on each of the three sessions, the order rotating, and times their
   ``_write``; each loaded session first makes one untimed send, then serves timed ones while it has
   fewer than ``size + max(1, size // 10)`` turns, and is reloaded after. The sends go through the
   anthropic SDK on an in-process ``httpx2.MockTransport`` answering the bytes the emulator gave once
   (``fresh_session.py``'s transport): nothing but the append step is timed, and nothing else runs
   meanwhile. Reported: each size's median, and ``1000/10``, the median of the per-repeat ratios of the
   largest size's time to the smallest's (the two ran within milliseconds of each other, so a burst of
   load elsewhere slows both), with their interquartile range. Target: flat, ``1000/10`` at most
   :data:`FLAT` in wall time and in CPU time, on every backend.
2. **send with a store over send in memory**: ``session.send`` of a session with ``SQLiteStore`` (a file,
   WAL) and of one without a store, the same questions, side by side and alternating, against the
   Anthropic emulator in its own process (each side its own SDK client); each pair of sessions is grown
   untimed to :data:`PAIR_TURNS` turns and serves :data:`PAIR_REPEATS` timed repeats. Reported: the
   median of the per-repeat ratios, with their interquartile range, and the median per-repeat difference
   (``store ms``), in wall time and in this process's CPU time (which other load on the machine barely
   moves). Target <= :data:`SEND` on both clocks: the CPU ratio leaves out the emulator's work, which adds
   the same time to both sides' wall, so it is the stricter of the two, and the one a loaded machine
   cannot blur.
3. **commits per second with 8 worker processes** on PostgreSQL and on Redis (SQLite on one file too, for
   comparison): each worker opens its own store and appends, on 4 sessions of its own, the real entries of
   the grown session (its checkpoint, then its delta entries in turn, each append naming the version it
   builds on) with raw ``store.append`` calls for :data:`FLEET_SECONDS` seconds: the store's throughput,
   not the emulator's. No target; printed with the append latency (median, 99th percentile).
4. **bytes stored per turn over payload bytes received**, from measurement 2's stored sessions: the
   entry bodies their timed sends appended (what the store writes per turn; the checkpoint a session
   writes when it is created, before any turn, is printed apart) over the response bodies the emulator
   sent them, read on the wire by an ``httpx`` response hook. Target <= :data:`BYTES`. Also printed: what
   the SQLite file grew by over the entry bytes it holds (pages, keys, session rows; not in the target).

PostgreSQL (``REASONSTATE_TEST_POSTGRES``, default ``postgresql://postgres@127.0.0.1:5432/test``) gets a
fresh schema, dropped after; Redis (``REASONSTATE_TEST_REDIS``, default ``redis://127.0.0.1:6379/0``) a
random key prefix, deleted after. A server that does not answer is reported and its rows skipped (no
failure). Exits 1 when a target is missed.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/store.py``; ``--repeats N`` and ``--sizes 10,100``
for measurement 1, ``--sends N`` for measurement 2, ``--fleet-seconds S``; ``--only 2`` or ``--only 1,3``
runs only those measurements, 4 coming with 2).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import math
import multiprocessing
import os
import secrets
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _overhead import NO_FULL_COLLECTION, _client, _emulators, _new_session, environment
from fresh_session import _setup
from overhead import ANTHROPIC

import reasonstate as rs
from reasonstate.journal import DELTA, Entry
from reasonstate.store import SQLiteStore, Store

FLAT = 1.5
SEND = 1.10
BYTES = 1.5
SIZES = (10, 100, 1000)
REPEATS = 49
SENDS = 201
PAIR_TURNS = 10
PAIR_REPEATS = 20
FLEET_WORKERS = 8
FLEET_SESSIONS = 4
FLEET_SECONDS = 3.0
POSTGRES_URL = os.environ.get("REASONSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("REASONSTATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
CASE = ANTHROPIC


# -- the backends ------------------------------------------------------------------------------------------
def _answers(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=2):
            return True
    except OSError:
        return False


class Backend:
    """One store backend: how to open a store on it (in this or a worker process), and its cleanup."""

    def __init__(self, title: str, opener: Callable[[], Store], cleanup: Callable[[], None]) -> None:
        self.title = title
        self.open = opener
        self.cleanup = cleanup


def _sqlite(directory: str) -> Backend:
    path = str(Path(directory) / "bench.db")
    return Backend("SQLite (file, WAL)", lambda: SQLiteStore(path), lambda: None)


def _postgres() -> Backend | str:
    if not _answers(POSTGRES_URL, 5432):
        return f"PostgreSQL: no server answers at {POSTGRES_URL}; its rows are skipped"
    import psycopg
    from psycopg import sql

    from reasonstate.store.postgres import PostgresStore

    schema = f"rs_bench_{secrets.token_hex(6)}"

    def cleanup() -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    return Backend("PostgreSQL", lambda: PostgresStore(POSTGRES_URL, schema=schema, pool_size=2), cleanup)


def _redis() -> Backend | str:
    if not _answers(REDIS_URL, 6379):
        return f"Redis: no server answers at {REDIS_URL}; its rows are skipped"
    import redis

    from reasonstate.store.redis import RedisStore

    prefix = f"rs-bench-{secrets.token_hex(6)}:"

    def cleanup() -> None:
        r = redis.Redis.from_url(REDIS_URL)
        try:
            keys = list(r.scan_iter(match=prefix + "*", count=1000))
            if keys:
                r.delete(*keys)
        finally:
            r.close()

    return Backend("Redis", lambda: RedisStore(REDIS_URL, prefix=prefix), cleanup)


@contextlib.contextmanager
def backends(directory: str) -> Iterator[list[Backend]]:
    found: list[Backend] = [_sqlite(directory)]
    for made in (_postgres(), _redis()):
        if isinstance(made, str):
            print(made)
        else:
            found.append(made)
    try:
        yield found
    finally:
        for backend in found:
            backend.cleanup()


# -- growing one session for real --------------------------------------------------------------------------
@contextlib.contextmanager
def fast_sdk_body() -> Iterator[None]:
    """While growing and serving the sessions of measurement 1 (only the append step is timed there): the
    anthropic SDK's ``prepare_request_data`` for request bodies made of plain dicts (a deep copy that
    costs ~30 ms at 1,000 turns; the top-level ``NOT_GIVEN``/``Omit`` entries dropped instead), checked
    against the real one on the first 10 calls and every 500th."""
    import anthropic._base_client as base
    from anthropic._types import NotGiven, Omit

    real = base.prepare_request_data
    calls = itertools.count()

    def fast(data: Any, *, location: str, keep_top_level_omit: bool = False) -> Any:
        if location != "body" or not isinstance(data, dict):
            return real(data, location=location, keep_top_level_omit=keep_top_level_omit)
        out = {k: v for k, v in data.items() if not isinstance(v, (NotGiven, Omit))}
        n = next(calls)
        if (n < 10 or n % 500 == 0) and out != real(data, location=location):
            raise AssertionError("the shortcut differs from the anthropic SDK's prepare_request_data")
        return out

    base.prepare_request_data = fast
    try:
        yield
    finally:
        base.prepare_request_data = real


def grow(client: Any, directory: str, turns: int) -> list[Entry]:
    """The log of one session grown for real to ``turns`` turns on a SQLite store: 1 + ``turns`` entries."""
    store = SQLiteStore(str(Path(directory) / "grown.db"))
    session = rs.Session(
        client,
        system="You answer briefly.",
        policy=rs.policies.Keep(),
        store=store,
        session_id="grown",
        **CASE.session_options,
    )
    for turn in range(1, turns + 1):
        session.send(f"History question {turn}?")
    entries = store.read("grown")
    store.close()
    if len(entries) != turns + 1 or any(e.kind != DELTA for e in entries[1:]):
        raise AssertionError(f"expected a checkpoint and {turns} deltas, got {len(entries)} entries")
    return entries


# -- 1. per-commit cost ------------------------------------------------------------------------------------
class Timed:
    """A session of ``size`` turns loaded from ``store``, whose ``_write`` and ``store.append`` are timed."""

    def __init__(self, store: Store, client: Any, log: list[Entry], size: int) -> None:
        self.store, self.client, self.size = store, client, size
        self.prefix = log[: size + 1]
        self.limit = size + max(1, size // 10)
        self.writes: list[float] = []
        self.cpu: list[float] = []
        self.appends: list[float] = []
        self._in_append = 0.0
        self._noted = (0.0, 0.0)
        self.session = self._load()

    def _load(self) -> rs.Session:
        session_id = f"timed-{self.size}-{secrets.token_hex(4)}"
        self.store.append(session_id, 0, self.prefix)
        session = rs.Session.load(self.store, session_id, self.client)
        if len(session.history.turns) != self.size:
            raise AssertionError(f"loaded {len(session.history.turns)} turns, not {self.size}")
        inner_note = session._note_turns

        def note(old: Any, new: Any) -> None:
            c0, start = time.process_time(), time.perf_counter()
            try:
                inner_note(old, new)
            finally:
                wall, cpu = self._noted
                self._noted = (wall + time.perf_counter() - start, cpu + time.process_time() - c0)

        session._note_turns = note  # type: ignore[method-assign]
        session.send("Untimed question after the load?")
        inner_write = session._write
        store = self.store
        inner_append = store.append

        def append(session_id: str, expected: int, entries: Any) -> int:
            start = time.perf_counter()
            try:
                return inner_append(session_id, expected, entries)
            finally:
                self._in_append = time.perf_counter() - start

        def write(reply: Any) -> None:
            self._in_append = -1.0
            store.append = append  # type: ignore[method-assign]
            c0, start = time.process_time(), time.perf_counter()
            try:
                inner_write(reply)
            finally:
                took, cpu = time.perf_counter() - start, time.process_time() - c0
                del store.append
            if self._in_append < 0:
                raise AssertionError("a send that appended nothing")
            noted, self._noted = self._noted, (0.0, 0.0)
            self.writes.append(took + noted[0])
            self.cpu.append(cpu + noted[1])
            self.appends.append(self._in_append)

        session._write = write  # type: ignore[method-assign]
        return session

    def send(self, k: int) -> None:
        if len(self.session.history.turns) >= self.limit:
            self.session = self._load()
        self._noted = (0.0, 0.0)
        self.session.send(f"Timed question {k}?")


def per_commit(
    backend: Backend, client: Any, log: list[Entry], sizes: tuple[int, ...], repeats: int
) -> dict[int, tuple[list[float], list[float], list[float]]]:
    """Per size: the wall times of the timed commits' store work (``_note_turns`` and ``_write``), their
    CPU times, and the wall times of the ``store.append`` calls in them."""
    store = backend.open()
    try:
        sessions = {size: Timed(store, client, log, size) for size in sizes}
        orders = list(itertools.permutations(sizes))
        for k in range(repeats):
            if k % 10 == 0:
                gc.collect()  # untimed; no full collection inside the repeats between
            thresholds = gc.get_threshold()
            gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
            try:
                for size in orders[k % len(orders)]:
                    sessions[size].send(k)
            finally:
                gc.set_threshold(*thresholds)
        return {size: (t.writes, t.cpu, t.appends) for size, t in sessions.items()}
    finally:
        store.close()


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


# -- 2 and 4. send with a store over send in memory; bytes stored over bytes received ----------------------
class Received:
    """An ``httpx`` response hook adding up the response body bytes while ``counting`` is on."""

    def __init__(self) -> None:
        self.bytes = 0
        self.counting = False

    def __call__(self, response: Any) -> None:
        if self.counting:
            response.read()
            self.bytes += len(response.content)


def process_cpu(pid: int) -> float | None:
    """The CPU seconds the live threads of process ``pid`` have run (Linux ``/proc/PID/task/*/schedstat``,
    nanoseconds; None where there is no such file). A thread that ends takes its time with it: a repeat
    whose reading goes down is left out by the caller."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += int((task / "schedstat").read_text().split()[0])
    except OSError:
        return None
    return total / 1e9


def send_overhead(root: str, emulator_pid: int, directory: str, sends: int) -> dict[str, Any]:
    received = Received()
    stored_client = _client(CASE, root, event_hooks={"response": [received]})
    memory_client = _client(CASE, root)
    store = SQLiteStore(str(Path(directory) / "send.db"))
    written = {"bytes": 0, "entries": 0, "checkpoint": 0}
    inner_append = store.append
    counting = [False]

    def append(session_id: str, expected: int, entries: Any) -> int:
        version = inner_append(session_id, expected, entries)
        for e in entries:
            if counting[0]:
                written["bytes"] += len(e.body)
                written["entries"] += 1
            elif e.kind == "checkpoint":
                written["checkpoint"] = len(e.body)
        return version

    store.append = append  # type: ignore[method-assign]
    times: dict[str, list[float]] = {"memory": [], "stored": []}
    cpu: dict[str, list[float]] = {"memory": [], "stored": []}
    both: dict[str, list[float | None]] = {"memory": [], "stored": []}
    pair: dict[str, rs.Session] = {}
    turns = 0
    try:
        for k in range(sends):
            if k % PAIR_REPEATS == 0:
                pair = {
                    "memory": _new_session(CASE, memory_client),
                    "stored": rs.Session(
                        stored_client,
                        system="You answer briefly.",
                        policy=rs.policies.Keep(),
                        store=store,
                        session_id=f"send-{k}",
                        **CASE.session_options,
                    ),
                }
                for i in range(PAIR_TURNS):
                    for session in pair.values():
                        session.send(f"Untimed question {i}?")
                gc.collect()  # untimed; no full collection inside the pair's repeats
            thresholds = gc.get_threshold()
            gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
            try:
                for side in ("memory", "stored") if k % 2 else ("stored", "memory"):
                    received.counting = counting[0] = side == "stored"
                    e0 = process_cpu(emulator_pid)
                    c0, start = time.process_time(), time.perf_counter()
                    pair[side].send(f"Timed question {k}?")
                    times[side].append(time.perf_counter() - start)
                    cpu[side].append(time.process_time() - c0)
                    e1 = process_cpu(emulator_pid)
                    emulator = None if e0 is None or e1 is None or e1 < e0 else e1 - e0
                    both[side].append(None if emulator is None else cpu[side][-1] + emulator)
                    received.counting = counting[0] = False
            finally:
                gc.set_threshold(*thresholds)
            turns += 1
    finally:
        store.close()
        stored_client.close()
        memory_client.close()
    file_bytes, body_bytes = sqlite_file_bytes(store.path)
    ratios = [s / m for s, m in zip(times["stored"], times["memory"], strict=True)]
    q = statistics.quantiles(ratios, n=4)
    cq = statistics.quantiles([s / m for s, m in zip(cpu["stored"], cpu["memory"], strict=True)], n=4)
    pairs = [(s, m) for s, m in zip(both["stored"], both["memory"], strict=True) if s is not None and m]
    bq = statistics.quantiles([s / m for s, m in pairs], n=4) if len(pairs) > 1 else [math.nan] * 3
    return {
        "memory": _ms(times["memory"]),
        "stored": _ms(times["stored"]),
        "ratio": statistics.median(ratios),
        "iqr": (q[0], q[2]),
        "cpu_iqr": (cq[0], cq[2]),
        "own": statistics.median(s - m for s, m in zip(times["stored"], times["memory"], strict=True)),
        "own_cpu": statistics.median(s - m for s, m in zip(cpu["stored"], cpu["memory"], strict=True)),
        "memory_cpu": _ms(cpu["memory"]),
        "stored_cpu": _ms(cpu["stored"]),
        "cpu_ratio": statistics.median(s / m for s, m in zip(cpu["stored"], cpu["memory"], strict=True)),
        "memory_both": _ms([m for _s, m in pairs]) if pairs else math.nan,
        "stored_both": _ms([s for s, _m in pairs]) if pairs else math.nan,
        "both_ratio": statistics.median(s / m for s, m in pairs) if pairs else math.nan,
        "both_iqr": (bq[0], bq[2]),
        "own_both": statistics.median(s - m for s, m in pairs) if pairs else math.nan,
        "both_repeats": len(pairs),
        "turns": turns,
        "entries": written["entries"],
        "stored_bytes": written["bytes"],
        "received_bytes": received.bytes,
        "checkpoint": written["checkpoint"],
        "file_bytes": file_bytes,
        "body_bytes": body_bytes,
    }


def sqlite_file_bytes(path: str) -> tuple[int, int]:
    """The bytes the SQLite file grew by over an empty store's (its WAL checkpointed into it), and the
    entry body bytes it holds."""
    empty = path + ".empty"
    SQLiteStore(empty).close()
    sizes = []
    for name in (path, empty):
        with contextlib.closing(sqlite3.connect(name)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (body,) = db.execute("SELECT coalesce(sum(length(body)), 0) FROM reasonstate_entries").fetchone()
        sizes.append(os.path.getsize(name))
        if name == path:
            held = int(body)
    return sizes[0] - sizes[1], held


# -- 3. the fleet ------------------------------------------------------------------------------------------
def _worker(backend: Backend, tag: int, log: list[Entry], start: Any, seconds: float, out: Any) -> None:
    try:
        store = backend.open()
        ids = [f"fleet-{tag}-{j}-{secrets.token_hex(3)}" for j in range(FLEET_SESSIONS)]
        versions = dict.fromkeys(ids, 0)
        for session_id in ids:
            versions[session_id] = store.append(session_id, 0, [log[0]])
        deltas = [e.body for e in log[1:]]
        latencies: list[float] = []
        start.wait()
        deadline = time.perf_counter() + seconds
        for n in itertools.count():
            session_id = ids[n % len(ids)]
            version = versions[session_id]
            entry = Entry(version + 1, DELTA, deltas[(version - 1) % len(deltas)])
            t0 = time.perf_counter()
            versions[session_id] = store.append(session_id, version, [entry])
            t1 = time.perf_counter()
            latencies.append(t1 - t0)
            if t1 >= deadline:
                break
        store.close()
        out.put((tag, latencies))
    except BaseException as exc:
        out.put((tag, exc))
        raise


def fleet(backend: Backend, log: list[Entry], seconds: float) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    workers = [
        context.Process(target=_worker, args=(backend, tag, log, start, seconds, out))
        for tag in range(FLEET_WORKERS)
    ]
    for w in workers:
        w.start()
    time.sleep(0.5)  # each worker opens its store and creates its sessions before the start
    began = time.perf_counter()
    start.set()
    latencies: list[float] = []
    for _ in workers:
        _tag, got = out.get(timeout=seconds + 60)
        if isinstance(got, BaseException):
            raise got
        latencies.extend(got)
    elapsed = time.perf_counter() - began
    for w in workers:
        w.join()
    latencies.sort()
    return {
        "commits": len(latencies),
        "seconds": elapsed,
        "rate": len(latencies) / elapsed,
        "p50": statistics.median(latencies) * 1e3,
        "p99": latencies[int(0.99 * (len(latencies) - 1))] * 1e3,
    }


# -- driver ------------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="measurement 1's repeats")
    parser.add_argument("--sends", type=int, default=SENDS, help="measurement 2's repeats")
    parser.add_argument("--fleet-seconds", type=float, default=FLEET_SECONDS)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="measurement 1's history sizes")
    parser.add_argument(
        "--only", default="1,2,3,4", help="the measurements to run (4 comes with 2), e.g. --only 2 or 1,3"
    )
    args = parser.parse_args()
    sizes = tuple(sorted(int(x) for x in args.sizes.split(",")))
    only = {int(x) for x in args.only.split(",")}
    print(environment())
    started = time.perf_counter()
    misses: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rs-bench-store-") as directory, backends(directory) as found:
        if only & {1, 3}:
            grown(directory, found, sizes, args, only, misses)
        if only & {2, 4}:
            send_report(directory, args.sends, misses)
    print(
        f"\ntargets: {sizes[-1]}-turn commit <= {FLAT}x the {sizes[0]}-turn one on every backend (wall and "
        f"CPU); send with SQLiteStore <= {SEND}x in memory (both processes' CPU; wall on a quiet "
        f"machine); bytes stored per turn <= {BYTES}x the payload received"
    )
    print(f"({time.perf_counter() - started:.0f} s)")
    for miss in misses:
        print("MISSED:", miss, file=sys.stderr)
    return 1 if misses else 0


def grown(
    directory: str,
    found: list[Backend],
    sizes: tuple[int, ...],
    args: argparse.Namespace,
    only: set[int],
    misses: list[str],
) -> None:
    """Measurements 1 and 3, on one session grown for real to the largest size."""
    client, _handler, _runs = _setup(CASE, with_peers=False)
    with fast_sdk_body():
        t0 = time.perf_counter()
        log = grow(client, directory, max(sizes))
        body = sum(len(e.body) for e in log[1:]) / (len(log) - 1)
        print(
            f"\ngrew one session to {max(sizes)} turns on SQLite in {time.perf_counter() - t0:.1f} s: a "
            f"{len(log[0].body)}-byte checkpoint and {len(log) - 1} deltas of {body:.0f} bytes on average"
        )
        if 3 in only:
            fleet_report(found, log, args.fleet_seconds)
        if 1 in only:
            per_commit_report(found, client, log, sizes, args.repeats, misses)
    client.close()
    del log
    gc.collect()  # the grown sessions are gone: measurement 2's collections walk a small heap


def fleet_report(found: list[Backend], log: list[Entry], seconds: float) -> None:
    print(
        f"\n3. commits per second, {FLEET_WORKERS} worker processes x {FLEET_SESSIONS} sessions each, raw "
        f"store.append of the grown session's real entries, {seconds:g} s"
    )
    print(f"{'backend':<20} {'commits':>8} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    t0 = time.perf_counter()
    for backend in found:
        r = fleet(backend, log, seconds)
        print(
            f"{backend.title:<20} {r['commits']:>8} {r['rate']:>10.0f} {r['p50']:>8.2f} {r['p99']:>8.2f}",
            flush=True,
        )
    print(f"({time.perf_counter() - t0:.0f} s)")


def per_commit_report(
    found: list[Backend],
    client: Any,
    log: list[Entry],
    sizes: tuple[int, ...],
    repeats: int,
    misses: list[str],
) -> None:
    print(
        "\n1. per-commit store cost (session._note_turns + session._write: the delta + store.append), "
        f"median of {repeats} commits per size, ms; in brackets the store.append part (wall)"
    )
    head = "".join(f"{f'{s} turns':>18}" for s in sizes)
    print(f"{'backend':<26}{head} {f'{sizes[-1]}/{sizes[0]}':>8} {'IQR':>11}")
    t0 = time.perf_counter()
    for backend in found:
        times = per_commit(backend, client, log, sizes, repeats)
        for clock, column in (("wall", 0), ("CPU", 1)):
            cells = "".join(
                f"{_ms(t[0]):>8.3f} ({_ms(t[2]):>6.3f}) " if column == 0 else f"{_ms(t[1]):>17.3f} "
                for t in times.values()
            )
            small, large = times[sizes[0]][column], times[sizes[-1]][column]
            ratios = [b / a for a, b in zip(small, large, strict=True)]
            q = statistics.quantiles(ratios, n=4)
            ratio = statistics.median(ratios)
            title = f"{backend.title}, {clock}"
            print(f"{title:<26}{cells} {ratio:>7.2f}x {f'{q[0]:.2f}-{q[2]:.2f}':>11}", flush=True)
            if ratio > FLAT:
                misses.append(
                    f"{backend.title}: the {sizes[-1]}-turn commit costs {ratio:.2f}x the {sizes[0]}-turn "
                    f"one in {clock} time > {FLAT}x"
                )
    print(f"({time.perf_counter() - t0:.0f} s)")


def send_report(directory: str, sends: int, misses: list[str]) -> None:
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    with _emulators([CASE]) as roots:
        ((root, pid),) = roots
        r = send_overhead(root, pid, directory, sends)
    took = time.perf_counter() - t0
    load = max(load, os.getloadavg()[0])
    cores = os.cpu_count() or 1
    print(
        f"\n2. session.send with SQLiteStore (file, WAL) over session.send in memory, Anthropic emulator "
        f"(own process), {PAIR_TURNS}-{PAIR_TURNS + PAIR_REPEATS} turns, {sends} repeats"
    )
    print(
        f"{'clock':<22} {'in memory ms':>12} {'stored ms':>10} {'stored/memory':>14} {'IQR':>11} "
        f"{'store ms':>9}"
    )
    for clock, key in (("wall", ""), ("CPU, both processes", "both_"), ("CPU, this process", "cpu_")):
        memory, stored = {"": ("memory", "stored"), "both_": ("memory_both", "stored_both")}.get(
            key, ("memory_cpu", "stored_cpu")
        )
        own = {"": "own", "both_": "own_both"}.get(key, "own_cpu")
        lo, hi = r[key + "iqr"]
        print(
            f"{clock:<22} {r[memory]:>12.3f} {r[stored]:>10.3f} {r[key + 'ratio']:>14.3f} "
            f"{f'{lo:.2f}-{hi:.2f}':>11} {r[own] * 1e3:>9.3f}"
        )
    print(
        "(CPU, both processes: this process's and the emulator's, the work a send is made of, which a "
        f"loaded machine does not blur; {r['both_repeats']} of {sends} repeats read both. CPU, this "
        "process: without the emulator's work, shown, not judged)"
    )
    print(f"({took:.0f} s)")
    judged = [("CPU, both processes", "both_")]
    if load <= cores:
        judged.append(("wall", ""))
    else:
        print(f"(the wall ratio is not judged: load average {load:.1f} on {cores} cores)")
    for clock, key in judged:
        if not r[key + "ratio"] <= SEND:
            misses.append(f"send with SQLiteStore {r[key + 'ratio']:.3f}x send in memory ({clock}) > {SEND}x")

    per_turn_stored = r["stored_bytes"] / r["turns"]
    per_turn_received = r["received_bytes"] / r["turns"]
    ratio = per_turn_stored / per_turn_received
    print(
        f"\n4. bytes stored per turn over payload bytes received (the {r['turns']} timed turns of 2: "
        f"{r['entries']} entries; a new session's checkpoint, {r['checkpoint']} bytes, apart)"
    )
    print(f"{'received B/turn':>15} {'stored B/turn':>14} {'stored/received':>16}")
    print(f"{per_turn_received:>15.0f} {per_turn_stored:>14.0f} {ratio:>16.2f}")
    print(
        f"(on disk: the SQLite file grew {r['file_bytes']} bytes over an empty store's for "
        f"{r['body_bytes']} bytes of entry bodies, {r['file_bytes'] / r['body_bytes']:.2f}x: pages, keys "
        "and session rows)"
    )
    if ratio > BYTES:
        misses.append(f"{ratio:.2f}x the payload bytes stored per turn > {BYTES}x")


if __name__ == "__main__":
    sys.exit(main())
