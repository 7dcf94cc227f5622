"""opcore-cpu: opcore's PyTorch CPU backend (ATen kernels, oneDNN fused kernels, the ATen fallback).

Installed with ``pip install "opcore[cpu]"``; opcore finds it through the ``opcore.backends``
entry point ``cpu``. Nothing here needs importing by hand:

>>> import numpy, opcore
>>> opcore.explain("linear_relu", numpy.ones((2, 8), "float32"), numpy.ones((4, 8), "float32")).backend
'cpu'
"""

__version__ = "0.1.0"
