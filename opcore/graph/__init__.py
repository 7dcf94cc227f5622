"""opcore.graph: whole models captured once, planned across backends, saved and loaded.

>>> plan = opcore.graph.capture(model, (x,))      # doctest: +SKIP
>>> y = plan(x); print(plan.explain())            # doctest: +SKIP
>>> lm = opcore.graph.capture_lm(causal_lm)       # doctest: +SKIP
>>> tokens = lm.generate(ids, max_new_tokens=32)  # doctest: +SKIP

The names below load on first use (PEP 562), as in ``opcore``: importing ``opcore.graph`` (or its
``partition`` module, which backends import) imports neither torch nor any runtime.

>>> from opcore.graph import ValueRef
>>> ValueRef("x")
ValueRef(name='x')
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module defining it
_EXPORTS = {
    "CaptureError": "opcore.graph.errors",
    "Plan": "opcore.graph.plan",
    "PlanFileError": "opcore.graph.errors",
    "UncoveredError": "opcore.graph.errors",
    "WeightsError": "opcore.graph.errors",
    "VerifyReport": "opcore.graph.verify",
    "capture": "opcore.graph.capturing",
    "capture_lm": "opcore.graph.lm_capture",
    "LanguageModel": "opcore.graph.generation",
    "Session": "opcore.graph.generation",
    "load": "opcore.graph.loading",
    "CompiledPartition": "opcore.graph.partition",
    "PartNode": "opcore.graph.partition",
    "PartitionCompiler": "opcore.graph.partition",
    "PartitionError": "opcore.graph.partition",
    "PartitionSpec": "opcore.graph.partition",
    "ValueRef": "opcore.graph.partition",
    "compilers": "opcore.graph.partition",
    "PlainOutput": "opcore.graph.trees",
}

__all__ = [
    "CaptureError",
    "CompiledPartition",
    "LanguageModel",
    "PartNode",
    "PartitionCompiler",
    "PartitionError",
    "PartitionSpec",
    "PlainOutput",
    "Plan",
    "PlanFileError",
    "Session",
    "UncoveredError",
    "ValueRef",
    "VerifyReport",
    "WeightsError",
    "capture",
    "capture_lm",
    "compilers",
    "load",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opcore.graph' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
