"""The captured graph as opcore sees it: frozen records of values and op nodes.

A ``Graph`` holds runtime inputs, constants (weights), nodes in topological order, and the
outputs. Every node applies one opcore op (a contract such as ``linear``, or an ATen fallback
``aten.<name>.<overload>``) to arguments bound in the contract's schema order: a ``ValueRef`` for a
tensor (or a scalar computed at run time from a shape), a tuple for lists, plain values for the
rest. ``Scalar`` nodes compute sizes from shapes (``x.shape[0] * 8``) for graphs with dynamic dims.

>>> from opcore.types import DType, TensorMeta
>>> info = ValueInfo("x", TensorMeta((2, 8), DType.FLOAT32), ("batch", 8))
>>> info.dims
('batch', 8)
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opcore.partition_protocol import ValueRef
from opcore.types import TensorMeta

__all__ = [
    "FACTORIES",
    "SCALAR_OPS",
    "STATE_OPS",
    "CallSignature",
    "Graph",
    "Node",
    "ValueInfo",
    "ValueRef",
    "python_step",
    "refs_in",
    "substitute",
]

# The run-time arithmetic on sizes that torch.export writes for dynamic dims. A closed table: a
# saved plan names these by key, and nothing else is ever looked up from a file.
SCALAR_OPS: Mapping[str, Callable[..., Any]] = {
    "sym_size": lambda x, dim: x.shape[dim],
    "sym_numel": lambda x: x.numel(),
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "truediv": operator.truediv,
    "mod": operator.mod,
    "neg": operator.neg,
    "pow": operator.pow,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "sym_max": max,
    "sym_min": min,
}


# ATen ops that make a tensor from sizes alone (no tensor input, so no dispatch): folded into
# constants at capture when their sizes are static, else run in Python on the run-time sizes.
FACTORIES = frozenset(
    {
        "aten.arange.default", "aten.arange.start", "aten.arange.start_step", "aten.zeros.default",
        "aten.ones.default", "aten.full.default", "aten.empty.memory_format", "aten.scalar_tensor.default",
    }
)  # fmt: skip


def _index_copy_(state: Any, dim: int, index: Any, source: Any) -> Any:
    return state.index_copy_(dim, index, source)


def _copy_(state: Any, value: Any) -> Any:
    return state.copy_(value)


# Writes into a plan's state (opcore.graph.state: a KV cache the caller holds), in place. Closed
# like SCALAR_OPS: a saved plan names them by key.
STATE_OPS: Mapping[str, Callable[..., Any]] = {
    "state.index_copy_": _index_copy_,  # (state, dim, index, source): rows written where index says
    "state.copy_": _copy_,  # (state, value): the whole state taken from a value the graph computed
}


def python_step(op: str) -> Callable[..., Any]:
    """The function of a node that runs in Python: a size computation, a write into the plan's state,
    or a factory (its arguments in ATen schema order). Only names in SCALAR_OPS, STATE_OPS or
    FACTORIES: nothing else is ever looked up."""
    if op in SCALAR_OPS:
        return SCALAR_OPS[op]
    if op in STATE_OPS:
        return STATE_OPS[op]
    if op not in FACTORIES:
        raise KeyError(op)
    import torch

    _, name, overload = op.split(".")
    return aten_caller(getattr(getattr(torch.ops.aten, name), overload))


def aten_caller(target: Any) -> Callable[..., Any]:
    """An ATen overload as a function of all its arguments in schema order (keyword-only ones too)."""
    keyword = [a.name for a in target._schema.arguments if a.kwarg_only]
    n = len(target._schema.arguments) - len(keyword)

    def call(*args: Any) -> Any:
        return target(*args[:n], **dict(zip(keyword, args[n:])))

    return call


@dataclass(frozen=True, slots=True)
class ValueInfo:
    """One value of the graph. meta None: a Python scalar (a size computed at run time).

    ``meta`` holds the example's concrete sizes; ``dims`` the same sizes with a symbol (a str such as
    ``"s0"``) where the dimension is dynamic. A scalar's ``dims`` is its symbolic value (``("s0",)``,
    ``("2*s0",)``) where the exporter recorded one, else empty.
    """

    name: str
    meta: TensorMeta | None
    dims: tuple[int | str, ...] = ()
    # a scalar's value in the example (what planning binds); None for tensors
    example: Any = None

    @property
    def symbol(self) -> str | None:
        """A scalar's symbolic value ("s0", "2*s0") where the exporter recorded one, else None."""
        if self.meta is not None or not self.dims:
            return None
        found = self.dims[0]
        return found if isinstance(found, str) else None

    @property
    def dynamic_axes(self) -> frozenset[int]:
        if self.meta is None:
            return frozenset()
        return frozenset(i for i, d in enumerate(self.dims) if isinstance(d, str))


@dataclass(frozen=True, slots=True)
class Node:
    """One op applied to bound arguments.

    ``op``: an opcore op name; when ``scalar`` is True, a node run in Python: a key of SCALAR_OPS or
    one of FACTORIES (see python_step). ``target``: the ATen
    overload it came from ("aten.linear.default"), or the rewrite that made it ("rewrite:linear_relu").
    ``args``: in the op's schema order (see the module docstring). ``outputs``: the value names it
    produces, one per output of the op.
    """

    name: str
    op: str
    target: str
    args: tuple[Any, ...]
    outputs: tuple[str, ...]
    scalar: bool = False

    def refs(self) -> tuple[str, ...]:
        """The names of the values this node reads, in argument order."""
        names: list[str] = []
        for arg in self.args:  # most arguments are a value or a number: no generator for those
            if isinstance(arg, ValueRef):
                names.append(arg.name)
            elif isinstance(arg, (tuple, list)):
                names.extend(ref.name for ref in refs_in(arg))
        return tuple(names)


@dataclass(frozen=True, slots=True)
class CallSignature:
    """What a call of the captured model must satisfy beyond each input's meta and ``dims`` (checked by
    opcore.graph.signature before a plan runs).

    ``labels``: per graph input, in order, its name in the model's signature (``input_ids``,
    ``pair[0]``); ``ranges``: per symbolic size (``s0``, or an expression of one such as ``2*s0``), the
    range torch.export declared for it, ``[lo, hi]`` (hi None: no upper bound); ``guards``: torch.export's
    guards on the input sizes, as it writes them (``L['x'].size()[0] > 4``).
    """

    labels: tuple[str, ...]
    ranges: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)
    guards: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Graph:
    """A captured model. ``outputs``: the flat outputs (a ValueRef, or a constant such as None);
    ``out_spec`` / ``in_spec``: torch's pytree specs (as JSON) that rebuild the model's structures.
    """

    inputs: tuple[str, ...]
    constants: tuple[str, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Any, ...]
    values: Mapping[str, ValueInfo]
    in_spec: str = ""
    out_spec: str = ""
    # (position among the flat call arguments, value) of the non-tensor inputs torch.export baked in
    fixed_inputs: tuple[tuple[int, Any], ...] = ()
    # the constant names as the model's state_dict calls them ("layers.0.q.weight"), for explain
    sources: Mapping[str, str] = field(default_factory=dict)
    # the inputs that are state (a KV cache): the caller passes the same tensors call after call and
    # the graph's STATE_OPS nodes write them in place (opcore.graph.state); () for a pure function
    state: tuple[str, ...] = ()
    # input name -> (lo, hi): the values a call may pass, checked by whoever declares them (capture_lm
    # checks token ids against the vocabulary); opcore.graph.ranges starts its proofs from them
    bounds: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # the inputs' names in the model's signature, the ranges of their dynamic sizes and the exporter's
    # guards on them; None: not recorded (a plan saved before they were), labels are the input names
    signature: CallSignature | None = None

    def meta(self, name: str) -> TensorMeta:
        found = self.values[name].meta
        if found is None:
            raise KeyError(f"{name} is a scalar, not a tensor")
        return found

    def users(self) -> dict[str, list[int]]:
        """For each value, the indices of the nodes reading it."""
        users: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in node.refs():
                users.setdefault(name, []).append(i)
        return users

    def output_names(self) -> set[str]:
        return {ref.name for ref in refs_in(self.outputs)}


def refs_in(value: Any) -> Iterator[ValueRef]:
    """Every ValueRef in a value, lists included."""
    if isinstance(value, ValueRef):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from refs_in(item)


def substitute(value: Any, lookup: Callable[[str], Any]) -> Any:
    """The value with every ValueRef replaced by ``lookup(name)`` (lists become tuples)."""
    if isinstance(value, ValueRef):
        return lookup(value.name)
    if isinstance(value, (tuple, list)):
        return tuple(substitute(item, lookup) for item in value)
    return value
