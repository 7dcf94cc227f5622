"""Checking what a kernel returned against the contract's output metas.

A kernel is a plugin's code: it may return the wrong shape, another dtype, a list, None, or a
torch tensor to a numpy caller. The dispatcher checks the result on the first call of every
signature (and on every call under strict mode or ``OPCORE_CHECK=1``), so a violation becomes a
fallback or a ``KernelResultError`` naming the kernel, never a wrong answer handed to the caller.
The check reads metadata only (kind, dtype, shape, device type), never the data.

>>> from opcore.types import ArrayKind, DType, TensorMeta
>>> result_problem(numpy.zeros(3, "float64"), (TensorMeta((3,), DType.FLOAT32),), ArrayKind.NUMPY)
'returned float64[3], the contract says float32[3]'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy

from opcore.errors import KernelResultError
from opcore.types import ArrayKind, TensorMeta, is_torch_tensor

__all__ = ["checked", "listed", "result_error", "result_problem"]


def listed(selection: Any) -> bool:
    """True when the op returns one list of tensors (``-> Tensor[]``): its result is a tuple, whatever its length."""
    returns = selection.contract.schema.returns
    return len(returns) == 1 and returns[0].endswith("[]")


def result_problem(result: Any, outputs: tuple[TensorMeta, ...], kind: ArrayKind, listed: bool = False) -> str | None:
    """What is wrong with ``result`` for these output metas and the caller's array kind; None if nothing.

    listed: the op returns a list of tensors, which comes back as a tuple even of one.
    """
    if len(outputs) == 1 and not listed:
        values: tuple[Any, ...] = (result,)
    elif type(result) is not tuple or len(result) != len(outputs):
        return f"returned {_describe(result)}, the contract says a tuple of {len(outputs)} tensors"
    else:
        values = result
    for index, (value, meta) in enumerate(zip(values, outputs)):
        problem = _problem(value, meta, kind)
        if problem:
            return f"output {index}: {problem}" if len(outputs) > 1 else problem
    return None


def _problem(value: Any, meta: TensorMeta, kind: ArrayKind) -> str | None:
    expected = _text(meta.dtype.value, meta.shape)
    if kind is ArrayKind.NUMPY:
        if type(value) is not numpy.ndarray:  # subclasses (np.matrix, masked arrays) change semantics
            return f"returned {_describe(value)}, the contract says a numpy array {expected}"
        dtype = value.dtype
        name = dtype.name if dtype.isnative and dtype.kind != "O" else str(dtype)
    else:
        if not is_torch_tensor(value):
            return f"returned {_describe(value)}, the contract says a torch tensor {expected}"
        name = str(value.dtype).removeprefix("torch.")
        if value.device.type != meta.device.type.value:
            return f"returned a tensor on {value.device}, the contract says {meta.device}"
    shape = tuple(value.shape)
    if name != meta.dtype.value or (shape != meta.shape and not _matches(shape, meta.shape)):
        return f"returned {_text(name, shape)}, the contract says {expected}"
    return None


def _matches(shape: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """A negative size in a meta is a data-dependent one (aten.index with a mask): any size fits."""
    return len(shape) == len(expected) and all(e < 0 or s == e for s, e in zip(shape, expected))


def _text(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype}[{', '.join(map(str, shape))}]"


def _describe(value: Any) -> str:
    if isinstance(value, numpy.ndarray) or is_torch_tensor(value):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"a {type(value).__module__}.{type(value).__name__} {_text(dtype, tuple(value.shape))}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"


def result_error(op: str, title: str, source: str, problem: str) -> KernelResultError:
    """The error for a kernel whose result broke the contract; names the kernel and where it lives."""
    return KernelResultError(
        f"kernel {title} ({source}) {problem}",
        op=op,
        fix="this is a bug in the kernel's plugin: report it to its authors; meanwhile pin another backend "
        "(backend=...) or disable this one (OPCORE_DISABLE)",
    )


def checked(
    call: Callable[..., Any],
    op: str,
    title: str,
    source: str,
    outputs: tuple[TensorMeta, ...],
    kind: ArrayKind,
    listed: bool = False,
) -> Callable[..., Any]:
    """``call`` with its result checked on every call (strict mode, ``OPCORE_CHECK=1``)."""

    def checked_call(*args: Any) -> Any:
        result = call(*args)
        problem = result_problem(result, outputs, kind, listed)
        if problem is not None:
            raise result_error(op, title, source, problem)
        return result

    return checked_call
