"""Amazon Bedrock Converse codec (boto3 ``bedrock-runtime`` ``converse`` / ``converse_stream``;
docs/protocols.md §11).

Rules encoded here, each from docs/protocols.md §11:
  * the assistant message (``output.message`` as received) is the continuation payload, bound to
    (vendor ``"bedrock"``, api ``"converse"``, model): the platform is part of the vendor name, so a Converse
    payload is never sent to the first-party Anthropic API or any other route, and another route's payload
    is never sent here (those steps go from their canonical parts: text and ``toolUse`` blocks);
  * inside the open chain the message goes back as received, its ``reasoningContent`` blocks
    (``reasoningText`` with its ``signature``, ``redactedContent``) in place, first, unmodified (§11.2,
    Anthropic's rule §4.3 as Bedrock forwards it); a closed turn's reasoning may be dropped by the policy
    (the blocks are removed, nothing else changes). ``redactedContent`` is a blob: base64 text in the JSON,
    bytes for boto3 (which encodes it back to the same text);
  * tool results go as one user message of ``toolResult`` blocks (``content: [{"text": ...}]``, ``status:
    "error"`` for an error) in the model's declared call order;
  * usage (§11.3): ``inputTokens`` is the uncached input; ``cacheReadInputTokens`` / ``cacheWriteInputTokens``
    the cache read and written; a ``cachePoint`` closes the stable prefix (after the system, else the tools)
    and another the request (the last, user, message), so each request writes its whole prompt and the next
    reads it (``breakpoints`` at those units; replayed assistant messages never get one);
  * streaming (§11.4): the AWS event-stream binary framing (each message's prelude and CRC32s checked),
    assembled into the JSON a non-streamed call returns, so both give the same state.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from reasonstate.adapters.base import (
    DecodedStep,
    Encodings,
    Endpoint,
    ProtocolRules,
    StreamAssembler,
    VendorRequest,
    count,
)
from reasonstate.adapters.eventstream import EventStreamParser
from reasonstate.cache.rules import CacheRules
from reasonstate.errors import (
    ContinuationMismatch,
    InvalidOption,
    MalformedResponse,
    StreamInterrupted,
    VendorError,
)
from reasonstate.prefix import Prefix, Tool, canonical_json
from reasonstate.state import (
    Continuation,
    ExecutionRecord,
    History,
    Part,
    ReasoningPart,
    Step,
    TextPart,
    ToolCallPart,
    Turn,
    Usage,
    digest_of,
    parse_arguments,
    thaw,
)

__all__ = ["BEDROCK_CONVERSE", "BedrockConverseAdapter", "ConverseAssembler", "EventStreamParser"]

API = "converse"
VENDOR = "bedrock"
#: where Converse runs: its payloads' platform, so their provenance reads (bedrock, converse, model)
PLATFORM = "bedrock"
_KIND = "message"
#: Bedrock's prompt cache for Claude (docs/protocols.md §11.3): explicit ``cachePoint`` checkpoints (at most
#: 4), 1,024 tokens at least, an earlier entry found up to 20 blocks before a checkpoint, 5 minutes
BEDROCK_CONVERSE = CacheRules(
    scheme="breakpoints",
    source="docs/protocols.md §11.3",
    min_tokens=1024,
    max_breakpoints=4,
    lookback_units=20,
    lifetime=(300, 300),
)
_CACHE_POINT: Mapping[str, Any] = {"cachePoint": {"type": "default"}}


def _unit(value: Any) -> str:
    return digest_of(canonical_json(value).encode())


# -- the AWS event stream (docs/protocols.md §11.4) -----------------------------------------------------


class ConverseAssembler(StreamAssembler):
    """The ``converse`` response from its ``converse_stream`` event stream (docs/protocols.md §11.4).

    Invariant: for a server that streams what it would return, the result's ``output.message`` (blocks in
    ``contentBlockIndex`` order: ``reasoningContent.reasoningText`` ``{text, signature}`` or
    ``redactedContent``; ``text``; ``toolUse`` ``{toolUseId, name, input}`` with the input JSON parsed from
    its pieces), ``stopReason``, ``usage`` and ``metrics`` equal the unstreamed answer. An exception message
    (``:message-type: exception``) is :class:`VendorError`; a body that ends before ``metadata`` is
    :class:`StreamInterrupted`."""

    def __init__(self) -> None:
        super().__init__()
        self._frames = EventStreamParser()
        self._role = "assistant"
        self._blocks: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, str] = {}
        self._stop: dict[str, Any] | None = None
        self._metadata: dict[str, Any] | None = None

    def _complete(self) -> bool:
        return self._metadata is not None

    def feed_bytes(self, chunk: bytes) -> None:
        for headers, payload in self._frames.feed(chunk):
            if self._complete():
                n, size = self._trailing
                self._trailing = (n + 1, size + len(payload))
                continue
            try:
                body = json.loads(payload)
            except ValueError as exc:
                raise MalformedResponse(f"an event-stream payload is not JSON: {payload[:80]!r}") from exc
            if headers.get(":message-type") == "exception":
                kind = headers.get(":exception-type", "exception")
                raise VendorError(f"bedrock converse stream {kind}: {body.get('message')}", body=body)
            if not isinstance(body, dict):
                raise MalformedResponse("an event-stream payload is not a JSON object")
            self._on(str(headers.get(":event-type")), body)

    def feed(self, line: str) -> None:  # pragma: no cover - the event stream is binary
        raise MalformedResponse("a Converse stream is binary (AWS event stream), not lines")

    def _block(self, index: int) -> dict[str, Any]:
        return self._blocks.setdefault(index, {})

    def _on(self, kind: str, body: dict[str, Any]) -> None:
        index = body.get("contentBlockIndex", -1)
        if kind.startswith("contentBlock") and (isinstance(index, bool) or not isinstance(index, int)):
            raise MalformedResponse("a Converse stream event has no integer contentBlockIndex")
        if kind == "messageStart":
            self._role = str(body.get("role", "assistant"))
        elif kind == "contentBlockStart":
            use = (body.get("start") or {}).get("toolUse")
            if isinstance(use, Mapping):
                self._block(index)["toolUse"] = {"toolUseId": use.get("toolUseId"), "name": use.get("name")}
                self._inputs[index] = ""
                position = sorted(i for i in self._blocks if "toolUse" in self._blocks[i]).index(index)
                self._emit(
                    "tool_call", "", call_id=use.get("toolUseId"), name=use.get("name"), index=position
                )
        elif kind == "contentBlockDelta":
            self._delta(index, body.get("delta") or {})
        elif kind == "contentBlockStop":
            block = self._block(index)
            if "toolUse" in block:
                raw = self._inputs.pop(index, "") or "{}"
                try:
                    block["toolUse"]["input"] = json.loads(raw)
                except ValueError as exc:
                    raise MalformedResponse(f"a streamed toolUse input is not JSON: {raw[:80]!r}") from exc
        elif kind == "messageStop":
            self._stop = body
        elif kind == "metadata":
            self._metadata = body

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self._block(index)
        if isinstance(delta.get("text"), str):
            block["text"] = block.get("text", "") + delta["text"]
            self._emit("text", delta["text"])
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, Mapping):
            content = block.setdefault("reasoningContent", {})
            if isinstance(reasoning.get("text"), str):
                text = content.setdefault("reasoningText", {"text": ""})
                text["text"] += reasoning["text"]
                self._emit("reasoning", reasoning["text"])
            if isinstance(reasoning.get("signature"), str):
                content.setdefault("reasoningText", {"text": ""})["signature"] = reasoning["signature"]
            if isinstance(reasoning.get("redactedContent"), str):
                content["redactedContent"] = content.get("redactedContent", "") + reasoning["redactedContent"]
        use = delta.get("toolUse")
        if isinstance(use, Mapping) and isinstance(use.get("input"), str):
            self._inputs[index] = self._inputs.get(index, "") + use["input"]
            calls = sorted(i for i in self._blocks if "toolUse" in self._blocks[i])
            call = block.get("toolUse", {})
            self._emit(
                "tool_call",
                use["input"],
                call_id=call.get("toolUseId"),
                name=call.get("name"),
                index=calls.index(index) if index in calls else None,
            )

    def finish(self) -> dict[str, Any]:
        return self._result()

    def _result(self) -> dict[str, Any]:
        if self._stop is None or self._metadata is None:
            raise StreamInterrupted("the Converse stream ended before its messageStop and metadata")
        content = [self._blocks[i] for i in sorted(self._blocks)]
        response: dict[str, Any] = {
            "output": {"message": {"role": self._role, "content": content}},
            "stopReason": self._stop.get("stopReason"),
        }
        if "additionalModelResponseFields" in self._stop:
            response["additionalModelResponseFields"] = self._stop["additionalModelResponseFields"]
        response["usage"] = self._metadata.get("usage")
        response["metrics"] = self._metadata.get("metrics")
        return response


# -- the codec ------------------------------------------------------------------------------------------


def _for_boto3(block: Mapping[str, Any]) -> dict[str, Any]:
    """A content block as boto3 takes it: a ``redactedContent`` blob as bytes (the JSON holds base64)."""
    out = dict(block)
    reasoning = out.get("reasoningContent")
    if isinstance(reasoning, Mapping) and isinstance(reasoning.get("redactedContent"), str):
        out["reasoningContent"] = {
            **reasoning,
            "redactedContent": base64.b64decode(reasoning["redactedContent"], validate=True),
        }
    return out


def _own_message(step: Step) -> Continuation | None:
    return next(
        (c for c in step.continuation if c.kind == _KIND and c.api == API and c.vendor == VENDOR), None
    )


def _canonical_message(step: Step) -> dict[str, Any]:
    """A step from its canonical parts: text and ``toolUse`` blocks, no reasoning (another route's
    reasoning is never disguised as this one's)."""
    content: list[dict[str, Any]] = []
    if step.text:
        content.append({"text": step.text})
    for call in step.tool_calls:
        arguments = thaw(call.arguments) if call.arguments is not None else {}
        content.append({"toolUse": {"toolUseId": call.id, "name": call.name, "input": arguments}})
    return {"role": "assistant", "content": content or [{"text": ""}]}


class BedrockConverseAdapter:
    """The Converse codec; ``vendor`` is ``"bedrock"`` (the platform), ``api`` is ``"converse"``."""

    api = API
    vendor = VENDOR
    #: the payloads are served by Bedrock and bound to it (docs/protocols.md §10.1, §11)
    platform = PLATFORM
    label: ClassVar[str] = "bedrock converse"

    def __init__(self) -> None:
        self.rules = ProtocolRules(vendor=VENDOR, api=API)
        self.cache = BEDROCK_CONVERSE
        self.endpoint = Endpoint(
            sdk="boto3", resource=("converse",), label=self.label, assembler=ConverseAssembler
        )

    def check_call(self, client: Any, model: str, options: Mapping[str, Any], tools: Sequence[Tool]) -> None:
        """Refuse, before any request, an option ``converse`` does not take (botocore would refuse it with
        ``ParamValidationError`` at the first call; docs/protocols.md §11.1): the members of the installed
        service model's ``ConverseRequest``, less those the session builds from its state."""
        meta = getattr(client, "meta", None)
        model_ = getattr(meta, "service_model", None)
        if model_ is None:
            return
        members = set(model_.operation_model("Converse").input_shape.members)
        own = {"modelId", "messages", "system", "toolConfig"}
        unknown = sorted(k for k in options if k not in members or k in own)
        if unknown:
            allowed = ", ".join(sorted(members - own))
            raise InvalidOption(
                f"{unknown} are not options of bedrock-runtime converse here (docs/protocols.md §11.1); "
                f"it takes: {allowed}"
            )

    # -- encode ----------------------------------------------------------------------------------------------
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
        """The ``converse`` kwargs for the next call on ``history`` (last turn open)."""
        units: list[str] = []
        kwargs: dict[str, Any] = {"modelId": model}
        messages: list[dict[str, Any]] = []
        for user, answer in prefix.few_shots:
            messages.append({"role": "user", "content": [{"text": user}]})
            messages.append({"role": "assistant", "content": [{"text": answer}]})
        withheld: list[Continuation] = []
        for turn in history.turns:
            messages.extend(self._turn(turn, model, withheld))
        kwargs["messages"] = messages
        # the prompt is tools, system, messages (§11.3); a cachePoint closes the stable prefix and another
        # the request, so each request writes its whole prompt and the next one reads it (§11.3)
        if prefix.tools:
            tools: list[dict[str, Any]] = [
                {
                    "toolSpec": {
                        "name": t.name,
                        "description": t.description,
                        "inputSchema": {"json": t.offered_parameters},
                    }
                }
                for t in prefix.tools
            ]
            units.extend(_unit(t) for t in tools)
            kwargs["toolConfig"] = {"tools": tools}
        if prefix.system:
            kwargs["system"] = [{"text": prefix.system}]
            units.append(_unit(kwargs["system"][0]))
        n_head = len(units)
        if prefix.system:
            kwargs["system"].append(_CACHE_POINT)
        elif prefix.tools:
            kwargs["toolConfig"]["tools"].append(_CACHE_POINT)
        for message in messages:
            units.extend(_unit({"role": message["role"], **_shown(b)}) for b in message["content"])
        if messages:  # the last message is the user's (a question or tool results): built for this request
            messages[-1] = {**messages[-1], "content": [*messages[-1]["content"], _CACHE_POINT]}
        for key, value in options.items():
            kwargs[key] = thaw(value)
        breakpoints = (n_head, len(units)) if n_head else (len(units),)
        return VendorRequest(
            kwargs=kwargs,
            units=tuple(units),
            model=model,
            breakpoints=breakpoints,
            prefix_units=n_head,
            withheld=tuple(withheld),
        )

    def _turn(self, turn: Turn, model: str, withheld: list[Continuation]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": turn.user}]}]
        for i, step in enumerate(turn.steps):
            messages.append(self._assistant(turn, i, step, model, withheld))
            if step.tool_results:
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "toolResult": {
                                    "toolUseId": r.call_id,
                                    "content": [{"text": r.content}],
                                    **({"status": "error"} if r.is_error else {}),
                                }
                            }
                            for r in step.tool_results
                        ],
                    }
                )
        return messages

    def _assistant(
        self, turn: Turn, index: int, step: Step, model: str, withheld: list[Continuation]
    ) -> dict[str, Any]:
        c = _own_message(step)
        if c is None:
            withheld.extend(step.continuation)
            return _canonical_message(step)
        payload = c.value
        if not isinstance(payload, Mapping) or not isinstance(payload.get("content"), Sequence):
            raise ContinuationMismatch("a Converse message payload is not a message object")
        keep = turn.view is None or turn.view.keep_reasoning[index]
        if not c.replayable_to(VENDOR, API, model, PLATFORM):
            keep = False  # another model's signed reasoning is never sent to this one
            withheld.append(c)
        content = [
            _for_boto3(b)
            for b in thaw(payload["content"])
            if keep or not (isinstance(b, Mapping) and "reasoningContent" in b)
        ]
        if not content:
            content = [{"text": ""}]
        return {**thaw(payload), "content": content}

    # -- decode ----------------------------------------------------------------------------------------------
    def decode(self, response: Any, request: VendorRequest) -> DecodedStep:
        if not isinstance(response, Mapping):
            raise MalformedResponse("a Converse response is not a JSON object")
        output = response.get("output")
        message = output.get("message") if isinstance(output, Mapping) else None
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), list):
            raise MalformedResponse("a Converse response has no output.message with a content list")
        parts = _parts(message["content"])
        reasoning = any("reasoningContent" in b for b in message["content"] if isinstance(b, Mapping))
        payload = Continuation.capture(
            vendor=VENDOR,
            api=API,
            model=request.model,
            kind=_KIND,
            value=message,
            model_bound=reasoning,
            platform=PLATFORM,
        )
        stop = response.get("stopReason")
        return DecodedStep(
            parts=tuple(parts),
            continuation=(payload,),
            stop_reason=stop if isinstance(stop, str) else "unknown",
            usage=usage(response.get("usage")),
            model=request.model,
        )


def _shown(block: Mapping[str, Any]) -> dict[str, Any]:
    """A block as a unit: a blob as its base64 text (the bytes boto3 sends)."""
    reasoning = block.get("reasoningContent")
    if isinstance(reasoning, Mapping) and isinstance(reasoning.get("redactedContent"), bytes):
        redacted = base64.b64encode(reasoning["redactedContent"]).decode()
        return {**block, "reasoningContent": {**reasoning, "redactedContent": redacted}}
    return dict(block)


def _parts(content: list[Any]) -> list[Part]:
    parts: list[Part] = []
    for i, block in enumerate(content):
        if not isinstance(block, Mapping):
            raise MalformedResponse(f"content[{i}] is not an object")
        if isinstance(block.get("text"), str):
            if block["text"]:
                parts.append(TextPart(text=block["text"], continuation=0))
        elif "reasoningContent" in block:
            reasoning = block["reasoningContent"]
            text = reasoning.get("reasoningText") if isinstance(reasoning, Mapping) else None
            if isinstance(text, Mapping):
                if not isinstance(text.get("text"), str):
                    raise MalformedResponse(f"content[{i}].reasoningContent.reasoningText has no text")
                parts.append(ReasoningPart(text=text["text"], continuation=0))
        elif "toolUse" in block:
            use = block["toolUse"]
            if (
                not isinstance(use, Mapping)
                or not isinstance(use.get("toolUseId"), str)
                or not isinstance(use.get("name"), str)
            ):
                raise MalformedResponse(f"content[{i}].toolUse needs a toolUseId and a name")
            raw = json.dumps(use.get("input"), ensure_ascii=False, separators=(",", ":"))
            arguments, error = parse_arguments(raw)
            parts.append(
                ToolCallPart(
                    id=use["toolUseId"],
                    name=use["name"],
                    arguments=arguments,
                    raw_arguments=raw,
                    continuation=0,
                    arguments_error=error,
                )
            )
    return parts


def usage(raw: Any) -> Usage:
    """Normalized usage (docs/protocols.md §11.3): ``inputTokens`` is the uncached part."""
    if not isinstance(raw, Mapping):
        return Usage()
    return Usage.of(
        uncached_input=count(raw.get("inputTokens")),
        cache_read=count(raw.get("cacheReadInputTokens")),
        cache_write=count(raw.get("cacheWriteInputTokens")),
        output=count(raw.get("outputTokens")),
    )
