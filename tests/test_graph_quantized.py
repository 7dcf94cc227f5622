"""Quantized weights in plans and generation: capture(weights=...) and capture_lm(weights=...) run each
constant-weight linear as linear_wq on its codes (opcore.graph.quantizing), partitions carry the
codes, saved plans store them and load without quantizing again."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError
from opcore.quantize import quantize_weight

transformers = pytest.importorskip("transformers", reason="the decoders are transformers models")

VOCAB = 256


def llama(tied: bool = False):
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def dequantized_copy(model, bits: int, group: int, logits_bits: int = 8):
    """The model with every linear's weight replaced by its quantized-then-dequantized value: what a
    quantized plan computes, up to the runtimes' float error."""
    import copy

    other = copy.deepcopy(model)
    for name, module in other.named_modules():
        if isinstance(module, torch.nn.Linear):
            b = logits_bits if name == "lm_head" else bits
            g = -1 if b == 8 else group
            qw = quantize_weight(module.weight.detach(), bits=b, group_size=g)
            module.weight.data = torch.from_numpy(qw.dequantize("float32"))
    return other


def _ids(length: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def _nodes(plan) -> list[dict]:
    return json.loads(plan.explain(format="json"))["nodes"]


@pytest.mark.parametrize(("weights", "bits"), [("int8", 8), ("int4", 4)])
def test_capture_quantizes_every_linear_and_computes_the_dequantized_model(weights: str, bits: int) -> None:
    model = llama()
    ids = _ids()
    plan = opcore.graph.capture(model, (ids,), weights=weights, group_size=32, measure=False)
    ops = [n["op"] for n in _nodes(plan)]
    assert "linear" not in ops and ops.count("linear_wq") == 2 * 7 + 1  # q k v o gate up down per layer, lm_head
    lm_head = next(n for n in plan.graph.nodes if n.op == "linear_wq" and "lm_head" in str(n.args[1]))
    assert lm_head.args[5] == 8  # the logits' linear stays int8
    assert any(note.startswith(f"weights int{bits}") for note in plan.notes), plan.notes
    float_weights = [n for n in plan.graph.constants if plan.constants[n].is_floating_point()]
    assert not any(n.endswith("proj_weight") for n in float_weights), float_weights
    with torch.no_grad():
        want = dequantized_copy(model, bits, 32)(ids).logits
    got = plan(ids).logits
    assert (got - want).abs().max().item() <= 2e-2 * want.abs().max().item()


def test_exclude_keeps_the_named_weights_float() -> None:
    plan = opcore.graph.capture(llama(), (_ids(),), weights="int8", exclude=("lm_head", "*.mlp.*"), measure=False)
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("linear_wq") == 2 * 4  # q k v o per layer
    assert any("7 kept float (exclude=['lm_head', '*.mlp.*']" in note for note in plan.notes), plan.notes
    kept = [n for n in plan.graph.nodes if n.op == "linear"]
    assert len(kept) == 1 and "lm_head" in str(kept[0].args[1])  # the MLPs' linears are fused (gated_mlp)


def test_tied_embeddings_keep_the_table_for_the_gather() -> None:
    model = llama(tied=True)
    ids = _ids()
    plan = opcore.graph.capture(model, (ids,), weights="int8", measure=False)
    table = next(n for n in plan.graph.nodes if n.op == "embedding").args[1]
    assert plan.constants[table.name].is_floating_point()  # the gather reads the float table
    assert plan(ids).logits.shape == (1, 12, VOCAB)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"weights": "int3"}, "weights"),
        ({"weights": "int4", "group_size": 0}, "group_size"),
        ({"weights": "int8", "route": "torch"}, "route"),
    ],
)
def test_bad_weight_options_are_clear_errors(kwargs: dict, arg: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        opcore.graph.capture(llama(), (_ids(),), measure=False, **kwargs)
    assert caught.value.arg == arg


def test_a_group_that_does_not_divide_the_inputs_is_a_clear_error() -> None:
    with pytest.raises(Exception) as caught:
        opcore.graph.capture(llama(), (_ids(),), weights="int4", group_size=48, measure=False)
    assert "48" in str(caught.value)


def test_saved_quantized_plan_is_smaller_and_loads_in_a_fresh_process(tmp_path: pathlib.Path) -> None:
    model = llama()
    ids = _ids()
    float_plan = opcore.graph.capture(model, (ids,), measure=False)
    plan = opcore.graph.capture(model, (ids,), weights="int8", measure=False)
    float_plan.save(tmp_path / "float")
    plan.save(tmp_path / "int8")

    def size(folder: pathlib.Path, pattern: str) -> int:
        return sum(f.stat().st_size for f in folder.rglob(pattern) if f.is_file())

    # the weights (the plan's safetensors, the partition's IR): the float token table stays in both
    assert size(tmp_path / "int8", "weights.safetensors") < 0.5 * size(tmp_path / "float", "weights.safetensors")
    assert size(tmp_path / "int8", "*.bin") < 0.5 * size(tmp_path / "float", "*.bin")
    want = plan(ids).logits
    torch.save(ids, tmp_path / "ids.pt")
    script = (
        "import sys, torch, opcore.graph\n"
        "plan = opcore.graph.load(sys.argv[1])\n"
        "ids = torch.load(sys.argv[2])\n"
        "torch.save(plan(ids).logits, sys.argv[3])\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "int8"), str(tmp_path / "ids.pt"), str(tmp_path / "out.pt")],
        check=True,
        env=env,
        timeout=300,
    )
    assert torch.equal(torch.load(tmp_path / "out.pt"), want)


def test_capture_lm_generates_with_int8_weights_and_saves_them(tmp_path: pathlib.Path) -> None:
    model = llama()
    ids = _ids(8)
    lm = opcore.graph.capture_lm(model, max_length=32, weights="int8", measure=False)
    assert all("linear" not in [n.op for n in plan.graph.nodes] for plan in (lm.prefill_plan, lm.decode_plan)), (
        "every linear quantized in both steps"
    )
    shared = {n: lm.prefill_plan.constants[n].data_ptr() for n in lm.prefill_plan.graph.constants if "qweight" in n}
    assert shared and all(lm.decode_plan.constants[n].data_ptr() == p for n, p in shared.items())
    out = lm.generate(ids, max_new_tokens=12, min_new_tokens=12)
    reference = dequantized_copy(model, 8, -1).generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)
    agree = (out[0, 8:] == reference[0, 8:]).float().mean().item()
    assert agree >= 0.75, (out, reference)  # the runtimes' float error may flip a near tie of random logits
    lm.save(tmp_path / "lm")
    loaded = opcore.graph.load(tmp_path / "lm")
    assert torch.equal(loaded.generate(ids, max_new_tokens=12, min_new_tokens=12), out)
