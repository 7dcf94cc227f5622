"""The bounded cache of compiled models, one per (op, attributes, dtypes, ranks).

Its size comes from ``OPCORE_OPENVINO_CACHE_SIZE`` (default 64) when first used, or from
``set_cache_size``. This module does not import openvino.

>>> from opcore_openvino import cache
>>> cache.set_cache_size(32); cache.cache_size()
32
"""

from __future__ import annotations

import threading

from opcore.lru import CacheStats, LRUCache, capacity_from_env

__all__ = ["DEFAULT_CACHE_SIZE", "ENV_VAR", "cache_size", "cache_stats", "compiled_models", "set_cache_size"]

ENV_VAR = "OPCORE_OPENVINO_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 64

_lock = threading.Lock()
_models: LRUCache | None = None


def compiled_models() -> LRUCache:
    """The process's compiled-model cache, created (reading the environment) on first use."""
    global _models  # noqa: PLW0603 - one lazily created cache per process
    if _models is None:
        with _lock:
            if _models is None:
                _models = LRUCache(capacity_from_env(ENV_VAR, DEFAULT_CACHE_SIZE), name="openvino compiled models")
    return _models


def cache_size() -> int:
    """How many compiled models the cache keeps."""
    return compiled_models().capacity


def set_cache_size(size: int) -> None:
    """Keep at most ``size`` compiled models (the least recently used go first)."""
    compiled_models().resize(size)


def cache_stats() -> CacheStats:
    return compiled_models().stats()
