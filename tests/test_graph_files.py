"""opcore.graph save / load: plan.json + safetensors, a fresh process, tampered files refused."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from graph_models import LlamaBlock, seeded  # noqa: E402
from test_graph_partitioning import Chain, NumpyCompiler  # noqa: E402
from torch import Tensor, nn  # noqa: E402

import opcore  # noqa: E402
import opcore.graph  # noqa: E402
from opcore.cli import main  # noqa: E402
from opcore.graph import partitioning  # noqa: E402
from opcore.graph.errors import PlanFileError  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = seeded(LlamaBlock())
    x = torch.randn(2, 8, 32)
    # the estimated placement (partitions whatever the machine's timings), so the files hold partitions
    plan = opcore.graph.capture(model, (x,), measure=False)
    folder = tmp_path_factory.mktemp("plans") / "llama.plan"
    plan.save(folder)
    torch.save({"x": x, "want": model(x)[0].detach()}, folder.parent / "io.pt")
    return folder, plan, x, model


def test_save_writes_json_and_safetensors(saved):
    folder, plan, _, _ = saved
    document = json.loads((folder / "plan.json").read_text())
    assert document["format"] == "opcore.graph.plan" and document["schema_version"] == 1
    assert {"opcore", "libraries", "cpu_isa", "backends"} <= set(document["fingerprint"])
    assert (folder / "weights.safetensors").stat().st_size > 0
    assert len(document["graph"]["nodes"]) == len(plan.graph.nodes)
    symbolic = [v for v in document["graph"]["values"].values() if "dims" in v]
    assert symbolic


def test_load_in_a_fresh_process_without_the_model_class(saved):
    folder, _, _, _ = saved
    script = textwrap.dedent(
        f"""
        import torch, opcore.graph
        io = torch.load({str(folder.parent / "io.pt")!r})
        plan = opcore.graph.load({str(folder)!r})
        out, total = plan(io["x"])
        print((out - io["want"]).abs().max().item(), plan.timings.load)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    diff, _ = map(float, done.stdout.split())
    assert diff <= 1e-5


def test_loaded_plan_explains_the_same(saved):
    folder, plan, x, model = saved
    again = opcore.graph.load(folder)
    assert again.summary() == plan.summary()
    assert (again(x)[0] - model(x)[0]).abs().max().item() <= 1e-5
    assert again.timings.load > 0


def _tampered(folder, tmp_path, edit):
    copy = tmp_path / "copy.plan"
    copy.mkdir()
    for file in folder.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    document = json.loads((copy / "plan.json").read_text())
    edit(document)
    (copy / "plan.json").write_text(json.dumps(document))
    return copy


def test_tampered_kernel_reference_is_refused(saved, tmp_path):
    folder, _, _, _ = saved

    def edit(document):
        first = document["graph"]["nodes"][0]["name"]
        document["kernels"][first]["source"] = "os:system"

    with pytest.raises(PlanFileError, match="os:system.*not a registered kernel"):
        opcore.graph.load(_tampered(folder, tmp_path, edit))


def test_tampered_op_and_size_computation_are_refused(saved, tmp_path):
    folder, _, _, _ = saved

    def op(document):
        document["graph"]["nodes"][0]["op"] = "os:system"

    with pytest.raises(PlanFileError, match="os:system"):
        opcore.graph.load(_tampered(folder, tmp_path, op))

    def value(document):
        document["graph"]["nodes"][0]["args"][0] = {"callable": "os:system"}

    (tmp_path / "copy.plan").rename(tmp_path / "first.plan")
    with pytest.raises(PlanFileError, match="unexpected"):
        opcore.graph.load(_tampered(folder, tmp_path, value))


def test_other_schema_version_is_refused(saved, tmp_path):
    folder, _, _, _ = saved

    def edit(document):
        document["schema_version"] = 99

    with pytest.raises(PlanFileError, match="schema version 99") as info:
        opcore.graph.load(_tampered(folder, tmp_path, edit))
    assert isinstance(info.value, opcore.OpcoreError)


def test_a_weights_file_cut_short_or_damaged_is_a_plan_file_error(saved, tmp_path):
    """A copy that did not finish (the header whole, the data cut), bytes added after the data, or
    bytes changed in the header: a PlanFileError naming the file, not safetensors' own exception."""
    import shutil

    folder, _, _, _ = saved
    cut = tmp_path / "cut.plan"
    shutil.copytree(folder, cut)
    weights = cut / "weights.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 64])
    with pytest.raises(PlanFileError, match=r"weights.safetensors holds \d+ bytes where its header describes \d+"):
        opcore.graph.load(cut)
    longer = tmp_path / "longer.plan"
    shutil.copytree(folder, longer)
    (longer / "weights.safetensors").write_bytes(data + bytes(64))  # safetensors refuses what no header covers
    with pytest.raises(PlanFileError, match="weights.safetensors is not a readable safetensors.*not fully covered"):
        opcore.graph.load(longer)
    damaged = tmp_path / "damaged.plan"
    shutil.copytree(folder, damaged)
    (damaged / "weights.safetensors").write_bytes(data[:8] + b"[" + data[9:])
    with pytest.raises(PlanFileError, match="weights.safetensors is not a readable safetensors file"):
        opcore.graph.load(damaged)


def test_a_file_or_a_plan_json_that_is_no_plan_is_a_plan_file_error(tmp_path):
    """A path to a file (opcore plan /etc/passwd was an internal error), a plan.json holding a JSON list
    or binary bytes: a PlanFileError naming the path."""
    lone = tmp_path / "lone.json"
    lone.write_text("{}")
    with pytest.raises(PlanFileError, match=r"lone.json is a file, not a saved folder.*Fix: pass the folder Plan.save"):
        opcore.graph.load(lone)
    for name, data in (("list.plan", b"[1, 2]"), ("binary.plan", b"\xff\xfe\x00plan")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_bytes(data)
        with pytest.raises(PlanFileError, match=rf"{name}.plan.json is not (an opcore plan \(list\)|JSON)"):
            opcore.graph.load(tmp_path / name)


def test_saving_where_a_folder_cannot_be_is_a_plan_file_error(saved, tmp_path):
    """A file at the path: a PlanFileError naming it, and the file left as it was."""
    _, plan, _, _ = saved
    taken = tmp_path / "taken"
    taken.write_text("mine")
    with pytest.raises(PlanFileError, match=r"Plan.save\(\): cannot write a folder at .*taken"):
        plan.save(taken)
    assert taken.read_text() == "mine"


def test_fingerprint_mismatch_is_said(saved, tmp_path):
    folder, _, x, model = saved

    def edit(document):
        document["fingerprint"]["libraries"]["torch"] = "1.0.0"
        document["fingerprint"]["cpu_isa"] = "avx512 and amx"

    plan = opcore.graph.load(_tampered(folder, tmp_path, edit))
    note = next(n for n in plan.notes if n.startswith("fingerprint differs"))
    assert "cpu_isa" in note and "libraries" in note and "recompiled" in note
    assert plan.fingerprint_changes == ("cpu_isa", "libraries")  # what opcore.ray reports per row
    assert opcore.graph.load(folder).fingerprint_changes == ()
    assert (plan(x)[0] - model(x)[0]).abs().max().item() <= 1e-5


def test_partitions_are_saved_through_their_compiler(tmp_path, monkeypatch):
    compiler = NumpyCompiler()
    monkeypatch.setattr(partitioning, "compilers", lambda: {"reference": compiler})
    monkeypatch.setattr(partitioning, "COST", partitioning.Cost(call_us=0.0, boundary_us=0.0))
    model = seeded(Chain())
    x = torch.randn(4, 8)
    plan = opcore.graph.capture(model, (x,), rewrites=False, measure=False)
    plan.save(tmp_path / "chain.plan")
    assert (tmp_path / "chain.plan" / "p0.json").exists()
    compiler.compiled.clear()
    again = opcore.graph.load(tmp_path / "chain.plan")
    assert [p.name for p in again.partitions] == ["p0", "p1"] and len(compiler.compiled) == 2
    assert (again(x) - model(x)).abs().max().item() <= 1e-5


def test_cli_plan_shows_a_saved_plan(saved, capsys):
    folder, plan, _, _ = saved
    assert main(["plan", str(folder), "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "schema 1" in out and plan.summary() in out
    assert main(["plan", str(folder), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["summary"] == plan.summary() and record["fingerprint"]["opcore"] == opcore.__version__
    assert main(["plan", str(folder.parent / "nothing-here")]) != 0


class TiedHead(nn.Module):
    """GPT-2's shape: the output projection is the embedding's weight (one tensor, two uses)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: Tensor) -> Tensor:
        return self.head(torch.relu(self.emb(ids)))


def test_tied_weights_save_and_load(tmp_path):
    torch.manual_seed(0)
    model = TiedHead().eval()
    ids = torch.randint(0, 16, (2, 5))
    folder = tmp_path / "tied.plan"
    opcore.graph.capture(model, (ids,)).save(folder)  # safetensors refuses tensors sharing memory
    with torch.no_grad():
        torch.testing.assert_close(opcore.graph.load(folder)(ids), model(ids), rtol=1e-5, atol=1e-5)
