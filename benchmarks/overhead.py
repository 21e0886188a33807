"""Overhead of ``Session.send`` over the raw ``anthropic`` client and over a bare HTTP round trip.

At 10, 100 and 1,000 turns of history (sessions grown for real: 1,000 ``Session.send`` calls to the
emulator, snapshotted on the way, so the trace and execution layers are those of a real session), each
repeat alternates three calls that put the same body bytes on the wire: ``session.send(q)``,
``client.messages.create(**the same kwargs)`` plus appending the reply (what a raw user does), and a bare
``httpx2`` POST of those bytes. It prints the medians, ours/SDK (target <= 1.05, exit 1 above it) and
reasonstate's own work (ours - SDK) over the bare round trip. The method, and why it is honest, is in
``benchmarks/_overhead.py``. 301 timed repeats at 10 turns (one takes ~30 ms; at 61 the ratio moved by
~0.05 between runs), 61 at 100 turns, 31 at 1,000 (one repeat takes ~0.3 s there).

Run: ``make bench`` (or ``.venv/bin/python benchmarks/overhead.py``; ``--profile`` profiles
``session.send`` at 1,000 turns).
"""

from __future__ import annotations

import sys
from typing import Any

from _overhead import Case, main

from reasonstate.testing import ModelAction


def _emulator(respond: Any) -> Any:
    from reasonstate.testing.anthropic import AnthropicEmulator

    return AnthropicEmulator(respond)


def _raw_call(client: Any, kwargs: dict[str, Any]) -> None:
    response = client.messages.create(**kwargs)
    kwargs["messages"].append({"role": "assistant", "content": [b.to_dict() for b in response.content]})


ANTHROPIC = Case(
    title="Anthropic Messages (extended thinking)",
    sdk="anthropic",
    emulator=_emulator,
    action=ModelAction(reasoning="Short thought. " * 4, text="Short answer."),
    base_path="",
    session_options={
        "model": "claude-sonnet-4-6",
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    },
    raw_call=_raw_call,
    repeats={10: 301, 100: 61, 1000: 31},
)

if __name__ == "__main__":
    sys.exit(main([ANTHROPIC], __doc__ or ""))
