"""A plan loaded once per actor: its threads set first, then ``opcore.graph.load``, and a record of
what happened (where, how long, whether this machine's fingerprint differs from the capturing one).

>>> plan, record = load_on_worker("model.plan", threads=4, op="PlanPredictor")   # doctest: +SKIP
>>> record.fingerprint_changes                                                  # doctest: +SKIP
('cpu_isa',)
"""

from __future__ import annotations

import itertools
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["LoadRecord", "assigned_cpus", "load_on_worker"]

_LOADS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class LoadRecord:
    """One load of a plan on a worker. ``load_id``: unique per load (an actor restarted by Ray loads
    again under a new id); ``actor``: "host:pid"; ``fingerprint_changes``: the fingerprint fields in
    which this machine differs from the one that saved the plan (its partitions were compiled again
    from their portable files and its kernels chosen again); () when none differ; ``notes``: the
    loaded plan's notes (the recompile among them)."""

    load_id: str
    actor: str
    path: str
    seconds: float
    threads: int
    fingerprint_changes: tuple[str, ...]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "load_id": self.load_id,
            "actor": self.actor,
            "path": self.path,
            "seconds": self.seconds,
            "threads": self.threads,
            "fingerprint_changes": list(self.fingerprint_changes),
            "notes": list(self.notes),
        }


def assigned_cpus() -> int | None:
    """The CPUs Ray assigned to this actor or task (``num_cpus``), None outside Ray or when none."""
    import ray

    if not ray.is_initialized():
        return None
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return max(1, int(cpus)) if cpus else None


def set_threads(threads: int | None, op: str) -> int:
    """torch's intra-op threads and the graph runtimes' (OPCORE_RUNTIME_THREADS, read when a
    runtime's session opens: before the load) to ``threads``; None: the CPUs Ray assigned, else 1."""
    import torch

    if threads is None:
        threads = assigned_cpus() or 1
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ArgumentError(
            op=op, arg="threads", expected="an int >= 1 or None (the actor's num_cpus)", found=repr(threads)
        )
    torch.set_num_threads(threads)
    os.environ["OPCORE_RUNTIME_THREADS"] = str(threads)
    return threads


def load_on_worker(source: Any, *, threads: int | None, op: str) -> tuple[Any, LoadRecord]:
    """The plan or language model of ``source`` (a path or opcore.ray.put_plan's record), loaded with
    ``threads`` threads (None: the actor's num_cpus), and its LoadRecord."""
    import opcore.graph
    from opcore.ray.sources import resolve

    started = time.perf_counter()
    folder = resolve(source, op)  # first: a missing folder fails the actor's start before torch is imported
    count = set_threads(threads, op)
    loaded = opcore.graph.load(folder)
    plans = [p for p in (getattr(loaded, "decode_plan", None), getattr(loaded, "prefill_plan", None)) if p is not None]
    plans = plans or [loaded]
    changes = sorted({field for plan in plans for field in plan.fingerprint_changes})
    notes = tuple(note for plan in plans for note in plan.notes)
    record = LoadRecord(
        load_id=f"{socket.gethostname()}:{os.getpid()}:{next(_LOADS)}:{uuid.uuid4().hex[:8]}",
        actor=f"{socket.gethostname()}:{os.getpid()}",
        path=str(folder),
        seconds=time.perf_counter() - started,
        threads=count,
        fingerprint_changes=tuple(changes),
        notes=notes,
    )
    return loaded, record
