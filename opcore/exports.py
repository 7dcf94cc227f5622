"""The names a module declares in ``__all__``, read from its source without importing it.

How a backend says which ops a kernel module implements: a module of kernels named as the ops
lists them in ``__all__`` (ruff keeps that list true), and the plugin reads the list at load time
without importing the module (which would import torch, onnxruntime or openvino).

>>> "transpose" in declared_names("opcore.reference.shape")
True
>>> declared_names("opcore.no_such_module")
()
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache

from opcore.errors import PluginError

__all__ = ["declared_names"]


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
        tree = ast.parse(source.read(), spec.origin)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                names = None
            if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
                return tuple(names)
            break
    raise PluginError(
        f"{module} ({spec.origin}) has no literal __all__",
        arg="__all__",
        expected="a literal list of the op names the module implements",
        fix="write __all__ = ['op', ...] at module level",
    )
