"""The harness shared by ``overhead.py`` (Anthropic) and ``overhead_openai.py`` (OpenAI Responses, DeepSeek).

What is compared, per vendor and history size (10, 100 and 1,000 turns), on one emulator process:

* **SDK**: the vendor SDK call on the very kwargs ``session.send(q)`` sends (``next_request(q)`` of a twin
  restored from the session's snapshot: on the session itself it would warm the codec's memos for the
  timed ``send``), plus a raw user's bookkeeping (append the reply to their message list);
* **reasonstate**: ``session.send(q)``;
* **bare**: the same request body bytes (and headers) POSTed with the ``httpx2`` client class the SDK
  uses, response read and ``json.loads``-ed: the floor any client pays for this round trip.

Every repeat asserts that the SDK call and ``session.send`` put byte-identical bodies on the wire (an
``httpx2`` request hook on the shared client records them; the bare POST sends those bytes). Reported:
the median time of each side; ``ours/SDK`` and ``own`` (= ours - SDK, reasonstate's own work) as the
medians of the per-repeat ratio and difference (the sides of one repeat run back to back, so slow drift
in the machine's load cancels); their interquartile range; ``own/bare``, own work over the median bare
round trip; ``own CPU``, the per-repeat difference in this process's CPU time (``time.process_time``),
which other load on the machine (e.g. a test run next to the benchmark) barely moves. A script exits 1
when any ``ours/SDK`` exceeds :data:`TARGET`.

How the sessions are built (the honest part). A session's cost depends on everything it holds, not only its
history: every request is compared with the earlier ones (cache prediction), and the trace and execution
layers grow with each request. A history-only snapshot hides that: on Anthropic at 1,000 turns its
``session.send`` took ~4 ms less (of ~80 ms, as much as the whole 5% budget) than that of a session holding
the trace (~6,000 events) and execution records of the 1,000 requests it made. So each session is **grown
for real**: a builder process sends 1,000 user turns through ``Session.send`` to the same emulator,
snapshotting at ``size - WARM`` turns, and the measurement restores those snapshots (history, trace and
execution records as a real session holds them). The openai SDK's request transform (``maybe_transform``)
costs ~1.9 ms per turn of Responses history (~0.3 ms on chat), identical for the raw client and reasonstate
since both go through it; growing a session to 1,000 turns through it would take ~15 minutes, so the builder
alone (never the measurement) replaces it with what it amounts to for these plain-dict requests (drop the
``NOT_GIVEN``/``Omit`` entries), checked against the real transform on its first 10 calls and every 500th.

Each restored session first sends ``WARM`` untimed requests (all three sides: codec caches, connections
and the emulator's prompt cache are warm), so timed sends start at exactly ``size`` turns. A session
serves at most ``max(1, size // 20)`` timed repeats before a fresh one is restored: every timed request
carries between ``size`` and ``1.05 * size`` turns (at 10 turns, exactly 10). Within a repeat the order of
the three sides rotates over the four orders where the bare POST (which needs the body) is not first, so
the SDK and reasonstate each go first equally often (the second of identical requests finds the
emulator's cache warmer). Repeats are fewer where one SDK call takes seconds (each ``Case.repeats``
in the scripts), since the SDK's share then dwarfs the noise on the ratio.

Before each repeat the benchmark runs ``gc.collect()`` (untimed), and while the repeat's three sides run
the collector makes no *full* (generation 2) collection; the young collections run as usual, so each side
still pays for collecting what it allocates. A full collection traverses the whole heap, and at large sizes
one falls due inside most repeats (at 1,000 Gemini turns the SDK call keeps a few hundred thousand
temporaries alive; a ``gc.callbacks`` count over 21 repeats found 10-11 full collections of ~100 ms on
*each* side): which side it lands on is a coin toss that swung the median of the per-repeat ratios between
1.00 and 1.14 from run to run. The untimed collection before the next repeat makes it instead. Collecting
before each *side* would leave every side cache-cold, which at 10 turns distorts the ratio more than the
collections did; switching the collector off altogether would hide the young collections that reasonstate's
own allocations cause.

Then, still untimed, the SDK's two paths on copies of the repeat's kwargs: the raw call, and the
raw-response call ``session.send`` makes (:meth:`Bench.warm_sdk`). The collection walks the whole heap and
leaves the CPU caches cold, and the SDK's code is large (~20,000 Python calls per Gemini request): without
these calls, whichever side ran first paid ~0.45 ms of the SDK's cold start (Gemini, 10 turns), the
per-repeat differences fell into two clusters (the SDK first: ~0 ms; reasonstate first: ~0.9 ms) and their
median landed anywhere between them, 1.02 to 1.08 from run to run. Then, likewise untimed, one ``send`` of
a twin (the session restored from its snapshot, the one :meth:`Bench.raw_kwargs` builds) on a question of
its own, so reasonstate's code is as warm as the SDK's: until issue 21's third pass only the SDK's was
warmed, and reasonstate's own code ran after the collection had evicted it (in ``fresh_session.py`` about
half of the measured own time was that asymmetry). The session's own memos stay as cold as in use: the
twin has its own.

The emulators (one process per vendor, as a vendor would be: no GIL shared with the client) keep the
last :data:`KEEP_PROMPTS` prompts for their cache accounting and drop their request log after each
request: a grown session's request then costs the emulator what it costs with a real vendor's bounded
cache (for a linear conversation the hit is always against a recent prompt, so every figure is the same),
instead of a scan of 1,000 earlier prompts. That makes all three sides faster by the same amount, which
makes both ratios stricter, not looser.

``--profile`` runs cProfile at the largest size instead: ``session.send`` alternating with the
raw SDK call on the same kwargs; it prints reasonstate's functions by cumulative time (file:line), then every
function's self time in ``session.send`` minus the SDK call's (which also shows SDK code that runs slower
on reasonstate's kwargs). ``--sizes 10,100`` restricts the sizes (for a quick look).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import functools
import gc
import importlib.metadata
import itertools
import json
import multiprocessing
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

# every benchmark measures the checkout it is in (a git worktree too), not whichever one the venv installed
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import reasonstate as rs
from reasonstate.snapshot import SessionSnapshot
from reasonstate.testing import ModelAction

TARGET = 1.05
SIZES = (10, 100, 1000)
#: a generation-2 threshold no repeat reaches: full collections happen untimed, between repeats
NO_FULL_COLLECTION = 1 << 30
WARM = 2
KEEP_PROMPTS = 8
# the bare POST needs the body, so it is never first; the SDK and reasonstate lead equally often
ORDERS = (("sdk", "ours", "bare"), ("ours", "sdk", "bare"), ("sdk", "bare", "ours"), ("ours", "bare", "sdk"))
PROFILE_SENDS = 8
BUSY = 0.2  # cores used by other processes above which a row's wall times are flagged


@attrs.frozen
class Case:
    """One vendor API under test. The callables run in the benchmark process, except ``emulator``
    (called in the emulator process) and ``growth_setup`` (called in the builder process)."""

    title: str
    sdk: str  # "anthropic" or "openai": the client class and its DefaultHttpxClient
    emulator: Callable[[Callable[[Any], ModelAction]], Any]
    action: ModelAction
    base_path: str  # appended to the emulator's root URL for the client's base_url
    session_options: dict[str, Any]
    raw_call: Callable[[Any, dict[str, Any]], None]
    repeats: dict[int, int]
    growth_setup: Callable[[], None] | None = None
    # an SDK other than anthropic/openai: its client from (base_url, **httpx client options), and the
    # bare httpx client of the class it uses
    make_client: Callable[..., Any] | None = None
    make_bare: Callable[[], Any] | None = None


# -- processes: emulator and builder -------------------------------------------------------------------
def _serve(case: Case, port_queue: Any) -> None:
    """The emulator in its own process; each request first trims the emulator's bookkeeping."""
    holder: list[Any] = []

    def respond(_request: Any) -> ModelAction:
        emulator = holder[0]
        emulator.requests.clear()
        for name in ("_prompts", "_history"):  # earlier prompts kept for cache accounting
            for prompts in getattr(emulator, name, {}).values():
                del prompts[:-KEEP_PROMPTS]
        return case.action

    emulator = case.emulator(respond)
    holder.append(emulator)
    with emulator:
        port_queue.put(emulator.base_url)
        threading.Event().wait()


def _client(case: Case, root: str, **http_options: Any) -> Any:
    if case.make_client is not None:
        return case.make_client(root + case.base_path, **http_options)
    sdk = __import__(case.sdk)
    client_class = sdk.Anthropic if case.sdk == "anthropic" else sdk.OpenAI
    base_url = root + case.base_path
    http_client = sdk.DefaultHttpxClient(base_url=base_url, **http_options)
    return client_class(base_url=base_url, api_key="test-key", max_retries=0, http_client=http_client)


def _new_session(case: Case, client: Any) -> rs.Session:
    return rs.Session(client, system="You answer briefly.", policy=rs.policies.Keep(), **case.session_options)


def _grow(case: Case, tag: int, root: str, marks: tuple[int, ...], out: str, done: Any) -> None:
    """Builder process: one session, ``max(marks)`` real turns, a snapshot file at each mark."""
    try:
        if case.growth_setup is not None:
            case.growth_setup()
        client = _client(case, root)
        session = _new_session(case, client)
        paths = {}
        for turn in range(1, max(marks) + 1):
            session.send(f"History question {turn}?")
            if turn in marks:
                path = Path(out) / f"case{tag}-{turn}.json"
                path.write_text(session.snapshot().model_dump_json())
                paths[turn] = str(path)
        done.put(paths)
    except BaseException as exc:
        done.put(exc)
        raise


def fast_openai_transform() -> None:
    """For the builder only: the openai SDK's ``maybe_transform`` for request bodies made of plain dicts
    (the top-level ``NOT_GIVEN``/``Omit`` entries dropped), checked against the real one now and then."""
    from openai._types import NotGiven, Omit
    from openai.resources.chat.completions import completions
    from openai.resources.responses import responses

    for module in (responses, completions):
        real = module.maybe_transform
        calls = itertools.count()

        def fast(data: Any, expected_type: Any, real: Any = real, calls: Any = calls) -> Any:
            if not isinstance(data, dict):
                return real(data, expected_type)
            out = {k: v for k, v in data.items() if not isinstance(v, (NotGiven, Omit))}
            n = next(calls)
            if (n < 10 or n % 500 == 0) and out != real(data, expected_type):
                raise AssertionError("the builder's shortcut differs from the openai SDK's transform")
            return out

        module.maybe_transform = fast


# -- measurement -------------------------------------------------------------------------------------------
class CpuMeter:
    """CPU time used by processes other than ``pids`` over an interval, in cores (Linux ``/proc``; None
    elsewhere): on a quiet machine ~0. Other engineers' test runs show up here."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.start: tuple[float, int, int] | None = None

    @staticmethod
    def _busy() -> int:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait (guest is inside user)

    def _mine(self) -> int:
        total = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total

    def __enter__(self) -> CpuMeter:
        try:
            self.start = (time.perf_counter(), self._busy(), self._mine())
        except (OSError, ValueError, IndexError):
            self.start = None
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = None
        if self.start is not None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                self.end = (time.perf_counter(), self._busy(), self._mine())

    @property
    def other_cores(self) -> float | None:
        if self.start is None or getattr(self, "end", None) is None:
            return None
        (t0, busy0, mine0), (t1, busy1, mine1) = self.start, self.end
        ticks = os.sysconf("SC_CLK_TCK")
        return max(0.0, ((busy1 - busy0) - (mine1 - mine0)) / ticks / (t1 - t0))


@attrs.define
class Row:
    turns: int
    last_turns: int
    request_bytes: int
    sdk: list[float]
    ours: list[float]
    bare: list[float]
    sdk_cpu: list[float] = attrs.field(factory=list)
    ours_cpu: list[float] = attrs.field(factory=list)
    other_cores: float | None = None

    @property
    def ratio(self) -> float:
        """Median of the per-repeat ours/SDK ratios (each repeat runs both back to back)."""
        return statistics.median(o / s for o, s in zip(self.ours, self.sdk, strict=True))

    @property
    def own(self) -> float:
        """Median of the per-repeat differences ours - SDK: reasonstate's own work."""
        return statistics.median(o - s for o, s in zip(self.ours, self.sdk, strict=True))

    @property
    def own_cpu(self) -> float:
        """Median of the per-repeat differences in this process's CPU time: robust to other load."""
        return statistics.median(o - s for o, s in zip(self.ours_cpu, self.sdk_cpu, strict=True))

    def ratio_iqr(self) -> tuple[float, float]:
        ratios = sorted(o / s for o, s in zip(self.ours, self.sdk, strict=True))
        if len(ratios) < 4:
            return ratios[0], ratios[-1]
        q = statistics.quantiles(ratios, n=4)
        return q[0], q[2]


class Bench:
    """One vendor's emulator process, SDK client (with the body-recording hook) and bare client."""

    def __init__(self, case: Case, root: str) -> None:
        self.case = case
        self.captured: list[Any] = []
        self.client = _client(case, root, event_hooks={"request": [self.captured.append], "response": []})
        self.bare = (
            case.make_bare() if case.make_bare is not None else __import__(case.sdk).DefaultHttpxClient()
        )

    def close(self) -> None:
        self.client.close()
        self.bare.close()

    def restore(self, snapshot_text: str) -> rs.Session:
        return rs.Session.restore(SessionSnapshot.model_validate_json(snapshot_text), self.client)

    def raw_kwargs(self, session: rs.Session, question: str) -> dict[str, Any]:
        """The kwargs ``session.send(question)`` will send, for the raw SDK call: a copy built by a twin
        restored from the session's snapshot. ``session.next_request`` on the session itself would encode
        the request ahead of the timed ``send`` and leave its codec memos (the turn that just closed, the
        extended run) warm, so ``send`` would skip work a real one does: ~20% of its own work. (Memos
        keyed by value alone, such as the new question's text unit, are shared with the twin.)"""
        twin = rs.Session.restore(session.snapshot(), self.client)
        return copy.deepcopy(dict(twin.next_request(question).kwargs))

    def warm_sdk(self, session: rs.Session, kwargs: dict[str, Any]) -> None:
        """Both SDK paths of a repeat, untimed, none of reasonstate's code: the raw call, and the raw-response
        call ``session.send`` makes (``with_raw_response.create``; google-genai with its
        ``should_return_http_response`` option), each on a copy of the repeat's kwargs."""
        self.case.raw_call(self.client, copy.deepcopy(kwargs))
        endpoint = session._adapter.endpoint
        if endpoint.sdk == "google.genai":
            config = {**kwargs["config"], "should_return_http_response": True}
            self.client.models.generate_content(**{**copy.deepcopy(kwargs), "config": config})
        else:
            resource = functools.reduce(getattr, endpoint.resource, self.client)
            resource.with_raw_response.create(**copy.deepcopy(kwargs)).http_response.read()

    def triple(
        self,
        session: rs.Session,
        question: str,
        order: tuple[str, ...],
        kwargs: dict[str, Any] | None = None,
    ) -> tuple[dict[str, float], int]:
        """One repeat: the three sides in ``order``; their times and the body size. ``kwargs``: the raw
        call's (:meth:`raw_kwargs`, built here unless given)."""
        if kwargs is None:
            kwargs = self.raw_kwargs(session, question)
        self.captured.clear()
        times: dict[str, float] = {}
        for side in order:
            if side == "bare":
                request = self.captured[0]
                url, body = str(request.url), request.content
                headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
                t0 = time.perf_counter()
                response = self.bare.post(url, content=body, headers=headers)
                json.loads(response.content)
                times[side] = time.perf_counter() - t0
                if response.status_code != 200:
                    raise RuntimeError(f"bare POST answered {response.status_code}: {response.text[:300]}")
            else:
                c0, t0 = time.process_time(), time.perf_counter()
                if side == "sdk":
                    self.case.raw_call(self.client, kwargs)
                else:
                    session.send(question)
                times[side] = time.perf_counter() - t0
                times[side + "_cpu"] = time.process_time() - c0
        sent = [r.content for r in self.captured]
        if len(sent) != 2 or sent[0] != sent[1]:
            raise AssertionError("the SDK call and session.send did not send the same body bytes")
        return times, len(sent[0])

    def measure(self, snapshot_text: str, size: int, repeats: int) -> Row:
        per_session = max(1, size // 20)
        row = Row(size, size, 0, [], [], [])
        session: rs.Session | None = None
        for k in range(repeats):
            if k % per_session == 0:
                session = None
                gc.collect()
                session = self.restore(snapshot_text)
                for w in range(WARM):
                    self.triple(session, f"Warm-up {size}-{k}-{w}?", ORDERS[w % len(ORDERS)])
                turns = len(session.history)
            assert session is not None
            row.last_turns = max(row.last_turns, turns)
            question = f"Benchmark question {size}-{k}?"
            twin = rs.Session.restore(session.snapshot(), self.client)
            kwargs = copy.deepcopy(dict(twin.next_request(question).kwargs))  # as raw_kwargs
            gc.collect()  # untimed; no full collection inside the repeat (module docstring)
            self.warm_sdk(session, kwargs)  # untimed, after the collection (module docstring)
            twin.send(f"Twin's warm-up {size}-{k}?")  # untimed: reasonstate's code warm as the SDK's
            del twin
            thresholds = gc.get_threshold()
            gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
            try:
                times, row.request_bytes = self.triple(session, question, ORDERS[k % 4], kwargs)
            finally:
                gc.set_threshold(*thresholds)
            turns += 1
            for side, seconds in times.items():
                getattr(row, side).append(seconds)
        return row

    def profile(self, snapshot_text: str) -> tuple[pstats.Stats, pstats.Stats]:
        """cProfile of ``session.send`` and of the raw SDK call on the same kwargs, alternating."""
        session = self.restore(snapshot_text)
        for w in range(WARM):
            self.triple(session, f"Warm-up {w}?", ORDERS[w])
        # the default (wall-clock) timer: a CPU-time timer costs more per call and inflated small
        # functions ~3x; waits on the emulator show up as socket recv time instead
        ours, sdk = cProfile.Profile(), cProfile.Profile()
        for k in range(PROFILE_SENDS):
            question = f"Profiled question {k}?"
            kwargs = self.raw_kwargs(session, question)
            for side in ("sdk", "ours") if k % 2 else ("ours", "sdk"):
                gc.collect()
                profiler = ours if side == "ours" else sdk
                profiler.enable()
                if side == "ours":
                    session.send(question)
                else:
                    self.case.raw_call(self.client, kwargs)
                profiler.disable()
        return pstats.Stats(ours), pstats.Stats(sdk)


# -- two ways of making the same call, side by side (export.py, guard.py) -----------------------------------
def alternate(
    repeats: int, names: tuple[str, str], run: Callable[[str, int], None]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``repeats`` repeats of ``run(name, k)`` for both ``names``, the order alternating (the second name
    first on even repeats): each side's wall and CPU seconds, per repeat."""
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    for k in range(repeats):
        for name in names if k % 2 else names[::-1]:
            c0, t0 = time.process_time(), time.perf_counter()
            run(name, k)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return wall, cpu


def compared(
    wall: dict[str, list[float]], cpu: dict[str, list[float]], base: str, other: str
) -> dict[str, Any]:
    """Both sides' medians, the median per-repeat ratio ``other/base`` with its interquartile range, and
    the median per-repeat difference in wall and CPU time (``own``, ``own_cpu``)."""
    ratios = sorted(o / b for o, b in zip(wall[other], wall[base], strict=True))
    q = statistics.quantiles(ratios, n=4)
    return {
        "n": len(ratios),
        base: statistics.median(wall[base]),
        other: statistics.median(wall[other]),
        "ratio": statistics.median(ratios),
        "iqr": (q[0], q[2]),
        "own": statistics.median(o - b for o, b in zip(wall[other], wall[base], strict=True)),
        "own_cpu": statistics.median(o - b for o, b in zip(cpu[other], cpu[base], strict=True)),
    }


# -- output ------------------------------------------------------------------------------------------------
def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def environment() -> str:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    try:
        root = Path(__file__).resolve().parent.parent
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "reasonstate"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        tree = f"{head}{' + uncommitted reasonstate/ changes' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        tree = "?"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"Python {platform.python_version()} ({platform.python_implementation()}) on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} cores ({affinity} usable), load average {load}\n"
        f"reasonstate {_version('reasonstate')} (tree {tree}), anthropic {_version('anthropic')}, "
        f"openai {_version('openai')}, httpx2 {_version('httpx2')}"
    )


LEGEND = """\
SDK: the raw SDK call on the same kwargs + appending the reply; ours: Session.send; bare: the same body
bytes POSTed with httpx2 and json.loads-ed. Times are medians. The three run back to back in each repeat,
so ours/SDK and own (ours - SDK: reasonstate's own work) are medians of the per-repeat ratio and
difference; IQR: interquartile range of the per-repeat ratios; own/bare: own work in bare round trips;
own CPU: the same difference in this process's CPU time (barely moved by other load on the machine);
other: CPU cores used by other processes meanwhile (~0 on a quiet machine; above ~0.2 of 2 cores the
wall-time columns are unreliable); n: timed repeats; turns: history length of the timed requests.
"""

HEADER = (
    f"{'turns':>9} {'req KB':>7} {'n':>3} {'bare ms':>8} {'SDK ms':>9} {'ours ms':>9} "
    f"{'ours/SDK':>8} {'IQR':>11} {'own ms':>7} {'own/bare':>8} {'own CPU ms':>10} {'other':>5}"
)


def format_row(row: Row) -> str:
    turns = f"{row.turns}" if row.last_turns == row.turns else f"{row.turns}-{row.last_turns}"
    low, high = row.ratio_iqr()
    bare = statistics.median(row.bare)
    return (
        f"{turns:>9} {row.request_bytes / 1024:>7.1f} {len(row.ours):>3} {bare * 1e3:>8.2f} "
        f"{statistics.median(row.sdk) * 1e3:>9.2f} {statistics.median(row.ours) * 1e3:>9.2f} "
        f"{row.ratio:>8.3f} {f'{low:.2f}-{high:.2f}':>11} {row.own * 1e3:>7.2f} {row.own / bare:>8.2f} "
        f"{row.own_cpu * 1e3:>10.2f} {'?' if row.other_cores is None else f'{row.other_cores:.2f}':>5}"
    )


def _where(key: tuple[str, int, str], root: str) -> str:
    filename, line, name = key
    site = sorted({p for p in sys.path if p.endswith("site-packages")}, key=len, reverse=True)
    for prefix in (*site, root, sys.prefix, sys.base_prefix):
        if prefix and filename.startswith(prefix):
            filename = filename.removeprefix(prefix).lstrip(os.sep)
            break
    return f"{filename}:{line}({name})"


def print_profile(ours: pstats.Stats, sdk: pstats.Stats, sends: int, limit: int = 25) -> None:
    """reasonstate's functions by cumulative time; then every function's self time, ours minus SDK."""
    package = str(Path(rs.__file__).resolve().parent)
    root = str(Path(package).parent) + os.sep
    ours_stats: dict[Any, Any] = ours.stats  # type: ignore[attr-defined]
    sdk_stats: dict[Any, Any] = sdk.stats  # type: ignore[attr-defined]
    entries = [
        (cumtime, tottime, ncalls, key)
        for key, (_cc, ncalls, tottime, cumtime, _callers) in ours_stats.items()
        if key[0].startswith(package)
    ]
    entries.sort(key=lambda e: e[0], reverse=True)
    total = max((e[0] for e in entries), default=0.0)
    print(f"cProfile of {sends} session.send calls (ms per call; functions in reasonstate/ only):")
    print(f"{'cum ms':>9} {'cum %':>6} {'self ms':>8} {'calls':>7}  function")
    for cumtime, tottime, ncalls, key in entries[:limit]:
        share = cumtime / total * 100 if total else 0.0
        print(
            f"{cumtime / sends * 1e3:>9.2f} {share:>6.1f} {tottime / sends * 1e3:>8.2f} "
            f"{ncalls // sends:>7}  {_where(key, root)}"
        )
    diffs = []
    for key in set(ours_stats) | set(sdk_stats):
        mine = ours_stats.get(key, (0, 0, 0.0, 0.0, {}))
        theirs = sdk_stats.get(key, (0, 0, 0.0, 0.0, {}))
        diffs.append((mine[2] - theirs[2], mine[1] - theirs[1], key))
    diffs.sort(key=lambda d: d[0], reverse=True)
    ours_total = sum(v[2] for v in ours_stats.values())
    sdk_total = sum(v[2] for v in sdk_stats.values())
    print(
        f"\nSelf time, session.send minus the raw SDK call on the same kwargs (ms per call; all modules; "
        f"totals {ours_total / sends * 1e3:.1f} vs {sdk_total / sends * 1e3:.1f}):"
    )
    print(f"{'extra ms':>9} {'extra calls':>11}  function")
    for extra, calls, key in diffs[:limit]:
        print(f"{extra / sends * 1e3:>9.2f} {calls // sends:>11}  {_where(key, root)}")


# -- driver ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _emulators(cases: list[Case]) -> Iterator[list[tuple[str, int]]]:
    servers, roots = [], []
    try:
        for case in cases:
            queue: Any = multiprocessing.Queue()
            server = multiprocessing.Process(target=_serve, args=(case, queue), daemon=True)
            server.start()
            servers.append(server)
            roots.append((queue.get(timeout=60), server.pid))
        yield roots
    finally:
        for server in servers:
            server.terminate()
            server.join()


def _build_all(cases: list[Case], roots: list[str], sizes: tuple[int, ...], out: str) -> list[dict[int, str]]:
    """Grow every case's session at once (one builder process each); snapshot paths by turn count."""
    marks = tuple(sorted({max(1, size - WARM) for size in sizes}))
    builders = []
    for tag, (case, root) in enumerate(zip(cases, roots, strict=True)):
        done: Any = multiprocessing.Queue()
        process = multiprocessing.Process(target=_grow, args=(case, tag, root, marks, out, done), daemon=True)
        process.start()
        builders.append((process, done))
    results = []
    for process, done in builders:
        paths = done.get()
        process.join()
        if isinstance(paths, BaseException):
            raise RuntimeError("a builder process failed") from paths
        results.append(paths)
    return results


def main(cases: list[Case], description: str) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--profile", action="store_true", help="profile session.send at the largest size")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="history sizes, e.g. 10,100")
    args = parser.parse_args()
    sizes = tuple(int(s) for s in args.sizes.split(","))
    started = time.perf_counter()
    print(environment())
    print(LEGEND)
    worst: list[tuple[float, str]] = []
    with tempfile.TemporaryDirectory(prefix="rs-bench-") as out, _emulators(cases) as servers:
        roots = [root for root, _pid in servers]
        t0 = time.perf_counter()
        snapshots = _build_all(cases, roots, sizes, out)
        print(f"(sessions grown for real to {max(sizes) - WARM} turns in {time.perf_counter() - t0:.0f} s)\n")
        for case, (root, pid), paths in zip(cases, servers, snapshots, strict=True):
            bench = Bench(case, root)
            try:
                if args.profile:
                    size = max(sizes)
                    print(f"{case.title}, {size} turns")
                    ours, sdk = bench.profile(Path(paths[max(1, size - WARM)]).read_text())
                    print_profile(ours, sdk, PROFILE_SENDS)
                    print()
                    continue
                print(f"{case.title}: Session.send vs the raw SDK call vs a bare POST (medians)")
                print(HEADER)
                busy = []
                for size in sizes:
                    text = Path(paths[max(1, size - WARM)]).read_text()
                    with CpuMeter([os.getpid(), pid]) as meter:
                        row = bench.measure(text, size, case.repeats.get(size, 11))
                    row.other_cores = meter.other_cores
                    del text
                    print(format_row(row), flush=True)
                    worst.append((row.ratio, f"{case.title} at {size} turns"))
                    if (row.other_cores or 0.0) > BUSY:
                        busy.append(size)
                if busy:
                    print(
                        f"warning: other processes kept the machine busy at {busy} turns: the wall-time "
                        "columns (ratio included) are noisy there; own CPU ms is the steadier figure"
                    )
                print()
            finally:
                bench.close()
    elapsed = time.perf_counter() - started
    if args.profile:
        print(f"({elapsed:.0f} s)")
        return 0
    ratio, where = max(worst)
    failed = [w for r, w in worst if r > TARGET]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"target: ours/SDK <= {TARGET:.2f} at every size; worst {ratio:.3f} ({where})")
    print(f"({elapsed:.0f} s; load average now {load})")
    if failed:
        print(f"FAIL: over target: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0
