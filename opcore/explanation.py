"""``opcore.explain``: which backend would run a call, and why each other one would not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opcore.errors import OpcoreError
from opcore.kernel_walk import Candidate, CandidateStatus, Selection
from opcore.types import TensorMeta

__all__ = ["Explanation", "explanation_of"]


@dataclass(frozen=True, slots=True)
class Explanation:
    """The collected answer; ``str()`` renders it as a table.

    chosen: "backend/label", "decomposition", or None when the call cannot run (see error).
    """

    op: str
    schema: str
    inputs: tuple[tuple[str, str], ...]
    candidates: tuple[Candidate, ...]
    chosen: str | None
    order: str
    strict: bool
    pin: str | None
    error: str | None = None
    # How the kernels were ranked when a tuning file is in play: "measured: <entry key>, <when>" or why
    # its times were not used ("tuning file stale: ..."); "" without a tuning file (static ranking).
    ranking: str = ""

    def __str__(self) -> str:
        args = ", ".join(f"{name}: {text}" for name, text in self.inputs)
        lines = [f"{self.op}({args})"]
        mode = f"pinned to {self.pin}" if self.pin else ("strict" if self.strict else "fallback allowed")
        lines.append(f"order: {self.order} · {mode}")
        if self.ranking:
            lines.append(f"ranking: {self.ranking}")
        timed = any(c.measured is not None for c in self.candidates)
        rows = [("backend", "priority", *(("measured",) if timed else ()), "status", "reason")]
        for c in self.candidates:
            priority = "" if c.priority is None else str(c.priority)
            measured = (c.measured.text() if c.measured is not None else "",) if timed else ()
            rows.append((c.title, priority, *measured, c.status.value, c.reason))
        n = len(rows[0]) - 1
        widths = [max(len(r[i]) for r in rows) for i in range(n)]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:n])) + "  " + row[n])
        if self.chosen == "decomposition":
            lines.append("-> no kernel accepts it; runs as its decomposition into other ops")
        elif self.chosen:
            lines.append(f"-> runs on {self.chosen}")
        else:
            lines.append(f"-> cannot run: {self.error}")
        return "\n".join(line.rstrip() for line in lines)

    @property
    def backend(self) -> str | None:
        """The backend that would run it (None when decomposed or impossible)."""
        if not self.chosen or self.chosen == "decomposition":
            return None
        return self.chosen.split("/")[0]


def _describe(value: Any) -> str:
    if isinstance(value, TensorMeta):
        return value.describe()
    if isinstance(value, tuple) and any(isinstance(v, TensorMeta) for v in value):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    return repr(value)


def explanation_of(selection: Selection) -> Explanation:
    contract = selection.contract
    candidates, working = _loadable(selection)
    chosen = None
    if working:
        chosen = working[0].title
    elif selection.decompose:
        chosen = "decomposition"
    order = ", ".join(selection.order) + f" (from {selection.order_source})" if selection.order else "by priority"
    error = str(selection.error) if isinstance(selection.error, OpcoreError) else None
    if chosen == "decomposition":
        where = f", each pinned to {selection.pin!r}" if selection.pin else ""
        candidates += (Candidate("decomposition", CandidateStatus.CHOSEN, f"built from other ops{where}"),)
    return Explanation(
        op=contract.name,
        schema=str(contract.schema),
        inputs=tuple((a.name, _describe(v)) for a, v in zip(contract.schema.arguments, selection.meta_args)),
        candidates=candidates,
        chosen=chosen,
        order=order,
        strict=selection.strict,
        pin=selection.pin,
        error=error,
        ranking=_ranking(selection),
    )


def _loadable(selection: Selection) -> tuple[tuple[Candidate, ...], list[Any]]:
    """The candidates, with the accepted kernels given as "module:qualname" imported and checked
    against its schema (as ``opcore doctor --deep`` does) in order until one loads: one that cannot
    be is shown as failed, with the reason, and the next accepted one is named as the one that runs,
    as a call falls back. The kernels after the first that loads are not imported (their runtimes,
    torch or openvino for a numpy call on onnxruntime, stay unimported)."""
    from dataclasses import replace

    from opcore.errors import PluginError
    from opcore.registry import load_kernel_callable

    broken: dict[str, str] = {}
    for kernel in selection.accepted:
        if isinstance(kernel.fn, str):
            try:
                load_kernel_callable(kernel, selection.contract)
            except PluginError as error:
                broken[kernel.title] = (error.message or str(error)).split(": ", 1)[-1]
                continue
        break  # the first accepted kernel that loads is the one that runs
    if not broken:
        return tuple(selection.candidates), list(selection.accepted)
    working = [k for k in selection.accepted if k.title not in broken]
    first = working[0].title if working else None
    rows = []
    for candidate in selection.candidates:
        if candidate.title in broken:
            why = f"broken (opcore doctor --deep): {broken[candidate.title]}"
            rows.append(replace(candidate, status=CandidateStatus.FAILED, reason=why))
        elif candidate.title == first:
            rows.append(replace(candidate, status=CandidateStatus.CHOSEN))
        else:
            rows.append(candidate)
    return tuple(rows), working


def _ranking(selection: Selection) -> str:
    entry = selection.measured
    if entry is not None:
        when = f", measured {entry.measured_at}" if entry.measured_at else ""
        return f"measured (tuning file entry {entry.key}{when}); static priority for the rest"
    if selection.tuning_note:
        return f"static priority ({selection.tuning_note})"
    return ""
