"""oneDNN fused linear kernels: linear + relu / silu / gelu in one call, and gated_mlp built from them;
plain linear too (post-op "none"), so that a resolved linear can run on a packed weight.

``torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [], algorithm)`` runs the inner product
with the activation as a oneDNN post-op (attr "relu", "swish", "gelu"; algorithm "none" or
"tanh" for gelu). Its ``.binary`` overload fuses a binary post-op: gated_mlp's up projection
multiplies by the gate inside the GEMM. ``_reorder_linear_weight(w, batch_size)`` packs a
weight once into oneDNN's blocked layout; the packed weight still serves any batch size.

The plain functions take dense weights (what ``opcore.run`` passes); the ``prepare_*`` functions
serve ``opcore.resolve(..., constants=("w", "b"))``: with only x free, they run ATen's linear, the
fused call on the weight as given, or the fused call on the weight packed once, whichever measured
fastest for the problem on this machine (``opcore_cpu.weight_choice``: packing keeps a second copy
and does not always pay). Which problems come here at all is decided in ``opcore_cpu.choice``
(small ones stay on ATen).

float32 on Intel CPUs packs for MKL instead (``torch.ops.mkl._mkl_reorder_linear_weight`` and
``_mkl_linear``, the activation applied in place): there MKL's packed sgemm beats oneDNN's
(32x4096x4096: 3652 vs 4021 us; 1x4096x4096: 1233 vs 1408 us, where oneDNN would lose to eager's
1262; a 0.5B decoder's 168 GEMMs at 128 rows, weights streamed from memory: 443 ms packed for MKL,
544 for oneDNN, 568-607 for ATen). ``_mkl_linear`` uses the packed buffer only where its last argument
equals x's rows (torch's guard; MKL's packed B does not depend on them: one packed for 128 rows
computes 1..512 rows to float32 rounding, at 1 and 2 threads), so the prepared call passes each x's
own row count: a prompt of any length gets the packed GEMM, not only the example's. On AMD CPUs MKL
takes a slow generic path and oneDNN wins by 2x, so oneDNN packs there.

>>> import torch
>>> linear_relu(torch.ones(32, 64), torch.ones(16, 64), None).shape
torch.Size([32, 16])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from opcore.extend import batch_rows, free_positions, with_free_args
from opcore_cpu.system import float32_packing
from opcore_cpu.weight_choice import Way, choose, policy

__all__ = [
    "float32_packing",
    "gated_mlp",
    "linear",
    "linear_gelu",
    "linear_relu",
    "linear_silu",
    "pack_linear_weight",
    "prepare_gated_mlp",
    "prepare_linear",
    "prepare_linear_gelu",
    "prepare_linear_relu",
    "prepare_linear_silu",
]

Tensor = torch.Tensor
_pointwise = torch.ops.mkldnn._linear_pointwise.default
_pointwise_binary = torch.ops.mkldnn._linear_pointwise.binary
_reorder = torch.ops.mkldnn._reorder_linear_weight
_NO_SCALARS: list[Any] = []  # the post-op's scalars; torch never writes into it
_LINEAR_NAMES = ("x", "w", "b", "approximate")
_GATED_NAMES = ("x", "w_gate", "w_up", "w_down")

# x's rows from which MKL's packed sgemm beats ATen's (1 thread, 896x4864: 4 rows 658 against 1212 us,
# 2 rows 647 against 613): fewer run ATen's GEMM on the weight as given
MKL_PACKED_ROWS = 4
_mkl_reorder = torch.ops.mkl._mkl_reorder_linear_weight
_mkl_linear = torch.ops.mkl._mkl_linear.default
# the activation after MKL's or ATen's GEMM, in place on its fresh result
_IN_PLACE_ACTIVATIONS: dict[str, Callable[[Tensor, str], Tensor]] = {
    "relu": lambda y, _: torch.relu_(y),
    "swish": lambda y, _: F.silu(y, inplace=True),
    "gelu": lambda y, approximate: F.gelu(y, approximate=approximate),
    "none": lambda y, _: y,
}


def pack_linear_weight(w: Tensor, batch_size: int) -> Tensor:
    """w in oneDNN's blocked layout for GEMMs of about ``batch_size`` rows (any other size still works)."""
    return _reorder(w.contiguous(), batch_size)


def linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return _pointwise(x, w, b, "none", _NO_SCALARS, "")


def linear_relu(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return _pointwise(x, w, b, "relu", _NO_SCALARS, "")


def linear_silu(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return _pointwise(x, w, b, "swish", _NO_SCALARS, "")


def linear_gelu(x: Tensor, w: Tensor, b: Tensor | None, approximate: str) -> Tensor:
    return _pointwise(x, w, b, "gelu", _NO_SCALARS, approximate)


def gated_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """silu fused into the gate GEMM, the gate product fused into the up GEMM, then the down GEMM."""
    gate = _pointwise(x, w_gate, None, "swish", _NO_SCALARS, "")
    hidden = _pointwise_binary(x, gate, w_up, None, "mul")
    return _pointwise(hidden, w_down, None, "none", _NO_SCALARS, "")


def _mkl_packs() -> bool:
    """Whether float32 weights are packed for MKL: on Intel CPUs with MKL, unless OPCORE_CPU_WEIGHTS
    is "dense" (no packed copy anywhere: the measured oneDNN ways then keep the weight as given)."""
    return float32_packing() == "mkl" and policy() != "dense"


def _aten_linear(attr: str, w: Tensor, b: Tensor | None, algorithm: str) -> Callable[[Tensor], Tensor]:
    """ATen's linear on the weight as given, the activation in place on its result."""
    activate, approximate = _IN_PLACE_ACTIVATIONS[attr], algorithm or "none"  # oneDNN's "" is torch's "none"
    return lambda x: activate(F.linear(x, w, b), approximate)


def _mkl_prepared(attr: str, w: Tensor, b: Tensor | None, rows: int, algorithm: str) -> Callable[[Tensor], Tensor]:
    """MKL's packed sgemm for every x of at least MKL_PACKED_ROWS rows, ATen's GEMM on the weight as
    given below that; ``rows`` (the example's) below it: no packed copy at all."""
    if rows < MKL_PACKED_ROWS:  # the packed copy would never run
        return _aten_linear(attr, w, b, algorithm)
    activate, approximate = _IN_PLACE_ACTIVATIONS[attr], algorithm or "none"
    packed = _mkl_reorder(w.contiguous(), rows)

    def prepared(x: Tensor) -> Tensor:
        flat = x.unsqueeze(0) if x.ndim == 1 else x  # MKL's linear resizes a 1-D result with a warning
        m = batch_rows(flat)
        # _mkl_linear computes on the packed weight only where its last argument is x's row count
        # (else ATen's linear on w): the buffer packed for ``rows`` serves every count (module doc)
        y = activate(_mkl_linear(flat, packed, w, b, m if m >= MKL_PACKED_ROWS else -1), approximate)
        return y[0] if x.ndim == 1 else y

    return prepared


def _linear_ways(attr: str, w: Tensor, b: Tensor | None, rows: int, algorithm: str) -> list[Way]:
    """ATen's linear and oneDNN's fused call on the weight as given, and the fused call on it packed."""

    def fused(weight: Tensor) -> Callable[[Tensor], Tensor]:
        return lambda x: _pointwise(x, weight, b, attr, _NO_SCALARS, algorithm)

    return [
        Way("aten", False, lambda: _aten_linear(attr, w, b, algorithm)),
        Way("dense", False, lambda: fused(w)),
        Way("packed", True, lambda: fused(pack_linear_weight(w, rows))),
    ]


def _prepare_linear(attr: str) -> Callable[[tuple[Any, ...], frozenset[str]], Callable[..., Any]]:
    def prepare(args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
        x, w, b = args[:3]
        algorithm = args[3] if len(args) > 3 else ""
        free = free_positions(args, _LINEAR_NAMES, constants)
        if free == [0] and x.dtype == torch.float32 and _mkl_packs():
            return _mkl_prepared(attr, w, b, batch_rows(x), algorithm)
        if free == [0]:  # the common case: only x varies; packed or not, as measured here
            rows = batch_rows(x)
            key = ("linear", attr, algorithm, rows, tuple(w.shape), b is not None, x.dtype, torch.get_num_threads())
            return choose(key, _linear_ways(attr, w, b, rows, algorithm), x)
        if "w" in constants:
            w = pack_linear_weight(w, batch_rows(x))

        def kernel(x: Tensor, w: Tensor, b: Tensor | None, *_: Any) -> Tensor:
            return _pointwise(x, w, b, attr, _NO_SCALARS, algorithm)

        template = [None if i in free else value for i, value in enumerate((x, w, b))]
        return with_free_args(kernel, template, free)

    prepare.__qualname__ = f"prepare_linear[{attr}]"
    return prepare


prepare_linear = _prepare_linear("none")
prepare_linear_relu = _prepare_linear("relu")
prepare_linear_silu = _prepare_linear("swish")
prepare_linear_gelu = _prepare_linear("gelu")


def _gated_ways(w_gate: Tensor, w_up: Tensor, w_down: Tensor, rows: int) -> list[Way]:
    """ATen's three linears, oneDNN's fused calls on the weights as given, and on them packed."""

    def aten() -> Callable[[Tensor], Tensor]:
        return lambda x: F.linear(F.silu(F.linear(x, w_gate), inplace=True).mul_(F.linear(x, w_up)), w_down)

    def fused(gate: Tensor, up: Tensor, down: Tensor) -> Callable[[Tensor], Tensor]:
        return lambda x: gated_mlp(x, gate, up, down)

    def packed() -> Callable[[Tensor], Tensor]:
        return fused(*(pack_linear_weight(w, rows) for w in (w_gate, w_up, w_down)))

    return [
        Way("aten", False, aten),
        Way("dense", False, lambda: fused(w_gate, w_up, w_down)),
        Way("packed", True, packed),
    ]


def prepare_gated_mlp(args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
    """With only x free: ATen, fused on the weights as given, or fused on them packed (x's row count
    the packing hint for all three GEMMs), as measured; otherwise each constant weight packed."""
    x = args[0]
    rows = batch_rows(x)
    free = free_positions(args, _GATED_NAMES, constants)
    if free == [0] and x.dtype == torch.float32 and _mkl_packs():
        gate = _mkl_prepared("swish", args[1], None, rows, "")
        up = _mkl_prepared("none", args[2], None, rows, "")
        down = _mkl_prepared("none", args[3], None, rows, "")
        return lambda x: down(gate(x).mul_(up(x)))
    if free == [0]:  # packed or not, as measured here
        key = ("gated_mlp", rows, tuple(args[1].shape), tuple(args[3].shape), x.dtype, torch.get_num_threads())
        return choose(key, _gated_ways(args[1], args[2], args[3], rows), x)
    weights = [
        pack_linear_weight(value, rows) if name in constants else value
        for name, value in zip(_GATED_NAMES[1:], args[1:])
    ]
    template = [None if i in free else value for i, value in enumerate((x, *weights))]
    return with_free_args(gated_mlp, template, free)
