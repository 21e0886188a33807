"""reasonstate: reasoning-state continuity and prefix-cache discipline for multi-turn agents.

import reasonstate as rs
session = rs.Session(client, model="...", system="...", tools=[rs.Tool(...)], policy=Drop())
reply = session.send("user text")
while reply.tool_calls:
    reply = session.send_tool_results({c.id: run(c) for c in reply.tool_calls})

Logging: the ``reasonstate`` logger (stdlib ``logging``) has a ``NullHandler``, so nothing is printed unless
the application configures logging; see ``docs/export.md`` for what is logged at which level.

``reasonstate.__version__`` is the installed distribution's version (``importlib.metadata``), or
``"0+unknown"`` for a source tree that was never installed.
"""

import logging as _logging

from reasonstate._version import __version__
from reasonstate.cache.pricing import Cost, KVConfig, Metrics, Price, Pricing
from reasonstate.errors import (
    ContinuationMismatch,
    IllegalTransition,
    InvalidInput,
    InvalidOption,
    MalformedResponse,
    MissingCredentials,
    PolicyConflict,
    ProtocolViolation,
    ReasonStateError,
    SessionConflict,
    SnapshotError,
    StoreError,
    StreamInterrupted,
    ToolResultError,
    VendorError,
)
from reasonstate.guard import Divergence, Guard, GuardRecord, GuardWarning, instrument
from reasonstate.prefix import Prefix, Tool
from reasonstate.session import (
    AsyncSession,
    AsyncStream,
    Reply,
    Report,
    Session,
    StormBreaker,
    Stream,
    StreamEvent,
    ToolCall,
    ToolResult,
    TurnState,
)
from reasonstate.snapshot import SessionSnapshot
from reasonstate.state import Usage

_logging.getLogger("reasonstate").addHandler(_logging.NullHandler())

__all__ = [
    "AsyncSession",
    "AsyncStream",
    "ContinuationMismatch",
    "Cost",
    "Divergence",
    "Guard",
    "GuardRecord",
    "GuardWarning",
    "IllegalTransition",
    "InvalidInput",
    "InvalidOption",
    "KVConfig",
    "MalformedResponse",
    "Metrics",
    "MissingCredentials",
    "PolicyConflict",
    "Prefix",
    "Price",
    "Pricing",
    "ProtocolViolation",
    "ReasonStateError",
    "Reply",
    "Report",
    "Session",
    "SessionConflict",
    "SessionSnapshot",
    "SnapshotError",
    "StoreError",
    "StormBreaker",
    "Stream",
    "StreamEvent",
    "StreamInterrupted",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolResultError",
    "TurnState",
    "Usage",
    "VendorError",
    "__version__",
    "instrument",
]
