"""Attention masks the plan proves full (opcore.graph.masks): a boolean mask computed from folded
constants alone and True everywhere is dropped with the nodes that computed it (BERT called without
a mask builds ``arange(seq) >= 0``); any other mask stays: one with a False, one read from a buffer
(the plan follows buffers after capture), one computed from an input, and every mask when rewrites
are off or the sequence length is dynamic."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import opcore.graph  # noqa: E402
from opcore.graph.ir import ValueRef  # noqa: E402

NOTE = "rewrite full attention mask dropped"


class Attention(nn.Module):
    """q, k, v projections and SDPA with a mask built in forward, as Hugging Face encoders do."""

    def __init__(self, mask: str) -> None:
        super().__init__()
        self.mask = mask
        self.qkv = nn.Linear(16, 48)
        self.register_buffer("keep", torch.ones(8, dtype=torch.bool))

    def forward(self, x: Any) -> Any:
        batch, seq, _ = x.shape
        q, k, v = (t.view(batch, seq, 2, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        positions = torch.arange(seq)
        if self.mask == "full":
            mask = (positions >= 0)[None, None, None, :].expand(batch, 1, seq, seq)
        elif self.mask == "partial":
            mask = (positions < seq - 1)[None, None, None, :].expand(batch, 1, seq, seq)
        elif self.mask == "buffer":
            keep: Any = self.keep
            mask = keep[None, None, None, :seq].expand(batch, 1, seq, seq)
        else:  # "input": the mask depends on the values of x
            mask = (x.sum(-1) > -1e9)[:, None, None, :].expand(batch, 1, seq, seq)
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def masks_of(plan: Any) -> list[Any]:
    return [node.args[3] for node in plan.graph.nodes if node.op == "scaled_dot_product_attention"]


def captured(mask: str, **options: Any) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model, x = Attention(mask).eval(), torch.randn(2, 8, 16)
    plan = opcore.graph.capture(model, (x,), measure=False, partitions=False, **options)
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-5, atol=1e-5)
    return model, x, plan


def test_a_mask_true_everywhere_from_folded_constants_is_dropped_with_its_nodes() -> None:
    _, _, kept = captured("full", rewrites=False)
    _, _, plan = captured("full")
    assert masks_of(plan) == [None] and isinstance(masks_of(kept)[0], ValueRef)
    assert f"{NOTE}: 1 match" in plan.notes
    # computed from static sizes only, the mask is a constant folded at lowering (no node computes it)
    assert masks_of(kept)[0].name in kept.graph.constants
    assert not {"ge", "expand"} & {node.op for node in (*kept.graph.nodes, *plan.graph.nodes)}
    assert masks_of(kept)[0].name not in plan.graph.constants  # and the plan holds it no more


@pytest.mark.parametrize("mask", ["partial", "buffer", "input"])
def test_any_other_mask_stays(mask: str) -> None:
    _, _, plan = captured(mask)
    assert isinstance(masks_of(plan)[0], ValueRef)
    assert not any(note.startswith(NOTE) for note in plan.notes)


def test_a_buffer_mask_changed_after_capture_is_followed() -> None:
    model, x, plan = captured("buffer")
    model.keep[3:] = False  # the mask stayed in the plan, so the change reaches it
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_dynamic_sequence_keeps_the_mask_and_runs_every_length() -> None:
    seq = torch.export.Dim("seq", min=2, max=64)
    model, _, plan = captured("full", dynamic_shapes=({1: seq},))
    assert isinstance(masks_of(plan)[0], ValueRef)  # arange(seq) is not a folded constant
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-5, atol=1e-5)


def test_onnxruntime_partition_without_the_mask_matches_eager() -> None:
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model, x = Attention("full").eval(), torch.randn(2, 8, 16)
    plan = opcore.graph.capture(model, (x,), measure=False, backends=("onnxruntime", "cpu"))
    assert plan.partitions and masks_of(plan) == [None]
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-5, atol=1e-5)
