"""Every ``python`` block of the documentation runs as written, against the emulators.

Each page's ``python`` blocks are joined in order and executed as one program, with the real vendor SDK
clients pointed at a local emulator: through the SDKs' own environment variables (``ANTHROPIC_BASE_URL``,
``OPENAI_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``) or, where a page writes a server address into the code
(a self-hosted ``localhost:8000``), by replacing exactly that address with the emulator's. The README's and
the quickstarts' blocks also run verbatim in a subprocess against ``reasonstate emulate`` (the end of this
module). Fragments that are not meant to run use the ``py`` fence. A page with ``python`` blocks that no
test here runs fails :func:`test_every_page_with_python_blocks_is_executed`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reasonstate.testing import ModelAction, ToolCallSpec
from tests.conftest import sonnet_usd

DOCS = Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def code_of(page: str) -> str:
    blocks = _BLOCK.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no python block"
    return "\n".join(blocks)


def run_page(page: str, replace: dict[str, str] | None = None) -> dict[str, Any]:
    code = code_of(page)
    for old, new in (replace or {}).items():
        assert old in code, f"{page} no longer mentions {old}"
        code = code.replace(old, new)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    exec(compile(code, str(DOCS / page), "exec"), namespace)
    return namespace


def weather_chain(answer: str = "Rome is warmer.") -> list[ModelAction]:
    return [
        ModelAction.call(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Rome"}),
            reasoning="Check both cities.",
        ),
        ModelAction.answer(answer, reasoning="Compare the two temperatures."),
    ]


RUNNERS: dict[str, Callable[..., None]] = {}


def runs(page: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(test: Callable[..., None]) -> Callable[..., None]:
        RUNNERS[page] = test
        return test

    return register


#: pages whose python blocks another test module runs (each names its page)
ELSEWHERE = {"guides/testing.md": "test_guide_testing.py"}


def test_every_page_with_python_blocks_is_executed() -> None:
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if _BLOCK.search(p.read_text())}
    unrun = sorted(pages - set(RUNNERS) - set(ELSEWHERE))
    assert not unrun, f"add a @runs(page) test here for {unrun}, or fence fragments that cannot run as ```py"
    assert pages == set(RUNNERS) | set(ELSEWHERE)
    for page, module in ELSEWHERE.items():
        assert page in (Path(__file__).parent / module).read_text(), f"{module} does not run {page}"


@pytest.fixture
def out(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], list[str]]]:
    yield lambda: capsys.readouterr().out.splitlines()


@runs("quickstart/anthropic.md")
def test_anthropic_quickstart(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    with AnthropicEmulator([*weather_chain(), ModelAction.answer("Rome.")]) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        namespace = run_page("quickstart/anthropic.md")
        assert len(emulator.requests) == 3
    lines = out()
    assert lines[:3] == ["Rome is warmer.", str(namespace["session"].report()), "Rome."]
    assert lines[3].startswith("1 requests") and len(lines) == 4  # the async twin's report
    assert namespace["session"].report().requests == 2
    assert namespace["session"].execution[1].usage.cache_read > 0  # the long system prompt, cached


@runs("quickstart/openai-responses.md")
def test_openai_responses_quickstart(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    with OpenAIResponsesEmulator(weather_chain()) as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        run_page("quickstart/openai-responses.md")
        assert len(emulator.requests) == 2
        assert b'"store":false' in emulator.requests[1].body
    lines = out()
    assert lines[:1] == ["Rome is warmer."]
    assert lines[1].startswith("2 requests")


@runs("quickstart/chat.md")
def test_chat_quickstart(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.openai_chat import OpenAIChatEmulator

    # each block names no server: the openai SDK reads OPENAI_BASE_URL (DeepSeek's root, vLLM's /v1)
    deepseek_block, vllm_block = _BLOCK.findall((DOCS / "quickstart/chat.md").read_text())
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with OpenAIChatEmulator(weather_chain(), dialect="deepseek") as deepseek:
        monkeypatch.setenv("OPENAI_BASE_URL", deepseek.base_url)
        exec(compile(deepseek_block, "chat.md", "exec"), {})
        assert len(deepseek.requests) == 2
    replies = [ModelAction.answer("Rome.", reasoning="Compare."), ModelAction.answer("Oslo is colder.")]
    with OpenAIChatEmulator(replies, dialect="vllm") as vllm:
        monkeypatch.setenv("OPENAI_BASE_URL", vllm.base_url + "/v1")
        exec(compile(vllm_block, "chat.md", "exec"), {})
        assert len(vllm.requests) == 2
    lines = out()
    assert lines[0] == "Rome is warmer."
    assert lines[1].startswith("2 requests") and "(0.0% cache reads" not in lines[1]
    assert "tool-calling steps keep their reasoning (deepseek rule)" in lines[2]
    assert lines[3:5] == ["Rome.", "Oslo is colder."]
    assert lines[5].startswith("2 requests") and "(0.0% cache reads" not in lines[5]


@runs("quickstart/gemini.md")
def test_gemini_quickstart(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.gemini import GeminiEmulator

    with GeminiEmulator(weather_chain()) as emulator:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", emulator.base_url)
        monkeypatch.setenv("GEMINI_API_KEY", "test-key")
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
        run_page("quickstart/gemini.md")
        assert len(emulator.requests) == 2
    lines = out()
    assert lines[0] == "Rome is warmer."
    assert lines[1].startswith("2 requests")


def qwen_script(*cities: str) -> tuple[Any, list[str]]:
    """The Qwen3.6 renderer and what the scripted model samples: a weather call, then an answer, per city."""
    from reasonstate.tokens import ChatTemplateRenderer, template_path
    from reasonstate.tokens.families import CallSpec, ModelTurn

    renderer = ChatTemplateRenderer.from_files(template_path("qwen3.6"), tokenizer="qwen3.6")
    script: list[str] = []
    for city in cities:
        call = ModelTurn(
            reasoning=f"Check the weather in {city} first.", calls=(CallSpec("get_weather", {"city": city}),)
        )
        answer = ModelTurn(reasoning=f"{city} is cold.", content=f"Yes: {city} is cold.")
        script += [renderer.family.write(call, "open"), renderer.family.write(answer, "open")]
    return renderer, script


@runs("quickstart/tokens.md")
def test_token_level_quickstart(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.completions import VLLMCompletionsEmulator

    renderer, script = qwen_script("Oslo")
    eos = [renderer.tokenizer.special_id("<|im_end|>")]
    with VLLMCompletionsEmulator(script, codec=renderer, eos_token_ids=eos) as emulator:
        monkeypatch.setenv("OPENAI_BASE_URL", emulator.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
        namespace = run_page("quickstart/tokens.md")
        served = emulator.served
    assert len(served) == 2
    first, second = served
    # the bridge: the second prompt extends the first prompt plus the sampled ids, never re-tokenized
    assert second.prompt_token_ids[: len(first.prompt_token_ids) + len(first.token_ids)] == (
        first.prompt_token_ids + first.token_ids
    )
    lines = out()
    assert lines[0] == "Yes: Oslo is cold."
    records = namespace["session"].execution
    assert lines[1:-1] == [
        f"{r.index} {r.usage.prompt_tokens} {r.usage.cache_read} {r.predicted_cache_read}" for r in records
    ]
    assert lines[-1] == str(namespace["session"].report())
    assert all(r.usage.cache_read == r.predicted_cache_read for r in records)


@runs("howto/token-level.md")
def test_the_complete_token_adapter_setup(out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.completions import VLLMCompletionsEmulator

    renderer, script = qwen_script("Oslo", "Rome")
    eos = [renderer.tokenizer.special_id("<|im_end|>")]
    with VLLMCompletionsEmulator(script, codec=renderer, eos_token_ids=eos) as emulator:
        namespace = run_page("howto/token-level.md", {"http://localhost:8000/v1": emulator.base_url + "/v1"})
        assert len(emulator.served) == 4
        bodies = [json.loads(r.body) for r in emulator.server.requests]
    assert {b["temperature"] for b in bodies} == {0.6}
    lines = out()
    assert lines[:2] == ["Yes: Oslo is cold.", "Yes: Rome is cold."]
    assert [line.split(":")[1].split(",")[0] for line in lines[2:6]] == [
        " full render",
        " bridge",
        " bridge",
        " bridge",
    ]
    records = namespace["session"].execution
    assert all(r.usage.cache_read == r.predicted_cache_read for r in records)
    assert lines[6:8] == ["Yes, Oslo is cold: pack a coat.", "Yes, Rome is cold: pack a coat."]
    assert lines[8].startswith("4 requests")
    assert any(line.startswith("PRR drift matrix: qwen3.6.jinja") for line in lines[9:])


def anthropic_env(monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


@runs("howto/policies.md")
def test_policies_how_to(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    long_thought = "Compare the bridges by their construction dates, one by one. " * 40  # ~600 tokens
    script = [
        ModelAction.answer("Pont Neuf.", reasoning=long_thought),
        ModelAction.answer("Ponte Fabricio.", reasoning="Short."),
        ModelAction.answer("Pont Neuf.", reasoning="Recall the dates."),
        ModelAction.answer("Hello!", reasoning="Greet."),
    ]
    with AnthropicEmulator(script) as emulator:
        anthropic_env(monkeypatch, emulator.base_url)
        run_page("howto/policies.md")
        assert len(emulator.requests) == 4
    lines = out()
    assert lines[0].startswith("turn 0: cache_aware keeps reasoning [False]")
    assert lines[1].startswith("turn 1: cache_aware keeps reasoning [True]")
    assert lines[2] == "TurnView(keep_reasoning=(False,), policy='cache_aware', summary=None)"
    assert lines[3] == "(Earlier reasoning, shortened: Recall the dates.)"
    assert lines[4] == "drop_after_tool_chains"


@runs("howto/fold-and-scratch.md")
def test_fold_and_scratch_how_to(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    long_answer = "Day one: the Colosseum and the Forum; day two: the Vatican museums. " * 40  # ~680 tokens
    script = [
        ModelAction.answer(long_answer, reasoning="Plan the week."),
        ModelAction.answer("Yes: the direct night train takes about 14 hours.", reasoning="Trains."),
        ModelAction.answer("Monti: central, quiet, near the Forum.", reasoning="Areas."),
        ModelAction.answer("Try Trastevere.", reasoning="Food."),
        ModelAction.call(ToolCallSpec("read_file", {"path": "pyproject.toml"}), reasoning="Read it."),
        ModelAction.call(ToolCallSpec("read_file", {"path": "setup.cfg"}), reasoning="And this."),
        ModelAction.answer("Hatchling.", reasoning="Found it."),
    ]
    # the ServerCompact example builds an openai client and sends nothing
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
    with AnthropicEmulator(script) as emulator:
        anthropic_env(monkeypatch, emulator.base_url)
        run_page("howto/fold-and-scratch.md")
        assert len(emulator.requests) == 7
        assert not any(b"read the setup files" in r.body for r in emulator.requests)  # scratch is never sent
        assert b"[Summary of the earlier conversation follows]" in emulator.requests[2].body
    lines = out()
    # the context passes 700 after turn 1 (the long answer of turn 0 is the head): folded there, once
    assert [line.split(":")[0] for line in lines[:3]] == ["turn 0", "turn 1", "turn 2"]
    assert int(lines[0].split()[-1]) < 700 <= int(lines[1].split()[-1])
    assert int(lines[2].split()[-1]) < 700
    assert lines[3:6] == [
        "folded turns 0..0 after turn 1, 1 kept",
        "['user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user']",
        "context.folded",
    ]
    assert lines[6:] == [
        "plan: ['read the setup files', 'answer']; files seen so far: []",
        "plan: ['read the setup files', 'answer']; files seen so far: ['pyproject.toml']",
        "Hatchling.",
        "{}",
    ]


@runs("howto/snapshots.md")
def test_snapshots_how_to(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    with AnthropicEmulator(weather_chain()) as emulator:
        anthropic_env(monkeypatch, emulator.base_url)
        run_page("howto/snapshots.md")
        assert len(emulator.requests) == 2
    assert out() == ["TurnState.AWAITING_TOOL_RESULTS", "Rome is warmer.", "refused: SnapshotError"]


@runs("howto/persist.md")
def test_persist_how_to(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, out: Callable[[], list[str]]
) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    monkeypatch.chdir(tmp_path)  # the page's SQLite files go here
    answers = ["Day 1: the Forum.", "Add Ostia Antica.", "A pasta class.", "Wednesday.", "Noted."]
    with AnthropicEmulator([ModelAction.answer(a, reasoning="Plan it.") for a in answers]) as emulator:
        anthropic_env(monkeypatch, emulator.base_url)
        namespace = run_page("howto/persist.md")
        assert len(emulator.requests) == 5  # the conflicting call was answered (and paid for)
    assert out() == [
        "Day 1: the Forum.",
        "2",
        "Add Ostia Antica.",
        "3",
        "conflict: built on version 2, the store holds 3",
        "['Plan three days in Rome.', 'Add a day trip.']",
        "Wednesday.",
        "refused: StoreError",
        "1",
        "[('conv-42', 1)]",
    ]
    assert namespace["paid"].text == "A pasta class."
    assert (tmp_path / "sessions.db").is_file() and (tmp_path / "private.db").is_file()
    files = [f.read_bytes() for f in tmp_path.glob("private.db*")]  # the database and its WAL
    assert files and not any(b"passport" in f for f in files)  # sealed at rest
    assert {s.session_id: s.version for s in namespace["store"].sessions()} == {"conv-42": 4}


@runs("concepts/switching.md")
def test_switching_concept(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator
    from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

    with (
        AnthropicEmulator([ModelAction.answer("Day 1: ...", reasoning="Plan.")]) as claude,
        OpenAIResponsesEmulator([ModelAction.answer("Day 3: ...", reasoning="Extend.")]) as gpt,
    ):
        anthropic_env(monkeypatch, claude.base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", gpt.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        run_page("concepts/switching.md")
        sent = json.loads(gpt.requests[0].body)
    assert out() == [
        "Day 1: ...",
        "Day 3: ...",
        "[{'vendor': 'openai', 'api': 'responses', 'model': 'gpt-5.5'}]",
    ]
    assert "Plan." not in json.dumps(sent)  # the Anthropic thinking did not cross


@runs("concepts/layers.md")
def test_the_layers_example(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    script = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Oslo"}), reasoning="Look it up."),
        ModelAction.answer("4C in Oslo.", reasoning="Report it."),
    ]
    with AnthropicEmulator(script) as emulator:
        anthropic_env(monkeypatch, emulator.base_url)
        namespace = run_page("concepts/layers.md")
    lines = out()
    assert lines[0] == (
        "['ReasoningPart', 'ToolCallPart'] TurnView(keep_reasoning=(True, True), policy='keep', summary=None)"
    )
    session = namespace["session"]
    assert lines[1] == str([(c.kind, c.digest[:15]) for c in session.continuation])
    assert [line.split()[0] for line in lines[2:4]] == ["0", "1"]
    assert "request.sent" in lines[4] and "turn.closed" in lines[4]


@runs("howto/cost.md")
def test_cost_howto(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    answers = [ModelAction.answer(f"Answer {i}.", reasoning="Thinking it over. " * 20) for i in range(3)]
    with AnthropicEmulator(answers) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        namespace = run_page("howto/cost.md")
    report = namespace["session"].report()
    records = namespace["session"].execution
    # the page's figures, checked against the records by hand at the packaged Sonnet 4.6 prices
    by_hand = sum(sonnet_usd(r.usage) for r in records)
    lines = out()
    assert lines[0] == f"session: ${by_hand:.6f}" and report.cost.total == pytest.approx(by_hand)
    assert [line.split(":")[0] for line in lines[1:4]] == ["turn 0", "turn 1", "turn 2"]
    assert records[-1].usage.cache_read > 0  # the long system prompt was read from the cache
    assert lines[4].startswith("at my prices: $")
    m = report.metrics
    figures = (m.cached_input_tokens, m.uncached_prefill_tokens, m.recomputed_history_tokens)
    assert lines[5] == " ".join(map(str, figures))
    active = records[-1].usage.prompt_tokens + records[-1].usage.output
    assert lines[6] == f"{active} {active * 2 * 48 * 8 * 128 * 2}"


@runs("guides/streaming.md")
def test_streaming_guide(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    with AnthropicEmulator(weather_chain()) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        namespace = run_page("guides/streaming.md")
        assert len(emulator.requests) == 2
    printed = "\n".join(out())
    reply = namespace["reply"]
    assert reply.text == "Rome is warmer." and not reply.tool_calls
    # the first step's events as they arrived: its reasoning, then each call with its arguments
    assert printed.startswith("Check both cities.")
    pieces: dict[str, str] = {}
    for call_id, delta in re.findall(r"\[get_weather (\S+)\] (.*)", printed):
        pieces[call_id] = pieces.get(call_id, "") + delta
    first = namespace["session"].history.turns[0].steps[0].tool_calls
    assert pieces == {c.id: c.raw_arguments for c in first}  # each call's arguments, streamed in pieces
    assert len(namespace["session"].history.turns[0].steps) == 2


@runs("howto/tools.md")
def test_tools_howto(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    actions = [
        ModelAction.call(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Rome"}),
            ToolCallSpec("get_forecast", {"city": "Rome"}),
        ),
        ModelAction.answer("Rome is warmer; no forecast available."),
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Rome"})),
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Rome"})),
        ModelAction.answer("Rome: 22C, as before."),
    ]
    with AnthropicEmulator(actions) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        run_page("howto/tools.md")
        sent = [json.loads(r.body)["messages"] for r in emulator.requests]
    # what the model saw, from the bytes the emulator received
    first = sent[1][-1]["content"]
    assert [b["content"] for b in first[:2]] == [
        '{"city":"Paris","temp_c":18}',
        '{"city":"Rome","temp_c":22}',
    ]
    assert first[2]["is_error"] is True and first[2]["content"].startswith("timeout: get_forecast")
    assert sent[3][-1]["content"][0]["content"] == '{"city":"Rome","temp_c":22}'
    assert sent[4][-1]["content"][0]["content"].startswith("suppressed: get_weather was called")
    assert out() == [
        "Rome is warmer; no forecast available.",
        "get_weather ok",
        "get_weather ok",
        "get_forecast timeout",
        "get_weather 2 4",
    ]


@runs("howto/guard.md")
def test_guard_howto(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.anthropic import AnthropicEmulator

    actions = [
        ModelAction.call(ToolCallSpec("get_weather", {"city": "Paris"}), reasoning="Check Paris."),
        ModelAction.answer("Paris is 18C.", reasoning="Answer."),
    ]
    with AnthropicEmulator(actions) as emulator:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emulator.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        namespace = run_page("howto/guard.md")
        sent = [json.loads(r.body) for r in emulator.requests]
    records = namespace["guard"].records
    # the oracle: the two system prompts as the emulator received them differ in the minute alone
    texts = [body["system"][0]["text"] for body in sent]
    assert texts[0].replace("09:00", "09:01") == texts[1] != texts[0]
    assert records[1].reported_cache_read == 0 and records[1].usage is not None
    assert out() == [
        f"0 extends 0 {records[0].reported_cache_read} []",
        f"1 timestamp_in_prefix at $.system[0].text {records[1].predicted_cache_read} 0 []",
    ]


@runs("howto/repair.md")
def test_repair_howto(monkeypatch: pytest.MonkeyPatch, out: Callable[[], list[str]]) -> None:
    from reasonstate.testing.openai_chat import OpenAIChatEmulator

    dsml = (
        "<｜DSML｜function_calls>\n"
        '<｜DSML｜invoke name="read_file">\n'
        '<｜DSML｜parameter name="path" string="true">notes.md</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="limit" string="false">3</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n"
        "</｜DSML｜function_calls>"
    )
    script = [
        ModelAction.answer("Let me read them.", reasoning=dsml),
        ModelAction.answer("Your notes say hello.", reasoning="Read them."),
    ]
    with OpenAIChatEmulator(script, dialect="deepseek") as deepseek:
        monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
        run_page("howto/repair.md", {"https://api.deepseek.com": deepseek.base_url})
        assert len(deepseek.requests) == 2
        sent = json.loads(deepseek.requests[1].body)["messages"][-1]["content"]
    assert "first 3 lines of notes.md: hello" in sent
    assert out() == ["Your notes say hello.", "scavenge read_file reasoning"]


# -- verbatim: every block of README.md and docs/quickstart/ as a newcomer runs it ------------------------
# ``reasonstate emulate ...`` in a subprocess; the block in another, in an empty folder, with an environment
# of nothing but the variables the emulator printed (and PATH, PYTHONPATH to find this tree): no replaced
# address, no key of the test's own. Issue 24 item 3: the DeepSeek quickstart ignored the printed variables,
# the token-level one printed an empty line, and every quickstart showed "0.0% cache reads".
ROOT = DOCS.parent
_CACHE_READS = re.compile(r"\(([\d.]+)% cache reads")


@dataclasses.dataclass(frozen=True)
class Verbatim:
    """How one python block runs: the emulate arguments, the earlier blocks of its page it continues, the
    json block of its page saved under ``script`` first, whether it must show cache reads, and the
    variables a newcomer sets beside the printed ones (each documented by the library it configures)."""

    emulate: tuple[str, ...]
    after: tuple[int, ...] = ()
    script: str | None = None
    cache: bool = True
    env: tuple[tuple[str, str], ...] = ()


VERBATIM: dict[tuple[str, int], Verbatim] = {
    ("README.md", 0): Verbatim(("anthropic",)),  # Quickstart
    ("README.md", 1): Verbatim(("anthropic",), cache=False),  # Streaming: one request
    ("README.md", 2): Verbatim(("anthropic",), cache=False),  # Agent runtime
    ("README.md", 3): Verbatim(("anthropic",), cache=False),  # Persist sessions
    # Export: no OTLP receiver, so the span export fails, logged and not felt. OpenTelemetry's documented
    # OTEL_EXPORTER_OTLP_TIMEOUT bounds its retries to 1 s (seconds in opentelemetry-exporter-otlp-proto-http;
    # the default 10 s was idle time of every make test)
    ("README.md", 4): Verbatim(("anthropic",), cache=False, env=(("OTEL_EXPORTER_OTLP_TIMEOUT", "1"),)),
    ("docs/quickstart/anthropic.md", 0): Verbatim(("anthropic",)),
    ("docs/quickstart/anthropic.md", 1): Verbatim(("anthropic",), after=(0,)),
    ("docs/quickstart/openai-responses.md", 0): Verbatim(("responses",)),
    ("docs/quickstart/chat.md", 0): Verbatim(("chat", "--dialect", "deepseek")),
    ("docs/quickstart/chat.md", 1): Verbatim(("chat", "--dialect", "vllm")),
    ("docs/quickstart/gemini.md", 0): Verbatim(("gemini",)),
    ("docs/quickstart/tokens.md", 0): Verbatim(
        ("completions", "--tokenizer", "qwen3.6", "--script", "oslo.json"), script="oslo.json"
    ),
}


def _blocks(page: str, fence: str = "python") -> list[str]:
    return re.findall(rf"^```{fence}\n(.*?)^```", (ROOT / page).read_text(), re.S | re.M)


def test_every_block_of_the_readme_and_the_quickstarts_runs_verbatim() -> None:
    pages = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (DOCS / "quickstart").glob("*.md"))]
    blocks = {(page, i) for page in pages for i in range(len(_blocks(page)))}
    assert blocks == set(VERBATIM), "a python block was added or removed: say how it runs in VERBATIM"


@contextlib.contextmanager
def emulate(args: tuple[str, ...], cwd: Path) -> Iterator[dict[str, str]]:
    """``reasonstate emulate ARGS --port 0`` in ``cwd``; yields the variables it printed (its exports)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "reasonstate.cli", "emulate", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    watchdog = threading.Timer(60, proc.kill)  # never hang the suite on a server that does not start
    watchdog.start()
    try:
        assert proc.stdout is not None
        printed: dict[str, str] = {}
        while (line := proc.stdout.readline()).startswith(("base_url=", "export ")):
            if line.startswith("export "):
                name, value = line[len("export ") :].strip().split("=", 1)
                printed[name] = value
        assert line.startswith("# reasonstate "), (line, proc.stderr and proc.stderr.read())
        yield printed
    finally:
        watchdog.cancel()
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(("page", "index"), sorted(VERBATIM), ids=[f"{p}#{i}" for p, i in sorted(VERBATIM)])
def test_the_block_runs_verbatim_against_reasonstate_emulate(page: str, index: int, tmp_path: Path) -> None:
    how = VERBATIM[(page, index)]
    blocks = _blocks(page)
    code = "\n".join(blocks[i] for i in (*how.after, index))
    if how.script:
        (script,) = _blocks(page, "json")
        (tmp_path / how.script).write_text(script)
    with emulate(how.emulate, tmp_path) as printed:
        assert printed and all(name.endswith(("_BASE_URL", "_API_KEY")) for name in printed)
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT),
            "HOME": str(tmp_path),
            **printed,
            **dict(how.env),
        }
        run = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() and "Traceback" not in run.stderr
    if how.cache:
        reads = [float(share) for share in _CACHE_READS.findall(run.stdout)]
        assert reads and all(share > 0 for share in reads), run.stdout


# -- the site: an API reference entry per public name, and it works opened as files (issue 24 item 6) -------
def test_every_name_in_reasonstate_all_has_an_api_reference_entry() -> None:
    """A name is documented by its own ``::: reasonstate.NAME`` entry, a heading naming it, or the entry of
    the module that defines and exports it (``::: reasonstate.errors`` renders every exception). Issue 24:
    ``rs.Pricing``, ``rs.KVConfig``, ``rs.Cost``, ``rs.Metrics``, ``rs.Price``, ``rs.Stream``,
    ``rs.AsyncStream`` and ``rs.StreamEvent`` had none (the README uses three of them)."""
    import importlib

    import reasonstate

    text = "\n".join(p.read_text() for p in sorted((DOCS / "api").glob("*.md")))
    entries = set(re.findall(r"^::: ([\w.]+)\s*$", text, re.M))
    headings = "\n".join(re.findall(r"^#+ .*$", text, re.M))

    def documented(name: str) -> bool:
        if f"reasonstate.{name}" in entries or f"reasonstate.{name}`" in headings:
            return True
        module = getattr(getattr(reasonstate, name), "__module__", None)
        return module in entries and name in getattr(importlib.import_module(str(module)), "__all__", ())

    missing = [name for name in reasonstate.__all__ if not documented(name)]
    assert not missing, f"add `::: reasonstate.X` entries to docs/api/reasonstate.md for {missing}"


def test_the_site_is_built_to_be_opened_as_files() -> None:
    """Opened from ``site/`` as files, every navigation link opened a directory listing and search did not
    work (issue 24): pages are built as ``name.html`` and mkdocs-material's offline plugin inlines the
    search index."""
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^use_directory_urls: false$", config, re.M)
    plugins = config.split("\nplugins:\n", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^  - offline$", plugins, re.M) and re.search(r"^  - search$", plugins, re.M)
    from material.plugins.offline.plugin import OfflinePlugin  # the installed theme has the plugin

    assert OfflinePlugin
    css = (DOCS / "stylesheets" / "extra.css").read_text()
    assert re.search(r"\.md-typeset pre > code \{[^}]*white-space: pre-wrap", css)
