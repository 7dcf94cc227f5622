"""Whether a graph runtime may compile static models of a dynamic partition for the shapes it meets,
in the current thread or task.

A partition captured with dynamic dims runs the runtime's dynamic-shape model; OpenVINO's CPU plugin
computes some of those slower than a static model of the same shape, so its partitions compile a
static model for a shape called a third time (opcore_openvino.shapes). That compile stalls the call
that asks for it (a 135M decoder's prefill: 2.0-7.4 s over 31 layer partitions), once per shape.
A plan whose shapes never settle asks for none: ``capture_lm``'s prefill, whose prompt lengths vary
from call to call, and whose layer partitions ran their dynamic models as fast as static ones
(``PlanOptions.shape_compiles``); its capture then times the partitions that will run. A runtime
reads ``shape_compiles_allowed()`` when it compiles or loads a partition.

>>> shape_compiles_allowed()
True
>>> with shape_compiles(False):
...     shape_compiles_allowed()
False
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["shape_compiles", "shape_compiles_allowed"]

_ALLOWED: ContextVar[bool] = ContextVar("opcore_shape_compiles", default=True)


def shape_compiles_allowed() -> bool:
    """Whether a partition compiled or loaded now may compile static models for the shapes it meets."""
    return _ALLOWED.get()


@contextmanager
def shape_compiles(allowed: bool) -> Iterator[None]:
    """Within the block (this thread or task, and the workers that copy its context), partitions
    compiled or loaded may (True) or may not (False) compile static models of the shapes they meet."""
    token = _ALLOWED.set(bool(allowed))
    try:
        yield
    finally:
        _ALLOWED.reset(token)
