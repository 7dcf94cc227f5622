"""The opcore-cpu distribution: its entry point, what loading it costs (no torch import), its
availability and doctor lines (opcore_cpu.system), and what it registers (opcore_cpu.plugin).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from machine import onednn_reason
from opcore_cpu.dtypes import CPU_DTYPES, ONEDNN_DTYPES

import opcore
from opcore.types import DType, TensorMeta
from opcore_cpu import plugin, system

pytestmark = pytest.mark.filterwarnings("error")


def cpu_report() -> opcore.PluginReport:
    return next(r for r in opcore.backends() if r.name == "cpu")


def test_entry_point_names_the_backend():
    (entry,) = [e for e in importlib.metadata.entry_points(group="opcore.backends") if e.name == "cpu"]
    assert entry.value == "opcore_cpu.plugin" and entry.dist.name == "opcore-cpu"
    assert "opcore==0.1.0" in entry.dist.requires and any(r.startswith("torch") for r in entry.dist.requires)


def test_loads_with_the_published_priority():
    report = cpu_report()
    assert report.status is opcore.PluginStatus.LOADED, report.reason
    assert report.backend.priority == opcore.DEFAULT_PRIORITIES["cpu"] == 300
    assert report.distribution == "opcore-cpu" and report.contract_count == 2


def test_loading_the_plugin_does_not_import_torch():
    code = (
        "import sys, opcore\n"
        "assert any(r.name == 'cpu' and r.ok for r in opcore.backends())\n"
        "assert 'torch' not in sys.modules, 'loading opcore-cpu imported torch'\n"
        "opcore.explain('relu', __import__('numpy').ones(3))\n"
        "print('ok')\n"
    )
    # from the repository root, whose folder opcore_cpu/ must not shadow the package (see its pyproject)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_is_available_reasons(monkeypatch):
    assert system.is_available() is True
    monkeypatch.setattr(system, "_torch_version", lambda: "2.3.1+cpu")
    assert "torch 2.3.1+cpu is too old" in system.is_available()
    monkeypatch.setattr(system, "_torch_version", lambda: None)
    assert "no distribution metadata" in system.is_available()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert system.is_available() == "torch is not installed; pip install 'opcore[cpu]' installs it"


def test_unavailable_backend_registers_nothing(monkeypatch):
    monkeypatch.setattr(system, "_torch_version", lambda: "2.0.0")
    opcore.reload_plugins()
    report = cpu_report()
    assert report.status is opcore.PluginStatus.UNAVAILABLE and "too old" in report.reason
    assert opcore.explain("relu", __import__("numpy").ones(2)).backend not in ("cpu", None)


def test_describe_for_the_doctor():
    pytest.importorskip("torch")
    lines = system.describe()
    assert lines["torch"] == importlib.metadata.version("torch")
    assert lines["oneDNN"].split()[0].count(".") >= 1, lines["oneDNN"]  # "3.12.0"
    assert lines["ATen CPU capability"] in ("DEFAULT", "AVX2", "AVX512", "AVX512_BF16", "AMX", "SVE256", "ZVECTOR")
    flags = system.cpu_flags()
    for flag in ("avx2", "avx512f", "amx_bf16"):
        assert (flag in lines["ISA"]) is (flag in flags)
    assert int(lines["threads"]) >= 1


def test_describe_never_raises(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(system, "onednn_version", lambda: 1 / 0)
    assert system.describe()["oneDNN"].startswith("unknown (ZeroDivisionError")


def test_bfloat16_reason_follows_the_cpu_flags():
    pytest.importorskip("torch")
    flags = system.cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo flags to compare torch's bfloat16 test with")
    native = {"avx512bw", "avx512vl", "avx512dq"} <= flags or "amx_bf16" in flags
    assert system.native_bfloat16_flags(flags) is native
    cap = system.onednn_isa_cap()  # make test-avx2 caps oneDNN below AVX-512
    reason = system.onednn_bfloat16_reason()
    if not native:
        assert reason == system.BFLOAT16_NO_AVX512
    elif cap is not None and cap[1] in system.BELOW_AVX512:
        assert reason.startswith(f"{cap[0]}={cap[1]} keeps oneDNN below AVX-512"), reason
    else:
        assert reason is None


@pytest.mark.parametrize("variable", system.ISA_CAP_VARIABLES)
def test_an_isa_cap_below_avx512_declines_bfloat16(monkeypatch, variable):
    pytest.importorskip("torch")
    from opcore_cpu import choice

    for name in system.ISA_CAP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    uncapped = system.onednn_bfloat16_reason()  # this CPU's own answer
    x, w = TensorMeta((64, 256), DType.BFLOAT16), TensorMeta((256, 256), DType.BFLOAT16)
    monkeypatch.setenv(variable, "avx2")
    assert system.onednn_isa_cap() == (variable, "AVX2")
    assert f"oneDNN capped by {variable}=AVX2" in system.describe()["ISA"]
    capped = f"{variable}=AVX2 keeps oneDNN below AVX-512 (its bfloat16 kernels need AVX512BW/VL/DQ or AMX)"
    # without AVX-512 the CPU's reason comes first; with it, the cap's (whether or not oneDNN was capped
    # when torch loaded, as under make test-avx2, where torch says no and uncapped is the CPU's reason)
    reason = system.onednn_bfloat16_reason()
    if system.native_bfloat16_flags(system.cpu_flags()):
        assert reason.startswith(capped), reason
    else:
        assert reason == uncapped
    assert choice.linear_checker(x, w, None) == reason
    for value in ("AVX512_CORE", "avx10_1_512_amx", "DEFAULT"):  # caps at or above AVX-512 change nothing
        monkeypatch.setenv(variable, value)
        assert system.onednn_bfloat16_reason() == uncapped
    # the cap on a CPU that has AVX-512 (torch's answer replaced: this machine may not have it)
    monkeypatch.setattr(system, "_torch_bf16_supported", lambda: True)
    monkeypatch.setenv(variable, "AVX2_VNNI")
    assert system.onednn_bfloat16_reason().startswith(f"{variable}=AVX2_VNNI keeps oneDNN below AVX-512")
    monkeypatch.setenv(variable, "AVX512_CORE_BF16")
    assert system.onednn_bfloat16_reason() is None and choice.linear_checker(x, w, None) is True


@pytest.mark.parametrize("value", ["AVX2", "AVX512_CORE_BF16"])
def test_an_isa_cap_below_avx512_fp16_declines_float16(monkeypatch, value):
    pytest.importorskip("torch")
    from opcore_cpu import choice

    for name in system.ISA_CAP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    uncapped = system.onednn_float16_reason()  # this CPU's own answer
    x, w = TensorMeta((64, 256), DType.FLOAT16), TensorMeta((256, 256), DType.FLOAT16)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", value)
    capped = f"ONEDNN_MAX_CPU_ISA={value} keeps oneDNN below AVX512_CORE_FP16"
    reason = system.onednn_float16_reason()
    if system.native_float16_flags(system.cpu_flags()):
        assert reason.startswith(capped) and reason.endswith("unset ONEDNN_MAX_CPU_ISA to use them"), reason
    else:  # the CPU's reason comes first where it has neither AVX512-FP16 nor AMX-FP16
        assert reason == uncapped == system.FLOAT16_NO_FP16
    assert choice.linear_checker(x, w, None) == reason
    for at_or_above in ("AVX512_CORE_FP16", "avx512_core_amx", "DEFAULT"):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", at_or_above)
        assert system.onednn_float16_reason() == uncapped
    # the cap on a CPU that has AVX512-FP16 (torch's answer and the flags replaced: this one may not)
    monkeypatch.setattr(system, "_torch_fp16_supported", lambda: True)
    monkeypatch.setattr(system, "cpu_flags", lambda: frozenset({"avx512f", "avx512_fp16"}))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", value)
    assert system.onednn_float16_reason().startswith(capped)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_FP16")
    assert system.onednn_float16_reason() is None and choice.linear_checker(x, w, None) is True
    # and on one without it: torch says no, the CPU's reason whatever the cap
    monkeypatch.setattr(system, "_torch_fp16_supported", lambda: False)
    monkeypatch.setattr(system, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert system.onednn_float16_reason() == system.FLOAT16_NO_FP16


def test_the_newer_isa_variable_wins(monkeypatch):
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    assert system.onednn_isa_cap() == ("ONEDNN_MAX_CPU_ISA", "SSE41")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "")
    assert system.onednn_isa_cap() == ("DNNL_MAX_CPU_ISA", "AVX512_CORE")


def test_isa_summary_flags_missing_features():
    assert system.isa_summary(frozenset({"avx2", "avx512f", "avx512_bf16"})).startswith(
        "avx2 avx512f avx512_bf16 (no AMX"
    )
    avx2 = system.isa_summary(frozenset({"avx2"}))  # no AVX-512 BF16 to name as the fallback
    assert "no native bfloat16" in avx2 and "AVX-512" not in avx2, avx2
    assert system.isa_summary(frozenset({"avx512_bf16", "amx_bf16"})) == "avx512_bf16 amx_bf16"
    assert system.isa_summary(frozenset()) == "unknown (no /proc/cpuinfo)"


def test_registered_kernels_and_labels():
    from opcore.runtime import runtime

    registry = runtime().ensure_loaded().registry
    mine = [k for kernels in registry.kernels.values() for k in kernels if k.backend == "cpu"]
    aten = {k.op: k for k in mine if k.label == "aten"}
    assert set(aten) == set(CPU_DTYPES)
    for op, dtypes in CPU_DTYPES.items():
        assert aten[op].dtypes == dtypes and aten[op].source == f"opcore.torchkit.torch_kernels:{op}"
    onednn = {k.op: k for k in mine if k.label == "onednn"}
    linears = {"linear", "linear_relu", "linear_silu", "linear_gelu"}
    assert set(onednn) == linears | {"gated_mlp", "conv2d_relu", "conv2d_silu"}
    for kernel in onednn.values():
        assert kernel.dtypes == ONEDNN_DTYPES and kernel.priority == plugin.ONEDNN_PRIORITY
        assert kernel.prepare is not None and kernel.checker is not None


def test_onednn_dtypes_are_the_ones_onednn_takes():
    torch = pytest.importorskip("torch")
    fused = torch.ops.mkldnn._linear_pointwise
    for dtype in DType:
        if not dtype.is_floating:
            continue
        x, w = torch.ones(4, 8, dtype=dtype.to_torch()), torch.ones(3, 8, dtype=dtype.to_torch())
        if dtype in ONEDNN_DTYPES and onednn_reason(dtype) is None:
            assert fused(x, w, None, "relu", [], "").dtype == x.dtype
        elif dtype in ONEDNN_DTYPES:  # declared, and declined by the checker here: oneDNN refuses it
            message = None if dtype is DType.FLOAT16 else "could not create a primitive descriptor"
            with pytest.raises(RuntimeError, match=message):
                fused(x, w, None, "relu", [], "")
        else:
            with pytest.raises(RuntimeError):  # float64: not a oneDNN type
                fused(x, w, None, "relu", [], "")


def test_contracts_step_aside_for_existing_ones():
    from opcore_cpu.contracts import CONTRACTS

    class Recorder:
        def __init__(self, known):
            self.contracts = known
            self.added = []

        def add_contract(self, contract):
            self.added.append(contract.name)

    fresh = Recorder({})
    plugin.opcore_register_contracts(fresh)
    assert fresh.added == [c.name for c in CONTRACTS]
    taken = Recorder({"conv2d_relu": object()})
    plugin.opcore_register_contracts(taken)
    assert taken.added == ["conv2d_silu"]


def test_describe_without_torch_reads_the_headers_and_imports_nothing():
    code = (
        "import sys; from opcore_cpu import system; lines = system.describe(); "
        "print(lines['oneDNN']); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == f"{system.onednn_version()} (from torch's headers)"  # the same version torch reports
    assert out[1] == "False"
