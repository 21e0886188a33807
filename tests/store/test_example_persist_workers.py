"""examples/persist_workers.py runs as written: worker processes continue each other's sessions from one
store, with leases or with compare-and-set alone, on a SQLite file and on the real PostgreSQL and Redis
servers (tests/store/services.py); every session ends with its turns in order, none lost or repeated."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store import services

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "examples" / "persist_workers.py"


def run_example(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, cwd=cwd, timeout=600, env=env
    )


def check(out: subprocess.CompletedProcess[str], sessions: int, turns: int, workers: int) -> int:
    """The run succeeded with every turn served once; how many conflicts it retried."""
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert f": {sessions} sessions x {turns} turns served by {workers} workers" in lines[0]
    per_worker = re.search(r"turns per worker: \[([\d, ]+)\]", out.stdout)
    assert per_worker is not None and sum(map(int, per_worker.group(1).split(","))) == sessions * turns
    assert "turns lost: 0; sessions not whole: 0" in out.stdout
    assert lines[-1] == f"every session holds its {turns} turns in order"
    conflicts = re.search(r"conflicts retried: (\d+)", out.stdout)
    assert conflicts is not None
    return int(conflicts.group(1))


def test_the_example_runs_as_written_on_a_temporary_sqlite_file() -> None:
    assert check(run_example(), sessions=6, turns=3, workers=4) == 0  # leases: no conflict


def test_without_leases_conflicts_are_retried_and_nothing_forks(tmp_path: Path) -> None:
    out = run_example("sqlite:///shared.db", "--no-lease", "--workers", "4", "--sessions", "2", cwd=tmp_path)
    check(out, sessions=2, turns=3, workers=4)
    assert (tmp_path / "shared.db").is_file()  # a relative URL: in the working directory
    # the store the example left is what the CLI lists and inspects
    listed = subprocess.run(
        [sys.executable, "-m", "reasonstate.cli", "store", "list", "sqlite:///shared.db"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == "sqlite:///shared.db: 2 sessions"
    assert {line.split()[0] for line in listed.stdout.splitlines()[2:]} == {"conv-00", "conv-01"}


@pytest.fixture
def postgres() -> Iterator[str]:
    import psycopg
    from psycopg import sql

    url = services.postgres_url()
    schema = f"rs_example_{secrets.token_hex(6)}"
    yield f"{url}?schema={schema}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def redis_url() -> Iterator[str]:
    import redis

    url = services.redis_url()
    prefix = f"rs-example-{secrets.token_hex(6)}:"
    yield f"{url}?prefix={prefix}"
    r = redis.Redis.from_url(url)
    try:
        keys = list(r.scan_iter(match=prefix + "*", count=1000))
        if keys:
            r.delete(*keys)
    finally:
        r.close()


def test_the_example_on_postgresql_without_leases(postgres: str) -> None:
    check(run_example(postgres, "--no-lease", "--sessions", "3"), sessions=3, turns=3, workers=4)


def test_the_example_on_redis_with_leases(redis_url: str) -> None:
    assert check(run_example(redis_url, "--sessions", "3"), sessions=3, turns=3, workers=4) == 0
