"""Overhead of ``Session.send`` over the raw ``openai`` client: Responses (stateless) and DeepSeek chat.

Same method as ``overhead.py`` (described in ``benchmarks/_overhead.py``): at 10, 100 and 1,000 turns of
history, each repeat alternates ``session.send(q)``, the raw SDK call on the very same kwargs (plus the
bookkeeping a raw user does: append the output) and a bare ``httpx2`` POST of the same body bytes; it
prints the medians, ours/SDK (target <= 1.05, exit 1 above it) and reasonstate's own work over the bare
round trip.

1,000 turns. The openai SDK's own request transform (``maybe_transform`` → ``_transform_recursive``),
which the raw client and reasonstate both go through, costs ~1.9 ms per turn of Responses history and
~0.3 ms per turn of chat history on a 2-core machine: one Responses request at 1,000 turns spends ~1.8 s
in it (the SDK ms column minus the bare one), and growing a session to 1,000 turns through it would take
~15 minutes (it was why this benchmark used to stop at 100 turns). So:

* the history is still the real thing: 1,000 ``Session.send`` calls to the emulator, trace and execution
  layers included, not a cheaper stand-in shape;
* but it is grown in a builder process that skips that transform (for these plain-dict requests it only
  drops the ``NOT_GIVEN``/``Omit`` entries; the builder checks its shortcut against the real transform
  on the first 10 calls and every 500th). Growth is never timed; every timed call goes through the real
  SDK, and each repeat checks that the SDK call and ``session.send`` sent the same bytes;
* fewer repeats where a repeat is slow: at 1,000 turns 11 (Responses, ~4 s a repeat) and 31 (DeepSeek,
  ~0.7 s), against 61 (Responses) and 301 (DeepSeek, ~25 ms a repeat) at 10 turns. With the SDK's seconds
  in both the numerator and the denominator the ratio's spread (IQR column) stays small; the own-work
  columns are noisier there, own CPU the least.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/overhead_openai.py``; ``--profile`` profiles
``session.send`` at 1,000 turns).
"""

from __future__ import annotations

import sys
from typing import Any

from _overhead import Case, fast_openai_transform, main

from reasonstate.testing import ModelAction

ACTION = ModelAction(reasoning="Short thought about the question. " * 3, text="Short answer.")


def _responses_emulator(respond: Any) -> Any:
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    return OpenAIResponsesEmulator(respond)


def _deepseek_emulator(respond: Any) -> Any:
    from reasonstate.testing.openai_chat import OpenAIChatEmulator

    return OpenAIChatEmulator(respond, dialect="deepseek")


def _raw_responses(client: Any, kwargs: dict[str, Any]) -> None:
    response = client.responses.create(**kwargs)
    kwargs["input"].extend(item.model_dump(exclude_none=True) for item in response.output)


def _raw_chat(client: Any, kwargs: dict[str, Any]) -> None:
    response = client.chat.completions.create(**kwargs)
    kwargs["messages"].append(response.choices[0].message.model_dump(exclude_none=True))


RESPONSES = Case(
    title="OpenAI Responses (store=False)",
    sdk="openai",
    emulator=_responses_emulator,
    action=ACTION,
    base_path="/v1",
    session_options={"model": "gpt-5.5", "store": False},
    raw_call=_raw_responses,
    repeats={10: 61, 100: 31, 1000: 11},
    growth_setup=fast_openai_transform,
)

DEEPSEEK = Case(
    title="DeepSeek chat (thinking)",
    sdk="openai",
    emulator=_deepseek_emulator,
    action=ACTION,
    base_path="",
    session_options={"model": "deepseek-v4-pro", "dialect": "deepseek"},
    raw_call=_raw_chat,
    repeats={10: 301, 100: 61, 1000: 31},
    growth_setup=fast_openai_transform,
)

if __name__ == "__main__":
    sys.exit(main([RESPONSES, DEEPSEEK], __doc__ or ""))
