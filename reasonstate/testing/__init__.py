"""Strict local emulators of the vendor HTTP APIs, on 127.0.0.1, for tests without the network.

The emulators are written from the vendor facts (docs/protocols.md), never from our adapters: they do
not import ``reasonstate.adapters`` or ``reasonstate.session``, so they cannot agree with our own bugs.
Importing this package needs no vendor SDK: each emulator imports its SDK only inside ``client()``.

==============================  ===============================================  ============================
emulator                        API                                              the SDK's ``base_url``
==============================  ===============================================  ============================
``AnthropicEmulator``           Anthropic Messages ``POST /v1/messages``         ``base_url`` (the root)
``OpenAIResponsesEmulator``     OpenAI Responses ``POST /v1/responses``          ``base_url + "/v1"``
``OpenAIChatEmulator``          Chat Completions (openai/deepseek/vllm/sglang)   ``+ "/v1"`` (deepseek: root)
``GeminiEmulator``              Gemini ``generateContent`` (v1, v1beta)          ``base_url`` (the root)
``GeminiInteractionsEmulator``  Gemini Interactions ``POST /v1/interactions``    ``base_url`` (the root)
``VLLMCompletionsEmulator``     vLLM ``POST /v1/completions``, token-id prompts  ``base_url + "/v1"``
``BedrockConverseEmulator``     Bedrock ``/model/{id}/converse[-stream]``        ``endpoint_url`` (the root)
==============================  ===============================================  ============================

Each one's ``client()`` builds the real SDK client already pointed at it; ``reasonstate emulate VENDOR``
runs one as a standalone server (:mod:`reasonstate.testing.standalone`).
"""

from reasonstate.testing._server import (
    EmulatorServer,
    Fault,
    JSONResponse,
    RecordedRequest,
    Route,
    StreamResponse,
)
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.bedrock import BedrockConverseEmulator
from reasonstate.testing.completions import ScriptedCompletion, VLLMCompletionsEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.gemini_interactions import GeminiInteractionsEmulator
from reasonstate.testing.openai_chat import OpenAIChatEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from reasonstate.testing.script import ModelAction, Script, ScriptExhausted, ToolCallSpec, count_tokens

__all__ = [
    "AnthropicEmulator",
    "BedrockConverseEmulator",
    "EmulatorServer",
    "Fault",
    "GeminiEmulator",
    "GeminiInteractionsEmulator",
    "JSONResponse",
    "ModelAction",
    "OpenAIChatEmulator",
    "OpenAIResponsesEmulator",
    "RecordedRequest",
    "Route",
    "Script",
    "ScriptExhausted",
    "ScriptedCompletion",
    "StreamResponse",
    "ToolCallSpec",
    "VLLMCompletionsEmulator",
    "count_tokens",
]
