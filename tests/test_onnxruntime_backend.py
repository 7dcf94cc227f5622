"""The ONNX Runtime plugin: cheap loading, lazy imports, the doctor's details, the session cache,
prepared weights as initializers, torch tensors, and reasons in explain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX Runtime backend needs onnxruntime")

from runtime_cases import arr

import opcore

BACKEND = "onnxruntime"


@pytest.fixture(autouse=True)
def _loaded():
    if not any(r.name == BACKEND and r.ok for r in opcore.backends()):
        pytest.skip("the onnxruntime plugin is not installed (pip install -e plugins/onnxruntime)")


def _python(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_the_plugin_imports_no_runtime():
    found = _python(
        "import json, sys, opcore; reports = {r.name: r.status.value for r in opcore.backends()}; "
        "print(json.dumps({'status': reports.get('onnxruntime'), "
        "'imported': [m for m in ('onnxruntime', 'onnx', 'openvino', 'torch') if m in sys.modules]}))"
    )
    assert found["status"] == "loaded"
    assert "onnxruntime" not in found["imported"] and "onnx" not in found["imported"]


def test_numpy_calls_on_onnxruntime_import_neither_torch_nor_openvino():
    found = _python(
        "import json, sys, numpy, opcore\n"
        "x = numpy.ones((2, 8), numpy.float32); w = numpy.ones((4, 8), numpy.float32)\n"
        "with opcore.prefer('onnxruntime'):\n"
        "    a = opcore.run('linear', x, w)\n"
        "    chosen = opcore.explain('linear', x, w).backend\n"
        "b = opcore.run('softmax', x, dim=-1, backend='onnxruntime')\n"
        "c = opcore.resolve('linear', x, w, constants=('w',), backend='onnxruntime')(x)\n"
        "print(json.dumps({'chosen': chosen, 'sum': float(a.sum() + b.sum() + c.sum()), "
        "'imported': sorted(m for m in ('onnxruntime', 'torch', 'openvino') if m in sys.modules)}))"
    )
    assert found["chosen"] == "onnxruntime"
    assert found["sum"] == pytest.approx(2 * 4 * 8 * 2 + 2)
    assert found["imported"] == ["onnxruntime"]


def test_describe_reports_versions_providers_devices_and_the_cache():
    import onnxruntime
    from opcore_onnxruntime.plugin import describe

    details = describe()
    assert details["onnxruntime"] == onnxruntime.__version__
    assert "CPUExecutionProvider" in details["providers"]
    assert "CPUExecutionProvider" in details["ep devices"] or "not offered" in details["ep devices"]
    assert details["opset"].split()[0].isdigit()
    assert "entries" in details["session cache"] and "OPCORE_ORT_CACHE_SIZE" in details["session cache"]
    assert not any(value.startswith("unavailable") for value in details.values()), details


def test_is_available_reads_metadata_only():
    from opcore_onnxruntime.plugin import _version_tuple, is_available

    assert is_available() is True
    assert _version_tuple("1.17.0") == (1, 17) and _version_tuple("1.9.0rc1") == (1, 9)


def test_cache_size_comes_from_the_environment():
    found = _python(
        "import json, opcore_onnxruntime as o; print(json.dumps({'size': o.cache_size()}))",
        OPCORE_ORT_CACHE_SIZE="7",
    )
    assert found["size"] == 7
    done = subprocess.run(
        [sys.executable, "-c", "import opcore_onnxruntime as o; o.cache_size()"],
        capture_output=True,
        text=True,
        env={**os.environ, "OPCORE_ORT_CACHE_SIZE": "lots"},
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "OPCORE_ORT_CACHE_SIZE" in done.stderr


def test_a_small_cache_evicts_and_rebuilds():
    import opcore_onnxruntime

    size = opcore_onnxruntime.cache_size()
    try:
        opcore_onnxruntime.set_cache_size(2)
        x = arr((3, 5))
        for op in ("relu", "tanh", "exp", "relu"):
            opcore.run(op, x, backend=BACKEND)
        stats = opcore_onnxruntime.cache_stats()
        assert stats.size == 2 and stats.evictions >= 2
    finally:
        opcore_onnxruntime.set_cache_size(size)


def test_prepared_weights_become_initializers():
    from opcore_onnxruntime.kernels.linear import linear

    x, w, b = arr((4, 16)), arr((8, 16)), arr((8,))
    prepared = linear.prepare((x, w, b), frozenset({"w", "b"}))
    assert [i.name for i in prepared.session.session.get_inputs()] == ["in0"]
    for batch in (1, 4, 9):
        xs = arr((batch, 16))
        numpy.testing.assert_allclose(prepared(xs), xs @ w.T + b, rtol=2e-5, atol=2e-5)
    resolved = opcore.resolve("linear", x, w, b, constants=("w", "b"), backend=BACKEND)
    assert resolved.prepared and resolved.free == ("x",)
    numpy.testing.assert_allclose(resolved(x), x @ w.T + b, rtol=2e-5, atol=2e-5)
    transposed, frozen = arr((16, 3)).T, arr((5, 16))
    frozen.flags.writeable = False
    for layout in (transposed, frozen):  # copied once where the runtime needs contiguous memory
        numpy.testing.assert_allclose(resolved(layout), layout @ w.T + b, rtol=2e-5, atol=2e-5)
    partly = opcore.resolve("linear", x, w, b, constants=("w",), backend=BACKEND)
    numpy.testing.assert_allclose(partly(x, 2 * b), x @ w.T + 2 * b, rtol=2e-5, atol=2e-5)


def test_large_prepared_weights_share_memory_with_the_session():
    from opcore_onnxruntime.graph import EXTERNAL_BYTES
    from opcore_onnxruntime.kernels.linear import linear

    w = arr((64, EXTERNAL_BYTES // 4 // 64 * 2))
    x = arr((2, w.shape[1]))
    prepared = linear.prepare((x, w, None), frozenset({"w"}))
    assert prepared.session.externals == 1
    numpy.testing.assert_allclose(prepared(x), x @ w.T, rtol=1e-4, atol=1e-4)


def test_torch_tensors_come_back_as_torch_tensors():
    torch = pytest.importorskip("torch")
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    y = opcore.run("linear", x, w, backend=BACKEND)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w), rtol=2e-5, atol=2e-5)
    half = opcore.run("gelu", x.half(), approximate="tanh", backend=BACKEND)
    assert half.dtype == torch.float16
    explanation = opcore.explain("linear", x.bfloat16(), w.bfloat16(), backend=BACKEND)
    assert explanation.chosen is None
    assert "numpy arrays, which have no bfloat16" in str(explanation)


def test_explain_shows_why_a_call_is_declined():
    text = str(opcore.explain("conv2d", arr((1, 2, 5, 5), "float64"), arr((3, 2, 3, 3), "float64")))
    assert "onnxruntime" in text and "float32 and float16 kernels only" in text
