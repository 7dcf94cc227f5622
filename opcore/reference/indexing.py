"""Reference kernels for the indexing ops: gather and index (copies), split, split_with_sizes and
chunk (views, as torch's), pad (a copy; constant, reflect, replicate and circular modes)."""

from __future__ import annotations

import itertools
from typing import Literal

import numpy

from opcore.opset.indexing import check_index_range, chunk_sizes, split_pieces

__all__ = ["chunk", "gather", "index", "pad", "split", "split_with_sizes"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "chunk",
    "gather",
    "index",
    "pad",
    "split",
    "split_with_sizes",
)


def _check_range(arg: str, index: numpy.ndarray, size: int, *, negative: bool) -> None:
    if index.size:
        check_index_range(arg, int(index.min()), int(index.max()), size, negative=negative)


def gather(x: numpy.ndarray, dim: int, index: numpy.ndarray) -> numpy.ndarray:
    """x's values at index along dim (index may be smaller than x on the other dims)."""
    if x.ndim == 0:
        _check_range("index", index, 1, negative=False)
        return numpy.broadcast_to(x, index.shape).copy()
    if index.ndim == 0:  # torch takes a 0-D index as a 1-element one for a 1-D x (the meta's rule)
        return gather(x, dim, index.reshape(1)).reshape(())
    axis = dim % x.ndim
    _check_range("index", index, x.shape[axis], negative=False)
    window = tuple(slice(None) if d == axis else slice(0, index.shape[d]) for d in range(x.ndim))
    return numpy.take_along_axis(x[window], index.astype(numpy.intp), axis=axis)


def index(x: numpy.ndarray, indices: tuple[numpy.ndarray | None, ...]) -> numpy.ndarray:
    """x[i0, :, i2, ...]: NumPy's advanced indexing is torch's (negative indices count from the end)."""
    for i, idx in enumerate(indices):
        if idx is not None:
            _check_range(f"indices[{i}]", idx, x.shape[i], negative=True)
    key = tuple(slice(None) if idx is None else idx.astype(numpy.intp) for idx in indices)
    return numpy.asarray(x[key])


def _cut(x: numpy.ndarray, dim: int, sizes: list[int]) -> tuple[numpy.ndarray, ...]:
    axis = dim % x.ndim
    bounds = numpy.cumsum([0, *sizes])
    window = [slice(None)] * x.ndim
    pieces = []
    for start, end in itertools.pairwise(bounds):
        window[axis] = slice(int(start), int(end))
        pieces.append(x[tuple(window)])
    return tuple(pieces)


def split(x: numpy.ndarray, split_size: int | tuple[int, ...], dim: int) -> tuple[numpy.ndarray, ...]:
    """Views of split_size along dim, the last smaller (or of a list's sizes)."""
    return _cut(x, dim, split_pieces(x.shape[dim % x.ndim], split_size))


def split_with_sizes(x: numpy.ndarray, split_sizes: tuple[int, ...], dim: int) -> tuple[numpy.ndarray, ...]:
    """Views of the given sizes along dim."""
    return _cut(x, dim, list(split_sizes))


def chunk(x: numpy.ndarray, chunks: int, dim: int) -> tuple[numpy.ndarray, ...]:
    """Views of ceil(size / chunks) along dim."""
    return _cut(x, dim, chunk_sizes(x.shape[dim % x.ndim], chunks))


_NUMPY_MODES: dict[str, Literal["reflect", "edge", "wrap"]] = {
    "reflect": "reflect",
    "replicate": "edge",
    "circular": "wrap",
}


def pad(x: numpy.ndarray, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> numpy.ndarray:
    """x padded with value (cast to x's dtype as torch does), or in reflect, replicate or circular
    mode, at both ends of its last dims, last dim first; negative pads cut (after the growth: torch
    reads a padded element where the pads say, which is the same)."""
    return _padded(x, pad, mode, value)


def _padded(x: numpy.ndarray, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> numpy.ndarray:
    if not pad:  # numpy.pad refuses an empty list of widths (a 0-D x)
        return x.copy()
    pairs = {x.ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}
    if mode == "circular" and any(min(p) < 0 for p in pairs.values()):
        # torch cuts first and wraps the cut tensor (the other modes read the uncut one)
        cut = [slice(None)] * x.ndim
        for d, (before, after) in pairs.items():
            cut[d] = slice(-min(before, 0), x.shape[d] + min(after, 0))
        positive = tuple(max(v, 0) for v in pad)
        return _padded(numpy.ascontiguousarray(x[tuple(cut)]), positive, mode, value)
    widths = [(0, 0)] * x.ndim
    for d, (before, after) in pairs.items():
        widths[d] = (max(before, 0), max(after, 0))
    if mode == "constant":
        fill = numpy.array(0 if value is None else value).astype(x.dtype)
        grown = numpy.pad(x, widths, mode="constant", constant_values=fill)
    else:  # torch's reflect, replicate and circular are numpy's reflect, edge and wrap
        grown = numpy.pad(x, widths, mode=_NUMPY_MODES[mode])
    # then the negative pads cut the grown tensor: -before off the start, -after off the end
    cut = [slice(None)] * x.ndim
    for d, (before, after) in pairs.items():
        cut[d] = slice(-min(before, 0), grown.shape[d] + min(after, 0))
    return numpy.ascontiguousarray(grown[tuple(cut)])
