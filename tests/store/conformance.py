"""The store contract (reasonstate/store/_base.py), once for every backend.

A backend's test module subclasses :class:`Conformance` (and :class:`AsyncConformance`) and gives two
fixtures: ``store`` (a fresh, isolated store: its own file, schema or key prefix, cleaned up after) and
``reopen`` (a callable opening another handle on the very same storage, with keyword options such as
``ttl=`` or ``encryption_key=``). Every test runs against the real server; none fakes one.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from reasonstate.errors import InvalidOption, SessionConflict, StoreError
from reasonstate.store import SCHEMA_VERSION, AsyncStore, Entry, Store

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))


def d(seq: int, body: bytes = b"", kind: str = "delta") -> Entry:
    return Entry(seq, kind, body or f"delta {seq}".encode())


def c(seq: int, body: bytes = b"") -> Entry:
    return Entry(seq, "checkpoint", body or f"checkpoint {seq}".encode())


class Conformance:
    """Every invariant of a synchronous :class:`Store`."""

    def test_a_first_append_creates_the_session(self, store: Store) -> None:
        assert store.version("s1") == 0
        assert store.read("s1") == []
        assert store.append("s1", 0, [c(1), d(2)]) == 2
        assert store.version("s1") == 2
        assert store.read("s1") == [c(1), d(2)]

    def test_an_append_on_a_stale_version_writes_nothing(self, store: Store) -> None:
        store.append("s1", 0, [c(1)])
        store.append("s1", 1, [d(2)])
        with pytest.raises(SessionConflict) as info:
            store.append("s1", 1, [d(2, b"the other worker's"), d(3)])
        assert (info.value.expected, info.value.found, info.value.session_id) == (1, 2, "s1")
        assert store.read("s1") == [c(1), d(2)]
        with pytest.raises(SessionConflict) as info:
            store.append("s1", 0, [c(1)])  # creating a session that exists
        assert info.value.found == 2
        with pytest.raises(SessionConflict):
            store.append("s1", 5, [d(6)])  # a version from the future
        assert store.version("s1") == 2

    def test_racing_writers_on_one_version_one_wins(self, store: Store, reopen: Callable[..., Any]) -> None:
        store.append("race", 0, [c(1)])
        handles = [reopen() for _ in range(6)]
        wins: list[int] = []
        conflicts: list[int] = []
        barrier = threading.Barrier(len(handles))

        def write(i: int) -> None:
            barrier.wait()
            try:
                handles[i].append("race", 1, [d(2, f"writer {i}".encode())])
                wins.append(i)
            except SessionConflict:
                conflicts.append(i)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(len(handles))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for h in handles:
            h.close()
        assert len(wins) == 1 and len(conflicts) == len(handles) - 1
        assert store.read("race") == [c(1), d(2, f"writer {wins[0]}".encode())]

    def test_reads_start_at_the_newest_checkpoint(self, store: Store) -> None:
        store.append("s", 0, [c(1), d(2)])
        store.append("s", 2, [d(3)])
        store.append("s", 3, [c(4), d(5)])
        store.append("s", 5, [d(6)])
        assert store.read("s") == [c(4), d(5), d(6)]

    def test_bodies_come_back_byte_for_byte(self, store: Store) -> None:
        odd = bytes(range(256)) * 3 + b"\x00\xff\xfe not utf-8 \xc3\x28"
        big = os.urandom(1 << 20)
        store.append("bytes", 0, [c(1, odd), d(2, big), d(3, b"\x00")])
        assert [e.body for e in store.read("bytes")] == [odd, big, b"\x00"]

    def test_entries_must_be_numbered_from_the_version(self, store: Store) -> None:
        with pytest.raises(ValueError):
            store.append("s", 0, [d(2)])
        with pytest.raises(ValueError):
            store.append("s", 0, [c(1), d(3)])
        with pytest.raises(ValueError):
            store.append("s", 0, [])
        with pytest.raises(InvalidOption):
            store.append("", 0, [c(1)])
        assert store.version("s") == 0

    def test_sessions_are_isolated_listed_and_deleted(self, store: Store) -> None:
        store.append("a", 0, [c(1)])
        time.sleep(0.01)
        store.append("b", 0, [c(1), d(2)])
        time.sleep(0.01)
        store.append("a", 1, [d(2), d(3)])
        infos = store.sessions()
        assert [(i.session_id, i.version) for i in infos] == [("a", 3), ("b", 2)]
        assert all(i.created <= i.updated and i.expires is None for i in infos)
        assert infos[0].updated >= infos[1].updated
        assert store.delete("a") is True
        assert store.delete("a") is False
        assert store.version("a") == 0 and store.read("a") == []
        assert [i.session_id for i in store.sessions()] == ["b"]
        assert store.append("a", 0, [c(1, b"a new life")]) == 1

    def test_a_session_expires_after_its_ttl(self, store: Store, reopen: Callable[..., Any]) -> None:
        short = reopen(ttl=0.4)
        try:
            short.append("t", 0, [c(1)])
            short.append("t", 1, [d(2)])
            assert short.version("t") == 2
            assert [i.expires is not None for i in short.sessions() if i.session_id == "t"] == [True]
            time.sleep(0.7)
            assert short.version("t") == 0
            assert short.read("t") == []
            assert "t" not in [i.session_id for i in short.sessions()]
            short.sweep()
            assert short.append("t", 0, [c(1, b"again")]) == 1
            assert short.read("t") == [c(1, b"again")]
        finally:
            short.close()

    def test_a_lease_keeps_a_second_worker_out(self, store: Store, reopen: Callable[..., Any]) -> None:
        other = reopen()
        try:
            with store.lease("l", ttl=5) as lease:
                assert lease.session_id == "l" and lease.expires > time.time()
                with pytest.raises(StoreError), other.lease("l", ttl=5):
                    pass
            with other.lease("l", ttl=5):  # released on leaving the block
                pass
            with store.lease("l", ttl=0.3), other.lease("l", ttl=5, wait=2.0):
                pass  # the first lease ran out while the second waited
        finally:
            other.close()

    def test_a_lease_taken_before_the_first_append_survives_it(
        self, store: Store, reopen: Callable[..., Any]
    ) -> None:
        other = reopen()
        try:
            with store.lease("new", ttl=5):
                store.append("new", 0, [c(1)])
                store.sweep()
                with pytest.raises(StoreError), other.lease("new", ttl=5):
                    pass
        finally:
            other.close()

    def test_racing_creators_one_wins(self, store: Store, reopen: Callable[..., Any]) -> None:
        handles = [reopen() for _ in range(4)]
        wins: list[int] = []
        barrier = threading.Barrier(len(handles))

        def create(i: int) -> None:
            barrier.wait()
            try:
                handles[i].append("fresh", 0, [c(1, f"creator {i}".encode())])
                wins.append(i)
            except SessionConflict:
                pass

        threads = [threading.Thread(target=create, args=(i,)) for i in range(len(handles))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for h in handles:
            h.close()
        assert len(wins) == 1
        assert store.read("fresh") == [c(1, f"creator {wins[0]}".encode())]

    def test_encrypted_bodies_need_their_key_and_a_wrong_key_deletes_nothing(
        self, store: Store, reopen: Callable[..., Any]
    ) -> None:
        """openai/openai-agents-python#5005: an encrypted session given the wrong key deleted its data."""
        a = reopen(encryption_key=KEY_A)
        b = reopen(encryption_key=KEY_B)
        try:
            a.append("secret", 0, [c(1, b'{"signature":"EqQBCkgIAR"}'), d(2)])
            assert a.read("secret") == [c(1, b'{"signature":"EqQBCkgIAR"}'), d(2)]
            with pytest.raises(StoreError, match="encryption key"):
                b.read("secret")
            with pytest.raises(StoreError, match="encrypt"):
                store.read("secret")  # no key at all
            assert b.version("secret") == 2 and a.read("secret")[1] == d(2)
            raw = store._read("secret")  # as stored: sealed, the plain text nowhere
            assert all(b"EqQBCkgIAR" not in e.body and b"delta" not in e.body for e in raw)
        finally:
            a.close()
            b.close()
        with pytest.raises(InvalidOption):
            reopen(encryption_key=b"short")

    def test_migrate_is_idempotent(self, store: Store) -> None:
        store.append("m", 0, [c(1)])
        assert store.migrate() == SCHEMA_VERSION
        assert store.migrate() == SCHEMA_VERSION
        assert store.read("m") == [c(1)]


class AsyncConformance:
    """The same contract for an :class:`AsyncStore` (fixture ``astore_factory``: a zero-argument callable
    returning a fresh async store on the same isolated storage as ``store``; the test closes it)."""

    def test_async_append_read_conflict_lease(self, astore_factory: Callable[..., AsyncStore]) -> None:
        async def main() -> None:
            s = astore_factory()
            try:
                assert await s.append("as", 0, [c(1), d(2)]) == 2
                assert await s.read("as") == [c(1), d(2)]
                with pytest.raises(SessionConflict):
                    await s.append("as", 1, [d(2)])
                assert await s.version("as") == 2
                async with s.lease("as", ttl=5):
                    with pytest.raises(StoreError):
                        async with s.lease("as", ttl=5):
                            pass
                assert [i.session_id for i in await s.sessions()] == ["as"]
                assert await s.migrate() == SCHEMA_VERSION
                assert await s.delete("as") is True
                assert await s.read("as") == []
            finally:
                await s.close()

        asyncio.run(main())

    def test_async_racing_writers_one_wins(self, astore_factory: Callable[..., AsyncStore]) -> None:
        async def main() -> None:
            s = astore_factory()
            try:
                await s.append("r", 0, [c(1)])

                async def write(i: int) -> bool:
                    try:
                        await s.append("r", 1, [d(2, f"w{i}".encode())])
                        return True
                    except SessionConflict:
                        return False

                won = await asyncio.gather(*(write(i) for i in range(8)))
                assert sum(won) == 1
                assert await s.version("r") == 2
            finally:
                await s.close()

        asyncio.run(main())
