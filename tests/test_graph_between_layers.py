"""What models compute between their layers, planned into the layers' partition (issue 25): the
copies ``.contiguous()`` makes, positions repeated per row, relative position buckets computed from
static sizes, Swin's roll and pooler, a weight norm, type_as / t / baddbmm, a mask cast to bool.

Each of these ran per node as an ATen fallback (no runtime builds it), splitting the plan; each
module here asserts the ops the graph keeps, the partition count and the result against eager.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("openvino", reason="the partition counts are those of an OpenVINO plan")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import opcore.graph  # noqa: E402

ON_OPENVINO = ("openvino", "cpu")


def planned(model, *inputs, dynamic_shapes=None):
    model = model.eval()
    plan = opcore.graph.capture(model, inputs, backends=ON_OPENVINO, measure=False, dynamic_shapes=dynamic_shapes)
    with torch.no_grad():
        want = model(*inputs)
    got = plan(*inputs)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    per_node = [d.op for d in plan.decisions if d.backend != "python" and d.partition is None]
    fallbacks = [n.op for n in plan.graph.nodes if n.op.startswith("aten.")]
    return plan, per_node, fallbacks


def head(width):
    """Layers after the pattern: enough compute that a partition is worth its call."""
    layers = [nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, width)]
    return nn.Sequential(*layers)


class Attention(nn.Module):
    """Heads split and merged through ``.contiguous()`` (Whisper, MobileViT, BLOOM, Phi-3, T5...)."""

    def __init__(self, width=32, heads=4):
        super().__init__()
        torch.manual_seed(0)
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)

    def forward(self, x):
        b, n, w = x.shape
        q, k, v = (p(x).view(b, n, self.heads, -1).transpose(1, 2).contiguous() for p in self.qkv)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).contiguous().view(b, n, w)).transpose(1, 2).contiguous()


def test_contiguous_copies_leave_the_graph_and_the_result_keeps_eagers_strides():
    x = torch.randn(2, 8, 32)
    plan, per_node, fallbacks = planned(Attention(), x)
    # the one copy left makes the result contiguous: the caller gets the strides eager gives
    assert fallbacks == per_node == ["aten.clone.default"] and len(plan.partitions) == 1, plan.explain()
    assert plan.graph.nodes[-1].op == "aten.clone.default" and plan(x).is_contiguous()


class RepeatedPositions(nn.Module):
    """``arange(n).unsqueeze(0).repeat(b, 1)`` positions reading a table (Whisper's decoder)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.table = nn.Parameter(torch.randn(64, 16))
        self.head = head(16)

    def forward(self, x):
        positions = torch.arange(x.shape[1]).unsqueeze(0).repeat(x.shape[0], 1)
        return self.head(x + self.table[positions])


def test_repeat_decomposes_and_the_positions_are_proven_in_range():
    x = torch.randn(2, 12, 16)
    plan, per_node, fallbacks = planned(RepeatedPositions(), x)
    assert fallbacks == [] and per_node == [] and len(plan.partitions) == 1, plan.explain()
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=64)
    plan, per_node, fallbacks = planned(RepeatedPositions(), x, dynamic_shapes=({0: batch, 1: seq},))
    assert fallbacks == [] and per_node == [] and len(plan.partitions) == 1, plan.explain()
    other = torch.randn(3, 20, 16)
    assert torch.allclose(plan(other), RepeatedPositions()(other), atol=1e-5)


class Buckets(nn.Module):
    """T5's relative position buckets: log, min and casts of positions from static sizes."""

    def __init__(self, buckets=8, distance=32, heads=2):
        super().__init__()
        torch.manual_seed(0)
        self.buckets, self.distance = buckets, distance
        self.bias = nn.Embedding(buckets, heads)
        self.head = head(10)

    def forward(self, scores):
        n = scores.shape[-1]
        relative = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        exact = self.buckets // 2
        large = exact + (
            torch.log(relative.abs().float() / exact) / math.log(self.distance / exact) * (self.buckets - exact)
        ).to(torch.long)
        large = torch.min(large, torch.full_like(large, self.buckets - 1))
        bucket = torch.where(relative.abs() < exact, relative.abs(), large)
        return self.head(torch.softmax(scores + self.bias(bucket).permute(2, 0, 1), dim=-1))


def test_values_from_static_sizes_fold_into_constants():
    scores = torch.randn(1, 2, 10, 10)
    plan, per_node, fallbacks = planned(Buckets(), scores)
    # log and min (no contract) folded with the rest: the bucket table is a constant of the plan
    assert fallbacks == [] and per_node == [] and len(plan.partitions) == 1, plan.explain()
    assert not any(n.op in ("arange", "where", "cast") for n in plan.graph.nodes)


class SymbolicBuckets(nn.Module):
    """T5's buckets (torch.min, log) and DeBERTa's log buckets (sign, log, ceil) of positions whose
    count is a dynamic dim: computed per call, from the contracts of those ops."""

    def __init__(self, buckets=8, distance=32, heads=2):
        super().__init__()
        torch.manual_seed(0)
        self.buckets, self.distance = buckets, distance
        self.t5 = nn.Embedding(buckets, heads)
        self.deberta = nn.Embedding(2 * buckets, heads)
        self.head = nn.Linear(8, 8)

    def forward(self, scores, v):
        n = scores.shape[-1]
        relative = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        exact = self.buckets // 2
        distance = -torch.min(relative, torch.zeros_like(relative))
        large = exact + (
            torch.log(distance.float() / exact) / math.log(self.distance / exact) * (self.buckets - exact)
        ).to(torch.long)
        large = torch.min(large, torch.full_like(large, self.buckets - 1))
        t5 = torch.where(distance < exact, distance, large)
        mid = self.buckets // 2
        sign = torch.sign(relative)
        near = (relative < mid) & (relative > -mid)
        position = torch.where(near, torch.tensor(mid - 1).type_as(relative), torch.abs(relative))
        logged = torch.ceil(torch.log(position / mid) / math.log((self.distance - 1) / mid) * (mid - 1)) + mid
        deberta = torch.where(position <= mid, relative.float(), logged * sign).long()
        deberta = torch.clamp(deberta + self.buckets, 0, 2 * self.buckets - 1)
        bias = (self.t5(t5) + self.deberta(deberta)).permute(2, 0, 1)
        return self.head(torch.softmax(scores + bias, dim=-1) @ v)


def test_buckets_of_symbolic_positions_map_to_contracts():
    scores, v = torch.randn(1, 2, 10, 10), torch.randn(1, 2, 10, 8)
    n = torch.export.Dim("n", min=2, max=64)
    plan, _, fallbacks = planned(SymbolicBuckets(), scores, v, dynamic_shapes=({2: n, 3: n}, {2: n}))
    # before the contracts of log, minimum, ceil and sign these ran as ATen fallbacks between partitions
    assert fallbacks == [], plan.explain()
    assert {"log", "minimum", "ceil", "sign"} <= {node.op for node in plan.graph.nodes}
    other, other_v = torch.randn(1, 2, 40, 40), torch.randn(1, 2, 40, 8)
    with torch.no_grad():
        assert torch.allclose(plan(other, other_v), SymbolicBuckets()(other, other_v), atol=1e-5)


class WindowIndex(nn.Module):
    """Swin's and BEiT's relative position index: a meshgrid (two results) of aranges, stacked, with an
    in-place shift (functionalized into select_scatter), reading a bias table; Swin V2's cosine
    attention normalizes with F.normalize (a vector norm)."""

    def __init__(self, window=4, heads=2):
        super().__init__()
        torch.manual_seed(0)
        self.window = window
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads))
        self.head = head(window * window)

    def forward(self, scores):
        w = self.window
        coords = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        relative[:, :, 0] += w - 1
        relative[:, :, 1] += w - 1
        relative[:, :, 0] *= 2 * w - 1
        bias = self.table[relative.sum(-1).view(-1)].view(w * w, w * w, -1).permute(2, 0, 1)
        return self.head(F.normalize(scores, dim=-1) + bias)


def test_a_window_index_folds_and_the_norm_decomposes():
    scores = torch.randn(1, 2, 16, 16)
    plan, per_node, fallbacks = planned(WindowIndex(), scores)
    assert fallbacks == [] and per_node == [] and len(plan.partitions) == 1, plan.explain()


def test_a_folded_value_is_never_a_weight():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(4))

        def forward(self, x):
            return x * (self.scale * torch.arange(4.0))

    model, x = Scaled().eval(), torch.randn(3, 4)
    plan = opcore.graph.capture(model, (x,), measure=False)
    assert any(n.op == "mul" and len(n.refs()) == 2 for n in plan.graph.nodes)
    with torch.no_grad():
        model.scale.mul_(2.0)
    assert torch.allclose(plan(x), model(x))  # the plan follows the weight: nothing derived from it was folded


class Between(nn.Module):
    """Swin's roll and pooler, a weight norm (Wav2Vec2's positional convolution), type_as, t and
    baddbmm (BLOOM's ALiBi scores), a mask cast to bool with the device torch.export writes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.v = nn.Parameter(torch.randn(8, 8, 3))
        self.g = nn.Parameter(torch.rand(1, 1, 3) + 0.5)
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x, mask):
        y = torch.roll(x, shifts=(2, -1), dims=(1, 2))  # x: (b, 8, 8)
        y = F.conv1d(y, torch._weight_norm(self.v, self.g, 2), padding=1)
        y = torch.baddbmm(y, y, y.transpose(1, 2), beta=1.0, alpha=0.5) @ self.w.t()
        y = y.masked_fill(~mask.to(torch.bool)[:, None, :], 0.0).type_as(x)
        return F.adaptive_avg_pool1d(y, 1)


def test_ops_between_layers_decompose_or_map_to_contracts():
    x, mask = torch.randn(2, 8, 8), torch.tensor([[1] * 6 + [0] * 2, [1] * 8])
    plan, per_node, fallbacks = planned(Between(), x, mask)
    assert fallbacks == [], plan.explain()
    # the int64 mask is a graph input OpenVINO narrows to int32: its cast stays per node, the rest is one partition
    assert len(plan.partitions) == 1 and per_node == ["cast"], plan.explain()


class InterleavedRotary(nn.Module):
    """GPT-J's and CodeGen's rotary: sin and cos each repeated twice in a row along the last dim
    (``repeat_interleave``), the rotated pairs stacked (``stack``) and flattened back."""

    def __init__(self, width=16):
        super().__init__()
        torch.manual_seed(0)
        self.head = head(width)

    def forward(self, x, sin):
        sin = torch.repeat_interleave(sin, 2, 2)  # (b, s, width / 2) -> (b, s, width)
        rotated = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        flat = torch.repeat_interleave(sin[:, :1, :2], 3)  # no dim: the flattened tensor
        return self.head(x * (1 - sin) + rotated * sin) + flat.sum()


def test_stack_and_repeat_interleave_decompose_into_the_partition():
    x, sin = torch.randn(2, 6, 16), torch.rand(2, 6, 8)
    plan, per_node, fallbacks = planned(InterleavedRotary(), x, sin)
    assert fallbacks == [], plan.explain()
    assert len(plan.partitions) == 1 and per_node == [], plan.explain()
    dynamic = {"x": {1: torch.export.Dim("seq", min=2, max=64)}, "sin": {1: torch.export.Dim("seq", min=2, max=64)}}
    plan, per_node, fallbacks = planned(InterleavedRotary(), x, sin, dynamic_shapes=dynamic)
    assert fallbacks == [], plan.explain()
    longer = (torch.randn(2, 9, 16), torch.rand(2, 9, 8))
    with torch.no_grad():
        assert torch.allclose(plan(*longer), InterleavedRotary().eval()(*longer), atol=1e-5)


class WholeRotary(nn.Module):
    """A partial rotary whose rotary part is the whole head (Phi-3): ``cat(rotated, x[..., d:])`` with
    the pass-through slice empty."""

    def __init__(self, width=16):
        super().__init__()
        torch.manual_seed(0)
        self.width = width
        self.head = head(width)

    def forward(self, x):
        d = self.width
        rotated, passed = x[..., :d], x[..., d:]
        rotated = torch.cat((-rotated[..., d // 2 :], rotated[..., : d // 2]), dim=-1) * 0.5 + rotated
        return self.head(torch.cat((rotated, passed), dim=-1))


def test_empty_cat_pieces_go_with_the_slices_that_made_them():
    x = torch.randn(2, 6, 16)
    plan, per_node, fallbacks = planned(WholeRotary(), x)
    assert "rewrite empty cat piece: 1 match" in plan.notes
    assert fallbacks == [] and per_node == [] and len(plan.partitions) == 1, plan.explain()
    seq = torch.export.Dim("seq", min=2, max=32)
    plan, per_node, _ = planned(WholeRotary(), x, dynamic_shapes=({1: seq},))
    assert per_node == [] and len(plan.partitions) == 1, plan.explain()


class LatentHeads(nn.Module):
    """DeepSeek's multi-head latent attention builds its queries from two parts written into an empty
    buffer (``q = x.new_empty(...); q[..., :d] = nope; q[..., d:] = rope``): functionalized, a
    new_empty, copies and slice_scatters."""

    def __init__(self, width=16):
        super().__init__()
        torch.manual_seed(0)
        self.width = width
        self.head = head(width)

    def forward(self, nope, rope):
        d = self.width // 2
        q = nope.new_empty(*nope.shape[:-1], self.width)
        q[..., :d] = nope
        q[..., d:] = rope * 2.0
        every_other = nope.new_zeros(*nope.shape[:-1], self.width)
        every_other[..., ::2] = rope  # a step of 2: torch's own decomposition
        return self.head(q) + every_other


def test_slice_assignment_into_an_empty_buffer_decomposes_into_the_partition():
    nope, rope = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    plan, _, fallbacks = planned(LatentHeads(), nope, rope)
    ops = {n.op for n in plan.graph.nodes}
    assert not {"aten.slice_scatter.default", "aten.copy.default", "aten.new_empty.default"} & ops, plan.explain()
    assert "cat" in ops
    assert fallbacks == ["aten._unsafe_masked_index.default"]  # only the step of 2, as torch decomposes it


class Maxima(nn.Module):
    """torch.max of two tensors (XGLM's scores held above the dtype's minimum) and torch.maximum."""

    def forward(self, x, y, ids, other_ids):
        floor = torch.tensor(torch.finfo(x.dtype).min)
        return torch.max(x, floor), torch.maximum(x, y), torch.maximum(ids, other_ids), torch.max(ids, other_ids)


def test_maximum_decomposes_and_keeps_nan_and_signed_zero():
    x = torch.tensor([0.0, -0.0, float("nan"), 1.0, float("nan"), -float("inf"), 2.0])
    y = torch.tensor([-0.0, 0.0, 1.0, float("nan"), float("nan"), 3.0, -1.0])
    ids = torch.tensor([-(2**63), 5, 7, -3], dtype=torch.int64)
    other_ids = torch.tensor([3, 5, -9, -(2**63)], dtype=torch.int64)
    plan = opcore.graph.capture(Maxima(), (x, y, ids, other_ids), measure=False)
    assert not [n.op for n in plan.graph.nodes if n.op.startswith("aten.")], plan.explain()
    for got, want in zip(plan(x, y, ids, other_ids), Maxima()(x, y, ids, other_ids), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(torch.signbit(got[~got.isnan()] if got.is_floating_point() else got),
                           torch.signbit(want[~want.isnan()] if want.is_floating_point() else want))  # fmt: skip


class WholeReductions(nn.Module):
    """torch.max / torch.min of a whole tensor and ``1 / x`` (dynamic rotary scaling's frequencies
    computed in the graph: ``1.0 / base ** (arange / dim)`` at ``max(position_ids) + 1``)."""

    def forward(self, x, ids):
        return torch.max(x), torch.min(x), torch.max(ids), torch.min(ids), 1.0 / x, torch.reciprocal(ids)


@pytest.mark.parametrize("backends", [None, ("onnxruntime", "cpu"), ON_OPENVINO])
def test_whole_max_min_and_reciprocal_decompose_into_the_partition(backends):
    x = torch.tensor([[0.0, -0.0, 3.0, -7.5], [float("inf"), -float("inf"), 1e-30, 0.1]])
    ids = torch.tensor([[4, -9, 2**40], [0, 1, -(2**62)]], dtype=torch.int64)
    plan = opcore.graph.capture(WholeReductions(), (x, ids), backends=backends, measure=False)
    assert not [n.op for n in plan.graph.nodes if n.op.startswith("aten.")], plan.explain()
    for got, want in zip(plan(x, ids), WholeReductions()(x, ids), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(torch.signbit(got), torch.signbit(want))
