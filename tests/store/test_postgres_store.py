"""The store contract on PostgreSQL: each test in its own fresh schema on the real server, dropped after.

The server is ``services.postgres_url()`` (``REASONSTATE_TEST_POSTGRES``, default
``postgresql://postgres@127.0.0.1:5432/test``); no fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from reasonstate.errors import InvalidOption, SessionConflict, StoreError
from reasonstate.store import SCHEMA_VERSION, AsyncPostgresStore, AsyncStore, PostgresStore
from tests.store import services
from tests.store._processes import worker_context
from tests.store.conformance import AsyncConformance, Conformance, c, d

CLOSED_PORT = "postgresql://postgres@127.0.0.1:1/test"


@pytest.fixture
def url() -> str:
    return services.postgres_url()


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    """A fresh schema of a random name, dropped (with everything in it) after the test."""
    name = f"rs_test_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    _drop(url, name)


@pytest.fixture
def store(url: str, schema: str) -> Iterator[PostgresStore]:
    s = PostgresStore(url, schema=schema)
    yield s
    s.close()


@pytest.fixture
def reopen(url: str, schema: str) -> Callable[..., PostgresStore]:
    return lambda **options: PostgresStore(url, schema=schema, **options)


@pytest.fixture
def astore_factory(url: str, schema: str) -> Callable[..., AsyncStore]:
    return lambda **options: AsyncPostgresStore(url, schema=schema, **options)


class TestPostgres(Conformance):
    pass


class TestAsyncPostgres(AsyncConformance):
    pass


def _query(url: str, query: sql.Composed | str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params or None).fetchall()


# -- the schema ----------------------------------------------------------------------------------------------
def test_the_schema_has_the_documented_tables_and_types(url: str, schema: str) -> None:
    PostgresStore(url, schema=schema).close()
    columns = _query(
        url,
        "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
        schema,
    )
    assert columns == [
        ("reasonstate_entries", "session_id", "text", "NO"),
        ("reasonstate_entries", "seq", "bigint", "NO"),
        ("reasonstate_entries", "kind", "text", "NO"),
        ("reasonstate_entries", "body", "bytea", "NO"),
        ("reasonstate_leases", "session_id", "text", "NO"),
        ("reasonstate_leases", "holder", "text", "NO"),
        ("reasonstate_leases", "expires", "double precision", "NO"),
        ("reasonstate_schema", "version", "integer", "NO"),
        ("reasonstate_sessions", "session_id", "text", "NO"),
        ("reasonstate_sessions", "version", "bigint", "NO"),
        ("reasonstate_sessions", "checkpoint", "bigint", "NO"),
        ("reasonstate_sessions", "created", "double precision", "NO"),
        ("reasonstate_sessions", "updated", "double precision", "NO"),
        ("reasonstate_sessions", "expires", "double precision", "YES"),
    ]
    keys = _query(
        url,
        "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name "
        "AND kcu.table_schema = tc.table_schema "
        "WHERE tc.table_schema = %s AND tc.constraint_type = 'PRIMARY KEY' "
        "ORDER BY tc.table_name, kcu.ordinal_position",
        schema,
    )
    assert keys == [
        ("reasonstate_entries", "session_id"),
        ("reasonstate_entries", "seq"),
        ("reasonstate_leases", "session_id"),
        ("reasonstate_sessions", "session_id"),
    ]
    version_table = sql.Identifier(schema, "reasonstate_schema")
    assert _query(url, sql.SQL("SELECT version FROM {}").format(version_table)) == [(SCHEMA_VERSION,)]


def test_the_schema_is_created_when_missing_and_its_name_is_quoted(url: str) -> None:
    """A schema name is an identifier quoted by psycopg.sql, never pasted into SQL."""
    name = f'rs test "{secrets.token_hex(3)}"; DROP TABLE x; --'
    try:
        with PostgresStore(url, schema=name) as s:
            s.append("q", 0, [c(1), d(2)])
            assert s.read("q") == [c(1), d(2)]
        assert _query(url, "SELECT 1 FROM pg_namespace WHERE nspname = %s", name) == [(1,)]
    finally:
        _drop(url, name)


def test_a_newer_schema_is_refused_and_left_alone(url: str, schema: str) -> None:
    """google/adk-python#3272: a schema upgrade broke existing tables. A store never touches a schema it
    does not know: a newer one is refused with a clear error (migrating or not, sync or async), and its
    tables and rows are left exactly as they were."""
    s = PostgresStore(url, schema=schema)
    s.append("kept", 0, [c(1, b"kept"), d(2)])
    s.close()
    version_table = sql.Identifier(schema, "reasonstate_schema")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET version = %s").format(version_table), [SCHEMA_VERSION + 1])

    def state() -> list[tuple[Any, ...]]:
        return _query(
            url,
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE n.nspname = %s AND a.attnum > 0 ORDER BY 1, 2",
            schema,
        )

    before = state()
    with pytest.raises(StoreError, match="newer"):
        PostgresStore(url, schema=schema)
    with pytest.raises(StoreError, match="reasonstate store migrate"):
        PostgresStore(url, schema=schema, migrate=False)

    async def via_async() -> None:
        a = AsyncPostgresStore(url, schema=schema)
        try:
            with pytest.raises(StoreError, match="newer"):
                await a.read("kept")
        finally:
            await a.close()

    asyncio.run(via_async())
    assert state() == before
    assert _query(url, sql.SQL("SELECT version FROM {}").format(version_table)) == [(SCHEMA_VERSION + 1,)]
    entries = sql.Identifier(schema, "reasonstate_entries")
    assert _query(url, sql.SQL("SELECT seq, body FROM {} ORDER BY seq").format(entries)) == [
        (1, b"kept"),
        (2, b"delta 2"),
    ]


def test_an_unmigrated_schema_is_refused_without_migrate(url: str, schema: str) -> None:
    with pytest.raises(StoreError, match="reasonstate store migrate") as info:
        PostgresStore(url, schema=schema, migrate=False)
    assert schema in str(info.value)
    assert _query(url, "SELECT count(*) FROM pg_tables WHERE schemaname = %s", schema) == [(0,)]
    s = PostgresStore(url, schema=schema)
    assert s.migrate() == SCHEMA_VERSION
    s.close()
    PostgresStore(url, schema=schema, migrate=False).close()


def test_several_processes_may_migrate_one_fresh_schema_at_once(url: str, schema: str) -> None:
    """Each store on its own connection, all starting together on an empty schema: every one ends at the
    schema version (the advisory lock serialises them), with one version row."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def open_one() -> None:
        barrier.wait()
        try:
            PostgresStore(url, schema=schema).close()
        except BaseException as exc:  # pragma: no cover - the failure is the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    table = sql.Identifier(schema, "reasonstate_schema")
    assert _query(url, sql.SQL("SELECT version FROM {}").format(table)) == [(SCHEMA_VERSION,)]


# -- failures ------------------------------------------------------------------------------------------------
def test_an_unreachable_server_is_a_store_error_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"127\.0\.0\.1"):
        PostgresStore(CLOSED_PORT, timeout=5)
    assert time.monotonic() - started < 2.0

    async def via_async() -> None:
        a = AsyncPostgresStore(CLOSED_PORT, timeout=5)
        try:
            with pytest.raises(StoreError, match=r"127\.0\.0\.1"):
                await a.append("x", 0, [c(1)])
        finally:
            await a.close()

    started = time.monotonic()
    asyncio.run(via_async())
    assert time.monotonic() - started < 2.0


def test_a_write_that_times_out_is_a_store_error_and_writes_nothing(url: str, schema: str) -> None:
    """Another connection holds the session's row: the append waits ``timeout=`` seconds at most, then
    fails with a StoreError (not a SessionConflict), and nothing of it is written."""
    store = PostgresStore(url, schema=schema, timeout=0.5)
    try:
        store.append("held", 0, [c(1)])
        with psycopg.connect(url) as blocker:
            table = sql.Identifier(schema, "reasonstate_sessions")
            blocker.execute(sql.SQL("SELECT 1 FROM {} WHERE session_id = 'held' FOR UPDATE").format(table))
            started = time.monotonic()
            with pytest.raises(StoreError) as info:
                store.append("held", 1, [d(2)])
            assert not isinstance(info.value, SessionConflict)
            assert "timeout" in str(info.value)
            assert time.monotonic() - started < 3.0
            blocker.rollback()
        assert store.read("held") == [c(1)]
        assert store.append("held", 1, [d(2)]) == 2  # the store is usable after
    finally:
        store.close()


def _named(url: str, application_name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={application_name}"


def test_connections_the_server_ended_are_replaced_without_an_error(url: str, schema: str) -> None:
    """The server ends every pooled connection (a restart, a failover, an administrator): the next calls
    find them dead before anything was written, drop them and run on fresh ones, with no error and no
    duplicate rows. (An append re-run this way re-checks its version, so it can never land twice.)"""
    name = f"rs_kill_{secrets.token_hex(4)}"
    store = PostgresStore(_named(url, name), schema=schema, pool_size=3)
    try:
        store.append("k", 0, [c(1)])
        for round_ in range(3):
            killed = _query(
                url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                name,
            )
            assert killed and all(ok for (ok,) in killed)
            assert store.append("k", 1 + round_, [d(2 + round_)]) == 2 + round_
        assert store.read("k") == [c(1), d(2), d(3), d(4)]
    finally:
        store.close()

    async def via_async() -> None:
        a = AsyncPostgresStore(_named(url, name), schema=schema, pool_size=3)
        try:
            assert await a.version("k") == 4
            for version in (4, 5):
                _query(
                    url,
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                    name,
                )
                assert await a.append("k", version, [d(version + 1)]) == version + 1
        finally:
            await a.close()

    asyncio.run(via_async())
    entries = sql.Identifier(schema, "reasonstate_entries")
    assert _query(url, sql.SQL("SELECT count(*), max(seq) FROM {}").format(entries)) == [(6, 6)]


class _Proxy:
    """A TCP relay to the PostgreSQL server on a port of its own: ``down()`` closes the listener and every
    relayed connection (the network to the server is gone), ``up()`` listens again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    client.close()
                    server.close()
                    return
                self._conns += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        with self._lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            for sock in self._conns:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._conns.clear()


def test_the_server_gone_mid_life_is_a_store_error_that_writes_nothing(url: str, schema: str) -> None:
    """The network to the server goes down under an open store: each call is a StoreError within about
    ``timeout=`` seconds (never a hang, never a SessionConflict), nothing is written; once the server is
    back (and the pool has reconnected) the same append goes through."""
    parts = urlsplit(url)
    proxy = _Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    relayed = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"))
    store = PostgresStore(relayed, schema=schema, timeout=1.0)
    direct = PostgresStore(url, schema=schema)
    try:
        store.append("n", 0, [c(1)])
        proxy.down()
        for call in (lambda: store.append("n", 1, [d(2)]), lambda: store.read("n")):
            started = time.monotonic()
            with pytest.raises(StoreError) as info:
                call()
            assert not isinstance(info.value, SessionConflict)
            assert time.monotonic() - started < 4.0
        assert direct.read("n") == [c(1)]
        proxy.up()
        deadline = time.monotonic() + 15  # the pool reconnects with a backoff (1 s, doubling)
        while True:
            try:
                assert store.append("n", 1, [d(2)]) == 2
                break
            except StoreError as exc:
                assert not isinstance(exc, SessionConflict)  # no failed attempt wrote anything
                assert time.monotonic() < deadline
        assert direct.read("n") == [c(1), d(2)]
    finally:
        proxy.down()
        store.close()
        direct.close()


def _append_until_killed(url: str, schema: str, started: Any) -> None:
    """Append big batches to one session for ever (the parent SIGKILLs this process mid-way)."""
    store = PostgresStore(url, schema=schema)
    version = store.version("k")
    body = bytes(range(256)) * 256  # 64 KiB
    started.set()
    while True:
        version = store.append("k", version, [d(version + 1 + i, body) for i in range(40)])


def test_a_process_killed_mid_append_leaves_the_last_complete_append(url: str, schema: str) -> None:
    """SIGKILL a writer while it streams 2.5 MB appends, twice: the store is always at a complete
    append (its entries exactly 1..version, none beyond), and the next append on that version works."""
    store = PostgresStore(url, schema=schema)
    entries = sql.Identifier(schema, "reasonstate_entries")
    ctx = worker_context()
    try:
        store.append("k", 0, [c(1)])
        for delay in (0.05, 0.3):
            started = ctx.Event()
            proc = ctx.Process(target=_append_until_killed, args=(url, schema, started))
            proc.start()
            assert started.wait(timeout=60)
            time.sleep(delay)
            proc.kill()
            proc.join(timeout=30)
            version = store.version("k")
            assert (version - 1) % 40 == 0
            assert _query(url, sql.SQL("SELECT count(*), max(seq) FROM {}").format(entries)) == [
                (version, version)
            ]
            assert len(store.read("k")) == version
        assert store.append("k", version, [d(version + 1)]) == version + 1
    finally:
        store.close()


def test_a_closed_store_is_a_store_error(url: str, schema: str) -> None:
    store = PostgresStore(url, schema=schema)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.version("x")

    async def via_async() -> None:
        a = AsyncPostgresStore(url, schema=schema)
        await a.close()
        with pytest.raises(StoreError, match="closed"):
            await a.version("x")

    asyncio.run(via_async())


def test_the_password_is_never_shown(url: str) -> None:
    dsn = "postgresql://postgres:s3cret-pw@127.0.0.1:1/test"
    with pytest.raises(StoreError) as info:
        PostgresStore(dsn)
    assert "s3cret-pw" not in str(info.value)
    with pytest.raises(StoreError) as info:
        PostgresStore("host=127.0.0.1 port=1 user=postgres password=s3cret-pw dbname=test")
    assert "s3cret-pw" not in str(info.value)
    assert "s3cret-pw" not in repr(AsyncPostgresStore(dsn))


def test_options_are_checked(url: str) -> None:
    for bad in ({"schema": ""}, {"schema": "x" * 64}, {"pool_size": 0}, {"timeout": 0}, {"ttl": -1}):
        with pytest.raises(InvalidOption):
            PostgresStore(url, **bad)
    with pytest.raises(InvalidOption, match="postgresql://"):
        PostgresStore("mysql://root@127.0.0.1/test")
    with pytest.raises(InvalidOption):
        AsyncPostgresStore("postgresql+psycopg://postgres@127.0.0.1/test")


def test_a_postgres_url_is_accepted(url: str, schema: str) -> None:
    assert url.startswith("postgresql://")
    with PostgresStore("postgres://" + url.removeprefix("postgresql://"), schema=schema) as s:
        assert s.append("p", 0, [c(1)]) == 1
        assert s.scheme == "postgresql"


# -- concurrency ---------------------------------------------------------------------------------------------
ROUNDS = 20


def _race(url: str, schema: str, i: int, barrier: Any, results: Any) -> None:
    """One racing process: on each round's session (at version 1), append on version 1 when the other
    process does, and report the outcome."""
    store = PostgresStore(url, schema=schema)
    try:
        for r in range(ROUNDS):
            barrier.wait(timeout=60)
            try:
                store.append(f"race-{r}", 1, [d(2, f"process {i}".encode()), d(3)])
                results.put((r, i, "won"))
            except SessionConflict as exc:
                results.put((r, i, f"conflict {exc.expected} {exc.found}"))
            except BaseException as exc:  # pragma: no cover - reported to the parent
                results.put((r, i, repr(exc)))
    finally:
        store.close()


def test_two_processes_racing_on_one_version_one_wins(url: str, schema: str, store: PostgresStore) -> None:
    """Two processes (forked from a clean forkserver, tests/store/_processes.py: they share nothing but the
    server) append on one version at the same moment,
    round after round: exactly one wins each round, the other gets SessionConflict, no history forks."""
    for r in range(ROUNDS):
        store.append(f"race-{r}", 0, [c(1)])
    ctx = worker_context()
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(url, schema, i, barrier, results)) for i in range(2)]
    for p in procs:
        p.start()
    outcomes: dict[int, dict[int, str]] = {}
    for _ in range(ROUNDS * len(procs)):
        r, i, outcome = results.get(timeout=120)
        outcomes.setdefault(r, {})[i] = outcome
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for r in range(ROUNDS):
        assert sorted(outcomes[r].values()) == ["conflict 1 3", "won"], (r, outcomes[r])
        winner = next(i for i, o in outcomes[r].items() if o == "won")
        assert store.read(f"race-{r}") == [c(1), d(2, f"process {winner}".encode()), d(3)]


def test_racing_creators_one_wins(store: PostgresStore, reopen: Callable[..., PostgresStore]) -> None:
    """The creating append (on version 0) races too: one creates the session, the others conflict."""
    handles = [reopen() for _ in range(6)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(handles))

    def create(i: int) -> None:
        barrier.wait()
        try:
            handles[i].append("new", 0, [c(1, f"creator {i}".encode())])
            outcomes.append("won")
        except SessionConflict as exc:
            outcomes.append(f"conflict {exc.found}")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(len(handles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for h in handles:
        h.close()
    assert sorted(outcomes) == ["conflict 1"] * 5 + ["won"]
    assert store.version("new") == 1


def test_an_expired_session_is_replaced_by_a_creating_append(reopen: Callable[..., PostgresStore]) -> None:
    """An expired session reads as absent; creating it again replaces its rows (not one old entry shows)
    even before a sweep, and the sweep then has nothing of it to delete."""
    s = reopen(ttl=0.3)
    try:
        s.append("e", 0, [c(1, b"old"), d(2), d(3)])
        time.sleep(0.5)
        assert s.append("e", 0, [d(1, b"new life")]) == 1
        assert s.read("e") == [d(1, b"new life")]
        assert s.sweep() == 0
        time.sleep(0.5)
        assert s.sweep() == 1
        assert s.sessions() == []
    finally:
        s.close()


def test_a_lease_survives_the_first_append_of_its_session(
    store: PostgresStore, reopen: Callable[..., PostgresStore]
) -> None:
    """A worker leases a session that does not exist yet, then creates it: the lease is still its own (the
    append does not drop it), so a second worker stays out until it is released."""
    other = reopen()
    try:
        with store.lease("fresh", ttl=5):
            store.append("fresh", 0, [c(1)])
            with pytest.raises(StoreError, match="leased"), other.lease("fresh", ttl=5):
                pass
        with other.lease("fresh", ttl=5):
            pass
    finally:
        other.close()


def test_import_reasonstate_store_does_not_import_psycopg() -> None:
    code = (
        "import sys, reasonstate, reasonstate.store; "
        "assert not any(m.split('.')[0] in ('psycopg', 'psycopg_pool') for m in sys.modules), 'psycopg'; "
        "reasonstate.store.PostgresStore; assert 'psycopg' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
