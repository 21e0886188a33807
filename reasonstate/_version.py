"""The distribution's version, read from the installed metadata (the one source: pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__: str = version("reasonstate")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
