"""opcore's cuda backend against PyTorch eager on a GPU: linear_relu and attention.

linear_relu (fp16, bf16, fp32; a few M x K x N): eager ``torch.relu(F.linear(x, w, b))`` against
``opcore.run("linear_relu", x, w, b)`` (dispatch included) and ``opcore.resolve(...,
constants=("w", "b"))`` (decided once; cuda/cublaslt: torch._addmm_activation, relu as a cuBLASLt
epilogue). Attention (fp16, bf16; causal and not): eager ``F.scaled_dot_product_attention``
against ``opcore.run`` and a resolved op, with the SDPA backend torch picks for the inputs.

Medians from torch.utils.benchmark.Timer.blocked_autorange(), whose timer synchronises CUDA at
every measurement; the cases take turns for a few rounds and the median of the rounds is shown.
Without a usable GPU it says why and exits 0 (nothing to measure).

    python bench/cuda.py
    python bench/cuda.py --rounds 5 --min-run-time 0.5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

sys.path.insert(0, os.path.dirname(__file__))
from _gpu import no_gpu_reason
from _timing import table

LINEAR_SHAPES = [(1, 4096, 4096), (32, 4096, 4096), (512, 4096, 4096), (4096, 4096, 11008)]
LINEAR_DTYPES = ["float16", "bfloat16", "float32"]
# (batch, heads, sequence, head dim)
ATTENTION_SHAPES = [(8, 16, 1024, 64), (1, 32, 4096, 128)]
ATTENTION_DTYPES = ["float16", "bfloat16"]


def median_us(fn: Callable[[], object], min_run_time: float) -> float:
    from torch.utils.benchmark import Timer

    return Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median * 1e6


def interleaved(cases: Mapping[str, Callable[[], object]], rounds: int, min_run_time: float) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(median_us(fn, min_run_time))
    return {name: statistics.median(values) for name, values in samples.items()}


def eager_linear_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    return torch.relu(F.linear(x, w, b))


def linear_relu_rows(rounds: int, min_run_time: float) -> list[tuple[str, ...]]:
    import torch

    import opcore

    rows: list[tuple[str, ...]] = []
    for dtype in LINEAR_DTYPES:
        kind = getattr(torch, dtype)
        for m, k, n in LINEAR_SHAPES:
            generator = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(m, k, generator=generator, device="cuda").to(kind)
            w = (torch.randn(n, k, generator=generator, device="cuda") / k**0.5).to(kind)
            b = torch.randn(n, generator=generator, device="cuda").to(kind)
            resolved = opcore.resolve("linear_relu", x, w, b, constants=("w", "b"))
            # partials, not closures: each case keeps this iteration's tensors
            cases: dict[str, Callable[[], object]] = {
                "eager": partial(eager_linear_relu, x, w, b),
                "run": partial(opcore.run, "linear_relu", x, w, b),
                "resolved": partial(resolved, x),
            }
            us = interleaved(cases, rounds, min_run_time)
            rows.append(
                (
                    "linear_relu",
                    dtype,
                    f"{m}x{k}x{n}",
                    f"{us['eager']:.1f}",
                    f"{us['run']:.1f}",
                    f"{us['resolved']:.1f}",
                    f"{us['eager'] / us['run']:.2f}x",
                    f"{us['eager'] / us['resolved']:.2f}x",
                    resolved.kernel.title if resolved.kernel else "decomposition",
                )
            )
    return rows


def sdpa_backend(q: torch.Tensor, causal: bool) -> str:
    """The backend torch's SDPA picks for these inputs (flash, efficient, cudnn, math), or "?"."""
    import torch

    try:
        choice = torch._fused_sdp_choice(q, q, q, None, 0.0, causal)
        return torch.nn.attention.SDPBackend(choice).name.lower()
    except Exception:  # a private torch function: its absence must not stop the benchmark
        return "?"


def attention_rows(rounds: int, min_run_time: float) -> list[tuple[str, ...]]:
    import torch
    import torch.nn.functional as F

    import opcore

    rows: list[tuple[str, ...]] = []
    for dtype in ATTENTION_DTYPES:
        kind = getattr(torch, dtype)
        for shape in ATTENTION_SHAPES:
            q, k, v = (torch.randn(*shape, device="cuda", dtype=kind) for _ in range(3))
            for causal in (False, True):
                resolved = opcore.resolve("scaled_dot_product_attention", q, k, v, is_causal=causal)
                cases: dict[str, Callable[[], object]] = {
                    "eager": partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
                    "run": partial(opcore.run, "scaled_dot_product_attention", q, k, v, is_causal=causal),
                    "resolved": partial(resolved, q, k, v),
                }
                us = interleaved(cases, rounds, min_run_time)
                rows.append(
                    (
                        "attention" + (" causal" if causal else ""),
                        dtype,
                        "x".join(map(str, shape)),
                        f"{us['eager']:.1f}",
                        f"{us['run']:.1f}",
                        f"{us['resolved']:.1f}",
                        f"{us['eager'] / us['run']:.2f}x",
                        f"{us['eager'] / us['resolved']:.2f}x",
                        f"{resolved.kernel.title if resolved.kernel else 'decomposition'} ({sdpa_backend(q, causal)})",
                    )
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per case (median shown)")
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds per blocked_autorange")
    options = parser.parse_args(argv)
    reason = no_gpu_reason()
    if reason is not None:
        print(f"bench/cuda.py: no GPU: {reason}; nothing to measure")
        return 0
    import torch

    print(
        f"{torch.cuda.get_device_name()} · torch {torch.__version__} (CUDA {torch.version.cuda}) · "
        f"TF32 matmul {torch.backends.cuda.matmul.allow_tf32} · medians of {options.rounds} rounds, us"
    )
    header = ("op", "dtype", "shape", "eager", "opcore run", "resolved", "run speedup", "resolved speedup", "kernel")
    rows = linear_relu_rows(options.rounds, options.min_run_time)
    rows += attention_rows(options.rounds, options.min_run_time)
    print(table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
