"""opcore.graph maps torch's creation ops without a tensor (zeros, ones, full, arange) to their
contracts: torch.export keeps them where a size or bound comes from an input's (dynamic) shape."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import opcore.graph  # noqa: E402


class Creations(nn.Module):
    def forward(self, x):
        n, m = x.shape
        positions = torch.arange(m)  # aten.arange.default, int64
        steps = torch.arange(1, 2 * n + 1, 2, dtype=torch.float32)  # aten.arange.start_step
        grid = torch.zeros(n, m) + torch.ones(n, m, dtype=torch.float64) + torch.full((n, m), 2.5)
        counts = torch.full((n,), 3)  # an int fill: int64, as torch infers it
        return x * positions + steps[:, None] + grid, counts + torch.arange(n, 2 * n)


def test_creation_ops_of_dynamic_sizes_map_to_their_contracts():
    x = torch.randn(3, 4)
    dims = {0: torch.export.Dim("n", min=2), 1: torch.export.Dim("m", min=2)}
    plan = opcore.graph.capture(Creations(), (x,), partitions=False, dynamic_shapes=(dims,))
    ops = [node.op for node in plan.graph.nodes]
    assert {"arange", "zeros", "ones", "full"} <= set(ops), ops
    assert not any(op.startswith("aten.") and op.split(".")[1] in ("arange", "zeros", "ones", "full") for op in ops)
    for shape in ((3, 4), (5, 2)):
        y = torch.randn(*shape)
        for got, want in zip(plan(y), Creations()(y), strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.allclose(got, want)


class NewCreations(nn.Module):
    def forward(self, x, n):
        # static sizes, x's dtype (int32 here) unless dtype= is given
        return x.new_zeros(2, 3), x.new_ones((4,)), x.new_full((2, 2), 7), x.new_zeros(3, dtype=torch.float64)


def test_new_factories_map_to_creation_ops_with_the_tensors_dtype():
    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    plan = opcore.graph.capture(NewCreations(), (x, 1), partitions=False)
    ops = [node.op for node in plan.graph.nodes]
    # new_ones is decomposed at capture (opcore.graph.decomposing: a static-size factory becomes a
    # constant), new_zeros and new_full map to zeros and full
    assert ops.count("zeros") == 2 and "full" in ops and not any(op.startswith("aten.") for op in ops), ops
    for got, want in zip(plan(x, 1), NewCreations()(x, 1), strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)
