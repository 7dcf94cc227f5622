"""opcore.graph rewrites: each pattern -> fused op on its own, and where it must not apply."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from graph_models import MLP, RMSNorm, seeded  # noqa: E402
from torch import nn  # noqa: E402

import opcore.graph  # noqa: E402
from opcore.graph.rewrite import REWRITES, apply_rewrites  # noqa: E402


def ops_of(model, *inputs, rewrites=True):
    plan = opcore.graph.capture(model.eval(), inputs, rewrites=rewrites, measure=False)  # notes: rewrites only
    out = plan(*inputs)
    want = model(*inputs)
    assert (out - want).abs().max().item() <= 1e-5
    return [n.op for n in plan.graph.nodes], plan


class Fn(nn.Module):
    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            setattr(self, name, torch.nn.Parameter(value))

    def forward(self, x):
        return self.fn(self, x)


@pytest.mark.parametrize(
    ("activation", "fused"),
    [("relu", "linear_relu"), ("silu", "linear_silu"), ("gelu", "linear_gelu"), ("tanh_gelu", "linear_gelu")],
)
def test_linear_activation(activation, fused):
    ops, plan = ops_of(seeded(MLP(activation=activation)), torch.randn(3, 16))
    assert ops == [fused, "linear"]
    if activation == "tanh_gelu":
        assert plan.graph.nodes[0].args[-1] == "tanh"  # the approximation is kept
    assert any("rewrite" in note for note in plan.notes)


def test_linear_activation_not_fused_when_the_linear_output_is_read_elsewhere():
    lin = torch.nn.Linear(8, 8)
    model = Fn(lambda self, x: torch.relu(lin(x)) + lin(x) * 0 + torch.relu(x @ self.w.T), w=torch.randn(8, 8))
    model.lin = lin
    x = torch.randn(2, 8)
    ops, _ = ops_of(seeded(model), x)
    # linear(x) feeds relu and another add: fusing would drop a value someone reads
    assert "linear_relu" not in ops or ops.count("linear") >= 1


class Gated(nn.Module):
    def __init__(self, bias=False):
        super().__init__()
        self.g, self.u = torch.nn.Linear(16, 32, bias=bias), torch.nn.Linear(16, 32, bias=bias)
        self.d = torch.nn.Linear(32, 16, bias=bias)

    def forward(self, x):
        return self.d(F.silu(self.g(x)) * self.u(x))


def test_gated_mlp():
    ops, _ = ops_of(seeded(Gated()), torch.randn(2, 4, 16))
    assert ops == ["gated_mlp"]


def test_gated_mlp_keeps_biased_projections_apart():
    ops, _ = ops_of(seeded(Gated(bias=True)), torch.randn(2, 4, 16))
    assert "gated_mlp" not in ops and "linear_silu" in ops


def test_rms_norm_weighted_and_unweighted():
    x = torch.randn(2, 5, 16)
    ops, plan = ops_of(seeded(RMSNorm(16)), x)
    assert ops == ["rms_norm"]
    assert plan.graph.nodes[0].args[1] == (16,)

    def bare(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)

    ops, _ = ops_of(Fn(bare), x)
    assert ops == ["rms_norm"]


def test_rms_norm_not_over_another_dim():
    def over_dim1(self, x):
        return self.w * (x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6))

    ops, _ = ops_of(Fn(over_dim1, w=torch.rand(16)), torch.randn(2, 5, 16))
    assert "rms_norm" not in ops


def test_rms_norm_not_with_a_weight_that_broadcasts_otherwise():
    def odd_weight(self, x):
        return self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    ops, _ = ops_of(Fn(odd_weight, w=torch.rand(5, 1)), torch.randn(2, 5, 16))
    assert ops == ["rms_norm", "mul"]  # the unweighted norm, then the weight as it broadcasts


def test_decomposed_layer_norm():
    def layer_norm(self, x):
        centered = x - x.mean(-1, keepdim=True)
        return centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w + self.b

    model = Fn(layer_norm, w=torch.rand(16) + 0.5, b=torch.randn(16))
    ops, _ = ops_of(model, torch.randn(3, 16))
    assert ops == ["layer_norm"]


def test_decomposed_layer_norm_without_affine():
    def layer_norm(self, x):
        centered = x - x.mean(-1, keepdim=True)
        return centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + 1e-5)

    ops, _ = ops_of(Fn(layer_norm), torch.randn(3, 16))
    assert ops == ["layer_norm"]


def test_decomposed_softmax_stable_form_only():
    def stable(self, x):
        e = torch.exp(x - x.amax(1, keepdim=True))
        return e / e.sum(1, keepdim=True)

    ops, plan = ops_of(Fn(stable), torch.randn(3, 7))
    assert ops == ["softmax"] and plan.graph.nodes[0].args[1] == 1

    def naive(self, x):  # overflows where softmax does not: not the same op
        e = torch.exp(x)
        return e / e.sum(1, keepdim=True)

    ops, _ = ops_of(Fn(naive), torch.randn(3, 7))
    assert "softmax" not in ops


def test_rewrites_off_keeps_the_exported_graph():
    ops, plan = ops_of(seeded(MLP()), torch.randn(3, 16), rewrites=False)
    assert ops == ["linear", "relu", "linear"] and not plan.notes


def test_every_rewrite_names_a_registered_op():
    ops = {c.name for c in opcore.ops()}
    assert {r.op for r in REWRITES} <= ops
    graph = opcore.graph.capture(seeded(MLP()), (torch.randn(2, 16),), rewrites=False).graph
    again, notes = apply_rewrites(graph)
    assert notes == ["rewrite linear_relu: 1 match"] and len(again.nodes) == 2


class Dropped(nn.Module):
    """Eval-mode dropout, which torch.export keeps as a clone; and a clone of the input, returned."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(torch.relu(self.fc(x))) * 2.0, x.clone()


def test_copies_no_reader_needs_are_elided_and_a_returned_input_copy_stays():
    model, x = Dropped().eval(), torch.randn(3, 8)
    kept = opcore.graph.capture(model, (x,), rewrites=False, measure=False)
    plan = opcore.graph.capture(model, (x,), measure=False)
    assert [n.target for n in kept.graph.nodes].count("aten.clone.default") == 2
    assert [n.target for n in plan.graph.nodes].count("aten.clone.default") == 1  # x.clone(): returned
    assert "rewrite elide clone: 1 match" in plan.notes
    with torch.no_grad():
        y, copy = plan(x)
        want, _ = model(x)
    torch.testing.assert_close(y, want)
    assert torch.equal(copy, x) and copy.data_ptr() != x.data_ptr()  # the caller's tensor is not handed back


def _assembled(self, x):
    """DeepSeek's keys: a new buffer written piece by piece (``new_empty``, two ``copy_``)."""
    rotary = torch.sin(x[..., :2])
    keys = x.new_empty(*x.shape[:-1], x.shape[-1] + 2)
    keys[..., : x.shape[-1]].copy_(x * 2)
    keys[..., x.shape[-1] :].copy_(rotary)
    return torch.relu(keys) + 1


def test_a_buffer_written_piece_by_piece_reads_its_pieces():
    ops, plan = ops_of(Fn(_assembled), torch.randn(2, 3, 5))
    assert "zeros" not in ops and "slice_scatter" not in ops, ops
    assert any("slice of a cat piece" in note for note in plan.notes), plan.notes
    assert ops.count("cat") == 1, ops  # the keys: (x * 2, rotary)


@pytest.mark.parametrize(
    "fn",
    [
        lambda self, x: torch.cat([x, x * 2], -1)[..., 3:7],  # across two pieces
        lambda self, x: torch.cat([x, x * 2], -1)[..., 0:5:2],  # a step
        lambda self, x: torch.cat([x, x * 2], 1)[..., 0:3],  # along another dim than the cat's
    ],
    ids=["two pieces", "a step", "another dim"],
)
def test_a_slice_that_is_not_one_piece_of_its_cat_stays(fn):
    ops, plan = ops_of(Fn(fn), torch.randn(2, 5, 5))
    assert "cat" in ops and "slice" in ops, ops
    assert not any("slice of a cat piece" in note for note in plan.notes), plan.notes


def test_a_cat_read_elsewhere_stays_and_a_returned_piece_is_the_callers_own():
    x = torch.randn(2, 5)

    def fn(self, x):
        both = torch.cat([x * 2, x + 1], -1)
        return both[:, :5], both.sum(-1)

    plan = opcore.graph.capture(Fn(fn).eval(), (x,), measure=False)
    ops = [n.op for n in plan.graph.nodes]
    assert "cat" in ops, ops  # its sum reads it
    got, want = plan(x), fn(None, x)
    assert all(torch.allclose(g, w) for g, w in zip(got, want, strict=True))
    got[0].add_(1)  # the returned slice is a tensor of its own, not the piece inside the plan
    assert torch.allclose(plan(x)[0], want[0])
