"""Every op a graph runtime offers is chainable: each conformance-kit sample that the backend's own
one-op kernel runs, built as a one-node partition (tensors as runtime inputs, or baked in as
constants), gives the one-op kernel's result, or is refused with a PartitionError; never a wrong
result. (OpenVINO refuses empty tensors of static shape in partitions: its CPU plugin can crash the
process compiling them.)"""

from __future__ import annotations

from typing import Any

import numpy
import pytest

import opcore
from opcore.graph.partition import PartitionError, PartitionSpec, PartNode, ValueRef, compilers
from opcore.opset import BUILTIN_CONTRACTS
from opcore.testing import TensorInput, entry, samples_of, tolerance_for
from opcore.types import TensorMeta

BACKENDS = ("onnxruntime", "openvino")
CONTRACTS = {contract.name: contract for contract in BUILTIN_CONTRACTS}
PER_OP = 6  # samples per op: the first ones of each op's kit entry (several shapes and attributes)


def _arrays(value: Any) -> Any:
    if isinstance(value, TensorInput):
        return value.to_numpy()
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, TensorInput) for v in value):
        return tuple(v.to_numpy() for v in value)
    return value


def _as_node(
    op: str, bound: tuple[Any, ...], bake: bool, outputs: tuple[str, ...]
) -> tuple[PartNode, list[str], dict[str, Any], dict[str, Any]]:
    """The node of a bound call, its runtime inputs (in order), its constants, and every array by name."""
    args: list[Any] = []
    inputs: list[str] = []
    constants: dict[str, Any] = {}
    arrays: dict[str, Any] = {}

    def ref(array: numpy.ndarray, position: int) -> ValueRef:
        name = f"a{len(arrays)}"
        arrays[name] = array
        # bake the second and later tensors (weights, other operands); the first stays an input
        (constants.__setitem__(name, array) if bake and position > 0 else inputs.append(name))
        return ValueRef(name)

    for position, value in enumerate(bound):
        if isinstance(value, numpy.ndarray):
            args.append(ref(value, position))
        elif isinstance(value, tuple) and value and all(isinstance(v, numpy.ndarray) for v in value):
            args.append(tuple(ref(v, position) for v in value))
        else:
            args.append(value)
    return PartNode(op, tuple(args), outputs), inputs, constants, arrays


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_op_sample_builds_as_a_partition(backend: str) -> None:
    compiler = compilers().get(backend)
    if compiler is None:
        pytest.skip(f"the {backend} backend is not loaded here")
    ops = sorted(op for op in CONTRACTS if compiler.supports(op))
    compiled = refused = 0
    refusals: list[str] = []
    for op in ops:
        taken = 0
        for sample in samples_of(entry(op)):
            if taken == PER_OP:
                break
            if any(t.dtype.value == "bfloat16" for t in sample.tensors()):
                continue  # numpy has no bfloat16: the graph runtimes' kernels take numpy arrays
            args = [_arrays(a) for a in sample.args]
            kwargs = {k: _arrays(v) for k, v in sample.kwargs.items()}
            try:
                expected = opcore.run(op, *args, backend=backend, **kwargs)
            except opcore.OpcoreError:
                continue  # the backend's kernel declines it: a plan would not put it in a partition
            taken += 1
            bound = CONTRACTS[op].schema.bind(args, kwargs)
            # a list result (split, chunk): one node output per piece
            pieces = expected if isinstance(expected, tuple) else (expected,)
            outputs = tuple(f"out{i}" for i in range(len(pieces)))
            node, inputs, constants, arrays = _as_node(op, bound, bake=taken % 2 == 0, outputs=outputs)
            metas = {name: TensorMeta.of(array) for name, array in arrays.items()}
            metas.update((name, TensorMeta.of(piece)) for name, piece in zip(outputs, pieces))
            spec = PartitionSpec(f"{op}_{taken}", (node,), tuple(inputs), constants, outputs, metas)
            if backend == "openvino" and any(0 in meta.shape for meta in metas.values()):
                # refused up front: the CPU plugin can crash compiling empty static shapes
                with pytest.raises(PartitionError, match="is empty"):
                    compiler.compile(spec)
                continue
            try:
                results = compiler.compile(spec)(*(arrays[name] for name in inputs))
            except opcore.Unsupported as error:
                refused += 1
                refusals.append(f"{op} [{sample.id}]: {error}")
                continue
            compiled += 1
            assert len(results) == len(pieces), (op, sample.id)
            for result, piece in zip(results, pieces):
                assert result.dtype == piece.dtype, (op, sample.id)
                assert result.shape == piece.shape, (op, sample.id)
                # the kit's tolerance: a runtime may compute a baked-in operand differently (x * (1/c) for x / c)
                tolerance = tolerance_for(TensorMeta.of(piece).dtype, entry(op), sample)
                numpy.testing.assert_allclose(
                    result, piece, rtol=tolerance.rtol, atol=tolerance.atol, err_msg=f"{op} [{sample.id}]"
                )
    # nearly every sample the one-op kernels run builds as a partition too
    assert compiled >= 0.95 * (compiled + refused), "\n".join(refusals)
