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
    "platform_part",
    "recorded_platform",
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


#: a payload whose JSON value was not parsed (a codec that replays the bytes, or bytes that are not JSON)
_UNPARSED: Any = object()
#: (payload, digest, frozen value or _UNPARSED): what was found true of those very objects
_Checked = tuple[bytes, str, Any]

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


@attrs.frozen(slots=True, init=False)
class Continuation:
    """One vendor-opaque payload (a thinking block, a reasoning item, a content block we do not model).

    ``kind`` is the vendor's own type name (``thinking``, ``redacted_thinking``, ``reasoning``, ...);
    ``model_bound`` says whether only the producing model may receive it; ``platform`` is where the
    request was served (:data:`FIRST_PARTY` or a cloud platform), with the account or resource the platform
    binds payloads to when it is known (:func:`bound`: ``"bedrock#account:…/us-east-1"``,
    ``"azure#res.openai.azure.com"``): a payload goes back only to the platform (and scope) that issued it,
    whatever ``model_bound`` says (docs/protocols.md §10.1).
    """

    vendor: str
    api: str
    model: str
    kind: str
    payload: bytes = attrs.field(repr=False)
    digest: str
    model_bound: bool = True
    platform: str = FIRST_PARTY
    #: what is known of these very ``payload`` and ``digest`` objects: that they match (``_seen_payload``
    #: and ``_seen_digest`` are they), and the payload's frozen JSON value (``_value``, :data:`_UNPARSED`
    #: when not parsed). Taken when the value is built (``known``: at capture from the decoded value, else
    #: by hashing and parsing once), never changed; it is read only while the attributes still hold those
    #: objects (``bytes`` and ``str`` are immutable), so an edit in memory is hashed and parsed again, and a
    #: replaced payload can never be read through it. Three slots, not a tuple: 48 bytes less per payload
    #: (issue 21: state in proportion to the content)
    _seen_payload: bytes | None = attrs.field(init=False, eq=False, repr=False)
    _seen_digest: str | None = attrs.field(init=False, eq=False, repr=False)
    _value: Any = attrs.field(init=False, eq=False, repr=False)

    def __init__(
        self,
        vendor: str,
        api: str,
        model: str,
        kind: str,
        payload: bytes,
        digest: str,
        model_bound: bool = True,
        platform: str = FIRST_PARTY,
        *,
        known: _Checked | None = None,
    ) -> None:
        set_ = object.__setattr__  # the frozen class's own construction, as attrs' generated __init__
        set_(self, "vendor", vendor)
        set_(self, "api", api)
        set_(self, "model", model)
        set_(self, "kind", kind)
        set_(self, "payload", payload)
        set_(self, "digest", digest)
        set_(self, "model_bound", model_bound)
        set_(self, "platform", platform)
        checked = _check(payload, digest) if known is None else known
        seen_payload, seen_digest, value = (None, None, _UNPARSED) if checked is None else checked
        set_(self, "_seen_payload", seen_payload)
        set_(self, "_seen_digest", seen_digest)
        set_(self, "_value", value)

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

        ``value`` is a JSON value as decoded (``json.loads``), so ``json.loads(payload) == value``: with
        ``parsed`` (for codecs that replay :attr:`value`) its frozen copy is kept as the payload's parsed
        value at once, not parsed again from the bytes on the first replay.
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
            known=(payload, digest, freeze(value) if parsed else _UNPARSED),
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
        bytes, not the digest: it is derived). ``value``, when given, is a JSON value whose compact form is
        ``payload`` (the caller built ``payload`` from it), kept frozen as the payload's parsed value;
        without it the bytes are parsed once, as for any continuation built from bytes."""
        digest = digest_of(payload)
        known = _parsed(payload) if value is _UNPARSED else freeze(value)
        return cls(
            vendor=vendor,
            api=api,
            model=model,
            kind=kind,
            payload=payload,
            digest=digest,
            model_bound=model_bound,
            platform=platform,
            known=(payload, digest, known),
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

        Parsed once (when the continuation was built: from the verified bytes, or at capture from the very
        value the bytes were serialized from) and shared between requests: nothing can change it, so what a
        request sends is what was captured.
        """
        self.verify()
        value = self._value
        if self._seen_payload is self.payload and value is not _UNPARSED:
            return value
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


def _check(payload: bytes, digest: str) -> _Checked | None:
    """What holds of ``payload`` and ``digest`` (None: they do not match; :meth:`Continuation.verify`
    will say so)."""
    if not isinstance(payload, bytes) or digest_of(payload) != digest:
        return None
    return (payload, digest, _parsed(payload))


def _parsed(payload: bytes) -> Any:
    """The payload's frozen JSON value, parsed once (:data:`_UNPARSED` when it is not JSON)."""
    try:
        return freeze(json.loads(payload))
    except ValueError:
        return _UNPARSED
