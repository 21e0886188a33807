"""The fleet store: PostgreSQL through psycopg 3 and its connection pool (``reasonstate[postgres]``).

Tables (schema version 1, ``docs/concepts/store.md``), in the PostgreSQL schema given (``public`` by
default): ``reasonstate_schema(version)``,
``reasonstate_sessions(session_id, version, checkpoint, created, updated, expires)``,
``reasonstate_entries(session_id, seq, kind, body BYTEA)`` keyed by ``(session_id, seq)``, and
``reasonstate_leases(session_id, holder, expires)``; times are Unix seconds (``DOUBLE PRECISION``) read
from the server's clock, so every worker of a fleet agrees on expiry and leases.

Compare-and-set is one statement on the session's row, inside the append's transaction: an append on
version ``n`` is ``UPDATE ... WHERE version = n`` (PostgreSQL re-checks the condition on the newest row
after waiting for a concurrent writer's lock, so of two writers on one version the second finds none);
the creating append is ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` the row found has expired. The
entries' primary key backs both: a duplicate ``(session_id, seq)`` is a
:class:`~reasonstate.errors.SessionConflict` too. A process killed mid-append leaves an aborted
transaction: the store stays at its last complete append. Migrations run under a transaction-scoped
advisory lock (``pg_advisory_xact_lock``), so several processes may open a fresh database at once.

Every psycopg error, pool time-out and connection failure is a :class:`~reasonstate.errors.StoreError`
(its transaction rolled back: nothing written); only a pooled connection the server had ended is
replaced and the call run again. psycopg is imported by this module only, so ``import reasonstate.store``
does not need it.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.errors import UniqueViolation
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from reasonstate.errors import InvalidOption, SessionConflict, StoreError
from reasonstate.store._base import CHECKPOINT, SCHEMA_VERSION, AsyncStore, Entry, SessionInfo, Store

__all__ = ["AsyncPostgresStore", "PostgresStore"]

_T = TypeVar("_T")

#: the server's clock in Unix seconds, fixed for one statement (so ``created`` = ``updated`` exactly)
_NOW = "extract(epoch FROM statement_timestamp())::float8"

#: the statements that bring a schema of version ``n - 1`` to version ``n`` (index ``n - 1``);
#: ``{sessions}``, ``{entries}`` and ``{leases}`` are the schema-qualified table names
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS {sessions} (
            session_id TEXT PRIMARY KEY,
            version BIGINT NOT NULL,
            checkpoint BIGINT NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            expires DOUBLE PRECISION
        )""",
        """CREATE TABLE IF NOT EXISTS {entries} (
            session_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            body BYTEA NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS {leases} (
            session_id TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            expires DOUBLE PRECISION NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS reasonstate_sessions_updated ON {sessions} (updated)",
    ),
)

_SCHEMES = ("postgresql", "postgres")


def _check_dsn(dsn: Any) -> str:
    if not isinstance(dsn, str) or not dsn.strip():
        raise InvalidOption(
            f"a PostgreSQL store needs a DSN such as postgresql://user@host:5432/db, got {dsn!r:.80}"
        )
    if "://" in dsn and urlsplit(dsn).scheme not in _SCHEMES:
        raise InvalidOption(
            f"a PostgreSQL DSN is a postgresql:// or postgres:// URL (or libpq key=value pairs), got "
            f"{urlsplit(dsn).scheme}://..."
        )
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise InvalidOption(f"cannot read the PostgreSQL DSN: {exc}") from None
    return dsn


def _redacted(dsn: str) -> str:
    """The DSN without its password, for messages and ``repr``."""
    if "://" not in dsn:
        params = {k: v for k, v in conninfo_to_dict(dsn).items() if k != "password"}
        return make_conninfo("", **params)
    parts = urlsplit(dsn)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hostinfo = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{hostinfo}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _check_schema_name(schema: Any) -> str:
    if (
        not isinstance(schema, str)
        or not schema
        or "\0" in schema
        or len(schema.encode()) > 63  # PostgreSQL would silently truncate a longer identifier
    ):
        raise InvalidOption(f"schema= is a PostgreSQL schema name of 1 to 63 bytes, got {schema!r:.80}")
    return schema


def _check_pool_size(pool_size: Any) -> int:
    if type(pool_size) is not int or pool_size < 1:
        raise InvalidOption(
            f"pool_size= is the most connections the store opens (an int >= 1), got {pool_size!r}"
        )
    return pool_size


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidOption(f"timeout= is a number of seconds > 0, got {timeout!r}")
    return float(timeout)


class _Queries:
    """Every statement of the store, composed once for one schema (its name quoted by psycopg.sql)."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        ident = sql.Identifier(schema)
        tables = {
            "sessions": sql.Identifier(schema, "reasonstate_sessions"),
            "entries": sql.Identifier(schema, "reasonstate_entries"),
            "leases": sql.Identifier(schema, "reasonstate_leases"),
            "schema_table": sql.Identifier(schema, "reasonstate_schema"),
            "now": sql.SQL(_NOW),
        }

        def q(text: str) -> sql.Composed:
            return sql.SQL(text).format(**tables)

        self.migrations = tuple(tuple(q(s) for s in statements) for statements in _MIGRATIONS)
        # the advisory lock of this schema's migrations: 64 bits of a digest of its name
        digest = hashlib.blake2b(f"reasonstate migrate {schema}".encode(), digest_size=8).digest()
        self.lock_key = int.from_bytes(digest, "big", signed=True)
        self.has_schema = sql.SQL("SELECT 1 FROM pg_namespace WHERE nspname = %s")
        self.create_schema = sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident)
        self.schema_exists = sql.SQL("SELECT to_regclass(%s) IS NOT NULL")
        self.schema_table_name = sql.Identifier(schema, "reasonstate_schema").as_string(None)
        self.create_schema_table = q("CREATE TABLE IF NOT EXISTS {schema_table} (version INTEGER NOT NULL)")
        self.schema_version = q("SELECT max(version) FROM {schema_table}")
        self.insert_schema_version = q("INSERT INTO {schema_table} (version) VALUES (%s)")
        self.update_schema_version = q("UPDATE {schema_table} SET version = %s")
        self.lock = sql.SQL("SELECT pg_advisory_xact_lock(%s)")

        # compare-and-set on an existing, live session: PostgreSQL re-checks the WHERE on the newest row
        # after waiting for a concurrent writer's lock, so two writers on one version never both match
        self.advance = q(
            """UPDATE {sessions} SET version = %(version)s,
                checkpoint = COALESCE(%(checkpoint)s::bigint, checkpoint),
                updated = {now}, expires = {now} + %(ttl)s::float8
            WHERE session_id = %(id)s AND version = %(expected)s AND (expires IS NULL OR expires > {now})
            RETURNING version"""
        )
        # the creating append: a new row, or the row of an expired session replaced; a live row (one
        # committed by a concurrent creator included) updates nothing and returns nothing
        self.create = q(
            """INSERT INTO {sessions} AS s (session_id, version, checkpoint, created, updated, expires)
            VALUES (%(id)s, %(version)s, %(checkpoint)s, {now}, {now}, {now} + %(ttl)s::float8)
            ON CONFLICT (session_id) DO UPDATE SET version = EXCLUDED.version,
                checkpoint = EXCLUDED.checkpoint, created = EXCLUDED.created, updated = EXCLUDED.updated,
                expires = EXCLUDED.expires
            WHERE s.expires IS NOT NULL AND s.expires <= EXCLUDED.created
            RETURNING s.version"""
        )
        self.clear_entries = q("DELETE FROM {entries} WHERE session_id = %s")
        self.insert_entry = q("INSERT INTO {entries} (session_id, seq, kind, body) VALUES (%s, %s, %s, %s)")
        # after a retry: are the entries at these seqs the very ones this append sent?
        self.written = q(
            """SELECT session_id, seq, kind, body FROM {entries}
            WHERE session_id = %s AND seq > %s AND seq <= %s ORDER BY seq"""
        )
        # one statement, so one snapshot: never part of an append
        self.read = q(
            """SELECT e.seq, e.kind, e.body FROM {sessions} s
            JOIN {entries} e ON e.session_id = s.session_id AND e.seq >= s.checkpoint AND e.seq <= s.version
            WHERE s.session_id = %s AND (s.expires IS NULL OR s.expires > {now})
            ORDER BY e.seq"""
        )
        self.version = q(
            "SELECT version FROM {sessions} WHERE session_id = %s AND (expires IS NULL OR expires > {now})"
        )
        self.sessions = q(
            """SELECT session_id, version, created, updated, expires FROM {sessions}
            WHERE expires IS NULL OR expires > {now}
            ORDER BY updated DESC, session_id COLLATE "C\""""
        )
        # a delete first locks the row, so an append in flight commits before the entries are deleted
        self.lock_session = q("SELECT 1 FROM {sessions} WHERE session_id = %s FOR UPDATE")
        self.delete = q(
            """WITH e AS (DELETE FROM {entries} WHERE session_id = %(id)s),
                l AS (DELETE FROM {leases} WHERE session_id = %(id)s)
            DELETE FROM {sessions} WHERE session_id = %(id)s RETURNING 1"""
        )
        self.try_lease = q(
            """INSERT INTO {leases} AS l (session_id, holder, expires)
            VALUES (%(id)s, %(holder)s, {now} + %(ttl)s)
            ON CONFLICT (session_id) DO UPDATE SET holder = EXCLUDED.holder, expires = EXCLUDED.expires
            WHERE l.holder = EXCLUDED.holder OR l.expires <= {now}
            RETURNING l.expires"""
        )
        self.release = q("DELETE FROM {leases} WHERE session_id = %s AND holder = %s")
        # a session re-created while the sweep waited for its row is re-checked, found live and kept;
        # leases that ran out go too (an unexpired lease is kept: its holder still counts on it)
        self.sweep = q(
            """WITH gone AS (
                DELETE FROM {sessions} WHERE expires IS NOT NULL AND expires <= {now} RETURNING session_id
            ), e AS (DELETE FROM {entries} WHERE session_id IN (SELECT session_id FROM gone)),
            l AS (DELETE FROM {leases} WHERE expires <= {now})
            SELECT count(*) FROM gone"""
        )


def _append_params(
    session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None
) -> dict[str, Any]:
    checkpoints = [e.seq for e in entries if e.kind == CHECKPOINT]
    checkpoint = checkpoints[-1] if checkpoints else None
    if expected == 0 and checkpoint is None:
        checkpoint = 1  # a log without a checkpoint is read from its start
    return {
        "id": session_id,
        "expected": expected,
        "version": entries[-1].seq,
        "checkpoint": checkpoint,
        "ttl": ttl,
    }


def _conflict(session_id: str, expected: int, found: int) -> SessionConflict:
    return SessionConflict(
        f"session {session_id!r} is at version {found}, this append was built on {expected}",
        session_id=session_id,
        expected=expected,
        found=found,
    )


def _rows(session_id: str, entries: Sequence[Entry]) -> list[tuple[str, int, str, bytes]]:
    return [(session_id, e.seq, e.kind, e.body) for e in entries]


def _infos(rows: list[TupleRow]) -> list[SessionInfo]:
    return [
        SessionInfo(str(r[0]), int(r[1]), float(r[2]), float(r[3]), None if r[4] is None else float(r[4]))
        for r in rows
    ]


class _Postgres:
    """What the sync and async stores share: options, the DSN shown without its password, messages."""

    scheme = "postgresql"

    def _setup(self, dsn: Any, schema: Any, pool_size: Any, timeout: Any) -> None:
        self.dsn = _check_dsn(dsn)
        self.schema = _check_schema_name(schema)
        self.pool_size = _check_pool_size(pool_size)
        self.timeout = _check_timeout(timeout)
        self._shown = _redacted(self.dsn)
        self._q = _Queries(self.schema)

    def _where(self) -> str:
        return f"{self._shown!r}, schema={self.schema!r}"

    def _connect_kwargs(self) -> dict[str, Any]:
        # libpq's connect_timeout is whole seconds (at least 2); statement_timeout bounds every statement,
        # lock waits included, so a stuck writer is a StoreError rather than a hang
        return {
            "autocommit": True,
            "connect_timeout": max(2, math.ceil(self.timeout)),
        }

    def _statement_timeout(self) -> str:
        return f"{max(1, round(self.timeout * 1000))}ms"

    def _failed(self, exc: BaseException, doing: str) -> NoReturn:
        raise StoreError(f"the PostgreSQL store {self._where()} failed {doing}: {exc}") from exc

    def _check_found(self, found: int, *, migrate: bool) -> None:
        """A StoreError unless ``found`` is this reasonstate's schema version."""
        if found == SCHEMA_VERSION:
            return
        run = f"run `reasonstate store migrate {self._shown}` on schema {self.schema!r}"
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL store {self._where()} has schema version {found}, newer than this "
                f"reasonstate's {SCHEMA_VERSION}: upgrade reasonstate (`reasonstate store migrate` never "
                "goes back); nothing was changed"
            )
        if not migrate:
            raise StoreError(
                f"the PostgreSQL store {self._where()} has schema version {found}, this reasonstate uses "
                f"{SCHEMA_VERSION}: {run} (or open it with migrate=True)"
            )


class PostgresStore(_Postgres, Store):
    """``PostgresStore(dsn)``: a ``postgresql://`` (or ``postgres://``) URL, or libpq ``key=value`` pairs.

    ``schema=``: the PostgreSQL schema holding the tables (created by the migration when missing);
    ``ttl=``: seconds a session lives after its last append (None: for ever; :meth:`sweep` deletes the
    expired); ``encryption_key=``: 16, 24 or 32 bytes, bodies sealed with AES-GCM
    (``reasonstate[crypto]``); ``pool_size=``: the most connections the store's pool opens (one is kept
    open); ``timeout=``: seconds to wait for a connection, and for any statement (a lock held by another
    worker included) before a :class:`~reasonstate.errors.StoreError`; ``migrate=False``: do not create or
    upgrade the schema on open (``reasonstate store migrate`` does it), refuse any other version.

    Opening connects once, directly, to check (or migrate) the schema, so a server that does not answer is
    a :class:`~reasonstate.errors.StoreError` at once; the pool then serves every call. Safe to share
    between threads; each process opens its own.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        ttl: float | None = None,
        encryption_key: bytes | None = None,
        pool_size: int = 10,
        timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        Store.__init__(self, ttl=ttl, encryption_key=encryption_key)
        self._setup(dsn, schema, pool_size, timeout)
        self._pool: ConnectionPool[psycopg.Connection[TupleRow]] | None = None
        self._lock = threading.Lock()
        try:
            with psycopg.connect(self.dsn, **self._connect_kwargs()) as conn:
                self._configure(conn)
                found = self._migrate_on(conn) if migrate else self._found_on(conn)
        except psycopg.Error as exc:
            self._failed(exc, "to open")
        self._check_found(found, migrate=migrate)
        self._pool = ConnectionPool(
            self.dsn,
            kwargs=self._connect_kwargs(),
            min_size=1,
            max_size=self.pool_size,
            timeout=self.timeout,
            configure=self._configure,
            name=f"reasonstate-{self.schema}",
            open=False,
        )
        self._pool.open(wait=False)

    def _configure(self, conn: psycopg.Connection[TupleRow]) -> None:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", [self._statement_timeout()])

    def _run(self, doing: str, work: Callable[[psycopg.Connection[TupleRow]], _T]) -> _T:
        """``work`` on a pooled connection (autocommit: ``work`` opens a transaction for more than one
        statement). A connection found broken (the server ended it: a restart, a failover, usually while
        it sat in the pool) is dropped and ``work`` run again on another, at most ``pool_size`` times. That
        is safe for every primitive: a transaction cut off before its commit wrote nothing, and a re-run
        append re-checks its version, so it never lands twice (and :meth:`_append` recognises its own rows
        when the cut came after the commit). Every other psycopg or pool error is a StoreError, rolled
        back; SessionConflict passes through."""
        pool = self._pool
        if pool is None:
            raise StoreError(f"the PostgreSQL store {self._where()} is closed")
        for attempt in range(self.pool_size + 1):
            conn: psycopg.Connection[TupleRow] | None = None
            try:
                with pool.connection() as conn:
                    return work(conn)
            except psycopg.OperationalError as exc:
                # dead: broken, or already closed by the pool, whose rollback on its return found the
                # server had ended it (a socket seen closed before the server's message was read)
                if conn is None or not (conn.broken or conn.closed) or attempt == self.pool_size:
                    self._failed(exc, doing)
            except psycopg.Error as exc:
                self._failed(exc, doing)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the schema ----------------------------------------------------------------------------------------
    def _found_on(self, conn: psycopg.Connection[TupleRow]) -> int:
        q = self._q
        row = conn.execute(q.schema_exists, [q.schema_table_name]).fetchone()
        if row is None or not row[0]:
            return 0
        row = conn.execute(q.schema_version).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def _migrate_on(self, conn: psycopg.Connection[TupleRow]) -> int:
        q = self._q
        with conn.transaction():
            found = self._found_on(conn)
            if found >= SCHEMA_VERSION:  # the usual open: nothing to do, no lock taken (a newer: refused)
                return found
            # one migrating process at a time: the others wait here, then find it done
            conn.execute(q.lock, [q.lock_key])
            found = self._found_on(conn)
            if found >= SCHEMA_VERSION:
                return found
            if conn.execute(q.has_schema, [q.schema]).fetchone() is None:
                conn.execute(q.create_schema)
            conn.execute(q.create_schema_table)
            for statements in q.migrations[found:]:
                for statement in statements:
                    conn.execute(statement)
            if conn.execute(q.schema_version).fetchone() == (None,):
                conn.execute(q.insert_schema_version, [SCHEMA_VERSION])
            else:
                conn.execute(q.update_schema_version, [SCHEMA_VERSION])
            return SCHEMA_VERSION

    def _migrate(self) -> int:
        found = self._run("to migrate", self._migrate_on)
        self._check_found(found, migrate=True)
        return found

    # -- the primitives ------------------------------------------------------------------------------------
    def _one(self, doing: str, query: sql.Composed, params: Any = None) -> TupleRow | None:
        """The first row of one statement (None: no row, or a statement that returns none)."""

        def one(conn: psycopg.Connection[TupleRow]) -> TupleRow | None:
            cur = conn.execute(query, params)
            return cur.fetchone() if cur.description is not None else None

        return self._run(doing, one)

    def _all(self, doing: str, query: sql.Composed, params: Any = None) -> list[TupleRow]:
        return self._run(doing, lambda conn: conn.execute(query, params).fetchall())

    def _append(self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None) -> None:
        q = self._q
        params = _append_params(session_id, expected, entries, ttl)
        rows = _rows(session_id, entries)
        attempts = 0

        def append(conn: psycopg.Connection[TupleRow]) -> bool:
            nonlocal attempts
            attempts += 1
            try:
                with conn.transaction():
                    if expected == 0:
                        if conn.execute(q.create, params).fetchone() is None:
                            return False
                        conn.execute(q.clear_entries, [session_id])  # an expired session's rows
                    elif conn.execute(q.advance, params).fetchone() is None:
                        return False
                    with conn.cursor() as cur:
                        cur.executemany(q.insert_entry, rows)
                    return True
            except UniqueViolation:  # an entry already at one of these seqs: another writer's
                return False

        if self._run("to append", append):
            return
        found = self._version(session_id)
        # a retry after the first attempt's connection died: when that commit got through, the rows are ours
        if (
            attempts > 1
            and found == rows[-1][1]
            and self._all("to append", q.written, [session_id, expected, found]) == rows
        ):
            return
        raise _conflict(session_id, expected, found)

    def _read(self, session_id: str) -> list[Entry]:
        def read(conn: psycopg.Connection[TupleRow]) -> list[TupleRow]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(self._q.read, [session_id]).fetchall()

        return [Entry(int(seq), str(kind), bytes(body)) for seq, kind, body in self._run("to read", read)]

    def _version(self, session_id: str) -> int:
        row = self._one("to read a version", self._q.version, [session_id])
        return 0 if row is None else int(row[0])

    def _sessions(self) -> list[SessionInfo]:
        return _infos(self._all("to list the sessions", self._q.sessions))

    def _delete(self, session_id: str) -> bool:
        def delete(conn: psycopg.Connection[TupleRow]) -> bool:
            with conn.transaction():
                conn.execute(self._q.lock_session, [session_id])
                return conn.execute(self._q.delete, {"id": session_id}).fetchone() is not None

        return self._run("to delete", delete)

    def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None:
        row = self._one(
            "to take a lease", self._q.try_lease, {"id": session_id, "holder": holder, "ttl": ttl}
        )
        return None if row is None else float(row[0])

    def _release(self, session_id: str, holder: str) -> None:
        self._one("to release a lease", self._q.release, [session_id, holder])

    def _sweep(self) -> int:
        row = self._one("to sweep", self._q.sweep)
        return 0 if row is None else int(row[0])

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


class AsyncPostgresStore(_Postgres, AsyncStore):
    """:class:`PostgresStore` for :class:`~reasonstate.AsyncSession`: the same options, tables and
    contract on a ``psycopg_pool.AsyncConnectionPool``.

    The constructor only checks its options: the pool opens, and the schema is checked (or migrated), on
    the first call (or ``async with``), so a server that does not answer is a
    :class:`~reasonstate.errors.StoreError` there.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        ttl: float | None = None,
        encryption_key: bytes | None = None,
        pool_size: int = 10,
        timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        AsyncStore.__init__(self, ttl=ttl, encryption_key=encryption_key)
        self._setup(dsn, schema, pool_size, timeout)
        self._migrate_on_open = migrate
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]] | None = None
        self._closed = False
        self._opening: asyncio.Lock | None = None

    async def _configure(self, conn: psycopg.AsyncConnection[TupleRow]) -> None:
        await conn.execute("SELECT set_config('statement_timeout', %s, false)", [self._statement_timeout()])

    async def _open(self) -> AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]]:
        """The pool, opened on first use after one direct connection checked (or migrated) the schema."""
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise StoreError(f"the PostgreSQL store {self._where()} is closed")
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is not None:
                return self._pool
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, **self._connect_kwargs()) as conn:
                    await self._configure(conn)
                    found = await (self._migrate_on(conn) if self._migrate_on_open else self._found_on(conn))
            except psycopg.Error as exc:
                self._failed(exc, "to open")
            self._check_found(found, migrate=self._migrate_on_open)
            pool: AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]] = AsyncConnectionPool(
                self.dsn,
                kwargs=self._connect_kwargs(),
                min_size=1,
                max_size=self.pool_size,
                timeout=self.timeout,
                configure=self._configure,
                name=f"reasonstate-{self.schema}",
                open=False,
            )
            await pool.open(wait=False)
            self._pool = pool
            return pool

    async def _run(
        self, doing: str, work: Callable[[psycopg.AsyncConnection[TupleRow]], Awaitable[_T]]
    ) -> _T:
        """:meth:`PostgresStore._run`, awaited."""
        pool = await self._open()
        for attempt in range(self.pool_size + 1):
            conn: psycopg.AsyncConnection[TupleRow] | None = None
            try:
                async with pool.connection() as conn:
                    return await work(conn)
            except psycopg.OperationalError as exc:
                # dead: broken, or already closed by the pool, whose rollback on its return found the
                # server had ended it (a socket seen closed before the server's message was read)
                if conn is None or not (conn.broken or conn.closed) or attempt == self.pool_size:
                    self._failed(exc, doing)
            except psycopg.Error as exc:
                self._failed(exc, doing)
        raise AssertionError("unreachable")  # pragma: no cover

    async def __aenter__(self) -> AsyncPostgresStore:
        await self._open()
        return self

    # -- the schema ----------------------------------------------------------------------------------------
    async def _found_on(self, conn: psycopg.AsyncConnection[TupleRow]) -> int:
        q = self._q
        row = await (await conn.execute(q.schema_exists, [q.schema_table_name])).fetchone()
        if row is None or not row[0]:
            return 0
        row = await (await conn.execute(q.schema_version)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    async def _migrate_on(self, conn: psycopg.AsyncConnection[TupleRow]) -> int:
        q = self._q
        async with conn.transaction():
            found = await self._found_on(conn)
            if found >= SCHEMA_VERSION:
                return found
            await conn.execute(q.lock, [q.lock_key])
            found = await self._found_on(conn)
            if found >= SCHEMA_VERSION:
                return found
            if await (await conn.execute(q.has_schema, [q.schema])).fetchone() is None:
                await conn.execute(q.create_schema)
            await conn.execute(q.create_schema_table)
            for statements in q.migrations[found:]:
                for statement in statements:
                    await conn.execute(statement)
            if await (await conn.execute(q.schema_version)).fetchone() == (None,):
                await conn.execute(q.insert_schema_version, [SCHEMA_VERSION])
            else:
                await conn.execute(q.update_schema_version, [SCHEMA_VERSION])
            return SCHEMA_VERSION

    async def _migrate(self) -> int:
        found = await self._run("to migrate", self._migrate_on)
        self._check_found(found, migrate=True)
        return found

    # -- the primitives ------------------------------------------------------------------------------------
    async def _append(
        self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None
    ) -> None:
        q = self._q
        params = _append_params(session_id, expected, entries, ttl)
        rows = _rows(session_id, entries)
        attempts = 0

        async def append(conn: psycopg.AsyncConnection[TupleRow]) -> bool:
            nonlocal attempts
            attempts += 1
            try:
                async with conn.transaction():
                    if expected == 0:
                        if await (await conn.execute(q.create, params)).fetchone() is None:
                            return False
                        await conn.execute(q.clear_entries, [session_id])
                    elif await (await conn.execute(q.advance, params)).fetchone() is None:
                        return False
                    async with conn.cursor() as cur:
                        await cur.executemany(q.insert_entry, rows)
                    return True
            except UniqueViolation:
                return False

        if await self._run("to append", append):
            return
        found = await self._version(session_id)
        if (
            attempts > 1
            and found == rows[-1][1]
            and await self._all("to append", q.written, [session_id, expected, found]) == rows
        ):
            return
        raise _conflict(session_id, expected, found)

    async def _read(self, session_id: str) -> list[Entry]:
        async def read(conn: psycopg.AsyncConnection[TupleRow]) -> list[TupleRow]:
            async with conn.cursor(binary=True) as cur:
                await cur.execute(self._q.read, [session_id])
                return await cur.fetchall()

        rows = await self._run("to read", read)
        return [Entry(int(seq), str(kind), bytes(body)) for seq, kind, body in rows]

    async def _one(self, doing: str, query: sql.Composed, params: Any = None) -> TupleRow | None:
        async def one(conn: psycopg.AsyncConnection[TupleRow]) -> TupleRow | None:
            cur = await conn.execute(query, params)
            return await cur.fetchone() if cur.description is not None else None

        return await self._run(doing, one)

    async def _all(self, doing: str, query: sql.Composed, params: Any = None) -> list[TupleRow]:
        async def all_(conn: psycopg.AsyncConnection[TupleRow]) -> list[TupleRow]:
            return await (await conn.execute(query, params)).fetchall()

        return await self._run(doing, all_)

    async def _version(self, session_id: str) -> int:
        row = await self._one("to read a version", self._q.version, [session_id])
        return 0 if row is None else int(row[0])

    async def _sessions(self) -> list[SessionInfo]:
        return _infos(await self._all("to list the sessions", self._q.sessions))

    async def _delete(self, session_id: str) -> bool:
        async def delete(conn: psycopg.AsyncConnection[TupleRow]) -> bool:
            async with conn.transaction():
                await conn.execute(self._q.lock_session, [session_id])
                return await (await conn.execute(self._q.delete, {"id": session_id})).fetchone() is not None

        return await self._run("to delete", delete)

    async def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None:
        params = {"id": session_id, "holder": holder, "ttl": ttl}
        row = await self._one("to take a lease", self._q.try_lease, params)
        return None if row is None else float(row[0])

    async def _release(self, session_id: str, holder: str) -> None:
        await self._one("to release a lease", self._q.release, [session_id, holder])

    async def _sweep(self) -> int:
        row = await self._one("to sweep", self._q.sweep)
        return 0 if row is None else int(row[0])

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
