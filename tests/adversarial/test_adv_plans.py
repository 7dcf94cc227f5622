"""A captured plan refuses bad input as clearly as single ops do, and never returns garbage for it
(issue 31): wrong structure, dtype, device, sizes, indices out of range; NaN/inf, numpy and
non-contiguous inputs run as eager does. Every plan kind: ranked, openvino-only, onnxruntime-only and
cpu-only; static and dynamic; captured and loaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy
import pytest
import torch
from torch import nn

import opcore
import opcore.graph
from opcore.errors import ArgumentError, DeviceError, DTypeError, OpcoreError, ShapeError, Unsupported

transformers = pytest.importorskip("transformers")

LOADED = {r.name for r in opcore.backends() if r.ok}
VARIANTS = {  # label -> capture's backends
    "ranked": None,
    "openvino": ("openvino",),
    "onnxruntime": ("onnxruntime",),
    "cpu": ("cpu",),
}
VOCAB, SEQ = 99, 8


class Bert(nn.Module):
    """A tiny BertModel (random weights) called on input ids, returning the last hidden state."""

    def __init__(self) -> None:
        super().__init__()
        config = transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64,
        )  # fmt: skip
        self.bert = transformers.BertModel(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids).last_hidden_state


class Mixer(nn.Module):
    """Float math a graph runtime takes whole (linear, layer_norm, gelu, softmax), a nested input and a
    keyword one."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor, pair: tuple[torch.Tensor, torch.Tensor], *, scale: torch.Tensor) -> torch.Tensor:
        h = self.norm(x + pair[0] * pair[1])
        h = self.b(torch.nn.functional.gelu(self.a(h)))
        return torch.softmax(h * scale, dim=-1) + h


class Picker(nn.Module):
    """Indices as inputs: a gather, an advanced index (negative indices allowed, as in eager) and an
    embedding of a computed index (ids + 1), which no range proves."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, idx: torch.Tensor, cols: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        picked = torch.gather(x, 1, idx) * 2.0 + 1.0
        taken = x[:, cols] * 3.0 - 1.0
        looked = self.proj(torch.relu(self.table(ids + 1))).sum(1)
        return picked.sum(-1, keepdim=True) + taken.sum(-1, keepdim=True) + looked


def _seeded(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.2)
    return model.eval()


def _ids(length: int = SEQ) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(length))


def _mixer_inputs(batch: int = 2) -> tuple[tuple[Any, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(batch)
    x, p0, p1 = (torch.randn(batch, 16, generator=g) for _ in range(3))
    return (x, (p0, p1)), {"scale": torch.tensor(0.5)}


def _picker_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, generator=g)
    idx = torch.randint(0, 8, (2, 3), generator=g)
    cols = torch.tensor([0, -1, 5])
    ids = torch.randint(0, 9, (2, 4), generator=g)
    return x, idx, cols, ids


BATCH = torch.export.Dim("batch", min=2, max=16)
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[tuple[Any, ...], dict[str, Any]]], Any]] = {
    "bert": (Bert, lambda: ((_ids(),), {}), ({1: torch.export.Dim("seq", min=2, max=32)},)),
    "mixer": (Mixer, _mixer_inputs, {"x": {0: BATCH}, "pair": ({0: BATCH}, {0: BATCH}), "scale": None}),
    "picker": (Picker, lambda: (_picker_inputs(), {}), None),
}


class Plans:
    """Captured (and saved, then loaded) plans, made on first use and shared by the module's tests."""

    def __init__(self, folder: Any) -> None:
        self.folder = folder
        self.models: dict[str, nn.Module] = {}
        self.made: dict[tuple[str, str, bool, bool], Any] = {}

    def model(self, name: str) -> nn.Module:
        if name not in self.models:
            self.models[name] = _seeded(MODELS[name][0]())
        return self.models[name]

    def get(self, name: str, variant: str, dynamic: bool = False, loaded: bool = False) -> Any:
        backends = VARIANTS[variant]
        if backends is not None and not set(backends) <= LOADED:
            pytest.skip(f"backend {backends[0]} is not loaded here")
        key = (name, variant, dynamic, loaded)
        if key not in self.made:
            if loaded:
                plan = self.get(name, variant, dynamic)
                where = self.folder / "-".join(map(str, key[:3]))
                plan.save(where)
                self.made[key] = opcore.graph.load(where)
            else:
                args, kwargs = MODELS[name][1]()
                shapes = MODELS[name][2] if dynamic else None
                self.made[key] = opcore.graph.capture(
                    self.model(name), args, kwargs, dynamic_shapes=shapes, backends=backends, measure=False
                )
        return self.made[key]


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> Plans:
    return Plans(tmp_path_factory.mktemp("plans"))


KINDS = [
    pytest.param(variant, dynamic, loaded, id=f"{variant}-{'dynamic' if dynamic else 'static'}-"
                 f"{'loaded' if loaded else 'captured'}")
    for variant in VARIANTS
    for dynamic in (False, True)
    for loaded in (False, True)
]  # fmt: skip


def _raises(kind: type[OpcoreError], call: Callable[[], Any], *words: str) -> OpcoreError:
    with pytest.raises(kind) as info:
        call()
    text = str(info.value)
    assert "Fix: " in text, text
    for word in words:
        assert word in text, (word, text)
    return info.value


def _same(got: Any, expected: Any) -> None:
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, equal_nan=True)


# --- BERT: one input of ids --------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "dynamic", "loaded"), KINDS)
def test_bert_plans_refuse_every_mistake_and_name_input_ids(plans: Plans, variant: str, dynamic: bool, loaded: bool):
    plan = plans.get("bert", variant, dynamic, loaded)
    model = plans.model("bert")
    ids = _ids()
    with torch.no_grad():
        expected = model(ids)
    _same(plan(ids), expected)
    if variant in ("openvino", "onnxruntime"):
        assert plan.partitions, plan.explain()  # the case the issue is about: nodes inside a graph runtime
    # indices out of range: eager raises IndexError; a plan an ArgumentError naming the input and the range
    for bad in (VOCAB, 9999, -3, -(2**40)):
        wrong = ids.clone()
        wrong[0, 3] = bad
        with pytest.raises(IndexError):
            model(wrong)
        _raises(ArgumentError, partial(plan, wrong), "'input_ids'", f"[0, {VOCAB - 1}]", f"index {bad}")
    # dtypes: a cast is the fix
    for other in (torch.int32, torch.float32):
        _raises(DTypeError, partial(plan, ids.to(other)), "'input_ids'", "int64", ".to(torch.int64)")
    _raises(DeviceError, lambda: plan(ids.to("meta")), "'input_ids'", "meta", ".to('cpu')")
    _raises(ShapeError, lambda: plan(ids[0]), "'input_ids'", "2-D", "1-D")
    _raises(ShapeError, lambda: plan(ids.expand(2, SEQ)), "'input_ids'", "size 1 at dim 0", "dynamic_shapes")
    if dynamic:
        for length in (5, 32):
            longer = _ids(length)
            with torch.no_grad():
                _same(plan(longer), model(longer))
        for length in (1, 40):
            _raises(
                ShapeError,
                partial(plan, _ids(length)),
                "'input_ids'",
                "[2, 32]",
                f" = {length} (shape [1, {length}])",
                "Dim(",
            )
    else:
        _raises(ShapeError, lambda: plan(_ids(9)), "'input_ids'", "size 8 at dim 1", "dynamic_shapes=")
    # structure
    _raises(ArgumentError, plan, "input_ids: int64[1, ")
    _raises(ArgumentError, lambda: plan(ids, ids), "input_ids: int64[1, ")
    _raises(ArgumentError, lambda: plan(ids.tolist()), "input_ids: int64[1, ", "8 values")  # a list is structure
    _raises(ArgumentError, lambda: plan(3), "'input_ids'", "found a int", "torch.as_tensor")


@pytest.mark.parametrize(("variant", "dynamic", "loaded"), KINDS)
def test_bert_plans_take_numpy_and_non_contiguous_ids_as_eager_takes_the_tensor(
    plans: Plans, variant: str, dynamic: bool, loaded: bool
):
    plan = plans.get("bert", variant, dynamic, loaded)
    model = plans.model("bert")
    ids = _ids()
    with torch.no_grad():
        expected = model(ids)
    got = plan(ids.numpy())
    assert isinstance(got, torch.Tensor)
    _same(got, expected)
    readonly = ids.numpy().copy()
    readonly.flags.writeable = False
    _same(plan(readonly), expected)
    strided = torch.zeros(1, 2 * SEQ, dtype=torch.int64)
    strided[:, ::2] = ids
    assert not strided[:, ::2].is_contiguous()
    _same(plan(strided[:, ::2]), expected)
    column = ids.t().contiguous().t()  # (1, 8) with strides (1, 1)
    _same(plan(column), expected)
    _raises(DTypeError, lambda: plan(ids.numpy().astype(numpy.int32)), "'input_ids'", "int64")
    _raises(DTypeError, lambda: plan(numpy.array(["a"] * SEQ).reshape(1, SEQ)), "'input_ids'", "astype(numpy.int64)")


# --- float inputs: NaN and inf, a nested and a keyword input ------------------------------------


@pytest.mark.parametrize(("variant", "dynamic", "loaded"), KINDS)
def test_nan_and_inf_run_as_eager_runs_them(plans: Plans, variant: str, dynamic: bool, loaded: bool):
    plan = plans.get("mixer", variant, dynamic, loaded)
    model = plans.model("mixer")
    (x, pair), kwargs = _mixer_inputs()
    for poison in (float("nan"), float("inf"), float("-inf")):
        bad = x.clone()
        bad[0, 3] = poison
        with torch.no_grad():
            expected = model(bad, pair, **kwargs)
        _same(plan(bad, pair, **kwargs), expected)
    every = torch.full_like(x, float("inf"))
    with torch.no_grad():
        _same(plan(every, pair, **kwargs), model(every, pair, **kwargs))


@pytest.mark.parametrize(("variant", "dynamic", "loaded"), KINDS)
def test_nested_and_keyword_inputs_are_named_as_the_signature_names_them(
    plans: Plans, variant: str, dynamic: bool, loaded: bool
):
    plan = plans.get("mixer", variant, dynamic, loaded)
    (x, (p0, p1)), kwargs = _mixer_inputs()
    _raises(DTypeError, lambda: plan(x, (p0, p1.double()), **kwargs), "'pair[1]'", "pair[1].to(torch.float32)")
    _raises(DTypeError, lambda: plan(x, (p0, p1), scale=torch.tensor(1)), "'scale'", "float32")
    _raises(ArgumentError, lambda: plan(x, (p0, p1)), "x: float32[", "pair[0]: float32[", "scale: float32[]")
    _raises(ArgumentError, lambda: plan(x, (p0, p1, p1), **kwargs), "(4 values)", "found 5 values")
    _raises(ShapeError, lambda: plan(x, (p0, p1[:, :8]), **kwargs), "'pair[1]'", "size 16 at dim 1")
    if dynamic:
        (x4, (q0, q1)), _ = _mixer_inputs(4)
        with torch.no_grad():
            _same(plan(x4, (q0, q1), **kwargs), plans.model("mixer")(x4, (q0, q1), **kwargs))
        # one Dim for the three batch sizes: they must agree
        _raises(ShapeError, lambda: plan(x4, (q0[:3], q1[:3]), **kwargs), "'pair[0]'", "size 4 at dim 0", "x")
    else:
        _raises(ShapeError, lambda: plan(x[:1], (p0[:1], p1[:1]), **kwargs), "'x'", "size 2 at dim 0")


# --- indices that are inputs ------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "loaded"), [(v, loaded) for v in VARIANTS for loaded in (False, True)])
def test_gather_index_and_embedding_indices_are_checked_as_eager_checks_them(plans: Plans, variant: str, loaded: bool):
    plan = plans.get("picker", variant, False, loaded)
    model = plans.model("picker")
    x, idx, cols, ids = _picker_inputs()
    with torch.no_grad():
        _same(plan(x, idx, cols, ids), model(x, idx, cols, ids))
        wrapped = torch.tensor([-8, -1, 7])  # negative advanced indices count from the end, as in eager
        _same(plan(x, idx, wrapped, ids), model(x, idx, wrapped, ids))
    cases = [
        ("idx", (x, idx.clamp(max=0) + 8, cols, ids), "[0, 7]"),
        ("idx", (x, idx - 9, cols, ids), "[0, 7]"),
        ("cols", (x, idx, torch.tensor([0, 8, 1]), ids), "[-8, 7]"),
        ("cols", (x, idx, torch.tensor([0, -9, 1]), ids), "[-8, 7]"),
    ]
    for name, args, wanted in cases:
        with pytest.raises((IndexError, RuntimeError)):  # gather's is a RuntimeError, index's an IndexError
            model(*args)
        _raises(ArgumentError, partial(plan, *args), f"'{name}'", wanted)
    # ids + 1 is computed: no range proves it, so the embedding stays out of partitions and its kernel
    # checks it as the single op does
    embedding = next(d for d in plan.decisions if d.op == "embedding")
    assert embedding.partition is None or embedding.partition == "", plan.explain()
    for bad in (torch.full_like(ids, 9), torch.full_like(ids, -2)):
        with pytest.raises(IndexError):
            model(x, idx, cols, bad)
        with pytest.raises(OpcoreError, match=re.escape("out of range")):
            plan(x, idx, cols, bad)


def test_an_unproven_index_says_why_in_explain(plans: Plans):
    if "openvino" not in LOADED:
        pytest.skip("openvino is not loaded here")
    plan = plans.get("picker", "openvino")
    text = plan.explain()
    assert "its indices are not proven in range and a partition does not check them" in text, text


# --- runtime failures ----------------------------------------------------------------------------


def test_a_runtime_failing_while_running_names_partition_backend_and_nodes(plans: Plans):
    from opcore.graph.partitioning import run_failure

    error = Unsupported("partition p0 on openvino failed: first line")
    error.__cause__ = RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp:104:\nthe second line")
    text = str(run_failure("partition p0 on openvino (nodes embedding .. add_3, 30 nodes)", error))
    assert text.startswith("partition p0 on openvino (nodes embedding .. add_3, 30 nodes) failed while running: ")
    assert "infer_request.cpp:104:\nthe second line" in text


@pytest.mark.parametrize("variant", ["openvino", "onnxruntime"])
def test_a_plan_whose_runtime_fails_while_running_names_partition_backend_and_nodes(
    plans: Plans, variant: str, monkeypatch: pytest.MonkeyPatch
):
    plan = plans.get("bert", variant)
    record = plan.partitions[0]
    original = type(record.compiled).__call__

    def failing(self: Any, *inputs: Any) -> Any:
        if self is not record.compiled:
            return original(self, *inputs)
        try:  # what the backends do: the runtime's exception, then their Unsupported citing its first line
            raise RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp:104:\nthe second line")
        except RuntimeError as error:
            raise Unsupported(f"partition {record.name} on {record.backend} failed: first line") from error

    monkeypatch.setattr(type(record.compiled), "__call__", failing)
    with pytest.raises(Unsupported) as info:
        plan(_ids())
    text = str(info.value)
    assert text.startswith(
        f"partition {record.name} on {record.backend} (nodes {record.nodes[0]} .. {record.nodes[-1]}, "
        f"{len(record.nodes)} nodes) failed while running: RuntimeError: Exception from "
    ), text
    assert "infer_request.cpp:104:\nthe second line" in text
