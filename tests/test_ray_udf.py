"""opcore.ray's UDFs and server called in this process (no cluster: Ray Data calls the same
objects in its actors; tests/test_ray_cluster.py runs them on one): batch formats in and out,
outputs as in-process, failing rows named by id, a missing plan folder, a changed fingerprint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy
import pytest

pytest.importorskip("ray", reason="opcore.ray needs Ray: pip install 'opcore[ray]' (requirements-dev.txt has it)")
pandas = pytest.importorskip("pandas", reason="Ray Data's pandas batches need pandas (ray[data])")
pyarrow = pytest.importorskip("pyarrow", reason="Ray Data's arrow batches need pyarrow (ray[data])")
torch = pytest.importorskip("torch")

from ray.data.extensions import ArrowTensorArray, TensorArray  # noqa: E402
from test_graph_generation import TinyDecoder  # noqa: E402

import opcore.graph  # noqa: E402
from opcore.errors import ArgumentError  # noqa: E402
from opcore.graph.errors import PlanFileError  # noqa: E402
from opcore.ray import GenerationPredictor, GenerationServer, PlanPredictor, RowError  # noqa: E402

# Ray's own deprecations (its DataContext reads deprecated settings when first made): not opcore's
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ray-plans")
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    batch = torch.export.Dim("batch")
    opcore.graph.capture(mlp, (torch.randn(4, 16),), dynamic_shapes=({0: batch},), measure=False).save(folder / "mlp")
    opcore.graph.capture(mlp, (torch.randn(4, 16),), measure=False).save(folder / "static")  # 4 rows a call
    opcore.graph.capture_lm(TinyDecoder(batch_size=2).eval(), measure=False).save(folder / "tiny.lm")
    return folder


def features(rows: int) -> numpy.ndarray:
    return numpy.random.default_rng(0).standard_normal((rows, 16)).astype(numpy.float32)


def ragged(rows: list[numpy.ndarray]) -> numpy.ndarray:
    out = numpy.empty(len(rows), dtype=object)
    out[:] = rows
    return out


def test_numpy_batches_give_what_the_plan_gives_in_process(plans):
    x = features(7)
    frozen = x.copy()
    frozen.setflags(write=False)  # as Ray's zero-copy batches come: torch warns on them (an error here)
    predict = PlanPredictor(plans / "mlp", threads=1)
    out = predict({"id": numpy.arange(7), "input": frozen, "note": numpy.array(list("abcdefg"))})
    want = opcore.graph.load(plans / "mlp")(torch.from_numpy(x)).numpy()
    assert set(out) == {"id", "note", "output", "opcore_actor", "opcore_load_id", "opcore_fingerprint_changes",
                        "opcore_threads"}  # fmt: skip
    numpy.testing.assert_allclose(out["output"], want, rtol=1e-6, atol=1e-6)
    assert out["note"].tolist() == list("abcdefg") and out["id"].tolist() == list(range(7))
    assert set(out["opcore_fingerprint_changes"]) == {""} and set(out["opcore_threads"]) == {1}
    assert predict.load_record.threads == 1 and torch.get_num_threads() == 1


@pytest.mark.parametrize("kind", ["pandas", "pyarrow"])
def test_pandas_and_arrow_batches_come_back_in_their_format(plans, kind):
    x = features(5)
    if kind == "pandas":
        batch = pandas.DataFrame({"id": numpy.arange(5), "input": TensorArray(x)})
    else:
        batch = pyarrow.table({"id": numpy.arange(5), "input": ArrowTensorArray.from_numpy(x)})
    out = PlanPredictor(plans / "mlp", threads=1)(batch)
    got = out["output"].to_numpy() if kind == "pandas" else out.column("output").combine_chunks().to_numpy()
    assert type(out) is type(batch)
    want = opcore.graph.load(plans / "mlp")(torch.from_numpy(x)).numpy()
    numpy.testing.assert_allclose(numpy.stack(list(got)), want, rtol=1e-6, atol=1e-6)


def test_a_static_batch_plan_runs_any_number_of_rows_padded(plans):
    x = features(6)  # captured with 4 rows: 4, then 2 padded to 4
    out = PlanPredictor(plans / "static", threads=1)({"id": numpy.arange(6), "input": x})
    plan = opcore.graph.load(plans / "static")
    want = numpy.concatenate(
        [plan(torch.from_numpy(x[:4])).numpy(), plan(torch.from_numpy(x[[4, 5, 5, 5]]))[:2].numpy()]
    )
    numpy.testing.assert_allclose(out["output"], want, rtol=1e-6, atol=1e-6)


def test_a_bad_row_fails_naming_its_id(plans):
    rows = list(features(4))
    rows[2] = numpy.zeros(15, numpy.float32)
    with pytest.raises(RowError, match=r"row id 12: column 'input' expected a row of shape \[16\]") as caught:
        PlanPredictor(plans / "mlp", threads=1)({"id": numpy.arange(10, 14), "input": ragged(rows)})
    assert caught.value.row_id == 12 and "on_error" in str(caught.value)


def test_on_error_record_keeps_the_other_rows(plans):
    rows = list(features(4))
    rows[1] = rows[1].astype(numpy.int64)  # an integer row for a float32 input
    out = PlanPredictor(plans / "mlp", threads=1, on_error="record")({"id": numpy.arange(4), "input": ragged(rows)})
    assert [bool(e) for e in out["opcore_error"]] == [False, True, False, False]
    assert "row id 1" in out["opcore_error"][1] and "int64" in out["opcore_error"][1]
    good = numpy.stack([rows[0], rows[2], rows[3]])
    want = opcore.graph.load(plans / "mlp")(torch.from_numpy(good)).numpy()
    numpy.testing.assert_allclose(out["output"][[0, 2, 3]], want, rtol=1e-6, atol=1e-6)
    assert not out["output"][1].any()


def test_a_missing_plan_folder_fails_at_start_naming_it(tmp_path):
    with pytest.raises(PlanFileError, match=r"the plan folder '.*nowhere.plan' does not exist on node .*put_plan"):
        PlanPredictor(tmp_path / "nowhere.plan")


@pytest.mark.parametrize(
    ("udf", "kwargs", "message"),
    [
        ("mlp", {"on_error": "skip"}, "argument 'on_error' expected 'raise'"),
        ("mlp", {"inputs": ("a", "b")}, "argument 'inputs' expected 1 column names"),
        ("tiny.lm", {}, "run it with opcore.ray.GenerationPredictor"),
    ],
)
def test_wrong_options_are_refused_at_start(plans, udf, kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        PlanPredictor(plans / udf, threads=1, **kwargs)


def test_a_batch_without_the_input_column_names_the_columns(plans):
    with pytest.raises(ArgumentError, match=r"expected the columns input, found columns id, x \(no input\)"):
        PlanPredictor(plans / "mlp", threads=1)({"id": numpy.arange(2), "x": features(2)})


def test_a_changed_fingerprint_is_reported_and_the_rows_still_run(plans, tmp_path):
    copy = shutil.copytree(plans / "mlp", tmp_path / "elsewhere.plan")
    document = json.loads((copy / "plan.json").read_text())
    document["fingerprint"]["cpu_isa"] = "another machine's ISA"
    (copy / "plan.json").write_text(json.dumps(document))
    predict = PlanPredictor(copy, threads=1)
    assert predict.load_record.fingerprint_changes == ("cpu_isa",)
    assert any("partitions recompiled" in note for note in predict.load_record.notes)
    x = features(3)
    out = predict({"id": numpy.arange(3), "input": x})
    assert set(out["opcore_fingerprint_changes"]) == {"cpu_isa"}
    want = opcore.graph.load(plans / "mlp")(torch.from_numpy(x)).numpy()
    numpy.testing.assert_allclose(out["output"], want, rtol=1e-6, atol=1e-6)


def prompts() -> list[numpy.ndarray]:
    return [numpy.array(p, numpy.int64) for p in ([3, 7, 9, 1], [5, 2], [8, 8, 8, 4, 11], [1, 30, 2])]


def test_generation_gives_each_prompt_what_generate_gives_it_alone(plans):
    out = GenerationPredictor(plans / "tiny.lm", threads=1, max_new_tokens=6)(
        {"id": numpy.arange(4), "input_ids": ragged(prompts())}
    )
    lm = opcore.graph.load(plans / "tiny.lm")
    for row, prompt in enumerate(prompts()):
        alone = lm.generate(torch.from_numpy(prompt)[None], max_new_tokens=6)[0, len(prompt) :]
        assert out["tokens"][row].tolist() == alone.tolist(), row
        assert out["input_ids"][row].tolist() == prompt.tolist()


def test_beam_search_runs_a_call_s_prompts_by_their_beams(plans):
    """num_beams=2 over a capture of 2 rows: one prompt a call, each what generate's beam search gives
    it alone; more beams than rows, or several sequences per prompt, refused at construction."""
    out = GenerationPredictor(plans / "tiny.lm", threads=1, max_new_tokens=5, num_beams=2)(
        {"id": numpy.arange(4), "input_ids": ragged(prompts())}
    )
    lm = opcore.graph.load(plans / "tiny.lm")
    for row, prompt in enumerate(prompts()):
        alone = lm.generate(torch.from_numpy(prompt)[None], max_new_tokens=5, num_beams=2)[0, len(prompt) :]
        assert out["tokens"][row].tolist() == alone.tolist(), row
    with pytest.raises(ArgumentError, match=r"num_beams.*from 1 to the captured batch_size \(2\).*batch_size="):
        GenerationPredictor(plans / "tiny.lm", threads=1, num_beams=3)
    with pytest.raises(ArgumentError, match=r"num_return_sequences.*one output row per prompt row"):
        GenerationPredictor(plans / "tiny.lm", threads=1, num_beams=2, num_return_sequences=2)
    with pytest.raises(ArgumentError, match=r"output_scores.*writes each row's tokens"):
        GenerationPredictor(plans / "tiny.lm", threads=1, output_scores=True)


def test_max_length_counts_each_row_s_own_prompt(plans):
    """max_length (it was passed to generate beside the predictor's own max_new_tokens, which won):
    each row up to max_length tokens with its own prompt, as generate gives the row alone, also where
    a long prompt in its group leaves the short one too little room in the shared cache (24 slots:
    18 + 6 against 2 + 22); a row not shorter than max_length, or max_length past the cache, is the
    row's error."""
    rows = [numpy.arange(1, 19, dtype=numpy.int64), numpy.array([5, 2], numpy.int64), *prompts()[:2]]
    out = GenerationPredictor(plans / "tiny.lm", threads=1, max_length=24)(
        {"id": numpy.arange(4), "input_ids": ragged(rows)}
    )
    lm = opcore.graph.load(plans / "tiny.lm")
    for row, prompt in enumerate(rows):
        alone = lm.generate(torch.from_numpy(prompt)[None], max_length=24)[0, len(prompt) :]
        assert out["tokens"][row][: len(alone)].tolist() == alone.tolist(), row
        assert len(alone) == 24 - len(prompt) and not out["tokens"][row][len(alone) :].any(), row
    assert GenerationPredictor(plans / "tiny.lm", threads=1, max_new_tokens=3, max_length=24).max_length is None
    for length, rows in ((25, prompts()[:1]), (4, [numpy.arange(1, 5, dtype=numpy.int64)])):
        with pytest.raises(RowError, match=rf"row id 0: max_length {length} counts the prompt"):
            GenerationPredictor(plans / "tiny.lm", threads=1, max_length=length)(
                {"id": numpy.arange(1), "input_ids": ragged(rows)}
            )
    with pytest.raises(ArgumentError, match="max_length"):
        GenerationPredictor(plans / "tiny.lm", threads=1, max_length=0)


def test_a_prompt_too_long_for_the_cache_fails_naming_its_row(plans):
    too_long = [*prompts()[:2], numpy.arange(20, dtype=numpy.int64)]
    with pytest.raises(
        RowError, match=r"row id 2: 20 prompt tokens \+ max_new_tokens 6 exceed the captured max_length 24"
    ):
        GenerationPredictor(plans / "tiny.lm", threads=1, max_new_tokens=6)(
            {"id": numpy.arange(3), "input_ids": ragged(too_long)}
        )


def test_an_id_outside_the_vocabulary_is_the_rows_error_and_the_others_run(plans):
    rows = [*prompts()[:2], numpy.array([3, 999], numpy.int64)]
    out = GenerationPredictor(plans / "tiny.lm", threads=1, max_new_tokens=4, on_error="record")(
        {"id": numpy.arange(3), "input_ids": ragged(rows)}
    )
    assert out["opcore_error"][2].startswith("row id 2: ") and "999" in out["opcore_error"][2]
    assert [bool(e) for e in out["opcore_error"][:2]] == [False, False]


def test_the_server_streams_what_generate_gives(plans):
    server = GenerationServer(plans / "tiny.lm", threads=1, max_new_tokens=5)
    prompt = [3, 7, 9, 1]
    want = opcore.graph.load(plans / "tiny.lm").generate(torch.tensor([prompt]), max_new_tokens=5)[0, 4:].tolist()
    assert list(server.stream(prompt)) == want
    assert server.generate(prompt, max_new_tokens=3) == want[:3]
    # a request's max_length (prompt included) over the server's default max_new_tokens; its own wins
    assert server.generate(prompt, max_length=7) == want[:3]
    assert server.generate(prompt, max_length=7, max_new_tokens=2) == want[:2]
    with pytest.raises(ArgumentError, match="argument 'session' expected one of generate's options"):
        server.generate(prompt, session=None)
    with pytest.raises(ArgumentError, match=r"num_beams.*1: the server streams.*GenerationPredictor"):
        server.generate(prompt, num_beams=2)
    assert server.generate(prompt, num_beams=1) == want
    assert server.info()["fingerprint_changes"] == []
    # generate's bans and biases in a request, sequence_bias in its JSON form ([ids, bias] pairs)
    lm = opcore.graph.load(plans / "tiny.lm")
    banned = lm.generate(torch.tensor([prompt]), max_new_tokens=5, bad_words_ids=[[want[0]]])[0, 4:].tolist()
    assert server.generate(prompt, bad_words_ids=[[want[0]]]) == banned and banned[0] != want[0]
    assert server.generate(prompt, sequence_bias=[[[want[0]], -100.0]]) == banned
    # requests run one after another reuse a session (the model's default one, free between them):
    # none is allocated per request
    server.generate(prompt, max_new_tokens=2)
    assert server.lm.default_session.length == len(prompt) + 1 and not server.lm._spare


def test_the_server_drafts_with_prompt_lookup_where_the_model_verifies(tmp_path):
    """A language model captured with draft_tokens: a request's prompt_lookup_num_tokens streams the
    tokens generate makes without it."""
    torch.manual_seed(0)
    opcore.graph.capture_lm(TinyDecoder(batch_size=2).eval(), measure=False, draft_tokens=3).save(tmp_path / "d.lm")
    server = GenerationServer(tmp_path / "d.lm", threads=1, max_new_tokens=10)
    prompt = [3, 4, 5, 3, 4, 5, 3, 4]
    want = server.generate(prompt)
    assert server.generate(prompt, prompt_lookup_num_tokens=3, max_matching_ngram_size=1) == want
    assert list(server.stream(prompt, prompt_lookup_num_tokens=2)) == want


def test_the_core_never_imports_ray(plans):
    script = (
        "import sys, torch, opcore, opcore.graph; "
        f"opcore.graph.load({str(plans / 'mlp')!r})(torch.zeros(2, 16)); "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_stored_plan_is_written_out_once_per_node_and_loads(plans, tmp_path, monkeypatch):
    from opcore.ray.sources import PlanInStore, resolve

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = plans / "mlp"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    stored = PlanInStore(files, "mlp.plan", "0" * 64)  # on a worker, files is what ray.get gives
    written = resolve(stored, "PlanPredictor")
    assert written == tmp_path / "opcore-ray" / ("0" * 64) / "mlp.plan"
    assert resolve(stored, "PlanPredictor") == written  # the second actor of the node finds it
    x = features(2)
    out = PlanPredictor(stored, threads=1)({"id": numpy.arange(2), "input": x})
    numpy.testing.assert_allclose(out["output"], opcore.graph.load(folder)(torch.from_numpy(x)).numpy(), rtol=1e-6)


def test_a_stored_language_model_holds_its_weights_once_and_is_written_out_linked(plans, tmp_path, monkeypatch):
    """An LM folder's two plans share one hard-linked weights file: put_plan's object holds its bytes
    once, and a node writes it out once, linked into both plans' folders."""
    import os

    from opcore.ray.sources import PlanInStore, folder_files, resolve

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = plans / "tiny.lm"
    files, digest = folder_files(folder)
    links = {path: target for path, target in files.items() if isinstance(target, str)}
    weights = sorted(p for p in files if p.endswith("weights.safetensors"))
    assert len(weights) == 2 and len(links) == 1 and set(links.items()) == {(weights[1], weights[0])}
    written = resolve(PlanInStore(files, "tiny.lm", digest), "GenerationPredictor")
    assert os.path.samefile(written / weights[0], written / weights[1])
    ids = torch.tensor([[5, 6, 7]])
    want = opcore.graph.load(folder).generate(ids, max_new_tokens=4)
    assert torch.equal(opcore.graph.load(written).generate(ids, max_new_tokens=4), want)
    with pytest.raises(PlanFileError, match="links 'x' to 'nothing', which it lacks"):
        resolve(PlanInStore({"x": "nothing"}, "bad.lm", "2" * 64), "GenerationPredictor")


def test_a_stored_plan_naming_a_file_outside_its_folder_is_refused(tmp_path, monkeypatch):
    from opcore.ray.sources import PlanInStore, resolve

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(PlanFileError, match=r"names the file '../escape' outside its folder"):
        resolve(PlanInStore({"../escape": b""}, "bad.plan", "1" * 64), "PlanPredictor")
    assert not (tmp_path / "opcore-ray" / "escape").exists()
    with pytest.raises(PlanFileError, match="the plan source is a int"):
        resolve(3, "PlanPredictor")


def test_the_server_answers_a_bad_http_request_with_400(plans):
    import asyncio

    from starlette.requests import Request

    server = GenerationServer(plans / "tiny.lm", threads=1)

    def request(body: bytes) -> Request:
        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        return Request({"type": "http", "method": "POST", "headers": [], "path": "/"}, receive)

    bad = asyncio.run(server(request(b'{"max_new_tokens": 4}')))
    assert bad.status_code == 400 and b"input_ids" in bad.body
    unknown = asyncio.run(server(request(b'{"input_ids": [3, 7], "streamer": 1}')))
    assert unknown.status_code == 400 and b"streamer" in unknown.body
    good = asyncio.run(server(request(b'{"input_ids": [3, 7, 9, 1], "max_new_tokens": 3}')))
    assert good.status_code == 200 and good.media_type == "text/plain"


def test_a_model_whose_config_asks_for_beams_is_served_with_one_beam_said(plans, tmp_path):
    """The server streams: a model whose generation config asks for beam search is refused unless the
    server is told num_beams=1 (a stream would refuse each request); the batch predictor searches with
    its beams, and writes tokens where the config asks generate for a record."""
    from dataclasses import replace

    lm = opcore.graph.load(plans / "tiny.lm")
    lm.defaults = replace(lm.defaults, num_beams=2, return_dict_in_generate=True)
    lm.save(tmp_path / "beams.lm")
    out = GenerationPredictor(tmp_path / "beams.lm", threads=1, max_new_tokens=4)(
        {"id": numpy.arange(2), "input_ids": ragged(prompts()[:2])}
    )
    for row, prompt in enumerate(prompts()[:2]):
        alone = lm.generate(torch.from_numpy(prompt)[None], max_new_tokens=4).sequences[0, len(prompt) :]
        assert out["tokens"][row].tolist() == alone.tolist()
    with pytest.raises(ArgumentError, match=r"num_beams.*generation_config.num_beams 2.*pass num_beams=1"):
        GenerationServer(tmp_path / "beams.lm", threads=1)
    server = GenerationServer(tmp_path / "beams.lm", threads=1, num_beams=1, max_new_tokens=4)
    want = lm.generate(torch.tensor([[3, 7, 9]]), max_new_tokens=4, num_beams=1).sequences[0, 3:].tolist()
    assert server.generate([3, 7, 9]) == want
