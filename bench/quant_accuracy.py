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
  plan:BACKEND[:W]  capture(weights=W) with backends=(BACKEND, "cpu"), W int8 (default) or int4
                    (groups of 128 as capture's default; the table and lm_head int8); ONNX Runtime's accuracy
                    level is OPCORE_ORT_WQ_ACCURACY (default 4), read when its kernels are imported

--train N: the same figures for a model that has learnt something, which a random one has not (its
top two logits are a median 1.3-1.5 units apart: any rounding flips near-ties). The model (--model:
a shape of bench/generate.py, with --layers layers) is trained N steps (AdamW, batches of 8 x 128
tokens) on text from a fixed random Markov chain: each token has four successors, taken with
probabilities 0.8, 0.1, 0.06 and 0.04, so a trained model's top-1 is usually clear, as a language
model's is on text it knows. The prompt is then a new sequence of the same chain. Nothing can be
downloaded here; a trained checkpoint's figures are the ones to judge quantization by, and this is
the nearest the bench can build (docs/quantized.md).

Accuracy figures need no quiet machine.

    python bench/quant_accuracy.py                                   # 2 layers, every variant
    python bench/quant_accuracy.py --layers 24 --variants deq,plan:openvino,plan:onnxruntime
    python bench/quant_accuracy.py --model small --train 300 --variants deq,plan:openvino,plan:onnxruntime
    OPCORE_ORT_WQ_ACCURACY=0 python bench/quant_accuracy.py --variants plan:onnxruntime
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
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
        if not generate.tied(other):  # its own lm_head: int8 per channel unless kept float, as capture does
            if not table_float:
                table.weight.copy_(rounded(table.weight, int(options.get("eg", -1))))
            if not head_float:
                other.lm_head.weight.copy_(rounded(other.lm_head.weight, -1))
            return other
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
            width = rest[1] if len(rest) > 1 else "int8"
            plan = opcore.graph.capture(
                model, (ids,), {"use_cache": False}, weights=width, measure=False, backends=(rest[0], "cpu")
            )
            return plan(ids, use_cache=False).logits
    raise SystemExit(f"unknown variant {variant!r}: expected one of {VARIANTS} (deq:g=G:eg=E, plan:BACKEND[:W])")


SUCCESSORS = (0.8, 0.1, 0.06, 0.04)  # each token's next-token probabilities in the training chain


class Chain:
    """A fixed random Markov chain over tokens 3..vocab-1: each token's four successors (seeded)."""

    def __init__(self, vocab: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.next = torch.randint(3, vocab, (vocab, len(SUCCESSORS)), generator=generator)
        self.probabilities = torch.tensor(SUCCESSORS)
        self.generator = generator

    def sample(self, batch: int, length: int) -> torch.Tensor:
        tokens = torch.empty(batch, length, dtype=torch.long)
        tokens[:, 0] = torch.randint(3, self.vocab, (batch,), generator=self.generator)
        for position in range(1, length):
            pick = torch.multinomial(self.probabilities.expand(batch, -1), 1, generator=self.generator)[:, 0]
            tokens[:, position] = self.next[tokens[:, position - 1], pick]
        return tokens


def train(model: Any, chain: Chain, steps: int, batch: int = 8, length: int = 128) -> float:
    """``steps`` of AdamW on the chain's text (next-token loss); the last step's loss."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        ids = chain.sample(batch, length)
        loss = model(ids, labels=ids, use_cache=False).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    return float(loss.detach())


def compare(got: torch.Tensor, want: torch.Tensor) -> str:
    got, want = got.double(), want.double()
    error = float((got - want).abs().max() / want.abs().max())
    agree = float((got.argmax(-1) == want.argmax(-1)).double().mean())
    kl = torch.nn.functional.kl_div(got.log_softmax(-1), want.log_softmax(-1), log_target=True, reduction="none")
    return f"max rel. error {error:.2e}  top-1 {agree:.4f}  KL {float(kl.sum(-1).mean()):.2e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (default 2; 24: all of 0.5b)")
    parser.add_argument("--positions", type=int, default=512, help="prompt length (default 512)")
    parser.add_argument("--variants", default=VARIANTS, help=f"comma-separated (default {VARIANTS})")
    parser.add_argument("--model", default="0.5b", choices=sorted(generate.SHAPES), help="the shape (default 0.5b)")
    parser.add_argument("--train", type=int, default=0, help="train this many steps on a Markov chain's text first")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    full = generate.SHAPES[options.model]
    shape = generate.Shape(
        full.name, full.title, full.family, full.hidden, options.layers, full.heads, full.kv_heads,
        full.intermediate, full.vocab, full.tied, full.rope_theta,
    )  # fmt: skip
    model = shape.build(options.positions)
    trained = ""
    if options.train:
        generate.scale_logits(model, 1 / generate.LOGIT_SCALE)  # trained from the model's own init
        chain = Chain(shape.vocab)
        started = time.perf_counter()
        loss = train(model, chain, options.train)
        ids = chain.sample(1, options.positions)
        floor = -sum(p * math.log(p) for p in SUCCESSORS)
        trained = (
            f"; trained {options.train} steps in {time.perf_counter() - started:.0f} s, last loss {loss:.3f} "
            f"(the chain's entropy: {floor:.3f}), the prompt a new sequence of the chain"
        )
    else:
        ids = generate.prompt_ids(shape.vocab, 1, options.positions)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
    top = want.double().topk(2, -1).values
    margin = float((top[..., 0] - top[..., 1]).median())
    level = os.environ.get("OPCORE_ORT_WQ_ACCURACY", "4 (default)")
    print(
        f"{shape.title.split(' (')[0]}, {options.layers} layers, {options.positions} positions{trained}; fp32 "
        f"logits: std {float(want.std()):.2f}, median top-1 margin {margin:.3f}; ONNX Runtime accuracy_level {level}"
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
