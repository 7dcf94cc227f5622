"""The partition protocol: what a plan hands a graph backend, and what the backend hands back.

A *partition* is a run of captured nodes that one graph runtime (ONNX Runtime, OpenVINO, a
vendor's) compiles into **one** model. The plan describes it as a ``PartitionSpec`` (nodes in
opcore contract terms, inputs, baked-in constants, outputs, metas, dynamic axes); a backend's
``PartitionCompiler`` turns it into a ``CompiledPartition`` that runs it and saves it to portable
files. Backends offer their compiler through the ``opcore_partition_compiler`` hook
(``opcore.hookspecs``); ``opcore.graph.partition.compilers()`` collects them. This is plugin API
and lives in the core, below the plugin machinery; ``opcore.graph.partition`` re-exports it for the
graph runtimes that import it from there. It imports neither torch nor any runtime.

>>> import numpy
>>> from opcore.types import DType, TensorMeta
>>> meta = TensorMeta((2, 3), DType.FLOAT32)
>>> spec = PartitionSpec(
...     name="p0",
...     nodes=(PartNode("relu", (ValueRef("x"),), ("y",)),),
...     inputs=("x",), constants={}, outputs=("y",),
...     metas={"x": meta, "y": meta}, dynamic={"x": frozenset({0})},
... )
>>> spec.input_dims("x")
(None, 3)
"""

from __future__ import annotations

import contextlib
import contextvars
import pathlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy

from opcore.errors import Unsupported
from opcore.types import TensorMeta

__all__ = [
    "HOOK",
    "CompiledPartition",
    "PartNode",
    "PartitionCompiler",
    "PartitionError",
    "PartitionSpec",
    "SavedBytes",
    "ValueRef",
    "saved_bytes",
    "saving_weights",
]

HOOK = "opcore_partition_compiler"


@dataclass(frozen=True, slots=True)
class ValueRef:
    """A value of the graph (an input, a constant, or a node's output), by name."""

    name: str


@dataclass(frozen=True, slots=True)
class PartNode:
    """One node of a partition: an opcore contract applied to bound arguments.

    ``args`` are in the contract's schema order: a ValueRef for a Tensor, a tuple of ValueRef
    (or None) for ``Tensor[]`` / ``Tensor?[]``, None for an absent ``Tensor?``, plain Python values
    for scalars and attributes. ``outputs`` names the values it produces, one per contract output.
    """

    op: str
    args: tuple[Any, ...]
    outputs: tuple[str, ...]

    def refs(self) -> tuple[str, ...]:
        """The names of the values this node reads, in argument order.

        >>> PartNode("cat", ((ValueRef("a"), ValueRef("b")), 1), ("c",)).refs()
        ('a', 'b')
        """
        names: list[str] = []
        for arg in self.args:
            if isinstance(arg, ValueRef):
                names.append(arg.name)
            elif isinstance(arg, tuple):
                names.extend(v.name for v in arg if isinstance(v, ValueRef))
        return tuple(names)


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """What a graph backend compiles into one model.

    ``nodes`` are in topological order; ``inputs`` are fed at run time in this order;
    ``constants`` (weights) are baked into the model; ``outputs`` are returned in this order;
    ``metas`` holds the meta of every value named above; ``dynamic`` gives, per runtime input,
    the axes whose size may change between calls (absent: every size is fixed).
    """

    name: str
    nodes: tuple[PartNode, ...]
    inputs: tuple[str, ...]
    constants: Mapping[str, numpy.ndarray]
    outputs: tuple[str, ...]
    metas: Mapping[str, TensorMeta]
    dynamic: Mapping[str, frozenset[int]] = field(default_factory=dict)
    # every value's sizes (node outputs too) with None where the size changes per call; absent: the
    # metas' sizes, static (what a builder that must know a size, a split's pieces, reads)
    sizes: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)
    # (address, bytes) of each constant's memory -> its name, filled by the first constant_over call
    _by_memory: dict[tuple[int, int], str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def constant_over(self, array: Any) -> str | None:
        """The name of the constant whose memory ``array`` is exactly (same start, same bytes, both
        C-contiguous numpy arrays of at least one byte): how a backend finds which of its model's
        weights are the plan's constants; None for a copy, a slice, an empty or any other array.

        >>> from opcore.types import DType
        >>> w = numpy.ones((2, 3), numpy.float32)
        >>> s = PartitionSpec("p", (), (), {"w": w}, (), {"w": TensorMeta((2, 3), DType.FLOAT32)})
        >>> s.constant_over(w.reshape(6)), s.constant_over(w.copy())
        ('w', None)
        """
        if not self._by_memory:  # filled in one update: a thread never sees part of it
            index: dict[tuple[int, int], str] = {}
            for name, constant in self.constants.items():
                memory = _memory(constant)
                if memory is not None and memory[1]:
                    index[memory] = name
            self._by_memory.update(index)
        found = _memory(array)
        return self._by_memory.get(found) if found is not None and found[1] else None

    def value_dims(self, name: str) -> tuple[int | None, ...]:
        """The sizes of any value of the partition with None where they change per call.

        >>> from opcore.types import DType
        >>> m = TensorMeta((8, 4), DType.FLOAT32)
        >>> PartitionSpec("p", (), (), {}, (), {"y": m}, sizes={"y": (None, 4)}).value_dims("y")
        (None, 4)
        """
        found = self.sizes.get(name)
        if found is not None:
            return tuple(found)
        return self.input_dims(name) if name in self.dynamic else tuple(self.metas[name].shape)

    def input_dims(self, name: str) -> tuple[int | None, ...]:
        """The sizes of input ``name`` with None for its dynamic axes (what a model's input declares).

        >>> from opcore.types import DType
        >>> s = PartitionSpec("p", (), ("x",), {}, (), {"x": TensorMeta((8, 4), DType.FLOAT32)}, {"x": frozenset({0})})
        >>> s.input_dims("x")
        (None, 4)
        """
        axes = self.dynamic.get(name, frozenset())
        return tuple(None if axis in axes else size for axis, size in enumerate(self.metas[name].shape))

    def prefix(self, count: int) -> PartitionSpec:
        """The partition of the first ``count`` nodes, returning every value they produce that no
        later node of the prefix reads (used to find the node a runtime fails to compile).

        >>> from opcore.types import DType
        >>> m = TensorMeta((2,), DType.FLOAT32)
        >>> nodes = (PartNode("relu", (ValueRef("x"),), ("a",)), PartNode("exp", (ValueRef("a"),), ("b",)))
        >>> PartitionSpec("p", nodes, ("x",), {}, ("b",), {"x": m, "a": m, "b": m}).prefix(1).outputs
        ('a',)
        """
        nodes = self.nodes[:count]
        read = {name for node in nodes for name in node.refs()}
        produced = [name for node in nodes for name in node.outputs]
        outputs = tuple(name for name in produced if name not in read or name in self.outputs)
        used = read | set(outputs)
        return PartitionSpec(
            name=self.name,
            nodes=nodes,
            inputs=tuple(name for name in self.inputs if name in used),
            constants={name: array for name, array in self.constants.items() if name in used},
            outputs=outputs,
            metas=self.metas,
            dynamic={name: axes for name, axes in self.dynamic.items() if name in used},
            sizes=self.sizes,
        )


class PartitionError(Unsupported):
    """A partition that could not be built or compiled; ``node`` is the index (into the spec's
    nodes) of the node that failed, None when the runtime does not say.

    >>> PartitionError("p0", "openvino", "no rule", node=3, op="softmax").reason
    'no rule'
    >>> str(PartitionError("p0", "openvino", "no rule", node=3, op="softmax")).split(" Fix: ")[0]
    'softmax(): partition p0 on openvino: node 3 (softmax) failed: no rule.'
    """

    def __init__(
        self,
        partition: str,
        backend: str,
        reason: str,
        *,
        node: int | None = None,
        op: str | None = None,
        headline: str | None = None,
        fix: str | None = None,
    ):
        # headline: the whole message where the failure is not a compile's (a run, a load); fix: the remedy
        where = f"node {node} ({op}) failed: " if node is not None else "could not compile: "
        super().__init__(
            headline if headline is not None else f"partition {partition} on {backend}: {where}{reason}",
            op=op,
            fix=fix or "the plan keeps these nodes out of the partition (see plan.explain())",
        )
        self.partition = partition
        self.backend = backend
        self.node = node
        self.reason = reason


@runtime_checkable
class CompiledPartition(Protocol):
    """A compiled partition: call it with the spec's inputs (in order), get its outputs (in order)."""

    backend: str

    def __call__(self, *inputs: numpy.ndarray) -> tuple[numpy.ndarray, ...]:
        """Run the model; numpy arrays in ``spec.inputs`` order, numpy arrays out in ``spec.outputs`` order."""

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        """Write portable files named after the spec's name into ``folder``; return a JSON-able
        record (files, backend and runtime versions, options) that the compiler's ``load`` takes back.
        A constant whose bytes the plan's weights file already holds (``saved_bytes``) may be
        referred to there instead of written again."""


@runtime_checkable
class PartitionCompiler(Protocol):
    """A graph backend's partition compiler (what ``opcore_partition_compiler`` returns).

    Optional attribute ``int64_as`` (a dtype name): the runtime computes int64 in that dtype (OpenVINO's
    CPU plugin: "int32"); the plan then shows the backend's checkers the int64 values it proves to
    fit as that dtype, with their ``TensorMeta.bounds`` (see opcore.graph.ranges). Optional attribute
    ``bfloat16_as`` (a dtype name): the runtime takes bfloat16 values in partitions and computes them in
    that dtype (OpenVINO's CPU plugin: "float32"); the plan asks the backend's checkers about bfloat16
    nodes as that dtype, and the partition gets bfloat16 arrays (``ml_dtypes.bfloat16``). A compiler
    without it is never given a bfloat16 value."""

    backend: str

    def supports(self, op: str) -> bool:
        """Whether the backend can build ``op`` in a partition (its kernel's checker still decides per node)."""

    def compile(self, spec: PartitionSpec) -> CompiledPartition:
        """One compiled model for the whole spec; raises Unsupported (a PartitionError naming the
        node where it can tell) when it cannot build or compile it."""

    def load(self, folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> CompiledPartition:
        """The partition ``save`` wrote to ``folder`` (``record`` is what save returned)."""


@dataclass(frozen=True, slots=True)
class SavedBytes:
    """Where a constant's bytes already lie in the folder a plan is being saved to: ``file`` (beside
    the partition's own files), from byte ``offset``, ``length`` bytes, raw and little-endian in the
    array's C order (a safetensors file's data: what ONNX external data and OpenVINO's weights read).

    >>> SavedBytes("weights.safetensors", 4096, 64).file
    'weights.safetensors'
    """

    file: str
    offset: int
    length: int


_SAVING: contextvars.ContextVar[Mapping[tuple[int, int], SavedBytes] | None] = contextvars.ContextVar(
    "opcore_saving_weights", default=None
)


def _memory(array: Any) -> tuple[int, int] | None:
    """(address, bytes) of a C-contiguous numpy array's memory; None for any other array."""
    if not isinstance(array, numpy.ndarray) or not array.flags.c_contiguous:
        return None
    return int(array.__array_interface__["data"][0]), int(array.nbytes)


def saved_bytes(array: Any) -> SavedBytes | None:
    """While a plan saves its partitions (``CompiledPartition.save``): where the plan's weights file
    already holds ``array``'s bytes, when ``array`` is a C-contiguous numpy array over exactly the
    memory of one of the plan's constants (what ``PartitionSpec.constants`` handed the compiler);
    else None (a copy, a slice, another array, or no plan saving).

    >>> saved_bytes(numpy.zeros(4)) is None
    True
    """
    found = _memory(array)
    where = _SAVING.get()
    return where.get(found) if where is not None and found is not None else None


@contextlib.contextmanager
def saving_weights(where: Mapping[tuple[int, int], SavedBytes]) -> Iterator[None]:
    """``saved_bytes`` answers from ``where`` ((address, bytes) of a constant's memory -> its place)
    inside the block: what a plan's save sets around its partitions' ``save`` calls."""
    token = _SAVING.set(dict(where))
    try:
        yield
    finally:
        _SAVING.reset(token)
