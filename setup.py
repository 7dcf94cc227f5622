"""The core distribution's one compiled part, opcore._fastrun (run()'s guarded torch path; issue 15).

Everything else is in pyproject.toml. The extension uses the Python C API only (no torch headers, no
libtorch), so it builds in seconds with the system's C compiler; ``optional=True``: where none is,
``pip install`` warns and installs without it, and opcore.dispatch runs the pure-Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("opcore._fastrun", ["opcore/_fastrun.c"], optional=True)])
