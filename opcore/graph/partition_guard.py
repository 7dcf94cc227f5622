"""A graph backend's partition compiler held to the kernels' standard: whatever it does, the host goes on.

A kernel that raises, returns the wrong thing or hangs in its probe is isolated (opcore.kernel_walk,
opcore.plugins); this module does the same for partition compilers and their compiled partitions:

* ``guarded(...)`` calls a compiler's ``compile``/``load``/``save`` in a worker thread with a time
  limit (``OPCORE_COMPILE_TIMEOUT``, default ``COMPILE_TIMEOUT_S``). An ``OpcoreError`` passes
  through unchanged (the compiler's own word: the plan takes the node it names out); anything else,
  or no answer in time, becomes a ``CompilerCrash`` naming the backend, what it was asked and its error.
* ``output_problem(...)``: a compiled partition's outputs checked against the spec (a tuple of numpy
  arrays, one per output, of the spec's dtypes and static sizes), on its first call and on every call
  under ``OPCORE_CHECK=1``.
* ``partition_call(record)``: the function a plan's step calls. A failure while running (an exception,
  or outputs the check refuses) makes the plan run the partition's nodes per node from then on, after
  one warning naming the backend and its error; where the failure may not pass silently (strict mode,
  ``fallback=False``, or a plan pinned to the backend: ``raises_for``) it raises a ``PartitionError``.

>>> str(CompilerCrash("p0", "vend", "compile() raised RuntimeError: boom"))[:60]
'partition p0 on vend: could not compile: compile() raised Ru'
"""

from __future__ import annotations

import contextvars
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy

from opcore.errors import FallbackWarning, OpcoreError
from opcore.graph.partition import PartitionError, PartitionSpec
from opcore.types import DType, is_numpy_bfloat16

__all__ = [
    "COMPILE_TIMEOUT_S",
    "CompilerCrash",
    "answer",
    "compile_timeout",
    "guarded",
    "host_array",
    "output_problem",
    "partition_call",
    "raises_for",
    "strict_in_force",
    "torch_of",
    "warn_partition",
]

T = TypeVar("T")

COMPILE_TIMEOUT_S = 300.0  # a compile of a large model on a slow machine takes minutes, not hours

_FIX = (
    "report it to the plugin's maker; meanwhile leave the backend out of backends=, or turn it off with "
    "OPCORE_DISABLE={backend} (`opcore doctor` shows its partition compiler)"
)


class CompilerCrash(PartitionError):
    """A partition compiler (or a partition it compiled) raised something other than an OpcoreError,
    returned something the spec does not allow, or did not finish in time: a bug in the backend's
    plugin. The plan declines the partition (its nodes run per node) where it may, else raises this."""

    def __init__(self, partition: str, backend: str, reason: str, *, headline: str | None = None) -> None:
        super().__init__(partition, backend, reason, headline=headline, fix=_FIX.format(backend=backend))


def strict_in_force() -> bool:
    """Whether opcore.strict() (or OPCORE_STRICT) is in force: every node must run where it was asked to."""
    from opcore.runtime import runtime
    from opcore.settings import context_policy

    policy = context_policy.get()
    if policy is not None and policy.strict is not None:
        return policy.strict
    return bool(runtime().ensure_loaded().settings.strict)


def raises_for(options: Any, backend: str) -> bool:
    """Whether a failure of ``backend``'s partitions raises rather than declines: strict mode,
    ``fallback=False``, or a plan whose ``backends=`` names the backend (pinned)."""
    pinned = options.backends is not None and backend in options.backends
    return pinned or not options.fallback or strict_in_force()


def compile_timeout() -> float:
    """Seconds a compiler's compile/load may take (OPCORE_COMPILE_TIMEOUT, else COMPILE_TIMEOUT_S)."""
    from opcore.runtime import runtime

    found = runtime().ensure_loaded().settings.compile_timeout
    return COMPILE_TIMEOUT_S if found is None else found


def _first_line(error: BaseException) -> str:
    text = (str(error).strip().splitlines() or [""])[0][:300]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def answer(compiler: Any, method: str, op: str) -> bool:
    """``compiler.<method>(op)`` as a bool: ``supports``, or the optional ``takes_sizes`` (a compiler
    without the method answers False). An answer that raises is a CompilerCrash naming the backend,
    handled as a compile that crashed: the plan uses no partition of the backend, or raises where
    the plan is strict or pinned to it.

    >>> class Broken:
    ...     backend = "vend"
    ...     def supports(self, op): raise KeyError(op)
    >>> str(answer(Broken(), "takes_sizes", "relu")), str(answer(object(), "supports", "relu"))
    ('False', 'False')
    >>> try:
    ...     answer(Broken(), "supports", "relu")
    ... except CompilerCrash as crash:
    ...     print(crash.reason)
    its supports('relu') raised KeyError: 'relu'
    """
    check = getattr(compiler, method, None)
    if check is None:
        return False
    try:
        return bool(check(op))
    except Exception as error:
        backend = str(getattr(compiler, "backend", type(compiler).__name__))
        reason = f"its {method}({op!r}) raised {_first_line(error)}"
        headline = f"{backend}'s partition compiler failed: {reason}"
        raise CompilerCrash("-", backend, reason, headline=headline) from error


def guarded(backend: str, partition: str, what: str, call: Callable[[], T], timeout: float | None = None) -> T:
    """``call()`` (the compiler's ``what``: "compile", "load", "save") for ``partition`` of ``backend``:
    its result, or its OpcoreError as raised; any other exception, or no answer within ``timeout``
    seconds (None: no limit, no thread), as a CompilerCrash."""
    if timeout is None:
        try:
            return call()
        except OpcoreError:
            raise
        except Exception as error:
            raise CompilerCrash(partition, backend, f"its {what}() raised {_first_line(error)}") from error
    answer: list[tuple[bool, Any]] = []
    context = contextvars.copy_context()  # opcore.strict() and prefer() hold in the worker too

    def work() -> None:
        try:
            answer.append((True, context.run(call)))
        except BaseException as error:  # handed to the calling thread below
            answer.append((False, error))

    worker = threading.Thread(target=work, name=f"opcore {backend} {what} {partition}", daemon=True)
    started = time.monotonic()
    worker.start()
    while not answer and worker.is_alive() and time.monotonic() - started < timeout:
        worker.join(min(0.05, timeout))
    if not answer:
        raise CompilerCrash(
            partition, backend, f"its {what}() did not finish within {timeout:g} s (OPCORE_COMPILE_TIMEOUT)"
        )
    ok, value = answer[0]
    if ok:
        return value  # type: ignore[no-any-return]
    if isinstance(value, OpcoreError):
        raise value
    if isinstance(value, KeyboardInterrupt):
        raise value
    raise CompilerCrash(partition, backend, f"its {what}() raised {_first_line(value)}") from value


def output_dims(spec: PartitionSpec, dims: Any) -> tuple[tuple[int | None, ...], ...]:
    """Per output of ``spec``, its sizes with None for a symbolic one (``dims(name)``: the graph's dims)."""
    return tuple(tuple(d if isinstance(d, int) else None for d in dims(name)) for name in spec.outputs)


def output_problem(spec: PartitionSpec, dims: Sequence[tuple[int | None, ...]], outputs: Any) -> str | None:
    """None when ``outputs`` are what the spec promises (a tuple of numpy arrays, one per output, of its
    dtypes, ranks and static sizes), else what is wrong, for the warning or error.

    >>> from opcore.graph.partition import PartNode, ValueRef
    >>> from opcore.types import DType, TensorMeta
    >>> m = TensorMeta((2,), DType.FLOAT32)
    >>> spec = PartitionSpec("p", (PartNode("relu", (ValueRef("x"),), ("y",)),), ("x",), {}, ("y",), {"x": m, "y": m})
    >>> output_problem(spec, [(2,)], (numpy.zeros(3, "float32"),))
    "output 0 ('y') has shape (3,), the spec says (2,)"
    """
    if not isinstance(outputs, (tuple, list)):
        return f"returned {type(outputs).__name__}, not a tuple of numpy arrays"
    if len(outputs) != len(spec.outputs):
        return f"returned {len(outputs)} outputs, the spec has {len(spec.outputs)}"
    for index, (name, want, array) in enumerate(zip(spec.outputs, dims, outputs)):
        label = f"output {index} ({name!r})"
        if not isinstance(array, numpy.ndarray):
            return f"{label} is {type(array).__name__}, not a numpy array"
        meta = spec.metas[name]
        dtype = meta.dtype.to_numpy()
        if array.dtype != dtype:
            return f"{label} has dtype {array.dtype}, the spec says {numpy.dtype(dtype)}"
        shown = tuple("?" if d is None else d for d in want)
        if array.ndim != len(want) or any(d is not None and d != s for d, s in zip(want, array.shape)):
            return f"{label} has shape {tuple(array.shape)}, the spec says {shown if None in want else tuple(want)}"
    return None


_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def warn_partition(backend: str, stage: str, error: BaseException | str, outcome: str) -> None:
    """One FallbackWarning per (backend, stage, error kind) in this process, naming the backend and its error."""
    kind = type(error).__name__ if isinstance(error, BaseException) else str(error).split(":")[0]
    key = (backend, stage, kind)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(
        f"opcore: the partition compiler of backend {backend!r} failed {stage}: {error}; {outcome}. Pin the "
        f"backend (backends=[{backend!r}, ...]) or use opcore.strict() to make this an error; "
        f"OPCORE_DISABLE={backend} turns the backend off.",
        FallbackWarning,
        stacklevel=3,
    )


def host_array(tensor: Any) -> numpy.ndarray:
    """A CPU tensor's numpy view (no copy where it is contiguous); a bfloat16 tensor's as
    ``ml_dtypes.bfloat16`` (numpy has none: the same bytes, viewed)."""
    tensor = tensor.contiguous()
    if tensor.dtype.itemsize == 2 and tensor.dtype.is_floating_point:  # float16 or bfloat16
        import torch

        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(DType.BFLOAT16.to_numpy())
    return tensor.numpy()  # type: ignore[no-any-return]


def torch_of(array: numpy.ndarray) -> Any:
    """The tensor sharing a partition output's memory (``ml_dtypes.bfloat16`` as torch.bfloat16)."""
    import torch

    if is_numpy_bfloat16(array.dtype):
        return torch.from_numpy(array.view(numpy.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _array(value: Any) -> Any:
    """A partition input as the runtime takes it: a tensor's numpy view, a size computed at run time
    (a Python int) as a 0-D int64 array."""
    if type(value) is int:
        return numpy.asarray(value, dtype=numpy.int64)
    return host_array(value)


def partition_call(record: Any) -> Callable[..., Any]:
    """The compiled partition of ``record`` (a PartitionRecord) between torch tensors: numpy views in,
    tensors sharing the results out (one tensor for a partition with one output, as a node's step
    stores it). Its arguments are the spec's inputs, then ``record.sizes`` (what its nodes per node
    read besides: sizes computed at run time), which the compiled partition does not take.

    Outputs are checked against the spec on the first call (every call under OPCORE_CHECK=1). A
    failure raises a PartitionError naming the partition, its backend and nodes where
    ``record.raises``; else it warns once and runs ``record.fallback()`` (the nodes per node) from then on.
    """
    import torch

    from opcore.runtime import runtime

    # bfloat16 outputs come back as ml_dtypes.bfloat16 arrays (torch.from_numpy takes none)
    bfloat16 = any(record.spec.metas[name].dtype is DType.BFLOAT16 for name in record.spec.outputs)
    from_numpy = torch_of if bfloat16 else torch.from_numpy
    compiled = record.compiled
    count = len(record.spec.inputs)
    single = len(record.spec.outputs) == 1
    every = bool(runtime().ensure_loaded().settings.check)
    state: list[Any] = [False, None]  # checked once; the per-node function that replaced the partition

    def fail(tensors: tuple[Any, ...], reason: str, cause: BaseException | None) -> Any:
        where = record.where()
        headline = f"{where} failed while running: {reason}"
        if record.raises or record.fallback is None:
            raise CompilerCrash(record.name, record.backend, reason, headline=headline) from cause
        warn_partition(record.backend, "while running", reason, "its nodes run per node from now on")
        record.note = (record.note + "; " if record.note else "") + f"failed while running ({reason}): runs per node"
        state[1] = record.fallback()
        return state[1](*tensors)

    # contiguous() is the tensor itself where it already is; numpy.ascontiguousarray would turn a
    # 0-D value (a scalar the graph computed) into shape (1,), which a runtime's model refuses
    def call(*tensors: Any) -> Any:
        replaced = state[1]
        if replaced is not None:
            return replaced(*tensors)
        try:
            outputs = compiled(*(_array(t) for t in tensors[:count]))
        except Exception as error:
            cause = error.__cause__ or error
            text = str(cause).strip() or type(cause).__name__
            return fail(tensors, f"{type(cause).__name__}: {text}", error)
        if every or not state[0]:
            problem = output_problem(record.spec, record.dims, outputs)
            if problem is not None:
                return fail(tensors, f"its outputs break the spec: {problem}", None)
            state[0] = True
        if single:
            return from_numpy(outputs[0])
        return tuple(from_numpy(a) for a in outputs)

    return call
