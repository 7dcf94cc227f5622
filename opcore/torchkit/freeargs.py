"""A prepared kernel as a function of its free (non-constant) tensor arguments: what every torch
``prepare`` uses (re-exported by ``opcore.torchkit.prepared``, where the plugins import it from).

>>> call = with_free_args(lambda x, w, b: (x, w, b), ("X", "W", None), positions=[0])
>>> call("x")
('x', 'W', None)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["free_positions", "with_free_args"]


def free_positions(args: Sequence[Any], names: Sequence[str], constants: frozenset[str]) -> list[int]:
    """Positions of the tensor arguments that are not constants: what the prepared function takes."""
    return [
        i
        for i, (name, value) in enumerate(zip(names, args))
        if name not in constants
        and (
            isinstance(value, torch.Tensor)
            or (isinstance(value, tuple) and any(isinstance(v, torch.Tensor) for v in value))
        )
    ]


def with_free_args(kernel: Callable[..., Any], template: Sequence[Any], positions: Sequence[int]) -> Callable[..., Any]:
    """``kernel`` as a function of the free arguments, the others taken from ``template``."""
    base = list(template)
    slots = list(positions)
    if slots == [0]:
        rest = tuple(base[1:])
        return lambda x: kernel(x, *rest)

    def call(*free: Any) -> Any:
        values = base.copy()
        for position, value in zip(slots, free):
            values[position] = value
        return kernel(*values)

    return call
