"""Static compiles of a dynamic partition, for the shapes it is called with, kept where they pay.

A plan captured with dynamic dims compiles its partitions with those dims dynamic, and takes the
sizes computed at run time as 0-d integer inputs. The CPU plugin then runs the model in its
dynamic-shape mode: shapes inferred per call, and fewer of its fused kernels (a small Llama:
~5x the static model's time at the same shape, measured on a loaded machine). A shape (with its
size inputs) met a third time (``SIGHTINGS``) gets a model of its own: the size inputs become
constants, every input takes its static shape, and the plugin compiles that; up to
``OPCORE_OPENVINO_SHAPES`` of them per partition (default 4; 0 turns this off), the dynamic model
runs every other shape. A shape met once or twice (a one-off length) costs no compile.

A compile stalls the call that asks for it (a 135M decoder's prefill, 31 layer partitions: 3.2 to
7.4 s on top of a 0.26 s prompt), and it does not always pay: those layer partitions ran their
dynamic models as fast as their static ones (260 against 251-262 ms a 100-token prompt). So each
call's infer is timed (``timed``), and after ``JUDGED`` runs of a shape's static model it stays only
where it ran at least ``1 + MARGIN`` times as fast as that shape's second dynamic run (the first of
a new shape is slower; a 2-layer Llama's dynamic partition took ~3.7x its static model's time,
BERT's ~1.6x); where it did not, the dynamic model runs the shape and the partition compiles no
other shape: one compile per partition at most where static shapes gain nothing.

A plan whose shapes never settle asks for no such compiles (``opcore.extend.shape_compiles_allowed``
False while its partitions compile or load): ``capture_lm``'s prefill, whose prompt lengths vary.
Its partitions run their dynamic models, which its capture times against the torch route.

>>> shapes = Specializations.of(model)   # doctest: +SKIP
>>> shapes.request(arrays)               # doctest: +SKIP
(key, <InferRequest>, [the arrays the request takes])
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy
import openvino

from opcore.extend import capacity_from_env, shape_compiles_allowed
from opcore_openvino.compiled import DEVICE, compile_config, core

__all__ = ["SHAPES_VAR", "Specializations"]

SHAPES_VAR = "OPCORE_OPENVINO_SHAPES"
_SEEN = 256  # shapes counted before the count starts again (a plan called with ever new lengths)
SIGHTINGS = 3  # calls of a shape before its static model is compiled: the second is its steady dynamic time
JUDGED = 2  # runs of a static model before it is judged (its first may pay a warm-up)
# a static model stays where it runs at least 1 + MARGIN times as fast as the dynamic one: a gain
# that pays its compile back within ~100 calls of the shape (a layer partition here: 100-250 ms to
# compile, ~10 ms a call), and clear of the noise of timing a few calls (+-10 % on a shared 2-core machine)
MARGIN = 0.2


def _is_size(array: numpy.ndarray) -> bool:
    return array.ndim == 0 and array.dtype.kind in "iu"


class Specializations:
    """A dynamic model's static compiles by call key (each input's shape and dtype; a size input's value)."""

    __slots__ = ("_compiled", "_local", "_lock", "_model", "_seen", "_times", "limit", "verdict")

    def __init__(self, model: openvino.Model, limit: int) -> None:
        self._model = model
        self.limit = limit
        # key -> CompiledModel, or None: it did not compile, or did not beat the dynamic model
        self._compiled: dict[tuple[Any, ...], Any] = {}
        self._seen: dict[tuple[Any, ...], int] = {}
        # key -> (dynamic infer seconds, static infer seconds): the first SIGHTINGS - 1 and JUDGED
        self._times: dict[tuple[Any, ...], tuple[list[float], list[float]]] = {}
        self.verdict = ""  # why this partition compiles no more shapes, once judged so
        self._lock = threading.Lock()
        self._local = threading.local()

    @classmethod
    def of(cls, model: openvino.Model) -> Specializations | None:
        """None for a model of static shapes, or with specializing turned off (the variable, or a
        plan that asks for no shape compiles: opcore.extend.shape_compiles_allowed)."""
        if not shape_compiles_allowed():
            return None
        text = os.environ.get(SHAPES_VAR, "").strip()
        limit = 0 if text == "0" else capacity_from_env(SHAPES_VAR, 4, os.environ)
        if limit <= 0 or all(p.get_partial_shape().is_static and len(p.get_partial_shape()) for p in model.inputs):
            return None
        return cls(model, limit)

    def request(self, inputs: Sequence[Any]) -> tuple[Any, openvino.InferRequest | None, list[Any]]:
        """(the call's key, this thread's request of the static model for these inputs or None: the
        dynamic model runs them, the inputs that request takes: size inputs are its constants)."""
        arrays = [numpy.asarray(x) for x in inputs]
        key = tuple((a.dtype.str, a.item()) if _is_size(a) else (a.dtype.str, a.shape) for a in arrays)
        compiled = self._compiled.get(key)
        if compiled is None:
            if key in self._compiled or len(self._compiled) >= self.limit:
                return key, None, arrays
            if len(self._seen) >= _SEEN:
                self._seen.clear()
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen < SIGHTINGS:
                return key, None, arrays
            with self._lock:
                if key not in self._compiled:
                    self._compiled[key] = self._compile(arrays)
            compiled = self._compiled[key]
            if compiled is None:
                return key, None, arrays
        requests = self._local.__dict__.setdefault("requests", {})
        request = requests.get(key)
        if request is None:
            request = requests[key] = compiled.create_infer_request()
        return key, request, [a for a in arrays if not _is_size(a)]

    def timed(self, key: Any, seconds: float, static: bool) -> None:
        """Note one infer of ``key``'s shape on its static (or the dynamic) model; at the static
        model's ``JUDGED``-th run, judge it (see the module's text)."""
        if len(self._times) >= _SEEN and key not in self._times:
            self._times.clear()
        dynamic, statics = self._times.setdefault(key, ([], []))
        runs = statics if static else dynamic
        if len(runs) >= (JUDGED if static else SIGHTINGS - 1):  # what the judgement reads, no more
            return
        runs.append(seconds)
        if not static or len(statics) != JUDGED or not dynamic:
            return
        steady = min(dynamic[1:] or dynamic)
        if min(statics) * (1 + MARGIN) < steady:
            return
        with self._lock:
            self._compiled[key] = None
            self.limit = sum(1 for c in self._compiled.values() if c is not None)
            self.verdict = (
                f"its static model of {key} ran {min(statics) * 1e3:.2f} ms against the dynamic "
                f"{steady * 1e3:.2f} ms: the dynamic model runs every shape from then on"
            )
        self._local.__dict__.get("requests", {}).pop(key, None)

    def _compile(self, arrays: list[numpy.ndarray]) -> Any:
        """The model with its size inputs as constants and every other input of its static shape,
        compiled; None where the plugin refuses (the dynamic model keeps running the shape)."""
        import openvino.opset13 as ops

        try:
            model = self._model.clone()
            kept = []
            for parameter, array in zip(model.get_parameters(), arrays):
                if _is_size(array):
                    constant = ops.constant(array.astype(parameter.get_element_type().to_dtype()))
                    for target in list(parameter.output(0).get_target_inputs()):
                        target.replace_source_output(constant.output(0))
                else:
                    parameter.set_partial_shape(openvino.PartialShape(list(array.shape)))
                    kept.append(parameter)
            static = openvino.Model(model.get_results(), kept, model.get_friendly_name())
            return core().compile_model(static, DEVICE, compile_config())
        except Exception:  # the dynamic model is always there to run the shape
            return None
