"""Account binding: Bedrock binds Claude's thinking to the AWS account, an Azure OpenAI resource seals its
``encrypted_content`` with its own key (docs/protocols.md §10.1). Provenance carries that scope, so a switch
between two accounts (or resources) of one platform withholds the payloads as a cross-platform switch does.

Every session test drives the real SDK clients (``AnthropicBedrock`` signing with SigV4 through botocore,
``AzureOpenAI``) over HTTP against the emulators; the oracles are the emulators' own checks (an account or
resource signs with its own key and refuses another's with the platform's error shape) and the opaque
strings found in the bodies sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.adapters import adapter_for, scope_for
from reasonstate.state import EventKind
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import WEATHER
from tests.test_platforms import chain, run_chain

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
THINKING: dict[str, Any] = {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}}
#: two IAM access key ids (AWS's documented example shape) of two accounts, and their secrets
KEY_A, KEY_B = "AKIAIOSFODNN7EXAMPLE", "AKIAI44QH8DHBEXAMPLE"
#: an access key id of the emulator's own account (the one its ``test-key`` API key acts for)
KEY_HOME = "AKIAHOMEACCOUNT00001"
SECRET_A, SECRET_B = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
RESPONSES: dict[str, Any] = {
    "reasoning": {"effort": "medium", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
}


def signatures(bodies: list[bytes]) -> list[str]:
    """Every thinking ``signature`` in the Messages request bodies, in order."""
    return [
        block["signature"]
        for body in bodies
        for message in json.loads(body)["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "thinking"
    ]


@pytest.fixture(scope="module")
def bedrock() -> Iterator[AnthropicEmulator]:
    """One Bedrock endpoint serving two accounts: each access key id acts for its own account, whose
    thinking signatures only that account verifies."""
    emulator = AnthropicEmulator(
        platform="bedrock",
        api_key=(KEY_A, KEY_B, KEY_HOME, "test-key"),
        accounts={KEY_A: "111111111111", KEY_B: "222222222222"},
    )
    with emulator:
        yield emulator


def account(emulator: AnthropicEmulator, key: str, secret: str, *, region: str = "us-east-1") -> Any:
    """A real ``AnthropicBedrock`` signing with SigV4 (botocore) as ``key``."""
    return emulator.client(aws_access_key=key, aws_secret_key=secret, aws_region=region)


def long_term_key(account_id: str, secret: str) -> str:
    """A long-term Bedrock API key's form: ``ABSK`` + base64 of
    ``BedrockAPIKey-<id>-at-<account>:<secret>``."""
    return "ABSK" + base64.b64encode(f"BedrockAPIKey-ab1c-at-{account_id}:{secret}".encode()).decode()


def short_term_key(key_id: str, region: str) -> str:
    """A short-term Bedrock API key's form: ``bedrock-api-key-`` + base64 of a SigV4 pre-signed URL
    (aws-bedrock-token-generator: host bedrock.amazonaws.com, ``Action=CallWithBearerToken``)."""
    url = (
        "bedrock.amazonaws.com/?Action=CallWithBearerToken&X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={key_id}%2F20260101%2F{region}%2Fbedrock%2Faws4_request&X-Amz-Date=20260101T000000Z"
        "&X-Amz-Expires=43200&X-Amz-Security-Token=SESSIONTOKENSECRET&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=0123456789abcdef&Version=1"
    )
    return "bedrock-api-key-" + base64.b64encode(url.encode()).decode()


def test_the_scope_is_read_from_the_client_and_never_holds_a_secret() -> None:
    """docs/protocols.md §10.1: the account id is not on an ``AnthropicBedrock`` client, so the scope is the
    most the client states (a long-term API key's account, the access key id of the SigV4 credentials or
    of the ones a short-term key was signed with, a named profile), with the region; an ``AzureOpenAI``
    client's is its resource host. A key of no known form, or credentials botocore resolves later: unknown
    (""), the platform alone as before. No secret part is ever in it."""
    import anthropic
    import openai

    def bedrock_client(**kw: Any) -> Any:
        return anthropic.AnthropicBedrock(base_url="http://127.0.0.1:9", **{"aws_region": "eu-west-1", **kw})

    assert (
        scope_for(bedrock_client(aws_access_key=KEY_A, aws_secret_key=SECRET_A)) == f"key:{KEY_A}/eu-west-1"
    )
    assert scope_for(bedrock_client(aws_profile="prod")) == "profile:prod/eu-west-1"
    assert scope_for(bedrock_client(api_key=long_term_key("123456789012", "s3cr3t+XYZ="))) == (
        "account:123456789012/eu-west-1"
    )
    short = short_term_key("ASIAEXAMPLE123456789", "eu-west-1")
    assert scope_for(bedrock_client(api_key=short)) == "key:ASIAEXAMPLE123456789/eu-west-1"
    assert scope_for(bedrock_client(api_key="test-key")) == ""
    on_async = anthropic.AsyncAnthropicBedrock(
        base_url="http://127.0.0.1:9", aws_region="eu-west-1", aws_access_key=KEY_A, aws_secret_key=SECRET_A
    )
    assert scope_for(on_async) == f"key:{KEY_A}/eu-west-1"
    assert scope_for(bedrock_client(api_key="ABSK!!not-base64")) == ""
    azure = openai.AzureOpenAI(
        azure_endpoint="https://My-Res.openai.azure.com/", api_key="k", api_version="2025-04-01-preview"
    )
    assert scope_for(azure) == "my-res.openai.azure.com"
    assert scope_for(anthropic.Anthropic(api_key="k")) == ""  # the first-party API binds to no account
    # the adapters: one per scope, each naming its binding
    a = adapter_for(bedrock_client(aws_access_key=KEY_A, aws_secret_key=SECRET_A))
    b = adapter_for(bedrock_client(aws_access_key=KEY_B, aws_secret_key=SECRET_B))
    assert (a.platform, b.platform) == ("bedrock", "bedrock")  # type: ignore[attr-defined]
    assert a.binding == f"bedrock#key:{KEY_A}/eu-west-1" != b.binding  # type: ignore[attr-defined]
    for secret in ("s3cr3t", "SESSIONTOKENSECRET", "0123456789abcdef", SECRET_A):
        assert secret not in a.binding + b.binding  # type: ignore[attr-defined]


def test_the_bedrock_emulator_refuses_another_accounts_signature_in_its_error_shape(
    bedrock: AnthropicEmulator,
) -> None:
    """The oracle of the tests below: a thinking block signed for account A, sent by account B's
    credentials, is Bedrock's 400 ``{"message": ...}`` for an invalid signature (no documented wording of
    an account mismatch was found: the platform's invalid-signature error, docs/protocols.md §10.1); the
    same request from account A is accepted."""
    import anthropic

    bedrock.script.extend([ModelAction.answer("ok", reasoning="r")])
    first = account(bedrock, KEY_A, SECRET_A).messages.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], **THINKING
    )
    block = first.content[0].model_dump()
    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [block, {"type": "text", "text": "ok"}]},
        {"role": "user", "content": "more"},
    ]
    with pytest.raises(anthropic.BadRequestError) as refused:
        account(bedrock, KEY_B, SECRET_B).messages.create(model=MODEL, messages=messages, **THINKING)
    assert refused.value.body == {"message": "messages.1.content.0: Invalid `signature` in `thinking` block"}
    assert refused.value.response.headers["x-amzn-errortype"].startswith("ValidationException")
    bedrock.script.extend([ModelAction.answer("again", reasoning="r")])
    assert account(bedrock, KEY_A, SECRET_A).messages.create(model=MODEL, messages=messages, **THINKING)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_switch_between_two_bedrock_accounts_sends_nothing_of_the_other(
    bedrock: AnthropicEmulator, stream: bool
) -> None:
    """Account A → account B → account A on one Bedrock endpoint: B gets none of A's signatures (it would
    refuse them: the chain completing is the oracle), A none of B's, and A's own thinking goes back to A.
    Each switch is traced with the scopes it moved between."""
    a, b = account(bedrock, KEY_A, SECRET_A), account(bedrock, KEY_B, SECRET_B)
    bedrock.script.extend(chain("A") + chain("B") + chain("C"))
    start = len(bedrock.requests)
    session = rs.Session(a, model=MODEL, tools=[WEATHER], stream=stream, **THINKING)
    assert run_chain(session, "Paris weather?").text == "A: Paris is mild."
    on_a = {c.value["signature"] for c in session.continuation if c.kind == "thinking"}
    assert {c.platform for c in session.continuation} == {f"bedrock#key:{KEY_A}/us-east-1"}

    session.switch(b, model=MODEL, stream=stream, **THINKING)
    assert run_chain(session, "And tomorrow?").text == "B: Paris is mild."  # no 400 on the way
    sent_b = [r.body for r in bedrock.requests[start + 2 : start + 4]]
    assert not on_a & set(signatures(sent_b)), "account A's thinking reached account B"
    assert signatures(sent_b[1:]), "B's own open chain carries B's thinking"
    assert session.trace.of_kind(EventKind.CONTINUATION_WITHHELD)
    changed = session.trace.of_kind(EventKind.VENDOR_CHANGED)[-1].data
    assert changed["old"]["scope"] == f"key:{KEY_A}/us-east-1"
    assert changed["new"]["scope"] == f"key:{KEY_B}/us-east-1"
    assert SECRET_A not in json.dumps(changed) and SECRET_B not in json.dumps(changed)
    on_b = {c.value["signature"] for c in session.continuation if c.kind == "thinking"} - on_a

    session.switch(a, model=MODEL, stream=stream, **THINKING)
    assert run_chain(session, "And the day after?").text == "C: Paris is mild."
    back = signatures([r.body for r in bedrock.requests[start + 4 :]])
    assert not on_b & set(back), "account B's thinking reached account A"
    assert on_a & set(back), "A's own earlier thinking goes back to A"


def test_a_scoped_snapshot_restores_byte_identically_and_holds_no_secret(bedrock: AnthropicEmulator) -> None:
    """A snapshot names each payload's binding (platform and scope, never a secret); restored on the same
    account its next request is byte-identical; restored on another account the session sends none of the
    first account's signatures and the other account accepts what it gets."""
    a = account(bedrock, KEY_A, SECRET_A)
    bedrock.script.extend(chain("A"))
    session = rs.Session(a, model=MODEL, tools=[WEATHER], **THINKING)
    run_chain(session, "Paris weather?")
    text = session.snapshot().model_dump_json()
    data = json.loads(text)
    assert data["platform"] == "bedrock"
    assert {tuple(o[5:]) for o in data["history"]["origins"]} == {(f"bedrock#key:{KEY_A}/us-east-1",)}
    assert SECRET_A not in text and SECRET_A not in repr(session.continuation)
    bedrock.script.extend([ModelAction.answer("again", reasoning="r")] * 3)
    restored = rs.Session.restore(text, account(bedrock, KEY_A, SECRET_A))
    assert restored.continuation == session.continuation
    restored.send("Once more?")
    session.send("Once more?")
    assert bedrock.requests[-1].body == bedrock.requests[-2].body
    elsewhere = rs.Session.restore(text, account(bedrock, KEY_B, SECRET_B))
    assert elsewhere.send("Once more?").text == "again"  # no 400: nothing of account A's was sent
    on_a = {c.value["signature"] for c in session.continuation if c.kind == "thinking"}
    assert not on_a & set(signatures([bedrock.requests[-1].body]))


def test_payloads_of_unknown_scope_go_to_any_account_of_their_platform_as_before(
    bedrock: AnthropicEmulator,
) -> None:
    """Snapshots taken before scopes were recorded name the platform alone (``"bedrock"``), as do payloads
    of a client whose account is unknown (a Bedrock API key of no known form, credentials resolved by
    botocore later): they are replayed to any scope of that platform, as before (docs/protocols.md §10.1);
    a payload of a known scope never goes to a client of unknown scope."""
    unknown = bedrock.client()  # api_key="test-key": no account in it
    bedrock.script.extend(chain("A"))
    session = rs.Session(unknown, model=MODEL, tools=[WEATHER], **THINKING)
    run_chain(session, "Paris weather?")
    assert {c.platform for c in session.continuation} == {"bedrock"}
    text = session.snapshot().model_dump_json()
    bedrock.script.extend([ModelAction.answer("again", reasoning="r")])
    restored = rs.Session.restore(text, account(bedrock, KEY_HOME, "x"))  # the same account, now named
    restored.send("Once more?")
    kept = {c.value["signature"] for c in session.continuation if c.kind == "thinking"}
    assert kept & set(signatures([bedrock.requests[-1].body])), "unknown scope: replayed as before"
    c = next(iter(session.continuation))
    assert c.replayable_to("anthropic", "messages", c.model, f"bedrock#key:{KEY_A}/us-east-1")
    assert not c.replayable_to("anthropic", "messages", c.model, "vertex#x")  # never another platform
    import attrs

    known = attrs.evolve(c, platform=f"bedrock#key:{KEY_A}/us-east-1")
    assert not known.replayable_to("anthropic", "messages", c.model, "bedrock")
    assert not known.replayable_to("anthropic", "messages", c.model, f"bedrock#key:{KEY_B}/us-east-1")
    assert not known.replayable_to("anthropic", "messages", c.model, "first-party")


@pytest.fixture(scope="module")
def azure_resources() -> Iterator[tuple[OpenAIResponsesEmulator, OpenAIResponsesEmulator]]:
    """Two Azure OpenAI resources: each seals ``encrypted_content`` with its own key."""
    with (
        OpenAIResponsesEmulator(platform="azure", resource="res-a") as one,
        OpenAIResponsesEmulator(platform="azure", resource="res-b") as two,
    ):
        yield one, two


def blobs(bodies: list[bytes]) -> list[str]:
    return [
        item["encrypted_content"]
        for body in bodies
        for item in json.loads(body).get("input", [])
        if isinstance(item, dict) and item.get("encrypted_content")
    ]


def test_another_azure_resource_refuses_the_blob_in_openais_error_shape(
    azure_resources: tuple[OpenAIResponsesEmulator, OpenAIResponsesEmulator],
) -> None:
    """The oracle: resource B refuses resource A's ``encrypted_content`` with the 400
    ``invalid_encrypted_content`` (docs/protocols.md §10.3)."""
    import openai

    one, two = azure_resources
    one.script.extend([ModelAction.answer("ok", reasoning="r")])
    first = one.client().responses.create(model="gpt-5.5", input="hi", **RESPONSES)
    item = next(o.model_dump(exclude_none=True) for o in first.output if o.type == "reasoning")
    with pytest.raises(openai.BadRequestError) as refused:
        turns: list[Any] = [{"role": "user", "content": "hi"}, item, {"role": "user", "content": "more"}]
        two.client().responses.create(model="gpt-5.5", input=turns, **RESPONSES)
    assert refused.value.code == "invalid_encrypted_content"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_switch_between_two_azure_resources_sends_nothing_of_the_other(
    azure_resources: tuple[OpenAIResponsesEmulator, OpenAIResponsesEmulator], stream: bool
) -> None:
    """Resource A → resource B → A: B gets none of A's blobs (it would refuse them), A gets its own back."""
    one, two = azure_resources
    one.script.extend(chain("A") + chain("C"))
    two.script.extend(chain("B"))
    start_one, start_two = len(one.requests), len(two.requests)
    session = rs.Session(one.client(), model="gpt-5.5", tools=[WEATHER], stream=stream, **RESPONSES)
    run_chain(session, "Paris weather?")
    on_a = set(blobs([r.body for r in one.requests[start_one:]])) | {
        c.value["encrypted_content"] for c in session.continuation if "encrypted_content" in c.value
    }
    session.switch(two.client(), model="gpt-5.5", stream=stream, **RESPONSES)
    assert run_chain(session, "And tomorrow?").text == "B: Paris is mild."
    assert not on_a & set(blobs([r.body for r in two.requests[start_two:]]))
    changed = session.trace.of_kind(EventKind.VENDOR_CHANGED)[-1].data
    assert changed["old"]["scope"] != changed["new"]["scope"]
    session.switch(one.client(), model="gpt-5.5", stream=stream, **RESPONSES)
    assert run_chain(session, "And the day after?").text == "C: Paris is mild."
    assert on_a & set(blobs([r.body for r in one.requests[start_one + 2 :]])), "A's own blobs go back to A"


def shared_accounts(emulator: AnthropicEmulator) -> tuple[Any, Any]:
    """Two ``AnthropicBedrock`` clients of accounts A and B sending through one HTTP client (a
    framework's own): one guard watches both."""
    import anthropic

    http = anthropic.DefaultHttpxClient()
    return (
        emulator.client(aws_access_key=KEY_A, aws_secret_key=SECRET_A, http_client=http),
        emulator.client(aws_access_key=KEY_B, aws_secret_key=SECRET_B, http_client=http),
    )


def test_the_guard_sees_and_explains_a_switch_between_two_bedrock_accounts(
    bedrock: AnthropicEmulator,
) -> None:
    """docs/protocols.md §10.7: each guard record names its origin, the server and the account its
    ``Authorization`` header was signed for (an access key id and region, never a secret). A session
    moving from account A to account B: the request after the switch has B's origin where its previous
    one had A's, its divergence is the dropped reasoning, and no warning claims a continuation was lost
    (account A's signatures are not B's to need)."""
    a, b = shared_accounts(bedrock)
    guard = rs.instrument(a)
    assert rs.instrument(b) is guard
    bedrock.script.extend(chain("A") + chain("B"))
    session = rs.Session(a, model=MODEL, tools=[WEATHER], **THINKING)
    run_chain(session, "Paris weather?")
    session.switch(b, model=MODEL, **THINKING)
    run_chain(session, "And tomorrow?")
    records = guard.records[-4:]
    origins = [r.origin.partition("#")[2] for r in records]
    assert origins == [f"key:{KEY_A}/us-east-1"] * 2 + [f"key:{KEY_B}/us-east-1"] * 2
    moved = records[2]
    assert moved.previous == records[1].index  # the same conversation, now on another account
    assert moved.divergence is not None and moved.divergence.cause == "reasoning_dropped"
    assert [r.warnings for r in records] == [()] * 4
    assert not [r for r in records if SECRET_A in r.origin or SECRET_B in r.origin]


def test_guard_mend_never_gives_one_accounts_signature_to_another(bedrock: AnthropicEmulator) -> None:
    """Mend mode restores a signature a framework lost only for the account that issued it: the open
    chain sent to account A without A's thinking is mended (A accepts it); the same body sent to account
    B is not (B would refuse A's signature as invalid): it goes as the framework wrote it, and B's refusal
    is its own rule, that the chain's assistant message start with thinking, not a foreign signature."""
    import anthropic

    a, b = shared_accounts(bedrock)
    guard = rs.instrument(a, mend=True)
    bedrock.script.extend(chain("A")[:1])
    tools = [{"name": WEATHER.name, "description": WEATHER.description, "input_schema": WEATHER.parameters}]
    first = a.messages.create(
        model=MODEL, messages=[{"role": "user", "content": "Paris weather?"}], tools=tools, **THINKING
    )
    thinking, call = first.content[0].model_dump(), first.content[-1].model_dump()
    assert thinking["type"] == "thinking" and call["type"] == "tool_use"
    stripped: list[Any] = [  # a framework that kept the tool call and lost the thinking
        {"role": "user", "content": "Paris weather?"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "18C"}]},
    ]
    with pytest.raises(anthropic.BadRequestError) as refused:
        b.messages.create(model=MODEL, messages=stripped, tools=tools, **THINKING)
    assert "signature" not in str(refused.value.body), refused.value.body
    assert thinking["signature"] not in bedrock.requests[-1].body.decode()
    bedrock.script.extend(chain("A")[1:])
    assert a.messages.create(model=MODEL, messages=stripped, tools=tools, **THINKING).content
    assert thinking["signature"] in bedrock.requests[-1].body.decode()  # mended for its own account
    kinds = [[w.kind for w in r.warnings] for r in guard.records[-2:]]
    assert "mended" not in kinds[0] and "mended" in kinds[1]


def test_the_guard_sees_a_switch_between_two_azure_resources(
    azure_resources: tuple[OpenAIResponsesEmulator, OpenAIResponsesEmulator],
) -> None:
    """Two ``AzureOpenAI`` resources through one HTTP client: the records' origins are the two resource
    hosts, the request after the switch names the other one, and nothing warns (resource A's blobs are
    not B's to need)."""
    import openai

    one, two = azure_resources
    http = openai.DefaultHttpxClient()
    a, b = one.client(http_client=http), two.client(http_client=http)
    guard = rs.instrument(a)
    assert rs.instrument(b) is guard
    one.script.extend(chain("A"))
    two.script.extend(chain("B"))
    session = rs.Session(a, model="gpt-5.5", tools=[WEATHER], **RESPONSES)
    run_chain(session, "Paris weather?")
    session.switch(b, model="gpt-5.5", **RESPONSES)
    run_chain(session, "And tomorrow?")
    records = guard.records[-4:]
    hosts = [one.base_url, one.base_url, two.base_url, two.base_url]
    assert [r.origin.rstrip(":") for r in records] == [h.rstrip("/") for h in hosts]
    assert records[2].previous == records[1].index and records[2].divergence is not None
    assert [r.warnings for r in records] == [()] * 4


def test_the_wire_scope_reads_the_authorization_header_as_the_client_scope_reads_the_client() -> None:
    """``wire_scope`` (the guard's): a SigV4 credential scope's access key id and region, a Bedrock API
    key's identity with a ``bedrock-runtime`` host's region; nothing for another header. Never a secret."""
    from reasonstate.adapters import wire_scope

    sigv4 = f"AWS4-HMAC-SHA256 Credential={KEY_A}/20260101/eu-west-1/bedrock/aws4_request, SignedHeaders=host"
    assert wire_scope("bedrock-runtime.eu-west-1.amazonaws.com", sigv4 + ", Signature=abc") == (
        f"key:{KEY_A}/eu-west-1"
    )
    long_term = "Bearer " + long_term_key("123456789012", "s3cr3t")
    assert (
        wire_scope("bedrock-runtime.us-west-2.amazonaws.com", long_term) == "account:123456789012/us-west-2"
    )
    assert wire_scope("127.0.0.1", long_term) == "account:123456789012"
    assert wire_scope("api.anthropic.com", "Bearer sk-ant-xyz") == ""
    assert wire_scope("x", "") == ""
