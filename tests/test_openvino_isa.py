"""The openvino backend under oneDNN's ISA cap: OpenVINO's CPU plugin reads ONEDNN_MAX_CPU_ISA too and
crashes the process when it is below the CPU's AVX-512 (opcore_openvino.isa), so the backend reports
itself unavailable there instead of taking the host down."""

from __future__ import annotations

import dataclasses

import pytest
from opcore_openvino import isa, plugin

from opcore import extend, probes

AVX512 = frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"})
AVX2 = frozenset({"avx", "avx2", "fma"})


@pytest.fixture(autouse=True)
def _no_cap(monkeypatch):
    for name in isa.CAP_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("value", ["avx2", "AVX", "SSE41", " AVX2_VNNI "])
def test_a_cap_below_avx512_on_an_avx512_cpu_is_the_reason(value):
    reason = isa.isa_cap_reason({"ONEDNN_MAX_CPU_ISA": value}, AVX512)
    expected = value.strip().upper()
    assert reason is not None and reason.startswith(f"ONEDNN_MAX_CPU_ISA={expected} caps oneDNN below")
    assert reason.endswith("unset ONEDNN_MAX_CPU_ISA to use openvino")


@pytest.mark.parametrize(
    ("environ", "flags"),
    [
        ({}, AVX512),
        ({"ONEDNN_MAX_CPU_ISA": ""}, AVX512),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, AVX512),
        ({"ONEDNN_MAX_CPU_ISA": "avx10_1_512_amx"}, AVX512),
        ({"ONEDNN_MAX_CPU_ISA": "DEFAULT"}, AVX512),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, AVX2),  # an AVX2 CPU at its own level: measured to run
    ],
)
def test_no_reason_without_a_cap_below_the_cpu(environ, flags):
    assert isa.isa_cap_reason(environ, flags) is None


def test_the_newer_variable_wins():
    both = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "DNNL_MAX_CPU_ISA": "AVX2"}
    assert isa.isa_cap_reason(both, AVX512) is None
    older = isa.isa_cap_reason({"DNNL_MAX_CPU_ISA": "AVX2"}, AVX512)
    assert older is not None and older.startswith("DNNL_MAX_CPU_ISA=AVX2")


def test_is_available_reports_the_cap(monkeypatch):
    pytest.importorskip("openvino")
    assert plugin.is_available() is True
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    info = probes.cpu_info()
    every_flag = tuple((flag, True) for flag in probes.ISA_FLAGS)
    # the plugin reads cpu_info through opcore.extend, the plugin API
    monkeypatch.setattr(extend, "cpu_info", lambda: dataclasses.replace(info, isa=every_flag))
    reason = plugin.is_available()
    assert isinstance(reason, str) and reason.startswith("ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN"), reason
    monkeypatch.setattr(extend, "cpu_info", lambda: dataclasses.replace(info, isa=(("avx2", True), ("avx512f", False))))
    assert plugin.is_available() is True


def test_this_machine(monkeypatch):
    """The flags read from /proc/cpuinfo when none are given: the reason follows them."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    cpu = probes.cpu_info()
    if cpu.isa is None:
        pytest.skip(f"no ISA flags to read here: {cpu.reason}")
    has_avx512 = dict(cpu.isa)["avx512f"]
    assert (isa.isa_cap_reason() is not None) is has_avx512
