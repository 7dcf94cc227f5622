"""The ATen fallback: any ``torch.ops.aten`` op as an opcore op named ``aten.<name>[.<overload>]``.

One device-generic implementation shared by every torch backend (CPU and CUDA register the same
functions). It has three parts:

- ``aten_contract(name)``, the ``"aten."`` namespace's contract factory: it turns the overload's
  ``_schema`` into an opcore schema and gives it a meta function that runs the overload on
  ``device="meta"`` tensors (output shapes and dtypes without data; torch's refusals become
  ShapeError / DTypeError / ArgumentError naming the op).
- ``kernel_factory(device_type)``, the kernel factory each torch backend registers for ``"aten."``.
- ``builtin_fallback``, by-name kernels for built-in ops that a torch backend has no own kernel
  for but ATen has an op of the same name (``"opcore.torchkit.aten:builtin_fallback.relu"``).

Naming: ``aten.<name>.<overload>`` picks that overload. Without an overload, ``.default`` when the
op has a usable one, else the first *usable* overload in torch's declaration order (``aten.add`` is
``aten.add.Tensor``, ``aten.index`` is ``aten.index.Tensor``): usable means functional (no
``Tensor(a!)`` argument: in-place and ``out=`` overloads are declined), at least one tensor
argument, and only tensors returned. The contract's doc names the overload chosen.

Types: Tensor, Tensor?, Tensor[], Tensor?[], int, SymInt, int[N], SymInt[], float, float[], bool,
bool[N], str, Scalar (``number``), Scalar?[] map one to one. ScalarType, Layout, Device,
MemoryFormat and Generator have no opcore type: the schema shows them as ``str`` and the binder
accepts the torch object (``torch.float16``) or its name (``"float16"``, ``"channels_last"``,
``"cpu"``), handing torch the object. Anything else (Storage, Dict, complex, custom classes) is
declined with the type named.

>>> import opcore, torch                                                        # doctest: +SKIP
>>> opcore.run("aten.index.Tensor", torch.arange(6.0).view(2, 3), [None, torch.tensor([2, 0])])  # doctest: +SKIP
tensor([[2., 0.], [5., 3.]])
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DTypeError, NoKernelError, OpcoreError, ShapeError, Unsupported
from opcore.kernel_records import Kernel
from opcore.schema import NO_DEFAULT, Schema
from opcore.torchkit import ATEN_PREFIX, FALLBACK_LABEL
from opcore.types import ArrayKind, DeviceType, DType, TensorMeta

if TYPE_CHECKING:
    import torch

__all__ = [
    "EAGER_SIZED_OUTPUTS",
    "FALLBACK_LABEL",
    "PREFIX",
    "AtenOp",
    "aten_contract",
    "builtin_fallback",
    "find_overload",
    "kernel_factory",
]

PREFIX = ATEN_PREFIX
ALL_DTYPES = frozenset(DType)

# ATen's type kinds (torch._C JitType.kind()) -> the opcore base type that holds them
_PLAIN_KINDS = {
    "TensorType": "Tensor",
    "IntType": "int",
    "SymIntType": "int",
    "FloatType": "float",
    "BoolType": "bool",
    "StringType": "str",
    "NumberType": "Scalar",
}
# torch enums and objects without an opcore type: shown as str, bound by _TorchObject
_OBJECT_KINDS = ("ScalarTypeType", "LayoutType", "DeviceObjType", "MemoryFormatType", "GeneratorType")


@dataclass(frozen=True, slots=True)
class AtenOp:
    """An ATen overload as opcore sees it. kwarg_only: names of its keyword-only arguments, in order."""

    name: str
    overload: Any  # torch._ops.OpOverload
    qualified: str  # "aten.add.Tensor"
    n_positional: int
    kwarg_only: tuple[str, ...]


_OPS: dict[str, AtenOp] = {}


# --- naming ------------------------------------------------------------------------------------


def find_overload(name: str) -> Any:
    """The ``torch.ops.aten`` overload an ``aten.<name>[.<overload>]`` name stands for, or None when
    ATen has no op of that name; an unknown or unusable overload raises ArgumentError.

    >>> find_overload("aten.relu")                                                  # doctest: +SKIP
    <OpOverload(op='aten.relu', overload='default')>
    """
    import torch

    parts = name.removeprefix(PREFIX).split(".")
    if len(parts) > 2 or not all(parts):
        raise ArgumentError(
            arg="op",
            expected="'aten.<name>' or 'aten.<name>.<overload>'",
            found=repr(name),
            fix="e.g. 'aten.add.Tensor'",
        )
    try:
        packet = getattr(torch.ops.aten, parts[0])
    except (AttributeError, RuntimeError):
        return None
    if not hasattr(packet, "overloads"):
        return None
    overloads = list(packet.overloads())
    if len(parts) == 2:
        if parts[1] not in overloads:
            usable = [o for o in overloads if _problem(getattr(packet, o)._schema) is None]
            raise ArgumentError(
                arg="op",
                expected=f"an overload of aten.{parts[0]} that opcore can run ({', '.join(usable) or 'none'})",
                found=repr(parts[1]),
            )
        return getattr(packet, parts[1])
    if "default" in overloads and _problem(packet.default._schema) is None:
        return packet.default
    for overload_name in overloads:
        overload = getattr(packet, overload_name)
        if _problem(overload._schema) is None:
            return overload
    raise ArgumentError(
        f"aten.{parts[0]} has no overload opcore can run ({', '.join(overloads)}): "
        + (_problem(getattr(packet, overloads[0])._schema) or "")
        if overloads
        else f"aten.{parts[0]} has no overloads",
    )


def _problem(schema: Any) -> str | None:
    """Why opcore cannot run this overload, or None."""
    for argument in schema.arguments:
        if argument.alias_info is not None and argument.alias_info.is_write:
            return (
                f"it writes into its argument '{argument.name}' (Tensor(a!)); opcore ops are functional, "
                "so in-place and out= overloads are declined"
            )
    for result in schema.returns:
        kind = result.real_type.kind()
        if kind == "ListType" and result.real_type.getElementType().kind() == "TensorType":
            if len(schema.returns) > 1:
                return "it returns a list of tensors beside other results"
            continue
        if kind != "TensorType":
            return f"it returns {result.real_type} (opcore ops return tensors)"
    if not schema.returns:
        return "it returns nothing (opcore ops return tensors)"
    for argument in schema.arguments:
        if "Tensor" in str(argument.real_type):
            return None
    return "it takes no tensor (opcore dispatches on its tensor inputs; call torch directly)"


# --- schema conversion -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Converted:
    text: str  # the argument as opcore schema text
    default: Any = NO_DEFAULT  # the real default, when the text could not hold it
    convert: Callable[[str, str, Any], Any] | None = None  # replaces opcore's value check


def _type_text(jit_type: Any, length: int | None, default: Any) -> tuple[str, str | None]:
    """The opcore type text of an ATen type, and the torch object kind when it is one."""
    kind = jit_type.kind()
    if kind == "OptionalType":
        inner, object_kind = _type_text(jit_type.getElementType(), length, default)
        return inner + "?", object_kind
    if kind == "ListType":
        element = jit_type.getElementType()
        element_kind = element.kind()
        optional = ""
        if element_kind == "OptionalType":
            element, optional = element.getElementType(), "?"
            element_kind = element.kind()
        base = _PLAIN_KINDS.get(element_kind)
        if base is None:
            raise _unsupported_type(str(jit_type))
        fits = length is not None and (not isinstance(default, list) or len(default) == length)
        return f"{base}{optional}[{length if fits else ''}]", None
    if kind in _PLAIN_KINDS:
        return _PLAIN_KINDS[kind], None
    if kind in _OBJECT_KINDS:
        return "str", kind
    raise _unsupported_type(str(jit_type))


def _unsupported_type(text: str) -> ArgumentError:
    return ArgumentError(
        f"an argument of type {text} has no opcore equivalent",
        fix="call the op through torch directly",
    )


def _literal(value: Any) -> str | None:
    """Schema text for a default, or None when a literal cannot hold it (inf, an enum's number)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    text = repr(value)
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return text


def _convert_argument(argument: Any) -> _Converted:
    default = argument.default_value if argument.has_default_value() else NO_DEFAULT
    length = getattr(argument, "N", None)
    # ATen's int[1] (reduction dims: mean.dim, sum.dim_IntList, amax) takes one int or a list of any
    # length; only N > 1 (conv's stride, int[2]) fixes the length
    type_text, object_kind = _type_text(argument.real_type, None if length == 1 else length, default)
    convert: Callable[[str, str, Any], Any] | None = None
    if object_kind:
        convert = _TorchObject(object_kind, type_text.endswith("?"))
    if length == 1 and convert is None:
        convert = _OneOrMore(type_text.endswith("?"))
    if default is NO_DEFAULT:
        return _Converted(f"{type_text} {argument.name}", convert=convert)
    literal = _literal(default)
    if object_kind is None and literal is not None:
        return _Converted(f"{type_text} {argument.name}={literal}", convert=convert)
    # hold the place with None (which makes the type optional in the text) and patch the real default in
    return _Converted(f"{type_text} {argument.name}=None", default=default, convert=convert)


class _OneOrMore:
    """The value check of ATen's ``int[1]``: an int (made a 1-tuple) or a list of ints of any length."""

    __slots__ = ("optional",)

    def __init__(self, optional: bool) -> None:
        self.optional = optional

    def __call__(self, op: str, arg: str, value: Any) -> Any:
        if value is None and self.optional:
            return None
        items = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
        if isinstance(items, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return tuple(int(v) for v in items)
        raise ArgumentError(op=op, arg=arg, expected="an int or a list of ints", found=repr(value))


class _TorchObject:
    """The value check of a ScalarType / Layout / Device / MemoryFormat / Generator argument:
    the torch object itself or its name; torch gets the object.
    """

    __slots__ = ("kind", "optional")

    def __init__(self, kind: str, optional: bool) -> None:
        self.kind = kind
        self.optional = optional

    def __call__(self, op: str, arg: str, value: Any) -> Any:
        import torch

        if value is None and self.optional:
            return None
        try:
            if self.kind == "ScalarTypeType":
                return value if isinstance(value, torch.dtype) else DType.parse(value).to_torch()
            if self.kind == "DeviceObjType":
                return torch.device(value)
            if self.kind == "GeneratorType":
                if isinstance(value, torch.Generator):
                    return value
            else:
                wanted = torch.layout if self.kind == "LayoutType" else torch.memory_format
                if isinstance(value, wanted):
                    return value
                if isinstance(value, str) and isinstance(getattr(torch, value, None), wanted):
                    return getattr(torch, value)
        except (ArgumentError, RuntimeError, TypeError):
            pass
        described = {
            "ScalarTypeType": "a dtype (torch.float16, or a name such as 'float16')",
            "DeviceObjType": "a device (torch.device, or a name such as 'cpu')",
            "GeneratorType": "a torch.Generator",
            "LayoutType": "a layout (torch.strided, or its name 'strided')",
            "MemoryFormatType": "a memory format (torch.channels_last, or a name such as 'channels_last')",
        }[self.kind]
        raise ArgumentError(
            op=op, arg=arg, expected=described + (" or None" if self.optional else ""), found=repr(value)
        )


def _build_schema(qualified_name: str, torch_schema: Any) -> tuple[str, Schema]:
    """The opcore schema text (what define_op parses), and the schema with torch's own defaults and
    value checks patched in where the text cannot hold them.
    """
    from opcore.schema import parse_schema

    converted: list[_Converted] = []
    texts: list[str] = []
    star = False
    for argument in torch_schema.arguments:
        item = _convert_argument(argument)
        if argument.kwarg_only and not star:
            texts.append("*")
            star = True
        converted.append(item)
        texts.append(item.text)
    returns = [str(r.real_type).replace("List[Tensor]", "Tensor[]") for r in torch_schema.returns]
    returns_text = returns[0] if len(returns) == 1 else "(" + ", ".join(returns) + ")"
    text = f"{qualified_name}({', '.join(texts)}) -> {returns_text}"
    schema = parse_schema(text)
    if not any(c.convert is not None or c.default is not NO_DEFAULT for c in converted):
        return text, schema
    arguments = list(schema.arguments)
    checks = list(schema._checks)
    meta_checks = list(schema._meta_checks)
    for i, item in enumerate(converted):
        if item.default is not NO_DEFAULT:
            arguments[i] = replace(arguments[i], default=item.default)
        if item.convert is not None:
            checks[i] = meta_checks[i] = item.convert
    return text, replace(schema, arguments=tuple(arguments), _checks=tuple(checks), _meta_checks=tuple(meta_checks))


# --- the contract factory ------------------------------------------------------------------------


def aten_contract(name: str) -> OpContract | None:
    """The contract of ``aten.<name>[.<overload>]`` (the ``"aten."`` namespace factory), or None
    when ATen has no op of that name.

    >>> aten_contract("aten.relu").schema                                            # doctest: +SKIP
    aten.relu(Tensor self) -> Tensor
    """
    overload = find_overload(name)
    if overload is None:
        return None
    torch_schema = overload._schema
    qualified = f"aten.{torch_schema.name.removeprefix('aten::')}.{overload._overloadname}"
    problem = _problem(torch_schema)
    if problem is not None:
        raise ArgumentError(f"{qualified} cannot run through opcore: {problem}")
    try:
        text, schema = _build_schema(name, torch_schema)
    except ArgumentError as error:
        raise ArgumentError(f"{qualified} ({torch_schema}): {error}") from None
    op = AtenOp(
        name=name,
        overload=overload,
        qualified=qualified,
        n_positional=schema.n_positional,
        kwarg_only=tuple(a.name for a in schema.arguments if a.kwarg_only),
    )
    _OPS[name] = op
    contract = define_op(
        text,  # parsed again by define_op; the schema with torch's defaults and checks replaces it below
        meta=_MetaFunction(op),
        doc=f"torch.ops.{qualified} through the ATen fallback: {torch_schema}",
        tags=("aten",),
    )
    return replace(contract, schema=schema, source=f"torch.ops.{qualified}")


class _MetaFunction:
    """Runs the overload on meta tensors: output shapes and dtypes, and torch's own input checks."""

    __slots__ = ("op",)

    def __init__(self, op: AtenOp) -> None:
        self.op = op

    def __call__(self, *args: Any) -> TensorMeta | tuple[TensorMeta, ...]:
        device = _first_device(args)
        try:
            out = _call(self.op, tuple(_to_meta(a) for a in args))
        except NotImplementedError:
            # no meta kernel: the output shape depends on the data (nonzero, masked_select, unique)
            out = _fake_call(self.op, args)
        except Exception as error:
            raise _input_error(self.op, error) from None
        return _metas_of(self.op, out, device)


def _first_device(args: Iterable[Any]) -> Any:
    for value in args:
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, TensorMeta):
                return item.device
    raise ArgumentError("was called without any tensor", fix="pass at least one tensor")


def _to_meta(value: Any) -> Any:
    import torch

    if isinstance(value, TensorMeta):
        dtype = value.dtype.to_torch()
        if value.strides is not None and all(s >= 0 for s in value.strides):
            return torch.empty_strided(value.shape, value.strides, dtype=dtype, device="meta")
        return torch.empty(value.shape, dtype=dtype, device="meta")
    if isinstance(value, tuple):
        return tuple(_to_meta(v) for v in value)
    return value


def _call(op: AtenOp, args: tuple[Any, ...]) -> Any:
    n = op.n_positional
    if len(args) == n:
        return op.overload(*args)
    return op.overload(*args[:n], **dict(zip(op.kwarg_only, args[n:])))


def _fake_call(op: AtenOp, args: tuple[Any, ...]) -> Any:
    """Shapes of a data-dependent op through torch's fake tensors; unknown sizes become -1."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            fake = tuple(_to_fake(mode, a) for a in args)
            return _call(op, fake)
    except Exception as error:
        if isinstance(error, NotImplementedError):
            raise NoKernelError(
                f"torch has neither a meta nor a fake implementation of {op.qualified}, so opcore cannot "
                f"infer its outputs ({_first_line(error)})",
                op=op.name,
                fix=f"call torch.ops.{op.qualified} directly",
            ) from None
        raise _input_error(op, error) from None


def _to_fake(mode: Any, value: Any) -> Any:
    import torch

    if isinstance(value, TensorMeta):
        return mode.from_tensor(torch.empty(value.shape, dtype=value.dtype.to_torch()))
    if isinstance(value, tuple):
        return tuple(_to_fake(mode, v) for v in value)
    return value


# Outputs whose size torch's eager kernels decide otherwise than its meta kernels: the batch
# norms' saved statistics are [C] on meta (and on CUDA's cuDNN path) but empty ([0]) from the CPU
# kernel in inference (training=False, or the no_training / no_update variants). Their metas get
# sizes -1 ("known after the run", as a data-dependent size), so the result check accepts what
# the kernel really returns; rank and dtype are still checked. A new entry needs a test in
# tests/test_aten.py that runs the op eagerly and compares.
EAGER_SIZED_OUTPUTS: dict[str, tuple[int, ...]] = {
    "aten._native_batch_norm_legit_no_training.default": (1, 2),
    "aten.native_batch_norm.default": (1, 2),
    "aten._batch_norm_no_update.default": (1, 2, 3),
}


def _metas_of(op: AtenOp, out: Any, device: Any) -> TensorMeta | tuple[TensorMeta, ...]:
    if isinstance(out, (tuple, list)):
        metas = tuple(_meta_of_tensor(op, t, device) for t in out)
        sized = EAGER_SIZED_OUTPUTS.get(op.qualified, ())
        return tuple(replace(m, shape=(-1,) * len(m.shape)) if i in sized else m for i, m in enumerate(metas))
    return _meta_of_tensor(op, out, device)


def _meta_of_tensor(op: AtenOp, tensor: torch.Tensor, device: Any) -> TensorMeta:
    shape = tuple(size if isinstance(size, int) else -1 for size in tensor.shape)  # -1: known after the run
    try:
        dtype = DType.from_torch(tensor.dtype)
    except ArgumentError:
        raise DTypeError(
            f"{op.qualified} would return {tensor.dtype}, which opcore does not represent",
            op=op.name,
            fix=f"call torch.ops.{op.qualified} directly",
        ) from None
    return TensorMeta(shape, dtype, device)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


_SHAPE_WORDS = ("size", "shape", "dimension", "dim ", "broadcast", "out of range", "numel", "elements")
_DTYPE_WORDS = ("dtype", "scalar type", "not implemented for", "expected scalar", "must be long", "integer tensor")


def _input_error(op: AtenOp, error: BaseException) -> OpcoreError:
    """torch's refusal of these inputs as the opcore error of the same meaning."""
    if isinstance(error, OpcoreError):
        if error.op is None:
            error.op = op.name
        return error
    message = f"torch.ops.{op.qualified} refused the inputs: {_first_line(error)}"
    fix = f"check the call against the schema {op.overload._schema}"
    lowered = message.lower()
    if isinstance(error, (TypeError, ValueError)) and not isinstance(error, IndexError):
        return ArgumentError(message, op=op.name, fix=fix)
    if any(word in lowered for word in _DTYPE_WORDS):
        return DTypeError(message, op=op.name, fix=fix)
    if isinstance(error, IndexError) or any(word in lowered for word in _SHAPE_WORDS):
        return ShapeError(message, op=op.name, fix=fix)
    return ArgumentError(message, op=op.name, fix=fix)


# --- kernels -------------------------------------------------------------------------------------


def kernel_factory(device_type: DeviceType | str) -> Callable[[OpContract], Iterable[Kernel]]:
    """The ``"aten."`` kernel factory of a torch backend for ``device_type``.

    >>> registrar.add_kernel_factory("aten.", kernel_factory("cpu"))                # doctest: +SKIP
    """
    device = DeviceType(device_type)

    def aten_kernels(contract: OpContract) -> Iterable[Kernel]:
        op = _OPS.get(contract.name)
        if op is None or contract.source != f"torch.ops.{op.qualified}":
            return ()  # not made by aten_contract: another plugin's "aten." op
        return (
            Kernel(
                op=contract.name,
                fn=_kernel(op, device),
                dtypes=ALL_DTYPES,
                device_type=device,
                array_kind=ArrayKind.TORCH,
                label=FALLBACK_LABEL,
                source=f"torch.ops.{op.qualified}",
            ),
        )

    return aten_kernels


# Overloads whose ATen kernel kills the process on some input (a native trap, not an exception):
# they run through the contract kernel that decides that input first. aten.div's truncating integer
# kernel executes idiv on INT_MIN / -1, which raises SIGFPE (torch 2.13, int32 and int64 alike).
_GUARDED = {"aten.div.Tensor_mode", "aten.div.Scalar_mode"}


def _kernel(op: AtenOp, device: DeviceType) -> Callable[..., Any]:
    if op.qualified in _GUARDED:
        return _guarded_div(op, device)
    overload = op.overload
    n = op.n_positional
    names = op.kwarg_only
    many = any(r.real_type.kind() == "ListType" for r in overload._schema.returns)

    def run_aten(*args: Any) -> Any:
        try:
            if len(args) == n:
                out = overload(*args)
            else:
                out = overload(*args[:n], **dict(zip(names, args[n:])))
        except (RuntimeError, IndexError, ValueError, TypeError) as error:
            raise _run_error(op, device, error) from None
        return tuple(out) if many else out

    run_aten.__qualname__ = f"aten_kernel[{op.qualified}]"
    return run_aten


def _guarded_div(op: AtenOp, device: DeviceType) -> Callable[..., Any]:
    from opcore.torchkit.torch_kernels import div

    def run_aten(x: Any, other: Any, rounding_mode: str | None = None) -> Any:
        try:
            return div(x, other, rounding_mode)
        except (RuntimeError, IndexError, ValueError, TypeError) as error:
            raise _run_error(op, device, error) from None

    run_aten.__qualname__ = f"aten_kernel[{op.qualified}]"
    return run_aten


def _run_error(op: AtenOp, device: DeviceType, error: BaseException) -> OpcoreError:
    text = _first_line(error)
    if isinstance(error, NotImplementedError) or "not implemented for" in text:
        # torch has no kernel for this dtype on this device: hand over to the next candidate
        return Unsupported(f"torch has no {device.value} kernel for these inputs: {text}")
    return _input_error(op, error)


# --- by-name fallback for built-in ops -----------------------------------------------------------


class _BuiltinFallback:
    """``builtin_fallback.<op>``: a kernel for the built-in op ``<op>`` that calls ``torch.ops.aten.<op>``
    with the bound arguments (positional ones by position, keyword-only ones by name), letting
    torch pick the overload. A torch backend registers it for built-in ops it has no own kernel for.
    """

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op.startswith("__"):
            raise AttributeError(op)
        import torch

        from opcore.opset import BUILTIN_CONTRACTS

        schema = next(c.schema for c in BUILTIN_CONTRACTS if c.name == op)
        n = schema.n_positional
        names = tuple(a.name for a in schema.arguments if a.kwarg_only)
        packet = getattr(torch.ops.aten, op)

        def run_by_name(*args: Any) -> Any:
            try:
                return packet(*args[:n], **dict(zip(names, args[n:])))
            except (RuntimeError, IndexError, ValueError, TypeError) as error:
                if isinstance(error, NotImplementedError) or "not implemented for" in str(error):
                    raise Unsupported(f"torch.ops.aten.{op}: {_first_line(error)}") from None
                raise ArgumentError(f"torch.ops.aten.{op} refused the inputs: {_first_line(error)}", op=op) from None

        run_by_name.__qualname__ = f"builtin_fallback.{op}"
        return run_by_name


builtin_fallback = _BuiltinFallback()
