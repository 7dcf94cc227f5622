"""torch.export to the ATen graph opcore lowers, in one trace where this torch allows it.

``torch.export.export`` traces a model to its pre-dispatch (training) graph and
``ExportedProgram.run_decompositions`` traces that graph again to functionalise it and apply the
decompositions: two traces of every op. ``decomposed`` asks torch's exporter for the functional ATen
graph directly (its ``_export`` with ``pre_dispatch=False``), with the same decompositions and the
same composite ops kept whole, as ``run_decompositions`` arranges them for its own trace: one trace.
The graphs are the same ops in the same order, without the ``_assert_tensor_metadata`` checks the
second trace adds (which the lowering drops anyway); a tied weight is read from one placeholder as
the second trace reads it (``_read_ties_once``). These are torch's private functions: where
they are missing (another torch) or the one trace raises, the two public steps run instead.

Stack traces: the exporter records the Python stack of every node it makes, which was 40 % of a
135M decoder's prompt export here (9.0 s without, 14.9 s with). They serve one message, the
source line of a value read as a number (opcore.graph.lowering), so they are off unless asked
for: ``with_source_lines`` exports again with them where the lowering wants that line.

Measured (135M Llama shape, 2-core EPYC, under a test run beside it): the decode step 8.4-10.0 s
in two traces with stack traces against 3.0-3.3 s in one without; the prompt 19.2-22.1 against
9.0-9.5 s. Python's automatic garbage collection is paused while it traces (opcore.graph.collector:
the prompt's one trace 6.5 -> 5.5 s on a 2-vCPU Zen 5 EPYC).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["TRACES", "SourceLinesWanted", "decomposed", "with_source_lines"]

T = TypeVar("T")


class SourceLinesWanted(Exception):
    """The lowering wants the source line of a node, and the export recorded none: export again with
    stack traces (``with_source_lines``). Never reaches a caller of opcore."""


def with_source_lines(build: Callable[[bool], T]) -> T:
    """``build(False)`` (export without stack traces, then lower), or ``build(True)`` where that
    wanted a node's source line."""
    try:
        return build(False)
    except SourceLinesWanted:
        return build(True)


def decomposed(
    model: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    dynamic_shapes: Any,
    table: Mapping[Any, Callable[..., Any]],
    *,
    traces: bool,
) -> Any:
    """The functional ATen program of ``model`` with the ops of ``table`` decomposed by it and every
    other op whole; one trace where torch's exporter allows it, else export + run_decompositions (whose
    error, if any, is the one raised). ``traces``: record each node's stack trace."""
    import torch

    from opcore.graph.collector import paused

    with _stack_traces(traces), paused():
        one, program = _one_trace(), None
        if one is not None:
            try:
                program = _read_ties_once(one(model, args, dict(kwargs), dynamic_shapes, dict(table)))
            except Exception:  # the two public steps below raise what torch.export says of this model
                program = None
        if program is None:
            program = torch.export.export(model, args, dict(kwargs), dynamic_shapes=dynamic_shapes, strict=False)
            with warnings.catch_warnings():
                # torch 2.13's own run_decompositions deep-copies its call graph through a deprecated
                # pytree path and warns about itself; nothing the caller can act on
                warnings.filterwarnings("ignore", message=r".*treespec, LeafSpec", category=FutureWarning)
                program = program.run_decompositions(dict(table))
    program.graph_module.meta[TRACES] = traces
    return program


# the exported program's graph module meta: whether its nodes' stack traces were recorded
TRACES = "opcore_stack_traces"


@functools.cache
def _one_trace() -> Callable[..., Any] | None:
    """The one-trace export of this torch, or None where its private functions are not there."""
    try:
        from torch.export import _trace
        from torch.export.exported_program import (
            _override_composite_implicit_decomp,
            _split_decomp_table_to_cia_and_python_decomp,
        )
    except ImportError:
        return None
    if not all(hasattr(_trace, name) for name in ("_export", "_export_to_aten_ir")):
        return None

    def export(model: Any, args: Any, kwargs: dict[str, Any], dynamic_shapes: Any, table: dict[Any, Any]) -> Any:
        composite, python = _split_decomp_table_to_cia_and_python_decomp(table)
        to_aten = _trace._export_to_aten_ir
        _trace._export_to_aten_ir = functools.partial(to_aten, decomp_table=python)
        try:
            with _override_composite_implicit_decomp(composite):
                return _trace._export(model, args, kwargs, dynamic_shapes, strict=False, pre_dispatch=False)
        finally:
            _trace._export_to_aten_ir = to_aten

    return export


def _read_ties_once(program: Any) -> Any:
    """``program`` with every read of a tied parameter (an embedding table that is also the logits'
    weight) from its last placeholder, as run_decompositions' graph reads it: the one trace lifts
    each name as its own input and reads both, so a plan would hold, and save, the table twice. The
    other placeholder stays, unread, as in run_decompositions' signature."""
    names = {
        spec.arg.name: spec.target for spec in program.graph_signature.input_specs if spec.kind.name == "PARAMETER"
    }
    ties: dict[tuple[Any, ...], list[Any]] = {}
    for node in program.graph.nodes:
        tensor = program.state_dict.get(names.get(node.name, ""))
        if node.op == "placeholder" and tensor is not None:
            key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
            ties.setdefault(key, []).append(node)
    changed = False
    for nodes in ties.values():
        for node in nodes[:-1]:  # the last name is the one read, as in run_decompositions' graph
            changed |= bool(node.replace_all_uses_with(nodes[-1]))
    if changed:
        program.graph_module.recompile()
    return program


@contextmanager
def _stack_traces(record: bool) -> Iterator[None]:
    """torch.fx's stack-trace recording on (``record``) or off for the block."""
    import torch.fx.config

    before = getattr(torch.fx.config, "do_not_emit_stack_traces", False)
    torch.fx.config.do_not_emit_stack_traces = not record
    try:
        yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = before
