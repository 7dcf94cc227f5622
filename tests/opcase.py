"""Shared helpers for the op tests: call an op through its contract and the reference kernel,
make inputs, compare with PyTorch, and check error messages.

``call`` runs an op through the dispatcher pinned to the reference backend, and checks the result.
The error cases are the conformance kit's (``opcore.testing``), checked here on the reference and
against torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy
import pytest

import opcore
from opcore.contracts import OpContract
from opcore.errors import OpcoreError
from opcore.opset import BUILTIN_CONTRACTS
from opcore.reference import plugin
from opcore.registry import Registrar, Registry
from opcore.testing import ErrorInput, TensorInput, entry, error_inputs_of
from opcore.types import DType, TensorMeta, is_tensor

CONTRACTS: dict[str, OpContract] = {contract.name: contract for contract in BUILTIN_CONTRACTS}

# rtol, atol of the reference (float64 inside) against torch's kernels, per result dtype
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (2e-3, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-10, 1e-10),
}


def reference_registry() -> Registry:
    """A registry holding the built-in contracts and the reference kernels, registered through
    the plugin's hook exactly as plugin discovery does (so registration is validated too).
    """
    registry = Registry(BUILTIN_CONTRACTS)
    registrar = Registrar(plugin.opcore_backend(), registry)
    plugin.opcore_register_kernels(registrar)
    registry.commit(registrar)
    return registry


REGISTRY = reference_registry()


def _is_torch(value: Any) -> bool:
    return is_tensor(value) and not isinstance(value, numpy.ndarray)


def _meta_of(value: Any) -> Any:
    if is_tensor(value):
        return TensorMeta.of(value)
    if isinstance(value, tuple) and value and all(v is None or is_tensor(v) for v in value):
        return tuple(None if v is None else TensorMeta.of(v) for v in value)  # Tensor[] and Tensor?[]
    return value


def _to_numpy(value: Any) -> Any:
    """Torch tensors as numpy arrays; bfloat16 travels as float32, as the dispatcher sends it."""
    if _is_torch(value):
        import torch

        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    if isinstance(value, tuple):
        return tuple(_to_numpy(v) for v in value)
    return value


def _arrays(values: tuple[Any, ...]) -> list[numpy.ndarray]:
    found = []
    for value in values:
        if isinstance(value, numpy.ndarray):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend(_arrays(value))
    return found


def call(op_name: str, *args: Any, **kwargs: Any) -> Any:
    """Run ``op_name`` through the dispatcher, pinned to the reference backend; check that the
    result has the meta function's shape and dtype and that no input was written into.
    Returns numpy for numpy inputs, torch (in the contract's dtype) if the first tensor is torch.
    """
    contract = CONTRACTS[op_name]
    inputs = [_to_numpy(value) for value in (*args, *kwargs.values())]
    before = [array.tobytes() for array in _arrays(tuple(inputs))]
    result = opcore.run(op_name, *args, backend="reference", **kwargs)
    if any(array.tobytes() != old for array, old in zip(_arrays(tuple(inputs)), before)):
        raise AssertionError(f"{op_name}: the reference kernel wrote into its inputs")
    bound = contract.schema.bind(args, kwargs)
    expected = contract.meta(*(_meta_of(value) for value in bound))
    if isinstance(expected, tuple):  # a list result: one meta per piece
        if not isinstance(result, tuple) or len(result) != len(expected):
            raise AssertionError(f"{op_name}: expected {len(expected)} results, got {type(result).__name__}")
        pairs = list(zip(result, expected))
    else:
        pairs = [(result, expected)]
    for piece, meta in pairs:
        if _is_torch(piece):
            got = TensorMeta.of(piece)
            if got.shape != meta.shape or got.dtype is not meta.dtype:
                raise AssertionError(f"{op_name}: got {got.describe()}, the meta function said {meta.describe()}")
        else:
            check_result(op_name, piece, meta)
    return result


def check_result(op_name: str, result: Any, expected: TensorMeta) -> None:
    """The kernel's result has the meta function's shape and dtype (float32 standing in for bf16)."""
    if not isinstance(result, numpy.ndarray):
        raise AssertionError(f"{op_name}: the reference kernel returned {type(result).__name__}, not an ndarray")
    wanted = DType.FLOAT32 if expected.dtype is DType.BFLOAT16 else expected.dtype
    if tuple(result.shape) != expected.shape or DType.from_numpy(result.dtype) is not wanted:
        raise AssertionError(
            f"{op_name}: the kernel returned {result.dtype}{list(result.shape)}, "
            f"the meta function said {expected.describe()}"
        )


# --- inputs -------------------------------------------------------------------------------------

_GENERATOR = numpy.random.default_rng(20240601)


def reseed(seed: int = 20240601) -> None:
    """Restart the input generator, so that a test sees the same data whatever ran before it."""
    global _GENERATOR  # noqa: PLW0603 - one generator shared by every helper of this module
    _GENERATOR = numpy.random.default_rng(seed)


def rand(shape: tuple[int, ...], dtype: str = "float32", *, low: float = -3.0, high: float = 3.0, layout: str = ""):
    """A torch tensor of random values; layout "transposed" or "strided" makes it non-contiguous."""
    import torch

    full = list(shape)
    if layout == "transposed" and len(full) >= 2:
        full[-1], full[-2] = full[-2], full[-1]
    elif layout == "strided" and full:
        full[-1] *= 2
    data: numpy.ndarray
    if dtype == "bool":
        data = _GENERATOR.random(full) < 0.5
    elif dtype.startswith(("int", "uint")):
        data = _GENERATOR.integers(int(low), int(high), size=full, endpoint=True).astype(dtype)
    else:
        data = _GENERATOR.uniform(low, high, size=full)
    tensor = torch.from_numpy(numpy.asarray(data)).to(getattr(torch, dtype))
    if layout == "transposed" and len(full) >= 2:
        tensor = tensor.transpose(-1, -2)
    elif layout == "strided" and full:
        tensor = tensor[..., ::2]
    return tensor


def as_input(value: Any) -> Any:
    """What the reference gets for a torch input: numpy (sharing memory), but bf16 stays torch."""
    import torch

    if _is_torch(value):
        return value if value.dtype == torch.bfloat16 else value.numpy()
    if isinstance(value, (list, tuple)) and value and all(_is_torch(v) for v in value):
        return [as_input(v) for v in value]
    return value


def assert_close(actual: Any, expected: Any, *, exact: bool = False) -> None:
    """Same dtype and shape as torch's result, values within the dtype's tolerance (ints exact)."""
    import torch

    if isinstance(actual, numpy.ndarray):
        actual = torch.from_numpy(actual.copy())
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype}, torch gives {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)}, torch gives {tuple(expected.shape)}"
    name = str(expected.dtype).removeprefix("torch.")
    rtol, atol = (0.0, 0.0) if exact or name not in TOLERANCES else TOLERANCES[name]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


def compare(op_name: str, torch_fn: Callable[..., Any], *args: Any, exact: bool = False, **kwargs: Any) -> Any:
    """Run the op on the reference and ``torch_fn`` on the same (torch) inputs; compare the results."""
    expected = torch_fn(*args, **kwargs)
    actual = call(op_name, *(as_input(a) for a in args), **{k: as_input(v) for k, v in kwargs.items()})
    assert_close(actual, expected, exact=exact)
    return actual


def expect_error(
    error_type: type[OpcoreError], arg: str | None, op_name: str, *args: Any, **kwargs: Any
) -> OpcoreError:
    """The call raises ``error_type`` whose message names the op and the argument (arg None: an error
    about no single argument, as an ErrorInput's arg None means).
    """
    with pytest.raises(error_type) as caught:
        call(op_name, *args, **kwargs)
    message = str(caught.value)
    assert message.startswith(f"{op_name}(): "), message
    if arg is not None:
        assert f"argument '{arg}'" in message, message
        assert caught.value.arg == arg
    return caught.value


def z(*shape: int, dtype: str = "float32") -> numpy.ndarray:
    """A numpy array of zeros."""
    return numpy.zeros(shape, dtype)


# --- error cases: the conformance kit's error inputs (opcore.testing), checked on the reference ---


def kit_errors(*ops: str) -> list[tuple[str, ErrorInput]]:
    """(op, error input) for every error input the kit has for these ops."""
    return [(op, case) for op in ops for case in error_inputs_of(entry(op))]


def error_id(item: Any) -> str:
    return f"{item[0]}-{item[1].id}" if isinstance(item, tuple) else str(item)


def _numpy_of(value: Any) -> Any:
    if isinstance(value, TensorInput):
        return value.to_numpy()
    if isinstance(value, list):
        return [_numpy_of(v) for v in value]
    return value


def _torch_of(value: Any) -> Any:
    if isinstance(value, TensorInput):
        return value.to_torch()
    if isinstance(value, list):
        return [_torch_of(v) for v in value]
    return value


def check_error_case(op_name: str, case: ErrorInput, torch_fn: Callable[..., Any] | None = None) -> None:
    """The case raises its error on the reference (naming the op and the argument, matching the
    kit's pattern), and torch's ``torch_fn`` rejects it too where the kit says torch does.
    """
    error = expect_error(
        case.error, case.arg, op_name, *map(_numpy_of, case.args), **{k: _numpy_of(v) for k, v in case.kwargs.items()}
    )
    assert re.search(case.match, str(error)), f"{error} does not match {case.match!r}"
    if case.torch_rejects and torch_fn is not None:
        torch_errors = (
            RuntimeError,
            ValueError,
            TypeError,
            IndexError,
            NotImplementedError,
            AssertionError,
            OverflowError,
        )
        with pytest.raises(torch_errors):
            torch_fn(*map(_torch_of, case.args), **{k: _torch_of(v) for k, v in case.kwargs.items()})


def call_bound(op_name: str, bound: tuple[Any, ...]) -> Any:
    """``call`` with every argument given in schema order (keyword-only ones passed by keyword)."""
    schema = CONTRACTS[op_name].schema
    keywords = {a.name: v for a, v in zip(schema.arguments, bound) if a.kwarg_only}
    return call(op_name, *bound[: schema.n_positional], **keywords)
