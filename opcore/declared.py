"""The ops a kernel module declares it implements: its ``OPS`` tuple, read from its source
without importing it.

How a backend says which ops a kernel module serves: the module lists them in a literal
``OPS = ("op", ...)`` at module level, each a module-level kernel named as its op, and the plugin
reads the tuple at load time without importing the module (which would import torch, onnxruntime
or openvino). ``__all__`` is only the module's Python exports: it claims no kernel. Only the
``OPS`` statement and the module-level names are read (a scan of the text, not a parse of the
module): plugin loading stays cheap. An ``OPS`` entry the module does not define is an error here,
at registration, not when the kernel first runs.

>>> "transpose" in declared_ops("opcore.reference.shape")
True
>>> declared_ops("opcore.no_such_module")
()
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

from opcore.errors import PluginError

if TYPE_CHECKING:
    from opcore.contracts import OpContract

__all__ = ["declared_ops", "family_kernels"]

_OPS = re.compile(r"^OPS\s*(?::[^=\n]*)?=\s*\(", re.MULTILINE)
# the names a module binds at module level: def / class, (annotated) assignment, from-import
_DEFINED = re.compile(
    r"^(?:async[ \t]+def|def|class)[ \t]+(\w+)|^(\w+)[ \t]*(?::[^=\n]*)?=(?!=)|^(\w+(?:[ \t]*,[ \t]*\w+)+)[ \t]*=(?!=)",
    re.MULTILINE,
)
_IMPORTED = re.compile(r"^from[ \t]+[\w.]+[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.MULTILINE)


@cache
def declared_ops(module: str) -> tuple[str, ...]:
    """``module.OPS`` (a literal tuple of op names, each defined in the module), or () when the module
    does not exist. A module already imported (or made in memory) is read as it is.
    """
    found = sys.modules.get(module)
    if found is not None and getattr(found, "__spec__", None) is None:  # made in memory: no source
        return _checked(module, "<memory>", getattr(found, "OPS", None), set(vars(found)))
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent package is missing
        return ()
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return ()
    with open(spec.origin, encoding="utf-8") as source:
        text = source.read()
    match = _OPS.search(text)
    names = None
    if match is not None:
        end = text.find(")", match.end())
        try:
            names = ast.literal_eval(text[match.end() - 1 : end + 1]) if end != -1 else None
        except (ValueError, SyntaxError):
            names = None
    return _checked(module, spec.origin, names, _module_level_names(text))


def family_kernels(package: str, contracts: Iterable[OpContract]) -> dict[str, str]:
    """op -> its family for each of ``contracts`` that the family module ``package.<family>``
    declares in ``OPS``; an ``OPS`` entry that is no op of that family is an error.

    >>> from opcore.opset import BUILTIN_CONTRACTS
    >>> family_kernels("opcore.reference", BUILTIN_CONTRACTS)["relu"]
    'elementwise'
    """
    listed = list(contracts)
    families: dict[str, set[str]] = {}
    for contract in listed:
        families.setdefault(contract.family, set()).add(contract.name)
    for family, ops in families.items():
        module = f"{package}.{family}"
        for op in declared_ops(module):
            if op not in ops:
                raise PluginError(
                    f"{module}.OPS names {op!r}, which is no op of the {family!r} family",
                    op=op,
                    arg="OPS",
                    expected=f"ops of the {family!r} family: {', '.join(sorted(ops))}",
                    found=repr(op),
                    fix=f"move the kernel to the module of its family under {package}, or fix the name",
                )
    return {c.name: c.family for c in listed if c.name in declared_ops(f"{package}.{c.family}")}


def _checked(module: str, origin: str, names: object, defined: set[str]) -> tuple[str, ...]:
    if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
        raise PluginError(
            f"{module} ({origin}) has no literal OPS tuple",
            arg="OPS",
            expected="a literal tuple of the op names the module implements, at module level",
            found=repr(names) if names is not None else "none",
            fix='write OPS = ("op", ...) at module level (each a kernel named as its op)',
        )
    missing = [name for name in names if name not in defined]
    if missing:
        raise PluginError(
            f"{module} ({origin}) lists {', '.join(map(repr, missing))} in OPS but defines no such kernel",
            op=missing[0],
            arg="OPS",
            expected="each OPS entry a module-level kernel named as its op (def, assignment or import)",
            found=f"no module-level {missing[0]!r}",
            fix=f"define {missing[0]}(...) at module level in {module}, or remove it from OPS",
        )
    return names


def _module_level_names(text: str) -> set[str]:
    names = {name.strip() for found in _DEFINED.findall(text) for name in "".join(found).split(",")}
    for clause in _IMPORTED.findall(text):
        for part in re.sub(r"#[^\n]*", "", clause).strip("()").replace("\n", " ").split(","):
            words = part.split()
            if words:
                names.add(words[-1])  # "x" or "x as y": the bound name is the last word
    return names
