"""CUDA graph replay for static-shape cuda plans: the plan's steps captured once, replayed per call.

A cuda plan (``capture(..., device="cuda")``) runs every node on the cuda backend's kernels; with
static shapes, its first call warms the steps up on a side stream and captures them into a
``torch.cuda.CUDAGraph``; later calls copy the inputs into the captured buffers and replay, so one
launch replaces a Python call per node. Outputs are cloned out of the graph's buffers (the next
replay overwrites them). Inputs of other shapes than the first call's are an ArgumentError: capture
with ``dynamic_shapes`` for those (a plan with dynamic dims never replays).

>>> plan = opcore.graph.capture(model.cuda(), (x.cuda(),), device="cuda")   # doctest: +SKIP
>>> y = plan(x.cuda())      # first call: warm up and capture; then: replay  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["CudaReplay", "replay"]

WARMUP_RUNS = 2  # cuBLAS/cuDNN pick and allocate their workspaces before capture, not during it


class CudaReplay:
    """The plan's program captured into one CUDA graph, for inputs shaped like ``flat``."""

    def __init__(self, plan: Any, flat: Sequence[Any]) -> None:
        import torch

        self.signature = _signature(flat)
        self.inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in flat]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                plan.program.run(self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = plan.program.run(self.inputs)

    def __call__(self, flat: Sequence[Any]) -> list[Any]:
        import torch

        if _signature(flat) != self.signature:
            raise ArgumentError(
                op="Plan",
                arg="inputs",
                expected=f"the shapes of the first call, which the CUDA graph was captured for ({self.signature})",
                found=str(_signature(flat)),
                fix="capture with dynamic_shapes=... for inputs whose sizes change (such plans run without replay)",
            )
        for buffer, value in zip(self.inputs, flat):
            if isinstance(buffer, torch.Tensor):
                buffer.copy_(value)
        self.graph.replay()
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in self.outputs]


def _signature(flat: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((tuple(t.shape), str(t.dtype), str(t.device)) if hasattr(t, "shape") else t for t in flat)


def replay(plan: Any, flat: Sequence[Any]) -> list[Any]:
    """Run a static-shape cuda plan through its CUDA graph (captured on the first call)."""
    if plan._replay is None:
        plan._replay = CudaReplay(plan, flat)
    return plan._replay(flat)
