"""Partitions for one-model backends: a captured run of nodes built as one model by chaining the
backend's own per-op builders (the ones that make its one-op models), then compiled once.

What a backend supplies: a graph builder with ``input(dtype, rank, dims=...)`` and ``weight(array)``
(the same ``GraphBuilder`` its one-op models use), the kernel functions of its ops (each carries
``chain(graph, *args)``: the op's nodes written into a graph, arguments in contract order), and how
to compile, save and load a model. Everything else lives here: the plugin-time compiler object
(imports nothing until it compiles), the walk over the spec's nodes, and finding the node a
runtime refuses. Importing this module imports no runtime.

>>> compiler = GraphPartitionCompiler("demo", {"relu": "demo.kernels:relu"}, "demo.partition")
>>> compiler.supports("relu"), compiler.supports("add")
(True, False)
"""

from __future__ import annotations

import importlib
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opcore.errors import OpcoreError
from opcore.onemodel.op import first_line
from opcore.partition_protocol import CompiledPartition, PartitionError, PartitionSpec, ValueRef

__all__ = ["GraphPartitionCompiler", "chain_nodes", "compile_or_locate", "import_target"]

Chain = Callable[..., Any]


def import_target(target: str) -> Any:
    """The object a ``"module:qualname"`` string names.

    >>> import_target("opcore.onemodel.op:first_line").__name__
    'first_line'
    """
    module, _, qualname = target.partition(":")
    value: Any = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


class GraphPartitionCompiler:
    """The partition compiler a one-model backend's plugin returns from ``opcore_partition_compiler``.

    ``kernels`` maps each op the backend builds to its kernel function's ``"module:qualname"``
    (the kernel's ``chain`` attribute is the op's builder); ``implementation`` names the backend's
    module with ``compile_partition(spec, chain_of)`` and ``load_partition(folder, record, spec)``.
    Both are imported on the first compile or load, never at plugin load. ``int64_as``: the dtype
    the runtime computes int64 in ("int32" for OpenVINO's CPU plugin; None: int64 itself): a plan
    shows its checkers the int64 values it proves to fit that dtype as that dtype (opcore.graph.ranges).
    ``sized``: the ops whose builders take sizes computed at run time (a dynamic dim's size, as a 0-D
    int64 graph value) where the contract has an int: a plan gives them to the partition as inputs
    instead of leaving the node outside (``takes_sizes``). ``bfloat16_as``: the dtype the runtime
    computes bfloat16 values in inside a partition ("float32" for OpenVINO's CPU plugin under the f32
    precision hint; None: the backend takes no bfloat16 in partitions): a plan asks its checkers about
    a bfloat16 node as that dtype, and the partition keeps bfloat16 inputs, weights and outputs.
    """

    __slots__ = ("_chains", "_implementation", "backend", "bfloat16_as", "int64_as", "kernels", "sized")

    def __init__(
        self,
        backend: str,
        kernels: Mapping[str, str],
        implementation: str,
        int64_as: str | None = None,
        sized: frozenset[str] = frozenset(),
        bfloat16_as: str | None = None,
    ) -> None:
        self.backend = backend
        self.kernels = kernels
        self.int64_as = int64_as
        self.bfloat16_as = bfloat16_as
        self.sized = sized
        self._implementation = implementation
        self._chains: dict[str, Chain] = {}

    def __repr__(self) -> str:
        return f"GraphPartitionCompiler({self.backend!r}, {len(self.kernels)} ops)"

    def supports(self, op: str) -> bool:
        return op in self.kernels

    def takes_sizes(self, op: str) -> bool:
        return op in self.sized

    def chain_of(self, op: str) -> Chain:
        """The builder that writes ``op``'s nodes into a graph (its kernel's ``chain``)."""
        chain = self._chains.get(op)
        if chain is None:
            chain = self._chains[op] = import_target(self.kernels[op]).chain
        return chain

    def compile(self, spec: PartitionSpec) -> CompiledPartition:
        module = importlib.import_module(self._implementation)
        return module.compile_partition(spec, self.chain_of)  # type: ignore[no-any-return]

    def load(self, folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> CompiledPartition:
        module = importlib.import_module(self._implementation)
        return module.load_partition(pathlib.Path(folder), record, spec)  # type: ignore[no-any-return]


def _resolve(arg: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(arg, ValueRef):
        return values[arg.name]
    if isinstance(arg, tuple) and any(isinstance(v, ValueRef) for v in arg):
        return tuple(values[v.name] if isinstance(v, ValueRef) else v for v in arg)
    return arg


def chain_nodes(graph: Any, spec: PartitionSpec, chain_of: Callable[[str], Chain], backend: str) -> list[Any]:
    """Write every node of ``spec`` into ``graph`` and return the graph values of its outputs.

    Inputs become graph inputs with the spec's static sizes (None where an axis is dynamic), and
    constants become weights. A node whose builder fails raises a PartitionError naming it. Where
    the graph has ``annotate(value, meta, dims)``, each node's outputs pass through it (``dims``: its
    sizes, None where they change per call: ``spec.value_dims``; a builder that
    tracks ranks learns those it could not infer).
    ``graph.tag`` (where the graph has one) is set to ``"n<index>."`` while a node is written, so a
    runtime's message about a node can be traced back.
    """
    values: dict[str, Any] = {}
    annotate = getattr(graph, "annotate", None)
    for name in spec.inputs:
        meta = spec.metas[name]
        values[name] = graph.input(meta.dtype.to_numpy(), meta.ndim, dims=spec.input_dims(name))
    for name, array in spec.constants.items():
        values[name] = graph.weight(array)
    for index, node in enumerate(spec.nodes):
        if hasattr(graph, "tag"):
            graph.tag = f"n{index}."
        try:
            chain = chain_of(node.op)
            result = chain(graph, *(_resolve(arg, values) for arg in node.args))
        except (OpcoreError, Exception) as error:
            reason = str(error) if isinstance(error, OpcoreError) else f"{type(error).__name__}: {first_line(error)}"
            raise PartitionError(spec.name, backend, reason, node=index, op=node.op) from error
        results: Sequence[Any] = result if isinstance(result, (tuple, list)) else (result,)
        if len(results) != len(node.outputs):
            raise PartitionError(
                spec.name,
                backend,
                f"its builder made {len(results)} outputs, the node has {len(node.outputs)}",
                node=index,
                op=node.op,
            )
        if annotate is not None:
            results = [
                annotate(v, spec.metas[n], spec.value_dims(n)) if n in spec.metas else v
                for v, n in zip(results, node.outputs)
            ]
        values.update(zip(node.outputs, results))
    if hasattr(graph, "tag"):
        graph.tag = ""
    return [values[name] for name in spec.outputs]


def compile_or_locate(spec: PartitionSpec, compile_spec: Callable[[PartitionSpec], Any], backend: str) -> Any:
    """``compile_spec(spec)``; when the runtime refuses the whole model without naming a node, the
    first failing node is found by compiling prefixes of the spec (a binary search: about log2(n)
    more compiles, only on failure) and the error names it.
    """
    try:
        return compile_spec(spec)
    except PartitionError as error:
        if error.node is not None:
            raise
        failure = error
    low, high = 0, len(spec.nodes)  # invariant: prefix(low) compiles, prefix(high) fails
    while high - low > 1:
        middle = (low + high) // 2
        try:
            compile_spec(spec.prefix(middle))
        except PartitionError as error:
            if error.node is not None:
                raise
            high = middle
        else:
            low = middle
    node = spec.nodes[high - 1]
    raise PartitionError(spec.name, backend, failure.reason, node=high - 1, op=node.op) from failure
