"""opcore.graph partitions, against a small numpy partition compiler of the tests' own (the real
onnxruntime/openvino compilers have their own tests): grouping, cycles, the cost rule, compile
failures, dynamic dims."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy
import pytest

torch = pytest.importorskip("torch")

from graph_models import LlamaBlock, seeded  # noqa: E402
from torch import nn  # noqa: E402

import opcore  # noqa: E402
import opcore.graph  # noqa: E402
from opcore.graph import partitioning  # noqa: E402
from opcore.graph.errors import UncoveredError  # noqa: E402
from opcore.graph.ir import Node, ValueRef  # noqa: E402
from opcore.graph.partition import PartitionError, PartitionSpec  # noqa: E402


class NumpyPartition:
    """Runs the spec's nodes one after another with the reference backend's numpy kernels."""

    backend = "reference"

    def __init__(self, spec: PartitionSpec) -> None:
        self.spec = spec
        self.calls = 0

    def __call__(self, *inputs: numpy.ndarray) -> tuple[numpy.ndarray, ...]:
        self.calls += 1
        values: dict[str, Any] = dict(zip(self.spec.inputs, inputs))
        values.update(self.spec.constants)

        def get(value: Any) -> Any:
            if isinstance(value, ValueRef):
                return values[value.name]
            if isinstance(value, tuple):
                return tuple(get(v) for v in value)
            return value

        for node in self.spec.nodes:
            contract = opcore.runtime.runtime().registry.contract(node.op)
            args = [get(a) for a in node.args]
            positional = [a for a, arg in zip(args, contract.schema.arguments) if not arg.kwarg_only]
            keywords = {arg.name: a for a, arg in zip(args, contract.schema.arguments) if arg.kwarg_only}
            result = opcore.run(node.op, *positional, backend="reference", **keywords)
            values[node.outputs[0]] = result
        return tuple(numpy.asarray(values[name]) for name in self.spec.outputs)

    def save(self, folder: pathlib.Path) -> dict[str, Any]:
        (folder / f"{self.spec.name}.json").write_text(json.dumps([n.op for n in self.spec.nodes]))
        return {"files": [f"{self.spec.name}.json"]}


class NumpyCompiler:
    backend = "reference"

    def __init__(
        self,
        ops: tuple[str, ...] = ("linear", "relu", "add", "mul", "silu", "reshape", "transpose", "sub"),
        refuse: str | None = None,
        say_where: bool = True,
    ) -> None:
        self.ops = set(ops)
        self.refuse = refuse  # an op this "runtime" fails to compile
        self.say_where = say_where
        self.compiled: list[PartitionSpec] = []

    def supports(self, op: str) -> bool:
        return op in self.ops

    def compile(self, spec: PartitionSpec) -> NumpyPartition:
        for i, node in enumerate(spec.nodes):
            if node.op == self.refuse:
                raise PartitionError(
                    spec.name, self.backend, f"no rule for {node.op}", node=i if self.say_where else None
                )
        self.compiled.append(spec)
        return NumpyPartition(spec)

    def load(self, folder, record, spec):
        return self.compile(spec)


@pytest.fixture
def fake(monkeypatch):
    compiler = NumpyCompiler()
    monkeypatch.setattr(partitioning, "compilers", lambda: {"reference": compiler})
    # the tests' models are tiny: a partition of two compute nodes pays here
    monkeypatch.setattr(partitioning, "COST", partitioning.Cost(call_us=0.0, boundary_us=0.0))
    return compiler


class Chain(nn.Module):
    """linear -> relu -> mul -> cumprod -> linear -> relu -> add: cumprod splits the chain."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.a(x)) * 2.0
        h = torch.cumprod(h, dim=-1)
        return torch.relu(self.b(h)) + x


def capture(model, *inputs, **options):
    # the placement rules under test, not this machine's timings (measured placement: test_graph_measuring)
    options.setdefault("measure", False)
    options.setdefault("rewrites", False)
    return opcore.graph.capture(seeded(model), inputs, **options)


def test_partition_split_around_a_node_the_backend_declines(fake):
    x = torch.randn(4, 8)
    model = seeded(Chain())
    plan = capture(model, x)
    assert [p.backend for p in plan.partitions] == ["reference", "reference"]
    first, _ = plan.partitions
    assert [plan.graph.nodes[i].op for i, n in enumerate(plan.graph.nodes) if n.name in first.nodes] == [
        "linear",
        "relu",
        "mul",
    ]
    cumprod = next(d for d in plan.decisions if d.op == "aten.cumprod.default")
    assert cumprod.partition is None and cumprod.backend == "cpu"
    assert (plan(x) - model(x)).abs().max().item() <= 1e-5
    summary = plan.explain().splitlines()[0]
    assert summary.startswith("reference 6/7 nodes in 2 partitions") and "cpu 1/7" in summary


def test_partitions_never_form_a_cycle():
    # a -> b(outside) -> c, and a -> c: a and c may not share a group
    nodes = (
        Node("a", "linear", "", (ValueRef("x"),), ("a",)),
        Node("b", "aten.cumprod.default", "", (ValueRef("a"),), ("b",)),
        Node("c", "add", "", (ValueRef("a"), ValueRef("b")), ("c",)),
        Node("d", "relu", "", (ValueRef("c"),), ("d",)),
    )
    graph = opcore.graph.ir.Graph(("x",), (), nodes, (ValueRef("d"),), {})
    groups = partitioning.group_acyclic(graph, [0, 2, 3])
    assert sorted(groups) == [[0], [2, 3]]
    # without the outside node in between, everything merges
    assert partitioning.group_acyclic(graph, [0, 1, 2, 3]) == [[0, 1, 2, 3]]


def test_cost_rule_keeps_tiny_partitions_out(fake):
    fake.ops = {"relu"}
    plan = capture(Chain(), torch.randn(4, 8))
    assert plan.partitions == ()
    cost = partitioning.Cost()
    ok, why = partitioning.pays([Node("r", "relu", "", (), ("r",))], boundary=2, cost=cost)
    assert not ok and "minimum" in why
    shapes = [Node("r", "reshape", "", (), ("r",))] * 3 + [Node("l", "linear", "", (), ("l",))] * 2
    ok, why = partitioning.pays(shapes, 8, cost)
    assert not ok and "less than" in why
    ok, why = partitioning.pays([Node("l", "linear", "", (), ("l",))] * 10, 2, cost)
    assert ok


def test_compile_failure_shrinks_the_partition_with_the_reason(fake):
    fake.refuse = "mul"
    x = torch.randn(4, 8)
    model = seeded(Chain())
    plan = capture(model, x)
    mul = next(d for d in plan.decisions if d.op == "mul")
    assert mul.partition is None
    refusal = next(v for v in mul.verdicts if v.kernel == "reference partition")
    assert refusal.status == "declined" and "no rule for mul" in refusal.reason
    assert any("left out after a compile failure" in p.note for p in plan.partitions)
    assert (plan(x) - model(x)).abs().max().item() <= 1e-5
    assert "no rule for mul" in plan.explain()


def test_compile_failure_without_a_node_is_found_by_prefixes(fake):
    fake.refuse, fake.say_where = "mul", False
    plan = capture(Chain(), torch.randn(4, 8))
    assert next(d for d in plan.decisions if d.op == "mul").partition is None
    assert {d.op for d in plan.decisions if d.partition} >= {"linear", "relu", "add"}


def test_dynamic_batch_is_carried_into_partitions(fake):
    model = seeded(LlamaBlock())
    x = torch.randn(2, 8, 32)
    batch = torch.export.Dim("batch", min=1, max=8)
    plan = opcore.graph.capture(model, (x,), dynamic_shapes=({0: batch},), measure=False)
    assert plan.partitions
    specs = [p.spec for p in plan.partitions]
    assert any(axes == frozenset({0}) for spec in specs for axes in spec.dynamic.values())
    # a reshape with a size computed at run time goes in with -1 in its place
    reshapes = [n for spec in specs for n in spec.nodes if n.op == "reshape"]
    assert reshapes and all(-1 in n.args[1] for n in reshapes)
    for b in (1, 3):
        xb = torch.randn(b, 8, 32)
        assert (plan(xb)[0] - model(xb)[0]).abs().max().item() <= 1e-4


def test_partitions_are_compiled_at_plan_time_and_verified(fake):
    x = torch.randn(4, 8)
    plan = capture(Chain(), x)
    assert len(fake.compiled) == 2  # at capture, before any call
    report = plan.verify(x)
    assert report.ok, str(report)
    assert [c.unit for c in report.checks if c.unit.startswith("partition")] == [
        "partition p0 (reference)",
        "partition p1 (reference)",
    ]


def test_strict_with_a_graph_backend_lists_what_it_does_not_cover(fake):
    with pytest.raises(UncoveredError, match="cumprod"):
        capture(Chain(), torch.randn(4, 8), backends=["reference"], fallback=False)


def test_partitions_off_runs_per_node(fake):
    plan = capture(Chain(), torch.randn(4, 8), partitions=False)
    assert plan.partitions == () and not fake.compiled


def test_a_partition_gets_zero_dim_values_as_zero_dim_contiguous_arrays() -> None:
    seen: list[Any] = []

    class Echo:
        backend = "reference"

        def __call__(self, *arrays: Any) -> tuple[Any, ...]:
            seen.extend(arrays)
            return arrays

    from opcore.graph.partition_guard import partition_call
    from opcore.types import DType, TensorMeta

    metas = {"a": TensorMeta((), DType.FLOAT32), "b": TensorMeta((3, 4), DType.FLOAT32)}
    spec = PartitionSpec("p0", (), ("a", "b"), {}, ("a", "b"), metas)
    record = partitioning.PartitionRecord("p0", "reference", (), spec, Echo(), dims=((), (3, 4)))  # type: ignore[arg-type]
    call = partition_call(record)
    out = call(torch.tensor(3.0), torch.randn(4, 3).t())
    assert [a.shape for a in seen] == [(), (3, 4)]  # numpy.ascontiguousarray would make the first (1,)
    assert seen[1].flags.c_contiguous and [o.shape for o in out] == [torch.Size([]), torch.Size([3, 4])]
