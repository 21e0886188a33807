"""What a session holds grows by a small constant per turn (issue 21 item 1: state in memory <= 3x the
content). These tests look at the session's own objects, against independent figures (the bodies the
emulator received), for the costs that were once paid twice or once per turn.
"""

from __future__ import annotations

import gc
import hashlib
import json
import operator
import types
from collections.abc import Callable
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.policies import Keep
from reasonstate.state import EventKind, FrozenDict, FrozenList, History, Trace
from reasonstate.state.continuation import compact, sharing
from reasonstate.testing import ModelAction
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests.conftest import answer, make_session

TURNS = 6
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _reachable(root: object) -> list[object]:
    seen: set[int] = set()
    out, stack = [], [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        out.append(obj)
        stack.extend(gc.get_referents(obj))
    return out


def test_the_session_holds_no_copy_of_its_newest_request_body() -> None:
    """The previous request (for the cause of the next cache break) is kept as the kwargs it was sent from,
    whose values the memoized runs hold anyway, not as a copy of its bytes: one whole body was ~0.5x the
    content of a long Anthropic session (issue 21). Before, the bytes were held once (and earlier twice:
    the policy decision's held effect kept the layers with the body of the request before)."""
    with AnthropicEmulator([answer(i) for i in range(TURNS)], secret=b"s") as emu:
        session = make_session(emu, policy=Keep())
        for i in range(TURNS):
            session.send(f"Question {i}?")
        bodies = [r.body for r in emu.requests]
    smallest = min(len(b) for b in bodies)
    held = [o for o in _reachable(session._layers) if type(o) is bytes and len(o) >= smallest]
    assert held == []
    # and what is kept reads back as the body the emulator received
    assert session._layers.last_body == json.loads(bodies[-1])


def test_a_held_keep_decision_keeps_no_earlier_history_or_trace() -> None:
    """The newest ``policy.decision`` of a keep-all close is completed when first read (or by the next
    request); until then it holds what the next request is built on: the records and the lost and stripped
    ids, not the previous history and trace (issue 21: ~3 KB per session, a third of a 10-turn trace)."""
    with AnthropicEmulator([answer(i) for i in range(TURNS)], secret=b"s") as emu:
        session = make_session(emu, policy=Keep())
        for i in range(TURNS):
            session.send(f"Question {i}?")
        assert session._layers.trace.deferred  # the newest decision is held, not completed
        reachable = _reachable(session._layers)
        assert [o for o in reachable if isinstance(o, History)] == [session._layers.history]
        assert [o for o in reachable if isinstance(o, Trace)] == [session._layers.trace]
        decisions = session.trace.of_kind(EventKind.POLICY_DECISION)  # completes the held one
        assert len(decisions) == TURNS and decisions[-1].data["predicted_cache_read"] is not None


@pytest.mark.parametrize("own_adapter", [False, True])
def test_a_held_keep_decision_names_a_default_adapter_without_holding_it(own_adapter: bool) -> None:
    """A held decision keeps a process-wide default adapter by its name (the registry holds it for good),
    so the trace reaches no adapter configuration (~1-1.4 KB of a young session, issue 21); an adapter of
    the caller's own is held as it is. Either way the decision completes with the figures the next
    request predicts for itself."""
    from reasonstate.adapters import adapter_for
    from reasonstate.adapters.anthropic import AnthropicAdapter

    with AnthropicEmulator([answer(i) for i in range(3)], secret=b"s") as emu:
        client = emu.client()
        adapter = AnthropicAdapter() if own_adapter else adapter_for(client)
        session = make_session(emu, client, policy=Keep(), adapter=adapter)
        session.send("Question 0?")
        assert session._layers.trace.deferred
        held = [o for o in _reachable(session._layers) if isinstance(o, AnthropicAdapter)]
        assert held == ([adapter] if own_adapter else [])
        read = session.trace.of_kind(EventKind.POLICY_DECISION)[-1].data  # completed by reading it
        session.send("Question 1?")
        sent = session.trace.of_kind(EventKind.REQUEST_SENT)[-1].data
        assert read["predicted_cache_read"] == sent["predicted_cache_read"] is not None
        assert read["divergence_unit"] == sent["divergence"]


def test_closed_turns_with_equal_views_share_one_view() -> None:
    with AnthropicEmulator([answer(i) for i in range(TURNS)], secret=b"s") as emu:
        session = make_session(emu, policy=Keep())
        for i in range(TURNS):
            session.send(f"Question {i}?")
    views = {id(t.view) for t in session.history.turns}
    assert len(views) == 1
    assert session.history.turns[0].view == session.history.turns[-1].view


def _three_answers_on(vendor: str) -> tuple[Any, Callable[[Any], rs.Session]]:
    """An emulator of ``vendor`` scripted with three answers with reasoning, and how a session is made on
    it."""
    answers = [ModelAction.answer(f"Answer {i}.", reasoning=f"Thinking {i}.") for i in range(3)]
    if vendor == "anthropic":
        return AnthropicEmulator(answers, secret=b"s"), lambda e: make_session(e, policy=Keep())
    if vendor == "responses":
        return OpenAIResponsesEmulator(answers), lambda e: rs.Session(
            e.client(), model="gpt-5.5", system="Be brief."
        )
    if vendor == "deepseek":
        return OpenAIChatEmulator(answers, dialect="deepseek"), lambda e: rs.Session(
            e.client(),
            model="deepseek-v4-pro",
            dialect="deepseek",
            system="Be brief.",
            thinking={"type": "enabled"},
        )
    return GeminiEmulator(answers), lambda e: rs.Session(
        e.client(), model="gemini-3-flash", system="Be brief."
    )


@pytest.mark.parametrize("vendor", ["responses", "deepseek", "gemini"])
def test_the_previous_request_reads_back_as_the_body_the_vendor_received(vendor: str) -> None:
    """Where the SDK sends its kwargs as the JSON body (``extra_body`` merged in: DeepSeek's ``thinking``),
    the layers keep the kwargs and they equal the body the emulator parsed. google-genai reshapes its
    ``config`` (fields go to the body's top level, camelCase): a Gemini session keeps the contents it sent
    and the other fields as the wire had them, read once per config (before: the exact bytes, 341 B per
    turn at 200 turns), and no copy of the body's bytes."""
    emu, make = _three_answers_on(vendor)
    with emu:
        session = make(emu)
        for i in range(3):
            # (Gemini keeps a body of at most 1 KB as its bytes: these go above)
            session.send(f"Question {i}?" + (" Say more." * 250 if vendor == "gemini" else ""))
        sent = emu.requests[-1].body
    kept = session._layers.last_body
    assert not isinstance(kept, bytes)
    if vendor == "gemini":
        # google-genai re-sends a thought signature in the URL-safe alphabet (docs/protocols.md §5.1)
        assert _url_safe_signatures(kept) == json.loads(sent)
        assert "thoughtSignature" in str(kept)  # the comparison did look at a signed Part
        held = [o for o in _reachable(session._layers) if type(o) is bytes and len(o) >= len(sent) // 2]
        assert held == []
    else:
        assert kept == json.loads(sent)


def _url_safe_signatures(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: v.replace("+", "-").replace("/", "_") if k == "thoughtSignature" else _url_safe_signatures(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_url_safe_signatures(v) for v in value]
    return value


def _frozen(root: object) -> list[object]:
    return [o for o in _reachable(root) if isinstance(o, (FrozenDict, FrozenList))]


@pytest.mark.parametrize("vendor", ["anthropic", "responses", "deepseek", "gemini"])
def test_a_payload_is_kept_once_as_its_bytes(vendor: str) -> None:
    """A continuation keeps its payload's bytes and no parsed copy beside them (on Responses the frozen
    copy was ~0.5x the content, and the codec's memo held a third, plain form); what the memo sends shares
    the history's strings: the text a part holds is the very string object in the request."""
    emu, make = _three_answers_on(vendor)
    with emu:
        session = make(emu)
        for i in range(3):
            session.send(f"Question {i}?")
        request = session.next_request("Next?")
        sent = json.loads(emu.requests[-1].body)
    history = session._layers.history
    payloads = [c for t in history.turns for s in t.steps for c in s.continuation]
    assert payloads and all(type(c.payload) is bytes for c in payloads)
    assert _frozen(history) == []  # no parsed copy of a payload (no tool calls here: no frozen arguments)
    assert not any(hasattr(c, "_value") for c in payloads)
    # the request still carries each payload as received (the emulator's own record of what it got)
    assert f"Answer {1}." in json.dumps(sent, ensure_ascii=False)
    # the first closed turn's answer text, as the request holds it, is the history's own string object
    text = history.turns[0].steps[-1].text
    strings = [o for o in _reachable(dict(request.kwargs)) if type(o) is str and o == text]
    assert strings and all(s is text for s in strings)


def test_sharing_keeps_the_value_and_shares_strings() -> None:
    """``sharing`` changes no byte of the value (key order kept), interns keys and names, and puts the
    history's own text in place of an equal string."""
    raw = '{"type":"message","id":"m1","content":[{"type":"output_text","text":"Hi é"}],"role":"assistant"}'
    text = "".join(["Hi ", "é"])  # built, not a literal: not interned
    shared = sharing(json.loads(raw), (text,))
    assert compact(shared) == raw.encode()
    assert list(shared) == ["type", "id", "content", "role"]
    assert shared["content"][0]["text"] is text
    other = sharing(json.loads(raw))
    assert other["type"] is shared["type"] and other["role"] is shared["role"]
    assert next(iter(other)) is next(iter(shared))  # one key object for every payload
    assert type(shared) is dict and type(shared["content"]) is list  # plain, for the SDK's fast path


def _thinking_session() -> tuple[rs.Session, list[dict[str, Any]], list[bytes]]:
    """Three turns with thinking (the second with a redacted block too): the session, every response body
    as received on the wire (an httpx hook: the oracle), and every request body the emulator got."""
    answers = [
        ModelAction(reasoning=f"Thinking {i}. " * 5, text=f"Answer {i}.", redacted=i == 1) for i in range(3)
    ]
    received: list[dict[str, Any]] = []

    def hook(response: Any) -> None:
        response.read()
        received.append(json.loads(response.content))

    with AnthropicEmulator(answers, secret=b"s") as emu:
        session = make_session(emu, client=emu.client(http_client=_hooked(hook)), policy=Keep())
        for i in range(3):
            session.send(f"Question {i}?")
        bodies = [r.body for r in emu.requests]
    return session, received, bodies


def _hooked(hook: Callable[[Any], None]) -> Any:
    import anthropic

    return anthropic.DefaultHttpxClient(event_hooks={"response": [hook]})


def test_a_thinking_block_is_kept_once_as_its_strings() -> None:
    """An Anthropic thinking block (and a redacted one) is kept as its strings, not as its bytes beside the
    strings the memo sends back: no bytes object in the session holds a signature, one string object holds
    each signature, and the payload read back is the block's bytes as received, byte for byte (issue 21:
    ~200 bytes a turn were the block's bytes, kept twice)."""
    session, received, bodies = _thinking_session()
    blocks = [b for r in received for b in r["content"] if b["type"] in ("thinking", "redacted_thinking")]
    assert [b["type"] for b in blocks] == ["thinking", "thinking", "redacted_thinking", "thinking"]
    payloads = [c for t in session.history.turns for s in t.steps for c in s.continuation]
    assert len(payloads) == len(blocks)
    for c, block in zip(payloads, blocks, strict=True):
        # the oracle: the block as received, in compact JSON written here (not the codec's compact())
        wire = json.dumps(block, ensure_ascii=False, separators=(",", ":")).encode()
        assert c.payload == wire and type(c.payload) is bytes
        assert c.digest == "sha256:" + hashlib.sha256(wire).hexdigest()
        assert c.checked() == block and list(c.checked()) == list(block)
        c.verify()
    reachable = _reachable((session._layers, session._encodings))  # each object once
    secrets = [b.get("signature") or b["data"] for b in blocks]
    assert not [o for o in reachable if type(o) is bytes and any(s.encode() in o for s in secrets)]
    for secret in secrets:
        assert len([o for o in reachable if type(o) is str and o == secret]) == 1, secret
    # the blocks went back as they came: the last request holds every block but the last answer's, key
    # order included
    sent = json.loads(bodies[-1])
    back = [b for m in sent["messages"] if m["role"] == "assistant" for b in m["content"]]
    back = [{k: v for k, v in b.items() if k != "cache_control"} for b in back if b["type"] != "text"]
    assert [list(b.items()) for b in back] == [list(b.items()) for b in blocks[:-1]]


def test_a_payload_kept_as_strings_restores_equal_and_sends_the_same_bytes() -> None:
    """A snapshot restores the history equal (a restored payload is plain bytes: equal, same hash) and the
    restored session's next request is the original's, byte for byte."""
    session, _, _ = _thinking_session()
    snapshot = session.snapshot()
    with AnthropicEmulator([ModelAction.answer("Fine.")] * 2, secret=b"s") as emu:
        restored = rs.Session.restore(snapshot, emu.client())
        kept = [c for t in session.history.turns for s in t.steps for c in s.continuation]
        back = [c for t in restored.history.turns for s in t.steps for c in s.continuation]
        assert back == kept and kept == back
        assert operator.ne(back, kept) is False
        assert [hash(c) for c in back] == [hash(c) for c in kept]
        assert restored.history == session.history
        original = rs.Session.restore(snapshot, emu.client())
        mine = session.next_request("Next?").kwargs
        theirs = restored.next_request("Next?").kwargs
        assert json.dumps(mine["messages"]) == json.dumps(theirs["messages"])
        restored.send("Next?")
        original.send("Next?")
        assert emu.requests[0].body == emu.requests[1].body
    # restored as the session captured them: no payload bytes, each signature and thinking text held once
    blocks = [json.loads(c.payload) for c in kept]
    reachable = _reachable((restored._layers, restored._encodings))
    assert not [o for o in reachable if type(o) is bytes and (b'"signature"' in o or b'"data"' in o)]
    for secret in [b.get("signature") or b["data"] for b in blocks] + [b["thinking"] for b in blocks[:2]]:
        assert len([o for o in reachable if type(o) is str and o == secret]) == 1, secret


def test_a_gemini_signature_is_kept_once_as_its_string() -> None:
    """A Gemini Part's signature (its payload ``{"thoughtSignature": ...}`` once the text is left out) is
    kept as its string, the one the Part sent back holds: no bytes object in the session holds it, one
    string object does, and the payload read back is the bytes received; a restored session holds it the
    same way and sends the same bytes (issue 21: ~120 bytes a turn were the payload's bytes beside the
    string sent)."""
    answers = [ModelAction(reasoning=f"Thinking {i}. " * 5, text=f"Answer {i}.") for i in range(5)]
    with GeminiEmulator(answers) as emu:
        session = rs.Session(
            emu.client(),
            model="gemini-3-flash",
            system="Be brief.",
            thinking_config={"include_thoughts": True},
        )
        for i in range(3):
            session.send(f"Question {i}?")
        snapshot = session.snapshot()
        restored = rs.Session.restore(snapshot, emu.client())
        restored.send("Next?")
        session.send("Next?")
        assert emu.requests[-1].body == emu.requests[-2].body
        sent = json.loads(emu.requests[-1].body)
    # the oracle: the signatures the last request carried (the SDK re-sends them in the URL-safe alphabet;
    # the emulator signs in the standard one)
    signatures = [
        p["thoughtSignature"].replace("-", "+").replace("_", "/")
        for c in sent["contents"]
        if c["role"] == "model"
        for p in c["parts"]
        if "thoughtSignature" in p
    ]
    assert len(signatures) == 3
    for kept in (session, restored):
        payloads = [c for t in kept.history.turns[:3] for s in t.steps for c in s.continuation]
        signed = [c for c in payloads if b"thoughtSignature" in c.payload]
        assert [json.loads(c.payload) for c in signed] == [{"thoughtSignature": s} for s in signatures]
        for c, signature in zip(signed, signatures, strict=True):
            wire = json.dumps({"thoughtSignature": signature}, separators=(",", ":")).encode()
            assert c.payload == wire and c.digest == "sha256:" + hashlib.sha256(wire).hexdigest()
            c.verify()
        reachable = _reachable((kept._layers, kept._encodings))
        assert not [o for o in reachable if type(o) is bytes and any(s.encode() in o for s in signatures)]
        for signature in signatures:
            assert len([o for o in reachable if type(o) is str and o == signature]) == 1, signature


def test_gemini_closed_history_units_are_kept_once() -> None:
    """The units of the closed turns are kept once: the records keep the newest request's units, and the
    Gemini run of closed turns reads its own out of them rather than keeping a copy (issue 21: 32 bytes a
    content); the next request's units are still the closed history's."""
    answers = [ModelAction(reasoning=f"Thinking {i}. " * 5, text=f"Answer {i}.") for i in range(5)]
    with GeminiEmulator(answers) as emu:
        session = rs.Session(
            emu.client(),
            model="gemini-3-flash",
            system="Be brief.",
            thinking_config={"include_thoughts": True},
        )
        for i in range(4):
            session.send(f"Question {i}?")
        newest = list(session._layers.records.newest_units())
        reachable = _reachable((session._layers, session._encodings))
        # each closed content's unit (the newest request's, after the model and system units), packed
        for unit in newest[2:-1]:
            raw = bytes.fromhex(unit.removeprefix("sha256:"))
            assert len([o for o in reachable if type(o) in (bytes, bytearray) and raw in o]) == 1, unit
        request = session.next_request("Next?")
        assert list(request.units)[: len(newest) - 1] == newest[:-1]
        session.send("Next?")
        assert list(session._layers.records.newest_units())[: len(newest) - 1] == newest[:-1]
