"""opcore plans on Ray (``pip install 'opcore[ray]'``): a Ray Data UDF per saved plan or generating
plan, a Ray Serve deployment that streams generated tokens, plan files by path or through the
object store. Only this package imports ray; ``import opcore`` and ``opcore.graph`` never do.

>>> ds.map_batches(PlanPredictor, fn_constructor_args=("model.plan",),
...                compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1)   # doctest: +SKIP
>>> serve.run(generation_app("llama.lm", num_replicas=2))                     # doctest: +SKIP

docs/scale.md: the patterns, what Ray guarantees and what not, fingerprints across nodes.
"""

from __future__ import annotations

try:
    import ray  # noqa: F401
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "opcore.ray needs Ray (ray[data,serve]), which is not installed: pip install 'opcore[ray]'"
    ) from error

from opcore.ray.errors import RowError
from opcore.ray.loading import LoadRecord
from opcore.ray.predictors import GenerationPredictor, PlanPredictor
from opcore.ray.serving import GenerationServer, generation_app
from opcore.ray.sources import PlanInStore, put_plan

__all__ = [
    "GenerationPredictor",
    "GenerationServer",
    "LoadRecord",
    "PlanInStore",
    "PlanPredictor",
    "RowError",
    "generation_app",
    "put_plan",
]
