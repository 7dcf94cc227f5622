"""Dynamic NTK rotary embeddings (``rope_type="dynamic"``) computed in the graph.

transformers' ``dynamic_rope_update`` grows a rotary module's frequencies when a forward's positions
pass what it has cached: ``if max(position_ids) + 1 > self.max_seq_len_cached`` recomputes
``inv_freq`` for that length and keeps it (a Python branch on a tensor's value, which torch.export
cannot trace: capture and capture_lm failed on any model configured with dynamic scaling). Within
``traceable_dynamic_rope`` each such module computes its frequencies from the step's positions
instead, ``init(config, seq_len=max(position_ids) + 1)`` with transformers' own function for the
rope type (which takes a tensor length and keeps the original frequencies up to
``max_position_embeddings``), and runs its forward with them; nothing is kept between calls.

That is what a model fresh from its config computes at every step of one ``generate``: the length
only grows within it, so the frequencies it grew to are those of the current length. (transformers'
module keeps what it grew to across calls, so a second ``generate`` whose prompt is longer than
``max_position_embeddings`` but shorter than an earlier call's reach reuses the earlier frequencies;
opcore computes them afresh.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opcore.graph.module_patches import patched

__all__ = ["dynamic_rope_modules", "traceable_dynamic_rope"]


def _dynamic(rope_type: Any) -> bool:
    return isinstance(rope_type, str) and "dynamic" in rope_type


def dynamic_rope_modules(model: Any) -> list[Any]:
    """``model``'s rotary modules whose rope type (or one of its per-layer-type rope types) is dynamic
    and whose forward transformers' ``dynamic_rope_update`` wraps."""
    found = []
    for module in model.modules():
        kinds = getattr(module, "rope_type", None)
        kinds = kinds.values() if isinstance(kinds, dict) else [kinds]
        wrapped = hasattr(type(module).forward, "__wrapped__")
        if wrapped and any(_dynamic(kind) for kind in kinds) and hasattr(module, "config"):
            found.append(module)
    return found


def _forward(module: Any) -> Any:
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    forward = module.forward  # the class's (or one patched before this block: complex_rotary's)

    def call(x: Any, position_ids: Any, layer_type: Any = None, **kwargs: Any) -> Any:
        kinds = module.rope_type
        kind = kinds if layer_type is None else kinds[layer_type]
        if layer_type is not None:
            kwargs["layer_type"] = layer_type
        if not _dynamic(kind):
            return forward(x, position_ids, **kwargs)
        name = "inv_freq" if layer_type is None else f"{layer_type}_inv_freq"
        length = torch.max(position_ids) + 1
        grown, _ = ROPE_INIT_FUNCTIONS[kind](module.config, x.device, seq_len=length, layer_type=layer_type)
        # the wrapper sees a static rope type (no update of its own) and the forward these frequencies
        static = {**kinds, layer_type: "default"} if isinstance(kinds, dict) else "default"
        kept = getattr(module, name)  # a buffer: not in the module's __dict__, so not patched's to restore
        setattr(module, name, grown.to(kept.dtype))
        try:
            with patched([(module, "rope_type", static)]):
                return forward(x, position_ids, **kwargs)
        finally:
            setattr(module, name, kept)

    return call


@contextlib.contextmanager
def traceable_dynamic_rope(model: Any) -> Iterator[int]:
    """Within the block, ``model``'s dynamic rotary modules compute their frequencies from each call's
    positions in the graph (the module doc); restored after. Yields how many were changed."""
    modules = dynamic_rope_modules(model)
    with patched([(m, "forward", _forward(m)) for m in modules]) as count:
        yield count
