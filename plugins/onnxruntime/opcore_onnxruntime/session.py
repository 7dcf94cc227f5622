"""InferenceSessions for one-op models, and ``OnnxOp``: how an op becomes an ONNX model. The
kernels that find (or build) the session for a call's signature and run it are the shared ones
of ``opcore.onemodel``.

A kernel's signature is (op, and per argument: dtype and rank for arrays, the Python type for a
scalar operand, the value for an attribute). Dimensions are symbolic, so every batch size of the
same ranks reuses one session. Python numbers given for ``Tensor|Scalar`` operands are fed as 0-D
inputs, so ``add(x, 0.5)`` and ``add(x, 2.0)`` share a session too.

A model never depends on an optimizer pass working for its dtype: where a session cannot be built
at onnxruntime's full optimization, it is built again at lower levels (``OPTIMIZATION_LEVELS``).

>>> relu = onnx_kernel("relu", lambda g, x: g.op("Relu", x))
>>> relu(numpy.ones((2, 3), "float32")).shape
(2, 3)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy
import onnxruntime
from onnx import ModelProto, helper

from opcore.extend import ATTRIBUTE, OPERAND, TENSOR, TENSORS, OneModelOp, Unsupported, first_line, runtime_threads
from opcore_onnxruntime import denormals
from opcore_onnxruntime.cache import SESSIONS
from opcore_onnxruntime.graph import Graph, Value

__all__ = [
    "ATTRIBUTE",
    "KEEP_SPINNING",
    "OPERAND",
    "OPTIMIZATION_LEVELS",
    "TENSOR",
    "TENSORS",
    "OnnxOp",
    "Session",
    "onnx_kernel",
    "keeps_spinning",
    "open_session",
    "session_options",
    "target_opset",
]

# Graph optimization levels a session is built at, the first that succeeds. Optimizer passes are
# written for the common dtypes: onnxruntime 1.30 fuses x * sigmoid(x) into com.microsoft.QuickGelu,
# which has no float64 kernel (silu, linear_silu, gated_mlp in float64 would fail to build), and
# 1.32's basic-level FuseReluClip raises on a float64 Clip. Each lower level builds more of the model
# as written; without optimization it is exactly the ops the builder chose, each with its own kernel.
OPTIMIZATION_LEVELS = (
    onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
    onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
)

# "1": onnxruntime's own default, the pool threads keep spinning after a run (session_options)
KEEP_SPINNING = "OPCORE_ORT_KEEP_SPINNING"

_opset: tuple[int, int] | None = None
_opset_lock = threading.Lock()


def session_options(dynamic: bool = False, flush: bool = False) -> onnxruntime.SessionOptions:
    """The options of every session opcore opens: fatal-only logging, and the intra-op threads stop
    spinning when a run returns (unless ``OPCORE_ORT_KEEP_SPINNING=1``). ``dynamic``: a partition
    with dynamic axes, which gets no memory pattern (below). ``flush``: the pool threads flush
    denormals to zero (a partition's session: opcore_onnxruntime.denormals; make it with
    ``denormals.made``, which gives the creating thread its flags back).

    onnxruntime's pool threads spin after each run, waiting for the next one. In a process that also
    runs torch (or another runtime) that spin takes the cores the next work needs: on 2 cores an
    onnxruntime gelu followed by a torch matmul took 2.1x their separate times, and eager torch right
    after a whole-model onnxruntime plan 2-2.5x its time alone. ``session.force_spinning_stop`` keeps
    the spinning inside a run and ends it when the run returns: the pair then costs its parts, a
    whole-model run (ms) is unchanged, and a tiny run pays a thread wake-up (microseconds) instead.
    docs/benchmarks.md "Thread pools in one process" has the figures.

    A model run at changing sizes (a decoder's prompt, any length): onnxruntime plans a run's
    allocations from the one before at the same sizes (the memory pattern), and that stalled the
    second run of every new length — a 0.5B int4 prefill in 25 partitions, 1 thread: 1.7 s, 0.8 s
    and 1.5 s for 128, 100 and 200 tokens whose steady runs take 0.58, 0.46 and 0.89 s; a 135M fp32
    one 0.5 s and 1.4 s against 0.33 and 0.49. Without the pattern every run after a length's first
    took its steady time, the same steady times. The CPU arena stays: without it too the first runs
    were no better and the 135M's 200-token prompt ran 15 % slower (558 against 486 ms), and the
    static decode step's time does not change either way.
    """
    options = onnxruntime.SessionOptions()
    # fatal only: a one-op model's "unused input" notes are noise, and a failed build is retried
    # (open_session) or raised with onnxruntime's message
    options.log_severity_level = 4
    if not keeps_spinning():
        options.add_session_config_entry("session.force_spinning_stop", "1")
    threads = runtime_threads(os.environ)
    if threads is not None:  # OPCORE_RUNTIME_THREADS: one budget of cores with torch's
        options.intra_op_num_threads = threads
    if dynamic:
        options.enable_mem_pattern = False
    if flush:
        options.add_session_config_entry("session.set_denormal_as_zero", "1")
    return options


def keeps_spinning() -> bool:
    """Whether ``OPCORE_ORT_KEEP_SPINNING=1`` asks for onnxruntime's default: the pool keeps spinning
    after a run (session_options; opcore doctor says which)."""
    return os.environ.get(KEEP_SPINNING) == "1"


def target_opset() -> tuple[int, int]:
    """(opset, IR version): the highest ONNX opset that both onnx and the installed onnxruntime
    support, found once by building a one-node model at each candidate.
    """
    global _opset  # noqa: PLW0603 - found once per process
    if _opset is None:
        with _opset_lock:
            if _opset is None:
                _opset = _probe_opset()
    return _opset


def _probe_opset() -> tuple[int, int]:
    import onnx

    for opset in range(onnx.defs.onnx_opset_version(), 17, -1):
        ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
        graph = Graph("probe", opset, ir_version)
        model = graph.model(graph.op("Identity", graph.input(numpy.dtype(numpy.float32), 1)))
        try:
            denormals.made(
                partial(
                    onnxruntime.InferenceSession,
                    model.SerializeToString(),
                    session_options(),
                    providers=["CPUExecutionProvider"],
                )
            )
        except Exception:
            continue
        return opset, ir_version
    raise Unsupported(f"onnxruntime {onnxruntime.__version__} accepts no ONNX opset >= 18")


def open_session(
    graph: Graph, *outputs: Value, dynamic: bool = False, flush: bool = False
) -> tuple[onnxruntime.InferenceSession, ModelProto, tuple[Any, ...]]:
    """An InferenceSession of ``graph`` with these outputs, the model it was made from (external
    initializers not in it), and what must stay alive while the session runs (the memory its
    external initializers share). Raises Unsupported with onnxruntime's first line when it fails.
    ``dynamic``, ``flush``: session_options' (a partition with dynamic axes; one that flushes
    denormals, made so that the calling thread keeps its own flags).
    """
    if graph.externals and not hasattr(onnxruntime.SessionOptions, "add_external_initializers"):
        graph.internalize()  # an onnxruntime without it: the weights are copied into the model
    model = graph.model(*outputs)
    names = list(graph.externals)
    values = [onnxruntime.OrtValue.ortvalue_from_numpy(graph.externals[n]) for n in names]
    keep: tuple[Any, ...] = (values, graph.externals) if names else ()  # the session reads this memory
    serialized, failures = model.SerializeToString(), []
    for level in OPTIMIZATION_LEVELS:  # the highest level that builds: see OPTIMIZATION_LEVELS
        options = session_options(dynamic, flush)
        options.graph_optimization_level = level
        if names:
            options.add_external_initializers(names, values)
        try:
            session = denormals.made(
                partial(onnxruntime.InferenceSession, serialized, options, providers=["CPUExecutionProvider"])
            )
        except Exception as error:
            failures.append(error)
            continue
        return session, model, keep
    first = failures[0]  # the full-optimization error; the lower levels' say the same or less
    raise Unsupported(
        f"onnxruntime could not build the {graph.name} model at any optimization level: {first_line(first)}"
    ) from first


def _no_value() -> Any:
    # onnxruntime 1.20 returns None for some empty outputs (a composed rms_norm over 0 features)
    raise Unsupported("onnxruntime returned no value for the output")


class Session:
    """One InferenceSession and what a call needs: input and output names, scalar feeds.

    ``output``: the op's one output, or a tuple of them for a list result (a call then returns a tuple).
    """

    __slots__ = ("_keep", "_list", "_names", "_outputs", "_run", "externals", "scalars", "session")

    def __init__(self, graph: Graph, output: Value | tuple[Value, ...]) -> None:
        outputs = output if isinstance(output, tuple) else (output,)
        self._list = isinstance(output, tuple)
        self.session, _, self._keep = open_session(graph, *outputs)
        self.externals = len(graph.externals)  # initializers that share the caller's memory
        # The binding under InferenceSession.run, taking the same arguments: the public wrapper's
        # per-call checks (feed names, OrtValue ownership, graph capture) cost ~2 us and cannot fail
        # on the complete numpy feeds built here. Public run when a future version moves it.
        self._run = getattr(getattr(self.session, "_sess", None), "run", self.session.run)
        self._outputs = [o.name for o in outputs]
        scalar_at = {position for position, _ in graph.scalar_feeds}
        inputs = [i.name for i in graph.inputs if i.dtype is not None]
        self._names = [name for position, name in enumerate(inputs) if position not in scalar_at]
        self.scalars = [(inputs[position], dtype) for position, dtype in graph.scalar_feeds]

    def __call__(self, arrays: list[Any], scalars: list[Any] | None = None) -> Any:
        feeds = dict(zip(self._names, arrays))
        if scalars:
            for (name, dtype), value in zip(self.scalars, scalars):
                feeds[name] = numpy.asarray(value, dtype=dtype)
        try:
            results = self._run(self._outputs, feeds, None)
        except Exception as error:
            raise Unsupported(f"onnxruntime failed: {first_line(error)}") from error
        if self._list:
            return tuple(r if r is not None else _no_value() for r in results)
        return results[0] if results[0] is not None else _no_value()

    @property
    def optimization(self) -> str:
        """The graph optimization level this session was built at ("ORT_ENABLE_ALL", ...)."""
        return self.session.get_session_options().graph_optimization_level.name

    def single(self) -> Callable[[Any], Any]:
        """A function of the one input (prepared ops with one free tensor: the leanest call)."""
        run, outputs, name = self._run, self._outputs, self._names[0]
        if self._list:
            return lambda x: self([x])

        def call(x: Any) -> Any:
            try:
                result = run(outputs, {name: x}, None)[0]
            except Exception as error:
                raise Unsupported(f"onnxruntime failed: {first_line(error)}") from error
            return result if result is not None else _no_value()

        return call


class OnnxOp(OneModelOp):
    """How one op becomes an ONNX model: ``build(graph, *arguments)`` writes its nodes with
    ``Graph.op`` and returns the output Value (see ``opcore.onemodel.OneModelOp``).

    Its ``kernel()`` finds the session for the call's signature in the session cache (building it
    once) and runs it; its ``prepare`` bakes constant tensors in as initializers.
    """

    cache = SESSIONS
    language = "ONNX"
    model_attribute = "session"

    def new_graph(self) -> Graph:
        opset, ir_version = target_opset()
        return Graph(self.op, opset, ir_version)

    def output(self, graph: Graph, value: Value | tuple[Value, ...]) -> Value | tuple[Value, ...]:
        if not isinstance(value, tuple):
            return graph.result(value)
        results: list[Value] = []
        for piece in value:  # a list result: ONNX outputs need distinct names
            result = graph.result(piece)
            results.append(graph.op("Identity", result) if result in results else result)
        return tuple(results)

    def compile(self, graph: Graph, output: Value | tuple[Value, ...]) -> Session:
        return Session(graph, output)


onnx_kernel = OnnxOp.kernel_of  # onnx_kernel(op, build, check=, names=, roles=): the kernel function of OnnxOp(...)
