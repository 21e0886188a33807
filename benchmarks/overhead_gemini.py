"""Overhead of ``Session.send`` over the raw ``google-genai`` client: Gemini ``generateContent`` (thinking).

Same method as ``overhead.py`` (described in ``benchmarks/_overhead.py``), against
``reasonstate.testing.gemini.GeminiEmulator``: at 10, 100 and 1,000 turns of history, each repeat alternates
``session.send(q)``, the raw ``client.models.generate_content(**kwargs)`` on the very same kwargs (plus the
bookkeeping a raw user does: append the reply content to ``kwargs["contents"]``; the SDK parses the answer
into its pydantic models, which ``session.send`` asks it not to: reasonstate decodes the exact bytes) and a
bare ``httpx2`` POST of the same body bytes; it prints the medians, ours/SDK (target <= 1.05, exit 1 above
it) and reasonstate's own work over the bare round trip.

google-genai has no ``with_raw_response`` / ``DefaultHttpxClient``: the client is a ``genai.Client`` whose
``HttpOptions.client_args`` carry the body-recording hook (google-genai 3.6.1 uses ``httpx2``), and the bare
side is a plain ``httpx2.Client`` (the harness's ``Case.make_client`` / ``Case.make_bare``).

Repeats: 301 at 10 turns (a repeat takes ~70 ms there; the ratio's run-to-run spread was ~0.02 at 61),
61 at 100 turns, 21 at 1,000 turns. Growing the session for real to 1,000 turns takes
~5 minutes on a 2-core machine (308 s: the SDK's own request and response conversion, ~0.5 ms per turn of
history, paid on every one of the 1,000 growth requests), and one repeat there takes ~1.1 s, so the 1,000-turn
size has fewer repeats (its IQR column is wider; own CPU is the steadier figure). The whole run takes ~8 min.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/overhead_gemini.py``; ``--profile`` profiles
``session.send`` at 1,000 turns). It measures the reasonstate of the checkout it is in, a git worktree
included, whatever checkout the venv installed.
"""

from __future__ import annotations

import sys
from typing import Any

from _overhead import Case, main

from reasonstate.testing import ModelAction


def _emulator(respond: Any) -> Any:
    from reasonstate.testing.gemini import GeminiEmulator

    return GeminiEmulator(respond)


def _make_client(base_url: str, **http_options: Any) -> Any:
    from google import genai
    from google.genai import types

    options = types.HttpOptions(base_url=base_url, client_args={"trust_env": False, **http_options})
    return genai.Client(api_key="test-key", vertexai=False, http_options=options)


def _make_bare() -> Any:
    import httpx2

    return httpx2.Client(trust_env=False)


def _raw_call(client: Any, kwargs: dict[str, Any]) -> None:
    response = client.models.generate_content(**kwargs)
    kwargs["contents"].append(response.candidates[0].content)


GEMINI = Case(
    title="Gemini generateContent (thinking)",
    sdk="google-genai",
    emulator=_emulator,
    action=ModelAction(reasoning="Short thought about the question. " * 3, text="Short answer."),
    base_path="",
    session_options={"model": "gemini-3-flash", "thinking_config": {"include_thoughts": True}},
    raw_call=_raw_call,
    repeats={10: 301, 100: 61, 1000: 21},
    make_client=_make_client,
    make_bare=_make_bare,
)

if __name__ == "__main__":
    sys.exit(main([GEMINI], __doc__ or ""))
