"""The tuning file: measured kernel times per call signature, keyed by a fingerprint.

One JSON file (docs/architecture.md, "Measured ranking", has its format): ``$OPCORE_TUNE_FILE``,
else ``$XDG_CACHE_HOME/opcore/tuning.json``, else ``~/.cache/opcore/tuning.json``. It is read
lazily, the first time a call signature is selected after the dispatch caches were cleared, and
only when it exists: without it nothing is read and ranking is the static one (deterministic).
A file whose fingerprint differs from this process's is stale: ignored, with one
``StaleTuningWarning`` saying what differs (``explain`` and ``opcore doctor`` say it too).

>>> key = signature_key("gelu", "cpu", (("x", TensorMeta((200, 4096), DType.FLOAT32)), ("approximate", "tanh")))
>>> key
"gelu(x=float32[256,4096], approximate='tanh') on cpu"
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from opcore.errors import StaleTuningWarning
from opcore.runtime import on_change
from opcore.tuning.fingerprint import current, differences, thread_count
from opcore.tuning.location import default_path
from opcore.types import Layout, TensorMeta

if TYPE_CHECKING:
    from opcore.runtime import Runtime

__all__ = [
    "FORMAT",
    "Entry",
    "Measurement",
    "TuningState",
    "bucket",
    "default_path",
    "format_us",
    "lookup",
    "measured_order",
    "record",
    "signature_key",
    "state",
]

K = TypeVar("K")
FORMAT = 1  # bumped when the file's layout changes; a file of another format is ignored and said so


@dataclass(frozen=True, slots=True)
class Measurement:
    """One kernel's time for one signature, per call, in microseconds (median and interquartile range)."""

    kernel: str  # its title: "cpu/onednn", "onnxruntime"
    median_us: float
    iqr_us: float
    min_us: float
    rounds: int

    def text(self) -> str:
        return f"{format_us(self.median_us)} ±{format_us(self.iqr_us / 2)}"


@dataclass(frozen=True, slots=True)
class Entry:
    """What was measured for one signature bucket. measurements: fastest first. failed: kernel title ->
    why it could not be measured (it raised); such a kernel keeps its static place behind the measured.
    """

    key: str
    example: str  # the exact inputs that were measured ("x=float32[200,4096]")
    measurements: tuple[Measurement, ...]
    failed: tuple[tuple[str, str], ...] = ()
    measured_at: str = ""

    def time_of(self, title: str) -> Measurement | None:
        return next((m for m in self.measurements if m.kernel == title), None)


@dataclass(frozen=True, slots=True)
class TuningState:
    """The file as this process sees it. status: "absent", "current", "stale" or "unreadable" (reason
    says why); entries is empty unless current.
    """

    path: str
    status: str
    reason: str = ""
    entries: Mapping[str, Entry] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return self.status == "current"


# -- signature buckets ------------------------------------------------------------------------------


def bucket(size: int) -> int:
    """A dimension's bucket: 0 and 1 as they are, others rounded up to a power of two.

    >>> [bucket(n) for n in (0, 1, 2, 3, 200, 4096)]
    [0, 1, 2, 4, 256, 4096]
    """
    return size if size <= 1 else 1 << (size - 1).bit_length()


def _describe(value: Any, exact: bool) -> str:
    if isinstance(value, TensorMeta):
        dims = ",".join(str(d if exact else bucket(d)) for d in value.shape)
        where = "" if value.layout is Layout.STRIDED else f",{value.layout.value}"
        where += "" if value.is_contiguous else ",non-contiguous"
        return f"{value.dtype.value}[{dims}]{where}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_describe(v, exact) for v in value) + "]"
    return repr(value)


def signature_key(op: str, device_type: str, named: Iterable[tuple[str, Any]]) -> str:
    """The bucketed signature a measurement serves: dtypes, shapes in buckets, attributes exactly."""
    return f"{op}({', '.join(f'{name}={_describe(v, False)}' for name, v in named)}) on {device_type}"


def example_text(named: Iterable[tuple[str, Any]]) -> str:
    """The exact tensors measured (attributes are in the key already)."""
    return ", ".join(f"{name}={_describe(v, True)}" for name, v in named if _holds_meta(v))


def _holds_meta(value: Any) -> bool:
    return isinstance(value, TensorMeta) or (isinstance(value, tuple) and any(_holds_meta(v) for v in value))


# -- reading ----------------------------------------------------------------------------------------

_lock = threading.RLock()
_loaded: TuningState | None = None
_warned: set[tuple[str, str]] = set()


def _forget() -> None:
    global _loaded  # noqa: PLW0603 - the process's view of one file, dropped when dispatch caches clear
    _loaded = None


on_change(_forget)


def state(rt: Runtime) -> TuningState:
    """The tuning file as this process sees it (read at most once per cache generation)."""
    global _loaded  # noqa: PLW0603
    found = _loaded
    if found is None:
        with _lock:
            found = _loaded = _read(default_path(), rt)
        if found.status in ("stale", "unreadable"):
            _warn(found)
    return found


def _read(path: str, rt: Runtime) -> TuningState:
    import json  # only when there is a file: the first call stays cheap without one

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return TuningState(path, "absent")
    except (OSError, ValueError) as error:
        return TuningState(path, "unreadable", f"{type(error).__name__}: {error}")
    try:
        if data.get("format") != FORMAT:
            return TuningState(path, "unreadable", f"format {data.get('format')!r}, this opcore reads {FORMAT}")
        stored = data["fingerprint"]
        entries = {key: _entry(key, value) for key, value in data["entries"].items()}
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        return TuningState(path, "unreadable", f"not a tuning file ({type(error).__name__}: {error})")
    changed = differences(stored, current(rt))
    if changed:
        return TuningState(path, "stale", "; ".join(changed), {}, stored)
    return TuningState(path, "current", "", entries, stored)


def _entry(key: str, value: Mapping[str, Any]) -> Entry:
    measurements = tuple(
        Measurement(m["kernel"], float(m["median_us"]), float(m["iqr_us"]), float(m["min_us"]), int(m["rounds"]))
        for m in value["measurements"]
    )
    failed = tuple((str(k), str(v)) for k, v in value.get("failed", {}).items())
    return Entry(key, str(value.get("example", "")), measurements, failed, str(value.get("measured_at", "")))


def _warn(found: TuningState) -> None:
    with _lock:
        if (found.path, found.reason) in _warned:
            return
        _warned.add((found.path, found.reason))
    warnings.warn(
        f"opcore: the tuning file {found.path} is {found.status} and is ignored ({found.reason}); kernels rank by "
        "static priority. Fix: run `opcore tune` (or opcore.tune) again on this machine, or delete the file.",
        StaleTuningWarning,
        stacklevel=5,
    )


def lookup(rt: Runtime, key_of: Callable[[], str]) -> tuple[Entry | None, str]:
    """The measurement for the signature key ``key_of()`` (built only when a file is in use), or None
    with a reason when there is none to use ("" when the file is absent or has no such entry).
    """
    found = state(rt)
    if not found.usable:
        return None, "" if found.status == "absent" else f"tuning file {found.status}: {found.reason}"
    entry = found.entries.get(key_of())
    if entry is None:
        return None, ""
    threads = thread_count()
    if found.fingerprint.get("threads") != threads:
        return None, f"measured with {found.fingerprint.get('threads')} threads, {threads} here"
    return entry, ""


# A measurement overturns the static order only where it is clear: the faster kernel's median is
# more than TIE_MARGIN below the other's, and their interquartile ranges do not overlap. Noise (a
# shared machine) then leaves the static ranking as it was rather than swapping it at random.
TIE_MARGIN = 0.05


def clearly_faster(a: Measurement, b: Measurement) -> bool:
    """a beats b beyond the margin and beyond both spreads."""
    return a.median_us * (1 + TIE_MARGIN) < b.median_us and a.median_us + a.iqr_us / 2 < b.median_us - b.iqr_us / 2


def measured_order(kernels: Iterable[K], entry: Entry) -> tuple[K, ...]:
    """``kernels`` (in static order, each with a ``title``) reordered by the entry: measured ones
    first — each time the first in static order that no other remaining one is clearly faster than
    — then the unmeasured rest in static order.
    """
    measured: list[tuple[K, Measurement]] = []
    rest: list[K] = []
    for kernel in kernels:
        found = entry.time_of(kernel.title)  # type: ignore[attr-defined]
        if found is None:
            rest.append(kernel)
        else:
            measured.append((kernel, found))
    ordered: list[K] = []
    while measured:
        pick = next(
            (i for i, (_, m) in enumerate(measured) if not any(clearly_faster(o, m) for _, o in measured)),
            min(range(len(measured)), key=lambda i: measured[i][1].median_us),  # a cycle: the fastest median
        )
        ordered.append(measured.pop(pick)[0])
    return tuple(ordered + rest)


# -- writing ----------------------------------------------------------------------------------------


def record(rt: Runtime, entry: Entry) -> str:
    """Add or replace ``entry`` and write the file (atomically); returns the file's path.

    A stale, unreadable or absent file starts afresh with this process's fingerprint. Entries another
    process wrote meanwhile under the same fingerprint are kept.
    """
    import json
    import tempfile

    path = default_path()
    with _lock:
        fingerprint = current(rt)
        on_disk = _read(path, rt)
        entries = dict(on_disk.entries) if on_disk.usable else {}
        entries[entry.key] = entry
        payload = {
            "format": FORMAT,
            "fingerprint": fingerprint,
            "entries": {key: _entry_json(e) for key, e in sorted(entries.items())},
        }
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".tuning-", suffix=".json", dir=directory)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(payload, out, indent=1)
                out.write("\n")
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        _forget()
    return path


def _entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "example": entry.example,
        "measured_at": entry.measured_at,
        "measurements": [
            {
                "kernel": m.kernel,
                "median_us": round(m.median_us, 3),
                "iqr_us": round(m.iqr_us, 3),
                "min_us": round(m.min_us, 3),
                "rounds": m.rounds,
            }
            for m in entry.measurements
        ],
        "failed": dict(entry.failed),
    }


def now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_us(value: float) -> str:
    """12.3 µs, 2.13 ms."""
    return f"{value:.3g} µs" if value < 1000 else f"{value / 1000:.3g} ms"
