"""Running one sample or one error input on one backend, and judging the result.

A sample runs pinned (``backend=NAME``) with inputs in the kind and on the device of the
backend's kernel (numpy, or torch for torch kernels, bfloat16 and non-CPU devices), and its
result is compared with the reference's on the same values: the kind the caller passed in, the
dtype and shape the contract's meta function gives, no input written into, values within the
tolerance. A backend that has no kernel for the sample's dtype, whose checker declines it, or
whose kernel hands it over at run time has *declined* it: that is counted, never passed.

>>> outcome = check_sample("reference", entry("relu"), samples_of(entry("relu"))[0])   # doctest: +SKIP
>>> outcome.status
<Status.PASSED: 'passed'>
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy

import opcore
from opcore.errors import NoKernelError, OpcoreError
from opcore.kernel_records import Kernel
from opcore.testing.records import ErrorInput, OpEntry, Sample, TensorInput
from opcore.testing.tolerances import tolerance_for
from opcore.types import ArrayKind, DeviceType, DType, TensorMeta, array_kind_of

__all__ = ["ConformanceError", "Outcome", "Status", "check_error", "check_sample", "claims", "kernels_of"]


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    DECLINED = "declined"  # the backend claims the op but not these inputs (dtype, device, checker)
    NOT_COVERED = "not covered"  # the backend has no kernel for the op at all
    SKIPPED = "skipped"  # the kit cannot run it here (torch is not installed for a bfloat16 sample)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    reason: str = ""


class ConformanceError(AssertionError):
    """A backend's result or error differs from what the contract and the reference say."""


def kernels_of(backend: str, op: str) -> tuple[Kernel, ...]:
    """The kernels ``backend`` registered for ``op`` (its claim on the op)."""
    registry = opcore.runtime.runtime().ensure_loaded().registry
    return tuple(k for k in registry.kernels_of(op) if k.backend == backend)


def claims(backend: str, op: str) -> bool:
    """True when ``backend`` has a kernel for ``op``, for any dtype or device."""
    return bool(kernels_of(backend, op))


# --- inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Placement:
    kind: ArrayKind
    device: str  # "cpu", "cuda", ...


def _values(sample: Sample | ErrorInput) -> list[Any]:
    return [*sample.args, *sample.kwargs.values()]


def _needs_torch(sample: Sample | ErrorInput) -> bool:
    return any(t.dtype is DType.BFLOAT16 for t in _tensor_inputs(_values(sample)))


def _tensor_inputs(values: list[Any]) -> list[TensorInput]:
    found = []
    for value in values:
        items = value if isinstance(value, (list, tuple)) else (value,)
        found += [item for item in items if isinstance(item, TensorInput)]
    return found


def _dispatch_dtype(op_entry: OpEntry, sample: Sample | ErrorInput) -> DType | None:
    """The dtype that picks the kernel: the contract's dtype argument, from the sample's metas."""
    contract = opcore.runtime.runtime().ensure_loaded().registry.contract(op_entry.op)
    try:
        kwargs = {name: _map((value,), _meta)[0] for name, value in sample.kwargs.items()}
        bound = contract.schema.bind(_map(sample.args, _meta), kwargs, metas=True)
    except OpcoreError:
        return None
    value = bound[contract.dtype_position]
    if isinstance(value, tuple):
        value = next((v for v in value if isinstance(v, TensorMeta)), None)
    if contract.creates and value is not None:  # a creation op's dtype attribute
        return DType.parse(value)
    return value.dtype if isinstance(value, TensorMeta) else None


def _meta(value: TensorInput) -> TensorMeta:
    return TensorMeta(value.shape, value.dtype)


def _map(values: tuple[Any, ...], make: Any) -> tuple[Any, ...]:
    out = []
    for value in values:
        if isinstance(value, TensorInput):
            out.append(make(value))
        elif isinstance(value, list):
            out.append([make(v) if isinstance(v, TensorInput) else v for v in value])
        else:
            out.append(value)
    return tuple(out)


def _materialize(sample: Sample | ErrorInput, placement: _Placement) -> tuple[tuple[Any, ...], dict[str, Any]]:
    torch_wanted = placement.kind is ArrayKind.TORCH or _needs_torch(sample)

    def make(value: TensorInput) -> Any:
        return value.to_torch(placement.device) if torch_wanted else value.to_numpy()

    args = _map(sample.args, make)
    kwargs = {name: _map((value,), make)[0] for name, value in sample.kwargs.items()}
    return args, kwargs


def _on_device(
    op: str, call: tuple[tuple[Any, ...], dict[str, Any]], placement: _Placement
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A creation op's call with its ``device`` attribute set to the kernel's device (it has no
    tensor to carry the device); other calls as they are."""
    args, kwargs = call
    if placement.device == "cpu":
        return call
    schema = opcore.runtime.runtime().ensure_loaded().registry.contract(op).schema
    if schema.tensor_positions or "device" not in schema.names or "device" in kwargs:
        return call
    return args, {**kwargs, "device": placement.device}


def _torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _placement(backend: str, op: str, dtype: DType | None) -> _Placement | Outcome:
    """Where the backend's kernel for this dtype wants its inputs, or why it declines."""
    mine = kernels_of(backend, op)
    if not mine:
        return Outcome(Status.NOT_COVERED, f"{backend} has no kernel for {op}")
    fitting = [k for k in mine if dtype is None or dtype in k.dtypes]
    if not fitting:
        has = ", ".join(sorted({d.value for k in mine for d in k.dtypes}))
        # a dtype the backend leaves out on purpose says why (Kernel.declined), as explain does
        why = next((reason for k in mine if (reason := k.declined_reason(dtype))), None)
        because = f": {why}" if why else ""
        return Outcome(Status.DECLINED, f"{backend} has no {op} kernel for {dtype} (has {has}){because}")
    on_cpu = [k for k in fitting if k.device_type is DeviceType.CPU]
    kernel = (on_cpu or fitting)[0]
    return _Placement(kernel.array_kind, kernel.device_type.value)


# --- samples -----------------------------------------------------------------------------------


def check_sample(backend: str, op_entry: OpEntry, sample: Sample) -> Outcome:
    """Run ``sample`` on ``backend`` and compare with the reference; raises ConformanceError when
    the backend gets it wrong, returns PASSED, DECLINED, NOT_COVERED or SKIPPED otherwise.
    """
    op = op_entry.op
    placement = _placement(backend, op, _dispatch_dtype(op_entry, sample))
    if isinstance(placement, Outcome):
        return placement
    if (placement.kind is ArrayKind.TORCH or _needs_torch(sample)) and not _torch_available():
        return Outcome(Status.SKIPPED, "torch is not installed (bfloat16 and torch kernels need torch inputs)")
    where = f"{backend}: {op}[{sample.id}] {op}({sample.describe()})"
    args, kwargs = _on_device(op, _materialize(sample, placement), placement)
    explanation = opcore.explain(op, *args, backend=backend, **kwargs)
    if explanation.chosen is None or explanation.chosen == "decomposition":
        reasons = [c.reason for c in explanation.candidates if c.backend == backend and c.reason]
        how = "decomposed into other ops" if explanation.chosen else "; ".join(reasons) or str(explanation.error)
        return Outcome(Status.DECLINED, f"{backend} declines {op} here: {how}")
    before = _snapshot(args, kwargs)
    try:
        result = opcore.run(op, *args, backend=backend, **kwargs)
    except NoKernelError as error:  # a kernel raised Unsupported at run time
        return Outcome(Status.DECLINED, f"{backend} handed {op} over at run time: {str(error).splitlines()[0]}")
    except Exception as error:
        raise ConformanceError(f"{where}\n  raised {type(error).__name__}: {error}\n{_frames(error)}") from error
    if _snapshot(args, kwargs) != before:
        raise ConformanceError(f"{where}\n  the kernel wrote into its inputs")
    expected_meta = _expected_meta(op, args, kwargs)
    _check_container(where, result, args, kwargs, placement, expected_meta)
    _check_meta(where, result, expected_meta)
    expected = _reference_result(op_entry, sample)
    for got, want, meta in zip(_as_tuple(result), _as_tuple(expected), expected_meta):
        tolerance = tolerance_for(meta.dtype, op_entry, sample)
        _compare(where, got, want, tolerance.rtol, tolerance.atol)
    return Outcome(Status.PASSED)


def _frames(error: BaseException) -> str:
    """The last frames of a kernel's traceback, for the failure message."""
    import traceback

    lines = traceback.format_exception(type(error), error, error.__traceback__)
    return "".join(lines[-7:-1]).rstrip()


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


def _reference_result(op_entry: OpEntry, sample: Sample) -> Any:
    args, kwargs = _materialize(sample, _Placement(ArrayKind.NUMPY, "cpu"))
    if callable(op_entry.reference):
        return op_entry.reference(*args, **kwargs)
    return opcore.run(op_entry.op, *args, backend=op_entry.reference, **kwargs)


def _expected_meta(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[TensorMeta, ...]:
    def meta(value: Any) -> Any:
        if array_kind_of(value) is not None:
            return TensorMeta.of(value)
        if isinstance(value, list):
            return [meta(v) for v in value]
        return value

    out = opcore.infer_meta(op, *(meta(a) for a in args), **{k: meta(v) for k, v in kwargs.items()})
    return out if isinstance(out, tuple) else (out,)


def _check_container(
    where: str,
    result: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    p: _Placement,
    metas: tuple[TensorMeta, ...],
) -> None:
    kinds = [array_kind_of(t) for t in _flat_arrays([*args, *kwargs.values()])]
    # without inputs (a creation op): numpy on the CPU (torch for bfloat16, which numpy lacks), torch elsewhere
    on_cpu = p.device == "cpu" and all(m.dtype is not DType.BFLOAT16 for m in metas)
    wanted = kinds[0] if kinds else ArrayKind.NUMPY if on_cpu else ArrayKind.TORCH
    wanted_name = wanted.value if wanted is not None else "these"
    for item in _as_tuple(result):
        found = array_kind_of(item)
        if found is not wanted:
            raise ConformanceError(
                f"{where}\n  returned {type(item).__name__} for {wanted_name} inputs (the caller's kind comes back)"
            )
        if found is ArrayKind.TORCH and item.device.type != p.device:
            raise ConformanceError(f"{where}\n  returned a tensor on {item.device} for inputs on {p.device}")


def _flat_arrays(values: list[Any]) -> list[Any]:
    found = []
    for value in values:
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if array_kind_of(item) is not None:
                found.append(item)
    return found


def _check_meta(where: str, result: Any, expected: tuple[TensorMeta, ...]) -> None:
    results = _as_tuple(result)
    if len(results) != len(expected):
        raise ConformanceError(f"{where}\n  returned {len(results)} outputs, the contract has {len(expected)}")
    for got, want in zip(results, expected):
        meta = TensorMeta.of(got)
        if meta.shape != want.shape or meta.dtype is not want.dtype:
            raise ConformanceError(
                f"{where}\n  returned {meta.dtype.value}{list(meta.shape)}, "
                f"the contract says {want.dtype.value}{list(want.shape)}"
            )


def _to_numpy(value: Any) -> numpy.ndarray:
    """A numpy copy of a result; bfloat16 as float32 (exactly)."""
    if isinstance(value, numpy.ndarray):
        return numpy.array(value)
    import torch

    value = value.detach().cpu()
    if value.dtype is torch.bfloat16:
        value = value.float()
    return value.resolve_conj().resolve_neg().numpy().copy()


def _compare(where: str, got: Any, want: Any, rtol: float, atol: float) -> None:
    actual, expected = _to_numpy(got), _to_numpy(want)
    if actual.dtype.kind in "biu" or expected.dtype.kind in "biu" or (rtol == 0.0 and atol == 0.0):
        same = actual.shape == expected.shape and numpy.array_equal(
            actual, expected, equal_nan=actual.dtype.kind == "f"
        )
        if not same:
            wrong: numpy.ndarray | list[Any] = (
                numpy.argwhere(~_equal(actual, expected)) if actual.shape == expected.shape else []
            )
            at = tuple(int(i) for i in wrong[0]) if len(wrong) else ()
            detail = f"at index {at}: got {actual[at]!r}, expected {expected[at]!r}" if len(wrong) else ""
            raise ConformanceError(
                f"{where}\n  values differ from the reference (exact comparison): "
                f"{len(wrong)} of {expected.size} elements {detail}"
            )
        return
    a64, e64 = actual.astype(numpy.float64), expected.astype(numpy.float64)
    with numpy.errstate(all="ignore"):
        close = numpy.isclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)
        difference = numpy.where(close, 0.0, numpy.abs(a64 - e64))
    if not close.all():
        wrong = numpy.argwhere(~close)
        at = tuple(int(i) for i in wrong[0])
        finite = difference[numpy.isfinite(difference)]
        special = int((~close).sum()) - int((finite > 0).sum())
        worst = f"largest difference {float(finite.max()):.6g}" if finite.size and finite.max() > 0 else ""
        if special:
            worst += (", " if worst else "") + f"{special} where one side is inf or nan and the other is not"
        raise ConformanceError(
            f"{where}\n  values differ from the reference beyond rtol={rtol:g}, atol={atol:g}: "
            f"{len(wrong)} of {e64.size} elements ({worst}); "
            f"first at index {at}: got {a64[at]!r}, expected {e64[at]!r}"
        )


def _equal(a: numpy.ndarray, b: numpy.ndarray) -> numpy.ndarray:
    same = a == b
    if a.dtype.kind == "f":
        same |= numpy.isnan(a) & numpy.isnan(b)
    return numpy.asarray(same)


def _snapshot(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[bytes]:
    """The bytes of every input, to tell whether a kernel wrote into one."""
    snapshot = []
    for array in _flat_arrays([*args, *kwargs.values()]):
        if isinstance(array, numpy.ndarray):
            snapshot.append(array.tobytes())
        else:
            import torch

            flat = array.detach().cpu().reshape(-1).contiguous()
            snapshot.append(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return snapshot


# --- error inputs ------------------------------------------------------------------------------


def check_error(backend: str, op_entry: OpEntry, case: ErrorInput) -> Outcome:
    """Run a bad input on ``backend``; raises ConformanceError unless it raises the expected error
    type, starting with ``op(): ``, naming the argument, and matching the pattern.
    """
    op = op_entry.op
    if case.raised_by == "kernel":
        placement = _placement(backend, op, _dispatch_dtype(op_entry, case))
        if isinstance(placement, Outcome):
            return placement
    else:  # raised before any kernel: numpy inputs reach every backend the same way
        placement = _Placement(ArrayKind.NUMPY, "cpu")
    if _needs_torch(case) and not _torch_available():
        return Outcome(Status.SKIPPED, "torch is not installed (bfloat16 inputs need torch)")
    where = f"{backend}: {op}[{case.id}] {op}({case.describe()})"
    args, kwargs = _on_device(op, _materialize(case, placement), placement)
    try:
        opcore.run(op, *args, backend=backend, **kwargs)
    except NoKernelError as error:
        if case.error is not NoKernelError and case.raised_by == "kernel":
            return Outcome(Status.DECLINED, f"{backend} declines {op} here: {str(error).splitlines()[0]}")
        return _judge_error(where, op, case, error)
    except Exception as error:
        return _judge_error(where, op, case, error)
    raise ConformanceError(f"{where}\n  raised nothing; expected {case.error.__name__} naming {case.arg!r}")


def _judge_error(where: str, op: str, case: ErrorInput, error: Exception) -> Outcome:
    message = str(error)
    wanted = f"{case.error.__name__}" + (f" naming argument {case.arg!r}" if case.arg else "")
    if not isinstance(error, case.error):
        raise ConformanceError(f"{where}\n  raised {type(error).__name__}: {message}\n  expected {wanted}") from error
    problems = []
    if not message.startswith(f"{op}(): "):
        problems.append(f"the message does not start with '{op}(): '")
    if case.arg is not None and (f"argument '{case.arg}'" not in message or getattr(error, "arg", None) != case.arg):
        problems.append(f"the error does not name argument {case.arg!r}")
    if case.match and not re.search(case.match, message):
        problems.append(f"the message does not match {case.match!r}")
    if problems:
        raise ConformanceError(f"{where}\n  raised {type(error).__name__}: {message}\n  but " + "; ".join(problems))
    return Outcome(Status.PASSED)
