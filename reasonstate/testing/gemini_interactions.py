"""A strict emulator of the Gemini **Interactions API** (google-genai ``client.interactions``), no network.

Written from the vendor facts (docs/protocols.md §5.6 and the pages it cites) and the installed SDK's own
types (``google/genai/_gaos/types/interactions/``), never from our adapters: this module does not import
``reasonstate.adapters``, ``reasonstate.session`` or ``reasonstate.state``.

Route and auth (§5.6)
---------------------
``POST /{v1,v1beta}/interactions`` — google-genai 3.6.1 sends ``/{api_version}/interactions`` on the
client's ``base_url`` with ``x-goog-api-key``. No key → **403** ``PERMISSION_DENIED``; a key not accepted →
**400** ``API key not valid`` (as the generateContent emulator). Every error is Google's envelope
``{"error": {"code", "message", "status"}}``; the SDK raises ``google.genai._interactions_errors``
``BadRequestError`` (400), ``NotFoundError`` (404), ... (``APIStatusError`` subclasses, ``body`` = the
envelope). A refused request consumes no script action, feeds no cache and stores nothing.

Request validation (first violation wins)
-----------------------------------------
1. Not JSON → 400 ``Invalid JSON payload received. Unexpected token.``; a top-level field that is not one of
   :data:`REQUEST_FIELDS` (the SDK's ``CreateModelInteraction``) → 400 ``Invalid JSON payload received.
   Unknown name "x": Cannot find field.``; ``model`` missing → 400; a model outside the Gemini table
   (``gemini-N...`` or the generateContent emulator's :data:`KNOWN_MODELS`) → 404 ``models/X is not
   found for API version v1, or is not supported for interactions.`` [UNCONFIRMED wording].
2. ``generation_config`` keys: the SDK's ``GenerationConfig`` fields; ``tools[i]``: ``{"type":
   "function", "name", "description", "parameters"}`` (other keys of ``Function``: ``defer_loading``,
   ``short_description``); an unknown key → the same "Unknown name" 400 at ``'tools[i]'``.
3. ``input``: a string, a content or a list of contents (one ``user_input`` step), or a list of typed
   steps (``user_input`` / ``model_output`` with a ``content`` list of ``{"type": "text", "text"}``;
   ``thought`` with ``signature`` and ``summary``; ``function_call`` with ``id``, ``name``, ``arguments``
   (object); ``function_result`` with ``call_id``, ``name``, ``result``, ``is_error``). An unknown step
   type or field → 400 ``Invalid JSON payload received. Unknown name "x" at 'input[N]': Cannot find
   field.``
4. ``previous_interaction_id``: an id this emulator never stored → **404** ``NOT_FOUND`` ``Interaction
   <id> not found.``; one stored under another model → **400** ``INVALID_ARGUMENT`` ``Interaction <id>
   was created by model <a> and cannot be continued by model <b>.`` (the id is continuation state bound to
   its model; [UNCONFIRMED] wording). The history is the stored one followed by ``input``.
5. Thought signatures (gemini-3 and later; docs/protocols.md §5.6): every ``thought`` step the client
   sends must carry a ``signature`` issued by this emulator for that model and that step's ``summary``
   (HMAC, as the generateContent emulator's), else 400 ``Corrupted thought signature.`` (a missing one:
   ``Thought step is missing a signature.``). In the *current turn* (after the last ``user_input``), a
   run of model steps holding a ``function_call`` must hold its ``thought`` step, else 400 ``Function call
   is missing a thought_signature in function_call steps. ...`` — the stateless mode sends the full thought
   steps back. Earlier turns may omit thoughts (dropped reasoning). A ``function_result`` whose ``call_id``
   names no earlier ``function_call`` → 400 ``function_result call_id <id> does not match any
   function_call.``

Answers
-------
``{"id", "status", "model", ["previous_interaction_id"], "steps", "usage"}``: ``steps`` are the model's new
steps only — a ``thought`` ``{"type", "signature", "summary"}`` (gemini-3+: always, even without reasoning
text: "Always present"; the summary is ``[{"type": "text", "text"}]``, empty when ``thinking_summaries`` is
``"none"``), a ``model_output`` ``{"type", "content"}``, then one ``function_call`` ``{"type", "id",
"name", "arguments"}`` per call (ids ``call_<n>``). ``status`` is ``requires_action`` with calls,
``incomplete`` for a truncated action, else ``completed``. ``store`` (default **true**) keeps the history
plus these steps under the id (``int_emu_<n>``).

Usage and the implicit cache (docs/protocols.md §5.6): the prompt is a list of segments —
``canonical_json({"system_instruction": s})``, ``canonical_json({"tools": tools})``, then one
``canonical_json(step)`` per history step (stored or sent, as the server holds it) —
``total_input_tokens = Σ count_tokens(segment)`` (it *includes* the cached tokens);
``total_cached_tokens = m if m >= min_tokens else 0`` with ``m`` the longest shared leading item run over
the earlier prompts of the same model (:func:`~reasonstate.testing.openai.shared_item_tokens`), the minimum
as generateContent's (:func:`~reasonstate.testing.gemini.implicit_cache_min_tokens`, or
``cache_min_tokens``); ``total_thought_tokens = count_tokens(reasoning)``; ``total_output_tokens`` the
tokens of the model_output text and of each call's canonical JSON; ``total_tokens`` their sum with the input.
Zero counts are absent.

Streaming (``stream: true``): SSE events ``event: <event_type>`` / ``data: <json>``:
``interaction.created`` ``{"interaction": {"id", "status": "in_progress", "model"}}``; per step ``index``:
``step.start`` (a thought as ``{"type": "thought"}``, a model_output as ``{"type": "model_output"}``, a
function_call whole), ``step.delta`` (``thought_summary`` ``{"content": {"type": "text", "text"}}``
pieces, then ``{"type": "thought_signature", "signature"}``; ``text`` pieces for model output),
``step.stop``; last ``interaction.completed`` with ``{"id", "status", "model", "usage"}``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from reasonstate.testing._server import (
    DEFAULT_SECRET,
    JSONResponse,
    RecordedRequest,
    Route,
    ScriptedEmulator,
    StreamResponse,
    Transform,
    sse_event,
)
from reasonstate.testing.gemini import (
    KNOWN_MODELS,
    MODEL_ALIASES,
    genai_client,
    implicit_cache_min_tokens,
    model_generation,
    validates_signatures,
)
from reasonstate.testing.openai import canonical_json, shared_item_tokens
from reasonstate.testing.script import ModelAction, Responder, Script, ScriptExhausted, count_tokens

if TYPE_CHECKING:
    from google import genai

__all__ = ["REQUEST_FIELDS", "GeminiInteractionsEmulator"]

#: the top-level fields of a model interaction (google-genai 3.6.1 ``CreateModelInteraction``)
REQUEST_FIELDS = frozenset(
    {
        "model",
        "background",
        "cached_content",
        "continuation_token",
        "environment",
        "generation_config",
        "input",
        "labels",
        "previous_interaction_id",
        "response_format",
        "response_mime_type",
        "response_modalities",
        "safety_settings",
        "service_tier",
        "store",
        "stream",
        "system_instruction",
        "tools",
        "webhook_config",
    }
)
#: ``GenerationConfig`` fields (SDK ``generationconfig.py``)
_GENERATION_FIELDS = frozenset(
    {
        "image_config",
        "max_output_tokens",
        "seed",
        "speech_config",
        "stop_sequences",
        "temperature",
        "thinking_level",
        "thinking_summaries",
        "tool_choice",
        "top_p",
        "transcription_config",
        "video_config",
    }
)
_FUNCTION_FIELDS = frozenset(
    {"type", "name", "description", "parameters", "defer_loading", "short_description"}
)
#: the step types and their fields (SDK ``userinputstep.py``, ``modeloutputstep.py``, ``thoughtstep.py``,
#: ``functioncallstep.py``, ``functionresultstep.py``)
_STEP_FIELDS: dict[str, frozenset[str]] = {
    "user_input": frozenset({"type", "content"}),
    "model_output": frozenset({"type", "content", "error"}),
    "thought": frozenset({"type", "signature", "summary"}),
    "function_call": frozenset({"type", "id", "name", "arguments"}),
    "function_result": frozenset({"type", "call_id", "name", "result", "is_error"}),
}
_MODEL_STEPS = frozenset({"model_output", "thought", "function_call"})
#: the content types ``input`` may hold instead of steps (SDK ``content.py``)
_CONTENT_TYPES = frozenset({"text", "image", "audio", "document", "video"})
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    500: "INTERNAL",
}
#: Vertex AI's path for the Interactions API: google-genai 3.6.1's ``get_google_genai_api_version`` puts
#: ``projects/{project}/locations/{location}`` after the version for a Vertex client (docs/protocols.md §5.6)
_VERTEX_ROUTE = r"/(v1|v1beta1)/projects/[^/]+/locations/[^/]+/interactions"
_VERTEX_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential."
)
_ERR_NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). Please use API Key "
    "or other form of API consumer identity to call this API."
)
_ERR_CORRUPTED = "Corrupted thought signature."
_SIG_TAG = b"\xfb\xfe"  # not the generateContent tag: a Part's signature never verifies on a thought step
_NONCE_LEN = 12
_MAC_LEN = 32


class _Reject(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def _error(code: int, message: str) -> JSONResponse:
    return JSONResponse(
        code, {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}
    )


def _unknown(name: str, where: str | None = None) -> _Reject:
    at = f" at '{where}'" if where else ""
    return _Reject(f'Invalid JSON payload received. Unknown name "{name}"{at}: Cannot find field.')


def _known_fields(value: Any, known: frozenset[str], where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Reject(f"Invalid value at '{where}' (type.googleapis.com/google.protobuf.Struct)")
    for key in value:
        if key not in known:
            raise _unknown(key, where)
    return value


def _texts(content: Any, where: str) -> list[str]:
    if not isinstance(content, list):
        raise _Reject(f"Invalid value at '{where}.content': a list of content is required.")
    out = []
    for k, c in enumerate(content):
        _known_fields(c, frozenset({"type", "text", "annotations"}), f"{where}.content[{k}]")
        if c.get("type") != "text" or not isinstance(c.get("text"), str):
            raise _Reject(f"Invalid value at '{where}.content[{k}]': only text content is emulated.")
        out.append(c["text"])
    return out


def _steps(value: Any) -> list[dict[str, Any]]:
    """``input`` as a list of typed steps (a string is one user_input step), validated."""
    if isinstance(value, str):
        return [{"type": "user_input", "content": [{"type": "text", "text": value}]}]
    if isinstance(value, Mapping) and value.get("type") in _CONTENT_TYPES:
        value = [value]
    if (
        isinstance(value, list)
        and value
        and all(isinstance(c, Mapping) and c.get("type") in _CONTENT_TYPES for c in value)
    ):
        # a content or a list of contents is one user turn (SDK ``InteractionsInput``)
        _texts(value, "input")
        return [{"type": "user_input", "content": list(value)}]
    if not isinstance(value, list):
        raise _Reject("Invalid value at 'input': a string or a list of steps is required.")
    steps = []
    for i, step in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(step, Mapping) or step.get("type") not in _STEP_FIELDS:
            kind = step.get("type") if isinstance(step, Mapping) else None
            raise _Reject(f"Invalid value at '{where}.type': unknown step type {kind!r}.")
        _known_fields(step, _STEP_FIELDS[step["type"]], where)
        kind = step["type"]
        if kind in ("user_input", "model_output"):
            _texts(step.get("content"), where)
        elif kind == "thought":
            summary = step.get("summary", [])
            if not isinstance(summary, list):
                raise _Reject(f"Invalid value at '{where}.summary': a list is required.")
            _texts(summary, where)
        elif kind == "function_call":
            if not isinstance(step.get("id"), str) or not isinstance(step.get("name"), str):
                raise _Reject(f"Invalid value at '{where}': function_call needs an id and a name.")
            if not isinstance(step.get("arguments"), Mapping):
                raise _Reject(
                    f"Invalid value at '{where}.arguments' (type.googleapis.com/google.protobuf.Struct)"
                )
        elif kind == "function_result" and (not isinstance(step.get("call_id"), str) or "result" not in step):
            raise _Reject(f"Invalid value at '{where}': function_result needs a call_id and a result.")
        steps.append(dict(step))
    return steps


def _current_turn(history: Sequence[Mapping[str, Any]]) -> int:
    return max((i for i, s in enumerate(history) if s.get("type") == "user_input"), default=0)


class GeminiInteractionsEmulator(ScriptedEmulator):
    """The Interactions API on 127.0.0.1: point ``genai.Client`` at its ``base_url`` (:meth:`client` does);
    it will reject what the vendor rejects (see the module docstring for every rule it enforces).

    ``script``: what the model does (:class:`~reasonstate.testing.script.ModelAction` values or a responder).
    ``secret``: the HMAC key of the thought signatures. ``cache_min_tokens``: the implicit-cache minimum for
    every model (default: generateContent's per model). ``models``: ids served on top of the Gemini table.
    """

    def __init__(
        self,
        script: Script | Iterable[ModelAction] | Responder = (),
        *,
        secret: bytes | str | None = None,
        cache_min_tokens: int | None = None,
        transform: Transform | None = None,
        api_key: str | Iterable[str] | None = None,
        models: Iterable[str] = (),
        platform: str = "gemini",
    ) -> None:
        if platform not in ("gemini", "vertex"):
            raise ValueError(f"platform must be 'gemini' or 'vertex', got {platform!r}")
        #: ``"gemini"`` (the Gemini API) or ``"vertex"`` (Vertex AI: ``/{v1,v1beta1}/projects/P/locations/L/
        #: interactions`` with an OAuth access token, docs/protocols.md §5.6)
        self.platform = platform
        if platform == "vertex" and secret is None:
            secret = DEFAULT_SECRET + b":vertex"  # another service: another signing key
        super().__init__(
            [Route("POST", _VERTEX_ROUTE, self._handle_vertex)]
            if platform == "vertex"
            else [Route("POST", r"/(v1|v1beta)/interactions", self._handle)],
            name="gemini-interactions-emulator",
            script=script,
            secret=secret,
            transform=transform,
            aliases=MODEL_ALIASES,
            api_key=api_key,
            known_models=KNOWN_MODELS,
            models=models,
        )
        self.cache_min_tokens = cache_min_tokens
        self._ids = itertools.count(1)
        self._calls = itertools.count(1)
        #: interaction id → (model, the full history it holds: input and output steps)
        self.stored: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self._prompts: dict[str, list[list[bytes]]] = {}

    def knows_model(self, model: str) -> bool:
        return super().knows_model(model) or model_generation(model) is not None

    def clear_cache(self) -> None:
        with self._lock:
            self._prompts.clear()

    def client(self, *, api_version: str = "v1", api_key: str = "test-key", **kw: Any) -> genai.Client:
        """A real ``google.genai.Client`` on this emulator (no proxies from the environment, no retries:
        ``client.interactions`` for sync calls, ``client.aio.interactions`` for async ones)."""
        return genai_client(
            self.base_url, self.platform, api_version=api_version, api_key=api_key, single_attempt=True, **kw
        )

    def _handle_vertex(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        """Vertex AI: a Bearer access token; a missing or unknown one is Google's 401 ``UNAUTHENTICATED``;
        then the request is the Gemini API's (docs/protocols.md §5.6, §10.6)."""
        auth = request.headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not key or not self.key_accepted(key):
            return _error(401, _VERTEX_UNAUTHENTICATED)
        version = "v1" if request.path.split("/")[1] == "v1" else "v1beta"
        inner = attrs.evolve(
            request, path=f"/{version}/interactions", headers={**request.headers, "x-goog-api-key": key}
        )
        return self._handle(inner)

    # -- signatures ---------------------------------------------------------------------------------
    def _mac(self, model: str, nonce: bytes, summary: Any) -> bytes:
        message = b"\x00".join(
            (b"gemini-interactions-thought", model.encode(), nonce, canonical_json(summary).encode())
        )
        return hmac.new(self.secret, message, hashlib.sha256).digest()

    def sign(self, model: str, summary: Any) -> str:
        nonce = os.urandom(_NONCE_LEN)
        mac = self._mac(self.resolve_model(model), nonce, summary)
        return base64.b64encode(_SIG_TAG + nonce + mac).decode("ascii")

    def verify(self, model: str, summary: Any, signature: Any) -> bool:
        if not isinstance(signature, str):
            return False
        try:
            raw = base64.b64decode(signature, validate=True)
        except ValueError:
            return False
        if len(raw) != len(_SIG_TAG) + _NONCE_LEN + _MAC_LEN or not raw.startswith(_SIG_TAG):
            return False
        nonce = raw[len(_SIG_TAG) : len(_SIG_TAG) + _NONCE_LEN]
        return hmac.compare_digest(raw[-_MAC_LEN:], self._mac(self.resolve_model(model), nonce, summary))

    # -- the handler --------------------------------------------------------------------------------
    def handle(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        """Answer one request to ``/{v1,v1beta}/interactions`` (the route of this emulator's server, or of
        another server that serves it on its own path: ``reasonstate emulate gemini``)."""
        return self._handle(request)

    def _handle(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        key = request.headers.get("x-goog-api-key", "").strip() or "".join(request.query.get("key", []))
        if not key:
            return _error(403, _ERR_NO_KEY)
        if not self.key_accepted(key):
            return _error(400, "API key not valid. Please pass a valid API key.")
        try:
            body = request.json()
        except ValueError:
            return _error(400, "Invalid JSON payload received. Unexpected token.")
        version = request.path.split("/")[1]
        with self._lock:
            try:
                model, history, stream = self._validate(body, version)
            except _Reject as rejected:
                return _error(rejected.status, rejected.message)
            try:
                action = self.script.take(body)
            except ScriptExhausted as exc:
                return _error(500, str(exc))
            response = self._respond(model, body, history, action)
        response = self._transformed(response)
        if not stream:
            return JSONResponse(200, response)
        return StreamResponse(list(_sse(response)))

    def _validate(self, body: Any, version: str) -> tuple[str, list[dict[str, Any]], bool]:
        if not isinstance(body, dict):
            raise _Reject("Invalid JSON payload received. Unexpected token.")
        for key in body:
            if key not in REQUEST_FIELDS:
                raise _unknown(key)
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise _Reject("model is required.")
        if not self.knows_model(name.removeprefix("models/")):
            raise _Reject(
                f"models/{name} is not found for API version {version}, or is not supported for "
                "interactions.",
                404,
            )
        model = self.resolve_model(name.removeprefix("models/"))
        if body.get("generation_config") is not None:
            _known_fields(body["generation_config"], _GENERATION_FIELDS, "generation_config")
        for i, tool in enumerate(body.get("tools") or ()):
            _known_fields(tool, _FUNCTION_FIELDS, f"tools[{i}]")
            if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
                raise _Reject(f"Invalid value at 'tools[{i}]': only function tools are emulated.")
        if "input" not in body and not body.get("previous_interaction_id"):
            raise _Reject("input is required.")
        sent = _steps(body.get("input", []))
        stored: list[dict[str, Any]] = []
        previous = body.get("previous_interaction_id")
        if previous is not None:
            held = self.stored.get(previous) if isinstance(previous, str) else None
            if held is None:
                raise _Reject(f"Interaction {previous} not found.", 404)
            if held[0] != model:
                raise _Reject(
                    f"Interaction {previous} was created by model {held[0]} and cannot be continued by "
                    f"model {model}.",
                )
            stored = held[1]
        history = [*stored, *sent]
        self._check_thoughts(model, stored, sent)
        return model, history, body.get("stream") is True

    def _check_thoughts(self, model: str, stored: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
        history = [*stored, *sent]
        calls: set[str] = set()
        for step in history:
            if step["type"] == "function_call":
                calls.add(step["id"])
            elif step["type"] == "function_result" and step["call_id"] not in calls:
                raise _Reject(f"function_result call_id {step['call_id']} does not match any function_call.")
        if not validates_signatures(model):
            return
        for step in sent:
            if step["type"] != "thought":
                continue
            if step.get("signature") is None:
                raise _Reject("Thought step is missing a signature.")
            if not self.verify(model, step.get("summary", []), step["signature"]):
                raise _Reject(_ERR_CORRUPTED)
        run: list[dict[str, Any]] = []
        start = _current_turn(history)
        for position, step in enumerate([*history[start:], {"type": "user_input"}]):
            if step["type"] in _MODEL_STEPS:
                run.append(step)
                continue
            first_call = next((s for s in run if s["type"] == "function_call"), None)
            if first_call is not None and not any(s["type"] == "thought" for s in run):
                raise _Reject(
                    "Function call is missing a thought_signature in function_call steps. This is required "
                    "for tools to work correctly, and missing thought_signature may lead to degraded model "
                    f"performance. Additional data, function call `default_api:{first_call['name']}` , "
                    f"position {start + position}. Please refer to "
                    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
                )
            run = []

    # -- answers ------------------------------------------------------------------------------------
    def _respond(
        self, model: str, body: Mapping[str, Any], history: list[dict[str, Any]], action: ModelAction
    ) -> dict[str, Any]:
        config = body.get("generation_config") or {}
        steps: list[dict[str, Any]] = []
        thinks = (model_generation(model) or (0, 0)) >= (2, 5)
        if thinks:
            summary: list[dict[str, Any]] = []
            if action.reasoning and config.get("thinking_summaries") != "none":
                summary = [{"type": "text", "text": action.reasoning}]
            steps.append({"type": "thought", "signature": self.sign(model, summary), "summary": summary})
        if action.text:
            steps.append({"type": "model_output", "content": [{"type": "text", "text": action.text}]})
        for call in action.tool_calls:
            steps.append(
                {
                    "type": "function_call",
                    "id": f"call_{next(self._calls)}",
                    "name": call.name,
                    "arguments": dict(call.arguments),
                }
            )
        segments: list[str] = []
        if body.get("system_instruction") is not None:
            segments.append(canonical_json({"system_instruction": body["system_instruction"]}))
        if body.get("tools"):
            segments.append(canonical_json({"tools": body["tools"]}))
        segments.extend(canonical_json(s) for s in history)
        prompt_tokens = sum(count_tokens(s) for s in segments)
        prompt = [s.encode() for s in segments]
        earlier = self._prompts.setdefault(model, [])
        matched = max((shared_item_tokens(prompt, q) for q in earlier), default=0)
        earlier.append(prompt)
        minimum = (
            self.cache_min_tokens if self.cache_min_tokens is not None else implicit_cache_min_tokens(model)
        )
        cached = matched if minimum is not None and matched >= minimum else 0
        thoughts = count_tokens(action.reasoning or "") if thinks else 0
        output = count_tokens(action.text or "") + sum(
            count_tokens(canonical_json({"arguments": s["arguments"], "name": s["name"]}))
            for s in steps
            if s["type"] == "function_call"
        )
        usage = {
            "total_input_tokens": prompt_tokens,
            "total_cached_tokens": cached,
            "total_output_tokens": output,
            "total_thought_tokens": thoughts,
            "total_tokens": prompt_tokens + output + thoughts,
        }
        iid = f"int_emu_{next(self._ids):03d}"
        status = "completed"
        if action.tool_calls:
            status = "requires_action"
        elif action.stop == "max_tokens":
            status = "incomplete"
        if body.get("store") is not False:
            self.stored[iid] = (model, [*history, *steps])
        answer: dict[str, Any] = {"id": iid, "status": status, "model": model}
        if body.get("previous_interaction_id") is not None:
            answer["previous_interaction_id"] = body["previous_interaction_id"]
        answer["steps"] = steps
        answer["usage"] = {k: v for k, v in usage.items() if v}
        return answer


def _sse(answer: Mapping[str, Any]) -> Iterator[bytes]:
    """The stream of ``answer`` (module docstring: Streaming)."""
    head = {"id": answer["id"], "status": "in_progress", "model": answer["model"]}
    yield sse_event("interaction.created", {"event_type": "interaction.created", "interaction": head})
    for index, step in enumerate(answer["steps"]):
        start: dict[str, Any] = {"type": step["type"]} if step["type"] != "function_call" else step
        yield sse_event("step.start", {"event_type": "step.start", "index": index, "step": start})
        deltas: list[dict[str, Any]] = []
        if step["type"] == "thought":
            for content in step["summary"]:
                for piece in _pieces(content["text"]):
                    deltas.append({"type": "thought_summary", "content": {"type": "text", "text": piece}})
            deltas.append({"type": "thought_signature", "signature": step["signature"]})
        elif step["type"] == "model_output":
            for content in step["content"]:
                deltas.extend({"type": "text", "text": piece} for piece in _pieces(content["text"]))
        for delta in deltas:
            yield sse_event("step.delta", {"event_type": "step.delta", "index": index, "delta": delta})
        yield sse_event("step.stop", {"event_type": "step.stop", "index": index})
    done = {k: v for k, v in answer.items() if k != "steps"}
    yield sse_event("interaction.completed", {"event_type": "interaction.completed", "interaction": done})


def _pieces(text: str) -> list[str]:
    """A text in up to three consecutive pieces (a stream cuts text anywhere)."""
    if len(text) < 3:
        return [text]
    third = len(text) // 3
    return [text[:third], text[third : 2 * third], text[2 * third :]]
