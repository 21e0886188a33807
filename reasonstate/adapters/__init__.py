"""Vendor adapters: one module per vendor API, each a sans-I/O codec plus a thin call.

Vendor SDKs are imported only inside the adapter's call, so this package imports without them.
"""

from __future__ import annotations

from typing import Any

from reasonstate.adapters.anthropic import AnthropicAdapter
from reasonstate.adapters.base import Adapter, DecodedStep, ProtocolRules, VendorRequest

__all__ = ["Adapter", "AnthropicAdapter", "DecodedStep", "ProtocolRules", "VendorRequest", "adapter_for"]


def adapter_for(client: Any) -> Adapter:
    """The adapter for a vendor client, chosen from its type (without importing the vendor SDK)."""
    for cls in type(client).__mro__:
        module = cls.__module__.split(".")[0]
        if module == "anthropic":
            return AnthropicAdapter()
    raise TypeError(
        f"no adapter for client type {type(client).__module__}.{type(client).__qualname__}; pass adapter="
    )
