"""Inputs a caller should not be able to crash the host or get a silent wrong answer with (issue 14,
items 1 and 10): INT_MIN / -1, numpy subclasses, unsupported dtypes, huge stride-0 shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy
import pytest

import opcore

# every test here on both paths of opcore.run: pure Python and compiled (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("run_path")

BACKENDS = [None] + [
    r.name for r in opcore.backends() if r.ok and r.name in ("reference", "cpu", "onnxruntime", "openvino")
]
X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_int_min_divided_by_minus_one_never_kills_the_process(backend: str | None, dtype: str) -> None:
    code = (
        "import numpy, opcore\n"
        f"lo = numpy.iinfo({dtype!r}).min\n"
        f"x = numpy.array([lo, 7, -7, lo], {dtype!r}); y = numpy.array([-1, -1, 2, 3], {dtype!r})\n"
        "for other in (y, -1):\n"
        "    for mode in ('trunc', 'floor'):\n"
        "        try:\n"
        f"            print(opcore.run('div', x, other, rounding_mode=mode, backend={backend!r}).tolist())\n"
        "        except opcore.OpcoreError as error:\n"
        "            print('declined', type(error).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # SIGFPE was -8 / exit 136
    lo = int(numpy.iinfo(dtype).min)
    for line in done.stdout.splitlines():
        if not line.startswith("declined"):
            assert eval(line)[0] == lo, line  # the reference's answer: -x wraps to the minimum


@pytest.mark.parametrize("overload", ["aten.div.Tensor_mode", "aten.div.Scalar_mode"])
def test_int_min_divided_by_minus_one_through_the_aten_fallback_never_kills_the_process(overload: str) -> None:
    # torch's own truncating kernel raises SIGFPE on INT_MIN / -1 (int32 and int64): the ATen fallback
    # must decide that input before torch runs, as the div contract's kernel does.
    other = "torch.tensor([-1, -1, 2, 3], dtype=dtype)" if overload.endswith("Tensor_mode") else "-1"
    code = (
        "import opcore, torch\n"
        "for dtype in (torch.int32, torch.int64):\n"
        "    lo = torch.iinfo(dtype).min\n"
        "    x = torch.tensor([lo, 7, -7, lo], dtype=dtype)\n"
        f"    other = {other}\n"
        "    for mode in ('trunc', 'floor'):\n"
        f"        print(opcore.run({overload!r}, x, other, rounding_mode=mode).tolist())\n"
        f"    print(opcore.run({overload!r}, x, other, rounding_mode=None).tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # SIGFPE was -8
    lines = done.stdout.splitlines()
    assert len(lines) == 6, done.stdout
    for dtype, (trunc, floor, true) in zip(("int32", "int64"), (lines[:3], lines[3:])):
        lo = int(numpy.iinfo(dtype).min)
        assert eval(trunc)[0] == lo and eval(floor)[0] == lo, (trunc, floor)  # -x wraps to the minimum
        assert eval(true)[0] == -float(lo)  # true division is floating


def _subclasses() -> dict[str, numpy.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        matrix = numpy.asmatrix(X)
    return {"np.matrix": matrix, "masked array": numpy.ma.masked_array(X, mask=[[True, False], [False, False]])}


BAD_DTYPES = {
    "complex64": (X.astype(numpy.complex64), "complex64"),
    "uint16": (X.astype(numpy.uint16), "uint16"),
    "big-endian": (X.astype(">f4"), "byte-swapped"),
    "object": (X.astype(object), "object"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("position", ["x", "other"])
def test_bad_arrays_are_opcore_errors_naming_the_op_and_the_argument(backend: str | None, position: str) -> None:
    cases = {name: (value, "numpy.ndarray") for name, value in _subclasses().items()} | BAD_DTYPES
    for name, (bad, text) in cases.items():
        args = (bad, X) if position == "x" else (X, bad)
        with pytest.raises(opcore.OpcoreError, match=rf"^mul\(\): argument '{position}' .*{text}") as info:
            opcore.run("mul", *args, backend=backend)
        assert "Fix:" in str(info.value) or name in ("complex64", "uint16", "object"), name


def test_a_result_larger_than_memory_is_a_shape_error_before_any_kernel_runs() -> None:
    huge = numpy.broadcast_to(numpy.int64(1), (2**36,))
    with pytest.raises(opcore.ShapeError, match=r"^embedding\(\): the result .* GiB"):
        opcore.run("embedding", huge, numpy.ones((4, 8), numpy.float32))
    with pytest.raises(opcore.ShapeError, match=r"^relu\(\)"):
        opcore.run("relu", numpy.broadcast_to(numpy.float32(1), (2**40, 4)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_arrays_that_fit_alone_but_not_together_are_a_shape_error(backend: str | None) -> None:
    # A 1-byte stride-0 input with a little over half the machine's memory in rows: the input and the
    # result each fit, both together do not (this once passed the check and got a process OOM-killed).
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    rows = memory // 2 + 4096
    view = numpy.broadcast_to(numpy.uint8(3), (rows,))
    with pytest.raises(opcore.ShapeError, match=r"^abs\(\): the call's 2 arrays .* together") as info:
        opcore.run("abs", view, backend=backend)
    assert "GiB of memory" in str(info.value) and "Fix:" in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_split_into_more_pieces_than_objects_can_hold_is_a_shape_error(backend: str | None) -> None:
    # A stride-0 view with 2**34 rows split by 1 once built a 2**34-item list in the meta function and
    # got the process OOM-killed before any kernel ran.
    rows = numpy.broadcast_to(numpy.float32(1), (2**34, 2))
    with pytest.raises(opcore.ShapeError, match=r"^split\(\): argument 'split_size'.*pieces"):
        opcore.run("split", rows, 1, backend=backend)
    empty = numpy.zeros((0, 2), numpy.float32)
    with pytest.raises(opcore.ShapeError, match=r"^chunk\(\): argument 'chunks'.*pieces"):
        opcore.run("chunk", empty, 10**12, backend=backend)
    assert len(opcore.run("chunk", numpy.zeros((5, 2), numpy.float32), 10**12)) == 5  # at most one per row
