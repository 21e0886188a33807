"""Prefix-cache guard: where a request diverges from the last one, and what the cache should return."""

from reasonstate.cache.guard import divergence, predict_breakpoint_cache

__all__ = ["divergence", "predict_breakpoint_cache"]
