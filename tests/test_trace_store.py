"""The trace layer's storage (issue 21, "Cost at both ends"): an append-only store shared by the values
extended from one another, events kept compact and built on access, the snapshot's compact form.

* extending the newest value allocates in proportion to the events added, not to the trace;
* two values extended from one base (a retry, a discarded attempt) never see each other's events;
* every event reads back exactly as appended (same types, same key order, same export bytes), data the
  codec does not hold included;
* a snapshot's trace reads back equal, and an edited one is refused.
"""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.export.jsonl import event_line
from reasonstate.snapshot import trace_from_snapshot
from reasonstate.state import EventKind, FrozenDict, FrozenList, Trace, TraceEvent, freeze, thaw
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from tests.conftest import make_session


def _digest(*parts: Any) -> str:
    return "sha256:" + hashlib.sha256(repr(parts).encode()).hexdigest()


def _batch(turn: int) -> list[tuple[str, dict[str, Any]]]:
    """One request's events as the engine emits them (the shapes of an Anthropic turn)."""
    return [
        (EventKind.TURN_OPENED, {"turn": turn, "user": f"question {turn}?"}),
        (
            EventKind.REQUEST_SENT,
            {
                "index": turn,
                "request_digest": _digest("r", turn),
                "bytes": 300 * turn,
                "prefix_fingerprint": _digest("prefix"),
                "divergence": None,
                "predicted_cache_read": 60 * turn,
            },
        ),
        (
            EventKind.RESPONSE_RECEIVED,
            {"index": turn, "stop_reason": "end_turn", "usage": {"cache_read": 60 * turn, "output": 19}},
        ),
        (
            EventKind.REASONING,
            {"turn": turn, "text": "Short thought.", "payload_digests": [_digest("p", turn)]},
        ),
        (EventKind.TURN_CLOSED, {"turn": turn, "steps": 1}),
    ]


def _grown(turns: int) -> Trace:
    trace = Trace()
    for turn in range(turns):
        trace = trace.extended(_batch(turn))
    return trace


def _allocated_by_extending(trace: Trace) -> int:
    batch = _batch(len(trace))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        trace.extended(batch)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_extending_the_newest_trace_allocates_for_the_events_added_not_for_the_trace() -> None:
    small, large = _grown(20), _grown(4_000)  # 100 and 20,000 events
    assert len(large) == 20_000
    # the earlier tuple copy allocated 8 bytes per event held (160 KB here) on every request
    assert _allocated_by_extending(large) < 3 * _allocated_by_extending(small) + 16_384


def test_values_extended_from_one_base_never_see_each_others_events() -> None:
    base = _grown(3)
    before = list(base)
    first = base.appended(EventKind.CALL_FAILED, error="timeout")
    retry = base.extended(_batch(3)).extended(_batch(4))  # extended twice: read past its newest batch
    again = first.appended(EventKind.TURN_CLOSED, turn=3, steps=0).appended("custom.kind", n=1)
    kinds = [k for k, _ in _batch(0)]
    assert len(base) == 15 and list(base) == before
    assert [e.kind for e in first][15:] == [EventKind.CALL_FAILED] and len(first) == 16
    assert [e.kind for e in retry][15:] == kinds + kinds
    assert [e.data for e in retry][15:] == [freeze(d) for _, d in _batch(3) + _batch(4)]
    assert [e.kind for e in again][15:] == [EventKind.CALL_FAILED, EventKind.TURN_CLOSED, "custom.kind"]
    assert [e.seq for e in again] == list(range(18)) and [e.seq for e in retry] == list(range(25))
    assert Trace(retry.events) == retry and Trace(again.events) == again


_ODD: dict[str, Any] = {
    "digest": _digest("x"),
    "upper": "sha256:" + "AB" * 32,  # not a lower-case digest: kept as written
    "tilde": "~#0",
    "tildes": "~~",
    "nested": {"12": {"keep_reasoning": [True, False], "summary": None}, "n": [1, 2.5, -0.0, 10**30]},
    "flags": [True, 1, False, 0],
    "text": "naïve — 日本 \n",
    "empty": {},
    "list": [],
    "tuple": (1, "two"),
}


def test_every_event_reads_back_as_appended_with_its_types_key_order_and_export_bytes() -> None:
    trace = Trace().extended([("custom.kind", _ODD), ("custom.kind", _ODD)])
    trace = trace.appended("other", value={1, 2})  # not JSON: kept as the event it is
    rebuilt = Trace(trace.events)  # built from events
    # decoded from the store's bytes: the newest events are encoded in batches, a compact copy reads all
    decoded = Trace.from_compact(Trace(trace.events[:2]).to_compact())
    assert [e.data for e in decoded] == [e.data for e in trace.events[:2]]
    assert [[type(v) for v in e.data["flags"]] for e in decoded] == [[bool, int, bool, int]] * 2
    for got in (trace, rebuilt):
        first, second, odd = got.events
        for event in (first, second):
            assert event.data == freeze(_ODD)  # what the event held as built (a tuple is a list)
            assert list(event.data) == list(_ODD) and list(event.data["nested"]) == ["12", "n"]
            assert [type(v) for v in event.data["flags"]] == [bool, int, bool, int]
            assert type(event.data["nested"]) is FrozenDict and type(event.data["tuple"]) is FrozenList
            with pytest.raises(TypeError):
                event.data["nested"]["n"].append(3)  # type: ignore[attr-defined]
        assert event_line(first, "s") == event_line(TraceEvent(0, "custom.kind", _ODD, first.at), "s")
        assert odd.data == {"value": {1, 2}}
    assert rebuilt == trace and trace.of_kind("custom.kind") == [first, second]
    lone = Trace.from_compact(Trace().appended("k", text="a lone \ud800 surrogate").to_compact())
    assert lone.events[0].data == {"text": "a lone \ud800 surrogate"}


def test_events_read_alike_before_and_after_their_batch_is_encoded() -> None:
    """Issue 21 item 4: the newest events are encoded in batches (a fresh session's few never are); a
    reader, a fork and the compact form see the same events whichever side of a batch they fall on."""
    for turns in (1, 6, 7, 13):  # 5 events a turn: 5, 30, 35 and 65 events, batches of 32
        trace = _grown(turns)
        expected = [(e.seq, e.kind, e.data, e.at) for e in trace]
        assert [e.data for e in trace] == [freeze(d) for t in range(turns) for _, d in _batch(t)]
        back = Trace.from_compact(trace.to_compact())
        assert [(e.seq, e.kind, e.data, e.at) for e in back] == expected
        twin = trace.extended(_batch(turns))
        other = trace.appended("custom.kind", n=2)  # a fork of the same base: a copy of its events
        assert [(e.kind, e.data) for e in twin][-5:] == [(k, freeze(d)) for k, d in _batch(turns)]
        assert [(e.seq, e.kind, e.data, e.at) for e in other][:-1] == expected
        assert other.events[-1].data == {"n": 2} and len(other) == len(trace) + 1
        assert [(e.seq, e.kind, e.data, e.at) for e in trace] == expected


def test_forks_reads_and_kind_lookups_agree_across_compressed_chunks() -> None:
    """Issue 21: the store keeps its events in compressed chunks of 48; a value read, forked or copied at
    any length (inside a chunk, at its edge, in the open one) sees exactly its own events, and the kind
    lookups (no per-kind index is kept) agree with a scan of the events."""
    values = []
    trace = Trace()
    for turn in range(40):  # 200 events: four full chunks and an open one
        values.append(trace)
        trace = trace.extended(_batch(turn))
    expected = [(e.seq, e.kind, e.data, e.at) for e in trace]
    assert [(e.seq, e.kind, e.data, e.at) for e in reversed(trace.events)] == expected[::-1]
    for base in values[9:12] + values[19:21] + [values[-1]]:  # lengths 45..55, 95, 100, 195
        n = len(base)
        assert [(e.seq, e.kind, e.data, e.at) for e in base] == expected[:n]
        fork = base.appended("custom.fork", n=n)  # the store holds more: a copy of this value's events
        assert [(e.seq, e.kind, e.data, e.at) for e in fork][:n] == expected[:n]
        assert fork.events[-1].data == {"n": n} and len(fork) == n + 1
        grown = fork.extended(_batch(99))
        assert [(e.kind, e.data) for e in grown][n + 1 :] == [(k, freeze(d)) for k, d in _batch(99)]
        back = Trace.from_compact(grown.to_compact())
        assert [(e.seq, e.kind, e.data, e.at) for e in back] == [(e.seq, e.kind, e.data, e.at) for e in grown]
        for t in (base, fork, back):
            for kind in (EventKind.REQUEST_SENT, EventKind.TURN_CLOSED, "custom.fork", "never.seen"):
                scan = [e.seq for e in t if e.kind == kind]
                assert list(t.positions(kind)) == scan and [e.seq for e in t.of_kind(kind)] == scan
                newest = t.last_of((kind,))
                assert (newest.seq if newest else None) == (scan[-1] if scan else None)
                before = t.last_of((kind,), before=len(t) // 2)
                half = [s for s in scan if s < len(t) // 2]
                assert (before.seq if before else None) == (half[-1] if half else None)
    assert [(e.seq, e.kind, e.data, e.at) for e in trace] == expected  # no fork changed the newest


def test_a_compact_trace_with_a_line_break_in_an_event_is_refused() -> None:
    """The store ends each event's bytes with a line break (compact JSON never holds one): an event whose
    bytes hold one (JSON whitespace, valid elsewhere) is refused when the trace is read."""
    import base64
    import zlib

    compact = Trace().extended([("custom.kind", {"k": [1, 2]})] * 9).to_compact()
    payload = zlib.decompress(base64.b64decode(compact["z"]))
    head, blob = payload.split(b"\n", 1)
    header = json.loads(head)
    shape = len(header["shapes"]) - 1  # the id of {"k": ...}: ids are process-wide, the header lists its own
    assert header["shapes"][shape] == ["k"]
    spaced = b"[%d,\n[-1,1,2]]" % shape
    assert json.loads(spaced) == json.loads(blob[: header["len"][0]])
    header["len"][0] = len(spaced)
    edited = json.dumps(header).encode() + b"\n" + spaced + blob[len(b"[%d,[-1,1,2]]" % shape) :]
    with pytest.raises(ValueError, match="line break"):
        Trace.from_compact({**compact, "z": base64.b64encode(zlib.compress(edited)).decode()})


def test_a_sessions_snapshot_holds_its_trace_compactly_reads_it_back_and_refuses_an_edit(
    emulator: AnthropicEmulator,
) -> None:
    session = make_session(emulator)
    emulator.script.extend([ModelAction.answer(f"Answer {t}.", reasoning="Thinking. " * 4) for t in range(6)])
    for turn in range(6):
        session.send(f"Question {turn}?")
    data = json.loads(session.snapshot().model_dump_json())
    assert data["trace"]["codec"] == "trace/1"
    events = [{"seq": e.seq, "kind": e.kind, "at": e.at, "data": thaw(e.data)} for e in session.trace]
    assert len(json.dumps(data["trace"])) * 3 < len(json.dumps(events))
    assert trace_from_snapshot(data["trace"]) == session.trace
    restored = rs.Session.restore(json.dumps(data), emulator.client())
    assert Trace(restored.trace.events[:-1]) == session.trace
    # the earlier form (a list of event dicts) still reads
    assert trace_from_snapshot(events) == session.trace
    edited = dict(data, trace=dict(data["trace"], z=data["trace"]["z"][:-8] + "AAAAAAA="))
    with pytest.raises(rs.SnapshotError):
        rs.Session.restore(json.dumps(edited), emulator.client())
    resealed = rs.SessionSnapshot.model_validate(edited).sealed()  # an edit on purpose, sealed again
    with pytest.raises(rs.SnapshotError):
        rs.Session.restore(resealed, emulator.client())


@pytest.mark.parametrize(
    "event",
    [
        # ``S``: the id of the one shape (``{"k": ...}``), ``A``: an id past the header's shapes (ids are
        # process-wide: the header lists the ones its events use, at their ids)
        b"[A,1]",  # a dict shape the header does not have
        b"[S,1,2,3]",  # shape S (one key) with three values
        b'[S,"~#7"]',  # a reference to a string the header does not have
        b'[S,"~abc"]',  # "~" and not a 32-byte digest in base64
        b"[S,[-1,[-5]]]",  # a negative dict shape inside a list
        b'[S,{"k":[]}]',  # an empty list where a shape id must be
        b"[S,",  # not JSON
    ],
)
def test_a_compact_trace_whose_event_bytes_do_not_decode_is_refused_when_read(event: bytes) -> None:
    """Issue 21: a restore checks each event's bytes without building the event (a 2,000-turn restore
    built ~12,000 events to throw them away); whatever would fail when the event is read later is refused
    when the trace is read. The event bytes are hand-written in the codec's documented form (a dict is
    ``[shape id, *values]``, ``~#n`` a shared string, ``~<base64>`` a digest)."""
    import base64
    import zlib

    good = Trace().extended([("custom.kind", {"k": "v"})] * 9)  # past one batch: the first 8 are encoded
    compact = good.to_compact()
    payload = zlib.decompress(base64.b64decode(compact["z"]))
    head, _ = payload.split(b"\n", 1)
    header = json.loads(head)
    shape = len(header["shapes"]) - 1
    assert header["shapes"][shape] == ["k"]
    event = event.replace(b"S", b"%d" % shape).replace(b"A", b"%d" % len(header["shapes"]))
    header["len"] = [len(event), *header["len"][1:]]
    first = header["len"][0]
    blob = payload.split(b"\n", 1)[1]
    rest = blob[len(json.dumps([shape, "v"], separators=(",", ":"))) :]
    edited = json.dumps(header, separators=(",", ":")).encode() + b"\n" + event + rest
    bad = {**compact, "z": base64.b64encode(zlib.compress(edited)).decode()}
    assert first == len(event)
    assert Trace.from_compact(compact).events[0].data == {"k": "v"}
    with pytest.raises(ValueError):
        Trace.from_compact(bad)


def _compact(header: dict[str, Any], lines: list[bytes], n: int) -> dict[str, Any]:
    """A ``trace/1`` value written by hand: the header line, then the event bytes."""
    import base64
    import zlib

    payload = json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(lines)
    return {"codec": "trace/1", "events": n, "z": base64.b64encode(zlib.compress(payload)).decode()}


def test_a_trace_written_with_other_shape_ids_reads_back_the_same_events() -> None:
    """Issue 21: dict shape ids are process-wide (no store keeps a table of its own); a snapshot written by
    another process (or by an earlier version, whose stores numbered their shapes from 0) names other ids
    for the same keys. Hand-written bytes in the documented form (``[shape id, *values]``, a header listing
    each id's keys) read back to the events they spell, and the trace writes and reads back again."""
    lines = [b'[0,"v",[1,7,null]]', b"[1,7,null]", b"[0,1,[-1,[1,2,3]]]"]
    header = {
        "kinds": ["custom.kind"],
        "k": [0, 0, 0],
        "rs": [0],
        "ra": [1.5],
        "len": [len(line) for line in lines],
        "shapes": [["k_issue21_a", "k_issue21_b"], ["k_issue21_c", "k_issue21_d"]],
        "strings": [],
        "raw": [],
    }
    # this process learns the shapes first, the other way round (a trace encodes its events when written)
    Trace().extended([("custom.kind", {"k_issue21_c": 0, "k_issue21_d": 0})]).to_compact()
    read = Trace.from_compact(_compact(header, lines, 3))
    want = [
        {"k_issue21_a": "v", "k_issue21_b": {"k_issue21_c": 7, "k_issue21_d": None}},
        {"k_issue21_c": 7, "k_issue21_d": None},
        {"k_issue21_a": 1, "k_issue21_b": [{"k_issue21_c": 2, "k_issue21_d": 3}]},
    ]
    assert [thaw(e.data) for e in read] == want
    assert [(e.seq, e.kind, e.at) for e in read] == [(i, "custom.kind", 1.5) for i in range(3)]
    again = Trace.from_compact(read.to_compact())
    assert again == read
    assert [thaw(e.data) for e in again.extended([("custom.kind", want[0])])] == [*want, want[0]]


def test_a_snapshot_carries_only_the_shapes_of_its_own_events() -> None:
    """The shape table is process-wide, the snapshot is not: another session's event keys never appear in
    a trace's compact form (an id its events do not use is an empty list there)."""
    import base64
    import zlib

    Trace().extended([("custom.kind", {"someone_elses_key_issue21": 1})]).to_compact()
    mine = Trace().extended([("custom.kind", {"my_key_issue21": {"inner_issue21": 2}})])
    payload = zlib.decompress(base64.b64decode(mine.to_compact()["z"]))
    shapes = json.loads(payload.split(b"\n", 1)[0])["shapes"]
    assert b"someone_elses_key_issue21" not in payload
    assert sorted(s for s in shapes if s) == [["inner_issue21"], ["my_key_issue21"]]
    assert Trace.from_compact(mine.to_compact()) == mine


def test_past_the_shape_limit_a_dict_is_kept_with_its_keys_written_or_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process-wide table stops learning at its limit: a dict of a shape it does not hold is kept with
    its keys, when an event is encoded and when a trace written elsewhere is read; the events are equal."""
    import reasonstate.state.trace as trace_module

    monkeypatch.setattr(trace_module, "_MAX_SHAPES", len(trace_module._SHAPES))
    data = {"full_issue21_a": {"full_issue21_b": [1, "x"]}, "n": None}
    written = Trace().extended([("custom.kind", data)] * 5)
    assert [thaw(e.data) for e in written] == [data] * 5
    read = Trace.from_compact(written.to_compact())
    assert read == written
    lines = [b'[0,[1,[-1,1,"x"]],null]']
    header = {"kinds": ["custom.kind"], "k": [0], "rs": [0], "ra": [2.0], "len": [len(lines[0])]}
    header |= {"shapes": [["full_issue21_c", "n"], ["full_issue21_b"]], "strings": [], "raw": []}
    other = Trace.from_compact(_compact(header, lines, 1))
    assert [thaw(e.data) for e in other] == [{"full_issue21_c": {"full_issue21_b": [1, "x"]}, "n": None}]
    assert Trace.from_compact(other.to_compact()) == other


def test_a_sessions_trace_names_only_the_seeded_shapes(emulator: AnthropicEmulator) -> None:
    """The shapes of a session's common events (plain turns, reasoning, the closing decision, a tool call,
    its run and its result) have the same ids in every process: a snapshot's header names none past them,
    so another process reads it back without rewriting an event."""
    import base64
    import zlib

    from reasonstate.state.trace import _SEEDED

    work = rs.Tool(name="work", parameters={"type": "object"}, handler=lambda **_: {"ok": True})
    session = make_session(emulator, tools=[work])
    emulator.script.extend(
        [
            ModelAction.answer("Answer.", reasoning="Thinking."),
            ModelAction.call(ToolCallSpec("work", {"n": 1}), reasoning="Calling."),
            ModelAction.answer("Done.", reasoning="Done thinking."),
        ]
    )
    session.send("First?")
    session.run("Second?")
    payload = zlib.decompress(base64.b64decode(session.trace.to_compact()["z"]))
    shapes = json.loads(payload.split(b"\n", 1)[0])["shapes"]
    kinds = set(session.trace.kinds())
    assert {EventKind.TOOL_CALLS, EventKind.TOOL_EXECUTED, EventKind.TOOL_RESULTS} <= kinds
    assert len(shapes) <= len(_SEEDED)
    assert all(s == [] or tuple(s) == _SEEDED[i] for i, s in enumerate(shapes))
