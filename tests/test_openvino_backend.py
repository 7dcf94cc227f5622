"""The OpenVINO plugin: cheap loading, lazy imports, the doctor's details, the compiled-model cache,
the float32 precision hint, prepared weights as Constants, per-thread requests, torch tensors,
and reasons in explain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy
import pytest

pytest.importorskip("openvino", reason="the OpenVINO backend needs openvino")

from runtime_cases import arr

import opcore

BACKEND = "openvino"


@pytest.fixture(autouse=True)
def _loaded():
    if not any(r.name == BACKEND and r.ok for r in opcore.backends()):
        pytest.skip("the openvino plugin is not installed (pip install -e plugins/openvino)")


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
        "print(json.dumps({'status': reports.get('openvino'), "
        "'imported': [m for m in ('openvino', 'onnxruntime', 'torch') if m in sys.modules]}))"
    )
    assert found["status"] == "loaded"
    assert "openvino" not in found["imported"]


def test_numpy_calls_on_openvino_import_neither_torch_nor_onnxruntime():
    found = _python(
        "import json, sys, numpy, opcore\n"
        "x = numpy.ones((2, 8), numpy.float32); w = numpy.ones((4, 8), numpy.float32)\n"
        "with opcore.prefer('openvino'):\n"
        "    a = opcore.run('linear', x, w)\n"
        "    chosen = opcore.explain('linear', x, w).backend\n"
        "b = opcore.run('softmax', x, dim=-1, backend='openvino')\n"
        "c = opcore.resolve('linear', x, w, constants=('w',), backend='openvino')(x)\n"
        "print(json.dumps({'chosen': chosen, 'sum': float(a.sum() + b.sum() + c.sum()), "
        "'imported': sorted(m for m in ('onnxruntime', 'torch', 'openvino') if m in sys.modules)}))"
    )
    assert found["chosen"] == "openvino"
    assert found["sum"] == pytest.approx(2 * 4 * 8 * 2 + 2)
    assert found["imported"] == ["openvino"]


def test_describe_reports_version_devices_precision_and_the_cache():
    import openvino
    from opcore_openvino.plugin import describe

    details = describe()
    assert details["openvino"] == openvino.get_version()
    assert details["devices"].startswith("CPU")
    assert "opcore compiles with f32" in details["precision"]
    assert "OPCORE_OPENVINO_CACHE_SIZE" in details["compiled-model cache"]
    assert not any(value.startswith("unavailable") for value in details.values()), details


def test_is_available_reads_metadata_only():
    from opcore_openvino.plugin import is_available

    assert is_available() is True


def test_cache_size_comes_from_the_environment():
    found = _python(
        "import json, opcore_openvino as o; print(json.dumps({'size': o.cache_size()}))",
        OPCORE_OPENVINO_CACHE_SIZE="5",
    )
    assert found["size"] == 5


def test_models_are_compiled_with_a_float32_precision_hint():
    from opcore_openvino.cache import compiled_models

    for dtype in ("float32", "float16"):
        opcore.run("relu", arr((2, 3), dtype), backend=BACKEND)
        compiled = compiled_models().get(("relu", numpy.dtype(dtype), 2))
        assert str(compiled.compiled.get_property("INFERENCE_PRECISION_HINT")) in ("<Type: 'float32'>", "f32")


def test_prepared_weights_become_constants():
    from opcore_openvino.kernels.linear import linear

    x, w, b = arr((4, 16)), arr((8, 16)), arr((8,))
    prepared = linear.prepare((x, w, b), frozenset({"w", "b"}))
    assert len(prepared.compiled.compiled.inputs) == 1
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


def test_each_thread_gets_its_own_infer_request():
    from opcore_openvino.cache import compiled_models

    x = arr((2, 3))
    opcore.run("exp", x, backend=BACKEND)
    compiled = compiled_models().get(("exp", x.dtype, 2))
    requests = []
    thread = threading.Thread(target=lambda: requests.append(compiled.request()))
    thread.start()
    thread.join()
    assert requests[0] is not compiled.request()
    assert compiled.request() is compiled.request()


def test_results_do_not_alias_the_request_buffers():
    x = arr((3, 4))
    first = opcore.run("exp", x, backend=BACKEND)
    kept = first.copy()
    opcore.run("exp", 2 * x, backend=BACKEND)
    assert numpy.array_equal(first, kept)


def test_torch_tensors_come_back_as_torch_tensors():
    torch = pytest.importorskip("torch")
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    y = opcore.run("linear", x, w, backend=BACKEND)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w), rtol=2e-5, atol=2e-5)
    explanation = opcore.explain("linear", x.bfloat16(), w.bfloat16(), backend=BACKEND)
    assert explanation.chosen is None
    assert "numpy arrays, which have no bfloat16" in str(explanation)


def test_explain_shows_why_a_call_is_declined():
    text = str(opcore.explain("matmul", arr((2, 3), "int32"), arr((3, 2), "int32")))
    assert "openvino" in text and "matrix products in float32" in text
