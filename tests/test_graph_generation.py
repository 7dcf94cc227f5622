"""opcore.graph.capture_lm: greedy tokens and logits against transformers, batches, sessions, files.

Every model is a small transformers decoder built from a config with random weights (nothing is
downloaded); its lm_head is scaled so that greedy choices are well apart (random logits of ~1e-2
spread would let 1e-6 of float noise flip a token, which says nothing about the runtime).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import opcore
import opcore.graph
from opcore.errors import ArgumentError, ShapeError
from opcore.graph.errors import CaptureError
from opcore.graph.generation import GenerationDefaults
from opcore.graph.partition import compilers

transformers = pytest.importorskip("transformers", reason="the generation tests build transformers decoders")

VOCAB = 500
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


def _families() -> dict[str, tuple[type, type, dict]]:
    t = transformers
    return {
        "llama": (t.LlamaConfig, t.LlamaForCausalLM, dict(SMALL, num_key_value_heads=2)),
        "mistral": (t.MistralConfig, t.MistralForCausalLM, dict(SMALL, num_key_value_heads=2, sliding_window=16)),
        "qwen2": (t.Qwen2Config, t.Qwen2ForCausalLM, dict(SMALL, num_key_value_heads=2)),
        "phi3": (t.Phi3Config, t.Phi3ForCausalLM, dict(SMALL, pad_token_id=0, eos_token_id=2, bos_token_id=1)),
        "gemma": (t.GemmaConfig, t.GemmaForCausalLM, dict(SMALL, num_key_value_heads=1, head_dim=16)),
        # multi-query attention: one key/value head, whatever the config's num_kv_heads says (the cache's
        # shape is read off the model's own cache, not the config)
        "falcon": (
            t.FalconConfig,
            t.FalconForCausalLM,
            dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, multi_query=True,
                 bos_token_id=1, eos_token_id=2),
        ),
        "gpt2": (
            t.GPT2Config,
            t.GPT2LMHeadModel,
            dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128, bos_token_id=1, eos_token_id=2),
        ),
        # interleaved rotary (repeat_interleave, stack: decomposed into the partition's ops)
        "gptj": (
            t.GPTJConfig,
            t.GPTJForCausalLM,
            dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128, bos_token_id=1,
                 eos_token_id=2),
        ),
        "opt": (
            t.OPTConfig,
            t.OPTForCausalLM,
            dict(
                vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=128, word_embed_proj_dim=64, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            ),
        ),
    }  # fmt: skip


# families the tests above do not build, each for what its attention or block does differently;
# split: its decode attention is torch's SDPA, which capture_lm splits (opcore.graph.split_attention);
# the others compute attention with matmuls of their own, which read the written cache as a value
# (read_written): either way the step is one partition
_IDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
_MORE: dict[str, tuple[str, dict, bool]] = {
    "qwen3": ("Qwen3", dict(SMALL, num_key_value_heads=2, head_dim=16), True),  # norms on q and k
    "olmo2": ("Olmo2", dict(SMALL, num_key_value_heads=2), True),  # norms after attention and MLP
    "stablelm": ("StableLm", dict(SMALL, num_key_value_heads=2, partial_rotary_factor=0.25, use_qkv_bias=True), True),
    "gpt_neox": ("GPTNeoX", dict(SMALL, rotary_pct=0.25, use_parallel_residual=True), True),  # parallel blocks
    "cohere": ("Cohere", dict(SMALL, num_key_value_heads=2), True),  # interleaved rotary, parallel blocks
    "granite": (
        "Granite",
        dict(SMALL, num_key_value_heads=2, embedding_multiplier=2.0, residual_multiplier=0.5,
             attention_multiplier=0.1, logits_scaling=2.0),
        True,
    ),
    "phi": ("Phi", dict(SMALL, partial_rotary_factor=0.5), True),  # partial rotary, dense + parallel
    "starcoder2": ("Starcoder2", dict(SMALL, num_key_value_heads=2, sliding_window=8), True),
    # soft-capped attention and logits, sliding window every other layer: eager attention
    "gemma2": (
        "Gemma2",
        dict(SMALL, num_key_value_heads=2, head_dim=16, sliding_window=8, attn_logit_softcapping=50.0,
             final_logit_softcapping=30.0),
        False,
    ),
    # squared ReLU (aten.square, decomposed into a mul the partition takes)
    "nemotron": ("Nemotron", dict(SMALL, num_key_value_heads=2), True),
    "persimmon": ("Persimmon", dict(SMALL), True),  # and layer norms on q and k
    "arcee": ("Arcee", dict(SMALL, num_key_value_heads=2), True),
    "bloom": ("Bloom", dict(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4), False),  # ALiBi (baddbmm)
    # local attention every other layer, its window cut from a mask that assumed a growing cache
    # (opcore.graph.static_cache_fixes): a window of 8 under the 10-token prompt
    "gpt_neo": (
        "GPTNeo",
        dict(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4, window_size=8,
             attention_types=[[["global", "local"], 1]], max_position_embeddings=128),
        False,
    ),
    # ALiBi cut by a length MPT reads from the cache (opcore.graph.static_cache_fixes)
    "mpt": ("Mpt", dict(vocab_size=VOCAB, d_model=64, n_heads=4, n_layers=2, max_seq_len=128), False),
    "codegen": (
        "CodeGen",
        dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128),
        False,
    ),
}  # fmt: skip


def _more(family: str) -> tuple[type, type, dict]:
    prefix, kwargs, _ = _MORE[family]
    config_class = getattr(transformers, f"{prefix}Config", None)
    model_class = getattr(transformers, f"{prefix}ForCausalLM", None)
    if config_class is None or model_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no {prefix}ForCausalLM")
    return config_class, model_class, dict(kwargs, **_IDS)


def build(family: str, seed: int = 0) -> torch.nn.Module:
    config_class, model_class, kwargs = _families()[family] if family in _families() else _more(family)
    return built(model_class, config_class(**kwargs), seed)


def built(model_class: Any, config: Any, seed: int = 0) -> Any:
    """``model_class(config)`` in eval mode, seeded, its lm_head untied and scaled by 8 (greedy choices
    well apart)."""
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        head = model.get_output_embeddings()
        if model.config.tie_word_embeddings:
            model.config.tie_word_embeddings = False
            head.weight = torch.nn.Parameter(head.weight.detach().clone())
        head.weight.mul_(8)
    return model


def prompt(rows: int = 1, length: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def llama():
    model = build("llama")
    return model, opcore.graph.capture_lm(model, max_length=48, measure=False)


def _greedy_tokens_equal(family: str) -> tuple[Any, opcore.graph.LanguageModel]:
    """The family's model and its captured LanguageModel, whose greedy tokens equal model.generate's."""
    model: Any = build(family)
    lm = opcore.graph.capture_lm(model, max_length=48, measure=False)
    ids = prompt()
    want = model.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)
    got = lm.generate(ids, max_new_tokens=20, eos_token_id=[])
    assert torch.equal(got, want), f"{family}: {got[0, 10:].tolist()} != {want[0, 10:].tolist()}"
    return model, lm


@pytest.mark.parametrize("family", sorted(_families()))
def test_greedy_tokens_equal_transformers_generate(family):
    _greedy_tokens_equal(family)


@pytest.mark.parametrize("family", sorted(_MORE))
def test_greedy_tokens_on_families_the_bench_does_not_build(family):
    model, lm = _greedy_tokens_equal(family)
    layers = model.config.num_hidden_layers
    if {"onnxruntime", "openvino"} & set(compilers()):  # the step one partition: nothing waits for a write
        rewrite = f"split_attention: {layers} matches" if _MORE[family][2] else f"read_written: {2 * layers} matches"
        assert rewrite in lm.explain(), lm.explain()
        assert "in 1 partition" in lm.decode_plan.summary(), lm.decode_plan.summary()


def test_each_step_logits_match_eager_with_its_own_cache(llama):
    model, lm = llama
    ids = prompt(length=7)
    session = lm.session()
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        want = model(ids, past_key_values=cache, use_cache=True).logits[:, -1]
        got = session.prefill(ids)
        assert (got - want).abs().max().item() <= 1e-4
        token = want.argmax(-1)
        for _ in range(12):
            want = model(token[:, None], past_key_values=cache, use_cache=True).logits[:, -1]
            got = session.decode(token)
            assert (got - want).abs().max().item() <= 1e-4
            token = want.argmax(-1)


def test_the_decode_plan_writes_the_cache_in_place_and_explain_shows_it(llama):
    _, lm = llama
    text = lm.explain()
    assert "KV cache 4 buffers" in text
    assert text.count("rows written in place") == 8  # 4 state buffers, prefill and decode
    record = lm.explain(format="json")
    assert '"state_writes"' in record
    assert json.loads(record)["phases"]["decode"]["cuda_graph"] is False and "replayed" not in text  # on the CPU
    assert "state write" in lm.decode_plan.summary()
    session = lm.session()
    pointers = [t.data_ptr() for t in session.state]
    lm.generate(prompt(), max_new_tokens=5, session=session)
    lm.generate(prompt(length=4), max_new_tokens=9, session=lm.session())
    assert [t.data_ptr() for t in session.state] == pointers
    assert any(t.abs().sum() > 0 for t in session.state)  # written where it lives


@pytest.fixture(scope="module")
def llama_partitioned_prefill():
    model = build("llama")
    return model, opcore.graph.capture_lm(model, max_length=48, measure=False, prefill_partitions=True)


@pytest.mark.parametrize("which", ["llama", "llama_partitioned_prefill"])
def test_no_export_or_compile_after_capture_for_any_prompt_length(which, request, monkeypatch):
    _, lm = request.getfixturevalue(which)
    from opcore.graph import capturing, partitioning

    calls: list[str] = []
    monkeypatch.setattr(capturing, "export", lambda *a, **k: calls.append("export"))
    original = partitioning.place_partitions
    monkeypatch.setattr(partitioning, "place_partitions", lambda *a, **k: calls.append("plan") or original(*a, **k))
    try:  # OpenVINO's static model of a dynamic partition's shape met thrice: none for a prefill
        from opcore_openvino.shapes import Specializations

        monkeypatch.setattr(Specializations, "_compile", lambda *a, **k: calls.append("static compile"))
    except ImportError:
        pass
    for length in (1, 2, 3, 17, 17, 17, 17, 40):
        out = lm.generate(prompt(length=length), max_new_tokens=48 - length, eos_token_id=[])
        assert out.shape == (1, 48)
    assert calls == []
    # the decode step's window (a dynamic size: a new one every WINDOW_STEP tokens) compiles no static
    # model either; a step without one is static
    from opcore.graph.split_attention import WINDOW

    windowless = WINDOW not in lm.decode_plan.graph.inputs
    assert lm.prefill_plan.options.shape_compiles is False and lm.decode_plan.options.shape_compiles is windowless
    for part in lm.prefill_plan.partitions:
        assert getattr(part.compiled, "_shapes", None) is None, part


def left_padded_rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, long, short): prompts of 9 and 5 tokens, the short one left-padded."""
    long, short = prompt(length=9, seed=3)[0], prompt(length=5, seed=4)[0]
    ids = torch.stack([long, torch.cat([torch.zeros(4, dtype=torch.long), short])])
    return ids, torch.tensor([[1] * 9, [0] * 4 + [1] * 5]), long, short


def assert_left_padded_batch_equals_transformers(model: Any, lm: opcore.graph.LanguageModel) -> torch.Tensor:
    """``lm``'s greedy tokens for left_padded_rows equal ``model.generate``'s; returns them."""
    ids, mask, _, _ = left_padded_rows()
    got = lm.generate(ids, mask, max_new_tokens=12, eos_token_id=[])
    want = model.generate(
        ids, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    assert torch.equal(got, want)
    return got


def test_local_attention_windows_count_slots_with_left_padding():
    """GPT-Neo's local window over a static cache, rows left-padded: as model.generate (whose window
    counts padded slots too), and the model's own _attn given back after capture."""
    _, kwargs, _ = _MORE["gpt_neo"]
    model = built(transformers.GPTNeoForCausalLM, transformers.GPTNeoConfig(**dict(kwargs, window_size=3, **_IDS)))
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    assert_left_padded_batch_equals_transformers(model, lm)
    assert all("_attn" not in vars(m) for m in model.modules())


def test_alibi_of_mpt_over_left_padded_rows():
    model = build("mpt")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    assert_left_padded_batch_equals_transformers(model, lm)
    assert all("forward" not in vars(m) for m in model.modules())  # its attention given back


@pytest.mark.parametrize("top_k", [1, 2])
def test_llama4_rotary_in_complex_numbers_and_its_experts_generate(top_k):
    """Llama 4's text model: rotary frequencies made with torch.polar and multiplied as complex
    pairs, a mixture-of-experts layer (opcore.graph.llama4_export) whose tokens go through the
    experts they chose alone (gather_mm; eager runs every expert on every token): greedy tokens, rows
    alone and left-padded, equal to model.generate's; the model's own forms given back after capture."""
    llama4 = pytest.importorskip("transformers.models.llama4.modeling_llama4", reason="transformers without Llama 4")
    config = transformers.Llama4TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, intermediate_size_mlp=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=top_k,
        moe_layers=[1], no_rope_layers=[1, 1], attention_chunk_size=8192, **_IDS,
    )  # fmt: skip
    model = built(transformers.Llama4ForCausalLM, config)
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    for plan in (lm.prefill_plan, lm.decode_plan):
        assert sum(node.op == "gather_mm" for node in plan.graph.nodes) == 2, plan.explain()
    ids = prompt()
    want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=12, eos_token_id=[]), want)
    assert_left_padded_batch_equals_transformers(model, lm)
    assert llama4.apply_rotary_emb.__module__ == llama4.__name__
    assert all("forward" not in vars(m) for m in model.modules())


_POSITION_TABLES = {  # positions read at arange(cache length, ...): opcore.graph.static_cache_fixes
    "RoFormer": dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=128, is_decoder=True),
    "TrOCR": dict(vocab_size=VOCAB, d_model=64, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=128,
                  max_position_embeddings=128, init_std=0.2),  # its default 0.02: a random model's tokens alike
}  # fmt: skip


@pytest.mark.parametrize("prefix", sorted(_POSITION_TABLES))
def test_position_tables_read_at_the_cache_slots(prefix):
    """RoFormer's sinusoidal and TrOCR's learned positions come from the cache's length (an .item()
    on capture_lm's static cache): read at the step's cache slots, tokens equal model.generate's,
    rows alone and left-padded; the modules given back after capture."""
    config_class, model_class = getattr(transformers, f"{prefix}Config"), getattr(transformers, f"{prefix}ForCausalLM")
    model = built(model_class, config_class(**_POSITION_TABLES[prefix], **_IDS))
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    ids = prompt()
    want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=12, eos_token_id=[]), want)
    assert len(set(want[0, 10:].tolist())) > 2  # a model whose tokens say something
    assert_left_padded_batch_equals_transformers(model, lm)
    assert all("forward" not in vars(m) for m in model.modules())


def test_jetmoe_experts_of_attention_and_feed_forward_generate():
    """JetMoE routes its attention projections and its feed-forward through experts whose row
    counts its gating turns into a Python list (opcore.graph.jetmoe_export: each sorted row's expert
    through gather_mm instead): greedy tokens, rows alone and left-padded, equal to model.generate's;
    its modules given back after capture."""
    pytest.importorskip("transformers.models.jetmoe.modeling_jetmoe", reason="transformers without JetMoE")
    config = transformers.JetMoeConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_key_value_heads=2, kv_channels=16,
        intermediate_size=128, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128,
        initializer_range=0.2, **_IDS,  # its default 0.01 leaves a random model's tokens all alike
    )  # fmt: skip
    model = built(transformers.JetMoeForCausalLM, config)
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    for plan in (lm.prefill_plan, lm.decode_plan):  # attention's two and the feed-forward's two a layer
        assert sum(node.op == "gather_mm" for node in plan.graph.nodes) == 8, plan.explain()
    ids = prompt()
    want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=12, eos_token_id=[]), want)
    assert_left_padded_batch_equals_transformers(model, lm)
    assert all("forward" not in vars(m) for m in model.modules())


def test_gemma3n_layers_that_share_keys_and_values_hold_no_cache():
    """Gemma 3n's last layers read the keys and values an earlier layer computed in the same step
    (transformers' DummyLayer in its cache): only the layers that store get a cache buffer."""
    config = transformers.Gemma3nTextConfig(
        vocab_size=512, vocab_size_per_layer_input=512, hidden_size=64, hidden_size_per_layer_input=8,
        intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        sliding_window=8, num_kv_shared_layers=2, activation_sparsity_pattern=[0.0] * 4, laurel_rank=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"], **_IDS,
    )  # fmt: skip
    model = built(transformers.Gemma3nForCausalLM, config)
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    assert "KV cache 4 buffers" in lm.explain()  # keys and values of the 2 layers that store them
    ids = torch.randint(3, 512, (1, 10), generator=torch.Generator().manual_seed(1))
    want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=12, eos_token_id=[]), want)
    assert_left_padded_batch_equals_transformers(model, lm)


def test_left_padded_batch_equals_each_row_alone():
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    both = assert_left_padded_batch_equals_transformers(model, lm)
    _, _, long, short = left_padded_rows()
    alone_long = lm.generate(long[None], max_new_tokens=12, eos_token_id=[])  # fewer rows: padded by generate
    alone_short = lm.generate(short[None], max_new_tokens=12, eos_token_id=[])
    assert torch.equal(both[0, 9:], alone_long[0, 9:])
    assert torch.equal(both[1, 9:], alone_short[0, 5:])


def test_masks_of_bool_and_float_and_use_cache_are_taken_as_transformers_takes_them():
    """A bool or float attention mask gives the tokens the tokenizer's int64 mask gives (as in
    transformers' generate); use_cache (written for transformers) changes nothing; a mask of other
    values than 0 and 1, of another rank or other rows is refused naming attention_mask."""
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    ids, mask, _, _ = left_padded_rows()
    want = assert_left_padded_batch_equals_transformers(model, lm)
    for other in (mask.bool(), mask.float(), mask.int()):
        assert torch.equal(lm.generate(ids, other, max_new_tokens=12, eos_token_id=[]), want)
    for use_cache in (True, False):
        assert torch.equal(lm.generate(ids, mask, max_new_tokens=12, eos_token_id=[], use_cache=use_cache), want)
    streamed = list(lm.stream(ids, mask.bool(), max_new_tokens=12, eos_token_id=[]))
    assert torch.equal(torch.stack(streamed, 1), want[:, 9:])
    with pytest.raises(ArgumentError, match=r"attention_mask.*0 \(padding\) or 1.*found values \[0\.5\]"):
        lm.generate(ids, mask.float() * 0.5, max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"attention_mask.*a mask of 0 and 1 of shape \(batch, seq\)"):
        lm.generate(ids, mask[None], max_new_tokens=2)
    with pytest.raises(ShapeError, match=r"attention_mask.*2 row\(s\).*found 3 row\(s\)"):
        lm.generate(ids, torch.ones(3, 9, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(ShapeError, match=r"attention_mask.*\(2, 9\).*\(2, 8\)"):
        lm.generate(ids, mask[:, 1:], max_new_tokens=2)


def test_each_row_stops_at_its_eos_and_is_padded_after():
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    ids = torch.cat([prompt(length=6, seed=5), prompt(length=6, seed=6)])
    free = lm.generate(ids, max_new_tokens=10, eos_token_id=[])
    eos = int(free[0, 6 + 2])  # row 0's third new token: row 0 ends there
    got = lm.generate(ids, max_new_tokens=10, eos_token_id=eos, pad_token_id=VOCAB - 1)
    want = model.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=eos, pad_token_id=VOCAB - 1)
    assert torch.equal(got, want)
    assert got[0, 6 + 2] == eos and bool((got[0, 6 + 3 :] == VOCAB - 1).all())


@pytest.mark.parametrize("backends", [None, ("cpu",)], ids=["ranked", "torch route"])
def test_a_pad_id_outside_the_vocabulary_pads_the_output_and_is_never_fed(backends):
    """-100 (a loss's ignore index) or the vocabulary's size as pad_token_id: a finished row's output is
    that pad, the model is fed an id it has meanwhile (transformers' own generate feeds the pad to its
    embedding and raises IndexError; a runtime's gather may read past its table), and the other row
    makes what it makes with an in-vocabulary pad, which equals transformers'."""
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False, backends=backends)
    ids = torch.cat([prompt(length=6, seed=5), prompt(length=6, seed=6)])
    free = lm.generate(ids, max_new_tokens=8, eos_token_id=[])
    eos = int(free[0, 6 + 1])  # row 0 ends at its second new token
    want = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=eos, pad_token_id=VOCAB - 1)
    for pad in (-100, VOCAB):
        got = lm.generate(ids, max_new_tokens=8, eos_token_id=eos, pad_token_id=pad)
        assert bool((got[0, 6 + 2 :] == pad).all())
        assert torch.equal(got.masked_fill(got == pad, VOCAB - 1), want)


def test_options_of_the_wrong_kind_are_refused_before_any_work(llama):
    """A generator that is not a torch.Generator, eos or pad ids that are not ints, a session that is
    not one of this model's: an ArgumentError naming the option, raised before the prompt runs (not
    torch's TypeError from a draw mid-way, nor another model's cache run on this one's weights)."""
    _, lm = llama
    session = lm.session()
    cases = [
        ({"do_sample": True, "generator": 5}, r"'generator' expected a torch.Generator"),
        ({"eos_token_id": "a"}, r"'eos_token_id' expected a token id \(int\) or a list of them"),
        ({"eos_token_id": [1, 2.5]}, r"'eos_token_id'"),
        ({"eos_token_id": True}, r"'eos_token_id'"),
        ({"pad_token_id": "x"}, r"'pad_token_id' expected a token id"),
    ]
    for options, message in cases:
        with pytest.raises(ArgumentError, match=message):
            lm.generate(prompt(), max_new_tokens=3, session=session, **options)
        assert session.length == 0
    with pytest.raises(ArgumentError, match=r"'session' expected a session of this model.*found str"):
        lm.generate(prompt(), max_new_tokens=3, session="chat")
    other = opcore.graph.capture_lm(build("llama", seed=3), max_length=48, measure=False).session()
    with pytest.raises(ArgumentError, match="found a session of another model"):
        lm.generate(prompt(), max_new_tokens=3, session=other)
    assert other.length == 0
    ids = prompt()
    plain = lm.generate(ids, max_new_tokens=3, eos_token_id=[])
    as_tensor = lm.generate(ids, max_new_tokens=3, eos_token_id=torch.tensor([VOCAB + 7]), pad_token_id=torch.tensor(0))
    assert torch.equal(plain, as_tensor)


def test_right_padding_is_warned_of_as_transformers_does_and_generates_what_it_generates():
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    ids = torch.cat([prompt(length=8, seed=5), prompt(length=8, seed=6)])
    mask = torch.ones_like(ids)
    ids[1, -3:], mask[1, -3:] = 0, 0
    with pytest.warns(UserWarning, match=r"right padding in row\(s\) \[1\].*padding_side='left'"):
        got = lm.generate(ids, mask, max_new_tokens=5, eos_token_id=[])
    want = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(got, want)


def test_min_new_tokens_holds_eos_back(llama):
    _, lm = llama
    ids = prompt()
    first = int(lm.generate(ids, max_new_tokens=1, eos_token_id=[])[0, -1])
    stopped = lm.generate(ids, max_new_tokens=8, eos_token_id=first)
    assert stopped.shape[1] == ids.shape[1] + 1
    held = lm.generate(ids, max_new_tokens=8, min_new_tokens=4, eos_token_id=first)
    assert held.shape[1] >= ids.shape[1] + 4 and int(held[0, ids.shape[1]]) != first


def test_max_length_counts_the_prompt_as_transformers_does(llama):
    """generate(max_length=N) makes rows N tokens long, prompt included, as transformers' generate;
    max_new_tokens takes precedence; a max_length not above the prompt is an ArgumentError that says
    it counts the prompt, before any work."""
    model, lm = llama
    ids = prompt()
    want = model.generate(ids, max_length=ids.shape[1] + 7, do_sample=False, eos_token_id=VOCAB + 7, pad_token_id=0)
    got = lm.generate(ids, max_length=ids.shape[1] + 7, eos_token_id=[VOCAB + 7])
    assert got.shape[1] == ids.shape[1] + 7 and torch.equal(got, want)
    assert lm.generate(ids, max_length=ids.shape[1] + 7, max_new_tokens=3, eos_token_id=[]).shape[1] == ids.shape[1] + 3
    assert len(list(lm.stream(ids, max_length=ids.shape[1] + 2, eos_token_id=[]))) == 2
    with pytest.raises(ArgumentError, match="max_length.*counts the prompt"):
        lm.generate(ids, max_length=ids.shape[1])


@pytest.mark.parametrize("option", [{"penalty_alpha": 0.6}, {"output_attentions": True}])
def test_an_option_of_transformers_generate_it_does_not_take_is_refused_naming_it(llama, option):
    """Contrastive search, attentions: an ArgumentError naming the option and what to do instead,
    from generate and from stream before any step (not a bare TypeError)."""
    _, lm = llama
    name = next(iter(option))
    for call in (lm.generate, lm.stream):
        with pytest.raises(
            ArgumentError,
            match=rf"(?s){name}.*greedy search, sampling, beam search, prompt lookup and assisted generation are",
        ):
            call(prompt(), max_new_tokens=2, **option)


def test_min_new_tokens_ignores_an_eos_id_outside_the_vocabulary(llama):
    """GPT-2's config says eos 50256 whatever its vocab_size: such an id is never produced, so nothing
    is masked (transformers' MinNewTokensLengthLogitsProcessor matches ids against the vocabulary)."""
    model, lm = llama
    ids = prompt()
    got = lm.generate(ids, max_new_tokens=5, min_new_tokens=5, eos_token_id=[VOCAB + 7, -1])
    want = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False, eos_token_id=VOCAB + 7)
    assert torch.equal(got, want)


def test_forced_first_and_last_tokens_of_the_generation_config():
    """BART's decoder (learned positions, forced_eos_token_id in its generation config): the last of
    max_new_tokens is eos as in model.generate; forced_bos_token_id takes a one-token prompt's first."""
    config = transformers.BartConfig(
        vocab_size=VOCAB, d_model=64, decoder_layers=2, encoder_layers=2, decoder_attention_heads=4,
        encoder_attention_heads=4, decoder_ffn_dim=128, encoder_ffn_dim=128, max_position_embeddings=128,
        forced_eos_token_id=2, decoder_start_token_id=1, **_IDS,
    )  # fmt: skip
    model = built(transformers.BartForCausalLM, config)
    model.generation_config.forced_bos_token_id = 5
    lm = opcore.graph.capture_lm(model, max_length=48, measure=False)
    assert lm.defaults.forced_eos_token_ids == (2,) and lm.defaults.forced_bos_token_id == 5
    assert GenerationDefaults.from_json(lm.defaults.to_json()) == lm.defaults  # as a saved folder keeps them
    for ids in (prompt(), prompt(length=1)):
        want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
        got = lm.generate(ids, max_new_tokens=6, eos_token_id=[])
        assert torch.equal(got, want), (got, want)
        assert int(got[0, -1]) == 2
    assert int(lm.generate(prompt(length=1), max_new_tokens=3, eos_token_id=[])[0, 1]) == 5


def test_the_repetition_penalty_leaves_a_row_s_left_padding_out_as_transformers_does():
    """transformers' generate gives its repetition penalty each row's padding length (the slots
    before the mask's first 1) and leaves those out: the pad id is not penalized for the padding.
    Here the pad id is made the first row's likeliest first token: penalized (as opcore did) the row
    takes another."""
    pad = 7
    config = transformers.LlamaConfig(**SMALL, num_key_value_heads=2, bos_token_id=1, eos_token_id=2, pad_token_id=pad)
    model = built(transformers.LlamaForCausalLM, config)
    ids, mask = prompt(rows=2, length=12, seed=3).clamp(min=pad + 1), torch.ones(2, 12, dtype=torch.long)
    ids[0, :6], mask[0, :6] = pad, 0
    first = model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False)[0, -1]
    with torch.no_grad():
        model.lm_head.weight[pad] = model.lm_head.weight[first] * 1.2
    lm = opcore.graph.capture_lm(model, max_length=32, batch_size=2, measure=False)
    want = model.generate(
        ids, attention_mask=mask, max_new_tokens=6, do_sample=False, repetition_penalty=1.5, eos_token_id=None
    )
    assert want[0, 12] == pad  # the case at hand: the padding's id is the choice
    got = lm.generate(ids, attention_mask=mask, max_new_tokens=6, repetition_penalty=1.5, eos_token_id=[])
    assert torch.equal(got, want), (got[:, 12:].tolist(), want[:, 12:].tolist())


def test_a_generation_config_given_to_generate_is_merged_with_the_model_s_as_transformers_does(llama):
    """``generate(ids, generation_config=GenerationConfig(...))``, as written for transformers: the
    options it sets replace the model's for that call (one it leaves at GenerationConfig()'s default
    keeps the model's), keywords win over both, ``inputs=`` names the prompt; the model's own defaults
    are as they were after. Tokens equal transformers' for the same call."""
    from transformers import GenerationConfig

    model, lm = llama
    ids, kept = prompt(), lm.defaults
    config = GenerationConfig(max_new_tokens=30, repetition_penalty=1.3, eos_token_id=VOCAB + 7, pad_token_id=0)
    for options in ({}, {"max_new_tokens": 4}, {"repetition_penalty": 1.0}):
        want = model.generate(ids, generation_config=config, do_sample=False, **options)
        got = lm.generate(inputs=ids, generation_config=config, **options)
        assert got.shape[1] == ids.shape[1] + options.get("max_new_tokens", 30) and torch.equal(got, want), options
    # 30 new tokens: a greedy row of this model repeats a token within them (the penalty shows)
    assert not torch.equal(lm.generate(ids, generation_config=config), lm.generate(ids, max_new_tokens=30))
    streamed = torch.stack(list(lm.stream(ids, generation_config=config)), 1)
    assert torch.equal(streamed, lm.generate(ids, generation_config=config)[:, ids.shape[1] :])
    assert lm.defaults is kept


def test_a_generation_config_or_prompt_it_cannot_take_is_refused_before_any_work(llama):
    from transformers import GenerationConfig

    _, lm = llama
    ids = prompt()
    for call in (lm.generate, lm.stream):
        with pytest.raises(ArgumentError, match=r"generation_config.*a transformers GenerationConfig, found dict"):
            call(ids, generation_config={"max_new_tokens": 3})
        with pytest.raises(ArgumentError, match=r"(?s)generation_config.*penalty_alpha=0\.6.*own generate"):
            call(ids, generation_config=GenerationConfig(penalty_alpha=0.6, top_k=4))
        with pytest.raises(ArgumentError, match=r"inputs.*once.*found both"):
            call(ids, inputs=ids, max_new_tokens=2)
        # neither: the bos token where the config has one (test_graph_processors: ...starts_from_the_bos_token)


def test_config_options_given_as_keywords_are_applied_as_transformers_applies_them(llama):
    """min_length, forced_bos/eos_token_id, suppress_tokens and begin_suppress_tokens as keywords, as
    transformers' generate takes any config option: tokens equal model.generate's with the same
    keywords; a value of the wrong kind is an ArgumentError naming the option."""
    model, lm = llama
    ids = prompt()
    first = int(lm.generate(ids, max_new_tokens=1, eos_token_id=[])[0, -1])
    second = int(lm.generate(ids, max_new_tokens=2, eos_token_id=[])[0, -1])
    cases = (
        {"min_length": ids.shape[1] + 4, "eos_token_id": first},
        {"forced_eos_token_id": 7},
        {"suppress_tokens": [first, second]},
        {"begin_suppress_tokens": [first]},
    )
    for options in cases:
        ours = {"eos_token_id": None, **options}
        want = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0, **ours)
        got = lm.generate(ids, max_new_tokens=6, **{"eos_token_id": [], **options})
        assert torch.equal(got, want), (options, got, want)
    assert int(lm.generate(ids, max_new_tokens=6, eos_token_id=[], forced_eos_token_id=7)[0, -1]) == 7
    assert first not in lm.generate(ids, max_new_tokens=6, eos_token_id=[], suppress_tokens=[first])[0, 10:].tolist()
    for name, value in (("min_length", -1), ("suppress_tokens", ["a"]), ("forced_bos_token_id", 1.5)):
        with pytest.raises(ArgumentError, match=rf"argument '{name}'"):
            lm.generate(ids, max_new_tokens=2, **{name: value})


def test_the_generation_config_s_sampling_and_repetition_penalty_are_the_defaults(llama):
    """A checkpoint's generation_config may ask for sampling and a repetition penalty (Qwen2.5-Instruct's
    does: do_sample, temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05): where generate is
    not told otherwise it follows them, as transformers' generate does; greedy search applies the
    penalty too. A saved plan keeps them (to_json); one saved before they were kept reads as greedy."""
    model, lm = llama
    config = copy.deepcopy(model.generation_config)
    config.do_sample, config.top_k, config.temperature, config.repetition_penalty = True, 4, 0.7, 1.3
    defaults = GenerationDefaults.of(SimpleNamespace(generation_config=config))
    assert defaults.do_sample and defaults.repetition_penalty == 1.3 and defaults.top_k == 4
    assert GenerationDefaults.from_json(defaults.to_json()) == defaults
    older = {k: v for k, v in defaults.to_json().items() if k not in ("do_sample", "repetition_penalty")}
    assert not GenerationDefaults.from_json(older).do_sample
    ids, kept = prompt(), lm.defaults
    try:
        lm.defaults = defaults

        def seeded(**options: Any) -> torch.Tensor:
            generator = torch.Generator().manual_seed(5)
            # 38 new tokens: a greedy row of this model repeats a token within them (the penalty shows)
            return lm.generate(ids, max_new_tokens=38, eos_token_id=[VOCAB + 7], generator=generator, **options)

        assert torch.equal(seeded(), seeded(do_sample=True, top_k=4, temperature=0.7, repetition_penalty=1.3))
        want = model.generate(
            ids, max_new_tokens=38, min_new_tokens=38, do_sample=False, repetition_penalty=1.3, eos_token_id=VOCAB + 7
        )
        assert torch.equal(seeded(do_sample=False), want)
        assert not torch.equal(seeded(do_sample=False, repetition_penalty=1.0), seeded(do_sample=False))
    finally:
        lm.defaults = kept


def test_the_generation_config_s_lengths_are_the_default_lengths(llama):
    """Llama 2's and TinyLlama's configs set max_length (4096, 2048): transformers' generate runs to
    it where the call gives no length, and to a configured max_new_tokens before that; opcore did 20
    new tokens. A configured length past the cache is cut to the cache (as the default 20 is); one not
    above the prompt is an error naming the config; saved plans keep both lengths."""
    model, lm = llama
    ids, kept = prompt(), lm.defaults
    config = copy.deepcopy(model.generation_config)
    config.eos_token_id, config.pad_token_id = VOCAB + 7, 0  # never produced: the lengths alone stop
    try:
        for length, new in ((ids.shape[1] + 7, None), (4096, None), (None, 5)):
            config.max_length, config.max_new_tokens = length, new
            lm.defaults = GenerationDefaults.of(SimpleNamespace(generation_config=config))
            assert GenerationDefaults.from_json(lm.defaults.to_json()) == lm.defaults
            got = lm.generate(ids)
            if length == 4096:  # up to the 48 slots of this capture
                assert got.shape[1] == lm.max_length
                continue
            want = model.generate(ids, generation_config=config, do_sample=False)
            assert got.shape[1] == ids.shape[1] + (new or 7) and torch.equal(got, want)
        config.max_length, config.max_new_tokens = ids.shape[1], None
        lm.defaults = GenerationDefaults.of(SimpleNamespace(generation_config=config))
        with pytest.raises(ArgumentError, match=r"generation_config\.max_length 10.*max_new_tokens"):
            lm.generate(ids)
        assert lm.generate(ids, max_new_tokens=2).shape[1] == ids.shape[1] + 2
        config.max_length = 20  # transformers' own default (held by configs before transformers 5): 20 new
        assert GenerationDefaults.of(SimpleNamespace(generation_config=config)).max_length is None
    finally:
        lm.defaults = kept
    assert lm.generate(prompt(length=40), eos_token_id=[]).shape[1] == lm.max_length  # 20 new cut to 8


def test_the_generation_config_s_least_length_and_what_generate_does_not_apply():
    """A config's min_new_tokens (else min_length, the prompt counted) holds eos back as transformers'
    generate does where the call does not say; options that change tokens and that generate does not
    apply (contrastive search, DoLa...) are said at capture (a UserWarning) and by explain."""
    model = build("llama")
    ids = prompt()
    eos = int(opcore.graph.capture_lm(model, max_length=40, measure=False).generate(ids, max_new_tokens=1)[0, -1])
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = eos, 0
    for setting in ({"min_new_tokens": 4}, {"min_length": ids.shape[1] + 3}):
        for name, value in setting.items():
            setattr(model.generation_config, name, value)
        lm = opcore.graph.capture_lm(model, max_length=40, measure=False)
        got = lm.generate(ids, max_new_tokens=8)
        assert torch.equal(got, model.generate(ids, max_new_tokens=8, do_sample=False)), setting
        assert got.shape[1] > ids.shape[1] + 2 and int(got[0, ids.shape[1]]) != eos, setting
        assert lm.generate(ids, max_new_tokens=8, min_new_tokens=0).shape[1] == ids.shape[1] + 1
        model.generation_config.min_new_tokens, model.generation_config.min_length = None, None
    model.generation_config.dola_layers, model.generation_config.penalty_alpha = "low", 0.6
    with pytest.warns(UserWarning, match=r"sets penalty_alpha=0\.6, dola_layers='low', which opcore's generate"):
        lm = opcore.graph.capture_lm(model, max_length=40, measure=False)
    assert "not applied by generate: penalty_alpha=0.6, dola_layers='low'" in lm.explain()
    assert GenerationDefaults.from_json(lm.defaults.to_json()) == lm.defaults


def test_whisper_s_decoder_suppresses_tokens_and_counts_positions_with_the_padding():
    """Whisper's generation config suppresses tokens (always, and others as the first new token), as
    transformers' SuppressTokens processors do; its decoder's forward names no position_ids, so
    transformers' generate lets it count positions from the cache's length, padding included: a
    left-padded batch equals model.generate only with those positions (the rows' own count gave
    other tokens)."""
    config = transformers.WhisperConfig(
        vocab_size=VOCAB, d_model=64, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=128,
        encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, max_target_positions=64,
        max_source_positions=32, num_mel_bins=8, decoder_start_token_id=1, pad_token_id=0, bos_token_id=1,
        eos_token_id=2,
    )  # fmt: skip
    model = built(transformers.WhisperForCausalLM, config)
    with pytest.raises(ArgumentError, match=r"at most 64: WhisperForCausalLM's learned positions"):
        opcore.graph.capture_lm(model, max_length=65, measure=False)  # max_target_positions
    model.generation_config.begin_suppress_tokens, model.generation_config.suppress_tokens = None, None
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    free = assert_left_padded_batch_equals_transformers(model, lm)
    # the first new tokens of both rows, then the second, suppressed
    model.generation_config.begin_suppress_tokens = sorted({int(free[0, 9]), int(free[1, 9])})
    model.generation_config.suppress_tokens = sorted({int(free[0, 10]), int(free[1, 10])})
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    assert not lm.defaults.not_applied
    held = assert_left_padded_batch_equals_transformers(model, lm)
    assert not torch.equal(held, free) and int(held[0, 9]) != int(free[0, 9])


def test_seeded_sampling_is_reproducible_and_follows_the_options(llama):
    _, lm = llama
    ids = prompt()

    def sample(seed: int, **options) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        return lm.generate(ids, max_new_tokens=16, do_sample=True, generator=generator, eos_token_id=[], **options)

    assert torch.equal(sample(7, temperature=1.5), sample(7, temperature=1.5))
    assert not torch.equal(sample(7, temperature=5.0), sample(8, temperature=5.0))
    greedy = lm.generate(ids, max_new_tokens=16, eos_token_id=[])
    assert torch.equal(sample(3, top_k=1), greedy)  # top-k 1 is greedy
    penalised = lm.generate(ids, max_new_tokens=16, eos_token_id=[], repetition_penalty=50.0)
    new = penalised[0, ids.shape[1] :].tolist()
    assert len(set(new)) == len(new)  # a huge penalty never repeats a token


@pytest.mark.parametrize(
    "options", [{}, {"temperature": 4.0}, {"temperature": 4.0, "top_p": 0.9}, {"temperature": 4.0, "top_k": 0}]
)
def test_sampling_draws_what_transformers_draws_from_the_same_seed(llama, options):
    """Sampled tokens equal model.generate(do_sample=True)'s from the same seed: the same processors,
    and transformers' top_k of 50 where neither the call nor the config sets one (opcore sampled from
    every token there); top_k=0 samples from every token in both."""
    model, lm = llama
    ids = prompt()
    got = lm.generate(ids, max_new_tokens=12, do_sample=True, generator=torch.Generator().manual_seed(9), **options)
    torch.manual_seed(9)
    want = model.generate(ids, max_new_tokens=12, do_sample=True, pad_token_id=0, **options)
    assert torch.equal(got, want)


def test_fewer_rows_than_captured_sample_as_those_rows_alone():
    """A batch-3 capture given one row pads it with copies of that row; the copies take its token, so
    the generator draws for the caller's row alone (it drew for the copies too, and the second
    token on differed from model.generate's)."""
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=3, measure=False)
    ids = prompt()
    got = lm.generate(
        ids, max_new_tokens=12, do_sample=True, temperature=4.0, generator=torch.Generator().manual_seed(4)
    )
    torch.manual_seed(4)
    want = model.generate(ids, max_new_tokens=12, do_sample=True, temperature=4.0, pad_token_id=0)
    assert torch.equal(got, want)
    two = torch.cat([ids, prompt(seed=2)])
    got = lm.generate(
        two, max_new_tokens=12, do_sample=True, temperature=4.0, generator=torch.Generator().manual_seed(4)
    )
    torch.manual_seed(4)
    assert torch.equal(got, model.generate(two, max_new_tokens=12, do_sample=True, temperature=4.0, pad_token_id=0))


def test_num_return_sequences_draws_several_sequences_per_prompt_as_transformers_does():
    """Each prompt row repeated num_return_sequences times in a row (transformers' expansion), the
    draws those of model.generate from the same seed; from the call or the generation config; greedy
    with more than one, or more rows than captured, refused with the fix."""
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=5, measure=False)
    ids, mask, _, _ = left_padded_rows()
    options: dict[str, Any] = dict(max_new_tokens=10, do_sample=True, temperature=3.0, num_return_sequences=2)
    torch.manual_seed(11)
    want = model.generate(ids, attention_mask=mask, pad_token_id=0, eos_token_id=None, **options)
    torch.manual_seed(11)
    got = lm.generate(ids, mask, eos_token_id=[], **options)
    assert got.shape == (4, 19) and torch.equal(got, want)
    assert not torch.equal(got[0], got[1])  # two draws of one prompt
    with pytest.raises(ArgumentError, match=r"num_return_sequences.*1 with greedy search.*do_sample=True"):
        lm.generate(ids, mask, max_new_tokens=3, num_return_sequences=2)
    with pytest.raises(ShapeError, match=r"capture_lm\(\.\.\., batch_size=6\)"):
        lm.generate(ids, mask, max_new_tokens=3, do_sample=True, num_return_sequences=3)
    model.generation_config.num_return_sequences, model.generation_config.do_sample = 2, True
    configured = opcore.graph.capture_lm(model, max_length=40, batch_size=4, measure=False)
    assert not configured.defaults.not_applied
    assert configured.generate(ids, mask, max_new_tokens=3).shape == (4, 12)


def test_streamer_gets_every_token_as_made(llama):
    _, lm = llama
    ids = prompt()
    seen: list[int] = []
    out = lm.generate(ids, max_new_tokens=6, eos_token_id=[], streamer=lambda tokens: seen.append(int(tokens[0])))
    assert seen == out[0, ids.shape[1] :].tolist()
    assert [int(t[0]) for t in lm.stream(ids, max_new_tokens=6, eos_token_id=[])] == seen

    class Streamer:
        def __init__(self) -> None:
            self.puts: list[list[int]] = []
            self.ended = False

        def put(self, value: torch.Tensor) -> None:
            self.puts.append(value.reshape(-1).tolist())

        def end(self) -> None:
            self.ended = True

    streamer = Streamer()
    lm.generate(ids, max_new_tokens=6, eos_token_id=[], streamer=streamer)
    assert streamer.puts[0] == ids[0].tolist() and [p[0] for p in streamer.puts[1:]] == seen and streamer.ended


def test_transformers_text_streamers_print_and_yield_what_they_do_for_model_generate(llama):
    """TextStreamer (printed) and TextIteratorStreamer (read on this thread while generate runs on
    another, as transformers' docs show), with and without the prompt, over a word-level tokenizer
    built here (nothing downloaded): the same text as for model.generate."""
    import contextlib
    import io
    import threading

    tokenizers = pytest.importorskip("tokenizers", reason="transformers' fast tokenizers")
    model, lm = llama
    words = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    words.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", pad_token="w0")
    ids = tokenizer(" ".join(f"w{i}" for i in prompt()[0].tolist()), return_tensors="pt").input_ids
    assert torch.equal(ids, prompt())
    ours: dict[str, Any] = dict(max_new_tokens=8, eos_token_id=[])
    theirs: dict[str, Any] = dict(max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)

    def printed(generate: Any, options: dict[str, Any], skip_prompt: bool) -> str:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            generate(ids, streamer=transformers.TextStreamer(tokenizer, skip_prompt=skip_prompt), **options)
        return out.getvalue()

    def iterated(generate: Any, options: dict[str, Any], skip_prompt: bool) -> str:
        streamer = transformers.TextIteratorStreamer(tokenizer, skip_prompt=skip_prompt, timeout=60)
        worker = threading.Thread(target=generate, args=(ids,), kwargs=dict(options, streamer=streamer))
        worker.start()
        text = "".join(streamer)
        worker.join()
        return text

    for skip_prompt in (False, True):
        for read in (printed, iterated):
            got, want = read(lm.generate, ours, skip_prompt), read(model.generate, theirs, skip_prompt)
            assert got == want and len(want.split()) == 8 + (0 if skip_prompt else ids.shape[1]), (got, want)


def test_sessions_interleaved_keep_their_own_state(llama):
    _, lm = llama
    a_ids, b_ids = prompt(seed=11), prompt(seed=12)
    alone_a = lm.generate(a_ids, max_new_tokens=8, eos_token_id=[])
    alone_b = lm.generate(b_ids, max_new_tokens=8, eos_token_id=[])
    a, b = lm.session(), lm.session()
    tokens_a, tokens_b = [a.prefill(a_ids).argmax(-1)], [b.prefill(b_ids).argmax(-1)]
    for _ in range(7):
        tokens_a.append(a.decode(tokens_a[-1]).argmax(-1))
        tokens_b.append(b.decode(tokens_b[-1]).argmax(-1))
    assert torch.cat(tokens_a).tolist() == alone_a[0, 10:].tolist()
    assert torch.cat(tokens_b).tolist() == alone_b[0, 10:].tolist()
    a.reset()
    assert a.length == 0 and b.length == 17


def test_a_session_s_steps_set_one_slot_tensor_in_place(llama):
    # a graph runtime's request keeps an input bound while its memory stays the same: the slot a step
    # writes is one tensor per session whose value each step sets, not a new tensor per position
    _, lm = llama
    chat = lm.session()
    token = chat.prefill(prompt()).argmax(-1)
    where = chat.slot.data_ptr()
    for _ in range(3):
        token = chat.decode(token).argmax(-1)
        assert chat.slot.data_ptr() == where and int(chat.slot) == chat.length - 1


def test_a_session_continues_a_conversation(llama):
    model, lm = llama
    chat = lm.session()
    first = lm.generate(prompt(length=6), max_new_tokens=4, eos_token_id=[], session=chat)
    more = prompt(length=3, seed=9)
    second = lm.generate(more, max_new_tokens=4, eos_token_id=[], session=chat)
    whole = torch.cat([first, more], 1)
    want = model.generate(whole, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(second[0, 3:], want[0, whole.shape[1] :])


def test_generate_on_several_threads_runs_each_call_on_a_cache_of_its_own(llama):
    """Four threads generating at once from one LanguageModel, three calls each, prompts of other
    lengths: each call's tokens are what it gives alone (they all ran on the default session's cache
    before: tokens from the others', or an IndexError past its end)."""
    import threading

    _, lm = llama
    prompts = [prompt(length=4 + 3 * i, seed=20 + i) for i in range(4)]
    alone = [lm.generate(p, max_new_tokens=16, eos_token_id=[]) for p in prompts]
    found: list[Any] = []

    def run(i: int) -> None:
        for _ in range(3):
            found.append((i, lm.generate(prompts[i], max_new_tokens=16, eos_token_id=[])))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 12
    assert all(torch.equal(got, alone[i]) for i, got in found)
    assert len(lm._spare) <= 3  # at most one spare per other concurrent call, kept for the next
    lm.generate(prompts[0], max_new_tokens=2, eos_token_id=[])
    assert lm.default_session.length == prompts[0].shape[1] + 1  # one thread: the default session


def test_an_unfinished_stream_keeps_its_session_and_generate_runs_beside_it(llama):
    _, lm = llama
    first, second = prompt(length=5, seed=31), prompt(length=8, seed=32)
    want_first = lm.generate(first, max_new_tokens=6, eos_token_id=[])
    want_second = lm.generate(second, max_new_tokens=6, eos_token_id=[])
    tokens = lm.stream(first, max_new_tokens=6, eos_token_id=[])
    made = [next(tokens), next(tokens)]
    assert torch.equal(lm.generate(second, max_new_tokens=6, eos_token_id=[]), want_second)
    made += list(tokens)
    assert torch.equal(torch.stack(made, 1), want_first[:, 5:])
    # a session a stream is still running on is refused to another call, with the fix
    chat = lm.session()
    running = lm.stream(first, max_new_tokens=6, eos_token_id=[], session=chat)
    next(running)
    with pytest.raises(ArgumentError, match=r"session.*no other generate or stream.*lm\.session\(\)"):
        lm.generate(second, max_new_tokens=2, session=chat)
    running.close()  # closed: the session is free again, and continues its conversation
    assert lm.generate(second, max_new_tokens=2, eos_token_id=[], session=chat).shape == (1, 10)


def test_too_long_is_refused_before_any_work(llama):
    _, lm = llama
    session = lm.session()
    with pytest.raises(ShapeError, match=r"max_length 48.*capture_lm\(\.\.\., max_length=50\)"):
        lm.generate(prompt(length=10), max_new_tokens=40, session=session)
    assert session.length == 0


def test_a_session_s_own_calls_are_named_in_their_errors(llama):
    """Session.decode / verify / prefill refuse bad ids naming themselves (not LanguageModel.generate,
    which the caller did not call)."""
    _, lm = llama
    chat = lm.session()
    chat.prefill(prompt())
    with pytest.raises(ArgumentError, match=r"Session.decode\(\): argument 'tokens' expected integer ids"):
        chat.decode(torch.tensor([1.5]))
    with pytest.raises(ArgumentError, match=r"Session.prefill\(\): argument 'input_ids'.*found id 500"):
        chat.prefill(torch.tensor([[1, VOCAB]]))
    assert chat.length == prompt().shape[1]


def test_bad_ids_are_refused_with_the_argument_named(llama):
    _, lm = llama
    with pytest.raises(ArgumentError, match=r"input_ids.*\[0, 500\).*found id 500"):
        lm.generate(torch.tensor([[1, 2, VOCAB]]), max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"found id -3"):
        lm.generate(torch.tensor([[1, -3]]), max_new_tokens=2)
    with pytest.raises(ArgumentError, match="integer ids"):
        lm.generate(torch.rand(1, 4), max_new_tokens=2)
    with pytest.raises(ShapeError, match=r"batch_size=3"):
        lm.generate(prompt(rows=3), max_new_tokens=2)
    with pytest.raises(ArgumentError, match=r"attention_mask.*0 \(padding\) or 1"):
        lm.generate(prompt(length=3), torch.tensor([[1, 2, 1]]), max_new_tokens=2)
    with pytest.raises(ArgumentError, match="top_p"):
        lm.generate(prompt(), max_new_tokens=2, do_sample=True, top_p=1.5)


def test_saved_model_generates_the_same_in_a_fresh_process(llama, tmp_path):
    assert_generates_the_same_in_a_fresh_process(llama[1], tmp_path)


def test_saving_onto_a_file_is_a_plan_file_error_and_leaves_it(llama, tmp_path):
    from opcore.graph.errors import PlanFileError

    taken = tmp_path / "chat.lm"
    taken.write_text("mine")
    with pytest.raises(PlanFileError, match=r"LanguageModel.save\(\): cannot write a folder at .*chat.lm"):
        llama[1].save(taken)
    assert taken.read_text() == "mine"


def assert_generates_the_same_in_a_fresh_process(lm: opcore.graph.LanguageModel, tmp_path: Any) -> None:
    """``lm`` saved, loaded in another process (which never imports transformers) and its greedy
    tokens there equal to this process's."""
    ids = prompt()
    want = lm.generate(ids, max_new_tokens=12, eos_token_id=[])
    folder = lm.save(tmp_path / "llama.lm")
    assert (folder / "lm.json").is_file() and (folder / "decode" / "plan.json").is_file()
    torch.save({"ids": ids, "want": want}, tmp_path / "io.pt")
    script = textwrap.dedent(
        f"""
        import sys, torch, opcore.graph
        io = torch.load({str(tmp_path / "io.pt")!r})
        lm = opcore.graph.load({str(folder)!r})
        got = lm.generate(io["ids"], max_new_tokens=12, eos_token_id=[])
        print(torch.equal(got, io["want"]), "transformers" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_loaded_model_shares_one_copy_of_the_weights(llama, tmp_path):
    _, lm = llama
    again = opcore.graph.load(lm.save(tmp_path / "lm"))
    decode, prefill = again.decode_plan, again.prefill_plan
    by_source = {
        decode.graph.sources[n]: decode.constants[n] for n in decode.graph.constants if n in decode.graph.sources
    }
    shared = [
        prefill.constants[n] is by_source.get(prefill.graph.sources.get(n, ""))
        for n in prefill.graph.constants
        if n in prefill.graph.sources
    ]
    assert shared and all(shared)


class TinyDecoder(torch.nn.Module):
    """A one-layer decoder written to opcore.graph.decoder's protocol: its cache as buffers."""

    def __init__(self, vocab: int = 50, width: int = 16, max_length: int = 24, batch_size: int = 1) -> None:
        super().__init__()
        self.max_length, self.batch_size = max_length, batch_size
        self.embed = torch.nn.Embedding(vocab, width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("keys", torch.zeros(batch_size, max_length, width))
        self.register_buffer("values", torch.zeros(batch_size, max_length, width))

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.qkv(self.embed(input_ids)).chunk(3, -1)
        self.keys.index_copy_(1, cache_position, k)
        self.values.index_copy_(1, cache_position, v)
        slots = torch.arange(self.max_length)
        allowed = (slots[None, :] <= cache_position[:, None])[None] & attention_mask[:, None, :].bool()
        scores = (q @ self.keys.transpose(1, 2)).masked_fill(~allowed, float("-inf"))
        return self.head(torch.softmax(scores, -1) @ self.values) * 4


def protocol_greedy(model: Any, ids: torch.Tensor, new: int) -> list[int]:
    """The greedy tokens a module following the protocol (one row) gives after ``ids``, step by step
    on its own cache: prefill, then one token at a time."""
    length = ids.shape[1]
    with torch.no_grad():
        mask = torch.zeros(1, model.max_length, dtype=torch.long)
        mask[:, :length] = 1
        logits = model(ids, torch.arange(length)[None], torch.arange(length), mask)[:, -1]
        want = []
        for step in range(new):
            token = logits.argmax(-1)
            want.append(int(token))
            at = length + step
            mask[:, at] = 1
            logits = model(token[:, None], torch.tensor([[at]]), torch.tensor([at]), mask)[:, -1]
    return want


def test_a_module_following_the_protocol_is_captured_as_is():
    torch.manual_seed(0)
    model = TinyDecoder().eval()
    lm = opcore.graph.capture_lm(model, measure=False)
    ids = torch.tensor([[3, 7, 9, 1]])
    assert lm.generate(ids, max_new_tokens=8)[0, 4:].tolist() == protocol_greedy(model, ids, 8)


def test_a_model_in_training_mode_is_captured_in_eval_mode_and_given_back_training():
    """GPT-2's dropout (0.1 by its config) left on would make each capture's graph draw at random:
    capture_lm captures in eval mode, the tokens are eval-mode generate's, and the model goes back to
    training (every submodule), also where capture fails."""
    model = build("gpt2")
    ids = prompt()
    want = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    model.train()
    lm = opcore.graph.capture_lm(model, max_length=32, measure=False)
    assert all(module.training for module in model.modules())
    assert torch.equal(lm.generate(ids, max_new_tokens=8, eos_token_id=[]), want)
    with pytest.raises(ArgumentError):
        opcore.graph.capture_lm(model, max_length=32, measure=False, weights="int3")
    assert all(module.training for module in model.modules())
    model.eval()
    opcore.graph.capture_lm(model, max_length=32, measure=False)
    assert not any(module.training for module in model.modules())


@pytest.mark.parametrize("family", ["gpt2", "opt", "gpt_neo"])
def test_a_cache_longer_than_a_table_of_positions_is_refused_naming_the_table(family):
    """GPT-2's and GPT-Neo's learned positions (OPT's with 2 rows of offset) cover the
    config's max_position_embeddings: transformers' generate raises IndexError past them, and a graph
    runtime's gather gave zeros without a word (GPT-2 generated 40 tokens with 32 positions). A cache
    up to the table's length captures; a rotary model extends past its config's number, as in
    transformers."""
    config_class, model_class, kwargs = _families()[family] if family in _families() else _more(family)
    limit = 24
    key = "n_positions" if family == "gpt2" else "max_position_embeddings"
    model = built(model_class, config_class(**{**kwargs, key: limit}))
    refused = rf"max_length.*at most {limit}.*learned positions.*found 25.*max_length={limit}"
    with pytest.raises(ArgumentError, match=refused):
        opcore.graph.capture_lm(model, max_length=limit + 1, measure=False)
    ids = prompt(length=limit - 6)
    want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    lm = opcore.graph.capture_lm(model, max_length=limit, measure=False)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, eos_token_id=[]), want)
    rotary = transformers.LlamaConfig(**{**_families()["llama"][2], "max_position_embeddings": limit})
    llama = built(transformers.LlamaForCausalLM, rotary)
    lm = opcore.graph.capture_lm(llama, max_length=limit + 8, measure=False)
    ids = prompt(length=limit)
    want = llama.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=8, eos_token_id=[]), want)


class BranchingDecoder(TinyDecoder):
    """TinyDecoder with a branch on its tokens' values: torch.export cannot trace it."""

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        logits = super().forward(input_ids, position_ids, cache_position, attention_mask)
        return logits * 2 if bool(input_ids.sum() > 100) else logits


def test_a_step_torch_export_cannot_trace_is_a_capture_error_with_what_to_do_instead():
    """The export's own Fix speaks of capture's submodule option, which capture_lm has not: the error
    names the step and says what is left (for a module of one's own: a step torch.export traces)."""
    with pytest.raises(CaptureError, match=r"(?s)step could not be exported.*Fix: write the step so that torch.export"):
        opcore.graph.capture_lm(BranchingDecoder().eval(), measure=False)


def test_capture_lm_refuses_a_model_without_weights_and_options_of_the_wrong_kind_before_export():
    config_class, family, kwargs = _families()["llama"]
    with torch.device("meta"):
        empty = family(config_class(**kwargs)).eval()
    with pytest.raises(ArgumentError, match=r"on the meta device \(no data\).*Fix: load the weights first"):
        opcore.graph.capture_lm(empty, max_length=16)
    model = build("llama")
    wrong = (({"measure": "yes"}, "measure"), ({"backends": 5}, "backends"), ({"group_size": 32}, "group_size"))
    for kwargs, arg in wrong:
        with pytest.raises(ArgumentError) as info:
            opcore.graph.capture_lm(model, max_length=16, **kwargs)
        assert info.value.arg == arg


def test_a_module_without_the_protocol_is_refused_with_the_fix():
    with pytest.raises(ArgumentError, match="batch_size and max_length"):
        opcore.graph.capture_lm(torch.nn.Linear(4, 4))
    with pytest.raises(ArgumentError, match="max_length"):
        opcore.graph.capture_lm(build("llama"), max_length=0)


@pytest.mark.parametrize(
    ("prefix", "kwargs"),
    [
        ("Mamba", dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2)),
        (
            "Jamba",  # attention every other layer, Mamba between
            dict(SMALL, num_key_value_heads=2, num_experts=2, attn_layer_period=2, attn_layer_offset=1,
                 expert_layer_period=2, expert_layer_offset=1),
        ),
        # attention and a convolution state in every layer (StaticCache gives them attention-like
        # layers: once a CaptureError deep in the export)
        ("Zaya", dict(SMALL, num_key_value_heads=2)),
        # a recurrent state and no attention heads at all (a raw AttributeError reading its heads before)
        ("Rwkv", dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, attention_hidden_size=64)),
    ],
)  # fmt: skip
def test_a_recurrent_or_hybrid_model_is_refused_with_the_fix(prefix, kwargs):
    config_class, model_class = (
        getattr(transformers, f"{prefix}Config", None),
        getattr(transformers, f"{prefix}ForCausalLM", None),
    )
    if config_class is None or model_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no {prefix}ForCausalLM")
    model = model_class(config_class(**kwargs)).eval()
    with pytest.raises(ArgumentError, match=rf"found {prefix}ForCausalLM.*Fix: recurrent and hybrid models"):
        opcore.graph.capture_lm(model, max_length=32, measure=False)


def test_a_cache_transformers_has_no_static_form_of_is_refused_naming_its_layer_type():
    # DeepSeek-V4's compressed attention: StaticCache has no layer for it (once the reason was a bare
    # "KeyError: 'heavily_compressed_attention'" and the Fix spoke of recurrent models alone)
    config_class = getattr(transformers, "DeepseekV4Config", None)
    model_class = getattr(transformers, "DeepseekV4ForCausalLM", None)
    if config_class is None or model_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no DeepseekV4ForCausalLM")
    config = config_class(
        **SMALL, num_key_value_heads=2, head_dim=16, q_lora_rank=32, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, sliding_window=8, index_n_heads=2, index_head_dim=16, index_topk=8,
        layer_types=["heavily_compressed_attention"] * 2, mlp_layer_types=["hash_moe"] * 2,
    )  # fmt: skip
    with pytest.raises(ArgumentError) as info:
        opcore.graph.capture_lm(model_class(config).eval(), max_length=32, measure=False)
    text = str(info.value)
    assert "layer types heavily_compressed_attention: transformers' StaticCache has no layer for" in text, text
    assert "DeepSeek-V4's compressed attention" in (info.value.fix or ""), text


def test_a_runtime_whose_decode_plan_fails_at_capture_does_not_compete(monkeypatch):
    """capture_lm times the decode step on each graph runtime alone: one whose plan raises on the
    step's inputs (a kernel declining at run time what planning could not see) is left out, said in
    the notes, and the ranked plan runs."""
    from opcore.errors import NoKernelError
    from opcore.graph import lm_capture

    # a runtime that takes a decoder's ops (one that takes fewer than half is not timed alone at all)
    runtimes = sorted(name for name, compiler in compilers().items() if compiler.supports("linear"))
    if not runtimes:
        pytest.skip("no graph runtime that takes linear is installed: the decode step is not compared")
    failing = runtimes[0]
    real = lm_capture._runner

    def runner(plan, lowered):
        if plan.options.backends and plan.options.backends[0] == failing:

            def fail():
                raise NoKernelError(f"silu(): no kernel accepts this call on {failing} (for the test)")

            return fail
        return real(plan, lowered)

    monkeypatch.setattr(lm_capture, "_runner", runner)
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=32, measure=True)
    assert f"{failing} alone failed (NoKernelError: silu()" in lm.explain()
    ids = prompt()
    want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, eos_token_id=[]), want)


def test_a_runtime_that_takes_few_of_the_steps_ops_is_not_timed_alone(monkeypatch):
    """A graph runtime whose compiler supports the ops of fewer than half of the decode step's nodes
    (the example plugin: silu, swiglu, clamp) would run the rest node by node on torch: capture_lm
    neither plans nor times it alone, and explain says why with the counts; a runtime taking most
    of them still competes."""
    from opcore.graph import lm_capture

    runtimes = compilers()
    narrow = sorted(name for name, compiler in runtimes.items() if not compiler.supports("linear"))
    if not narrow:
        pytest.skip("no installed graph runtime lacks linear (the example plugin is not installed)")
    planned: list[Any] = []
    real = lm_capture._plan

    def plan(lowered, place, backends, timer, partitions, copies=True):
        planned.append(backends)
        return real(lowered, place, backends, timer, partitions, copies)

    monkeypatch.setattr(lm_capture, "_plan", plan)
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=32, measure=True)
    text = lm.explain()
    for name in narrow:
        assert not any(backends and backends[0] == name for backends in planned), (name, planned)
        told = re.search(rf"{name} alone: not timed \(its partitions could hold (\d+) of the step's (\d+) nodes", text)
        assert told is not None, text
        assert 2 * int(told[1]) < int(told[2])
    ids = prompt()
    want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, eos_token_id=[]), want)


def test_a_runtime_alone_is_not_planned_again_where_the_ranked_plan_is_all_its_own(monkeypatch):
    """Where the ranked decode plan runs every node in one runtime's partitions, that runtime alone would
    be the same plan: capture_lm neither plans nor times it again (whether the ranked plan is still
    the fastest when its turn comes or another runtime beat it already), and says so; the other
    runtimes still compete."""
    from opcore.graph import lm_capture

    planned: list[tuple[Any, Any, Any]] = []
    real = lm_capture._plan

    def plan(lowered, place, backends, timer, partitions, copies=True):
        made = real(lowered, place, backends, timer, partitions, copies)
        planned.append((lowered, backends, lm_capture.only_partitions_of(made)))
        return made

    monkeypatch.setattr(lm_capture, "_plan", plan)
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=32, measure=True)
    step, _, runtime = planned[0]  # the decode step's ranked plan comes first
    if runtime is None:
        pytest.skip("the ranked decode plan is not one runtime's partitions on this machine: nothing repeats it")
    alone = [backends for lowered, backends, _ in planned[1:] if lowered is step and backends is not None]
    assert alone and all(backends[0] != runtime for backends in alone), (runtime, alone)
    assert f"{runtime} alone: the ranked plan already" in lm.explain()
    untimed = {name for name in compilers() if f"{name} alone: not timed" in lm.explain()}
    others = sorted(set(compilers()) - {runtime} - untimed)
    assert sorted(backends[0] for backends in alone) == others
    ids = prompt()
    want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, eos_token_id=[]), want)


def _favouring(runtime: str, seen: list[list[str]]) -> Any:
    """A capture timer (its verdicts, without the seconds it takes) under which ``runtime`` alone
    wins every comparison it is in; ``seen`` gets each comparison's labels."""

    def timer(runners: dict) -> dict[str, float]:
        seen.append(list(runners))
        return {label: 0.5 if label.startswith(f"{runtime} alone") else 1.0 for label in runners}

    return timer


def test_the_prefill_also_times_the_runtime_the_decode_step_chose(monkeypatch):
    """Where the decode step's measurement picks a graph runtime alone, the prefill's comparison
    has that runtime's partitions as a candidate beside the torch route and the ranked partitions
    (a 0.5B int4 decoder: the ranked route 1.0 s a 128-token prompt, ONNX Runtime alone 0.58 s), and
    the faster runs: prompt and steps on the same kernels."""
    from opcore.graph import lm_capture

    if "onnxruntime" not in compilers():
        pytest.skip("onnxruntime is not installed: no runtime alone to favour")
    seen: list[list[str]] = []
    monkeypatch.setattr(lm_capture, "interleaved", _favouring("onnxruntime", seen))
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=32, measure=True)
    assert lm.decode_plan.notes[0].endswith("runs onnxruntime alone"), lm.decode_plan.notes[0]
    prefill = [labels for labels in seen if "torch route" in labels]
    assert len(prefill) == 1 and "onnxruntime alone" in prefill[0], seen
    assert lm.prefill_plan.notes[0].endswith("runs onnxruntime alone"), lm.prefill_plan.notes[0]
    assert lm_capture.only_partitions_of(lm.prefill_plan) == "onnxruntime" or {
        d.backend for d in lm.prefill_plan.decisions if d.partition is not None
    } == {"onnxruntime"}
    ids = prompt()
    want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, eos_token_id=[]), want)


def test_the_choice_of_each_token_runs_on_one_torch_thread(llama, monkeypatch):
    """The per-token choice (a copy, mask and argmax over the vocabulary) runs with torch's pool at one
    thread, whose workers would otherwise spin on the cores the next step's runtime threads need (a
    0.5B int4 step on ONNX Runtime at 2 threads: 14.5 ms alone, ~20 ms after a parallel copy); the
    caller's thread count is back before each token is handed out."""
    from opcore.graph.sampling import Choice

    _, lm = llama
    chosen_at: list[int] = []
    real = Choice.pick

    def pick(self, scores):
        chosen_at.append(torch.get_num_threads())
        return real(self, scores)

    monkeypatch.setattr(Choice, "pick", pick)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        streamed: list[int] = []
        out = lm.generate(
            prompt(), max_new_tokens=5, min_new_tokens=5, streamer=lambda t: streamed.append(torch.get_num_threads())
        )
        assert chosen_at == [1] * 5 and streamed == [2] * 5, (chosen_at, streamed)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    monkeypatch.undo()
    assert torch.equal(lm.generate(prompt(), max_new_tokens=5, min_new_tokens=5), out)


def test_only_partitions_of_names_the_one_runtime_or_none():
    from opcore.graph.lm_capture import only_partitions_of

    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=32, measure=False, prefill_partitions=False)
    assert only_partitions_of(lm.prefill_plan) is None  # the torch route: every node on a kernel
    runtimes = {d.backend for d in lm.decode_plan.decisions if d.partition is not None}
    kernels = [d for d in lm.decode_plan.decisions if d.partition is None and d.backend != "python"]
    want = runtimes.pop() if len(runtimes) == 1 and not kernels else None
    assert only_partitions_of(lm.decode_plan) == want


def test_a_large_decoder_s_prefill_keeps_no_weight_copies(monkeypatch, tmp_path):
    """Above COPY_BYTES of weights the prefill plan asks its kernels for no copies of the weights (the
    decode plan's runtime holds its own form): said in its notes, kept by save/load, and the tokens
    are eager's; the decode plan is not affected."""
    from opcore.graph import lm_capture

    monkeypatch.setattr(lm_capture, "COPY_BYTES", 0)  # the test's decoder is "large"
    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=32, measure=False)
    assert lm.prefill_plan.options.weight_copies is False
    assert lm.decode_plan.options.weight_copies is True
    assert any(note.startswith("no weight copies") for note in lm.prefill_plan.notes)
    ids = prompt()
    want = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, eos_token_id=[]), want)
    again = opcore.graph.load(lm.save(tmp_path / "large.lm"))
    assert again.prefill_plan.options.weight_copies is False
    assert torch.equal(again.generate(ids, max_new_tokens=6, eos_token_id=[]), want)


def test_capture_of_a_default_decoder_runs_without_its_cache():
    model = build("llama")
    ids = prompt(length=8)
    plan = opcore.graph.capture(model, (ids,), measure=False)
    assert any("capture_lm" in note for note in plan.notes)
    assert model.config.use_cache is True  # given back as it was
    out = plan(ids)
    assert out.past_key_values is None
    with torch.no_grad():
        assert (out.logits - model(ids, use_cache=False).logits).abs().max().item() <= 1e-4


def test_capture_with_a_cache_in_the_output_names_the_fix():
    model = build("llama")
    with pytest.raises(CaptureError, match=r"use_cache=False.*capture_lm"):
        opcore.graph.capture(model, (prompt(length=8),), {"use_cache": True}, measure=False)


def test_a_batch_of_one_with_a_dynamic_batch_dim_says_why():
    from torch.export import Dim

    with pytest.raises(CaptureError, match="at least 2 along each dynamic dim"):
        opcore.graph.capture(torch.nn.Linear(8, 4), (torch.randn(1, 8),), dynamic_shapes=({0: Dim("batch")},))


@pytest.mark.gpu
def test_generation_on_cuda_equals_eager():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    model = build("llama").cuda()
    lm = opcore.graph.capture_lm(model, max_length=48, device="cuda", measure=False)
    ids = prompt().cuda()
    want = model.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=16, eos_token_id=[]), want)
    replayed = lm.default_session.decode_graph
    assert replayed, lm.decode_plan.notes  # the decode steps replayed as one CUDA graph
    assert "replayed: one CUDA graph per session" in lm.explain()
    assert replayed.replays == 15  # the 16th token needs no step after it
    assert torch.equal(lm.generate(ids, max_new_tokens=16, eos_token_id=[]), want)  # the same graph, reset cache
    assert lm.default_session.decode_graph is replayed and replayed.replays == 30


@pytest.mark.gpu
def test_cuda_sessions_replay_their_own_graphs():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    model = build("llama").cuda()
    lm = opcore.graph.capture_lm(model, max_length=48, device="cuda", measure=False)
    a, b = prompt(seed=1).cuda(), prompt(length=7, seed=2).cuda()
    alone = [model.generate(p, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0) for p in (a, b)]
    first, second = lm.session(), lm.session()
    tokens = {0: [first.prefill(a).argmax(-1)], 1: [second.prefill(b).argmax(-1)]}
    for _ in range(7):  # interleaved: each session's graph reads and writes its own cache
        for index, chat in enumerate((first, second)):
            tokens[index].append(chat.decode(tokens[index][-1]).argmax(-1))
    for index, prompt_ids in enumerate((a, b)):
        assert torch.equal(torch.cat([prompt_ids, torch.stack(tokens[index], 1)], 1), alone[index])
    assert first.decode_graph.graph is not second.decode_graph.graph
    # sampling with a seeded generator: the same tokens replayed or node by node
    sampled = [
        lm.generate(a, max_new_tokens=8, do_sample=True, top_k=20, generator=torch.Generator("cuda").manual_seed(3))
        for _ in range(2)
    ]
    lm.cuda_graph = False  # turned off: every session's steps run node by node
    kept = lm.default_session.decode_graph
    plain = lm.generate(a, max_new_tokens=8, do_sample=True, top_k=20, generator=torch.Generator("cuda").manual_seed(3))
    assert kept and kept.replays == 14 and lm.session().decode_graph is None
    assert torch.equal(sampled[0], sampled[1]) and torch.equal(sampled[0], plain)


def _rss_mb() -> float:
    import pathlib

    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status here to read the resident set from")


def test_resident_memory_holds_over_many_calls_and_prompt_lengths():
    import gc

    model = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=48)  # measured: the prefill may run on partitions
    lengths = list(range(2, 42, 2))  # 20 distinct prompt lengths

    def calls(seeds: range) -> None:
        for seed in seeds:
            lm.generate(prompt(length=lengths[seed % 20], seed=seed), max_new_tokens=4, eos_token_id=[])
        gc.collect()

    # warm-up: as many calls as are measured (the first hundred grow the allocators' pools by ~15 MB
    # run alone, then the resident set stays within 1 MB per hundred calls)
    calls(range(100))
    before = _rss_mb()
    calls(range(100, 200))
    assert _rss_mb() - before <= 20


@pytest.mark.parametrize("family", ["llama", "gemma", "gpt2"])
def test_head_shapes_without_transformers_get_head_shapes(family, monkeypatch):
    """Older transformers (5.17, the GPU image's) have no configuration_utils.get_head_shapes: the
    cache is then shaped from the config's own fields, as get_head_shapes shapes it."""
    from opcore.graph.decoder import _head_shapes

    config_class, _, settings = _families()[family]
    config = config_class(**settings).get_text_config()
    expected = _head_shapes(config)
    monkeypatch.delattr(transformers.configuration_utils, "get_head_shapes", raising=False)
    assert _head_shapes(config) == expected


def test_capture_collects_only_its_own_objects_and_unfreezes_after():
    """capture_lm freezes the objects alive before its candidate plans (gc.freeze) so that the
    collection after each losing plan looks at the new ones only, and unfreezes them after: no object
    stays frozen. A process that froze objects itself keeps them frozen, untouched."""
    import gc

    from opcore.graph.lm_capture import _collecting_new_objects_only

    assert gc.get_freeze_count() == 0
    with _collecting_new_objects_only():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    lm = opcore.graph.capture_lm(build("llama"), max_length=32, measure=True)
    assert gc.get_freeze_count() == 0 and lm.decode_plan is not None
    gc.freeze()
    try:
        # a frozen object that dies leaves the count (it fell by 2 in one CI run): the count may go down
        # a little, never to 0 (unfrozen) nor up by these new objects (frozen again)
        frozen, fresh = gc.get_freeze_count(), [{} for _ in range(1000)]
        with _collecting_new_objects_only():
            assert 0 < gc.get_freeze_count() <= frozen
        assert 0 < gc.get_freeze_count() <= frozen and len(fresh) == 1000
    finally:
        gc.unfreeze()
