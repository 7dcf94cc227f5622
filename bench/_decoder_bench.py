"""What bench/beam_search.py, bench/guidance.py and bench/prompt_lookup.py share: a whole call timed,
eager's and opcore's rows of one setting, --models checked against bench/generate.py's shapes, and the
run over them (threads set, the load printed)."""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from _timing import machine_load
from generate import SHAPES


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds one call took, and what it returned."""
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, out


def take_turns(calls: dict[str, Callable[[], Any]], rounds: int) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Each column's first call untimed (what it returns kept), then ``rounds`` rounds in which the
    columns take turns in a new order each: the outputs and each column's seconds."""
    import random

    with torch.no_grad():
        outputs = {column: call() for column, call in calls.items()}
        seconds: dict[str, list[float]] = {column: [] for column in calls}
        order = list(calls)
        for round_ in range(rounds):
            random.Random(round_).shuffle(order)
            for column in order:
                spent, _ = timed(calls[column])
                seconds[column].append(spent)
    return outputs, seconds


# the columns of paired_rows' rows
PAIRED_HEADER = ("column", "call s (median)", "min-max", "new tokens/s", "x eager", "build s", "same tokens")


def paired_rows(
    label: str, outputs: dict[str, Any], seconds: dict[str, list[float]], new: int, build: str
) -> list[tuple[str, ...]]:
    """The "eager" and "opcore" rows of one setting (take_turns' outputs and seconds; ``new`` tokens a
    row): each call's median and spread, new tokens per second, the ratio to eager's median, and on
    opcore's row ``build`` and whether its tokens are eager's."""
    import statistics

    eager = statistics.median(seconds["eager"])
    same = "yes" if torch.equal(outputs["opcore"], outputs["eager"]) else "NO"
    rows: list[tuple[str, ...]] = []
    for column in ("eager", "opcore"):
        median = statistics.median(seconds[column])
        rows.append(
            (
                f"{label}, {column}",
                f"{median:.3f}",
                f"{min(seconds[column]):.3f}-{max(seconds[column]):.3f}",
                f"{new / median:.1f}",
                f"{eager / median:.2f}x",
                build if column == "opcore" else "",
                same if column == "opcore" else "",
            )
        )
    return rows


def add_common(parser: argparse.ArgumentParser, models: tuple[str, ...]) -> None:
    """--models (default ``models``), --rounds and --threads."""
    parser.add_argument("--models", default=",".join(models), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--rounds", type=int, default=3, help="timed calls per column (median, min-max)")
    parser.add_argument("--threads", type=int, default=1, help="torch's and opcore's threads (default 1)")


def check_options(options: argparse.Namespace, parser: argparse.ArgumentParser, counts: tuple[str, ...]) -> None:
    """``options.models`` (comma-separated) as a list of bench/generate.py's shapes, and the options
    ``counts`` (with rounds and threads) at least 1; else the parser's error."""
    options.models = [name for name in options.models.split(",") if name]
    unknown = [name for name in options.models if name not in SHAPES]
    if unknown or not options.models:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none)'}; expected some of {', '.join(SHAPES)}")
    for name in (*counts, "rounds", "threads"):
        if getattr(options, name) < 1:
            parser.error(f"--{name}: expected an integer >= 1")


def run_models(options: argparse.Namespace, bench_model: Callable[[str, argparse.Namespace], str]) -> int:
    """torch's threads at --threads (opcore's runtimes follow), the machine and its load printed, then
    each model's table."""
    import transformers

    torch.set_num_threads(options.threads)  # opcore's runtimes take torch's thread count
    print(
        f"{os.cpu_count()} CPUs, torch {torch.__version__}, transformers {transformers.__version__}; "
        f"medians of {options.rounds} generate calls per column; {machine_load()} before the runs\n",
        flush=True,
    )
    for name in options.models:
        print(bench_model(name, options), end="\n\n", flush=True)
        gc.collect()
    return 0
