"""The core distribution's compiled parts (issue 15); everything else is in pyproject.toml.

* opcore._fastrun (run()'s guarded torch path, ResolvedOp's base): the Python C API only, no torch
  headers, so it builds in seconds with the system's C compiler.
* opcore._torchguard (the tensor guard of opcore._guards): C++ against the headers of the torch that
  is importable while building. pip's default build runs in an isolated environment without torch,
  where it is left out; ``make`` builds the core a second time with ``--no-build-isolation`` so that
  it is compiled against the torch the project pins (~15-30 s). It is tied to that torch's C++ ABI:
  opcore._guards uses it only where torch.__version__ is the one compiled in.

Both are ``optional=True``: where no compiler is, ``pip install`` warns and installs without them, and
opcore runs its pure-Python paths (and torch's own TensorGuards).
"""

import hashlib
import sys
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent


def digest(path: str) -> str:
    """sha256 of a source (16 hex digits), compiled in: opcore refuses a build made from another
    version of the file (an editable install after a pull, not rebuilt) instead of calling it."""
    return hashlib.sha256((HERE / path).read_bytes()).hexdigest()[:16]


def torch_guard() -> list[Extension]:
    """opcore._torchguard where torch is importable here (and not on Windows: the flags are gcc/clang's)."""
    if sys.platform == "win32":
        return []
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        return []
    libraries = cpp_extension.library_paths()
    return [
        Extension(
            "opcore._torchguard",
            ["opcore/_torchguard.cpp"],
            include_dirs=cpp_extension.include_paths(),
            library_dirs=libraries,
            runtime_library_dirs=libraries,
            libraries=["c10", "torch", "torch_cpu", "torch_python"],
            define_macros=[
                ("TORCHGUARD_TORCH_VERSION", f'"{torch.__version__}"'),
                ("TORCHGUARD_SOURCE", f'"{digest("opcore/_torchguard.cpp")}"'),
                ("_GLIBCXX_USE_CXX11_ABI", str(int(torch._C._GLIBCXX_USE_CXX11_ABI))),
            ],
            extra_compile_args=["-std=c++20", "-O2"],
            language="c++",
            optional=True,
        )
    ]


setup(
    ext_modules=[
        Extension(
            "opcore._fastrun",
            ["opcore/_fastrun.c"],
            define_macros=[("FASTRUN_SOURCE", f'"{digest("opcore/_fastrun.c")}"')],
            optional=True,
        ),
        *torch_guard(),
    ]
)
