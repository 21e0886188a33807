"""Switching: a session moves to another prefix, model or vendor between turns (``change_prefix``,
``switch_model``, ``switch``), and the checks a client, a model name and the request options pass, at
construction as at a switch.

Invariants: a switch is allowed only between turns (the transition table says so, and nothing changes when
it refuses); nothing opaque goes to another vendor or model (their payloads stay in the history, withheld,
their steps rendered canonically); every change of the bytes is traced (``prefix.changed``,
``model.changed``, ``vendor.changed``), so the next cache break names its cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reasonstate.adapters import Adapter, adapter_for, client_is_async
from reasonstate.adapters.base import Encodings, ProtocolRules, binding_of
from reasonstate.engine import Engine
from reasonstate.errors import InvalidOption
from reasonstate.prefix import Prefix, Tool
from reasonstate.state import FIRST_PARTY, EventKind, freeze
from reasonstate.state.continuation import SCOPE_SEPARATOR
from reasonstate.state.frozen import FrozenDict, equal_values, frozen_repr, remember

__all__ = ["SDK_OWNED", "Switching", "check_model"]

#: request fields the session builds itself; passing them as options would bypass the state machine
SDK_OWNED = frozenset({"messages", "input", "prompt", "instructions", "previous_response_id", "model"})


def check_model(model: Any) -> None:
    if not isinstance(model, str) or not model.strip():
        raise InvalidOption(f"model= must be the vendor's model name (a non-empty string), got {model!r}")


#: (rules, model, options) that this package's own rules found nothing to refuse in: ``refuse`` is a pure
#: function of them (the rules are frozen values, the options the session's frozen mapping), so a service
#: that builds its sessions with the same few options checks each once (issue 21: a fresh session's
#: constant costs). Keyed by the rules' id, the model and the options' repr (which tells ``True`` from
#: ``1``, equal as values); an entry holds the rules (so their id is not reused while it lives) and the
#: options, and answers only for these very rules and equal options. Rules of a caller's own class
#: (``adapter=``) are asked every time. Bounded: cleared when :data:`_ALLOWED_MAX` are held.
_ALLOWED: dict[tuple[int, str, str], tuple[ProtocolRules, Mapping[str, Any]]] = {}
_ALLOWED_MAX = 1024


def _refusal(rules: ProtocolRules, model: str, options: Mapping[str, Any]) -> str | None:
    """``rules.refuse(model, options)``, remembered when it is None (:data:`_ALLOWED`)."""
    key: tuple[int, str, str] | None = None
    if type(options) is FrozenDict and type(rules).__module__.startswith("reasonstate."):
        key = (id(rules), model, frozen_repr(options))
        held = _ALLOWED.get(key)
        if held is not None and held[0] is rules and equal_values(held[1], options):
            return None
    why = rules.refuse(model, options)
    if why is None and key is not None:
        remember(_ALLOWED, key, (rules, options), _ALLOWED_MAX)
    return why


def _route(vendor: str, api: str, model: str, binding: str) -> dict[str, str]:
    """A ``vendor.changed`` side: ``platform`` only when not first-party (the event as before platforms),
    ``scope`` only when the platform binds payloads to a known account or resource (docs/protocols.md
    §10.1: an identifier such as an access key id or a resource host, never a secret)."""
    route = {"vendor": vendor, "api": api, "model": model}
    platform, _, scope = binding.partition(SCOPE_SEPARATOR)
    if platform != FIRST_PARTY:
        route["platform"] = platform
    if scope:
        route["scope"] = scope
    return route


def _at(platform: str) -> str:
    return "" if platform == FIRST_PARTY else f"@{platform}"


class Switching(Engine):
    """The engine with the moves to another prefix, model or vendor (a session is one)."""

    _client: Any
    _stream: bool
    _async = False

    def _check_client(self, client: Any) -> None:
        """A sync session needs a sync client and an async session an async one (refused before any
        request: the other kind fails only once a call is made)."""
        is_async = client_is_async(client)
        if is_async is None or is_async == self._async:
            return
        if is_async:
            raise InvalidOption(
                f"{type(client).__name__} is an async client: use rs.AsyncSession with it "
                "(or a sync client with rs.Session)"
            )
        raise InvalidOption(
            f"{type(client).__name__} is a sync client: use rs.Session with it "
            "(or an async client such as AsyncAnthropic / AsyncOpenAI with rs.AsyncSession)"
        )

    @staticmethod
    def _refuse_options(
        adapter: Adapter, client: Any, model: str, options: Mapping[str, Any], tools: Sequence[Tool]
    ) -> None:
        """:class:`InvalidOption` for a request that can never be sent: what the vendor's rules refuse, and
        what the adapter's room checks against the installed SDK (its ``check_call``: the options the SDK
        declares and their types, the model id, the credentials, the tool schemas; docs/protocols.md §9).
        An adapter of the caller's own (``adapter=``) without ``check_call`` is checked by its rules only."""
        why = _refusal(adapter.rules, model, options)
        if why is not None:
            raise InvalidOption(why)
        check = getattr(adapter, "check_call", None)
        if check is not None:
            check(client, model, options, tools)

    # -- prefix and model changes ----------------------------------------------------------------------
    def change_prefix(
        self,
        *,
        system: str | None = None,
        tools: Sequence[Tool] | None = None,
        few_shots: Sequence[tuple[str, str]] | None = None,
    ) -> Prefix:
        """Replace parts of the stable prefix (IDLE only). Traced when the bytes change: every later request
        re-prefills. Tools whose bytes are the same still take effect (new handlers, ``parallel_safe``,
        ``timeout``), with no trace event and no cache break."""
        self._require("change_prefix")
        new = Prefix(
            system=self._prefix.system if system is None else system,
            tools=self._prefix.tools if tools is None else tuple(tools),
            few_shots=self._prefix.few_shots if few_shots is None else tuple(few_shots),
        )
        if tools is not None:
            self._refuse_options(self._adapter, self._client, self._model, self._options, new.tools)
        if new.fingerprint != self._prefix.fingerprint:
            self._traced(
                EventKind.PREFIX_CHANGED,
                old=self._prefix.fingerprint,
                new=new.fingerprint,
                summary="system/tools/few-shots changed: the whole prompt is re-prefilled",
            )
        self._set_prefix(new)
        return new

    def switch_model(self, model: str) -> None:
        """Use another model from the next turn on (IDLE only).

        Reasoning payloads bound to the old model are withheld from then on (never sent to another model:
        anomalyco/opencode#25005) and their steps rendered from canonical parts; the trace records the
        switch and each withholding.
        """
        self._require("switch_model")
        check_model(model)
        self._refuse_options(self._adapter, self._client, model, self._options, self._prefix.tools)
        if model != self._model:
            self._traced(
                EventKind.MODEL_CHANGED,
                old=self._model,
                new=model,
                summary=f"model {self._model} → {model}: earlier model-bound reasoning is withheld",
            )
            self._model = model

    def switch(
        self,
        client: Any,
        *,
        model: str,
        adapter: Adapter | None = None,
        dialect: str | None = None,
        api: str | None = None,
        stream: bool | None = None,
        **request_options: Any,
    ) -> None:
        """Continue this session on another vendor or model (between turns only).

        ``client`` is the new vendor's client (chosen as in the constructor; ``adapter=``, ``dialect=``,
        ``api=`` alike) and ``request_options`` replace the old vendor's options (they are vendor-specific:
        ``thinking=...``, ``reasoning=...``). Nothing opaque goes to the new vendor or model: signatures,
        encrypted items, redacted blocks and model-bound reasoning stay in the history and are withheld,
        their steps rendered canonically in the new API's format (``foreign_reasoning`` decides whether
        their visible reasoning goes along as delimited text). Inside an open tool chain a switch is an
        :class:`IllegalTransition`. Traced as ``vendor.changed``; snapshots restore onto the new vendor.

        A move to another platform serving the same vendor and model (``AnthropicBedrock`` →
        ``Anthropic``, ``AzureOpenAI`` → ``OpenAI``, google-genai ``vertexai=True`` → the Gemini API) is a
        switch like any other: a payload is never sent to a platform that did not issue it
        (pydantic/pydantic-ai#3757; docs/protocols.md §10.1), so it is withheld the same way. So is a move
        to another account or resource of one platform (two ``AnthropicBedrock`` clients of different AWS
        credentials, two ``AzureOpenAI`` resources): the platform binds payloads to the account that issued
        them (:func:`reasonstate.adapters.scope_for`).
        """
        self._require("switch")
        check_model(model)
        owned = sorted(SDK_OWNED.intersection(request_options))
        if owned:
            raise InvalidOption(f"{owned} are built by the session from its state")
        if stream is not None and not isinstance(stream, bool):
            raise InvalidOption(f"stream= must be True or False, got {stream!r}")
        self._check_client(client)
        new = adapter if adapter is not None else adapter_for(client, dialect=dialect, api=api)
        self._refuse_options(new, client, model, request_options, self._prefix.tools)
        old = (self._adapter.vendor, self._adapter.api, self._model)
        old_platform, new_platform = binding_of(self._adapter), binding_of(new)
        self._traced(
            EventKind.VENDOR_CHANGED,
            old=_route(old[0], old[1], old[2], old_platform),
            new=_route(new.vendor, new.api, model, new_platform),
            summary=f"{old[0]}/{old[2]}{_at(old_platform)} → {new.vendor}/{model}{_at(new_platform)}: "
            "earlier opaque continuation is withheld and its steps are rendered canonically",
        )
        self._client, self._adapter, self._model = client, new, model
        # another codec: the encoding memo starts empty (no entry built for another is read)
        self._encodings = Encodings()
        self._options = freeze(request_options)
        if stream is not None:
            self._stream = stream
