"""DeepSeek V3.1 template with the DeepSeek V4 vocabulary: full-width-bar special tokens, JSON arguments.

The generation prompt is ``<｜Assistant｜><think>`` with ``thinking=True`` and ``<｜Assistant｜></think>``
otherwise (template L67-70). The model writes ``R</think>{content}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>
NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜><｜end▁of▁sentence｜>`` (L36-44). The
template concatenates ``arguments`` as a string, so the history keeps the model's argument text verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from reasonstate.tokens.errors import ToolCallParseError
from reasonstate.tokens.families.base import Family, ModelTurn, PromptState
from reasonstate.tokens.protocol import ToolCall

__all__ = ["DeepSeek"]

_CALL = re.compile(r"<｜tool▁call▁begin｜>(.*?)<｜tool▁sep｜>(.*?)(<｜tool▁call▁end｜>|$)", re.DOTALL)


class DeepSeek(Family):
    name = "deepseek"
    marker = "<｜tool▁calls▁begin｜>"
    turn_close = ("<｜end▁of▁sentence｜>",)
    special_tokens: ClassVar[Mapping[str, str]] = {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
    }
    switches = ({}, {"thinking": True})

    def split_calls(
        self, rest: str, tools: Sequence[Mapping[str, Any]] | None, *, finished: bool
    ) -> tuple[str, list[ToolCall]]:
        start = rest.find("<｜tool▁calls▁begin｜>")
        if start < 0:
            return rest, []
        section = rest[start:]
        calls: list[ToolCall] = []
        for m in _CALL.finditer(section):
            name = m.group(1).strip()
            complete = bool(m.group(3))
            if not name:
                raise ToolCallParseError("tool call without a function name", raw=m.group(0))
            calls.append(
                ToolCall(
                    id=self.call_id(name, len(calls)),
                    name=name,
                    arguments=self.parse_json_arguments(m.group(2), m.group(0), complete=complete),
                    raw=m.group(0),
                    raw_arguments=m.group(2),
                    complete=complete,
                )
            )
        if not calls:
            raise ToolCallParseError("unreadable tool-call section", raw=section)
        return rest[:start], calls

    def write(self, turn: ModelTurn, state: PromptState) -> str:
        out = ""
        if state == "open":
            out += turn.reasoning or ""
            if not turn.finished and not turn.content and not turn.calls:
                return out
            out += "</think>"
        out += turn.content
        if turn.calls:
            out += "<｜tool▁calls▁begin｜>"
            for call in turn.calls:
                out += (
                    f"<｜tool▁call▁begin｜>{call.name}<｜tool▁sep｜>{call.written_json()}<｜tool▁call▁end｜>"
                )
            out += "<｜tool▁calls▁end｜>"
        return out + ("<｜end▁of▁sentence｜>" if turn.finished else "")
