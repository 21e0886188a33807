"""``benchmarks/store.py`` (issue 22's figures, run by ``make bench``) runs and prints every figure the issue
names: a short run of it, as ``make bench`` starts it. (It once failed on a changed helper signature and
nobody saw it until a bench run; this keeps such a break in the test suite.) The figures of a run this short
mean nothing; only that each is there, and that the exit status is 1 exactly when a target was missed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.store import services

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long
def test_the_store_benchmark_prints_every_figure_in_a_short_run() -> None:
    services.postgres_url()  # (skips, or fails under REASONSTATE_REQUIRE_SERVICES=1, without the servers)
    services.redis_url()
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/store.py",
            "--sizes",
            "1,3",
            "--repeats",
            "3",
            "--sends",
            "3",
            "--fleet-seconds",
            "0.1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out, err = done.stdout, done.stderr
    assert "Traceback" not in err, err
    assert done.returncode in (0, 1), err
    assert (done.returncode == 1) == ("MISSED:" in err), err
    for heading in (
        "3. commits per second, 8 worker processes",
        "1. per-commit store cost",
        "2. session.send with SQLiteStore",
        "4. bytes stored per turn over payload bytes received",
    ):
        assert heading in out, out
    for backend in ("SQLite (file, WAL)", "PostgreSQL", "Redis"):
        assert f"{backend}, wall" in out and f"{backend}, CPU" in out, out  # per-commit, both clocks
        assert any(line.startswith(backend) and "commits" not in line for line in out.splitlines())
    for clock in ("wall ", "CPU, both processes", "CPU, this process"):
        assert any(line.startswith(clock) for line in out.splitlines()), out
    assert "stored/received" in out and "3/1" in out, out
