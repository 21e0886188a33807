"""The store contract on SQLite: a file in WAL mode (several handles on one file) and ``":memory:"``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reasonstate.errors import StoreError
from reasonstate.store import SCHEMA_VERSION, AsyncSQLiteStore, AsyncStore, SQLiteStore
from tests.store.conformance import AsyncConformance, Conformance, c


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db_path)
    yield s
    s.close()


@pytest.fixture
def reopen(db_path: Path) -> Callable[..., SQLiteStore]:
    return lambda **options: SQLiteStore(db_path, **options)


@pytest.fixture
def astore_factory(db_path: Path) -> Callable[..., AsyncStore]:
    return lambda **options: AsyncSQLiteStore(db_path, **options)


class TestSQLite(Conformance):
    pass


class TestAsyncSQLite(AsyncConformance):
    pass


def test_a_memory_store_keeps_its_sessions_for_its_lifetime() -> None:
    s = SQLiteStore(":memory:")
    s.append("m", 0, [c(1)])
    assert s.read("m") == [c(1)]
    s.close()


def test_the_file_is_in_wal_mode_with_the_documented_tables(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "reasonstate_schema",
        "reasonstate_sessions",
        "reasonstate_entries",
        "reasonstate_leases",
    } <= tables
    assert db.execute("SELECT version FROM reasonstate_schema").fetchone()[0] == SCHEMA_VERSION


def test_a_newer_schema_is_refused_and_left_alone(db_path: Path) -> None:
    """google/adk-python#3272: a schema upgrade broke existing tables. A store never touches a schema it
    does not know: a newer one is refused with a clear error, and its rows are left as they were."""
    s = SQLiteStore(db_path)
    s.append("kept", 0, [c(1)])
    s.close()
    db = sqlite3.connect(db_path)
    db.execute("UPDATE reasonstate_schema SET version = ?", (SCHEMA_VERSION + 1,))
    db.commit()
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(db_path)
    with pytest.raises(StoreError, match="migrate"):
        SQLiteStore(db_path, migrate=False)
    assert db.execute("SELECT count(*) FROM reasonstate_entries").fetchone()[0] == 1


def test_an_unmigrated_file_is_refused_without_migrate(db_path: Path) -> None:
    with pytest.raises(StoreError, match="reasonstate store migrate"):
        SQLiteStore(db_path, migrate=False)
    opts: dict[str, Any] = {}
    assert SQLiteStore(db_path, **opts).migrate() == SCHEMA_VERSION
