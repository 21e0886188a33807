"""What the installed vendor SDK declares a request may carry, read from the SDK itself at runtime: the
keyword parameters of its ``create()`` method and their annotations, the model ids its ``model`` annotation
lists, the fields of its config model. A session checks its options against that when it is built or
switched, so a mistake is an :class:`~reasonstate.errors.InvalidOption` naming the argument before anything
is sent, not the SDK's ``TypeError`` (or a request the vendor refuses) at the first ``send``
(docs/protocols.md §9).

The SDK is the oracle: an option a newer SDK declares is accepted without a release of ours, and nothing here
names a vendor option. Checks, for each option ``name=value``:

* ``name`` is a keyword parameter of the method (else: refused, with the closest accepted spelling, and, when
  the name is another API's option, which API takes it);
* ``value`` validates, in pydantic's strict mode, against the parameter's annotation with the SDK's
  ``Omit``/``NotGiven`` sentinels left out (``max_tokens="4096"`` is not an ``int``, ``store="yes"`` not a
  ``bool``, ``reasoning={"effort": "hgih"}`` not one of the effort literals);
* a mapping given where the annotation is a TypedDict (or a union of them) has only keys one of them
  declares (``reasoning={"efort": ...}``), since pydantic ignores extra TypedDict keys.

An annotation pydantic cannot build a validator for is not checked (accepted): this refuses only what the
SDK's own declaration rules out. Introspection is done once per SDK method and process, each validator built
the first time an option of that name is checked, so building a session stays cheap.

Sans-I/O, and no vendor SDK is imported here: the method comes from the caller's client.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from reasonstate.errors import InvalidOption
from reasonstate.state.frozen import FrozenDict, equal_values, frozen_repr, remember, thaw

__all__ = [
    "Declared",
    "check_call",
    "close_word",
    "declared",
    "elsewhere",
    "host_of",
    "model_owner",
    "object_parameters",
    "refuse_foreign",
    "sdk_method",
    "suggestion",
]

#: the model-id prefixes of each vendor (docs/protocols.md §9): an id with one of them belongs to that vendor
_VENDOR_PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("anthropic", re.compile(r"claude-")),
    ("openai", re.compile(r"gpt-|chatgpt-|o[1-9](?:$|-)")),
    ("gemini", re.compile(r"gemini-")),
    ("deepseek", re.compile(r"deepseek-")),
)
#: the words in a host name that say it serves a vendor's own models (DeepSeek's Anthropic-compatible
#: endpoint is api.deepseek.com/anthropic; Google's OpenAI-compatible one generativelanguage.googleapis.com)
_VENDOR_HOSTS: dict[str, tuple[str, ...]] = {
    "anthropic": ("anthropic",),
    "openai": ("openai",),
    "gemini": ("googleapis", "google", "gemini"),
    "deepseek": ("deepseek",),
}
#: how messages name each vendor
_NAMES = {"anthropic": "Anthropic", "openai": "OpenAI", "gemini": "Gemini", "deepseek": "DeepSeek"}
_SENTINELS = frozenset({"Omit", "NotGiven"})


def suggestion(name: str, accepted: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest accepted spelling of ``name`` (difflib), or ``""``."""
    close = difflib.get_close_matches(name, sorted(accepted), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def host_of(client: Any) -> str:
    """The lower-cased host of a client's ``base_url`` (``""`` when it has none)."""
    url = str(getattr(client, "base_url", "") or "")
    return re.sub(r"^[a-z]+://", "", url.lower()).split("/", 1)[0]


@functools.lru_cache(maxsize=256)
def model_owner(model: str) -> str | None:
    """The vendor a model id belongs to by its prefix (``claude-`` Anthropic, ``gpt-``/``o3`` OpenAI,
    ``gemini-``, ``deepseek-``), or None. Only the known prefixes are read: any other id (an
    OpenAI-compatible server's ``Qwen/Qwen3-8B``, a proxy's ``anthropic/claude-...``) belongs to no one."""
    m = model.lower()
    return next((owner for owner, prefix in _VENDOR_PREFIXES if prefix.match(m)), None)


def close_word(model: str, known: Iterable[str]) -> str | None:
    """The id ``model`` most likely misspells, or None.

    Provable from the SDK's list in one way only: ``model`` has a word (its ``-``-separated alphabetic
    parts: ``claude-sonet-4-6`` → ``sonet``) that no listed id uses and that is a small edit from one they
    do use (``sonnet``). An id made of known words (``claude-sonnet-9``), or with a word unlike any of them
    (a new family), is never refused: the SDK's list may simply be older than the model."""
    words = sorted({w for i in known for w in i.split("-") if w.isalpha()})
    parts = model.lower().split("-")
    for word in (w for w in parts if w.isalpha() and w not in words):
        near = difflib.get_close_matches(word, words, n=1, cutoff=0.75)
        if near:
            return "-".join(near[0] if w == word else w for w in parts)
    return None


def refuse_foreign(client: Any, model: str, vendor: str, label: str, *, only_on: str | None = None) -> None:
    """:class:`InvalidOption` when ``model`` belongs to another vendor (:func:`model_owner`) whose name the
    client's host does not carry (DeepSeek's Anthropic-compatible endpoint is api.deepseek.com/anthropic);
    ``only_on``: refuse only when the host contains it (a vendor's own host, for an SDK that compatible
    servers and proxies speak too). The host is read only for an id of another vendor."""
    owner = model_owner(model)
    if owner is None or owner == vendor:
        return
    host = host_of(client)
    if only_on is not None and only_on not in host:
        return
    if any(word in host for word in _VENDOR_HOSTS[owner]):
        return
    raise InvalidOption(
        f"model={model!r} is {_NAMES[owner]}'s, and this client calls {label} at "
        f"{host or 'its default host'}, {_NAMES.get(vendor, vendor)}'s own API (docs/protocols.md §9): "
        f"use a {_NAMES[owner]} client for it, or a {_NAMES.get(vendor, vendor)} model"
    )


def sdk_method(client: Any, sdk: str, resource: Sequence[str], name: str = "create") -> Any:
    """The SDK's own method a call on ``client`` goes to (``type(client.messages).create``), or None when
    the client is not that SDK's (a stand-in whose method is not the SDK's declaration)."""
    target = client
    try:
        for part in resource:
            target = getattr(target, part)
    except Exception:
        return None
    method = getattr(type(target), name, None)
    module = getattr(method, "__module__", None) or ""
    return method if callable(method) and module.split(".")[0] == sdk else None


def check_call(
    client: Any,
    *,
    sdk: str,
    resource: Sequence[str],
    label: str,
    vendor: str | None,
    model: str,
    options: Mapping[str, Any],
    only_on: str | None = None,
    own: frozenset[str] = frozenset(),
    family: str | None = None,
    unknown: str = "",
) -> None:
    """The checks of a session's model and options against the SDK method a call goes to: a model id of
    another vendor (:func:`refuse_foreign`; skipped for ``vendor=None``), a misspelling of the SDK's listed
    model ids (:func:`close_word`, only for ids starting with ``family``), then :meth:`Declared.check`.
    Nothing but the SDK's declaration and ``client.base_url`` is read; nothing is sent."""
    if vendor is not None:
        refuse_foreign(client, model, vendor, label, only_on=only_on)
    key: tuple[Any, ...] | None = None
    if type(options) is FrozenDict:
        # the repr tells values apart that compare equal (True == 1 == 1.0), as Declared._accepted's does
        key = (type(client), sdk, tuple(resource), label, model, frozen_repr(options), own, family, unknown)
        held = _PASSED.get(key)
        if held is not None and equal_values(held, options):
            return
    method = sdk_method(client, sdk, resource)
    if method is None:
        return
    found = declared(method, label)
    if family is not None and model.lower().startswith(family):
        near = found.misspelled(model)
        if near is not None:
            raise InvalidOption(
                f"model={model!r} is not a model id {label} knows: did you mean {near!r}? "
                f"(the installed {sdk} SDK lists {len(found.models())} ids; a word of this one is a "
                "misspelling of a word they use)"
            )
    found.check(options, own=own, unknown=unknown)
    if key is not None:
        remember(_PASSED, key, options, _ACCEPTED_MAX)


#: (client type, SDK, resource, label, model, the options' repr, own, family, unknown) → the frozen options
#: that passed :func:`check_call`'s declaration checks with them: those checks read nothing but these values
#: and the SDK method's declaration (one per client type and process: ``type(client.<resource>).create``),
#: so a service that builds its sessions with the same few options passes each once (issue 21: a fresh
#: session's constant costs). An entry answers only for equal options of the same repr (the repr tells
#: ``True`` from ``1``). The check of another vendor's model id reads the client's host: it runs every time.
#: Bounded: cleared when :data:`_ACCEPTED_MAX` are held.
_PASSED: dict[tuple[Any, ...], Mapping[str, Any]] = {}


def object_parameters(tools: Iterable[Any], label: str, rule: str) -> None:
    """:class:`InvalidOption` for the first tool whose offered parameters are not an object schema at the
    top (``{"type": "object", ...}``): ``label`` (the vendor's field) requires one, as ``rule`` says."""
    for tool in tools:
        kind = tool.offered_parameters.get("type")
        if kind != "object":
            raise InvalidOption(
                f"Tool {tool.name!r}: {label} must be an object schema at the top ({{'type': 'object', "
                f"'properties': {{...}}}}, {rule}), got type {kind!r}"
            )


class Declared:
    """The keyword options one SDK method declares (``names``), their annotations, and the validators
    built from them on first use. One per method and process (:func:`declared`)."""

    def __init__(self, method: Callable[..., Any], label: str) -> None:
        self.label = label
        params = inspect.signature(method).parameters
        self.names: frozenset[str] = frozenset(
            n for n, p in params.items() if n != "self" and p.kind is inspect.Parameter.KEYWORD_ONLY
        )
        try:
            hints: Mapping[str, Any] = typing.get_type_hints(method)
        except Exception:  # an annotation the SDK's module cannot resolve: names are still checked
            hints = {}
        self._hints = {n: _without_sentinels(hints[n]) for n in self.names if n in hints}
        self._validators: dict[str, Any] = {}
        self._keys: dict[str, frozenset[str] | None] = {}
        self._models: frozenset[str] | None = None
        self._verdicts: dict[str, str | None] = {}
        # (name, type and repr of a value) already found valid: a service builds its sessions with the same
        # few options, and this makes the second check of each a set lookup (repr tells True from 1)
        self._accepted: set[tuple[str, type, str]] = set()
        self._lock = threading.Lock()

    def misspelled(self, model: str) -> str | None:
        """The listed id ``model`` misspells (:func:`close_word`), or None; remembered per model id."""
        if model not in self._verdicts:
            listed = self.models()
            near = None if not listed or model in listed else close_word(model, sorted(listed))
            remember(self._verdicts, model, near, _ACCEPTED_MAX)
        return self._verdicts[model]

    def models(self) -> frozenset[str]:
        """The model ids the ``model`` annotation lists (its ``Literal`` members; empty: none listed)."""
        if self._models is None:
            self._models = frozenset(_literals(self._hints.get("model")))
        return self._models

    def check(
        self, options: Mapping[str, Any], *, own: frozenset[str] = frozenset(), unknown: str = ""
    ) -> None:
        """:class:`InvalidOption` for the first option this method does not declare, or whose value its
        annotation rules out. ``own``: names the codec consumes itself (not SDK parameters); ``unknown``:
        advice appended when a name is not declared."""
        for name, value in options.items():
            if name in own:
                continue
            if name not in self.names:
                raise InvalidOption(
                    f"{name}= is not an option of {self.label}{suggestion(name, self.names)}"
                    f"{elsewhere(name, self.label)}{unknown}"
                )
            key = (name, type(value), repr(value))
            if key in self._accepted:
                continue
            self._check_value(name, thaw(value))
            if len(self._accepted) >= _ACCEPTED_MAX:
                self._accepted.clear()
            self._accepted.add(key)

    def _check_value(self, name: str, value: Any) -> None:
        hint = self._hints.get(name)
        if hint is None:
            return
        validator = self._validator(name, hint)
        if validator is not None:
            import pydantic

            try:
                validator.validate_python(value, strict=True)
            except pydantic.ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(p) for p in error.get("loc", ()) if not _is_type_name(p))
                at = f" at {where}" if where else ""
                raise InvalidOption(
                    f"{name}={value!r:.80} is not what {self.label} declares{at}: {error['msg']}"
                ) from None
        if isinstance(value, Mapping):
            if name not in self._keys:
                self._keys[name] = _typeddict_keys(hint)
            keys = self._keys[name]
            unknown = sorted(str(k) for k in value if keys is not None and k not in keys)
            if keys is not None and unknown:
                raise InvalidOption(
                    f"{name}= has no key {unknown[0]!r} in {self.label}{suggestion(unknown[0], keys)}"
                )

    def _validator(self, name: str, hint: Any) -> Any:
        with self._lock:
            if name not in self._validators:
                self._validators[name] = _build_validator(hint)
            return self._validators[name]


#: how many valid (name, value) pairs a declaration remembers before it starts over
_ACCEPTED_MAX = 1024
#: SDK method → its declaration, once per process
_DECLARED: dict[Any, Declared] = {}


def declared(method: Callable[..., Any], label: str) -> Declared:
    """The declaration of an SDK method (a function, or a bound method: its function is the key)."""
    key = getattr(method, "__func__", method)
    found = _DECLARED.get(key)
    if found is None:
        found = _DECLARED.setdefault(key, Declared(key, label))
    return found


# -- annotations --------------------------------------------------------------------------------------------


def _without_sentinels(hint: Any) -> Any:
    """The annotation with the SDK's ``Omit``/``NotGiven`` sentinels taken out of its union."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = tuple(a for a in typing.get_args(hint) if getattr(a, "__name__", None) not in _SENTINELS)
        if not args:
            return None
        return args[0] if len(args) == 1 else typing.Union[args]  # noqa: UP007 - a runtime union of values
    return hint


def _literals(hint: Any) -> Iterable[str]:
    if hint is None:
        return
    if typing.get_origin(hint) is typing.Literal:
        yield from (a for a in typing.get_args(hint) if isinstance(a, str))
    for arg in typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ():
        yield from _literals(arg)


def _typeddict_keys(hint: Any) -> frozenset[str] | None:
    """The keys a mapping may have where ``hint`` wants a TypedDict (or a union of only TypedDicts among
    its mapping types), or None where any mapping goes."""
    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    keys: set[str] = set()
    found = False
    for member in members:
        if _is_typeddict(member):
            found = True
            keys.update(member.__required_keys__, member.__optional_keys__)
        elif member is object or typing.get_origin(member) in (dict, Mapping) or member in (dict, Mapping):
            return None
    return frozenset(keys) if found else None


def _is_typeddict(member: Any) -> bool:
    """A TypedDict class of ``typing`` or of ``typing_extensions`` (the SDKs use the latter, whose classes
    ``typing.is_typeddict`` does not recognise before Python 3.12)."""
    return isinstance(member, type) and issubclass(member, dict) and hasattr(member, "__required_keys__")


def _build_validator(hint: Any) -> Any:
    """A pydantic ``TypeAdapter`` for ``hint``, or None when pydantic cannot build one (not checked)."""
    import pydantic

    try:
        return pydantic.TypeAdapter(hint, config=pydantic.ConfigDict(arbitrary_types_allowed=True))
    except pydantic.PydanticUserError:  # a TypedDict or model carries its own config
        try:
            return pydantic.TypeAdapter(hint)
        except Exception:
            return None
    except Exception:
        return None


def _is_type_name(part: Any) -> bool:
    """Whether a pydantic error location part names a union member (``ThinkingConfigEnabledParam``,
    ``literal['a','b']``) rather than a key."""
    return isinstance(part, str) and (part[:1].isupper() or "[" in part)


def elsewhere(name: str, label: str) -> str:
    """``" (it is an option of <other API>)"`` when another room's installed SDK declares ``name``."""
    from reasonstate.adapters import APIS, room

    takers = []
    for api in APIS:
        declare = getattr(room(api), "declared_options", None)
        if declare is None:
            continue
        try:
            other_label, names = declare()
        except ImportError:  # that SDK is not installed
            continue
        if other_label != label and name in names:
            takers.append(other_label)
    return f" (it is an option of {', '.join(takers)})" if takers else ""
