"""The plugin module's scaffolding of one-model backends: availability from package metadata,
one kernel per op its kernels package declares (``OPS`` of each family module), registered
by name, checkers that decline by dtype first, doctor probes. Loaded
with the plugin: imports no runtime.

>>> version_tuple("2026.4.1-22982")
(2026, 4)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opcore import distmeta
from opcore.declared import family_kernels
from opcore.types import DType, TensorMeta

if TYPE_CHECKING:
    from opcore.contracts import OpContract
    from opcore.registry import Registrar

__all__ = [
    "DtypeChecker",
    "bakes_constants",
    "dtype_checker",
    "kernel_layout",
    "kernel_targets",
    "probe",
    "register_kernels",
    "runtime_available",
    "tensor_metas",
    "version_tuple",
]


def bakes_constants(contract: OpContract) -> bool:
    """Whether resolve's constant tensors are baked into the op's model: ops with one tensor
    argument (a list counts as one) have nothing to bake in, and resolve shares the cached model.

    >>> from opcore.opset.elementwise import ADD, RELU
    >>> bakes_constants(ADD), bakes_constants(RELU)
    (True, False)
    """
    return sum(1 for a in contract.schema.arguments if a.type.holds_tensors and not a.type.is_list) > 1


def kernel_layout(package: str) -> dict[str, tuple[str, bool]]:
    """op -> (family module, whether resolve's constants are baked in) for each built-in op whose
    family module under ``package`` lists it in ``OPS``: the op set a graph backend declares
    by writing the kernel (read without importing the runtime).

    >>> kernel_layout("opcore_onnxruntime.kernels")["relu"]       # doctest: +SKIP
    ('elementwise', False)
    """
    from opcore.opset import BUILTIN_CONTRACTS

    families = family_kernels(package, BUILTIN_CONTRACTS)
    return {c.name: (families[c.name], bakes_constants(c)) for c in BUILTIN_CONTRACTS if c.name in families}


def register_kernels(
    registrar: Registrar,
    package: str,
    checker_for: Callable[[str], Callable[..., bool | str]],
    layout: Mapping[str, tuple[str, bool]] | None = None,
) -> Mapping[str, tuple[str, bool]]:
    """One numpy kernel per op of ``layout`` (default ``kernel_layout(package)``: a plugin module
    that computed it at import passes it, not to read the family modules twice) for every dtype its contract accepts
    but those its checker declines on every call (``DtypeChecker.declined``, kept with their
    reasons), named as ``"package.family:op"`` (imported when first run); ``checker_for(op)``
    declines the rest call by call. Returns the layout registered.

    >>> register_kernels(registrar, "opcore_onnxruntime.kernels", checker_for)  # doctest: +SKIP
    """
    from opcore.opset import BUILTIN_CONTRACTS, BUILTIN_DTYPES

    contracts = {c.name: c for c in BUILTIN_CONTRACTS}
    layout = kernel_layout(package) if layout is None else layout
    targets = kernel_targets(package, layout)
    reasons: dict[tuple[Any, ...], str | None] = {}  # the ops' checkers share their dtype rules
    for op, (_, prepares) in layout.items():
        target, checker = targets[op], checker_for(op)
        declined = {}
        if isinstance(checker, DtypeChecker):
            declined = checker.declined(contracts[op], BUILTIN_DTYPES[op], reasons)
        served = BUILTIN_DTYPES[op] - declined.keys()
        if not served:
            continue  # every dtype of the contract is declined outright: no kernel to offer
        registrar.add_kernel(
            op,
            target,
            dtypes=served,
            array_kind="numpy",
            checker=checker,
            prepare=f"{target}.prepare" if prepares else None,
            declined=declined,
        )
    return layout


def kernel_targets(package: str, layout: Mapping[str, tuple[str, bool]] | None = None) -> dict[str, str]:
    """op -> ``"package.family:op"``, the kernel function of each op of ``layout`` (default:
    ``kernel_layout(package)``; what ``register_kernels`` registers and a partition compiler chains).

    >>> kernel_targets("opcore_onnxruntime.kernels")["relu"]
    'opcore_onnxruntime.kernels.elementwise:relu'
    """
    chosen = kernel_layout(package) if layout is None else layout
    return {op: f"{package}.{module}:{op}" for op, (module, _) in chosen.items()}


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
    keyed: Callable[[DType], str | None] | None = None,
) -> DtypeChecker:
    """The checker of ``op``'s kernel: the first tensor (but the one at ``skip``) whose dtype
    ``dtype_reason`` gives a reason for declines the call with it; then ``keyed``, the op's own
    rule for the dtype that picks its kernel (the first tensor but ``skip``); then
    ``specific(*args)`` decides. Dtypes either rule declines are never offered (``declined``).

    >>> check = dtype_checker("relu", lambda d: "no int8" if d is DType.INT8 else None)
    >>> check(TensorMeta((2,), DType.INT8)), check(TensorMeta((2,), DType.FLOAT32)), check.__name__
    ('no int8', True, 'check_relu')
    """
    return DtypeChecker(op, dtype_reason, specific, skip, keyed)


class DtypeChecker:
    """A checker that declines by dtype first (``dtype_checker``); it also knows which dtypes it
    declines for every call (``declined``), which ``register_kernels`` leaves out of the kernel's
    dtypes so that dispatch and ``opcore ops --matrix`` never offer them.
    """

    __slots__ = ("__name__", "__qualname__", "dtype_reason", "keyed", "op", "skip", "specific")

    def __init__(
        self,
        op: str,
        dtype_reason: Callable[[DType], str | None],
        specific: Callable[..., bool | str] | None,
        skip: int | None,
        keyed: Callable[[DType], str | None] | None = None,
    ) -> None:
        self.op, self.dtype_reason, self.specific, self.skip, self.keyed = op, dtype_reason, specific, skip, keyed
        self.__name__ = self.__qualname__ = f"check_{op}"

    def __call__(self, *args: Any) -> bool | str:
        first = None
        for meta in tensor_metas(args, self.skip):
            first = first or meta
            reason = self.dtype_reason(meta.dtype)
            if reason:
                return reason
        if first is None:  # a creation op: the dtype of its result picks the kernel
            first = _created(self.op, args)
            reason = self.dtype_reason(first.dtype) if first is not None else None
            if reason:
                return reason
        if self.keyed is not None and first is not None:
            reason = self.keyed(first.dtype)
            if reason:
                return reason
        return self.specific(*args) if self.specific is not None else True

    def declined(
        self, contract: OpContract, dtypes: Iterable[DType], memo: dict[tuple[Any, ...], str | None] | None = None
    ) -> dict[DType, str]:
        """Those of ``dtypes`` this checker declines on every call of ``contract``, with why: the
        dtype that picks the kernel is that of an argument the dtype rule reads (not ``skip``), or
        a creation op's result dtype, which the checker reads from its meta. ``memo`` keeps each
        rule's reason per dtype across the checkers of one registration (they share their rules).

        >>> from opcore.opset.elementwise import RELU
        >>> dtype_checker("relu", lambda d: "no int8" if d is DType.INT8 else None).declined(RELU, DType)
        {<DType.INT8: 'int8'>: 'no int8'}
        """
        if not contract.creates and contract.dtype_position == self.skip:
            return {}
        keyed = self.keyed or _no_reason
        if memo is None:
            reasons = {dtype: self.dtype_reason(dtype) or keyed(dtype) for dtype in dtypes}
        else:
            reasons = {}
            for dtype in dtypes:
                key = (self.dtype_reason, keyed, dtype)
                if key not in memo:
                    memo[key] = self.dtype_reason(dtype) or keyed(dtype)
                reasons[dtype] = memo[key]
        return {dtype: reason for dtype, reason in reasons.items() if reason}

    def dtype_reasons(self) -> set[str]:
        """Every reason this checker gives for a dtype alone (what ``declined`` can leave out)."""
        keyed = self.keyed or _no_reason
        return {reason for dtype in DType for reason in (self.dtype_reason(dtype), keyed(dtype)) if reason}


def _no_reason(dtype: DType) -> None:
    return None


def _created(op: str, args: tuple[Any, ...]) -> TensorMeta | None:
    """The result meta of a built-in creation op (no tensor argument), None for any other op."""
    from opcore.opset import BUILTIN_CONTRACTS

    contract = next((c for c in BUILTIN_CONTRACTS if c.name == op), None)
    if contract is None or not contract.creates:
        return None
    out = contract.meta(*args)
    return out if isinstance(out, TensorMeta) else None
