"""Kimi-K2-Thinking: ``<|im_assistant|>`` turns closed by ``<|im_end|>``, JSON-argument tool calls.

The model writes ``<think>R</think>{content}<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
<|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|><|im_end|>`` (template
L28-35, L80). The argument string is kept verbatim: the template prints a string as it is (L32).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from reasonstate.tokens.errors import ToolCallParseError
from reasonstate.tokens.families.base import Family, ModelTurn, PromptState
from reasonstate.tokens.protocol import ToolCall

__all__ = ["KimiK2"]

_CALL = re.compile(
    r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>(.*?)(<\|tool_call_end\|>|$)", re.DOTALL
)


class KimiK2(Family):
    name = "kimi-k2"
    marker = "<|tool_call_argument_begin|>"
    turn_close = ("<|im_end|>",)

    def split_calls(
        self, rest: str, tools: Sequence[Mapping[str, Any]] | None, *, finished: bool
    ) -> tuple[str, list[ToolCall]]:
        start = rest.find("<|tool_calls_section_begin|>")
        if start < 0:
            return rest, []
        section = rest[start:]
        calls: list[ToolCall] = []
        for m in _CALL.finditer(section):
            call_id = m.group(1).strip()
            # ids are "functions.NAME:INDEX" (the model writes them; tool results quote them back)
            name = call_id.split(".", 1)[-1].rsplit(":", 1)[0]
            complete = bool(m.group(3))
            if not name:
                raise ToolCallParseError("tool call without a function id", raw=m.group(0))
            calls.append(
                ToolCall(
                    id=call_id,
                    name=name,
                    arguments=self.parse_json_arguments(m.group(2), m.group(0), complete=complete),
                    raw=m.group(0),
                    raw_arguments=m.group(2),
                    complete=complete,
                )
            )
        if not calls and section.count("<|tool_call_begin|>"):
            raise ToolCallParseError("unreadable tool-call section", raw=section)
        return rest[:start], calls

    def call_id(self, name: str, index: int) -> str:
        return f"functions.{name}:{index}"

    def write(self, turn: ModelTurn, state: PromptState) -> str:
        out = ""
        if turn.reasoning is not None:
            out += "<think>" + turn.reasoning
            if not turn.finished and not turn.content and not turn.calls:
                return out
            out += "</think>"
        out += turn.content
        if turn.calls:
            out += "<|tool_calls_section_begin|>"
            for i, call in enumerate(turn.calls):
                out += (
                    f"<|tool_call_begin|>{self.call_id(call.name, i)}<|tool_call_argument_begin|>"
                    f"{call.written_json()}<|tool_call_end|>"
                )
            out += "<|tool_calls_section_end|>"
        return out + ("<|im_end|>" if turn.finished else "")
