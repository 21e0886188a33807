"""Per-family knowledge of model output syntax: one small class per family, found from the template text."""

from __future__ import annotations

from reasonstate.tokens.errors import UnknownTemplateFamily
from reasonstate.tokens.families.base import CallSpec, Family, ModelTurn, PromptState, tolerant_json
from reasonstate.tokens.families.deepseek import DeepSeek
from reasonstate.tokens.families.glm import GLM4
from reasonstate.tokens.families.harmony import Harmony
from reasonstate.tokens.families.kimi import KimiK2
from reasonstate.tokens.families.qwen import Qwen3

__all__ = [
    "FAMILIES",
    "GLM4",
    "CallSpec",
    "DeepSeek",
    "Family",
    "Harmony",
    "KimiK2",
    "ModelTurn",
    "PromptState",
    "Qwen3",
    "detect_family",
    "tolerant_json",
]

FAMILIES: dict[str, type[Family]] = {f.name: f for f in (Qwen3, GLM4, KimiK2, DeepSeek, Harmony)}


def detect_family(template_source: str) -> Family:
    """The family whose marker the template contains; :class:`UnknownTemplateFamily` when none does."""
    for family in FAMILIES.values():
        if family.marker in template_source:
            return family()
    raise UnknownTemplateFamily(
        "the template's tool-call syntax matches no known family "
        f"({', '.join(FAMILIES)}); pass family= explicitly"
    )
