"""Record the cache-break corpus (``cache_breaks.jsonl`` next to this file): request sequences with the
cause of each request's cache outcome known because the recorder made it happen.

Each case drives a real vendor SDK client (``anthropic``, ``openai``) against the strict emulators of
``reasonstate.testing`` and keeps every exchange as it went over the wire (URL path, request bytes, the
answer's status, ``content-type`` and ``Date`` headers and bytes), with the label the recorder knows:
``none`` (nothing to report), a divergence cause of :data:`reasonstate.cache.divergence.CAUSES` (the
recorder changed that part of the prefix), ``ttl_expired`` (the recorder let the emulator's clock pass the
vendor's cache lifetime, and the emulator forgot the entry by itself), ``provider_miss`` (the recorder
evicted the entry within the lifetime) or ``unexplained_miss`` (evicted at a time the vendor's documented
lifetime range cannot tell from expiry: OpenAI's 5 minutes to an hour). The labels come from what the
recorder did, never from the guard. ``conversation`` is the key the exchange was sent under (the caller
knows its rollouts apart), or null.

Run: ``.venv/bin/python benchmarks/corpus/record.py`` (rewrites the file; the emulators' answers carry
random ids, so a rerun differs in ids and dates, not in labels). ``benchmarks/cache_causes.py`` reads it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2

from reasonstate.testing import AnthropicEmulator, ModelAction, OpenAIResponsesEmulator, ToolCallSpec

OUT = Path(__file__).with_name("cache_breaks.jsonl")

CLAUDE = "claude-sonnet-4-6"
SYSTEM = "You are a careful travel assistant. " + "Check the weather first. " * 400
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CLOCK = {
    "name": "get_time",
    "description": "Current time in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _asks(body: Any) -> ModelAction:
    """A question gets a weather call, a tool result an answer; with thinking on, each thinks first."""
    last = (body.get("messages") or body.get("input") or [{}])[-1]
    reasoning = "Check the weather first." if body.get("thinking") else None
    if "tool_result" in str(last) or "function_call_output" in str(last):
        return ModelAction(reasoning=reasoning, text="Paris is 18C.")
    return ModelAction(
        reasoning=reasoning, tool_calls=(ToolCallSpec("get_weather", {"city": "Paris", "unit": "C"}),)
    )


class Recorder:
    """Keeps each exchange of one case, with the label and conversation key the case gives it."""

    def __init__(self) -> None:
        self.exchanges: list[dict[str, Any]] = []
        self.label = "none"
        self.conversation: str | None = None

    def hook(self, response: httpx2.Response) -> None:
        response.read()
        self.exchanges.append(
            {
                "path": response.request.url.path,
                "request": response.request.content.decode(),
                "status": response.status_code,
                "headers": {
                    k: response.headers[k] for k in ("content-type", "date") if k in response.headers
                },
                "response": response.content.decode(),
                "conversation": self.conversation,
                "expected": self.label,
            }
        )
        self.label = "none"

    def http(self) -> httpx2.Client:
        return httpx2.Client(event_hooks={"response": [self.hook]})


# -- Anthropic -------------------------------------------------------------------------------------------


def _kw(ttl: str | None = None, system: str = SYSTEM, tools: list[Any] | None = None, **extra: Any) -> Any:
    control: dict[str, Any] = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
    return {
        "model": CLAUDE,
        "max_tokens": 1024,
        "system": [{"type": "text", "text": system, "cache_control": control}],
        "tools": copy.deepcopy(tools if tools is not None else [WEATHER]),
        **extra,
    }


def _turn(client: Any, kw: dict[str, Any], question: str = "Paris or Rome: which is warmer?") -> list[Any]:
    """The first request of a chain; returns the history for the second (answer and tool result)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": question}]
    first = client.messages.create(messages=history, **kw)
    history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
    call = next(b for b in first.content if b.type == "tool_use")
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]}
    )
    return history


Case = Callable[[AnthropicEmulator, Any, Recorder], None]
CASES: dict[str, tuple[str, Case]] = {}


def case(note: str) -> Callable[[Case], Case]:
    def add(fn: Case) -> Case:
        CASES[fn.__name__] = (note, fn)
        return fn

    return add


def _then(
    label: str, kw2: dict[str, Any] | None = None, edit: Callable[[list[Any]], None] | None = None
) -> Case:
    def run(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
        history = _turn(client, _kw())
        if edit is not None:
            edit(history)
        rec.label = label
        client.messages.create(messages=history, **(kw2 if kw2 is not None else _kw()))

    return run


@case("a tool chain whose second request extends the first")
def clean_chain(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    _then("none")(emu, client, rec)


@case("5 minutes and 1 second between the requests: the 5m entry expired on its own")
def ttl_expired_5m(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    emu.advance(301)
    rec.label = "ttl_expired"
    client.messages.create(messages=history, **_kw())


@case("4 minutes between the requests: the entry still read (a time-based detector flags it)")
def gap_within_5m(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    emu.advance(240)
    client.messages.create(messages=history, **_kw())


@case("evicted 30 seconds after it was written")
def provider_miss_5m(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    emu.advance(30)
    emu.clear_cache()
    rec.label = "provider_miss"
    client.messages.create(messages=history, **_kw())


@case("a 1h breakpoint 30 minutes later: still read")
def gap_within_1h(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw("1h"))
    emu.advance(1800)
    client.messages.create(messages=history, **_kw("1h"))


@case("a 1h breakpoint evicted 10 minutes later")
def provider_miss_1h(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw("1h"))
    emu.advance(600)
    emu.clear_cache()
    rec.label = "provider_miss"
    client.messages.create(messages=history, **_kw("1h"))


@case("a 1h breakpoint 61 minutes later: expired on its own")
def ttl_expired_1h(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw("1h"))
    emu.advance(3660)
    rec.label = "ttl_expired"
    client.messages.create(messages=history, **_kw("1h"))


@case("the clock line of the system prompt moved on a minute")
def timestamp(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw(system="Now: 2026-12-01 03:40. " + SYSTEM))
    rec.label = "timestamp_in_prefix"
    client.messages.create(messages=history, **_kw(system="Now: 2026-12-01 03:41. " + SYSTEM))


@case("the system prompt gained a sentence")
def system_edit(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    rec.label = "system_changed"
    client.messages.create(messages=history, **_kw(system="Be brief. " + SYSTEM))


@case("the same two tools in the other order")
def tools_order(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw(tools=[WEATHER, CLOCK]))
    rec.label = "tools_reordered"
    client.messages.create(messages=history, **_kw(tools=[CLOCK, WEATHER]))


@case("a tool definition with its keys in another order (a framework re-serialized it)")
def tool_keys(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    rec.label = "tool_schema_reserialized"
    client.messages.create(messages=history, **_kw(tools=[dict(reversed(list(WEATHER.items())))]))


@case("a tool added in the middle of the chain")
def tool_added(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    rec.label = "tools_changed"
    client.messages.create(messages=history, **_kw(tools=[WEATHER, CLOCK]))


@case("the next request goes to another model")
def model_switch(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    rec.label = "model_changed"
    client.messages.create(messages=history, **{**_kw(), "model": "claude-sonnet-4-5"})


@case("tool_choice set on the second request")
def option_added(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    rec.label = "options_changed"
    client.messages.create(messages=history, **_kw(tool_choice={"type": "auto"}))


@case("only delivery knobs changed (max_tokens, stop_sequences): not part of the cache key")
def sampling_only(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    client.messages.create(messages=history, **{**_kw(stop_sequences=["END"]), "max_tokens": 2048})


@case(
    "the tool call's input went back faithfully once, then with its keys in another order (a framework "
    "re-serialized it when the turn closed)"
)
def arguments(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    second = client.messages.create(messages=history, **_kw())
    history.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]}
    )
    history.append({"role": "user", "content": "And tomorrow?"})
    block = next(b for b in history[1]["content"] if b["type"] == "tool_use")
    block["input"] = dict(reversed(list(block["input"].items())))
    rec.label = "arguments_reserialized"
    client.messages.create(messages=history, **_kw())


@case("after a closed turn, the next question goes without the first answer's thinking block")
def thinking_dropped(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    kw = _kw(thinking={"type": "enabled", "budget_tokens": 2048})
    kw["max_tokens"] = 4096
    history = _turn(client, kw)
    second = client.messages.create(messages=history, **kw)
    history.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]}
    )
    history.append({"role": "user", "content": "And tomorrow?"})
    history[1]["content"] = [b for b in history[1]["content"] if b["type"] != "thinking"]
    rec.label = "reasoning_dropped"
    client.messages.create(messages=history, **kw)


@case("the first question was edited in the history")
def history_edit(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw())
    history[0] = {"role": "user", "content": "Rome or Paris: which is warmer?"}
    rec.label = "history_rewritten"
    client.messages.create(messages=history, **_kw())


@case("a second conversation on the same system prompt and tools: no break")
def new_conversation(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    _turn(client, _kw())
    client.messages.create(messages=[{"role": "user", "content": "And Madrid?"}], **_kw())


@case("a prompt below the minimum cacheable length: nothing read, nothing predicted")
def below_minimum(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    history = _turn(client, _kw(system="Be brief."))
    client.messages.create(messages=history, **_kw(system="Be brief."))


@case("two rollouts of one prompt interleaved on one client, each under its conversation key")
def rollouts(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    histories = []
    for n in range(2):
        rec.conversation = f"rollout-{n}"
        histories.append(_turn(client, _kw()))
    for n, history in enumerate(histories):
        rec.conversation = f"rollout-{n}"
        client.messages.create(messages=history, **_kw())


@case(
    "the same two rollouts without a key: on the wire, rollout 1's second request is what a conversation "
    "rewriting its history right after its first request sends (see thinking_dropped): the guard cannot "
    "tell them apart, and names a rewrite that is not one (the case the conversation key is for)"
)
def rollouts_unkeyed(emu: AnthropicEmulator, client: Any, rec: Recorder) -> None:
    histories = [_turn(client, _kw()) for _ in range(2)]
    for history in histories:
        client.messages.create(messages=history, **_kw())


# -- OpenAI Responses: a lifetime the vendor documents as a range ------------------------------------------

RESPONSES_CASES: dict[str, tuple[str, str | None, int, str, str]] = {
    "responses_provider_miss": ("gpt-5", None, 120, "provider_miss", "evicted 2 minutes later (alive 5)"),
    "responses_between": ("gpt-5", "in_memory", 1200, "unexplained_miss", "in memory, evicted at 20 min"),
    "responses_ttl_expired": ("gpt-5", "in_memory", 3700, "ttl_expired", "in memory, gone at 62 min"),
    "responses_unnamed": ("gpt-5", None, 7200, "unexplained_miss", "retention unnamed: 1 h or 24 h"),
    "responses_24h_expired": ("gpt-5.5", None, 86500, "ttl_expired", "gpt-5.5 keeps 24 h (echoed): gone"),
}


def _responses(model: str, retention: str | None, gap: int, label: str, rec: Recorder) -> None:
    with OpenAIResponsesEmulator(_asks) as emu, emu.client(http_client=rec.http()) as client:
        kwargs: dict[str, Any] = {
            "model": model,
            "instructions": SYSTEM,
            "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER["input_schema"]}],
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if retention is not None:
            kwargs["prompt_cache_retention"] = retention
        items: list[Any] = [{"role": "user", "content": "Paris or Rome: which is warmer?"}]
        first = client.responses.create(input=items, **kwargs)
        items.extend(i.model_dump(exclude_none=True) for i in first.output)
        call = next(i for i in first.output if i.type == "function_call")
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": "18C"})
        emu.advance(gap)
        if label != "ttl_expired":  # past the retention the emulator forgets the prompt by itself
            emu.clear_cache()
        rec.label = label
        client.responses.create(input=items, **kwargs)


def cases() -> Iterator[dict[str, Any]]:
    for name, (note, fn) in CASES.items():
        rec = Recorder()
        with AnthropicEmulator(_asks) as emu, emu.client(http_client=rec.http()) as client:
            fn(emu, client, rec)
        yield {"case": name, "api": "messages", "note": note, "exchanges": rec.exchanges}
    for name, (model, retention, gap, label, note) in RESPONSES_CASES.items():
        rec = Recorder()
        _responses(model, retention, gap, label, rec)
        yield {"case": name, "api": "responses", "note": note, "exchanges": rec.exchanges}


def main() -> None:
    lines = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases()]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {len(lines)} cases, {sum(len(json.loads(x)['exchanges']) for x in lines)} requests")


if __name__ == "__main__":
    main()
