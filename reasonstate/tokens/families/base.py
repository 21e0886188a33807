"""What the toolkit must know about one model family's output syntax, and nothing about I/O.

A family knows: its reasoning tags, the tokens that end an assistant turn, how the model writes tool calls
(so it can read them back, tolerant for execution and exact for continuation), the shape of the assistant
message its template reads, and a bridge context (a two-message conversation ending in an assistant turn
marked with a sentinel) from which the renderer cuts the text a new turn appends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import attrs

from reasonstate.tokens.errors import ToolCallParseError
from reasonstate.tokens.protocol import Message, ParsedResponse, ToolCall

__all__ = ["CallSpec", "Family", "ModelTurn", "PromptState", "tolerant_json"]

PromptState = Literal["open", "closed", "none"]
"""How the generation prompt leaves reasoning: ``open`` (the prompt opened the think block, the model
continues inside it), ``closed`` (the prompt opened and closed it: no reasoning this turn), ``none`` (the
model opens the block itself, if at all)."""


@attrs.frozen(slots=True)
class CallSpec:
    """A tool call as a model would write it: ``arguments`` and, optionally, the exact text written.

    ``json_text`` is the argument object as written by JSON-syntax families (default: ``json.dumps``
    with ``ensure_ascii=False``); ``xml_values`` the parameter values as written by XML-syntax families
    (default: strings as they are, other values JSON-encoded).
    """

    name: str
    arguments: Mapping[str, Any]
    json_text: str | None = None
    xml_values: Mapping[str, str] | None = None

    def written_json(self) -> str:
        return (
            self.json_text
            if self.json_text is not None
            else json.dumps(dict(self.arguments), ensure_ascii=False)
        )

    def written_params(self) -> list[tuple[str, str]]:
        if self.xml_values is not None:
            return list(self.xml_values.items())
        return [
            (k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
            for k, v in self.arguments.items()
        ]


@attrs.frozen(slots=True)
class ModelTurn:
    """What a model generates in one turn, before it is written in a family's syntax.

    ``finished=False`` means stopped by ``max_tokens``: no end-of-turn token, and when ``content`` and
    ``calls`` are empty the reasoning block is left open.
    """

    reasoning: str | None = None
    content: str = ""
    calls: tuple[CallSpec, ...] = ()
    finished: bool = True


def tolerant_json(text: str) -> Any:
    """``json.loads(text)``, or, for JSON cut short, the value read after closing open strings and brackets.

    Raises ``ValueError`` when even the repaired text is not JSON.
    """
    try:
        return json.loads(text)
    except ValueError:
        pass
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    repaired = text.rstrip().rstrip(",") + ('"' if in_string else "") + "".join(reversed(stack))
    return json.loads(repaired)


class Family:
    """Base of the per-family parsers. Subclasses set the class attributes and the syntax methods."""

    name: ClassVar[str]
    marker: ClassVar[str]
    """A string found in the family's template source and no other (used by :func:`detect_family`)."""
    think_open: ClassVar[str] = "<think>"
    think_close: ClassVar[str] = "</think>"
    turn_close: ClassVar[tuple[str, ...]]
    """Model stop tokens that end an assistant turn (the first is the one a truncated turn is closed with)."""
    rendered_close: ClassVar[tuple[str, ...] | None] = None
    """Where the template ends a past assistant turn (default: :attr:`turn_close`)."""
    truncation_close: ClassVar[str | None] = None
    """What a bridge appends after a truncated completion (default: the first of :attr:`turn_close`)."""
    history_close: ClassVar[Mapping[str, str]] = {}
    """Sampled stop tokens the template never renders in history, each with the close it renders in its
    place (GPT-OSS: ``<|return|>`` → ``<|end|>``). A bridge writes the replacement where the model sampled
    the stop token (:meth:`carried`)."""
    close_is_next_header: ClassVar[bool] = False
    """True when the stop token is the next message's role header (GLM): nothing needs to be synthesized."""
    special_tokens: ClassVar[Mapping[str, str]] = {}
    switches: ClassVar[tuple[Mapping[str, Any], ...]] = ({},)
    """Template kwargs worth testing for prefix stability (each matrix row is run under each)."""
    xml_arguments: ClassVar[bool] = False
    parallel_calls: ClassVar[bool] = True
    reasoning_key: ClassVar[str] = "reasoning_content"
    """The assistant-message field the family's template reads past reasoning from."""

    def closes_in_render(self) -> tuple[str, ...]:
        return self.rendered_close if self.rendered_close is not None else self.turn_close

    def close_for_truncation(self) -> str | None:
        if self.close_is_next_header:
            return None
        return self.truncation_close if self.truncation_close is not None else self.turn_close[0]

    def carried(self, completion: str) -> str:
        """``completion`` as a bridge carries it into the next prompt: verbatim, except that a final stop
        token the template never renders in history is replaced by the close it renders there
        (:attr:`history_close`). ``carried(c)[:len(c) - len(stop)] == c[:len(c) - len(stop)]``."""
        for stop, close in self.history_close.items():
            if completion.endswith(stop):
                return completion[: len(completion) - len(stop)] + close
        return completion

    # -- reading a completion -----------------------------------------------------------------------------
    def prompt_state(self, prompt: str) -> PromptState:
        tail = prompt.rstrip()
        if tail.endswith(self.think_open):
            return "open"
        if tail.endswith(self.think_close):
            return "closed"
        return "none"

    def split_finished(self, completion: str) -> tuple[str, bool]:
        for close in self.turn_close:
            if completion.endswith(close):
                return completion[: -len(close)], True
        return completion, False

    def parse(
        self, completion: str, state: PromptState, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ParsedResponse:
        body, finished = self.split_finished(completion)
        reasoning: str | None = None
        truncated = False
        rest = body
        if state == "open":
            reasoning, sep, rest = body.partition(self.think_close)
            truncated = not sep
        elif state == "none" and body.lstrip().startswith(self.think_open):
            start = body.index(self.think_open) + len(self.think_open)
            reasoning, sep, rest = body[start:].partition(self.think_close)
            truncated = not sep
        content, calls = self.split_calls(rest, tools, finished=finished)
        message = self.history_message(reasoning, content, calls)
        return ParsedResponse(
            completion=completion,
            reasoning=reasoning,
            content=content,
            tool_calls=tuple(calls),
            finished=finished,
            reasoning_truncated=truncated,
            message=message,
        )

    def split_calls(
        self, rest: str, tools: Sequence[Mapping[str, Any]] | None, *, finished: bool
    ) -> tuple[str, list[ToolCall]]:
        raise NotImplementedError

    def history_message(
        self, reasoning: str | None, content: str, calls: Sequence[ToolCall]
    ) -> dict[str, Any]:
        """The assistant message the family's template reads back; raw argument text where it can."""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message[self.reasoning_key] = reasoning
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": self.history_arguments(c)},
                }
                for c in calls
            ]
        return message

    def history_arguments(self, call: ToolCall) -> Any:
        if self.xml_arguments:
            return dict(call.raw_parameters)
        return call.raw_arguments

    # -- writing a completion (what the model generates, in the family's syntax) -----------------------
    def write(self, turn: ModelTurn, state: PromptState) -> str:
        raise NotImplementedError

    def call_id(self, name: str, index: int) -> str:
        return f"call_{index}"

    # -- bridging -------------------------------------------------------------------------------------------
    def bridge_context(
        self, new_messages: Sequence[Message], sentinel: str, sampled: Sequence[ToolCall] = ()
    ) -> list[dict[str, Any]]:
        """``[user, assistant]`` whose assistant turn ends right after ``sentinel``, shaped so that
        ``new_messages`` may follow it: tool results follow calls with their ids and names.

        ``sampled`` are the calls parsed from the completion the results answer. A result's call is named
        after the sampled call with its ``tool_call_id``, else after the result's ``name``, else ``tool``.
        """
        user: dict[str, Any] = {"role": "user", "content": "q"}
        results = _leading_tool_results(new_messages)
        if not results:
            return [user, {"role": "assistant", "content": sentinel}]
        names: dict[Any, str] = {c.id: c.name for c in sampled}
        calls = []
        for i, r in enumerate(results):
            name = names.get(r.get("tool_call_id")) or str(r.get("name") or "tool")
            calls.append(
                ToolCall(
                    id=str(r.get("tool_call_id") or self.call_id(name, i)),
                    name=name,
                    arguments={},
                    raw="",
                    raw_arguments=sentinel if i == len(results) - 1 else "{}",
                    raw_parameters=(("x", sentinel),) if i == len(results) - 1 else (),
                )
            )
        return [user, self.history_message(None, "", calls)]

    # -- shared helpers -------------------------------------------------------------------------------------
    @staticmethod
    def coerce(name: str, value: str, tools: Sequence[Mapping[str, Any]] | None, tool: str) -> Any:
        """An XML parameter value as the tool expects it: strings stay, other types are read as JSON."""
        declared = _declared_type(tools, tool, name)
        if declared == "string":
            return value
        try:
            return json.loads(value)
        except ValueError:
            return value

    @staticmethod
    def parse_json_arguments(raw: str, raw_block: str, *, complete: bool) -> dict[str, Any]:
        try:
            value = tolerant_json(raw) if raw.strip() else {}
        except ValueError as exc:
            if not complete:
                return {}
            raise ToolCallParseError(f"tool-call arguments are not JSON: {exc}", raw=raw_block) from exc
        if not isinstance(value, dict):
            raise ToolCallParseError("tool-call arguments are not a JSON object", raw=raw_block)
        return value


def _leading_tool_results(messages: Sequence[Message]) -> list[Message]:
    out: list[Message] = []
    for m in messages:
        if m.get("role") != "tool":
            break
        out.append(m)
    return out


def _declared_type(tools: Sequence[Mapping[str, Any]] | None, tool: str, name: str) -> str | None:
    for t in tools or ():
        fn = t.get("function", t)
        if fn.get("name") == tool:
            prop = (fn.get("parameters") or {}).get("properties", {}).get(name)
            if isinstance(prop, Mapping):
                declared = prop.get("type")
                return declared if isinstance(declared, str) else None
    return None
