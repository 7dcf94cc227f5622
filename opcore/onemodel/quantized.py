"""What the graph runtimes' ``linear_wq`` builders share (runtime-independent): the sizes a model of
the op is keyed on, and ONNX Runtime's MatMulNBits block for a group.

A one-op kernel keys its model on (K, N) as well as dtypes and ranks: MatMulNBits takes K and N as
attributes, and OpenVINO's decompression reshapes to (N, groups, group). In a partition both sizes
come from the weight (a constant, or an input of static size).

>>> nbits_block(4096), nbits_block(896), nbits_block(24)
(4096, 128, None)
"""

from __future__ import annotations

__all__ = ["WQ_NAMES", "nbits_block"]

# linear_wq's arguments as the inner model kernels take them: the contract's, then K and N
WQ_NAMES = ("x", "qweight", "scale", "zero", "b", "bits", "group_size", "in_features", "out_features")


def nbits_block(group: int) -> int | None:
    """The block of MatMulNBits (a power of two >= 16) that a group is made of: the group itself, or
    its largest power-of-two divisor (each scale then repeats over group / block blocks); None if
    there is none (a group of 24).
    """
    block = group & -group if group > 0 else 0  # the largest power of two dividing group
    return block if block >= 16 else None
