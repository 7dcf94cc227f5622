"""The main job of `make demo`: discover every backend, print `opcore doctor`, then run a set of
ops on each loaded backend and compare each result with the reference backend.

    python examples/demo.py
"""

from __future__ import annotations

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


if __name__ == "__main__":
    main()
