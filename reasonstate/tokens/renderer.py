"""``ChatTemplateRenderer``: a :class:`~reasonstate.tokens.protocol.Renderer` over a jinja chat template.

Rendering is ``transformers.apply_chat_template`` (see :mod:`reasonstate.tokens.template`) followed by the
tokenizer; parsing and bridging use the per-family syntax (:mod:`reasonstate.tokens.families`).

The bridge never re-tokenizes what exists. For ``B = bridge_to_next_turn(p, c, new)``::

    B.token_ids == p + carried(c) + close + encode(appendix)

where ``carried(c)`` is ``c`` verbatim, except that a final stop token the template never renders in history
is replaced by the close it renders there (GPT-OSS: the sampled ``<|return|>`` becomes ``<|end|>``;
``Family.history_close``); ``close`` is the family's end-of-turn token when ``c`` was truncated (no
end-of-turn token at its end) and empty otherwise; and ``appendix`` is the text the template renders after
an assistant turn for ``new`` followed by the generation prompt — cut from the rendering of a small context
conversation whose last assistant turn ends in a sentinel. Hence the bridge contract::

    B.token_ids[:len(p) + len(c)] == p + carried(c)      (== p + c unless c ends in such a stop token)
    B.token_ids[:len(p) + len(c) - 1] == (p + c)[:-1]    (always)

The second is all a prefix cache needs: a finished request leaves KV for ``(p + c)[:-1]`` only (the last
sampled token is never fed to the model; ``reasonstate.cache.rules.shared_tokens``), so writing ``<|end|>``
for ``<|return|>`` costs no cached block. The splice point is always a special token (the turn close), which
BPE never merges, so the appendix tokenizes the same alone as in place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from reasonstate.cache.rules import common_prefix_len
from reasonstate.state.tokenids import TokenIds
from reasonstate.tokens.errors import TemplateRenderError, TokenizerRequired, TokensError
from reasonstate.tokens.families import FAMILIES, Family, detect_family
from reasonstate.tokens.protocol import CARRIED, STRUCTURE, Message, ParsedResponse, RenderedTokens, ToolCall
from reasonstate.tokens.template import ChatTemplate
from reasonstate.tokens.vocab import Tokenizer, decode_lossy, decode_strict, load_tokenizer

__all__ = ["ChatTemplateRenderer", "common_prefix_len"]

_SENTINEL = "\u27e6reasonstate-bridge\u27e7"
_PROBE: tuple[Message, ...] = ({"role": "user", "content": "x"},)


_MARK = "\u2063"  # INVISIBLE SEPARATOR: not whitespace, so trim() and strip() in templates keep it


def _marked(message: Message, *, prefix: bool) -> dict[str, Any]:
    """``message`` with :data:`_MARK` added at the start (or end) of each non-empty string it renders."""

    def mark(value: Any) -> Any:
        if isinstance(value, str):
            return value if not value else (_MARK + value if prefix else value + _MARK)
        if isinstance(value, Mapping):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    out = dict(message)
    for key in ("content", "reasoning_content", "thinking", "tool_calls"):
        if key in out:
            out[key] = mark(out[key])
    return out


@attrs.frozen(slots=True)
class _Appendix:
    close: str  # the turn close (or, for GLM, the next header) the appendix starts with
    text: str  # starts with ``close``
    start: int  # where ``text`` starts in ``full``
    full: str  # the rendering of ``context + new_messages`` it was cut from
    context: tuple[Message, ...]  # the bridge context before the new messages

    def spans(
        self,
        renderer: ChatTemplateRenderer,
        new_messages: Sequence[Message],
        render: Callable[[list[Message]], str],
    ) -> list[tuple[int, int, int]]:
        """``(start, end, index in new_messages)``: where each new message's own strings lie in ``text``
        (two renders per new message: only when the message indices are asked for)."""
        whole = [*self.context, *new_messages]
        n = len(self.context)
        regions = renderer._regions(render, whole, range(n, len(whole)), self.full)
        return [(a - self.start, b - self.start, k - n) for a, b, k in regions if a >= self.start]


class ChatTemplateRenderer:
    """Render with a chat template; token level when a tokenizer is given, string level otherwise.

    ``template_kwargs`` given here are defaults for every render (e.g. ``preserve_thinking=True``); those
    given to a call override them. On a string-level renderer the token fields of :class:`RenderedTokens`
    are ``None`` and token operations raise :class:`TokenizerRequired`.
    """

    def __init__(
        self,
        template: ChatTemplate,
        *,
        family: Family,
        tokenizer: Tokenizer | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.template = template
        self.family = family
        self.tokenizer = tokenizer
        self.template_kwargs: dict[str, Any] = dict(template_kwargs or {})
        for key, value in family.special_tokens.items():
            template.special_tokens.setdefault(key, value)

    @classmethod
    def from_files(
        cls,
        template: str | Path,
        tokenizer: str | Tokenizer | None = None,
        *,
        family: str | Family | None = None,
        **template_kwargs: Any,
    ) -> ChatTemplateRenderer:
        """Load ``template`` (a ``.jinja`` file) and the tokenizer named ``tokenizer`` (``"qwen3.6"``,
        ``"deepseek-v4"``; :class:`TokenizerNotFound` for another name; ``None`` for string level)."""
        compiled = ChatTemplate.from_file(template)
        if isinstance(family, str):
            fam: Family = FAMILIES[family]()
        elif family is None:
            fam = detect_family(compiled.source)
        else:
            fam = family
        tok = load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
        return cls(compiled, family=fam, tokenizer=tok, template_kwargs=template_kwargs)

    # -- tokens ------------------------------------------------------------------------------------
    def _tok(self) -> Tokenizer:
        if self.tokenizer is None:
            raise TokenizerRequired(f"{self.template.name}: this renderer was built without a tokenizer")
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text becomes its special id."""
        return self._tok().encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Exact text of ``ids``; :class:`InvalidUTF8` when they end or break inside a character."""
        return decode_strict(self._tok(), ids)

    def _special_id(self, text: str) -> int:
        token_id = self._tok().special_id(text)
        if token_id is None:
            raise TokenizerRequired(f"tokenizer {self._tok().name} has no special token {text!r}")
        return token_id

    # -- rendering ---------------------------------------------------------------------------------
    def render_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """``apply_chat_template(messages, tools, add_generation_prompt, tokenize=False, **kwargs)``."""
        return self.template.render(
            messages, tools, add_generation_prompt, **{**self.template_kwargs, **template_kwargs}
        )

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> RenderedTokens:
        """Text, token ids and per-token message indices of the full prompt.

        A token belongs to message ``k`` when it lies in the text the template renders from ``k``'s own
        strings (content, reasoning, tool calls); role headers, turn closes, tool preambles and the
        generation prompt are :data:`STRUCTURE`. Costs two extra renders per message.
        """
        text = self.render_text(messages, tools, add_generation_prompt, **template_kwargs)
        if self.tokenizer is None:
            return RenderedTokens(text=text)
        ids = self.encode(text)
        regions = self._regions(
            lambda ms: self.render_text(ms, tools, add_generation_prompt, **template_kwargs),
            messages,
            range(len(messages)),
            text,
        )
        return RenderedTokens(
            text=text, token_ids=tuple(ids), message_indices=self._attribute(text, ids, regions)
        )

    @staticmethod
    def _regions(
        render: Callable[[list[Message]], str], messages: Sequence[Message], which: Iterable[int], full: str
    ) -> list[tuple[int, int, int]]:
        """``(start, end, k)``: where message ``k``'s own strings (content, reasoning, calls) lie in ``full``.

        Found by rendering twice with every string of message ``k`` marked, at its start then at its end:
        ``start`` is where the first rendering leaves ``full``, ``end`` where the second rejoins it.
        """
        out: list[tuple[int, int, int]] = []
        for k in which:
            before = [*messages[:k], _marked(messages[k], prefix=True), *messages[k + 1 :]]
            after = [*messages[:k], _marked(messages[k], prefix=False), *messages[k + 1 :]]
            try:
                start = common_prefix_len(full, render(before))
                end = len(full) - common_prefix_len(full[::-1], render(after)[::-1])
            except TemplateRenderError:
                continue  # the template refuses the marked message: its tokens stay structure
            if start < end:
                out.append((start, end, k))
        return out

    def _attribute(
        self, text: str, ids: Sequence[int], regions: Sequence[tuple[int, int, int]]
    ) -> tuple[int, ...]:
        """Each token gets the message whose region holds its first byte, else :data:`STRUCTURE`."""
        tok = self._tok()
        owner_at: list[tuple[int, int, int]] = []  # (start byte, end byte, k), ascending
        for start, end, k in sorted(regions):
            owner_at.append((len(text[:start].encode("utf-8")), len(text[:end].encode("utf-8")), k))
        out: list[int] = []
        pos = j = 0
        for token_id in ids:
            while j < len(owner_at) and pos >= owner_at[j][1]:
                j += 1
            inside = j < len(owner_at) and owner_at[j][0] <= pos < owner_at[j][1]
            out.append(owner_at[j][2] if inside else STRUCTURE)
            pos += len(tok.token_bytes(token_id))
        return tuple(out)

    @functools.lru_cache(maxsize=32)  # noqa: B019 - a renderer lives as long as its template
    def _generation_prompt(self, kwargs_key: tuple[tuple[str, Any], ...]) -> str:
        kwargs = dict(kwargs_key)
        with_prompt = self.render_text(_PROBE, None, True, **kwargs)
        without = self.render_text(_PROBE, None, False, **kwargs)
        return with_prompt[common_prefix_len(with_prompt, without) :]

    def generation_prompt(self, **template_kwargs: Any) -> str:
        """What ``add_generation_prompt=True`` appends after a user turn under these kwargs."""
        merged = {**self.template_kwargs, **template_kwargs}
        return self._generation_prompt(tuple(sorted(merged.items(), key=lambda kv: kv[0])))

    # -- parsing -----------------------------------------------------------------------------------
    def parse_response(
        self,
        completion: str | Sequence[int],
        *,
        prompt: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> ParsedResponse:
        """Read a completion (text, or token ids decoded strictly) back into reasoning, content and calls.

        Whether the prompt left a reasoning block open is read from ``prompt`` when given, else from the
        generation prompt under the template kwargs. :class:`ToolCallParseError` for an unreadable call.
        """
        text = completion if isinstance(completion, str) else self.decode(completion)
        head = prompt if prompt is not None else self.generation_prompt(**template_kwargs)
        return self.family.parse(text, self.family.prompt_state(head), tools)

    # -- bridging ----------------------------------------------------------------------------------
    def _sampled_calls(
        self,
        prompt_tail: str,
        completion: str,
        new_messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> tuple[ToolCall, ...]:
        """The calls of the previous completion, when tool results follow it (they name their function
        after the call); none when the completion cannot be read (a bridge never fails on a bad call)."""
        if not new_messages or new_messages[0].get("role") != "tool":
            return ()
        try:
            return self.family.parse(completion, self.family.prompt_state(prompt_tail), tools).tool_calls
        except TokensError:
            return ()

    def carried_ids(self, completion_ids: Sequence[int]) -> list[int]:
        """The completion ids as a bridge carries them: ``Family.carried`` at the token level (a final stop
        token the template never renders in history replaced by the close it renders there)."""
        c = list(completion_ids)
        if c:
            tok = self._tok()
            for stop, close in self.family.history_close.items():
                if c[-1] == tok.special_id(stop):
                    c[-1] = self._special_id(close)
                    break
        return c

    def _appendix(
        self,
        new_messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        kwargs: Mapping[str, Any],
        sampled: Sequence[ToolCall] = (),
    ) -> _Appendix:
        context = tuple(self.family.bridge_context(new_messages, _SENTINEL, sampled))
        full = self.render_text([*context, *new_messages], tools, True, **kwargs)
        mark = full.find(_SENTINEL)
        if mark < 0:
            raise TemplateRenderError(f"{self.template.name}: the bridge context lost its sentinel")
        after = mark + len(_SENTINEL)
        found = [(full.find(c, after), c) for c in self.family.closes_in_render()]
        found = [(i, c) for i, c in found if i >= 0]
        if not found:
            raise TemplateRenderError(
                f"{self.template.name}: no end of the assistant turn after the sentinel"
            )
        start, close = min(found)
        return _Appendix(close=close, text=full[start:], start=start, full=full, context=context)

    def bridge_text(
        self,
        prev_prompt: str,
        prev_completion: str,
        new_messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> str | None:
        """The string-level bridge: ``result[:len(prev_prompt) + len(prev_completion)] == prev_prompt +
        family.carried(prev_completion)`` (``prev_completion`` verbatim but for GPT-OSS's final
        ``<|return|>``, written ``<|end|>``); ``None`` when ``new_messages`` holds an assistant message."""
        if any(m.get("role") == "assistant" for m in new_messages):
            return None
        sampled = self._sampled_calls(prev_prompt, prev_completion, new_messages, tools)
        appendix = self._appendix(new_messages, tools, template_kwargs, sampled)
        closes = self.family.turn_close
        finished = any(prev_completion.endswith(c) for c in closes)
        prev_completion = self.family.carried(prev_completion)
        if self.family.close_is_next_header:
            keep = not (finished and prev_completion.endswith(appendix.close))
            return (
                prev_prompt
                + prev_completion
                + (appendix.text if keep else appendix.text[len(appendix.close) :])
            )
        synthesized = "" if finished else (self.family.close_for_truncation() or "")
        return prev_prompt + prev_completion + synthesized + appendix.text[len(appendix.close) :]

    def bridge_to_next_turn(
        self,
        prev_prompt_ids: Sequence[int],
        prev_completion_ids: Sequence[int],
        new_messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> RenderedTokens | None:
        """Extend the previous prompt and completion with ``new_messages`` and the generation prompt.

        ``B.token_ids[:len(p) + len(c)] == p + carried_ids(c)``, which is ``p + c`` except that a final
        stop token the template never renders in history is replaced by the close it renders there
        (GPT-OSS: ``<|return|>`` → ``<|end|>``); so always ``B.token_ids[:len(p) + len(c) - 1] == (p +
        c)[:-1]``. The carried tokens have index :data:`CARRIED`, a replaced or synthesized turn close
        :data:`STRUCTURE`, the appended tokens their index in ``new_messages`` (the generation prompt
        :data:`STRUCTURE`); ``B.text`` is a lossy decode (U+FFFD where the carried completion was cut inside
        a character). ``None`` when ``new_messages`` holds an assistant message: assistant tokens are
        sampled, never re-tokenized from text.
        """
        if any(m.get("role") == "assistant" for m in new_messages):
            return None
        p = TokenIds.of(prev_prompt_ids)  # a view of the previous prompt's buffer: not copied
        c = list(prev_completion_ids)
        tok = self._tok()
        sampled: tuple[ToolCall, ...] = ()
        if new_messages and new_messages[0].get("role") == "tool":  # decode only what names the results
            tail = decode_lossy(tok, p[-16:])
            sampled = self._sampled_calls(tail, decode_lossy(tok, c), new_messages, tools)
        appendix = self._appendix(new_messages, tools, template_kwargs, sampled)
        finished = bool(c) and c[-1] in {tok.special_id(t) for t in self.family.turn_close}
        carried = self.carried_ids(c)
        added = list(carried)  # everything after p: the carried completion, a close, the appendix's tokens
        replaced = carried[-1:] != c[-1:]
        rest = appendix.text
        head = 0
        if self.family.close_is_next_header:
            if finished and c[-1] == self._special_id(appendix.close):
                rest, head = rest[len(appendix.close) :], len(appendix.close)
        else:
            rest, head = rest[len(appendix.close) :], len(appendix.close)
            if not finished:
                synthesized = self.family.close_for_truncation()
                if synthesized is not None:
                    added.append(self._special_id(synthesized))
        new_ids = self.encode(rest)
        structure = len(added) - len(carried)  # a synthesized close
        added.extend(new_ids)
        # the work is in proportion to what the turn adds: the previous prompt is shared, not copied; the
        # text (a lossy decode: the carried completion may end inside a character) and the message indices
        # (two renders per new message) are computed on first access
        token_ids = p.extended(added)
        n_carried = len(p) + len(carried)
        kwargs = template_kwargs

        def indices() -> tuple[int, ...]:
            out = [CARRIED] * n_carried
            if replaced:
                out[-1] = STRUCTURE
            out.extend([STRUCTURE] * structure)
            spans = appendix.spans(self, new_messages, lambda ms: self.render_text(ms, tools, True, **kwargs))
            spans = [(a - head, b - head, k) for a, b, k in spans if a >= head]
            out.extend(self._attribute(rest, new_ids, spans))
            return tuple(out)

        return RenderedTokens(
            token_ids=token_ids,
            indices_of=indices,
            text_of=lambda: decode_lossy(tok, token_ids),
        )
