"""Static ranking against measured ranking (issue 15): where `opcore.tune` changes the choice, and by how much.

For a grid of ops x shapes x dtypes: the kernel the static ranking picks (priorities and checkers'
crossovers, no tuning file), `opcore.tune` on the same inputs, the kernel the measured ranking picks
then, and both re-timed afterwards, side by side (``opcore.resolve`` of each, so dispatch is not in
the times; interleaved medians). "speedup" is static / tuned: tuned must be >= static everywhere
(1.00x where the choice did not change, up to the noise of a shared machine), and the rows where the
choice changed show what measuring buys on this machine. float32 inputs are numpy arrays, bfloat16
ones torch tensors (numpy has no bfloat16). The tuning file is a temporary one unless --file.

    python bench/tune.py [--quick] [--rounds N] [--file PATH] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

import numpy

sys.path.insert(0, os.path.dirname(__file__))
from _timing import medians, table

Shapes = tuple[tuple[int, ...], ...]
# (op, shapes, attrs): the shapes are the tensor arguments in schema order
GRID: list[tuple[str, Shapes, dict]] = [
    ("linear", ((2, 8), (8, 8)), {}),
    ("linear", ((8, 64), (64, 64)), {}),
    ("linear", ((32, 1024), (1024, 1024)), {}),
    ("linear", ((128, 1024), (4096, 1024)), {}),
    ("linear_relu", ((8, 512), (512, 512)), {}),
    ("linear_relu", ((32, 1024), (1024, 1024)), {}),
    ("relu", ((2, 8),), {}),
    ("relu", ((1024, 1024),), {}),
    ("gelu", ((256, 4096),), {"approximate": "tanh"}),
    ("gelu", ((16, 256),), {"approximate": "none"}),
    ("softmax", ((64, 1024),), {"dim": -1}),
    ("layer_norm", ((64, 1024),), {"normalized_shape": (1024,)}),
]
QUICK = [GRID[0], GRID[2], GRID[4], GRID[8], GRID[10]]
DTYPES = ("float32", "bfloat16")


def make_inputs(shapes: Shapes, dtype: str, seed: int = 0) -> list:
    rng = numpy.random.default_rng(seed)
    arrays = [(rng.standard_normal(shape) * 0.5).astype(numpy.float32) for shape in shapes]
    if dtype == "float32":
        return arrays
    import torch

    return [torch.from_numpy(a).to(torch.bfloat16) for a in arrays]


def use_file(path: str) -> None:
    """Point opcore at another tuning file (a missing one means static ranking)."""
    import opcore

    os.environ["OPCORE_TUNE_FILE"] = path
    opcore.reload_plugins()


def one_case(
    op: str, shapes: Shapes, attrs: dict, dtype: str, rounds: int, static_file: str, tuned_file: str
) -> tuple[tuple[str, ...], float | None]:
    """One row: the static choice, tune, the tuned choice, both re-timed; speedup None: cannot run."""
    import opcore

    inputs = make_inputs(shapes, dtype)
    extra = "".join(f", {k}={v}" for k, v in attrs.items())
    call = f"{op}({', '.join('x'.join(map(str, s)) for s in shapes)}{extra})"
    use_file(static_file)
    try:
        static_op = opcore.resolve(op, *inputs, **attrs)
    except opcore.OpcoreError as error:
        return (call, dtype, "-", "", "-", "", "", f"cannot run: {str(error).splitlines()[0][:60]}"), None
    use_file(tuned_file)
    result = opcore.tune(op, *inputs, rounds=rounds, **attrs)
    tuned_op = opcore.resolve(op, *inputs, **attrs)
    static_title, tuned_title = static_op.explanation.chosen, tuned_op.explanation.chosen
    times = medians({"static": lambda: static_op(*inputs), "tuned": lambda: tuned_op(*inputs)}, repeats=15)
    speedup = times["static"] / times["tuned"]
    verdict = "changed" if static_title != tuned_title else "same"
    if result.winner != tuned_title:  # resolve and tune disagree: say so rather than hide it
        verdict += f" (tune said {result.winner})"
    row = (
        call,
        dtype,
        str(static_title),
        f"{times['static'] * 1e6:.1f}",
        str(tuned_title),
        f"{times['tuned'] * 1e6:.1f}",
        f"{speedup:.2f}x",
        verdict,
    )
    return row, speedup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{len(QUICK)} ops x shapes instead of {len(GRID)}")
    parser.add_argument("--rounds", type=int, default=15, help="opcore.tune's rounds per kernel (15)")
    parser.add_argument("--file", help="keep the tuning file here (default: a temporary one)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads before anything runs")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    import opcore
    from opcore.tuning.fingerprint import current

    workdir = tempfile.mkdtemp(prefix="opcore-tune-bench-")
    tuned_file = args.file or os.path.join(workdir, "tuning.json")
    static_file = os.path.join(workdir, "absent.json")  # never written: the static ranking
    if os.path.exists(tuned_file):
        os.unlink(tuned_file)
    warnings.simplefilter("ignore", opcore.FallbackWarning)

    rows: list[tuple[str, ...]] = []
    compared = []
    for op, shapes, attrs in QUICK if args.quick else GRID:
        for dtype in DTYPES:
            row, speedup = one_case(op, shapes, attrs, dtype, args.rounds, static_file, tuned_file)
            rows.append(row)
            if speedup is not None:
                compared.append((speedup, row[2] != row[4]))
            print(f"  {row[0]} {dtype}: {row[2]} -> {row[4]}", file=sys.stderr)
    changed = sum(differs for _, differs in compared)
    worst = min((speedup for speedup, _ in compared), default=float("nan"))

    fingerprint = current(opcore.runtime.runtime())
    print(
        f"static vs measured ranking on {fingerprint['cpu']} ({' '.join(fingerprint['isa']) or 'no tracked ISA'}), "
        f"{fingerprint['threads']} threads, GPU: {', '.join(fingerprint['gpu']) or 'none'}; "
        f"torch {fingerprint['libraries'].get('torch')}, onnxruntime {fingerprint['libraries'].get('onnxruntime')}, "
        f"openvino {fingerprint['libraries'].get('openvino')}"
    )
    print("times: opcore.resolve of each choice, µs per call, interleaved medians of 15 rounds")
    header = ("call", "dtype", "static choice", "static µs", "tuned choice", "tuned µs", "speedup", "choice")
    print(table(header, rows))
    print(f"\nthe measured ranking changed the choice in {changed} of {len(compared)} cases; "
          f"lowest speedup {worst:.2f}x (1.00x = same kernel; below it is noise or a near tie)")  # fmt: skip
    print(f"tuning file: {tuned_file}")


if __name__ == "__main__":
    main()
