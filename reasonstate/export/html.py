"""A session's cost and cache report as one self-contained HTML page, and the SVG bar charts it draws.

``reasonstate report FILE --html OUT`` writes :func:`render` of the :class:`ReportPage` that
:func:`reasonstate.recordings.report_page` reads from a snapshot or a JSONL trace; ``docs/charts.py`` draws
the documentation's benchmark charts with :func:`bar_chart`. Everything here is a pure function from
values to a string: no I/O, no clock, no randomness, so the same data gives the same bytes.

Invariants:
  * the page needs no network: inline CSS, inline SVG drawn here, no script, no external URL
    (``render(p)`` contains no ``src=``, ``href=`` or ``@import``);
  * every string that comes from a session (model ids, causes, JSON paths, sentences, the file's name) is
    escaped with :func:`html.escape` (``quote=True``) before it reaches the page: model text can never
    open a tag or an attribute;
  * a :class:`ReportPage` holds figures, names and the trace's cache-break sentences only, never a
    continuation payload (signatures, encrypted reasoning): the page cannot show what it is not given;
  * one ``<rect class="bar">`` per non-zero bar segment and one ``<g class="break">`` per cache break, so
    a browser's rendering can be counted against the data (tests/test_report_html.py).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import attrs

from reasonstate.errors import InvalidOption

__all__ = ["PALETTE", "BreakRow", "ReportPage", "RequestRow", "TurnRow", "bar_chart", "render"]

#: the series colours, in order (uncached input, cache read, cache write for the report's request chart)
PALETTE = ("#8792a2", "#2f9e60", "#e0a526", "#3b6fd1", "#a34fc2")
_BREAK = "#d1353a"


@attrs.frozen
class RequestRow:
    """One request: its place (``index`` in the session, user ``turn``), the model that answered, the
    tokens the vendor reported by kind, and its USD cost (None when the model has no price)."""

    index: int
    turn: int
    model: str
    uncached: int
    cache_read: int
    cache_write: int
    output: int
    cost: float | None


@attrs.frozen
class BreakRow:
    """One ``cache.break`` event of the trace: the request that broke the cache, the prefix unit where it
    diverged from the previous request, the cause (a word of ``reasonstate.cache.divergence.CAUSES``), the
    JSON path of the first difference, the trace's sentence and whether the change was declared."""

    index: int
    unit: int | None
    cause: str
    path: str
    why: str
    declared: bool


@attrs.frozen
class TurnRow:
    """One user turn: how many requests it took and their USD cost (None when any is unpriced)."""

    turn: int
    requests: int
    cost: float | None


@attrs.frozen
class ReportPage:
    """What the page shows: where the data came from (``source``, ``prices``), the requests in order, the
    cache breaks, the turns and the models without a price."""

    source: str
    prices: str
    requests: tuple[RequestRow, ...]
    breaks: tuple[BreakRow, ...] = ()
    turns: tuple[TurnRow, ...] = ()
    unpriced: tuple[str, ...] = ()


# -- the chart ---------------------------------------------------------------------------------------------

_TOP, _BOTTOM, _LEFT, _RIGHT = 34, 44, 64, 16


def bar_chart(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    unit: str,
    stacked: bool = True,
    marks: Mapping[int, str] | None = None,
    width: int = 760,
    height: int = 300,
    decimals: int = 0,
    colors: Sequence[str] = PALETTE,
) -> str:
    """An SVG bar chart: one bar group per label, ``series`` stacked (``stacked=True``) or side by side;
    ``marks`` puts a red marker over group ``i`` with its text as the tooltip (a cache break); series ``s``
    is drawn in ``colors[s]`` (:data:`PALETTE` by default).

    Invariant: one ``<rect class="bar">`` per value > 0, one ``<g class="break">`` per mark; every text is
    escaped. Every series has one value per label, each finite and >= 0
    (:class:`~reasonstate.errors.InvalidOption` else).
    """
    n = len(labels)
    for name, values in series:
        if len(values) != n:
            raise InvalidOption(f"series {name!r} has {len(values)} values for {n} labels")
        if any(not math.isfinite(v) or v < 0 for v in values):
            raise InvalidOption(f"series {name!r}: values must be finite and >= 0")
    marks = marks or {}
    plot_w, plot_h = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM
    if stacked:
        peak = max((sum(vs[i] for _, vs in series) for i in range(n)), default=0.0)
    else:
        peak = max((v for _, vs in series for v in vs), default=0.0)
    step, top = _scale(peak)
    slot = plot_w / max(n, 1)
    bars_per_slot = 1 if stacked else max(len(series), 1)
    bar_w = max(1.0, min(48.0, slot * 0.72) / bars_per_slot)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="rs-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" '
        'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif">',
        f"<title>{_e(title)}</title>",
        f'<text x="{_LEFT}" y="18" font-size="14" font-weight="600" fill="#222">{_e(title)}</text>',
    ]
    # the y axis: gridlines at round numbers
    ticks = 0
    while ticks * step <= top + step / 2 and ticks <= 10:
        value = ticks * step
        y = _TOP + plot_h - (value / top) * plot_h if top else _TOP + plot_h
        out.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e6ea" />'
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#555">'
            f"{_number(value, decimals)}</text>"
        )
        ticks += 1
    out.append(
        f'<text x="14" y="{_TOP + plot_h / 2:.1f}" font-size="11" fill="#555" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + plot_h / 2:.1f})">{_e(unit)}</text>'
    )
    every = max(1, math.ceil(n / 24))  # at most ~24 x labels
    for i, label in enumerate(labels):
        x0 = _LEFT + i * slot + (slot - bar_w * bars_per_slot) / 2
        base = 0.0
        for s, (name, values) in enumerate(series):
            value = values[i]
            if value <= 0:
                continue
            h = (value / top) * plot_h if top else 0.0
            x = x0 if stacked else x0 + s * bar_w
            y = _TOP + plot_h - (base + value) / top * plot_h if stacked else _TOP + plot_h - h
            out.append(
                f'<rect class="bar" data-series="{s}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" '
                f'height="{max(h, 0.5):.1f}" fill="{colors[s % len(colors)]}">'
                f"<title>{_e(label)}: {_e(name)} {_number(value, decimals)} {_e(unit)}</title></rect>"
            )
            if stacked:
                base += value
        if i % every == 0:
            cx = _LEFT + (i + 0.5) * slot
            out.append(
                f'<text x="{cx:.1f}" y="{_TOP + plot_h + 15}" font-size="11" text-anchor="middle" '
                f'fill="#555">{_e(label)}</text>'
            )
        if i in marks:
            cx = _LEFT + (i + 0.5) * slot
            # the label sits inside the plot beside the line, on one of three rows so neighbours do not
            # overlap, turned to the left of the line in the right half of the chart
            right = cx > _LEFT + plot_w / 2
            ly = _TOP + 12 + 13 * (len([m for m in marks if m < i]) % 3)
            out.append(
                f'<g class="break" data-index="{i}"><title>{_e(marks[i])}</title>'
                f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{_TOP}" y2="{_TOP + plot_h}" stroke="{_BREAK}" '
                f'stroke-dasharray="4 3" />'
                f'<path d="M{cx - 6:.1f} {_TOP - 10} L{cx + 6:.1f} {_TOP - 10} L{cx:.1f} {_TOP} Z" '
                f'fill="{_BREAK}" />'
                f'<text x="{cx + (-4 if right else 4):.1f}" y="{ly}" font-size="10" fill="{_BREAK}" '
                f'text-anchor="{"end" if right else "start"}" stroke="#fff" stroke-width="3" '
                f'paint-order="stroke">{_e(marks[i])}</text></g>'
            )
    out.append(
        f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{_TOP + plot_h}" y2="{_TOP + plot_h}" stroke="#888" />'
    )
    # the legend, under the x labels
    x = float(_LEFT)
    for s, (name, _values) in enumerate(series):
        out.append(
            f'<rect x="{x:.1f}" y="{height - 16}" width="10" height="10" '
            f'fill="{colors[s % len(colors)]}" /><text x="{x + 14:.1f}" y="{height - 7}" font-size="11" '
            f'fill="#333">{_e(name)}</text>'
        )
        x += 24 + 7 * len(name)
    if marks:
        out.append(
            f'<path d="M{x:.1f} {height - 16} L{x + 10:.1f} {height - 16} L{x + 5:.1f} {height - 6} Z" '
            f'fill="{_BREAK}" /><text x="{x + 14:.1f}" y="{height - 7}" font-size="11" fill="#333">'
            "cache break</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _scale(peak: float) -> tuple[float, float]:
    """A round gridline step (1, 2 or 5 x 10^k) for about four lines, and the axis top it gives."""
    if peak <= 0:
        return 1.0, 1.0
    raw = peak / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return step, math.ceil(peak / step) * step


def _number(value: float, decimals: int) -> str:
    return f"{value:,.{decimals}f}"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


# -- the page ----------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;margin:24px auto;
max-width:820px;padding:0 16px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.source{color:#555;margin:0 0 16px;overflow-wrap:anywhere}
.figures{display:flex;gap:12px;flex-wrap:wrap}
.figures div{border:1px solid #e3e6ea;border-radius:6px;padding:8px 12px;min-width:120px}
.figures b{display:block;font-size:18px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e3e6ea;padding:4px 6px;text-align:right}
th:first-child,td:first-child{text-align:left}
td.text,th.text{text-align:left;overflow-wrap:anywhere}td.word{text-align:left;white-space:nowrap}
.undeclared{color:#d1353a;font-weight:600}
.note{color:#555}
""".strip()


def render(page: ReportPage) -> str:
    """The whole HTML page for ``page``: headline figures, tokens per request (uncached input, cache reads,
    cache writes stacked; a marker on each request that broke the cache), the breaks with cause and JSON
    path, and USD per turn. Deterministic: equal pages give equal strings."""
    reqs = page.requests
    prompt = sum(r.uncached + r.cache_read + r.cache_write for r in reqs)
    read = sum(r.cache_read for r in reqs)
    costs = [r.cost for r in reqs]
    total = None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)
    position = {r.index: i for i, r in enumerate(reqs)}
    marks: dict[int, str] = {}
    for b in page.breaks:
        if b.index in position:
            text = f"{b.cause} at {b.path}"
            marks[position[b.index]] = (
                marks[position[b.index]] + "; " + text if position[b.index] in marks else text
            )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>reasonstate report: {_e(page.source)}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Cost and cache per request</h1>",
        f'<p class="source">{_e(page.source)} · USD at {_e(page.prices)}</p>',
        '<div class="figures">',
        f"<div>requests<b>{len(reqs)}</b></div>",
        f"<div>prompt tokens<b>{prompt:,}</b></div>",
        f"<div>read from cache<b>{_share(read, prompt)}</b></div>",
        f"<div>cache breaks<b>{len(page.breaks)}</b></div>",
        f"<div>cost USD<b>{_usd(total)}</b></div>",
        "</div>",
        "<h2>Prompt tokens per request</h2>",
        bar_chart(
            [str(r.index) for r in reqs],
            [
                ("uncached input", [float(r.uncached) for r in reqs]),
                ("cache read", [float(r.cache_read) for r in reqs]),
                ("cache write", [float(r.cache_write) for r in reqs]),
            ],
            title="tokens per request (by request index)",
            unit="tokens",
            marks=marks,
        ),
        "<h2>Cache breaks</h2>",
    ]
    if page.breaks:
        out.append(
            '<table><tr><th>request</th><th>prefix unit</th><th class="text">cause</th>'
            '<th class="text">JSON path</th><th class="text">why</th><th>declared</th></tr>'
        )
        for b in page.breaks:
            declared = "yes" if b.declared else '<span class="undeclared">no</span>'
            out.append(
                f"<tr><td>{b.index}</td><td>{_e('-' if b.unit is None else b.unit)}</td>"
                f'<td class="word">{_e(b.cause)}</td><td class="text"><code>{_e(b.path)}</code></td>'
                f'<td class="text">{_e(b.why)}</td><td>{declared}</td></tr>'
            )
        out.append("</table>")
    else:
        out.append('<p class="note">None: every request extended the previous one.</p>')
    out.append("<h2>Cost per turn</h2>")
    out.append(
        bar_chart(
            [str(t.turn) for t in page.turns],
            [("USD", [t.cost or 0.0 for t in page.turns])],
            title="USD per user turn",
            unit="USD",
            height=240,
            decimals=4,
        )
    )
    out.append("<table><tr><th>turn</th><th>requests</th><th>cost USD</th></tr>")
    out.extend(f"<tr><td>{t.turn}</td><td>{t.requests}</td><td>{_usd(t.cost)}</td></tr>" for t in page.turns)
    out.append("</table>")
    if page.unpriced:
        out.append(
            f'<p class="note">No price for {_e(", ".join(page.unpriced))}: cost unknown (pass --prices FILE, '
            "or --model for a trace).</p>"
        )
    out.append("<h2>Requests</h2>")
    out.append(
        '<table><tr><th>request</th><th>turn</th><th class="text">model</th><th>uncached</th>'
        "<th>cache read</th><th>cache write</th><th>output</th><th>USD</th></tr>"
    )
    out.extend(
        f'<tr><td>{r.index}</td><td>{r.turn}</td><td class="text">{_e(r.model or "-")}</td>'
        f"<td>{r.uncached:,}</td><td>{r.cache_read:,}</td><td>{r.cache_write:,}</td><td>{r.output:,}</td>"
        f"<td>{_usd(r.cost)}</td></tr>"
        for r in reqs
    )
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _usd(cost: float | None) -> str:
    return "unknown" if cost is None else f"{cost:.6f}"
