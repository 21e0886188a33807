"""Tool-call repair (issue 13, item 2): schema flatten, scavenge, truncated argument JSON.

Pure functions first, checked against hand-written inputs and outputs; then ``Session.run`` through the real
SDKs against the strict emulators, where every test compares the continuation the next request replays with
the bytes of the response that carried it (captured on the wire, not read from the session).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reasonstate as rs
from reasonstate.engine import ToolCall
from reasonstate.prefix import flat_schema
from reasonstate.runtime.repair import (
    Found,
    json_completion,
    missing_required,
    nest_arguments,
    repaired,
    scavenge,
)
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import MODEL, SYSTEM, THINKING, as_read_by_vendor

# -- a deep schema and its flat form, both written by hand -------------------------------------------------

ORDER = {
    "type": "object",
    "description": "Ship an order",
    "properties": {
        "sku": {"type": "string", "description": "The product"},
        "ship_to": {
            "type": "object",
            "description": "Where to ship",
            "properties": {
                "name": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "The city"},
                        "zip": {"type": "string"},
                    },
                    "required": ["city"],
                },
            },
            "required": ["address"],
        },
        "gift": {
            "type": "object",
            "properties": {"note": {"type": "string"}},
            "required": ["note"],
        },
    },
    "required": ["sku", "ship_to"],
}
# ship_to.address.city: required all the way down; gift.note: gift is optional, so it is not required flat
ORDER_FLAT = {
    "type": "object",
    "description": "Ship an order",
    "properties": {
        "sku": {"type": "string", "description": "The product"},
        "ship_to.name": {"type": "string", "description": "ship_to: Where to ship"},
        "ship_to.address.city": {"type": "string", "description": "ship_to: Where to ship / The city"},
        "ship_to.address.zip": {"type": "string", "description": "ship_to: Where to ship"},
        "gift.note": {"type": "string"},
    },
    "required": ["sku", "ship_to.address.city"],
}
# what a Tool offers: its parameters are key-sorted when it is built, so the flat names come in sorted order
OFFERED = {**ORDER_FLAT, "required": ["ship_to.address.city", "sku"]}


def test_a_schema_nesting_three_levels_is_offered_flat_with_required_and_descriptions_carried() -> None:
    assert flat_schema(ORDER) == ORDER_FLAT


def test_a_shallow_schema_with_ten_leaves_is_not_flattened_and_eleven_are() -> None:
    ten = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(10)}}
    assert flat_schema(ten) is None
    two_levels = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}},
    }
    assert flat_schema(two_levels) is None
    eleven = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {f"x{i}": {"type": "string"} for i in range(6)}},
            **{f"p{i}": {"type": "integer"} for i in range(5)},
        },
    }
    flat = flat_schema(eleven)
    assert flat is not None
    assert list(flat["properties"]) == [f"a.x{i}" for i in range(6)] + [f"p{i}" for i in range(5)]


@pytest.mark.parametrize(
    "node",
    [
        {"type": "object", "properties": {"c": {"type": "string"}}, "anyOf": [{"required": ["c"]}]},
        {"type": "object", "properties": {"c": {"type": "string"}}, "$defs": {}},
    ],
)
def test_a_deep_schema_with_an_object_a_flat_form_cannot_express_is_left_as_is(node: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": node}}},
    }
    assert flat_schema(schema) is None


def test_a_deep_schema_with_a_dotted_property_name_is_left_as_is() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a.b": {"type": "string"},
            "a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": {}}}}},
        },
    }
    assert flat_schema(schema) is None


def test_a_tool_offers_its_flat_schema_unless_flatten_is_off_and_the_prefix_bytes_say_which() -> None:
    flat, nested = (
        rs.Tool(name="ship", parameters=ORDER),
        rs.Tool(name="ship", parameters=ORDER, flatten=False),
    )
    assert flat.flattened and flat.offered_parameters == OFFERED and flat.parameters == ORDER
    assert not nested.flattened and nested.offered_parameters == ORDER
    assert flat.canonical() == {"name": "ship", "description": "", "parameters": ORDER}
    assert nested.canonical()["flatten"] is False
    assert rs.Prefix(tools=[flat]).fingerprint != rs.Prefix(tools=[nested]).fingerprint
    with pytest.raises(rs.InvalidOption, match="flatten"):
        rs.Tool(name="ship", flatten="yes")  # type: ignore[arg-type]


def test_flat_arguments_are_nested_into_the_handlers_shape() -> None:
    flat = {"sku": "A1", "ship_to.address.city": "Paris", "ship_to.name": "Ann", "ship_to.address.zip": "75"}
    assert nest_arguments(flat) == (
        {"sku": "A1", "ship_to": {"address": {"city": "Paris", "zip": "75"}, "name": "Ann"}},
        ["ship_to.address.city", "ship_to.name", "ship_to.address.zip"],
    )
    assert nest_arguments({"sku": "A1"}) == ({"sku": "A1"}, [])


@pytest.mark.parametrize(
    "arguments",
    [{"a": 1, "a.b": 2}, {"a.b": 2, "a": 1}, {"a.b": 1, "a.b.c": 2}],
)
def test_flat_names_that_claim_one_place_twice_are_not_nested(arguments: dict[str, Any]) -> None:
    assert nest_arguments(arguments) is None


def test_missing_required_lists_the_schemas_required_names_the_arguments_lack() -> None:
    assert missing_required({"sku": "A"}, ORDER_FLAT) == ["ship_to.address.city"]
    assert missing_required({"sku": "A", "ship_to.address.city": "P"}, ORDER_FLAT) == []


# -- truncated JSON: the boundary ------------------------------------------------------------------------

COMPLETABLE = [
    ('{"city": "Paris"', "}"),
    ('{"city": "Paris"  \n', "}"),
    ('{"a": {"b": [1, "x"]', "}}"),
    ('{"a": {"b": [1, "x"', "]}}"),
    ('{"ok": true', "}"),
    ('{"ok": false', "}"),
    ('{"v": null', "}"),
    ('{"n": 12 ', "}"),  # whitespace ended the number
    ('{"a": {}', "}"),
    ('{"a": []', "}"),
    ('{"q": "say \\"hi\\""', "}"),
]
AMBIGUOUS = [
    '{"city": "Par',  # a value cut at an unknown point
    '{"ci',  # a key cut short
    '{"city"',  # a dangling key
    '{"city":',  # a key with no value
    '{"city": ',
    '{"a": 1,',  # a trailing comma: another key was coming
    '{"a": [1,',
    '{"n": 12',  # a number at the very end may go on (125)
    '{"n": -',
    '{"ok": tru',  # a literal cut short
    '{"v": nul',
    "{",  # an open object with nothing in it
    '{"a": [',
    '{"a": {',
    '{"q": "ends in \\',  # an escape cut short
    '{"q": "\\u00e',
    '{"a": 1}',  # nothing missing: not a truncation
    '{"a": 1} x',
    "[1, 2",  # not an object
    '"text',
    "",
    '{"a" 1',  # broken before the end
    '{"a": 1]',
]


@pytest.mark.parametrize(("text", "closers"), COMPLETABLE)
def test_an_object_missing_only_its_closers_is_completed(text: str, closers: str) -> None:
    assert json_completion(text) == closers
    assert isinstance(json.loads(text + closers), dict)


@pytest.mark.parametrize("text", AMBIGUOUS)
def test_an_object_whose_completion_is_ambiguous_is_not_completed(text: str) -> None:
    assert json_completion(text) is None


# -- scavenge --------------------------------------------------------------------------------------------

# DeepSeek V3.2's published encoding (function_calls, typed parameters)
DSML = (
    "I should read the file first.\n\n"
    "<｜DSML｜function_calls>\n"
    '<｜DSML｜invoke name="read_file">\n'
    '<｜DSML｜parameter name="path" string="true">notes.md</｜DSML｜parameter>\n'
    '<｜DSML｜parameter name="limit" string="false">20</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n"
    "</｜DSML｜function_calls>"
)
TOOLS = ["get_weather", "read_file"]


def invoke(name: str, *parameters: tuple[str, str, str]) -> str:
    """One DSML invoke block, written out: ``(name, "true"|"false", value)`` per parameter."""
    inner = "".join(
        f'<｜DSML｜parameter name="{p}" string="{is_string}">{value}</｜DSML｜parameter>'
        for p, is_string, value in parameters
    )
    return f'<｜DSML｜invoke name="{name}">{inner}</｜DSML｜invoke>'


def test_a_dsml_block_in_the_reasoning_is_found_with_typed_parameters() -> None:
    assert scavenge("", DSML, TOOLS) == [
        Found(
            "read_file",
            {"path": "notes.md", "limit": 20},
            '{"limit":20,"path":"notes.md"}',
            None,
            "dsml",
            "reasoning",
        )
    ]


def test_deepseek_v4s_tool_calls_spelling_and_several_invokes_are_found_in_order() -> None:
    text = (
        "<｜DSML｜tool_calls>"
        + invoke("get_weather", ("city", "true", "Paris"))
        + invoke("get_weather", ("city", "true", "Rome"))
        + "</｜DSML｜tool_calls>"
    )
    found = scavenge(text, "", TOOLS)
    assert [(f.name, f.arguments, f.where) for f in found] == [
        ("get_weather", {"city": "Paris"}, "text"),
        ("get_weather", {"city": "Rome"}, "text"),
    ]


def test_an_unknown_tool_is_never_scavenged() -> None:
    text = invoke("rm_rf", ("p", "true", "/"))
    assert scavenge(text, '{"name": "delete_all", "arguments": {}}', TOOLS) == []


def test_a_dsml_parameter_marked_json_that_is_not_json_gives_a_call_without_arguments() -> None:
    text = invoke("read_file", ("limit", "false", "2O"))
    (found,) = scavenge(text, "", TOOLS)
    assert found.arguments is None and found.arguments_error is not None
    assert found.arguments_error.startswith("parameter 'limit' is not valid JSON")


@pytest.mark.parametrize(
    ("text", "arguments", "raw"),
    [
        (
            'Calling: {"name": "get_weather", "arguments": {"city": "Oslo"}}',
            {"city": "Oslo"},
            '{"city":"Oslo"}',
        ),
        ('{"tool": "get_weather", "input": {"city": "Oslo"}}', {"city": "Oslo"}, '{"city":"Oslo"}'),
        ('{"name": "get_weather", "parameters": {"city": "Oslo"}}', {"city": "Oslo"}, '{"city":"Oslo"}'),
        (
            '{"type": "function", "function": '
            '{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}',
            {"city": "Oslo"},
            '{"city": "Oslo"}',
        ),
    ],
)
def test_a_json_object_naming_a_known_tool_is_found(text: str, arguments: Any, raw: str) -> None:
    (found,) = scavenge(text, "", TOOLS)
    assert (found.name, found.arguments, found.raw_arguments, found.source) == (
        "get_weather",
        arguments,
        raw,
        "json",
    )


def test_the_first_place_holding_a_call_wins_so_a_call_thought_then_written_is_found_once() -> None:
    reasoning = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    found = scavenge(DSML, reasoning, TOOLS)
    assert [(f.name, f.where, f.source) for f in found] == [("read_file", "text", "dsml")]
    assert scavenge("no call here {not json}", "", TOOLS) == []


def test_a_reasoning_nested_past_the_parsers_depth_holds_no_call_and_raises_nothing() -> None:
    deep = '{"a": ' * 50_000 + '"get_weather"'
    assert scavenge("", deep, TOOLS) == []


def test_a_call_after_code_full_of_braces_is_found() -> None:
    code = 'if (x) { y({"k": 1 }); }\n' * 100
    found = scavenge(code + '{"name": "get_weather", "arguments": {"city": "Oslo"}}', "", TOOLS)
    assert [(f.name, f.arguments) for f in found] == [("get_weather", {"city": "Oslo"})]


# -- repaired(): what the handler sees, and the events ---------------------------------------------------

WEATHER = rs.Tool(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
        "required": ["city"],
    },
)


def broken(raw: str) -> ToolCall:
    return ToolCall("c1", "get_weather", None, raw, "arguments are not valid JSON")


def test_a_completable_call_runs_with_the_completed_object_and_keeps_its_raw_text() -> None:
    call, events = repaired(WEATHER, broken('{"city": "Paris"'))
    assert call.arguments == {"city": "Paris"} and call.arguments_error is None
    assert call.raw_arguments == '{"city": "Paris"'
    assert events == [{"repair": "arguments_completed", "call_id": "c1", "tool": "get_weather", "added": "}"}]


def test_a_completed_call_without_a_required_key_is_invalid_not_run() -> None:
    call, events = repaired(WEATHER, broken('{"units": "C"'))
    assert call.arguments is None
    error = "arguments were cut short: closing them with '}' leaves required ['city'] out"
    assert call.arguments_error == error
    assert events == [{"repair": "arguments_invalid", "call_id": "c1", "tool": "get_weather", "error": error}]


def test_an_ambiguous_call_stays_invalid_with_the_parse_error() -> None:
    call, events = repaired(WEATHER, broken('{"city": "Par'))
    assert call == broken('{"city": "Par')
    assert events == [
        {
            "repair": "arguments_invalid",
            "call_id": "c1",
            "tool": "get_weather",
            "error": "arguments are not valid JSON",
        }
    ]


def test_a_good_call_of_a_flat_tool_is_nested_and_a_good_call_of_a_plain_tool_is_untouched() -> None:
    ship = rs.Tool(name="ship", parameters=ORDER)
    raw = '{"sku": "A1", "ship_to.address.city": "Paris"}'
    call, events = repaired(ship, ToolCall("c2", "ship", json.loads(raw), raw))
    assert call.arguments == {"sku": "A1", "ship_to": {"address": {"city": "Paris"}}}
    assert call.raw_arguments == raw
    assert events == [
        {"repair": "flatten", "call_id": "c2", "tool": "ship", "split": ["ship_to.address.city"]}
    ]
    good = ToolCall("c3", "get_weather", {"city": "Oslo"}, '{"city": "Oslo"}')
    assert repaired(WEATHER, good) == (good, [])
    assert repaired(None, good) == (good, [])


# -- end to end: the real SDKs against the emulators -----------------------------------------------------


class Wire:
    """The response bodies as they came over the wire, on an ``httpx2`` client handed to the SDK."""

    def __init__(self) -> None:
        self.responses: list[bytes] = []
        self.http = httpx2.Client(event_hooks={"response": [self._seen]})

    def _seen(self, response: Any) -> None:
        response.read()
        self.responses.append(response.content)

    def response(self, i: int) -> Any:
        return json.loads(self.responses[i])


@pytest.fixture
def wire() -> Iterator[Wire]:
    w = Wire()
    yield w
    w.http.close()


@pytest.fixture
def anthropic_emu() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator() as emu:
        yield emu


@pytest.fixture
def deepseek() -> Iterator[OpenAIChatEmulator]:
    with OpenAIChatEmulator(dialect="deepseek") as emu:
        yield emu


def repairs(session: rs.Session) -> list[dict[str, Any]]:
    return [dict(e.data) for e in session.trace.of_kind(EventKind.TOOL_REPAIRED)]


def anthropic_session(emu: AnthropicEmulator, wire: Wire, tools: list[rs.Tool]) -> rs.Session:
    return rs.Session(
        emu.client(http_client=wire.http),
        model=MODEL,
        system=SYSTEM,
        tools=tools,
        max_tokens=4096,
        thinking=THINKING,
    )


def deepseek_session(emu: OpenAIChatEmulator, wire: Wire, tools: list[rs.Tool]) -> rs.Session:
    return rs.Session(
        emu.client(http_client=wire.http), model="deepseek-v4-pro", dialect="deepseek", tools=tools
    )


def recording(base: rs.Tool, answer: Any) -> tuple[rs.Tool, list[Any]]:
    """A tool with ``base``'s name and parameters whose handler records its arguments and answers
    ``answer``; the list it records into."""
    seen: list[Any] = []
    tool = rs.Tool(
        name=base.name, parameters=dict(base.parameters), handler=lambda **kw: seen.append(kw) or answer
    )
    return tool, seen


def ship_tool(seen: list[Any]) -> rs.Tool:
    return rs.Tool(
        name="ship",
        description="Ship an order",
        parameters=ORDER,
        handler=lambda **kw: seen.append(kw) or "shipped",
    )


FLAT_ARGS = {"sku": "A1", "ship_to.address.city": "Paris", "ship_to.name": "Ann"}
NESTED_ARGS = {"sku": "A1", "ship_to": {"address": {"city": "Paris"}, "name": "Ann"}}


def test_anthropic_flat_arguments_reach_the_handler_nested_and_the_signed_step_goes_back_as_received(
    anthropic_emu: AnthropicEmulator, wire: Wire
) -> None:
    anthropic_emu.script.extend(
        [
            ModelAction.call(ToolCallSpec("ship", FLAT_ARGS), reasoning="Ship it to Ann in Paris."),
            ModelAction.answer("Shipped.", reasoning="Done."),
        ]
    )
    seen: list[Any] = []
    session = anthropic_session(anthropic_emu, wire, [ship_tool(seen)])
    assert session.run("Ship A1 to Ann, Paris").text == "Shipped."
    assert seen == [NESTED_ARGS]
    first, second = (json.loads(r.body) for r in anthropic_emu.requests)
    assert first["tools"][0]["input_schema"] == OFFERED
    assert first["tools"] == second["tools"]  # the same tools bytes in every request
    # the assistant turn goes back exactly as the response carried it: thinking + signature, flat tool_use
    assert second["messages"][1] == {"role": "assistant", "content": wire.response(0)["content"]}
    assert second["messages"][1]["content"][-1]["input"] == FLAT_ARGS
    assert repairs(session) == [
        {
            "turn": 0,
            "repair": "flatten",
            "call_id": session.history.turns[0].steps[0].tool_calls[0].id,
            "tool": "ship",
            "split": ["ship_to.address.city", "ship_to.name"],
        }
    ]


def test_deepseek_flat_arguments_reach_the_handler_nested_and_the_raw_string_goes_back_byte_for_byte(
    deepseek: OpenAIChatEmulator, wire: Wire
) -> None:
    raw = '{"sku":"A1",  "ship_to.address.city":"Paris","ship_to.name":"Ann"}'
    deepseek.script.extend(
        [
            ModelAction.call(ToolCallSpec("ship", raw_arguments=raw), reasoning="Ship it."),
            ModelAction.answer("Shipped.", reasoning="Done."),
        ]
    )
    seen: list[Any] = []
    session = deepseek_session(deepseek, wire, [ship_tool(seen)])
    session.run("Ship A1 to Ann, Paris")
    assert seen == [NESTED_ARGS]
    second = json.loads(deepseek.requests[1].body)
    assert second["tools"][0]["function"]["parameters"] == OFFERED
    assert second["messages"][1] == wire.response(0)["choices"][0]["message"]
    assert second["messages"][1]["tool_calls"][0]["function"]["arguments"] == raw
    assert [e["repair"] for e in repairs(session)] == ["flatten"]


def test_deepseek_arguments_missing_only_a_brace_run_completed_and_go_back_as_sent(
    deepseek: OpenAIChatEmulator, wire: Wire
) -> None:
    raw = '{"city": "Paris", "units": "C"'
    deepseek.script.extend(
        [
            ModelAction.call(ToolCallSpec("get_weather", raw_arguments=raw), reasoning="Weather in Paris."),
            ModelAction.answer("Sunny.", reasoning="Done."),
        ]
    )
    weather, seen = recording(WEATHER, "sunny")
    session = deepseek_session(deepseek, wire, [weather])
    session.run("Weather in Paris?")
    assert seen == [{"city": "Paris", "units": "C"}]
    call = session.history.turns[0].steps[0].tool_calls[0]
    assert call.arguments is None and call.raw_arguments == raw  # the history keeps what the model sent
    messages = json.loads(deepseek.requests[1].body)["messages"]
    assert messages[1] == wire.response(0)["choices"][0]["message"]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == raw
    assert messages[2] == {"role": "tool", "tool_call_id": call.id, "content": "sunny"}
    assert repairs(session) == [
        {"turn": 0, "repair": "arguments_completed", "call_id": call.id, "tool": "get_weather", "added": "}"}
    ]


def test_deepseek_arguments_cut_inside_a_value_are_an_error_result_and_the_handler_never_runs(
    deepseek: OpenAIChatEmulator, wire: Wire
) -> None:
    raw = '{"units": "C", "city": "Pa'
    deepseek.script.extend(
        [
            ModelAction.call(ToolCallSpec("get_weather", raw_arguments=raw), reasoning="Weather."),
            ModelAction.answer("Sorry.", reasoning="Done."),
        ]
    )
    weather, seen = recording(WEATHER, "sunny")
    session = deepseek_session(deepseek, wire, [weather])
    session.run("Weather in Paris?")
    assert seen == []
    call = session.history.turns[0].steps[0].tool_calls[0]
    messages = json.loads(deepseek.requests[1].body)["messages"]
    assert messages[1] == wire.response(0)["choices"][0]["message"]
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": call.id,
        "content": "invalid arguments for 'get_weather': arguments are not valid JSON: Unterminated string "
        "starting at (char 23)",
    }
    assert [e["repair"] for e in repairs(session)] == ["arguments_invalid"]


def test_responses_arguments_missing_only_a_brace_run_completed_and_the_items_go_back_as_received(
    wire: Wire,
) -> None:
    raw = '{"city": "Oslo"'
    with OpenAIResponsesEmulator() as emu:
        emu.script.extend(
            [
                ModelAction.call(ToolCallSpec("get_weather", raw_arguments=raw), reasoning="Weather."),
                ModelAction.answer("Cold.", reasoning="Done."),
            ]
        )
        weather, seen = recording(WEATHER, "cold")
        session = rs.Session(emu.client(http_client=wire.http), model="gpt-5.5", tools=[weather], store=False)
        session.run("Weather in Oslo?")
        second = json.loads(emu.requests[1].body)
    assert seen == [{"city": "Oslo"}]
    output = wire.response(0)["output"]
    replayed = second["input"][1 : 1 + len(output)]
    assert [{k: v for k, v in item.items() if k != "status"} for item in replayed] == [
        {k: v for k, v in item.items() if k != "status"} for item in output
    ]
    assert any(item.get("arguments") == raw for item in replayed)
    assert [e["repair"] for e in repairs(session)] == ["arguments_completed"]


READ = rs.Tool(
    name="read_file",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path"],
    },
)


def test_deepseek_a_dsml_call_in_the_reasoning_is_run_and_its_result_goes_back_in_a_user_message(
    deepseek: OpenAIChatEmulator, wire: Wire
) -> None:
    deepseek.script.extend(
        [
            ModelAction.answer("Let me look.", reasoning=DSML),
            ModelAction.answer("The notes say hello.", reasoning="Read it."),
        ]
    )
    read, seen = recording(READ, "hello")
    session = deepseek_session(deepseek, wire, [read])
    reply = session.run("What do my notes say?")
    assert reply.text == "The notes say hello."
    assert seen == [{"path": "notes.md", "limit": 20}]
    messages = json.loads(deepseek.requests[1].body)["messages"]
    response = wire.response(0)["choices"][0]["message"]
    assert "tool_calls" not in response  # the vendor emitted no call ...
    # the message goes back exactly as received, its DSML-bearing reasoning_content untouched
    assert messages[1] == response
    assert messages[1]["reasoning_content"] == DSML
    assert all("tool_calls" not in m and m["role"] != "tool" for m in messages)
    assert messages[2] == {
        "role": "user",
        "content": "Your last reply wrote 1 tool call(s) in its text or reasoning instead of calling "
        "the tool(s); they were run as written:\n"
        '<tool_result name="read_file" arguments="{\\"limit\\":20,\\"path\\":\\"notes.md\\"}">'
        "\nhello\n</tool_result>",
    }
    assert repairs(session) == [
        {
            "turn": 0,
            "repair": "scavenge",
            "call_id": "scavenged-0-0",
            "tool": "read_file",
            "source": "dsml",
            "where": "reasoning",
        }
    ]
    assert len(session.history) == 2 and session.state is rs.TurnState.IDLE


def test_anthropic_a_json_call_in_the_text_is_run_and_the_signed_turn_goes_back_as_received(
    anthropic_emu: AnthropicEmulator, wire: Wire
) -> None:
    anthropic_emu.script.extend(
        [
            ModelAction.answer(
                'I will check: {"name": "get_weather", "arguments": {"city": "Oslo"}}',
                reasoning="Need the weather.",
            ),
            ModelAction.answer("Oslo is cold.", reasoning="Got it."),
        ]
    )
    weather, seen = recording(WEATHER, {"temp": -3})
    session = anthropic_session(anthropic_emu, wire, [weather])
    assert session.run("Weather in Oslo?").text == "Oslo is cold."
    assert seen == [{"city": "Oslo"}]
    messages = json.loads(anthropic_emu.requests[1].body)["messages"]
    assert messages[1] == {"role": "assistant", "content": wire.response(0)["content"]}
    assert messages[1]["content"][0]["type"] == "thinking" and messages[1]["content"][0]["signature"]
    (block,) = [b for b in messages[2]["content"] if b["type"] == "text"]
    assert block["text"].endswith(
        '<tool_result name="get_weather" arguments="{\\"city\\":\\"Oslo\\"}">\n{"temp":-3}\n</tool_result>'
    )
    assert [(e["repair"], e["source"], e["where"]) for e in repairs(session)] == [
        ("scavenge", "json", "text")
    ]


def test_a_scavenged_call_with_arguments_cut_short_gets_an_error_in_the_message_and_never_runs(
    deepseek: OpenAIChatEmulator, wire: Wire
) -> None:
    text = '{"name": "read_file", "arguments": "{\\"path\\": \\"no"}'
    deepseek.script.extend(
        [ModelAction.answer(text, reasoning="r"), ModelAction.answer("Sorry.", reasoning="r2")]
    )
    read, seen = recording(READ, "x")
    session = deepseek_session(deepseek, wire, [read])
    session.run("Read notes")
    assert seen == []
    user = json.loads(deepseek.requests[1].body)["messages"][2]["content"]
    assert "is_error=\"true\">\ninvalid arguments for 'read_file'" in user
    assert [e["repair"] for e in repairs(session)] == ["scavenge", "arguments_invalid"]


def test_a_reply_naming_no_known_tool_is_the_final_answer(deepseek: OpenAIChatEmulator, wire: Wire) -> None:
    deepseek.script.extend(
        [ModelAction.answer('Use {"name": "delete_all", "arguments": {}} carefully.', reasoning="r")]
    )
    session = deepseek_session(deepseek, wire, [READ])
    assert session.run("hi").text.startswith("Use")
    assert len(deepseek.requests) == 1 and repairs(session) == []


def test_gemini_a_json_call_in_the_text_is_run_and_the_signed_parts_go_back_as_received(wire: Wire) -> None:
    """Pain point: vercel/ai#10560 (thoughtSignature swallowed on the tool-input repair path)."""
    from google.genai import types

    from reasonstate.testing.gemini import GeminiEmulator

    with GeminiEmulator() as emu:
        emu.script.extend(
            [
                ModelAction.answer(
                    '{"name": "get_weather", "arguments": {"city": "Oslo"}}', reasoning="Need the weather."
                ),
                ModelAction.answer("Oslo is cold.", reasoning="Got it."),
            ]
        )
        weather, seen = recording(WEATHER, "cold")
        client = emu.client(
            http_options=types.HttpOptions(base_url=emu.base_url, api_version="v1", httpx_client=wire.http)
        )
        session = rs.Session(
            client, model="gemini-3-flash", tools=[weather], thinking_config={"include_thoughts": True}
        )
        assert session.run("Weather in Oslo?").text == "Oslo is cold."
        contents = json.loads(emu.requests[1].body)["contents"]
    assert seen == [{"city": "Oslo"}]
    # the model's turn goes back part for part (thought signatures compared as bytes: the SDK re-encodes)
    received = wire.response(0)["candidates"][0]["content"]["parts"]
    assert as_read_by_vendor(contents[1]["parts"]) == as_read_by_vendor(received)
    assert (
        contents[2]["role"] == "user" and '<tool_result name="get_weather"' in contents[2]["parts"][0]["text"]
    )
    assert [e["repair"] for e in repairs(session)] == ["scavenge"]


def test_gemini_offers_the_flat_schema_and_the_handler_gets_nested_arguments(wire: Wire) -> None:
    from google.genai import types

    from reasonstate.testing.gemini import GeminiEmulator

    with GeminiEmulator() as emu:
        emu.script.extend(
            [
                ModelAction.call(ToolCallSpec("ship", FLAT_ARGS), reasoning="Ship it."),
                ModelAction.answer("Shipped.", reasoning="Done."),
            ]
        )
        seen: list[Any] = []
        client = emu.client(
            http_options=types.HttpOptions(base_url=emu.base_url, api_version="v1", httpx_client=wire.http)
        )
        session = rs.Session(
            client,
            model="gemini-3-flash",
            tools=[ship_tool(seen)],
            thinking_config={"include_thoughts": True},
        )
        session.run("Ship A1 to Ann, Paris")
        first, second = (json.loads(r.body) for r in emu.requests)
    assert seen == [NESTED_ARGS]
    declaration = first["tools"][0]["functionDeclarations"][0]
    assert declaration["parameters_json_schema"] == OFFERED
    assert first["tools"] == second["tools"]
    received = wire.response(0)["candidates"][0]["content"]["parts"]
    assert as_read_by_vendor(second["contents"][1]["parts"]) == as_read_by_vendor(received)
    assert [e["repair"] for e in repairs(session)] == ["flatten"]


def test_responses_a_json_call_in_the_text_is_run_and_the_items_go_back_as_received(wire: Wire) -> None:
    with OpenAIResponsesEmulator() as emu:
        emu.script.extend(
            [
                ModelAction.answer('{"name": "get_weather", "arguments": {"city": "Oslo"}}', reasoning="r"),
                ModelAction.answer("Cold.", reasoning="Done."),
            ]
        )
        weather, seen = recording(WEATHER, "cold")
        session = rs.Session(emu.client(http_client=wire.http), model="gpt-5.5", tools=[weather], store=False)
        assert session.run("Weather in Oslo?").text == "Cold."
        second = json.loads(emu.requests[1].body)
    assert seen == [{"city": "Oslo"}]
    output = wire.response(0)["output"]
    replayed = second["input"][1 : 1 + len(output)]
    assert [{k: v for k, v in item.items() if k != "status"} for item in replayed] == [
        {k: v for k, v in item.items() if k != "status"} for item in output
    ]
    assert any(item.get("encrypted_content") for item in replayed)  # the opaque item went back as received
    assert second["input"][-1]["role"] == "user"
    assert not any(item.get("type") in ("function_call", "function_call_output") for item in second["input"])


def test_async_run_repairs_the_same_way(deepseek: OpenAIChatEmulator) -> None:
    import asyncio

    deepseek.script.extend(
        [
            ModelAction.call(
                ToolCallSpec("ship", raw_arguments='{"sku":"A1","ship_to.address.city":"Paris"'),
                reasoning="r",
            ),
            ModelAction.answer("Let me read.", reasoning=DSML),
            ModelAction.answer("Done.", reasoning="r"),
        ]
    )
    read, seen = recording(READ, "x")

    async def main() -> rs.AsyncSession:
        session = rs.AsyncSession(
            deepseek.async_client(),
            model="deepseek-v4-pro",
            dialect="deepseek",
            tools=[ship_tool(seen), read],
        )
        assert (await session.run("Ship A1 to Paris, then read my notes")).text == "Done."
        return session

    session = asyncio.run(main())
    assert seen == [
        {"sku": "A1", "ship_to": {"address": {"city": "Paris"}}},
        {"path": "notes.md", "limit": 20},
    ]
    events = [dict(e.data) for e in session.trace.of_kind(EventKind.TOOL_REPAIRED)]
    assert [e["repair"] for e in events] == ["arguments_completed", "flatten", "scavenge"]
    assert events[0]["added"] == "}"


def test_flatten_off_survives_a_snapshot(deepseek: OpenAIChatEmulator) -> None:
    session = rs.Session(
        deepseek.client(),
        model="deepseek-v4-pro",
        dialect="deepseek",
        tools=[rs.Tool(name="ship", parameters=ORDER, flatten=False)],
    )
    restored = rs.Session.restore(session.snapshot(), deepseek.client())
    (tool,) = restored.prefix.tools
    assert tool.flatten is False and tool.offered_parameters == ORDER
    assert restored.prefix.fingerprint == session.prefix.fingerprint


def test_a_repair_is_an_otel_event_naming_the_call_and_the_repair_never_the_arguments(
    deepseek: OpenAIChatEmulator,
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from reasonstate.export.otel import OTelExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    deepseek.script.extend(
        [
            ModelAction.call(
                ToolCallSpec("get_weather", raw_arguments='{"city": "Secretville"'), reasoning="r"
            ),
            ModelAction.answer("Sunny.", reasoning="r"),
        ]
    )
    weather = rs.Tool(name="get_weather", parameters=dict(WEATHER.parameters), handler=lambda **kw: "sunny")
    session = rs.Session(
        deepseek.client(),
        model="deepseek-v4-pro",
        dialect="deepseek",
        tools=[weather],
        exporters=[OTelExporter(provider)],
    )
    session.run("Weather?")
    session.close()
    call_id = session.history.turns[0].steps[0].tool_calls[0].id
    events = [
        e for s in spans.get_finished_spans() for e in s.events if e.name == "reasonstate.tool.repaired"
    ]
    assert [dict(e.attributes or {}) for e in events] == [
        {
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": call_id,
            "reasonstate.tool.repair": "arguments_completed",
            "reasonstate.tool.repair.added": "}",
        }
    ]
    provider.shutdown()


# -- properties: for every cut of every object ------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 100000),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


def _within(part: Any, whole: Any) -> bool:
    """``part`` is ``whole`` with trailing members of its objects and arrays left out: every value in it is
    one the model wrote in full."""
    if isinstance(whole, dict):
        return (
            isinstance(part, dict)
            and list(part) == list(whole)[: len(part)]
            and all(_within(part[k], whole[k]) for k in part)
        )
    if isinstance(whole, list):
        return (
            isinstance(part, list)
            and len(part) <= len(whole)
            and all(_within(p, w) for p, w in zip(part, whole, strict=False))
        )
    return part == whole and type(part) is type(whole)


@given(st.dictionaries(st.text(max_size=4), _VALUES, min_size=1, max_size=4), st.booleans(), st.data())
def test_a_completed_cut_holds_only_values_the_model_wrote_in_full(
    value: dict[str, Any], spaced: bool, data: st.DataObject
) -> None:
    text = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":"))
    cut = data.draw(st.integers(0, len(text)))
    closers = json_completion(text[:cut])
    if cut == len(text):
        assert closers is None  # nothing is missing
    if closers is not None:
        assert set(closers) <= {"}", "]"}
        assert _within(json.loads(text[:cut] + closers), value)


_FLAT_VALUES = st.one_of(st.text(max_size=5), st.integers(), st.booleans())


@given(
    st.dictionaries(
        st.from_regex(r"[a-z]{1,3}", fullmatch=True),
        _FLAT_VALUES
        | st.dictionaries(
            st.from_regex(r"[a-z]{1,3}", fullmatch=True),
            _FLAT_VALUES
            | st.dictionaries(st.from_regex(r"[a-z]{1,3}", fullmatch=True), _FLAT_VALUES, min_size=1),
            min_size=1,
        ),
        max_size=4,
    )
)
def test_nesting_the_flat_form_of_any_nested_arguments_gives_them_back(arguments: dict[str, Any]) -> None:
    def flat(value: dict[str, Any], path: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, v in value.items():
            name = f"{path}.{key}" if path else key
            out.update(flat(v, name) if isinstance(v, dict) else {name: v})
        return out

    nested = nest_arguments(flat(arguments))
    assert nested is not None and nested[0] == arguments


def test_a_model_that_keeps_writing_calls_as_text_ends_run_at_max_steps_with_the_session_idle(
    deepseek: OpenAIChatEmulator, wire: Wire
) -> None:
    text = '{"name": "read_file", "arguments": {"path": "notes.txt"}}'
    deepseek.script.extend([ModelAction.answer(text, reasoning=f"r{i}") for i in range(3)])
    read, seen = recording(READ, "x")
    session = deepseek_session(deepseek, wire, [read])
    with pytest.raises(
        rs.errors.IllegalTransition, match="scavenged from its text and answered; the session is idle"
    ):
        session.run("Read notes", max_steps=2, storm_breaker=None)
    assert len(seen) == 2 and len(deepseek.requests) == 3
    assert session.state is rs.TurnState.IDLE
