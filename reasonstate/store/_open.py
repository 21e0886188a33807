"""A store from a URL: ``open_store("sqlite:///sessions.db")``, ``open_store("postgresql://...")``, ...

The URL forms (docs/howto/persist.md):

- ``sqlite:///relative/path.db`` (three slashes: a path relative to the working directory),
  ``sqlite:////abs/path.db`` (four: an absolute path), ``sqlite://:memory:`` (also ``sqlite://`` and
  ``sqlite:///:memory:``): a store in memory, living and dying with the object. The path is taken as
  written (no percent-decoding); a SQLite URL has no host and no query: options are keyword arguments;
- ``postgresql://...`` or ``postgres://...``: a libpq URL given to psycopg as it is, except for an optional
  ``schema=`` query parameter, which is :class:`~reasonstate.store.PostgresStore`'s ``schema=``;
- ``redis://...`` or ``rediss://...`` (TLS): a redis-py URL (``/N`` the database number), except for an
  optional ``prefix=`` query parameter, which is :class:`~reasonstate.store.RedisStore`'s ``prefix=``.

Anything else, an option the backend does not take, or an option given both in the URL and as a keyword:
:class:`~reasonstate.errors.InvalidOption`. The backend's module is imported only for its scheme, so a
SQLite URL needs neither psycopg nor redis, and a missing extra is an ``InvalidOption`` naming it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from reasonstate.errors import InvalidOption
from reasonstate.store._base import AsyncStore, Store

__all__ = ["StoreURL", "open_async_store", "open_store", "parse_store_url"]

#: scheme -> (module, sync class, async class, extra, the query parameter that is a constructor option)
_BACKENDS: dict[str, tuple[str, str, str, str, str | None]] = {
    "sqlite": ("reasonstate.store.sqlite", "SQLiteStore", "AsyncSQLiteStore", "", None),
    "postgresql": ("reasonstate.store.postgres", "PostgresStore", "AsyncPostgresStore", "postgres", "schema"),
    "postgres": ("reasonstate.store.postgres", "PostgresStore", "AsyncPostgresStore", "postgres", "schema"),
    "redis": ("reasonstate.store.redis", "RedisStore", "AsyncRedisStore", "redis", "prefix"),
    "rediss": ("reasonstate.store.redis", "RedisStore", "AsyncRedisStore", "redis", "prefix"),
}

_MEMORY = ":memory:"


@attrs.frozen(slots=True)
class StoreURL:
    """A store URL read: its ``scheme``, the ``target`` the backend opens (a SQLite path or
    ``":memory:"``, a PostgreSQL DSN, a Redis URL: the URL without the parameters taken out) and the
    ``options`` the URL gives (``schema`` or ``prefix``)."""

    scheme: str
    target: str
    options: dict[str, str] = attrs.field(factory=dict)

    @property
    def memory(self) -> bool:
        """True for a SQLite store in memory."""
        return self.scheme == "sqlite" and self.target == _MEMORY


def parse_store_url(url: Any) -> StoreURL:
    """``url`` read as a store URL (the module docstring lists the forms); :class:`InvalidOption` else.
    Messages show the scheme only, never the URL (it may hold a password)."""
    if not isinstance(url, str) or not url:
        raise InvalidOption(f"a store URL is a non-empty string, got {url!r:.80}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _BACKENDS:
        shown = f"{scheme}://..." if sep else "a string without a scheme"
        raise InvalidOption(
            f"a store URL is sqlite:///path.db, sqlite:////abs/path.db, sqlite://:memory:, postgresql://..., "
            f"postgres://..., redis://... or rediss://...; got {shown}"
        )
    if scheme == "sqlite":
        return StoreURL("sqlite", _sqlite_path(rest))
    parts = urlsplit(url)
    if parts.fragment:
        raise InvalidOption(f"a {scheme}:// store URL has no #fragment (the CLI reads URL#SESSION_ID itself)")
    key = _BACKENDS[scheme][4]
    query = parse_qsl(parts.query, keep_blank_values=True)
    taken = [v for k, v in query if k == key]
    if len(taken) > 1:
        raise InvalidOption(f"the store URL gives ?{key}= {len(taken)} times")
    options = {key: taken[0]} if taken and key is not None else {}
    rest_query = urlencode([(k, v) for k, v in query if k != key])
    return StoreURL(scheme, urlunsplit(parts._replace(query=rest_query)), options)


def _sqlite_path(rest: str) -> str:
    if rest in ("", _MEMORY, "/" + _MEMORY):
        return _MEMORY
    if "?" in rest or "#" in rest:
        raise InvalidOption(
            "a sqlite:// store URL has no ?query or #fragment: give options as keyword arguments "
            "(open_store(url, ttl=3600))"
        )
    if not rest.startswith("/") or rest == "/":
        raise InvalidOption(
            "a sqlite:// store URL has no host: sqlite:///relative/path.db (three slashes), "
            "sqlite:////absolute/path.db (four) or sqlite://:memory:"
        )
    return rest[1:]


def _class(scheme: str, asynchronous: bool) -> type[Any]:
    module, sync, async_, extra, _ = _BACKENDS[scheme]
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise InvalidOption(
            f"a {scheme}:// store needs the {extra} extra: pip install 'reasonstate[{extra}]' ({exc})"
        ) from exc
    cls: type[Any] = getattr(found, async_ if asynchronous else sync)
    return cls


def _open(url: Any, options: dict[str, Any], asynchronous: bool) -> Any:
    parsed = parse_store_url(url)
    cls = _class(parsed.scheme, asynchronous)
    for name in parsed.options:
        if name in options:
            raise InvalidOption(f"{name}= is given twice: in the store URL and as a keyword")
    kwargs = {**parsed.options, **options}
    try:
        inspect.signature(cls).bind(parsed.target, **kwargs)
    except TypeError as exc:
        accepted = [
            p.name
            for p in inspect.signature(cls).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        raise InvalidOption(
            f"{cls.__name__} does not take these options ({exc}); it takes {accepted}"
        ) from None
    return cls(parsed.target, **kwargs)


def open_store(url: str, **options: Any) -> Store:
    """The store ``url`` names, opened with ``options`` (the backend's keyword arguments: ``ttl=``,
    ``encryption_key=``, ``timeout=``, ``migrate=``, ...)::

        store = open_store("sqlite:///sessions.db", ttl=7 * 86400)
        store = open_store("postgresql://app@db:5432/app?schema=agents")
        store = open_store("redis://cache:6379/0?prefix=myapp:")

    :class:`~reasonstate.errors.InvalidOption` for a URL of another form or an option the backend does
    not take; :class:`~reasonstate.errors.StoreError` when the store cannot be opened."""
    store: Store = _open(url, options, asynchronous=False)
    return store


def open_async_store(url: str, **options: Any) -> AsyncStore:
    """:func:`open_store` for :class:`~reasonstate.AsyncSession`: the same URLs, an
    :class:`~reasonstate.store.AsyncStore` (``AsyncSQLiteStore``, ``AsyncPostgresStore``,
    ``AsyncRedisStore``)."""
    store: AsyncStore = _open(url, options, asynchronous=True)
    return store
