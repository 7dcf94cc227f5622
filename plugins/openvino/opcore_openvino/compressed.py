"""Weights already compressed in an OpenVINO model (NNCF's ``compress_weights``, optimum-intel's
exported IRs), read back as ``opcore.quantize.QuantizedWeight``: what ``linear_wq`` runs.

NNCF writes each compressed weight as a decompression subgraph in front of a MatMul:
``Constant(u8 | i8 | u4 | i4) -> Convert -> [Subtract(Convert(Constant zero))] -> Multiply(scale)
-> [Reshape (N, groups, group) -> (N, K)] -> [Convert] -> MatMul``. Signed codes (NNCF's symmetric
modes) become the contract's unsigned symmetric codes (+128 or +8); an unsigned zero point is kept
(4 bits: unpacked, one a byte). Scales come back as float32.

>>> weights = read_compressed_weights(openvino.Core().read_model("model.xml"))   # doctest: +SKIP
>>> weights["__module.model.layers.0.mlp.down_proj/aten::linear/MatMul"].bits     # doctest: +SKIP
4
"""

from __future__ import annotations

from typing import Any

import numpy
import openvino

from opcore.extend import QuantizedWeight, pack_int4

__all__ = ["read_compressed_weights", "weight_of_matmul"]

_CODES = {"u8": (8, False), "i8": (8, True), "u4": (4, False), "i4": (4, True)}


def _source(output: Any) -> Any:
    return output.get_node()


def _input(node: Any, index: int) -> Any:
    return node.input_value(index).get_node()


def _codes(node: Any) -> tuple[numpy.ndarray, int, bool] | None:
    """(codes as int values, bits, signed) of a compressed Constant, or None."""
    if node.get_type_name() != "Constant":
        return None
    kind = node.get_output_element_type(0).get_type_name()
    if kind not in _CODES:
        return None
    bits, signed = _CODES[kind]
    data = numpy.asarray(node.get_data())
    shape = tuple(node.get_output_shape(0))
    if bits == 4:  # get_data gives the packed bytes: the even element in the low nibble
        raw = numpy.ascontiguousarray(data).view(numpy.uint8).reshape(-1)
        codes = numpy.empty(raw.size * 2, numpy.int16)
        codes[0::2], codes[1::2] = raw & 15, raw >> 4
        codes = codes[: int(numpy.prod(shape))]
        if signed:
            codes = numpy.where(codes >= 8, codes - 16, codes)
        return codes.reshape(shape), bits, signed
    return data.astype(numpy.int16).reshape(shape), bits, signed


def weight_of_matmul(matmul: Any) -> QuantizedWeight | None:
    """The compressed weight feeding a MatMul's second input (transpose_b: (N, K)), or None when it is
    not a decompression subgraph this reader knows."""
    if matmul.get_type_name() != "MatMul":
        return None
    node = _input(matmul, 1)
    if node.get_type_name() == "Convert":  # decompressed in f16, converted to f32 for the MatMul
        node = _input(node, 0)
    reshape = None
    if node.get_type_name() == "Reshape":
        reshape, node = node, _input(node, 0)
    if node.get_type_name() != "Multiply":
        return None
    scale_node, product = _input(node, 1), _input(node, 0)
    if scale_node.get_type_name() != "Constant":
        scale_node, product = product, scale_node
    zero = None
    if product.get_type_name() == "Subtract":
        zero_node = _input(product, 1)
        if zero_node.get_type_name() == "Convert":
            zero_node = _input(zero_node, 0)
        found = _codes(zero_node)
        if found is None:
            return None
        zero = found[0]
        product = _input(product, 0)
    if product.get_type_name() != "Convert":
        return None
    found = _codes(_input(product, 0))
    if found is None or scale_node.get_type_name() != "Constant":
        return None
    codes, bits, signed = found
    transposed = matmul.get_transpose_b() if hasattr(matmul, "get_transpose_b") else True
    return _record(codes, bits, signed, numpy.asarray(scale_node.get_data(), numpy.float32), zero, reshape, transposed)


def _record(
    codes: numpy.ndarray,
    bits: int,
    signed: bool,
    scale: numpy.ndarray,
    zero: numpy.ndarray | None,
    reshape: Any,
    transposed: bool,
) -> QuantizedWeight | None:
    if not transposed or codes.ndim not in (2, 3):
        return None
    n = codes.shape[0]
    grouped = codes.ndim == 3 and reshape is not None
    group = codes.shape[2] if grouped else -1
    k = codes.shape[1] * (codes.shape[2] if codes.ndim == 3 else 1)
    groups = k // (group if grouped else k)
    middle = 1 << (bits - 1)
    unsigned = (codes + middle if signed else codes).reshape(n, k).astype(numpy.uint8)
    if zero is not None and signed:  # a signed zero point: the same shift as the codes
        zero = zero + middle
    scales = numpy.broadcast_to(scale.reshape(n, -1), (n, groups)).astype(numpy.float32)
    zeros = None if zero is None else numpy.broadcast_to(zero.reshape(n, -1), (n, groups)).astype(numpy.uint8)
    if zeros is not None and not signed and (zeros == middle).all():
        zeros = None  # NNCF's symmetric u8 layout with a constant middle zero point
    qweight = pack_int4(unsigned) if bits == 4 else unsigned
    return QuantizedWeight(
        numpy.ascontiguousarray(qweight),
        numpy.ascontiguousarray(scales),
        None if zeros is None else numpy.ascontiguousarray(zeros),
        bits,
        group,
    )


def read_compressed_weights(model: openvino.Model) -> dict[str, QuantizedWeight]:
    """Every MatMul's compressed weight, keyed by the MatMul's friendly name (uncompressed ones left out)."""
    found: dict[str, QuantizedWeight] = {}
    for node in model.get_ordered_ops():
        weight = weight_of_matmul(node)
        if weight is not None:
            found[node.get_friendly_name()] = weight
    return found
