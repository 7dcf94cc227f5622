"""The main job of `make demo`: discover every backend, print `opcore doctor`, then run a set of
ops on each loaded backend and compare each result with the reference backend, capture a small
decoder (transformers, random weights from a config) as a plan, and generate text with it
(``opcore.graph.capture_lm``) against transformers' own ``generate``.

    python examples/demo.py
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy

import opcore
from opcore.cli import main as opcore_cli

rng = numpy.random.default_rng(0)


def f32(*shape: int) -> numpy.ndarray:
    return rng.standard_normal(shape).astype(numpy.float32)


# (op, args, attributes): small, but every family of ops
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("linear", (f32(4, 64), f32(32, 64), f32(32)), {}),
    ("linear_relu", (f32(4, 64), f32(32, 64), f32(32)), {}),
    ("linear_gelu", (f32(4, 64), f32(32, 64), None), {"approximate": "tanh"}),
    ("gated_mlp", (f32(4, 64), f32(128, 64), f32(128, 64), f32(64, 128)), {}),
    ("matmul", (f32(2, 4, 8), f32(8, 3)), {}),
    ("add", (f32(4, 8), f32(8)), {"alpha": 2}),
    ("gelu", (f32(4, 8),), {}),
    ("silu", (f32(4, 8),), {}),
    ("softmax", (f32(4, 8),), {"dim": -1}),
    ("layer_norm", (f32(4, 8), (8,), f32(8), f32(8)), {}),
    ("rms_norm", (f32(4, 8), (8,), f32(8)), {"eps": 1e-6}),
    ("embedding", (numpy.array([[0, 2], [3, 1]]), f32(4, 8)), {}),
    ("conv2d", (f32(1, 3, 8, 8), f32(4, 3, 3, 3), f32(4)), {"padding": 1}),
    ("scaled_dot_product_attention", (f32(1, 2, 5, 8), f32(1, 2, 5, 8), f32(1, 2, 5, 8)), {"is_causal": True}),
    ("transpose", (f32(2, 3, 4), 0, 2), {}),
    ("cat", ([f32(2, 3), f32(1, 3)],), {"dim": 0}),
]


def main() -> None:
    print("$ opcore doctor")
    opcore_cli(["doctor"])
    loaded = [r.name for r in opcore.backends() if r.ok]
    print(f"\nRunning {len(CALLS)} ops on each loaded backend ({', '.join(loaded)}), numpy float32 inputs,")
    print("each pinned with backend=..., compared with the reference backend:\n")
    header = f"{'op':<30}" + "".join(f"{name:>16}" for name in loaded)
    print(header)
    print("-" * len(header))
    for op, args, attrs in CALLS:
        expected = opcore.run(op, *args, backend="reference", **attrs)
        cells = []
        for name in loaded:
            explanation = opcore.explain(op, *args, backend=name, **attrs)
            if explanation.chosen is None:
                cells.append("declines")
                continue
            started = time.perf_counter()
            try:
                result = opcore.run(op, *args, backend=name, **attrs)
            except opcore.NoKernelError:  # e.g. a decomposition whose parts this backend lacks
                cells.append("declines")
                continue
            elapsed_ms = (time.perf_counter() - started) * 1e3
            error = float(numpy.max(numpy.abs(numpy.asarray(result, dtype=numpy.float64) - expected), initial=0.0))
            cells.append(f"ok {error:.0e} {elapsed_ms:4.1f}ms")
        print(f"{op:<30}" + "".join(f"{cell:>16}" for cell in cells))
    print("\n(ok <max abs error vs reference> <first-call time, model build included>)")
    x, w = f32(32, 4096), f32(4096, 4096)
    print("\n$ opcore.explain('linear_relu', x[32x4096], w[4096x4096])")
    print(opcore.explain("linear_relu", x, w))
    capture_and_generate()


def capture_and_generate() -> None:
    """A Llama-style decoder from a config (2 layers, hidden 256, vocabulary 2000, random weights):
    one forward captured as a plan, then greedy generation and beam search against transformers'
    generate."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import opcore.graph

    torch.manual_seed(0)
    threads = 1
    torch.set_num_threads(threads)
    os.environ["OPCORE_RUNTIME_THREADS"] = str(threads)  # the graph runtimes get the same core as torch
    config = LlamaConfig(
        vocab_size=2000, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)  # random logits this far apart make greedy choices well separated
    ids = torch.randint(0, 2000, (1, 64), generator=torch.Generator().manual_seed(1))

    print("\n$ plan = opcore.graph.capture(model, (ids,))      # a LlamaForCausalLM forward, default arguments")
    plan = opcore.graph.capture(model, (ids,))
    with torch.no_grad():
        diff = (plan(ids).logits - model(ids, use_cache=False).logits).abs().max().item()
    print(f"{plan.summary()}\nmax |plan - eager| = {diff:.1e}")

    new = 64
    print(f"\n$ lm = opcore.graph.capture_lm(model, max_length=256); lm.generate(ids, max_new_tokens={new})")
    started = time.perf_counter()
    lm = opcore.graph.capture_lm(model, max_length=256)
    print(f"captured in {time.perf_counter() - started:.1f} s; decode: {lm.decode_plan.summary()}")
    print(f"torch and runtime threads {threads}, load {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    timings: dict[str, float] = {}
    outputs: dict[str, Any] = {}
    for label, call in (
        ("eager", lambda: model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)),
        ("opcore", lambda: lm.generate(ids, max_new_tokens=new, min_new_tokens=new)),
    ):
        call()  # warm
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            outputs[label] = call()
            best = min(best, time.perf_counter() - started)
        timings[label] = best
    same = torch.equal(outputs["eager"], outputs["opcore"])
    for label, seconds in timings.items():
        print(f"{label:<8} {new / seconds:7.1f} tokens/s (prompt 64, {new} new tokens, whole generate call)")
    print(f"opcore / eager: {timings['eager'] / timings['opcore']:.2f}x; greedy tokens identical: {same}")

    print("\n$ lm4 = opcore.graph.capture_lm(model, max_length=256, batch_size=4); lm4.generate(ids, num_beams=4)")
    lm4 = opcore.graph.capture_lm(model, max_length=256, batch_size=4)  # a cache row per beam
    searched: dict[str, Any] = {}
    for label, search in (
        ("eager", lambda: model.generate(ids, max_new_tokens=32, num_beams=4, pad_token_id=0)),
        ("opcore", lambda: lm4.generate(ids, max_new_tokens=32, num_beams=4, pad_token_id=0)),
    ):
        search()  # warm
        timings[label] = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            searched[label] = search()
            timings[label] = min(timings[label], time.perf_counter() - started)
    same = torch.equal(searched["eager"], searched["opcore"])
    print(
        f"beam search, 4 beams, 32 new tokens: eager {timings['eager'] * 1e3:.0f} ms, opcore "
        f"{timings['opcore'] * 1e3:.0f} ms ({timings['eager'] / timings['opcore']:.2f}x); sequences identical: {same}"
    )


if __name__ == "__main__":
    main()
