"""opcore-cuda's own kernels, tested without a GPU.

- ``opcore_cuda.cublaslt``: torch._addmm_activation exists on CPU too, so the reshaping, the bias
  and the relu numerics are checked here against the reference backend. Its gelu differs by device
  (exact on CPU, the tanh approximation on CUDA): the CPU semantics are pinned down here so a
  change in torch is noticed; the CUDA semantics are checked by tests/test_cuda_gpu.py.
- ``opcore_cuda.choice``: the checkers, on TensorMeta.
- ``opcore_cuda.kernels``: the CUDA wrappers of the shared kernels (clamp, div, embedding,
  embedding_wq, gather, group_norm, index, layer_norm), on CPU tensors against the reference
  backend. What CUDA itself does without them (a device-side assert, no NaN from a NaN bound) is
  seen only on a GPU: tests/test_cuda_gpu.py runs the conformance kit there.
"""

from __future__ import annotations

import numpy
import pytest

import opcore
from opcore import DType, Layout, TensorMeta
from opcore.quantize import quantize_weight
from opcore_cuda import choice

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from opcore_cuda import cublaslt, kernels  # noqa: E402  (import torch)

pytestmark = pytest.mark.filterwarnings("error")


def tensor(*shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).to(dtype)


def reference(op, *args, **kwargs):
    """The reference backend's result for torch inputs (float32 for bfloat16 ones)."""
    result = opcore.run(op, *args, backend="reference", **kwargs)
    return result.float().numpy() if isinstance(result, torch.Tensor) else result


# --- cuBLASLt epilogue kernels --------------------------------------------------------------------


@pytest.mark.parametrize(
    "x_shape",
    [(8, 16), (2, 5, 16), (16,), (0, 16), (3, 1, 16)],
    ids=["2d", "batched", "1d", "empty-rows", "batched-one-row"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_linear_relu_matches_the_reference(x_shape, dtype):
    x, w, b = tensor(*x_shape, dtype=dtype), tensor(12, 16, dtype=dtype, seed=1), tensor(12, dtype=dtype, seed=2)
    out = cublaslt.linear_relu(x, w, b)
    assert out.shape == (*x_shape[:-1], 12) and out.dtype == dtype
    tolerance = {"rtol": 1.3e-5, "atol": 1e-5} if dtype is torch.float32 else {"rtol": 5e-2, "atol": 5e-2}
    numpy.testing.assert_allclose(out.float().numpy(), reference("linear_relu", x, w, b), **tolerance)


def test_linear_relu_takes_non_contiguous_inputs():
    x = tensor(16, 8).t()  # (8, 16), column-major
    w = tensor(16, 12, seed=1).t()  # (12, 16), transposed
    b = tensor(24, seed=2)[::2]  # strided bias
    batched = tensor(2, 16, 5, seed=3).transpose(1, 2)  # (2, 5, 16), not contiguous: reshape copies
    numpy.testing.assert_allclose(cublaslt.linear_relu(x, w, b).numpy(), reference("linear_relu", x, w, b), 1e-5, 1e-5)
    numpy.testing.assert_allclose(
        cublaslt.linear_relu(batched, w, b).numpy(), reference("linear_relu", batched, w, b), 1e-5, 1e-5
    )


def test_addmm_activation_gelu_is_exact_on_cpu():
    # what the CUDA kernel relies on is the opposite (tanh on CUDA, tests/test_cuda_gpu.py); this pins
    # down the CPU side so that the tests below compare with the right reference
    x, w, b = tensor(6, 16), tensor(12, 16, seed=1), tensor(12, seed=2)
    out = torch._addmm_activation(b, x, w.t(), use_gelu=True)
    torch.testing.assert_close(out, F.gelu(F.linear(x, w, b), approximate="none"))
    assert (out - F.gelu(F.linear(x, w, b), approximate="tanh")).abs().max() > 1e-6


@pytest.mark.parametrize("x_shape", [(8, 16), (2, 5, 16), (16,)], ids=["2d", "batched", "1d"])
def test_linear_gelu_shapes_and_cpu_numerics(x_shape):
    x, w, b = tensor(*x_shape), tensor(12, 16, seed=1), tensor(12, seed=2)
    out = cublaslt.linear_gelu(x, w, b, "tanh")
    assert out.shape == (*x_shape[:-1], 12)
    # on CPU _addmm_activation's gelu is the exact one (see above)
    numpy.testing.assert_allclose(out.numpy(), reference("linear_gelu", x, w, b, approximate="none"), 1.3e-5, 1e-5)


@pytest.mark.parametrize("use_gelu", [False, True], ids=["relu", "gelu"])
def test_prepared_kernels_equal_the_plain_ones(use_gelu):
    prepare = cublaslt.prepare_linear_gelu if use_gelu else cublaslt.prepare_linear_relu
    kernel = cublaslt.linear_gelu if use_gelu else cublaslt.linear_relu
    x, w, b = tensor(4, 16), tensor(12, 16, seed=1), tensor(12, seed=2)
    args = (x, w, b, "tanh") if use_gelu else (x, w, b)
    prepared = prepare(args, frozenset({"w", "b"}))
    for other in (tensor(7, 16, seed=3), tensor(2, 3, 16, seed=4), tensor(16, seed=5)):
        rest = ("tanh",) if use_gelu else ()
        torch.testing.assert_close(prepared(other), kernel(other, w, b, *rest))
    only_w = prepare(args, frozenset({"w"}))  # b stays an argument
    torch.testing.assert_close(only_w(x, b), kernel(x, w, b, *(("tanh",) if use_gelu else ())))


# --- checkers -------------------------------------------------------------------------------------


def meta(*shape, dtype=DType.FLOAT16, layout=Layout.STRIDED):
    return TensorMeta(shape, dtype, layout=layout)


def test_relu_epilogue_checker():
    x, w = meta(8, 64), meta(32, 64)
    assert choice.relu_epilogue_checker(x, w, meta(32)) is True
    assert choice.relu_epilogue_checker(meta(2, 3, 64), w, meta(32)) is True
    assert "needs one" in choice.relu_epilogue_checker(x, w, None)
    assert "shape (32,) only" in choice.relu_epilogue_checker(x, w, meta(1, 32))
    assert "2-D weight" in choice.relu_epilogue_checker(x, meta(64), meta(()))
    assert "in_features is 0" in choice.relu_epilogue_checker(meta(8, 0), meta(32, 0), meta(32))
    assert "strided" in choice.relu_epilogue_checker(x, meta(32, 64, layout=Layout.SPARSE_COO), meta(32))


def test_gelu_epilogue_checker_takes_tanh_only():
    x, w, b = meta(8, 64), meta(32, 64), meta(32)
    assert choice.gelu_epilogue_checker(x, w, b, "tanh") is True
    assert choice.gelu_epilogue_checker(x, w, b, "none").startswith("cuBLASLt's GELU epilogue is the tanh")
    assert "needs one" in choice.gelu_epilogue_checker(x, w, None, "tanh")


# --- the CUDA wrappers of shared kernels ---------------------------------------------------------


@pytest.mark.parametrize("other", [torch.tensor([2, 0]), 0], ids=["tensor", "scalar"])
@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_div_refuses_an_integer_division_by_zero(other, mode):
    with pytest.raises(opcore.ArgumentError, match=r"argument 'other' expected no zero divisor .* found a zero"):
        kernels.div(torch.tensor([4, 5]), other, mode)


def test_div_otherwise_is_the_shared_kernel():
    x = torch.tensor([4, -5, 7], dtype=torch.int32)
    assert kernels.div(x, torch.tensor([2, 2, 3], dtype=torch.int32), "floor").tolist() == [2, -3, 2]
    assert kernels.div(x, 2, "trunc").tolist() == [2, -2, 3]
    floats = kernels.div(x.float(), torch.zeros(3), "floor")  # floating: inf and nan, no error
    assert torch.isinf(floats[0]) and torch.isinf(floats[1])
    assert kernels.div(x, torch.tensor([0, 1, 2], dtype=torch.int32), None).dtype == torch.float32


def test_embedding_checks_the_indices_first():
    weight = tensor(3, 4)
    for bad, found in ((torch.tensor([0, 3]), "index 3"), (torch.tensor([[-1]], dtype=torch.int32), "index -1")):
        with pytest.raises(opcore.ArgumentError, match=rf"indices in \[0, 2\] .* found {found} \(index out of range"):
            kernels.embedding(bad, weight, None)
    indices = torch.tensor([[2, 0], [1, 1]])
    torch.testing.assert_close(kernels.embedding(indices, weight, 1), F.embedding(indices, weight, 1))
    assert kernels.embedding(torch.zeros(0, dtype=torch.int64), weight, None).shape == (0, 4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_layer_norm_with_float32_parameters_of_a_half_input(dtype):
    x = tensor(3, 6, dtype=dtype)
    weight, bias = tensor(6, seed=1), tensor(6, seed=2)
    for w, b in ((weight, bias), (None, bias), (weight, None)):
        out = kernels.layer_norm(x, (6,), w, b, 1e-5)
        assert out.dtype == dtype
        numpy.testing.assert_allclose(out.float().numpy(), reference("layer_norm", x, (6,), w, b), 5e-2, 5e-2)


def test_layer_norm_of_one_dtype_is_the_shared_kernel():
    x, w, b = tensor(3, 6), tensor(6, seed=1), tensor(6, seed=2)
    torch.testing.assert_close(kernels.layer_norm(x, (6,), w, b, 1e-5), F.layer_norm(x, (6,), w, b, 1e-5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_group_norm_with_float32_parameters_of_a_half_input(dtype):
    x = tensor(2, 4, 3, dtype=dtype)
    weight, bias = tensor(4, seed=1), tensor(4, seed=2)
    for w, b in ((weight, bias), (None, bias), (weight, None)):
        out = kernels.group_norm(x, 2, w, b, 1e-5)
        assert out.dtype == dtype
        numpy.testing.assert_allclose(out.float().numpy(), reference("group_norm", x, 2, w, b), 5e-2, 5e-2)
    same = tensor(2, 4, 3)
    torch.testing.assert_close(kernels.group_norm(same, 2, weight, bias, 1e-5), F.group_norm(same, 2, weight, bias))


@pytest.mark.parametrize("bounds", [(float("nan"), None), (None, float("nan")), (0.0, float("nan"))])
def test_clamp_with_a_nan_bound_is_nan(bounds):
    out = kernels.clamp(tensor(2, 3), *bounds)
    assert out.dtype == torch.float32 and bool(torch.isnan(out).all())
    ints = kernels.clamp(torch.tensor([1, 2]), *bounds)  # promoted to float, as torch.clamp does
    assert ints.is_floating_point() and bool(torch.isnan(ints).all())
    torch.testing.assert_close(kernels.clamp(tensor(2, 3), -0.5, 0.5), torch.clamp(tensor(2, 3), -0.5, 0.5))


def test_gather_checks_the_index_first():
    x = tensor(2, 3)
    for bad, found in ((torch.tensor([[0, 3]]), "index 3"), (torch.tensor([[-1, 0]]), "index -1")):
        with pytest.raises(opcore.ArgumentError, match=rf"'index' expected indices in \[0, 2\] .* found {found}"):
            kernels.gather(x, 1, bad)
    good = torch.tensor([[2, 0], [1, 1]])
    torch.testing.assert_close(kernels.gather(x, 1, good), torch.gather(x, 1, good))


def test_index_checks_each_index_first():
    x = tensor(3, 4)
    with pytest.raises(opcore.ArgumentError, match=r"'indices\[1\]' expected indices in \[-4, 3\] .* found index 4"):
        kernels.index(x, (None, torch.tensor([0, 4])))
    with pytest.raises(opcore.ArgumentError, match=r"'indices\[0\]' expected .* found index -4"):
        kernels.index(x, (torch.tensor([-4]),))
    picked = kernels.index(x, (torch.tensor([-1, 0]), None))  # negative indices count from the end
    torch.testing.assert_close(picked, x[torch.tensor([-1, 0])])


def test_embedding_wq_checks_the_indices_first():
    weight = tensor(5, 8)
    q = quantize_weight(weight, bits=8)
    tables = (torch.as_tensor(q.qweight), torch.as_tensor(q.scale), None)
    args = (*tables, 8, q.group_size)
    with pytest.raises(opcore.ArgumentError, match=r"'input' expected indices in \[0, 4\] .* found index 5"):
        kernels.embedding_wq(torch.tensor([[0, 5]]), *args)
    ids = torch.tensor([[4, 0]])
    expected = opcore.run("embedding_wq", ids, *tables, bits=8, group_size=q.group_size, backend="cpu")
    torch.testing.assert_close(kernels.embedding_wq(ids, *args), expected)
