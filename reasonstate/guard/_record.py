"""One captured exchange → one :class:`~reasonstate.guard.GuardRecord` (runs when records are read).

Everything vendor-specific comes from the exchange's room (:func:`reasonstate.adapters.room`): the view of
the request body, the stream assembler, the usage parser, the cache rules, the lost-continuation check."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from reasonstate.adapters import Room, room_for_path
from reasonstate.adapters.replay import ALTERED, LOST, ReplayFinding
from reasonstate.cache.divergence import View, explain
from reasonstate.cache.rules import CacheRules, common_prefix_len, predict_request
from reasonstate.guard import _replay
from reasonstate.guard._replay import Answer
from reasonstate.state import ExecutionRecord, Usage
from reasonstate.state.continuation import digest_of

if TYPE_CHECKING:
    from reasonstate.guard import Guard, GuardRecord, GuardWarning, _Exchange

__all__ = ["analyse"]


@attrs.frozen(slots=True)
class _Request:
    """A request as the cache prediction reads it (:class:`reasonstate.cache.rules.PredictedRequest`, as a
    session's ``VendorRequest`` is): the model, the unit keys the server renders, the breakpoints and the
    units up to the end of the system prompt. A plain client's prompt token ids are never known."""

    model: str
    units: tuple[str, ...]
    breakpoints: tuple[int, ...]
    prefix_units: int
    prompt_ids: None = None
    predictable: bool = True


#: how many earlier requests a new one is matched against (its conversation) and predicted from
_RECENT = 64

#: a recent request: its record, its view, its parsed answer and the lifetime of what it cached
Recent = tuple["GuardRecord", View, Any, "tuple[int, int] | None"]


def analyse(guard: Guard, capture: _Exchange) -> GuardRecord:
    from reasonstate.guard import GuardRecord, GuardWarning

    warnings: list[GuardWarning] = []
    if capture.error is not None:
        warnings.append(GuardWarning("hook_error", capture.error))
    room = room_for_path(capture.path)
    if room is None:  # the hook keeps only paths a room serves
        raise ValueError(f"no room serves {capture.path!r}")
    api = room.api
    body: Any = None
    if capture.request is None:
        warnings.append(GuardWarning("request_not_json", "the request body was not readable"))
    else:
        try:
            body = json.loads(capture.request)
        except ValueError:
            warnings.append(GuardWarning("request_not_json", f"{len(capture.request)} bytes"))
    if body is not None and not isinstance(body, Mapping):
        warnings.append(GuardWarning("request_not_json", "the request body is not a JSON object"))
        body = None
    streamed = "event-stream" in capture.headers.get("content-type", "") or room.streamed(capture.path)
    response = _response(room, capture, streamed, warnings)
    model = room.model_from_path(capture.path, body)
    usage, raw_usage = _usage(room, response, capture.status, warnings)
    view = room.view(body, model) if body is not None else None
    if view is not None and isinstance(body, Mapping):
        view = room.continued(view, body, ((e[1], e[2]) for e in reversed(guard._recent)))

    at = capture.answered_at
    previous = _conversation(guard, view, capture.conversation) if view is not None else None
    divergence = None
    if previous is not None and view is not None:
        divergence = explain(previous[1], view)
        if divergence is not None and divergence.unit == view.prefix_units and room.starts_conversation(view):
            # a new conversation on the same tools and system prompt: it breaks nothing
            divergence, previous = None, None
    if isinstance(body, dict):
        warnings.extend(_replayed(guard, room, capture, model, body))

    predicted = None
    reported = usage.cache_read if usage is not None else None
    if view is not None and usage is not None and 200 <= capture.status < 300:
        rules = guard._cache if guard._cache is not None else room.cache_rules(model, raw_usage)
        # the session's predictor (``reasonstate.engine.predict``) on the same kind of input: the unit keys
        # as the server renders them, and every recent record (the predictor reads each vendor's own)
        request = _Request(
            model,
            room.cache_keys(view, raw_usage),
            view.breakpoints,
            view.prefix_units,
            None,
            view.predictable,
        )
        predicted = predict_request(rules, request, guard._executed)
        if divergence is None and predicted is not None and reported is not None and predicted != reported:
            why = f"predicted {predicted}, reported {reported}"
            if reported > predicted:
                warnings.append(GuardWarning("prediction_mismatch", why))
            else:
                last = previous if previous is not None else _last_use(guard, view)
                kind, gap = _miss(at, last)
                warnings.append(GuardWarning(kind, f"{why}; {gap}"))
        executed = _executed(len(guard._executed), request, usage, capture, predicted, response, rules, room)
        if executed is not None:
            guard._executed = guard._executed.appended(*executed, keep=_RECENT)
    record = GuardRecord(
        index=capture.index,
        api=api,
        model=model,
        path=capture.path,
        status=capture.status,
        request_bytes=len(capture.request or b""),
        streamed=streamed,
        usage=usage,
        divergence=divergence,
        warnings=tuple(warnings),
        predicted_cache_read=predicted,
        reported_cache_read=reported,
        previous=previous[0].index if previous is not None else None,
        at=at,
        conversation=capture.conversation,
        origin=capture.origin,
    )
    if view is not None and 200 <= capture.status < 300:
        lifetime = None
        if isinstance(body, Mapping):
            rules = guard._cache if guard._cache is not None else room.cache_rules(model, raw_usage)
            lifetime = room.cache_lifetime(rules, body, response)
        guard._recent.append((record, view, response, lifetime))
        del guard._recent[:-_RECENT]
    keep_answer(guard, capture, response, model)
    return record


def keep_answer(guard: Guard, capture: _Exchange, response: Any = None, model: str | None = None) -> None:
    """Put the answer of ``capture`` in the guard's ledger when it made a tool call (once per capture).
    ``response``/``model``: the parsed answer and the request's model, when the caller has them."""
    if capture.sourced:
        return
    capture.sourced = True
    room = room_for_path(capture.path)
    if room is None or not room.replay_marker or not 200 <= capture.status < 300 or capture.request is None:
        return
    if response is None:
        raw = _raw(capture)
        if room.replay_marker not in raw:  # no tool call: nothing later requests replay
            return
        streamed = "event-stream" in capture.headers.get("content-type", "") or room.streamed(capture.path)
        response = _response(room, capture, streamed, [])
    source = room.replay_source(response)
    if source is None:
        return
    request = capture.request if model is None else None  # the model read when a check needs it
    guard._answers.add(Answer(capture.index, room.api, capture.origin, capture.path, source, model, request))


def _replayed(
    guard: Guard, room: Room, capture: _Exchange, model: str, body: dict[str, Any]
) -> list[GuardWarning]:
    """The request's replay findings: what mend mode found and restored in the request path, and what
    the body as sent still loses or alters of the earlier answers (each lost or altered field reported
    once per answer: at the first request where it happens)."""
    from reasonstate.guard import GuardWarning

    answers = guard._answers.candidates(room.api, capture.origin, before=capture.index)
    by_index = {a.index: a for a in answers}
    found: list[tuple[Answer | None, ReplayFinding]] = [(by_index.get(i), f) for i, f in capture.replay]
    found += _replay.check(room, answers, model, body, mend=False)
    out: list[GuardWarning] = []
    here: set[tuple[str, str]] = set()  # one finding per field and kind (answers a guess matches share it)
    for answer, finding in found:
        key = (finding.kind, finding.path)
        if answer is not None and finding.kind in (LOST, ALTERED):
            if key in answer.reported:
                continue
            answer.reported.add(key)
        if key not in here:
            here.add(key)
            out.append(GuardWarning(finding.kind, finding.detail, finding.path))
    return out


def _response(room: Room, capture: _Exchange, streamed: bool, warnings: list[GuardWarning]) -> Any:
    """The answer as JSON (a stream assembled by the codec's own assembler), or None with a warning."""
    from reasonstate.guard import GuardWarning

    raw = _raw(capture)
    if not 200 <= capture.status < 300:
        warnings.append(GuardWarning("vendor_error", f"HTTP {capture.status}"))
        return None
    if streamed:
        # an SDK may close a stream once it has read the terminal event, before the transport's last
        # (empty) read: the assembler, which needs the terminal event, says whether the answer is whole
        try:
            assembler = room.assembler()
            assembler.feed_bytes(raw)
            return assembler.finish()
        except Exception as exc:
            warnings.append(GuardWarning("stream_cut_short", f"{type(exc).__name__}: {exc}"))
            return None
    try:
        return json.loads(raw)
    except ValueError:
        warnings.append(GuardWarning("response_not_json", f"{len(raw)} bytes"))
        return None


def _raw(capture: _Exchange) -> bytes:
    """The answer's bytes as the SDK decoded them."""
    raw = b"".join(capture.chunks)
    encoding = capture.headers.get("content-encoding")
    if encoding and encoding != "identity":
        import httpx2

        raw = httpx2.Response(200, headers={"content-encoding": encoding}, content=raw).read()
    return raw


def _usage(
    room: Room, response: Any, status: int, warnings: list[GuardWarning]
) -> tuple[Usage | None, Mapping[str, Any] | None]:
    """Normalized usage from the codec's own parser; None (with a finding) when the answer has none."""
    from reasonstate.guard import GuardWarning

    if not isinstance(response, Mapping):
        return None, None
    raw = room.raw_usage(response)
    if not isinstance(raw, Mapping):
        warnings.append(GuardWarning("usage_missing", "the answer reports no usage"))
        return None, None
    bad = sorted(k for k, v in _counts(raw) if not isinstance(v, int) or isinstance(v, bool) or v < 0)
    if bad:
        warnings.append(GuardWarning("usage_invalid", "not a non-negative count: " + ", ".join(bad)))
    return room.usage(raw), raw


def _counts(raw: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in raw.items():
        if isinstance(v, Mapping):
            out.extend(_counts(v, f"{prefix}{k}."))
        elif k.endswith(("tokens", "TokenCount", "Tokens")) and v is not None:
            out.append((prefix + k, v))
    return out


def _conversation(guard: Guard, view: View, key: str | None) -> Recent | None:
    """The recent request of conversation ``key`` (None: of the requests sent without a key) this one
    shares the longest prefix with (the newest of equals), past the model and options; None when none
    shares a tool, system or history unit (a new conversation)."""
    best: Recent | None = None
    best_len = 2
    keys = view.keys
    recent = [e for e in guard._recent if e[0].conversation == key]
    for entry in reversed(recent):
        if entry[1].api != view.api:
            continue
        n = common_prefix_len(keys, entry[1].keys)
        if n > best_len or (best is None and n == best_len and len(entry[1].keys) > 2):
            best, best_len = entry, n
    if best is None:  # the newest request of this API whose model or options alone changed
        for entry in reversed(recent):
            if entry[1].api == view.api and common_prefix_len(keys[2:], entry[1].keys[2:]) > 0:
                best = entry
                break
    return best


def _last_use(guard: Guard, view: View) -> Recent | None:
    """For a request that starts a conversation: the newest recent request (of any conversation) that
    shares a unit past the model and options with it, the last to write or read what it shares."""
    entry: Recent
    for entry in reversed(guard._recent):
        if entry[1].api == view.api and common_prefix_len(view.keys[2:], entry[1].keys[2:]) > 0:
            return entry
    return None


def _miss(at: float, last: Recent | None) -> tuple[str, str]:
    """Why a request that extends ``last`` (the request that last wrote or read its prefix) read less
    cache than predicted, as far as the wire tells: ``ttl_expired`` when more time passed since ``last``
    answered than the longest lifetime the vendor documents for an unused entry (its ttl, refreshed by
    each read: docs/protocols.md §1.5, §4.4), ``provider_miss`` when less than the shortest (the prefix
    was alive; the vendor served less: an eviction, another machine), else ``unexplained_miss``."""
    if last is None or last[0].at is None:
        return "unexplained_miss", "no earlier request wrote the prefix"
    gap = at - last[0].at
    lifetime = last[3]
    since = f"{gap:.0f} s after request {last[0].index}"
    if lifetime is None:
        return "unexplained_miss", f"{since}; the vendor documents no cache lifetime"
    shortest, longest = lifetime
    if gap > longest:
        return "ttl_expired", f"{since}, past the cache lifetime of {longest} s"
    if gap <= shortest:
        return "provider_miss", f"{since}, within the cache lifetime of {shortest} s"
    return "unexplained_miss", f"{since}, between the cache lifetimes of {shortest} s and {longest} s"


def _executed(
    index: int,
    view: _Request,
    usage: Usage,
    capture: _Exchange,
    predicted: int | None,
    response: Any,
    rules: CacheRules,
    room: Room,
) -> tuple[ExecutionRecord, tuple[str, ...]] | None:
    """What later predictions learn from this request: its record (its prompt tokens) and its unit chain.
    With explicit breakpoints the cache entry is the chain up to the last breakpoint, of ``cache_read +
    cache_write`` tokens (docs/protocols.md §4.4: the write covers the span from the hit to the last
    breakpoint); no breakpoint, no entry."""
    blocks = view.units
    if rules.scheme == "breakpoints":
        if not view.breakpoints or usage.cache_read + usage.cache_write == 0:
            return None
        blocks = blocks[: view.breakpoints[-1]]
        usage = Usage(cache_read=usage.cache_read + usage.cache_write)
    output_unit = None
    if rules.scheme == "persisted" and isinstance(response, Mapping):
        output_unit = room.output_unit(response)
    record = ExecutionRecord(
        index=index,
        turn=0,
        step=0,
        request_digest=digest_of(capture.request or b""),
        request_bytes=len(capture.request or b""),
        prefix_fingerprint="",
        units=len(blocks),
        breakpoints=view.breakpoints,
        divergence=None,
        predicted_cache_read=predicted,
        usage=usage,
        duration_s=0.0,
        model=view.model,
        output_unit=output_unit,
    )
    return record, tuple(blocks)
