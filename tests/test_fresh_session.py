"""A fresh session costs what it does (issue 21, item 4): a service that builds a session per HTTP request
pays its construction and first ``send`` on every call (``benchmarks/fresh_session.py`` measures them).

What is held here, through the real SDK clients against the emulators: a session is not a reference cycle
(it is freed when its last reference goes, not at the garbage collector's next pass); the adapter and a
client type's kind are built once per process, not per session; the options are still checked at every
construction.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.adapters import adapter_for
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator


def _answer(_request: Any) -> ModelAction:
    return ModelAction(text="Short answer.")


@pytest.fixture(scope="module")
def anthropic_emulator() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator(_answer) as emu:
        yield emu


@pytest.fixture(scope="module")
def responses_emulator() -> Iterator[OpenAIResponsesEmulator]:
    with OpenAIResponsesEmulator(_answer) as emu:
        yield emu


@pytest.fixture(scope="module")
def chat_emulator() -> Iterator[OpenAIChatEmulator]:
    with OpenAIChatEmulator(_answer, dialect="deepseek") as emu:
        yield emu


@pytest.fixture(scope="module")
def gemini_emulator() -> Iterator[GeminiEmulator]:
    with GeminiEmulator(_answer) as emu:
        yield emu


def _sessions(request: pytest.FixtureRequest) -> list[tuple[str, Any, dict[str, Any]]]:
    anthropic_emu = request.getfixturevalue("anthropic_emulator")
    responses_emu = request.getfixturevalue("responses_emulator")
    chat_emu = request.getfixturevalue("chat_emulator")
    gemini_emu = request.getfixturevalue("gemini_emulator")
    return [
        ("anthropic", anthropic_emu.client(), {"model": "claude-sonnet-4-6", "max_tokens": 1024}),
        ("responses", responses_emu.client(), {"model": "gpt-5.5", "store": False}),
        ("deepseek", chat_emu.client(), {"model": "deepseek-v4-pro", "dialect": "deepseek"}),
        ("gemini", gemini_emu.client(), {"model": "gemini-3-flash"}),
    ]


@pytest.mark.parametrize("vendor", ["anthropic", "responses", "deepseek", "gemini"])
def test_a_session_is_freed_when_its_last_reference_goes(request: pytest.FixtureRequest, vendor: str) -> None:
    """Pain point: the publisher held a bound method of its session, so every session (its history, trace
    and records) was a reference cycle, kept until the collector's next pass; one per HTTP request piles up.
    """
    _name, client, options = next(s for s in _sessions(request) if s[0] == vendor)
    session = rs.Session(client, system="You answer briefly.", **options)
    session.send("Hello?")
    assert len(session.history) == 1
    gone = weakref.ref(session)
    enabled = gc.isenabled()
    gc.disable()  # only reference counting may free it
    try:
        del session
        assert gone() is None, "a session is a reference cycle: only the garbage collector frees it"
    finally:
        if enabled:
            gc.enable()


def test_sessions_share_one_adapter_per_api_and_still_check_their_options(
    request: pytest.FixtureRequest,
) -> None:
    """The adapter holds configuration only: one per API (and chat dialect) and process. Every
    construction still checks its options (a model that rejects manual thinking is refused)."""
    for _name, client, options in _sessions(request):
        first = rs.Session(client, **options)
        second = rs.Session(client, **options)
        assert first._adapter is second._adapter
        dialect = options.get("dialect")
        assert adapter_for(client, dialect=dialect) is first._adapter
    anthropic_client = _sessions(request)[0][1]
    enabled = {"type": "enabled", "budget_tokens": 2048}
    for _ in range(2):
        with pytest.raises(rs.InvalidOption, match="thinking"):
            rs.Session(anthropic_client, model="claude-opus-4-7", max_tokens=4096, thinking=enabled)


def test_a_session_with_exporters_gets_one_id_and_exports_under_it(
    anthropic_emulator: AnthropicEmulator,
) -> None:
    """The session id is drawn when first read; an exporter sees the same one for every transition."""
    seen: list[str] = []

    class Collect:
        def export(self, events: Any, context: Any) -> None:
            seen.append(context.session_id)

        def close(self, context: Any) -> None:
            seen.append(context.session_id)

    session = rs.Session(anthropic_emulator.client(), model="claude-sonnet-4-6", exporters=[Collect()])
    session.send("One?")
    session.send("Two?")
    session.close()
    assert len(seen) >= 3 and len(set(seen)) == 1 and len(seen[0]) == 32
    other = rs.Session(anthropic_emulator.client(), model="claude-sonnet-4-6", exporters=[Collect()])
    other.send("Three?")
    assert seen[-1] != seen[0]


@pytest.mark.parametrize("vendor", ["anthropic", "responses", "deepseek", "gemini"])
def test_a_first_send_without_exporters_encodes_its_request_once(
    request: pytest.FixtureRequest, vendor: str
) -> None:
    """Issue 21 item 4: a session without exporters handed its first commit's events to the logger's slow
    path (its publisher had never "started"), which read the trace and so completed the deferred
    ``policy.decision``: a second encode of the history on every fresh session's first ``send``. The
    decision stays deferred until someone reads it, and then says what the next request will do."""
    _name, client, options = next(s for s in _sessions(request) if s[0] == vendor)
    session = rs.Session(client, system="You answer briefly.", **options)
    session.send("Hello?")
    assert session.trace.deferred, "the first send read its own trace (a second encode)"
    decision = session.trace.of_kind("policy.decision")[-1]
    assert decision.data["divergence_unit"] is None
    assert decision.data["reprefill_tokens"] == 0
