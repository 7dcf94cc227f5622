"""The cpu backend's oneDNN fused linear kernels (opcore_cpu.onednn) and their checkers
(opcore_cpu.choice): results against the reference, the crossover in explain, and prepare's
packed weights through opcore.resolve.
"""

from __future__ import annotations

import numpy
import pytest

torch = pytest.importorskip("torch")

from machine import check_onednn_choice, onednn_or_aten, onednn_reason  # noqa: E402
from opcase import TOLERANCES, rand, reseed  # noqa: E402

import opcore  # noqa: E402
from opcore.kernel_records import Costly  # noqa: E402
from opcore.types import DType, TensorMeta  # noqa: E402
from opcore_cpu import choice, system  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error")

BIG = (64, 256, 256)  # M*K*N = 4194304: above the crossover in every dtype
SMALL = (8, 64, 64)  # 32768: below it in float32
LINEAR_OPS = ["linear", "linear_relu", "linear_silu", "linear_gelu"]


@pytest.fixture(autouse=True)
def _same_data():
    reseed()


def inputs(shape, dtype="float32", bias=True):
    m, k, n = shape
    x, w = rand((m, k), dtype, low=-1, high=1), rand((n, k), dtype, low=-0.2, high=0.2)
    return x, w, (rand((n,), dtype) if bias else None)


def close(actual, expected, dtype):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol * 4, atol=atol * 4)  # K=256 sums


def chosen(op, *args, **kwargs):
    return opcore.explain(op, *args, **kwargs).chosen


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", LINEAR_OPS)
def test_fused_linear_matches_the_reference(op, dtype):
    for bias in (True, False):
        args = inputs(BIG, dtype, bias)
        check_onednn_choice(opcore.explain(op, *args), dtype)
        close(opcore.run(op, *args), opcore.run(op, *args, backend="reference"), dtype)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_fused_gelu_approximations(approximate):
    args = inputs(BIG)
    expected = torch.nn.functional.gelu(torch.nn.functional.linear(*args), approximate=approximate)
    close(opcore.run("linear_gelu", *args, approximate=approximate), expected, "float32")


def test_fused_linear_takes_batched_and_non_contiguous_inputs():
    x, w, b = inputs(BIG)
    batched = x.reshape(4, 16, 256)
    assert chosen("linear_relu", batched, w, b) == "cpu/onednn"
    close(opcore.run("linear_relu", batched, w, b), torch.relu(torch.nn.functional.linear(batched, w, b)), "float32")
    xt, wt = x.t().contiguous().t(), w.t().contiguous().t()
    close(opcore.run("linear_relu", xt, wt, b), torch.relu(torch.nn.functional.linear(x, w, b)), "float32")


def test_numpy_inputs_run_fused_and_come_back_as_numpy():
    x, w, b = (t.numpy() for t in inputs(BIG))
    assert chosen("linear_silu", x, w, b) == "cpu/onednn"
    y = opcore.run("linear_silu", x, w, b)
    assert isinstance(y, numpy.ndarray) and y.dtype == numpy.float32
    numpy.testing.assert_allclose(y, opcore.run("linear_silu", x, w, b, backend="reference"), rtol=1e-4, atol=1e-4)


# --- the crossover ------------------------------------------------------------------------------


def test_small_problems_stay_on_aten_and_explain_says_why():
    explanation = opcore.explain("linear_relu", *inputs(SMALL))
    assert explanation.chosen == "cpu/aten"
    row = next(c for c in explanation.candidates if c.title == "cpu/onednn")
    assert row.status.value == "declined"
    assert row.reason.startswith(f"M*K*N = 32768 < {choice.MIN_WORK[DType.FLOAT32]} (float32)")
    assert "fixed ~20 us cost" in row.reason
    assert "cpu/onednn" in str(explanation) and "declined" in str(explanation)


def test_the_crossover_is_only_the_static_fallback_of_a_measurement():
    x, w, b = inputs(SMALL)
    row = next(c for c in opcore.explain("linear_relu", x, w, b).candidates if c.title == "cpu/onednn")
    assert isinstance(row.reason, Costly)  # a speed constant, not an inability
    result = opcore.tune("linear_relu", x, w, b, rounds=3)
    assert result.static == "cpu/aten"
    assert {"cpu/onednn", "cpu/aten"} <= {m.kernel for m in result.entry.measurements}
    explanation = opcore.explain("linear_relu", x, w, b)
    assert explanation.chosen == result.winner
    onednn = next(c for c in explanation.candidates if c.title == "cpu/onednn")
    assert onednn.status.value in ("chosen", "fallback") and onednn.measured is not None
    close(opcore.run("linear_relu", x, w, b), torch.relu(torch.nn.functional.linear(x, w, b)), "float32")


@pytest.mark.parametrize(
    ("shape", "bias", "reason"),
    [
        ((8, 0, 8), (8,), "in_features is 0"),
        ((8, 64, 64), (8, 64), "bias of shape (64,) only"),
        ((64, 256, 256), (), "bias of shape (256,) only"),
    ],
)
def test_checker_declines_what_onednn_cannot_take(shape, bias, reason):
    m, k, n = shape
    verdict = choice.linear_checker(
        TensorMeta((m, k), DType.FLOAT32), TensorMeta((n, k), DType.FLOAT32), TensorMeta(bias, DType.FLOAT32)
    )
    assert isinstance(verdict, str) and reason in verdict, verdict
    assert not isinstance(verdict, Costly)  # oneDNN cannot run it: no measurement overrides that
    x, w, b = rand((m, k)), rand((n, k)), rand(bias)
    torch.testing.assert_close(opcore.run("linear_relu", x, w, b), torch.relu(torch.nn.functional.linear(x, w, b)))


def test_checker_declines_one_dimensional_weights_and_other_dtypes():
    vector = choice.linear_checker(TensorMeta((4096, 64), DType.FLOAT32), TensorMeta((64,), DType.FLOAT32), None)
    assert "2-D weight" in vector
    double = choice.linear_checker(TensorMeta((64, 256), DType.FLOAT64), TensorMeta((256, 256), DType.FLOAT64), None)
    assert "float32, bfloat16 and float16, not float64" in double
    assert chosen("linear_relu", *inputs(BIG, "float64")) == "cpu/aten"  # no onednn kernel declared for float64


def test_float16_takes_onednn_from_two_rows_where_the_cpu_has_avx512_fp16():
    w = TensorMeta((256, 256), DType.FLOAT16)
    one, two = TensorMeta((1, 256), DType.FLOAT16), TensorMeta((2, 256), DType.FLOAT16)
    reason = onednn_reason("float16")
    if reason is None:  # AVX512-FP16 or AMX-FP16 here: one row is ATen's GEMV (measured), two are oneDNN's
        assert choice.linear_checker(two, w, None) is True
        single = choice.linear_checker(one, w, None)
        assert isinstance(single, Costly) and single.startswith("1 row (float16): at one row ATen's float16 GEMV")
        gated = choice.gated_mlp_checker(one, w, w, w)
        assert isinstance(gated, Costly) and gated == single
        assert chosen("linear_relu", *inputs((1, 256, 256), "float16")) == "cpu/aten"
    else:  # declined whatever the size, for the CPU's reason
        assert choice.linear_checker(two, w, None) == reason == choice.linear_checker(one, w, None)
        assert reason == system.FLOAT16_NO_FP16 or "keeps oneDNN below AVX512_CORE_FP16" in reason


def test_bfloat16_crossover_is_lower():
    assert choice.MIN_WORK[DType.BFLOAT16] < choice.MIN_WORK[DType.FLOAT32]
    # the bench's small shape: oneDNN wins in bfloat16 (ATen's bfloat16 linear is oneDNN too)
    x, w = TensorMeta((8, 64), DType.BFLOAT16), TensorMeta((64, 64), DType.BFLOAT16)
    tiny = choice.linear_checker(TensorMeta((1, 64), DType.BFLOAT16), w, None)
    reason = onednn_reason("bfloat16")
    if reason is None:
        assert choice.linear_checker(x, w, None) is True
        assert tiny.startswith("M*K*N = 4096 < 32768 (bfloat16)")
    else:  # no native bfloat16 here: declined whatever the size, for that reason
        assert choice.linear_checker(x, w, None) == reason and tiny == reason


# --- prepare: packed weights through resolve ---------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", LINEAR_OPS)
def test_resolve_with_constant_weights_packs_them(op, dtype):
    x, w, b = inputs(BIG, dtype)
    resolved = opcore.resolve(op, x, w, b, constants=("w", "b"))
    assert resolved.backend == "cpu" and resolved.kernel.title == onednn_or_aten(dtype)
    assert resolved.prepared and resolved.free == ("x",)  # ATen's addmm prepares its weight too
    for rows in (BIG[0], 1, 7, 200):  # packed for 64 rows; every batch size must still work
        other = rand((rows, BIG[1]), dtype, low=-1, high=1)
        close(resolved(other), opcore.run(op, other, w, b, backend="reference"), dtype)
    batched = rand((3, 5, BIG[1]), dtype, low=-1, high=1)
    close(resolved(batched), opcore.run(op, batched, w, b, backend="reference"), dtype)


def test_packed_weight_is_not_the_dense_one():
    from opcore_cpu.onednn import pack_linear_weight

    w = rand((256, 256))
    packed = pack_linear_weight(w, 64)
    assert packed.is_mkldnn and not w.is_mkldnn


def test_resolve_with_only_the_bias_constant_or_a_free_weight():
    x, w, b = inputs(BIG)
    free_weight = opcore.resolve("linear_relu", x, w, b, constants=("b",))
    assert free_weight.prepared and free_weight.free == ("x", "w")
    expected = torch.relu(torch.nn.functional.linear(x, w, b))
    close(free_weight(x, w), expected, "float32")
    nothing = opcore.resolve("linear_relu", x, w, b)
    close(nothing(x, w, b), expected, "float32")


def test_resolve_below_the_crossover_runs_aten_with_its_own_prepare():
    x, w, b = inputs(SMALL)
    resolved = opcore.resolve("linear_relu", x, w, b, constants=("w", "b"))
    assert resolved.kernel.label == "aten" and resolved.prepared  # the shared kernel's addmm prepare
    close(resolved(x), torch.relu(torch.nn.functional.linear(x, w, b)), "float32")


def test_numpy_resolve_returns_numpy():
    x, w, b = (t.numpy() for t in inputs(BIG))
    resolved = opcore.resolve("linear_relu", x, w, b, constants=("w", "b"))
    assert resolved.prepared
    y = resolved(x)
    assert isinstance(y, numpy.ndarray)
    numpy.testing.assert_allclose(y, opcore.run("linear_relu", x, w, b, backend="reference"), rtol=1e-4, atol=1e-4)


# --- gated_mlp ----------------------------------------------------------------------------------


def gated_inputs(dtype="float32", rows=32, hidden=256, intermediate=512):
    return (
        rand((rows, hidden), dtype, low=-1, high=1),
        rand((intermediate, hidden), dtype, low=-0.2, high=0.2),
        rand((intermediate, hidden), dtype, low=-0.2, high=0.2),
        rand((hidden, intermediate), dtype, low=-0.2, high=0.2),
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_gated_mlp_fused(dtype):
    args = gated_inputs(dtype)
    check_onednn_choice(opcore.explain("gated_mlp", *args), dtype)
    expected = opcore.run("gated_mlp", *args, backend="reference")
    tolerance = 1e-4 if dtype == "float32" else 5e-2
    torch.testing.assert_close(opcore.run("gated_mlp", *args), expected, rtol=tolerance, atol=tolerance)
    resolved = opcore.resolve("gated_mlp", *args, constants=("w_gate", "w_up", "w_down"))
    assert resolved.kernel.title == onednn_or_aten(dtype) and resolved.free == ("x",)
    for rows in (32, 1, 5):
        x = rand((rows, 256), dtype, low=-1, high=1)
        expected = opcore.run("gated_mlp", x, *args[1:], backend="reference")
        torch.testing.assert_close(resolved(x), expected, rtol=tolerance, atol=tolerance)


def test_gated_mlp_small_stays_on_aten():
    explanation = opcore.explain("gated_mlp", *gated_inputs(rows=1, hidden=16, intermediate=32))
    assert explanation.chosen == "cpu/aten"
    assert "M*hidden*intermediate = 512" in next(c.reason for c in explanation.candidates if c.label == "onednn")


def test_gated_mlp_with_some_weights_free():
    args = gated_inputs()
    resolved = opcore.resolve("gated_mlp", *args, constants=("w_gate", "w_down"))
    assert resolved.free == ("x", "w_up")
    expected = opcore.run("gated_mlp", *args, backend="reference")
    torch.testing.assert_close(resolved(args[0], args[2]), expected, rtol=1e-4, atol=1e-4)


# --- float32 packing for MKL (what Intel CPUs get) -----------------------------------------------


def test_float32_packing_follows_the_vendor():
    from opcore_cpu import onednn, system

    expected = "mkl" if system.cpu_vendor() == "GenuineIntel" and torch.backends.mkl.is_available() else "onednn"
    assert onednn.float32_packing() == expected


@pytest.mark.parametrize("op", [*LINEAR_OPS, "gated_mlp"])
def test_mkl_packed_float32_path(op, monkeypatch):
    from opcore_cpu import onednn

    monkeypatch.setattr(onednn, "float32_packing", lambda: "mkl")
    args = gated_inputs() if op == "gated_mlp" else inputs(BIG)
    names = ("w_gate", "w_up", "w_down") if op == "gated_mlp" else ("w", "b")
    resolved = opcore.resolve(op, *args, constants=names)
    assert resolved.prepared and resolved.kernel.label == "onednn"
    for rows in (args[0].shape[0], 1, 3, 4, 9, 200):
        x = rand((rows, args[0].shape[1]), low=-1, high=1)
        close(resolved(x), opcore.run(op, x, *args[1:], backend="reference"), "float32")
    vector = rand((args[0].shape[1],), low=-1, high=1)  # 1-D x: no resize warning (warnings are errors here)
    close(resolved(vector), opcore.run(op, vector, *args[1:], backend="reference"), "float32")


def _aten_gemms(call, x) -> list[str]:
    """The ATen GEMMs (dense weight) that ``call(x)`` ran, by torch's profiler."""
    from torch.profiler import profile

    with profile() as prof:
        call(x)
    return [e.name for e in prof.events() if e.name in ("aten::linear", "aten::addmm", "aten::mm", "aten::linear_out")]


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch build has no MKL")
def test_mkl_packed_weight_serves_every_row_count_from_four(monkeypatch):
    """The packed buffer runs for x of any row count >= MKL_PACKED_ROWS, not only the example's (torch's
    _mkl_linear falls back to ATen on the dense weight unless told x's rows); fewer rows run ATen."""
    from opcore_cpu import onednn

    monkeypatch.setattr(onednn, "float32_packing", lambda: "mkl")
    x, w, b = inputs(BIG)
    call = onednn.prepare_linear((x, w, b), frozenset({"w", "b"}))
    assert any(t.is_mkldnn for t in _held_tensors(call))  # the packed copy
    for rows in (onednn.MKL_PACKED_ROWS, 9, x.shape[0], 300):
        other = rand((rows, x.shape[1]), low=-1, high=1)
        assert not _aten_gemms(call, other), rows
        close(call(other), opcore.run("linear", other, w, b, backend="reference"), "float32")
    assert _aten_gemms(call, x[: onednn.MKL_PACKED_ROWS - 1])


@pytest.mark.parametrize("op", ["linear", "gated_mlp"])
def test_dense_policy_keeps_no_packed_copy_on_the_mkl_path_either(op, monkeypatch):
    from opcore_cpu import onednn

    monkeypatch.setattr(onednn, "float32_packing", lambda: "mkl")
    monkeypatch.setenv("OPCORE_CPU_WEIGHTS", "dense")
    args = gated_inputs() if op == "gated_mlp" else inputs(BIG)
    call = _prepared(op, args)
    assert not any(t.is_mkldnn for t in _held_tensors(call))
    close(call(args[0]), opcore.run(op, *args, backend="reference"), "float32")


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch build has no MKL")
def test_mkl_path_keeps_no_packed_copy_for_an_example_below_four_rows(monkeypatch):
    from opcore_cpu import onednn

    monkeypatch.setattr(onednn, "float32_packing", lambda: "mkl")
    x, w, b = inputs((onednn.MKL_PACKED_ROWS - 1, 256, 256))
    call = onednn.prepare_linear_silu((x, w, b), frozenset({"w", "b"}))
    assert not any(t.is_mkldnn for t in _held_tensors(call))
    close(call(x), opcore.run("linear_silu", x, w, b, backend="reference"), "float32")


# --- packed or not, measured per problem (opcore_cpu.weight_choice) ------------------------------


def _prepared(op, args):
    from opcore_cpu import onednn

    if op == "gated_mlp":
        return onednn.prepare_gated_mlp(args, frozenset({"w_gate", "w_up", "w_down"}))
    return getattr(onednn, f"prepare_{op}")(args, frozenset({"w", "b"}))


def _held_tensors(call):
    """The tensors a prepared call keeps, through its closures."""
    found, seen, todo = [], set(), [call]
    while todo:
        fn = todo.pop()
        if id(fn) in seen or not callable(fn):
            continue
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            value = cell.cell_contents
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif callable(value):
                todo.append(value)
    return found


@pytest.mark.parametrize("policy", ["packed", "dense", "measure"])
@pytest.mark.parametrize("op", [*LINEAR_OPS, "gated_mlp"])
def test_every_way_of_running_a_resolved_linear_is_right(op, policy, monkeypatch):
    from opcore_cpu import onednn

    monkeypatch.setenv("OPCORE_CPU_WEIGHTS", policy)
    monkeypatch.setattr(onednn, "float32_packing", lambda: "onednn")  # Intel machines take this path too
    args = gated_inputs() if op == "gated_mlp" else (*inputs(BIG), "tanh") if op == "linear_gelu" else inputs(BIG)
    call = _prepared(op, args)
    assert policy in (call.opcore_weights, "measure")
    assert call.opcore_weights in ("aten", "dense", "packed")
    packed = [t for t in _held_tensors(call) if t.is_mkldnn]
    assert len(packed) == (0 if call.opcore_weights != "packed" else 3 if op == "gated_mlp" else 1)
    for rows in (args[0].shape[0], 1, 7):
        x = rand((rows, args[0].shape[1]), "float32", low=-1, high=1)
        keywords = {"approximate": args[3]} if op == "linear_gelu" else {}
        expected = opcore.run(op, x, *args[1 : 4 if op == "gated_mlp" else 3], backend="reference", **keywords)
        torch.testing.assert_close(call(x), expected, rtol=1e-4, atol=1e-4)


def test_the_measured_way_is_kept_per_problem(monkeypatch):
    from opcore_cpu import onednn, weight_choice

    monkeypatch.delenv("OPCORE_CPU_WEIGHTS", raising=False)
    monkeypatch.setattr(onednn, "float32_packing", lambda: "onednn")
    weight_choice.forget()
    args = inputs(BIG)
    first = _prepared("linear", args)
    key = ("linear", "none", "", BIG[0], tuple(args[1].shape), True, torch.float32, torch.get_num_threads())
    assert weight_choice.chosen(key) == first.opcore_weights

    def measured_again(*_):
        raise AssertionError("measured twice")

    monkeypatch.setattr(weight_choice, "_measure", measured_again)
    assert _prepared("linear", inputs(BIG)).opcore_weights == first.opcore_weights
    weight_choice.forget()
    assert weight_choice.chosen(key) is None


def test_a_way_that_copies_nothing_wins_within_the_margin(monkeypatch):
    from opcore_cpu.weight_choice import Way

    from opcore_cpu import weight_choice

    class Call:
        def __init__(self, seconds):
            self.seconds = seconds

        def __call__(self, x):
            return x

    monkeypatch.setattr(weight_choice, "_time", lambda call, x: call.seconds)

    def ways(aten, dense, packed):
        return [Way("aten", False, lambda: Call(aten)), Way("dense", False, lambda: Call(dense)),
                Way("packed", True, lambda: Call(packed))]  # fmt: skip

    assert weight_choice._measure(ways(2.0, 1.04, 1.0), None)[0] == "dense"  # 4% slower, no copy
    assert weight_choice._measure(ways(2.0, 1.2, 1.0), None)[0] == "packed"  # 20%: the copy pays
    assert weight_choice._measure(ways(1.0, 1.0, 0.99), None)[0] == "aten"
    # the copy, not the order, decides: a copying way listed first still yields to one that copies nothing
    first = [Way("packed", True, lambda: Call(1.0)), Way("dense", False, lambda: Call(1.03))]
    assert weight_choice._measure(first, None)[0] == "dense"

    def refused():
        raise RuntimeError("this build cannot pack that")

    broken = [Way("aten", False, lambda: Call(2.0)), Way("packed", True, refused)]
    assert weight_choice._measure(broken, None)[0] == "aten"  # a way that fails is left out
    with pytest.raises(RuntimeError, match="cannot pack"):
        weight_choice._measure([Way("packed", True, refused)], None)


def test_an_unknown_weights_policy_is_a_clear_error(monkeypatch):
    from opcore.errors import ArgumentError
    from opcore_cpu import onednn

    monkeypatch.setenv("OPCORE_CPU_WEIGHTS", "sometimes")
    monkeypatch.setattr(onednn, "float32_packing", lambda: "onednn")
    with pytest.raises(ArgumentError, match="OPCORE_CPU_WEIGHTS.*one of measure, packed, dense"):
        _prepared("linear", inputs(BIG))


@pytest.mark.parametrize("vendor", ["onednn", "mkl"])
@pytest.mark.parametrize("op", ["linear", "gated_mlp"])
def test_a_plan_asking_for_no_weight_copies_gets_none(op, vendor, monkeypatch):
    """Within weight_copies(False) (a large decoder's prefill) and OPCORE_CPU_WEIGHTS unset, the
    prepared call runs on the weights as given, on either vendor's path; set, the variable wins."""
    from opcore.weight_copies import weight_copies
    from opcore_cpu import onednn, weight_choice

    monkeypatch.delenv("OPCORE_CPU_WEIGHTS", raising=False)
    monkeypatch.setattr(onednn, "float32_packing", lambda: vendor)
    monkeypatch.setattr(weight_choice, "_answers", {})
    args = gated_inputs() if op == "gated_mlp" else inputs(BIG)
    with weight_copies(False):
        assert weight_choice.policy() == "dense"
        call = _prepared(op, args)
    assert not any(t.is_mkldnn for t in _held_tensors(call))
    assert weight_choice.policy() == "measure"  # outside the block, as before
    close(call(args[0]), opcore.run(op, *args, backend="reference"), "float32")
    monkeypatch.setenv("OPCORE_CPU_WEIGHTS", "packed")
    with weight_copies(False):
        assert weight_choice.policy() == "packed"


def test_a_weight_updated_in_place_is_prepared_again_as_first_asked(monkeypatch):
    """A linear resolved while no weight copies were allowed, its weight then updated in place outside
    that block, prepares again without a copy: the setting it was first prepared under holds."""
    from opcore.weight_copies import weight_copies
    from opcore_cpu import onednn, weight_choice

    monkeypatch.delenv("OPCORE_CPU_WEIGHTS", raising=False)
    monkeypatch.setattr(onednn, "float32_packing", lambda: "onednn")
    said: list[str] = []
    real = weight_choice.policy

    def policy(environ=None):
        said.append(real(environ))
        return said[-1]

    monkeypatch.setattr(weight_choice, "policy", policy)
    x, w, b = inputs(BIG)
    assert isinstance(w, torch.Tensor)  # live torch constants: the resolved op watches their versions
    with weight_copies(False):
        linear = opcore.resolve("linear", x, w, b, constants=("w", "b"), backend="cpu")
    assert said and set(said) == {"dense"}, said
    said.clear()
    with torch.no_grad():
        w.mul_(0.5)
    got = linear(x)
    assert said == ["dense"], said  # prepared again, still without a copy
    close(got, opcore.run("linear", x, w, b, backend="reference"), "float32")
