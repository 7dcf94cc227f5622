"""The one table from ATen overloads to opcore contracts.

Each entry says which opcore op an ATen overload is, and where each of the op's arguments comes
from: an ATen argument's name, a fixed value (``Fixed``), or a conversion of one (``Convert``). An
entry may refuse a node (``when`` returns the reason): the node then runs as the ATen fallback
``aten.<name>.<overload>``, as does every overload that has no entry, or whose op is not
registered in this process. To map a new contract, add one line (a one-tensor elementwise op needs none: see _UNARY).

>>> RULES["aten.linear.default"].op
'linear'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opcore.opset.elementwise import CONTRACTS as ELEMENTWISE
from opcore.types import DType, TensorMeta

__all__ = ["RULES", "Convert", "Fixed", "Like", "Rule", "map_arguments"]


@dataclass(frozen=True, slots=True)
class Fixed:
    """A value the opcore argument always takes."""

    value: Any


@dataclass(frozen=True, slots=True)
class Convert:
    """The ATen argument ``name`` passed through ``fn``."""

    name: str
    fn: Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Like:
    """The ATen argument ``name`` (a torch.dtype or torch.device) as opcore's attribute names it;
    where it is None, the ``attribute`` ("dtype" or "device") of the tensor argument ``tensor``
    (``x.new_zeros(size)``: x's dtype and device)."""

    name: str
    tensor: str
    attribute: str


@dataclass(frozen=True, slots=True)
class Rule:
    """ATen overload -> opcore op. ``args``: opcore argument name -> its source (an ATen argument
    name, Fixed or Convert); opcore arguments not named take their defaults. ``when`` None: every
    node maps; else it gets the ATen arguments by name and returns None or why this node does not.
    """

    op: str
    args: Mapping[str, str | Fixed | Convert | Like]
    when: Callable[[Mapping[str, Any]], str | None] | None = None


def _rule(
    op: str, when: Callable[[Mapping[str, Any]], str | None] | None = None, **args: str | Fixed | Convert | Like
) -> Rule:
    return Rule(op, args, when)


def _none_if_negative(value: Any) -> Any:
    return None if value is not None and value < 0 else value


def _none_if_empty(value: Any) -> Any:
    return None if value is None or len(value) == 0 else value


def _no_dtype(args: Mapping[str, Any]) -> str | None:
    return None if args.get("dtype") is None else "it casts to another dtype (dtype=...)"


def _not_half_to_float(args: Mapping[str, Any]) -> str | None:
    return "half_to_float=True changes the output dtype" if args.get("half_to_float") else None


def _device_name(value: Any) -> str:
    """A torch.device (or None: the CPU, torch's default) as the device name opcore's attributes take."""
    return "cpu" if value is None else str(value)


def _plain_creation(args: Mapping[str, Any]) -> str | None:
    """zeros/ones/full/arange map where they make what opcore's creation ops make: strided, unpinned."""
    if str(args.get("layout") or "torch.strided") != "torch.strided":
        return "it creates another layout"
    return "it pins the memory (pin_memory=True)" if args.get("pin_memory") else None


def _creation(op: str, **args: str | Fixed | Convert) -> Rule:
    return _rule(
        op, _plain_creation, **args, dtype=Convert("dtype", _dtype_name), device=Convert("device", _device_name)
    )


def _new_creation(op: str, **args: str | Fixed | Convert) -> Rule:
    """x.new_zeros(size) and the like: dtype and device from x unless given."""
    return _rule(
        op, _plain_creation, **args, dtype=Like("dtype", "self", "dtype"), device=Like("device", "self", "device")
    )


def _constant_mode(args: Mapping[str, Any]) -> str | None:
    mode = args.get("mode", "constant")
    return None if mode == "constant" else f"pad mode {mode!r} (the pad contract takes 'constant' only)"


def _dtype_name(value: Any) -> str | None:
    """A torch.dtype (or None) as the dtype name opcore's attributes take."""
    return None if value is None else DType.parse(value).value


def _plain_cast(args: Mapping[str, Any]) -> str | None:
    """_to_copy / to that only change the dtype map to cast; a device, layout or memory-format change does not."""
    if args.get("dtype") is None:
        return "it copies without changing the dtype"
    return _same_place(args)


def _same_place(args: Mapping[str, Any]) -> str | None:
    """None where the result stays on x's device, strided and in x's memory format, as opcore's ops make it."""
    if args.get("device") is not None or str(args.get("layout") or "torch.strided") != "torch.strided":
        return "it moves the tensor to another device or layout"
    if str(args.get("memory_format") or "torch.preserve_format") != "torch.preserve_format":
        return "it changes the memory format"
    return None


def _preserved_format(args: Mapping[str, Any]) -> str | None:
    """clone keeps x's memory format unless told otherwise; opcore's copy does not take another."""
    if str(args.get("memory_format") or "torch.preserve_format") != "torch.preserve_format":
        return "it changes the memory format"
    return None


def _pooled_to_one(args: Mapping[str, Any]) -> str | None:
    size = tuple(args.get("output_size") or ())
    return None if size == (1,) else f"it pools to {list(size)} values, not to one (the mean)"


def _not_training(args: Mapping[str, Any]) -> str | None:
    return (
        "training=True updates the running statistics (the contract is inference-only)"
        if args.get("training")
        else None
    )


# a one-tensor elementwise op, ``name(Tensor x) -> Tensor``, is ATen's ``name(Tensor self)``: its rule
# comes from its contract (relu, sigmoid, exp, ..., hardswish, hardsigmoid), so such an op adds no line here
_UNARY = {c.name: _rule(c.name, x="self") for c in ELEMENTWISE if str(c.schema) == f"{c.name}(Tensor x) -> Tensor"}
# comparisons take a tensor or a Python number; the logical pair takes tensors only
_COMPARISONS = {
    f"aten.{name}.{overload}": _rule(name, x="self", other="other")
    for name in ("eq", "ne", "lt", "le", "gt", "ge")
    for overload in ("Tensor", "Scalar")
}
_LOGICAL = {f"aten.{name}.default": _rule(name, x="self", other="other") for name in ("logical_and", "logical_or")}

RULES: Mapping[str, Rule] = {
    # linear algebra (kept whole by capture: never decomposed into t + addmm)
    "aten.linear.default": _rule("linear", x="input", w="weight", b="bias"),
    "aten.matmul.default": _rule("matmul", x="self", y="other"),
    "aten.mm.default": _rule("matmul", x="self", y="mat2"),
    "aten.bmm.default": _rule("bmm", x="self", y="mat2"),
    # opcore::gather_mm, the custom op prompt-length MoE experts are exported through (opcore.graph.experts)
    "opcore.gather_mm.default": _rule("gather_mm", x="x", w="w", index="index"),
    # GPT-2's Conv1D: addmm(bias, x2d, w) with w stored (in, out), not transposed as linear's
    "aten.addmm.default": _rule("addmm", x="self", mat1="mat1", mat2="mat2", beta="beta", alpha="alpha"),
    # elementwise
    "aten.add.Tensor": _rule("add", x="self", other="other", alpha="alpha"),
    "aten.add.Scalar": _rule("add", x="self", other="other", alpha="alpha"),
    "aten.sub.Tensor": _rule("sub", x="self", other="other", alpha="alpha"),
    "aten.sub.Scalar": _rule("sub", x="self", other="other", alpha="alpha"),
    "aten.mul.Tensor": _rule("mul", x="self", other="other"),
    "aten.mul.Scalar": _rule("mul", x="self", other="other"),
    "aten.div.Tensor": _rule("div", x="self", other="other"),
    "aten.div.Scalar": _rule("div", x="self", other="other"),
    "aten.div.Tensor_mode": _rule("div", x="self", other="other", rounding_mode="rounding_mode"),
    # torch.floor_divide (`//`; MoE routers: a flat top-k index // k is its token) rounds to the floor
    "aten.floor_divide.default": _rule("div", x="self", other="other", rounding_mode=Fixed("floor")),
    **{f"aten.{name}.default": rule for name, rule in _UNARY.items()},
    **_COMPARISONS,
    **_LOGICAL,
    "aten.gelu.default": _rule("gelu", x="self", approximate="approximate"),
    # pow, cast, softplus, reductions and selection (issue 12, step 4)
    "aten.pow.Tensor_Tensor": _rule("pow", x="self", exponent="exponent"),
    "aten.pow.Tensor_Scalar": _rule("pow", x="self", exponent="exponent"),
    "aten._to_copy.default": _rule("cast", _plain_cast, x="self", dtype=Convert("dtype", _dtype_name)),
    "aten.to.dtype": _rule("cast", _plain_cast, x="self", dtype=Convert("dtype", _dtype_name)),
    "aten.softplus.default": _rule("softplus", x="self", beta="beta", threshold="threshold"),
    "aten.sum.default": _rule("sum", _no_dtype, x="self"),
    "aten.sum.dim_IntList": _rule("sum", _no_dtype, x="self", dim="dim", keepdim="keepdim"),
    "aten.mean.default": _rule("mean", _no_dtype, x="self"),
    "aten.mean.dim": _rule("mean", _no_dtype, x="self", dim="dim", keepdim="keepdim"),
    "aten.amax.default": _rule("amax", x="self", dim="dim", keepdim="keepdim"),
    "aten.amin.default": _rule("amin", x="self", dim="dim", keepdim="keepdim"),
    "aten.argmax.default": _rule("argmax", x="self", dim="dim", keepdim="keepdim"),
    "aten.cumsum.default": _rule("cumsum", x="self", dim="dim", dtype=Convert("dtype", _dtype_name)),
    **{
        f"aten.where.{overload}": _rule("where", condition="condition", x="self", other="other")
        for overload in ("self", "ScalarSelf", "ScalarOther", "Scalar")
    },
    "aten.masked_fill.Scalar": _rule("masked_fill", x="self", mask="mask", value="value"),
    "aten.masked_fill.Tensor": _rule("masked_fill", x="self", mask="mask", value="value"),
    # torch.minimum(a, b) and torch.min(a, b) (T5's relative-position buckets)
    "aten.minimum.default": _rule("minimum", x="self", other="other"),
    "aten.min.other": _rule("minimum", x="self", other="other"),
    "aten.clamp.default": _rule("clamp", x="self", min="min", max="max"),
    "aten.clamp.Tensor": _rule("clamp", x="self", min="min", max="max"),
    "aten.clamp_min.default": _rule("clamp", x="self", min="min"),
    "aten.clamp_max.default": _rule("clamp", x="self", max="max"),
    "aten.zeros_like.default": _rule("zeros_like", _same_place, x="self", dtype=Convert("dtype", _dtype_name)),
    "aten.ones_like.default": _rule("ones_like", _same_place, x="self", dtype=Convert("dtype", _dtype_name)),
    "aten.full_like.default": _rule(
        "full_like", _same_place, x="self", fill_value="fill_value", dtype=Convert("dtype", _dtype_name)
    ),
    # creation without a tensor (torch.export keeps them where a size or bound is not a constant)
    "aten.zeros.default": _creation("zeros", size="size"),
    "aten.ones.default": _creation("ones", size="size"),
    "aten.full.default": _creation("full", size="size", fill_value="fill_value"),
    "aten.arange.default": _creation("arange", start=Fixed(0), end="end"),
    "aten.arange.start": _creation("arange", start="start", end="end"),
    "aten.arange.start_step": _creation("arange", start="start", end="end", step="step"),
    "aten.new_zeros.default": _new_creation("zeros", size="size"),
    "aten.new_ones.default": _new_creation("ones", size="size"),
    "aten.new_full.default": _new_creation("full", size="size", fill_value="fill_value"),
    # bitwise ops of bool tensors are the logical ones; of integers the meta's bool result disagrees
    # with torch's dtype, so capture refuses the mapping and the node stays on the ATen fallback
    **{
        f"aten.{name}.Tensor": _rule(op, x="self", other="other")
        for name, op in (
            ("__and__", "logical_and"),
            ("bitwise_and", "logical_and"),
            ("__or__", "logical_or"),
            ("bitwise_or", "logical_or"),
        )
    },
    "aten.bitwise_not.default": _rule("logical_not", x="self"),
    # nn
    "aten.embedding.default": _rule(
        "embedding", input="indices", weight="weight", padding_idx=Convert("padding_idx", _none_if_negative)
    ),
    # conv1d/conv2d: the .padding overloads take "same"/"valid", as the contracts do
    **{
        f"aten.{op}.{overload}": _rule(
            op,
            x="input",
            weight="weight",
            bias="bias",
            stride="stride",
            padding="padding",
            dilation="dilation",
            groups="groups",
        )
        for op in ("conv1d", "conv2d")
        for overload in ("default", "padding")
    },
    "aten.scaled_dot_product_attention.default": _rule(
        "scaled_dot_product_attention",
        query="query",
        key="key",
        value="value",
        attn_mask="attn_mask",
        dropout_p="dropout_p",
        is_causal="is_causal",
        scale="scale",
        enable_gqa="enable_gqa",
    ),
    # normalization
    "aten.softmax.int": _rule("softmax", x="self", dim="dim", dtype=Convert("dtype", _dtype_name)),
    "aten._softmax.default": _rule("softmax", _not_half_to_float, x="self", dim="dim"),
    "aten.log_softmax.int": _rule("log_softmax", x="self", dim="dim", dtype=Convert("dtype", _dtype_name)),
    "aten._log_softmax.default": _rule("log_softmax", _not_half_to_float, x="self", dim="dim"),
    "aten.layer_norm.default": _rule(
        "layer_norm", x="input", normalized_shape="normalized_shape", weight="weight", bias="bias", eps="eps"
    ),
    "aten.rms_norm.default": _rule(
        "rms_norm", x="input", normalized_shape="normalized_shape", weight="weight", eps="eps"
    ),
    # batch_norm: an eval() model exports _native_batch_norm_legit_no_training, whose two saved
    # statistics go unused (the lowering maps it only then)
    "aten._native_batch_norm_legit_no_training.default": _rule(
        "batch_norm",
        None,
        x="input",
        running_mean="running_mean",
        running_var="running_var",
        weight="weight",
        bias="bias",
        momentum="momentum",
        eps="eps",
    ),
    "aten.group_norm.default": _rule(
        "group_norm", x="input", num_groups="num_groups", weight="weight", bias="bias", eps="eps"
    ),
    "aten.batch_norm.default": _rule(
        "batch_norm",
        _not_training,
        x="input",
        running_mean="running_mean",
        running_var="running_var",
        weight="weight",
        bias="bias",
        training="training",
        momentum="momentum",
        eps="eps",
    ),
    # shape
    "aten.transpose.int": _rule("transpose", x="self", dim0="dim0", dim1="dim1"),
    "aten.permute.default": _rule("permute", x="self", dims="dims"),
    "aten.view.default": _rule("reshape", x="self", shape="size"),
    "aten.reshape.default": _rule("reshape", x="self", shape="size"),
    "aten._unsafe_view.default": _rule("reshape", x="self", shape="size"),
    "aten.cat.default": _rule("cat", tensors="tensors", dim="dim"),
    # a functional graph's copies (eval-mode dropout exports as clone); an alias's values are x's
    "aten.clone.default": _rule("clone", _preserved_format, x="self"),
    "aten.alias.default": _rule("clone", x="self"),
    "aten.unsqueeze.default": _rule("unsqueeze", x="self", dim="dim"),
    "aten.squeeze.default": _rule("squeeze", x="self"),
    "aten.squeeze.dim": _rule("squeeze", x="self", dim=Convert("dim", lambda d: (d,))),
    "aten.squeeze.dims": _rule("squeeze", x="self", dim="dim"),
    "aten.flatten.using_ints": _rule("flatten", x="self", start_dim="start_dim", end_dim="end_dim"),
    "aten.expand.default": _rule("expand", x="self", size="size"),
    "aten.slice.Tensor": _rule("slice", x="self", dim="dim", start="start", end="end", step="step"),
    "aten.select.int": _rule("select", x="self", dim="dim", index="index"),
    # indexing (split, split_with_sizes and chunk have list results: one IR output per piece)
    "aten.gather.default": _rule("gather", x="self", dim="dim", index="index"),
    "aten.index.Tensor": _rule("index", x="self", indices="indices"),
    "aten.constant_pad_nd.default": _rule("pad", x="self", pad="pad", value="value"),
    "aten.pad.default": _rule("pad", _constant_mode, x="self", pad="pad", mode="mode", value="value"),
    "aten.split.Tensor": _rule("split", x="self", split_size="split_size", dim="dim"),
    "aten.split_with_sizes.default": _rule("split_with_sizes", x="self", split_sizes="split_sizes", dim="dim"),
    "aten.chunk.default": _rule("chunk", x="self", chunks="chunks", dim="dim"),
    # pooling (an empty stride list means the kernel size, the contract's stride=None)
    "aten.max_pool2d.default": _rule(
        "max_pool2d",
        x="self",
        kernel_size="kernel_size",
        stride=Convert("stride", _none_if_empty),
        padding="padding",
        dilation="dilation",
        ceil_mode="ceil_mode",
    ),
    "aten.avg_pool2d.default": _rule(
        "avg_pool2d",
        x="self",
        kernel_size="kernel_size",
        stride=Convert("stride", _none_if_empty),
        padding="padding",
        ceil_mode="ceil_mode",
        count_include_pad="count_include_pad",
        divisor_override="divisor_override",
    ),
    "aten.adaptive_avg_pool2d.default": _rule("adaptive_avg_pool2d", x="self", output_size="output_size"),
    "aten._adaptive_avg_pool2d.default": _rule("adaptive_avg_pool2d", x="self", output_size="output_size"),
    # a sequence pooled to one value per channel (Swin's pooler) is the mean over its last dim
    "aten.adaptive_avg_pool1d.default": _rule(
        "mean", _pooled_to_one, x="self", dim=Fixed((-1,)), keepdim=Fixed(value=True)
    ),
}


def map_arguments(
    rule: Rule, aten_args: Mapping[str, Any], meta_of: Callable[[Any], TensorMeta] | None = None
) -> dict[str, Any] | str:
    """The opcore keyword arguments for a node's ATen arguments (by name), or why it does not map.
    ``meta_of``: a tensor argument's TensorMeta, for ``Like`` sources (None: a rule with one does not map).

    >>> map_arguments(RULES["aten.add.Tensor"], {"self": "x", "other": 2.0, "alpha": 1})
    {'x': 'x', 'other': 2.0, 'alpha': 1}
    """
    if rule.when is not None:
        reason = rule.when(aten_args)
        if reason is not None:
            return reason
    mapped: dict[str, Any] = {}
    for name, source in rule.args.items():
        if isinstance(source, Fixed):
            mapped[name] = source.value
        elif isinstance(source, Convert):
            mapped[name] = source.fn(aten_args[source.name])
        elif isinstance(source, Like):
            value = aten_args.get(source.name)
            if value is None:
                if meta_of is None:
                    return f"its {source.attribute} comes from '{source.tensor}', whose meta is not known here"
                value = getattr(meta_of(aten_args[source.tensor]), source.attribute)
            mapped[name] = _dtype_name(value) if source.attribute == "dtype" else _device_name(value)
        else:
            mapped[name] = aten_args[source]
    return mapped
