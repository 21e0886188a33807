"""The documentation's benchmark charts: SVG files under ``docs/images/``, drawn from the benchmarks' JSON.

``make docs`` runs this before building the site (the SVGs are committed too, so the site has them without
a run). Small runs keep it quick (the two run at once: about 25 s on two busy cores):

* ``docs/images/agent-cache.svg``: cache hits per request, ``rs.Session`` next to the naive loop, from
  ``benchmarks/agent_cache.py --turns 10 --json`` (the server's ``prompt_cache_hit_tokens`` over its
  ``prompt_tokens``, per request; a marker on each declared break, the fold);
* ``docs/images/fresh-session.svg``: a fresh session and its first send next to the raw SDK call and to
  the peers' fresh agents (pydantic-ai, the OpenAI Agents SDK, where installed), per vendor, from
  ``benchmarks/fresh_session.py --repeats 5 --json`` (medians of this process's CPU time, ms).

The figures are read from the JSON the benchmarks write (``--json OUT``), never parsed from their text;
the bars are drawn by :func:`reasonstate.export.html.bar_chart`, the HTML report's own chart. A benchmark
that misses its target still writes its figures (it exits 1): the chart shows them as measured.

Run: ``.venv/bin/python benchmarks/charts.py [--out docs/images]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from reasonstate.export.html import PALETTE, bar_chart

HERE = Path(__file__).resolve().parent
AGENT_TURNS = 10
FRESH_REPEATS = 5


def _run_all(runs: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Each benchmark script with its arguments and ``--json``, all at once; their figures by script."""
    with tempfile.TemporaryDirectory(prefix="rs-charts-") as tmp:
        started = {
            script: (
                Path(tmp) / f"{script}.json",
                subprocess.Popen(
                    [sys.executable, str(HERE / script), *argv, "--json", str(Path(tmp) / f"{script}.json")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
            for script, argv in runs.items()
        }
        figures: dict[str, dict[str, Any]] = {}
        for script, (out, process) in started.items():
            _, err = process.communicate()
            if not out.is_file():
                raise SystemExit(f"{script} wrote no figures (exit {process.returncode}):\n{err[-2000:]}")
            figures[script] = json.loads(out.read_text(encoding="utf-8"))
        return figures


def agent_cache_chart(figures: dict[str, Any]) -> str:
    """Cache hits per request (percent of the prompt), ``rs.Session`` and the naive loop side by side."""
    runs = figures["runs"]
    session, naive = runs["session"]["requests"], runs["naive"]["requests"]
    n = min(len(session), len(naive))

    def share(r: dict[str, Any]) -> float:
        return 100.0 * r["hit"] / r["prompt"] if r["prompt"] else 0.0

    marks = {i: "declared cache break (a fold)" for i in range(n) if session[i]["declared_break"]}
    ours, theirs = (100 * runs[k]["hit_ratio"] for k in ("session", "naive"))
    title = (
        f"cache hits, {figures['turns']}-turn agent on DeepSeek: rs.Session {ours:.1f}%, "
        f"naive loop {theirs:.1f}%"
    )
    return bar_chart(
        [str(i) for i in range(n)],
        [("rs.Session", [share(r) for r in session[:n]]), ("naive loop", [share(r) for r in naive[:n]])],
        title=title,
        unit="% of prompt read from cache",
        stacked=False,
        marks=marks,
        colors=(PALETTE[1], PALETTE[0]),
        height=280,
    )


#: the peers ``fresh_session.py --json`` may report, in the order drawn
PEERS = ("pydantic-ai", "OpenAI Agents SDK")


def fresh_session_chart(figures: dict[str, Any]) -> str:
    """Median CPU ms of the raw SDK call, a fresh ``rs.Session`` + one send, and each installed peer's fresh
    agent + first run, per vendor (CPU time: wall time on a shared machine measures the neighbours too). A
    peer that does not speak a vendor's API has no bar there."""
    vendors = figures["vendors"]
    labels = [str(v["vendor"]).split(" (")[0].replace("generateContent", "").strip() for v in vendors]
    series = [
        ("raw SDK call", [1e3 * v["sdk_cpu"] for v in vendors]),
        ("rs.Session + send", [1e3 * v["ours_cpu"] for v in vendors]),
    ]
    for peer in PEERS:
        if any(peer in v.get("peers", {}) for v in vendors):
            values = [1e3 * v["peers"][peer]["cpu"] if peer in v.get("peers", {}) else 0.0 for v in vendors]
            series.append((f"{peer} agent + run", values))
    return bar_chart(
        labels,
        series,
        title=(
            "fresh session or agent + first request vs raw SDK call, "
            f"CPU ms (medians of {figures['repeats']})"
        ),
        unit="CPU ms",
        stacked=False,
        width=760,
        height=280,
        decimals=1,
        colors=(PALETTE[0], PALETTE[1], PALETTE[3], PALETTE[4]),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", default=str(HERE.parent / "docs" / "images"), help="the SVGs' folder")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures = _run_all(
        {
            "agent_cache.py": ["--turns", str(AGENT_TURNS)],
            "fresh_session.py": ["--repeats", str(FRESH_REPEATS)],
        }
    )
    charts = {
        "agent-cache.svg": agent_cache_chart(figures["agent_cache.py"]),
        "fresh-session.svg": fresh_session_chart(figures["fresh_session.py"]),
    }
    for name, svg in charts.items():
        (out / name).write_text(svg + "\n", encoding="utf-8")
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
