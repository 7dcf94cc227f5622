"""Indexing contracts: gather, index (aten.index.Tensor), split, split_with_sizes, chunk (list
results) and pad (constant mode).

>>> from opcore.types import TensorMeta, DType
>>> [m.shape for m in CHUNK.meta(TensorMeta((5, 2), DType.FLOAT32), 2, 0)]
[(3, 2), (2, 2)]
"""

from __future__ import annotations

from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.meta import ALL_DTYPES, broadcast_shapes, check_choice, normalize_dim, shape_text
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="indexing")

__all__ = [
    "CHUNK",
    "CONTRACTS",
    "GATHER",
    "INDEX",
    "PAD",
    "PAD_MODES",
    "SPLIT",
    "SPLIT_WITH_SIZES",
    "check_index_range",
    "chunk_sizes",
    "split_pieces",
    "split_sizes",
]

INDEX_DTYPES = frozenset({DType.INT64, DType.INT32})


def _check_index_dtype(op_arg: str, meta: TensorMeta, allowed: frozenset[DType]) -> None:
    if meta.dtype not in allowed:
        names = " or ".join(sorted(d.value for d in allowed))
        raise DTypeError(
            arg=op_arg,
            expected=f"an index tensor of {names}",
            found=str(meta.dtype),
            fix=f"convert the index with .to({names.split(' or ')[0]})",
        )


def check_index_range(arg: str, low: int, high: int, size: int, *, negative: bool) -> None:
    """Indices are data, so no meta function sees them: every backend's kernel checks the smallest
    and largest index it was given with this (``negative``: -size..-1 count from the end, as in
    index; gather takes 0..size-1 only).

    >>> check_index_range("index", 0, 2, 3, negative=False)
    """
    lowest = -size if negative else 0
    if low < lowest or high >= size:
        raise ArgumentError(
            arg=arg,
            expected=f"indices in [{lowest}, {size - 1}] (the indexed dim has size {size})",
            found=f"index {low if low < lowest else high} (index out of range)",
            fix="keep every index within the dim's size",
        )


def check_embedding_range(low: int, high: int, rows: int, *, noun: str = "weight") -> None:
    """embedding's index check (and embedding_wq's, whose table is its codes): the smallest and
    largest index against the table's rows, which every backend's kernel reports this one way.

    >>> check_embedding_range(0, 2, 3)
    """
    if low < 0 or high >= rows:
        raise ArgumentError(
            arg="input",
            expected=f"indices in [0, {rows - 1}] (the {noun} has {rows} rows)",
            found=f"index {low if low < 0 else high} (index out of range)",
            fix="indices must be non-negative and below num_embeddings",
        )


def gather_meta(x: TensorMeta, dim: int, index: TensorMeta) -> TensorMeta:
    """index's shape, x's dtype; index as many dims as x, no larger than x except along dim."""
    _check_index_dtype("index", index, INDEX_DTYPES)
    axis = normalize_dim("dim", dim, x.ndim)
    if max(index.ndim, 1) != max(x.ndim, 1):
        raise ShapeError(
            arg="index",
            expected=f"a {x.ndim}-D index, as many dims as 'x' {shape_text(x.shape)}",
            found=f"a {index.ndim}-D index of shape {shape_text(index.shape)}",
        )
    for d, (have, size) in enumerate(zip(index.shape, x.shape)):
        if d != axis and have > size:
            raise ShapeError(
                arg="index",
                expected=f"size <= {size} at dim {d}, as 'x' {shape_text(x.shape)} (only dim {axis} may be larger)",
                found=f"shape {shape_text(index.shape)}",
            )
    return TensorMeta(index.shape, x.dtype, x.device)


def index_meta(x: TensorMeta, indices: tuple[TensorMeta | None, ...]) -> TensorMeta:
    """x indexed by integer tensors at some dims (None: the whole dim), as x[i0, :, i2]: the
    indices broadcast together; their result dims replace the indexed dims in place when those
    are adjacent, else lead (NumPy's and torch's rule)."""
    if len(indices) > x.ndim:
        raise ShapeError(
            arg="indices",
            expected=f"at most {x.ndim} indices, one per dimension of 'x' {shape_text(x.shape)}",
            found=f"{len(indices)} indices",
        )
    given = [i for i, meta in enumerate(indices) if meta is not None]
    if not given:
        raise ArgumentError(arg="indices", expected="at least one index tensor", found="only None",
                            fix="a plain view needs no index")  # fmt: skip
    for i in given:
        meta = indices[i]
        assert meta is not None  # for the type checker: given lists non-None positions only
        if meta.dtype is DType.BOOL or meta.dtype is DType.UINT8:
            raise DTypeError(
                arg=f"indices[{i}]",
                expected="an integer index tensor (int64 or int32)",
                found=f"a {meta.dtype} mask (its result shape depends on the data)",
                fix="turn the mask into indices first (mask.nonzero()), or use masked_fill/where",
            )
        _check_index_dtype(f"indices[{i}]", meta, INDEX_DTYPES)
    shape = broadcast_shapes(*((f"indices[{i}]", indices[i].shape) for i in given))  # type: ignore[union-attr]
    rest = [x.shape[d] for d in range(x.ndim)]
    adjacent = given == list(range(given[0], given[-1] + 1))
    if adjacent:
        out = (*rest[: given[0]], *shape, *rest[given[-1] + 1 :])
    else:
        out = (*shape, *(rest[d] for d in range(x.ndim) if d not in given))
    return TensorMeta(tuple(out), x.dtype, x.device)


def _check_splittable(x: TensorMeta, dim: int) -> int:
    if x.ndim == 0:
        raise ShapeError(arg="x", expected="a tensor of at least 1 dimension (a 0-D tensor cannot be split)",
                         found="a 0-D tensor")  # fmt: skip
    return normalize_dim("dim", dim, x.ndim)


def _pieces(x: TensorMeta, axis: int, sizes: list[int]) -> tuple[TensorMeta, ...]:
    return tuple(TensorMeta((*x.shape[:axis], p, *x.shape[axis + 1 :]), x.dtype, x.device) for p in sizes)


# The most results one split or chunk returns: every piece is a Python object (a meta, a view, an
# array), about 1 KiB all told, so 2**20 pieces take ~1 GiB; a stride-0 view with 2**34 rows split by 1
# would otherwise build a list that takes the host's memory before any kernel runs.
MAX_PIECES = 2**20


def _check_pieces(arg: str, count: int, axis: int, size: int) -> None:
    if count > MAX_PIECES:
        raise ShapeError(
            arg=arg,
            expected=f"at most {MAX_PIECES:,} pieces (each result is a Python object)",
            found=f"{count:,} pieces of dim {axis} (size {size:,})",
            fix="split into larger pieces, or index the dimension instead of splitting it",
        )


def split_sizes(size: int, split_size: int) -> list[int]:
    """torch.split's pieces of a dim of ``size``: split_size each, the last smaller; one piece
    when the dim is empty."""
    if size == 0:
        return [0]
    return [min(split_size, size - start) for start in range(0, size, split_size)]


def chunk_sizes(size: int, chunks: int) -> list[int]:
    """torch.chunk's pieces: split by ceil(size / chunks), so there may be fewer than chunks;
    an empty dim gives chunks empty pieces."""
    if size == 0:
        return [0] * chunks
    return split_sizes(size, -(-size // chunks))


def split_pieces(size: int, split_size: int | tuple[int, ...]) -> list[int]:
    """The sizes of split's pieces of a dim of ``size``: split_size each (an int), or the list given
    (torch.split with a list of sizes is split_with_sizes).

    >>> split_pieces(5, 2), split_pieces(5, (1, 4))
    ([2, 2, 1], [1, 4])
    """
    return list(split_size) if isinstance(split_size, tuple) else split_sizes(size, split_size)


def split_meta(x: TensorMeta, split_size: int | tuple[int, ...], dim: int) -> tuple[TensorMeta, ...]:
    """Pieces of split_size along dim, the last one smaller; a list of sizes as split_with_sizes."""
    if isinstance(split_size, tuple):
        return split_with_sizes_meta(x, split_size, dim)
    axis = _check_splittable(x, dim)
    size = x.shape[axis]
    if split_size < 0 or (split_size == 0 and size != 0):
        raise ArgumentError(arg="split_size", expected=f"a size >= 1 (0 only for an empty dim; dim {axis} has {size})",
                            found=str(split_size))  # fmt: skip
    _check_pieces("split_size", -(-size // split_size) if size else 1, axis, size)
    return _pieces(x, axis, split_sizes(size, split_size))


def split_with_sizes_meta(x: TensorMeta, split_sizes: tuple[int, ...], dim: int) -> tuple[TensorMeta, ...]:
    """One piece per size, the sizes adding up to x's size along dim."""
    axis = _check_splittable(x, dim)
    for i, size in enumerate(split_sizes):
        if size < 0:
            raise ArgumentError(arg=f"split_sizes[{i}]", expected="a size >= 0", found=str(size))
    _check_pieces("split_sizes", len(split_sizes), axis, x.shape[axis])
    if sum(split_sizes) != x.shape[axis]:
        raise ShapeError(
            arg="split_sizes",
            expected=f"sizes adding up to {x.shape[axis]} (dim {axis} of 'x' {shape_text(x.shape)})",
            found=f"{list(split_sizes)} (sum {sum(split_sizes)})",
        )
    return _pieces(x, axis, list(split_sizes))


def chunk_meta(x: TensorMeta, chunks: int, dim: int) -> tuple[TensorMeta, ...]:
    """At most chunks pieces of ceil(size / chunks) along dim."""
    axis = _check_splittable(x, dim)
    if chunks < 1:
        raise ArgumentError(arg="chunks", expected="a number of chunks >= 1", found=str(chunks))
    _check_pieces("chunks", min(chunks, max(x.shape[axis], 1)) if x.shape[axis] else chunks, axis, x.shape[axis])
    return _pieces(x, axis, chunk_sizes(x.shape[axis], chunks))


PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _check_pad_mode(x: TensorMeta, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> None:
    """torch's rules for reflect, replicate and circular: no fill value; 1-3 padded dims of a 2-D to
    5-D x (an optional batch dim before the channels); non-empty dims but the batch; reflect pads below
    the dim's size, circular ones at most its size; no bool for reflect and replicate."""
    if value not in (None, 0):
        raise ArgumentError(arg="value", expected=f"no fill value for mode={mode!r}", found=repr(value),
                            fix="leave value out (it is only for mode='constant')")  # fmt: skip
    padded = len(pad) // 2
    if len(pad) not in (2, 4, 6) or x.ndim not in (padded + 1, padded + 2):
        raise ShapeError(
            arg="pad",
            expected=f"for mode={mode!r}: 2 pads for a 2-D or 3-D x, 4 for 3-D or 4-D, 6 for 4-D or 5-D",
            found=f"{len(pad)} pads for a {x.ndim}-D x",
            fix="pad the last 1-3 dims of a (batch,) channels, ... input, or use mode='constant'",
        )
    if mode in ("reflect", "replicate") and x.dtype is DType.BOOL:
        raise DTypeError(arg="x", expected=f"a numeric dtype for mode={mode!r}", found="bool",
                         fix="convert x to uint8 first")  # fmt: skip
    checked = x.shape[1:] if x.ndim == padded + 2 else x.shape
    if 0 in checked:
        raise ShapeError(arg="x", expected=f"non-empty dims (but a batch dim) for mode={mode!r}",
                         found=f"shape {shape_text(x.shape)}")  # fmt: skip
    for i in range(padded):
        d = x.ndim - 1 - i
        size, before, after = x.shape[d], pad[2 * i], pad[2 * i + 1]
        if mode == "reflect" and (before >= size or after >= size):
            raise ArgumentError(arg="pad", expected=f"reflect pads below the size of dim {d} ({size})",
                                found=str(list(pad)))  # fmt: skip
        if mode == "circular" and (before > size or after > size):
            raise ArgumentError(arg="pad", expected=f"circular pads at most the size of dim {d} ({size}): "
                                "no wrapping around more than once", found=str(list(pad)))  # fmt: skip
        if size + before + after < 1:
            raise ShapeError(arg="pad", expected=f"pads leaving dim {d} (size {size}) a size >= 1 for mode={mode!r}",
                             found=str(list(pad)))  # fmt: skip


def pad_meta(x: TensorMeta, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> TensorMeta:
    """x grown (or, for negative pads, cut) at both ends of its last len(pad) / 2 dims, the last
    dim first: pad = (left, right, top, bottom, ...); filled with value (constant), x's mirror image
    without its edge (reflect), its edge (replicate) or its other end (circular)."""
    check_choice("mode", mode, PAD_MODES)
    if mode != "constant" and len(pad) % 2 == 0:
        _check_pad_mode(x, pad, mode, value)
    if len(pad) % 2:
        raise ArgumentError(arg="pad", expected="an even number of pads (a before and an after per dim)",
                            found=f"{len(pad)}: {list(pad)}")  # fmt: skip
    if len(pad) // 2 > x.ndim:
        raise ShapeError(
            arg="pad",
            expected=f"at most {2 * x.ndim} pads, two per dimension of 'x' {shape_text(x.shape)}",
            found=f"{len(pad)}: {list(pad)}",
        )
    shape = list(x.shape)
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        shape[d] += before + after
        if shape[d] < 0:
            raise ShapeError(
                arg="pad",
                expected=f"pads leaving dim {d} (size {x.shape[d]}) a size >= 0",
                found=f"{list(pad)}, giving size {shape[d]}",
            )
        # torch cuts the negative pads first (narrow), then grows: pads that cancel (2**62, -2**62)
        # are refused where the cut alone is longer than the dim, as torch refuses them
        cut = -min(before, 0) - min(after, 0)
        if cut > x.shape[d]:
            raise ShapeError(
                arg="pad",
                expected=f"negative pads cutting at most dim {d}'s size {x.shape[d]} (torch cuts them before it pads: "
                "narrow(): length must be non-negative)",
                found=f"{list(pad)}, cutting {cut}",
                fix="make the negative pads of a dim sum to no more than its size",
            )
    return TensorMeta(tuple(shape), x.dtype, x.device)


GATHER = define(
    "gather(Tensor x, int dim, Tensor index) -> Tensor",
    meta=gather_meta,
    dtypes=ALL_DTYPES,
    doc="out[i][j] = x[index[i][j]][j] (for dim 0): values picked along dim; mirrors torch.gather.",
    tags=("indexing",),
)
INDEX = define(
    "index(Tensor x, Tensor?[] indices) -> Tensor",
    meta=index_meta,
    dtypes=ALL_DTYPES,
    doc="x[i0, i1, ...] with integer index tensors (None: a whole dim), broadcast together; mirrors aten.index.Tensor.",
    tags=("indexing",),
)
SPLIT = define(
    "split(Tensor x, int|int[] split_size, int dim=0) -> Tensor[]",
    meta=split_meta,
    dtypes=ALL_DTYPES,
    doc="x cut along dim into pieces of split_size (the last smaller), or of the sizes of a list; mirrors torch.split.",
    tags=("shape", "view"),
)
SPLIT_WITH_SIZES = define(
    "split_with_sizes(Tensor x, int[] split_sizes, int dim=0) -> Tensor[]",
    meta=split_with_sizes_meta,
    dtypes=ALL_DTYPES,
    doc="x cut along dim into pieces of the given sizes; mirrors torch.split with a list.",
    tags=("shape", "view"),
)
CHUNK = define(
    "chunk(Tensor x, int chunks, int dim=0) -> Tensor[]",
    meta=chunk_meta,
    dtypes=ALL_DTYPES,
    doc="x cut along dim into at most chunks pieces of ceil(size / chunks); mirrors torch.chunk.",
    tags=("shape", "view"),
)
PAD = define(
    'pad(Tensor x, int[] pad, str mode="constant", Scalar? value=None) -> Tensor',
    meta=pad_meta,
    dtypes=ALL_DTYPES,
    doc="x padded at both ends of its last dims, last dim first, with value (default 0; mode 'constant'), "
    "its mirror image ('reflect'), its edge ('replicate') or its other end ('circular'); negative pads cut; "
    "mirrors torch.nn.functional.pad.",
    tags=("shape",),
)

CONTRACTS: tuple[OpContract, ...] = (GATHER, INDEX, SPLIT, SPLIT_WITH_SIZES, CHUNK, PAD)
