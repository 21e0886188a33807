"""A cache-first coding agent on the DeepSeek emulator, and the naive loop it is measured against.

The job: :data:`TURNS` user turns of a small coding agent over a temporary folder of Python files, with
three tools: ``search`` and ``read_file`` (``parallel_safe``) and ``edit_file`` (a barrier). The scripted
model does what such an agent does: on even turns (a ticket) it searches for a setting, reads the module
and a test file in parallel, edits the module and answers; odd turns are follow-up questions it answers
from the context; realistic ``reasoning_content`` on every step. Turn :data:`STORM_TURN` is a *storm*: the
model reads the same file three times (the storm breaker suppresses the third read). The context grows
past the :class:`~reasonstate.policies.Fold` threshold twice.

The same job runs two ways on fresh DeepSeek emulators (docs/protocols.md §3), both with the real
``openai`` client over HTTP:

* :func:`run_session`: ``rs.Session(...).run(question)`` per turn, with a fold;
* :func:`run_naive`: the loop frameworks write, with the raw SDK: the system prompt is rebuilt on every
  request with the current time in it, and tool results are appended in the order the handlers finish
  (``read_file`` takes longer on bigger files, and the model names the bigger file first).

**The figures are the server's and an independent oracle's, never the session's own.** Per request: the
prompt and the cache hit (``prompt_tokens``, ``prompt_cache_hit_tokens``) from the HTTP response, and the
*theoretical maximum*: the tokens of the longest common prefix of the request with the previous request
of the same run followed by that request's output as generated (DeepSeek persists a unit at the end of
the input and one at the end of the output, docs/protocols.md §3.4). :func:`request_maxima` computes it
from the recorded request and response bodies with the emulator's documented rendering (one segment per
message, each tokenized on its own; the 64-token storage unit of older DeepSeek pages is not emulated,
§3.4) and :func:`reasonstate.testing.count_tokens`. Invariant the benchmark checks: on every request of
the session that is not a declared ``cache.break`` (a fold), ``hit >= 0.99 * maximum``.
"""

from __future__ import annotations

import datetime
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.demo.render import Table
from reasonstate.policies import Fold
from reasonstate.state import EventKind

__all__ = [
    "FOLD_KEEP_TAIL_TOKENS",
    "FOLD_THRESHOLD_TOKENS",
    "MODEL",
    "STORM_TURN",
    "TARGET",
    "TURNS",
    "AgentRun",
    "RequestFigures",
    "Workspace",
    "agent_table",
    "compare_table",
    "questions",
    "reordered_steps",
    "request_maxima",
    "run_naive",
    "run_session",
    "scripted_actions",
    "summarize",
]

TURNS = 32
MODEL = "deepseek-v4-pro"
#: the turn whose model reads the same file three times in a row
STORM_TURN = 6
#: rs.Session's cache hits over the theoretical maximum, on every request that is not a declared break
TARGET = 0.99
#: the fold: past this many prompt tokens the head is summarized and the last ~3k tokens kept as they are.
#: Without a fold the context grows by ~460 tokens a turn (14.7k at turn 31), so it passes 8k near turn
#: 15, and again ~9 turns after the fold (near turn 25); a third pass would need ~34 turns.
FOLD_THRESHOLD_TOKENS = 8_000
FOLD_KEEP_TAIL_TOKENS = 3_000

SYSTEM = (
    "You are a careful coding agent working in a small Python repository. Use the tools: search before "
    "you read, read before you edit, and edit with the smallest change that does the job. Never guess a "
    "file's content. Answer in two sentences: what you changed and where. "
    + "House rules: keep settings in app/*.py as module constants; tests live in tests/; no new files. "
    * 8
)
MODULES = ("net", "db", "cache", "auth")
#: seconds per line ``read_file`` takes: a slow mount, so a big module finishes after a small test file
READ_DELAY_PER_LINE_S = 0.0002


# -- the repository the agent works on ------------------------------------------------------------------
def _module_text(name: str, turns: int) -> str:
    lines = [f'"""The {name} layer: settings and a few helpers (generated for the demo)."""', ""]
    lines += [f"LIMIT_{i} = {i + 1}" for i in range(0, turns, 2) if MODULES[(i // 2) % len(MODULES)] == name]
    lines.append("")
    for j in range(6):
        lines += [
            f"def {name}_helper_{j}(value: int) -> int:",
            f'    """Scale value by step {j}; used by the {name} tests."""',
            f"    return value * {j + 1} + LIMIT_{2 * MODULES.index(name)}",
            "",
        ]
    return "\n".join(lines)


def _test_text(name: str) -> str:
    lines = [f"from app.{name} import {name}_helper_0", ""]
    for j in range(3):
        lines += [f"def test_{name}_helper_{j}() -> None:", f"    assert {name}_helper_0({j}) >= {j}", ""]
    return "\n".join(lines)


class Workspace:
    """The temporary folder the agent's tools act on, and the tools themselves.

    ``calls`` records every handler call as ``(tool, arguments)`` in the order they started (for tests).
    Handlers are deterministic: the same calls in the same order give the same results.
    """

    def __init__(self, root: Path, turns: int = TURNS) -> None:
        self.root = root
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.edits_applied = 0
        (root / "app").mkdir()
        (root / "tests").mkdir()
        for name in MODULES:
            (root / "app" / f"{name}.py").write_text(_module_text(name, turns))
            (root / "tests" / f"test_{name}.py").write_text(_test_text(name))

    def _path(self, path: str) -> Path:
        full = (self.root / path).resolve()
        if self.root.resolve() not in full.parents:
            raise ValueError(f"{path} is outside the repository")
        return full

    def read_file(self, path: str) -> str:
        self.calls.append(("read_file", {"path": path}))
        text = self._path(path).read_text()
        time.sleep(READ_DELAY_PER_LINE_S * text.count("\n"))
        return text

    def search(self, pattern: str) -> str:
        self.calls.append(("search", {"pattern": pattern}))
        hits = []
        for file in sorted(self.root.rglob("*.py")):
            for n, line in enumerate(file.read_text().splitlines(), 1):
                if pattern in line:
                    hits.append(f"{file.relative_to(self.root)}:{n}: {line}")
        return "\n".join(hits) or f"no match for {pattern!r}"

    def edit_file(self, path: str, old: str, new: str) -> str:
        self.calls.append(("edit_file", {"path": path, "old": old, "new": new}))
        file = self._path(path)
        text = file.read_text()
        if text.count(old) != 1:
            raise ValueError(f"{old!r} occurs {text.count(old)} times in {path}; expected exactly once")
        file.write_text(text.replace(old, new))
        self.edits_applied += 1
        return f"edited {path}: 1 replacement"

    def tools(self) -> list[rs.Tool]:
        def schema(**props: str) -> dict[str, Any]:
            return {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
                "required": list(props),
            }

        return [
            rs.Tool(
                name="read_file",
                description="The full text of a file of the repository",
                parameters=schema(path="path relative to the repository root"),
                handler=self.read_file,
                parallel_safe=True,
            ),
            rs.Tool(
                name="search",
                description="Every line of the repository's Python files that contains a string",
                parameters=schema(pattern="the exact string to look for"),
                handler=self.search,
                parallel_safe=True,
            ),
            rs.Tool(
                name="edit_file",
                description="Replace one exact, unique occurrence of a string in a file",
                parameters=schema(path="the file", old="the text to replace", new="its replacement"),
                handler=self.edit_file,
            ),
        ]


@contextmanager
def workspace(turns: int = TURNS) -> Iterator[Workspace]:
    """A fresh :class:`Workspace` for a job of ``turns`` turns, deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="reasonstate-agent-") as root:
        yield Workspace(Path(root), turns)


# -- the scripted model -----------------------------------------------------------------------------------
def _turn(i: int) -> tuple[str, str, str]:
    """Turn ``i``'s setting, the module that defines it and the test file read beside it."""
    module = MODULES[(i // 2) % len(MODULES)]
    return f"LIMIT_{i}", f"app/{module}.py", f"tests/test_{MODULES[(i // 2 + 2) % len(MODULES)]}.py"


def _tool_turn(i: int) -> bool:
    """Even turns are tickets (a tool chain); odd turns are follow-up questions answered from context."""
    return i % 2 == 0


def questions(turns: int = TURNS) -> list[str]:
    out = []
    for i in range(turns):
        setting, _, _ = _turn(i)
        if _tool_turn(i):
            out.append(
                f"Ticket {100 + i}: {setting} is too low in production; raise it tenfold and tell me where "
                "it is used."
            )
        else:
            previous, _, _ = _turn(i - 1)
            out.append(f"Before I deploy: could the change to {previous} break anything that imports it?")
    return out


def scripted_actions(turns: int = TURNS) -> list[Any]:
    """What the emulated model does for :func:`questions`, call by call (``ModelAction`` values)."""
    from reasonstate.testing import ModelAction, ToolCallSpec

    actions: list[ModelAction] = []
    for i in range(turns):
        setting, module, test = _turn(i)
        if not _tool_turn(i):
            previous, module, test = _turn(i - 1)
            actions.append(
                ModelAction.answer(
                    f"No: {previous} is read only inside {module}, and {test} asserts lower bounds only.",
                    reasoning=(
                        f"The user asks whether raising {previous} can break an importer. The search in "
                        f"the previous ticket found it only in {module}, and the test file I read checks "
                        "lower bounds, so the answer needs no new tool call."
                    ),
                )
            )
            continue
        actions.append(
            ModelAction.call(
                ToolCallSpec("search", {"pattern": setting}),
                reasoning=(
                    f"The ticket asks to raise {setting} tenfold. I do not know where it is defined, and "
                    "the house rules say to search before reading, so the first step is a search for the "
                    "exact name; a setting can be shadowed in a second module, and I need every use."
                ),
            )
        )
        actions.append(
            ModelAction.call(
                ToolCallSpec("read_file", {"path": module}),
                ToolCallSpec("read_file", {"path": test}),
                reasoning=(
                    f"The search shows {setting} defined in {module}. Before editing I read the module to "
                    f"see how the helpers use the constant, and {test} to check no assertion depends on "
                    "the old value. Both reads are independent, so I ask for them in one step."
                ),
            )
        )
        if i == STORM_TURN:  # the storm: the model re-reads the module it already has, twice
            for attempt in ("again", "once more"):
                actions.append(
                    ModelAction.call(
                        ToolCallSpec("read_file", {"path": module}),
                        reasoning=(
                            f"I am not sure the read of {module} returned the whole file; let me read it "
                            f"{attempt} to be certain of the line with {setting} before I edit it."
                        ),
                    )
                )
        actions.append(
            ModelAction.call(
                ToolCallSpec(
                    "edit_file",
                    {"path": module, "old": f"{setting} = {i + 1}", "new": f"{setting} = {(i + 1) * 10}"},
                ),
                reasoning=(
                    f"{module} has `{setting} = {i + 1}` exactly once and the tests only check lower bounds, "
                    f"so raising it to {(i + 1) * 10} is safe. The smallest edit is that one line."
                ),
            )
        )
        actions.append(
            ModelAction.answer(
                f"Raised {setting} from {i + 1} to {(i + 1) * 10} in {module}; every use the search "
                f"found is in that module, and {test} asserts lower bounds only.",
                reasoning=(
                    f"The edit succeeded. Summarize: the file, the old and new value of {setting}, and "
                    "that the tests I read do not pin the old value."
                ),
            )
        )
    return actions


_FILE = re.compile(r"\b(?:app|tests)/[a-z_]+\.py\b")
_SETTING = re.compile(r"\bLIMIT_\d+\b")


def summarize(head: str) -> str:
    """The fold's summarizer (a deterministic stand-in for a model call): the goals, the files seen or
    changed and the settings touched, as the fold's preservation instruction asks."""
    files = sorted(set(_FILE.findall(head)))
    settings = sorted(set(_SETTING.findall(head)), key=lambda s: int(s.split("_")[1]))
    return (
        "Summary of the earlier conversation. Goal: raise LIMIT_* settings tenfold, one ticket per turn, "
        "with the smallest edit. Constraints: search before reading, read before editing, no new files. "
        f"Settings already handled: {', '.join(settings) or 'none'}. Files seen or changed: "
        f"{', '.join(files) or 'none'}. Open todos: none."
    )


def _fold_option() -> dict[str, Any]:
    """The session option that folds the context past :data:`FOLD_THRESHOLD_TOKENS` (``fold=Fold(...)``)."""
    return {
        "fold": Fold(
            threshold_tokens=FOLD_THRESHOLD_TOKENS,
            keep_tail_tokens=FOLD_KEEP_TAIL_TOKENS,
            summarize=summarize,
        )
    }


# -- the figures ------------------------------------------------------------------------------------------
@attrs.frozen
class RequestFigures:
    """One request as the server reported it, and the oracle's maximum for it.

    ``maximum`` is None for the first request of a run (nothing to share yet); ``declared_break`` is true
    when the session announced a ``cache.break`` for this request (a fold)."""

    turn: int
    prompt: int
    hit: int
    output: int
    maximum: int | None
    declared_break: bool = False


@attrs.frozen
class AgentRun:
    """One run of the agent job: per-request figures, folds and storm breaks, cost in USD."""

    who: str
    turns: int
    requests: tuple[RequestFigures, ...]
    folds: int
    storm_breaks: int
    cost_usd: float
    #: requests whose cache read the session predicted exactly, out of those it predicted (cross-check)
    predicted: tuple[int, int] = (0, 0)
    #: the handler calls in the order they started
    calls: tuple[tuple[str, str], ...] = ()
    #: per user turn: the fold events and storm breaks in the trace while that turn was open
    events_by_turn: tuple[tuple[int, int], ...] = ()
    #: the session's own cost figure (``session.report().cost``), a cross-check of ``cost_usd``
    reported_cost_usd: float | None = None
    #: ``edit_file`` calls that changed a file (a failing edit is an error result instead)
    edits_applied: int = 0
    #: model steps whose tool results went back in an order other than the calls' (from the request bodies)
    reordered_steps: int = 0

    @property
    def prompt(self) -> int:
        return sum(r.prompt for r in self.requests)

    @property
    def hit(self) -> int:
        return sum(r.hit for r in self.requests)

    @property
    def hit_ratio(self) -> float:
        return self.hit / self.prompt if self.prompt else 0.0

    def measured(self) -> list[RequestFigures]:
        """The requests the target applies to: a maximum to compare with and no declared break."""
        return [r for r in self.requests if r.maximum and not r.declared_break]

    @property
    def of_maximum(self) -> float:
        """Hit tokens over the theoretical maximum, summed over :meth:`measured`."""
        rows = self.measured()
        total = sum(r.maximum or 0 for r in rows)
        return sum(r.hit for r in rows) / total if total else 1.0

    @property
    def worst_of_maximum(self) -> float:
        """The lowest single request's hit over its maximum, among :meth:`measured`."""
        return min((r.hit / r.maximum for r in self.measured() if r.maximum), default=1.0)

    @property
    def meets_target(self) -> bool:
        return self.worst_of_maximum >= TARGET


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _segments(body: Mapping[str, Any]) -> list[str]:
    """The prompt as DeepSeek's emulator renders it: the tools, then one segment per message without
    null values; ``reasoning_content`` counts only on assistant messages with ``tool_calls`` (§3.3)."""
    out = [_canonical({"tools": body["tools"]})] if body.get("tools") else []
    for message in body["messages"]:
        shown = {k: v for k, v in message.items() if v is not None}
        with_calls = shown.get("role") == "assistant" and bool(shown.get("tool_calls"))
        drop = {"reasoning"} if with_calls else {"reasoning", "reasoning_content"}
        out.append(_canonical({k: v for k, v in shown.items() if k not in drop}))
    return out


def _generated(message: Mapping[str, Any]) -> str:
    """The output message as generated, the unit DeepSeek persists after it (§3.4)."""
    return _canonical({k: v for k, v in message.items() if v is not None and k != "reasoning"})


def request_maxima(exchanges: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[int | None]:
    """Per ``(request body, response body)`` of one run, in order: the tokens of the longest common
    segment prefix with the previous request followed by its output as generated (None for the first).

    ``maximum[n] == Σ count_tokens(s) for s in lcp(S[n], S[n-1] + [G[n-1]])``
    """
    from reasonstate.testing import count_tokens

    out: list[int | None] = []
    previous: list[str] | None = None
    for body, response in exchanges:
        segments = _segments(body)
        if previous is None:
            out.append(None)
        else:
            shared = 0
            for a, b in zip(segments, previous, strict=False):
                if a != b:
                    break
                shared += count_tokens(a)
            out.append(shared)
        previous = [*segments, _generated(response["choices"][0]["message"])]
    return out


class _Wire:
    """Every exchange the SDK client made: the request body and the response body (an httpx hook)."""

    def __init__(self) -> None:
        self.exchanges: list[tuple[int, Any, Any]] = []

    def _hook(self, response: Any) -> None:
        response.read()
        self.exchanges.append(
            (int(response.status_code), json.loads(response.request.content), json.loads(response.content))
        )

    def http_client(self) -> Any:
        import httpx2

        return httpx2.Client(trust_env=False, event_hooks={"response": [self._hook]})

    def ok(self) -> list[tuple[Any, Any]]:
        bad = [s for s, _, _ in self.exchanges if s != 200]
        if bad:
            raise RuntimeError(f"the emulator refused {len(bad)} requests: {bad}")
        return [(request, response) for _, request, response in self.exchanges]


def reordered_steps(bodies: Sequence[Mapping[str, Any]]) -> int:
    """How many distinct assistant messages with ``tool_calls`` are answered, in any of ``bodies``, by
    ``tool`` messages in an order other than the calls' declared order."""
    out: set[tuple[str, ...]] = set()
    for body in bodies:
        messages = body["messages"]
        for i, message in enumerate(messages):
            declared = tuple(str(c["id"]) for c in message.get("tool_calls") or ())
            if not declared:
                continue
            answered = tuple(
                str(m["tool_call_id"]) for m in messages[i + 1 : i + 1 + len(declared)] if m["role"] == "tool"
            )
            if answered != declared:
                out.add(declared)
    return len(out)


def _figures(
    exchanges: Sequence[tuple[Any, Any]], turns: Sequence[int], breaks: set[int]
) -> tuple[RequestFigures, ...]:
    maxima = request_maxima(exchanges)
    out = []
    for i, ((_, response), maximum) in enumerate(zip(exchanges, maxima, strict=True)):
        usage = response["usage"]
        out.append(
            RequestFigures(
                turn=turns[i],
                prompt=int(usage["prompt_tokens"]),
                hit=int(usage["prompt_cache_hit_tokens"]),
                output=int(usage["completion_tokens"]),
                maximum=maximum,
                declared_break=i in breaks,
            )
        )
    return tuple(out)


def _cost(requests: Sequence[RequestFigures]) -> float:
    price = rs.Pricing.default().price(MODEL)
    assert price is not None, f"the packaged price table has no row for {MODEL}"
    total = 0.0
    for r in requests:
        usage = rs.Usage(uncached_input=r.prompt - r.hit, cache_read=r.hit, output=r.output)
        total += price.cost(usage).total
    return total


@contextmanager
def _deepseek(turns: int, wire: _Wire) -> Iterator[Any]:
    from reasonstate.testing import OpenAIChatEmulator

    with OpenAIChatEmulator(scripted_actions(turns), dialect="deepseek") as emulator:
        client = emulator.client(http_client=wire.http_client())
        try:
            yield client
        finally:
            client.close()


def run_session(turns: int = TURNS, *, fold: bool = True) -> AgentRun:
    """The job through ``rs.Session.run`` (with the fold unless ``fold=False``) on a fresh emulator."""
    wire = _Wire()
    with workspace(turns) as ws, _deepseek(turns, wire) as client:
        options = _fold_option() if fold else {}
        session = rs.Session(
            client, model=MODEL, system=SYSTEM, tools=ws.tools(), dialect="deepseek", **options
        )
        for question in questions(turns):
            session.run(question, max_steps=8)
        calls = tuple((name, json.dumps(args, sort_keys=True)) for name, args in ws.calls)
        edits = ws.edits_applied
    records = session.execution
    per_turn = [[0, 0] for _ in range(turns)]
    turn = 0
    for event in session.trace:
        if event.kind == EventKind.TURN_OPENED:
            turn = int(event.data["turn"])
        elif event.kind == EventKind.CONTEXT_FOLDED:
            per_turn[turn][0] += 1
        elif event.kind == EventKind.TOOL_SUPPRESSED:
            per_turn[turn][1] += 1
    # a declared break names its request (reasonstate/engine.py); a fold's own event may add one without it
    breaks = {int(e.data["index"]) for e in session.trace.of_kind(EventKind.CACHE_BREAK) if "index" in e.data}
    predicted = [r for r in records if r.predicted_cache_read is not None]
    exact = sum(1 for r in predicted if r.predicted_cache_read == r.usage.cache_read)
    requests = _figures(wire.ok(), [r.turn for r in records], breaks)
    reported = session.report().cost
    return AgentRun(
        who="rs.Session",
        turns=turns,
        requests=requests,
        folds=len(session.trace.of_kind(EventKind.CONTEXT_FOLDED)),
        storm_breaks=len(session.trace.of_kind(EventKind.TOOL_SUPPRESSED)),
        cost_usd=_cost(requests),
        predicted=(exact, len(predicted)),
        reported_cost_usd=None if reported is None else reported.total,
        calls=calls,
        edits_applied=edits,
        reordered_steps=reordered_steps([body for body, _ in wire.ok()]),
        events_by_turn=tuple((f, s) for f, s in per_turn),
    )


def _chat_tools(tools: Sequence[rs.Tool]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in tools
    ]


def run_naive(turns: int = TURNS) -> AgentRun:
    """The job as a framework's loop over the raw ``openai`` SDK: the system prompt rebuilt on every
    request with the current time, tool calls run in a thread pool and their results appended as they
    complete; the assistant message kept with its ``reasoning_content`` (so DeepSeek accepts it)."""
    wire = _Wire()
    turn_of: list[int] = []
    with workspace(turns) as ws, _deepseek(turns, wire) as client:
        tools = ws.tools()
        handlers: dict[str, Callable[..., Any]] = {t.name: t.handler for t in tools if t.handler}
        history: list[dict[str, Any]] = []

        def run_call(call: Any) -> dict[str, Any]:
            try:
                content = str(handlers[call.function.name](**json.loads(call.function.arguments)))
            except Exception as exc:  # the loop reports a failing tool to the model
                content = f"error: {exc}"
            return {"role": "tool", "tool_call_id": call.id, "content": content}

        for turn, question in enumerate(questions(turns)):
            history.append({"role": "user", "content": question})
            while True:
                now = datetime.datetime.now(datetime.timezone.utc)
                system = f"{SYSTEM}\nCurrent time: {now.isoformat()}"
                completion = client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "system", "content": system}, *history],
                    tools=_chat_tools(tools),
                    reasoning_effort="high",
                )
                turn_of.append(turn)
                message = completion.choices[0].message
                history.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                with ThreadPoolExecutor(max_workers=4) as pool:
                    futures = [pool.submit(run_call, c) for c in message.tool_calls]
                    history.extend(f.result() for f in as_completed(futures))
        calls = tuple((name, json.dumps(args, sort_keys=True)) for name, args in ws.calls)
        edits = ws.edits_applied
    requests = _figures(wire.ok(), turn_of, set())
    return AgentRun(
        who="naive loop",
        turns=turns,
        requests=requests,
        folds=0,
        storm_breaks=0,
        cost_usd=_cost(requests),
        calls=calls,
        edits_applied=edits,
        reordered_steps=reordered_steps([body for body, _ in wire.ok()]),
    )


# -- the tables -------------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def agent_table(run: AgentRun, *, block: int = 4) -> Table:
    """Per block of ``block`` turns: requests, prompt and hit tokens, the cumulative hit ratio, the hits
    over the oracle's maximum, and the folds and storm breaks so far (cumulative)."""
    rows = []
    seen: list[RequestFigures] = []
    for start in range(0, run.turns, block):
        chunk = [r for r in run.requests if start <= r.turn < start + block]
        seen += chunk
        events = run.events_by_turn[: start + block]
        so_far = AgentRun(run.who, run.turns, tuple(seen), 0, 0, 0.0)
        prompt, hit = sum(r.prompt for r in chunk), sum(r.hit for r in chunk)
        rows.append(
            (
                f"{start}-{min(start + block, run.turns) - 1}",
                str(len(chunk)),
                f"{prompt:,}",
                f"{hit:,}",
                _pct(so_far.hit_ratio),
                _pct(so_far.of_maximum),
                str(sum(1 for r in seen if r.declared_break)),
                str(sum(f for f, _ in events)),
                str(sum(s for _, s in events)),
            )
        )
    return Table(
        f"A cache-first coding agent, rs.Session on the DeepSeek emulator: {run.turns} turns (tickets: "
        "search -> read x2 -> edit -> answer; follow-ups answered from context), per block of turns",
        (
            "turns (#)",
            "requests (count)",
            "prompt (tokens)",
            "cache hits (tokens)",
            "hit ratio, cum. (%)",
            "of maximum, cum. (%)",
            "declared breaks, cum. (count)",
            "folds, cum. (count)",
            "storm breaks, cum. (count)",
        ),
        tuple(rows),
        (
            f"{run.folds} fold(s) (context.folded) and {run.storm_breaks} storm break(s) "
            f"(tool.suppressed) in the trace; DeepSeek read {_pct(run.hit_ratio)}% of all prompt tokens "
            "from cache, "
            f"{_pct(run.of_maximum)}% of the most a byte-perfect client could on the "
            f"{len(run.measured())} requests that are not a declared break (worst request "
            f"{_pct(run.worst_of_maximum)}%).",
        ),
    )


def compare_table(session: AgentRun, naive: AgentRun) -> Table:
    """rs.Session and the naive loop side by side: tokens, hit ratio and cost."""
    rows = [
        (
            run.who,
            str(len(run.requests)),
            f"{run.prompt:,}",
            f"{run.hit:,}",
            _pct(run.hit_ratio),
            f"{run.cost_usd:.4f}",
            str(run.folds),
            str(run.storm_breaks),
        )
        for run in (session, naive)
    ]
    saved = 1 - session.cost_usd / naive.cost_usd if naive.cost_usd else 0.0
    return Table(
        f"The same {session.turns}-turn agent job: rs.Session vs a naive loop (DeepSeek emulator, "
        f"{MODEL} list prices)",
        (
            "run",
            "requests (count)",
            "prompt (tokens)",
            "cache hits (tokens)",
            "hit ratio (%)",
            "cost (USD)",
            "folds (count)",
            "storm breaks (count)",
        ),
        tuple(rows),
        (
            f"The naive loop's clock in the system prompt leaves only the tools segment cacheable: "
            f"{_pct(naive.hit_ratio)}% vs {_pct(session.hit_ratio)}% read from cache, and rs.Session costs "
            f"{100 * saved:.0f}% less.",
        ),
    )
