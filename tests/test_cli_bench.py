"""``opcore bench``: a row per backend (timed, or the reason it did not run), JSON, and progress."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest
from cli_support import REPO, assert_one_line_error, environment, run_cli

from opcore.cli.bench_command import BenchResult, bench_json, measure
from opcore.cli.inputs import CallSpec
from opcore.types import Device

FAST = ("--repeat", "3", "--warmup", "1", "--min-time", "0.01")
ROSTER = "fixture_good,reference,fixture_importerror,fixture_unavailable,nonexistent"


def _rows(out: str) -> dict[str, list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["backend", "kernel"])
    return {cells[0]: cells for cells in (re.split(r"\s{2,}", line.strip()) for line in lines[start + 1 :])}


def test_table_compares_backends_and_explains_the_rest() -> None:
    result = run_cli("bench", "relu", "--shapes", "2x3", "--backends", ROSTER, *FAST, fixtures=True,
                     OPCORE_DISABLE="fixture_unavailable")  # fmt: skip
    assert result.status == 0, result.err
    assert result.out.splitlines()[0] == "relu(x: float32[2, 3])"
    assert "median of 3 rounds after 1 warm-up calls" in result.out
    rows = _rows(result.out)
    assert list(rows) == ROSTER.split(",")
    assert rows["fixture_good"][1] == "fixture_good" and rows["reference"][1] == "reference"
    for name in ("fixture_good", "reference"):
        assert len(rows[name]) == 7 and rows[name][2].endswith("s")  # median with its unit
        assert rows[name][3].count(" .. ") == 1  # the interquartile range
    relative = sorted(rows[n][6] for n in ("fixture_good", "reference"))
    assert relative[0] == "fastest" or relative[1] == "fastest"
    assert any(r.endswith("x slower") for r in relative)
    assert rows["fixture_importerror"][2].startswith("failed: import failed: ImportError: libwidget.so.3")
    assert rows["fixture_unavailable"][2] == "disabled: by OPCORE_DISABLE"
    assert rows["nonexistent"][2] == "not installed (no plugin provides it)"
    assert "\x1b" not in result.out + result.err  # no colour, no progress when not on a terminal


def test_json_results() -> None:
    result = run_cli("bench", "relu", "--shapes", "20x30", "--backends", ROSTER, *FAST, "--json", fixtures=True)
    assert result.status == 0, result.err
    data = result.json()
    assert data["schema"] == 1 and data["op"] == "relu" and data["mode"] == "resolve"
    assert data["call"] == "relu(x: float32[20, 30])" and data["array_kind"] == "numpy"
    results = {r["backend"]: r for r in data["results"]}
    good = results["fixture_good"]
    assert good["status"] == "skipped"
    assert good["reason"] == "declined: fixture only takes up to 16 elements, got 600"
    assert good["median_s"] is None and good["relative"] is None and good["times_s"] == []
    ref = results["reference"]
    assert ref["status"] == "ok" and ref["kernel"] == "reference" and ref["reason"] == ""
    assert len(ref["times_s"]) == 3 and ref["calls_per_round"] >= 1
    assert ref["min_s"] <= ref["q1_s"] <= ref["median_s"] <= ref["q3_s"] <= ref["max_s"]
    assert ref["first_call_s"] > 0 and ref["relative"] == 1.0 and data["fastest"] == "reference"
    assert results["fixture_unavailable"]["reason"] == "unavailable: no widget attached (looked in /dev/widget*)"
    assert results["nonexistent"]["status"] == "skipped"
    assert set(data["environment"]) == {"opcore", "python", "cpu", "usable_cores"}


def test_a_kernel_that_crashes_is_a_failed_row() -> None:
    result = run_cli("bench", "sigmoid", "--shapes", "2x3", "--backends", "fixture_good,reference", *FAST, "--json",
                     fixtures=True)  # fmt: skip
    assert result.status == 0
    results = {r["backend"]: r for r in result.json()["results"]}
    assert results["fixture_good"]["status"] == "failed"
    assert results["fixture_good"]["reason"] == "RuntimeError: fixture kernel crashed"
    assert results["reference"]["status"] == "ok"


def test_default_backends_are_the_loaded_ones_by_priority() -> None:
    result = run_cli("bench", "relu", "--shapes", "2x3", *FAST, "--json", fixtures=True)
    names = [r["backend"] for r in result.json()["results"]]
    assert names.index("fixture_good") < names.index("reference")
    assert "fixture_importerror" not in names and "fixture_unavailable" not in names


def test_run_mode_constants_and_attributes() -> None:
    only = ("--backends", "reference")
    run_mode = run_cli("bench", "linear", "--shapes", "4x8,8x8,8", "--mode", "run", *only, *FAST, "--json")
    assert run_mode.json()["mode"] == "run"
    assert {r["backend"]: r["status"] for r in run_mode.json()["results"]}["reference"] == "ok"
    constants = run_cli("bench", "linear", "--shapes", "4x8,8x8", "--constants", "w", *only, *FAST, "--json")
    assert constants.json()["constants"] == ["w"]
    assert all(r["status"] == "ok" for r in constants.json()["results"] if r["backend"] == "reference")
    softmax = run_cli("bench", "softmax", "--shapes", "4x16", "--attr", "dim=-1", *only, *FAST)
    assert softmax.status == 0 and softmax.out.startswith("softmax(x: float32[4, 16], dim=-1)")


def test_nothing_ran_is_exit_status_one() -> None:
    result = run_cli("bench", "relu", "--shapes", "2", "--backends", "nonexistent", *FAST)
    assert result.status == 1
    assert "not installed" in result.out


def test_bad_arguments_are_one_line() -> None:
    assert_one_line_error(run_cli("bench", "relu", "--shapes", "2", "--repeat", "0"), "argument --repeat")
    assert_one_line_error(run_cli("bench", "relu", "--shapes", "2", "--mode", "fast"), "argument --mode")
    assert_one_line_error(run_cli("bench", "relu", "--shapes", "2", "--min-time", "0"), "'--min-time'")
    assert_one_line_error(run_cli("bench", "linear", "--shapes", "2x8,8x8", "--constants", "q"), "'constants'")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses a pseudo-terminal")
def test_progress_goes_to_stderr_on_a_terminal() -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "opcore.cli", "bench", "relu", "--shapes", "2x3", *FAST],
            stdout=subprocess.PIPE,
            stderr=follower,
            env=environment(),
            cwd=REPO,
            timeout=120,
            check=False,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO once the terminal has no writer left
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    progress = b"".join(chunks).decode()
    assert done.returncode == 0
    assert "bench relu [1/" in progress and "round 3/3" in progress
    assert progress.endswith("\r\x1b[K")  # the line is cleared before the table
    assert b"\x1b" not in done.stdout  # the table itself is plain: stdout is a pipe


def test_measure_counts_calls() -> None:
    calls = []
    first, number, times = measure(
        lambda: calls.append(1), (), warmup=2, repeat=4, min_time=0.0004, sync=lambda: None, progress=lambda _: None
    )
    assert first >= 0 and number >= 1 and len(times) == 4 and all(t > 0 for t in times)
    # 1 first call + 2 warm-up + calibration rounds (ending with one of `number` calls) + 4 rounds
    assert len(calls) >= 1 + 2 + number + 4 * number


def test_json_relative_speed_when_the_fastest_median_is_zero() -> None:
    # a timer coarser than the call (as on some platforms) gives a 0.0 median: no ratio, no crash
    call = CallSpec("relu", (), (), False, Device.parse("cpu"))
    args = argparse.Namespace(mode="run", constants="", warmup=1, repeat=1)
    results = [BenchResult("a", "ok", times_s=(0.0,)), BenchResult("b", "ok", times_s=(2e-6,))]
    rows = bench_json(call, results, args)["results"]
    assert [row["relative"] for row in rows] == [None, None]
    results = [BenchResult("a", "ok", times_s=(1e-6,)), BenchResult("b", "ok", times_s=(2e-6,))]
    assert [row["relative"] for row in bench_json(call, results, args)["results"]] == [1.0, 2.0]


def test_result_quartiles() -> None:
    result = BenchResult("x", "ok", times_s=(1.0, 2.0, 3.0, 4.0, 5.0))
    assert result.median_s == 3.0 and result.quartiles() == (2.0, 4.0)
    assert BenchResult("x", "ok", times_s=(1.0,)).quartiles() == (1.0, 1.0)
    assert BenchResult("x", "skipped", reason="r").quartiles() is None
