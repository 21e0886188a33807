"""The peers of ``benchmarks/fresh_session.py``: a fresh agent of another library and its first run, on the
same in-process transport as reasonstate and the raw SDK call.

Peers (each only where it is installed and speaks the vendor's API):

* **pydantic-ai** (``Agent(model, instructions=...)`` + ``run_sync``): Anthropic Messages, OpenAI
  Responses, DeepSeek chat (its ``OpenAIChatModel``), Gemini (``GoogleModel``);
* **OpenAI Agents SDK** (``Agent(name, instructions, model=...)`` + ``Runner.run_sync``, tracing off, so
  nothing is exported): OpenAI Responses and DeepSeek chat (``OpenAIChatCompletionsModel``).

Both libraries call the vendor SDK's *async* client (they are async inside; ``run_sync`` runs an event
loop), so a peer's client is the async twin of the benchmark's, on the same ``httpx2.MockTransport``
handler: the request is answered in-process with the very response bytes the emulator gave the session's
first request. A peer's body differs from ours (its own request shape), so it is not compared byte for
byte; the fixed answer is a valid answer to it. Timed: building the agent (as ``rs.Session`` is built inside
the timed region) and its first run; the client is built once, untimed, as for the other two sides.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import httpx2

SYSTEM = "You answer briefly."

#: a peer's timed call: the question in, nothing out
Run = Callable[[str], None]


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _async_openai(base_url: str, transport: httpx2.MockTransport) -> Any:
    import openai

    http = openai.DefaultAsyncHttpxClient(base_url=base_url, transport=transport)
    return openai.AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0, http_client=http)


def _async_anthropic(base_url: str, transport: httpx2.MockTransport) -> Any:
    import anthropic

    http = anthropic.DefaultAsyncHttpxClient(base_url=base_url, transport=transport)
    return anthropic.AsyncAnthropic(base_url=base_url, api_key="test-key", max_retries=0, http_client=http)


def _genai(base_url: str, transport: httpx2.MockTransport) -> Any:
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        base_url=base_url,
        client_args={"trust_env": False, "transport": transport},
        async_client_args={"trust_env": False, "transport": transport},
    )
    return genai.Client(api_key="test-key", vertexai=False, http_options=options)


def _pydantic_ai(model: Any) -> Run:
    from pydantic_ai import Agent

    def run(question: str) -> None:
        Agent(model, instructions=SYSTEM).run_sync(question)

    return run


def _agents(model: Any) -> Run:
    from agents import Agent, Runner, set_tracing_disabled

    set_tracing_disabled(True)  # the default exporter would post traces to OpenAI

    def run(question: str) -> None:
        Runner.run_sync(Agent(name="bench", instructions=SYSTEM, model=model), question)

    return run


def peers(title: str, base_url: str, transport: httpx2.MockTransport) -> dict[str, Run]:
    """The installed peers of the case titled ``title``, each a timed call ready to run."""
    found: dict[str, Run] = {}
    if installed("pydantic_ai"):
        if title.startswith("Anthropic"):
            from pydantic_ai.models.anthropic import AnthropicModel
            from pydantic_ai.providers.anthropic import AnthropicProvider

            client = _async_anthropic(base_url, transport)
            found["pydantic-ai"] = _pydantic_ai(
                AnthropicModel("claude-sonnet-4-6", provider=AnthropicProvider(anthropic_client=client))
            )
        elif title.startswith("OpenAI Responses"):
            from pydantic_ai.models.openai import OpenAIResponsesModel
            from pydantic_ai.providers.openai import OpenAIProvider

            provider = OpenAIProvider(openai_client=_async_openai(base_url, transport))
            found["pydantic-ai"] = _pydantic_ai(OpenAIResponsesModel("gpt-5.5", provider=provider))
        elif title.startswith("DeepSeek"):
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            provider = OpenAIProvider(openai_client=_async_openai(base_url, transport))
            found["pydantic-ai"] = _pydantic_ai(OpenAIChatModel("deepseek-v4-pro", provider=provider))
        elif title.startswith("Gemini"):
            from pydantic_ai.models.google import GoogleModel
            from pydantic_ai.providers.google import GoogleProvider

            provider = GoogleProvider(client=_genai(base_url, transport))
            found["pydantic-ai"] = _pydantic_ai(GoogleModel("gemini-3-flash", provider=provider))
    if installed("agents"):
        if title.startswith("OpenAI Responses"):
            from agents import OpenAIResponsesModel

            client = _async_openai(base_url, transport)
            found["OpenAI Agents SDK"] = _agents(OpenAIResponsesModel("gpt-5.5", openai_client=client))
        elif title.startswith("DeepSeek"):
            from agents import OpenAIChatCompletionsModel

            client = _async_openai(base_url, transport)
            found["OpenAI Agents SDK"] = _agents(
                OpenAIChatCompletionsModel("deepseek-v4-pro", openai_client=client)
            )
    return found
