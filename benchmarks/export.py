"""Overhead of OpenTelemetry export on ``Session.send``: the same session with and without ``OTelExporter``.

Two sessions on the Anthropic emulator (its own process, as in ``overhead.py``), advanced in lockstep so that
every repeat compares two requests over the same history length: ``plain`` (no exporter) and ``traced``
(``OTelExporter`` on an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` feeding a span exporter that
drops what it gets, and an SDK ``MeterProvider`` read in memory: the spans and metrics are really built and
queued, only the network is left out). Each repeat sends one question on each session, the order
alternating; reported are the medians of each side, the median of the per-repeat ratio traced/plain (target
<= 1.03, exit 1 above it) with its interquartile range, and the per-repeat differences in wall time and in
this process's CPU time. Two modes: ``background`` (the default: ``send`` enqueues, the exporter's worker
thread builds the spans, mostly while ``send`` waits on the network; the target applies to it) and
``inline`` (``background=False``: the spans are built inside ``send``; its own CPU column is the export's
whole CPU cost per call, which in background mode is spread over the worker thread and not attributable
to one send). Sessions are grown by real ``send`` calls (exporter attached on the traced one) to 10 and
100 turns before the timed repeats.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/export.py``; ``--sizes 10`` for a quick look).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from _overhead import CpuMeter, _client, _emulators, alternate, compared, environment
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from overhead import ANTHROPIC

import reasonstate as rs
from reasonstate.export.otel import OTelExporter

TARGET = 1.03
SIZES = (10, 100)
REPEATS = {10: 101, 100: 61}


class Dropping(SpanExporter):
    """A span exporter that accepts every batch and keeps nothing (the backend is out of the measurement)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _session(client: Any, exporters: list[Any]) -> rs.Session:
    return rs.Session(
        client,
        system="You answer briefly.",
        policy=rs.policies.Keep(),
        exporters=exporters,
        **ANTHROPIC.session_options,
    )


def measure(root: str, size: int, repeats: int, background: bool) -> dict[str, Any]:
    dropping = Dropping()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(dropping))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    exporter = OTelExporter(tracer_provider, meter_provider, background=background)
    clients = [_client(ANTHROPIC, root), _client(ANTHROPIC, root)]
    plain, traced = _session(clients[0], []), _session(clients[1], [exporter])
    for turn in range(size):  # grown for real, in lockstep
        plain.send(f"History question {turn}?")
        traced.send(f"History question {turn}?")
    sessions = {"plain": plain, "traced": traced}

    def run(name: str, k: int) -> None:
        sessions[name].send(f"Benchmark question {size}-{k}?")

    wall, cpu = alternate(repeats, ("plain", "traced"), run)
    traced.close()
    tracer_provider.shutdown()  # flushes: every span really went through the processor
    meter_provider.shutdown()
    for client in clients:
        client.close()
    return {
        "size": size,
        **compared(wall, cpu, "plain", "traced"),
        "spans": dropping.spans,
        "requests": len(traced.execution),
        "failures": exporter.failures,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="history sizes, e.g. 10,100")
    args = parser.parse_args()
    sizes = tuple(int(s) for s in args.sizes.split(","))
    started = time.perf_counter()
    print(environment())
    print(
        "plain: Session.send; traced: the same with OTelExporter (SDK TracerProvider + BatchSpanProcessor,\n"
        "SDK MeterProvider). Medians; traced/plain is the median of per-repeat ratios (IQR beside it);\n"
        "own: median per-repeat difference (wall, and this process's CPU time); other: cores used by\n"
        "other processes meanwhile.\n"
    )
    print(
        f"{'mode':>10} {'turns':>6} {'n':>4} {'plain ms':>9} {'traced ms':>10} {'traced/plain':>12} "
        f"{'IQR':>11} {'own ms':>7} {'own CPU ms':>10} {'spans':>6} {'other':>5}"
    )
    worst = 0.0
    with _emulators([ANTHROPIC]) as servers:
        root, pid = servers[0]
        for size, background in ((size, mode) for size in sizes for mode in (True, False)):
            with CpuMeter([os.getpid(), pid]) as meter:
                row = measure(root, size, REPEATS.get(size, 61), background)
            other = meter.other_cores
            low, high = row["iqr"]
            mode = "background" if background else "inline"
            print(
                f"{mode:>10} {size:>6} {row['n']:>4} {row['plain'] * 1e3:>9.2f} {row['traced'] * 1e3:>10.2f} "
                f"{row['ratio']:>12.3f} {f'{low:.2f}-{high:.2f}':>11} {row['own'] * 1e3:>7.3f} "
                f"{row['own_cpu'] * 1e3:>10.3f} {row['spans']:>6} "
                f"{'?' if other is None else f'{other:.2f}':>5}",
                flush=True,
            )
            if row["failures"]:
                print(f"FAIL: the exporter failed {row['failures']} time(s)", file=sys.stderr)
                return 1
            if background:  # the default; inline is shown for its CPU cost (what the worker does)
                worst = max(worst, row["ratio"])
    print(f"target: traced/plain <= {TARGET:.2f} at every size (default, background mode); worst {worst:.3f}")
    print(f"({time.perf_counter() - started:.0f} s)")
    if worst > TARGET:
        print(f"FAIL: export overhead over target ({worst:.3f} > {TARGET:.2f})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
