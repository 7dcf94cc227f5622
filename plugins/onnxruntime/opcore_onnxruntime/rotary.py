"""The rotate-half rotary embedding of a partition as one ONNX ``RotaryEmbedding`` node (opset 23).

A decoder's attention turns each query and key by its position, written in PyTorch as
``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)`` and ``cos = cos(cat(f, f))``
(transformers' Llama, Mistral, Qwen2, Gemma, ...). Captured, that is seven nodes a tensor (two
Slices, which onnxruntime's optimizer makes one Split, Neg, Concat, two Mul, Add): 12 of a layer's
~47 in a 0.5B decode step, each a kernel call of a few microseconds on one token's values, and the
optimizer fuses none of them.
``RotaryEmbedding`` computes the same ``x1 * c - x2 * s, x2 * c + x1 * s`` from the half-width
``c = cos(f)``, ``s = sin(f)``, which the match proves: its cos and sin are the cosine and sine of
one ``Concat(f, f)`` on the last axis (each maybe times one number: transformers' attention
scaling, which then scales the half-width ones), broadcast over the heads (``Unsqueeze`` at axis 1).

Matched only where it computes the same thing: float32 values of static sizes, ``x`` (batch, heads,
length, D) and ``f`` (batch, length, D / 2), every node inside the match read by the match alone. A
partial rotary (the first dims of each head turned, the rest passed) fuses on the turned slice.
Anything else (interleaved pairs, another wave, other dtypes, dynamic sizes) stays as it was.

>>> from onnx import helper
>>> nodes = [
...     helper.make_node("Concat", ["f", "f"], ["cat"], axis=-1),
...     helper.make_node("Cos", ["cat"], ["c4"]), helper.make_node("Sin", ["cat"], ["s4"]),
...     helper.make_node("Unsqueeze", ["c4", "one"], ["cos"]), helper.make_node("Unsqueeze", ["s4", "one"], ["sin"]),
...     helper.make_node("Split", ["x", "halves"], ["x1", "x2"], axis=3), helper.make_node("Neg", ["x2"], ["n"]),
...     helper.make_node("Concat", ["n", "x1"], ["r"], axis=3), helper.make_node("Mul", ["r", "sin"], ["rs"]),
...     helper.make_node("Mul", ["x", "cos"], ["xc"]), helper.make_node("Add", ["xc", "rs"], ["y"]),
... ]
>>> constants = {"one": [1], "halves": [32, 32]}
>>> sizes = {"x": (1, 14, 1, 64), "f": (1, 1, 32), "cat": (1, 1, 64), "cos": (1, 1, 1, 64), "sin": (1, 1, 1, 64)}
>>> f32 = numpy.dtype("float32")
>>> [n.op_type for n in rotary_once(nodes, constants, sizes, dict.fromkeys(["x", "f"], f32), {"y"})]
['Cos', 'Sin', 'RotaryEmbedding']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy
from onnx import helper

__all__ = ["ROTARY_OPSET", "rotary_once", "unread_dropped"]

# RotaryEmbedding is an ONNX op from opset 23 (run on the CPU by onnxruntime 1.25, the plugin's floor, and 1.32)
ROTARY_OPSET = 23

_FLOAT32 = numpy.dtype(numpy.float32)


def _attribute(node: Any, name: str, default: Any = None) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


class _Facts:
    """What the match reads of the graph: each value's node, the small constants' values, the sizes
    and dtypes the graph knows, and how many nodes (and graph outputs) read each value."""

    def __init__(
        self,
        nodes: Sequence[Any],
        constants: Mapping[str, Any],
        sizes: Mapping[str, tuple[int | None, ...]],
        dtypes: Mapping[str, numpy.dtype],
        outputs: set[str],
    ) -> None:
        self.producer = {o: n for n in nodes for o in n.output}
        self.constants, self.sizes, self.dtypes = constants, sizes, dtypes
        self.readers: dict[str, int] = dict.fromkeys(outputs, 1)
        for node in nodes:
            for name in node.input:
                self.readers[name] = self.readers.get(name, 0) + 1

    def made(self, name: str, op_type: str) -> Any:
        """The node of ``op_type`` that makes ``name``, or None."""
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None


class _Match:
    """One rotary (ended by an Add): the nodes it replaces, x and the wave."""

    def __init__(self, nodes: list[Any], x: str, wave: _Wave) -> None:
        self.nodes, self.x, self.wave = nodes, x, wave


def _last_axis(node: Any, rank: int) -> bool:
    axis = _attribute(node, "axis", 0)
    return bool(axis == -1 or axis == rank - 1)


def _match(add: Any, facts: _Facts) -> _Match | None:
    for first, second in ((0, 1), (1, 0)):
        turned = _turned(add.input[first], add.input[second], facts)
        if turned is None:
            continue
        inner, x, wave = turned
        # the nodes the Add replaces are read by the match alone (x, cos and sin may be read elsewhere)
        outputs = {o for n in inner for o in n.output}
        reads = dict.fromkeys(outputs, 0)
        for node in (*inner, add):
            for name in node.input:
                if name in reads:
                    reads[name] += 1
        if all(facts.readers.get(o, 0) == reads[o] for o in outputs):
            return _Match(inner, x, wave)
    return None


def _turned(straight: str, rotated: str, facts: _Facts) -> tuple[list[Any], str, _Wave] | None:
    """``straight`` = x * cos and ``rotated`` = rotate_half(x) * sin: (the nodes, x, its wave), else None."""
    times_cos, times_sin = facts.made(straight, "Mul"), facts.made(rotated, "Mul")
    if times_cos is None or times_sin is None:
        return None
    for r, sin in (tuple(times_sin.input), tuple(reversed(times_sin.input))):
        concat = facts.made(r, "Concat")
        neg = facts.made(concat.input[0], "Neg") if concat is not None and len(concat.input) == 2 else None
        if neg is None:
            continue
        halves = _halves(concat.input[1], neg.input[0], facts)
        if halves is None or halves[1] not in times_cos.input:
            continue
        cut, x = halves
        cos = times_cos.input[1] if times_cos.input[0] == x else times_cos.input[0]
        dims = facts.sizes[x]
        wave = _wave(cos, sin, facts)
        half_sizes = (dims[0], dims[2], dims[3] // 2)  # type: ignore[operator]
        if wave is None or facts.dtypes.get(wave.f) != _FLOAT32 or facts.sizes.get(wave.f) != half_sizes:
            return None
        if not _last_axis(concat, 4):
            return None
        return [*cut, neg, concat, times_sin, times_cos], x, wave
    return None


def _halves(first: str, second: str, facts: _Facts) -> tuple[list[Any], str] | None:
    """(the nodes, x) where ``first`` and ``second`` are x's halves on its last axis: one Split in two
    equal sizes, or two Slices ([0, D/2) and [D/2, end)); x float32 of static sizes (batch, heads,
    length, D)."""
    split = facts.made(first, "Split")
    if split is not None:
        x = split.input[0]
        if tuple(split.output) != (first, second) or len(split.input) < 2:
            return None
        half = _half(x, facts)
        sizes_given = facts.constants.get(split.input[1])
        if half is None or sizes_given is None or list(sizes_given) != [half, half] or not _last_axis(split, 4):
            return None
        return [split], x
    low, high = facts.made(first, "Slice"), facts.made(second, "Slice")
    if low is None or high is None or low.input[0] != high.input[0]:
        return None
    x = low.input[0]
    half = _half(x, facts)
    if half is None:
        return None
    for node, start, least_end, most_end in ((low, 0, half, half), (high, half, 2 * half, None)):
        read = [facts.constants.get(name) for name in node.input[1:]]
        if len(read) < 3 or any(r is None or len(r) != 1 for r in read):
            return None
        begin, end, axes, *steps = (int(r[0]) for r in read)  # type: ignore[index]
        if begin != start or end < least_end or (most_end is not None and end != most_end):
            return None
        if axes not in (-1, 3) or steps not in ([], [1]):
            return None
    return [low, high], x


def _half(x: str, facts: _Facts) -> int | None:
    dims = facts.sizes.get(x)
    if dims is None or len(dims) != 4 or None in dims or dims[3] % 2 or facts.dtypes.get(x) != _FLOAT32:  # type: ignore[operator]
        return None
    return dims[3] // 2  # type: ignore[operator]


class _Wave:
    """f, and the factors the cosine and the sine of the doubled f are scaled by (or None)."""

    def __init__(self, f: str, factors: tuple[str | None, str | None]) -> None:
        self.f, self.factors = f, factors


def _wave(cos: str, sin: str, facts: _Facts) -> _Wave | None:
    """Where ``cos`` and ``sin`` are Unsqueeze(Cos / Sin(Concat(f, f) on the last axis) [* k], axis 1)
    with k of one element (transformers' attention scaling): f and the two k."""
    found, factors = [], []
    for name, op_type in ((cos, "Cos"), (sin, "Sin")):
        unsqueeze = facts.made(name, "Unsqueeze")
        if unsqueeze is None or len(unsqueeze.input) != 2:
            return None
        axes = facts.constants.get(unsqueeze.input[1])
        if axes is None or list(axes) != [1]:
            return None
        inner, factor = unsqueeze.input[0], None
        scaled = facts.made(inner, "Mul")
        if scaled is not None:
            for wave_in, k in (tuple(scaled.input), tuple(reversed(scaled.input))):
                if facts.made(wave_in, op_type) is not None and _one_element(k, facts):
                    inner, factor = wave_in, k
                    break
            else:
                return None
        wave = facts.made(inner, op_type)
        if wave is None:
            return None
        found.append(wave.input[0])
        factors.append(factor)
    if found[0] != found[1]:
        return None
    concat = facts.made(found[0], "Concat")
    dims = facts.sizes.get(found[0])
    if concat is None or dims is None or len(dims) != 3 or len(concat.input) != 2 or len(set(concat.input)) != 1:
        return None
    if not _last_axis(concat, 3):
        return None
    return _Wave(str(concat.input[0]), (factors[0], factors[1]))


def _one_element(name: str, facts: _Facts) -> bool:
    """Whether ``name`` holds one element (a constant, a value of known sizes, or a Cast of such)."""
    cast = facts.made(name, "Cast")
    if cast is not None:
        name = cast.input[0]
    if name in facts.constants:
        return bool(numpy.size(facts.constants[name]) == 1)
    dims = facts.sizes.get(name)
    return dims is not None and all(d == 1 for d in dims)


def rotary_once(
    nodes: Sequence[Any],
    constants: Mapping[str, Any],
    sizes: Mapping[str, tuple[int | None, ...]],
    dtypes: Mapping[str, numpy.dtype],
    outputs: set[str],
) -> list[Any]:
    """``nodes`` with each matched rotary one ``RotaryEmbedding`` (at its Add's place) on ``Cos(f)``
    and ``Sin(f)`` (one pair per ``f``, before the first rotary reading it), and the nodes nothing
    reads any more (the cos and sin of the doubled ``f``) left out. ``constants``: the small
    initializers' values (the split sizes, the unsqueeze axes); ``sizes`` and ``dtypes``: those
    the graph knows; ``outputs``: the graph's outputs."""
    facts = _Facts(nodes, constants, sizes, dtypes, outputs)
    matches = {}
    for node in nodes:
        if node.op_type == "Add" and len(node.input) == 2:
            found = _match(node, facts)
            if found is not None:
                matches[id(node)] = found
    if not matches:
        return list(nodes)
    gone = {id(n) for m in matches.values() for n in m.nodes}
    halves: dict[tuple[str, str | None, str | None], list[str]] = {}
    out: list[Any] = []
    for node in nodes:
        if id(node) in gone:
            continue
        found = matches.get(id(node))
        if found is None:
            out.append(node)
            continue
        wave = found.wave
        key = (wave.f, *wave.factors)
        if key not in halves:  # the half-width cos and sin, once for every rotary of this wave
            halves[key] = []
            for op_type, factor in zip(("Cos", "Sin"), wave.factors):
                name = f"{wave.f}_rotary_{op_type.lower()}_{len(halves)}"
                out.append(helper.make_node(op_type, [wave.f], [name], name=f"{name}_{op_type}"))
                if factor is not None:
                    out.append(helper.make_node("Mul", [name, factor], [f"{name}_scaled"], name=f"{name}_Mul"))
                    name = f"{name}_scaled"
                halves[key].append(name)
        out.append(
            helper.make_node("RotaryEmbedding", [found.x, *halves[key]], list(node.output), name=f"{node.name}_rotary")
        )
    return unread_dropped(out, outputs, frozenset({"Unsqueeze", "Cos", "Sin", "Concat", "Mul", "Cast"}))


def unread_dropped(nodes: list[Any], outputs: set[str], kinds: frozenset[str]) -> list[Any]:
    """``nodes`` without the nodes of ``kinds`` whose outputs nothing reads (repeated: a chain goes);
    the model-level passes' cleanup (this one's, and graph._reshapes_once's of its bypassed Reshapes)."""
    while True:
        read = {name for node in nodes for name in node.input} | outputs
        kept = [n for n in nodes if n.op_type not in kinds or any(o in read for o in n.output)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept
