"""Every conformance-kit sample, pinned to the cuda backend, on fake CUDA tensors (no GPU).

torch's FakeTensorMode makes tensors "on cuda" that carry shape, strides, dtype and device but no
data, and runs torch's functions on them as shape computations. Each kit sample the cuda backend
claims is materialised that way (same shapes, strides and dtypes as the kit's) and run with
``backend="cuda"``: the real registrations, checkers and kernel functions run (cuBLASLt reshaping,
the CUDA wrappers, torch's SDPA dispatch), and the result must have the device, dtype and shape the
contract's meta function gives. Values are not checked (there are none): tests/test_cuda_gpu.py
runs the kit itself on a GPU.

Some kernels look at data on CUDA by design (the index checks of embedding, embedding_wq, gather
and index; an integer division's zero check; gather_mm's grouping of its rows, read on the host):
on fake tensors they raise torch's data-dependent error, or (a value read into Python) the CPU
build's refusal to copy from cuda, which is what is asserted for them.
"""

from __future__ import annotations

from typing import Any

import pytest

import opcore
from opcore.opset import BUILTIN_CONTRACTS
from opcore.testing import entries, samples_of
from opcore.testing.records import TensorInput
from opcore.types import DeviceType, TensorMeta, array_kind_of
from opcore_cuda import system

torch = pytest.importorskip("torch")
import opcore_cuda.cublaslt  # noqa: E402
import opcore_cuda.kernels  # noqa: E402, F401
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode  # noqa: E402

import opcore.torchkit.aten  # noqa: E402  (imported outside the fake mode)

LOOKS_AT_DATA = {"embedding", "embedding_wq", "gather", "index", "gather_mm"}  # every call checks the indices
FAKE_COPY_LIMIT = "PyTorch is not linked with support for cuda devices"
BUILTIN = {contract.name for contract in BUILTIN_CONTRACTS}


@pytest.fixture(autouse=True)
def cuda_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system, "is_available", lambda: True)
    opcore.reload_plugins()


def fake(value: Any, mode: FakeTensorMode) -> Any:
    if isinstance(value, TensorInput):
        real = value.to_torch("cpu")
        with mode:
            return torch.empty_strided(tuple(real.shape), real.stride(), dtype=real.dtype, device="cuda")
    if isinstance(value, list):
        return [fake(v, mode) for v in value]
    return value


def meta_of(value: Any) -> Any:
    if array_kind_of(value) is not None:
        return TensorMeta.of(value)
    if isinstance(value, list):
        return [meta_of(v) for v in value]
    return value


def fake_tensors(args: tuple, kwargs: dict) -> list[Any]:
    found = []
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, list) else (value,):
            if isinstance(item, torch.Tensor):
                found.append(item)
    return found


def integer_division_with_rounding(op: str, args: tuple, kwargs: dict) -> bool:
    if op != "div" or kwargs.get("rounding_mode", args[2] if len(args) > 2 else None) is None:
        return False
    return not torch.result_type(args[0], args[1]).is_floating_point


@pytest.mark.parametrize("op_entry", entries(), ids=lambda e: e.op)
def test_kit_samples_on_fake_cuda(op_entry):
    registry = opcore.runtime.runtime().ensure_loaded().registry
    if op_entry.op not in registry.contracts:
        pytest.skip(f"{op_entry.op} has no contract in this installation")
    cuda_kernels = [k for k in registry.kernels_of(op_entry.op) if k.backend == "cuda"]
    if not cuda_kernels:
        assert op_entry.op not in BUILTIN, f"built-in op {op_entry.op} has no cuda kernel"
        pytest.skip(f"{op_entry.op} is not covered by the cuda backend (a plugin's own op)")
    assert all(k.device_type is DeviceType.CUDA for k in cuda_kernels)
    schema = registry.contract(op_entry.op).schema
    creates_on_device = not schema.tensor_positions and "device" in schema.names
    mode = FakeTensorMode()
    ran = declined = data_dependent = copy_limited = 0
    for sample in samples_of(op_entry):
        args = tuple(fake(a, mode) for a in sample.args)
        kwargs = {name: fake(v, mode) for name, v in sample.kwargs.items()}
        if creates_on_device:  # no tensor to carry the device: the attribute does, as the kit sets it
            kwargs.setdefault("device", "cuda")
        where = f"{op_entry.op}[{sample.id}]"
        explanation = opcore.explain(op_entry.op, *args, backend="cuda", **kwargs)
        if explanation.chosen is None or explanation.chosen == "decomposition":
            declined += 1  # a dtype CUDA has no kernel for (integer GEMMs, ...): the kit counts it declined
            continue
        assert explanation.chosen.startswith("cuda/"), where
        expected = opcore.infer_meta(
            op_entry.op, *(meta_of(a) for a in args), **{k: meta_of(v) for k, v in kwargs.items()}
        )
        with mode:
            try:
                result = opcore.run(op_entry.op, *args, backend="cuda", **kwargs)
            except DataDependentOutputException as error:
                assert op_entry.op in LOOKS_AT_DATA or integer_division_with_rounding(op_entry.op, args, kwargs), (
                    f"{where}: {type(error).__name__}: {error}"
                )
                data_dependent += 1
                continue
            except RuntimeError as error:
                if FAKE_COPY_LIMIT in str(error) and op_entry.op in LOOKS_AT_DATA:
                    data_dependent += 1  # its indices read into Python: a copy from cuda
                    continue
                # fake CUDA tensors cannot be copied into a new layout by a CPU build of torch
                # (.contiguous() of a strided one): a limit of this test, not of the kernel
                if FAKE_COPY_LIMIT not in str(error) or all(a.is_contiguous() for a in fake_tensors(args, kwargs)):
                    raise
                copy_limited += 1
                continue
        results = result if isinstance(result, tuple) else (result,)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for got, want in zip(results, expected, strict=True):
            assert isinstance(got, torch.Tensor) and got.device.type == "cuda", where
            meta = TensorMeta.of(got)
            assert (meta.shape, meta.dtype) == (want.shape, want.dtype), (
                f"{where}: {meta.describe()} != {want.describe()}"
            )
        ran += 1
    assert ran or data_dependent, f"no sample of {op_entry.op} ran on cuda ({declined} declined)"
    assert copy_limited <= ran, f"{op_entry.op}: {copy_limited} samples hit the fake-tensor copy limit, {ran} ran"
