"""The Redis store: redis-py (``reasonstate[redis]``), sync and asyncio, each call one Lua script.

Keys (schema version 1, ``docs/concepts/store.md``), every one under the store's ``prefix=``
(``"reasonstate:"`` by default) so that several stores share one database:

- ``{prefix}schema``: a string, the schema version (:data:`~reasonstate.store._base.SCHEMA_VERSION`);
- ``{prefix}s:{id}``: a hash, the session's metadata: ``version``, ``checkpoint`` (the newest
  checkpoint's ``seq``), ``created`` and ``updated`` (Unix microseconds, the server's clock), ``expires``
  (Unix microseconds; ``0``: never) and ``token`` (the last append's, so a retried append is recognised);
- ``{prefix}e:{id}``: a hash, the entries: field ``seq`` (decimal), value the kind's letter (``c``
  checkpoint, ``d`` delta) followed by the body's exact bytes;
- ``{prefix}sessions``: a sorted set of session ids scored by last activity (Unix microseconds);
- ``{prefix}l:{id}``: a string, the lease's holder, expiring with the lease (``SET ... PX``).

An append is one script: it reads the metadata, compares the version, writes the entries and the
session's score in the index, then the metadata in one ``HSET`` (the version is what makes entries visible,
so entries past it are never read and the next append overwrites them), then both keys' expiry
(``PEXPIREAT``, or ``PERSIST`` without ``ttl``). Redis does not undo a script that fails half-way, so the
order matters: every command that can fail (a key of the wrong type) runs before the metadata is written,
and Redis refuses a script for lack of memory only at its first write. Redis runs a script alone, so two
workers never both append on one version and a reader never sees half an append. Times come from the
server's ``TIME``, so workers whose clocks disagree still agree on expiry (and a lease's ``expires`` is the
server's clock too). Expiry is Redis's own: the keys vanish ``ttl`` after the last append
(the metadata's ``expires`` is checked too, so the two keys are absent together); the index is cleaned of
expired sessions by :meth:`~RedisStore.sessions` and :meth:`~RedisStore.sweep`.

Needs Redis 5 or later (scripts replicated by their effects; ``HSET`` of several fields), with a
``maxmemory-policy`` that evicts nothing (``noeviction``, or a ``volatile-*`` policy when no store has a
``ttl``): an evicted entry is lost data (reads of it are a :class:`~reasonstate.errors.StoreError`). A Redis
Cluster is not supported: a script touches the session's keys and the shared index, in different slots.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.backoff
import redis.exceptions
import redis.retry

from reasonstate.errors import InvalidOption, SessionConflict, StoreError
from reasonstate.store._base import CHECKPOINT, DELTA, SCHEMA_VERSION, AsyncStore, Entry, SessionInfo, Store

if TYPE_CHECKING:
    from redis.asyncio.client import Redis as AsyncRedis
    from redis.client import Redis as SyncRedis

__all__ = ["AsyncRedisStore", "RedisStore"]

#: the letter an entry's kind is stored as, before its body
_KIND_TAG = {CHECKPOINT: b"c", DELTA: b"d"}
_TAG_KIND = {v: k for k, v in _KIND_TAG.items()}

# -- the scripts ---------------------------------------------------------------------------------------------
# Numbers are written with string.format('%d', ...): Lua's own conversion of a microsecond timestamp
# (1.7e15) would round it. HMGET and HSET are called in chunks: Lua's unpack() stops at a few thousand
# values.

_NOW = """
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
"""

#: KEYS: meta, entries, index. ARGV: id, expected, ttl ms ('' never), token, newest checkpoint seq among
#: the entries (0 none), then each entry's stored value (kind letter + body), numbered expected + 1 on.
#: {1, version}: written; {2, version}: this very append (same token) was written before; {0, found}:
#: a conflict.
_APPEND = (
    _NOW
    + """
local meta, log, index = KEYS[1], KEYS[2], KEYS[3]
local expected = tonumber(ARGV[2])
local m = redis.call('HMGET', meta, 'version', 'checkpoint', 'created', 'expires', 'token')
local live = false
local found = 0
if m[1] then
  local expires = tonumber(m[4] or '0')
  if expires == 0 or expires > now_us then
    live = true
    found = tonumber(m[1])
  end
end
local n = #ARGV - 5
local last = expected + n
if found ~= expected then
  if live and found == last and m[5] == ARGV[4] then
    return {2, found}
  end
  return {0, found}
end
if not live then
  redis.call('DEL', meta, log)
end
for i = 1, n, 256 do
  local args = {}
  for j = i, math.min(i + 255, n) do
    args[#args + 1] = string.format('%d', expected + j)
    args[#args + 1] = ARGV[5 + j]
  end
  redis.call('HSET', log, unpack(args))
end
local checkpoint = tonumber(ARGV[5])
if checkpoint == 0 then
  checkpoint = live and tonumber(m[2]) or 1
end
local created = live and m[3] or string.format('%d', now_us)
local expires_ms = 0
if ARGV[3] ~= '' then
  expires_ms = now_ms + tonumber(ARGV[3])
end
redis.call('ZADD', index, string.format('%d', now_us), ARGV[1])
redis.call('HSET', meta, 'version', string.format('%d', last),
  'checkpoint', string.format('%d', checkpoint), 'created', created,
  'updated', string.format('%d', now_us), 'expires', string.format('%d', expires_ms * 1000),
  'token', ARGV[4])
if expires_ms > 0 then
  redis.call('PEXPIREAT', meta, string.format('%d', expires_ms))
  redis.call('PEXPIREAT', log, string.format('%d', expires_ms))
else
  redis.call('PERSIST', meta)
  redis.call('PERSIST', log)
end
return {1, last}
"""
)

#: KEYS: meta, entries. {version, checkpoint, value, value, ...} from the checkpoint to the version;
#: {} when the session is absent or expired.
_READ = (
    _NOW
    + """
local m = redis.call('HMGET', KEYS[1], 'version', 'checkpoint', 'expires')
if not m[1] then
  return {}
end
local expires = tonumber(m[3] or '0')
if expires ~= 0 and expires <= now_us then
  return {}
end
local version, checkpoint = tonumber(m[1]), tonumber(m[2])
local out = {version, checkpoint}
for i = checkpoint, version, 256 do
  local fields = {}
  for seq = i, math.min(i + 255, version) do
    fields[#fields + 1] = string.format('%d', seq)
  end
  local values = redis.call('HMGET', KEYS[2], unpack(fields))
  for k = 1, #fields do
    if not values[k] then
      return redis.error_reply('entry ' .. fields[k] .. ' of a session at version ' .. m[1] .. ' is missing')
    end
    out[#out + 1] = values[k]
  end
end
return out
"""
)

#: KEYS: meta. The version (0: absent or expired).
_VERSION = (
    _NOW
    + """
local m = redis.call('HMGET', KEYS[1], 'version', 'expires')
if not m[1] then
  return 0
end
local expires = tonumber(m[2] or '0')
if expires ~= 0 and expires <= now_us then
  return 0
end
return tonumber(m[1])
"""
)

#: KEYS: meta, entries, lease, index. ARGV: id. 1 when the session was there (live), 0 otherwise.
_DELETE = (
    _NOW
    + """
local m = redis.call('HMGET', KEYS[1], 'version', 'expires')
local live = 0
if m[1] then
  local expires = tonumber(m[2] or '0')
  if expires == 0 or expires > now_us then
    live = 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
return live
"""
)

#: KEYS: meta, entries, index. ARGV: id. Drops an expired (or vanished) session from the index: 1 if it did.
_CLEAN = (
    _NOW
    + """
local m = redis.call('HMGET', KEYS[1], 'version', 'expires')
if m[1] then
  local expires = tonumber(m[2] or '0')
  if expires == 0 or expires > now_us then
    return 0
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"""
)

#: KEYS: lease. ARGV: holder, ttl ms. The lease's expiry (Unix ms), or nil when another holder has it.
_LEASE = (
    _NOW
    + """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return false
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return now_ms + tonumber(ARGV[2])
"""
)

#: KEYS: lease. ARGV: holder. Drops the lease when the holder still holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 0
"""

#: KEYS: schema. ARGV: the version this reasonstate writes. The version found (0: none); the key is set
#: only when it was older (a newer one is left untouched for the caller to refuse). Migrations from one
#: version to the next would run here, in this script, before the key is set: version 1 is the first.
_MIGRATE = """
local found = redis.call('GET', KEYS[1])
local n = 0
if found then
  n = tonumber(found)
  if not n then
    return redis.error_reply('the schema key holds ' .. found .. ', not a version number')
  end
end
if n < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return n
"""


def _redacted(url: str) -> str:
    """``url`` without its password (in the address or, as redis-py also reads it, in the query)."""
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            host = parts.netloc.rsplit("@", 1)[1]
            parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        if any(k == "password" for k, _ in query):
            query = [(k, "***" if k == "password" else v) for k, v in query]
            parts = parts._replace(query=urlencode(query, safe="*"))
        elif parts.password is None:
            return url
        return urlunsplit(parts)
    except ValueError:
        return "<redis url>"


def _ttl_ms(ttl: float) -> int:
    return max(1, round(ttl * 1000))


class _RedisCommon:
    """What the sync and async Redis stores share: the options, the keys, the encoding of entries."""

    scheme = "redis"

    def _setup(self, url: str, prefix: str, timeout: float) -> dict[str, Any]:
        if not isinstance(url, str):
            raise InvalidOption(f"url is a redis:// URL string, got {type(url).__name__}")
        if not isinstance(prefix, str):
            raise InvalidOption(f"prefix= is a string, got {type(prefix).__name__}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise InvalidOption(f"timeout= is a number of seconds > 0, got {timeout!r}")
        self.url = url
        self.prefix = prefix
        self.timeout = float(timeout)
        self._prefix = prefix.encode("utf-8", "surrogatepass")
        self._schema_key = self._prefix + b"schema"
        self._index_key = self._prefix + b"sessions"
        # bytes in, bytes out: a body is never decoded; no retry of redis-py's own (an append retries
        # itself, with its token)
        return {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "decode_responses": False,
        }

    def _where(self) -> str:
        return f"{_redacted(self.url)!r}, prefix={self.prefix!r}"

    @staticmethod
    def _id(session_id: str) -> bytes:
        return session_id.encode("utf-8", "surrogatepass")

    def _meta_key(self, sid: bytes) -> bytes:
        return self._prefix + b"s:" + sid

    def _entries_key(self, sid: bytes) -> bytes:
        return self._prefix + b"e:" + sid

    def _lease_key(self, sid: bytes) -> bytes:
        return self._prefix + b"l:" + sid

    def _append_call(
        self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None
    ) -> tuple[list[bytes], list[Any]]:
        sid = self._id(session_id)
        checkpoints = [e.seq for e in entries if e.kind == CHECKPOINT]
        keys = [self._meta_key(sid), self._entries_key(sid), self._index_key]
        args: list[Any] = [
            sid,
            str(expected),
            "" if ttl is None else str(_ttl_ms(ttl)),
            secrets.token_hex(16),
            str(checkpoints[-1] if checkpoints else 0),
        ]
        args.extend(_KIND_TAG[e.kind] + e.body for e in entries)
        return keys, args

    @staticmethod
    def _appended(session_id: str, expected: int, reply: Any) -> None:
        status, found = int(reply[0]), int(reply[1])
        if status == 0:
            raise SessionConflict(
                f"session {session_id!r} is at version {found}, this append was built on {expected}",
                session_id=session_id,
                expected=expected,
                found=found,
            )

    def _entries(self, session_id: str, reply: Any) -> list[Entry]:
        if not reply:
            return []
        checkpoint = int(reply[1])
        out = []
        for i, value in enumerate(reply[2:]):
            kind = _TAG_KIND.get(bytes(value[:1]))
            if kind is None:
                raise StoreError(
                    f"session {session_id!r} entry {checkpoint + i} in {self!r} has no kind; it was not "
                    "written by reasonstate"
                )
            out.append(Entry(checkpoint + i, kind, bytes(value[1:])))
        return out

    def _infos(
        self, ids: Sequence[bytes], replies: Sequence[Any], now_us: int
    ) -> tuple[list[SessionInfo], list[bytes]]:
        live: list[SessionInfo] = []
        stale: list[bytes] = []
        for sid, (version, created, updated, expires) in zip(ids, replies, strict=True):
            exp = int(expires or 0) if version is not None else 0
            if version is None or (exp and exp <= now_us):
                stale.append(sid)
                continue
            live.append(
                SessionInfo(
                    sid.decode("utf-8", "surrogatepass"),
                    int(version),
                    int(created) / 1e6,
                    int(updated) / 1e6,
                    exp / 1e6 if exp else None,
                )
            )
        live.sort(key=lambda i: (-i.updated, i.session_id))
        return live, stale

    def _schema_found(self, found: int) -> int:
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the Redis store {self!r} has schema version {found}, newer than this reasonstate's "
                f"{SCHEMA_VERSION}: upgrade reasonstate; nothing was changed"
            )
        return SCHEMA_VERSION

    def _schema_checked(self, raw: bytes | None) -> None:
        found = raw.decode("ascii", "replace") if raw is not None else "none"
        if found != str(SCHEMA_VERSION):
            raise StoreError(
                f"the Redis store {self!r} has schema version {found}, this reasonstate uses "
                f"{SCHEMA_VERSION}: run `reasonstate store migrate {_redacted(self.url)}` (key prefix "
                f"{self.prefix!r}), or open it with migrate=True"
            )

    @staticmethod
    def _retried(exc: redis.exceptions.RedisError, attempt: int, once: bool) -> bool:
        """Whether a call that raised ``exc`` is sent again: only when the connection dropped (not a
        time-out, whose script may still be running, nor a refused password), and only once."""
        return (
            not once
            and attempt + 1 < _ATTEMPTS
            and isinstance(exc, redis.exceptions.ConnectionError)
            and not isinstance(
                exc, (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
            )
        )

    def _failed(self, exc: redis.exceptions.RedisError) -> StoreError:
        kind = (
            "timed out"
            if isinstance(exc, redis.exceptions.TimeoutError)
            else "is not reachable"
            if isinstance(exc, redis.exceptions.ConnectionError)
            else "failed"
        )
        return StoreError(f"the Redis store {self!r} {kind}: {type(exc).__name__}: {exc}")


#: how many times a script is sent when the connection drops before its reply (a new connection each time)
_ATTEMPTS = 2


class RedisStore(_RedisCommon, Store):
    """``RedisStore(url)``: a Redis server (``redis://``, ``rediss://`` or ``unix://``), a connection pool.

    ``prefix=``: the start of every key (several stores, or applications, share one database);
    ``ttl=``: seconds a session lives after its last append (Redis expires its keys; None: for ever);
    ``encryption_key=``: 16, 24 or 32 bytes, bodies sealed with AES-GCM (``reasonstate[crypto]``);
    ``timeout=``: seconds to connect, and to wait for each reply, before a
    :class:`~reasonstate.errors.StoreError`; ``migrate=False``: do not create or upgrade the schema on
    open (``reasonstate store migrate`` does it), refuse a store whose schema is not this version's.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "reasonstate:",
        ttl: float | None = None,
        encryption_key: bytes | None = None,
        timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        super().__init__(ttl=ttl, encryption_key=encryption_key)
        options = self._setup(url, prefix, timeout)
        try:
            self._redis: SyncRedis = redis.Redis.from_url(
                url, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0), **options
            )
        except (ValueError, redis.exceptions.RedisError) as exc:
            raise StoreError(f"cannot open the Redis store {_redacted(url)!r}: {exc}") from exc
        r = self._redis
        self._s_append = r.register_script(_APPEND)
        self._s_read = r.register_script(_READ)
        self._s_version = r.register_script(_VERSION)
        self._s_delete = r.register_script(_DELETE)
        self._s_clean = r.register_script(_CLEAN)
        self._s_lease = r.register_script(_LEASE)
        self._s_release = r.register_script(_RELEASE)
        self._s_migrate = r.register_script(_MIGRATE)
        try:
            if migrate:
                self._migrate()
            else:
                self._schema_checked(self._call(r.get, self._schema_key))
        except BaseException:
            r.close()
            raise

    def _call(self, fn: Any, *args: Any, once: bool = False, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; a dropped connection is tried once more on a fresh one (the scripts are
        safe to repeat: an append recognises its own token; ``once``: not repeated), any redis error
        becomes :class:`StoreError`."""
        for attempt in range(1 if once else _ATTEMPTS):
            try:
                return fn(*args, **kwargs)
            except redis.exceptions.RedisError as exc:
                if not self._retried(exc, attempt, once):
                    raise self._failed(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _append(self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None) -> None:
        keys, args = self._append_call(session_id, expected, entries, ttl)
        self._appended(session_id, expected, self._call(self._s_append, keys=keys, args=args))

    def _read(self, session_id: str) -> list[Entry]:
        sid = self._id(session_id)
        reply = self._call(self._s_read, keys=[self._meta_key(sid), self._entries_key(sid)])
        return self._entries(session_id, reply)

    def _version(self, session_id: str) -> int:
        return int(self._call(self._s_version, keys=[self._meta_key(self._id(session_id))]))

    def _scan(self) -> tuple[list[SessionInfo], list[bytes]]:
        ids: list[bytes] = self._call(self._redis.zrange, self._index_key, 0, -1)

        def fetch() -> Any:  # a pipeline empties itself on execute: a retry builds it again
            pipe: Any = self._redis.pipeline(transaction=False)  # redis-py types keys as str
            pipe.time()
            for sid in ids:
                pipe.hmget(self._meta_key(sid), "version", "created", "updated", "expires")
            return pipe.execute()

        replies = self._call(fetch)
        seconds, micros = replies[0]
        return self._infos(ids, replies[1:], int(seconds) * 1_000_000 + int(micros))

    def _clean(self, stale: Sequence[bytes]) -> None:
        for sid in stale:
            self._call(
                self._s_clean, keys=[self._meta_key(sid), self._entries_key(sid), self._index_key], args=[sid]
            )

    def _sessions(self) -> list[SessionInfo]:
        live, stale = self._scan()
        self._clean(stale)
        return live

    def _delete(self, session_id: str) -> bool:
        sid = self._id(session_id)
        keys = [self._meta_key(sid), self._entries_key(sid), self._lease_key(sid), self._index_key]
        return bool(self._call(self._s_delete, keys=keys, args=[sid], once=True))  # True once

    def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None:
        keys = [self._lease_key(self._id(session_id))]
        expires = self._call(self._s_lease, keys=keys, args=[holder, _ttl_ms(ttl)])
        return None if expires is None else int(expires) / 1000

    def _release(self, session_id: str, holder: str) -> None:
        self._call(self._s_release, keys=[self._lease_key(self._id(session_id))], args=[holder])

    def _sweep(self) -> int:
        self._clean(self._scan()[1])
        return 0

    def _migrate(self) -> int:
        found = self._call(self._s_migrate, keys=[self._schema_key], args=[SCHEMA_VERSION])
        return self._schema_found(int(found))

    def close(self) -> None:
        self._redis.close()


class AsyncRedisStore(_RedisCommon, AsyncStore):
    """:class:`RedisStore` for :class:`~reasonstate.AsyncSession` (``redis.asyncio``): the same keys,
    options and contract. The schema is created (or, with ``migrate=False``, checked) on the first call,
    since a constructor cannot await; the store belongs to the event loop that first uses it."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "reasonstate:",
        ttl: float | None = None,
        encryption_key: bytes | None = None,
        timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        super().__init__(ttl=ttl, encryption_key=encryption_key)
        options = self._setup(url, prefix, timeout)
        try:
            self._redis: AsyncRedis = redis.asyncio.Redis.from_url(
                url, retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0), **options
            )
        except (ValueError, redis.exceptions.RedisError) as exc:
            raise StoreError(f"cannot open the Redis store {_redacted(url)!r}: {exc}") from exc
        r = self._redis
        self._s_append = r.register_script(_APPEND)
        self._s_read = r.register_script(_READ)
        self._s_version = r.register_script(_VERSION)
        self._s_delete = r.register_script(_DELETE)
        self._s_clean = r.register_script(_CLEAN)
        self._s_lease = r.register_script(_LEASE)
        self._s_release = r.register_script(_RELEASE)
        self._s_migrate = r.register_script(_MIGRATE)
        self._auto_migrate = migrate
        self._ready = False

    async def _raw(self, fn: Any, *args: Any, once: bool = False, **kwargs: Any) -> Any:
        """:meth:`RedisStore._call`, awaited."""
        for attempt in range(1 if once else _ATTEMPTS):
            try:
                return await fn(*args, **kwargs)
            except redis.exceptions.RedisError as exc:
                if not self._retried(exc, attempt, once):
                    raise self._failed(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call(self, fn: Any, *args: Any, once: bool = False, **kwargs: Any) -> Any:
        """The schema made ready once (two first calls at once both run the idempotent script); then
        ``fn``."""
        if not self._ready:
            if self._auto_migrate:
                await self._migrate()
            else:
                self._schema_checked(await self._raw(self._redis.get, self._schema_key))
                self._ready = True
        return await self._raw(fn, *args, once=once, **kwargs)

    async def _append(
        self, session_id: str, expected: int, entries: Sequence[Entry], ttl: float | None
    ) -> None:
        keys, args = self._append_call(session_id, expected, entries, ttl)
        self._appended(session_id, expected, await self._call(self._s_append, keys=keys, args=args))

    async def _read(self, session_id: str) -> list[Entry]:
        sid = self._id(session_id)
        reply = await self._call(self._s_read, keys=[self._meta_key(sid), self._entries_key(sid)])
        return self._entries(session_id, reply)

    async def _version(self, session_id: str) -> int:
        return int(await self._call(self._s_version, keys=[self._meta_key(self._id(session_id))]))

    async def _scan(self) -> tuple[list[SessionInfo], list[bytes]]:
        ids: list[bytes] = await self._call(self._redis.zrange, self._index_key, 0, -1)

        async def fetch() -> Any:
            pipe: Any = self._redis.pipeline(transaction=False)  # redis-py types keys as str
            pipe.time()
            for sid in ids:
                pipe.hmget(self._meta_key(sid), "version", "created", "updated", "expires")
            return await pipe.execute()

        replies = await self._call(fetch)
        seconds, micros = replies[0]
        return self._infos(ids, replies[1:], int(seconds) * 1_000_000 + int(micros))

    async def _clean(self, stale: Sequence[bytes]) -> None:
        for sid in stale:
            await self._call(
                self._s_clean, keys=[self._meta_key(sid), self._entries_key(sid), self._index_key], args=[sid]
            )

    async def _sessions(self) -> list[SessionInfo]:
        live, stale = await self._scan()
        await self._clean(stale)
        return live

    async def _delete(self, session_id: str) -> bool:
        sid = self._id(session_id)
        keys = [self._meta_key(sid), self._entries_key(sid), self._lease_key(sid), self._index_key]
        return bool(await self._call(self._s_delete, keys=keys, args=[sid], once=True))

    async def _try_lease(self, session_id: str, holder: str, ttl: float) -> float | None:
        keys = [self._lease_key(self._id(session_id))]
        expires = await self._call(self._s_lease, keys=keys, args=[holder, _ttl_ms(ttl)])
        return None if expires is None else int(expires) / 1000

    async def _release(self, session_id: str, holder: str) -> None:
        await self._call(self._s_release, keys=[self._lease_key(self._id(session_id))], args=[holder])

    async def _sweep(self) -> int:
        await self._clean((await self._scan())[1])
        return 0

    async def _migrate(self) -> int:
        found = await self._raw(self._s_migrate, keys=[self._schema_key], args=[SCHEMA_VERSION])
        version = self._schema_found(int(found))
        self._ready = True
        return version

    async def close(self) -> None:
        await self._redis.aclose()
