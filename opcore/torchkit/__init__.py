"""opcore.torchkit: the public, versioned torch surface shared by every torch-based backend
(opcore-cpu, opcore-cuda, and a vendor's own torch backend). Importing this package imports no
torch; each submodule says whether it does, and ``import opcore`` never imports any of them.

- ``registration`` (no torch): ``register_torch_kernels(registrar, device_type, differences,
  overrides)`` registers the shared kernels for every op the registrar knows that they implement,
  with the contract's dtypes except where ``differences`` says torch on that device differs, and
  the by-name ATen fallback for the built-in ops they do not implement;
  ``register_aten_fallback(registrar, device_type)`` serves ``aten.*`` ops; ``torch_dtypes``,
  ``shared_kernel_ops``; it re-exports the labels and ``FALLBACK_PRIORITY``, which live in this
  package's ``__init__`` (no torch) with ``ATEN_PREFIX``.
- ``kernels`` (torch): one device-generic kernel per op, named as the op, listed in ``OPS``
  (that list is the op set ``register_torch_kernels`` reads, without importing torch).
- ``prepared`` (torch): prepare functions of the linear family (constant weights kept transposed)
  and the helpers ``free_positions``, ``with_free_args``, ``batch_rows`` for a backend's own.
- ``aten`` (torch): the ATen fallback, ``aten.<name>[.<overload>]`` ops bound through ``_schema``.
- ``arrays`` (torch): numpy <-> torch conversions and device moves used by the dispatcher.
- ``watch`` (torch): ``TensorWatch``, whether weights a caller prepared something from changed
  (in place, assigned, or their memory swapped): opcore.nn modules and opcore.graph plans use it.

Kernels live here rather than in one backend so that neither torch backend imports the other;
each adds its device-specific kernels on top (oneDNN on CPU, cuBLASLt epilogues on CUDA).

Versioning: ``API_VERSION`` counts incompatible changes to the names above (a removed or
renamed function or argument, a changed meaning); additions do not bump it. Backends import these
names through ``opcore.extend``, the plugin API, where this number is ``TORCHKIT_API_VERSION``. A
backend that needs a given surface checks it at load time:

>>> import opcore.torchkit
>>> opcore.torchkit.API_VERSION >= 1
True
"""

from __future__ import annotations

from opcore._version import __version__

__all__ = ["API_VERSION", "ATEN_LABEL", "ATEN_PREFIX", "FALLBACK_LABEL", "FALLBACK_PRIORITY", "__version__"]

API_VERSION = 1

# the labels and constants that ``registration`` and ``aten`` share (both re-export them), kept here so
# that neither module imports the other for them
ATEN_PREFIX = "aten."  # the namespace of the ATen ops served by name (aten.<name>[.<overload>])
ATEN_LABEL = "aten"  # the plain torch kernels: one ATen call (or a few) per op
FALLBACK_LABEL = "aten-fallback"  # a built-in op run as torch.ops.aten.<op> by name (as aten.* ops are)
FALLBACK_PRIORITY = -10  # below every own kernel of the backend
