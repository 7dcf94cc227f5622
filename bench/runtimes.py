"""opcore pinned to the graph-runtime backends against the same runtime called directly.

For linear at a tiny (x 2x8, w 8x8, b 8) and a medium (x 32x4096, w 4096x4096, b 4096) shape,
per backend (float32):

- run:      ``opcore.run("linear", x, w, b, backend=B)`` against an equivalent prebuilt model
            with x, w, b as inputs (symbolic / dynamic dimensions), called the lean way:
            ONNX Runtime ``sess.run([out], {...})``; OpenVINO a reused infer request with
            ``openvino.Tensor(a, shared_memory=True)`` inputs, ``infer()``, the output copied out
            (the request overwrites it on the next call, so a kept result must be copied).
- prepared: ``opcore.resolve(..., constants=("w", "b"))`` against a hand-built model with w and b
            as initializers (ONNX, ``numpy_helper.from_array``) / Constants (OpenVINO), x the input.

Targets: run at most 1.5x the direct call at the tiny shape and 1.1x at the medium one; prepared
no slower than the hand-built model (ratio <= 1.0, read with the noise of a shared machine).
For reference only, the table also shows ONNX Runtime's binding called under the public ``run``
(what opcore calls) and OpenVINO's convenience call ``compiled_model(inputs, share_inputs=True)``.

    python bench/runtimes.py [--quick]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy

sys.path.insert(0, os.path.dirname(__file__))
from _timing import medians, table

import opcore

SHAPES = {"tiny": ((2, 8), (8, 8)), "medium": ((32, 4096), (4096, 4096))}
TARGETS = {("run", "tiny"): 1.5, ("run", "medium"): 1.1, ("prepared", "tiny"): 1.0, ("prepared", "medium"): 1.0}


def onnxruntime_direct(x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray) -> dict[str, Callable[[], object]]:
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    def session(inputs: list, initializers: list) -> onnxruntime.InferenceSession:
        node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
        graph = helper.make_graph(
            [node], "linear", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
        return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    info = helper.make_tensor_value_info
    x_info = info("x", TensorProto.FLOAT, ["n", "k"])
    as_inputs = session([x_info, info("w", TensorProto.FLOAT, ["m", "k"]), info("b", TensorProto.FLOAT, ["m"])], [])
    baked = session([x_info], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    binding = as_inputs._sess  # what InferenceSession.run calls after its checks
    return {
        "run": lambda: as_inputs.run(["y"], {"x": x, "w": w, "b": b}),
        "prepared": lambda: baked.run(["y"], {"x": x}),
        "run, binding": lambda: binding.run(["y"], {"x": x, "w": w, "b": b}, None),
    }


def openvino_direct(x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray) -> dict[str, Callable[[], object]]:
    import openvino
    import openvino.opset13 as ops

    core = openvino.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    px = ops.parameter(openvino.PartialShape([-1, -1]), openvino.Type.f32)
    pw = ops.parameter(openvino.PartialShape([-1, -1]), openvino.Type.f32)
    pb = ops.parameter(openvino.PartialShape([-1]), openvino.Type.f32)
    as_inputs = core.compile_model(
        openvino.Model([ops.add(ops.matmul(px, pw, False, True), pb)], [px, pw, pb]), "CPU", config
    )
    qx = ops.parameter(openvino.PartialShape([-1, -1]), openvino.Type.f32)
    baked_graph = ops.add(ops.matmul(qx, ops.constant(w), False, True), ops.constant(b))
    baked = core.compile_model(openvino.Model([baked_graph], [qx]), "CPU", config)
    request, baked_request = as_inputs.create_infer_request(), baked.create_infer_request()
    tensor = openvino.Tensor

    def run() -> object:
        request.set_input_tensor(0, tensor(x, shared_memory=True))
        request.set_input_tensor(1, tensor(w, shared_memory=True))
        request.set_input_tensor(2, tensor(b, shared_memory=True))
        request.infer()
        return request.get_output_tensor(0).data.copy()

    def prepared() -> object:
        baked_request.set_input_tensor(0, tensor(x, shared_memory=True))
        baked_request.infer()
        return baked_request.get_output_tensor(0).data.copy()

    return {
        "run": run,
        "prepared": prepared,
        "run, compiled_model()": lambda: as_inputs([x, w, b], share_inputs=True)[0],
    }


DIRECT = {"onnxruntime": onnxruntime_direct, "openvino": openvino_direct}


def measure(backend: str, size: str, repeats: int) -> list[tuple[str, ...]]:
    rng = numpy.random.default_rng(0)
    x_shape, w_shape = SHAPES[size]
    x = rng.standard_normal(x_shape, dtype=numpy.float32)
    w = rng.standard_normal(w_shape, dtype=numpy.float32) / 64
    b = rng.standard_normal(w_shape[:1], dtype=numpy.float32)
    direct = DIRECT[backend](x, w, b)
    resolved = opcore.resolve("linear", x, w, b, constants=("w", "b"), backend=backend)
    assert resolved.prepared, resolved
    expected = x @ w.T + b
    for name, call in (
        ("opcore run", lambda: opcore.run("linear", x, w, b, backend=backend)),
        ("opcore prepared", lambda: resolved(x)),
    ):
        numpy.testing.assert_allclose(call(), expected, rtol=1e-3, atol=1e-3, err_msg=f"{backend} {name}")
    cases = {
        "direct run": direct["run"],
        "opcore run": lambda: opcore.run("linear", x, w, b, backend=backend),
        "direct prepared": direct["prepared"],
        "opcore prepared": lambda: resolved(x),
    }
    extra = [name for name in direct if name not in ("run", "prepared")]
    cases.update({f"direct {name}": direct[name] for name in extra})
    times = medians(cases, repeats=repeats)
    rows: list[tuple[str, ...]] = []
    shape = f"{size} {x_shape[0]}x{x_shape[1]}·{w_shape[0]}x{w_shape[1]}"
    for mode in ("run", "prepared"):
        ratio = times[f"opcore {mode}"] / times[f"direct {mode}"]
        target = TARGETS[(mode, size)]
        rows.append(
            (
                backend,
                shape,
                mode,
                f"{times[f'direct {mode}'] * 1e6:.1f}",
                f"{times[f'opcore {mode}'] * 1e6:.1f}",
                f"{ratio:.2f}x",
                f"<= {target}x",
                "ok" if ratio <= target else "within noise (3%)" if ratio <= target * 1.03 else "MISSED",
            )
        )
    for name in extra:
        rows.append((backend, shape, f"({name})", f"{times[f'direct {name}'] * 1e6:.1f}", "", "", "", "info"))
    return rows


def main() -> None:
    quick = "--quick" in sys.argv
    repeats = 7 if quick else 31
    rows: list[tuple[str, ...]] = []
    for backend in ("onnxruntime", "openvino"):
        for size in ("tiny", "medium"):
            rows.extend(measure(backend, size, repeats))
    header = ("backend", "shape", "mode", "direct us", "opcore us", "ratio", "target", "")
    print("linear, float32, medians of interleaved repeats")
    print(table(header, rows))


if __name__ == "__main__":
    main()
