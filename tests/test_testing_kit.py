"""The conformance kit itself (opcore.testing): an entry for every built-in op, samples that cover
what the issue asks for, error inputs that match the meta functions' checks one for one, and a
kit that catches wrong kernels, counts declines, and runs as a pytest plugin from any directory.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest

import opcore
from opcore.errors import OpcoreError
from opcore.opset import BUILTIN_CONTRACTS, BUILTIN_DTYPES, elementwise, linear, nn, normalization, shape
from opcore.testing import (
    ConformanceError,
    ErrorInput,
    OpEntry,
    SampleSet,
    Status,
    TensorInput,
    add_entry,
    builtin_entries,
    check_error,
    check_sample,
    entry,
    error_inputs_of,
    remove_entry,
    samples_of,
)
from opcore.testing.coverage import Coverage
from opcore.types import DType, TensorMeta

BUILTIN_OPS = sorted(c.name for c in BUILTIN_CONTRACTS)
ERROR_CASES = [(e.op, case) for e in builtin_entries() for case in error_inputs_of(e)]


def _meta(value):
    if isinstance(value, TensorInput):
        return TensorMeta(value.shape, value.dtype)
    if isinstance(value, list):
        return [_meta(v) for v in value]
    return value


def _infer(op, case):
    return opcore.infer_meta(op, *map(_meta, case.args), **{k: _meta(v) for k, v in case.kwargs.items()})


def _dispatch_dtypes(op):
    contract = next(c for c in BUILTIN_CONTRACTS if c.name == op)
    found = set()
    for sample in samples_of(entry(op)):
        bound = contract.schema.bind(
            tuple(map(_meta, sample.args)), {k: _meta(v) for k, v in sample.kwargs.items()}, metas=True
        )
        value = bound[contract.dtype_position]
        if contract.creates:  # the dtype attribute, or the op's default (the output's dtype)
            found.add(contract.meta(*bound).dtype if value is None else DType.parse(value))
            continue
        found.add((value[0] if isinstance(value, tuple) else value).dtype)
    return found


# --- entries and samples ------------------------------------------------------------------------


def test_every_builtin_op_has_an_entry():
    assert sorted(e.op for e in builtin_entries()) == BUILTIN_OPS
    assert all(e.reference == "reference" for e in builtin_entries())


@pytest.mark.parametrize("op", BUILTIN_OPS)
def test_every_sample_is_a_valid_call(op):
    for sample in samples_of(entry(op)):
        _infer(op, sample)  # the contract's meta function accepts it (raises otherwise)


@pytest.mark.parametrize("op", BUILTIN_OPS)
def test_samples_cover_every_dtype_the_contract_accepts(op):
    assert _dispatch_dtypes(op) >= set(BUILTIN_DTYPES[op])


POOLING = ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d")  # 3-D or 4-D input only
# ops whose contract needs every tensor to have at least one (two, three) dimensions
NO_SCALAR = {"bmm", "conv1d", "conv2d", "scaled_dot_product_attention", "cat", "layer_norm", "rms_norm", "gated_mlp",
             "linear_relu", "linear_silu", "linear_gelu", "matmul", "slice", "select",
             "split", "split_with_sizes", "chunk", "batch_norm", "group_norm", "linear_wq", "gather_mm",
             *POOLING}  # fmt: skip
NO_1D = {"bmm", "scaled_dot_product_attention", *POOLING}


CREATES = {c.name for c in BUILTIN_CONTRACTS if c.creates}


@pytest.mark.parametrize("op", sorted(CREATES))
def test_creation_samples_cover_scalar_empty_and_1d_results(op):
    shapes = [_infer(op, sample).shape for sample in samples_of(entry(op))]
    assert any(0 in shape for shape in shapes), "an empty result"
    assert op == "arange" or any(len(shape) == 0 for shape in shapes), "a 0-d result (arange's are 1-D)"
    assert any(len(shape) == 1 for shape in shapes), "a 1-D result"


@pytest.mark.parametrize("op", sorted(set(BUILTIN_OPS) - CREATES))
def test_samples_cover_scalars_empty_dims_1d_and_non_contiguous_inputs(op):
    tensors = [t for sample in samples_of(entry(op)) for t in sample.tensors()]
    assert any(0 in t.shape for t in tensors), "an empty dimension"
    assert op in NO_SCALAR or any(t.ndim == 0 for t in tensors), "a scalar (shape ())"
    assert op in NO_1D or any(t.ndim == 1 for t in tensors), "a 1-D input"
    assert {"transposed", "strided"} & {t.layout for t in tensors}, "a non-contiguous input"


ATTRIBUTES = {
    "add": lambda s: s.kwargs.get("alpha", 1) != 1,
    "sub": lambda s: s.kwargs.get("alpha", 1) != 1,
    "div": lambda s: s.kwargs.get("rounding_mode") in ("trunc", "floor"),
    "gelu": lambda s: s.kwargs.get("approximate") == "tanh",
    "linear_gelu": lambda s: s.kwargs.get("approximate") == "tanh",
    "conv2d": lambda s: len(s.args) == 7 and s.args[6] > 1 and s.args[5] not in (1, (1, 1)),
    "conv1d": lambda s: len(s.args) == 7 and s.args[6] > 1 and s.args[5] not in (1, (1,)) and s.args[4] == "same",
    "scaled_dot_product_attention": lambda s: "attn_mask" in s.kwargs,
    "softmax": lambda s: s.args[1] == 0,
    "layer_norm": lambda s: len(s.args) == 5,
    "rms_norm": lambda s: len(s.args) == 4,
    "embedding": lambda s: len(s.args) == 3,
    "max_pool2d": lambda s: len(s.args) == 6 and s.args[4] not in (1, (1, 1)) and s.args[5],
    "avg_pool2d": lambda s: len(s.args) >= 6 and not s.args[5] and s.args[4],
}


@pytest.mark.parametrize("op", sorted(ATTRIBUTES))
def test_samples_vary_the_attributes(op):
    assert any(ATTRIBUTES[op](s) for s in samples_of(entry(op)))


def test_attention_samples_have_masks_the_causal_flag_and_gqa():
    samples = samples_of(entry("scaled_dot_product_attention"))
    assert any(s.kwargs.get("is_causal") or (len(s.args) > 5 and s.args[5]) for s in samples)
    assert any(s.kwargs.get("enable_gqa") for s in samples)
    assert {m.dtype for s in samples if isinstance(m := s.kwargs.get("attn_mask"), TensorInput)} >= {
        DType.BOOL,
        DType.FLOAT32,
    }


# creation ops take no tensor: their values come from attributes (full's 1e300, arange's 2**40)
@pytest.mark.parametrize(
    "op", [op for op in BUILTIN_OPS if op not in ("transpose", "permute", "reshape", "cat", *CREATES)]
)
def test_floating_samples_include_large_magnitudes(op):
    largest = max(
        float(numpy.nanmax(numpy.abs(t.values()), initial=0.0))
        for s in samples_of(entry(op))
        for t in s.tensors()
        if t.dtype.is_floating and t.storage.size
    )
    assert largest >= 100.0 or op == "embedding", largest


# --- error inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "case"), ERROR_CASES, ids=lambda v: v.id if isinstance(v, ErrorInput) else v)
def test_error_inputs_are_what_the_meta_function_raises(op, case):
    if case.raised_by == "kernel":
        _infer(op, case)  # data-dependent: the meta function accepts it, the kernel must reject it
        return
    with pytest.raises(case.error) as caught:
        _infer(op, case)
    assert caught.value.arg == case.arg
    assert re.search(case.match, str(caught.value)), str(caught.value)


# helpers of opcore.meta that raise; result_type raises only when given no operand at all
_CHECKS = {"check_rank", "check_dtype", "check_floating", "check_same_dtype", "check_choice", "normalize_dim",
           "broadcast_shapes", "check_min_rank", "check_positive"}  # fmt: skip
_OPSET = (elementwise, linear, nn, normalization, shape)


def _check_sites() -> dict[tuple[str, int], str]:
    """Every raise, and every call of a raising helper outside a try block, in opset's functions."""
    sites: dict[tuple[str, int], str] = {}
    for module in _OPSET:
        path = inspect.getsourcefile(module)
        assert path is not None, module
        tree = ast.parse(Path(path).read_text())
        guarded = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.Try) for part in node.body
                   for sub in ast.walk(part)}  # fmt: skip
        for function in tree.body:
            if not isinstance(function, ast.FunctionDef) or function.name.endswith("_decomposition"):
                continue
            for node in ast.walk(function):
                called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CHECKS
                if (
                    id(node) not in guarded
                    and isinstance(node, (ast.Raise, ast.Call))
                    and (isinstance(node, ast.Raise) or called)
                ):
                    sites[(path, node.lineno)] = f"{Path(path).name}:{node.lineno} in {function.name}()"
    return sites


def test_every_check_in_a_meta_function_has_an_error_input():
    files = {inspect.getsourcefile(module) for module in _OPSET}
    hit = set()
    for op, case in ERROR_CASES:
        if case.raised_by != "meta":
            continue
        with pytest.raises(OpcoreError) as caught:
            _infer(op, case)
        frame, innermost = caught.value.__traceback__, None
        while frame is not None:  # the innermost opset frame is the check that fired
            if frame.tb_frame.f_code.co_filename in files:
                innermost = (frame.tb_frame.f_code.co_filename, frame.tb_lineno)
            frame = frame.tb_next
        hit.add(innermost)
    sites = _check_sites()
    assert len(sites) > 80
    missing = [where for key, where in sites.items() if key not in hit]
    assert not missing, "checks without an error input: " + ", ".join(missing)


# --- inputs -------------------------------------------------------------------------------------


def test_layouts_hold_the_same_values_in_numpy_and_torch():
    torch = pytest.importorskip("torch")
    values = numpy.arange(12.0).reshape(3, 4)
    for layout, strides in (("transposed", (1, 3)), ("strided", (8, 2)), ("expanded", (0, 1))):
        tensor = TensorInput.of(values if layout != "expanded" else numpy.tile(values[:1], (3, 1)), "float32",
                                layout=layout)  # fmt: skip
        array, twin = tensor.to_numpy(), tensor.to_torch()
        assert TensorMeta.of(array).strides == strides and tuple(twin.stride()) == strides
        numpy.testing.assert_array_equal(array, twin.numpy())
        assert not TensorMeta.of(array).is_contiguous
    bf16 = TensorInput.of(numpy.linspace(-3, 3, 17), "bfloat16").to_torch()
    assert torch.equal(bf16, torch.linspace(-3, 3, 17, dtype=torch.float64).to(torch.bfloat16))


def test_sample_sets_refuse_repeated_ids():
    samples = SampleSet("relu")
    samples.add("one", samples.tensor((2,)))
    with pytest.raises(ValueError, match="two samples are named 'one'"):
        samples.add("one", samples.tensor((2,)))


# --- the kit against deliberately wrong kernels -----------------------------------------------


def _plugin(name, kernels, priority=50):
    """An in-process plugin with numpy kernels {op: (fn, options)}."""

    class Plugin:
        @opcore.hookimpl
        def opcore_backend(self):
            return opcore.BackendSpec(name=name, version="0", priority=priority, device_types=(opcore.DeviceType.CPU,))

        @opcore.hookimpl
        def opcore_register_kernels(self, registrar):
            for op, (fn, options) in kernels.items():
                registrar.add_kernel(op, fn, **{"dtypes": ["float32", "float64"], **options})

    return Plugin()


def _relu(x):
    return numpy.maximum(x, 0).astype(x.dtype, copy=False)


WRONG_RELU = {
    "transposed": lambda x: _relu(x).T,
    "float64 result": lambda x: numpy.maximum(x, 0).astype("float64"),
    "a little off": lambda x: _relu(x) * 1.001,
    "writes into its input": lambda x: numpy.maximum(x, 0, out=x) if x.flags.writeable else _relu(x),
    "nan becomes 0": lambda x: numpy.nan_to_num(_relu(x), nan=0.0),
}


@pytest.mark.parametrize("bug", sorted(WRONG_RELU))
def test_a_wrong_kernel_is_caught(bug):
    opcore.register_plugin(_plugin("wrong", {"relu": (WRONG_RELU[bug], {})}))
    failures = []
    for sample in samples_of(entry("relu")):
        try:
            check_sample("wrong", entry("relu"), sample)
        except ConformanceError as error:
            failures.append(str(error))
    assert failures, f"a relu kernel that is {bug} passed the kit"
    assert all(message.startswith("wrong: relu[") for message in failures)


def test_the_transposing_kernel_fails_on_shape_and_on_values():
    opcore.register_plugin(_plugin("wrong", {"relu": (WRONG_RELU["transposed"], {})}))
    relu = entry("relu")
    by_id = {s.id: s for s in samples_of(relu)}
    with pytest.raises(ConformanceError, match=r"returned float32\[4, 3\], the contract says float32\[3, 4\]"):
        check_sample("wrong", relu, by_id["float32"])
    square = OpEntry("relu", lambda: [], reference="reference")
    sample = SampleSet("relu")
    sample.add("square", sample.tensor((3, 3)))
    with pytest.raises(ConformanceError, match="values differ from the reference"):
        check_sample("wrong", square, next(iter(sample)))


def test_a_declining_backend_is_counted_as_declined_not_passed():
    def two_d_only(x):
        return True if x.ndim == 2 else f"picky takes 2-D inputs, found {x.ndim}-D"

    opcore.register_plugin(_plugin("picky", {"relu": (_relu, {"checker": two_d_only, "dtypes": ["float32"]})}))
    outcomes = {s.id: check_sample("picky", entry("relu"), s) for s in samples_of(entry("relu"))}
    assert outcomes["float32"].status is Status.PASSED
    assert outcomes["shape-7"].status is Status.DECLINED and "picky takes 2-D inputs" in outcomes["shape-7"].reason
    assert outcomes["int32"].status is Status.DECLINED and "no relu kernel for int32" in outcomes["int32"].reason
    assert check_sample("picky", entry("gelu"), samples_of(entry("gelu"))[0]).status is Status.NOT_COVERED


def test_a_kernel_raising_the_wrong_error_is_caught():
    def div(x, other, rounding_mode):
        return numpy.floor_divide(x, other)  # numpy warns and gives 0 where torch (and opcore) refuse

    opcore.register_plugin(_plugin("sloppy", {"div": (div, {"dtypes": ["int64", "int8"]})}))
    by_zero = next(c for c in error_inputs_of(entry("div")) if c.id == "int-by-zero")
    with pytest.raises(ConformanceError, match="raised nothing|RuntimeWarning"):
        check_error("sloppy", entry("div"), by_zero)
    assert check_error("reference", entry("div"), by_zero).status is Status.PASSED


def test_error_inputs_raise_the_same_error_on_every_backend_even_without_a_kernel():
    opcore.register_plugin(_plugin("tiny", {"relu": (_relu, {})}))
    for case in error_inputs_of(entry("conv2d")):
        if case.raised_by == "meta":
            assert check_error("tiny", entry("conv2d"), case).status is Status.PASSED


def test_plugins_add_entries_for_their_own_ops():
    def double_meta(x):
        return TensorMeta(x.shape, x.dtype, x.device)

    contract = opcore.define_op("kitdemo.double(Tensor x) -> Tensor", meta=double_meta)

    class Plugin:
        @opcore.hookimpl
        def opcore_backend(self):
            return opcore.BackendSpec(name="kitdemo", version="0", priority=5, device_types=(opcore.DeviceType.CPU,))

        @opcore.hookimpl
        def opcore_register_contracts(self, registrar):
            registrar.add_contract(contract)

        @opcore.hookimpl
        def opcore_register_kernels(self, registrar):
            registrar.add_kernel("kitdemo.double", lambda x: x + x, dtypes=["float32"])

    opcore.register_plugin(Plugin())
    samples = SampleSet("kitdemo.double")
    samples.add("float32", samples.tensor((2, 3)))
    demo = OpEntry("kitdemo.double", lambda: samples, reference=lambda x: 2 * x)
    add_entry(demo)
    try:
        assert entry("kitdemo.double") is demo
        with pytest.raises(ValueError, match="already has an entry"):
            add_entry(OpEntry("kitdemo.double", lambda: ()))
        assert check_sample("kitdemo", demo, samples_of(demo)[0]).status is Status.PASSED
    finally:
        remove_entry("kitdemo.double")
    with pytest.raises(LookupError, match="no entry for op 'kitdemo.double'"):
        entry("kitdemo.double")


def test_coverage_lines_count_what_each_backend_did():
    tally = Coverage(total_ops=("relu", "gelu", "silu"))
    tally.add_backend("mine", covered=("relu",))
    tally.add_backend("gone", not_run="unavailable: no device")
    tally.record("mine", "sample", "relu", Status.PASSED)
    tally.record("mine", "sample", "relu", Status.DECLINED)
    tally.record("mine", "error", "gelu", Status.FAILED)
    lines = tally.lines()
    assert (
        lines[0] == "mine   ops 1/3 covered · samples 1 passed, 0 failed, 1 declined · error inputs 0 passed, 1 failed"
    )
    assert lines[1].strip() == "not covered: gelu, silu"
    assert lines[2].strip() == "declined samples in: relu (1)"
    assert lines[3] == "gone   not run: unavailable: no device"


# --- the pytest plugin, run as a user runs it -------------------------------------------------

FIXTURE_PLUGIN = """
import numpy, opcore

@opcore.hookimpl
def opcore_backend():
    return opcore.BackendSpec(name="{name}", version="1", priority=1, device_types=(opcore.DeviceType.CPU,),
                              is_available={available})

@opcore.hookimpl
def opcore_register_kernels(registrar):
    registrar.add_kernel("relu", relu, dtypes=["float32", "float64"], checker=checker)

def checker(x):
    return True if x.ndim != 1 else "kit fixture declines 1-D inputs"

def relu(x):
    return {body}
"""


@pytest.fixture
def kit_plugins(tmp_path):
    """Two installed-looking plugin distributions: 'transposer' (a wrong relu) and 'absent' (unavailable)."""
    plugins = {
        "transposer": ("None", "numpy.maximum(x, 0).astype(x.dtype).T"),
        "absent": ("lambda: 'no widget attached'", "x"),
    }
    points = []
    for name, (available, body) in plugins.items():
        module = f"opcore_kitfixture_{name}"
        (tmp_path / f"{module}.py").write_text(FIXTURE_PLUGIN.format(name=name, available=available, body=body))
        points.append(f"{name} = {module}")
    info = tmp_path / "opcore_kitfixture-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: opcore-kitfixture\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[opcore.backends]\n" + "\n".join(points) + "\n")
    return tmp_path


def _pytest(cwd, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPCORE_", "PYTEST_"))}
    env["PYTHONPATH"] = str(cwd)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_kit_catches_a_wrong_backend_and_prints_its_coverage(kit_plugins):
    run = _pytest(kit_plugins, "--pyargs", "opcore.testing", "--opcore-backend", "transposer",
                  "--opcore-backend", "absent", "-q", "-rfs")  # fmt: skip
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "FAILED" in out and "test_sample[transposer-relu-float32]" in out
    line = re.search(
        r"^transposer +ops 1/(\d+) covered · samples (\d+) passed, (\d+) failed, (\d+) declined", out, re.M
    )
    assert line, out
    total, passed, failed, declined = map(int, line.groups())
    assert total >= 28 and failed >= 8 and declined >= 2
    assert passed + failed + declined == len(samples_of(entry("relu")))  # every sample counted, none silently
    assert re.search(r"^absent +not run: unavailable: no widget attached", out, re.M), out
    assert "kit fixture declines 1-D inputs" in out  # a declined sample is a skip with its reason


def test_an_unknown_backend_is_a_usage_error(tmp_path):
    run = _pytest(tmp_path, "--pyargs", "opcore.testing", "--opcore-backend", "nosuch")
    assert run.returncode == 4, run.stdout + run.stderr
    assert "--opcore-backend nosuch: no installed plugin provides this backend" in run.stderr


def test_the_pytest_plugin_is_inert_in_other_sessions(tmp_path):
    (tmp_path / "test_other.py").write_text(
        textwrap.dedent(
            """
            import sys

            def test_nothing_was_loaded(request):
                assert request.config.pluginmanager.has_plugin("opcore.testing.plugin")
                runtime = sys.modules.get("opcore.runtime")
                assert runtime is None or runtime._RUNTIME is None or not runtime._RUNTIME.loaded
                assert not [m for m in sys.modules if m == "torch" or m.startswith(("opcore_", "onnx", "openvino"))]
            """
        )
    )
    run = _pytest(tmp_path, "-q", "test_other.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "opcore conformance kit" not in run.stdout


def test_error_input_ids_are_unique_per_op():
    for op_entry in builtin_entries():
        ids = [case.id for case in error_inputs_of(op_entry)]
        assert len(ids) == len(set(ids)), op_entry.op


def test_a_dtype_a_backend_leaves_out_is_declined_with_its_recorded_reason():
    # openvino leaves int64 out of its kernels (its CPU plugin narrows int64 to int32) and records
    # why in Kernel.declined: the kit's decline says so, not only "has no kernel"
    pytest.importorskip("openvino", reason="the reason is openvino's")
    if not any(r.name == "openvino" and r.ok for r in opcore.backends()):
        pytest.skip("the openvino plugin is not loaded")
    from opcore.testing.conformance import _placement

    outcome = _placement("openvino", "relu", opcore.DType.INT64)
    assert outcome.status is Status.DECLINED
    assert "no relu kernel for int64" in outcome.reason and "narrows int64 to int32" in outcome.reason
