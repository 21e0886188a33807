"""The ``reasonstate`` logger and exporter failures, end to end on the emulators with the real SDKs.

DEBUG per request (digest, bytes, predicted cache), INFO per turn close (policy decision), WARNING for cache
breaks nobody declared, withheld continuation, clamped policies and recovered failures; never a payload or
message content; nothing built when disabled. An exporter that raises is logged and counted, never felt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.export import ExportContext
from reasonstate.policies import Drop
from reasonstate.state import EventKind, TraceEvent
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests._export_support import (
    FOLLOW_UP,
    QUESTION,
    REASONING,
    Recorder,
    opaque_strings,
    run_agent,
    vendor_session,
)
from tests._snapshots import payloads, redigest

ROOT = Path(__file__).resolve().parent.parent


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "reasonstate" and r.levelno == level]


def test_the_package_logger_has_a_null_handler_and_prints_nothing_by_default() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("reasonstate").handlers)
    # a withheld continuation is a WARNING: with no logging configured, still nothing on stderr
    code = """
import reasonstate as rs
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
script = [ModelAction.answer("a", reasoning="r"), ModelAction.answer("b", reasoning="s")]
with AnthropicEmulator(script) as emu:
    s = rs.Session(emu.client(), model="claude-sonnet-4-6", max_tokens=4096,
                   thinking={"type": "enabled", "budget_tokens": 2048})
    s.send("one?")
    s.switch_model("claude-opus-4-1")
    s.send("two?")
    assert s.trace.of_kind("continuation.withheld")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and out.stdout == ""


def test_debug_per_request_and_info_per_turn_close_with_the_figures_of_the_wire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="reasonstate")
    with vendor_session("anthropic", Recorder()) as (emu, make):
        session = make(policy=Drop())
        run_agent(session)
        bodies = [r.body for r in emu.requests]
    sent = [r for r in records(caplog, logging.DEBUG) if r.getMessage().startswith("request ")]
    assert len(sent) == len(bodies) == 4
    for record, body, execution in zip(sent, bodies, session.execution, strict=True):
        message = record.getMessage()
        assert "sha256:" + hashlib.sha256(body).hexdigest() in message
        assert f"{len(body)} bytes" in message
        assert f"predicted cache read {execution.predicted_cache_read}" in message
    closes = [r.getMessage() for r in records(caplog, logging.INFO) if "closed" in r.getMessage()]
    assert closes[0].startswith("turn 0 closed: policy drop") and closes[1].startswith(
        "turn 1 closed: policy drop"
    )
    # Drop on turn 0 predicted where the next request diverges: the break was declared, so it is INFO
    assert session.trace.of_kind(EventKind.CACHE_BREAK)
    assert not records(caplog, logging.WARNING)
    assert any(r.getMessage().startswith("cache break") for r in records(caplog, logging.INFO))


def test_withheld_continuation_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="reasonstate")
    with AnthropicEmulator(
        [ModelAction.answer("a", reasoning="r"), ModelAction.answer("b", reasoning="s")]
    ) as emu:
        session = rs.Session(
            emu.client(),
            model="claude-sonnet-4-6",
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
        )
        session.send("one?")
        session.switch_model("claude-opus-4-1")
        session.send("two?")
    (withheld,) = session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)
    warnings = [r.getMessage() for r in records(caplog, logging.WARNING)]
    assert warnings == [
        f"{withheld.data['count']} continuation payload(s) withheld (anthropic:thinking): "
        "produced by another vendor or model"
    ]


def test_a_clamped_policy_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="reasonstate")
    script = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Rome"}), reasoning="Need the weather."),
        ModelAction.answer("Mild.", reasoning="Done."),
    ]
    tool = rs.Tool(name="get_weather", parameters={"type": "object"}, handler=lambda city: "20C")
    with OpenAIChatEmulator(script, dialect="deepseek") as emu, emu.client() as client:
        session = rs.Session(client, model="deepseek-v4-pro", dialect="deepseek", tools=[tool], policy=Drop())
        session.run("Rome?")
    (clamped,) = session.trace.of_kind(EventKind.POLICY_CLAMPED)
    assert [r.getMessage() for r in records(caplog, logging.WARNING)] == [
        f"policy drop clamped on turn 0: {len(clamped.data['reasons'])} rule(s) applied"
    ]


def test_a_recovered_rejection_and_the_cache_break_nobody_declared_are_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    weather = rs.Tool(name="get_weather", parameters={"type": "object"})
    call = ModelAction(
        reasoning="Need the weather.", tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),)
    )
    with AnthropicEmulator(
        [call, ModelAction.answer("Mild.", reasoning="ok"), ModelAction.answer("Yes.")]
    ) as emu:
        kw: dict[str, Any] = {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}
        session = rs.Session(emu.client(), model="claude-sonnet-4-6", tools=[weather], **kw)
        reply = session.send("Paris weather?")
        session.send_tool_results({c.id: "18C" for c in reply.tool_calls})
        # the first thinking signature edited (and the snapshot re-sealed): the vendor rejects it
        snap = json.loads(session.snapshot().model_dump_json())
        value = payloads(snap, 0)[0]
        value["signature"] = value["signature"][:-8] + "A" * 7 + value["signature"][-1]
        redigest(snap)
        snap["on_rejected_continuation"] = "strip_and_retry"
        restored = rs.Session.restore(rs.SessionSnapshot.model_validate(snap).sealed(), emu.client())
        caplog.set_level(logging.DEBUG, logger="reasonstate")
        assert restored.send("Sure?").text == "Yes."
    warnings = [r.getMessage() for r in records(caplog, logging.WARNING)]
    assert (
        warnings[0]
        == "recovered: the vendor rejected 1 replayed payload(s) (thinking); left out and retried once"
    )
    # the stripped block is withheld from the retry on (rendered canonically)
    assert warnings[1].startswith("1 continuation payload(s) withheld (stripped:thinking)")
    (brk,) = restored.trace.of_kind(EventKind.CACHE_BREAK)
    assert warnings[2].startswith(
        f"cache break at request {brk.data['index']}, prefix unit {brk.data['unit']}: "
    )
    assert "not declared" in warnings[2] and len(warnings) == 3
    assert any(
        r.getMessage().startswith("call failed: VendorError (status 400)")
        for r in records(caplog, logging.INFO)
    )


def test_no_log_record_holds_a_payload_or_any_content(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="reasonstate")
    with vendor_session("anthropic", Recorder()) as (_emu, make):
        session = make(policy=Drop())
        run_agent(session)
    ours = [r for r in caplog.records if r.name.startswith("reasonstate")]
    text = "\n".join(f"{r.getMessage()} {r.args!r}" for r in ours)
    assert len(ours) >= 10
    contents = [QUESTION, FOLLOW_UP, *REASONING, "Paris", "celsius", "Rome is warmer"]
    contents += [c.payload.decode() for c in session.continuation] + opaque_strings(session)
    assert [c for c in contents if c in text] == []


def test_disabled_logging_builds_no_record(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    factory = logging.getLogRecordFactory()

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        if record.name.startswith("reasonstate"):
            built.append(record.name)
        return record

    logger = logging.getLogger("reasonstate")
    monkeypatch.setattr(logger, "level", logging.CRITICAL)
    logging.setLogRecordFactory(counting)
    try:
        with AnthropicEmulator(
            [ModelAction.answer("a", reasoning="r"), ModelAction.answer("b", reasoning="s")]
        ) as emu:
            session = rs.Session(
                emu.client(),
                model="claude-sonnet-4-6",
                max_tokens=4096,
                thinking={"type": "enabled", "budget_tokens": 2048},
            )
            session.send("one?")
            session.switch_model("claude-opus-4-1")  # a withheld continuation: a WARNING when enabled
            session.send("two?")
    finally:
        logging.setLogRecordFactory(factory)
    assert session.trace.of_kind(EventKind.CONTINUATION_WITHHELD) and built == []


# -- exporters that fail -------------------------------------------------------------------------------------


class Raising:
    """An exporter whose backend is broken: every call raises."""

    def __init__(self) -> None:
        self.failures = 0
        self.calls = 0

    def export(self, events: Sequence[TraceEvent], context: ExportContext) -> None:
        self.calls += 1
        raise ConnectionError("backend down")

    def close(self, context: ExportContext) -> None:
        raise RuntimeError("cannot close")


class Collecting:
    def __init__(self) -> None:
        self.failures = 0
        self.events: list[TraceEvent] = []

    def export(self, events: Sequence[TraceEvent], context: ExportContext) -> None:
        self.events.extend(events)

    def close(self, context: ExportContext) -> None:
        pass


@pytest.fixture
def export_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.WARNING, logger="reasonstate.export")
    yield caplog


def test_an_exporter_that_raises_is_logged_and_counted_and_send_goes_on(
    export_warnings: pytest.LogCaptureFixture,
) -> None:
    broken, healthy = Raising(), Collecting()
    with vendor_session("anthropic", Recorder()) as (_emu, make):
        session = make(exporters=[broken, healthy])
        run_agent(session)
    assert session.report().requests == 4
    # every transition reached the healthy exporter after the broken one raised
    assert healthy.events == list(session.trace)
    assert broken.failures == broken.calls + 1 > 1  # each export, and the close
    logged = [r.getMessage() for r in export_warnings.records if r.name == "reasonstate.export"]
    assert len(logged) == broken.failures
    assert logged[0] == "exporter Raising failed in export (ConnectionError); the session goes on"
    assert logged[-1] == "exporter Raising failed in close (RuntimeError); the session goes on"
    assert all("backend down" not in m for m in logged)


def test_exporters_must_be_exporters() -> None:
    with AnthropicEmulator() as emu:
        with pytest.raises(rs.InvalidOption, match="exporters="):
            rs.Session(emu.client(), model="claude-sonnet-4-6", exporters=object())
        with pytest.raises(rs.InvalidOption, match=r"exporters\[0\]"):
            rs.Session(emu.client(), model="claude-sonnet-4-6", exporters=[print])
