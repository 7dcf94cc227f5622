"""opcore.graph capture and per-node planning: torch.export -> opcore IR -> decided kernels."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from graph_models import CNN, MLP, LlamaBlock, seeded  # noqa: E402

import opcore  # noqa: E402
import opcore.graph  # noqa: E402
from opcore import dispatch  # noqa: E402
from opcore.graph.errors import CaptureError, UncoveredError  # noqa: E402
from opcore.graph.partition import compilers  # noqa: E402


def close(a, b, atol=1e-5):
    return (a - b).abs().max().item() <= atol


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    return seeded(LlamaBlock()), torch.randn(2, 8, 32)


def test_mlp_plan_matches_eager_and_keeps_linear_whole():
    model = seeded(MLP())
    x = torch.randn(4, 16)
    plan = opcore.graph.capture(model, (x,), partitions=False, rewrites=False)
    assert [n.op for n in plan.graph.nodes] == ["linear", "relu", "linear"]
    assert plan.graph.nodes[0].target == "aten.linear.default"
    assert close(plan(x), model(x))
    assert plan(torch.randn(4, 16)).shape == (4, 16)


def test_floor_divide_by_a_number_maps_to_div_rounding_to_the_floor():
    # a MoE router's flat top-k position // k; torch.export keeps the number as the Tensor argument
    class _FloorDivide(torch.nn.Module):  # type: ignore[name-defined]
        def forward(self, ids, x):
            return ids // 3, x // 0.75, torch.floor_divide(ids, ids.clamp(min=1))

    ids, x = torch.tensor([[-7, -3, 0, 2, 5, 9]]), torch.tensor([-2.0, -0.5, 0.7, 3.1])
    plan = opcore.graph.capture(_FloorDivide(), (ids, x), rewrites=False)
    divides = [n for n in plan.graph.nodes if n.target == "aten.floor_divide.default"]
    assert len(divides) == 3 and all(n.op == "div" and n.args[-1] == "floor" for n in divides)
    for got, want in zip(plan(ids, x), _FloorDivide()(ids, x), strict=True):
        assert torch.equal(got, want) and got.dtype == want.dtype


def test_a_pinned_kernel_that_declines_a_view_at_run_time_hands_it_on():
    # the example vendor's silu takes contiguous inputs only; the plan's metas show a chunk's half as
    # contiguous, so planning pins it; the real half is a strided view
    if not any(r.name == "example" and r.status.value == "loaded" for r in opcore.backends()):
        pytest.skip("opcore-example-vendor is not installed here")

    class Gated(torch.nn.Module):  # type: ignore[name-defined]
        def forward(self, x):
            a, b = x.chunk(2, dim=-1)
            return torch.nn.functional.silu(a) * b

    x = torch.randn(4, 8)
    plan = opcore.graph.capture(Gated(), (x,), measure=False, partitions=False, backends=("example", "cpu"))
    assert [d.backend for d in plan.decisions if d.op == "silu"] == ["example"]
    assert close(plan(x), Gated()(x)) and close(plan(x), Gated()(x))  # the route kept for the signature
    strict = opcore.graph.capture(
        Gated(), (x,), measure=False, partitions=False, backends=("example", "cpu"), fallback=False
    )
    with pytest.raises(opcore.NoKernelError, match="contiguous"):
        strict(x)


def test_llama_block_maps_contracts_and_falls_back_to_aten(llama):
    model, x = llama
    plan = opcore.graph.capture(model, (x,), partitions=False, rewrites=False)
    ops = {n.op for n in plan.graph.nodes}
    assert {"linear", "scaled_dot_product_attention", "reshape", "transpose", "cat", "mul", "add"} <= ops
    assert "aten.cumprod.default" in ops  # no contract: the ATen fallback
    out, total = plan(x)
    want_out, want_total = model(x)
    assert close(out, want_out) and close(total, want_total)
    # the model's output structure comes back
    assert isinstance(plan(x), tuple) and len(plan(x)) == 2


def test_every_backend_is_asked_for_every_node(llama):
    model, x = llama
    plan = opcore.graph.capture(model, (x,), partitions=False)
    loaded = {r.name for r in opcore.backends()}
    record = json.loads(plan.explain(format="json"))
    for node in record["nodes"]:
        if node["backend"] == "python":
            continue
        assert {c["backend"] for c in node["candidates"]} == loaded, node["name"]
    linear = next(n for n in record["nodes"] if n["op"] == "linear")
    assert linear["outputs"] and linear["source"]


def test_kernels_are_decided_once_no_dispatch_at_run_time(llama, monkeypatch):
    model, x = llama
    plan = opcore.graph.capture(model, (x,), partitions=False)

    def no_dispatch(*args, **kwargs):
        raise AssertionError("the plan dispatched at run time")

    monkeypatch.setattr(dispatch, "run", no_dispatch)
    monkeypatch.setattr(dispatch, "_run_slow", no_dispatch)
    out, _ = plan(x)
    assert close(out, model(x)[0])


def test_dict_and_nested_outputs_come_back_in_structure():
    class Two(torch.nn.Module):
        def forward(self, x, y):
            return {"sum": x + y, "parts": [x * 2, torch.relu(y)]}

    x, y = torch.randn(3), torch.randn(3)
    plan = opcore.graph.capture(Two(), (x, y), partitions=False)
    got = plan(x, y)
    assert set(got) == {"sum", "parts"} and len(got["parts"]) == 2
    assert close(got["parts"][1], torch.relu(y))
    with pytest.raises(opcore.ArgumentError, match="structure the model was captured with"):
        plan(x)


def test_a_call_of_plain_tensors_skips_the_pytree_walk(monkeypatch):
    class Two(torch.nn.Module):
        def forward(self, x, y):
            return x + torch.relu(y)

    x, y = torch.randn(3), torch.randn(3)
    plan = opcore.graph.capture(Two(), (x, y), partitions=False)
    plan(x, y)  # the first call compares the captured structure with n plain tensors, once
    from torch.utils import _pytree

    walked = []
    flatten = _pytree.tree_flatten
    monkeypatch.setattr(_pytree, "tree_flatten", lambda tree, *a, **k: walked.append(tree) or flatten(tree, *a, **k))
    assert close(plan(x, y), x + torch.relu(y))
    assert walked == []  # the model was captured with two tensors: the call is its own flat list
    with pytest.raises(opcore.ArgumentError, match="structure the model was captured with"):
        plan(x)  # anything else takes the walk, and its check
    with pytest.raises(opcore.ArgumentError, match="structure the model was captured with"):
        plan(x, y=y)
    assert walked


def test_dynamic_batch(llama):
    model, x = llama
    batch = torch.export.Dim("batch", min=1, max=16)
    plan = opcore.graph.capture(model, (x,), dynamic_shapes=({0: batch},), partitions=False)
    assert isinstance(plan.graph.values["x"].dims[0], str)
    for b in (1, 3, 5):
        xb = torch.randn(b, 8, 32)
        assert close(plan(xb)[0], model(xb)[0])


def test_exporter_refusal_is_an_opcore_error_with_its_reason():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(CaptureError, match="torch.export could not capture DataDependent") as info:
        opcore.graph.capture(DataDependent(), (torch.randn(3),))
    assert isinstance(info.value, opcore.OpcoreError)
    assert "Fix:" in str(info.value)


def test_a_value_read_as_a_number_is_a_capture_error_naming_the_line():
    class Sliced(torch.nn.Module):
        def forward(self, x, start):
            begin = start.item()  # the start read from a tensor's value
            torch._check(begin >= 0)
            torch._check(begin < x.shape[1])
            return x[:, begin:] * 2

    with pytest.raises(CaptureError, match=r"reads a tensor's value as a Python number") as info:
        opcore.graph.capture(Sliced(), (torch.randn(2, 8), torch.tensor(3)))
    text = str(info.value)
    assert "test_graph_capture.py line" in text and "begin = start.item()" in text, text
    assert info.value.fix is not None and "shapes" in info.value.fix


def test_complex_values_are_a_capture_error_whose_fix_is_real_pairs():
    # a rotary embedding written with complex numbers: the Fix once told the user to call
    # torch.ops.aten.polar directly, which no capture can take either
    class Rotated(torch.nn.Module):
        def forward(self, x, angles):
            turned = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2)) * torch.polar(
                torch.ones_like(angles), angles
            )
            return torch.view_as_real(turned).flatten(-2)

    with pytest.raises(CaptureError, match=r"computes torch.complex64 values: opcore represents no complex") as info:
        opcore.graph.capture(Rotated(), (torch.randn(2, 8), torch.randn(2, 4)), measure=False)
    assert info.value.fix is not None and "real pairs" in info.value.fix and "directly" not in info.value.fix


def test_dynamic_shapes_missing_the_keyword_arguments_get_a_fix_that_shows_their_form():
    from torch.export import Dim

    class Scaled(torch.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    seq = Dim("seq", min=2, max=64)
    x = torch.randn(2, 8)
    with pytest.raises(CaptureError, match="dynamic_shapes") as info:
        opcore.graph.capture(Scaled(), (x,), {"scale": 2.0}, dynamic_shapes=({1: seq},), measure=False)
    assert info.value.fix is not None and "per keyword argument" in info.value.fix, info.value
    # each form the Fix names captures
    for shapes in (({1: seq}, None), {"x": {1: seq}, "scale": None}):
        plan = opcore.graph.capture(Scaled(), (x,), {"scale": 2.0}, dynamic_shapes=shapes, measure=False)
        y = torch.randn(2, 20)
        assert torch.equal(plan(y, scale=2.0), y * 2.0)


def test_submodule_path_captures_part(llama):
    model, _ = llama
    h = torch.randn(2, 8, 32)
    plan = opcore.graph.capture(model, (h,), submodule="norm1", partitions=False)
    assert close(plan(h), model.norm1(h))
    with pytest.raises(opcore.ArgumentError, match="submodule"):
        opcore.graph.capture(model, (h,), submodule="no.such.part")


def test_strict_lists_every_uncovered_node(llama):
    model, x = llama
    with pytest.raises(UncoveredError) as info:
        opcore.graph.capture(model, (x,), backends=["onnxruntime"], fallback=False, partitions=False)
    message = str(info.value)
    assert "cumprod" in message and "onnxruntime" in message
    with opcore.strict(), pytest.raises(UncoveredError, match="cumprod"):
        opcore.graph.capture(model, (x,), backends=["onnxruntime"], partitions=False)
    # with fallback, the same request runs: onnxruntime where it accepts, the ranked rest elsewhere
    plan = opcore.graph.capture(model, (x,), backends=["onnxruntime"], partitions=False)
    backends = {d.backend for d in plan.decisions}
    assert "onnxruntime" in backends and "cpu" in backends
    assert close(plan(x)[0], model(x)[0], atol=1e-4)


def test_backends_must_be_loaded():
    with pytest.raises(opcore.PluginError, match="no_such_backend"):
        opcore.graph.capture(seeded(MLP()), (torch.randn(2, 16),), backends=["no_such_backend"])


def test_cnn_and_verify():
    model = seeded(CNN())
    x = torch.randn(2, 3, 8, 8)
    # measure=False: a unit per node to verify (the guard could run the exported program in one step)
    plan = opcore.graph.capture(model, (x,), partitions=False, measure=False)
    assert "conv2d" in {n.op for n in plan.graph.nodes}
    assert close(plan(x), model(x), atol=1e-4)
    report = plan.verify(x)
    assert report.ok, str(report)
    assert report.first is None and len(report.checks) == len(plan.graph.nodes)


def test_explain_summary_and_json(llama):
    model, x = llama
    plan = opcore.graph.capture(model, (x,), partitions=False, measure=False)  # the per-node summary
    text = plan.explain()
    first = text.splitlines()[0]
    assert first.startswith("cpu ") and "nodes" in first
    assert "cumprod" in text
    unloaded = [line for line in text.splitlines() if line.startswith("not loaded: ")]
    assert len(unloaded) <= 1 and (not unloaded or text.splitlines()[-1] == unloaded[0])  # one line, at the end
    record = json.loads(plan.explain(format="json"))
    assert record["summary"] == first
    assert len(record["nodes"]) == len(plan.graph.nodes)
    with pytest.raises(opcore.ArgumentError, match="format"):
        plan.explain(format="yaml")


def test_factories_fold_into_constants_or_follow_dynamic_sizes():
    class Positions(torch.nn.Module):
        def forward(self, x):
            return x + torch.arange(x.shape[1], dtype=x.dtype) + torch.zeros(x.shape[0], 1)

    x = torch.randn(2, 5)
    static = opcore.graph.capture(Positions(), (x,), partitions=False)
    assert not any(n.op.startswith("aten.arange") for n in static.graph.nodes)  # folded
    assert close(static(x), Positions()(x))
    batch = torch.export.Dim("batch", min=1, max=8)
    dynamic = opcore.graph.capture(Positions(), (x,), dynamic_shapes=({0: batch},), partitions=False)
    # a size known only at run time: the zeros contract (its mapping row), run by a backend
    zeros = [d for d in dynamic.decisions if d.op == "zeros"]
    assert zeros and zeros[0].backend not in ("", "python"), dynamic.decisions
    x3 = torch.randn(3, 5)
    assert close(dynamic(x3), Positions()(x3))


def test_non_tensor_inputs_are_baked_in_and_checked():
    class Flagged(torch.nn.Module):
        def forward(self, x, flag=True, scale=2.0):
            return x * scale if flag else x

    x = torch.randn(3)
    plan = opcore.graph.capture(Flagged(), (x,), {"flag": True, "scale": 3.0}, partitions=False)
    assert close(plan(x, flag=True, scale=3.0), x * 3.0)
    with pytest.raises(opcore.ArgumentError, match="baked into the plan"):
        plan(x, flag=True, scale=4.0)


def test_view_ops_map_to_their_contracts():
    class Views(torch.nn.Module):
        def forward(self, x):
            return x.unsqueeze(1).squeeze(1).flatten(1).expand(2, -1)[:, 1:3].select(1, 0) + x.flatten()[0]

    x = torch.randn(1, 4, 3)
    plan = opcore.graph.capture(Views(), (x,), partitions=False)
    ops = [n.op for n in plan.graph.nodes]
    assert {"unsqueeze", "squeeze", "expand", "slice", "select"} <= set(ops)
    assert not any(op.startswith("aten.") for op in ops)
    assert close(plan(x), Views()(x))


def indexing_model():
    """gather, index, pad and the list results of split / split_with_sizes / chunk (read through getitem)."""

    class Indexing(torch.nn.Module):
        def forward(self, x, i):
            a, b = torch.split(x, 2, dim=1)
            first, _ = torch.chunk(x, 2, dim=0)
            _, rest = torch.split(x, [1, 3], dim=1)
            picked = torch.gather(x, 1, i)
            rows = x[i[:, 0]]
            padded = torch.nn.functional.pad(x, (1, 1), value=2.0)
            cut = torch.nn.functional.pad(x, (0, -1, 1, 0))
            return a * b, first, rest, picked, rows, padded, cut

    return Indexing()


def test_indexing_ops_map_to_their_contracts():
    x, i = torch.randn(4, 4), torch.randint(0, 4, (4, 2))
    model = indexing_model()
    plan = opcore.graph.capture(model, (x, i), partitions=False)
    ops = [n.op for n in plan.graph.nodes]
    # torch.chunk exports as aten.split.Tensor; F.pad as aten.pad.default
    assert {"split", "split_with_sizes", "gather", "index", "pad"} <= set(ops)
    assert not any(op.startswith("aten.") for op in ops), ops
    split = next(n for n in plan.graph.nodes if n.op == "split_with_sizes")
    assert split.outputs == (f"{split.name}.0", f"{split.name}.1")  # one IR value per piece
    for got, want in zip(plan(x, i), model(x, i)):
        assert torch.equal(got, want)


def test_pad_modes_other_than_constant_stay_on_aten():
    class Reflect(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.pad(x, (1, 1), mode="reflect") + 1

    x = torch.randn(1, 2, 5)
    plan = opcore.graph.capture(Reflect(), (x,), partitions=False)
    node = plan.graph.nodes[0]
    assert node.op.startswith("aten.") and node.op != "pad"
    assert close(plan(x), Reflect()(x))


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_indexing_ops_run_in_graph_runtime_partitions(backend, monkeypatch):
    from opcore.graph import partitioning

    if backend not in compilers():
        pytest.skip(f"the {backend} backend is not loaded here")
    # a partition of every node, whatever the cost rule says of so small a model (min_nodes=0: the
    # splits are view ops, SHAPE_OPS, which alone never make a partition under the usual rule)
    monkeypatch.setattr(partitioning, "COST", partitioning.Cost(call_us=0.0, boundary_us=0.0, min_nodes=0))
    x, i = torch.randn(4, 4), torch.randint(0, 4, (4, 2))
    model = indexing_model()
    plan = opcore.graph.capture(model, (x, i), backends=[backend])
    placed = {n.op for p in plan.partitions for n in p.spec.nodes}
    assert {"split", "split_with_sizes", "gather", "index", "pad"} <= placed, plan.explain()
    for got, want in zip(plan(x, i), model(x, i)):
        assert torch.equal(got, want)


def test_reductions_casts_and_selection_map_to_their_contracts():
    class Mixed(torch.nn.Module):
        def forward(self, x, mask):
            y = torch.where(mask, x.pow(2), 0.5).masked_fill(mask.logical_not(), -1.0).clamp(-0.5, 4.0)
            y = torch.nn.functional.softplus(y) + torch.nn.functional.hardswish(x)
            z = y.sum(-1, keepdim=True) + y.mean(0) + y.amax(1, keepdim=True) - y.amin(1, keepdim=True)
            return z.cumsum(1) + x.argmax(-1, keepdim=True).to(torch.float32) + (x > 0).to(torch.float32)

    x, mask = torch.randn(3, 4), torch.randn(3, 4) > 0
    plan = opcore.graph.capture(Mixed(), (x, mask), partitions=False)
    ops = {n.op for n in plan.graph.nodes}
    wanted = {"pow", "where", "masked_fill", "clamp", "softplus", "hardswish", "sum", "mean", "amax", "amin"}
    assert wanted | {"cumsum", "argmax", "cast"} <= ops, sorted(ops)
    assert not any(op.startswith("aten.") for op in ops), sorted(ops)
    assert close(plan(x, mask), Mixed()(x, mask))


def test_every_one_tensor_elementwise_contract_maps_from_its_aten_op_without_a_line():
    from opcore.graph.mapping import RULES
    from opcore.opset.elementwise import CONTRACTS

    unary = [c.name for c in CONTRACTS if str(c.schema) == f"{c.name}(Tensor x) -> Tensor"]
    assert {"relu", "sigmoid", "hardswish", "logical_not"} <= set(unary)
    for name in unary:
        rule = RULES[f"aten.{name}.default"]
        assert (rule.op, dict(rule.args)) == (name, {"x": "self"})
        schema = getattr(torch.ops.aten, name).default._schema  # ATen's op of that name takes one tensor, self
        assert [a.name for a in schema.arguments] == ["self"], schema


def test_bitwise_ops_of_bool_masks_map_to_the_logical_ones_and_of_integers_do_not():
    class Masks(torch.nn.Module):
        def forward(self, x, n):
            mask = ((x > 0) & (x < 2)) | ~(x > -1)
            return torch.where(mask, x, 0.0), n & n.flip(0)

    x, n = torch.randn(3, 4), torch.arange(12).reshape(3, 4)
    plan = opcore.graph.capture(Masks(), (x, n), partitions=False)
    ops = [node.op for node in plan.graph.nodes]
    assert {"logical_and", "logical_or", "logical_not", "where"} <= set(ops), ops
    # n & n.flip(0): integers, bitwise; the mapping is refused and the node runs as ATen
    assert "aten.bitwise_and.Tensor" in ops or "aten.__and__.Tensor" in ops, ops
    got, want = plan(x, n), Masks()(x, n)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_like_factories_of_a_dynamic_input_map_to_their_contracts():
    class Likes(torch.nn.Module):
        def forward(self, x):
            return torch.zeros_like(x) + torch.ones_like(x, dtype=torch.int32) * torch.full_like(x, 2.5)

    x = torch.randn(3, 4)
    batch = torch.export.Dim("batch")
    plan = opcore.graph.capture(Likes(), (x,), partitions=False, dynamic_shapes=({0: batch},))
    ops = {node.op for node in plan.graph.nodes}
    assert {"zeros_like", "ones_like", "full_like"} <= ops, sorted(ops)
    y = torch.randn(5, 4)
    assert close(plan(y), Likes()(y))


def pooling_model():
    """batch_norm (eval), max_pool2d (ceil_mode, padding), avg_pool2d (count_include_pad=False), adaptive_avg_pool2d."""

    class Pooling(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(3)
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.data.uniform_(0.5, 2)
            self.gn = torch.nn.GroupNorm(3, 3)

        def forward(self, x):
            y = torch.nn.functional.max_pool2d(torch.relu(self.gn(self.bn(x))), 3, 2, 1, ceil_mode=True)
            z = torch.nn.functional.avg_pool2d(y, 2, padding=1, count_include_pad=False)
            return torch.nn.functional.adaptive_avg_pool2d(z, (2, 3)) + 1, torch.nn.functional.adaptive_avg_pool2d(y, 1)

    return Pooling().eval()


def test_pooling_ops_map_to_their_contracts():
    model, x = pooling_model(), torch.randn(2, 3, 9, 9)
    plan = opcore.graph.capture(model, (x,), partitions=False)
    ops = [n.op for n in plan.graph.nodes]
    # BatchNorm2d in eval() exports _native_batch_norm_legit_no_training (three outputs, the first used)
    assert {"batch_norm", "group_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"} <= set(ops), ops
    assert not any(op.startswith("aten.") for op in ops), ops
    for got, want in zip(plan(x), model(x)):
        assert close(got, want)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_pooling_ops_run_in_graph_runtime_partitions(backend):
    if backend not in compilers():
        pytest.skip(f"the {backend} backend is not loaded here")
    model, x = pooling_model(), torch.randn(2, 3, 9, 9)
    plan = opcore.graph.capture(model, (x,), backends=[backend])
    placed = {n.op for p in plan.partitions for n in p.spec.nodes}
    assert {"batch_norm", "group_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"} <= placed, plan.explain()
    for got, want in zip(plan(x), model(x)):
        assert close(got, want)


def test_an_aten_op_whose_other_outputs_are_used_stays_on_aten():
    class Stats(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.zeros(3))
            self.register_buffer("var", torch.ones(3))

        def forward(self, x):
            out, saved, _ = torch.ops.aten._native_batch_norm_legit_no_training(x, None, None, self.mean, self.var,
                                                                                  0.1, 1e-5)  # fmt: skip
            return out + 1, saved

    x = torch.randn(2, 3, 4)
    plan = opcore.graph.capture(Stats(), (x,), partitions=False)
    node = plan.graph.nodes[0]
    assert node.op == "aten._native_batch_norm_legit_no_training.default"
    assert "the others are used" in plan.explain()
    # (not run: torch's meta function gives the saved mean 3 values, its CPU kernel none, which the
    # ATen fallback's result check refuses)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")  # torch's own
def test_conv_string_padding_maps_to_the_contracts():
    class Padded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.valid = torch.nn.Conv2d(3, 4, 3, padding="valid")
            self.same = torch.nn.Conv2d(4, 4, (2, 3), padding="same", dilation=(1, 2))
            self.line = torch.nn.Conv1d(4, 6, 4, padding="same", groups=2)
            self.plain = torch.nn.Conv1d(6, 2, 3, stride=2, padding=1)

        def forward(self, x):
            y = self.same(self.valid(x))
            return self.plain(self.line(y.flatten(2)))

    model, x = seeded(Padded()), torch.randn(1, 3, 8, 8)
    plan = opcore.graph.capture(model, (x,), partitions=False)
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("conv2d") == 2 and ops.count("conv1d") == 2, ops
    targets = {n.target for n in plan.graph.nodes}
    assert {"aten.conv2d.padding", "aten.conv1d.padding", "aten.conv1d.default"} <= targets, targets
    assert close(plan(x), model(x), atol=1e-4)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_conv_string_padding_runs_in_graph_runtime_partitions(backend):
    if backend not in compilers():
        pytest.skip(f"the {backend} backend is not loaded here")

    class Padded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.same = torch.nn.Conv2d(3, 4, (2, 4), padding="same", dilation=(2, 1))
            self.line = torch.nn.Conv1d(4, 4, 2, padding="same", dilation=3)

        def forward(self, x):
            y = torch.sigmoid(self.same(torch.relu(x)))
            return torch.relu(self.line(y.flatten(2))) * 2.0

    model, x = seeded(Padded()), torch.randn(2, 3, 6, 7)
    # the estimated cost rule (no timing): a partition of these few nodes is worth compiling
    plan = opcore.graph.capture(model, (x,), backends=[backend], measure=False)
    placed = {n.op for p in plan.partitions for n in p.spec.nodes}
    assert {"conv1d", "conv2d"} <= placed, plan.explain()
    assert close(plan(x), model(x), atol=1e-4)


def addmm_model():
    """GPT-2's Conv1D (torch.addmm(bias, x2d, w) with w (in, out)) and an addmm with beta and alpha."""

    class Conv1D(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(6, 5))
            self.bias = torch.nn.Parameter(torch.randn(5))

        def forward(self, x):
            y = torch.tanh(torch.addmm(self.bias, x.view(-1, 6), self.weight)).view(*x.shape[:-1], 5)
            return torch.tanh(torch.addmm(y[0], y[0], torch.ones(5, 5), beta=0.5, alpha=2.0)) * 2

    return seeded(Conv1D())


def test_addmm_maps_to_its_contract():
    model, x = addmm_model(), torch.randn(2, 3, 6)
    plan = opcore.graph.capture(model, (x,), partitions=False)
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("addmm") == 2, ops
    assert close(plan(x), model(x), atol=1e-5)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_addmm_runs_in_graph_runtime_partitions(backend):
    if backend not in compilers():
        pytest.skip(f"the {backend} backend is not loaded here")
    model, x = addmm_model(), torch.randn(2, 3, 6)
    # measure=False: placement by the checkers alone (a graph this small may time faster on torch)
    plan = opcore.graph.capture(model, (x,), backends=[backend], measure=False)
    placed = [n.op for p in plan.partitions for n in p.spec.nodes]
    assert placed.count("addmm") == 2, plan.explain()
    assert close(plan(x), model(x), atol=1e-4)


def test_clone_and_alias_map_to_clone_without_rewrites():
    class Copies(torch.nn.Module):
        def forward(self, x):
            y = torch.relu(x).clone()
            return torch.ops.aten.alias(y) * 2, y.clone(memory_format=torch.contiguous_format) + 1

    x = torch.randn(2, 3)
    plan = opcore.graph.capture(Copies(), (x,), rewrites=False, partitions=False)
    ops = [n.op for n in plan.graph.nodes]
    assert ops.count("clone") == 2, ops  # clone and alias; contiguous_format stays on ATen
    assert "aten.clone.default" in ops, ops
    for got, want in zip(plan(x), Copies()(x)):
        assert torch.equal(got, want)


def test_backends_and_measure_of_the_wrong_kind_and_a_model_without_weights_are_refused_before_export():
    """A lone backend name is that backend (its letters were names "not installed"); a list that is
    not of names, a measure that is neither a bool nor a timer, and a model on the meta device (no
    weights: export traced it into nodes no backend covers) are ArgumentErrors naming the argument."""
    model, x = torch.nn.Linear(8, 4).eval(), torch.randn(2, 8)
    alone = opcore.graph.capture(model, (x,), backends="cpu", measure=False)
    assert {d.backend for d in alone.decisions} == {"cpu"}
    wrong = (({"backends": [1]}, "backends"), ({"backends": []}, "backends"), ({"measure": "yes"}, "measure"))
    for kwargs, arg in wrong:
        with pytest.raises(opcore.ArgumentError) as info:
            opcore.graph.capture(model, (x,), **kwargs)
        assert info.value.arg == arg
    with torch.device("meta"):
        empty = torch.nn.Linear(8, 4)
    with pytest.raises(opcore.ArgumentError, match=r"2 of its 2 parameters and buffers on the meta device.*'weight'"):
        opcore.graph.capture(empty.eval(), (x,))


def test_a_function_is_no_model_and_the_error_says_how_to_wrap_it():
    with pytest.raises(opcore.ArgumentError, match="torch.nn.Module") as info:
        opcore.graph.capture(torch.relu, (torch.randn(2, 3),))
    assert info.value.fix is not None and "forward" in info.value.fix
