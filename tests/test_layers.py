"""No import cycle between reasonstate's top-level parts.

Each subpackage or module directly under ``reasonstate`` (``state``, ``prefix``, ``adapters``, ``session``,
..., and the package's own ``__init__``) is one node; an import from anything inside one part to anything
inside another is an edge. Invariant: that graph has no cycle, so every part can be read (and tested) with
only the parts below it. The order itself is declared in pyproject.toml (``[tool.importlinter]``) and
checked by ``make lint``; this test needs no declared order. The graph is grimp's, built from the source
(TYPE_CHECKING imports included: a type points the same way as the code).
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import grimp
import pytest

PACKAGE = "reasonstate"


def _part(module: str) -> str:
    """``reasonstate.adapters.anthropic`` → ``reasonstate.adapters``; ``reasonstate`` stays itself."""
    return ".".join(module.split(".")[:2])


def _part_imports(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """part → the other parts it imports something of."""
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        if not (module == PACKAGE or module.startswith(PACKAGE + ".")):
            continue
        importer = _part(module)
        edges.setdefault(importer, set())
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith(PACKAGE + ".") or imported == PACKAGE:
                part = _part(imported)
                if part != importer:
                    edges[importer].add(part)
    return edges


def _cycle(edges: Mapping[str, Set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as its path (first node repeated at the end), or None when there is none."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                found = visit(nxt)
                if found is not None:
                    return found
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(edges):
        if start not in done:
            found = visit(start)
            if found is not None:
                return found
    return None


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, cache_dir=None)


def test_no_import_cycle_between_the_top_level_parts(graph: grimp.ImportGraph) -> None:
    edges = _part_imports(graph)
    assert {"reasonstate.state", "reasonstate.prefix", "reasonstate.adapters", "reasonstate.session"} <= set(
        edges
    )
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_state_layer_imports_nothing_of_the_rest_but_the_errors(graph: grimp.ImportGraph) -> None:
    assert _part_imports(graph)["reasonstate.state"] <= {"reasonstate.errors"}


def test_one_back_import_is_a_cycle_the_check_reports() -> None:
    # the check can fail: the real graph plus one import from the bottom layer to the top one
    back = grimp.build_graph(PACKAGE, cache_dir=None)
    back.add_import(importer="reasonstate.state.trace", imported="reasonstate.session")
    cycle = _cycle(_part_imports(back))
    assert cycle is not None
    assert cycle[0] == cycle[-1] and "reasonstate.state" in cycle and "reasonstate.session" in cycle
