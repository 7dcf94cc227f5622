"""Dynamic dims inside partitions: sizes computed at run time as partition inputs, the declared Dim
ranges as value bounds, symbolic comparisons in rewrites and index proofs (issue 25, item 2).

Each on the real runtimes: the onnxruntime and openvino compilers build reshape, expand, slice and
arange from 0-D size inputs; plans with a dynamic dim keep in partitions what only the dynamic size
kept out before, and still run every length as eager does.
"""

from __future__ import annotations

import json

import numpy
import pytest
import torch
from graph_models import small_llama
from torch import nn
from torch.export import Dim

import opcore.graph
from opcore.graph.partition import PartitionSpec, PartNode, ValueRef, compilers
from opcore.graph.partitioning import SIZE, takes_sizes
from opcore.graph.ranges import result_range
from opcore.types import DType, TensorMeta

F32, I64 = DType.FLOAT32, DType.INT64


def _sized_spec() -> PartitionSpec:
    """n -> (arange(n), expand(x, (n, -1))[1:n], reshape(x, (n * 0 + 1, 3))): every sized builder."""
    metas = {
        "n": SIZE,
        "x": TensorMeta((1, 3), F32),
        "r": TensorMeta((5,), I64),
        "e": TensorMeta((5, 3), F32),
        "s": TensorMeta((4, 3), F32),
        "v": TensorMeta((3, 1), F32),
    }
    nodes = (
        PartNode("arange", (ValueRef("n"), None, 1, None, "cpu"), ("r",)),
        PartNode("expand", (ValueRef("x"), (ValueRef("n"), -1)), ("e",)),
        PartNode("slice", (ValueRef("e"), 0, 1, ValueRef("n"), 1), ("s",)),
        PartNode("reshape", (ValueRef("x"), (3, 1)), ("v",)),
    )
    return PartitionSpec("p", nodes, ("n", "x"), {}, ("r", "s", "v"), metas)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_partition_takes_sizes_computed_at_run_time_as_inputs(backend: str) -> None:
    compiler = compilers()[backend]
    assert all(takes_sizes(compiler, op) for op in ("reshape", "expand", "slice", "arange"))
    assert not takes_sizes(compiler, "linear")
    part = compiler.compile(_sized_spec())
    x = numpy.arange(3, dtype=numpy.float32).reshape(1, 3)
    for n in (5, 9):
        r, s, v = part(numpy.asarray(n, dtype=numpy.int64), x)
        numpy.testing.assert_array_equal(r, numpy.arange(n))
        numpy.testing.assert_array_equal(s, numpy.broadcast_to(x, (n, 3))[1:n])
        assert v.shape == (3, 1)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_partition_creates_tensors_of_sizes_computed_at_run_time(backend: str) -> None:
    """zeros, ones and full of a dynamic dim's size (T5's position bias, a mask's buffer) in the
    partition instead of per node beside it."""
    compiler = compilers()[backend]
    assert all(takes_sizes(compiler, op) for op in ("zeros", "ones", "full"))
    metas = {
        "n": SIZE,
        "z": TensorMeta((1, 4, 5, 5), F32),
        "o": TensorMeta((5,), F32),
        "f": TensorMeta((2, 5), DType.INT32),
    }
    nodes = (
        PartNode("zeros", ((1, 4, ValueRef("n"), ValueRef("n")), None, "cpu"), ("z",)),
        PartNode("ones", ((ValueRef("n"),), "float32", "cpu"), ("o",)),
        PartNode("full", ((2, ValueRef("n")), 7, "int32", "cpu"), ("f",)),
    )
    part = compiler.compile(PartitionSpec("p", nodes, ("n",), {}, ("z", "o", "f"), metas))
    for n in (5, 9):
        z, o, f = part(numpy.asarray(n, dtype=numpy.int64))
        numpy.testing.assert_array_equal(z, numpy.zeros((1, 4, n, n), numpy.float32))
        numpy.testing.assert_array_equal(o, numpy.ones(n, numpy.float32))
        assert f.dtype == numpy.int32
        numpy.testing.assert_array_equal(f, numpy.full((2, n), 7))


class PositionBias(nn.Module):
    """T5's pattern: a zero bias of the dynamic length's size, added to the scores."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        bias = torch.zeros(1, 2, n, n)
        scores = x[:, None] @ x[:, None].transpose(-1, -2)
        return (scores.expand(-1, 2, -1, -1) + bias).softmax(-1)


def test_zeros_of_a_dynamic_size_stay_inside_the_partition() -> None:
    x = torch.randn(1, 16, 8, generator=torch.Generator().manual_seed(2))
    plan = opcore.graph.capture(PositionBias(), (x,), dynamic_shapes=({1: Dim("n", min=2, max=64)},), measure=False)
    creating = [d for d in _nodes(plan) if d["op"] == "zeros"]
    assert creating and all(d["backend"] != "cpu" for d in creating), plan.explain()
    assert len(plan.partitions) == 1, plan.explain()
    for length in (16, 37):
        x = torch.randn(1, length, 8, generator=torch.Generator().manual_seed(length))
        torch.testing.assert_close(plan(x), PositionBias()(x), rtol=1e-5, atol=1e-6)


def test_a_compiler_without_takes_sizes_never_gets_them() -> None:
    class Plain:
        def supports(self, op: str) -> bool:
            return True

    assert not takes_sizes(Plain(), "reshape")


class RunningCount(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (x > 0).cumsum(-1).float()


def _nodes(plan) -> list[dict]:
    return json.loads(plan.explain(format="json"))["nodes"]


def _verdict(plan, name: str, backend: str = "openvino") -> dict:
    record = next(d for d in _nodes(plan) if d["name"] == name)
    return next(c for c in record["candidates"] if c["backend"] == backend)


def test_a_declared_dim_range_bounds_a_running_sum_for_openvino() -> None:
    """max=64: the running sum fits int32 whatever the length (max=2**40 stays declined:
    tests/test_graph_ranges.py)."""
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(5))
    plan = opcore.graph.capture(
        RunningCount().eval(), (x,), dynamic_shapes=({1: Dim("n", min=2, max=64)},), measure=False
    )
    cumsum = _verdict(plan, "cumsum")
    assert cumsum["status"] in ("partition", "partition only") or "estimated cost" in cumsum["reason"], cumsum
    longer = torch.randn(2, 40, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(plan(longer), RunningCount()(longer), rtol=0, atol=0)


class FrontEnd(nn.Module):
    """Wav2Vec2's pattern: strided convolutions over 20*n samples give n - 1 frames, and the size read
    off the frames (not off the input) builds a causal mask."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(1, 8, 10, stride=5), nn.Conv1d(8, 8, 3, stride=2), nn.Conv1d(8, 8, 3, stride=2)
        )
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = self.proj(self.convs(x[:, None]).transpose(1, 2))
        n = frames.shape[1]
        mask = torch.arange(n)[:, None] >= torch.arange(n)[None, :]
        return (frames.unsqueeze(1) * mask[None, :, :, None]).sum(2)


def test_a_size_read_off_a_computed_tensor_is_computed_from_the_input(tmp_path) -> None:
    """sym_size(frames, 1) is s - 1 of an input of 20*s: read off the input's size, it no longer
    splits the partition around the read (two partitions before opcore.graph.input_sizes); the
    size nodes save and load as any."""
    torch.manual_seed(0)
    model = FrontEnd().eval()
    seq = Dim("n", min=2, max=100)
    plan = opcore.graph.capture(model, (torch.randn(2, 400),), dynamic_shapes=({1: 20 * seq},), measure=False)
    assert len(plan.partitions) == 1, plan.explain()
    sizes = [node for node in plan.graph.nodes if node.scalar]
    assert [node.op for node in sizes] == ["sym_size", "floordiv", "add"]  # (20*s) // 20 - 1
    assert sizes[0].args[0].name in plan.graph.inputs
    plan.save(tmp_path / "front")
    loaded = opcore.graph.load(tmp_path / "front")
    for samples in (20 * 37, 20 * 3):
        x = torch.randn(2, samples)
        with torch.no_grad():
            torch.testing.assert_close(plan(x), model(x), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(loaded(x), plan(x), rtol=0, atol=0)


def test_only_a_linear_size_of_one_symbol_is_rewritten() -> None:
    from opcore.graph.input_sizes import linear_in

    assert linear_in("20*s0", "s0") == (20, 0) and linear_in("s0 - 1", "s0") == (1, -1)
    assert linear_in("s0", "s0") == (1, 0)
    assert linear_in("(s0 - 1)//2", "s0") is None  # a floor: read off the tensor as before
    assert linear_in("s0*s1", "s0") is None and linear_in("s1 + 1", "s0") is None
    assert linear_in("-s0 + 64", "s0") is None  # shrinking with the symbol
    assert linear_in("s0**2", "s0") is None


class Positions(nn.Module):
    """Reads x at positions arange(x.size(1)) along dim 1 (a mask builder's pattern), or, with
    ``other``, along dim 1 of a second input whose size is another symbol."""

    def __init__(self, other: bool = False) -> None:
        super().__init__()
        self.other = other

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        where = torch.arange(x.shape[1])
        target = y if self.other else x
        return (target[:, where] * 2.0).sum(-1) + x.sum(-1)


@pytest.mark.parametrize("other", [False, True])
def test_an_index_by_arange_of_the_dims_own_size_is_proven(other: bool) -> None:
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randn(2, 12, generator=torch.Generator().manual_seed(2))
    shapes = ({1: Dim("n", min=2, max=64)}, {1: Dim("m", min=2, max=64)})
    model = Positions(other).eval()
    plan = opcore.graph.capture(model, (x, y), dynamic_shapes=shapes, measure=False)
    index = next(d for d in _nodes(plan) if d["op"] == "index")
    if other:  # positions 0 .. n-1 into a dim of size m: nothing proves them, the kernel checks
        assert index["partition"] is None, index
    else:
        assert index["partition"] is not None, index
    for n, m in ((5, 9), (30, 40)):
        a, b = torch.randn(2, n), torch.randn(2, m)
        torch.testing.assert_close(plan(a, b), model(a, b))


def test_argmax_over_two_dynamic_dims_has_no_range() -> None:
    # two unknown sizes (-1 each) multiply to 1: the count must stay unknown
    assert result_range("argmax", (TensorMeta((-1, -1), F32), None, False)) is None


def test_a_dynamic_decoder_is_one_partition_with_its_attention_fused() -> None:
    pytest.importorskip("transformers", reason="the decoder is a transformers model")
    model = small_llama(use_cache=False)
    ids = torch.randint(3, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    shapes = ({0: Dim("batch", min=1, max=8), 1: Dim("seq", min=2, max=64)},)
    plan = opcore.graph.capture(model, (ids,), dynamic_shapes=shapes, measure=False)
    assert any("grouped_query_attention" in note for note in plan.notes), plan.notes
    assert len(plan.partitions) == 1, plan.explain()
    for batch, length in ((1, 5), (3, 40)):
        other = torch.randint(3, 256, (batch, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = model(other).logits
        assert (plan(other).logits - want).abs().max().item() <= 1e-4
