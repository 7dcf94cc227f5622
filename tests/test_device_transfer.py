"""numpy inputs pinned to a device backend (``backend="cuda"``): moved to its device and back.

The dispatcher keys kernels by the inputs' device type, so numpy inputs only ever rank CPU
kernels; a call *pinned* to a backend without CPU kernels moves them to that backend's device and
brings the result back as numpy (selection.transfer_target, plans.kernel_converters,
torchkit.arrays.to_device / to_host). Tested with in-process plugins on torch's "meta" device (real
tensors without data) and on devices this machine lacks.
"""

from __future__ import annotations

import types

import numpy
import pytest

import opcore
from opcore import BackendSpec, DeviceType
from opcore.errors import Unsupported
from opcore.kernel_walk import CandidateStatus

torch = pytest.importorskip("torch", reason="device transfers move numpy arrays into torch tensors")
from opcore.torchkit.arrays import to_device, to_host  # noqa: E402  (needs torch)

pytestmark = pytest.mark.usefixtures("only_reference")

X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)
W = numpy.arange(6, dtype=numpy.float32).reshape(3, 2)


def device_plugin(name: str, device: DeviceType, kernels: dict, prepares: dict | None = None):
    """An in-process backend whose torch kernels serve ``device`` only."""

    def opcore_backend() -> BackendSpec:
        return BackendSpec(name=name, version="0", priority=500, device_types=(device,))

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        for op, fn in kernels.items():
            registrar.add_kernel(
                op, fn, dtypes=["float32"], array_kind="torch", prepare=(prepares or {}).get(op), label="test"
            )

    hooks = {f.__name__: opcore.hookimpl(f) for f in (opcore_backend, opcore_register_kernels)}
    return types.SimpleNamespace(__name__=name, **hooks)


def recording_relu(seen: list):
    """Records where its input is; returns a host tensor of the right values shape (meta has no data)."""

    def relu(x):
        seen.append((x.device.type, tuple(x.shape)))
        return torch.full(tuple(x.shape), 7.0)

    return relu


# --- the conversion functions ------------------------------------------------------------------------


def test_to_device_moves_numpy_and_passes_other_values() -> None:
    move = to_device("meta")
    moved = move(X)
    assert isinstance(moved, torch.Tensor) and moved.device.type == "meta" and moved.shape == (2, 2)
    assert move(2.5) == 2.5 and move(None) is None
    assert move(X[::-1]).shape == (2, 2)  # negative strides are copied first, as for CPU kernels


def test_to_device_turns_an_unreachable_device_into_unsupported() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here: moving to it succeeds")
    with pytest.raises(Unsupported, match=r"cannot move the inputs to cuda: Torch not compiled with CUDA"):
        to_device("cuda")(X)
    with pytest.raises(Unsupported, match=r"cannot move the inputs to xpu"):
        to_device("xpu")(X)


def test_to_host_gives_numpy_for_tensors_and_tuples() -> None:
    out = to_host((torch.tensor([1.5, -2.0], dtype=torch.bfloat16), torch.arange(3), "label"))
    assert isinstance(out[0], numpy.ndarray) and out[0].dtype == numpy.float32 and out[0].tolist() == [1.5, -2.0]
    assert out[1].tolist() == [0, 1, 2] and out[2] == "label"


# --- dispatch --------------------------------------------------------------------------------------


def test_pinned_numpy_inputs_run_on_the_backends_device_and_come_back_as_numpy() -> None:
    seen: list = []
    opcore.register_plugin(device_plugin("metadev", DeviceType.META, {"relu": recording_relu(seen)}))
    for _ in range(2):  # the second call takes the cached path: it must move the inputs too
        y = opcore.run("relu", X, backend="metadev")
        assert isinstance(y, numpy.ndarray) and y.dtype == numpy.float32 and y.tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert seen == [("meta", (2, 2)), ("meta", (2, 2))]
    y = opcore.run("relu", x=X, backend="metadev")  # keywords take the bound path
    assert seen[-1] == ("meta", (2, 2)) and isinstance(y, numpy.ndarray)


def test_numpy_inputs_never_reach_a_device_backend_unless_pinned() -> None:
    seen: list = []
    opcore.register_plugin(device_plugin("metadev", DeviceType.META, {"relu": recording_relu(seen)}))
    numpy.testing.assert_array_equal(opcore.run("relu", X), numpy.maximum(X, 0))
    explanation = opcore.explain("relu", X)
    assert explanation.backend == "reference"
    row = next(c for c in explanation.candidates if c.backend == "metadev")
    assert row.status is CandidateStatus.NO_KERNEL and "on meta" in row.reason
    with opcore.prefer("metadev"):  # an order is not a pin: the inputs stay where they are
        assert opcore.explain("relu", X).backend == "reference"
    assert seen == []


def test_torch_tensors_are_never_moved_for_the_caller() -> None:
    opcore.register_plugin(device_plugin("metadev", DeviceType.META, {"relu": recording_relu([])}))
    with pytest.raises(opcore.NoKernelError, match="no kernel accepts float32 inputs on cpu"):
        opcore.run("relu", torch.from_numpy(X), backend="metadev")
    with pytest.raises(opcore.NoKernelError):  # numpy and torch together: the torch tensor decides
        opcore.run("add", X, torch.from_numpy(X), backend="metadev")


def test_explain_shows_the_pinned_device_backend_chosen_for_numpy() -> None:
    opcore.register_plugin(device_plugin("metadev", DeviceType.META, {"relu": recording_relu([])}))
    explanation = opcore.explain("relu", X, backend="metadev")
    assert explanation.chosen == "metadev/test" and explanation.pin == "metadev"


def test_a_device_that_cannot_be_reached_is_a_no_kernel_error_naming_why() -> None:
    opcore.register_plugin(device_plugin("npudev", DeviceType.NPU, {"relu": recording_relu([])}))
    with pytest.raises(opcore.NoKernelError, match=r"handed over at run time: cannot move the inputs to npu"):
        opcore.run("relu", X, backend="npudev")


def test_resolve_moves_constants_once_and_free_inputs_per_call() -> None:
    prepared_with: list = []
    seen: list = []

    def linear(x, w, b):
        return torch.full((x.shape[0], w.shape[0]), 1.0)

    def prepare(args, constants):
        x, w, _ = args
        prepared_with.append((x.device.type, w.device.type, sorted(constants)))

        def call(x):
            seen.append(x.device.type)
            return torch.full((x.shape[0], w.shape[0]), 2.0)

        return call

    opcore.register_plugin(device_plugin("metadev", DeviceType.META, {"linear": linear}, {"linear": prepare}))
    layer = opcore.resolve("linear", X, W, constants=("w",), backend="metadev")
    assert layer.prepared and prepared_with == [("meta", "meta", ["w"])]
    y = layer(X[:1])
    assert isinstance(y, numpy.ndarray) and y.tolist() == [[2.0, 2.0, 2.0]]
    assert seen == ["meta"]
