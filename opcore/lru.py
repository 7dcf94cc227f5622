"""A bounded, thread-safe least-recently-used cache, for backends that compile models per signature.

Lookups take one lock for a dict read and a move to the end (well under a microsecond). A value
is built outside the lock, so a slow build (compiling a model) never blocks lookups of other keys;
threads asking for the same missing key wait for the first one's build instead of repeating it.

>>> cache = LRUCache(2, name="demo")
>>> cache.get_or_create("a", lambda: 1), cache.get_or_create("b", lambda: 2), cache.get_or_create("c", lambda: 3)
(1, 2, 3)
>>> cache.get("a") is None, len(cache), cache.stats().evictions
(True, 2, 1)
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from opcore.errors import ArgumentError

if TYPE_CHECKING:
    from opcore.cachestats import CacheStats

__all__ = ["CacheStats", "LRUCache", "capacity_from_env"]


def __getattr__(name: str) -> Any:
    # CacheStats lives in its own module, imported when a cache's stats are first asked for (the
    # doctor): the caches are created while the first opcore.run loads the plugins, and making a
    # dataclass there costs ~0.5-1 ms (issue 15)
    if name == "CacheStats":
        from opcore.cachestats import CacheStats

        return CacheStats
    raise AttributeError(f"module 'opcore.lru' has no attribute {name!r}")


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Pending:
    """A build in progress: other threads asking for the same key wait on it."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None


class LRUCache(Generic[K, V]):
    """At most ``capacity`` values; the least recently used one goes first.

    An evicted value is only dropped from the cache: a thread still holding it keeps using it.
    """

    __slots__ = ("_data", "_evictions", "_hits", "_lock", "_misses", "_pending", "capacity", "name")

    def __init__(self, capacity: int, *, name: str = "") -> None:
        self.name = name
        self.capacity = _checked(capacity, name)
        self._data: OrderedDict[K, V] = OrderedDict()
        self._pending: dict[K, _Pending] = {}
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None.

        Lock-free: OrderedDict's get and move_to_end are each one atomic C call, and a key evicted
        between the two is simply not moved. The hit counter may miss a count under contention.
        """
        data = self._data
        value = data.get(key)
        if value is not None:
            try:
                data.move_to_end(key)
            except KeyError:  # evicted by another thread just now
                pass
            self._hits += 1
        return value

    def get_or_create(self, key: K, build: Callable[[], V]) -> V:
        """The value for ``key``, built by ``build()`` if missing (once, whatever the threads).

        An exception raised by ``build`` reaches every caller waiting for that key; nothing is cached.
        """
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
                self._hits += 1
                return value
            pending = self._pending.get(key)
            owner = pending is None
            if pending is None:
                pending = self._pending[key] = _Pending()
                self._misses += 1
        if not owner:
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
            return pending.value  # type: ignore[return-value]
        try:
            value = build()
        except BaseException as error:
            pending.error = error
            with self._lock:
                del self._pending[key]
            pending.done.set()
            raise
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)
                self._evictions += 1
            del self._pending[key]
        pending.value = value
        pending.done.set()
        return value

    def resize(self, capacity: int) -> None:
        """Change the bound; the least recently used values go if there are too many now."""
        capacity = _checked(capacity, self.name)
        with self._lock:
            self.capacity = capacity
            while len(self._data) > capacity:
                self._data.popitem(last=False)
                self._evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def stats(self) -> CacheStats:
        from opcore.cachestats import CacheStats

        with self._lock:
            return CacheStats(self.name, len(self._data), self.capacity, self._hits, self._misses, self._evictions)


def _checked(capacity: object, name: str) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ArgumentError(
            arg="capacity",
            expected=f"a positive int for the {name or 'LRU'} cache size",
            found=repr(capacity),
        )
    return capacity


def capacity_from_env(variable: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """The cache size set in the environment variable ``variable``, else ``default``.

    >>> capacity_from_env("OPCORE_DEMO_CACHE_SIZE", 64, {"OPCORE_DEMO_CACHE_SIZE": "8"})
    8
    """
    text = (os.environ if environ is None else environ).get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ArgumentError(
            arg=variable,
            expected="a positive int (the number of cached models)",
            found=repr(text),
            fix=f"set {variable} to e.g. {default}, or unset it",
        )
    return value
