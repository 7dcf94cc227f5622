"""Where a quantized plan's logits error comes from: the weight error alone, each runtime, each format.

The bench's Qwen2-0.5B shape (bench/generate.py, random weights, logits scaled 16x) at --layers
layers (default 2; 24 is the whole shape), one prompt of --positions random tokens, every position's
logits against the fp32 eager model's: max relative error, top-1 agreement, mean KL(fp32 || variant),
and the fp32 logits' median top-1 margin (how near their ties are). Variants (--variants):

  float-plan        capture() without weights: the floor of the runtimes' float error
  deq               the eager model with every linear's weight quantized and dequantized (int8 per
                    channel; the tied table int8 per row): the weight error alone
  deq-headf         the same, the lm_head kept float (untied)
  deq-embf-headf    the same, the table and the lm_head kept float
  deq:g=G[:eg=E]    the linears in groups of G (the table in groups of E; default per row)
  plan:BACKEND      capture(weights="int8") with backends=(BACKEND, "cpu"); ONNX Runtime's accuracy
                    level is OPCORE_ORT_WQ_ACCURACY (default 4), read when its kernels are imported

Accuracy figures need no quiet machine.

    python bench/quant_accuracy.py                                   # 2 layers, every variant
    python bench/quant_accuracy.py --layers 24 --variants deq,plan:openvino,plan:onnxruntime
    OPCORE_ORT_WQ_ACCURACY=0 python bench/quant_accuracy.py --variants plan:onnxruntime
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(__file__))
import generate

VARIANTS = "float-plan,deq,deq-headf,deq-embf-headf,deq:g=128,plan:openvino,plan:onnxruntime"


def dequantized_copy(model: Any, options: dict[str, str], head_float: bool, table_float: bool) -> Any:
    """The model with its matrices quantized and dequantized as ``options`` say (g: the linears'
    group, eg: the table's; -1 per channel / row)."""
    from opcore.quantize import quantize_weight

    def rounded(weight: torch.Tensor, group: int) -> torch.Tensor:
        return torch.as_tensor(quantize_weight(weight.detach(), bits=8, group_size=group).dequantize()).float()

    other = copy.deepcopy(model)
    with torch.no_grad():
        for name, module in other.named_modules():
            if isinstance(module, torch.nn.Linear) and name != "lm_head":
                module.weight.copy_(rounded(module.weight, int(options.get("g", -1))))
        table = other.get_input_embeddings()
        if head_float:  # untied: the lm_head keeps the float table
            other.lm_head.weight = torch.nn.Parameter(table.weight.detach().clone())
        if not table_float:
            table.weight.copy_(rounded(table.weight, int(options.get("eg", -1))))
        elif not head_float:
            other.lm_head.weight = torch.nn.Parameter(rounded(table.weight, int(options.get("eg", -1))))
    return other


def logits_of(variant: str, model: Any, ids: torch.Tensor) -> torch.Tensor:
    import opcore.graph

    kind, *rest = variant.split(":")
    with torch.no_grad():
        if kind == "float-plan":
            plan = opcore.graph.capture(model, (ids,), {"use_cache": False}, measure=False)
            return plan(ids, use_cache=False).logits
        if kind.startswith("deq"):
            options = dict(part.split("=", 1) for part in rest)
            other = dequantized_copy(model, options, "headf" in kind, "embf" in kind)
            return other(ids, use_cache=False).logits
        if kind == "plan" and rest:
            plan = opcore.graph.capture(
                model, (ids,), {"use_cache": False}, weights="int8", measure=False, backends=(rest[0], "cpu")
            )
            return plan(ids, use_cache=False).logits
    raise SystemExit(f"unknown variant {variant!r}: expected one of {VARIANTS} (deq:g=G:eg=E, plan:BACKEND)")


def compare(got: torch.Tensor, want: torch.Tensor) -> str:
    got, want = got.double(), want.double()
    error = float((got - want).abs().max() / want.abs().max())
    agree = float((got.argmax(-1) == want.argmax(-1)).double().mean())
    kl = torch.nn.functional.kl_div(got.log_softmax(-1), want.log_softmax(-1), log_target=True, reduction="none")
    return f"max rel. error {error:.2e}  top-1 {agree:.4f}  KL {float(kl.sum(-1).mean()):.2e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2, help="decoder layers of the 0.5B shape (default 2; 24: all)")
    parser.add_argument("--positions", type=int, default=512, help="prompt length (default 512)")
    parser.add_argument("--variants", default=VARIANTS, help=f"comma-separated (default {VARIANTS})")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    full = generate.SHAPES["0.5b"]
    shape = generate.Shape(
        "0.5b", full.title, full.family, full.hidden, options.layers, full.heads, full.kv_heads,
        full.intermediate, full.vocab, full.tied, full.rope_theta,
    )  # fmt: skip
    model = shape.build(options.positions)
    ids = generate.prompt_ids(shape.vocab, 1, options.positions)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
    top = want.double().topk(2, -1).values
    margin = float((top[..., 0] - top[..., 1]).median())
    level = os.environ.get("OPCORE_ORT_WQ_ACCURACY", "4 (default)")
    print(
        f"Qwen2-0.5B shape, {options.layers} layers, {options.positions} positions; fp32 logits: std "
        f"{float(want.std()):.2f}, median top-1 margin {margin:.3f}; ONNX Runtime accuracy_level {level}"
    )
    for variant in options.variants.split(","):
        started = time.perf_counter()
        got = logits_of(variant, model, ids)
        print(f"  {variant:24s} {compare(got, want)}  ({time.perf_counter() - started:.0f} s)", flush=True)
        del got
        gc.collect()
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
