"""A small builder of ONNX graphs over ``onnx.helper``: named values with their dtype and rank.

Inputs get symbolic dimensions (``dim_param``), so one model serves every size of the same
ranks. Constant tensors (``prepare``'s weights) become initializers; large ones are handed to
ONNX Runtime as external initializers that share the numpy memory instead of being copied
into the protobuf.

>>> g = Graph("relu")
>>> x = g.input(numpy.dtype("float32"), 2)
>>> y = g.op("Relu", x)
>>> g.model(y).graph.node[0].op_type
'Relu'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy
from numpy.typing import DTypeLike
from onnx import ModelProto, TensorProto, helper, numpy_helper

from opcore.extend import PluginError, Scalar, TensorMeta
from opcore_onnxruntime.rotary import ROTARY_OPSET, rotary_once, unread_dropped

__all__ = ["EXTERNAL_BYTES", "Graph", "Scalar", "Value", "onnx_type"]

# Constants at least this large are passed as external initializers (shared memory).
EXTERNAL_BYTES = 1 << 16
# the most elements of a constant the model-level passes read (a Reshape's target, a Split's sizes, axes)
SMALL = 64

_ONNX_TYPES: dict[numpy.dtype, int] = {
    numpy.dtype(numpy.bool_): TensorProto.BOOL,
    numpy.dtype(numpy.uint8): TensorProto.UINT8,
    numpy.dtype(numpy.int8): TensorProto.INT8,
    numpy.dtype(numpy.int16): TensorProto.INT16,
    numpy.dtype(numpy.int32): TensorProto.INT32,
    numpy.dtype(numpy.int64): TensorProto.INT64,
    numpy.dtype(numpy.float16): TensorProto.FLOAT16,
    numpy.dtype(numpy.float32): TensorProto.FLOAT,
    numpy.dtype(numpy.float64): TensorProto.DOUBLE,
}


_SCALAR_TYPES: dict[type, numpy.dtype] = {
    bool: numpy.dtype(numpy.bool_),
    int: numpy.dtype(numpy.int64),
    float: numpy.dtype(numpy.float64),
}


def onnx_type(dtype: numpy.dtype) -> int:
    """The ONNX element type of a numpy dtype."""
    return _ONNX_TYPES[numpy.dtype(dtype)]


def _without_trailing_none(inputs: tuple[Value | None, ...]) -> tuple[Value | None, ...]:
    end = len(inputs)
    while end and inputs[end - 1] is None:
        end -= 1
    return inputs[:end]


def _reshapes_once(nodes: list[Any], constants: Mapping[str, numpy.ndarray], outputs: set[str]) -> list[Any]:
    """``nodes`` with a Reshape of a Reshape's result reading the first one's input instead (the
    element count is the same, so the second target alone gives the shape), and the Reshapes nothing
    reads any more left out: a split attention's head merge of one token (Reshape, Reshape, a
    size-1 transpose as a Reshape, Reshape) is then one node. Only where the second's zeros are
    sizes (allowzero=1) or its target is a constant without a 0, whose meaning reads no input dim.
    onnxruntime's own optimizer leaves such chains (measured: 6 a layer in a decode step).

    ``constants``: the small initializers' values (the targets).

    >>> from onnx import helper
    >>> shape = {"s": numpy.asarray([4, 2], numpy.int64)}
    >>> chain = [helper.make_node("Reshape", ["x", "s"], ["a"]), helper.make_node("Reshape", ["a", "s"], ["b"])]
    >>> [(n.input[0], n.output[0]) for n in _reshapes_once(chain, shape, {"b"})]
    [('x', 'b')]
    """
    reshapes = {n.output[0]: n for n in nodes if n.op_type == "Reshape"}
    if not reshapes:
        return nodes

    def independent(node: Any) -> bool:  # its target means the same whatever its input's dims
        if any(a.name == "allowzero" and a.i == 1 for a in node.attribute):
            return True
        target = constants.get(node.input[1])
        return target is not None and 0 not in target.tolist()

    out: list[Any] = []
    for node in nodes:
        source: str = node.input[0] if node.op_type == "Reshape" and node.input else ""
        if source not in reshapes or not independent(node):
            out.append(node)
            continue
        while source in reshapes:
            source = reshapes[source].input[0]
        bypass = helper.make_node("Reshape", [source, *node.input[1:]], list(node.output), name=node.name)
        bypass.attribute.extend(node.attribute)
        out.append(bypass)
    return unread_dropped(out, outputs, frozenset({"Reshape"}))


@dataclass(frozen=True, slots=True)
class Value:
    """A named value of the graph; ``rank`` None when the builder does not track it."""

    name: str
    dtype: numpy.dtype
    rank: int | None

    @property
    def ndim(self) -> int:
        """The rank, for a builder that needs it (inputs and annotated partition values have one).

        >>> Graph("x").input(numpy.dtype("float32"), 2).ndim
        2
        """
        if self.rank is None:
            raise PluginError(
                f"a graph builder needs the rank of {self.name}, which the node that made it did not track",
                fix="pass rank= to Graph.op for that node, or Graph.annotate the value with its meta",
            )
        return self.rank


@dataclass(slots=True)
class _Input:
    name: str
    dtype: numpy.dtype | None
    rank: int
    dims: tuple[int | None, ...] | None = None  # None: every dimension symbolic; else None where symbolic


@dataclass(slots=True)
class Graph:
    """Nodes, inputs (in feed order), initializers and external initializers of one model."""

    name: str
    opset: int = 21
    ir_version: int = 10
    nodes: list[Any] = field(default_factory=list)
    inputs: list[_Input] = field(default_factory=list)
    initializers: list[TensorProto] = field(default_factory=list)
    # name -> array for external initializers (kept alive by the session that uses them)
    externals: dict[str, numpy.ndarray] = field(default_factory=dict)
    # feed positions of Scalar inputs and the dtype they are converted to
    scalar_feeds: list[tuple[int, numpy.dtype]] = field(default_factory=list)
    # prefix of node names (a partition sets "n<index>." per captured node, to trace runtime errors)
    tag: str = ""
    # value name -> its static sizes (None where dynamic), where known: a partition's inputs and
    # annotated node outputs (the builders of list results need the size of the dim they cut)
    sizes: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    # operator domains other than ONNX's own that nodes use (com.microsoft: MatMulNBits), version 1
    domains: set[str] = field(default_factory=set)
    # value name -> its dtype, for the model-level fusions (opcore_onnxruntime.rotary)
    dtypes: dict[str, numpy.dtype] = field(default_factory=dict)
    # values a builder made once for all its nodes alike, by the builder's key (index's indices with
    # negatives counted from the end, per indices and static size: a decode step's 60 cache gathers
    # at one window share one; onnxruntime does not merge equal nodes reading equal constants)
    shared: dict[tuple[Any, ...], Value] = field(default_factory=dict)
    _count: int = 0

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    # -- sources ---------------------------------------------------------------------------------

    def input(self, dtype: numpy.dtype, rank: int, dims: Sequence[int | None] | None = None) -> Value:
        """A graph input of ``rank`` symbolic dimensions, or of sizes ``dims`` (None: symbolic)."""
        name = f"in{len(self.inputs)}"
        self.inputs.append(_Input(name, numpy.dtype(dtype), rank, tuple(dims) if dims is not None else None))
        if dims is not None:
            self.sizes[name] = tuple(dims)
        self.dtypes[name] = numpy.dtype(dtype)
        return Value(name, numpy.dtype(dtype), rank)

    def scalar(self, scalar: Scalar) -> Value:
        """A Python number as a 0-D value: a constant if baked, else a 0-D input fed at run time.

        Its dtype is bool, int64 or float64 after the Python type; builders cast it where needed.
        """
        dtype = _SCALAR_TYPES[scalar.kind]
        if scalar.value is not None:
            return self.const(numpy.asarray(scalar.value, dtype=dtype))
        value = self.input(dtype, 0)
        self.scalar_feeds.append((len(self.inputs) - 1, dtype))
        return value

    def weight(self, array: numpy.ndarray) -> Value:
        """A constant tensor (prepared weights): an initializer ONNX Runtime may pre-pack."""
        array = numpy.require(array, requirements="C")  # ascontiguousarray would make a 0-D array 1-D
        name = self._fresh("weight")
        if array.nbytes >= EXTERNAL_BYTES:
            tensor = TensorProto()
            tensor.name = name
            tensor.data_type = onnx_type(array.dtype)
            tensor.dims.extend(array.shape)
            tensor.data_location = TensorProto.EXTERNAL
            entry = tensor.external_data.add()
            entry.key, entry.value = "location", name
            self.initializers.append(tensor)
            self.externals[name] = array
        else:
            self.initializers.append(numpy_helper.from_array(array, name))
        self.sizes[name] = array.shape
        self.dtypes[name] = array.dtype
        return Value(name, array.dtype, array.ndim)

    def const(self, array: Any, dtype: numpy.dtype | str | None = None) -> Value:
        """A small constant (an attribute value, axes, a shape)."""
        array = numpy.asarray(array, dtype=dtype)
        name = self._fresh("const")
        self.initializers.append(numpy_helper.from_array(array, name))
        return Value(name, array.dtype, array.ndim)

    def ints(self, values: Sequence[int]) -> Value:
        """A 1-D int64 constant (axes, shapes, perms given as inputs)."""
        return self.const(numpy.asarray(list(values), dtype=numpy.int64))

    def shape_of(self, values: Sequence[int | Value]) -> Value:
        """A 1-D int64 shape from ints and 0-D values (sizes computed at run time, fed as inputs)."""
        if all(isinstance(v, int) for v in values):
            return self.ints(values)  # type: ignore[arg-type]
        pieces = [
            self.ints([v])
            if isinstance(v, int)
            else self.op("Reshape", self.cast(v, numpy.dtype(numpy.int64)), self.ints([1]), rank=1)
            for v in values
        ]
        return self.op("Concat", *pieces, axis=0, rank=1) if len(pieces) > 1 else pieces[0]

    def internalize(self) -> None:
        """Copy the external initializers' data into the model (for runtimes that cannot share it)."""
        for index, tensor in enumerate(self.initializers):
            if tensor.name in self.externals:
                self.initializers[index] = numpy_helper.from_array(self.externals[tensor.name], tensor.name)
        self.externals.clear()

    # -- nodes -----------------------------------------------------------------------------------

    def op(
        self,
        op_type: str,
        *inputs: Value | None,
        dtype: DTypeLike | None = None,
        rank: int | None = -1,
        domain: str = "",
        **attributes: Any,
    ) -> Value:
        """One node with one output. dtype / rank default to the first input's (rank None: unknown).

        A None input is an omitted optional input (written as the empty name).
        """
        first = next(v for v in inputs if v is not None)
        inputs = _without_trailing_none(inputs)  # onnxruntime crashes on a trailing empty input name
        name = self._fresh("t")
        if domain:
            self.domains.add(domain)
        self.nodes.append(
            helper.make_node(
                op_type,
                [v.name if v is not None else "" for v in inputs],
                [name],
                name=f"{self.tag}{op_type}{self._count}",
                domain=domain or None,
                **{k: v for k, v in attributes.items() if v is not None},
            )
        )
        out_dtype = first.dtype if dtype is None else numpy.dtype(dtype)
        self.dtypes[name] = out_dtype
        return Value(name, out_dtype, first.rank if rank == -1 else rank)

    def cast(self, value: Value, dtype: numpy.dtype | str) -> Value:
        """``value`` converted to ``dtype`` (no node when it already is)."""
        dtype = numpy.dtype(dtype)
        if value.dtype == dtype:
            return value
        return self.op("Cast", value, dtype=dtype, to=onnx_type(dtype))

    def shape(self, value: Value, start: int | None = None, end: int | None = None) -> Value:
        """The (int64) shape of ``value``, or a slice of it."""
        return self.op("Shape", value, dtype=numpy.int64, rank=1, start=start, end=end)

    # -- the model -------------------------------------------------------------------------------

    def annotate(self, value: Value, meta: TensorMeta, dims: Sequence[int | None] | None = None) -> Value:
        """``value`` with the rank of its meta (a partition's node outputs: builders track ranks
        only as far as their own op needs, the meta is exact); ``dims``: its sizes with None where
        they change per call (else the meta's sizes are taken as static)."""
        self.sizes.setdefault(value.name, tuple(dims) if dims is not None else meta.shape)
        return value if value.rank == meta.ndim else Value(value.name, value.dtype, meta.ndim)

    def size(self, value: Value, axis: int) -> int | None:
        """The static size of ``value`` at ``axis``, or None when it is dynamic or not known."""
        return self.sizes.get(value.name, (None,) * (axis + 1))[axis]

    def result(self, value: Value) -> Value:
        """``value`` as a graph output: an input or a constant goes through an Identity node first
        (a graph output must be a node's output)."""
        if value.name in {i.name for i in self.inputs} or value.name.startswith(("weight", "const")):
            return self.op("Identity", value)
        return value

    def _small_constants(self) -> dict[str, numpy.ndarray]:
        """The values of the initializers of at most SMALL elements held in the model (axes, sizes,
        shapes): what the model-level passes read."""
        return {
            t.name: numpy_helper.to_array(t)
            for t in self.initializers
            if t.data_location != TensorProto.EXTERNAL and numpy.prod(t.dims, dtype=numpy.int64) <= SMALL
        }

    def model(self, *outputs: Value) -> ModelProto:
        """The model with these outputs (in order)."""
        inputs = [
            helper.make_tensor_value_info(
                i.name,
                onnx_type(i.dtype),
                [
                    f"{i.name}_{d}" if i.dims is None or i.dims[d] is None else i.dims[d]  # type: ignore[misc]
                    for d in range(i.rank)
                ],
            )
            for i in self.inputs
            if i.dtype is not None
        ]
        results = [helper.make_tensor_value_info(o.name, onnx_type(o.dtype), None) for o in outputs]
        returned, small = {o.name for o in outputs}, self._small_constants()
        nodes = _reshapes_once(self.nodes, small, returned)
        if self.opset >= ROTARY_OPSET:
            nodes = rotary_once(nodes, small, self.sizes, self.dtypes, returned)
        graph = helper.make_graph(nodes, self.name, inputs, results, initializer=self.initializers)
        return helper.make_model(
            graph,
            opset_imports=[
                helper.make_opsetid("", self.opset),
                *(helper.make_opsetid(domain, 1) for domain in sorted(self.domains)),
            ],
            ir_version=self.ir_version,
            producer_name="opcore-onnxruntime",
        )
