"""The OpenVINO plugin: cheap loading, lazy imports, the doctor's details, the compiled-model cache,
the float32 precision hint, prepared weights as Constants, per-thread requests, torch tensors,
and reasons in explain.
"""

from __future__ import annotations

import threading

import numpy
import pytest

pytest.importorskip("openvino", reason="the OpenVINO backend needs openvino")

import runtime_cases as shared
from runtime_cases import arr

import opcore

BACKEND = "openvino"

_loaded = shared.skip_unless_loaded(BACKEND)


def test_loading_the_plugin_imports_no_runtime():
    shared.assert_loading_imports_no_runtime(BACKEND, ("openvino",))


def test_numpy_calls_on_openvino_import_neither_torch_nor_onnxruntime():
    shared.assert_numpy_calls_import_only(BACKEND, "openvino")


def test_describe_reports_version_devices_precision_and_the_cache():
    import openvino
    from opcore_openvino.plugin import describe

    details = describe()
    assert details["openvino"] == openvino.get_version()
    assert details["devices"].startswith("CPU")
    assert "opcore compiles with f32" in details["precision"]
    assert details["weight-only linears"].endswith("opcore: x kept float")
    assert "OPCORE_OPENVINO_CACHE_SIZE" in details["compiled-model cache"]
    assert not any(value.startswith("unavailable") for value in details.values()), details


def test_is_available_reads_metadata_only():
    from opcore_openvino.plugin import is_available

    assert is_available() is True


def test_cache_size_comes_from_the_environment():
    shared.assert_cache_size_comes_from_the_environment("opcore_openvino", "OPCORE_OPENVINO_CACHE_SIZE", 5)


def test_models_are_compiled_with_a_float32_precision_hint():
    from opcore_openvino.cache import compiled_models

    for dtype in ("float32", "float16"):
        opcore.run("relu", arr((2, 3), dtype), backend=BACKEND)
        compiled = compiled_models().get(("relu", numpy.dtype(dtype), 2))
        assert str(compiled.compiled.get_property("INFERENCE_PRECISION_HINT")) in ("<Type: 'float32'>", "f32")


def test_prepared_weights_become_constants():
    from opcore_openvino.kernels.linear import linear

    x, w, b = arr((4, 16)), arr((8, 16)), arr((8,))
    prepared = shared.assert_prepared_linear_matches(BACKEND, linear, x, w, b)
    assert len(prepared.compiled.compiled.inputs) == 1


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
    shared.assert_torch_tensors_come_back(BACKEND)


def test_explain_shows_why_a_call_is_declined():
    text = str(opcore.explain("matmul", arr((2, 3), "int32"), arr((3, 2), "int32")))
    assert "openvino" in text and "matrix products in float32" in text


@pytest.mark.parametrize(
    ("op", "shape", "args"),
    [
        ("max_pool2d", (0, 3, 6, 6), ((2, 2),)),
        ("avg_pool2d", (0, 3, 6, 6), ((3, 3), (2, 2), (1, 1))),
        ("group_norm", (0, 4, 5), (2,)),
        ("group_norm", (2, 4, 0), (2,)),
    ],
)
def test_empty_inputs_the_cpu_plugin_fails_on_get_their_empty_result_from_the_contract(op, shape, args):
    # OpenVINO's CPU plugin fails pooling an empty batch and cannot reshape an empty group_norm
    # input: the kernel makes the empty result from the contract's meta (OneModelOp's empty=True)
    x = numpy.zeros(shape, dtype=numpy.float32)
    got = opcore.run(op, x, *args, backend=BACKEND)
    expected = opcore.infer_meta(op, opcore.TensorMeta.of(x), *args)
    assert got.shape == expected.shape and 0 in got.shape
    assert got.dtype == numpy.float32
    assert opcore.explain(op, x, *args, backend=BACKEND).chosen == BACKEND
