"""Real chat templates of open-weight reasoning models, verbatim (provenance in SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["TEMPLATE_NAMES", "template_path"]

_HERE = Path(__file__).parent

TEMPLATE_NAMES: tuple[str, ...] = ("qwen3.6", "glm-4.6", "kimi-k2-thinking", "deepseek-v3.1", "gpt-oss-20b")


def template_path(name: str) -> Path:
    """The bundled ``{name}.jinja`` (one of :data:`TEMPLATE_NAMES`)."""
    if name not in TEMPLATE_NAMES:
        raise KeyError(f"no bundled template {name!r}; bundled: {', '.join(TEMPLATE_NAMES)}")
    return _HERE / f"{name}.jinja"
