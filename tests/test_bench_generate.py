"""bench/generate.py's arguments and its bandwidth arithmetic (the benchmark itself runs by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("generate")


def test_the_defaults_are_the_issues_runs(bench):
    options = bench.parse_args([])
    assert options.device == "cpu"
    assert options.models == ("small", "135m", "0.5b")
    assert (options.batches, options.threads) == ((1, 4), (1, 2))
    assert (options.prompt, options.new, options.skip, options.optimum) == (128, 128, set(), False)
    assert options.dtype == "float32" and bench.parse_args(["--dtype", "bfloat16"]).dtype == "bfloat16"


def test_cuda_defaults_to_the_small_models_at_batch_1(bench):
    options = bench.parse_args(["--device", "cuda"])
    assert (options.models, options.batches, options.threads) == (("small", "135m"), (1,), (1,))


def test_options_are_parsed(bench):
    argv = ["--models", "small", "--batches", "1", "--threads", "1", "--rounds", "2", "--skip", "compile,static"]
    options = bench.parse_args([*argv, "--prompt", "16", "--new", "8"])
    assert (options.models, options.batches, options.threads, options.rounds) == (("small",), (1,), (1,), 2)
    assert (options.skip, options.prompt, options.new) == ({"compile", "static"}, 16, 8)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "small,7b"], "--models: unknown 7b; expected some of small, 135m, 0.5b"),
        (["--batches", "1,four"], "--batches: expected comma-separated integers"),
        (["--threads", "0"], "--threads: expected integers >= 1"),
        (["--skip", "eager"], "--skip: unknown eager"),
        (["--new", "1"], "--new: expected >= 2"),
        (["--device", "cuda", "--optimum"], "--optimum runs OpenVINO on the CPU"),
        (["--dtype", "bfloat16", "--weights", "int8"], "--weights quantizes a float32 model"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_device_cuda_without_a_gpu_exits_2_with_the_reason(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench, "no_gpu_reason", lambda: "no CUDA build of torch")
    assert bench.main(["--device", "cuda"]) == 2
    assert "no usable GPU: no CUDA build of torch" in capsys.readouterr().err


def test_the_kv_cache_bytes(bench):
    # 0.5b at batch 1, 256 positions: 2 (keys, values) x 24 layers x 2 kv heads x 64 x 256 x 4 bytes
    assert bench.kv_cache_bytes(24, 1, 2, 64, 256) == 2 * 24 * 2 * 64 * 256 * 4 == 6_291_456
    assert bench.kv_cache_bytes(24, 4, 2, 64, 256) == 4 * 6_291_456
    assert bench.kv_cache_bytes(24, 1, 2, 64, 256, dtype_bytes=2) == 6_291_456 // 2


def test_tied_embeddings_count_the_table_once_as_the_lm_head(bench):
    shape = bench.SHAPES["0.5b"]
    model = shape.build(256, "meta")
    assert bench.tied(model)
    params = sum(p.numel() for p in model.parameters())
    assert params == 494_032_768  # Qwen2-0.5B's count
    assert bench.weight_bytes_read(model) == 4 * params
    assert bench.decode_bytes(4 * params, shape, 1, 256) == 4 * params + 6_291_456


def test_an_untied_input_embedding_is_not_counted(bench):
    model = bench.SHAPES["small"].build(256, "meta")
    assert not bench.tied(model)
    params = sum(p.numel() for p in model.parameters())
    assert bench.weight_bytes_read(model) == 4 * (params - 4096 * 512)


def test_the_135m_shape(bench):
    model = bench.SHAPES["135m"].build(256, "meta")
    assert bench.tied(model)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # SmolLM2-135M's count


def test_a_mixture_of_experts_counts_only_the_experts_a_step_can_read(bench):
    model = bench.SHAPES["moe"].build(256, "meta")
    params = sum(p.numel() for p in model.parameters())
    # per layer 16 experts, each gate and up (2 x 256 x 512) and down (512 x 256)
    experts = 8 * 16 * 3 * 256 * 512
    table = 8000 * 512  # untied: one row read
    assert bench.weight_bytes_read(model, 1) == 4 * (params - table - experts * 12 // 16)  # 4 of 16 read
    assert bench.weight_bytes_read(model, 2) == 4 * (params - table - experts * 8 // 16)
    assert bench.weight_bytes_read(model, 4) == 4 * (params - table)  # 4 rows x 4: every expert may be read
    assert bench.unread_expert_bytes(bench.SHAPES["small"].build(256, "meta"), 1) == 0  # no experts
    wide = bench.SHAPES["moe64"].build(256, "meta")
    experts = 4 * 64 * 3 * 768 * 1024
    params = sum(p.numel() for p in wide.parameters())
    assert params == 631_121_408
    assert bench.weight_bytes_read(wide, 1) == 4 * (params - 8000 * 1024 - experts * 56 // 64)  # 8 of 64


def test_the_ceiling_is_bandwidth_over_bytes_per_step_for_every_row(bench):
    assert bench.ceiling_tokens_per_s(2 * 10**9, 20e9, 1) == pytest.approx(10.0)
    assert bench.ceiling_tokens_per_s(2 * 10**9, 20e9, 4) == pytest.approx(40.0)


def test_scaled_logits_are_the_same_model_times_the_scale(bench):
    import transformers

    shape = bench.Shape("tiny", "tiny", "llama", 16, 1, 2, 1, 32, 64, True)
    torch.manual_seed(0)
    plain = transformers.LlamaForCausalLM(shape.config(32)).eval()
    scaled = shape.build(32)
    ids = torch.tensor([[3, 5, 7, 9]])
    with torch.no_grad():
        assert torch.allclose(scaled(ids).logits, bench.LOGIT_SCALE * plain(ids).logits, rtol=1e-5, atol=1e-6)


def test_the_first_differing_step(bench):
    reference = torch.tensor([[1, 2, 3, 4, 5]])
    assert bench.first_difference(reference.clone(), reference, 2) == "="
    assert bench.first_difference(torch.tensor([[1, 2, 3, 4, 6]]), reference, 2) == "step 2"
    assert bench.first_difference(None, reference, 2) == "-"


def _column(bench, label, ttft, decode, build_s=None):
    column = bench.Column(label, build_s=build_s)
    column.samples = [bench.Sample(ttft, decode, torch.zeros(1, 1), 0.0)]
    return column


def test_the_targets_are_judged_against_the_better_eager_and_compile(bench):
    columns = [
        _column(bench, "eager dynamic", 0.100, 100.0),
        _column(bench, "eager static", 0.080, 90.0),
        _column(bench, "compile", 0.090, 200.0, build_s=60.0),
        _column(bench, "opcore", 0.050, 260.0, build_s=30.0),
    ]
    group = bench.Group(1, 1, columns, ceiling=400.0, step_bytes=1, bandwidth=1.0, load=0.0)
    found = bench.targets(bench.SHAPES["small"], group)
    assert found == [
        "decode 2.60x eager >= 2.5 met",
        "TTFT 0.62x eager <= 0.7 met",  # against eager static's 80 ms, the better TTFT
        "decode 1.30x compile's >= 1 met",
        "capture 30.0 s = 0.50 of compile's 60.0 s <= 1/3 MISSED",
    ]
    assert bench.targets(bench.SHAPES["0.5b"], group)[0] == "decode 0.65 of the bandwidth ceiling >= 0.9 MISSED"


def test_the_unmeasured_capture_is_judged_on_the_compile_targets_beside_the_measured_one(bench):
    assert bench.parse_args(["--unmeasured"]).unmeasured and not bench.parse_args([]).unmeasured
    columns = [
        _column(bench, "eager dynamic", 0.100, 100.0),
        _column(bench, "compile", 0.090, 200.0, build_s=60.0),
        _column(bench, "opcore", 0.050, 260.0, build_s=30.0),
        _column(bench, bench.UNMEASURED, 0.060, 250.0, build_s=18.0),
    ]
    group = bench.Group(1, 1, columns, ceiling=400.0, step_bytes=1, bandwidth=1.0, load=0.0)
    found = bench.targets(bench.SHAPES["135m"], group)
    assert found[-1] == (
        "opcore unmeasured: decode 2.50x eager, TTFT 0.60x eager, 1.25x compile's decode,"
        " capture 18.0 s = 0.30 of compile's <= 1/3 met"
    )
    columns[-1].build_s = 21.0
    assert bench.targets(bench.SHAPES["135m"], group)[-1].endswith("capture 21.0 s = 0.35 of compile's <= 1/3 MISSED")


def test_the_compile_column_starts_from_an_empty_inductor_cache(bench):
    import os

    environ: dict[str, str] = {}
    said = bench.empty_inductor_cache(environ)
    folder = environ["TORCHINDUCTOR_CACHE_DIR"]
    assert os.path.isdir(folder) and not os.listdir(folder), folder
    assert "new empty folder" in said
    again: dict[str, str] = {}
    bench.empty_inductor_cache(again)
    assert again["TORCHINDUCTOR_CACHE_DIR"] != folder  # a new one every run
    given = {"TORCHINDUCTOR_CACHE_DIR": "/somewhere/kept"}
    assert "as set" in bench.empty_inductor_cache(given)
    assert given == {"TORCHINDUCTOR_CACHE_DIR": "/somewhere/kept"}  # the user's choice stands


def test_the_prompt_flops_count_every_matrix_per_token_and_the_lm_head_once(bench):
    shape = bench.SHAPES["small"]
    model = shape.build(64, device="meta")
    layer = 4 * shape.hidden * shape.hidden + 3 * shape.hidden * shape.intermediate  # q, k, v, o (8 kv heads), MLP
    prompt = 16
    want = 2 * shape.layers * layer * prompt + 2 * shape.vocab * shape.hidden
    want += 4 * shape.layers * shape.heads * shape.head_dim * prompt * (prompt + 1) // 2
    assert bench.prompt_flops(model, shape, 1, prompt) == want
    assert bench.prompt_flops(model, shape, 3, prompt) == 3 * want


def test_a_mixture_of_experts_prompt_counts_the_top_k_share_of_the_experts(bench):
    shape = bench.SHAPES["moe"]
    model = shape.build(64, device="meta")
    dense = bench.prompt_flops(model, shape, 1, 1)
    experts = [p for p in model.parameters() if p.ndim == 3]
    assert experts
    stored = sum(p.numel() for p in experts)
    every = sum(p.numel() for p in model.parameters() if p.ndim == 2) - 2 * shape.vocab * shape.hidden  # tables
    attention = 4 * shape.layers * shape.heads * shape.head_dim
    # one token: its top_k experts of each layer, every other matrix, the lm_head once
    assert dense == 2 * (every + stored * shape.top_k // shape.experts) + 2 * shape.vocab * shape.hidden + attention


def test_the_compute_floor_row_and_the_ttft_target_say_where_no_prefill_goes_below(bench):
    columns = [_column(bench, "eager dynamic", 0.100, 100.0), _column(bench, "opcore", 0.080, 260.0, build_s=3.0)]
    group = bench.Group(1, 1, columns, ceiling=400.0, step_bytes=1, bandwidth=1.0, load=0.0)
    group.flops, group.rate = 7_500_000_000, 1e11  # a floor of 75 ms
    rows = bench.rows_of(group, 1)
    floor = next(row for row in rows if row[0] == "compute floor")
    assert len(floor) == len(bench.HEADER)
    assert floor[3:5] == ("75.0", "0.75x") and floor[-1] == "prompt 7.50 GFLOP at 100.0 GFLOP/s"
    assert "TTFT 0.80x eager <= 0.7 (compute floor 0.75x) MISSED" in bench.targets(bench.SHAPES["small"], group)


def test_the_matmul_rate_is_two_n_cubed_over_the_time(bench):
    rate = bench.matmul_rate("cpu", torch.float32, size=64, repeats=2)
    assert 1e6 < rate < 1e14


def test_the_clear_agreement_counts_only_positions_whose_choice_the_error_cannot_flip(bench):
    """A flip at a near-tie is not counted among the clear positions; a flip where fp32's top two are
    far apart is; no clear position at all is said."""
    generator = torch.Generator().manual_seed(0)
    want = torch.randn(64, 100, generator=generator)
    want[:32, 0] += 20.0  # 32 rows with a clear winner
    want[32:, 1] = want[32:, 0] = want[32:].max(-1).values + 1.0  # 32 exact ties between 0 and 1
    got = want + 0.01 * torch.randn(64, 100, generator=generator)
    got[32:, 1] += 0.05  # every tie goes to 1
    assert bench.clear_agreement(got, want) == "1.0000 over the 32 of 64 whose fp32 top-1 is clear"
    got[:4, 0] -= 40.0  # four clear choices flipped
    assert bench.clear_agreement(got, want).startswith("0.8750 over the ")
    assert bench.clear_agreement(want + 100 * torch.randn(64, 100, generator=generator), want).startswith(
        "no position's fp32 top-1 is clear"
    )


def test_the_tables_say_the_load_and_the_cpu_pressure_where_linux_has_it() -> None:
    """bench/_timing.machine_load: the load average always; the CPU pressure (Linux PSI) where the
    kernel reports it, as its 10 s and 60 s shares."""
    import os
    import re

    timing = load_bench("_timing")
    told = timing.machine_load()
    assert told.startswith("load average ") and len(told.split(";")[0].split(",")) == 3, told
    if os.path.exists("/proc/pressure/cpu"):
        assert re.search(r"; CPU pressure \d+\.\d % \(10 s\), \d+\.\d % \(60 s\)$", told), told
    else:
        assert "pressure" not in told, told


def test_the_note_says_which_route_the_prompt_runs(bench):
    # the prompt's route is measured at capture (or chosen by the rule): the note says which ran, as
    # the decode step's summary says where the steps ran
    import opcore.graph

    model = bench.SHAPES["small"].build(16)
    measured = opcore.graph.capture_lm(model, max_length=16)
    chosen = bench._prefill_route(measured)
    assert chosen.startswith("runs ") and chosen[5:] in measured.prefill_plan.notes[0], measured.prefill_plan.notes
    torch_route = opcore.graph.capture_lm(model, max_length=16, measure=False, prefill_partitions=False)
    assert bench._prefill_route(torch_route) == torch_route.prefill_plan.summary().split(";")[0]
    assert bench._prefill_route(torch_route).startswith("cpu ")
