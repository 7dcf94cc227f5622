"""opcore's ONNX Runtime backend: every built-in op as a one-op ONNX model, run through an
InferenceSession cached per (op, attributes, dtypes, ranks).

Importing this package does not import onnxruntime.

>>> import opcore_onnxruntime
>>> opcore_onnxruntime.set_cache_size(64); opcore_onnxruntime.cache_size()
64
"""

from __future__ import annotations

__version__ = "0.1.0"

from opcore_onnxruntime.cache import ENV_VAR, cache_size, cache_stats, set_cache_size

__all__ = ["ENV_VAR", "__version__", "cache_size", "cache_stats", "set_cache_size"]
