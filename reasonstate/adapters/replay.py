"""Replay checked against its source: what an answer gave that later requests must carry back verbatim.

A vendor's room (:class:`reasonstate.adapters.base.Room`) reads an answer into a :class:`Source` (the
continuation fields of its replayable items: signatures, redacted data, ``encrypted_content``, reasoning
item ids, ``thoughtSignature`` and the Part it sits on, ``reasoning_content``, tool-call ids and argument
strings) and compares a later request body with it, item by item, giving :class:`ReplayFinding` values:

* ``continuation_lost`` — the request replays the answer (one of its tool calls, by id or by position)
  but leaves a continuation field out where the vendor needs it back;
* ``continuation_altered`` — the field is there but differs from the bytes that came (re-serialized
  arguments, a replaced signature, a moved Part, merged blocks);
* ``mended`` — with mend on, the field restored in the outgoing body to the bytes that came.

Invariant (what a faithful replay is): for every field ``f`` of a source whose item a request replays,
``request[path(f)] == f.value`` (the same JSON value, strings byte for byte); a finding names the JSON path
of the first field where that fails. A mend makes it hold again, and only where the item is found by its
own id at its own position: never by a guess.

Payloads (signatures, encrypted items, reasoning text) appear in findings as digests, never verbatim;
argument strings (the model's own JSON) appear as they are, shortened.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from reasonstate.state.continuation import digest_of

__all__ = [
    "ALTERED",
    "LOST",
    "MENDED",
    "ReplayFinding",
    "Report",
    "Source",
    "digest",
    "needles",
    "shown",
    "source",
]

LOST = "continuation_lost"
ALTERED = "continuation_altered"
MENDED = "mended"


@attrs.frozen(slots=True)
class ReplayFinding:
    """One field of a replayed item compared with the answer it came in: ``kind`` (:data:`LOST`,
    :data:`ALTERED`, :data:`MENDED`), ``path`` (JSONPath into the request body, e.g.
    ``$.messages[1].content[0].signature``) and ``detail`` (what changed, payloads as digests)."""

    kind: str
    path: str
    detail: str


@attrs.frozen(slots=True, eq=False)
class Source:
    """What one answer gave that later requests carry back (kept compactly by the guard, per answer).

    ``anchors``: the ids by which a room finds the replayed items in a request (tool-call ids, reasoning
    item ids; where a vendor gives a call no id, its name and arguments). ``items``: the room's record of
    the answer's replayable items (JSON values holding only the fields compared and restored; never
    handed out: a mend inserts a copy). ``marks``: byte strings one of which a request replaying this
    answer contains (the ids as JSON strings): a body holding none is not checked. ``needles``: the
    payloads as JSON strings (both escapings): a request holding every one in place carries them back,
    unless ``positional`` (where a payload sits is part of it: Gemini's Part), in which case only a parse
    can tell. ``digest``: one digest of the whole record (two answers with equal anchors and digests are
    the same answer)."""

    anchors: frozenset[str]
    items: tuple[Any, ...]
    marks: tuple[bytes, ...]
    needles: tuple[tuple[bytes, ...], ...]
    positional: bool = False
    digest: str = ""


def source(
    anchors: frozenset[str],
    items: tuple[Any, ...],
    payloads: list[str],
    *,
    positional: bool,
    marks: frozenset[str] | None = None,
) -> Source:
    """A :class:`Source` whose needles are ``payloads`` as JSON strings and whose marks are ``marks`` (by
    default the anchors) as JSON strings."""
    marks_ = tuple(dict.fromkeys(m for a in sorted(anchors if marks is None else marks) for m in needles(a)))
    return Source(
        anchors=anchors,
        items=items,
        marks=marks_,
        needles=tuple(needles(p) for p in payloads if p),
        positional=positional,
        digest=digest_of(json.dumps([sorted(anchors), list(items)], sort_keys=True).encode()),
    )


def needles(value: str) -> tuple[bytes, ...]:
    """``value`` as it appears inside a JSON string, escaped either way an SDK writes it."""
    a = json.dumps(value)[1:-1].encode()
    b = json.dumps(value, ensure_ascii=False)[1:-1].encode()
    return (a,) if a == b else (a, b)


def digest(value: Any) -> str:
    """How a payload appears in a finding."""
    return digest_of(str(value).encode())


def shown(value: Any, limit: int = 60) -> str:
    """An argument string (the model's JSON, no secret) as a finding shows it: ``repr``, shortened."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Report:
    """Where a room's comparison writes its findings: each lost or altered field, and, with ``mend`` on
    and a ``restore`` given (the item was found by its own id at its own position), the restoration done
    at once followed by its ``mended`` finding."""

    def __init__(self, out: list[ReplayFinding], mend: bool) -> None:
        self._out, self._mend = out, mend

    def lost(self, path: str, detail: str, restore: Callable[[], None] | None = None) -> None:
        self._add(LOST, path, detail, restore)

    def altered(self, path: str, detail: str, restore: Callable[[], None] | None = None) -> None:
        self._add(ALTERED, path, detail, restore)

    def _add(self, kind: str, path: str, detail: str, restore: Callable[[], None] | None) -> None:
        self._out.append(ReplayFinding(kind, path, detail))
        if self._mend and restore is not None:
            restore()
            self._out.append(ReplayFinding(MENDED, path, f"restored: {detail}"))


def same_json(a: Any, b: Any) -> bool:
    """Whether two argument strings are the same JSON value (one re-serialized from the other)."""
    try:
        return isinstance(a, str) and isinstance(b, str) and json.loads(a) == json.loads(b)
    except ValueError:
        return False
