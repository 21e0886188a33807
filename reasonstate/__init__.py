"""reasonstate: reasoning-state continuity and prefix-cache discipline for multi-turn agents.

import reasonstate as rs
session = rs.Session(client, model="...", system="...", tools=[rs.Tool(...)], policy=Drop())
reply = session.send("user text")
while reply.tool_calls:
    reply = session.send_tool_results({c.id: run(c) for c in reply.tool_calls})

Logging: the ``reasonstate`` logger (stdlib ``logging``) has a ``NullHandler``, so nothing is printed unless
the application configures logging; see ``docs/export.md`` for what is logged at which level.
"""

import logging as _logging

from reasonstate.errors import (
    ContinuationMismatch,
    IllegalTransition,
    InvalidOption,
    MalformedResponse,
    PolicyConflict,
    ProtocolViolation,
    ReasonStateError,
    SnapshotError,
    StreamInterrupted,
    ToolResultError,
    VendorError,
)
from reasonstate.prefix import Prefix, Tool
from reasonstate.session import (
    AsyncSession,
    AsyncStream,
    Reply,
    Report,
    Session,
    Stream,
    StreamEvent,
    ToolCall,
    ToolResult,
    TurnState,
)
from reasonstate.snapshot import SessionSnapshot

_logging.getLogger("reasonstate").addHandler(_logging.NullHandler())

__all__ = [
    "AsyncSession",
    "AsyncStream",
    "ContinuationMismatch",
    "IllegalTransition",
    "InvalidOption",
    "MalformedResponse",
    "PolicyConflict",
    "Prefix",
    "ProtocolViolation",
    "ReasonStateError",
    "Reply",
    "Report",
    "Session",
    "SessionSnapshot",
    "SnapshotError",
    "Stream",
    "StreamEvent",
    "StreamInterrupted",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolResultError",
    "TurnState",
    "VendorError",
]
