"""Transitional re-exports: the cause analysis moved to :mod:`reasonstate.cache.divergence` (its
vendor-neutral part) and to the vendor rooms, reached through :mod:`reasonstate.adapters` (``view_of``,
``room(api)``). New code imports from there."""

from __future__ import annotations

from typing import Any

from reasonstate.adapters import APIS, room, view_of
from reasonstate.cache.divergence import CAUSES, Cause, Divergence, Unit, View, explain

__all__ = [
    "APIS",
    "CAUSES",
    "Cause",
    "Divergence",
    "Unit",
    "View",
    "explain",
    "lost_continuation",
    "starts_conversation",
    "view_of",
]


def starts_conversation(view: View) -> bool:
    """Whether ``view``'s history holds nothing but user input (its room's rule)."""
    return room(view.api).starts_conversation(view)


def lost_continuation(api: str, response: Any, body: Any) -> tuple[str, ...]:
    """Digests of the reasoning payloads ``response`` ended a tool call with that ``body`` does not carry
    back (its room's rule)."""
    return room(api).lost_continuation(response, body)
