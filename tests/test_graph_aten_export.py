"""opcore.graph.aten_export: the one-trace export gives run_decompositions' graph; where it raises,
the two public steps run; stack traces only where the lowering asks for a source line."""

from __future__ import annotations

import gc
import threading
import warnings
from typing import Any

import pytest
import torch
from graph_models import LlamaBlock, seeded

import opcore.graph
from opcore.graph import aten_export, collector
from opcore.graph.decomposing import decompositions
from opcore.graph.lowering import _CHECKS  # the checks the lowering drops


class Decomposed(torch.nn.Module):
    """Ops opcore decomposes (roll, square, maximum), a composite it keeps whole (linear), an
    in-place update of a buffer and of an intermediate, and a dynamic dim."""

    seen: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.register_buffer("seen", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(torch.roll(x, 1, dims=-1))
        h.add_(1.0)
        self.seen.copy_(h.sum(0))
        return torch.maximum(torch.square(h), x) + self.seen


def _ops(program) -> list[str]:
    return [
        str(node.target)
        for node in program.graph.nodes
        if node.op == "call_function" and not str(node.target).startswith(_CHECKS)
    ]


def _two_steps(model, args, dynamic) -> Any:
    program = torch.export.export(model, args, dynamic_shapes=dynamic, strict=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*treespec, LeafSpec", category=FutureWarning)
        return program.run_decompositions(decompositions())


@pytest.mark.parametrize(
    "model, args, dynamic",
    [
        (Decomposed(), (torch.randn(5, 8),), ({0: torch.export.Dim("rows", min=2, max=64)},)),
        (seeded(LlamaBlock()), (torch.randn(2, 8, 32),), None),
    ],
    ids=["decomposed", "llama-block"],
)
def test_one_trace_gives_the_ops_and_signature_of_export_and_run_decompositions(model, args, dynamic) -> None:
    one_trace = aten_export._one_trace()
    if one_trace is None:
        pytest.skip("this torch has not the exporter's private one-trace path: the two steps run")
    one = one_trace(model, args, {}, dynamic, dict(decompositions()))
    two = _two_steps(model, args, dynamic)
    assert _ops(one) == _ops(two)
    assert "aten.roll.default" not in _ops(one) and "aten.linear.default" in _ops(one)
    assert str(one.graph_signature) == str(two.graph_signature)  # the buffer it mutates, by name
    with torch.no_grad():
        torch.testing.assert_close(one.module()(*args), two.module()(*args))


def test_where_the_one_trace_raises_the_two_steps_give_the_program(monkeypatch) -> None:
    def raising(*args, **kwargs):
        raise RuntimeError("a private function of another torch")

    monkeypatch.setattr(aten_export, "_one_trace", lambda: raising)
    model, x = Decomposed(), torch.randn(5, 8)
    program = aten_export.decomposed(model, (x,), {}, None, decompositions(), traces=False)
    assert "aten.roll.default" not in _ops(program) and program.graph_module.meta[aten_export.TRACES] is False
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), Decomposed.forward(model, x.clone()))


@pytest.mark.parametrize("traces", [False, True])
def test_stack_traces_are_recorded_only_when_asked(traces: bool) -> None:
    program = aten_export.decomposed(
        seeded(LlamaBlock()), (torch.randn(2, 8, 32),), {}, None, decompositions(), traces=traces
    )
    recorded = [node.meta.get("stack_trace") for node in program.graph.nodes if node.op == "call_function"]
    assert any(recorded) is traces
    assert program.graph_module.meta[aten_export.TRACES] is traces


def test_with_source_lines_builds_again_with_traces_only_where_a_line_was_wanted() -> None:
    asked: list[bool] = []

    def build(traces: bool) -> str:
        asked.append(traces)
        if not traces:
            raise aten_export.SourceLinesWanted("n")
        return "built"

    assert aten_export.with_source_lines(build) == "built" and asked == [False, True]
    asked.clear()

    def fine(traces: bool) -> str:
        asked.append(traces)
        return "once"

    assert aten_export.with_source_lines(fine) == "once" and asked == [False]


def test_a_failing_export_still_says_what_torch_export_said() -> None:
    class Branching(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(opcore.graph.CaptureError, match="torch.export could not capture Branching"):
        opcore.graph.capture(Branching(), (torch.randn(3),))


class Tied(torch.nn.Module):
    """An embedding table that is also the logits' weight (tie_word_embeddings)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


def test_a_tied_weight_is_read_from_one_placeholder_as_run_decompositions_reads_it() -> None:
    model, ids = Tied(), torch.tensor([[1, 2, 3]])
    one = aten_export.decomposed(model, (ids,), {}, None, decompositions(), traces=False)
    two = _two_steps(model, (ids,), None)
    read = [
        [n.name for n in program.graph.nodes if n.op == "placeholder" and n.users and n.name.startswith("p_")]
        for program in (one, two)
    ]
    assert read[0] == read[1] and len(read[0]) == 1, read  # the same name: exclude= patterns match alike
    assert str(one.graph_signature) == str(two.graph_signature)
    with torch.no_grad():
        torch.testing.assert_close(one.module()(ids), model(ids))


class Watching(torch.nn.Module):
    """Records whether Python's automatic garbage collection was on while it was traced."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.seen: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(gc.isenabled())
        return self.linear(x)


@pytest.mark.parametrize("fails", [False, True], ids=["exported", "export-raises"])
def test_the_export_traces_with_automatic_collection_paused_and_gives_it_back(fails: bool) -> None:
    """The trace makes hundreds of thousands of objects and frees few in cycles: collection is off
    while it runs (opcore.graph.collector), and on again after, whether the export succeeds or not."""
    model = Watching()
    if fails:  # a branch on a value: torch.export raises
        model.forward = lambda x: x * 2 if x.sum() > 0 else x  # type: ignore[method-assign]
    assert gc.isenabled()
    if fails:
        with pytest.raises(Exception, match="data-dependent|GuardOnDataDependent"):
            aten_export.decomposed(model, (torch.randn(2, 4),), {}, None, decompositions(), traces=False)
    else:
        aten_export.decomposed(model, (torch.randn(2, 4),), {}, None, decompositions(), traces=False)
        assert model.seen and not any(model.seen), model.seen
    assert gc.isenabled()


def test_a_process_that_turned_collection_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_paused_blocks_overlapping_across_threads_give_collection_back_after_the_last() -> None:
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with collector.paused():
            inside.set()
            leave.wait(10)

    worker = threading.Thread(target=hold)
    worker.start()
    inside.wait(10)
    with collector.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the worker's block still holds it
    leave.set()
    worker.join(10)
    assert gc.isenabled()
