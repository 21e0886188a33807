"""Sessions that outlive a process: an append-only log per session, in SQLite, PostgreSQL or Redis.

``rs.Session(client, model=..., store=store, session_id="conv-42")`` appends each commit's delta to the
store as it happens; ``rs.Session.load(store, "conv-42", client)`` continues it in another process with a
byte-identical next request. Every append names the version it was built on, so two workers never fork a
history (:class:`~reasonstate.errors.SessionConflict`); a failing store is a
:class:`~reasonstate.errors.StoreError` that keeps the reply paid for. The contract is in
:mod:`reasonstate.store._base`; docs/howto/persist.md shows it at work.

``open_store(url)`` opens any of them from a URL (``sqlite:///sessions.db``, ``postgresql://...?schema=``,
``redis://...?prefix=``; :func:`open_async_store` the asyncio twins), as ``reasonstate store migrate|list
URL`` and ``reasonstate inspect|report URL#SESSION_ID`` do.

``SQLiteStore`` is stdlib only. ``PostgresStore`` needs ``reasonstate[postgres]`` (psycopg 3) and
``RedisStore`` ``reasonstate[redis]`` (redis-py): they are imported when first named (or when
:func:`open_store` is given their URL), so ``import reasonstate.store`` needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reasonstate.store._base import SCHEMA_VERSION, AsyncStore, Entry, Lease, SessionInfo, Store
from reasonstate.store._open import StoreURL, open_async_store, open_store, parse_store_url
from reasonstate.store.sqlite import AsyncSQLiteStore, SQLiteStore

if TYPE_CHECKING:
    from reasonstate.store.postgres import AsyncPostgresStore, PostgresStore
    from reasonstate.store.redis import AsyncRedisStore, RedisStore

__all__ = [
    "SCHEMA_VERSION",
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "AsyncSQLiteStore",
    "AsyncStore",
    "Entry",
    "Lease",
    "PostgresStore",
    "RedisStore",
    "SQLiteStore",
    "SessionInfo",
    "Store",
    "StoreURL",
    "open_async_store",
    "open_store",
    "parse_store_url",
]

_LAZY = {
    "PostgresStore": "reasonstate.store.postgres",
    "AsyncPostgresStore": "reasonstate.store.postgres",
    "RedisStore": "reasonstate.store.redis",
    "AsyncRedisStore": "reasonstate.store.redis",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reasonstate.store' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
