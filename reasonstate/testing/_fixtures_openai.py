"""OpenAI-family emulator fixtures: a running emulator per test and a real ``openai.OpenAI`` client on it.

Every client is built with ``max_retries=0`` (so an injected 429/5xx surfaces at once) and
``api_key="test-key"``. Script the model through the emulator: ``emulator.script.extend([...])``.
``openai`` is imported inside the fixture bodies (via ``emulator.client()``), so the plugin loads without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

if TYPE_CHECKING:
    import openai

__all__ = [
    "chat_client",
    "deepseek_client",
    "deepseek_emulator",
    "openai_chat_emulator",
    "openai_responses_emulator",
    "responses_client",
    "sglang_client",
    "sglang_emulator",
    "vllm_client",
    "vllm_emulator",
]


@pytest.fixture
def openai_responses_emulator() -> Iterator[OpenAIResponsesEmulator]:
    """A running OpenAI Responses emulator (``POST /v1/responses``) with an empty script."""
    with OpenAIResponsesEmulator() as emulator:
        yield emulator


@pytest.fixture
def openai_chat_emulator() -> Iterator[OpenAIChatEmulator]:
    """A running Chat Completions emulator, OpenAI dialect."""
    with OpenAIChatEmulator(dialect="openai") as emulator:
        yield emulator


@pytest.fixture
def deepseek_emulator() -> Iterator[OpenAIChatEmulator]:
    """A running Chat Completions emulator, DeepSeek dialect (thinking on by default)."""
    with OpenAIChatEmulator(dialect="deepseek") as emulator:
        yield emulator


@pytest.fixture
def vllm_emulator() -> Iterator[OpenAIChatEmulator]:
    """A running Chat Completions emulator, vLLM dialect (``reasoning`` field)."""
    with OpenAIChatEmulator(dialect="vllm") as emulator:
        yield emulator


@pytest.fixture
def sglang_emulator() -> Iterator[OpenAIChatEmulator]:
    """A running Chat Completions emulator, SGLang dialect (``reasoning_content`` field)."""
    with OpenAIChatEmulator(dialect="sglang") as emulator:
        yield emulator


@pytest.fixture
def responses_client(openai_responses_emulator: OpenAIResponsesEmulator) -> Iterator[openai.OpenAI]:
    """``openai.OpenAI`` pointed at :func:`openai_responses_emulator`."""
    with openai_responses_emulator.client() as client:
        yield client


@pytest.fixture
def chat_client(openai_chat_emulator: OpenAIChatEmulator) -> Iterator[openai.OpenAI]:
    """``openai.OpenAI`` pointed at :func:`openai_chat_emulator`."""
    with openai_chat_emulator.client() as client:
        yield client


@pytest.fixture
def deepseek_client(deepseek_emulator: OpenAIChatEmulator) -> Iterator[openai.OpenAI]:
    """``openai.OpenAI`` pointed at :func:`deepseek_emulator`, on DeepSeek's base URL (no ``/v1``)."""
    with deepseek_emulator.client() as client:
        yield client


@pytest.fixture
def vllm_client(vllm_emulator: OpenAIChatEmulator) -> Iterator[openai.OpenAI]:
    """``openai.OpenAI`` pointed at :func:`vllm_emulator`."""
    with vllm_emulator.client() as client:
        yield client


@pytest.fixture
def sglang_client(sglang_emulator: OpenAIChatEmulator) -> Iterator[openai.OpenAI]:
    """``openai.OpenAI`` pointed at :func:`sglang_emulator`."""
    with sglang_emulator.client() as client:
        yield client
