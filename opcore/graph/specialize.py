"""A graph with dynamic sizes made static at given values of its symbols, without exporting again.

``capture_lm`` exports a decoder once, with a dynamic sequence dim (the prefill), and takes the decode
step's graph from it at length 1: exporting the step again cost as much as the model's first export
(3.3-3.9 s of a 135M decoder here; torch's cost is per ATen op, so exporting the exported program
again costs the same). The export declares the sequence dim from 1 up, but torch traces it as 2 or
more (its 0/1 specialization: ``if q_len == 1`` is taken as False, without a guard), so capture_lm
first runs the exported program at one token against the model itself and specializes only where
they agree (``lm_capture._agrees_at_one_token``); elsewhere it exports the step on its own.

Specializing: every value's sizes evaluated at the symbols' values (its ``dims``), each size
computation (``sym_size`` and the arithmetic on it, Python steps) replaced by its int in the nodes
that read it, and those steps dropped. What it cannot do (a symbolic size of a strided value, a size
expression it cannot read) raises ``NotSpecialized``: the caller exports the static step instead.

>>> specialized = specialize(graph, {"s0": 1})   # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from opcore.graph.ir import SCALAR_OPS, CallSignature, Graph, Node, ValueInfo, ValueRef, substitute
from opcore.graph.signature import size_value

__all__ = ["NotSpecialized", "specialize", "symbols_of"]


class NotSpecialized(Exception):
    """The graph holds something ``specialize`` does not make static; never reaches a caller of opcore."""


def symbols_of(graph: Graph, axes: Mapping[str, int]) -> dict[str, str]:
    """The symbol of each named input's dynamic axis (``{"input_ids": 1}`` -> ``{"input_ids": "s58"}``)."""
    found = {}
    for name, axis in axes.items():
        dims = graph.values[name].dims
        if axis >= len(dims) or not isinstance(dims[axis], str):
            raise NotSpecialized(f"{name}'s axis {axis} is not dynamic")
        found[name] = str(dims[axis])
    return found


def specialize(graph: Graph, env: Mapping[str, int]) -> Graph:
    """``graph`` with every size static at the symbols' values ``env`` (see the module)."""
    if any(graph.values[name].meta is None for name in graph.inputs):
        raise NotSpecialized("a scalar input: its value is the caller's, not a size to fold")
    values: dict[str, ValueInfo] = {}
    scalars: dict[str, int] = {}  # a size computed at run time -> its int at these values
    for name, info in graph.values.items():
        if info.meta is None:
            continue
        if not info.dynamic_axes:
            values[name] = info
            continue
        if info.meta.strides is not None:
            raise NotSpecialized(f"{name} has strides and a dynamic size")
        shape = tuple(d if isinstance(d, int) else _size(d, env) for d in info.dims)
        values[name] = replace(info, meta=replace(info.meta, shape=shape), dims=shape)

    def size_of(ref: Any) -> Any:
        if isinstance(ref, ValueRef) and ref.name in scalars:
            return scalars[ref.name]
        if isinstance(ref, ValueRef) and ref.name in values and values[ref.name].meta is not None:
            return _Tensor(values[ref.name].meta.shape)  # type: ignore[union-attr]
        if isinstance(ref, ValueRef):
            raise NotSpecialized(f"{ref.name}: a size read from a value that is not a tensor or a size")
        return ref

    def folded(name: str) -> Any:
        return scalars[name] if name in scalars else ValueRef(name)

    nodes: list[Node] = []
    for node in graph.nodes:
        if node.scalar and node.op in SCALAR_OPS:
            (output,) = node.outputs
            value = SCALAR_OPS[node.op](*(size_of(a) for a in node.args))
            if not isinstance(value, (int, bool)):
                raise NotSpecialized(f"{node.name} ({node.op}) gives {type(value).__name__}, not a size")
            symbol = graph.values[output].symbol
            if symbol is not None and _size(symbol, env) != value:
                raise NotSpecialized(f"{node.name} gives {value}, its symbol {symbol} {_size(symbol, env)}")
            scalars[output] = int(value) if not isinstance(value, bool) else value
            continue
        for name in node.outputs:
            info = graph.values[name]
            if info.meta is None:
                raise NotSpecialized(f"{node.name} ({node.op}) gives a scalar, not a size computation")
        args = substitute(node.args, folded)
        nodes.append(replace(node, args=args) if args != node.args else node)
    outputs = substitute(graph.outputs, folded)
    signature = graph.signature
    if signature is not None:
        signature = CallSignature(signature.labels)  # static sizes: nothing left to range or guard
    return replace(graph, nodes=tuple(nodes), outputs=outputs, values=values, signature=signature)


class _Tensor:
    """What ``sym_size``/``sym_numel`` read of a tensor: its shape."""

    __slots__ = ("shape",)

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def numel(self) -> int:
        return math.prod(self.shape)


def _size(expression: str, env: Mapping[str, int]) -> int:
    value = size_value(expression, env)
    if value is None:
        raise NotSpecialized(f"the size {expression!r} cannot be read at {dict(env)}")
    return value
