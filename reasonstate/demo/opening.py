"""The demo's opening: what goes wrong without the library, measured on the strict emulators.

The same small agent job (:data:`OPENING_TURNS` user turns of the travel-desk job, the first one a tool
chain) runs three ways, each with the real vendor SDK client over HTTP:

* **plain loops that lose continuation state** inside the tool chain, written the way agent frameworks do
  it: replies are stored in a vendor-neutral shape (text + tool calls) and rendered back. Anthropic loses
  its ``thinking`` blocks, DeepSeek its ``reasoning_content``, Gemini its thought signatures; each vendor
  answers 400 (docs/protocols.md §4.3, §3.3, §5.4) and the loop stops there;
* **plain loops that put the clock in the system prompt** (``Current time: …`` rendered on every request),
  continuation replayed correctly: every request's prefix differs early, so the prefix cache misses;
* **the same job through** :class:`reasonstate.Session`: no 400, and the cache hits are kept (the system
  prompt is fixed when the session is built, and the session warns about the clock in it).

Every figure comes from the HTTP responses themselves (status codes and the vendor's own usage fields,
``cache_read_input_tokens`` for Anthropic, ``prompt_cache_hit_tokens`` for DeepSeek), captured by an
``httpx2`` response hook on the SDK client — the same fields for the plain loops and for the session.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.demo import job
from reasonstate.state import EventKind

__all__ = [
    "OPENING_TURNS",
    "CacheSeries",
    "Opening",
    "Rejection",
    "SessionRun",
    "run_opening",
]

#: user turns of the opening job: turn 0 is a tool chain (3 model calls), the others plain follow-ups
OPENING_TURNS = 4
DEEPSEEK_MODEL = "deepseek-v4-pro"
GEMINI_MODEL = "gemini-3-flash"
THINKING = {"type": "enabled", "budget_tokens": 2048}


@attrs.frozen
class Rejection:
    """A plain loop's request that the vendor refused: where, with which status and message."""

    vendor: str
    mistake: str
    request: int  # 0-based index of the refused request in the job
    status: int
    message: str


@attrs.frozen
class SessionRun:
    """The same job through ``rs.Session``: every HTTP status the vendor answered."""

    vendor: str
    statuses: tuple[int, ...]
    volatile_advice: str | None = None

    @property
    def errors(self) -> int:
        return sum(1 for s in self.statuses if s >= 400)


@attrs.frozen
class CacheSeries:
    """Per request: the prompt size and the cached tokens, both as the vendor reported them."""

    vendor: str
    field: str
    who: str
    prompt: tuple[int, ...]
    cached: tuple[int, ...]
    statuses: tuple[int, ...]


@attrs.frozen
class Opening:
    rejections: tuple[Rejection, ...]
    sessions: tuple[SessionRun, ...]
    #: (plain loop with the clock in its system prompt, rs.Session) per vendor
    cache: tuple[tuple[CacheSeries, CacheSeries], ...]

    @property
    def plain_400s(self) -> int:
        return sum(1 for r in self.rejections if r.status == 400)

    @property
    def session_errors(self) -> int:
        return sum(s.errors for s in self.sessions)

    def lost_hits(self) -> int:
        """Requests where the session read tokens from cache and the plain loop read fewer."""
        return sum(
            1
            for plain, session in self.cache
            for p, s in zip(plain.cached, session.cached, strict=True)
            if s > p
        )


# -- the wire -----------------------------------------------------------------------------------------
class Wire:
    """Every response the SDK client received: status and JSON body (an ``httpx2`` response hook)."""

    def __init__(self) -> None:
        self.responses: list[tuple[int, Any]] = []

    def hook(self, response: Any) -> None:
        response.read()
        try:
            body = json.loads(response.content)
        except ValueError:
            body = None
        self.responses.append((int(response.status_code), body))

    def http_client(self) -> Any:
        import httpx2

        return httpx2.Client(trust_env=False, event_hooks={"response": [self.hook]})

    @property
    def statuses(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.responses)

    def usage(self, field: str) -> tuple[int, ...]:
        return tuple(
            int((body.get("usage") or {}).get(field) or 0)
            for status, body in self.responses
            if status == 200 and isinstance(body, dict)
        )


# -- the job ------------------------------------------------------------------------------------------
def questions() -> list[str]:
    return job.questions()[:OPENING_TURNS]


def actions() -> list[Any]:
    calls = sum(3 if i % 3 == 0 else 1 for i in range(OPENING_TURNS))
    return job.scripted_actions()[:calls]


def _tool_messages(calls: Any) -> list[dict[str, Any]]:
    """The ``tool`` messages answering a chat completion's tool calls, in their order."""
    return [
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": _result(call.function.name, json.loads(call.function.arguments)),
        }
        for call in calls
    ]


def _result(name: str, arguments: Any) -> str:
    tool = next(t for t in job.TOOLS if t.name == name)
    assert tool.handler is not None
    value = tool.handler(**dict(arguments))
    return value if isinstance(value, str) else json.dumps(value)


def _now() -> str:
    return str(datetime.datetime.now(datetime.timezone.utc))  # str(datetime.now()), as usually written


def clock_system(now: str) -> str:
    """The framework habit: the current time in the system prompt."""
    return f"{job.SYSTEM}\nCurrent time: {now}"


class _Refused(Exception):
    """A plain loop's request the vendor refused (the loop stops there, as an agent would)."""

    def __init__(self, request: int, status: int, message: str) -> None:
        super().__init__(message)
        self.request, self.status, self.message = request, status, message


# -- plain loops that lose continuation state ----------------------------------------------------------
def _anthropic_tools() -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in job.TOOLS
    ]


def _chat_tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in job.TOOLS
    ]


def anthropic_neutral_loop(client: Any) -> int:
    """Each reply stored as text + tool calls (a framework's own message shape), rendered back as Anthropic
    content blocks: the ``thinking`` blocks never make it back."""
    import anthropic

    messages: list[dict[str, Any]] = []
    sent = 0
    for question in questions():
        messages.append({"role": "user", "content": question})
        while True:
            try:
                reply = client.messages.create(
                    model=job.MODEL,
                    max_tokens=4096,
                    thinking=THINKING,
                    system=job.SYSTEM,
                    tools=_anthropic_tools(),
                    messages=messages,
                )
            except anthropic.APIStatusError as exc:
                raise _Refused(sent, exc.status_code, _anthropic_message(exc.body)) from None
            sent += 1
            text = "".join(b.text for b in reply.content if b.type == "text")
            calls = [b for b in reply.content if b.type == "tool_use"]
            content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in calls]
            messages.append({"role": "assistant", "content": content})
            if not calls:
                break
            results = [
                {"type": "tool_result", "tool_use_id": c.id, "content": _result(c.name, c.input)}
                for c in calls
            ]
            messages.append({"role": "user", "content": results})
    return sent


def deepseek_neutral_loop(client: Any) -> int:
    """Each reply rebuilt as an OpenAI-schema assistant message (``content`` + ``tool_calls``): DeepSeek's
    ``reasoning_content`` is not in that schema, so it is dropped."""
    import openai

    messages: list[dict[str, Any]] = [{"role": "system", "content": job.SYSTEM}]
    sent = 0
    for question in questions():
        messages.append({"role": "user", "content": question})
        while True:
            try:
                completion = client.chat.completions.create(
                    model=DEEPSEEK_MODEL, messages=messages, tools=_chat_tools(), reasoning_effort="high"
                )
            except openai.APIStatusError as exc:
                raise _Refused(sent, exc.status_code, _openai_message(exc.body)) from None
            sent += 1
            message = completion.choices[0].message
            calls = message.tool_calls or []
            assistant: dict[str, Any] = {"role": "assistant", "content": message.content}
            if calls:
                assistant["tool_calls"] = [c.model_dump() for c in calls]
            messages.append(assistant)
            if not calls:
                break
            messages.extend(_tool_messages(calls))
    return sent


def gemini_neutral_loop(client: Any) -> int:
    """Each model turn rebuilt from its text and function calls (``Part.from_function_call``): the thought
    signatures stay behind on the parts that were not kept."""
    from google.genai import errors, types

    declarations = [
        types.FunctionDeclaration(
            name=t.name, description=t.description, parameters_json_schema=dict(t.parameters)
        )
        for t in job.TOOLS
    ]
    config = types.GenerateContentConfig(
        system_instruction=job.SYSTEM,
        tools=[types.Tool(function_declarations=declarations)],
        thinking_config=types.ThinkingConfig(include_thoughts=True),
    )
    contents: list[Any] = []
    sent = 0
    for question in questions():
        contents.append(types.Content(role="user", parts=[types.Part.from_text(text=question)]))
        while True:
            try:
                response = client.models.generate_content(
                    model=GEMINI_MODEL, contents=contents, config=config
                )
            except errors.APIError as exc:
                raise _Refused(sent, int(exc.code), str(exc.message)) from None
            sent += 1
            parts = response.candidates[0].content.parts or []
            text = "".join(p.text for p in parts if p.text and not p.thought)
            calls = [p.function_call for p in parts if p.function_call]
            rebuilt = [types.Part.from_text(text=text)] if text else []
            rebuilt += [types.Part.from_function_call(name=c.name, args=c.args) for c in calls]
            contents.append(types.Content(role="model", parts=rebuilt))
            if not calls:
                break
            answers = [
                types.Part.from_function_response(name=c.name, response={"result": _result(c.name, c.args)})
                for c in calls
            ]
            contents.append(types.Content(role="user", parts=answers))
    return sent


def _anthropic_message(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message")) if isinstance(error, dict) else str(body)


def _openai_message(body: Any) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])
    return str(body)


# -- plain loops with the clock in the system prompt ---------------------------------------------------
def anthropic_clock_loop(client: Any) -> int:
    """Continuation replayed right (``reply.to_param()``), cache breakpoints on the system prompt and the
    newest block — but the system prompt carries the current time, rendered on every request."""
    messages: list[Any] = []
    sent = 0
    for question in questions():
        messages.append({"role": "user", "content": question})
        while True:
            system = [{"type": "text", "text": clock_system(_now()), "cache_control": {"type": "ephemeral"}}]
            reply = client.messages.create(
                model=job.MODEL,
                max_tokens=4096,
                thinking=THINKING,
                system=system,
                tools=_anthropic_tools(),
                messages=messages,
                cache_control={"type": "ephemeral"},
            )
            sent += 1
            messages.append(reply.to_param())
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                break
            results = [
                {"type": "tool_result", "tool_use_id": c.id, "content": _result(c.name, c.input)}
                for c in calls
            ]
            messages.append({"role": "user", "content": results})
    return sent


def deepseek_clock_loop(client: Any) -> int:
    """Continuation replayed right (``message.model_dump(exclude_none=True)`` keeps ``reasoning_content``,
    docs/protocols.md §3.6) — but the system message carries the current time, rendered on every request."""
    history: list[dict[str, Any]] = []
    sent = 0
    for question in questions():
        history.append({"role": "user", "content": question})
        while True:
            messages = [{"role": "system", "content": clock_system(_now())}, *history]
            completion = client.chat.completions.create(
                model=DEEPSEEK_MODEL, messages=messages, tools=_chat_tools(), reasoning_effort="high"
            )
            sent += 1
            message = completion.choices[0].message
            history.append(message.model_dump(exclude_none=True))
            calls = message.tool_calls or []
            if not calls:
                break
            history.extend(_tool_messages(calls))
    return sent


# -- the same job through rs.Session -------------------------------------------------------------------
def _session_job(client: Any, model: str, **options: Any) -> str | None:
    """The opening job through a session whose system prompt has the clock in it (fixed at construction);
    the session's advice about that clock, from its trace."""
    session = rs.Session(client, model=model, system=clock_system(_now()), tools=job.TOOLS, **options)
    for question in questions():
        session.run(question)
    volatile = session.trace.of_kind(EventKind.PREFIX_VOLATILE)
    return str(volatile[0].data["advice"]) if volatile else None


@contextmanager
def _anthropic(wire: Wire) -> Iterator[Any]:
    from reasonstate.testing.anthropic import AnthropicEmulator

    with AnthropicEmulator(actions()) as emulator:
        client = emulator.client(http_client=wire.http_client())
        try:
            yield client
        finally:
            client.close()


@contextmanager
def _deepseek(wire: Wire) -> Iterator[Any]:
    from reasonstate.testing.openai_chat import OpenAIChatEmulator

    with OpenAIChatEmulator(actions(), dialect="deepseek") as emulator:
        client = emulator.client(http_client=wire.http_client())
        try:
            yield client
        finally:
            client.close()


@contextmanager
def _gemini(wire: Wire) -> Iterator[Any]:
    from reasonstate.testing.gemini import GeminiEmulator

    with GeminiEmulator(actions()) as emulator:
        from google.genai import types

        options = types.HttpOptions(
            base_url=emulator.base_url,
            api_version="v1",
            client_args={"trust_env": False, "event_hooks": {"response": [wire.hook]}},
        )
        yield emulator.client(http_options=options)


def run_opening() -> Opening:
    """Run every loop and session of the opening on fresh emulators; the figures the vendors reported."""
    rejections: list[Rejection] = []
    for vendor, mistake, open_client, loop in (
        (
            "Anthropic",
            "reply stored as text + tool calls, rendered back: thinking blocks dropped",
            _anthropic,
            anthropic_neutral_loop,
        ),
        (
            "DeepSeek",
            "reply rebuilt as an OpenAI-schema message: reasoning_content dropped",
            _deepseek,
            deepseek_neutral_loop,
        ),
        (
            "Gemini",
            "model turn rebuilt from text + function calls: thought signatures dropped",
            _gemini,
            gemini_neutral_loop,
        ),
    ):
        with open_client(Wire()) as client:
            try:
                loop(client)
            except _Refused as refused:
                rejections.append(
                    Rejection(vendor, mistake, refused.request, refused.status, refused.message)
                )

    sessions: list[SessionRun] = []
    wire = Wire()
    with _gemini(wire) as client:
        advice = _session_job(client, GEMINI_MODEL, thinking_config={"include_thoughts": True})
    sessions.append(SessionRun("Gemini", wire.statuses, advice))

    cache: list[tuple[CacheSeries, CacheSeries]] = []
    for vendor, field, open_client, plain_loop, model, options in (
        (
            "Anthropic",
            "cache_read_input_tokens",
            _anthropic,
            anthropic_clock_loop,
            job.MODEL,
            {"max_tokens": 4096, "thinking": THINKING},
        ),
        (
            "DeepSeek",
            "prompt_cache_hit_tokens",
            _deepseek,
            deepseek_clock_loop,
            DEEPSEEK_MODEL,
            {"dialect": "deepseek", "reasoning_effort": "high"},
        ),
    ):
        plain = Wire()
        with open_client(plain) as client:
            plain_loop(client)
        wired = Wire()
        with open_client(wired) as client:
            advice = _session_job(client, model, **options)
        sessions.append(SessionRun(vendor, wired.statuses, advice))
        cache.append(
            (
                CacheSeries(
                    vendor, field, "plain loop", _prompt(vendor, plain), plain.usage(field), plain.statuses
                ),
                CacheSeries(
                    vendor, field, "rs.Session", _prompt(vendor, wired), wired.usage(field), wired.statuses
                ),
            )
        )
    return Opening(tuple(rejections), tuple(sessions), tuple(cache))


def _series(vendor: str, field: str, who: str, wire: Wire) -> CacheSeries:
    return CacheSeries(vendor, field, who, _prompt(vendor, wire), wire.usage(field), wire.statuses)


def _prompt(vendor: str, wire: Wire) -> tuple[int, ...]:
    """Every prompt token of each request, from the vendor's usage (Anthropic: input + creation + read)."""
    if vendor == "Anthropic":
        parts = [
            wire.usage(f) for f in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        return tuple(sum(p) for p in zip(*parts, strict=True))
    return wire.usage("prompt_tokens")
