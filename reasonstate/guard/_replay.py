"""Replay checked against its source: the answers a guard keeps for later requests, the comparison of each
request with them, and mend mode (the request side: restoring, in the outgoing body only, what a framework
lost or altered).

What is kept per answer is its room's :class:`~reasonstate.adapters.replay.Source` (the continuation
fields only: ids, signatures, encrypted items, argument strings), the last :data:`ANSWERS` answers with a
tool call, whatever the conversation. A request is compared with every kept answer that came before it
from the same vendor API, the same server and the same model (never across a model or a vendor: a
framework leaving out another model's reasoning does right) whose items it replays (its room finds them by
their ids). A mend happens only where the answer is the one answer holding those ids (two kept answers
sharing an anchor with different contents: no mend, the findings stand), and only when the body's own
serialization can be reproduced byte for byte, so that nothing but the restored fields changes.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from reasonstate.adapters import Room
from reasonstate.adapters.replay import MENDED, ReplayFinding, Source

__all__ = ["ANSWERS", "Answer", "Ledger", "check", "mend", "serialized"]

#: how many answers with a tool call a guard keeps (the ledger's bound)
ANSWERS = 256


@attrs.define(slots=True, eq=False)
class Answer:
    """One kept answer: the capture index of its exchange, its API, server and URL path, its source, its
    model, and the findings already reported against it (each lost or altered field is reported once: at
    the first request where it happens).

    The model is read from the request that produced the answer when a check first needs it (mend mode
    keeps answers in the request path, where a faithful replay needs no model): until then ``request``
    holds that request's bytes. ``seen``: where each needle was found in the last body that held it (a
    chain's bodies share their prefix, so the next body is checked there first)."""

    index: int
    api: str
    origin: str
    path: str
    source: Source
    model: str | None = None
    request: bytes | None = None
    reported: set[tuple[str, str]] = attrs.field(factory=set)
    seen: dict[bytes, int] = attrs.field(factory=dict)

    def model_in(self, room: Room) -> str:
        """The model the answer came from (read once from its request)."""
        if self.model is None:
            try:
                body = json.loads(self.request or b"")
            except ValueError:
                body = None
            self.model, self.request = room.model_from_path(self.path, body), None
        return self.model

    def carried_in(self, content: bytes) -> bool:
        """Whether ``content`` holds every payload of the answer verbatim (looked for where it was last)."""
        for escapings in self.source.needles:
            for needle in escapings:
                at = self.seen.get(needle, -1)
                if at < 0 or not content.startswith(needle, at):
                    at = content.find(needle)
                if at >= 0:
                    self.seen[needle] = at
                    break
            else:
                return False
        return True


class Ledger:
    """The kept answers, oldest first, bounded (appends are atomic: the hook and the analysis share it)."""

    def __init__(self) -> None:
        self._answers: deque[Answer] = deque(maxlen=ANSWERS)

    def add(self, answer: Answer) -> None:
        self._answers.append(answer)

    def __bool__(self) -> bool:
        return bool(self._answers)

    def candidates(self, api: str, origin: str, before: int | None = None) -> list[Answer]:
        """The kept answers of ``api`` from ``origin`` (before capture ``before``, when given)."""
        return [
            a
            for a in tuple(self._answers)
            if a.api == api and a.origin == origin and (before is None or a.index < before)
        ]


def check(
    room: Room, answers: Iterable[Answer], model: str, body: dict[str, Any], *, mend: bool
) -> list[tuple[Answer, ReplayFinding]]:
    """``body`` compared with each of ``answers`` of ``model``; with ``mend``, restored in place where the
    answer is the only one holding its anchors (an ambiguous match is reported, never mended)."""
    same = [a for a in answers if a.model_in(room) == model]
    owners: dict[str, set[str]] = {}
    for a in same:
        for anchor in a.source.anchors:
            owners.setdefault(anchor, set()).add(a.source.digest)
    out: list[tuple[Answer, ReplayFinding]] = []
    for a in same:
        unambiguous = all(len(owners[x]) == 1 for x in a.source.anchors)
        for finding in room.check_replay(a.source, body, mend=mend and unambiguous):
            out.append((a, finding))
    return out


def needs_parse(answers: Sequence[Answer], content: bytes) -> list[Answer]:
    """The answers ``content`` may replay (it holds a mark of theirs) when one of them may be replayed
    unfaithfully; none when every answer's payloads are there verbatim and where a payload sits does not
    matter (the fast path: no parse; a chain's body is checked where each payload was last found)."""
    unsure = [a for a in answers if a.source.positional or not a.carried_in(content)]
    if not any(m in content for a in unsure for m in a.source.marks):
        return []
    return [a for a in answers if any(m in content for m in a.source.marks)]


#: the JSON encodings the vendor SDKs send with (compact or spaced, ASCII-escaped or not)
_STYLES: tuple[dict[str, Any], ...] = (
    {"separators": (",", ":"), "ensure_ascii": False},
    {"separators": (",", ":"), "ensure_ascii": True},
    {"separators": (", ", ": "), "ensure_ascii": True},
    {"separators": (", ", ": "), "ensure_ascii": False},
)


def serialized(original: bytes, before: Any, after: Any) -> bytes | None:
    """``after`` in the encoding that gives ``before`` as exactly ``original``; None when no known
    encoding does (then nothing is mended: only the restored fields may change)."""
    for style in _STYLES:
        try:
            if json.dumps(before, **style).encode() == original:
                return json.dumps(after, **style).encode()
        except (TypeError, ValueError):
            return None
    return None


def mend(
    room: Room, answers: Sequence[Answer], path: str, content: bytes
) -> tuple[bytes | None, tuple[tuple[int, ReplayFinding], ...]]:
    """The mended body for a request to ``path`` with ``content`` (None: unchanged) and the findings, each
    with the index of the answer it compares with. Runs in the request path: parses only when
    :func:`needs_parse` says so."""
    marked = needs_parse(answers, content)
    if not marked:
        return None, ()
    body = json.loads(content)
    if not isinstance(body, dict):
        return None, ()
    model = room.model_from_path(path, body)
    found = check(room, marked, model, body, mend=True)
    findings = tuple((a.index, f) for a, f in found)
    if not any(f.kind == MENDED for _, f in findings):
        return None, findings
    new = serialized(content, json.loads(content), body)
    if new is None:
        skipped = ReplayFinding(
            "mend_skipped", "$", "the body's encoding could not be reproduced byte for byte"
        )
        return None, (*((i, f) for i, f in findings if f.kind != MENDED), (-1, skipped))
    return new, findings
