"""The real servers the store's tests use: PostgreSQL and Redis on this machine.

``REASONSTATE_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``) and
``REASONSTATE_TEST_REDIS`` (default ``redis://127.0.0.1:6379/0``) name them. Where no server answers (a
laptop without one) the tests that need it are skipped with the reason; with
``REASONSTATE_REQUIRE_SERVICES=1`` (``.ci/run`` sets it) a missing server fails instead. No fakes.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

POSTGRES_URL = os.environ.get("REASONSTATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("REASONSTATE_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _answers(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def _need(url: str, default_port: int, what: str) -> str:
    if _answers(url, default_port):
        return url
    why = f"no {what} server answers at {url}"
    if os.environ.get("REASONSTATE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{why}, and REASONSTATE_REQUIRE_SERVICES=1 requires it")
    pytest.skip(f"{why} (set REASONSTATE_TEST_{what.upper()} to use another)")


def postgres_url() -> str:
    """The PostgreSQL URL, or skip (fail under REASONSTATE_REQUIRE_SERVICES=1) when none answers."""
    return _need(POSTGRES_URL, 5432, "postgres")


def redis_url() -> str:
    """The Redis URL, or skip (fail under REASONSTATE_REQUIRE_SERVICES=1) when none answers."""
    return _need(REDIS_URL, 6379, "redis")
