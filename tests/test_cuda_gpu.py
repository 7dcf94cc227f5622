"""On a GPU only: the conformance kit against the cuda backend, and what only a GPU can show
(cuBLASLt's tanh GELU, numpy inputs moved to the GPU and back, inputs on cuda:N staying there,
CUDA's missing integer checks made up for, the benchmark).

Every test here is marked ``gpu`` and skipped, with the backend's own reason, where no usable
CUDA GPU is present (``pytest -m gpu`` selects them; ``-m "not gpu"`` leaves them out).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy
import pytest

import opcore
from opcore.opset import BUILTIN_CONTRACTS
from opcore_cuda import system

ROOT = Path(__file__).resolve().parent.parent


@cache
def no_gpu_reason() -> str | None:
    """Why these tests cannot run here (the backend's availability reason), or None."""
    available = system.is_available()
    if available is not True:
        return str(available)
    import torch

    return None if torch.cuda.is_available() else "torch.cuda.is_available() is False"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(no_gpu_reason() is not None, reason=f"needs a usable CUDA GPU: {no_gpu_reason()}"),
]


def test_the_conformance_kit_passes_on_cuda():
    # TF32 off: the kit holds float32 to float32 accuracy (torch's default lets cuDNN convolutions
    # run in TF32, ~1e-3 relative); docs/backends/cuda.md
    code = (
        "import sys, torch, pytest\n"
        "torch.backends.cuda.matmul.allow_tf32 = False\n"
        "torch.backends.cudnn.allow_tf32 = False\n"
        "sys.exit(pytest.main(['-p', 'opcore.testing.plugin', '--pyargs', 'opcore.testing',\n"
        "                      '--opcore-backend', 'cuda', '-q', '-p', 'no:cacheprovider']))\n"
    )
    env = {**os.environ, "NVIDIA_TF32_OVERRIDE": "0"}
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env
    )
    tail = done.stdout[-6000:]
    print(tail)  # the coverage line, for the report
    assert done.returncode == 0, tail + done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("cuda ")]
    covered = re.search(r"ops (\d+)/\d+ covered", line)
    assert covered and int(covered.group(1)) >= len(BUILTIN_CONTRACTS), line
    assert line.count(" 0 failed") == 2, line  # samples and error inputs


def test_linear_relu_and_tanh_gelu_epilogues_on_cuda():
    import torch
    import torch.nn.functional as F

    from opcore_cuda import cublaslt

    for dtype, tolerance in ((torch.float32, 1e-5), (torch.float16, 1e-2), (torch.bfloat16, 5e-2)):
        x = torch.randn(64, 256, device="cuda", dtype=dtype)
        w = torch.randn(128, 256, device="cuda", dtype=dtype) / 16
        b = torch.randn(128, device="cuda", dtype=dtype)
        eager = F.linear(x, w, b)  # the same GEMM settings (TF32 off for matmuls: torch's default)
        torch.testing.assert_close(cublaslt.linear_relu(x, w, b), torch.relu(eager), rtol=tolerance, atol=tolerance)
        torch.testing.assert_close(
            cublaslt.linear_gelu(x, w, b, "tanh"), F.gelu(eager, approximate="tanh"), rtol=tolerance, atol=tolerance
        )
        batched = cublaslt.linear_relu(x.view(4, 16, 256), w, b)
        assert batched.shape == (4, 16, 128) and batched.device == x.device


def test_weight_only_int8_and_int4_resolve_on_cuda_match_the_reference():
    # torch's CUDA int8pack / int4pack (bfloat16, K a multiple of 1024) and the dequantized route
    import torch

    from opcore.quantize import quantize_weight
    from opcore.torchkit.quantized import packing_of

    for bits, group, dtype, expected_form in (
        (8, -1, torch.bfloat16, "int8pack"),
        (8, -1, torch.float32, "int8pack"),
        (4, 128, torch.bfloat16, "int4pack"),
        (4, 128, torch.float32, "dequantized"),
    ):
        qw = quantize_weight(torch.randn(256, 1024) / 8, bits=bits, group_size=group, symmetric=False)
        assert packing_of(dtype, "cuda", 256, 1024, bits, group) == expected_form
        on_gpu = type(qw)(*(t.cuda() if t is not None else None for t in qw.tensors()), bits, group)
        x = torch.randn(3, 1024, dtype=dtype)
        want = torch.from_numpy(opcore.run("linear_wq", x.float().numpy(), *qw.tensors(), None, **qw.attrs,
                                           backend="reference"))  # fmt: skip
        got = on_gpu.resolve(x.cuda(), backend="cuda")(x.cuda())
        assert got.device.type == "cuda" and got.dtype == dtype
        torch.testing.assert_close(got.float().cpu(), want, rtol=5e-2, atol=0.2)


def test_epilogue_gelu_on_cuda_is_the_tanh_approximation():
    import torch
    import torch.nn.functional as F

    x = torch.linspace(-4, 4, 2 * 64, device="cuda", dtype=torch.float64).view(2, 64)
    w = torch.eye(64, device="cuda", dtype=torch.float64)
    b = torch.zeros(64, device="cuda", dtype=torch.float64)
    out = torch._addmm_activation(b, x, w.t(), use_gelu=True)
    torch.testing.assert_close(out, F.gelu(x, approximate="tanh"))
    assert (out - F.gelu(x)).abs().max() > 1e-5  # not the exact gelu: hence the checker


def test_an_empty_reduction_still_applies_the_activation():
    # torch's CUDA addmm returns the bias at once when in_features == 0, skipping the relu: the
    # cuBLASLt checker declines it and the shared prepare keeps it on the dense kernel
    import torch

    x, w = torch.ones(3, 0, device="cuda"), torch.ones(4, 0, device="cuda")
    b = torch.tensor([-1.0, 2.0, -3.0, 4.0], device="cuda")
    assert opcore.explain("linear_relu", x, w, b).chosen == "cuda/aten"
    assert opcore.run("linear_relu", x, w, b).tolist() == [[0.0, 2.0, 0.0, 4.0]] * 3
    layer = opcore.resolve("linear_relu", x, w, b, constants=("w", "b"))
    assert layer(x).tolist() == [[0.0, 2.0, 0.0, 4.0]] * 3


def test_numpy_inputs_pinned_to_cuda_run_there_and_come_back_as_numpy():
    rng = numpy.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((8, 32), (16, 32), (16,)))
    explanation = opcore.explain("linear_relu", x, w, b, backend="cuda")
    assert explanation.chosen == "cuda/cublaslt"
    y = opcore.run("linear_relu", x, w, b, backend="cuda")
    assert isinstance(y, numpy.ndarray) and y.dtype == numpy.float32
    numpy.testing.assert_allclose(y, opcore.run("linear_relu", x, w, b, backend="reference"), 1e-4, 1e-4)
    layer = opcore.resolve("linear_relu", x, w, b, constants=("w", "b"), backend="cuda")
    assert layer.prepared and layer.kernel.title == "cuda/cublaslt"
    numpy.testing.assert_allclose(layer(x[:3]), y[:3], 1e-5, 1e-5)
    assert opcore.explain("linear_relu", x, w, b).backend != "cuda"  # unpinned numpy: never the GPU


def test_inputs_on_cuda_n_stay_on_that_device():
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU: cuda:1 does not exist here")
    x = torch.randn(4, 8, device="cuda:1")
    y = opcore.run("linear_relu", x, torch.randn(3, 8, device="cuda:1"), torch.randn(3, device="cuda:1"))
    assert y.device == torch.device("cuda:1")
    with pytest.raises(opcore.DeviceError):
        opcore.run("add", x, torch.ones(4, 8, device="cuda:0"))


def test_checks_cuda_would_skip_still_raise_and_leave_cuda_usable():
    import torch

    with pytest.raises(opcore.ArgumentError, match="no zero divisor"):
        opcore.run(
            "div", torch.tensor([4, 5], device="cuda"), torch.tensor([2, 0], device="cuda"), rounding_mode="floor"
        )
    with pytest.raises(opcore.ArgumentError, match="out of range"):
        opcore.run("embedding", torch.tensor([0, 3], device="cuda"), torch.zeros(3, 4, device="cuda"))
    assert opcore.run("relu", torch.tensor([-1.0, 2.0], device="cuda")).tolist() == [0.0, 2.0]


def test_the_doctor_lists_the_devices():
    lines = system.describe()
    assert "sm_" in lines["device 0"] and "GiB" in lines["device 0"]
    assert lines["torch CUDA"][0].isdigit()


def test_the_benchmark_runs():
    done = subprocess.run(
        [sys.executable, "bench/cuda.py", "--rounds", "1", "--min-run-time", "0.05"],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "linear_relu" in done.stdout and "attention causal" in done.stdout, done.stdout
