"""Parse-Render Roundtrip (PRR): does the next prompt start with exactly what the model already saw and said?

For a prompt ``s_p`` rendered from ``messages`` with the generation prompt, a completion ``s_c`` and the next
prompt ``s_2`` rendered from ``messages + [parse(s_c).message] + new_messages``::

    string level:  s_2[:len(s_p + s_c)] == s_p + s_c
    token level:   encode(s_2)[:len(t_p + t_c)] == t_p + t_c,   t_p = encode(s_p), t_c = the completion ids

Both must hold for a prefix cache (vLLM automatic prefix caching, SGLang RadixAttention) to reuse the
previous turn's KV cache up to the model's last sampled token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from reasonstate.tokens.errors import TokensError
from reasonstate.tokens.protocol import Message, ParsedResponse
from reasonstate.tokens.renderer import ChatTemplateRenderer, common_prefix_len

__all__ = ["CONTEXT", "RoundtripResult", "check_roundtrip", "first_difference"]

CONTEXT = 16
"""Characters (or tokens) of context shown on each side of a break."""

HistoryRewrite = Callable[[ParsedResponse], Mapping[str, Any]]


def first_difference(previous: Sequence[Any], following: Sequence[Any]) -> int | None:
    """``None`` when ``previous`` is a strict prefix of ``following``; else the first offset where it is not.

    ``following[:len(previous)] == previous and len(following) > len(previous)``  ⇔  result is None.
    """
    n = common_prefix_len(previous, following)
    if n == len(previous) and len(following) > len(previous):
        return None
    return n


@attrs.frozen(slots=True)
class RoundtripResult:
    """The outcome of one PRR check, with the texts and ids compared.

    ``string_offset`` / ``token_offset`` is the first character / token of the previous prompt+completion
    that the next prompt does not reproduce (None when it is a strict prefix). ``string_context`` is
    ``(previous, next)`` around that offset, ``CONTEXT`` characters on each side; ``token_context`` the
    same in decoded tokens. Token fields are None on a string-level renderer.
    """

    previous_text: str
    next_text: str
    parsed: ParsedResponse
    string_offset: int | None
    string_context: tuple[str, str] | None
    previous_ids: tuple[int, ...] | None = None
    next_ids: tuple[int, ...] | None = None
    token_offset: int | None = None
    token_context: tuple[str, str] | None = None

    @property
    def string_ok(self) -> bool:
        """The previous prompt + completion text is a prefix of the next prompt text."""
        return self.string_offset is None

    @property
    def token_ok(self) -> bool | None:
        """The same for token ids (None on a string-level renderer)."""
        if self.previous_ids is None:
            return None
        return self.token_offset is None

    def describe(self) -> str:
        """One line per level: ``ok``, or where the texts / ids first differ and what is there."""
        parts = [_describe("string", self.string_offset, self.string_context)]
        if self.previous_ids is not None:
            parts.append(_describe("token", self.token_offset, self.token_context))
        return "; ".join(parts)


def _describe(level: str, offset: int | None, context: tuple[str, str] | None) -> str:
    if offset is None:
        return f"{level} ok"
    assert context is not None
    return f"{level} break@{offset}: was {context[0]!r}, re-rendered {context[1]!r}"


def check_roundtrip(
    renderer: ChatTemplateRenderer,
    messages: Sequence[Message],
    completion: str | Sequence[int],
    new_messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    history_rewrite: HistoryRewrite | None = None,
    **template_kwargs: Any,
) -> RoundtripResult:
    """Render, append the completion (ending where the model stopped), parse, re-render, compare.

    ``completion`` as token ids is decoded strictly (:class:`InvalidUTF8` when cut inside a character)
    and those ids, not a re-encoding, are the model's tokens. ``history_rewrite`` replaces the parsed
    assistant message, e.g. to model a server whose parser re-serializes arguments. Template errors and
    unreadable tool calls propagate as their typed errors.
    """
    prompt = renderer.render_text(messages, tools, True, **template_kwargs)
    text = completion if isinstance(completion, str) else renderer.decode(completion)
    parsed = renderer.parse_response(text, prompt=prompt, tools=tools, **template_kwargs)
    assistant = parsed.message if history_rewrite is None else history_rewrite(parsed)
    following = renderer.render_text([*messages, assistant, *new_messages], tools, True, **template_kwargs)
    previous = prompt + text
    s_off = first_difference(previous, following)
    result = RoundtripResult(
        previous_text=previous,
        next_text=following,
        parsed=parsed,
        string_offset=s_off,
        string_context=None if s_off is None else (_around(previous, s_off), _around(following, s_off)),
    )
    if renderer.tokenizer is None:
        return result
    completion_ids = renderer.encode(text) if isinstance(completion, str) else list(completion)
    prev_ids = tuple(renderer.encode(prompt) + completion_ids)
    next_ids = tuple(renderer.encode(following))
    t_off = first_difference(prev_ids, next_ids)
    token_context = None
    if t_off is not None:
        token_context = (_tokens_around(renderer, prev_ids, t_off), _tokens_around(renderer, next_ids, t_off))
    return attrs.evolve(
        result, previous_ids=prev_ids, next_ids=next_ids, token_offset=t_off, token_context=token_context
    )


def _around(text: str, offset: int) -> str:
    return text[max(0, offset - CONTEXT) : offset + CONTEXT]


def _tokens_around(renderer: ChatTemplateRenderer, ids: Sequence[int], offset: int) -> str:
    window = ids[max(0, offset - 4) : offset + 4]
    try:
        return "|".join(renderer.decode([i]) for i in window)
    except TokensError:
        return " ".join(str(i) for i in window)
