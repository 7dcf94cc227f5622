"""The adversarial fuzzer as hypothesis properties (issue 29; was a hand-written generator, issue 14).

Property: any call of any op, on any backend or unpinned, returns a result or raises an
``OpcoreError``: never another exception, never a crash, never a hang (the profile's deadline).
Calls are drawn from the op contracts (each argument from its schema type: tensors of the
contract's dtypes and of dtypes it does not take, ranks 0-4, sizes 0-4, contiguous, transposed,
every-other, reversed and stride-0 layouts, special values; ints, floats, strings, lists) and
from the conformance kit's valid samples with one argument replaced by a bad value, so that
calls get past the contract into the kernels. A failing call shrinks to a small one, printed as
``Draw 1 (call): opcore.run(...)`` with each array's dtype, shape and strides (and the failing
backend in a note under the error).

Run by test_adv_fuzz.py in a child pytest (a crash such as SIGFPE kills the child, not the
test run). ``HYPOTHESIS_PROFILE``: ``ci`` (the default: derandomized, in make test's budget) or
``soak`` (many more examples, random, remembered in .hypothesis/); docs/testing.md.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy
import pytest
from hypothesis import HealthCheck, event, example, given, reject, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import opcore
from opcore.schema import ArgType, Argument, BaseType
from opcore.testing import builtin_entries, error_inputs_of, samples_of
from opcore.testing.records import ErrorInput, Sample, TensorInput

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("OPCORE_FUZZ_EXAMPLES", "12")),
    deadline=20_000,  # ms: a first call compiles a model (OpenVINO ~1 s), on a shared machine: a hang, not a slow call
    derandomize=True,  # the same calls on every run: make test does not turn red by luck
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "soak",
    max_examples=int(os.environ.get("OPCORE_FUZZ_EXAMPLES", "500")),
    deadline=5_000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

BACKENDS: list[str | None] = [None] + [
    r.name for r in opcore.backends() if r.ok and r.name in ("reference", "cpu", "onnxruntime", "openvino")
]
CONTRACTS = {c.name: c for c in opcore.ops()}
ENTRIES = [e for e in builtin_entries() if e.op in CONTRACTS]

# Rows of the "huge stride-0" layout: a power of two with at least half the machine's memory in one byte
# per row, so that a 1-byte input and its 1-byte result fit alone but not together (the case that once
# passed the size check and got the fuzzer OOM-killed), and every wider array is over it alone.
_MEMORY = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
HUGE_ROWS = 1 << max(34, (_MEMORY // 2).bit_length())
BAD_DTYPES = ("complex64", "uint16", "object", ">f4")
# contiguous three times as often as each other layout
LAYOUTS = (
    "contiguous",
    "contiguous",
    "contiguous",
    "transposed",
    "every other",
    "reversed",
    "stride-0",
    "huge stride-0",
)


def describe(value: Any) -> str:
    """A value as the failure report shows it: arrays by kind, dtype, shape and strides (and small values)."""
    if isinstance(value, numpy.ndarray):
        kind = type(value).__name__
        text = f"{kind}({value.dtype.str if value.dtype.byteorder == '>' else value.dtype}{list(value.shape)}"
        text += f" strides={value.strides}"
        if value.size <= 8 and value.dtype != object:
            text += f" values={value.tolist()}"
        return text + ")"
    if isinstance(value, (list, tuple)) and any(isinstance(v, numpy.ndarray) for v in value):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    return repr(value)


@dataclass(frozen=True)
class Call:
    """One call of opcore.run; its repr is the reproduction hypothesis prints."""

    op: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    # each is tried in turn: None (unpinned) and every loaded CPU backend
    backends: tuple[str | None, ...] = field(default_factory=lambda: tuple(BACKENDS))

    def __repr__(self) -> str:
        parts = [repr(self.op), *map(describe, self.args), *(f"{k}={describe(v)}" for k, v in self.kwargs.items())]
        return f"opcore.run({', '.join(parts)}, backend=b) for b in {self.backends!r}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis prints this, not the fields
        printer.text(repr(self))


# Found by these properties when they replaced the hand-written fuzzer (issue 29) and not fixed yet:
# each is named here with what it is, rejected (hypothesis draws again: never shrunk to, never passed)
# and counted in the statistics. Remove an entry when its fix lands; the property then covers it.
KNOWN_RAISES: list[tuple[str | None, type[BaseException], str, str]] = [
    # (op or None for any, the exception, a regular expression of its message, what it is)
    (None, MemoryError, "", "a kernel materialises an input view larger than memory whose result is small"),
]


def _larger_than_memory_input_with_a_smaller_result(call: Call) -> bool:
    """A stride-0 input view larger than memory where the result is not (a reduction, a matmul): the
    size check passes, and the kernels read it all (MemoryError, or minutes): known, not fixed yet."""
    arrays = [a for a in _flat(call.args, call.kwargs) if isinstance(a, numpy.ndarray)]
    if "view" in CONTRACTS[call.op].tags or not any(a.size * a.dtype.itemsize >= _MEMORY // 2 for a in arrays):
        return False  # a view op returns a view of it: it must run

    def meta(value: Any) -> Any:
        if isinstance(value, numpy.ndarray):
            return opcore.TensorMeta.of(value)
        if isinstance(value, (list, tuple)):
            return type(value)(meta(v) for v in value)
        return value

    try:
        args, kwargs = meta(call.args), {k: meta(v) for k, v in call.kwargs.items()}
        metas = opcore.infer_meta(call.op, *args, **kwargs)
    except Exception:
        return False  # the contract refuses the call: it runs, and must raise an OpcoreError
    outputs = metas if isinstance(metas, tuple) else (metas,)
    largest = max(a.size for a in arrays)
    return all(_elements(m) < largest for m in outputs if hasattr(m, "shape"))


def _flat(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    values: list[Any] = []
    for value in (*args, *kwargs.values()):
        values.extend(value if isinstance(value, (list, tuple)) else [value])
    return values


def _elements(meta: Any) -> int:
    count = 1
    for size in meta.shape:
        count *= int(size)
    return count


def check(call: Call) -> None:
    """The property: a result or an OpcoreError (anything else propagates and fails the test)."""
    if _larger_than_memory_input_with_a_smaller_result(call):
        event("known: an input larger than memory, a smaller result")
        reject()
    for backend in call.backends:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fallback and numpy warnings are expected here; the outcome counts
            try:
                opcore.run(call.op, *call.args, backend=backend, **call.kwargs)
            except opcore.OpcoreError as error:
                event(f"raised {type(error).__name__}")  # --hypothesis-show-statistics counts the outcomes
            except Exception as error:
                for op, kind, pattern, what in KNOWN_RAISES:
                    if op in (None, call.op) and isinstance(error, kind) and re.search(pattern, str(error)):
                        event(f"known: {what}")
                        reject()
                error.add_note(f"fuzz: raised with backend={backend!r}")
                raise
            else:
                event("returned a result")


# --- strategies from the contracts ------------------------------------------------------------------


def _special_values(dtype: numpy.dtype[Any]) -> st.SearchStrategy[Any]:
    if dtype.kind == "f":
        info = numpy.finfo(dtype)
        return st.sampled_from(
            [0.0, -0.0, 1.0, -1.5, numpy.nan, numpy.inf, -numpy.inf, float(info.max), float(info.tiny)]
        )
    if dtype.kind in "iu":
        iinfo = numpy.iinfo(dtype)
        return st.sampled_from([0, 1, -1 if dtype.kind == "i" else 2, 3, int(iinfo.min), int(iinfo.max)])
    return st.booleans()


def _lay_out(array: numpy.ndarray, layout: str) -> numpy.ndarray:
    if layout == "transposed":
        return array.T
    if layout == "every other" and array.ndim:
        wide = numpy.repeat(array, 2, axis=-1)
        return wide[..., ::2]
    if layout == "reversed" and array.ndim:
        return array[..., ::-1]
    if layout == "stride-0" and array.ndim:
        row = array[:1] if array.shape[0] else numpy.zeros((1, *array.shape[1:]), array.dtype)
        return numpy.broadcast_to(row, (3, *array.shape[1:]))
    if layout == "huge stride-0":
        return numpy.broadcast_to(numpy.zeros((), array.dtype), (HUGE_ROWS, *array.shape[1:]))
    return array


@st.composite
def tensors(draw: st.DrawFn, dtypes: tuple[str, ...], shape: tuple[int, ...] | None = None) -> numpy.ndarray:
    """An array of one of ``dtypes`` (now and then one of BAD_DTYPES), ``shape`` or any of rank 0-4
    and sizes 0-4, special values, in one of LAYOUTS."""
    good = st.sampled_from(dtypes) if dtypes else st.nothing()
    name = draw(st.one_of(*[good] * 7, st.sampled_from(BAD_DTYPES)))  # 1 in 8: a dtype no op takes
    if shape is None:
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    dtype = numpy.dtype(name)
    if dtype.kind == "O":
        return numpy.zeros(shape, object)
    native = dtype.newbyteorder("=")
    elements = _special_values(native) if native.kind != "c" else st.just(1)
    values = draw(hnp.arrays(native, shape, elements=elements))
    return _lay_out(values.astype(dtype), draw(st.sampled_from(LAYOUTS)))


def _numpy_dtypes(op: str) -> tuple[str, ...]:
    return tuple(sorted(d.value for d in CONTRACTS[op].dtypes if d.value != "bfloat16"))


BAD_VALUES = st.sampled_from([None, "x", 1.5, -1, (), [1, "a"], object(), numpy.float32(2.0)])


def _subclass(array: numpy.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if array.ndim == 2:
            return numpy.asmatrix(array)
    return numpy.ma.masked_array(array, mask=numpy.ma.nomask)  # no mask array: the view may be larger than memory


def argument_values(
    argument: Argument, dtypes: tuple[str, ...], shape: tuple[int, ...] | None
) -> st.SearchStrategy[Any]:
    """Values for one schema argument: of its type (its default too), or of another."""
    return st.one_of(*[_typed(argument.type, dtypes, shape)] * 4, BAD_VALUES) | (
        st.just(argument.default) if not argument.required else st.nothing()
    )


def _typed(arg_type: ArgType, dtypes: tuple[str, ...], shape: tuple[int, ...] | None) -> st.SearchStrategy[Any]:
    element: st.SearchStrategy[Any]
    base = arg_type.base
    if base is BaseType.TENSOR:
        element = st.one_of(*[tensors(dtypes, shape)] * 7, tensors(dtypes, shape).map(_subclass))
    elif base is BaseType.TENSOR_OR_SCALAR:
        element = tensors(dtypes, shape) | st.integers(-3, 3) | st.floats(allow_nan=True) | st.booleans()
    elif base is BaseType.INT:
        element = st.integers(-3, 4) | st.sampled_from([2**31, -(2**63), 2**63 - 1])
    elif base is BaseType.FLOAT:
        element = st.floats(allow_nan=True, allow_infinity=True)
    elif base is BaseType.BOOL:
        element = st.booleans()
    elif base is BaseType.STR:
        element = st.sampled_from(
            ["none", "tanh", "trunc", "floor", "same", "valid", "constant", "float32", "int64", "cpu", ""]
        )
    else:  # Scalar
        element = st.integers(-3, 3) | st.floats(allow_nan=True) | st.booleans()
    if arg_type.element_optional:
        element = element | st.none()
    if arg_type.is_list:
        size = arg_type.list_len
        element = st.lists(element, min_size=0 if size is None else size, max_size=4 if size is None else size)
        if size is not None and base is BaseType.INT:
            element = element | st.integers(-1, 3)
    if arg_type.optional:
        element = element | st.none()
    for alternative in arg_type.alternatives:
        element = element | _typed(alternative, dtypes, shape)
    return element


@st.composite
def contract_calls(draw: st.DrawFn, ops: Sequence[str]) -> Call:
    """A call of one of ``ops`` built from its contract: each argument drawn from its schema type."""
    op = draw(st.sampled_from(ops))
    schema = CONTRACTS[op].schema
    dtypes = _numpy_dtypes(op)
    shape = draw(st.none() | hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))  # one shape for all
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    skipped = False
    for argument in schema.arguments:
        if not argument.required and draw(st.booleans()):
            skipped = True  # left to its default: the arguments after it go by name
            continue
        value = draw(argument_values(argument, dtypes, shape))
        if argument.kwarg_only or skipped:
            kwargs[argument.name] = value
        else:
            args.append(value)
    return Call(op, tuple(args), kwargs)


def _numpy(value: Any) -> Any:
    if isinstance(value, TensorInput):
        return value.to_numpy()
    if isinstance(value, (list, tuple)) and any(isinstance(v, TensorInput) for v in value):
        return type(value)(_numpy(v) for v in value)
    return value


# every op's kit samples (numpy ones: bfloat16 needs torch) and error inputs, as valid starting points
STARTS: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}
for _entry in ENTRIES:
    _samples = [s for s in samples_of(_entry) if all(t.dtype.value != "bfloat16" for t in s.tensors())]
    _cases: list[Sample | ErrorInput] = [*_samples[:3], *error_inputs_of(_entry)[:2]]
    for _case in _cases:
        STARTS.setdefault(_entry.op, []).append(
            (tuple(_numpy(a) for a in _case.args), {k: _numpy(v) for k, v in _case.kwargs.items()})
        )


@st.composite
def mutated_samples(draw: st.DrawFn, op: str) -> Call:
    """A kit sample of ``op`` (a valid call) or error input with one argument replaced by a value of
    another dtype, rank, layout or type."""
    args, kwargs = draw(st.sampled_from(STARTS[op]))
    args = tuple(args)
    positions = [i for i, a in enumerate(args) if isinstance(a, numpy.ndarray)]
    replace = draw(st.integers(0, 9)) > 0  # 1 in 10: the call as the kit has it
    if positions and replace:
        position = draw(st.sampled_from(positions))
        original: numpy.ndarray = args[position]
        how = draw(st.sampled_from(["dtype", "rank", "layout", "type", "values"]))
        if how == "dtype":
            bad: Any = original.astype(draw(st.sampled_from([*BAD_DTYPES, "float16", "int64", "bool", "float64"])))
        elif how == "rank":
            bad = draw(tensors((str(original.dtype),)))
        elif how == "layout":
            bad = _lay_out(original, draw(st.sampled_from(LAYOUTS)))
        elif how == "type":
            bad = draw(BAD_VALUES | st.just(original.tolist()) | st.just(_subclass(original)))
        else:
            bad = draw(tensors((str(original.dtype),), original.shape))
        args = (*args[:position], bad, *args[position + 1 :])
    return Call(op, args, kwargs)


# --- what the hand-written fuzzer and issue 14 found, replayed on every run --------------------------

_INT64_MIN = numpy.iinfo(numpy.int64).min
_X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _MATRIX = numpy.asmatrix(_X)
FOUND = [
    # SIGFPE (exit 136): integer division of the minimum by -1
    Call("div", (numpy.full(3, _INT64_MIN), numpy.full(3, -1)), {"rounding_mode": "trunc"}),
    Call("div", (numpy.full(3, numpy.iinfo(numpy.int32).min, numpy.int32), -1), {"rounding_mode": "floor"}),
    # np.matrix made the reference mul a matrix product; masked arrays gave inf; ORT/OV raised TypeError
    Call("mul", (_MATRIX, _X)),
    Call("mul", (_X, numpy.ma.masked_array(_X, mask=[[True, False], [False, False]]))),
    # complex, uint16, big-endian, object: messages without the op name, naming the wrong argument
    Call("mul", (_X, _X.astype(numpy.complex64))),
    Call("mul", (_X.astype(numpy.uint16), _X)),
    Call("add", (_X.astype(">f4"), _X)),
    Call("mul", (_X, _X.astype(object))),
    # huge stride-0 dims: MemoryError, or a > 60 s hang (embedding with 2**36 indices)
    Call("embedding", (numpy.broadcast_to(numpy.int64(1), (2**36,)), numpy.ones((4, 8), numpy.float32))),
    Call("relu", (numpy.broadcast_to(numpy.float32(1), (2**40, 4)),)),
    # a 1-byte view that fits alone but not with its result: the fuzzer's process was OOM-killed
    Call("abs", (numpy.broadcast_to(numpy.uint8(3), (_MEMORY // 2 + 4096,)),)),
    Call("abs", (numpy.broadcast_to(numpy.uint8(3), (HUGE_ROWS,)),)),
    # split of a 2**34-row stride-0 view by 1 built a 2**34-item list in the meta function (OOM)
    Call("split", (numpy.broadcast_to(numpy.float32(0), (2**34, 2)), 1)),
    Call("chunk", (numpy.broadcast_to(numpy.float32(0), (2**34, 2)), 2**34)),
    # cpu embedding with an empty weight raised torch's IndexError instead of the reference's error
    Call("embedding", (numpy.array([0, 1]), numpy.zeros((0, 4), numpy.float32))),
]

# every test here on both paths of opcore.run: pure Python and compiled (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("run_path", "warm_backends")


@pytest.fixture(scope="module")
def warm_backends() -> None:
    """One call on each backend first: importing torch or starting a runtime is not a call's time."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for backend in BACKENDS:
            opcore.run("add", numpy.ones(2, numpy.float32), numpy.ones(2, numpy.float32), backend=backend)


def _replayed(test: Any) -> Any:
    for call in reversed(FOUND):
        test = example(call=call)(test)
    return test


@_replayed
@given(call=contract_calls(sorted(CONTRACTS)))
def test_what_the_hand_written_fuzzer_found_then_any_op(call: Call) -> None:
    check(call)


# every op every run, each with the profile's examples (a drawn op would leave most ops untried)
@pytest.mark.parametrize("op", sorted(CONTRACTS))
@given(data=st.data())
def test_calls_drawn_from_the_contract_return_or_raise_opcore_errors(op: str, data: st.DataObject) -> None:
    check(data.draw(contract_calls([op]), label="call"))


@pytest.mark.parametrize("op", sorted(STARTS))
@given(data=st.data())
def test_kit_samples_with_one_bad_argument_return_or_raise_opcore_errors(op: str, data: st.DataObject) -> None:
    check(data.draw(mutated_samples(op), label="call"))
