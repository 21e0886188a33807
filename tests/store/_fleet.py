"""The fleet of tests/store/test_fleet.py: worker processes that serve turns of many sessions from one
store, a supervisor that hands the turns out and kills workers, and the model they talk to.

What is where:

- the **model** (:func:`respond`) is a responder for a deterministic Anthropic emulator: it decides each
  answer from the request alone (the session's tag and turn number in the newest user text, how many
  steps that turn has made), so one emulator serves every session in any interleaving, and a request
  sent twice (a retry after a kill) is answered with the same bytes;
- a **turn** (:func:`serve_turn`) is a user message and its tool chain to the final answer; a worker
  loads the session, and when the stored history already has the turn (an earlier worker died after the
  append, before its ack) it acks without a model call; an open turn (died between two steps) is
  continued; a :class:`~reasonstate.errors.SessionConflict` (another delivery of the same turn went first)
  is a reload;
- a **worker** (:func:`worker`) is a process with its own store connection and a real
  ``anthropic.Anthropic`` on the emulator's base URL; it takes tasks from its own pipe (a SIGKILL never
  leaves a shared queue's lock held, which would wedge every other worker: a test artefact, not a store
  property), and can be told to kill itself at a chosen point of a task;
- the **supervisor** (:class:`Fleet`) keeps the shared queue of ready turns: turn k of a session is handed
  out only once turn k-1 is acknowledged (the turns of one session apply in order, at least once); a task
  whose worker died is requeued; some tasks are delivered twice at once (an at-least-once queue); every
  few acks it SIGKILLs a random busy worker; every dead worker is replaced. Everything is bounded by a
  deadline, and every worker is killed and reaped on the way out.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import re
import signal
import time
import traceback
from collections.abc import Iterable, Mapping
from multiprocessing.connection import Connection, wait
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.errors import SessionConflict
from reasonstate.store import Store
from reasonstate.testing import ModelAction, ToolCallSpec

MODEL = "claude-sonnet-4-6"
WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = rs.Tool(
    name="get_time",
    description="Local time for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
TOOLS = [WEATHER, CLOCK]
OPTIONS: dict[str, Any] = {
    "system": "You are a careful travel assistant. Always check the weather before advising.",
    "tools": TOOLS,
    "max_tokens": 4096,
    "thinking": {"type": "enabled", "budget_tokens": 2048},
}
#: the emulator's key: the control run and every fleet verify each other's signatures
SECRET = b"reasonstate fleet test"

#: where a worker told to die kills itself: once the model answered the turn's first call (nothing stored
#: yet), after the first step of a tool chain is stored, after the whole turn is stored (before the ack)
DIE_POINTS = ("answered", "mid-chain", "appended")


# -- the conversation --------------------------------------------------------------------------------------
def session_id(s: int) -> str:
    return f"fleet-s{s:02d}"


def user_text(s: int, k: int) -> str:
    """Turn ``k`` of session ``s``: a two-step tool chain (k % 3 == 0), a plain answer (1), one call (2)."""
    question = ("Paris or Rome: which is warmer?", "And tomorrow?", "What time is it in Oslo?")[k % 3]
    return f"[{session_id(s)} turn {k}] {question}"


_TAG = re.compile(r"\[fleet-s(\d+) turn (\d+)\]")


def tag_of(body: bytes) -> int | None:
    """The session a request body belongs to (its first tagged user text), None when it has none."""
    found = re.search(rb"\[fleet-s(\d+) turn \d+\]", body)
    return int(found.group(1)) if found else None


def _text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return "".join(texts) if texts else None


def respond(body: Mapping[str, Any]) -> ModelAction:
    """The model of the fleet: the answer to a request, from the request alone."""
    messages = body["messages"]
    q = max(i for i, m in enumerate(messages) if m["role"] == "user" and _text_of(m["content"]) is not None)
    text = _text_of(messages[q]["content"]) or ""
    found = _TAG.search(text)
    assert found is not None, f"an untagged user text: {text!r:.80}"
    s, k = int(found.group(1)), int(found.group(2))
    step = sum(1 for m in messages[q:] if m["role"] == "assistant")
    who = f"{session_id(s)} turn {k}"
    kind = k % 3
    if kind == 1 or (kind == 0 and step == 2) or (kind == 2 and step == 1):
        return ModelAction.answer(
            f"Answer for {who}: Rome is warmer.", reasoning=f"I have what I need for {who}."
        )
    if kind == 0 and step == 0:
        return ModelAction(
            reasoning=f"Two cities for {who}: call the weather tool for both, in parallel.",
            redacted=True,
            tool_calls=(
                ToolCallSpec("get_weather", {"city": "Paris"}),
                ToolCallSpec("get_weather", {"city": "Rome"}),
            ),
        )
    city = "Rome" if kind == 0 else "Oslo"
    return ModelAction(
        reasoning=f"Check the local time in {city} for {who}.",
        tool_calls=(ToolCallSpec("get_time", {"city": city}),),
    )


def results_for(session: rs.Session) -> dict[str, Any]:
    """The tool results of the pending calls: a function of each call, as the tools' would be."""
    return {
        c.id: {"tool": c.name, "city": (c.arguments or {}).get("city"), "value": f"{c.name}/{c.arguments}"}
        for c in session.pending_calls
    }


def control_session(client: Any) -> rs.Session:
    return rs.Session(client, model=MODEL, **OPTIONS)


def play(session: rs.Session, s: int, k: int) -> None:
    """Turn ``k`` of session ``s`` from its start, in one process (the control run)."""
    session.send(user_text(s, k))
    while session.pending_calls:
        session.send_tool_results(results_for(session))


# -- one turn, at least once -------------------------------------------------------------------------------
class FleetFailure(AssertionError):
    """What a worker found that the fleet promises never happens (a lost turn, another turn's text)."""


@attrs.define
class Done:
    """How a worker served a task: ``how`` is ``fresh`` (sent the user text), ``resumed`` (continued an
    open turn), ``already`` (the stored history had the turn: acked without a model call); ``calls`` the
    model calls made, ``conflicts`` the appends another worker beat."""

    how: str = "fresh"
    calls: int = 0
    conflicts: int = 0


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # pragma: no cover - the signal is delivered first


def _open(store: Store, client: Any, s: int) -> rs.Session:
    sid = session_id(s)
    if store.version(sid) == 0:
        try:
            return rs.Session(client, model=MODEL, store=store, session_id=sid, **OPTIONS)
        except SessionConflict:
            pass  # an earlier delivery created it meanwhile
    return rs.Session.load(store, sid, client, tools=TOOLS)


def serve_turn(store: Store, client: Any, s: int, k: int, die: str | None = None) -> Done:
    """Bring session ``s`` to the end of turn ``k``, whatever earlier deliveries of the task did."""
    done = Done()
    text = user_text(s, k)
    for _ in range(50):
        session = _open(store, client, s)
        turns = session.history.turns
        if len(turns) < k:
            raise FleetFailure(
                f"{session_id(s)}: turn {k} handed out, but the store holds {len(turns)} turns"
            )
        try:
            if len(turns) > k:
                if turns[k].user != text:
                    raise FleetFailure(f"{session_id(s)} turn {k} holds {turns[k].user!r}, not {text!r}")
                if k < len(turns) - 1 or not session.pending_calls:
                    if done.how == "fresh" and not done.calls:
                        done.how = "already"
                    return done
                if not done.calls:
                    done.how = "resumed"
            else:
                session.send(text)
                done.calls += 1
                if die == "mid-chain" and session.pending_calls:
                    _die()
            while session.pending_calls:
                session.send_tool_results(results_for(session))
                done.calls += 1
            if die in ("appended", "mid-chain"):
                _die()
            return done
        except SessionConflict:
            done.conflicts += 1  # another delivery appended first: reload and look again
    raise FleetFailure(f"{session_id(s)} turn {k}: 50 conflicts in a row")


# -- a worker process --------------------------------------------------------------------------------------
def open_store(spec: tuple[str, Mapping[str, Any]]) -> Store:
    kind, options = spec
    if kind == "sqlite":
        from reasonstate.store import SQLiteStore

        return SQLiteStore(**options)
    if kind == "postgres":
        from reasonstate.store import PostgresStore

        return PostgresStore(**options)
    if kind == "redis":
        from reasonstate.store import RedisStore

        return RedisStore(**options)
    raise ValueError(f"no store kind {kind!r}")


def worker(conn: Connection, spec: tuple[str, Mapping[str, Any]], base_url: str) -> None:
    """A worker process: serve the tasks that come down ``conn`` until None; each answer goes back up."""
    import anthropic

    dying: list[bool] = [False]

    def answered(response: Any) -> None:  # the emulator answered; this worker dies before storing it
        if dying[0]:
            _die()

    http = anthropic.DefaultHttpxClient(event_hooks={"response": [answered]})
    client = anthropic.Anthropic(
        base_url=base_url, api_key="test-key", max_retries=0, timeout=30.0, http_client=http
    )
    store = open_store(spec)
    conn.send(("ready", os.getpid()))
    while True:
        task = conn.recv()
        if task is None:
            break
        s, k, die = task
        dying[0] = die == "answered"
        try:
            done = serve_turn(store, client, s, k, die)
        except BaseException as exc:  # the supervisor fails the test with it
            conn.send(("error", (s, k), f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            raise
        times = os.times()
        conn.send(("ack", (s, k), {**attrs.asdict(done), "cpu": times.user + times.system}))
    store.close()


# -- the supervisor ----------------------------------------------------------------------------------------
@attrs.define
class Figures:
    """What a fleet run did."""

    sessions: int = 0
    turns: int = 0
    workers: int = 0
    acks: int = 0
    duplicate_acks: int = 0
    deliveries: int = 0
    duplicated_deliveries: int = 0
    requeued: int = 0
    kills: int = 0
    deaths: int = 0
    self_kills: collections.Counter[str] = attrs.field(factory=collections.Counter)
    served: collections.Counter[str] = attrs.field(factory=collections.Counter)
    model_calls: int = 0
    conflicts: int = 0
    started: int = 0
    seconds: float = 0.0
    #: CPU seconds: of this process (the supervisor and the emulator's threads) during the run, and of
    #: the workers as they last reported it (a worker's work after its last ack, until it died, is not in it)
    supervisor_cpu: float = 0.0
    worker_cpu: dict[int, float] = attrs.field(factory=dict)

    def __str__(self) -> str:
        return (
            f"{self.sessions} sessions x {self.turns} turns = {self.sessions * self.turns} turns by "
            f"{self.workers} workers in {self.seconds:.1f}s: {self.deliveries} deliveries "
            f"({self.duplicated_deliveries} delivered twice at once, {self.requeued} requeued after a kill), "
            f"{self.acks} acks (+{self.duplicate_acks} duplicate), served {dict(self.served)}, "
            f"{self.model_calls} model calls, {self.conflicts} conflicts; {self.kills} SIGKILLs by the "
            f"supervisor + {sum(self.self_kills.values())} workers told to SIGKILL themselves "
            f"{dict(self.self_kills)}: {self.deaths} workers died, {self.started} processes started; CPU "
            f"{self.supervisor_cpu:.1f}s supervisor and emulator, "
            f"{sum(self.worker_cpu.values()):.1f}s+ workers"
        )


@attrs.define
class _Worker:
    process: Any
    conn: Connection
    ready: bool = False
    killed: bool = False
    tasks: list[tuple[int, int, str | None]] = attrs.field(factory=list)


class Fleet:
    """Runs ``sessions`` x ``turns`` through ``workers`` worker processes on ``spec``'s store.

    ``kill_every``: SIGKILL a random busy worker every that many acks; ``die_rate``: the share of first
    deliveries told to kill themselves at a random :data:`DIE_POINTS` point; ``duplicate_rate``: the share
    of first deliveries put on the queue twice; ``deadline``: seconds before the run fails.
    """

    def __init__(
        self,
        context: Any,
        spec: tuple[str, Mapping[str, Any]],
        base_url: str,
        *,
        sessions: int,
        turns: int,
        workers: int = 8,
        kill_every: int = 8,
        die_rate: float = 0.1,
        duplicate_rate: float = 0.1,
        seed: int = 0,
        deadline: float = 120.0,
    ) -> None:
        self.context, self.spec, self.base_url = context, spec, base_url
        self.sessions, self.turns, self.n_workers = sessions, turns, workers
        self.kill_every, self.die_rate, self.duplicate_rate = kill_every, die_rate, duplicate_rate
        self.rng = random.Random(seed)
        self.deadline = deadline
        self.figures = Figures(sessions=sessions, turns=turns, workers=workers)
        self._workers: list[_Worker] = []

    def _start(self) -> _Worker:
        parent, child = self.context.Pipe()
        process = self.context.Process(
            target=worker, args=(child, self.spec, self.base_url), name="fleet-worker", daemon=True
        )
        process.start()
        child.close()
        self.figures.started += 1
        w = _Worker(process, parent)
        self._workers.append(w)
        return w

    def _reap(self, w: _Worker, ready: collections.deque[tuple[int, int, str | None]]) -> None:
        """A dead worker: joined (so nothing of it still writes), its tasks requeued first, replaced."""
        w.process.join(timeout=10)
        if w.process.is_alive():  # pragma: no cover - SIGKILL does not wait
            raise FleetFailure(f"worker {w.process.pid} does not die")
        if not w.ready:
            raise FleetFailure(f"a worker died before it was ready (exit code {w.process.exitcode})")
        w.conn.close()
        self._workers.remove(w)
        self.figures.deaths += 1
        for s, k, _ in reversed(w.tasks):
            ready.appendleft((s, k, None))
            self.figures.requeued += 1
        self._start()

    def run(self) -> Figures:
        started, cpu = time.monotonic(), time.process_time()
        order = list(range(self.sessions))
        self.rng.shuffle(order)
        ready: collections.deque[tuple[int, int, str | None]] = collections.deque((s, 0, None) for s in order)
        acked = [0] * self.sessions  # the next turn of each session to be acknowledged
        first = set()  # (s, k) delivered at least once
        remaining = self.sessions * self.turns
        since_kill = 0
        try:
            for _ in range(self.n_workers):
                self._start()
            while remaining:
                if time.monotonic() - started > self.deadline:
                    self.figures.seconds = time.monotonic() - started
                    raise FleetFailure(
                        f"the fleet ran out of its {self.deadline:.0f}s deadline: {self.figures}"
                    )
                for w in self._workers:  # hand out ready turns to idle workers
                    if not ready:
                        break
                    if w.ready and not w.tasks and not w.killed:
                        s, k, _ = ready.popleft()  # (a copy of a turn since acked: the worker acks it)
                        die = None
                        if (s, k) not in first:
                            first.add((s, k))
                            if self.rng.random() < self.die_rate:
                                die = self.rng.choice(DIE_POINTS)
                            if self.rng.random() < self.duplicate_rate:  # next in line: two race
                                ready.appendleft((s, k, None))
                                self.figures.duplicated_deliveries += 1
                        if die:
                            self.figures.self_kills[die] += 1
                        w.tasks.append((s, k, die))
                        w.conn.send((s, k, die))
                        self.figures.deliveries += 1
                for w in list(self._workers):  # died without a word (the pipe is empty and closed)
                    if w.process.exitcode is not None and not w.conn.poll():
                        self._reap(w, ready)
                readable = wait([w.conn for w in self._workers], timeout=0.5)
                for w in [w for w in self._workers if w.conn in readable]:
                    try:
                        message: Any = w.conn.recv()
                    except (EOFError, OSError):
                        self._reap(w, ready)
                        continue
                    if message[0] == "ready":
                        w.ready = True
                        continue
                    if message[0] == "error":
                        raise FleetFailure(f"a worker failed on {message[1]}: {message[2]}\n{self.figures}")
                    _, (s, k), done = message
                    w.tasks.remove(next(t for t in w.tasks if t[:2] == (s, k)))
                    self.figures.served[done["how"]] += 1
                    self.figures.model_calls += done["calls"]
                    self.figures.conflicts += done["conflicts"]
                    self.figures.worker_cpu[w.process.pid] = done["cpu"]
                    if k < acked[s]:
                        self.figures.duplicate_acks += 1
                        continue
                    if k > acked[s]:
                        raise FleetFailure(f"{session_id(s)}: turn {k} acked before turn {acked[s]}")
                    acked[s] += 1
                    remaining -= 1
                    self.figures.acks += 1
                    since_kill += 1
                    if acked[s] < self.turns:
                        ready.append((s, acked[s], None))
                    if since_kill >= self.kill_every and remaining:
                        busy = [v for v in self._workers if v.tasks and not v.killed]
                        if busy:
                            since_kill = 0
                            victim = self.rng.choice(busy)
                            victim.killed = True
                            try:
                                os.kill(victim.process.pid, signal.SIGKILL)
                                self.figures.kills += 1
                            except ProcessLookupError:  # it had just killed itself
                                pass
        finally:
            self._stop_all()
            self.figures.seconds = time.monotonic() - started
            self.figures.supervisor_cpu = time.process_time() - cpu
        return self.figures

    def _stop_all(self) -> None:
        for w in self._workers:
            with contextlib.suppress(OSError, ValueError):
                w.process.kill()
        for w in self._workers:
            w.process.join(timeout=10)
            w.conn.close()
        self._workers.clear()


def distinct(bodies: Iterable[bytes]) -> list[bytes]:
    """``bodies`` without repeats, in the order each first appeared."""
    seen: set[bytes] = set()
    out = []
    for b in bodies:
        if b not in seen:
            seen.add(b)
            out.append(b)
    return out
