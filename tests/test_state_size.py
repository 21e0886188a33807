"""What a session holds grows by a small constant per turn (issue 21 item 1: state in memory <= 3x the
content). These tests look at the session's own objects, against independent figures (the bodies the
emulator received), for the costs that were once paid twice or once per turn.
"""

from __future__ import annotations

import gc
import types

from reasonstate.policies import Keep
from reasonstate.testing.anthropic import AnthropicEmulator
from tests.conftest import answer, make_session

TURNS = 6
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _reachable(root: object) -> list[object]:
    seen: set[int] = set()
    out, stack = [], [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        out.append(obj)
        stack.extend(gc.get_referents(obj))
    return out


def test_the_session_holds_its_newest_request_body_once() -> None:
    """The previous request's bytes (for the cause of the next cache break) are held once: the policy
    decision's held effect kept the layers it was decided on, with the body of the request before, so a
    session held two whole requests (issue 21: "the trace's whole-body copies")."""
    with AnthropicEmulator([answer(i) for i in range(TURNS)], secret=b"s") as emu:
        session = make_session(emu, policy=Keep())
        for i in range(TURNS):
            session.send(f"Question {i}?")
        bodies = [r.body for r in emu.requests]
    smallest = min(len(b) for b in bodies)
    held = [o for o in _reachable(session._layers) if type(o) is bytes and len(o) >= smallest]
    assert held == [bodies[-1]]


def test_closed_turns_with_equal_views_share_one_view() -> None:
    with AnthropicEmulator([answer(i) for i in range(TURNS)], secret=b"s") as emu:
        session = make_session(emu, policy=Keep())
        for i in range(TURNS):
            session.send(f"Question {i}?")
    views = {id(t.view) for t in session.history.turns}
    assert len(views) == 1
    assert session.history.turns[0].view == session.history.turns[-1].view
