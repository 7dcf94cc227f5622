"""Size ranges: the range of a symbolic size (``s0``, ``(s0 - 1)//2 + 1``) from the ranges the captured
signature declares (``torch.export.Dim``), as opcore.graph.ranges reads them.

>>> expression_range("2*s0", {"s0": (2, 64)})
(4, 128)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opcore.graph.ir import Graph

__all__ = ["declared_sizes", "expression_range", "largest_size"]

Interval = tuple[int, int]


def declared_sizes(graph: Graph) -> dict[str, Interval]:
    """The declared range of each symbolic size with an upper bound (the captured signature's: the
    ``torch.export.Dim`` ranges, which a plan's entry checks hold every call to)."""
    signature = graph.signature
    if signature is None:
        return {}
    return {name: (low, high) for name, (low, high) in signature.ranges.items() if high is not None}


def largest_size(dim: int | str, sizes: Mapping[str, Interval] | None) -> int:
    """A dim's size as the size-reading rules (a sum's count, an argmax's range) see it: a static size,
    a dynamic one's declared largest (the counts they take grow with it), else -1 (unknown)."""
    if isinstance(dim, int):
        return dim
    declared = sizes.get(dim) if sizes is not None else None
    return declared[1] if declared is not None else -1


def expression_range(expression: str, sizes: Mapping[str, Interval]) -> Interval | None:
    """The range of a symbolic size: a symbol's declared range, or an expression of one symbol that
    only adds, multiplies by positive integers and floor-divides by them ("s0 - 1", "20*s1",
    "(s0 - 1)//2 + 1": a convolution's output length), evaluated at the symbol's two ends (such
    an expression never decreases as the symbol grows); None for anything else.

    >>> expression_range("s0 - 1", {"s0": (2, 64)}), expression_range("(s0 - 1)//2", {"s0": (3, 9)})
    ((1, 63), (1, 4))
    """
    found = sizes.get(expression)
    if found is not None:
        return found
    import sympy  # type: ignore[import-untyped]

    try:
        parsed = sympy.sympify(expression, locals={"FloorDiv": lambda a, b: sympy.floor(a / b)})
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None
    symbols = list(parsed.free_symbols)
    if len(symbols) != 1 or str(symbols[0]) not in sizes or not monotone_in_size(parsed):
        return None
    low, high = sizes[str(symbols[0])]
    ends = [parsed.subs(symbols[0], end) for end in (low, high)]
    if not all(end.is_integer for end in ends):
        return None
    return int(ends[0]), int(ends[1])


def monotone_in_size(expression: Any) -> bool:
    """Whether ``expression`` is built of symbols and integers by +, x by positive numbers and floor."""
    import sympy  # type: ignore[import-untyped]

    if expression.is_Symbol or expression.is_Number:  # a constant term shifts, never turns
        return True
    if expression.is_Add or expression.func is sympy.floor:
        return all(monotone_in_size(a) for a in expression.args)
    if expression.is_Mul:
        numbers = [a for a in expression.args if a.is_Number]
        others = [a for a in expression.args if not a.is_Number]
        return len(others) == 1 and all(n > 0 for n in numbers) and monotone_in_size(others[0])
    return False
