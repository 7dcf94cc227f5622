"""opcore plans on a local Ray cluster (2 CPUs): examples/ray_batch.py's and ray_serve.py's code run
as the tests (outputs as in-process, every row exactly once, one load per actor, tokens streamed),
an actor killed mid-job, a missing plan folder. Marked slow: the cluster takes ~15 s to start."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import socket
import sys
import time
from collections import Counter, defaultdict
from typing import Any

import numpy
import pytest

ray = pytest.importorskip("ray", reason="opcore.ray needs Ray: pip install 'opcore[ray]' (requirements-dev.txt has it)")
pytest.importorskip("ray.serve", reason="the serving example needs ray[serve]")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the examples capture a small Llama from its config")

import opcore.graph  # noqa: E402
from opcore.ray import PlanPredictor, put_plan  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")]

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_example(name: str) -> Any:
    """examples/<name>.py as the module <name> (ray_serve imports ray_batch by that name)."""
    if str(ROOT / "examples") not in sys.path:
        sys.path.insert(0, str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cluster(plans, tmp_path_factory):  # the plans captured first: the cluster's wall time is the cluster's
    started = time.perf_counter()
    environ = {
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),  # this checkout's opcore
        "TMPDIR": str(tmp_path_factory.mktemp("workers-tmp")),  # where put_plan's files are written out
    }
    ray.init(
        num_cpus=2,
        object_store_memory=200 * 1024**2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": environ},
    )
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # DiesOnce below, without tests/ on the path
    yield
    from ray import serve

    serve.shutdown()
    ray.shutdown()
    print(f"\nlocal cluster: {time.perf_counter() - started:.1f} s wall from start to shutdown")


@pytest.fixture(scope="module")
def batch_example():
    return load_example("ray_batch")


@pytest.fixture(scope="module")
def plans(batch_example, tmp_path_factory):
    return batch_example.save_plans(tmp_path_factory.mktemp("ray-cluster"))


def in_process(plan_path: pathlib.Path, rows: list[dict]) -> numpy.ndarray:
    x = torch.from_numpy(numpy.stack([row["input"] for row in rows]))
    with torch.no_grad():
        return opcore.graph.load(plan_path)(x).numpy()


def test_the_batch_example_gives_every_row_once_as_in_process_one_load_per_actor(cluster, batch_example, plans):
    plan_path, lm_path = plans
    out, generated = batch_example.demo(str(plan_path), put_plan(lm_path))  # the LM through the object store
    assert [row["id"] for row in out] == list(range(batch_example.ROWS))  # sorted ids: none lost, none twice
    rows = batch_example.rows(batch_example.ROWS)
    got = numpy.stack([row["output"] for row in out])
    numpy.testing.assert_allclose(got, in_process(plan_path, rows), rtol=1e-5, atol=1e-6)
    loads = defaultdict(set)
    for row in out:
        loads[row["opcore_actor"]].add(row["opcore_load_id"])
    assert 1 <= len(loads) <= 2 and all(len(ids) == 1 for ids in loads.values())
    assert {row["opcore_threads"] for row in out} == {1}  # num_cpus=1 per actor
    assert {row["opcore_fingerprint_changes"] for row in out} == {""}

    lm = opcore.graph.load(lm_path)
    assert [row["id"] for row in generated] == list(range(batch_example.PROMPTS))
    for row in generated:
        prompt = torch.tensor(row["input_ids"])[None]
        alone = lm.generate(prompt, max_new_tokens=8)[0, prompt.shape[1] :]
        assert row["tokens"].tolist() == alone.tolist()


class DiesOnce(PlanPredictor):
    """The plan's UDF, whose process exits (os._exit: no cleanup, as a node lost) on the batch holding
    row ``victim``, the first time only (``marker`` remembers it across the restart)."""

    def __init__(self, plan: Any, *, marker: str, victim: int, **options: Any) -> None:
        super().__init__(plan, **options)
        self.marker, self.victim = pathlib.Path(marker), victim

    def __call__(self, batch: Any) -> Any:
        if self.victim in batch["id"] and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


def test_an_actor_killed_mid_job_is_restarted_and_every_row_comes_once(cluster, batch_example, plans, tmp_path):
    # and on a plan whose fingerprint says another machine saved it (the worker recompiles and says
    # so), sent through the object store, with num_cpus=2 as the actor's threads
    copy = shutil.copytree(plans[0], tmp_path / "elsewhere.plan")
    document = json.loads((copy / "plan.json").read_text())
    document["fingerprint"]["cpu_isa"] = "another machine's ISA"
    (copy / "plan.json").write_text(json.dumps(document))
    rows = batch_example.rows(48)
    marker = tmp_path / "killed"
    out = (
        ray.data.from_items(rows)
        .map_batches(
            DiesOnce,
            fn_constructor_args=(put_plan(copy),),
            fn_constructor_kwargs={"marker": str(marker), "victim": 20},
            compute=ray.data.ActorPoolStrategy(size=1),
            num_cpus=2,  # the actor's threads: 2
            batch_size=8,
            batch_format="numpy",
        )  # Ray Data's actor pool: max_restarts=-1, max_task_retries=-1 unless told otherwise
        .take_all()
    )
    assert marker.exists()  # the actor did die
    counts = Counter(int(row["id"]) for row in out)
    assert sorted(counts) == list(range(48)) and set(counts.values()) == {1}
    out.sort(key=lambda row: row["id"])
    numpy.testing.assert_allclose(
        numpy.stack([r["output"] for r in out]), in_process(plans[0], rows), rtol=1e-5, atol=1e-6
    )
    loads = defaultdict(set)
    for row in out:
        loads[row["opcore_actor"].rsplit(":", 1)[1]].add(row["opcore_load_id"])
    # the batches before the kill came from the first process, the rest from the restarted one, which
    # loaded the plan again; the batch that died is retried there, not returned twice
    assert marker.read_text() in loads and len(loads) == 2 and all(len(ids) == 1 for ids in loads.values())
    assert {row["opcore_fingerprint_changes"] for row in out} == {"cpu_isa"}
    assert {int(row["opcore_threads"]) for row in out} == {2}


def test_a_missing_plan_folder_fails_the_job_at_actor_start_naming_it(cluster, batch_example, tmp_path):
    missing = tmp_path / "never-saved.plan"
    with pytest.raises(Exception, match=r"the plan folder '.*never-saved\.plan' does not exist on node"):
        batch_example.run_plan(str(missing), 4, concurrency=1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_serve_example_streams_what_generate_gives(cluster, plans):
    serve_example = load_example("ray_serve")
    streamed = serve_example.serve_demo(str(plans[1]), max_new_tokens=6, port=free_port())
    lm = opcore.graph.load(plans[1])
    prompts = [*serve_example.PROMPTS, serve_example.PROMPTS[0]]  # the handle's, then the first over HTTP
    for prompt, tokens in zip(prompts, streamed, strict=True):
        assert tokens == lm.generate(torch.tensor([prompt]), max_new_tokens=6)[0, len(prompt) :].tolist()
