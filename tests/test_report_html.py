"""``reasonstate report FILE --html OUT``: one self-contained page of SVG charts, checked as a string and as
headless Chromium renders it (issue 24 item 5: "there is not one picture").

The recording is a real session (the real anthropic SDK against the emulator) whose system prompt changes
before its fourth request: Anthropic's ``system`` is a list of text blocks, so the break's path is
``$.system[0].text`` and its cause ``system_changed`` (docs/protocols.md §4.4: the cached prefix is
tools → system → messages; a changed system block invalidates it and everything after). That is the pain
point of goruck/home-generative-agent release v3.39.2 (a clock line first in the system prompt:
``cache_read: 0`` on every call), which the page makes visible at a glance.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.cli import main
from reasonstate.export.html import PALETTE, BreakRow, ReportPage, RequestRow, TurnRow, bar_chart, render
from reasonstate.export.jsonl import JSONLExporter
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator

ROOT = Path(__file__).resolve().parent.parent
WEATHER = rs.Tool(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
#: a bar segment per token kind reported > 0 (uncached, cache read, cache write), per request
KINDS = ("uncached_input", "cache_read", "cache_write")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, rs.Session]:
    folder = tmp_path_factory.mktemp("report-html")
    snapshot, trace = folder / "session.json", folder / "trace.jsonl"
    actions = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="Check Paris first."),
        ModelAction.answer("Warm.", reasoning="It is warm."),
        *(ModelAction.answer(f"Yes {i}.", reasoning="Sure.") for i in range(3)),
    ]
    with AnthropicEmulator(actions) as emulator:
        session = rs.Session(
            emulator.client(),
            model="claude-sonnet-4-6",
            system="You are the travel desk. " * 200,
            tools=[WEATHER],
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            exporters=[JSONLExporter(trace)],
        )
        reply = session.send("Weather in Paris?")
        session.send_tool_results({c.id: {"temp_c": 24} for c in reply.tool_calls})
        session.send("Sure?")
        session.change_prefix(system="You are the travel desk, terse. " * 200)
        session.send("Really?")
        session.send("Again?")
        session.close()
    snapshot.write_text(session.snapshot().model_dump_json())
    return snapshot, trace, session


def html_of(capsys: pytest.CaptureFixture[str], source: Path | str, out: Path, *argv: str) -> str:
    code = main(["report", str(source), "--html", str(out), *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.startswith(f"wrote {out}")
    return out.read_text(encoding="utf-8")


def charts(page: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page, flags=re.S)


def expected_bars(session: rs.Session) -> int:
    return sum(1 for r in session.execution for kind in KINDS if getattr(r.usage, kind) > 0)


# -- the page as a string ----------------------------------------------------------------------------------


def test_the_page_stacks_a_bar_per_token_kind_and_marks_the_break_with_cause_and_path(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot, _, session = recorded
    page = html_of(capsys, snapshot, tmp_path / "report.html")
    tokens, cost = charts(page)
    assert tokens.count('<rect class="bar"') == expected_bars(session) == 8
    assert tokens.count('<g class="break"') == 1 and cost.count('<g class="break"') == 0
    # the mark sits on request 3 (the fourth group) and names the cause and the path of the system block
    assert '<g class="break" data-index="3"><title>system_changed at $.system[0].text</title>' in tokens
    assert "<td>3</td><td>1</td>" in page  # the table's row: request 3, prefix unit 1
    # one cost bar per user turn (4 turns, each priced above zero at the packaged table)
    assert cost.count('<rect class="bar"') == 4
    assert f"<div>requests<b>{len(session.execution)}</b></div>" in page


def test_a_trace_file_draws_the_same_requests_and_break_as_the_snapshot(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot, trace, _ = recorded
    from_snapshot = html_of(capsys, snapshot, tmp_path / "a.html")
    from_trace = html_of(capsys, trace, tmp_path / "b.html")
    assert charts(from_trace) == charts(from_snapshot)


def test_the_page_needs_no_network_and_holds_no_opaque_payload(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot, _, session = recorded
    page = html_of(capsys, snapshot, tmp_path / "report.html")
    for fetches in ("<script", "src=", "href=", "url(", "@import", "<link"):
        assert fetches not in page
    payloads = [c.payload for t in session.history.turns for s in t.steps for c in s.continuation]
    signatures = [json.loads(p).get("signature") for p in payloads]
    assert sum(1 for s in signatures if s) >= 2  # the thinking blocks of the first two requests at least
    for payload, signature in zip(payloads, signatures, strict=True):
        assert payload.decode() not in page
        assert not signature or signature not in page
    for text in ("It is warm.", "Check Paris first.", "Weather in Paris?"):  # no reasoning, no message
        assert text not in page


def test_model_text_in_a_recording_cannot_inject_markup(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A trace whose model id and break path carry markup (a hostile or broken server's echo) is shown
    as text: no element of it reaches the page."""
    _, trace, _ = recorded
    hostile = tmp_path / "hostile.jsonl"
    lines = []
    for line in trace.read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "response.received":
            event["data"]["response_model"] = "<script>alert(1)</script>"
        if event["kind"] == "cache.break":
            event["data"]["path"] = '$.system[0]["<img src=x onerror=alert(2)>"]'
            event["data"]["cause"] = '"><svg onload=alert(3)>'
        lines.append(json.dumps(event))
    hostile.write_text("\n".join(lines) + "\n")
    page = html_of(capsys, hostile, tmp_path / "report.html")
    for markup in ("<script", "<img", "<svg onload", '"><svg'):
        assert markup not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "&quot;&gt;&lt;svg onload=alert(3)&gt;" in page


def test_a_page_that_cannot_be_written_is_a_clear_error(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot, _, _ = recorded
    out = tmp_path / "no-such-folder" / "report.html"
    code = main(["report", str(snapshot), "--html", str(out)])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert captured.err.startswith(f"reasonstate report: cannot write {out}:")


def test_stacked_bars_are_drawn_to_scale() -> None:
    """100 uncached + 300 cache read: the axis tops at 400 (gridlines every 100) and the plot is
    300 - 34 - 44 = 222 px high, so the segments are 55.5 and 166.5 px tall, the read one on top."""
    svg = bar_chart(["0"], [("uncached", [100.0]), ("read", [300.0])], title="t", unit="tokens")
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]* height="([\d.]+)"', svg)]
    ys = [float(y) for y in re.findall(r'<rect class="bar"[^>]* y="([\d.]+)"', svg)]
    assert heights == [55.5, 166.5]
    assert ys == [256 - 55.5, 256 - 222.0]  # the plot's floor is at 34 + 222 = 256
    assert re.findall(r">\d+<", svg)[:5] == [">0<", ">100<", ">200<", ">300<", ">400<"]


def test_bad_series_are_refused() -> None:
    with pytest.raises(rs.InvalidOption, match="2 values for 1 labels"):
        bar_chart(["0"], [("a", [1.0, 2.0])], title="t", unit="u")
    with pytest.raises(rs.InvalidOption, match="finite and >= 0"):
        bar_chart(["0"], [("a", [-1.0])], title="t", unit="u")
    with pytest.raises(rs.InvalidOption, match="finite and >= 0"):
        bar_chart(["0"], [("a", [float("nan")])], title="t", unit="u")


def test_the_page_is_a_pure_function_of_its_figures() -> None:
    page = ReportPage(
        source="s.json",
        prices="p",
        requests=(RequestRow(0, 0, "m", 10, 0, 5, 1, None), RequestRow(1, 0, "m", 1, 15, 0, 1, None)),
        breaks=(BreakRow(1, 2, "tools_changed", "$.tools[0]", "why", False),),
        turns=(TurnRow(0, 2, None),),
        unpriced=("m",),
    )
    assert render(page) == render(page)
    assert '<span class="undeclared">no</span>' in render(page)
    assert "cost USD<b>unknown</b>" in render(page)


# -- the page and a docs chart in headless Chromium ---------------------------------------------------------

#: counts what Chromium laid out: the bars and break marks of every SVG with a non-empty box
_COUNT = """<script>
window.addEventListener("load", () => {
  const boxes = (sel) => [...document.querySelectorAll(sel)].filter(e => {
    const b = e.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length;
  const loaded = [...document.images].filter(i => i.complete && i.naturalWidth > 0).length;
  document.title = JSON.stringify({svgs: boxes("svg.rs-chart"), bars: boxes("svg rect.bar"),
    breaks: boxes("svg g.break"), imgs: loaded});
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        why = "headless Chromium is not installed (Debian: apt-get install chromium)"
        if os.environ.get("REASONSTATE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{why}, and REASONSTATE_REQUIRE_SERVICES=1 requires it")
        pytest.skip(why)
    return found


def _headless(chromium: str, profile: Path, *argv: str) -> subprocess.Popen[str]:
    """Headless Chromium on its own profile folder (two run at once), without first-run work or network
    services; ``--no-sandbox`` because CI runs as root."""
    flags = (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    )
    return subprocess.Popen(
        [chromium, *flags, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "HOME": os.environ.get("HOME", "/tmp")},
    )


def _pixels(png: Path) -> set[tuple[int, int, int]]:
    """The distinct RGB colours of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, _height, depth, colour, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    previous, seen = bytearray(stride), set()
    for row_start in range(0, len(raw), stride + 1):
        kind, row = raw[row_start], bytearray(raw[row_start + 1 : row_start + 1 + stride])
        for i in range(stride):
            left = row[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + up) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                row[i] = (row[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        seen.update(tuple(row[i : i + 3]) for i in range(0, stride, channels))
        previous = row
    return seen


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _docs_page(name: str, folder: Path) -> Path:
    """A docs page as plain HTML (its Markdown, the site's extensions), its images read from docs/."""
    import markdown

    source = ROOT / "docs" / name
    body = markdown.markdown(source.read_text(encoding="utf-8"), extensions=["tables", "attr_list"])
    out = folder / "docs-page.html"
    out.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><base href="{source.parent.as_uri()}/">'
        "<style>body{font:15px/1.5 system-ui,sans-serif;max-width:820px;margin:24px auto;padding:0 16px}"
        "img{max-width:100%}</style></head>"
        f"<body>{body}</body></html>",
        encoding="utf-8",
    )
    return out


def test_chromium_renders_every_bar_and_break_and_the_docs_charts(
    recorded: tuple[Path, Path, rs.Session],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    chromium: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report and the docs page with the benchmark charts, rendered by headless Chromium: every bar
    and break mark is laid out with a non-empty box, the docs' SVG images load, and the screenshots show
    the chart colours (cache read green, the break's red; rs.Session green, the naive loop grey).
    ``REASONSTATE_SCREENSHOTS=DIR`` (``make screenshots``) keeps the two PNGs in DIR."""
    snapshot, _, session = recorded
    shots = Path(os.environ.get("REASONSTATE_SCREENSHOTS") or tmp_path).resolve()
    monkeypatch.chdir(snapshot.parent)  # the page names its source as given: session.json
    report = tmp_path / "report.html"
    page = html_of(capsys, snapshot.name, report)
    counted = tmp_path / "counted.html"
    counted.write_text(page.replace("</body>", _COUNT + "</body>"), encoding="utf-8")
    docs = _docs_page("concepts/charts.md", tmp_path)
    docs.write_text(docs.read_text().replace("</body>", _COUNT + "</body>"), encoding="utf-8")
    shots.mkdir(parents=True, exist_ok=True)
    report_png, docs_png = shots / "report.png", shots / "docs-chart.png"
    # one browser per page, at once: the DOM after load (the counts in its title) and the screenshot
    runs = [
        _headless(
            chromium,
            tmp_path / "profile-report",
            "--dump-dom",
            "--window-size=880,640",
            f"--screenshot={report_png}",
            counted.as_uri(),
        ),
        _headless(
            chromium,
            tmp_path / "profile-docs",
            "--dump-dom",
            "--window-size=880,900",
            f"--screenshot={docs_png}",
            docs.as_uri(),
        ),
    ]
    outputs = [run.communicate(timeout=60)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    found: list[dict[str, Any]] = [
        json.loads(html.unescape(re.search(r"<title>(\{.*?\})</title>", out).group(1)))  # type: ignore[union-attr]
        for out in outputs
    ]
    cost_bars = len({r.turn for r in session.execution})
    assert found[0] == {"svgs": 2, "bars": expected_bars(session) + cost_bars, "breaks": 1, "imgs": 0}
    assert found[1]["imgs"] == 2  # agent-cache.svg and fresh-session.svg decoded as images
    colours = _pixels(report_png)
    assert {_rgb(PALETTE[1]), _rgb(PALETTE[2]), _rgb("#d1353a")} <= colours
    assert {_rgb(PALETTE[0]), _rgb(PALETTE[1])} <= _pixels(docs_png)
