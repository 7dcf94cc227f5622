"""The reference backend: numpy kernels for every built-in op, float64 inside.

It has the lowest priority, makes ``pip install opcore`` work on its own, and is the
conformance suite's reference. It is registered through the ``opcore.backends`` entry
point ``reference = "opcore.reference.plugin"`` like any other plugin.

>>> from opcore.reference import plugin
>>> plugin.opcore_backend().name
'reference'
"""
