"""A kernel's registered dtypes are what a call gets: every (backend, op, dtype) that the registry
(and so `opcore ops --matrix`, `ops --json`, the doctor's counts) offers is served for at least one
conformance-kit sample of that dtype; dtypes a backend declines on every call are left out of its
kernels, with the reason explain shows.
"""

from __future__ import annotations

import pytest

import opcore
from opcore.onemodel.plugin import DtypeChecker
from opcore.opset import BUILTIN_CONTRACTS, BUILTIN_DTYPES
from opcore.registry import Registrar, Registry
from opcore.runtime import runtime
from opcore.testing import entry, samples_of
from opcore.testing.conformance import _dispatch_dtype, _materialize, _Placement
from opcore.types import ArrayKind, DType

pytestmark = pytest.mark.filterwarnings("error")

CONTRACTS = {contract.name: contract for contract in BUILTIN_CONTRACTS}
GRAPH_RUNTIMES = ("onnxruntime", "openvino")


def _loaded(backend: str) -> None:
    report = runtime().ensure_loaded().loader.reports.get(backend)
    if report is None or not report.ok:
        pytest.skip(f"the {backend} backend is not loaded here")


@pytest.mark.parametrize("backend", ["reference", "cpu", *GRAPH_RUNTIMES])
def test_every_offered_dtype_is_served_for_some_kit_sample(backend: str) -> None:
    _loaded(backend)
    registry = runtime().registry
    placement = _Placement(ArrayKind.TORCH if backend == "cpu" else ArrayKind.NUMPY, "cpu")
    offered = 0
    dtype_reasons: dict[str, set[str]] = {}
    unserved: list[str] = []
    for op in sorted(CONTRACTS):
        mine = [k for k in registry.kernels_of(op) if k.backend == backend]
        dtypes = {d for k in mine for d in k.dtypes}
        # the reasons a kernel gives for a dtype alone (DtypeChecker's rules)
        dtype_reasons[op] = {r for k in mine if isinstance(k.checker, DtypeChecker) for r in k.checker.dtype_reasons()}
        # dtype -> why each sample of it was declined; None once one was served
        pending: dict[DType, list[str] | None] = {d: [] for d in dtypes}
        for sample in samples_of(entry(op)):
            dtype = _dispatch_dtype(entry(op), sample)
            if dtype not in pending or pending[dtype] is None:
                continue
            args, kwargs = _materialize(sample, placement)  # bfloat16 as torch tensors: numpy has none
            explanation = opcore.explain(op, *args, backend=backend, **kwargs)
            said = [c.reason for c in explanation.candidates if c.backend == backend]
            reason = said[0] if said else explanation.error or "declined"
            reasons = pending[dtype]
            if explanation.chosen is not None or reason not in dtype_reasons[op]:
                pending[dtype] = None  # served, or declined for what else the sample holds (values, attributes)
            elif reasons is not None:
                reasons.append(reason)
        for dtype, reasons in pending.items():
            if reasons is None:
                offered += 1
            elif reasons:  # the kit has samples of this dtype and the backend declined every one
                unserved.append(f"{op} {dtype.value} ({len(reasons)} samples): {reasons[0]}")
    assert offered > 0
    assert not unserved, f"{backend} offers dtypes it declines for every kit sample:\n" + "\n".join(unserved)


@pytest.mark.parametrize("backend", GRAPH_RUNTIMES)
def test_bfloat16_is_not_offered_by_numpy_kernels(backend: str) -> None:
    """numpy has no bfloat16: the graph runtimes' kernels leave it out, and explain says why."""
    _loaded(backend)
    torch = pytest.importorskip("torch")
    registry = runtime().registry
    for op, contract in CONTRACTS.items():
        for kernel in registry.kernels_of(op):
            if kernel.backend == backend and not contract.creates:
                assert DType.BFLOAT16 not in kernel.dtypes, (backend, op)
                if DType.BFLOAT16 in BUILTIN_DTYPES[op]:
                    assert DType.BFLOAT16 in dict(kernel.declined), (backend, op)
    x = torch.randn(2, 3, dtype=torch.bfloat16)
    assert "numpy arrays, which have no bfloat16" in str(opcore.explain("relu", x, backend=backend))


def test_declined_dtypes_are_validated_at_registration() -> None:
    spec = opcore.BackendSpec(name="declining", version="0", priority=1, device_types=(opcore.DeviceType.CPU,))
    registrar = Registrar(spec, Registry(BUILTIN_CONTRACTS))
    kernel = registrar.add_kernel("relu", abs, dtypes=["float32"], declined={"float16": "no half here"})
    assert kernel.declined == ((DType.FLOAT16, "no half here"),) and kernel.dtypes == {DType.FLOAT32}
    with pytest.raises(opcore.PluginError, match="also serves"):
        registrar.add_kernel("gelu", abs, dtypes=["float32"], declined={"float32": "contradiction"})
    with pytest.raises(opcore.PluginError, match="declined"):
        registrar.add_kernel("sigmoid", abs, dtypes=["float32"], declined={"float16": 3})  # type: ignore[arg-type]
