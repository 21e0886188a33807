"""``reasonstate inspect`` and ``reasonstate report`` on a real recording: a session run with the real
anthropic SDK against the emulator, saved as a snapshot and as a JSONL trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reasonstate as rs
from reasonstate.cli import main
from reasonstate.export.jsonl import JSONLExporter
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from tests.conftest import sonnet_usd

WEATHER = rs.Tool(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, rs.Session]:
    folder = tmp_path_factory.mktemp("recording")
    snapshot, trace = folder / "session.json", folder / "trace.jsonl"
    actions = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="Check Paris first."),
        ModelAction.answer("Warm.", reasoning="It is warm."),
        *(ModelAction.answer(f"Yes {i}.", reasoning="Sure.") for i in range(2)),
    ]
    with AnthropicEmulator(actions) as emulator:
        session = rs.Session(
            emulator.client(),
            model="claude-sonnet-4-6",
            system="You are the travel desk. " * 200,
            tools=[WEATHER],
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            exporters=[JSONLExporter(trace)],
        )
        reply = session.send("Weather in Paris?")
        session.send_tool_results({c.id: {"temp_c": 24} for c in reply.tool_calls})
        session.send("Sure?")
        session.send("Really?")
        session.close()
    snapshot.write_text(session.snapshot().model_dump_json())
    return snapshot, trace, session


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_inspect_prints_the_four_layers_of_a_snapshot_and_no_payload_bytes(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, _, session = recorded
    code, out, _ = run(capsys, "inspect", str(snapshot))
    assert code == 0
    for header in ("== trace: ", "== history: 3 turns", "== continuation: ", "== execution: 4 requests"):
        assert header in out
    assert 'get_weather({"city":"Paris"})' in out
    payloads = [c for t in session.history.turns for s in t.steps for c in s.continuation]
    for c in payloads:
        assert c.digest[:19] in out
        signature = json.loads(c.payload).get("signature")
        if signature:
            assert signature not in out  # opaque bytes are never printed
    for r in session.execution:  # each request's row: its prompt, cache read and cache write figures
        assert f"{r.usage.prompt_tokens:>6}  {r.usage.cache_read:>10}  {r.usage.cache_write:>11}" in out


def test_report_prices_each_turn_from_a_snapshot_and_from_the_trace_alike(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, trace, session = recorded
    code, from_snapshot, _ = run(capsys, "report", str(snapshot))
    assert code == 0
    by_hand = sum(sonnet_usd(r.usage) for r in session.execution)
    last = from_snapshot.strip().splitlines()[-1].split()
    assert last[0] == "all" and last[1] == "4" and float(last[-1]) == pytest.approx(by_hand, abs=1e-6)
    reads = sum(r.usage.cache_read for r in session.execution)
    assert int(last[3]) == reads > 0  # the long system prompt is read from the cache on later requests
    code, from_trace, _ = run(capsys, "report", str(trace))
    assert code == 0
    assert from_trace.splitlines()[1:] == from_snapshot.splitlines()[1:]


def test_report_takes_a_price_file_and_says_when_a_model_has_no_price(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot, _, _ = recorded
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": [{"model": "other", "input": 1, "cache_read": 0, "output": 1}]}))
    code, out, _ = run(capsys, "report", str(snapshot), "--prices", str(prices))
    assert code == 0 and "unknown" in out and "no price for claude-sonnet-4-6" in out


@pytest.mark.parametrize("content", ["{}", "not json at all", ""])
def test_a_file_that_is_no_recording_is_a_clear_error(
    content: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    for command in ("inspect", "report"):
        code, out, err = run(capsys, command, str(path))
        assert code == 1 and out == "" and "neither a session snapshot nor a JSONL trace" in err


def test_an_edited_snapshot_is_refused(
    recorded: tuple[Path, Path, rs.Session], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    snapshot, _, _ = recorded
    data = json.loads(snapshot.read_text())
    data["system"] += " edited"
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    code, _, err = run(capsys, "inspect", str(path))
    assert code == 1 and "edited" in err


def test_help_lists_the_new_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "inspect" in out and "report" in out
    code, out, _ = run(capsys, "report", "--help")
    assert code == 0 and "--prices" in out


def _bodies(tmp_path: Path) -> list[Path]:
    """Three request bodies as the real anthropic SDK sent them: a first turn, the next turn extending it,
    and the next turn again with a clock time edited into the system prompt."""
    with AnthropicEmulator(
        [ModelAction.answer(f"A{i}.", reasoning="Thinking.") for i in range(3)]
    ) as emulator:
        client = emulator.client()
        system = "You are the travel desk. Now: 2026-12-01T03:32:20."
        messages: list[dict[str, object]] = [{"role": "user", "content": "Paris?"}]
        kwargs = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 2048,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        }
        first = client.messages.create(system=system, messages=messages, **kwargs)
        messages += [
            {"role": "assistant", "content": [b.to_dict() for b in first.content]},
            {"role": "user", "content": "Rome?"},
        ]
        client.messages.create(system=system, messages=messages, **kwargs)
        client.messages.create(system=system.replace("03:32:20", "03:33:05"), messages=messages, **kwargs)
        paths = []
        for i, request in enumerate(emulator.requests):
            paths.append(tmp_path / f"body{i}.json")
            paths[-1].write_bytes(request.body)
    return paths


def test_diff_explains_a_break_from_the_sdks_own_request_bytes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, b, c = _bodies(tmp_path)
    code, out, _ = run(capsys, "diff", str(a), str(b))
    assert code == 0 and "extends it" in out
    code, out, _ = run(capsys, "diff", str(b), str(c))
    assert code == 0
    assert "cause: timestamp_in_prefix" in out and "path $.system" in out
    assert "(messages," in out  # told from the body's shape
    code, _, err = run(capsys, "diff", str(a), str(tmp_path / "missing.json"))
    assert code == 1 and "not a JSON request body" in err
