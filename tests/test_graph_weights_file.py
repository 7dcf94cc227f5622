"""A saved plan holds each weight once: constants over one tensor share an entry, a language model's
two plans share one weights file, and the graph runtimes' partitions refer to its bytes instead of
copying them — ONNX external data pointing into it, OpenVINO IR reading the plan's constants as
Parameters (opcore.graph.weights_file, opcore.partition_protocol.saved_bytes)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
onnx = pytest.importorskip("onnx", reason="the partition files are ONNX")
onnxruntime = pytest.importorskip("onnxruntime", reason="the partitions run on ONNX Runtime")
openvino = pytest.importorskip("openvino", reason="the partitions run on OpenVINO")
transformers = pytest.importorskip("transformers", reason="the decoder is a transformers model")

from graph_models import small_llama  # noqa: E402

import opcore.graph  # noqa: E402
from opcore.graph import weights_file  # noqa: E402
from opcore.partition_protocol import SavedBytes, saved_bytes, saving_weights  # noqa: E402

ORT = ("onnxruntime", "cpu")
OV = ("openvino", "cpu")


def llama(tied: bool = False, hidden: int = 128):
    """Every float matrix at least opcore_onnxruntime's EXTERNAL_BYTES (64 KiB): smaller ones are inline
    in the ONNX file, as ONNX Runtime's own exporters keep them."""
    return small_llama(vocab=320, hidden=hidden, kv_heads=4, tied=tied)  # vocab: a shape no other matrix has


def _ids(length: int = 10) -> Any:
    return torch.randint(3, 256, (1, length), generator=torch.Generator().manual_seed(0))


def _disk_bytes(folder: pathlib.Path) -> int:
    """Bytes on disk under ``folder``, a hard-linked file counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in folder.rglob("*"):
        if path.is_file():
            stat = path.stat()
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def _weight_bytes(model) -> int:
    return sum(t.numel() * t.element_size() for t in {t.data_ptr(): t for t in model.state_dict().values()}.values())


@pytest.fixture(scope="module", params=[ORT, OV], ids=["onnxruntime", "openvino"])
def saved_lm(request, tmp_path_factory):
    model = llama()
    lm = opcore.graph.capture_lm(model, max_length=32, backends=request.param, measure=False, prefill_partitions=True)
    assert lm.decode_plan.partitions and lm.prefill_plan.partitions, "both steps have graph-runtime partitions"
    folder = tmp_path_factory.mktemp("lm") / "llama.lm"
    lm.save(folder)
    want = lm.generate(_ids(), max_new_tokens=8, min_new_tokens=8)
    return model, lm, folder, want


def test_a_language_model_saves_its_weights_once(saved_lm):
    model, _, folder, _ = saved_lm
    decode, prefill = folder / "decode" / "weights.safetensors", folder / "prefill" / "weights.safetensors"
    assert decode.read_bytes() == prefill.read_bytes()
    if hasattr(os, "link"):
        assert os.path.samefile(decode, prefill), "one file, hard-linked into both plans' folders"
    data = sorted([*folder.rglob("*.onnx.data"), *folder.rglob("*.bin")])
    # the partitions' weights are the plan's constants: their files refer to the safetensors file
    assert sum(p.stat().st_size for p in data) < 0.02 * _weight_bytes(model), data
    assert _disk_bytes(folder) < 1.15 * _weight_bytes(model) + 2_000_000


def test_each_partition_file_loads_on_its_own_in_onnxruntime(saved_lm):
    """The external data points into weights.safetensors beside it (offset, length): a valid ONNX model."""
    _, lm, folder, _ = saved_lm
    if lm.decode_plan.partitions[0].backend != "onnxruntime":
        pytest.skip("an ONNX Runtime partition's files")
    document = json.loads((folder / "decode" / "plan.json").read_text())
    referring = [p for p in document["partitions"] if p["record"].get("constants")]
    assert referring, "the decode partitions refer to the plan's constants"
    record = referring[0]["record"]
    path = folder / "decode" / record["files"][0]
    model = onnx.load(str(path), load_external_data=False)
    locations = {
        entry.value for tensor in model.graph.initializer for entry in tensor.external_data if entry.key == "location"
    }
    assert "weights.safetensors" in locations
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    compiled = next(p for p in lm.decode_plan.partitions if p.name == referring[0]["name"]).compiled
    # the initializers read from the file are the bytes of the plan's constants
    for initializer, constant in record["constants"].items():
        tensor = next(t for t in model.graph.initializer if t.name == initializer)
        offset = int(next(e.value for e in tensor.external_data if e.key == "offset"))
        length = int(next(e.value for e in tensor.external_data if e.key == "length"))
        with open(folder / "decode" / "weights.safetensors", "rb") as file:
            file.seek(offset)
            raw = file.read(length)
        assert raw == compiled.externals[initializer].tobytes(), (initializer, constant)
    assert session.get_inputs()


def test_each_ir_reads_the_plans_constants_as_parameters(saved_lm):
    """An OpenVINO partition's IR alone: its inputs, then one Parameter per plan constant, whose bytes
    the record locates in weights.safetensors; fed those, it computes what the partition computes."""
    _, lm, folder, _ = saved_lm
    if lm.decode_plan.partitions[0].backend != "openvino":
        pytest.skip("an OpenVINO partition's files")
    document = json.loads((folder / "decode" / "plan.json").read_text())
    saved = next(p for p in document["partitions"] if p["record"].get("weights"))
    record = saved["record"]
    model = openvino.Core().read_model(str(folder / "decode" / record["files"][0]))
    names = [p.get_friendly_name() for p in model.get_parameters()]
    assert names[-len(record["weights"]) :] == list(record["weights"])
    compiled = next(p for p in lm.decode_plan.partitions if p.name == saved["name"]).compiled
    raw = (folder / "decode" / "weights.safetensors").read_bytes()
    by_constant = {c: a for _, c, a in compiled.weights}
    for entry in record["weights"].values():
        assert raw[entry["offset"] : entry["offset"] + entry["length"]] == by_constant[entry["constant"]].tobytes()


def test_the_loaded_model_generates_the_same_in_a_fresh_process(saved_lm, tmp_path):
    _, _, folder, want = saved_lm
    torch.save(_ids(), tmp_path / "ids.pt")
    script = (
        "import sys, torch, opcore.graph\n"
        "lm = opcore.graph.load(sys.argv[1])\n"
        "print([n for p in (lm.prefill_plan, lm.decode_plan) for n in p.notes if 'loading its files failed' in n])\n"
        "torch.save(lm.generate(torch.load(sys.argv[2]), max_new_tokens=8, min_new_tokens=8), sys.argv[3])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder), str(tmp_path / "ids.pt"), str(tmp_path / "out.pt")],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.stdout.strip() == "[]", done.stdout  # every partition loaded from its files
    assert torch.equal(torch.load(tmp_path / "out.pt"), want)


def test_loaded_partitions_share_the_plans_weights_and_save_again(saved_lm, tmp_path):
    model, _, folder, want = saved_lm
    lm = opcore.graph.load(folder)
    plan = lm.decode_plan
    shared = 0
    for record in plan.partitions:
        compiled = record.compiled
        if record.backend == "onnxruntime":
            pairs = [(compiled.externals[i], c) for i, c in compiled.constants.items()]
        else:
            pairs = [(array, c) for _, c, array in compiled.weights]
        for array, constant in pairs:
            assert numpy.shares_memory(array, plan.constants[constant].numpy())
            shared += 1
    assert shared, "the loaded partitions take their initializers from the plan's constants"
    # the prefill's dynamic partitions load as they were captured: no static compiles of a prompt length
    assert lm.prefill_plan.options.shape_compiles is False
    assert all(getattr(p.compiled, "_shapes", None) is None for p in lm.prefill_plan.partitions)
    # prefill and decode hold one copy in memory
    for name in lm.prefill_plan.graph.constants:
        source = lm.prefill_plan.graph.sources.get(name)
        twin = next((n for n, s in plan.graph.sources.items() if s == source), None) if source else None
        if twin is not None and twin in plan.constants:
            assert lm.prefill_plan.constants[name].data_ptr() == plan.constants[twin].data_ptr()
    lm.save(tmp_path / "again")  # a loaded model saves again: the references are rewritten
    assert _disk_bytes(tmp_path / "again") < 1.15 * _weight_bytes(model) + 2_000_000
    again = opcore.graph.load(tmp_path / "again")
    assert torch.equal(again.generate(_ids(), max_new_tokens=8, min_new_tokens=8), want)


def test_a_loaded_model_saves_over_its_own_folder(saved_lm, tmp_path):
    """Saving into the folder a model was loaded from: the files are written beside and renamed over
    (a runtime may still map the old ones), and the folder loads again to the same tokens."""
    import shutil

    _, _, folder, want = saved_lm
    copy = tmp_path / "in-place"
    shutil.copytree(folder, copy)
    lm = opcore.graph.load(copy)
    lm.save(copy)
    assert torch.equal(lm.generate(_ids(), max_new_tokens=8, min_new_tokens=8), want)
    assert not [p for p in copy.rglob(".*saving*")], "no staged file left"
    again = opcore.graph.load(copy)
    assert not [n for p in (again.prefill_plan, again.decode_plan) for n in p.notes if "failed" in n]
    assert torch.equal(again.generate(_ids(), max_new_tokens=8, min_new_tokens=8), want)


def test_a_record_naming_a_missing_constant_is_compiled_again(saved_lm, tmp_path):
    """A partition whose record names a constant the plan lacks does not load from its files: it is
    compiled again from the plan, and the note says why."""
    import shutil

    _, _, folder, want = saved_lm
    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    plan_file = copy / "decode" / "plan.json"
    document = json.loads(plan_file.read_text())
    record = next(p for p in document["partitions"] if p["record"].get("constants") or p["record"].get("weights"))
    if "constants" in record["record"]:  # ONNX Runtime: initializer -> constant
        first = next(iter(record["record"]["constants"]))
        record["record"]["constants"][first] = "no_such_constant"
    else:  # OpenVINO: Parameter -> {"constant": ...}
        first = next(iter(record["record"]["weights"]))
        record["record"]["weights"][first]["constant"] = "no_such_constant"
    plan_file.write_text(json.dumps(document))
    lm = opcore.graph.load(copy)
    notes = [n for n in lm.decode_plan.notes if "loading its files failed" in n]
    assert notes and "no_such_constant" in notes[0], lm.decode_plan.notes
    assert torch.equal(lm.generate(_ids(), max_new_tokens=8, min_new_tokens=8), want)


def test_tied_weights_are_one_entry_of_the_file(tmp_path):
    model = llama(tied=True)
    ids = _ids()
    plan = opcore.graph.capture(model, (ids,), measure=False)
    plan.save(tmp_path / "tied")
    entries = weights_file.header(tmp_path / "tied" / "weights.safetensors")
    table = model.model.embed_tokens.weight
    assert sum(1 for e in entries.values() if e["shape"] == tuple(table.shape)) == 1
    loaded = opcore.graph.load(tmp_path / "tied")
    torch.testing.assert_close(loaded(ids).logits, plan(ids).logits, rtol=0, atol=0)


def test_constants_over_one_tensor_are_saved_once_and_load_as_one(tmp_path):
    """Two constants over the same memory (a loaded plan's constants edited by hand, a rewrite's): one
    entry in the file, the second name an alias in plan.json, one tensor again after load."""
    model = llama()
    ids = _ids()
    opcore.graph.capture(model, (ids,), measure=False).save(tmp_path / "plan")
    plan = opcore.graph.load(tmp_path / "plan")
    before = plan(ids).logits
    big = [n for n in plan.graph.constants if plan.constants[n].numel() >= 256 * 128]
    first, second = big[0], next(n for n in big[1:] if plan.constants[n].shape == plan.constants[big[0]].shape)
    plan.constants[second] = plan.constants[first]
    plan.refresh()
    want = plan(ids).logits
    assert not torch.equal(want, before), "the edit changed the plan's weights"
    plan.save(tmp_path / "aliased")
    keys = json.loads((tmp_path / "aliased" / "plan.json").read_text())["weights"]["keys"]
    assert keys == {second: first}
    assert second not in weights_file.header(tmp_path / "aliased" / "weights.safetensors")
    loaded = opcore.graph.load(tmp_path / "aliased")
    assert loaded.constants[second].data_ptr() == loaded.constants[first].data_ptr()
    torch.testing.assert_close(loaded(ids).logits, want, rtol=0, atol=0)


def test_saved_bytes_answers_only_for_a_constants_whole_memory_while_saving():
    array = numpy.arange(16, dtype=numpy.float32)
    place = SavedBytes("weights.safetensors", 128, 64)
    assert saved_bytes(array) is None  # no plan is saving
    with saving_weights({(array.__array_interface__["data"][0], array.nbytes): place}):
        assert saved_bytes(array) == place
        assert saved_bytes(array.reshape(4, 4)) == place  # a C-contiguous view of all of it
        assert saved_bytes(array[:8]) is None and saved_bytes(array[::2]) is None
        assert saved_bytes(array.copy()) is None
    assert saved_bytes(array) is None


@pytest.mark.parametrize("backends", [ORT, OV], ids=["onnxruntime", "openvino"])
def test_int4_codes_are_saved_once_and_loaded_into_the_partition(backends, tmp_path):
    """The partitions read the plan's packed codes (OpenVINO: a u4 Constant over the uint8 bytes;
    ONNX Runtime: MatMulNBits' initializer), so the saved folder holds them once, and the loaded plan
    computes the same logits. OpenVINO's IR refers to every plan constant; an ONNX file to those of
    at least EXTERNAL_BYTES (smaller ones are inline in it)."""
    from opcore_onnxruntime.graph import EXTERNAL_BYTES

    model = llama(hidden=512)  # int4 codes of 512 x 256 bytes: over EXTERNAL_BYTES
    ids = _ids()
    plan = opcore.graph.capture(model, (ids,), backends=backends, weights="int4", group_size=32, measure=False)
    assert plan.partitions
    want = plan(ids).logits
    folder = tmp_path / "int4"
    plan.save(folder)
    if backends == OV:
        table = (folder / "weights.safetensors").stat().st_size
        assert sum(f.stat().st_size for f in folder.glob("*.bin")) < 0.02 * table
    else:
        codes = [
            {e.key: e.value for e in t.external_data}.get("location")
            for path in folder.glob("*.onnx")
            for t in onnx.load(str(path), load_external_data=False).graph.initializer
            if t.data_type == onnx.TensorProto.UINT8 and numpy.prod(t.dims) >= EXTERNAL_BYTES
        ]
        assert codes and set(codes) == {"weights.safetensors"}, codes
    loaded = opcore.graph.load(folder)
    assert not [n for n in loaded.notes if "failed" in n], loaded.notes
    torch.testing.assert_close(loaded(ids).logits, want, rtol=0, atol=0)


def test_a_table_keeps_views_of_one_memory_apart_unless_they_are_the_same_tensor(tmp_path):
    """Same memory, dtype and shape but other strides (a square weight and its transpose) are two
    entries; the same tensor in two plans is one, under the first plan's name."""
    from types import SimpleNamespace

    w = torch.arange(16.0).reshape(4, 4)
    first = SimpleNamespace(graph=SimpleNamespace(constants=("w", "wt")), constants={"w": w, "wt": w.t()})
    second = SimpleNamespace(graph=SimpleNamespace(constants=("w", "head")), constants={"w": w * 2, "head": w})
    table = weights_file.weight_table([first, second])
    assert table.keys == ({"w": "w", "wt": "wt"}, {"w": "1.w", "head": "w"})
    index = weights_file.write(table, tmp_path / "weights.safetensors")
    assert set(index) == {"w", "wt", "1.w"}
    read = weights_file.read(tmp_path, ["w", "wt", "1.w"], {}, "cpu", {}, {})
    assert torch.equal(read["w"], w) and torch.equal(read["wt"], w.t()) and torch.equal(read["1.w"], w * 2)
