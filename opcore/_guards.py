"""A C++ tensor guard, used by run() and resolved ops to confirm a cached torch signature in one call.

run()'s pure-Python key reads five attributes of each torch tensor (dtype, shape, strides, device,
layout: ~0.45 us a tensor on the developer machine) and hashes them. A guard checks in C++ a tensor's
dispatch keys (device type, layout and autograd state), dtype, device index, requires_grad, sizes and
strides. Every field of the Python key is among them, so a guard that passes means the Python key
would have matched; one that fails only sends the call to the Python key. Two guards, the first one
available serving:

* ``opcore._torchguard.Guard``, opcore's own, compiled against the installed torch's headers where
  torch was importable when opcore was built (``make`` builds it; setup.py): a few ns a tensor over
  the ~30 ns of a call. It is tied to that torch's C++ ABI, so it serves only where
  ``torch.__version__`` is the version it was built for, and only from the source beside it.
* torch's own ``TensorGuards`` (the guard torch.compile puts on its graphs; a private torch API):
  ~0.12 us for one tensor, ~0.26 for three (an argument tuple, keyword parsing, thread-local state).

Where neither is there or one refuses a tensor, no guard is made and the Python key serves alone.
``OPCORE_PURE_PYTHON=1`` (read when opcore.dispatch is imported) keeps opcore's compiled guard out, as
it keeps opcore._fastrun out.

>>> check = tensor_guard((torch.ones(2),))          # doctest: +SKIP
>>> check(torch.ones(2)), check(torch.ones(3))       # doctest: +SKIP
(True, False)
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opcore._dispatchcaches import PURE_PYTHON_SET

__all__ = ["compiled_module", "guard_in_use", "tensor_guard"]

_TensorGuards: Any = None  # torch._C._dynamo.guards.TensorGuards once looked up; False where torch lacks it
_Guard: Any = None  # opcore._torchguard.Guard once looked up; False where it cannot serve (_GUARD_REASON says why)
_GUARD_REASON = ""


def tensor_guard(tensors: tuple[Any, ...]) -> Callable[..., bool] | None:
    """A check of tensors against the signature of ``tensors`` (sizes and strides exact), or None where
    no guard takes them. It keeps no reference to the tensors.
    """
    guard = _compiled_guard()
    if guard is not False:
        try:
            check: Callable[..., bool] = guard(*tensors)
            if check(*tensors):  # a guard must accept its own example; else it is of no use here
                return check
        except Exception:  # not a strided tensor of concrete sizes: torch's guard, or the Python key
            pass
    return _torch_guard(tensors)


def guard_in_use() -> str:
    """Which guard serves here and, where it is not opcore's own, why (``opcore doctor``); imports torch.

    >>> guard_in_use()                                                   # doctest: +SKIP
    'opcore._torchguard (compiled for torch 2.13.0+cpu)'
    """
    module = compiled_module()
    if module is not None:
        return f"opcore._torchguard (compiled for torch {module.TORCH_VERSION})"
    torch_guard = "torch's TensorGuards" if _torch_guards() is not False else "none: the Python key alone"
    return f"{torch_guard} ({_GUARD_REASON})"


def compiled_module() -> Any:
    """opcore._torchguard where it serves this process (its guard, and the weights watch of
    opcore.torchkit.watch), else None."""
    if _compiled_guard() is False:
        return None
    return importlib.import_module("opcore._torchguard")


def _compiled_guard() -> Any:
    global _Guard, _GUARD_REASON  # looked up once, on the first torch signature cached
    if _Guard is None:
        _Guard, _GUARD_REASON = _load_compiled()
    return _Guard


def _load_compiled() -> tuple[Any, str]:
    """(Guard, "") where opcore._torchguard may serve this process, else (False, why not)."""
    if PURE_PYTHON_SET:
        return False, "OPCORE_PURE_PYTHON=1 keeps opcore's compiled guard out"
    import torch

    try:
        # by name: the extension is a leaf of its own, not the package's __init__ (which imports this module)
        _torchguard = importlib.import_module("opcore._torchguard")
    except ImportError as error:
        return False, f"opcore._torchguard was not built (no torch or no C++ compiler when opcore was built?): {error}"
    if _torchguard.TORCH_VERSION != torch.__version__:
        return False, (
            f"opcore._torchguard was built for torch {_torchguard.TORCH_VERSION}, this is {torch.__version__}: "
            "run `make` or `pip install --no-build-isolation -e .` again to rebuild it"
        )
    source = Path(__file__).with_name("_torchguard.cpp")
    if source.is_file():
        digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
        if _torchguard.SOURCE != digest:
            return False, (
                f"opcore._torchguard was built from another version of opcore/_torchguard.cpp (built from "
                f"{_torchguard.SOURCE}, the file is {digest}): run `make` again to rebuild it"
            )
    return _torchguard.Guard, ""


def _torch_guards() -> Any:
    global _TensorGuards  # noqa: PLW0603 - looked up once, on the first torch signature cached
    if _TensorGuards is None:
        try:
            from torch._C._dynamo.guards import TensorGuards

            _TensorGuards = TensorGuards
        except (ImportError, AttributeError):
            _TensorGuards = False
    return _TensorGuards


def _torch_guard(tensors: tuple[Any, ...]) -> Callable[..., bool] | None:
    """torch's TensorGuards for ``tensors`` (dynamic dims none), or None where torch lacks it or refuses them."""
    guards_type = _torch_guards()
    if guards_type is False:
        return None
    try:
        guards = guards_type(
            *tensors,
            dynamic_dims_sizes=[list(t.size()) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
        )
        check: Callable[..., bool] = guards.check
        if not check(*tensors):
            return None
    except Exception:  # a layout torch's guard does not take (no strides, ...): the Python key alone
        return None
    return check
