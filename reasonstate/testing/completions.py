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
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol

import attrs

from reasonstate.testing._server import EmulatorServer, JSONResponse, RecordedRequest, Route

__all__ = ["BLOCK_SIZE", "ScriptedCompletion", "Served", "TextCodec", "VLLMCompletionsEmulator"]

BLOCK_SIZE = 16
"""vLLM's default KV-cache block size; only full blocks are ever cached or reported as hits."""


class TextCodec(Protocol):
    """Anything with ``encode`` and ``decode``: a tokenizer wrapper, a ``reasonstate.tokens.Renderer``."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@attrs.frozen(slots=True)
class ScriptedCompletion:
    """What the emulated model samples next: ``token_ids``, or ``text`` encoded with the emulator's codec.

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


class VLLMCompletionsEmulator:
    """``POST /v1/completions`` on an :class:`EmulatorServer`; use it as a context manager.

    ``completions`` are served in order (a ``str`` is text, a sequence of ints is token ids), or produced
    by ``responder(prompt_ids)``. ``eos_token_ids`` are the ids that end a sequence (kept in
    ``token_ids``, left out of ``text``).
    """

    def __init__(
        self,
        completions: Iterable[ScriptedCompletion | str | Sequence[int]] = (),
        *,
        codec: TextCodec | None = None,
        responder: Responder | None = None,
        eos_token_ids: Iterable[int] = (),
        model: str = "emulated-model",
        block_size: int = BLOCK_SIZE,
    ) -> None:
        self._queue = [_scripted(c) for c in completions]
        self._responder = responder
        self.codec = codec
        self.eos_token_ids = frozenset(eos_token_ids)
        self.model = model
        self.block_size = block_size
        self._cache: set[int] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self.served: list[Served] = []
        self.server = EmulatorServer(
            [Route("POST", "/v1/completions", self._handle)], name="vllm-completions"
        )

    # -- lifecycle --------------------------------------------------------------------------------------
    def __enter__(self) -> VLLMCompletionsEmulator:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (an OpenAI client wants ``base_url + "/v1"``)."""
        return self.server.base_url

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
            if self.codec is None:
                return _bad_request(
                    "this emulator accepts token-id prompts only (no tokenizer to encode text)"
                )
            prompt = self.codec.encode(prompt)
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

    def _text(self, scripted: ScriptedCompletion, visible: Sequence[int], *, truncated: bool) -> str:
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
        if self.codec is None:
            raise LookupError("a text completion needs a codec (tokenizer or renderer) to encode it")
        return self.codec.encode(scripted.text or "")


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
