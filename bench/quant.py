"""Weight-only int8 / int4 linear (linear_wq) on each backend against eager float32 F.linear.

For M in --sizes (default 1 and 32) and K = N = --kn (default 4096): int8 per output channel and
int4 in groups of 128 (symmetric, opcore.quantize.quantize_weight), each resolved once with its
weight as constants (packed at resolve) and called with x; eager ``F.linear`` on the float32 (and
bfloat16) weight; torchao's int8 / int4 weight-only where torchao imports with this torch (else the
reason); for comparison, torch's dynamic int8 linear (FBGEMM, ``torch.ops.quantized.linear_dynamic``
on the same int8 codes), which also rounds x to 7-bit integers per tensor: not weight-only, so not
counted for the target. Medians over interleaved rounds (bench/_timing.py), ratio = eager float32 / row, the
error against the float64 reference of the same quantized weight, the load and the threads.

Target (issue 27): M=1 int8 >= 3x eager float32.

    python bench/quant.py                      # one thread (the default)
    python bench/quant.py --threads 2 --sizes 1
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

TARGET = 3.0  # M=1 int8 against eager float32
INT4_FORMATS = ("tile_packed_to_4d", "plain", "plain_int32")  # torchao's int4 packing formats, tried in turn


@dataclass
class Row:
    name: str
    run: Callable[[], object] | None
    error: float | None = None  # max |y - reference| / max |reference|
    note: str = ""
    bytes: int | None = None  # weight bytes the row streams per call
    seconds: float | None = field(default=None)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch, ONNX Runtime and OpenVINO threads (default 1)")
    parser.add_argument("--sizes", default="1,32", help="the M (rows of x) to measure, comma-separated")
    parser.add_argument("--kn", type=int, default=4096, help="K = N (default 4096)")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds per M (default 15)")
    parser.add_argument("--no-torchao", action="store_true", help="skip the torchao rows")
    options = parser.parse_args(argv)
    try:
        options.sizes = [int(m) for m in options.sizes.split(",") if m.strip()]
    except ValueError:
        parser.error(f"--sizes: expected integers such as 1,32, found {options.sizes!r}")
    if options.kn % 128 or options.kn <= 0:
        parser.error(f"--kn: expected a positive multiple of 128 (int4 groups of 128), found {options.kn}")
    return options


def _error(got: Any, want: Any) -> float:
    import numpy

    got = numpy.asarray(got.float().numpy() if hasattr(got, "float") else got, dtype=numpy.float64)
    return float(numpy.abs(got - want).max() / max(numpy.abs(want).max(), 1e-30))


def _torchao(weight: Any, x: Any, bits: int) -> tuple[Callable[[], object] | None, str, Any]:
    """torchao's weight-only linear on a copy of the weight, or the reason it cannot run here."""
    import torch

    try:
        import torchao  # type: ignore[import-untyped,import-not-found,unused-ignore]
        from torchao.quantization import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            Int4WeightOnlyConfig,
            Int8WeightOnlyConfig,
            quantize_,
        )
    except Exception as error:  # not installed, or built for another torch
        return None, f"torchao not usable: {type(error).__name__}: {str(error)[:120]}", None
    # torchao 0.18 has no CPU int4 format of its own ("opaque" is gone): each is tried, every refusal said
    configs = (
        [("", Int8WeightOnlyConfig())]
        if bits == 8
        else [(f" {fmt}", Int4WeightOnlyConfig(group_size=128, int4_packing_format=fmt)) for fmt in INT4_FORMATS]
    )
    refusals = []
    for fmt, config in configs:
        candidate = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=x.dtype)
        with torch.no_grad():
            candidate.weight.copy_(weight.to(x.dtype))
        try:
            quantize_(candidate, config)
            with torch.no_grad():
                out = candidate(x)
        except Exception as error:
            refusals.append(f"{fmt.strip() or 'int8'}: {type(error).__name__}: {str(error).splitlines()[0][:90]}")
            continue
        linear = candidate
        break
    else:
        return None, f"torchao {torchao.__version__} " + "; ".join(refusals), None

    def run() -> object:
        with torch.no_grad():
            return linear(x)

    return run, f"torchao {torchao.__version__}", out


def _torch_dynamic(qw: Any, x: Any) -> tuple[Callable[[], object], Any]:
    """torch's dynamic int8 linear (FBGEMM) on the int8 codes: x quantized per tensor at each call,
    reduce_range as FBGEMM needs on CPUs without VNNI."""
    import warnings

    import torch

    codes = qw.qweight.to(torch.int16) - 128  # symmetric: the middle code is 0.0
    with warnings.catch_warnings():  # torch 2.13 deprecates quantized tensors; still its dynamic path
        warnings.simplefilter("ignore")
        zero = torch.zeros(codes.shape[0], dtype=torch.long)
        q = torch._make_per_channel_quantized_tensor(codes.to(torch.int8), qw.scale[:, 0].double(), zero, 0)
        packed = torch.ops.quantized.linear_prepack(q, None)

    def run() -> object:
        return torch.ops.quantized.linear_dynamic(x, packed, True)

    return run, run()


def _call(fn: Callable[[Any], object], x: Any) -> Callable[[], object]:
    return lambda: fn(x)


def rows_for(m: int, kn: int) -> tuple[list[Row], list[str]]:
    """The rows of one M, and notes (why a row is missing)."""
    import numpy
    import torch
    import torch.nn.functional as F

    import opcore
    from opcore.quantize import quantize_weight
    from opcore.torchkit.quantized import prepare_linear_wq

    rng = numpy.random.default_rng(0)
    weight = torch.from_numpy(rng.standard_normal((kn, kn), dtype=numpy.float32) / 64)
    x = torch.from_numpy(rng.standard_normal((m, kn), dtype=numpy.float32))
    x_np, bf_x, bf_w = x.numpy(), x.bfloat16(), weight.bfloat16()
    rows = [
        Row("eager F.linear float32", lambda: F.linear(x, weight), 0.0, bytes=weight.numel() * 4),
        Row("eager F.linear bfloat16", lambda: F.linear(bf_x, bf_w), None, bytes=weight.numel() * 2),
    ]
    notes: list[str] = []
    for bits, group in ((8, -1), (4, 128)):
        label = f"int{bits}" + ("" if group == -1 else f" g{group}")
        qw = quantize_weight(weight, bits=bits, group_size=group)
        want = opcore.run("linear_wq", x_np, *(t.numpy() for t in qw.tensors() if t is not None), None,
                          **qw.attrs, backend="reference").astype(numpy.float64)  # fmt: skip
        args = (x, *qw.tensors(), None, bits, group)
        constants = frozenset({"qweight", "scale"})
        # the cpu kernel itself (its checker sends large float32 weights elsewhere: see opcore_cpu.choice)
        for dtype_name, example in (("float32", x), ("bfloat16", bf_x)):
            packed = prepare_linear_wq((example, *args[1:]), constants)
            rows.append(Row(f"cpu {label} {dtype_name} (torch kernel)", _call(packed, example),
                            _error(packed(example), want), bytes=qw.nbytes))  # fmt: skip
        if bits == 8:
            try:
                dynamic, out = _torch_dynamic(qw, x)
                rows.append(Row("torch dynamic int8 (x int8 per tensor)", dynamic, _error(out, want), bytes=qw.nbytes))
            except RuntimeError as error:  # a torch built without FBGEMM (e.g. Arm): said, not fatal
                notes.append(f"torch dynamic int8: {str(error).splitlines()[0][:160]}")
        numpy_qw = quantize_weight(weight.numpy(), bits=bits, group_size=group)
        for backend in ("onnxruntime", "openvino"):
            try:
                resolved = numpy_qw.resolve(x_np, backend=backend)
                rows.append(Row(f"{backend} {label}", _call(resolved, x_np), _error(resolved(x_np), want),
                                bytes=qw.nbytes))  # fmt: skip
            except opcore.OpcoreError as error:
                notes.append(f"{backend} {label}: {str(error).splitlines()[0][:160]}")
        for dtype_name, example in (("float32", x), ("bfloat16", bf_x)):
            run, note, out = _torchao(weight, example, bits) if not OPTIONS.no_torchao else (None, "skipped", None)
            if run is None:
                notes.append(f"torchao {label} {dtype_name}: {note}")
            else:
                rows.append(Row(f"torchao {label} {dtype_name}", run, _error(out, want), note=note))
    return rows, notes


OPTIONS = argparse.Namespace(no_torchao=False)


def report(m: int, kn: int, rows: list[Row]) -> str:
    from _timing import table

    base = next(r.seconds for r in rows if r.name == "eager F.linear float32")
    lines = []
    for row in rows:
        if row.seconds is None:
            continue
        ratio = base / row.seconds if base else float("nan")
        error = "-" if row.error is None else f"{row.error:.1e}"
        weight = "-" if row.bytes is None else f"{row.bytes / 2**20:.1f}"
        lines.append((row.name, f"{row.seconds * 1e6:.0f}", f"{ratio:.2f}x", error, weight))
    header = (f"M={m} K=N={kn}", "median us", "vs fp32 eager", "rel error", "weight MiB")
    return table(header, lines)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    OPTIONS.no_torchao = options.no_torchao
    os.environ["OPCORE_RUNTIME_THREADS"] = str(options.threads)
    import onnxruntime
    import openvino
    import torch
    from _timing import medians

    import opcore

    torch.set_num_threads(options.threads)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} · {os.cpu_count()} CPUs · threads {options.threads}"
          f" (torch {torch.get_num_threads()}, OPCORE_RUNTIME_THREADS {options.threads})")  # fmt: skip
    print(f"torch {torch.__version__} · onnxruntime {onnxruntime.__version__} · openvino {openvino.__version__}"
          f" · opcore {opcore.__version__}")  # fmt: skip
    best_int8_m1 = None
    for m in options.sizes:
        rows, notes = rows_for(m, options.kn)
        timed = medians({r.name: r.run for r in rows if r.run is not None}, repeats=options.repeats, warmup=1)
        for row in rows:
            row.seconds = timed.get(row.name)
        print()
        print(report(m, options.kn, rows))
        for note in notes:
            print(f"  not measured: {note}")
        if m == 1:
            base = next(r.seconds or 0.0 for r in rows if r.name == "eager F.linear float32")
            int8 = [
                (base / r.seconds, r.name)
                for r in rows
                if r.seconds and "int8" in r.name and "torchao" not in r.name and "dynamic" not in r.name
            ]
            best_int8_m1 = max(int8) if int8 else None
    if best_int8_m1 is not None:
        ratio, name = best_int8_m1
        verdict = "met" if ratio >= TARGET else "NOT met"
        print(f"\ntarget M=1 int8 >= {TARGET}x eager float32: {verdict} ({name}: {ratio:.2f}x)"
              f" · load now {os.getloadavg()[0]:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
