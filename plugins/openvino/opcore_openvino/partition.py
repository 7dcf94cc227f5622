"""Partitions on OpenVINO: a captured run of nodes as one OpenVINO model, built by chaining the op
builders of the one-op kernels (``opcore.onemodel.partition``), compiled once for the CPU with
``INFERENCE_PRECISION_HINT=f32`` (the plugin would otherwise run float32 models in bf16 on CPUs
that have it).

Inputs keep the spec's sizes except its dynamic axes; constants are ``Constant`` nodes sharing
the caller's memory; ``save`` writes OpenVINO IR (``<name>.xml`` + ``<name>.bin``, weights kept in
float32), which ``load_partition`` reads and compiles again. The plan's constants are not in the
``.bin``: the IR reads them as extra Parameters, which ``load_partition`` turns back into Constants
sharing the loaded plan's weights (the record names each, and where the plan's weights file holds
its bytes).

>>> part = compile_partition(spec, compiler.chain_of)  # doctest: +SKIP
>>> part(x)  # doctest: +SKIP
(array(...),)
"""

from __future__ import annotations

import os
import pathlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy
import openvino

from opcore.extend import (
    PartitionError,
    PartitionSpec,
    SavedBytes,
    Unsupported,
    chain_nodes,
    compile_or_locate,
    first_line,
    saved_bytes,
)
from opcore_openvino import __version__
from opcore_openvino.compiled import CONFIG, DEVICE, compile_config, core, feed
from opcore_openvino.graph import BFLOAT16, Graph, Node, tensor_of
from opcore_openvino.shapes import Specializations

__all__ = ["BACKEND", "FORMAT", "OvPartition", "compile_partition", "load_partition"]

BACKEND = "openvino"
FORMAT = "openvino-ir"


class OvPartition:
    """One partition's compiled model: ``part(*inputs)`` returns the outputs as a tuple.

    Each thread gets its own infer request; outputs are copied out of it (the next call reuses
    its memory). ``weights``: each Constant that is one of the spec's constants (its node, the
    constant's name, the array it shares), which a saved partition takes from the plan's file.
    """

    __slots__ = ("_count", "_keep", "_local", "_shapes", "_wide", "compiled", "model", "name", "source", "weights")

    backend = BACKEND

    def __init__(
        self,
        name: str,
        model: openvino.Model,
        keep: tuple[Any, ...] = (),
        source: tuple[pathlib.Path, ...] = (),
        weights: tuple[tuple[Any, str, numpy.ndarray], ...] = (),
    ) -> None:
        self.name = name
        self.model = model
        self.source = source  # the IR files it was read from ((): built here)
        self.weights = weights
        self._keep = keep  # the arrays its shared Constants read
        try:
            self.compiled = core().compile_model(model, DEVICE, compile_config())
        except Exception as error:
            raise PartitionError(name, BACKEND, first_line(error)) from error
        self._count = len(self.compiled.outputs)
        # the outputs whose data the binding gives as float16-typed views of bfloat16 bytes
        self._wide = tuple(o.get_element_type() == openvino.Type.bf16 for o in self.compiled.outputs)
        self._local = threading.local()
        # a dynamic model's static compiles for the shapes called thrice, kept where they run faster
        # (opcore_openvino.shapes); None: a static model
        self._shapes = Specializations.of(model)

    def __repr__(self) -> str:
        return f"OvPartition({self.name!r}, {len(self.compiled.inputs)} inputs, {self._count} outputs)"

    def _request(self) -> openvino.InferRequest:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        return request

    def _fed(self, request: openvino.InferRequest) -> list[Any]:
        """What ``request``'s inputs were last set to (compiled.feed), kept per request of this thread
        (with the request itself, so that a new request never inherits another's record by its id)."""
        table = self._local.__dict__.setdefault("fed", {})
        entry = table.get(id(request))
        if entry is None or entry[0] is not request:
            entry = table[id(request)] = (request, [])
        return entry[1]  # type: ignore[no-any-return]

    def __call__(self, *inputs: numpy.ndarray) -> tuple[numpy.ndarray, ...]:
        shapes, key, special = self._shapes, None, None
        if shapes is not None:
            key, special, taken = shapes.request(inputs)
            if special is not None:
                inputs = tuple(taken)
        request = special if special is not None else self._request()
        try:
            held = feed(request, inputs, self._fed(request))  # noqa: F841 - copies made for the call must outlive it
            if shapes is None:
                request.infer()
            else:  # timed: a static model stays where it runs faster (opcore_openvino.shapes)
                started = time.perf_counter()
                request.infer()
                shapes.timed(key, time.perf_counter() - started, special is not None)
            outputs = (request.get_output_tensor(i).data for i in range(self._count))
            return tuple((data.view(BFLOAT16) if wide else data).copy() for data, wide in zip(outputs, self._wide))
        except Exception as error:
            raise Unsupported(f"partition {self.name} on openvino failed: {first_line(error)}") from error

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        """``<name>.xml`` and ``<name>.bin`` (OpenVINO IR, weights uncompressed) in ``folder``. A weight
        whose bytes the plan's weights file holds (``saved_bytes``) is not in the ``.bin``: the IR
        takes it as an extra Parameter (``opcore_weight_<i>``, after the partition's inputs), and the
        record says which plan constant each is and where its bytes lie (load puts the constant back)."""
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        xml, weights = folder / f"{self.name}.xml", folder / f"{self.name}.bin"
        present = {node.get_friendly_name() for node in self.model.get_ops()}  # a builder may not read one
        taken: list[tuple[Any, str, SavedBytes]] = []
        for node, constant, array in self.weights:
            where = saved_bytes(array)
            if where is not None and node.get_friendly_name() in present:
                taken.append((node, constant, where))
        # written beside, then renamed over: a model read from these very files may still map its .bin
        staged = folder / f".{self.name}.saving.xml"
        openvino.save_model(
            _weights_as_parameters(self.model, [node for node, _, _ in taken]), str(staged), compress_to_fp16=False
        )
        os.replace(staged.with_suffix(".bin"), weights)
        os.replace(staged, xml)
        record: dict[str, Any] = {
            "backend": BACKEND,
            "format": FORMAT,
            "files": [xml.name, weights.name],
            "openvino": openvino.get_version(),
            "plugin": __version__,
            "options": {"device": DEVICE, **CONFIG},
        }
        if taken:
            record["weights"] = {
                f"{WEIGHT_PREFIX}{index}": {
                    "constant": constant,
                    "file": where.file,
                    "offset": where.offset,
                    "length": where.length,
                }
                for index, (_, constant, where) in enumerate(taken)
            }
        return record


# the name of a saved IR's Parameter that stands for a plan constant (record["weights"] says which)
WEIGHT_PREFIX = "opcore_weight_"


def _weights_as_parameters(model: openvino.Model, constants: list[Any]) -> openvino.Model:
    """``model`` with each of ``constants`` (its Constant nodes) read from a new Parameter
    ``opcore_weight_<i>`` appended after its own; ``model`` itself where there are none."""
    if not constants:
        return model
    from openvino import opset13 as ops

    wanted = {node.get_friendly_name(): index for index, node in enumerate(constants)}
    copy = model.clone()
    found: dict[int, Any] = {}
    for node in copy.get_ops():
        index = wanted.get(node.get_friendly_name())
        if index is not None and node.get_type_name() == "Constant":
            parameter = ops.parameter(node.get_output_partial_shape(0), node.get_output_element_type(0))
            parameter.set_friendly_name(f"{WEIGHT_PREFIX}{index}")
            parameter.output(0).get_tensor().set_names({f"{WEIGHT_PREFIX}{index}"})
            node.output(0).replace(parameter.output(0))
            found[index] = parameter
    if len(found) != len(constants):
        raise PartitionError(model.get_friendly_name(), BACKEND, "a weight's Constant is not in its model's copy")
    parameters = [*copy.get_parameters(), *(found[i] for i in range(len(constants)))]
    return openvino.Model(copy.get_results(), parameters, copy.get_friendly_name())


def _constants_of(graph: Graph, spec: PartitionSpec) -> tuple[tuple[Any, str, numpy.ndarray], ...]:
    """(Constant, spec constant name, array) for each weight sharing exactly a spec constant's memory."""
    found = ((node, spec.constant_over(array), array) for node, array in graph.weights)
    return tuple((node, name, array) for node, name, array in found if name is not None)


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
    return OvPartition(spec.name, model, tuple(graph.keep), weights=_constants_of(graph, spec))


def load_partition(folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> OvPartition:
    """The partition ``OvPartition.save`` wrote to ``folder``; the Parameters its record maps to plan
    constants become Constants sharing the spec's arrays (the plan's loaded weights)."""
    from openvino import opset13 as ops

    xml, weights = (pathlib.Path(folder) / name for name in record["files"][:2])
    try:
        model = core().read_model(str(xml), str(weights))
    except Exception as error:
        raise PartitionError(spec.name, BACKEND, f"could not read {xml}: {first_line(error)}") from error
    taken = dict(record.get("weights") or {})
    keep, held = [], []
    if taken:
        parameters = {p.get_friendly_name(): p for p in model.get_parameters()}
        for name, entry in taken.items():
            parameter, array = parameters.get(name), spec.constants.get(str(entry.get("constant")))
            if parameter is None or array is None:
                missing = f"Parameter {name!r}" if parameter is None else f"constant {entry.get('constant')!r}"
                raise PartitionError(spec.name, BACKEND, f"{xml}: its record names {missing}, which is not there")
            array = numpy.require(array, requirements=("C", "W"))
            shape, kind = parameter.get_output_partial_shape(0), parameter.get_output_element_type(0)
            # the Parameter's type and shape over the constant's bytes (u4 codes are packed uint8 in the plan)
            try:
                if shape.is_dynamic:
                    tensor = None
                elif array.dtype == BFLOAT16:
                    tensor = tensor_of(array) if kind == openvino.Type.bf16 else None
                else:
                    tensor = openvino.Tensor(array, shape.to_shape(), kind)
            except Exception:  # the array is smaller than the Parameter's bytes
                tensor = None
            if tensor is None or tensor.get_byte_size() != array.nbytes:
                raise PartitionError(
                    spec.name,
                    BACKEND,
                    f"{xml}: {name} is {kind} {shape}, the plan's {entry['constant']!r} is {array.dtype} {array.shape}",
                )
            constant = ops.constant(tensor, shared_memory=True)
            parameter.output(0).replace(constant.output(0))
            keep.append(array)
            held.append((constant, str(entry["constant"]), array))
        inputs = [p for p in model.get_parameters() if p.get_friendly_name() not in taken]
        model = openvino.Model(model.get_results(), inputs, model.get_friendly_name())
    if len(model.inputs) != len(spec.inputs) or len(model.outputs) != len(spec.outputs):
        raise PartitionError(
            spec.name,
            BACKEND,
            f"{xml} has {len(model.inputs)} inputs and {len(model.outputs)} outputs, "
            f"the plan expects {len(spec.inputs)} and {len(spec.outputs)}",
        )
    return OvPartition(spec.name, model, tuple(keep), source=(xml, weights), weights=tuple(held))
