"""Whether a resolved oneDNN linear packs its constant weight: measured once per problem on this machine.

Packing (``_reorder_linear_weight``, oneDNN's blocked layout) keeps a second copy of the weight.
Whether it pays depends on the machine and the shape. On an AVX-512 EPYC the packed call won by up
to 3x at small M (docs/backends/cpu.md). On an AVX2-only EPYC (1 thread, ms, ATen ``F.linear`` /
fused dense / fused packed): 128x4864x896 13.3 / 15.1 / 17.3 and 128x896x4864 14.9 / 17.2 / 15.6,
where ATen's sgemm on the weight as given beats both fused calls, while 8x896x4864 1.8 packed
against 2.5 dense. A 0.5B decoder's prefill on the torch route kept 1.9 GB of packed copies it did
not need there.

So ``prepare`` builds each way of running the problem, times it on the example input and keeps the
fastest; a way that copies nothing wins when it is within 5% of a copying one (dense before
packed). The answer is kept per problem (op, rows, weight shapes, bias, dtype, torch threads) for
the process, so a model of 24 identical layers measures once.

``OPCORE_CPU_WEIGHTS``: ``measure`` (default), ``packed`` (always pack: the rule before),
``dense`` (the fused oneDNN call on the weight as given: never a copy, MKL's float32 packing on
Intel CPUs included). Unset, a plan that asks for no weight copies (``weight_copies_allowed()``
False: capture_lm's prefill of a large decoder) gets ``dense``.

>>> policy({"OPCORE_CPU_WEIGHTS": "dense"}), policy({})
('dense', 'measure')
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opcore.extend import ArgumentError, weight_copies_allowed

__all__ = ["MARGIN", "POLICIES", "POLICY_ENV", "Way", "choose", "chosen", "forget", "policy"]

POLICY_ENV = "OPCORE_CPU_WEIGHTS"
POLICIES = ("measure", "packed", "dense")
# a way that copies nothing is kept when it is at most this much slower than the fastest
MARGIN = 1.05
_ROUNDS = 3

Prepared = Callable[[Any], Any]


@dataclass(frozen=True)
class Way:
    """One way of running a resolved problem: ``build()`` returns the prepared call (packing, if any,
    happens there). ``name``: "aten", "dense" or "packed"; ``copies``: whether it keeps a copy of a
    weight."""

    name: str
    copies: bool
    build: Callable[[], Prepared]


_answers: dict[tuple[Any, ...], str] = {}


def policy(environ: Mapping[str, str] | None = None) -> str:
    """``OPCORE_CPU_WEIGHTS``, or where it is unset "dense" while the plan being prepared allows no
    weight copies and "measure" otherwise; anything else is an ArgumentError naming the variable."""
    text = (os.environ if environ is None else environ).get(POLICY_ENV, "").strip().lower()
    if not text:
        return "measure" if weight_copies_allowed() else "dense"
    if text not in POLICIES:
        raise ArgumentError(
            op="resolve",
            arg=POLICY_ENV,
            expected=f"one of {', '.join(POLICIES)}",
            found=repr(text),
            fix=f"unset {POLICY_ENV} (measure per problem) or set it to one of {', '.join(POLICIES)}",
        )
    return text


def chosen(key: tuple[Any, ...]) -> str | None:
    """The way measured for ``key`` in this process, if any."""
    return _answers.get(key)


def forget() -> None:
    """Drops every measured answer (the next prepare of each problem measures again)."""
    _answers.clear()


def _time(call: Prepared, x: Any) -> float:
    start = time.perf_counter()
    call(x)
    return time.perf_counter() - start


def _measure(ways: Sequence[Way], x: Any) -> tuple[str, Prepared]:
    import torch

    kept: list[Way] = []
    calls: list[Prepared] = []
    failure: RuntimeError | None = None
    with torch.no_grad():
        for way in ways:
            try:  # a way this torch build cannot run (a packing it refuses) is left out, not fatal
                call = way.build()
                call(x)  # warm: oneDNN builds its primitive on the first call
            except RuntimeError as error:
                failure = error
                continue
            kept.append(way)
            calls.append(call)
        if not calls:
            raise failure if failure is not None else RuntimeError("no way to run the problem")
        best = [_time(call, x) for call in calls]
        for _ in range(_ROUNDS - 1):  # interleaved, so that a burst of other load hits every way
            best = [min(previous, _time(call, x)) for previous, call in zip(best, calls)]
    fastest = min(best)
    # the first way that copies no weight within the margin of the fastest, else the fastest
    index = next(
        (i for i, seconds in enumerate(best) if not kept[i].copies and seconds <= fastest * MARGIN),
        best.index(fastest),
    )
    return kept[index].name, calls[index]


def choose(key: tuple[Any, ...], ways: Sequence[Way], x: Any) -> Prepared:
    """The prepared call of the way to run problem ``key`` on example ``x``: by the policy, else the
    answer measured for ``key`` before, else measured now. ``ways`` include one named "dense" and
    one named "packed"; among those that copy no weight, the first listed wins a tie. The call
    carries its way's name as ``opcore_weights``."""
    by_name = {way.name: way for way in ways}
    mode = policy()
    name = mode if mode != "measure" else _answers.get(key)
    if name is None:
        name, call = _measure(ways, x)
        _answers[key] = name
    else:
        call = by_name[name].build()
    call.opcore_weights = name  # type: ignore[attr-defined]
    return call
