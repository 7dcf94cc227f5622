"""From a ``torch.export`` program to opcore's IR, with shapes and dtypes propagated.

Every ATen node becomes the opcore op that the mapping table names (``mapping.RULES``), or the ATen
fallback op ``aten.<name>.<overload>``. Its arguments are bound in that op's schema order and its
outputs' metas come from the op's meta function (the contract's; for ATen ops, torch's meta tensors),
run on the example's concrete sizes; the exporter's symbolic sizes are kept next to them (``dims``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

from opcore.contracts import OpContract
from opcore.errors import OpcoreError
from opcore.graph.aten_export import TRACES, SourceLinesWanted
from opcore.graph.errors import CaptureError
from opcore.graph.input_sizes import size_from_inputs
from opcore.graph.ir import (
    FACTORIES,
    SCALAR_OPS,
    Graph,
    Node,
    ValueInfo,
    ValueRef,
    aten_caller,
    python_step,
    refs_in,
    substitute,
)
from opcore.graph.mapping import RULES, map_arguments
from opcore.graph.signature import call_signature
from opcore.runtime import runtime
from opcore.types import Device, DType, TensorMeta

__all__ = ["lower"]

# nodes torch.export adds to check its own assumptions at run time; a plan checks shapes at plan time
_CHECKS = ("aten._assert_tensor_metadata", "aten._assert_scalar", "aten.sym_constrain_range", "aten._assert_async")
_PYTHON_SCALAR_OPS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.floordiv: "floordiv",
    operator.truediv: "truediv", operator.mod: "mod", operator.neg: "neg", operator.pow: "pow",
    operator.eq: "eq", operator.ne: "ne", operator.lt: "lt", operator.le: "le", operator.gt: "gt", operator.ge: "ge",
}  # fmt: skip
_CAPTURE = "opcore.graph.capture"
# a tensor's value read as a Python number (``.item()``, ``int(t)``): what follows depends on data
_DATA_SCALARS = ("aten.item.default", "aten._local_scalar_dense.default")


def lower(
    program: Any, example_flat: list[Any], constants: dict[str, Any], device: Device, *, state: bool = False
) -> tuple[Graph, dict[str, str]]:
    """The IR of an exported program (after ``run_decompositions``), and a note per node that did
    not map to its contract (why it runs as the ATen fallback).

    ``example_flat``: the user inputs, flattened; ``constants``: placeholder name -> tensor, to which
    factories of static sizes (arange, zeros, ...) are added, folded. state=True: the buffers the
    program mutates (a KV cache) become state inputs after the user inputs (``Graph.state``; taken
    out of ``constants``), written in place by the graph (opcore.graph.state); else a mutation is a
    CaptureError.
    """
    import torch

    rt = runtime().ensure_loaded()
    signature = program.graph_signature
    held = _state_placeholders(signature) if state else {}
    state_inputs: list[str] = []
    user_inputs = list(signature.user_inputs)
    values: dict[str, ValueInfo] = {}
    concrete: dict[str, Any] = {}  # value name -> TensorMeta or a Python scalar (the example's)
    env: dict[str, Any] = {}  # fx node name -> ValueRef, or a tuple of them (a multi-output node)
    nodes: list[Node] = []
    notes: dict[str, str] = {}
    inputs: list[str] = []
    constant_names: list[str] = []
    if len(example_flat) != len(user_inputs):
        raise CaptureError(
            f"the exported program takes {len(user_inputs)} inputs, the examples flatten to {len(example_flat)}",
            op=_CAPTURE,
        )
    # torch.export specializes non-tensor inputs (flags, numbers): the program keeps their values,
    # and a call must pass the same ones (Plan.flatten checks them)
    examples: dict[str, Any] = {}
    fixed: list[tuple[int, Any]] = []
    for position, (spec, value) in enumerate(zip(_user_input_specs(signature), example_flat)):
        name = getattr(spec.arg, "name", None)
        if name is None or not isinstance(value, torch.Tensor):
            fixed.append((position, getattr(spec.arg, "value", value)))
        else:
            examples[name] = value

    # values made at capture from static sizes only (see _fold), and the tensors forward() makes from
    # literals (torch.tensor(3), lifted as constants: no parameter or buffer, which a plan follows)
    literals = {spec.arg.name for spec in signature.input_specs if spec.kind.name == "CONSTANT_TENSOR"}
    folded: dict[str, Any] = {}
    for fx_node in program.graph.nodes:
        name = fx_node.name
        if fx_node.op == "placeholder":
            if name in examples:
                value = examples[name]
                inputs.append(name)
            elif name in held:
                value = constants.pop(name)
                state_inputs.append(name)
            elif name in constants:
                value = constants[name]
                constant_names.append(name)
                if name in literals:
                    folded[name] = value
            elif not fx_node.users:  # a specialized non-tensor input: its value is baked in
                continue
            else:
                raise CaptureError(
                    f"input {name!r} of the exported program is neither a user input nor a constant", op=_CAPTURE
                )
            if not isinstance(value, torch.Tensor):
                raise CaptureError(
                    f"input {name!r} is a {type(value).__name__}; a plan takes tensors only",
                    op=_CAPTURE,
                    fix="pass non-tensor settings to the model's constructor, not to forward()",
                )
            meta = TensorMeta.of(value).replace(device=device)
            values[name] = ValueInfo(name, meta, _dims(fx_node, meta.shape))
            concrete[name] = meta
            env[name] = ValueRef(name)
        elif fx_node.op == "call_function":
            value = _lower_call(rt, fx_node, env, values, concrete, nodes, notes, device, folded)
            # a factory of static sizes, or an op of such values only: constants now (by output name)
            for output, tensor in ({name: value} if not isinstance(value, dict) else value).items():
                if tensor is not None:
                    constants[output] = folded[output] = tensor
                    constant_names.append(output)
        elif fx_node.op == "output":
            outputs = tuple(_raw(arg, env) for arg in fx_node.args[0])
        else:
            raise CaptureError(f"node {name!r} is a {fx_node.op!r} node, which a plan cannot run", op=_CAPTURE)

    kinds = [spec.kind.name for spec in signature.output_specs]
    if any(kind != "USER_OUTPUT" for kind in kinds) and not (
        state and set(kinds) <= {"USER_OUTPUT", "BUFFER_MUTATION"}
    ):
        mutated = [spec.target for spec in signature.output_specs if spec.kind.name != "USER_OUTPUT"]
        raise CaptureError(
            f"the model mutates state in forward() ({', '.join(map(str, mutated))}); a plan is a pure function",
            op=_CAPTURE,
            fix="capture the model in eval() mode, without in-place updates of buffers; a decoder's KV cache: "
            "opcore.graph.capture_lm, which holds it as the plan's state",
        )
    if state:
        from opcore.graph.state import write_state

        place_of = {target: name for name, target in held.items()}
        writes = [
            (place_of[str(spec.target)], out)
            for spec, out in zip(signature.output_specs, outputs)
            if spec.kind.name == "BUFFER_MUTATION"
        ]
        nodes = write_state(nodes, values, writes)
    outputs = tuple(out for kind, out in zip(kinds, outputs) if kind == "USER_OUTPUT")
    # a constant no node reads: tied weights (an lm_head and its token table) are one tensor that
    # torch.export lifts under both names and the graph reads under one; a saved plan would hold it twice
    read = {name for node in nodes for name in node.refs()} | {ref.name for ref in refs_in(outputs)}
    graph = Graph(
        inputs=(*inputs, *state_inputs),
        constants=tuple(name for name in constant_names if name in read),
        nodes=tuple(nodes),
        outputs=outputs,
        values=values,
        fixed_inputs=tuple(fixed),
        sources={spec.arg.name: str(spec.target) for spec in signature.input_specs if spec.target is not None},
        state=tuple(state_inputs),
        signature=_with_state(
            call_signature(program, [position for position, _ in fixed], len(example_flat)), state_inputs
        ),
    )
    return graph, notes


def _with_state(signature: Any, state_inputs: list[str]) -> Any:
    """The call signature with the state inputs labelled by their own names (they follow the user's)."""
    from dataclasses import replace

    return replace(signature, labels=(*signature.labels, *state_inputs)) if state_inputs else signature


def _state_placeholders(signature: Any) -> dict[str, str]:
    """Placeholder name -> buffer name, for every buffer the program mutates."""
    mutated = {str(spec.target) for spec in signature.output_specs if spec.kind.name == "BUFFER_MUTATION"}
    return {
        spec.arg.name: str(spec.target)
        for spec in signature.input_specs
        if spec.kind.name == "BUFFER" and str(spec.target) in mutated
    }


def _user_input_specs(signature: Any) -> list[Any]:
    return [spec for spec in signature.input_specs if spec.kind.name == "USER_INPUT"]


def _lower_call(
    rt: Any,
    fx_node: Any,
    env: dict[str, Any],
    values: dict[str, ValueInfo],
    concrete: dict[str, Any],
    nodes: list[Node],
    notes: dict[str, str],
    device: Device,
    folded: Mapping[str, Any],
) -> Any:
    """Lower one call; returns a tensor when the node was folded into a constant."""
    import torch

    target = fx_node.target
    name = fx_node.name
    if target is operator.getitem:
        source, index = fx_node.args
        env[name] = env[source.name][index]
        return
    if isinstance(target, torch._ops.OpOverload):
        qualified = f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
        if qualified.startswith(_CHECKS):
            return
        if qualified in _DATA_SCALARS:
            raise CaptureError(
                f"node {name!r} ({qualified}) reads a tensor's value as a Python number (.item(), int(tensor)) "
                f"in {_source_line(fx_node)}; a plan computes sizes from its inputs' shapes, never from their values",
                op=_CAPTURE,
                fix="compute that number from shapes, or keep it out of forward(); where a transformers cache "
                "is read this way (MPT slices its ALiBi bias by the cache's length), capture without the cache "
                "(config.use_cache=False) with opcore.graph.capture",
            )
        if qualified == "aten.sym_size.int" and size_from_inputs(fx_node, values, concrete, nodes):
            env[name] = ValueRef(name)  # computed from an input's size: no partition waits for it
            return
        if qualified in ("aten.sym_size.int", "aten.sym_numel.default"):
            _scalar_node(fx_node, qualified.split(".")[1], env, values, concrete, nodes)
            return
        if target.namespace not in ("aten", "opcore"):  # opcore: opcore's own torch ops (opcore.graph.experts)
            raise CaptureError(
                f"node {name!r} calls {qualified}, which is not an ATen op; a plan runs ATen and opcore ops",
                op=_CAPTURE,
            )
        if not any("Tensor" in str(argument.type) for argument in target._schema.arguments):
            return _factory_node(rt, fx_node, target, qualified, env, values, concrete, nodes, notes, device)
        return _op_node(rt, fx_node, target, qualified, env, values, concrete, nodes, notes, folded)
    scalar = _PYTHON_SCALAR_OPS.get(target) or str(getattr(target, "__name__", ""))
    if scalar in SCALAR_OPS and not isinstance(fx_node.meta.get("val"), torch.Tensor):
        _scalar_node(fx_node, scalar, env, values, concrete, nodes)
        return
    raise CaptureError(
        f"node {name!r} calls {getattr(target, '__qualname__', target)!r}, which a plan cannot run",
        op=_CAPTURE,
        fix="capture a submodule without it (capture(..., submodule='path')), or rewrite that part of forward()",
    )


def _source_line(fx_node: Any) -> str:
    """Where the model's code made ``fx_node``: its innermost frame ("modeling_mpt.py line 119:
    position_bias = ..."), from the exporter's stack trace; "forward()" where none was recorded;
    SourceLinesWanted where the program was exported without them (opcore.graph.aten_export)."""
    lines = [line.strip() for line in str(fx_node.meta.get("stack_trace") or "").strip().splitlines()]
    module = fx_node.graph.owning_module
    if not lines and module is not None and module.meta.get(TRACES) is False:
        raise SourceLinesWanted(fx_node.name)  # exported without stack traces: again with them
    frames = [i for i, line in enumerate(lines) if line.startswith("File ")]
    if not frames:
        return "forward()"
    where = lines[frames[-1]]
    file, _, rest = where.partition(", line ")
    source = file.rsplit("/", 1)[-1].strip('"')
    place = f"{source} line {rest.split(',')[0]}"
    code = lines[frames[-1] + 1] if frames[-1] + 1 < len(lines) else ""
    return f"{place}: {code}" if code else place


def _factory_node(
    rt: Any,
    fx_node: Any,
    target: Any,
    qualified: str,
    env: dict[str, Any],
    values: dict[str, ValueInfo],
    concrete: dict[str, Any],
    nodes: list[Node],
    notes: dict[str, str],
    device: Device,
) -> Any:
    """arange, zeros, full...: no tensor input. Static sizes fold into a constant (returned); sizes
    computed at run time make the creation op the mapping names (on the plan's device), else a
    Python step from the closed FACTORIES table."""
    name = fx_node.name
    aten_args = _aten_arguments(
        target, [_raw(a, env) for a in fx_node.args], {k: _raw(v, env) for k, v in fx_node.kwargs.items()}
    )
    if "device" in aten_args:
        aten_args["device"] = _torch_device(device)  # the plan's device, not the exporter's
    ordered = tuple(aten_args.get(a.name) for a in target._schema.arguments)
    if not any(True for _ in refs_in(ordered)):
        value = aten_caller(target)(*ordered)
        meta = TensorMeta.of(value)
        values[name] = ValueInfo(name, meta, tuple(meta.shape))
        concrete[name] = meta
        env[name] = ValueRef(name)
        return value
    lowered = _mapped(rt, fx_node, qualified, aten_args, concrete, notes)  # zeros, arange, ...: a creation op
    if lowered is not None:
        _add_node(fx_node, qualified, lowered, env, values, concrete, nodes)
        return None
    if qualified not in FACTORIES:
        raise CaptureError(
            f"node {name!r} ({qualified}) makes a tensor from sizes known only at run time; opcore runs only "
            + ", ".join(sorted(FACTORIES))
            + " that way",
            op=_CAPTURE,
        )
    example = python_step(qualified)(*substitute(ordered, concrete.__getitem__))
    meta = TensorMeta.of(example)
    values[name] = ValueInfo(name, meta, _dims_of(fx_node.meta.get("val"), meta.shape))
    concrete[name] = meta
    env[name] = ValueRef(name)
    nodes.append(Node(name, qualified, qualified, ordered, (name,), True))
    return None


def _torch_device(device: Device) -> Any:
    import torch

    return torch.device(str(device))


def _scalar_node(
    fx_node: Any,
    op: str,
    env: dict[str, Any],
    values: dict[str, ValueInfo],
    concrete: dict[str, Any],
    nodes: list[Node],
) -> None:
    name = fx_node.name
    args = tuple(_raw(arg, env) for arg in fx_node.args)
    example = _shape_op(op)(*substitute(args, concrete.__getitem__))
    # a size's symbolic value ("s0", "2*s0") where the exporter recorded one: rewrites compare it
    # with the dims of tensors
    symbol = _symbol(fx_node.meta["val"]) if _is_symint(fx_node.meta.get("val")) else None
    values[name] = ValueInfo(name, None, (symbol,) if isinstance(symbol, str) else (), example)
    concrete[name] = example
    env[name] = ValueRef(name)
    nodes.append(Node(name, op, "python" if op not in ("sym_size", "sym_numel") else f"aten.{op}", args, (name,), True))


def _shape_op(op: str) -> Any:
    """SCALAR_OPS[op], working on TensorMeta as on tensors (sizes from .shape)."""
    if op == "sym_numel":
        return lambda x: math.prod(x.shape)
    return SCALAR_OPS[op]


def _op_node(
    rt: Any,
    fx_node: Any,
    target: Any,
    qualified: str,
    env: dict[str, Any],
    values: dict[str, ValueInfo],
    concrete: dict[str, Any],
    nodes: list[Node],
    notes: dict[str, str],
    folded: Mapping[str, Any],
) -> Any:
    """An op with tensor inputs: a constant (returned) when they are all values folded at capture, else
    the node its mapping row names, else its ATen fallback."""
    name = fx_node.name
    aten_args = _aten_arguments(
        target, [_raw(a, env) for a in fx_node.args], {k: _raw(v, env) for k, v in fx_node.kwargs.items()}
    )
    value = _fold(target, aten_args, folded)
    if value is not None:
        # one output: named as the node; several (meshgrid, split): "name.0", "name.1", ... as _add_node names them
        made = {name: value} if not isinstance(value, tuple) else {f"{name}.{i}": v for i, v in enumerate(value)}
        for output, tensor in made.items():
            meta = TensorMeta.of(tensor)
            values[output] = ValueInfo(output, meta, tuple(meta.shape))
            concrete[output] = meta
        env[name] = ValueRef(name) if not isinstance(value, tuple) else tuple(ValueRef(o) for o in made)
        return made
    _same_device(fx_node, aten_args)
    lowered = _mapped(rt, fx_node, qualified, aten_args, concrete, notes)
    if lowered is None:
        try:
            lowered = _bind(rt.registry.contract(qualified), aten_args, concrete)
        except OpcoreError as error:
            complex_value = _complex_dtype(fx_node)
            if complex_value is not None:
                raise CaptureError(
                    f"node {name!r} ({qualified}) computes {complex_value} values: opcore represents no complex "
                    "dtype (nor do ONNX Runtime's and OpenVINO's kernels take one)",
                    op=_CAPTURE,
                    fix="write the complex arithmetic in real pairs (a rotary embedding's (cos, sin) per frequency, "
                    "as opcore.graph.complex_rotary does for Llama 4's and DeepSeek-V2's), or keep that part of the "
                    "model outside the captured module",
                ) from error
            raise CaptureError(f"node {name!r} ({qualified}): {error}", op=_CAPTURE) from error
    _add_node(fx_node, qualified, lowered, env, values, concrete, nodes)
    return None


def _complex_dtype(fx_node: Any) -> str | None:
    """The complex dtype of a value ``fx_node`` makes or reads ("torch.complex64"), else None."""
    import torch

    def complex_of(value: Any) -> str | None:
        dtype = getattr(value, "dtype", None)
        return str(dtype) if isinstance(dtype, torch.dtype) and dtype.is_complex else None

    outs = fx_node.meta.get("val")
    found = [complex_of(v) for v in (outs if isinstance(outs, (tuple, list)) else (outs,))]
    found += [complex_of(a.meta.get("val")) for a in fx_node.all_input_nodes]
    return next((f for f in found if f is not None), None)


# the most elements a value folded at capture may have: a bigger one (a causal mask of a long
# sequence) is computed per call, as the model does, rather than held in the plan
_FOLDED_ELEMENTS = 1 << 20


def _fold(target: Any, aten_args: Mapping[str, Any], folded: Mapping[str, Any]) -> Any:
    """The op's result computed now, where every tensor it reads was folded at capture (made from
    static sizes: ``arange(16)``, and ops of those): relative positions and their buckets (T5,
    DeBERTa), a roll's indices, a mask's pattern. Weights never fold (a plan follows their changes),
    nor do graph inputs. A tensor, a tuple of them (meshgrid, split), or None where it does not fold:
    another input, a random op, results of more than _FOLDED_ELEMENTS in all."""
    import torch

    refs = list(refs_in(tuple(aten_args.values())))
    if not refs or any(ref.name not in folded for ref in refs) or torch.Tag.nondeterministic_seeded in target.tags:
        return None
    ordered = tuple(aten_args.get(a.name) for a in target._schema.arguments)
    value = aten_caller(target)(*substitute(ordered, folded.__getitem__))
    results = list(value) if isinstance(value, (tuple, list)) else [value]
    if not results or not all(isinstance(v, torch.Tensor) for v in results):
        return None
    if sum(v.numel() for v in results) > _FOLDED_ELEMENTS:
        return None
    # each its own memory (a view of another constant, expanded, would share or repeat it)
    owned = tuple(v.clone(memory_format=torch.contiguous_format) for v in results)
    return owned if isinstance(value, (tuple, list)) else owned[0]


def _same_device(fx_node: Any, aten_args: dict[str, Any]) -> None:
    """A ``device=`` that names the device its input is on already (torch.export writes the example's
    device into ``mask.to(torch.bool)``) becomes None: the op then maps as the dtype change it is."""
    import torch

    device = aten_args.get("device")
    source = fx_node.args[0] if fx_node.args else None
    val = getattr(source, "meta", {}).get("val")
    if device is not None and isinstance(val, torch.Tensor) and torch.device(device) == val.device:
        aten_args["device"] = None


def _mapped(
    rt: Any,
    fx_node: Any,
    qualified: str,
    aten_args: dict[str, Any],
    concrete: dict[str, Any],
    notes: dict[str, str],
) -> tuple[str, tuple[Any, ...], tuple[TensorMeta, ...]] | None:
    """The node as the opcore op its mapping row names, or None (with the reason in ``notes``)."""
    name = fx_node.name
    rule = RULES.get(qualified)
    if rule is None:
        return None
    if rule.op not in rt.registry.contracts:
        notes[name] = f"{rule.op!r} is not a registered op in this process"
        return None
    mapped = map_arguments(rule, aten_args, lambda tensor: substitute(tensor, concrete.__getitem__))
    if isinstance(mapped, str):
        notes[name] = mapped
        return None
    try:
        lowered = _bind(rt.registry.contract(rule.op), mapped, concrete)
        _agree(lowered[2], fx_node, rule.op)
    except OpcoreError as error:
        notes[name] = f"{rule.op} refused the arguments: {error}"
        return None
    if _uses_more_outputs(fx_node, len(lowered[2])):
        # an ATen op with extra outputs (batch norm's saved statistics, max pooling's
        # indices) maps to a contract only where those go unused
        notes[name] = f"{rule.op} gives the first of {qualified}'s outputs only, and the others are used"
        return None
    return lowered


def _add_node(
    fx_node: Any,
    qualified: str,
    lowered: tuple[str, tuple[Any, ...], tuple[TensorMeta, ...]],
    env: dict[str, Any],
    values: dict[str, ValueInfo],
    concrete: dict[str, Any],
    nodes: list[Node],
) -> None:
    name = fx_node.name
    op, args, out_metas = lowered
    val = fx_node.meta.get("val")
    if len(out_metas) == 1:
        outputs: tuple[str, ...] = (name,)
        # read through getitem 0 where the ATen op has more outputs (unused: see _uses_more_outputs)
        env[name] = (ValueRef(name),) if isinstance(val, (tuple, list)) else ValueRef(name)
        vals = [val[0] if isinstance(val, (tuple, list)) else val]
    else:
        outputs = tuple(f"{name}.{i}" for i in range(len(out_metas)))
        env[name] = tuple(ValueRef(o) for o in outputs)
        vals = list(val) if isinstance(val, (tuple, list)) else [None] * len(outputs)
    for out, meta, v in zip(outputs, out_metas, vals):
        values[out] = ValueInfo(out, meta, _dims_of(v, meta.shape))
        concrete[out] = meta
    nodes.append(Node(name, op, qualified, args, outputs))


def _bind(
    contract: OpContract, raw: Mapping[str, Any], concrete: Mapping[str, Any]
) -> tuple[str, tuple[Any, ...], tuple[TensorMeta, ...]]:
    """(op, IR arguments in schema order, output metas) for keyword arguments holding ValueRefs."""
    example = {k: substitute(v, concrete.__getitem__) for k, v in raw.items()}
    bound = contract.schema.bind((), example, metas=True)
    try:
        out = contract.meta(*bound)
    except OpcoreError as error:
        if error.op is None:
            error.op = contract.name
        raise
    args = tuple(
        substitute(raw[n], ValueRef) if n in raw and any(True for _ in refs_in(raw[n])) else value
        for n, value in zip(contract.schema.names, bound)
    )
    return contract.name, args, out if isinstance(out, tuple) else (out,)


def _uses_more_outputs(fx_node: Any, count: int) -> bool:
    """Whether the node's users read outputs beyond the first ``count`` (the contract's)."""
    val = fx_node.meta.get("val")
    if not isinstance(val, (tuple, list)) or len(val) <= count:
        return False
    return any(user.target is not operator.getitem or user.args[1] >= count for user in fx_node.users)


def _agree(metas: tuple[TensorMeta, ...], fx_node: Any, op: str) -> None:
    """The contract's meta must say what torch said (static sizes and dtype), else the mapping is wrong."""
    val = fx_node.meta.get("val")
    if isinstance(val, (tuple, list)) and len(metas) == 1:
        val = val[0]  # a contract of the first of the ATen op's outputs
    if val is None or len(metas) != 1 or not hasattr(val, "shape"):
        return
    meta = metas[0]
    sizes = [d if isinstance(d, int) else None for d in (_symbol(s) for s in val.shape)]
    same_shape = len(sizes) == meta.ndim and all(s is None or s == m for s, m in zip(sizes, meta.shape))
    if not same_shape or DType.from_torch(val.dtype) is not meta.dtype:
        raise OpcoreError(f"its meta function gives {meta.describe()}, torch gives {val.dtype}{list(val.shape)}", op=op)


def _aten_arguments(target: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The node's arguments by their ATen names, defaults filled in."""
    named: dict[str, Any] = {}
    for i, argument in enumerate(target._schema.arguments):
        if i < len(args) and not argument.kwarg_only:
            named[argument.name] = args[i]
        elif argument.name in kwargs:
            named[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            named[argument.name] = argument.default_value
    return named


def _raw(value: Any, env: Mapping[str, Any]) -> Any:
    """An FX argument with nodes replaced by ValueRefs (lists become tuples)."""
    if hasattr(value, "op") and hasattr(value, "name") and hasattr(value, "meta"):  # a torch.fx.Node
        return env[value.name]
    if isinstance(value, (list, tuple)):
        return tuple(_raw(v, env) for v in value)
    return value


def _dims(fx_node: Any, shape: tuple[int, ...]) -> tuple[int | str, ...]:
    return _dims_of(fx_node.meta.get("val"), shape)


def _dims_of(val: Any, shape: tuple[int, ...]) -> tuple[int | str, ...]:
    if val is None or not hasattr(val, "shape") or len(val.shape) != len(shape):
        return tuple(shape)
    return tuple(d if isinstance(d, str) else s for d, s in zip((_symbol(v) for v in val.shape), shape))


def _is_symint(value: Any) -> bool:
    import torch

    return isinstance(value, torch.SymInt)


def _symbol(size: Any) -> int | str:
    """An int for a static size, the symbol's text ("s0") for a symbolic one."""
    import torch

    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        return int(expr) if getattr(expr, "is_number", False) else str(expr)
    return int(size)
