"""The built-in op contracts, one module per family (``opcore.families``), and what is derived
from them.

>>> from opcore.opset import BUILTIN_CONTRACTS
>>> sorted(c.name for c in BUILTIN_CONTRACTS)[:3]
['add', 'bmm', 'cat']
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from opcore.contracts import OpContract
from opcore.errors import PluginError
from opcore.families import FAMILIES
from opcore.types import DType

__all__ = ["BUILTIN_CONTRACTS", "BUILTIN_DTYPES", "family_contracts"]


def family_contracts(family: str) -> tuple[OpContract, ...]:
    """``opcore.opset.<family>.CONTRACTS``, each checked to name that family."""
    contracts: tuple[OpContract, ...] = importlib.import_module(f"opcore.opset.{family}").CONTRACTS
    for contract in contracts:
        if contract.family != family:
            raise PluginError(
                f"the contract of {contract.name!r} in opcore.opset.{family} says family={contract.family!r}",
                op=contract.name,
                arg="family",
                expected=repr(family),
                found=repr(contract.family),
                fix=f"define it in opcore.opset.{family} with its define (partial(define_op, family={family!r}))",
            )
    return contracts


BUILTIN_CONTRACTS: tuple[OpContract, ...] = tuple(c for family in FAMILIES for c in family_contracts(family))

# For each built-in op, the dtypes its contract accepts for the argument whose dtype picks the
# kernel (the first tensor, or the contract's dtype_arg): what a complete backend registers.
BUILTIN_DTYPES: Mapping[str, frozenset[DType]] = {c.name: c.dtypes for c in BUILTIN_CONTRACTS}
