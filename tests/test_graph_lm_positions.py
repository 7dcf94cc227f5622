"""capture_lm and capture where positions reach past what a config was trained for, and where
attention looks back through a window: rotary scalings of each rope type transformers has (dynamic
NTK scaling's frequencies computed in the graph: opcore.graph.dynamic_rope), sliding-window and
chunked layers over a full-length cache, and a window kept by transformers' dynamic cache alone,
which capture_lm refuses past the window.

Every model is small, from a config with random weights, its lm_head scaled (test_graph_generation's
``built``); every prompt and generation goes past the config's original length of positions.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError

transformers = pytest.importorskip("transformers", reason="the tests build transformers decoders")

from test_graph_generation import (  # noqa: E402
    SMALL,
    VOCAB,
    assert_left_padded_batch_equals_transformers,
    built,
    prompt,
)

IDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
ORIGINAL = 16  # positions the configs below were "trained" for; the tests generate to 21 and more
HALF_HEAD = 8  # rotary frequencies of a 16-wide head

_ROPES: dict[str, tuple[str, dict[str, Any]]] = {
    "linear": ("Llama", dict(max_position_embeddings=2 * ORIGINAL,
                             rope_parameters=dict(rope_type="linear", factor=2.0, rope_theta=10000.0))),
    "dynamic": ("Llama", dict(max_position_embeddings=ORIGINAL,
                              rope_parameters=dict(rope_type="dynamic", factor=2.0, rope_theta=10000.0))),
    # partial rotary: the grown frequencies cover a quarter of each head
    "dynamic_partial": ("Phi", dict(max_position_embeddings=ORIGINAL, rope_parameters=dict(
        rope_type="dynamic", factor=3.0, rope_theta=10000.0, partial_rotary_factor=0.25))),
    "yarn": ("Llama", dict(max_position_embeddings=4 * ORIGINAL, rope_parameters=dict(
        rope_type="yarn", factor=4.0, original_max_position_embeddings=ORIGINAL, rope_theta=10000.0))),
    "llama3": ("Llama", dict(max_position_embeddings=4 * ORIGINAL, rope_parameters=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=ORIGINAL, rope_theta=500000.0))),
    # short factors up to the original length, long ones past it (a choice made in the graph)
    "longrope": ("Phi3", dict(max_position_embeddings=4 * ORIGINAL, original_max_position_embeddings=ORIGINAL,
                              rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                   short_factor=[1.0 + i / 10 for i in range(HALF_HEAD)],
                                                   long_factor=[2.0 + i / 2 for i in range(HALF_HEAD)],
                                                   original_max_position_embeddings=ORIGINAL))),
}  # fmt: skip


def _rope_model(kind: str) -> Any:
    prefix, kwargs = _ROPES[kind]
    heads = dict(num_key_value_heads=2) if prefix != "Phi" else {}
    config = getattr(transformers, f"{prefix}Config")(**SMALL, **heads, **kwargs, **IDS)
    return built(getattr(transformers, f"{prefix}ForCausalLM"), config)


def _rotary_state(model: Any) -> list[tuple[Any, ...]]:
    return [(m.max_seq_len_cached, m.inv_freq.clone()) for m in model.modules() if hasattr(m, "max_seq_len_cached")]


@pytest.mark.parametrize("kind", sorted(_ROPES))
def test_rotary_scalings_generate_past_the_original_length_as_transformers(kind):
    """A left-padded batch (9 and 5 tokens, 12 new) and one row (10 tokens, 20 new) past the 16
    positions of the config, greedy tokens equal to ``model.generate``'s; the model's rotary state
    (what dynamic scaling grew to) untouched by capture and generation."""
    model = _rope_model(kind)
    before = _rotary_state(model)
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    if kind.startswith("dynamic"):  # no export failure, no Python branch left: the frequencies in the graph
        assert "aten." not in lm.decode_plan.summary(), lm.decode_plan.explain()
    ids = prompt()
    got = lm.generate(ids, max_new_tokens=20, eos_token_id=[])
    after = _rotary_state(model)
    assert all(a[0] == b[0] and torch.equal(a[1], b[1]) for a, b in zip(before, after, strict=True))
    want = model.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(got, want), f"{kind}: {got[0, 10:].tolist()} != {want[0, 10:].tolist()}"
    assert_left_padded_batch_equals_transformers(_rope_model(kind), lm)  # a fresh model: dynamic keeps state
    assert all("forward" not in vars(m) for m in model.modules())  # the rotary modules given back


def test_dynamic_rotary_scaling_in_a_plan_with_a_dynamic_sequence():
    """capture (no cache) of a dynamically scaled model, one plan for 8 tokens and for 30 (past the
    config's 16): logits as eager's of a model fresh from the same weights."""
    from torch.export import Dim

    model = _rope_model("dynamic")
    plan = opcore.graph.capture(
        model, (prompt(length=8),), measure=False, dynamic_shapes=({1: Dim("seq", min=2, max=64)},)
    )
    for length in (8, 30):
        ids = prompt(length=length, seed=length)
        with torch.no_grad():
            want = _rope_model("dynamic")(ids, use_cache=False).logits
        got = plan(ids)
        torch.testing.assert_close(got.logits if hasattr(got, "logits") else got, want, rtol=1e-4, atol=1e-4)


def _chunked_llama4() -> Any:
    pytest.importorskip("transformers.models.llama4.modeling_llama4", reason="transformers without Llama 4")
    config = transformers.Llama4TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, intermediate_size_mlp=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=1,
        moe_layers=[1], no_rope_layers=[1, 0], attention_chunk_size=8, **IDS,
    )  # fmt: skip
    return built(transformers.Llama4ForCausalLM, config)


def test_chunked_attention_over_a_full_length_cache():
    """Llama 4's chunked attention (chunks of 8; transformers keeps them in a sliding-window layer)
    over capture_lm's full-length cache, its chunks from the model's own mask: a left-padded batch
    and a row of 10 tokens with 20 new, as model.generate."""
    model = _chunked_llama4()
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    ids = prompt()
    want = model.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=20, eos_token_id=[]), want)
    assert_left_padded_batch_equals_transformers(model, lm)


def _moshi(window: int) -> Any:
    config = transformers.MoshiConfig(
        vocab_size=VOCAB, hidden_size=64, ffn_dim=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, head_dim=16, max_position_embeddings=128, sliding_window=window, **IDS,
    )  # fmt: skip
    return built(transformers.MoshiForCausalLM, config)


def test_a_window_kept_by_the_dynamic_cache_alone_is_refused_past_it():
    """Moshi's mask reaches every earlier key; its window of 12 lives in transformers' dynamic cache,
    which drops older keys. A full-length cache would attend further back and part from
    model.generate without a word: past the window, capture_lm refuses, naming it; within it, its
    tokens are model.generate's."""
    model = _moshi(window=12)
    with pytest.raises(ArgumentError, match=r"max_length.*at most 12.*sliding window of 12.*found 40") as caught:
        opcore.graph.capture_lm(model, max_length=40, measure=False)
    assert "max_length=12" in str(caught.value)
    lm = opcore.graph.capture_lm(model, max_length=12, measure=False)
    ids = prompt(length=5)
    want = model.generate(ids, max_new_tokens=7, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=7, eos_token_id=[]), want)
    # the check ran a token through the model with hooks on its attention: none left behind
    assert not [m for m in model.modules() if m._forward_pre_hooks]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_windows_the_mask_keeps_are_not_refused(attention):
    """Mistral's window of 8 is in its mask (boolean under SDPA, additive under eager attention): a
    40-slot cache is captured and its tokens past the window equal model.generate's."""
    config = transformers.MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=8, **IDS)
    config._attn_implementation = attention
    model = built(transformers.MistralForCausalLM, config)
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    assert_left_padded_batch_equals_transformers(model, lm)
