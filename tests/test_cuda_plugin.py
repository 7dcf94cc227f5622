"""The opcore-cuda distribution without a GPU: its entry point, its availability here (with the real
torch), what loading it costs (no torch import), and what it registers and how that ranks.

The registration is tested with the backend made available in-process (its own ``is_available``
replaced), so the real hooks register the real kernels. "CUDA tensors" come from torch's
FakeTensorMode: tensors with a device and a dtype but no data, which a CPU build of torch can make
for "cuda"; the dispatcher ranks, checks and runs its kernels on them (torch computes only shapes
and dtypes). Numerics on a GPU are tests/test_cuda_gpu.py's.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from opcore_cuda.dtypes import CUBLASLT_DTYPES, CUDA_DIFFERENCES, CUDA_DTYPES

import opcore
from opcore.kernel_walk import CandidateStatus
from opcore.runtime import runtime
from opcore.types import DeviceType, DType
from opcore_cuda import plugin, system

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.filterwarnings("error")


def cuda_report() -> opcore.PluginReport:
    return next(r for r in opcore.backends() if r.name == "cuda")


@pytest.fixture
def cuda_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real plugin, told CUDA is usable: its hooks register every kernel."""
    monkeypatch.setattr(system, "is_available", lambda: True)
    opcore.reload_plugins()
    assert cuda_report().status is opcore.PluginStatus.LOADED


@pytest.fixture
def fake_cuda():
    """A FakeTensorMode: torch tensors "on cuda" without data (and without a GPU)."""
    torch = pytest.importorskip("torch")
    import opcore_cuda.cublaslt
    import opcore_cuda.kernels  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode

    import opcore.torchkit.aten  # noqa: F401  (imported outside the mode: module-level tensors stay real)

    mode = FakeTensorMode()

    def make(*shape, dtype=torch.float16, device="cuda"):
        with mode:
            return torch.empty(*shape, dtype=dtype, device=device)

    make.mode = mode
    return make


def fake_devices() -> tuple[str, ...]:
    """The cuda devices fake tensors can claim here: a CPU build of torch fakes any index, while a
    CUDA runtime refuses an ordinal past its GPU count ("invalid device ordinal")."""
    torch = pytest.importorskip("torch")
    if torch.version.cuda is None:
        return ("cuda:0", "cuda:1")
    return tuple(f"cuda:{index}" for index in range(min(torch.cuda.device_count(), 2))) or ("cuda:0",)


# --- the distribution and its availability --------------------------------------------------------


def test_entry_point_names_the_backend():
    (entry,) = [e for e in importlib.metadata.entry_points(group="opcore.backends") if e.name == "cuda"]
    assert entry.value == "opcore_cuda.plugin" and entry.dist.name == "opcore-cuda"
    requires = entry.dist.requires
    assert "opcore==0.1.0" in requires and any(r.startswith("torch") for r in requires)


def test_unavailable_here_with_the_reason_and_nothing_registered():
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip(f"this torch is a CUDA build ({torch.version.cuda})")
    report = cuda_report()
    assert report.status is opcore.PluginStatus.UNAVAILABLE
    assert report.status_text == (
        f"unavailable: no CUDA build of torch (torch {torch.__version__}); "
        "install a CUDA build: https://pytorch.org/get-started/locally/"
    )
    assert report.backend.priority == opcore.DEFAULT_PRIORITIES["cuda"] == 400
    assert report.kernel_count == 0 and report.distribution == "opcore-cuda"
    registry = runtime().ensure_loaded().registry
    assert not [k for kernels in registry.kernels.values() for k in kernels if k.backend == "cuda"]
    with pytest.raises(opcore.PluginError, match=r"backend= names backend 'cuda', which is unavailable: no CUDA"):
        opcore.run("relu", numpy.ones(2, "float32"), backend="cuda")


@pytest.mark.parametrize("deep", [False, True])
def test_the_doctor_shows_its_status_with_the_reason(deep):
    done = subprocess.run(
        [sys.executable, "-m", "opcore.cli", "doctor", *(["--deep"] if deep else [])],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr
    report = cuda_report()  # loaded where a GPU is usable, else unavailable with the reason
    section = done.stdout[done.stdout.index("  cuda  ") :]
    expected = "loaded" if report.ok else f"unavailable: {report.reason}"
    assert section.startswith(f"  cuda  {expected}"), section[:300]
    if deep:  # live torch values
        assert "torch CUDA" in section and "TF32 cuDNN conv" in section and "SDPA backends" in section
    else:  # without importing torch: the driver facts, and where the rest is
        assert "NVIDIA driver" in section and "opcore doctor --deep" in section


def test_loading_the_plugin_does_not_import_torch():
    code = (
        "import sys, numpy, opcore\n"
        "assert any(r.name == 'cuda' for r in opcore.backends())\n"
        "assert 'torch' not in sys.modules, 'loading opcore-cuda imported torch'\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_numpy_runs_never_import_torch_even_with_cuda_available():
    # every other torch-using backend disabled (opcore-cpu's kernels take numpy through torch)
    code = (
        "import importlib.metadata, os, sys\n"
        "names = {e.name for e in importlib.metadata.entry_points(group='opcore.backends')} - {'reference', 'cuda'}\n"
        "os.environ['OPCORE_DISABLE'] = ','.join(sorted(names))\n"
        "from opcore_cuda import system\n"
        "system.is_available = lambda: True\n"
        "import numpy, opcore\n"
        "report = next(r for r in opcore.backends() if r.name == 'cuda')\n"
        "assert report.ok and report.kernel_count > 28, report\n"
        "x, w = numpy.ones((4, 8), 'float32'), numpy.ones((3, 8), 'float32')\n"
        "for _ in range(2):\n"
        "    assert opcore.run('linear_relu', x, w, numpy.zeros(3, 'float32')).shape == (4, 3)\n"
        "    opcore.run('softmax', x, -1)\n"
        "print(opcore.explain('linear_relu', x, w).chosen)\n"
        "assert 'torch' not in sys.modules, 'a numpy call imported torch'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "reference"


def test_bench_says_no_gpu_and_exits_zero():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is usable here: the benchmark would run")
    done = subprocess.run(
        [sys.executable, "bench/cuda.py"], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("bench/cuda.py: no GPU: "), done.stdout
    assert cuda_report().reason in done.stdout


# --- what it registers (made available in-process) --------------------------------------------------


def test_registered_kernels_labels_and_dtypes(cuda_available):
    registry = runtime().ensure_loaded().registry
    mine = [k for kernels in registry.kernels.values() for k in kernels if k.backend == "cuda"]
    assert {k.device_type for k in mine} == {DeviceType.CUDA}
    aten = {k.op: k for k in mine if k.label == "aten"}
    # conv2d_relu/silu: opcore-cpu's contracts are installed here
    expected = {**CUDA_DTYPES, **{op: CUDA_DIFFERENCES[op] for op in ("conv2d_relu", "conv2d_silu")}}
    assert set(aten) == set(expected)
    for op, dtypes in expected.items():
        wanted = plugin.CUDA_OVERRIDES.get(op, f"opcore.torchkit.torch_kernels:{op}")
        assert aten[op].dtypes == dtypes and aten[op].source == wanted, op
    for op in ("linear", "matmul", "bmm", "linear_relu", "conv2d"):
        assert not any(d.is_integer for d in aten[op].dtypes), f"{op}: CUDA has no integer kernel"
    lt = {k.op: k for k in mine if k.label == "cublaslt"}
    assert set(lt) == {"linear_relu", "linear_gelu"}
    for kernel in lt.values():
        assert kernel.dtypes == CUBLASLT_DTYPES and kernel.priority == plugin.CUBLASLT_PRIORITY
        assert kernel.checker is not None and kernel.prepare is not None
    assert not [k for k in mine if k.label == "aten-fallback" and not k.op.startswith("aten.")]  # every op has a kernel
    assert runtime().registry.contract("aten.addcmul")  # the shared "aten." namespace


def test_the_overrides_import_and_match_the_schemas(cuda_available):
    pytest.importorskip("torch")
    registry = runtime().ensure_loaded().registry
    for op in plugin.CUDA_OVERRIDES:
        (kernel,) = [k for k in registry.kernels[op] if k.backend == "cuda"]
        assert callable(kernel.function()) and kernel.function().__module__ == "opcore_cuda.kernels"
        names = registry.contract(op).schema.names
        assert kernel.function().__code__.co_varnames[: len(names)] == names


def test_cuda_kernels_rank_only_for_the_cuda_device_type(cuda_available):
    table = runtime().ensure_loaded().registry.ranked("linear_relu")
    on_cuda = table[(DeviceType.CUDA, DType.FLOAT16)]
    assert [k.title for k in on_cuda] == ["cuda/cublaslt", "cuda/aten"]
    for key, kernels in table.items():
        if key[0] is DeviceType.CPU:
            assert all(k.backend != "cuda" for k in kernels)


def test_numpy_and_cpu_tensors_never_rank_cuda(cuda_available):
    torch = pytest.importorskip("torch")
    x, w, b = numpy.ones((4, 8), "float32"), numpy.ones((3, 8), "float32"), numpy.zeros(3, "float32")
    for args in ((x, w, b), tuple(torch.from_numpy(a) for a in (x, w, b))):
        explanation = opcore.explain("linear_relu", *args)
        assert explanation.backend == "cpu"
        (row,) = [c for c in explanation.candidates if c.backend == "cuda"]
        assert row.status is CandidateStatus.NO_KERNEL and "no kernel for float32 on cpu" in row.reason
    with pytest.raises(opcore.NoKernelError, match="no kernel accepts float32 inputs on cpu"):
        opcore.run("relu", torch.from_numpy(x), backend="cuda")  # torch tensors are never moved for the caller


def test_cuda_tensors_rank_the_cublaslt_kernel_first(cuda_available, fake_cuda):
    x, w, b = fake_cuda(4, 8), fake_cuda(3, 8), fake_cuda(3)
    explanation = opcore.explain("linear_relu", x, w, b)
    assert explanation.chosen == "cuda/cublaslt"
    assert [(c.title, c.priority) for c in explanation.candidates[:2]] == [("cuda/cublaslt", 410), ("cuda/aten", 400)]
    cpu_row = next(c for c in explanation.candidates if c.backend == "cpu")
    assert "no kernel for float16 on cuda" in cpu_row.reason
    assert opcore.explain("linear_gelu", x, w, b).chosen == "cuda/aten"  # exact gelu: not the epilogue
    assert opcore.explain("linear_gelu", x, w, b, approximate="tanh").chosen == "cuda/cublaslt"
    assert opcore.explain("linear_relu", x, w).chosen == "cuda/aten"  # no bias


def test_kernels_run_on_the_inputs_cuda_device(cuda_available, fake_cuda):
    torch = pytest.importorskip("torch")
    for device in fake_devices():
        x, w, b = fake_cuda(2, 5, 8, device=device), fake_cuda(3, 8, device=device), fake_cuda(3, device=device)
        with fake_cuda.mode:
            y = opcore.run("linear_relu", x, w, b)
            q = fake_cuda(2, 4, 16, 8, dtype=torch.bfloat16, device=device)
            attention = opcore.run("scaled_dot_product_attention", q, q, q, is_causal=True)
            summed = opcore.run("aten.addcmul", x, x, x)
        assert y.shape == (2, 5, 3) and y.dtype == torch.float16 and y.device == x.device == torch.device(device)
        assert attention.shape == q.shape and attention.device == q.device
        assert summed.shape == x.shape and summed.device == x.device


def test_mixed_devices_are_a_device_error(cuda_available, fake_cuda):
    torch = pytest.importorskip("torch")
    x = fake_cuda(2, 2, dtype=torch.float32)
    with pytest.raises(opcore.DeviceError, match=r"add\(\): argument 'other' expected the device of 'x' \(cuda:0\)"):
        opcore.run("add", x, numpy.ones((2, 2), "float32"))


def test_two_cuda_devices_are_a_device_error(cuda_available, fake_cuda):
    torch = pytest.importorskip("torch")
    if len(fake_devices()) < 2:
        pytest.skip(f"{torch.cuda.device_count()} GPU(s) visible: the CUDA runtime refuses a fake cuda:1 here")
    x = fake_cuda(2, 2, dtype=torch.float32)
    with pytest.raises(opcore.DeviceError, match=r"found cuda:1"):
        opcore.run("add", x, fake_cuda(2, 2, dtype=torch.float32, device="cuda:1"))


def test_pinned_numpy_without_a_usable_gpu_says_why(cuda_available):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here: the call would run")
    x = numpy.ones((2, 3), "float32")
    explanation = opcore.explain("relu", x, backend="cuda")
    assert explanation.chosen == "cuda/aten"  # chosen for the GPU; moving the inputs there fails at run time
    with pytest.raises(opcore.NoKernelError, match=r"cannot move the inputs to cuda: Torch not compiled with CUDA"):
        opcore.run("relu", x, backend="cuda")
    numpy.testing.assert_array_equal(opcore.run("relu", x), x)  # unpinned: CPU, as always
