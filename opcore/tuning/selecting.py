"""Tuning's selection hook: select(), measuring first under ``OPCORE_TUNE=1`` a signature the tuning
file has no times for. The dispatcher's slow path (opcore._remember) and resolve (opcore.resolved)
select with it; opcore.call_plans, which tuning's measurement builds on, knows nothing of tuning.

>>> selection = select_tuned(rt, contract, bound, None, None)   # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opcore.errors import NoKernelError
from opcore.kernel_walk import select

if TYPE_CHECKING:
    from opcore.contracts import OpContract
    from opcore.kernel_walk import Selection
    from opcore.runtime import Runtime
    from opcore.settings import ContextPolicy

__all__ = ["select_tuned"]


def select_tuned(
    rt: Runtime, contract: OpContract, bound: tuple[Any, ...], policy: ContextPolicy | None, pin: str | None
) -> Selection:
    """select(), but with OPCORE_TUNE=1 a signature the tuning file has no measurement for is measured
    first (once: afterwards the file has it). Only on a cache miss, never on the cached path.
    """
    selection = select(rt, contract, bound, policy, pin)
    if rt.settings.tune and selection.measured is None:
        from opcore.tuning.measure import tune_selection  # the measurement only when tuning

        try:
            tune_selection(rt, selection, bound)
        except NoKernelError:  # nothing to measure: the selection says why
            return selection
        selection = select(rt, contract, bound, policy, pin)
    return selection
