"""The runtime-independent machinery of backends that build one model per call signature (the
ONNX Runtime and OpenVINO backends): a backend says how to build and run a model; this package
does the rest. Importing it imports no runtime (neither onnxruntime, onnx, openvino nor torch).

Import from its modules, one job each (a plugin module loads only the small ``plugin`` and
``cache``; the kernels load ``op`` and ``builders`` when they first run):

- ``opcore.onemodel.op``: ``OneModelOp`` (argument roles from the contract's schema, the kernels
  and their keys, ``prepare``), ``Scalar``, the ``Model`` and ``GraphBuilder`` a backend supplies;
- ``opcore.onemodel.cache``: ``ModelCache``, the backend's LRU cache of models, sized from an
  environment variable;
- ``opcore.onemodel.builders``: what graph builders share (result dtypes, transpose's
  permutation, cat, data checks);
- ``opcore.onemodel.plugin``: availability, kernel registration, dtype-first checkers, doctor probes.

>>> from opcore.onemodel.cache import ModelCache
>>> ModelCache("demo models", "OPCORE_DEMO_CACHE_SIZE", 8).size()
8

Versioning: ``API_VERSION`` counts incompatible changes to the builder API a backend uses (the
names ``opcore.extend`` re-exports from these modules, and the methods a ``OneModelOp`` subclass
supplies: ``new_graph``, ``output``, ``compile``): a removed or renamed function, argument or
method, or a changed meaning bumps it; additions do not. ``opcore.extend.ONEMODEL_API_VERSION``
is the same number.

>>> import opcore.onemodel
>>> opcore.onemodel.API_VERSION >= 1
True
"""

from __future__ import annotations

__all__ = ["API_VERSION"]

API_VERSION = 1
