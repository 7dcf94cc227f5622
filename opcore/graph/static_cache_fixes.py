"""transformers attention that assumes a growing cache, run right over capture_lm's static one.

GPT-Neo's attention (``GPTNeoSelfAttention._attn``) cuts its causal and local-window mask as
``bias[key_length - query_length : key_length]``: the queries taken to be the last ``query_length``
of the keys, which holds for a dynamic cache but not a static one, whose keys are all
``max_length`` slots. Its global layers come out right anyway (transformers' own causal mask hides
the later slots), its local layers do not: with a window of 8 and a 10-token prompt the first
generated token already differs from ``model.generate`` (transformers' ``StaticCache`` and
``cache_implementation="static"`` give the same wrong tokens). Within ``static_cache_attention``,
each such module computes its mask from the slots the step's queries write: slot ``j`` is visible
to the query in slot ``i`` when ``i - window < j <= i`` (local) or ``j <= i`` (global), in slots as
GPT-Neo's mask is in sequence indices (left padding included).

MPT's attention adds ``past_key_values.get_seq_length()`` (the slot the step starts at: a tensor
read from ``cache_position`` here) to its query count only to cut its ALiBi bias, whose single row
it cuts at 0 for any count of at least 1; as a tensor the count reaches ``max(0, ...)``, which
torch.export cannot trace (``.item()``). Within the block its attention sees a filled length of 0;
its keys and values still go through the cache.

RoFormer's sinusoidal positions and TrOCR's learned ones are read at ``arange(past, past + seq)``
with ``past`` the cache's ``get_seq_length()`` (a tensor here: ``arange`` of it is an ``.item()``
torch.export cannot trace). Within the block their position tables are read at ``cache_position``,
the same slots (a prompt's tokens and any left padding count in both).

>>> import torch
>>> window_mask(torch.tensor([3, 4]), 6, 2).int().tolist()
[[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0]]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opcore.graph.module_patches import modules_of, patched

__all__ = ["static_cache_attention", "window_mask"]

_GPT_NEO = "transformers.models.gpt_neo.modeling_gpt_neo"
_MPT = "transformers.models.mpt.modeling_mpt"
_ROFORMER = "transformers.models.roformer.modeling_roformer"
_TROCR = "transformers.models.trocr.modeling_trocr"


def window_mask(cache_position: Any, length: int, window: int | None) -> Any:
    """(queries, length) bool: the slots each query (in slot ``cache_position[i]``) sees, causal and,
    with ``window``, the last ``window`` slots up to its own."""
    import torch

    slots = torch.arange(length, device=cache_position.device)
    at = cache_position.unsqueeze(-1)
    seen = slots <= at
    return seen & (slots > at - window) if window is not None else seen


def _gpt_neo_attn(module: Any, cache_position: Any) -> Any:
    import torch

    window = module.config.window_size if module.attention_type == "local" else None

    def attn(query: Any, key: Any, value: Any, attention_mask: Any = None) -> Any:
        # as GPTNeoSelfAttention._attn, with the mask cut by slot instead of by the keys' count
        query, key = query.to(torch.float32), key.to(torch.float32)
        weights = torch.matmul(query, key.transpose(-1, -2))
        visible = window_mask(cache_position, key.size(-2), window)
        lowest = torch.tensor(torch.finfo(weights.dtype).min, dtype=weights.dtype, device=weights.device)
        weights = torch.where(visible, weights, lowest)
        if attention_mask is not None:
            weights = weights + attention_mask
        weights = torch.nn.functional.softmax(weights, dim=-1).to(value.dtype)
        weights = module.attn_dropout(weights)
        return torch.matmul(weights, value), weights

    return attn


class _FilledUnknown:
    """A cache whose filled length MPT's attention does not read: ``get_seq_length`` 0, the rest the
    cache's own."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache

    def get_seq_length(self, *args: Any) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


def _mpt_forward(module: Any) -> Any:
    forward = type(module).forward

    def call(hidden_states: Any, position_bias: Any, past_key_values: Any = None, *args: Any, **kwargs: Any) -> Any:
        if past_key_values is not None:
            past_key_values = _FilledUnknown(past_key_values)
        return forward(module, hidden_states, position_bias, past_key_values, *args, **kwargs)

    return call


def _roformer_positions(module: Any, cache_position: Any) -> Any:
    import torch

    def forward(input_ids_shape: Any, past_key_values_length: Any = 0, position_ids: Any = None) -> Any:
        # as RoFormerSinusoidalPositionalEmbedding.forward, the step's slots as its positions
        return torch.nn.Embedding.forward(module, cache_position if position_ids is None else position_ids)

    return forward


def _trocr_positions(module: Any, cache_position: Any) -> Any:
    import torch

    def forward(input_ids: Any, past_key_values_length: Any = 0, position_ids: Any = None) -> Any:
        # as TrOCRLearnedPositionalEmbedding.forward, the step's slots as its positions
        if position_ids is None:
            position_ids = cache_position.expand(input_ids.shape[0], -1)
        else:
            position_ids = position_ids.unsqueeze(0)
        return torch.nn.Embedding.forward(module, position_ids + module.offset)

    return forward


@contextlib.contextmanager
def static_cache_attention(model: Any, cache_position: Any) -> Iterator[int]:
    """Within the block, ``model``'s attention modules known to assume a growing cache compute their
    masks from ``cache_position`` (the module doc); restored after. Yields how many were changed."""
    neo = modules_of(model, _GPT_NEO, "GPTNeoSelfAttention")
    changes = [(m, "_attn", _gpt_neo_attn(m, cache_position)) for m in neo]
    changes += [(m, "forward", _mpt_forward(m)) for m in modules_of(model, _MPT, "MptAttention")]
    roformer = modules_of(model, _ROFORMER, "RoFormerSinusoidalPositionalEmbedding")
    changes += [(m, "forward", _roformer_positions(m, cache_position)) for m in roformer]
    trocr = modules_of(model, _TROCR, "TrOCRLearnedPositionalEmbedding")
    changes += [(m, "forward", _trocr_positions(m, cache_position)) for m in trocr]
    with patched(changes) as count:
        yield count
