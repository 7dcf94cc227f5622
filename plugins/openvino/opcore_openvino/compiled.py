"""Compiled models for one-op graphs, and ``OvOp``: how an op becomes an OpenVINO model. The
kernels that find (or compile) the model for a call's signature and run it are the shared ones of
``opcore.onemodel``.

A kernel's signature is (op, and per argument: dtype and rank for arrays, the Python type for a
scalar operand, the value for an attribute). Dimensions are dynamic, so every batch size of the
same ranks reuses one compiled model. Infer requests are not thread-safe: each thread gets its
own request per compiled model. Inputs are wrapped as ``openvino.Tensor(..., shared_memory=True)``
(no copy); the output is copied out of the request, which the next call overwrites.

>>> relu = ov_kernel("relu", lambda g, x: ops.relu(x))
>>> relu(numpy.array([-1.0, 2.0], numpy.float32))
array([0., 2.], dtype=float32)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy
import openvino

from opcore.extend import (
    ATTRIBUTE,
    OPERAND,
    TENSOR,
    TENSORS,
    ArgumentError,
    OneModelOp,
    Unsupported,
    capacity_from_env,
    first_line,
    runtime_threads,
)
from opcore_openvino.cache import MODELS
from opcore_openvino.graph import Graph, tensor_of

__all__ = [
    "ATTRIBUTE",
    "CONFIG",
    "DEVICE",
    "DYNAMIC_QUANTIZATION_VAR",
    "compile_config",
    "dynamic_quantization",
    "OPERAND",
    "TENSOR",
    "TENSORS",
    "Compiled",
    "OvOp",
    "core",
    "feed",
    "ov_kernel",
]

# Memory with changing shapes. Dimensions are dynamic, and for every new input shape the CPU plugin
# keeps compiled primitives in two caches: its per-model runtime cache (CPU_RUNTIME_CACHE_CAPACITY,
# 5000 entries by default) and the oneDNN primitive cache inside it (1024 entries, ~330 KB each for
# a small GEMM). Measured with x (B,16) . w (8,16), B = 1..1000: RSS 98 -> 743 MB with both
# defaults, 98 -> 109 MB with 16 and 64. opcore bounds both (the user's own setting wins); the
# primitive cache is read once, when the CPU plugin first compiles: core() sets it before that.
# (torch reads the same variable if its own oneDNN had not started yet: docs/backends/openvino.md)
RUNTIME_CACHE_VAR = "OPCORE_OPENVINO_RUNTIME_CACHE"
RUNTIME_CACHE_CAPACITY = capacity_from_env(RUNTIME_CACHE_VAR, 16)
ONEDNN_CACHE_CAPACITY = "64"

# Weight-only means x stays float: on CPUs with VNNI or AMX the CPU plugin otherwise rounds x to 8 bits
# in groups of 32 before a matmul whose weights are compressed (asymmetric u8/u4; relative errors ~5e-3).
# OPCORE_OPENVINO_DYNAMIC_QUANTIZATION=<group size> lets it (faster there: docs/quantized.md).
DYNAMIC_QUANTIZATION_VAR = "OPCORE_OPENVINO_DYNAMIC_QUANTIZATION"


def dynamic_quantization(environ: Mapping[str, str] | None = None) -> int:
    """The group size the CPU plugin may round x in before a compressed-weight matmul: 0 (never, the
    default) or the positive int in ``OPCORE_OPENVINO_DYNAMIC_QUANTIZATION``."""
    text = (os.environ if environ is None else environ).get(DYNAMIC_QUANTIZATION_VAR, "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise ArgumentError(
            arg=DYNAMIC_QUANTIZATION_VAR,
            expected="a group size for OpenVINO's DYNAMIC_QUANTIZATION_GROUP_SIZE (e.g. 32), or 0 for none",
            found=repr(text),
            fix=f"set {DYNAMIC_QUANTIZATION_VAR}=32 to let OpenVINO round x, or unset it (x stays float)",
        )
    return int(text)


# The CPU plugin's default precision hint is bf16 on CPUs with AMX/AVX512-BF16: float32 models
# would silently lose precision (1e-2 at 32x4096x4096). float16 models run in float32 too.
CONFIG = {
    "INFERENCE_PRECISION_HINT": "f32",
    "CPU_RUNTIME_CACHE_CAPACITY": str(RUNTIME_CACHE_CAPACITY),
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": str(dynamic_quantization()),
}


def compile_config() -> dict[str, str]:
    """CONFIG, with ``INFERENCE_NUM_THREADS`` where ``OPCORE_RUNTIME_THREADS`` sets a thread budget."""
    threads = runtime_threads(os.environ)
    return CONFIG if threads is None else {**CONFIG, "INFERENCE_NUM_THREADS": str(threads)}


DEVICE = "CPU"

_Tensor = openvino.Tensor
_core: openvino.Core | None = None
_core_lock = threading.Lock()


def core() -> openvino.Core:
    """The process's openvino.Core (created once; compile_model is thread-safe)."""
    global _core  # noqa: PLW0603 - one Core per process
    if _core is None:
        with _core_lock:
            if _core is None:
                os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_CACHE_CAPACITY)
                _core = openvino.Core()
    return _core


def feed(request: openvino.InferRequest, arrays: Sequence[Any], fed: list[Any] | None = None) -> list[numpy.ndarray]:
    """Set the request's inputs to ``arrays`` (in order) without copying where the memory allows;
    returns the copies made (a shared Tensor does not keep its array alive: hold them for the call).

    ``fed``: what this request was last given (kept by the caller per request, updated here): an
    input shared from the same memory with the same layout as last time is already set and is not set
    again (a decode step's KV cache, the same buffers every token: OpenVINO's ``set_input_tensor``
    costs ~17 us an input on a 2-core Xeon, 1 ms a step for a 30-layer cache). The memory is the
    caller's at this call, so the request reads what is there now; a copy is set every call.
    """
    held = []
    for index, given in enumerate(arrays):
        key = None if fed is None else _memory(given)
        if fed is not None and key is not None and fed[index : index + 1] == [key]:
            continue
        try:
            tensor = tensor_of(given)
        except (RuntimeError, ValueError):  # shared memory must be C-contiguous and writeable
            copy = numpy.array(given, order="C")
            held.append(copy)
            tensor = tensor_of(copy)
            key = None
        request.set_input_tensor(index, tensor)
        if fed is not None:
            fed.extend([None] * (index + 1 - len(fed)))
            fed[index] = key
    return held


def _memory(given: Any) -> tuple[Any, ...] | None:
    """Where an array's data lies and how (pointer, shape, strides, dtype), None for anything else."""
    interface = getattr(given, "__array_interface__", None)
    if interface is None:
        return None
    return (interface["data"][0], interface["shape"], interface["strides"], interface["typestr"])


class Compiled:
    """One compiled model and a lazily created infer request per thread."""

    __slots__ = ("_count", "_keep", "_local", "compiled", "scalars")

    def __init__(self, graph: Graph, output: Any) -> None:
        # a tuple of outputs for an op with a list result: a call then returns a tuple
        outputs = output if isinstance(output, tuple) else (output,)
        self._count = len(outputs) if isinstance(output, tuple) else 0
        try:
            self.compiled = core().compile_model(graph.model(*outputs), DEVICE, compile_config())
        except Exception as error:
            raise Unsupported(f"openvino could not compile the {graph.name} model: {first_line(error)}") from error
        self._keep = tuple(graph.keep)  # memory the shared constants read
        self._local = threading.local()
        self.scalars = list(graph.scalar_feeds)

    def request(self) -> openvino.InferRequest:
        """This thread's infer request."""
        local = self._local
        request = getattr(local, "request", None)
        if request is None:
            request = local.request = self.compiled.create_infer_request()
        return request

    def __call__(self, arrays: list[Any], scalars: list[Any] | None = None) -> Any:
        try:
            request = self._local.request
        except AttributeError:
            request = self.request()
        try:
            held = feed(request, arrays)  # noqa: F841 - the copies must outlive the call
            if scalars:
                with numpy.errstate(over="ignore"):  # 1e300 fed as float32 is inf, as torch makes it
                    for (index, dtype), value in zip(self.scalars, scalars):
                        request.set_input_tensor(index, _Tensor(numpy.asarray(value, dtype=dtype)))
            request.infer()
            if self._count:
                return tuple(request.get_output_tensor(i).data.copy() for i in range(self._count))
            return request.get_output_tensor(0).data.copy()
        except Exception as error:
            raise Unsupported(f"openvino failed: {first_line(error)}") from error

    def single(self) -> Callable[[Any], Any]:
        """A function of the one input (prepared ops with one free tensor: the leanest call)."""
        local, request_of = self._local, self.request
        if self._count:
            return lambda x: self([x])

        def call(x: Any) -> Any:
            try:
                request = local.request
            except AttributeError:
                request = request_of()
            try:
                try:
                    request.set_input_tensor(_Tensor(x, shared_memory=True))
                except (RuntimeError, ValueError):  # shared memory must be C-contiguous and writeable
                    x = numpy.array(x, order="C")
                    request.set_input_tensor(_Tensor(x, shared_memory=True))
                request.infer()
                return request.get_output_tensor().data.copy()
            except Exception as error:
                raise Unsupported(f"openvino failed: {first_line(error)}") from error

        return call


class OvOp(OneModelOp):
    """How one op becomes an OpenVINO model: ``build(graph, *arguments)`` returns the output node
    (see ``opcore.onemodel.OneModelOp``).

    Its ``kernel()`` finds the compiled model for the call's signature in the cache (compiling it
    once) and runs it; its ``prepare`` compiles constant tensors in as Constants.
    """

    cache = MODELS
    language = "OpenVINO"
    model_attribute = "compiled"

    def new_graph(self) -> Graph:
        return Graph(self.op)

    def output(self, graph: Graph, value: Any) -> Any:
        if isinstance(value, tuple):  # a list result
            return tuple(graph.result(piece) for piece in value)
        return graph.result(value)

    def compile(self, graph: Graph, output: Any) -> Compiled:
        return Compiled(graph, output)


ov_kernel = OvOp.kernel_of  # ov_kernel(op, build, check=, names=, roles=): the kernel function of OvOp(...)
