"""The demo's sections, in the order ``reasonstate demo`` prints them: each builds its tables (with units
in every column header and a one-line reading under each), then hands them to an
:class:`~reasonstate.demo.render.Output`."""

from __future__ import annotations

import os

from reasonstate.demo import agent as agent_job
from reasonstate.demo import job
from reasonstate.demo.opening import OPENING_TURNS, Opening, run_opening
from reasonstate.demo.render import Output, Table

__all__ = ["agent", "opening", "opening_tables", "persistence", "policies", "switching", "tokens"]


def opening(out: Output) -> Opening:
    """Part 1: what goes wrong without the library; returns the measured figures."""
    out.heading("1. Without reasonstate: the same agent job as plain vendor-SDK loops")
    out.text(
        f"The job: the first {OPENING_TURNS} user turns of the travel-desk agent; turn 0 is a tool chain "
        "(two parallel weather calls, then an itinerary lookup).",
        "Every server is a strict local emulator; every figure is what it answered over HTTP to the real "
        "vendor SDK client.",
        "",
    )
    with out.status("Running the plain loops and the same job through rs.Session on the emulators…"):
        result = run_opening()
    continuation, cache = opening_tables(result)
    out.table(continuation)
    for r in result.rejections:
        out.text(f"{r.vendor} {r.status}: {r.message}")
    out.text("")
    out.table(cache)
    advice = next((s.volatile_advice for s in result.sessions if s.volatile_advice), None)
    if advice:
        out.text(f"rs.Session also warned when it was built (trace event prefix.volatile): {advice}.")
    return result


def opening_tables(result: Opening) -> tuple[Table, Table]:
    sessions = {s.vendor: s for s in result.sessions}
    rows = []
    for r in result.rejections:
        run = sessions[r.vendor]
        rows.append(
            (
                r.vendor,
                r.mistake,
                str(r.request),
                str(r.status),
                str(len(run.statuses)),
                str(run.errors),
            )
        )
    continuation = Table(
        "Continuation state lost inside a tool chain (plain loop) vs kept (rs.Session)",
        (
            "vendor",
            "what the plain loop does",
            "plain: refused request (#, from 0)",
            "plain: HTTP status (code)",
            "rs.Session: requests (count)",
            "rs.Session: HTTP errors (count)",
        ),
        tuple(rows),
        (
            f"{result.plain_400s} plain loops stopped with the vendor's 400 on the tool chain's second call "
            f"(docs/protocols.md §4.3, §3.3, §5.4); rs.Session replayed every payload verbatim and finished "
            f"the job with {result.session_errors} HTTP errors.",
        ),
        labels=2,
    )
    header = ["request (#)"]
    columns = []
    for plain, session in result.cache:
        header += [
            f"{plain.vendor} prompt, plain (tokens)",
            f"{plain.vendor} cached, plain (tokens)",
            f"{plain.vendor} cached, rs.Session (tokens)",
        ]
        columns += [plain.prompt, plain.cached, session.cached]
    n = max(len(c) for c in columns)
    body = [(str(i), *(f"{c[i]:,}" if i < len(c) else "-" for c in columns)) for i in range(n)]
    totals = ["total"]
    for plain, session in result.cache:
        totals += [
            f"{sum(plain.prompt):,}",
            f"{sum(plain.cached):,} ({_share(sum(plain.cached), sum(plain.prompt))})",
            f"{sum(session.cached):,} ({_share(sum(session.cached), sum(session.prompt))})",
        ]
    fields = ", ".join(f"{p.vendor} {p.field}" for p, _ in result.cache)
    lost = ", ".join(f"{p.vendor} {sum(s.cached) - sum(p.cached):,} tokens" for p, s in result.cache)
    cache = Table(
        f"Prefix cache with the current time in the system prompt: cached tokens per request ({fields})",
        tuple(header),
        (*body, tuple(totals)),
        (
            "The plain loops render `Current time: …` into the system prompt on every request, so only "
            f"tokens before it can hit (lost: {lost}); rs.Session fixes the system bytes when it is built "
            "and reads the rest of each prompt from cache.",
        ),
    )
    return continuation, cache


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def policies(out: Output, *, live: bool) -> None:
    """Part 2: the full job under each between-turn policy, per vendor."""
    where = "on each real API whose key is set" if live else "on the emulators"
    out.heading(f"2. With reasonstate: the full job under each between-turn policy, {where}")
    out.text(
        "Keep, Drop, KeepLast(1): what each closed turn's reasoning becomes in later requests (all of it "
        "replayed, none, the last turn's only). cache reads, vendor: what the server reported; SDK "
        "predicted: what reasonstate expected before sending; exact: requests where the two agree, out "
        "of those it could predict (n/a: the prefix diverged inside an item, so the token count is not "
        "knowable). sent: request bytes on the wire; active context: the tokens of the last request's "
        "prompt. Protocol errors must be 0.",
        "",
    )
    for vendor in job.VENDORS:
        if live and not os.environ.get(vendor.key_env):
            out.text(f"{vendor.title}: skipped (--live needs {vendor.key_env})", "")
            continue
        with out.status(f"{vendor.title}: running the job under Keep, Drop, KeepLast(1)…"):
            table, _ = job.vendor_table(vendor, live)
        out.table(table)


def switching(out: Output) -> None:
    """Part 3: one conversation across four vendors."""
    out.heading("3. One conversation across vendors")
    with out.status("Switching one session across four emulated vendors…"):
        table = job.switch_table()
    out.table(table)


def compaction(out: Output) -> None:
    """Part 3b: one session whose vendor compacts the context server-side (docs/protocols.md §1.9)."""
    from reasonstate.demo.compaction import compaction_table

    out.heading("3b. Server-side compaction: the vendor's opaque summary as continuation state")
    with out.status("Running a Responses session that crosses its compaction threshold…"):
        table = compaction_table()
    out.table(table)


def context_editing(out: Output) -> None:
    """Part 3c: one session whose vendor clears old thinking server-side (docs/protocols.md §4.7)."""
    from reasonstate.demo.compaction import context_editing_table

    out.heading("3c. Context editing: the vendor clears old thinking, the session predicts what it caches")
    with out.status("Running an Anthropic session under ServerClear(thinking_keep=1)…"):
        table = context_editing_table()
    out.table(table)


def tokens(out: Output) -> None:
    """Part 4: the token-level PRR matrix and a token-in/token-out session (needs the ``tokens`` extra)."""
    out.heading("4. Self-hosted models: token-level prefix reuse")
    out.text(
        "PRR (Parse-Render Roundtrip): a chat client parses each sampled reply into a message and renders "
        "the whole conversation again with the model's chat template for the next prompt. Where the "
        "re-rendered tokens differ from the ones the model sampled, the prompt prefix breaks there, and the "
        "server's KV cache with it (break@N: the first differing character or token).",
        "The token bridge never re-renders: the next prompt is the previous prompt's token ids, the sampled "
        "ids, then only the new messages' tokens.",
        "",
    )
    try:
        from reasonstate.demo.token_session import token_demo_rows
        from reasonstate.tokens.matrix import run_matrix
        from reasonstate.tokens.templates import template_path
    except ImportError:  # the `tokens` extra is not installed
        out.text("(skipped: pip install 'reasonstate[tokens]')")
        return
    with out.status("Rendering the Qwen3.6 drift matrix…"):
        matrix = run_matrix(template_path("qwen3.6"), "qwen3.6", switches=[{}, {"preserve_thinking": True}])
    rows = tuple((r.scenario, r.switch, str(r.string), str(r.token), str(r.bridge)) for r in matrix.rows)
    breaks = sum(1 for r in matrix.rows if r.token.status == "break")
    bridged = sum(1 for r in matrix.rows if r.bridge.status == "ok")
    out.table(
        Table(
            f"PRR drift matrix: {matrix.template} (family {matrix.family}, tokenizer {matrix.tokenizer})",
            (
                "scenario",
                "switch",
                "re-render, string (break@chars)",
                "re-render, token (break@tokens)",
                "bridge (prefix kept)",
            ),
            rows,
            (
                f"Re-rendering the parsed reply breaks the prompt prefix in {breaks}/{len(rows)} cases (the "
                f"KV cache is lost from there); the token bridge keeps it in {bridged}/{len(rows)}.",
            ),
            labels=5,
        )
    )
    with out.status("Running a token-in/token-out session on the vLLM emulator…"):
        token_rows = token_demo_rows()
    exact = sum(1 for r in token_rows if r[5] == r[6])
    cached = {p: sum(int(r[5]) for r in token_rows if r[0] == p) for p in ("keep", "drop")}
    out.table(
        Table(
            "Token-in, token-out session (Qwen3.6 template + tokenizer, vLLM /v1/completions emulator)",
            (
                "policy",
                "request (#)",
                "turn.step",
                "prompt path",
                "prompt (tokens)",
                "cached, vLLM (tokens)",
                "cached, SDK predicted (tokens)",
            ),
            tuple(token_rows),
            (
                f"Cached tokens predicted exactly on {exact}/{len(token_rows)} requests (vLLM caches whole "
                f"16-token blocks); Keep bridges every prompt ({cached['keep']:,} cached tokens), Drop "
                f"re-renders each new turn as its sampled reasoning is gone ({cached['drop']:,}).",
            ),
            labels=4,
        )
    )


def agent(out: Output) -> agent_job.AgentRun:
    """Part 5: a cache-first coding agent over 30+ turns on the DeepSeek emulator; returns its figures."""
    out.heading(f"5. A cache-first coding agent: search, read, edit across {agent_job.TURNS} turns")
    out.text(
        "rs.Session.run drives a coding agent (search and read_file parallel-safe, edit_file a barrier) "
        f"over a temporary folder, {agent_job.TURNS} user turns against the DeepSeek emulator; a fold past "
        f"{agent_job.FOLD_THRESHOLD_TOKENS:,} prompt tokens, and one storm (turn {agent_job.STORM_TURN} "
        "reads the same file three times).",
        "maximum: the tokens a request shares with the previous request plus its output as generated "
        "(docs/protocols.md §3.4), computed from the request and response bodies on the wire.",
        "fold: the session replaces the oldest turns with a summary, once, at a user turn. Declared break: "
        "a cache break the session announced in its trace before sending (here: each fold); the maximum "
        "is not applied to it. Storm break: the storm breaker suppressed a repeated tool call (the same "
        "call a 3rd time within 6 calls of a turn; trace event tool.suppressed) and told the model why.",
        "",
    )
    with out.status("Running the coding agent on the DeepSeek emulator…"):
        run = agent_job.run_session()
    out.table(agent_job.agent_table(run))
    return run


def persistence(out: Output) -> None:
    """Part 6: the session kept in the embedded store while workers take its turns (reasonstate.store)."""
    from reasonstate.demo import persist

    out.heading("6. Sessions that outlive a process: the embedded SQLite store")
    out.text(
        "rs.Session(..., store=SQLiteStore(path), session_id=...) appends one entry per model call; "
        "rs.Session.load continues the session in any worker with a byte-identical next request.",
        "",
    )
    with out.status("Three workers taking turns through one SQLite file…"):
        run = persist.run_persisted()
    out.table(persist.persist_table(run))
