"""Several worker processes serve the turns of many conversations, each continuing from a shared store.

    python examples/persist_workers.py                      # a SQLite file in a temporary folder
    python examples/persist_workers.py sqlite:///sessions.db --workers 8 --sessions 20 --turns 4
    python examples/persist_workers.py "postgresql://postgres@127.0.0.1:5432/test?schema=demo"
    python examples/persist_workers.py "redis://127.0.0.1:6379/0?prefix=demo:" --no-lease

The parent puts one job per turn on a queue: ``--turns`` jobs for each of ``--sessions`` conversations,
interleaved. Any free worker takes the next job, so consecutive turns of one conversation are served by
different processes: the worker takes the session's lease (``store.lease``), loads the session from the
store (``rs.Session.load``; the first turn creates it), runs one turn with its tool calls, and each commit is
appended to the store before the call returns. With ``--no-lease`` the workers race instead and rely on
compare-and-set alone: a worker whose append lost gets :class:`~reasonstate.errors.SessionConflict` with the
reply it paid for, reloads and asks again (the number of such retries is printed).

At the end the parent reads every conversation back and checks that each has exactly its turns, in order:
no turn lost, none twice, no history forked. The model is reasonstate's local Anthropic emulator, one HTTP
server shared by all the workers (a responder, not a script: any worker may ask anything in any order), so
no API key is needed; swap the ``anthropic.Anthropic(base_url=...)`` client for ``anthropic.Anthropic()`` to
run it against the real API. Needs ``pip install 'reasonstate[anthropic]'`` (plus ``reasonstate[postgres]``
or ``reasonstate[redis]`` for those URLs). ``reasonstate store list URL`` then lists the sessions, and
``reasonstate inspect URL#conv-00`` shows one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic

import reasonstate as rs
from reasonstate.errors import SessionConflict
from reasonstate.store import open_store
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator

MODEL = "claude-sonnet-4-6"
OPTIONS: dict[str, Any] = {
    "system": "You are a terse travel assistant. Check the weather before you answer.",
    "max_tokens": 4096,
    "thinking": {"type": "enabled", "budget_tokens": 2048},
}
CITIES = ("Paris", "Rome", "Oslo", "Lisbon", "Vienna")


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "celsius": 10 + sum(map(ord, city)) % 20}


WEATHER = rs.Tool(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    handler=weather,
)


def question(session_id: str, turn: int) -> str:
    """The user's message of ``turn``: what a conversation's history must hold, in order, at the end."""
    return f"[{session_id} turn {turn}] Is it warm in {CITIES[turn % len(CITIES)]}?"


def respond(request: Any) -> ModelAction:
    """The model, as the emulator plays it: a weather call for a new question, then an answer."""
    last = request["messages"][-1]
    content = last["content"]
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    if any(b.get("type") == "tool_result" for b in blocks):
        return ModelAction.answer("Warm enough for a walk.", reasoning="The tool answered; reply briefly.")
    text = next(b["text"] for b in blocks if b.get("type") == "text")
    city = text.rsplit(" in ", 1)[1].rstrip("?")
    return ModelAction.call(ToolCallSpec("get_weather", {"city": city}), reasoning=f"Look up {city}.")


class Busy(Exception):
    """The session's newest turn is still open: another worker is in the middle of it (``--no-lease``)."""


def serve_turn(store: rs.store.Store, client: Any, session_id: str) -> tuple[int, int]:
    """One turn of ``session_id``: (the turn's index, the session's version after it)."""
    if store.version(session_id) == 0:
        try:
            session = rs.Session(
                client, model=MODEL, tools=[WEATHER], store=store, session_id=session_id, **OPTIONS
            )
        except SessionConflict:  # another worker created it first (--no-lease)
            session = rs.Session.load(store, session_id, client, tools=[WEATHER])
    else:
        session = rs.Session.load(store, session_id, client, tools=[WEATHER])  # handlers are not stored
    if session.state is not rs.TurnState.IDLE:
        raise Busy(session_id)
    turn = len(session.history.turns)
    session.run(question(session_id, turn))
    return turn, session.version


def worker(url: str, lease: bool, model: Any, jobs: Any, results: Any) -> None:
    """Take the model's base URL from ``model``, then session ids from ``jobs`` until ``None``; put
    ``(session_id, turn, version, pid, retries)`` on ``results`` for each turn served."""
    client = anthropic.Anthropic(base_url=model.get(), api_key="test-key", max_retries=0)
    with open_store(url) as store:  # each process opens its own store
        while (session_id := jobs.get()) is not None:
            retries = 0
            while True:
                try:
                    if lease:
                        with store.lease(session_id, ttl=30, wait=30):
                            turn, version = serve_turn(store, client, session_id)
                    else:
                        turn, version = serve_turn(store, client, session_id)
                    break
                except SessionConflict as exc:
                    # another worker committed to this session first: nothing was written, the history did
                    # not fork; exc.reply is the answer paid for. Reload and ask again.
                    retries += 1
                    assert exc.found > exc.expected
                except Busy:
                    time.sleep(0.05)  # without leases, wait for the other worker's turn to close
            results.put((session_id, turn, version, os.getpid(), retries))
    client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "url", nargs="?", default=None, help="a store URL (default: a SQLite file in a temp dir)"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--no-lease", action="store_true", help="no leases: compare-and-set and retries only")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'sessions.db'}"
        return run(url, args.workers, args.sessions, args.turns, lease=not args.no_lease)


def run(url: str, workers: int, sessions: int, turns: int, *, lease: bool) -> int:
    ids = [f"conv-{i:02d}" for i in range(sessions)]
    with open_store(url) as store:  # creates the schema once, before the workers start
        for session_id in ids:
            store.delete(session_id)  # a fresh run on a URL used before
    # fork where the platform has it: the workers start at once, with everything imported; they are
    # started before the emulator's server thread exists, and are sent its address
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    model, jobs, results = context.Queue(), context.Queue(), context.Queue()
    processes = [
        context.Process(target=worker, args=(url, lease, model, jobs, results)) for _ in range(workers)
    ]
    for p in processes:
        p.start()
    started = time.perf_counter()
    with AnthropicEmulator(respond) as emulator:  # one vendor API for every worker
        for _ in range(workers):
            model.put(emulator.base_url)
        for _ in range(turns):
            for session_id in ids:
                jobs.put(session_id)
        for _ in range(workers):
            jobs.put(None)
        served: list[tuple[str, int, int, int, int]] = []
        deadline = time.monotonic() + 600
        while len(served) < sessions * turns and time.monotonic() < deadline:
            try:
                served.append(results.get(timeout=1))
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    print("every worker has stopped", file=sys.stderr)
                    break
        for p in processes:
            p.join(timeout=60)
        requests = len(emulator.requests)
        # every conversation read back from the store: its turns, in order, each once
        failures = 0
        client = anthropic.Anthropic(base_url=emulator.base_url, api_key="test-key")
        with open_store(url, migrate=False) as store:
            for session_id in ids:
                session = rs.Session.load(store, session_id, client, tools=[WEATHER])
                asked = [t.user for t in session.history.turns]
                expected = [question(session_id, t) for t in range(turns)]
                whole = asked == expected and all(t.closed for t in session.history.turns)
                failures += not whole
                if not whole:
                    print(f"  {session_id}: expected {expected}, stored {asked}")
            versions = sorted({s.version for s in store.sessions() if s.session_id in ids})
        client.close()
    elapsed = time.perf_counter() - started

    by_pid: dict[int, int] = {}
    for _, _, _, pid, _ in served:
        by_pid[pid] = by_pid.get(pid, 0) + 1
    retries = sum(r[4] for r in served)
    print(f"{url}: {sessions} sessions x {turns} turns served by {workers} workers in {elapsed:.1f}s")
    print(f"  turns per worker: {sorted(by_pid.values(), reverse=True)}; {requests} model requests")
    print(f"  conflicts retried: {retries} ({'leases' if lease else 'compare-and-set only'})")
    lost = sessions * turns - len(served)
    print(f"  turns lost: {lost}; sessions not whole: {failures}; store versions: {versions}")
    print(f"every session holds its {turns} turns in order" if not (failures or lost) else "FAILED")
    return 1 if failures or lost or any(p.exitcode for p in processes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
