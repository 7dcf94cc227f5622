"""torch's own C++ tensor guard, used by run() to confirm a cached torch signature in one call.

run()'s pure-Python key reads five attributes of each torch tensor (dtype, shape, strides, device,
layout: ~0.45 us a tensor on the developer machine) and hashes them. torch's TensorGuards (the
guard torch.compile puts on its graphs) checks a tensor's dispatch keys (device type, layout and
autograd state), dtype, device index, requires_grad, sizes and strides in C++: ~0.13 us a tensor.
Every field of the Python key is among them, so a guard that passes means the Python key would
have matched; one that fails only sends the call to the Python key. It is a private torch API:
where it is missing or refuses a tensor, no guard is made and the Python key serves alone.

>>> check = tensor_guard((torch.ones(2),))          # doctest: +SKIP
>>> check(torch.ones(2)), check(torch.ones(3))       # doctest: +SKIP
(True, False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["tensor_guard"]

_TensorGuards: Any = None  # torch._C._dynamo.guards.TensorGuards once looked up; False where torch lacks it


def tensor_guard(tensors: tuple[Any, ...]) -> Callable[..., bool] | None:
    """A check of tensors against the signature of ``tensors`` (dynamic dims none: sizes and
    strides exact), or None where torch offers no such guard. It keeps no reference to the tensors.
    """
    global _TensorGuards  # noqa: PLW0603 - looked up once, on the first torch signature cached
    if _TensorGuards is None:
        try:
            from torch._C._dynamo.guards import TensorGuards

            _TensorGuards = TensorGuards
        except (ImportError, AttributeError):
            _TensorGuards = False
    if _TensorGuards is False:
        return None
    try:
        guards = _TensorGuards(
            *tensors,
            dynamic_dims_sizes=[list(t.size()) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
        )
        check: Callable[..., bool] = guards.check
        if not check(*tensors):  # a guard must accept its own example; else it is of no use here
            return None
    except Exception:  # a layout torch's guard does not take (no strides, ...): the Python key alone
        return None
    return check
