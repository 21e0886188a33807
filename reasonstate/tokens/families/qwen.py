"""Qwen3.5 / Qwen3.6: ChatML turns, ``<think>`` reasoning, XML tool calls.

Model output after the generation prompt ``<|im_start|>assistant\\n<think>\\n`` (template L147-153)::

    {reasoning}\\n</think>\\n\\n{content}\\n\\n<tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n</parameter>\\n
    </function>\\n</tool_call><|im_end|>

Parameters are framed by exactly one newline on each side (template L121-124); values are read between
those newlines, verbatim, so a string value re-renders byte-identical (``args_value | string``, L122).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from reasonstate.tokens.errors import ToolCallParseError
from reasonstate.tokens.families.base import Family, ModelTurn, PromptState
from reasonstate.tokens.protocol import ToolCall

__all__ = ["Qwen3"]

_FUNCTION = re.compile(r"<function=([^>\n]+)>")
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n(.*?)\n</parameter>", re.DOTALL)


class Qwen3(Family):
    name = "qwen3.6"
    marker = "<function=example_function_name>"
    turn_close = ("<|im_end|>",)
    switches = ({}, {"preserve_thinking": True}, {"enable_thinking": False})
    xml_arguments = True

    def split_calls(
        self, rest: str, tools: Sequence[Mapping[str, Any]] | None, *, finished: bool
    ) -> tuple[str, list[ToolCall]]:
        start = rest.find("<tool_call>")
        if start < 0:
            return rest, []
        content = rest[:start]
        calls: list[ToolCall] = []
        pos = start
        while pos >= 0:
            end = rest.find("</tool_call>", pos)
            block = rest[pos:] if end < 0 else rest[pos : end + len("</tool_call>")]
            function = _FUNCTION.search(block)
            if function is None:
                raise ToolCallParseError("<tool_call> without a <function=NAME> header", raw=block)
            name = function.group(1)
            params = tuple((m.group(1), m.group(2)) for m in _PARAM.finditer(block))
            complete = end >= 0 and "</function>" in block
            if complete and block.count("<parameter=") != len(params):
                raise ToolCallParseError("a <parameter=...> block is not closed", raw=block)
            calls.append(
                ToolCall(
                    id=self.call_id(name, len(calls)),
                    name=name,
                    arguments={k: self.coerce(k, v, tools, name) for k, v in params},
                    raw=block,
                    raw_parameters=params,
                    complete=complete,
                )
            )
            pos = -1 if end < 0 else rest.find("<tool_call>", end)
        return content, calls

    def write(self, turn: ModelTurn, state: PromptState) -> str:
        out = ""
        if state == "open":
            out += turn.reasoning or ""
            if not turn.finished and not turn.content and not turn.calls:
                return out
            out += "\n</think>\n\n"
        out += turn.content
        for i, call in enumerate(turn.calls):
            lead = ("\n\n" if turn.content.strip() else "") if i == 0 else "\n"
            params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in call.written_params())
            out += f"{lead}<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"
        return out + ("<|im_end|>" if turn.finished else "")
