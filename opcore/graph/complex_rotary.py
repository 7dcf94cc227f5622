"""Rotary embeddings written with complex numbers, exported in real arithmetic.

Llama 4 and DeepSeek-V2 make their rotary frequencies with ``torch.polar`` (complex64) and turn q and
k into complex pairs (``view_as_complex``) to multiply them: opcore represents no complex dtype (nor
do ONNX Runtime's and OpenVINO's kernels take one). Within ``exportable_complex_rotary`` such a
model's rotary module returns the same frequencies as a real tensor of (cos, sin) pairs (..., k, 2),
scaled as the model scales them (its ``dynamic_rope_update`` kept), and its modeling module's
``apply_rotary_emb`` multiplies the pairs out: ``(a + ib)(c + is) = (ac - bs) + i(as + bc)``, in
float32 as the complex product is. Given back after the block.

>>> import torch
>>> q = torch.tensor([[[[1.0, 2.0]]]]); f = torch.tensor([[[[0.0, 1.0]]]])  # e^(i pi/2): a quarter turn
>>> real_product(q, f).tolist()
[[[[-2.0, 1.0]]]]
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

from opcore.graph.module_patches import modules_of, patched

__all__ = ["FAMILIES", "exportable_complex_rotary", "real_product"]

# modeling module -> (its rotary module's class, the dim of q and k its frequencies broadcast over)
FAMILIES: dict[str, tuple[str, int]] = {
    # q and k (batch, seq, heads, dim): modeling_llama4.apply_rotary_emb's freqs_cis[:, :, None, :]
    "transformers.models.llama4.modeling_llama4": ("Llama4TextRotaryEmbedding", 2),
    # q and k (batch, heads, seq, dim): modeling_deepseek_v2.apply_rotary_emb's freqs_cis.unsqueeze(1)
    "transformers.models.deepseek_v2.modeling_deepseek_v2": ("DeepseekV2RotaryEmbedding", 1),
}


def real_product(x: Any, freqs: Any) -> Any:
    """x (..., 2k) as k complex pairs times ``freqs`` (..., k, 2: cos and sin pairs, broadcast), as
    x's pairs again (..., 2k) in float32."""
    import torch

    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    c, s = freqs[..., 0], freqs[..., 1]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


def _pairs_forward(module: Any) -> Any:
    import torch

    def forward(self: Any, x: Any, position_ids: Any) -> Any:
        # as the rotary's forward, the polar form as (cos, sin)
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        return torch.stack([freqs.cos(), freqs.sin()], dim=-1) * self.attention_scaling

    try:  # what the model's own forward is decorated with: frequencies updated for long prompts
        from transformers.modeling_rope_utils import dynamic_rope_update

        forward = dynamic_rope_update(forward)
    except ImportError:  # a transformers without it: its forward had none either
        pass
    return types.MethodType(forward, module)


def _apply_pairs(heads: int) -> Any:
    def apply_rotary_emb(xq: Any, xk: Any, freqs: Any) -> tuple[Any, Any]:
        wide = freqs.unsqueeze(heads).to(xq.device)
        return real_product(xq, wide).type_as(xq), real_product(xk, wide).type_as(xk)

    return apply_rotary_emb


@contextlib.contextmanager
def exportable_complex_rotary(model: Any) -> Iterator[int]:
    """Within the block, the rotary embeddings of ``model`` that FAMILIES names in real arithmetic
    (the module doc); restored after. Yields how many rotary modules were changed (0: none)."""
    changes: list[tuple[Any, str, Any]] = []
    count = 0
    for module_name, (class_name, heads) in FAMILIES.items():
        rotary = modules_of(model, module_name, class_name)
        if rotary:  # the modeling module's function its attention calls by name
            changes += [(m, "forward", _pairs_forward(m)) for m in rotary]
            changes.append((sys.modules[module_name], "apply_rotary_emb", _apply_pairs(heads)))
            count += len(rotary)
    with patched(changes):
        yield count
