"""A size read off a tensor the graph computes, read off a graph input instead.

Models read sizes mid-graph: ``hidden_states.shape[1]`` after a convolution front end (Wav2Vec2's
feature encoder, whose output has ``s - 1`` frames for an input of ``20*s`` samples). Exported with
a dynamic dim, that is ``sym_size(hidden, 1)``: a read of a tensor the graph computes, so a plan
must finish what computes it before the read, and a graph-runtime partition holding both the
tensor and the nodes built from the size (an ``arange`` for a mask) splits in two around the read.

The exporter knows the size as an expression of the input's symbols (``s - 1``). Where that
expression is ``c*s + d`` of one symbol, and a graph input has a dim ``a*s + b`` of the same symbol,
the size is computed from the input instead: ``((size - b) // a) * c + d`` in scalar nodes that run
before everything else (the entry check has already made ``size - b`` a multiple of ``a``). Any
other read stays as it is.

>>> linear_in("4*s60 - 1", "s60")
(4, -1)
>>> linear_in("s0*s1", "s0") is None
True
"""

from __future__ import annotations

from typing import Any

from opcore.graph.ir import SCALAR_OPS, Node, ValueInfo, ValueRef

__all__ = ["linear_in", "size_from_inputs"]


def linear_in(expression: Any, symbol: Any) -> tuple[int, int] | None:
    """(c, d) with ``expression == c*symbol + d`` for integers c > 0 and d; None otherwise."""
    import sympy  # type: ignore[import-untyped]

    expr, s = sympy.sympify(expression), sympy.Symbol(str(symbol), integer=True, positive=True)
    expr = expr.subs({free: s for free in expr.free_symbols if str(free) == str(symbol)})
    if expr.free_symbols != {s} or not expr.is_polynomial(s):
        return None
    poly = sympy.Poly(expr, s)
    if poly.degree() != 1 or not all(coefficient.is_integer for coefficient in poly.all_coeffs()):
        return None
    c, d = (int(coefficient) for coefficient in poly.all_coeffs())
    return (c, d) if c > 0 else None


def _input_dim(fx_node: Any, symbol: Any, values: dict[str, ValueInfo]) -> tuple[str, int, int, int] | None:
    """(input, axis, a, b) of the first graph input (a placeholder lowered before: parameters and
    buffers have no symbolic dims) with a dim ``a*symbol + b``."""
    import torch

    for node in fx_node.graph.nodes:
        if node.op != "placeholder" or node.name not in values:
            continue
        value = node.meta.get("val")
        for axis, size in enumerate(getattr(value, "shape", ())):
            if isinstance(size, torch.SymInt):
                found = linear_in(size.node.expr, symbol)
                if found is not None:
                    return node.name, axis, *found
    return None


def size_from_inputs(fx_node: Any, values: dict[str, ValueInfo], concrete: dict[str, Any], nodes: list[Node]) -> bool:
    """Lower ``sym_size(x, dim)`` of a computed ``x`` as scalar nodes on a graph input's size; False
    where its size is no ``c*s + d`` of a symbol some input dim holds as ``a*s + b``."""
    import torch

    source, _ = fx_node.args
    size = fx_node.meta.get("val")
    if source.op == "placeholder" or not isinstance(size, torch.SymInt):
        return False
    expr = size.node.expr
    if len(expr.free_symbols) != 1:
        return False
    (symbol,) = expr.free_symbols
    wanted = linear_in(expr, symbol)
    place = _input_dim(fx_node, symbol, values)
    if wanted is None or place is None:
        return False
    name, axis, a, b = place
    c, d = wanted
    steps: list[tuple[str, Any, str]] = [("sym_size", axis, f"{a}*{symbol} + {b}")]
    steps += [("sub", b, f"{a}*{symbol}")] if b else []
    steps += [("floordiv", a, str(symbol))] if a != 1 else []
    steps += [("mul", c, f"{c}*{symbol}")] if c != 1 else []
    steps += [("add", d, str(expr))] if d else []
    value: Any = ValueRef(name)
    example = concrete[name].shape[axis]
    for i, (op, operand, text) in enumerate(steps):
        last = i == len(steps) - 1
        out = fx_node.name if last else f"{fx_node.name}_from_{name}_{i}"
        if op != "sym_size":  # the example's value through the step, as the plan computes it
            example = SCALAR_OPS[op](example, operand)
        target = "aten.sym_size" if op == "sym_size" else "python"
        nodes.append(Node(out, op, target, (value, operand), (out,), True))
        values[out] = ValueInfo(out, None, (str(expr) if last else text,), example)
        concrete[out] = example
        value = ValueRef(out)
    return True
