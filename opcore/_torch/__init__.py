"""Torch support shared by every torch-based backend (opcore-cpu, opcore-cuda): imported only when a
torch tensor is seen or a torch backend loads, and never by ``import opcore``.

- ``arrays``: numpy <-> torch conversions for the dispatcher (imports torch).
- ``registration``: ``register_torch_kernels(registrar, device_type, dtypes_by_op)`` and
  ``register_aten_fallback(registrar, device_type)``, what each torch plugin calls from its
  ``opcore_register_kernels`` hook; imports no torch, so loading a plugin stays cheap.
- ``kernels``: one device-generic torch kernel per built-in op (imports torch; named to the
  registry as ``"opcore._torch.kernels:<op>"`` and imported when a kernel first runs).
- ``aten``: the ATen fallback, ``aten.<name>[.<overload>]`` ops bound through ``_schema``.

Kernels live here rather than in one backend so that neither torch backend imports the other;
each adds its device-specific kernels on top (oneDNN on CPU, cuBLASLt epilogues on CUDA).
"""
