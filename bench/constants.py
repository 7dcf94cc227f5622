"""What live torch constants cost a resolved op: the version-counter watch (docs/reliability.md).

A resolved op whose kernel prepared its own form of torch constants compares each constant's
``_version`` before every call, and prepares again after an in-place update; a kernel declared
``live_constants`` (the cpu and cuda torch kernels) reads them in place and is not watched.
This prints, per backend that prepares ``linear``'s constants, the median call of the resolved
op with the watch and of the same op resolved without it (the watch switched off for this
measurement only), next to ``F.linear``, interleaved so that the machine's load hits all alike;
and the cost of one re-prepare.

    python bench/constants.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import torch
from _timing import medians, table

import opcore
import opcore.resolved as resolved_module


def _unwatched(*args: torch.Tensor, backend: str) -> opcore.ResolvedOp:
    """The same resolve with no constant watched: what a call cost before the watch."""
    original = resolved_module._torch_tensors
    resolved_module._torch_tensors = lambda value: ()  # type: ignore[assignment]
    try:
        return opcore.resolve("linear", *args, constants=("w", "b"), backend=backend)
    finally:
        resolved_module._torch_tensors = original  # type: ignore[assignment]


def main() -> None:
    torch.set_num_threads(1)
    x, w, b = torch.randn(2, 8), torch.randn(8, 8), torch.randn(8)
    backends = [r.name for r in opcore.backends() if r.ok and r.name in ("cpu", "onnxruntime", "openvino")]
    rows = []
    for backend in backends:
        watched = opcore.resolve("linear", x, w, b, constants=("w", "b"), backend=backend)
        if not watched.prepared:
            continue
        unwatched = _unwatched(x, w, b, backend=backend)
        times = medians(
            {
                "F.linear": lambda: torch.nn.functional.linear(x, w, b),
                "watched": lambda: watched(x),  # noqa: B023 (each backend's cases run before the next)
                "unwatched": lambda: unwatched(x),  # noqa: B023
            }
        )
        started = time.perf_counter()
        for _ in range(20):
            w.mul_(1.0)  # an in-place update: the next call prepares again
            watched(x)
        reprepare = (time.perf_counter() - started) / 20
        us = {name: t * 1e6 for name, t in times.items()}
        rows.append(
            (
                backend,
                f"{watched.kernel.title if watched.kernel else '-'}{'' if watched.watched else ' (live)'}",
                f"{us['F.linear']:.2f}",
                f"{us['unwatched']:.2f}",
                f"{us['watched']:.2f}",
                f"{us['watched'] - us['unwatched']:+.2f}",
                f"{reprepare * 1e6:.0f}",
            )
        )
    header = ("backend", "kernel", "F.linear us", "unwatched us", "watched us", "watch us", "update+call us")
    print("resolved linear(x), constants w (8x8), b (8) as torch tensors, 1 thread; medians of 31 interleaved rounds")
    print("(live): a kernel that reads the constants in place is never watched; its two columns are the same op")
    print(table(header, rows))
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
