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
    assert {tuple(o[5:]) for o in data["history"]["origins"]} == {("azure",)}
    with pytest.raises(rs.IllegalTransition, match="openai/responses@azure"):
        rs.Session.restore(snap.model_dump_json(), stack.enter_context(OpenAIResponsesEmulator()).client())
    azure.script.extend([ModelAction.answer("again", reasoning="r")] * 2)
    restored = rs.Session.restore(snap.model_dump_json(), azure.client())
    restored.send("Once more?")
    session.send("Once more?")
    assert azure.requests[-1].body == azure.requests[-2].body
