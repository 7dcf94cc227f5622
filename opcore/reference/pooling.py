"""Reference kernels for max_pool2d, avg_pool2d and adaptive_avg_pool2d (one window position at a
time over all of (N, C): small, and plainly torch's definitions)."""

from __future__ import annotations

import numpy

from opcore.opset.pooling import adaptive_bounds, adaptive_output_size, pooled_size
from opcore.reference._common import F64, I64, finish, quiet

__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "max_pool2d",
)


def _batched(x: numpy.ndarray) -> numpy.ndarray:
    return x[None] if x.ndim == 3 else x


def _lowest(dtype: numpy.dtype) -> float | int:
    return -numpy.inf if dtype.kind == "f" else int(numpy.iinfo(dtype).min)


def max_pool2d(
    x: numpy.ndarray,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
    return_indices: bool = False,
) -> numpy.ndarray | tuple[numpy.ndarray, numpy.ndarray]:
    """The max of each dilated window; padding (and the overhang of a ceil_mode window) never wins.
    NaN in a window gives NaN, as torch. return_indices: and where each was (_max_indices)."""
    if return_indices:
        values = _max_values(x, kernel_size, stride, padding, dilation, ceil_mode)
        return values, _max_indices(x, kernel_size, stride or kernel_size, padding, dilation, values.shape[-2:])
    return _max_values(x, kernel_size, stride, padding, dilation, ceil_mode)


def _max_values(
    x: numpy.ndarray,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
) -> numpy.ndarray:
    a = _batched(x)
    steps = stride or kernel_size
    sizes = [pooled_size(n, k, s, p, d, ceil_mode) for n, k, s, p, d in
             zip(a.shape[-2:], kernel_size, steps, padding, dilation)]  # fmt: skip
    # room for every window: the padding, and past it the overhang of the last ceil_mode window
    room = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(sizes, steps, dilation, kernel_size)]
    grown = numpy.full((*a.shape[:2], *(max(r, n + 2 * p) for r, n, p in zip(room, a.shape[-2:], padding))),
                       _lowest(a.dtype), a.dtype)  # fmt: skip
    (ph, pw), (h, w) = padding, a.shape[-2:]
    grown[:, :, ph : ph + h, pw : pw + w] = a
    out = numpy.empty((*a.shape[:2], *sizes), a.dtype)
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, steps, dilation
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            window = grown[:, :, i * sh : i * sh + dh * (kh - 1) + 1 : dh, j * sw : j * sw + dw * (kw - 1) + 1 : dw]
            out[:, :, i, j] = window.max(axis=(2, 3)) if window.size else _lowest(a.dtype)
    return out[0] if x.ndim == 3 else out


def _max_indices(
    x: numpy.ndarray,
    kernel_size: tuple[int, ...],
    steps: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    sizes: tuple[int, ...],
) -> numpy.ndarray:
    """torch's index of each window's max within its (H, W) plane, h * W + w: the window's first
    input element to start with, then each later one that is larger, or NaN (torch's CPU scan)."""
    a = _batched(x)
    (h, w), (kh, kw), (sh, sw), (dh, dw), (ph, pw) = a.shape[-2:], kernel_size, steps, dilation, padding
    out = numpy.zeros((*a.shape[:2], *sizes), I64)
    with quiet():
        for i in range(sizes[0]):
            rows = [r for r in range(i * sh - ph, i * sh - ph + dh * (kh - 1) + 1, dh) if 0 <= r < h]
            for j in range(sizes[1]):
                columns = [c for c in range(j * sw - pw, j * sw - pw + dw * (kw - 1) + 1, dw) if 0 <= c < w]
                if not rows or not columns:
                    continue
                best = numpy.full(a.shape[:2], _lowest(a.dtype), a.dtype)
                where = numpy.full(a.shape[:2], rows[0] * w + columns[0], I64)
                for r in rows:
                    for c in columns:
                        value = a[:, :, r, c]
                        better = (value > best) | (numpy.isnan(value) if a.dtype.kind == "f" else False)
                        best = numpy.where(better, value, best)
                        where = numpy.where(better, r * w + c, where)
                out[:, :, i, j] = where
    return out[0] if x.ndim == 3 else out


def avg_pool2d(
    x: numpy.ndarray,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> numpy.ndarray:
    """The sum of each window over its divisor: divisor_override, else the window's size clipped to
    the padded input (count_include_pad) or to the input; int64 divides truncating, as torch."""
    a = _batched(x)
    steps = stride or kernel_size
    sizes = [pooled_size(n, k, s, p, 1, ceil_mode) for n, k, s, p in zip(a.shape[-2:], kernel_size, steps, padding)]
    (kh, kw), (sh, sw), (ph, pw), (h, w) = kernel_size, steps, padding, a.shape[-2:]
    integral = a.dtype.kind != "f"
    compute = I64 if integral else F64
    out = numpy.zeros((*a.shape[:2], *sizes), compute)
    with quiet():
        for i in range(sizes[0]):
            top = i * sh - ph
            bottom = min(top + kh, h + ph)
            for j in range(sizes[1]):
                left = j * sw - pw
                right = min(left + kw, w + pw)
                padded_count = (bottom - top) * (right - left)
                r0, r1, c0, c1 = max(top, 0), min(bottom, h), max(left, 0), min(right, w)
                total = a[:, :, r0:r1, c0:c1].astype(compute).sum(axis=(2, 3))
                if divisor_override is not None:
                    divisor = divisor_override
                else:
                    divisor = padded_count if count_include_pad else (r1 - r0) * (c1 - c0)
                if integral:  # C++ integer division: truncation toward zero
                    quotient = numpy.abs(total) // abs(divisor)
                    out[:, :, i, j] = quotient * numpy.sign(total) * (1 if divisor > 0 else -1)
                else:
                    out[:, :, i, j] = total / divisor
        result = finish(out, a.dtype)
    return result[0] if x.ndim == 3 else result


def adaptive_avg_pool2d(x: numpy.ndarray, output_size: tuple[int | None, ...]) -> numpy.ndarray:
    """The mean of each adaptive window (see opcore.opset.pooling.adaptive_bounds)."""
    output_size = adaptive_output_size(x.shape, output_size)
    a = _batched(x)
    rows, columns = adaptive_bounds(a.shape[-2], output_size[0]), adaptive_bounds(a.shape[-1], output_size[1])
    out = numpy.zeros((*a.shape[:2], *output_size), F64)
    for i, (r0, r1) in enumerate(rows):
        for j, (c0, c1) in enumerate(columns):
            out[:, :, i, j] = a[:, :, r0:r1, c0:c1].astype(F64).mean(axis=(2, 3)) if a.size else 0.0
    result = finish(out, a.dtype)
    return result[0] if x.ndim == 3 else result
