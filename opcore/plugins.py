"""Plugin discovery and loading: entry points in ``opcore.backends``, each isolated.

A plugin that fails to import, whose hook raises (``SystemExit`` included), that targets
another API version, that registers something invalid (a field of the wrong type), whose
``is_available()`` does not answer within ``OPCORE_PROBE_TIMEOUT`` seconds, or that reuses a
taken backend name is recorded in its PluginReport, logged once, and skipped; the others load
as if it were not there. A name claimed by two distributions serves neither: both are reported
and the user chooses (``OPCORE_DISABLE=<distribution>``, or uninstall one).

``KeyboardInterrupt`` is never swallowed; the Runtime loads into a fresh loader and publishes it
only once complete, so an interrupted load leaves the previous state (see runtime.py).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from collections.abc import Iterable
from importlib.metadata import EntryPoint
from typing import Any

import pluggy

from opcore import discovery, hookspecs
from opcore.backend import API_VERSION, BackendSpec
from opcore.errors import PluginError
from opcore.registry import Registrar, Registry
from opcore.reports import PluginReport, PluginStatus
from opcore.settings import Settings
from opcore.types import DeviceType

__all__ = ["ENTRY_POINT_GROUP", "PluginLoader", "PluginReport", "PluginStatus"]

ENTRY_POINT_GROUP = discovery.ENTRY_POINT_GROUP
logger = logging.getLogger("opcore.plugins")


class _Pending:
    """A plugin being loaded. A plain slotted class, not a dataclass: it is created while the first
    opcore.run loads the plugins, where generating a dataclass's methods costs ~0.5-1 ms (issue 15)."""

    __slots__ = (
        "distribution", "distribution_version", "elapsed", "entry_point", "failure", "name", "obj", "registrar", "spec"
    )  # fmt: skip

    def __init__(
        self, name: str, obj: Any, distribution: str | None, distribution_version: str | None, entry_point: str | None
    ) -> None:
        self.name, self.obj, self.entry_point = name, obj, entry_point
        self.distribution, self.distribution_version = distribution, distribution_version
        self.spec: BackendSpec | None = None
        self.registrar: Registrar | None = None
        self.elapsed = 0.0
        self.failure: PluginReport | None = None

    def __repr__(self) -> str:
        return f"_Pending(name={self.name!r}, entry_point={self.entry_point!r})"


def _summary(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _frames(error: BaseException) -> str:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    return "".join(lines[-6:]).rstrip()


class PluginLoader:
    """Loads plugins into a Registry and keeps their reports."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self.reports: dict[str, PluginReport] = {}
        self.objects: dict[str, Any] = {}  # backend name -> the plugin object, for unregister
        self.claimed: dict[str, str] = {}  # backend name -> who provides it (distribution or entry point)
        # how the entry points were found (cache or scan, and why); None until load_entry_points
        self.discovery: discovery.DiscoveryOutcome | None = None

    # -- discovery ---------------------------------------------------------------------------

    @staticmethod
    def entry_points() -> list[EntryPoint]:
        """The installed entry points, scanned (by name, then distribution: the first one wins a name)."""
        return discovery.scan()

    def load_entry_points(self, settings: Settings) -> None:
        pending: list[_Pending] = []
        eps, self.discovery = discovery.discover(settings.load_cache)
        claims: dict[str, list[discovery.Discovered]] = {}
        for ep in eps:
            if settings.autoload and not settings.disabled(ep.name, ep.distribution) and not _squatting(ep):
                claims.setdefault(ep.name, []).append(ep)
        for ep in eps:
            dist_name, dist_version = ep.distribution, ep.version
            if settings.autoload and not settings.disabled(ep.name, dist_name) and _squatting(ep):
                reason, fix = _reserved_reason(ep)
                taken = ep.name in self.reports or ep.name in claims
                key = f"{ep.name} [{dist_name or ep.value}]" if taken else None
                self._fail_early(ep.name, dist_name, dist_version, ep.value, 0.0, reason, "", key=key, fix=fix)
                continue
            if not settings.autoload or settings.disabled(ep.name, dist_name):
                reason = _disabled_reason(settings)
                # the plain name stays free for the distribution that is enabled under it, if any
                taken = ep.name in self.reports or ep.name in claims
                key = f"{ep.name} [{dist_name or ep.value}]" if taken else ep.name
                self._record(PluginReport(key, PluginStatus.DISABLED, reason, "", dist_name, dist_version, ep.value))
                continue
            rivals = claims[ep.name]
            if len(rivals) > 1:  # squatting or a packaging mistake: serve neither, say who claims it
                first = rivals[0] is ep
                who = "; ".join(f"{r.distribution or '?'} {r.version or ''} ({r.value})" for r in rivals)
                self._fail_early(
                    ep.name,
                    dist_name,
                    dist_version,
                    ep.value,
                    0.0,
                    f"the backend name {ep.name!r} is claimed by {len(rivals)} distributions: {who}; "
                    "none of them is loaded under it",
                    "",
                    key=None if first else f"{ep.name} [{dist_name or ep.value}]",
                    fix=f"uninstall the one you do not want (pip uninstall ...), or disable it by its "
                    f"distribution name: OPCORE_DISABLE={(rivals[-1] if first else ep).distribution or ep.name}",
                )
                continue
            started = time.perf_counter()
            try:
                obj = ep.load()
            except BaseException as error:
                if isinstance(error, KeyboardInterrupt):
                    raise
                self._fail_early(
                    ep.name,
                    dist_name,
                    dist_version,
                    ep.value,
                    time.perf_counter() - started,
                    f"import failed: {_summary(error)}",
                    _frames(error),
                )
                continue
            item = _Pending(ep.name, obj, dist_name, dist_version, ep.value)
            item.elapsed = time.perf_counter() - started
            pending.append(item)
        self._load(pending, probe_timeout=settings.probe_timeout)

    def register_object(self, obj: Any, name: str | None = None, probe_timeout: float | None = None) -> PluginReport:
        """In-process registration (tests, notebooks). Interrupted (KeyboardInterrupt), it leaves
        nothing of the plugin behind before the interrupt propagates.
        """
        name = name or getattr(obj, "__name__", None) or type(obj).__name__
        item = _Pending(name, obj, None, None, f"register_plugin({name})")
        try:
            self._load([item], expected_name=False, probe_timeout=probe_timeout)
        except BaseException:
            if item.failure is None:
                self._fail(item, "interrupted while loading", "")
            if item.spec is not None and self.reports.get(item.spec.name) is item.failure:
                self.reports.pop(item.spec.name)
            self.reports.pop(item.name, None)
            raise
        return item.failure or self.reports[item.name]

    def call_hook(self, backend: str, hook: str, **kwargs: Any) -> Any:
        """The result of ``hook`` of the loaded ``backend``'s plugin; None when it does not implement it."""
        plugin = self.objects.get(backend)
        if plugin is None:
            return None
        for impl in getattr(self.manager.hook, hook).get_hookimpls():
            if impl.plugin is plugin:
                return impl.function(**kwargs)
        return None

    def unregister(self, name: str) -> None:
        self.reports.pop(name, None)
        self.claimed.pop(name, None)
        plugin = self.objects.pop(name, None)
        if plugin is not None and self.manager.is_registered(plugin):
            self.manager.unregister(plugin)
        self.registry.remove_backend(name)

    # -- the load sequence: announce, check, contracts (all), kernels (all) ------------------------

    def _load(self, pending: list[_Pending], expected_name: bool = True, probe_timeout: float | None = None) -> None:
        for item in pending:
            self._announce(item, expected_name, probe_timeout)
        alive = [item for item in pending if item.failure is None and item.registrar is not None]
        self._run_phase(alive, "opcore_register_contracts")
        self._run_phase([i for i in alive if i.failure is None], "opcore_register_kernels")
        for item in pending:
            registrar = item.registrar  # None: announcing failed, or the plugin is unavailable
            if item.failure is not None or registrar is None:
                continue
            try:
                self.registry.commit(registrar)
            except Exception as error:  # the registrar validated everything: a bug here is opcore's
                self._fail(item, f"registration failed: {_summary(error)}", _frames(error))
                continue
            self._record(
                PluginReport(
                    registrar.backend.name,
                    PluginStatus.LOADED,
                    "",
                    "",
                    item.distribution,
                    item.distribution_version,
                    item.entry_point,
                    registrar.backend,
                    len(registrar.staged_kernels),
                    len(registrar.staged_contracts),
                    item.elapsed,
                )
            )

    def _announce(self, item: _Pending, expected_name: bool, probe_timeout: float | None = None) -> None:
        started = time.perf_counter()
        try:
            # pluggy's own names only need to be unique; the backend's name is checked below
            self.manager.register(item.obj, name=f"{item.name}@{id(item.obj):x}")
        except Exception as error:
            self._fail(item, f"invalid hook implementation: {_summary(error)}", _frames(error))
            return
        try:
            unknown = [c.name for c in self.manager.get_hookcallers(item.obj) or () if c.spec is None]
            if unknown:
                raise PluginError(
                    f"implements unknown hook(s) {', '.join(unknown)}",
                    fix="the hooks are opcore_backend, opcore_register_contracts, opcore_register_kernels, "
                    "opcore_partition_compiler",
                )
            spec = self._call(item, "opcore_backend")
            if spec is _MISSING:
                raise PluginError("does not implement opcore_backend()", fix="add an @opcore.hookimpl opcore_backend")
            if not isinstance(spec, BackendSpec):
                raise PluginError(f"opcore_backend() returned {type(spec).__name__}, not a BackendSpec")
            spec = _validated(spec)
            item.spec = spec
            if spec.api_version != API_VERSION:
                raise PluginError(
                    f"built for opcore plugin API {spec.api_version}, this opcore speaks API {API_VERSION}",
                    fix=f"install a release of {item.distribution or item.name} made for API {API_VERSION}, "
                    "or the opcore release it was made for",
                )
            if expected_name and spec.name != item.name:
                raise PluginError(
                    f"the entry point is named {item.name!r} but the backend calls itself {spec.name!r}",
                    fix="name the entry point after the backend",
                )
            owner = self.claimed.get(spec.name)
            if owner is not None:
                raise PluginError(
                    f"a backend named {spec.name!r} is already provided by {owner}",
                    fix="uninstall one of the two distributions, or unregister the first plugin",
                )
            self.claimed[spec.name] = item.distribution or item.entry_point or item.name
            if not expected_name:
                item.name = spec.name
            available = _probe(spec, probe_timeout)
        except BaseException as error:  # SystemExit from a plugin is the plugin's failure, not the host's exit
            if isinstance(error, KeyboardInterrupt):
                raise
            item.elapsed += time.perf_counter() - started
            self._fail(item, _summary(error) if not isinstance(error, PluginError) else str(error), _frames(error))
            return
        item.elapsed += time.perf_counter() - started
        if available is not True:
            reason = available if isinstance(available, str) and available else "is_available() returned False"
            self.registry.commit_backend(spec)
            self._record(
                PluginReport(
                    spec.name,
                    PluginStatus.UNAVAILABLE,
                    reason,
                    "",
                    item.distribution,
                    item.distribution_version,
                    item.entry_point,
                    spec,
                    0,
                    0,
                    item.elapsed,
                )
            )
            self.manager.unregister(item.obj)
            return
        item.registrar = Registrar(spec, self.registry)
        self.objects[spec.name] = item.obj

    def _run_phase(self, items: Iterable[_Pending], hook: str) -> None:
        for item in items:
            registrar = item.registrar  # None: announcing failed (the caller passes only announced ones)
            if item.failure is not None or registrar is None:
                continue
            started = time.perf_counter()
            try:
                self._call(item, hook, registrar=registrar)
            except BaseException as error:
                if isinstance(error, KeyboardInterrupt):
                    raise
                self._fail(
                    item,
                    f"{hook}() failed: {_summary(error) if not isinstance(error, PluginError) else error}",
                    _frames(error),
                )
            item.elapsed += time.perf_counter() - started
            if hook == "opcore_register_contracts" and item.failure is None:
                # other plugins' kernels may use these contracts in the next phase
                for contract in registrar.staged_contracts:
                    self.registry.contracts.setdefault(contract.name, contract)
                    self.registry.contract_owner.setdefault(contract.name, registrar.backend.name)

    def _call(self, item: _Pending, hook: str, **kwargs: Any) -> Any:
        for impl in getattr(self.manager.hook, hook).get_hookimpls():
            if impl.plugin is item.obj:
                return impl.function(**kwargs)
        return _MISSING

    # -- recording -------------------------------------------------------------------------------

    def _fail_early(
        self,
        name: str,
        dist: str | None,
        version: str | None,
        entry_point: str | None,
        elapsed: float,
        reason: str,
        frames: str,
        key: str | None = None,
        fix: str | None = None,
    ) -> None:
        reason = f"{reason}. Fix: {fix}" if fix else reason
        report = PluginReport(
            key or name, PluginStatus.FAILED, reason, frames, dist, version, entry_point, None, 0, 0, elapsed
        )
        self._record(report)

    def _fail(self, item: _Pending, reason: str, frames: str) -> None:
        name = item.name
        if name in self.reports and self.reports[name].entry_point != item.entry_point:
            name = f"{name} [{item.distribution or item.entry_point}]"  # never hide the plugin already there
        if item.spec is not None and self.claimed.get(item.spec.name) == (
            item.distribution or item.entry_point or item.name
        ):
            self.claimed.pop(item.spec.name)
        item.failure = PluginReport(
            name,
            PluginStatus.FAILED,
            reason,
            frames,
            item.distribution,
            item.distribution_version,
            item.entry_point,
            item.spec,
            0,
            0,
            item.elapsed,
        )
        # contracts staged in an earlier phase stay out: a failed plugin contributes nothing
        if item.registrar is not None:
            for contract in item.registrar.staged_contracts:
                if self.registry.contract_owner.get(contract.name) == (item.spec.name if item.spec else None):
                    self.registry.contracts.pop(contract.name, None)
                    self.registry.contract_owner.pop(contract.name, None)
        if self.manager.is_registered(item.obj):
            self.manager.unregister(item.obj)
        self._record(item.failure)

    def _record(self, report: PluginReport) -> None:
        self.reports[report.name] = report
        if report.status is PluginStatus.FAILED:
            logger.warning(
                "opcore: backend plugin %r%s failed to load: %s. It is skipped; run `opcore doctor` for details, "
                "or set OPCORE_DISABLE=%s to silence this.",
                report.name,
                f" ({report.distribution} {report.distribution_version})" if report.distribution else "",
                report.reason.rstrip("."),
                disable_name(report),
            )


_MISSING: Any = object()

# Backend names of opcore's own distributions: another distribution's entry point under one of them is
# refused (the genuine backend loads as if it were not there), never left to knock the real one out.
RESERVED: dict[str, str] = {
    "reference": "opcore",
    "cpu": "opcore-cpu",
    "cuda": "opcore-cuda",
    "onnxruntime": "opcore-onnxruntime",
    "openvino": "opcore-openvino",
    "example": "opcore-example-vendor",
}
EXAMPLE_MODULE = "opcore_example_vendor"


def disable_name(report: PluginReport) -> str:
    """What OPCORE_DISABLE takes to turn off this report's plugin alone: its distribution where another
    plugin shares the name (a reserved name, two claimants), else the backend's name."""
    base = report.name.split(" ")[0]
    shared = " [" in report.name or (base in RESERVED and _normalized(report.distribution or "") != RESERVED[base])
    return report.distribution if shared and report.distribution else base


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _squatting(ep: discovery.Discovered) -> bool:
    """Whether ``ep`` claims a reserved backend name from a distribution it is not reserved for."""
    owner = RESERVED.get(ep.name)
    return owner is not None and ep.distribution is not None and _normalized(ep.distribution) != owner


def _reserved_reason(ep: discovery.Discovered) -> tuple[str, str]:
    """The report's reason and fix for an entry point squatting a reserved name."""
    owner = RESERVED[ep.name]
    dist = f"{ep.distribution} {ep.version or ''}".strip()
    if ep.name == "example" and ep.value.split(".")[0].split(":")[0] == EXAMPLE_MODULE:
        return (
            f"distribution {dist} installs the entry point 'example = {ep.value}', the example plugin's own, "
            f"copied and not renamed (the name 'example' belongs to {owner})",
            "rename the entry point, the package opcore_example_vendor and BackendSpec.name after your backend "
            "(docs/plugins.md, 'Copy the example')",
        )
    return (
        f"the backend name {ep.name!r} is reserved for opcore's distribution {owner}; distribution {dist} "
        f"(entry point {ep.name} = {ep.value}) claims it and is not loaded",
        f"name the backend after your distribution (its entry point and BackendSpec.name, e.g. "
        f"{_normalized(ep.distribution or ep.name).replace('-', '_')!r}); OPCORE_DISABLE={ep.distribution} "
        f"silences this and leaves {owner}'s {ep.name!r} alone",
    )


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _validated(spec: BackendSpec) -> BackendSpec:
    """Every field of the spec checked for its type (a priority given as "999" would make every call
    of every op raise TypeError later); device types given as strings become DeviceType.
    """
    problems = []
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        problems.append(f"name must be a str of letters, digits, '_', '.', '-' (found {spec.name!r})")
    if not isinstance(spec.version, str):
        problems.append(f"version must be a str (found {type(spec.version).__name__})")
    for field_name in ("priority", "api_version"):
        value = getattr(spec, field_name)
        if type(value) is not int:
            problems.append(f"{field_name} must be an int (found {type(value).__name__} {value!r})")
    for field_name in ("is_available", "describe"):
        value = getattr(spec, field_name)
        if value is not None and not callable(value):
            problems.append(f"{field_name} must be callable or None (found {type(value).__name__})")
    for field_name in ("description", "install_hint"):
        if not isinstance(getattr(spec, field_name), str):
            problems.append(f"{field_name} must be a str (found {type(getattr(spec, field_name)).__name__})")
    device_types: tuple[DeviceType, ...] = ()
    if not isinstance(spec.device_types, (tuple, list)) or not spec.device_types:
        problems.append(f"device_types must be a non-empty tuple of DeviceType (found {spec.device_types!r})")
    else:
        try:
            device_types = tuple(DeviceType(d) for d in spec.device_types)
        except ValueError as error:
            problems.append(f"device_types: {error} (known: {', '.join(d.value for d in DeviceType)})")
    if problems:
        raise PluginError(
            "opcore_backend() returned an invalid BackendSpec: " + "; ".join(problems),
            fix="fix the plugin's BackendSpec (see docs/plugins.md)",
        )
    if device_types == spec.device_types:
        return spec
    from dataclasses import replace

    return replace(spec, device_types=device_types)


PROBE_TIMEOUT_S = 2.0  # default time limit of is_available(); OPCORE_PROBE_TIMEOUT changes it


def _probe(spec: BackendSpec, timeout: float | None) -> bool | str:
    """spec.is_available() within ``timeout`` seconds (None: the default), in a daemon thread, so a
    probe that hangs (a driver call, a network mount) costs the host at most that long.

    The time counts from when the probe starts running: while another thread imports torch, loading
    its shared libraries holds the GIL for seconds, and a probe waiting for the GIL is not slow itself.
    """
    if spec.is_available is None:
        return True
    limit = PROBE_TIMEOUT_S if timeout is None else timeout
    answer: list[Any] = []
    started: list[float] = []

    def ask() -> None:
        started.append(time.monotonic())
        try:
            answer.append((True, spec.check_availability()))
        except BaseException as error:  # handed to the loading thread below
            answer.append((False, error))

    worker = threading.Thread(target=ask, name=f"opcore probe {spec.name}", daemon=True)
    launched = time.monotonic()
    worker.start()
    while not answer and worker.is_alive():
        worker.join(min(0.05, limit))
        now = time.monotonic()
        if answer or (started and now - started[0] >= limit) or now - launched >= 10 * limit + 10:
            break
    if not answer:
        raise PluginError(
            f"is_available() did not answer within {limit:g} s; the backend is skipped",
            fix="make the probe cheap (docs/plugins.md), or raise OPCORE_PROBE_TIMEOUT (seconds)",
        )
    ok, value = answer[0]
    if not ok:
        raise value
    if value is not True and not isinstance(value, (str, bool)):
        raise PluginError(f"is_available() returned {type(value).__name__}, expected True or a reason (str)")
    return value


def _disabled_reason(settings: Settings) -> str:
    configured = settings.source("autoload" if not settings.autoload else "disable") == "opcore.configure"
    if not settings.autoload:
        return "by opcore.configure(autoload=False)" if configured else "by OPCORE_AUTOLOAD=0"
    return "by opcore.configure(disable=...)" if configured else "by OPCORE_DISABLE"
