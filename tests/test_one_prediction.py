"""One cache prediction (issue 21 item 5): every figure that predicts a cache read comes from one function
over the same rules (:func:`reasonstate.cache.rules.predict_request`), so they agree.

Three places predict a cache read: each request (``ExecutionRecord.predicted_cache_read``, the
``request.sent`` event), the ``policy.decision`` event (``predicted_cache_read`` of the next request,
``keep_cache_read`` of the next request had the policy kept everything) and the guard
(``GuardRecord.predicted_cache_read``). Before, the decision took the last request's prompt tokens as the
prediction of a keep-all turn, which ignores the vendor's minimum and rounding (Anthropic 129 where the next
request is predicted and reads 0; Responses 1,422 where it reads 1,408; Gemini 157 where it reads 0), and
the guard keyed a DeepSeek plain answer with the ``reasoning_content`` the server does not read, so it
predicted the persisted output unit's 1,429 where the session predicts (and DeepSeek reads) 1,352.

Everything here drives the real SDK clients over HTTP against the emulators; the oracles are the emulators'
reported cache reads and the session's own per-request figures, never the predictor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.policies import Drop, Keep, Policy
from reasonstate.state import EventKind, ExecutionRecord
from reasonstate.testing import (
    AnthropicEmulator,
    GeminiEmulator,
    ModelAction,
    OpenAIChatEmulator,
    OpenAIResponsesEmulator,
    ToolCallSpec,
)
from tests.conftest import CLOCK, WEATHER

#: below every vendor's minimum cacheable prompt, and above all of them (Gemini 2.5: 2,048 tokens)
SHORT = "Be brief."
LONG = "You are a careful travel assistant. " + "Always check the weather before advising. " * 240
QUESTIONS = ("Paris?", "And tomorrow?", "And next week?")


def _script() -> list[ModelAction]:
    """Per question: reasoning and a weather call, then reasoning and an answer."""
    actions: list[ModelAction] = []
    for i in range(len(QUESTIONS)):
        actions.append(
            ModelAction.call(
                ToolCallSpec("get_weather", {"city": "Paris"}), reasoning=f"Weather first {i}. " * 5
            )
        )
        actions.append(ModelAction.answer(f"Answer {i}. " * 20, reasoning=f"Thinking about it {i}. " * 6))
    return actions


#: vendor → (emulator factory, model, session options)
VENDORS: dict[str, tuple[Callable[[], Any], str, dict[str, Any]]] = {
    "anthropic": (lambda: AnthropicEmulator(_script()), "claude-sonnet-4-6", {}),
    "responses": (lambda: OpenAIResponsesEmulator(_script()), "gpt-5", {}),
    "deepseek": (
        lambda: OpenAIChatEmulator(_script(), dialect="deepseek"),
        "deepseek-v4-pro",
        {"dialect": "deepseek"},
    ),
    "gemini": (lambda: GeminiEmulator(_script()), "gemini-2.5-flash", {}),
}


def _conversation(
    vendor: str, system: str, policy: Policy, *, guarded: bool = False, read: bool = False
) -> tuple[rs.Session, rs.Guard | None]:
    """Three turns of a question, a tool call and an answer, on ``vendor``'s emulator (closed after).
    ``read``: the trace is read after every call (each decision's effect is then computed on its own
    before the next request, rather than given by the next request)."""
    make, model, options = VENDORS[vendor]
    with make() as emulator:
        client = emulator.client()
        guard = rs.instrument(client) if guarded else None  # watches the session's own requests
        session = rs.Session(
            client, model=model, system=system, tools=[WEATHER, CLOCK], policy=policy, **options
        )
        for question in QUESTIONS:
            reply = session.send(question)
            while reply.tool_calls:
                if read:
                    list(session.trace)
                reply = session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
            if read:
                list(session.trace)
    return session, guard


def _decisions(session: rs.Session) -> list[dict[str, Any]]:
    return [dict(e.data) for e in session.trace.of_kind(EventKind.POLICY_DECISION)]


def _first_request_of(session: rs.Session, turn: int) -> ExecutionRecord:
    return next(r for r in session.execution if r.turn == turn)


@pytest.mark.parametrize("policy", [Keep(), Drop()], ids=["keep", "drop"])
@pytest.mark.parametrize("system", [SHORT, LONG], ids=["short", "long"])
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_policy_decision_predicts_what_the_next_request_is_predicted_and_reads(
    vendor: str, system: str, policy: Policy
) -> None:
    session, _ = _conversation(vendor, system, policy)
    decisions = _decisions(session)
    assert [d["turn"] for d in decisions] == [0, 1, 2]
    for decision in decisions[:-1]:
        # the next request is built on the history as decided, nothing changed in between
        following = _first_request_of(session, decision["turn"] + 1)
        assert decision["predicted_cache_read"] == following.predicted_cache_read, (decision, following)
        assert decision["divergence_unit"] == following.divergence
        if following.predicted_cache_read is not None:  # exact wherever it is knowable
            assert following.predicted_cache_read == following.usage.cache_read
    if system == LONG and isinstance(policy, Keep):
        # the cache was really read: the agreement is not 0 == 0
        assert _first_request_of(session, 1).usage.cache_read > 1024


@pytest.mark.parametrize("policy", [Keep(), Drop()], ids=["keep", "drop"])
@pytest.mark.parametrize("system", [SHORT, LONG], ids=["short", "long"])
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_decision_read_before_the_next_request_predicts_the_same(
    vendor: str, system: str, policy: Policy
) -> None:
    # a keep-all decision's effect is given by the next request when nobody read it before; read at once,
    # it is computed from the history as decided: the figures are the same
    unread, _ = _conversation(vendor, system, policy)
    read, _ = _conversation(vendor, system, policy, read=True)
    assert _decisions(read) == _decisions(unread)
    for decision in _decisions(read)[:-1]:
        following = _first_request_of(read, decision["turn"] + 1)
        assert decision["predicted_cache_read"] == following.predicted_cache_read, (decision, following)
        assert decision["divergence_unit"] == following.divergence
    assert [e.kind for e in read.trace] == [e.kind for e in unread.trace]


@pytest.mark.parametrize("system", [SHORT, LONG], ids=["short", "long"])
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_keep_cache_read_is_what_the_next_request_reads_when_the_policy_keeps_everything(
    vendor: str, system: str
) -> None:
    # the same conversation twice (the emulators are deterministic), up to turn 0's close identical
    dropped, _ = _conversation(vendor, system, Drop())
    kept, _ = _conversation(vendor, system, Keep())
    decision = _decisions(dropped)[0]
    following = _first_request_of(kept, 1)
    if "keep_cache_read" not in decision:  # the rules kept every step (DeepSeek's tool-call reasoning)
        assert decision["predicted_cache_read"] == following.predicted_cache_read
        return
    assert decision["keep_cache_read"] == _decisions(kept)[0]["predicted_cache_read"]
    assert decision["keep_cache_read"] == following.predicted_cache_read == following.usage.cache_read
    predicted = decision["predicted_cache_read"]
    if predicted is not None:
        assert decision["cache_tokens_lost"] == decision["keep_cache_read"] - predicted


@pytest.mark.parametrize("system", [SHORT, LONG], ids=["short", "long"])
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_guard_watching_a_session_predicts_what_the_session_predicts(vendor: str, system: str) -> None:
    session, guard = _conversation(vendor, system, Keep(), guarded=True)
    assert guard is not None
    records = guard.records
    assert len(records) == len(session.execution) == 2 * len(QUESTIONS)
    assert [g.predicted_cache_read for g in records] == [r.predicted_cache_read for r in session.execution]
    assert [g.reported_cache_read for g in records] == [r.usage.cache_read for r in session.execution]
    assert [g.predicted_cache_read for g in records] == [g.reported_cache_read for g in records]
    assert all(g.warnings == () for g in records), [g.warnings for g in records]
