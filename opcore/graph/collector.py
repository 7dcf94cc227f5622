"""Python's automatic garbage collection paused while torch.export traces a model.

An export makes and keeps hundreds of thousands of container objects (fake tensors, graph nodes,
symbolic sizes, their metadata) and frees few of them in cycles; CPython's collector counts those
allocations and, every so often, walks every object the process holds to find none. For a 135M
decoder's prompt that was three full collections of 0.21-0.35 s each over a heap of ~350,000 objects
and more, beside many young ones: about 1.0 s of a 6.5 s export on a 2-vCPU EPYC (5.5 s paused, three
runs each; the full collections during it found 39-1,077 objects). Mercurial pauses collection
around its large parses for the same reason (``util.nogc``).

``paused()`` turns automatic collection off for the block and back on after it where it was on;
an explicit ``gc.collect()`` still runs. Blocks nest and may overlap across threads: collection
comes back when the last one ends. A process that turned collection off itself keeps it off.

>>> import gc
>>> with paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]


class _Pause:
    """How many blocks hold the collector paused, and whether it was on before the first."""

    lock = threading.Lock()
    holders = 0
    was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """Automatic garbage collection off for the block (see the module's text)."""
    with _Pause.lock:
        if _Pause.holders == 0:
            _Pause.was_enabled = gc.isenabled()
            gc.disable()
        _Pause.holders += 1
    try:
        yield
    finally:
        with _Pause.lock:
            _Pause.holders -= 1
            if _Pause.holders == 0 and _Pause.was_enabled:
                gc.enable()
