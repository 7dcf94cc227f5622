"""What the kit found per backend, and the coverage lines printed at the end of a run.

>>> tally = Coverage(total_ops=("relu", "gelu"))
>>> tally.add_backend("reference", covered=("relu", "gelu"))
>>> tally.record("reference", "sample", "relu", Outcome(Status.PASSED))
>>> tally.lines()[0]
'reference    ops 2/2 covered · samples 1 passed, 0 failed, 0 declined · error inputs 0 passed, 0 failed'
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from opcore.testing.conformance import Outcome, Status

__all__ = ["BackendTally", "Coverage"]


@dataclass(slots=True)
class BackendTally:
    name: str
    covered: tuple[str, ...]
    # why the backend was not run at all (unavailable, failed, disabled); "" when it ran
    not_run: str = ""
    samples: Counter[Status] = field(default_factory=Counter)
    errors: Counter[Status] = field(default_factory=Counter)
    declined_ops: Counter[str] = field(default_factory=Counter)


class Coverage:
    """Counts per backend: ops covered, samples passed/failed/declined, error inputs passed/failed."""

    def __init__(self, total_ops: tuple[str, ...]) -> None:
        self.total_ops = total_ops
        self.backends: dict[str, BackendTally] = {}
        self._lock = threading.Lock()

    def add_backend(self, name: str, covered: tuple[str, ...] = (), not_run: str = "") -> None:
        self.backends[name] = BackendTally(name, covered, not_run)

    def record(self, backend: str, what: str, op: str, outcome: Outcome | Status) -> None:
        """Count one outcome; ``what`` is "sample" or "error"."""
        status = outcome.status if isinstance(outcome, Outcome) else outcome
        with self._lock:
            tally = self.backends[backend]
            (tally.samples if what == "sample" else tally.errors)[status] += 1
            if status is Status.DECLINED and what == "sample":
                tally.declined_ops[op] += 1

    def lines(self) -> list[str]:
        """One line per backend, e.g. ``onnxruntime  ops 22/28 covered · samples 512 passed, ...``,
        then indented lines naming the ops it does not cover and those where it declined samples.
        """
        width = max((len(name) for name in self.backends), default=0) + 2
        lines = []
        for tally in self.backends.values():
            head = tally.name.ljust(width)
            if tally.not_run:
                lines.append(f"{head} not run: {tally.not_run}")
                continue
            s, e = tally.samples, tally.errors
            line = (
                f"{head} ops {len(tally.covered)}/{len(self.total_ops)} covered"
                f" · samples {s[Status.PASSED]} passed, {s[Status.FAILED]} failed, {s[Status.DECLINED]} declined"
            )
            if s[Status.SKIPPED]:
                line += f", {s[Status.SKIPPED]} skipped"
            line += f" · error inputs {e[Status.PASSED]} passed, {e[Status.FAILED]} failed"
            if e[Status.DECLINED]:
                line += f", {e[Status.DECLINED]} declined"
            lines.append(line)
            missing = [op for op in self.total_ops if op not in tally.covered]
            if missing:
                lines.append(" " * width + " not covered: " + ", ".join(missing))
            if tally.declined_ops:
                declined = ", ".join(f"{op} ({n})" for op, n in sorted(tally.declined_ops.items()))
                lines.append(" " * width + " declined samples in: " + declined)
        return lines
