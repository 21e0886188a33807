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
* own CPU per request, two figures, in ms:

  - ``own CPU`` (the one the target reads): within each timed ``session.send(q)``, this process's CPU time
    for the whole ``send`` minus its CPU time inside the one SDK method ``send`` calls
    (``<resource>.with_raw_response.create`` for anthropic/openai, ``models.generate_content`` for
    google-genai: what ``reasonstate/adapters/transport.py`` calls; the benchmark wraps that method on its
    client, :class:`SdkClock`, and checks it ran exactly once per ``send``), the freeing of the SDK's
    response object counted as the SDK's (it holds the SDK's own copy of the request: see
    :class:`SdkClock`). Both terms come from the same call on the same request, so what is left is exactly
    reasonstate's work for that request (encode, request digest, decode of the response bytes, prediction,
    commit, trace), with no other call's noise in it; the median over the timed sends;
  - ``vs raw`` (the figure before): CPU of ``session.send(q)`` minus CPU of a separate raw SDK call on the
    same kwargs (median of the per-repeat differences, the two taken in alternating order). It also
    counts what the two SDK paths differ in (the raw call parses the answer into the SDK's models, which
    ``send`` skips: the figure can be negative) and the run-to-run noise of two separate SDK calls, which
    at 1,000+ turns (the SDK's request transform walks the whole body) dwarfs reasonstate's share: two
    runs back to back gave Anthropic 1,000 turns 0.02 and 2.25 ms. Printed for comparison only.

  Every timed ``send`` adds a turn, so the row also gives the mean history length of its timed sends
  (``at turns``), and the growth per turn is taken over those lengths, not over the nominal sizes.

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


class SdkClock:
    """This process's CPU time inside the SDK method ``Session.send`` calls, on one client: the method is
    replaced on the client's resource object by a wrapper that times it (``calls`` counts them), the same
    object the transport reads (``reasonstate/adapters/transport.py``: ``<resource>.with_raw_response.create``
    for anthropic/openai, ``client.models.generate_content`` for google-genai). The raw SDK call
    (``client.messages.create`` ...) is another method and is not timed here.

    The wrapper also holds the object the method returned until :meth:`release`, which drops it and adds
    the CPU that takes to ``cpu``: the SDK's raw response keeps the SDK's own transformed copy of the request
    (its request options), a dict per message, freed when the response object dies. With the raw call that
    happens inside the SDK method (its response object dies before it returns); with ``with_raw_response``
    it would happen when the transport lets the object go, inside ``send`` (~1.2 ms at 1,000 Anthropic
    turns): SDK work either way, counted here as the SDK's. Only what the session keeps nothing of is freed
    then (the session does not keep the response object)."""

    def __init__(self, session: rs.Session, client: Any) -> None:
        self.cpu = 0.0
        self.calls = 0
        self._held: Any = None
        endpoint = session._adapter.endpoint
        if endpoint.sdk == "google-genai":
            owner, name = client.models, "generate_content"
        else:
            owner = client
            for part in endpoint.resource:
                owner = getattr(owner, part)
            owner, name = owner.with_raw_response, "create"
        method = getattr(owner, name)

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                self._held = method(*args, **kwargs)
                return self._held
            finally:
                self.cpu += time.process_time() - start
                self.calls += 1

        setattr(owner, name, timed)

    def release(self) -> None:
        """Drop the returned object held since the last call, its CPU added to ``cpu``."""
        start = time.process_time()
        self._held = None
        self.cpu += time.process_time() - start


@attrs.frozen
class OwnCpu:
    """One size's own CPU per request, in ms (see the module docstring): ``in_send`` = the medians of
    (CPU of ``send``) - (CPU inside its SDK call), ``vs_raw`` = of (CPU of ``send``) - (CPU of a separate
    raw SDK call); ``turns``: the mean history length the timed sends were made on."""

    in_send: float
    vs_raw: float
    turns: float


def own_cpu_ms(
    case: Case, session: rs.Session, client: Any, clock: SdkClock, turn: int, received: Received
) -> OwnCpu:
    """Both own-CPU figures over the same :data:`REPEATS` timed sends: each warmed by one untimed raw call,
    the send and the raw call taken in alternating order, no collection inside a timed call. The session's
    answers count as content received (they are turns of its history from then on); the raw calls' do not."""
    case.raw_call(client, dict(session.next_request(f"Warm-up {turn}?").kwargs))
    vs_raw, in_send, turns = [], [], []
    for i in range(REPEATS):
        question = f"Timed question {turn}.{i}?"
        kwargs = dict(session.next_request(question).kwargs)
        turns.append(len(session.history.turns))
        clock.release()
        gc.collect()
        timings = {}
        for side in ("raw", "ours") if i % 2 else ("ours", "raw"):
            received.counting = side == "ours"
            sdk_cpu, sdk_calls = clock.cpu, clock.calls
            start = time.process_time()
            if side == "raw":
                case.raw_call(client, kwargs)
            else:
                session.send(question)
                clock.release()
            timings[side] = time.process_time() - start
            if side == "ours":
                if clock.calls != sdk_calls + 1:
                    raise AssertionError(f"send made {clock.calls - sdk_calls} timed SDK calls, not one")
                in_send.append(timings[side] - (clock.cpu - sdk_cpu))
        received.counting = False
        vs_raw.append(timings["ours"] - timings["raw"])
    return OwnCpu(statistics.median(in_send) * 1e3, statistics.median(vs_raw) * 1e3, statistics.fmean(turns))


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
    clock = SdkClock(session, client)
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
        own = own_cpu_ms(case, session, client, clock, size, received)
        rows.append(
            {
                "vendor": name,
                "turns": size,
                "content": content,
                "state": state,
                "snapshot": len(text),
                "taken": taken,
                "restored": restored,
                "own": own.in_send,
                "own_vs_raw": own.vs_raw,
                "own_turns": own.turns,
            }
        )
        print(
            f"{name:<10} {size:>6} {content / 1e3:>10.1f} {state / content:>8.1f}x "
            f"{len(text) / content:>8.1f}x {taken:>8.3f} {restored:>8.3f} {own.in_send:>9.3f} "
            f"{own.vs_raw:>9.3f} {own.turns:>8.1f}",
            flush=True,
        )
        if layers:
            in_memory = ", ".join(f"{k} {v / turns:.0f}" for k, v in parts.items())
            in_snapshot = ", ".join(f"{k} {v / turns:.0f}" for k, v in snapshot_parts(text).items() if v > 64)
            print(f"{'':<17} content {content / turns:.0f} B/turn; state B/turn: {in_memory}")
            print(f"{'':<17} snapshot B/turn: {in_snapshot}", flush=True)
    return rows


def growth(rows: list[dict[str, Any]]) -> list[str]:
    """Per vendor, the own CPU's growth in us per turn of history above its smallest size, by both
    figures (``in send`` is the one the target reads)."""
    out = []
    for vendor in dict.fromkeys(r["vendor"] for r in rows):
        mine = [r for r in rows if r["vendor"] == vendor]
        first = min(mine, key=lambda r: r["turns"])
        steps = []
        for r in mine:
            if r is not first:
                extra = r["own_turns"] - first["own_turns"]
                in_send = (r["own"] - first["own"]) * 1e3 / extra
                vs_raw = (r["own_vs_raw"] - first["own_vs_raw"]) * 1e3 / extra
                steps.append(f"{r['turns']}: {in_send:.2f} (vs raw {vs_raw:.2f})")
        if steps:
            out.append(
                f"{vendor}: own CPU us/turn above {first['turns']} turns, in send: " + ", ".join(steps)
            )
    return out


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
        extra_turns = r["own_turns"] - first["own_turns"]
        if r is not first and (r["own"] - first["own"]) * 1e3 / extra_turns > PER_TURN_US:
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
        f"{'take s':>8} {'restore s':>8} {'own CPU ms':>9} {'vs raw ms':>9} {'at turns':>8}"
    )
    rows: list[dict[str, Any]] = []
    for name in names:
        case = CASES[name]
        with _emulators([case]) as roots:
            rows.extend(measure(name, case, roots[0][0], sizes, args.layers))
    for line in growth(rows):
        print(line)
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
