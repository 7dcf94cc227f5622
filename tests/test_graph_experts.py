"""Mixture-of-experts decoders (opcore.graph.experts): capture_lm and capture of transformers' MoE
families, whose experts transformers runs through a custom op or a data-dependent loop when exported
as they are. Small models from configs, random weights, the lm_head scaled as in
test_graph_generation (greedy choices well apart)."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest
import torch
from test_graph_generation import (
    assert_generates_the_same_in_a_fresh_process,
    assert_left_padded_batch_equals_transformers,
    built,
)

import opcore.graph
from opcore.graph.experts import GATHERED, ONE_TOKEN, exportable_experts, gathered_experts_forward
from opcore.graph.partition import compilers

transformers = pytest.importorskip("transformers", reason="the MoE tests build transformers decoders")
pytest.importorskip("transformers.integrations.moe", reason="this transformers has no experts interface")

VOCAB = 500
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
IDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
EXPERTS = dict(num_key_value_heads=2, num_experts_per_tok=2)

# each for what its experts do differently
FAMILIES: dict[str, dict[str, Any]] = {
    "Mixtral": dict(SMALL, num_local_experts=4, **EXPERTS),
    # a shared expert beside the routed ones, its own gate
    "Qwen2Moe": dict(SMALL, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=64, **EXPERTS),
    "Qwen3Moe": dict(SMALL, head_dim=16, num_experts=4, moe_intermediate_size=32, **EXPERTS),
    "Olmoe": dict(SMALL, num_experts=4, **EXPERTS),
    # sparsemixer routing (max.dim, scatter)
    "Phimoe": dict(SMALL, num_local_experts=4, **EXPERTS),
    "GraniteMoe": dict(SMALL, num_local_experts=4, **EXPERTS),
    # transposed expert weights with biases, an interleaved clamped gate, sliding and full layers
    "GptOss": dict(
        SMALL, head_dim=16, num_local_experts=4, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], **EXPERTS,
    ),
    # rotary frequencies made with torch.polar and multiplied as complex pairs (opcore.graph.complex_rotary),
    # multi-head latent attention, a shared expert
    "DeepseekV2": dict(
        SMALL, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8,
        v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
        first_k_dense_replace=1,
    ),
    # multi-head latent attention (a cached latent and rotary key of different widths), a dense first
    # layer, group-limited routing and a shared expert
    "DeepseekV3": dict(
        SMALL, num_key_value_heads=4, num_experts_per_tok=2, n_routed_experts=4, moe_intermediate_size=32,
        n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=16, n_group=2, topk_group=1,
    ),
}  # fmt: skip


def build(family: str, seed: int = 0, dtype: torch.dtype = torch.float32) -> Any:
    config_class = getattr(transformers, f"{family}Config", None)
    model_class = getattr(transformers, f"{family}ForCausalLM", None)
    if config_class is None or model_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no {family}ForCausalLM")
    return built(model_class, config_class(**FAMILIES[family], **IDS), seed).to(dtype)


def prompt(rows: int = 1, length: int = 10, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_tokens_equal_transformers_generate(family):
    model = build(family)
    before = model.get_experts_implementation()
    lm = opcore.graph.capture_lm(model, max_length=48, measure=False)
    assert model.get_experts_implementation() == before  # given back as it was
    ids = prompt()
    want = model.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)
    got = lm.generate(ids, max_new_tokens=20, eos_token_id=[])
    assert torch.equal(got, want), f"{family}: {got[0, 10:].tolist()} != {want[0, 10:].tolist()}"
    # unmeasured, the decode step's experts are gather_mm steps too (no expert's weights copied)
    assert any(node.op == "gather_mm" for node in lm.decode_plan.graph.nodes), lm.decode_plan.explain()


def _one_token_decode_plan(model: Any) -> Any:
    """The decode step with its experts as gather + bmm (what capture_lm measures against gather_mm)."""
    from opcore.graph.decoder import CachedDecoder
    from opcore.graph.lm_capture import _lower_step, _plan
    from opcore.types import Device

    place = Device.parse("cpu")
    lowered = _lower_step(CachedDecoder(model, 1, 48), 1, 48, 1, place, experts=ONE_TOKEN)
    return _plan(lowered, place, None, None, partitions=True)


@pytest.mark.skipif("openvino" not in compilers(), reason="the partitions checked are OpenVINO's")
@pytest.mark.parametrize("family", sorted(set(FAMILIES) - {"Phimoe", "DeepseekV3"}))
def test_gathered_expert_weights_stay_inside_the_partition(family):
    # the chosen experts' weights are gathered inside a partition: the router's top-k indices are
    # proven in range (opcore.graph.ranges); Phimoe's sparsemixer picks its experts through max.dim,
    # scatter and concat, DeepSeek's group-limited routing through masked_fill of a top-k's scatter:
    # the value ranges follow neither (their experts are gathered on torch)
    plan = _one_token_decode_plan(build(family))
    graph = plan.graph
    gathers = {
        node.name
        for node in graph.nodes
        if node.op == "index" and getattr(node.args[0], "name", None) in graph.constants
        and graph.values[node.args[0].name].meta.ndim == 3
    }  # fmt: skip
    assert gathers
    outside = [d.node for d in plan.decisions if d.node in gathers and d.partition is None]
    assert not outside, plan.explain()


def test_the_decode_step_s_two_expert_forms_compete_at_capture():
    model = build("Qwen3Moe")
    lm = opcore.graph.capture_lm(model, max_length=48, measure=True)
    told = lm.decode_plan.notes[0]
    assert told.startswith("decode step measured at capture:"), told
    assert "ranked (experts as gather + bmm)" in told, told
    ids = prompt()
    want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=12, eos_token_id=[]), want)


def test_bfloat16_experts_decode_as_eager():
    # teacher-forced on eager's 12 greedy tokens: each step picks eager's token, but where eager's two
    # best scores are within 2 bfloat16 steps of each other (a near tie: at step 6 here 219 leads 193
    # by 0.0156, one step at that scale), which a sum in another order (the decode window's W slots
    # against eager's cache of the prompt's length) may flip
    model = build("Mixtral", dtype=torch.bfloat16)
    lm = opcore.graph.capture_lm(model, max_length=40, measure=False)
    ids = prompt()
    want = model.generate(
        ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0,
        output_scores=True, return_dict_in_generate=True,
    )  # fmt: skip
    chat = lm.session()
    logits = chat.prefill(ids)
    near = 0
    for step, (token, scores) in enumerate(zip(want.sequences[0, ids.shape[1] :], want.scores, strict=True)):
        best, second = scores[0].float().topk(2).values.tolist()
        if best - second <= 2 * 2.0 ** (math.floor(math.log2(abs(best) or 1.0)) - 7):
            near += 1
        else:
            assert int(logits[0].float().argmax()) == int(token), f"step {step}"
        logits = chat.decode(token[None])
    assert near <= 3  # the comparison holds at most steps


def test_left_padded_batch_equals_transformers():
    model = build("Qwen3Moe")
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    assert_left_padded_batch_equals_transformers(model, lm)


def test_deepseek_v2_s_complex_rotary_runs_as_real_pairs_and_is_given_back():
    """DeepSeek-V2 multiplies q and k by torch.polar frequencies as complex pairs (once a CaptureError:
    "would return torch.complex64"): exported in real arithmetic (opcore.graph.complex_rotary), its
    left-padded rows equal model.generate's; the model's rotary and modeling function given back."""
    model = build("DeepseekV2")
    modeling = sys.modules[type(model).__module__]
    original = modeling.apply_rotary_emb
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    assert modeling.apply_rotary_emb is original
    assert all("forward" not in vars(m) for m in model.modules())
    assert_left_padded_batch_equals_transformers(model, lm)


# DeepSeek Sparse Attention: multi-head latent attention whose keys an indexer picks, top k per query,
# from keys of its own it caches beside the latent; 16 index heads so that no two keys tie for the top k
# (with 2, a quarter of the scores are ReLU's exact 0, whose order torch's topk breaks by the cache's
# length), top 4 of a 10-token prompt so that every step selects
SPARSE = dict(
    SMALL, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8,
    v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
    first_k_dense_replace=1, n_group=1, topk_group=1, index_topk=4, index_head_dim=16, index_n_heads=16,
    layer_types=["indexed_attention"] * 2, mlp_layer_types=["dense", "sparse"],
)  # fmt: skip


@pytest.mark.parametrize("family", ["DeepseekV32", "GlmMoeDsa"])
def test_a_sparse_attention_s_indexer_keys_are_cached_and_written_in_place(family):
    # the indexer's keys are a third buffer a layer (transformers' StaticIndexedLayer), written at the
    # step's slots as the latent is: once "Cannot call update_indexer on layer 0 which is a PositionedLayer"
    config_class = getattr(transformers, f"{family}Config", None)
    model_class = getattr(transformers, f"{family}ForCausalLM", None)
    if config_class is None or model_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no {family}ForCausalLM")
    model = built(model_class, config_class(**SPARSE, **IDS))
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    told = lm.explain()
    assert "b_indexer_cache_0" in told and "b_indexer_cache_1" in told, told
    ids = prompt(rows=2)
    want = model.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    got = lm.generate(ids, max_new_tokens=16, eos_token_id=[])
    assert torch.equal(got, want), f"{family}: {got[:, 10:].tolist()} != {want[:, 10:].tolist()}"
    assert_left_padded_batch_equals_transformers(model, lm)


def test_a_saved_moe_decoder_generates_the_same_in_a_fresh_process(tmp_path):
    # the plans hold the exported experts (gathers, bmm, the top-k as an ATen op): nothing of
    # transformers' experts interface is needed to load them
    lm = opcore.graph.capture_lm(build("DeepseekV3"), max_length=40, measure=False)
    assert_generates_the_same_in_a_fresh_process(lm, tmp_path)


@pytest.mark.parametrize("family", ["Mixtral", "GptOss"])
def test_capture_of_a_moe_forward_matches_eager(family):
    model = build(family)
    ids = prompt(rows=2, length=12)
    plan = opcore.graph.capture(model, (ids,), measure=False)
    assert model.get_experts_implementation() == {"": "grouped_mm"}
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
    assert (plan(ids).logits - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", ["Mixtral", "Qwen2Moe", "GptOss"])
@pytest.mark.parametrize("implementation", [GATHERED, ONE_TOKEN])
def test_each_exported_form_computes_what_transformers_grouped_mm_does(family, implementation):
    model = build(family)
    # 12 tokens x 2 experts: gather_mm's torch kernel groups the rows (a few rows it takes one by one)
    ids = prompt(length=12) if implementation == GATHERED else prompt(rows=3, length=1)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        with exportable_experts(model, implementation) as switched:
            assert switched
            assert model.get_experts_implementation() == {"": implementation}
            got = model(ids, use_cache=False).logits
    assert model.get_experts_implementation() == {"": "grouped_mm"}
    assert (got - want).abs().max().item() <= 1e-5


def test_a_dense_model_is_exported_as_it_is():
    config = transformers.LlamaConfig(**SMALL, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config).eval()
    with exportable_experts(model, GATHERED) as switched:
        assert not switched


def test_gathered_experts_refuse_expert_parallel_layers():
    model = build("Mixtral")
    experts = next(m for m in model.modules() if getattr(getattr(m, "down_proj", None), "ndim", 0) == 3)
    experts._is_expert_parallel = True
    x = torch.randn(3, 64)
    with pytest.raises(NotImplementedError, match="expert parallelism"):
        gathered_experts_forward(experts, x, torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 2))


@pytest.mark.parametrize("family", ["Qwen3Moe", "GptOss"])
def test_the_prefill_multiplies_each_token_by_its_chosen_experts_alone(family):
    """The prompt's experts are gather_mm steps (each expert's rows one product on torch, no expert
    applied to a token that did not choose it), with eager's sums: its logits match eager's to float
    noise at every prompt length, with more experts than a token chooses."""
    model = build(family)
    lm = opcore.graph.capture_lm(model, max_length=48, measure=False)
    plan = lm.prefill_plan
    steps = [node.name for node in plan.graph.nodes if node.op == "gather_mm"]
    # up (or gate_up) and down per MoE layer
    assert len(steps) == 2 * model.config.num_hidden_layers, plan.explain()
    on = {d.node: d.backend for d in plan.decisions}
    assert {on[name] for name in steps} == {"cpu"}, plan.explain()
    for length in (2, 9, 31):
        ids = prompt(length=length, seed=length)
        want = model.generate(ids, max_new_tokens=1, do_sample=False, output_logits=True, return_dict_in_generate=True,
                              eos_token_id=None, pad_token_id=0).logits[0]  # fmt: skip
        got = lm.session().prefill(ids)
        assert (got - want).abs().max().item() <= 1e-4


def test_a_quantized_moe_decoder_says_its_experts_stay_float():
    model = build("Qwen3Moe")
    lm = opcore.graph.capture_lm(model, max_length=40, weights="int8", measure=False)
    experts = sum(p.numel() * 4 for n, p in model.named_parameters() if p.ndim == 3) / 1e6
    for plan in (lm.prefill_plan, lm.decode_plan):
        said = next(note for note in plan.notes if note.startswith("weights int8"))
        assert f"4 other float weight(s) not quantized ({experts:.1f} MB, read by gather_mm" in said, said
    ids = prompt()
    assert lm.generate(ids, max_new_tokens=4, eos_token_id=[]).shape == (1, 14)
