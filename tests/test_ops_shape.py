"""Shape contracts (transpose, permute, reshape, cat), against PyTorch."""

from __future__ import annotations

import numpy
import pytest

torch = pytest.importorskip("torch")

from opcase import call, check_error_case, compare, error_id, kit_errors, rand, reseed, z  # noqa: E402

from opcore.errors import ShapeError  # noqa: E402


@pytest.fixture(autouse=True)
def _same_data_every_run():
    reseed()


DTYPES = ["float32", "float16", "float64", "bfloat16", "int64", "int32", "int8", "uint8", "bool"]


@pytest.mark.parametrize(
    ("shape", "dim0", "dim1"),
    [((), 0, -1), ((), 0, 0), ((5,), 0, -1), ((2, 3), 0, 1), ((2, 3), -1, -2), ((2, 3), 1, 1), ((2, 3, 4), 0, 2),
     ((2, 0, 4), 1, 2)],
)  # fmt: skip
def test_transpose(shape, dim0, dim1):
    compare("transpose", torch.transpose, rand(shape), dim0, dim1, exact=True)


@pytest.mark.parametrize(
    ("shape", "dims"),
    [((), ()), ((5,), (0,)), ((5,), (-1,)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 0, 1)), ((2, 3, 4), (0, 1, 2)),
     ((2, 0, 4), (1, 2, 0))],
)  # fmt: skip
def test_permute(shape, dims):
    compare("permute", torch.permute, rand(shape), dims, exact=True)


@pytest.mark.parametrize(
    ("shape", "new_shape"),
    [((2, 3), (-1,)), ((2, 3), (3, 2)), ((2, 3), (1, 6, 1)), ((2, 3), (6, -1)), ((0, 3), (-1, 3)),
     ((0, 3), (3, 0, 5)), ((), (1,)), ((), (-1,)), ((1, 1), ()), ((2, 3, 4), (4, -1, 2))],
)  # fmt: skip
def test_reshape(shape, new_shape):
    compare("reshape", torch.reshape, rand(shape), new_shape, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["", "transposed", "strided"])
def test_shape_ops_keep_every_dtype(dtype, layout):
    x = rand((2, 3, 4), dtype, layout=layout)
    compare("transpose", torch.transpose, x, 0, 2, exact=True)
    compare("permute", torch.permute, x, (1, 2, 0), exact=True)
    compare("reshape", torch.reshape, x, (4, -1), exact=True)
    compare("cat", torch.cat, [x, x], 1, exact=True)


def test_views_where_numpy_allows():
    x = numpy.arange(24.0).reshape(2, 3, 4)
    assert numpy.shares_memory(call("transpose", x, 0, 1), x)
    assert numpy.shares_memory(call("permute", x, (2, 1, 0)), x)
    assert numpy.shares_memory(call("reshape", x, (6, 4)), x)
    strided = x.transpose(0, 2, 1)
    numpy.testing.assert_array_equal(call("reshape", strided, (-1,)), strided.reshape(-1))


@pytest.mark.parametrize(
    ("shapes", "dim"),
    [([(2, 3), (1, 3)], 0), ([(2, 3), (2, 4)], 1), ([(2, 3), (2, 4), (2, 1)], -1), ([(2,), (3,)], 0),
     ([(2, 3)], 1), ([(2, 0), (2, 0)], 0), ([(2, 0), (2, 3)], 1), ([(1, 2, 3), (1, 2, 3)], -2)],
)  # fmt: skip
def test_cat_shapes(shapes, dim):
    compare("cat", torch.cat, [rand(shape) for shape in shapes], dim, exact=True)


@pytest.mark.parametrize(
    "dtypes",
    [("float32", "int64"), ("float16", "bfloat16"), ("int8", "bool"), ("uint8", "int8"), ("int64", "float16"),
     ("bool", "bool"), ("int32", "float64", "float16"), ("bfloat16", "bfloat16")],
)  # fmt: skip
def test_cat_promotes_like_torch(dtypes):
    compare("cat", torch.cat, [rand((2, 3), dtype) for dtype in dtypes], 0)


@pytest.mark.parametrize(
    ("shapes", "dim"),
    [([(2, 3), (0,)], 0), ([(0,), (2, 3)], 1), ([(0,), (2, 3), (0,), (1, 3)], 0), ([(0,), (0,)], 0), ([(0,), (0,)], 1)],
)  # fmt: skip
def test_cat_skips_one_dimensional_empty_tensors(shapes, dim):
    compare("cat", torch.cat, [rand(shape) for shape in shapes], dim, exact=True)
    compare("cat", torch.cat, [rand(shapes[0], "float64"), *(rand(s) for s in shapes[1:])], dim, exact=True)


def test_cat_non_contiguous_inputs():
    parts = [rand((3, 4), layout="transposed"), rand((3, 4), layout="strided"), rand((3, 4))]
    compare("cat", torch.cat, parts, 0, exact=True)
    compare("cat", torch.cat, parts, 1, exact=True)


# the error inputs are the conformance kit's (opcore.testing); torch must reject them too where the kit says so
TORCH_FNS = {"transpose": torch.transpose, "permute": torch.permute, "reshape": torch.reshape, "cat": torch.cat}


@pytest.mark.parametrize(("op", "case"), kit_errors(*TORCH_FNS), ids=error_id)
def test_errors(op, case):
    check_error_case(op, case, TORCH_FNS[op])


def test_reshape_message_shows_the_element_count():
    with pytest.raises(ShapeError, match=r"expected a shape of 6 elements, found \[4, 2\] for 'x' of shape \(2, 3\)"):
        call("reshape", z(2, 3), (4, 2))
