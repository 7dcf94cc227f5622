"""The process-wide state: settings, the registry, the plugin loader, and who to tell on change.

Plugins load on first use (the first run, explain, resolve, backends or ops call), never at
``import opcore``. Anything that changes what dispatch would pick (a plugin registered,
configure, reload) clears the dispatch caches.

Loading is atomic: plugins load into a fresh registry and loader, published together once the
load completed. A load interrupted (KeyboardInterrupt during a slow probe or hook) publishes
nothing, so the next call loads again from scratch; a reload never shows a half-loaded registry
to calls running in other threads (they finish on the state they started with).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opcore.registry import Registry
from opcore.reports import PluginReport, PluginStatus

if TYPE_CHECKING:
    from opcore.plugins import PluginLoader
from opcore.settings import UNSET, Settings, settings_from

__all__ = ["Runtime", "on_change", "runtime"]


class Runtime:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.overrides: dict[str, Any] = {}
        self.settings: Settings = settings_from(os.environ, {})
        # plugins given to register_plugin: they survive reloads until unregistered
        self.in_process: dict[str, Any] = {}
        self._fresh_registry()
        self.loaded = False
        # seconds the last load took (discovery, imports, probes, registration); 0.0 before one
        self.load_seconds = 0.0

    def _fresh_registry(self) -> None:
        from opcore.opset import BUILTIN_CONTRACTS
        from opcore.plugins import PluginLoader  # pluggy and importlib.metadata: on first use only

        self.registry = Registry(BUILTIN_CONTRACTS)
        self.loader: PluginLoader = PluginLoader(self.registry)

    # -- loading -------------------------------------------------------------------------------

    def ensure_loaded(self) -> Runtime:
        if not self.loaded:
            with self.lock:
                if not self.loaded:
                    self._load()
        return self

    def _load(self) -> None:
        started = time.perf_counter()
        from opcore.opset import BUILTIN_CONTRACTS
        from opcore.plugins import PluginLoader  # pluggy and importlib.metadata: on first use only

        registry = Registry(BUILTIN_CONTRACTS)
        loader = PluginLoader(registry)
        loader.load_entry_points(self.settings)  # an interrupt here publishes nothing
        for name, obj in self.in_process.items():
            loader.register_object(obj, name, self.settings.probe_timeout)
        self.registry, self.loader = registry, loader
        self.load_seconds = time.perf_counter() - started
        self.loaded = True
        self.invalidate()

    def reload(self) -> None:
        """Forget every plugin, re-read the environment, and load again on next use.

        Plugins added with register_plugin are registered again. Calls already running keep the
        registry they started with; the next call loads (atomically, see the module docstring).
        """
        with self.lock:
            self.settings = settings_from(os.environ, self.overrides)
            self.loaded = False
            self.invalidate()

    def configure(self, **options: Any) -> Settings:
        with self.lock:
            before = self.settings
            for key, value in options.items():
                if value is None:  # drop the override: the environment applies again
                    self.overrides.pop(key, None)
                elif value is not UNSET:
                    self.overrides[key] = value
            self.settings = settings_from(os.environ, self.overrides)
            load_time = (before.disable, before.autoload, before.probe_timeout) != (
                self.settings.disable, self.settings.autoload, self.settings.probe_timeout,
            )  # fmt: skip
            if load_time and self.loaded:
                self.loaded = False
            self.invalidate()
            return before

    def register_plugin(self, obj: Any, name: str | None) -> PluginReport:
        self.ensure_loaded()
        with self.lock:
            report = self.loader.register_object(obj, name, self.settings.probe_timeout)
            if report.status is not PluginStatus.FAILED:
                self.in_process[report.name] = obj
            self.invalidate()
        return report

    def unregister_plugin(self, name: str) -> None:
        self.ensure_loaded()
        with self.lock:
            self.in_process.pop(name, None)
            self.loader.unregister(name)
            self.invalidate()

    def invalidate(self) -> None:
        for listener in _LISTENERS:
            listener()

    # -- questions -----------------------------------------------------------------------------

    def report(self, backend: str) -> PluginReport | None:
        return self.loader.reports.get(backend)


_LISTENERS: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever what dispatch would pick may have changed (cache clearing)."""
    _LISTENERS.append(listener)


_RUNTIME: Runtime | None = None
_CREATE = threading.Lock()


def runtime() -> Runtime:
    """The process's Runtime, created on first use (plugins are not loaded yet)."""
    global _RUNTIME  # noqa: PLW0603 - one lazily created process-wide object
    if _RUNTIME is None:
        with _CREATE:
            if _RUNTIME is None:
                _RUNTIME = Runtime()
    return _RUNTIME
