"""conv2d + activation on the cpu backend: the contracts opcore_cpu contributes (opcore_cpu.contracts),
the oneDNN fused kernels and their packed weights (opcore_cpu.conv), and the crossover checker.
"""

from __future__ import annotations

import numpy
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from machine import check_onednn_choice  # noqa: E402
from opcase import rand, reseed  # noqa: E402

import opcore  # noqa: E402
from opcore.types import DType, TensorMeta  # noqa: E402
from opcore_cpu import choice  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error")

ACTIVATIONS = {"conv2d_relu": torch.relu, "conv2d_silu": F.silu}
# (x shape, weight shape, stride, padding, dilation, groups)
BIG = ((2, 32, 40, 40), (64, 16, 3, 3), (2, 1), (1, 0), (1, 2), 2)
SMALL = ((1, 2, 5, 5), (3, 2, 3, 3), (1, 1), (0, 0), (1, 1), 1)


@pytest.fixture(autouse=True)
def _same_data():
    reseed()


def conv_inputs(case, dtype="float32", bias=True):
    x_shape, w_shape, *attributes = case
    x = rand(x_shape, dtype, low=-1, high=1)
    w = rand(w_shape, dtype, low=-0.3, high=0.3)
    return (x, w, rand((w_shape[0],), dtype) if bias else None, *attributes)


def expected(op, x, w, b, stride, padding, dilation, groups):
    return ACTIVATIONS[op](F.conv2d(x, w, b, stride, padding, dilation, groups))


def close(actual, wanted, dtype):
    tolerance = 1e-4 if dtype == "float32" else 3e-2
    assert actual.dtype == wanted.dtype and actual.shape == wanted.shape
    torch.testing.assert_close(actual, wanted, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", list(ACTIVATIONS))
def test_fused_conv_matches_torch_and_the_reference(op, dtype):
    for bias in (True, False):
        args = conv_inputs(BIG, dtype, bias)
        check_onednn_choice(opcore.explain(op, *args), dtype)
        result = opcore.run(op, *args)
        close(result, expected(op, *args), dtype)
        close(result, opcore.run(op, *args, backend="reference"), dtype)


def test_unbatched_and_channels_last_inputs():
    x, w, b, *attributes = conv_inputs(BIG)
    close(
        opcore.run("conv2d_relu", x[0], w, b, *attributes), expected("conv2d_relu", x[0], w, b, *attributes), "float32"
    )
    last = x.to(memory_format=torch.channels_last)
    close(opcore.run("conv2d_relu", last, w, b, *attributes), expected("conv2d_relu", x, w, b, *attributes), "float32")


def test_small_convolutions_stay_on_aten():
    explanation = opcore.explain("conv2d_relu", *conv_inputs(SMALL))
    assert explanation.chosen == "cpu/aten"
    reason = next(c.reason for c in explanation.candidates if c.label == "onednn")
    assert reason.startswith("N*OC*OH*OW*IC/groups*KH*KW = 486 <") and "fixed ~20 us" in reason


def test_integer_and_double_inputs_use_aten():
    x, w, b, *attributes = conv_inputs(BIG, "float64")
    assert opcore.explain("conv2d_relu", x, w, b, *attributes).chosen == "cpu/aten"
    ints = [t.to(torch.int64) if t is not None else None for t in (x * 4, w * 8, b)]
    result = opcore.run("conv2d_relu", *ints, *attributes)
    assert torch.equal(result, torch.relu(F.conv2d(*ints, *attributes)))
    with pytest.raises(opcore.DTypeError, match="conv2d_silu\\(\\): argument 'x'"):
        opcore.run("conv2d_silu", *ints, *attributes)


@pytest.mark.parametrize("op", list(ACTIVATIONS))
def test_resolve_packs_the_weight_and_serves_other_input_sizes(op):
    args = conv_inputs(BIG)
    resolved = opcore.resolve(op, *args, constants=("weight", "bias"))
    assert resolved.prepared and resolved.kernel.label == "onednn" and resolved.free == ("x",)
    x, w, b, *attributes = args
    for shape in ((2, 32, 40, 40), (1, 32, 40, 40), (3, 32, 9, 14)):
        other = rand(shape, low=-1, high=1)
        close(resolved(other), expected(op, other, w, b, *attributes), "float32")
    close(resolved(x[0]), expected(op, x[0], w, b, *attributes), "float32")


def test_resolve_with_a_free_weight():
    x, w, b, *attributes = conv_inputs(BIG)
    resolved = opcore.resolve("conv2d_relu", x, w, b, *attributes, constants=("bias",))
    assert resolved.free == ("x", "weight")
    close(resolved(x, w), expected("conv2d_relu", x, w, b, *attributes), "float32")


def test_decomposition_serves_backends_without_the_fused_kernel():
    x, w, b, *attributes = (a.numpy() if isinstance(a, torch.Tensor) else a for a in conv_inputs(SMALL))
    explanation = opcore.explain("conv2d_relu", x, w, b, *attributes, backend="reference")
    assert explanation.chosen == "decomposition"
    result = opcore.run("conv2d_relu", x, w, b, *attributes, backend="reference")
    torch.testing.assert_close(
        torch.from_numpy(result), torch.relu(F.conv2d(*(torch.from_numpy(a) for a in (x, w, b)), *attributes))
    )
    assert isinstance(result, numpy.ndarray)


def test_checker_declines_empty_outputs():
    verdict = choice.conv_checker(
        TensorMeta((0, 16, 20, 20), DType.FLOAT32),
        TensorMeta((32, 16, 3, 3), DType.FLOAT32),
        None,
        (1, 1),
        (0, 0),
        (1, 1),
        1,
    )
    assert "empty" in verdict
