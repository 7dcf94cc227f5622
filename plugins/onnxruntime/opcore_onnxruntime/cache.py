"""The bounded cache of InferenceSessions, one per (op, attributes, dtypes, ranks).

Its size comes from ``OPCORE_ORT_CACHE_SIZE`` (default 128) when first used, or from
``set_cache_size``. This module does not import onnxruntime.

>>> from opcore_onnxruntime import cache
>>> cache.set_cache_size(32); cache.cache_size()
32
"""

from __future__ import annotations

from opcore.extend import ModelCache

__all__ = ["DEFAULT_CACHE_SIZE", "ENV_VAR", "SESSIONS", "cache_size", "cache_stats", "sessions", "set_cache_size"]

ENV_VAR = "OPCORE_ORT_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 128

SESSIONS = ModelCache("onnxruntime sessions", ENV_VAR, DEFAULT_CACHE_SIZE)

sessions = SESSIONS.lru  # the process's LRUCache of sessions, created (reading the environment) on first use
cache_size = SESSIONS.size
set_cache_size = SESSIONS.resize
cache_stats = SESSIONS.stats
