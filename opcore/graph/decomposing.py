"""The ATen ops capture decomposes before lowering: ops no backend has a kernel for, whose parts are
ops opcore maps (opcore.graph.mapping). Every other op stays whole (linear, attention, ...): a graph
runtime builds it in one piece, and opcore's ATen fallback runs any op no backend claims. But an
ATen fallback splits a plan's partitions, and its results bound no values (opcore.graph.ranges), so
an op that models use between the layers' compute is better in parts the runtimes take.

torch's own decompositions (torch.export's table, else torch._decomp's), the same op numerically:

- diff: cat (of prepend/append) and two slices subtracted; new_ones: full (a factory, folded into a
  constant when its size is static);
- repeat: unsqueeze, expand and a reshape (Whisper's and BLOOM's positions
  ``arange(n).unsqueeze(0).repeat(b, 1)``); baddbmm: bmm, mul and add (BLOOM's ALiBi scores);
- t: a transpose (CLIP's logits); type_as: a cast (Gemma's and RoBERTa's ``x.type_as(y)``);
- stack: unsqueezes and a cat (GPT-J's and CodeGen's interleaved rotary).

opcore's own, of contracts the runtimes build (torch's go through ops opcore does not map):

- _weight_norm (Wav2Vec2's positional convolution): ``v * (g / ||v||)``, the norm over every dim but
  ``dim``, from pow, sum and sqrt;
- roll (Swin's shifted windows) of dims whose size is static: a cat of two slices per dim;
- linalg_vector_norm of order 2 or 1 (F.normalize: Swin V2's cosine attention): sqrt of a sum of
  squares, a sum of absolute values;
- repeat_interleave by an int (GPT-J's and CodeGen's rotary sin/cos, each repeated twice): an
  unsqueeze, an expand and a reshape;
- rsub (``1 - x``, as inverted attention masks write it): a sub of two tensors, or ``x * -alpha + s``
  for a number ``s`` (torch's own gives a sub whose first operand is a number, which no contract takes);
- square (Nemotron's, Persimmon's and Arcee's squared ReLU): ``x * x`` for floating x (torch's square
  is ``pow(x, 2)``, which it computes as that product), else ``pow(x, 2)``;
- slice assignment ``buffer[..., a:b] = x`` as functionalization writes it (DeepSeek's multi-head
  latent attention builds its queries and keys so, from a ``new_empty``): slice_scatter of a static
  step-1 range as a cat of the slices before and after it around x; copy as x cast and broadcast to
  the destination; new_empty as new_zeros (its values are unspecified; every one is written after);
- maximum and max of two tensors (XGLM's and older decoders' ``torch.max(scores, finfo.min)``): for
  floating results ``-minimum(-a, -b)`` (negation is exact: the same value, NaN and signed zero as
  torch's maximum), for integers and bools ``where(a >= b, a, b)``;
- max and min of a whole tensor (dynamic rotary scaling's ``max(position_ids)``): amax and amin
  over every dim;
- reciprocal (rotary frequencies computed in the graph, ``1.0 / base ** ...``): ``1 / x`` as a div
  by a 0-d constant one (IEEE division: the same value; integers give float32 as torch's).

>>> sorted(str(op) for op in decompositions())  # doctest: +SKIP
['aten._weight_norm.default', 'aten.baddbmm.default', 'aten.diff.default', ...]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["decompositions"]

_FROM_TORCH = (
    "diff.default", "new_ones.default", "repeat.default", "baddbmm.default", "t.default", "type_as.default",
    "stack.default",
)  # fmt: skip


def _weight_norm(v: Any, g: Any, dim: int = 0) -> Any:
    """torch._weight_norm: v scaled to g over the 2-norm of v's slices along ``dim`` (every dim: -1)."""
    dims = [d for d in range(v.dim()) if d != dim % max(v.dim(), 1)] if dim != -1 else list(range(v.dim()))
    return v * (g / v.pow(2).sum(dims, keepdim=True).sqrt())


def _roll(x: Any, shifts: Any, dims: Any = ()) -> Any:
    """torch.roll as slices and a cat per dim, where each rolled dim's size is static; else torch's
    own decomposition (an index_select of computed positions)."""
    import torch
    from torch._decomp import decomposition_table

    shifts, dims = list(shifts), list(dims)
    sizes = [x.shape[d] for d in dims] if dims else []
    if not dims or len(shifts) != len(dims) or not all(isinstance(size, int) for size in sizes):
        return decomposition_table[torch.ops.aten.roll.default](x, shifts, dims)
    for shift, dim, size in zip(shifts, dims, sizes):
        step = shift % size if size else 0
        if step:
            x = torch.cat((x.narrow(dim, size - step, step), x.narrow(dim, 0, size - step)), dim)
    return x if any(s % size for s, size in zip(shifts, sizes) if size) else x.clone()


def _vector_norm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    """torch.linalg.vector_norm: the 2-norm (F.normalize's, Swin V2's cosine attention) as the root of
    a sum of squares, the 1-norm as a sum of absolute values; any other as torch decomposes it."""
    import torch
    from torch._decomp import decomposition_table

    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else list(dim)
    if dtype is None and x.is_floating_point() and ord in (1, 2):
        return x.abs().sum(dims, keepdim=keepdim) if ord == 1 else x.pow(2).sum(dims, keepdim=keepdim).sqrt()
    return decomposition_table[torch.ops.aten.linalg_vector_norm.default](x, ord, dim, keepdim, dtype=dtype)


def _repeat_interleave(x: Any, repeats: int, dim: int | None = None, *, output_size: Any = None) -> Any:
    """torch.repeat_interleave by an int: each element ``repeats`` times in a row along ``dim`` (the
    flattened tensor where None), as an unsqueeze after ``dim``, an expand and a reshape."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    dim = dim % x.dim()
    sizes = list(x.shape)
    expanded = x.unsqueeze(dim + 1).expand(*sizes[: dim + 1], repeats, *sizes[dim + 1 :])
    return expanded.reshape(*sizes[:dim], sizes[dim] * repeats, *sizes[dim + 1 :])


def _rsub(x: Any, other: Any, alpha: Any = 1) -> Any:
    """torch.rsub: ``other - alpha * x`` (IEEE: ``x * -1 + s`` is ``s - x`` exactly)."""
    import torch

    if isinstance(other, torch.Tensor):
        return torch.sub(other, x, alpha=alpha)
    return torch.add(torch.mul(x, -alpha), other)


def _square(x: Any) -> Any:
    """torch.square: ``x * x`` for floating x, ``pow(x, 2)`` otherwise (its integer promotion)."""
    import torch

    return torch.mul(x, x) if x.is_floating_point() else torch.pow(x, 2)


def _slice_scatter(
    input: Any, src: Any, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1
) -> Any:
    """torch.slice_scatter: ``input`` with ``src`` in ``input[dim][start:end:step]``; a step-1 range
    of a dim whose size is static as a cat of three parts; anything else as torch decomposes it."""
    import torch
    from torch._decomp import decomposition_table

    dim = dim % input.dim()
    size = input.shape[dim]
    if step != 1 or not isinstance(size, int) or not all(isinstance(v, (int, type(None))) for v in (start, end)):
        return decomposition_table[torch.ops.aten.slice_scatter.default](input, src, dim, start, end, step)
    begin, stop = slice(start, end).indices(size)[:2]
    stop = max(stop, begin)
    shape = list(input.shape)
    shape[dim] = stop - begin
    parts = [input.narrow(dim, 0, begin), src.expand(shape), input.narrow(dim, stop, size - stop)]
    return torch.cat([p for p in parts if p.shape[dim] != 0] or [input.narrow(dim, 0, 0)], dim)


def _copy(self: Any, src: Any, non_blocking: bool = False) -> Any:
    """The functional copy: ``src`` in ``self``'s dtype, broadcast to its shape (a new tensor)."""
    return src.to(self.dtype).expand(self.shape).clone()


def _new_empty(x: Any, size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
               pin_memory: Any = None) -> Any:  # fmt: skip
    """new_empty as new_zeros: the values of an empty tensor are unspecified, zeros are some."""
    return x.new_zeros(size, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


def _maximum(x: Any, other: Any) -> Any:
    """torch.maximum in the contracts' ops: ``-minimum(-x, -other)`` in the promoted floating dtype,
    ``where(x >= other, x, other)`` for integers and bools (no negation to overflow)."""
    import torch

    dtype = torch.result_type(x, other)
    if dtype.is_floating_point:
        return torch.neg(torch.minimum(torch.neg(x.to(dtype)), torch.neg(other.to(dtype))))
    return torch.where(torch.ge(x, other), x, other)


def _whole(reduce: str) -> Callable[..., Any]:
    """torch.max / torch.min of a whole tensor as amax / amin over every dim (a 0-d one as itself)."""

    def whole(x: Any) -> Any:
        import torch

        return getattr(torch, reduce)(x, list(range(x.dim()))) if x.dim() else x.clone()

    return whole


def _reciprocal(x: Any) -> Any:
    """torch.reciprocal: ``1 / x``, a true division of a 0-d one of x's dtype by x."""
    import torch

    return torch.div(x.new_ones(()), x)


# opcore's own, by ATen overload name (those above)
_OWN: dict[str, Callable[..., Any]] = {
    "_weight_norm.default": _weight_norm,
    "roll.default": _roll,
    "linalg_vector_norm.default": _vector_norm,
    "repeat_interleave.self_int": _repeat_interleave,
    "rsub.Scalar": _rsub,
    "rsub.Tensor": _rsub,
    "square.default": _square,
    "slice_scatter.default": _slice_scatter,
    "copy.default": _copy,
    "new_empty.default": _new_empty,
    "maximum.default": _maximum,
    "max.other": _maximum,
    "max.default": _whole("amax"),
    "min.default": _whole("amin"),
    "reciprocal.default": _reciprocal,
}


def _overload(name: str) -> Any:
    """``torch.ops.aten.<packet>.<overload>`` of ``"packet.overload"``."""
    import torch

    packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


def decompositions() -> dict[Any, Callable[..., Any]]:
    """ATen overload -> its decomposition, for ``ExportedProgram.run_decompositions``."""
    import torch
    from torch._decomp import decomposition_table

    table = torch.export.default_decompositions()
    found: dict[Any, Callable[..., Any]] = {}
    for name in _FROM_TORCH:
        op = _overload(name)
        found[op] = table[op] if op in table else decomposition_table[op]
    found.update({_overload(name): fn for name, fn in _OWN.items()})
    return found
