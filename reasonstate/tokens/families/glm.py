"""GLM-4.6: ``<|assistant|>`` turns closed by the next role header, ``<think>`` reasoning, XML tool calls.

The generation prompt is ``<|assistant|>`` (template L101-102); the model writes ``\\n<think>R</think>``,
``\\n{content}``, then ``\\n<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>``
per call (L68-79), and stops on ``<|observation|>`` or ``<|user|>``: the stop token is the next header.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from reasonstate.tokens.errors import ToolCallParseError
from reasonstate.tokens.families.base import Family, ModelTurn, PromptState
from reasonstate.tokens.protocol import ToolCall

__all__ = ["GLM4"]

_NAME = re.compile(r"<tool_call>([^\n<]+)")
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


class GLM4(Family):
    name = "glm-4.6"
    marker = "<arg_key>"
    turn_close = ("<|observation|>", "<|user|>")
    rendered_close = ("<|observation|>", "<|user|>", "<|system|>", "<|assistant|>")
    close_is_next_header = True
    switches = ({}, {"enable_thinking": False}, {"clear_thinking": False})
    xml_arguments = True

    def split_calls(
        self, rest: str, tools: Sequence[Mapping[str, Any]] | None, *, finished: bool
    ) -> tuple[str, list[ToolCall]]:
        start = rest.find("<tool_call>")
        if start < 0:
            return rest, []
        calls: list[ToolCall] = []
        pos = start
        while pos >= 0:
            end = rest.find("</tool_call>", pos)
            block = rest[pos:] if end < 0 else rest[pos : end + len("</tool_call>")]
            header = _NAME.search(block)
            if header is None or not header.group(1).strip():
                raise ToolCallParseError("<tool_call> without a function name", raw=block)
            name = header.group(1).strip()
            params = tuple((m.group(1), m.group(2)) for m in _PAIR.finditer(block))
            if end >= 0 and block.count("<arg_key>") != len(params):
                raise ToolCallParseError("an <arg_key> without its <arg_value>", raw=block)
            calls.append(
                ToolCall(
                    id=self.call_id(name, len(calls)),
                    name=name,
                    arguments={k: self.coerce(k, v, tools, name) for k, v in params},
                    raw=block,
                    raw_parameters=params,
                    complete=end >= 0,
                )
            )
            pos = -1 if end < 0 else rest.find("<tool_call>", end)
        return rest[:start], calls

    def write(self, turn: ModelTurn, state: PromptState) -> str:
        out = ""
        if state == "none" and turn.reasoning is not None:
            out += "\n<think>" + turn.reasoning
            if not turn.finished and not turn.content and not turn.calls:
                return out
            out += "</think>"
        if turn.content:
            out += "\n" + turn.content
        for call in turn.calls:
            pairs = "".join(
                f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in call.written_params()
            )
            out += f"\n<tool_call>{call.name}\n{pairs}</tool_call>"
        if not turn.finished:
            return out
        return out + ("<|observation|>" if turn.calls else "<|user|>")
