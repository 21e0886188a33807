"""A streamed chat answer keeps its ``reasoning_details`` (issue 23, item 6): replayed real traffic (a Kimi
K2.5 stream and an OpenRouter stream recorded by other projects) streams the list as per-index pieces, and
the assembler kept "the last non-null value" of the field, so 17 reasoning pieces became one (``'. '``) and
a 512-character signature went back without the thinking text it signs. The oracle here is the unstreamed
message written by hand; the stream is cut from it in every way hypothesis finds."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from reasonstate.adapters.openai_chat import ChatAssembler

SIGNATURE = "EqQBCkgIARABGAIiQL" + "x" * 494  # 512 characters, as in the recorded stream

MESSAGE: dict[str, Any] = {
    "role": "assistant",
    "content": "Paris is mild today.",
    "reasoning": "The user asks about Paris. I will check the weather first.",
    "reasoning_details": [
        {
            "type": "reasoning.text",
            "text": "The user asks about Paris. I will check the weather first.",
            "signature": SIGNATURE,
            "format": "anthropic-claude-v1",
            "index": 0,
        },
        {
            "type": "reasoning.encrypted",
            "data": "gAAAAB" + "q" * 90,
            "format": "openai-responses-v1",
            "index": 1,
        },
    ],
}


def _pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a] or [text]


def _stream(cuts: list[int]) -> list[str]:
    """SSE lines of ``MESSAGE`` streamed as a server does: text and details in pieces, the signature and
    the format whole on the last piece of their element."""
    chunks: list[dict[str, Any]] = [{"role": "assistant"}]
    for i, piece in enumerate(_pieces(MESSAGE["reasoning"], cuts)):
        chunks.append(
            {"reasoning": piece, "reasoning_details": [{"type": "reasoning.text", "text": piece, "index": 0}]}
        )
        if i == 0:
            chunks[-1]["reasoning_details"][0]["format"] = "anthropic-claude-v1"
    chunks.append(
        {"reasoning_details": [{"type": "reasoning.text", "text": "", "signature": SIGNATURE, "index": 0}]}
    )
    data = MESSAGE["reasoning_details"][1]["data"]
    for piece in _pieces(data, [c * 7 for c in cuts]):
        chunks.append({"reasoning_details": [{"type": "reasoning.encrypted", "data": piece, "index": 1}]})
    chunks[-1]["reasoning_details"][0]["format"] = "openai-responses-v1"
    for piece in _pieces(MESSAGE["content"], cuts[::-1]):
        chunks.append({"content": piece})
    lines = []
    for k, delta in enumerate(chunks):
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        lines += [
            "data: "
            + json.dumps(
                {
                    "id": "gen-1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "m",
                    "choices": [choice],
                }
            ),
            "",
        ]
        del k
    end = {"id": "gen-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    end["choices"] = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    lines += ["data: " + json.dumps(end), "", "data: [DONE]", ""]
    return lines


def _details(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(sorted(d.items())) for d in message["reasoning_details"]]


def test_reasoning_details_streamed_in_pieces_assemble_to_the_unstreamed_list() -> None:
    message = ChatAssembler.assemble(_stream([5, 17, 30, 44]))["choices"][0]["message"]
    assert _details(message) == _details(MESSAGE)
    assert message["reasoning"] == MESSAGE["reasoning"]
    assert message["content"] == MESSAGE["content"]


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=20))
def test_every_chunking_commits_the_same_reasoning_details(cuts: list[int]) -> None:
    message = ChatAssembler.assemble(_stream(cuts))["choices"][0]["message"]
    assert _details(message) == _details(MESSAGE)
    assert message["reasoning_details"][0]["signature"] == SIGNATURE


def test_a_list_without_indexed_elements_is_a_value_the_last_one_wins() -> None:
    lines = []
    for value in (["a"], ["a", "b"]):
        chunk = {"id": "x", "choices": [{"index": 0, "delta": {"annotations": value}, "finish_reason": None}]}
        lines += ["data: " + json.dumps(chunk), ""]
    done = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    lines += ["data: " + json.dumps(done), "", "data: [DONE]", ""]
    assert ChatAssembler.assemble(lines)["choices"][0]["message"]["annotations"] == ["a", "b"]


def test_a_piece_whose_type_is_no_name_is_kept_as_it_came_and_decode_refuses_it() -> None:
    """Found by the fuzz: an element whose ``type`` is a list has no key to merge by (it raised TypeError);
    it is kept as it came, and decode refuses the answer (a reasoning_details element must be typed)."""
    import pytest

    import reasonstate as rs
    from reasonstate.adapters.base import VendorRequest
    from reasonstate.adapters.openai_chat import OpenAIChatAdapter

    lines = []
    for piece in ({"type": [], "text": "a", "index": 0}, {"type": "reasoning.text", "text": "b", "index": 0}):
        delta = {"reasoning": piece["text"], "reasoning_details": [piece]}
        chunk = {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        lines += ["data: " + json.dumps(chunk), ""]
    done = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    lines += ["data: " + json.dumps(done), "", "data: [DONE]", ""]
    answer = ChatAssembler.assemble(lines)
    details = answer["choices"][0]["message"]["reasoning_details"]
    assert details == [
        {"type": "reasoning.text", "text": "b", "index": 0},
        {"type": [], "text": "a", "index": 0},
    ]
    with pytest.raises(rs.MalformedResponse, match="reasoning_details"):
        OpenAIChatAdapter("openrouter").decode(answer, VendorRequest(kwargs={}, units=(), model="m"))
