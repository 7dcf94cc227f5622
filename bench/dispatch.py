"""Dispatch overhead: opcore.run and a resolved op against the reference kernel called directly.

Targets (issue 2): the cached path of run() costs at most 1 us over the kernel (median);
a resolved op at most 0.2 us. Also prints what `import opcore` costs beyond numpy.

    python bench/dispatch.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy

sys.path.insert(0, os.path.dirname(__file__))
from _timing import medians, table

import opcore
from opcore.reference import elementwise, linear


def import_cost_ms(repeats: int = 7) -> tuple[float, float, float]:
    """Median ms, each in a fresh process, of `import numpy`, of `import opcore` after it, and of
    the first opcore.run (which loads the dispatcher and every installed plugin; no runtime).
    """
    code = (
        "import time; t0 = time.perf_counter(); import numpy; t1 = time.perf_counter(); "
        "import opcore; t2 = time.perf_counter(); "
        "opcore.run('relu', numpy.ones(2, 'float32'), backend='reference'); t3 = time.perf_counter(); "
        "print((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)"
    )
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        runs.append(tuple(map(float, out.split())))
    runs.sort(key=lambda r: r[1])
    return runs[len(runs) // 2]


def main() -> None:
    x = numpy.random.default_rng(0).standard_normal((2, 8)).astype(numpy.float32)
    w = numpy.random.default_rng(1).standard_normal((8, 8)).astype(numpy.float32)
    b = numpy.zeros(8, numpy.float32)
    # the overhead of dispatch itself: the reference backend alone, whatever else is installed
    others = [r.name for r in opcore.backends() if r.name != "reference"]
    opcore.configure(disable=others)
    opcore.run("linear", x, w)  # load plugins and fill the caches
    opcore.run("linear", x, w, b)
    opcore.run("relu", x)
    assert opcore.explain("linear", x, w).chosen == "reference"
    resolved = opcore.resolve("linear", x, w, b)
    resolved_const = opcore.resolve("linear", x, w, b, constants=("w", "b"))
    resolved_relu = opcore.resolve("relu", x)

    times = medians(
        {
            "direct linear(x, w, None)": lambda: linear.linear(x, w, None),
            "run linear(x, w)": lambda: opcore.run("linear", x, w),
            "direct linear(x, w, b)": lambda: linear.linear(x, w, b),
            "run linear(x, w, b)": lambda: opcore.run("linear", x, w, b),
            "resolved linear(x, w, b)": lambda: resolved(x, w, b),
            "resolved linear(x) const w, b": lambda: resolved_const(x),
            "direct relu(x)": lambda: elementwise.relu(x),
            "run relu(x)": lambda: opcore.run("relu", x),
            "resolved relu(x)": lambda: resolved_relu(x),
        }
    )
    rows = []
    for label, direct, target in [
        ("run linear(x, w)", "direct linear(x, w, None)", 1.0),
        ("run linear(x, w, b)", "direct linear(x, w, b)", 1.0),
        ("resolved linear(x, w, b)", "direct linear(x, w, b)", 0.2),
        ("resolved linear(x) const w, b", "direct linear(x, w, b)", 0.2),
        ("run relu(x)", "direct relu(x)", 1.0),
        ("resolved relu(x)", "direct relu(x)", 0.2),
    ]:
        overhead = (times[label] - times[direct]) * 1e6
        rows.append(
            (
                label,
                f"{times[direct] * 1e6:.2f}",
                f"{times[label] * 1e6:.2f}",
                f"{overhead:+.2f}",
                f"{times[label] / times[direct]:.2f}x",
                f"<= {target}",
                "yes" if overhead <= target else "NO",
            )
        )
    print("opcore dispatch overhead, reference backend, x 2x8 · w 8x8 float32 (medians of 31 interleaved runs)")
    print(table(("call", "direct us", "opcore us", "overhead us", "ratio", "target", "met"), rows))
    numpy_ms, opcore_ms, first_ms = import_cost_ms()
    print(f"\nimport numpy: {numpy_ms:.1f} ms; import opcore after it: {opcore_ms:.1f} ms (target < 50 ms)")
    print(f"first opcore.run (loads the dispatcher and every installed plugin, no runtime): {first_ms:.1f} ms")


if __name__ == "__main__":
    main()
