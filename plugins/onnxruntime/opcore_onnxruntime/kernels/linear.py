"""Matrix products: linear as Gemm (transB=1, so a weight input is never transposed per call),
matmul and bmm as MatMul, addmm as MatMul scaled and added, and the fused linear + activation ops as small graphs.

Integer products run as int64 MatMul (ONNX Runtime's Gemm is float-only) and are cast back,
so narrow integers wrap as in torch. float16 runs in float32 inside the graph.
"""

from __future__ import annotations

from typing import Any

import numpy

from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import I64, compute_float, finish
from opcore_onnxruntime.kernels.elementwise import apply_gelu, apply_relu, apply_silu
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["addmm", "bmm", "gated_mlp", "linear", "linear_gelu", "linear_relu", "linear_silu", "matmul", "project"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "addmm",
    "bmm",
    "gated_mlp",
    "linear",
    "linear_gelu",
    "linear_relu",
    "linear_silu",
    "matmul",
)


def _compute(dtype: numpy.dtype) -> numpy.dtype:
    return compute_float(dtype) if dtype.kind == "f" else I64


def project(g: Graph, x: Value, w: Value, b: Value | None) -> Value:
    """x @ w.T + b in x's compute dtype (float32/float64 or int64)."""
    compute = _compute(x.dtype)
    x, w = g.cast(x, compute), g.cast(w, compute)
    b = g.cast(b, compute) if b is not None else None
    if w.rank == 1:  # a 1-D weight: a matrix-vector product, no output features
        out = g.op("MatMul", x, w, rank=max(x.ndim - 1, 0))
        return g.op("Add", out, b) if b is not None else out
    if compute.kind != "f":
        out = g.op("MatMul", x, g.op("Transpose", w, perm=[1, 0]))
        return g.op("Add", out, b) if b is not None else out
    rank = x.ndim
    bias_in_gemm = b if b is not None and (b.ndim <= 1 or rank == 2) else None
    if rank == 2:
        out = g.op("Gemm", x, w, bias_in_gemm, transB=1)
    elif rank == 1:
        row = g.op("Unsqueeze", x, g.ints([0]), rank=2)
        out = g.op("Squeeze", g.op("Gemm", row, w, bias_in_gemm, transB=1), g.ints([0]), rank=1)
    else:  # (..., K) -> (M, K) -> Gemm -> (..., N)
        flat = g.op("Flatten", x, axis=rank - 1, rank=2)
        product = g.op("Gemm", flat, w, bias_in_gemm, transB=1)
        shape = g.op("Concat", g.shape(x, 0, -1), g.shape(w, 0, 1), axis=0)
        out = g.op("Reshape", product, shape, rank=rank)
    if b is not None and bias_in_gemm is None:
        out = g.op("Add", out, b)
    return out


def build_linear(g: Graph, x: Value, w: Value, b: Value | None) -> Value:
    return finish(g, project(g, x, w, b), x.dtype)


def build_linear_relu(g: Graph, x: Value, w: Value, b: Value | None) -> Value:
    # relu after the cast: an integer product wraps to x's dtype first, as in torch
    return apply_relu(g, finish(g, project(g, x, w, b), x.dtype))


def build_linear_silu(g: Graph, x: Value, w: Value, b: Value | None) -> Value:
    return finish(g, apply_silu(g, project(g, x, w, b)), x.dtype)


def build_linear_gelu(g: Graph, x: Value, w: Value, b: Value | None, approximate: str) -> Value:
    return finish(g, apply_gelu(g, project(g, x, w, b), approximate), x.dtype)


def build_gated_mlp(g: Graph, x: Value, w_gate: Value, w_up: Value, w_down: Value) -> Value:
    hidden = g.op("Mul", apply_silu(g, project(g, x, w_gate, None)), project(g, x, w_up, None))
    return finish(g, project(g, hidden, w_down, None), x.dtype)


def build_matmul(g: Graph, x: Value, y: Value) -> Value:
    """numpy/torch matmul semantics, 1-D operands and broadcast batches included."""
    compute = _compute(x.dtype)
    if x.ndim == 1 or y.ndim == 1:
        rank = x.ndim + y.ndim - 2  # a 1-D operand's dimension is removed again
    else:
        rank = max(x.ndim, y.ndim)
    out = g.op("MatMul", g.cast(x, compute), g.cast(y, compute), rank=rank)
    return finish(g, out, x.dtype)


def build_addmm(g: Graph, x: Value, mat1: Value, mat2: Value, beta: Any, alpha: Any) -> Value:
    """beta * x + alpha * (mat1 @ mat2) in the compute dtype; beta == 0 leaves x out (torch drops its NaN)."""
    compute = _compute(x.dtype)
    out = g.op("MatMul", g.cast(mat1, compute), g.cast(mat2, compute))
    if alpha != 1:
        out = g.op("Mul", out, g.const(numpy.asarray(alpha, dtype=compute)))
    if beta != 0:
        bias = g.cast(x, compute)
        if beta != 1:
            bias = g.op("Mul", bias, g.const(numpy.asarray(beta, dtype=compute)))
        out = g.op("Add", out, bias)
    return finish(g, out, x.dtype)


linear = onnx_kernel("linear", build_linear)
linear_relu = onnx_kernel("linear_relu", build_linear_relu)
linear_silu = onnx_kernel("linear_silu", build_linear_silu)
linear_gelu = onnx_kernel("linear_gelu", build_linear_gelu)
gated_mlp = onnx_kernel("gated_mlp", build_gated_mlp)
matmul = onnx_kernel("matmul", build_matmul)
bmm = onnx_kernel("bmm", build_matmul)
addmm = onnx_kernel("addmm", build_addmm)
