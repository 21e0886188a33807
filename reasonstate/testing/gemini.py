"""A strict emulator of the Gemini API's ``generateContent`` (google-genai), for tests without the network.

Written from the vendor facts (docs/protocols.md §0, §5, §6 and the pages cited below), never from our
adapters: this module does not import ``reasonstate.adapters``, ``reasonstate.session`` or
``reasonstate.state``. ``google-genai`` is imported only inside :meth:`GeminiEmulator.client`.

Routes and auth (§0)
--------------------
* ``POST /{v1,v1beta}/models/{model}:generateContent`` — one ``GenerateContentResponse`` (JSON);
* ``POST /{v1,v1beta}/models/{model}:streamGenerateContent?alt=sse`` — the same response as SSE chunks
  (without ``alt=sse``: the chunks as one JSON array, as the REST API does).

google-genai 3.6.1 requests ``/v1/...`` by default; ``HttpOptions(api_version="v1beta")`` gives
``/v1beta/...``. Both versions behave identically here. The key is ``x-goog-api-key: <key>`` or
``?key=<key>``; neither → **403** ``PERMISSION_DENIED`` ``Method doesn't allow unregistered callers
(callers without established identity). Please use API Key or other form of API consumer identity to call
this API.`` ([3P] PublicAffairs/openai-gemini#92). A key other than the accepted ones (``test-key``,
``emulator-key``, or the constructor's ``api_key=``) → **400** ``INVALID_ARGUMENT`` ``API key not valid.
Please pass a valid API key.`` with an ``ErrorInfo`` detail of reason ``API_KEY_INVALID`` ([3P]
micr0-dev/lexido#54, continuedev/continue#9330). Then the model: one outside :data:`KNOWN_MODELS` (and the
aliases) → **404** ``NOT_FOUND`` ``models/X is not found for API version v1beta, or is not supported for
generateContent. Call ListModels to see the list of available models and their supported methods.`` (the
request's version; ``StreamGenerateContent`` for the streamed method; [3P] google/adk-python#200,
ChatGPTNextWeb/NextChat#4699). Every error is Google's envelope ``{"error": {"code",
"message", "status"}}`` (400 ``INVALID_ARGUMENT``, 403 ``PERMISSION_DENIED``, 404 ``NOT_FOUND``, 429
``RESOURCE_EXHAUSTED``, 500 ``INTERNAL``, 503 ``UNAVAILABLE``); google-genai raises ``errors.ClientError``
(4xx) / ``errors.ServerError`` (5xx), both ``errors.APIError``. A request answered with an error (a 4xx
or an injected :class:`Fault`) consumes no script action and feeds no cache.

Model names and aliases
-----------------------
The model is the path segment after ``models/``. :data:`MODEL_ALIASES` (plus the constructor's
``aliases=``) maps an alias to the versioned id the API answers with in ``modelVersion``
(``gemini-1.5-flash-latest`` → ``gemini-1.5-flash-002``, [3P] a recorded response in simonw/llm-gemini's
tests); any other name is echoed unchanged (stable names such as ``gemini-2.0-flash`` are echoed as is in
recorded responses). "The model" below is always the resolved id: signatures are minted and verified with
it and the cache is keyed by it, so an alias and its versioned id are one model. Behaviour follows the
resolved id's generation ``gemini-N[.M]``: **3 and later** think always, sign and *validate* signatures;
**2.5** thinks unless ``thinkingBudget`` is 0, signs but never validates; anything older, or a name without
a version, neither thinks nor signs.

Request validation (first violation wins, in this order)
--------------------------------------------------------
Field names are accepted in camelCase and snake_case (proto JSON; the SDK itself sends ``thinkingConfig``
with snake_case keys inside, §5.2); ``null`` means absent. Messages are the vendor's where they were seen
in the wild ([3P] unless marked):

1. Body: not JSON → ``Invalid JSON payload received. Unexpected token.``; an unknown field anywhere in the
   request, a content or a part → ``Invalid JSON payload received. Unknown name "x" at 'contents[0].parts[1]':
   Cannot find field.`` (``... Unknown name "x": Cannot find field.`` at the top level).
2. ``contents`` missing or empty → ``* GenerateContentRequest.contents: contents is not specified\\n``
   (vercel/ai#3775). Per content: ``role`` other than ``user``/``model`` (absent means ``user``) →
   ``Please use a valid role: user, model.``; no parts → ``* GenerateContentRequest.contents[N].parts:
   contents.parts must not be empty.\\n`` (langchain-ai/langchain-google#691). Per part: a wrongly typed
   value → ``Invalid value at 'contents[N].parts[M].text' (TYPE_STRING), 5`` ([UNCONFIRMED] for types other
   than bytes); a ``thoughtSignature`` that is not strict base64 (below) → ``Invalid value at
   'contents[N].parts[M].thought_signature' (TYPE_BYTES), Base64 decoding failed for "<value>"``
   (crmne/ruby_llm#521, google-gemini/gemini-cli#8003); no data field (``text``, ``inlineData``,
   ``fileData``, ``functionCall``, ``functionResponse``, ``executableCode``, ``codeExecutionResult``,
   ``toolCall``, ``toolResponse``) → ``* GenerateContentRequest.contents[N].parts[M].data: required oneof
   field 'data' must have one initialized field\\n`` (genkit-ai/genkit#3816; a part holding only a
   signature is such a part); two data fields → ``Invalid JSON payload received. Oneof field 'data' is
   already set. Cannot set 'function_call'`` [UNCONFIRMED]. ``functionCall`` needs a non-empty string
   ``name`` and an object ``args`` (if present); ``functionResponse`` a non-empty ``name`` and an object
   ``response``. ``systemInstruction`` parts are checked the same way (path ``system_instruction.parts[M]``).
3. ``generationConfig`` fields are the SDK's (``_GenerateContentConfig_to_mldev``). ``thinkingConfig``:
   ``includeThoughts`` bool, ``thinkingBudget`` int ≥ -1 (else ``The thinking budget (N) is invalid.``,
   RooCodeInc/Roo-Code#4399), ``thinkingLevel`` one of ``THINKING_LEVEL_UNSPECIFIED, MINIMAL, LOW, MEDIUM,
   HIGH, XHIGH`` in any letter case (``"low"`` and ``"high"`` were answered 200 in a recorded exchange; the
   SDK's ``ThinkingLevel`` is a ``CaseInSensitiveEnum``; [SDK] ``types.ThinkingLevel``); budget and level
   together → ``You can only set only one of thinking budget and thinking level.``
   (sterlp/eclipse-peon-ai#115). ``cachedContent`` → 400 (explicit caches are not emulated).
4. Function declarations (``tools[i].functionDeclarations[j]``, docs/protocols.md §0.2). A declaration's
   fields are ``name``, ``description``, ``behavior``, ``parameters``, ``parametersJsonSchema``,
   ``response``, ``responseJsonSchema``. ``parameters`` is the API's ``Schema``, a subset of OpenAPI 3.0, not
   JSON Schema, and is read as proto JSON: a keyword it has no field for (``$schema``,
   ``additionalProperties``, ``const``, ``uniqueItems``, ...) → ``Invalid JSON payload received. Unknown
   name "additionalProperties" at 'tools[0].function_declarations[0].parameters': Cannot find field.``
   (thClaws/thClaws#172, openswarm-ai/openswarm#24); a ``type`` list → ``Invalid JSON payload received.
   Unknown name "type" at '...parameters.properties[0].value': Proto field is not repeating, cannot start
   list.`` (brightwave-inc/tidebreak#1516); a ``type`` that names no ``Type`` (any letter case: the docs'
   REST examples write ``"object"``) → ``Invalid value at '...parameters.type'
   (type.googleapis.com/google.ai.generativelanguage.v1beta.Type), "strin"`` (the request's version;
   zereight/gitlab-mcp#166, google-gemini/deprecated-generative-ai-js#320); an ``enum`` member that is not
   a string → ``Invalid value at '...enum[0]' (TYPE_STRING), 0`` (thClaws/thClaws#172). A map entry is
   named by its position (``properties[1].value``), as proto JSON names it. Then, over the whole request,
   a property with neither ``type`` nor ``anyOf`` → ``* GenerateContentRequest.tools[0].
   function_declarations[0].parameters.properties[city].type: must be specified when not using one_of,
   any_of or all_of fields\n`` (danny-avila/LibreChat#6971; here the property is named).
   ``parametersJsonSchema`` is JSON Schema, which "must describe an object" and is "mutually exclusive
   with parameters" ([DOC] https://ai.google.dev/api/caching#FunctionDeclaration): a root that is not an
   object schema, or both fields → 400 ``INVALID_ARGUMENT`` in words of ours (the vendor's are
   [UNCONFIRMED]); what it refuses below the root is not known, so nothing is.
5. Function turns. A *function call turn* is a content with a ``functionCall`` part, a *function response
   turn* one with a ``functionResponse`` part. A call turn not right after a ``user`` content →
   ``Please ensure that function call turn comes immediately after a user turn or after a function response
   turn.`` (google-gemini/gemini-cli#11814); a response turn not right after a call turn → ``Please ensure
   that function response turn comes immediately after a function call turn.`` (langchain-ai/langchain#27799);
   a call turn whose next content (or the end of ``contents``) has a different number of
   ``functionResponse`` parts → ``Please ensure that the number of function response parts is equal to the
   number of function call parts of the function call turn.`` (google-gemini/gemini-cli#16415). Response
   names and ids are not matched against the calls. So "FC1+sig, FR1, FC2, FR2" for a parallel response is
   refused, as the thought-signatures FAQ says.
6. Thought signatures (gemini-3 and later only), [DOC] https://ai.google.dev/gemini-api/docs/thought-signatures.
   The *current turn* starts at the last ``user`` content holding a part that is not a ``functionResponse``
   (e.g. ``text``; a functionResponse-only message never starts a turn) — or at ``contents[0]`` if there is
   none — and runs to the end. Earlier turns are never checked. In the current turn, for each ``model``
   content in order (each is a *step*):

   a. its first ``functionCall`` part must carry a signature, else ``Function call is missing a
      thought_signature in functionCall parts. This is required for tools to work correctly, and missing
      thought_signature may lead to degraded model performance. Additional data, function call
      `default_api:<name>` , position <N>. Please refer to
      https://ai.google.dev/gemini-api/docs/thought-signatures for more details.`` where ``<name>`` is that
      call's name and ``N`` = (index of the content in ``contents``) + 1. The wording is the one seen in
      dozens of reports (lbjlaq/Antigravity-Manager#938, manthanabc/paws#103, ...); ``N`` being 1-based is
      inferred from them (the first call of a plain ``user, model, user`` history reports ``position 2``;
      every reported position of an alternating history is even) — [UNCONFIRMED] beyond that;
   b. every signature on any of its parts must verify (below) for the request's model and that very part,
      else ``Corrupted thought signature.`` (google-gemini/gemini-cli#13467, openclaw/openclaw#23771).

   A part whose signature is one of :data:`SENTINEL_SIGNATURES` (``skip_thought_signature_validator``,
   ``context_engineering_is_the_way_to_go`` — the documented FAQ dummies, compared after base64-decoding the
   wire string; the base64 of their ASCII text, which is what google-genai sends for
   ``thought_signature=b"skip_thought_signature_validator"``, counts too) passes a and b; ``accept_sentinels
   =False`` turns that off. Gemini 2.5 signatures are optional and never validated; a signature's base64 is
   parsed (rule 2) in every turn and on every model.

Signatures
----------
``thoughtSignature`` = base64 (standard alphabet, padded) of ``0xFB 0xFF | nonce(12) | HMAC-SHA256(secret,
"gemini-thought-signature" 0 model 0 nonce 0 canonical_json(core(part)))``, 46 bytes. ``core(part)`` is the
part without its signature: ``{data_field: value}`` plus ``"thought": true`` for a thought part, where a
``functionCall`` value is ``{"name", "args" (``{}`` when absent), "id" (only if present)}``; other
metadata fields are ignored. So a signature binds the exact part it was issued on, under the model that
issued it: moved to another part, edited, or replayed under another model it fails (b). (Binding the
part's content is emulator strictness: [3P] a test against gemini-3-flash-preview found edited call
arguments accepted.) The version tag makes every signature start with ``+/`` in the standard alphabet, so
google-genai's URL-safe re-encoding (``-_``, §5.1) always differs from the string served: the emulator
compares bytes. Decoding is strict: one alphabet per string (standard ``+/`` or URL-safe ``-_``), padding
either absent or exactly right, nothing after it, and the decoded bytes must encode back to the string
(so ``"AA="``, ``"AA==="``, ``"AA==x"`` or non-zero trailing bits are not base64).

Where signatures go (what the scripted model returns)
-----------------------------------------------------
gemini-3+: on the **first** ``functionCall`` part when the response has calls (single or parallel; each
sequential step is its own response, so each step's first call part is signed); with no calls, on the
**last** part if the model thought (``action.reasoning is not None``), else nowhere. gemini-2.5: on the
**first part, whatever its type**, when the response has calls and the model thought; else nowhere. Older
models: nowhere.

Responses
---------
Parts, in order: a thought part ``{"text": reasoning, "thought": true}`` (thinking on,
``thinkingConfig.includeThoughts`` true, non-empty ``action.reasoning``), a text part (non-empty
``action.text``), one ``{"functionCall": {"name", "args"}}`` per tool call (no ``id``: the Developer API
examples carry none). ``finishReason`` ``MAX_TOKENS`` for ``stop="max_tokens"``, else ``STOP``;
``candidates[0].index`` 0; ``modelVersion`` the resolved model; ``responseId`` ``emu-resp-001``, ... per
emulator. A response without parts has ``content: {"role": "model"}``.

Usage and the implicit prefix cache
-----------------------------------
The prompt ``P`` is a list of segments: ``canonical_json({"systemInstruction": [core(p) for its parts]})``
if given, ``canonical_json({"tools": tools})`` (as received) if non-empty, then one
``canonical_json({"parts": [core(p) ...], "role": role})`` per content (signatures, ``null`` fields and
unknown metadata do not count; key spelling does not matter). ``canonical_json`` sorts keys, no whitespace,
UTF-8 as is; a segment of ``b`` bytes is ``ceil(b / 4)`` tokens
(:func:`~reasonstate.testing.script.count_tokens`).

* ``promptTokenCount = Σ tokens(segment)`` — it **includes** the cached tokens (§5.3);
* ``cachedContentTokenCount = m if m >= min_tokens(model) else 0``, with ``m = max over Q of
  shared_item_tokens(P, Q)`` (:func:`reasonstate.testing.openai.shared_item_tokens`: every token of the
  common leading segments plus ``lcp // 4`` of the first segment that differs) over the prompts ``Q`` of the
  earlier successful requests of the same model (either endpoint). So a request that extends an earlier
  one by whole contents hits exactly that earlier ``promptTokenCount``, once it is ≥ the minimum.
  ``min_tokens`` (:func:`implicit_cache_min_tokens`, [DOC] https://ai.google.dev/gemini-api/docs/caching,
  2026-10 version of §5.3): 4096 for gemini-3 and later, 2048 for gemini-2.5, no implicit cache (always 0)
  before 2.5 — unless the constructor's ``cache_min_tokens`` overrides it for every model. Entries never
  expire; :meth:`GeminiEmulator.clear_cache` forgets them;
* ``thoughtsTokenCount = count_tokens(action.reasoning)`` whenever the model thinks (with or without
  ``includeThoughts``);
* ``candidatesTokenCount = Σ`` over the non-thought parts: ``count_tokens(text)`` for text,
  ``count_tokens(canonical_json({"args": ..., "name": ...}))`` for a call;
* ``totalTokenCount = promptTokenCount + candidatesTokenCount + thoughtsTokenCount``;
* ``promptTokensDetails = [{"modality": "TEXT", "tokenCount": promptTokenCount}]`` and, with a hit,
  ``cacheTokensDetails = [{"modality": "TEXT", "tokenCount": cachedContentTokenCount}]``.

A count that is 0 is **absent**, as proto3 JSON omits defaults (no ``cachedContentTokenCount`` without a hit,
no ``thoughtsTokenCount`` without thinking): read absent as 0.

Streaming (``alt=sse``)
-----------------------
Each event is ``data: <GenerateContentResponse JSON>\\r\\n\\r\\n`` with ``candidates[0].content.parts``
holding **one piece**, and ``modelVersion``/``responseId`` on every chunk. A text part (thought or not) comes
as up to three consecutive text pieces (same ``thought`` flag); if the part is signed, its signature arrives
after them on a piece ``{"text": "", ("thought": true,) "thoughtSignature": ...}`` (the FAQ: the signature
"may [come] in a part with an empty text content"). A ``functionCall`` part comes whole in one chunk,
signature included. The last chunk also carries ``finishReason`` and the ``usageMetadata`` (earlier chunks
carry neither).

**To equal the non-streamed answer** an assembler concatenates the pieces of all chunks in order and
merges every run of adjacent text pieces with the same ``thought`` flag into one part whose ``text`` is their
concatenation and whose ``thoughtSignature`` is the one signature in the run; ``functionCall`` pieces are
taken as they are; ``finishReason`` and ``usageMetadata`` come from the last chunk. The result is exactly
the candidate content the same request would have got without streaming (a signature verifies on the merged
part, not on its empty carrier). The ``transform`` hook, if any, rewrites the complete response before it
is framed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from reasonstate._extras import needs
from reasonstate.testing._server import (
    DEFAULT_SECRET,
    Fault,
    JSONResponse,
    RecordedRequest,
    Route,
    ScriptedEmulator,
    StreamResponse,
    Transform,
)
from reasonstate.testing.openai import canonical_json, shared_item_tokens
from reasonstate.testing.script import ModelAction, Responder, Script, ScriptExhausted, count_tokens

if TYPE_CHECKING:
    from google import genai
    from google.genai.client import AsyncClient

__all__ = [
    "DOCS_CACHING",
    "DOCS_THOUGHT_SIGNATURES",
    "KNOWN_MODELS",
    "MODEL_ALIASES",
    "SENTINEL_SIGNATURES",
    "GeminiEmulator",
    "genai_client",
    "implicit_cache_min_tokens",
    "model_generation",
    "validates_signatures",
]

DOCS_THOUGHT_SIGNATURES = "https://ai.google.dev/gemini-api/docs/thought-signatures"
DOCS_CACHING = "https://ai.google.dev/gemini-api/docs/caching"

#: Alias → the versioned id the API answers with in ``modelVersion`` ([3P] simonw/llm-gemini's recorded test).
MODEL_ALIASES: dict[str, str] = {"gemini-1.5-flash-latest": "gemini-1.5-flash-002"}

#: The model ids the emulator serves (https://ai.google.dev/gemini-api/docs/models: the current 3.x and
#: 2.5 models, the ``-latest`` names, and the project's ``gemini-3-flash`` / ``gemini-3-pro``); any other
#: is 404 ``NOT_FOUND`` (module docstring).
KNOWN_MODELS: frozenset[str] = frozenset(
    {
        *MODEL_ALIASES.values(),
        "gemini-3-pro",
        "gemini-3-pro-preview",
        "gemini-3-flash",
        "gemini-3-flash-preview",
        "gemini-3-flash-preview-09-2026",
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
        "gemini-2.0-flash",
        "gemini-flash-latest",
        "gemini-flash-lite-latest",
        "gemini-pro-latest",
    }
)

#: The dummy signatures the thought-signatures FAQ documents for history no Gemini model produced.
SENTINEL_SIGNATURES: tuple[str, ...] = (
    "skip_thought_signature_validator",
    "context_engineering_is_the_way_to_go",
)

_STATUS = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_ROUTE = r"/(?:v1|v1beta)/models/[^/:]+:(?:generateContent|streamGenerateContent)"
_PATH = re.compile(r"/(v1|v1beta)/models/([^/:]+):(generateContent|streamGenerateContent)")
#: Gemini on Vertex AI (docs/protocols.md §10.6): ``{base}/{v1|v1beta1}/projects/{p}/locations/{l}/publishers/
#: google/models/{m}:{method}``, or without the project part in express mode (an API key)
_VERTEX_PATH = re.compile(
    r"/(v1|v1beta1)(?:/projects/[^/]+/locations/[^/]+)?/publishers/google/models/([^/:]+):"
    r"(generateContent|streamGenerateContent)"
)
_VERTEX_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential."
)
_GENERATION = re.compile(r"(?:models/)?gemini-(\d+)(?:\.(\d+))?(?![\d.])")

_ERR_NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). Please use API Key "
    "or other form of API consumer identity to call this API."
)
_ERR_ROLE = "Please use a valid role: user, model."
_ERR_CALL_TURN = (
    "Please ensure that function call turn comes immediately after a user turn or after a function response "
    "turn."
)
_ERR_RESPONSE_TURN = "Please ensure that function response turn comes immediately after a function call turn."
_ERR_RESPONSE_COUNT = (
    "Please ensure that the number of function response parts is equal to the number of function call parts "
    "of the function call turn."
)
_ERR_BUDGET_AND_LEVEL = "You can only set only one of thinking budget and thinking level."
_ERR_CORRUPTED = "Corrupted thought signature."

_DATA_FIELDS = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)
_PART_FIELDS = frozenset(
    (
        *_DATA_FIELDS,
        "thought",
        "thoughtSignature",
        "videoMetadata",
        "partMetadata",
        "mediaResolution",
        "audioMetadata",
        "audioTranscription",
        "documentMetadata",
        "mediaProcessing",
        "speechMetadata",
        "spreadsheetMetadata",
    )
)
_REQUEST_FIELDS = frozenset(
    (
        "model",
        "contents",
        "tools",
        "toolConfig",
        "safetySettings",
        "systemInstruction",
        "generationConfig",
        "cachedContent",
        "labels",
        "serviceTier",
        "store",
        "continuationToken",
    )
)
# [SDK] models.py _GenerateContentConfig_to_mldev: what the SDK puts inside generationConfig
_GENERATION_FIELDS = frozenset(
    (
        "temperature",
        "topP",
        "topK",
        "candidateCount",
        "maxOutputTokens",
        "stopSequences",
        "responseLogprobs",
        "logprobs",
        "presencePenalty",
        "frequencyPenalty",
        "seed",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "responseModalities",
        "mediaResolution",
        "speechConfig",
        "thinkingConfig",
        "imageConfig",
        "enableEnhancedCivicAnswers",
        "audioTranscriptionConfig",
    )
)
_THINKING_FIELDS = frozenset(("includeThoughts", "thinkingBudget", "thinkingLevel"))
_THINKING_LEVELS = ("THINKING_LEVEL_UNSPECIFIED", "MINIMAL", "LOW", "MEDIUM", "HIGH", "XHIGH")
#: [DOC] https://ai.google.dev/api/caching#FunctionDeclaration (and the SDK's ``FunctionDeclaration``)
_DECLARATION_FIELDS = frozenset(
    (
        "name",
        "description",
        "behavior",
        "parameters",
        "parametersJsonSchema",
        "response",
        "responseJsonSchema",
    )
)
#: the fields of the Gemini API's ``Schema`` (v1beta REST reference): an OpenAPI 3.0 subset. The SDK's
#: ``Schema`` also has ``additional_properties``, ``defs`` and ``ref``, which Vertex AI reads; the Gemini API
#: refuses ``additionalProperties`` ([3P] openswarm-ai/openswarm#24, 2026)
_SCHEMA_FIELDS = frozenset(
    (
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    )
)
_SCHEMA_TYPES = frozenset(
    ("TYPE_UNSPECIFIED", "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL")
)
_CALL_FIELDS = frozenset(("id", "name", "args"))
_RESPONSE_FIELDS = frozenset(("id", "name", "response", "willContinue", "scheduling", "parts"))

_SIG_TAG = b"\xfb\xff"  # version 1; base64 "+/..." so a URL-safe re-encoding always differs
_NONCE_LEN = 12
_MAC_LEN = 32
_STD = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_URLSAFE = re.compile(r"[A-Za-z0-9_-]*={0,2}")


class _Reject(Exception):
    """A request the emulated API refuses: HTTP status and message (the status text follows the code)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def response(self) -> JSONResponse:
        return _error(self.status, self.message)


def genai_client(
    base_url: str, platform: str, *, api_version: str, api_key: str, single_attempt: bool = False, **kw: Any
) -> genai.Client:
    """A real ``google.genai.Client`` on an emulator at ``base_url``: proxies from the environment ignored;
    on Vertex AI (``platform == "vertex"``) with ``api_key`` as a static OAuth2 token (no network, no
    application default credentials). ``single_attempt``: the SDK's retry options say one attempt (its
    interactions client would otherwise retry). ``kw`` goes to ``genai.Client``."""
    with needs("gemini"):
        from google import genai
        from google.genai import types

    http_options = types.HttpOptions(
        base_url=base_url,
        api_version=api_version,
        client_args={"trust_env": False},
        async_client_args={"trust_env": False},
        retry_options=types.HttpRetryOptions(attempts=1) if single_attempt else None,
    )
    options: dict[str, Any] = {"api_key": api_key, "vertexai": False, "http_options": http_options}
    if platform == "vertex":
        # the SDK's Vertex default version is v1beta1
        import google.oauth2.credentials

        http_options.api_version = "v1beta1" if api_version == "v1" else api_version
        token = google.oauth2.credentials.Credentials(token=api_key)  # type: ignore[no-untyped-call]
        options = {
            "vertexai": True,
            "project": "emulator-project",
            "location": "us-central1",
            "credentials": token,
            "http_options": http_options,
        }
    options.update(kw)
    return genai.Client(**options)


def _error(code: int, message: str, details: list[dict[str, Any]] | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}
    if details is not None:
        error["details"] = details
    return JSONResponse(code, {"error": error})


def _invalid_key() -> JSONResponse:
    """Google's answer to a key it did not issue (module docstring)."""
    detail = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {"service": "generativelanguage.googleapis.com"},
    }
    return _error(400, "API key not valid. Please pass a valid API key.", [detail])


def _unknown_model(name: str, version: str, method: str) -> JSONResponse:
    """Google's answer to a model it does not serve (module docstring)."""
    shown = "generateContent" if method == "generateContent" else "StreamGenerateContent"
    message = (
        f"models/{name} is not found for API version {version}, or is not supported for {shown}. "
        "Call ListModels to see the list of available models and their supported methods."
    )
    return _error(404, message)


# -- models ----------------------------------------------------------------------------------------------
def model_generation(model: str) -> tuple[int, int] | None:
    """``(3, 1)`` for ``gemini-3.1-pro-preview``, ``(2, 5)`` for ``gemini-2.5-flash``; None unversioned."""
    match = _GENERATION.match(model)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def validates_signatures(model: str) -> bool:
    """Whether ``model`` enforces thought signatures on function calls (gemini-3 and later)."""
    generation = model_generation(model)
    return generation is not None and generation >= (3, 0)


def implicit_cache_min_tokens(model: str) -> int | None:
    """The implicit-cache minimum prompt size of ``model`` (None: no implicit caching), see the module doc."""
    generation = model_generation(model)
    if generation is None or generation < (2, 5):
        return None
    return 4096 if generation >= (3, 0) else 2048


# -- strict proto-JSON field handling --------------------------------------------------------------------
def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _snake(key: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), key)


def _fields(value: Any, known: frozenset[str], path: str) -> dict[str, Any]:
    """``value`` as a dict with camelCase keys and null fields dropped; unknown names are refused."""
    if not isinstance(value, dict):
        raise _Reject(
            f"Invalid value at '{path}' (type.googleapis.com/google.protobuf.Struct), {_compact(value)}"
        )
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = _camel(key)
        if name not in known:
            where = f" at '{path}'" if path else ""
            raise _Reject(f'Invalid JSON payload received. Unknown name "{key}"{where}: Cannot find field.')
        if item is not None:
            out[name] = item
    return out


def _invalid(path: str, kind: str, value: Any) -> _Reject:
    return _Reject(f"Invalid value at '{path}' ({kind}), {_compact(value)}")


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _decode_base64(text: str) -> bytes | None:
    """Strict proto-JSON bytes: one alphabet, exact or no padding, canonical (see the module doc)."""
    if _STD.fullmatch(text):
        urlsafe = False
    elif _URLSAFE.fullmatch(text):
        urlsafe = True
    else:
        return None
    body = text.rstrip("=")
    if len(body) % 4 == 1:
        return None
    try:
        raw = base64.b64decode(
            body + "=" * (-len(body) % 4), altchars=b"-_" if urlsafe else None, validate=True
        )
    except (binascii.Error, ValueError):
        return None
    again = (base64.urlsafe_b64encode(raw) if urlsafe else base64.b64encode(raw)).decode("ascii")
    return raw if again == text or again.rstrip("=") == text else None


# -- parsed request --------------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class _Part:
    field: str  # the data field, camelCase
    value: Any
    thought: bool
    signature: bytes | None

    def core(self) -> dict[str, Any]:
        """The part as the model reads it and as its signature binds it (no signature, no other metadata)."""
        value = self.value
        if self.field == "functionCall":
            value = {"name": value["name"], "args": value.get("args") or {}}
            if "id" in self.value:
                value["id"] = self.value["id"]
        core = {self.field: value}
        if self.thought:
            core["thought"] = True
        return core


@attrs.frozen(slots=True)
class _Content:
    role: str
    parts: tuple[_Part, ...]

    def calls(self) -> list[_Part]:
        return [p for p in self.parts if p.field == "functionCall"]

    def responses(self) -> list[_Part]:
        return [p for p in self.parts if p.field == "functionResponse"]


@attrs.frozen(slots=True)
class _Thinking:
    include: bool
    budget: int | None


@attrs.frozen(slots=True)
class _Request:
    contents: tuple[_Content, ...]
    system: tuple[_Part, ...] | None
    tools: list[Any]
    thinking: _Thinking


def _parse_request(body: Any) -> _Request:
    top = _fields(body, _REQUEST_FIELDS, "")
    raw_contents = top.get("contents")
    if raw_contents is not None and not isinstance(raw_contents, list):
        raise _invalid("contents", "type.googleapis.com/google.ai.generativelanguage.Content", raw_contents)
    if not raw_contents:
        raise _Reject("* GenerateContentRequest.contents: contents is not specified\n")
    contents = tuple(_parse_content(c, f"contents[{i}]") for i, c in enumerate(raw_contents))
    system: tuple[_Part, ...] | None = None
    if "systemInstruction" in top:
        fields = _fields(top["systemInstruction"], frozenset(("role", "parts")), "system_instruction")
        system = _parse_parts(fields.get("parts"), "system_instruction")
    tools = top.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _invalid("tools", "type.googleapis.com/google.ai.generativelanguage.Tool", tools)
    generation = _fields(top.get("generationConfig", {}), _GENERATION_FIELDS, "generation_config")
    thinking = _parse_thinking(generation.get("thinkingConfig"))
    if "cachedContent" in top:
        raise _Reject("cachedContent: explicit caches are not emulated (reasonstate emulator)")
    return _Request(contents=contents, system=system, tools=tools, thinking=thinking)


def _parse_content(raw: Any, path: str) -> _Content:
    fields = _fields(raw, frozenset(("role", "parts")), path)
    role = fields.get("role", "") or "user"
    if not isinstance(role, str):
        raise _invalid(f"{path}.role", "TYPE_STRING", role)
    if role not in ("user", "model"):
        raise _Reject(_ERR_ROLE)
    return _Content(role=role, parts=_parse_parts(fields.get("parts"), path))


def _parse_parts(raw: Any, path: str) -> tuple[_Part, ...]:
    if raw is not None and not isinstance(raw, list):
        raise _invalid(f"{path}.parts", "type.googleapis.com/google.ai.generativelanguage.Part", raw)
    if not raw:
        raise _Reject(f"* GenerateContentRequest.{path}.parts: contents.parts must not be empty.\n")
    return tuple(_parse_part(p, f"{path}.parts[{j}]") for j, p in enumerate(raw))


def _parse_part(raw: Any, path: str) -> _Part:
    fields = _fields(raw, _PART_FIELDS, path)
    signature: bytes | None = None
    if "thoughtSignature" in fields:
        encoded = fields["thoughtSignature"]
        decoded = _decode_base64(encoded) if isinstance(encoded, str) else None
        if decoded is None:
            shown = encoded if isinstance(encoded, str) else _compact(encoded)
            raise _Reject(
                f"Invalid value at '{path}.thought_signature' (TYPE_BYTES), "
                f'Base64 decoding failed for "{shown}"'
            )
        signature = decoded or None  # proto3: empty bytes are the default, i.e. no signature
    thought = fields.get("thought", False)
    if not isinstance(thought, bool):
        raise _invalid(f"{path}.thought", "TYPE_BOOL", thought)
    if "text" in fields and not isinstance(fields["text"], str):
        raise _invalid(f"{path}.text", "TYPE_STRING", fields["text"])
    data = [name for name in fields if name in _DATA_FIELDS]
    if not data:
        raise _Reject(
            f"* GenerateContentRequest.{path}.data: required oneof field 'data' must have one initialized "
            "field\n"
        )
    if len(data) > 1:
        raise _Reject(
            "Invalid JSON payload received. Oneof field 'data' is already set. "
            f"Cannot set '{_snake(data[1])}'"
        )
    field = data[0]
    value = fields[field]
    if field == "functionCall":
        value = _check_named(value, _CALL_FIELDS, f"{path}.function_call", "args")
    elif field == "functionResponse":
        value = _check_named(value, _RESPONSE_FIELDS, f"{path}.function_response", "response")
    return _Part(field=field, value=value, thought=thought, signature=signature)


def _check_named(value: Any, known: frozenset[str], path: str, payload: str) -> dict[str, Any]:
    """A functionCall/functionResponse: non-empty string ``name``, an object ``payload`` (args/response)."""
    fields = _fields(value, known, path)
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        raise _Reject(f"* GenerateContentRequest.{path}.name: Name cannot be empty.\n")
    if payload in fields and not isinstance(fields[payload], dict):
        raise _invalid(f"{path}.{payload}", "type.googleapis.com/google.protobuf.Struct", fields[payload])
    if "id" in fields and not isinstance(fields["id"], str):
        raise _invalid(f"{path}.id", "TYPE_STRING", fields["id"])
    return fields


def _parse_thinking(raw: Any) -> _Thinking:
    if raw is None:
        return _Thinking(include=False, budget=None)
    path = "generation_config.thinking_config"
    fields = _fields(raw, _THINKING_FIELDS, path)
    include = fields.get("includeThoughts", False)
    if not isinstance(include, bool):
        raise _invalid(f"{path}.include_thoughts", "TYPE_BOOL", include)
    budget = fields.get("thinkingBudget")
    if budget is not None:
        if isinstance(budget, str) and re.fullmatch(r"-?\d+", budget):
            budget = int(budget)  # proto JSON takes int32 as a number or a decimal string
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise _invalid(f"{path}.thinking_budget", "TYPE_INT32", budget)
        if budget < -1:
            raise _Reject(f"The thinking budget ({budget}) is invalid.")
    level = fields.get("thinkingLevel")
    if level is not None and (not isinstance(level, str) or level.upper() not in _THINKING_LEVELS):
        raise _invalid(
            f"{path}.thinking_level", "type.googleapis.com/google.ai.generativelanguage.ThinkingLevel", level
        )
    if budget is not None and level is not None:
        raise _Reject(_ERR_BUDGET_AND_LEVEL)
    return _Thinking(include=include, budget=budget)


def _check_declarations(tools: Sequence[Mapping[str, Any]], version: str) -> None:
    """Rule 4 of the module doc: each function declaration's fields and schemas, proto JSON first (for every
    declaration), then the ``Schema`` semantics."""
    parameters: list[tuple[str, dict[str, Any]]] = []
    for i, tool in enumerate(tools):
        declarations = tool.get("functionDeclarations", tool.get("function_declarations"))
        if declarations is None:
            continue
        path = f"tools[{i}].function_declarations"
        if not isinstance(declarations, list):
            raise _invalid(
                path, "type.googleapis.com/google.ai.generativelanguage.FunctionDeclaration", declarations
            )
        for j, raw in enumerate(declarations):
            where = f"{path}[{j}]"
            fields = _fields(raw, _DECLARATION_FIELDS, where)
            if "parameters" in fields:
                parameters.append(
                    (
                        f"{where}.parameters",
                        _parse_schema(fields["parameters"], f"{where}.parameters", version),
                    )
                )
                if "parametersJsonSchema" in fields:
                    raise _Reject(
                        f"* GenerateContentRequest.{where}: parameters and parameters_json_schema are "
                        "mutually exclusive (reasonstate emulator wording)\n"
                    )
            if "parametersJsonSchema" in fields:
                problem = _json_schema_root_problem(fields["parametersJsonSchema"])
                if problem is not None:
                    raise _Reject(
                        f"* GenerateContentRequest.{where}.parameters_json_schema: the schema must "
                        f"describe an object, {problem} (reasonstate emulator wording)\n"
                    )
    for path, schema in parameters:
        _check_schema_types(schema, path)


def _parse_schema(raw: Any, path: str, version: str) -> dict[str, Any]:
    """A ``Schema`` read as proto JSON (camelCase keys, nulls dropped), or the parser's 400."""
    if isinstance(raw, dict) and isinstance(raw.get("type"), list):
        raise _Reject(
            f"Invalid JSON payload received. Unknown name \"type\" at '{path}': Proto field is not "
            "repeating, cannot start list."
        )
    fields = _fields(raw, _SCHEMA_FIELDS, path)
    kind = fields.get("type")
    if kind is not None and (not isinstance(kind, str) or kind.upper() not in _SCHEMA_TYPES):
        raise _invalid(
            f"{path}.type", f"type.googleapis.com/google.ai.generativelanguage.{version}.Type", kind
        )
    members = fields.get("enum")
    for k, member in enumerate(members if isinstance(members, list) else ()):
        if not isinstance(member, str):
            raise _invalid(f"{path}.enum[{k}]", "TYPE_STRING", member)
    properties = fields.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            raise _invalid(f"{path}.properties", "type.googleapis.com/google.protobuf.Struct", properties)
        fields["properties"] = {
            name: _parse_schema(sub, f"{path}.properties[{k}].value", version)
            for k, (name, sub) in enumerate(properties.items())
        }
    if "items" in fields:
        fields["items"] = _parse_schema(fields["items"], f"{path}.items", version)
    if isinstance(fields.get("anyOf"), list):
        fields["anyOf"] = [
            _parse_schema(sub, f"{path}.any_of[{k}]", version) for k, sub in enumerate(fields["anyOf"])
        ]
    return fields


def _check_schema_types(schema: Mapping[str, Any], path: str) -> None:
    """A property with neither ``type`` nor ``anyOf`` is refused (LibreChat#6971), at any depth."""
    for name, sub in (schema.get("properties") or {}).items():
        where = f"{path}.properties[{name}]"
        if "type" not in sub and "anyOf" not in sub:
            raise _Reject(
                f"* GenerateContentRequest.{where}.type: must be specified when not using one_of, any_of or "
                "all_of fields\n"
            )
        _check_schema_types(sub, where)
    if isinstance(schema.get("items"), Mapping):
        _check_schema_types(schema["items"], f"{path}.items")
    for k, sub in enumerate(schema.get("anyOf") or ()):
        _check_schema_types(sub, f"{path}.any_of[{k}]")


def _json_schema_root_problem(schema: Any) -> str | None:
    """Why a ``parametersJsonSchema`` does not describe an object (None when it does or may: a root
    ``$ref`` or union is not followed)."""
    if not isinstance(schema, dict):
        return f"got {_compact(schema)}"
    if any(key in schema for key in ("$ref", "anyOf", "oneOf", "allOf")):
        return None
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    return None if "object" in kinds else f"got type {_compact(kind)}"


def _check_function_turns(contents: Sequence[_Content]) -> None:
    for i, content in enumerate(contents):
        previous = contents[i - 1] if i > 0 else None
        if content.responses() and (previous is None or not previous.calls()):
            raise _Reject(_ERR_RESPONSE_TURN)
        calls = content.calls()
        if not calls:
            continue
        if previous is None or previous.role != "user":
            raise _Reject(_ERR_CALL_TURN)
        following = contents[i + 1] if i + 1 < len(contents) else None
        if following is None or len(following.responses()) != len(calls):
            raise _Reject(_ERR_RESPONSE_COUNT)


def _current_turn_start(contents: Sequence[_Content]) -> int:
    """Index of the last user content with standard content (a part that is not a functionResponse)."""
    for i in range(len(contents) - 1, -1, -1):
        content = contents[i]
        if content.role == "user" and any(p.field != "functionResponse" for p in content.parts):
            return i
    return 0


def _missing_signature(name: str, position: int) -> _Reject:
    return _Reject(
        "Function call is missing a thought_signature in functionCall parts. This is required for tools to "
        "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
        f"data, function call `default_api:{name}` , position {position}. Please refer to "
        f"{DOCS_THOUGHT_SIGNATURES} for more details."
    )


def _core(part: Mapping[str, Any]) -> dict[str, Any]:
    """The core of a wire part (camelCase or snake_case keys), its signature left out."""
    return _parse_part({k: v for k, v in part.items() if _camel(k) != "thoughtSignature"}, "part").core()


def _prompt(request: _Request) -> list[str]:
    segments: list[str] = []
    if request.system is not None:
        segments.append(canonical_json({"systemInstruction": [p.core() for p in request.system]}))
    if request.tools:
        segments.append(canonical_json({"tools": request.tools}))
    for content in request.contents:
        segments.append(canonical_json({"parts": [p.core() for p in content.parts], "role": content.role}))
    return segments


def _chunks(text: str, parts: int = 3) -> list[str]:
    """``text`` as at most ``parts`` consecutive pieces (one empty piece for the empty string)."""
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _stream_chunks(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed response (see "Streaming" in the module docstring)."""
    candidate = response["candidates"][0]
    pieces: list[dict[str, Any]] = []
    for part in candidate.get("content", {}).get("parts", []):
        if isinstance(part.get("text"), str):
            flag = {"thought": True} if part.get("thought") else {}
            pieces.extend({"text": piece, **flag} for piece in _chunks(part["text"]))
            if "thoughtSignature" in part:
                pieces.append({"text": "", **flag, "thoughtSignature": part["thoughtSignature"]})
        else:
            pieces.append(dict(part))
    head = {k: response[k] for k in ("modelVersion", "responseId") if k in response}
    contents: list[dict[str, Any]] = [{"role": "model", "parts": [p]} for p in pieces] or [{"role": "model"}]
    chunks = [{"candidates": [{"content": content, "index": 0}], **head} for content in contents]
    last = chunks[-1]
    last["candidates"][0]["finishReason"] = candidate.get("finishReason")
    if "usageMetadata" in response:
        last["usageMetadata"] = response["usageMetadata"]
    return chunks


def _sse(chunks: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    for chunk in chunks:
        yield b"data: " + _compact(chunk).encode() + b"\r\n\r\n"


class GeminiEmulator(ScriptedEmulator):
    """A running, strict Gemini ``generateContent`` API on 127.0.0.1; use it as a context manager.

    Point a real SDK client at it (the base URL is the server root; the SDK adds ``/v1/models/...``;
    :meth:`client` does this)::

        emulator = GeminiEmulator(script).start()
        client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=emulator.base_url))

    It rejects (Google's error envelope, nothing consumed from the script): a missing key (403); a
    ``functionCall`` part of the current turn without its ``thoughtSignature`` on models that validate
    them, and any signature that was edited, moved to another part or issued for another model (400);
    function responses that do not answer the calls before them; unknown fields and malformed contents.

    ``script``: a :class:`Script`, an iterable of :class:`ModelAction`, or a responder
    ``(request_json) -> ModelAction``. ``secret``: the HMAC key of the signatures (the fixed default secret
    when None, so a restarted emulator verifies what an earlier one signed; another secret stands for
    another organisation). ``api_key``: the accepted key(s) (``test-key``, ``emulator-key``). ``models``:
    ids served on top of :data:`KNOWN_MODELS`. ``cache_min_tokens``: the
    implicit-cache minimum for every model (default: :func:`implicit_cache_min_tokens` per model).
    ``aliases``: more alias → versioned id entries over :data:`MODEL_ALIASES`. ``transform``: rewrites each
    successful response (before it is streamed). ``accept_sentinels``: let :data:`SENTINEL_SIGNATURES` skip
    validation, as documented.
    """

    def __init__(
        self,
        script: Script | Iterable[ModelAction] | Responder = (),
        *,
        secret: bytes | str | None = None,
        cache_min_tokens: int | None = None,
        aliases: Mapping[str, str] | None = None,
        transform: Transform | None = None,
        accept_sentinels: bool = True,
        api_key: str | Iterable[str] | None = None,
        models: Iterable[str] = (),
        platform: str = "gemini",
    ) -> None:
        if platform not in ("gemini", "vertex"):
            raise ValueError(f"platform must be 'gemini' or 'vertex', got {platform!r}")
        #: ``"gemini"`` (the Gemini API) or ``"vertex"`` (Gemini on Vertex AI, docs/protocols.md §10.6)
        self.platform = platform
        if platform == "vertex" and secret is None:
            secret = DEFAULT_SECRET + b":vertex"  # another service: another signing key
        super().__init__(
            [Route("POST", _VERTEX_PATH.pattern, self._handle_vertex)]
            if platform == "vertex"
            else [Route("POST", _ROUTE, self._handle)],
            name="gemini-emulator",
            script=script,
            secret=secret,
            transform=transform,
            aliases={**MODEL_ALIASES, **dict(aliases or {})},
            api_key=api_key,
            known_models=KNOWN_MODELS,
            models=models,
        )
        self.cache_min_tokens = cache_min_tokens
        self._sentinels: frozenset[bytes] = frozenset()
        if accept_sentinels:
            wire = {base64.urlsafe_b64decode(s) for s in SENTINEL_SIGNATURES}
            self._sentinels = frozenset(wire | {s.encode() for s in SENTINEL_SIGNATURES})
        self._response_ids = itertools.count(1)
        self._prompts: dict[str, list[list[bytes]]] = {}

    def clear_cache(self) -> None:
        """Forget every earlier prompt: the next request of any model reports no cached tokens."""
        with self._lock:
            self._prompts.clear()

    def resolve_model(self, model: str) -> str:
        """The id the API answers ``model`` with (``modelVersion``): the versioned id for an alias."""
        return super().resolve_model(model.removeprefix("models/"))

    # -- vendor-shaped faults ------------------------------------------------------------------------
    @staticmethod
    def rate_limited() -> Fault:
        """429 ``RESOURCE_EXHAUSTED`` (continuedev/continue#10560): ``errors.ClientError``."""
        return Fault.http(429, _error(429, "Resource has been exhausted (e.g. check quota).").payload)

    @staticmethod
    def server_error() -> Fault:
        """500 ``INTERNAL``: ``errors.ServerError``."""
        message = (
            "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting"
        )
        return Fault.http(500, _error(500, message).payload)

    @staticmethod
    def overloaded() -> Fault:
        """503 ``UNAVAILABLE`` (google-gemini/gemini-cli#5191): ``errors.ServerError``."""
        return Fault.http(503, _error(503, "The model is overloaded. Please try again later.").payload)

    # -- clients -------------------------------------------------------------------------------------
    def client(self, *, api_version: str = "v1", api_key: str = "test-key", **kw: Any) -> genai.Client:
        """A real ``google.genai.Client`` on this emulator (Developer API, ``api_version`` ``"v1"`` — the
        SDK's default — or ``"v1beta"``; proxies from the environment ignored; no retries). ``kw`` goes to
        ``genai.Client``; ``client(...).aio`` is the async client."""
        return genai_client(self.base_url, self.platform, api_version=api_version, api_key=api_key, **kw)

    def _handle_vertex(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        """Gemini on Vertex AI: a Bearer access token (or, express mode, ``x-goog-api-key``); a missing or
        unknown one is Google's 401 ``UNAUTHENTICATED``; then the request is the Gemini API's."""
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        key = key or request.headers.get("x-goog-api-key", "").strip()
        if not key or not self.key_accepted(key):
            return JSONResponse(
                401, {"error": {"code": 401, "message": _VERTEX_UNAUTHENTICATED, "status": "UNAUTHENTICATED"}}
            )
        match = _VERTEX_PATH.fullmatch(request.path)
        assert match is not None  # the route pattern matched
        version = "v1" if match.group(1) == "v1" else "v1beta"
        inner = attrs.evolve(
            request,
            path=f"/{version}/models/{match.group(2)}:{match.group(3)}",
            headers={**request.headers, "x-goog-api-key": key},
        )
        return self._handle(inner)

    def async_client(self, **kw: Any) -> AsyncClient:
        """``client(**kw).aio``. Dropping the ``genai.Client`` closes only its sync transport, so the async
        client stays usable on its own."""
        return self.client(**kw).aio

    # -- signatures ----------------------------------------------------------------------------------
    def _mac(self, model: str, nonce: bytes, part: Mapping[str, Any]) -> bytes:
        message = b"\x00".join(
            (b"gemini-thought-signature", model.encode(), nonce, canonical_json(dict(part)).encode())
        )
        return hmac.new(self.secret, message, hashlib.sha256).digest()

    def sign(self, model: str, part: Mapping[str, Any]) -> str:
        """A fresh signature for the wire ``part`` (bound to its core, see the module doc) from ``model``."""
        return self._sign(self.resolve_model(model), _core(part))

    def _sign(self, model: str, core: Mapping[str, Any]) -> str:
        nonce = os.urandom(_NONCE_LEN)
        return base64.b64encode(_SIG_TAG + nonce + self._mac(model, nonce, core)).decode("ascii")

    def verify_signature(self, model: str, part: Mapping[str, Any], signature: str) -> bool:
        """Whether ``signature`` (either alphabet) was issued by this emulator for the wire ``part`` (its own
        ``thoughtSignature`` is ignored) under ``model``; an alias and its versioned id are one model."""
        raw = _decode_base64(signature)
        try:
            core = _core(part)
        except _Reject:
            return False
        return raw is not None and self._verify(self.resolve_model(model), core, raw)

    def _verify(self, model: str, core: Mapping[str, Any], raw: bytes) -> bool:
        if len(raw) != len(_SIG_TAG) + _NONCE_LEN + _MAC_LEN or not raw.startswith(_SIG_TAG):
            return False
        nonce = raw[len(_SIG_TAG) : len(_SIG_TAG) + _NONCE_LEN]
        return hmac.compare_digest(raw[-_MAC_LEN:], self._mac(model, nonce, core))

    # -- the handler ---------------------------------------------------------------------------------
    def _handle(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        match = _PATH.fullmatch(request.path)
        assert match is not None  # the route pattern matched
        key = (
            request.headers.get("x-goog-api-key", "").strip() or "".join(request.query.get("key", [])).strip()
        )
        if not key:
            return _error(403, _ERR_NO_KEY)
        if not self.key_accepted(key):
            return _invalid_key()
        if not self.knows_model(match.group(2).removeprefix("models/")):
            return _unknown_model(match.group(2), match.group(1), match.group(3))
        model = self.resolve_model(match.group(2))
        try:
            body = request.json()
        except ValueError:
            return _error(400, "Invalid JSON payload received. Unexpected token.")
        with self._lock:
            try:
                parsed = _parse_request(body)
                _check_declarations(parsed.tools, match.group(1))
                _check_function_turns(parsed.contents)
                self._check_signatures(model, parsed.contents)
            except _Reject as rejected:
                return rejected.response()
            try:
                action = self.script.take(body)
            except ScriptExhausted as exc:
                return _error(500, str(exc))
            response = self._respond(model, parsed, action)
        response = self._transformed(response)
        if match.group(3) == "generateContent":
            return JSONResponse(200, response)
        chunks = _stream_chunks(response)
        if request.query.get("alt") == ["sse"]:
            return StreamResponse(list(_sse(chunks)))
        return JSONResponse(200, chunks)

    def _check_signatures(self, model: str, contents: Sequence[_Content]) -> None:
        if not validates_signatures(model):
            return
        for i in range(_current_turn_start(contents), len(contents)):
            content = contents[i]
            if content.role != "model":
                continue
            calls = content.calls()
            if calls and calls[0].signature is None:
                raise _missing_signature(calls[0].value["name"], i + 1)
            for part in content.parts:
                signature = part.signature
                if signature is None or signature in self._sentinels:
                    continue
                if not self._verify(model, part.core(), signature):
                    raise _Reject(_ERR_CORRUPTED)

    # -- responses -----------------------------------------------------------------------------------
    def _respond(self, model: str, request: _Request, action: ModelAction) -> dict[str, Any]:
        """The response to a valid request; ``model`` is the resolved id (see the module docstring)."""
        generation = model_generation(model) or (0, 0)
        thinks = generation >= (3, 0) or (generation >= (2, 5) and request.thinking.budget != 0)
        thought = thinks and action.reasoning is not None
        parts: list[dict[str, Any]] = []
        if thought and request.thinking.include and action.reasoning:
            parts.append({"text": action.reasoning, "thought": True})
        if action.text:
            parts.append({"text": action.text})
        calls = [{"functionCall": {"name": c.name, "args": dict(c.arguments)}} for c in action.tool_calls]
        parts.extend(calls)
        signed: dict[str, Any] | None = None
        if generation >= (3, 0):
            signed = calls[0] if calls else (parts[-1] if parts and thought else None)
        elif generation >= (2, 5) and calls and thought:
            signed = parts[0]  # 2.5: the first part, whatever its type
        if signed is not None:
            signed["thoughtSignature"] = self._sign(model, _core(signed))

        segments = _prompt(request)
        prompt_tokens = sum(count_tokens(segment) for segment in segments)
        prompt = [segment.encode() for segment in segments]
        earlier = self._prompts.setdefault(model, [])
        matched = max((shared_item_tokens(prompt, q) for q in earlier), default=0)
        earlier.append(prompt)
        minimum = (
            self.cache_min_tokens if self.cache_min_tokens is not None else implicit_cache_min_tokens(model)
        )
        cached = matched if minimum is not None and matched >= minimum else 0
        thoughts = count_tokens(action.reasoning or "") if thought else 0
        candidates = sum(
            count_tokens(p["text"]) if "text" in p else count_tokens(canonical_json(p["functionCall"]))
            for p in parts
            if not p.get("thought")
        )
        usage: dict[str, Any] = {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt_tokens + candidates + thoughts,
            "cachedContentTokenCount": cached,
            "thoughtsTokenCount": thoughts,
        }
        usage = {k: v for k, v in usage.items() if v}
        usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt_tokens}]
        if cached:
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        content: dict[str, Any] = {"role": "model"}
        if parts:
            content["parts"] = parts
        return {
            "candidates": [
                {
                    "content": content,
                    "finishReason": "MAX_TOKENS" if action.stop == "max_tokens" else "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": f"emu-resp-{next(self._response_ids):03d}",
        }
