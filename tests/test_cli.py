"""The ``reasonstate`` command: subcommands, --help/--version, usage errors, and ``reasonstate emulate`` as
a real standalone server (a subprocess) driven by the real vendor SDKs through ``rs.Session``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.cli import main
from tests._cli import run_main
from tests.conftest import CLOCK, MODEL, SYSTEM, THINKING, WEATHER, run_chain

ROOT = Path(__file__).resolve().parent.parent
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The command's ``main`` in this process (tests/_cli.py); the version test runs the real entry point."""
    return run_main(*args, cwd=ROOT)


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m reasonstate.cli ARGS`` in a subprocess: the entry point itself."""
    return subprocess.run(
        [sys.executable, "-m", "reasonstate.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


# -- the command itself ------------------------------------------------------------------------------------
def test_version_prints_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    assert rs.__version__ == version("reasonstate")
    out = run_command("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"reasonstate {rs.__version__}"


@pytest.mark.parametrize("args", [["--help"], ["emulate", "--help"], ["prr", "--help"], ["-h"]])
def test_help_prints_usage_and_runs_nothing(args: list[str]) -> None:
    out = run_cli(*args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: reasonstate")
    assert "PRR drift matrix:" not in out.stdout and "base_url=" not in out.stdout


def test_top_level_help_lists_every_subcommand() -> None:
    out = run_cli("--help").stdout
    assert all(name in out for name in ("demo", "prr", "emulate", "--version"))


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--bogus"],
        ["frobnicate"],
        ["emulate"],
        ["emulate", "openrouter"],
        ["emulate", "anthropic", "--bogus"],
        ["emulate", "anthropic", "--port", "x"],
        ["emulate", "anthropic", "--dialect", "vllm"],
        ["emulate", "chat", "--dialect", "llamacpp"],
        ["prr", "--template", "qwen3.6", "--bogus"],
        ["prr"],
    ],
)
def test_usage_errors_exit_two(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert "usage: reasonstate" in capsys.readouterr().err


def test_demo_gets_every_argument_after_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import reasonstate.demo

    seen: list[list[str]] = []

    def demo(argv: list[str]) -> int:
        seen.append(list(argv))
        return 7

    monkeypatch.setattr(reasonstate.demo, "main", demo)
    assert main(["demo", "--help"]) == 7
    assert main(["demo", "--live", "--anything", "x"]) == 7
    assert seen == [["--help"], ["--live", "--anything", "x"]]


def test_a_bad_script_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"reasoning": "x", "tool_call": []}]))
    out = run_cli("emulate", "anthropic", "--script", str(bad))
    assert out.returncode == 2
    assert "unknown key(s) ['tool_call']" in out.stderr and "[0]" in out.stderr


def test_a_port_in_use_is_reported_not_a_traceback() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = run_cli("emulate", "anthropic", "--port", str(taken.getsockname()[1]))
    assert out.returncode == 1 and "Traceback" not in out.stderr and "reasonstate emulate:" in out.stderr


# -- reasonstate emulate as a subprocess ---------------------------------------------------------------------
@contextmanager
def emulate(*args: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """Start ``reasonstate emulate ARGS --port 0`` and yield it with the variables it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "reasonstate.cli", "emulate", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    watchdog = threading.Timer(60, proc.kill)  # never hang the suite on a server that does not start
    watchdog.start()
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("base_url=http://127.0.0.1:"), (first, proc.stderr and proc.stderr.read())
        printed = {"base_url": first.strip().split("=", 1)[1]}
        while (line := proc.stdout.readline()).startswith("export "):
            name, value = line[len("export ") :].strip().split("=", 1)
            printed[name] = value
        assert line.startswith("# reasonstate ")
        yield proc, printed
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stop(proc: subprocess.Popen[str], signum: int) -> str:
    """Send ``signum``; the server must exit 0 within 10 s. Returns what it wrote to stderr."""
    proc.send_signal(signum)
    assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None
    return proc.stderr.read()


def the_chain_script() -> list[dict[str, Any]]:
    """tests.conftest.three_step_chain as a script file: redacted + 2 parallel calls, 1 call, an answer."""
    return [
        {
            "reasoning": "Two cities: call the weather tool for both, in parallel.",
            "redacted": True,
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_weather", "arguments": {"city": "Rome"}},
            ],
        },
        {
            "reasoning": "Paris is mild. Check the local time in Rome too.",
            "tool_calls": [{"name": "get_time", "arguments": {"city": "Rome"}}],
        },
        {"reasoning": "I have everything; Rome is warmer.", "text": "Rome is warmer (22C) than Paris (18C)."},
    ]


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_proxy")
def test_emulate_anthropic_serves_a_tool_chain_to_the_real_sdk_then_stops_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    anthropic = pytest.importorskip("anthropic")
    script = tmp_path / "chain.json"
    script.write_text(json.dumps(the_chain_script()))
    with emulate("anthropic", "--script", str(script)) as (proc, printed):
        assert printed["ANTHROPIC_BASE_URL"] == printed["base_url"]  # Anthropic's base URL is the root
        for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"):
            monkeypatch.setenv(name, printed[name])
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        client = anthropic.Anthropic(max_retries=0)  # pointed at the server by the printed variables only
        session = rs.Session(
            client, model=MODEL, system=SYSTEM, tools=[WEATHER, CLOCK], max_tokens=4096, thinking=THINKING
        )
        reply = run_chain(session)
        assert reply.text == "Rome is warmer (22C) than Paris (18C)."
        report = session.report()
        assert report.requests == 3 and report.protocol_errors == 0
        # the script is used up: the default responder calls the first tool on the wire (get_time here,
        # which requires no argument), then echoes
        follow = session.send("Lyon")
        assert [(c.name, dict(c.arguments)) for c in follow.tool_calls] == [("get_time", {})]
        follow = session.send_tool_results({c.id: "Sunny" for c in follow.tool_calls})
        assert follow.text == "Echo: 1 tool result(s) received"
        assert session.report().protocol_errors == 0
        client.close()
        assert stop(proc, signal.SIGTERM) == ""


@pytest.mark.usefixtures("no_proxy")
def test_emulate_gemini_with_the_default_responder_and_sigint(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.genai")
    from google import genai

    with emulate("gemini") as (proc, printed):
        assert set(printed) == {"base_url", "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY"}
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)  # it would win over GEMINI_API_KEY
        for name in ("GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY"):
            monkeypatch.setenv(name, printed[name])
        client = genai.Client()
        session = rs.Session(client, model="gemini-3-flash", tools=[WEATHER])
        reply = session.send("Lyon")
        assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [("get_weather", {"city": "Lyon"})]
        reply = session.send_tool_results({c.id: "Sunny" for c in reply.tool_calls})
        assert reply.text == "Echo: 1 tool result(s) received"
        assert session.report().protocol_errors == 0
        assert stop(proc, signal.SIGINT) == ""


@pytest.mark.usefixtures("no_proxy")
def test_emulate_chat_deepseek_prints_the_bare_root_and_when_exhausted_error_is_a_500(
    tmp_path: Path,
) -> None:
    openai = pytest.importorskip("openai")
    script = tmp_path / "one.json"
    script.write_text(json.dumps({"actions": [{"reasoning": "r", "text": "hi"}], "when_exhausted": "error"}))
    with emulate("chat", "--dialect", "deepseek", "--script", str(script)) as (proc, printed):
        assert printed["OPENAI_BASE_URL"] == printed["base_url"]  # DeepSeek's base URL has no /v1
        client = openai.OpenAI(base_url=printed["OPENAI_BASE_URL"], api_key=printed["OPENAI_API_KEY"])
        client = client.with_options(max_retries=0)
        messages: Any = [{"role": "user", "content": "hello"}]
        first = client.chat.completions.create(model="deepseek-chat", messages=messages)
        assert first.choices[0].message.content == "hi"
        with pytest.raises(openai.InternalServerError, match="ScriptExhausted"):
            client.chat.completions.create(model="deepseek-chat", messages=messages)
        client.close()
        # the server says why it answered 500 (the emulator error's traceback), and still stops cleanly
        assert "when_exhausted: error" in stop(proc, signal.SIGTERM)
