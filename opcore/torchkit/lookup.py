"""Rows of a table by index, as the torch kernels of ``embedding`` (``opcore.torchkit.torch_kernels``)
and ``embedding_wq`` (``opcore.torchkit.quantized``, whose codes, scales and zero points are tables)
look them up: ``F.embedding`` with an index out of range (data, so not checked by the meta function)
reported as the reference backend reports it, an ArgumentError naming the table by ``noun``.

>>> import torch
>>> embedding_rows(torch.tensor([1]), torch.eye(2)).tolist()
[[0.0, 1.0]]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from opcore.errors import ArgumentError

__all__ = ["embedding_rows"]


def embedding_rows(
    input: torch.Tensor, table: torch.Tensor, padding_idx: int | None = None, *, noun: str = "weight"
) -> torch.Tensor:
    """``F.embedding(input, table, padding_idx)``; an index out of range is an ArgumentError on
    ``input`` that says "the {noun} has N rows"."""
    try:
        if table.shape[0] == 0 and input.numel():  # torch says RuntimeError, not IndexError, for no rows
            raise IndexError("no rows")
        return F.embedding(input, table, padding_idx)
    except IndexError:
        rows = table.shape[0]
        raise ArgumentError(
            arg="input",
            expected=f"indices in [0, {rows - 1}] (the {noun} has {rows} rows)",
            found="an index out of range",
            fix="indices must be non-negative and below num_embeddings",
        ) from None
