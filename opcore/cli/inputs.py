"""Example inputs for ``opcore explain`` and ``opcore bench`` from command-line text.

``--shapes 32x4096,4096x4096 --dtype bfloat16`` gives one tensor per shape, to the op's tensor
arguments in schema order (``linear(x, w, b?)``: x then w; b stays None). Per shape:

- ``32x4096``: the shape; ``scalar`` (or ``()``) for a 0-d tensor; ``-`` (or ``none``) skips an
  optional tensor; ``2x3+2x5``: a list of tensors (``cat``); ``4x8:int64``: a dtype for this one.

Other arguments come from repeatable ``--attr name=value`` (a Python literal, else a string);
a tensor argument given as ``--attr other=2.0`` is a scalar and takes no shape.

A creation op (no tensor argument: zeros, full, arange) takes its ``size`` from the one shape given
(``zeros --shapes 2x3``), its dtype attribute from ``--dtype`` when given (else the op's default, as
torch's), and its ``device`` attribute from ``--device``; its other arguments from ``--attr``
(``arange --attr start=0 --attr end=10``).

Arrays are numpy, filled from a seeded generator; torch tensors for bfloat16 (numpy has none),
with ``--torch``, or on ``--device cuda``.

>>> call = plan_call(contract_of("linear"), "2x8,4x8", "float32", [])   # doctest: +SKIP
>>> [name for name, _ in call.tensors]                                   # doctest: +SKIP
['x', 'w']
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy

from opcore.contracts import OpContract
from opcore.errors import ArgumentError, DeviceError, OpcoreError
from opcore.types import Device, DeviceType, DType

__all__ = ["CallSpec", "TensorSpec", "add_input_arguments", "build_inputs", "parse_attr", "plan_call"]

# Integers are drawn from [0, INT_HIGH): valid indices for any embedding table of at least this many rows.
INT_HIGH = 4
_SKIP = {"-", "none", "None"}
_SCALAR = {"scalar", "()", "0d"}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: DType

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True, slots=True)
class CallSpec:
    """What to build. tensors: argument name -> TensorSpec, a tuple of them (a list argument) or
    None (an optional tensor left out); attrs: argument name -> value from --attr.
    """

    op: str
    tensors: tuple[tuple[str, TensorSpec | tuple[TensorSpec, ...] | None], ...]
    attrs: tuple[tuple[str, Any], ...]
    use_torch: bool
    device: Device

    @property
    def array_kind(self) -> str:
        return "torch" if self.use_torch else "numpy"


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments explain and bench share: the op and how to build its inputs."""
    parser.add_argument("op", help="the op's name, as `opcore ops` lists it (e.g. linear)")
    parser.add_argument(
        "--shapes",
        default="",
        metavar="SHAPES",
        help="one shape per tensor argument, in schema order, comma-separated: 32x4096,4096x4096; "
        "'-' skips an optional tensor, '+' joins a list (2x3+2x5), ':DTYPE' sets one tensor's dtype (4x8:int64); "
        "a creation op's size (zeros --shapes 2x3)",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="dtype of every tensor without its own (default float32); a creation op's dtype (default: the op's)",
    )
    parser.add_argument(
        "--attr",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another argument, as a Python literal (dim=-1, approximate=tanh, normalized_shape=[4096]); repeatable",
    )
    parser.add_argument("--torch", action="store_true", help="pass torch tensors instead of numpy arrays")
    parser.add_argument("--device", default="cpu", help="device of the tensors: cpu (default), cuda, cuda:1 (torch)")


def parse_attr(text: str) -> tuple[str, Any]:
    """``name=value`` with the value read as a Python literal; words stay strings.

    >>> parse_attr("dim=-1"), parse_attr("approximate=tanh"), parse_attr("keep=true")
    (('dim', -1), ('approximate', 'tanh'), ('keep', True))
    """
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ArgumentError(arg="--attr", expected="NAME=VALUE, such as dim=-1", found=repr(text))
    raw = raw.strip()
    words = {"true": True, "false": False, "none": None}
    if raw.lower() in words:
        return name, words[raw.lower()]
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = raw
    if isinstance(value, list):
        value = tuple(value)
    return name, value


def _dtype(op: str, text: str, where: str) -> DType:
    try:
        return DType.parse(text)
    except ArgumentError as error:
        raise ArgumentError(op=op, arg=where, expected=error.expected, found=error.found) from None


def _parse_one(op: str, token: str, dtype: DType) -> TensorSpec:
    shape_text, _, dtype_text = token.partition(":")
    shape_text = shape_text.strip()
    tensor_dtype = _dtype(op, dtype_text.strip(), "--shapes") if dtype_text else dtype
    if shape_text.lower() in _SCALAR:
        return TensorSpec((), tensor_dtype)
    try:
        shape = tuple(int(size) for size in shape_text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(size < 0 for size in shape):
        raise ArgumentError(
            op=op,
            arg="--shapes",
            expected="sizes joined by 'x' (32x4096), 'scalar', '-' or a list joined by '+'",
            found=repr(token),
        )
    return TensorSpec(shape, tensor_dtype)


def plan_call(contract: OpContract, shapes: str, dtype: str | None, attr_texts: Sequence[str]) -> CallSpec:
    """Match shapes to the contract's tensor arguments; check what the command line alone can show.
    dtype None: float32 tensors, and a creation op's own default dtype."""
    op = contract.name
    default_dtype = _dtype(op, dtype or "float32", "--dtype")
    attrs: dict[str, Any] = {}
    for text in attr_texts:
        name, value = parse_attr(text)
        if name in attrs:
            raise ArgumentError(op=op, arg="--attr", expected="each name once", found=f"{name} given twice")
        attrs[name] = value
    if contract.creates:
        return _plan_creation(contract, shapes, dtype, attrs)
    arguments = [
        a
        for i, a in enumerate(contract.schema.arguments)
        if i in contract.schema.tensor_positions and a.name not in attrs
    ]
    tokens = [t.strip() for t in shapes.split(",")] if shapes.strip() else []
    names = ", ".join(a.name + ("?" if not a.required else "") for a in arguments)
    if len(tokens) > len(arguments):
        raise ArgumentError(
            op=op,
            arg="--shapes",
            expected=f"at most {len(arguments)} shape(s), for {names}",
            found=f"{len(tokens)}: {shapes!r}",
        )
    tensors: list[tuple[str, TensorSpec | tuple[TensorSpec, ...] | None]] = []
    for argument, token in zip(arguments, tokens):
        if token in _SKIP:
            if argument.required:
                raise ArgumentError(op=op, arg=argument.name, expected="a shape (it is required)", found=repr(token))
            tensors.append((argument.name, None))
        elif argument.type.is_list:
            tensors.append((argument.name, tuple(_parse_one(op, part, default_dtype) for part in token.split("+"))))
        elif "+" in token:
            raise ArgumentError(op=op, arg=argument.name, expected="one shape (it is not a list)", found=repr(token))
        else:
            tensors.append((argument.name, _parse_one(op, token, default_dtype)))
    missing = [a.name for a in arguments[len(tokens) :] if a.required]
    if missing:
        raise ArgumentError(
            op=op,
            arg="--shapes",
            expected=f"a shape for each of {names} (? = optional)",
            found=f"none for {', '.join(missing)}",
            fix=f"the schema is {contract.schema}",
        )
    return CallSpec(op, tuple(tensors), tuple(attrs.items()), False, Device(DeviceType.CPU))


def _plan_creation(contract: OpContract, shapes: str, dtype: str | None, attrs: dict[str, Any]) -> CallSpec:
    """A creation op: the one shape is its ``size``, --dtype its dtype attribute (when given)."""
    op = contract.name
    token = shapes.strip()
    if token:
        if "size" not in contract.schema.names or "size" in attrs or "," in token or "+" in token:
            raise ArgumentError(
                op=op,
                arg="--shapes",
                expected=f"no shapes ({op} takes no tensor; its arguments come from --attr)"
                if "size" not in contract.schema.names
                else "one shape, its size (zeros --shapes 2x3), or size from --attr, not both",
                found=repr(shapes),
                fix=f"the schema is {contract.schema}",
            )
        attrs["size"] = _parse_one(op, token, DType.FLOAT32).shape
    if dtype is not None and contract.dtype_arg is not None and contract.dtype_arg not in attrs:
        attrs[contract.dtype_arg] = _dtype(op, dtype, "--dtype").value
    return CallSpec(op, (), tuple(attrs.items()), False, Device(DeviceType.CPU))


def with_array_options(call: CallSpec, use_torch: bool, device: str) -> CallSpec:
    """Torch tensors when asked, for bfloat16, or off the CPU; a creation op's device attribute
    from ``device`` (unless --attr gave it)."""
    parsed = Device.parse(device)
    needs_torch = use_torch or parsed.type is not DeviceType.CPU or any(s.dtype is DType.BFLOAT16 for s in _specs(call))
    attrs = call.attrs
    if not call.tensors and device != "cpu" and "device" not in dict(attrs) and _takes_device(call.op):
        attrs = (*attrs, ("device", str(parsed)))
    return CallSpec(call.op, call.tensors, attrs, needs_torch, parsed)


def _takes_device(op: str) -> bool:
    from opcore.runtime import runtime

    contract = runtime().ensure_loaded().registry.contract(op)
    return contract.creates and "device" in contract.schema.names


def _specs(call: CallSpec) -> list[TensorSpec]:
    found: list[TensorSpec] = []
    for _, value in call.tensors:
        if isinstance(value, TensorSpec):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend(value)
    return found


def _numpy_values(spec: TensorSpec, rng: numpy.random.Generator) -> numpy.ndarray:
    if spec.dtype.is_floating:
        return rng.standard_normal(spec.shape, dtype=numpy.float32)
    if spec.dtype is DType.BOOL:
        return rng.random(spec.shape) < 0.5
    return rng.integers(0, INT_HIGH, size=spec.shape)


def _make(spec: TensorSpec, call: CallSpec, rng: numpy.random.Generator) -> Any:
    values = _numpy_values(spec, rng)
    if not call.use_torch:
        return values.astype(spec.dtype.to_numpy())
    try:
        import torch
    except ImportError as error:
        raise OpcoreError(
            f"{spec.dtype.value} tensors and --torch/--device need torch, which is not installed",
            op=call.op,
            fix="pip install torch (CPU: --index-url https://download.pytorch.org/whl/cpu), or use a dtype numpy holds",
        ) from error
    tensor = torch.from_numpy(values).to(spec.dtype.to_torch())
    if call.device.type is DeviceType.CPU:
        return tensor
    try:
        return tensor.to(str(call.device))
    except (RuntimeError, AssertionError) as error:  # torch without CUDA raises AssertionError
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DeviceError(
            op=call.op, arg="--device", expected="a device torch can use here", found=f"{call.device} ({first})"
        ) from error


def build_inputs(call: CallSpec, seed: int = 0) -> dict[str, Any]:
    """The keyword arguments for opcore.explain / resolve / run: tensors, then attributes."""
    rng = numpy.random.default_rng(seed)
    kwargs: dict[str, Any] = {}
    for name, value in call.tensors:
        if value is None:
            kwargs[name] = None
        elif isinstance(value, tuple):
            kwargs[name] = [_make(spec, call, rng) for spec in value]
        else:
            kwargs[name] = _make(value, call, rng)
    kwargs.update(call.attrs)
    return kwargs


def prepare_call(args: argparse.Namespace) -> tuple[CallSpec, dict[str, Any]]:
    """From parsed explain/bench arguments: the plan and the built keyword arguments."""
    from opcore.runtime import runtime

    contract = runtime().ensure_loaded().registry.contract(args.op)
    call = with_array_options(plan_call(contract, args.shapes, args.dtype, args.attr), args.torch, args.device)
    return call, build_inputs(call)
