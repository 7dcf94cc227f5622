"""``opcore doctor``: collect a record of what opcore found (every probe returns a value or a
reason, never raises), then render it as text for people or as JSON (schema 1, docs/cli.md).

>>> report = collect()          # doctest: +SKIP
>>> report.exit_status          # doctest: +SKIP
0
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import platform
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opcore._version import __version__
from opcore.backend import DEFAULT_PRIORITIES
from opcore.probes import CpuInfo, GpuProbe, LibraryInfo, cpu_info, gpu_probe, libraries
from opcore.reports import PluginReport, PluginStatus
from opcore.settings import ENV_VARS, Settings

__all__ = [
    "SCHEMA_VERSION", "CompilerInfo", "DoctorReport", "Hint", "LoadingInfo", "PluginInfo", "TuningInfo", "collect",
    "to_json",
]  # fmt: skip

_OFF = "OPCORE_DISABLE="

# Bumped only when a key of the JSON form changes meaning or disappears (adding keys is allowed).
SCHEMA_VERSION = 1
# A backend's describe() that has not answered by then is reported as hung, and the doctor goes on.
DESCRIBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class CompilerInfo:
    """A loaded backend's partition compiler: the ops it claims (``supports``) among the registered
    contracts, and whether its hook gave one (``error``: why not); ``computes``: (dtype, the dtype its
    runtime computes it in) from the compiler's ``int64_as`` and ``bfloat16_as``."""

    ops: tuple[str, ...]
    loads: bool
    error: str = ""
    computes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One discovered plugin: its load report plus what its describe() said.

    describe None: not asked (the plugin failed or is disabled) or it failed (describe_error says why).
    """

    report: PluginReport
    describe: tuple[tuple[str, str], ...] | None = None
    describe_error: str = ""
    describe_time_s: float | None = None
    # its partition compiler (opcore.graph): None: the backend has none (or is not loaded)
    compiler: CompilerInfo | None = None

    @property
    def name(self) -> str:
        return self.report.name


@dataclass(frozen=True, slots=True)
class Hint:
    """Something to act on. level: "error" (calls will fail: the exit status is 1), "warning" (behaviour
    differs from what was asked) or "info".
    """

    level: str
    message: str
    fix: str = ""


@dataclass(frozen=True, slots=True)
class SettingInfo:
    name: str
    value: Any
    # "OPCORE_BACKENDS", "opcore.configure" or "default"
    source: str


@dataclass(frozen=True, slots=True)
class TuningInfo:
    """The tuning file (opcore.tune). status: absent, current, stale or unreadable (reason says why);
    entries: how many signatures it measured (0 unless current).
    """

    path: str
    status: str
    reason: str
    entries: int


@dataclass(frozen=True, slots=True)
class LoadingInfo:
    """How the plugins were loaded: seconds the load took (discovery, imports, probes, registration);
    entry points from ``source`` "cache" (plugins.json at ``path``) or "scan", with ``reason`` why it
    scanned and ``written`` why the file could not be written ("" when it was, or was not needed).
    """

    seconds: float
    source: str
    reason: str
    path: str | None
    written: str
    discovery_seconds: float


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """Everything the doctor shows. settings_error not None: the OPCORE_* settings are invalid, so
    no plugin was loaded (plugins is empty).
    """

    opcore_version: str
    opcore_path: str
    # opcore.run's fast path: "compiled (opcore._fastrun)", or "pure Python: <why>" (issue 15)
    fast_path: str
    # the tensor guard confirming cached torch signatures: opcore's compiled one, or torch's and why (opcore._guards)
    tensor_guard: str
    # opcore's optional compiled parts as installed: (module, "built" or "not built: <what it takes>"), found
    # without loading them (opcore._torchguard loads libtorch); whether they serve: fast_path, tensor_guard
    compiled_parts: tuple[tuple[str, str], ...]
    python_version: str
    python_implementation: str
    python_executable: str
    platform: str
    system: str
    release: str
    cpu: CpuInfo
    gpu: GpuProbe
    plugins: tuple[PluginInfo, ...]
    libraries: tuple[LibraryInfo, ...]
    settings: tuple[SettingInfo, ...]
    settings_error: str | None
    environment: tuple[tuple[str, str], ...]
    hints: tuple[Hint, ...]
    collect_time_s: float
    # None: not looked at (the settings are invalid, so no plugin loaded and no fingerprint exists)
    tuning: TuningInfo | None = None
    # None: nothing was loaded (the settings are invalid)
    loading: LoadingInfo | None = None

    def count(self, status: PluginStatus) -> int:
        return sum(1 for p in self.plugins if p.report.status is status)

    @property
    def exit_status(self) -> int:
        """1 when a plugin failed to load, the settings are invalid, or calls will fail (a backend named
        in OPCORE_BACKENDS is missing, no backend is loaded): what CI gates on. Else 0.
        """
        if self.settings_error is not None or self.count(PluginStatus.FAILED):
            return 1
        return 1 if any(hint.level == "error" for hint in self.hints) else 0


# -- collecting -------------------------------------------------------------------------------------


def _call_with_timeout(fn: Any, timeout_s: float) -> tuple[Any, BaseException | None, bool]:
    """(result, error, finished): runs fn in a daemon thread, so a hung probe cannot hang the doctor."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as error:
            box["error"] = error

    worker = threading.Thread(target=target, name="opcore-doctor-probe", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return None, None, False
    return box.get("result"), box.get("error"), True


def _describe(report: PluginReport, timeout_s: float) -> PluginInfo:
    spec = report.backend
    if spec is None or spec.describe is None or report.status not in (PluginStatus.LOADED, PluginStatus.UNAVAILABLE):
        return PluginInfo(report)
    started = time.perf_counter()
    result, error, finished = _call_with_timeout(spec.describe, timeout_s)
    elapsed = time.perf_counter() - started
    if not finished:
        return PluginInfo(report, None, f"describe() did not answer within {timeout_s:g} s", elapsed)
    if error is not None:
        return PluginInfo(report, None, f"describe() raised {type(error).__name__}: {error}", elapsed)
    if not isinstance(result, Mapping):
        return PluginInfo(report, None, f"describe() returned {type(result).__name__}, not a mapping", elapsed)
    lines = tuple((str(key), str(value)) for key, value in result.items())
    return PluginInfo(report, lines, "", elapsed)


def _settings(settings: Settings) -> tuple[SettingInfo, ...]:
    return (
        SettingInfo("backends", list(settings.backends) if settings.backends is not None else None,
                    settings.source("backends")),
        SettingInfo("disable", sorted(settings.disable), settings.source("disable")),
        SettingInfo("strict", settings.strict, settings.source("strict")),
        SettingInfo("autoload", settings.autoload, settings.source("autoload")),
        SettingInfo("tune", settings.tune, settings.source("tune")),
    )  # fmt: skip


def _install_fix(name: str) -> str:
    if name in DEFAULT_PRIORITIES and name != "reference":
        return f"pip install 'opcore[{name}]'"
    return f"install the plugin that provides {name!r}"


def _hints(
    plugins: tuple[PluginInfo, ...],
    settings: Settings | None,
    environment: tuple[tuple[str, str], ...],
    gpu: GpuProbe,
) -> tuple[Hint, ...]:
    hints: list[Hint] = []
    reports = {p.report.name: p.report for p in plugins}
    for name, _ in environment:
        # plugins read their own OPCORE_* variables (OPCORE_ORT_CACHE_SIZE): only a near miss is a typo
        close = difflib.get_close_matches(name, ENV_VARS, n=1, cutoff=0.85) if name not in ENV_VARS else []
        if close:
            hints.append(
                Hint("warning", f"{name} is set but is not an opcore setting, so it has no effect",
                     f"did you mean {close[0]}?")
            )  # fmt: skip
    if settings is not None and settings.backends is not None:
        where = settings.source("backends")
        where = "opcore.configure(backends=...)" if where == "opcore.configure" else where
        for name in settings.backends:
            report = reports.get(name)
            if report is None:
                hints.append(
                    Hint(
                        "error",
                        f"{where} names {name!r}, which is not installed; every call fails until it is",
                        f"{_install_fix(name)}, or remove it from {where}",
                    )
                )
            elif report.status is not PluginStatus.LOADED:
                hints.append(
                    Hint(
                        "error",
                        f"{where} names {name!r}, which is {report.status_text}; every call fails until it loads",
                        f"fix the plugin (see above), or remove it from {where}",
                    )
                )
    if settings is not None:
        for name in sorted(settings.disable - {"*"}):
            single = Settings(disable=frozenset({name}))
            if not any(single.disabled(r.name.split(" ")[0], r.distribution) for r in reports.values()):
                hints.append(
                    Hint(
                        "warning",
                        f"OPCORE_DISABLE names {name!r}, which no installed plugin or distribution provides, "
                        "so it disables nothing",
                        "check the spelling against the names above (separate names with commas)",
                    )
                )
    cuda_loaded = any(
        r.status is PluginStatus.LOADED and r.backend is not None and "cuda" in {str(d) for d in r.backend.device_types}
        for r in reports.values()
    )
    if gpu.visible and not cuda_loaded:
        cuda = reports.get("cuda")
        if cuda is None:
            hints.append(
                Hint(
                    "warning",
                    f"a GPU is visible ({gpu.evidence}) but no CUDA backend is installed",
                    "pip install 'opcore[cuda]'",
                )
            )
        else:
            hints.append(
                Hint(
                    "warning",
                    f"a GPU is visible ({gpu.evidence}) but the cuda backend is {cuda.status_text}",
                    "see the cuda plugin above",
                )
            )
    loaded = [r for r in reports.values() if r.status is PluginStatus.LOADED]
    if settings is not None and not loaded:
        why = (
            "every plugin is disabled"
            if reports and all(r.status is PluginStatus.DISABLED for r in reports.values())
            else "none loaded"
        )
        hints.append(
            Hint(
                "error",
                f"no backend is loaded ({why}): every call fails",
                "unset OPCORE_DISABLE / OPCORE_AUTOLOAD=0, or fix the plugins above (opcore.register_plugin "
                "loads one in-process)",
            )
        )
    if settings is not None and loaded and all(r.name == "reference" for r in loaded):
        hints.append(
            Hint(
                "info",
                "only the numpy reference backend is loaded: every op runs, slowly",
                "pip install 'opcore[cpu]' (or [onnxruntime], [openvino]) for fast kernels",
            )
        )
    return tuple(hints)


def collect(describe: bool = True, timeout_s: float = DESCRIBE_TIMEOUT_S, deep: bool = False) -> DoctorReport:
    """Load the plugins (if not yet) and probe everything; never raises for what it finds.

    describe False: skip the backends' describe() (which may import their runtimes). deep True:
    also import every "module:qualname" kernel and check it takes its schema's arguments.
    """
    started = time.perf_counter()
    import opcore
    from opcore.runtime import runtime

    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("OPCORE_")))
    settings: Settings | None
    settings_error: str | None = None
    plugins: tuple[PluginInfo, ...] = ()
    kernel_problems: list[tuple[str, str]] = []
    kernel_notes: list[Hint] = []
    try:
        rt = runtime().ensure_loaded()
        settings = rt.settings
    except Exception as error:  # invalid OPCORE_* values stop the runtime from starting
        settings = None
        settings_error = str(error) or type(error).__name__
    else:
        reports = tuple(rt.loader.reports.values())
        if describe:
            plugins = tuple(_describe(r, timeout_s) for r in reports)
        else:
            plugins = tuple(PluginInfo(r) for r in reports)
        plugins = tuple(sorted(_with_compilers(plugins, rt), key=_plugin_order))
        if deep:
            from opcore.registry import reference_problems

            kernel_problems = reference_problems(rt.registry)
        else:
            unchecked = sum(isinstance(k.fn, str) for kernels in rt.registry.kernels.values() for k in kernels)
            if unchecked:
                kernel_notes.append(
                    Hint(
                        "info",
                        f"{unchecked} kernels are named as 'module:qualname' and not imported here: their "
                        "signatures are checked against their ops at their first call",
                        "`opcore doctor --deep` imports and checks every one now",
                    )
                )
    gpu = gpu_probe()
    tuning = _tuning(rt) if settings_error is None else None
    loading = _loading(rt) if settings_error is None else None
    hints = (
        _hints(plugins, settings, environment, gpu)
        + tuple(
            Hint("error", f"backend {backend!r}: {problem}", f"report it to the plugin's authors; {_OFF}{backend}")
            for backend, problem in kernel_problems
        )
        + tuple(
            Hint(
                "error",
                f"backend {p.name!r}: its partition compiler does not load: {p.compiler.error}",
                f"report it to the plugin's authors; its nodes run on its kernels meanwhile, or {_OFF}{p.name}",
            )
            for p in plugins
            if p.compiler is not None and not p.compiler.loads
        )
        + tuple(kernel_notes)
    )
    return DoctorReport(
        opcore_version=__version__,
        opcore_path=os.path.dirname(opcore.__file__ or ""),
        fast_path=_fast_path(),
        tensor_guard=_tensor_guard(),
        compiled_parts=compiled_parts(),
        python_version=platform.python_version(),
        python_implementation=platform.python_implementation(),
        python_executable=sys.executable,
        platform=platform.platform(),
        system=platform.system(),
        release=platform.release(),
        cpu=cpu_info(),
        gpu=gpu,
        plugins=plugins,
        libraries=libraries(),  # after describe(): details come from runtimes the backends imported
        settings=_settings(settings) if settings is not None else (),
        settings_error=settings_error,
        environment=environment,
        hints=hints,
        collect_time_s=time.perf_counter() - started,
        tuning=tuning,
        loading=loading,
    )


def _with_compilers(plugins: tuple[PluginInfo, ...], rt: Any) -> tuple[PluginInfo, ...]:
    """Each loaded plugin with its partition compiler's row (the hook is called: cheap, it imports no
    runtime in opcore's backends; ``supports`` is asked for every registered op)."""
    from dataclasses import replace

    from opcore.graph.partition import compiler_reports

    try:
        reports = {r.backend: r for r in compiler_reports()}
    except Exception as error:  # the doctor reports, never fails
        failure = f"{type(error).__name__}: {error}"
        loaded = set(rt.loader.objects)
        return tuple(replace(p, compiler=CompilerInfo((), False, failure)) if p.name in loaded else p for p in plugins)
    ops = sorted(rt.registry.contracts)
    found = []
    for info in plugins:
        report = reports.get(info.name)
        if report is None:
            found.append(info)
            continue
        if report.compiler is None:
            found.append(replace(info, compiler=CompilerInfo((), False, report.reason)))
            continue
        try:
            claimed = tuple(op for op in ops if report.compiler.supports(op))
        except Exception as error:
            failure = f"supports() raised {type(error).__name__}: {error}"
            found.append(replace(info, compiler=CompilerInfo((), False, failure)))
            continue
        computes = tuple(
            (dtype, str(found_as))
            for dtype, found_as in (("int64", getattr(report.compiler, "int64_as", None)),
                                    ("bfloat16", getattr(report.compiler, "bfloat16_as", None)))
            if found_as is not None
        )  # fmt: skip
        found.append(replace(info, compiler=CompilerInfo(claimed, True, computes=computes)))
    return tuple(found)


def _loading(rt: Any) -> LoadingInfo | None:
    found = rt.loader.discovery
    if found is None:
        return None
    return LoadingInfo(rt.load_seconds, found.source, found.reason, found.path, found.written, found.seconds)


def _tuning(rt: Any) -> TuningInfo:
    import warnings

    from opcore.errors import StaleTuningWarning
    from opcore.tuning.table import state

    with warnings.catch_warnings():  # the doctor shows the file's state itself
        warnings.simplefilter("ignore", StaleTuningWarning)
        found = state(rt)
    return TuningInfo(found.path, found.status, found.reason, len(found.entries))


_STATUS_ORDER = {PluginStatus.LOADED: 0, PluginStatus.UNAVAILABLE: 1, PluginStatus.FAILED: 2, PluginStatus.DISABLED: 3}


def _plugin_order(info: PluginInfo) -> tuple[int, int, str]:
    spec = info.report.backend
    return (_STATUS_ORDER[info.report.status], -(spec.priority if spec else 0), info.name)


# -- the JSON form (documented in docs/cli.md; keep the two in step) -----------------------------------


def _plugin_json(info: PluginInfo) -> dict[str, Any]:
    report = info.report
    spec = report.backend
    return {
        "name": report.name,
        "status": report.status.value,
        "reason": report.reason,
        "traceback": report.traceback,
        "distribution": report.distribution,
        "distribution_version": report.distribution_version,
        "entry_point": report.entry_point,
        "backend": None
        if spec is None
        else {
            "name": spec.name,
            "version": spec.version,
            "api_version": spec.api_version,
            "priority": spec.priority,
            "device_types": [str(d) for d in spec.device_types],
            "description": spec.description,
            "install_hint": spec.install_hint,
        },
        "kernel_count": report.kernel_count,
        "contract_count": report.contract_count,
        "load_time_s": report.load_time_s,
        "describe": None if info.describe is None else dict(info.describe),
        "describe_error": info.describe_error,
        "describe_time_s": info.describe_time_s,
        # null: the backend has no partition compiler (or is not loaded)
        "partition_compiler": None
        if info.compiler is None
        else {
            "ops": list(info.compiler.ops),
            "loads": info.compiler.loads,
            "error": info.compiler.error,
            "computes": dict(info.compiler.computes),
        },
    }


def _fast_path() -> str:
    """How opcore.run serves a cached torch call here (opcore.dispatch: compiled, or why not)."""
    from opcore import dispatch

    if dispatch.compiled():
        return "compiled (opcore._fastrun)"
    return f"pure Python: {dispatch.PURE_PYTHON_REASON or 'turned off in this process (use_compiled)'}"


# what each compiled part takes to build, where it is not installed (setup.py; docs/architecture.md)
_BUILD_STEP = {
    "opcore._fastrun": (
        "a C compiler when opcore is installed (pip builds it; it warns and goes on without one): "
        "opcore.run takes its pure-Python path"
    ),
    "opcore._torchguard": (
        "optional: torch importable while opcore is built, which pip's isolated build is not: "
        "`pip install --no-build-isolation .` (or `-e .`) in an environment with torch and a C++ compiler "
        "(`make` does it); torch's TensorGuards serve meanwhile"
    ),
}


def compiled_parts() -> tuple[tuple[str, str], ...]:
    """Which of opcore's optional compiled parts are installed here: (module, "built") or (module,
    "not built: <what building it takes>"), found by their files, not imported.

    >>> dict(compiled_parts())["opcore._fastrun"] in ("built", "not built: " + _BUILD_STEP["opcore._fastrun"])
    True
    """
    parts = []
    for name, step in _BUILD_STEP.items():
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        parts.append((name, "built" if found else f"not built: {step}"))
    return tuple(parts)


def _tensor_guard() -> str:
    """Which tensor guard confirms cached torch signatures here: asked only where torch is loaded
    (--deep; the doctor imports no runtime otherwise, and loading opcore._torchguard loads libtorch).
    """
    if "torch" not in sys.modules:
        return "not checked: torch is not loaded (opcore doctor --deep checks it)"
    from opcore._guards import guard_in_use

    try:
        return guard_in_use()
    except Exception as error:  # a broken torch install: the doctor reports, never fails
        return f"unknown ({type(error).__name__}: {error})"


def to_json(report: DoctorReport) -> dict[str, Any]:
    """The documented, versioned form (``"schema": 1``)."""
    cpu = report.cpu
    return {
        "schema": SCHEMA_VERSION,
        "opcore": {
            "version": report.opcore_version,
            "path": report.opcore_path,
            "fast_path": report.fast_path,
            "tensor_guard": report.tensor_guard,
            "compiled_parts": dict(report.compiled_parts),
        },
        "python": {
            "version": report.python_version,
            "implementation": report.python_implementation,
            "executable": report.python_executable,
        },
        "platform": {"description": report.platform, "system": report.system, "release": report.release},
        "cpu": {
            "model": cpu.model,
            "machine": cpu.machine,
            "logical_cores": cpu.logical_cores,
            "usable_cores": cpu.usable_cores,
            "isa": None if cpu.isa is None else dict(cpu.isa),
            "reason": cpu.reason,
        },
        "gpu": {"visible": report.gpu.visible, "devices": list(report.gpu.devices), "evidence": report.gpu.evidence},
        "plugins": [_plugin_json(p) for p in report.plugins],
        "libraries": [
            {"name": lib.name, "version": lib.version, "details": dict(lib.details), "reason": lib.reason}
            for lib in report.libraries
        ],
        "settings": {s.name: {"value": s.value, "source": s.source} for s in report.settings},
        "settings_error": report.settings_error,
        "environment": dict(report.environment),
        "hints": [{"level": h.level, "message": h.message, "fix": h.fix} for h in report.hints],
        "tuning": None
        if report.tuning is None
        else {
            "path": report.tuning.path,
            "status": report.tuning.status,
            "reason": report.tuning.reason,
            "entries": report.tuning.entries,
        },
        "loading": None
        if report.loading is None
        else {
            "seconds": report.loading.seconds,
            "entry_points": report.loading.source,
            "reason": report.loading.reason,
            "cache_file": report.loading.path,
            "not_written": report.loading.written,
            "discovery_seconds": report.loading.discovery_seconds,
        },
        "summary": {
            "plugins": len(report.plugins),
            **{status.value: report.count(status) for status in PluginStatus},
            "exit_status": report.exit_status,
        },
        "collect_time_s": report.collect_time_s,
    }
