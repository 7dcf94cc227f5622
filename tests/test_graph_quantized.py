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
from graph_models import small_llama

import opcore.graph
from opcore.errors import ArgumentError
from opcore.quantize import quantize_weight

transformers = pytest.importorskip("transformers", reason="the decoders are transformers models")

VOCAB = 256


def llama(tied: bool = False):
    return small_llama(vocab=VOCAB, tied=tied)


def dequantized_copy(model, bits: int, group: int, logits_bits: int = 8):
    """The model with every linear's weight (and the token table, int8 per row) replaced by its
    quantized-then-dequantized value: what a quantized plan computes, up to the runtimes' float error."""
    import copy

    other = copy.deepcopy(model)
    for name, module in other.named_modules():
        stored_in_out = type(module).__name__ == "Conv1D"  # GPT-2's: x @ W + b, W stored (in, out)
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) or stored_in_out:
            b = logits_bits if name == "lm_head" or isinstance(module, torch.nn.Embedding) else bits
            g = -1 if b == 8 else group
            weight = module.weight.detach()
            qw = quantize_weight(weight.t() if stored_in_out else weight, bits=b, group_size=g)
            dequantized = torch.from_numpy(qw.dequantize("float32"))
            module.weight.data = dequantized.t().contiguous() if stored_in_out else dequantized
    return other


def _ids(length: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def _float_weights(plan) -> list[str]:
    """The plan's 2-D float constants other than the codes' scales (what quantizing should leave none of)."""
    return [
        name
        for name, tensor in plan.constants.items()
        if tensor.is_floating_point() and tensor.ndim == 2 and not name.rsplit("_", 1)[-1].startswith("scale")
    ]


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
    assert ops.count("embedding_wq") == 1 and "embedding" not in ops  # the token table, int8 per row
    assert not _float_weights(plan), _float_weights(plan)
    with torch.no_grad():
        want = dequantized_copy(model, bits, 32)(ids).logits
    got = plan(ids).logits
    assert (got - want).abs().max().item() <= 2e-2 * want.abs().max().item()


# decoders whose projections are not torch's linear: Falcon's ``x @ W.T`` (matmul of a transposed
# weight), GPT-2's Conv1D ``addmm(b, x, W)`` of a weight stored (in, out)
_PRODUCTS = {
    "falcon": ("FalconForCausalLM", "FalconConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4)),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(n_embd=64, n_layer=2, n_head=4, n_positions=64)),
}


def _product_model(family: str):
    model_class, config_class, kwargs = _PRODUCTS[family]
    torch.manual_seed(0)
    return getattr(transformers, model_class)(getattr(transformers, config_class)(vocab_size=VOCAB, **kwargs)).eval()


@pytest.mark.parametrize("family", sorted(_PRODUCTS))
def test_a_linear_written_as_a_product_is_quantized_too(family: str) -> None:
    model = _product_model(family)
    ids = _ids()
    plan = opcore.graph.capture(model, (ids,), weights="int4", group_size=16, measure=False)
    ops = [n["op"] for n in _nodes(plan)]
    assert "matmul" not in ops and "addmm" not in ops, ops  # the attention's products are bmm / sdpa here
    assert ops.count("linear_wq") == 2 * 4 + 1, ops  # 4 projections a layer and the lm_head
    assert not _float_weights(plan), _float_weights(plan)  # no float copy of a projection left
    with torch.no_grad():
        want = dequantized_copy(model, 4, 16)(ids).logits
        fp32 = model(ids).logits
    got = plan(ids).logits
    scale = want.abs().max().item()
    assert (got - want).abs().max().item() <= 2e-2 * scale
    assert (got - fp32).abs().max().item() > 2e-2 * scale  # the int4 weights' own error: they were quantized


@pytest.mark.parametrize(
    ("family", "after"),
    [
        ("Cohere", dict(logit_scale=0.5)),
        ("Granite", dict(logits_scaling=4.0)),
        ("Gemma2", dict(final_logit_softcapping=30.0)),
    ],
)
def test_the_logits_linear_stays_int8_where_the_logits_are_scaled_after_it(family: str, after: dict) -> None:
    config = getattr(transformers, f"{family}Config")(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, **after,
    )  # fmt: skip
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    plan = opcore.graph.capture(model, (_ids(),), weights="int4", measure=False)
    bits = {str(n.args[1]): n.args[5] for n in plan.graph.nodes if n.op == "linear_wq"}
    assert [b for name, b in bits.items() if "lm_head" in name] == [8], bits
    assert sorted(b for name, b in bits.items() if "lm_head" not in name) == [4] * 7, bits


def test_exclude_keeps_the_named_weights_float() -> None:
    plan = opcore.graph.capture(llama(), (_ids(),), weights="int8", exclude=("lm_head", "*.mlp.*"), measure=False)
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("linear_wq") == 2 * 4  # q k v o per layer
    assert any("7 kept float (exclude=['lm_head', '*.mlp.*']" in note for note in plan.notes), plan.notes
    kept = [n for n in plan.graph.nodes if n.op == "linear"]
    assert len(kept) == 1 and "lm_head" in str(kept[0].args[1])  # the MLPs' linears are fused (gated_mlp)


def test_tied_table_and_lm_head_share_one_set_of_codes() -> None:
    model = llama(tied=True)
    ids = _ids()
    plan = opcore.graph.capture(model, (ids,), weights="int8", measure=False)
    gather = next(n for n in plan.graph.nodes if n.op == "embedding_wq")
    lm_head = next(n for n in plan.graph.nodes if n.op == "linear_wq" and n.args[1] == gather.args[1])
    assert lm_head.args[2] == gather.args[2]  # the same scales: the table's rows are the lm_head's channels
    assert not _float_weights(plan), _float_weights(plan)  # neither name of the tied table keeps the float copy
    with torch.no_grad():
        want = dequantized_copy(model, 8, -1)(ids).logits
    got = plan(ids).logits
    assert (got - want).abs().max().item() <= 2e-2 * want.abs().max().item()


def test_a_tied_table_and_lm_head_share_int8_codes_whatever_the_int4_group() -> None:
    # the logits' linear is int8 per channel under any int4 group: one set of codes with the table
    # (the table's per-row codes under the lm_head's name were once read as grouped: a ShapeError)
    model = llama(tied=True)
    ids = _ids()
    plan = opcore.graph.capture(model, (ids,), weights="int4", group_size=32, measure=False)
    tables = {str(n.args[1]) for n in plan.graph.nodes if n.op == "embedding_wq"}
    heads = {str(n.args[1]) for n in plan.graph.nodes if n.op == "linear_wq" and n.args[5] == 8}
    assert len(tables) == 1 and heads == tables, (tables, heads)
    with torch.no_grad():
        want = dequantized_copy(model, 4, 32)(ids).logits
    got = plan(ids).logits
    assert (got - want).abs().max().item() <= 2e-2 * want.abs().max().item()


def test_tied_float_plan_holds_the_table_once(tmp_path: pathlib.Path) -> None:
    model = llama(tied=True)
    plan = opcore.graph.capture(model, (_ids(),), measure=False)
    tables = [n for n in plan.graph.constants if plan.constants[n].shape == (VOCAB, 64)]
    assert len(tables) == 1, tables  # torch.export lifts the tied weight twice; the graph reads one
    plan.save(tmp_path)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() counts a tie once
    assert (tmp_path / "weights.safetensors").stat().st_size < weights * 1.05


def test_exclude_keeps_an_embedding_float() -> None:
    plan = opcore.graph.capture(llama(), (_ids(),), weights="int8", exclude=("*embed_tokens*",), measure=False)
    ops = [n.op for n in plan.graph.nodes]
    assert "embedding" in ops and "embedding_wq" not in ops


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"weights": "int3"}, "weights"),
        ({"weights": "int4", "group_size": 0}, "group_size"),
        ({"weights": "int8", "route": "torch"}, "route"),
        ({"group_size": 64}, "group_size"),  # without weights= it would be ignored
        ({"exclude": ("lm_head.weight",)}, "exclude"),
        ({"weights": "int8", "exclude": 5}, "exclude"),
        ({"weights": "int8", "exclude": [None]}, "exclude"),
    ],
)
def test_bad_weight_options_are_clear_errors(kwargs: dict, arg: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        opcore.graph.capture(llama(), (_ids(),), measure=False, **kwargs)
    assert caught.value.arg == arg


def test_one_pattern_given_as_a_string_is_one_pattern() -> None:
    """exclude="*embed_tokens*" is that pattern (its letters, each a pattern, excluded nothing)."""
    plan = opcore.graph.capture(llama(), (_ids(),), weights="int8", exclude="*embed_tokens*", measure=False)
    ops = [n.op for n in plan.graph.nodes]
    assert "embedding" in ops and "embedding_wq" not in ops and "linear_wq" in ops


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

    def size(folder: pathlib.Path, *patterns: str) -> int:
        return sum(f.stat().st_size for pattern in patterns for f in folder.rglob(pattern) if f.is_file())

    # the weights (the plan's safetensors; the partitions' files refer to its bytes): 1 byte a weight
    # and a scale a row
    weights = ("weights.safetensors", "*.bin", "*.onnx.data")
    assert size(tmp_path / "int8", *weights) < 0.3 * size(tmp_path / "float", *weights)
    partition_files = size(tmp_path / "int8", "*.bin", "*.onnx.data")
    assert plan.partitions and partition_files < 0.05 * size(tmp_path / "int8", *weights)
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


def test_capture_lm_compares_decode_runtimes_when_the_codes_fit_the_measuring_bound(monkeypatch) -> None:
    """measure=None: a model whose float weights exceed MEASURE_BYTES is planned by the estimated
    rule, but its quantized plan (int8 bytes) is small enough to time each runtime's decode step."""
    from opcore.graph import lm_capture

    model = llama()
    floats = lm_capture._weight_bytes(model)
    stored = lm_capture._stored_bytes(model)
    assert stored < floats / 3
    monkeypatch.setattr(lm_capture, "MEASURE_BYTES", (stored + floats) // 2)
    timed: list[list[str]] = []

    def timer(runners: dict) -> dict[str, float]:  # the comparison's verdicts, without the seconds it takes
        timed.append(list(runners))
        return {name: float(i) for i, name in enumerate(runners)}  # the ranked plan first: it stays

    monkeypatch.setattr(lm_capture, "interleaved", timer)
    lm = opcore.graph.capture_lm(model, max_length=8, weights="int8", prefill_partitions=False)
    assert timed and all(names[0] == "ranked" for names in timed), timed
    assert lm.decode_plan.notes[0].startswith("decode step measured at capture"), lm.decode_plan.notes[:2]


def test_a_quantized_prefill_times_the_decode_step_s_runtime_against_the_torch_route(monkeypatch) -> None:
    """Where only the decode step is measured (the float weights above MEASURE_BYTES, the codes
    below), a decode step won by a runtime alone has the prefill compared too: the torch route
    against that runtime's partitions, the ranked partitions not built."""
    from opcore.graph import lm_capture
    from opcore.graph.partition import compilers

    if "onnxruntime" not in compilers():
        pytest.skip("onnxruntime is not installed: no runtime alone to favour")
    model = llama()
    floats, stored = lm_capture._weight_bytes(model), lm_capture._stored_bytes(model)
    monkeypatch.setattr(lm_capture, "MEASURE_BYTES", (stored + floats) // 2)
    seen: list[list[str]] = []

    def timer(runners: dict) -> dict[str, float]:
        seen.append(list(runners))
        return {label: 0.5 if label.startswith("onnxruntime alone") else 1.0 for label in runners}

    monkeypatch.setattr(lm_capture, "interleaved", timer)
    lm = opcore.graph.capture_lm(model, max_length=16, weights="int8")
    assert lm.decode_plan.notes[0].endswith("runs onnxruntime alone"), lm.decode_plan.notes[0]
    assert seen[-1] == ["torch route", "onnxruntime alone"], seen
    assert lm.prefill_plan.notes[0].endswith("runs onnxruntime alone"), lm.prefill_plan.notes[0]
    ids = _ids(8)
    monkeypatch.undo()
    on_onnxruntime = opcore.graph.capture_lm(
        model, max_length=16, weights="int8", backends=("onnxruntime", "cpu"), prefill_partitions=True, measure=False
    )
    # the plans the comparison chose are that runtime's: the same tokens as planning on it directly
    want = on_onnxruntime.generate(ids, max_new_tokens=6, min_new_tokens=6)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, min_new_tokens=6), want)
