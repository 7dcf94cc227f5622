"""The bounded cache of InferenceSessions, one per (op, attributes, dtypes, ranks).

Its size comes from ``OPCORE_ORT_CACHE_SIZE`` (default 128) when first used, or from
``set_cache_size``. This module does not import onnxruntime.

>>> from opcore_onnxruntime import cache
>>> cache.set_cache_size(32); cache.cache_size()
32
"""

from __future__ import annotations

import threading

from opcore.lru import CacheStats, LRUCache, capacity_from_env

__all__ = ["DEFAULT_CACHE_SIZE", "ENV_VAR", "cache_size", "cache_stats", "sessions", "set_cache_size"]

ENV_VAR = "OPCORE_ORT_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 128

_lock = threading.Lock()
_sessions: LRUCache | None = None


def sessions() -> LRUCache:
    """The process's session cache, created (reading the environment) on first use."""
    global _sessions  # noqa: PLW0603 - one lazily created cache per process
    if _sessions is None:
        with _lock:
            if _sessions is None:
                _sessions = LRUCache(capacity_from_env(ENV_VAR, DEFAULT_CACHE_SIZE), name="onnxruntime sessions")
    return _sessions


def cache_size() -> int:
    """How many sessions the cache keeps."""
    return sessions().capacity


def set_cache_size(size: int) -> None:
    """Keep at most ``size`` sessions (the least recently used go first)."""
    sessions().resize(size)


def cache_stats() -> CacheStats:
    return sessions().stats()
