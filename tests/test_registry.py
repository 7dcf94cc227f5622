"""Registration: every kernel is validated against its contract and remembers its source."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy
import pytest

import opcore
from opcore import BackendSpec, DeviceType, PluginError
from opcore.meta import unary_float
from opcore.opset import BUILTIN_CONTRACTS
from opcore.registry import Registrar, Registry, _arity_problem, _takes_positionals

SPEC = BackendSpec(name="mine", version="0", priority=10, device_types=(DeviceType.CPU,))


def relu(x):
    return numpy.maximum(x, 0)


@pytest.fixture
def registrar() -> Registrar:
    return Registrar(SPEC, Registry(BUILTIN_CONTRACTS))


def test_valid_kernel_gets_backend_and_source(registrar: Registrar) -> None:
    kernel = registrar.add_kernel("relu", relu, dtypes=["float32", "bf16"])
    assert kernel.backend == "mine"
    assert kernel.source == "test_registry:relu"
    assert kernel.device_type is DeviceType.CPU
    lazy = registrar.add_kernel("gelu", "my_module.kernels:gelu", dtypes="float32")
    assert lazy.source == "my_module.kernels:gelu"


@pytest.mark.parametrize(
    ("op", "fn", "options", "message"),
    [
        ("rleu", relu, {}, "kernel for unknown op 'rleu'"),
        ("relu", relu, {"dtypes": []}, "declares no dtypes"),
        ("relu", relu, {"dtypes": ["float7"]}, "expected one of bool"),
        ("relu", relu, {"device_type": "cuda"}, "device type 'cuda', which the backend does not declare"),
        ("relu", relu, {"array_kind": "jax"}, "'jax' is not a valid ArrayKind"),
        ("linear", relu, {}, "cannot take 3 positional arguments"),
        ("relu", 42, {}, "fn is not callable"),
        ("relu", relu, {"checker": lambda: True}, "checker .* cannot take 1 positional arguments"),
        ("relu", relu, {"prepare": lambda a: None}, r"must take \(args, constants\)"),
        ("relu", "not a reference", {}, "is not a 'module:qualname' reference"),
    ],
)
def test_invalid_kernels_are_refused(registrar: Registrar, op, fn, options, message) -> None:
    with pytest.raises(PluginError, match=message) as info:
        registrar.add_kernel(op, fn, **{"dtypes": ["float32"], **options})
    assert str(info.value).startswith("plugin 'mine': ")
    assert not registrar.staged_kernels


def test_duplicates_say_where_the_first_one_is(registrar: Registrar) -> None:
    registrar.add_kernel("relu", relu, dtypes=["float32", "float64"])
    with pytest.raises(PluginError, match=r"already registered at test_registry:relu"):
        registrar.add_kernel("relu", relu, dtypes=["float64"])
    registrar.add_kernel("relu", relu, dtypes=["float64"], label="fast")  # a labelled variant is fine


def test_contracts_must_be_new(registrar: Registrar) -> None:
    with pytest.raises(PluginError, match="op 'relu' is already registered at"):
        registrar.add_contract(opcore.define_op("relu(Tensor x) -> Tensor", meta=unary_float))
    registrar.add_contract(opcore.define_op("mine.relu(Tensor x) -> Tensor", meta=unary_float))
    assert registrar.add_kernel("mine.relu", relu, dtypes="float32").op == "mine.relu"


def test_ranking_by_priority_then_registration_order() -> None:
    registry = Registry(BUILTIN_CONTRACTS)
    low = BackendSpec(name="low", version="0", priority=1, device_types=(DeviceType.CPU,))
    high = BackendSpec(name="high", version="0", priority=5, device_types=(DeviceType.CPU,))
    for spec, adjustments in ((low, (0, 10)), (high, (0,))):
        registrar = Registrar(spec, registry)
        for i, adjust in enumerate(adjustments):
            registrar.add_kernel("relu", relu, dtypes="float32", priority=adjust, label=f"k{i}")
        registry.commit(registrar)
    ranked = registry.ranked("relu")[(DeviceType.CPU, opcore.DType.FLOAT32)]
    assert [k.title for k in ranked] == ["low/k1", "high/k0", "low/k0"]


def test_namespaces_make_contracts_and_kernels_on_first_use() -> None:
    registry = Registry(BUILTIN_CONTRACTS)
    registrar = Registrar(SPEC, registry)
    made: list[str] = []

    def contracts(name: str):
        made.append(name)
        return opcore.define_op(f"{name}(Tensor x) -> Tensor", meta=unary_float) if name.endswith("ok") else None

    def kernels(contract):
        return [opcore.Kernel(op=contract.name, fn=relu, dtypes=frozenset({opcore.DType.FLOAT32}))]

    registrar.add_op_namespace("vendor.", contracts)
    registrar.add_kernel_factory("vendor.", kernels)
    registry.commit(registrar)
    assert registry.contract("vendor.ok").name == "vendor.ok"
    assert [k.backend for k in registry.kernels_of("vendor.ok")] == ["mine"]
    with pytest.raises(opcore.UnknownOpError, match="unknown op 'vendor.nope'"):
        registry.contract("vendor.nope")
    registry.contract("vendor.ok")
    assert made == ["vendor.ok", "vendor.nope"]
    with pytest.raises(PluginError, match="ending in '.'"):
        registrar.add_op_namespace("vendor", contracts)


def test_define_op_checks_its_input() -> None:
    with pytest.raises(opcore.ArgumentError, match="has no tensor argument"):
        opcore.define_op("f(int n) -> Tensor", meta=unary_float)
    with pytest.raises(opcore.ArgumentError, match="argument 'dtype_arg' expected one of"):
        opcore.define_op("f(Tensor x) -> Tensor", meta=unary_float, dtype_arg="y")
    with pytest.raises(opcore.ArgumentError, match="argument 'meta' expected a function"):
        # a wrong meta on purpose: define_op must refuse it
        opcore.define_op("f(Tensor x) -> Tensor", meta=None)  # type: ignore[arg-type]


def _kernel_shapes() -> list[Callable[..., Any]]:
    def plain(x, w, b=None): ...
    def kwonly_required(x, *, k): ...
    def kwonly_default(x, *, k=1): ...
    def star(*args): ...
    def positional_only(x, y, /, z): ...
    def everything(x, y=1, *rest, **kw): ...
    def nothing(): ...

    class Holder:
        def method(self, x): ...

    @functools.wraps(plain)
    def wrapped(*args): ...

    class Star:  # callable instances: their class's __call__, self bound
        def __call__(self, *args): ...

    class Two:
        def __call__(self, x, y=None): ...

    class Static:
        @staticmethod
        def __call__(x): ...

    class Inherited(Two):
        pass

    class Wraps:
        @functools.wraps(plain)
        def __call__(self, *args): ...

    return [plain, kwonly_required, kwonly_default, star, positional_only, everything, nothing,
            Holder().method, wrapped, functools.partial(plain, 1), len, lambda x, y: 0,
            Star(), Two(), Static(), Inherited(), Wraps(), Two]  # fmt: skip


def test_callable_instances_are_read_from_their_code_too() -> None:
    class Checker:
        def __call__(self, *metas): ...

    assert _takes_positionals(Checker(), 3)  # inspect.signature not needed (the graph backends' checkers)


def test_arity_fast_path_agrees_with_inspect() -> None:
    # the code-object reading must never accept what inspect.signature(...).bind refuses, and the
    # verdict (and so the message) must be inspect's wherever the fast path does not answer
    for function in _kernel_shapes():
        for count in range(5):
            try:
                inspect.signature(function).bind(*range(count))
                binds = True
            except TypeError:
                binds = False
            except ValueError:  # no signature (some builtins): nothing to check
                binds = True
            assert not (_takes_positionals(function, count) and not binds), (function, count)
            assert (_arity_problem(function, count) == "") == binds, (function, count)
