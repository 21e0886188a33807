"""Protocol continuation: vendor-opaque payloads exactly as received, with provenance and a capture digest.

Invariants (the rules the whole SDK stands on):
  * ``payload`` is never edited: it is the block/item JSON as the vendor sent it (UTF-8 bytes);
  * ``digest == sha256(payload)`` at capture, and :meth:`Continuation.checked` re-verifies it before every
    send, so a payload changed in memory or in a snapshot is refused, never sent;
  * a continuation is replayed only to the platform, vendor, api and model that produced it (signatures
    are model-bound: anthropics/anthropic-sdk-python#1598; and platform-bound: a Bedrock signature is not
    a first-party one, pydantic/pydantic-ai#3757, docs/protocols.md §10), see
    :meth:`Continuation.replayable_to`.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

import attrs

from reasonstate.errors import ContinuationMismatch, MalformedResponse
from reasonstate.state.frozen import compact_encoder, freeze

__all__ = [
    "FIRST_PARTY",
    "Continuation",
    "bound",
    "compact",
    "digest_of",
    "edits",
    "platform_part",
    "recorded_platform",
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
    try:
        found = _ORIGINS.get(origin)
    except TypeError:  # an unhashable field: the caller's odd value, kept as it is
        return origin
    if found is not None:
        return found
    if len(_ORIGINS) < _ORIGINS_MAX:
        return _ORIGINS.setdefault(origin, origin)
    return origin


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
    """

    kind: str
    payload: bytes
    digest: str
    #: (vendor, api, model, model_bound, platform), shared (:func:`_shared_origin`)
    _origin: _Origin
    #: what is known of these very ``payload`` and ``digest`` objects: that they match (``_seen_payload``
    #: and ``_seen_digest`` are they). Taken when the value is built (``known``: at capture, else by hashing
    #: once), never changed; it is read only while the attributes still hold those objects (``bytes`` and
    #: ``str`` are immutable), so an edit in memory is hashed again, and a replaced payload can never pass
    #: through it. Two slots, not a tuple: 48 bytes less per payload (issue 21: state in proportion to the
    #: content).
    #:
    #: The payload is kept once, as its bytes: no parsed copy is kept here (issue 21: the frozen value was
    #: ~0.5x the content on Responses). A codec parses the bytes when it encodes the step (once per closed
    #: turn, in its memo: :class:`~reasonstate.adapters.base.Encodings`), sharing strings with the
    #: history's own (:func:`sharing`).
    _seen_payload: bytes | None = attrs.field(init=False, eq=False)
    _seen_digest: str | None = attrs.field(init=False, eq=False)

    def __init__(
        self,
        vendor: str | None = None,
        api: str | None = None,
        model: str | None = None,
        kind: str | None = None,
        payload: bytes | None = None,
        digest: str | None = None,
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
        was = origin if origin is not None else ("", "", "", True, FIRST_PARTY)
        set_ = object.__setattr__  # the frozen class's own construction, as attrs' generated __init__
        set_(self, "kind", kind)
        _SET_PAYLOAD(self, payload)  # the slots themselves: building a value is no edit (:func:`edits`)
        _SET_DIGEST(self, digest)
        set_(
            self,
            "_origin",
            _shared_origin(
                (
                    was[0] if vendor is None else vendor,
                    was[1] if api is None else api,
                    was[2] if model is None else model,
                    was[3] if model_bound is None else model_bound,
                    was[4] if platform is None else platform,
                )
            ),
        )
        checked = _check(payload, digest) if known is None else known
        seen_payload, seen_digest = (None, None) if checked is None else checked[:2]
        set_(self, "_seen_payload", seen_payload)
        set_(self, "_seen_digest", seen_digest)

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
    ) -> Continuation:
        """Capture a decoded JSON value as received (key order and string bytes preserved).

        ``value`` is a JSON value as decoded (``json.loads``), so ``json.loads(payload) == value``. Only the
        bytes are kept (``parsed`` is accepted for callers of earlier versions and changes nothing): a codec
        parses them when it encodes the step, once per closed turn in its memo.
        """
        payload = compact(value)
        digest = digest_of(payload)  # taken of these very bytes: they match
        return cls(
            vendor=vendor,
            api=api,
            model=model,
            kind=sys.intern(kind) if type(kind) is str else kind,  # one object per type name, not per payload
            payload=payload,
            digest=digest,
            model_bound=model_bound,
            platform=platform,
            known=(payload, digest),
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
    ) -> Continuation:
        """A payload read back from storage, its digest taken of these very bytes (a snapshot stores the
        bytes, not the digest: it is derived). ``value`` (a JSON value whose compact form is ``payload``) is
        accepted for callers of earlier versions and not kept: only the bytes are (nothing is parsed here)."""
        digest = digest_of(payload)
        return cls(
            vendor=vendor,
            api=api,
            model=model,
            kind=kind,
            payload=payload,
            digest=digest,
            model_bound=model_bound,
            platform=platform,
            known=(payload, digest),
        )

    def verify(self) -> None:
        """Raise :class:`ContinuationMismatch` unless ``sha256(payload) == digest``."""
        payload, digest = self.payload, self.digest
        if self._seen_payload is payload and self._seen_digest is digest and payload is not None:
            return
        if digest_of(payload) != digest:
            raise ContinuationMismatch(
                f"{self.vendor} {self.kind} payload changed since capture (digest {digest[:19]}…)"
            )

    def checked(self) -> Any:
        """The payload as a fresh, mutable JSON value, after :meth:`verify`."""
        self.verify()
        return json.loads(self.payload)

    @property
    def value(self) -> Any:
        """The payload's JSON value, frozen (:func:`~reasonstate.state.frozen.freeze`), after :meth:`verify`.

        Parsed from the verified bytes on each read (nothing parsed is kept here: a codec keeps what it
        sends in its memo), so what a request sends is what was captured.
        """
        self.verify()
        return freeze(json.loads(self.payload))

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


#: how many edits in memory there were so far (:func:`edits`)
_edits = 0
_EDIT_LOCK = threading.Lock()


def edits() -> int:
    """How many times the ``payload`` or ``digest`` of a built :class:`Continuation` was set so far: an edit
    in memory (``object.__setattr__``, past the frozen class's refusal; building a value is none). Invariant:
    while this count stays what it was, every continuation still holds the very ``payload`` and ``digest``
    objects it held then. So a check that found a run's payloads unchanged at a count need not look at
    them again while the count is the same: only at the ones added since (:meth:`Seals.check
    <reasonstate.adapters.base.Seals.check>`, issue 21: own CPU per request). The count only grows."""
    return _edits


def _watched(name: str) -> Callable[[Any, Any], None]:
    """Make ``Continuation.<name>`` (a slot) a property that counts every set (:func:`edits`); the slot's own
    setter is returned, for the constructor. Reads go to the slot at C speed (the slot's ``__get__``)."""
    slot = Continuation.__dict__[name]

    def edited(self: Continuation, value: Any) -> None:
        global _edits
        slot.__set__(self, value)
        with _EDIT_LOCK:  # after the set: a check that read the count before it looks again
            _edits += 1

    setattr(Continuation, name, property(slot.__get__, edited, doc=f"the slot ``{name}``, its edits counted"))
    setter: Callable[[Any, Any], None] = slot.__set__
    return setter


_SET_PAYLOAD = _watched("payload")
_SET_DIGEST = _watched("digest")


def _check(payload: bytes, digest: str) -> _Checked | None:
    """What holds of ``payload`` and ``digest`` (None: they do not match; :meth:`Continuation.verify`
    will say so)."""
    if not isinstance(payload, bytes) or digest_of(payload) != digest:
        return None
    return (payload, digest)


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
