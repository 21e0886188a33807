"""A tool exchange another vendor produced, sent to DeepSeek thinking mode (docs/protocols.md §3.3).

DeepSeek requires the original ``reasoning_content`` back on every assistant message with ``tool_calls``; a
step another vendor produced has none to give, and inventing one would disguise foreign (or no) reasoning as
DeepSeek's own. So the exchange goes as delimited plain text: the calls in the assistant message's
``content`` after its text, the results in one user message. The strict emulator (which refuses a
``tool_calls`` message without ``reasoning_content``) accepts the request. The foreign closed turn is
``tests/test_canonical.py``'s, put into a real session through a snapshot; real openai SDK, real HTTP.
"""

from __future__ import annotations

import json

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from tests.test_canonical import (
    CALL_ID,
    FINAL,
    FOREIGN_DIGESTS,
    Q0,
    Q1,
    RAW,
    RESULT,
    SAID,
    SIGNATURE,
    THOUGHT,
    THOUGHT_2,
    _weather,
    _with_foreign_history,
)
from tests.test_integrity import SYSTEM


def test_a_foreign_tool_exchange_goes_to_deepseek_as_delimited_text_and_is_accepted() -> None:
    answer = ModelAction.answer("Pack a light jacket.", reasoning="Mild weather: a light jacket.")
    with OpenAIChatEmulator([answer], dialect="deepseek") as emu, emu.client(max_retries=0) as client:
        fresh = rs.Session(
            client, model="deepseek-v4-pro", dialect="deepseek", system=SYSTEM, tools=[_weather()]
        )
        session = _with_foreign_history(fresh, client)
        assert session.send(Q1).text == "Pack a light jacket."  # the strict emulator answered 200
        (request,) = emu.requests
    messages = json.loads(request.body)["messages"]
    assert messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": Q0},
        # the call with its raw arguments exactly as the other vendor produced them
        {
            "role": "assistant",
            "content": f"{SAID}\n\n[called get_weather (id {CALL_ID}) with arguments {RAW}]",
        },
        {"role": "user", "content": f"[result of call {CALL_ID}]: {RESULT}"},
        {"role": "assistant", "content": FINAL},
        {"role": "user", "content": Q1},
    ]
    assert not any("tool_calls" in m or "reasoning_content" in m or m["role"] == "tool" for m in messages)
    for secret in (THOUGHT, THOUGHT_2, SIGNATURE, "FOREIGN-"):
        assert secret.encode() not in request.body
    (withheld,) = session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)
    assert withheld.data["digests"] == FOREIGN_DIGESTS
