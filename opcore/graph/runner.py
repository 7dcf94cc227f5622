"""Running a plan: every value in a slot of a list, every node one prepared step, no dispatch.

A step reads its arguments from slots, calls what planning decided (a resolved kernel, a compiled
partition, a size computation) and writes its outputs to slots. Slots of values no later step
reads are cleared as the run goes, so intermediates are freed as in eager mode.

>>> program = Program({"x": 0, "y": 1}, [None, None], [Step(abs, (Slot(0),), (1,))], (0,), (ValueRef("y"),))
>>> program.run([-2])
[2]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opcore.graph.ir import ValueRef

__all__ = ["Program", "Slot", "Step", "slot_template"]


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a value lives during a run."""

    index: int


@dataclass(slots=True)
class Step:
    """Call ``fn`` with ``args`` (Slot entries read from the slots, lists of them too, the rest as
    is) and store its result in ``outputs`` (one slot, or one per item of a returned tuple)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    outputs: tuple[int, ...]
    # slots to clear after this step: values no later step reads
    release: tuple[int, ...] = ()

    def compile(self, release: bool = True) -> Callable[[list[Any]], None]:
        """The function running this step on a list of slots (release=False: clear nothing)."""
        fn, outputs = self.fn, self.outputs
        cleared = self.release if release else ()
        plain = [(i, a.index) for i, a in enumerate(self.args) if type(a) is Slot]
        nested = [(i, a) for i, a in enumerate(self.args) if type(a) is tuple and any(type(v) is Slot for v in a)]
        template = list(self.args)
        if not nested and len(plain) == len(template):  # every argument is a slot: the common case
            indices = tuple(s for _, s in plain)

            def fetch(slots: list[Any]) -> list[Any]:
                return [slots[s] for s in indices]

        else:

            def fetch(slots: list[Any]) -> list[Any]:
                args = template.copy()
                for position, s in plain:
                    args[position] = slots[s]
                for position, items in nested:
                    args[position] = tuple(slots[v.index] if type(v) is Slot else v for v in items)
                return args

        if len(outputs) == 1:
            (out,) = outputs

            def run(slots: list[Any]) -> None:
                slots[out] = fn(*fetch(slots))
                for s in cleared:
                    slots[s] = None

        else:

            def run(slots: list[Any]) -> None:
                for s, value in zip(outputs, fn(*fetch(slots))):
                    slots[s] = value
                for s in cleared:
                    slots[s] = None

        return run


def slot_template(value: Any, slot_of: Mapping[str, int]) -> Any:
    """``value`` with every ValueRef replaced by its Slot (lists become tuples)."""
    if isinstance(value, ValueRef):
        return Slot(slot_of[value.name])
    if isinstance(value, (tuple, list)):
        return tuple(slot_template(v, slot_of) for v in value)
    return value


class Program:
    """The steps of a plan over a list of slots. ``base`` holds the constants (the other slots None);
    ``inputs``: the slots of the runtime inputs; ``outputs``: the flat outputs (ValueRef or constants).
    """

    __slots__ = ("_keeping", "base", "inputs", "outputs", "runs", "slot_of", "steps")

    def __init__(
        self,
        slot_of: Mapping[str, int],
        base: list[Any],
        steps: Sequence[Step],
        inputs: Sequence[int],
        outputs: Sequence[Any],
    ) -> None:
        self.slot_of = dict(slot_of)
        self.base = base
        self.steps = list(steps)
        self.inputs = tuple(inputs)
        self.outputs = tuple(slot_template(o, self.slot_of) for o in outputs)
        self._release()
        self.runs = [step.compile() for step in self.steps]
        self._keeping: list[Callable[[list[Any]], None]] = []

    def _release(self) -> None:
        """Give each step the slots whose last reader it is (never inputs, constants or outputs)."""
        keep = set(self.inputs) | {i for i, v in enumerate(self.base) if v is not None}
        keep |= {o.index for o in _slots_in(self.outputs)}
        last: dict[int, int] = {}
        for position, step in enumerate(self.steps):
            for slot in _slots_in(step.args):
                last[slot.index] = position
        released: list[list[int]] = [[] for _ in self.steps]
        for s, at in last.items():  # in the order each slot was first read, as before
            if s not in keep:
                released[at].append(s)
        for step, slots in zip(self.steps, released):
            step.release = tuple(slots)

    def run(self, flat_inputs: Sequence[Any], *, keep: bool = False) -> list[Any]:
        """The flat outputs for the flat inputs. keep=True: return every slot instead (verify)."""
        slots = self.base.copy()
        for s, value in zip(self.inputs, flat_inputs):
            slots[s] = value
        if keep:
            if not self._keeping:
                self._keeping = [step.compile(release=False) for step in self.steps]
            for run in self._keeping:
                run(slots)
            return slots
        for run in self.runs:
            run(slots)
        return [slots[o.index] if type(o) is Slot else o for o in self.outputs]


def _slots_in(value: Any) -> list[Slot]:
    if type(value) is Slot:
        return [value]
    if isinstance(value, tuple):
        return [s for v in value for s in _slots_in(v)]
    return []
