"""The plugin module's scaffolding of one-model backends: availability from package metadata,
one kernel per op registered by name, checkers that decline by dtype first, doctor probes. Loaded
with the plugin: imports no runtime.

>>> version_tuple("2026.4.1-22982")
(2026, 4)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opcore import distmeta
from opcore.opset import BUILTIN_DTYPES
from opcore.types import DType, TensorMeta

if TYPE_CHECKING:
    from opcore.registry import Registrar

__all__ = [
    "KERNEL_LAYOUT",
    "dtype_checker",
    "kernel_targets",
    "probe",
    "register_kernels",
    "runtime_available",
    "tensor_metas",
    "version_tuple",
]

# op -> (module of its kernel under the backend's kernels package, whether resolve's constants are
# baked into the model): the layout of both graph-runtime backends. Ops with one tensor argument
# have nothing to bake in; resolve shares the cached model for them.
KERNEL_LAYOUT: Mapping[str, tuple[str, bool]] = {
    "add": ("elementwise", True),
    "sub": ("elementwise", True),
    "mul": ("elementwise", True),
    "div": ("elementwise", True),
    "relu": ("elementwise", False),
    "gelu": ("elementwise", False),
    "silu": ("elementwise", False),
    "sigmoid": ("elementwise", False),
    "tanh": ("elementwise", False),
    "exp": ("elementwise", False),
    "linear": ("linear", True),
    "matmul": ("linear", True),
    "bmm": ("linear", True),
    "linear_relu": ("linear", True),
    "linear_silu": ("linear", True),
    "linear_gelu": ("linear", True),
    "gated_mlp": ("linear", True),
    "softmax": ("normalization", False),
    "log_softmax": ("normalization", False),
    "layer_norm": ("normalization", True),
    "rms_norm": ("normalization", True),
    "embedding": ("nn", True),
    "conv2d": ("nn", True),
    "scaled_dot_product_attention": ("nn", True),
    "transpose": ("shape", False),
    "permute": ("shape", False),
    "reshape": ("shape", False),
    "cat": ("shape", False),
}


def register_kernels(
    registrar: Registrar,
    package: str,
    checker_for: Callable[[str], Callable[..., bool | str]],
    layout: Mapping[str, tuple[str, bool]] = KERNEL_LAYOUT,
) -> None:
    """One numpy kernel per op of ``layout`` for every dtype its contract accepts, named as
    ``"package.module:op"`` (imported when first run); ``checker_for(op)`` declines the rest.

    >>> register_kernels(registrar, "opcore_onnxruntime.kernels", checker_for)  # doctest: +SKIP
    """
    targets = kernel_targets(package, layout)
    for op, (_, prepares) in layout.items():
        target = targets[op]
        registrar.add_kernel(
            op,
            target,
            dtypes=BUILTIN_DTYPES[op],
            array_kind="numpy",
            checker=checker_for(op),
            prepare=f"{target}.prepare" if prepares else None,
        )


def kernel_targets(package: str, layout: Mapping[str, tuple[str, bool]] = KERNEL_LAYOUT) -> dict[str, str]:
    """op -> ``"package.module:op"``, the kernel function of each op of ``layout`` (what
    ``register_kernels`` registers and a partition compiler chains).

    >>> kernel_targets("opcore_onnxruntime.kernels")["relu"]
    'opcore_onnxruntime.kernels.elementwise:relu'
    """
    return {op: f"{package}.{module}:{op}" for op, (module, _) in layout.items()}


def version_tuple(text: str) -> tuple[int, ...]:
    """The first two numbers of a version string.

    >>> version_tuple("1.17.0"), version_tuple("1.9.0rc1")
    ((1, 17), (1, 9))
    """
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def runtime_available(modules: Sequence[str], distribution: str, minimum: tuple[int, ...], extra: str) -> bool | str:
    """True when ``modules`` can be imported and ``distribution`` is at least ``minimum``, else why
    not; reads package metadata only, never imports the runtime.

    >>> runtime_available(("no_such_runtime",), "no-such-runtime", (1, 0), "demo")
    "no_such_runtime is not installed (pip install 'opcore[demo]')"
    """
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'opcore[{extra}]')"
    version = distmeta.version(distribution)
    if version is None:
        return f"{distribution} has no distribution metadata (a broken install?)"
    if version_tuple(version) < minimum:
        wanted = ".".join(str(part) for part in minimum)
        return f"{distribution} {version} is older than {wanted} (pip install -U {distribution})"
    return True


def probe(lines: dict[str, str], name: str, read: Callable[[], str]) -> None:
    """``lines[name] = read()``, or why it failed: the doctor reports a failing probe instead of failing.

    >>> lines = {}; probe(lines, "answer", lambda: str(1 // 0)); lines["answer"]
    'unavailable (ZeroDivisionError: integer division or modulo by zero)'
    """
    try:
        lines[name] = read()
    except Exception as error:
        lines[name] = f"unavailable ({type(error).__name__}: {error})"


def tensor_metas(args: tuple[Any, ...], skip: int | None = None) -> Iterator[TensorMeta]:
    """The TensorMeta among a checker's arguments (tensor lists included), but the one at ``skip``.

    >>> [m.shape for m in tensor_metas((TensorMeta((2,), DType.FLOAT32), 3, (TensorMeta((4,), DType.INT8),)))]
    [(2,), (4,)]
    """
    for position, value in enumerate(args):
        if position == skip:
            continue
        if isinstance(value, TensorMeta):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, TensorMeta))


def dtype_checker(
    op: str,
    dtype_reason: Callable[[DType], str | None],
    specific: Callable[..., bool | str] | None = None,
    *,
    skip: int | None = None,
) -> Callable[..., bool | str]:
    """The checker of ``op``'s kernel: the first tensor (but the one at ``skip``) whose dtype
    ``dtype_reason`` gives a reason for declines the call with it; then ``specific(*args)`` decides.

    >>> check = dtype_checker("relu", lambda d: "no int8" if d is DType.INT8 else None)
    >>> check(TensorMeta((2,), DType.INT8)), check(TensorMeta((2,), DType.FLOAT32)), check.__name__
    ('no int8', True, 'check_relu')
    """

    def check(*args: Any) -> bool | str:
        for meta in tensor_metas(args, skip):
            reason = dtype_reason(meta.dtype)
            if reason:
                return reason
        return specific(*args) if specific is not None else True

    check.__name__ = check.__qualname__ = f"check_{op}"
    return check
