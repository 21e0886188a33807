"""GPT-OSS (Harmony): channels instead of think tags, ``<|return|>`` / ``<|call|>`` end a sampled turn.

After the generation prompt ``<|start|>assistant`` the model writes
``<|channel|>analysis<|message|>R<|end|>`` then either
``<|start|>assistant<|channel|>final<|message|>C<|return|>`` or
``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{json}<|call|>`` (template
L289-300, L311). The template re-serializes arguments with ``tojson`` (L299), so history carries the parsed
object, and renders a past final answer with ``<|end|>`` where the model wrote ``<|return|>`` (L314;
Harmony's format: ``<|return|>`` is a decode-time stop token only), which a bridge writes too
(:attr:`history_close`). A tool result is named after the most recent call (L281-L284, L321-L325), never
after its own ``name`` or ``tool_call_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from reasonstate.tokens.errors import ToolCallParseError
from reasonstate.tokens.families.base import Family, ModelTurn, PromptState
from reasonstate.tokens.protocol import ParsedResponse, ToolCall

__all__ = ["Harmony"]

_ANALYSIS = "<|channel|>analysis<|message|>"


class Harmony(Family):
    name = "gpt-oss"
    marker = "<|channel|>"
    think_open = _ANALYSIS
    think_close = "<|end|>"
    turn_close = ("<|return|>", "<|call|>")
    rendered_close = ("<|end|>", "<|call|>", "<|return|>")
    truncation_close = "<|end|>"
    history_close: ClassVar[Mapping[str, str]] = {"<|return|>": "<|end|>"}
    parallel_calls = False
    reasoning_key = "thinking"

    def parse(
        self, completion: str, state: PromptState, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ParsedResponse:
        body, finished = self.split_finished(completion)
        reasoning: str | None = None
        truncated = False
        rest = body
        if body.startswith(_ANALYSIS):
            reasoning, sep, rest = body[len(_ANALYSIS) :].partition(self.think_close)
            truncated = not sep
        content = ""
        calls: list[ToolCall] = []
        for segment in [s for s in rest.split("<|start|>assistant") if s]:
            header, sep, text = segment.partition("<|message|>")
            if not sep:
                if finished:
                    raise ToolCallParseError("harmony message without <|message|>", raw=segment)
                continue
            text = text.removesuffix("<|end|>")
            if header.startswith(" to=functions."):
                name = header[len(" to=functions.") :].split("<|channel|>", 1)[0].strip()
                if not name:
                    raise ToolCallParseError("tool call without a function name", raw=segment)
                calls.append(
                    ToolCall(
                        id=self.call_id(name, len(calls)),
                        name=name,
                        arguments=self.parse_json_arguments(text, segment, complete=finished),
                        raw="<|start|>assistant" + segment,
                        raw_arguments=text,
                        complete=finished,
                    )
                )
            else:
                content += text
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

    def history_arguments(self, call: ToolCall) -> Any:
        return dict(call.arguments)

    def bridge_context(
        self, new_messages: Sequence[Mapping[str, Any]], sentinel: str, sampled: Sequence[ToolCall] = ()
    ) -> list[dict[str, Any]]:
        context = super().bridge_context(new_messages, sentinel, sampled)
        # the template renders one call per message (the first) and names every following result after
        # it: the sampled call (the model stops on <|call|>), else the result's own name
        for call in context[-1].get("tool_calls", []):
            if sampled:
                call["function"]["name"] = sampled[-1].name
            call["function"]["arguments"] = {"x": sentinel}
        return context

    def write(self, turn: ModelTurn, state: PromptState) -> str:
        out = ""
        if turn.reasoning is not None:
            out += _ANALYSIS + turn.reasoning
            if not turn.finished and not turn.content and not turn.calls:
                return out
            out += "<|end|>"
        if turn.calls:
            call = turn.calls[0]
            out += f"<|start|>assistant to=functions.{call.name}<|channel|>commentary json<|message|>"
            out += call.written_json()
            return out + ("<|call|>" if turn.finished else "")
        out += "<|start|>assistant<|channel|>final<|message|>" + turn.content
        return out + ("<|return|>" if turn.finished else "")
