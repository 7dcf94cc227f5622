"""Denormal floats flushed to zero while a partition runs, and nowhere else.

onnxruntime's CPU exponential (MLAS, under Softmax) takes a slow path for each result below
float32's smallest normal number (e^-87.3): a softmax over scores that a mask sets to -inf (a
decoder's attention over a cache whose slots are mostly empty or ahead of the query) is 8-9x slower
than over the same scores unmasked. Measured on a 2-core AMX Xeon, 1 thread: Softmax over (1, 2, 7,
2049) with all but 130 scores -inf, 123 us; with the flags below, 14 us. A 135M decoder's
128-token prompt at max_length 2048 took 910 ms on onnxruntime and 592 ms flushed, its decode step
62.0 and 60.6 ms (bench/denormals.py; docs/benchmarks.md, forty-first session).

The flags are the CPU's (MXCSR's flush-to-zero and denormals-are-zero) and belong to a thread.
onnxruntime's remedy, the session option ``session.set_denormal_as_zero``, sets them on the
session's pool threads and, where the session is the process's first, for good on the thread that
creates it (the caller's torch and numpy would flush from then on: a saved plan loaded first in a
process), but not for a run on the caller's thread, which is where a one-thread run happens. So a
partition's session is made with the option and the creating thread's flags are given back
(``made``), and each run sets the calling thread's flags for itself only (``run``): the caller's
numerics never change (every session opcore makes goes through ``made``: a process's first session
made without the option clears the creating thread's flush-to-zero flag, which a caller who set
``torch.set_flush_denormal(True)`` would lose). Results differ from onnxruntime's default only where a value below
1.2e-38 became 0. Not for a partition holding float16 values (AVX512-FP16 flushes float16's
denormals, up to 6.1e-5, too), nor for one-op sessions (opcore.run keeps onnxruntime's numerics).
``OPCORE_ORT_DENORMALS=keep`` keeps onnxruntime's default everywhere; ``opcore doctor`` says which.
The flags are set through torch (``torch.set_flush_denormal``, both flags at once), which this module
never imports: in a process without torch loaded (a partition loaded and run on its own, with
numpy), or on a CPU without the flags, nothing is flushed.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["DENORMALS", "flushes", "made", "misread", "run", "wanted"]

DENORMALS = "OPCORE_ORT_DENORMALS"  # "keep": onnxruntime's default (denormals computed)

_T = TypeVar("_T")
# the flags act on double arithmetic as on float32's (SSE), and a Python float's product is one
_NORMAL = 1e-300  # times 1e-10: a denormal result, 0 under flush-to-zero
_DENORMAL = 5e-324  # the smallest double, a denormal: times 1e300 a normal result, 0 under denormals-are-zero
_OFF, _ON = (False, False), (True, True)


def wanted() -> bool:
    """Whether partitions flush: unless ``OPCORE_ORT_DENORMALS=keep``. Any other value than keep or
    flush keeps onnxruntime's default too, with a warning (once per value) naming it: a setting
    nobody can read is not taken as a wish to flush."""
    value = os.environ.get(DENORMALS, "")
    problem = misread(value)
    if problem is not None:
        if value not in _warned:
            _warned.add(value)
            warnings.warn(problem, UserWarning, stacklevel=2)
        return False
    return value != "keep"


def misread(value: str) -> str | None:
    """What is wrong with ``value`` as ``OPCORE_ORT_DENORMALS`` (None: nothing)."""
    if value in ("", "keep", "flush"):
        return None
    return (
        f"{DENORMALS}={value!r} is neither 'keep' (onnxruntime's default: denormals computed) nor 'flush' "
        "(opcore's default): onnxruntime's default is kept. Fix: unset it, or set it to keep or flush."
    )


_warned: set[str] = set()


def flushes(dtypes: Iterable[Any]) -> bool:
    """Whether a partition whose values have these dtypes (opcore DTypes) runs flushed: wanted, torch
    can set the flags, and no value is float16."""
    if not wanted() or any(getattr(dtype, "name", "") == "FLOAT16" for dtype in dtypes):
        return False
    return _setter() is not None


def flags() -> tuple[bool, bool]:
    """(flush-to-zero, denormals-are-zero) of the calling thread, read off two products."""
    return _NORMAL * 1e-10 == 0.0, _DENORMAL * 1e300 == 0.0


def made(make: Callable[[], _T]) -> _T:
    """``make()`` (a session built with ``session.set_denormal_as_zero``), the calling thread's flags
    as they were before it."""
    before = flags()
    try:
        return make()
    finally:
        if before in (_OFF, _ON) and flags() != before:
            setter = _setter()
            if setter is not None:
                setter(before[0])


def run(call: Callable[..., _T], *args: Any) -> _T:
    """``call(*args)`` with the calling thread's denormals flushed, its flags as they were after.
    A thread that flushes already, or has only one of the two flags (which torch cannot set apart),
    runs as it is."""
    setter = _setter()
    if setter is None or flags() != _OFF:
        return call(*args)
    setter(True)
    try:
        return call(*args)
    finally:
        setter(False)


_found: list[Callable[[bool], bool] | None] = []


def _setter() -> Callable[[bool], bool] | None:
    """``torch.set_flush_denormal`` where torch is loaded and the CPU has the flags; else None. Never
    imports torch (a partition loaded and run on its own takes numpy alone, and imports no torch):
    until a process loads it, nothing is flushed. Found once torch is there, by setting both flags
    and giving them back (a thread holding one flag already shows the CPU has them: not tried then,
    as one flag could not be given back)."""
    if not _found:
        torch = sys.modules.get("torch")
        if torch is None:
            return None  # not kept: torch may be loaded later
        setter = getattr(torch, "set_flush_denormal", None)
        before = flags()
        if setter is not None and before in (_OFF, _ON):
            if not setter(True):  # False: a CPU without the flags
                setter = None
            elif before == _OFF:
                setter(False)
        _found.append(setter)
    return _found[0]
