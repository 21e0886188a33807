"""The docs' overhead chart draws the peers next to reasonstate (issue 24 item 5: "overhead next to the
peers'"), from the figures ``benchmarks/fresh_session.py --json`` writes. The figures below are written
by hand in that JSON's shape, not produced by the benchmark."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _charts() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import charts

        return charts
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


FIGURES = {
    "benchmark": "fresh_session",
    "repeats": 5,
    "unit": "s",
    "vendors": [
        {
            "vendor": "Anthropic Messages (extended thinking)",
            "sdk_cpu": 0.002,
            "ours_cpu": 0.0025,
            "peers": {"pydantic-ai": {"median": 0.02, "ratio": 6.0, "cpu": 0.012}},
        },
        {
            "vendor": "OpenAI Responses (store=False)",
            "sdk_cpu": 0.002,
            "ours_cpu": 0.0024,
            "peers": {
                "pydantic-ai": {"median": 0.03, "ratio": 6.1, "cpu": 0.0088},
                "OpenAI Agents SDK": {"median": 0.02, "ratio": 3.3, "cpu": 0.0054},
            },
        },
    ],
}


def test_the_overhead_chart_has_a_bar_per_measured_side_and_none_for_a_peer_that_does_not_apply() -> None:
    svg = _charts().fresh_session_chart(FIGURES)
    assert svg.count('class="bar"') == 3 + 4  # the Agents SDK does not speak Anthropic's API: no bar
    legend = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    for name in (
        "raw SDK call",
        "rs.Session + send",
        "pydantic-ai agent + run",
        "OpenAI Agents SDK agent + run",
    ):
        assert name in legend
    assert "CPU ms" in legend


def test_without_peers_installed_the_chart_has_reasonstate_and_the_sdk_only() -> None:
    bare = {**FIGURES, "vendors": [{**v, "peers": {}} for v in FIGURES["vendors"]]}
    svg = _charts().fresh_session_chart(bare)
    assert svg.count('class="bar"') == 2 * 2
    assert "pydantic-ai" not in svg and "Agents SDK" not in svg
