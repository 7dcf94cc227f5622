"""How a plan is asked for (``PlanOptions``) and the torch route of the same options: the leaf that the
plan record, its builder (opcore.graph.assembly) and the plan's files share.

>>> torch_route(PlanOptions(device="cpu")).backends
('cpu',)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PlanOptions", "torch_route"]


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """How a plan was asked for. backends None: every loaded backend by rank; fallback False: every
    node must run on one of ``backends`` (or, without backends, on its op's first choice).
    route "torch": measuring at capture found the torch route faster than the planned one (or
    ``capture(route="torch")`` asked for it), so the plan runs the torch route: the exported
    program as one step where the plan has it (opcore.graph.exported), else every node on the
    torch backend (``torch_route``); "planned": as decided. weight_copies False: the kernels keep
    no copies of the constants they prepare (opcore.weight_copies; a large decoder's prefill).
    shape_compiles False: the graph runtimes compile no static model of a dynamic partition for the
    shapes it meets (opcore.shape_compiles; capture_lm's prefill, whose prompt lengths vary)."""

    backends: tuple[str, ...] | None = None
    fallback: bool = True
    device: str = "cpu"
    partitions: bool = True
    rewrites: bool = True
    cuda_graph: bool = False
    route: str = "planned"
    weight_copies: bool = True
    shape_compiles: bool = True


def torch_route(options: PlanOptions) -> PlanOptions:
    """The options of the same graph run as eager PyTorch runs it: every node on the torch backend of
    the plan's device (the ranked rest only for what it declines), no partitions. verify compares
    against it; the capture-time guard times the plan against it."""
    torch_backend = "cuda" if options.device.startswith("cuda") else "cpu"
    return PlanOptions(
        backends=(torch_backend,),
        fallback=True,
        device=options.device,
        partitions=False,
        rewrites=options.rewrites,
        weight_copies=options.weight_copies,
        shape_compiles=options.shape_compiles,
    )
