"""The conformance kit: for every op, sample inputs, error inputs, tolerances and a reference,
and a pytest plugin that runs them against any installed backend::

    pytest --pyargs opcore.testing --opcore-backend onnxruntime

A plugin adds entries for its own ops with ``add_entry`` or an ``opcore.testing`` entry point
(docs/testing.md). Importing this package imports neither torch nor any backend.

>>> from opcore.testing import entry, samples_of
>>> len(samples_of(entry("relu"))) > 10
True
"""

from __future__ import annotations

from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.conformance import ConformanceError, Outcome, Status, check_error, check_sample, claims
from opcore.testing.entries import (
    ENTRY_POINT_GROUP,
    add_entry,
    builtin_entries,
    entries,
    entry,
    error_inputs_of,
    remove_entry,
    samples_of,
)
from opcore.testing.records import ErrorInput, OpEntry, Sample, TensorInput, Tolerance
from opcore.testing.tolerances import DEFAULT_TOLERANCES, REDUCED_PRECISION_CHAINS, tolerance_for

__all__ = [
    "DEFAULT_TOLERANCES",
    "ENTRY_POINT_GROUP",
    "ConformanceError",
    "REDUCED_PRECISION_CHAINS",
    "ErrorInput",
    "OpEntry",
    "Outcome",
    "Sample",
    "SampleSet",
    "Status",
    "TensorInput",
    "Tolerance",
    "add_entry",
    "builtin_entries",
    "check_error",
    "check_sample",
    "claims",
    "entries",
    "entry",
    "error_inputs_of",
    "remove_entry",
    "samples_of",
    "shape_id",
    "tensor_of",
    "tolerance_for",
    "z",
]

# `pytest -p opcore.testing` registers this package as a plugin; the hooks live in .plugin
pytest_plugins = ["opcore.testing.plugin"]
