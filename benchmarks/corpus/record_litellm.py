"""Record what real LiteLLM sends (``litellm_sequences.jsonl`` next to this file): the OpenAI Agents SDK's
``LitellmModel`` driving LiteLLM against the strict Anthropic and Gemini emulators of ``reasonstate.testing``,
two user turns, each a tool chain whose answer makes two parallel calls. Every exchange is kept as it went
over the wire: URL path, the request bytes LiteLLM sent, the answer's status and bytes.

LiteLLM is not a dependency of reasonstate, not even of the dev extra (it pulls boto3, aiohttp and httpx
0.29), so this script runs only in a separate virtual environment::

    python3 -m venv /tmp/llvenv
    /tmp/llvenv/bin/pip install litellm==1.110.2 openai-agents==0.24.0 openai anthropic google-genai
    LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONPATH=. /tmp/llvenv/bin/python benchmarks/corpus/record_litellm.py

(from the repository root; it rewrites the file). The emulators sign with their default secret, so the
recorded signatures verify on any fresh emulator: ``tests/test_guard_frameworks.py`` replays the requests
through the guard against them, without LiteLLM. The scripted model (:func:`anthropic_model`,
:func:`gemini_model`) lives here, importable without LiteLLM.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

from reasonstate.testing import ModelAction, ToolCallSpec

OUT = Path(__file__).with_name("litellm_sequences.jsonl")
CLAUDE = "claude-sonnet-4-6"
GEMINI = "gemini-3-pro-preview"
QUESTIONS = ("Paris or Rome: which is warmer?", "And tomorrow?")


def _answered(last: Any) -> bool:
    text = json.dumps(last)
    # LiteLLM writes Gemini's proto-JSON keys in snake_case (``function_response``)
    return "tool_result" in text or "functionResponse" in text or "function_response" in text


def anthropic_model(body: Any) -> ModelAction:
    """A question gets reasoning and two parallel weather calls; their results get a text."""
    if _answered(body["messages"][-1]):
        return ModelAction(reasoning="Both known.", text="Rome is warmer: 22C against 18C.")
    return ModelAction(
        reasoning="Check both.",
        tool_calls=(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Rome"}),
        ),
    )


def gemini_model(body: Any) -> ModelAction:
    """A question gets reasoning and two parallel weather calls; their results get a text."""
    if _answered(body["contents"][-1]):
        return ModelAction(reasoning="Both known.", text="Rome is warmer: 22C against 18C.")
    return ModelAction(
        reasoning="Check both.",
        tool_calls=(
            ToolCallSpec("get_weather", {"city": "Paris"}),
            ToolCallSpec("get_weather", {"city": "Rome"}),
        ),
    )


#: where each exchange LiteLLM has is kept: (the emulator's base URL, its list), set per case
_TAP: list[tuple[str, list[dict[str, Any]]]] = []


def _tap_httpx() -> None:
    """Keep every exchange LiteLLM's async ``httpx`` clients have with the emulator (the recorder's tap)."""
    import httpx

    send = httpx.AsyncClient.send

    async def logged(self: Any, request: Any, **kwargs: Any) -> Any:
        response = await send(self, request, **kwargs)
        base, exchanges = _TAP[-1]
        if str(request.url).startswith(base):
            await response.aread()
            exchanges.append(
                {
                    "method": request.method,
                    "path": request.url.path,
                    "request": request.content.decode(),
                    "status": response.status_code,
                    "response": response.content.decode(),
                }
            )
        return response

    httpx.AsyncClient.send = logged  # type: ignore[method-assign]


async def _agent(model_name: str, base_url: str) -> str | None:
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.extensions.models.litellm_model import LitellmModel
    from openai.types.shared import Reasoning

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        return {"Paris": "18C", "Rome": "22C"}.get(city, "unknown")

    agent = Agent(
        name="weather",
        instructions="Be brief.",
        model=LitellmModel(model=model_name, base_url=base_url, api_key="test-key"),
        model_settings=ModelSettings(reasoning=Reasoning(effort="low")),
        tools=[get_weather],
    )
    items: list[Any] = []
    try:
        for question in QUESTIONS:
            items = (await Runner.run(agent, [*items, {"role": "user", "content": question}])).to_input_list()
    except Exception as exc:  # a strict vendor refusing a request ends the run, as it ends the user's
        return f"{type(exc).__name__}: {exc}"[:400]
    return None


def main() -> int:
    from importlib.metadata import version

    from reasonstate.testing import AnthropicEmulator, GeminiEmulator

    lines: list[dict[str, Any]] = [
        {
            "recorded": datetime.date.today().isoformat(),
            "litellm": version("litellm"),
            "openai-agents": version("openai-agents"),
            "script": "benchmarks/corpus/record_litellm.py",
        }
    ]
    _tap_httpx()
    cases = (
        ("anthropic", AnthropicEmulator(anthropic_model), f"anthropic/{CLAUDE}", ""),
        ("gemini", GeminiEmulator(gemini_model), f"gemini/{GEMINI}", "/v1beta"),
    )
    for vendor, emulator, model_name, suffix in cases:
        exchanges: list[dict[str, Any]] = []
        with emulator:
            _TAP.append((emulator.base_url, exchanges))
            error = asyncio.run(_agent(model_name, emulator.base_url + suffix))
        lines.append({"vendor": vendor, "model": model_name, "error": error, "exchanges": exchanges})
        print(f"{vendor}: statuses {[e['status'] for e in exchanges]}, error {error}")
    OUT.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    sys.exit(main())
