"""The ONNX model an onnxruntime partition hands to ONNX Runtime, and what ONNX Runtime's optimizer
makes of it: the forms that let it fuse what it fuses in ``torch.onnx.export``'s models
(docs/benchmarks.md, "Whole models"), with results that stay exact against PyTorch."""

from __future__ import annotations

import collections
import pathlib
from typing import Any

import numpy
import pytest
import torch

pytest.importorskip("onnxruntime", reason="the onnxruntime partition compiler needs onnxruntime")

import onnx
import onnxruntime

from opcore.graph.partition import PartitionSpec, PartNode, ValueRef, compilers
from opcore.types import TensorMeta

R = ValueRef


def _compile(
    nodes: tuple[PartNode, ...], values: dict[str, Any], inputs: tuple[str, ...], outputs: tuple[str, ...]
) -> Any:
    constants = {n: v for n, v in values.items() if n not in inputs and isinstance(v, numpy.ndarray)}
    metas = {n: TensorMeta.of(v) for n, v in values.items()}
    return compilers()["onnxruntime"].compile(PartitionSpec("p0", nodes, inputs, constants, outputs, metas))


def _op_types(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(node.op_type for node in model.graph.node)


def _optimized(part: Any, folder: pathlib.Path, model: onnx.ModelProto | None = None) -> collections.Counter[str]:
    """The op types of the model ONNX Runtime runs for ``part`` (its optimizer's output, dumped with
    the partition's own external initializers, as the partition's session gets them); ``model``:
    that model instead, with no external initializers."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the optimizer's notes on removed initializers are expected
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    names = list(part.externals) if model is None else []
    if names:
        options.add_external_initializers(
            names, [onnxruntime.OrtValue.ortvalue_from_numpy(part.externals[n]) for n in names]
        )
    model = part.model if model is None else model
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return _op_types(onnx.load(str(folder / "optimized.onnx"), load_external_data=False))


def _conv_bn_block(rng: numpy.random.Generator, channels: int = 8) -> dict[str, Any]:
    def channel(low: float, high: float) -> numpy.ndarray:
        return rng.uniform(low, high, channels).astype("float32")

    return {
        "x": rng.standard_normal((2, channels, 9, 9)).astype("float32"),
        "kernel": (rng.standard_normal((channels, channels, 3, 3)) / 9).astype("float32"),
        "mean": channel(-0.1, 0.1),
        "var": channel(0.5, 1.5),
        "gamma": channel(0.5, 1.5),
        "beta": channel(-0.5, 0.5),
    }


def test_batch_norm_after_conv_is_folded_into_the_conv(tmp_path: pathlib.Path) -> None:
    values = _conv_bn_block(numpy.random.default_rng(3))
    nodes = (
        PartNode("conv2d", (R("x"), R("kernel"), None, (1, 1), (1, 1), (1, 1), 1), ("conv",)),
        PartNode("batch_norm", (R("conv"), R("mean"), R("var"), R("gamma"), R("beta"), False, 0.1, 1e-5), ("bn",)),
        PartNode("relu", (R("bn"),), ("y",)),
    )
    t = {n: torch.from_numpy(v) for n, v in values.items()}
    expected = torch.relu(
        torch.nn.functional.batch_norm(
            torch.nn.functional.conv2d(t["x"], t["kernel"], padding=1), t["mean"], t["var"], t["gamma"], t["beta"]
        )
    ).numpy()
    values.update({n: expected for n in ("conv", "bn", "y")})
    part = _compile(nodes, values, ("x",), ("y",))
    written = _op_types(part.model)
    assert written["BatchNormalization"] == 1 and not {"Sub", "Div", "Sqrt"} & set(written)
    # ONNX Runtime folds the batch norm into the conv's weights and bias (ConvBNFusion), then the
    # relu into the conv; the formula (Sub/Div/Mul/Add) stayed four passes over the activations
    # and kept the relu apart
    optimized = _optimized(part, tmp_path)
    assert optimized["Conv"] == 1 and not {"BatchNormalization", "Relu", "Mul", "Add"} & set(optimized), optimized
    (y,) = part(values["x"])
    numpy.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_batch_norm_without_weight_or_bias_matches_torch(dtype: str) -> None:
    values = _conv_bn_block(numpy.random.default_rng(4))
    x = values["x"].astype(dtype)
    statistics = "float32" if dtype == "float16" else dtype  # torch's CPU kernel: float32 statistics for float16
    mean, var = values["mean"].astype(statistics), values["var"].astype(statistics)
    expected = torch.nn.functional.batch_norm(
        torch.from_numpy(x), torch.from_numpy(mean), torch.from_numpy(var), eps=1e-3
    ).numpy()
    nodes = (PartNode("batch_norm", (R("x"), R("mean"), R("var"), None, None, False, 0.1, 1e-3), ("y",)),)
    part = _compile(nodes, {"x": x, "mean": mean, "var": var, "y": expected}, ("x",), ("y",))
    (y,) = part(x)
    assert y.dtype == expected.dtype
    tolerance = 1e-3 if dtype == "float16" else 1e-6
    numpy.testing.assert_allclose(y, expected, rtol=tolerance, atol=tolerance)


def _linear_flatten(dynamic: dict[str, frozenset[int]]) -> tuple[Any, dict[str, Any]]:
    rng = numpy.random.default_rng(5)
    values: dict[str, Any] = {
        "x": rng.standard_normal((2, 6, 16)).astype("float32"),
        "w": rng.standard_normal((8, 16)).astype("float32"),
        "b": rng.standard_normal(8).astype("float32"),
    }
    values["h"] = values["x"] @ values["w"].T + values["b"]
    values["y"] = numpy.tanh(values["h"].reshape(2, -1))
    nodes = (
        PartNode("linear", (R("x"), R("w"), R("b")), ("h",)),
        PartNode("flatten", (R("h"), 1, -1), ("f",)),
        PartNode("tanh", (R("f"),), ("y",)),
    )
    values["f"] = values["h"].reshape(2, -1)
    constants = {n: values[n] for n in ("w", "b")}
    metas = {n: TensorMeta.of(v) for n, v in values.items()}
    spec = PartitionSpec("p0", nodes, ("x",), constants, ("y",), metas, dynamic)
    return compilers()["onnxruntime"].compile(spec), values


def test_run_time_shapes_of_a_static_partition_are_folded_by_onnx_runtime(tmp_path: pathlib.Path) -> None:
    # The builders compute the shapes of linear's and flatten's reshapes in the graph (Shape,
    # Concat, ReduceProd), so one builder serves static and dynamic partitions. Where the inputs'
    # sizes are static, ONNX Runtime's constant folding turns those chains into constants when it
    # builds the session: the model it runs computes no shape, as torch.onnx.export's static one.
    static, values = _linear_flatten({})
    assert _op_types(static.model)["Shape"] > 0
    assert not {"Shape", "Concat", "ReduceProd"} & set(_optimized(static, tmp_path))
    (y,) = static(values["x"])
    numpy.testing.assert_allclose(y, values["y"], rtol=1e-5, atol=1e-5)
    # a dynamic batch keeps them: the sizes are read at run time
    dynamic, _ = _linear_flatten({"x": frozenset({0})})
    assert _optimized(dynamic, tmp_path)["Shape"] > 0
    x = numpy.random.default_rng(6).standard_normal((3, 6, 16)).astype("float32")
    (y,) = dynamic(x)
    numpy.testing.assert_allclose(y, numpy.tanh((x @ values["w"].T + values["b"]).reshape(3, -1)), rtol=1e-5, atol=1e-5)


def test_external_initializers_are_optimized_as_embedded_ones(tmp_path: pathlib.Path) -> None:
    # Weights of 64 KiB and more are handed to ONNX Runtime as external initializers (sharing
    # numpy's memory); its optimizer treats them as the initializers of a self-contained model:
    # the conv + batch norm fold and the fusions come out the same
    values = _conv_bn_block(numpy.random.default_rng(7), channels=64)  # a 147 KiB kernel
    nodes = (
        PartNode("conv2d", (R("x"), R("kernel"), None, (1, 1), (1, 1), (1, 1), 1), ("conv",)),
        PartNode("batch_norm", (R("conv"), R("mean"), R("var"), R("gamma"), R("beta"), False, 0.1, 1e-5), ("bn",)),
        PartNode("relu", (R("bn"),), ("y",)),
    )
    values.update({n: numpy.zeros((2, 64, 9, 9), "float32") for n in ("conv", "bn", "y")})
    part = _compile(nodes, values, ("x",), ("y",))
    assert part.externals, "the kernel should be an external initializer"
    embedded = onnx.ModelProto()
    embedded.CopyFrom(part.model)
    for index, tensor in enumerate(embedded.graph.initializer):
        if tensor.name in part.externals:
            embedded.graph.initializer[index].CopyFrom(
                onnx.numpy_helper.from_array(part.externals[tensor.name], tensor.name)
            )
    assert _optimized(part, tmp_path) == _optimized(part, tmp_path, embedded)


def test_partitions_built_and_loaded_stop_spinning_when_a_run_returns(tmp_path: pathlib.Path) -> None:
    # a whole-model run followed by torch work is where the pool's spin cost most (eager torch right
    # after a plan's onnxruntime partition took 2-2.5x its time alone on 2 cores): opcore.graph's
    # partitions get session_options() too, when compiled and when a saved plan loads them
    from opcore_onnxruntime.partition import load_partition

    values = {"x": numpy.ones((2, 3), "float32"), "y": numpy.ones((2, 3), "float32")}
    part = _compile((PartNode("relu", (R("x"),), ("y",)),), values, ("x",), ("y",))
    record = part.save(tmp_path)
    spec = PartitionSpec("p0", (), ("x",), {}, ("y",), {n: TensorMeta.of(v) for n, v in values.items()})
    loaded = load_partition(tmp_path, record, spec)
    for session in (part.session, loaded.session):
        assert session.get_session_options().get_session_config_entry("session.force_spinning_stop") == "1"


@pytest.mark.parametrize("dynamic", [{}, {"x": frozenset({0})}], ids=["static", "dynamic batch"])
def test_a_dynamic_partition_runs_without_a_memory_pattern(tmp_path: pathlib.Path, dynamic: dict) -> None:
    # the memory pattern stalled the second run of every new prompt length of a decoder's prefill
    # (0.8-1.7 s against 0.46-0.89 s); a static partition keeps it (onnxruntime's default), built and
    # loaded alike, and both keep the CPU arena
    from opcore_onnxruntime.partition import load_partition

    part, values = _linear_flatten(dynamic)
    record = part.save(tmp_path)
    spec = PartitionSpec("p0", (), ("x",), {}, ("y",), {n: TensorMeta.of(values[n]) for n in ("x", "y")}, dynamic)
    loaded = load_partition(tmp_path, record, spec)
    for session in (part.session, loaded.session):
        options = session.get_session_options()
        assert (options.enable_mem_pattern, options.enable_cpu_mem_arena) == (not dynamic, True)
    x = numpy.random.default_rng(8).standard_normal((3 if dynamic else 2, 6, 16)).astype("float32")
    want = numpy.tanh((x @ values["w"].T + values["b"]).reshape(len(x), -1))
    for _ in range(2):  # a second run at the size: the one the memory pattern planned
        numpy.testing.assert_allclose(part(x)[0], want, rtol=1e-5, atol=1e-5)


def _head_split(shape: tuple[int, ...], dynamic: dict[str, frozenset[int]]) -> tuple[Any, dict[str, Any]]:
    """tanh(x), its dims 1 and 2 swapped, doubled: a decode step's head split of one token."""
    x = numpy.random.default_rng(7).standard_normal(shape).astype("float32")
    values: dict[str, Any] = {"x": x, "t": numpy.tanh(x)}
    values["s"] = values["t"].transpose(0, 2, 1, 3)
    values["y"] = values["s"] * 2
    nodes = (
        PartNode("tanh", (R("x"),), ("t",)),
        PartNode("transpose", (R("t"), 1, 2), ("s",)),
        PartNode("mul", (R("s"), 2), ("y",)),
    )
    metas = {n: TensorMeta.of(v) for n, v in values.items()}
    # as the planner says them: each inner value's sizes with None where they change per call
    sizes = {"t": (1, None, 4, 8), "s": (1, 4, None, 8), "y": (1, 4, None, 8)} if dynamic else {}
    spec = PartitionSpec("p0", nodes, ("x",), {}, ("y",), metas, dynamic, sizes)
    return compilers()["onnxruntime"].compile(spec), values


@pytest.mark.parametrize(
    ("shape", "dynamic", "op"),
    [
        ((1, 1, 4, 8), {}, "Reshape"),  # only a dim of size 1 moves: the bytes keep their order
        ((1, 3, 4, 8), {}, "Transpose"),  # two dims of 3 and 4 swap
        ((1, 1, 4, 8), {"x": frozenset({1})}, "Transpose"),  # a size known only at run time
    ],
)
def test_a_transpose_that_moves_only_dims_of_size_1_is_a_reshape(shape: tuple, dynamic: dict, op: str) -> None:
    part, values = _head_split(shape, dynamic)
    ops = _op_types(part.model)
    assert ops[op] >= 1 and ops["Transpose" if op == "Reshape" else "Reshape"] == 0, ops
    (y,) = part(values["x"])
    numpy.testing.assert_allclose(y, values["y"], rtol=1e-6, atol=1e-6)


def test_a_chain_of_reshapes_is_one_reshape() -> None:
    # a split attention's head merge of one token: (1, 4, 1, 8) -> its size-1 transpose -> (1, 1, 32)
    x = numpy.random.default_rng(8).standard_normal((1, 4, 1, 8)).astype("float32")
    values: dict[str, Any] = {"x": x, "t": numpy.tanh(x)}
    values["s"] = values["t"].transpose(0, 2, 1, 3)
    values["m"] = values["s"].reshape(1, 1, 32)
    values["y"] = values["m"] * 2
    nodes = (
        PartNode("tanh", (R("x"),), ("t",)),
        PartNode("transpose", (R("t"), 1, 2), ("s",)),
        PartNode("reshape", (R("s"), (1, 1, 32)), ("m",)),
        PartNode("mul", (R("m"), 2), ("y",)),
    )
    metas = {n: TensorMeta.of(v) for n, v in values.items()}
    part: Any = compilers()["onnxruntime"].compile(PartitionSpec("p0", nodes, ("x",), {}, ("y",), metas))
    ops = _op_types(part.model)
    assert ops["Reshape"] == 1 and ops["Transpose"] == 0, ops
    (y,) = part(x)
    numpy.testing.assert_allclose(y, values["y"], rtol=1e-6, atol=1e-6)


class _Rotary(torch.nn.Module):
    """A query's and a key's rotary embedding as transformers writes it (Llama's apply_rotary_pos_emb:
    ``x * cos + rotate_half(x) * sin``, cos and sin of ``cat(f, f)`` scaled by attention_scaling);
    ``form`` writes it another way: "wave" (cos of cat(f, 2f): not rotate-half's), "pairs"
    (GPT-J's interleaved pairs), "partial" (the first half of each head turned), "neg read" (the
    negated half returned too), "uneven" (its halves cut 2 past the middle)."""

    def __init__(self, width: int, scaling: float = 1.0, form: str = "") -> None:
        super().__init__()
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, width, 2).float() / width))
        self.scaling, self.form = scaling, form

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = positions[..., None].float() * self.inv_freq
        emb = torch.cat([f, f * 2 if self.form == "wave" else f], -1)
        cos, sin = (emb.cos() * self.scaling).unsqueeze(1), (emb.sin() * self.scaling).unsqueeze(1)
        negated: list[torch.Tensor] = []

        def turn(x: torch.Tensor) -> torch.Tensor:
            if self.form == "pairs":
                pairs = torch.stack([-x[..., 1::2], x[..., ::2]], -1).flatten(-2)
                return x * cos + pairs * sin
            half = x.shape[-1] // 2 + (2 if self.form == "uneven" else 0)
            if self.form == "partial":
                cut = cos.shape[-1] // 2
                turned = _Rotary.rotate(x[..., : 2 * cut], cut, negated) * sin[..., : 2 * cut]
                return torch.cat([x[..., : 2 * cut] * cos[..., : 2 * cut] + turned, x[..., 2 * cut :]], -1)
            return x * cos + _Rotary.rotate(x, half, negated) * sin

        out = (turn(q), turn(k))
        return (*out, *negated) if self.form == "neg read" else out

    @staticmethod
    def rotate(x: torch.Tensor, half: int, negated: list[torch.Tensor]) -> torch.Tensor:
        minus = -x[..., half:]
        negated.append(minus)
        return torch.cat([minus, x[..., :half]], -1)


def _rotary_plan(module: torch.nn.Module, args: tuple[torch.Tensor, ...], dynamic: Any = None) -> tuple[Any, Any]:
    import opcore.graph

    plan = opcore.graph.capture(module, args, dynamic_shapes=dynamic, backends=("onnxruntime",), measure=False)
    assert [p.backend for p in plan.partitions] == ["onnxruntime"], plan.explain()
    return plan, plan.partitions[0].compiled.model


@pytest.mark.parametrize(("batch", "scaling"), [(1, 1.0), (2, 1.0), (2, 0.7)])
def test_a_rotate_half_rotary_is_one_rotary_embedding_node(batch: int, scaling: float) -> None:
    from opcore_onnxruntime.rotary import ROTARY_OPSET
    from opcore_onnxruntime.session import target_opset

    if target_opset()[0] < ROTARY_OPSET:
        pytest.skip(f"the installed onnx and onnxruntime share no opset >= {ROTARY_OPSET} (RotaryEmbedding)")
    # grouped heads (4 query, 2 key heads), positions from 5: a decode step's or a prompt's rotary
    torch.manual_seed(0)
    q, k = torch.randn(batch, 4, 3, 16), torch.randn(batch, 2, 3, 16)
    positions = torch.arange(3)[None].expand(batch, 3) + 5
    module = _Rotary(16, scaling)
    plan, model = _rotary_plan(module, (q, k, positions))
    ops = _op_types(model)
    assert ops["RotaryEmbedding"] == 2 and ops["Neg"] == ops["Concat"] == ops["Slice"] == 0, ops
    for got, want in zip(plan(q, k, positions), module(q, k, positions)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("form", ["wave", "pairs", "partial", "neg read", "uneven", "dynamic"])
def test_a_rotary_that_is_not_rotate_half_s_stays_as_written(form: str) -> None:
    # each computes something RotaryEmbedding(x, cos(f), sin(f)) would not (or reads what it would
    # remove, or has sizes known only at run time): left alone, and right
    torch.manual_seed(1)
    q, k = torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16)
    positions = torch.arange(3)[None] + 5
    module = _Rotary(8 if form == "partial" else 16, form=form if form != "dynamic" else "")
    dynamic = None
    if form == "dynamic":
        from torch.export import Dim

        length = Dim("length", min=2, max=64)
        dynamic = ({2: length}, {2: length}, {1: length})
    plan, model = _rotary_plan(module, (q, k, positions), dynamic)
    if form != "partial":  # the partial one's turned half may be fused on its own: only the result is asked
        assert _op_types(model)["RotaryEmbedding"] == 0, _op_types(model)
    for got, want in zip(plan(q, k, positions), module(q, k, positions)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_caches_gathered_at_one_window_take_one_gather_each_and_share_its_index() -> None:
    # a windowed decode step: two caches of 64 slots read at the slots 0 .. W - 1 (x[:, :, window]):
    # a Gather along the slot dim each, no transpose of a cache, negative indices counted from the end
    # once for both (the window's and a negative index's results as numpy's)
    rng = numpy.random.default_rng(9)
    keys, vals = (rng.standard_normal((1, 2, 64, 8)).astype("float32") for _ in range(2))
    window = numpy.array([0, 1, 2, -1], dtype=numpy.int64)
    values: dict[str, Any] = {"k": keys, "v": vals, "w": window}
    values["kw"], values["vw"] = keys[:, :, window], vals[:, :, window]
    values["y"] = values["kw"] + values["vw"]
    nodes = (
        PartNode("index", (R("k"), (None, None, R("w"))), ("kw",)),
        PartNode("index", (R("v"), (None, None, R("w"))), ("vw",)),
        PartNode("add", (R("kw"), R("vw"), 1), ("y",)),
    )
    metas = {n: TensorMeta.of(v) for n, v in values.items()}
    part: Any = compilers()["onnxruntime"].compile(PartitionSpec("p0", nodes, ("k", "v", "w"), {}, ("y",), metas))
    ops = _op_types(part.model)
    assert ops["Gather"] == 2 and ops["GatherND"] == 0 and ops["Transpose"] == 0 and ops["Where"] == 1, ops
    (y,) = part(keys, vals, window)
    numpy.testing.assert_allclose(y, values["y"], rtol=1e-6, atol=1e-6)
