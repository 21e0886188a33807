"""The token-session section of ``reasonstate demo``: a 4-turn tool session on the vLLM emulator.

Qwen3.6 template and tokenizer, the real ``openai`` SDK over loopback HTTP, :class:`TokenAdapter`. The same
scripted model runs under ``Keep`` (every prompt bridged: ``B[:len(p) + len(c)] == p + c``) and ``Drop``
(each new turn starts with a traced full render, as the sampled reasoning is no longer in the history).
Each row shows one request: prompt tokens, the cached tokens vLLM reported and the SDK predicted.

Needs the ``tokens`` extra and ``openai``; imported only when called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["token_demo_rows", "token_demo_section"]

_CITIES = ("Paris", "Rome", "Oslo", "Lisbon")
_SYSTEM = "You are a travel desk. Use the weather tool for facts and answer in one sentence."


def _script(renderer: Any) -> list[str]:
    from reasonstate.tokens.families import CallSpec, ModelTurn

    out: list[str] = []
    for i, city in enumerate(_CITIES):
        thought = f"The user asks about {city}. I should check the weather before advising. " * (2 + i)
        call = CallSpec("get_weather", {"city": city})
        out.append(renderer.family.write(ModelTurn(reasoning=thought, calls=(call,)), "open"))
        answer = ModelTurn(
            reasoning=f"{city} is mild today; a light jacket is enough.", content=f"{city}: mild."
        )
        out.append(renderer.family.write(answer, "open"))
    return out


def _run(renderer: Any, policy: Any) -> list[tuple[str, ...]]:
    import openai

    import reasonstate as rs
    from reasonstate.adapters.tokens import TokenAdapter
    from reasonstate.state import EventKind
    from reasonstate.testing.completions import VLLMCompletionsEmulator

    weather = rs.Tool(
        name="get_weather",
        description="Current weather for a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        handler=lambda city: {"city": city, "sky": "clear", "temp_c": 17},
    )
    im_end = renderer.tokenizer.special_id("<|im_end|>")
    with VLLMCompletionsEmulator(_script(renderer), codec=renderer, eos_token_ids=[im_end]) as emu:
        client = openai.OpenAI(base_url=emu.base_url + "/v1", api_key="local", max_retries=0)
        session = rs.Session(
            client,
            model="qwen3.6",
            adapter=TokenAdapter(renderer),
            system=_SYSTEM,
            tools=[weather],
            policy=policy,
            max_tokens=512,
        )
        for city in _CITIES:
            session.run(f"Should I pack a coat for {city}?")
        rendered = {
            e.data["index"]
            for e in session.trace.of_kind(EventKind.CACHE_BREAK)
            if e.data.get("path") == "full_render"
        }
        rows: list[tuple[str, ...]] = []
        for r in session.execution:
            path = "full render" if r.index == 0 or r.index in rendered else "bridge"
            rows.append(
                (
                    policy.name,
                    str(r.index),
                    f"{r.turn}.{r.step}",
                    path,
                    str(r.usage.prompt_tokens),
                    str(r.usage.cache_read),
                    str(r.predicted_cache_read),
                )
            )
        return rows


def token_demo_rows() -> list[tuple[str, ...]]:
    """One row per request, under ``Keep`` then ``Drop``: policy, request index, ``turn.step``, prompt path
    (``full render`` or ``bridge``), prompt tokens, cached tokens vLLM reported, cached tokens predicted."""
    from reasonstate.policies import Drop, Keep
    from reasonstate.tokens import ChatTemplateRenderer, template_path

    renderer = ChatTemplateRenderer.from_files(template_path("qwen3.6"), tokenizer="qwen3.6")
    return [*_run(renderer, Keep()), *_run(renderer, Drop())]


def token_demo_section() -> str:
    """A table of per-request prompt tokens, cached tokens (reported vs predicted) and the prompt's path."""
    header = ("policy", "req", "turn.step", "prompt path", "prompt", "cached", "predicted")
    rows = token_demo_rows()
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    exact = sum(1 for r in rows if r[5] == r[6])
    return "\n".join(
        [
            "Token-in, token-out session (Qwen3.6 template + tokenizer, vLLM /v1/completions emulator)",
            line(header),
            line(tuple("-" * w for w in widths)),
            *(line(r) for r in rows),
            "",
            f"cached tokens predicted exactly on {exact}/{len(rows)} requests (vLLM blocks of 16 tokens);",
            "bridge: next prompt = previous prompt ids + completion ids + only the new messages' tokens;",
            "full render: the policy changed sampled history (Drop), so the chat template renders it again.",
        ]
    )
