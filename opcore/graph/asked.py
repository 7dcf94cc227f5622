"""What a capture was asked, checked before any work: ``backends=``, ``measure=`` and a model whose
weights are loaded.

A lone backend name is one backend (its letters were taken as names, each "not installed"); a model
on the meta device (built under ``torch.device("meta")``, or ``from_pretrained`` interrupted) has no
weights to plan with, which export then traced into nodes no backend covers.

>>> asked_backends("openvino", "opcore.graph.capture"), asked_backends(["openvino", "cpu"], "x")
(('openvino',), ('openvino', 'cpu'))
>>> asked_backends(None, "x") is None
True
"""

from __future__ import annotations

from typing import Any

from opcore.errors import ArgumentError

__all__ = ["asked_backends", "asked_measure", "loaded"]


def asked_backends(value: Any, op: str) -> tuple[str, ...] | None:
    """``backends=`` as a tuple of names (None: every loaded backend, by rank); an ArgumentError for
    anything but a name or a non-empty list of names."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and value and all(isinstance(name, str) for name in value):
        return tuple(value)
    raise ArgumentError(
        op=op,
        arg="backends",
        expected="None, a backend name or a non-empty list of them, in order of preference",
        found=repr(value)[:120],
        fix='backends=("openvino", "cpu") (opcore doctor lists the backends)',
    )


def asked_measure(value: Any, op: str) -> Any:
    """``measure=`` as given where it is True, False, None or a timer (a callable); an ArgumentError
    for anything else."""
    if value is None or isinstance(value, bool) or callable(value):
        return value
    raise ArgumentError(
        op=op,
        arg="measure",
        expected="True, False, None or a timer (a callable, as opcore.graph.measuring.interleaved)",
        found=repr(value)[:120],
    )


def loaded(model: Any, op: str) -> None:
    """An ArgumentError where a parameter or buffer of ``model`` is on the meta device (no weights)."""
    named = getattr(model, "named_parameters", None)
    if named is None:
        return
    tensors = [*model.named_parameters(), *model.named_buffers()]
    empty = [name for name, tensor in tensors if getattr(tensor, "is_meta", False)]
    if empty:
        raise ArgumentError(
            op=op,
            arg="model",
            expected="a model whose weights are loaded",
            found=f"{len(empty)} of its {len(tensors)} parameters and buffers on the meta device (no data), "
            f"{empty[0]!r} first",
            fix="load the weights first (from_pretrained without device_map='meta', or model.to_empty(device="
            "'cpu') then load_state_dict)",
        )
