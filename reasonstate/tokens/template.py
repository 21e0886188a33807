"""Render a jinja chat template exactly as ``transformers.apply_chat_template`` does, without transformers.

Same environment as transformers' ``_compile_jinja_template``: ``ImmutableSandboxedEnvironment`` with
``trim_blocks=True``, ``lstrip_blocks=True`` and the ``loopcontrols`` extension; a ``tojson`` filter with
transformers' signature ``(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`` (non-ASCII
kept); globals ``raise_exception`` and ``strftime_now``; and the call
``template.render(messages=..., tools=..., add_generation_prompt=..., **special_tokens, **kwargs)``.

Invariant: ``ChatTemplate(src).render(m, ...) == tokenizer.apply_chat_template(m, ..., tokenize=False)`` for a
transformers tokenizer whose chat template is ``src``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from reasonstate._extras import needs
from reasonstate.tokens.errors import TemplateRenderError

__all__ = ["ChatTemplate"]


class ChatTemplate:
    """A compiled chat template. ``variables`` are the names the template reads from its context."""

    def __init__(
        self,
        source: str,
        *,
        name: str = "<template>",
        special_tokens: Mapping[str, str] | None = None,
        now: Callable[[], datetime] = datetime.now,
    ) -> None:
        with needs("tokens"):
            import jinja2
            import jinja2.ext
            import jinja2.meta
            from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(
            x: Any,
            ensure_ascii: bool = False,
            indent: int | None = None,
            separators: tuple[str, str] | None = None,
            sort_keys: bool = False,
        ) -> str:
            return json.dumps(
                x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
            )

        def strftime_now(format: str) -> str:
            return now().strftime(format)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        self.source = source
        self.name = name
        self.special_tokens: dict[str, str] = dict(special_tokens or {})
        try:
            self._template: Any = env.from_string(source)
            self.variables: frozenset[str] = frozenset(
                jinja2.meta.find_undeclared_variables(env.parse(source))
            )
        except jinja2.TemplateError as exc:
            raise TemplateRenderError(f"{name}: cannot compile: {exc}") from exc
        self._jinja_error: type[Exception] = jinja2.TemplateError

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ChatTemplate:
        """The template in a UTF-8 text file; a file that is not UTF-8 text (a binary file) is
        :class:`TemplateRenderError` naming it."""
        p = Path(path)
        try:
            source = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise TemplateRenderError(
                f"{p} is not a chat template: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                f"{exc.start})"
            ) from None
        return cls(source, name=p.name, **kwargs)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text; :class:`TemplateRenderError` when the template raises."""
        context = {**self.special_tokens, **template_kwargs}
        try:
            text = self._template.render(
                messages=[dict(m) for m in messages],
                tools=None if tools is None else [dict(t) for t in tools],
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **context,
            )
        except self._jinja_error as exc:
            raise TemplateRenderError(f"{self.name}: {exc}") from exc
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            # e.g. str + dict inside the template: the messages do not have the shape it reads
            raise TemplateRenderError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        return str(text)
