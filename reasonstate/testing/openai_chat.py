"""A strict emulator of Chat Completions (``POST /v1/chat/completions``, also ``POST /chat/completions``
for DeepSeek's base URL) in five dialects, written from docs/protocols.md §2 and §3.

Dialects (what differs is where reasoning lives, which rules are enforced, and how the cache reports):

* **openai** — reasoning stays hidden on output (§2.1); ``reasoning``/``reasoning_content`` on input are
  ignored; cache in ``prompt_tokens_details.cached_tokens`` with OpenAI's 1024 + 128k rule (§1.5).
* **deepseek** — ``reasoning_content`` on output (§3.2), required back on every assistant message with
  ``tool_calls`` while thinking is on (§3.3); cache in ``prompt_cache_hit_tokens`` +
  ``prompt_cache_miss_tokens`` (sum = ``prompt_tokens``) and ``prompt_tokens_details.cached_tokens`` = hit,
  from persisted prefix units (§3.4).
* **vllm** — ``reasoning`` and ``reasoning_content`` on the message, ``reasoning`` in stream deltas; the
  input side reads only ``reasoning`` (§2.2); cache = full 16-token blocks of the longest shared prefix.
* **sglang** — ``reasoning_content`` on output, kept as sent on input (§2.2, unconfirmed); cache as vllm.
* **openrouter** (§2.3) — models are ``upstream/name`` ids (``anthropic/claude-sonnet-4.5``,
  ``openai/gpt-5``, ``google/gemini-2.5-pro``, ``moonshotai/kimi-k2.5``; any id is served unless ``models=``
  names some; a bearer key is checked). ``reasoning`` (text) and ``reasoning_details`` on the message, the
  details in the upstream's family: anthropic → one ``reasoning.text`` with a ``signature``
  (``HMAC-SHA256(secret, model + "\0" + text)``, base64) and ``format: "anthropic-claude-v1"``; openai →
  a ``reasoning.summary`` and a ``reasoning.encrypted`` (``format: "openai-responses-v1"``); google → a
  ``reasoning.text`` and a ``reasoning.encrypted`` (``google-gemini-v1``); any other → a
  ``reasoning.text`` (``format: "unknown"``). Element keys in the documented order ``type, text|summary|
  data, signature, id, format, index``. Usage adds ``cost`` (1e-6 per prompt token, 4e-6 per completion
  token, cached tokens at a tenth) and ``prompt_tokens_details.cache_write_tokens`` (0); cache as openai.
  Errors in OpenRouter's envelope ``{"error": {"code", "message", "metadata"}}`` with the HTTP status in
  ``code``; an upstream's refusal carries ``metadata: {"raw": <the upstream's body as text>,
  "provider_name"}``. Rules forwarded from the upstream (Anthropic, §4.3): while a tool chain is open
  (the request ends with tool results), the assistant message that made the calls must carry the
  ``reasoning.text`` detail issued with them → 400, raw = Anthropic's "messages.N.content.0.type: Expected
  `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant`
  message must start with a thinking block ..."; any ``anthropic-claude-v1`` signature that does not verify
  → 400, raw = "messages.N.content.0: Invalid `signature` in `thinking` block". Emulator strictness: a
  detail whose ``format`` is not the requested model's family → 400 ``emulator_foreign_reasoning``.
  Streamed: ``reasoning`` text deltas and ``reasoning_details`` pieces per ``index`` (the first piece with
  ``type``, ``text``/``summary``/``data``, ``id``, ``format``, ``index``; then text pieces; the
  ``signature`` alone on a last piece with ``text: ""``).

**Model aliases** (see :mod:`reasonstate.testing.openai`): in the openai dialect a request for an alias
in :data:`MODEL_ALIASES` (from https://platform.openai.com/docs/models/gpt-5; ``gpt-5`` →
``gpt-5-2025-08-07``, ``gpt-5-mini`` → ``gpt-5-mini-2025-08-07``, …) is answered with the dated id in
``model`` (the completion and every streamed chunk); a dated id is echoed unchanged. The
other dialects have no default table. ``aliases=`` adds entries in any dialect. "The model" below (cache
namespaces, DeepSeek's persisted units) is always the resolved id, so an alias and its dated id share them.

**Keys and models** (checked first, in this order, docs/protocols.md §0): openai and deepseek accept only
the emulator's keys (``test-key``, ``emulator-key``, or ``api_key=``): another key is 401 —
``invalid_api_key`` "Incorrect API key provided: ..." (openai), ``authentication_error`` "Authentication
Fails, Your api key: ****abcd is invalid" (deepseek). A model outside the dialect's table is 404
``model_not_found`` (openai, :data:`~reasonstate.testing.openai.KNOWN_MODELS`) or 400 "Model Not Exist"
(deepseek, :data:`DEEPSEEK_MODELS`). vllm and sglang, like those servers started without ``--api-key``,
check no key and serve any model name, unless ``api_key=`` / ``models=`` are given (then vLLM's 404
``NotFoundError`` "The model `X` does not exist."). The openai dialect also refuses a ``reasoning_effort``
outside :data:`~reasonstate.testing.openai.REASONING_EFFORTS` (400 ``invalid_value``) and a function tool
whose ``parameters`` is not an object JSON Schema (400 ``invalid_function_parameters``, ``param:
"tools[i].function.parameters"``). The deepseek dialect refuses a ``reasoning_effort`` outside
:data:`DEEPSEEK_EFFORTS` in its JSON deserializer's words (400 "Failed to deserialize the JSON body into the
target type: reasoning_effort: unknown variant `X`, expected one of ... at line L column C") and a function
whose ``parameters`` is not an object schema at the top (400 "Invalid schema for function 'NAME': schema must
be a JSON Schema of 'type: "object"', got 'type: null'."), both in DeepSeek's envelope.

Rules enforced (a rejected request consumes no script action and does not feed the cache):

* **Tool pairing** (openai, deepseek; self-hosted servers only render a chat template and do not check):
  a ``tool`` message must answer a ``tool_call_id`` of the assistant message that opened the current run of
  tool messages. None open → ``Invalid parameter: messages with role 'tool' must be a response to a
  preceeding message with 'tool_calls'.`` (DeepSeek: ``Messages with role 'tool' must be a response to a
  preceding message with 'tool_calls'``); an id that is not in that message →
  ``Invalid parameter: 'tool_call_id' of 'call_…' not found in 'tool_calls' of previous message.``; a
  non-tool message (or the end of the list) while calls are unanswered → ``An assistant message with
  'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following
  tool_call_ids did not have response messages: call_…`` (ids comma-separated). ``param`` is
  ``messages.[i].role`` as OpenAI reports it (DeepSeek: null).
* **DeepSeek thinking** (§3.1, §3.3): thinking is on unless ``thinking: {"type": "disabled"}``. Then an
  assistant message with ``tool_calls`` whose ``reasoning_content`` key is absent (or null) → 400
  ``The reasoning_content in the thinking mode must be passed back to the API.`` (wording of the V4 API,
  e.g. JohnnyZ93/oai-compatible-copilot#215; the earlier V3.2 text was "Missing `reasoning_content`
  field in the assistant message at message index N."). An empty string satisfies the check (§7: the
  real behaviour is unconfirmed).
* **DeepSeek empty assistant message** (§3.3): an assistant message whose ``content`` is ``""``, null or
  absent and that has no ``tool_calls`` → 400 ``Invalid assistant message: content or tool_calls must be
  set`` (carlrobertoh/ProxyAI#830, #834).
* **Byte-exact replay** (emulator strictness, not a documented vendor rule; ``verify_replay=True``, the
  default): the emulator remembers the reasoning it issued with each tool call id; an assistant message
  that replays one of those ids with a *different* ``reasoning_content`` → 400, ``code:
  "emulator_reasoning_mismatch"``. The real API cannot tell (the text is not signed); the check exists so
  that tests catch an SDK that edits continuation state. Messages with ids this emulator never issued
  are not checked.
* **Legacy deepseek-reasoner** (``legacy_reject_reasoning=True``, §3.3): any input message carrying
  ``reasoning_content`` → 400 ``The reasoning_content is an intermediate result for display purposes only
  and will not be included in the context for inference. Please remove the reasoning_content from your
  message to reduce network traffic.`` (Euyug/Mirai-Gpt-Plugin#4).
* **Legacy deepseek-reasoner, successive roles** (``legacy_reject_successive=True``, §3.3): two ``user`` or
  two ``assistant`` messages in a row → 400 ``deepseek-reasoner does not support successive user or
  assistant messages (messages[N] and messages[N+1] in your input). You should interleave the
  user/assistant messages in the message sequence.`` (deepseek-ai/DeepSeek-R1#21, xerrors/Yuxi#126: that
  envelope). Off by default: whether DeepSeek V4 refuses them is not known (§7).

**Prompt rendering (item-aligned).** The prompt is a list of segments: ``canonical_json({"tools": tools})``
when tools are given, then one per message: ``canonical_json`` of the message without null-valued keys and
with the reasoning fields the server would not render removed — openai: ``reasoning`` and
``reasoning_content``; deepseek: ``reasoning``, and ``reasoning_content`` except on assistant messages with
``tool_calls`` (§3.3: otherwise it is ignored); vllm: ``reasoning_content`` (the input side reads only
``reasoning``, vllm-project/vllm#38488); sglang: nothing. Each segment is tokenized on its own (chat
templates put special tokens at every message boundary): ``prompt_tokens = Σ count_tokens(segment)``.
Caches share whole segments only: two prompts share the tokens of their longest common run of leading
segments. (A client can therefore know every cache figure exactly from the usage it was shown, whenever
the shared run ends where an earlier request or output ended; see below.)

**Output as generated.** ``G`` is the completion message without null values and with only the reasoning
field the dialect renders on input (deepseek, sglang: ``reasoning_content``; vllm: ``reasoning``; openai:
none, its reasoning stays hidden). ``completion_tokens = count_tokens(canonical_json(G))`` plus, for openai,
the hidden reasoning tokens: the tokens the model generated are the tokens its message occupies when a
client replays it verbatim.

**Cache figures.** ``shared`` = the largest number of tokens shared (as above) with an earlier successful
request of the same model (openai: and the same ``prompt_cache_key``). openai:
``openai_cached_tokens(prompt_tokens, shared)``. vllm/sglang: ``16 * (m // 16)`` with
``m = min(shared, prompt_tokens - 1)`` (the last prompt token is always computed; generated tokens are not
cached). deepseek (§3.4, at message granularity): a *unit* is a segment prefix ``S[:j]``; after each
successful request the server persists the whole input ``S``, the input plus the output as generated
(``S + [canonical_json(G)]``, of ``prompt_tokens + completion_tokens`` tokens — so a later request hits it
only if it replays the message as generated: a tool-call message with its ``reasoning_content``, not a
plain answer whose reasoning is ignored on input), and ``S[:L]`` for the longest common segment prefix
``L > 0`` with every earlier request of the model. The hit is the token count of the longest persisted unit
that is a prefix of the request; the fixed-interval units of very long inputs and the old 64-token minimum
are not emulated.

**Output.** ``choices[0].message``: ``role``, ``content`` (the text; null without text, ``""`` for
deepseek), the dialect's reasoning field(s), ``tool_calls`` (ids ``call_NNN``; ``arguments`` =
``raw_arguments`` or compact JSON). ``finish_reason``: ``length`` for ``stop="max_tokens"``, else
``tool_calls`` when there are calls, else ``stop``. Usage: ``reasoning_tokens = count_tokens(reasoning)``
(0 when deepseek thinking is off), ``completion_tokens`` as above.

**Streaming.** ``data: {chunk}\\n\\n`` … ``data: [DONE]``: a role chunk (``content: ""``, or null when
the message content is null), reasoning deltas (``reasoning_content``; ``reasoning`` for vllm), content
deltas, one opening chunk per tool call (index, id, name) then its argument deltas, a chunk with
``finish_reason``, and, with ``stream_options.include_usage``, a last chunk with ``choices: []`` and the
usage (earlier chunks then carry ``usage: null``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from reasonstate.testing._server import JSONResponse, RecordedRequest, Route, StreamResponse, sse_event
from reasonstate.testing.openai import (
    KNOWN_MODELS,
    MODEL_ALIASES,
    REASONING_EFFORTS,
    OpenAIFamilyEmulator,
    Transform,
    canonical_json,
    effort_error,
    openai_cached_tokens,
    openai_error,
    tool_schema_error,
)
from reasonstate.testing.script import ModelAction, Script, ToolCallSpec, count_tokens

__all__ = ["DEEPSEEK_EFFORTS", "DEEPSEEK_MODELS", "MODEL_ALIASES", "Dialect", "OpenAIChatEmulator"]

Dialect = Literal["openai", "deepseek", "vllm", "sglang", "openrouter"]
_DIALECTS: tuple[Dialect, ...] = ("openai", "deepseek", "vllm", "sglang", "openrouter")

#: The model ids DeepSeek serves (https://api-docs.deepseek.com/quick_start/pricing: ``deepseek-v4-pro``,
#: ``deepseek-v4-flash``, and the legacy ``deepseek-chat`` / ``deepseek-reasoner`` names); another id is 400
#: "Model Not Exist".
DEEPSEEK_MODELS: frozenset[str] = frozenset(
    {"deepseek-v4-pro", "deepseek-v4-flash", "deepseek-chat", "deepseek-reasoner"}
)

# vLLM/SGLang serve whatever name they were started under: no table (``models=`` gives one)
_DIALECT_MODELS: dict[Dialect, frozenset[str]] = {
    "openai": KNOWN_MODELS,
    "deepseek": DEEPSEEK_MODELS,
    "vllm": frozenset(),
    "sglang": frozenset(),
    "openrouter": frozenset(),
}
#: an OpenRouter model id's upstream → the ``format`` of its reasoning details (docs/protocols.md §2.3)
_OPENROUTER_FORMATS = {
    "anthropic": "anthropic-claude-v1",
    "openai": "openai-responses-v1",
    "google": "google-gemini-v1",
}
_ANTHROPIC_NO_THINKING = (
    "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When "
    "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
    "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
    "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
_ANTHROPIC_BAD_SIGNATURE = "messages.{}.content.0: Invalid `signature` in `thinking` block"


def _openrouter_format(model: str) -> str:
    return _OPENROUTER_FORMATS.get(model.split("/", 1)[0], "unknown")


def openrouter_error(status: int, message: str, metadata: Mapping[str, Any] | None = None) -> JSONResponse:
    """OpenRouter's error envelope (https://openrouter.ai/docs/api/reference/errors-and-debugging):
    ``{"error": {"code", "message", "metadata"}}``, the HTTP status repeated in ``code``."""
    error: dict[str, Any] = {"code": status, "message": message}
    if metadata is not None:
        error["metadata"] = dict(metadata)
    return JSONResponse(status, {"error": error})


def _upstream_error(message: str, model: str) -> JSONResponse:
    """An Anthropic 400 forwarded by OpenRouter: its body as text in ``metadata.raw``."""
    raw = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    meta = {"raw": json.dumps(raw), "provider_name": "Anthropic"}
    return openrouter_error(400, "Provider returned error", meta)


_CHUNK = 8  # characters per streamed delta

_DEEPSEEK_MISSING = "The reasoning_content in the thinking mode must be passed back to the API."
#: an assistant message with content "" (or none) and no tool_calls (carlrobertoh/ProxyAI#830, #834)
_DEEPSEEK_EMPTY = "Invalid assistant message: content or tool_calls must be set"
_DEEPSEEK_LEGACY = (
    "The reasoning_content is an intermediate result for display purposes only and will not be included "
    "in the context for inference. Please remove the reasoning_content from your message to reduce network "
    "traffic."
)
#: the retired deepseek-reasoner's refusal of two messages of one role in a row (deepseek-ai/DeepSeek-R1#21)
_DEEPSEEK_SUCCESSIVE = (
    "deepseek-reasoner does not support successive user or assistant messages (messages[{}] and messages[{}] "
    "in your input). You should interleave the user/assistant messages in the message sequence."
)
# OpenAI's text keeps its typo ("preceeding"); DeepSeek's has no trailing period (itmisx/deepx-code#94).
_OPENAI_ORPHAN_TOOL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
_DEEPSEEK_ORPHAN_TOOL = (
    "Messages with role 'tool' must be a response to a preceding message with 'tool_calls'"
)


class _Reject(Exception):
    def __init__(self, response: JSONResponse) -> None:
        super().__init__(response.payload)
        self.response = response


#: the ``reasoning_effort`` values DeepSeek takes (https://api-docs.deepseek.com/guides/thinking_mode: the
#: mapping table): the five its 400 listed ([3P] nextai-translator/nextai-translator#1879), then the two the
#: newer page adds
DEEPSEEK_EFFORTS: tuple[str, ...] = ("high", "low", "medium", "max", "xhigh", "minimal", "ultra")
_EFFORT_VALUE = re.compile(rb'(?<!\\)"reasoning_effort"\s*:\s*"')


def _deepseek_effort_error(raw: bytes, effort: Any) -> JSONResponse | None:
    """DeepSeek's 400 for a ``reasoning_effort`` it does not know: its JSON deserializer's words ([3P]
    nextai-translator/nextai-translator#1879: ``Failed to deserialize the JSON body into the target type:
    reasoning_effort: unknown variant `none`, expected one of `high`, `low`, `medium`, `max`, `xhigh` at
    line 1 column 68``), the position being where the value's closing quote is in the body as sent
    (line and 1-based byte column, as serde counts them)."""
    if not isinstance(effort, str) or effort in DEEPSEEK_EFFORTS:
        return None
    line, column = 1, 0
    found = _EFFORT_VALUE.search(raw)
    if found is not None:
        text = raw[found.end() :].decode("utf-8", "replace")
        _, end = json.decoder.scanstring(text, 0)  # type: ignore[attr-defined]
        upto = raw[: found.end()] + text[:end].encode()
        line = upto.count(b"\n") + 1
        column = len(upto) - (upto.rfind(b"\n") + 1)
    expected = ", ".join(f"`{e}`" for e in DEEPSEEK_EFFORTS)
    message = (
        "Failed to deserialize the JSON body into the target type: reasoning_effort: unknown variant "
        f"`{effort}`, expected one of {expected} at line {line} column {column}"
    )
    return openai_error(400, message, param=None, code="invalid_request_error")


def _arguments(call: ToolCallSpec) -> str:
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(dict(call.arguments), ensure_ascii=False, separators=(",", ":"))


def _tokens(segments: tuple[str, ...]) -> int:
    """Item-aligned token count: each segment is tokenized on its own."""
    return sum(count_tokens(s) for s in segments)


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """The length of the longest common run of leading segments."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _chunks(text: str) -> list[str]:
    return [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)]


def _detail_pieces(detail: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """One ``reasoning_details`` element as OpenRouter streams it (module docstring): the head piece
    with its first text, then the rest of the text, then the signature on a piece of its own."""
    key = next((k for k in ("text", "summary", "data") if isinstance(detail.get(k), str)), None)
    head = {k: v for k, v in detail.items() if k != "signature" and k != key}
    if key is None:
        yield {"type": detail["type"], **head}
    else:
        pieces = _chunks(detail[key]) or [""]
        yield {"type": detail["type"], key: pieces[0], **head}
        for piece in pieces[1:]:
            yield {"type": detail["type"], key: piece, "index": detail["index"]}
    if "signature" in detail:
        yield {"type": detail["type"], "text": "", "signature": detail["signature"], "index": detail["index"]}


class OpenAIChatEmulator(OpenAIFamilyEmulator):
    """``POST /v1/chat/completions`` (and ``/chat/completions``) under the rules in the module docstring.

    Point a real SDK client at it (root plus ``/v1``; DeepSeek's documented base URL is the bare root;
    :meth:`client` picks the right one)::

        emulator = OpenAIChatEmulator(script, dialect="vllm").start()
        client = openai.OpenAI(base_url=emulator.base_url + "/v1", api_key="test-key")

    It rejects (400/401 in OpenAI's error envelope, nothing consumed from the script): a missing bearer
    key; a ``tool`` message that answers no open ``tool_calls``, or ``tool_calls`` left unanswered (openai,
    deepseek); on deepseek with
    thinking on, an assistant message with ``tool_calls`` whose ``reasoning_content`` is missing or not
    the one issued with those calls (``verify_replay``), or any ``reasoning_content`` at all with
    ``legacy_reject_reasoning``; two user or two assistant messages in a row with
    ``legacy_reject_successive``; ``messages`` that is not an array of objects.

    :meth:`client` uses ``root + "/v1"``, except for the deepseek dialect, whose documented base URL has no
    ``/v1`` (docs/protocols.md §0, §3). ``transform`` rewrites each successful completion before it is sent
    (streamed chunks are derived from the rewritten completion). ``aliases`` adds alias → dated id
    entries to the dialect's table (:data:`MODEL_ALIASES` for openai, empty otherwise) or overrides them.
    """

    def __init__(
        self,
        script: Iterable[ModelAction] | Script = (),
        *,
        dialect: Dialect = "openai",
        secret: bytes | str | None = None,
        transform: Transform | None = None,
        legacy_reject_reasoning: bool = False,
        legacy_reject_successive: bool = False,
        verify_replay: bool = True,
        aliases: Mapping[str, str] | None = None,
        api_key: str | Iterable[str] | None = None,
        models: Iterable[str] = (),
        platform: str = "openai",
        resource: str | None = None,
    ) -> None:
        if dialect not in _DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; expected one of {_DIALECTS}")
        if platform != "openai" and dialect != "openai":
            raise ValueError(f"platform={platform!r} serves the openai dialect only")
        defaults = MODEL_ALIASES if dialect == "openai" else {}
        models = tuple(models)
        super().__init__(
            script,
            secret=secret,
            transform=transform,
            name=f"{dialect}-chat-emulator",
            aliases={**defaults, **dict(aliases or {})},
            api_key=api_key,
            known_models=_DIALECT_MODELS[dialect],
            models=models,
            platform=platform,
            resource=resource,
        )
        # a vLLM/SGLang server started without ``--api-key`` checks no key and serves any model name it
        # was started under: the emulator does the same unless ``api_key=`` / ``models=`` name some
        self._open_server = dialect in ("vllm", "sglang")
        self._checks_key = not self._open_server or api_key is not None
        # OpenRouter serves hundreds of ``upstream/name`` ids: any unless ``models=`` names some
        self._checks_model = (not self._open_server and dialect != "openrouter") or bool(models)
        self.dialect: Dialect = dialect
        self.sdk_path = "" if dialect == "deepseek" else "/v1"
        self.legacy_reject_reasoning = legacy_reject_reasoning
        self.legacy_reject_successive = legacy_reject_successive
        self.verify_replay = verify_replay
        self._completions = 0
        self._calls = 0
        self._issued_reasoning: dict[str, str] = {}  # tool call id -> reasoning issued with it
        self._issued_details: dict[str, list[dict[str, Any]]] = {}  # tool call id -> reasoning_details
        self._prompts: dict[tuple[str, str | None], list[tuple[str, ...]]] = {}
        self._history: dict[str, list[tuple[str, ...]]] = {}  # deepseek: segments of earlier requests
        self._units: dict[str, set[tuple[str, ...]]] = {}  # deepseek: persisted prefix units (segments)

    def _routes(self) -> list[Route]:
        return [
            Route("POST", r"/v1/chat/completions", self._handle),
            Route("POST", r"/chat/completions", self._handle),
        ]

    def clear_cache(self) -> None:
        """Forget every earlier prompt and persisted unit: the next request reports no cache hit."""
        with self._lock:
            self._prompts.clear()
            self._history.clear()
            self._units.clear()

    # -- keys and models per dialect ------------------------------------------------------------------
    def _unauthorized(self, request: RecordedRequest) -> JSONResponse | None:
        return super()._unauthorized(request) if self._checks_key else None

    def _invalid_key(self, key: str) -> JSONResponse:
        if self.dialect != "deepseek":
            return super()._invalid_key(key)
        # [3P] continuedev/continue#11820, #10656: the last four characters after four stars
        message = f"Authentication Fails, Your api key: ****{key[-4:]} is invalid"
        return openai_error(401, message, type="authentication_error", code="invalid_request_error")

    def _unknown_model(self, model: str) -> JSONResponse | None:
        if not self._checks_model or self.knows_model(model):
            return None
        if self.dialect == "deepseek":  # [3P] ConardLi/easy-dataset#9, langbot-app/LangBot#1643
            return openai_error(400, "Model Not Exist", code="invalid_request_error")
        if self._open_server:  # vLLM's OpenAI-compatible server ([3P] vllm-project/vllm serving_engine)
            return JSONResponse(
                404,
                {
                    "object": "error",
                    "message": f"The model `{model}` does not exist.",
                    "type": "NotFoundError",
                    "param": None,
                    "code": 404,
                },
            )
        return super()._unknown_model(model)

    # -- the handler -------------------------------------------------------------------------------
    def _handle(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        body = self._json_body(request)
        if isinstance(body, JSONResponse):
            return body
        if self.dialect == "openai":
            effort = body.get("reasoning_effort")
            if effort is not None and effort not in REASONING_EFFORTS:
                return effort_error(effort, "reasoning_effort")
            bad_tool = tool_schema_error(body.get("tools"), nested=True)
            if bad_tool is not None:
                return bad_tool
        elif self.dialect == "deepseek":
            refused = _deepseek_effort_error(request.body, body.get("reasoning_effort"))
            if refused is None:
                refused = self._deepseek_schema_error(body.get("tools"))
            if refused is not None:
                return refused
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return self._error("Invalid type for 'messages': expected an array of objects.", param="messages")
        with self._lock:
            try:
                self._validate(body, messages)
            except _Reject as rejected:
                return rejected.response
            action = self.script.take(body)
            completion = self._respond(body, messages, action)
        completion = self._transformed(completion)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamResponse(self._chunks(completion, include_usage=include_usage))
        return JSONResponse(200, completion)

    def _deepseek_schema_error(self, tools: Any) -> JSONResponse | None:
        """DeepSeek's 400 for the first function whose ``parameters`` is not an object schema at the top
        ([3P] end-4/dots-hyprland#3640: ``{}`` is refused, ``{"type": "object", "properties": {}}`` is
        not; farion1231/cc-switch#5490). The type is quoted as JSON (``'type: null'``, where OpenAI says
        ``"None"``). Missing ``parameters`` and faults below the top are accepted: unconfirmed
        (docs/protocols.md §0.2)."""
        if not isinstance(tools, list):
            return None
        for tool in tools:
            spec = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(spec, dict) or "parameters" not in spec:
                continue
            schema = spec["parameters"]
            kind = schema.get("type") if isinstance(schema, dict) else None
            if kind != "object":
                shown = json.dumps(kind, ensure_ascii=False)
                return self._error(
                    f"Invalid schema for function '{spec.get('name')}': schema must be a JSON Schema of "
                    f"'type: \"object\"', got 'type: {shown}'."
                )
        return None

    def _error(self, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
        if self.dialect == "openrouter":
            return openrouter_error(400, message, {"code": code} if code else None)
        if self.dialect == "deepseek":  # DeepSeek's envelope: param null, code repeats the type
            return openai_error(400, message, param=None, code=code or "invalid_request_error")
        return openai_error(400, message, param=param, code=code)

    # -- validation ----------------------------------------------------------------------------------
    def _thinking(self, body: dict[str, Any]) -> bool:
        if self.dialect != "deepseek":
            return False
        thinking = body.get("thinking")
        return not (isinstance(thinking, dict) and thinking.get("type") == "disabled")

    def _validate(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        if self.legacy_reject_reasoning and any("reasoning_content" in m for m in messages):
            raise _Reject(self._error(_DEEPSEEK_LEGACY))
        if self.legacy_reject_successive:
            for i in range(len(messages) - 1):
                role = messages[i].get("role")
                if role in ("user", "assistant") and messages[i + 1].get("role") == role:
                    raise _Reject(self._error(_DEEPSEEK_SUCCESSIVE.format(i, i + 1)))
        if self.dialect in ("openai", "deepseek", "openrouter"):
            self._check_tool_pairing(messages)
        if self.dialect == "openrouter":
            self._check_openrouter(body, messages)
        thinking = self._thinking(body)
        for message in messages:
            if message.get("role") != "assistant":
                continue
            if self.dialect == "deepseek" and not message.get("content") and not message.get("tool_calls"):
                raise _Reject(self._error(_DEEPSEEK_EMPTY))
            if not message.get("tool_calls"):
                continue
            reasoning = message.get("reasoning_content")
            if thinking and reasoning is None:
                raise _Reject(self._error(_DEEPSEEK_MISSING))
            if self.verify_replay and self.dialect == "deepseek" and reasoning is not None:
                for call in message["tool_calls"]:
                    issued = self._issued_reasoning.get(str(call.get("id")))
                    if issued is not None and issued != reasoning:
                        text = (
                            f"reasoning_content replayed with tool call {call.get('id')} differs from the "
                            "reasoning the model produced with it (reasonstate emulator check)."
                        )
                        raise _Reject(self._error(text, code="emulator_reasoning_mismatch"))

    def _check_openrouter(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        """The upstream's rules OpenRouter forwards (module docstring, docs/protocols.md §2.3)."""
        model = str(body["model"])
        family = _openrouter_format(model)
        for i, message in enumerate(messages):
            details = message.get("reasoning_details") if message.get("role") == "assistant" else None
            for detail in details if isinstance(details, list) else ():
                fmt = detail.get("format") if isinstance(detail, dict) else None
                if fmt is not None and fmt != family:
                    text = (
                        f"messages[{i}].reasoning_details carries {fmt} reasoning to a {family} model "
                        "(reasonstate emulator check)."
                    )
                    raise _Reject(self._error(text, code="emulator_foreign_reasoning"))
                if fmt == "anthropic-claude-v1" and isinstance(detail, dict) and "signature" in detail:
                    expected = self._sign(model, str(detail.get("text") or ""))
                    if detail.get("signature") != expected:
                        raise _Reject(_upstream_error(_ANTHROPIC_BAD_SIGNATURE.format(i), model))
        if family != "anthropic-claude-v1" or not messages or messages[-1].get("role") != "tool":
            return
        # the open chain: its assistant messages with tool_calls must start with their thinking
        start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        for i in range(start + 1, len(messages)):
            message = messages[i]
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            if not calls:
                continue
            issued = self._issued_details.get(str(calls[0].get("id")))
            if issued is None:
                continue
            sent = message.get("reasoning_details")
            texts = [d for d in sent or () if isinstance(d, dict) and d.get("type") == "reasoning.text"]
            if not texts:
                raise _Reject(_upstream_error(_ANTHROPIC_NO_THINKING.format(i), model))

    def _sign(self, model: str, text: str) -> str:
        mac = hmac.new(self.secret, f"{model}\0{text}".encode(), hashlib.sha256).digest()
        return base64.b64encode(mac).decode()

    def _details(self, model: str, reasoning: str) -> list[dict[str, Any]]:
        """The ``reasoning_details`` of one answer, in the upstream family's shape (module docstring)."""
        fmt = _openrouter_format(model)
        n = self._completions
        if fmt == "anthropic-claude-v1":
            return [
                {
                    "type": "reasoning.text",
                    "text": reasoning,
                    "signature": self._sign(model, reasoning),
                    "id": None,
                    "format": fmt,
                    "index": 0,
                }
            ]
        opaque = base64.b64encode(hashlib.sha256(f"{model}\0{n}\0{reasoning}".encode()).digest() * 3)
        if fmt == "openai-responses-v1":
            return [
                {
                    "type": "reasoning.summary",
                    "summary": reasoning,
                    "id": f"rs_emu_{n:03d}",
                    "format": fmt,
                    "index": 0,
                },
                {
                    "type": "reasoning.encrypted",
                    "data": opaque.decode(),
                    "id": f"rs_emu_{n:03d}",
                    "format": fmt,
                    "index": 1,
                },
            ]
        if fmt == "google-gemini-v1":
            return [
                {"type": "reasoning.text", "text": reasoning, "id": None, "format": fmt, "index": 0},
                {
                    "type": "reasoning.encrypted",
                    "data": opaque.decode(),
                    "id": None,
                    "format": fmt,
                    "index": 1,
                },
            ]
        return [{"type": "reasoning.text", "text": reasoning, "id": None, "format": fmt, "index": 0}]

    def _check_tool_pairing(self, messages: list[dict[str, Any]]) -> None:
        open_ids: list[str] = []  # tool_call ids of the assistant message that opened the current tool run
        unanswered: list[str] = []
        in_tool_run = False
        for index, message in enumerate(messages):
            role = message.get("role")
            param = f"messages.[{index}].role"
            if role == "tool":
                call_id = message.get("tool_call_id")
                if not in_tool_run:
                    text = _DEEPSEEK_ORPHAN_TOOL if self.dialect == "deepseek" else _OPENAI_ORPHAN_TOOL
                    raise _Reject(self._error(text, param=param))
                if call_id not in open_ids:
                    text = (
                        f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' "
                        "of previous message."
                    )
                    raise _Reject(self._error(text, param=param))
                if call_id in unanswered:
                    unanswered.remove(call_id)
                continue
            self._check_answered(unanswered, param)
            in_tool_run = role == "assistant" and bool(message.get("tool_calls"))
            open_ids = [str(c.get("id")) for c in message.get("tool_calls") or []] if in_tool_run else []
            unanswered = list(open_ids)
        self._check_answered(unanswered, f"messages.[{len(messages)}].role")

    def _check_answered(self, unanswered: list[str], param: str) -> None:
        if unanswered:
            text = (
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                "'tool_call_id'. The following tool_call_ids did not have response messages: "
                + ", ".join(unanswered)
            )
            raise _Reject(self._error(text, param=param))

    # -- prompt rendering and cache ------------------------------------------------------------------
    def _rendered(self, message: dict[str, Any]) -> str:
        shown = {k: v for k, v in message.items() if v is not None}
        if self.dialect == "openai":
            drop: tuple[str, ...] = ("reasoning", "reasoning_content")
        elif self.dialect == "deepseek":
            with_calls = shown.get("role") == "assistant" and bool(shown.get("tool_calls"))
            drop = ("reasoning",) if with_calls else ("reasoning", "reasoning_content")
        elif self.dialect in ("vllm", "openrouter"):
            drop = ("reasoning_content",)
        else:
            drop = ()
        return canonical_json({k: v for k, v in shown.items() if k not in drop})

    def _segments(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> list[str]:
        segments = [canonical_json({"tools": body["tools"]})] if body.get("tools") else []
        return segments + [self._rendered(m) for m in messages]

    def _generated(self, message: dict[str, Any]) -> str:
        """``canonical_json(G)``: the output message as generated (see the module docstring)."""
        shown = {k: v for k, v in message.items() if v is not None}
        hidden = {
            "openai": ("reasoning", "reasoning_content"),
            "deepseek": ("reasoning",),
            "vllm": ("reasoning_content",),
            "sglang": (),
            "openrouter": (),
        }[self.dialect]
        return canonical_json({k: v for k, v in shown.items() if k not in hidden})

    def _cache(self, body: dict[str, Any], segments: list[str], generated: str) -> tuple[int, int]:
        """``(prompt_tokens, cached_tokens)`` for this request; records it for later requests."""
        model = self.resolve_model(body["model"])
        prompt = tuple(segments)
        prompt_tokens = _tokens(prompt)
        if self.dialect == "deepseek":
            units = self._units.setdefault(model, set())
            history = self._history.setdefault(model, [])
            hit = 0
            for j in range(len(prompt), 0, -1):
                if prompt[:j] in units:
                    hit = _tokens(prompt[:j])
                    break
            for earlier in history:
                common = _common(prompt, earlier)
                if common:
                    units.add(prompt[:common])
            units.add(prompt)
            units.add((*prompt, generated))
            history.append(prompt)
            return prompt_tokens, hit
        namespace = (model, body.get("prompt_cache_key") if self.dialect == "openai" else None)
        earlier_prompts = self._prompts.setdefault(namespace, [])
        matched = max((_tokens(prompt[: _common(prompt, q)]) for q in earlier_prompts), default=0)
        earlier_prompts.append(prompt)
        if self.dialect in ("openai", "openrouter"):
            return prompt_tokens, openai_cached_tokens(prompt_tokens, matched)
        return prompt_tokens, 16 * (min(matched, prompt_tokens - 1) // 16)

    # -- output --------------------------------------------------------------------------------------
    def _respond(
        self, body: dict[str, Any], messages: list[dict[str, Any]], action: ModelAction
    ) -> dict[str, Any]:
        self._completions += 1
        thinking = self._thinking(body)
        reasoning = action.reasoning
        if self.dialect == "deepseek":
            reasoning = (action.reasoning or "") if thinking else None
        message: dict[str, Any] = {"role": "assistant"}
        if self.dialect == "deepseek":
            message["content"] = action.text or ""
        else:
            message["content"] = action.text
        if reasoning is not None:
            if self.dialect in ("deepseek", "sglang"):
                message["reasoning_content"] = reasoning
            elif self.dialect == "vllm":
                message["reasoning"] = reasoning
                message["reasoning_content"] = reasoning
            elif self.dialect == "openrouter":
                message["reasoning"] = reasoning
                message["reasoning_details"] = self._details(str(body["model"]), reasoning)
        tool_calls: list[dict[str, Any]] = []
        for call in action.tool_calls:
            self._calls += 1
            call_id = f"call_{self._calls:03d}"
            arguments = _arguments(call)
            tool_calls.append(
                {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": arguments}}
            )
            if reasoning is not None:
                self._issued_reasoning[call_id] = reasoning
                if "reasoning_details" in message:
                    self._issued_details[call_id] = message["reasoning_details"]
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish_reason = "tool_calls" if tool_calls else "stop"
        if action.stop == "max_tokens":
            finish_reason = "length"

        generated = self._generated(message)
        prompt_tokens, cached = self._cache(body, self._segments(body, messages), generated)
        reasoning_tokens = (
            count_tokens(action.reasoning or "") if (self.dialect != "deepseek" or thinking) else 0
        )
        completion_tokens = count_tokens(generated)
        if self.dialect == "openai":  # the reasoning was generated but is not part of the message
            completion_tokens += reasoning_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        }
        if self.dialect == "deepseek":
            usage["prompt_cache_hit_tokens"] = cached
            usage["prompt_cache_miss_tokens"] = prompt_tokens - cached
        if self.dialect == "openrouter":
            usage["prompt_tokens_details"]["cache_write_tokens"] = 0
            usage["cost"] = round(
                (prompt_tokens - cached) * 1e-6 + cached * 1e-7 + completion_tokens * 4e-6, 9
            )
        return {
            "id": f"chatcmpl-emu-{self._completions:03d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.resolve_model(body["model"]),
            "system_fingerprint": "fp_emu",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage,
        }

    # -- streaming -----------------------------------------------------------------------------------
    def _chunks(self, completion: dict[str, Any], *, include_usage: bool) -> Iterator[bytes]:
        head: dict[str, Any] = {
            k: completion[k] for k in ("id", "created", "model", "system_fingerprint") if k in completion
        }
        head["object"] = "chat.completion.chunk"
        if include_usage:
            head["usage"] = None
        choice = completion["choices"][0]
        message: dict[str, Any] = choice["message"]

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            body = {
                **head,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            return sse_event(None, body)

        yield chunk({"role": "assistant", "content": "" if isinstance(message.get("content"), str) else None})
        stream_field = "reasoning" if self.dialect in ("vllm", "openrouter") else "reasoning_content"
        reasoning = message.get(stream_field)
        if isinstance(reasoning, str):
            for piece in _chunks(reasoning):
                yield chunk({stream_field: piece})
        for detail in message.get("reasoning_details") or ():
            yield from (chunk({"reasoning_details": [p]}) for p in _detail_pieces(detail))
        if isinstance(message.get("content"), str):
            for piece in _chunks(message["content"]):
                yield chunk({"content": piece})
        for index, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            opening = {"index": index, "id": call["id"], "type": "function"}
            yield chunk(
                {"tool_calls": [{**opening, "function": {"name": function["name"], "arguments": ""}}]}
            )
            for piece in _chunks(function["arguments"]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, choice.get("finish_reason"))
        if include_usage:
            yield sse_event(None, {**head, "choices": [], "usage": completion.get("usage")})
        yield sse_event(None, "[DONE]")
