"""The openai SDK gets the history through ``extra_body`` and sends the very bytes it sends without that.

``transport._history_in_extra_body`` hands a request's history list (``messages``, ``input``) to the
openai SDK's ``create`` as an empty list plus the same list in ``extra_body``, so the SDK's typed transform
(``maybe_transform``) does not walk it (issue 21: the fresh-session cost). The claim is that the bytes on
the wire are the same as when ``create`` is given the kwargs as they are. Held here with the REAL openai
SDK, each request of real sessions (Chat Completions in two dialects, Responses; tool chains with
reasoning, options, a caller's ``extra_body``) sent both ways — the transport as it is, and the same
transport with the history handed over as named arguments (the SDK's plain path) — unstreamed and
streamed, on a sync and an async client; every body must be byte-identical. The sessions themselves run
against the strict emulators.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import attrs
import httpx2
import openai
import pytest

import reasonstate as rs
from reasonstate.adapters import transport
from reasonstate.adapters.base import VendorRequest
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import CLOCK, WEATHER

ROOT = "http://in-process.invalid/v1"
#: the SDK's plain path: ``create`` given the kwargs as they are
PLAIN = transport._RawResponse()
#: the path the session takes for openai
UNTYPED = transport._TRANSPORTS["openai"]


def _chain() -> list[ModelAction]:
    return [
        ModelAction.call(
            ToolCallSpec("get_weather", raw_arguments='{ "city" :  "Paris" }'),
            ToolCallSpec("get_weather", raw_arguments='{"city":"Rome"  }'),
            reasoning="Two cities: call the weather tool for both, in parallel. é ✓ \u2028",
        ),
        ModelAction.call(ToolCallSpec("get_time", raw_arguments='{"city": "Rome"}'), reasoning="Its time."),
        ModelAction.answer("Rome is warmer (22C) than Paris (18C).", reasoning="I have everything."),
        ModelAction.answer("Follow-up answer.", reasoning="A follow-up."),
    ]


class _Bodies:
    """Clients on an in-process transport that keeps every request body and answers with an empty 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def _answer(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(request.content)
        streamed = b'"stream":true' in request.content
        kind = "text/event-stream" if streamed else "application/json"
        return httpx2.Response(200, headers={"content-type": kind}, content=b"" if streamed else b"{}")

    def client(self) -> openai.OpenAI:
        http = openai.DefaultHttpxClient(transport=httpx2.MockTransport(self._answer))
        return openai.OpenAI(base_url=ROOT, api_key="k", max_retries=0, http_client=http)

    def async_client(self) -> openai.AsyncOpenAI:
        http = openai.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(self._answer))
        return openai.AsyncOpenAI(base_url=ROOT, api_key="k", max_retries=0, http_client=http)


def _sent(path: Any, adapter: Any, request: VendorRequest) -> list[bytes]:
    """The bodies ``path`` sends for ``request``: unstreamed and streamed, sync and async."""
    bodies = _Bodies()
    client, aclient = bodies.client(), bodies.async_client()
    path.call(adapter, client, request)
    opened = transport.drive(path.opening(adapter, client, request, transport._SYNC))
    assert opened[2]() == bodies.bodies[-1]  # the bytes the stream reports as sent are the ones sent

    async def both() -> None:
        await path.acall(adapter, aclient, request)
        await transport.adrive(path.opening(adapter, aclient, request, transport._ASYNC))

    asyncio.run(both())
    assert len(bodies.bodies) == 4
    return bodies.bodies


def _same_both_ways(session: rs.Session, request: VendorRequest) -> None:
    adapter = session._adapter
    kwargs = copy.deepcopy(dict(request.kwargs))
    handed = transport._history_in_extra_body(transport.sdk_kwargs(request.kwargs))
    assert handed["extra_body"]  # the history does take the other path
    plain = _sent(PLAIN, adapter, request)
    assert plain == _sent(UNTYPED, adapter, request)
    assert dict(request.kwargs) == kwargs  # neither path edits the request
    assert json.loads(plain[0]) == {k: v for k, v in kwargs.items() if k != "extra_body"} | dict(
        kwargs.get("extra_body", {})
    )


def _run(session: rs.Session, check: Callable[[VendorRequest], None]) -> int:
    """A tool chain and a follow-up: every request is checked before the session sends it."""
    requests = 0
    question: str | None = "Paris or Rome: which is warmer?"
    results: dict[str, Any] | None = None
    for follow_up in ("And tomorrow?", None):
        while True:
            check(session.next_request(question, results))
            requests += 1
            reply = session.send(question) if results is None else session.send_tool_results(results)
            if not reply.tool_calls:
                break
            question, results = None, {c.id: {"city": c.arguments.get("city")} for c in reply.tool_calls}
        question, results = follow_up, None
        if question is None:
            break
    return requests


@pytest.mark.parametrize(
    ("dialect", "model", "options"),
    [
        ("deepseek", "deepseek-v4-pro", {}),
        ("openai", "gpt-5.5", {"reasoning_effort": "low", "max_completion_tokens": 900}),
    ],
)
def test_chat_requests_send_the_same_bytes_both_ways(
    dialect: str, model: str, options: dict[str, Any]
) -> None:
    with OpenAIChatEmulator(_chain(), dialect=dialect) as emu:  # type: ignore[arg-type]
        session = rs.Session(
            emu.client(), model=model, dialect=dialect, system="Be brief.", tools=[WEATHER, CLOCK], **options
        )
        sent = _run(session, lambda request: _same_both_ways(session, request))
        assert sent == len(emu.requests) == 4


def test_responses_requests_send_the_same_bytes_both_ways() -> None:
    with OpenAIResponsesEmulator(_chain()) as emu:
        session = rs.Session(
            emu.client(),
            model="gpt-5.5",
            system="Be brief.",
            tools=[WEATHER, CLOCK],
            reasoning={"effort": "medium", "summary": "auto"},
        )
        sent = _run(session, lambda request: _same_both_ways(session, request))
        assert sent == len(emu.requests) == 4


def test_a_callers_extra_body_still_wins_and_keeps_its_place() -> None:
    """``extra_body`` merged after the history: a caller's key replaces a body field (the history
    included) in its place, a new key goes last, as on the SDK's plain path."""
    with OpenAIChatEmulator(_chain(), dialect="deepseek") as emu:
        session = rs.Session(emu.client(), model="deepseek-v4-pro", dialect="deepseek", system="Be brief.")
        request = session.next_request("Hello?")
    adapter = session._adapter
    history = request.kwargs["messages"]
    for extra in (
        {"zz_last": 1, "model": "other-model"},
        {"messages": [*history, {"role": "user", "content": "replaced"}], "x": [1, 2]},
        {},
    ):
        kwargs = {**request.kwargs, "extra_body": {**request.kwargs.get("extra_body", {}), **extra}}
        edited = attrs.evolve(request, kwargs=kwargs)
        plain = _sent(PLAIN, adapter, edited)
        assert plain == _sent(UNTYPED, adapter, edited)
        keys = list(json.loads(plain[0]))
        assert keys.index("model") < keys.index("messages")
        if "zz_last" in extra:
            assert keys[-1] == "zz_last"


def test_what_is_not_a_history_list_goes_as_it_was() -> None:
    kwargs: dict[str, Any] = {"model": "m", "input": "just text"}
    assert transport._history_in_extra_body(kwargs) is kwargs
    odd: dict[str, Any] = {"model": "m", "messages": [], "extra_body": "not a mapping"}
    assert transport._history_in_extra_body(odd) is odd
    history = [{"role": "user", "content": "q"}]
    moved = transport._history_in_extra_body({"model": "m", "messages": history})
    assert moved == {"model": "m", "messages": [], "extra_body": {"messages": history}}
    assert moved["extra_body"]["messages"] is history  # handed over, not copied
