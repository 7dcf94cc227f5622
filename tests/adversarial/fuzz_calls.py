"""The adversarial fuzzer, run as a script (a crash such as SIGFPE must kill it, not the test run):
every op's conformance samples with one tensor argument at a time replaced by a bad variant, and
every op's error inputs, on every backend and unpinned. Prints one JSON line of counts.

    python tests/adversarial/fuzz_calls.py SAMPLES_PER_OP
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import Any

import numpy

import opcore
from opcore.testing import builtin_entries, error_inputs_of, samples_of
from opcore.testing.records import TensorInput

SLOW_S = 2.0
# Rows of the "huge stride-0" variant: a power of two with at least half the machine's memory in one
# byte per row, so that a 1-byte input and its 1-byte result fit alone but not together (the case that
# once passed the size check and got the fuzzer OOM-killed), and every wider array is over it alone.
_MEMORY = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
HUGE_ROWS = 1 << max(34, (_MEMORY // 2).bit_length())


def _numpy(value: Any) -> Any:
    if isinstance(value, TensorInput):
        return value.to_numpy()
    if isinstance(value, (list, tuple)) and any(isinstance(v, TensorInput) for v in value):
        return type(value)(_numpy(v) for v in value)
    return value


def _variants(array: numpy.ndarray) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out: dict[str, Any] = {
            "complex64": array.astype(numpy.complex64),
            "uint16": array.astype(numpy.uint16),
            "object": array.astype(object),
            "byte-swapped": array.astype(array.dtype.newbyteorder(">" if array.dtype.byteorder != ">" else "<")),
            "masked": numpy.ma.masked_array(array, mask=numpy.zeros(array.shape, bool)),
            "list": array.tolist(),
            "None": None,
            "0-d": numpy.asarray(array.reshape(-1)[:1].reshape(()) if array.size else numpy.zeros((), array.dtype)),
            "rank+3": array.reshape((1, 1, 1, *array.shape)),
            "empty": numpy.zeros((0, *array.shape[1:]), array.dtype),
            "huge stride-0": numpy.broadcast_to(numpy.zeros((), array.dtype), (HUGE_ROWS, *array.shape[1:])),
            "transposed": array.T,
            "nan": numpy.full(array.shape, numpy.nan, array.dtype) if array.dtype.kind == "f" else array,
            "bool": array.astype(bool),
            "int64": array.astype(numpy.int64),
        }
        if array.ndim == 2:
            out["np.matrix"] = numpy.asmatrix(array)
    return out


def main(samples_per_op: int) -> dict[str, Any]:
    backends = [None] + [
        r.name for r in opcore.backends() if r.ok and r.name in ("reference", "cpu", "onnxruntime", "openvino")
    ]
    counts = {"tried": 0, "results": 0, "opcore_errors": 0, "other_exceptions": 0, "slow": 0}
    examples: list[str] = []
    warnings.simplefilter("ignore")  # fallback warnings are expected here; the outcome is what counts

    def attempt(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None, what: str) -> None:
        counts["tried"] += 1
        elapsed = once(op, args, kwargs, backend, what)
        if elapsed > SLOW_S:  # a first call may compile a model (OpenVINO: up to ~1 s here): slow twice is a hang
            elapsed = min(elapsed, timed(op, args, kwargs, backend))
            if elapsed > SLOW_S:
                counts["slow"] += 1
                examples.append(f"{op} {what} on {backend}: {elapsed:.1f} s twice")

    def timed(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None) -> float:
        started = time.perf_counter()
        try:
            opcore.run(op, *args, backend=backend, **kwargs)
        except Exception:
            pass
        return time.perf_counter() - started

    def once(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None, what: str) -> float:
        started = time.perf_counter()
        try:
            opcore.run(op, *args, backend=backend, **kwargs)
            counts["results"] += 1
        except opcore.OpcoreError:
            counts["opcore_errors"] += 1
        except Exception as error:
            counts["other_exceptions"] += 1
            if len(examples) < 30:
                examples.append(f"{op} {what} on {backend}: {type(error).__name__}: {str(error)[:160]}")
        return time.perf_counter() - started

    for op_entry in builtin_entries():
        op = op_entry.op
        for error_input in error_inputs_of(op_entry):
            args = tuple(_numpy(a) for a in error_input.args)
            for backend in backends:
                attempt(op, args, dict(error_input.kwargs), backend, f"error input {error_input.id}")
        numpy_samples = [s for s in samples_of(op_entry) if all(t.dtype.value != "bfloat16" for t in s.tensors())]
        for sample in numpy_samples[:samples_per_op]:
            base = [_numpy(a) for a in sample.args]
            for position, value in enumerate(base):
                if not isinstance(value, numpy.ndarray):
                    continue
                for name, bad in _variants(value).items():
                    variant = list(base)
                    variant[position] = bad
                    for backend in backends:
                        attempt(op, tuple(variant), dict(sample.kwargs), backend, f"{sample.id} arg {position} {name}")
    return {"counts": counts, "examples": examples}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
