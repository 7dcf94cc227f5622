"""Shape contracts: transpose, permute, reshape, cat, clone and the view ops (unsqueeze, squeeze,
flatten, expand, slice, select). Every dtype is accepted.

>>> from opcore.types import TensorMeta, DType
>>> RESHAPE.meta(TensorMeta((2, 3, 4), DType.BOOL), (4, -1)).shape
(4, 6)
"""

from __future__ import annotations

import math
from functools import partial, reduce

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, ShapeError
from opcore.meta import ALL_DTYPES, normalize_dim, promote_types, shape_text
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="shape")

__all__ = [
    "CAT",
    "CLONE",
    "CONTRACTS",
    "EXPAND",
    "FLATTEN",
    "PERMUTE",
    "RESHAPE",
    "SELECT",
    "SLICE",
    "SQUEEZE",
    "TRANSPOSE",
    "UNSQUEEZE",
    "is_skipped_in_cat",
    "slice_bounds",
    "squeezed_shape",
]


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


def unsqueeze_meta(x: TensorMeta, dim: int) -> TensorMeta:
    """x's shape with a size-1 dim inserted at dim (in [-ndim-1, ndim])."""
    axis = normalize_dim("dim", dim, x.ndim + 1)
    return TensorMeta((*x.shape[:axis], 1, *x.shape[axis:]), x.dtype, x.device)


def squeezed_shape(shape: tuple[int, ...], dim: tuple[int, ...] | None) -> tuple[int, ...]:
    """``shape`` without its size-1 dims (all of them, or those of ``dim``, already checked)."""
    axes = range(len(shape)) if dim is None else {d % max(len(shape), 1) for d in dim}
    return tuple(size for i, size in enumerate(shape) if not (i in axes and size == 1))


def squeeze_meta(x: TensorMeta, dim: tuple[int, ...] | None) -> TensorMeta:
    """x's shape without its size-1 dims (all of them, or those of dim; others are kept)."""
    if dim is not None:
        listed = [normalize_dim(f"dim[{i}]", d, x.ndim) for i, d in enumerate(dim)]
        if len(set(listed)) != len(listed):
            raise ArgumentError(arg="dim", expected="each dim at most once", found=f"{list(dim)} (a repeated dim)")
    return TensorMeta(squeezed_shape(x.shape, dim), x.dtype, x.device)


def flatten_meta(x: TensorMeta, start_dim: int, end_dim: int) -> TensorMeta:
    """x's dims start_dim..end_dim merged into one; a 0-D tensor becomes shape (1,)."""
    start = normalize_dim("start_dim", start_dim, x.ndim)
    end = normalize_dim("end_dim", end_dim, x.ndim)
    if start > end:
        raise ArgumentError(
            arg="end_dim",
            expected=f"a dim at or after start_dim ({start_dim}, dim {start})",
            found=f"{end_dim} (dim {end})",
        )
    if x.ndim == 0:
        return TensorMeta((1,), x.dtype, x.device)
    merged = math.prod(x.shape[start : end + 1])
    return TensorMeta((*x.shape[:start], merged, *x.shape[end + 1 :]), x.dtype, x.device)


def expand_meta(x: TensorMeta, size: tuple[int, ...]) -> TensorMeta:
    """x broadcast to size: -1 keeps a size, a size-1 dim grows, new dims are prepended."""
    if len(size) < x.ndim:
        raise ShapeError(
            arg="size",
            expected=f"at least {x.ndim} sizes, one per dimension of 'x' {shape_text(x.shape)}",
            found=f"{len(size)}: {list(size)}",
        )
    lead = len(size) - x.ndim
    shape = []
    for i, wanted in enumerate(size):
        have = x.shape[i - lead] if i >= lead else None
        if wanted == -1:
            if have is None:
                raise ArgumentError(
                    arg=f"size[{i}]",
                    expected="a size >= 0 for a new leading dim (-1 keeps an existing size only)",
                    found="-1",
                )
            shape.append(have)
        elif wanted < 0:
            raise ArgumentError(arg=f"size[{i}]", expected="a size >= 0, or -1 to keep it", found=str(wanted))
        elif have is not None and have not in (1, wanted):
            raise ShapeError(
                arg="size",
                expected=f"size {have} or -1 at dim {i} (only size-1 dims of 'x' {shape_text(x.shape)} expand)",
                found=f"{list(size)}",
            )
        else:
            shape.append(wanted)
    return TensorMeta(tuple(shape), x.dtype, x.device)


def slice_bounds(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """torch's clamping of start and end on a dim of ``size``: negatives count from the end, then
    both are clamped into [0, size] and end no earlier than start."""
    first = 0 if start is None else start
    last = size if end is None else end
    if first < 0:
        first += size
    if last < 0:
        last += size
    first = min(max(first, 0), size)
    last = min(max(last, first), size)
    return first, last


def slice_meta(x: TensorMeta, dim: int, start: int | None, end: int | None, step: int) -> TensorMeta:
    """x's dim cut to start:end:step (clamped as torch does); step must be positive."""
    if x.ndim == 0:
        raise ShapeError(arg="x", expected="a tensor of at least 1 dimension (slice cannot cut a 0-D tensor)",
                         found="a 0-D tensor")  # fmt: skip
    axis = normalize_dim("dim", dim, x.ndim)
    if step <= 0:
        raise ArgumentError(arg="step", expected="a step >= 1 (torch slices forward only)", found=str(step),
                            fix="use flip for a reversed slice")  # fmt: skip
    first, last = slice_bounds(x.shape[axis], start, end)
    length = (last - first + step - 1) // step
    return TensorMeta((*x.shape[:axis], length, *x.shape[axis + 1 :]), x.dtype, x.device)


def select_meta(x: TensorMeta, dim: int, index: int) -> TensorMeta:
    """x without dim, taken at index (negative counts from the end)."""
    if x.ndim == 0:
        raise ShapeError(arg="x", expected="a tensor of at least 1 dimension (select cannot index a 0-D tensor)",
                         found="a 0-D tensor")  # fmt: skip
    axis = normalize_dim("dim", dim, x.ndim)
    size = x.shape[axis]
    if not -size <= index < size:
        raise ShapeError(
            arg="index",
            expected=f"an index in the range [{-size}, {size - 1}] for dim {axis} of size {size}",
            found=str(index),
        )
    return TensorMeta((*x.shape[:axis], *x.shape[axis + 1 :]), x.dtype, x.device)


def clone_meta(x: TensorMeta) -> TensorMeta:
    """x's shape, dtype and device: nothing to check."""
    return TensorMeta(x.shape, x.dtype, x.device)


TRANSPOSE = define(
    "transpose(Tensor x, int dim0, int dim1) -> Tensor",
    meta=transpose_meta,
    dtypes=ALL_DTYPES,
    doc="x with dims dim0 and dim1 swapped; mirrors torch.transpose.",
    tags=("shape", "view"),
)
PERMUTE = define(
    "permute(Tensor x, int[] dims) -> Tensor",
    meta=permute_meta,
    dtypes=ALL_DTYPES,
    doc="x with its dims reordered to dims; mirrors torch.permute.",
    tags=("shape", "view"),
)
RESHAPE = define(
    "reshape(Tensor x, int[] shape) -> Tensor",
    meta=reshape_meta,
    dtypes=ALL_DTYPES,
    doc="x with a new shape of the same number of elements (one -1 is inferred); mirrors torch.reshape.",
    tags=("shape", "view"),
)
CAT = define(
    "cat(Tensor[] tensors, int dim=0) -> Tensor",
    meta=cat_meta,
    dtypes=ALL_DTYPES,
    doc="The tensors joined along dim, type-promoted; 1-D empty tensors are skipped; mirrors torch.cat.",
    tags=("shape",),
)
CLONE = define(
    "clone(Tensor x) -> Tensor",
    meta=clone_meta,
    dtypes=ALL_DTYPES,
    doc="A copy of x (same shape, dtype and values); mirrors torch.clone (an export's clone and alias nodes).",
    tags=("shape",),
)

UNSQUEEZE = define(
    "unsqueeze(Tensor x, int dim) -> Tensor",
    meta=unsqueeze_meta,
    dtypes=ALL_DTYPES,
    doc="x with a size-1 dim inserted at dim; mirrors torch.unsqueeze.",
    tags=("shape", "view"),
)
SQUEEZE = define(
    "squeeze(Tensor x, int[]? dim=None) -> Tensor",
    meta=squeeze_meta,
    dtypes=ALL_DTYPES,
    doc="x without its size-1 dims (every one, or those in dim); mirrors torch.squeeze.",
    tags=("shape", "view"),
)
FLATTEN = define(
    "flatten(Tensor x, int start_dim=0, int end_dim=-1) -> Tensor",
    meta=flatten_meta,
    dtypes=ALL_DTYPES,
    doc="x with dims start_dim..end_dim merged into one; mirrors torch.flatten.",
    tags=("shape", "view"),
)
EXPAND = define(
    "expand(Tensor x, int[] size) -> Tensor",
    meta=expand_meta,
    dtypes=ALL_DTYPES,
    doc="x broadcast to size (-1 keeps a size, new dims lead); mirrors torch.Tensor.expand.",
    tags=("shape", "view"),
)
SLICE = define(
    "slice(Tensor x, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor",
    meta=slice_meta,
    dtypes=ALL_DTYPES,
    doc="x[..., start:end:step, ...] along dim, bounds clamped as torch does; mirrors aten.slice.Tensor.",
    tags=("shape", "view"),
)
SELECT = define(
    "select(Tensor x, int dim, int index) -> Tensor",
    meta=select_meta,
    dtypes=ALL_DTYPES,
    doc="x at index along dim, that dim removed; mirrors torch.select.",
    tags=("shape", "view"),
)

CONTRACTS: tuple[OpContract, ...] = (
    TRANSPOSE,
    PERMUTE,
    RESHAPE,
    CAT,
    CLONE,
    UNSQUEEZE,
    SQUEEZE,
    FLATTEN,
    EXPAND,
    SLICE,
    SELECT,
)
