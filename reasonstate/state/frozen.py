"""Frozen JSON: the values the layers hold and hand out are immutable all the way down.

``freeze(v)`` turns a JSON value (dicts, lists, str, numbers, bool, None) into :class:`FrozenDict` /
:class:`FrozenList`: subclasses of ``dict`` / ``list`` that refuse every mutation, so the vendor SDKs,
``json.dumps`` and ``isinstance(x, dict)`` checks accept them unchanged, and no caller can change a payload,
a schema or a tool call's arguments through a reference it was given.

Invariants:
  * ``freeze(v) == v`` and ``json.dumps(freeze(v)) == json.dumps(v)`` (key order kept);
  * ``freeze(freeze(v)) is freeze(v)`` for containers (already frozen values are not copied again);
  * ``copy.copy`` / ``copy.deepcopy`` of a frozen value give plain, mutable ``dict`` / ``list`` copies
    (the caller asked for something it may change).
"""

from __future__ import annotations

import copy
import json
import json.encoder
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, SupportsIndex, TypeVar

__all__ = [
    "FrozenDict",
    "FrozenList",
    "compact_encoder",
    "equal_values",
    "freeze",
    "frozen_repr",
    "remember",
    "shared_repr",
    "thaw",
]


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable: copy it (dict(x) / list(x)) to change it")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that cannot be changed after construction. Build with :func:`freeze`."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self.items()))

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_dict, (list(self.items()),))


class FrozenList(list[Any]):
    """A ``list`` that cannot be changed after construction. Build with :func:`freeze`."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    clear = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    reverse = _refuse
    sort = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_list, (list(self),))

    def __mul__(self, n: SupportsIndex) -> list[Any]:
        return list(self) * n


def _rebuild_dict(items: Iterable[tuple[str, Any]]) -> FrozenDict:
    out = FrozenDict()
    dict.update(out, items)
    return out


def _rebuild_list(items: Iterable[Any]) -> FrozenList:
    out = FrozenList()
    list.extend(out, items)
    return out


_SCALARS = frozenset({str, int, float, bool, type(None)})


def freeze(value: Any) -> Any:
    """``value`` with every dict and list (and tuple) replaced by a frozen copy; scalars as they are."""
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict or kind is FrozenList:  # the common cases, by exact type
        return value
    if kind is dict:  # exact types before the (slow) ABC checks
        return _frozen_dict(value)
    if kind is list or kind is tuple:
        return _frozen_list(value)
    if isinstance(value, (FrozenDict, FrozenList)):
        return value
    if isinstance(value, Mapping):
        return _frozen_dict(value)
    if isinstance(value, (list, tuple)):
        return _frozen_list(value)
    return value


_STR = frozenset({str})


def _frozen_dict(value: Mapping[Any, Any]) -> FrozenDict:
    out = FrozenDict()
    keys: Iterable[str] = value if _STR.issuperset(map(type, value)) else map(_key, value)
    if keys is value and _SCALARS.issuperset(map(type, value.values())):
        dict.update(out, value)  # all keys strings, all values scalars (the common case): a C-level copy
    else:
        dict.update(out, zip(keys, map(freeze, value.values()), strict=True))  # iterated at C level
    return out


def _key(key: Any) -> str:
    return key if type(key) is str else str(key)


def _frozen_list(value: Iterable[Any]) -> FrozenList:
    out = FrozenList()
    scalars = _SCALARS
    if type(value) is not list and type(value) is not tuple:
        value = list(value)
    if scalars.issuperset(map(type, value)):
        list.extend(out, value)
    else:
        list.extend(out, [v if type(v) in scalars else freeze(v) for v in value])
    return out


_DICTS: frozenset[type] = frozenset((dict, FrozenDict))
_LISTS: frozenset[type] = frozenset((list, tuple, FrozenList))


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of a (frozen or not) JSON value."""
    kind = type(value)
    if kind in _SCALARS:  # most leaves, by exact type before the (slow) ABC checks
        return value
    if kind in _DICTS:
        return {k: v if type(v) in _SCALARS else thaw(v) for k, v in value.items()}
    if kind in _LISTS:
        return [v if type(v) in _SCALARS else thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


#: a value :func:`compact_encoder` checks its C encoder on: nesting, key order, non-ASCII, escapes, numbers
_PROBE: Any = {"b": [1, -2.5, 1e16, 0.1, True, None, 'é\n"\u2028\x00'], "a": {"z": {}, "y": []}, "": "x"}


def compact_encoder(*, sort_keys: bool = False) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys).encode``, the same
    text, with the C encoder built once instead of on every call (``encode`` builds one per call, ~2 µs of
    each unit digest and payload capture of a fresh session's first send: issue 21).

    A reference cycle is a ``ValueError`` as with ``encode`` (no marker dict: it would be shared between
    threads; the C encoder's recursion limit finds the cycle). Where the C encoder is missing or does not
    give ``encode``'s text on a probe value, ``encode`` itself."""
    base = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython has the C accelerator
        return base.encode
    try:
        # the arguments JSONEncoder.iterencode passes it (CPython 3.10-3.13); markers None: no cycle dict
        encode_c = make(
            None, base.default, json.encoder.encode_basestring, None, ":", ",", sort_keys, False, True
        )
    except TypeError:  # pragma: no cover - another signature: the stdlib's way
        return base.encode

    def encode(value: Any) -> str:
        try:
            return "".join(encode_c(value, 0))
        except RecursionError:
            raise ValueError("Circular reference detected (or nesting too deep)") from None

    try:
        same = encode(_PROBE) == base.encode(_PROBE) and encode("é") == base.encode("é")
    except Exception:  # pragma: no cover - defensive: any doubt, the stdlib's way
        same = False
    return encode if same else base.encode


_K = TypeVar("_K")
_V = TypeVar("_V")


def remember(table: dict[_K, _V], key: _K, value: _V, limit: int) -> _V:
    """``value``, kept under ``key`` in the module-level memo ``table``, which is emptied first when it
    holds ``limit`` entries: bounded with no bookkeeping per entry (the few keys a service uses again come
    back at once). The memos built on it key on immutable values, so an entry cannot go stale."""
    if len(table) >= limit:
        table.clear()
    table[key] = value
    return value


def interned(table: dict[_K, _V], key: _K, value: _V, limit: int) -> _V:
    """The value kept under ``key`` in the module-level intern table ``table``, else ``value``, kept there
    while the table holds fewer than ``limit`` entries (beyond it ``value`` is its own, and the table keeps
    what it shares: unlike :func:`remember`'s memos, shared values are never let go). An unhashable key
    gives ``value``. Callers look ``key`` up first when ``value`` costs something to build."""
    try:
        found = table.get(key)
    except TypeError:  # an unhashable field: the caller's odd value, its own
        return value
    if found is not None:
        return found
    return table.setdefault(key, value) if len(table) < limit else value


#: id(value) → (value, repr(value)) for the frozen values :func:`shared_repr` was told hold JSON values only
#: (immutable all the way down, so their repr never changes; the entry holds the value, so its id is not
#: reused while the entry lives). Bounded: cleared when :data:`_REPRS_MAX` are held.
_REPRS: dict[int, tuple[Any, str]] = {}
_REPRS_MAX = 256


def shared_repr(value: Any) -> str:
    """``repr(value)``, remembered for :func:`frozen_repr`: only for a frozen value holding JSON values only
    (its dicts and lists frozen, every leaf a ``str``, number, bool or None), which a memo shares between
    sessions (a session's frozen options)."""
    text = repr(value)
    remember(_REPRS, id(value), (value, text), _REPRS_MAX)
    return text


def frozen_repr(value: Any) -> str:
    """``repr(value)``: looked up for a value :func:`shared_repr` remembered (the memos keyed on a session's
    options' repr ask for it on every session built; issue 21: a fresh session's constant costs)."""
    held = _REPRS.get(id(value))
    if held is not None and held[0] is value:
        return held[1]
    return repr(value)


def equal_values(held: Any, given: Any) -> bool:
    """Whether a memo's ``held`` value equals the ``given`` one (of the same repr, so ``True`` and ``1``
    are already told apart); False when a value cannot say (its ``==`` raises: not a JSON value), so the
    memo's work is done again rather than skipped."""
    try:
        return bool(held == given)
    except Exception:
        return False
