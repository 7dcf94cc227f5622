"""Compiled models for one-op graphs, and the generic kernel that finds (or compiles) the model for
a call's signature and runs it.

A kernel's signature is (op, and per argument: dtype and rank for arrays, the Python type for a
scalar operand, the value for an attribute). Dimensions are dynamic, so every batch size of the
same ranks reuses one compiled model. Infer requests are not thread-safe: each thread gets its
own request per compiled model. Inputs are wrapped as ``openvino.Tensor(..., shared_memory=True)``
(no copy); the output is copied out of the request, which the next call overwrites.

>>> relu = ov_kernel("relu", lambda g, x: ops.relu(x))
>>> relu(numpy.array([-1.0, 2.0], numpy.float32))
array([0., 2.], dtype=float32)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy
import openvino

from opcore.errors import OpcoreError, Unsupported
from opcore.opset import BUILTIN_CONTRACTS
from opcore.schema import BaseType
from opcore_openvino.cache import compiled_models
from opcore_openvino.graph import Graph, Scalar, ops

__all__ = ["ATTRIBUTE", "CONFIG", "OPERAND", "TENSOR", "TENSORS", "Compiled", "OvOp", "core", "ov_kernel"]

# The CPU plugin's default precision hint is bf16 on CPUs with AMX/AVX512-BF16: float32 models
# would silently lose precision (1e-2 at 32x4096x4096). float16 models run in float32 too.
CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
DEVICE = "CPU"

_ndarray = numpy.ndarray
_Tensor = openvino.Tensor
_CONTRACTS = {contract.name: contract for contract in BUILTIN_CONTRACTS}
_core: openvino.Core | None = None
_core_lock = threading.Lock()


def core() -> openvino.Core:
    """The process's openvino.Core (created once; compile_model is thread-safe)."""
    global _core  # noqa: PLW0603 - one Core per process
    if _core is None:
        with _core_lock:
            if _core is None:
                _core = openvino.Core()
    return _core


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


class Compiled:
    """One compiled model and a lazily created infer request per thread."""

    __slots__ = ("_keep", "_local", "_scalars", "compiled")

    def __init__(self, graph: Graph, output: Any) -> None:
        try:
            self.compiled = core().compile_model(graph.model(output), DEVICE, CONFIG)
        except Exception as error:
            raise Unsupported(f"openvino could not compile the {graph.name} model: {_first_line(error)}") from error
        self._keep = tuple(graph.keep)  # memory the shared constants read
        self._local = threading.local()
        self._scalars = list(graph.scalar_feeds)

    def request(self) -> openvino.InferRequest:
        """This thread's infer request."""
        local = self._local
        request = getattr(local, "request", None)
        if request is None:
            request = local.request = self.compiled.create_infer_request()
        return request

    def __call__(self, arrays: list[Any], scalars: list[Any] | None = None) -> Any:
        try:
            request = self._local.request
        except AttributeError:
            request = self.request()
        held = []  # copies made here: a shared Tensor does not keep its array alive
        try:
            for index, given in enumerate(arrays):
                try:
                    tensor = _Tensor(given, shared_memory=True)
                except (RuntimeError, ValueError):  # shared memory must be C-contiguous and writeable
                    copy = numpy.array(given, order="C")
                    held.append(copy)
                    tensor = _Tensor(copy, shared_memory=True)
                request.set_input_tensor(index, tensor)
            if scalars:
                for (index, dtype), value in zip(self._scalars, scalars):
                    request.set_input_tensor(index, _Tensor(numpy.asarray(value, dtype=dtype)))
            request.infer()
            return request.get_output_tensor(0).data.copy()
        except Exception as error:
            raise Unsupported(f"openvino failed: {_first_line(error)}") from error

    def single(self) -> Callable[[Any], Any]:
        """A function of the one input (prepared ops with one free tensor: the leanest call)."""
        local, request_of = self._local, self.request

        def call(x: Any) -> Any:
            try:
                request = local.request
            except AttributeError:
                request = request_of()
            try:
                try:
                    request.set_input_tensor(_Tensor(x, shared_memory=True))
                except (RuntimeError, ValueError):  # shared memory must be C-contiguous and writeable
                    x = numpy.array(x, order="C")
                    request.set_input_tensor(_Tensor(x, shared_memory=True))
                request.infer()
                return request.get_output_tensor().data.copy()
            except Exception as error:
                raise Unsupported(f"openvino failed: {_first_line(error)}") from error

        return call


# What each argument of a kernel is, from its schema type
TENSOR, TENSORS, OPERAND, ATTRIBUTE = "tensor", "tensors", "operand", "attribute"

Build = Callable[..., Any]


def _roles(op: str) -> tuple[str, ...]:
    roles = []
    for argument in _CONTRACTS[op].schema.arguments:
        kind = argument.type
        if kind.base is BaseType.TENSOR_OR_SCALAR:
            roles.append(OPERAND)
        elif kind.base is BaseType.TENSOR:
            roles.append(TENSORS if kind.is_list else TENSOR)
        else:
            roles.append(ATTRIBUTE)
    return tuple(roles)


class OvOp:
    """How one op becomes an OpenVINO model: ``build(graph, *arguments)`` returns the output node.

    ``build`` receives a node for each tensor (a tuple of nodes for a tensor list, None when
    absent), a Scalar for a Python number given as an operand, and attributes as they are.
    ``check(*args)``, when given, looks at the data before a run and raises an OpcoreError for
    what the runtime would get wrong. ``names`` and ``roles`` describe the arguments when they are
    not the contract's.
    """

    def __init__(
        self,
        op: str,
        build: Build,
        *,
        check: Callable[..., None] | None = None,
        names: tuple[str, ...] | None = None,
        roles: tuple[str, ...] | None = None,
    ) -> None:
        self.op = op
        self.build = build
        self.check = check
        self.names = names if names is not None else _CONTRACTS[op].schema.names
        self.roles = roles if roles is not None else _roles(op)

    def __repr__(self) -> str:
        return f"OvOp({self.op!r})"

    def kernel(self) -> Callable[..., Any]:
        """The kernel function, carrying ``prepare`` and ``spec`` (this object)."""
        cache = compiled_models()
        lookup, create, make = cache.get, cache.get_or_create, self._compiled
        if self.check is None and self.roles in _FAST:
            kernel = _FAST[self.roles](self.op, lookup, create, make)
        else:
            kernel = self._generic_kernel(lookup, create, make)
        kernel.__name__ = kernel.__qualname__ = self.op
        kernel.prepare = self.prepare  # type: ignore[attr-defined]
        kernel.spec = self  # type: ignore[attr-defined]
        return kernel

    def _generic_kernel(self, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
        op, roles, check = self.op, self.roles, self.check

        def kernel(*args: Any) -> Any:
            if check is not None:
                check(*args)
            key: list[Any] = [op]
            arrays: list[Any] = []
            scalars: list[Any] = []
            remember, feed = key.append, arrays.append
            for value, role in zip(args, roles):
                if type(value) is _ndarray:
                    remember(value.dtype)
                    remember(value.ndim)
                    feed(value)
                elif value is None:
                    remember(None)
                elif role is TENSORS:
                    remember(tuple((v.dtype, v.ndim) for v in value))
                    arrays.extend(value)
                elif role is OPERAND:
                    remember(type(value))
                    scalars.append(value)
                else:
                    remember(value)
            frozen = tuple(key)
            compiled = lookup(frozen)
            if compiled is None:
                compiled = create(frozen, lambda: make(args, frozenset(), prepared=False))
            return compiled(arrays, scalars)

        return kernel

    def _compiled(self, args: tuple[Any, ...], constants: frozenset[str], *, prepared: bool) -> Compiled:
        graph = Graph(self.op)
        values: list[Any] = []
        for name, value, role in zip(self.names, args, self.roles):
            baked = name in constants
            if isinstance(value, _ndarray):
                values.append(graph.weight(value) if baked else graph.input(value.dtype, value.ndim))
            elif role is TENSORS and value is not None:
                values.append(tuple(graph.weight(v) if baked else graph.input(v.dtype, v.ndim) for v in value))
            elif role is OPERAND and value is not None:
                values.append(Scalar(type(value), value if prepared else None))
            else:
                values.append(value)
        try:
            output = self.build(graph, *values)
            if output.get_type_name() in ("Parameter", "Constant"):
                output = ops.convert(output, output.get_output_element_type(0))  # a result must follow an op
        except OpcoreError:
            raise
        except Exception as error:
            raise Unsupported(f"could not express {self.op} in OpenVINO: {type(error).__name__}: {error}") from error
        return Compiled(graph, output)

    def prepare(self, args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
        """A model compiled with the constant tensors as Constants, taking the other tensors in schema order.

        Compiled for this call only (not cached): the weights belong to the caller's resolved op.
        """
        if not constants:  # nothing to bake in: share the cached model of this signature
            return self._through_cache(args)
        compiled = self._compiled(args, frozenset(constants), prepared=True)
        free_at = [
            i
            for i, (name, value, role) in enumerate(zip(self.names, args, self.roles))
            if name not in constants and value is not None and role in (TENSOR, TENSORS)
        ]
        check = self.check
        if check is None and all(self.roles[i] is TENSOR for i in free_at):
            if len(free_at) == 1 and not compiled._scalars:
                prepared = compiled.single()
            else:

                def prepared(*free: Any) -> Any:
                    return compiled(list(free))

            prepared.compiled = compiled  # type: ignore[attr-defined]
            return prepared
        template = list(args)

        def prepared_checked(*free: Any) -> Any:
            full = template.copy()
            arrays: list[Any] = []
            for position, value in zip(free_at, free):
                full[position] = value
                if isinstance(value, tuple):
                    arrays.extend(value)
                else:
                    arrays.append(value)
            if check is not None:
                check(*full)
            return compiled(arrays)

        prepared_checked.compiled = compiled  # type: ignore[attr-defined]
        return prepared_checked

    def _through_cache(self, args: tuple[Any, ...]) -> Callable[..., Any]:
        kernel = self.kernel()
        free_at = [
            i
            for i, (value, role) in enumerate(zip(args, self.roles))
            if value is not None and role in (TENSOR, TENSORS)
        ]
        template = list(args)

        def call(*free: Any) -> Any:
            full = template.copy()
            for position, value in zip(free_at, free):
                full[position] = value
            return kernel(*full)

        return call


# Kernels of ops whose arguments are all tensors build their key without a loop.


def _one_tensor(op: str, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
    def kernel(x: Any) -> Any:
        key = (op, x.dtype, x.ndim)
        compiled = lookup(key) or create(key, lambda: make((x,), frozenset(), prepared=False))
        return compiled([x])

    return kernel


def _two_tensors(op: str, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
    def kernel(x: Any, y: Any) -> Any:
        key = (op, x.dtype, x.ndim, y.dtype, y.ndim)
        compiled = lookup(key) or create(key, lambda: make((x, y), frozenset(), prepared=False))
        return compiled([x, y])

    return kernel


def _three_tensors(op: str, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
    """The third one optional (linear's bias)."""

    def kernel(x: Any, w: Any, b: Any) -> Any:
        if b is None:
            key: tuple[Any, ...] = (op, x.dtype, x.ndim, w.dtype, w.ndim)
            arrays = [x, w]
        else:
            key = (op, x.dtype, x.ndim, w.dtype, w.ndim, b.dtype, b.ndim)
            arrays = [x, w, b]
        compiled = lookup(key) or create(key, lambda: make((x, w, b), frozenset(), prepared=False))
        return compiled(arrays)

    return kernel


_FAST = {
    (TENSOR,): _one_tensor,
    (TENSOR, TENSOR): _two_tensors,
    (TENSOR, TENSOR, TENSOR): _three_tensors,
}


def ov_kernel(
    op: str,
    build: Build,
    *,
    check: Callable[..., None] | None = None,
    names: tuple[str, ...] | None = None,
    roles: tuple[str, ...] | None = None,
) -> Callable[..., Any]:
    """The kernel function of ``OvOp(op, build, ...)``."""
    return OvOp(op, build, check=check, names=names, roles=roles).kernel()
