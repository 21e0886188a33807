"""A byte-level tokenizer with GPT-OSS's special tokens, for token-level tests of the Harmony bridge.

No tokenizer package for GPT-OSS (``o200k_harmony``) installs here without a download, so the token-level
tests use this one: every special token of the Harmony format is one id (256 and up), every other byte is
its own id (0-255). It is a valid tokenizer for the bridge (special tokens never merge with their
neighbours, text round-trips byte for byte), and simple enough to be read as the oracle it stands in for.
Nothing here imports ``reasonstate``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SPECIALS = (
    "<|startoftext|>",
    "<|endoftext|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
)
_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")


class ToyHarmonyTokenizer:
    name = "toy-harmony"

    def __init__(self) -> None:
        self._ids = {text: 256 + i for i, text in enumerate(SPECIALS)}

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in _SPLIT.split(text):
            if piece in self._ids:
                out.append(self._ids[piece])
            else:
                out.extend(piece.encode("utf-8"))
        return out

    def token_bytes(self, token_id: int) -> bytes:
        if token_id < 256:
            return bytes([token_id])
        return SPECIALS[token_id - 256].encode("utf-8")

    def special_id(self, text: str) -> int | None:
        return self._ids.get(text)

    def special(self, text: str) -> int:
        return self._ids[text]

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8")
