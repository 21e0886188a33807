"""Vendor adapters: one module per vendor API, each a sans-I/O codec plus a thin call.

Vendor SDKs are imported only inside the adapter's call, so this package imports without them.
"""

from __future__ import annotations

from typing import Any

from reasonstate.adapters.anthropic import AnthropicAdapter
from reasonstate.adapters.base import Adapter, DecodedStep, ProtocolRules, VendorRequest

__all__ = ["Adapter", "AnthropicAdapter", "DecodedStep", "ProtocolRules", "VendorRequest", "adapter_for"]


def adapter_for(client: Any, *, dialect: str | None = None, api: str | None = None) -> Adapter:
    """The adapter for a vendor client, chosen from its type (without importing the vendor SDK).

    ``anthropic.Anthropic`` → Messages. ``openai.OpenAI`` → Responses by default; ``api="chat"`` or a
    ``dialect`` (``"openai"``, ``"deepseek"``, ``"vllm"``, ``"sglang"``) → Chat Completions.
    """
    modules = {cls.__module__.split(".")[0] for cls in type(client).__mro__}
    if "anthropic" in modules:
        if dialect is not None or api not in (None, "messages"):
            raise ValueError("the Anthropic client speaks the Messages API only")
        return AnthropicAdapter()
    if "openai" in modules:
        if dialect is not None or api == "chat":
            from reasonstate.adapters.openai_chat import OpenAIChatAdapter

            return OpenAIChatAdapter(dialect=dialect or "openai")
        if api not in (None, "responses"):
            raise ValueError(f"unknown api {api!r} for an OpenAI client; use 'responses' or 'chat'")
        from reasonstate.adapters.openai_responses import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter()
    raise TypeError(
        f"no adapter for client type {type(client).__module__}.{type(client).__qualname__}; pass adapter="
    )
