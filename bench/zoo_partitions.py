"""The zoo's plans by structure: per model, static and dynamic, how many partitions, how many nodes run
per node between them, and what those nodes are with why the graph runtimes declined them.

Nothing is timed (``measure=False``): the table holds on a busy machine as on a quiet one. A node "per
node" is one a kernel runs on its own (not a size computation, not in a partition); "declined" lists,
per op left per node, the first reason a graph runtime gave (``plan.explain()`` has them all).

    python bench/zoo_partitions.py                         # every model at the test size
    python bench/zoo_partitions.py --models whisper,t5 --size bench --why 3
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import warnings
from collections import Counter
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch
from _timing import table
from zoo_models import ZOO, ZooCase, by_name

RUNTIMES = ("openvino", "onnxruntime")


def per_node(plan: Any) -> list[Any]:
    """The decisions of nodes a kernel runs on its own (not size computations, not in a partition)."""
    return [d for d in plan.decisions if d.backend != "python" and d.partition is None]


def declined(plan: Any) -> dict[str, str]:
    """Per op left per node, the first graph runtime's reason for not taking it."""
    why: dict[str, str] = {}
    for decision in per_node(plan):
        if decision.op in why:
            continue
        # a runtime's own verdict ("declined", "no kernel") or its partitioner's ("openvino partition")
        reasons = [
            f"{v.backend}: {v.status}" + (f" ({v.reason})" if v.reason else "")
            for v in decision.verdicts
            if v.backend.split()[0] in RUNTIMES and v.status not in ("partition", "chosen", "fallback")
        ]
        why[decision.op] = reasons[0] if reasons else (decision.note or "accepted, left out of the partitions")
    return why


def structure(plan: Any) -> tuple[int, int, int, str]:
    """(partitions, nodes per node, all nodes, the per-node ops most common first)."""
    nodes = [d for d in plan.decisions if d.backend != "python"]
    left = per_node(plan)
    ops = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in Counter(d.op for d in left).most_common())
    return len(plan.partitions), len(left), len(nodes), ops


def rows_for(case: ZooCase, size: str, why: int) -> tuple[list[tuple[str, ...]], list[str]]:
    import opcore.graph

    model = case.build(size)
    args, kwargs = case.inputs(2, case.lengths[0])
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    plans = {"static": lambda: opcore.graph.capture(model, args, kwargs, measure=False)}
    if case.dims:
        shapes = case.dynamic_shapes()
        plans["dynamic"] = lambda: opcore.graph.capture(model, args, kwargs, dynamic_shapes=shapes, measure=False)
    for label, capture in plans.items():
        try:
            plan = capture()
        except Exception as error:  # the row says why; the table goes on
            rows.append((case.name, label, "-", "-", f"{type(error).__name__}: {str(error)[:100]}"))
            continue
        partitions, left, total, ops = structure(plan)
        rows.append((case.name, label, str(partitions), f"{left}/{total}", ops[:120]))
        for op, reason in list(declined(plan).items())[:why]:
            notes.append(f"  {case.name} {label}: {op}: {reason[:200]}")
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--size", default="test", choices=("test", "bench"))
    parser.add_argument("--why", type=int, default=4, help="per plan, the reasons shown for this many ops")
    options = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    cases = [by_name(n) for n in options.models.split(",") if n] or list(ZOO)
    print(f"# bench/zoo_partitions.py: {len(cases)} models at the {options.size} size, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.2f} (structure only: nothing timed)")  # fmt: skip
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for case in cases:
        more_rows, more_notes = rows_for(case, options.size, options.why)
        rows += more_rows
        notes += more_notes
    header = ("model", "capture", "partitions", "per node", "ops per node")
    print(table(header, rows))
    if notes:
        print("\nwhy the graph runtimes declined them (first reason per op):")
        print("\n".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
