"""A compile failure that is no node's (a runtime that fails every model: a session option it rejects,
an environment variable with a bad value) refuses the backend's nodes at once, in a bounded number of
compiles, and explain says why on its first lines; a failure that is one node's still takes that node
alone out (opcore.graph.partitioning)."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from test_graph_partitioning import Chain, NumpyCompiler, NumpyPartition, capture  # noqa: E402
from torch import nn  # noqa: E402

from opcore.graph import partition, partitioning  # noqa: E402
from opcore.graph.partition import PartitionError, PartitionSpec  # noqa: E402

MISCONFIGURED = "invalid value 'fastest' for session option 'execution_mode'"
WHOLE = "reference's partition compiler failed, no partition of it is used"


class Counting(NumpyCompiler):
    """The tests' numpy runtime, counting every compile it is asked for; ``every``: a reason it
    fails each model with (a misconfigured runtime), None: it fails only on ``refuse``'s op."""

    def __init__(self, every: str | None = None, say_where: bool = False, refuse: str | None = None) -> None:
        super().__init__(refuse=refuse, say_where=say_where)
        self.every = every
        self.tried: list[int] = []  # per compile asked for, its number of nodes

    def compile(self, spec: PartitionSpec) -> NumpyPartition:
        self.tried.append(len(spec.nodes))
        if self.every is not None:  # a runtime naming a node names the first, as compile_or_locate does
            raise PartitionError(spec.name, self.backend, self.every, node=0 if self.say_where else None)
        return super().compile(spec)


def install(monkeypatch: pytest.MonkeyPatch, compiler: Counting) -> Counting:
    for module in (partition, partitioning):
        monkeypatch.setattr(module, "compilers", lambda: {"reference": compiler})
    # the tests' models are tiny: a partition of two compute nodes pays here
    monkeypatch.setattr(partitioning, "COST", partitioning.Cost(call_us=0.0, boundary_us=0.0))
    return compiler


class Deep(nn.Module):
    """Eight linear -> relu layers: one group of 16 nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(m for _ in range(8) for m in (nn.Linear(8, 8), nn.ReLU())))

    def forward(self, x: Any) -> Any:
        return self.layers(x)


@pytest.mark.parametrize("say_where", [False, True], ids=["prefixes", "compiler-names-node-0"])
@pytest.mark.parametrize(("model", "largest"), [(Chain, 3), (Deep, 16)], ids=["chain", "deep"])
def test_a_runtime_failing_every_model_is_refused_at_once(
    monkeypatch: pytest.MonkeyPatch, model: type[nn.Module], largest: int, say_where: bool
) -> None:
    """``largest``: the nodes of the model's largest group. Refused node by node (before), each node
    cost a compile and a bisection: Deep 53 compiles (15 where the runtime names node 0), Chain 8 (4)."""
    compiler = install(monkeypatch, Counting(every=MISCONFIGURED, say_where=say_where))
    x = torch.randn(4, 8)
    module = model()
    plan = capture(module, x)
    # the first group's compile, its bisection (none where the runtime names node 0), one node alone
    assert len(compiler.tried) <= 2 + math.ceil(math.log2(largest)), compiler.tried
    assert plan.partitions == () and all(d.partition is None for d in plan.decisions)
    accepted = [d for d in plan.decisions if any(v.kernel == "reference partition" for v in d.verdicts)]
    assert len(accepted) >= 6
    for decision in accepted:
        (refusal,) = [v for v in decision.verdicts if v.kernel == "reference partition"]
        assert refusal.status == "declined" and refusal.reason.startswith(WHOLE) and MISCONFIGURED in refusal.reason
    text = plan.explain()
    head = text.splitlines()[:3]
    assert any(line.startswith(f"  note: {WHOLE}") and MISCONFIGURED in line for line in head), head
    assert text.count(f"note: {WHOLE}") == 1
    assert (plan(x) - module(x)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("say_where", [False, True], ids=["prefixes", "compiler-names-it"])
def test_a_node_the_runtime_refuses_first_in_its_group_is_refused_alone(
    monkeypatch: pytest.MonkeyPatch, say_where: bool
) -> None:
    """Each linear opens its group and fails alone: a node of another op compiles alone, so the failure
    is the linears', not the runtime's; the rest still runs in partitions."""
    install(monkeypatch, Counting(refuse="linear", say_where=say_where))
    x = torch.randn(4, 8)
    plan = capture(Chain(), x)
    linears = [d for d in plan.decisions if d.op == "linear"]
    assert len(linears) == 2 and all(d.partition is None for d in linears)
    for decision in linears:
        (refusal,) = [v for v in decision.verdicts if v.kernel == "reference partition"]
        assert refusal.reason == "reference could not compile it in a partition: no rule for linear"
    assert {d.op for d in plan.decisions if d.partition} == {"relu", "mul", "add"}
    assert len(plan.partitions) == 2
    assert WHOLE not in plan.explain()


def test_ops_that_each_fail_for_their_own_reason_are_refused_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime that refuses every op, each with its own reason, fails for its nodes, not as a whole:
    each is refused with its own reason."""

    class NoOps(Counting):
        def compile(self, spec: PartitionSpec) -> NumpyPartition:
            self.tried.append(len(spec.nodes))
            raise PartitionError(spec.name, self.backend, f"no rule for {spec.nodes[0].op}")

    install(monkeypatch, NoOps())
    plan = capture(Chain(), torch.randn(4, 8))
    assert plan.partitions == ()
    reasons = {d.op: v.reason for d in plan.decisions for v in d.verdicts if v.kernel == "reference partition"}
    assert reasons["linear"] == "reference could not compile it in a partition: no rule for linear"
    assert WHOLE not in plan.explain()
