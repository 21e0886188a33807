"""The README's quickstart runs as written: the real anthropic client, pointed at the emulator by the
SDK's own environment variables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_quickstart_runs_against_the_emulator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = re.search(r"## Quickstart\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    actions = [
        ModelAction(
            reasoning="Check both cities.", tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),)
        ),
        ModelAction(reasoning="Compare.", text="Rome is warmer."),
    ]
    with AnthropicEmulator(actions) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        exec(compile(code.group(1), str(README), "exec"), {})
        assert len(emulator.requests) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Rome is warmer."
    assert out[1].startswith("2 requests")


def test_the_readme_export_example_runs_against_the_emulator_and_an_otlp_receiver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests._export_support import OTLPReceiver

    code = re.search(r"## Export\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    with (
        AnthropicEmulator([ModelAction(reasoning="Compare.", text="Rome is warmer.")]) as emulator,
        OTLPReceiver() as receiver,
    ):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        exec(compile(code.group(1), str(README), "exec"), {})
        names = sorted(s.name for s in receiver.spans())
    assert capsys.readouterr().out.splitlines() == ["Rome is warmer."]
    assert names == ["chat claude-sonnet-4-6", "reasonstate.session", "reasonstate.turn"]
    assert (tmp_path / "trace.jsonl").read_text().count("\n") >= 5


def test_the_readme_agent_runtime_example_runs_against_the_emulator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    code = re.search(r"## Agent runtime\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    actions = [
        ModelAction(
            reasoning="Read both.",
            tool_calls=(
                ToolCallSpec("read_file", {"path": "README"}),
                ToolCallSpec("read_file", {"path": "app.py"}),
            ),
        ),
        ModelAction(reasoning="Done.", text="LIMIT is 10; raise it when asked."),
    ]
    with AnthropicEmulator(actions) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        exec(compile(code.group(1), str(README), "exec"), {})
        results = json.loads(emulator.requests[1].body)["messages"][-1]["content"]
    assert capsys.readouterr().out.splitlines() == ["LIMIT is 10; raise it when asked."]
    # both handlers ran; their results went back in the model's declared order
    assert [r["content"] for r in results] == ["Raise LIMIT when asked.\n", "LIMIT = 10\n"]


def test_the_readme_persist_example_runs_against_the_emulator(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import reasonstate as rs

    code = re.search(r"## Persist sessions\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)  # sessions.db goes here
    answers = ["Day 1: the Forum.", "Add Ostia Antica.", "A pasta class."]
    with AnthropicEmulator([ModelAction(reasoning="Plan.", text=a) for a in answers]) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        namespace: dict[str, object] = {}
        exec(compile(code.group(1), str(README), "exec"), namespace)
        assert len(emulator.requests) == 3  # the stale call was answered, and its append refused
    assert capsys.readouterr().out.splitlines() == ["Add Ostia Antica."]
    session = namespace["session"]
    assert isinstance(session, rs.Session) and session.version == 3
    assert [t.user for t in session.history.turns] == ["Plan three days in Rome.", "Add a day trip."]
    assert (tmp_path / "sessions.db").is_file()
