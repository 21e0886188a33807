"""Scripted model behaviour, vendor-neutral: what the emulated model "does" on each successful call.

An emulator turns a :class:`ModelAction` into its vendor's wire format (Anthropic thinking blocks with a
signature, OpenAI reasoning items with ``encrypted_content``, DeepSeek ``reasoning_content``, ...). A
:class:`Script` hands out actions: either from a fixed list, in order, or from a callable that looks at the
parsed request. A request answered with an error (a validation 400 or an injected fault) consumes nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs

__all__ = ["ModelAction", "Script", "ScriptExhausted", "ToolCallSpec", "count_tokens"]


@attrs.frozen(slots=True)
class ToolCallSpec:
    """One tool call the scripted model makes. ``arguments`` is the JSON object of the call.

    ``raw_arguments``, when set, is the exact argument string to emit on string-typed wire formats
    (OpenAI/DeepSeek), e.g. with unusual spacing or key order, so tests can check byte-exact replay.
    """

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    raw_arguments: str | None = None


@attrs.frozen(slots=True)
class ModelAction:
    """One model call's output.

    ``reasoning`` is the visible thinking text (None: no reasoning block). ``redacted`` adds an opaque
    redacted-thinking block after it (Anthropic). ``stop="max_tokens"`` truncates the output (Anthropic
    ``stop_reason=max_tokens``, OpenAI ``status=incomplete``, chat ``finish_reason=length``).
    """

    reasoning: str | None = None
    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    redacted: bool = False
    stop: Literal["end", "max_tokens"] = "end"

    @classmethod
    def answer(cls, text: str, reasoning: str | None = None) -> ModelAction:
        """A final answer (no tool calls), after ``reasoning`` when given."""
        return cls(reasoning=reasoning, text=text)

    @classmethod
    def call(cls, *calls: ToolCallSpec, reasoning: str | None = None, text: str | None = None) -> ModelAction:
        """One step that makes ``calls`` (parallel when several), after ``reasoning`` and ``text``."""
        return cls(reasoning=reasoning, text=text, tool_calls=tuple(calls))


class ScriptExhausted(RuntimeError):
    """The script has no action left for a request."""


Responder = Callable[[Any], ModelAction]


class Script:
    """Hands out :class:`ModelAction` values: a fixed sequence (in order) or a responder callable.

    ``take(request_json)`` returns the action for one successful call; ``peek`` looks without consuming,
    so an emulator can validate a request before it commits to answering it.
    """

    def __init__(self, actions: Iterable[ModelAction] | Responder = ()) -> None:
        self._lock = threading.Lock()
        self._responder: Responder | None = None
        self._queue: list[ModelAction] = []
        if callable(actions):
            self._responder = actions
        else:
            self._queue = list(actions)
        self.taken = 0

    def extend(self, actions: Iterable[ModelAction]) -> None:
        """Queue more actions after the ones left (served before the responder, if any)."""
        with self._lock:
            self._queue.extend(actions)

    def take(self, request: Any) -> ModelAction:
        """The action for one successful call: the next queued one, else the responder's answer to the
        parsed ``request``; :class:`ScriptExhausted` when there is neither."""
        with self._lock:
            if self._queue:
                self.taken += 1
                return self._queue.pop(0)
            if self._responder is not None:
                self.taken += 1
                return self._responder(request)
        raise ScriptExhausted("the emulator's script has no action left for this request")

    def __len__(self) -> int:
        return len(self._queue)


def count_tokens(text: str) -> int:
    """The emulators' tokenizer: one token per 4 UTF-8 bytes, rounded up (0 for the empty string).

    Deliberately simple and documented, so figures in tests are easy to reason about; the SDK never uses
    it to predict cache hits (it learns token counts from the usage each response reports).
    """
    return math.ceil(len(text.encode("utf-8")) / 4)
