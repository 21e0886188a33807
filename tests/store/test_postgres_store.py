"""The store contract on PostgreSQL: each test in its own fresh schema on the real server, dropped after.

The server is ``services.postgres_url()`` (``REASONSTATE_TEST_POSTGRES``, default
``postgresql://postgres@127.0.0.1:5432/test``); no fakes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from reasonstate.store import AsyncPostgresStore, AsyncStore, PostgresStore
from tests.store import services
from tests.store.conformance import AsyncConformance, Conformance


@pytest.fixture
def url() -> str:
    return services.postgres_url()


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    """A fresh schema of a random name, dropped (with everything in it) after the test."""
    name = f"rs_test_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    _drop(url, name)


@pytest.fixture
def store(url: str, schema: str) -> Iterator[PostgresStore]:
    s = PostgresStore(url, schema=schema)
    yield s
    s.close()


@pytest.fixture
def reopen(url: str, schema: str) -> Callable[..., PostgresStore]:
    return lambda **options: PostgresStore(url, schema=schema, **options)


@pytest.fixture
def astore_factory(url: str, schema: str) -> Callable[..., AsyncStore]:
    return lambda **options: AsyncPostgresStore(url, schema=schema, **options)


class TestPostgres(Conformance):
    pass


class TestAsyncPostgres(AsyncConformance):
    pass
