"""``compact_encoder``: the C JSON encoder built once gives the stdlib's ``json.dumps`` text (issue 21: the
encoder that ``JSONEncoder.encode`` built per call was ~2 µs of every unit digest and payload capture)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reasonstate.prefix import canonical_json
from reasonstate.state.continuation import compact
from reasonstate.state.frozen import compact_encoder, freeze

VALUES: list[Any] = [
    "plain",
    'é \u2028 \x00 " \\ \ud83d\ude00',
    12,
    -0.0,
    1e16,
    1.5e-7,
    float("inf"),
    True,
    None,
    [],
    {},
    {"b": 1, "a": [1, {"d": None, "c": "ü"}], "": ""},
    [[[[]]], {"x": {"y": {"z": [1, 2.25, "€"]}}}],
    {"type": "thinking", "thinking": "Short thought.", "signature": "EqQBCkYIARgCKkD+/="},
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("sort", [False, True])
def test_same_text_as_json_dumps(value: Any, sort: bool) -> None:
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort)
    assert compact_encoder(sort_keys=sort)(value) == expected
    assert compact_encoder(sort_keys=sort)(freeze(value)) == expected  # FrozenDict / FrozenList alike


def test_the_callers_use_it() -> None:
    value = {"z": 1, "a": ["é"]}
    assert compact(value) == '{"z":1,"a":["é"]}'.encode()
    assert canonical_json(value) == '{"a":["é"],"z":1}'


def test_errors_as_the_stdlib() -> None:
    encode = compact_encoder()
    with pytest.raises(TypeError):
        encode({"x": object()})
    with pytest.raises(TypeError):
        encode({1.5j: 1})
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(ValueError):
        encode(cycle)
    assert encode({"ok": 1}) == '{"ok":1}'  # nothing left behind by the failures
