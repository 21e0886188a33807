"""A fresh session and its first ``send`` against the raw SDK call, on an in-process transport.

What is compared, per vendor (Anthropic Messages with extended thinking, OpenAI Responses, DeepSeek chat,
Gemini ``generateContent``; the very cases, session options and raw calls of ``overhead*.py``):

* **SDK**: the raw SDK call on the kwargs the session's first ``send`` puts on the wire (built untimed by a
  twin session's ``next_request``), plus the raw user's bookkeeping (append the reply);
* **reasonstate**: ``rs.Session(client, model=..., system=..., policy=Keep(), **options)`` built *inside*
  the timed region, then its one ``session.send(q)``.

Both go through the same vendor SDK client, whose ``httpx2`` client (the HTTP library these SDKs import;
google-genai picks it from the transport's class) has an ``httpx2.MockTransport``: every request is answered
in this process, without a socket, with the fixed response bytes (and headers) the real emulator of
:mod:`reasonstate.testing` gave to that very request once, at start-up (the only socket traffic, untimed).
The SDK call is then as cheap as it ever gets (~1 ms), so reasonstate's constant costs — building a
session, validating its options, the first encode, digest, prediction, trace and commit — show at full
size: the harshest case for the ratio, the one a web service that builds a session per HTTP request sees.

Method (that of ``benchmarks/_overhead.py``): each repeat runs both sides back to back, the order
alternating (each side first equally often); before a repeat, untimed, ``gc.collect()`` and then the SDK's
two paths on copies of the repeat's kwargs (the raw call, and the raw-response call ``send`` makes), so
neither side pays the SDK's cold start after the collection; while a repeat runs the collector makes no
full (generation 2) collection (young collections run as usual: each side pays for what it allocates).
Then, likewise untimed, the other side once on a question of its own (a fresh session and its first
``send``; for a peer, its fresh agent and first run): the warm-up is the same for both sides. (Until
issue 21's third pass only the SDK's code was warmed: the SDK side ran the very path it had just run,
reasonstate's own code ran after the collection had evicted it from the CPU caches, and about half of
the measured "own" time, ~0.2 ms of Anthropic's 0.32, was that asymmetry, not work; a service that builds
a session per HTTP request runs both codes on every request.) Every repeat asserts that both sides sent
byte-identical bodies. Each repeat uses a new question (no memo keyed by a value outlives a session, but a
real service's questions differ too). Reported: the medians of each side; ``ours/SDK``, the median of the
per-repeat ratios, with their interquartile range; ``own``, the median per-repeat difference, in wall and
in this process's CPU time. Exits 1 when any vendor's ``ours/SDK`` exceeds :data:`TARGET` (issue 21:
"a fresh session + one send <= 1.05 x the raw SDK call on an in-process transport, every vendor").

Peers (``benchmarks/_peers.py``, where installed; ``--no-peers`` leaves them out): a fresh pydantic-ai
agent and a fresh OpenAI Agents SDK agent with their first run, on the same transport and fixed answers,
each timed against the raw SDK call in a run of repeats of its own, after reasonstate's (whose pair is
timed exactly as without peers); reported as medians and as the median per-repeat ratio to the raw SDK
call. They go through the SDK's async client and an event loop, as those libraries
do; their bodies are their own, so they are not compared with ours. The target applies to reasonstate
only.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/fresh_session.py``; ``--repeats N``; ``--profile``
prints cProfile of the session's construction and first send per vendor instead; ``--json OUT`` also
writes the medians per vendor, wall and this process's CPU time, the peers' included, which
``benchmarks/charts.py`` draws).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import functools
import gc
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from _overhead import NO_FULL_COLLECTION, Case, _client, _new_session, environment
from _peers import peers
from overhead import ANTHROPIC
from overhead_gemini import GEMINI
from overhead_openai import DEEPSEEK, RESPONSES

import reasonstate as rs

TARGET = 1.05
REPEATS = 401
CASES = (ANTHROPIC, RESPONSES, DEEPSEEK, GEMINI)
#: the in-process client's host: nothing listens there, every request is answered by the transport
ROOT = "http://in-process.invalid"
#: response headers not replayed (the transport frames the fixed body itself)
_HOP = frozenset({"content-length", "transfer-encoding", "connection", "date", "server", "keep-alive"})


class FixedTransport:
    """An ``httpx2.MockTransport`` handler: records every request body, answers each kind of request (its
    path and query, streamed or not) with one fixed response.

    While ``upstream`` is set, a request of a kind not seen yet is relayed to that real emulator (over a
    socket, untimed) and its answer becomes the fixed one; afterwards nothing leaves the process."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.fixed: dict[tuple[str, bool], tuple[int, list[tuple[str, str]], bytes]] = {}
        self.upstream: str | None = None

    @staticmethod
    def _kind(request: httpx2.Request) -> tuple[str, bool]:
        try:
            streamed = bool(json.loads(request.content or b"{}").get("stream"))
        except (ValueError, AttributeError):
            streamed = False
        return request.url.raw_path.decode(), streamed

    def record(self, upstream: str, request: httpx2.Request) -> None:
        url = upstream + request.url.raw_path.decode()
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        with httpx2.Client(trust_env=False) as plain:
            answer = plain.post(url, content=request.content, headers=headers)
        if answer.status_code != 200:
            raise RuntimeError(f"the emulator answered {answer.status_code}: {answer.text[:300]}")
        kept = [(k, v) for k, v in answer.headers.items() if k.lower() not in _HOP]
        self.fixed[self._kind(request)] = (answer.status_code, kept, answer.content)

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(request.content)
        kind = self._kind(request)
        if kind not in self.fixed:
            assert self.upstream is not None, f"no fixed answer for {kind}: record() first"
            self.record(self.upstream, request)
        status, headers, content = self.fixed[kind]
        return httpx2.Response(status, headers=headers, content=content)


def _session(case: Case, client: Any) -> rs.Session:
    return _new_session(case, client)


def _raw_kwargs(case: Case, client: Any, question: str) -> dict[str, Any]:
    """The kwargs the first ``send(question)`` of a fresh session sends (from an untimed twin)."""
    return copy.deepcopy(dict(_session(case, client).next_request(question).kwargs))


def _warm_sdk(case: Case, client: Any, kwargs: dict[str, Any]) -> None:
    """The SDK's raw call and the raw-response call ``send`` makes, on copies of ``kwargs``: untimed."""
    case.raw_call(client, copy.deepcopy(kwargs))
    endpoint = _session(case, client)._adapter.endpoint
    if endpoint.sdk == "google.genai":
        config = {**kwargs["config"], "should_return_http_response": True}
        client.models.generate_content(**{**copy.deepcopy(kwargs), "config": config})
    else:
        resource = functools.reduce(getattr, endpoint.resource, client)
        resource.with_raw_response.create(**copy.deepcopy(kwargs)).http_response.read()


def _setup(case: Case, *, with_peers: bool) -> tuple[Any, FixedTransport, dict[str, Any]]:
    """The in-process client of ``case`` and its peers, the transport's answers filled from the real
    emulator: the first request of a fresh session, then each peer's (they may stream)."""
    handler = FixedTransport()
    transport = httpx2.MockTransport(handler)
    client = _client(case, ROOT, transport=transport)
    runs = peers(case.title, ROOT + case.base_path, transport) if with_peers else {}
    emulator = case.emulator(lambda _request: case.action)
    with emulator:
        handler.upstream = emulator.base_url
        # one first request as a fresh session makes it, relayed to the emulator: its answer is the fixed one
        _session(case, client).send("Warm-up question?")
        for run in runs.values():
            run("Warm-up question?")  # the peer's kind of request; its imports and cold start, untimed
        handler.upstream = None
    kwargs = _raw_kwargs(case, client, "Warm-up question?")
    _warm_sdk(case, client, kwargs)
    _session(case, client).send("Warm-up question?")
    handler.bodies.clear()
    return client, handler, runs


def measure(case: Case, repeats: int, *, with_peers: bool = True) -> dict[str, Any]:
    """reasonstate against the SDK call, then each peer against the SDK call in its own run of
    ``repeats``: the pair that the target is checked on is timed exactly as without peers."""
    client, handler, runs = _setup(case, with_peers=with_peers)
    sides: dict[str, Callable[[str, dict[str, Any]], None]] = {
        "sdk": lambda _q, kwargs: case.raw_call(client, kwargs),
        "ours": lambda q, _kwargs: _session(case, client).send(q),
    }
    for name, run in runs.items():
        sides[name] = lambda q, _kwargs, run=run: run(q)  # type: ignore[misc]
    wall, cpu = _pairs(case, client, handler, sides, "ours", repeats)
    peer_figures: dict[str, dict[str, float]] = {}
    for name in runs:
        peer_wall, peer_cpu = _pairs(case, client, handler, sides, name, repeats)
        peer_figures[name] = {
            "median": statistics.median(peer_wall[name]),
            "ratio": statistics.median(o / s for o, s in zip(peer_wall[name], peer_wall["sdk"], strict=True)),
            "cpu": statistics.median(peer_cpu[name]),
            "sdk_cpu": statistics.median(peer_cpu["sdk"]),
        }
    client.close()
    ratios = sorted(o / s for o, s in zip(wall["ours"], wall["sdk"], strict=True))
    q = statistics.quantiles(ratios, n=4)
    return {
        "sdk": statistics.median(wall["sdk"]),
        "ours": statistics.median(wall["ours"]),
        "ratio": statistics.median(ratios),
        "iqr": (q[0], q[2]),
        "own": statistics.median(o - s for o, s in zip(wall["ours"], wall["sdk"], strict=True)),
        "own_cpu": statistics.median(o - s for o, s in zip(cpu["ours"], cpu["sdk"], strict=True)),
        "sdk_cpu": statistics.median(cpu["sdk"]),
        "ours_cpu": statistics.median(cpu["ours"]),
        "peers": peer_figures,
    }


def _pairs(
    case: Case,
    client: Any,
    handler: FixedTransport,
    sides: dict[str, Callable[[str, dict[str, Any]], None]],
    other: str,
    repeats: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``repeats`` repeats of the SDK call and ``other`` back to back, each first every other repeat: the
    wall and CPU seconds of each. With ``other == "ours"`` both must send the same bytes."""
    wall: dict[str, list[float]] = {"sdk": [], other: []}
    cpu: dict[str, list[float]] = {"sdk": [], other: []}
    for k in range(repeats):
        question = f"Fresh question {k}?"
        kwargs = _raw_kwargs(case, client, question)
        gc.collect()  # untimed; no full collection inside the repeat
        _warm_sdk(case, client, kwargs)
        sides[other](f"Warm question {k}?", kwargs)  # untimed: the other side's code warm as well
        handler.bodies.clear()
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
        sent: dict[str, list[bytes]] = {}
        try:
            for side in ("sdk", other) if k % 2 else (other, "sdk"):
                start = len(handler.bodies)
                c0, t0 = time.process_time(), time.perf_counter()
                sides[side](question, kwargs)
                wall[side].append(time.perf_counter() - t0)
                cpu[side].append(time.process_time() - c0)
                sent[side] = handler.bodies[start:]
        finally:
            gc.set_threshold(*thresholds)
        if other == "ours" and (len(sent["sdk"]) != 1 or sent["sdk"] != sent["ours"]):
            raise AssertionError(f"{case.title}: the SDK call and session.send sent different bodies")
    return wall, cpu


def profile(case: Case, sends: int = 200, limit: int = 30) -> None:
    """cProfile of ``sends`` fresh sessions, each built and sent once; reasonstate's own functions only."""
    client, _handler, _runs = _setup(case, with_peers=False)
    profiler = cProfile.Profile()
    for k in range(sends):
        question = f"Profiled question {k}?"
        profiler.enable()
        _session(case, client).send(question)
        profiler.disable()
    client.close()
    stats = pstats.Stats(profiler)
    package = rs.__file__.rsplit("/", 1)[0]
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = sorted(
        ((ct, tt, nc, key) for key, (_cc, nc, tt, ct, _c) in raw.items() if key[0].startswith(package)),
        key=lambda r: r[0],
        reverse=True,
    )
    print(f"{case.title}: cProfile of {sends} fresh sessions + one send (µs per session; reasonstate only)")
    print(f"{'cum µs':>8} {'self µs':>8} {'calls':>6}  function")
    for ct, tt, nc, (filename, line, name) in rows[:limit]:
        where = filename.removeprefix(package + "/")
        print(f"{ct / sends * 1e6:>8.1f} {tt / sends * 1e6:>8.1f} {nc / sends:>6.1f}  {where}:{line}({name})")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--profile", action="store_true", help="cProfile construction + first send")
    parser.add_argument("--vendors", default="", help="comma-separated title prefixes, e.g. Anthropic")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the medians per vendor to OUT")
    parser.add_argument("--no-peers", action="store_true", help="leave out pydantic-ai and the Agents SDK")
    args = parser.parse_args()
    wanted = [v for v in args.vendors.split(",") if v]
    cases = [c for c in CASES if not wanted or any(c.title.startswith(v) for v in wanted)]
    print(environment())
    if args.profile:
        for case in cases:
            profile(case)
        return 0
    print(
        "\nA fresh rs.Session + one send vs the raw SDK call on the same kwargs; in-process transport "
        f"(fixed emulator bytes, no socket); {args.repeats} repeats, medians"
    )
    print(
        f"{'vendor':<40} {'SDK ms':>7} {'ours ms':>8} {'ours/SDK':>8} {'IQR':>11} {'own ms':>7} "
        f"{'own CPU':>8}"
    )
    worst: list[tuple[float, str]] = []
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for case in cases:
        r = measure(case, args.repeats, with_peers=not args.no_peers)
        rows.append(
            {"vendor": case.title, **{k: v for k, v in r.items() if k != "iqr"}, "iqr": list(r["iqr"])}
        )
        low, high = r["iqr"]
        print(
            f"{case.title:<40} {r['sdk'] * 1e3:>7.3f} {r['ours'] * 1e3:>8.3f} {r['ratio']:>8.3f} "
            f"{f'{low:.2f}-{high:.2f}':>11} {r['own'] * 1e3:>7.3f} {r['own_cpu'] * 1e3:>8.3f}",
            flush=True,
        )
        for name, peer in r["peers"].items():
            print(
                f"{'  peer: ' + name:<40} {'':>7} {peer['median'] * 1e3:>8.3f} {peer['ratio']:>8.3f}",
                flush=True,
            )
        worst.append((r["ratio"], case.title))
    if args.json:
        doc = {"benchmark": "fresh_session", "repeats": args.repeats, "unit": "s", "vendors": rows}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    ratio, where = max(worst)
    print(f"target: ours/SDK <= {TARGET:.2f} for every vendor; worst {ratio:.3f} ({where})")
    print(f"({time.perf_counter() - started:.0f} s)")
    failed = [w for r, w in worst if r > TARGET]
    if failed:
        print(f"FAIL: over target: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
