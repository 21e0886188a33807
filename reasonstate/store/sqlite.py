"""The embedded store: stdlib ``sqlite3``, one file (WAL) or ``":memory:"``; the default of the demo and docs.

Tables (schema version 1, ``docs/concepts/store.md``): ``reasonstate_schema(version)``,
``reasonstate_sessions(session_id, version, checkpoint, created, updated, expires)``,
``reasonstate_entries(session_id, seq, kind, body)`` keyed by ``(session_id, seq)``, and
``reasonstate_leases(session_id, holder, expires)``. An append is one ``BEGIN IMMEDIATE`` transaction (the
version check and the inserts under SQLite's write lock), so two processes on one file never both append on
one version, and a process killed mid-append leaves the file at its last complete append (SQLite's
journal). Several processes may share one file; a ``":memory:"`` store lives and dies with its object.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from reasonstate.errors import SessionConflict, StoreError
from reasonstate.store._base import CHECKPOINT, SCHEMA_VERSION, AsyncStore, Entry, SessionInfo, Store

__all__ = ["AsyncSQLiteStore", "SQLiteStore"]

_T = TypeVar("_T")

#: the statements that bring a schema of version ``n - 1`` to version ``n`` (index ``n - 1``)
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS reasonstate_sessions (
            session_id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            checkpoint INTEGER NOT NULL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            expires REAL
        )""",
        """CREATE TABLE IF NOT EXISTS reasonstate_entries (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE IF NOT EXISTS reasonstate_leases (
            session_id TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            expires REAL NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS reasonstate_sessions_updated ON reasonstate_sessions (updated)",
    ),
)


#: an append on version ``expected > 0``: the version check and the move in one statement (its row count is
#: 1 only when the live session is at the version the append was built on)
_MOVE = """UPDATE reasonstate_sessions SET version = ?, checkpoint = coalesce(?, checkpoint), updated = ?,
    expires = ? WHERE session_id = ? AND version = ? AND (expires IS NULL OR expires > ?)"""
_INSERT = "INSERT INTO reasonstate_entries (session_id, seq, kind, body) VALUES (?, ?, ?, ?)"


def _wal(db: sqlite3.Connection, timeout: float) -> None:
    """Put the database in WAL mode, waiting up to ``timeout`` seconds for other processes. SQLite answers
    ``PRAGMA journal_mode=WAL`` with "database is locked" at once, without its busy handler, while another
    connection opens the same new file and converts it (seen with 8 worker processes opening one store at
    the same moment), so the wait is ours."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


class SQLiteStore(Store):
    """``SQLiteStore(path)``: a file (created when missing, WAL mode) or ``":memory:"``.

    ``ttl=``: seconds a session lives after its last append (None: for ever); ``encryption_key=``: 16, 24
    or 32 bytes, bodies sealed with AES-GCM (``reasonstate[crypto]``); ``timeout=``: seconds to wait for
    another process's write lock before a :class:`~reasonstate.errors.StoreError`; ``migrate=False``: do
    not create or upgrade the schema on open (``reasonstate store migrate`` does it).
    """

    scheme = "sqlite"

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        ttl: float | None = None,
        encryption_key: bytes | None = None,
        timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        super().__init__(ttl=ttl, encryption_key=encryption_key)
        self.path = str(path)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            if self.path != ":memory:":
                _wal(self._db, timeout)
                self._db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite store {self.path!r}: {exc}") from exc
        if migrate:
            self._migrate()
        else:
            self._check_schema()

    def _where(self) -> str:
        return repr(self.path)

    # -- transactions --------------------------------------------------------------------------------------
    def _tx(self, work: Callable[[sqlite3.Connection], _T], *, write: bool = True) -> _T:
        """``work`` in one transaction (``BEGIN IMMEDIATE`` for writes); rolled back on any exception.
        sqlite3 errors become :class:`StoreError`; :class:`SessionConflict` passes through."""
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise StoreError(f"the SQLite store {self.path!r} is not available: {exc}") from exc
            try:
                out = work(db)
                db.execute("COMMIT")
                return out
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"the SQLite store {self.path!r} failed: {exc}") from exc
                raise

    def _found(self) -> int:
        """The schema version of the file (0: none), read without the write lock."""

        def check(db: sqlite3.Connection) -> int:
            exists = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='reasonstate_schema'"
            ).fetchone()
            row = db.execute("SELECT version FROM reasonstate_schema").fetchone() if exists else None
            return 0 if row is None else int(row[0])

        return self._tx(check, write=False)

    def _check_schema(self) -> int:
        found = self._found()
        if found != SCHEMA_VERSION:
            raise StoreError(
                f"the SQLite store {self.path!r} has schema version {found}, this reasonstate uses "
                f"{SCHEMA_VERSION}: run `reasonstate store migrate sqlite:///{self.path}`"
            )
        return found

    def _migrate(self) -> int:
        if self._found() == SCHEMA_VERSION:  # the common case: no write lock taken
            return SCHEMA_VERSION

        def migrate(db: sqlite3.Connection) -> int:
            db.execute("CREATE TABLE IF NOT EXISTS reasonstate_schema (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM reasonstate_schema").fetchone()
            found = 0 if row is None else int(row[0])
            if found > SCHEMA_VERSION:
                raise StoreError(
                    f"the SQLite store {self.path!r} has schema version {found}, newer than this "
                    f"reasonstate's {SCHEMA_VERSION}: upgrade reasonstate; nothing was changed"
                )
            for statements in _MIGRATIONS[found:]:
                for sql in statements:
                    db.execute(sql)
            if row is None:
                db.execute("INSERT INTO reasonstate_schema (version) VALUES (?)", (SCHEMA_VERSION,))
            elif found != SCHEMA_VERSION:
                db.execute("UPDATE reasonstate_schema SET version = ?", (SCHEMA_VERSION,))
            return SCHEMA_VERSION

        return self._tx(migrate)

    # -- the primitives ------------------------------------------------------------------------------------
    @staticmethod
    def _live(db: sqlite3.Connection, session_id: str, now: float) -> tuple[int, int] | None:
        row = db.execute(
            "SELECT version, checkpoint, expires FROM reasonstate_sessions WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        if row is None or (row[2] is not None and row[2] <= now):
            return None
        return int(row[0]), int(row[1])

    @staticmethod
    def _remove(db: sqlite3.Connection, session_id: str, *, lease: bool = True) -> int:
        """Delete the session's entries and metadata, and its lease unless ``lease=False`` (a lease is
        taken before a session's first append, and outlives its expiry until its own runs out)."""
        db.execute("DELETE FROM reasonstate_entries WHERE session_id = ?", (session_id,))
        if lease:
            db.execute("DELETE FROM reasonstate_leases WHERE session_id = ?", (session_id,))
        return db.execute("DELETE FROM reasonstate_sessions WHERE session_id = ?", (session_id,)).rowcount

    def _append(self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None) -> None:
        checkpoints = [e.seq for e in entries if e.kind == CHECKPOINT]
        checkpoint = checkpoints[-1] if checkpoints else None

        def append(db: sqlite3.Connection) -> None:
            now = time.time()
            expires = None if ttl is None else now + ttl
            if expected:
                # the common case, a session's next commit: one statement checks the version (of a live
                # session) and moves it; no row read back into Python
                moved = db.execute(
                    _MOVE, (entries[-1].seq, checkpoint, now, expires, session_id, expected, now)
                )
                if moved.rowcount != 1:
                    live = self._live(db, session_id, now)
                    raise self._conflict(session_id, expected, 0 if live is None else live[0])
            else:
                live = self._live(db, session_id, now)
                if live is not None:
                    raise self._conflict(session_id, expected, live[0])
                self._remove(db, session_id, lease=False)  # an expired session's rows: the id starts afresh
                db.execute(
                    "INSERT INTO reasonstate_sessions (session_id, version, checkpoint, created, updated, "
                    "expires) VALUES (?, ?, ?, ?, ?, ?)",
                    (session_id, entries[-1].seq, 1 if checkpoint is None else checkpoint, now, now, expires),
                )
            if len(entries) == 1:
                e = entries[0]
                db.execute(_INSERT, (session_id, e.seq, e.kind, e.body))
            else:
                db.executemany(_INSERT, [(session_id, e.seq, e.kind, e.body) for e in entries])

        self._tx(append)

    @staticmethod
    def _conflict(session_id: str, expected: int, found: int) -> SessionConflict:
        return SessionConflict(
            f"session {session_id!r} is at version {found}, this append was built on {expected}",
            session_id=session_id,
            expected=expected,
            found=found,
        )

    def _read(self, session_id: str) -> list[Entry]:
        def read(db: sqlite3.Connection) -> list[Entry]:
            live = self._live(db, session_id, time.time())
            if live is None:
                return []
            version, checkpoint = live
            rows = db.execute(
                "SELECT seq, kind, body FROM reasonstate_entries WHERE session_id = ? AND seq >= ? "
                "AND seq <= ? ORDER BY seq",
                (session_id, checkpoint, version),
            ).fetchall()
            return [Entry(int(seq), str(kind), bytes(body)) for seq, kind, body in rows]

        return self._tx(read, write=False)

    def _version(self, session_id: str) -> int:
        live = self._tx(lambda db: self._live(db, session_id, time.time()), write=False)
        return 0 if live is None else live[0]

    def _sessions(self) -> list[SessionInfo]:
        rows = self._tx(
            lambda db: db.execute(
                "SELECT session_id, version, created, updated, expires FROM reasonstate_sessions "
                "WHERE expires IS NULL OR expires > ? ORDER BY updated DESC, session_id",
                (time.time(),),
            ).fetchall(),
            write=False,
        )
        return [SessionInfo(str(r[0]), int(r[1]), float(r[2]), float(r[3]), r[4]) for r in rows]

    def _delete(self, session_id: str) -> bool:
        return bool(self._tx(lambda db: self._remove(db, session_id)))

    def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None:
        def take(db: sqlite3.Connection) -> float | None:
            now = time.time()
            row = db.execute(
                "SELECT holder, expires FROM reasonstate_leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is not None and row[0] != holder and row[1] > now:
                return None
            db.execute(
                "INSERT INTO reasonstate_leases (session_id, holder, expires) VALUES (?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, expires = excluded.expires",
                (session_id, holder, now + ttl),
            )
            return now + ttl

        return self._tx(take)

    def _release(self, session_id: str, holder: str) -> None:
        self._tx(
            lambda db: db.execute(
                "DELETE FROM reasonstate_leases WHERE session_id = ? AND holder = ?", (session_id, holder)
            )
        )

    def _sweep(self) -> int:
        def sweep(db: sqlite3.Connection) -> int:
            ids = [
                r[0]
                for r in db.execute(
                    "SELECT session_id FROM reasonstate_sessions WHERE expires IS NOT NULL AND expires <= ?",
                    (time.time(),),
                ).fetchall()
            ]
            for session_id in ids:
                self._remove(db, session_id, lease=False)
            db.execute("DELETE FROM reasonstate_leases WHERE expires <= ?", (time.time(),))
            return len(ids)

        return self._tx(sweep)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class AsyncSQLiteStore(AsyncStore):
    """:class:`SQLiteStore` for :class:`~reasonstate.AsyncSession`: the same file and contract, each call
    run on a worker thread (``asyncio.to_thread``) so the event loop never blocks on SQLite."""

    scheme = "sqlite"

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        ttl: float | None = None,
        encryption_key: bytes | None = None,
        timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        super().__init__(ttl=ttl, encryption_key=encryption_key)
        # the sync store does the work; sealing happens here, once
        self._sync = SQLiteStore(path, ttl=ttl, timeout=timeout, migrate=migrate)
        self.path = self._sync.path

    def _where(self) -> str:
        return repr(self.path)

    @staticmethod
    async def _run(fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(fn, *args)

    async def _append(
        self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None
    ) -> None:
        await self._run(self._sync._append, session_id, expected, entries, ttl)

    async def _read(self, session_id: str) -> list[Entry]:
        return await self._run(self._sync._read, session_id)

    async def _version(self, session_id: str) -> int:
        return await self._run(self._sync._version, session_id)

    async def _sessions(self) -> list[SessionInfo]:
        return await self._run(self._sync._sessions)

    async def _delete(self, session_id: str) -> bool:
        return await self._run(self._sync._delete, session_id)

    async def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None:
        return await self._run(self._sync._try_lease, session_id, holder, ttl)

    async def _release(self, session_id: str, holder: str) -> None:
        await self._run(self._sync._release, session_id, holder)

    async def _sweep(self) -> int:
        return await self._run(self._sync._sweep)

    async def _migrate(self) -> int:
        return await self._run(self._sync._migrate)

    async def close(self) -> None:
        await self._run(self._sync.close)
