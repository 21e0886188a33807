"""Errors of the token toolkit, all under :class:`reasonstate.errors.ReasonStateError`.

Bad input never yields a silently "ok" roundtrip: a template that raises, token ids that are not valid
UTF-8, an unknown tokenizer, an unreadable tool call all surface as one of these types.
"""

from __future__ import annotations

from reasonstate.errors import ReasonStateError

__all__ = [
    "InvalidUTF8",
    "TemplateRenderError",
    "TokenizerMismatch",
    "TokenizerNotFound",
    "TokenizerRequired",
    "TokensError",
    "ToolCallParseError",
    "UnknownTemplateFamily",
    "UnknownTokenId",
]


class TokensError(ReasonStateError):
    """Base of every error raised by :mod:`reasonstate.tokens`."""


class TokenizerNotFound(TokensError):
    """No tokenizer of that name ships in an installed package (names: ``qwen3.6``, ``deepseek-v4``, ...)."""


class TokenizerMismatch(TokensError):
    """The tokenizer is not the template's: special tokens the template writes are not single special ids
    in its vocabulary (e.g. a GLM template with the Qwen tokenizer)."""


class TokenizerRequired(TokensError):
    """A token-level operation (encode, decode, bridge) on a renderer built without a tokenizer."""


class TemplateRenderError(TokensError):
    """The chat template raised (``raise_exception`` or a jinja error) or could not be compiled."""


class UnknownTokenId(TokensError):
    """A token id the tokenizer's vocabulary does not have (a server or a record that is not this model's)."""


class InvalidUTF8(TokensError):
    """Token ids whose bytes are not valid UTF-8, e.g. a completion cut inside a multi-byte character.

    ``offset`` is the byte offset of the first undecodable byte in the concatenated token bytes.
    """

    def __init__(self, message: str, *, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class ToolCallParseError(TokensError):
    """A tool-call block the family parser cannot read; ``raw`` is the block exactly as the model wrote it."""

    def __init__(self, message: str, *, raw: str) -> None:
        super().__init__(message)
        self.raw = raw


class UnknownTemplateFamily(TokensError):
    """A template whose reasoning and tool-call syntax matches none of the known families."""
