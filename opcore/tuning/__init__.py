"""Measured ranking: ``opcore.tune`` measures the kernels that can run a call and ranks by the times.

- ``opcore.tuning.measure``: ``tune`` and ``TuneResult`` (what runs the kernels and times them).
- ``opcore.tuning.table``: the tuning file (format, location, signature buckets, lookup, writing).
- ``opcore.tuning.fingerprint``: what the file is keyed by (versions, CPU ISA, GPUs, threads).

>>> opcore.tune("gelu", x, approximate="tanh").winner   # doctest: +SKIP
'onnxruntime'
"""

from __future__ import annotations

from opcore.tuning.measure import TuneResult, tune
from opcore.tuning.table import TuningState, default_path, state

__all__ = ["TuneResult", "TuningState", "default_path", "state", "tune"]
