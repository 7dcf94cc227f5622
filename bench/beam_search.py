"""Beam search: transformers' ``model.generate(num_beams=k)`` against opcore's ``lm.generate(num_beams=k)``.

Models: bench/generate.py's shapes (random weights, fp32, logits scaled as there), by default "small"
and "135m". Per model and --beams: a prompt of --prompt random tokens (--batch rows, no padding),
--new new tokens with ``min_new_tokens`` = --new (no beam finishes early, so both run every step),
length_penalty 1, early_stopping False (transformers' defaults). opcore captures with
``capture_lm(model, max_length=prompt + new, batch_size=batch x beams)`` ("build s"). Each column's
first call is untimed; then --rounds calls of each take turns (a new order each round): the table
gives the median seconds of a whole call (beam search streams nothing: its tokens are known at the
end), new tokens per second of one sequence (--new over that), opcore's ratio to eager, and whether
the returned sequences are identical. transformers' beam search reorders a dynamic cache by
``index_select`` each step; opcore's moves, in place, the rows whose beam changed, over the slots
written so far.

Threads: torch's pool at --threads, which opcore's runtimes follow (1 by default: on 2 cores two pools would
spin on the same cores). The load is printed with the table.

    python bench/beam_search.py --models small,135m --beams 4 --threads 1
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from _decoder_bench import PAIRED_HEADER, add_common, check_options, paired_rows, run_models, take_turns, timed
from _timing import machine_load, table
from generate import SHAPES, _ints, _quiet_transformers, prompt_ids

DEFAULT_MODELS = ("small", "135m")


def bench_model(name: str, options: argparse.Namespace) -> str:
    import opcore.graph

    shape = SHAPES[name]
    rows = []
    with _quiet_transformers():
        model = shape.build(options.prompt + options.new)
        ids = prompt_ids(shape.vocab, options.batch, options.prompt)
        settings = dict(max_new_tokens=options.new, min_new_tokens=options.new, pad_token_id=0)
        for beams in options.beams:
            rows_captured = options.batch * beams
            build_s, lm = timed(
                functools.partial(
                    opcore.graph.capture_lm, model, max_length=options.prompt + options.new, batch_size=rows_captured
                )
            )
            calls: dict[str, Callable[[], Any]] = {
                "eager": functools.partial(model.generate, ids, num_beams=beams, **settings),
                "opcore": functools.partial(lm.generate, ids, num_beams=beams, **settings),
            }
            outputs, seconds = take_turns(calls, options.rounds)
            rows += paired_rows(f"{beams} beams", outputs, seconds, options.new, f"{build_s:.1f}")
            del lm
            gc.collect()
    title = (
        f"{shape.title}: batch {options.batch}, prompt {options.prompt}, {options.new} new, fp32, "
        f"{options.threads} thread{'s' * (options.threads != 1)} ({machine_load()} after the runs)"
    )
    return f"{title}\n{table(PAIRED_HEADER, rows)}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_common(parser, DEFAULT_MODELS)
    parser.add_argument("--beams", default="4", help="comma-separated beam counts (default 4)")
    parser.add_argument("--batch", type=int, default=1, help="prompt rows (default 1)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per row")
    parser.add_argument("--new", type=int, default=64, help="new tokens per sequence")
    options = parser.parse_args(argv)
    options.beams = _ints(options.beams, "--beams", parser)
    check_options(options, parser, ("batch", "prompt", "new"))
    return options


def main(argv: list[str] | None = None) -> int:
    return run_models(parse_args(argv), bench_model)


if __name__ == "__main__":
    sys.exit(main())
