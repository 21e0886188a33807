"""Send a session's spans and metrics to any OTLP/HTTP endpoint (a collector, Jaeger, Tempo, Phoenix, ...).

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python examples/otel_export.py

The endpoint comes from ``OTEL_EXPORTER_OTLP_ENDPOINT`` (OpenTelemetry's own variable; default
``http://localhost:4318``); the OTLP exporter sends to ``$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces``. The model
is reasonstate's local Anthropic emulator, so no API key is needed: swap ``emulator.client()`` for
``anthropic.Anthropic()`` to trace real calls. Set ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``
to export messages and visible reasoning too (opaque payloads are never exported). Needs
``pip install 'reasonstate[anthropic,otel]' opentelemetry-exporter-otlp-proto-http``.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import reasonstate as rs
from reasonstate.export.otel import OTelExporter
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "celsius": {"Paris": 18, "Rome": 22}.get(city, 20)}


SCRIPT = [
    ModelAction(
        reasoning="Two cities: ask for both forecasts at once.",
        tool_calls=(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Rome"}),
        ),
    ),
    ModelAction(reasoning="Rome is warmer.", text="Rome (22C) is warmer than Paris (18C)."),
    ModelAction(reasoning="Same comparison tomorrow.", text="Rome stays warmer tomorrow."),
]


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "reasonstate-example"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    tool = rs.Tool(
        name="get_weather",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        handler=weather,
        parallel_safe=True,
    )
    with AnthropicEmulator(SCRIPT) as emulator:
        session = rs.Session(
            emulator.client(),
            model="claude-sonnet-4-6",
            tools=[tool],
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
            exporters=[OTelExporter(tracer_provider=provider)],
        )
        print(session.run("Paris or Rome: which is warmer?").text)
        print(session.send("And tomorrow?").text)
        session.close()  # ends the session span
    provider.shutdown()  # flushes the batch processor
    print(f"{session.report()}\nspans sent to {endpoint}/v1/traces")


if __name__ == "__main__":
    main()
