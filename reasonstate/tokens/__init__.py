"""Token-level toolkit for self-hosted open models: render, parse, bridge, and check prefix stability.

Import explicitly (``import reasonstate.tokens``); ``import reasonstate`` does not load it. jinja2 and the
tokenizer packages (extra ``reasonstate[tokens]``) are imported only when a template or tokenizer is loaded.

The two equations this package exists for (Parse-Render Roundtrip, PRR)::

    previous_text == next_prompt_text[:len(previous_text)]
    previous_ids  == next_prompt_ids[:len(previous_ids)]

:func:`check_roundtrip` measures them for the usual re-render path, :func:`run_matrix` over the standard
agent scenarios, and ``Renderer.bridge_to_next_turn`` guarantees the second by construction — up to the
last sampled token, which it replaces where the template never renders it in history (GPT-OSS writes
``<|end|>`` for the sampled ``<|return|>``): ``previous_ids[:-1] == next_prompt_ids[:len(previous_ids) - 1]``
always, ``previous_ids == next_prompt_ids[:len(previous_ids)]`` for every other family.
"""

from __future__ import annotations

from reasonstate.tokens.errors import (
    InvalidUTF8,
    TemplateRenderError,
    TokenizerMismatch,
    TokenizerNotFound,
    TokenizerRequired,
    TokensError,
    ToolCallParseError,
    UnknownTemplateFamily,
)
from reasonstate.tokens.matrix import (
    LEGEND,
    SCENARIOS,
    Cell,
    Matrix,
    Row,
    Scenario,
    demo_section,
    main,
    run_matrix,
    unknown_special_tokens,
)
from reasonstate.tokens.protocol import (
    CARRIED,
    STRUCTURE,
    Message,
    ParsedResponse,
    RenderedTokens,
    Renderer,
    ToolCall,
)
from reasonstate.tokens.renderer import ChatTemplateRenderer
from reasonstate.tokens.roundtrip import RoundtripResult, check_roundtrip
from reasonstate.tokens.templates import TEMPLATE_NAMES, template_path
from reasonstate.tokens.vocab import TOKENIZER_NAMES, Tokenizer, load_tokenizer

__all__ = [
    "CARRIED",
    "LEGEND",
    "SCENARIOS",
    "STRUCTURE",
    "TEMPLATE_NAMES",
    "TOKENIZER_NAMES",
    "Cell",
    "ChatTemplateRenderer",
    "InvalidUTF8",
    "Matrix",
    "Message",
    "ParsedResponse",
    "RenderedTokens",
    "Renderer",
    "RoundtripResult",
    "Row",
    "Scenario",
    "TemplateRenderError",
    "Tokenizer",
    "TokenizerMismatch",
    "TokenizerNotFound",
    "TokenizerRequired",
    "TokensError",
    "ToolCall",
    "ToolCallParseError",
    "UnknownTemplateFamily",
    "check_roundtrip",
    "demo_section",
    "load_tokenizer",
    "main",
    "run_matrix",
    "template_path",
    "unknown_special_tokens",
]
