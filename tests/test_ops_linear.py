"""Matrix-product contracts, the fused linear ops and their decompositions, against PyTorch."""

from __future__ import annotations

import numpy
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from opcase import CONTRACTS, call, call_bound, check_error_case, compare, error_id, kit_errors, rand, reseed, z  # noqa: E402

import opcore  # noqa: E402
from opcore.errors import ShapeError  # noqa: E402
from opcore.testing.ops.linear import LINEAR_SHAPES, int_range  # noqa: E402


@pytest.fixture(autouse=True)
def _same_data_every_run():
    reseed()


FLOATS = ["float32", "float16", "float64", "bfloat16"]
INTS = ["int64", "int32", "int16", "int8", "uint8"]


@pytest.mark.parametrize(("x_shape", "w_shape", "b_shape"), LINEAR_SHAPES)
def test_linear_shapes(x_shape, w_shape, b_shape):
    bias = None if b_shape is None else rand(b_shape)
    compare("linear", F.linear, rand(x_shape), rand(w_shape), bias)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_linear_dtypes(dtype):
    options = int_range(dtype)
    x, w, b = rand((3, 2, 8), dtype, **options), rand((5, 8), dtype, **options), rand((5,), dtype, **options)
    compare("linear", F.linear, x, w, b)
    compare("linear", F.linear, x, w)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_linear_non_contiguous(layout):
    compare("linear", F.linear, rand((4, 6), layout=layout), rand((5, 6), layout=layout), rand((5,), layout=layout))
    compare("linear", F.linear, rand((4, 6), "int64", layout=layout), rand((5, 6), "int64", layout=layout))


def test_linear_one_dimensional_weight_with_bias():
    # torch refuses a bias with a 1-D weight and a 2-D input (an addmm limit); opcore broadcasts it
    x, w, b = rand((2, 3), "float64"), rand((3,), "float64"), rand((), "float64")
    result = call("linear", x.numpy(), w.numpy(), b.numpy())
    numpy.testing.assert_allclose(result, x.numpy() @ w.numpy() + b.numpy(), rtol=1e-12)


def test_linear_integer_overflow_wraps_like_torch():
    x = torch.full((1, 4), 100, dtype=torch.int8)
    compare("linear", F.linear, x, x, exact=True)
    x = torch.full((1, 3), 2**31 - 1, dtype=torch.int32)
    compare("linear", F.linear, x, x, exact=True)


@pytest.mark.parametrize(
    ("x_shape", "y_shape"),
    [
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((4, 3), (3, 6)),
        ((2, 4, 3), (3,)),
        ((3,), (2, 3, 4)),
        ((2, 1, 4, 3), (5, 3, 6)),
        ((7, 4, 3), (3, 2)),
        ((0, 3), (3, 2)),
        ((2, 0), (0, 3)),
        ((0,), (0,)),
        ((2, 0, 4, 3), (1, 3, 2)),
    ],
)
def test_matmul_shapes(x_shape, y_shape):
    compare("matmul", torch.matmul, rand(x_shape), rand(y_shape))


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_matmul_and_bmm_dtypes(dtype):
    options = int_range(dtype)
    compare("matmul", torch.matmul, rand((2, 3, 5), dtype, **options), rand((5, 4), dtype, **options))
    compare("bmm", torch.bmm, rand((2, 3, 5), dtype, **options), rand((2, 5, 4), dtype, **options))


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_matmul_and_bmm_non_contiguous(layout):
    compare("matmul", torch.matmul, rand((2, 3, 5), layout=layout), rand((5, 4), layout=layout))
    compare("bmm", torch.bmm, rand((2, 3, 5), layout=layout), rand((2, 5, 4), layout=layout))


@pytest.mark.parametrize(
    ("x_shape", "y_shape"), [((2, 3, 4), (2, 4, 5)), ((0, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 1))]
)
def test_bmm_shapes(x_shape, y_shape):
    compare("bmm", torch.bmm, rand(x_shape), rand(y_shape))


# --- fused ops ---------------------------------------------------------------------------------


def _in_float64(fn):
    """fn computed in float64 and cast to the first input's dtype: the correctly rounded result."""

    def run(first, *rest, **kwargs):
        upcast = [t.double() if isinstance(t, torch.Tensor) else t for t in rest]
        return fn(first.double(), *upcast, **kwargs).to(first.dtype)

    return run


def linear_relu_torch(x, w, b=None):
    return torch.relu(F.linear(x, w, b))


def linear_silu_torch(x, w, b=None):
    return F.silu(F.linear(x, w, b))


def linear_gelu_torch(x, w, b=None, approximate="none"):
    return F.gelu(F.linear(x, w, b), approximate=approximate)


def gated_mlp_torch(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def gather_mm_torch(x, w, index):
    """What gather_mm mirrors: each row times its gathered matrix (the matrices copied, one per row)."""
    return torch.bmm(x.unsqueeze(1), w[index]).squeeze(1)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("rows", "groups"), [(12, 4), (1, 3), (0, 2), (40, 16)])
def test_gather_mm(dtype, rows, groups):
    def torch_fn(x, w, index):  # float16 / bfloat16: the correctly rounded result, as _in_float64
        return gather_mm_torch(x.double(), w.double(), index).to(x.dtype)

    index = torch.randint(0, groups, (rows,))
    compare("gather_mm", torch_fn, rand((rows, 8), dtype), rand((groups, 8, 5), dtype), index)


@pytest.mark.parametrize("n", [7, 8])  # 8: 16-byte strides, torch's grouped GEMM takes them (7: a product a group)
def test_gather_mm_on_the_cpu_backend_reads_each_group_once_in_any_order(n):
    """The torch kernel groups the rows: rows in any order, groups left out, one group for all."""
    from opcore.torchkit.torch_kernels import _grouped_mm_takes

    x, w = rand((64, 16)), rand((10, 16, n))
    assert _grouped_mm_takes(x, w) == (n == 8 and hasattr(torch.nn.functional, "grouped_mm"))
    for index in (torch.randint(0, 10, (64,)), torch.full((64,), 3), torch.arange(64) % 2 * 9):
        got = opcore.run("gather_mm", x, w, index, backend="cpu")
        torch.testing.assert_close(got, gather_mm_torch(x, w, index), rtol=1e-5, atol=1e-5)


FUSED = {"linear_relu": linear_relu_torch, "linear_silu": linear_silu_torch, "linear_gelu": linear_gelu_torch}


@pytest.mark.parametrize("op", list(FUSED))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("x_shape", "with_bias"), [((4, 8), True), ((8,), False), ((2, 3, 8), True), ((0, 8), True)])
def test_fused_linear_activation(op, dtype, x_shape, with_bias):
    torch_fn = FUSED[op] if dtype in ("float32", "float64") else _in_float64(FUSED[op])
    bias = rand((6,), dtype) if with_bias else None
    compare(op, torch_fn, rand(x_shape, dtype), rand((6, 8), dtype), bias)


@pytest.mark.parametrize("dtype", INTS)
def test_linear_relu_integers(dtype):
    options = int_range(dtype)
    compare("linear_relu", linear_relu_torch, rand((4, 8), dtype, **options), rand((6, 8), dtype, **options))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_linear_gelu_approximate(approximate):
    x, w, b = rand((4, 8)), rand((6, 8), layout="transposed"), rand((6,))
    compare("linear_gelu", linear_gelu_torch, x, w, b, approximate=approximate)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("x_shape", [(3, 8), (8,), (2, 3, 8), (0, 8)])
def test_gated_mlp(dtype, x_shape):
    torch_fn = gated_mlp_torch if dtype == "float64" else _in_float64(gated_mlp_torch)
    weights = rand((16, 8), dtype, low=-1, high=1), rand((16, 8), dtype, low=-1, high=1), rand((5, 16), dtype)
    compare("gated_mlp", torch_fn, rand(x_shape, dtype), *weights)


def test_gated_mlp_float32_against_torch_directly():
    x, weights = rand((3, 8), low=-1, high=1), (rand((16, 8), low=-1, high=1), rand((16, 8)), rand((5, 16)))
    expected = gated_mlp_torch(x, *weights)
    actual = call("gated_mlp", x.numpy(), *(w.numpy() for w in weights))
    torch.testing.assert_close(torch.from_numpy(actual), expected, rtol=1e-5, atol=1e-4)


# --- decompositions ----------------------------------------------------------------------------

DECOMPOSED = {
    "linear_relu": lambda: (rand((4, 8)).numpy(), rand((6, 8)).numpy(), rand((6,)).numpy()),
    "linear_silu": lambda: (rand((4, 8)).numpy(), rand((6, 8)).numpy(), None),
    "linear_gelu": lambda: (rand((2, 4, 8)).numpy(), rand((6, 8)).numpy(), rand((6,)).numpy(), "tanh"),
    "gated_mlp": lambda: tuple(rand(s).numpy() for s in ((3, 8), (16, 8), (16, 8), (5, 16))),
}


def _check_decomposition(op):
    args = DECOMPOSED[op]()
    fused = call_bound(op, args)
    decomposed = CONTRACTS[op].decomposition(*args)  # decompositions get the bound arguments positionally
    assert isinstance(decomposed, numpy.ndarray) and decomposed.dtype == fused.dtype
    numpy.testing.assert_allclose(decomposed, fused, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", list(DECOMPOSED))
def test_decomposition_through_the_dispatcher(op):
    _check_decomposition(op)


def test_fused_contracts_say_they_are_fused():
    for name, contract in CONTRACTS.items():
        assert ("fused" in contract.tags) == (contract.decomposition is not None), name


# --- errors ------------------------------------------------------------------------------------

# the error inputs are the conformance kit's (opcore.testing); torch must reject them too where the kit says so
TORCH_FNS = {
    "linear": F.linear,
    "linear_relu": linear_relu_torch,
    "linear_silu": linear_silu_torch,
    "linear_gelu": linear_gelu_torch,
    "matmul": torch.matmul,
    "bmm": torch.bmm,
    "gather_mm": gather_mm_torch,
    "gated_mlp": gated_mlp_torch,
}


@pytest.mark.parametrize(("op", "case"), kit_errors(*TORCH_FNS), ids=error_id)
def test_errors(op, case):
    check_error_case(op, case, TORCH_FNS[op])


def test_weight_error_says_how_torch_stores_it():
    with pytest.raises(ShapeError, match=r"as torch.nn.Linear stores it"):
        call("linear", z(2, 3), z(3, 4))
