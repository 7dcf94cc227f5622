"""Denormals flushed to zero in onnxruntime partitions (opcore_onnxruntime.denormals) against
onnxruntime's default, in one run.

onnxruntime's CPU exp takes a slow path for each result below float32's smallest normal number, and
a decoder's attention makes those by the thousand: the scores of every cache slot that the mask hides
(-inf, and every slot past the prompt in a prefill) underflow in the softmax. opcore's partitions run
with the flags set (the caller's thread for the run only, the session's pool threads by its option).

1. **one Softmax** over (1, 2, 7, L + 1) scores, all but 130 of each row -inf (a decode step's
   attention of a Qwen2-0.5B-shaped model at ``max_length`` L), and the same scores unmasked: an
   InferenceSession with onnxruntime's default options, and one with ``session.set_denormal_as_zero``
   run with the calling thread's flags set, as a partition runs it;
2. **a decoder on onnxruntime** (``capture_lm(model, max_length=L, backends=("onnxruntime",))``,
   random weights from bench/generate.py's shapes): a 128-token prompt's prefill and one decode step
   at position ~140, captured with ``OPCORE_ORT_DENORMALS=keep`` and with opcore's default, timed in
   turns (medians of interleaved rounds); the greedy tokens of both must agree.

One thread by default (torch's and the runtimes'); the load is printed.

    python bench/denormals.py                       # small and 135m shapes, max_length 256 and 2048
    python bench/denormals.py --shapes 0.5b --weights int4 --lengths 2048
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from typing import Any

import numpy
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _timing import machine_load, medians, table

DENORMALS = "OPCORE_ORT_DENORMALS"
PROMPT = 128


def softmax_rows(lengths: tuple[int, ...], rounds: int) -> list[tuple[str, ...]]:
    """Part 1: the Softmax's median time, kept against flushed, per length and masking."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
    from opcore_onnxruntime import denormals

    rows: list[tuple[str, ...]] = []
    for length in lengths:
        shape = [1, 2, 7, length + 1]
        graph = helper.make_graph(
            [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
            "softmax",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
        onnx.checker.check_model(onnx.load_from_string(model))
        sessions = {}
        for flush in (False, True):
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            if flush:
                options.add_session_config_entry("session.set_denormal_as_zero", "1")
            sessions[flush] = denormals.made(
                partial(onnxruntime.InferenceSession, model, options, providers=["CPUExecutionProvider"])
            )
        scores = numpy.random.default_rng(0).standard_normal(shape).astype(numpy.float32)
        masked = numpy.where(numpy.arange(length + 1) < 130, scores, -numpy.inf).astype(numpy.float32)
        for label, x in (("130 seen, rest -inf", masked), ("none masked", scores)):
            kept, flushed = sessions[False], sessions[True]
            feeds = {"x": x}
            times = medians(
                {"kept": partial(kept.run, None, feeds), "flushed": partial(denormals.run, flushed.run, None, feeds)},
                repeats=rounds,
            )
            got = [s.run(None, {"x": x})[0] for s in (kept, flushed)]
            numpy.testing.assert_allclose(got[0], got[1], rtol=1e-6, atol=1e-37)
            rows.append(
                (
                    f"Softmax {tuple(shape)}, {label}",
                    f"{times['kept'] * 1e6:.1f} us",
                    f"{times['flushed'] * 1e6:.1f} us",
                    f"{times['kept'] / times['flushed']:.2f}x",
                )
            )
    return rows


def decoder_rows(shape_name: str, weights: str | None, length: int, rounds: int) -> list[tuple[str, ...]]:
    """Part 2: prefill and decode step of one shape at one max_length, kept against flushed."""
    from generate import SHAPES

    import opcore.graph

    shape = SHAPES[shape_name]
    model = shape.build(length)
    lms = {}
    for mode in ("keep", "flush"):
        os.environ[DENORMALS] = mode  # read when a partition is compiled
        started = time.perf_counter()
        lms[mode] = opcore.graph.capture_lm(model, max_length=length, weights=weights, backends=("onnxruntime",))
        print(f"  {shape_name} max_length {length} ({mode}): captured in {time.perf_counter() - started:.1f} s; "
              f"decode: {lms[mode].decode_plan.summary()}", flush=True)  # fmt: skip
    os.environ.pop(DENORMALS)
    ids = torch.randint(3, min(shape.vocab, 1000), (1, PROMPT), generator=torch.Generator().manual_seed(0))
    tokens = {mode: lm.generate(ids, max_new_tokens=12) for mode, lm in lms.items()}
    if not torch.equal(tokens["keep"], tokens["flush"]):
        raise SystemExit(f"{shape_name}: greedy tokens differ between kept and flushed denormals")
    token = torch.tensor([[5]])
    sessions = {mode: lm.session() for mode, lm in lms.items()}
    for chat in sessions.values():
        chat.prefill(ids)
        for _ in range(12):
            chat.step(token)

    def step(mode: str) -> Any:
        chat = sessions[mode]
        chat.step(token)
        if chat.length >= PROMPT + 24:  # stay near position 140: roll back to the prompt plus 12
            chat.crop(PROMPT + 12)

    def prefill_of(mode: str) -> Any:
        return lms[mode].session().prefill(ids)

    prefill = medians({m: partial(prefill_of, m) for m in lms}, repeats=max(rounds // 4, 5))
    decode = medians({m: partial(step, m) for m in lms}, repeats=rounds)
    name = f"{shape_name}{' ' + weights if weights else ''}, max_length {length}"
    return [
        (f"{name}: prefill {PROMPT}", f"{prefill['keep'] * 1e3:.1f} ms", f"{prefill['flush'] * 1e3:.1f} ms",
         f"{prefill['keep'] / prefill['flush']:.2f}x"),
        (f"{name}: decode step", f"{decode['keep'] * 1e3:.2f} ms", f"{decode['flush'] * 1e3:.2f} ms",
         f"{decode['keep'] / decode['flush']:.2f}x"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--shapes", default="small,135m", help="bench/generate.py shapes (comma-separated)")
    parser.add_argument("--weights", default=None, help="capture_lm's weights= (int8, int4); default float32")
    parser.add_argument("--lengths", default="256,2048", help="max_length values (comma-separated)")
    parser.add_argument("--threads", type=int, default=1, help="torch's and the runtimes' threads")
    parser.add_argument("--rounds", type=int, default=21)
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    os.environ["OPCORE_RUNTIME_THREADS"] = str(options.threads)
    lengths = tuple(int(v) for v in options.lengths.split(","))
    print(f"{os.cpu_count()} cores, {options.threads} thread(s), torch {torch.__version__}; {machine_load()}")
    rows = softmax_rows(lengths, options.rounds)
    for shape_name in options.shapes.split(","):
        for length in lengths:
            rows += decoder_rows(shape_name, options.weights, length, options.rounds)
    print(table(("case", "onnxruntime's default", "flushed (opcore)", "speed-up"), rows))
    print(machine_load())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
