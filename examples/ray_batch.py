"""opcore plans on a Ray cluster, batch inference: a plan and a generating plan captured once, saved,
and run by Ray Data actors that each load the plan once (docs/scale.md).

    python examples/ray_batch.py                       # a local cluster: 2 CPUs
    RAY_ADDRESS=head-node:6379 python examples/ray_batch.py --plans /shared/plans   # a multi-node one

On a cluster, ``--plans`` must be a folder every node mounts at the same path, or pass ``--store``
to send the plans' files through Ray's object store.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time
from typing import Any

import numpy
import ray

import opcore.graph
from opcore.ray import GenerationPredictor, PlanPredictor, put_plan

ROWS = 64  # rows of the plan's batch job
PROMPTS = 6  # prompts of the generation job
VOCAB = 256


def save_plans(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """An MLP plan (any batch size: dim 0 dynamic) and a small Llama's generating plan (random weights
    from a config: nothing downloaded), saved under ``folder`` unless they are there already."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    plan_path, lm_path = folder / "mlp.plan", folder / "llama.lm"
    torch.manual_seed(0)
    if not (plan_path / "plan.json").is_file():
        mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
        batch = torch.export.Dim("batch")
        plan = opcore.graph.capture(mlp, (torch.randn(4, 32),), dynamic_shapes=({0: batch},), measure=False)
        plan.save(plan_path)
    if not (lm_path / "lm.json").is_file():
        config = LlamaConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64,
        )  # fmt: skip
        model = LlamaForCausalLM(config).eval()
        opcore.graph.capture_lm(model, max_length=48, measure=False).save(lm_path)
    return plan_path, lm_path


def rows(count: int) -> list[dict[str, Any]]:
    features = numpy.random.default_rng(0).standard_normal((count, 32)).astype(numpy.float32)
    return [{"id": i, "input": features[i]} for i in range(count)]


def prompts(count: int) -> list[dict[str, Any]]:
    generator = numpy.random.default_rng(1)
    return [{"id": i, "input_ids": generator.integers(0, VOCAB, 4 + i % 5)} for i in range(count)]


def run_plan(source: Any, count: int = ROWS, *, concurrency: int = 2, num_cpus: int = 1, **udf: Any) -> list[dict]:
    """The plan over ``count`` rows on ``concurrency`` actors of ``num_cpus`` CPUs (each actor's threads)."""
    ds = ray.data.from_items(rows(count))
    out = ds.map_batches(
        PlanPredictor,
        fn_constructor_args=(source,),
        fn_constructor_kwargs=udf,
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        num_cpus=num_cpus,
        batch_size=16,
        batch_format="numpy",
    )
    return sorted(out.take_all(), key=lambda row: row["id"])


def run_generation(source: Any, count: int = PROMPTS, *, max_new_tokens: int = 8) -> list[dict]:
    """Greedy generation for ``count`` prompts of 4 to 8 tokens, on one actor."""
    ds = ray.data.from_items(prompts(count))
    out = ds.map_batches(
        GenerationPredictor,
        fn_constructor_args=(source,),
        fn_constructor_kwargs={"max_new_tokens": max_new_tokens},
        compute=ray.data.ActorPoolStrategy(size=1),
        num_cpus=1,
        batch_size=4,
        batch_format="numpy",
    )
    return sorted(out.take_all(), key=lambda row: row["id"])


def demo(plan_source: Any, lm_source: Any) -> tuple[list[dict], list[dict]]:
    """Both jobs, printed: the plan's rows with the actor and fingerprint each ran with, the prompts'
    tokens; returned as the rows Ray gave back."""
    started = time.perf_counter()
    out = run_plan(plan_source)
    actors = {row["opcore_actor"]: (row["opcore_fingerprint_changes"], row["opcore_threads"]) for row in out}
    print(f"plan: {len(out)} rows on {len(actors)} actor(s) in {time.perf_counter() - started:.1f} s")
    for actor, (changes, threads) in actors.items():
        fingerprint = f"differs: {changes} (partitions recompiled)" if changes else "as saved"
        print(f"  {actor}: {threads} thread(s), fingerprint {fingerprint}")
    print("  row 0:", [round(float(v), 4) for v in out[0]["output"]])

    started = time.perf_counter()
    generated = run_generation(lm_source)
    print(f"generation: {len(generated)} prompts in {time.perf_counter() - started:.1f} s")
    for row in generated[:3]:
        print(f"  prompt {row['input_ids'].tolist()} -> {row['tokens'].tolist()}")
    return out, generated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--plans", type=pathlib.Path, default=None, help="where the plans are (saved there if not)")
    parser.add_argument("--store", action="store_true", help="send the plan files through the object store")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="opcore-ray-") as scratch:
        plan_path, lm_path = save_plans(options.plans or pathlib.Path(scratch))
        run(plan_path, lm_path, store=options.store)
    return 0


def run(plan_path: pathlib.Path, lm_path: pathlib.Path, *, store: bool) -> None:
    # RAY_ADDRESS set (a cluster's head): join it; otherwise a local cluster of 2 CPUs
    if os.environ.get("RAY_ADDRESS"):
        ray.init()
    else:
        ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False)
    if store:
        demo(put_plan(plan_path), put_plan(lm_path))
    else:
        demo(str(plan_path), str(lm_path))


if __name__ == "__main__":
    raise SystemExit(main())
