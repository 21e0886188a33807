"""The store contract on Redis: the real server on this machine (``tests/store/services.py``), each test
under its own random key prefix, its keys deleted after. No fakeredis, no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

redis = pytest.importorskip("redis")

from reasonstate.errors import SessionConflict, StoreError  # noqa: E402
from reasonstate.store import SCHEMA_VERSION, AsyncStore  # noqa: E402
from reasonstate.store.redis import AsyncRedisStore, RedisStore  # noqa: E402
from tests.store import services  # noqa: E402
from tests.store._processes import worker_context  # noqa: E402
from tests.store._racer import race  # noqa: E402
from tests.store.conformance import AsyncConformance, Conformance, c, d  # noqa: E402


@pytest.fixture
def url() -> str:
    return services.redis_url()


@pytest.fixture
def prefix(url: str) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted after the test."""
    p = f"rs-test-{secrets.token_hex(6)}:"
    yield p
    r = redis.Redis.from_url(url)
    try:
        keys = list(r.scan_iter(match=p + "*", count=1000))
        if keys:
            r.delete(*keys)
    finally:
        r.close()


@pytest.fixture
def raw(url: str) -> Iterator[Any]:
    """A plain redis-py client on the same server, to look at the keys as stored."""
    r = redis.Redis.from_url(url)
    yield r
    r.close()


@pytest.fixture
def store(url: str, prefix: str) -> Iterator[RedisStore]:
    s = RedisStore(url, prefix=prefix)
    yield s
    s.close()


@pytest.fixture
def reopen(url: str, prefix: str) -> Callable[..., RedisStore]:
    return lambda **options: RedisStore(url, prefix=prefix, **options)


@pytest.fixture
def astore_factory(url: str, prefix: str) -> Callable[..., AsyncStore]:
    return lambda **options: AsyncRedisStore(url, prefix=prefix, **options)


class TestRedis(Conformance):
    pass


class TestAsyncRedis(AsyncConformance):
    pass


# -- Redis-specific ------------------------------------------------------------------------------------------


def test_the_keys_are_the_documented_ones(store: RedisStore, prefix: str, raw: Any) -> None:
    store.append("k", 0, [c(1, b"\x00one"), d(2, b"two\x00")])
    p = prefix.encode()
    assert raw.get(p + b"schema") == str(SCHEMA_VERSION).encode()
    assert raw.type(p + b"s:k") == b"hash" and raw.type(p + b"e:k") == b"hash"
    assert raw.hgetall(p + b"e:k") == {b"1": b"c\x00one", b"2": b"dtwo\x00"}
    meta = raw.hgetall(p + b"s:k")
    assert (meta[b"version"], meta[b"checkpoint"], meta[b"expires"]) == (b"2", b"1", b"0")
    assert raw.zrange(p + b"sessions", 0, -1) == [b"k"]
    with store.lease("k", ttl=5) as lease:
        assert raw.get(p + b"l:k") == lease.holder.encode()
    assert raw.exists(p + b"l:k") == 0
    store.delete("k")
    assert sorted(raw.scan_iter(match=p + b"*")) == [p + b"schema"]


def test_keys_carry_the_ttl_and_lose_it_without_one(
    reopen: Callable[..., RedisStore], prefix: str, raw: Any
) -> None:
    p = prefix.encode()
    short, forever = reopen(ttl=30), reopen()
    try:
        short.append("t", 0, [c(1)])
        for key in (p + b"s:t", p + b"e:t"):
            assert 25_000 < raw.pttl(key) <= 30_000
        info = short.sessions()[0]
        assert info.expires is not None and 29 < info.expires - info.updated <= 30.001
        forever.append("t", 1, [d(2)])  # a store without ttl makes the session permanent
        assert raw.pttl(p + b"s:t") == -1 and raw.pttl(p + b"e:t") == -1
        assert forever.sessions()[0].expires is None
        short.append("t", 2, [d(3)])
        assert 25_000 < raw.pttl(p + b"e:t") <= 30_000
    finally:
        short.close()
        forever.close()


def test_an_expired_session_leaves_the_index(
    reopen: Callable[..., RedisStore], prefix: str, raw: Any
) -> None:
    p = prefix.encode()
    short = reopen(ttl=0.2)
    try:
        short.append("gone", 0, [c(1)])
        time.sleep(0.4)
        assert raw.exists(p + b"s:gone", p + b"e:gone") == 0  # Redis expired the keys itself
        assert raw.zscore(p + b"sessions", b"gone") is not None  # the index does not expire members
        assert short.sweep() == 0
        assert raw.zscore(p + b"sessions", b"gone") is None
        short.append("gone", 0, [c(1)])
        time.sleep(0.4)
        assert short.sessions() == []
        assert raw.zcard(p + b"sessions") == 0
    finally:
        short.close()


def test_a_long_run_of_deltas_reads_back_in_one_piece(store: RedisStore) -> None:
    # more entries than Lua's unpack() takes at once: the scripts work in chunks
    store.append("long", 0, [c(1), *(d(i) for i in range(2, 3001))])
    store.append("long", 3000, [d(3001, b"\x00" * 10)])
    got = store.read("long")
    assert [e.seq for e in got] == list(range(1, 3002))
    assert got[-1] == d(3001, b"\x00" * 10) and got[1234] == d(1235)


def test_odd_session_ids_are_kept_apart(store: RedisStore) -> None:
    ids = ["a:b", "a", "e:a", "s:a", "sessions", "ü\u2603", "\ud800", " ", "*?[x]"]
    for i, sid in enumerate(ids):
        store.append(sid, 0, [c(1, str(i).encode())])
    assert {i.session_id for i in store.sessions()} == set(ids)
    for i, sid in enumerate(ids):
        assert store.read(sid) == [c(1, str(i).encode())]
    assert store.delete("a") and store.read("a:b") == [c(1, b"0")]


def test_a_retried_append_recognises_itself(store: RedisStore) -> None:
    """The connection drops after Redis ran an append but before its reply came back: the script is sent
    once more with the same token and reports success, not a conflict with the writer's own entries."""
    store.append("r", 0, [c(1)])
    keys, args = store._append_call("r", 1, [d(2), d(3)], None)
    assert store._s_append(keys=keys, args=args) == [1, 3]
    assert store._s_append(keys=keys, args=args) == [2, 3]  # the replay
    store._appended("r", 1, [2, 3])
    keys, args = store._append_call("r", 1, [d(2), d(3)], None)  # another writer: a new token
    assert store._s_append(keys=keys, args=args) == [0, 3]
    assert store.read("r") == [c(1), d(2), d(3)]


def test_a_newer_schema_is_refused_and_left_alone(url: str, prefix: str, raw: Any) -> None:
    """google/adk-python#3272: a schema upgrade broke existing data. A newer schema is refused, untouched."""
    s = RedisStore(url, prefix=prefix)
    s.append("kept", 0, [c(1)])
    s.close()
    raw.set(prefix + "schema", str(SCHEMA_VERSION + 1))
    with pytest.raises(StoreError, match="newer"):
        RedisStore(url, prefix=prefix)
    with pytest.raises(StoreError, match="reasonstate store migrate"):
        RedisStore(url, prefix=prefix, migrate=False)
    assert raw.get(prefix + "schema") == str(SCHEMA_VERSION + 1).encode()
    assert raw.hgetall(prefix + "e:kept") == {b"1": b"c" + c(1).body}


def test_an_unmigrated_prefix_is_refused_without_migrate(url: str, prefix: str, raw: Any) -> None:
    with pytest.raises(StoreError, match="reasonstate store migrate"):
        RedisStore(url, prefix=prefix, migrate=False)
    assert raw.exists(prefix + "schema") == 0  # refused, not created
    RedisStore(url, prefix=prefix).close()
    RedisStore(url, prefix=prefix, migrate=False).close()

    async def main() -> None:
        s = AsyncRedisStore(url, prefix=prefix + "other:", migrate=False)
        try:
            with pytest.raises(StoreError, match="reasonstate store migrate"):
                await s.version("x")
        finally:
            await s.close()

    asyncio.run(main())


def test_redis_errors_become_store_errors_and_write_nothing(store: RedisStore, prefix: str, raw: Any) -> None:
    store.append("ok", 0, [c(1)])
    raw.set(prefix + "s:bad", "not a hash")  # a key of the wrong type where the metadata goes
    with pytest.raises(StoreError, match="WRONGTYPE") as info:
        store.append("bad", 0, [c(1)])
    assert not isinstance(info.value, SessionConflict)
    with pytest.raises(StoreError):
        store.read("bad")
    assert raw.exists(prefix + "e:bad") == 0
    assert store.read("ok") == [c(1)]


def test_a_script_failing_half_way_leaves_the_last_complete_append(
    store: RedisStore, prefix: str, raw: Any
) -> None:
    """Redis does not undo a script that fails part-way: the append writes the metadata (what makes its
    entries visible) after every command that can fail, so a failure leaves the previous version."""
    store.append("half", 0, [c(1)])
    raw.delete(prefix + "sessions")
    raw.set(prefix + "sessions", "not a sorted set")  # ZADD fails after the entries were written
    with pytest.raises(StoreError, match="WRONGTYPE"):
        store.append("half", 1, [d(2, b"lost"), d(3)])
    assert store.version("half") == 1 and store.read("half") == [c(1)]
    raw.delete(prefix + "sessions")
    store.append("half", 1, [d(2)])  # the next append overwrites what the failed one left past the version
    assert store.read("half") == [c(1), d(2)]
    assert raw.hlen(prefix + "e:half") == 3  # entry 3 of the failed append: there, never read


class _DroppingProxy:
    """A TCP proxy in front of the real server that can close a connection after Redis answered a request
    but before the answer reaches the client: the reply lost with its connection, as when a network drops."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.listener.getsockname()[1]}"))
        self.armed: bytes | None = None
        self.dropped = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_the_reply_to(self, command: bytes) -> None:
        self.armed = command

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            dropping = threading.Event()
            threading.Thread(target=self._requests, args=(client, upstream, dropping), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client, dropping), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, dropping: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(1 << 16):
                with self._lock:
                    if self.armed is not None and self.armed in data.upper():
                        self.armed = None
                        dropping.set()  # before Redis can answer
                upstream.sendall(data)
        upstream.close()

    def _replies(self, upstream: socket.socket, client: socket.socket, dropping: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(1 << 16):
                if dropping.is_set():
                    self.dropped += 1
                    client.shutdown(socket.SHUT_RDWR)
                    break
                client.sendall(data)
        client.close()
        upstream.close()

    def close(self) -> None:
        self.listener.close()


def test_a_reply_lost_with_its_connection_is_not_a_conflict(url: str, prefix: str) -> None:
    """The append ran on the server, then the connection dropped before its reply: the store sends the
    script once more on a new connection, and the script recognises its own append (its token) instead of
    calling the writer's own entries a conflict."""
    proxy = _DroppingProxy(url)
    s = RedisStore(proxy.url, prefix=prefix)
    try:
        s.append("lost", 0, [c(1)])
        proxy.drop_the_reply_to(b"EVALSHA")
        assert s.append("lost", 1, [d(2), d(3)]) == 3
        assert proxy.dropped == 1
        assert s.read("lost") == [c(1), d(2), d(3)]
        with pytest.raises(SessionConflict):  # another writer's append on 1 still conflicts
            s.append("lost", 1, [d(2), d(3)])
        proxy.drop_the_reply_to(b"EVALSHA")
        with pytest.raises(StoreError, match="not reachable"):  # a delete is not sent twice
            s.delete("lost")
        assert proxy.dropped == 2
    finally:
        s.close()
        proxy.close()


def test_an_unreachable_server_is_a_store_error_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match="not reachable"):
        RedisStore("redis://127.0.0.1:1/0", timeout=2)
    with pytest.raises(StoreError, match="not reachable") as info:
        RedisStore("redis://:secret@127.0.0.1:1/0?password=secret", migrate=False)
    assert "secret" not in str(info.value) and "127.0.0.1:1" in str(info.value)

    async def main() -> None:
        s = AsyncRedisStore("redis://127.0.0.1:1/0")
        try:
            with pytest.raises(StoreError, match="not reachable") as info:
                await s.append("s", 0, [c(1)])
            assert "secret" not in str(info.value)
        finally:
            await s.close()

    asyncio.run(main())
    assert time.monotonic() - started < 2


def test_a_server_that_never_answers_times_out() -> None:
    """A socket that accepts and never replies (a hung server): the store gives up after ``timeout=``."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(StoreError, match="timed out"):
            RedisStore(f"redis://127.0.0.1:{port}/0", timeout=0.3)
        assert time.monotonic() - started < 2


def test_racing_processes_on_one_version_one_wins(store: RedisStore, url: str, prefix: str) -> None:
    """Separate processes (forked from a clean forkserver, tests/store/_processes.py: nothing shared but the
    server) append on one version at once."""
    store.append("race", 0, [c(1)])
    ctx = worker_context()
    n = 4
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    args = ("reasonstate.store.redis:RedisStore", url, {"prefix": prefix})
    procs = [ctx.Process(target=race, args=(*args, i, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=180) for _ in range(n))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    winners = [i for i, o in outcomes.items() if o == "won"]
    assert len(winners) == 1
    assert sorted(o for o in outcomes.values() if o != "won") == ["conflict 3"] * (n - 1)
    assert store.read("race") == [c(1), d(2, f"process {winners[0]}".encode()), d(3)]


def test_a_store_is_shared_by_threads(store: RedisStore) -> None:
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for k in range(20):
                sid = f"t{t}"
                store.append(sid, k, [c(1) if k == 0 else d(k + 1)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted((i.session_id, i.version) for i in store.sessions()) == [(f"t{t}", 20) for t in range(8)]


def test_async_store_shares_the_sync_stores_keys(url: str, prefix: str, store: RedisStore) -> None:
    store.append("both", 0, [c(1)])

    async def main() -> None:
        s = AsyncRedisStore(url, prefix=prefix, ttl=30)
        try:
            assert await s.read("both") == [c(1)]
            await s.append("both", 1, [d(2)])
            [info] = await s.sessions()
            assert info.expires is not None
            assert await s.sweep() == 0
        finally:
            await s.close()

    asyncio.run(main())
    assert store.read("both") == [c(1), d(2)]
    assert store.version("both") == 2


def test_import_reasonstate_store_needs_no_redis() -> None:
    code = (
        "import sys; import reasonstate, reasonstate.store; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_entries_of_unknown_kind_are_refused(store: RedisStore, prefix: str, raw: Any) -> None:
    store.append("x", 0, [c(1)])
    raw.hset(prefix + "e:x", "1", b"zsomething")
    with pytest.raises(StoreError, match="no kind"):
        store.read("x")
