"""InferenceSessions for one-op models, and the generic kernel that finds (or builds) the session
for a call's signature and runs it.

A kernel's signature is (op, and per argument: dtype and rank for arrays, the Python type for a
scalar operand, the value for an attribute). Dimensions are symbolic, so every batch size of the
same ranks reuses one session. Python numbers given for ``Tensor|Scalar`` operands are fed as 0-D
inputs, so ``add(x, 0.5)`` and ``add(x, 2.0)`` share a session too.

>>> relu = onnx_kernel("relu", lambda g, x: g.op("Relu", x))
>>> relu(numpy.ones((2, 3), "float32")).shape
(2, 3)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy
import onnxruntime
from onnx import helper

from opcore.errors import OpcoreError, Unsupported
from opcore.opset import BUILTIN_CONTRACTS
from opcore.schema import BaseType
from opcore_onnxruntime.cache import sessions
from opcore_onnxruntime.graph import Graph, Scalar, Value

__all__ = ["ATTRIBUTE", "OPERAND", "TENSOR", "TENSORS", "OnnxOp", "Session", "onnx_kernel", "target_opset"]

_ndarray = numpy.ndarray
_CONTRACTS = {contract.name: contract for contract in BUILTIN_CONTRACTS}
_opset: tuple[int, int] | None = None
_opset_lock = threading.Lock()


def _options() -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: a one-op model's "unused input" notes are noise
    return options


def target_opset() -> tuple[int, int]:
    """(opset, IR version): the highest ONNX opset that both onnx and the installed onnxruntime
    support, found once by building a one-node model at each candidate.
    """
    global _opset  # noqa: PLW0603 - found once per process
    if _opset is None:
        with _opset_lock:
            if _opset is None:
                _opset = _probe_opset()
    return _opset


def _probe_opset() -> tuple[int, int]:
    import onnx

    for opset in range(onnx.defs.onnx_opset_version(), 17, -1):
        ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
        graph = Graph("probe", opset, ir_version)
        model = graph.model(graph.op("Identity", graph.input(numpy.dtype(numpy.float32), 1)))
        try:
            onnxruntime.InferenceSession(model.SerializeToString(), _options(), providers=["CPUExecutionProvider"])
        except Exception:
            continue
        return opset, ir_version
    raise Unsupported(f"onnxruntime {onnxruntime.__version__} accepts no ONNX opset >= 18")


class Session:
    """One InferenceSession and what a call needs: input and output names, scalar feeds."""

    __slots__ = ("_keep", "_names", "_outputs", "_run", "_scalars", "externals", "session")

    def __init__(self, graph: Graph, output: Value) -> None:
        options = _options()
        if graph.externals and not hasattr(options, "add_external_initializers"):
            graph.internalize()  # an onnxruntime without it: the weights are copied into the model
        model = graph.model(output)
        self.externals = len(graph.externals)  # initializers that share the caller's memory
        if graph.externals:
            names = list(graph.externals)
            values = [onnxruntime.OrtValue.ortvalue_from_numpy(graph.externals[n]) for n in names]
            options.add_external_initializers(names, values)
            self._keep: tuple[Any, ...] = (values, graph.externals)  # the session reads this memory
        else:
            self._keep = ()
        try:
            self.session = onnxruntime.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:
            raise Unsupported(f"onnxruntime could not build the {graph.name} model: {_first_line(error)}") from error
        # The binding under InferenceSession.run, taking the same arguments: the public wrapper's
        # per-call checks (feed names, OrtValue ownership, graph capture) cost ~2 us and cannot fail
        # on the complete numpy feeds built here. Public run when a future version moves it.
        self._run = getattr(getattr(self.session, "_sess", None), "run", self.session.run)
        self._outputs = [output.name]
        scalar_at = {position for position, _ in graph.scalar_feeds}
        inputs = [i.name for i in graph.inputs if i.dtype is not None]
        self._names = [name for position, name in enumerate(inputs) if position not in scalar_at]
        self._scalars = [(inputs[position], dtype) for position, dtype in graph.scalar_feeds]

    def __call__(self, arrays: list[Any], scalars: list[Any] | None = None) -> Any:
        feeds = dict(zip(self._names, arrays))
        if scalars:
            for (name, dtype), value in zip(self._scalars, scalars):
                feeds[name] = numpy.asarray(value, dtype=dtype)
        try:
            return self._run(self._outputs, feeds, None)[0]
        except Exception as error:
            raise Unsupported(f"onnxruntime failed: {_first_line(error)}") from error

    def single(self) -> Callable[[Any], Any]:
        """A function of the one input (prepared ops with one free tensor: the leanest call)."""
        run, outputs, name = self._run, self._outputs, self._names[0]

        def call(x: Any) -> Any:
            try:
                return run(outputs, {name: x}, None)[0]
            except Exception as error:
                raise Unsupported(f"onnxruntime failed: {_first_line(error)}") from error

        return call


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


# What each argument of a kernel is, from its schema type
TENSOR, TENSORS, OPERAND, ATTRIBUTE = "tensor", "tensors", "operand", "attribute"

Build = Callable[..., Value]


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


class OnnxOp:
    """How one op becomes an ONNX model: ``build(graph, *arguments)`` writes its nodes and returns
    the output value.

    ``build`` receives a Value for each tensor (a tuple of Values for a tensor list, None when
    absent), a Scalar for a Python number given as an operand, and attributes as they are.
    ``check(*args)``, when given, looks at the data before a run (indices in range, no integer
    division by zero) and raises an OpcoreError for what the runtime would crash on.
    ``names`` and ``roles`` describe the arguments when they are not the contract's.
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
        return f"OnnxOp({self.op!r})"

    def kernel(self) -> Callable[..., Any]:
        """The kernel function: finds the session for the call's signature (building it once) and runs it.

        The function carries ``prepare`` (for opcore.resolve with constants) and ``spec`` (this object).
        """
        op, roles, check = self.op, self.roles, self.check
        cache = sessions()
        lookup, create, make = cache.get, cache.get_or_create, self._session
        if check is None and roles in _FAST:
            kernel = _FAST[roles](op, lookup, create, make)
        else:
            kernel = self._generic_kernel(lookup, create, make)
        kernel.__name__ = kernel.__qualname__ = op
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
            session = lookup(frozen)
            if session is None:
                session = create(frozen, lambda: make(args, frozenset(), prepared=False))
            return session(arrays, scalars)

        return kernel

    def _session(self, args: tuple[Any, ...], constants: frozenset[str], *, prepared: bool) -> Session:
        opset, ir_version = target_opset()
        graph = Graph(self.op, opset, ir_version)
        values: list[Any] = []
        for name, value, role in zip(self.names, args, self.roles):
            baked = name in constants
            if isinstance(value, _ndarray):
                values.append(graph.weight(value) if baked else graph.input(value.dtype, value.ndim))
            elif role is TENSORS and value is not None:
                values.append(tuple(graph.weight(v) if baked else graph.input(v.dtype, v.ndim) for v in value))
            elif role is OPERAND and value is not None:
                # prepared: every scalar is fixed, so it is baked in
                values.append(Scalar(type(value), value if prepared else None))
            else:
                values.append(value)
        try:
            output = self.build(graph, *values)
            if output.name in {i.name for i in graph.inputs} or output.name.startswith(("weight", "const")):
                output = graph.op("Identity", output)  # a graph output must be a node's output
        except OpcoreError:
            raise
        except Exception as error:
            raise Unsupported(f"could not express {self.op} in ONNX: {type(error).__name__}: {error}") from error
        return Session(graph, output)

    def prepare(self, args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
        """A session with the constant tensors as initializers, taking the other tensors in schema order.

        Built for this call only (not cached): the weights belong to the caller's resolved op.
        """
        if not constants:  # nothing to bake in: share the cached model of this signature
            return self._through_cache(args)
        session = self._session(args, frozenset(constants), prepared=True)
        free_at = [
            i
            for i, (name, value, role) in enumerate(zip(self.names, args, self.roles))
            if name not in constants and value is not None and role in (TENSOR, TENSORS)
        ]
        check = self.check
        if check is None and all(self.roles[i] is TENSOR for i in free_at):
            if len(free_at) == 1 and not session._scalars:
                prepared = session.single()
            else:

                def prepared(*free: Any) -> Any:
                    return session(list(free))

            prepared.session = session  # type: ignore[attr-defined]
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
            return session(arrays)

        prepared_checked.session = session  # type: ignore[attr-defined]
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


# Kernels of ops whose arguments are all tensors (relu, matmul, linear...) build their key without
# a loop: 0.2 us instead of 0.7 us, a fifth of onnxruntime's own Python overhead per run.


def _one_tensor(op: str, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
    def kernel(x: Any) -> Any:
        key = (op, x.dtype, x.ndim)
        session = lookup(key) or create(key, lambda: make((x,), frozenset(), prepared=False))
        return session([x])

    return kernel


def _two_tensors(op: str, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
    def kernel(x: Any, y: Any) -> Any:
        key = (op, x.dtype, x.ndim, y.dtype, y.ndim)
        session = lookup(key) or create(key, lambda: make((x, y), frozenset(), prepared=False))
        return session([x, y])

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
        session = lookup(key) or create(key, lambda: make((x, w, b), frozenset(), prepared=False))
        return session(arrays)

    return kernel


_FAST = {
    (TENSOR,): _one_tensor,
    (TENSOR, TENSOR): _two_tensors,
    (TENSOR, TENSOR, TENSOR): _three_tensors,
}


def onnx_kernel(
    op: str,
    build: Build,
    *,
    check: Callable[..., None] | None = None,
    names: tuple[str, ...] | None = None,
    roles: tuple[str, ...] | None = None,
) -> Callable[..., Any]:
    """The kernel function of ``OnnxOp(op, build, ...)``.

    >>> relu = onnx_kernel("relu", lambda g, x: g.op("Relu", x))
    >>> relu(numpy.array([-1.0, 2.0], numpy.float32))
    array([0., 2.], dtype=float32)
    """
    return OnnxOp(op, build, check=check, names=names, roles=roles).kernel()
