"""A payload kept as its strings (``Continuation.capture(..., strings=True)``: an Anthropic thinking block)
is the same value as the payload kept as its bytes, in every public respect, and keeps the integrity rules:
its bytes read back are the block's compact JSON, an edit in memory is refused, the very bytes set back are
no change. The oracle of every byte here is ``json.dumps`` written out in the test, never the code under
test."""

from __future__ import annotations

import copy
import hashlib
import json
import operator
import pickle
from typing import Any

import attrs
import pytest

from reasonstate.errors import ContinuationMismatch
from reasonstate.state import Continuation

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxzaWduYXR1cmUgaMOpIOKAlCBzYWZlIQ=="
BLOCK = {"type": "thinking", "thinking": "Two cities; Rome is warmer. « é »", "signature": SIGNATURE}


def _wire(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _capture(value: Any, *, strings: bool, kind: str = "thinking", model: str = "claude-x") -> Continuation:
    return Continuation.capture(
        vendor="anthropic", api="messages", model=model, kind=kind, value=value, strings=strings
    )


def test_a_payload_kept_as_strings_is_the_payload_kept_as_bytes() -> None:
    kept, plain = _capture(dict(BLOCK), strings=True), _capture(dict(BLOCK), strings=False)
    assert type(kept) is not Continuation and type(plain) is Continuation  # the form under test is used
    assert kept.payload == plain.payload == _wire(BLOCK)
    assert kept.digest == plain.digest == "sha256:" + hashlib.sha256(_wire(BLOCK)).hexdigest()
    assert kept == plain and plain == kept
    assert operator.ne(kept, plain) is False and operator.ne(plain, kept) is False  # != as well
    assert hash(kept) == hash(plain)
    assert {kept: 1}[plain] == 1
    assert repr(kept) == repr(plain)
    checked = kept.checked()
    assert checked == BLOCK and list(checked) == list(BLOCK) and type(checked) is dict
    checked["thinking"] = "changed"  # a fresh value: changing it changes nothing kept
    assert kept.payload == _wire(BLOCK)
    assert kept.value == plain.value
    assert kept.replayable_to("anthropic", "messages", "claude-x")
    assert not kept.replayable_to("anthropic", "messages", "claude-y")
    # another provenance or other bytes: not equal
    assert kept != _capture(dict(BLOCK), strings=True, model="claude-y")
    assert kept != _capture({**BLOCK, "signature": "A" + SIGNATURE[1:]}, strings=True)


def test_a_redacted_block_is_kept_as_its_one_string() -> None:
    block = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"}
    kept = _capture(dict(block), strings=True, kind="redacted_thinking")
    assert type(kept) is not Continuation
    assert kept.payload == _wire(block) and kept.checked() == block
    assert kept == _capture(dict(block), strings=False, kind="redacted_thinking")


@pytest.mark.parametrize(
    "value",
    [
        {"thinking": "t", "type": "thinking", "signature": "s"},  # another key order
        {"type": "thinking", "thinking": "t", "signature": "s", "extra": "x"},  # a key more
        {"type": "thinking", "thinking": "t", "signature": None},  # not a string
        {"type": "thinking", "thinking": "t", "signature": {"a": "b"}},
        {"type": "other", "thinking": "t", "signature": "s"},  # not the kind captured
        {"type": "thinking"},
        ["thinking", "t"],
    ],
)
def test_a_payload_of_another_shape_is_kept_as_its_bytes(value: Any) -> None:
    kept = _capture(copy.deepcopy(value), strings=True)
    assert type(kept) is Continuation
    assert kept.payload == _wire(value)


def test_an_edit_in_memory_is_refused_and_the_bytes_set_back_are_no_change() -> None:
    kept = _capture(dict(BLOCK), strings=True)
    original = kept.payload
    edited = original.replace(b"Rome", b"Oslo")
    object.__setattr__(kept, "payload", edited)
    assert kept.payload == edited
    with pytest.raises(ContinuationMismatch):
        kept.verify()
    with pytest.raises(ContinuationMismatch):
        kept.checked()
    assert kept != _capture(dict(BLOCK), strings=False)
    object.__setattr__(kept, "payload", bytes(original))  # an equal object, not the one read
    kept.verify()
    assert kept.payload == _wire(BLOCK) and kept == _capture(dict(BLOCK), strings=False)
    assert kept.stored_payload is None  # the strings again: nothing kept beside them
    object.__setattr__(kept, "_digest", "sha256:" + "0" * 64)  # the digest's slot replaced in memory
    with pytest.raises(ContinuationMismatch):
        kept.verify()


def test_evolve_and_copies_give_equal_values() -> None:
    kept = _capture(dict(BLOCK), strings=True)
    moved = attrs.evolve(kept, model="claude-y")
    assert moved.model == "claude-y" and moved.payload == _wire(BLOCK) and moved.digest == kept.digest
    moved.verify()
    assert moved == _capture(dict(BLOCK), strings=False, model="claude-y")
    assert attrs.evolve(kept, vendor="stripped").vendor == "stripped"  # as a rejected payload is marked
    for copied in (copy.copy(kept), copy.deepcopy(kept), pickle.loads(pickle.dumps(kept))):
        assert copied == kept and copied.payload == _wire(BLOCK) and type(copied) is type(kept)
        copied.verify()
    # another kind: the rendering would change, so the bytes evolved are kept as bytes
    other = attrs.evolve(kept, kind="other")
    assert type(other) is Continuation and other.payload == _wire(BLOCK) and other.digest == kept.digest
    other.verify()


def test_an_edit_in_memory_survives_evolve_and_copies() -> None:
    """A payload set in memory is not laundered into a matching value by evolving or copying it."""
    kept = _capture(dict(BLOCK), strings=True)
    object.__setattr__(kept, "payload", kept.payload.replace(b"Rome", b"Oslo"))
    for value in (attrs.evolve(kept, model="m"), copy.deepcopy(kept), pickle.loads(pickle.dumps(kept))):
        assert b"Oslo" in value.payload and value.digest == kept.digest
        with pytest.raises(ContinuationMismatch):
            value.verify()


@pytest.mark.parametrize(
    "value", [{"thoughtSignature": SIGNATURE}, {"thoughtSignature": SIGNATURE, "text": "Hi « é »"}]
)
def test_a_payload_without_a_type_is_kept_as_its_strings(value: dict[str, str]) -> None:
    """A Gemini Part's payload (no ``type`` field: ``{"thoughtSignature": ...}``) is kept as its strings and
    is the payload kept as its bytes in every public respect; an edit in memory is refused, copies and
    evolved values stay equal."""
    kept = _capture(dict(value), strings=True, kind="text")
    plain = _capture(dict(value), strings=False, kind="text")
    assert type(kept) is not Continuation and type(plain) is Continuation
    assert kept.stored_payload is None  # no bytes kept beside the strings
    assert kept.payload == plain.payload == _wire(value)
    assert kept.digest == plain.digest == "sha256:" + hashlib.sha256(_wire(value)).hexdigest()
    assert kept == plain and plain == kept and hash(kept) == hash(plain) and repr(kept) == repr(plain)
    checked = kept.checked()
    assert checked == value and list(checked) == list(value) and type(checked) is dict
    assert checked["thoughtSignature"] is kept.checked()["thoughtSignature"]  # the one string, shared
    for copied in (copy.copy(kept), copy.deepcopy(kept), pickle.loads(pickle.dumps(kept))):
        assert copied == kept and type(copied) is type(kept) and copied.payload == _wire(value)
    moved = attrs.evolve(kept, model="gemini-y")
    assert moved.model == "gemini-y" and moved.payload == _wire(value) and type(moved) is type(kept)
    object.__setattr__(kept, "payload", kept.payload.replace(b"EqQB", b"EqQC"))
    with pytest.raises(ContinuationMismatch):
        kept.verify()
    for value_ in (attrs.evolve(kept, model="m"), copy.deepcopy(kept), pickle.loads(pickle.dumps(kept))):
        with pytest.raises(ContinuationMismatch):
            value_.verify()


@pytest.mark.parametrize(
    "value", [{"thoughtSignature": "s", "thought": True}, {"a": "1", "b": "2", "c": "3"}, {}, {"type": 1}]
)
def test_an_untyped_payload_of_another_shape_is_kept_as_its_bytes(value: Any) -> None:
    kept = _capture(copy.deepcopy(value), strings=True, kind="text")
    assert type(kept) is Continuation and kept.payload == _wire(value)


def test_seals_of_payloads_kept_as_strings_keep_nothing_per_entry_and_still_refuse_an_edit() -> None:
    """Issue 21 (state in memory): a run's seals of payloads kept as their strings hold no payload or
    digest per entry (both are constants there); an edit in memory is refused all the same, also once a
    plain payload joined them (the lists are then kept for every entry)."""
    from reasonstate.adapters.base import Seal, Seals, compact

    def block(i: int) -> dict[str, str]:
        return {"type": "thinking", "thinking": f"Thought {i}.", "signature": f"sig{i}"}

    kept = [_capture(block(i), strings=True) for i in range(3)]
    seals = Seals().extended([Seal.of(kept[:2])]).extended([Seal.of(kept[2:])])
    assert seals._payloads is None and seals._digests is None and len(seals) == 3
    seals.check()
    plain = _capture(block(9), strings=False)
    mixed = seals.extended([Seal.of([plain])])
    assert mixed.payloads == [None, None, None, plain.payload] and len(mixed) == 4
    mixed.check()
    object.__setattr__(kept[1], "payload", compact(block(7)))
    with pytest.raises(ContinuationMismatch):
        seals.check()
    with pytest.raises(ContinuationMismatch):
        mixed.check()
