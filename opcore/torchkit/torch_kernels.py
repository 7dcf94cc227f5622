"""Device-generic torch kernels for every built-in op: the same code serves the CPU and the CUDA backend.

Each function takes the op's bound arguments positionally in schema order (tensors are torch
tensors on one device) and returns a tensor of exactly the contract's output dtype. Input checks
already ran in the contract's meta function; what is left here are the few places where torch
itself cannot follow the contract (a data-dependent error, a bias with a 1-D weight) and the
ones where torch would warn.

Where a torch function already has the contract's signature and semantics, the kernel *is* that
function, and the fastest one: the C binding (``relu = torch.relu``, ``silu = torch._C._nn.silu``,
``layer_norm = torch.layer_norm``), not ``torch.nn.functional``'s Python wrapper around it, and never
the boxed ``torch.ops.aten.X.default`` (about 1.5-2x a direct call for tiny tensors). A kernel whose
general form needs a Python branch for a rare signature carries ``specialize(*metas)``, which the
dispatcher asks once per signature for the callable to run (``linear``: ``F.linear`` itself unless
a bias sits beside a 1-D weight).

>>> import torch
>>> linear_relu(torch.ones(2, 3), torch.ones(4, 3), None).shape
torch.Size([2, 4])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from opcore.errors import ArgumentError
from opcore.opset.indexing import check_index_range
from opcore.opset.pooling import adaptive_output_size
from opcore.torchkit.conv import conv1d, conv2d
from opcore.torchkit.creation import arange, full, full_like, ones, ones_like, zeros, zeros_like
from opcore.torchkit.lookup import embedding_rows
from opcore.torchkit.quantized import embedding_wq, linear_wq
from opcore.types import DType

__all__ = [
    "abs",
    "adaptive_avg_pool2d",
    "add",
    "addmm",
    "amax",
    "amin",
    "arange",
    "argmax",
    "avg_pool2d",
    "batch_norm",
    "bmm",
    "cast",
    "cat",
    "ceil",
    "chunk",
    "clamp",
    "clone",
    "conv1d",
    "conv2d",
    "conv2d_relu",
    "conv2d_silu",
    "cos",
    "cumsum",
    "div",
    "embedding",
    "embedding_wq",
    "eq",
    "erf",
    "exp",
    "expand",
    "flatten",
    "full",
    "full_like",
    "gated_mlp",
    "gather",
    "gather_mm",
    "ge",
    "gelu",
    "group_norm",
    "gt",
    "hardsigmoid",
    "hardswish",
    "index",
    "layer_norm",
    "le",
    "linear",
    "linear_gelu",
    "linear_relu",
    "linear_silu",
    "linear_wq",
    "log",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "masked_fill",
    "matmul",
    "max_pool2d",
    "mean",
    "minimum",
    "mul",
    "ne",
    "neg",
    "ones",
    "ones_like",
    "pad",
    "permute",
    "pow",
    "relu",
    "reshape",
    "rms_norm",
    "rsqrt",
    "scaled_dot_product_attention",
    "select",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "slice",
    "softmax",
    "softplus",
    "split",
    "split_with_sizes",
    "sqrt",
    "squeeze",
    "sub",
    "sum",
    "tanh",
    "transpose",
    "unsqueeze",
    "where",
    "zeros",
    "zeros_like",
]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "abs",
    "adaptive_avg_pool2d",
    "add",
    "addmm",
    "amax",
    "amin",
    "arange",
    "argmax",
    "avg_pool2d",
    "batch_norm",
    "bmm",
    "cast",
    "cat",
    "ceil",
    "chunk",
    "clamp",
    "clone",
    "conv1d",
    "conv2d",
    "conv2d_relu",
    "conv2d_silu",
    "cos",
    "cumsum",
    "div",
    "embedding",
    "embedding_wq",
    "eq",
    "erf",
    "exp",
    "expand",
    "flatten",
    "full",
    "full_like",
    "gated_mlp",
    "gather",
    "gather_mm",
    "ge",
    "gelu",
    "group_norm",
    "gt",
    "hardsigmoid",
    "hardswish",
    "index",
    "layer_norm",
    "le",
    "linear",
    "linear_gelu",
    "linear_relu",
    "linear_silu",
    "linear_wq",
    "log",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "masked_fill",
    "matmul",
    "max_pool2d",
    "mean",
    "minimum",
    "mul",
    "ne",
    "neg",
    "ones",
    "ones_like",
    "pad",
    "permute",
    "pow",
    "relu",
    "reshape",
    "rms_norm",
    "rsqrt",
    "scaled_dot_product_attention",
    "select",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "slice",
    "softmax",
    "softplus",
    "split",
    "split_with_sizes",
    "sqrt",
    "squeeze",
    "sub",
    "sum",
    "tanh",
    "transpose",
    "unsqueeze",
    "where",
    "zeros",
    "zeros_like",
)

Tensor = torch.Tensor
Operand = Any  # a tensor or a Python number

# --- elementwise -------------------------------------------------------------------------------


def add(x: Tensor, other: Operand, alpha: Any) -> Tensor:
    """x + alpha * other (torch.add's broadcasting and type promotion)."""
    return torch.add(x, other, alpha=alpha)


def sub(x: Tensor, other: Operand, alpha: Any) -> Tensor:
    """x - alpha * other."""
    return torch.sub(x, other, alpha=alpha)


mul = torch.mul


def div(x: Tensor, other: Operand, rounding_mode: str | None) -> Tensor:
    """x / other; an integer division by zero is the caller's error, as in the reference backend.

    An integer division of the type's minimum by -1 overflows; the CPU's idiv traps on it and
    torch's truncating kernel (int32, int64) kills the process with SIGFPE. It is decided here,
    before torch runs: the quotient is -x, which wraps to the minimum, as the reference returns.
    """
    if rounding_mode is not None and not x.is_floating_point() and not x.is_complex():
        dtype = torch.result_type(x, other)
        if dtype.is_signed and not dtype.is_floating_point:
            minus_one = other == -1
            if isinstance(minus_one, bool):
                if minus_one:
                    return torch.neg(x.to(dtype))
            elif bool(minus_one.any()):
                safe = torch.where(minus_one, torch.ones_like(other), other)
                quotient = div(x, safe, rounding_mode)
                return torch.where(minus_one, torch.neg(x.to(dtype)), quotient)
    try:
        return torch.div(x, other, rounding_mode=rounding_mode)
    except RuntimeError as error:
        if "ZeroDivisionError" not in str(error):
            raise
        raise ArgumentError(
            arg="other",
            expected=f"no zero divisor for an integer division with rounding_mode={rounding_mode!r}",
            found="a zero",
            fix="divide floating tensors to get inf/nan instead",
        ) from None


relu = torch.relu
silu = torch._C._nn.silu  # what F.silu calls (its wrapper only adds the inplace branch)
sigmoid = torch.sigmoid
tanh = torch.tanh
exp = torch.exp
neg = torch.neg
abs = torch.abs
sqrt = torch.sqrt
rsqrt = torch.rsqrt
erf = torch.erf
cos = torch.cos
sin = torch.sin
log = torch.log
ceil = torch.ceil
sign = torch.sign
minimum = torch.minimum
eq = torch.eq
ne = torch.ne
lt = torch.lt
le = torch.le
gt = torch.gt
ge = torch.ge
logical_and = torch.logical_and
logical_or = torch.logical_or
logical_not = torch.logical_not


pow = torch.pow
softplus = torch._C._nn.softplus  # softplus(x, beta, threshold): what F.softplus calls
hardswish = torch._C._nn.hardswish
hardsigmoid = torch._C._nn.hardsigmoid


def cast(x: Tensor, dtype: str) -> Tensor:
    """Tensor.to(dtype) (a copy only where the dtype changes, as torch's own)."""
    return x.to(DType.parse(dtype).to_torch())


def gelu(x: Tensor, approximate: str) -> Tensor:
    """Exact or tanh-approximated gelu."""
    return F.gelu(x, approximate=approximate)


# --- reductions and selection ----------------------------------------------------------------


def sum(x: Tensor, dim: tuple[int, ...] | None, keepdim: bool) -> Tensor:
    """Sum over dim (None: every dim, as torch's [] means)."""
    return torch.sum(x, dim or (), keepdim)


def mean(x: Tensor, dim: tuple[int, ...] | None, keepdim: bool) -> Tensor:
    """Mean over dim (None: every dim)."""
    return torch.mean(x, dim or (), keepdim)


def amax(x: Tensor, dim: tuple[int, ...] | None, keepdim: bool) -> Tensor:
    return torch.amax(x, dim or (), keepdim)


def amin(x: Tensor, dim: tuple[int, ...] | None, keepdim: bool) -> Tensor:
    return torch.amin(x, dim or (), keepdim)


argmax = torch.argmax  # argmax(x, dim, keepdim): the contract's arguments, in its order


def cumsum(x: Tensor, dim: int, dtype: str | None) -> Tensor:
    return torch.cumsum(x, dim, dtype=None if dtype is None else DType.parse(dtype).to_torch())


where = torch.where
masked_fill = torch.masked_fill
clamp = torch.clamp


# --- matrix products ---------------------------------------------------------------------------


def linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """x @ w.T + b. torch's addmv refuses a bias beside a 1-D weight and a batched x; the contract
    allows any bias that broadcasts to the output without growing it, so that case adds it apart.
    """
    if b is not None and w.ndim == 1 and x.ndim > 1:
        return torch.add(torch.matmul(x, w), b)
    return F.linear(x, w, b)


def _linear_for(x: Any, w: Any, b: Any, *_: Any) -> Any:
    """The callable for one signature (TensorMetas): F.linear itself, unless linear's own branch applies."""
    return linear if b is not None and w.ndim == 1 and x.ndim > 1 else F.linear


linear.specialize = _linear_for  # type: ignore[attr-defined]


matmul = torch.matmul
bmm = torch.bmm


def addmm(x: Tensor, mat1: Tensor, mat2: Tensor, beta: Any, alpha: Any) -> Tensor:
    """beta * x + alpha * mat1 @ mat2 (beta=0 ignores x, NaN included, as torch.addmm does)."""
    return torch.addmm(x, mat1, mat2, beta=beta, alpha=alpha)


def linear_relu(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """relu(linear(x, w, b)), the relu in place on linear's fresh result."""
    return torch.relu_(linear(x, w, b))


def linear_silu(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """silu(linear(x, w, b)), the silu in place."""
    return F.silu(linear(x, w, b), inplace=True)


def linear_gelu(x: Tensor, w: Tensor, b: Tensor | None, approximate: str) -> Tensor:
    """gelu(linear(x, w, b))."""
    return F.gelu(linear(x, w, b), approximate=approximate)


def gated_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """linear(silu(linear(x, w_gate)) * linear(x, w_up), w_down), intermediates updated in place."""
    hidden = F.silu(F.linear(x, w_gate), inplace=True)
    hidden.mul_(F.linear(x, w_up))
    return F.linear(hidden, w_down)


# --- normalization -----------------------------------------------------------------------------


def softmax(x: Tensor, dim: int, dtype: str | None) -> Tensor:
    """torch.softmax, x cast to dtype first (dtype None: torch.softmax itself, see specialize)."""
    return torch.softmax(x, dim, dtype=None if dtype is None else DType.parse(dtype).to_torch())


def log_softmax(x: Tensor, dim: int, dtype: str | None) -> Tensor:
    return torch.log_softmax(x, dim, dtype=None if dtype is None else DType.parse(dtype).to_torch())


# without a dtype the kernel is torch's own binding: softmax(x, dim, None), the contract's arguments in its order
softmax.specialize = lambda x, dim, dtype: torch.softmax if dtype is None else None  # type: ignore[attr-defined]
log_softmax.specialize = lambda x, dim, dtype: torch.log_softmax if dtype is None else None  # type: ignore[attr-defined]
# layer_norm(x, normalized_shape, weight, bias, eps): what F.layer_norm calls after its Python checks;
# it keeps float32 parameters of a float16/bfloat16 input (the contract allows them)
layer_norm = torch.layer_norm


def rms_norm(x: Tensor, normalized_shape: tuple[int, ...], weight: Tensor | None, eps: float | None) -> Tensor:
    """The weight is brought to x's dtype first: torch's result already has x's dtype, but a mixed
    pair leaves its fused kernel and warns ("Mismatch dtype between input and weight").
    """
    if weight is not None and weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
    return F.rms_norm(x, normalized_shape, weight, eps)


# --- nn ----------------------------------------------------------------------------------------


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None) -> Tensor:
    """The rows of weight; an index out of range (data, so not checked by the meta function) is
    reported as the reference backend reports it.
    """
    return embedding_rows(input, weight, padding_idx, noun="weight")


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> Tensor:
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )


# --- shape -------------------------------------------------------------------------------------

transpose = torch.transpose
permute = torch.permute
reshape = torch.reshape
unsqueeze = torch.unsqueeze
flatten = torch.flatten
select = torch.select


def squeeze(x: Tensor, dim: tuple[int, ...] | None) -> Tensor:
    """x without its size-1 dims (all, or those of dim); a view."""
    return torch.squeeze(x) if dim is None else torch.squeeze(x, dim)


def expand(x: Tensor, size: tuple[int, ...]) -> Tensor:
    """x broadcast to size (a view sharing x's memory, as torch's expand)."""
    return x.expand(size)


def slice(x: Tensor, dim: int, start: int | None, end: int | None, step: int) -> Tensor:
    """x[start:end:step] along dim (a view), the bounds clamped by aten.slice (torch's own x[a:b:c])."""
    return torch.ops.aten.slice.Tensor(x, dim, start, end, step)


def clone(x: Tensor) -> Tensor:
    """A copy of x with x's strides (torch.clone's preserve_format)."""
    return torch.clone(x)


def cat(tensors: tuple[Tensor, ...], dim: int) -> Tensor:
    """Joined along dim in the promoted dtype; torch skips 1-D empty tensors as the contract does."""
    return torch.cat(tensors, dim)


# --- indexing ----------------------------------------------------------------------------------


def _check_range(arg: str, index: Tensor, size: int, negative: bool) -> None:
    if index.numel():
        check_index_range(arg, int(index.min()), int(index.max()), size, negative=negative)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """x's values at index along dim; an index out of range (data) is reported as the reference does."""
    try:
        return torch.gather(x, dim, index)
    except RuntimeError:
        _check_range("index", index, x.shape[dim] if x.dim() else 1, False)
        raise


# gather_mm's rows up to which a product a row costs less than grouping them (8 rows of 1024 over 64
# experts: 60-130 us less a call on the AMX Xeon)
_GATHER_ROWS = 16
# torch's grouped GEMM (torch >= 2.10): on the host 5-10% faster than a product a group, bit-identical
_GROUPED_MM = getattr(F, "grouped_mm", None)


def _grouped_mm_takes(x: Tensor, w: Tensor) -> bool:
    """Whether torch's grouped GEMM takes x (rows, k) and w (groups, k, n) on the host: float32 or
    bfloat16, every stride but a unit one and the data 16-byte aligned (its CPU kernel's rule)."""
    if _GROUPED_MM is None or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16):
        return False
    size = x.element_size()
    return all(
        t.data_ptr() % 16 == 0 and all(stride == 1 or stride * size % 16 == 0 for stride in t.stride()) for t in (x, w)
    )


def gather_mm(x: Tensor, w: Tensor, index: Tensor) -> Tensor:
    """Row i: x[i] @ w[index[i]]. Up to _GATHER_ROWS rows (a decode step's token times its k experts)
    each row is one product; more rows are sorted by group (stable) and each group present is one
    matrix product of its rows (torch's grouped GEMM where it takes them). Either way every matrix
    of w is read where it is, none copied; a call with every row in one group is one product."""
    rows = x.shape[0]
    out = x.new_empty((rows, w.shape[2]))
    if rows == 0:
        return out
    _check_range("index", index, w.shape[0], False)
    if rows <= _GATHER_ROWS:  # a row a product: no sort, no gather of x, no scatter of the results
        for row, group in enumerate(index.tolist()):
            torch.mm(x[row : row + 1], w[group], out=out[row : row + 1])
        return out
    groups, order = torch.sort(index, stable=True)
    present, counts = torch.unique_consecutive(groups, return_counts=True)
    if present.numel() == 1:
        return torch.mm(x, w[int(present[0])], out=out)
    ordered = x.index_select(0, order)
    if _GROUPED_MM is not None and _grouped_mm_takes(ordered, w):
        ends = torch.bincount(groups, minlength=w.shape[0]).cumsum(0).to(torch.int32)
        return out.index_copy_(0, order, _GROUPED_MM(ordered, w, offs=ends))
    products = torch.empty_like(out)
    start = 0
    for group, count in zip(present.tolist(), counts.tolist(), strict=True):
        torch.mm(ordered[start : start + count], w[group], out=products[start : start + count])
        start += count
    return out.index_copy_(0, order, products)


def index(x: Tensor, indices: tuple[Tensor | None, ...]) -> Tensor:
    """x[i0, :, i2, ...] (aten.index.Tensor); an index out of range names the index that holds it."""
    try:
        return torch.ops.aten.index.Tensor(x, list(indices))
    except (IndexError, RuntimeError):
        for i, idx in enumerate(indices):
            if idx is not None:
                _check_range(f"indices[{i}]", idx, x.shape[i], True)
        raise


def split(x: Tensor, split_size: int | tuple[int, ...], dim: int) -> tuple[Tensor, ...]:
    """Views of split_size along dim (or of a list's sizes)."""
    return tuple(torch.split(x, list(split_size) if isinstance(split_size, tuple) else split_size, dim))


def split_with_sizes(x: Tensor, split_sizes: tuple[int, ...], dim: int) -> tuple[Tensor, ...]:
    """Views of the given sizes along dim."""
    return tuple(torch.split(x, list(split_sizes), dim))


def chunk(x: Tensor, chunks: int, dim: int) -> tuple[Tensor, ...]:
    """Views of ceil(size / chunks) along dim."""
    return tuple(torch.chunk(x, chunks, dim))


def pad(x: Tensor, pad: tuple[int, ...], mode: str, value: Any) -> Tensor:
    """torch.nn.functional.pad (every mode the contract takes: constant, reflect, replicate, circular)."""
    return F.pad(x, pad, mode, value)


def batch_norm(
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> Tensor:
    """torch.batch_norm in inference mode (the contract refuses training=True)."""
    if x.shape[1] == 0:  # torch's CPU kernel fails on an empty weight (IndexError); nothing to normalize
        return torch.empty_like(x)
    return torch.batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps, True)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """torch.group_norm."""
    return torch.group_norm(x, num_groups, weight, bias, eps)


def max_pool2d(
    x: Tensor,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
    return_indices: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """torch.max_pool2d (stride None: the kernel size, which torch spells as an empty list);
    return_indices: torch's max_pool2d_with_indices (the values and where each was)."""
    if return_indices:
        return torch._C._nn.max_pool2d_with_indices(x, kernel_size, stride or (), padding, dilation, ceil_mode)
    return torch.max_pool2d(x, kernel_size, stride or (), padding, dilation, ceil_mode)


def avg_pool2d(
    x: Tensor,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> Tensor:
    """torch.nn.functional.avg_pool2d's binding."""
    return torch._C._nn.avg_pool2d(
        x, kernel_size, stride or (), padding, ceil_mode, count_include_pad, divisor_override
    )


def adaptive_avg_pool2d(x: Tensor, output_size: tuple[int | None, ...]) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool2d's binding (None: that input size, resolved as the contract does)."""
    return torch._C._nn.adaptive_avg_pool2d(x, adaptive_output_size(tuple(x.shape), output_size))


# --- fused ops that torch runs as two calls ------------------------------------------------------


def conv2d_relu(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    """relu(conv2d(...)), the relu in place (the contract comes from opcore-cpu until the core has one)."""
    return torch.relu_(conv2d(x, weight, bias, stride, padding, dilation, groups))


def conv2d_silu(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    """silu(conv2d(...)), the silu in place."""
    return F.silu(conv2d(x, weight, bias, stride, padding, dilation, groups), inplace=True)
