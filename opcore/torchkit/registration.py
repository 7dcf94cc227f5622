"""Registering the shared torch kernels: what the CPU and the CUDA plugin both call.

Importing this module does not import torch: kernels are registered as ``"module:qualname"``
strings, imported when one first runs, so loading a plugin stays cheap.

>>> @opcore.hookimpl                                                             # doctest: +SKIP
... def opcore_register_kernels(registrar):
...     register_torch_kernels(registrar, "cpu", CPU_DIFFERENCES)
...     register_aten_fallback(registrar, "cpu")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opcore.declared import declared_ops
from opcore.torchkit import ATEN_LABEL, ATEN_PREFIX, FALLBACK_LABEL, FALLBACK_PRIORITY
from opcore.types import ArrayKind, DeviceType, DType

if TYPE_CHECKING:
    from opcore.contracts import OpContract
    from opcore.kernel_records import Checker, Kernel
    from opcore.registry import Registrar

__all__ = [
    "ATEN_LABEL",
    "ATEN_PREFIX",
    "FALLBACK_LABEL",
    "FALLBACK_PRIORITY",
    "KERNEL_MODULE",
    "LIVE_CONSTANTS",
    "PREPARES",
    "aten_namespace",
    "builtin_fallback_checker",
    "register_aten_fallback",
    "register_torch_kernels",
    "shared_kernel_ops",
    "torch_dtypes",
]

KERNEL_MODULE = "opcore.torchkit.torch_kernels"
# ops whose shared kernel can prepare constant weights (opcore.torchkit.prepared)
PREPARES = {
    **{op: f"opcore.torchkit.prepared:prepare_{op}" for op in ("linear", "linear_relu", "linear_silu", "linear_gelu")},
    "linear_wq": "opcore.torchkit.quantized:prepare_linear_wq",  # packs into torch's int8/int4 formats
}
# ops whose prepare binds the constants as they are (views of them): read in place, not watched
LIVE_CONSTANTS = frozenset({"linear", "linear_relu", "linear_silu", "linear_gelu"})


def torch_dtypes(
    contracts: Iterable[OpContract], differences: Mapping[str, Iterable[DType | str]] | None = None
) -> dict[str, frozenset[DType]]:
    """op -> the dtypes torch on a device supports: the contract's, except where ``differences``
    says torch there takes fewer (or others).

    >>> from opcore.opset import BUILTIN_CONTRACTS
    >>> sorted(d.value for d in torch_dtypes(BUILTIN_CONTRACTS, {"bmm": ["float32"]})["bmm"])
    ['float32']
    """
    differ = differences or {}
    return {c.name: frozenset(DType.parse(d) for d in differ.get(c.name, c.dtypes)) for c in contracts}


def shared_kernel_ops() -> tuple[str, ...]:
    """The ops ``opcore.torchkit.torch_kernels`` has a kernel for (its ``OPS``, read without torch)."""
    return declared_ops(KERNEL_MODULE)


def register_torch_kernels(
    registrar: Registrar,
    device_type: DeviceType | str,
    differences: Mapping[str, Iterable[DType | str]] | None = None,
    overrides: Mapping[str, str] | None = None,
    ops: Iterable[str] | None = None,
    checkers: Mapping[str, Checker] | None = None,
) -> list[Kernel]:
    """Register ``opcore.torchkit.torch_kernels.<op>`` on ``device_type`` for each op the registrar knows
    (built-in or a plugin's contract) that the shared kernels implement, with the dtypes of
    ``torch_dtypes`` (the contract's, but where ``differences`` says torch on this device differs;
    a backend adds its own device-specific kernels on top, with another label). Built-in ops
    without a shared kernel get the by-name ATen fallback (label "aten-fallback") when ATen has an
    op of the same name: a built-in op added to the core runs on torch before a kernel is written.

    ``ops`` limits the shared kernels registered to those ops (a vendor's backend taking a few);
    ``overrides`` (op -> ``"module:qualname"``) names the kernel to register instead of the shared
    one, still labelled "aten", where torch on this device needs more than the shared code (CUDA
    does not raise on an integer division by zero or an embedding index out of range).
    ``checkers`` (op -> checker) gives a shared kernel the device's own checker (the cpu backend's
    measured float32 limit of torch's weight-only kernels).

    >>> register_torch_kernels(registrar, "cpu", {"relu": ["float32"]})               # doctest: +SKIP
    """
    from opcore.opset import BUILTIN_CONTRACTS

    device = DeviceType(device_type)
    replaced = overrides or {}
    known = registrar.contracts
    shared = set(shared_kernel_ops()) if ops is None else set(ops) & set(shared_kernel_ops())
    dtypes_by_op = torch_dtypes((c for op, c in known.items() if op in shared), differences)
    added = [
        registrar.add_kernel(
            op,
            replaced.get(op, f"{KERNEL_MODULE}:{op}"),
            dtypes=dtypes,
            device_type=device,
            array_kind=ArrayKind.TORCH,
            prepare=PREPARES.get(op),
            live_constants=op in LIVE_CONSTANTS,  # its prepare keeps w.t() (a view) and b: read in place
            checker=(checkers or {}).get(op),
            label=ATEN_LABEL,
        )
        for op, dtypes in dtypes_by_op.items()
    ]
    for op, dtypes in torch_dtypes(BUILTIN_CONTRACTS, differences).items():
        if op in dtypes_by_op:
            continue
        added.append(
            registrar.add_kernel(
                op,
                f"opcore.torchkit.aten:builtin_fallback.{op}",
                dtypes=dtypes,
                device_type=device,
                array_kind=ArrayKind.TORCH,
                priority=FALLBACK_PRIORITY,
                checker=builtin_fallback_checker(op),
                label=FALLBACK_LABEL,
            )
        )
    return added


def register_aten_fallback(registrar: Registrar, device_type: DeviceType | str) -> None:
    """Serve ``aten.<name>[.<overload>]`` ops on ``device_type`` through the shared ATen fallback.

    Every torch backend passes the same contract factory (``aten_namespace``), so the registry
    keeps one ``"aten."`` namespace however many torch backends load.
    """
    registrar.add_op_namespace(ATEN_PREFIX, aten_namespace)
    registrar.add_kernel_factory(ATEN_PREFIX, _AtenKernels(DeviceType(device_type)))


def aten_namespace(name: str) -> OpContract | None:
    """The "aten." contract factory: ``opcore.torchkit.aten.aten_contract``, imported on first use
    (the module is only needed once an ``aten.*`` op is called).
    """
    from opcore.torchkit.aten import aten_contract

    return aten_contract(name)


class _AtenKernels:
    """The "aten." kernel factory of one device type, importing the ATen fallback on first use."""

    __slots__ = ("device_type",)

    def __init__(self, device_type: DeviceType) -> None:
        self.device_type = device_type

    def __call__(self, contract: OpContract) -> Iterable[Kernel]:
        from opcore.torchkit.aten import kernel_factory

        return kernel_factory(self.device_type)(contract)


def builtin_fallback_checker(op: str) -> Callable[..., bool | str]:
    """The checker of a by-name fallback: ATen must have an op of that name."""

    def has_aten_op(*_: Any) -> bool | str:
        import torch

        try:
            if hasattr(torch.ops.aten, op):
                return True
        except RuntimeError:
            pass
        return f"ATen has no op named {op!r} to fall back to"

    has_aten_op.__qualname__ = f"builtin_fallback_checker[{op}]"
    return has_aten_op
