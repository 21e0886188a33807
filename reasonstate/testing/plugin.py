"""pytest plugin (entry point ``reasonstate``): fixtures giving a test a running emulator and a real vendor
client pointed at it. Vendor SDKs are imported inside the fixtures, so the plugin loads without them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from reasonstate.testing._fixtures_anthropic import *  # noqa: F403
from reasonstate.testing._fixtures_openai import *  # noqa: F403
from reasonstate.testing.gemini import GeminiEmulator

if TYPE_CHECKING:
    from google import genai
    from google.genai.client import AsyncClient


@pytest.fixture
def gemini_emulator() -> Iterator[GeminiEmulator]:
    """A running strict Gemini ``generateContent`` emulator with an empty script."""
    with GeminiEmulator() as emulator:
        yield emulator


@pytest.fixture
def gemini_client(gemini_emulator: GeminiEmulator) -> Iterator[genai.Client]:
    """A real ``google.genai.Client`` on :func:`gemini_emulator` (``api_key="test-key"``, ``/v1``, no
    retries)."""
    with gemini_emulator.client() as client:
        yield client


@pytest.fixture
def async_gemini_client(gemini_client: genai.Client) -> Iterator[AsyncClient]:
    """``gemini_client.aio``: the async client of the same ``genai.Client`` (kept alive by the fixture)."""
    yield gemini_client.aio
