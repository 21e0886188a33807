"""The guard's precision and recall on a recorded corpus of cache outcomes with known causes (issue 25,
item 3).

The corpus, ``benchmarks/corpus/cache_breaks.jsonl`` (recorded by ``benchmarks/corpus/record.py``: real SDK
clients on the strict emulators, each request labelled with what the recorder did to it), is replayed byte
for byte through a guard: each case on its own ``httpx2`` client whose transport answers with the recorded
bytes and headers (``Date`` included), instrumented with ``rs.instrument``, each exchange sent under the
conversation key it was recorded with. The guard's answer for a request is its divergence cause, else its
cache-miss finding (``ttl_expired``, ``provider_miss``, ``unexplained_miss``, ``prediction_mismatch``),
else ``none``.

Figures: a *break* is a request labelled anything but ``none``. Precision: of the requests the guard names
a break, the share whose label it names exactly; recall: of the labelled breaks, the share it names
exactly; and the same for a naive detector (a request breaks when its body does not extend the previous
request's on the client, or it reads less cache than the previous one read), which names no cause, so only
whether a break was found is counted for it. Target: precision and recall >= 0.90 (exit 1 below): the
corpus holds one case the wire cannot decide (``rollouts_unkeyed``: two rollouts of one prompt sent without
the conversation key look, request for request, like one conversation rewriting its history), which the
guard gets wrong by design; everything else it must name exactly.

What the figures are not: the corpus is recorded from the emulators, whose caches follow the vendors'
documented rules exactly, so a real vendor's noise (a miss inside the documented lifetime that the vendor
would call load balancing) is in it only as ``provider_miss``, and the labels are the recorder's actions.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/cache_causes.py``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2

import reasonstate as rs

CORPUS = Path(__file__).parent / "corpus" / "cache_breaks.jsonl"
TARGET = 0.90
MISSES = ("ttl_expired", "provider_miss", "unexplained_miss", "prediction_mismatch")


def named(record: rs.GuardRecord) -> str:
    """What the guard says about one request: a cause, a miss kind, or ``none``."""
    if record.divergence is not None:
        return record.divergence.cause
    kinds = [w.kind for w in record.warnings if w.kind in MISSES]
    return kinds[0] if kinds else "none"


def replayed(case: dict[str, Any]) -> list[str]:
    """The guard's answer for each request of ``case``, its exchanges replayed in order."""
    exchanges = case["exchanges"]
    answers = iter(exchanges)

    def answer(request: httpx2.Request) -> httpx2.Response:
        e = next(answers)
        return httpx2.Response(e["status"], headers=e["headers"], content=e["response"].encode())

    with httpx2.Client(transport=httpx2.MockTransport(answer), base_url="https://recorded.invalid") as http:
        guard = rs.instrument(http)
        for e in exchanges:
            headers = {"content-type": "application/json"}
            if e["conversation"] is None:
                http.post(e["path"], content=e["request"].encode(), headers=headers).read()
            else:
                with guard.conversation(e["conversation"]):
                    http.post(e["path"], content=e["request"].encode(), headers=headers).read()
        return [named(r) for r in guard.records]


def naive(case: dict[str, Any]) -> list[bool]:
    """Whether a naive detector flags each request: its body does not extend the previous request's
    (compared as JSON values, list by list), or it read less cache than the previous one."""
    flags: list[bool] = []
    previous: tuple[Any, int] | None = None
    for e in case["exchanges"]:
        body = json.loads(e["request"])
        read = _cache_read(json.loads(e["response"]))
        if previous is None:
            flags.append(False)
        else:
            flags.append(not _extends(body, previous[0]) or read < previous[1])
        previous = (body, read)
    return flags


def _cache_read(response: dict[str, Any]) -> int:
    usage = response.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    return int(usage.get("cache_read_input_tokens") or details.get("cached_tokens") or 0)


def _extends(body: Any, earlier: Any) -> bool:
    if isinstance(body, dict) and isinstance(earlier, dict):
        keys = set(body) | set(earlier)
        return all(_extends(body.get(k), earlier.get(k)) for k in keys if k not in ("max_tokens", "stream"))
    if isinstance(body, list) and isinstance(earlier, list):
        return len(body) >= len(earlier) and body[: len(earlier)] == earlier
    return bool(body == earlier)


def main() -> int:
    cases = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    rows: list[tuple[str, str, str, bool]] = []  # case, expected, named, naive flag
    for case in cases:
        got = replayed(case)
        flags = naive(case)
        expected = [e["expected"] for e in case["exchanges"]]
        if len(got) != len(expected):
            print(f"{case['case']}: {len(got)} records for {len(expected)} requests", file=sys.stderr)
            return 1
        rows.extend((case["case"], x, g, f) for x, g, f in zip(expected, got, flags, strict=True))

    breaks = [r for r in rows if r[1] != "none"]
    flagged = [r for r in rows if r[2] != "none"]
    exact = [r for r in breaks if r[2] == r[1]]
    precision = len(exact) / len(flagged) if flagged else 1.0
    recall = len(exact) / len(breaks) if breaks else 1.0
    naive_flagged = [r for r in rows if r[3]]
    naive_right = [r for r in naive_flagged if r[1] != "none"]
    naive_precision = len(naive_right) / len(naive_flagged) if naive_flagged else 1.0
    naive_recall = len(naive_right) / len(breaks) if breaks else 1.0

    print(f"corpus: {CORPUS.name}, {len(cases)} cases, {len(rows)} requests, {len(breaks)} labelled breaks")
    by_label = Counter(r[1] for r in rows)
    print(f"{'label':26} {'requests':>8} {'named exactly':>14}")
    for label, n in sorted(by_label.items()):
        print(f"{label:26} {n:8d} {sum(1 for r in rows if r[1] == label and r[2] == label):14d}")
    wrong = [r for r in rows if r[1] != r[2]]
    for case_name, expected, got, _ in wrong:
        print(f"  wrong: {case_name}: labelled {expected}, guard named {got}")
    print(f"guard: {len(flagged)} breaks named, {len(exact)} exactly right")
    print(f"guard: precision {precision:.3f}, recall {recall:.3f} (cause named exactly; target >= {TARGET})")
    print(
        f"naive: {len(naive_flagged)} breaks flagged, {len(naive_right)} real: precision "
        f"{naive_precision:.3f}, recall {naive_recall:.3f} (break or not, no cause)"
    )
    if precision < TARGET or recall < TARGET:
        print("below target", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
