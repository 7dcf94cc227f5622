"""Choosing kernels for one call signature: the meta check, the ranked walk, and the record of
why each candidate was or was not chosen (which ``explain`` prints and NoKernelError quotes).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from opcore.backend import DEFAULT_PRIORITIES
from opcore.contracts import OpContract
from opcore.errors import ArgumentError, FallbackWarning, NoKernelError, OpcoreError, PluginError, ShapeError
from opcore.fast_records import record
from opcore.kernel_records import Costly, Kernel
from opcore.meta import common_device
from opcore.reports import PluginStatus
from opcore.runtime import Runtime, on_change
from opcore.settings import ContextPolicy
from opcore.tuning.location import default_path
from opcore.types import ArrayKind, Device, DeviceType, DType, TensorMeta, array_kind_of

if TYPE_CHECKING:
    from opcore.tuning.table import Entry, Measurement

__all__ = ["NUMPY_MAX_RANK", "Candidate", "CandidateStatus", "Selection", "check_kernel", "select", "transfer_target"]

# numpy's NPY_MAXDIMS: a torch tensor of more dims cannot reach a numpy kernel (torch allows more)
NUMPY_MAX_RANK = 64


class CandidateStatus(str, Enum):
    CHOSEN = "chosen"
    FALLBACK = "fallback"  # accepted; runs if the ones before it hand over
    DECLINED = "declined"  # its checker said no
    PASSED_OVER = "passed over"  # the policy excludes it (pinned elsewhere, strict)
    NO_KERNEL = "no kernel"  # the backend is loaded but has no kernel for this op, dtype and device
    UNAVAILABLE = "unavailable"
    FAILED = "failed"
    DISABLED = "disabled"

    def __str__(self) -> str:
        return self.value


@record
class Candidate:
    """One row of an explanation. priority None: the backend has no kernel here. measured None: the
    tuning file has no time of this kernel for this signature.
    """

    backend: str
    status: CandidateStatus
    reason: str = ""
    label: str = ""
    source: str = ""
    priority: int | None = None
    measured: Measurement | None = None

    @property
    def title(self) -> str:
        return f"{self.backend}/{self.label}" if self.label else self.backend


class Selection:
    """Everything decided for one signature. error not None: the call cannot run.

    A plain slotted class, not a dataclass: it is made while the first opcore.run loads opcore,
    where generating a dataclass's methods costs ~1 ms (issue 15). Compared by identity.
    """

    __slots__ = (
        "accepted", "caller_kind", "candidates", "contract", "decompose", "device", "dtype", "error", "kinds",
        "measured", "meta_args", "order", "order_source", "outputs", "pin", "strict", "transfer", "tuning_note",
    )  # fmt: skip

    def __init__(
        self,
        contract: OpContract,
        meta_args: tuple[Any, ...],
        outputs: tuple[TensorMeta, ...],
        device: Device,
        dtype: DType,
        caller_kind: ArrayKind,
        kinds: frozenset[ArrayKind],
        order: tuple[str, ...] | None,
        order_source: str,
        strict: bool,
        pin: str | None,
        *,
        transfer: Device | None = None,
    ) -> None:
        self.contract, self.meta_args, self.outputs = contract, meta_args, outputs
        self.device, self.dtype = device, dtype
        self.caller_kind, self.kinds, self.order, self.order_source = caller_kind, kinds, order, order_source
        self.strict, self.pin = strict, pin
        self.accepted: list[Kernel] = []
        self.candidates: list[Candidate] = []
        self.decompose = False
        self.error: OpcoreError | None = None
        # None: the kernels run where the inputs are. Else the device of the pinned backend that numpy
        # inputs are moved to (a call pinned to a backend without host kernels, e.g. backend="cuda"); the
        # result comes back to host numpy. ``device`` is then this device, which keys the kernels.
        self.transfer = transfer
        # The tuning file's measurement of this signature's bucket (None: ranked by static priority) and,
        # when there is none to use although a file exists, why (a stale file, another thread count).
        self.measured: Entry | None = None
        self.tuning_note = ""

    def copy(self) -> Selection:
        """A new Selection of the same decisions (its lists copied): what the memo gives each caller."""
        twin = Selection.__new__(Selection)
        for name in Selection.__slots__:
            setattr(twin, name, getattr(self, name))
        twin.accepted, twin.candidates = list(self.accepted), list(self.candidates)
        return twin

    @property
    def max_rank(self) -> int:
        """The most dims of any input or output (a numpy kernel cannot take more than numpy holds)."""
        ranks = [m.ndim for m in self.outputs]
        for value in self.meta_args:
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, TensorMeta):
                    ranks.append(item.ndim)
        return max(ranks, default=0)

    def __repr__(self) -> str:
        chosen = self.accepted[0].title if self.accepted else None
        op, dtype = self.contract.name, self.dtype.value
        return f"Selection(op={op!r}, device={self.device}, dtype={dtype}, chosen={chosen!r})"


def _meta_of(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(None if v is None else TensorMeta.of(v) if array_kind_of(v) else v for v in value)
    return TensorMeta.of(value) if array_kind_of(value) is not None else value


def _metas(contract: OpContract, bound: tuple[Any, ...]) -> tuple[Any, ...]:
    """The metas of the bound arguments; an array opcore cannot take (a numpy subclass, complex,
    uint16, object, byte-swapped) is an error naming the op and the argument it was passed as.
    """
    metas = []
    for argument, value in zip(contract.schema.arguments, bound):
        try:
            metas.append(_meta_of(value))
        except OpcoreError as error:
            where = argument.name
            if isinstance(value, tuple):
                bad = next(i for i, v in enumerate(value) if v is not None and array_kind_of(v) and not _meta_ok(v))
                where = f"{argument.name}[{bad}]"
            error.op, error.arg = contract.name, where
            raise
    metas.extend(_meta_of(v) for v in bound[len(metas) :])
    return tuple(metas)


def _meta_ok(value: Any) -> bool:
    try:
        TensorMeta.of(value)
    except OpcoreError:
        return False
    return True


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: no limit known
        return 0


_MEMORY = _memory_bytes()


def _check_size(op: str, outputs: tuple[TensorMeta, ...], inputs: list[tuple[str, TensorMeta]]) -> None:
    """A call whose arrays do not fit in the machine's memory is a ShapeError now, not a MemoryError,
    an OOM kill or a minute of swapping in a kernel: each array alone (stride-0 inputs make huge shapes
    cheap to ask for, and a kernel may have to copy a view), and the results and inputs together (two
    16 GiB arrays do not fit in 24 GiB, though each does).
    """
    if not _MEMORY:
        return
    named = [(None, meta) for meta in outputs] + list(inputs)
    total = 0
    for name, meta in named:
        if isinstance(meta, TensorMeta) and all(d >= 0 for d in meta.shape):
            size = meta.numel * meta.dtype.itemsize
            total += size
            if size > _MEMORY:
                what = f"the result {meta.describe()}" if name is None else f"argument '{name}' ({meta.describe()})"
                raise ShapeError(
                    f"{what} would take {size / 2**30:.1f} GiB, more than this machine's "
                    f"{_MEMORY / 2**30:.1f} GiB of memory",
                    op=op,
                    fix="check the input shapes (a broadcast or stride-0 view can make them huge)",
                )
    if total > _MEMORY:
        raise ShapeError(
            f"the call's {len(named)} arrays (results and inputs, views counted as copies) would take "
            f"{total / 2**30:.1f} GiB together, more than this machine's {_MEMORY / 2**30:.1f} GiB of memory",
            op=op,
            fix="check the input shapes (a broadcast or stride-0 view can make them huge), or split the call",
        )


def tensor_arguments(contract: OpContract, meta_args: tuple[Any, ...]) -> Iterable[tuple[str, TensorMeta]]:
    for argument, value in zip(contract.schema.arguments, meta_args):
        if isinstance(value, TensorMeta):
            yield argument.name, value
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if isinstance(item, TensorMeta):
                    yield f"{argument.name}[{i}]", item


def kinds_of(bound: tuple[Any, ...]) -> list[ArrayKind]:
    kinds = []
    for value in bound:
        for item in value if isinstance(value, tuple) else (value,):
            kind = array_kind_of(item)
            if kind is not None:
                kinds.append(kind)
    return kinds


def effective_order(rt: Runtime, policy: ContextPolicy | None) -> tuple[tuple[str, ...] | None, str]:
    if policy is not None and policy.order is not None:
        return policy.order, "opcore.prefer"
    if rt.settings.backends is not None:
        return rt.settings.backends, rt.settings.source("backends")
    return None, "priority"


def check_named(rt: Runtime, names: Iterable[str], source: str) -> None:
    """A backend the user named must be loaded; anything else is an error saying why."""
    for name in names:
        report = rt.report(name)
        if report is not None and report.status is PluginStatus.LOADED:
            continue
        if report is None:
            state = "which is not installed"
            fix = (
                f"pip install 'opcore[{name}]'"
                if name in DEFAULT_PRIORITIES
                else f"install the plugin providing {name!r}"
            )
        else:
            state = f"which is {report.status_text}"
            fix = "run `opcore doctor` for details"
        where = "backend=" if source == "backend=" else source
        loaded = ", ".join(n for n, r in rt.loader.reports.items() if r.ok) or "none"
        raise PluginError(
            f"{where} names backend {name!r}, {state} (loaded: {loaded})",
            fix=f"{fix}, or name another backend",
        )


_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def warn_once(op: str, backend: str, error: BaseException, what: str) -> None:
    key = (op, backend, type(error).__name__)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(
        f"opcore: {what} of backend {backend!r} for {op}() raised {type(error).__name__}: {error}; "
        "falling back to the next candidate. Pin the backend (backend=...) or use opcore.strict() to make "
        "this an error.",
        FallbackWarning,
        stacklevel=4,
    )


def select(
    rt: Runtime, contract: OpContract, bound: tuple[Any, ...], policy: ContextPolicy | None, pin: str | None
) -> Selection:
    """Check the inputs (meta function) and walk the ranked kernels for this signature.

    Raises the contract's errors for bad inputs; a call that no kernel can run is
    returned with ``error`` set, so explain can show it.
    """
    op = contract.name
    meta_args = _metas(contract, bound)
    kinds = kinds_of(bound)
    tuned = _tuning_file_exists()  # its lookups read the file: no memo then
    key = None if tuned else _memo_key(rt, contract, meta_args, kinds, policy, pin)
    if key is not None:
        known = _SELECTED.get(key)
        if known is not None:
            return known.copy()
    try:
        tensors = list(tensor_arguments(contract, meta_args))
        device = common_device(tensors)
        out = contract.meta(*meta_args)  # first: its message about a missing tensor is the better one
        if not tensors and not contract.creates:
            raise ArgumentError("was called without any tensor", fix="pass at least one numpy array or torch tensor")
    except OpcoreError as error:
        if error.op is None:
            error.op = op
        raise
    except Exception as error:  # a bug in a contract's meta function, reported as such
        raise PluginError(
            f"the meta function {contract.source} raised {type(error).__name__}: {error}",
            op=op,
            fix="this is a bug in the contract's plugin; report it to its authors",
        ) from error
    outputs = out if isinstance(out, tuple) else (out,)
    _check_size(op, outputs, tensors)
    if contract.creates:  # no tensor: the output its meta read from the dtype and device attributes
        device, dtype = outputs[0].device, outputs[0].dtype
    else:
        keyed = meta_args[contract.dtype_position]
        if isinstance(keyed, tuple):
            keyed = next((m for m in keyed if isinstance(m, TensorMeta)), None)
        dtype = keyed.dtype if isinstance(keyed, TensorMeta) else tensors[0][1].dtype
    order, order_source = effective_order(rt, policy)
    transfer = None
    if pin is not None:
        check_named(rt, (pin,), "backend=")
        transfer = transfer_target(rt, pin, device, kinds)
    elif order is not None:
        check_named(rt, order, order_source)
    strict = policy.strict if policy is not None and policy.strict is not None else rt.settings.strict
    # a creation op's result: numpy on the CPU, torch elsewhere
    caller_kind = kinds[0] if kinds else ArrayKind.NUMPY if device.type is DeviceType.CPU else ArrayKind.TORCH
    if (
        caller_kind is ArrayKind.NUMPY
        and (ArrayKind.TORCH in kinds or not kinds)
        and any(o.dtype is DType.BFLOAT16 for o in outputs)
    ):  # numpy cannot hold a bfloat16 result: give it back as torch (a creation op's too)
        caller_kind = ArrayKind.TORCH
    selection = Selection(
        contract, meta_args, outputs, transfer or device, dtype, caller_kind, frozenset(kinds), order, order_source,
        strict, pin, transfer=transfer,
    )  # fmt: skip
    _walk(rt, selection, tuned)
    if key is not None and selection.error is None:
        if len(_SELECTED) >= MEMO_SIZE:
            _SELECTED.clear()
        _SELECTED[key] = selection.copy()
    return selection


# select()'s memo: a signature's Selection, by everything the walk reads (the checkers see metas only,
# as for run()'s own cache); cleared when what dispatch would pick may have changed (opcore.runtime's
# on_change: plugins, settings). A plan asks each node's kernels up to three times (its selection,
# the value ranges' verdicts, the resolved call), and a decoder's layers ask the same signatures:
# the walks of a 135M decoder's capture, 23,000 selections, were ~1.5-2 s of it.
MEMO_SIZE = 4096
_SELECTED: dict[tuple[Any, ...], Selection] = {}
on_change(_SELECTED.clear)


def _memo_key(
    rt: Runtime,
    contract: OpContract,
    meta_args: tuple[Any, ...],
    kinds: list[ArrayKind],
    policy: ContextPolicy | None,
    pin: str | None,
) -> tuple[Any, ...] | None:
    """The memo's key of a selection, or None where an argument cannot be a key (a list): it walks
    every time then. Each value is keyed with its type (1, 1.0 and True are equal in Python, not to a
    meta function)."""
    try:
        typed = tuple(_typed(value) for value in meta_args)
        key = (rt, contract, typed, tuple(kinds), policy, pin)
        hash(key)
    except TypeError:  # an unhashable argument (a list): walk every time
        return None
    return key


def _typed(value: Any) -> Any:
    if isinstance(value, tuple):
        return (tuple, tuple(_typed(item) for item in value))
    return (value.__class__, value)


def transfer_target(rt: Runtime, pin: str, device: Device, kinds: list[ArrayKind]) -> Device | None:
    """Where the inputs of a call pinned to ``pin`` must go: None when the backend serves their device
    (or they are torch tensors, whose placement is the caller's business), else the backend's first
    device type, for numpy inputs only: ``opcore.run(op, numpy_x, backend="cuda")`` runs on the GPU.
    """
    spec = rt.registry.backends.get(pin)
    if spec is None or not spec.device_types or device.type in spec.device_types:
        return None
    if any(kind is not ArrayKind.NUMPY for kind in kinds):
        return None
    return Device(spec.device_types[0])


def _walk(rt: Runtime, s: Selection, tuned: bool) -> None:
    op = s.contract.name
    registry = rt.registry
    bucket = registry.ranked(op).get((s.device.type, s.dtype), ())
    if tuned:  # a tuning file exists; else nothing of opcore.tuning loads: static ranking, deterministic
        from opcore.tuning.table import lookup, measured_order

        s.measured, s.tuning_note = lookup(rt, lambda: tuning_key(s))
        if s.measured is not None:  # measured winners first; an order the user gave still comes before
            bucket = measured_order(bucket, s.measured)
    if s.order:
        index = {name: i for i, name in enumerate(s.order)}
        bucket = tuple(sorted(bucket, key=lambda k: index.get(k.backend, len(index))))
    allowed: str | None = s.pin
    why_not = f"the call is pinned to {s.pin!r}" if s.pin else ""
    if s.pin is None and s.strict:
        device_backends = [
            name
            for name in (s.order or ())
            if name in registry.backends and s.device.type in registry.backends[name].device_types
        ]
        allowed = device_backends[0] if device_backends else (bucket[0].backend if bucket else None)
        why_not = f"strict mode: only {allowed!r} may run it"
    for kernel in bucket:
        spec = registry.backends.get(kernel.backend)
        if spec is None:  # unregistered by another thread after the table was read: as if never there
            continue
        priority = spec.priority + kernel.priority
        measured = s.measured.time_of(kernel.title) if s.measured is not None else None
        about = (kernel.label, kernel.source, priority, measured)
        if allowed is not None and kernel.backend != allowed:
            s.candidates.append(Candidate(kernel.backend, CandidateStatus.PASSED_OVER, why_not, *about))
            continue
        verdict = check_kernel(kernel, s)
        if isinstance(verdict, Costly) and measured is not None:
            verdict = True  # a constant said it is slower here; the measurement says otherwise
        if verdict is True:
            status = CandidateStatus.FALLBACK if s.accepted else CandidateStatus.CHOSEN
            s.candidates.append(Candidate(kernel.backend, status, "", *about))
            s.accepted.append(kernel)
        else:
            s.candidates.append(Candidate(kernel.backend, CandidateStatus.DECLINED, verdict, *about))
    _others(rt, s, {k.backend for k in bucket})
    if s.accepted:
        return
    if s.contract.decomposition is not None and not s.strict:
        s.decompose = True
        return
    s.error = no_kernel_error(s)


def _tuning_file_exists() -> bool:
    import os

    return os.path.exists(default_path())


def tuning_key(s: Selection) -> str:
    """The tuning file's key of this selection's signature (its bucket)."""
    from opcore.tuning.table import signature_key

    named = zip(s.contract.schema.names, s.meta_args)
    return signature_key(s.contract.name, s.device.type.value, named)


def check_kernel(kernel: Kernel, s: Selection) -> Literal[True] | str:
    """The kernel's checker on this selection's metas: True, or why it declines (a ``Costly`` reason when
    only a speed constant stands in the way); a checker that raises declines with a warning.
    """
    if kernel.array_kind is ArrayKind.NUMPY and s.max_rank > NUMPY_MAX_RANK:
        return f"a numpy kernel: numpy holds at most {NUMPY_MAX_RANK} dims, an input or output has {s.max_rank}"
    if kernel.checker is None:
        return True
    try:
        verdict = kernel.checker(*s.meta_args)
    except Exception as error:
        warn_once(s.contract.name, kernel.backend, error, "the checker")
        return f"its checker raised {type(error).__name__}: {error}"
    if verdict is True:
        return True
    return verdict if isinstance(verdict, str) and verdict else "its checker declined"


def _others(rt: Runtime, s: Selection, ranked: set[str]) -> None:
    """Rows for backends that have no kernel here, or did not load."""
    registry = rt.registry
    for name, report in sorted(rt.loader.reports.items()):
        if name in ranked:
            continue
        if report.status is PluginStatus.LOADED:
            mine = [k for k in registry.kernels_of(s.contract.name) if k.backend == name]
            # a dtype the kernel declines outright (Kernel.declined): a decline with its reason, as its checker gave
            why = [r for k in mine if k.device_type is s.device.type and (r := k.declined_reason(s.dtype))]
            status = CandidateStatus.DECLINED if why else CandidateStatus.NO_KERNEL
            if not mine:
                reason = f"has no kernel for {s.contract.name}"
            elif why:
                reason = why[0]
            else:
                has = sorted({f"{d.value} on {k.device_type.value}" for k in mine for d in k.dtypes})
                reason = f"no kernel for {s.dtype.value} on {s.device.type.value} (has {', '.join(has)})"
            s.candidates.append(Candidate(name, status, reason))
        else:
            reason = report.reason.split(". Fix:")[0]  # the fix is in `opcore doctor`
            s.candidates.append(Candidate(name, CandidateStatus(report.status.value), reason))


def no_kernel_error(s: Selection, extra: str = "") -> NoKernelError:
    lines = [f"no kernel accepts {s.dtype.value} inputs on {s.device}"]
    if extra:
        lines[0] += f" ({extra})"
    for candidate in s.candidates:
        lines.append(
            f"  - {candidate.title}: {candidate.status.value}" + (f": {candidate.reason}" if candidate.reason else "")
        )
    if s.strict and s.contract.decomposition is not None:
        lines.append("  - decomposition: not tried in strict mode")
    present = {c.backend for c in s.candidates}
    suits = ("cuda",) if s.device.type.value == "cuda" else ("cpu", "openvino", "onnxruntime")
    missing = [n for n in suits if n not in present]
    fix = "run `opcore doctor` to see every backend"
    if s.pin or s.strict:
        fix = "drop backend= / strict mode to allow fallback, or " + fix
    if missing:
        fix = "install more backends (pip install 'opcore[" + ",".join(missing) + "]'), or " + fix
    return NoKernelError("\n".join(lines), op=s.contract.name, fix=fix)
