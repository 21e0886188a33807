"""What a long session costs: state in memory, snapshot size and time, own work per request, by length.

For each vendor (Anthropic, OpenAI Responses, DeepSeek chat, Gemini; each emulator in its own process, so
nothing of it is counted here) one session is grown for real, one ``Session.send`` a turn with short turns,
and at each size it prints:

* content: what the conversation moved, as the issue defines it: the response bytes received (each HTTP
  response body of the growing session, read on the wire by an ``httpx`` response hook), plus the user
  texts and the tool results sent;
* state: the bytes of the session's own objects (its four layers and its memos, every object reachable from
  them counted once, ``sys.getsizeof``) over the content bytes. This counts exactly what the session holds,
  where ``tracemalloc`` would also count the SDK client's caches and the garbage not yet collected;
* snapshot: the snapshot JSON's bytes over the content bytes, and the time to take it and to restore it
  (the median of three, each after a full collection);
* own CPU per request: this process's CPU time for ``session.send(q)`` minus that of the raw SDK call on the
  same kwargs (median of the per-repeat differences, alternating), in ms.

``--layers`` also prints, per size, the bytes per turn of each part of the state (history, trace, records,
the encoding memo, ...) and of each part of the snapshot, the figures to read when a ratio misses.

Targets (issue: cost at both ends): state <= 3x and snapshot <= 2x the content at every size; own CPU at
most 1 us per turn of history above its 10-turn figure; snapshot and restore <= 0.5 s each at 2,000 turns.
Exit 1 when one is missed.

    .venv/bin/python benchmarks/long_session.py                      # 10, 200, 1,000, 2,000 turns
    .venv/bin/python benchmarks/long_session.py --sizes 10,200 --vendors anthropic --layers
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import sys
import time
import types
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs
from _overhead import Case, _client, _emulators, _new_session
from overhead import ANTHROPIC
from overhead_gemini import GEMINI
from overhead_openai import DEEPSEEK, RESPONSES

import reasonstate as rs

CASES = {"anthropic": ANTHROPIC, "responses": RESPONSES, "deepseek": DEEPSEEK, "gemini": GEMINI}
SIZES = (10, 200, 1000, 2000)
REPEATS = 11
STATE_TARGET = 3.0
SNAPSHOT_TARGET = 2.0
PER_TURN_US = 1.0
SNAPSHOT_SECONDS = 0.5
_T = TypeVar("_T")
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def deep_size(roots: Iterable[Any]) -> int:
    """Bytes of every object reachable from ``roots``, each counted once (classes, modules and functions
    are shared code, not state: not counted)."""
    seen: set[int] = set()
    stack = list(roots)
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


class Received:
    """An ``httpx`` response hook that adds up the response body bytes while ``counting`` is on."""

    def __init__(self) -> None:
        self.bytes = 0
        self.counting = False

    def __call__(self, response: Any) -> None:
        if self.counting:
            response.read()
            self.bytes += len(response.content)


def sent_bytes(session: rs.Session) -> int:
    """The user texts and tool results the session sent (the rest of the content is what it received)."""
    total = 0
    for turn in session.history.turns:
        total += len(turn.user.encode())
        for step in turn.steps:
            total += sum(len(r.content.encode()) for r in step.tool_results)
    return total


def state_parts(session: rs.Session) -> dict[str, int]:
    """Bytes of each part of the session's state, each counted on its own (objects two parts share are
    counted in both: the parts can add up to more than the whole)."""
    layers = session._layers
    parts = {
        name: deep_size([getattr(layers, name)])
        for name in attrs.fields_dict(type(layers))
        if getattr(layers, name) is not None
    }
    for name in ("_encodings",):
        memo = getattr(session, name, None)
        if memo is not None:
            parts[name.lstrip("_")] = deep_size([memo])
    return parts


def state_bytes(session: rs.Session) -> int:
    roots = [session._layers]
    for name in ("_encodings",):
        memo = getattr(session, name, None)
        if memo is not None:
            roots.append(memo)
    return deep_size(roots)


def snapshot_parts(text: str) -> dict[str, int]:
    """Bytes of each top-level field of the snapshot JSON (compact)."""
    data = json.loads(text)
    return {k: len(json.dumps(v, separators=(",", ":"))) for k, v in data.items()}


def own_cpu_ms(case: Case, session: rs.Session, client: Any, turn: int, received: Received) -> float:
    """Median of (CPU of ``session.send``) - (CPU of the raw SDK call on the same kwargs): both warmed by
    one untimed raw call, taken in alternating order, no collection inside a timed call. The session's answers
    count as content received (they are turns of its history from then on); the raw calls' do not."""
    case.raw_call(client, dict(session.next_request(f"Warm-up {turn}?").kwargs))
    diffs = []
    for i in range(REPEATS):
        question = f"Timed question {turn}.{i}?"
        kwargs = dict(session.next_request(question).kwargs)
        gc.collect()
        timings = {}
        for side in ("raw", "ours") if i % 2 else ("ours", "raw"):
            received.counting = side == "ours"
            start = time.process_time()
            if side == "raw":
                case.raw_call(client, kwargs)
            else:
                session.send(question)
            timings[side] = time.process_time() - start
        received.counting = False
        diffs.append(timings["ours"] - timings["raw"])
    return statistics.median(diffs) * 1e3


#: how many times a snapshot is taken and restored per size (the median is reported)
TIMINGS = 3


def _timed(fn: Callable[[], _T]) -> tuple[float, _T]:
    """The median wall time of :data:`TIMINGS` calls of ``fn`` (one full collection before each, so none
    falls due inside one: a single call's time swung between 0.35 and 0.60 s at 2,000 Responses turns,
    by whether the collector traversed the benchmark's heap during it), and the last call's result."""
    times = []
    for _ in range(TIMINGS):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def measure(name: str, case: Case, root: str, sizes: tuple[int, ...], layers: bool) -> list[dict[str, Any]]:
    if case.growth_setup is not None:
        case.growth_setup()
    received = Received()
    client = _client(case, root, event_hooks={"response": [received]})
    session = _new_session(case, client)
    rows = []
    for size in sizes:
        received.counting = True
        while len(session.history.turns) < size:
            session.send(f"History question {len(session.history.turns) + 1}?")
        received.counting = False
        gc.collect()
        content = received.bytes + sent_bytes(session)
        state = state_bytes(session)
        taken, text = _timed(lambda: session.snapshot().model_dump_json())
        restored, _ = _timed(functools.partial(rs.Session.restore, text, client))
        turns = len(session.history.turns)
        parts = state_parts(session) if layers else {}
        own = own_cpu_ms(case, session, client, size, received)
        rows.append(
            {
                "vendor": name,
                "turns": size,
                "content": content,
                "state": state,
                "snapshot": len(text),
                "taken": taken,
                "restored": restored,
                "own": own,
            }
        )
        print(
            f"{name:<10} {size:>6} {content / 1e3:>10.1f} {state / content:>8.1f}x "
            f"{len(text) / content:>8.1f}x {taken:>8.3f} {restored:>8.3f} {own:>9.3f}",
            flush=True,
        )
        if layers:
            in_memory = ", ".join(f"{k} {v / turns:.0f}" for k, v in parts.items())
            in_snapshot = ", ".join(f"{k} {v / turns:.0f}" for k, v in snapshot_parts(text).items() if v > 64)
            print(f"{'':<17} content {content / turns:.0f} B/turn; state B/turn: {in_memory}")
            print(f"{'':<17} snapshot B/turn: {in_snapshot}", flush=True)
    return rows


def missed(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    base = {r["vendor"]: r for r in rows if r["turns"] == min(x["turns"] for x in rows)}
    for r in rows:
        where = f"{r['vendor']} at {r['turns']} turns"
        if r["state"] > STATE_TARGET * r["content"]:
            out.append(f"{where}: state {r['state'] / r['content']:.1f}x > {STATE_TARGET}x")
        if r["snapshot"] > SNAPSHOT_TARGET * r["content"]:
            out.append(f"{where}: snapshot {r['snapshot'] / r['content']:.1f}x > {SNAPSHOT_TARGET}x")
        first = base[r["vendor"]]
        extra_turns = r["turns"] - first["turns"]
        if extra_turns and (r["own"] - first["own"]) * 1e3 / extra_turns > PER_TURN_US:
            per_turn = (r["own"] - first["own"]) * 1e3 / extra_turns
            out.append(f"{where}: own CPU grows {per_turn:.2f} us per turn > {PER_TURN_US} us")
        if r["turns"] >= 2000 and max(r["taken"], r["restored"]) > SNAPSHOT_SECONDS:
            out.append(
                f"{where}: snapshot {r['taken']:.2f} s / restore {r['restored']:.2f} s > {SNAPSHOT_SECONDS} s"
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="history sizes, e.g. 10,200")
    parser.add_argument(
        "--vendors", default=",".join(CASES), help="a comma-separated subset of " + ",".join(CASES)
    )
    parser.add_argument("--layers", action="store_true", help="bytes per turn of each part of the state")
    args = parser.parse_args()
    sizes = tuple(sorted(int(s) for s in args.sizes.split(",")))
    names = [n for n in args.vendors.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown vendors {unknown}")
    print(
        f"{'vendor':<10} {'turns':>6} {'content KB':>10} {'state':>9} {'snapshot':>9} "
        f"{'take s':>8} {'restore s':>8} {'own CPU ms':>9}"
    )
    rows: list[dict[str, Any]] = []
    for name in names:
        case = CASES[name]
        with _emulators([case]) as roots:
            rows.extend(measure(name, case, roots[0][0], sizes, args.layers))
    misses = missed(rows)
    print(
        f"targets: state <= {STATE_TARGET}x and snapshot <= {SNAPSHOT_TARGET}x the content; own CPU <= "
        f"{PER_TURN_US} us per turn above the smallest size; snapshot/restore <= {SNAPSHOT_SECONDS} s "
        "at 2,000 turns"
    )
    for miss in misses:
        print("MISSED:", miss)
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
