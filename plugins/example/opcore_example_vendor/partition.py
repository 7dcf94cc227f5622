"""The example backend's partition compiler: the third-party path of opcore.graph, kept tiny.

A vendor with a graph runtime returns a ``PartitionCompiler`` from the ``opcore_partition_compiler``
hook (see plugin.py); a plan then hands it runs of captured nodes that its kernels accept, as a
``PartitionSpec``. Here the "runtime" is a list of steps calling this plugin's numpy kernels, and
the portable files are ``<name>.json`` (the steps, attributes and None arguments included) and
``<name>.npz`` (the constants, no pickle).

>>> from opcore.extend import PartitionSpec, PartNode, ValueRef
>>> from opcore.extend import DType, TensorMeta
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

from opcore.extend import PartitionError, PartitionSpec, ValueRef
from opcore_example_vendor import __version__, kernels

__all__ = ["BACKEND", "OPS", "ExampleCompiler", "ExamplePartition"]

BACKEND = "example"
FORMAT = "example-steps"
# op -> kernel: what a partition may hold (each op's kernel checker still decides per node)
OPS: Mapping[str, Callable[..., numpy.ndarray]] = {
    "silu": kernels.silu,
    "example.swiglu": kernels.swiglu,
    "clamp": kernels.clamp,
}

# A step: (op, its arguments in schema order, the value it writes). An argument is a ValueRef (a value
# of the partition), None (an absent optional argument: clamp's max), a number, bool or str (an
# attribute: clamp's min), or a tuple of these (a list argument).
Step = tuple[str, tuple[Any, ...], str]


def encode(arg: Any) -> Any:
    """A step's argument as JSON: ``{"ref": name}``, ``{"tuple": [...]}``, or the plain value."""
    if isinstance(arg, ValueRef):
        return {"ref": arg.name}
    if isinstance(arg, tuple):
        return {"tuple": [encode(a) for a in arg]}
    if arg is None or isinstance(arg, (bool, int, float, str)):
        return arg
    raise TypeError(f"cannot save an argument of type {type(arg).__name__}")


def decode(value: Any) -> Any:
    """``encode``'s inverse; anything else in the file is refused."""
    if isinstance(value, dict) and set(value) == {"ref"} and isinstance(value["ref"], str):
        return ValueRef(value["ref"])
    if isinstance(value, dict) and set(value) == {"tuple"} and isinstance(value["tuple"], list):
        return tuple(decode(v) for v in value["tuple"])
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"unexpected argument {value!r}")


def _plain(arg: Any) -> bool:
    """Whether the example can hold this argument in a step (and save it)."""
    if isinstance(arg, tuple):
        return all(_plain(a) for a in arg)
    return arg is None or isinstance(arg, (ValueRef, bool, int, float, str))


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

        def resolve(arg: Any) -> Any:
            if isinstance(arg, ValueRef):
                return values[arg.name]
            if isinstance(arg, tuple):
                return tuple(resolve(a) for a in arg)
            return arg

        for op, args, writes in self.steps:
            values[writes] = OPS[op](*(resolve(arg) for arg in args))
        return tuple(values[name] for name in self.outputs)

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        folder = pathlib.Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        steps = [{"op": op, "args": [encode(a) for a in args], "writes": writes} for op, args, writes in self.steps]
        names = list(self.constants)  # stored as c0, c1, ...: a value's name never meets savez's own keywords
        document = {"steps": steps, "inputs": list(self.inputs), "outputs": list(self.outputs), "constants": names}
        (folder / f"{self.name}.json").write_text(json.dumps(document, indent=1))
        arrays: dict[str, Any] = {f"c{i}": self.constants[name] for i, name in enumerate(names)}
        numpy.savez(folder / f"{self.name}.npz", **arrays)
        files = [f"{self.name}.json", f"{self.name}.npz"]
        return {"backend": BACKEND, "format": FORMAT, "files": files, "plugin": __version__, "options": {}}


class ExampleCompiler:
    """What ``opcore_partition_compiler`` returns: compiles specs of silu, example.swiglu and clamp nodes.

    It receives what the plan's kernels accept: the arguments are the contract's, in schema order
    (tensors as ValueRef, an absent optional one as None, attributes as plain values); a fused op
    (``linear_gelu``, ...) comes as itself, so a compiler claims it only if it builds it whole."""

    backend = BACKEND

    def supports(self, op: str) -> bool:
        return op in OPS

    def compile(self, spec: PartitionSpec) -> ExamplePartition:
        steps = []
        for index, node in enumerate(spec.nodes):
            if node.op not in OPS:
                raise PartitionError(spec.name, BACKEND, "no step for this op", node=index, op=node.op)
            if not all(_plain(arg) for arg in node.args):
                raise PartitionError(spec.name, BACKEND, "an argument it cannot hold", node=index, op=node.op)
            if len(node.outputs) != 1:
                raise PartitionError(spec.name, BACKEND, "steps write one value each", node=index, op=node.op)
            steps.append((node.op, tuple(node.args), node.outputs[0]))
        return ExamplePartition(spec.name, tuple(steps), spec.inputs, spec.constants, spec.outputs)

    def load(self, folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> ExamplePartition:
        steps_file, constants_file = (pathlib.Path(folder) / name for name in record["files"])
        document = json.loads(steps_file.read_text())
        try:
            steps = tuple((s["op"], tuple(decode(a) for a in s["args"]), s["writes"]) for s in document["steps"])
        except (KeyError, TypeError, ValueError) as error:
            raise PartitionError(spec.name, BACKEND, f"{steps_file} is not a partition of steps: {error}") from error
        unknown = sorted({op for op, _, _ in steps} - set(OPS))
        if unknown:  # a file names ops this plugin does not have: refuse, never look them up elsewhere
            raise PartitionError(spec.name, BACKEND, f"{steps_file} names unknown ops {unknown}")
        with numpy.load(constants_file, allow_pickle=False) as stored:
            constants = {name: stored[f"c{i}"] for i, name in enumerate(document["constants"])}
        return ExamplePartition(spec.name, steps, tuple(document["inputs"]), constants, tuple(document["outputs"]))
