"""A snapshot of an LRU cache's counters (``LRUCache.stats()``, for the doctor); its own module so
that creating a cache does not make this dataclass (``opcore.lru``'s ``CacheStats`` is this one).

>>> CacheStats("demo", 3, 64, 120, 3, 0).describe()
'3/64 entries (hits 120, misses 3, evictions 0)'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CacheStats"]


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A snapshot of a cache's counters (for the doctor)."""

    name: str
    size: int
    capacity: int
    hits: int
    misses: int
    evictions: int

    def describe(self) -> str:
        """``"3/64 entries (hits 120, misses 3, evictions 0)"``"""
        return (
            f"{self.size}/{self.capacity} entries (hits {self.hits}, misses {self.misses}, evictions {self.evictions})"
        )
