"""Routes: one model family served by several platforms (the vendor's own API, Bedrock, Vertex AI, Azure).

A continuation payload is bound to (platform, API, model): a platform never receives what another issued
(docs/protocols.md §10.1). Every test drives the real SDK client of each route over HTTP against its
emulator; the oracles are the emulators' own checks (each platform signs with its own secret and refuses
another's signature with its error shape) and the opaque strings found in the bodies sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction, ToolCallSpec
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator

WEATHER = rs.Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def chain(tag: str) -> list[ModelAction]:
    """reasoning → a tool call; reasoning → the answer."""
    return [
        ModelAction(
            reasoning=f"{tag}: I need the weather first.",
            tool_calls=(ToolCallSpec("get_weather", {"city": "Paris"}),),
        ),
        ModelAction(reasoning=f"{tag}: now I can answer.", text=f"{tag}: Paris is mild."),
    ]


def run_chain(session: rs.Session, question: str) -> rs.Reply:
    reply = session.send(question)
    while reply.tool_calls:
        reply = session.send_tool_results({c.id: {"temp_c": 18} for c in reply.tool_calls})
    return reply


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


RESPONSES_OPTIONS: dict[str, Any] = {
    "reasoning": {"effort": "medium", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
}


def resource(emulator: Any) -> str:
    """An Azure emulator's resource, as a client's base URL names it: its host and port."""
    return emulator.base_url.partition("://")[2].rstrip("/")


def encrypted_blobs(bodies: list[bytes]) -> list[str]:
    """Every ``encrypted_content`` in the Responses request bodies, in order."""
    return [
        item["encrypted_content"]
        for body in bodies
        for item in json.loads(body).get("input", [])
        if isinstance(item, dict) and item.get("encrypted_content")
    ]


def test_azure_encrypted_reasoning_never_reaches_openai_after_a_switch(stack: ExitStack) -> None:
    """The bug of issue 27 ("Found today"): a session on ``openai.AzureOpenAI`` kept its Azure-issued
    ``encrypted_content`` in the chain and, after ``switch(openai.OpenAI(...), model="gpt-5.5",
    store=False)``, sent it to the first-party API, which cannot verify it (400 invalid_encrypted_content).
    Same vendor, API and model: only the platform differs, and it decides."""
    azure = stack.enter_context(OpenAIResponsesEmulator(chain("A"), platform="azure"))
    first = stack.enter_context(OpenAIResponsesEmulator(chain("B")))
    session = rs.Session(azure.client(), model="gpt-5.5", tools=[WEATHER], **RESPONSES_OPTIONS)
    assert run_chain(session, "Paris weather?").text == "A: Paris is mild."
    issued = encrypted_blobs([r.body for r in azure.requests])
    assert issued, "the Azure chain replayed its encrypted reasoning inside the chain (store=False)"
    assert all(r.path == "/openai/responses" and "api-key" in r.headers for r in azure.requests)

    session.switch(first.client(), model="gpt-5.5", **RESPONSES_OPTIONS)
    assert run_chain(session, "And tomorrow?").text == "B: Paris is mild."  # no 400
    sent = b"".join(r.body for r in first.requests).decode()
    assert not [blob for blob in issued if blob in sent], "an Azure-issued blob reached api.openai.com"
    assert "Paris weather?" in sent and "A: Paris is mild." in sent  # the earlier turn, canonically
    changed = session.trace.of_kind(EventKind.VENDOR_CHANGED)
    assert [(e.data["old"].get("platform"), e.data["new"].get("platform")) for e in changed] == [
        ("azure", None)
    ]
    assert session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)


def test_the_first_party_emulator_refuses_an_azure_blob() -> None:
    """The oracle the test above stands on: each platform verifies only its own ``encrypted_content``."""
    with (
        OpenAIResponsesEmulator(platform="azure") as azure,
        OpenAIResponsesEmulator() as first,
    ):
        blob = azure._seal(item_id="rs_1", model="gpt-5.5", reasoning="r")
        assert azure.verify_encrypted_content(blob, model="gpt-5.5")
        assert not first.verify_encrypted_content(blob, model="gpt-5.5")


def test_the_platform_comes_from_the_client() -> None:
    """docs/protocols.md §10.2: the client's type (google-genai: its ``vertexai`` flag) names the platform."""
    import anthropic
    import openai
    from google import genai

    from reasonstate.adapters import adapter_for, platform_for

    aws = {"aws_access_key": "AKIDEXAMPLE", "aws_secret_key": "secret", "aws_region": "us-east-1"}
    gcp = {"region": "us-east5", "project_id": "p", "access_token": "token"}
    azure = {"api_key": "k", "api_version": "2025-04-01-preview", "azure_endpoint": "http://127.0.0.1:9"}
    cases = [
        (anthropic.Anthropic(api_key="k"), "messages", "first-party"),
        (anthropic.AnthropicBedrock(**aws), "messages", "bedrock"),
        (anthropic.AsyncAnthropicBedrock(**aws), "messages", "bedrock"),
        (anthropic.AnthropicVertex(**gcp), "messages", "vertex"),
        (anthropic.AsyncAnthropicVertex(**gcp), "messages", "vertex"),
        (openai.OpenAI(api_key="k"), "responses", "first-party"),
        (openai.AzureOpenAI(**azure), "responses", "azure"),
        (openai.AsyncAzureOpenAI(**azure), "responses", "azure"),
        (genai.Client(api_key="k"), "generate_content", "first-party"),
        (genai.Client(vertexai=True, api_key="k"), "generate_content", "vertex"),
        (genai.Client(vertexai=True, api_key="k").aio, "generate_content", "vertex"),
    ]
    for client, api, platform in cases:
        adapter = adapter_for(client)
        assert (adapter.api, adapter.platform, platform_for(client)) == (api, platform, platform), client
    chat = adapter_for(openai.AzureOpenAI(**azure), api="chat")
    assert (chat.api, chat.platform) == ("chat", "azure")


def test_the_azure_emulator_wants_an_api_key_header() -> None:
    """docs/protocols.md §10.3: Azure reads ``api-key``; a wrong one is Azure's 401 body, not OpenAI's."""
    import openai

    with OpenAIResponsesEmulator([ModelAction.answer("hi")], platform="azure") as azure:
        with pytest.raises(openai.AuthenticationError) as caught:
            azure.client(api_key="wrong").responses.create(model="gpt-5.5", input="hi")
        assert caught.value.body == {
            "code": "401",
            "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
            "provide a valid key for an active subscription and use a correct regional API endpoint for "
            "your resource.",
        }
        assert azure.client().responses.create(model="gpt-5.5", input="hi").output_text == "hi"
        sent = azure.requests[-1]
        assert sent.headers["api-key"] == "test-key" and sent.query["api-version"] == ["2025-04-01-preview"]


def test_a_snapshot_names_its_platform_and_restores_only_there(stack: ExitStack) -> None:
    """A snapshot of a session on Azure carries ``platform``; restoring it on an ``openai.OpenAI`` client is
    refused (its payloads would not verify there), on an Azure client its next request is byte-identical."""
    azure = stack.enter_context(OpenAIResponsesEmulator(chain("A"), platform="azure"))
    session = rs.Session(azure.client(), model="gpt-5.5", tools=[WEATHER], **RESPONSES_OPTIONS)
    run_chain(session, "Paris weather?")
    snap = session.snapshot()
    assert snap.platform == "azure"
    data = json.loads(snap.model_dump_json())
    # bound to the Azure resource that issued them: its host (docs/protocols.md §10.1)
    assert {tuple(o[5:]) for o in data["history"]["origins"]} == {(f"azure#{resource(azure)}",)}
    with pytest.raises(rs.IllegalTransition, match="openai/responses@azure"):
        rs.Session.restore(snap.model_dump_json(), stack.enter_context(OpenAIResponsesEmulator()).client())
    azure.script.extend([ModelAction.answer("again", reasoning="r")] * 2)
    restored = rs.Session.restore(snap.model_dump_json(), azure.client())
    restored.send("Once more?")
    session.send("Once more?")
    assert azure.requests[-1].body == azure.requests[-2].body


THINKING: dict[str, Any] = {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}


class Route:
    """One route of a model family: its emulator (started on ``stack``), a real client, the model id as
    that platform names it, and the session options."""

    def __init__(self, name: str, stack: ExitStack) -> None:
        self.name = name
        family, _, platform = name.partition("@")
        self.family = family
        if family == "anthropic":
            self.emulator: Any = AnthropicEmulator(platform=platform or "anthropic")
            self.model = {
                "": "claude-sonnet-4-5-20250929",
                "bedrock": "anthropic.claude-sonnet-4-5-20250929-v1:0",
                "vertex": "claude-sonnet-4-5@20250929",
                "deepseek": "deepseek-v4-pro",
                "kimi": "kimi-k2.6",
                "minimax": "MiniMax-M2.7",
            }[platform]
            self.options: dict[str, Any] = dict(THINKING)
            if platform in ("deepseek", "kimi", "minimax"):
                self.options["dialect"] = platform
        elif family == "gemini":
            self.emulator = GeminiEmulator(platform=platform or "gemini")
            self.model = "gemini-3-flash"
            self.options = {"thinking_config": {"include_thoughts": True}}
        elif family == "responses":
            self.emulator = OpenAIResponsesEmulator(platform=platform or "openai")
            self.model = "gpt-5.5"
            self.options = dict(RESPONSES_OPTIONS)
        else:
            self.emulator = OpenAIChatEmulator(platform=platform or "openai")
            self.model = "gpt-5.5"
            self.options = {"api": "chat"}
        stack.enter_context(self.emulator)
        self.client = self.emulator.client()

    def bodies(self) -> list[bytes]:
        return [r.body for r in self.emulator.requests]


FAMILIES = {
    "anthropic": ("anthropic", "anthropic@bedrock", "anthropic@vertex"),
    "responses": ("responses", "responses@azure"),
    "chat": ("chat", "chat@azure"),
    "gemini": ("gemini", "gemini@vertex"),
    "compatible": ("anthropic", "anthropic@deepseek", "anthropic@minimax"),
}
PAIRS = [(a, b) for routes in FAMILIES.values() for a in routes for b in routes if a != b]


def opaque_values(session: rs.Session) -> list[str]:
    """Every opaque string of the session's payloads: signatures, redacted data, encrypted content (item
    ids are left out: two emulators mint the same ``rs_emu_001``)."""
    out: list[str] = []
    for c in session.continuation:
        value = c.value
        for key in ("signature", "data", "encrypted_content", "thoughtSignature"):
            field = value.get(key) if hasattr(value, "get") else None
            if isinstance(field, str) and len(field) >= 8:
                out.append(field)
    return out


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
def test_every_route_switch_of_one_family_sends_nothing_foreign(
    stack: ExitStack, first: str, second: str
) -> None:
    """Issue 27 "Must show": switching among all routes of one model family (every ordered pair) never
    sends a foreign payload; the receiving emulator would refuse one (each platform signs with its own
    key) with its 400, so the chain completing is the oracle, and no opaque string of the first route is
    in any body the second received. The first route's turn is there, rendered canonically."""
    a, b = Route(first, stack), Route(second, stack)
    a.emulator.script.extend(chain("A"))
    b.emulator.script.extend(chain("B"))
    session = rs.Session(a.client, model=a.model, system="You are terse.", tools=[WEATHER], **a.options)
    assert run_chain(session, "Paris weather?").text == "A: Paris is mild."
    secrets = opaque_values(session)
    if a.family != "chat" and first != "anthropic@deepseek":  # unsigned: bound by the platform alone
        assert secrets, "the first route left opaque continuation to protect"

    session.switch(b.client, model=b.model, **b.options)
    assert run_chain(session, "And tomorrow?").text == "B: Paris is mild."  # no 400 on the way
    sent = b.bodies()
    assert len(sent) == 2
    for body in sent:
        text = body.decode()
        assert not [x for x in secrets if x in text], "a payload of another platform reached this one"
        assert "Paris weather?" in text and "A: Paris is mild." in text
    withheld = session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)
    assert withheld, "the first route's payloads were withheld, and the trace says so"


def test_bedrock_to_first_party_fallback_sends_no_bedrock_thinking(stack: ExitStack) -> None:
    """pydantic/pydantic-ai#3757: after a fallback from Claude on Bedrock to the first-party API the
    Bedrock-signed thinking went along and the request failed ("final assistant message must start with a
    thinking block" once the blocks were stripped inside the chain). Here the session switches between
    turns, the first-party API gets no Bedrock signature, its own chain carries its own thinking, no 400;
    and back to Bedrock, the first-party signatures stay home too."""
    bedrock, first = Route("anthropic@bedrock", stack), Route("anthropic", stack)
    bedrock.emulator.script.extend(chain("A") + chain("C"))
    first.emulator.script.extend(chain("B"))
    session = rs.Session(bedrock.client, model=bedrock.model, tools=[WEATHER], **bedrock.options)
    run_chain(session, "Paris weather?")
    on_bedrock = opaque_values(session)
    session.switch(first.client, model=first.model, **first.options)
    assert run_chain(session, "And tomorrow?").text == "B: Paris is mild."
    second = json.loads(first.bodies()[-1])
    last = second["messages"][-2]  # the assistant message of the open chain: its own thinking first
    assert last["role"] == "assistant" and last["content"][0]["type"] == "thinking"
    assert not [x for x in on_bedrock if x in b"".join(first.bodies()).decode()]
    on_first = [x for x in opaque_values(session) if x not in on_bedrock]
    session.switch(bedrock.client, model=bedrock.model, **bedrock.options)
    assert run_chain(session, "And the day after?").text == "C: Paris is mild."
    back = b"".join(bedrock.bodies()[2:]).decode()
    assert on_first and not [x for x in on_first if x in back]
    assert [x for x in on_bedrock if x in back], "Bedrock's own earlier thinking goes back to Bedrock"


def _platform_emulator(name: str, answers: list[dict[str, Any]]) -> Any:
    """The emulator of a Claude route, deterministic (the same request gets the same answer, streamed or
    not), recording each answer as it sent it (the oracle of byte-exact replay)."""

    def keep(message: dict[str, Any]) -> dict[str, Any]:
        answers.append(json.loads(json.dumps(message)))
        return message

    return AnthropicEmulator(chain("A"), platform=name, deterministic=True, transform=keep)


def _claude_chain(name: str, model: str, stack: ExitStack, *, stream: bool) -> tuple[Any, rs.Session, list]:
    answers: list[dict[str, Any]] = []
    emulator = stack.enter_context(_platform_emulator(name, answers))
    session = rs.Session(emulator.client(), model=model, tools=[WEATHER], stream=stream, **THINKING)
    assert run_chain(session, "Paris weather?").text == "A: Paris is mild."
    return emulator, session, answers


def _assert_claude_route(name: str, model: str, stack: ExitStack, *, streams: bool) -> None:
    emulator, session, answers = _claude_chain(name, model, stack, stream=False)
    assert "model" not in json.loads(emulator.requests[0].body)  # in the path on both platforms (§10.4/5)
    # byte-exact continuation: the open chain's assistant message is the first answer's content as sent
    second = json.loads(emulator.requests[1].body)
    replayed = second["messages"][1]["content"]
    assert [json.dumps(b, separators=(",", ":")) for b in replayed] == [
        json.dumps(b, separators=(",", ":")) for b in answers[0]["content"]
    ]
    assert replayed[0]["type"] == "thinking" and replayed[0]["signature"]
    if streams:
        _, streamed, _ = _claude_chain(name, model, stack, stream=True)
        assert streamed.continuation == session.continuation  # payload bytes, provenance and platform
        assert [s.parts for s in streamed.history.turns[0].steps] == [
            s.parts for s in session.history.turns[0].steps
        ]
    assert {c.platform for c in session.continuation} == {name}
    # snapshot / restore: the next request is byte-identical
    snap = session.snapshot()
    assert snap.platform == name
    emulator.script.extend([ModelAction.answer("again", reasoning="r")] * 2)
    restored = rs.Session.restore(snap.model_dump_json(), emulator.client())
    assert restored.continuation == session.continuation
    restored.send("Once more?")
    session.send("Once more?")
    assert emulator.requests[-1].body == emulator.requests[-2].body


def test_a_bedrock_chain_through_the_real_sdk_is_byte_exact(stack: ExitStack) -> None:
    """``anthropic.AnthropicBedrock`` (a Bedrock API key) against the Bedrock emulator: the signed chain
    goes back byte for byte, streamed (``invoke-with-response-stream``: the AWS event stream) and
    unstreamed equal in state, and a snapshot restores to the same next request."""
    _assert_claude_route("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0", stack, streams=True)


def test_a_vertex_chain_through_the_real_sdk_is_byte_exact(stack: ExitStack) -> None:
    """``anthropic.AnthropicVertex`` (a static access token) against the Vertex emulator: byte-exact chain,
    streamed (``:streamRawPredict``) and unstreamed equal in state, snapshot/restore byte-identical."""
    _assert_claude_route("vertex", "claude-sonnet-4-5@20250929", stack, streams=True)


def test_platform_model_ids_and_errors() -> None:
    """docs/protocols.md §10.4, §10.5: each platform's model ids, and its own error shapes."""
    import anthropic

    from reasonstate.testing.anthropic import bedrock_model, vertex_model

    assert bedrock_model("anthropic.claude-sonnet-4-5-20250929-v1:0") == "claude-sonnet-4-5-20250929"
    assert bedrock_model("us.anthropic.claude-opus-4-6-v1") == "claude-opus-4-6"
    assert bedrock_model("claude-sonnet-4-5") is None
    assert vertex_model("claude-sonnet-4-5@20250929") == "claude-sonnet-4-5-20250929"
    assert vertex_model("anthropic.claude-sonnet-4-5") is None
    request: dict[str, Any] = {"max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    with AnthropicEmulator(platform="bedrock") as bedrock:
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            bedrock.client(api_key="wrong").messages.create(model="anthropic.claude-opus-4-6-v1", **request)
        assert denied.value.body == {"message": "The security token included in the request is invalid."}
        with pytest.raises(anthropic.BadRequestError) as invalid:
            bedrock.client().messages.create(model="anthropic.claude-nonesuch-v1:0", **request)
        assert invalid.value.body == {"message": "The provided model identifier is invalid."}
    with AnthropicEmulator(platform="vertex") as vertex:
        with pytest.raises(anthropic.AuthenticationError) as unauthenticated:
            vertex.client(access_token="wrong").messages.create(model="claude-opus-4-6", **request)
        assert isinstance(unauthenticated.value.body, dict)
        assert unauthenticated.value.body["error"]["status"] == "UNAUTHENTICATED"


GUARDED = (
    "anthropic@bedrock",
    "anthropic@vertex",
    "responses@azure",
    "chat@azure",
    "gemini@vertex",
    "anthropic@deepseek",
    "anthropic@kimi",
    "anthropic@minimax",
)


@pytest.mark.parametrize("name", GUARDED)
def test_guard_mode_reads_each_platform_route(stack: ExitStack, name: str) -> None:
    """``rs.instrument`` on a platform's client: the guard knows the API from the platform's URL path
    (Bedrock's ``/model/{id}/invoke``, Vertex AI's ``:rawPredict`` and ``publishers/google`` paths, Azure's
    ``/openai/...``), the model from the path where the body has none, and a chain that carries its
    continuation raises no warning."""
    route = Route(name, stack)
    route.emulator.script.extend(chain("A"))
    guard = rs.instrument(route.client)
    session = rs.Session(route.client, model=route.model, tools=[WEATHER], **route.options)
    run_chain(session, "Paris weather?")
    records = guard.records
    api = {"anthropic": "messages", "responses": "responses", "chat": "chat", "gemini": "generate_content"}
    assert [r.api for r in records] == [api[route.family]] * 2
    assert [r.path for r in records] == [r.path for r in route.emulator.requests]
    assert all(r.model == route.model for r in records), [r.model for r in records]
    assert [r.warnings for r in records] == [(), ()]
    assert records[1].divergence is None  # the second request extends the first


COMPATIBLE = {"deepseek": "deepseek-v4-pro", "kimi": "kimi-k2.6", "minimax": "MiniMax-M2.7"}


@pytest.mark.parametrize("dialect", sorted(COMPATIBLE))
def test_a_compatible_endpoint_chain_is_byte_exact_and_keeps_what_it_requires(
    stack: ExitStack, dialect: str
) -> None:
    """``dialect=`` on an ``anthropic.Anthropic`` client for DeepSeek's, Kimi's and MiniMax's
    Anthropic-compatible endpoints (docs/protocols.md §10.8): a tool chain through the real SDK, the chain's
    thinking back byte for byte (DeepSeek and Kimi: unsigned), and on DeepSeek and Kimi the earlier turn's
    tool-calling thinking kept although the policy drops reasoning (the emulator refuses it missing: the
    Reasonix note of issue 27, "replays unsigned thinking blocks from historical tool-call turns");
    streamed = unstreamed in state; snapshot/restore byte-identical."""
    from reasonstate.policies import Drop

    answers: list[dict[str, Any]] = []

    def keep(message: dict[str, Any]) -> dict[str, Any]:
        answers.append(json.loads(json.dumps(message)))
        return message

    def run(stream: bool) -> tuple[Any, rs.Session]:
        emulator = stack.enter_context(
            AnthropicEmulator(chain("A") + chain("B"), platform=dialect, deterministic=True, transform=keep)
        )
        options = {**THINKING, "dialect": dialect}
        session = rs.Session(
            emulator.client(),
            model=COMPATIBLE[dialect],
            tools=[WEATHER],
            policy=Drop(),
            stream=stream,
            **options,
        )
        run_chain(session, "Paris weather?")
        run_chain(session, "And tomorrow?")
        return emulator, session

    emulator, session = run(stream=False)
    assert {r.path for r in emulator.requests} == {"/anthropic/v1/messages"}
    second = json.loads(emulator.requests[1].body)
    assert second["messages"][1]["content"] == answers[0]["content"]  # as the endpoint sent it
    signed = answers[0]["content"][0]["signature"]
    assert (signed == "") == (dialect != "minimax")
    history = json.loads(emulator.requests[2].body)["messages"]  # turn 2, turn 1 closed and dropped
    kept = [b["type"] for b in history[1]["content"]]
    assert kept == (["thinking", "tool_use"] if dialect != "minimax" else ["tool_use"])
    assert {c.platform for c in session.continuation} == {dialect}
    _, streamed = run(stream=True)
    assert streamed.continuation == session.continuation
    snap = session.snapshot()
    assert snap.platform == dialect
    emulator.script.extend([ModelAction.answer("again", reasoning="r")] * 2)
    restored = rs.Session.restore(snap.model_dump_json(), emulator.client())
    restored.send("Once more?")
    session.send("Once more?")
    assert emulator.requests[-1].body == emulator.requests[-2].body


def test_the_deepseek_endpoint_refuses_an_earlier_tool_call_without_its_thinking() -> None:
    """The oracle of the test above (docs/protocols.md §3.3, §10.8): DeepSeek's Anthropic endpoint wants
    the thinking of every earlier tool-calling message back; left out, it is the vendor's 400."""
    import anthropic

    with AnthropicEmulator(chain("A") + chain("B"), platform="deepseek") as deepseek:
        client = deepseek.client()
        tools = [{"name": "get_weather", "description": "weather", "input_schema": WEATHER.parameters}]
        ask: dict[str, Any] = {"model": "deepseek-v4-pro", "tools": tools, **THINKING}
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Paris weather?"}]
        first = client.messages.create(messages=messages, **ask).model_dump(exclude_none=True)
        call = first["content"][-1]
        messages += [
            {"role": "assistant", "content": first["content"]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "18C"}],
            },
        ]
        answer = client.messages.create(messages=messages, **ask).model_dump(exclude_none=True)
        messages += [
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": "And tomorrow?"},
        ]
        messages[1] = {
            "role": "assistant",
            "content": [b for b in first["content"] if b["type"] != "thinking"],
        }
        with pytest.raises(anthropic.BadRequestError, match="must be passed back"):
            client.messages.create(messages=messages, **ask)


def test_a_first_party_snapshot_reads_as_before_and_one_without_platform_loads(stack: ExitStack) -> None:
    """Snapshots and stored deltas written before platforms were recorded have no ``platform`` (header)
    and five-field origins: they load as first-party, and a first-party snapshot is still written so."""
    first = stack.enter_context(OpenAIResponsesEmulator(chain("A")))
    session = rs.Session(first.client(), model="gpt-5.5", tools=[WEATHER], **RESPONSES_OPTIONS)
    run_chain(session, "Paris weather?")
    data = json.loads(session.snapshot().model_dump_json())
    assert {len(o) for o in data["history"]["origins"]} == {5}
    del data["platform"]  # as an older reasonstate wrote it: the digest did not cover it
    restored = rs.Session.restore(json.dumps(data), first.client())
    assert {c.platform for c in restored.continuation} == {"first-party"}
    assert restored.continuation == session.continuation


def test_a_stored_azure_session_loads_on_azure_in_another_worker(stack: ExitStack, tmp_path: Any) -> None:
    """The store's checkpoint carries the platform and each delta's origins name it: ``Session.load`` on
    an Azure client rebuilds the session and continues there; on a first-party client it is refused."""
    from reasonstate.store import SQLiteStore

    azure = stack.enter_context(OpenAIResponsesEmulator(chain("A"), platform="azure"))
    store = SQLiteStore(str(tmp_path / "s.db"))
    # ``store=`` is the session's store here: the Responses option keeps its default (stored responses)
    options = {"model": "gpt-5.5", "tools": [WEATHER], "reasoning": RESPONSES_OPTIONS["reasoning"]}
    session = rs.Session(azure.client(), store=store, session_id="azure-1", **options)
    run_chain(session, "Paris weather?")
    loaded = rs.Session.load(store, "azure-1", azure.client(), tools=[WEATHER])
    assert loaded.continuation == session.continuation
    assert {c.platform for c in loaded.continuation} == {f"azure#{resource(azure)}"}
    azure.script.extend([ModelAction.answer("again", reasoning="r")])
    assert loaded.send("Once more?").text == "again"  # Azure accepts what the loaded session sends
    with pytest.raises(rs.IllegalTransition):
        rs.Session.load(store, "azure-1", stack.enter_context(OpenAIResponsesEmulator()).client())


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_azure_streamed_and_async_sessions_equal_the_plain_one(stack: ExitStack, api: str) -> None:
    """``openai.AzureOpenAI`` and ``AsyncAzureOpenAI``, Responses and Chat: a tool chain streamed, and one on
    the async client, hold the same parts as the plain one (encrypted blobs aside: each answer mints its
    own), every payload bound to Azure."""
    import asyncio

    options: dict[str, Any] = dict(RESPONSES_OPTIONS) if api == "responses" else {"api": "chat"}

    def emulator() -> Any:
        made = OpenAIResponsesEmulator if api == "responses" else OpenAIChatEmulator
        return stack.enter_context(made(chain("A"), platform="azure"))

    def parts(session: Any) -> list[Any]:
        return [s.parts for t in session.history.turns for s in t.steps]

    plain = rs.Session(emulator().client(), model="gpt-5.5", tools=[WEATHER], **options)
    run_chain(plain, "Paris weather?")
    streamed = rs.Session(emulator().client(), model="gpt-5.5", tools=[WEATHER], stream=True, **options)
    run_chain(streamed, "Paris weather?")

    async def run_async() -> Any:
        session = rs.AsyncSession(emulator().async_client(), model="gpt-5.5", tools=[WEATHER], **options)
        reply = await session.send("Paris weather?")
        while reply.tool_calls:
            reply = await session.send_tool_results({c.id: {"temp_c": 18} for c in reply.tool_calls})
        return session

    on_async = asyncio.run(run_async())
    assert parts(streamed) == parts(plain) == parts(on_async)
    for session in (plain, streamed, on_async):
        # every step's provenance, payload or not (a chat message that is its parts rendered keeps none)
        held = [c for t in session.history.turns for s in t.steps for c in s.continuation]
        assert held and {c.platform.partition("#")[0] for c in held} == {"azure"}
        assert len({c.platform for c in held}) == 1  # one resource: the emulator's host


def test_a_messages_dialect_is_a_compatible_endpoint_on_a_plain_anthropic_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``dialect=`` names the endpoint (its platform); an unknown one, or one on a Bedrock client, is
    refused before anything is sent; a dialect client without a key too (the SDK would fail only later)."""
    import anthropic

    from reasonstate.adapters import adapter_for

    adapter = adapter_for(anthropic.Anthropic(api_key="k"), dialect="kimi")
    assert (adapter.api, adapter.platform) == ("messages", "kimi")
    with pytest.raises(rs.InvalidOption, match="unknown Messages dialect"):
        adapter_for(anthropic.Anthropic(api_key="k"), dialect="nonesuch")
    bedrock = anthropic.AnthropicBedrock(api_key="k", aws_region="us-east-1")
    with pytest.raises(rs.InvalidOption, match="unknown Messages dialect"):
        adapter_for(bedrock, dialect="deepseek")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    keyless = anthropic.Anthropic(api_key=None, base_url="http://127.0.0.1:9/anthropic")
    with pytest.raises(rs.MissingCredentials):
        rs.Session(keyless, model="deepseek-v4-pro", dialect="deepseek")


def test_each_claude_platform_refuses_the_others_signature_in_its_own_error_shape() -> None:
    """docs/protocols.md §10.4, §10.5: a thinking block signed on the first-party API, sent to Bedrock, is
    Bedrock's 400 ``{"message": ...}``; to Vertex AI, the Messages error envelope; and the first-party API
    refuses Bedrock's (pydantic/pydantic-ai#3757)."""
    import anthropic

    model = "claude-sonnet-4-5-20250929"
    ids = {"anthropic": model, "bedrock": "anthropic.claude-sonnet-4-5-20250929-v1:0", "vertex": model}
    with (
        AnthropicEmulator(platform="anthropic") as first,
        AnthropicEmulator(platform="bedrock") as bedrock,
        AnthropicEmulator(platform="vertex") as vertex,
    ):

        def ask(target: Any, signer: Any) -> Any:
            block = {"type": "thinking", "thinking": "t", "signature": signer.sign_thinking(model, "t")}
            messages: list[Any] = [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [block, {"type": "text", "text": "a"}]},
                {"role": "user", "content": "more"},
            ]
            with pytest.raises(anthropic.BadRequestError) as refused:
                target.client().messages.create(model=ids[target.platform], messages=messages, **THINKING)
            return refused.value.body

        invalid = "messages.1.content.0: Invalid `signature` in `thinking` block"
        assert ask(bedrock, first) == {"message": invalid}
        assert ask(vertex, first)["error"] == {"type": "invalid_request_error", "message": invalid}
        assert ask(first, bedrock)["error"] == {"type": "invalid_request_error", "message": invalid}
        assert ask(vertex, bedrock)["error"]["message"] == invalid


@pytest.mark.parametrize("name", ["anthropic@bedrock", "anthropic@vertex", "gemini@vertex"])
def test_the_async_clients_of_each_platform_hold_what_the_sync_ones_do(stack: ExitStack, name: str) -> None:
    """``AsyncAnthropicBedrock``, ``AsyncAnthropicVertex`` and google-genai's ``.aio`` on Vertex: a tool chain
    on ``rs.AsyncSession`` holds the same parts as on ``rs.Session``, every payload bound to the platform."""
    import asyncio

    sync, other = Route(name, stack), Route(name, stack)
    sync.emulator.script.extend(chain("A"))
    other.emulator.script.extend(chain("A"))
    plain = rs.Session(sync.client, model=sync.model, tools=[WEATHER], **sync.options)
    run_chain(plain, "Paris weather?")
    client = other.client.aio if other.family == "gemini" else other.emulator.async_client()

    async def run() -> Any:
        session = rs.AsyncSession(client, model=other.model, tools=[WEATHER], **other.options)
        reply = await session.send("Paris weather?")
        while reply.tool_calls:
            reply = await session.send_tool_results({c.id: {"temp_c": 18} for c in reply.tool_calls})
        return session

    on_async = asyncio.run(run())
    assert [s.parts for t in on_async.history.turns for s in t.steps] == [
        s.parts for t in plain.history.turns for s in t.steps
    ]
    platform = name.partition("@")[2]
    assert {c.platform for c in on_async.continuation} == {platform}


@pytest.mark.parametrize("name", ["gemini@vertex", "chat@azure", "responses@azure"])
def test_a_route_streams_into_the_same_state_and_restores_byte_identically(
    stack: ExitStack, name: str
) -> None:
    """Gemini on Vertex AI and Azure (Chat, Responses): a streamed chain holds the plain chain's parts, and
    a snapshot of the plain session restores to the very next request it would send."""
    plain_route, streamed_route = Route(name, stack), Route(name, stack)
    plain_route.emulator.script.extend(chain("A"))
    streamed_route.emulator.script.extend(chain("A"))
    plain = rs.Session(plain_route.client, model=plain_route.model, tools=[WEATHER], **plain_route.options)
    run_chain(plain, "Paris weather?")
    streamed = rs.Session(
        streamed_route.client,
        model=streamed_route.model,
        tools=[WEATHER],
        stream=True,
        **streamed_route.options,
    )
    run_chain(streamed, "Paris weather?")
    assert [s.parts for t in streamed.history.turns for s in t.steps] == [
        s.parts for t in plain.history.turns for s in t.steps
    ]
    snap = plain.snapshot()
    assert snap.platform == name.partition("@")[2]
    plain_route.emulator.script.extend([ModelAction.answer("again", reasoning="r")] * 2)
    restored = rs.Session.restore(snap.model_dump_json(), plain_route.client)
    restored.send("Once more?")
    plain.send("Once more?")
    assert plain_route.emulator.requests[-1].body == plain_route.emulator.requests[-2].body


BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"


def test_a_streamed_bedrock_session_restores_to_a_byte_identical_next_request(stack: ExitStack) -> None:
    """Issue 27: ``AnthropicBedrock`` streamed (``/invoke-with-response-stream``, docs/protocols.md §10.4):
    the requests go to the streaming path, the session's state equals the unstreamed one's, and a restored
    streamed session sends the same next request as the live one."""
    plain_emu, plain, _ = _claude_chain("bedrock", BEDROCK_MODEL, stack, stream=False)
    emu, streamed, _ = _claude_chain("bedrock", BEDROCK_MODEL, stack, stream=True)
    assert all(r.path.endswith("/invoke-with-response-stream") for r in emu.requests)
    assert [r.body for r in emu.requests] == [r.body for r in plain_emu.requests]
    assert streamed.continuation == plain.continuation and streamed.history == plain.history
    emu.script.extend([ModelAction.answer("again", reasoning="r")] * 2)
    restored = rs.Session.restore(streamed.snapshot().model_dump_json(), emu.client())
    assert restored.send("Once more?").text == streamed.send("Once more?").text == "again"
    assert emu.requests[-1].body == emu.requests[-2].body


def _frame(event_type: str, payload: bytes) -> bytes:
    """One AWS event-stream message, written from the format's documentation (docs/protocols.md §11.4)."""
    import binascii
    import struct

    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json")):
        headers += (
            bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
        )
    headers += b"\x0d:message-type\x07\x00\x05event"
    prelude = struct.pack(">II", 16 + len(headers) + len(payload), len(headers))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + headers + payload
    return message + struct.pack(">I", binascii.crc32(message))


def test_the_bedrock_messages_assembler_reads_hand_framed_chunks_cut_anywhere() -> None:
    """Bedrock's ``invoke-with-response-stream`` chunks (``{"bytes": base64 of a Messages stream event}``,
    per the SDK's ``anthropic/lib/bedrock/_stream_decoder.py``), framed by hand, fed in every two-piece cut:
    the message the events describe; a bad CRC is malformed, a cut body interrupted."""
    import base64

    from reasonstate.adapters.anthropic import BedrockMessagesAssembler

    usage = {"input_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**usage, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm é"}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "c2ln"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    body = b"".join(
        _frame("chunk", json.dumps({"bytes": base64.b64encode(json.dumps(e).encode()).decode()}).encode())
        for e in events
    )
    expected = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "thinking", "thinking": "Hmm é", "signature": "c2ln"}, {"type": "text", "text": "Hi"}
        ],
        "stop_reason": "end_turn", "stop_sequence": None, "usage": {**usage, "output_tokens": 5},
    }  # fmt: skip
    for cut in range(0, len(body), 7):
        assembler = BedrockMessagesAssembler()
        assembler.feed_bytes(body[:cut])
        assembler.feed_bytes(body[cut:])
        assert assembler.finish() == expected
    broken = bytearray(body)
    broken[20] ^= 1
    with pytest.raises(rs.MalformedResponse):
        BedrockMessagesAssembler().feed_bytes(bytes(broken))
    cut_short = BedrockMessagesAssembler()
    cut_short.feed_bytes(body[:-10])
    with pytest.raises(rs.StreamInterrupted):
        cut_short.finish()


def test_minimax_usage_reads_its_documented_anthropic_fields() -> None:
    """docs/protocols.md §10.8: MiniMax's Anthropic-compatible usage is Anthropic's four fields; its own
    documented pair of answers (a cache write, then a read of the same 188,086 tokens), hand-copied from
    https://platform.minimax.io/docs/api-reference/anthropic-api-compatible-cache, normalizes to the
    disjoint parts (uncached input, cache written, cache read)."""
    import anthropic

    from reasonstate.adapters import adapter_for
    from reasonstate.adapters.base import VendorRequest

    adapter = adapter_for(
        anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9/anthropic"), dialect="minimax"
    )
    request = VendorRequest(kwargs={}, units=(), model="MiniMax-M2.7")

    def body(usage: dict[str, int]) -> dict[str, Any]:
        return {"id": "m1", "type": "message", "role": "assistant", "model": "MiniMax-M2.7",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": usage}  # fmt: skip

    first = adapter.decode(body({"cache_creation_input_tokens": 188086, "cache_read_input_tokens": 0,
                                 "input_tokens": 21, "output_tokens": 393}), request).usage  # fmt: skip
    second = adapter.decode(body({"cache_creation_input_tokens": 0, "cache_read_input_tokens": 188086,
                                  "input_tokens": 21, "output_tokens": 393}), request).usage  # fmt: skip
    assert (first.uncached_input, first.cache_write, first.cache_read, first.output) == (21, 188086, 0, 393)
    assert (second.uncached_input, second.cache_write, second.cache_read, second.output) == (
        21,
        0,
        188086,
        393,
    )
