"""Token-in, token-out adapter for self-hosted models (vLLM, SGLang): ``POST /v1/completions`` with token ids.

The session never re-tokenizes what the model sampled. Every step keeps its prompt ids ``p`` and completion
ids ``c`` in the execution layer (``ExecutionRecord.prompt_ids`` / ``completion_ids``), and the next prompt
``B`` extends them with only the new messages (tool results or the next user message)::

    B = renderer.bridge_to_next_turn(p, c, new_messages, tools)
    B[:len(p) + len(c)] == p + c                                   (the bridge contract, PRR by construction)
    B[:len(p) + len(c) - 1] == (p + c)[:-1]                        (GPT-OSS: a sampled <|return|> -> <|end|>)

The bridge is used exactly when the canonical history still *is* what the previous request sent plus the
step sampled for it. That is checked on logical units (one digest per message; the previous request's
are ``Records.newest_units()``, ``prev_units`` here)::

    units[:len(prev_units)] == prev_units  and  units[len(prev_units)] == sampled_unit(prev step)

Otherwise (first request, a policy dropped or summarized reasoning that was sampled, the prefix or the model
changed, a record without token ids) the prompt is a full render of the canonical history with the chat
template and the request carries a ``cache.break`` trace event saying why (``path == "full_render"``,
``reason``, ``shared_tokens``). When the rewritten part lies before the previous step the session also
records its own unit-level ``cache.break`` (``unit``, ``why``) for the same request.

Policies: the adapter does not clamp them. A policy that drops reasoning the model sampled is honoured; the
price is one full render (a traced cache break) at the next turn, after which the bridge resumes on the new
prompt. Inside a tool chain no policy runs, so the chain is always bridged.

The token ids a bridge reuses are checked first: ``ExecutionRecord.verify_ids`` against the seal taken when
the record was made (so ids edited in memory or in a snapshot are refused), and the completion ids against
the digest-checked ``completion`` payload.

Prefix-cache prediction: :mod:`reasonstate.cache.rules`, scheme ``tokens`` (vLLM's automatic prefix
caching, as :mod:`reasonstate.testing.completions` documents it), with this adapter's ``block_size``.

SGLang's RadixAttention caches per token (``page_size`` 1): the ``sglang`` dialect defaults to
``block_size=1`` [UNCONFIRMED: SGLang reports ``cached_tokens`` only with ``--enable-cache-report``, and
returning completion token ids from ``/v1/completions`` needs a build that supports ``return_token_ids``].
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import attrs

from reasonstate.adapters.base import (
    DecodedStep,
    Encodings,
    Endpoint,
    ListRun,
    ProtocolRules,
    Seal,
    VendorRequest,
    closed_run,
    count,
    summary_note,
)
from reasonstate.cache.rules import CacheRules, shared_tokens
from reasonstate.errors import (
    ContinuationMismatch,
    InvalidOption,
    MalformedResponse,
    ProtocolViolation,
)
from reasonstate.prefix import Prefix, canonical_json
from reasonstate.state import (
    Continuation,
    EventKind,
    ExecutionRecord,
    History,
    OpaquePart,
    Part,
    ReasoningPart,
    Step,
    TextPart,
    TokenIds,
    ToolCallPart,
    Turn,
    Usage,
    as_records,
    digest_of,
)
from reasonstate.state.units import UnitBuffer, UnitSeq, as_units
from reasonstate.tokens.errors import InvalidUTF8, TokensError, UnknownTokenId
from reasonstate.tokens.protocol import Message, ParsedResponse, Renderer
from reasonstate.tokens.renderer import ChatTemplateRenderer

__all__ = ["BLOCK_SIZES", "TOKENS_SGLANG", "TOKENS_VLLM", "TokenAdapter"]

#: this API's prefix cache, as data (docs/protocols.md; the schemes are :mod:`reasonstate.cache.rules`)
TOKENS_VLLM = CacheRules(scheme="tokens", source="docs/protocols.md §2.2 (vLLM block_size 16)", block=16)
TOKENS_SGLANG = CacheRules(scheme="tokens", source="docs/protocols.md §2.2 (SGLang page_size 1)", block=1)

API = "completions"
KIND = "completion"
BLOCK_SIZES: Mapping[str, int] = {"vllm": 16, "sglang": 1}
"""Prefix-cache granularity per dialect: vLLM's default KV block size, SGLang's default page size."""

Dialect = Literal["vllm", "sglang"]
_CACHE = {"vllm": TOKENS_VLLM, "sglang": TOKENS_SGLANG}


#: the unit index of step ``s`` of the turn with index ``t`` (None: not in the history)
_Positions = Callable[[int, int], "int | None"]
_EMPTY_RUN = ListRun()


@attrs.frozen(slots=True)
class _TurnEncoding:
    """One turn's chat messages (``values``) and unit digests, shared read-only between requests while the
    turn is closed; ``steps``: where each step's assistant message is among them."""

    values: tuple[Message, ...]
    units: tuple[str, ...]
    withheld: tuple[Continuation, ...]
    seal: Seal  # the completions replayed, checked before every send
    steps: tuple[int, ...]


@attrs.frozen(slots=True)
class _Plan:
    """The next prompt: bridged (``why`` is None) or a full render (``why`` says why)."""

    prompt_ids: TokenIds
    why: str | None


class TokenAdapter:
    """``/v1/completions`` with token-id prompts, for a self-hosted model whose chat template is ``renderer``.

    ``rs.Session(openai.OpenAI(base_url=...), model="qwen3.6", adapter=TokenAdapter(renderer), tools=[...])``.
    ``model_name`` is the served model name sent to the server (default: the session's model);
    ``block_size`` the engine's prefix-cache granularity (default per dialect, :data:`BLOCK_SIZES`);
    ``sampling`` are extra request fields (``temperature``, ``top_p``, ...), overridden by session options.
    """

    api = API
    endpoint = Endpoint(sdk="openai", resource=("completions",), label="completions")

    def __init__(
        self,
        renderer: Renderer,
        *,
        model_name: str | None = None,
        dialect: Dialect = "vllm",
        block_size: int | None = None,
        **sampling: Any,
    ) -> None:
        if dialect not in BLOCK_SIZES:
            raise InvalidOption(f"unknown dialect {dialect!r}; use 'vllm' or 'sglang'")
        self.renderer = renderer
        self.model_name = model_name
        self.dialect: Dialect = dialect
        self.vendor: str = dialect
        self.block_size = block_size if block_size is not None else BLOCK_SIZES[dialect]
        if self.block_size < 1:
            raise InvalidOption("block_size must be at least 1")
        self.sampling: dict[str, Any] = dict(sampling)
        self.rules = ProtocolRules(vendor=dialect, api=API)
        self.cache = attrs.evolve(_CACHE[dialect], block=self.block_size)

    # -- encode ------------------------------------------------------------------------------------------
    def encode(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        options: Mapping[str, Any],
        records: Sequence[ExecutionRecord],
        *,
        lost_responses: frozenset[str] = frozenset(),
        encodings: Encodings | None = None,
    ) -> VendorRequest:
        """The ``completions.create`` kwargs: ``prompt`` is the bridged prompt when the history allows it,
        else the full render of the canonical history (with a ``cache.break`` event)."""
        tools = _tools(prefix)
        messages, units, steps, withheld = self._messages(prefix, history, tools, encodings)
        open_turn = history.open_turn
        if open_turn is not None and any(
            c.vendor != self.vendor or c.api != API for s in open_turn.steps for c in s.continuation
        ):
            raise ContinuationMismatch(
                "the open tool chain holds a step sampled by another server or vendor: its tokens cannot be "
                "continued here (docs/protocols.md §2.2). Nothing was sent."
            )
        plan = self._plan(prefix, history, model, records, messages, units, steps, tools)
        events: tuple[tuple[str, Mapping[str, Any]], ...] = ()
        if plan.why is not None and records:
            events = (
                (
                    EventKind.CACHE_BREAK,
                    {
                        "index": len(records),
                        "path": "full_render",
                        "reason": plan.why,
                        "prompt_tokens": len(plan.prompt_ids),
                        "shared_tokens": shared_tokens(plan.prompt_ids, records[-self.cache.recent :]),
                    },
                ),
            )
        kwargs: dict[str, Any] = {
            "model": self.model_name or model,
            "prompt": plan.prompt_ids.as_array().tolist(),
        }
        extra: dict[str, Any] = {}
        for key, value in {**self.sampling, **options}.items():
            if key == "extra_body" and isinstance(value, Mapping):
                extra.update(value)
            else:
                kwargs[key] = value
        # vLLM: ``return_token_ids`` adds choices[0].token_ids / prompt_token_ids (CompletionRequest)
        extra["return_token_ids"] = True
        if self.dialect == "sglang":
            extra.setdefault("no_stop_trim", True)  # keep the stop token in the output [UNCONFIRMED]
        kwargs["extra_body"] = extra
        return VendorRequest(
            kwargs=kwargs,
            units=units,
            model=model,
            prefix_units=1,
            events=events,
            prompt_ids=plan.prompt_ids,
            tools=tuple(tools),
            withheld=withheld,
        )

    def _messages(
        self,
        prefix: Prefix,
        history: History,
        tools: list[dict[str, Any]],
        encodings: Encodings | None = None,
    ) -> tuple[list[Message], UnitSeq, _Positions, tuple[Continuation, ...]]:
        """Chat messages of the canonical history (system first), one unit per prefix head and message,
        the unit index of each step ``(turn, step)``, and the continuations withheld (another server's).
        ``units[0]`` is the head (system + tools); ``units[k]`` belongs to ``messages[k - 1 + has_system]``.

        Closed turns are encoded once each and kept as a run (:func:`closed_run`, memoized in
        ``encodings``): a request encodes its open turn and the turns closed since the previous one, and
        copies the rest at C speed; the replayed completions are checked by identity before each send."""
        messages: list[Message] = []
        if prefix.system:
            messages.append({"role": "system", "content": prefix.system})
        head = len(messages)
        units = UnitBuffer([_digest({"system": prefix.system, "tools": tools})])
        for user, answer in prefix.few_shots:
            for message in ({"role": "user", "content": user}, {"role": "assistant", "content": answer}):
                messages.append(message)
                units.append(_digest(message))
        memo = encodings if encodings is not None else Encodings()
        key = (API, "tokens", self.vendor, units[0])

        def encode(turn: Turn) -> _TurnEncoding:
            return memo.encoded(turn, key, functools.partial(self._encode_turn, turn, tools))

        open_turn = history.open_turn
        closed = history.turns[:-1] if open_turn is not None else history.turns
        run = closed_run(closed, (API, "run", self.vendor, units[0]), encode, _EMPTY_RUN, memo)
        run.check()  # the completions the closed turns replay, by identity (re-hashed only if replaced)
        messages.extend(run.values)
        units.extend_packed(*run.unit_raw())  # packed, joined at C speed (issue 21)
        withheld = tuple(run.withheld)
        opened = None
        if open_turn is not None:
            opened = self._encode_turn(open_turn, tools)
            messages.extend(opened.values)
            units.extend(opened.units)
            withheld = (*withheld, *opened.withheld)
        assert len(units) == len(messages) - head + 1
        end = len(units)

        def position(t: int, s: int) -> int | None:
            """The unit index of step ``s`` of the turn with index ``t`` (found from the newest turn back)."""
            at = end
            for turn in reversed(history.turns):
                enc = opened if opened is not None and turn is open_turn else encode(turn)
                at -= len(enc.units)
                if turn.index == t:
                    return at + enc.steps[s] if s < len(enc.steps) else None
            return None

        return messages, units.done(), position, withheld

    def _encode_turn(self, turn: Turn, tools: list[dict[str, Any]]) -> _TurnEncoding:
        """One turn's chat messages and unit digests, the position of each step's assistant message among
        them, the continuations withheld and the seal of the completions replayed."""
        messages: list[Message] = []
        units: list[str] = []

        def add(message: Message, unit: Any) -> None:
            messages.append(message)
            units.append(_digest(unit))

        steps: list[int] = []
        replayed: list[Continuation] = []
        withheld: list[Continuation] = []
        add({"role": "user", "content": turn.user}, {"role": "user", "content": turn.user})
        for s, step in enumerate(turn.steps):
            keep = turn.view is None or turn.view.keep_reasoning[s]
            last = s == len(turn.steps) - 1
            summary = turn.view.summary if turn.view is not None and last else None
            steps.append(len(messages))
            completion = _completion(step, self.vendor)
            if completion is not None:
                replayed.append(completion)
            withheld.extend(c for c in step.continuation if not (c.vendor == self.vendor and c.api == API))
            add(self._assistant(step, keep, summary, tools), _step_unit(step, keep, summary))
            names = {c.id: c.name for c in step.tool_calls}
            for r in step.tool_results:
                tool: dict[str, Any] = {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                if r.call_id in names:
                    tool["name"] = names[r.call_id]
                add(tool, {**tool, "is_error": r.is_error})
        return _TurnEncoding(tuple(messages), tuple(units), tuple(withheld), Seal.of(replayed), tuple(steps))

    def _assistant(
        self, step: Step, keep: bool, summary: str | None, tools: Sequence[Mapping[str, Any]]
    ) -> Message:
        """The assistant message a full render uses: the sampled text parsed by the renderer, with the
        reasoning removed when the view drops it and the summary (Compress) put before the answer. A step
        this adapter did not sample is rendered from its canonical parts (text and tool calls)."""
        completion = _completion(step, self.vendor)
        if completion is None:
            message: dict[str, Any] = _canonical_message(step)
        else:
            message = dict(self._parse(str(completion.value["text"]), tools).message)
        if not keep:  # the family's own reasoning field (Harmony: ``thinking``), else the common one
            family = getattr(self.renderer, "family", None)
            message.pop(getattr(family, "reasoning_key", "reasoning_content"), None)
        if summary is not None:
            note = summary_note(summary)
            content = str(message.get("content") or "")
            message["content"] = f"{note}\n\n{content}" if content else note
        return message

    def _plan(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        records: Sequence[ExecutionRecord],
        messages: Sequence[Message],
        units: Sequence[str],
        steps: _Positions,
        tools: list[dict[str, Any]],
    ) -> _Plan:
        why = self._refusal(prefix, history, model, records, units, steps)
        if why is None:
            prev = records[-1]
            assert prev.prompt_ids is not None and prev.completion_ids is not None
            first_new = prev.units + 1  # unit index of the first message after the sampled step
            head = len(messages) - len(units) + 1
            new = list(messages[first_new - 1 + head :])
            bridged = self.renderer.bridge_to_next_turn(
                prev.prompt_ids, prev.completion_ids, new, tools or None
            )
            if bridged is not None and bridged.token_ids is not None:
                return _Plan(TokenIds.of(bridged.token_ids), None)
            why = "the renderer refused to bridge the new messages"
        rendered = self.renderer.render(messages, tools or None, True)
        if rendered.token_ids is None:
            raise ProtocolViolation("the token adapter needs a renderer with a tokenizer")
        return _Plan(TokenIds.of(rendered.token_ids), why or "first request")

    def _refusal(
        self,
        prefix: Prefix,
        history: History,
        model: str,
        records: Sequence[ExecutionRecord],
        units: Sequence[str],
        steps: _Positions,
    ) -> str | None:
        """Why the previous prompt + completion is not a prefix of the next prompt, or None when it is."""
        if not records:
            return "first request"
        prev = records[-1]
        if prev.prompt_ids is None or prev.completion_ids is None:
            return "the previous request has no token ids"
        prev.verify_ids()
        if prev.model != model:
            return f"model changed ({prev.model} -> {model})"
        if prev.prefix_fingerprint != prefix.fingerprint:
            return "the prefix (system, tools or few-shots) changed"
        # by index, not position: a folded history (History.rendered) starts with a synthetic turn
        held = next((t for t in reversed(history.turns) if t.index == prev.turn), None)
        if held is None or prev.step >= len(held.steps):
            return "the history no longer holds the previous step"
        step = held.steps[prev.step]
        completion = _completion(step, self.vendor)
        if completion is None:
            return "the previous step has no sampled completion"
        if tuple(completion.value["token_ids"]) != prev.completion_ids:
            raise ContinuationMismatch("the completion ids in the execution record differ from the payload")
        previous = as_records(records).newest_units()
        n = len(previous)
        if as_units(units[:n]) != previous:
            d = next((i for i, (a, b) in enumerate(zip(units, previous, strict=False)) if a != b), n)
            return f"history before the previous step changed at unit {d} (a policy or compaction)"
        at = steps(prev.turn, prev.step)
        if at != n or units[n] != _digest(_step_unit(step, True, None)):
            return "the view of the previous step differs from what was sampled (reasoning dropped)"
        return None

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        """Split a completion into reasoning (exact), text, tool calls (tolerant arguments, raw text) and a
        ``completion`` continuation holding the exact ids: ``payload.token_ids == completion_ids``."""
        sent = request.prompt_ids
        body = response
        if not isinstance(body, Mapping):
            raise MalformedResponse("completion response is not a JSON object")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise MalformedResponse("completion response has no choices")
        choice = choices[0]
        ids = _ids(choice.get("token_ids"))
        if ids is None:
            raise MalformedResponse(
                "completion response has no choices[0].token_ids (the server must return token ids: "
                "vLLM return_token_ids)"
            )
        raw = choice.get("prompt_token_ids")
        if sent is not None and isinstance(raw, list) and raw == TokenIds.of(sent).as_array().tolist():
            echoed: tuple[int, ...] | None = None  # the prompt sent, echoed: one C-speed comparison
        else:
            echoed = _ids(raw)
            if sent is not None and echoed is not None and echoed != sent:
                raise MalformedResponse("the server saw a different prompt than the token ids sent")
        prompt_ids = sent if sent is not None else echoed
        if prompt_ids is None:
            raise MalformedResponse("no prompt token ids: neither sent nor echoed by the server")
        finish = choice.get("finish_reason")
        finish = finish if isinstance(finish, str) else "unknown"
        text = self._text(ids, truncated=finish == "length")
        parsed = self._parse(text, request.tools)
        echoed = body.get("model")
        payload = Continuation.capture(
            vendor=self.vendor,
            api=API,
            model=request.model,
            kind=KIND,
            value={"token_ids": list(ids), "text": text, "finish_reason": finish},
        )
        return DecodedStep(
            parts=_parts(parsed),
            continuation=(payload,),
            stop_reason=finish,
            usage=self._usage(body.get("usage"), ids, parsed),
            model=request.model,
            response_id=body.get("id") if isinstance(body.get("id"), str) else None,
            response_model=echoed if isinstance(echoed, str) else None,
            prompt_ids=prompt_ids,
            completion_ids=ids,
        )

    def _text(self, ids: Sequence[int], *, truncated: bool) -> str:
        """The completion's exact text. A completion cut by ``max_tokens`` may end inside a character:
        those trailing tokens are held back from the text (kept in the ids), like vLLM's detokenizer.
        Anywhere else, bytes that are not UTF-8 are a :class:`MalformedResponse`."""
        try:
            return self.renderer.decode(ids)
        except UnknownTokenId as exc:
            raise MalformedResponse(f"completion token ids are not this model's: {exc}") from exc
        except InvalidUTF8 as exc:
            if truncated:
                held = self._held_back(ids)
                if held is not None:
                    return held
            raise MalformedResponse(f"completion is not valid UTF-8: {exc}") from exc

    def _held_back(self, ids: Sequence[int]) -> str | None:
        """The text of ``ids`` without an incomplete character at its end; None when bytes before it are
        not UTF-8. Byte-exact with a token-level renderer, else whole tokens are held back."""
        if isinstance(self.renderer, ChatTemplateRenderer) and self.renderer.tokenizer is not None:
            tok = self.renderer.tokenizer
            data = b"".join(tok.token_bytes(i) for i in ids)
            try:
                return codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
            except UnicodeDecodeError:
                return None
        for end in range(len(ids) - 1, max(-1, len(ids) - 4), -1):
            try:
                return self.renderer.decode(ids[:end])
            except InvalidUTF8:
                continue
        return None

    def _parse(self, text: str, tools: Sequence[Mapping[str, Any]] = ()) -> ParsedResponse:
        """The completion text parsed; XML tool parameters are read with the declared tools' types."""
        try:
            if isinstance(self.renderer, ChatTemplateRenderer):
                return self.renderer.parse_response(text, tools=list(tools) or None)
            return self.renderer.parse_response(text)
        except TokensError as exc:
            raise MalformedResponse(f"completion cannot be parsed: {type(exc).__name__}: {exc}") from exc

    def _usage(self, raw: Any, ids: Sequence[int], parsed: ParsedResponse) -> Usage:
        prompt = completion = cached = 0
        if isinstance(raw, Mapping):
            prompt, completion = count(raw.get("prompt_tokens")), count(raw.get("completion_tokens"))
            details = raw.get("prompt_tokens_details")
            cached = count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
        return Usage.of(
            uncached_input=prompt - cached,
            cache_read=cached,
            output=completion or len(ids),
            reasoning=self._reasoning_tokens(ids, parsed),
        )

    def _reasoning_tokens(self, ids: Sequence[int], parsed: ParsedResponse) -> int | None:
        """Exact when the reasoning close tag is one special token: the tokens before it."""
        if parsed.reasoning is None:
            return None
        if parsed.reasoning_truncated:
            return len(ids)
        if isinstance(self.renderer, ChatTemplateRenderer) and self.renderer.tokenizer is not None:
            close = self.renderer.tokenizer.special_id(self.renderer.family.think_close)
            if close is not None and close in ids:
                return list(ids).index(close)
        return None


def _canonical_message(step: Step) -> dict[str, Any]:
    """A step this adapter did not sample, as the chat message a template renders: text and tool calls
    (arguments as objects, as chat templates read them); no foreign reasoning."""
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    if step.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": dict(c.parsed_arguments())},
            }
            for c in step.tool_calls
        ]
    return message


def _tools(prefix: Prefix) -> list[dict[str, Any]]:
    """Tools in the OpenAI function shape chat templates read, in the prefix's canonical (sorted) order."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.offered_parameters),
            },
        }
        for t in prefix.tools
    ]


def _digest(value: Any) -> str:
    return digest_of(canonical_json(value).encode())


def _completion(step: Step, vendor: str | None = None) -> Continuation | None:
    """The step's sampled completion (of ``vendor``'s server, when given): None for a step sampled
    elsewhere, which is rendered from its canonical parts and never bridged."""
    return next(
        (c for c in step.continuation if c.kind == KIND and c.api == API and vendor in (None, c.vendor)),
        None,
    )


def _step_unit(step: Step, keep: bool, summary: str | None) -> dict[str, Any]:
    """What a step contributes to a prompt: its sampled completion and how the view shows it. A step
    without reasoning looks the same kept or dropped."""
    completion = _completion(step)
    has_reasoning = any(isinstance(p, ReasoningPart) for p in step.parts)
    return {
        "role": "assistant",
        "completion": completion.digest if completion is not None else step.text,
        "reasoning": keep or not has_reasoning,
        "summary": summary,
    }


def _parts(parsed: ParsedResponse) -> tuple[Part, ...]:
    parts: list[Part] = []
    if parsed.reasoning is not None:
        parts.append(ReasoningPart(text=parsed.reasoning, continuation=0))
    # the newlines framing the answer are template syntax; the exact bytes live in the continuation
    text = parsed.content.strip()
    if text:
        parts.append(TextPart(text=text, continuation=0))
    for call in parsed.tool_calls:
        if not call.complete:  # cut by max_tokens: not executable, kept verbatim in the completion ids
            parts.append(OpaquePart(type="truncated_tool_call", continuation=0))
            continue
        raw = call.raw_arguments if call.raw_arguments is not None else call.raw
        parts.append(
            ToolCallPart(
                id=call.id, name=call.name, arguments=dict(call.arguments), raw_arguments=raw, continuation=0
            )
        )
    return tuple(parts)


def _ids(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not all(type(i) is int and i >= 0 for i in value):
        return None
    return tuple(value)
