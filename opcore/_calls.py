"""Fixed-arity call wrappers for the hot paths (a cached signature's entry, a resolved op).

``def call(*args): return first(*args, *tail)`` costs about 100 ns more than a function taking
exactly its arguments (measured here: 165 ns against 68 ns around a no-op kernel), which is most
of a resolved op's budget. So the wrappers are generated per arity, the way dataclasses and
namedtuple generate their methods, and cached.

>>> add3 = fixed_arity(lambda a, b, c: a + b + c, 2, (10,))
>>> add3(1, 2)
13
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_ARITY", "fixed_arity"]

MAX_ARITY = 8  # arguments plus tail values; beyond that the generic *args wrapper serves

Recover = Callable[[tuple[Any, ...], Exception], Any]


def fixed_arity(
    first: Callable[..., Any], n: int, tail: tuple[Any, ...] = (), recover: Recover | None = None
) -> Callable[..., Any]:
    """A function of exactly ``n`` positional arguments calling ``first(*args, *tail)``.

    recover None: exceptions propagate. Else ``recover(args + tail, error)`` answers instead.
    """
    if not tail and recover is None:
        return first
    if n + len(tail) > MAX_ARITY:
        return _generic(first, tail, recover)
    return _maker(n, len(tail), recover is not None)(first, recover, *tail)


def _generic(first: Callable[..., Any], tail: tuple[Any, ...], recover: Recover | None) -> Callable[..., Any]:
    if recover is None:

        def call(*args: Any) -> Any:
            return first(*args, *tail)

        return call

    def guarded(*args: Any) -> Any:
        try:
            return first(*args, *tail)
        except Exception as error:
            return recover(args + tail, error)

    return guarded


@functools.cache
def _maker(n: int, n_tail: int, guarded: bool) -> Callable[..., Callable[..., Any]]:
    params = [f"a{i}" for i in range(n)]
    tails = [f"t{i}" for i in range(n_tail)]
    arguments = ", ".join(params + tails)
    together = "(" + "".join(f"{name}, " for name in params + tails) + ")"
    body = f"        return first({arguments})\n"
    if guarded:
        body = (
            "        try:\n"
            f"            return first({arguments})\n"
            "        except Exception as error:\n"
            f"            return recover({together}, error)\n"
        )
    source = (
        f"def make({', '.join(['first', 'recover', *tails])}):\n"
        f"    def call({', '.join(params)}):\n"
        f"{body}"
        "    return call\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<opcore fixed_arity {n}+{n_tail}>", "exec"), namespace)
    return namespace["make"]
