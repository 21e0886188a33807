"""The store's contract: per session, a log of entries appended under compare-and-set.

A session's log is a sequence of :class:`Entry` rows keyed by ``(session_id, seq)``, ``seq`` counting
from 1. Its **version** is the ``seq`` of its newest entry (0: no such session). An entry is either a
``checkpoint`` (a whole session, in the snapshot's form) or a ``delta`` (what one commit changed, applied
to the state the entries before it build); a session is rebuilt from its newest checkpoint and the deltas
after it, so a reader only ever reads from the newest checkpoint on.

Invariants every backend keeps (``tests/store/conformance.py`` holds each one of them, on a real server):

- **compare-and-set**: :meth:`Store.append` writes its entries only when the session's version is the one
  the caller built on (``expected``), in one transaction; otherwise it writes nothing and raises
  :class:`~reasonstate.errors.SessionConflict` naming the version found. Two writers never both succeed
  on the same version, so a history never forks.
- **nothing earlier is rewritten**: an append only adds rows after the version; the work it does does not
  grow with the log.
- **all or nothing**: a reader sees every entry of an append or none (a process killed mid-append
  leaves the store at its last complete append).
- **bytes kept exactly**: an entry's body reads back byte for byte; with ``encryption_key=`` the body is
  sealed with AES-GCM (the session id, ``seq`` and kind are its associated data, so a row moved to
  another place does not open), and a wrong key is a :class:`~reasonstate.errors.StoreError` that deletes
  nothing.
- **expiry**: a session with ``ttl`` is gone ``ttl`` seconds after its last append (Redis expires keys
  natively; SQL stores treat it as absent at once and delete it on :meth:`Store.sweep`).

The backends implement the underscored primitives; the public methods (encryption, leases as context
managers, export and import) are written once here.
"""

from __future__ import annotations

import abc
import contextlib
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from reasonstate.errors import InvalidOption, StoreError
from reasonstate.journal import CHECKPOINT, DELTA, Entry, checkpoint_body, snapshot_of

if TYPE_CHECKING:
    from reasonstate.snapshot import SessionSnapshot

__all__ = [
    "CHECKPOINT",
    "DELTA",
    "SCHEMA_VERSION",
    "AsyncStore",
    "Entry",
    "Lease",
    "SessionInfo",
    "Store",
]

#: the schema every backend creates and :meth:`Store.migrate` brings older ones to (docs/concepts/store.md)
SCHEMA_VERSION = 1

#: the first bytes of a sealed (encrypted) body: a version tag, then the 12-byte nonce and the ciphertext
_SEALED = b"rs-aesgcm-1:"


@attrs.frozen(slots=True)
class SessionInfo:
    """A stored session: its id, version (its newest entry's ``seq``), when it was created and last
    appended to (Unix seconds), and when it expires (None: never)."""

    session_id: str
    version: int
    created: float
    updated: float
    expires: float | None = None


@attrs.frozen(slots=True)
class Lease:
    """An exclusive turn on a session, held by ``holder`` until ``expires`` (Unix seconds) unless released.
    A lease is advisory: it keeps cooperating workers apart; compare-and-set still guards every append."""

    session_id: str
    holder: str
    expires: float


def check_session_id(session_id: Any) -> str:
    """``session_id`` when it is a non-empty string of at most 256 characters with no NUL; else
    :class:`~reasonstate.errors.InvalidOption`."""
    if not isinstance(session_id, str) or not session_id or len(session_id) > 256 or "\0" in session_id:
        raise InvalidOption(
            "a session id is a non-empty string of at most 256 characters without NUL, "
            f"got {session_id!r:.80}"
        )
    return session_id


def check_entries(expected: int, entries: Sequence[Entry]) -> None:
    """:class:`ValueError` unless ``entries`` are one or more, numbered ``expected + 1`` on."""
    if type(expected) is not int or expected < 0:
        raise ValueError(f"expected is the version appended on (an int >= 0), got {expected!r}")
    if not entries:
        raise ValueError("an append writes at least one entry")
    for i, e in enumerate(entries):
        if e.seq != expected + 1 + i:
            raise ValueError(
                f"entry {i} has seq {e.seq}; the append on {expected} numbers them from {expected + 1}"
            )


def check_ttl(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise InvalidOption(f"ttl= is a number of seconds > 0 (or None: never expires), got {ttl!r}")
    return float(ttl)


class _Sealer:
    """AES-GCM over entry bodies (``cryptography``, the ``reasonstate[crypto]`` extra)."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) not in (16, 24, 32):
            raise InvalidOption("encryption_key= is 16, 24 or 32 random bytes (AES-128/192/256-GCM)")
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:  # pragma: no cover - the extra is installed in dev
            raise InvalidOption(
                "encryption_key= needs the cryptography package: pip install 'reasonstate[crypto]'"
            ) from exc
        self._aead = AESGCM(key)

    @staticmethod
    def _aad(session_id: str, seq: int, kind: str) -> bytes:
        return f"{session_id}\0{seq}\0{kind}".encode()

    def seal(self, session_id: str, e: Entry) -> bytes:
        nonce = os.urandom(12)
        return _SEALED + nonce + self._aead.encrypt(nonce, e.body, self._aad(session_id, e.seq, e.kind))

    def open(self, session_id: str, seq: int, kind: str, body: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        if not body.startswith(_SEALED):
            raise StoreError(
                f"session {session_id!r} entry {seq} is not encrypted, but this store has an encryption key"
            )
        nonce, sealed = body[len(_SEALED) : len(_SEALED) + 12], body[len(_SEALED) + 12 :]
        try:
            return bytes(self._aead.decrypt(nonce, sealed, self._aad(session_id, seq, kind)))
        except InvalidTag:
            raise StoreError(
                f"session {session_id!r} entry {seq} does not open with this encryption key (a wrong key, "
                "or a row edited or moved in the database); nothing was changed or deleted"
            ) from None


class _Common:
    """What the sync and async stores share: the session id checks, sealing and opening of bodies."""

    #: the URL scheme of the backend (``sqlite``, ``postgresql``, ``redis``)
    scheme: ClassVar[str] = ""

    def __init__(self, *, ttl: float | None = None, encryption_key: bytes | None = None) -> None:
        self.ttl = check_ttl(ttl)
        self._sealer = _Sealer(encryption_key) if encryption_key is not None else None

    def _sealed(self, session_id: str, entries: Sequence[Entry]) -> list[Entry]:
        sealer = self._sealer
        if sealer is None:
            return list(entries)
        return [Entry(e.seq, e.kind, sealer.seal(session_id, e)) for e in entries]

    def _opened(self, session_id: str, entries: Sequence[Entry]) -> list[Entry]:
        sealer = self._sealer
        if sealer is None:
            for e in entries:
                if e.body.startswith(_SEALED):
                    raise StoreError(
                        f"session {session_id!r} entry {e.seq} is encrypted; open the store with its "
                        "encryption_key="
                    )
            return list(entries)
        return [Entry(e.seq, e.kind, sealer.open(session_id, e.seq, e.kind, e.body)) for e in entries]

    @staticmethod
    def _holder() -> str:
        return f"{os.getpid()}-{secrets.token_hex(8)}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where()})"

    def _where(self) -> str:
        return ""


class Store(_Common, abc.ABC):
    """A synchronous session store (:class:`~reasonstate.store.SQLiteStore`, ``PostgresStore``,
    ``RedisStore``). A store is safe to share between threads; each worker process opens its own."""

    # -- the primitives a backend implements ---------------------------------------------------------------
    @abc.abstractmethod
    def _append(self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None) -> None:
        """Atomically: when the session's version is ``expected`` (0: absent or expired), write ``entries``
        (already numbered ``expected + 1`` on, bodies already sealed), set the version to the last one's
        ``seq``, the last activity to now and the expiry to now + ``ttl`` (None: never); record the
        newest checkpoint's ``seq`` when one is among them. Otherwise write nothing and raise
        :class:`~reasonstate.errors.SessionConflict`. A server error or time-out: :class:`StoreError`."""

    @abc.abstractmethod
    def _read(self, session_id: str) -> list[Entry]:
        """The entries from the newest checkpoint to the version, in ``seq`` order, read consistently
        (never part of an append); ``[]`` when the session is absent or expired."""

    @abc.abstractmethod
    def _version(self, session_id: str) -> int:
        """The session's version (0: absent or expired)."""

    @abc.abstractmethod
    def _sessions(self) -> list[SessionInfo]:
        """Every live (unexpired) session, most recently active first."""

    @abc.abstractmethod
    def _delete(self, session_id: str) -> bool:
        """Remove the session's entries, metadata and lease; True when it existed."""

    @abc.abstractmethod
    def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None:
        """Take (or, for the same ``holder``, renew) the session's lease until now + ``ttl``: its expiry,
        or None when another holder's unexpired lease is there."""

    @abc.abstractmethod
    def _release(self, session_id: str, holder: str) -> None:
        """Drop the lease when ``holder`` still holds it."""

    @abc.abstractmethod
    def _sweep(self) -> int:
        """Delete expired sessions; how many (a backend whose server expires keys itself: 0)."""

    @abc.abstractmethod
    def _migrate(self) -> int:
        """Create the schema or bring an older one to :data:`SCHEMA_VERSION` (idempotent, safe to run from
        several processes at once); the version it is at."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store is not used after."""

    # -- the public surface --------------------------------------------------------------------------------
    def append(self, session_id: str, expected: int, entries: Sequence[Entry]) -> int:
        """Append ``entries`` on version ``expected``; the new version. Raises
        :class:`~reasonstate.errors.SessionConflict` (nothing written) when the session is at another
        version, :class:`~reasonstate.errors.StoreError` when the store fails (nothing written)."""
        check_session_id(session_id)
        check_entries(expected, entries)
        self._append(session_id, expected, self._sealed(session_id, entries), self.ttl)
        return entries[-1].seq

    def read(self, session_id: str) -> list[Entry]:
        """The session's entries from its newest checkpoint on, bodies opened (``[]``: no such session)."""
        check_session_id(session_id)
        return self._opened(session_id, self._read(session_id))

    def version(self, session_id: str) -> int:
        """The session's version: its newest entry's ``seq`` (0: no such session)."""
        return self._version(check_session_id(session_id))

    def sessions(self) -> list[SessionInfo]:
        """Every stored session, most recently active first."""
        return self._sessions()

    def delete(self, session_id: str) -> bool:
        """Delete a session (entries, metadata, lease); True when it existed."""
        return self._delete(check_session_id(session_id))

    def sweep(self) -> int:
        """Delete the sessions whose ``ttl`` ran out; how many. (Expired sessions already read as absent.)"""
        return self._sweep()

    def migrate(self) -> int:
        """Create or upgrade the schema to :data:`SCHEMA_VERSION`; the version now."""
        return self._migrate()

    @contextlib.contextmanager
    def lease(self, session_id: str, ttl: float = 30.0, *, wait: float = 0.0) -> Iterator[Lease]:
        """An exclusive turn on ``session_id`` for at most ``ttl`` seconds::

            with store.lease("conv-42", ttl=30):
                session = rs.Session.load(store, "conv-42", client)
                session.send(...)

        Waits up to ``wait`` seconds for another holder's lease; then
        :class:`~reasonstate.errors.StoreError`. Released on leaving the block."""
        check_session_id(session_id)
        ttl = check_ttl(ttl) or 30.0
        holder = self._holder()
        deadline = time.monotonic() + wait
        while True:
            expires = self._try_lease(session_id, holder, ttl)
            if expires is not None:
                break
            if time.monotonic() >= deadline:
                raise StoreError(f"session {session_id!r} is leased by another worker")
            time.sleep(0.01)
        try:
            yield Lease(session_id, holder, expires)
        finally:
            self._release(session_id, holder)

    def export(self, session_id: str) -> SessionSnapshot:
        """The stored session as a :class:`~reasonstate.SessionSnapshot` (today's snapshot format)."""
        entries = self.read(session_id)
        if not entries:
            raise StoreError(f"no session {session_id!r} in {self!r}")
        return snapshot_of(entries)

    def import_(self, snapshot: SessionSnapshot | str | bytes, session_id: str) -> int:
        """Store a snapshot as the new session ``session_id`` (a checkpoint at version 1); the version.
        :class:`~reasonstate.errors.SessionConflict` when the id is taken."""
        return self.append(session_id, 0, [Entry(1, CHECKPOINT, checkpoint_body(snapshot))])

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStore(_Common, abc.ABC):
    """An asyncio session store (``AsyncPostgresStore``, ``AsyncRedisStore``, ``AsyncSQLiteStore``): the
    same contract as :class:`Store`, every method a coroutine; for :class:`~reasonstate.AsyncSession`."""

    @abc.abstractmethod
    async def _append(
        self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None
    ) -> None: ...

    @abc.abstractmethod
    async def _read(self, session_id: str) -> list[Entry]: ...

    @abc.abstractmethod
    async def _version(self, session_id: str) -> int: ...

    @abc.abstractmethod
    async def _sessions(self) -> list[SessionInfo]: ...

    @abc.abstractmethod
    async def _delete(self, session_id: str) -> bool: ...

    @abc.abstractmethod
    async def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None: ...

    @abc.abstractmethod
    async def _release(self, session_id: str, holder: str) -> None: ...

    @abc.abstractmethod
    async def _sweep(self) -> int: ...

    @abc.abstractmethod
    async def _migrate(self) -> int: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def append(self, session_id: str, expected: int, entries: Sequence[Entry]) -> int:
        """:meth:`Store.append`, awaited."""
        check_session_id(session_id)
        check_entries(expected, entries)
        await self._append(session_id, expected, self._sealed(session_id, entries), self.ttl)
        return entries[-1].seq

    async def read(self, session_id: str) -> list[Entry]:
        """:meth:`Store.read`, awaited."""
        check_session_id(session_id)
        return self._opened(session_id, await self._read(session_id))

    async def version(self, session_id: str) -> int:
        return await self._version(check_session_id(session_id))

    async def sessions(self) -> list[SessionInfo]:
        return await self._sessions()

    async def delete(self, session_id: str) -> bool:
        return await self._delete(check_session_id(session_id))

    async def sweep(self) -> int:
        return await self._sweep()

    async def migrate(self) -> int:
        return await self._migrate()

    @contextlib.asynccontextmanager
    async def lease(self, session_id: str, ttl: float = 30.0, *, wait: float = 0.0) -> AsyncIterator[Lease]:
        """:meth:`Store.lease`, as an async context manager."""
        import asyncio

        check_session_id(session_id)
        ttl = check_ttl(ttl) or 30.0
        holder = self._holder()
        deadline = time.monotonic() + wait
        while True:
            expires = await self._try_lease(session_id, holder, ttl)
            if expires is not None:
                break
            if time.monotonic() >= deadline:
                raise StoreError(f"session {session_id!r} is leased by another worker")
            await asyncio.sleep(0.01)
        try:
            yield Lease(session_id, holder, expires)
        finally:
            await self._release(session_id, holder)

    async def export(self, session_id: str) -> SessionSnapshot:
        entries = await self.read(session_id)
        if not entries:
            raise StoreError(f"no session {session_id!r} in {self!r}")
        return snapshot_of(entries)

    async def import_(self, snapshot: SessionSnapshot | str | bytes, session_id: str) -> int:
        return await self.append(session_id, 0, [Entry(1, CHECKPOINT, checkpoint_body(snapshot))])

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
