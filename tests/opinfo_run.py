"""PyTorch's own OpInfo samples (``torch.testing._internal.common_methods_invocations.op_db``) for
opcore's built-in ops, run through every available backend, pinned (``backend=NAME``).

Each OpInfo entry that is one of opcore's ops is called as a torch user calls it (the sample's
input, args and kwargs, torch's names), on the CPU (the cuda backend: on the GPU), and judged:

* **passed**: the result matches torch's (the kit's tolerance for the dtype; a float result that
  misses is compared once more with torch's float64 answer rounded to the dtype, so a backend that
  is closer to the true value than torch's own kernel is not called wrong);
* **wrong**: it does not (a failure);
* **declined**: an ``OpcoreError`` (no kernel for these inputs, an argument opcore does not take,
  a dtype the contract refuses): counted per backend with its reason;
* **crashed**: any other exception (a failure: every error must be an ``OpcoreError``).

OpInfo's error inputs (calls torch rejects) must raise an ``OpcoreError`` too; one that opcore
accepts is counted as "accepted", not failed (opcore may take more than torch does).

``python tests/opinfo_run.py`` prints the report (``--full``: every sample of every dtype, ~30k
calls, tens of minutes; default: the deterministic subset tests/test_opinfo.py runs).
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

import opcore
from opcore.errors import NoKernelError, OpcoreError
from opcore.testing.tolerances import DEFAULT_TOLERANCES, REDUCED_PRECISION_CHAINS
from opcore.types import DType

__all__ = ["Report", "backends_to_run", "cases", "run"]

# OpInfo's name -> opcore's op: "nn.functional.X" is X, any other name is the op of that name; OpInfo
# entries whose call differs from opcore's argument order get an adapter (input, args, kwargs) -> (args, kwargs)
Call = tuple[tuple[Any, ...], dict[str, Any]]


def _op_of(info_name: str) -> str:
    return info_name.removeprefix("nn.functional.")


# OpInfo variants that are not the plain op (another dtype of input, a decomposition test)
_SKIPPED_VARIANTS = {("nn.functional.silu", "complex"), ("addmm", "decomposed"), ("bmm", "triton_optimized")}
# torch's keyword names where opcore's differ
_KEYWORDS = {"input": "x", "split_size_or_sections": "split_size", "self": "x"}


def _plain(input: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    return (input, *args), {_KEYWORDS.get(k, k): v for k, v in kwargs.items()}


def _where(input: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    condition, other = args  # OpInfo calls x.where(condition, other): torch.where(condition, x, other)
    return (condition, input, other), dict(kwargs)


def _embedding(input: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    (indices,) = args  # OpInfo's lambda takes (weight, idx): F.embedding(idx, weight, **kwargs)
    return (indices, input), dict(kwargs)


def _list_input(input: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    return (list(input), *args), dict(kwargs)


_ADAPTERS: dict[str, Callable[[Any, tuple[Any, ...], dict[str, Any]], Call]] = {
    "where": _where,
    "nn.functional.embedding": _embedding,
    "cat": _list_input,
}


@dataclass
class BackendTally:
    passed: int = 0
    declined: Counter[str] = field(default_factory=Counter)
    accepted_errors: Counter[str] = field(default_factory=Counter)  # torch refuses, opcore ran it
    errors_raised: int = 0  # error inputs that raised an OpcoreError, as they must
    failures: list[str] = field(default_factory=list)  # wrong results and non-OpcoreError exceptions

    @property
    def declined_total(self) -> int:
        return sum(self.declined.values())


@dataclass
class Report:
    entries: list[str]
    tallies: dict[str, BackendTally]
    skipped: Counter[str]  # samples torch itself cannot run here, per reason
    seconds: float

    def text(self, reasons: int = 8) -> str:
        lines = [f"OpInfo: {len(self.entries)} entries for opcore's ops, {self.seconds:.1f} s"]
        for backend, t in self.tallies.items():
            lines.append(
                f"{backend}: {t.passed} passed, {len(t.failures)} failed (wrong or non-OpcoreError), "
                f"{t.declined_total} declined, error inputs {t.errors_raised} raised an OpcoreError, "
                f"{sum(t.accepted_errors.values())} accepted"
            )
            for reason, count in t.declined.most_common(reasons):
                lines.append(f"    {count:5d} declined: {reason}")
            for failure in t.failures[:reasons]:
                lines.append(f"    FAILED {failure}")
        return "\n".join(lines)


def backends_to_run() -> list[str]:
    """Every loaded backend with a built-in op's kernel (the example plugin has none)."""
    from opcore.reports import PluginStatus

    return [r.name for r in opcore.backends() if r.status is PluginStatus.LOADED and r.name != "example"]


def _opinfos(ops: set[str]) -> Iterator[tuple[str, Any]]:
    from torch.testing._internal.common_methods_invocations import op_db

    for info in op_db:
        if (info.name, info.variant_test_name) in _SKIPPED_VARIANTS:
            continue
        op = _op_of(info.name)
        if op in ops:
            yield op, info


_OPCORE_DTYPES = {d.to_torch(): d for d in DType}
# the subset's dtypes: every entry's float32 and one more, chosen by the entry's name
_SUBSET_EXTRA = (torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool, torch.uint8)


def _dtypes(op: str, info: Any, full: bool) -> list[Any]:
    supported = [d for d in info.supported_dtypes("cpu") if d in _OPCORE_DTYPES]
    supported.sort(key=str)
    if full:
        return supported
    first = [torch.float32] if torch.float32 in supported else supported[:1]
    extras = [d for d in _SUBSET_EXTRA if d in supported and d not in first]
    pick = zlib.crc32(f"{info.name}.{info.variant_test_name}".encode())
    return first + (extras[pick % len(extras) :][:1] if extras else [])


def cases(full: bool = False, per_dtype: int = 4) -> Iterator[tuple[str, Any, str, Any, bool]]:
    """(op, OpInfo, label, SampleInput or ErrorInput, is_error) of the run: in the subset, the first
    ``per_dtype`` samples of each chosen dtype, and two error inputs per entry."""
    ops = {c.name for c in opcore.ops()} if callable(getattr(opcore, "ops", None)) else set()
    for op, info in _opinfos(ops):
        label = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        for dtype in _dtypes(op, info, full):
            samples = info.sample_inputs("cpu", dtype, requires_grad=False)
            for i, sample in enumerate(samples):
                if not full and i >= per_dtype:
                    break
                yield op, info, f"{label}[{str(dtype).removeprefix('torch.')}#{i}]", sample, False
        try:
            errors = list(info.error_inputs("cpu"))
        except Exception:
            errors = []
        for i, error in enumerate(errors if full else errors[:2]):
            yield op, info, f"{label}[error#{i}]", error, True


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_to(v, device) for v in value)
    return value


def _call(op: str, info: Any, sample: Any, device: str) -> Call:
    adapter = _ADAPTERS.get(info.name, _plain)
    args, kwargs = adapter(_to(sample.input, device), tuple(_to(a, device) for a in sample.args), dict(sample.kwargs))
    if device != "cpu" and kwargs.get("device") == "cpu":
        kwargs["device"] = device
    return args, {k: _to(v, device) for k, v in kwargs.items()}


def _torch_result(info: Any, sample: Any) -> Any:
    return info.op(sample.input, *sample.args, **sample.kwargs)


def _reason(error: OpcoreError, backend: str) -> str:
    """A declined call's reason without its shapes and values, so that like reasons count together;
    for NoKernelError, the pinned backend's own line (why its kernel declined)."""
    name = type(error).__name__
    if isinstance(error, NoKernelError):
        mine = [line.strip() for line in str(error).splitlines() if line.strip().startswith(f"- {backend}")]
        if mine:
            return f"{name}: {mine[0][2:][:150]}"
    arg = f" argument '{error.arg}'" if error.arg else ""
    if error.expected:
        return f"{name}{arg}: expected {error.expected[:90]}"
    first = str(error).splitlines()[0]
    return f"{name}{arg}: {first[:110]}"


def _tolerance(dtype: Any) -> tuple[float, float]:
    found = _OPCORE_DTYPES.get(dtype)
    if found is None or found not in DEFAULT_TOLERANCES:
        return 0.0, 0.0
    chain = REDUCED_PRECISION_CHAINS.get(found)
    tolerance = chain if chain is not None else DEFAULT_TOLERANCES[found]
    return tolerance.rtol, tolerance.atol


def _as_torch(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    try:
        import numpy

        if isinstance(value, numpy.ndarray):
            return torch.from_numpy(numpy.array(value))
    except ImportError:  # pragma: no cover - numpy comes with opcore
        pass
    if isinstance(value, (list, tuple)):
        return tuple(_as_torch(v) for v in value)
    return value


def _difference(got: Any, want: Any, high: Any) -> str | None:
    """Why ``got`` is not ``want`` (None: it is); ``high`` is torch's float64 answer, or None."""
    got, want = _as_torch(got), _as_torch(want)
    if isinstance(want, (list, tuple)):
        if not isinstance(got, tuple) or len(got) != len(want):
            return f"returned {type(got).__name__} of {len(got) if isinstance(got, tuple) else 1}, torch {len(want)}"
        highs = high if isinstance(high, (list, tuple)) else (None,) * len(want)
        for i, (g, w, h) in enumerate(zip(got, want, highs)):
            problem = _difference(g, w, h)
            if problem:
                return f"output {i}: {problem}"
        return None
    if not isinstance(got, torch.Tensor):
        return f"returned {type(got).__name__}, torch a tensor"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"returned {got.dtype}{list(got.shape)}, torch {want.dtype}{list(want.shape)}"
    rtol, atol = _tolerance(want.dtype)
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        return None
    except AssertionError as error:
        if isinstance(high, torch.Tensor) and want.is_floating_point():
            try:  # closer to the true value than torch's own kernel is not wrong
                expected = high.to(want.dtype).cpu()
                torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
                return None
            except (AssertionError, RuntimeError):
                pass
        return str(error).splitlines()[0] + " " + " ".join(str(error).splitlines()[1:4])


def _float64_result(info: Any, sample: Any) -> Any:
    """torch's answer with every floating tensor in float64 (None where torch cannot)."""

    def up(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.double()
        if isinstance(value, (list, tuple)):
            return type(value)(up(v) for v in value)
        return value

    try:
        return info.op(up(sample.input), *(up(a) for a in sample.args), **sample.kwargs)
    except Exception:
        return None


def run(backends: Iterable[str] | None = None, *, full: bool = False, per_dtype: int = 4) -> Report:
    names = list(backends) if backends is not None else backends_to_run()
    tallies = {name: BackendTally() for name in names}
    skipped: Counter[str] = Counter()
    entries: set[str] = set()
    start = time.perf_counter()
    for op, info, label, case, is_error in cases(full, per_dtype):
        entries.add(info.name)
        sample = case.sample_input if is_error else case
        if not is_error:
            try:
                want = _torch_result(info, sample)
            except Exception as error:
                skipped[f"torch raised {type(error).__name__}"] += 1
                continue
            high = None
        for name in names:
            tally = tallies[name]
            device = "cuda" if name == "cuda" else "cpu"
            try:
                args, kwargs = _call(op, info, sample, device)
                got = opcore.run(op, *args, backend=name, **kwargs)
            except OpcoreError as error:
                if is_error:
                    tally.errors_raised += 1
                else:
                    tally.declined[f"{op}: {_reason(error, name)}"] += 1
                continue
            except Exception as error:
                tally.failures.append(f"{label} raised {type(error).__name__}: {str(error).splitlines()[0][:200]}")
                continue
            if is_error:
                tally.accepted_errors[f"{op}: {str(case.error_regex)[:80]}"] += 1
                continue
            problem = _difference(got, want, None)
            if problem is not None:
                if high is None:
                    high = _float64_result(info, sample)
                problem = _difference(got, want, high)
            if problem is None:
                tally.passed += 1
            else:
                tally.failures.append(f"{label} wrong: {problem[:300]}")
    return Report(sorted(entries), tallies, skipped, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="every sample of every dtype (tens of minutes)")
    parser.add_argument("--backend", action="append", help="only this backend (repeatable)")
    parser.add_argument("--reasons", type=int, default=12, help="declined reasons shown per backend")
    options = parser.parse_args(argv)
    report = run(options.backend, full=options.full)
    print(report.text(options.reasons))
    return 1 if any(t.failures for t in report.tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
