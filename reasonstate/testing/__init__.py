"""Strict local emulators of the vendor HTTP APIs, on 127.0.0.1, for tests without the network.

The emulators are written from the vendor facts (docs/protocols.md), never from our adapters: they do
not import ``reasonstate.adapters`` or ``reasonstate.session``, so they cannot agree with our own bugs.
"""

from reasonstate.testing._server import (
    EmulatorServer,
    Fault,
    JSONResponse,
    RecordedRequest,
    Route,
    StreamResponse,
)
from reasonstate.testing.script import ModelAction, Script, ScriptExhausted, ToolCallSpec, count_tokens

__all__ = [
    "EmulatorServer",
    "Fault",
    "JSONResponse",
    "ModelAction",
    "RecordedRequest",
    "Route",
    "Script",
    "ScriptExhausted",
    "StreamResponse",
    "ToolCallSpec",
    "count_tokens",
]
