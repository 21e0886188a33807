"""docs/guides/testing.md runs as written: its pytest example under the installed plugin (a subprocess), its
scripts against the emulators, its JSON script through the loader, its command line through the parser,
and the output it shows in the format ``reasonstate emulate`` prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reasonstate.cli import build_parser
from reasonstate.testing.standalone import environment, load_actions

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guides" / "testing.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), re.S)


@pytest.mark.long
def test_the_pytest_example_passes_under_the_plugin(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    tests = [code for code in blocks("python") if "def test_" in code]
    assert len(tests) == 1
    path = tmp_path / "test_guide_example.py"
    path.write_text(tests[0])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's reasonstate, and so its plugin
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout


@pytest.mark.parametrize("index", range(3))
def test_each_script_runs_against_the_emulators(index: int) -> None:
    pytest.importorskip("anthropic")
    pytest.importorskip("openai")
    scripts = [code for code in blocks("python") if "def test_" not in code]
    assert len(scripts) == 3
    exec(compile(scripts[index], f"{GUIDE}[{index}]", "exec"), {})


def test_the_json_script_loads(tmp_path: Path) -> None:
    (script,) = blocks("json")
    path = tmp_path / "chain.json"
    path.write_text(script)
    actions, fallback = load_actions(path)
    assert [len(a.tool_calls) for a in actions] == [2, 0] and fallback


def test_the_command_line_parses_and_the_output_shown_is_what_emulate_prints() -> None:
    (command,) = blocks("bash")
    args = build_parser().parse_args(command.split()[1:])
    assert (args.vendor, args.port, args.script) == ("anthropic", 8080, "chain.json")
    (shown,) = blocks("text")
    lines = shown.splitlines()
    url = "http://127.0.0.1:8080"
    assert lines[0] == f"base_url={url}"
    assert lines[1:-1] == [f"export {k}={v}" for k, v in environment("anthropic", url).items()]
    assert lines[-1] == "# reasonstate anthropic emulator serving; Ctrl-C (SIGINT) or SIGTERM stops it"


def test_the_guide_cites_only_the_projects_own_docs() -> None:
    links = re.findall(r"\]\(([^)]+)\)", GUIDE.read_text())
    assert links and all(not link.startswith(("http", "/")) for link in links)
    assert all((GUIDE.parent / link.split("#")[0]).resolve().is_file() for link in links)
