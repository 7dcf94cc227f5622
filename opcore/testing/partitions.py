"""The conformance kit for partition compilers (opcore.graph): graphs built from the kit's samples.

For a backend with a partition compiler, each op the compiler claims (``supports``) and the kit has
samples of becomes partitions to check (``partition_cases``):

* **one node**: the op alone on a sample the backend's kernel accepts (the plan asks that kernel's
  checker before a node may join a partition, so a sample it declines is declined here too);
* **chain**: the same node fed by, and feeding, a unary elementwise op the compiler also claims
  (relu, tanh, ...), as one partition of three nodes.

``check_partition`` compiles the spec, runs it, compares every output with the reference backend
(the kit's tolerances), checks the outputs against the spec (opcore.graph.partition_guard), saves it
to a folder, loads it back through the compiler's ``load`` and runs it again. ``check_partition_error``
checks the partition-specific cases (``PARTITION_ERRORS``): a node the compiler does not claim must
be refused with a PartitionError naming it; an empty tensor and a dynamic axis must either work
(the dynamic one at two sizes) or be refused with a PartitionError, never another exception.

>>> [case.id for case in partition_cases("example") if case.entry.op == "silu"][:2]  # doctest: +SKIP
['example-silu-float32', 'example-silu-float64']
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy

from opcore.errors import OpcoreError
from opcore.testing.conformance import ConformanceError, Outcome, Status
from opcore.testing.records import OpEntry, Sample
from opcore.testing.tolerances import tolerance_for
from opcore.types import DType, TensorMeta, is_numpy_bfloat16

__all__ = [
    "PARTITION_ERRORS",
    "SAMPLES_PER_OP",
    "PartitionCase",
    "check_partition",
    "check_partition_error",
    "partition_cases",
]

# unary elementwise ops a chain puts around the op under test (the first one the compiler claims)
CHAIN_OPS = ("relu", "tanh", "sigmoid", "abs", "neg", "silu")
# the partition-specific cases, each checked on one unary elementwise op the compiler claims
PARTITION_ERRORS = ("declined node", "empty tensor", "dynamic axis")
UNCLAIMED_OP = "opcore.testing.no_such_op"
# samples per op in the pytest run (the first ones: each op's dtypes come first); a vendor's own
# tests may take every one (partition_cases(backend, samples=None))
SAMPLES_PER_OP = 3


@dataclass(frozen=True)
class PartitionCase:
    """One partition to check: ``shape`` "node" (the op alone) or "chain" (between two other nodes)."""

    backend: str
    entry: OpEntry
    sample: Sample
    shape: str

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.shape}-{self.entry.op}-{self.sample.id}"


def _compiler(backend: str) -> Any:
    from opcore.graph.partition import compilers

    return compilers().get(backend)


def _supports(compiler: Any, op: str) -> bool:
    """``compiler.supports(op)``; an answer that raises is a CompilerCrash naming the backend and the op
    (the kit reports the plugin's bug in its words, not a traceback from inside the collection)."""
    from opcore.graph.partition_guard import answer

    return answer(compiler, "supports", op)


def _chain_op(compiler: Any) -> str | None:
    return next((op for op in CHAIN_OPS if _supports(compiler, op)), None)


def partition_cases(
    backend: str, ops: Sequence[str] | None = None, samples: int | None = SAMPLES_PER_OP
) -> Iterator[PartitionCase]:
    """The cases of ``backend``'s compiler (none where it has no compiler); ``ops``: only these;
    ``samples``: the first this many samples of each op as one-node graphs, half as many as chains
    (None: every sample, both ways)."""
    from opcore.testing.conformance import claims
    from opcore.testing.entries import entries, samples_of

    compiler = _compiler(backend)
    if compiler is None:
        return
    chain = _chain_op(compiler)
    for entry in entries():
        wanted = ops is None or entry.op in ops
        if not wanted or not _supports(compiler, entry.op) or not claims(backend, entry.op):
            continue
        for index, sample in enumerate(samples_of(entry)):
            if samples is not None and index >= samples:
                break
            yield PartitionCase(backend, entry, sample, "node")
            if chain is not None and (samples is None or index < max(1, samples // 2)):
                yield PartitionCase(backend, entry, sample, "chain")


def _numpy_call(case: PartitionCase) -> tuple[Any, tuple[Any, ...], tuple[TensorMeta, ...]] | Outcome:
    """(contract, bound arguments as numpy arrays, output metas), or why the sample does not apply."""
    from opcore.runtime import runtime

    sample = case.sample
    tensors = sample.tensors()
    if not tensors:
        return Outcome(Status.SKIPPED, "a partition takes tensors: this sample has none")
    if any(t.dtype is DType.BFLOAT16 for t in tensors):
        if _wide(case.backend) is None:
            return Outcome(Status.SKIPPED, f"bfloat16: {case.backend}'s partition compiler takes none (no bfloat16_as)")
        try:
            DType.BFLOAT16.to_numpy()
        except OpcoreError as error:
            return Outcome(Status.SKIPPED, f"bfloat16: {str(error).splitlines()[0]}")
    contract = runtime().ensure_loaded().registry.contract(case.entry.op)

    def make(value: Any) -> Any:
        if hasattr(value, "to_numpy"):
            return value.to_numpy()
        if isinstance(value, (list, tuple)):
            return type(value)(make(v) for v in value)
        return value

    args = tuple(make(a) for a in sample.args)
    kwargs = {name: make(value) for name, value in sample.kwargs.items()}
    bound = contract.schema.bind(args, kwargs)

    def meta_of(value: Any) -> Any:
        if isinstance(value, numpy.ndarray):
            return _meta(value)
        if isinstance(value, (list, tuple)):
            return type(value)(meta_of(v) for v in value)
        return value

    out = contract.meta(*(meta_of(v) for v in bound))
    outputs = out if isinstance(out, tuple) else (out,)
    return contract, bound, tuple(outputs)


def _wide(backend: str) -> DType | None:
    """The dtype ``backend``'s partitions compute bfloat16 in (its compiler's ``bfloat16_as``), or None."""
    found = getattr(_compiler(backend), "bfloat16_as", None)
    return None if found is None else DType.parse(found)


def _is_bfloat16(value: Any) -> bool:
    return isinstance(value, numpy.ndarray) and is_numpy_bfloat16(value.dtype)


def _meta(array: numpy.ndarray) -> TensorMeta:
    """An array's meta (a bfloat16 one's through its int16 view: single calls refuse numpy bfloat16)."""
    if _is_bfloat16(array):
        return TensorMeta.of(array.view(numpy.int16)).replace(dtype=DType.BFLOAT16)
    return TensorMeta.of(array)


def _widened(bound: tuple[Any, ...], contract: Any, wide: DType) -> tuple[Any, ...]:
    """The call as a plan asks a backend that computes bfloat16 in ``wide`` about it (opcore.graph.planner):
    bfloat16 arrays as ``wide`` arrays, a ``dtype`` argument naming bfloat16 as ``wide``."""
    from opcore.graph.planner import bfloat16_dtype_shown

    def widen(value: Any) -> Any:
        if _is_bfloat16(value):
            return value.astype(wide.to_numpy())
        if isinstance(value, (list, tuple)):
            return type(value)(widen(v) for v in value)
        return value

    return bfloat16_dtype_shown(tuple(widen(v) for v in bound), contract.schema.names, wide)


def _accepted(backend: str, op: str, bound: tuple[Any, ...], contract: Any) -> str | None:
    """None where the backend's own kernel accepts the call (a partition node needs that), else why not;
    a call with bfloat16 as the plan asks it (``_widened``) where the backend computes bfloat16 wider."""
    import opcore

    wide = _wide(backend)
    if wide is not None:
        bound = _widened(bound, contract, wide)

    args = [v for v, a in zip(bound, contract.schema.arguments) if not a.kwarg_only]
    kwargs = {a.name: v for v, a in zip(bound, contract.schema.arguments) if a.kwarg_only}
    told = opcore.explain(op, *args, backend=backend, **kwargs)
    if told.chosen is None or told.chosen == "decomposition" or told.backend != backend:
        reasons = [c.reason for c in told.candidates if c.backend == backend and c.reason]
        return "; ".join(reasons) or "its kernel does not accept this call"
    return None


def _spec(case: PartitionCase, contract: Any, bound: tuple[Any, ...], outputs: Sequence[TensorMeta]) -> tuple[Any, ...]:
    """(spec, input arrays) for the case: tensors become inputs, everything else stays an attribute."""
    from opcore.partition_protocol import PartitionSpec, PartNode, ValueRef

    inputs: list[str] = []
    arrays: list[Any] = []
    metas: dict[str, TensorMeta] = {}

    def ref(value: Any) -> Any:
        if isinstance(value, numpy.ndarray):
            name = f"in{len(inputs)}"
            inputs.append(name)
            arrays.append(numpy.array(value, order="C"))  # ascontiguousarray makes a 0-D value 1-D
            metas[name] = _meta(arrays[-1])
            return ValueRef(name)
        if isinstance(value, tuple) and any(isinstance(v, numpy.ndarray) for v in value):
            return tuple(ref(v) for v in value)
        return value

    args = tuple(ref(v) for v in bound)
    out_names = tuple(f"out{i}" for i in range(len(outputs)))
    metas.update(zip(out_names, outputs))
    nodes = [PartNode(case.entry.op, args, out_names)]
    results = out_names
    chain = _chain_op(_compiler(case.backend))
    floating = [i for i, a in enumerate(args) if isinstance(a, ValueRef) and metas[a.name].dtype.is_floating]
    if case.shape == "chain" and chain is not None and floating and outputs[0].dtype.is_floating:
        first = floating[0]
        pre = f"pre{first}"
        metas[pre] = metas[args[first].name]
        nodes.insert(0, PartNode(chain, (args[first],), (pre,)))
        nodes[1] = PartNode(case.entry.op, (*args[:first], ValueRef(pre), *args[first + 1 :]), out_names)
        nodes.append(PartNode(chain, (ValueRef(out_names[0]),), ("post",)))
        metas["post"] = metas[out_names[0]]
        results = ("post", *out_names[1:])
    elif case.shape == "chain":
        return None, arrays  # no floating tensor in or out to chain an elementwise op to
    spec = PartitionSpec(f"kit_{case.shape}", tuple(nodes), tuple(inputs), {}, results, metas)
    return spec, arrays


def _reference(spec: Any, arrays: Sequence[Any], contract: Any) -> list[Any]:
    """The spec's outputs computed node by node on the reference backend (bfloat16 values as torch
    tensors there: a single call takes no numpy bfloat16)."""
    import opcore
    from opcore.graph.partition_guard import host_array, torch_of

    values = dict(zip(spec.inputs, arrays))
    for node in spec.nodes:

        def value(arg: Any) -> Any:
            if hasattr(arg, "name") and type(arg).__name__ == "ValueRef":
                found = values[arg.name]
                return torch_of(found) if _is_bfloat16(found) else found
            if isinstance(arg, tuple):
                return tuple(value(a) for a in arg)
            return arg

        schema = opcore.runtime.runtime().ensure_loaded().registry.contract(node.op).schema
        bound = [value(a) for a in node.args]
        args = [v for v, a in zip(bound, schema.arguments) if not a.kwarg_only]
        kwargs = {a.name: v for v, a in zip(bound, schema.arguments) if a.kwarg_only}
        result = opcore.run(node.op, *args, backend="reference", **kwargs)
        for name, got in zip(node.outputs, result if isinstance(result, tuple) else (result,)):
            values[name] = numpy.asarray(got) if isinstance(got, (numpy.ndarray, numpy.generic)) else host_array(got)
    return [values[name] for name in spec.outputs]


def _run_checked(where: str, spec: Any, part: Any, arrays: Sequence[Any], expected: Sequence[Any], case: Any) -> None:
    from opcore.graph.partition_guard import output_problem

    try:
        got = part(*arrays)
    except Exception as error:
        raise ConformanceError(f"{where}\n  the compiled partition raised {type(error).__name__}: {error}") from error
    dims = [spec.metas[name].shape for name in spec.outputs]
    problem = output_problem(spec, dims, got)
    if problem is not None:
        raise ConformanceError(f"{where}\n  its outputs break the spec: {problem}")
    for name, have, want in zip(spec.outputs, got, expected):
        tolerance = tolerance_for(spec.metas[name].dtype, case.entry, case.sample)
        a, b = (v.astype(numpy.float32) if _is_bfloat16(v) else v for v in (have, want))
        try:
            numpy.testing.assert_allclose(a, b, rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True)
        except AssertionError as error:
            raise ConformanceError(f"{where}\n  output {name!r} differs from the reference:{error}") from None


def check_partition(case: PartitionCase) -> Outcome:
    """Compile, run, compare, save, load and run again the case's partition; ConformanceError where the
    compiler gets it wrong, an Outcome (PASSED, DECLINED, SKIPPED) otherwise."""
    found = _numpy_call(case)
    if isinstance(found, Outcome):
        return found
    contract, bound, outputs = found
    declined = _accepted(case.backend, case.entry.op, bound, contract)
    if declined is not None:
        return Outcome(Status.DECLINED, f"{case.backend}'s kernel declines it, so no partition takes it: {declined}")
    spec, arrays = _spec(case, contract, bound, outputs)
    if spec is None:
        return Outcome(Status.SKIPPED, "no floating tensor in and out to chain an elementwise op to")
    where = f"{case.backend}: partition ({case.shape}) {case.entry.op}[{case.sample.id}] {case.sample.describe()}"
    compiler = _compiler(case.backend)
    try:
        part = compiler.compile(spec)
    except OpcoreError as error:
        return Outcome(Status.DECLINED, f"{case.backend} refuses the partition: {str(error).splitlines()[0]}")
    except Exception as error:
        failure = f"{where}\n  compile() raised {type(error).__name__} (not a PartitionError): {error}"
        raise ConformanceError(failure) from error
    try:
        expected = _reference(spec, arrays, contract)
    except OpcoreError as error:  # the reference cannot run the chain (an op it has no dtype for)
        return Outcome(Status.SKIPPED, f"the reference cannot run this graph: {str(error).splitlines()[0]}")
    _run_checked(where, spec, part, arrays, expected, case)
    with tempfile.TemporaryDirectory(prefix="opcore-kit-") as folder:
        import json
        import pathlib

        try:
            record = part.save(pathlib.Path(folder))
            json.dumps(record)
            again = compiler.load(pathlib.Path(folder), record, spec)
        except Exception as error:
            raise ConformanceError(f"{where}\n  save() or load() failed: {type(error).__name__}: {error}") from error
        _run_checked(where + " (loaded)", spec, again, arrays, expected, case)
    return Outcome(Status.PASSED)


def check_partition_error(backend: str, kind: str) -> Outcome:
    """The partition-specific case ``kind`` (one of PARTITION_ERRORS) on ``backend``'s compiler."""
    from opcore.partition_protocol import PartitionError, PartitionSpec, PartNode, ValueRef

    compiler = _compiler(backend)
    if compiler is None:
        return Outcome(Status.NOT_COVERED, f"{backend} has no partition compiler")
    op = _chain_op(compiler)
    if op is None:
        return Outcome(Status.NOT_COVERED, f"{backend}'s compiler claims none of {', '.join(CHAIN_OPS)}")
    where = f"{backend}: partition case {kind!r} ({op})"
    meta = TensorMeta((3, 4), DType.FLOAT32)
    x = numpy.linspace(-2, 2, 12, dtype="float32").reshape(3, 4)
    if kind == "declined node":
        nodes = (PartNode(op, (ValueRef("x"),), ("a",)), PartNode(UNCLAIMED_OP, (ValueRef("a"),), ("b",)))
        spec = PartitionSpec("kit_declined", nodes, ("x",), {}, ("b",), {"x": meta, "a": meta, "b": meta})
        try:
            compiler.compile(spec)
        except PartitionError as error:
            if error.node not in (1, None):
                raise ConformanceError(f"{where}\n  the PartitionError names node {error.node}, not 1") from error
            return Outcome(Status.PASSED)
        except Exception as error:
            raise ConformanceError(
                f"{where}\n  compile() of a node it does not claim raised {type(error).__name__}, not a "
                f"PartitionError naming the node: {error}"
            ) from error
        raise ConformanceError(f"{where}\n  compile() accepted a node whose op it does not claim")
    if kind == "empty tensor":
        empty = TensorMeta((0, 4), DType.FLOAT32)
        node = PartNode(op, (ValueRef("x"),), ("y",))
        spec = PartitionSpec("kit_empty", (node,), ("x",), {}, ("y",), {"x": empty, "y": empty})
        arrays = [numpy.zeros((0, 4), "float32")]
    else:
        spec = PartitionSpec(
            "kit_dynamic", (PartNode(op, (ValueRef("x"),), ("y",)),), ("x",), {}, ("y",), {"x": meta, "y": meta},
            {"x": frozenset({0})},
        )  # fmt: skip
        arrays = [x]
    try:
        part = compiler.compile(spec)
    except PartitionError:
        return Outcome(Status.PASSED)  # refused in its own words: the plan keeps the node out
    except Exception as error:
        failure = f"{where}\n  compile() raised {type(error).__name__}, not a PartitionError: {error}"
        raise ConformanceError(failure) from error
    import opcore

    feeds = [arrays] if kind == "empty tensor" else [arrays, [numpy.concatenate([x, x, -x])]]
    for feed in feeds:
        try:
            (got,) = part(*feed)
        except Exception as error:
            raise ConformanceError(f"{where}\n  running it raised {type(error).__name__}: {error}") from error
        want = opcore.run(op, feed[0], backend="reference")
        if got.shape != want.shape:
            raise ConformanceError(f"{where}\n  gave shape {got.shape} for an input of shape {feed[0].shape}")
        numpy.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return Outcome(Status.PASSED)
