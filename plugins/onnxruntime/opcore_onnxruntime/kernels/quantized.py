"""Weight-only quantized linear as ``com.microsoft.MatMulNBits``; ``embedding_wq`` as a Gather of the
codes and scales, dequantized in the graph (only the rows picked).

The contract's layout is MatMulNBits' own: the codes (N, K * bits / 8) are reshaped to (N, blocks,
block * bits / 8), the scales and zero points (N, groups) flattened (repeated over the blocks of a
group when a group is not a power of two, opcore.onemodel.quantized.nbits_block); zero points go in
as uint8, one a byte for 8 bits and packed two a byte for 4 bits (in the graph, folded for constant
ones: float zero points would send MatMulNBits to a path ~500x slower); no
zero point: MatMulNBits' default middle code (128 or 8), the contract's symmetric codes. The bias
is MatMulNBits' own input (onnxruntime >= 1.20; one Add node fewer per linear: a 0.5B Qwen2 int4
decode step 2-3 % faster on a 2-vCPU EPYC). float16 runs in float32 inside the graph.

``accuracy_level`` (``OPCORE_ORT_WQ_ACCURACY`` 0-4 when the kernel is first imported, default
``ACCURACY_LEVEL`` = 4): 4 lets the CPU
kernel quantize x per block to int8 and multiply in integers (as onnxruntime-genai's CPU models do):
1x4096 @ 4096x4096 int8, 1 thread, 0.8-1.5 ms against 120-260 ms at levels 0/1 (no packed kernel
for 8 bits there) and 2.5 ms for float32 F.linear (bench/quant.py). Its cost is x's rounding to 8
bits per block (relative ~2**-8 of the block's largest |x|), which the kit's tolerance for
``linear_wq`` covers; set 0 for float x.
"""

from __future__ import annotations

import os

import numpy

from opcore.extend import ArgumentError, embedding_wq_kernel, group_of, linear_wq_kernel, nbits_block
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import F32, I32, finish
from opcore_onnxruntime.session import onnx_kernel

__all__ = [
    "ACCURACY",
    "ACCURACY_ENV",
    "ACCURACY_LEVEL",
    "accuracy_level",
    "build_embedding_wq",
    "build_linear_wq",
    "embedding_wq",
    "linear_wq",
]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = ("embedding_wq", "linear_wq")

ACCURACY_ENV = "OPCORE_ORT_WQ_ACCURACY"
ACCURACY_LEVEL = 4


def accuracy_level() -> int:
    """``OPCORE_ORT_WQ_ACCURACY`` (0-4) or 4; anything else is an ArgumentError naming the variable."""
    text = os.environ.get(ACCURACY_ENV, "").strip()
    if not text:
        return ACCURACY_LEVEL
    if text not in ("0", "1", "2", "3", "4"):
        raise ArgumentError(
            op="linear_wq",
            arg=ACCURACY_ENV,
            expected="MatMulNBits' accuracy_level 0-4 (0: unset, 1: float32, 4: int8 activations)",
            found=repr(text),
            fix=f"unset {ACCURACY_ENV} for the default ({ACCURACY_LEVEL})",
        )
    return int(text)


# read once, when the kernel module is first imported (the sessions it builds are cached per signature)
ACCURACY = accuracy_level()


def _per_block(g: Graph, values: Value, repeat: int, dtype: numpy.dtype = F32) -> Value:
    """(N, groups) -> (N * groups * repeat,) as ``dtype``, each group's value repeated over its blocks."""
    flat = g.cast(values, dtype)
    if repeat > 1:
        flat = g.op("Unsqueeze", flat, g.ints([2]), rank=3)
        flat = g.op("Expand", flat, g.op("Concat", g.shape(values), g.ints([repeat]), axis=0, rank=1), rank=3)
    return g.op("Reshape", flat, g.ints([-1]), rank=1)


def _nibbles(g: Graph, zeros: Value, rows: int, blocks: int) -> Value:
    """4-bit zero points (N * blocks,) uint8, one a byte, packed two a byte per row as MatMulNBits
    wants them (row-padded to whole bytes, the even block in the low nibble). Float zero points would
    do without packing, but send MatMulNBits to its slow path (418 ms against 0.77 ms measured at
    1x4096x4096); for constant zero points ONNX Runtime folds these nodes into an initializer."""
    wide = g.op("Reshape", g.cast(zeros, I32), g.ints([rows, blocks]), rank=2)
    if blocks % 2:
        wide = g.op("Pad", wide, g.ints([0, 0, 0, 1]), rank=2)
    pairs = g.op("Reshape", wide, g.ints([rows, (blocks + 1) // 2, 2]), rank=3)
    low = g.op("Slice", pairs, g.ints([0]), g.ints([1]), g.ints([2]), rank=3)
    high = g.op("Slice", pairs, g.ints([1]), g.ints([2]), g.ints([2]), rank=3)
    packed = g.op("Add", low, g.op("Mul", high, g.const(numpy.asarray(16, dtype=I32))))
    return g.op("Reshape", g.cast(packed, numpy.dtype(numpy.uint8)), g.ints([-1]), rank=1)


def build_linear_wq(
    g: Graph,
    x: Value,
    qweight: Value,
    scale: Value,
    zero: Value | None,
    b: Value | None,
    bits: int,
    group_size: int,
    in_features: int,
    out_features: int,
) -> Value:
    group = group_of(group_size, in_features)
    block = nbits_block(group)
    if block is None or in_features == 0:
        raise ValueError(f"MatMulNBits needs blocks of a power of two >= 16; a group of {group} has none")
    repeat = group // block
    codes = g.op("Reshape", qweight, g.ints([out_features, in_features // block, block * bits // 8]), rank=3)
    inputs: list[Value | None] = [g.cast(x, F32), codes, _per_block(g, scale, repeat), None, None, None]
    if zero is not None:
        zeros = _per_block(g, zero, repeat, zero.dtype)
        inputs[3] = zeros if bits == 8 else _nibbles(g, zeros, out_features, in_features // block)
    if b is not None:
        # MatMulNBits' own bias input (one node fewer per linear with a bias); its shape inference
        # wants the size N known, which a kernel's graph input of symbolic size is not: the Reshape
        # says it (folded away for a partition's constant bias)
        inputs[5] = g.op("Reshape", g.cast(b, F32), g.ints([out_features]), rank=1)
    out = g.op(
        "MatMulNBits",
        *inputs,
        domain="com.microsoft",
        K=in_features,
        N=out_features,
        bits=bits,
        block_size=block,
        accuracy_level=ACCURACY,
    )
    return finish(g, out, x.dtype)


def _chain(
    g: Graph, x: Value, qweight: Value, scale: Value, zero: Value | None, b: Value | None, bits: int, group_size: int
) -> Value:
    """In a partition: K and N from the codes' static sizes (a constant, or an input of fixed size)."""
    rows, width = g.size(qweight, 0), g.size(qweight, 1)
    if rows is None or width is None:
        raise ValueError("MatMulNBits needs the static shape of the quantized weight")
    return build_linear_wq(g, x, qweight, scale, zero, b, bits, group_size, width * 8 // bits, rows)


linear_wq = linear_wq_kernel(onnx_kernel, build_linear_wq, _chain)


def build_embedding_wq(
    g: Graph, input: Value, qweight: Value, scale: Value, zero: Value | None, bits: int, group_size: int, width: int
) -> Value:
    """Gather the rows' codes (and scales, zero points), unpack 4-bit pairs, (code - zero) * scale per
    group; ``width``: the codes' bytes a row (K * bits / 8)."""
    k = width * 8 // bits
    group = group_of(group_size, k)
    rows_rank = None if input.rank is None else input.rank + 1
    grouped_rank = None if input.rank is None else input.rank + 2
    codes = g.op("Gather", qweight, input, axis=0, rank=rows_rank)
    if bits == 4:
        low = g.op("BitwiseAnd", codes, g.const(numpy.asarray(15, dtype=numpy.uint8)))
        high = g.op("BitShift", codes, g.const(numpy.asarray(4, dtype=numpy.uint8)), direction="RIGHT")
        pair = [g.op("Unsqueeze", half, g.ints([-1]), rank=grouped_rank) for half in (low, high)]
        codes = g.op("Concat", *pair, axis=-1, rank=grouped_rank)
    rows = g.shape(input)
    grouped = g.op("Concat", rows, g.ints([k // group, group]), axis=0, rank=1)
    values = g.op("Reshape", g.cast(codes, F32), grouped, rank=grouped_rank)
    if zero is None:
        values = g.op("Sub", values, g.const(numpy.asarray(1 << (bits - 1), dtype=F32)))
    else:
        zeros = g.cast(g.op("Gather", zero, input, axis=0, rank=rows_rank), F32)
        values = g.op("Sub", values, g.op("Unsqueeze", zeros, g.ints([-1]), rank=grouped_rank))
    scales = g.cast(g.op("Gather", scale, input, axis=0, rank=rows_rank), F32)
    values = g.op("Mul", values, g.op("Unsqueeze", scales, g.ints([-1]), rank=grouped_rank))
    out = g.op("Reshape", values, g.op("Concat", rows, g.ints([k]), axis=0, rank=1), rank=rows_rank)
    return finish(g, out, scale.dtype)


def _chain_gather(
    g: Graph, input: Value, qweight: Value, scale: Value, zero: Value | None, bits: int, group_size: int
) -> Value:
    """In a partition: the row width from the codes' static size."""
    width = g.size(qweight, 1)
    if width is None:
        raise ValueError("the dequantization needs the static width of the quantized table")
    return build_embedding_wq(g, input, qweight, scale, zero, bits, group_size, width)


embedding_wq = embedding_wq_kernel(onnx_kernel, build_embedding_wq, _chain_gather)
