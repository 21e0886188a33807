"""Shared by the tests that edit a snapshot's JSON on purpose (tampering, storage that "fixes" digests): where
a step's continuation payloads are in the compact history form (reasonstate.snapshot.history_to_snapshot).
"""

from __future__ import annotations

from typing import Any

from reasonstate.state import digest_of
from reasonstate.state.continuation import compact


def _step(snap: dict[str, Any], turn: int, step: int) -> list[Any]:
    entry: list[Any] = snap["history"]["turns"][turn][1][step]
    return entry


def payloads(snap: dict[str, Any], turn: int, step: int = 0) -> list[Any]:
    """The JSON values of the step's payloads, in order: dicts that can be edited in place."""
    entries = _step(snap, turn, step)[1]
    assert all(len(c) == 2 for c in entries), "a payload in its text form: edit it with set_payload"
    return [c[1] for c in entries]


def set_payload(snap: dict[str, Any], turn: int, step: int, index: int, value: Any) -> None:
    """Replace the step's payload ``index`` by the JSON value ``value`` (not re-digested: see redigest)."""
    _step(snap, turn, step)[1][index] = [_step(snap, turn, step)[1][index][0], value]


def redigest(snap: dict[str, Any]) -> None:
    """Retake the history's digest over its payloads (what storage that rewrites a payload and "fixes" the
    digest does); the snapshot's own seal is retaken by ``SessionSnapshot.sealed``."""
    digests = [
        digest_of(c[1].encode() if len(c) > 2 else compact(c[1]))
        for t in snap["history"]["turns"]
        for s in t[1]
        for c in s[1]
    ]
    snap["history"]["digest"] = digest_of("".join(digests).encode())


def set_vendor(snap: dict[str, Any], turn: int, step: int, vendor: str) -> None:
    """Name ``vendor`` as the producer of every payload of the step (their bytes, so digests, unchanged)."""
    origins = snap["history"]["origins"]
    for c in _step(snap, turn, step)[1]:
        origins.append([vendor, *origins[c[0]][1:]])
        c[0] = len(origins) - 1
