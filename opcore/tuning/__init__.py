"""Measured ranking: ``opcore.tune`` measures the kernels that can run a call and ranks by the times.

- ``opcore.tuning.measure``: ``tune`` and ``TuneResult`` (what runs the kernels and times them).
- ``opcore.tuning.table``: the tuning file (format, location, signature buckets, lookup, writing).
- ``opcore.tuning.fingerprint``: what the file is keyed by (versions, CPU ISA, GPUs, threads).

The names below load on first use: the dispatcher imports ``opcore.tuning.table`` on every first
call, and must not pay for the measuring code (statistics, random) then.

>>> opcore.tune("gelu", x, approximate="tanh").winner   # doctest: +SKIP
'onnxruntime'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["TuneResult", "TuningState", "default_path", "state", "tune"]

_EXPORTS = {
    "TuneResult": "opcore.tuning.measure",
    "tune": "opcore.tuning.measure",
    "TuningState": "opcore.tuning.table",
    "default_path": "opcore.tuning.location",
    "state": "opcore.tuning.table",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opcore.tuning' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:
    from opcore.tuning.location import default_path
    from opcore.tuning.measure import TuneResult, tune
    from opcore.tuning.table import TuningState, state
