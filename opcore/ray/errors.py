"""The errors of opcore.ray, all OpcoreErrors (they pickle with their fields: Ray sends them back
to the driver as the cause of a failed task).

>>> str(RowError(op="PlanPredictor", arg="x", expected="shape (16,)", found="(15,) in row id 7"))
"PlanPredictor(): argument 'x' expected shape (16,), found (15,) in row id 7."
"""

from __future__ import annotations

from opcore.errors import OpcoreError

__all__ = ["RowError"]


class RowError(OpcoreError, ValueError):
    """A row of a batch the plan cannot take (another shape or dtype than captured, an id out of
    range, a failing call): the message names the row's id and its column. ``row_id``: that id."""

    row_id: object = None
