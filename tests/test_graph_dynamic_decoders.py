"""Multi-layer decoders captured with a dynamic sequence dim (use_cache=False): every family plans,
measures and runs other lengths as eager does.

Before the fix every 2-layer decoder failed at plan time with ``KeyError: 'sym_size_int_..'``: a
size computed in layer 0 and read in layer 1 crossed into a partition's per-node program, which
was not given it (opcore.graph.assembly.outside_sizes).
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import opcore.graph

pytest.importorskip("transformers", reason="the decoders are transformers models")

from test_graph_generation import VOCAB, build


def run_each_once(cases):
    """A timer that runs every case (so a program that cannot run fails here) and calls them equal."""
    return {label: (call(), 1.0)[1] for label, call in cases.items()}


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "phi3", "gemma", "opt"])
def test_dynamic_sequence_dim_on_a_two_layer_decoder(family):
    model = build(family)
    model.config.use_cache = False
    ids = torch.randint(3, VOCAB, (1, 16), generator=torch.Generator().manual_seed(0))
    plan = opcore.graph.capture(model, (ids,), dynamic_shapes=({1: Dim("seq", min=2, max=64)},), measure=run_each_once)
    for length in (5, 16, 33):
        other = torch.randint(3, VOCAB, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = model(other).logits
        got = plan(other).logits
        assert got.shape == want.shape
        assert (got - want).abs().max().item() <= 1e-4
