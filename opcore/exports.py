"""The names a module declares in ``__all__``, read from its source without importing it.

How a backend says which ops a kernel module implements: a module of kernels named as the ops
lists them in ``__all__`` (ruff keeps that list true), and the plugin reads the list at load time
without importing the module (which would import torch, onnxruntime or openvino). Only the
``__all__`` statement is parsed, not the whole module: plugin loading stays cheap.

>>> "transpose" in declared_names("opcore.reference.shape")
True
>>> declared_names("opcore.no_such_module")
()
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache

from opcore.errors import PluginError

__all__ = ["declared_names"]

_ALL = re.compile(r"^__all__\s*(?::[^=\n]*)?=\s*([\[(])", re.MULTILINE)
_CLOSING = {"[": "]", "(": ")"}


@cache
def declared_names(module: str) -> tuple[str, ...]:
    """``module.__all__`` (a literal list or tuple of strings), or () when the module does not exist."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent package is missing
        return ()
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return ()
    with open(spec.origin, encoding="utf-8") as source:
        text = source.read()
    match = _ALL.search(text)
    if match is not None:
        end = text.find(_CLOSING[match.group(1)], match.end())
        try:
            names = ast.literal_eval(text[match.start(1) : end + 1]) if end != -1 else None
        except (ValueError, SyntaxError):
            names = None
        if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
            return tuple(names)
    raise PluginError(
        f"{module} ({spec.origin}) has no literal __all__",
        arg="__all__",
        expected="a literal list of the op names the module implements, at module level",
        fix="write __all__ = ['op', ...] at module level",
    )
