"""Prefix caches: each vendor's rules as data, the cache-read predictor, and the divergence guard."""

from reasonstate.cache.guard import common_prefix_len, divergence
from reasonstate.cache.rules import CacheRules, predict_cache_read

__all__ = ["CacheRules", "common_prefix_len", "divergence", "predict_cache_read"]
