"""Tool dispatch for ``Session.run`` / ``AsyncSession.run``: ordered, bounded, never lost.

A step's calls go through one pipeline, written once for both session kinds:

1. :func:`plan` (pure): each call becomes a job — its handler and arguments, or an answer decided without
   running anything (no handler, arguments the model botched, a call the :class:`StormBreaker` suppresses);
   consecutive runnable calls of ``parallel_safe`` tools form one group, any other runnable call is a group
   of its own (a barrier: everything before it has finished, it runs alone, then the next group starts);
2. :func:`dispatch` (threads) or :func:`adispatch` (asyncio tasks; sync handlers in threads, so the event
   loop is never blocked) runs the groups in order;
3. the results come back keyed by call id **in the model's declared order**, whatever order the handlers
   finished in (seed 002's ordered parallel dispatch: the log, hence the next prefix, does not depend on
   timing), with one timing per call.

Invariants:
  * ``list(result.results) == [c.id for c in calls]``: every call has exactly one result (the history
    invariant: the vendor refuses a step whose calls are not all answered, docs/protocols.md);
  * a handler that raises, times out, or returns a value that is not JSON is an error
    :class:`ToolResult` (sent with the vendor's error flag where it has one: Anthropic's ``tool_result``
    ``is_error``, docs/protocols.md §4.2), never an exception out of the run and never a missing result;
  * a handler may be a plain function or an ``async def``; under ``Session`` a coroutine runs to completion
    on its own event loop in a worker thread, under ``AsyncSession`` it is a task on the session's loop;
  * a timed-out ``async def`` handler is cancelled; a timed-out *sync* handler cannot be killed (Python has no
    way to stop a thread): its daemon thread is abandoned, never waited for — neither by the run nor at
    interpreter exit — and whatever it returns later is discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from reasonstate.errors import InvalidOption, ToolResultError
from reasonstate.prefix import Prefix, canonical_json
from reasonstate.state.frozen import thaw
from reasonstate.state.history import ToolResult, result_text

__all__ = [
    "STORM_BREAKER",
    "Dispatched",
    "Plan",
    "StormBreaker",
    "ToolResult",
    "adispatch",
    "dispatch",
    "plan",
    "result_text",
]


def check_count(what: str, value: Any, least: int) -> int:
    """``value`` when it is an integer >= ``least`` (not a bool), else :class:`InvalidOption` naming
    ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidOption(f"{what} must be an integer >= {least}, got {value!r}")
    return value


class _CallToRun(Protocol):
    """A tool call as dispatch reads it (the session's ``ToolCall``)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Mapping[str, Any] | None: ...

    @property
    def arguments_error(self) -> str | None: ...


def _key(call: _CallToRun) -> tuple[str, str] | None:
    """What makes two calls "the same": the tool and its arguments as canonical JSON (key order and spacing
    do not matter). A call without arguments (botched JSON) is never run, so it matches nothing."""
    if call.arguments is None:
        return None
    return call.name, canonical_json(thaw(call.arguments))


@attrs.frozen(slots=True)
class StormBreaker:
    """Suppresses a call whose tool and arguments occur ``repeats`` times within the last ``window`` calls
    (the call itself included; seed 002's storm breaker: read the same file, fail to understand, read it
    again...). The default is 3 in 6.

    The window counts the tool calls of the current user turn in declared order — its earlier steps from
    the history, then the current step's calls before this one — including calls that were themselves
    suppressed or not run. A new user turn starts afresh (the same lookup in a later turn may see a changed
    world: ``run_tests`` once per turn is no storm). A suppressed call is answered with an explanatory error
    result and traced as ``tool.suppressed``. Pass ``storm_breaker=None`` to ``run`` to turn it off.
    """

    repeats: int = attrs.field(
        default=3, validator=lambda _i, _a, v: check_count("StormBreaker(repeats=)", v, 2)
    )
    window: int = attrs.field(default=6)

    @window.validator
    def _window(self, _attribute: object, value: Any) -> None:
        check_count("StormBreaker(window=)", value, self.repeats)

    def suppressed(self, earlier: Sequence[_CallToRun], calls: Sequence[_CallToRun]) -> dict[str, int]:
        """Call id → how often its (tool, arguments) occur in the window ending at it, for each of
        ``calls`` (one step, declared order) to suppress; ``earlier`` are the session's calls before them."""
        keys = [_key(c) for c in earlier[-self.window :]]
        out: dict[str, int] = {}
        for call in calls:
            key = _key(call)
            keys.append(key)
            if key is None:
                continue
            count = keys[-self.window :].count(key)
            if count >= self.repeats:
                out[call.id] = count
        return out


#: the default of ``run(storm_breaker=)``: 3 repeats within the last 6 calls
STORM_BREAKER = StormBreaker()


@attrs.frozen(slots=True)
class _Job:
    """One call to answer: run ``handler(**arguments)`` within ``timeout``, or give ``answer`` as is."""

    call: _CallToRun
    handler: Callable[..., Any] | None
    arguments: Mapping[str, Any]
    timeout: float | None
    parallel: bool
    answer: ToolResult | None = None
    #: the outcome of an answer given without running: "error" or "suppressed"
    outcome: str = "error"

    @property
    def is_async(self) -> bool:
        """An ``async def`` handler (also a ``functools.partial`` of one, or an object whose ``__call__``
        is one): awaited on the session's loop, never on a thread."""
        handler = self.handler
        return handler is not None and (
            inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)
        )


@attrs.frozen(slots=True)
class Plan:
    """A step's calls as groups to run one after the other (a group's jobs run together), plus what the
    storm breaker suppressed (one record per suppressed call, for the trace)."""

    calls: tuple[_CallToRun, ...]
    groups: tuple[tuple[_Job, ...], ...]
    suppressed: tuple[dict[str, Any], ...]


@attrs.frozen(slots=True)
class Dispatched:
    """What running a :class:`Plan` gave: ``results`` (call id → value, in the declared order), ``timings``
    (per call, declared order: ``id``, ``name``, ``started_at`` wall time, ``duration_s``, ``is_error`` and
    ``outcome`` — ``ok``, ``error``, ``timeout`` or ``suppressed``; never an argument or a result: they are
    content) and ``suppressed`` (the plan's records)."""

    results: dict[str, Any]
    timings: list[dict[str, Any]]
    suppressed: tuple[dict[str, Any], ...]


def plan(
    prefix: Prefix,
    calls: Sequence[_CallToRun],
    *,
    earlier: Sequence[_CallToRun] = (),
    timeout: float | None = None,
    storm: StormBreaker | None = STORM_BREAKER,
) -> Plan:
    """The jobs of ``calls`` (one step, declared order), grouped; nothing runs. ``timeout`` applies to tools
    without their own ``Tool(timeout=)``; ``earlier`` are the session's calls before this step (for the
    storm breaker)."""
    storms = storm.suppressed(earlier, calls) if storm is not None else {}
    suppressed: list[dict[str, Any]] = []
    groups: list[tuple[_Job, ...]] = []
    chunk: list[_Job] = []
    for call in calls:
        job = _job(prefix, call, timeout, storms.get(call.id), storm)
        if job.answer is not None and job.outcome == "suppressed":
            assert storm is not None
            suppressed.append(
                {
                    "call_id": call.id,
                    "name": call.name,
                    "count": storms[call.id],
                    "repeats": storm.repeats,
                    "window": storm.window,
                }
            )
        if job.answer is not None or job.parallel:  # nothing to run is no barrier
            chunk.append(job)
            continue
        if chunk:
            groups.append(tuple(chunk))
            chunk = []
        groups.append((job,))
    if chunk:
        groups.append(tuple(chunk))
    return Plan(tuple(calls), tuple(groups), tuple(suppressed))


def _job(
    prefix: Prefix,
    call: _CallToRun,
    timeout: float | None,
    storm_count: int | None,
    storm: StormBreaker | None,
) -> _Job:
    tool = prefix.tool(call.name)
    parallel = tool is not None and tool.parallel_safe

    def answered(text: str, outcome: str = "error") -> _Job:
        return _Job(call, None, {}, None, parallel, ToolResult(text, is_error=True), outcome)

    if tool is None or tool.handler is None:
        return answered(f"no handler for tool {call.name!r}")
    if call.arguments is None:  # never run a handler on arguments the model did not finish or botched
        return answered(f"invalid arguments for {call.name!r}: {call.arguments_error}")
    if storm_count is not None and storm is not None:
        return answered(
            f"suppressed: {call.name} was called with the same arguments {storm_count} times in the last "
            f"{storm.window} calls; it was not run again. Use the result you already have, or change the "
            "arguments.",
            "suppressed",
        )
    limit = tool.timeout if tool.timeout is not None else timeout
    # thawed: the handler gets plain dicts and lists, and nothing it does to them reaches the history
    return _Job(call, tool.handler, thaw(call.arguments), limit, parallel)


# -- outcomes ----------------------------------------------------------------------------------------------
_TIMED_OUT = object()


@attrs.frozen(slots=True)
class _Done:
    value: Any
    outcome: str
    started_at: float
    duration_s: float


def _done(job: _Job, value: Any, error: BaseException | None, started_at: float, t0: float) -> _Done:
    """The job's result from what its handler did: returned ``value``, raised ``error`` or timed out."""
    duration = round(time.perf_counter() - t0, 6)
    if error is not None:  # a failing tool is a tool result, not a session failure
        return _Done(
            ToolResult(f"{type(error).__name__}: {error}", is_error=True), "error", started_at, duration
        )
    if value is _TIMED_OUT:
        text = (
            f"timeout: {job.call.name} did not finish within {job.timeout:g} s; it was abandoned and its "
            "result, if any, is discarded"
        )
        return _Done(ToolResult(text, is_error=True), "timeout", started_at, duration)
    try:
        _, is_error = result_text(value)
    except ToolResultError as exc:
        text = f"{job.call.name} returned a result that is {exc}"
        return _Done(ToolResult(text, is_error=True), "error", started_at, duration)
    return _Done(value, "error" if is_error else "ok", started_at, duration)


def _answered(job: _Job) -> _Done:
    return _Done(job.answer, job.outcome, time.time(), 0.0)


def _collect(p: Plan, done: Mapping[str, _Done]) -> Dispatched:
    results = {c.id: done[c.id].value for c in p.calls}
    timings = [
        {
            "id": c.id,
            "name": c.name,
            "started_at": done[c.id].started_at,
            "duration_s": done[c.id].duration_s,
            "is_error": done[c.id].outcome != "ok",
            "outcome": done[c.id].outcome,
        }
        for c in p.calls
    ]
    return Dispatched(results, timings, p.suppressed)


async def _bounded(awaitable: Awaitable[Any], timeout: float | None) -> Any:
    """``await awaitable``, or :data:`_TIMED_OUT` (the task cancelled) after ``timeout`` seconds. Not
    ``asyncio.wait_for``: a ``TimeoutError`` the handler raises itself is an error, not our timeout."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:  # the run itself was cancelled: so is the handler
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_quiet)
        return _TIMED_OUT
    return task.result()


def _quiet(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned task's late error is not logged as "never retrieved"


def _complete(awaitable: Awaitable[Any], timeout: float | None) -> Any:
    """Run ``awaitable`` to completion on a fresh event loop in this thread (one with no running loop)."""
    return asyncio.run(_bounded(awaitable, timeout))


def _call_sync(job: _Job) -> Any:
    """The handler called in this thread; an awaitable it returns is run on this thread's own loop."""
    assert job.handler is not None
    value = job.handler(**job.arguments)
    if inspect.isawaitable(value):
        value = _complete(value, job.timeout)
    return value


class _Worker:
    """One handler on a daemon thread (never joined: a hung handler cannot hold up the run or the exit)."""

    def __init__(self, job: _Job) -> None:
        self.job = job
        self.finished = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        context = contextvars.copy_context()  # the caller's context variables, as asyncio.to_thread does
        name = f"reasonstate-tool-{job.call.name}"
        threading.Thread(target=context.run, args=(self._body,), name=name, daemon=True).start()

    def _body(self) -> None:
        try:
            self.value = _call_sync(self.job)
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished.set()

    def wait(self) -> _Done:
        timeout = self.job.timeout
        left = None if timeout is None else max(0.0, self.t0 + timeout - time.perf_counter())
        if not self.finished.wait(left):
            return _done(self.job, _TIMED_OUT, None, self.started_at, self.t0)
        if self.error is not None and not isinstance(self.error, Exception):
            raise self.error  # KeyboardInterrupt, SystemExit: not a tool's failure
        return _done(self.job, self.value, self.error, self.started_at, self.t0)


def _inline(job: _Job) -> _Done:
    started_at, t0 = time.time(), time.perf_counter()
    try:
        value = _call_sync(job)
    except Exception as exc:
        return _done(job, None, exc, started_at, t0)
    return _done(job, value, None, started_at, t0)


def dispatch(p: Plan) -> Dispatched:
    """Run a plan with threads (``Session``): a group's handlers run concurrently on daemon threads; a group
    of one sync handler without a timeout runs in the caller's thread (thread-bound resources keep working),
    as it always did."""
    done: dict[str, _Done] = {}
    for group in p.groups:
        runnable = [j for j in group if j.answer is None]
        workers: list[_Worker] = []
        for job in group:
            if job.answer is not None:
                done[job.call.id] = _answered(job)
            elif len(runnable) == 1 and job.timeout is None and not job.is_async:
                done[job.call.id] = _inline(job)
            else:
                workers.append(_Worker(job))
        for worker in workers:
            done[worker.job.call.id] = worker.wait()
    return _collect(p, done)


async def adispatch(p: Plan) -> Dispatched:
    """Run a plan on the running event loop (``AsyncSession``): a group's calls are tasks awaited together;
    an ``async def`` handler is a task (cancelled at its timeout), a sync handler runs on a daemon thread
    the task awaits, so the loop is never blocked."""
    done: dict[str, _Done] = {}
    for group in p.groups:
        finished = await asyncio.gather(*(_arun(job) for job in group))
        done.update((job.call.id, d) for job, d in zip(group, finished, strict=True))
    return _collect(p, done)


async def _arun(job: _Job) -> _Done:
    if job.answer is not None:
        return _answered(job)
    assert job.handler is not None
    started_at, t0 = time.time(), time.perf_counter()
    try:
        if job.is_async:
            value = await _bounded(job.handler(**job.arguments), job.timeout)
        else:
            value = await _bounded(_threaded(job), job.timeout)
    except Exception as exc:
        return _done(job, None, exc, started_at, t0)
    return _done(job, value, None, started_at, t0)


def _threaded(job: _Job) -> asyncio.Future[Any]:
    """A future of the loop, resolved by the sync handler on a daemon thread (not the loop's default
    executor: ``asyncio.run`` joins that at exit, and a hung handler would hang the program)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # timed out and abandoned
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def body() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = _call_sync(job)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for this result any more
            loop.call_soon_threadsafe(settle, value, error)

    context = contextvars.copy_context()
    name = f"reasonstate-tool-{job.call.name}"
    threading.Thread(target=context.run, args=(body,), name=name, daemon=True).start()
    return future
