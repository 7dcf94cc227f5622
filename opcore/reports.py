"""Load reports: what happened to each plugin (kept apart from the loader, which imports pluggy)."""

from __future__ import annotations

from enum import Enum

from opcore.backend import BackendSpec
from opcore.fast_records import record

__all__ = ["PluginReport", "PluginStatus"]


class PluginStatus(str, Enum):
    LOADED = "loaded"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"
    DISABLED = "disabled"

    def __str__(self) -> str:
        return self.value


@record
class PluginReport:
    """What happened to one plugin. backend None: it failed before announcing itself."""

    name: str
    status: PluginStatus
    # One line: why it is unavailable, the error summary, or the setting that disabled it.
    reason: str = ""
    # The last frames of the traceback, for failures.
    traceback: str = ""
    distribution: str | None = None
    distribution_version: str | None = None
    # "module:attr" of the entry point, or "register_plugin(...)" for in-process plugins.
    entry_point: str | None = None
    backend: BackendSpec | None = None
    kernel_count: int = 0
    contract_count: int = 0
    load_time_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is PluginStatus.LOADED

    @property
    def status_text(self) -> str:
        return f"{self.status.value}: {self.reason}" if self.reason else self.status.value

    def __str__(self) -> str:
        dist = f" ({self.distribution} {self.distribution_version})" if self.distribution else ""
        return f"{self.name}{dist}: {self.status_text}"
