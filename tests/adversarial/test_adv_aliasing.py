"""View ops alias their input on every backend, as torch's do (issue 14, item 14): the result of an
op whose contract is tagged "view" shares memory with x, for numpy and torch callers alike (the
graph runtimes serve single calls of view ops by the numpy view itself)."""

from __future__ import annotations

from typing import Any

import numpy
import pytest
from adversarial_support import fresh_warnings  # noqa: F401 (an autouse fixture)

import opcore
from opcore.onemodel.builders import VIEW_OPS

# every test here on both paths of opcore.run: pure Python and compiled (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("run_path")

torch = pytest.importorskip("torch", reason="torch callers get views too")

BACKENDS = [r.name for r in opcore.backends() if r.ok and r.name in ("reference", "cpu", "onnxruntime", "openvino")]

# one call per view op on a (2, 3, 4) float32 x: the attributes after x
CALLS: dict[str, tuple[Any, ...]] = {
    "transpose": (0, 2),
    "permute": ((2, 0, 1),),
    "reshape": ((6, 4),),
    "flatten": (0, -1),
    "unsqueeze": (1,),
    "squeeze": (None,),
    "expand": ((5, 2, 3, 4),),
    "slice": (2, 1, 3, 1),
    "select": (1, 2),
    "split": (1, 0),
    "split_with_sizes": ((1, 2), 1),
    "chunk": (2, 2),
}


def test_every_view_op_is_exercised() -> None:
    assert set(CALLS) == VIEW_OPS


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_view_ops_return_views_on_every_backend(backend: str, kind: str) -> None:
    copies = []
    for op, attrs in CALLS.items():
        base = numpy.arange(24, dtype=numpy.float32).reshape(2, 3, 4)
        x = base if kind == "numpy" else torch.from_numpy(base.copy())
        result = opcore.run(op, x, *attrs, backend=backend)
        pieces = result if isinstance(result, tuple) else (result,)
        before = [numpy.array(p.tolist()) for p in pieces]
        x += 1000  # through the caller's own array: every view sees it
        if not all((numpy.array(p.tolist()) == b + 1000).all() for p, b in zip(pieces, before)):
            copies.append(op)
    assert not copies, f"{backend} returned copies for {kind} callers of {copies}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_contiguous_reshape_copies_as_torch_does(backend: str) -> None:
    x = numpy.arange(24, dtype=numpy.float32).reshape(4, 6).T  # strides forbid a flat view
    y = opcore.run("reshape", x, (24,), backend=backend)
    numpy.testing.assert_array_equal(y, x.reshape(24))
    assert not numpy.shares_memory(y, x)
