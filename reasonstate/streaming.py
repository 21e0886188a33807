"""Streams to the caller: :class:`Stream` (``with session.stream(text) as stream: for event in stream``)
and :class:`AsyncStream` (``async with`` / ``async for``), each a short driver of the turn engine
(:meth:`reasonstate.engine.Engine.turn`).

Entering the block begins the turn and opens the response (the recovery's retry included, as for
``send``); the events come as the bytes arrive; once they are all read the answer is sent into the engine,
which commits it exactly as ``send`` does. Leaving early, or a stream that breaks, throws the failure into
the engine instead (a caller who left early is not traced: nothing was wrong with the answer).

Invariant: a stream ends exactly once — committed (``reply`` set) or failed (the session as it was
before, a reasonstate error traced) — and the HTTP response is closed either way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

from reasonstate.adapters import transport
from reasonstate.adapters.streams import StreamEvent
from reasonstate.engine import Attempt, Reply, TurnFlow, failed, finished
from reasonstate.errors import IllegalTransition, ProtocolViolation

if TYPE_CHECKING:
    from reasonstate.switching import Switching as _Core

__all__ = ["AsyncStream", "Stream"]

_Streaming = TypeVar("_Streaming", transport.Streaming, transport.AsyncStreaming)


class _Left(Exception):
    """The caller left a stream before its end: the call fails without a trace event (nothing was wrong
    with the answer; the caller did not want the rest)."""


class _StreamBase(Generic[_Streaming]):
    """What :class:`Stream` and :class:`AsyncStream` share: the engine's turn, its one outcome, the reply."""

    def __init__(self, session: _Core, attempt: Attempt) -> None:
        self._session = session
        self._attempt: Attempt | None = attempt
        self._turn: TurnFlow | None = None
        self._streaming: _Streaming | None = None
        self._reply: Reply | None = None
        self._ended = False
        self._iterated = False

    @property
    def reply(self) -> Reply:
        """The :class:`Reply` (what :meth:`Session.send` returns), once every event was read."""
        if self._reply is None:
            raise IllegalTransition(
                "the stream has no reply: it was not read to its end (or it failed); nothing was committed"
            )
        return self._reply

    def _opened(self) -> _Streaming:
        if self._streaming is None:
            raise IllegalTransition(
                "open the stream first: `with session.stream(...) as stream:` (`async with` on AsyncSession)"
            )
        if self._iterated:
            raise IllegalTransition("a stream is read once")
        self._iterated = True
        return self._streaming

    def _enter(self) -> TurnFlow:
        """The engine's turn, begun (its first request is ``next(turn)``)."""
        if self._attempt is None:
            raise IllegalTransition("a stream is opened once")
        attempt, self._attempt = self._attempt, None
        endpoint = self._session._adapter.endpoint
        if endpoint.assembler is None:
            raise ProtocolViolation(
                f"{endpoint.label} does not stream here: use send() / send_tool_results() (nothing was sent)"
            )
        return self._session.turn(attempt)

    def _entered(self, turn: TurnFlow, streaming: _Streaming) -> None:
        self._streaming, self._turn = streaming, turn
        turn.send(None)  # opened: the answer comes once the caller has read it

    def _failed(self, exc: BaseException) -> None:
        if not self._ended and self._turn is not None:
            self._ended = True
            failed(self._turn, exc)

    def _finished(self, result: transport.CallResult) -> None:
        assert self._turn is not None
        self._ended = True
        self._reply = finished(self._turn, result)


class Stream(_StreamBase[transport.Streaming]):
    """One model call streamed to the caller (:meth:`Session.stream`); a context manager, iterated once
    for :class:`StreamEvent` values; ``reply`` afterwards."""

    def __enter__(self) -> Stream:
        turn = self._enter()
        request = next(turn)
        session = self._session
        while True:
            try:
                streaming = transport.open_stream(session._adapter, session._client, request)
            except BaseException as exc:
                request = turn.throw(exc)  # the recovery's retry, or exc raised with the failure recorded
                continue
            self._entered(turn, streaming)
            return self

    def __iter__(self) -> Iterator[StreamEvent]:
        streaming = self._opened()
        try:
            yield from streaming
            result = streaming.result()
        except BaseException as exc:
            streaming.close()
            self._failed(exc)
            raise
        self._finished(result)

    def __exit__(self, *exc: object) -> None:
        if self._streaming is not None:
            self._streaming.close()
        self._failed(_Left())


class AsyncStream(_StreamBase[transport.AsyncStreaming]):
    """:class:`Stream` on an async client: ``async with`` / ``async for``."""

    async def __aenter__(self) -> AsyncStream:
        turn = self._enter()
        request = next(turn)
        session = self._session
        while True:
            try:
                streaming = await transport.aopen_stream(session._adapter, session._client, request)
            except BaseException as exc:
                request = turn.throw(exc)
                continue
            self._entered(turn, streaming)
            return self

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        streaming = self._opened()
        try:
            async for event in streaming:
                yield event
            result = await streaming.result()
        except BaseException as exc:
            await streaming.aclose()
            self._failed(exc)
            raise
        self._finished(result)

    async def __aexit__(self, *exc: object) -> None:
        if self._streaming is not None:
            await self._streaming.aclose()
        self._failed(_Left())
