"""Shared by the export tests: one tool-chain agent on each vendor's strict emulator, driven by the real SDK,
with every response the emulator sent recorded (the oracle for usage, ids and finish reasons), plus an
OpenTelemetry SDK pipeline held in memory and a tiny OTLP/HTTP receiver on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import attrs

import reasonstate as rs
from reasonstate.testing import ModelAction, ToolCallSpec

VENDORS = ("anthropic", "openai_responses", "deepseek", "gemini")

WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    handler=lambda city: {"city": city, "celsius": 18 if city == "Paris" else 22},
    parallel_safe=True,
)
CLOCK = rs.Tool(
    name="get_time",
    description="Local time for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    handler=lambda city: f"12:00 in {city}",
)
# long enough that every vendor's stable prefix passes its minimum cacheable length (Gemini 3: 4,096)
SYSTEM = "You are a careful travel assistant. Always check the weather before advising. " * 230
QUESTION = "Paris or Rome: which is warmer?"
FOLLOW_UP = "And tomorrow?"
REASONING = (
    "Two cities: call the weather tool for both, in parallel.",
    "Paris is mild. Check the local time in Rome too.",
    "I have everything; Rome is warmer.",
    "Thinking about tomorrow in both cities.",
)


def script() -> list[ModelAction]:
    """reasoning (+ redacted on Anthropic) → 2 parallel calls; reasoning → 1 call; reasoning → answer;
    then a second turn answered directly."""
    return [
        ModelAction(
            reasoning=REASONING[0],
            redacted=True,
            tool_calls=(
                ToolCallSpec("get_weather", {"city": "Paris"}),
                ToolCallSpec("get_weather", {"city": "Rome"}),
            ),
        ),
        ModelAction(reasoning=REASONING[1], tool_calls=(ToolCallSpec("get_time", {"city": "Rome"}),)),
        ModelAction(reasoning=REASONING[2], text="Rome is warmer (22C) than Paris (18C)."),
        ModelAction(reasoning=REASONING[3], text="Tomorrow Rome stays warmer."),
    ]


class Recorder:
    """The emulators' ``transform`` hook: every successful response exactly as the emulator answered it."""

    def __init__(self) -> None:
        self.responses: list[dict[str, Any]] = []

    def __call__(self, response: dict[str, Any]) -> dict[str, Any]:
        self.responses.append(json.loads(json.dumps(response)))
        return response


@attrs.frozen
class Expected:
    """What a model call's span must say, read from the raw response the emulator sent."""

    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_creation: int
    reasoning: int | None
    response_id: str
    response_model: str
    finish_reason: str
    tool_call_ids: tuple[str, ...]


def expected(vendor: str, raw: dict[str, Any]) -> Expected:
    """The vendor's own usage fields (docs/protocols.md §1.5, §3.4, §4.4, §5.3), independent of our codecs."""
    if vendor == "anthropic":
        u = raw["usage"]
        return Expected(
            u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0),
            u["output_tokens"],
            u.get("cache_read_input_tokens", 0),
            u.get("cache_creation_input_tokens", 0),
            (u.get("output_tokens_details") or {}).get("thinking_tokens"),
            raw["id"],
            raw["model"],
            raw["stop_reason"],
            tuple(b["id"] for b in raw["content"] if b["type"] == "tool_use"),
        )
    if vendor == "openai_responses":
        u = raw["usage"]
        details = u.get("input_tokens_details") or {}
        return Expected(
            u["input_tokens"],
            u["output_tokens"],
            details.get("cached_tokens", 0),
            details.get("cache_write_tokens", 0),
            (u.get("output_tokens_details") or {}).get("reasoning_tokens"),
            raw["id"],
            raw["model"],
            raw["status"],
            tuple(i["call_id"] for i in raw["output"] if i["type"] == "function_call"),
        )
    if vendor == "deepseek":
        u = raw["usage"]
        message = raw["choices"][0]["message"]
        return Expected(
            u["prompt_tokens"],
            u["completion_tokens"],
            u.get("prompt_cache_hit_tokens", 0),
            0,
            (u.get("completion_tokens_details") or {}).get("reasoning_tokens"),
            raw["id"],
            raw["model"],
            raw["choices"][0]["finish_reason"],
            tuple(c["id"] for c in message.get("tool_calls") or ()),
        )
    u = raw["usageMetadata"]
    parts = raw["candidates"][0]["content"]["parts"]
    return Expected(
        u["promptTokenCount"],
        u.get("candidatesTokenCount", 0) + u.get("thoughtsTokenCount", 0),
        u.get("cachedContentTokenCount", 0),
        0,
        u.get("thoughtsTokenCount"),
        raw["responseId"],
        raw["modelVersion"],
        raw["candidates"][0]["finishReason"],
        tuple(p["functionCall"].get("id", "") for p in parts if "functionCall" in p),
    )


@contextlib.contextmanager
def vendor_session(
    vendor: str, recorder: Recorder, **session_kw: Any
) -> Iterator[tuple[Any, Callable[..., rs.Session]]]:
    """A running emulator for ``vendor`` (scripted with :func:`script`) and a factory of sessions on it."""
    if vendor == "anthropic":
        from reasonstate.testing.anthropic import AnthropicEmulator

        with AnthropicEmulator(script(), transform=recorder) as emu:

            def make(**kw: Any) -> rs.Session:
                options = {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}
                return rs.Session(emu.client(), model="claude-sonnet-4-6", **_common(options, session_kw, kw))

            yield emu, make
    elif vendor == "openai_responses":
        from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

        with OpenAIResponsesEmulator(script(), transform=recorder) as emu, emu.client() as client:

            def make(**kw: Any) -> rs.Session:
                options = {"reasoning": {"effort": "medium", "summary": "auto"}}
                return rs.Session(client, model="gpt-5.5", **_common(options, session_kw, kw))

            yield emu, make
    elif vendor == "deepseek":
        from reasonstate.testing.openai_chat import OpenAIChatEmulator

        with (
            OpenAIChatEmulator(script(), dialect="deepseek", transform=recorder) as emu,
            emu.client() as client,
        ):

            def make(**kw: Any) -> rs.Session:
                return rs.Session(
                    client, model="deepseek-v4-pro", dialect="deepseek", **_common({}, session_kw, kw)
                )

            yield emu, make
    else:
        from reasonstate.testing.gemini import GeminiEmulator

        with GeminiEmulator(script(), transform=recorder) as emu, emu.client() as client:

            def make(**kw: Any) -> rs.Session:
                options = {"thinking_config": {"include_thoughts": True}}
                return rs.Session(client, model="gemini-3-flash", **_common(options, session_kw, kw))

            yield emu, make


def _common(options: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"system": SYSTEM, "tools": [WEATHER, CLOCK], **options}
    for m in more:
        out.update(m)
    return out


def run_agent(session: rs.Session) -> None:
    """The tool chain through ``Session.run`` (handlers executed), a follow-up turn, then ``close()``."""
    session.run(QUESTION)
    session.send(FOLLOW_UP)
    session.close()


def opaque_strings(session: rs.Session) -> list[str]:
    """Every opaque value the session holds: signatures, encrypted content, redacted data (as sent)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("signature", "encrypted_content", "data", "thoughtSignature", "thought_signature"):
                    if isinstance(item, str) and len(item) >= 16:
                        found.append(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for c in session.continuation:
        walk(json.loads(c.payload))
    return found


# -- an OTLP/HTTP receiver on 127.0.0.1 ----------------------------------------------------------------------
class OTLPReceiver:
    """A tiny OTLP/HTTP server (``POST /v1/traces``): decodes each ``ExportTraceServiceRequest``."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.requests: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                message = ExportTraceServiceRequest()
                message.ParseFromString(body)
                receiver.requests.append(message)
                receiver.paths.append(self.path)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # shutdown() waits for the loop's next poll: 10 ms, not the default 0.5 s
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[Any]:
        """Every span received, decoded (``opentelemetry.proto.trace.v1.Span``)."""
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


def proto_attributes(span: Any) -> dict[str, Any]:
    """A protobuf span's attributes as plain Python values."""
    out: dict[str, Any] = {}
    for kv in span.attributes:
        out[kv.key] = _proto_value(kv.value)
    return out


def _proto_value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return tuple(_proto_value(v) for v in value.array_value.values)
    return getattr(value, which)
