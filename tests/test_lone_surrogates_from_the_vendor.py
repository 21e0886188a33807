"""Vendor text that is not valid Unicode (issue 23, item 1, the reply's half). A lone surrogate (``\\ud800``,
half of a UTF-16 pair) is a valid JSON escape but has no UTF-8 form. In 2,200 fuzzed replies every untyped
exception came from one: in a reply block ``send()`` raised a bare ``UnicodeEncodeError`` from
``continuation.compact``; an emoji split across two stream deltas did the same although the joined text is
valid; in reply metadata (``id``, ``model``, Gemini ``responseId``) the reply was committed and every later
``snapshot()`` raised. The rule (docs/protocols.md §0.3): an answer holding a lone surrogate is
:class:`MalformedResponse` and nothing changes; a pair cut across deltas is joined first and commits as its
character, which snapshots, restores and goes back byte-identically.

Each answer here is the emulator's own answer to the session's real request, with its bytes edited by hand
(the escapes written as a vendor would write them), served raw through the real SDKs (``Fault.raw``)."""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from urllib.request import Request, urlopen

import pytest

import reasonstate as rs
from reasonstate.store import SQLiteStore
from reasonstate.testing import Fault, ModelAction
from tests.test_switching import FAMILIES, Vendor

EMOJI = "\U0001f600"
#: characters per streamed delta in each emulator: "§" ends a delta and "¶" starts the next
SPLIT_TEXT = {"anthropic": "§¶", "gemini": "§¶", "responses": "abcdefg§¶", "deepseek": "abcdefg§¶"}


def _session(v: Vendor, stream: bool) -> rs.Session:
    return rs.Session(v.client, model=v.model, stream=stream, **v.options)


def _raw_answer(v: Vendor) -> tuple[bytes, str]:
    """The emulator's answer to the session's last request sent again: its exact bytes and content type."""
    last = v.emulator.requests[-1]
    dropped = ("content-length", "host", "accept-encoding")
    headers = {k: val for k, val in last.headers.items() if k not in dropped}
    query = f"?{urlencode(last.query, doseq=True)}" if last.query else ""
    request = Request(v.emulator.base_url + last.path + query, data=last.body, headers=headers, method="POST")
    with urlopen(request, timeout=10) as got:  # the emulator answers 200 or urlopen raises
        return bytes(got.read()), str(got.headers["content-type"])


def _serve_edited(v: Vendor, session: rs.Session, text: str, edit: Any) -> bytes:
    """Commit one ordinary answer, then queue the emulator's next answer (``text``) with ``edit`` applied
    to its bytes, served raw to the session's next request; the edited bytes."""
    v.emulator.script.extend([ModelAction(text="Fine."), ModelAction(text=text), ModelAction(text="Done.")])
    session.send("hi")
    body, content_type = _raw_answer(v)
    edited = edit(body)
    assert edited != body
    v.emulator.inject(Fault.raw(200, edited, content_type))
    return bytes(edited)


def _chars(body: bytes, **escapes: str) -> bytes:
    """``body`` with each of § and ¶ (as the emulator wrote them: UTF-8 or a ``\\u`` escape) replaced."""
    for char, escape in (("§", escapes.get("section", "")), ("¶", escapes.get("pilcrow", ""))):
        if escape:
            code = f"\\u{ord(char):04x}".encode()
            body = body.replace(char.encode(), escape.encode()).replace(code, escape.encode())
    return body


def _snapshot_round_trip(session: rs.Session, v: Vendor) -> rs.Session:
    """The session snapshotted and restored: the restored session's snapshot holds the same bytes (all
    but the trace, which gains its ``session.restored`` event, and the seal over it)."""
    taken = session.snapshot()
    restored = rs.Session.restore(taken.model_dump_json(), v.client)
    again = restored.snapshot()
    kept = {"trace", "digest"}
    assert again.model_dump_json(exclude=kept) == taken.model_dump_json(exclude=kept)
    assert restored.trace.events[:-1] == session.trace.events
    return restored


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_lone_surrogate_in_reply_text_is_malformed_and_changes_nothing(family: str, stream: bool) -> None:
    with ExitStack() as stack:
        v = Vendor(family, stack)
        session = _session(v, stream)
        _serve_edited(v, session, "§", lambda b: _chars(b, section="\\ud800"))
        before = session.history
        with pytest.raises(rs.MalformedResponse, match=r"'\\ud800' at index 0: half of a UTF-16 surrogate"):
            session.send("again")
        assert session.history == before and session.state is rs.TurnState.IDLE
        _snapshot_round_trip(session, v)
        assert session.send("once more").text == "Done."  # and goes on: the refused answer left nothing


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("family", FAMILIES)
def test_an_emoji_split_across_two_deltas_commits_as_the_emoji(family: str, stream: bool) -> None:
    with ExitStack() as stack:
        v = Vendor(family, stack)
        session = _session(v, stream)
        edited = _serve_edited(
            v, session, SPLIT_TEXT[family], lambda b: _chars(b, section="\\ud83d", pilcrow="\\ude00")
        )
        if stream:
            assert b'\\ud83d"' in edited and b'"\\ude00' in edited  # one delta ends mid-pair
            with session.stream("again") as s:
                deltas = [e.delta for e in s if e.kind == "text"]
            reply = s.reply
            assert "".join(deltas) == reply.text and all(d.encode() for d in deltas)  # no half shown
        else:
            reply = session.send("again")
        assert reply.text == SPLIT_TEXT[family].replace("§¶", EMOJI)
        restored = _snapshot_round_trip(session, v)
        assert restored.send("once more").text == "Done."  # the strict emulator accepted the replay
        sent = v.emulator.requests[-1].body
        assert EMOJI.encode() in sent or b"\\ud83d\\ude00" in sent.lower()


_METADATA = {
    "id": rb'"(id|responseId)":"',
    "model": rb'"(model|modelVersion)":"',
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("field", sorted(_METADATA))
@pytest.mark.parametrize("family", FAMILIES)
def test_a_lone_surrogate_in_reply_metadata_is_malformed_and_the_session_still_snapshots(
    family: str, field: str, stream: bool
) -> None:
    with ExitStack() as stack:
        v = Vendor(family, stack)
        session = _session(v, stream)
        _serve_edited(v, session, "Sure.", lambda b: re.sub(_METADATA[field], rb'"\1":"\\udc00', b))
        before = session.history
        with pytest.raises(rs.MalformedResponse, match=r"'\\udc00' at index 0"):
            session.send("again")
        assert session.history == before and session.state is rs.TurnState.IDLE
        _snapshot_round_trip(session, v)
        assert session.send("once more").text == "Done."


@pytest.mark.parametrize("family", FAMILIES)
def test_what_commits_around_surrogates_is_stored_and_loads_byte_identically(
    family: str, tmp_path: Path
) -> None:
    """The journal's deltas too: a split emoji committed, then an answer with a lone half refused; the
    store holds exactly what the session holds."""
    with ExitStack() as stack:
        v = Vendor(family, stack)
        store = SQLiteStore(tmp_path / "s.db")
        session = rs.Session(v.client, model=v.model, stream=True, store=store, session_id="s", **v.options)
        _serve_edited(
            v, session, SPLIT_TEXT[family], lambda b: _chars(b, section="\\ud83d", pilcrow="\\ude00")
        )
        assert EMOJI in session.send("again").text
        v.emulator.script.extend([ModelAction(text="§")])
        session.send("a third")
        body, content_type = _raw_answer(v)
        v.emulator.inject(Fault.raw(200, _chars(body, section="\\udfff"), content_type))
        with pytest.raises(rs.MalformedResponse):
            session.send("a fourth")
        loaded = rs.Session.load(SQLiteStore(tmp_path / "s.db"), "s", v.client)
        assert loaded.history == session.history and loaded.execution == session.execution
        kept = {"trace", "digest"}
        assert loaded.snapshot().model_dump_json(exclude=kept) == session.snapshot().model_dump_json(
            exclude=kept
        )


def test_a_body_read_as_plain_text_decodes_to_valid_unicode_only() -> None:
    """Issue 21 item 4: the engine skips its own pass over an answer when the transport read off the bytes
    that every string is valid Unicode (``plain_text``); that must never let a lone surrogate through, in
    whatever way a body spells one (escape in either case, encoded bytes, a UTF-16 body)."""
    import json

    from hypothesis import given
    from hypothesis import strategies as st

    from reasonstate.adapters.transport import plain_text
    from reasonstate.state.continuation import compact

    texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=8)
    values = st.recursive(texts, lambda inner: st.dictionaries(texts, inner, max_size=3), max_leaves=6)

    @given(values, st.sampled_from(["ascii", "raw", "upper", "utf-16"]))
    def check(value: Any, spelling: str) -> None:
        text = json.dumps(value, ensure_ascii=spelling in ("ascii", "upper"))
        if spelling == "upper":
            text = re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), text)
        body = text.encode("utf-16-le" if spelling == "utf-16" else "utf-8", "surrogatepass")
        if plain_text(body):
            compact(json.loads(body))  # no UnicodeEncodeError: every string has a UTF-8 form

    check()
    assert plain_text('{"text": "naïve 😀"}'.encode()) and not plain_text(b'{"t": "\\ud83d"}')
