"""opcore's OpenVINO backend: every built-in op as a one-op model built with ``openvino.opset13``,
compiled once per (op, attributes, dtypes, ranks) with a float32 precision hint.

Importing this package does not import openvino.

>>> import opcore_openvino
>>> opcore_openvino.set_cache_size(16); opcore_openvino.cache_size()
16
"""

from __future__ import annotations

__version__ = "0.1.0"

from opcore_openvino.cache import ENV_VAR, cache_size, cache_stats, set_cache_size

__all__ = ["ENV_VAR", "__version__", "cache_size", "cache_stats", "set_cache_size"]
