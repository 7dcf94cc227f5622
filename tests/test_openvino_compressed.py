"""opcore_openvino.compressed: compressed OpenVINO weights (NNCF's decompression subgraphs) read back
as QuantizedWeight, giving the compressed model's own results through linear_wq."""

from __future__ import annotations

import numpy
import pytest

ov = pytest.importorskip("openvino", reason="reading OpenVINO models needs openvino")
ops = pytest.importorskip("openvino.opset13")

from opcore_openvino.compressed import read_compressed_weights  # noqa: E402

RNG = numpy.random.default_rng(5)
X = RNG.standard_normal((3, 64)).astype(numpy.float32)


def _run(model):
    # the compressed model's exact results: on a CPU with VNNI or AMX, OpenVINO otherwise rounds x to 8 bits
    # in groups of 32 before a compressed-weight matmul (DYNAMIC_QUANTIZATION_GROUP_SIZE, default 32 there;
    # errors of ~0.5 % here), which is not what reading the weights back is about
    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    compiled = ov.Core().compile_model(model, "CPU", config)
    return compiled([X])[0]


def _through_linear_wq(weights, names):
    y = X
    for name in names:
        y = weights[name].linear(y, backend="reference")
    return y


def test_a_hand_written_asymmetric_u8_decompression_is_read():
    codes = RNG.integers(0, 256, (16, 64)).astype(numpy.uint8)
    zero = RNG.integers(0, 256, (16, 1)).astype(numpy.uint8)
    scale = (RNG.random((16, 1)) * 0.01).astype(numpy.float32)
    weight = ops.multiply(
        ops.subtract(ops.convert(ops.constant(codes), ov.Type.f32), ops.convert(ops.constant(zero), ov.Type.f32)),
        ops.constant(scale),
    )
    x = ops.parameter([-1, 64], ov.Type.f32)
    product = ops.matmul(x, weight, False, True)
    product.set_friendly_name("proj")
    weights = read_compressed_weights(ov.Model([product], [x]))
    assert set(weights) == {"proj"} and weights["proj"].bits == 8 and weights["proj"].group_size == -1
    assert numpy.array_equal(weights["proj"].qweight, codes) and numpy.array_equal(weights["proj"].zero, zero)
    numpy.testing.assert_allclose(
        _through_linear_wq(weights, ["proj"]), _run(ov.Model([product], [x])), rtol=1e-4, atol=1e-4
    )


def test_uncompressed_matmuls_are_left_out():
    x = ops.parameter([-1, 64], ov.Type.f32)
    product = ops.matmul(x, ops.constant(RNG.standard_normal((8, 64)).astype(numpy.float32)), False, True)
    assert read_compressed_weights(ov.Model([product], [x])) == {}


@pytest.mark.parametrize("mode", ["INT8_ASYM", "INT8_SYM", "INT4_SYM", "INT4_ASYM"])
def test_nncf_compressed_weights_give_the_compressed_models_results(mode):
    nncf = pytest.importorskip("nncf", reason="nncf is not installed here (pip install nncf)")
    x = ops.parameter([-1, 64], ov.Type.f32)
    first = ops.matmul(x, ops.constant(RNG.standard_normal((32, 64)).astype(numpy.float32)), False, True)
    first.set_friendly_name("proj")
    second = ops.matmul(first, ops.constant(RNG.standard_normal((16, 32)).astype(numpy.float32)), False, True)
    second.set_friendly_name("out")
    options = {"group_size": 32, "ratio": 1.0, "all_layers": True} if mode.startswith("INT4") else {}
    model = nncf.compress_weights(ov.Model([second], [x]), mode=getattr(nncf.CompressWeightsMode, mode), **options)
    weights = read_compressed_weights(model)
    bits = 4 if mode.startswith("INT4") else 8
    assert {name: (w.bits, w.zero is not None) for name, w in weights.items()} == {
        name: (bits, mode.endswith("ASYM")) for name in ("proj", "out")
    }
    want = _run(model)
    numpy.testing.assert_allclose(_through_linear_wq(weights, ["proj", "out"]), want, rtol=1e-4, atol=1e-3)
