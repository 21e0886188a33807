"""Prefix caches: each vendor's rules as data, the cache-read predictor, and where two requests part."""

from reasonstate.cache.rules import CacheRules, common_prefix_len, predict_cache_read

# ``divergence`` (the function, in rules) is not re-exported: that name is the submodule
# ``reasonstate.cache.divergence``, which replaces a package attribute of the same name once imported
__all__ = ["CacheRules", "common_prefix_len", "predict_cache_read"]
