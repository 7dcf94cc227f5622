"""opcore-example-vendor: an example third-party opcore backend (see README.md).

Nothing here needs importing by hand: opcore finds the backend through its entry point.

>>> import numpy, opcore
>>> opcore.run("example.swiglu", numpy.ones(3, "float32"), numpy.zeros(3, "float32")).tolist()
[0.0, 0.0, 0.0]
"""

__version__ = "0.1.0"
