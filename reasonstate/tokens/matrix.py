"""The drift matrix: standard agent scenarios × template switches → PRR at string and token level, and the
bridge path for the same scenario.

Each scenario is a conversation a client drives the usual way (render, sample, parse, put the parsed message
in history, render again); the completion under test is written in the family's own output syntax. A cell
reads ``ok`` or ``break@N`` (first character/token the next prompt does not reproduce), ``n/a`` when the
scenario does not apply to the family, or ``error: Type`` (a template or parser refusal, never silently ok).
The bridge column must read ``ok`` on every row: ``B[:len(p) + len(c)] == p + carried(c)`` (``c`` verbatim,
but for GPT-OSS's final ``<|return|>``, which the bridge writes ``<|end|>`` as the template does).

``reasonstate prr --template NAME|FILE [--tokenizer NAME] [--json]`` is :func:`main`; it prints
:data:`LEGEND` under the table. A tokenizer that is not the template's (:func:`unknown_special_tokens`) is
refused with :class:`TokenizerMismatch` before anything is measured.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from reasonstate.tokens.errors import TokenizerMismatch, TokensError
from reasonstate.tokens.families import CallSpec, ModelTurn
from reasonstate.tokens.protocol import Message, ParsedResponse
from reasonstate.tokens.renderer import ChatTemplateRenderer
from reasonstate.tokens.roundtrip import check_roundtrip, first_difference
from reasonstate.tokens.templates import TEMPLATE_NAMES, template_path

__all__ = [
    "LEGEND",
    "SCENARIOS",
    "Cell",
    "Matrix",
    "Row",
    "Scenario",
    "demo_section",
    "main",
    "run_matrix",
    "unknown_special_tokens",
]

LEGEND = """\
legend:
  ok          the next prompt starts with the previous prompt + completion, exactly (prefix kept)
  break@N     it does not: N is the first character (string column) or token (token column) that the next
              prompt does not reproduce; a prefix cache is lost from there on
  n/a         the scenario does not apply to this family (e.g. no parallel or XML tool calls), or the
              token column without --tokenizer
  error: T    the template or parser refused the conversation (exception type T), never counted as ok
columns: re-render = the client puts the parsed assistant message back and the template renders it again;
bridge = previous prompt ids + completion ids + only the new turn's tokens (must read ok on every row).
exit status: 0 every bridge cell ok or n/a, 1 a bridge cell is not, 2 unusable input"""
"""What ``reasonstate prr`` prints under the matrix: the meaning of each cell and of the exit status."""

# the special-token spellings chat templates use: <|name|> (Qwen, Kimi, GLM, GPT-OSS) and DeepSeek's
# full-width <｜name｜>
_SPECIAL = re.compile(r"<\|[^|<>\s]+\|>|<｜[^｜]+｜>")
_PROBE_CHAT: tuple[Message, ...] = ({"role": "user", "content": "x"},)

Step = tuple[Literal["user", "model", "results"], Any]

TOOLS: tuple[Mapping[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search flights.",
            "parameters": {
                "type": "object",
                "properties": {"origin": {"type": "string"}, "filters": {"type": "object"}},
                "required": ["origin"],
            },
        },
    },
)

_PARIS = CallSpec("get_weather", {"city": "Paris"})
_ROME = CallSpec("get_weather", {"city": "Rome"})


@attrs.frozen(slots=True)
class Scenario:
    """A conversation (``history``), the completion under test (``turn``), then what the client adds.

    ``rewrite`` models a server parser: ``reserialize`` (arguments through ``json.loads``/``json.dumps``),
    ``coerce`` (XML parameter strings converted to JSON types). ``requires`` names a family capability.
    """

    name: str
    summary: str
    history: tuple[Step, ...]
    turn: ModelTurn
    then: Step
    tools: bool = True
    rewrite: Literal["reserialize", "coerce"] | None = None
    requires: Literal["xml", "parallel"] | None = None


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "tool_call_then_result",
        "a tool call, then its result",
        (("user", "What's the weather in Paris?"),),
        ModelTurn(reasoning="The user wants the weather. I will call get_weather.", calls=(_PARIS,)),
        ("results", ("Sunny, 21°C",)),
    ),
    Scenario(
        "user_turn_after_final",
        "a new user turn after a final answer (after a tool loop)",
        (
            ("user", "What's the weather in Paris?"),
            ("model", ModelTurn(reasoning="I will call get_weather.", calls=(_PARIS,))),
            ("results", ("Sunny, 21°C",)),
        ),
        ModelTurn(reasoning="The tool says sunny.", content="It is sunny in Paris, 21°C."),
        ("user", "And in Rome?"),
    ),
    Scenario(
        "parallel_tool_calls",
        "several tool calls in one step",
        (("user", "Weather in Paris and Rome?"),),
        ModelTurn(reasoning="Two cities, two calls.", calls=(_PARIS, _ROME)),
        ("results", ("Sunny", "Rainy")),
        requires="parallel",
    ),
    Scenario(
        "final_answer_no_tools",
        "a final answer without tools, then a new user turn",
        (("user", "What is 17 * 23?"),),
        ModelTurn(reasoning="17 * 23 = 391.", content="391"),
        ("user", "And 17 * 24?"),
        tools=False,
    ),
    Scenario(
        "reasoning_truncated",
        "reasoning cut by max_tokens (no close tag, no end of turn)",
        (("user", "Plan a three-day trip to Rome."),),
        ModelTurn(reasoning="Day one could start at the Colosseum, then", finished=False),
        ("user", "Go on."),
        tools=False,
    ),
    Scenario(
        "reasoning_trailing_blank_lines",
        "reasoning that ends in extra blank lines",
        (("user", "What's the weather in Paris?"),),
        ModelTurn(reasoning="I will call get_weather.\n\n\n", calls=(_PARIS,)),
        ("results", ("Sunny, 21°C",)),
    ),
    Scenario(
        "args_reserialized",
        "arguments re-serialized by json.loads/json.dumps",
        (("user", "Weather in Paris for 3 days?"),),
        ModelTurn(
            reasoning="Call get_weather with days=3.",
            calls=(
                CallSpec("get_weather", {"city": "Paris", "days": 3}, json_text='{"city":"Paris","days":3}'),
            ),
        ),
        ("results", ("Sunny all week",)),
        rewrite="reserialize",
    ),
    Scenario(
        "xml_params_coerced",
        "XML parameters coerced to JSON types",
        (("user", "Direct flights from Paris under 500?"),),
        ModelTurn(
            reasoning="Search with filters.",
            calls=(
                CallSpec(
                    "search_flights",
                    {"origin": "PAR", "filters": {"max_price": 500, "direct": True}},
                    xml_values={"origin": "PAR", "filters": '{"max_price":500,"direct":true}'},
                ),
            ),
        ),
        ("results", ("2 flights",)),
        rewrite="coerce",
        requires="xml",
    ),
)


@attrs.frozen(slots=True)
class Cell:
    """``status`` is ``ok``, ``break`` (at ``offset``), ``n/a`` or ``error``; ``detail`` says why."""

    status: Literal["ok", "break", "n/a", "error"]
    offset: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        if self.status == "break":
            return f"break@{self.offset}"
        if self.status == "error":
            return "error: " + self.detail.split(":", 1)[0]
        return self.status

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "offset": self.offset, "detail": self.detail}


@attrs.frozen(slots=True)
class Row:
    """One scenario under one switch setting: the re-render checked at string and token level, and the
    bridge (which must be ``ok`` for every row: ``reasonstate prr`` exits 1 otherwise)."""

    scenario: str
    switch: str
    string: Cell
    token: Cell
    bridge: Cell


@attrs.frozen(slots=True)
class Matrix:
    """Rows in scenario order, each scenario once per switch setting."""

    template: str
    family: str
    tokenizer: str | None
    rows: tuple[Row, ...]

    def cell(self, scenario: str, switch: str = "default") -> Row:
        """The row of ``scenario`` under ``switch`` (``"default"``: no template switch)."""
        return next(r for r in self.rows if r.scenario == scenario and r.switch == switch)

    def to_json(self) -> dict[str, Any]:
        """The matrix as JSON data (``reasonstate prr --json``)."""
        return {
            "template": self.template,
            "family": self.family,
            "tokenizer": self.tokenizer,
            "rows": [
                {
                    "scenario": r.scenario,
                    "switch": r.switch,
                    "string": r.string.to_json(),
                    "token": r.token.to_json(),
                    "bridge": r.bridge.to_json(),
                }
                for r in self.rows
            ],
        }

    def format(self) -> str:
        """The matrix as a text table, one line per row (``reasonstate prr``)."""
        head = (
            f"PRR drift matrix: {self.template} (family {self.family}, tokenizer {self.tokenizer or 'none'})"
        )
        widths = (32, 26, 20, 20, 8)
        lines = [head, _line(("scenario", "switch", "re-render string", "re-render token", "bridge"), widths)]
        lines += [
            _line((r.scenario, r.switch, str(r.string), str(r.token), str(r.bridge)), widths)
            for r in self.rows
        ]
        return "\n".join(lines)


def _line(cols: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()


def _switch_name(switch: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in switch.items()) or "default"


def unknown_special_tokens(renderer: ChatTemplateRenderer) -> tuple[str, ...]:
    """The template's special tokens that the renderer's tokenizer does not know as single special ids.

    Checked: the family's turn closes and every ``<|...|>`` / ``<｜...｜>`` token the template writes for a
    one-message conversation with the generation prompt. Empty for a string-level renderer, and for a
    tokenizer that belongs with the template; anything else means the token column would measure
    nonsense (a GLM template with the Qwen tokenizer splits ``<|user|>`` into ordinary pieces).
    """
    tokenizer = renderer.tokenizer
    if tokenizer is None:
        return ()
    try:
        text = renderer.render_text(list(_PROBE_CHAT), None, True)
    except TokensError:  # a template that refuses the probe: its cells will say so; check the closes
        text = ""
    family = renderer.family
    wanted = set(_SPECIAL.findall(text)) | set(family.turn_close) | set(family.closes_in_render())
    return tuple(sorted(t for t in wanted if tokenizer.special_id(t) is None))


def run_matrix(
    template_path: str | Path,
    tokenizer: str | None = None,
    switches: Sequence[Mapping[str, Any]] | None = None,
    scenarios: Sequence[Scenario] = SCENARIOS,
) -> Matrix:
    """Run every scenario under every switch setting (default: the family's switches the template reads).

    :class:`TokenizerMismatch` when ``tokenizer`` is not the template's (:func:`unknown_special_tokens`).
    """
    renderer = ChatTemplateRenderer.from_files(template_path, tokenizer)
    unknown = unknown_special_tokens(renderer)
    if unknown:
        raise TokenizerMismatch(
            f"tokenizer {tokenizer!r} does not match template {Path(template_path).name} "
            f"(family {renderer.family.name}): its special tokens {', '.join(unknown)} are not single "
            "special tokens in that vocabulary; use the model's own tokenizer, or none (string level)"
        )
    if switches is None:
        switches = [s for s in renderer.family.switches if set(s) <= renderer.template.variables]
    rows = [
        _run(renderer, scenario, dict(switch), _switch_name(switch))
        for scenario in scenarios
        for switch in switches
    ]
    return Matrix(
        template=Path(template_path).name, family=renderer.family.name, tokenizer=tokenizer, rows=tuple(rows)
    )


def _error(exc: Exception) -> Cell:
    return Cell("error", detail=f"{type(exc).__name__}: {exc}")


def _run(renderer: ChatTemplateRenderer, scenario: Scenario, kwargs: dict[str, Any], switch: str) -> Row:
    family = renderer.family
    if (scenario.requires == "xml" and not family.xml_arguments) or (
        scenario.requires == "parallel" and not family.parallel_calls
    ):
        na = Cell("n/a", detail=f"{family.name} has no {scenario.requires} tool calls")
        return Row(scenario.name, switch, na, na, na)
    tools = list(TOOLS) if scenario.tools else None
    try:
        messages, completion, new_messages = _conversation(renderer, scenario, tools, kwargs)
        result = check_roundtrip(
            renderer,
            messages,
            completion,
            new_messages,
            tools,
            history_rewrite=_REWRITES.get(scenario.rewrite or ""),
            **kwargs,
        )
    except TokensError as exc:
        err = _error(exc)
        return Row(scenario.name, switch, err, err, _bridge(renderer, scenario, tools, kwargs))
    string = (
        Cell("ok") if result.string_ok else Cell("break", result.string_offset, str(result.string_context))
    )
    if result.token_ok is None:
        token = Cell("n/a", detail="no tokenizer")
    else:
        token = (
            Cell("ok") if result.token_ok else Cell("break", result.token_offset, str(result.token_context))
        )
    return Row(scenario.name, switch, string, token, _bridge(renderer, scenario, tools, kwargs))


def _bridge(
    renderer: ChatTemplateRenderer,
    scenario: Scenario,
    tools: list[Mapping[str, Any]] | None,
    kwargs: dict[str, Any],
) -> Cell:
    try:
        messages, completion, new_messages = _conversation(renderer, scenario, tools, kwargs)
        prompt = renderer.render_text(messages, tools, True, **kwargs)
        if renderer.tokenizer is None:
            text = renderer.bridge_text(prompt, completion, new_messages, tools, **kwargs)
            if text is None:
                return Cell("error", detail="bridge refused")
            offset = first_difference(prompt + renderer.family.carried(completion), text)
        else:
            p, c = renderer.encode(prompt), renderer.encode(completion)
            bridged = renderer.bridge_to_next_turn(p, c, new_messages, tools, **kwargs)
            if bridged is None or bridged.token_ids is None:
                return Cell("error", detail="bridge refused")
            offset = first_difference(tuple(p + renderer.carried_ids(c)), bridged.token_ids)
    except TokensError as exc:
        return _error(exc)
    return Cell("ok") if offset is None else Cell("break", offset)


def _conversation(
    renderer: ChatTemplateRenderer,
    scenario: Scenario,
    tools: list[Mapping[str, Any]] | None,
    kwargs: dict[str, Any],
) -> tuple[list[Message], str, list[Message]]:
    """Drive the history like a client: each model turn is written, parsed and put back as parsed."""
    messages: list[Message] = []
    last: ParsedResponse | None = None
    for kind, value in scenario.history:
        if kind == "model":
            prompt = renderer.render_text(messages, tools, True, **kwargs)
            last = renderer.parse_response(
                renderer.family.write(value, renderer.family.prompt_state(prompt)), prompt=prompt, tools=tools
            )
            messages.append(last.message)
        else:
            messages.extend(_client_messages(kind, value, last))
    prompt = renderer.render_text(messages, tools, True, **kwargs)
    completion = renderer.family.write(scenario.turn, renderer.family.prompt_state(prompt))
    parsed = renderer.parse_response(completion, prompt=prompt, tools=tools)
    kind, value = scenario.then
    return messages, completion, _client_messages(kind, value, parsed)


def _client_messages(kind: str, value: Any, last: ParsedResponse | None) -> list[Message]:
    if kind == "user":
        return [{"role": "user", "content": value}]
    calls = last.tool_calls if last is not None else ()
    if len(calls) != len(value):
        raise TokensError(f"{len(value)} tool results for {len(calls)} parsed tool calls")
    return [
        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result}
        for call, result in zip(calls, value, strict=True)
    ]


def _with_arguments(parsed: ParsedResponse, arguments: Sequence[Any]) -> Mapping[str, Any]:
    message = dict(parsed.message)
    message["tool_calls"] = [
        {**tc, "function": {**tc["function"], "arguments": args}}
        for tc, args in zip(message.get("tool_calls", []), arguments, strict=True)
    ]
    return message


def _reserialize(parsed: ParsedResponse) -> Mapping[str, Any]:
    # what vLLM's tool parsers hand the client: json.dumps of the parsed arguments (XML values already
    # coerced to JSON types); the next request's server json.loads it again for templates that read a
    # mapping, and passes the string through for templates that print a string
    out: list[Any] = []
    for tc, call in zip(parsed.message.get("tool_calls", []), parsed.tool_calls, strict=True):
        args = tc["function"]["arguments"]
        if isinstance(args, str):
            out.append(json.dumps(json.loads(args)))
        else:
            out.append(json.loads(json.dumps(dict(call.arguments))))
    return _with_arguments(parsed, out)


def _coerce(parsed: ParsedResponse) -> Mapping[str, Any]:
    return _with_arguments(parsed, [dict(call.arguments) for call in parsed.tool_calls])


_REWRITES = {"reserialize": _reserialize, "coerce": _coerce}


def demo_section() -> str:
    """The Qwen3.6 drift matrix under default flags and ``preserve_thinking=True``, with the bridge path."""
    matrix = run_matrix(template_path("qwen3.6"), "qwen3.6", switches=[{}, {"preserve_thinking": True}])
    lines = [
        matrix.format(),
        "",
        "re-render: the client puts the parsed assistant message back and the template renders it again;",
        "bridge: the next prompt is previous prompt ids + completion ids + only the new turn's tokens.",
    ]
    return "\n".join(lines)


def _resolve_template(value: str) -> Path:
    """A path to an existing file, else a bundled template's name; :class:`OSError` naming both kinds."""
    path = Path(value)
    if path.is_file():
        return path
    if value in TEMPLATE_NAMES:
        return template_path(value)
    bundled = ", ".join(TEMPLATE_NAMES)
    raise FileNotFoundError(
        f"no template file {value!r} and no bundled template of that name; bundled: {bundled}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``reasonstate prr --template NAME|FILE [--tokenizer NAME] [--json]``.

    Exit status: 0 when the bridge kept the prefix on every row (re-render breaks are findings, not
    failures), 1 when a bridge cell is not ok, 2 for unusable input (unknown template or tokenizer, a
    tokenizer that is not the template's, a bad flag).
    """
    parser = argparse.ArgumentParser(
        prog="reasonstate prr",
        description=__doc__.split("\n\n", 1)[0],
        epilog=f"bundled templates: {', '.join(TEMPLATE_NAMES)}\n\n{LEGEND}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--template", required=True, metavar="NAME|FILE", help="a bundled template's name or a .jinja file"
    )
    parser.add_argument(
        "--tokenizer", default=None, help="qwen3.6, qwen3.5 or deepseek-v4 (default: string level)"
    )
    parser.add_argument("--json", action="store_true", help="print the matrix as JSON")
    args = parser.parse_args(argv)
    try:
        matrix = run_matrix(_resolve_template(args.template), args.tokenizer)
    except (TokensError, OSError) as exc:
        print(f"reasonstate prr: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(matrix.to_json(), ensure_ascii=False, indent=2))
    else:
        print(matrix.format())
        print()
        print(LEGEND)
    return 0 if all(r.bridge.status in ("ok", "n/a") for r in matrix.rows) else 1
