"""Classifier-free guidance: transformers' ``model.generate(guidance_scale=s)`` against opcore's
``lm.generate(guidance_scale=s)``, each beside its unguided call.

Models: bench/generate.py's shapes (random weights, fp32, logits scaled as there), by default "small"
and "135m". Per model: a prompt of --prompt random tokens (--batch rows, no padding), --new greedy
tokens with ``min_new_tokens`` = --new (no row stops early), with no guidance and with each
--scales (the unconditional branch each row's last prompt token, transformers' default). opcore
captures once with ``capture_lm(model, max_length=prompt + new, batch_size=batch)`` ("build s"); its
guided calls run the branch on a second session of that capture. Each column's first call is
untimed; then --rounds calls of each take turns (a new order each round): the table gives the median
seconds of a whole call, new tokens per second of one row (--new over that), opcore's ratio to eager
with the same guidance, and whether the returned tokens are identical. transformers' processor runs
the model's forward on the branch (a dynamic cache) inside the processor list; opcore's runs a
decode step of the captured plan.

Threads: torch's pool at --threads, which opcore's runtimes follow (1 by default: on 2 cores two pools
would spin on the same cores). The load is printed with the table.

    python bench/guidance.py --models small,135m --scales 1.5 --threads 1
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
from generate import SHAPES, _quiet_transformers, prompt_ids

DEFAULT_MODELS = ("small", "135m")


def _floats(text: str, parser: argparse.ArgumentParser) -> tuple[float, ...]:
    try:
        values = tuple(float(item) for item in text.split(","))
    except ValueError:
        parser.error("--scales: expected comma-separated numbers")
    if any(value == 1.0 for value in values):
        parser.error("--scales: 1 is no guidance (the unguided columns are always run)")
    return values


def bench_model(name: str, options: argparse.Namespace) -> str:
    import opcore.graph

    shape = SHAPES[name]
    rows = []
    with _quiet_transformers():
        model = shape.build(options.prompt + options.new)
        ids = prompt_ids(shape.vocab, options.batch, options.prompt)
        settings = dict(max_new_tokens=options.new, min_new_tokens=options.new, pad_token_id=0, do_sample=False)
        build_s, lm = timed(
            functools.partial(
                opcore.graph.capture_lm, model, max_length=options.prompt + options.new, batch_size=options.batch
            )
        )
        for scale in (None, *options.scales):
            label = "no guidance" if scale is None else f"guidance {scale:g}"
            calls: dict[str, Callable[[], Any]] = {
                "eager": functools.partial(model.generate, ids, guidance_scale=scale, **settings),
                "opcore": functools.partial(lm.generate, ids, guidance_scale=scale, **settings),
            }
            outputs, seconds = take_turns(calls, options.rounds)
            rows += paired_rows(label, outputs, seconds, options.new, f"{build_s:.1f}" if scale is None else "")
        del lm
        gc.collect()
    title = (
        f"{shape.title}: batch {options.batch}, prompt {options.prompt}, {options.new} new, fp32, greedy, "
        f"{options.threads} thread{'s' * (options.threads != 1)} ({machine_load()} after the runs)"
    )
    return f"{title}\n{table(PAIRED_HEADER, rows)}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_common(parser, DEFAULT_MODELS)
    parser.add_argument("--scales", default="1.5", help="comma-separated guidance scales (default 1.5)")
    parser.add_argument("--batch", type=int, default=1, help="prompt rows (default 1)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per row")
    parser.add_argument("--new", type=int, default=64, help="new tokens per row")
    options = parser.parse_args(argv)
    options.scales = _floats(options.scales, parser)
    check_options(options, parser, ("batch", "prompt", "new"))
    return options


def main(argv: list[str] | None = None) -> int:
    return run_models(parse_args(argv), bench_model)


if __name__ == "__main__":
    sys.exit(main())
