"""The bounded, thread-safe LRU cache the graph-runtime backends keep their models in."""

from __future__ import annotations

import threading
import time

import pytest

from opcore.errors import ArgumentError
from opcore.lru import LRUCache, capacity_from_env


def test_keeps_at_most_capacity_and_evicts_the_least_recently_used():
    cache = LRUCache(2, name="test")
    cache.get_or_create("a", lambda: 1)
    cache.get_or_create("b", lambda: 2)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.get_or_create("c", lambda: 3)
    assert "b" not in cache
    assert cache.get("a") == 1
    assert cache.get("c") == 3
    assert len(cache) == 2
    stats = cache.stats()
    assert (stats.size, stats.capacity, stats.misses, stats.evictions) == (2, 2, 3, 1)
    assert stats.hits == 3
    assert stats.describe() == "2/2 entries (hits 3, misses 3, evictions 1)"


def test_get_or_create_returns_the_cached_value_without_building():
    cache = LRUCache(4)
    assert cache.get_or_create("k", lambda: "first") == "first"
    assert cache.get_or_create("k", lambda: pytest.fail("built twice")) == "first"
    assert cache.get("missing") is None


def test_concurrent_requests_for_one_key_build_it_once():
    cache = LRUCache(4)
    builds = []
    started = threading.Event()

    def build() -> object:
        builds.append(threading.get_ident())
        started.set()
        time.sleep(0.05)  # the others arrive while this build runs
        return object()

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_create("k", build))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1
    assert len(results) == 8 and all(r is results[0] for r in results)


def test_a_failing_build_reaches_every_waiter_and_caches_nothing():
    cache = LRUCache(4)
    gate = threading.Event()

    def build() -> object:
        gate.wait(1)
        raise RuntimeError("compile failed")

    errors = []

    def ask() -> None:
        try:
            cache.get_or_create("k", build)
        except RuntimeError as error:
            errors.append(error)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    gate.set()
    for thread in threads:
        thread.join()
    assert len(errors) == 3 and all(str(e) == "compile failed" for e in errors)
    assert "k" not in cache
    assert cache.get_or_create("k", lambda: 5) == 5  # a later call builds again


def test_eviction_under_threads_keeps_the_bound():
    cache = LRUCache(3)

    def work(offset: int) -> None:
        for i in range(200):
            key = (offset + i) % 7
            assert cache.get_or_create(key, lambda key=key: key * 10) == key * 10

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) <= 3
    assert cache.stats().evictions > 0


def test_resize_drops_the_least_recently_used():
    cache = LRUCache(3)
    for key in "abc":
        cache.get_or_create(key, lambda key=key: key)
    cache.resize(1)
    assert cache.capacity == 1 and len(cache) == 1 and "c" in cache
    cache.clear()
    assert len(cache) == 0


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "8"])
def test_capacity_must_be_a_positive_int(capacity):
    with pytest.raises(ArgumentError, match="positive int"):
        LRUCache(capacity, name="demo")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="positive int"):
        LRUCache(2).resize(capacity)  # type: ignore[arg-type]


def test_capacity_from_env():
    assert capacity_from_env("OPCORE_X_CACHE_SIZE", 64, {}) == 64
    assert capacity_from_env("OPCORE_X_CACHE_SIZE", 64, {"OPCORE_X_CACHE_SIZE": " 8 "}) == 8
    assert capacity_from_env("OPCORE_X_CACHE_SIZE", 64, {"OPCORE_X_CACHE_SIZE": ""}) == 64
    for bad in ("0", "-3", "many"):
        with pytest.raises(ArgumentError) as caught:
            capacity_from_env("OPCORE_X_CACHE_SIZE", 64, {"OPCORE_X_CACHE_SIZE": bad})
        assert "OPCORE_X_CACHE_SIZE" in str(caught.value) and "Fix:" in str(caught.value)
