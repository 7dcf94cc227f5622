"""The public surface: what `import opcore` offers, and the smaller entry points."""

from __future__ import annotations

import numpy
import pytest

import opcore
from opcore import DType, TensorMeta

pytestmark = pytest.mark.usefixtures("only_reference")


def test_all_is_sorted_and_resolves() -> None:
    assert len(set(opcore.__all__)) == len(opcore.__all__)
    for name in opcore.__all__:
        assert hasattr(opcore, name), name


def test_every_public_function_has_an_example() -> None:
    for name in (
        "run",
        "resolve",
        "explain",
        "prefer",
        "strict",
        "configure",
        "backends",
        "ops",
        "infer_meta",
        "register_plugin",
    ):
        assert ">>>" in (getattr(opcore, name).__doc__ or ""), name


def test_ops_lists_the_builtins() -> None:
    names = {c.name for c in opcore.ops()}
    expected = {
        "linear",
        "matmul",
        "bmm",
        "add",
        "sub",
        "mul",
        "div",
        "relu",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "exp",
        "softmax",
        "log_softmax",
        "layer_norm",
        "rms_norm",
        "embedding",
        "conv2d",
        "scaled_dot_product_attention",
        "transpose",
        "permute",
        "reshape",
        "cat",
        "linear_relu",
        "linear_silu",
        "linear_gelu",
        "gated_mlp",
    }
    assert expected <= names
    fused = {c.name for c in opcore.ops() if c.decomposition is not None}
    assert {"linear_relu", "linear_silu", "linear_gelu", "gated_mlp"} <= fused


def test_infer_meta_needs_no_data() -> None:
    x, w = TensorMeta((2, 8), DType.FLOAT32), TensorMeta((4, 8), DType.FLOAT32)
    out = opcore.infer_meta("linear", x, w)
    assert isinstance(out, TensorMeta)
    assert out.shape == (2, 4) and out.dtype is DType.FLOAT32
    with pytest.raises(opcore.ShapeError, match=r"^linear\(\)"):
        opcore.infer_meta("linear", x, TensorMeta((4, 7), DType.FLOAT32))
    softmax = opcore.infer_meta("softmax", x, dim=-1)
    assert isinstance(softmax, TensorMeta) and softmax.shape == (2, 8)


def test_backends_returns_reports() -> None:
    reports = opcore.backends()
    assert all(isinstance(r, opcore.PluginReport) for r in reports)
    assert "reference" in {r.name for r in reports}


def test_run_signature_keeps_the_op_positional_only() -> None:
    x = numpy.ones(3, numpy.float32)
    with pytest.raises(TypeError):
        # the op name is positional-only, so kernels may have an 'op' argument; the call is wrong on purpose
        opcore.run(op="relu", x=x)  # type: ignore[call-arg]
