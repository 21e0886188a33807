"""A strict emulator of the Anthropic Messages API (``POST /v1/messages``), for tests without the network.

Written from the vendor facts (docs/protocols.md §0, §4), never from our adapters: this module does not
import ``reasonstate.adapters``, ``reasonstate.session`` or ``reasonstate.state``. The ``anthropic`` SDK is
imported only inside :meth:`AnthropicEmulator.client` / :meth:`AnthropicEmulator.async_client`.

Routes
------
* ``POST /v1/messages`` — validated, answered from the :class:`~reasonstate.testing.script.Script`
  (JSON, or SSE when ``"stream": true``);
* ``POST /v1/messages/count_tokens`` — ``{"input_tokens": N}`` with N = every prompt block's tokens (below);
  consumes nothing and writes no cache.

Model aliases
-------------
Like the vendor, the emulator answers a request for a model *alias* with the dated snapshot id it points
to: ``"model": "claude-sonnet-4-5"`` is answered with ``"model": "claude-sonnet-4-5-20250929"`` (in the JSON
body and in the stream's ``message_start``). The table is :data:`MODEL_ALIASES`, taken from the "Claude API
alias" column of https://docs.anthropic.com/en/docs/about-claude/models/overview; the constructor's
``aliases={alias: model_id}`` adds entries or overrides them (map an alias to itself to stop resolving it).
A dated id, or any name not in the table, is echoed unchanged; resolution is one lookup, not transitive.
The alias and its dated id are one model everywhere the emulator binds something to a model: signatures
and redacted data are issued and verified with the resolved id (so a block produced under the alias
verifies when replayed under the alias or the dated id, and still fails under any other model), and the
prompt cache is keyed by the resolved id. Below, "model" always means the resolved id.

Every response carries a ``request-id: req_emu_...`` header. Errors use Anthropic's envelope
``{"type":"error","error":{"type":...,"message":...},"request_id":"req_emu_..."}``.

Invariants
----------
* Auth: ``x-api-key: <key>`` or ``Authorization: Bearer <key>``; neither → 401 ``authentication_error``
  ``x-api-key header is required``; a key other than the accepted ones (``test-key``, ``emulator-key``, or
  the constructor's ``api_key=``) → 401 ``authentication_error`` ``invalid x-api-key`` ([3P]
  eyaltoledano/claude-task-master#222, abi/screenshot-to-code#272).
* Model: one outside :data:`KNOWN_MODELS` and the aliases (or the constructor's ``models=``) → 404
  ``not_found_error`` ``model: <id>`` ([3P] anthropics/claude-code#5349), checked right after the required
  fields.
* Tools: a custom tool's ``input_schema`` that is not a JSON Schema of ``type: "object"`` or is not valid
  JSON Schema → 400 ``tools.N.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft
  2020-12 (...)`` ([3P] anthropics/claude-code#86664, #63673). ``output_config.effort`` outside
  :data:`EFFORTS` → 400 ``output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'``
  (the API's validation wording, [UNCONFIRMED] for this field).
* Usage carries ``inference_geo: "not_available"`` next to ``service_tier: "standard"`` (recorded real
  responses).
* A request answered with an error (validation 400/401 or an injected fault) consumes nothing from the
  script and writes nothing to the prompt cache. Only 200 answers write the cache.
* Signatures. A ``thinking`` block's ``signature`` is ``base64(0x01 | nonce(12) | HMAC-SHA256(secret,
  "thinking" 0 model 0 nonce 0 thinking_text))``: it binds the exact thinking text as returned (``""`` when
  ``display: "omitted"``) to the model that produced it. A ``redacted_thinking`` block's ``data`` is
  ``base64(0x02 | nonce(12) | HMAC-SHA256(secret, "redacted" 0 model 0 nonce))``. Every replayed thinking /
  redacted block, anywhere in ``messages``, must verify against the request's ``model``: an edited text, an
  edited or empty signature, or a block from another model → 400.
  The base64 is read strictly: standard alphabet, the exact padding and nothing after it — the decoded
  bytes must encode back to the string sent. So an extra ``=`` or any trailing byte is a different
  signature: ``messages.N.content.M: Invalid `signature` in `thinking` block`` (``Invalid `data` in
  `redacted_thinking` block`` for redacted data). Source: the signature is opaque and must come back
  unmodified ([SDK] ``thinking_block_param.py``; Anthropic staff in anthropics/anthropic-sdk-python#1598:
  the check fails when a block "differs in any way from what was originally returned").
* Preserved thinking (:func:`has_preserved_thinking`: Fable/Mythos 5.1 and later, Opus/Sonnet/Haiku 5.5 and
  later — the ``supportedModels`` of ``DOCS_PRESERVED_THINKING``; Fable 5.0 and Opus 5 are not among them).
  On these models a signature is ``base64(0x03 | nonce | prefix_digest(32) | HMAC-SHA256(secret,
  "thinking-bound" 0 model 0 nonce 0 prefix_digest 0 text))`` (redacted: ``0x04``, ``"redacted-bound"``, no
  text), where ``prefix_digest`` is the :class:`_PrefixDigest` of everything the block was produced after:
  top-level ``tools`` and ``system``, every earlier message, and the earlier blocks of its own response
  (a final assistant prefill is continued, so its blocks count too). On replay the digest of what now
  precedes the block must be the bound one; moving ``cache_control`` or re-spelling a string as a text
  block is not a change, an edited/added/removed/moved block, message, tool or system text is. A block
  whose prefix changed, and so every thinking block after the change, is refused with ``messages.N.content.M:
  Invalid `signature` in `thinking` block. The block is bound to a different conversation. Remove the
  block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".`` ([DOC]
  https://platform.claude.com/docs/en/build-with-claude/preserved-thinking/fix-bound-to-a-different-conversation;
  for a redacted block the same sentence follows ``Invalid `data` in `redacted_thinking` block``
  [UNCONFIRMED]). With ``thinking.block_binding.prefix_mismatch_behavior: "drop_block"`` (which needs
  ``anthropic-beta: thinking-binding-controls-2026-08-01``, [SDK] ``beta_thinking_block_binding_param.py``)
  those blocks are removed from the prompt instead (they count no tokens) and listed in the response's
  ``input_transformations`` as ``{"type": "thinking_dropped", "path": "messages.N.content.M", "reason":
  "prefix_binding_mismatch"}`` ([SDK] ``beta_thinking_dropped_input_transformation.py``).
  ``input_transformations`` is present (``[]`` when nothing was dropped) whenever that beta is sent.
  ``block_binding`` without the beta → 400 ``thinking.block_binding: requires the `anthropic-beta:
  thinking-binding-controls-2026-08-01` header`` (the docs say the error asks for the header; wording
  [UNCONFIRMED]). The prefix check is enforced, as for accounts created on or after 2026-08-31. Other
  models keep the unbound signatures above.
* Thinking and the rest of the request (checked right after ``thinking`` itself, in this order):

  - ``thinking.type: "enabled"`` on an adaptive-only model (:func:`is_adaptive_only`: Claude 4.7 and later,
    Fable/Mythos 5.x; [DOC] ``DOCS_THINKING_TROUBLESHOOTING``, "Claude 4.7 and later models do not support
    it and reject requests that use it, returning a 400 error") → ``"thinking.type.enabled" is not
    supported for this model. Use "thinking.type.adaptive" and "output_config.effort" to control thinking
    behavior.`` ([DOC] https://platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5; [3P]
    Kilo-Org/kilocode#10729 on Opus 4.8).
  - ``thinking.type: "enabled"`` with ``tool_choice`` ``{"type": "any"}`` or ``{"type": "tool", ...}`` →
    ``Thinking may not be enabled when tool_choice forces tool use.`` ([DOC] extended thinking: tool use
    with thinking supports only ``tool_choice`` ``auto`` or ``none``; [3P] live probe in
    workglow-dev/libs#746 — both forced types, identical message; mastra-ai/mastra#7507). Adaptive
    thinking is not checked here (forcing is model-dependent there).
  - thinking on (``enabled`` or ``adaptive``) with ``temperature`` other than 1 → ```temperature` may only be
    set to 1 when thinking is enabled or in adaptive mode. Please consult our documentation at
    https://platform.claude.com/docs/en/build-with-claude/extended-thinking`` ([3P] a recorded live
    response, request ``req_011CeGW3dHhfESHqMhHXtABt``; the older form without "or in adaptive mode" is
    MartialBE/one-hub#529); ``top_p`` below 0.95 → ```top_p` must be greater than or equal to 0.95 or unset
    when thinking is enabled or in adaptive mode.`` (same documentation sentence appended); any ``top_k``
    → ```top_k` must be unset when thinking is enabled or in adaptive mode.`` (same sentence) ([DOC]
    extended thinking: "Thinking isn't compatible with temperature or top_k modifications", top_p may be
    set between 0.95 and 1; [3P] quarkiverse/quarkus-langchain4j#1812 and danny-avila/LibreChat#6023 for
    ``top_k``, errs.dmxapi.cn/detail.php?id=2069 for ``top_p``; the appended documentation sentence of
    these two in the adaptive-era wording is [UNCONFIRMED]). anthropic 2.14's ``messages.create`` has no
    ``temperature``/``top_p``/``top_k`` parameters; they reach the API through ``extra_body``.
* The latest assistant message that holds ``tool_use`` blocks issued by this emulator must carry exactly the
  thinking/redacted blocks issued with them, same order, none dropped or added (checked when thinking is on).
* Tool pairing: every ``tool_use`` id needs a ``tool_result`` in the immediately following user message and
  every ``tool_result`` needs a ``tool_use`` in the immediately preceding assistant message.

Validation order (the first failure is reported): auth → JSON body → ``model``/``max_tokens``/``messages``
→ ``thinking`` (shape, ``block_binding`` and its beta) → adaptive-only model → forced ``tool_choice`` →
``temperature`` → ``top_p`` → ``top_k`` → ``system``/``tools`` shape → message roles/content/block types →
``cache_control`` count (>4 → 400) → tool pairing → thinking-disabled final assistant prefill → "Expected
`thinking`" → signatures (message order, block order; on a preserved-thinking model each block's prefix
binding right after its signature) → latest assistant message unmodified.

Thinking modes: ``enabled`` (``budget_tokens`` ≥ 1024 and < ``max_tokens``) and ``adaptive`` are "on":
thinking blocks are generated and the continuation rules apply. ``disabled``, absent and ``between_tools``
are "off": no thinking is generated; ``disabled``/absent additionally reject thinking blocks in an assistant
message in the final position (a prefill). The "Expected `thinking` or `redacted_thinking`" rule applies
when thinking is on and the last assistant message contains ``tool_use`` without starting with a thinking
or redacted block — except when that message's tool calls were issued by this emulator in a response
that had no thinking block (the scripted model did not think), since then nothing can be replayed.

Responses
---------
For a :class:`~reasonstate.testing.script.ModelAction` the content is, in order: ``thinking`` (thinking on
and ``action.reasoning is not None``), ``redacted_thinking`` (thinking on and ``action.redacted``), ``text``
(``action.text`` non-empty), then one ``tool_use`` per call (ids ``toolu_emu_001``, ... per emulator;
``input`` = the call's arguments). ``stop_reason``: ``max_tokens`` if ``action.stop == "max_tokens"``,
else ``tool_use`` if there are calls, else ``end_turn``. Message ids ``msg_emu_001``, ...

``output_tokens`` = count_tokens(reasoning) (the full reasoning, even when displayed as omitted; 0 when no
thinking block) + count_tokens(text) + Σ count_tokens(compact JSON of each tool input);
``output_tokens_details.thinking_tokens`` = the first term. Redacted blocks add nothing.

Deterministic answers (``deterministic=True``): by default nonces are random (``os.urandom``) and ids count
per emulator, so the same request asked twice gets a different answer. With ``deterministic=True`` a request's
answer is a function of the secret and the request body alone: ``seed = HMAC-SHA256(secret, "request" 0
canonical_body)``, where ``canonical_body`` is the body's JSON with sorted keys, compact, without its
``stream`` flag; a thinking block's nonce is the first 12 bytes of ``HMAC-SHA256(secret, "derive" 0 seed 0
"nonce" 0 "0")`` (a redacted block's: ``"1"``), the message id ``msg_emu_`` + 24 hex digits of the
``"message"`` derivation, the i-th tool call's id ``toolu_emu_`` + 24 hex digits of the ``"tool"`` one.
Signatures keep their format and every check above (a replayed block still has to verify). So a client that
retries a request (a worker killed after the emulator answered, before it stored the answer) gets the very
bytes it lost, and two runs of one conversation agree however their requests interleave. Two things stay
outside the body: the script (give a responder that decides from the request, not a list consumed in arrival
order) and the prompt cache (a cache read depends on the requests before; with ``cache_min_tokens`` above
every prompt's length nothing is cached and the usage is a function of the request too). The ``request-id``
header stays random.

Prompt-cache rule (what the SDK's predictions are compared against)
-------------------------------------------------------------------
1. The prompt is a sequence of blocks, in this order: each tool definition (one block each); the system
   prompt (a string is one block ``{"type":"text","text":s}``; a list gives one block per element); then
   each message in order (string content is one block ``{"type":"text","text":s}``; a list gives one block
   per content block). A block's tokens are ``count_tokens(json.dumps(block_without_its_cache_control,
   separators=(",", ":"), ensure_ascii=False))`` with keys in the order received (only the block's own
   top-level ``cache_control`` key is removed; nested ones, e.g. inside ``tool_result.content``, stay and
   count as text). A block's cache identity is its section (tool/system/message), for messages the message
   index and role, and that JSON; only the JSON counts as tokens.
2. Breakpoints are the blocks carrying ``cache_control`` (``{"type":"ephemeral","ttl":"5m"|"1h"}``, ttl
   default ``5m``), plus the last block when the request has a top-level ``cache_control``. More than 4
   distinct breakpoint blocks → 400 ``A maximum of 4 blocks with cache_control may be provided. Found N.``
3. Let ``T(k)`` be the tokens of the first k blocks and ``P(k)`` the prefix of k blocks. The cache maps
   ``(model, SHA-256 of P(k))`` to entries. **Read**: the hit is the largest k ≥ 1 such that ``P(k)`` was
   written before and ``b - lookback_blocks ≤ k ≤ b`` for some breakpoint position b of this request
   (b = 1-based index of the breakpoint block). ``cache_read_input_tokens = T(hit)`` (0 without a hit).
4. **Write** (only when the request is answered 200): for every breakpoint b with ``T(b) ≥
   cache_min_tokens``, ``P(b)`` is stored. Prefixes shorter than that are silently not cached.
5. ``cache_creation_input_tokens = T(last) - T(hit)`` where ``last`` is the last breakpoint, if
   ``T(last) ≥ cache_min_tokens``; else 0. ``input_tokens = T(all) - read - creation``.
   ``cache_creation`` splits the creation tokens by ttl: the span between the hit end (or previous
   breakpoint, whichever is later) and each breakpoint b counts for b's ttl
   (``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``); spans ending at a breakpoint whose
   prefix is below ``cache_min_tokens`` count for the ttl of the next cacheable breakpoint.
6. An entry lives for its breakpoint's ttl (``5m``: 300 s, ``1h``: 3600 s) on the emulator's clock
   (:meth:`~reasonstate.testing._server.Emulator.now`), refreshed each time a request reads it (§4.4: "the
   cache's default minimum lifetime is 5 minutes, refreshed each time the cached content is used"); a
   request reads no expired entry. The clock is the wall clock unless a test moves it with
   :meth:`~reasonstate.testing._server.Emulator.advance`, so a test that lets no time pass sees no expiry.
7. Thinking configuration, ``tool_choice`` etc. are not part of the key;
   ``service_tier`` is always ``"standard"``.

Streaming (``"stream": true``) follows §4.5: ``message_start`` (empty content, usage with the cache fields
and ``output_tokens: 1``), one ``ping``, then per block ``content_block_start`` / deltas /
``content_block_stop`` (thinking: ``thinking_delta`` chunks then one ``signature_delta``; redacted and any
other non-text block: complete in the start event; text: ``text_delta`` chunks; tool_use: start with
``input: {}`` then ``input_json_delta`` chunks), ``message_delta`` (stop_reason and cumulative usage),
``message_stop``. The ``transform`` hook (if any) is applied to the complete message before it is framed.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import attrs

from reasonstate._extras import needs
from reasonstate.testing._context_editing import (
    ContextEditReject,
    apply_context_management,
    check_context_management,
)
from reasonstate.testing._eventstream import event_message
from reasonstate.testing._server import (
    DEFAULT_SECRET,
    Fault,
    JSONResponse,
    RecordedRequest,
    Route,
    ScriptedEmulator,
    StreamResponse,
    Transform,
    sse_event,
)
from reasonstate.testing._tool_schema import schema_problem
from reasonstate.testing.script import ModelAction, Responder, Script, ScriptExhausted, count_tokens

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "BLOCK_BINDING_BETA",
    "DOCS_EXTENDED_THINKING",
    "DOCS_MODELS_OVERVIEW",
    "DOCS_PRESERVED_THINKING",
    "DOCS_THINKING_TROUBLESHOOTING",
    "EFFORTS",
    "INFERENCE_GEO",
    "KNOWN_MODELS",
    "MODEL_ALIASES",
    "REQUEST_BLOCK_TYPES",
    "AnthropicEmulator",
    "CacheUsage",
    "has_preserved_thinking",
    "is_adaptive_only",
]

DOCS_EXTENDED_THINKING = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
DOCS_MODELS_OVERVIEW = "https://docs.anthropic.com/en/docs/about-claude/models/overview"
#: the documentation link the thinking/sampling errors of the adaptive-thinking era carry
DOCS_EXTENDED_THINKING_PLATFORM = "https://platform.claude.com/docs/en/build-with-claude/extended-thinking"
DOCS_THINKING_TROUBLESHOOTING = (
    "https://platform.claude.com/docs/en/build-with-claude/thinking-troubleshooting"
)
DOCS_PRESERVED_THINKING = "https://platform.claude.com/docs/build-with-claude/preserved-thinking"
#: the beta that ``thinking.block_binding`` and the response's ``input_transformations`` need
BLOCK_BINDING_BETA = "thinking-binding-controls-2026-08-01"

#: Alias → the dated model id the API answers with (``DOCS_MODELS_OVERVIEW``, "Claude API alias" column).
#: Models of the 4.6 generation on have dateless canonical ids (``claude-sonnet-4-6``): they are not aliases.
MODEL_ALIASES: dict[str, str] = {
    "claude-opus-4-5": "claude-opus-4-5-20251101",
    "claude-haiku-4-5": "claude-haiku-4-5-20251001",
    "claude-sonnet-4-5": "claude-sonnet-4-5-20250929",
    "claude-opus-4-1": "claude-opus-4-1-20250805",
    "claude-opus-4-0": "claude-opus-4-20250514",
    "claude-sonnet-4-0": "claude-sonnet-4-20250514",
    "claude-3-7-sonnet-latest": "claude-3-7-sonnet-20250219",
    "claude-3-5-haiku-latest": "claude-3-5-haiku-20241022",
}

#: The model ids the emulator serves (``DOCS_MODELS_OVERVIEW``: the current and legacy ids, and the dated
#: ids the aliases above point to); any other ``model`` is 404 ``not_found_error`` ``model: <id>``, as the
#: API answers a model it does not serve ([3P] anthropics/claude-code#5349,
#: mattermost/mattermost-plugin-agents#257).
KNOWN_MODELS: frozenset[str] = frozenset(
    {
        *MODEL_ALIASES.values(),
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "claude-sonnet-4-6-20260217",
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-opus-5",
        "claude-sonnet-5",
        "claude-opus-5-5",
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-fable-5",
        "claude-fable-5-1",
        "claude-mythos-5",
        "claude-mythos-5-1",
    }
)

#: ``output_config.effort`` values ([SDK] anthropic ``output_config_param.py``).
EFFORTS: tuple[str, ...] = ("low", "medium", "high", "xhigh", "max")

#: The usage field ``inference_geo`` of a request that did not ask for a region ([3P] recorded responses:
#: ``"inference_geo": "not_available"`` next to ``"service_tier": "standard"``).
INFERENCE_GEO = "not_available"

#: Content block types accepted in request messages (anthropic 2.14 ``ContentBlockParam``).
REQUEST_BLOCK_TYPES: tuple[str, ...] = (
    "text",
    "image",
    "document",
    "search_result",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "container_upload",
)

_THINKING_TYPES = ("enabled", "disabled", "adaptive", "between_tools")
_REASONING_TYPES = ("thinking", "redacted_thinking")
_PREFIX_MISMATCH_BEHAVIORS = ("error", "drop_block")
_SIG_THINKING = 0x01
_SIG_REDACTED = 0x02
_SIG_THINKING_BOUND = 0x03  # preserved-thinking models: the MAC also covers the prefix digest
_SIG_REDACTED_BOUND = 0x04
_NONCE_LEN = 12
#: a cache entry's lifetime per breakpoint ttl, in seconds (§4.4)
_TTL_SECONDS = {"5m": 300, "1h": 3600}
_MAC_LEN = 32
_DIGEST_LEN = 32

# Vendor error texts of the request-level thinking rules (sources in the module docstring).
_ERR_ADAPTIVE_ONLY = (
    '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
    '"output_config.effort" to control thinking behavior.'
)
_ERR_SCHEMA = (
    "JSON schema is invalid. It must match JSON Schema draft 2020-12 "
    "(https://json-schema.org/draft/2020-12). Learn more about tool use at https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview."
)
_ERR_FORCED_TOOL = "Thinking may not be enabled when tool_choice forces tool use."
_ERR_TEMPERATURE = (
    "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. Please consult our "
    f"documentation at {DOCS_EXTENDED_THINKING_PLATFORM}"
)
_ERR_TOP_P = (
    "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled or in adaptive mode. "
    f"Please consult our documentation at {DOCS_EXTENDED_THINKING_PLATFORM}"
)
_ERR_TOP_K = (
    "`top_k` must be unset when thinking is enabled or in adaptive mode. Please consult our documentation "
    f"at {DOCS_EXTENDED_THINKING_PLATFORM}"
)
_ERR_BINDING_NEEDS_BETA = (
    f"thinking.block_binding: requires the `anthropic-beta: {BLOCK_BINDING_BETA}` header"
)
_BOUND_TO_OTHER_CONVERSATION = (
    "The block is bound to a different conversation. Remove the block, or set "
    '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)
# claude-<family>-<major>[-<minor>][-<yyyymmdd>]; older ids (claude-3-7-sonnet-...) do not match
_MODEL_ID = re.compile(r"claude-(opus|sonnet|haiku|fable|mythos)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?")

_Dropped = tuple[int, int, str]  # (message index, block index, reason) of a block drop_block removed


class _Reject(Exception):
    """A request the emulated API refuses: status, Anthropic error type and message."""

    def __init__(self, message: str, *, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def _request_id() -> str:
    return "req_emu_" + os.urandom(12).hex()


def _envelope(kind: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


def _error_fault(status: int, kind: str, message: str) -> Fault:
    rid = _request_id()
    return Fault.http(status, _envelope(kind, message, rid), {"request-id": rid})


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@attrs.frozen(slots=True)
class CacheUsage:
    """The prompt-cache figures of one request (see the module docstring for the rule)."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    ephemeral_5m_input_tokens: int
    ephemeral_1h_input_tokens: int


@attrs.frozen(slots=True)
class _Block:
    identity: bytes
    tokens: int
    ttl: str | None  # None: not a breakpoint


@attrs.frozen(slots=True)
class _Issued:
    """A response this emulator issued: its thinking/redacted blocks (in order) and tool_use ids."""

    model: str
    reasoning_blocks: tuple[tuple[str, ...], ...]
    tool_ids: tuple[str, ...]


@attrs.frozen(slots=True)
class _Thinking:
    on: bool
    display: str | None
    kind: str  # enabled | adaptive | disabled | between_tools | absent
    prefix_mismatch: str = "error"  # thinking.block_binding.prefix_mismatch_behavior: error | drop_block


def _model_version(model: str) -> tuple[str, tuple[int, int]] | None:
    """``("opus", (4, 7))`` for ``claude-opus-4-7`` (a date suffix is ignored); None for other names."""
    match = _MODEL_ID.fullmatch(model)
    if match is None:
        return None
    return match.group(1), (int(match.group(2)), int(match.group(3) or 0))


def is_adaptive_only(model: str) -> bool:
    """Whether ``model`` refuses manual ``thinking: {"type": "enabled"}`` (Claude 4.7 and later, Fable and
    Mythos 5.x; ``DOCS_THINKING_TROUBLESHOOTING``). Unknown names and older ids are not."""
    parsed = _model_version(model)
    if parsed is None:
        return False
    family, version = parsed
    if family in ("fable", "mythos"):
        return version >= (5, 0)
    return version >= (4, 7)


def has_preserved_thinking(model: str) -> bool:
    """Whether ``model`` binds a thinking block to the prefix it was produced on (``DOCS_PRESERVED_THINKING``:
    Fable/Mythos 5.1 and later, Opus/Sonnet/Haiku 5.5 and later)."""
    parsed = _model_version(model)
    if parsed is None:
        return False
    family, version = parsed
    if family in ("fable", "mythos"):
        return version >= (5, 1)
    return version >= (5, 5)


class _PrefixDigest:
    """A running SHA-256 over a request's prefix, as the preserved-thinking check compares it.

    The prefix of a block is the top-level ``tools`` and ``system`` and every content block before it, in
    prompt order. Each part is its canonical JSON (sorted keys, the block's own top-level ``cache_control``
    removed, string content read as one text block), tagged with its message index and role, and
    length-prefixed; so moving a cache breakpoint, re-ordering keys or spelling a string as a text block
    changes nothing, while any edit, insertion, removal or move of a block or message does.
    """

    def __init__(self, body: Mapping[str, Any]) -> None:
        self._hash = hashlib.sha256(b"reasonstate-emulator/prefix/v1\x00")
        tools = body.get("tools") or []
        self._feed(["tools", [_strip(t) if isinstance(t, dict) else t for t in tools]])
        system = body.get("system")
        if isinstance(system, str):
            system_blocks: list[Any] = [{"type": "text", "text": system}]
        else:
            system_blocks = [_strip(b) if isinstance(b, dict) else b for b in system or []]
        self._feed(["system", system_blocks])

    def _feed(self, part: Any) -> None:
        data = json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        self._hash.update(len(data).to_bytes(8, "big") + data)

    def add(self, index: int, role: str, block: Mapping[str, Any]) -> None:
        """Append content block of message ``index`` (with ``role``) to the prefix."""
        self._feed(["message", index, role, _strip(block)])

    def digest(self) -> bytes:
        return self._hash.copy().digest()


def _reasoning_key(block: Mapping[str, Any]) -> tuple[str, ...]:
    if block.get("type") == "thinking":
        return ("thinking", str(block.get("thinking")), str(block.get("signature")))
    return ("redacted_thinking", str(block.get("data")))


def _chunks(text: str, parts: int = 3) -> list[str]:
    """Split ``text`` into at most ``parts`` non-empty consecutive pieces (none for the empty string)."""
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


#: where the emulator serves the Messages API: Claude on the first-party API, Amazon Bedrock, Google Vertex
#: AI (§10); and the Anthropic-compatible endpoints of DeepSeek, Kimi and MiniMax (§10.8)
PLATFORMS = ("anthropic", "bedrock", "vertex", "deepseek", "kimi", "minimax")
#: the compatible endpoints: their models, served at ``{root}/anthropic/v1/messages`` (§10.8)
COMPATIBLE_MODELS: dict[str, frozenset[str]] = {
    "deepseek": frozenset({"deepseek-v4-flash", "deepseek-v4-pro", "deepseek-flash"}),
    "kimi": frozenset({"kimi-k2.6", "kimi-k2.5", "kimi-k3"}),
    "minimax": frozenset({"MiniMax-M3", "MiniMax-M2.7", "MiniMax-M2.7-highspeed"}),
}
#: the compatible endpoints that take thinking back on every earlier tool-calling assistant message, as
#: their chat APIs take ``reasoning_content`` (§3.3, §10.8); their thinking blocks carry no signature
_UNSIGNED = frozenset({"deepseek", "kimi"})
#: DeepSeek's refusal of a tool-calling message without its reasoning (§3.3), on both of its APIs
_REASONING_MISSING = "The reasoning_content in the thinking mode must be passed back to the API."
_VERTEX_PATH = (
    r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/[^/:]+:(?:rawPredict|streamRawPredict)"
)
#: Bedrock's 403 for a key or token it did not issue (UnrecognizedClientException)
_BEDROCK_BAD_TOKEN = "The security token included in the request is invalid."
#: SigV4's ``Authorization`` header: the access key id is the first element of the credential scope
_SIGV4 = re.compile(r"AWS4-HMAC-SHA256 Credential=([A-Za-z0-9]+)/")
#: the signing key of the account a Bedrock request is served for (None: the emulator's own secret), set
#: around the Messages handler of that one request
_ACCOUNT_SECRET: contextvars.ContextVar[bytes | None] = contextvars.ContextVar("account_secret", default=None)
_VERTEX_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential."
)
#: a Bedrock model id: an optional cross-region inference profile prefix, ``anthropic.``, the Claude id
#: and a version suffix (``us.anthropic.claude-sonnet-4-5-20250929-v1:0``; docs/protocols.md §10.4)
_BEDROCK_MODEL = re.compile(
    r"(?:(?:us|eu|apac|jp|au|global|us-gov)\.)?anthropic\.(claude-[a-z0-9-]+?)(?:-v\d+(?::\d+)?)?"
)
#: a Vertex AI model id: the Claude id with ``@date`` for a dated one (``claude-sonnet-4-5@20250929``)
_VERTEX_MODEL = re.compile(r"(claude-[a-z0-9-]+?)(?:@(\d{8}))?")


def bedrock_model(model_id: str) -> str | None:
    """The first-party id of a Bedrock model id (None: not one), as Bedrock names Claude (§10.4)."""
    found = _BEDROCK_MODEL.fullmatch(model_id)
    return found.group(1) if found else None


def vertex_model(model_id: str) -> str | None:
    """The first-party id of a Vertex AI model id (None: not one): ``claude-x@20250929`` →
    ``claude-x-20250929`` (§10.5)."""
    found = _VERTEX_MODEL.fullmatch(model_id)
    if found is None:
        return None
    return found.group(1) + (f"-{found.group(2)}" if found.group(2) else "")


def _bedrock_error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse(
        status, {"message": message}, {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/"}
    )


def _bedrock_chunk(event: bytes) -> bytes:
    """A Messages stream event (its SSE frame) as Bedrock's ``invoke-with-response-stream`` sends it: an
    AWS event-stream ``chunk`` message whose payload is ``{"bytes": base64 of the event's JSON}``
    (docs/protocols.md §10.4; the SDK's ``anthropic/lib/bedrock/_stream_decoder.py`` reads it back)."""
    data = next(line[6:] for line in event.split(b"\n") if line.startswith(b"data: "))
    return event_message("chunk", {"bytes": base64.b64encode(data).decode()})


def _google_error(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def _platform_body(request: RecordedRequest) -> dict[str, Any] | str:
    """A platform request's JSON body, or why it is refused: the platforms take the model from the path
    and require ``anthropic_version`` in the body (§10.4, §10.5)."""
    try:
        body = request.json()
    except ValueError:
        return "Malformed input request: the body is not JSON, please reformat your input and try again."
    if not isinstance(body, dict):
        return "Malformed input request: expected a JSON object, please reformat your input and try again."
    if "model" in body:
        return (
            "Malformed input request: #: extraneous key [model] is not permitted, please reformat your "
            "input and try again."
        )
    if not isinstance(body.get("anthropic_version"), str):
        return (
            "Malformed input request: #: required key [anthropic_version] not found, please reformat "
            "your input and try again."
        )
    return body


def _as_messages(request: RecordedRequest, body: dict[str, Any], model: str, key: str) -> RecordedRequest:
    """The platform request as the Messages API would get it: ``model`` in the body (its first-party id),
    the platform's credential (``key``, already checked) as the key."""
    inner = {k: v for k, v in body.items() if k != "anthropic_version"}
    return RecordedRequest(
        method=request.method,
        path="/v1/messages",
        query=request.query,
        headers={**request.headers, "x-api-key": key},
        body=json.dumps({"model": model, **inner}, ensure_ascii=False).encode(),
    )


class AnthropicEmulator(ScriptedEmulator):
    """A running, strict Anthropic Messages API on 127.0.0.1; use it as a context manager.

    Point a real SDK client at it (the base URL is the server root, no ``/v1``; :meth:`client` does this)::

        emulator = AnthropicEmulator(script).start()
        client = anthropic.Anthropic(base_url=emulator.base_url, api_key="test-key")

    It rejects, as the API does (400/401 in Anthropic's error envelope, nothing consumed from the script):
    a missing key; a thinking or redacted block whose signature/data was edited, moved to another model or
    (on preserved-thinking models) to another conversation prefix; ``tool_use`` without its
    ``tool_result`` (or the reverse); thinking options the model does not take (``enabled`` on
    adaptive-only models, ``budget_tokens >= max_tokens``, forced ``tool_choice`` with thinking); more
    than four ``cache_control`` breakpoints; malformed messages, system or tools. Details: the module
    docstring.

    ``script``: a :class:`Script`, an iterable of :class:`ModelAction`, or a responder
    ``(request_json) -> ModelAction``. ``cache_min_tokens``: the minimum cacheable prefix length.
    ``secret``: the HMAC key for signatures (:data:`~reasonstate.testing._server.DEFAULT_SECRET` when None,
    so a restarted emulator verifies what an earlier one signed; another secret stands for another
    organisation). ``api_key``: the accepted key(s) (``test-key`` and ``emulator-key`` when None).
    ``models``: model ids served on top of :data:`KNOWN_MODELS`. ``lookback_blocks``: how many blocks before a
    breakpoint a cache read may end. ``transform``: applied to each successful response's message JSON
    (non-stream body, or the message that a stream is framed from). ``aliases``: more alias → dated id
    entries, merged over :data:`MODEL_ALIASES` (see "Model aliases" in the module docstring).
    ``deterministic``: derive nonces and message/tool ids from the secret and the request body, so the same
    request always gets the same answer (see "Deterministic answers" in the module docstring).
    """

    def __init__(
        self,
        script: Script | Iterable[ModelAction] | Responder = (),
        *,
        cache_min_tokens: int = 1024,
        secret: bytes | str | None = None,
        lookback_blocks: int = 20,
        transform: Transform | None = None,
        aliases: Mapping[str, str] | None = None,
        deterministic: bool = False,
        api_key: str | Iterable[str] | None = None,
        models: Iterable[str] = (),
        platform: str = "anthropic",
        accounts: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(deterministic, bool):
            raise TypeError(f"deterministic= is True or False, got {deterministic!r}")
        if platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {PLATFORMS}, got {platform!r}")
        #: ``"anthropic"`` (the first-party API), ``"bedrock"`` or ``"vertex"`` (:data:`PLATFORMS`)
        self.platform = platform
        routes = {
            "anthropic": [
                Route("POST", r"/v1/messages", self._handle_messages),
                Route("POST", r"/v1/messages/count_tokens", self._handle_count_tokens),
            ],
            "bedrock": [Route("POST", r"/model/[^/]+/invoke(-with-response-stream)?", self._handle_bedrock)],
            "vertex": [Route("POST", _VERTEX_PATH, self._handle_vertex)],
        }.get(platform, [Route("POST", r"/anthropic/v1/messages", self._handle_messages)])
        if platform != "anthropic" and secret is None:
            secret = DEFAULT_SECRET + b":" + platform.encode()  # another service: another signing key
        super().__init__(
            routes,
            name=f"anthropic-{platform}-emulator" if platform != "anthropic" else "anthropic-emulator",
            script=script,
            secret=secret,
            transform=transform,
            aliases={**MODEL_ALIASES, **dict(aliases or {})},
            api_key=api_key,
            known_models=COMPATIBLE_MODELS.get(platform, KNOWN_MODELS),
            models=models,
        )
        if accounts is not None and platform != "bedrock":
            raise ValueError("accounts= is Bedrock's: it binds thinking signatures to an AWS account")
        #: Bedrock: credential (an API key, or a SigV4 access key id) → the AWS account it acts for; a
        #: credential not named here acts for the emulator's own account (docs/protocols.md §10.4)
        self.accounts: dict[str, str] = dict(accounts or {})
        self.cache_min_tokens = cache_min_tokens
        self.lookback_blocks = lookback_blocks
        self.deterministic = deterministic
        self._msg_ids = itertools.count(1)
        self._tool_ids = itertools.count(1)
        # a compatible endpoint mints its own ids: another service's ``toolu_emu_001`` is not one of them
        self._tool_prefix = "toolu_emu_" if platform not in COMPATIBLE_MODELS else f"toolu_{platform}_"
        # (model, prefix digest) -> [tokens, ttl in seconds, expiry on the emulator's clock]
        self._cache: dict[tuple[str, bytes], list[float]] = {}
        self._issued_by_tool: dict[str, _Issued] = {}

    def clear_cache(self) -> None:
        """Forget every prompt-cache entry."""
        with self._lock:
            self._cache.clear()

    # -- vendor-shaped faults ---------------------------------------------------------------------------
    @classmethod
    def rate_limited(cls) -> Fault:
        """A 429 ``rate_limit_error`` (the SDK raises ``anthropic.RateLimitError``)."""
        return _error_fault(
            429,
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 50 requests per minute. "
            "For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response "
            "headers for current usage. Please reduce the prompt length or the maximum tokens requested, "
            "or try again later.",
        )

    @classmethod
    def overloaded(cls) -> Fault:
        """A 529 ``overloaded_error`` (the SDK raises ``anthropic.OverloadedError``)."""
        return _error_fault(529, "overloaded_error", "Overloaded")

    @classmethod
    def server_error(cls) -> Fault:
        """A 500 ``api_error`` (the SDK raises ``anthropic.InternalServerError``)."""
        return _error_fault(500, "api_error", "Internal server error")

    # -- clients ---------------------------------------------------------------------------------------
    def client(self, **kw: Any) -> anthropic.Anthropic:
        """A real ``anthropic.Anthropic`` pointed at this emulator (``api_key="test-key"``,
        ``max_retries=0`` unless overridden); on ``platform="bedrock"`` a real ``anthropic.AnthropicBedrock``
        (a Bedrock API key: ``Authorization: Bearer``), on ``"vertex"`` a real ``anthropic.AnthropicVertex``
        (a static ``access_token``): no network, no cloud credentials."""
        with needs("anthropic"):
            import anthropic

        if self.platform == "bedrock":
            return anthropic.AnthropicBedrock(**self._platform_kwargs(kw))  # type: ignore[return-value]
        if self.platform == "vertex":
            return anthropic.AnthropicVertex(**self._platform_kwargs(kw))  # type: ignore[return-value]
        if self.platform in COMPATIBLE_MODELS:
            return anthropic.Anthropic(
                **{**self._client_kwargs(kw), "base_url": self.base_url + "/anthropic"}
            )
        return anthropic.Anthropic(**self._client_kwargs(kw))

    def async_client(self, **kw: Any) -> anthropic.AsyncAnthropic:
        """A real ``anthropic.AsyncAnthropic`` pointed at this emulator (``AsyncAnthropicBedrock`` /
        ``AsyncAnthropicVertex`` on those platforms)."""
        with needs("anthropic"):
            import anthropic

        if self.platform == "bedrock":
            return anthropic.AsyncAnthropicBedrock(**self._platform_kwargs(kw))  # type: ignore[return-value]
        if self.platform == "vertex":
            return anthropic.AsyncAnthropicVertex(**self._platform_kwargs(kw))  # type: ignore[return-value]
        if self.platform in COMPATIBLE_MODELS:
            kwargs = {**self._client_kwargs(kw), "base_url": self.base_url + "/anthropic"}
            return anthropic.AsyncAnthropic(**kwargs)
        return anthropic.AsyncAnthropic(**self._client_kwargs(kw))

    def _platform_kwargs(self, kw: Mapping[str, Any]) -> dict[str, Any]:
        if self.platform == "bedrock":
            signed = "aws_access_key" in kw or "aws_secret_key" in kw or "aws_profile" in kw
            base: dict[str, Any] = (
                {"aws_region": "us-east-1"}
                if signed
                else {
                    "api_key": "test-key",
                    "aws_region": "us-east-1",
                }
            )
        else:
            base = {"access_token": "test-key", "region": "us-east5", "project_id": "emulator-project"}
        return {
            **base,
            "base_url": self.base_url + ("/v1" if self.platform == "vertex" else ""),
            "max_retries": 0,
            **kw,
        }

    # -- platforms (docs/protocols.md §10.4, §10.5) ----------------------------------------------------
    def _handle_bedrock(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        """``POST /model/{modelId}/invoke``: the Messages body with ``anthropic_version`` and without
        ``model`` (it is in the path), answered as the Messages API answers it; errors in Bedrock's shape,
        ``{"message": ...}`` with an ``x-amzn-errortype`` header.

        Authentication: a Bedrock API key (``Authorization: Bearer``) or SigV4 (``AWS4-HMAC-SHA256
        Credential=<access key id>/...``: the access key id must be one of ``api_key``; the signature is
        not verified). The credential's account (``accounts``) signs the thinking: a signature issued for
        another account is refused as an invalid one (docs/protocols.md §10.1, §10.4)."""
        auth = request.headers.get("authorization", "")
        sigv4 = _SIGV4.match(auth)
        key = sigv4.group(1) if sigv4 else auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not key or not self.key_accepted(key):
            return _bedrock_error(403, "UnrecognizedClientException", _BEDROCK_BAD_TOKEN)
        account = self.accounts.get(key)
        token = _ACCOUNT_SECRET.set(
            None if account is None else self.secret + b":account:" + account.encode()
        )
        try:
            return self._handle_bedrock_as(request, key)
        finally:
            _ACCOUNT_SECRET.reset(token)

    def _handle_bedrock_as(self, request: RecordedRequest, key: str) -> JSONResponse | StreamResponse:
        model_id = unquote(request.path.split("/")[2])
        model = bedrock_model(model_id)
        if model is None or not self.knows_model(model):
            return _bedrock_error(400, "ValidationException", "The provided model identifier is invalid.")
        body = _platform_body(request)
        if isinstance(body, str):
            return _bedrock_error(400, "ValidationException", body)
        streamed = request.path.endswith("/invoke-with-response-stream")
        if streamed:
            body = {**body, "stream": True}  # the SDK takes it out: the path says it (§10.4)
        answer = self._handle_messages(_as_messages(request, body, model, key))
        if isinstance(answer, JSONResponse) and answer.status != 200:
            error = answer.payload.get("error", {}) if isinstance(answer.payload, dict) else {}
            return _bedrock_error(answer.status, "ValidationException", str(error.get("message", "")))
        if streamed and isinstance(answer, StreamResponse):
            return StreamResponse(
                [_bedrock_chunk(event) for event in answer.events],
                headers={"content-type": "application/vnd.amazon.eventstream"},
            )
        return answer

    def _handle_vertex(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        """``POST .../publishers/anthropic/models/{model}:rawPredict`` (``:streamRawPredict``: SSE, as the
        Messages API streams): the Messages body with ``anthropic_version`` and without ``model``; an
        unauthenticated call is Google's 401, a refused body the Messages API's error envelope."""
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not key or not self.key_accepted(key):
            return JSONResponse(401, _google_error(401, _VERTEX_UNAUTHENTICATED, "UNAUTHENTICATED"))
        name, _, specifier = request.path.rpartition("/")[2].partition(":")
        model = vertex_model(unquote(name))
        if model is None or not self.knows_model(model):
            message = f"Publisher Model `{name}` was not found or your project does not have access to it."
            return JSONResponse(404, _google_error(404, message, "NOT_FOUND"))
        body = _platform_body(request)
        if isinstance(body, str):
            rid = _request_id()
            return JSONResponse(400, _envelope("invalid_request_error", body, rid), {"request-id": rid})
        if (specifier == "streamRawPredict") != (body.get("stream") is True):
            rid = _request_id()
            message = f"{specifier} takes stream={specifier == 'streamRawPredict'}"
            return JSONResponse(400, _envelope("invalid_request_error", message, rid), {"request-id": rid})
        return self._handle_messages(_as_messages(request, body, model, key))

    # -- signatures ------------------------------------------------------------------------------------
    # Every helper resolves its ``model`` first: an alias and its dated id sign and verify alike.
    def _mac(self, *parts: bytes) -> bytes:
        secret = _ACCOUNT_SECRET.get()
        return hmac.new(
            self.secret if secret is None else secret, b"\x00".join(parts), hashlib.sha256
        ).digest()

    def sign_thinking(
        self, model: str, thinking: str, *, prefix_digest: bytes | None = None, nonce: bytes | None = None
    ) -> str:
        """A fresh signature for ``thinking`` as produced by ``model``.

        For a model with preserved thinking (:func:`has_preserved_thinking`) the signature also binds
        ``prefix_digest``, the digest of the prefix the block was produced after (32 zero bytes when None).
        ``nonce``: its 12 bytes (random when None; a deterministic emulator derives it from the request).
        """
        nonce = _nonce(nonce)
        bound = self.resolve_model(model)
        if has_preserved_thinking(bound):
            digest = prefix_digest if prefix_digest is not None else bytes(_DIGEST_LEN)
            mac = self._mac(b"thinking-bound", bound.encode(), nonce, digest, thinking.encode())
            return base64.b64encode(bytes([_SIG_THINKING_BOUND]) + nonce + digest + mac).decode()
        mac = self._mac(b"thinking", bound.encode(), nonce, thinking.encode())
        return base64.b64encode(bytes([_SIG_THINKING]) + nonce + mac).decode()

    def verify_thinking(
        self, model: str, thinking: str, signature: str, *, prefix_digest: bytes | None = None
    ) -> bool:
        """Whether ``signature`` was issued by this emulator for exactly ``thinking`` under ``model`` (and,
        for a preserved-thinking model, when ``prefix_digest`` is given, on exactly that prefix)."""
        opened = self._open_signature(model, "thinking", signature, thinking)
        return opened is not None and (prefix_digest is None or opened == prefix_digest)

    def issue_redacted(
        self, model: str, *, prefix_digest: bytes | None = None, nonce: bytes | None = None
    ) -> str:
        """Fresh opaque ``redacted_thinking.data`` for ``model`` (bound to ``prefix_digest`` like
        :meth:`sign_thinking` for a preserved-thinking model; ``nonce`` as there)."""
        nonce = _nonce(nonce)
        bound = self.resolve_model(model)
        if has_preserved_thinking(bound):
            digest = prefix_digest if prefix_digest is not None else bytes(_DIGEST_LEN)
            mac = self._mac(b"redacted-bound", bound.encode(), nonce, digest)
            return base64.b64encode(bytes([_SIG_REDACTED_BOUND]) + nonce + digest + mac).decode()
        mac = self._mac(b"redacted", bound.encode(), nonce)
        return base64.b64encode(bytes([_SIG_REDACTED]) + nonce + mac).decode()

    def verify_redacted(self, model: str, data: str, *, prefix_digest: bytes | None = None) -> bool:
        """Whether ``data`` was issued by this emulator as redacted thinking of ``model`` (and, for a
        preserved-thinking model, when ``prefix_digest`` is given, on exactly that prefix)."""
        opened = self._open_signature(model, "redacted", data)
        return opened is not None and (prefix_digest is None or opened == prefix_digest)

    def _open_signature(self, model: str, kind: str, encoded: str, thinking: str = "") -> bytes | None:
        """The prefix digest a verified signature/data binds (``b""`` for a model without preserved
        thinking), or None when it was not issued by this emulator for this text under ``model``."""
        bound = self.resolve_model(model)
        raw = _b64(encoded)
        if raw is None:
            return None
        preserved = has_preserved_thinking(bound)
        digest_len = _DIGEST_LEN if preserved else 0
        if kind == "thinking":
            tag = _SIG_THINKING_BOUND if preserved else _SIG_THINKING
        else:
            tag = _SIG_REDACTED_BOUND if preserved else _SIG_REDACTED
        if len(raw) != 1 + _NONCE_LEN + digest_len + _MAC_LEN or raw[0] != tag:
            return None
        nonce = raw[1 : 1 + _NONCE_LEN]
        digest = raw[1 + _NONCE_LEN : 1 + _NONCE_LEN + digest_len]
        mac = raw[1 + _NONCE_LEN + digest_len :]
        label = (kind + "-bound" if preserved else kind).encode()
        parts = [label, bound.encode(), nonce]
        if preserved:
            parts.append(digest)
        if kind == "thinking":
            parts.append(thinking.encode())
        if not hmac.compare_digest(mac, self._mac(*parts)):
            return None
        return digest

    # -- handlers --------------------------------------------------------------------------------------
    def _handle_messages(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        rid = _request_id()
        betas = _betas(request)
        with self._lock:
            try:
                body = self._parse(request)
                thinking, dropped = self._validate(body, betas)
                prompt = _without_blocks(body, dropped)
                applied: list[dict[str, Any]] | None = None
                if "context_management" in body:  # §4.7: the edited prompt is what the model sees
                    try:
                        edits = check_context_management(body["context_management"], betas, thinking.on)
                    except ContextEditReject as exc:
                        raise _Reject(str(exc)) from None
                    prompt, applied = apply_context_management(
                        prompt, edits, lambda b: sum(x.tokens for x in _prompt_blocks(b))
                    )
                blocks = _prompt_blocks(prompt)
            except _Reject as exc:
                return JSONResponse(exc.status, _envelope(exc.kind, exc.message, rid), {"request-id": rid})
            try:
                action = self.script.take(body)
            except ScriptExhausted as exc:
                return JSONResponse(500, _envelope("api_error", str(exc), rid), {"request-id": rid})
            model = self.resolve_model(str(body["model"]))
            usage = self._cache_usage(model, blocks, write=True)
            seed = self._seed(body) if self.deterministic else None
            message = self._build_message(model, thinking, action, usage, _response_prefix(body, model), seed)
            if BLOCK_BINDING_BETA in betas:
                message["input_transformations"] = [
                    {"type": "thinking_dropped", "path": f"messages.{n}.content.{m}", "reason": reason}
                    for n, m, reason in dropped
                ]
            if applied is not None:
                message["context_management"] = {"applied_edits": applied}
        message = self._transformed(message)
        if body.get("stream") is True:
            return StreamResponse(list(_stream_events(message)), headers={"request-id": rid})
        return JSONResponse(200, message, {"request-id": rid})

    def _handle_count_tokens(self, request: RecordedRequest) -> JSONResponse:
        rid = _request_id()
        try:
            body = self._parse(request)
            for name in ("model", "messages"):
                if name not in body:
                    raise _Reject(f"{name}: Field required")
            _check_messages(body["messages"])
            blocks = _prompt_blocks(body)
        except _Reject as exc:
            return JSONResponse(exc.status, _envelope(exc.kind, exc.message, rid), {"request-id": rid})
        return JSONResponse(200, {"input_tokens": sum(b.tokens for b in blocks)}, {"request-id": rid})

    def _parse(self, request: RecordedRequest) -> dict[str, Any]:
        api_key = request.headers.get("x-api-key", "").strip()
        auth = request.headers.get("authorization", "").strip()
        bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not api_key and not bearer:
            raise _Reject("x-api-key header is required", status=401, kind="authentication_error")
        # the key is sent as ``x-api-key`` or (anthropic 2.x) ``Authorization: Bearer``; the recorded refusal
        # of a key the API did not issue is "invalid x-api-key" (for the bearer form: [UNCONFIRMED])
        if not self.key_accepted(api_key or bearer):
            raise _Reject("invalid x-api-key", status=401, kind="authentication_error")
        try:
            body = request.json()
        except ValueError:
            raise _Reject("There was an error parsing the body of your request as JSON.") from None
        if not isinstance(body, dict):
            raise _Reject("Input should be a valid dictionary or object to extract fields from")
        return body

    def _seed(self, body: Mapping[str, Any]) -> bytes:
        """What a deterministic emulator derives a request's nonces and ids from (module docstring)."""
        canonical = json.dumps(
            {k: v for k, v in body.items() if k != "stream"},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return self._mac(b"request", canonical.encode())

    # -- validation ------------------------------------------------------------------------------------
    def _validate(self, body: dict[str, Any], betas: frozenset[str]) -> tuple[_Thinking, list[_Dropped]]:
        """The request's thinking mode and the blocks ``drop_block`` removes; raises :class:`_Reject`."""
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                raise _Reject(f"{name}: Field required")
        if not isinstance(body["model"], str) or not body["model"]:
            raise _Reject("model: Input should be a valid string")
        if not self.knows_model(body["model"]):
            raise _Reject(f"model: {body['model']}", status=404, kind="not_found_error")
        max_tokens = body["max_tokens"]
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise _Reject("max_tokens: Input should be a valid integer")
        if max_tokens < 1:
            raise _Reject("max_tokens: Input should be greater than or equal to 1")
        model = self.resolve_model(str(body["model"]))
        thinking = _check_thinking(body.get("thinking"), max_tokens, betas)
        _check_thinking_compatibility(body, model, thinking)
        _check_effort(body.get("output_config"))
        _check_system_and_tools(body)
        messages = _check_messages(body["messages"])
        _check_cache_control_count(body)
        _check_tool_pairing(messages)
        dropped = self._check_reasoning_rules(body, model, messages, thinking)
        return thinking, dropped

    def _check_reasoning_rules(
        self, body: Mapping[str, Any], model: str, messages: list[dict[str, Any]], thinking: _Thinking
    ) -> list[_Dropped]:
        last = len(messages) - 1
        # thinking disabled: an assistant prefill (final position) cannot contain thinking
        if thinking.kind in ("disabled", "absent") and messages[last]["role"] == "assistant":
            for m, block in enumerate(_content(messages[last])):
                if block.get("type") in _REASONING_TYPES:
                    raise _Reject(
                        f"messages.{last}.content.{m}: When thinking is disabled, an `assistant` message in "
                        "the final position cannot contain `thinking`. To use thinking blocks, enable "
                        "`thinking` in your request."
                    )
        latest = max((i for i, msg in enumerate(messages) if msg["role"] == "assistant"), default=None)
        issued: _Issued | None = None
        if latest is not None:
            tool_ids = [b.get("id") for b in _content(messages[latest]) if b.get("type") == "tool_use"]
            issued = next((self._issued_by_tool[t] for t in tool_ids if t in self._issued_by_tool), None)
            if thinking.on and tool_ids:
                first = _content(messages[latest])[0]
                skip = issued is not None and not issued.reasoning_blocks
                if first.get("type") not in _REASONING_TYPES and not skip:
                    raise _Reject(
                        f"messages.{latest}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                        f"found `{first.get('type')}`. When `thinking` is enabled, a final `assistant` "
                        "message must start with a thinking block (preceeding the lastmost set of "
                        "`tool_use` and `tool_result` blocks). We recommend you include thinking blocks "
                        "from previous turns. To avoid this requirement, disable `thinking`. Please "
                        f"consult our documentation at {DOCS_EXTENDED_THINKING}"
                    )
        # every replayed thinking / redacted block must verify; on a preserved-thinking model it must also
        # have been produced on exactly the prefix it is sent after (else 400, or dropped on drop_block)
        dropped: list[_Dropped] = []
        prefix = _PrefixDigest(body) if has_preserved_thinking(model) else None
        for n, msg in enumerate(messages):
            for m, block in enumerate(_content(msg)):
                kind = block.get("type")
                if kind == "thinking":
                    for field in ("thinking", "signature"):
                        if field not in block:
                            raise _Reject(f"messages.{n}.content.{m}.thinking.{field}: Field required")
                        if not isinstance(block[field], str):
                            raise _Reject(
                                f"messages.{n}.content.{m}.thinking.{field}: Input should be a valid string"
                            )
                    invalid = f"messages.{n}.content.{m}: Invalid `signature` in `thinking` block"
                    if self.platform in _UNSIGNED:  # no signature to check: the text is (below)
                        continue
                    bound = self._open_signature(model, "thinking", block["signature"], block["thinking"])
                elif kind == "redacted_thinking":
                    data = block.get("data")
                    if not isinstance(data, str):
                        raise _Reject(f"messages.{n}.content.{m}.redacted_thinking.data: Field required")
                    invalid = f"messages.{n}.content.{m}: Invalid `data` in `redacted_thinking` block"
                    bound = self._open_signature(model, "redacted", data)
                else:
                    bound = b""
                    invalid = ""
                if bound is None:
                    raise _Reject(invalid)
                if prefix is not None:
                    if kind in _REASONING_TYPES and bound != prefix.digest():
                        if thinking.prefix_mismatch != "drop_block":
                            raise _Reject(f"{invalid}. {_BOUND_TO_OTHER_CONVERSATION}")
                        dropped.append((n, m, "prefix_binding_mismatch"))
                    prefix.add(n, str(msg["role"]), block)
        if self.platform in _UNSIGNED and thinking.on:
            self._check_unsigned_history(messages)
        # the latest assistant message's thinking must be exactly what was issued with its tool calls
        if latest is not None and issued is not None and thinking.on:
            sent = [
                (m, _reasoning_key(b))
                for m, b in enumerate(_content(messages[latest]))
                if b.get("type") in _REASONING_TYPES
            ]
            bad: int | None = None
            for i, (m, key) in enumerate(sent):
                if i >= len(issued.reasoning_blocks) or issued.reasoning_blocks[i] != key:
                    bad = m
                    break
            if bad is None and len(sent) < len(issued.reasoning_blocks):
                bad = sent[-1][0] + 1 if sent else 0
            if bad is not None:
                raise _Reject(
                    f"messages.{latest}.content.{bad}: `thinking` or `redacted_thinking` blocks in the "
                    "latest assistant message cannot be modified. These blocks must remain as they were in "
                    "the original response."
                )
        return dropped

    def _check_unsigned_history(self, messages: list[dict[str, Any]]) -> None:
        """DeepSeek and Kimi (§10.8): every assistant message with ``tool_use`` that this endpoint issued
        starts with the thinking it was issued with, earlier turns included (their chat APIs' rule for
        ``reasoning_content``, §3.3); else the vendor's 400."""
        for n, msg in enumerate(messages):
            if msg["role"] != "assistant":
                continue
            content = _content(msg)
            ids = [b.get("id") for b in content if b.get("type") == "tool_use"]
            issued = next((self._issued_by_tool[t] for t in ids if t in self._issued_by_tool), None)
            if issued is None or not issued.reasoning_blocks:
                continue
            sent = tuple(_reasoning_key(b) for b in content if b.get("type") in _REASONING_TYPES)
            if sent != issued.reasoning_blocks:
                raise _Reject(f"messages.{n}: {_REASONING_MISSING}")

    # -- cache -----------------------------------------------------------------------------------------
    def _cache_usage(self, model: str, blocks: Sequence[_Block], *, write: bool) -> CacheUsage:
        prefix_keys: list[bytes] = []
        cumulative = [0]
        digest = hashlib.sha256()
        for block in blocks:
            digest.update(hashlib.sha256(block.identity).digest())
            prefix_keys.append(digest.copy().digest())
            cumulative.append(cumulative[-1] + block.tokens)
        total = cumulative[-1]
        breakpoints = [i + 1 for i, b in enumerate(blocks) if b.ttl is not None]
        candidates: set[int] = set()
        for b in breakpoints:
            candidates.update(range(max(1, b - self.lookback_blocks), b + 1))
        now = self.now()
        for key in [k for k, entry in self._cache.items() if entry[2] < now]:
            del self._cache[key]  # past its lifetime: gone, as the vendor's is
        hit = max((k for k in candidates if (model, prefix_keys[k - 1]) in self._cache), default=0)
        if hit and write:  # a read refreshes the entry's lifetime (§4.4)
            entry = self._cache[(model, prefix_keys[hit - 1])]
            entry[2] = now + entry[1]
        read = cumulative[hit]
        split = {"5m": 0, "1h": 0}
        creation = 0
        if breakpoints and cumulative[breakpoints[-1]] >= self.cache_min_tokens:
            start = hit
            pending = 0
            for b in breakpoints:
                if b <= start:
                    continue
                pending += cumulative[b] - cumulative[start]
                start = b
                if cumulative[b] >= self.cache_min_tokens:
                    split[blocks[b - 1].ttl or "5m"] += pending
                    pending = 0
            creation = cumulative[breakpoints[-1]] - read
        if write:
            for b in breakpoints:
                if cumulative[b] >= self.cache_min_tokens:
                    ttl = _TTL_SECONDS.get(blocks[b - 1].ttl or "5m", 300)
                    self._cache[(model, prefix_keys[b - 1])] = [cumulative[b], ttl, now + ttl]
        return CacheUsage(
            input_tokens=total - read - creation,
            cache_creation_input_tokens=creation,
            cache_read_input_tokens=read,
            ephemeral_5m_input_tokens=split["5m"],
            ephemeral_1h_input_tokens=split["1h"],
        )

    # -- responses -------------------------------------------------------------------------------------
    def _build_message(
        self,
        model: str,
        thinking: _Thinking,
        action: ModelAction,
        usage: CacheUsage,
        prefix: tuple[_PrefixDigest, int] | None,
        seed: bytes | None = None,
    ) -> dict[str, Any]:
        """The response message; ``prefix`` (preserved-thinking models) is the request's prefix digest and
        the message index the response's blocks take, so each thinking block is bound to what precedes it.
        ``seed`` (a deterministic emulator): what its nonces and ids are derived from, else random/counted."""
        content: list[dict[str, Any]] = []
        thinking_tokens = 0

        def derived(label: bytes, i: int) -> bytes:
            assert seed is not None
            return self._mac(b"derive", seed, label, str(i).encode())

        def nonce(i: int) -> bytes | None:
            return None if seed is None else derived(b"nonce", i)[:_NONCE_LEN]

        def here() -> bytes | None:
            return prefix[0].digest() if prefix is not None else None

        def append(block: dict[str, Any]) -> None:
            content.append(block)
            if prefix is not None:
                prefix[0].add(prefix[1], "assistant", block)

        if thinking.on and action.reasoning is not None:
            shown = "" if thinking.display == "omitted" else action.reasoning
            if self.platform in _UNSIGNED:  # an unsigned block: the text is what goes back (§10.8)
                signature = ""
            else:
                signature = self.sign_thinking(model, shown, prefix_digest=here(), nonce=nonce(0))
            append({"type": "thinking", "thinking": shown, "signature": signature})
            thinking_tokens = count_tokens(action.reasoning)
        if thinking.on and action.redacted:
            data = self.issue_redacted(model, prefix_digest=here(), nonce=nonce(1))
            append({"type": "redacted_thinking", "data": data})
        output_tokens = thinking_tokens
        if action.text:
            content.append({"type": "text", "text": action.text})
            output_tokens += count_tokens(action.text)
        tool_ids: list[str] = []
        for i, call in enumerate(action.tool_calls):
            tool_id = (
                f"{self._tool_prefix}{next(self._tool_ids):03d}"
                if seed is None
                else f"{self._tool_prefix}{derived(b'tool', i).hex()[:24]}"
            )
            arguments = dict(call.arguments)
            content.append({"type": "tool_use", "id": tool_id, "name": call.name, "input": arguments})
            output_tokens += count_tokens(_compact(arguments))
            tool_ids.append(tool_id)
        issued = _Issued(
            model=model,
            reasoning_blocks=tuple(_reasoning_key(b) for b in content if b["type"] in _REASONING_TYPES),
            tool_ids=tuple(tool_ids),
        )
        for tool_id in tool_ids:
            self._issued_by_tool[tool_id] = issued
        if action.stop == "max_tokens":
            stop_reason = "max_tokens"
        elif tool_ids:
            stop_reason = "tool_use"
        else:
            stop_reason = "end_turn"
        return {
            "id": f"msg_emu_{next(self._msg_ids):03d}"
            if seed is None
            else f"msg_emu_{derived(b'message', 0).hex()[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": usage.ephemeral_5m_input_tokens,
                    "ephemeral_1h_input_tokens": usage.ephemeral_1h_input_tokens,
                },
                "output_tokens": output_tokens,
                "output_tokens_details": {"thinking_tokens": thinking_tokens},
                "service_tier": "standard",
                "inference_geo": INFERENCE_GEO,
            },
        }


# -- request checks (pure functions) -------------------------------------------------------------------
def _nonce(nonce: bytes | None) -> bytes:
    """``nonce`` when it is 12 bytes, a random one when None."""
    if nonce is None:
        return os.urandom(_NONCE_LEN)
    if not isinstance(nonce, bytes) or len(nonce) != _NONCE_LEN:
        raise ValueError(f"a nonce is {_NONCE_LEN} bytes, got {nonce!r}")
    return nonce


def _b64(text: str) -> bytes | None:
    """Strict standard base64: only the alphabet, the exact padding, nothing after it — the decoded bytes
    must encode back to ``text`` itself (so an extra ``=`` or a trailing byte is not the same value)."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def _tags(values: Iterable[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _content(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A validated message's content as a list of blocks (a string becomes one text block)."""
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _betas(request: RecordedRequest) -> frozenset[str]:
    """The ``anthropic-beta`` header's comma-separated values."""
    header = request.headers.get("anthropic-beta", "")
    return frozenset(part.strip() for part in header.split(",") if part.strip())


def _without_blocks(body: Mapping[str, Any], dropped: Sequence[_Dropped]) -> Mapping[str, Any]:
    """``body`` with the content blocks at ``dropped`` removed (what the model is shown)."""
    if not dropped:
        return body
    gone = {(n, m) for n, m, _ in dropped}
    messages = []
    for n, msg in enumerate(body["messages"]):
        blocks = _content(msg)
        kept = [b for m, b in enumerate(blocks) if (n, m) not in gone]
        messages.append({**msg, "content": kept} if len(kept) != len(blocks) else msg)
    return {**body, "messages": messages}


def _response_prefix(body: Mapping[str, Any], model: str) -> tuple[_PrefixDigest, int] | None:
    """For a preserved-thinking ``model``: the digest of everything before the response's first block, and
    the index of the message the response's blocks belong to (a final assistant prefill is continued)."""
    if not has_preserved_thinking(model):
        return None
    messages = body["messages"]
    prefix = _PrefixDigest(body)
    for n, msg in enumerate(messages):
        for block in _content(msg):
            prefix.add(n, str(msg["role"]), block)
    index = len(messages) - 1 if messages[-1]["role"] == "assistant" else len(messages)
    return prefix, index


def _check_thinking_compatibility(body: Mapping[str, Any], model: str, thinking: _Thinking) -> None:
    """The request-level rules that tie ``thinking`` to the model, ``tool_choice`` and sampling options."""
    if thinking.kind == "enabled" and is_adaptive_only(model):
        raise _Reject(_ERR_ADAPTIVE_ONLY)
    tool_choice = body.get("tool_choice")
    if (
        thinking.kind == "enabled"
        and isinstance(tool_choice, dict)
        and tool_choice.get("type") in ("any", "tool")
    ):
        raise _Reject(_ERR_FORCED_TOOL)
    if not thinking.on:
        return
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        raise _Reject(_ERR_TEMPERATURE)
    top_p = body.get("top_p")
    if top_p is not None and (not isinstance(top_p, (int, float)) or top_p < 0.95):
        raise _Reject(_ERR_TOP_P)
    if body.get("top_k") is not None:
        raise _Reject(_ERR_TOP_K)


def _check_thinking(value: Any, max_tokens: int, betas: frozenset[str] = frozenset()) -> _Thinking:
    if value is None:
        return _Thinking(on=False, display=None, kind="absent")
    if not isinstance(value, dict):
        raise _Reject("thinking: Input should be a valid dictionary or object to extract fields from")
    kind = value.get("type")
    if kind is None:
        raise _Reject("thinking: Unable to extract tag using discriminator 'type'")
    if kind not in _THINKING_TYPES:
        raise _Reject(
            f"thinking: Input tag '{kind}' found using 'type' does not match any of the expected tags: "
            f"{_tags(_THINKING_TYPES)}"
        )
    display = value.get("display")
    if display is not None and display not in ("summarized", "omitted"):
        raise _Reject(f"thinking.{kind}.display: Input should be 'summarized' or 'omitted'")
    if kind == "enabled":
        budget = value.get("budget_tokens")
        if budget is None:
            raise _Reject("thinking.enabled.budget_tokens: Field required")
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise _Reject("thinking.enabled.budget_tokens: Input should be a valid integer")
        if budget < 1024:
            raise _Reject("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= max_tokens:
            raise _Reject(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                f"documentation at {DOCS_EXTENDED_THINKING}#max-tokens-and-context-window-size"
            )
    prefix_mismatch = "error"
    binding = value.get("block_binding") if kind in ("enabled", "adaptive") else None
    if binding is not None:
        if BLOCK_BINDING_BETA not in betas:
            raise _Reject(_ERR_BINDING_NEEDS_BETA)
        if not isinstance(binding, dict):
            raise _Reject(f"thinking.{kind}.block_binding: Input should be a valid dictionary")
        behavior = binding.get("prefix_mismatch_behavior")
        if behavior is not None:
            if behavior not in _PREFIX_MISMATCH_BEHAVIORS:
                raise _Reject(
                    f"thinking.{kind}.block_binding.prefix_mismatch_behavior: Input should be 'error' or "
                    "'drop_block'"
                )
            prefix_mismatch = str(behavior)
    return _Thinking(
        on=kind in ("enabled", "adaptive"), display=display, kind=str(kind), prefix_mismatch=prefix_mismatch
    )


_PROPERTY_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")


def _check_effort(output_config: Any) -> None:
    """``output_config.effort`` is one of :data:`EFFORTS` ([SDK] ``output_config_param.py``; the wording is
    the API's validation style, [UNCONFIRMED] for this field)."""
    if not isinstance(output_config, dict) or "effort" not in output_config:
        return
    effort = output_config["effort"]
    if effort is not None and effort not in EFFORTS:
        allowed = ", ".join(f"'{e}'" for e in EFFORTS[:-1]) + f" or '{EFFORTS[-1]}'"
        raise _Reject(f"output_config.effort: Input should be {allowed}")


def _check_system_and_tools(body: Mapping[str, Any]) -> None:
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list):
            raise _Reject("system: Input should be a valid list")
        for i, block in enumerate(system):
            if (
                not isinstance(block, dict)
                or block.get("type") != "text"
                or not isinstance(block.get("text"), str)
            ):
                raise _Reject(f"system.{i}: system blocks must be text blocks with a string `text`")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _Reject("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                raise _Reject(f"tools.{i}.name: Field required")
            schema = tool.get("input_schema")
            # server tools (``type: "web_search_20250305"``, ...) carry no input_schema
            if tool.get("type", "custom") == "custom" and schema_problem(schema) is not None:
                raise _Reject(f"tools.{i}.custom.input_schema: {_ERR_SCHEMA}")
            properties = schema.get("properties") if isinstance(schema, dict) else None
            if isinstance(properties, dict) and not all(
                isinstance(k, str) and _PROPERTY_KEY.fullmatch(k) for k in properties
            ):
                # docs/protocols.md §4: property keys are [a-zA-Z0-9_.-]{1,64} (dots allowed)
                raise _Reject(
                    f"tools.{i}.custom.input_schema.properties: Property keys should match pattern "
                    "'^[a-zA-Z0-9_.-]{1,64}$'"
                )
    for path, holder in _cache_holders(body):
        _ttl(path, holder)


def _check_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _Reject("messages: Input should be a valid list")
    if not value:
        raise _Reject("messages: at least one message is required")
    for n, msg in enumerate(value):
        if not isinstance(msg, dict):
            raise _Reject(f"messages.{n}: Input should be a valid dictionary")
        for field in ("role", "content"):
            if field not in msg:
                raise _Reject(f"messages.{n}.{field}: Field required")
        if msg["role"] not in ("user", "assistant"):
            raise _Reject(f"messages.{n}.role: Input should be 'user' or 'assistant'")
        content = msg["content"]
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise _Reject(f"messages.{n}.content: Input should be a valid string or list of content blocks")
        if not content and not (n == len(value) - 1 and msg["role"] == "assistant"):
            raise _Reject(
                f"messages.{n}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        for m, block in enumerate(content):
            if not isinstance(block, dict):
                raise _Reject(f"messages.{n}.content.{m}: Input should be a valid dictionary")
            kind = block.get("type")
            if kind is None:
                raise _Reject(f"messages.{n}.content.{m}: Unable to extract tag using discriminator 'type'")
            if kind not in REQUEST_BLOCK_TYPES:
                raise _Reject(
                    f"messages.{n}.content.{m}: Input tag '{kind}' found using 'type' does not match any of "
                    f"the expected tags: {_tags(REQUEST_BLOCK_TYPES)}"
                )
            if kind in _REASONING_TYPES and "cache_control" in block:
                # thinking blocks cannot be cache breakpoints (inspect_ai PR #3967, LeenHawk/gproxy#67)
                path = f"messages.{n}.content.{m}.{kind}.cache_control"
                raise _Reject(f"{path}: Extra inputs are not permitted")
            if kind == "text" and not isinstance(block.get("text"), str):
                raise _Reject(f"messages.{n}.content.{m}.text.text: Field required")
            if kind == "text" and block["text"] == "":
                raise _Reject("messages: text content blocks must be non-empty")
            if kind == "tool_use":
                for field in ("id", "name", "input"):
                    if field not in block:
                        raise _Reject(f"messages.{n}.content.{m}.tool_use.{field}: Field required")
            if kind == "tool_result" and "tool_use_id" not in block:
                raise _Reject(f"messages.{n}.content.{m}.tool_result.tool_use_id: Field required")
    if value[0]["role"] != "user":
        raise _Reject('messages: first message must use the "user" role')
    for n in range(1, len(value)):
        role = value[n]["role"]
        if role == value[n - 1]["role"]:
            raise _Reject(
                f'messages: roles must alternate between "user" and "assistant", but found multiple '
                f'"{role}" roles in a row'
            )
    return value


def _cache_holders(body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, object) for every top-level block carrying ``cache_control``, in prompt order."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and tool.get("cache_control") is not None:
            found.append((f"tools.{i}", tool))
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            if isinstance(block, dict) and block.get("cache_control") is not None:
                found.append((f"system.{i}", block))
    messages = body.get("messages")
    if isinstance(messages, list):
        for n, msg in enumerate(messages):
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                for m, block in enumerate(content):
                    if isinstance(block, dict) and block.get("cache_control") is not None:
                        found.append((f"messages.{n}.content.{m}", block))
    return found


def _ttl(path: str, holder: Mapping[str, Any]) -> str:
    control = holder.get("cache_control")
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise _Reject(f"{path}.cache_control.type: Input should be 'ephemeral'")
    ttl = control.get("ttl", "5m")
    if ttl not in ("5m", "1h"):
        raise _Reject(f"{path}.cache_control.ttl: Input should be '5m' or '1h'")
    return str(ttl)


def _check_cache_control_count(body: Mapping[str, Any]) -> None:
    blocks = _prompt_blocks(body)
    found = sum(1 for b in blocks if b.ttl is not None)
    if found > 4:
        raise _Reject(f"A maximum of 4 blocks with cache_control may be provided. Found {found}.")


def _check_tool_pairing(messages: list[dict[str, Any]]) -> None:
    for n, msg in enumerate(messages):
        blocks = _content(msg)
        if msg["role"] == "assistant":
            uses = [str(b["id"]) for b in blocks if b.get("type") == "tool_use"]
            if not uses:
                continue
            following = messages[n + 1] if n + 1 < len(messages) else None
            results: set[str] = set()
            if following is not None and following["role"] == "user":
                results = {
                    str(b.get("tool_use_id")) for b in _content(following) if b.get("type") == "tool_result"
                }
            missing = [u for u in uses if u not in results]
            if missing:
                raise _Reject(
                    f"messages.{n}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )
        else:
            previous = messages[n - 1] if n > 0 else None
            uses_before: set[str] = set()
            if previous is not None and previous["role"] == "assistant":
                uses_before = {str(b.get("id")) for b in _content(previous) if b.get("type") == "tool_use"}
            for m, block in enumerate(blocks):
                if block.get("type") != "tool_result":
                    continue
                tool_use_id = str(block.get("tool_use_id"))
                if tool_use_id not in uses_before:
                    raise _Reject(
                        f"messages.{n}.content.{m}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{tool_use_id}. Each `tool_result` block must have a corresponding `tool_use` block "
                        "in the previous message."
                    )


# -- prompt blocks -------------------------------------------------------------------------------------
def _strip(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _prompt_blocks(body: Mapping[str, Any]) -> list[_Block]:
    """The request's prompt as cache blocks (tools → system → messages), see the module docstring."""
    out: list[_Block] = []

    def add(section: str, raw: Any, path: str) -> None:
        if isinstance(raw, dict):
            text = _compact(_strip(raw))
            ttl = _ttl(path, raw) if raw.get("cache_control") is not None else None
        else:
            text = _compact({"type": "text", "text": raw})
            ttl = None
        out.append(
            _Block(identity=f"{section}\x00".encode() + text.encode(), tokens=count_tokens(text), ttl=ttl)
        )

    for i, tool in enumerate(body.get("tools") or []):
        add("tool", tool, f"tools.{i}")
    system = body.get("system")
    if isinstance(system, str):
        add("system", system, "system")
    elif isinstance(system, list):
        for i, block in enumerate(system):
            add("system", block, f"system.{i}")
    for n, msg in enumerate(body.get("messages") or []):
        content = msg["content"]
        section = f"message\x00{n}\x00{msg['role']}"
        if isinstance(content, str):
            add(section, content, f"messages.{n}")
        else:
            for m, block in enumerate(content):
                add(section, block, f"messages.{n}.content.{m}")
    top = body.get("cache_control")
    if top is not None and out:
        ttl = _ttl("cache_control", {"cache_control": top})
        last = out[-1]
        if last.ttl is None:
            out[-1] = attrs.evolve(last, ttl=ttl)
    return out


# -- streaming -----------------------------------------------------------------------------------------
def _stream_events(message: Mapping[str, Any]) -> Iterable[bytes]:
    usage = dict(message.get("usage") or {})
    start_usage = {k: v for k, v in usage.items() if k not in ("output_tokens", "output_tokens_details")}
    start_usage["output_tokens"] = 1
    head = {
        k: v
        for k, v in message.items()
        if k not in ("content", "stop_reason", "stop_sequence", "usage", "context_management")
    }
    head.update({"content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage})
    yield sse_event("message_start", {"type": "message_start", "message": head})
    yield sse_event("ping", {"type": "ping"})
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type")
        if kind == "thinking":
            yield _block_start(index, {"type": "thinking", "thinking": "", "signature": ""})
            for piece in _chunks(str(block.get("thinking", ""))):
                yield _block_delta(index, {"type": "thinking_delta", "thinking": piece})
            yield _block_delta(index, {"type": "signature_delta", "signature": block.get("signature", "")})
        elif kind == "text":
            yield _block_start(index, {**block, "text": ""})
            for piece in _chunks(str(block.get("text", ""))):
                yield _block_delta(index, {"type": "text_delta", "text": piece})
        elif kind == "tool_use":
            yield _block_start(index, {**block, "input": {}})
            for piece in _chunks(_compact(block.get("input", {}))):
                yield _block_delta(index, {"type": "input_json_delta", "partial_json": piece})
        else:
            yield _block_start(index, dict(block))
        yield sse_event("content_block_stop", {"type": "content_block_stop", "index": index})
    delta_usage = {
        k: usage[k]
        for k in (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "output_tokens",
            "output_tokens_details",
        )
        if k in usage
    }
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {
            "stop_reason": message.get("stop_reason"),
            "stop_sequence": message.get("stop_sequence"),
        },
        "usage": delta_usage,
    }
    if "context_management" in message:  # the SDK's BetaRawMessageDeltaEvent.context_management (§4.7)
        delta["context_management"] = message["context_management"]
    yield sse_event("message_delta", delta)
    yield sse_event("message_stop", {"type": "message_stop"})


def _block_start(index: int, block: Mapping[str, Any]) -> bytes:
    return sse_event(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
    )


def _block_delta(index: int, delta: Mapping[str, Any]) -> bytes:
    return sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
