"""The bounded cache of compiled models, one per (op, attributes, dtypes, ranks).

Its size comes from ``OPCORE_OPENVINO_CACHE_SIZE`` (default 64) when first used, or from
``set_cache_size``. This module does not import openvino.

>>> from opcore_openvino import cache
>>> cache.set_cache_size(32); cache.cache_size()
32
"""

from __future__ import annotations

from opcore.extend import ModelCache

__all__ = ["DEFAULT_CACHE_SIZE", "ENV_VAR", "MODELS", "cache_size", "cache_stats", "compiled_models", "set_cache_size"]

ENV_VAR = "OPCORE_OPENVINO_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 64

MODELS = ModelCache("openvino compiled models", ENV_VAR, DEFAULT_CACHE_SIZE)

compiled_models = (
    MODELS.lru
)  # the process's LRUCache of compiled models, created (reading the environment) on first use
cache_size = MODELS.size
set_cache_size = MODELS.resize
cache_stats = MODELS.stats
