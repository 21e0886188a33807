"""Stores by URL (``open_store``) and the command line over them: ``reasonstate store migrate|list URL`` and
``reasonstate inspect|report URL#SESSION_ID``, the command's ``main`` in this process (the real command in a
subprocess once, for its entry point), on a SQLite file and on the real PostgreSQL and Redis servers
(tests/store/services.py), each test in its own file, schema or prefix."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.errors import InvalidOption
from reasonstate.store import (
    AsyncSQLiteStore,
    SQLiteStore,
    StoreURL,
    open_async_store,
    open_store,
    parse_store_url,
)
from reasonstate.testing.anthropic import AnthropicEmulator
from tests._cli import run_main
from tests.conftest import CLOCK, MODEL, SYSTEM, THINKING, WEATHER, answer, run_chain, three_step_chain
from tests.store import services

ROOT = Path(__file__).resolve().parent.parent.parent


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The command's ``main`` in this process (tests/_cli.py), in ``cwd``."""
    return run_main(*args, cwd=cwd)


def run_command(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess, from this tree (also when ``cwd`` is elsewhere)."""
    return subprocess.run(
        [sys.executable, "-m", "reasonstate.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


# -- open_store: the URL forms ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///sessions.db", StoreURL("sqlite", "sessions.db")),
        ("sqlite:///data/s.db", StoreURL("sqlite", "data/s.db")),
        ("sqlite:////var/lib/app/s.db", StoreURL("sqlite", "/var/lib/app/s.db")),
        ("SQLITE:///s.db", StoreURL("sqlite", "s.db")),
        ("sqlite://:memory:", StoreURL("sqlite", ":memory:")),
        ("sqlite:///:memory:", StoreURL("sqlite", ":memory:")),
        ("sqlite://", StoreURL("sqlite", ":memory:")),
        ("postgresql://app@db:5432/app", StoreURL("postgresql", "postgresql://app@db:5432/app")),
        (
            "postgres://app@db/app?schema=agents",
            StoreURL("postgres", "postgres://app@db/app", {"schema": "agents"}),
        ),
        (
            "postgresql://app:pw@db/app?sslmode=require&schema=a%20b",
            StoreURL("postgresql", "postgresql://app:pw@db/app?sslmode=require", {"schema": "a b"}),
        ),
        ("redis://cache:6379/2", StoreURL("redis", "redis://cache:6379/2")),
        ("redis://cache/0?prefix=myapp:", StoreURL("redis", "redis://cache/0", {"prefix": "myapp:"})),
        (
            "rediss://:pw@cache:6380/0?prefix=",
            StoreURL("rediss", "rediss://:pw@cache:6380/0", {"prefix": ""}),
        ),
    ],
)
def test_each_url_form_names_its_backend_target_and_options(url: str, expected: StoreURL) -> None:
    assert parse_store_url(url) == expected


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("sessions.db", "without a scheme"),
        ("", "non-empty string"),
        ("mysql://db/app", r"got mysql://\.\.\."),
        ("http://user:secret@host/x", r"got http://\.\.\."),
        ("sqlite://host/s.db", "has no host"),
        ("sqlite:///", "has no host"),
        ("sqlite:///s.db?timeout=3", r"no \?query"),
        ("redis://h/0?prefix=a&prefix=b", "2 times"),
        ("postgresql://h/db#frag", "no #fragment"),
    ],
)
def test_anything_else_is_an_invalid_option_that_never_shows_the_url(url: str, match: str) -> None:
    with pytest.raises(InvalidOption, match=match) as caught:
        parse_store_url(url)
    assert "secret" not in str(caught.value)


def test_open_store_opens_sqlite_files_and_memory_and_checks_its_options(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(f"sqlite:///{path}", ttl=60) as store:  # an absolute path: four slashes in all
        assert isinstance(store, SQLiteStore) and store.path == str(path) and store.ttl == 60
        assert store.migrate() == 1
    assert path.is_file()
    with open_store("sqlite://:memory:") as memory:
        assert isinstance(memory, SQLiteStore) and memory.path == ":memory:"
    with pytest.raises(InvalidOption, match=r"SQLiteStore does not take .*'ttl', 'encryption_key'"):
        open_store("sqlite://:memory:", schema="x")
    with pytest.raises(InvalidOption, match="ttl="):
        open_store("sqlite://:memory:", ttl=-1)  # the backend's own checks still apply


def test_a_relative_sqlite_path_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///nested.db") as store:
        assert store.version("x") == 0
    assert (tmp_path / "nested.db").is_file()


def test_open_async_store_gives_the_asyncio_twin(tmp_path: Path) -> None:
    async def main() -> int:
        async with open_async_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
            assert isinstance(store, AsyncSQLiteStore)
            return await store.migrate()

    assert asyncio.run(main()) == 1


def test_a_url_option_given_again_as_a_keyword_is_refused_before_connecting() -> None:
    with pytest.raises(InvalidOption, match="schema= is given twice"):
        open_store("postgresql://nobody@127.0.0.1:1/x?schema=a", schema="b")
    with pytest.raises(InvalidOption, match="prefix= is given twice"):
        open_async_store("redis://127.0.0.1:1/0?prefix=a:", prefix="b:")


def test_import_reasonstate_store_needs_neither_psycopg_nor_redis() -> None:
    code = (
        "import sys, reasonstate.store as s; s.open_store('sqlite://:memory:').close(); "
        "assert not {'psycopg', 'redis'} & set(sys.modules), sorted(sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr


# -- the backends, each a real server ------------------------------------------------------------------
def _sqlite(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'sessions.db'}"


def _postgres(tmp_path: Path) -> Iterator[str]:
    import psycopg
    from psycopg import sql

    url = services.postgres_url()
    schema = f"rs_cli_{secrets.token_hex(6)}"
    yield f"{url}?schema={schema}"  # migrate creates the schema itself
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _redis(tmp_path: Path) -> Iterator[str]:
    import redis

    url = services.redis_url()
    prefix = f"rs-cli-{secrets.token_hex(6)}:"
    yield f"{url}?prefix={prefix}"
    r = redis.Redis.from_url(url)
    try:
        keys = list(r.scan_iter(match=prefix + "*", count=1000))
        if keys:
            r.delete(*keys)
    finally:
        r.close()


BACKENDS: dict[str, Callable[[Path], Iterator[str]]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    "redis": _redis,
}


@pytest.fixture(params=sorted(BACKENDS))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from BACKENDS[request.param](tmp_path)


OPTIONS: dict[str, Any] = {
    "system": SYSTEM,
    "tools": [WEATHER, CLOCK],
    "max_tokens": 4096,
    "thinking": THINKING,
}


def write_session(url: str, session_id: str, turns: int = 1) -> rs.Session:
    """A session written through ``open_store(url)``: a tool chain, then ``turns - 1`` plain answers."""
    script: list[Any] = [*three_step_chain(), *(answer(i) for i in range(1, turns))]
    with AnthropicEmulator(script) as emu, open_store(url) as store:
        session = rs.Session(emu.client(), model=MODEL, store=store, session_id=session_id, **OPTIONS)
        run_chain(session)
        for i in range(1, turns):
            session.send(f"Follow-up {i}")
        session.flush()  # the last turn's policy.decision waits for a next request: flush writes it
    return session


def test_migrate_then_list_then_inspect_and_report_a_stored_session(url: str, tmp_path: Path) -> None:
    migrated = run_cli("store", "migrate", url)
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.strip().endswith(": schema version 1")
    again = run_cli("store", "migrate", url)  # idempotent
    assert again.returncode == 0 and again.stdout == migrated.stdout

    empty = run_cli("store", "list", url)
    assert empty.returncode == 0 and empty.stdout.strip().endswith(": no sessions")

    first = write_session(url, "conv-1", turns=2)
    second = write_session(url, "conv 2#b", turns=1)  # a space and a '#' in the id: after the first '#'
    listed = run_cli("store", "list", url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].endswith(": 2 sessions")
    assert lines[1].split() == [
        "SESSION",
        "VERSION",
        "LAST",
        "ACTIVITY",
        "(UTC)",
        "CREATED",
        "(UTC)",
        "EXPIRES",
        "(UTC)",
    ]
    assert lines[2].startswith("conv 2#b ") and lines[3].startswith("conv-1 ")  # most recent first
    assert lines[3].split()[1] == str(first.version) and lines[3].endswith("never")
    as_json = json.loads(run_cli("store", "list", url, "--json").stdout)
    assert [(s["session_id"], s["version"], s["expires"]) for s in as_json] == [
        ("conv 2#b", second.version, None),
        ("conv-1", first.version, None),
    ]
    assert as_json[0]["updated"] >= as_json[1]["updated"]

    # inspect / report of URL#ID print what they print for the same session saved as a snapshot file
    snapshot = tmp_path / "conv-1.json"
    snapshot.write_text(first.snapshot().model_dump_json())
    for command in ("inspect", "report"):
        stored = run_cli(command, f"{url}#conv-1")
        saved = run_cli(command, str(snapshot))
        assert stored.returncode == 0 and saved.returncode == 0, (stored.stderr, saved.stderr)
        head, _, body = stored.stdout.partition("\n")
        assert head.split(": ", 1)[0].endswith("#conv-1")
        assert body == saved.stdout.partition("\n")[2]
    inspected = run_cli("inspect", f"{url}#conv-1").stdout
    assert "== history: 2 turns" in inspected and "== execution: 4 requests" in inspected
    assert "== history: 1 turns" in run_cli("inspect", f"{url}#conv 2#b").stdout

    missing = run_cli("inspect", f"{url}#nope")
    assert (
        missing.returncode == 1
        and "no session 'nope'" in missing.stderr
        and "Traceback" not in missing.stderr
    )
    unnamed = run_cli("report", url)
    assert unnamed.returncode == 1 and "#SESSION_ID" in unnamed.stderr and "store list" in unnamed.stderr


def test_reading_commands_never_create_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    for args in (("store", "list"), ("inspect",), ("report",)):
        target = f"sqlite:///{path}" + ("" if args[0] == "store" else "#conv")
        out = run_cli(*args, target)
        assert out.returncode == 1 and "no SQLite store at" in out.stderr and "store migrate" in out.stderr
    assert not path.exists()


def test_a_relative_sqlite_url_is_relative_to_the_working_directory(tmp_path: Path) -> None:
    out = run_cli("store", "migrate", "sqlite:///here.db", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "sqlite:///here.db: schema version 1\n"
    assert (tmp_path / "here.db").is_file()


def test_a_store_with_an_older_schema_is_read_only_after_migrate(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).close()  # an empty database: schema version 0
    out = run_cli("store", "list", f"sqlite:///{path}")
    assert out.returncode == 1 and "schema version 0" in out.stderr and "store migrate" in out.stderr
    assert run_cli("store", "migrate", f"sqlite:///{path}").returncode == 0
    assert run_cli("store", "list", f"sqlite:///{path}").stdout.endswith(": no sessions\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("store", "list", "mysql://db/app"), "a store URL is"),
        (("store", "migrate", "sessions.db"), "without a scheme"),
        (("inspect", "mysql://db/app#x"), "a store URL is"),
    ],
)
def test_a_url_of_another_form_is_reported_in_one_line(args: tuple[str, ...], message: str) -> None:
    out = run_cli(*args)
    assert out.returncode == 1 and message in out.stderr and "Traceback" not in out.stderr


def test_an_unreachable_server_is_reported_without_its_password() -> None:
    pytest.importorskip("psycopg")
    out = run_cli("store", "list", "postgresql://app:hunter2@127.0.0.1:1/app?schema=s")
    assert out.returncode == 1 and "reasonstate store list:" in out.stderr
    assert "hunter2" not in out.stderr and "Traceback" not in out.stderr
    pytest.importorskip("redis")
    out = run_cli("store", "migrate", "redis://:hunter2@127.0.0.1:1/0")
    assert out.returncode == 1 and "hunter2" not in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "args",
    [["store"], ["store", "list"], ["store", "frob", "sqlite://"], ["store", "list", "sqlite://", "--bogus"]],
)
def test_store_usage_errors_exit_two(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from reasonstate.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: reasonstate") and "error:" in err


def test_help_names_the_store_commands() -> None:
    top = run_cli("--help").stdout
    assert "store" in top
    store = run_command("store", "--help")  # the real entry point, in a subprocess
    assert store.returncode == 0 and "migrate" in store.stdout and "list" in store.stdout


def test_migrate_prints_the_url_without_its_password(tmp_path: Path) -> None:
    url = services.postgres_url()
    if "@" not in url:
        pytest.skip("the test server's URL has no user to add a password to")
    import psycopg
    from psycopg import sql

    schema = f"rs_cli_{secrets.token_hex(6)}"
    user, host = url.split("://", 1)[1].split("@", 1)
    with_password = f"postgresql://{user.split(':')[0]}:unused-secret@{host}?schema={schema}"  # trust auth
    try:
        out = run_cli("store", "migrate", with_password)
        assert out.returncode == 0, out.stderr
        assert "unused-secret" not in out.stdout and ":***@" in out.stdout
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_an_edited_row_is_refused_by_inspect(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    write_session(url, "conv", turns=2)
    db = sqlite3.connect(tmp_path / "s.db")
    with db:
        seq, body = db.execute(
            "SELECT seq, body FROM reasonstate_entries WHERE session_id = 'conv' ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        head, packed = bytes(body).split(b"\n", 1)  # a delta: its digest line, then its deflated JSON
        edited = head + b"\n" + packed[:-1] + bytes([packed[-1] ^ 0x01])
        db.execute("UPDATE reasonstate_entries SET body = ? WHERE seq = ?", (edited, seq))
    db.close()
    out = run_cli("inspect", f"{url}#conv")
    assert out.returncode == 1 and "edited" in out.stderr and "Traceback" not in out.stderr


def test_a_store_newer_than_this_reasonstate_is_refused_by_migrate_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    url = f"sqlite:///{path}"
    assert run_cli("store", "migrate", url).returncode == 0
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE reasonstate_schema SET version = 99")
    db.close()
    for args in (("store", "migrate", url), ("store", "list", url)):
        out = run_cli(*args)
        assert out.returncode == 1 and "schema version 99" in out.stderr and "Traceback" not in out.stderr
    db = sqlite3.connect(path)
    assert db.execute("SELECT version FROM reasonstate_schema").fetchall() == [(99,)]
    db.close()


def test_open_store_gives_the_url_options_to_the_server_backends() -> None:
    from reasonstate.store import AsyncRedisStore, PostgresStore, RedisStore

    pg = services.postgres_url()
    schema = f"rs_open_{secrets.token_hex(6)}"
    try:
        with open_store(f"{pg}?schema={schema}", migrate=True, pool_size=2) as store:
            assert isinstance(store, PostgresStore) and store.schema == schema and store.pool_size == 2
            assert store.migrate() == 1
    finally:
        import psycopg
        from psycopg import sql

        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    url = services.redis_url()
    prefix = f"rs-open-{secrets.token_hex(6)}:"
    try:
        with open_store(f"{url}?prefix={prefix}") as store:
            assert isinstance(store, RedisStore) and store.prefix == prefix and store.migrate() == 1

        async def main() -> str:
            astore = open_async_store(f"{url}?prefix={prefix}", ttl=60)
            assert isinstance(astore, AsyncRedisStore) and astore.ttl == 60
            async with astore:
                return astore.prefix

        assert asyncio.run(main()) == prefix
    finally:
        import redis

        r = redis.Redis.from_url(url)
        keys = list(r.scan_iter(match=prefix + "*"))
        if keys:
            r.delete(*keys)
        r.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sqlite:////abs/s.db", "sqlite:////abs/s.db"),
        ("sqlite:///s.db#conv", "sqlite:///s.db#conv"),
        ("postgresql://app:pw@db/app?schema=s", "postgresql://app:***@db/app?schema=s"),
        ("redis://db/0?password=pw&prefix=p:", "redis://db/0?password=***&prefix=p:"),
        ("rediss://:pw@db/0#conv", "rediss://:***@db/0#conv"),
    ],
)
def test_printed_urls_hide_their_password(url: str, shown: str) -> None:
    from reasonstate.cli import _shown

    assert _shown(url) == shown
