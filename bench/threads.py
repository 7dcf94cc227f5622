"""Threads against one backend: 4 threads run a mix of ops for 10 seconds; every result must be
bitwise identical to the same call run serially first.

The mix covers linear (batch sizes 1..33, so the calls share cached models), matmul, add with a
tensor and a Python number, softmax, layer_norm, gelu, embedding, sdpa and cat. A second phase
shrinks the backend's model cache to 3 entries, so models are evicted and rebuilt while other
threads use them.

    python bench/threads.py [--seconds 10] [--threads 4] [--backend onnxruntime|openvino]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy

import opcore

Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def workload(seed: int = 0) -> list[Call]:
    """A mix of float32 calls with several batch sizes."""
    rng = numpy.random.default_rng(seed)

    def f(*shape: int) -> numpy.ndarray:
        return rng.standard_normal(shape, dtype=numpy.float32)

    w, b = f(16, 32), f(16)
    calls: list[Call] = []
    for batch in (1, 2, 5, 8, 33):
        x = f(batch, 32)
        calls += [
            ("linear", (x, w, b), {}),
            ("linear_relu", (x, w, b), {}),
            ("matmul", (x, w.T.copy()), {}),
            ("add", (x, x[:1]), {"alpha": 0.5}),
            ("mul", (x, 1.5), {}),
            ("softmax", (x,), {"dim": -1}),
            ("layer_norm", (x, (32,), f(32), f(32)), {}),
            ("gelu", (x,), {"approximate": "tanh"}),
            ("embedding", (rng.integers(0, 16, size=(batch, 3)), w), {}),
            ("cat", ((x, x[:, :4]), 1), {}),
        ]
    q, k, v = f(2, 4, 6, 8), f(2, 4, 9, 8), f(2, 4, 9, 8)
    calls.append(("scaled_dot_product_attention", (q, k, v), {"is_causal": True}))
    return calls


@dataclass(frozen=True, slots=True)
class ThreadReport:
    backend: str
    threads: int
    seconds: float
    calls: int
    mismatches: int
    errors: tuple[str, ...]
    cache: str

    @property
    def identical(self) -> bool:
        return self.mismatches == 0 and not self.errors


def run_threads(
    backend: str, seconds: float, threads: int = 4, *, shrink_cache: Callable[[int], None] | None = None
) -> ThreadReport:
    """Run the workload serially, then from ``threads`` threads for ``seconds``; compare bitwise.

    ``shrink_cache(n)``, when given, is called halfway with n=3 (models evicted and rebuilt under load).
    """
    calls = workload()
    expected = [opcore.run(op, *args, backend=backend, **kwargs) for op, args, kwargs in calls]
    stop = time.perf_counter() + seconds
    halfway = time.perf_counter() + seconds / 2
    counts = [0] * threads
    mismatches = [0] * threads
    errors: list[str] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        order = numpy.random.default_rng(index).permutation(len(calls))
        position = 0
        while time.perf_counter() < stop:
            i = int(order[position % len(order)])
            position += 1
            op, args, kwargs = calls[i]
            try:
                result = opcore.run(op, *args, backend=backend, **kwargs)
            except Exception as error:
                with lock:
                    errors.append(f"{op}: {type(error).__name__}: {error}")
                return
            if result.dtype != expected[i].dtype or not numpy.array_equal(result, expected[i], equal_nan=True):
                mismatches[index] += 1
            counts[index] += 1

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    if shrink_cache is not None:
        time.sleep(max(halfway - time.perf_counter(), 0))
        shrink_cache(3)
    for thread in pool:
        thread.join()
    return ThreadReport(backend, threads, seconds, sum(counts), sum(mismatches), tuple(errors), _cache_text(backend))


def _cache_text(backend: str) -> str:
    spec = next(r for r in opcore.backends() if r.name == backend).backend
    details = dict(spec.describe() or {}) if spec is not None and spec.describe is not None else {}
    return next((value for name, value in details.items() if "cache" in name), "")


def _shrinker(backend: str) -> Callable[[int], None]:
    if backend == "onnxruntime":
        import opcore_onnxruntime

        return opcore_onnxruntime.set_cache_size
    import opcore_openvino

    return opcore_openvino.set_cache_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--backend", action="append", choices=("onnxruntime", "openvino"))
    options = parser.parse_args()
    print(f"{options.threads} threads x {options.seconds:g} s of mixed ops per backend, compared bitwise with serial")
    print("(the model cache shrinks to 3 entries halfway: models are evicted and rebuilt under load)")
    for backend in options.backend or ("onnxruntime", "openvino"):
        report = run_threads(backend, options.seconds, options.threads, shrink_cache=_shrinker(backend))
        verdict = "identical to serial" if report.identical else f"{report.mismatches} MISMATCHES"
        print(f"{backend:12} {report.calls:7d} calls  {verdict}  cache: {report.cache}")
        for error in report.errors:
            print(f"  error: {error}")


if __name__ == "__main__":
    main()
