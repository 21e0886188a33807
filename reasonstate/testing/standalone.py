"""One emulator as a standalone server: what ``reasonstate emulate VENDOR`` runs.

``reasonstate emulate {anthropic,responses,chat,gemini,completions} --port N [--script FILE]
[--host 127.0.0.1] [--dialect openai|deepseek|vllm|sglang|openrouter] [--tokenizer NAME] [--secret TEXT]
[--api-key KEY]`` starts the emulator, prints its base URL and the environment variables that point the
vendor SDK at it, and serves until SIGINT or SIGTERM (then it stops the server and exits 0). ``--port 0``
picks a free port; the printed URL has the real one. ``gemini`` serves both of Google's APIs on one server:
``generateContent`` and the Interactions API (``POST /{v1,v1beta}/interactions``,
:class:`~reasonstate.testing.gemini_interactions.GeminiInteractionsEmulator`), one script for both.

Keys and signing secret. The emulator accepts the keys ``test-key`` and ``emulator-key``
(:data:`~reasonstate.testing._server.API_KEYS`; the printout exports ``emulator-key``), or only ``--api-key
KEY`` when given (then the printout exports that key); any other key gets the vendor's invalid-key error.
vLLM/SGLang (``chat --dialect vllm|sglang``, ``completions``) check no key unless ``--api-key`` is given,
like those servers. What it signs (thinking signatures, encrypted reasoning, thought signatures) is keyed by
:data:`~reasonstate.testing._server.DEFAULT_SECRET` unless ``--secret TEXT`` is given, so a snapshot taken
against one ``reasonstate emulate`` process continues against a later one started with the same secret.

Script files (JSON)
-------------------
A list of actions, served in order, one per successful model call (a rejected request consumes none)::

    [
      {"reasoning": "Two cities: call the tool.", "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Paris"}}]},
      {"reasoning": "Compare.", "text": "Rome is warmer."}
    ]

An action's keys are the fields of :class:`~reasonstate.testing.script.ModelAction`: ``reasoning``
(string), ``text`` (string), ``tool_calls`` (a list of ``{"name", "arguments", "raw_arguments"}``, the
fields of :class:`~reasonstate.testing.script.ToolCallSpec`), ``redacted`` (bool), ``stop`` (``"end"`` or
``"max_tokens"``); any other key is an error. The file may instead be an object ``{"actions": [...],
"when_exhausted": "default" | "error"}``: once the listed actions are used up the default responder
answers (``"default"``, also the list form's behaviour) or every further call is a 500 (``"error"``).

For ``completions`` an action is a string (text, which needs ``--tokenizer``), a list of token ids, or
``{"text" | "token_ids", "finish_reason"}`` (the fields of
:class:`~reasonstate.testing.completions.ScriptedCompletion`).

Default responder (no script, or a script used up)
---------------------------------------------------
* If the request offers tools and its newest input is the user's (not tool results): reasoning
  ``"The user asked: <text>. I will call <tool>."`` and one call of the first tool offered, with every
  required string parameter set to the user's text (other required parameters: ``0``, ``false``, ``{}``,
  ``[]``, by type).
* Otherwise: reasoning ``"Answering: <text>."`` and the text ``"Echo: <text>"``, where ``<text>`` is the
  newest user text, or ``"N tool result(s) received"`` after tool results.
* ``completions``: the prompt's last (up to) 16 token ids, ``finish_reason: "stop"``.

Nothing here imports a vendor SDK, ``reasonstate.adapters`` or ``reasonstate.session``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Literal, TextIO

import attrs

from reasonstate.testing._server import API_KEYS, Emulator
from reasonstate.testing.completions import ScriptedCompletion, VLLMCompletionsEmulator
from reasonstate.testing.script import ModelAction, Script, ScriptExhausted, ToolCallSpec

__all__ = [
    "DUMMY_API_KEY",
    "VENDORS",
    "ScriptFileError",
    "Vendor",
    "build_emulator",
    "default_action",
    "environment",
    "load_actions",
    "load_completions",
    "serve",
]

Vendor = Literal["anthropic", "responses", "chat", "gemini", "completions"]
VENDORS: tuple[Vendor, ...] = ("anthropic", "responses", "chat", "gemini", "completions")

DUMMY_API_KEY = "emulator-key"
"""The API key the printed environment sets (one of :data:`~reasonstate.testing._server.API_KEYS`, which the
emulators accept; any other key is refused unless ``--api-key`` names it)."""

_ACTION_KEYS = frozenset({"reasoning", "text", "tool_calls", "redacted", "stop"})
_CALL_KEYS = frozenset({"name", "arguments", "raw_arguments"})
_COMPLETION_KEYS = frozenset({"text", "token_ids", "finish_reason"})
_ECHO_IDS = 16
_GEMINI_SCHEMA_KEYS = ("parametersJsonSchema", "parameters_json_schema", "parameters")


class ScriptFileError(ValueError):
    """A script file that is not valid JSON or not in the documented format (the message says where)."""


# -- script files ----------------------------------------------------------------------------------------
def _read(path: str | Path) -> tuple[list[Any], bool]:
    """The file's action list and whether the default responder follows it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScriptFileError(f"{path}: {exc}") from exc
    fallback = True
    if isinstance(data, dict):
        unknown = set(data) - {"actions", "when_exhausted"}
        if unknown:
            raise ScriptFileError(
                f"{path}: unknown key(s) {sorted(unknown)}; allowed: actions, when_exhausted"
            )
        when = data.get("when_exhausted", "default")
        if when not in ("default", "error"):
            raise ScriptFileError(f'{path}: when_exhausted must be "default" or "error", not {when!r}')
        fallback = when == "default"
        data = data.get("actions", [])
    if not isinstance(data, list):
        raise ScriptFileError(f"{path}: expected a list of actions (or an object with 'actions')")
    return data, fallback


def _action(raw: Any, where: str) -> ModelAction:
    if not isinstance(raw, dict):
        raise ScriptFileError(f"{where}: an action is a JSON object")
    unknown = set(raw) - _ACTION_KEYS
    if unknown:
        raise ScriptFileError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_ACTION_KEYS)}")
    for key in ("reasoning", "text"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ScriptFileError(f"{where}.{key}: expected a string")
    calls = raw.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ScriptFileError(f"{where}.tool_calls: expected a list")
    specs: list[ToolCallSpec] = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ScriptFileError(f"{at}: expected an object with a string 'name'")
        if set(call) - _CALL_KEYS:
            raise ScriptFileError(f"{at}: unknown key(s) {sorted(set(call) - _CALL_KEYS)}")
        arguments = call.get("arguments", {})
        raw_arguments = call.get("raw_arguments")
        if not isinstance(arguments, dict) or not (raw_arguments is None or isinstance(raw_arguments, str)):
            raise ScriptFileError(f"{at}: arguments must be an object, raw_arguments a string")
        specs.append(ToolCallSpec(call["name"], arguments, raw_arguments))
    stop = raw.get("stop", "end")
    if stop not in ("end", "max_tokens"):
        raise ScriptFileError(f'{where}.stop: expected "end" or "max_tokens"')
    if not isinstance(raw.get("redacted", False), bool):
        raise ScriptFileError(f"{where}.redacted: expected true or false")
    return ModelAction(
        reasoning=raw.get("reasoning"),
        text=raw.get("text"),
        tool_calls=tuple(specs),
        redacted=raw.get("redacted", False),
        stop=stop,
    )


def load_actions(path: str | Path) -> tuple[list[ModelAction], bool]:
    """The :class:`ModelAction` list of a script file, and whether the default responder follows it."""
    data, fallback = _read(path)
    return [_action(raw, f"{path}: [{i}]") for i, raw in enumerate(data)], fallback


def load_completions(path: str | Path) -> tuple[list[ScriptedCompletion], bool]:
    """The :class:`ScriptedCompletion` list of a ``completions`` script file (format in the module doc)."""
    data, fallback = _read(path)
    out: list[ScriptedCompletion] = []
    for i, raw in enumerate(data):
        where = f"{path}: [{i}]"
        if isinstance(raw, str):
            out.append(ScriptedCompletion(text=raw))
        elif isinstance(raw, list) and all(isinstance(t, int) and t >= 0 for t in raw):
            out.append(ScriptedCompletion(token_ids=tuple(raw)))
        elif isinstance(raw, dict) and not set(raw) - _COMPLETION_KEYS:
            ids = raw.get("token_ids")
            finish = raw.get("finish_reason", "stop")
            if finish not in ("stop", "length") or (ids is None) == (raw.get("text") is None):
                raise ScriptFileError(f"{where}: give text or token_ids, and finish_reason stop|length")
            out.append(ScriptedCompletion(raw.get("text"), None if ids is None else tuple(ids), finish))
        else:
            raise ScriptFileError(f"{where}: expected a string, a list of token ids or an object")
    return out, fallback


# -- the default responder ---------------------------------------------------------------------------------
@attrs.frozen(slots=True)
class _Turn:
    """What the default responder reads from a request: the tools offered and the newest input."""

    tools: tuple[tuple[str, Mapping[str, Any]], ...]  # (name, JSON schema of the parameters)
    user_text: str | None  # the newest user text, when the newest input is the user's
    tool_results: int  # how many tool results the newest input carries


def _text_of(content: Any, text_key: str = "text") -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get(text_key, "")) for b in content if isinstance(b, dict) and text_key in b)
    return ""


def _read_turn(vendor: Vendor, body: Any) -> _Turn:
    if not isinstance(body, dict):
        return _Turn((), None, 0)
    tools: list[tuple[str, Mapping[str, Any]]] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if vendor == "anthropic" and "name" in tool:
            tools.append((str(tool["name"]), tool.get("input_schema") or {}))
        elif vendor == "responses" and tool.get("type") == "function":
            tools.append((str(tool.get("name")), tool.get("parameters") or {}))
        elif vendor == "chat" and isinstance(tool.get("function"), dict):
            tools.append((str(tool["function"].get("name")), tool["function"].get("parameters") or {}))
        elif vendor == "gemini" and tool.get("type") == "function":  # the Interactions API's tools
            tools.append((str(tool.get("name")), tool.get("parameters") or {}))
        elif vendor == "gemini":
            for decl in tool.get("functionDeclarations") or tool.get("function_declarations") or []:
                schema: Mapping[str, Any] = next(
                    (decl[k] for k in _GEMINI_SCHEMA_KEYS if isinstance(decl.get(k), dict)), {}
                )
                tools.append((str(decl.get("name")), schema))
    last: Any = None
    if vendor in ("anthropic", "chat"):
        messages = body.get("messages") or []
        last = messages[-1] if messages else None
        if not isinstance(last, dict):
            return _Turn(tuple(tools), None, 0)
        if vendor == "chat":
            tail = [m for m in reversed(messages) if isinstance(m, dict)]
            results = next((i for i, m in enumerate(tail) if m.get("role") != "tool"), len(tail))
            if results:
                return _Turn(tuple(tools), None, results)
            return _Turn(tuple(tools), _text_of(last.get("content")), 0)
        content = last.get("content")
        results = (
            sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
            if (isinstance(content, list))
            else 0
        )
        return _Turn(tuple(tools), None if results else _text_of(content), results)
    if vendor == "responses":
        items = body.get("input")
        if isinstance(items, str):
            return _Turn(tuple(tools), items, 0)
        items = [i for i in items or [] if isinstance(i, dict)]
        outputs = 0
        for item in reversed(items):
            if item.get("type") != "function_call_output":
                break
            outputs += 1
        if outputs:
            return _Turn(tuple(tools), None, outputs)
        last = items[-1] if items else {}
        return _Turn(tuple(tools), _text_of(last.get("content"), "text"), 0)
    if "contents" not in body and "input" in body:  # the Interactions API (docs/protocols.md §5.6)
        steps = body.get("input")
        if isinstance(steps, str):
            return _Turn(tuple(tools), steps, 0)
        steps = [x for x in steps or [] if isinstance(x, dict)] if isinstance(steps, list) else []
        results = 0
        for step in reversed(steps):
            if step.get("type") != "function_result":
                break
            results += 1
        if results:
            return _Turn(tuple(tools), None, results)
        last = steps[-1] if steps else {}
        return _Turn(tuple(tools), _text_of(last.get("content"), "text"), 0)
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    parts = [p for p in (contents[-1].get("parts") or []) if isinstance(p, dict)] if contents else []
    results = sum(1 for p in parts if "functionResponse" in p or "function_response" in p)
    if results:
        return _Turn(tuple(tools), None, results)
    return _Turn(tuple(tools), " ".join(str(p["text"]) for p in parts if "text" in p), 0)


_PLACEHOLDERS: dict[str, Any] = {"integer": 0, "number": 0, "boolean": False, "object": {}, "array": []}


def _arguments(schema: Mapping[str, Any], text: str) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name in schema.get("required") or []:
        kind = str((properties.get(name) or {}).get("type", "string")).lower()
        out[str(name)] = text if kind == "string" else _PLACEHOLDERS.get(kind, text)
    return out


def default_action(vendor: Vendor, body: Any) -> ModelAction:
    """The default responder's answer to one request (the rules are in the module docstring)."""
    turn = _read_turn(vendor, body)
    if turn.user_text is not None and turn.tools:
        name, schema = turn.tools[0]
        return ModelAction.call(
            ToolCallSpec(name, _arguments(schema, turn.user_text)),
            reasoning=f"The user asked: {turn.user_text}. I will call {name}.",
        )
    said = turn.user_text if turn.user_text is not None else f"{turn.tool_results} tool result(s) received"
    return ModelAction.answer(f"Echo: {said}", reasoning=f"Answering: {said}.")


def _exhausted(_: Any) -> ModelAction:
    raise ScriptExhausted("the script file's actions are used up (when_exhausted: error)")


# -- building and serving -----------------------------------------------------------------------------------
def build_emulator(
    vendor: Vendor,
    script: str | Path | None = None,
    *,
    dialect: str = "openai",
    tokenizer: str | None = None,
    secret: str | None = None,
    api_key: str | None = None,
) -> Emulator:
    """The (not yet started) emulator ``reasonstate emulate`` runs, with the script file loaded; ``secret``
    and ``api_key`` as ``--secret`` / ``--api-key`` (None: the documented defaults)."""
    if vendor == "completions":
        completions: list[ScriptedCompletion] = []
        fallback = True
        if script is not None:
            completions, fallback = load_completions(script)

        def echo(prompt: Sequence[int]) -> Sequence[int]:
            return list(prompt[-_ECHO_IDS:])

        return VLLMCompletionsEmulator(completions, tokenizer=tokenizer, responder=echo if fallback else None)
    actions: list[ModelAction] = []
    fallback = True
    if script is not None:
        actions, fallback = load_actions(script)
    responder: Callable[[Any], ModelAction] = (
        (lambda body: default_action(vendor, body)) if fallback else _exhausted
    )
    plan = Script(responder)
    plan.extend(actions)
    if vendor == "anthropic":
        from reasonstate.testing.anthropic import AnthropicEmulator

        return AnthropicEmulator(plan, secret=secret, api_key=api_key)
    if vendor == "gemini":
        from reasonstate.testing._server import Route
        from reasonstate.testing.gemini import GeminiEmulator
        from reasonstate.testing.gemini_interactions import GeminiInteractionsEmulator

        gemini = GeminiEmulator(plan, secret=secret, api_key=api_key)
        # the Interactions API on the same server, its own path and state, the same script
        interactions = GeminiInteractionsEmulator(plan, secret=secret, api_key=api_key)
        gemini.server.add_route(Route("POST", r"/(v1|v1beta)/interactions", interactions.handle))
        return gemini
    if vendor == "responses":
        from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

        return OpenAIResponsesEmulator(plan, secret=secret, api_key=api_key)
    from reasonstate.testing.openai_chat import Dialect, OpenAIChatEmulator

    dialects: dict[str, Dialect] = {"openai": "openai", "deepseek": "deepseek", "vllm": "vllm"}
    dialects["sglang"] = "sglang"
    dialects["openrouter"] = "openrouter"
    if dialect not in dialects:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(dialects)}")
    return OpenAIChatEmulator(plan, dialect=dialects[dialect], secret=secret, api_key=api_key)


def environment(
    vendor: Vendor, base_url: str, *, dialect: str = "openai", api_key: str = DUMMY_API_KEY
) -> dict[str, str]:
    """The environment variables that point the vendor's SDK at an emulator whose root is ``base_url``.

    anthropic reads ``ANTHROPIC_BASE_URL`` (the root); openai reads ``OPENAI_BASE_URL`` (root + ``/v1``, the
    bare root for DeepSeek's dialect); google-genai reads ``GOOGLE_GEMINI_BASE_URL`` (the root) and
    ``GEMINI_API_KEY`` (``GOOGLE_API_KEY`` wins when both are set, so it must be unset or equal).
    """
    if vendor == "anthropic":
        return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": api_key}
    if vendor == "gemini":
        return {"GOOGLE_GEMINI_BASE_URL": base_url, "GEMINI_API_KEY": api_key}
    suffix = "" if vendor == "chat" and dialect == "deepseek" else "/v1"
    return {"OPENAI_BASE_URL": base_url + suffix, "OPENAI_API_KEY": api_key}


def serve(
    vendor: Vendor,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    script: str | Path | None = None,
    dialect: str = "openai",
    tokenizer: str | None = None,
    secret: str | None = None,
    api_key: str | None = None,
    out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run one emulator until SIGINT/SIGTERM (or ``stop`` is set); 0 after a clean stop.

    Prints (and flushes) ``base_url=URL`` first, then one ``export NAME=VALUE`` line per variable of
    :func:`environment`, then one ``# reasonstate ...`` comment naming the accepted keys and the signing
    secret and how to stop it, so a parent process can read the URL from the first line. Signal
    handlers are installed only when called from the main thread.
    """
    stream = out if out is not None else sys.stdout
    emulator = build_emulator(
        vendor, script, dialect=dialect, tokenizer=tokenizer, secret=secret, api_key=api_key
    )
    done = stop if stop is not None else threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, on_signal)
    try:
        emulator.server.bind(host, port)
        emulator.server.start()  # OSError (port in use, address not available) propagates after cleanup
        label = f"{vendor} ({dialect})" if vendor == "chat" else vendor
        print(f"base_url={emulator.base_url}", file=stream)
        exported = DUMMY_API_KEY if api_key is None else api_key
        for name, value in environment(vendor, emulator.base_url, dialect=dialect, api_key=exported).items():
            print(f"export {name}={value}", file=stream)
        keys = ", ".join(sorted(API_KEYS)) if api_key is None else api_key
        if vendor == "completions" or (
            vendor == "chat" and dialect in ("vllm", "sglang") and api_key is None
        ):
            keys = "any (like a vLLM/SGLang server without --api-key)"
        signing = "the default (reasonstate.testing._server.DEFAULT_SECRET)" if secret is None else "--secret"
        print(
            f"# reasonstate {label} emulator serving (accepted API keys: {keys}; signing secret: {signing}); "
            "Ctrl-C (SIGINT) or SIGTERM stops it",
            file=stream,
        )
        stream.flush()
        while not done.wait(0.2):
            pass
    finally:
        # a request being answered gets 2 s to finish (its answer, or the traceback of its error, written)
        # before this process exits: the server thread ends at once, the request threads do not
        emulator.stop(grace=2.0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0
