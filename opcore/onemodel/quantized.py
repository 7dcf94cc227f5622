"""What the graph runtimes' ``linear_wq`` and ``embedding_wq`` kernels share (runtime-independent):
the arguments and sizes a model of the op is keyed on, ONNX Runtime's MatMulNBits block for a group,
the check of embedding_wq's indices, and both ops' kernels over a runtime's builders.

A one-op kernel keys its model on (K, N) as well as dtypes and ranks: MatMulNBits takes K and N as
attributes, and OpenVINO's decompression reshapes to (N, groups, group). In a partition both sizes
come from the weight (a constant, or an input of static size). ``embedding_wq``'s model is keyed on
the codes' bytes a row (its dequantization reshapes the rows to (..., groups, group)).

>>> nbits_block(4096), nbits_block(896), nbits_block(24)
(4096, 128, None)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy

from opcore.onemodel.builders import check_embedding_indices
from opcore.onemodel.op import ATTRIBUTE, TENSOR, OneModelKernel

__all__ = [
    "embedding_wq_kernel",
    "linear_wq_kernel",
    "nbits_block",
]

# linear_wq's arguments as the inner model kernels take them: the contract's, then K and N
_WQ_NAMES = ("x", "qweight", "scale", "zero", "b", "bits", "group_size", "in_features", "out_features")

# embedding_wq's arguments as the inner model kernels take them: the contract's, then the codes' bytes a row
_EMBEDDING_WQ_NAMES = ("input", "qweight", "scale", "zero", "bits", "group_size", "width")

# a backend's OneModelOp subclass's kernel_of (onnx_kernel, ov_kernel): (op, build, check=, names=, roles=)
KernelOf = Callable[..., OneModelKernel]


def nbits_block(group: int) -> int | None:
    """The block of MatMulNBits (a power of two >= 16) that a group is made of: the group itself, or
    its largest power-of-two divisor (each scale then repeats over group / block blocks); None if
    there is none (a group of 24).
    """
    block = group & -group if group > 0 else 0  # the largest power of two dividing group
    return block if block >= 16 else None


def linear_wq_kernel(kernel_of: KernelOf, build: Callable[..., Any], chain: Callable[..., Any]) -> Callable[..., Any]:
    """A graph runtime's ``linear_wq`` kernel: ``kernel_of`` (its OneModelOp's) over ``build(graph, x,
    qweight, scale, zero, b, bits, group_size, in_features, out_features)``, one model per (dtypes,
    ranks, bits, group, K, N), K and N read from x and qweight; ``prepare`` (resolve's) through that
    kernel's, and ``chain`` (a partition's builder, which reads K and N from the codes' static size)
    as given.
    """
    inner = kernel_of("linear_wq", build, names=_WQ_NAMES, roles=(TENSOR,) * 5 + (ATTRIBUTE,) * 4)

    def linear_wq(
        x: numpy.ndarray,
        qweight: numpy.ndarray,
        scale: numpy.ndarray,
        zero: numpy.ndarray | None,
        b: numpy.ndarray | None,
        bits: int,
        group_size: int,
    ) -> Any:
        """One model per (dtypes, ranks, bits, group, K, N)."""
        return inner(x, qweight, scale, zero, b, bits, group_size, x.shape[-1], qweight.shape[0])

    def prepare(args: tuple[Any, ...], constants: frozenset[str]) -> Any:
        return inner.prepare((*args, args[0].shape[-1], args[1].shape[0]), constants)

    linear_wq.prepare = prepare  # type: ignore[attr-defined]
    linear_wq.chain = chain  # type: ignore[attr-defined]
    return linear_wq


def _check_embedding_wq_indices(input: numpy.ndarray, qweight: numpy.ndarray, *rest: Any) -> None:
    """embedding_wq's indices within the table's rows (the codes' first dim), checked before a run as
    ``embedding``'s are (``check_embedding_indices``): a runtime's Gather would wrap or fail."""
    check_embedding_indices(input, qweight, None)


def embedding_wq_kernel(
    kernel_of: KernelOf, build: Callable[..., Any], chain: Callable[..., Any]
) -> Callable[..., Any]:
    """A graph runtime's ``embedding_wq`` kernel: ``kernel_of`` (its OneModelOp's) over
    ``build(graph, input, qweight, scale, zero, bits, group_size, width)`` (``width``: the codes' bytes
    a row), one model per (dtypes, ranks, bits, group, row width), the indices checked first (as
    ``check_embedding_indices`` checks ``embedding``'s); ``prepare`` (resolve's) through that
    kernel's, and ``chain`` (a partition's builder, which reads the row width from the codes' static
    size) as given.
    """
    gather = kernel_of(
        "embedding_wq",
        build,
        names=_EMBEDDING_WQ_NAMES,
        roles=(TENSOR,) * 4 + (ATTRIBUTE,) * 3,
        check=_check_embedding_wq_indices,
    )

    def embedding_wq(
        input: numpy.ndarray,
        qweight: numpy.ndarray,
        scale: numpy.ndarray,
        zero: numpy.ndarray | None,
        bits: int,
        group_size: int,
    ) -> Any:
        """One model per (dtypes, ranks, bits, group, row width)."""
        return gather(input, qweight, scale, zero, bits, group_size, qweight.shape[1])

    def prepare(args: tuple[Any, ...], constants: frozenset[str]) -> Any:
        return gather.prepare((*args, args[1].shape[1]), constants)

    embedding_wq.prepare = prepare  # type: ignore[attr-defined]
    embedding_wq.chain = chain  # type: ignore[attr-defined]
    return embedding_wq
