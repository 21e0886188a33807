"""Stream assembly (reasonstate.adapters.base), against two independent oracles:

1. hand-written SSE transcripts whose expected result is written out by hand — the verified examples
   that docs/protocols.md §1.7 (Responses), §3.6 (DeepSeek chat) and §4.6 (Anthropic) describe, copied
   verbatim from the vendor reference those sections were written from;
2. the strict emulators over real HTTP: the same scripted answer is asked for once non-streamed and once
   streamed (raw ``httpx2``, the emulator's auth header), the streamed body is fed to the assembler, and
   the result must equal the non-streamed JSON, key order included.

The round trips use *twin* emulators (same script, same secret, fresh counters), one per request, so
both answers get the same ids (``msg_emu_001``, ``toolu_emu_001``, ``resp_emu_001``, ``call_001``...);
on one emulator the second answer would be numbered after the first. What still legitimately differs
per request is said at each comparison: signatures / redacted data / ``encrypted_content`` carry a fresh
random nonce (each is verified against the emulator instead of compared), and ``created``/``created_at``
read the clock.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import reasonstate.adapters.base as streams_module
from reasonstate.adapters.anthropic import AnthropicAssembler
from reasonstate.adapters.base import SSEEvent, SSEParser, StreamAssembler
from reasonstate.adapters.openai_chat import ChatAssembler
from reasonstate.adapters.openai_responses import ResponsesAssembler
from reasonstate.errors import MalformedResponse, StreamInterrupted, VendorError
from reasonstate.testing import Fault, ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

# -- helpers -------------------------------------------------------------------------------------------------


def same_json(got: Any, expected: Any) -> None:
    """Equal values AND equal key order (the serialized bytes are what a session captures)."""
    assert got == expected
    assert json.dumps(got, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)


def wire(lines: list[str]) -> bytes:
    """The body bytes of a transcript (every line LF-terminated, the last blank line included)."""
    return "".join(line + "\n" for line in lines).encode()


# -- SSE parsing (the WHATWG event-stream rules) ----------------------------------------------------------


def parse(lines: list[str]) -> list[SSEEvent]:
    parser = SSEParser()
    events = [event for line in lines for event in parser.feed(line)]
    assert parser.finish() is None
    return events


def test_data_with_and_without_the_leading_space() -> None:
    assert parse(["data: a", "", "data:b", "", "data:  c", ""]) == [
        SSEEvent(None, "a"),
        SSEEvent(None, "b"),
        SSEEvent(None, " c"),  # only ONE leading space is removed
    ]


def test_multi_line_data_is_joined_with_newlines_and_a_blank_line_dispatches() -> None:
    parser = SSEParser()
    assert parser.feed("event: update") == []
    assert parser.feed("data: {") == []
    assert parser.feed('data: "a": 1') == []
    assert parser.feed("data: }") == []
    assert parser.feed("") == [SSEEvent("update", '{\n"a": 1\n}')]
    assert parser.finish() is None


def test_comments_ids_retry_and_unknown_fields_are_ignored() -> None:
    assert parse([": keep-alive", "id: 7", "retry: 100", "foo: bar", "data: x", ":another", ""]) == [
        SSEEvent(None, "x")
    ]


def test_an_event_without_data_is_not_dispatched_and_the_name_resets() -> None:
    assert parse(["event: ping", "", "data: y", ""]) == [SSEEvent(None, "y")]
    assert parse(["event: a", "data: 1", "", "data: 2", ""]) == [SSEEvent("a", "1"), SSEEvent(None, "2")]


def test_a_field_without_colon_has_an_empty_value() -> None:
    assert parse(["data", "data", ""]) == [SSEEvent(None, "\n")]
    assert parse(["event", "data: z", ""]) == [SSEEvent(None, "z")]


def test_line_terminators_inside_a_fed_string_split_it() -> None:
    assert parse(["data: a\r\n", "\r\n", "event: e\rdata: b\n\n"]) == [
        SSEEvent(None, "a"),
        SSEEvent("e", "b"),
    ]


def test_a_leading_byte_order_mark_is_dropped() -> None:
    assert parse(["\ufeffdata: x", ""]) == [SSEEvent(None, "x")]


def test_finish_discards_an_event_whose_blank_line_never_came() -> None:
    parser = SSEParser()
    assert parser.feed("event: e") == [] and parser.feed("data: cut") == []
    assert parser.finish() == "cut"  # what was discarded, for a diagnostic
    assert parser.feed("data: next") == [] and parser.feed("") == [SSEEvent(None, "next")]
    assert parser.finish() is None
    byte_parser = SSEParser()
    assert byte_parser.feed_bytes(b'data: a\n\ndata: {"t": "caf\xc3') == [SSEEvent(None, "a")]
    assert byte_parser.finish() == '{"t": "caf\ufffd'  # a cut character does not raise


def test_unicode_line_separators_stay_inside_the_data() -> None:
    # str.splitlines() (and so httpx2's iter_lines) splits here; the SSE standard does not
    payload = 'data: {"text":"a\u2028b\x85c\u2029d"}'
    assert len(payload.splitlines()) == 4
    assert parse([payload, ""]) == [SSEEvent(None, '{"text":"a\u2028b\x85c\u2029d"}')]


BODY = (
    '\ufeffevent: one\r\ndata: {"t":"caf\u00e9 \u2028 \U0001f600"}\r\n\r\n: c\rdata:x\rdata: y\r\r'
    "data: tail-without-blank-line"
).encode()


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(BODY)])
def test_feed_bytes_splits_at_cr_lf_and_crlf_only_whatever_the_chunking(size: int) -> None:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for i in range(0, len(BODY), size):
        events.extend(parser.feed_bytes(BODY[i : i + size]))
    assert events == [SSEEvent("one", '{"t":"caf\u00e9 \u2028 \U0001f600"}'), SSEEvent(None, "x\ny")]
    assert parser.finish() == "tail-without-blank-line"  # unterminated: discarded


def test_a_crlf_split_across_two_chunks_is_one_terminator() -> None:
    parser = SSEParser()
    assert parser.feed_bytes(b"data: a\r") == []
    assert parser.feed_bytes(b"\n") == []  # the LF completes the CRLF: not a blank line
    assert parser.feed_bytes(b"\r\n") == [SSEEvent(None, "a")]


def test_bytes_that_are_not_utf8_are_malformed() -> None:
    with pytest.raises(MalformedResponse, match="not UTF-8"):
        SSEParser().feed_bytes(b"data: \xff\n")


def test_the_module_is_pure() -> None:
    """Sans-I/O: the module (the adapter contract, SSE parser and assembler base included) imports only the
    standard library's pure parts, attrs and reasonstate's own layers below the adapters: no SDK, no socket,
    no clock, no thread (``threading`` for its ``Lock`` alone: a memoized run's shared list is checked and
    extended as one step, issue 21; ``reasonstate.state.units``, the packed unit digests, and
    ``reasonstate.state.frozen``, the memos' helpers, are state layers).
    """
    tree = ast.parse(Path(streams_module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.add(node.module)
    assert imported <= {
        "__future__",
        "array",
        "itertools",
        "json",
        "re",
        "collections.abc",
        "typing",
        "attrs",
        "functools",
        "operator",
        "weakref",
        "threading",
        "reasonstate.adapters.replay",
        "reasonstate.cache.divergence",
        "reasonstate.cache.rules",
        "reasonstate.errors",
        "reasonstate.prefix",
        "reasonstate.state",
        "reasonstate.state.continuation",
        "reasonstate.state.frozen",
        "reasonstate.state.units",
    }
    used = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "threading"
    }
    assert used <= {"Lock"}, used


# -- Anthropic: the §4.6 example, streamed as §4.5 describes ----------------------------------------------

# the verified example of docs/protocols.md §4.6, verbatim
ANTHROPIC_46 = json.loads(
    """
{
  "id": "msg_emu_001",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5",
  "content": [
    {
      "type": "thinking",
      "thinking": "I should call get_weather.",
      "signature": "EqQBCkgIARABGAIiQOpaqueSig=="
    },
    {
      "type": "redacted_thinking",
      "data": "EmwKAhgBEgy3opaqueRedacted=="
    },
    {
      "type": "text",
      "text": "Let me check."
    },
    {
      "type": "tool_use",
      "id": "toolu_emu_001",
      "name": "get_weather",
      "input": {
        "city": "Paris"
      }
    }
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {
    "input_tokens": 50,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 2048,
    "cache_creation": {
      "ephemeral_5m_input_tokens": 0,
      "ephemeral_1h_input_tokens": 0
    },
    "output_tokens": 180,
    "service_tier": "standard"
  }
}
"""
)

# The same message as an SSE stream, in the shape of Anthropic's documented streams: ``content`` before
# ``model`` in message_start, a message_start usage with a placeholder output_tokens, a thinking block that
# starts without a signature key, an empty first input_json_delta, a ping, a comment, ``data:`` without its
# space once, and a JSON event split over two ``data`` lines.
_DELTA = '{"type":"content_block_delta","index":'
ANTHROPIC_46_STREAM = [
    "event: message_start",
    'data: {"type":"message_start","message":{"id":"msg_emu_001","type":"message","role":"assistant",'
    '"content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{'
    '"input_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"cache_creation":'
    '{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,'
    '"service_tier":"standard"}}}',
    "",
    "event: ping",
    'data: {"type": "ping"}',
    "",
    "event: content_block_start",
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}',
    "",
    ": keep-alive",
    "",
    "event: content_block_delta",
    "data: " + _DELTA + '0,"delta":{"type":"thinking_delta","thinking":"I should call "}}',
    "",
    "event: content_block_delta",
    "data:" + _DELTA + '0,"delta":{"type":"thinking_delta","thinking":"get_weather."}}',
    "",
    "event: content_block_delta",
    "data: " + _DELTA + '0,"delta":{"type":"signature_delta","signature":"EqQBCkgIARABGAIiQOpaqueSig=="}}',
    "",
    "event: content_block_stop",
    'data: {"type":"content_block_stop","index":0}',
    "",
    "event: content_block_start",
    'data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking",'
    '"data":"EmwKAhgBEgy3opaqueRedacted=="}}',
    "",
    "event: content_block_stop",
    'data: {"type":"content_block_stop","index":1}',
    "",
    "event: content_block_start",
    'data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}',
    "",
    "event: content_block_delta",
    "data: " + _DELTA + "2,",
    'data:  "delta":{"type":"text_delta","text":"Let me "}}',
    "",
    "event: content_block_delta",
    "data: " + _DELTA + '2,"delta":{"type":"text_delta","text":"check."}}',
    "",
    "event: content_block_stop",
    'data: {"type":"content_block_stop","index":2}',
    "",
    "event: content_block_start",
    'data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use",'
    '"id":"toolu_emu_001","name":"get_weather","input":{}}}',
    "",
    "event: content_block_delta",
    "data: " + _DELTA + '3,"delta":{"type":"input_json_delta","partial_json":""}}',
    "",
    "event: content_block_delta",
    "data: " + _DELTA + '3,"delta":{"type":"input_json_delta","partial_json":"{\\"city\\": \\"Par"}}',
    "",
    "event: content_block_delta",
    "data: " + _DELTA + '3,"delta":{"type":"input_json_delta","partial_json":"is\\"}"}}',
    "",
    "event: content_block_stop",
    'data: {"type":"content_block_stop","index":3}',
    "",
    "event: message_delta",
    'data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},'
    '"usage":{"output_tokens":180}}',
    "",
    "event: message_stop",
    'data: {"type":"message_stop"}',
    "",
]


def test_anthropic_stream_assembles_the_non_streamed_example_in_wire_order() -> None:
    """Pain point: OpenRouterTeam/ai-sdk-provider#423 (signature in its own stream delta not accumulated)."""
    same_json(AnthropicAssembler.assemble(ANTHROPIC_46_STREAM), ANTHROPIC_46)


def test_anthropic_feed_bytes_gives_the_same_message() -> None:
    assembler = AnthropicAssembler()
    for byte in range(len(raw := wire(ANTHROPIC_46_STREAM))):
        assembler.feed_bytes(raw[byte : byte + 1])
    same_json(assembler.finish(), ANTHROPIC_46)


def anthropic_stream(*events: dict[str, Any], stop: bool = True) -> list[str]:
    """A Messages stream: message_start with the given skeleton usage, the events, message_stop."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "cache_read_input_tokens": 3, "output_tokens": 1},
        },
    }
    tail = [{"type": "message_stop"}] if stop else []
    out: list[str] = []
    for event in (start, *events, *tail):
        out += [f"event: {event['type']}", "data: " + json.dumps(event), ""]
    return out


def block(index: int, content_block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content_block}


def delta(index: int, **value: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": value}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def tool_stream(*pieces: str) -> list[str]:
    return anthropic_stream(
        block(0, {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}),
        *(delta(0, type="input_json_delta", partial_json=p) for p in pieces),
        stop(0),
    )


def test_anthropic_empty_tool_input_concatenation_is_an_empty_object() -> None:
    message = AnthropicAssembler.assemble(tool_stream("", ""))
    same_json(message["content"], [{"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}])


def test_anthropic_input_json_deltas_replace_the_start_input() -> None:
    lines = anthropic_stream(
        block(0, {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {"placeholder": True}}),
        delta(0, type="input_json_delta", partial_json=""),
        stop(0),
    )
    assert AnthropicAssembler.assemble(lines)["content"][0]["input"] == {}


def test_anthropic_tool_input_keeps_the_streamed_key_order() -> None:
    message = AnthropicAssembler.assemble(tool_stream('{"z": 1, "a"', ': {"y": [1, 2], "b": null}}'))
    assert json.dumps(message["content"][0]["input"]) == '{"z": 1, "a": {"y": [1, 2], "b": null}}'


def test_anthropic_a_block_without_input_json_deltas_keeps_its_start_input() -> None:
    message = AnthropicAssembler.assemble(tool_stream())
    assert message["content"][0]["input"] == {}


@pytest.mark.parametrize(
    "pieces", [('{"city": "Par',), ('{"city": "Paris"}', "}"), ("[1, 2]",), ("null",), ('"x"',), (" ",)]
)
def test_anthropic_tool_input_that_is_not_a_json_object_is_kept_as_its_text(pieces: tuple[str, ...]) -> None:
    # never a silent {}: the decoder turns the text into a call with arguments None and the reason
    message = AnthropicAssembler.assemble(tool_stream(*pieces))
    assert message["content"][0]["input"] == "".join(pieces)


def test_anthropic_citations_delta_appends_to_the_text_block() -> None:
    first = {"type": "char_location", "cited_text": "sky", "document_index": 0}
    second = {"type": "char_location", "cited_text": "blue", "document_index": 0}
    message = AnthropicAssembler.assemble(
        anthropic_stream(
            block(0, {"type": "text", "text": ""}),
            delta(0, type="citations_delta", citation=first),
            delta(0, type="text_delta", text="The sky "),
            delta(0, type="citations_delta", citation=second),
            delta(0, type="text_delta", text="is blue."),
            stop(0),
        )
    )
    same_json(
        message["content"], [{"type": "text", "text": "The sky is blue.", "citations": [first, second]}]
    )


def test_anthropic_message_delta_usage_merges_over_message_start() -> None:
    message = AnthropicAssembler.assemble(
        anthropic_stream(
            block(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="hi"),
            stop(0),
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                # cumulative counts replace; a null one is "not applicable": message_start's value stays
                "usage": {"input_tokens": None, "cache_read_input_tokens": 9, "output_tokens": 42},
            },
        )
    )
    same_json(message["usage"], {"input_tokens": 5, "cache_read_input_tokens": 9, "output_tokens": 42})
    assert message["stop_reason"] == "end_turn" and message["stop_sequence"] is None


def test_anthropic_error_event_is_a_vendor_error_with_the_body() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    lines = [*anthropic_stream(stop=False), "event: error", "data: " + json.dumps(error), ""]
    with pytest.raises(VendorError, match="overloaded_error: Overloaded") as info:
        AnthropicAssembler.assemble(lines)
    assert info.value.body == error
    assert not isinstance(info.value, (MalformedResponse, StreamInterrupted))


def test_anthropic_event_that_is_not_json_is_malformed() -> None:
    lines = [*anthropic_stream(stop=False), "event: content_block_start", "data: {not json", ""]
    with pytest.raises(MalformedResponse, match="not JSON"):
        AnthropicAssembler.assemble(lines)


@pytest.mark.parametrize(
    ("events", "match"),
    [
        ((delta(0, type="text_delta", text="x"),), "never started"),
        ((block(1, {"type": "text", "text": ""}),), "index 1, expected 0"),
        (
            (block(0, {"type": "text", "text": ""}), delta(0, type="thinking_delta", thinking="x")),
            "for a 'text'",
        ),
        ((block(0, {"type": "text", "text": ""}), delta(0, type="future_delta", x=1)), "future_delta"),
        ((block(0, {"type": "text", "text": ""}), delta(0, type="text_delta", text=1)), "string text"),
        ((block(0, {"type": "text", "text": ""}),), "still open"),
        ((block(0, {"type": "text", "text": ""}), stop(0), stop(0)), "after its content_block_stop"),
    ],
)
def test_anthropic_protocol_breaches_are_malformed(events: tuple[dict[str, Any], ...], match: str) -> None:
    with pytest.raises(MalformedResponse, match=match):
        AnthropicAssembler.assemble(anthropic_stream(*events))


def test_anthropic_events_before_message_start_are_malformed() -> None:
    lines = ["event: content_block_start", "data: " + json.dumps(block(0, {"type": "text", "text": ""})), ""]
    with pytest.raises(MalformedResponse, match="before message_start"):
        AnthropicAssembler.assemble(lines)


def test_anthropic_unknown_events_and_blocks_pass_through() -> None:
    server_block = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    lines = anthropic_stream(
        {"type": "some_future_event", "x": 1},
        block(0, server_block),
        stop(0),
    )
    same_json(AnthropicAssembler.assemble(lines)["content"], [server_block])


# -- OpenAI Responses: the §1.7 example, streamed as §1.6 describes ----------------------------------------

# the verified example of docs/protocols.md §1.7, verbatim
RESPONSES_17 = json.loads(
    """
{
  "id": "resp_emu_001",
  "object": "response",
  "created_at": 1760000000,
  "status": "completed",
  "model": "gpt-5.5",
  "output": [
    {
      "id": "rs_emu_001",
      "type": "reasoning",
      "summary": [
        {
          "type": "summary_text",
          "text": "Need the weather tool."
        }
      ],
      "encrypted_content": "gAAAAABemu-opaque-encrypted-reasoning==",
      "status": "completed"
    },
    {
      "id": "fc_emu_001",
      "type": "function_call",
      "call_id": "call_emu_001",
      "name": "get_weather",
      "arguments": "{\\"city\\":\\"Paris\\"}",
      "status": "completed"
    }
  ],
  "parallel_tool_calls": true,
  "tool_choice": "auto",
  "tools": [],
  "store": false,
  "reasoning": {
    "effort": "medium",
    "summary": "auto"
  },
  "usage": {
    "input_tokens": 1200,
    "input_tokens_details": {
      "cached_tokens": 1024,
      "cache_write_tokens": 0
    },
    "output_tokens": 150,
    "output_tokens_details": {
      "reasoning_tokens": 128
    },
    "total_tokens": 1350
  }
}
"""
)

_RS = '"id":"rs_emu_001","type":"reasoning"'
_FC = '"id":"fc_emu_001","type":"function_call","call_id":"call_emu_001","name":"get_weather"'
_WHERE = '"item_id":"rs_emu_001","output_index":0,"summary_index":0'
RESPONSES_17_STREAM = [
    "event: response.created",
    'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_emu_001",'
    '"object":"response","created_at":1760000000,"status":"in_progress","model":"gpt-5.5","output":[]}}',
    "",
    "event: response.in_progress",
    'data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_emu_001",'
    '"status":"in_progress","output":[]}}',
    "",
    "event: response.output_item.added",
    # the added copy's encrypted_content "may be incomplete" (§1.2): only the done copy counts
    'data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,'
    '"item":{' + _RS + ',"summary":[],"encrypted_content":"gAAAAABemu-op","status":"in_progress"}}',
    "",
    "event: response.reasoning_summary_part.added",
    'data: {"type":"response.reasoning_summary_part.added","sequence_number":3,' + _WHERE + ","
    '"part":{"type":"summary_text","text":""}}',
    "",
    "event: response.reasoning_summary_text.delta",
    'data: {"type":"response.reasoning_summary_text.delta","sequence_number":4,' + _WHERE + ","
    '"delta":"Need the "}',
    "",
    "event: response.reasoning_summary_text.delta",
    'data:{"type":"response.reasoning_summary_text.delta","sequence_number":5,' + _WHERE + ","
    '"delta":"weather tool."}',
    "",
    "event: response.reasoning_summary_text.done",
    'data: {"type":"response.reasoning_summary_text.done","sequence_number":6,' + _WHERE + ","
    '"text":"Need the weather tool."}',
    "",
    "event: response.reasoning_summary_part.done",
    'data: {"type":"response.reasoning_summary_part.done","sequence_number":7,' + _WHERE + ","
    '"part":{"type":"summary_text","text":"Need the weather tool."}}',
    "",
    "event: response.output_item.done",
    'data: {"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":{' + _RS + ","
    '"summary":[{"type":"summary_text","text":"Need the weather tool."}],'
    '"encrypted_content":"gAAAAABemu-opaque-encrypted-reasoning==","status":"completed"}}',
    "",
    ": keep-alive",
    "event: response.output_item.added",
    'data: {"type":"response.output_item.added","sequence_number":9,"output_index":1,'
    '"item":{' + _FC + ',"arguments":"","status":"in_progress"}}',
    "",
    "event: response.function_call_arguments.delta",
    'data: {"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_emu_001",'
    '"output_index":1,"delta":"{\\"city\\":"}',
    "",
    "event: response.function_call_arguments.delta",
    'data: {"type":"response.function_call_arguments.delta","sequence_number":11,"item_id":"fc_emu_001",'
    '"output_index":1,"delta":"\\"Paris\\"}"}',
    "",
    "event: response.function_call_arguments.done",
    'data: {"type":"response.function_call_arguments.done","sequence_number":12,"item_id":"fc_emu_001",'
    '"output_index":1,"arguments":"{\\"city\\":\\"Paris\\"}","name":"get_weather"}',
    "",
    "event: response.output_item.done",
    'data: {"type":"response.output_item.done","sequence_number":13,"output_index":1,"item":{' + _FC + ","
    '"arguments":"{\\"city\\":\\"Paris\\"}","status":"completed"}}',
    "",
    "event: response.completed",
    'data: {"type":"response.completed","sequence_number":14,"response":'
    + json.dumps(RESPONSES_17, separators=(",", ":"))
    + "}",
    "",
]


def test_responses_stream_assembles_the_non_streamed_example_in_wire_order() -> None:
    same_json(ResponsesAssembler.assemble(RESPONSES_17_STREAM), RESPONSES_17)


def test_responses_output_items_come_from_output_item_done() -> None:
    # a terminal event whose output copy is stale (or empty) still yields the done items
    stale = {**RESPONSES_17, "output": [{**RESPONSES_17["output"][0], "encrypted_content": "partial"}]}
    stale["output"].append(RESPONSES_17["output"][1])
    lines = [
        *RESPONSES_17_STREAM[:-2],
        "data: " + json.dumps({"type": "response.completed", "response": stale}),
        "",
    ]
    same_json(ResponsesAssembler.assemble(lines), RESPONSES_17)
    empty = {**RESPONSES_17, "output": []}
    lines = [
        *RESPONSES_17_STREAM[:-2],
        "data: " + json.dumps({"type": "response.completed", "response": empty}),
        "",
    ]
    same_json(ResponsesAssembler.assemble(lines), RESPONSES_17)


def test_responses_incomplete_is_a_terminal_event() -> None:
    incomplete = {
        **RESPONSES_17,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    lines = [
        *RESPONSES_17_STREAM[:-2],
        "data: " + json.dumps({"type": "response.incomplete", "response": incomplete}),
        "",
    ]
    same_json(ResponsesAssembler.assemble(lines), incomplete)


def test_responses_stream_without_its_terminal_event_is_interrupted() -> None:
    for cut in range(len(RESPONSES_17_STREAM) - 1):
        with pytest.raises(StreamInterrupted, match=r"response\.completed"):
            ResponsesAssembler.assemble(RESPONSES_17_STREAM[:cut])


def test_responses_failed_and_error_events_are_vendor_errors() -> None:
    error = {"code": "server_error", "message": "The model failed."}
    failed = {"type": "response.failed", "response": {"id": "resp_1", "status": "failed", "error": error}}
    with pytest.raises(VendorError, match="response failed") as info:
        ResponsesAssembler.assemble([*RESPONSES_17_STREAM[:6], "data: " + json.dumps(failed), ""])
    assert info.value.body == error
    event = {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down.", "param": None}
    with pytest.raises(VendorError, match=r"Slow down\.") as info:
        ResponsesAssembler.assemble(["event: error", "data: " + json.dumps(event), ""])
    assert info.value.body == event


@pytest.mark.parametrize("data", ["{not json", "[1, 2]", '"text"'])
def test_responses_event_that_is_not_a_json_object_is_malformed(data: str) -> None:
    with pytest.raises(MalformedResponse):
        ResponsesAssembler.assemble([*RESPONSES_17_STREAM[:3], "data: " + data, ""])


# -- Chat Completions: the §3.6 DeepSeek example -----------------------------------------------------------

# the verified example of docs/protocols.md §3.6, verbatim
DEEPSEEK_36 = json.loads(
    """
{
  "id": "chatcmpl-emu-001",
  "object": "chat.completion",
  "created": 1760000000,
  "model": "deepseek-v4-pro",
  "system_fingerprint": "fp_emu",
  "choices": [
    {
      "index": 0,
      "finish_reason": "tool_calls",
      "logprobs": null,
      "message": {
        "role": "assistant",
        "content": "",
        "reasoning_content": "User wants weather; call the tool.",
        "tool_calls": [
          {
            "id": "call_00_emu",
            "type": "function",
            "function": {
              "name": "get_weather",
              "arguments": "{\\"city\\":\\"Paris\\"}"
            }
          }
        ]
      }
    }
  ],
  "usage": {
    "prompt_tokens": 1200,
    "completion_tokens": 150,
    "total_tokens": 1350,
    "prompt_tokens_details": {
      "cached_tokens": 1152
    },
    "completion_tokens_details": {
      "reasoning_tokens": 120
    },
    "prompt_cache_hit_tokens": 1152,
    "prompt_cache_miss_tokens": 48
  }
}
"""
)

_HEAD = (
    '"id":"chatcmpl-emu-001","object":"chat.completion.chunk","created":1760000000,'
    '"model":"deepseek-v4-pro","system_fingerprint":"fp_emu"'
)


def chat_chunk(delta: str, finish: str = "null") -> str:
    return (
        "data: {"
        + _HEAD
        + ',"choices":[{"index":0,"delta":'
        + delta
        + ',"logprobs":null,"finish_reason":'
        + finish
        + '}],"usage":null}'
    )


DEEPSEEK_36_STREAM = [
    chat_chunk('{"role":"assistant","content":""}'),
    "",
    chat_chunk('{"reasoning_content":"User wants weather; "}'),
    "",
    chat_chunk('{"content":null,"reasoning_content":"call the tool."}'),
    "",
    ": keep-alive",
    "",
    chat_chunk(
        '{"tool_calls":[{"index":0,"id":"call_00_emu","type":"function","function":{"name":"get_weather","arguments":""}}]}'
    ),
    "",
    chat_chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]}'),
    "",
    chat_chunk('{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]}'),
    "",
    chat_chunk("{}", '"tool_calls"'),
    "",
    "data: {" + _HEAD + ',"choices":[],"usage":' + json.dumps(DEEPSEEK_36["usage"]) + "}",
    "",
    "data: [DONE]",
    "",
]


def test_chat_stream_assembles_the_non_streamed_example() -> None:
    completion = ChatAssembler.assemble(DEEPSEEK_36_STREAM)
    assert completion == DEEPSEEK_36
    # the captured payload is choices[0].message: byte for byte the non-streamed one
    same_json(completion["choices"][0]["message"], DEEPSEEK_36["choices"][0]["message"])
    # top level in the example's order; choices[0] is built in OpenAI's order (index, message, logprobs,
    # finish_reason) while §3.6 shows DeepSeek's (index, finish_reason, logprobs, message): the stream
    # does not say which, and only the message is a continuation payload
    assert list(completion) == list(DEEPSEEK_36)
    assert list(completion["choices"][0]) == ["index", "message", "logprobs", "finish_reason"]


def test_chat_stream_fed_as_bytes_is_the_same() -> None:
    assembler = ChatAssembler()
    raw = wire(DEEPSEEK_36_STREAM)
    for i in range(0, len(raw), 5):
        assembler.feed_bytes(raw[i : i + 5])
    assert assembler.finish() == DEEPSEEK_36


def test_chat_parallel_tool_calls_are_ordered_by_index_and_null_content_stays_null() -> None:
    def choices(*values: dict[str, Any], **head: Any) -> list[str]:
        return ["data: " + json.dumps({**head, "choices": list(values)}), ""]

    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"index": 0, "delta": {"tool_calls": [{"index": index, **fields}]}}

    lines = [
        *choices({"index": 0, "delta": {"role": "assistant", "content": None}}, id="c", created=1, model="m"),
        *choices(call(1, id="b", function={"name": "g", "arguments": "{}"})),
        *choices(call(0, id="a", function={"name": "f", "arguments": '{"x"'})),
        *choices(call(0, function={"arguments": ": 1}"})),
        *choices(
            {"index": 1, "delta": {"content": "another choice: ignored"}},
            {"index": 0, "delta": {}, "finish_reason": "tool_calls"},
        ),
        "data: [DONE]",
        "",
        *choices({"index": 0, "delta": {"content": "after [DONE]: ignored"}}),
    ]
    completion = ChatAssembler.assemble(lines)
    same_json(
        completion,
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "a",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"x": 1}'},
                            },
                            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                        ],
                    },
                    "logprobs": None,
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": None,
        },
    )


def test_chat_stream_without_finish_reason_or_done_is_interrupted() -> None:
    without_done = DEEPSEEK_36_STREAM[:-2]
    with pytest.raises(StreamInterrupted, match=r"\[DONE\]"):
        ChatAssembler.assemble(without_done)
    without_finish = [line for line in DEEPSEEK_36_STREAM if '"finish_reason":"tool_calls"' not in line]
    with pytest.raises(StreamInterrupted, match="finish_reason"):
        ChatAssembler.assemble(without_finish)


@pytest.mark.parametrize(
    ("make", "transcript"),
    [
        (AnthropicAssembler, ANTHROPIC_46_STREAM),
        (ResponsesAssembler, RESPONSES_17_STREAM),
        (ChatAssembler, DEEPSEEK_36_STREAM),
    ],
    ids=["anthropic", "responses", "chat"],
)
def test_a_stream_cut_anywhere_before_its_last_blank_line_is_interrupted(
    make: type[StreamAssembler], transcript: list[str]
) -> None:
    raw = wire(transcript)
    for cut in range(len(raw)):  # every byte prefix: mid-line, mid-event, mid-character, no final blank
        assembler = make()
        assembler.feed_bytes(raw[:cut])
        with pytest.raises(StreamInterrupted):
            assembler.finish()
    for cut in range(len(transcript)):  # every line prefix, down to the last data line without its blank
        with pytest.raises(StreamInterrupted):
            make.assemble(transcript[:cut])
    whole = make()
    whole.feed_bytes(raw)
    assert whole.finish() == make.assemble(transcript)


def test_chat_error_chunk_is_a_vendor_error_and_bad_json_is_malformed() -> None:
    error = {"message": "Internal error", "type": "server_error", "code": None}
    with pytest.raises(VendorError, match="Internal error") as info:
        ChatAssembler.assemble([*DEEPSEEK_36_STREAM[:4], "data: " + json.dumps({"error": error}), ""])
    assert info.value.body == error
    with pytest.raises(MalformedResponse, match="not JSON"):
        ChatAssembler.assemble([*DEEPSEEK_36_STREAM[:4], "data: {cut", ""])


# -- round trips against the emulators ---------------------------------------------------------------------

ANTHROPIC_MODEL = "claude-sonnet-4-6"
ANTHROPIC_HEADERS = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
OPENAI_HEADERS = {"Authorization": "Bearer test-key"}
WEATHER = ToolCallSpec("get_weather", {"city": "Paris", "days": [1, 2], "unit": None})


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    response = httpx2.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def stream_body(url: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    """The raw body of the same request with ``"stream": true``."""
    with httpx2.stream("POST", url, json={**body, "stream": True}, headers=headers) as response:
        assert response.status_code == 200
        return response.read()


def assembled_from_bytes(raw: bytes, make: Callable[[], StreamAssembler]) -> list[dict[str, Any]]:
    """The body assembled from ``feed_bytes``: in one chunk, and byte by byte."""
    whole, by_byte = make(), make()
    whole.feed_bytes(raw)
    for i in range(len(raw)):
        by_byte.feed_bytes(raw[i : i + 1])
    return [whole.finish(), by_byte.finish()]


def streamed(
    url: str, body: dict[str, Any], headers: dict[str, str], make: Callable[[], StreamAssembler]
) -> list[dict[str, Any]]:
    """The streamed answer assembled three ways: from ``iter_lines()`` (what the transport feeds), from
    the raw body in one ``feed_bytes`` chunk, and byte by byte."""
    raw = stream_body(url, body, headers)
    by_lines = make()
    for line in httpx2.Response(200, content=raw).iter_lines():
        by_lines.feed(line)
    return [by_lines.finish(), *assembled_from_bytes(raw, make)]


@pytest.fixture
def twin_anthropic() -> Iterator[Callable[[ModelAction], tuple[AnthropicEmulator, AnthropicEmulator]]]:
    started: list[AnthropicEmulator] = []

    def make(action: ModelAction, **kw: Any) -> tuple[AnthropicEmulator, AnthropicEmulator]:
        pair = (
            AnthropicEmulator([action], secret="twin", **kw),
            AnthropicEmulator([action], secret="twin", **kw),
        )
        for emulator in pair:
            started.append(emulator.start())
        return pair

    yield make
    for emulator in started:
        emulator.stop()


def verified_anthropic(message: dict[str, Any], emulator: AnthropicEmulator) -> dict[str, Any]:
    """The message with its signatures and redacted data checked against the emulator, then masked:
    they carry a fresh random nonce per request (the only per-request difference on twin emulators)."""
    content = []
    for b in message["content"]:
        if b["type"] == "thinking":
            assert emulator.verify_thinking(message["model"], b["thinking"], b["signature"])
            b = {**b, "signature": "<verified>"}
        elif b["type"] == "redacted_thinking":
            assert emulator.verify_redacted(message["model"], b["data"])
            b = {**b, "data": "<verified>"}
        content.append(b)
    return {**message, "content": content}


ANTHROPIC_ACTIONS = {
    "thinking+redacted+text+tool": ModelAction(
        reasoning="Two cities: call the tool for both, in parallel.",
        redacted=True,
        text="Let me check.",
        tool_calls=(WEATHER, ToolCallSpec("get_time", {})),
    ),
    "answer": ModelAction(reasoning="Easy.", text="Rome is warmer (22C) than Paris (18C)."),
    "no thinking": ModelAction(text="Just text."),
    "max_tokens": ModelAction(reasoning="Long thought", text="Cut sh", stop="max_tokens"),
    "unicode": ModelAction(reasoning="Caf\u00e9 \U0001f600", text="\u00e9t\u00e9 \u4e2d\u6587 \u00a0 done"),
}


@pytest.mark.parametrize("action", ANTHROPIC_ACTIONS.values(), ids=ANTHROPIC_ACTIONS.keys())
@pytest.mark.parametrize("thinking", [{"type": "enabled", "budget_tokens": 2048}, None])
def test_anthropic_streamed_equals_non_streamed(
    twin_anthropic: Callable[..., tuple[AnthropicEmulator, AnthropicEmulator]],
    action: ModelAction,
    thinking: dict[str, Any] | None,
) -> None:
    plain, streaming = twin_anthropic(action)
    body: dict[str, Any] = {
        "model": ANTHROPIC_MODEL,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "Paris or Rome?"}],
    }
    if thinking is not None:
        body["thinking"] = thinking
    expected = verified_anthropic(post(plain.base_url + "/v1/messages", body, ANTHROPIC_HEADERS), plain)
    for got in streamed(streaming.base_url + "/v1/messages", body, ANTHROPIC_HEADERS, AnthropicAssembler):
        same_json(verified_anthropic(got, streaming), expected)


def test_anthropic_round_trip_with_omitted_thinking_and_citations(
    twin_anthropic: Callable[..., tuple[AnthropicEmulator, AnthropicEmulator]],
) -> None:
    citation = {"type": "char_location", "cited_text": "sky", "document_index": 0, "start_char_index": 0}

    def cite(message: dict[str, Any]) -> dict[str, Any]:
        content = [{**b, "citations": [citation]} if b["type"] == "text" else b for b in message["content"]]
        return {**message, "content": content}

    plain, streaming = twin_anthropic(
        ModelAction(reasoning="hidden", text="The sky is blue."), transform=cite
    )
    body = {
        "model": ANTHROPIC_MODEL,
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048, "display": "omitted"},
        "messages": [{"role": "user", "content": "Colour?"}],
    }
    expected = verified_anthropic(post(plain.base_url + "/v1/messages", body, ANTHROPIC_HEADERS), plain)
    assert expected["content"][0]["thinking"] == "" and expected["content"][1]["citations"] == [citation]
    for got in streamed(streaming.base_url + "/v1/messages", body, ANTHROPIC_HEADERS, AnthropicAssembler):
        same_json(verified_anthropic(got, streaming), expected)


@pytest.mark.parametrize("after_events", [0, 1, 4, 12])
def test_anthropic_stream_cut_by_the_server_is_interrupted(
    twin_anthropic: Callable[..., tuple[AnthropicEmulator, AnthropicEmulator]], after_events: int
) -> None:
    _, streaming = twin_anthropic(ANTHROPIC_ACTIONS["thinking+redacted+text+tool"])
    streaming.inject(Fault.truncate_stream(after_events))
    body = {
        "model": ANTHROPIC_MODEL,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
    }
    assembler = AnthropicAssembler()
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        httpx2.stream(
            "POST", streaming.base_url + "/v1/messages", json=body, headers=ANTHROPIC_HEADERS
        ) as response,
    ):
        for chunk in response.iter_bytes():
            assembler.feed_bytes(chunk)
    with pytest.raises(StreamInterrupted):
        assembler.finish()


@pytest.fixture
def twin_responses() -> Iterator[
    Callable[[ModelAction], tuple[OpenAIResponsesEmulator, OpenAIResponsesEmulator]]
]:
    started: list[OpenAIResponsesEmulator] = []

    def make(action: ModelAction) -> tuple[OpenAIResponsesEmulator, OpenAIResponsesEmulator]:
        pair = (
            OpenAIResponsesEmulator([action], secret="twin"),
            OpenAIResponsesEmulator([action], secret="twin"),
        )
        for emulator in pair:
            started.append(emulator.start())
        return pair

    yield make
    for emulator in started:
        emulator.stop()


def verified_responses(response: dict[str, Any], emulator: OpenAIResponsesEmulator) -> dict[str, Any]:
    """``encrypted_content`` checked against the emulator then masked (a fresh nonce per request), and
    ``created_at`` and ``completed_at`` masked (the emulator's clock: two requests may straddle a second)."""
    output = []
    for item in response["output"]:
        if "encrypted_content" in item:
            blob = item["encrypted_content"]
            assert emulator.verify_encrypted_content(blob, model=response["model"], item_id=item["id"])
            item = {**item, "encrypted_content": "<verified>"}
        output.append(item)
    clock = {key: "<clock>" for key in ("created_at", "completed_at") if response.get(key) is not None}
    return {**response, **clock, "output": output}


RESPONSES_ACTIONS = {
    "reasoning+tool calls": ModelAction(
        reasoning="Need the weather tool.",
        tool_calls=(WEATHER, ToolCallSpec("get_time", {"city": "Rome"}, raw_arguments='{ "city" : "Rome" }')),
    ),
    "answer": ModelAction(reasoning="Easy.", text="Rome is warmer."),
    "no reasoning text": ModelAction(text="Just text."),
    "incomplete": ModelAction(reasoning="Long thought", text="Cut sh", stop="max_tokens"),
}


@pytest.mark.parametrize("action", RESPONSES_ACTIONS.values(), ids=RESPONSES_ACTIONS.keys())
def test_responses_streamed_equals_non_streamed(
    twin_responses: Callable[[ModelAction], tuple[OpenAIResponsesEmulator, OpenAIResponsesEmulator]],
    action: ModelAction,
) -> None:
    plain, streaming = twin_responses(action)
    body = {
        "model": "gpt-5.5",
        "input": "Paris or Rome?",
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    }
    expected = verified_responses(post(plain.base_url + "/v1/responses", body, OPENAI_HEADERS), plain)
    for got in streamed(streaming.base_url + "/v1/responses", body, OPENAI_HEADERS, ResponsesAssembler):
        same_json(verified_responses(got, streaming), expected)


@pytest.fixture
def twin_chat() -> Iterator[Callable[[ModelAction, str], tuple[OpenAIChatEmulator, OpenAIChatEmulator]]]:
    started: list[OpenAIChatEmulator] = []

    def make(action: ModelAction, dialect: Any) -> tuple[OpenAIChatEmulator, OpenAIChatEmulator]:
        pair = (OpenAIChatEmulator([action], dialect=dialect), OpenAIChatEmulator([action], dialect=dialect))
        for emulator in pair:
            started.append(emulator.start())
        return pair

    yield make
    for emulator in started:
        emulator.stop()


CHAT_ACTIONS = {
    "reasoning+tool calls": ModelAction(
        reasoning="Need the weather tool.",
        text="Checking.",
        tool_calls=(WEATHER, ToolCallSpec("get_time", {"city": "Rome"}, raw_arguments='{ "city" : "Rome" }')),
    ),
    "answer": ModelAction(reasoning="Easy.", text="Rome is warmer."),
    "length": ModelAction(reasoning="Long thought", text="Cut sh", stop="max_tokens"),
}
#: what each emulator dialect leaves out of its stream (see test_chat_known_stream_differences)
CHAT_PATH = {"openai": "/v1", "deepseek": "", "vllm": "/v1", "sglang": "/v1"}


def chat_round_trip(
    twin_chat: Callable[[ModelAction, str], tuple[OpenAIChatEmulator, OpenAIChatEmulator]],
    action: ModelAction,
    dialect: str,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    plain, streaming = twin_chat(action, dialect)
    path = CHAT_PATH[dialect] + "/chat/completions"
    body = {
        "model": {"deepseek": "deepseek-v4-pro", "openai": "gpt-5.5"}.get(dialect, "qwen3-32b"),
        "messages": [{"role": "user", "content": "Paris or Rome?"}],
        "stream_options": {"include_usage": True},  # what the adapter sends when streaming
    }
    expected = post(plain.base_url + path, body, OPENAI_HEADERS)
    got = streamed(streaming.base_url + path, body, OPENAI_HEADERS, ChatAssembler)
    # ``created`` is the emulator's clock: two requests may straddle a second
    for completion in (expected, *got):
        completion["created"] = "<clock>"
    return expected, got


@pytest.mark.parametrize("dialect", ["openai", "deepseek", "sglang"])
@pytest.mark.parametrize("action", CHAT_ACTIONS.values(), ids=CHAT_ACTIONS.keys())
def test_chat_streamed_equals_non_streamed(
    twin_chat: Callable[[ModelAction, str], tuple[OpenAIChatEmulator, OpenAIChatEmulator]],
    action: ModelAction,
    dialect: str,
) -> None:
    expected, got = chat_round_trip(twin_chat, action, dialect)
    for completion in got:
        same_json(completion, expected)


@pytest.mark.parametrize(
    ("dialect", "action"),
    [
        # vLLM: the message carries ``reasoning`` and ``reasoning_content``; the stream only ``reasoning``
        ("vllm", CHAT_ACTIONS["reasoning+tool calls"]),
        ("vllm", CHAT_ACTIONS["answer"]),
        # DeepSeek, thinking on, no reasoning text: ``reasoning_content: ""`` is never streamed (no delta
        # for an empty string), so the assembled message has no reasoning_content at all
        ("deepseek", ModelAction(text="plain")),
        ("deepseek", ModelAction(tool_calls=(WEATHER,))),
    ],
)
def test_chat_known_stream_differences(
    twin_chat: Callable[[ModelAction, str], tuple[OpenAIChatEmulator, OpenAIChatEmulator]],
    dialect: str,
    action: ModelAction,
) -> None:
    """Where the emulators' streams say less than their bodies: a stream cannot carry a field it never
    mentions, so the assembled message lacks exactly ``reasoning_content`` (and nothing else differs)."""
    expected, got = chat_round_trip(twin_chat, action, dialect)
    message = expected["choices"][0]["message"]
    assert "reasoning_content" in message
    without = {k: v for k, v in message.items() if k != "reasoning_content"}
    expected["choices"][0]["message"] = without
    for completion in got:
        same_json(completion, expected)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_text_with_unicode_line_separators_needs_feed_bytes(
    twin_chat: Callable[[ModelAction, str], tuple[OpenAIChatEmulator, OpenAIChatEmulator]],
    twin_anthropic: Callable[..., tuple[AnthropicEmulator, AnthropicEmulator]],
    separator: str,
) -> None:
    """JSON encoders may leave U+2028/U+2029/U+0085 raw inside strings (the emulators do). Lines split by
    ``str.splitlines`` — what ``httpx2``'s ``iter_lines()`` does — cut such an event in two; the SSE
    parser splits at CR/LF only, so ``feed_bytes`` (and ``feed`` of properly split lines) keep it whole."""
    text = f"line one{separator}line two"
    plain, streaming = twin_chat(ModelAction(text=text), "openai")
    body = {
        "model": "gpt-5.5",
        "messages": [{"role": "user", "content": "?"}],
        "stream_options": {"include_usage": True},
    }
    expected = post(plain.base_url + "/v1/chat/completions", body, OPENAI_HEADERS)
    raw = stream_body(streaming.base_url + "/v1/chat/completions", body, OPENAI_HEADERS)
    with pytest.raises(MalformedResponse, match="not JSON"):
        ChatAssembler.assemble(raw.decode().splitlines())
    for completion in assembled_from_bytes(raw, ChatAssembler):
        completion["created"] = expected["created"]  # the emulator's clock
        same_json(completion, expected)
        assert completion["choices"][0]["message"]["content"] == text

    a_plain, a_streaming = twin_anthropic(ModelAction(text=text))
    a_body = {"model": ANTHROPIC_MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "?"}]}
    a_expected = post(a_plain.base_url + "/v1/messages", a_body, ANTHROPIC_HEADERS)
    a_raw = stream_body(a_streaming.base_url + "/v1/messages", a_body, ANTHROPIC_HEADERS)
    with pytest.raises(MalformedResponse, match="not JSON"):
        AnthropicAssembler.assemble(a_raw.decode().splitlines())
    for message in assembled_from_bytes(a_raw, AnthropicAssembler):
        same_json(message, a_expected)
