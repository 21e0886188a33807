"""reasonstate: reasoning-state continuity and prefix-cache discipline for multi-turn agents."""

from reasonstate.errors import (
    ContinuationMismatch,
    IllegalTransition,
    MalformedResponse,
    PolicyConflict,
    ProtocolViolation,
    ReasonStateError,
    StreamInterrupted,
    ToolResultError,
    VendorError,
)

__all__ = [
    "ContinuationMismatch",
    "IllegalTransition",
    "MalformedResponse",
    "PolicyConflict",
    "ProtocolViolation",
    "ReasonStateError",
    "StreamInterrupted",
    "ToolResultError",
    "VendorError",
]
