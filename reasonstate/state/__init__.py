"""The four layers of session state: trace, canonical history, protocol continuation, physical execution.

Every value here is immutable (frozen, slotted attrs); a change is a new value. ``state`` imports nothing
else of reasonstate but the errors.
"""

from reasonstate.state.continuation import FIRST_PARTY, Continuation, bound, digest_of
from reasonstate.state.execution import (
    UNIT_WINDOW,
    ExecutionRecord,
    Records,
    UnitChain,
    Usage,
    as_records,
    ids_digest,
    ids_seal,
)
from reasonstate.state.frozen import FrozenDict, FrozenList, freeze, thaw
from reasonstate.state.history import (
    FOLD_INTRO,
    Folded,
    History,
    OpaquePart,
    Part,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    ToolResult,
    ToolResultPart,
    Turn,
    TurnView,
    parse_arguments,
)
from reasonstate.state.tokenids import TokenIds
from reasonstate.state.trace import EventKind, Trace, TraceEvent

__all__ = [
    "FIRST_PARTY",
    "FOLD_INTRO",
    "UNIT_WINDOW",
    "Continuation",
    "EventKind",
    "ExecutionRecord",
    "Folded",
    "FrozenDict",
    "FrozenList",
    "History",
    "OpaquePart",
    "Part",
    "ReasoningPart",
    "Records",
    "Step",
    "TextPart",
    "TokenIds",
    "ToolCallPart",
    "ToolResult",
    "ToolResultPart",
    "Trace",
    "TraceEvent",
    "Turn",
    "TurnView",
    "UnitChain",
    "Usage",
    "as_records",
    "bound",
    "digest_of",
    "freeze",
    "ids_digest",
    "ids_seal",
    "parse_arguments",
    "thaw",
]
