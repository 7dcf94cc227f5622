"""The core distribution's one compiled part, opcore._fastrun (run()'s guarded torch path; issue 15).

Everything else is in pyproject.toml. The extension uses the Python C API only (no torch headers, no
libtorch), so it builds in seconds with the system's C compiler; ``optional=True``: where none is,
``pip install`` warns and installs without it, and opcore.dispatch runs the pure-Python path.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

# the source's digest is compiled in (opcore._fastrun.SOURCE): opcore.dispatch refuses a build made
# from another version of the file (an editable install after a pull, not rebuilt) instead of calling it
SOURCE = Path(__file__).parent / "opcore" / "_fastrun.c"
DIGEST = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]

setup(
    ext_modules=[
        Extension(
            "opcore._fastrun",
            ["opcore/_fastrun.c"],
            define_macros=[("FASTRUN_SOURCE", f'"{DIGEST}"')],
            optional=True,
        )
    ]
)
