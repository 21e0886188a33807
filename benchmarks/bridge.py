"""Bridge vs full re-render of the next prompt, at 1k, 10k and 100k tokens of history (Qwen3.6).

Full re-render is what an OpenAI-compatible server does per request: apply the chat template to the whole
conversation and tokenize it. The bridge appends the new turn to the previous prompt and completion ids.
Both produce the next prompt's token ids (checked equal before timing); the bridge's work is in proportion
to the new turn (the previous prompt is held as a session holds it, a ``TokenIds`` view, which the bridged
prompt extends in place), so its time stays flat while re-rendering grows.

Target (issue 21): the bridge at least 100x faster than the re-render at 100k tokens of history; the script
prints the ratio there and exits 1 below it.

    .venv/bin/python benchmarks/bridge.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from reasonstate.state.tokenids import TokenIds
from reasonstate.tokens import ChatTemplateRenderer, template_path
from reasonstate.tokens.families import CallSpec, ModelTurn
from reasonstate.tokens.matrix import TOOLS

SIZES = (1_000, 10_000, 100_000)
TARGET = 100.0  # the bridge's speed-up over a full re-render at 100k tokens
FLAGS = {"preserve_thinking": True}


def _median_seconds(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _history(renderer: ChatTemplateRenderer, target_tokens: int) -> tuple[list[dict[str, Any]], list[int]]:
    """A tool loop grown until the rendered prompt holds ``target_tokens`` tokens; returns it and its ids."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Plan my week, checking the weather daily."}
    ]
    day = 0
    step = max(1, target_tokens // 2000)  # grow several turns at a time, then measure
    while True:
        for _ in range(step):
            day += 1
            turn = ModelTurn(
                reasoning=f"Day {day}: I should check the weather before planning the outdoor activities.",
                calls=(CallSpec("get_weather", {"city": "Paris", "days": day % 7 + 1}),),
            )
            # every generation prompt here ends in "<think>\n" (the model continues inside the think block)
            parsed = renderer.parse_response(renderer.family.write(turn, "open"), prompt="<think>\n")
            messages.append(dict(parsed.message))
            messages.append({"role": "tool", "tool_call_id": "call_0", "content": f"Day {day}: sunny, 21°C."})
        ids = renderer.encode(renderer.render_text(messages, list(TOOLS), True, **FLAGS))
        if len(ids) >= target_tokens:
            return messages, ids


def main() -> int:
    renderer = ChatTemplateRenderer.from_files(template_path("qwen3.6"), "qwen3.6")
    completion = renderer.family.write(
        ModelTurn(reasoning="Next day.", calls=(CallSpec("get_weather", {"city": "Rome"}),)), "open"
    )
    completion_ids = renderer.encode(completion)
    result = [{"role": "tool", "tool_call_id": "call_0", "content": "Rome: rainy, 14°C."}]
    print(f"{'history':>10}  {'re-render':>12}  {'bridge':>10}  {'ratio':>8}  {'new tokens':>10}")
    ratio = 0.0
    for size in SIZES:
        messages, ids = _history(renderer, size)
        prompt_ids = TokenIds(ids)  # the previous request's prompt as the session's record holds it
        prompt = renderer.render_text(messages, list(TOOLS), True, **FLAGS)
        assistant = renderer.parse_response(completion, prompt=prompt).message
        following = [*messages, assistant, *result]

        def rerender(following: list[dict[str, Any]] = following) -> list[int]:
            return renderer.encode(renderer.render_text(following, list(TOOLS), True, **FLAGS))

        def bridge(prompt_ids: TokenIds = prompt_ids) -> object:
            return renderer.bridge_to_next_turn(prompt_ids, completion_ids, result, list(TOOLS), **FLAGS)

        bridged = renderer.bridge_to_next_turn(prompt_ids, completion_ids, result, list(TOOLS), **FLAGS)
        assert bridged is not None and bridged.token_ids is not None
        assert bridged.token_ids == tuple(rerender()), "the bridge must equal the full re-render"
        new_tokens = len(bridged.token_ids) - len(prompt_ids) - len(completion_ids)
        runs = 7 if size < 100_000 else 5
        full = _median_seconds(rerender, runs)
        fast = _median_seconds(bridge, runs)
        row = f"{len(prompt_ids):>10,}  {full * 1e3:>10.2f}ms  {fast * 1e3:>8.2f}ms  {full / fast:>7.1f}x"
        print(f"{row}  {new_tokens:>10}")
        ratio = full / fast
    verdict = "ok" if ratio >= TARGET else "MISSED"
    at = f"{len(prompt_ids):,} tokens"
    print(f"bridge vs re-render at {at}: {ratio:.1f}x (target >= {TARGET:.0f}x): {verdict}")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
