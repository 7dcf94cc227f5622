"""The errors of opcore.graph, all OpcoreErrors.

>>> str(CaptureError("torch.export refused the model: data-dependent control flow", op="opcore.graph.capture"))
'opcore.graph.capture(): torch.export refused the model: data-dependent control flow.'
"""

from __future__ import annotations

from opcore.errors import NoKernelError, OpcoreError

__all__ = ["CaptureError", "PlanFileError", "UncoveredError", "WeightsError"]


class CaptureError(OpcoreError):
    """The model could not be captured (torch.export refused it, or it holds something no plan runs)."""


class UncoveredError(NoKernelError):
    """Strict planning (``fallback=False`` or ``opcore.strict()``) found nodes the requested backends
    do not cover; the message lists every one and why."""


class PlanFileError(OpcoreError):
    """A saved plan that cannot be loaded: a wrong schema version, a missing file, or a reference to
    something that is not a registered kernel, op or partition compiler (a tampered file)."""


class WeightsError(OpcoreError):
    """A weight changed after capture in a way the plan cannot follow by preparing again (another
    shape or dtype, or the parameter removed): the plan was planned for the weights it was captured
    with; the message names the parameter."""
