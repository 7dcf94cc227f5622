"""Whether a kernel's ``prepare`` may keep its own copy of a constant weight, in the current thread or task.

A kernel may prepare a constant in a layout of its own (the cpu backend packs a linear's weight for
oneDNN or MKL: a second copy of it, faster at some shapes). A plan whose weights are large asks for
none: ``capture_lm``'s prefill of a decoder above ``lm_capture.COPY_BYTES``, whose decode plan's
graph runtime holds a copy already (``PlanOptions.weight_copies``; at the 0.5B shape on a 2-vCPU
AVX-512 EPYC the packed prefill copies kept 1.9 GB for a prefill 6 % faster). A backend whose
kernels can run on the weight as given reads ``weight_copies_allowed()`` while preparing; a user's
explicit setting for the backend (``OPCORE_CPU_WEIGHTS``) wins. A resolved op prepared again after
an in-place update of its constants prepares under the setting it was first prepared under.

>>> weight_copies_allowed()
True
>>> with weight_copies(False):
...     weight_copies_allowed()
False
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["weight_copies", "weight_copies_allowed"]

_ALLOWED: ContextVar[bool] = ContextVar("opcore_weight_copies", default=True)


def weight_copies_allowed() -> bool:
    """Whether a kernel preparing a constant now may keep a copy of it in a layout of its own."""
    return _ALLOWED.get()


@contextmanager
def weight_copies(allowed: bool) -> Iterator[None]:
    """Within the block (this thread or task, and the workers that copy its context), kernels may
    (True) or may not (False) keep their own copies of the constants they prepare."""
    token = _ALLOWED.set(bool(allowed))
    try:
        yield
    finally:
        _ALLOWED.reset(token)
