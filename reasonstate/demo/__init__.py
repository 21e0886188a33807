"""``reasonstate demo``: what goes wrong without the library, then one scripted agent job under several
between-turn policies, side by side.

1. **Without reasonstate** (:mod:`reasonstate.demo.opening`): plain vendor-SDK loops, written the way agent
   frameworks do it, get the vendor's 400 when they lose continuation state inside a tool chain, and lose
   their cache hits when the system prompt carries the current time; the same job through
   :class:`reasonstate.Session` gets neither. All on the strict emulators, figures as the vendors reported
   them.
2. **With reasonstate** (:mod:`reasonstate.demo.job`): 12 user turns of a travel-desk agent (every third
   turn a tool chain with parallel calls) under ``Keep``, ``Drop`` and ``KeepLast(1)``, per vendor
   (Anthropic Messages, OpenAI Responses stateless and stateful, DeepSeek chat, Gemini generateContent
   and the Gemini Interactions API chained by id); then one conversation that switches vendor between
   turns, the token-level PRR matrix and a token-in/token-out session.
3. **A cache-first coding agent** (:mod:`reasonstate.demo.agent`): 32 user turns of search, read and edit
   tools through ``Session.run`` on the DeepSeek emulator, with a fold and a tool-call storm: the
   cumulative cache-hit ratio against the theoretical maximum, fold events and storm breaks.

``--live`` runs the policy tables against each real API whose key is set (ANTHROPIC_API_KEY,
OPENAI_API_KEY, DEEPSEEK_API_KEY, GEMINI_API_KEY). Output is rich on a terminal and plain text otherwise
(or with ``--plain``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from reasonstate.demo.job import VENDORS, run_job

__all__ = ["VENDORS", "main", "run_job"]


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(
        prog="reasonstate demo",
        description="What goes wrong in multi-turn reasoning agents without reasonstate, then the same job "
        "with it under each between-turn policy, on strict local emulators of the vendor APIs (no API key, "
        "no network).",
    )
    out.add_argument(
        "--live",
        action="store_true",
        help="run the policy tables against each real API whose key is set (ANTHROPIC_API_KEY, "
        "OPENAI_API_KEY, DEEPSEEK_API_KEY, GEMINI_API_KEY); costs money",
    )
    out.add_argument(
        "--plain", action="store_true", help="plain text even on a terminal (the default when piped)"
    )
    out.add_argument(
        "--only",
        choices=("opening", "policies", "agent", "persist"),
        default=None,
        help="run one part on the emulators: 'opening' (without vs with reasonstate), 'policies' (the "
        "policy, switching and token tables) or 'agent' (the cache-first coding agent)",
    )
    return out


def main(argv: Sequence[str] = ()) -> int:
    """``reasonstate demo [--live] [--plain] [--only PART]``; ``--help`` prints the usage and runs nothing.

    Exit status: 0 when it ran, 2 for a usage error (argparse) or ``--live`` with no key set.
    """
    from reasonstate.demo import sections
    from reasonstate.demo.render import make_output

    options = parser()
    args = options.parse_args(list(argv))
    if args.live and args.only:
        options.error("--only picks a part of the emulated demo; --live runs the policy tables only")
    out = make_output(sys.stdout, plain=args.plain)
    started = time.perf_counter()
    if args.live:
        if not any(os.environ.get(v.key_env) for v in VENDORS):
            print(
                "reasonstate demo --live: set at least one of "
                + ", ".join(sorted({v.key_env for v in VENDORS})),
                file=sys.stderr,
            )
            return 2
        sections.policies(out, live=True)
        return 0
    if args.only in (None, "opening"):
        sections.opening(out)
    if args.only in (None, "policies"):
        sections.policies(out, live=False)
        sections.switching(out)
        sections.compaction(out)
        sections.context_editing(out)
        sections.tokens(out)
    if args.only in (None, "agent"):
        sections.agent(out)
    if args.only in (None, "persist"):
        sections.persistence(out)
    out.text("", f"demo ran in {time.perf_counter() - started:.1f} s (wall clock)")
    return 0
