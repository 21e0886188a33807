"""OpenTelemetry export, end to end: real vendor SDKs over HTTP against the strict emulators, spans and
metrics collected by the OpenTelemetry SDK (in memory, and over OTLP/HTTP to a receiver on 127.0.0.1).

The oracles are independent of the exporter: usage, response ids, models and finish reasons are read from
the raw responses the emulator sent (its ``transform`` hook records them), request digests and sizes from
the bytes the emulator received, attribute names from ``opentelemetry-semantic-conventions``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import reasonstate as rs
from reasonstate.export import otel
from reasonstate.export.jsonl import JSONLExporter
from reasonstate.export.otel import OTelExporter
from reasonstate.state import digest_of
from reasonstate.testing import Fault, ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from tests._export_support import (
    FOLLOW_UP,
    QUESTION,
    REASONING,
    VENDORS,
    OTLPReceiver,
    Recorder,
    expected,
    opaque_strings,
    proto_attributes,
    run_agent,
    vendor_session,
)
from tests.conftest import as_read_by_vendor

ROOT = Path(__file__).resolve().parent.parent


class Pipeline:
    """An SDK tracer provider exporting to memory, and a meter provider read in memory."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def exporter(self, **kw: Any) -> OTelExporter:
        return OTelExporter(self.tracer_provider, self.meter_provider, **kw)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metrics(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out[metric.name] = list(metric.data.data_points)
        return out


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    p = Pipeline()
    yield p
    p.tracer_provider.shutdown()
    p.meter_provider.shutdown()


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name.startswith(prefix)), key=lambda s: s.start_time or 0)


def as_sent(history: Any) -> list[tuple[Any, Any]]:
    """Every payload of ``history`` with the JSON value it goes back as: its own, or for a Gemini text or
    thought Part whose text the payload leaves out (docs/protocols.md §5.4) the Part with the part's text
    put back first."""
    pairs = []
    for t in history.turns:
        for s in t.steps:
            texts = {p.continuation: getattr(p, "text", "") for p in s.parts}
            for i, c in enumerate(s.continuation):
                if c.bare:  # a chat message that is its parts rendered keeps no payload (issue 21)
                    continue
                value = json.loads(c.payload)
                text = texts.get(i)
                if (
                    c.api == "generate_content"
                    and c.kind in ("text", "thought")
                    and text
                    and "text" not in value
                ):
                    value = {"text": text, **value}
                pairs.append((c, value))
    return pairs


def payloads_in(body: bytes, history: Any) -> list[Any]:
    """The payloads the request body carries as received: JSON objects of the body equal to a payload's
    value (:func:`as_sent`), in the order they appear."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            found.append(as_read_by_vendor(value))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(body))
    position = {node: i for i, node in reversed(list(enumerate(found)))}
    keyed = [(c, as_read_by_vendor(value)) for c, value in as_sent(history)]
    return [c for c, key in sorted((p for p in keyed if p[1] in position), key=lambda p: position[p[1]])]


# -- the attribute names are the conventions' own ------------------------------------------------------------


def test_every_genai_name_the_exporter_uses_is_the_semantic_conventions_constant() -> None:
    from opentelemetry.semconv._incubating.attributes import error_attributes, gen_ai_attributes
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

    g = gen_ai_attributes
    pairs = {
        otel.OPERATION: g.GEN_AI_OPERATION_NAME,
        otel.PROVIDER: g.GEN_AI_PROVIDER_NAME,
        otel.CONVERSATION: g.GEN_AI_CONVERSATION_ID,
        otel.REQUEST_MODEL: g.GEN_AI_REQUEST_MODEL,
        otel.RESPONSE_MODEL: g.GEN_AI_RESPONSE_MODEL,
        otel.RESPONSE_ID: g.GEN_AI_RESPONSE_ID,
        otel.FINISH_REASONS: g.GEN_AI_RESPONSE_FINISH_REASONS,
        otel.INPUT_TOKENS: g.GEN_AI_USAGE_INPUT_TOKENS,
        otel.OUTPUT_TOKENS: g.GEN_AI_USAGE_OUTPUT_TOKENS,
        otel.CACHE_READ: g.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        otel.CACHE_CREATION: g.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        otel.REASONING_TOKENS: g.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        otel.TOOL_NAME: g.GEN_AI_TOOL_NAME,
        otel.TOOL_CALL_ID: g.GEN_AI_TOOL_CALL_ID,
        otel.TOOL_TYPE: g.GEN_AI_TOOL_TYPE,
        otel.TOOL_ARGUMENTS: g.GEN_AI_TOOL_CALL_ARGUMENTS,
        otel.TOOL_RESULT: g.GEN_AI_TOOL_CALL_RESULT,
        otel.INPUT_MESSAGES: g.GEN_AI_INPUT_MESSAGES,
        otel.OUTPUT_MESSAGES: g.GEN_AI_OUTPUT_MESSAGES,
        otel.TOKEN_TYPE: g.GEN_AI_TOKEN_TYPE,
        otel.ERROR_TYPE: error_attributes.ERROR_TYPE,
        otel.TOKEN_USAGE: gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
        otel.OPERATION_DURATION: gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
    }
    assert {ours: theirs for ours, theirs in pairs.items() if ours != theirs} == {}
    values = g.GenAiOperationNameValues
    assert (values.CHAT.value, values.EXECUTE_TOOL.value) == (otel.CHAT, otel.EXECUTE_TOOL)
    providers = {v.value for v in g.GenAiProviderNameValues}
    assert {"anthropic", "openai", "deepseek", "gcp.gemini"} <= providers
    tokens = g.GenAiTokenTypeValues
    assert (tokens.INPUT.value, tokens.OUTPUT.value) == ("input", "output")


# -- the span tree and every attribute, on each vendor -------------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_tool_chain_session_gives_the_span_tree_and_attributes_the_vendor_reported(
    vendor: str, pipeline: Pipeline
) -> None:
    recorder = Recorder()
    with vendor_session(vendor, recorder) as (emu, make):
        session = make(exporters=[pipeline.exporter()])
        run_agent(session)
        bodies = [r.body for r in emu.requests]
    spans = pipeline.finished()
    provider = {"anthropic": "anthropic", "openai_responses": "openai", "deepseek": "deepseek"}.get(
        vendor, "gcp.gemini"
    )

    # the tree: session > turn > (chat, execute_tool)
    (root,) = by_name(spans, "reasonstate.session")
    turns = by_name(spans, "reasonstate.turn")
    chats = by_name(spans, "chat ")
    tools = by_name(spans, "execute_tool ")
    assert root.parent is None and len(turns) == 2 and len(chats) == 4 and len(tools) == 3
    assert all(t.parent is not None and t.parent.span_id == root.context.span_id for t in turns)
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    turn_of = {t.attributes["reasonstate.turn.index"]: t.context.span_id for t in turns}
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert (
            chat.parent is not None
            and chat.parent.span_id == turn_of[chat.attributes["reasonstate.turn.index"]]
        )
    assert all(t.parent is not None and t.parent.span_id == turn_of[0] for t in tools)
    conversation = root.attributes[otel.CONVERSATION]
    assert all(s.attributes[otel.CONVERSATION] == conversation for s in spans)
    assert root.attributes[otel.PROVIDER] == provider

    # every model call: the conventions' attributes equal what the emulator sent
    assert len(recorder.responses) == 4 and len(bodies) == 4
    records = session.execution
    for i, (chat, raw, body, record) in enumerate(
        zip(chats, recorder.responses, bodies, records, strict=True)
    ):
        want = expected(vendor, raw)
        a = chat.attributes
        assert chat.name == f"chat {session.model}"
        assert a[otel.OPERATION] == "chat" and a[otel.PROVIDER] == provider
        assert a[otel.REQUEST_MODEL] == session.model
        assert a[otel.RESPONSE_MODEL] == want.response_model
        assert a[otel.RESPONSE_ID] == want.response_id
        assert a[otel.FINISH_REASONS] == (want.finish_reason,)
        assert a[otel.INPUT_TOKENS] == want.input_tokens
        assert a[otel.OUTPUT_TOKENS] == want.output_tokens
        assert a[otel.CACHE_READ] == want.cache_read
        assert a[otel.CACHE_CREATION] == want.cache_creation
        assert a.get(otel.REASONING_TOKENS) == want.reasoning
        # ours: the request as it went on the wire, the cache as predicted and as reported
        assert a["reasonstate.request.index"] == i
        assert a["reasonstate.request.digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
        assert a["reasonstate.request.bytes"] == len(body)
        assert a["reasonstate.prefix.fingerprint"] == session.prefix.fingerprint
        assert a["reasonstate.cache.reported_read"] == want.cache_read
        if record.predicted_cache_read is None:
            assert "reasonstate.cache.predicted_read" not in a
        else:
            assert a["reasonstate.cache.predicted_read"] == record.predicted_cache_read
            assert a["reasonstate.cache.prediction_exact"] == (record.predicted_cache_read == want.cache_read)
        assert a.get("reasonstate.cache.divergence_unit") == record.divergence
        step = session.history.turns[record.turn].steps[record.step]
        # the payloads kept: a chat message that is its parts rendered keeps none (issue 21)
        kept = [c for c in step.continuation if not c.bare]
        assert list(a["reasonstate.continuation.captured.digests"]) == [c.digest for c in kept]
        assert a["reasonstate.continuation.captured.bytes"] == sum(len(c.payload) for c in kept)
        # replayed: the payloads whose exact bytes the emulator received in this request, in order
        in_body = payloads_in(body, session.history)
        replayed = (
            a["reasonstate.continuation.replayed.count"],
            a["reasonstate.continuation.replayed.digest"],
        )
        assert replayed == (len(in_body), digest_of("".join(f"{c.digest}\n" for c in in_body).encode())), (
            vendor
        )
        assert a["reasonstate.continuation.withheld.count"] == 0
        # the chat span covers the call: it ends after it starts, inside its turn
        assert chat.start_time is not None and chat.end_time is not None and chat.start_time < chat.end_time
    # the model calls that answered tool results replayed the chain's payloads (Anthropic: whole blocks);
    # DeepSeek's messages are their parts rendered byte for byte and keep no payload (issue 21)
    replayed = [c.attributes["reasonstate.continuation.replayed.count"] for c in chats[1:]]
    assert all(n == 0 for n in replayed) if vendor == "deepseek" else all(n > 0 for n in replayed)
    if vendor == "anthropic":
        # thinking and redacted_thinking; the two tool calls keep no payload (rendered from their parts
        # byte for byte, issue 21)
        assert chats[1].attributes["reasonstate.continuation.replayed.count"] == 2

    # one execute_tool span per call the model made, named as the model named it, timed by Session.run
    calls = [(c, expected(vendor, raw)) for c, raw in zip(chats, recorder.responses, strict=True)]
    made = [cid for _chat, want in calls for cid in want.tool_call_ids]
    assert [t.attributes[otel.TOOL_NAME] for t in tools] == ["get_weather", "get_weather", "get_time"]
    if vendor != "gemini":  # the Developer API sends no call ids; the session derives them
        assert sorted(t.attributes[otel.TOOL_CALL_ID] for t in tools) == sorted(made)
    pending = [c.id for t in session.history.turns for s in t.steps for c in s.tool_calls]
    assert sorted(t.attributes[otel.TOOL_CALL_ID] for t in tools) == sorted(pending)
    for tool in tools:
        assert tool.attributes[otel.OPERATION] == "execute_tool"
        assert tool.attributes["reasonstate.tool.timing"] == "measured"
        assert otel.TOOL_ARGUMENTS not in tool.attributes and otel.TOOL_RESULT not in tool.attributes
    # tools ran between the call that asked for them and the call that sent their results
    assert chats[0].end_time <= min(t.start_time for t in tools[:2])
    assert max(t.end_time for t in tools[:2]) <= chats[1].start_time
    assert chats[1].end_time <= tools[2].start_time and tools[2].end_time <= chats[2].start_time

    # the turn spans carry the policy decision
    for turn in turns:
        assert turn.attributes["reasonstate.policy.name"] == "keep"
        assert turn.attributes["reasonstate.policy.dropped_reasoning_steps"] == 0
    assert (
        turns[0].attributes["reasonstate.turn.steps"] == 3
        and turns[1].attributes["reasonstate.turn.steps"] == 1
    )
    assert root.attributes["reasonstate.session.requests"] == 4

    # metrics: per call, the conventions' histograms, with the vendor's figures
    wants = [expected(vendor, raw) for raw in recorder.responses]
    points = pipeline.metrics()
    usage = {p.attributes[otel.TOKEN_TYPE]: p for p in points[otel.TOKEN_USAGE]}
    assert usage["input"].count == 4 and usage["input"].sum == sum(w.input_tokens for w in wants)
    assert usage["output"].count == 4 and usage["output"].sum == sum(w.output_tokens for w in wants)
    assert usage["input"].attributes[otel.PROVIDER] == provider
    (duration,) = points[otel.OPERATION_DURATION]
    assert duration.count == 4 and duration.sum == pytest.approx(sum(r.duration_s for r in records), abs=1e-5)
    (ratio,) = points[otel.CACHE_HIT_RATIO]
    assert ratio.count == 4
    assert ratio.sum == pytest.approx(sum(w.cache_read / w.input_tokens for w in wants))


def test_async_sessions_export_the_same_tree(pipeline: Pipeline) -> None:
    import asyncio

    recorder = Recorder()
    with vendor_session("anthropic", recorder) as (emu, _make):

        async def main() -> rs.AsyncSession:
            from tests._export_support import CLOCK, SYSTEM, WEATHER

            session = rs.AsyncSession(
                emu.async_client(),
                model="claude-sonnet-4-6",
                system=SYSTEM,
                tools=[WEATHER, CLOCK],
                max_tokens=4096,
                thinking={"type": "enabled", "budget_tokens": 2048},
                exporters=[pipeline.exporter()],
            )
            await session.run(QUESTION)
            await session.send(FOLLOW_UP)
            session.close()
            return session

        session = asyncio.run(main())
    spans = pipeline.finished()
    assert len(by_name(spans, "chat ")) == 4 and len(by_name(spans, "execute_tool ")) == 3
    assert len(by_name(spans, "reasonstate.turn")) == 2 and len(by_name(spans, "reasonstate.session")) == 1
    assert [s.attributes[otel.RESPONSE_ID] for s in by_name(spans, "chat ")] == [
        r["id"] for r in recorder.responses
    ]
    assert session.report().requests == 4


# -- failures, policies, switches ----------------------------------------------------------------------------


def test_a_failed_call_is_an_error_span_with_its_type_and_the_retry_lands_in_the_same_turn(
    pipeline: Pipeline,
) -> None:
    with AnthropicEmulator([ModelAction.answer("Fine.", reasoning="ok")]) as emu:
        session = rs.Session(
            emu.client(), model="claude-sonnet-4-6", max_tokens=1024, exporters=[pipeline.exporter()]
        )
        emu.inject(
            Fault.http(529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
        )
        with pytest.raises(rs.VendorError):
            session.send("Hello?")
        session.send("Hello?")
        session.close()
    spans = pipeline.finished()
    failed, ok = by_name(spans, "chat ")
    (turn,) = by_name(spans, "reasonstate.turn")
    assert failed.status.status_code is StatusCode.ERROR and ok.status.status_code is StatusCode.UNSET
    assert failed.attributes[otel.ERROR_TYPE] == "VendorError"
    assert failed.attributes[otel.HTTP_STATUS] == 529
    assert otel.ERROR_TYPE not in ok.attributes
    assert failed.parent.span_id == ok.parent.span_id == turn.context.span_id
    (root,) = by_name(spans, "reasonstate.session")
    assert root.attributes["reasonstate.session.failed_calls"] == 1
    durations = {
        p.attributes.get(otel.ERROR_TYPE): p.count for p in pipeline.metrics()[otel.OPERATION_DURATION]
    }
    assert durations == {"VendorError": 1, None: 1}


@pytest.mark.filterwarnings("ignore:Using Claude with claude-opus-4-6:UserWarning")
def test_a_drop_policy_and_a_model_switch_are_on_the_spans(pipeline: Pipeline) -> None:
    recorder = Recorder()
    with vendor_session("anthropic", recorder) as (emu, make):
        session = make(exporters=[pipeline.exporter()], policy=rs.policies.Drop())
        session.run(QUESTION)
        session.switch_model("claude-opus-4-6")
        session.send(FOLLOW_UP)
        session.close()
        bodies = [r.body for r in emu.requests]
    spans = pipeline.finished()
    # the last request dropped turn 0's reasoning and withheld the other model's: the replayed count
    # follows what the emulator received, divergence included
    for chat, body in zip(by_name(spans, "chat "), bodies, strict=True):
        in_body = payloads_in(body, session.history)
        assert chat.attributes["reasonstate.continuation.replayed.count"] == len(in_body)
        digest = digest_of("".join(f"{c.digest}\n" for c in in_body).encode())
        assert chat.attributes["reasonstate.continuation.replayed.digest"] == digest
    first, second = by_name(spans, "reasonstate.turn")
    # Drop: the three steps' reasoning leaves the next request; the decision predicts where it diverges
    assert first.attributes["reasonstate.policy.name"] == "drop"
    assert first.attributes["reasonstate.policy.dropped_reasoning_steps"] == 3
    decision = session.trace.of_kind("policy.decision")[0].data
    assert first.attributes["reasonstate.policy.divergence_unit"] == decision["divergence_unit"]
    assert first.attributes["reasonstate.policy.predicted_cache_read"] == decision["predicted_cache_read"]
    (root,) = by_name(spans, "reasonstate.session")
    (switch,) = [e for e in root.events if e.name == "model.changed"]
    assert (switch.attributes["reasonstate.old.model"], switch.attributes["reasonstate.new.model"]) == (
        "claude-sonnet-4-6",
        "claude-opus-4-6",
    )
    last = by_name(spans, "chat ")[-1]
    # the next request diverged where the trace says, for the declared cause (the model change)
    (brk,) = session.trace.of_kind("cache.break")
    assert last.attributes["reasonstate.cache.break.unit"] == brk.data["unit"]
    assert last.attributes["reasonstate.cache.break.cause"] == brk.data["cause"] == "model_changed"
    assert last.attributes["reasonstate.cache.break.why"] == brk.data["why"]
    assert last.attributes["reasonstate.cache.break.path"] == brk.data["path"] == "$.model"
    assert last.attributes["reasonstate.cache.break.declared"] is True
    assert last.attributes[otel.REQUEST_MODEL] == "claude-opus-4-6"
    assert second.attributes["reasonstate.turn.index"] == 1


def test_withheld_continuation_after_a_vendor_switch_is_counted_with_its_digests(pipeline: Pipeline) -> None:
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    recorder = Recorder()
    with (
        vendor_session("anthropic", recorder) as (_emu, make),
        OpenAIResponsesEmulator([ModelAction.answer("Tomorrow too.", reasoning="Same again.")]) as other,
        other.client() as client,
    ):
        session = make(exporters=[pipeline.exporter()])
        session.run(QUESTION)
        session.switch(client, model="gpt-5.5", reasoning={"effort": "low"})
        session.send(FOLLOW_UP)
        session.close()
    (withheld,) = session.trace.of_kind("continuation.withheld")
    last = by_name(pipeline.finished(), "chat ")[-1]
    assert last.attributes[otel.PROVIDER] == "openai"
    assert last.attributes["reasonstate.continuation.withheld.count"] == withheld.data["count"] > 0
    assert list(last.attributes["reasonstate.continuation.withheld.digests"]) == list(
        withheld.data["digests"]
    )
    anthropic_payloads = {
        c.digest for t in session.history.turns[:1] for s in t.steps for c in s.continuation
    }
    assert set(withheld.data["digests"]) <= anthropic_payloads
    (root,) = by_name(pipeline.finished(), "reasonstate.session")
    (event,) = [e for e in root.events if e.name == "vendor.changed"]
    assert event.attributes["reasonstate.new.vendor"] == "openai"


# -- content capture, and what is never exported -------------------------------------------------------------


def test_content_is_captured_only_when_switched_on(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(otel.CAPTURE_ENV, raising=False)
    with vendor_session("anthropic", Recorder()) as (_emu, make):
        run_agent(make(exporters=[pipeline.exporter()]))
    off = pipeline.finished()
    assert not [e for s in off for e in s.events if e.name == otel.DETAILS_EVENT]
    blob = json.dumps([dict(s.attributes) for s in off], default=str)
    assert QUESTION not in blob and REASONING[0] not in blob and "Paris" not in blob

    pipeline.spans.clear()
    monkeypatch.setenv(otel.CAPTURE_ENV, "true")
    with vendor_session("anthropic", Recorder()) as (_emu, make):
        session = make(exporters=[pipeline.exporter()])
        run_agent(session)
    on = pipeline.finished()
    chats = by_name(on, "chat ")
    details = [next(e for e in c.events if e.name == otel.DETAILS_EVENT) for c in chats]
    first_in = json.loads(details[0].attributes[otel.INPUT_MESSAGES])
    assert first_in == [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
    first_out = json.loads(details[0].attributes[otel.OUTPUT_MESSAGES])
    reasoning = [p for p in first_out[0]["parts"] if p["type"] == "reasoning"]
    assert reasoning[0] == {"type": "reasoning", "content": REASONING[0]}
    # the redacted block: a digest and a size, never its data
    redacted = session.history.turns[0].steps[0].continuation[1]
    assert redacted.kind == "redacted_thinking"
    assert reasoning[1] == {
        "type": "reasoning",
        "redacted": True,
        "digest": redacted.digest,
        "size": len(redacted.payload),
    }
    second_in = json.loads(details[1].attributes[otel.INPUT_MESSAGES])
    assert [m["parts"][0]["type"] for m in second_in] == ["tool_call_response", "tool_call_response"]
    tools = by_name(on, "execute_tool ")
    assert json.loads(tools[0].attributes[otel.TOOL_ARGUMENTS]) in ({"city": "Paris"}, {"city": "Rome"})
    assert "celsius" in tools[0].attributes[otel.TOOL_RESULT]


def _exported_bytes(spans: list[ReadableSpan]) -> str:
    """Every name, attribute value and event of ``spans`` as text."""
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())
        for event in span.events:
            parts.append(event.name)
            parts.extend(f"{k}={v}" for k, v in (event.attributes or {}).items())
    return "\n".join(parts)


@pytest.mark.parametrize("capture", [False, True], ids=["capture_off", "capture_on"])
@pytest.mark.parametrize("vendor", ["anthropic", "openai_responses", "gemini"])
def test_no_signature_encrypted_content_or_redacted_data_is_exported_anywhere(
    vendor: str, capture: bool, pipeline: Pipeline, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "trace.jsonl"
    caplog.set_level(logging.DEBUG, logger="reasonstate")
    recorder = Recorder()
    with vendor_session(vendor, recorder) as (_emu, make):
        session = make(exporters=[pipeline.exporter(capture_content=capture), JSONLExporter(path)])
        run_agent(session)
    secrets = opaque_strings(session)
    # the session really holds opaque values: the ones the vendor sent
    answered = json.dumps(recorder.responses)
    assert len(secrets) >= 2 and all(s in answered for s in secrets)
    spans = _exported_bytes(pipeline.finished())
    logs = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    jsonl = path.read_text()
    assert any(r.name == "reasonstate" and r.levelno == logging.DEBUG for r in caplog.records)
    if capture:
        assert REASONING[0] in spans  # visible reasoning is exported when asked for ...
    for secret in secrets:  # ... opaque payloads never, whatever the setting
        for where, text in (("spans", spans), ("jsonl", jsonl), ("logs", logs)):
            assert secret not in text, f"{where} holds an opaque value"
            assert secret[8:40] not in text, f"{where} holds part of an opaque value"


# -- OTLP over HTTP, to a receiver in this test --------------------------------------------------------------


def test_spans_reach_an_otlp_http_receiver_with_the_same_attributes(pipeline: Pipeline) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    with OTLPReceiver() as receiver:
        pipeline.tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces"))
        )
        with vendor_session("anthropic", Recorder()) as (_emu, make):
            run_agent(make(exporters=[pipeline.exporter()]))
        assert pipeline.tracer_provider.force_flush(10_000)
        received = receiver.spans()
    local = pipeline.finished()
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    assert sorted(s.name for s in received) == sorted(s.name for s in local)
    by_id = {s.context.span_id: s for s in local}
    for span in received:
        mine = by_id[int.from_bytes(span.span_id, "big")]
        assert span.name == mine.name
        assert span.start_time_unix_nano == mine.start_time and span.end_time_unix_nano == mine.end_time
        theirs = proto_attributes(span)
        assert theirs == {
            k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in mine.attributes.items()
        }
    chats = [s for s in received if s.name.startswith("chat ")]
    assert len(chats) == 4 and all(proto_attributes(s)[otel.OPERATION] == "chat" for s in chats)


def test_a_backend_that_is_down_neither_fails_nor_slows_send(pipeline: Pipeline) -> None:
    import socket

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # a port nothing listens on, held (bound, never listening) until the end, so that no server of a test
    # running alongside can take it meanwhile: a connection to it is refused
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        provider = TracerProvider()
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=1))
        )
        exporter = OTelExporter(provider, pipeline.meter_provider)
        with vendor_session("anthropic", Recorder()) as (_emu, make):
            session = make(exporters=[exporter])
            t0 = time.perf_counter()
            run_agent(session)
            elapsed = time.perf_counter() - t0
        assert session.report().requests == 4 and exporter.failures == 0
        assert elapsed < 5  # the export of each span happens on the processor's thread, not in send
        provider.shutdown()


# -- the example ---------------------------------------------------------------------------------------------


def test_the_otel_example_sends_a_sessions_spans_to_the_endpoint_it_is_given() -> None:
    with OTLPReceiver() as receiver:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "PYTHONPATH": str(ROOT)}
        env.pop(otel.CAPTURE_ENV, None)
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "otel_export.py")],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr
        received = receiver.spans()
    names = [s.name for s in received]
    assert names.count("reasonstate.session") == 1 and names.count("reasonstate.turn") >= 1
    assert any(n.startswith("chat ") for n in names) and any(n.startswith("execute_tool ") for n in names)
    chat = next(s for s in received if s.name.startswith("chat "))
    assert proto_attributes(chat)[otel.PROVIDER] == "anthropic"
    assert "spans sent to" in out.stdout
