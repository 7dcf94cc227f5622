"""A small builder of OpenVINO models over ``openvino.opset13``: parameters with dynamic dimensions,
constants, casts and shape helpers.

Parameters have a static rank and dynamic sizes (``PartialShape([-1] * rank)``), so one compiled
model serves every size of the same ranks. Constant tensors (``prepare``'s weights) become
``Constant`` nodes that share the numpy memory.

>>> g = Graph("relu")
>>> x = g.input(numpy.dtype("float32"), 2)
>>> g.model(ops.relu(x)).get_parameters()[0].get_partial_shape()
<PartialShape: [?,?]>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy
import openvino
import openvino.opset13 as ops

from opcore.extend import Scalar

__all__ = [
    "BFLOAT16",
    "Graph",
    "Node",
    "Scalar",
    "constant",
    "dtype_of",
    "floating",
    "ops",
    "ov_type",
    "rank_of",
    "tensor_of",
]

Node = Any  # an openvino Node or Output

_OV_TYPES: dict[numpy.dtype, openvino.Type] = {
    numpy.dtype(numpy.bool_): openvino.Type.boolean,
    numpy.dtype(numpy.uint8): openvino.Type.u8,
    numpy.dtype(numpy.int8): openvino.Type.i8,
    numpy.dtype(numpy.int16): openvino.Type.i16,
    numpy.dtype(numpy.int32): openvino.Type.i32,
    numpy.dtype(numpy.int64): openvino.Type.i64,
    numpy.dtype(numpy.float16): openvino.Type.f16,
    numpy.dtype(numpy.float32): openvino.Type.f32,
    numpy.dtype(numpy.float64): openvino.Type.f64,
}
# numpy has no bfloat16: ml_dtypes' stands for it (opcore's DType.BFLOAT16.to_numpy()); the binding
# knows none, so bfloat16 arrays cross as their int16 view with the type given (tensor_of)
BFLOAT16 = numpy.dtype(ml_dtypes.bfloat16)
_OV_TYPES[BFLOAT16] = openvino.Type.bf16
_NUMPY_TYPES = {str(t): d for d, t in _OV_TYPES.items()}

# Python numbers fed at run time: ints as int32 (the CPU plugin runs int64 as int32; the checker
# declines larger values), floats as float64 (cast in the graph: no numpy overflow warning).
_SCALAR_TYPES: dict[type, numpy.dtype] = {
    bool: numpy.dtype(numpy.bool_),
    int: numpy.dtype(numpy.int32),
    float: numpy.dtype(numpy.float64),
}


def floating(dtype: numpy.dtype) -> bool:
    """Whether ``dtype`` is a floating dtype (ml_dtypes' bfloat16 is numpy kind "V", not "f")."""
    return dtype.kind == "f" or dtype == BFLOAT16


def ov_type(dtype: numpy.dtype) -> openvino.Type:
    return _OV_TYPES[numpy.dtype(dtype)]


def tensor_of(array: numpy.ndarray) -> openvino.Tensor:
    """An openvino.Tensor sharing ``array``'s memory (C-contiguous and writeable, else ValueError or
    RuntimeError); a bfloat16 array through its int16 view."""
    if array.dtype == BFLOAT16:
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise ValueError("a shared bfloat16 tensor needs C-contiguous, writeable memory")
        return openvino.Tensor(array.view(numpy.int16), array.shape, openvino.Type.bf16)
    return openvino.Tensor(array, shared_memory=True)


def constant(array: numpy.ndarray, shared: bool = False) -> Node:
    """A Constant of ``array`` (sharing its memory where ``shared``; bfloat16 through tensor_of)."""
    if array.dtype == BFLOAT16:
        return ops.constant(tensor_of(array), shared_memory=shared)
    return ops.constant(array, shared_memory=shared)


def dtype_of(node: Node) -> numpy.dtype:
    """The numpy dtype of a node's (first) output."""
    return _NUMPY_TYPES[str(node.get_output_element_type(0))]


def _output_key(node: Node) -> tuple[str, int]:
    owner = node.get_node() if hasattr(node, "get_node") else node
    return owner.get_friendly_name(), node.get_index() if hasattr(node, "get_index") else 0


def rank_of(node: Node) -> int:
    return node.get_output_partial_shape(0).rank.get_length()


@dataclass(slots=True)
class Graph:
    name: str
    parameters: list[Any] = field(default_factory=list)
    # feed positions of Scalar parameters and the dtype their value is converted to
    scalar_feeds: list[tuple[int, numpy.dtype]] = field(default_factory=list)
    # arrays whose memory shared Constants read (kept alive with the compiled model)
    keep: list[numpy.ndarray] = field(default_factory=list)
    # each weight's Constant and the array it shares (a saved partition may take it from the plan's file)
    weights: list[tuple[Node, numpy.ndarray]] = field(default_factory=list)
    # a partition's node outputs -> their sizes (None where they change per call): what OpenVINO's
    # shape inference may not know (a reshape to a shape fed at run time), a split's builder needs
    known: dict[tuple[str, int], tuple[int | None, ...]] = field(default_factory=dict)

    def annotate(self, node: Node, meta: Any, dims: Sequence[int | None] | None = None) -> Node:
        """Record a partition node output's sizes (``dims``; None: the meta's, static)."""
        self.known.setdefault(_output_key(node), tuple(dims) if dims is not None else tuple(meta.shape))
        return node

    def size(self, node: Node, axis: int) -> int | None:
        """The static size of ``node`` at ``axis``: OpenVINO's shape inference, else the recorded one."""
        rank = rank_of(node)
        found = node.get_output_partial_shape(0)[axis % max(rank, 1)]
        if found.is_static:
            return int(found.get_length())
        recorded = self.known.get(_output_key(node))
        return recorded[axis % max(rank, 1)] if recorded is not None and len(recorded) == rank else None

    def input(self, dtype: numpy.dtype, rank: int, dims: Sequence[int | None] | None = None) -> Node:
        """A parameter of ``rank`` dynamic dimensions, or of sizes ``dims`` (None: dynamic)."""
        sizes = [-1] * rank if dims is None else [-1 if d is None else d for d in dims]
        parameter = ops.parameter(openvino.PartialShape(sizes), ov_type(dtype), name=f"in{len(self.parameters)}")
        self.parameters.append(parameter)
        return parameter

    def scalar(self, scalar: Scalar, compute: numpy.dtype | None = None) -> Node:
        """A Python number: baked when known, else fed at run time. A fed float goes in as ``compute``
        when that is a floating dtype: the CPU plugin's Convert saturates an infinite float64 to the
        largest float32, so a float64 feed converted in the graph would turn inf into 3.4e38."""
        dtype = _SCALAR_TYPES[scalar.kind]
        if compute is not None and scalar.value is None and scalar.kind is float and floating(compute):
            dtype = compute
        if scalar.value is not None:
            return self.const(numpy.asarray(scalar.value, dtype=dtype))
        node = self.input(dtype, 0)
        self.scalar_feeds.append((len(self.parameters) - 1, dtype))
        return node

    def weight(self, array: numpy.ndarray) -> Node:
        """A constant tensor sharing ``array``'s memory (the CPU plugin repacks it at compile time)."""
        if not (array.flags.c_contiguous and array.flags.writeable):  # shared memory must be both
            array = numpy.array(array, order="C")
        self.keep.append(array)
        node = constant(array, shared=True)
        self.weights.append((node, array))
        return node

    def shared(self, node: Node) -> numpy.ndarray | None:
        """The array a weight's Constant (``weight``'s node) shares; None for any other node."""
        name = node.get_friendly_name()
        return next((array for weight, array in self.weights if weight.get_friendly_name() == name), None)

    def const(self, value: Any, dtype: numpy.dtype | str | None = None) -> Node:
        return constant(numpy.array(value, dtype=dtype, order="C"))

    def ints(self, values: Sequence[int]) -> Node:
        return ops.constant(numpy.asarray(list(values), dtype=numpy.int64))

    def shape_of(self, values: Sequence[int | Node]) -> Node:
        """A 1-D int64 shape from ints and 0-D nodes (sizes computed at run time, fed as inputs)."""
        if all(isinstance(v, int) for v in values):
            return self.ints(values)  # type: ignore[arg-type]
        pieces = [
            self.ints([v])
            if isinstance(v, int)
            else ops.reshape(self.cast(v, numpy.dtype(numpy.int64)), self.ints([1]), False)
            for v in values
        ]
        return ops.concat(pieces, 0) if len(pieces) > 1 else pieces[0]

    def cast(self, node: Node, dtype: numpy.dtype | str) -> Node:
        dtype = numpy.dtype(dtype)
        if dtype_of(node) == dtype:
            return node
        return ops.convert(node, ov_type(dtype))

    def dims(self, node: Node, start: int, end: int | None = None) -> Node:
        """Sizes ``start:end`` of ``node``'s shape (int64, 1-D; negative positions count from the end)."""
        rank = rank_of(node)
        positions = list(range(rank))[start:end]
        return ops.gather(ops.shape_of(node, "i64"), self.ints(positions), 0)

    def result(self, node: Node) -> Node:
        """``node`` as a model output: a Parameter or a Constant goes through an op first (a result
        must follow one). A Parameter's is Select(True, x, x), which keeps every bit: the CPU plugin
        folds a same-type Convert away, and a Parameter straight to a Result gave a previous call's
        input back (clone, transpose(x, 0, 0))."""
        if node.get_type_name() == "Parameter":
            return ops.select(self.const(True), node, node)
        if node.get_type_name() == "Constant":
            return ops.convert(node, node.get_output_element_type(0))
        return node

    def model(self, *outputs: Node) -> openvino.Model:
        """The model with these outputs (in order)."""
        return openvino.Model(list(outputs), self.parameters, self.name)
