"""``TokenIds``: an immutable sequence of token ids that shares its storage with the prompts it extends.

A token session's prompts extend each other: the next prompt is the previous prompt, the ids sampled for it
and a few new tokens (the token bridge). Kept as one tuple per request they grow with the square of the
session's length; kept as views of one append-only buffer they grow with the tokens the session adds.

``TokenIds`` is such a view: the first ``n`` ids of a shared ``array('q')``. :meth:`extended` appends to the
buffer in place when the view ends where the buffer ends (the usual case: a prompt extended once), reuses
the buffer when it already holds the same ids after the view (a request retried), rewrites what follows
the view when no live view covers it (a request built only to predict something, then dropped; the buffer
keeps a weak reference to each of its views), and copies otherwise (a fork). Ids a live view covers are
never written again, so a view never changes.

Comparisons, slices and the seal (:meth:`digest_with`) run at C speed over the buffer; the seal of the
buffer's ids is kept as a running ``sha256`` state, so sealing a prompt that extends the previous one hashes
only what it adds. A view equals a tuple or another view with the same ids (like a tuple, never a list);
slices and :meth:`as_tuple` give tuples.
"""

from __future__ import annotations

import array
import bisect
import hashlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, overload

__all__ = ["TokenIds", "ids_digest"]

_LOCK = threading.Lock()  # buffers are shared between views (and sessions forked from one another)


def _digest(h: Any) -> str:
    return "sha256:" + str(h.hexdigest())


def ids_digest(ids: Sequence[int]) -> str:
    """``sha256`` of token ids as 64-bit integers: what a record's ids are checked against before reuse."""
    if isinstance(ids, TokenIds):
        return ids.digest_with(())
    return _digest(hashlib.sha256(array.array("q", ids).tobytes()))


class _Buffer:
    """Append-only ids shared by views, with the running hash of its first ``hashed`` ids and a weak
    reference to each view of it, by length (``views``)."""

    __slots__ = ("hashed", "hasher", "ids", "views")

    def __init__(self, ids: array.array[int]) -> None:
        self.ids = ids
        self.hashed = 0
        self.hasher: Any = hashlib.sha256()
        self.views: list[tuple[int, weakref.ref[TokenIds]]] = []

    def unseen_after(self, n: int) -> bool:
        """True when no live view reaches past ``n`` ids (forgetting the dead ones that did)."""
        i = bisect.bisect_right(self.views, n, key=_length)
        if any(ref() is not None for _, ref in self.views[i:]):
            return False
        del self.views[i:]
        return True


def _length(entry: tuple[int, weakref.ref[TokenIds]]) -> int:
    return entry[0]


def _common(a: array.array[int], b: array.array[int], n: int) -> int:
    """The largest ``k <= n`` with ``a[:k] == b[:k]`` (both hold at least ``n`` ids): one comparison when
    they agree, else a binary search of slice comparisons."""
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class TokenIds(Sequence[int]):
    """The first ``len(self)`` ids of a shared append-only buffer (see the module docstring)."""

    __slots__ = ("__weakref__", "_buf", "_n")

    _buf: _Buffer
    _n: int

    def __init__(self, ids: Sequence[int] = ()) -> None:
        if isinstance(ids, TokenIds):
            buf, n = ids._buf, ids._n
        else:
            data = array.array("q", ids)
            buf, n = _Buffer(data), len(data)
        object.__setattr__(self, "_buf", buf)
        object.__setattr__(self, "_n", n)
        with _LOCK:
            bisect.insort(buf.views, (n, weakref.ref(self)), key=_length)

    @classmethod
    def of(cls, ids: Sequence[int]) -> TokenIds:
        """``ids`` as a view: itself when it is one, else a copy in a new buffer."""
        return ids if isinstance(ids, TokenIds) else cls(ids)

    @classmethod
    def _view(cls, buf: _Buffer, n: int) -> TokenIds:
        """A new view of ``buf`` (called under the lock)."""
        self = object.__new__(cls)
        object.__setattr__(self, "_buf", buf)
        object.__setattr__(self, "_n", n)
        bisect.insort(buf.views, (n, weakref.ref(self)), key=_length)
        return self

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"TokenIds is immutable (cannot set {name})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (TokenIds, (self.as_tuple(),))

    # -- building ----------------------------------------------------------------------------------------
    def extended(self, tail: Sequence[int], at: int | None = None) -> TokenIds:
        """``self[:at] + tail`` (``at``: ``len(self)`` when None), sharing this view's buffer when it can:
        work in proportion to ``tail``. The buffer is appended to when it ends at ``at``, reused when it
        holds ``tail`` there already (a request encoded again), and rewritten after ``at`` when it holds
        other ids there that no live view covers (a request encoded to predict a policy's effect, then
        dropped); only when a live view covers them is ``self[:at]`` copied into a new buffer (a fork)."""
        n = self._n if at is None else at
        if not 0 <= n <= self._n:
            raise ValueError(f"cannot extend the first {n} of {self._n} ids")
        add = tail.as_array() if isinstance(tail, TokenIds) else array.array("q", tail)
        buf = self._buf
        end = n + len(add)
        with _LOCK:
            ids = buf.ids
            if len(ids) == n:
                ids.extend(add)
                return TokenIds._view(buf, end)
            if len(ids) >= end and ids[n:end] == add:
                return TokenIds._view(buf, end)
            if buf.unseen_after(n):
                del ids[n:]
                if buf.hashed > n:
                    buf.hashed, buf.hasher = 0, hashlib.sha256()
                ids.extend(add)
                return TokenIds._view(buf, end)
            fresh = ids[:n]
            fresh.extend(add)
            return TokenIds._view(_Buffer(fresh), end)

    # -- reading -----------------------------------------------------------------------------------------
    def as_array(self) -> array.array[int]:
        """The ids as a new ``array('q')`` (one C-speed copy)."""
        return self._buf.ids[: self._n]

    def after(self, start: int) -> array.array[int]:
        """``self[start:]`` (``start >= 0``; a negative one counts as 0) as a new ``array("q")``, copying
        only those ids."""
        return self._buf.ids[min(max(start, 0), self._n) : self._n]

    def as_tuple(self) -> tuple[int, ...]:
        """The ids as a tuple."""
        return tuple(self._buf.ids[: self._n])

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...
    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step < 0:  # a negative stop would count from the buffer's end, not the view's
                return tuple(self._buf.ids[: self._n][index])
            return tuple(self._buf.ids[start:stop:step])
        n = self._n
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("TokenIds index out of range")
        return self._buf.ids[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._buf.ids[: self._n])

    def __reversed__(self) -> Iterator[int]:
        return reversed(self._buf.ids[: self._n])

    def __contains__(self, value: object) -> bool:
        return value in self._buf.ids[: self._n]

    def common_prefix_len(self, other: Sequence[int]) -> int:
        """The largest ``k`` with ``self[:k] == other[:k]``, by C-speed slice comparisons (none for a view
        of the same buffer: two views of one buffer agree on their common length)."""
        a = self._buf.ids
        b = other._buf.ids if isinstance(other, TokenIds) else array.array("q", other)
        n = min(self._n, len(other))
        return n if a is b else _common(a, b, n)

    def shared_with(self, prompt: Sequence[int], completion: Sequence[int]) -> int:
        """``common_prefix_len(self, prompt + completion)``: in proportion to ``completion`` when ``prompt``
        is a view of this view's buffer (their shared part needs no comparison), C speed otherwise."""
        k = self.common_prefix_len(prompt)
        n = len(prompt)
        if k < n or self._n == n or not completion:
            return k
        head = self._buf.ids[n : min(self._n, n + len(completion))]
        return n + _common(head, array.array("q", completion[: len(head)]), len(head))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenIds):
            if self._n != other._n:
                return False
            return self._buf is other._buf or self.as_array() == other.as_array()
        if isinstance(other, tuple):
            if self._n != len(other):
                return False
            try:
                return self.as_array() == array.array("q", other)
            except (TypeError, OverflowError):
                return False
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        head = ", ".join(map(str, self._buf.ids[: min(self._n, 8)]))
        return f"TokenIds([{head}{', ...' if self._n > 8 else ''}], n={self._n})"

    # -- sealing -----------------------------------------------------------------------------------------
    def digest_with(self, tail: Sequence[int]) -> str:
        """``ids_digest(self + tail)``; hashes only the ids after the buffer's running hash when this view
        reaches it (a prompt extending the previous one), else all of them."""
        buf, n = self._buf, self._n
        with _LOCK:
            if buf.hashed <= n:
                h = buf.hasher.copy()
                h.update(buf.ids[buf.hashed : n].tobytes())
                buf.hasher, buf.hashed = h.copy(), n
            else:
                h = hashlib.sha256(buf.ids[:n].tobytes())
        if tail:
            h.update(
                (tail._buf.ids[: tail._n] if isinstance(tail, TokenIds) else array.array("q", tail)).tobytes()
            )
        return _digest(h)
