"""A session's decode step replayed as one CUDA graph (``capture_lm(..., device="cuda")``).

A decode step has the same shapes at every token: ids (batch, 1), positions (batch, 1), the cache
slot it writes (1,), the attention mask (batch, max_length) and the session's cache buffers. Its
first call on a session warms the decode plan's steps up on a side stream and captures them into a
``torch.cuda.CUDAGraph`` that reads the session's own buffers (mask, positions, cache: no copy of
them, the graph writes the cache in place as the steps do); every later step copies the token ids
and the slot into the graph's two small input buffers and replays, so one launch replaces a Python
call per node. The warm-up computes the step itself (it writes the same keys and values into the
same slot the replay then writes again: the cache holds what one step would have written).

One graph per session (each holds its own cache); the logits are cloned out of the graph's output
buffer (the next replay overwrites it). Where capturing fails (a step that reads a value on the
host, a kernel CUDA graphs refuse), the session runs its decode steps node by node and the decode
plan's notes say why; ``LanguageModel.cuda_graph = False`` turns replay off.

>>> lm = opcore.graph.capture_lm(model.cuda(), device="cuda")   # doctest: +SKIP
>>> lm.generate(ids.cuda(), max_new_tokens=32)    # decode steps replayed  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["DecodeGraph", "WARMUP_RUNS"]

WARMUP_RUNS = 2  # cuBLAS/cuDNN pick and allocate their workspaces before capture, not during it


class DecodeGraph:
    """``program``'s decode step captured over one session's buffers: ``positions`` (batch, 1) and
    ``mask`` and ``state`` are read (and the state written) where they are; ids and the slot are
    copied in per call."""

    def __init__(self, program: Any, ids: Any, positions: Any, at: int, mask: Any, state: Sequence[Any]) -> None:
        import torch

        self.ids = ids.clone()
        self.slot = torch.full((1,), at, dtype=torch.long, device=ids.device)
        inputs = [self.ids, positions, self.slot, mask, *state]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                program.run(inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = program.run(inputs)[0]
        self.replays = 0

    def __call__(self, ids: Any, at: int) -> Any:
        """The step's logits for ``ids`` (batch, 1) written at cache slot ``at``."""
        self.ids.copy_(ids)
        self.slot.fill_(at)
        self.graph.replay()
        self.replays += 1
        return self.logits.clone()


def capture_failed(error: BaseException) -> str:
    """The note a decode plan keeps when its CUDA graph could not be captured."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return (
        f"decode CUDA graph not captured ({type(error).__name__}{': ' + text if text else ''}): the decode "
        "steps run node by node"
    )
