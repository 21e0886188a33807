"""A token session's state by length: execution records and snapshot grow with the tokens, not their square.

One ``TokenAdapter`` session (Qwen3.6 template and tokenizer) is grown against the vLLM emulator, one
``Session.send`` a turn (a short question, a scripted answer with its reasoning, ``Keep``: every prompt is
bridged). At each size it prints the newest prompt's tokens, the bytes of the execution layer (every object
reachable from the records, counted once: ``sys.getsizeof``) and of the snapshot's execution part (the JSON
of its rows), each also per token of the newest prompt, and the median wall time of a ``send`` over the
last turns before the size (the emulator runs in this process: its work is in that figure too).

Linear state: the execution bytes per prompt token stay flat as the session grows (each record's prompt is
a view of one shared buffer, and the snapshot writes what each prompt adds to the previous request), where
one tuple per record (and a full id list per snapshot row) made them grow with the number of turns.
Target: at the largest size, both per-token figures at most 1.5x those at the smallest; exit 1 otherwise.

    .venv/bin/python benchmarks/token_session.py                 # 20, 60, 180 turns
    .venv/bin/python benchmarks/token_session.py --sizes 20,100
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import types
from collections.abc import Iterable
from typing import Any

import openai

import reasonstate as rs
from reasonstate.adapters.tokens import TokenAdapter
from reasonstate.testing.completions import VLLMCompletionsEmulator
from reasonstate.tokens import ChatTemplateRenderer, template_path
from reasonstate.tokens.families import ModelTurn

SIZES = (20, 60, 180)
GROWTH_TARGET = 1.5
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def deep_size(roots: Iterable[Any]) -> int:
    """Bytes of every object reachable from ``roots``, each counted once."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="turn counts, comma-separated")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    renderer = ChatTemplateRenderer.from_files(template_path("qwen3.6"), "qwen3.6")
    im_end = renderer.tokenizer.special_id("<|im_end|>") if renderer.tokenizer else None
    script = [
        renderer.family.write(
            ModelTurn(reasoning=f"Turn {k}: a short answer will do.", content=f"Answer {k}: fine."), "open"
        )
        for k in range(sizes[-1])
    ]
    header = ("turns", "prompt", "execution", "B/token", "snapshot", "B/token")
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, (6, 8, 10, 8, 10, 8), strict=True)) + "  send")
    rows: list[tuple[float, float]] = []
    with VLLMCompletionsEmulator(script, codec=renderer, eos_token_ids=[im_end or 0]) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="local", max_retries=0)
        session = rs.Session(client, model="qwen3.6", adapter=TokenAdapter(renderer), max_tokens=64)
        turns, times = 0, []
        for size in sizes:
            while turns < size:
                start = time.perf_counter()
                session.send(f"Question {turns}: is this still fine?")
                times.append(time.perf_counter() - start)
                turns += 1
            newest = session.execution[-1]
            tokens = len(newest.prompt_ids or ())
            state = deep_size([session.execution])
            snap = json.loads(session.snapshot().model_dump_json())
            rows_bytes = len(json.dumps(snap["execution"], separators=(",", ":")))
            send = statistics.median(times[-10:])
            rows.append((state / tokens, rows_bytes / tokens))
            print(
                f"{size:>6}  {tokens:>8,}  {state:>10,}  {state / tokens:>8.1f}  {rows_bytes:>10,}  "
                f"{rows_bytes / tokens:>8.1f}  {send * 1e3:.2f}ms"
            )
    state_growth = rows[-1][0] / rows[0][0]
    snapshot_growth = rows[-1][1] / rows[0][1]
    ok = state_growth <= GROWTH_TARGET and snapshot_growth <= GROWTH_TARGET
    print(
        f"bytes per prompt token, {sizes[-1]} vs {sizes[0]} turns: execution {state_growth:.2f}x, snapshot "
        f"rows {snapshot_growth:.2f}x (target <= {GROWTH_TARGET}x): {'ok' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
