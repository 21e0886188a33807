"""A strict emulator of the OpenAI Responses API (``POST /v1/responses``), written from docs/protocols.md §1.

What it enforces (each rule cites its section; error texts are the ones observed in the wild):

* **Pairing** (§1.4 B.1, §1.8): a replayed ``reasoning`` item must be immediately followed by the item that
  followed it in the response that produced it — the same id, or an id-less item of the same type (and
  the same ``call_id`` for a function call). Otherwise 400, ``param: "input"``:
  ``Item 'rs_…' of type 'reasoning' was provided without its required following item.``
  A reasoning item with nothing after it in its own response (§1.4 B.6) can therefore never be replayed.
* **Orphans** (§1.4 B.2): a ``function_call``/``message`` item that *carries an id* minted by this emulator
  after a reasoning item needs that reasoning item earlier in the input:
  ``Item 'fc_…' of type 'function_call' was provided without its required 'reasoning' item: 'rs_…'.`` /
  ``Item 'msg_…' was provided without its required 'reasoning' item: 'rs_…'.`` An *id-less* replayed
  item is accepted: that is how a client legally drops reasoning.
* **Tool outputs** (§1.4 B.3/B.4): ``No tool call found for function call output with call_id call_….``
  when no earlier ``function_call`` has that ``call_id``; ``No tool output found for function call
  call_….`` when a ``function_call`` has no later output although something other than reasoning or
  function calls follows it (a trailing, still-pending group of calls is fine).
* **Encrypted content** (§1.2, §1.8): ``encrypted_content`` is ``"gAAAAAB" + urlsafe_b64(body + mac)``
  where ``body`` is the JSON ``{"id","model","nonce","reasoning"}`` and ``mac = HMAC-SHA256(secret,
  body)``. A replayed blob that does not verify, names another model, or names another item id →
  400 ``code: invalid_encrypted_content``, ``param: null``:
  ``The encrypted content gAAA...xyz= could not be verified.`` (first 4 and last 4 characters of the
  blob, the wording of openai/codex#8145 and #8132). The blob is decoded strictly: URL-safe alphabet only,
  and the decoded bytes must encode back to the very string sent, so a character appended after its
  padding, an extra ``=`` or a standard-alphabet ``+``/``/`` spelling is a different blob and gets the same
  400 (the vendor treats the blob as opaque bytes to verify, §1.8; a relaxed decoder would accept such
  strings as the original value, which the real service does not).
* **Unpersisted references** (§1.4 B.5): an ``item_reference`` (or a bare ``{"id": …}``), or a reasoning
  item without ``encrypted_content``, resolves only against items of responses created with
  ``store=true``; otherwise **404** ``Item with id 'rs_…' not found. Items are not persisted when
  `store` is set to false. Try again with `store` set to true, or remove this item from your input.``
* **Chaining** (§1.1, §1.4 A): ``store`` defaults to true and keeps the response's full input (chain
  included) plus its output; ``previous_response_id`` prepends that chain, and is 404
  ``Previous response with id 'resp_…' not found.`` when unknown or created with ``store=false``.
* **Model aliases** (see :mod:`reasonstate.testing.openai`): a request for an alias in
  :data:`MODEL_ALIASES` (from https://platform.openai.com/docs/models/gpt-5; ``gpt-5`` →
  ``gpt-5-2025-08-07``, ``gpt-5-mini`` → ``gpt-5-mini-2025-08-07``, …; more with ``aliases=``) is answered
  with the dated id in ``model`` (the JSON body, ``response.created``, ``response.in_progress`` and the
  terminal event). A dated id or an unknown name is echoed unchanged. Everything below that names "the
  model" means the resolved id: ``encrypted_content`` is sealed with it and verified against it, so a blob
  minted under ``gpt-5`` verifies under ``gpt-5`` and ``gpt-5-2025-08-07`` and nowhere else; the cache
  namespace uses it; stored responses (``previous_response_id``) are not tied to a model, but the blobs in
  a stored chain are verified against the resolved id of the request that continues it.
* **Compaction** (§1.9): a request with ``context_management=[{"type": "compaction", "compact_threshold":
  N}]`` whose rendered prompt is ``>= N`` tokens gets a ``compaction`` item (``cmp_…``, its
  ``encrypted_content`` sealed like a reasoning blob for the model) first in its output; the prompt is
  always rendered from the newest compaction item of the input on (it replaces every item before it), so a
  client that prunes and one that replays everything send the same prompt. A compaction item that does not
  verify, names another model or another id → 400 ``invalid_encrypted_content``: ``The encrypted content
  for item cmp_em...._001 could not be verified. Reason: Encrypted content could not be decrypted or
  parsed.`` (by the blob's ends when id-less). ``POST /v1/responses/compact`` answers
  ``{"object": "response.compaction", "output": [user messages…, compaction item], "usage"}`` and consumes
  no script action. The compacting request reports the usage of the prompt it received; the cache then
  holds the compacted window (instructions, tools, compaction item).
* **Conversations** (§1.10): ``POST /v1/conversations`` (``items``, ``metadata``) makes a ``conv_…``; a
  Responses request naming it in ``conversation`` (an id or ``{"id"}``) gets its items prepended, and its
  input and output are appended to it when it succeeds. An unknown conversation is 404 ``Conversation
  with id 'conv_…' not found.``; ``conversation`` with ``previous_response_id`` is 400
  ``mutually_exclusive_parameters``.
* Unknown input item types → 400 ``code: invalid_value``.
* :meth:`OpenAIResponsesEmulator.expire` forgets stored responses (the retention period ran out), so a
  later ``previous_response_id`` naming one gets the 404 above.

Checks run item by item in input order (the first violation wins); the "no tool output" check runs last.
A rejected request consumes no script action, is not stored and does not feed the cache.

**Prompt and cache** (§1.5). The prompt ``P`` is a sequence of rendered segments, in order:
``canonical_json({"instructions": …})`` if instructions are given, ``canonical_json({"tools": …})`` if the
tool list is non-empty, then every (chain-expanded, reference-resolved) input item as
``canonical_json(item without its "id" and "status" keys)`` — ids and status are metadata the model never
reads, so an id-less replay renders like a full one. A string ``input`` is the item
``{"content": input, "role": "user"}``. Tokens are item-aligned (each segment is its own token run, as
real chat formats delimit items with special tokens): ``input_tokens = Σ count_tokens(segment)``. The
cache is token-level: ``cached_tokens = openai_cached_tokens(input_tokens, max shared_item_tokens(P, Q))``
over the prompts ``Q`` of earlier successful requests with the same ``model`` and the same
``prompt_cache_key`` (absent is its own key) — see :mod:`reasonstate.testing.openai`. So a request that
extends an earlier one shares exactly that request's ``input_tokens``. An earlier prompt is forgotten once
it went unused longer than its request's retention on the emulator's clock (``prompt_cache_retention``:
``in_memory`` 1 hour, ``24h`` (and unnamed) 24 hours: the longest the vendor keeps one); a request that
shares the longest prefix with it starts its time again. The clock is the wall clock plus what
:meth:`~reasonstate.testing._server.Emulator.advance` added. ``cache_write_tokens`` is always 0.

**Hosted-tool items** (web search, file search, code interpreter, MCP, … — the other members of the SDK's
``ResponseInputItemParam`` union) are accepted as input items and rendered like any other item; they take
no part in the pairing rules.

**Output** from the :class:`ModelAction`: a ``reasoning`` item (omitted when ``reasoning.effort`` is
``"none"``; ``summary`` holds one ``summary_text`` when the action has reasoning text; ``encrypted_content``
only when ``include`` has ``reasoning.encrypted_content``), then a ``message`` if the action has text,
then one ``function_call`` per tool call (``arguments`` = ``raw_arguments`` or compact JSON). Usage:
``reasoning_tokens = count_tokens(reasoning)``; ``output_tokens = reasoning_tokens + count_tokens(text) +
Σ count_tokens(name + arguments)``. ``stop="max_tokens"`` gives ``status: "incomplete"`` with
``incomplete_details: {"reason": "max_output_tokens"}`` and marks the last output item incomplete.

**Response object** (every field a recorded real response carries, docs/protocols.md §1.3): besides the
above, ``background`` (false), ``max_tool_calls``, ``safety_identifier``, ``temperature`` (1.0 unless
sent), ``top_logprobs`` (0), ``top_p`` (1.0), ``user``, ``prompt_cache_retention`` and ``service_tier``
(``"default"`` for ``"auto"`` or absent), echoing the request where it sent them ([3P] a recorded gpt-5
response, beingglitch/aihub ``src/api.md``). From gpt-5.5 on (:func:`reports_completion_fields`) also
``completed_at`` (a completed response's time), ``moderation`` (null: no moderated completion was
requested), ``prompt_cache_retention`` ``"24h"`` unless sent (the only retention of these models, [SDK]
``response.py``), and ``tool_usage`` with zero counts (no hosted tool ran; recorded in streamed responses;
[SDK] ``ToolUsage``: "tool families with no recorded usage have zero counts"), in the JSON body and the
streamed terminal response alike, so the two stay equal.

**Requests refused before anything runs**: a key other than the accepted ones (401 ``invalid_api_key``);
a ``model`` outside :data:`~reasonstate.testing.openai.KNOWN_MODELS` (404 ``model_not_found``); a
``reasoning.effort`` outside :data:`~reasonstate.testing.openai.REASONING_EFFORTS` (400 ``invalid_value``,
``param: "reasoning.effort"``); a function tool whose ``parameters`` is not a valid object JSON Schema
(400 ``invalid_function_parameters``, ``param: "tools[i].parameters"``).

**Streaming** (§1.6): ``event: <type>`` + ``data`` with a ``sequence_number``; the reasoning item's
``response.output_item.added`` carries only the first half of its ``encrypted_content`` ("may be
incomplete"), the full blob arrives in ``response.output_item.done``; the stream ends with
``response.completed`` (or ``response.incomplete``) carrying the full response and usage.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from reasonstate.testing._server import JSONResponse, RecordedRequest, Route, StreamResponse, sse_event
from reasonstate.testing.openai import (
    MODEL_ALIASES,
    REASONING_EFFORTS,
    OpenAIFamilyEmulator,
    Transform,
    canonical_json,
    effort_error,
    openai_cached_tokens,
    openai_error,
    shared_item_tokens,
    tool_schema_error,
)
from reasonstate.testing.script import ModelAction, Script, ToolCallSpec, count_tokens

__all__ = [
    "ENCRYPTED_CONTENT_INCLUDE",
    "MODEL_ALIASES",
    "OpenAIResponsesEmulator",
    "reports_completion_fields",
]

ENCRYPTED_CONTENT_INCLUDE = "reasoning.encrypted_content"
_BLOB_PREFIX = "gAAAAAB"  # what real blobs start with (Fernet tokens); purely cosmetic here
_INPUT_TYPES = ("message", "reasoning", "function_call", "function_call_output", "item_reference")
# the SDK's other ``ResponseInputItemParam`` members that a response can also output (hosted tools)
_HOSTED_TYPES = (
    "web_search_call",
    "file_search_call",
    "computer_call",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "custom_tool_call",
    "tool_search_call",
    "compaction",
)
_CHUNK = 8  # characters per streamed delta
_ZERO_TOOL_USAGE: dict[str, Any] = {
    "image_gen": {
        "input_tokens": 0,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
        "output_tokens": 0,
        "total_tokens": 0,
    },
    "web_search": {"num_requests": 0},
}


#: the longest an unused prompt stays cached, per ``prompt_cache_retention`` (§1.5: in memory "always removes
#: them within one hour of the cache's last use"; extended "up to a maximum of 24 hours")
RETENTION_SECONDS = {"in_memory": 3600, "24h": 86400}


def _lifetime(body: Mapping[str, Any], model: str) -> int:
    """The request's retention in seconds: the one it names, else ``24h`` (gpt-5.5 on: the only one; older
    models: the default of an organisation without zero data retention, which the emulator stands for)."""
    named = body.get("prompt_cache_retention")
    return RETENTION_SECONDS.get(named if isinstance(named, str) else "24h", 86400)


def reports_completion_fields(model: str) -> bool:
    """Whether ``model`` (a resolved id) is gpt-5.5 or later, whose responses carry ``completed_at``,
    ``moderation`` and a streamed ``tool_usage``."""
    match = re.match(r"gpt-(\d+)\.(\d+)", model)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (5, 5)


def _segment(item: dict[str, Any]) -> bytes:
    """An input item as rendered: without its ``id`` and ``status`` (metadata the model never reads)."""
    return canonical_json({k: v for k, v in item.items() if k not in ("id", "status")}).encode()


def _typed(message: dict[str, Any]) -> dict[str, Any]:
    """A user message as an output item: typed, its text as ``input_text`` parts."""
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "input_text", "text": content}]
    return {"type": "message", "role": "user", "content": copy.deepcopy(content)}


def _window(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items the model reads: from the newest compaction item on (§1.9: it replaces what came before)."""
    at = max((i for i, item in enumerate(items) if _item_type(item) == "compaction"), default=0)
    return items[at:]


def _conversation_id(body: dict[str, Any]) -> str | None:
    """The request's ``conversation``: an id string or ``{"id": ...}`` (§1.10)."""
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if isinstance(conversation, str) else None


def _compaction_threshold(body: dict[str, Any]) -> int | None:
    """``compact_threshold`` of the request's ``context_management`` compaction entry, if any (§1.9)."""
    for entry in body.get("context_management") or ():
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            threshold = entry.get("compact_threshold")
            if isinstance(threshold, int) and not isinstance(threshold, bool):
                return threshold
    return None


class _Reject(Exception):
    """A validation failure, carrying the vendor response to send."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__(response.payload)
        self.response = response


@attrs.frozen(slots=True)
class _Minted:
    """What the emulator remembers about an output item it produced (needed for the pairing rules)."""

    type: str
    response_id: str
    reasoning_id: str | None = None  # fc_/msg_: the reasoning item earlier in the same output
    next_id: str | None = None  # rs_: the item right after it in the same output
    next_type: str | None = None
    next_call_id: str | None = None


def _not_persisted(item_id: str) -> _Reject:
    message = (
        f"Item with id '{item_id}' not found. Items are not persisted when `store` is set to false. "
        "Try again with `store` set to true, or remove this item from your input."
    )
    return _Reject(openai_error(404, message, param="input"))


def _input_error(message: str) -> _Reject:
    return _Reject(openai_error(400, message, param="input"))


def _item_type(item: dict[str, Any]) -> str | None:
    """The input item's type; an EasyInputMessage has only ``role``; a bare ``{"id"}`` is a reference."""
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    if "role" in item:
        return "message"
    if set(item) == {"id"}:
        return "item_reference"
    return None


def _arguments(call: ToolCallSpec) -> str:
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(dict(call.arguments), ensure_ascii=False, separators=(",", ":"))


def _chunks(text: str) -> list[str]:
    return [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)] or [""]


def _effective_context(model: str, requested: Any) -> str:
    """§1.1: ``auto``/absent → ``all_turns`` for the gpt-5.6 family and later, ``current_turn`` before."""
    if requested in ("current_turn", "all_turns"):
        return str(requested)
    match = re.match(r"gpt-(\d+)\.(\d+)", model)
    if match and (int(match.group(1)), int(match.group(2))) >= (5, 6):
        return "all_turns"
    return "current_turn"


class OpenAIResponsesEmulator(OpenAIFamilyEmulator):
    """``POST /v1/responses`` under the rules in the module docstring.

    Point a real SDK client at it (the SDK's base URL is the root plus ``/v1``; :meth:`client` does this)::

        emulator = OpenAIResponsesEmulator(script).start()
        client = openai.OpenAI(base_url=emulator.base_url + "/v1", api_key="test-key")

    It rejects (400/401/404 in OpenAI's error envelope, nothing consumed from the script): a missing
    bearer key; an ``encrypted_content`` blob that was edited or issued for another model or organisation;
    a reference to an item or ``previous_response_id`` that was not stored (``store: false``, expired);
    a ``function_call_output`` without its ``function_call``; malformed input items.

    ``secret`` keys the ``encrypted_content`` HMAC (the fixed default secret when None, so a restarted
    emulator verifies what an earlier one sealed; another secret stands for another organisation).
    ``api_key``: the accepted key(s) (``test-key``, ``emulator-key``). ``models``: ids served on top of
    :data:`~reasonstate.testing.openai.KNOWN_MODELS`. ``transform`` rewrites each
    successful response body before it is sent (streamed events are derived from the rewritten body).
    ``aliases`` adds alias → dated id entries to (or overrides entries of) :data:`MODEL_ALIASES`.
    """

    def __init__(
        self,
        script: Iterable[ModelAction] | Script = (),
        *,
        secret: bytes | str | None = None,
        transform: Transform | None = None,
        aliases: Mapping[str, str] | None = None,
        api_key: str | Iterable[str] | None = None,
        models: Iterable[str] = (),
        platform: str = "openai",
        resource: str | None = None,
    ) -> None:
        super().__init__(
            script,
            secret=secret,
            transform=transform,
            name="openai-responses-emulator",
            aliases={**MODEL_ALIASES, **dict(aliases or {})},
            api_key=api_key,
            models=models,
            platform=platform,
            resource=resource,
        )
        self._counters: Counter[str] = Counter()
        self._minted: dict[str, _Minted] = {}
        self._stored_items: dict[str, dict[str, Any]] = {}
        self._chains: dict[str, list[dict[str, Any]]] = {}
        self._conversations: dict[str, list[dict[str, Any]]] = {}  # conv_ id -> its items, in order
        # namespace -> [prompt, its lifetime in seconds, its expiry on the emulator's clock]
        self._prompts: dict[tuple[str, str | None], list[list[Any]]] = {}

    def _routes(self) -> list[Route]:
        return [
            Route("POST", r"/v1/responses", self._handle),
            Route("POST", r"/v1/responses/compact", self._handle_compact),
            Route("POST", r"/v1/conversations", self._handle_conversation),
        ]

    # -- public introspection ----------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Forget every earlier prompt: the next request of any model reports ``cached_tokens == 0``."""
        with self._lock:
            self._prompts.clear()

    def expire(self, *response_ids: str) -> None:
        """Forget stored responses (all when none are named), as when their retention period ends."""
        with self._lock:
            for resp_id in response_ids or tuple(self._chains):
                self._chains.pop(resp_id, None)

    def stored_response_ids(self) -> list[str]:
        """Ids of the responses created with ``store=true``, oldest first."""
        with self._lock:
            return list(self._chains)

    def verify_encrypted_content(self, blob: str, *, model: str, item_id: str | None = None) -> bool:
        """True when ``blob`` was minted by this emulator for ``model`` (and ``item_id``, if given); an alias
        and its dated id are the same model."""
        payload = self._open_blob(blob)
        if payload is None or payload.get("model") != self.resolve_model(model):
            return False
        return item_id is None or payload.get("id") == item_id

    # -- the handler -------------------------------------------------------------------------------
    def _handle(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        body = self._json_body(request)
        if isinstance(body, JSONResponse):
            return body
        refused = self._refused_options(body)
        if refused is not None:
            return refused
        model = self.resolve_model(body["model"])
        with self._lock:
            try:
                items = self._expand(body)
                self._validate(items, model=model)
            except _Reject as rejected:
                return rejected.response
            action = self.script.take(body)
            response = self._respond(body, items, action, model=model)
        response = self._transformed(response)
        if body.get("stream"):
            return StreamResponse(self._events(response))
        return JSONResponse(200, response)

    @staticmethod
    def _refused_options(body: dict[str, Any]) -> JSONResponse | None:
        """OpenAI's 400 for a ``reasoning.effort`` it does not know or a function tool whose ``parameters``
        is not an object JSON Schema (module docstring); None when both are fine."""
        reasoning = body.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
        if effort is not None and effort not in REASONING_EFFORTS:
            return effort_error(effort, "reasoning.effort")
        return tool_schema_error(body.get("tools"), nested=False)

    # -- input: chain expansion and reference resolution (§1.4 A, B.5) -----------------------------
    def _expand(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        previous = body.get("previous_response_id")
        conversation = _conversation_id(body)
        if conversation is not None:
            if previous is not None:
                message = (
                    "Mutually exclusive parameters: Ensure you are only providing one of: "
                    "'previous_response_id' or 'conversation'."
                )
                raise _Reject(openai_error(400, message, code="mutually_exclusive_parameters"))
            if conversation not in self._conversations:
                message = f"Conversation with id '{conversation}' not found."
                raise _Reject(openai_error(404, message, param="conversation"))
            items.extend(copy.deepcopy(self._conversations[conversation]))
        if previous is not None:
            if previous not in self._chains:
                message = f"Previous response with id '{previous}' not found."
                raise _Reject(
                    openai_error(
                        404, message, param="previous_response_id", code="previous_response_not_found"
                    )
                )
            items.extend(copy.deepcopy(self._chains[previous]))
        raw = body.get("input", [])
        if isinstance(raw, str):
            raw = [{"role": "user", "content": raw}]
        if not isinstance(raw, list):
            raise _Reject(
                openai_error(400, "Invalid type for 'input': expected a string or an array.", param="input")
            )
        for index, item in enumerate(raw):
            if not isinstance(item, dict):
                raise _Reject(openai_error(400, f"Invalid type for 'input[{index}]': expected an object."))
            items.append(self._resolve(index, item))
        return items

    def _resolve(self, index: int, item: dict[str, Any]) -> dict[str, Any]:
        kind = _item_type(item)
        if kind in _HOSTED_TYPES:
            return item
        if kind not in _INPUT_TYPES:
            supported = ", ".join(f"'{t}'" for t in _INPUT_TYPES)
            message = f"Invalid value: '{kind}'. Supported values are: {supported}."
            raise _Reject(openai_error(400, message, param=f"input[{index}].type", code="invalid_value"))
        if kind == "item_reference":
            return self._lookup(str(item.get("id")))
        if kind == "reasoning" and not item.get("encrypted_content"):
            # Without the blob the server must look the item up: only stored items exist (§1.4 B.5).
            return self._lookup(str(item.get("id")))
        return item

    def _lookup(self, item_id: str) -> dict[str, Any]:
        stored = self._stored_items.get(item_id)
        if stored is None:
            raise _not_persisted(item_id)
        return copy.deepcopy(stored)

    # -- input validation (§1.4 B, §1.8) -----------------------------------------------------------
    def _validate(self, items: list[dict[str, Any]], *, model: str) -> None:
        reasoning_seen: set[str] = set()
        calls_seen: set[str] = set()
        for index, item in enumerate(items):
            kind = _item_type(item)
            if kind == "reasoning":
                rs_id = self._verified_reasoning_id(item, model=model)
                self._check_following(rs_id, item, items[index + 1] if index + 1 < len(items) else None)
                reasoning_seen.add(rs_id)
            elif kind in ("function_call", "message"):
                self._check_reasoning_present(item, reasoning_seen)
                if kind == "function_call":
                    calls_seen.add(str(item.get("call_id")))
            elif kind == "compaction":
                self._verify_compaction(item, model=model)
            elif kind == "function_call_output":
                call_id = item.get("call_id")
                if call_id not in calls_seen:
                    raise _input_error(f"No tool call found for function call output with call_id {call_id}.")
        for index, item in enumerate(items):
            if _item_type(item) != "function_call":
                continue
            call_id = item.get("call_id")
            later = items[index + 1 :]
            answered = any(
                _item_type(x) == "function_call_output" and x.get("call_id") == call_id for x in later
            )
            moved_on = any(_item_type(x) not in ("reasoning", "function_call") for x in later)
            if not answered and moved_on:
                raise _input_error(f"No tool output found for function call {call_id}.")

    def _verified_reasoning_id(self, item: dict[str, Any], *, model: str) -> str:
        blob = item.get("encrypted_content")
        if not isinstance(blob, str):  # resolved from the store: minted here, trusted
            return str(item.get("id"))
        payload = self._open_blob(blob)
        claimed = item.get("id")
        if (
            payload is None
            or payload.get("model") != model
            or (claimed is not None and payload.get("id") != claimed)
        ):
            message = f"The encrypted content {blob[:4]}...{blob[-4:]} could not be verified."
            raise _Reject(openai_error(400, message, code="invalid_encrypted_content"))
        return str(payload["id"])

    def _verify_compaction(self, item: dict[str, Any], *, model: str) -> None:
        """§1.9: a compaction item's blob must be one this organisation sealed for this very model (and its
        id, when the item names one); otherwise the vendor's 400 ``invalid_encrypted_content``."""
        blob = item.get("encrypted_content")
        claimed = item.get("id")
        payload = self._open_blob(blob) if isinstance(blob, str) else None
        if (
            payload is not None
            and payload.get("model") == model
            and str(payload.get("id", "")).startswith("cmp_")
            and (claimed is None or payload.get("id") == claimed)
        ):
            return
        if isinstance(claimed, str):  # openai/codex#35334: the item is named by its id
            what = f"for item {claimed[:6]}....{claimed[-4:]}"
        else:  # openclaw/openclaw#110075: by the blob's first and last four characters
            shown = blob if isinstance(blob, str) else ""
            what = f"{shown[:4]}...{shown[-4:]}"
        message = (
            f"The encrypted content {what} could not be verified. "
            "Reason: Encrypted content could not be decrypted or parsed."
        )
        raise _Reject(openai_error(400, message, code="invalid_encrypted_content"))

    def _compaction_item(self, items: list[dict[str, Any]], *, model: str) -> dict[str, Any]:
        """A new compaction item standing for ``items`` (the prompt's items from the latest compaction
        on), sealed for ``model``: what it summarizes is the digest of their rendered segments."""
        cmp_id = self._mint("cmp")
        summarized = hashlib.sha256(b"".join(_segment(i) for i in items)).hexdigest()
        blob = self._seal(item_id=cmp_id, model=model, reasoning=summarized)
        return {"id": cmp_id, "type": "compaction", "encrypted_content": blob}

    def _check_following(self, rs_id: str, item: dict[str, Any], following: dict[str, Any] | None) -> None:
        minted = self._minted.get(rs_id)
        shown = item.get("id", rs_id)
        error = _input_error(
            f"Item '{shown}' of type 'reasoning' was provided without its required following item."
        )
        if following is None:
            raise error
        kind = _item_type(following)
        if minted is None:  # verified but not remembered (same secret, other emulator): shape check only
            if kind not in ("function_call", "message") or following.get("role", "assistant") != "assistant":
                raise error
            return
        if minted.next_type is None or kind != minted.next_type:
            raise error
        if "id" in following:
            if following["id"] != minted.next_id:
                raise error
        elif kind == "function_call" and following.get("call_id") != minted.next_call_id:
            raise error

    def _check_reasoning_present(self, item: dict[str, Any], reasoning_seen: set[str]) -> None:
        item_id = item.get("id")
        if not isinstance(item_id, str):
            return  # id-less replay: the client dropped the reasoning on purpose, which is legal
        minted = self._minted.get(item_id)
        if minted is None or minted.reasoning_id is None or minted.reasoning_id in reasoning_seen:
            return
        if minted.type == "function_call":
            message = (
                f"Item '{item_id}' of type 'function_call' was provided without its required "
                f"'reasoning' item: '{minted.reasoning_id}'."
            )
        else:
            required = minted.reasoning_id
            message = f"Item '{item_id}' was provided without its required 'reasoning' item: '{required}'."
        raise _input_error(message)

    # -- encrypted content -------------------------------------------------------------------------
    def _seal(self, *, item_id: str, model: str, reasoning: str) -> str:
        body = canonical_json(
            {"id": item_id, "model": model, "nonce": secrets.token_hex(8), "reasoning": reasoning}
        ).encode()
        mac = hmac.new(self.secret, body, hashlib.sha256).digest()
        return _BLOB_PREFIX + base64.urlsafe_b64encode(body + mac).decode()

    def _open_blob(self, blob: str) -> dict[str, Any] | None:
        if not blob.startswith(_BLOB_PREFIX):
            return None
        encoded = blob[len(_BLOB_PREFIX) :]
        try:
            raw = base64.b64decode(encoded.encode("ascii"), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            return None
        if base64.urlsafe_b64encode(raw).decode("ascii") != encoded:
            return None  # strict: exactly the padding it was minted with, nothing after it, no "+/"
        body, mac = raw[:-32], raw[-32:]
        if len(raw) <= 32 or not hmac.compare_digest(
            mac, hmac.new(self.secret, body, hashlib.sha256).digest()
        ):
            return None
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        return payload if isinstance(payload, dict) else None

    # -- output ------------------------------------------------------------------------------------
    def _mint(self, kind: str) -> str:
        self._counters[kind] += 1
        return f"{kind}_emu_{self._counters[kind]:03d}"

    def _respond(
        self, body: dict[str, Any], items: list[dict[str, Any]], action: ModelAction, *, model: str
    ) -> dict[str, Any]:
        """The response to ``body``; ``model`` is the resolved (dated) id it is bound to and answered with."""
        resp_id = self._mint("resp")
        requested_reasoning = body.get("reasoning") or {}
        include = body.get("include") or []
        output: list[dict[str, Any]] = []
        reasoning_text = action.reasoning or ""
        rs_id: str | None = None
        if requested_reasoning.get("effort") != "none":
            rs_id = self._mint("rs")
            summary = [{"type": "summary_text", "text": action.reasoning}] if action.reasoning else []
            reasoning_item: dict[str, Any] = {"id": rs_id, "type": "reasoning", "summary": summary}
            if ENCRYPTED_CONTENT_INCLUDE in include:
                reasoning_item["encrypted_content"] = self._seal(
                    item_id=rs_id, model=model, reasoning=reasoning_text
                )
            reasoning_item["status"] = "completed"
            output.append(reasoning_item)
        if action.text is not None:
            text_part = {"type": "output_text", "text": action.text, "annotations": [], "logprobs": []}
            output.append(
                {
                    "id": self._mint("msg"),
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [text_part],
                }
            )
        for call in action.tool_calls:
            n = self._mint("fc")
            output.append(
                {
                    "id": n,
                    "type": "function_call",
                    "call_id": "call" + n[2:],
                    "name": call.name,
                    "arguments": _arguments(call),
                    "status": "completed",
                }
            )
        incomplete = action.stop == "max_tokens"
        if incomplete and output:
            output[-1]["status"] = "incomplete"
        prompt = self._prompt(body, items)
        compacted = _compaction_threshold(body)
        if compacted is not None and sum(math.ceil(len(s) / 4) for s in prompt) < compacted:
            compacted = None
        if compacted is not None:  # §1.9: compact first, the reply follows the compaction item
            output.insert(0, self._compaction_item(_window(items), model=model))
        self._remember(resp_id, output)

        namespace = (model, body.get("prompt_cache_key"))
        now = self.now()
        earlier = self._prompts.setdefault(namespace, [])
        earlier[:] = [entry for entry in earlier if entry[2] >= now]  # gone by its lifetime's end
        input_tokens = sum(math.ceil(len(segment) / 4) for segment in prompt)
        shared = [shared_item_tokens(prompt, entry[0]) for entry in earlier]
        matched = max(shared, default=0)
        for entry, entry_shared in zip(earlier, shared, strict=True):
            if matched and entry_shared == matched:  # the prefix was used: its lifetime starts again
                entry[2] = now + entry[1]
        lifetime = _lifetime(body, model)
        earlier.append([prompt, lifetime, now + lifetime])
        if compacted is not None:  # the window the next request starts from: the compaction item
            window = self._prompt(body, [output[0]])
            earlier.append([window, lifetime, now + lifetime])
        reasoning_tokens = count_tokens(reasoning_text) if rs_id is not None else 0
        output_tokens = (
            reasoning_tokens
            + count_tokens(action.text or "")
            + sum(count_tokens(c.name + _arguments(c)) for c in action.tool_calls)
        )
        conversation = _conversation_id(body)
        if conversation is not None:  # §1.10: the request's input and output join the conversation
            self._conversations[conversation] = copy.deepcopy(items + output)
        store = body.get("store", True) is not False
        if store:
            self._chains[resp_id] = copy.deepcopy(items + output)
            for item in output:
                self._stored_items[item["id"]] = copy.deepcopy(item)
        return {
            "id": resp_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if incomplete else "completed",
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "reasoning": {
                "effort": requested_reasoning.get("effort", "medium"),
                "summary": requested_reasoning.get("summary"),
                "context": _effective_context(model, requested_reasoning.get("context")),
            },
            "store": store,
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "truncation": body.get("truncation", "disabled"),
            "metadata": body.get("metadata") or {},
            "input_transformations": [],
            **self._recorded_fields(body, model, completed=not incomplete),
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {
                    "cached_tokens": openai_cached_tokens(input_tokens, matched),
                    "cache_write_tokens": 0,
                },
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": input_tokens + output_tokens,
            },
        }

    @staticmethod
    def _recorded_fields(body: dict[str, Any], model: str, *, completed: bool) -> dict[str, Any]:
        """The fields a real response object carries that the rules above do not decide (module doc)."""
        newer = reports_completion_fields(model)
        tier = body.get("service_tier")
        fields: dict[str, Any] = {
            "background": bool(body.get("background", False)),
            "max_tool_calls": body.get("max_tool_calls"),
            "safety_identifier": body.get("safety_identifier"),
            "service_tier": "default" if tier in (None, "auto") else tier,
            "temperature": body.get("temperature", 1.0),
            "top_logprobs": body.get("top_logprobs", 0),
            "top_p": body.get("top_p", 1.0),
            "user": body.get("user"),
            "prompt_cache_retention": body.get("prompt_cache_retention", "24h" if newer else None),
        }
        if newer:
            fields["completed_at"] = int(time.time()) if completed else None
            fields["moderation"] = None
            fields["tool_usage"] = copy.deepcopy(_ZERO_TOOL_USAGE)
        return fields

    def _remember(self, resp_id: str, output: list[dict[str, Any]]) -> None:
        rs_id: str | None = None
        for index, item in enumerate(output):
            if item["type"] == "reasoning":
                following = output[index + 1] if index + 1 < len(output) else None
                self._minted[item["id"]] = _Minted(
                    type="reasoning",
                    response_id=resp_id,
                    next_id=following["id"] if following else None,
                    next_type=following["type"] if following else None,
                    next_call_id=following.get("call_id") if following else None,
                )
                rs_id = item["id"]
            else:
                self._minted[item["id"]] = _Minted(type=item["type"], response_id=resp_id, reasoning_id=rs_id)

    @staticmethod
    def _prompt(body: dict[str, Any], items: list[dict[str, Any]]) -> list[bytes]:
        segments: list[str] = []
        if body.get("instructions"):
            segments.append(canonical_json({"instructions": body["instructions"]}))
        if body.get("tools"):
            segments.append(canonical_json({"tools": body["tools"]}))
        prompt = [segment.encode() for segment in segments]
        # §1.9: the newest compaction item replaces every item before it
        return prompt + [_segment(item) for item in _window(items)]

    # -- POST /v1/conversations (§1.10) -----------------------------------------------------------
    def _handle_conversation(self, request: RecordedRequest) -> JSONResponse:
        """A new conversation holding ``items`` (resolved like input items, at most 20)."""
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        try:
            body = request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return openai_error(400, "We could not parse the JSON body of your request.")
        raw = body.get("items") or []
        if not isinstance(raw, list) or len(raw) > 20:
            return openai_error(400, "Invalid 'items': expected an array of at most 20 items.", param="items")
        with self._lock:
            try:
                items = [self._resolve(i, item) for i, item in enumerate(raw)]
            except _Reject as rejected:
                return rejected.response
            conv_id = self._mint("conv")
            self._conversations[conv_id] = copy.deepcopy(items)
        return JSONResponse(
            200,
            {
                "id": conv_id,
                "object": "conversation",
                "created_at": int(time.time()),
                "metadata": body.get("metadata") or {},
            },
        )

    def conversation_items(self, conversation_id: str) -> list[dict[str, Any]]:
        """The items the conversation holds, oldest first (a copy)."""
        with self._lock:
            return copy.deepcopy(self._conversations[conversation_id])

    # -- POST /v1/responses/compact (§1.9) ---------------------------------------------------------
    def _handle_compact(self, request: RecordedRequest) -> JSONResponse:
        """The compacted window of ``input`` (chain included): every user message, then one compaction
        item. No script action is consumed (compaction is not a model turn of the script)."""
        body = self._json_body(request)
        if isinstance(body, JSONResponse):
            return body
        model = self.resolve_model(body["model"])
        with self._lock:
            try:
                items = self._expand(body)
                self._validate(items, model=model)
            except _Reject as rejected:
                return rejected.response
            window = _window(items)
            users = [_typed(i) for i in window if _item_type(i) == "message" and i.get("role") == "user"]
            item = self._compaction_item(window, model=model)
            self._remember(self._mint("resp"), [item])
            prompt = self._prompt(body, items)
        input_tokens = sum(math.ceil(len(s) / 4) for s in prompt)
        output_tokens = math.ceil(len(item["encrypted_content"]) / 4)
        return JSONResponse(
            200,
            {
                "id": self._mint("resp"),
                "object": "response.compaction",
                "created_at": int(time.time()),
                "output": [*users, item],
                "usage": {
                    "input_tokens": input_tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": output_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": input_tokens + output_tokens,
                },
            },
        )

    # -- streaming (§1.6) --------------------------------------------------------------------------
    def _events(self, response: dict[str, Any]) -> Iterator[bytes]:
        sequence = 0

        def event(kind: str, **data: Any) -> bytes:
            nonlocal sequence
            payload = {"type": kind, "sequence_number": sequence, **data}
            sequence += 1
            return sse_event(kind, payload)

        pending = {
            **response,
            "status": "in_progress",
            "output": [],
            "usage": None,
            "incomplete_details": None,
            **({"completed_at": None} if "completed_at" in response else {}),
        }
        yield event("response.created", response=pending)
        yield event("response.in_progress", response=pending)
        for index, item in enumerate(response["output"]):
            yield from self._item_events(event, index, item)
        terminal = "response.completed" if response.get("status") == "completed" else "response.incomplete"
        yield event(terminal, response=response)

    @staticmethod
    def _item_events(event: Callable[..., bytes], index: int, item: dict[str, Any]) -> Iterator[bytes]:
        item_id = item.get("id")
        kind = item.get("type")
        if kind == "reasoning":
            added = {**item, "summary": [], "status": "in_progress"}
            if isinstance(item.get("encrypted_content"), str):
                blob = item["encrypted_content"]
                added["encrypted_content"] = blob[: len(blob) // 2]  # "may be incomplete" (§1.2)
            yield event("response.output_item.added", output_index=index, item=added)
            for s_index, part in enumerate(item.get("summary", [])):
                where = {"item_id": item_id, "output_index": index, "summary_index": s_index}
                yield event(
                    "response.reasoning_summary_part.added",
                    **where,
                    part={"type": "summary_text", "text": ""},
                )
                for piece in _chunks(part["text"]):
                    yield event("response.reasoning_summary_text.delta", **where, delta=piece)
                yield event("response.reasoning_summary_text.done", **where, text=part["text"])
                yield event("response.reasoning_summary_part.done", **where, part=part)
        elif kind == "message":
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "content": [], "status": "in_progress"},
            )
            for c_index, part in enumerate(item.get("content", [])):
                where = {"item_id": item_id, "output_index": index, "content_index": c_index}
                empty = {**part, "text": ""}
                yield event("response.content_part.added", **where, part=empty)
                for piece in _chunks(part.get("text", "")):
                    yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
                yield event("response.output_text.done", **where, text=part.get("text", ""), logprobs=[])
                yield event("response.content_part.done", **where, part=part)
        elif kind == "function_call":
            added = {**item, "arguments": "", "status": "in_progress"}
            yield event("response.output_item.added", output_index=index, item=added)
            where = {"item_id": item_id, "output_index": index}
            for piece in _chunks(item["arguments"]):
                yield event("response.function_call_arguments.delta", **where, delta=piece)
            yield event(
                "response.function_call_arguments.done",
                **where,
                arguments=item["arguments"],
                name=item["name"],
            )
        elif kind == "compaction":  # §1.9: the pass is announced while it samples (no summary content)
            yield event("response.output_item.added", output_index=index, item=item)
            yield event("response.compaction.compacting", item_id=item_id, output_index=index)
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
