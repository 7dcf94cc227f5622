"""embedding (Gather), conv1d and conv2d (Convolution / GroupConvolution) and scaled_dot_product_attention
(OpenVINO's ScaledDotProductAttention; grouped-query attention repeats key/value heads first).
"""

from __future__ import annotations

from typing import Any

import numpy
import openvino

from opcore.extend import Padding, conv_pads
from opcore.extend import check_embedding_indices as check_embedding
from opcore_openvino.compiled import ATTRIBUTE, TENSOR, ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops, rank_of
from opcore_openvino.kernels._common import BOOL

__all__ = ["check_embedding", "conv1d", "conv2d", "embedding", "scaled_dot_product_attention"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "conv1d",
    "conv2d",
    "embedding",
    "scaled_dot_product_attention",
)


def build_embedding(g: Graph, input: Node, weight: Node, padding_idx: int | None) -> Node:
    return ops.gather(weight, input, 0)  # padding_idx only changes gradients


def build_conv(
    g: Graph,
    x: Node,
    weight: Node,
    bias: Node | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
    weight_shape: tuple[int, ...],
) -> Node:
    """Convolution / GroupConvolution over the last len(stride) dims; padding "same"/"valid" as
    explicit begin and end pads from the (static) kernel size, as torch pads."""
    # the CPU plugin's convolution needs weights of a static shape: fixed per compiled model
    _fix_shape(weight, weight_shape)
    if bias is not None:
        _fix_shape(bias, weight_shape[:1])
    spatial = len(stride)
    batched = rank_of(x) == spatial + 2
    a = x if batched else ops.unsqueeze(x, g.ints([0]))
    before, after = conv_pads(padding, weight_shape[2:], dilation)
    if groups == 1:
        out = ops.convolution(a, weight, list(stride), list(before), list(after), list(dilation))
    else:  # (O, I/G, k...) -> (G, O/G, I/G, k...)
        out_channels, *rest = weight_shape
        grouped = ops.reshape(weight, g.ints([groups, out_channels // groups, *rest]), False)
        out = ops.group_convolution(a, grouped, list(stride), list(before), list(after), list(dilation))
    if bias is not None:
        out = ops.add(out, ops.unsqueeze(bias, g.ints(list(range(1, spatial + 1)))))
    return out if batched else ops.squeeze(out, g.ints([0]))


def _repeat_heads(g: Graph, kv: Node, query: Node) -> Node:
    """(..., Hkv, S, E) -> (..., Hq, S, E), each key/value head repeated Hq / Hkv times in a row."""
    heads, kv_heads = g.dims(query, -3, -2), g.dims(kv, -3, -2)
    repeats = ops.divide(heads, kv_heads)
    expanded = ops.unsqueeze(kv, g.ints([rank_of(kv) - 2]))
    target = ops.concat([g.dims(kv, 0, -3), kv_heads, repeats, g.dims(kv, -2)], 0)
    expanded = ops.broadcast(expanded, target)
    return ops.reshape(expanded, ops.concat([g.dims(kv, 0, -3), heads, g.dims(kv, -2)], 0), False)


def _same_heads(key: Node, value: Node) -> bool:
    """Whether the key and value's numbers of heads (dim -3) are known here and the same: the query
    heads can then be grouped per key/value head; else each key/value head is repeated."""
    k, v = key.get_output_partial_shape(0), value.get_output_partial_shape(0)
    if not (k.rank.is_static and v.rank.is_static):
        return False
    heads = k[k.rank.get_length() - 3]
    return heads.is_static and heads == v[v.rank.get_length() - 3]


def _grouped(g: Graph, x: Node, query: Node, kv: Node) -> Node:
    """(..., Hq, L, X) -> (..., Hkv, G * L, X), G = Hq / Hkv: the query heads that share a key/value
    head side by side (head h reads key/value head h // G), so that attention against the key and
    value's own Hkv heads serves them all: the cache is read as it is, never repeated per head."""
    kv_heads = g.dims(kv, -3, -2)
    rows = ops.multiply(ops.divide(g.dims(query, -3, -2), kv_heads), g.dims(x, -2, -1))
    return ops.reshape(x, ops.concat([g.dims(x, 0, -3), kv_heads, rows, g.dims(x, -1)], 0), False)


def _ungrouped(g: Graph, x: Node, query: Node) -> Node:
    """(..., Hkv, G * L, X) -> (..., Hq, L, X), ``_grouped``'s inverse (Hq and L: the query's; the
    batch dims x's own, where the query's broadcast against the key's)."""
    return ops.reshape(x, ops.concat([g.dims(x, 0, -3), g.dims(query, -3, -1), g.dims(x, -1)], 0), False)


def _rows_broadcast(mask: Node) -> bool:
    """Whether ``mask`` has one row for every head and query position (its dims -3 and -2 are 1, or
    absent): it then broadcasts against grouped scores as it is."""
    shape = mask.get_output_partial_shape(0)
    if not shape.rank.is_static:
        return False
    rank = shape.rank.get_length()
    return all(shape[i].is_static and shape[i].get_length() == 1 for i in range(max(0, rank - 3), rank - 1))


def _grouped_mask(g: Graph, mask: Node, query: Node, key: Node) -> Node:
    """A mask broadcastable to the scores (..., Hq, L, S), for the grouped scores (..., Hkv, G * L, S)."""
    if _rows_broadcast(mask):
        return mask
    scores = ops.concat([g.dims(query, 0, -1), g.dims(key, -2, -1)], 0)
    return _grouped(g, ops.broadcast(mask, scores, "bidirectional"), query, key)


def _causal(g: Graph, query: Node, key: Node) -> Node:
    """torch's is_causal as a (L, S) bool mask: query row i sees key positions 0..i."""

    def positions(x: Node) -> Node:
        size = ops.squeeze(g.dims(x, -2, -1), g.ints([0]))
        return ops.range(g.const(0, "int64"), size, g.const(1, "int64"), "i64")

    return ops.less_equal(ops.unsqueeze(positions(key), g.ints([0])), ops.unsqueeze(positions(query), g.ints([1])))


def build_sdpa(
    g: Graph,
    query: Node,
    key: Node,
    value: Node,
    attn_mask: Node | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> Node:
    dtype = dtype_of(query)
    factor = g.const(scale, dtype) if scale is not None else None
    if enable_gqa and _same_heads(key, value):
        # the query heads grouped per key/value head, no copy of the key and value per query head
        # (one attention of a 0.5B Qwen2's decode step, fourteen query heads over two key/value heads,
        # 256 positions: 100 us against 439 on an AVX2 EPYC); is_causal becomes a mask, as the grouped
        # rows are no longer the query's positions
        if is_causal:  # the contract takes no mask with is_causal
            attn_mask = _causal(g, query, key)
        grouped = _grouped(g, query, query, key)
        mask = None if attn_mask is None else _grouped_mask(g, attn_mask, query, key)
        out = _ungrouped(g, ops.scaled_dot_product_attention(grouped, key, value, mask, factor, False), query)
        if attn_mask is None:
            return out
    else:
        if enable_gqa:  # the key's and value's heads differ, or are not known here: each repeated
            key, value = _repeat_heads(g, key, query), _repeat_heads(g, value, query)
        if attn_mask is None:
            return ops.scaled_dot_product_attention(query, key, value, None, factor, is_causal)
        out = ops.scaled_dot_product_attention(query, key, value, attn_mask, factor, False)
    # a fully masked row gives zeros, as torch, not NaN
    keep = attn_mask if dtype_of(attn_mask) == BOOL else ops.not_equal(attn_mask, g.const(-numpy.inf, dtype))
    any_kept = ops.reduce_logical_or(keep, g.ints([-1]), True)
    # the rows' flags broadcast over the value's dim first: the CPU plugin (2026.4) fuses a Select
    # whose flags are (..., L, 1) into its attention subgraph and computes it wrong where the query
    # length is dynamic and the head size 128, 192 or 256 (JetMoE's prefill: logits 0.15-0.72 off)
    rows = ops.broadcast(any_kept, ops.concat([g.dims(any_kept, 0, -1), g.dims(out, -1)], 0))
    return ops.select(rows, out, g.const(0, dtype))


def _fix_shape(node: Node, shape: tuple[int, ...]) -> None:
    if node.get_type_name() == "Parameter":
        node.set_partial_shape(openvino.PartialShape(list(shape)))


embedding = ov_kernel("embedding", build_embedding, check=check_embedding)


def _conv_kernel(op: str) -> Any:
    """The op's kernel: the weight's shape goes in as an attribute (one compiled model per shape)."""
    inner = ov_kernel(
        op,
        build_conv,
        names=("x", "weight", "bias", "stride", "padding", "dilation", "groups", "weight_shape"),
        roles=(TENSOR, TENSOR, TENSOR, ATTRIBUTE, ATTRIBUTE, ATTRIBUTE, ATTRIBUTE, ATTRIBUTE),
    )

    def kernel(
        x: numpy.ndarray,
        weight: numpy.ndarray,
        bias: numpy.ndarray | None,
        stride: tuple[int, ...],
        padding: Padding,
        dilation: tuple[int, ...],
        groups: int,
    ) -> Any:
        """One compiled model per weight shape (the CPU plugin has no dynamic-shape weights); any input size."""
        return inner(x, weight, bias, stride, padding, dilation, groups, weight.shape)

    def prepare(args: tuple[Any, ...], constants: frozenset[str]) -> Any:
        return inner.prepare((*args, args[1].shape), constants)  # type: ignore[attr-defined]

    def chain(
        g: Graph,
        x: Node,
        weight: Node,
        bias: Node | None,
        stride: tuple[int, ...],
        padding: Padding,
        dilation: tuple[int, ...],
        groups: int,
    ) -> Node:
        """In a partition: the weight's shape is static there (a constant, or an input of fixed size)."""
        shape = weight.get_output_partial_shape(0)
        if shape.is_dynamic:
            raise ValueError(f"the CPU plugin's convolution needs a static weight shape, found {shape}")
        return build_conv(g, x, weight, bias, stride, padding, dilation, groups, tuple(shape.to_shape()))

    kernel.__name__ = kernel.__qualname__ = op
    kernel.prepare = prepare  # type: ignore[attr-defined]
    kernel.chain = chain  # type: ignore[attr-defined]
    return kernel


conv1d = _conv_kernel("conv1d")
conv2d = _conv_kernel("conv2d")
scaled_dot_product_attention = ov_kernel("scaled_dot_product_attention", build_sdpa)
