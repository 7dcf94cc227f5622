"""Weight-only quantized linear as OpenVINO's weight decompression: the codes as a u8 / u4
Constant (N, groups, group), Convert to x's type, Subtract the zero point, Multiply by the scale,
Reshape to (N, K), MatMul with transpose_b. The CPU plugin compiles that pattern into one
FullyConnected that reads the compressed weight (docs/quantized.md); the model keeps 1 or 0.5 bytes
a weight.

A constant qweight (``opcore.resolve``'s, a partition's) becomes the u8 / u4 Constant itself (its
packed bytes are OpenVINO's u4 order: the even index in the low nibble); a fed one is unpacked in
the graph (bitwise and / shift), which is correct but not compressed. Symmetric codes subtract the
middle code (128 or 8) as a u8 constant. The model is keyed on K and N (the decompression's reshape).

``embedding_wq``: Gather of the u8 codes (and scales, zero points) by the indices, then Convert,
Subtract, Multiply on the rows picked; 4-bit pairs unpacked with bitwise and / shift.
"""

from __future__ import annotations

import numpy
import openvino
import openvino.opset15 as ops15

from opcore.extend import embedding_wq_kernel, group_of, linear_wq_kernel
from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops, ov_type

__all__ = ["build_embedding_wq", "build_linear_wq", "embedding_wq", "linear_wq"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = ("embedding_wq", "linear_wq")


def _codes(g: Graph, qweight: Node, bits: int, n: int, groups: int, group: int) -> Node:
    """The codes as a (N, groups, group) node of u8 / u4 (a constant) or u8 (unpacked in the graph)."""
    if qweight.get_type_name() == "Constant":
        # the codes' own bytes read as u8 / u4 (no copy where the constant shares its array's memory);
        # a weight of the partition still (a saved partition takes it from the plan's file)
        held = g.shared(qweight)
        data = held if held is not None and held.dtype == numpy.uint8 else numpy.array(qweight.get_data(), numpy.uint8)
        tensor = openvino.Tensor(data, [n, groups, group], openvino.Type.u8 if bits == 8 else openvino.Type.u4)
        g.keep.append(data)
        codes = ops.constant(tensor, shared_memory=True)
        g.weights.append((codes, data))
        return codes
    if bits == 4:
        low = ops15.bitwise_and(qweight, g.const(15, "uint8"))
        high = ops15.bitwise_right_shift(qweight, g.const(4, "uint8"))
        pairs = ops.concat([ops.unsqueeze(low, g.ints([2])), ops.unsqueeze(high, g.ints([2]))], 2)
        qweight = pairs
    return ops.reshape(qweight, g.ints([n, groups, group]), False)


def build_linear_wq(
    g: Graph,
    x: Node,
    qweight: Node,
    scale: Node,
    zero: Node | None,
    b: Node | None,
    bits: int,
    group_size: int,
    in_features: int,
    out_features: int,
) -> Node:
    group = group_of(group_size, in_features)
    if not in_features:
        raise ValueError("an empty weight has nothing to decompress")
    n, groups = out_features, in_features // group
    dtype = dtype_of(x)
    kind = ov_type(dtype)
    weight = ops.convert(_codes(g, qweight, bits, n, groups, group), kind)
    if zero is None:
        # the middle code as a u8 Constant converted, as a zero point is: the pattern the CPU plugin's
        # dynamic quantization of x recognizes (a float constant there keeps x float whatever it is told)
        weight = ops.subtract(weight, ops.convert(g.const(1 << (bits - 1), "uint8"), kind))
    else:
        weight = ops.subtract(weight, ops.reshape(ops.convert(zero, kind), g.ints([n, groups, 1]), False))
    scales = scale if dtype_of(scale) == dtype else ops.convert(scale, kind)
    weight = ops.multiply(weight, ops.reshape(scales, g.ints([n, groups, 1]), False))
    weight = ops.reshape(weight, g.ints([n, in_features]), False)
    out = ops.matmul(x, weight, False, True)
    return ops.add(out, b) if b is not None else out


def _chain(
    g: Graph, x: Node, qweight: Node, scale: Node, zero: Node | None, b: Node | None, bits: int, group_size: int
) -> Node:
    """In a partition: K and N from the codes' static shape (a constant, or an input of fixed size)."""
    shape = qweight.get_output_partial_shape(0)
    if shape.is_dynamic:
        raise ValueError(f"the decompression needs the static shape of the quantized weight, found {shape}")
    rows, width = shape.to_shape()
    return build_linear_wq(g, x, qweight, scale, zero, b, bits, group_size, width * 8 // bits, rows)


linear_wq = linear_wq_kernel(ov_kernel, build_linear_wq, _chain)


def build_embedding_wq(
    g: Graph, input: Node, qweight: Node, scale: Node, zero: Node | None, bits: int, group_size: int, width: int
) -> Node:
    """Gather the rows' codes, scales and zero points, then (code - zero) * scale per group; ``width``:
    the codes' bytes a row (K * bits / 8)."""
    k = width * 8 // bits
    group = group_of(group_size, k)
    dtype = dtype_of(scale)
    kind = ov_type(dtype)
    codes = ops.gather(qweight, input, 0)
    if bits == 4:
        low = ops15.bitwise_and(codes, g.const(15, "uint8"))
        high = ops15.bitwise_right_shift(codes, g.const(4, "uint8"))
        codes = ops.concat([ops.unsqueeze(low, g.ints([-1])), ops.unsqueeze(high, g.ints([-1]))], -1)
    rows = ops.shape_of(input, "i64")
    values = ops.reshape(ops.convert(codes, kind), ops.concat([rows, g.ints([k // group, group])], 0), False)
    if zero is None:
        values = ops.subtract(values, g.const(1 << (bits - 1), dtype))
    else:
        values = ops.subtract(values, ops.unsqueeze(ops.convert(ops.gather(zero, input, 0), kind), g.ints([-1])))
    values = ops.multiply(values, ops.unsqueeze(ops.gather(scale, input, 0), g.ints([-1])))
    return ops.reshape(values, ops.concat([rows, g.ints([k])], 0), False)


def _chain_gather(
    g: Graph, input: Node, qweight: Node, scale: Node, zero: Node | None, bits: int, group_size: int
) -> Node:
    """In a partition: the row width from the codes' static shape."""
    shape = qweight.get_output_partial_shape(0)
    if shape.is_dynamic:
        raise ValueError(f"the dequantization needs the static shape of the quantized table, found {shape}")
    return build_embedding_wq(g, input, qweight, scale, zero, bits, group_size, shape.to_shape()[1])


embedding_wq = embedding_wq_kernel(ov_kernel, build_embedding_wq, _chain_gather)
