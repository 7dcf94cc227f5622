"""The ONNX Runtime plugin: cheap loading, lazy imports, the doctor's details, the session cache,
prepared weights as initializers, torch tensors, and reasons in explain.
"""

from __future__ import annotations

import numpy
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX Runtime backend needs onnxruntime")

import runtime_cases as shared
from runtime_cases import arr

import opcore

BACKEND = "onnxruntime"

_loaded = shared.skip_unless_loaded(BACKEND)


def test_loading_the_plugin_imports_no_runtime():
    shared.assert_loading_imports_no_runtime(BACKEND, ("onnxruntime", "onnx"))


def test_numpy_calls_on_onnxruntime_import_neither_torch_nor_openvino():
    shared.assert_numpy_calls_import_only(BACKEND, "onnxruntime")


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
    from opcore_onnxruntime.plugin import is_available

    from opcore.onemodel.plugin import version_tuple

    assert is_available() is True
    assert version_tuple("1.17.0") == (1, 17) and version_tuple("1.9.0rc1") == (1, 9)


def test_cache_size_comes_from_the_environment():
    shared.assert_cache_size_comes_from_the_environment("opcore_onnxruntime", "OPCORE_ORT_CACHE_SIZE", 7)


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


def test_a_builder_reading_an_untracked_rank_gets_a_plugin_error():
    from opcore_onnxruntime.graph import Graph

    g = Graph("reshape")
    x = g.input(numpy.dtype("float32"), 2)
    assert x.ndim == 2
    flat = g.op("Reshape", x, g.ints([-1]), rank=None)  # a builder that does not track the rank
    with pytest.raises(opcore.PluginError, match="needs the rank of"):
        _ = flat.ndim


def test_prepared_weights_become_initializers():
    from opcore_onnxruntime.kernels.linear import linear

    x, w, b = arr((4, 16)), arr((8, 16)), arr((8,))
    prepared = shared.assert_prepared_linear_matches(BACKEND, linear, x, w, b)
    assert [i.name for i in prepared.session.session.get_inputs()] == ["in0"]
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
    torch, x = shared.assert_torch_tensors_come_back(BACKEND)
    half = opcore.run("gelu", x.half(), approximate="tanh", backend=BACKEND)
    assert half.dtype == torch.float16


def test_explain_shows_why_a_call_is_declined():
    text = str(opcore.explain("conv2d", arr((1, 2, 5, 5), "float64"), arr((3, 2, 3, 3), "float64")))
    assert "onnxruntime" in text and "float32 and float16 kernels only" in text


# --- models that an optimizer pass cannot take in their dtype ----------------------------------


def _relu_clip(g, x):  # 1.32's basic-level FuseReluClip raises on a float64 Clip
    return g.op("Clip", g.op("Relu", x), g.const(0.0, x.dtype), g.const(6.0, x.dtype))


def _silu(g, x):  # 1.30 fuses this into com.microsoft.QuickGelu, which has no float64 kernel
    return g.op("Mul", x, g.op("Sigmoid", x))


@pytest.mark.parametrize(("build", "expected"), [(_relu_clip, lambda x: numpy.clip(x, 0, 6)), (_silu, None)])
def test_a_model_an_optimizer_pass_cannot_take_is_built_at_a_lower_level(build, expected):
    import onnxruntime
    from opcore_onnxruntime.graph import Graph
    from opcore_onnxruntime.session import OPTIMIZATION_LEVELS, Session, target_opset

    def graph():
        g = Graph(build.__name__, *target_opset())
        return g, build(g, g.input(numpy.dtype("float64"), 1))

    # the highest level at which onnxruntime itself builds the model, asked directly
    g, output = graph()
    model = g.model(output).SerializeToString()
    builds = []
    for level in OPTIMIZATION_LEVELS:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level, options.log_severity_level = level, 4
        try:
            onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception:
            continue
        builds.append(level.name)
    session = Session(*graph())
    assert session.optimization == builds[0]
    x = numpy.array([-2.0, -0.5, 0.0, 0.5, 3.0, 9.0])
    want = expected(x) if expected else x / (1 + numpy.exp(-x))
    numpy.testing.assert_allclose(session([x]), want, rtol=1e-12)
    if builds[0] == OPTIMIZATION_LEVELS[0].name:
        pytest.skip(f"onnxruntime {onnxruntime.__version__} builds {build.__name__} in float64 fully optimized")
