"""Properties of whole sessions on the Anthropic emulator, for all scripted conversations (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reasonstate.policies import CacheAware, Drop, Keep, KeepLast
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from tests.conftest import body, make_session, strip_cache_control

POLICIES = [Keep(), Drop(), KeepLast(1), KeepLast(2), CacheAware(ratio=2.0, min_reasoning_tokens=16)]

turn_shapes = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2),  # tool steps before the answer
        st.integers(min_value=1, max_value=3),  # parallel calls per tool step
        st.integers(min_value=1, max_value=40),  # reasoning repetitions
        st.booleans(),  # redacted block
    ),
    min_size=1,
    max_size=5,
)


def _actions(shapes: list[tuple[int, int, int, bool]]) -> list[ModelAction]:
    actions = []
    for t, (steps, calls, size, redacted) in enumerate(shapes):
        for s in range(steps):
            actions.append(
                ModelAction(
                    reasoning=f"turn {t} step {s} plan. " * size,
                    redacted=redacted,
                    tool_calls=tuple(
                        ToolCallSpec("get_weather", {"city": f"c{t}{s}{k}"}) for k in range(calls)
                    ),
                )
            )
        actions.append(ModelAction(reasoning=f"turn {t} wrap-up. " * size, text=f"answer {t}"))
    return actions


@settings(max_examples=30)  # slow examples (whole sessions or rollouts): capped below the profile's 100
@given(shapes=turn_shapes, policy=st.sampled_from(POLICIES), stream=st.booleans())
def test_every_session_is_accepted_predicted_exactly_and_replays_chains_verbatim(
    shapes: list[tuple[int, int, int, bool]], policy: Any, stream: bool
) -> None:
    with AnthropicEmulator(_actions(shapes)) as emulator:
        session = make_session(emulator, policy=policy, stream=stream)
        for t in range(len(shapes)):
            reply = session.send(f"question {t}")
            while reply.tool_calls:
                before = len(emulator.requests)
                step = session.history.turns[-1].steps[-1]
                reply = session.send_tool_results({c.id: {"ok": c.arguments} for c in reply.tool_calls})
                # inside the chain: every payload of the step goes back byte for byte, in order
                sent = emulator.requests[before].body
                positions = [sent.index(c.payload) for c in step.continuation]
                assert positions == sorted(positions)
        records = session.execution
        # the strict emulator accepted every request, and every cache read was predicted exactly
        assert session.report().protocol_errors == 0
        assert [r.predicted_cache_read for r in records] == [r.usage.cache_read for r in records]
        if isinstance(policy, Keep):  # Keep is append-only over the whole session
            for i in range(1, len(emulator.requests)):
                prev = strip_cache_control(body(emulator, i - 1)["messages"])
                assert strip_cache_control(body(emulator, i)["messages"])[: len(prev)] == prev
