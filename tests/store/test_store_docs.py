"""The schema page (docs/concepts/store.md) against the schema the stores create, table by table.

The page's SQL tables give each column's SQLite and PostgreSQL declaration; these tests read those tables
from the page (the oracle: what a reader is told) and compare them with what ``SQLiteStore`` and
``PostgresStore`` actually create, so a column added, dropped, retyped or made nullable without the page
(or the page without the code) fails here.
"""

from __future__ import annotations

import re
import secrets
import sqlite3
from pathlib import Path

import psycopg
from psycopg import sql

from reasonstate.store import SQLiteStore
from tests.store import services

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "store.md"
TABLES = ("reasonstate_schema", "reasonstate_sessions", "reasonstate_entries", "reasonstate_leases")


def documented() -> dict[str, list[tuple[str, str, str]]]:
    """Per table: ``(column, SQLite declaration, PostgreSQL declaration)`` rows, as the page gives them (the
    markdown table after the paragraph that starts with the table's name)."""
    text = PAGE.read_text(encoding="utf-8")
    out: dict[str, list[tuple[str, str, str]]] = {}
    for table in TABLES:
        at = text.index(f"`{table}`:")
        rows: list[tuple[str, str, str]] = []
        for line in text[at:].splitlines()[1:]:
            if not line.startswith("|"):
                if rows:
                    break
                continue
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] == "column" or set(cells[0]) <= {"-"}:
                continue
            rows.append(tuple(c.strip("`") for c in cells[:3]))  # type: ignore[arg-type]
        out[table] = rows
    return out


def test_the_page_documents_every_table() -> None:
    tables = documented()
    assert all(tables[t] for t in TABLES), tables


def test_sqlite_creates_the_documented_columns(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    try:
        for table, rows in documented().items():
            found = []
            for _cid, name, kind, notnull, _default, pk in db.execute(f"PRAGMA table_info({table})"):
                declared = kind
                if pk and sum(1 for r in db.execute(f"PRAGMA table_info({table})") if r[5]) == 1:
                    declared += " PRIMARY KEY"
                elif notnull:
                    declared += " NOT NULL"
                found.append((name, declared))
            assert found == [(name, lite) for name, lite, _pg in rows], table
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "reasonstate_sessions_updated" in indexes  # "an index on `updated` serves `sessions()`"
        assert (
            "WITHOUT ROWID"
            in db.execute("SELECT sql FROM sqlite_master WHERE name = 'reasonstate_entries'").fetchone()[0]
        )
    finally:
        db.close()


_PG_TYPES = {
    "TEXT": "text",
    "INTEGER": "integer",
    "BIGINT": "bigint",
    "DOUBLE PRECISION": "double precision",
    "BYTEA": "bytea",
}


def test_postgres_creates_the_documented_columns() -> None:
    from reasonstate.store.postgres import PostgresStore

    url = services.postgres_url()
    schema = f"rs_docs_{secrets.token_hex(4)}"
    PostgresStore(url, schema=schema).close()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for table, rows in documented().items():
                found = conn.execute(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    [schema, table],
                ).fetchall()
                expected = []
                for name, _lite, pg in rows:
                    m = re.fullmatch(r"(.+?)( PRIMARY KEY| NOT NULL)?", pg)
                    assert m is not None, pg
                    expected.append((name, _PG_TYPES[m.group(1)], "NO" if m.group(2) else "YES"))
                assert found == expected, table
            indexes = {
                r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", [schema])
            }
            assert "reasonstate_sessions_updated" in indexes
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
