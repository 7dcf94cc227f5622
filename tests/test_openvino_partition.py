"""The OpenVINO model an openvino partition compiles, and what the CPU plugin executes of it (its
runtime model): the forms that let the plugin fuse as it does in ``openvino.convert_model``'s models
(docs/benchmarks.md, "Whole models as one OpenVINO partition"), with results exact against PyTorch."""

from __future__ import annotations

import collections
from typing import Any

import numpy
import pytest
import torch

openvino = pytest.importorskip("openvino", reason="the openvino partition compiler needs openvino")

from opcore.graph.partition import PartitionSpec, PartNode, ValueRef, compilers  # noqa: E402
from opcore.types import TensorMeta  # noqa: E402

R = ValueRef


def _compile(
    nodes: tuple[PartNode, ...], values: dict[str, Any], inputs: tuple[str, ...], outputs: tuple[str, ...]
) -> Any:
    constants = {n: v for n, v in values.items() if n not in inputs and n not in _produced(nodes)}
    metas = {n: TensorMeta.of(v) for n, v in values.items()}
    return compilers()["openvino"].compile(PartitionSpec("p0", nodes, inputs, constants, outputs, metas))


def _produced(nodes: tuple[PartNode, ...]) -> set[str]:
    return {name for node in nodes for name in node.outputs}


def _written(part: Any) -> collections.Counter[str]:
    return collections.Counter(op.get_type_name() for op in part.model.get_ordered_ops())


def _executed(part: Any) -> collections.Counter[str]:
    """The CPU plugin's runtime model by layerType (after its fusions)."""
    ops = part.compiled.get_runtime_model().get_ordered_ops()
    return collections.Counter(op.get_rt_info()["layerType"].astype(str) for op in ops)


def test_relu_after_conv_and_batch_norm_is_one_pass_that_keeps_nan() -> None:
    # The CNN's cause (docs/benchmarks.md): relu was Select(IsNaN(x), x, Relu(x)), which the CPU
    # plugin ran as two passes after each convolution (an IsNaN Eltwise, then a Subgraph). As
    # Select(x < 0, 0, x) it is one Subgraph; the batch norm's formula is folded into the
    # convolution either way.
    rng = numpy.random.default_rng(3)
    values: dict[str, Any] = {
        "x": rng.standard_normal((2, 8, 9, 9)).astype("float32"),
        "kernel": (rng.standard_normal((8, 8, 3, 3)) / 9).astype("float32"),
        "mean": rng.uniform(-0.1, 0.1, 8).astype("float32"),
        "var": rng.uniform(0.5, 1.5, 8).astype("float32"),
        "gamma": rng.uniform(0.5, 1.5, 8).astype("float32"),
        "beta": rng.uniform(-0.5, 0.5, 8).astype("float32"),
    }
    values["x"][1, 3, 4, 4] = numpy.nan  # NaN spreads over the second image's 3x3 neighbourhood
    t = {n: torch.from_numpy(v) for n, v in values.items()}
    conv = torch.nn.functional.conv2d(t["x"], t["kernel"], padding=1)
    bn = torch.nn.functional.batch_norm(conv, t["mean"], t["var"], t["gamma"], t["beta"])
    expected = torch.relu(bn).numpy()
    values.update(conv=conv.numpy(), bn=bn.numpy(), y=expected)
    nodes = (
        PartNode("conv2d", (R("x"), R("kernel"), None, (1, 1), (1, 1), (1, 1), 1), ("conv",)),
        PartNode("batch_norm", (R("conv"), R("mean"), R("var"), R("gamma"), R("beta"), False, 0.1, 1e-5), ("bn",)),
        PartNode("relu", (R("bn"),), ("y",)),
    )
    part = _compile(nodes, values, ("x",), ("y",))
    written = _written(part)
    assert written["Less"] == 1 and written["Select"] == 1 and "IsNaN" not in written, written
    executed = _executed(part)
    assert executed["Convolution"] == 1 and "Eltwise" not in executed and executed["Subgraph"] <= 1, executed
    (y,) = part(values["x"])
    assert numpy.isnan(y).sum() == numpy.isnan(expected).sum() > 0
    numpy.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)  # NaN where torch has NaN


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_relu_matches_torch_on_nan_infinities_and_signed_zeros(dtype: str) -> None:
    x = numpy.array([numpy.nan, -numpy.inf, -1.5, -0.0, 0.0, 1e-30, 2.5, numpy.inf], dtype)
    expected = torch.relu(torch.from_numpy(x)).numpy()
    nodes = (PartNode("relu", (R("x"),), ("y",)),)
    (y,) = _compile(nodes, {"x": x, "y": expected}, ("x",), ("y",))(x)
    assert y.dtype == expected.dtype
    numpy.testing.assert_array_equal(y, expected)
    numpy.testing.assert_array_equal(numpy.signbit(y), numpy.signbit(expected))  # relu(-0.0) is -0.0 in torch


def test_an_encoder_layer_is_written_in_the_forms_the_cpu_plugin_fuses() -> None:
    # linear as MatMul(transpose_b) with a constant weight: executed as FullyConnected (pre-packed);
    # layer_norm as MVN; gelu as Gelu; attention as ScaledDotProductAttention — as
    # openvino.convert_model writes BERT (bench/ort_partition.py --engine openvino), not as formulas
    rng = numpy.random.default_rng(5)
    hidden, heads, batch, sequence = 16, 2, 2, 6

    def w(*shape: int) -> numpy.ndarray:
        return (rng.standard_normal(shape) / numpy.sqrt(shape[-1])).astype("float32")

    values: dict[str, Any] = {
        "x": rng.standard_normal((batch, sequence, hidden)).astype("float32"),
        **{name: w(hidden, hidden) for name in ("wq", "wk", "wv", "wo")},
        "wi": w(32, hidden),
        "bi": w(32),
        "wd": w(hidden, 32),
        "ln_w": (1 + 0.1 * rng.standard_normal(hidden)).astype("float32"),
        "ln_b": (0.1 * rng.standard_normal(hidden)).astype("float32"),
    }
    split = (batch, sequence, heads, hidden // heads)
    nodes = (
        *(PartNode("linear", (R("x"), R(f"w{p}"), None), (p,)) for p in "qkv"),
        *(PartNode("reshape", (R(p), split), (f"{p}4",)) for p in "qkv"),
        *(PartNode("transpose", (R(f"{p}4"), 1, 2), (f"{p}t",)) for p in "qkv"),
        PartNode("scaled_dot_product_attention", (R("qt"), R("kt"), R("vt"), None, 0.0, False, None, False), ("a",)),
        PartNode("transpose", (R("a"), 1, 2), ("at",)),
        PartNode("reshape", (R("at"), (batch, sequence, hidden)), ("a3",)),
        PartNode("linear", (R("a3"), R("wo"), None), ("o",)),
        PartNode("add", (R("x"), R("o"), 1), ("r",)),
        PartNode("layer_norm", (R("r"), (hidden,), R("ln_w"), R("ln_b"), 1e-12), ("n",)),
        PartNode("linear", (R("n"), R("wi"), R("bi")), ("i",)),
        PartNode("gelu", (R("i"), "none"), ("g",)),
        PartNode("linear", (R("g"), R("wd"), None), ("y",)),
    )
    t = {n: torch.from_numpy(v) for n, v in values.items()}
    f = torch.nn.functional
    q, k, v = (f.linear(t["x"], t[f"w{p}"]).reshape(split).transpose(1, 2) for p in "qkv")
    a = f.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, sequence, hidden)
    r = t["x"] + f.linear(a, t["wo"])
    n = f.layer_norm(r, (hidden,), t["ln_w"], t["ln_b"], 1e-12)
    expected = f.linear(f.gelu(f.linear(n, t["wi"], t["bi"])), t["wd"])
    # the intermediate values only give their metas
    shapes = {"q": (batch, sequence, hidden), "q4": split, "qt": (batch, heads, sequence, hidden // heads)}
    for p in "qkv":
        for suffix, shape in (("", shapes["q"]), ("4", shapes["q4"]), ("t", shapes["qt"])):
            values[f"{p}{suffix}"] = numpy.zeros(shape, "float32")
    values.update(a=values["qt"], at=values["q4"], a3=values["q"], o=values["q"], r=values["q"], n=values["q"])
    values.update(i=numpy.zeros((batch, sequence, 32), "float32"), g=numpy.zeros((batch, sequence, 32), "float32"))
    values["y"] = expected.numpy()
    part = _compile(nodes, values, ("x",), ("y",))
    written = _written(part)
    assert written["MVN"] == 1 and written["Gelu"] == 1 and written["ScaledDotProductAttention"] == 1, written
    assert not {"ReduceMean", "Sqrt", "Erf", "Softmax", "Power"} & set(written), written
    matmuls = [op for op in part.model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    assert len(matmuls) == 6 and all(op.get_attributes()["transpose_b"] for op in matmuls)
    executed = _executed(part)
    assert executed["FullyConnected"] == 6 and executed["MVN"] == 1 and "MatMul" not in executed, executed
    (y,) = part(values["x"])
    numpy.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-5)


def _gqa_partition_cases() -> list[Any]:
    from opcore.testing.partitions import partition_cases

    op = "scaled_dot_product_attention"
    return [c for c in partition_cases("openvino", ops=[op], samples=None) if c.sample.id.startswith("gqa")]


def test_grouped_query_attention_in_a_partition_matches_the_reference_on_every_gqa_sample() -> None:
    """In a partition the shapes are known: where the key and value have the same heads, the query
    heads are grouped per key/value head (no copy of the cache per query head) and the mask's rows
    with them; the kit's kernel-level samples run with dynamic shapes and take the other path."""
    from opcore.testing.conformance import Status
    from opcore.testing.partitions import check_partition

    cases = _gqa_partition_cases()
    outcomes = {case.id: check_partition(case) for case in cases}
    passed = [name for name, outcome in outcomes.items() if outcome.status is Status.PASSED]
    # every mask form, batch broadcast and decode shape, alone and between two nodes; causal too
    assert len(passed) >= 60, {n: str(o.reason) for n, o in outcomes.items() if o.status is not Status.PASSED}
    assert any("causal" in name for name in passed) and any("fully-masked" in name for name in passed)


def test_grouped_query_attention_reads_the_key_and_value_as_they_are() -> None:
    """The decode form (one query row, 6 query heads over 3 key/value heads): no Broadcast of the
    key or value in the model, one ScaledDotProductAttention over the grouped heads; exact against torch."""
    q, k, v = (numpy.random.default_rng(i).standard_normal(s).astype(numpy.float32)
               for i, s in enumerate([(1, 6, 1, 8), (1, 3, 7, 8), (1, 3, 7, 8)]))  # fmt: skip
    mask = numpy.ones((1, 1, 1, 7), bool)
    mask[..., 5:] = False
    node = PartNode("scaled_dot_product_attention", (R("q"), R("k"), R("v"), R("m"), 0.0, False, None, True), ("o",))
    values = {"q": q, "k": k, "v": v, "m": mask, "o": numpy.zeros((1, 6, 1, 8), numpy.float32)}
    part = _compile((node,), values, ("q", "k", "v", "m"), ("o",))
    written = _written(part)
    assert written["ScaledDotProductAttention"] == 1, written
    broadcasts = [op for op in part.model.get_ordered_ops() if op.get_type_name() == "Broadcast"]
    # the fully masked rows' flags alone (bool, one per query row): the key and value are not repeated
    assert all(op.get_output_element_type(0) == openvino.Type.boolean for op in broadcasts), broadcasts
    (got,) = part(q, k, v, mask)
    tq, tk, tv, tm = (torch.from_numpy(a) for a in (q, k, v, mask))
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, tm, enable_gqa=True)
    torch.testing.assert_close(torch.from_numpy(got), want, rtol=1e-5, atol=1e-6)


def test_an_input_fed_from_the_same_memory_is_read_again_at_each_call() -> None:
    # The partition sets an input again only when its memory or layout changed (a decode step's KV
    # cache is the same buffers every token); what the buffer holds is read at each call.
    values: dict[str, Any] = {"cache": numpy.zeros((2, 6), "float32"), "x": numpy.ones((2, 6), "float32")}
    values["out"] = values["cache"] + values["x"]  # its meta
    part = _compile((PartNode("add", (R("cache"), R("x"), 1), ("out",)),), values, ("cache", "x"), ("out",))
    cache, x = values["cache"], values["x"]
    assert numpy.array_equal(part(cache, x)[0], cache + 1)
    cache[1, 2] = 5.0  # written in place, as a decode step writes its cache
    assert numpy.array_equal(part(cache, x)[0], cache + 1)
    other = numpy.full((2, 6), 3.0, "float32")  # another buffer, then a view of the first, then a copy's path
    assert numpy.array_equal(part(other, x)[0], other + 1)
    assert numpy.array_equal(part(cache[:, :], x)[0], cache + 1)
    wide = numpy.arange(24, dtype="float32").reshape(2, 12)
    strided = wide[:, ::2]  # not contiguous: copied per call
    assert numpy.array_equal(part(strided, x)[0], strided + 1)
    wide[0, 0] = 7.0
    assert numpy.array_equal(part(strided, x)[0], strided + 1)


class _Attention(torch.nn.Module):
    """A decoder layer's attention at a head size of its own, over a fixed-length cache, under a bool mask."""

    def __init__(self, head: int) -> None:
        super().__init__()
        self.head = head
        self.q, self.o = torch.nn.Linear(16, 2 * head), torch.nn.Linear(2 * head, 16)
        self.norm, self.mlp = torch.nn.LayerNorm(16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q(x).view(batch, length, 2, self.head).transpose(1, 2)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + torch.nn.functional.silu(self.o(out.transpose(1, 2).reshape(batch, length, 2 * self.head)))
        return x + self.mlp(self.norm(x))


@pytest.mark.parametrize("head", [64, 128, 192, 256])
def test_attention_over_a_dynamic_length_with_masked_rows_matches_torch_at_a_decoders_head_sizes(head: int) -> None:
    """A partition's attention has static head sizes and a dynamic query length: there the CPU plugin
    (2026.4) fused the zeroing of fully masked rows into its attention subgraph and computed it wrong
    at head sizes 128, 192 and 256 (JetMoE's prefill on OpenVINO gave logits 0.15-0.72 off); the
    kernel broadcasts the rows' flags over the head first. Fully masked rows give zeros, as torch."""
    import opcore.graph

    torch.manual_seed(0)
    model = torch.nn.Module.eval(_Attention(head))
    x, k, v = torch.randn(1, 12, 16), torch.randn(1, 2, 20, head), torch.randn(1, 2, 20, head)
    mask = torch.ones(1, 1, 12, 20, dtype=torch.bool).tril(8)
    mask[..., 3, :] = False  # a fully masked row
    length = torch.export.Dim("length", min=2, max=20)
    plan = opcore.graph.capture(
        model,
        (x, k, v, mask),
        dynamic_shapes=({1: length}, None, None, {2: length}),
        backends=("openvino", "cpu"),
        measure=False,
    )
    assert [d.backend for d in plan.decisions if d.node.startswith("scaled_dot")] == ["openvino"], plan.summary()
    assert any(p.backend == "openvino" for p in plan.partitions), plan.summary()
    with torch.no_grad():
        for rows in (12, 5, 2):
            got, want = plan(x[:, :rows], k, v, mask[:, :, :rows]), model(x[:, :rows], k, v, mask[:, :, :rows])
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
            if rows > 3:  # the masked row's attention is zeros: the layer sees x + silu(o's bias) there
                h = x[0, 3] + torch.nn.functional.silu(model.o.bias)
                torch.testing.assert_close(got[0, 3], h + model.mlp(model.norm(h)))
