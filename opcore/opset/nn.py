"""Neural-network contracts: embedding, conv1d, conv2d, scaled_dot_product_attention.

>>> from opcore.types import TensorMeta, DType
>>> x, w = TensorMeta((1, 4, 8, 8), DType.FLOAT32), TensorMeta((6, 2, 3, 3), DType.FLOAT32)
>>> CONV2D.meta(x, w, None, (2, 2), (1, 1), (1, 1), 2).shape
(1, 6, 4, 4)
"""

from __future__ import annotations

from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.meta import (
    ALL_DTYPES,
    FLOATING,
    NUMERIC,
    broadcast_shapes,
    check_dtype,
    check_floating,
    check_min_rank,
    check_positive,
    check_rank,
    check_same_dtype,
    shape_text,
)
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="nn")

__all__ = [
    "CONTRACTS",
    "CONV1D",
    "CONV2D",
    "EMBEDDING",
    "INDEX_DTYPES",
    "SCALED_DOT_PRODUCT_ATTENTION",
    "conv_meta",
    "conv_pads",
]

INDEX_DTYPES = frozenset({DType.INT32, DType.INT64})


def embedding_meta(input: TensorMeta, weight: TensorMeta, padding_idx: int | None) -> TensorMeta:
    """int32/int64 indices, a 2-D weight, padding_idx within its rows; output indices.shape + (dim,)."""
    check_dtype("input", input, INDEX_DTYPES, fix="convert the indices with .astype('int64')")
    check_rank("weight", weight, 2, what="a 2-D weight (num_embeddings, embedding_dim)")
    rows = weight.shape[0]
    if padding_idx is not None and not -rows <= padding_idx < rows:
        raise ArgumentError(
            arg="padding_idx",
            expected=f"an index within num_embeddings = {rows} (in [{-rows}, {rows - 1}]) or None",
            found=str(padding_idx),
        )
    return TensorMeta(input.shape + weight.shape[1:], weight.dtype, weight.device)


Padding = tuple[int, ...] | str  # int[N]|str: explicit sizes, or "same" / "valid"


def conv_pads(
    padding: Padding, kernel: tuple[int, ...], dilation: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(before, after) zero padding per spatial dim, as torch pads: explicit sizes on both sides;
    "valid" none; "same" d * (k - 1) in all, half before and the odd one after (right, bottom).

    >>> conv_pads("same", (4, 3), (1, 2))
    ((1, 2), (2, 2))
    """
    if isinstance(padding, str):
        if padding == "same":
            total = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
        return (0,) * len(kernel), (0,) * len(kernel)  # "valid" (the contract refuses other strings)
    return padding, padding


def conv_meta(
    spatial: int,
    x: TensorMeta,
    weight: TensorMeta,
    bias: TensorMeta | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> TensorMeta:
    """torch.nn.functional.conv1d/conv2d's checks for ``spatial`` dims: ranks, dtypes, positive
    attributes, "same"/"valid" padding (no "same" with a stride), channels and groups, a kernel
    that fits the padded input.
    """
    names = ("L",) if spatial == 1 else ("H", "W")
    batched = "(N, C, " + ", ".join(names) + ")"
    check_rank(
        "x",
        x,
        (spatial + 1, spatial + 2),
        what=f"a {spatial + 1}-D (C, {', '.join(names)}) or {spatial + 2}-D {batched} input",
    )
    kernel_names = ", ".join(f"k{n}" for n in names)
    check_rank(
        "weight",
        weight,
        spatial + 2,
        what=f"a {spatial + 2}-D weight (out_channels, in_channels / groups, {kernel_names})",
    )
    check_dtype("x", x, NUMERIC, fix="torch's CPU convolution supports integer and floating dtypes, not bool")
    check_same_dtype(("x", x), ("weight", weight), ("bias", bias))
    check_positive("stride", stride)
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ArgumentError(
                arg="padding",
                expected="'same', 'valid' or non-negative ints",
                found=repr(padding),
                fix="pass padding='same', padding='valid' or explicit sizes",
            )
        if padding == "same" and any(s != 1 for s in stride):
            raise ArgumentError(
                arg="padding",
                expected="an explicit padding with stride > 1 (torch: padding='same' is not supported for "
                "strided convolutions)",
                found=f"padding='same' with stride {list(stride)}",
                fix="pass stride=1, or explicit padding sizes",
            )
    else:
        check_positive("padding", padding, allow_zero=True)
    check_positive("dilation", dilation)
    if groups <= 0:
        raise ArgumentError(arg="groups", expected="a positive int", found=str(groups))
    out_channels, group_channels, *kernel = weight.shape
    if out_channels == 0 or group_channels == 0 or 0 in kernel:
        raise ShapeError(
            arg="weight",
            expected="no zero size (at least one output channel, input channel and kernel element)",
            found=f"shape {shape_text(weight.shape)}",
        )
    if out_channels % groups:
        raise ShapeError(
            arg="weight",
            expected=f"out_channels (its first size) divisible by groups = {groups}",
            found=f"shape {shape_text(weight.shape)}",
        )
    channels = x.shape[-spatial - 1]
    if channels != group_channels * groups:
        raise ShapeError(
            arg="x",
            expected=f"{group_channels * groups} channels (weight {shape_text(weight.shape)} with groups = {groups})",
            found=f"{channels} channels in shape {shape_text(x.shape)}",
        )
    if bias is not None and bias.shape != (out_channels,):
        raise ShapeError(arg="bias", expected=f"shape ({out_channels},)", found=f"shape {shape_text(bias.shape)}")
    before, after = conv_pads(padding, tuple(kernel), dilation)
    padded = [size + b + a for size, b, a in zip(x.shape[-spatial:], before, after)]
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    if any(size < extent for size, extent in zip(padded, extents)):
        raise ShapeError(
            arg="x",
            expected=f"a padded input ({', '.join(names)}) at least as large as the dilated kernel "
            f"{shape_text(extents)}",
            found=f"padded size {shape_text(padded)} from shape {shape_text(x.shape)} and padding {padding!r}",
        )
    sizes = [(size - extent) // s + 1 for size, extent, s in zip(padded, extents, stride)]
    return TensorMeta((*x.shape[: -spatial - 1], out_channels, *sizes), x.dtype, x.device)


def conv1d_meta(
    x: TensorMeta,
    weight: TensorMeta,
    bias: TensorMeta | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> TensorMeta:
    """torch.nn.functional.conv1d's checks (``conv_meta`` over one spatial dim)."""
    return conv_meta(1, x, weight, bias, stride, padding, dilation, groups)


def conv2d_meta(
    x: TensorMeta,
    weight: TensorMeta,
    bias: TensorMeta | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> TensorMeta:
    """torch.nn.functional.conv2d's checks (``conv_meta`` over two spatial dims)."""
    return conv_meta(2, x, weight, bias, stride, padding, dilation, groups)


def sdpa_meta(
    query: TensorMeta,
    key: TensorMeta,
    value: TensorMeta,
    attn_mask: TensorMeta | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> TensorMeta:
    """query (..., L, E), key (..., S, E), value (..., S, Ev) with broadcast batches, an optional
    bool or additive mask broadcasting to (..., L, S); inference only.
    """
    if dropout_p != 0.0:
        raise ArgumentError(
            arg="dropout_p",
            expected="0.0 (opcore is inference-only)",
            found=repr(dropout_p),
            fix="pass dropout_p=0.0; apply dropout in the training framework",
        )
    if is_causal and attn_mask is not None:
        raise ArgumentError(
            arg="attn_mask",
            expected="None when is_causal=True",
            found=f"a mask of shape {shape_text(attn_mask.shape)}",
            fix="fold the causal mask into attn_mask, or drop attn_mask",
        )
    least = 3 if enable_gqa else 2
    what = "a tensor (..., heads, L, E) of at least 3 dimensions with enable_gqa=True" if enable_gqa else None
    for name, meta in (("query", query), ("key", key), ("value", value)):
        check_min_rank(name, meta, least, what=what)
    check_floating("query", query)
    check_same_dtype(("query", query), ("key", key), ("value", value))
    if key.shape[-1] != query.shape[-1]:
        raise ShapeError(
            arg="key",
            expected=f"the embedding size of 'query' ({query.shape[-1]}) as its last size",
            found=f"shape {shape_text(key.shape)}",
        )
    if value.shape[-2] != key.shape[-2]:
        raise ShapeError(
            arg="value",
            expected=f"the sequence length of 'key' ({key.shape[-2]}) at dim -2",
            found=f"shape {shape_text(value.shape)}",
        )
    key_batch, value_batch = key.shape[:-2], value.shape[:-2]
    if enable_gqa:
        heads = query.shape[-3]
        for name, meta in (("key", key), ("value", value)):
            if meta.shape[-3] == 0 or heads % meta.shape[-3]:
                raise ShapeError(
                    arg=name,
                    expected=f"a head count (dim -3) that divides the {heads} heads of 'query'",
                    found=f"shape {shape_text(meta.shape)}",
                )
        key_batch, value_batch = (*key.shape[:-3], heads), (*value.shape[:-3], heads)
    # pairwise, so that the error names the argument that does not fit
    batch = broadcast_shapes(("query", query.shape[:-2]), ("key", key_batch))
    batch = broadcast_shapes(("query and key", batch), ("value", value_batch))
    weights_shape = (*batch, query.shape[-2], key.shape[-2])
    if attn_mask is not None:
        if attn_mask.dtype is not DType.BOOL and attn_mask.dtype is not query.dtype:
            raise DTypeError(
                arg="attn_mask",
                expected=f"bool (True: take part) or the dtype of 'query' ({query.dtype}) for an additive mask",
                found=attn_mask.dtype.value,
            )
        check_min_rank("attn_mask", attn_mask, 2, what="a mask of at least 2 dimensions (..., L, S)")
        try:
            grown = broadcast_shapes(("attn_mask", attn_mask.shape), ("attention weights", weights_shape))
        except ShapeError:
            grown = None
        if grown != weights_shape:
            raise ShapeError(
                arg="attn_mask",
                expected=f"a shape that broadcasts to the attention weights (..., L, S) = {shape_text(weights_shape)}",
                found=f"shape {shape_text(attn_mask.shape)}",
            )
    return TensorMeta((*batch, query.shape[-2], value.shape[-1]), query.dtype, query.device)


EMBEDDING = define(
    "embedding(Tensor input, Tensor weight, int? padding_idx=None) -> Tensor",
    meta=embedding_meta,
    dtypes=ALL_DTYPES,
    doc="The rows of weight picked by the int32/int64 indices in input; mirrors torch.nn.functional.embedding.",
    tags=("indexing",),
    dtype_arg="weight",
)
CONV1D = define(
    "conv1d(Tensor x, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1]|str padding=0, int[1] dilation=1, "
    "int groups=1) -> Tensor",
    meta=conv1d_meta,
    dtypes=NUMERIC,
    doc="1-D cross-correlation over (N, C, L) or (C, L) input, padding sizes or 'same'/'valid'; "
    "mirrors torch.nn.functional.conv1d.",
    tags=("convolution",),
)
CONV2D = define(
    "conv2d(Tensor x, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2]|str padding=0, int[2] dilation=1, "
    "int groups=1) -> Tensor",
    meta=conv2d_meta,
    dtypes=NUMERIC,
    doc="2-D cross-correlation over (N, C, H, W) or (C, H, W) input, padding sizes or 'same'/'valid'; "
    "mirrors torch.nn.functional.conv2d.",
    tags=("convolution",),
)
SCALED_DOT_PRODUCT_ATTENTION = define(
    "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
    "float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor",
    meta=sdpa_meta,
    dtypes=FLOATING,
    doc="softmax(query @ key.T * scale + mask) @ value, inference only (dropout_p must be 0.0); "
    "mirrors torch.nn.functional.scaled_dot_product_attention.",
    tags=("attention",),
)

CONTRACTS: tuple[OpContract, ...] = (EMBEDDING, CONV1D, CONV2D, SCALED_DOT_PRODUCT_ATTENTION)
