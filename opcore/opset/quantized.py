"""Weight-only quantized contracts: ``linear_wq``, a linear whose weight is stored as 8-bit or 4-bit
codes with a scale (and optionally a zero point) per output channel or per group of inputs; and
``embedding_wq``, the rows of a table stored the same way (a decoder's token table, int8 per row as
NNCF and ONNX Runtime GenAI keep it; tied to the lm_head, one set of codes serves both).

The layout (docs/quantized.md), for x (..., K) and N output features:

- ``qweight`` uint8: 8 bits, (N, K), one code per byte; 4 bits, (N, K // 2), two codes per byte,
  the even input index in the low nibble (ONNX Runtime's MatMulNBits and OpenVINO's u4 order);
- ``scale`` floating, (N, K // group); ``zero`` uint8, (N, K // group), one code per byte (None:
  symmetric, the middle code 2**(bits-1), 128 or 8);
- the weight is ``(code - zero) * scale`` of its group; ``group_size=-1``: one group per row (per
  output channel).

>>> from opcore.types import TensorMeta, DType
>>> x, q = TensorMeta((2, 64), DType.FLOAT32), TensorMeta((5, 32), DType.UINT8)
>>> LINEAR_WQ.meta(x, q, TensorMeta((5, 2), DType.FLOAT32), None, None, 4, 32).shape
(2, 5)
"""

from __future__ import annotations

from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.meta import (
    FLOATING,
    check_dtype,
    check_floating,
    check_min_rank,
    check_rank,
    shape_text,
)
from opcore.opset.nn import INDEX_DTYPES
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="quantized")

__all__ = ["BITS", "CONTRACTS", "EMBEDDING_WQ", "LINEAR_WQ", "embedding_wq_meta", "group_of", "linear_wq_meta"]

BITS = (4, 8)  # the code widths the contract defines
_UINT8 = frozenset({DType.UINT8})


def group_of(group_size: int, in_features: int) -> int:
    """The number of inputs that share one scale: ``group_size``, or the whole row for -1.

    >>> group_of(-1, 4096), group_of(128, 4096)
    (4096, 128)
    """
    return in_features if group_size == -1 else group_size


def linear_wq_meta(
    x: TensorMeta,
    qweight: TensorMeta,
    scale: TensorMeta,
    zero: TensorMeta | None,
    b: TensorMeta | None,
    bits: int,
    group_size: int,
) -> TensorMeta:
    """x (..., K) floating; qweight uint8 (N, K * bits / 8); scale floating and zero uint8, both
    (N, K / group); b (N,) of x's dtype; bits 4 or 8; group_size -1 or a positive divisor of K."""
    check_min_rank("x", x, 1, what="a tensor of at least 1 dimension (..., in_features)")
    check_floating("x", x)
    if bits not in BITS:
        raise ArgumentError(
            arg="bits",
            expected="4 or 8",
            found=repr(bits),
            fix="quantize the weight with opcore.quantize.quantize_weight(w, bits=8) or bits=4",
        )
    k = x.shape[-1]
    if group_size != -1 and group_size <= 0:
        raise ArgumentError(
            arg="group_size", expected="-1 (per output channel) or a positive group", found=repr(group_size)
        )
    group = group_of(group_size, k)
    if group and k % group:
        raise ShapeError(
            arg="group_size",
            expected=f"a group size that divides in_features = {k} (the last size of 'x' {shape_text(x.shape)})",
            found=f"group_size={group_size}",
            fix="pick a divisor of in_features (32, 64, 128 for most models) or -1 for one group per row",
        )
    if bits == 4 and k % 2:
        raise ShapeError(
            arg="x",
            expected="an even in_features for 4-bit codes (two codes per byte)",
            found=f"in_features = {k}",
            fix="use bits=8 for this weight",
        )
    n = _check_codes(qweight, scale, zero, bits, k, group)
    if b is not None:
        if b.shape != (n,):
            raise ShapeError(arg="b", expected=f"shape ({n},)", found=f"shape {shape_text(b.shape)}")
        if b.dtype != x.dtype:
            raise DTypeError(arg="b", expected=f"the dtype of 'x' ({x.dtype.value})", found=b.dtype.value)
    return TensorMeta((*x.shape[:-1], n), x.dtype, x.device)


def _check_codes(qweight: TensorMeta, scale: TensorMeta, zero: TensorMeta | None, bits: int, k: int, group: int) -> int:
    """The codes' layout for K = ``k`` inputs in groups of ``group``; returns N (the rows)."""
    check_rank("qweight", qweight, 2, what="a 2-D uint8 tensor (out_features, in_features * bits / 8)")
    check_dtype("qweight", qweight, _UINT8, fix="pass the codes as packed by opcore.quantize.quantize_weight")
    n = qweight.shape[0]
    if qweight.shape[1] != k * bits // 8:
        raise ShapeError(
            arg="qweight",
            expected=f"shape ({n}, {k * bits // 8}): {k} inputs at {bits} bits, {8 // bits} code(s) per byte",
            found=f"shape {shape_text(qweight.shape)}",
            fix="pass the weight as (out_features, in_features) codes packed along in_features",
        )
    groups = (n, k // group if group else 0)
    check_rank("scale", scale, 2, what=f"a 2-D tensor (out_features, in_features / group) = {shape_text(groups)}")
    if not scale.dtype.is_floating:
        raise DTypeError(arg="scale", expected="a floating dtype", found=scale.dtype.value)
    if scale.shape != groups:
        raise ShapeError(
            arg="scale",
            expected=f"shape {shape_text(groups)}: one scale per output feature and group of {group} inputs",
            found=f"shape {shape_text(scale.shape)}",
        )
    if zero is not None:
        check_dtype("zero", zero, _UINT8, fix="pass zero points as uint8 codes, one per byte")
        if zero.shape != groups:
            raise ShapeError(
                arg="zero", expected=f"shape {shape_text(groups)}, as 'scale'", found=shape_text(zero.shape)
            )
    return n


LINEAR_WQ = define(
    "linear_wq(Tensor x, Tensor qweight, Tensor scale, Tensor? zero=None, Tensor? b=None, *, int bits=8, "
    "int group_size=-1) -> Tensor",
    meta=linear_wq_meta,
    dtypes=FLOATING,
    doc="x @ W.T + b with W = (qweight - zero) * scale per group of inputs: weight-only int8 (per output "
    "channel or grouped) or int4 (grouped, two codes per byte); zero None: symmetric (2**(bits-1)). "
    "Quantize with opcore.quantize.quantize_weight; docs/quantized.md has the layout.",
    tags=("linear", "quantized"),
)


def embedding_wq_meta(
    input: TensorMeta, qweight: TensorMeta, scale: TensorMeta, zero: TensorMeta | None, bits: int, group_size: int
) -> TensorMeta:
    """int32/int64 indices; qweight uint8 (rows, dim * bits / 8); scale floating and zero uint8, both
    (rows, dim / group); output indices.shape + (dim,) in the scale's dtype."""
    check_dtype("input", input, INDEX_DTYPES, fix="convert the indices with .astype('int64')")
    check_rank("qweight", qweight, 2, what="a 2-D uint8 tensor (num_embeddings, embedding_dim * bits / 8)")
    check_dtype("qweight", qweight, _UINT8, fix="pass the codes as packed by opcore.quantize.quantize_weight")
    if bits not in BITS:
        raise ArgumentError(
            arg="bits",
            expected="4 or 8",
            found=repr(bits),
            fix="quantize the table with opcore.quantize.quantize_weight(table, bits=8) or bits=4",
        )
    k = qweight.shape[1] * 8 // bits
    if group_size != -1 and group_size <= 0:
        raise ArgumentError(
            arg="group_size", expected="-1 (one group per row) or a positive group", found=repr(group_size)
        )
    group = group_of(group_size, k)
    if group and k % group:
        raise ShapeError(
            arg="group_size",
            expected=f"a group size that divides embedding_dim = {k} ('qweight' {shape_text(qweight.shape)} "
            f"at {bits} bits)",
            found=f"group_size={group_size}",
            fix="pass the group_size the table was quantized with",
        )
    _check_codes(qweight, scale, zero, bits, k, group)
    return TensorMeta((*input.shape, k), scale.dtype, scale.device)


EMBEDDING_WQ = define(
    "embedding_wq(Tensor input, Tensor qweight, Tensor scale, Tensor? zero=None, *, int bits=8, "
    "int group_size=-1) -> Tensor",
    meta=embedding_wq_meta,
    dtypes=FLOATING,
    doc="The rows of a table stored as codes, (qweight[input] - zero[input]) * scale[input] per group: "
    "embedding over a weight-only int8 or int4 table (opcore.quantize.quantize_weight's layout, the "
    "table's rows as output channels), in the scale's dtype.",
    tags=("indexing", "quantized"),
    dtype_arg="scale",
)

CONTRACTS: tuple[OpContract, ...] = (LINEAR_WQ, EMBEDDING_WQ)
