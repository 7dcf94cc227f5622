"""Shape contracts: transpose, permute, reshape, cat. Every dtype is accepted.

>>> from opcore.types import TensorMeta, DType
>>> RESHAPE.meta(TensorMeta((2, 3, 4), DType.BOOL), (4, -1)).shape
(4, 6)
"""

from __future__ import annotations

import math
from functools import reduce

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, ShapeError
from opcore.meta import ALL_DTYPES, normalize_dim, promote_types, shape_text
from opcore.types import DType, TensorMeta

__all__ = ["CAT", "CONTRACTS", "PERMUTE", "RESHAPE", "TRANSPOSE", "is_skipped_in_cat"]


def transpose_meta(x: TensorMeta, dim0: int, dim1: int) -> TensorMeta:
    """x's shape with two dims swapped."""
    first = normalize_dim("dim0", dim0, x.ndim)
    second = normalize_dim("dim1", dim1, x.ndim)
    shape = list(x.shape)
    if shape:
        shape[first], shape[second] = shape[second], shape[first]
    return TensorMeta(tuple(shape), x.dtype, x.device)


def permute_meta(x: TensorMeta, dims: tuple[int, ...]) -> TensorMeta:
    """x's shape reordered by dims, each dim exactly once."""
    if len(dims) != x.ndim:
        raise ShapeError(
            arg="dims",
            expected=f"{x.ndim} dims, one per dimension of 'x' {shape_text(x.shape)}",
            found=f"{len(dims)}: {list(dims)}",
        )
    order = [normalize_dim(f"dims[{i}]", d, x.ndim) for i, d in enumerate(dims)]
    if len(set(order)) != len(order):
        raise ArgumentError(arg="dims", expected="each dim exactly once", found=f"{list(dims)} (a repeated dim)")
    return TensorMeta(tuple(x.shape[d] for d in order), x.dtype, x.device)


def infer_shape(shape: tuple[int, ...], numel: int, source: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with its one -1 replaced, checked against ``numel`` elements (as torch's infer_size)."""
    unknown = [i for i, size in enumerate(shape) if size == -1]
    if len(unknown) > 1:
        raise ArgumentError(arg="shape", expected="at most one -1 (one size can be inferred)", found=repr(list(shape)))
    for i, size in enumerate(shape):
        if size < -1:
            raise ArgumentError(arg=f"shape[{i}]", expected="a size >= 0, or -1 to infer it", found=str(size))
    known = math.prod(size for size in shape if size != -1)
    described = f"{list(shape)} for 'x' of shape {shape_text(source)} ({numel} elements)"
    if not unknown:
        if known != numel:
            raise ShapeError(arg="shape", expected=f"a shape of {numel} elements", found=described)
        return shape
    if known == 0:
        # 0 * anything == 0: the -1 could be any size
        raise ShapeError(
            arg="shape",
            expected="no -1 beside a zero size (the inferred size would be ambiguous)",
            found=described,
        )
    if numel % known:
        raise ShapeError(arg="shape", expected=f"sizes whose product divides {numel}", found=described)
    inferred = list(shape)
    inferred[unknown[0]] = numel // known
    return tuple(inferred)


def reshape_meta(x: TensorMeta, shape: tuple[int, ...]) -> TensorMeta:
    """The new shape, its -1 inferred."""
    return TensorMeta(infer_shape(shape, x.numel, x.shape), x.dtype, x.device)


def is_skipped_in_cat(shape: tuple[int, ...]) -> bool:
    """torch.cat's legacy rule: 1-D empty tensors are left out, whatever the other shapes."""
    return shape == (0,)


def cat_meta(tensors: tuple[TensorMeta, ...], dim: int) -> TensorMeta:
    """Sizes equal except along dim, 0-D tensors refused, 1-D empty ones skipped; dtypes promoted."""
    if not tensors:
        raise ArgumentError(arg="tensors", expected="a non-empty list of tensors", found="an empty list")
    for i, meta in enumerate(tensors):
        if meta.ndim == 0:
            raise ShapeError(
                arg=f"tensors[{i}]",
                expected="a tensor of at least 1 dimension (a 0-D tensor cannot be concatenated)",
                found="a 0-D tensor",
                fix="reshape scalars to shape (1,) first",
            )
    dtype: DType = reduce(promote_types, (meta.dtype for meta in tensors))
    kept = [(i, meta) for i, meta in enumerate(tensors) if not is_skipped_in_cat(meta.shape)]
    if not kept:
        return TensorMeta((0,), dtype, tensors[0].device)
    first_index, first = kept[0]
    axis = normalize_dim("dim", dim, first.ndim)
    total = 0
    for i, meta in kept:
        if meta.ndim != first.ndim:
            raise ShapeError(
                arg=f"tensors[{i}]",
                expected=f"a {first.ndim}-D tensor like tensors[{first_index}] {shape_text(first.shape)}",
                found=f"a {meta.ndim}-D tensor of shape {shape_text(meta.shape)}",
            )
        for d, (size, wanted) in enumerate(zip(meta.shape, first.shape)):
            if d != axis and size != wanted:
                raise ShapeError(
                    arg=f"tensors[{i}]",
                    expected=f"size {wanted} at dim {d} like tensors[{first_index}] {shape_text(first.shape)} "
                    f"(sizes may differ only at dim {axis})",
                    found=f"shape {shape_text(meta.shape)}",
                )
        total += meta.shape[axis]
    shape = (*first.shape[:axis], total, *first.shape[axis + 1 :])
    return TensorMeta(shape, dtype, first.device)


TRANSPOSE = define_op(
    "transpose(Tensor x, int dim0, int dim1) -> Tensor",
    meta=transpose_meta,
    dtypes=ALL_DTYPES,
    family="shape",
    doc="x with dims dim0 and dim1 swapped; mirrors torch.transpose.",
    tags=("shape",),
)
PERMUTE = define_op(
    "permute(Tensor x, int[] dims) -> Tensor",
    meta=permute_meta,
    dtypes=ALL_DTYPES,
    family="shape",
    doc="x with its dims reordered to dims; mirrors torch.permute.",
    tags=("shape",),
)
RESHAPE = define_op(
    "reshape(Tensor x, int[] shape) -> Tensor",
    meta=reshape_meta,
    dtypes=ALL_DTYPES,
    family="shape",
    doc="x with a new shape of the same number of elements (one -1 is inferred); mirrors torch.reshape.",
    tags=("shape",),
)
CAT = define_op(
    "cat(Tensor[] tensors, int dim=0) -> Tensor",
    meta=cat_meta,
    dtypes=ALL_DTYPES,
    family="shape",
    doc="The tensors joined along dim, type-promoted; 1-D empty tensors are skipped; mirrors torch.cat.",
    tags=("shape",),
)

CONTRACTS: tuple[OpContract, ...] = (TRANSPOSE, PERMUTE, RESHAPE, CAT)
