"""Overhead of ``Session.send`` over the raw ``openai`` client: Responses (stateless) and DeepSeek chat.

Same method as ``overhead.py``: the emulator runs in its own process; at 10 and 100 turns of history
the benchmark alternates ``session.send(q)`` with the raw SDK call on the very same kwargs (plus
the bookkeeping a raw user does: append the output), and prints the median times and their ratio
(target <= 1.10) and reasonstate's own work per KB of request.

The history is built by the session itself (real calls), once, growing from one size to the next.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/overhead_openai.py``).
"""

from __future__ import annotations

import copy
import multiprocessing
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import reasonstate as rs
from reasonstate.policies import Keep
from reasonstate.testing import ModelAction

# The openai SDK's own request transform (``_transform_recursive``) costs ~1.4 ms per turn of history on
# this machine, for the raw client and for reasonstate alike: at 1,000 turns one request takes ~1.5 s
# and building that history ~12 minutes. So this benchmark stops at 100 turns (overhead.py covers
# 1,000 turns on Anthropic, whose SDK does not have that cost).
SIZES = (10, 100)
REPEATS = 15
ACTION = ModelAction(reasoning="Short thought about the question. " * 3, text="Short answer.")


def _serve(kind: str, port_queue: Any) -> None:
    """The emulator in its own process, as a vendor would be: no GIL shared with the client."""
    emulator: Any
    if kind == "responses":
        from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

        emulator = OpenAIResponsesEmulator(lambda _request: ACTION)
    else:
        from reasonstate.testing.openai_chat import OpenAIChatEmulator

        emulator = OpenAIChatEmulator(lambda _request: ACTION, dialect="deepseek")
    with emulator:
        port_queue.put(emulator.base_url)
        threading.Event().wait()


def _raw_responses(client: Any, kwargs: dict[str, Any]) -> None:
    response = client.responses.create(**kwargs)
    kwargs["input"].extend(item.model_dump(exclude_none=True) for item in response.output)


def _raw_chat(client: Any, kwargs: dict[str, Any]) -> None:
    response = client.chat.completions.create(**kwargs)
    kwargs["messages"].append(response.choices[0].message.model_dump(exclude_none=True))


CASES: list[tuple[str, str, str, dict[str, Any], Callable[[Any, dict[str, Any]], None]]] = [
    ("OpenAI Responses (store=False)", "responses", "gpt-5.5", {"store": False}, _raw_responses),
    ("DeepSeek chat (thinking)", "deepseek", "deepseek-v4-pro", {"dialect": "deepseek"}, _raw_chat),
]


def run_case(
    kind: str, model: str, options: dict[str, Any], raw_call: Any
) -> list[tuple[int, float, float, int]]:
    import openai

    queue: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(kind, queue), daemon=True)
    server.start()
    try:
        root = queue.get(timeout=30)
        base = root if kind == "deepseek" else root + "/v1"
        client = openai.OpenAI(base_url=base, api_key="bench", max_retries=0)
        session = rs.Session(client, model=model, system="You answer briefly.", policy=Keep(), **options)
        results = []
        built = 0
        for size in SIZES:
            while built < size:
                session.send(f"History question {built}?")
                built += 1
            ours, raw = [], []
            for k in range(REPEATS + 2):
                question = f"Benchmark question {size}-{k}?"
                kwargs = copy.deepcopy(dict(session.next_request(question).kwargs))
                for side in (0, 1) if k % 2 else (1, 0):
                    t0 = time.perf_counter()
                    if side == 0:
                        raw_call(client, kwargs)
                    else:
                        session.send(question)
                    elapsed = time.perf_counter() - t0
                    if k >= 2:
                        (raw if side == 0 else ours).append(elapsed)
                built += 1
            results.append(
                (size, statistics.median(ours), statistics.median(raw), session.execution[-1].request_bytes)
            )
        client.close()
        return results
    finally:
        server.terminate()
        server.join()


def main() -> int:
    worst = 0.0
    for title, kind, model, options, raw_call in CASES:
        print(f"{title}: Session.send vs raw openai client, same request (median of {REPEATS})")
        print(f"{'turns':>6} {'request KB':>11} {'raw ms':>8} {'reasonstate ms':>15} {'ratio':>6}", end="")
        print(f" {'own µs/KB':>10}")
        for size, ours, raw, nbytes in run_case(kind, model, options, raw_call):
            ratio = ours / raw
            worst = max(worst, ratio)
            own = max(0.0, ours - raw)
            print(
                f"{size:>6} {nbytes / 1024:>11.1f} {raw * 1e3:>8.2f} {ours * 1e3:>15.2f} {ratio:>6.2f} "
                f"{own * 1e6 / (nbytes / 1024):>10.1f}"
            )
        print()
    print(f"target: ratio <= 1.10 at every size; worst {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
