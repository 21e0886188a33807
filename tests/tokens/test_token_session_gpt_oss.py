"""The token-in, token-out session on GPT-OSS: the Harmony bridge through ``TokenAdapter`` and the emulator.

GPT-OSS ends a final answer with the stop token ``<|return|>``, which its template (L309-L314) and Harmony's
format never put in a prompt: a past final answer ends in ``<|end|>``. So the prompt after a final answer is
``p + c[:-1] + [<|end|>] + ...`` and the equation every request keeps is ``B[:len(p) + len(c) - 1] == (p +
c)[:-1]`` (all that vLLM caches of a finished request: the last sampled token never has KV). Tool results
are named after the sampled call even when the session's results carry no name.

The tokenizer is ``toy_vocab.py`` (bytes plus Harmony's special tokens); the emulator encodes the hand-written
completions with it as its codec; prompts are checked against the template rendered directly (``direct.py``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.adapters.tokens import TokenAdapter
from reasonstate.state import EventKind
from reasonstate.testing.completions import VLLMCompletionsEmulator
from reasonstate.tokens import ChatTemplateRenderer, template_path

from . import direct
from .toy_vocab import ToyHarmonyTokenizer

openai = pytest.importorskip("openai")

TOY = ToyHarmonyTokenizer()
RETURN, CALL, END = (TOY.special(t) for t in ("<|return|>", "<|call|>", "<|end|>"))
SYSTEM = "You are a travel desk. Use the tools for facts."
WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
WEATHER_DECLARED = {  # as the adapter declares it to the template (key-sorted schema)
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"},
    },
}
A = "<|channel|>analysis<|message|>"
R0, R1, R2 = "One call for Paris.", "Paris is mild.", "Rome, from memory."
# GPT-OSS's output after "<|start|>assistant" (template L289-L314), written by hand
CHAIN = [
    f"{A}{R0}<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
    '{"city": "Paris"}<|call|>',
    f"{A}{R1}<|end|><|start|>assistant<|channel|>final<|message|>Paris: 12C, mild.<|return|>",
    f"{A}{R2}<|end|><|start|>assistant<|channel|>final<|message|>Rome is warmer.<|return|>",
]


@pytest.fixture
def emulator() -> Iterator[VLLMCompletionsEmulator]:
    with VLLMCompletionsEmulator(CHAIN, codec=TOY, eos_token_ids=[RETURN, CALL]) as emu:
        yield emu


def _undated(text: str) -> str:
    return re.sub(r"Current date: \d{4}-\d{2}-\d{2}", "Current date: D", text)


def conversation(request: int, call_id: str) -> list[dict[str, Any]]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
    steps: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Weather in Paris?"}],
        [
            {"role": "assistant", "content": "", "thinking": R0, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": "Paris: 12C"},  # the template reads no name
        ],
        [
            {"role": "assistant", "content": "Paris: 12C, mild.", "thinking": R1},
            {"role": "user", "content": "And Rome?"},
        ],
    ]
    return [m for step in steps[: request + 1] for m in step]


def test_gpt_oss_session_bridges_every_prompt_and_writes_end_for_the_sampled_return(
    emulator: VLLMCompletionsEmulator,
) -> None:
    renderer = ChatTemplateRenderer.from_files(template_path("gpt-oss-20b"), TOY)
    client = openai.OpenAI(base_url=emulator.base_url + "/v1", api_key="test-key", max_retries=0)
    s = rs.Session(
        client,
        model="gpt-oss-20b",
        adapter=TokenAdapter(renderer),
        system=SYSTEM,
        tools=[WEATHER],
        max_tokens=512,
    )
    reply = s.send("Weather in Paris?")
    (paris,) = reply.tool_calls
    s.send_tool_results({paris.id: "Paris: 12C"})
    s.send("And Rome?")
    records, served = s.execution, emulator.served
    assert len(records) == len(served) == 3
    # no full render after the first request: the adapter bridged every prompt
    assert not list(s.trace.of_kind(EventKind.CACHE_BREAK))
    for (prev, rec), k in zip(itertools.pairwise(records), (0, 1), strict=True):
        p, c, b = list(prev.prompt_ids or ()), list(prev.completion_ids or ()), list(rec.prompt_ids or ())
        n = len(p) + len(c)
        assert b[: n - 1] == (p + c)[:-1]
        # a sampled <|call|> is kept, a sampled <|return|> is written <|end|>
        assert (c[-1], b[n - 1]) == ((CALL, CALL) if k == 0 else (RETURN, END))
    assert RETURN not in (records[2].prompt_ids or ())
    # the cache: vLLM's full blocks of (p + c)[:-1], predicted exactly
    for rec, srv in zip(records, served, strict=True):
        assert (rec.prompt_ids, rec.completion_ids) == (srv.prompt_token_ids, srv.token_ids)
        assert rec.predicted_cache_read == rec.usage.cache_read == srv.cached_tokens
    for prev, srv in zip(records, served[1:], strict=False):
        kept = len(prev.prompt_ids or ()) + len(prev.completion_ids or ()) - 1
        assert srv.cached_tokens == kept // 16 * 16
    assert s.report().predicted_matches == 3
    # each prompt is the direct render, but for the analysis the template drops once a final answer follows
    prompts = [_undated(TOY.decode(rec.prompt_ids or ())) for rec in records]
    expected = [
        _undated(direct.render("gpt-oss-20b", conversation(k, paris.id), [WEATHER_DECLARED]))
        for k in range(3)
    ]
    assert prompts[:2] == expected[:2]
    dropped = prompts[2]
    for r in (R0, R1):
        dropped = dropped.replace(f"{A}{r}<|end|><|start|>assistant", "", 1)
    assert dropped == expected[2]
