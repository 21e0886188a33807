"""Anthropic emulator fixtures for the ``reasonstate`` pytest plugin.

* ``anthropic_emulator`` — a running :class:`~reasonstate.testing.anthropic.AnthropicEmulator` with an
  empty script; a test adds actions with ``anthropic_emulator.script.extend([...])``.
* ``anthropic_client`` — a real ``anthropic.Anthropic`` pointed at it (``max_retries=0``).
* ``async_anthropic_client`` — the same as ``anthropic.AsyncAnthropic``.

The ``anthropic`` SDK is imported inside the fixtures (via the emulator's client helpers), so the plugin
loads without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.script import Script

if TYPE_CHECKING:
    import anthropic

__all__ = ["anthropic_client", "anthropic_emulator", "async_anthropic_client"]


@pytest.fixture
def anthropic_emulator() -> Iterator[AnthropicEmulator]:
    """A running strict Anthropic Messages API emulator with an empty :class:`Script`."""
    with AnthropicEmulator(Script()) as emulator:
        yield emulator


@pytest.fixture
def anthropic_client(anthropic_emulator: AnthropicEmulator) -> Iterator[anthropic.Anthropic]:
    """A real ``anthropic.Anthropic`` client on the emulator (``api_key="test-key"``, no retries)."""
    client = anthropic_emulator.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def async_anthropic_client(anthropic_emulator: AnthropicEmulator) -> Iterator[anthropic.AsyncAnthropic]:
    """A real ``anthropic.AsyncAnthropic`` client on the emulator (``api_key="test-key"``, no retries)."""
    yield anthropic_emulator.async_client()
