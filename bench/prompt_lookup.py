"""Prompt lookup decoding: transformers' ``model.generate(prompt_lookup_num_tokens=n)`` against opcore's.

Models: bench/generate.py's shapes (random weights, fp32, logits scaled as there), by default "small"
and "135m". opcore captures with ``capture_lm(model, max_length=prompt + new, draft_tokens=--drafts)``
("build s": the decode step, the prompt's step and the verify step of drafts + 1 tokens). Greedy,
batch 1, --new new tokens with ``min_new_tokens`` = --new (no early eos), two prompts of --prompt
tokens:

* "random": random tokens; drafts come from the n-grams the model's own output repeats;
* "repeated": a random run of a quarter of the prompt, repeated: drafts can come from the prompt.

Columns: eager ``model.generate`` without and with prompt lookup (transformers' own), opcore
without and with it. Each column's first call is untimed; then --rounds calls of each take turns (a
new order each round); medians. "per verify" is opcore's new tokens per verify call (the drafts
accepted + 1) and "verify calls" how many it made, counted in one more call (with its decode steps). Random weights make
their own loops (a token or a few, repeated) within tens of tokens, and drafts from a loop are
accepted whole: the acceptance here is the random models', not a trained model's on real text. What
does not depend on it: the verify step's time against the decode step's (the line under each
table), which says how many accepted drafts a verify call needs to pay for itself.

Threads: torch's pool at --threads, which opcore's runtimes follow (1 by default: on 2 cores two
pools would spin on the same cores). The load is printed with the table.

    python bench/prompt_lookup.py --models small,135m --drafts 10 --threads 1
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import torch
from _decoder_bench import add_common, check_options, run_models, take_turns, timed
from _timing import machine_load, table
from generate import SHAPES, _quiet_transformers, prompt_ids

DEFAULT_MODELS = ("small", "135m")
STEP_CALLS = 20


def prompts(vocab: int, length: int) -> dict[str, torch.Tensor]:
    """The random prompt and the repeated one (a run of a quarter of the length, repeated)."""
    run = prompt_ids(vocab, 1, max(length // 4, 1))
    repeated = run.repeat(1, -(-length // run.shape[1]))[:, :length]
    return {"random": prompt_ids(vocab, 1, length), "repeated": repeated}


def counted_calls(call: Callable[[], Any]) -> tuple[int, int]:
    """The verify calls and the decode steps ``call`` made (counting wrappers around Session's)."""
    from opcore.graph.generation import Session

    counts = {"verify": 0, "step": 0}
    originals = {name: getattr(Session, name) for name in counts}

    def counting(name: str) -> Callable[..., Any]:
        def counted(session: Any, ids: Any) -> Any:
            counts[name] += 1
            return originals[name](session, ids)

        return counted

    for name in counts:
        setattr(Session, name, counting(name))
    try:
        call()
    finally:
        for name, original in originals.items():
            setattr(Session, name, original)
    return counts["verify"], counts["step"]


def step_times(lm: Any, prompt: torch.Tensor) -> tuple[float, float]:
    """Median seconds of one decode step and of one verify step (drafts + 1 tokens) after ``prompt``."""
    chat = lm.session()
    chat.prefill(prompt)
    token = prompt[:, -1:]
    chunk = prompt[:, -(lm.draft_tokens + 1) :]
    steps, verifies = [], []
    for _ in range(STEP_CALLS):
        spent, _ = timed(functools.partial(chat.step, token))
        chat.crop(-1)
        steps.append(spent)
        spent, _ = timed(functools.partial(chat.verify, chunk))
        chat.crop(-chunk.shape[1])
        verifies.append(spent)
    return statistics.median(steps), statistics.median(verifies)


def bench_model(name: str, options: argparse.Namespace) -> str:
    import opcore.graph

    shape = SHAPES[name]
    rows = []
    length = options.prompt + options.new
    with _quiet_transformers():
        model = shape.build(length)
        build_s, lm = timed(
            functools.partial(opcore.graph.capture_lm, model, max_length=length, draft_tokens=options.drafts)
        )
        settings = dict(max_new_tokens=options.new, min_new_tokens=options.new, pad_token_id=0)
        lookup = dict(prompt_lookup_num_tokens=options.drafts)
        texts = prompts(shape.vocab, options.prompt)
        for kind, ids in texts.items():
            calls: dict[str, Callable[[], Any]] = {
                "eager": functools.partial(model.generate, ids, do_sample=False, **settings),
                "eager, prompt lookup": functools.partial(model.generate, ids, do_sample=False, **settings, **lookup),
                "opcore": functools.partial(lm.generate, ids, **settings),
                "opcore, prompt lookup": functools.partial(lm.generate, ids, **settings, **lookup),
            }
            outputs, seconds = take_turns(calls, options.rounds)
            with torch.no_grad():
                verifies, steps = counted_calls(calls["opcore, prompt lookup"])
            # the first token is the prompt's; each decode step makes one, each verify call the rest
            per_verify = (options.new - 1 - steps) / verifies if verifies else 0.0
            eager = statistics.median(seconds["eager"])
            for column in calls:
                median = statistics.median(seconds[column])
                drafted = column == "opcore, prompt lookup"
                rows.append(
                    (
                        f"{kind}: {column}",
                        f"{median:.3f}",
                        f"{min(seconds[column]):.3f}-{max(seconds[column]):.3f}",
                        f"{options.new / median:.1f}",
                        f"{eager / median:.2f}x",
                        f"{per_verify:.2f}" if drafted and verifies else "",
                        str(verifies) if drafted else "",
                        "yes" if torch.equal(outputs[column], outputs["eager"]) else "NO",
                    )
                )
        step_s, verify_s = step_times(lm, texts["random"])
        del lm
        gc.collect()
    header = ("column", "call s (median)", "min-max", "new tokens/s", "x eager", "per verify", "verify calls", "same")
    title = (
        f"{shape.title}: batch 1, prompt {options.prompt}, {options.new} new, {options.drafts} drafts, fp32, "
        f"{options.threads} thread{'s' * (options.threads != 1)}, built in {build_s:.1f} s "
        f"({machine_load()} after the runs)"
    )
    step_line = (
        f"decode step {step_s * 1e3:.2f} ms, verify step ({options.drafts + 1} tokens) {verify_s * 1e3:.2f} ms "
        f"= {verify_s / step_s:.2f} decode steps (medians of {STEP_CALLS})"
    )
    return f"{title}\n{table(header, rows)}\n{step_line}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_common(parser, DEFAULT_MODELS)
    parser.add_argument("--drafts", type=int, default=10, help="prompt_lookup_num_tokens and draft_tokens (10)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--new", type=int, default=128, help="new tokens")
    options = parser.parse_args(argv)
    check_options(options, parser, ("drafts", "prompt", "new"))
    return options


def main(argv: list[str] | None = None) -> int:
    return run_models(parse_args(argv), bench_model)


if __name__ == "__main__":
    sys.exit(main())
