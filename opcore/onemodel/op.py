"""One op as one model per call signature: ``OneModelOp`` and the kernels it makes.

A kernel's signature is (op, and per argument: dtype and rank for arrays, the Python type for a
scalar operand, the value for an attribute). Dimensions stay dynamic in the models, so every batch
size of the same ranks reuses one model from the backend's cache. A backend subclasses
``OneModelOp`` with how to start, finish and compile a graph; ``kernel()`` and ``prepare`` are
shared.

>>> argument_roles("add")
('tensor', 'operand', 'attribute')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

import numpy

from opcore.errors import OpcoreError, Unsupported
from opcore.onemodel.cache import ModelCache
from opcore.opset import BUILTIN_CONTRACTS
from opcore.schema import BaseType
from opcore.types import TensorMeta

__all__ = [
    "ATTRIBUTE",
    "OPERAND",
    "TENSOR",
    "TENSORS",
    "Build",
    "GraphBuilder",
    "Model",
    "OneModelKernel",
    "OneModelOp",
    "Scalar",
    "argument_roles",
    "first_line",
]

# What each argument of a kernel is, from its schema type
TENSOR, TENSORS, OPERAND, ATTRIBUTE = "tensor", "tensors", "operand", "attribute"

_ndarray = numpy.ndarray
_CONTRACTS = {contract.name: contract for contract in BUILTIN_CONTRACTS}


def argument_roles(op: str) -> tuple[str, ...]:
    """The role of each argument of the built-in ``op``, in schema order.

    >>> argument_roles("cat")
    ('tensors', 'attribute')
    """
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


@dataclass(frozen=True, slots=True)
class Scalar:
    """A Python number given for a ``Tensor|Scalar`` argument, as a builder receives it.

    ``value`` None: it is fed at run time as a 0-D input (one model serves every value);
    else it is baked into the graph as a constant (prepared ops: every scalar is fixed).
    """

    kind: type
    value: bool | int | float | None = None


def first_line(error: BaseException) -> str:
    """The first line of an error's message (at most 300 characters), for an ``Unsupported`` reason.

    >>> first_line(RuntimeError("bad input\\n  at node 3"))
    'bad input'
    """
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


class Model(Protocol):
    """A built model as the shared kernels call it."""

    # where each Python number is fed and its dtype; empty when every input is a tensor (read-only
    # here, so that a backend's list of (name, dtype) or (index, dtype) satisfies it)
    @property
    def scalars(self) -> Sequence[tuple[Any, numpy.dtype]]: ...

    def __call__(self, arrays: list[Any], scalars: list[Any] | None = None) -> Any:
        """Run with the tensor inputs in feed order and the Python numbers of ``scalars``."""

    def single(self) -> Callable[[Any], Any]:
        """A function of the one tensor input (the leanest call of a prepared op)."""


class GraphBuilder(Protocol):
    """What the shared code asks of a backend's graph builder (builders use much more)."""

    def input(self, dtype: numpy.dtype, rank: int, dims: Sequence[int | None] | None = None) -> Any:
        """A tensor input of ``rank`` dimensions: all dynamic, or ``dims`` (None where dynamic)."""

    def weight(self, array: numpy.ndarray) -> Any:
        """A constant tensor (a prepared op's weights)."""


Build = Callable[..., Any]


class OneModelKernel(Protocol):
    """The kernel function ``OneModelOp.kernel()`` makes: called with the op's arguments, and carrying
    ``prepare`` (opcore.resolve with constants), ``spec`` (its OneModelOp) and ``chain`` (partitions).

    >>> relu = OnnxOp.kernel_of("relu", build_relu); relu.spec.op   # doctest: +SKIP
    'relu'
    """

    __name__: str
    prepare: Callable[[tuple[Any, ...], frozenset[str]], Callable[..., Any]]
    spec: OneModelOp
    chain: Callable[..., Any]

    def __call__(self, *args: Any) -> Any: ...


class OneModelOp:
    """How one op becomes a model: ``build(graph, *arguments)`` writes its nodes and returns the
    output value.

    ``build`` receives a graph value for each tensor (a tuple of values for a tensor list, None
    when absent), a Scalar for a Python number given as an operand, and attributes as they are.
    ``check(*args)``, when given, looks at the data before a run (indices in range, no integer
    division by zero) and raises an OpcoreError for what the runtime would get wrong.
    ``names`` and ``roles`` describe the arguments when they are not the contract's.
    ``empty=True``: a call with an empty input tensor whose result has no elements gets that
    result from the contract's meta function (shape and dtype are all an empty result has), without
    a model: for ops whose runtime fails on empty tensors.

    A backend subclasses it with ``cache``, ``language``, ``model_attribute``, ``new_graph``,
    ``output`` and ``compile``.
    """

    cache: ClassVar[ModelCache]
    language: ClassVar[str] = "the runtime's format"  # in "could not express OP in LANGUAGE"
    model_attribute: ClassVar[str] = "model"  # the attribute of a prepared function holding its model

    def __init__(
        self,
        op: str,
        build: Build,
        *,
        check: Callable[..., None] | None = None,
        names: tuple[str, ...] | None = None,
        roles: tuple[str, ...] | None = None,
        empty: bool = False,
    ) -> None:
        self.op = op
        self.build = build
        self.check = check
        self.empty = empty
        self.names = names if names is not None else _CONTRACTS[op].schema.names
        self.roles = roles if roles is not None else argument_roles(op)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.op!r})"

    @classmethod
    def kernel_of(
        cls,
        op: str,
        build: Build,
        *,
        check: Callable[..., None] | None = None,
        names: tuple[str, ...] | None = None,
        roles: tuple[str, ...] | None = None,
        empty: bool = False,
    ) -> OneModelKernel:
        """The kernel function of ``cls(op, build, ...)`` (what a kernels module assigns to the op's name).

        >>> relu = OnnxOp.kernel_of("relu", lambda g, x: g.op("Relu", x))  # doctest: +SKIP
        """
        return cls(op, build, check=check, names=names, roles=roles, empty=empty).kernel()

    # -- the backend's part ----------------------------------------------------------------------

    def new_graph(self) -> GraphBuilder:
        """An empty graph for this op."""
        raise NotImplementedError

    def output(self, graph: Any, value: Any) -> Any:
        """``value`` as the model's output; a backend adds a node where its runtime refuses an input
        or a constant as a graph output."""
        return value

    def compile(self, graph: Any, output: Any) -> Model:
        """The runnable model; raises Unsupported (with the runtime's first line) when it fails."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------

    def kernel(self) -> OneModelKernel:
        """The kernel function: finds the model for the call's signature (building it once) and runs it.

        The function carries ``prepare`` (for opcore.resolve with constants) and ``spec`` (this object).
        """
        op, roles, check = self.op, self.roles, self.check
        cache = self.cache.lru()
        lookup, create, make = cache.get, cache.get_or_create, self.model
        if check is None and roles in _FAST:
            kernel = _FAST[roles](op, lookup, create, make)
        else:
            kernel = self._generic_kernel(lookup, create, make)
        if self.empty:
            kernel = _empty_from_meta(op, kernel)
        # a function given attributes: the type system cannot see them added, hence the cast
        made = cast(OneModelKernel, kernel)
        made.__name__ = kernel.__qualname__ = op
        made.prepare, made.spec, made.chain = self.prepare, self, self.chain
        return made

    def chain(self, graph: Any, *args: Any) -> Any:
        """This op's nodes written into ``graph`` (a partition's model, opcore.onemodel.partition):
        tensors are graph values already, Python numbers given for operands are baked in.

        A kernel whose arguments are not the contract's (a wrapper) sets its own ``chain``.
        """
        values = [
            Scalar(type(value), value) if role is OPERAND and isinstance(value, (bool, int, float)) else value
            for value, role in zip(args, self.roles)
        ]
        return self.build(graph, *values)

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
                elif role is TENSORS:  # a list of tensors; None entries (index's Tensor?[]) are not fed
                    remember(tuple(None if v is None else (v.dtype, v.ndim) for v in value))
                    arrays.extend(v for v in value if v is not None)
                elif role is OPERAND:
                    remember(type(value))
                    scalars.append(value)
                else:
                    remember(value)
            frozen = tuple(key)
            model = lookup(frozen)
            if model is None:
                model = create(frozen, lambda: make(args, frozenset(), prepared=False))
            return model(arrays, scalars)

        return kernel

    def model(self, args: tuple[Any, ...], constants: frozenset[str], *, prepared: bool) -> Model:
        """The model of this call's signature, with the ``constants`` tensors baked in."""
        graph = self.new_graph()
        values: list[Any] = []
        for name, value, role in zip(self.names, args, self.roles):
            baked = name in constants
            if isinstance(value, _ndarray):
                values.append(graph.weight(value) if baked else graph.input(value.dtype, value.ndim))
            elif role is TENSORS and value is not None:
                values.append(
                    tuple(
                        None if v is None else graph.weight(v) if baked else graph.input(v.dtype, v.ndim) for v in value
                    )
                )
            elif role is OPERAND and value is not None:
                # prepared: every scalar is fixed, so it is baked in
                values.append(Scalar(type(value), value if prepared else None))
            else:
                values.append(value)
        try:
            output = self.output(graph, self.build(graph, *values))
        except OpcoreError:
            raise
        except Exception as error:
            raise Unsupported(
                f"could not express {self.op} in {self.language}: {type(error).__name__}: {error}"
            ) from error
        return self.compile(graph, output)

    def prepare(self, args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
        """A model with the constant tensors baked in, taking the other tensors in schema order.

        Built for this call only (not cached): the weights belong to the caller's resolved op.
        """
        if not constants:  # nothing to bake in: share the cached model of this signature
            return self._through_cache(args)
        model = self.model(args, frozenset(constants), prepared=True)
        free_at = [
            i
            for i, (name, value, role) in enumerate(zip(self.names, args, self.roles))
            if name not in constants and _fed(value, role)
        ]
        check = self.check
        if check is None and all(self.roles[i] is TENSOR for i in free_at):
            if len(free_at) == 1 and not model.scalars:
                prepared = model.single()
            else:

                def prepared(*free: Any) -> Any:
                    return model(list(free))

            setattr(prepared, self.model_attribute, model)
            return prepared
        template = list(args)

        def prepared_checked(*free: Any) -> Any:
            full = template.copy()
            arrays: list[Any] = []
            for position, value in zip(free_at, free):
                full[position] = value
                if isinstance(value, tuple):
                    arrays.extend(v for v in value if v is not None)
                else:
                    arrays.append(value)
            if check is not None:
                check(*full)
            return model(arrays)

        setattr(prepared_checked, self.model_attribute, model)
        return prepared_checked

    def _through_cache(self, args: tuple[Any, ...]) -> Callable[..., Any]:
        kernel = self.kernel()
        free_at = [i for i, (value, role) in enumerate(zip(args, self.roles)) if _fed(value, role)]
        template = list(args)

        def call(*free: Any) -> Any:
            full = template.copy()
            for position, value in zip(free_at, free):
                full[position] = value
            return kernel(*full)

        return call


def _fed(value: Any, role: str) -> bool:
    """Whether the argument is a tensor fed at run time: a tensor, a list of them, or an operand
    (Tensor|Scalar) given as an array; an operand given as a number is baked into the model."""
    return value is not None and (role in (TENSOR, TENSORS) or (role is OPERAND and type(value) is _ndarray))


# Kernels of ops whose arguments are all tensors (relu, matmul, linear...) build their key without
# a loop: 0.2 us instead of 0.7 us, a fifth of onnxruntime's own Python overhead per run.


def _one_tensor(op: str, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
    def kernel(x: Any) -> Any:
        key = (op, x.dtype, x.ndim)
        model = lookup(key) or create(key, lambda: make((x,), frozenset(), prepared=False))
        return model([x])

    return kernel


def _two_tensors(op: str, lookup: Any, create: Any, make: Any) -> Callable[..., Any]:
    def kernel(x: Any, y: Any) -> Any:
        key = (op, x.dtype, x.ndim, y.dtype, y.ndim)
        model = lookup(key) or create(key, lambda: make((x, y), frozenset(), prepared=False))
        return model([x, y])

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
        model = lookup(key) or create(key, lambda: make((x, w, b), frozenset(), prepared=False))
        return model(arrays)

    return kernel


_FAST = {
    (TENSOR,): _one_tensor,
    (TENSOR, TENSOR): _two_tensors,
    (TENSOR, TENSOR, TENSOR): _three_tensors,
}


def _empty_from_meta(op: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel``, but a call with an empty input array whose result has no elements returns that
    result made from the contract's meta (see OneModelOp's ``empty``)."""
    meta = _CONTRACTS[op].meta

    def empty_aware(*args: Any) -> Any:
        if any(type(value) is _ndarray and value.size == 0 for value in args):
            out = meta(*(TensorMeta.of(v) if type(v) is _ndarray else v for v in args))
            if isinstance(out, TensorMeta) and 0 in out.shape:
                return numpy.empty(out.shape, dtype=out.dtype.to_numpy())
        return kernel(*args)

    return empty_aware
