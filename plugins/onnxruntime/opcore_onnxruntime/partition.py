"""Partitions on ONNX Runtime: a captured run of nodes as one ONNX model, built by chaining the
op builders of the one-op kernels (``opcore.onemodel.partition``), run through one InferenceSession.

Inputs keep the spec's sizes except its dynamic axes (symbolic ``dim_param``s); constants are
initializers (large ones share the caller's memory); ``save`` writes ``<name>.onnx`` with its
weights in ``<name>.onnx.data`` (ONNX external data), which ``load_partition`` opens again.

>>> part = compile_partition(spec, compiler.chain_of)  # doctest: +SKIP
>>> part(x)  # doctest: +SKIP
(array(...),)
"""

from __future__ import annotations

import pathlib
import re
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import numpy
import onnx
import onnxruntime
from onnx import ModelProto, TensorProto, numpy_helper

from opcore.extend import PartitionError, PartitionSpec, Unsupported, chain_nodes, compile_or_locate, first_line
from opcore_onnxruntime import __version__
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.session import open_session, session_options, target_opset

__all__ = ["BACKEND", "FORMAT", "OnnxPartition", "compile_partition", "load_partition"]

BACKEND = "onnxruntime"
FORMAT = "onnx"
# a node name written by chain_nodes: "n<index>.<op type><count>"
_NODE_NAME = re.compile(r"\bn(\d+)\.[A-Za-z]")


class OnnxPartition:
    """One partition's InferenceSession: ``part(*inputs)`` returns the outputs as a tuple."""

    __slots__ = ("_keep", "_names", "_outputs", "_run", "externals", "model", "name", "opset", "session", "source")

    backend = BACKEND

    def __init__(
        self,
        name: str,
        session: onnxruntime.InferenceSession,
        keep: tuple[Any, ...] = (),
        model: ModelProto | None = None,
        externals: Mapping[str, numpy.ndarray] | None = None,
        source: pathlib.Path | None = None,
    ) -> None:
        self.name = name
        self.source = source  # the .onnx file it was loaded from (None: built here)
        self.session = session
        self.model = model  # None when loaded from files (saving copies them)
        self.externals = dict(externals or {})
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
        try:
            return tuple(self._run(self._outputs, dict(zip(self._names, inputs)), None))
        except Exception as error:
            raise Unsupported(f"partition {self.name} on onnxruntime failed: {first_line(error)}") from error

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        """``<name>.onnx`` and its external data ``<name>.onnx.data`` in ``folder``; the record for load."""
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        model_file, data_file = f"{self.name}.onnx", f"{self.name}.onnx.data"
        if self.model is None and self.source is not None:  # loaded from files: they are copied
            return self._copy(self.source, folder, model_file, data_file)
        model = ModelProto()
        model.CopyFrom(self.model)  # type: ignore[arg-type]
        for index, tensor in enumerate(model.graph.initializer):
            if tensor.data_location == TensorProto.EXTERNAL and tensor.name in self.externals:
                model.graph.initializer[index].CopyFrom(
                    numpy_helper.from_array(self.externals[tensor.name], tensor.name)
                )
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
        return self._record(files)

    def _copy(self, source: pathlib.Path, folder: pathlib.Path, model_file: str, data_file: str) -> dict[str, Any]:
        files = [model_file]
        for name in (model_file, data_file):
            origin = source.parent / name
            if origin.exists() and origin.resolve() != (folder / name).resolve():
                shutil.copyfile(origin, folder / name)
            if name == data_file and origin.exists():
                files.append(data_file)
        return self._record(files)

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
    try:
        session, model, keep = open_session(graph, *outputs)
    except Unsupported as error:
        found = _NODE_NAME.search(str(error))
        node = int(found.group(1)) if found and int(found.group(1)) < len(spec.nodes) else None
        op = spec.nodes[node].op if node is not None else None
        raise PartitionError(spec.name, BACKEND, first_line(error.__cause__ or error), node=node, op=op) from error
    return OnnxPartition(spec.name, session, keep, model, graph.externals)


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
    """The partition ``OnnxPartition.save`` wrote to ``folder``."""
    path = pathlib.Path(folder) / record["files"][0]
    try:
        session = onnxruntime.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    except Exception as error:
        raise PartitionError(spec.name, BACKEND, f"could not load {path}: {first_line(error)}") from error
    if len(session.get_inputs()) != len(spec.inputs) or len(session.get_outputs()) != len(spec.outputs):
        raise PartitionError(
            spec.name,
            BACKEND,
            f"{path} has {len(session.get_inputs())} inputs and {len(session.get_outputs())} outputs, "
            f"the plan expects {len(spec.inputs)} and {len(spec.outputs)}",
        )
    return OnnxPartition(spec.name, session, source=path)
