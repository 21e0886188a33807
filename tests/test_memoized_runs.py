"""The OpenAI codecs memoize the closed history as a run extended turn by turn (``ListRun``, as the Anthropic
and Gemini codecs do): whatever sequence of histories they encode (shorter, longer, an earlier view
rewritten, branches sharing turns), every request equals the one an encoding from scratch gives. Fresh turn
objects (``attrs.evolve``) memoize nothing, so they are the oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

import reasonstate as rs
from reasonstate.adapters.base import Encodings, compact
from reasonstate.state import Continuation, History, Turn, TurnView
from reasonstate.state.continuation import edits
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import CLOCK, THINKING, WEATHER, assert_memoized_runs_encode_as_fresh
from tests.test_session_openai_chat import MODELS, chain, follow_up, run_chain
from tests.test_session_openai_responses import answer
from tests.test_session_openai_responses import chain as responses_chain


def _grown(kind: str) -> tuple[rs.Session, str]:
    """A session of a tool chain, an empty answer and four more turns, on the kind's strict emulator."""
    if kind == "deepseek":
        actions = [*chain(), follow_up(1), ModelAction(), follow_up(2), follow_up(3), follow_up(4)]
        with OpenAIChatEmulator(actions, dialect="deepseek") as emu:
            model = MODELS["deepseek"]
            session = rs.Session(emu.client(), model=model, dialect="deepseek", tools=[WEATHER, CLOCK])
            _turns(session)
        return session, model
    actions = [*responses_chain(), answer(1), ModelAction(text="."), answer(2), answer(3), answer(4)]
    with OpenAIResponsesEmulator(actions) as emu:
        model = "gpt-5.5"
        session = rs.Session(emu.client(), model=model, tools=[WEATHER, CLOCK], store=kind == "stored")
        _turns(session)
    return session, model


def _turns(session: rs.Session) -> None:
    run_chain(session)
    for question in ("One?", "Nothing?", "Two?", "Three?", "Four?"):
        session.send(question)


@pytest.mark.parametrize("kind", ["deepseek", "responses", "stored"])
def test_the_memoized_closed_history_encodes_as_a_fresh_one_whatever_the_order_of_requests(kind: str) -> None:
    session, _model = _grown(kind)
    assert_memoized_runs_encode_as_fresh(session)


def test_a_payload_edited_in_memory_in_a_memoized_closed_turn_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session, _model = _grown("responses")
    session.next_request("Warm?")  # the run is memoized now
    payload = next(c for c in session.continuation if c.kind == "reasoning")
    edit: Callable[[Any, str, Any], None] = object.__setattr__
    edit(payload, "payload", payload.payload.replace(b"encrypted_content", b"encrypted_kontent"))
    with pytest.raises(rs.ContinuationMismatch):
        session.next_request("Edited?")


@pytest.mark.parametrize("field", ["payload", "_digest"])
def test_an_edit_after_the_run_was_checked_is_refused_and_undoing_it_sends_again(field: str) -> None:
    """Issue 21 (own CPU per request): a check looks again only at the payloads sealed since the last one
    while no continuation was edited in memory; an edit (of the payload or of its digest) is counted, so the
    next request checks the whole run and refuses it, and putting the very object back sends again. (The
    digest as kept, ``_digest``, is the payload object itself while they match: a wrong digest string set
    there is the edit.)"""
    session, _model = _grown("responses")
    first = compact(session.next_request("Warm?").kwargs)  # the run is memoized and checked now
    session.next_request("Again?")  # and checked once more, with nothing new to look at
    payload = next(c for c in session.continuation if c.kind == "reasoning")
    original = getattr(payload, field)
    count = edits()
    edit: Callable[[Any, str, Any], None] = object.__setattr__
    edit(
        payload,
        field,
        original.replace(b"encrypted_content", b"encrypted_kontent")
        if field == "payload"
        else "sha256:" + "0" * 64,
    )
    assert edits() > count
    with pytest.raises(rs.ContinuationMismatch):
        session.next_request("Edited?")
    edit(payload, field, original)
    assert compact(session.next_request("Warm?").kwargs) == first


def test_building_a_continuation_is_no_edit() -> None:
    count = edits()
    built = Continuation.capture(
        vendor="openai", api="responses", model="m", kind="reasoning", value={"a": 1}
    )
    attrs.evolve(built, model="n")
    Continuation.restored(
        vendor="openai", api="responses", model="m", kind="reasoning", payload=b"{}", model_bound=True
    )
    assert edits() == count


def _anthropic_with_merges() -> rs.Session:
    """Thinking turns with two empty answers inside (each sends no assistant message, so the next turn's
    user message is merged into its own: docs/protocols.md §4.2), on the strict Messages emulator."""
    return _with_merges("anthropic")


def _with_merges(kind: str) -> rs.Session:
    """Thinking turns with two empty answers inside (each sends no assistant message, so the next turn's
    user message is merged into its own: docs/protocols.md §4.2 Anthropic, §3.3 DeepSeek), on the kind's
    strict emulator."""
    empty = ModelAction()  # content [] / content "" without tool calls
    actions = [ModelAction.answer(f"A{i}.", reasoning=f"Thought {i}.") for i in range(7)]
    actions[2:2] = [empty]
    actions[5:5] = [empty]
    if kind == "deepseek":
        with OpenAIChatEmulator(actions, dialect="deepseek") as chat:
            session = rs.Session(chat.client(max_retries=0), model=MODELS["deepseek"], dialect="deepseek")
            for i in range(len(actions)):
                session.send(f"Q{i}?")
        return session
    with AnthropicEmulator(actions) as emu:
        session = rs.Session(
            emu.client(max_retries=0), model="claude-sonnet-4-6", max_tokens=4096, thinking=THINKING
        )
        for i in range(len(actions)):
            session.send(f"Q{i}?")
    return session


def test_the_anthropic_closed_history_with_merged_messages_encodes_as_a_fresh_one_in_any_order() -> None:
    """The memo keeps only the newest run and cuts it where a history stops sharing its turns; a cut right
    after an empty answer would keep the user message merged with the next turn's, so the cut falls
    earlier (docs/protocols.md §4.2). Every request equals the one a fresh encoding gives."""
    assert_memoized_runs_encode_as_fresh(_anthropic_with_merges())


def test_the_deepseek_closed_history_with_joined_user_messages_encodes_as_a_fresh_one_in_any_order() -> None:
    """DeepSeek's joined user messages (docs/protocols.md §3.3) inside the memoized ``ListRun``: a cut right
    after an empty answer would keep the joined message, so the cut falls earlier, as on Anthropic."""
    assert_memoized_runs_encode_as_fresh(_with_merges("deepseek"))


@pytest.mark.parametrize("kind", ["anthropic", "deepseek"])
def test_a_history_rewritten_right_after_an_empty_answer_cuts_the_run_before_the_merge(kind: str) -> None:
    session = _with_merges(kind)
    turns, memo = session.history.turns, session._encodings
    adapter, prefix, options = session._adapter, session.prefix, dict(session._options)

    def body(history: tuple[Turn, ...], encodings: Encodings) -> bytes:
        full = History((*history, Turn(index=len(history), user="Next?")))
        return compact(adapter.encode(prefix, full, session.model, options, [], encodings=encodings).kwargs)

    empty = next(i for i, t in enumerate(turns) if not t.steps[0].text)  # no parts, or an empty text
    body(turns, memo)  # the newest run: every turn
    for j in (empty + 1, empty, empty + 2):  # the turn merged into the empty one's message, and around it
        dropped = attrs.evolve(turns[j], view=TurnView((False,), policy="drop"))
        rewritten = (*turns[:j], dropped, *turns[j + 1 :])
        assert body(rewritten, memo) == body(tuple(attrs.evolve(t) for t in rewritten), Encodings())
        assert body(turns, memo) == body(tuple(attrs.evolve(t) for t in turns), Encodings())


@pytest.mark.parametrize("kind", ["anthropic", "deepseek", "responses"])
def test_the_next_turn_is_appended_to_the_run_in_place_and_the_earlier_run_reads_as_before(kind: str) -> None:
    """Issue 21 (own CPU per request): extending the newest run appends the closed turn's items to lists the
    runs share (no copy of the earlier turns'); the earlier run still reads exactly what it held, and a run
    extended from it afterwards (a branch) gets its own lists."""
    session = _with_merges(kind) if kind != "responses" else _grown("responses")[0]
    memo = session._encodings
    session.next_request("Now?")
    (key,) = memo._runs
    before = memo.newest(key)
    held = (tuple(before.turns), tuple(before.units), tuple(before.seals.sealed), len(before.seals))
    with_answer = session.history.turns
    adapter, prefix, options = session._adapter, session.prefix, dict(session._options)

    def encode(history: tuple[Turn, ...]) -> Any:
        full = History((*history, Turn(index=len(history), user="Next?")))
        return adapter.encode(prefix, full, session.model, options, [], encodings=memo)

    extra = attrs.evolve(with_answer[-1], index=len(with_answer))
    grown = (*with_answer, extra)
    encode(grown)
    after = memo.newest(key)
    assert len(after.turns) == len(before.turns) + 1
    assert after.turn_shelf is before.turn_shelf  # in place
    if kind == "anthropic":
        # the units are read out of the newest request's own, not copied into a shelf of the run's
        assert after.unit_tail == b"" and before.unit_tail == b"" and after.unit_src is not before.unit_src
    else:
        assert after.unit_shelf is before.unit_shelf  # in place
    assert after.seals._sealed is before.seals._sealed
    assert (tuple(before.turns), tuple(before.units), tuple(before.seals.sealed), len(before.seals)) == held
    before.check()
    # a branch from the earlier run: its own lists, and the newest run's items unchanged
    other = attrs.evolve(with_answer[-1], index=len(with_answer), user="Another?")
    branch = (*with_answer, other)
    fresh = adapter.encode(
        prefix,
        History((*tuple(attrs.evolve(t) for t in branch), Turn(index=len(branch), user="Next?"))),
        session.model,
        options,
        [],
        encodings=Encodings(),
    )
    assert compact(encode(branch).kwargs) == compact(fresh.kwargs)
    assert tuple(after.turns)[-1] is extra
    assert compact(encode(grown).kwargs) == compact(encode(tuple(attrs.evolve(t) for t in grown)).kwargs)


def test_no_session_appends_to_a_codec_s_shared_empty_run() -> None:
    """A codec's empty run is a module constant every session's first run extends: extending it always
    makes new lists, so nothing of one session is kept in (or read through) the constant."""
    from reasonstate.adapters import openai_responses

    _grown("responses")
    empty = openai_responses._EMPTY_RUN
    # the units are packed, 32 bytes each (issue 21): an empty bytearray
    assert empty.turn_shelf == [] and empty.value_shelf == [] and empty.unit_shelf == bytearray()
    assert empty.seals._sealed == [] and len(empty.cuts) == 0


def test_an_anthropic_run_reads_its_units_out_of_the_newest_request_s() -> None:
    """Issue 21 (state in memory): the closed history's unit digests are kept once, in the newest request's
    units (which the records keep), not again in the run of closed turns; restored, the same."""
    actions = [ModelAction.answer(f"A{i}.", reasoning=f"Thought {i}.") for i in range(5)]
    with AnthropicEmulator(actions) as emu:
        session = rs.Session(
            emu.client(max_retries=0), model="claude-sonnet-4-6", max_tokens=4096, thinking=THINKING
        )
        for i in range(len(actions)):
            session.send(f"Q{i}?")
    memo = session._encodings
    (key,) = memo._runs
    run = memo.newest(key)
    newest = session.execution.newest_units()
    assert run.unit_src is newest.raw and run.unit_tail == b""
    assert tuple(run.units) == tuple(newest[run.offset : run.offset + len(run.units)])
    cut, j = run.prefix(len(run.turns) - 1)
    assert tuple(cut.units) == tuple(run.units[: len(cut.units)]) and 0 < j < len(run.turns)
    assert_memoized_runs_encode_as_fresh(session)


def test_an_anthropic_run_s_cuts_widen_when_a_figure_does_not_fit_two_bytes() -> None:
    """Issue 21 (state in memory): a run's cuts take 2 bytes a figure while they fit; a larger one widens
    them in a copy, and the run sharing the narrow shelf reads what it held."""
    import array

    from reasonstate.adapters.anthropic import _cut_shelf, _narrow_cuts

    narrow = _cut_shelf(_narrow_cuts(), 0, [1, 2, 0, 1])
    grown = _cut_shelf(narrow, 4, [3, 4, 0, 2])
    assert grown is narrow and grown.typecode == "H" and list(grown) == [1, 2, 0, 1, 3, 4, 0, 2]
    wide = _cut_shelf(narrow, 4, [5, 70_000, 0, 3])
    assert wide.typecode == "I" and list(wide) == [1, 2, 0, 1, 5, 70_000, 0, 3]
    assert list(narrow) == [1, 2, 0, 1, 3, 4, 0, 2]
    assert _cut_shelf(wide, 8, [6, 70_001, 0, 4]) is wide and isinstance(wide, array.array)
