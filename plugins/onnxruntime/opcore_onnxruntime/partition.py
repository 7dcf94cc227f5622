"""Partitions on ONNX Runtime: a captured run of nodes as one ONNX model, built by chaining the
op builders of the one-op kernels (``opcore.onemodel.partition``), run through one InferenceSession.

Inputs keep the spec's sizes except its dynamic axes (symbolic ``dim_param``s); constants are
initializers (large ones share the caller's memory); ``save`` writes ``<name>.onnx`` with its
weights as ONNX external data: the plan's constants point into the plan's ``weights.safetensors``
(offset and length: ``saved_bytes``), anything else goes to ``<name>.onnx.data``. ``load_partition``
opens the model again and feeds the former from the plan's loaded constants (one copy in memory).

>>> part = compile_partition(spec, compiler.chain_of)  # doctest: +SKIP
>>> part(x)  # doctest: +SKIP
(array(...),)
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy
import onnx
import onnxruntime
from onnx import ModelProto, TensorProto, numpy_helper
from onnx.external_data_helper import load_external_data_for_tensor

from opcore.extend import (
    PartitionError,
    PartitionSpec,
    Unsupported,
    chain_nodes,
    compile_or_locate,
    first_line,
    saved_bytes,
)
from opcore_onnxruntime import __version__, denormals
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.session import open_session, session_options, target_opset

__all__ = ["BACKEND", "FORMAT", "OnnxPartition", "compile_partition", "load_partition"]

BACKEND = "onnxruntime"
FORMAT = "onnx"
# a node name written by chain_nodes: "n<index>.<op type><count>"
_NODE_NAME = re.compile(r"\bn(\d+)\.[A-Za-z]")


class OnnxPartition:
    """One partition's InferenceSession: ``part(*inputs)`` returns the outputs as a tuple.

    ``externals``: the initializers that share memory with the caller (name -> array), and
    ``constants``: those among them that are the spec's constants (initializer -> constant name),
    which a saved partition refers to in the plan's weights file and takes from the plan at load.
    """

    __slots__ = (
        "_keep", "_names", "_outputs", "_run", "constants", "externals", "flush", "model", "name", "opset", "session",
        "source",
    )  # fmt: skip

    backend = BACKEND

    def __init__(
        self,
        name: str,
        session: onnxruntime.InferenceSession,
        keep: tuple[Any, ...] = (),
        model: ModelProto | None = None,
        externals: Mapping[str, numpy.ndarray] | None = None,
        source: pathlib.Path | None = None,
        constants: Mapping[str, str] | None = None,
        flush: bool = False,
    ) -> None:
        self.name = name
        self.flush = flush  # runs with denormals flushed to zero (opcore_onnxruntime.denormals)
        self.source = source  # the .onnx file it was loaded from (None: built here)
        self.session = session
        self.model = model  # None when loaded from files (saving reads them again)
        self.externals = dict(externals or {})
        self.constants = dict(constants or {})
        self._keep = keep
        self._names = [i.name for i in session.get_inputs()]
        self._outputs = [o.name for o in session.get_outputs()]
        self.opset = (
            next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None) if model else None
        )
        # the binding under InferenceSession.run (see opcore_onnxruntime.session.Session)
        self._run = getattr(getattr(session, "_sess", None), "run", session.run)

    def __repr__(self) -> str:
        return f"OnnxPartition({self.name!r}, {len(self._names)} inputs, {len(self._outputs)} outputs)"

    def __call__(self, *inputs: numpy.ndarray) -> tuple[numpy.ndarray, ...]:
        feeds = dict(zip(self._names, inputs))
        try:
            if self.flush:
                return tuple(denormals.run(self._run, self._outputs, feeds, None))
            return tuple(self._run(self._outputs, feeds, None))
        except Exception as error:
            raise Unsupported(f"partition {self.name} on onnxruntime failed: {first_line(error)}") from error

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        """``<name>.onnx`` and its external data: an initializer whose bytes the plan's weights file holds
        (``saved_bytes``) points there, every other large one goes to ``<name>.onnx.data``; the
        record for load (which feeds the former from the plan's constants)."""
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        model_file, data_file = f"{self.name}.onnx", f"{self.name}.onnx.data"
        model = ModelProto()
        if self.model is not None:
            model.CopyFrom(self.model)
        elif self.source is not None:  # loaded from files: read again, external data by reference
            model = onnx.load(str(self.source), load_external_data=False)
        referred: dict[str, str] = {}
        for tensor in model.graph.initializer:
            if tensor.data_location != TensorProto.EXTERNAL:
                continue
            array = self.externals.get(tensor.name)
            where = saved_bytes(array) if array is not None else None
            if where is not None:
                _refer(tensor, where.file, where.offset, where.length)
                if tensor.name in self.constants:
                    referred[tensor.name] = self.constants[tensor.name]
            elif array is not None:
                tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
            elif self.source is not None:
                load_external_data_for_tensor(tensor, str(self.source.parent))
                tensor.data_location = TensorProto.DEFAULT
                del tensor.external_data[:]
        (folder / data_file).unlink(missing_ok=True)  # onnx appends to an existing data file
        onnx.save_model(
            model,
            str(folder / model_file),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data_file,
            size_threshold=1024,
        )
        files = [model_file] + ([data_file] if (folder / data_file).exists() else [])
        return {**self._record(files), **({"constants": referred} if referred else {})}

    def _record(self, files: list[str]) -> dict[str, Any]:
        return {
            "backend": BACKEND,
            "format": FORMAT,
            "files": files,
            "opset": self.opset,
            "onnxruntime": onnxruntime.__version__,
            "onnx": onnx.__version__,
            "plugin": __version__,
            "options": {"providers": ["CPUExecutionProvider"]},
        }


def _refer(tensor: TensorProto, file: str, offset: int, length: int) -> None:
    """Point an external initializer at ``length`` bytes of ``file`` from ``offset`` (ONNX external data)."""
    del tensor.external_data[:]
    for key, value in (("location", file), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = TensorProto.EXTERNAL


def compile_partition(spec: PartitionSpec, chain_of: Callable[[str], Any]) -> OnnxPartition:
    """One session for the whole spec; a PartitionError names the node that failed where it can."""
    return compile_or_locate(spec, lambda part: _compile(part, chain_of), BACKEND)  # type: ignore[no-any-return]


# ops whose ONNX Runtime kernels fail at run time on an empty input that the model compiles with
# (LayerNormalization and RMSNormalization over a 0-size axis; found by the kit's partition cases)
EMPTY_FAILS = frozenset({"layer_norm", "rms_norm"})


def _refuse_empty(spec: PartitionSpec) -> None:
    """A node of EMPTY_FAILS reading a value of a static size 0 is refused; its one-op kernel takes it
    (the result comes from the contract's meta where the model cannot run)."""
    for index, node in enumerate(spec.nodes):
        if node.op not in EMPTY_FAILS:
            continue
        for name in node.refs():
            meta = spec.metas.get(name)
            if meta is not None and 0 in meta.shape:
                raise PartitionError(
                    spec.name, BACKEND, f"value {name!r} is empty (shape {meta.shape})", node=index, op=node.op
                )


def _compile(spec: PartitionSpec, chain_of: Callable[[str], Any]) -> OnnxPartition:
    _refuse_empty(spec)
    opset, ir_version = target_opset()
    graph = Graph(spec.name, opset, ir_version)
    outputs = _results(graph, spec, chain_nodes(graph, spec, chain_of, BACKEND))
    flush = flushes(spec)
    try:
        session, model, keep = open_session(graph, *outputs, dynamic=is_dynamic(spec), flush=flush)
    except Unsupported as error:
        found = _NODE_NAME.search(str(error))
        node = int(found.group(1)) if found and int(found.group(1)) < len(spec.nodes) else None
        op = spec.nodes[node].op if node is not None else None
        raise PartitionError(spec.name, BACKEND, first_line(error.__cause__ or error), node=node, op=op) from error
    constants = _constants_of(graph, spec)
    return OnnxPartition(spec.name, session, keep, model, graph.externals, constants=constants, flush=flush)


def flushes(spec: PartitionSpec) -> bool:
    """Whether the partition runs with denormals flushed to zero (opcore_onnxruntime.denormals)."""
    return denormals.flushes(meta.dtype for meta in spec.metas.values())


def is_dynamic(spec: PartitionSpec) -> bool:
    """Whether any input of the partition has a dynamic axis (its session: session_options)."""
    return any(spec.dynamic.values())


def _constants_of(graph: Graph, spec: PartitionSpec) -> dict[str, str]:
    """initializer -> spec constant, for each external initializer over exactly a constant's memory."""
    found = {name: spec.constant_over(array) for name, array in graph.externals.items()}
    return {name: constant for name, constant in found.items() if constant is not None}


def _results(graph: Graph, spec: PartitionSpec, values: list[Value]) -> list[Value]:
    """The outputs in the dtypes of their metas, each a distinct node output."""
    results: list[Value] = []
    seen: set[str] = set()
    for name, value in zip(spec.outputs, values):
        result = graph.result(graph.cast(value, spec.metas[name].dtype.to_numpy()))
        if result.name in seen:  # one value returned twice: ONNX outputs need distinct names
            result = graph.op("Identity", result)
        seen.add(result.name)
        results.append(result)
    return results


def load_partition(folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> OnnxPartition:
    """The partition ``OnnxPartition.save`` wrote to ``folder``; the initializers its record maps to
    the spec's constants share their memory (the plan's loaded weights), the others are read from
    the files."""
    path = pathlib.Path(folder) / record["files"][0]
    constants = dict(record.get("constants") or {})
    try:
        externals = _shared_constants(path, constants, spec) if constants else {}
        flush = flushes(spec)
        options = session_options(is_dynamic(spec), flush)
        names = list(externals)
        values = [onnxruntime.OrtValue.ortvalue_from_numpy(externals[n]) for n in names]
        if names:
            options.add_external_initializers(names, values)
        session = denormals.made(
            partial(onnxruntime.InferenceSession, str(path), options, providers=["CPUExecutionProvider"])
        )
    except PartitionError:
        raise
    except Exception as error:
        raise PartitionError(spec.name, BACKEND, f"could not load {path}: {first_line(error)}") from error
    if len(session.get_inputs()) != len(spec.inputs) or len(session.get_outputs()) != len(spec.outputs):
        raise PartitionError(
            spec.name,
            BACKEND,
            f"{path} has {len(session.get_inputs())} inputs and {len(session.get_outputs())} outputs, "
            f"the plan expects {len(spec.inputs)} and {len(spec.outputs)}",
        )
    keep = (values, externals) if names else ()
    return OnnxPartition(spec.name, session, keep, externals=externals, source=path, constants=constants, flush=flush)


def _shared_constants(
    path: pathlib.Path, constants: Mapping[str, str], spec: PartitionSpec
) -> dict[str, numpy.ndarray]:
    """initializer -> the spec's constant array for each of ``constants``, checked against the
    initializer's dtype and dims in the model file (read without its external data)."""
    declared = {t.name: t for t in onnx.load(str(path), load_external_data=False).graph.initializer}
    found = {}
    for name, constant in constants.items():
        array, tensor = spec.constants.get(constant), declared.get(name)
        if array is None or tensor is None:
            what = f"constant {constant!r}" if array is None else f"initializer {name!r}"
            raise PartitionError(spec.name, BACKEND, f"{path}: its record names {what}, which is not there")
        array = numpy.require(array, requirements="C")
        expected = (onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type), tuple(tensor.dims))
        if (array.dtype, array.shape) != expected:
            raise PartitionError(
                spec.name,
                BACKEND,
                f"{path}: initializer {name!r} is {expected[0]} {expected[1]}, the plan's {constant!r} is "
                f"{array.dtype} {array.shape}",
            )
        found[name] = array
    return found
