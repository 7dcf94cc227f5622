"""Partitions on OpenVINO: a captured run of nodes as one OpenVINO model, built by chaining the op
builders of the one-op kernels (``opcore.onemodel.partition``), compiled once for the CPU with
``INFERENCE_PRECISION_HINT=f32`` (the plugin would otherwise run float32 models in bf16 on CPUs
that have it).

Inputs keep the spec's sizes except its dynamic axes; constants are ``Constant`` nodes sharing
the caller's memory; ``save`` writes OpenVINO IR (``<name>.xml`` + ``<name>.bin``, weights kept in
float32), which ``load_partition`` reads and compiles again.

>>> part = compile_partition(spec, compiler.chain_of)  # doctest: +SKIP
>>> part(x)  # doctest: +SKIP
(array(...),)
"""

from __future__ import annotations

import pathlib
import shutil
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy
import openvino

from opcore.extend import PartitionError, PartitionSpec, Unsupported, chain_nodes, compile_or_locate, first_line
from opcore_openvino import __version__
from opcore_openvino.compiled import CONFIG, DEVICE, compile_config, core, feed
from opcore_openvino.graph import Graph, Node
from opcore_openvino.shapes import Specializations

__all__ = ["BACKEND", "FORMAT", "OvPartition", "compile_partition", "load_partition"]

BACKEND = "openvino"
FORMAT = "openvino-ir"


class OvPartition:
    """One partition's compiled model: ``part(*inputs)`` returns the outputs as a tuple.

    Each thread gets its own infer request; outputs are copied out of it (the next call reuses
    its memory).
    """

    __slots__ = ("_count", "_keep", "_local", "_shapes", "compiled", "model", "name", "source")

    backend = BACKEND

    def __init__(
        self,
        name: str,
        model: openvino.Model,
        keep: tuple[Any, ...] = (),
        source: tuple[pathlib.Path, ...] = (),
    ) -> None:
        self.name = name
        self.model = model
        self.source = source  # the IR files it was read from ((): built here)
        self._keep = keep  # the arrays its shared Constants read
        try:
            self.compiled = core().compile_model(model, DEVICE, compile_config())
        except Exception as error:
            raise PartitionError(name, BACKEND, first_line(error)) from error
        self._count = len(self.compiled.outputs)
        self._local = threading.local()
        # a dynamic model's static compiles for the shapes called twice (opcore_openvino.shapes); None: static
        self._shapes = Specializations.of(model)

    def __repr__(self) -> str:
        return f"OvPartition({self.name!r}, {len(self.compiled.inputs)} inputs, {self._count} outputs)"

    def _request(self) -> openvino.InferRequest:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        return request

    def __call__(self, *inputs: numpy.ndarray) -> tuple[numpy.ndarray, ...]:
        special = None if self._shapes is None else self._shapes.request(inputs)
        if special is not None:
            request, inputs = special[0], tuple(special[1])
        else:
            request = self._request()
        try:
            held = feed(request, inputs)  # noqa: F841 - copies made for the call must outlive it
            request.infer()
            return tuple(request.get_output_tensor(i).data.copy() for i in range(self._count))
        except Exception as error:
            raise Unsupported(f"partition {self.name} on openvino failed: {first_line(error)}") from error

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        """``<name>.xml`` and ``<name>.bin`` (OpenVINO IR, weights uncompressed) in ``folder``."""
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        xml, weights = folder / f"{self.name}.xml", folder / f"{self.name}.bin"
        if self.source and self.source[0].resolve() != xml.resolve():
            for path, target in zip(self.source, (xml, weights)):
                shutil.copyfile(path, target)
        elif not self.source:
            openvino.save_model(self.model, str(xml), compress_to_fp16=False)
        return {
            "backend": BACKEND,
            "format": FORMAT,
            "files": [xml.name, weights.name],
            "openvino": openvino.get_version(),
            "plugin": __version__,
            "options": {"device": DEVICE, **CONFIG},
        }


def compile_partition(spec: PartitionSpec, chain_of: Callable[[str], Any]) -> OvPartition:
    """One compiled model for the whole spec; a PartitionError names the node that failed where it can."""
    return compile_or_locate(spec, lambda part: _compile(part, chain_of), BACKEND)  # type: ignore[no-any-return]


def _refuse_empty(spec: PartitionSpec) -> None:
    """Values of a static size 0 are refused: compiling a Gather of empty indices with static shapes
    kills the process (SIGFPE in the CPU plugin, 2026.4); the one-op kernels (dynamic shapes) take them."""
    for index, node in enumerate(spec.nodes):
        for name in (*node.refs(), *node.outputs):
            meta = spec.metas.get(name)
            if meta is not None and 0 in meta.shape:
                raise PartitionError(
                    spec.name,
                    BACKEND,
                    f"value {name!r} is empty (shape {meta.shape}): the CPU plugin can crash compiling empty "
                    "static shapes",
                    node=index,
                    op=node.op,
                )


def _compile(spec: PartitionSpec, chain_of: Callable[[str], Any]) -> OvPartition:
    _refuse_empty(spec)
    graph = Graph(spec.name)
    values = chain_nodes(graph, spec, chain_of, BACKEND)
    outputs: list[Node] = [
        graph.result(graph.cast(value, spec.metas[name].dtype.to_numpy())) for name, value in zip(spec.outputs, values)
    ]
    try:
        model = graph.model(*outputs)
    except Exception as error:
        raise PartitionError(spec.name, BACKEND, first_line(error)) from error
    return OvPartition(spec.name, model, tuple(graph.keep))


def load_partition(folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> OvPartition:
    """The partition ``OvPartition.save`` wrote to ``folder``."""
    xml, weights = (pathlib.Path(folder) / name for name in record["files"][:2])
    try:
        model = core().read_model(str(xml), str(weights))
    except Exception as error:
        raise PartitionError(spec.name, BACKEND, f"could not read {xml}: {first_line(error)}") from error
    if len(model.inputs) != len(spec.inputs) or len(model.outputs) != len(spec.outputs):
        raise PartitionError(
            spec.name,
            BACKEND,
            f"{xml} has {len(model.inputs)} inputs and {len(model.outputs)} outputs, "
            f"the plan expects {len(spec.inputs)} and {len(spec.outputs)}",
        )
    return OvPartition(spec.name, model, source=(xml, weights))
