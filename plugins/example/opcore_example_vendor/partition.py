"""The example backend's partition compiler: the third-party path of opcore.graph, kept tiny.

A vendor with a graph runtime returns a ``PartitionCompiler`` from the ``opcore_partition_compiler``
hook (see plugin.py); a plan then hands it runs of captured nodes that its kernels accept, as a
``PartitionSpec``. Here the "runtime" is a list of steps calling this plugin's numpy kernels, and
the portable files are ``<name>.json`` (the steps) and ``<name>.npz`` (the constants, no pickle).

>>> from opcore.graph.partition import PartitionSpec, PartNode, ValueRef
>>> from opcore.types import DType, TensorMeta
>>> m = TensorMeta((3,), DType.FLOAT32)
>>> spec = PartitionSpec("p0", (PartNode("silu", (ValueRef("x"),), ("y",)),), ("x",), {}, ("y",), {"x": m, "y": m})
>>> ExampleCompiler().compile(spec)(numpy.zeros(3, "float32"))
(array([0., 0., 0.], dtype=float32),)
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy

from opcore.graph.partition import PartitionError, PartitionSpec, ValueRef
from opcore_example_vendor import __version__, kernels

__all__ = ["BACKEND", "OPS", "ExampleCompiler", "ExamplePartition"]

BACKEND = "example"
FORMAT = "example-steps"
# op -> kernel: what a partition may hold (each op's kernel checker still decides per node)
OPS: Mapping[str, Callable[..., numpy.ndarray]] = {"silu": kernels.silu, "example.swiglu": kernels.swiglu}

Step = tuple[str, tuple[str, ...], str]  # (op, the values it reads, the value it writes)


class ExamplePartition:
    """A partition as steps over named values; ``part(*inputs)`` returns its outputs as a tuple."""

    backend = BACKEND

    def __init__(
        self,
        name: str,
        steps: tuple[Step, ...],
        inputs: tuple[str, ...],
        constants: Mapping[str, numpy.ndarray],
        outputs: tuple[str, ...],
    ) -> None:
        self.name, self.steps, self.inputs, self.outputs = name, steps, inputs, outputs
        self.constants = dict(constants)

    def __call__(self, *inputs: numpy.ndarray) -> tuple[numpy.ndarray, ...]:
        values = {**self.constants, **dict(zip(self.inputs, inputs))}
        for op, reads, writes in self.steps:
            values[writes] = OPS[op](*(values[name] for name in reads))
        return tuple(values[name] for name in self.outputs)

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        steps = [{"op": op, "reads": list(reads), "writes": writes} for op, reads, writes in self.steps]
        names = list(self.constants)  # stored as c0, c1, ...: a value's name never meets savez's own keywords
        document = {"steps": steps, "inputs": list(self.inputs), "outputs": list(self.outputs), "constants": names}
        (folder / f"{self.name}.json").write_text(json.dumps(document, indent=1))
        arrays: dict[str, Any] = {f"c{i}": self.constants[name] for i, name in enumerate(names)}
        numpy.savez(folder / f"{self.name}.npz", **arrays)
        files = [f"{self.name}.json", f"{self.name}.npz"]
        return {"backend": BACKEND, "format": FORMAT, "files": files, "plugin": __version__, "options": {}}


class ExampleCompiler:
    """What ``opcore_partition_compiler`` returns: compiles specs of silu and example.swiglu nodes."""

    backend = BACKEND

    def supports(self, op: str) -> bool:
        return op in OPS

    def compile(self, spec: PartitionSpec) -> ExamplePartition:
        steps = []
        for index, node in enumerate(spec.nodes):
            if node.op not in OPS or not all(isinstance(arg, ValueRef) for arg in node.args):
                raise PartitionError(spec.name, BACKEND, "no step for this op or its arguments", node=index, op=node.op)
            steps.append((node.op, tuple(arg.name for arg in node.args), node.outputs[0]))
        return ExamplePartition(spec.name, tuple(steps), spec.inputs, spec.constants, spec.outputs)

    def load(self, folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> ExamplePartition:
        steps_file, constants_file = (pathlib.Path(folder) / name for name in record["files"])
        document = json.loads(steps_file.read_text())
        steps = tuple((s["op"], tuple(s["reads"]), s["writes"]) for s in document["steps"])
        unknown = sorted({op for op, _, _ in steps} - set(OPS))
        if unknown:  # a file names ops this plugin does not have: refuse, never look them up elsewhere
            raise PartitionError(spec.name, BACKEND, f"{steps_file} names unknown ops {unknown}")
        with numpy.load(constants_file, allow_pickle=False) as stored:
            constants = {name: stored[f"c{i}"] for i, name in enumerate(document["constants"])}
        return ExamplePartition(spec.name, steps, tuple(document["inputs"]), constants, tuple(document["outputs"]))
