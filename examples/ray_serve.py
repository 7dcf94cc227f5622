"""opcore on Ray Serve: a saved generating plan served by replicas that each load it once; prompt
ids in, tokens streamed out (through a deployment handle, and over HTTP). docs/scale.md.

    python examples/ray_serve.py                       # a local cluster: 2 CPUs
    RAY_ADDRESS=head-node:6379 python examples/ray_serve.py --plans /shared/plans --replicas 4
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import time
import urllib.request
from typing import Any

import ray
from ray import serve

from opcore.ray import generation_app, put_plan

PROMPTS = ([5, 17, 3, 99], [42, 7, 7, 1, 250, 31])


def serve_demo(lm_source: Any, *, replicas: int = 1, max_new_tokens: int = 8, port: int = 8000) -> list[list[int]]:
    """The language model served by ``replicas`` replicas of 1 CPU; each prompt's tokens streamed
    through the handle, and the first prompt's over HTTP on ``port``; returns the streamed tokens."""
    app = generation_app(lm_source, num_replicas=replicas, ray_actor_options={"num_cpus": 1})
    started = time.perf_counter()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    handle = serve.run(app, name="opcore-generation", route_prefix="/generate")
    print(f"serve: {replicas} replica(s) up in {time.perf_counter() - started:.1f} s")
    streamed = []
    for prompt in PROMPTS:
        tokens = []
        # stream=True: a DeploymentResponseGenerator, iterated as the replica yields
        responses: Any = handle.options(stream=True).stream.remote(prompt, max_new_tokens=max_new_tokens)
        for token in responses:
            tokens.append(token)  # each as the replica makes it
        print(f"  handle: {prompt} -> {tokens}")
        streamed.append(tokens)
    body = json.dumps({"input_ids": PROMPTS[0], "max_new_tokens": max_new_tokens}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:  # one token id per line, as made
        lines = [int(line) for line in response.read().decode().split()]
    print(f"  http:   {PROMPTS[0]} -> {lines}")
    streamed.append(lines)
    print("  replica:", handle.info.remote().result())
    return streamed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--plans", type=pathlib.Path, default=None, help="where the plans are (saved there if not)")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--store", action="store_true", help="send the plan files through the object store")
    options = parser.parse_args(argv)
    from ray_batch import save_plans  # the same plans as examples/ray_batch.py

    with tempfile.TemporaryDirectory(prefix="opcore-ray-") as scratch:
        _, lm_path = save_plans(options.plans or pathlib.Path(scratch))
        run(lm_path, store=options.store, replicas=options.replicas)
    return 0


def run(lm_path: pathlib.Path, *, store: bool, replicas: int) -> None:
    if os.environ.get("RAY_ADDRESS"):
        ray.init()
    else:
        ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False)
    try:
        serve_demo(put_plan(lm_path) if store else str(lm_path), replicas=replicas)
    finally:
        serve.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
