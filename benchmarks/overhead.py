"""Overhead of ``Session.send`` over the raw ``anthropic`` client, same request, same emulator.

For each history size (10, 100, 1,000 turns) the benchmark alternates two calls that put the same bytes
on the wire: ``session.send(q)`` (encode, digest checks, cache prediction, decode, commit) and
``client.messages.create(**same_kwargs)`` followed by the bookkeeping a raw user does (append the reply).
It prints the median time of each, their ratio (target <= 1.10), and reasonstate's own per-step work next
to the request size (it must grow no faster than the request).

Run: ``make bench`` (or ``.venv/bin/python benchmarks/overhead.py``).
"""

from __future__ import annotations

import copy
import multiprocessing
import statistics
import sys
import threading
import time
from typing import Any

import reasonstate as rs
from reasonstate.policies import Keep
from reasonstate.snapshot import history_to_snapshot
from reasonstate.state import Continuation, History, ReasoningPart, Step, TextPart, Turn, TurnView, Usage
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator

MODEL = "claude-sonnet-4-6"
SIZES = (10, 100, 1000)
REPEATS = 15
THINKING = {"type": "enabled", "budget_tokens": 2048}


def _history(emulator: AnthropicEmulator, turns: int) -> History:
    """``turns`` closed turns with signed thinking blocks, as a real session would hold them."""
    out = []
    for i in range(turns):
        thinking = f"Turn {i}: the user asks a follow-up; answer briefly. " * 4
        blocks = [
            {"type": "thinking", "thinking": thinking, "signature": emulator.sign_thinking(MODEL, thinking)},
            {"type": "text", "text": f"Answer {i}."},
        ]
        conts = tuple(
            Continuation.capture(
                vendor="anthropic",
                api="messages",
                model=MODEL,
                kind=b["type"],
                value=b,
                model_bound=b["type"] == "thinking",
            )
            for b in blocks
        )
        step = Step(
            parts=(ReasoningPart(thinking, continuation=0), TextPart(f"Answer {i}.", continuation=1)),
            continuation=conts,
            stop_reason="end_turn",
            usage=Usage(),
            model=MODEL,
        )
        out.append(Turn(index=i, user=f"Question {i}?", steps=(step,), view=TurnView((True,), "keep")))
    return History(tuple(out))


def _session(emulator: AnthropicEmulator, client: Any, turns: int) -> rs.Session:
    session = rs.Session(
        client, model=MODEL, system="You answer briefly.", policy=Keep(), max_tokens=4096, thinking=THINKING
    )
    snap = session.snapshot().model_copy(update={"history": history_to_snapshot(_history(emulator, turns))})
    return rs.Session.restore(snap, client)


SECRET = b"benchmark-secret"


def _serve(port_queue: Any) -> None:
    """Run the emulator in its own process, as a vendor would be: no GIL shared with the client."""
    action = ModelAction(reasoning="Short thought. " * 4, text="Short answer.")
    with AnthropicEmulator(lambda _request: action, secret=SECRET) as emulator:
        port_queue.put(emulator.base_url)
        threading.Event().wait()


def measure(turns: int) -> tuple[float, float, int]:
    queue: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(queue,), daemon=True)
    server.start()
    try:
        return _measure(turns, queue.get(timeout=30))
    finally:
        server.terminate()
        server.join()


def _measure(turns: int, base_url: str) -> tuple[float, float, int]:
    import anthropic

    signer = AnthropicEmulator(secret=SECRET)  # not started: only signs thinking blocks for the history
    client = anthropic.Anthropic(base_url=base_url, api_key="bench", max_retries=0)
    session = _session(signer, client, turns)
    # the raw user's own state: the same messages, kept as plain dicts
    ours, raw = [], []
    for k in range(REPEATS + 2):
        question = f"Benchmark question {k}?"
        kwargs = copy.deepcopy(dict(session.next_request(question).kwargs))
        messages = kwargs["messages"]
        # alternate who goes first: the second of two identical requests reads more from the
        # emulator's cache, and neither side should get that advantage every time
        for side in (0, 1) if k % 2 else (1, 0):
            t0 = time.perf_counter()
            if side == 0:
                response = client.messages.create(**kwargs)
                messages.append({"role": "assistant", "content": [b.to_dict() for b in response.content]})
            else:
                session.send(question)
            elapsed = time.perf_counter() - t0
            if k >= 2:  # warm-up
                (raw if side == 0 else ours).append(elapsed)
    size = session.execution[-1].request_bytes
    client.close()
    return statistics.median(ours), statistics.median(raw), size


def main() -> int:
    print(f"Session.send vs raw anthropic client, same request to the same emulator (median of {REPEATS})")
    print(
        f"{'turns':>6} {'request KB':>11} {'raw ms':>8} {'reasonstate ms':>15} {'ratio':>6} "
        f"{'own work ms':>12} {'own µs/KB':>10}"
    )
    worst = 0.0
    for turns in SIZES:
        ours, raw, size = measure(turns)
        ratio = ours / raw
        worst = max(worst, ratio)
        own = max(0.0, ours - raw)
        print(
            f"{turns:>6} {size / 1024:>11.1f} {raw * 1e3:>8.2f} {ours * 1e3:>15.2f} {ratio:>6.2f} "
            f"{own * 1e3:>12.2f} {own * 1e6 / (size / 1024):>10.1f}"
        )
    print(f"target: ratio <= 1.10 at every size; worst {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
