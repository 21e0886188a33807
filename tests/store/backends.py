"""Every store backend behind one handle, for session-level tests parametrized over SQLite, PostgreSQL and
Redis: each :class:`Backend` is isolated (its own SQLite file, a fresh PostgreSQL schema, a Redis key
prefix) and cleaned up after. PostgreSQL and Redis are the real servers of :mod:`tests.store.services`
(skipped when none answers on a laptop, a failure under ``REASONSTATE_REQUIRE_SERVICES=1``).

A test module takes the fixture with::

    @pytest.fixture(params=BACKENDS)
    def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
        with open_backend(request.param, tmp_path) as b:
            yield b
"""

from __future__ import annotations

import contextlib
import importlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from reasonstate.store import AsyncStore, Store
from tests.store import services

BACKENDS = ("sqlite", "postgres", "redis")

_CLASSES = {
    "sqlite": ("reasonstate.store.sqlite:SQLiteStore", "reasonstate.store.sqlite:AsyncSQLiteStore"),
    "postgres": ("reasonstate.store.postgres:PostgresStore", "reasonstate.store.postgres:AsyncPostgresStore"),
    "redis": ("reasonstate.store.redis:RedisStore", "reasonstate.store.redis:AsyncRedisStore"),
}


def store_class(path: str) -> Any:
    """``module:Name`` imported (light enough for a worker process)."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def open_spec(spec: tuple[str, str, dict[str, Any]], **options: Any) -> Any:
    """A store from a picklable :attr:`Backend.spec` (what a worker process opens)."""
    cls, where, base = spec
    return store_class(cls)(where, **base, **options)


@attrs.define
class Backend:
    """One isolated storage place on one backend: ``open()`` / ``aopen()`` give new handles on it."""

    name: str
    where: str
    options: dict[str, Any]
    handles: list[Any] = attrs.field(factory=list)

    @property
    def spec(self) -> tuple[str, str, dict[str, Any]]:
        """``(sync class, where, options)``: what another process needs to open the same storage."""
        return _CLASSES[self.name][0], self.where, dict(self.options)

    @property
    def aspec(self) -> tuple[str, str, dict[str, Any]]:
        return _CLASSES[self.name][1], self.where, dict(self.options)

    def open(self, **options: Any) -> Store:
        """A new sync handle (closed after the test)."""
        store: Store = open_spec(self.spec, **options)
        self.handles.append(store)
        return store

    def aopen(self, **options: Any) -> AsyncStore:
        """A new async handle (the test closes it, on its loop)."""
        store: AsyncStore = open_spec(self.aspec, **options)
        return store

    def stored(self, session_id: str) -> list[tuple[int, str, bytes]]:
        """The session's entries exactly as the backend holds them (sealed bodies stay sealed), from its
        newest checkpoint on."""
        raw = self.open()
        return [(e.seq, e.kind, e.body) for e in raw._read(session_id)]

    def set_schema_version(self, version: int) -> None:
        """Write ``version`` as the storage's schema version, behind the store's back (a newer
        reasonstate's migration, or an older one's tables)."""
        if self.name == "sqlite":
            import sqlite3

            db = sqlite3.connect(self.where)
            with db:
                db.execute("UPDATE reasonstate_schema SET version = ?", (version,))
            db.close()
        elif self.name == "postgres":
            import psycopg
            from psycopg import sql

            with psycopg.connect(self.where, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("UPDATE {} SET version = %s").format(
                        sql.Identifier(self.options["schema"], "reasonstate_schema")
                    ),
                    [version],
                )
        else:
            import redis

            r = redis.Redis.from_url(self.where)
            r.set(self.options["prefix"] + "schema", str(version))
            r.close()

    def schema_version(self) -> int:
        """The schema version the storage holds, read behind the store's back."""
        if self.name == "sqlite":
            import sqlite3

            db = sqlite3.connect(self.where)
            row = db.execute("SELECT version FROM reasonstate_schema").fetchone()
            db.close()
            return int(row[0])
        if self.name == "postgres":
            import psycopg
            from psycopg import sql

            with psycopg.connect(self.where, autocommit=True) as conn:
                got = conn.execute(
                    sql.SQL("SELECT max(version) FROM {}").format(
                        sql.Identifier(self.options["schema"], "reasonstate_schema")
                    )
                ).fetchone()
            assert got is not None
            return int(got[0])
        import redis

        r = redis.Redis.from_url(self.where)
        value = r.get(self.options["prefix"] + "schema")
        r.close()
        return int(value)

    def close(self) -> None:
        for h in self.handles:
            with contextlib.suppress(Exception):
                h.close()
        self.handles.clear()


@contextlib.contextmanager
def open_backend(name: str, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, isolated :class:`Backend` named ``name``; everything it stored is removed after."""
    if name == "sqlite":
        backend = Backend(name, str(tmp_path / f"store-{secrets.token_hex(4)}.db"), {})
        try:
            yield backend
        finally:
            backend.close()
    elif name == "postgres":
        url = services.postgres_url()
        import psycopg
        from psycopg import sql

        schema = f"rs_peer_{secrets.token_hex(6)}"
        backend = Backend(name, url, {"schema": schema})
        try:
            yield backend
        finally:
            backend.close()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '10s'")
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    elif name == "redis":
        url = services.redis_url()
        import redis

        prefix = f"rs-peer-{secrets.token_hex(6)}:"
        backend = Backend(name, url, {"prefix": prefix})
        try:
            yield backend
        finally:
            backend.close()
            r = redis.Redis.from_url(url)
            try:
                keys = list(r.scan_iter(match=prefix + "*", count=1000))
                if keys:
                    r.delete(*keys)
            finally:
                r.close()
    else:  # pragma: no cover - a typo in a test
        raise ValueError(f"no backend {name!r}")
