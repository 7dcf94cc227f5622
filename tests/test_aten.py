"""The ATen fallback (opcore.torchkit.aten): any torch.ops.aten op through opcore.run, bound through
the op's _schema, its outputs inferred on meta tensors, served by the cpu backend.
"""

from __future__ import annotations

import numpy
import pytest

torch = pytest.importorskip("torch")

import opcore  # noqa: E402
from opcore.runtime import runtime  # noqa: E402
from opcore.torchkit.aten import FALLBACK_LABEL, aten_contract, find_overload, kernel_factory  # noqa: E402
from opcore.types import DType, TensorMeta  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error")
aten = torch.ops.aten


def same(actual, expected):
    """Exactly what torch.ops.aten returns: type, dtype, shape, values (tuples element by element)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
        return
    assert isinstance(actual, torch.Tensor)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def contract(name):
    return runtime().ensure_loaded().registry.contract(name)


# --- what the issue asks for --------------------------------------------------------------------


def test_conv_transpose2d():
    x, w, b = torch.randn(2, 4, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(3)
    # opcore repeats an int for int[2] (torch.ops wants the list)
    same(
        opcore.run("aten.conv_transpose2d", x, w, b, 2, 1, 1),
        aten.conv_transpose2d.input(x, w, b, [2, 2], [1, 1], [1, 1]),
    )
    same(
        opcore.run("aten.conv_transpose2d.input", x, w, stride=[2, 1], dilation=2),
        aten.conv_transpose2d.input(x, w, stride=[2, 1], dilation=[2, 2]),
    )
    assert contract("aten.conv_transpose2d").doc.startswith("torch.ops.aten.conv_transpose2d.input")


def test_index_with_optional_tensor_list():
    x, idx = torch.randn(3, 4), torch.tensor([2, 0, 2])
    same(opcore.run("aten.index.Tensor", x, [None, idx]), aten.index.Tensor(x, [None, idx]))
    same(opcore.run("aten.index", x, (idx,)), aten.index.Tensor(x, [idx]))
    mask = x > 0
    same(opcore.run("aten.index.Tensor", x, [mask]), aten.index.Tensor(x, [mask]))  # data-dependent size


def test_keyword_only_arguments():
    x, y = torch.randn(3, 4), torch.randn(4)
    same(opcore.run("aten.add.Tensor", x, y, alpha=2), aten.add.Tensor(x, y, alpha=2))
    same(opcore.run("aten.gelu", x, approximate="tanh"), aten.gelu.default(x, approximate="tanh"))
    same(
        opcore.run("aten.sum.dim_IntList", x, [1], True, dtype=torch.float64),
        aten.sum.dim_IntList(x, [1], True, dtype=torch.float64),
    )
    # a dtype, layout or memory format by name; torch gets the object
    same(opcore.run("aten.sum.dim_IntList", x, [0], dtype="float16"), aten.sum.dim_IntList(x, [0], dtype=torch.float16))
    nchw = torch.randn(1, 3, 4, 5)
    out = opcore.run("aten.clone", nchw, memory_format="channels_last")
    assert out.is_contiguous(memory_format=torch.channels_last)
    same(out, nchw)
    assert (
        str(contract("aten.add.Tensor").schema)
        == "aten.add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    )


def test_multiple_outputs_are_tuples():
    x = torch.randn(4, 6)
    same(opcore.run("aten.max.dim", x, 1), aten.max.dim(x, 1))
    same(opcore.run("aten.split.Tensor", x, 4, 1), aten.split.Tensor(x, 4, 1))
    same(
        opcore.run("aten.native_layer_norm", x, [6], None, None, 1e-5), aten.native_layer_norm(x, [6], None, None, 1e-5)
    )


def test_random_ops_take_a_generator():
    x = torch.full((64,), 0.5)
    first = opcore.run("aten.bernoulli.p", x, 0.3, generator=torch.Generator().manual_seed(7))
    same(first, aten.bernoulli.p(x, 0.3, generator=torch.Generator().manual_seed(7)))


def test_type_promotion_equals_the_meta_output():
    x, y = torch.ones(2, 3, dtype=torch.int32), torch.ones(3, dtype=torch.float16)
    meta = opcore.infer_meta("aten.add.Tensor", TensorMeta.of(x), TensorMeta.of(y))
    assert meta.dtype is DType.FLOAT16 and meta.shape == (2, 3)
    same(opcore.run("aten.add.Tensor", x, y), x + y)
    same(
        opcore.run("aten.mul.Scalar", torch.ones(2, dtype=torch.int64), 2.5),
        aten.mul.Scalar(torch.ones(2, dtype=torch.int64), 2.5),
    )


def test_views_and_non_contiguous_inputs():
    x = torch.randn(4, 6)[:, ::2]
    same(opcore.run("aten.t", x), aten.t.default(x))
    same(opcore.run("aten.transpose.int", x, 0, 1), x.transpose(0, 1))
    same(opcore.run("aten.sin", x.t()), torch.sin(x.t()))
    same(opcore.run("aten.mean.dim", torch.randn(0, 3), [0]), aten.mean.dim(torch.randn(0, 3), [0]))
    same(opcore.run("aten.exp", torch.tensor(2.0)), torch.exp(torch.tensor(2.0)))


def test_data_dependent_shapes_run_after_a_fake_tensor_meta():
    x = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    same(opcore.run("aten.nonzero", x), aten.nonzero.default(x))
    meta = opcore.infer_meta("aten.nonzero", TensorMeta.of(x))
    assert meta.shape == (-1, 2) and meta.dtype is DType.INT64  # -1: known only after the kernel ran
    same(opcore.run("aten.masked_select", x, x > 0), aten.masked_select.default(x, x > 0))


def test_numpy_inputs_come_back_as_numpy():
    x = numpy.arange(6, dtype="float32").reshape(2, 3)
    y = opcore.run("aten.relu", x - 2)
    assert isinstance(y, numpy.ndarray)
    numpy.testing.assert_array_equal(y, numpy.maximum(x - 2, 0))
    values, indices = opcore.run("aten.max.dim", x, 1)
    assert isinstance(values, numpy.ndarray) and indices.dtype == numpy.int64
    picked = opcore.run("aten.index.Tensor", x, [None, numpy.array([2, 0])])  # numpy inside a Tensor?[]
    numpy.testing.assert_array_equal(picked, x[:, [2, 0]])


def test_explain_shows_the_fallback():
    explanation = opcore.explain("aten.index.Tensor", torch.randn(3, 4), [None, torch.tensor([1])])
    assert explanation.chosen == f"cpu/{FALLBACK_LABEL}"
    assert "indices: [None, int64[1] on cpu]" in str(explanation)


# --- naming and declined overloads --------------------------------------------------------------


def test_overload_choice_without_a_name():
    assert find_overload("aten.relu") is aten.relu.default
    assert find_overload("aten.add") is aten.add.Tensor  # no .default: the first usable overload
    assert find_overload("aten.index") is aten.index.Tensor
    assert find_overload("aten.no_such_op") is None


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("aten.add_.Tensor", "writes into its argument 'self'"),
        ("aten.add.out", "in-place and out= overloads are declined"),
        ("aten.zeros", "takes no tensor"),
        ("aten.is_nonzero", "returns bool"),
        ("aten.add.Tensr", "an overload of aten.add that opcore can run (Tensor, Scalar)"),
        ("aten.add.Tensor.x", "'aten.<name>' or 'aten.<name>.<overload>'"),
    ],
)
def test_declined_names_say_why(name, words):
    with pytest.raises(opcore.UnknownOpError) as caught:
        opcore.run(name, torch.ones(2))
    assert words in str(caught.value), str(caught.value)


def test_unknown_aten_op():
    with pytest.raises(opcore.UnknownOpError, match="unknown op 'aten.no_such_op'"):
        opcore.run("aten.no_such_op", torch.ones(2))


# --- errors: torch's refusals as opcore errors naming the op -------------------------------------


def test_shape_errors_name_the_op():
    with pytest.raises(opcore.ShapeError) as caught:
        opcore.run("aten.add.Tensor", torch.ones(3, 4), torch.ones(5))
    assert str(caught.value).startswith("aten.add.Tensor(): torch.ops.aten.add.Tensor refused the inputs")


def test_dtype_errors_name_the_op():
    with pytest.raises(opcore.DTypeError, match=r"aten.index.Tensor\(\).*indices must be long"):
        opcore.run("aten.index.Tensor", torch.ones(3), [torch.ones(1)])


def test_argument_errors_come_from_the_binder():
    with pytest.raises(opcore.ArgumentError, match="argument 'dim0' expected an int"):
        opcore.run("aten.transpose.int", torch.ones(2, 3), "a", 1)
    with pytest.raises(opcore.ArgumentError, match="argument 'dtype' expected a dtype"):
        opcore.run("aten.sum.dim_IntList", torch.ones(2), [0], dtype="float128")


def test_data_dependent_errors_at_run_time_name_the_op():
    with pytest.raises(opcore.OpcoreError, match=r"aten.index.Tensor\(\).*out of bounds"):
        opcore.run("aten.index.Tensor", torch.ones(3), [torch.tensor([10])])


def test_missing_cpu_kernel_hands_over_with_the_reason():
    # torch has no CPU kernel of aten.gelu for integers; the meta kernel does not know that
    with pytest.raises(opcore.NoKernelError, match="handed over at run time: torch has no cpu kernel"):
        opcore.run("aten.gelu", torch.ones(2, dtype=torch.int64))


# --- sharing between torch backends ---------------------------------------------------------------


def test_namespace_factory_is_shared_and_survives_either_backend():
    class SecondTorchBackend:
        @opcore.hookimpl
        def opcore_backend(self):
            return opcore.BackendSpec(name="second", version="1", priority=1, device_types=(opcore.DeviceType.CPU,))

        @opcore.hookimpl
        def opcore_register_kernels(self, registrar):
            from opcore.torchkit.registration import register_aten_fallback

            register_aten_fallback(registrar, "cpu")

    opcore.register_plugin(SecondTorchBackend())
    try:
        registry = runtime().ensure_loaded().registry
        factories = {n.factory for n in registry.namespaces if n.prefix == "aten."}
        assert len(factories) == 1  # one shared factory, whichever backend answers
        explanation = opcore.explain("aten.neg", torch.ones(2))
        assert [c.title for c in explanation.candidates][:2] == ["cpu/aten-fallback", "second/aten-fallback"]
        opcore.unregister_plugin("cpu")  # the other torch backend still serves aten.*
        assert opcore.run("aten.abs", -torch.ones(2)).tolist() == [1.0, 1.0]
    finally:
        opcore.unregister_plugin("second")


def test_kernel_factory_ignores_contracts_it_did_not_make():
    made = aten_contract("aten.neg")
    assert made is not None and len(list(kernel_factory("cpu")(made))) == 1
    other = opcore.define_op("aten.mine(Tensor x) -> Tensor", meta=lambda x: x)
    assert list(kernel_factory("cpu")(other)) == []


def test_int1_dims_take_one_int_or_a_list_of_any_length():
    """ATen's int[1] (reduction dims) is not a fixed length: mean over two dims binds and runs."""
    x = torch.randn(2, 3, 4, 5)
    assert torch.equal(opcore.run("aten.mean.dim", x, [2, 3]), x.mean(dim=(2, 3)))
    assert torch.equal(opcore.run("aten.mean.dim", x, 1), x.mean(dim=1))
    with pytest.raises(opcore.ArgumentError, match="an int or a list of ints"):
        opcore.run("aten.mean.dim", x, "two")


BATCH_NORMS = [  # torch's CPU kernels return empty saved statistics in inference where meta says [C]
    ("aten._native_batch_norm_legit_no_training.default", (0.1, 1e-5)),
    ("aten.native_batch_norm.default", (False, 0.1, 1e-5)),
    ("aten._batch_norm_no_update.default", (0.1, 1e-5)),
]


@pytest.mark.parametrize("name, rest", BATCH_NORMS, ids=[f"{n}-{r[0]}" for n, r in BATCH_NORMS])
@pytest.mark.parametrize("checked", ["first call", "strict"])
def test_outputs_sized_by_the_eager_kernel_pass_the_result_check(name, rest, checked):
    from opcore.torchkit.aten import EAGER_SIZED_OUTPUTS

    assert name in EAGER_SIZED_OUTPUTS
    _, op_name, overload = name.split(".")
    args = (torch.randn(2, 3, 4, 4), torch.randn(3), torch.randn(3), torch.zeros(3), torch.ones(3), *rest)
    # training=True updates the running statistics in place: torch gets its own copies
    expected = getattr(getattr(aten, op_name), overload)(
        *(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    )
    if checked == "strict":
        with opcore.strict():
            got = opcore.run(name, *args, backend="cpu")
    else:
        got = opcore.run(name, *args, backend="cpu")
    same(got, expected)


def test_eager_sized_outputs_keep_rank_and_dtype_checked():
    """The meta of such an output is -1 in every dim: any size of that rank passes, another rank does not."""
    x, w, b, m, v = torch.randn(2, 3, 4), torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)
    metas = opcore.infer_meta(
        "aten._native_batch_norm_legit_no_training.default", *(TensorMeta.of(t) for t in (x, w, b, m, v)), 0.1, 1e-5
    )
    assert [m.shape for m in metas] == [(2, 3, 4), (-1,), (-1,)]
    assert all(m.dtype is DType.FLOAT32 for m in metas)
