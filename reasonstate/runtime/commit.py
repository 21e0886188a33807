"""Moved: the commit of an answered request is the turn engine's (:mod:`reasonstate.engine`). These names
are re-exported for the modules that still import them from here (``runtime.fold``)."""

from reasonstate.engine import Layers, ToolCall, commit, lost_responses, predict, stripped_payloads

__all__ = ["Layers", "ToolCall", "commit", "lost_responses", "predict", "stripped_payloads"]
