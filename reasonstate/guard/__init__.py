"""Guard mode: ``guard = rs.instrument(client)`` watches every request a plain vendor client sends.

The guard adds one response event hook to the client's own ``httpx2`` client (anthropic, openai:
``client._client``; google-genai: the API client's sync and async ``httpx2`` clients). The hook keeps the
request bytes the client sent and tees the response bytes as the SDK reads them (it never reads the
stream itself, so a streamed answer reaches the SDK chunk by chunk, as before). It sends nothing, changes
nothing and raises nothing: a failure inside it becomes a :class:`GuardWarning` on the record.

Analysis happens when :attr:`Guard.records` is read, off the caller's request path: each request is parsed
as the vendor reads it (its room's view: :func:`reasonstate.adapters.view_of`), matched to the earlier
request of its conversation (the recent request it shares the longest prefix with), and given its
normalized usage (the rooms' own usage parsers), its divergence with the cause
(:func:`reasonstate.cache.divergence.explain`), its warnings (``continuation_lost``, a miss as
``ttl_expired``, ``provider_miss`` or ``unexplained_miss``, bad input) and the cache read predicted from
the vendor's rules next to the one reported: the session's own predictor
(:func:`reasonstate.cache.rules.predict_request`, docs/protocols.md §1.5, §3.4, §4.4, §5.3) on the unit
keys as the server renders them (:meth:`reasonstate.adapters.base.Room.cache_keys`), so a
guard watching a session predicts what the session predicts for each of its requests.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import time
import weakref
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from typing import Any

import attrs

from reasonstate.adapters import room_for_path, wire_scope
from reasonstate.adapters.replay import ReplayFinding
from reasonstate.cache.divergence import CAUSES, Cause, Divergence, View
from reasonstate.cache.rules import CacheRules
from reasonstate.errors import InvalidOption
from reasonstate.guard import _replay
from reasonstate.guard._replay import Ledger
from reasonstate.state import Records, Usage

__all__ = ["CAUSES", "Cause", "Divergence", "Guard", "GuardRecord", "GuardWarning", "instrument"]


@attrs.frozen(slots=True)
class GuardWarning:
    """A finding on one request. ``kind``: ``continuation_lost`` (a request replays an earlier answer of
    its conversation, one of its tool calls found by id, but leaves out a signature, redacted data,
    encrypted item, ``thoughtSignature`` or ``reasoning_content`` the vendor needs back),
    ``continuation_altered`` (the field is there but differs from the bytes that came: re-serialized
    arguments, a replaced, added or moved signature, merged blocks), ``mended`` (mend mode restored it in
    the outgoing body), ``mend_skipped`` (a mend the body's encoding did not allow) — these four carry
    ``path``, the JSON path in the request body, and a ``detail`` naming payloads by digest only; a lost
    or altered field is reported once per answer, at the first request where it happens;
    a request that extends the previous one of its conversation but read less cache than predicted is
    ``ttl_expired`` (more time passed since that previous request than the longest lifetime the vendor
    documents for its cache entries), ``provider_miss`` (less time than the shortest: the prefix was as
    predicted and still alive, the vendor served less) or ``unexplained_miss`` (the wire cannot tell: the
    gap lies between the vendor's shortest and longest lifetimes, or the vendor documents none);
    ``prediction_mismatch`` (it read more), ``request_not_json``,
    ``response_not_json``, ``stream_cut_short``, ``usage_missing``, ``usage_invalid``, ``vendor_error``
    (a non-2xx answer), ``hook_error`` (the guard itself failed; the request went on untouched)."""

    kind: str
    detail: str = ""
    path: str = ""


@attrs.frozen(slots=True)
class GuardRecord:
    """One request the client sent and its answer, as the guard saw them on the wire.

    ``divergence`` is None when the request extends the previous request of its conversation (or starts
    one); ``predicted_cache_read`` is None when the vendor's rules cannot know it; ``reported_cache_read``
    is the vendor's figure (None without usage). ``usage`` is normalized (:class:`reasonstate.Usage`).
    ``api`` is the vendor API (``messages``, ``responses``, ``chat``, ``generate_content``), ``path`` the
    URL path, ``previous`` the index of the request this one was compared with (its conversation).
    ``at``: when the vendor answered, in seconds since the epoch: the answer's ``Date`` header (the
    vendor's clock, whole seconds), else the guard's clock when the answer's headers came.
    ``conversation``: the key the caller set with :meth:`Guard.conversation` (None: none set).
    ``origin``: the server the request went to and, on a platform that binds payloads to an account, the
    account it was sent for, read from its ``Authorization`` header (``http://host:port#key:AKIA…/us-east-1``:
    an access key id and region, never a secret; docs/protocols.md §10.7): a request whose origin differs
    from its ``previous`` one's moved to another account, and answers of one account are never checked
    against, nor mended into, a request to another.
    """

    index: int
    api: str
    model: str
    path: str
    status: int
    request_bytes: int
    streamed: bool
    usage: Usage | None
    divergence: Divergence | None
    warnings: tuple[GuardWarning, ...]
    predicted_cache_read: int | None
    reported_cache_read: int | None
    previous: int | None = None
    at: float | None = None
    conversation: str | None = None
    origin: str = ""


@attrs.define(slots=True)
class _Exchange:
    """What the hook kept: the exact request bytes and the response bytes as the SDK read them."""

    index: int
    path: str
    status: int
    request: bytes | None
    headers: dict[str, str]
    chunks: list[bytes] = attrs.field(factory=list)
    complete: bool = False
    error: str | None = None
    origin: str = ""
    # what mend mode found (and restored) in the request, each with the index of the answer it compared with
    replay: tuple[tuple[int, ReplayFinding], ...] = ()
    # whether the answer went into the guard's ledger (mend mode: at once; else when analysed)
    sourced: bool = False
    # the guard's clock when the answer's headers came, and the caller's conversation key then
    at: float = 0.0
    conversation: str | None = None

    @property
    def answered_at(self) -> float:
        """When the vendor answered: its ``Date`` header (RFC 9110 §6.6.1) when it sent a valid one, else
        the guard's own clock (both in seconds since the epoch)."""
        date = self.headers.get("date")
        if date:
            try:
                return parsedate_to_datetime(date).timestamp()
            except (TypeError, ValueError, IndexError, OverflowError):
                pass
        return self.at


def _api_of(path: str) -> str | None:
    """The API whose room serves ``path`` (None: a request the guard does not read)."""
    room = room_for_path(path)
    return room.api if room is not None else None


#: how many unread captures wait before the hook analyses them itself
_DRAIN = 128
#: where the request hook leaves its findings for the response hook (the request's extensions)
_FINDINGS = "reasonstate.guard.replay"
#: the conversation key a caller set around its requests (:meth:`Guard.conversation`)
_CONVERSATION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "reasonstate.guard.conversation", default=None
)


def _origin(request: Any) -> str:
    """The server a request went to and, on a platform that binds payloads to an account, the account it
    was sent for (:func:`reasonstate.adapters.wire_scope`: an access key id and region, never a secret):
    answers are compared, checked and mended within one server and account, so a request to another
    AWS account is never told it lost, nor given, the other account's signatures (docs/protocols.md
    §10.1, §10.7)."""
    url = request.url
    server = f"{url.scheme}://{url.host}:{url.port or ''}"
    scope = wire_scope(str(url.host), request.headers.get("authorization", ""))
    return f"{server}#{scope}" if scope else server


class Guard:
    """The records of an instrumented client (one per request with a response, in send order)."""

    def __init__(self, cache: CacheRules | None = None, mend: bool = False) -> None:
        self._cache = cache
        self._mend = mend
        # the recent answers with a tool call, kept compactly for the requests that replay them
        self._answers = Ledger()
        self._count = itertools.count()
        self._lock = threading.Lock()
        self._pending: list[_Exchange] = []
        self._records: list[GuardRecord] = []
        # the recent analysed requests: (record, view, parsed response, lifetime of what it cached)
        self._recent: list[tuple[GuardRecord, View, Any, tuple[int, int] | None]] = []
        # the newest requests' execution records, their units kept once (Records: a small difference each)
        self._executed: Records = Records()

    @property
    def records(self) -> tuple[GuardRecord, ...]:
        """Every finished request so far, analysed (analysis runs here, never in the request path)."""
        with self._lock:
            self._drain()
            return tuple(self._records)

    def _drain(self) -> None:
        """Analyse the waiting captures, oldest first (under the lock)."""
        pending = sorted(self._pending[:], key=lambda c: c.index)
        del self._pending[: len(pending)]
        for capture in pending:
            self._records.append(self._analysed(capture))

    @contextlib.contextmanager
    def conversation(self, key: str) -> Iterator[None]:
        """Mark the requests sent inside this block as one conversation, ``key``: each is compared only
        with earlier requests of the same key (requests sent outside any block, only with each other).
        For a framework that gives no stable id, so that interleaved conversations on one client (agent
        rollouts of one prompt, users with the same first question) do not break each other's chains.
        The key is a context variable: it reaches requests sent from this thread or task, and from tasks
        it starts, not from a thread pool the framework sends from. Nothing of it goes on the wire."""
        if not isinstance(key, str) or not key:
            raise InvalidOption(f"a conversation key is a non-empty string, got {key!r}")
        token = _CONVERSATION.set(key)
        try:
            yield
        finally:
            _CONVERSATION.reset(token)

    @property
    def mend(self) -> bool:
        """Whether the guard restores lost or altered continuation fields in outgoing requests."""
        return self._mend

    # -- the hook side: bytes only -----------------------------------------------------------------------
    def _on_request(self, request: Any) -> None:
        """Mend mode: restore, in the outgoing body only, what the request lost or altered of the answers
        it replays (:func:`reasonstate.guard._replay.mend`). Never raises: a failure sends the request as
        it was and becomes a finding."""
        try:
            if request.method != "POST" or not self._answers:
                return
            path = str(request.url.path)
            room = room_for_path(path)
            if room is None:
                return
            content = bytes(request.content)
            answers = self._answers.candidates(room.api, _origin(request))
            new, findings = _replay.mend(room, answers, path, content)
            if findings:
                request.extensions[_FINDINGS] = findings
            if new is not None:
                from reasonstate.guard._capture import replace_body

                replace_body(request, new)
        except Exception as exc:
            request.extensions[_FINDINGS] = ((-1, ReplayFinding("hook_error", "", f"mend: {exc!r}")),)

    def _on_response(self, response: Any) -> None:
        try:
            request = response.request
            path = str(request.url.path)
            if request.method != "POST" or _api_of(path) is None:
                return
            try:
                body: bytes | None = bytes(request.content)
            except Exception:
                body = None
            capture = _Exchange(
                next(self._count),
                path,
                int(response.status_code),
                body,
                {k.lower(): v for k, v in response.headers.items()},
                origin=_origin(request),
                replay=request.extensions.get(_FINDINGS, ()),
                at=time.time(),
                conversation=_CONVERSATION.get(),
            )
            content = getattr(response, "_content", None)
            if isinstance(content, bytes):  # someone read it already
                capture.chunks.append(content)
                capture.complete = True
                capture.headers.pop("content-encoding", None)
                self._done(capture)
                return
            from reasonstate.guard._capture import tee

            response.stream = tee(response.stream, capture, self._done)
        except Exception as exc:  # never into the caller's request
            capture = _Exchange(next(self._count), "", 0, None, {}, error=f"{type(exc).__name__}: {exc}")
            self._done(capture)

    def _done(self, capture: _Exchange) -> None:
        if self._mend:  # the next request may replay this answer: keep it now
            try:
                from reasonstate.guard._record import keep_answer

                keep_answer(self, capture)
            except Exception as exc:  # never into the caller's request
                capture.error = f"keeping the answer: {type(exc).__name__}: {exc}"
        self._pending.append(capture)  # list.append is atomic
        # captures hold whole bodies: when nobody reads the records, they are analysed in batches (bounded
        # memory; the batch's cost falls on one request in _DRAIN, never blocked by a reader)
        if len(self._pending) >= _DRAIN and self._lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._lock.release()

    # -- the analysis side -------------------------------------------------------------------------------
    def _analysed(self, capture: _Exchange) -> GuardRecord:
        try:
            return _analyse(self, capture)
        except Exception as exc:
            return GuardRecord(
                capture.index, _api_of(capture.path) or "", "", capture.path, capture.status,
                len(capture.request or b""), False, None, None,
                (GuardWarning("hook_error", f"{type(exc).__name__}: {exc}"),), None, None,
                conversation=capture.conversation, origin=capture.origin,
            )  # fmt: skip


# -- installing -------------------------------------------------------------------------------------------

_GUARDS: weakref.WeakKeyDictionary[Any, Guard] = weakref.WeakKeyDictionary()
_INSTALL = threading.Lock()


def instrument(client: Any, *, cache: CacheRules | None = None, mend: bool = False) -> Guard:
    """Watch every request ``client`` sends; the one line a caller adds.

    ``client``: an ``anthropic``/``openai`` client (sync or async) or a ``google.genai.Client`` (both its
    sync and ``.aio`` sides) or its ``.aio``, or an ``httpx2.Client``/``AsyncClient`` that vendor requests
    go through (a framework's own, or one replaying recorded exchanges). ``cache``: the
    :class:`~reasonstate.cache.CacheRules` to predict with, when the API's default is not the vendor's
    (a vLLM/SGLang server behind the chat API: ``reasonstate.adapters.openai_chat.SELF_HOSTED_CHAT``).
    Instrumenting a client twice returns the same guard. ``mend``: restore, in each outgoing body only,
    the continuation fields (signatures, encrypted items, ``thoughtSignature`` on its Part,
    ``reasoning_content``, tool-call ids and argument strings) a framework lost or altered of an answer
    the guard saw, where the match is unambiguous (same ids, same position, same model, same vendor);
    each restoration is a ``mended`` finding. The framework's own
    objects are untouched; a request that replays faithfully is sent byte for byte as it was.
    Raises ``TypeError`` for a client without an ``httpx2`` client (nothing to watch), and
    :class:`~reasonstate.InvalidOption` for a client instrumented before with the other ``mend``.
    """
    https = _http_clients(client)
    if not https:
        raise TypeError(f"{type(client).__name__} has no httpx2 client the guard can watch")
    with _INSTALL:
        for http in https:
            existing = _GUARDS.get(http)
            if existing is not None:
                if existing.mend != mend:
                    raise InvalidOption(f"this client is instrumented already, with mend={existing.mend}")
                return existing
        guard = Guard(cache, mend)
        from reasonstate.guard._capture import add_hook

        for http in https:
            add_hook(http, guard._on_response, guard._on_request if mend else None)
            _GUARDS[http] = guard
    return guard


def _http_clients(client: Any) -> list[Any]:
    api = getattr(client, "_api_client", None)
    if api is not None:  # google-genai
        return [
            h for h in (getattr(api, "_httpx_client", None), getattr(api, "_async_httpx_client", None)) if h
        ]
    if hasattr(client, "event_hooks") and hasattr(client, "send"):  # an httpx2 client itself
        return [client]
    http = getattr(client, "_client", None)
    return [http] if http is not None and hasattr(http, "event_hooks") else []


# -- analysis of one capture ------------------------------------------------------------------------------


def _analyse(guard: Guard, capture: _Exchange) -> GuardRecord:
    from reasonstate.guard._record import analyse

    return analyse(guard, capture)
