"""The hot path rebuilds a few state values with their constructors instead of ``attrs.evolve`` (which
introspects the class on every call): ``Turn.with_steps`` / ``Turn.with_view`` and the commit's ``Layers``.
A field added to those classes would be silently dropped there, so their fields are pinned here: whoever
adds one updates those constructors and this list together."""

from __future__ import annotations

import attrs

from reasonstate.engine import Layers
from reasonstate.state.history import Turn, TurnView


def test_turn_fields_are_the_ones_its_with_methods_copy() -> None:
    assert [f.name for f in attrs.fields(Turn)] == ["index", "user", "steps", "view", "_encodings"]
    turn = Turn(3, "hi")
    view = TurnView((), policy="keep")
    assert turn.with_view(view) == attrs.evolve(turn, view=view)
    assert turn.with_steps(()).view is None
    assert turn.with_view(view).with_steps(()) == attrs.evolve(turn, view=view)


def test_layers_fields_are_the_ones_the_commit_copies() -> None:
    assert [f.name for f in attrs.fields(Layers)] == [
        "history",
        "trace",
        "records",
        "lost",
        "stripped",
        "last_body",
    ]
