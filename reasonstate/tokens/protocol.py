"""The :class:`Renderer` protocol and the values it exchanges.

A renderer turns chat messages into the exact token ids a self-hosted model sees, reads the model's
completion back into a message, and extends a conversation at the token level without re-tokenizing it.

Invariants (stated as equations, tested as equations):
  * ``len(r.token_ids) == len(r.message_indices)`` for every :class:`RenderedTokens` ``r`` with tokens;
  * ``r.text == renderer.decode(r.token_ids)`` (for NFC text);
  * bridge contract, for ``B = renderer.bridge_to_next_turn(p, c, new_messages)``:
    ``B.token_ids[:len(p) + len(c)] == p + c`` unless ``c`` ends in a stop token the template never renders
    in history, which the bridge replaces by the close the template renders there (GPT-OSS: the sampled
    ``<|return|>`` is written ``<|end|>``); in every case ``B.token_ids[:len(p) + len(c) - 1] == (p +
    c)[:-1]``, all of ``p + c`` a prefix cache holds (the last sampled token never has KV);
  * parse is a partition, never a strip: ``reasoning + close_tag + after == completion`` whenever the
    completion contains the close tag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

__all__ = [
    "CARRIED",
    "STRUCTURE",
    "Message",
    "ParsedResponse",
    "RenderedTokens",
    "Renderer",
    "ToolCall",
]

Message = Mapping[str, Any]

STRUCTURE = -1
"""``message_indices`` value of template structure: role headers, turn closes, the generation prompt."""

CARRIED = -2
"""``message_indices`` value of a token a bridge carried over verbatim from the previous prompt/completion."""


class RenderedTokens:
    """A rendered prompt: its text and, with a tokenizer, its token ids and per-token message indices.

    ``message_indices[i]`` is the index (in the rendered message list) of the message whose own text
    (content, reasoning, tool calls) token ``i`` renders, :data:`STRUCTURE` for template structure (role
    headers, turn closes, preambles, the generation prompt), :data:`CARRIED` for tokens a bridge carried
    over verbatim from the previous turn. Token fields are ``None`` for a string-level renderer.

    ``token_ids`` is a tuple, or a :class:`~reasonstate.state.tokenids.TokenIds` (a bridge's: a view that
    shares its storage with the prompt it extends; it equals the tuple of the same ids). ``text`` and
    ``message_indices`` may be computed on first access (a bridge neither decodes the history it carries
    nor attributes its tokens unless asked). Immutable; equal when text, ids and indices are equal.
    """

    __slots__ = ("_indices", "_indices_of", "_text", "_text_of", "token_ids")

    def __init__(
        self,
        text: str | None = None,
        token_ids: Sequence[int] | None = None,
        message_indices: tuple[int, ...] | None = None,
        *,
        text_of: Callable[[], str] | None = None,
        indices_of: Callable[[], tuple[int, ...]] | None = None,
    ) -> None:
        if (text is None) == (text_of is None):
            raise TypeError("give exactly one of text and text_of")
        if message_indices is not None and indices_of is not None:
            raise TypeError("give at most one of message_indices and indices_of")
        object.__setattr__(self, "_text", text)
        object.__setattr__(self, "_text_of", text_of)
        object.__setattr__(self, "token_ids", token_ids)
        object.__setattr__(self, "_indices", message_indices)
        object.__setattr__(self, "_indices_of", indices_of)

    _text: str | None
    _text_of: Callable[[], str] | None
    _indices: tuple[int, ...] | None
    _indices_of: Callable[[], tuple[int, ...]] | None
    token_ids: Sequence[int] | None

    @property
    def text(self) -> str:
        text = self._text
        if text is None:
            assert self._text_of is not None
            text = self._text_of()
            object.__setattr__(self, "_text", text)
        return text

    @property
    def message_indices(self) -> tuple[int, ...] | None:
        indices = self._indices
        if indices is None and self._indices_of is not None:
            indices = self._indices_of()
            object.__setattr__(self, "_indices", indices)
            object.__setattr__(self, "_indices_of", None)
        return indices

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"RenderedTokens is immutable (cannot set {name})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RenderedTokens):
            return NotImplemented
        if (self.token_ids is None) != (other.token_ids is None) or self.token_ids != other.token_ids:
            return False
        return (self.message_indices, self.text) == (other.message_indices, other.text)

    def __hash__(self) -> int:
        ids = self.token_ids
        return hash((None if ids is None else tuple(ids), self.message_indices))

    def __repr__(self) -> str:
        return f"RenderedTokens(text={self.text!r}, token_ids={self.token_ids!r})"


@attrs.frozen(slots=True)
class ToolCall:
    """One tool call, kept twice: tolerant ``arguments`` to execute it, the exact ``raw`` text to continue.

    ``raw`` is the call block exactly as the model wrote it; ``raw_arguments`` the argument text as written
    (JSON families) and ``raw_parameters`` the ``(name, value)`` pairs as written (XML families), which the
    history message carries so that a re-render reproduces the model's bytes where the template allows it.
    ``complete`` is False for a call cut by ``max_tokens`` (its parsed arguments hold what could be read).
    """

    id: str
    name: str
    arguments: Mapping[str, Any]
    raw: str
    raw_arguments: str | None = None
    raw_parameters: tuple[tuple[str, str], ...] = ()
    complete: bool = True


@attrs.frozen(slots=True)
class ParsedResponse:
    """A completion read back: ``reasoning`` (None when there was no reasoning block), ``content``, calls.

    ``reasoning`` and ``content`` are slices of the completion (partition on the family's close tag), never
    stripped. ``finished`` is True when the completion ends with the family's end-of-turn token;
    ``reasoning_truncated`` when it stopped inside the reasoning block. ``message`` is the assistant
    message to put in history, in the shape the family's template reads.
    """

    completion: str
    reasoning: str | None
    content: str
    tool_calls: tuple[ToolCall, ...]
    finished: bool
    reasoning_truncated: bool
    message: Mapping[str, Any]


@runtime_checkable
class Renderer(Protocol):
    """Render messages to tokens, parse completions back, bridge to the next turn without re-tokenizing.

    What :class:`~reasonstate.adapters.tokens.TokenAdapter` needs of a renderer;
    :class:`~reasonstate.tokens.ChatTemplateRenderer` is the implementation over a jinja chat template.
    The contract that makes a session token-exact is the bridge's:
    ``B = bridge_to_next_turn(p, c, new)`` gives ``B.token_ids[:len(p) + len(c) - 1] == (p + c)[:-1]`` always
    and ``B.token_ids[:len(p) + len(c)] == p + c`` unless ``c`` ends in a stop token the template writes
    differently in history (GPT-OSS ``<|return|>``).
    """

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text becomes its special id."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The exact text of ``ids``; raises when they do not decode to valid UTF-8."""
        ...

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> RenderedTokens:
        """The full prompt for ``messages`` and ``tools``, as the chat template renders it."""
        ...

    def parse_response(self, completion: str | Sequence[int]) -> ParsedResponse:
        """A completion read back into reasoning, content and tool calls (slices, never stripped)."""
        ...

    def bridge_to_next_turn(
        self,
        prev_prompt_ids: Sequence[int],
        prev_completion_ids: Sequence[int],
        new_messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> RenderedTokens | None:
        """The next prompt: ``prev_prompt_ids + prev_completion_ids`` (see the class contract) followed by
        only the tokens of ``new_messages`` and the generation prompt; None when it cannot bridge them (an
        assistant message among ``new_messages``: sampled tokens are never re-tokenized from text), and the
        caller then renders the whole history."""
        ...
