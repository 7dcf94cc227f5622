"""The captured call signature: a plan's call checked against it before any step runs.

A graph runtime given an input of another dtype, rank or size than its model was compiled for fails
with its own words (``Exception from src/inference/src/cpp/infer_request.cpp:104``) or, worse,
computes something. So a plan checks every call first, as single ops do, and refuses a caller's
mistake with one error naming the input as the model's signature does (``input_ids``, ``pair[0]``),
what was expected, what was found and the fix:

* each input a tensor (a numpy array is accepted: ``torch.from_numpy``, no copy; results are torch
  tensors), strided, of the captured dtype (``DTypeError``, fix: a cast) and device (``DeviceError``);
* its rank and sizes: a static size as captured (``ShapeError``, fix: ``dynamic_shapes=`` at capture),
  a dynamic one inside the range torch.export declared for it, equal where the capture's sizes were
  one symbol, and satisfying the exporter's guards (``L['x'].size()[0] > 4``);
* the indices the plan reads as data (``opcore.graph.bounds``): per call, the smallest and largest
  value of each input that reaches an embedding's, gather's or index's index.

The full check runs in Python (~10 us for a few inputs); a call whose tensors match the last accepted
call's exactly (dtype, device, sizes, strides, autograd state: ``opcore._guards.tensor_guard``, the
compiled guard where it is built) skips it, in well under a microsecond. The index bounds depend on
the data and run on every call (an ``aminmax`` per input: docs/graph.md says what it costs).

Guards and size expressions come from torch.export, or from a saved ``plan.json``: they are read by
a closed interpreter (integer arithmetic, comparisons, ``and``/``or``/``not``, ``Mod``, ``Max``,
``Min``, an input's ``.size()``), never by ``eval``.

>>> check = InputCheck(plan.graph, plan.constants)         # doctest: +SKIP
>>> flat = check([ids])                                   # doctest: +SKIP
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opcore.errors import ArgumentError, DeviceError, DTypeError, ShapeError
from opcore.graph.bounds import EntryBound, index_bounds
from opcore.graph.ir import CallSignature, Graph
from opcore.types import TensorMeta

__all__ = ["InputCheck", "call_signature", "describe_call", "size_value"]

_OP = "Plan"


class InputCheck:
    """The checks of one plan's calls (see the module). ``__call__(flat)``: the flat inputs, numpy arrays
    converted, or the error of the first mistake; ``skipped``: guards the interpreter cannot read."""

    __slots__ = ("_aminmax", "_guard", "_ranges", "bounds", "dims", "guards", "labels", "metas", "ranges", "skipped")

    def __init__(self, graph: Graph, constants: Mapping[str, Any]) -> None:
        signature = graph.signature or CallSignature(graph.inputs)
        self.labels = signature.labels
        self.metas: tuple[TensorMeta, ...] = tuple(graph.meta(name) for name in graph.inputs)
        self.dims = tuple(graph.values[name].dims or graph.meta(name).shape for name in graph.inputs)
        self.ranges = dict(signature.ranges)
        readable: list[tuple[str, ast.Expression]] = []
        skipped: list[str] = []
        for text in signature.guards:
            try:
                readable.append((text, _parse(text)))
            except _Unreadable:
                skipped.append(text)
        self.guards = tuple(readable)
        self.skipped = tuple(skipped)
        self.bounds: tuple[EntryBound, ...] = index_bounds(graph, constants).entry
        self._ranges = tuple((b.position, b.low, b.high, b) for b in self.bounds)
        self._guard: Callable[..., bool] | None = None
        import torch

        self._aminmax = torch.aminmax

    def __call__(self, flat: list[Any]) -> list[Any]:
        guard = self._guard
        if guard is None or not guard(*flat):
            flat = self.full(flat)
        for position, low, high, bound in self._ranges:  # per call: the indices are data
            value = flat[position]
            if value.numel():
                smallest, largest = self._aminmax(value)
                if smallest.item() < low or largest.item() > high:
                    _out_of_range(bound, value, self.labels)
        return flat

    def full(self, flat: list[Any]) -> list[Any]:
        """Every check of the signature (not the index bounds); arms the fast guard on success."""
        checked = [self._tensor(i, value) for i, value in enumerate(flat)]
        self._sizes(checked)
        from opcore._guards import tensor_guard

        self._guard = tensor_guard(tuple(checked))
        return checked

    def _tensor(self, i: int, value: Any) -> Any:
        import torch

        label, meta = self.labels[i], self.metas[i]
        wanted = _meta_text(meta, self.dims[i])
        if not isinstance(value, torch.Tensor):
            value = _from_numpy(label, value, wanted)
        if value.layout is not torch.strided:
            raise ArgumentError(
                op=_OP, arg=label, expected=f"a strided tensor {wanted}", found=f"a {value.layout} tensor",
                fix=f"pass {label}.to_dense()",
            )  # fmt: skip
        dtype = meta.dtype.to_torch()
        if value.dtype != dtype:
            raise DTypeError(
                op=_OP, arg=label, expected=f"{wanted}, the dtype the plan was captured with",
                found=f"{_dtype_text(value.dtype)}{list(value.shape)}",
                fix=f"cast it: {label}.to(torch.{_dtype_text(dtype)})",
            )  # fmt: skip
        device = str(meta.device)
        if str(value.device) != device and not (device == "cuda" and value.device.type == "cuda"):
            raise DeviceError(
                op=_OP, arg=label, expected=f"a tensor on {device}, as at capture ({wanted})",
                found=f"a tensor on {value.device}",
                fix=f"move it: {label}.to({device!r})"
                + (f", or capture the plan on {value.device.type}" if value.device.type in ("cpu", "cuda") else ""),
            )  # fmt: skip
        if value.dim() != meta.ndim:
            raise ShapeError(
                op=_OP, arg=label, expected=f"a {meta.ndim}-D tensor {wanted}",
                found=f"a {value.dim()}-D tensor of shape {list(value.shape)}",
                fix="pass it as the model was called at capture",
            )  # fmt: skip
        for axis, (size, dim) in enumerate(zip(value.shape, self.dims[i])):
            if isinstance(dim, int) and size != dim:
                raise ShapeError(
                    op=_OP, arg=label, expected=f"size {dim} at dim {axis} ({wanted}: a static size, as captured)",
                    found=f"size {size} (shape {list(value.shape)})", fix=_dynamic_fix(label, axis, dim),
                )  # fmt: skip
        return value

    def _sizes(self, flat: Sequence[Any]) -> None:
        """Symbolic sizes: one value per symbol, derived sizes consistent, declared ranges, guards."""
        bound: dict[str, tuple[int, str]] = {}  # symbol -> (size, where it was read)
        pending: list[tuple[int, int, str]] = []
        for i, dims in enumerate(self.dims):
            for axis, dim in enumerate(dims):
                if isinstance(dim, str):
                    if dim.isidentifier():
                        self._bind(bound, dim, int(flat[i].shape[axis]), i, axis)
                    else:
                        pending.append((i, axis, dim))
        for i, axis, dim in pending:  # a derived size (2*s0, s0 + 1): its symbol read where it stands alone
            self._derived(bound, flat, i, axis, dim)
        env = {name: size for name, (size, _) in bound.items()}
        # a symbol's own range first (what the caller declared with torch.export.Dim), then derived ones
        for expression, (low, high) in sorted(self.ranges.items(), key=lambda item: not item[0].isidentifier()):
            try:
                value = _evaluate(_parse(expression), env, None)
            except _Unreadable:
                continue  # a symbol no input holds by itself (only in an expression the interpreter cannot read)
            if value < low or (high is not None and value > high):
                label, axis = self._where(expression)
                declared = f"[{low}, {high if high is not None else 'inf'}]"
                raise ShapeError(
                    op=_OP, arg=label,
                    expected=f"dim {axis} ({expression}) in {declared}, the range torch.export declared at capture",
                    found=f"{expression} = {value}"
                    + (f" (shape {list(flat[self.labels.index(label)].shape)})" if label in self.labels else ""),
                    fix=f"capture again with a range that holds {value}: dynamic_shapes with "
                    f"torch.export.Dim(..., min={min(low, value)}, max={max(high or value, value)}) for that dim",
                )  # fmt: skip
        for text, tree in self.guards:
            try:
                holds = _evaluate(tree, env, lambda path: flat[self._input_of(path)])
            except _Unreadable:
                continue
            if not holds:
                raise ShapeError(
                    op=_OP, arg=", ".join(self._guarded(text)) or "inputs",
                    expected=f"sizes satisfying torch.export's guard {_shown(text)}, as captured",
                    found="sizes " + ", ".join(f"{self.labels[i]} {list(t.shape)}" for i, t in enumerate(flat)),
                    fix="pass sizes the model was captured for, or capture it again with examples of these sizes",
                )  # fmt: skip

    def _bind(self, bound: dict[str, tuple[int, str]], symbol: str, size: int, i: int, axis: int) -> None:
        here = f"dim {axis} of {self.labels[i]}"
        first = bound.setdefault(symbol, (size, here))
        if first[0] != size:
            raise ShapeError(
                op=_OP, arg=self.labels[i],
                expected=f"size {first[0]} at dim {axis}, the size of {first[1]} (both {symbol} at capture)",
                found=f"size {size}",
                fix="pass inputs whose sizes agree as at capture, or capture them with separate torch.export.Dims",
            )  # fmt: skip

    def _derived(self, bound: dict[str, tuple[int, str]], flat: Sequence[Any], i: int, axis: int, dim: str) -> None:
        size = int(flat[i].shape[axis])
        try:
            tree = _parse(dim)
            names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            free = [n for n in names if n not in bound]
            if len(free) == 1:  # solve a linear size a*s + b for s
                (symbol,) = free
                b = _evaluate(tree, {symbol: 0}, None)
                a = _evaluate(tree, {symbol: 1}, None) - b
                if a and (size - b) % a == 0:
                    bound[symbol] = ((size - b) // a, f"dim {axis} of {self.labels[i]} ({dim})")
            expected = _evaluate(tree, {name: value for name, (value, _) in bound.items()}, None)
        except (_Unreadable, ZeroDivisionError):
            return
        if expected != size:
            raise ShapeError(
                op=_OP, arg=self.labels[i],
                expected=f"size {expected} at dim {axis} ({dim} at capture, with "
                + ", ".join(f"{n} = {v} from {where}" for n, (v, where) in sorted(bound.items()) if n in dim) + ")",
                found=f"size {size} (shape {list(flat[i].shape)})",
                fix="pass inputs whose sizes keep the relation they had at capture",
            )  # fmt: skip

    def _where(self, expression: str) -> tuple[str, int]:
        for i, dims in enumerate(self.dims):
            for axis, dim in enumerate(dims):
                if dim == expression:
                    return self.labels[i], axis
        for i, dims in enumerate(self.dims):
            for axis, dim in enumerate(dims):
                if isinstance(dim, str) and expression in dim:
                    return self.labels[i], axis
        return "inputs", -1

    def _input_of(self, path: str) -> int:
        if path not in self.labels:
            raise _Unreadable(path)
        return self.labels.index(path)

    def _guarded(self, text: str) -> list[str]:
        """The inputs a guard reads (by the head of their label: ``L['pair']`` reads ``pair[0]`` too)."""
        return [label for label in self.labels if f"L[{label.split('[', 1)[0]!r}]" in text]


def _out_of_range(bound: EntryBound, value: Any, labels: Sequence[str]) -> None:
    label = labels[bound.position]
    lo, hi = int(value.min()), int(value.max())
    bad = lo if lo < bound.low else hi
    raise ArgumentError(
        op=_OP, arg=label, expected=f"indices in [{bound.low}, {bound.high}] ({bound.reason})",
        found=f"index {bad} (index out of range; eager PyTorch raises IndexError)",
        fix=f"keep every value of {label} within [{bound.low}, {bound.high}]",
    )  # fmt: skip


def _from_numpy(label: str, value: Any, wanted: str) -> Any:
    import numpy
    import torch

    if not isinstance(value, numpy.ndarray):
        raise ArgumentError(
            op=_OP, arg=label, expected=f"a tensor {wanted}", found=f"a {type(value).__name__}",
            fix=f"pass a torch.Tensor (torch.as_tensor({label}))",
        )  # fmt: skip
    try:  # torch.from_numpy shares the array's memory; a read-only array is copied (torch warns otherwise)
        return torch.from_numpy(value if value.flags.writeable else value.copy())
    except (TypeError, ValueError) as error:
        raise DTypeError(
            op=_OP, arg=label, expected=f"a tensor {wanted}, or a numpy array torch.from_numpy takes",
            found=f"a numpy array of {value.dtype} ({error})", fix=f"pass {label}.astype(numpy.{_numpy_of(wanted)})",
        ) from error  # fmt: skip


def _numpy_of(wanted: str) -> str:
    return wanted.split("[", 1)[0]


def _dtype_text(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _meta_text(meta: TensorMeta, dims: Sequence[int | str]) -> str:
    return f"{meta.dtype.value}[{', '.join(str(d) for d in dims)}]"


def _dynamic_fix(label: str, axis: int, size: int) -> str:
    return (
        f"pass size {size}, or capture with this dim dynamic: opcore.graph.capture(..., dynamic_shapes="
        f"{{{label.split('[', 1)[0]!r}: {{{axis}: torch.export.Dim('{_identifier(label)}_{axis}')}}}}) "
        "(a nested input's entry goes where it stands in the structure)"
    )


def _identifier(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_") or "dim"


def _shown(text: str) -> str:
    """A guard as a reader writes it: ``L['x'].size()[0]`` as ``x.shape[0]``."""
    import re

    text = re.sub(r"L\['([^']*)'\]", r"\1", text)
    return re.sub(r"\.size\(\)\[(\d+)\]", r".shape[\1]", text)


def describe_call(graph: Graph) -> str:
    """The call a plan takes, as the model's signature names it: ``input_ids: int64[1, s0]``."""
    labels = (graph.signature or CallSignature(graph.inputs)).labels
    return ", ".join(
        f"{label}: {_meta_text(graph.meta(name), graph.values[name].dims or graph.meta(name).shape)}"
        for label, name in zip(labels, graph.inputs)
    )


# --- a closed interpreter of size expressions and guards ---------------------------------------


class _Unreadable(Exception):
    """An expression outside what the interpreter reads."""


_BINARY: Mapping[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.Pow: operator.pow, ast.Div: operator.truediv,
}  # fmt: skip
_COMPARE: Mapping[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}  # fmt: skip
_CALLS: Mapping[str, Callable[..., Any]] = {
    "Mod": operator.mod, "FloorDiv": operator.floordiv, "Max": max, "Min": min, "Abs": abs,
    "Eq": operator.eq, "Ne": operator.ne,
}  # fmt: skip
_PARSED: dict[str, ast.Expression] = {}


_NODES = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Subscript,
    ast.Call, ast.Attribute, ast.USub, ast.UAdd, ast.Not, ast.And, ast.Or, *_BINARY, *_COMPARE,
)  # fmt: skip


def _parse(text: str) -> ast.Expression:
    """The tree of a size expression or guard, where it holds only what ``_evaluate`` reads (names
    are symbols or ``L``, calls are ``_CALLS`` or an input's ``.size()``/``.stride()``)."""
    tree = _PARSED.get(text)
    if tree is None:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as error:
            raise _Unreadable(text) from error
        for node in ast.walk(tree):
            if not isinstance(node, _NODES):
                raise _Unreadable(text)
            if isinstance(node, ast.Attribute) and node.attr not in ("size", "stride"):
                raise _Unreadable(text)
            if isinstance(node, ast.Call) and not (
                (isinstance(node.func, ast.Name) and node.func.id in _CALLS)
                or (isinstance(node.func, ast.Attribute) and not node.args)
            ):
                raise _Unreadable(text)
        _PARSED[text] = tree
    return tree


class _Path(tuple):  # type: ignore[type-arg]
    """``L['x'][0]``: a path into the model's call arguments (guards name inputs by it)."""


def _label(path: tuple[Any, ...]) -> str:
    head, *rest = path
    return str(head) + "".join(f"[{key!r}]" if isinstance(key, str) else f"[{key}]" for key in rest)


def _evaluate(node: ast.AST, env: Mapping[str, int], tensor_of: Callable[[str], Any] | None) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, env, tensor_of)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool, str)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id == "L" and tensor_of is not None:
            return _Path()
        if node.id in env:
            return env[node.id]
        if node.id in ("True", "False"):
            return node.id == "True"
        raise _Unreadable(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left, env, tensor_of), _evaluate(node.right, env, tensor_of))
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, env, tensor_of)
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        if isinstance(node.op, ast.Not):
            return not value
    if isinstance(node, ast.BoolOp):
        values = (_evaluate(v, env, tensor_of) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        left = _evaluate(node.left, env, tensor_of)
        for op, right_node in zip(node.ops, node.comparators):
            right = _evaluate(right_node, env, tensor_of)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Subscript):
        base = _evaluate(node.value, env, tensor_of)
        key = _evaluate(node.slice, env, tensor_of)
        if isinstance(base, _Path) and isinstance(key, (int, str)):
            return _Path((*base, key))
        if isinstance(base, tuple) and isinstance(key, int):
            return base[key]
        raise _Unreadable(ast.dump(node))
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _CALLS:
            return _CALLS[func.id](*(_evaluate(a, env, tensor_of) for a in node.args))
        if isinstance(func, ast.Attribute) and func.attr in ("size", "stride") and not node.args:
            path = _evaluate(func.value, env, tensor_of)
            if isinstance(path, _Path) and path and tensor_of is not None:
                tensor = tensor_of(_label(tuple(path)))
                return tuple(tensor.shape) if func.attr == "size" else tuple(tensor.stride())
    raise _Unreadable(ast.dump(node))


def size_value(expression: str, env: Mapping[str, int]) -> int | None:
    """A size expression as torch.export writes it ("s0", "2*s0 + 1", "Max(1, s0)") with the symbols'
    values in ``env``: an int, or None where it reads anything else (read by the closed interpreter
    above, never ``eval``)."""
    try:
        value = _evaluate(_parse(expression), env, None)
    except (_Unreadable, ZeroDivisionError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- at capture ---------------------------------------------------------------------------------


def call_signature(program: Any, fixed: Sequence[int], count: int) -> CallSignature:
    """The signature of an exported program's call: each graph input's name in the model's signature,
    the declared ranges of the symbolic sizes and the exporter's guards on them. ``fixed``: the flat
    positions torch.export baked in (not graph inputs); ``count``: the number of flat call values."""
    from torch.utils import _pytree

    names: list[str] = []
    module_calls = getattr(program, "module_call_graph", None) or []
    if module_calls and module_calls[0].signature is not None:
        names = list(getattr(module_calls[0].signature, "forward_arg_names", None) or [])
    structure = _pytree.tree_unflatten(list(range(count)), program.call_spec.in_spec)
    labels: dict[int, str] = {}
    for path, position in _pytree.tree_flatten_with_path(structure)[0]:
        labels[position] = _path_label(path, names)
    skip = set(fixed)
    ranges: dict[str, tuple[int, int | None]] = {}
    for symbol, found in program.range_constraints.items():
        low, high = _finite(found.lower), _finite(found.upper)
        if low is not None:
            ranges[str(symbol)] = (low, high)
    guards = tuple(str(g) for g in getattr(program, "_guards_code", None) or ())
    return CallSignature(tuple(labels[p] for p in range(count) if p not in skip), ranges, guards)


def _finite(value: Any) -> int | None:
    if getattr(value, "is_finite", True) is False:  # sympy's oo and torch's int_oo
        return None
    try:
        number = int(value)
    except Exception:  # any other symbolic bound: nothing declared
        return None
    return number if abs(number) < 2**62 else None


def _path_label(path: Sequence[Any], names: Sequence[str]) -> str:
    """``input_ids``, ``pair[0]``, ``options['mask']`` from a pytree key path into (args, kwargs)."""
    keys = [getattr(k, "idx", getattr(k, "key", getattr(k, "name", None))) for k in path]
    if len(keys) < 2:
        return str(keys)
    where, first, rest = keys[0], keys[1], keys[2:]
    if where == 0 and isinstance(first, int):
        head = names[first] if first < len(names) else f"args[{first}]"
    else:
        head = str(first)
    return head + "".join(f"[{k!r}]" if isinstance(k, str) else f"[{k}]" for k in rest)
