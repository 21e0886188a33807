"""Protocol continuation: vendor-opaque payloads exactly as received, with provenance and a capture digest.

Invariants (the rules the whole SDK stands on):
  * ``payload`` is never edited: it is the block/item JSON as the vendor sent it (UTF-8 bytes);
  * ``digest == sha256(payload)`` at capture, and :meth:`Continuation.checked` re-verifies it before every
    send, so a payload changed in memory or in a snapshot is refused, never sent;
  * a continuation is replayed only to the platform, vendor, api and model that produced it (signatures
    are model-bound: anthropics/anthropic-sdk-python#1598; and platform-bound: a Bedrock signature is not
    a first-party one, pydantic/pydantic-ai#3757, docs/protocols.md §10), see
    :meth:`Continuation.replayable_to`;
  * a *provenance-only* continuation (:func:`provenance_only`: ``payload == b""``, never model-bound) keeps
    who produced a step and no bytes: its codec renders the item from the step's parts, and kept it only
    when that rendering was byte for byte the item received (issue 21: the answer kept once). Every such
    value of one origin is one shared object.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from typing import Any, ClassVar, cast

import attrs

from reasonstate.errors import ContinuationMismatch, MalformedResponse
from reasonstate.state.frozen import compact_encoder, freeze, interned

__all__ = [
    "FIRST_PARTY",
    "Continuation",
    "StringsPayload",
    "bound",
    "compact",
    "digest_of",
    "edits",
    "platform_part",
    "provenance_only",
    "recorded_platform",
    "shared_bare",
    "sharing",
    "unicode_reply",
]

#: the platform of a vendor's own API (api.anthropic.com, api.openai.com, the Gemini API, a chat dialect's
#: own endpoint); the others are cloud platforms serving the same models: ``"bedrock"``, ``"vertex"``,
#: ``"azure"`` (docs/protocols.md §10). Payloads captured before platforms were recorded are first-party
FIRST_PARTY = "first-party"

#: vendor names that are platforms (Bedrock's Converse API, docs/protocols.md §11): a payload of theirs
#: recorded before its platform was is still theirs, never first-party
_VENDOR_PLATFORMS = frozenset({"bedrock"})


#: between a platform and the scope it binds payloads to, in a binding (``"bedrock#account:…/us-east-1"``)
SCOPE_SEPARATOR = "#"


def bound(platform: str, scope: str = "") -> str:
    """The binding of a payload served on ``platform`` for the account or resource ``scope``: ``platform``
    itself when the scope is unknown (``""``), else ``platform#scope`` (docs/protocols.md §10.1). A scope is
    an identifier (an AWS account id, an access key *id*, an Azure resource host), never a secret."""
    return f"{platform}{SCOPE_SEPARATOR}{scope}" if scope else platform


def platform_part(binding: str) -> str:
    """The platform of a binding (:func:`bound`): ``"bedrock"`` for ``"bedrock#account:…"``."""
    return binding.partition(SCOPE_SEPARATOR)[0]


def recorded_platform(vendor: str, platform: str) -> str:
    """Where a payload of ``vendor`` recorded as served on ``platform`` was served: ``platform``, except
    that a vendor which is itself a platform (``"bedrock"``, whose Converse payloads were recorded as
    first-party before they were bound to it) was served there (docs/protocols.md §10.1, §11)."""
    return vendor if platform == FIRST_PARTY and vendor in _VENDOR_PLATFORMS else platform


#: a value not given (:meth:`Continuation.restored`)
_UNPARSED: Any = object()
#: (payload, digest): objects found to match (``sha256(payload) == digest``), or (payload, digest, value): the
#: same, with a value a caller of an earlier version handed along (never kept: the bytes are what is kept)
_Checked = tuple[bytes, str] | tuple[bytes, str, Any]
#: what a continuation keeps of its digest: ``bytes`` (the digest is ``sha256`` of those bytes: the payload
#: object itself when they matched on construction) or ``str`` (a digest given that did not match)
_Digest = bytes | str

_DUMPS = compact_encoder()


def compact(value: Any) -> bytes:
    """Compact JSON, keys in their given order, non-ASCII kept as it is (never escaped): how payloads are
    captured and sent, and what prefix units are digests of."""
    return _DUMPS(value).encode()


def unicode_reply(value: Any, what: str) -> Any:
    """A vendor's decoded JSON answer as text the session can keep: ``value`` itself when every string in
    it is valid Unicode, else a copy with each UTF-16 surrogate *pair* joined into its character; a lone
    surrogate anywhere (text, arguments, ids, keys) is :class:`MalformedResponse` naming where.

    The rule (docs/protocols.md §0.3): a lone surrogate (``"\\ud800"``, a valid JSON escape) has no UTF-8
    form, and the vendors' own parsers refuse it coming back (Anthropic: 400 "no low surrogate in
    string"), so such an answer can be neither captured as payload bytes nor replayed as it came: it is
    refused whole, before anything is committed. A pair cut across two stream deltas (``"\\ud83d"`` then
    ``"\\ude00"``) is one character once the deltas are joined, as ``json.loads`` reads the two escapes
    in one string; so the joined text commits as that character.

    Invariant: ``compact(unicode_reply(v, w))`` never raises :class:`UnicodeEncodeError`, and equals
    ``compact(v)`` whenever that does not raise.
    """
    try:
        compact(value)  # one C-speed pass: almost every answer is plain valid text
    except UnicodeEncodeError:
        return _joined(value, what)
    except (TypeError, ValueError):
        pass  # not JSON at all: the codec says what is wrong with it
    return value


def _joined(value: Any, where: str) -> Any:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            try:  # UTF-16 round trip: joins each pair, fails at the first lone surrogate
                return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
            except UnicodeDecodeError:
                bad = next(i for i in range(len(value)) if _lone(value, i))
                raise MalformedResponse(
                    f"{where} holds {value[bad]!r} at index {bad}: half of a UTF-16 surrogate pair, not "
                    "valid Unicode (no UTF-8 form; the vendor would refuse it back); nothing was committed "
                    "(docs/protocols.md §0.3)"
                ) from None
        return value
    if isinstance(value, dict):
        return {_joined(k, f"{where} key {k!r}"): _joined(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_joined(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _lone(text: str, i: int) -> bool:
    """True when ``text[i]`` is a surrogate that is not one half of a high-low pair."""
    c = text[i]
    if "\ud800" <= c <= "\udbff":
        return not (i + 1 < len(text) and "\udc00" <= text[i + 1] <= "\udfff")
    if "\udc00" <= c <= "\udfff":
        return not (i > 0 and "\ud800" <= text[i - 1] <= "\udbff")
    return False


def digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


#: a payload's provenance: (vendor, api, model, model_bound, platform)
_Origin = tuple[str, str, str, bool, str]
#: the shared provenance tuples: every payload of one model on one route holds the same one (issue 21: one
#: slot per payload, not five); bounded, beyond it a payload's provenance is its own tuple
_ORIGINS: dict[_Origin, _Origin] = {}
_ORIGINS_MAX = 4096


def _shared_origin(origin: _Origin) -> _Origin:
    return interned(_ORIGINS, origin, origin, _ORIGINS_MAX)


def _merged_origin(
    origin: _Origin | None,
    vendor: str | None,
    api: str | None,
    model: str | None,
    model_bound: bool | None,
    platform: str | None,
) -> _Origin:
    """``origin`` (the provenance ``attrs.evolve`` hands back) with every field named replaced, shared."""
    was = origin if origin is not None else ("", "", "", True, FIRST_PARTY)
    return _shared_origin(
        (
            was[0] if vendor is None else vendor,
            was[1] if api is None else api,
            was[2] if model is None else model,
            was[3] if model_bound is None else model_bound,
            was[4] if platform is None else platform,
        )
    )


@attrs.frozen(slots=True, init=False, weakref_slot=False, repr=False)
class Continuation:
    """One vendor-opaque payload (a thinking block, a reasoning item, a content block we do not model).

    ``kind`` is the vendor's own type name (``thinking``, ``redacted_thinking``, ``reasoning``, ...);
    ``model_bound`` says whether only the producing model may receive it; ``platform`` is where the
    request was served (:data:`FIRST_PARTY` or a cloud platform), with the account or resource the platform
    binds payloads to when it is known (:func:`bound`: ``"bedrock#account:…/us-east-1"``,
    ``"azure#res.openai.azure.com"``): a payload goes back only to the platform (and scope) that issued it,
    whatever ``model_bound`` says (docs/protocols.md §10.1).

    ``vendor``, ``api``, ``model``, ``model_bound`` and ``platform`` are read from one provenance tuple
    shared by every payload of the same origin (issue 21: state in proportion to the content);
    ``attrs.evolve(c, vendor=...)`` still makes the changed value.

    ``digest`` (``"sha256:<hex>"``) is derived, not stored (issue 21: a 120-byte string per payload): a
    payload found to match its digest when the value is built (at capture and restore, by construction;
    else by hashing once) keeps, in the digest's slot, the very payload object, and the digest is taken of
    it when read. ``bytes`` are immutable, so while ``payload`` still holds that object it matches; a
    payload replaced in memory no longer is that object, and :meth:`verify` compares the digest of the
    replaced bytes (still in the slot) with the new payload's, so it is refused, never sent. A digest given
    that does not match is kept as given (and refused by :meth:`verify`).
    """

    kind: str
    payload: bytes
    #: ``digest`` as kept (:data:`_Digest`): the payload object itself when they matched on construction
    _digest: _Digest = attrs.field(alias="digest")
    #: (vendor, api, model, model_bound, platform), shared (:func:`_shared_origin`)
    _origin: _Origin
    #:
    #: The payload is kept once, as its bytes: no parsed copy is kept here (issue 21: the frozen value was
    #: ~0.5x the content on Responses). A codec parses the bytes when it encodes the step (once per closed
    #: turn, in its memo: :class:`~reasonstate.adapters.base.Encodings`), sharing strings with the
    #: history's own (:func:`sharing`).
    #: the ``payload`` slot as stored, read at C speed: the bytes, or None for a :class:`StringsPayload`
    #: whose bytes are rendered from its strings (what a seal compares by identity: reading ``payload``
    #: would render every sealed payload on each request)
    stored_payload: ClassVar[Any]

    def __init__(
        self,
        vendor: str | None = None,
        api: str | None = None,
        model: str | None = None,
        kind: str | None = None,
        payload: bytes | None = None,
        digest: _Digest | None = None,
        model_bound: bool | None = None,
        platform: str | None = None,
        *,
        origin: _Origin | None = None,
        known: _Checked | None = None,
    ) -> None:
        # every field is required as before; the defaults only let ``attrs.evolve`` hand the provenance
        # back as one ``origin``, which gives every provenance field not named
        if kind is None or payload is None or digest is None:
            raise TypeError("Continuation() needs kind, payload and digest")
        if origin is None and (vendor is None or api is None or model is None):
            raise TypeError("Continuation() needs vendor, api and model")
        set_ = object.__setattr__  # the frozen class's own construction, as attrs' generated __init__
        set_(self, "kind", kind)
        # the slots themselves: building a value is no edit in memory (:func:`edits`)
        _PAYLOAD_SLOT.__set__(self, payload)
        _DIGEST_SLOT.__set__(self, _kept_digest(payload, digest, known))
        set_(self, "_origin", _merged_origin(origin, vendor, api, model, model_bound, platform))

    @property
    def digest(self) -> str:
        """``"sha256:<hex>"`` of the payload as captured (taken when read: :data:`_Digest`)."""
        kept = self._digest
        return kept if isinstance(kept, str) else digest_of(kept)

    @property
    def vendor(self) -> str:
        return self._origin[0]

    @property
    def api(self) -> str:
        return self._origin[1]

    @property
    def model(self) -> str:
        return self._origin[2]

    @property
    def model_bound(self) -> bool:
        return self._origin[3]

    @property
    def platform(self) -> str:
        return self._origin[4]

    def __repr__(self) -> str:
        return (
            f"Continuation(vendor={self.vendor!r}, api={self.api!r}, model={self.model!r}, "
            f"kind={self.kind!r}, digest={self.digest!r}, model_bound={self.model_bound!r}, "
            f"platform={self.platform!r})"
        )

    @classmethod
    def capture(
        cls,
        *,
        vendor: str,
        api: str,
        model: str,
        kind: str,
        value: Any,
        model_bound: bool = True,
        parsed: bool = True,
        platform: str = FIRST_PARTY,
        strings: bool = False,
    ) -> Continuation:
        """Capture a decoded JSON value as received (key order and string bytes preserved).

        ``value`` is a JSON value as decoded (``json.loads``), so ``json.loads(payload) == value``. Only the
        bytes are kept (``parsed`` is accepted for callers of earlier versions and changes nothing): a codec
        parses them when it encodes the step, once per closed turn in its memo.

        ``strings``: when ``value`` is ``{"type": kind, name: text}`` or ``{"type": kind, name: text, name2:
        text2}`` (string values, in that order: an Anthropic thinking block), keep the payload as those
        strings, the very objects of ``value``, which the history's part and the codec's memo hold too: its
        bytes are rendered from them when read, the same bytes (:class:`StringsPayload`; issue 21: one copy
        of a payload in memory, not its bytes beside the strings sent). Any other value is kept as bytes.
        """
        if strings and _string_fields(value, kind):
            return StringsPayload.of(
                value, kind=sys.intern(kind), origin=(vendor, api, model, model_bound, platform)
            )
        payload = compact(value)
        return cls(
            vendor=vendor,
            api=api,
            model=model,
            kind=sys.intern(kind) if type(kind) is str else kind,  # one object per type name, not per payload
            payload=payload,
            digest=payload,  # the digest is of these very bytes: they match
            model_bound=model_bound,
            platform=platform,
        )

    @classmethod
    def restored(
        cls,
        *,
        vendor: str,
        api: str,
        model: str,
        kind: str,
        payload: bytes,
        model_bound: bool,
        value: Any = _UNPARSED,
        platform: str = FIRST_PARTY,
        strings: bool = False,
    ) -> Continuation:
        """A payload read back from storage, its digest taken of these very bytes (a snapshot stores the
        bytes, not the digest: it is derived). ``value`` (a JSON value whose compact form is ``payload``) is
        not kept as such: only the bytes are (nothing is parsed here), or with ``strings``, where ``value``
        has the shape :meth:`capture` keeps as strings and its compact form is ``payload``, its strings
        (:class:`StringsPayload`: the form the session captured it in).
        Empty bytes (a provenance-only continuation, not model-bound) give the shared value of that origin
        (:func:`provenance_only`)."""
        if payload == b"" and not model_bound:
            return provenance_only(vendor=vendor, api=api, model=model, kind=kind, platform=platform)[0]
        if strings and _string_fields(value, kind) and compact(value) == payload:
            return StringsPayload.of(
                value, kind=sys.intern(kind), origin=(vendor, api, model, model_bound, platform)
            )
        return cls(
            vendor=vendor,
            api=api,
            model=model,
            kind=kind,
            payload=payload,
            digest=payload,  # the digest is of these very bytes: they match
            model_bound=model_bound,
            platform=platform,
        )

    def verify(self) -> None:
        """Raise :class:`ContinuationMismatch` unless ``sha256(payload) == digest``."""
        payload, kept = self.payload, self._digest
        if kept is payload and type(payload) is bytes:  # the very bytes found to match: unchanged
            return
        digest = self.digest
        if digest_of(payload) != digest:
            raise ContinuationMismatch(
                f"{self.vendor} {self.kind} payload changed since capture (digest {digest[:19]}…)"
            )

    def checked(self) -> Any:
        """The payload as a fresh, mutable JSON value, after :meth:`verify` (None for a provenance-only
        continuation, :attr:`bare`: it keeps no payload)."""
        self.verify()
        return json.loads(self.payload) if self.payload else None

    @property
    def value(self) -> Any:
        """The payload's JSON value, frozen (:func:`~reasonstate.state.frozen.freeze`), after :meth:`verify`.

        Parsed from the verified bytes on each read (nothing parsed is kept here: a codec keeps what it
        sends in its memo), so what a request sends is what was captured. None for a provenance-only
        continuation (:attr:`bare`: it keeps no payload).
        """
        self.verify()
        return freeze(json.loads(self.payload)) if self.payload else None

    @property
    def bare(self) -> bool:
        """True for a provenance-only continuation (:func:`provenance_only`): no payload bytes are kept,
        the codec renders the item from the step's parts (a captured payload is never empty: the compact
        JSON of a value)."""
        return not self.payload

    def replayable_to(self, vendor: str, api: str, model: str, platform: str = FIRST_PARTY) -> bool:
        """True when this payload may be sent to ``vendor``/``api``/``model`` on ``platform`` (a binding,
        :func:`bound`): never to another platform, even for the same model, nor to another account or
        resource of one platform (docs/protocols.md §10.1).

        A payload whose scope is unknown (captured before scopes were recorded, or from a client whose
        account the SDK could not tell) is bound to its platform only, as before: it goes to any scope of
        that platform. A payload whose scope is known goes only to that very scope, never to a client whose
        scope is unknown (nothing shows it is the same account)."""
        if self.vendor != vendor or self.api != api or not self.goes_to(platform):
            return False
        return not self.model_bound or self.model == model

    def goes_to(self, platform: str) -> bool:
        """True when this payload may go to ``platform`` (a binding, :func:`bound`) as far as the platform
        and scope go (:meth:`replayable_to` without the vendor, API and model)."""
        mine = self.platform
        return mine == platform or (SCOPE_SEPARATOR not in mine and platform_part(platform) == mine)


#: the ``payload`` slot itself, under another name: what a continuation stores, read at C speed (the
#: ``payload`` attribute of a :class:`StringsPayload` renders its bytes)
_PAYLOAD_SLOT: Any = Continuation.__dict__["payload"]
Continuation.stored_payload = _PAYLOAD_SLOT
#: the digest's slot itself (``Continuation._digest`` is a property over it that counts edits, below)
_DIGEST_SLOT: Any = Continuation.__dict__["_digest"]

#: how many edits in memory there were so far (:func:`edits`)
_edits = 0
_EDIT_LOCK = threading.Lock()


def edits() -> int:
    """How many times the ``payload`` or the kept digest of a built :class:`Continuation` was set so far: an
    edit in memory (``object.__setattr__``, past the frozen class's refusal; building or copying a value is
    none). Invariant: while this count stays what it was, every continuation still holds the very payload
    and digest objects it held then. So a check that found a run's payloads unchanged at a count need not
    look at them again while the count is the same: only at the ones added since (:meth:`Seals.check
    <reasonstate.adapters.base.Seals.check>`, issue 21: own CPU per request). The count only grows."""
    return _edits


def _edited() -> None:
    """Count one edit in memory (after the set: a check that read the count before it looks again)."""
    global _edits
    with _EDIT_LOCK:
        _edits += 1


def _watched(slot: Any, name: str) -> property:
    """A property over ``slot`` whose reads go to the slot at C speed and whose every set is counted
    (:func:`edits`); the constructors write the slots themselves."""

    def edited(self: Continuation, value: Any) -> None:
        slot.__set__(self, value)
        _edited()

    return property(slot.__get__, edited, doc=f"the slot ``{name}``, its edits counted")


setattr(Continuation, "payload", _watched(_PAYLOAD_SLOT, "payload"))  # noqa: B010 (a slot made a property)
setattr(Continuation, "_digest", _watched(_DIGEST_SLOT, "_digest"))  # noqa: B010
_set = object.__setattr__


def _string_fields(value: Any, kind: str) -> bool:
    """True when ``value`` is a plain dict ``{"type": kind, name: str}`` or ``{"type": kind, name: str,
    name2: str}`` (a typed block), or ``{name: str}`` or ``{name: str, name2: str}`` with ``name != "type"``
    (an untyped one: a Gemini Part's ``{"thoughtSignature": ...}``), every key and value an exact ``str``
    (what :class:`StringsPayload` renders back)."""
    if type(value) is not dict or type(kind) is not str:
        return False
    keys = iter(value)
    if next(keys, None) == "type":
        if not 2 <= len(value) <= 3 or value["type"] != kind:
            return False
    elif 1 <= len(value) <= 2:
        keys = iter(value)
    else:
        return False
    return all(type(k) is str and type(value[k]) is str for k in keys)


class StringsPayload(Continuation):
    """A continuation whose payload ``{"type": kind, names[0]: first[, names[1]: second]}`` is kept as its
    strings (:meth:`Continuation.capture` with ``strings=True``), not as its bytes: :attr:`payload` renders
    the bytes (:func:`compact`, as capture took them) and :attr:`digest` is taken of them, when read. The
    strings are the very objects the decoded block held, which the history's part (the thinking text) and
    the codec's memo (the block sent back, signature included) hold too: one copy of the payload in memory
    (issue 21: the bytes were kept beside the strings sent, ~200 bytes per thinking block). A payload with
    no ``type`` field first, ``{names[0]: first[, names[1]: second]}`` (a Gemini Part's signature,
    ``{"thoughtSignature": ...}``), is kept the same way by the subclass :class:`_UntypedStrings`
    (:meth:`of` picks it).

    The same value as a :class:`Continuation` of the same bytes in every public respect: ``payload``,
    ``digest``, provenance, ``==`` and ``hash`` (so a history restored as bytes equals the one it was taken
    of), ``verify``, ``checked`` (a fresh dict of the same strings, in their order: nothing parsed),
    ``attrs.evolve``, copies and pickles.

    Integrity as :class:`Continuation`'s: the strings are immutable and set once, and the payload and the
    digest are both theirs, so they match by construction (nothing is hashed to verify them). The
    ``payload`` slot (:attr:`Continuation.stored_payload`) holds None and the digest's slot a marker
    (:data:`_STRINGS`) while both are the strings' (what a seal compares by identity). A payload set in
    memory (``object.__setattr__(c, "payload", b)``) is kept in its slot, and the digest's slot takes the
    strings' digest, as a plain continuation's would keep it: an edit is refused as any continuation's is,
    also once evolved or copied; the very bytes set back are no change (None and the marker again).
    """

    __slots__ = ("_first", "_names", "_second")

    _names: tuple[str, ...]
    _first: str
    _second: str | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            return object.__new__(cls)
        return _evolved(*args, **kwargs)  # attrs.evolve hands the fields back: see _evolved

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # built by of() or __new__

    @classmethod
    def of(
        cls, value: dict[str, str], *, kind: str, origin: _Origin, stored: bytes | None = None
    ) -> StringsPayload:
        """The payload ``value`` (:func:`_string_fields` holds of it) kept as its strings; ``stored``: a
        payload set in memory, kept as it is (a copy of a value edited so)."""
        typed = next(iter(value)) == "type"
        self: StringsPayload = object.__new__(StringsPayload if typed else _UntypedStrings)
        names = tuple(value)[1:] if typed else tuple(value)
        _set(self, "kind", kind)
        _set(self, "_origin", _shared_origin(origin))
        _set(self, "_names", _shared_names(names))
        _set(self, "_first", value[names[0]])
        _set(self, "_second", value[names[1]] if len(names) > 1 else None)
        _PAYLOAD_SLOT.__set__(self, None)
        _DIGEST_SLOT.__set__(self, _STRINGS)
        if stored is not None:
            self._store(stored)
        return self

    def _block(self) -> dict[str, Any]:
        names = self._names
        value: dict[str, Any] = {"type": self.kind, names[0]: self._first}
        if len(names) > 1:
            value[names[1]] = self._second
        return value

    def _store(self, value: bytes) -> None:
        """``value`` as the payload (in memory: the class is frozen). The strings' own bytes are no change;
        other bytes are kept, with the strings' digest beside them."""
        rendered = compact(self._block())
        if type(value) is bytes and value == rendered:
            _PAYLOAD_SLOT.__set__(self, None)
            _DIGEST_SLOT.__set__(self, _STRINGS)
        else:
            if _digest_is(self, _STRINGS):
                _DIGEST_SLOT.__set__(self, digest_of(rendered))
            _PAYLOAD_SLOT.__set__(self, value)
        _edited()

    @property
    def payload(self) -> bytes:
        stored: bytes | None = _PAYLOAD_SLOT.__get__(self)
        return compact(self._block()) if stored is None else stored

    @payload.setter
    def payload(self, value: bytes) -> None:
        self._store(value)

    @property
    def digest(self) -> str:
        kept: object = self._digest
        if kept is _STRINGS:
            return digest_of(compact(self._block()))
        return kept if isinstance(kept, str) else digest_of(cast(bytes, kept))

    def verify(self) -> None:
        """Raise :class:`ContinuationMismatch` unless ``sha256(payload) == digest``: nothing to hash while
        the payload and the digest are both the strings' (a payload set in memory is compared)."""
        if _PAYLOAD_SLOT.__get__(self) is None and _digest_is(self, _STRINGS):
            return
        digest = self.digest
        if digest_of(self.payload) != digest:
            raise ContinuationMismatch(
                f"{self.vendor} {self.kind} payload changed since capture (digest {digest[:19]}…)"
            )

    def checked(self) -> Any:
        """The payload as a fresh dict of its strings (in their order, nothing parsed), after
        :meth:`verify`; parsed from its bytes when a payload was set in memory."""
        self.verify()
        if _PAYLOAD_SLOT.__get__(self) is not None:
            return json.loads(self.payload)
        return self._block()

    def __eq__(self, other: object) -> bool:
        # equal to a Continuation of the same bytes, digest and provenance (a subclass' __eq__ is tried
        # first on either side of ==): attrs' own compares the class
        if not isinstance(other, Continuation):
            return NotImplemented
        return (
            self.kind == other.kind
            and self._origin == other._origin
            and self.payload == other.payload
            and self.digest == other.digest
        )

    def __hash__(self) -> int:
        # the hash of the plain continuation of these bytes and this digest (equal values, equal hashes)
        payload, digest = self.payload, self.digest
        kept = payload if digest_of(payload) == digest else digest
        return hash(Continuation(kind=self.kind, payload=payload, digest=kept, origin=self._origin))

    def __reduce__(self) -> Any:
        kept: object = self._digest
        digest = kept if isinstance(kept, str) else None  # (the marker is never pickled)
        return (
            _strings_payload,
            (self._block(), self.kind, self._origin, _PAYLOAD_SLOT.__get__(self), digest),
        )


class _UntypedStrings(StringsPayload):
    """A :class:`StringsPayload` whose payload has no ``type`` field: ``{names[0]: first[, names[1]:
    second]}`` (built by :meth:`StringsPayload.of` for that shape, never directly)."""

    __slots__ = ()

    def _block(self) -> dict[str, Any]:
        names = self._names
        value: dict[str, Any] = {names[0]: self._first}
        if len(names) > 1:
            value[names[1]] = self._second
        return value


#: what a :class:`StringsPayload`'s digest slot holds while its payload and digest are its strings'
_STRINGS: Any = type("_Strings", (), {"__repr__": lambda self: "<the strings' digest>", "__slots__": ()})()


def _digest_is(c: Continuation, value: object) -> bool:
    """Whether ``c``'s digest slot holds ``value``."""
    kept: object = c._digest
    return kept is value


def _strings_payload(
    value: dict[str, str], kind: str, origin: _Origin, stored: bytes | None, kept: str | None = None
) -> Continuation:
    """A :class:`StringsPayload` copied or unpickled (:meth:`StringsPayload.__reduce__`): its strings, and
    a payload set in memory with the digest kept beside it."""
    self = StringsPayload.of(value, kind=kind, origin=origin)
    if stored is not None:
        _PAYLOAD_SLOT.__set__(self, stored)
        _DIGEST_SLOT.__set__(self, kept if kept is not None else self.digest)
    return self


def _evolved(
    vendor: str | None = None,
    api: str | None = None,
    model: str | None = None,
    kind: str | None = None,
    payload: bytes | None = None,
    digest: Any = None,
    model_bound: bool | None = None,
    platform: str | None = None,
    *,
    origin: _Origin | None = None,
    known: _Checked | None = None,
) -> Continuation:
    """``attrs.evolve`` of a :class:`StringsPayload` (which hands back its payload and its digest's slot):
    while that is the marker, the payload is the strings' rendering, so it is parsed back into the strings
    form (the kind unchanged) or kept as bytes that match; else (a payload set in memory, the digest kept
    beside it) a plain continuation of those bytes and that digest, refused as the edited value was."""
    if digest is _STRINGS:
        if type(payload) is not bytes:
            raise TypeError("Continuation() needs kind, payload and digest")
        merged = _merged_origin(origin, vendor, api, model, model_bound, platform)
        value = json.loads(payload)
        if type(kind) is str and _string_fields(value, kind) and compact(value) == payload:
            return StringsPayload.of(value, kind=sys.intern(kind), origin=merged)
        return Continuation(kind=kind, payload=payload, digest=payload, origin=merged)
    return Continuation(
        vendor, api, model, kind, payload, digest, model_bound, platform, origin=origin, known=known
    )


#: the shared name tuples of :class:`StringsPayload` (("thinking", "signature"), ("data",), ...); bounded
_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def _shared_names(names: tuple[str, ...]) -> tuple[str, ...]:
    found = _NAMES.get(names)
    if found is not None:
        return found
    return interned(_NAMES, names, tuple(sys.intern(n) for n in names), 256)


def _kept_digest(payload: bytes, digest: _Digest, known: _Checked | None) -> _Digest:
    """What a continuation keeps of ``digest`` (:data:`_Digest`): ``payload`` itself when the two match
    (``known``: a caller found they do; else hashed once), else the digest as given. A ``bytes`` digest
    is the digest of those bytes (``attrs.evolve`` hands the kept one back): the same content matches."""
    if type(payload) is not bytes:
        return digest if isinstance(digest, str) else digest_of(digest)
    if digest is payload or (known is not None and known[0] is payload and known[1] == digest):
        return payload
    if type(digest) is bytes:
        return payload if digest == payload else digest
    return payload if type(digest) is str and digest_of(payload) == digest else digest


#: the shared provenance-only continuations, each in the one-tuple a step holds: (kind, origin) -> (value,);
#: bounded, beyond it a step's is its own
_BARE: dict[tuple[str, _Origin], tuple[Continuation]] = {}
_BARE_MAX = 4096
_EMPTY = b""
_EMPTY_DIGEST = digest_of(_EMPTY)


def provenance_only(
    *, vendor: str, api: str, model: str, kind: str, platform: str = FIRST_PARTY
) -> tuple[Continuation]:
    """A step's continuation when its item needs no payload: one provenance-only :class:`Continuation`
    (``payload == b""``, its digest that of the empty bytes, never model-bound), in a one-tuple shared by
    every step of the same origin and kind (issue 21: no bytes, no object and no tuple per step).

    It says which vendor, API, model and platform produced the step, so the rules of
    :meth:`Continuation.replayable_to` still decide where the step's reasoning may go; what goes is the
    codec's rendering of the step's parts, which the codec checked, when it kept this value instead of the
    payload, to be the item's exact bytes as received. Nothing opaque is ever kept this way: a codec keeps
    it only for an item whose every byte its parts hold (docs/protocols.md §3.3 for the chat message).
    """
    origin = (vendor, api, model, False, platform)
    key = (kind, origin)
    try:
        found = _BARE.get(key)
    except TypeError:  # an unhashable field: the caller's odd value, its own value
        found = None
    if found is not None:
        return found
    value = Continuation(
        kind=sys.intern(kind) if type(kind) is str else kind,
        payload=_EMPTY,
        digest=_EMPTY_DIGEST,
        origin=origin,
        known=(_EMPTY, _EMPTY_DIGEST),
    )
    return interned(_BARE, key, (value,), _BARE_MAX)


def shared_bare(continuation: tuple[Continuation, ...]) -> tuple[Continuation, ...]:
    """``continuation`` itself, or the shared one-tuple equal to it when it is one provenance-only value
    (:func:`provenance_only`): a restored step holds what the captured one held."""
    if len(continuation) != 1 or continuation[0].payload != b"" or continuation[0].model_bound:
        return continuation
    c = continuation[0]
    shared = provenance_only(vendor=c.vendor, api=c.api, model=c.model, kind=c.kind, platform=c.platform)
    return shared if shared == continuation else continuation


#: the fields whose string values are names from a small set (a block's type, a message's role and status):
#: one object per name however many payloads hold it
_NAME_FIELDS = frozenset({"type", "role", "status"})


def sharing(value: Any, texts: tuple[str, ...] = ()) -> Any:
    """``value`` (a plain JSON value just parsed from a payload, to be kept in a codec's memo for the
    session's life) rebuilt to hold shared strings where it can: every key and every name (``type``,
    ``role``, ``status``) interned, and every string equal to one of ``texts`` (the history's own text of
    the part) that very object. Equal by value, key order kept, so the bytes sent are the same (issue 21:
    one copy of a string in memory, not one per form). Plain ``dict``/``list`` come back plain."""
    kind = type(value)
    if kind is dict:
        shared: dict[str, Any] = {}
        for key, item in value.items():
            if type(item) is str:
                if key in _NAME_FIELDS:
                    item = sys.intern(item)
                elif item in texts:
                    item = texts[texts.index(item)]
            elif type(item) is dict or type(item) is list:
                item = sharing(item, texts)
            shared[sys.intern(key) if type(key) is str else key] = item
        return shared
    if kind is list:
        return [
            sharing(item, texts)
            if type(item) is dict or type(item) is list
            else (texts[texts.index(item)] if type(item) is str and item in texts else item)
            for item in value
        ]
    return value
