"""``plan.verify``: the plan against eager PyTorch, value by value, naming the first divergence.

The reference is the same graph run node by node on the torch backend of the plan's device (each
ATen op, or opcore's torch kernel for it): eager PyTorch, with every intermediate kept. Units are
compared in the order the plan runs them, so the first that diverges is where the error starts.

>>> report = plan.verify(x)       # doctest: +SKIP
>>> report.ok, report.first       # doctest: +SKIP
(True, None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["UnitCheck", "VerifyReport", "verify"]


@dataclass(frozen=True, slots=True)
class UnitCheck:
    """One partition or per-node step: its largest |plan - eager| over its outputs."""

    unit: str  # "partition p0 (openvino)" or "node linear_3 (cpu/onednn)"
    outputs: tuple[str, ...]
    max_abs_diff: float
    ok: bool


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """ok: every unit within tolerance; first: the first unit that is not (None when ok)."""

    checks: tuple[UnitCheck, ...]
    atol: float
    rtol: float

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def first(self) -> UnitCheck | None:
        return next((c for c in self.checks if not c.ok), None)

    @property
    def max_abs_diff(self) -> float:
        return max((c.max_abs_diff for c in self.checks), default=0.0)

    def __str__(self) -> str:
        if self.ok:
            return f"plan matches eager PyTorch: {len(self.checks)} units, max |diff| {self.max_abs_diff:.3g}"
        bad = self.first
        if bad is None:  # unreachable: not ok means some unit failed
            return "plan differs from eager PyTorch"
        differ = sum(not c.ok for c in self.checks)
        return (
            f"{bad.unit} diverges first: max |diff| {bad.max_abs_diff:.3g} on {', '.join(bad.outputs)} "
            f"(atol {self.atol}, rtol {self.rtol}); {differ} of {len(self.checks)} units differ"
        )


def verify(plan: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, atol: float, rtol: float) -> VerifyReport:
    import torch

    from opcore.graph.options import torch_route

    flat = plan.flatten(args, kwargs)
    plan.follow()  # the weights as they are now, as a call would have them
    with torch.no_grad():
        reference = plan.assembler(plan.graph, plan.constants, torch_route(plan.options))
        mine = plan.program.run(flat, keep=True)
        eager = reference.program.run(flat, keep=True)
    if plan.exported is not None:
        return _whole(plan, mine, eager, reference.program, atol, rtol)
    slot_of = plan.program.slot_of
    checks = []
    seen: set[str] = set()
    for node, decision in zip(plan.graph.nodes, plan.decisions):
        if decision.backend == "python":
            continue
        if decision.partition is not None:
            if decision.partition in seen:
                continue
            seen.add(decision.partition)
            partition = next(p for p in plan.partitions if p.name == decision.partition)
            unit, outputs = f"partition {partition.name} ({partition.backend})", tuple(partition.outputs)
        else:
            unit, outputs = f"node {node.name} ({decision.kernel or decision.backend})", node.outputs
        worst, ok = 0.0, True
        for name in outputs:
            diff, within = _compare(mine[slot_of[name]], eager[slot_of[name]], atol, rtol)
            worst, ok = max(worst, diff), ok and within
        checks.append(UnitCheck(unit, outputs, worst, ok))
    return VerifyReport(tuple(checks), atol, rtol)


def _whole(plan: Any, mine: list[Any], eager: list[Any], reference: Any, atol: float, rtol: float) -> VerifyReport:
    """A plan running the exported program as one step has one unit: its outputs against the graph's
    outputs run node by node on the torch backend."""
    from opcore.graph.runner import Slot

    ours, theirs = plan.program.outputs, reference.outputs
    worst, ok = 0.0, True
    for a, b in zip(ours, theirs):
        got = mine[a.index] if type(a) is Slot else a
        want = eager[b.index] if type(b) is Slot else b
        diff, within = _compare(got, want, atol, rtol)
        worst, ok = max(worst, diff), ok and within
    names = tuple(ref.name for ref in plan.graph.outputs if hasattr(ref, "name"))
    unit = UnitCheck("the exported program (torch, one step)", names, worst, ok)
    return VerifyReport((unit,), atol, rtol)


def _compare(got: Any, want: Any, atol: float, rtol: float) -> tuple[float, bool]:
    import torch

    if not isinstance(want, torch.Tensor):
        return 0.0, got == want
    got = torch.as_tensor(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf"), False
    if want.numel() == 0:
        return 0.0, True
    if not want.dtype.is_floating_point:
        return float((got != want).sum()), bool(torch.equal(got, want))
    diff = (got.double() - want.double()).abs()
    finite = torch.isfinite(want)
    worst = float(diff[finite].max()) if finite.any() else 0.0
    same_specials = bool(torch.equal(torch.isnan(got), torch.isnan(want)))
    within = bool((diff[finite] <= atol + rtol * want.double().abs()[finite]).all()) and same_specials
    return worst, within
