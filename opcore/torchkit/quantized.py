"""The torch kernels of ``linear_wq`` and ``embedding_wq`` (CPU and CUDA). ``linear_wq``: the codes
packed once into torch's own weight-only formats, then one ATen call per run.

- 8 bits, one group per row: ``torch.ops.aten._weight_int8pack_mm`` over the codes minus 128 as
  int8 with the per-channel scale; an asymmetric zero point adds ``rowsum(x) * scale * (128 - zero)``.
- 4 bits, groups of 32/64/128/256, N a multiple of 16 (CPU) or 8 (CUDA):
  ``_weight_int4pack_mm_for_cpu`` / ``_weight_int4pack_mm`` over the packed codes with scales and
  float zeros ``(8 - zero) * scale`` (torch computes ``(code - 8) * scale + zero``).
- anything else (grouped 8 bits, other groups, float64, CUDA int4 outside bfloat16): the weight
  dequantized once into x's dtype, then ``F.linear`` (correct, not smaller).

``prepare_linear_wq`` packs at ``opcore.resolve`` (constants qweight, scale, zero, b); the plain
kernel packs on every call (the same code: a single ``opcore.run`` is for checks, not speed).

>>> from opcore.quantize import quantize_weight
>>> qw = quantize_weight(torch.randn(32, 64))
>>> linear_wq(torch.randn(2, 64), *qw.tensors(), None, 8, -1).shape
torch.Size([2, 32])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from opcore.opset.quantized import group_of
from opcore.torchkit.freeargs import free_positions, with_free_args
from opcore.torchkit.lookup import embedding_rows

__all__ = ["INT4_GROUPS", "embedding_wq", "linear_wq", "packing_of", "prepare_linear_wq"]

INT4_GROUPS = (32, 64, 128, 256)  # the group sizes torch's int4 kernels take
_NAMES = ("x", "qweight", "scale", "zero", "b", "bits", "group_size")
Tensor = torch.Tensor


def packing_of(x_dtype: torch.dtype, device_type: str, n: int, k: int, bits: int, group_size: int) -> str:
    """Which form the weight takes: "int8pack", "int4pack" or "dequantized".

    >>> packing_of(torch.bfloat16, "cpu", 4096, 4096, 4, 128)
    'int4pack'
    """
    group = group_of(group_size, k)
    if x_dtype not in (torch.float32, torch.bfloat16, torch.float16) or k == 0 or n == 0:
        return "dequantized"
    if bits == 8 and group == k:
        return "int8pack"
    if bits == 4 and group in INT4_GROUPS and k % group == 0:
        if device_type == "cpu" and n % 16 == 0:
            return "int4pack"
        if device_type == "cuda" and x_dtype == torch.bfloat16 and n % 8 == 0 and k % 1024 == 0:
            return "int4pack"
    return "dequantized"


def _dequantized(qweight: Tensor, scale: Tensor, zero: Tensor | None, bits: int, group_size: int, dtype: Any) -> Tensor:
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    codes = _codes(qweight, bits).to(compute)
    n, k = codes.shape
    group = group_of(group_size, k)
    groups = k // group if group else 0
    if not groups:
        return codes.to(dtype)
    middle = float(1 << (bits - 1))
    zeros = middle if zero is None else zero.to(compute).reshape(n, groups, 1)
    weight = (codes.reshape(n, groups, group) - zeros) * scale.to(compute).reshape(n, groups, 1)
    return weight.reshape(n, k).to(dtype)


def _codes(qweight: Tensor, bits: int) -> Tensor:
    """The (N, K) uint8 codes of the packed qweight."""
    if bits == 8:
        return qweight
    return torch.stack((qweight & 15, qweight >> 4), dim=-1).reshape(qweight.shape[0], qweight.shape[1] * 2)


def _rows(x: Tensor) -> Tensor:
    """x as the 2-D row-major (M, K) the weight-only kernels require (a copy only where it is not)."""
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.is_contiguous() else rows.contiguous()


def _int8pack(
    qweight: Tensor, scale: Tensor, zero: Tensor | None, b: Tensor | None, dtype: torch.dtype
) -> Callable[[Tensor], Tensor]:
    signed = (qweight.to(torch.int16) - 128).to(torch.int8).contiguous()
    scales = scale.reshape(-1).to(dtype).contiguous()
    shift = None if zero is None else (scale.reshape(-1).float() * (128.0 - zero.reshape(-1).float())).to(dtype)
    mm = torch.ops.aten._weight_int8pack_mm
    n = signed.shape[0]

    def run(x: Tensor) -> Tensor:
        rows = _rows(x)
        if not rows.shape[0]:
            return x.new_empty((*x.shape[:-1], n))
        out = mm(rows, signed, scales)
        if shift is not None:
            out = torch.addmm(out, rows.sum(-1, keepdim=True), shift.unsqueeze(0))
        if b is not None:
            out = out.add_(b)
        return out.reshape(*x.shape[:-1], n)

    return run


def _int4pack(
    qweight: Tensor, scale: Tensor, zero: Tensor | None, b: Tensor | None, group: int, dtype: torch.dtype
) -> Callable[[Tensor], Tensor]:
    n = qweight.shape[0]
    scales = scale.float().t()  # (G, N)
    zeros = 8.0 if zero is None else zero.float().t()
    scale_and_zeros = torch.stack([scales, (8.0 - zeros) * scales], dim=-1).to(dtype).contiguous()
    if qweight.device.type == "cpu":
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(_codes(qweight, 4).to(torch.int32), 8)
        mm = torch.ops.aten._weight_int4pack_mm_for_cpu
    else:  # CUDA: bytes with the even input index in the high nibble (unverified without a GPU)
        swapped = ((qweight & 15) << 4) | (qweight >> 4)
        packed = torch.ops.aten._convert_weight_to_int4pack(swapped.contiguous(), 8)
        mm = torch.ops.aten._weight_int4pack_mm

    def run(x: Tensor) -> Tensor:
        rows = _rows(x)
        if not rows.shape[0]:
            return x.new_empty((*x.shape[:-1], n))
        out = mm(rows, packed, group, scale_and_zeros)
        if b is not None:
            out = out.add_(b)
        return out.reshape(*x.shape[:-1], n)

    return run


def _packed(
    x: Tensor, qweight: Tensor, scale: Tensor, zero: Tensor | None, b: Tensor | None, bits: int, group_size: int
) -> Callable[[Tensor], Tensor]:
    """The run function of the weight packed for x's dtype and device."""
    n, k = qweight.shape[0], qweight.shape[1] * 8 // bits
    form = packing_of(x.dtype, x.device.type, n, k, bits, group_size)
    if form == "int8pack":
        return _int8pack(qweight, scale, zero, b, x.dtype)
    if form == "int4pack":
        return _int4pack(qweight, scale, zero, b, group_of(group_size, k), x.dtype)
    weight = _dequantized(qweight, scale, zero, bits, group_size, x.dtype)
    return lambda rows: F.linear(rows, weight, b)


def linear_wq(
    x: Tensor, qweight: Tensor, scale: Tensor, zero: Tensor | None, b: Tensor | None, bits: int, group_size: int
) -> Tensor:
    """x @ ((qweight - zero) * scale).T + b, the weight packed for this call."""
    return _packed(x, qweight, scale, zero, b, bits, group_size)(x)


def prepare_linear_wq(args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
    """The weight packed once when qweight, scale and zero (if any) and b (if any) are constants."""
    x, qweight, scale, zero, b = args[:5]
    weights = {"qweight", "scale"} | ({"zero"} if zero is not None else set()) | ({"b"} if b is not None else set())
    free = free_positions(args, _NAMES, constants)
    if not weights <= constants or free != [0]:
        template = [None if i in free else value for i, value in enumerate(args)]
        return with_free_args(linear_wq, template, free)
    return _packed(x, qweight, scale, zero, b, args[5], args[6])


def embedding_wq(
    input: Tensor, qweight: Tensor, scale: Tensor, zero: Tensor | None, bits: int, group_size: int
) -> Tensor:
    """The rows at the indices, dequantized (only those rows: a decode step reads one row a token)."""
    flat = input.reshape(-1)
    codes = embedding_rows(flat, qweight, noun="table")
    # the rows' scales and zero points gathered as the codes are (one embedding kernel, no index kernel)
    scales, zeros = F.embedding(flat, scale), None if zero is None else F.embedding(flat, zero)
    picked = _dequantized(codes, scales, zeros, bits, group_size, scale.dtype)
    return picked.reshape(*input.shape, picked.shape[-1])
