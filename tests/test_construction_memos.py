"""The memos that make a fresh session's construction cheap (issue 21: constant costs) never answer for a
value they were not filled with: each test fills a memo with one value, then builds a session with another
that the memo's key could confuse it with, through the real SDK clients on the emulators.

The oracles are the refusals and prefixes a session gets with the memos empty (the first build of each
case here), and hand-written expectations: ``max_tokens: int`` in anthropic's ``Messages.create`` (so
``True`` is refused strictly, though ``True == 1`` and ``hash(True) == hash(1)``), and the sha256 of a
prefix's canonical JSON (``docs/protocols.md`` names the fingerprint's form).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest

import reasonstate as rs
from reasonstate.state import EventKind
from reasonstate.testing.anthropic import AnthropicEmulator

SONNET = "claude-sonnet-4-6"


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicEmulator]:
    with AnthropicEmulator() as emu:
        yield emu


def test_an_option_equal_to_an_accepted_one_but_of_another_type_is_still_refused(
    claude: AnthropicEmulator,
) -> None:
    """``max_tokens=1`` passes and is remembered; ``max_tokens=True`` compares and hashes equal to it and is
    still refused (the SDK declares an ``int``; a bool is not one in strict mode), as is ``1.0``."""
    client = claude.client()
    for _ in range(2):  # the second build of each reads the memo
        rs.Session(client, model=SONNET, max_tokens=1)
        rs.Session(client, model=SONNET, max_tokens=8, thinking={"type": "enabled", "budget_tokens": 1})
    for bad in (True, 1.0):
        with pytest.raises(rs.InvalidOption, match="max_tokens="):
            rs.Session(client, model=SONNET, max_tokens=bad)
    with pytest.raises(rs.InvalidOption, match="budget_tokens"):
        rs.Session(client, model=SONNET, max_tokens=8, thinking={"type": "enabled", "budget_tokens": True})
    assert claude.requests == []


def test_a_rule_refusal_is_not_remembered_away(claude: AnthropicEmulator) -> None:
    """The same options that pass on one model are refused on a model whose rules refuse them (Claude 4.7
    takes adaptive thinking only, docs/protocols.md §4.1), before and after the passing build."""
    client = claude.client()
    thinking = {"type": "enabled", "budget_tokens": 1024}
    for _ in range(2):
        with pytest.raises(rs.InvalidOption, match="adaptive"):
            rs.Session(client, model="claude-opus-4-7", max_tokens=2048, thinking=thinking)
        rs.Session(client, model=SONNET, max_tokens=2048, thinking=thinking)


def _fingerprint(system: str) -> str:
    canonical = json.dumps(
        {"system": system, "tools": [], "few_shots": []},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def test_each_system_prompt_has_its_own_prefix_and_volatile_event(claude: AnthropicEmulator) -> None:
    """Sessions on the same and on different system prompts: each has the prefix of its own prompt, and a
    prompt with a clock time traces ``prefix.volatile`` in every session built on it, not only the first."""
    client = claude.client()
    prompts = ["Answer briefly.", "Answer at length.", "It is 12:30:45 now.", "Answer briefly."]
    for _ in range(2):
        for system in prompts:
            session = rs.Session(client, model=SONNET, system=system, max_tokens=64)
            assert session.prefix.system == system
            assert session.prefix.fingerprint == _fingerprint(system)
            volatile = session.trace.of_kind(EventKind.PREFIX_VOLATILE)
            assert [e.data["spans"] for e in volatile] == ([["12:30:45"]] if ":45" in system else [])
    few = rs.Session(
        client, model=SONNET, system="Answer briefly.", few_shots=[("Hi", "Hello")], max_tokens=64
    )
    assert few.prefix.few_shots == (("Hi", "Hello"),)
    assert rs.Session(client, model=SONNET, system="Answer briefly.", max_tokens=64).prefix.few_shots == ()


def test_options_of_one_value_in_another_key_order_keep_their_own_order(claude: AnthropicEmulator) -> None:
    """Two option dicts that compare equal but list their keys in another order: each session sends its
    caller's order (the body's bytes follow it), however many sessions were built on the other first."""
    client = claude.client()
    orders = (["type", "budget_tokens"], ["budget_tokens", "type"])
    for _ in range(2):
        for order in orders:
            thinking = {k: {"type": "enabled", "budget_tokens": 1024}[k] for k in order}
            session = rs.Session(client, model=SONNET, max_tokens=2048, thinking=thinking)
            sent = session.next_request("Hi?").kwargs
            assert list(sent["thinking"]) == order
            assert list(sent)[:2] == ["model", "max_tokens"]


def test_an_option_holding_a_callers_object_is_not_shared(claude: AnthropicEmulator) -> None:
    """An option value that is not JSON (here a caller's object in ``extra_body``, which the SDK declares as
    any object) is the caller's: a later session with an equal value of the same repr holds its own
    caller's object, never the first one's (a memo of frozen options must not hand it out)."""

    class Box:
        def __init__(self, value: int) -> None:
            self.value = value

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Box) and other.value == self.value

        __hash__ = None  # type: ignore[assignment]

        def __repr__(self) -> str:
            return "Box()"

    client = claude.client()
    first, second = Box(1), Box(1)
    a = rs.Session(client, model=SONNET, max_tokens=64, extra_body={"box": first})
    b = rs.Session(client, model=SONNET, max_tokens=64, extra_body={"box": second})
    first.value = 2  # the first caller changes its own object after both sessions were built
    assert b.next_request("Hi?").kwargs["extra_body"]["box"] == Box(1)
    assert a.next_request("Hi?").kwargs["extra_body"]["box"] == Box(2)  # a holds its caller's object


def test_the_adapter_memo_reads_what_the_instance_says() -> None:
    """docs/protocols.md §10.1-§10.2: clients of one type on two platforms (google-genai's ``vertexai``) or
    two Azure resources get their own adapters, however often and in whichever order they come."""
    import openai
    from google import genai

    from reasonstate.adapters import adapter_for
    from reasonstate.adapters.base import binding_of

    def azure(host: str) -> openai.AzureOpenAI:
        return openai.AzureOpenAI(
            api_key="k", api_version="2025-04-01-preview", azure_endpoint=f"https://{host}"
        )

    for _ in range(3):
        assert adapter_for(genai.Client(api_key="k")).platform == "first-party"
        assert adapter_for(genai.Client(vertexai=True, api_key="k")).platform == "vertex"
        assert adapter_for(genai.Client(vertexai=True, api_key="k"), api="interactions").platform == "vertex"
        assert adapter_for(genai.Client(api_key="k"), api="interactions").platform == "first-party"
        for host in ("a.openai.azure.com", "b.openai.azure.com"):
            for chosen in (adapter_for(azure(host), api="chat"), adapter_for(azure(host))):
                assert binding_of(chosen) == f"azure#{host}"


def test_a_remembered_repr_answers_only_for_its_own_object() -> None:
    """``frozen_repr`` reads a remembered repr only for the very object it was remembered for: an equal
    value (``True == 1``) of another object gets its own repr, which tells them apart."""
    from reasonstate.state.frozen import freeze, frozen_repr, shared_repr

    one = freeze({"max_tokens": 1, "thinking": {"type": "enabled"}})
    assert shared_repr(one) == "{'max_tokens': 1, 'thinking': {'type': 'enabled'}}"
    assert frozen_repr(one) == "{'max_tokens': 1, 'thinking': {'type': 'enabled'}}"
    true = freeze({"max_tokens": True, "thinking": {"type": "enabled"}})
    assert true == one
    assert frozen_repr(true) == "{'max_tokens': True, 'thinking': {'type': 'enabled'}}"


def test_each_system_prompt_sends_its_own_head(claude: AnthropicEmulator) -> None:
    """The head values shared between sessions (``head_value``: the system block and its unit) answer for
    their own system text only: sessions on prompts built in turn, twice over, each send their own system
    block (the vendor's bytes: hand-written), and two sessions on one prompt send equal heads."""
    client = claude.client()
    prompts = ["Answer briefly.", "Answer at length.", "Answer briefly.", ""]
    for _ in range(2):
        for system in prompts:
            session = rs.Session(client, model=SONNET, system=system, max_tokens=64)
            kwargs = session.next_request("Hi?").kwargs
            if system:
                assert kwargs["system"] == [
                    {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
                ]
            else:
                assert "system" not in kwargs
    assert claude.requests == []


def test_a_head_value_is_shared_only_for_exact_strings() -> None:
    """``head_value`` keeps a value for exact ``str`` arguments only (a ``str`` subclass may render
    otherwise), and the same arguments give the same object."""
    from reasonstate.adapters.base import head_value

    calls: list[tuple[str, ...]] = []

    def build(*args: str) -> list[str]:
        calls.append(args)
        return list(args)

    class Text(str):
        pass

    first = head_value(build, "model", "m-1")
    assert head_value(build, "model", "m-1") is first and calls == [("model", "m-1")]
    assert head_value(build, "model", Text("m-1")) == ["model", "m-1"]
    assert head_value(build, "model", Text("m-1")) is not first and len(calls) == 3
