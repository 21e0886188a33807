"""The public session API: :class:`Session` and :class:`AsyncSession`, the one class everything
revolves around, in its sync and async forms, plus :class:`Report`.

A session is the turn engine (:mod:`reasonstate.engine`: the transition table, begin → send → finish | fail →
recover, the commit) with its construction, its prefix/model/vendor switching, ``run()``, reports and
snapshots. ``Session`` and ``AsyncSession`` differ only where they await: each drives the engine with a short
loop around the transport (:mod:`reasonstate.adapters.transport`), and so do the two streams to the caller,
:class:`Stream` and :class:`AsyncStream` (at the end of this module). The invariants (a failure changes
nothing but the trace, a retry sends the same bytes, policies only on a closed turn, tool results in declared
order) are the engine's, stated in its module docstring.
"""

from __future__ import annotations

import copy
import functools
import inspect
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

from reasonstate.adapters import Adapter, adapter_for, transport
from reasonstate.adapters.base import FOREIGN_REASONING, Encodings, StreamEvent, VendorRequest, platform_of
from reasonstate.adapters.openai_chat import REPORTED_COST
from reasonstate.cache.pricing import Cost, KVConfig, Metrics, Pricing
from reasonstate.cache.pricing import metrics as cache_metrics
from reasonstate.cache.pricing import total as total_cost
from reasonstate.engine import (
    Attempt,
    KeptEffect,
    Layers,
    Reply,
    ToolCall,
    TurnFlow,
    TurnState,
    failed,
    finished,
)
from reasonstate.errors import (
    IllegalTransition,
    InvalidInput,
    InvalidOption,
    ProtocolViolation,
    SessionConflict,
    StoreError,
    ToolResultError,
)
from reasonstate.export import ExportContext, Exporter, Publisher
from reasonstate.journal import CHECKPOINT, DELTA, AsyncLog, Entry, Log, Mark, Replayed, delta_body, replay
from reasonstate.policies import Fold, Keep, Policy, ServerClear, ServerCompact, is_policy
from reasonstate.prefix import Prefix, Tool, check_timeout
from reasonstate.runtime import repair
from reasonstate.runtime.dispatch import (
    STORM_BREAKER,
    Dispatched,
    Plan,
    StormBreaker,
    adispatch,
    check_count,
    dispatch,
    plan,
)
from reasonstate.runtime.fold import folded
from reasonstate.snapshot import SessionSnapshot, restore_args, restored_layers, session_snapshot
from reasonstate.state import (
    FIRST_PARTY,
    Continuation,
    EventKind,
    History,
    Records,
    ToolCallPart,
    ToolResult,
    ToolResultPart,
    Trace,
    TraceEvent,
    Turn,
    freeze,
)
from reasonstate.state.continuation import recorded_platform
from reasonstate.state.execution import EMPTY as NO_RECORDS
from reasonstate.state.execution import common_prefix_len
from reasonstate.state.frozen import FrozenDict, FrozenList, equal_values, remember, shared_repr
from reasonstate.switching import SDK_OWNED, Switching, check_model

__all__ = [
    "AsyncSession",
    "AsyncStream",
    "Reply",
    "Report",
    "Session",
    "StormBreaker",
    "Stream",
    "StreamEvent",
    "ToolCall",
    "ToolResult",
    "TurnState",
]


#: the Messages dialects whose platform is the endpoint's name (docs/protocols.md §10.8)
_MESSAGES_DIALECTS = frozenset({"deepseek", "kimi", "minimax"})


def _route(vendor: str, api: str, platform: str) -> str:
    """``vendor/api`` and, when not first-party, ``@platform`` (``anthropic/messages@bedrock``)."""
    return f"{vendor}/{api}" + ("" if platform == FIRST_PARTY else f"@{platform}")


def _unsendable(text: str) -> str | None:
    """Where ``text`` is not valid Unicode (None: it is): a lone surrogate, half of a UTF-16 pair, has no
    UTF-8 form, so no request can carry it (issue 23 item 1). One C-speed encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"is not valid Unicode text: {text[exc.start]!r} at index {exc.start} is half of a UTF-16 "
            "surrogate pair, which no request can carry; nothing was sent"
        )
    return None


@attrs.frozen(slots=True)
class Report:
    """Cache and cost summary of a session, derived from the execution layer and the trace (never fed
    back). ``prompt_tokens == cache_read + cache_write + uncached`` summed over the requests;
    ``predicted_matches`` counts the requests whose predicted cache read equals the reported one, out of
    ``predicted_total`` that had a prediction; ``active_context_tokens`` is the newest prompt plus its
    output."""

    requests: int
    prompt_tokens: int
    cache_read: int
    cache_write: int
    output_tokens: int
    predicted_matches: int
    predicted_total: int
    active_context_tokens: int
    #: failed calls the vendor answered with 400 (a request it refused as invalid), from the trace
    protocol_errors: int
    failed_calls: int
    #: USD at the report's price table (None when a model used has no price there); per request and per
    #: turn as well (``(turn, cost)`` in turn order)
    cost: Cost | None = None
    cost_per_request: tuple[Cost | None, ...] = ()
    cost_per_turn: tuple[tuple[int, Cost | None], ...] = ()
    #: cached / prefilled / recomputed tokens, active context and its KV bytes (docs/protocols.md §8)
    metrics: Metrics | None = None
    #: what the vendor itself reported the calls cost, summed from the trace (OpenRouter's ``usage.cost``,
    #: in its credits, docs/protocols.md §2.3, §8): the bill as reported, beside ``cost`` (the price-table
    #: estimate); None when no answer reported one
    reported_cost: float | None = None

    @property
    def cache_read_share(self) -> float:
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else 0.0

    def __str__(self) -> str:
        cost = f"${self.cost.total:.6f}" if self.cost is not None else "cost unknown (a model has no price)"
        return (
            f"{self.requests} requests, {self.prompt_tokens} prompt tokens "
            f"({self.cache_read_share:.1%} cache reads, {self.cache_write} written), "
            f"{self.output_tokens} output; {cost}; predictions exact on {self.predicted_matches}/"
            f"{self.predicted_total}; active context {self.active_context_tokens}; "
            f"protocol errors {self.protocol_errors}, failed calls {self.failed_calls}"
        )


_S = TypeVar("_S", bound="_Core")

#: what a session does when the vendor rejects a replayed continuation (an invalid signature, an encrypted
#: item that does not verify): raise, or strip exactly the payloads the rejection names and retry once
_ON_REJECTED = ("raise", "strip_and_retry")


def _context_of(session: _Core) -> Callable[[str], ExportContext]:
    """The session's :meth:`_Core._export_context` for its publisher, through a weak reference: the session
    holds its publisher, so a bound method there would make every session a reference cycle, freed only
    by the garbage collector's next pass instead of when its last reference goes (a service that builds a
    session per HTTP request would pile them up between collections)."""
    ref = weakref.ref(session)

    def context(session_id: str) -> ExportContext:
        live = ref()
        if live is None:  # pragma: no cover - the publisher lives only as long as its session
            raise ReferenceError("the session of this publisher is gone")
        return live._export_context(session_id)

    return context


#: system prompt → (``Prefix(system=...)``, its fingerprint, its volatile spans), for the prefixes with no
#: tools and no few-shots: such a prefix is a pure function of its system text (an immutable ``str``), and
#: a prefix is an immutable value any number of sessions may share, so the key cannot go stale. A service
#: that builds a session per HTTP request builds them on the same few prompts: the second build of each
#: is a dict lookup instead of the prefix's construction, a SHA-256 of its canonical JSON and a search of
#: the system text for clock times (issue 21: a fresh session's constant costs). Bounded: at most
#: :data:`_PREFIXES_MAX` prompts of at most :data:`_PREFIX_CHARS` characters each, cleared when full.
_PREFIXES: dict[str, tuple[Prefix, str, tuple[str, ...]]] = {}
_PREFIXES_MAX = 128
_PREFIX_CHARS = 1 << 16


def _prefix_of(system: Any, tools: Any, few_shots: Any) -> tuple[Prefix, str, tuple[str, ...]]:
    """The session's prefix, its fingerprint and the clock times in its system text
    (:meth:`Prefix.volatile_spans`); the same values as building the prefix each time
    (:data:`_PREFIXES`)."""
    plain = type(system) is str and type(tools) is tuple and not tools
    if plain and type(few_shots) is tuple and not few_shots:
        found = _PREFIXES.get(system)
        if found is not None:
            return found
    prefix = Prefix(system=system, tools=tools, few_shots=few_shots)
    made = (prefix, prefix.fingerprint, tuple(prefix.volatile_spans()))
    if plain and not prefix.few_shots and len(system) <= _PREFIX_CHARS:
        remember(_PREFIXES, system, made, _PREFIXES_MAX)
    return made


#: the repr of a session's request options → their frozen value, for options made of JSON values only
#: (dicts, lists, str, numbers, bool, None): a frozen value is immutable, so any number of sessions may share
#: it, and an entry answers only for options of the same repr (key order and ``True`` against ``1``
#: included) that are equal to it, whose frozen value it is. A service that builds its sessions with the
#: same few options freezes each once (issue 21: a fresh session's constant costs); options that hold any
#: other object (the caller's own, which may change) are frozen every time. Bounded: at most
#: :data:`_OPTIONS_MAX` entries, of reprs of at most :data:`_OPTIONS_CHARS` characters, cleared when full.
_OPTIONS: dict[str, Mapping[str, Any]] = {}
_OPTIONS_MAX = 256
_OPTIONS_CHARS = 1 << 14
_JSON_LEAVES = frozenset({str, int, float, bool, type(None)})


def _frozen_options(options: dict[str, Any]) -> Mapping[str, Any]:
    """``freeze(options)``, shared between sessions where the options are JSON values (:data:`_OPTIONS`)."""
    key = repr(options)
    held = _OPTIONS.get(key)
    if held is not None and equal_values(held, options):
        return held
    frozen: Mapping[str, Any] = freeze(options)
    if len(key) <= _OPTIONS_CHARS and _json_only(frozen):
        remember(_OPTIONS, key, frozen, _OPTIONS_MAX)
        shared_repr(frozen)  # JSON values only: the checks' memos read its repr from here (frozen_repr)
    return frozen


def _json_only(value: Any) -> bool:
    """Whether a frozen value holds JSON values only (its dicts and lists frozen, every leaf a JSON scalar
    of exactly its type)."""
    kind = type(value)
    if kind is FrozenDict:
        return all(_json_only(v) for v in value.values())
    if kind is FrozenList:
        return all(_json_only(v) for v in value)
    return kind in _JSON_LEAVES


class _Core(Switching):
    """Everything but the I/O: the engine with its construction, switching, ``run()`` steps, reports and
    snapshots."""

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        system: str = "",
        tools: Sequence[Tool] = (),
        few_shots: Sequence[tuple[str, str]] = (),
        policy: Policy | None = None,
        fold: Fold | ServerClear | ServerCompact | None = None,
        adapter: Adapter | None = None,
        dialect: str | None = None,
        api: str | None = None,
        stream: bool = False,
        foreign_reasoning: str = "drop",
        on_rejected_continuation: str = "raise",
        exporters: Sequence[Exporter] = (),
        store: Log | AsyncLog | None = None,
        session_id: str | None = None,
        **request_options: Any,
    ) -> None:
        if isinstance(store, bool):  # the OpenAI Responses request option `store`, not a session store
            request_options["store"], store = store, None
        owned = sorted(SDK_OWNED.intersection(request_options))
        if owned:
            raise InvalidOption(
                f"{owned} are built by the session from its state; pass system=, tools=, few_shots= "
                "and the turns through send()"
            )
        if on_rejected_continuation not in _ON_REJECTED:
            raise InvalidOption(
                f"on_rejected_continuation= must be one of {_ON_REJECTED}, got {on_rejected_continuation!r}"
            )
        self._on_rejected = on_rejected_continuation
        check_model(model)
        if policy is not None and not is_policy(policy):
            raise InvalidOption(
                f"policy= must be a policy object such as reasonstate.policies.Drop(), got {policy!r:.80}"
            )
        if fold is not None and not isinstance(fold, (Fold, ServerClear, ServerCompact)):
            raise InvalidOption(
                f"fold= must be a reasonstate.policies.Fold(threshold_tokens, keep_tail_tokens, summarize), "
                f"ServerClear(...) or ServerCompact(...), got {fold!r:.80}"
            )
        if not isinstance(stream, bool):
            raise InvalidOption(f"stream= must be True or False, got {stream!r}")
        if foreign_reasoning not in FOREIGN_REASONING:
            raise InvalidOption(
                f"foreign_reasoning= must be one of {FOREIGN_REASONING}, got {foreign_reasoning!r}"
            )
        self._foreign_reasoning = foreign_reasoning
        self._check_client(client)
        self._client = client
        self._adapter: Adapter = (
            adapter if adapter is not None else adapter_for(client, dialect=dialect, api=api)
        )
        # the session's encoding memo (an adapter holds configuration only); a switch starts a new one
        self._encodings = Encodings()
        self._model = model
        if isinstance(fold, (ServerClear, ServerCompact)):  # the vendor folds: a request option (§1.9, §4.7)
            if self._adapter.api != fold.api:
                raise InvalidOption(
                    f"fold={type(fold).__name__}(...) runs on the {fold.api} API, this session is on "
                    f"{self._adapter.api} (docs/protocols.md §1.9, §4.7)"
                )
            if "context_management" in request_options:
                raise InvalidOption(
                    "pass fold=ServerClear/ServerCompact(...) or context_management=, not both"
                )
            request_options["context_management"] = fold.request_option()
            fold = None
        prefix, fingerprint, volatile = _prefix_of(system, tools, few_shots)
        # frozen: a caller's later edit of a dict it passed (``thinking=...``) changes no request; frozen
        # before the checks, so that the checks' memos can key on the (hashable) frozen value
        options = _frozen_options(request_options)
        self._refuse_options(self._adapter, client, model, options, prefix.tools)
        self._set_prefix(prefix, fingerprint)
        self._policy: Policy = Keep() if policy is None else policy
        self._fold = fold
        # volatile per-turn notes (``scratch``): never in a request, never in a snapshot
        self._scratch: dict[str, Any] = {}
        self._stream = stream
        # one call at a time: the state check and the move to AWAITING_MODEL happen under this lock
        self._lock = threading.Lock()
        self._options: Mapping[str, Any] = options
        self._state = TurnState.IDLE
        trace = Trace()
        if volatile:
            trace = trace.appended(
                EventKind.PREFIX_VOLATILE,
                spans=list(volatile),
                advice="a clock time in the system prompt changes every session and busts the prefix "
                "cache; keep the date in the prefix and the time in the newest user message",
            )
        self._publisher = Publisher(Publisher.checked(exporters), _context_of(self))
        self._set_layers(Layers(trace=trace, records=NO_RECORDS))  # the one empty Records value
        self._attach(store, session_id)
        if store is not None and isinstance(self, Session):
            self.flush()  # version 1: the id is taken now, or SessionConflict before anything is paid for

    # -- the store (reasonstate.store; reasonstate/journal.py says what an entry holds) ---------------------
    _store: Log | AsyncLog | None = None
    _session_id: str | None = None
    #: how far the store holds this session (None: nothing written yet)
    _mark: Mark | None = None
    #: the completion of the deferred events a load held back again (the log holds them, not completed)
    _from_log: KeptEffect | None = None
    #: the first turn that may differ from the history the mark was made from (None: that very history),
    #: noted as the history changes (:meth:`_set_layers`), so a write never walks the history
    _changed: int | None = None
    #: set when another writer appended first: this object is stale and sends nothing more
    _conflict: SessionConflict | None = None
    #: the entry of an append that failed with a StoreError, and the mark after it: a store that timed out
    #: may have written it all the same (the reply was lost), which the next write checks
    _doubt: tuple[Entry, Mark] | None = None

    def _attach(self, store: Any, session_id: Any) -> None:
        if store is None:
            if session_id is not None:
                raise InvalidOption("session_id= names a session in a store: pass store= too")
            return
        self._check_store(store)
        if session_id is None:
            session_id = uuid.uuid4().hex
        if not isinstance(session_id, str) or not session_id or len(session_id) > 256 or "\0" in session_id:
            raise InvalidOption(
                f"session_id= is a non-empty string of at most 256 characters, got {session_id!r:.80}"
            )
        self._store, self._session_id = store, session_id

    @classmethod
    def _check_store(cls, store: Any) -> None:
        """:class:`InvalidOption` unless ``store`` is a store of this class's kind (sync for
        :class:`Session`, asyncio for :class:`AsyncSession`): checked before it is used at all."""
        if not callable(getattr(store, "append", None)) or not callable(getattr(store, "read", None)):
            raise InvalidOption(
                f"store= must be a reasonstate.store store (SQLiteStore, PostgresStore, RedisStore) or, for "
                f"the OpenAI Responses request option, True or False; got {store!r:.80}"
            )
        if inspect.iscoroutinefunction(store.append) != cls._async:
            kind = (
                "an async store (AsyncSQLiteStore, ...)" if cls._async else "a sync store (SQLiteStore, ...)"
            )
            raise InvalidOption(f"{cls.__name__} needs {kind}, got {type(store).__name__}")

    @property
    def session_id(self) -> str | None:
        """The session's id in its store (None without ``store=``)."""
        return self._session_id

    @property
    def version(self) -> int:
        """How many entries of this session the store holds (0: none yet, or no store)."""
        return 0 if self._mark is None else self._mark.version

    def _header(self) -> tuple[Any, ...]:
        """What a delta cannot carry: a change of any of these (by identity) makes the next entry a
        checkpoint."""
        return (
            self._prefix,
            self._model,
            self._adapter,
            self._policy,
            self._fold,
            self._options,
            self._stream,
            self._foreign_reasoning,
            self._on_rejected,
        )

    def _set_layers(self, layers: Layers) -> None:
        """:meth:`Engine._set_layers`, noting for the store which turns a new history changed
        (:meth:`_note_turns`)."""
        if self._mark is not None and layers.history is not self._layers.history:
            self._note_turns(self._layers.history.turns, layers.history.turns)
        super()._set_layers(layers)

    def _note_turns(self, old: tuple[Turn, ...], new: tuple[Turn, ...]) -> None:
        """Lower :attr:`_changed` to the first turn where ``new`` differs from ``old``: done as the history
        changes, while the outgoing one is alive (a write after it would have to keep the old history to
        compare, and then free it, in proportion to the session). A commit changes the newest turn or adds
        one, so the one or two newest are tried first; each try is one C-speed tuple comparison."""
        n = min(len(old), len(new))
        for k in (n, n - 1, n - 2):  # (k == 0 always matches)
            if old[:k] == new[:k]:
                first = k
                break
        else:
            first = common_prefix_len(old[: n - 2], new[: n - 2])
        changed = self._changed
        self._changed = first if changed is None else min(changed, first)

    def _hold_again(self, held: Sequence[TraceEvent]) -> None:
        """A loaded session's trace with the events its log holds back (a keep-all ``policy.decision`` and
        the events after it; reasonstate/journal.py): held back here again, completed by this session's
        next request as the writer's would have been (:class:`KeptEffect` on the same history, records and
        options), so the next entry writes them complete. Only a commit writes them: a flush of a session
        that only loaded writes nothing (its log holds them already)."""
        layers = self._layers
        kept = KeptEffect(
            self._adapter,
            self._prefix,
            layers.history,
            self._model,
            self._options,
            layers,
            self._encodings,
            self._foreign_reasoning,
        )
        items = [(e.kind, e.data) for e in held]
        trace = layers.trace.extended(items, deferred=(0, kept), at=held[0].at)
        self._set_layers(attrs.evolve(layers, trace=trace))
        self._from_log = kept

    def _complete_own(self) -> None:
        """Before a flush: complete a deferred event (flush writes everything), unless it is one a load held
        back again (:meth:`_hold_again`)."""
        trace = self._layers.trace
        if trace.completion() is not self._from_log:
            trace.completed()

    def _unwritten(self) -> tuple[Entry, Mark] | None:
        """The entry that brings the store up to this session (None: it is up to date), with the mark
        after it."""
        mark, layers, state, changed = self._mark, self._layers, self._state.value, self._changed
        header = self._header()
        same = mark is not None and all(a is b for a, b in zip(mark.header, header, strict=True))
        if same and mark is not None and mark.holds(layers, changed, state):
            return None
        version = 0 if mark is None else mark.version
        delta = delta_body(mark, layers, state, changed) if same and mark is not None else None
        if delta is not None:
            entry, text = Entry(version + 1, DELTA, delta[0]), delta[1]
        else:
            entry = Entry(version + 1, CHECKPOINT, self._snapshot_now().model_dump_json().encode())
            text = b""
        ready = layers.trace.ready() if entry.kind == DELTA else len(layers.trace)
        return entry, Mark.of(entry.seq, layers, ready, header, state, text)

    def _writing(self, reply: Reply | None) -> Generator[Callable[[], Any], Any, None]:
        """Bring the store up to this session: the store calls it needs are yielded (``Session`` makes
        them, ``AsyncSession`` awaits them; :func:`transport.drive`), their failures thrown back in. After a
        StoreError, first adopt the failed entry when it landed all the same (:meth:`_landed`)."""
        store, session_id = self._store, self._session_id
        assert store is not None and session_id is not None
        try:
            doubt = self._doubt
            if doubt is not None and (yield functools.partial(store.version, session_id)) >= doubt[0].seq:
                self._landed((yield functools.partial(store.read, session_id)))
            history = self._layers.history
            unwritten = self._unwritten()
            if unwritten is None:
                return
            entry, mark = unwritten
            try:
                yield functools.partial(store.append, session_id, entry.seq - 1, [entry])
            except StoreError as exc:
                if not isinstance(exc, SessionConflict):
                    self._doubt = unwritten
                raise
        except Exception as exc:
            raise self._stored(reply, exc) from exc
        self._mark = mark
        # (the history cannot change while the append is made: one call at a time; 0 would write it all)
        self._changed = None if self._layers.history is history else 0

    def _stored(self, reply: Reply | None, exc: BaseException) -> StoreError:
        """The error a failed append raises: a conflict makes this object stale (it sends nothing more);
        either way the reply paid for rides on the error and stays committed here."""
        if isinstance(exc, SessionConflict):
            conflict = SessionConflict(
                f"{exc} (session {self._session_id!r}): reload it with Session.load; the reply paid for "
                "is on this error",
                session_id=exc.session_id,
                expected=exc.expected,
                found=exc.found,
                reply=reply,
            )
            self._conflict = conflict
            return conflict
        if isinstance(exc, StoreError):
            return StoreError(
                f"{exc}; the reply is kept in memory and goes to the store with the next append (or flush())",
                reply=reply,
            )
        return StoreError(
            f"the store failed: {type(exc).__name__}: {exc}; the reply is kept in memory and goes to the "
            "store with the next append (or flush())",
            reply=reply,
        )

    def _landed(self, stored: Sequence[Entry]) -> None:
        """After a StoreError: when the store holds the very entry that failed (its reply was lost, the
        write went through), adopt it, so the next append builds on it instead of conflicting with it."""
        doubt, self._doubt = self._doubt, None
        if doubt is None:
            return
        entry, mark = doubt
        if any(e.seq == entry.seq and e.kind == entry.kind and e.body == entry.body for e in stored):
            self._mark = mark

    def _check_fresh(self) -> None:
        """:class:`SessionConflict` when another writer went first: nothing is sent from a stale object."""
        if self._conflict is not None:
            raise self._conflict

    def _snapshot_now(self) -> SessionSnapshot:
        return session_snapshot(
            vendor=self._adapter.vendor,
            api=self._adapter.api,
            platform=platform_of(self._adapter),
            model=self._model,
            state=self._state.value,
            prefix=self._prefix,
            policy=self._policy,
            fold=self._fold,
            stream=self._stream,
            foreign_reasoning=self._foreign_reasoning,
            on_rejected_continuation=self._on_rejected,
            options=self._options,
            layers=self._layers,
        )

    def _export_context(self, session_id: str) -> ExportContext:
        """What the exporters see of this session right after a transition (:mod:`reasonstate.export`)."""
        adapter, layers = self._adapter, self._layers
        return ExportContext(
            session_id=session_id,
            vendor=str(adapter.vendor),
            api=str(adapter.api),
            model=self._model,
            prefix=self._prefix,
            policy=self._policy.name,
            history=layers.history,
            execution=layers.records,
            trace=layers.trace,
            stripped=layers.stripped,
            units=getattr(adapter, "payload_units", None),
        )

    def _folded(self, layers: Layers) -> tuple[Layers, BaseException | None]:
        """The engine's hook after a closed turn: the session's ``Fold`` (the runtime's work) applied."""
        if self._fold is None:
            return layers, None
        committed = layers
        try:  # folded() traces and skips any Exception; this is for KeyboardInterrupt and the like
            return (
                folded(
                    layers,
                    self._fold,
                    adapter=self._adapter,
                    prefix=self._prefix,
                    model=self._model,
                    encode=lambda history: self._encode(history, layers=committed),
                ),
                None,
            )
        except BaseException as exc:  # the answer is paid for: it stays committed, unfolded
            return layers, exc

    # -- the four layers -------------------------------------------------------------------------------
    @property
    def history(self) -> History:
        """Canonical history (layer 2)."""
        return self._layers.history

    @property
    def trace(self) -> Trace:
        """Every event (layer 1)."""
        return self._layers.trace

    @property
    def continuation(self) -> tuple[Continuation, ...]:
        """Every vendor-opaque payload, in history order (layer 3; derived from the history). A step whose
        item is its parts rendered byte for byte keeps none: its provenance-only value
        (:attr:`Continuation.bare`) is not listed here."""
        return tuple(c for t in self.history.turns for s in t.steps for c in s.continuation if not c.bare)

    @property
    def execution(self) -> Records:
        """One record per successful request (layer 4), oldest first: a tuple of
        :class:`~reasonstate.state.ExecutionRecord` that also keeps the unit digests of the newest requests
        (:meth:`~reasonstate.state.Records.units_of`)."""
        return self._layers.records

    @property
    def state(self) -> TurnState:
        return self._state

    @property
    def prefix(self) -> Prefix:
        return self._prefix

    @property
    def model(self) -> str:
        return self._model

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def fold(self) -> Fold | None:
        """The session's :class:`~reasonstate.policies.Fold` (None: the history is never folded)."""
        return self._fold

    @property
    def scratch(self) -> dict[str, Any]:
        """Volatile per-turn notes and plans for the application (and its tool handlers).

        Invariants: never sent in any request and never stored in a snapshot (a restored session starts
        with it empty); emptied, in place, when a turn closes (its final answer committed) and on
        ``close()``; kept across the steps of a tool chain and across failed calls. Between turns it is
        empty unless the application wrote to it since.
        """
        return self._scratch

    @property
    def pending_calls(self) -> tuple[ToolCall, ...]:
        """The calls awaiting results (empty unless AWAITING_TOOL_RESULTS)."""
        turn = self.history.open_turn
        if self._state is not TurnState.AWAITING_TOOL_RESULTS or turn is None:
            return ()
        return tuple(ToolCall.of(c) for c in turn.steps[-1].tool_calls)

    def _user_attempt(self, text: str) -> Attempt:
        self._require("send")
        if not isinstance(text, str) or not text:
            raise InvalidInput("a user message must be a non-empty string")
        where = _unsendable(text)
        if where is not None:
            raise InvalidInput(f"the user message {where}")
        history = self.history
        return Attempt(history, history.with_turn(Turn(index=len(history.turns), user=text)), "send")

    def _tools_attempt(self, results: Mapping[str, Any]) -> Attempt:
        self._require("send_tool_results")
        history = self.history
        turn = history.open_turn
        assert turn is not None
        step = turn.steps[-1]
        declared = [c.id for c in step.tool_calls]
        if not isinstance(results, Mapping):
            raise ToolResultError("tool results must be a mapping of call id to result")
        unknown = [k for k in results if k not in declared]
        if unknown:
            raise ToolResultError(f"unknown tool call ids {unknown}; pending: {declared}")
        missing = [k for k in declared if k not in results]
        if missing:
            raise ToolResultError(f"missing results for tool calls {missing}")
        parts = tuple(ToolResultPart.of(cid, results[cid]) for cid in declared)
        for part in parts:
            where = _unsendable(part.content)
            if where is not None:
                raise ToolResultError(f"the result for tool call {part.call_id!r} {where}")
        steps = (*turn.steps[:-1], attrs.evolve(step, tool_results=parts))
        return Attempt(
            base=history,
            history=history.with_last_turn(turn.with_steps(steps)),
            action="send_tool_results",
            results_given=parts,
        )

    def close(self) -> None:
        """No further calls; the four layers stay readable (and a snapshot can still be taken). The
        exporters are closed (their open spans end, their files are closed)."""
        self._move("close")
        self._scratch.clear()
        if self._publisher is not None:
            self._publisher.close()

    # -- run(): the step's calls → calls to execute → ordered dispatch → results ---------------------------
    @staticmethod
    def _run_options(max_steps: Any, tool_timeout: Any, storm_breaker: Any) -> float | None:
        """``run``'s options checked before anything is sent (bad input changes nothing)."""
        check_count("run(max_steps=...)", max_steps, 1)
        if storm_breaker is not None and not isinstance(storm_breaker, StormBreaker):
            raise InvalidOption(
                "storm_breaker= must be an rs.StormBreaker(repeats=, window=) or None, "
                f"got {storm_breaker!r:.80}"
            )
        return check_timeout("run(tool_timeout=...)", tool_timeout)

    def _no_answer(self, max_steps: int) -> IllegalTransition:
        """``run`` reached ``max_steps``: say where the session was left (results pending, or, after
        scavenged calls answered in a user message, idle)."""
        where = (
            "tool results are pending (send_tool_results continues the chain)"
            if self.state is TurnState.AWAITING_TOOL_RESULTS
            else "the last reply's calls were scavenged from its text and answered; the session is idle"
        )
        return IllegalTransition(f"no final answer after {max_steps} steps; {where}")

    def _plan(
        self, calls: Sequence[ToolCall], tool_timeout: float | None, storm: StormBreaker | None
    ) -> Plan:
        """The dispatch plan of the open step's ``calls``; the storm breaker sees the open turn's calls before
        them (its earlier steps, declared order: the last ``window`` are all it needs). A new user turn starts
        afresh: the same lookup asked for in a later turn may well see a changed world."""
        earlier: list[ToolCallPart] = []
        turn = self.history.open_turn
        if storm is not None and turn is not None:
            for step in reversed(turn.steps[:-1]):  # the open step's calls are the ones to dispatch
                if len(earlier) >= storm.window:
                    break
                earlier[:0] = step.tool_calls
        return plan(self._prefix, calls, earlier=earlier, timeout=tool_timeout, storm=storm)

    def _executed(self, done: Dispatched) -> dict[str, Any]:
        """Trace what ran — one ``tool.suppressed`` per suppressed call, then ``tool.executed`` with the
        timings and outcomes — and give the results to send."""
        turn = self.history.open_turn
        index = turn.index if turn else None
        trace = self._layers.trace
        for record in done.suppressed:
            trace = trace.appended(EventKind.TOOL_SUPPRESSED, turn=index, **record)
        trace = trace.appended(EventKind.TOOL_EXECUTED, turn=index, calls=done.timings)
        self._set_layers(attrs.evolve(self._layers, trace=trace))
        return done.results

    def _to_run(self, reply: Reply) -> tuple[ToolCall, ...]:
        """The calls ``run`` executes after ``reply``: its own calls repaired, or, when it made none, the
        calls its text or reasoning holds (``scavenged``); each repair is a ``tool.repaired`` event
        (:mod:`reasonstate.runtime.repair`). The history and continuation keep what the model sent."""
        calls = reply.tool_calls
        if not calls:
            names = [t.name for t in self._prefix.tools]
            found = repair.scavenge(reply.text, reply.reasoning, names)
            calls = tuple(
                ToolCall(
                    id=f"scavenged-{reply.turn}-{i}",
                    name=f.name,
                    arguments=f.arguments,
                    raw_arguments=f.raw_arguments,
                    arguments_error=f.arguments_error,
                    scavenged=True,
                )
                for i, f in enumerate(found)
            )
            for call, f in zip(calls, found, strict=True):
                self._traced(
                    EventKind.TOOL_REPAIRED,
                    turn=reply.turn,
                    repair="scavenge",
                    call_id=call.id,
                    tool=call.name,
                    source=f.source,
                    where=f.where,
                )
        out = []
        for call in calls:
            fixed, events = repair.repaired(self._prefix.tool(call.name), call)
            for event in events:
                self._traced(EventKind.TOOL_REPAIRED, turn=reply.turn, **event)
            out.append(fixed)
        return tuple(out)

    def _results_attempt(self, calls: Sequence[ToolCall], results: Mapping[str, Any]) -> Attempt:
        """The next request of ``run``: the tool results, or, for scavenged calls (which no assistant step
        holds, so no vendor takes a tool result for them), a user message carrying them."""
        if calls and calls[0].scavenged:
            parts = [ToolResultPart.of(c.id, results[c.id]) for c in calls]
            text = repair.scavenged_message(calls, [(p.content, p.is_error) for p in parts])
            return self._user_attempt(text)
        return self._tools_attempt(results)

    # -- reporting and snapshots -----------------------------------------------------------------------
    def report(self, *, pricing: Pricing | None = None, kv: KVConfig | None = None) -> Report:
        """Derived from the execution and trace layers: tokens, cache reads predicted and reported,
        cost at ``pricing`` (default: the packaged table, :meth:`Pricing.default`) per request, turn and
        session, and the cache metrics (``kv`` gives the KV bytes of a self-hosted model's context).
        Anything else than a ``Pricing`` / ``KVConfig`` (or None) is :class:`InvalidOption`."""
        if pricing is not None and not isinstance(pricing, Pricing):
            raise InvalidOption(
                f"report(pricing=...) must be an rs.Pricing (Pricing.default(), Pricing.load(path), "
                f"...with_prices(...)) or None, got {type(pricing).__name__} {pricing!r:.60}"
            )
        if kv is not None and not isinstance(kv, KVConfig):
            raise InvalidOption(
                f"report(kv=...) must be an rs.KVConfig(...) or None, got {type(kv).__name__} {kv!r:.60}"
            )
        recs = self.execution
        predicted = [r for r in recs if r.predicted_cache_read is not None]
        failures = self.trace.of_kind(EventKind.CALL_FAILED)
        table = Pricing.default() if pricing is None else pricing
        per_request = tuple(table.cost(r.model, r.usage) for r in recs)
        turns: dict[int, list[Cost | None]] = {}
        for r, c in zip(recs, per_request, strict=True):
            turns.setdefault(r.turn, []).append(c)
        metrics = cache_metrics(recs, kv)
        reported = [e.data["cost"] for e in self.trace.of_kind(REPORTED_COST)]
        return Report(
            requests=len(recs),
            prompt_tokens=sum(r.usage.prompt_tokens for r in recs),
            cache_read=sum(r.usage.cache_read for r in recs),
            cache_write=sum(r.usage.cache_write for r in recs),
            output_tokens=sum(r.usage.output for r in recs),
            predicted_matches=sum(1 for r in predicted if r.predicted_cache_read == r.usage.cache_read),
            predicted_total=len(predicted),
            active_context_tokens=metrics.active_context_length,
            protocol_errors=sum(1 for e in failures if e.data.get("status") == 400),
            failed_calls=len(failures),
            cost=total_cost(per_request),
            cost_per_request=per_request,
            cost_per_turn=tuple((t, total_cost(cs)) for t, cs in sorted(turns.items())),
            metrics=metrics,
            reported_cost=sum(reported) if reported else None,
        )

    def next_request(
        self, text: str | None = None, results: Mapping[str, Any] | None = None
    ) -> VendorRequest:
        """The request the next ``send(text)`` / ``send_tool_results(results)`` would make (no I/O).

        The kwargs are a plain, mutable deep copy: changing them changes nothing in the session.
        """
        attempt = self._tools_attempt(results) if results is not None else self._user_attempt(text or "")
        request = self._encode(attempt.history)
        return attrs.evolve(request, kwargs=copy.deepcopy(dict(request.kwargs)))

    def snapshot(self) -> SessionSnapshot:
        """Everything needed to continue elsewhere with a byte-identical next request."""
        self._require("snapshot")
        return self._snapshot_now()

    @classmethod
    def restore(
        cls: type[_S],
        snapshot: SessionSnapshot | str | bytes,
        client: Any,
        *,
        tools: Sequence[Tool] | None = None,
        policy: Policy | None = None,
        fold: Fold | None = None,
        adapter: Adapter | None = None,
        exporters: Sequence[Exporter] = (),
    ) -> _S:
        """Continue a snapshot on ``client``; the next request is byte-identical to the original's.

        ``snapshot`` is a :class:`SessionSnapshot`, its JSON text or bytes. ``tools`` re-attaches handlers
        by name (handlers are code, not data); ``policy`` is needed when the snapshot's policy cannot be
        rebuilt (``Compress``); ``fold`` when the snapshot's session had one (its ``summarize`` is code: a
        snapshot holds only ``Fold.spec()``; restoring without ``fold=`` raises
        :class:`~reasonstate.errors.InvalidOption`). The scratch is volatile: a restored session's is
        empty. A snapshot that is not valid JSON, misses a field, has an unknown version or was edited
        after it was taken raises :class:`~reasonstate.errors.SnapshotError`; a payload or token ids
        changed since capture :class:`~reasonstate.errors.ContinuationMismatch`. Nothing partial is
        restored. ``exporters`` see the events from the ``session.restored`` event on (the earlier ones
        were the original session's to export).
        """
        snapshot, history, records = SessionSnapshot.loaded(snapshot)
        return cls._restored(
            snapshot,
            restored_layers(snapshot, (history, records)),
            snapshot.state,
            client,
            tools,
            policy,
            fold,
            adapter,
            exporters,
        )

    @classmethod
    def _restored(
        cls: type[_S],
        snapshot: SessionSnapshot,
        layers: Layers,
        state: str,
        client: Any,
        tools: Sequence[Tool] | None,
        policy: Policy | None,
        fold: Fold | None,
        adapter: Adapter | None,
        exporters: Sequence[Exporter],
        new_events: int = 1,
    ) -> _S:
        """A session of ``snapshot``'s header on ``client`` holding ``layers`` in ``state``; the exporters
        see the trace's last ``new_events`` events (a restore's ``session.restored``; none for a load)."""
        routing: dict[str, Any] = {}
        if adapter is None and snapshot.api == "chat":
            routing["dialect"] = snapshot.vendor  # chat adapters are named after their dialect
        elif adapter is None and snapshot.api == "messages" and snapshot.platform in _MESSAGES_DIALECTS:
            routing["dialect"] = snapshot.platform  # an Anthropic-compatible endpoint (§10.8)
        elif adapter is None and snapshot.api == "interactions":
            routing["api"] = snapshot.api  # google-genai serves generateContent unless asked otherwise
        session = cls(client, adapter=adapter, **routing, **restore_args(snapshot, tools, policy, fold))
        adapter_route = (session._adapter.vendor, session._adapter.api, platform_of(session._adapter))
        # a Converse snapshot taken before its payloads were bound to Bedrock reads first-party (§11)
        platform = recorded_platform(snapshot.vendor, snapshot.platform)
        if adapter_route != (snapshot.vendor, snapshot.api, platform):
            # a snapshot's payloads were issued by its platform: another one would refuse them
            # (docs/protocols.md §10.1); switch() after restoring to move the session on
            raise IllegalTransition(
                f"snapshot is from {_route(snapshot.vendor, snapshot.api, platform)}; this client "
                f"gives {_route(*adapter_route)} (pass adapter=, or restore on the snapshot's platform and "
                "switch())"
            )
        session._publisher = Publisher(
            Publisher.checked(exporters), _context_of(session), cursor=len(layers.trace) - new_events
        )
        session._set_layers(layers)
        session._state = TurnState(state)
        return session

    @classmethod
    def _loaded(
        cls: type[_S],
        replayed: Replayed,
        store: Any,
        session_id: str,
        client: Any,
        tools: Sequence[Tool] | None,
        policy: Policy | None,
        fold: Fold | None,
        adapter: Adapter | None,
        exporters: Sequence[Exporter],
    ) -> _S:
        """The session a store's log holds, attached to the store at the log's version."""
        # no session.restored event: a load changes nothing, so a worker that loads and flushes writes
        # nothing and conflicts with no one (the log is the session; Session.restore traces its restores)
        held = replayed.layers
        session = cls._restored(
            replayed.snapshot, held, replayed.state, client, tools, policy, fold, adapter, exporters, 0
        )
        session._attach(store, session_id)
        session._mark = Mark.of(
            replayed.version, held, len(held.trace), session._header(), replayed.state, replayed.text
        )
        session._changed = None
        if replayed.held:
            session._hold_again(replayed.held)
        return session


class Session(_Core):
    """A synchronous session over a sync vendor client (``anthropic.Anthropic``, ...).

    ``rs.Session(client, model=..., system=..., tools=[...], policy=..., fold=..., stream=False,
    **request_options)``; extra keyword arguments go to the vendor call unchanged (``max_tokens``,
    ``thinking``, ...). ``fold=Fold(...)`` folds the head of a long conversation into one summary when the
    context reaches a threshold (:class:`~reasonstate.policies.Fold`); ``session.scratch`` holds per-turn
    notes that are never sent.
    ``exporters=[...]`` receive every trace event as it happens (:mod:`reasonstate.export`, docs/export.md).

    ``store=SQLiteStore(...)`` (or ``PostgresStore``, ``RedisStore``: :mod:`reasonstate.store`) with
    ``session_id="..."`` (default: a new random id) persists the session as it goes: construction takes the
    id (:class:`~reasonstate.errors.SessionConflict` when it is taken), every commit appends one entry
    before its call returns, and :meth:`load` continues it in any process. A store failure after a paid
    call raises :class:`~reasonstate.errors.StoreError` carrying the reply, which stays committed here and
    is written by the next append or :meth:`flush`. ``store=True``/``False`` is the OpenAI Responses
    request option of that name, passed on as before.
    """

    def send(self, text: str) -> Reply:
        """Open a turn with a user message and make one model call.

        Allowed when no tool results are pending (:class:`~reasonstate.errors.IllegalTransition`
        otherwise). On success every layer is committed at once; on any failure (a vendor error, a
        timeout, a broken stream, a refused request) the session is exactly as it was and the failure is
        in the trace.
        """
        return self._call(self._user_attempt(text))

    def send_tool_results(self, results: Mapping[str, Any]) -> Reply:
        """Answer every pending call and call the model.

        ``results`` maps each pending call id to its result (a JSON value, a string, or a
        :class:`ToolResult` for an error); given in any order, they are sent in the model's declared
        order. A missing, unknown or unserializable result is a
        :class:`~reasonstate.errors.ToolResultError` and nothing is sent. Same commit-or-nothing rule as
        :meth:`send`.
        """
        return self._call(self._tools_attempt(results))

    def stream(self, text: str) -> Stream:
        """:meth:`send`, with the answer shown to the caller as it arrives::

            with session.stream("text") as stream:
                for event in stream:  # rs.StreamEvent: .kind, .delta (.call_id, .name, .index)
                    ...
            reply = stream.reply

        The request goes out streamed whatever the session's ``stream=`` (the request's ``stream`` flag is
        the only difference on the wire). Entering the block sends it (a refused request raises there);
        the events come as the bytes arrive; once they are all read, the answer is committed exactly as
        :meth:`send` commits it (the same :class:`Reply`, history, payload bytes, records and trace). Leaving
        the block before the end (``break``, an exception) closes the response and commits nothing; a
        stream that breaks (:class:`~reasonstate.errors.StreamInterrupted`, a vendor error event) commits
        nothing either and is recorded in the trace as a failed call, like a failed :meth:`send`. An
        adapter that does not stream raises :class:`~reasonstate.errors.ProtocolViolation` on entering,
        before anything is sent or changed.
        """
        return Stream(self, self._user_attempt(text))

    def stream_tool_results(self, results: Mapping[str, Any]) -> Stream:
        """:meth:`send_tool_results`, streamed to the caller as :meth:`stream` is."""
        return Stream(self, self._tools_attempt(results))

    def run(
        self,
        text: str,
        *,
        max_steps: int = 32,
        on_event: Callable[[StreamEvent], None] | None = None,
        tool_timeout: float | None = None,
        storm_breaker: StormBreaker | None = STORM_BREAKER,
    ) -> Reply:
        """``send(text)``, then execute tool handlers and send their results until the final answer.

        Each step's calls run through :mod:`reasonstate.runtime.dispatch`: handlers may be plain functions or
        ``async def``; consecutive calls of ``parallel_safe`` tools run concurrently (threads), any other call
        is a barrier; results are sent in the model's declared order whatever order they finish in. A
        handler that raises, returns a non-JSON value or runs past its timeout (``Tool(timeout=)``, else
        ``tool_timeout``) is an error result for the model, never an exception here; a hung sync handler is
        abandoned on its daemon thread, not waited for. ``storm_breaker`` (default 3 repeats in 6 calls;
        None: off) answers a repeated call with an explanatory error instead of running it, traced as
        ``tool.suppressed``.

        ``on_event``: called with every :class:`StreamEvent` of every model call as it arrives (each call
        is then made through :meth:`stream`); an exception it raises ends the run, and the call it was
        raised in commits nothing.
        """
        timeout = self._run_options(max_steps, tool_timeout, storm_breaker)
        reply = self._step(self._user_attempt(text), on_event)
        for _ in range(max_steps):
            calls = self._to_run(reply)
            if not calls:
                return reply
            results = self._executed(dispatch(self._plan(calls, timeout, storm_breaker)))
            reply = self._step(self._results_attempt(calls, results), on_event)
        raise self._no_answer(max_steps)

    def _step(self, attempt: Attempt, on_event: Callable[[StreamEvent], None] | None) -> Reply:
        if on_event is None:
            return self._call(attempt)
        with Stream(self, attempt) as stream:
            for event in stream:
                on_event(event)
        return stream.reply

    def _call(self, attempt: Attempt) -> Reply:
        self._check_fresh()
        turn = self.turn(attempt)
        request = next(turn)
        while True:
            try:
                result = transport.call(self._adapter, self._client, request, self._stream)
            except BaseException as exc:
                request = turn.throw(exc)  # the recovery's retry, or exc raised with the failure recorded
                continue
            return self._persisted(finished(turn, result))

    def _persisted(self, reply: Reply) -> Reply:
        """``reply``, once the store holds its commit (no store: at once)."""
        if self._store is not None:
            self._write(reply)
        return reply

    def _write(self, reply: Reply | None) -> None:
        transport.drive(self._writing(reply))

    def flush(self) -> int:
        """Write to the store what it does not hold yet (after a :class:`~reasonstate.errors.StoreError`,
        or a change between turns); the version. :class:`~reasonstate.errors.StoreError` /
        :class:`~reasonstate.errors.SessionConflict` as a call's append raises them."""
        if self._store is None:
            raise InvalidOption("flush(): this session has no store (pass store= to Session)")
        self._check_fresh()
        self._complete_own()  # a deferred policy.decision too: flush writes everything
        self._write(None)
        return self.version

    @classmethod
    def load(
        cls,
        store: Log,
        session_id: str,
        client: Any,
        *,
        tools: Sequence[Tool] | None = None,
        policy: Policy | None = None,
        fold: Fold | None = None,
        adapter: Adapter | None = None,
        exporters: Sequence[Exporter] = (),
    ) -> Session:
        """Continue the session ``session_id`` of ``store`` on ``client``: the four layers rebuilt from its
        log, the next request byte-identical to the one the writer would have sent; later commits are
        appended to the same log. The options are :meth:`restore`'s. No such session:
        :class:`~reasonstate.errors.StoreError`; an edited row: :class:`~reasonstate.errors.SnapshotError`
        or :class:`~reasonstate.errors.ContinuationMismatch` (nothing is loaded); an asyncio store:
        :class:`~reasonstate.errors.InvalidOption` (use :meth:`AsyncSession.load`)."""
        cls._check_store(store)
        entries = store.read(session_id)
        if not entries:
            raise StoreError(f"no session {session_id!r} in {store!r}")
        return cls._loaded(
            replay(entries), store, session_id, client, tools, policy, fold, adapter, exporters
        )


class AsyncSession(_Core):
    """The asyncio twin of :class:`Session` for async clients (``anthropic.AsyncAnthropic``, ...)."""

    _async = True

    async def send(self, text: str) -> Reply:
        """:meth:`Session.send` with awaits (same preconditions, same commit-or-nothing rule)."""
        return await self._call(self._user_attempt(text))

    async def send_tool_results(self, results: Mapping[str, Any]) -> Reply:
        """:meth:`Session.send_tool_results` with awaits (same checks, same commit-or-nothing rule)."""
        return await self._call(self._tools_attempt(results))

    def stream(self, text: str) -> AsyncStream:
        """:meth:`Session.stream` for ``async with session.stream(text) as stream: async for event in
        stream``; ``stream.reply`` after the events are read (same commit rules)."""
        return AsyncStream(self, self._user_attempt(text))

    def stream_tool_results(self, results: Mapping[str, Any]) -> AsyncStream:
        """:meth:`Session.stream_tool_results` on an async client."""
        return AsyncStream(self, self._tools_attempt(results))

    async def run(
        self,
        text: str,
        *,
        max_steps: int = 32,
        on_event: Callable[[StreamEvent], Awaitable[None] | None] | None = None,
        tool_timeout: float | None = None,
        storm_breaker: StormBreaker | None = STORM_BREAKER,
    ) -> Reply:
        """:meth:`Session.run` with awaits. Handlers run as tasks on this loop (an ``async def`` handler is
        awaited and cancelled at its timeout; a sync one runs on a daemon thread the task awaits), so the loop
        is never blocked while tools run. ``on_event`` is called with each event as it arrives; when it
        returns an awaitable (an ``async def`` callback), that is awaited before the next event is read."""
        timeout = self._run_options(max_steps, tool_timeout, storm_breaker)
        reply = await self._step(self._user_attempt(text), on_event)
        for _ in range(max_steps):
            calls = self._to_run(reply)
            if not calls:
                return reply
            results = self._executed(await adispatch(self._plan(calls, timeout, storm_breaker)))
            reply = await self._step(self._results_attempt(calls, results), on_event)
        raise self._no_answer(max_steps)

    async def _step(
        self, attempt: Attempt, on_event: Callable[[StreamEvent], Awaitable[None] | None] | None
    ) -> Reply:
        if on_event is None:
            return await self._call(attempt)
        async with AsyncStream(self, attempt) as stream:
            async for event in stream:
                shown = on_event(event)
                if inspect.isawaitable(shown):
                    await shown
        return stream.reply

    async def _call(self, attempt: Attempt) -> Reply:
        await self._fresh()
        turn = self.turn(attempt)
        request = next(turn)
        while True:
            try:
                result = await transport.acall(self._adapter, self._client, request, self._stream)
            except BaseException as exc:
                request = turn.throw(exc)
                continue
            return await self._persisted(finished(turn, result))

    async def _fresh(self) -> None:
        """Not stale, and (a new session's first call) its id taken in the store before anything is paid."""
        self._check_fresh()
        if self._store is not None and self._mark is None:
            await self._write(None)

    async def _persisted(self, reply: Reply) -> Reply:
        if self._store is not None:
            await self._write(reply)
        return reply

    async def _write(self, reply: Reply | None) -> None:
        await transport.adrive(self._writing(reply))

    async def flush(self) -> int:
        """:meth:`Session.flush`, awaited."""
        if self._store is None:
            raise InvalidOption("flush(): this session has no store (pass store= to AsyncSession)")
        self._check_fresh()
        self._complete_own()  # a deferred policy.decision too: flush writes everything
        await self._write(None)
        return self.version

    @classmethod
    async def load(
        cls,
        store: AsyncLog,
        session_id: str,
        client: Any,
        *,
        tools: Sequence[Tool] | None = None,
        policy: Policy | None = None,
        fold: Fold | None = None,
        adapter: Adapter | None = None,
        exporters: Sequence[Exporter] = (),
    ) -> AsyncSession:
        """:meth:`Session.load` from an asyncio store (a sync store:
        :class:`~reasonstate.errors.InvalidOption`)."""
        cls._check_store(store)
        entries = await store.read(session_id)
        if not entries:
            raise StoreError(f"no session {session_id!r} in {store!r}")
        return cls._loaded(
            replay(entries), store, session_id, client, tools, policy, fold, adapter, exporters
        )


# -- streams to the caller: Stream (``with session.stream(text) as stream: for event in stream``) and
# AsyncStream (``async with`` / ``async for``), each a short driver of the turn engine (Engine.turn).
#
# Entering the block begins the turn and opens the response (the recovery's retry included, as for
# ``send``); the events come as the bytes arrive; once they are all read the answer is sent into the engine,
# which commits it exactly as ``send`` does. Leaving early, or a stream that breaks, throws the failure into
# the engine instead (a caller who left early is not traced: nothing was wrong with the answer).
#
# Invariant: a stream ends exactly once — committed (``reply`` set) or failed (the session as it was
# before, a reasonstate error traced) — and the HTTP response is closed either way.

_Streaming = TypeVar("_Streaming", transport.Streaming, transport.AsyncStreaming)


class _Left(Exception):
    """The caller left a stream before its end: the call fails without a trace event (nothing was wrong
    with the answer; the caller did not want the rest)."""


class _StreamBase(Generic[_Streaming]):
    """What :class:`Stream` and :class:`AsyncStream` share: the engine's turn, its one outcome, the reply."""

    def __init__(self, session: Switching, attempt: Attempt) -> None:
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
        if isinstance(self._session, _Core):
            self._session._check_fresh()
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
        session = self._session
        if isinstance(session, Session):
            session._persisted(self.reply)

    def __exit__(self, *exc: object) -> None:
        if self._streaming is not None:
            self._streaming.close()
        self._failed(_Left())


class AsyncStream(_StreamBase[transport.AsyncStreaming]):
    """:class:`Stream` on an async client: ``async with`` / ``async for``."""

    async def __aenter__(self) -> AsyncStream:
        if isinstance(self._session, AsyncSession) and self._attempt is not None:
            await self._session._fresh()
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
        session = self._session
        if isinstance(session, AsyncSession):
            await session._persisted(self.reply)

    async def __aexit__(self, *exc: object) -> None:
        if self._streaming is not None:
            await self._streaming.aclose()
        self._failed(_Left())
