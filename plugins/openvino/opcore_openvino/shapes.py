"""Static compiles of a dynamic partition, for the shapes it is called with.

A plan captured with dynamic dims compiles its partitions with those dims dynamic, and takes the
sizes computed at run time as 0-d integer inputs. The CPU plugin then runs the model in its
dynamic-shape mode: shapes inferred per call, and fewer of its fused kernels (a small Llama:
~5x the static model's time at the same shape, measured on a loaded machine). A shape (with its
size inputs) met a second time gets a model of its own: the size inputs become constants, every
input takes its static shape, and the plugin compiles that; up to ``OPCORE_OPENVINO_SHAPES`` of
them per partition (default 4; 0 turns this off), the dynamic model runs every other shape. A shape
met once (a one-off length) costs no compile.

>>> shapes = Specializations.of(model)   # doctest: +SKIP
>>> shapes.request(arrays)               # doctest: +SKIP
(<InferRequest>, [the arrays the request takes])
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy
import openvino

from opcore.extend import capacity_from_env
from opcore_openvino.compiled import DEVICE, compile_config, core

__all__ = ["SHAPES_VAR", "Specializations"]

SHAPES_VAR = "OPCORE_OPENVINO_SHAPES"
_SEEN = 256  # shapes counted before the count starts again (a plan called with ever new lengths)


def _is_size(array: numpy.ndarray) -> bool:
    return array.ndim == 0 and array.dtype.kind in "iu"


class Specializations:
    """A dynamic model's static compiles by call key (each input's shape and dtype; a size input's value)."""

    __slots__ = ("_compiled", "_local", "_lock", "_model", "_seen", "limit")

    def __init__(self, model: openvino.Model, limit: int) -> None:
        self._model = model
        self.limit = limit
        self._compiled: dict[tuple[Any, ...], Any] = {}  # key -> CompiledModel, or None: it did not compile
        self._seen: dict[tuple[Any, ...], int] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    @classmethod
    def of(cls, model: openvino.Model) -> Specializations | None:
        """None for a model of static shapes, or with specializing turned off."""
        text = os.environ.get(SHAPES_VAR, "").strip()
        limit = 0 if text == "0" else capacity_from_env(SHAPES_VAR, 4, os.environ)
        if limit <= 0 or all(p.get_partial_shape().is_static and len(p.get_partial_shape()) for p in model.inputs):
            return None
        return cls(model, limit)

    def request(self, inputs: Sequence[Any]) -> tuple[openvino.InferRequest, list[Any]] | None:
        """This thread's request of the static model for these inputs and the inputs it takes (size
        inputs are its constants), or None: the dynamic model runs them."""
        arrays = [numpy.asarray(x) for x in inputs]
        key = tuple((a.dtype.str, a.item()) if _is_size(a) else (a.dtype.str, a.shape) for a in arrays)
        compiled = self._compiled.get(key)
        if compiled is None:
            if key in self._compiled or len(self._compiled) >= self.limit:
                return None
            if len(self._seen) >= _SEEN:
                self._seen.clear()
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen < 2:
                return None
            with self._lock:
                if key not in self._compiled:
                    self._compiled[key] = self._compile(arrays)
            compiled = self._compiled[key]
            if compiled is None:
                return None
        requests = self._local.__dict__.setdefault("requests", {})
        request = requests.get(key)
        if request is None:
            request = requests[key] = compiled.create_infer_request()
        return request, [a for a in arrays if not _is_size(a)]

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
