"""Prefix caches: each vendor's rules as data, the cache-read predictor, and where two requests part."""

from reasonstate.cache.divergence import common_prefix_len, divergence
from reasonstate.cache.rules import CacheRules, predict_cache_read

__all__ = ["CacheRules", "common_prefix_len", "divergence", "predict_cache_read"]
