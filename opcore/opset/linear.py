"""Matrix-product contracts: linear, matmul, bmm, gather_mm, and the fused linear + activation ops.

The fused ops decompose into the unfused ones through ``opcore.run``, so a backend that
has only ``linear`` and ``relu`` still serves ``linear_relu``.

>>> from opcore.types import TensorMeta, DType
>>> LINEAR.meta(TensorMeta((5, 3), DType.FLOAT32), TensorMeta((4, 3), DType.FLOAT32), None).shape
(5, 4)
"""

from __future__ import annotations

from functools import partial
from typing import Any

from opcore.contracts import OpContract, define_op
from opcore.errors import ShapeError
from opcore.meta import (
    FLOATING,
    NUMERIC,
    broadcast_shapes,
    check_choice,
    check_dtype,
    check_floating,
    check_min_rank,
    check_rank,
    check_same_dtype,
    shape_text,
)
from opcore.opset.elementwise import APPROXIMATIONS, check_scalar_factor
from opcore.opset.nn import INDEX_DTYPES
from opcore.types import TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="linear")

__all__ = [
    "ADDMM",
    "BMM",
    "CONTRACTS",
    "GATED_MLP",
    "GATHER_MM",
    "LINEAR",
    "LINEAR_GELU",
    "LINEAR_RELU",
    "LINEAR_SILU",
    "MATMUL",
]

_NUMERIC_FIX = "torch's CPU matrix products support integer and floating dtypes, not bool"


def linear_meta(x: TensorMeta, w: TensorMeta, b: TensorMeta | None) -> TensorMeta:
    """x (..., in), w (out, in) or (in,), b broadcasting to the output; equal numeric dtypes."""
    check_min_rank("x", x, 1, what="a tensor of at least 1 dimension (..., in_features)")
    check_rank("w", w, (1, 2), what="a 1-D (in_features,) or 2-D (out_features, in_features) weight")
    check_dtype("x", x, NUMERIC, fix=_NUMERIC_FIX)
    check_same_dtype(("x", x), ("w", w), ("b", b))
    if x.shape[-1] != w.shape[-1]:
        raise ShapeError(
            arg="w",
            expected=f"in_features = {x.shape[-1]} (the last size of 'x' {shape_text(x.shape)}) as its last size",
            found=f"a weight of shape {shape_text(w.shape)}",
            fix="pass the weight as (out_features, in_features), as torch.nn.Linear stores it",
        )
    out_shape = x.shape[:-1] + w.shape[:-1]
    if b is not None:
        # torch adds the bias with broadcasting, but never lets it grow the output
        try:
            grown = broadcast_shapes(("b", b.shape), ("output", out_shape))
        except ShapeError:
            grown = None
        if grown != out_shape:
            example = f" such as ({w.shape[0]},)" if w.ndim == 2 else ""
            raise ShapeError(
                arg="b",
                expected=f"a bias that broadcasts to the output shape {shape_text(out_shape)}{example}",
                found=f"shape {shape_text(b.shape)}",
            )
    return TensorMeta(out_shape, x.dtype, x.device)


def linear_float_meta(x: TensorMeta, w: TensorMeta, b: TensorMeta | None) -> TensorMeta:
    """linear's checks, floating dtypes only (the activation needs them)."""
    out = linear_meta(x, w, b)
    check_floating("x", x)
    return out


def linear_gelu_meta(x: TensorMeta, w: TensorMeta, b: TensorMeta | None, approximate: str) -> TensorMeta:
    """linear_float_meta's checks and approximate "none" or "tanh"."""
    check_choice("approximate", approximate, APPROXIMATIONS)
    return linear_float_meta(x, w, b)


def matmul_meta(x: TensorMeta, y: TensorMeta) -> TensorMeta:
    """torch.matmul's shapes: 1-D operands promoted and removed, batches broadcast; equal dtypes."""
    check_min_rank("x", x, 1)
    check_min_rank("y", y, 1)
    check_dtype("x", x, NUMERIC, fix=_NUMERIC_FIX)
    check_same_dtype(("x", x), ("y", y))
    inner = y.shape[0] if y.ndim == 1 else y.shape[-2]
    if x.shape[-1] != inner:
        where = "its size" if y.ndim == 1 else "size at dim -2"
        raise ShapeError(
            arg="y",
            expected=f"{where} = {x.shape[-1]} (the last size of 'x' {shape_text(x.shape)})",
            found=f"shape {shape_text(y.shape)}",
        )
    # torch.matmul: a 1-D x is a row vector, a 1-D y a column vector, both removed again
    rows = x.shape[-2:-1]
    cols = y.shape[-1:] if y.ndim >= 2 else ()
    batch = broadcast_shapes(("x", x.shape[:-2]), ("y", y.shape[:-2]))
    return TensorMeta(batch + rows + cols, x.dtype, x.device)


def bmm_meta(x: TensorMeta, y: TensorMeta) -> TensorMeta:
    """Two 3-D tensors (b, n, k) and (b, k, m) of equal numeric dtypes."""
    check_rank("x", x, 3, what="a 3-D tensor (batch, n, k)")
    check_rank("y", y, 3, what="a 3-D tensor (batch, k, m)")
    check_dtype("x", x, NUMERIC, fix=_NUMERIC_FIX)
    check_same_dtype(("x", x), ("y", y))
    wanted = (x.shape[0], x.shape[2])
    if y.shape[:2] != wanted:
        raise ShapeError(
            arg="y",
            expected=f"(batch, k) = {shape_text(wanted)} as its first two sizes, from 'x' {shape_text(x.shape)}",
            found=f"shape {shape_text(y.shape)}",
            fix="bmm does not broadcast; use matmul for broadcasting batches",
        )
    return TensorMeta((x.shape[0], x.shape[1], y.shape[2]), x.dtype, x.device)


def gather_mm_meta(x: TensorMeta, w: TensorMeta, index: TensorMeta) -> TensorMeta:
    """x (rows, k), w (groups, k, n), index (rows,) int32 or int64: row i of the result is
    x[i] @ w[index[i]]; x and w of one numeric dtype. The indices are data: kernels check their range."""
    check_rank("x", x, 2, what="a 2-D tensor (rows, k)")
    check_rank("w", w, 3, what="a 3-D tensor (groups, k, n)")
    check_rank("index", index, 1, what="a 1-D tensor (rows,) of group indices")
    check_dtype("x", x, NUMERIC, fix=_NUMERIC_FIX)
    check_same_dtype(("x", x), ("w", w))
    check_dtype("index", index, INDEX_DTYPES, fix="convert the indices with .astype('int64')")
    if w.shape[1] != x.shape[1]:
        raise ShapeError(
            arg="w",
            expected=f"k = {x.shape[1]} (the last size of 'x' {shape_text(x.shape)}) as its size at dim 1",
            found=f"shape {shape_text(w.shape)}",
            fix="pass w as (groups, k, n); transformers' experts stored (groups, n, k) need .transpose(1, 2)",
        )
    if index.shape[0] != x.shape[0]:
        raise ShapeError(
            arg="index",
            expected=f"one group index per row of 'x': shape ({x.shape[0]},)",
            found=f"shape {shape_text(index.shape)}",
        )
    if w.shape[0] == 0 and x.shape[0] > 0:
        raise ShapeError(
            arg="w",
            expected="at least one group for the rows of 'x' to index",
            found=f"shape {shape_text(w.shape)}",
        )
    return TensorMeta((x.shape[0], w.shape[2]), x.dtype, x.device)


def addmm_meta(
    x: TensorMeta, mat1: TensorMeta, mat2: TensorMeta, beta: bool | int | float, alpha: bool | int | float
) -> TensorMeta:
    """mat1 (n, k) @ mat2 (k, m), x broadcasting to (n, m) without growing it; equal numeric dtypes;
    beta and alpha fit the dtype (an int for integer tensors), as torch.addmm checks them."""
    check_rank("mat1", mat1, 2, what="a 2-D matrix (n, k)")
    check_rank("mat2", mat2, 2, what="a 2-D matrix (k, m)")
    check_dtype("x", x, NUMERIC, fix=_NUMERIC_FIX)
    check_same_dtype(("x", x), ("mat1", mat1), ("mat2", mat2))
    if mat1.shape[1] != mat2.shape[0]:
        raise ShapeError(
            arg="mat2",
            expected=f"k = {mat1.shape[1]} rows (the columns of 'mat1' {shape_text(mat1.shape)})",
            found=f"shape {shape_text(mat2.shape)}",
            fix="pass mat2 as (k, m); a torch.nn.Linear weight (m, k) needs .t() (or use linear)",
        )
    out_shape = (mat1.shape[0], mat2.shape[1])
    try:
        grown = broadcast_shapes(("x", x.shape), ("output", out_shape))
    except ShapeError:
        grown = None
    if grown != out_shape:
        raise ShapeError(
            arg="x",
            expected=f"a tensor that broadcasts to the product's shape {shape_text(out_shape)}",
            found=f"shape {shape_text(x.shape)}",
            fix=f"pass x of shape {shape_text(out_shape)}, ({out_shape[1]},) or ()",
        )
    check_scalar_factor(beta, x.dtype, arg="beta")
    check_scalar_factor(alpha, x.dtype, arg="alpha")
    return TensorMeta(out_shape, x.dtype, x.device)


def gated_mlp_meta(x: TensorMeta, w_gate: TensorMeta, w_up: TensorMeta, w_down: TensorMeta) -> TensorMeta:
    """x (..., hidden), w_gate and w_up (inter, hidden), w_down (out, inter); one floating dtype."""
    check_min_rank("x", x, 1, what="a tensor of at least 1 dimension (..., hidden)")
    for name, weight in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        check_rank(name, weight, 2, what="a 2-D weight (out_features, in_features)")
    check_floating("x", x)
    check_same_dtype(("x", x), ("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down))
    if w_gate.shape[1] != x.shape[-1]:
        raise ShapeError(
            arg="w_gate",
            expected=f"shape (intermediate, {x.shape[-1]}) to match the last size of 'x' {shape_text(x.shape)}",
            found=f"shape {shape_text(w_gate.shape)}",
        )
    if w_up.shape != w_gate.shape:
        raise ShapeError(
            arg="w_up", expected=f"the shape of 'w_gate' {shape_text(w_gate.shape)}", found=shape_text(w_up.shape)
        )
    if w_down.shape[1] != w_gate.shape[0]:
        raise ShapeError(
            arg="w_down",
            expected=f"shape (out_features, {w_gate.shape[0]}) to take the intermediate size of 'w_gate'",
            found=f"shape {shape_text(w_down.shape)}",
        )
    return TensorMeta((*x.shape[:-1], w_down.shape[0]), x.dtype, x.device)


# --- decompositions: the unfused parts, each dispatched on its own ----------------------------


def linear_relu_decomposition(x: Any, w: Any, b: Any) -> Any:
    """relu(linear(x, w, b)), each part dispatched."""
    import opcore

    return opcore.run("relu", opcore.run("linear", x, w, b))


def linear_silu_decomposition(x: Any, w: Any, b: Any) -> Any:
    """silu(linear(x, w, b)), each part dispatched."""
    import opcore

    return opcore.run("silu", opcore.run("linear", x, w, b))


def linear_gelu_decomposition(x: Any, w: Any, b: Any, approximate: str) -> Any:
    """gelu(linear(x, w, b)), each part dispatched."""
    import opcore

    return opcore.run("gelu", opcore.run("linear", x, w, b), approximate=approximate)


def gated_mlp_decomposition(x: Any, w_gate: Any, w_up: Any, w_down: Any) -> Any:
    """linear(silu(linear(x, w_gate)) * linear(x, w_up), w_down), each part dispatched."""
    import opcore

    gate = opcore.run("silu", opcore.run("linear", x, w_gate))
    return opcore.run("linear", opcore.run("mul", gate, opcore.run("linear", x, w_up)), w_down)


LINEAR = define(
    "linear(Tensor x, Tensor w, Tensor? b=None) -> Tensor",
    meta=linear_meta,
    dtypes=NUMERIC,
    doc="x @ w.T + b with w of shape (out_features, in_features) or (in_features,); "
    "mirrors torch.nn.functional.linear.",
    tags=("linear",),
)
MATMUL = define(
    "matmul(Tensor x, Tensor y) -> Tensor",
    meta=matmul_meta,
    dtypes=NUMERIC,
    doc="Matrix product with 1-D promotion and broadcast batches; mirrors torch.matmul.",
    tags=("linear",),
)
BMM = define(
    "bmm(Tensor x, Tensor y) -> Tensor",
    meta=bmm_meta,
    dtypes=NUMERIC,
    doc="Batched matrix product of two 3-D tensors with equal batches; mirrors torch.bmm.",
    tags=("linear",),
)
GATHER_MM = define(
    "gather_mm(Tensor x, Tensor w, Tensor index) -> Tensor",
    meta=gather_mm_meta,
    dtypes=NUMERIC,
    doc="Row i of x times the matrix w[index[i]]: x (rows, k), w (groups, k, n), index (rows,) -> (rows, n), "
    "as a mixture of experts multiplies each token by its expert's weight (DGL's gather_mm); mirrors "
    "torch.bmm(x.unsqueeze(1), w[index]).squeeze(1) without gathering the matrices.",
    tags=("linear",),
)
ADDMM = define(
    "addmm(Tensor x, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
    meta=addmm_meta,
    dtypes=NUMERIC,
    doc="beta * x + alpha * (mat1 @ mat2) with 2-D mat1 (n, k), mat2 (k, m) and x broadcasting to (n, m); "
    "beta=0 ignores x (its NaN too); mirrors torch.addmm.",
    tags=("linear",),
)
LINEAR_RELU = define(
    "linear_relu(Tensor x, Tensor w, Tensor? b=None) -> Tensor",
    meta=linear_meta,
    dtypes=NUMERIC,
    doc="relu(linear(x, w, b)) in one call; mirrors torch.relu(torch.nn.functional.linear(...)).",
    tags=("linear", "fused"),
    decomposition=linear_relu_decomposition,
)
LINEAR_SILU = define(
    "linear_silu(Tensor x, Tensor w, Tensor? b=None) -> Tensor",
    meta=linear_float_meta,
    dtypes=FLOATING,
    doc="silu(linear(x, w, b)) in one call; mirrors torch.nn.functional.silu(torch.nn.functional.linear(...)).",
    tags=("linear", "fused"),
    decomposition=linear_silu_decomposition,
)
LINEAR_GELU = define(
    'linear_gelu(Tensor x, Tensor w, Tensor? b=None, *, str approximate="none") -> Tensor',
    meta=linear_gelu_meta,
    dtypes=FLOATING,
    doc="gelu(linear(x, w, b)) in one call; mirrors torch.nn.functional.gelu(torch.nn.functional.linear(...)).",
    tags=("linear", "fused"),
    decomposition=linear_gelu_decomposition,
)
GATED_MLP = define(
    "gated_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down) -> Tensor",
    meta=gated_mlp_meta,
    dtypes=FLOATING,
    doc="linear(silu(linear(x, w_gate)) * linear(x, w_up), w_down), the LLaMA-style feed-forward block; "
    "mirrors that torch expression.",
    tags=("linear", "fused"),
    decomposition=gated_mlp_decomposition,
)

CONTRACTS: tuple[OpContract, ...] = (
    LINEAR,
    MATMUL,
    BMM,
    GATHER_MM,
    ADDMM,
    LINEAR_RELU,
    LINEAR_SILU,
    LINEAR_GELU,
    GATED_MLP,
)
