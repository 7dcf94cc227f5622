"""Matrix products (float32 and float16 only; the CPU plugin computes integer products in float):
linear as MatMul with transpose_b (a weight Constant becomes a pre-packed FullyConnected),
matmul and bmm as MatMul, addmm as MatMul scaled and added, and the fused linear + activation ops as small graphs.
"""

from __future__ import annotations

from typing import Any

from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops, rank_of
from opcore_openvino.kernels.elementwise import apply_gelu, apply_relu, apply_silu

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


def project(g: Graph, x: Node, w: Node, b: Node | None) -> Node:
    """x @ w.T + b."""
    out = ops.matmul(x, w, False, rank_of(w) == 2)  # a 1-D weight: a matrix-vector product
    return ops.add(out, b) if b is not None else out


def build_linear(g: Graph, x: Node, w: Node, b: Node | None) -> Node:
    return project(g, x, w, b)


def build_linear_relu(g: Graph, x: Node, w: Node, b: Node | None) -> Node:
    return apply_relu(g, project(g, x, w, b))


def build_linear_silu(g: Graph, x: Node, w: Node, b: Node | None) -> Node:
    return apply_silu(g, project(g, x, w, b))


def build_linear_gelu(g: Graph, x: Node, w: Node, b: Node | None, approximate: str) -> Node:
    return apply_gelu(g, project(g, x, w, b), approximate)


def build_gated_mlp(g: Graph, x: Node, w_gate: Node, w_up: Node, w_down: Node) -> Node:
    hidden = ops.multiply(apply_silu(g, project(g, x, w_gate, None)), project(g, x, w_up, None))
    return project(g, hidden, w_down, None)


def build_matmul(g: Graph, x: Node, y: Node) -> Node:
    return ops.matmul(x, y, False, False)


def build_addmm(g: Graph, x: Node, mat1: Node, mat2: Node, beta: Any, alpha: Any) -> Node:
    """beta * x + alpha * (mat1 @ mat2); beta == 0 leaves x out (torch drops its NaN)."""
    dtype = dtype_of(mat1)
    out = ops.matmul(mat1, mat2, False, False)
    if alpha != 1:
        out = ops.multiply(out, g.const(alpha, dtype))
    if beta != 0:
        out = ops.add(out, x if beta == 1 else ops.multiply(x, g.const(beta, dtype)))
    return out


linear = ov_kernel("linear", build_linear)
linear_relu = ov_kernel("linear_relu", build_linear_relu)
linear_silu = ov_kernel("linear_silu", build_linear_silu)
linear_gelu = ov_kernel("linear_gelu", build_linear_gelu)
gated_mlp = ov_kernel("gated_mlp", build_gated_mlp)
matmul = ov_kernel("matmul", build_matmul)
bmm = ov_kernel("bmm", build_matmul)
addmm = ov_kernel("addmm", build_addmm)
