"""A strict emulator of Amazon Bedrock's Converse API (``POST /model/{modelId}/converse`` and
``/converse-stream``), for boto3's ``bedrock-runtime`` client offline (docs/protocols.md §11).

Written from the vendor facts (the botocore service model ``bedrock-runtime``, AWS's Converse and
event-stream documentation), never from our adapters: this module does not import ``reasonstate.adapters``
or ``reasonstate.session``. boto3 is imported only inside :meth:`BedrockConverseEmulator.client`.

**Auth.** boto3 signs with SigV4: a request without an ``Authorization: AWS4-HMAC-SHA256 Credential=...``
header is 403 ``MissingAuthenticationTokenException`` (the signature itself is not verified).

**Models.** Ids as Bedrock names them (``anthropic.claude-sonnet-4-5-20250929-v1:0``, an inference profile
``us.anthropic...``); any id is served unless ``models=`` names some (then another is 400
``ValidationException`` "The provided model identifier is invalid.").

**Errors** (a rejected request consumes no script action): HTTP 400, header ``x-amzn-ErrorType:
ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/``, body ``{"message": ...}``
(the rest-json error shape botocore reads into ``ClientError``). Rules:

* roles must alternate, starting with ``user`` ("A conversation must alternate between user and assistant
  roles. Make sure the conversation alternates between user and assistant roles and try again.");
* every ``toolUse`` is answered by a ``toolResult`` with its id in the next user message, and a
  ``toolResult`` answers a ``toolUse`` of the message before it (Bedrock's "The number of toolResult
  blocks at messages.N.content exceeds the number of toolUse blocks of previous turn.");
* Anthropic's thinking rules as Bedrock forwards them (docs/protocols.md §4.3) when the request enables
  thinking (``additionalModelRequestFields.thinking.type == "enabled"``): in the open chain (the request
  ends with tool results), the assistant message that made the calls must start with its
  ``reasoningContent`` → else "The model returned the following errors: messages.N.content.0.type:
  Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final
  `assistant` message must start with a thinking block ..."; every ``reasoningText.signature`` must verify
  (``HMAC-SHA256(secret, model \\0 text)``, base64: bound to the model and to this emulator's secret, i.e.
  this account and platform) → else "The model returned the following errors: messages.N.content.M:
  Invalid `signature` in `thinking` block"; a ``redactedContent`` blob must be one this emulator issued.

**Output.** ``{"output": {"message": {"role": "assistant", "content": [...]}}, "stopReason", "usage",
"metrics"}``: content = ``reasoningContent`` (``reasoningText: {text, signature}``; with
``ModelAction.redacted`` also a ``redactedContent`` block), then ``text``, then ``toolUse`` blocks
(``toolUseId`` ``tooluse_NNN``, ``name``, ``input`` = the arguments object). ``stopReason``:
``tool_use``, ``end_turn`` or ``max_tokens``. Usage: ``inputTokens`` (uncached), ``outputTokens``,
``totalTokens`` (= all four), ``cacheReadInputTokens``, ``cacheWriteInputTokens``: the prompt is its blocks
(tools, system, messages' content) in order; a ``cachePoint`` block marks the prefix before it; the longest
prefix written before that ends at a checkpoint or up to 20 blocks before one is read; every checkpoint's
prefix of at least 1,024 tokens is written (the write reported: the last checkpoint's prefix past the read).

**Streaming** (``converse-stream``): the AWS event-stream binary framing
(``application/vnd.amazon.eventstream``): each message is ``total length, headers length`` (big-endian
uint32), the prelude's CRC32, headers (``:event-type``, ``:content-type: application/json``,
``:message-type: event``; string-typed, 7), the JSON payload, and the CRC32 of all before. Events:
``messageStart``, per block ``contentBlockDelta`` (``reasoningContent.text`` pieces then its
``signature``; ``redactedContent``; ``text`` pieces; a tool use opens with ``contentBlockStart``
``{start: {toolUse: {toolUseId, name}}}`` and its ``input`` comes as JSON text pieces) and
``contentBlockStop``, then ``messageStop`` ``{stopReason}`` and ``metadata`` ``{usage, metrics}``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from reasonstate._extras import needs
from reasonstate.testing._eventstream import event_message
from reasonstate.testing._server import (
    JSONResponse,
    RecordedRequest,
    Route,
    ScriptedEmulator,
    StreamResponse,
    Transform,
)
from reasonstate.testing.script import ModelAction, Script, count_tokens

if TYPE_CHECKING:
    from reasonstate.testing.script import Responder

__all__ = ["BedrockConverseEmulator", "event_message"]

_ERROR_TYPE = "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"
_ALTERNATE = (
    "A conversation must alternate between user and assistant roles. Make sure the conversation alternates "
    "between user and assistant roles and try again."
)
_NO_THINKING = (
    "The model returned the following errors: messages.{}.content.0.type: Expected `thinking` or "
    "`redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message "
    "must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
    "blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
_BAD_SIGNATURE = (
    "The model returned the following errors: messages.{}.content.{}: Invalid `signature` in `thinking` block"
)
_CHUNK = 8
#: Claude's minimum cacheable prompt on Bedrock, and how far before a checkpoint an entry is found
_MIN_CACHED = 1024
_LOOKBACK = 20


def _error(message: str, status: int = 400, kind: str = _ERROR_TYPE) -> JSONResponse:
    return JSONResponse(status, {"message": message}, {"x-amzn-ErrorType": kind})


class _Reject(Exception):
    def __init__(self, response: JSONResponse) -> None:
        super().__init__(response.payload)
        self.response = response


def _ids(message: Mapping[str, Any], kind: str) -> list[str]:
    """The ``toolUseId`` of every ``kind`` (``toolUse`` / ``toolResult``) block of a message."""
    return [str(b[kind].get("toolUseId")) for b in message["content"] if isinstance(b, dict) and kind in b]


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


class BedrockConverseEmulator(ScriptedEmulator):
    """``POST /model/{modelId}/converse`` and ``/converse-stream`` under the rules in the module docstring.

    Point a real boto3 client at it (``endpoint_url`` = ``base_url``, the root; any region and keys: the
    SigV4 signature is required, not verified; :meth:`client` does this)::

        emulator = BedrockConverseEmulator(script).start()
        client = emulator.client()  # boto3.client("bedrock-runtime", endpoint_url=emulator.base_url, ...)

    It rejects (400 ``ValidationException`` with the ``x-amzn-ErrorType`` header, nothing consumed from the
    script): roles that do not alternate, tool results that answer no tool use (or leave one unanswered),
    with thinking enabled an open chain whose tool-calling message does not start with its reasoning, a
    ``reasoningText`` signature that does not verify here (another model, account or platform) and a
    ``redactedContent`` blob it did not issue; an unsigned request is 403.
    """

    def __init__(
        self,
        script: Iterable[ModelAction] | Script | Responder = (),
        *,
        secret: bytes | str | None = None,
        transform: Transform | None = None,
        models: Iterable[str] = (),
    ) -> None:
        routes = [
            Route("POST", r"/model/(?P<model>[^/]+)/converse", self._converse),
            Route("POST", r"/model/(?P<model>[^/]+)/converse-stream", self._converse_stream),
        ]
        models = tuple(models)
        super().__init__(
            routes,
            name="bedrock-converse-emulator",
            script=script,
            secret=secret,
            transform=transform,
            models=models,
        )
        self._checks_model = bool(models)
        self._answers = 0
        self._calls = 0
        self._issued_tool_reasoning: dict[str, int] = {}  # toolUseId -> answer number (it had reasoning)
        self._redacted: set[str] = set()  # base64 redactedContent issued
        self._cache: dict[str, set[str]] = {}  # model -> written prefixes (their blocks' canonical JSON)

    # -- clients ---------------------------------------------------------------------------------------
    def client(self, **kw: Any) -> Any:
        """A real boto3 ``bedrock-runtime`` client pointed at this emulator (no retries; ``kw`` overrides)."""
        with needs("bedrock"):
            import boto3  # type: ignore[import-untyped]
            from botocore.config import Config  # type: ignore[import-untyped]

        options: dict[str, Any] = {
            "endpoint_url": self.base_url,
            "region_name": "us-east-1",
            "aws_access_key_id": "x",
            "aws_secret_access_key": "y",
            "config": Config(retries={"max_attempts": 1, "mode": "standard"}),
        }
        options.update(kw)
        return boto3.client("bedrock-runtime", **options)

    # -- handlers --------------------------------------------------------------------------------------
    def _converse(self, request: RecordedRequest) -> JSONResponse:
        answer = self._answer(request)
        return answer if isinstance(answer, JSONResponse) else JSONResponse(200, answer)

    def _converse_stream(self, request: RecordedRequest) -> JSONResponse | StreamResponse:
        answer = self._answer(request)
        if isinstance(answer, JSONResponse):
            return answer
        return StreamResponse(
            self._events(answer), headers={"content-type": "application/vnd.amazon.eventstream"}
        )

    def _answer(self, request: RecordedRequest) -> dict[str, Any] | JSONResponse:
        auth = request.headers.get("authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 Credential="):
            return _error("Missing Authentication Token", 403, "MissingAuthenticationTokenException")
        match = re.fullmatch(r"/model/([^/]+)/converse(?:-stream)?", request.path)
        assert match is not None
        from urllib.parse import unquote

        model = unquote(match.group(1))
        if self._checks_model and not self.knows_model(model):
            return _error("The provided model identifier is invalid.")
        try:
            body = request.json()
        except ValueError:
            return _error("Malformed input request, please reformat your input and try again.")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(
                "1 validation error detected: Value null at 'messages' failed to satisfy constraint: "
                "Member must not be null"
            )
        with self._lock:
            try:
                self._validate(model, body)
            except _Reject as rejected:
                return rejected.response
            action = self.script.take(body)
            return self._transformed(self._respond(model, body, action))

    # -- validation --------------------------------------------------------------------------------------
    def _validate(self, model: str, body: dict[str, Any]) -> None:
        messages: list[Any] = body["messages"]
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") != (
                "user" if i % 2 == 0 else "assistant"
            ):
                raise _Reject(_error(_ALTERNATE))
            if not isinstance(message.get("content"), list):
                raise _Reject(_error(f"messages.{i}.content must be a list"))
        for i, message in enumerate(messages):
            results = _ids(message, "toolResult")
            asked = _ids(messages[i - 1], "toolUse") if i else []
            if len(results) > len(asked) or any(r not in asked for r in results):
                text = (
                    f"The number of toolResult blocks at messages.{i}.content exceeds the number of toolUse "
                    "blocks of previous turn."
                )
                raise _Reject(_error(text))
            if message["role"] == "user" and sorted(results) != sorted(asked):
                text = f"Expected toolResult blocks at messages.{i}.content for the following Ids: "
                raise _Reject(_error(text + ", ".join(a for a in asked if a not in results)))
        thinking = ((body.get("additionalModelRequestFields") or {}).get("thinking") or {}).get(
            "type"
        ) == "enabled"
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            for j, block in enumerate(message["content"]):
                reasoning = block.get("reasoningContent") if isinstance(block, dict) else None
                if not isinstance(reasoning, dict):
                    continue
                signed = reasoning.get("reasoningText")
                if isinstance(signed, dict) and signed.get("signature") != self._sign(
                    model, str(signed.get("text"))
                ):
                    raise _Reject(_error(_BAD_SIGNATURE.format(i, j)))
                if "redactedContent" in reasoning and reasoning["redactedContent"] not in self._redacted:
                    raise _Reject(_error(_BAD_SIGNATURE.format(i, j)))
        if (
            not thinking
            or not messages
            or not any("toolResult" in b for b in messages[-1]["content"] if isinstance(b, dict))
        ):
            return
        start = max(
            (
                i
                for i, m in enumerate(messages)
                if m["role"] == "user"
                and not any("toolResult" in b for b in m["content"] if isinstance(b, dict))
            ),
            default=-1,
        )
        for i in range(start + 1, len(messages)):
            message = messages[i]
            if message["role"] != "assistant":
                continue
            uses = [
                b["toolUse"]["toolUseId"]
                for b in message["content"]
                if isinstance(b, dict) and "toolUse" in b
            ]
            if not any(u in self._issued_tool_reasoning for u in uses):
                continue
            first = message["content"][0] if message["content"] else {}
            if not isinstance(first, dict) or "reasoningContent" not in first:
                raise _Reject(_error(_NO_THINKING.format(i)))

    def _sign(self, model: str, text: str) -> str:
        mac = hmac.new(self.secret, f"{model}\0{text}".encode(), hashlib.sha256).digest()
        return base64.b64encode(mac).decode()

    # -- output -------------------------------------------------------------------------------------------
    def _respond(self, model: str, body: dict[str, Any], action: ModelAction) -> dict[str, Any]:
        self._answers += 1
        thinking = ((body.get("additionalModelRequestFields") or {}).get("thinking") or {}).get(
            "type"
        ) == "enabled"
        content: list[dict[str, Any]] = []
        if thinking and action.reasoning is not None:
            text = action.reasoning
            content.append(
                {"reasoningContent": {"reasoningText": {"text": text, "signature": self._sign(model, text)}}}
            )
        if thinking and action.redacted:
            blob = base64.b64encode(hashlib.sha256(f"{self._answers}".encode()).digest() * 2).decode()
            self._redacted.add(blob)
            content.append({"reasoningContent": {"redactedContent": blob}})
        if action.text:
            content.append({"text": action.text})
        for call in action.tool_calls:
            self._calls += 1
            use_id = f"tooluse_{self._calls:03d}"
            arguments = (
                json.loads(call.raw_arguments) if call.raw_arguments is not None else dict(call.arguments)
            )
            content.append({"toolUse": {"toolUseId": use_id, "name": call.name, "input": arguments}})
            if thinking and action.reasoning is not None:
                self._issued_tool_reasoning[use_id] = self._answers
        stop = (
            "max_tokens" if action.stop == "max_tokens" else "tool_use" if action.tool_calls else "end_turn"
        )
        read, written, uncached = self._cached(model, body)
        output = count_tokens(_canonical(content))
        usage = {
            "inputTokens": uncached,
            "outputTokens": output,
            "totalTokens": uncached + read + written + output,
            "cacheReadInputTokens": read,
            "cacheWriteInputTokens": written,
        }
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop,
            "usage": usage,
            "metrics": {"latencyMs": 7},
        }

    def _cached(self, model: str, body: dict[str, Any]) -> tuple[int, int, int]:
        """(read, written, uncached) tokens (module docstring): the prompt is its blocks in order (tools,
        system, each message's content blocks); a ``cachePoint`` marks the prefix before it. The read is the
        longest prefix written before that ends at a checkpoint or up to 20 blocks before one; each
        checkpoint's prefix of at least 1,024 tokens is written; the write is the last checkpoint's prefix
        past the read, when it was not cached already."""
        segments: list[str] = []
        points: list[int] = []
        blocks: list[tuple[str | None, Any]] = [
            (None, t) for t in (body.get("toolConfig") or {}).get("tools") or []
        ]
        blocks += [(None, b) for b in body.get("system") or []]
        blocks += [(m["role"], b) for m in body["messages"] for b in m["content"]]
        for role, block in blocks:
            if isinstance(block, dict) and "cachePoint" in block:
                points.append(len(segments))
            else:
                segments.append(_canonical(block if role is None else {"role": role, **block}))
        sizes = [0]
        for segment in segments:
            sizes.append(sizes[-1] + count_tokens(segment))
        written = self._cache.setdefault(model, set())
        read = 0
        for p in points:
            for k in range(p, max(p - _LOOKBACK, 0) - 1, -1):
                if k and "\n".join(segments[:k]) in written:
                    read = max(read, sizes[k])
                    break
        fresh = 0
        for p in points:
            key = "\n".join(segments[:p])
            if sizes[p] >= _MIN_CACHED and key not in written:
                written.add(key)
                if p == max(points):
                    fresh = sizes[p] - read
        return read, fresh, sizes[-1] - read - fresh

    def _events(self, answer: dict[str, Any]) -> Iterator[bytes]:
        message = answer["output"]["message"]
        yield event_message("messageStart", {"role": "assistant"})
        for index, block in enumerate(message["content"]):
            if "reasoningContent" in block:
                reasoning = block["reasoningContent"]
                if "reasoningText" in reasoning:
                    text = reasoning["reasoningText"]["text"]
                    for k in range(0, len(text), _CHUNK):
                        delta = {"reasoningContent": {"text": text[k : k + _CHUNK]}}
                        yield event_message("contentBlockDelta", {"delta": delta, "contentBlockIndex": index})
                    signature = {"reasoningContent": {"signature": reasoning["reasoningText"]["signature"]}}
                    yield event_message("contentBlockDelta", {"delta": signature, "contentBlockIndex": index})
                else:
                    delta = {"reasoningContent": {"redactedContent": reasoning["redactedContent"]}}
                    yield event_message("contentBlockDelta", {"delta": delta, "contentBlockIndex": index})
            elif "text" in block:
                for k in range(0, len(block["text"]), _CHUNK):
                    delta = {"text": block["text"][k : k + _CHUNK]}
                    yield event_message("contentBlockDelta", {"delta": delta, "contentBlockIndex": index})
            elif "toolUse" in block:
                use = block["toolUse"]
                start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
                yield event_message("contentBlockStart", {"start": start, "contentBlockIndex": index})
                raw = json.dumps(use["input"], ensure_ascii=False, separators=(",", ":"))
                for k in range(0, len(raw), _CHUNK):
                    delta = {"toolUse": {"input": raw[k : k + _CHUNK]}}
                    yield event_message("contentBlockDelta", {"delta": delta, "contentBlockIndex": index})
            yield event_message("contentBlockStop", {"contentBlockIndex": index})
        yield event_message("messageStop", {"stopReason": answer["stopReason"]})
        yield event_message("metadata", {"usage": answer["usage"], "metrics": answer["metrics"]})
