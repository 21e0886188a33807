"""How to test your own agent offline with reasonstate's pytest plugin (installed with the package).

The plugin gives each test a running strict emulator and a real vendor client pointed at it:
``anthropic_emulator`` / ``anthropic_client``, ``openai_responses_emulator`` / ``responses_client``,
``deepseek_emulator`` / ``deepseek_client``, ... Script what the model does, run your agent, and assert on
what went over the wire. Run: ``pytest examples/``.
"""

from __future__ import annotations

import json
from typing import Any

import reasonstate as rs
from reasonstate.policies import Drop
from reasonstate.testing import ModelAction, ToolCallSpec


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": {"Paris": 18, "Rome": 22}[city]}


def my_agent(client: Any, question: str) -> rs.Session:
    """The code under test: any agent that runs on a reasonstate Session."""
    tool = rs.Tool(name="get_weather", parameters={"type": "object"}, handler=weather, parallel_safe=True)
    session = rs.Session(
        client,
        model="claude-sonnet-4-6",
        tools=[tool],
        policy=Drop(),
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    session.run(question)
    return session


def test_my_agent_compares_two_cities(anthropic_emulator: Any, anthropic_client: Any) -> None:
    anthropic_emulator.script.extend(
        [
            ModelAction(
                reasoning="Both cities, in parallel.",
                tool_calls=(
                    ToolCallSpec("get_weather", {"city": "Paris"}),
                    ToolCallSpec("get_weather", {"city": "Rome"}),
                ),
            ),
            ModelAction(reasoning="Rome is warmer.", text="Rome (22C) is warmer than Paris (18C)."),
        ]
    )
    session = my_agent(anthropic_client, "Paris or Rome: which is warmer?")
    assert session.history.turns[0].final_text == "Rome (22C) is warmer than Paris (18C)."
    sent = json.loads(anthropic_emulator.requests[1].body)
    results = sent["messages"][2]["content"]
    assert [r["content"] for r in results] == ['{"city":"Paris","temp_c":18}', '{"city":"Rome","temp_c":22}']
    assert session.report().protocol_errors == 0
