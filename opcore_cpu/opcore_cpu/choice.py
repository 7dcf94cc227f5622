"""When the oneDNN kernels run and when plain ATen does: the checkers, with the measured crossovers.

The crossovers are the static fallback only: a problem below one is declined as ``Costly`` (oneDNN
could run it, a constant measured on one machine says ATen is faster), which a measured ranking
(``opcore.tune``, ``OPCORE_TUNE=1``) on this machine overrides. What oneDNN cannot run at all (a
bfloat16 GEMM on a CPU without AVX-512, a float16 one without AVX512-FP16 or AMX-FP16, a 1-D weight) is a
plain decline.

These run at selection time on TensorMeta (never on data; the answer is cached per signature),
and this module imports no torch, because the plugin hands these functions to the registry at load.

>>> from opcore import DType, TensorMeta
>>> linear_checker(TensorMeta((8, 64), DType.FLOAT32), TensorMeta((64, 64), DType.FLOAT32), None)[:40]
'M*K*N = 32768 < 4194304 (float32): oneDN'
"""

from __future__ import annotations

from opcore.extend import Costly, DType, Layout, TensorMeta
from opcore_cpu.system import onednn_bfloat16_reason, onednn_float16_reason

__all__ = [
    "MAX_WQ_FLOAT32_WEIGHT",
    "MIN_FLOAT16_ROWS",
    "MIN_WORK",
    "conv_checker",
    "gated_mlp_checker",
    "linear_checker",
    "linear_wq_checker",
]

# Smallest M*K*N at which oneDNN's fused linear (dense weight, as opcore.run calls it) stops losing
# to ATen's relu_(linear(x, w, b)) on this machine kind (2 vCPU AMD EPYC, AVX-512 BF16, no AMX;
# torch 2.13, oneDNN 3.12). The fused call costs about 18-20 us whatever the size, so below the
# crossover ATen wins. `python bench/cpu.py --crossover` (1 thread, min over rounds, us;
# ATen / fused dense / fused packed):
#   float32   4x64x64        4.5 /  18.0 /  16.9     4x512x512     58.1 /  70.2 /  40.3
#             1x1024x1024   87.8 /  83.4 /  81.9     4x1024x1024  303.7 / 222.2 / 102.9
#             16x512x512   122.5 / 132.6 / 104.0     64x256x256   112.5 / 121.1 / 112.5
#             64x512x512   362.7 / 345.4 / 322.4
#   -> 2^22 is the break-even zone for the dense call (within 8% either way) and where the packed
#      one wins by up to 3x; one threshold serves run and resolve, since a checker sees shapes,
#      not whether the weight is constant.
#   bfloat16  1x64x64        4.9 /  17.8 /  16.9     4x64x64       18.4 /  25.5 /  16.7
#             1x128x128     21.0 /  18.7 /  17.4     4x512x512     46.8 /  43.5 /  35.9
#   -> ATen's bfloat16 linear already runs oneDNN's matmul (plus a relu pass), so past its fixed
#      cost the fused call does not lose; the tiniest problems stay on ATen.
#   float16 (a 2-vCPU Xeon with AVX512-FP16 and AMX, no AMX-FP16; Dec 6):
#             4x64x64       36.9 /  32.9 /  30.9     4x512x512     99.2 /  95.1 /  81.6
#             2x4096x4096 4125.1 / 4010.0 / 2714.6   1x1024x1024  197.6 / 343.4 / 283.8
#             1x4096x4096 2333.0 / 4429.6 / 2880.6
#   -> past the fixed cost the fused call wins from two rows, but at one row ATen's own float16 GEMV
#      beats oneDNN's, packed or not: one row stays on ATen (MIN_FLOAT16_ROWS).
# docs/backends/cpu.md has the full tables.
MIN_WORK: dict[DType, int] = {
    DType.FLOAT32: 1 << 22,
    DType.BFLOAT16: 1 << 15,
    DType.FLOAT16: 1 << 15,
}
MIN_FLOAT16_ROWS = 2
FIXED_COST_NOTE = "oneDNN's fixed ~20 us cost per call loses to ATen here"
FLOAT16_GEMV_NOTE = "at one row ATen's float16 GEMV beats oneDNN's (packed or not) here"


def _dtype_reason(dtype: DType) -> str | None:
    if dtype is DType.BFLOAT16:
        return onednn_bfloat16_reason()
    if dtype is DType.FLOAT16:
        return onednn_float16_reason()
    if dtype not in MIN_WORK:
        return f"oneDNN's fused kernels take float32, bfloat16 and float16, not {dtype}"
    return None


def _work_reason(rows: int, work: int, dtype: DType, what: str) -> str | None:
    if dtype is DType.FLOAT16 and rows < MIN_FLOAT16_ROWS:
        return Costly(f"{rows} row ({dtype}): {FLOAT16_GEMV_NOTE}")
    least = MIN_WORK[dtype]
    if work < least:
        return Costly(f"{what} = {work} < {least} ({dtype}): {FIXED_COST_NOTE}")
    return None


def _strided(*metas: TensorMeta | None) -> str | None:
    for meta in metas:
        if meta is not None and meta.layout is not Layout.STRIDED:
            return f"a {meta.layout} tensor (oneDNN's fused calls take strided tensors)"
    return None


def linear_checker(x: TensorMeta, w: TensorMeta, b: TensorMeta | None, *_: object) -> bool | str:
    """linear / linear_relu / linear_silu / linear_gelu: a 2-D weight, a (out_features,) bias, and enough work."""
    if w.ndim != 2:
        return "oneDNN's fused linear needs a 2-D weight (out_features, in_features)"
    if b is not None and b.shape != (w.shape[0],):
        return f"oneDNN's fused linear takes a bias of shape ({w.shape[0]},) only, not {b.shape}"
    k, n = w.shape[1], w.shape[0]
    if k == 0:
        return "in_features is 0 (oneDNN has no empty inner product)"
    reason = _strided(x, w, b) or _dtype_reason(x.dtype)
    if reason:
        return reason
    if x.numel == 0 or n == 0:
        return "an empty input or output (nothing for oneDNN to do)"
    m = x.numel // k
    return _work_reason(m, m * k * n, x.dtype, "M*K*N") or True


def gated_mlp_checker(x: TensorMeta, w_gate: TensorMeta, w_up: TensorMeta, w_down: TensorMeta) -> bool | str:
    """gated_mlp: the gate GEMM (M x hidden x intermediate) must pass the linear crossover."""
    hidden, intermediate = w_gate.shape[1], w_gate.shape[0]
    if hidden == 0 or intermediate == 0:
        return "an empty hidden or intermediate size (oneDNN has no empty inner product)"
    reason = _strided(x, w_gate, w_up, w_down) or _dtype_reason(x.dtype)
    if reason:
        return reason
    if x.numel == 0 or w_down.shape[0] == 0:
        return "an empty input or output (nothing for oneDNN to do)"
    m = x.numel // hidden
    return _work_reason(m, m * hidden * intermediate, x.dtype, "M*hidden*intermediate") or True


# Smallest multiply-add count (N*OC*OH*OW * IC/groups*KH*KW) at which oneDNN's fused convolution
# stops losing to ATen's relu_(conv2d(...)). ATen's conv2d already runs oneDNN here except for
# small problems, so the gain is small: the in-place activation saved, and with resolve the packed
# weight; the fused call's fixed cost is 30-50 us. `python bench/cpu.py --crossover` (1 thread,
# 3x3, padding 1, batch 1, min over rounds, us; ATen / fused dense / fused packed):
#   float32   32ch 16x16 (2.4M):   84.4 /  97.9 /  77.5    32ch 32x32 (9.4M): 229.5 / 243.9 / 273.4
#             64ch 28x28 (28.9M): 577.6 / 580.1 / 568.3
#   bfloat16  32ch 16x16:          73.8 /  78.5 /  54.4    32ch 32x32:        151.5 / 155.7 / 152.1
#             64ch 28x28:         336.8 / 342.1 / 301.2
#   float16 (the Xeon above) 4ch 8x8: 84.2 / 95.5 / 53.6   32ch 32x32: 344.9 / 348.3 / 287.3
#             64ch 28x28:         735.2 / 748.9 / 652.0
MIN_CONV_WORK: dict[DType, int] = {
    DType.FLOAT32: 1 << 23,
    DType.BFLOAT16: 1 << 23,
    DType.FLOAT16: 1 << 23,
}


def conv_checker(
    x: TensorMeta,
    weight: TensorMeta,
    bias: TensorMeta | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
    *_: object,
) -> bool | str:
    """conv2d_relu / conv2d_silu: enough work for oneDNN's fixed cost."""
    reason = _strided(x, weight, bias) or _dtype_reason(x.dtype)
    if reason:
        return reason
    batch = x.shape[0] if x.ndim == 4 else 1
    height, width = x.shape[-2:]
    out_channels, group_channels, kernel_h, kernel_w = weight.shape
    out_h = (height + 2 * padding[0] - dilation[0] * (kernel_h - 1) - 1) // stride[0] + 1
    out_w = (width + 2 * padding[1] - dilation[1] * (kernel_w - 1) - 1) // stride[1] + 1
    if batch * out_h * out_w == 0:
        return "an empty input or output (nothing for oneDNN to do)"
    work = batch * out_channels * out_h * out_w * group_channels * kernel_h * kernel_w
    least = MIN_CONV_WORK[x.dtype]
    if work < least:
        return Costly(f"N*OC*OH*OW*IC/groups*KH*KW = {work} < {least} ({x.dtype}): {FIXED_COST_NOTE}")
    return True


# The largest weight (N*K) that the torch weight-only kernel takes with float32 or float64 x by
# default: torch 2.13's CPU _weight_int8pack_mm and _weight_int4pack_mm_for_cpu are vectorized for
# bfloat16 only; with float32 x (1x4096 @ 4096x4096, 1 thread, load ~3) they took 28 ms and 34 ms
# against 2.5 ms for F.linear on the float weight (bench/quant.py), so a large float32 weight goes
# to the graph runtimes' decompressing kernels.
MAX_WQ_FLOAT32_WEIGHT = 1 << 16


def linear_wq_checker(
    x: TensorMeta,
    qweight: TensorMeta,
    scale: TensorMeta,
    zero: TensorMeta | None,
    b: TensorMeta | None,
    bits: int,
    group_size: int,
) -> bool | str:
    """Every input; a large weight with float32 / float64 x is Costly (measured, see above).

    >>> x, q, s = TensorMeta((1, 4096), DType.FLOAT32), TensorMeta((4096, 4096), DType.UINT8), None
    >>> linear_wq_checker(x, q, s, None, None, 8, -1)[:31]
    'N*K = 16777216 > 65536 (float32'
    """
    if x.dtype in (DType.FLOAT32, DType.FLOAT64):
        weight = qweight.shape[0] * qweight.shape[1] * 8 // bits
        if weight > MAX_WQ_FLOAT32_WEIGHT:
            return Costly(
                f"N*K = {weight} > {MAX_WQ_FLOAT32_WEIGHT} ({x.dtype}): torch's weight-only CPU kernels are "
                "vectorized for bfloat16 only (float32 measured 10x slower than F.linear here)"
            )
    return True
