"""A backend's bounded cache of models, sized from an environment variable on first use.

>>> cache = ModelCache("demo models", "OPCORE_DEMO_CACHE_SIZE", 8)
>>> cache.size()
8
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from opcore.lru import LRUCache, capacity_from_env

if TYPE_CHECKING:
    from opcore.cachestats import CacheStats

__all__ = ["ModelCache"]


class ModelCache:
    """A backend's bounded cache of models, one per signature, created on first use with its
    size from the environment variable ``env_var`` (else ``default``).

    >>> cache = ModelCache("demo models", "OPCORE_DEMO_CACHE_SIZE", 8)
    >>> cache.resize(4); cache.size()
    4
    """

    __slots__ = ("_lock", "_lru", "default", "env_var", "name")

    def __init__(self, name: str, env_var: str, default: int) -> None:
        self.name = name
        self.env_var = env_var
        self.default = default
        self._lock = threading.Lock()
        self._lru: LRUCache | None = None

    def lru(self) -> LRUCache:
        """The process's cache, created (reading the environment) on first use."""
        if self._lru is None:
            with self._lock:
                if self._lru is None:
                    self._lru = LRUCache(capacity_from_env(self.env_var, self.default), name=self.name)
        return self._lru

    def check_setting(self) -> None:
        """Raise ArgumentError naming the variable when its value is not a positive int; the backend's
        is_available() calls this, so a bad value fails the plugin at load time, not every call later.
        """
        capacity_from_env(self.env_var, self.default)

    def size(self) -> int:
        """How many models the cache keeps."""
        return self.lru().capacity

    def resize(self, size: int) -> None:
        """Keep at most ``size`` models (the least recently used go first)."""
        self.lru().resize(size)

    def stats(self) -> CacheStats:
        return self.lru().stats()

    def describe(self) -> str:
        """The doctor's line: the counters and where the size comes from."""
        setting = os.environ.get(self.env_var)
        source = f"{self.env_var}={setting}" if setting else f"default {self.default}; set {self.env_var} to change"
        return f"{self.stats().describe()} [{source}]"
