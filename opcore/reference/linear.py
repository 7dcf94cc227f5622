"""Reference kernels for the matrix products and the fused linear ops (float64 / int64 inside)."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.opset.indexing import check_index_range
from opcore.reference._common import F64, I64, finish, quiet
from opcore.reference.elementwise import gelu_f64, sigmoid_f64

__all__ = ["addmm", "bmm", "gated_mlp", "gather_mm", "linear", "linear_gelu", "linear_relu", "linear_silu", "matmul"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "addmm",
    "bmm",
    "gated_mlp",
    "gather_mm",
    "linear",
    "linear_gelu",
    "linear_relu",
    "linear_silu",
    "matmul",
)


def _compute(array: numpy.ndarray) -> numpy.ndarray:
    # exact integer products (int64 wraps like torch's narrower ints, modulo the final cast)
    return array.astype(F64 if array.dtype.kind == "f" else I64, copy=False)


def linear_f64(x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray | None) -> Any:
    a, m = _compute(x), _compute(w)
    # numpy.dot: BLAS straight away, a few microseconds less than matmul on small inputs
    if a.ndim <= 2:
        out = numpy.dot(a, m.T)  # a 1-D w gives a matrix-vector product
    else:
        rows = math.prod(a.shape[:-1])  # not -1: reshape cannot infer it when a dimension is 0
        out = numpy.dot(a.reshape(rows, a.shape[-1]), m.T).reshape(a.shape[:-1] + m.shape[:-1])
    if b is None:
        return out
    if isinstance(out, numpy.ndarray) and out.ndim:
        return numpy.add(out, b, out=out)  # the meta function checked b never grows the output
    return out + _compute(b)


def linear(x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray | None) -> numpy.ndarray:
    """x @ w.T + b."""
    with quiet():
        return finish(linear_f64(x, w, b), x.dtype)


def matmul(x: numpy.ndarray, y: numpy.ndarray) -> numpy.ndarray:
    """numpy.matmul follows torch.matmul's rules for 1-D operands and broadcast batches."""
    with quiet():
        return finish(numpy.matmul(_compute(x), _compute(y)), x.dtype)


def bmm(x: numpy.ndarray, y: numpy.ndarray) -> numpy.ndarray:
    """Batched x @ y (the meta function has checked the batches match)."""
    return matmul(x, y)


def gather_mm(x: numpy.ndarray, w: numpy.ndarray, index: numpy.ndarray) -> numpy.ndarray:
    """Row i: x[i] @ w[index[i]] (each index checked against w's groups)."""
    if index.size:
        check_index_range("index", int(index.min()), int(index.max()), w.shape[0], negative=False)
    with quiet():
        out = numpy.einsum("rk,rkn->rn", _compute(x), _compute(w)[index.astype(numpy.intp)])
        return finish(out.reshape(x.shape[0], w.shape[2]), x.dtype)


def addmm(
    x: numpy.ndarray, mat1: numpy.ndarray, mat2: numpy.ndarray, beta: bool | int | float, alpha: bool | int | float
) -> numpy.ndarray:
    """beta * x + alpha * (mat1 @ mat2); beta == 0 skips x, so its NaN and inf do not reach the result (torch)."""
    with quiet():
        out = numpy.dot(_compute(mat1), _compute(mat2))
        if alpha != 1:
            out = out * alpha
        if beta != 0:
            out = out + (_compute(x) if beta == 1 else _compute(x) * beta)
        return finish(numpy.broadcast_to(out, (mat1.shape[0], mat2.shape[1])), x.dtype)


def linear_relu(x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray | None) -> numpy.ndarray:
    """relu(x @ w.T + b); NaN stays NaN as in torch."""
    with quiet():
        out = linear_f64(x, w, b)
        return finish(numpy.maximum(out, out.dtype.type(0)), x.dtype)


def linear_silu(x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray | None) -> numpy.ndarray:
    """silu(x @ w.T + b)."""
    with quiet():
        out = linear_f64(x, w, b)
        return finish(out * sigmoid_f64(out), x.dtype)


def linear_gelu(x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray | None, approximate: str) -> numpy.ndarray:
    """gelu(x @ w.T + b)."""
    with quiet():
        return finish(gelu_f64(numpy.asarray(linear_f64(x, w, b)), approximate), x.dtype)


def gated_mlp(x: numpy.ndarray, w_gate: numpy.ndarray, w_up: numpy.ndarray, w_down: numpy.ndarray) -> numpy.ndarray:
    """(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, the intermediate kept in float64."""
    with quiet():
        gate = linear_f64(x, w_gate, None)
        hidden = gate * sigmoid_f64(gate) * linear_f64(x, w_up, None)
        return finish(linear_f64(hidden, w_down, None), x.dtype)
