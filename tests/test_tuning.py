"""Measured ranking: opcore.tune, the tuning file, its fingerprint, OPCORE_TUNE=1, explain and the doctor.

The kernels measured here are real: a deliberately slow one (it sleeps) beside fast numpy ones,
so the measured order is certain on any machine, however loaded.
"""

from __future__ import annotations

import json
import os
import time
import types
import warnings
from pathlib import Path

import numpy
import pytest

import opcore
from opcore import BackendSpec, DeviceType
from opcore.kernel_records import Costly
from opcore.tuning import table
from opcore.tuning.table import Entry, Measurement, bucket, measured_order

X = numpy.linspace(-1, 1, 16, dtype=numpy.float32).reshape(2, 8)
SLEEP_S = 0.01  # the slow kernel's cost: far above any numpy relu (and its noise on a busy machine)
ROUNDS = 5  # enough for interquartile ranges that one descheduled round does not blow up


def plugin(name: str, priority: int, relu, checker=None) -> types.SimpleNamespace:
    """An in-process backend with one relu kernel."""

    def opcore_backend() -> BackendSpec:
        return BackendSpec(name=name, version="1.0", priority=priority, device_types=(DeviceType.CPU,))

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        registrar.add_kernel("relu", relu, dtypes=["float32"], checker=checker)

    hooks = {f.__name__: opcore.hookimpl(f) for f in (opcore_backend, opcore_register_kernels)}
    return types.SimpleNamespace(__name__=name, **hooks)


def counting_relu(calls: list, sleep_s: float = 0.0):
    def relu(x):
        calls.append(1)
        if sleep_s:
            time.sleep(sleep_s)
        return numpy.maximum(x, 0)

    return relu


@pytest.fixture(autouse=True)
def only_in_process(only_reference, monkeypatch) -> None:
    """No backend but the ones a test registers: the measured order is then certain."""
    disabled = [n for n in os.environ.get("OPCORE_DISABLE", "").split(",") if n]
    monkeypatch.setenv("OPCORE_DISABLE", ",".join([*disabled, "reference"]))
    opcore.reload_plugins()


@pytest.fixture
def slow_fast() -> tuple[list, list]:
    """ "slow" (priority 500, ranks first statically, sleeps) and "fast" (priority 400)."""
    slow_calls: list = []
    fast_calls: list = []
    opcore.register_plugin(plugin("slow", 500, counting_relu(slow_calls, SLEEP_S)))
    opcore.register_plugin(plugin("fast", 400, counting_relu(fast_calls)))
    return slow_calls, fast_calls


def tuning_file() -> Path:
    return Path(os.environ["OPCORE_TUNE_FILE"])


# --- without a file: static and deterministic ------------------------------------------------------


def test_without_a_file_ranking_is_static_and_nothing_is_written(slow_fast) -> None:
    explanation = opcore.explain("relu", X)
    assert explanation.chosen == "slow"
    assert explanation.ranking == ""
    assert "measured" not in str(explanation)
    opcore.run("relu", X)
    assert not tuning_file().exists()
    assert opcore.tuning.state(opcore.runtime.runtime()).status == "absent"


def test_the_default_file_is_in_the_xdg_cache_directory(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("OPCORE_TUNE_FILE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert table.default_path() == str(tmp_path / "cache" / "opcore" / "tuning.json")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert table.default_path() == os.path.join(os.path.expanduser("~"), ".cache", "opcore", "tuning.json")


# --- tuning -----------------------------------------------------------------------------------------


def test_tune_ranks_the_measured_winner_first(slow_fast) -> None:
    slow_calls, fast_calls = slow_fast
    result = opcore.tune("relu", X, rounds=ROUNDS)
    assert result.static == "slow"
    assert result.winner == "fast"
    times = {m.kernel: m for m in result.entry.measurements}
    assert times["slow"].median_us >= SLEEP_S * 1e6
    assert times["fast"].median_us < times["slow"].median_us
    assert result.entry.measurements[0].kernel == "fast"  # fastest first
    assert "fast" in str(result) and "static ranking: slow" in str(result)

    explanation = opcore.explain("relu", X)
    assert explanation.chosen == "fast"
    assert explanation.ranking.startswith("measured (tuning file entry relu(x=float32[2,8]) on cpu")
    text = str(explanation)
    assert "measured" in text.splitlines()[3]  # the column header
    fast_calls.clear()
    slow_calls.clear()
    numpy.testing.assert_array_equal(opcore.run("relu", X), numpy.maximum(X, 0))
    assert fast_calls and not slow_calls


def test_the_file_holds_the_format_the_fingerprint_and_the_entry(slow_fast) -> None:
    result = opcore.tune("relu", X, rounds=ROUNDS)
    assert result.path == str(tuning_file())
    data = json.loads(tuning_file().read_text())
    assert data["format"] == table.FORMAT
    fingerprint = data["fingerprint"]
    assert fingerprint["opcore"] == opcore.__version__
    assert fingerprint["plugins"]["slow"] == "in-process, backend 1.0"
    assert fingerprint["threads"] >= 1
    assert {"cpu", "isa", "gpu", "libraries"} <= set(fingerprint)
    entry = data["entries"]["relu(x=float32[2,8]) on cpu"]
    assert entry["example"] == "x=float32[2,8]"
    assert entry["measurements"][0]["kernel"] == "fast"
    assert {"median_us", "iqr_us", "min_us", "rounds"} <= set(entry["measurements"][0])


def test_a_measurement_serves_its_shape_bucket_only(slow_fast) -> None:
    x = numpy.ones((200, 8), numpy.float32)
    opcore.tune("relu", x, rounds=ROUNDS)
    assert opcore.explain("relu", numpy.ones((129, 8), numpy.float32)).chosen == "fast"  # 129..256 share a bucket
    assert opcore.explain("relu", numpy.ones((128, 8), numpy.float32)).chosen == "slow"
    assert opcore.explain("relu", numpy.ones((200, 8), numpy.float64)).error  # another dtype: no kernel at all


def test_entries_accumulate_and_a_second_tune_replaces_its_own(slow_fast) -> None:
    opcore.tune("relu", X, rounds=ROUNDS)
    opcore.tune("relu", numpy.ones((64, 8), numpy.float32), rounds=ROUNDS)
    first = json.loads(tuning_file().read_text())["entries"]
    assert len(first) == 2
    opcore.tune("relu", X, rounds=ROUNDS)
    assert json.loads(tuning_file().read_text())["entries"].keys() == first.keys()


def test_an_order_the_user_gave_comes_before_the_measurement(slow_fast) -> None:
    opcore.tune("relu", X, rounds=ROUNDS)
    with opcore.prefer("slow"):
        assert opcore.explain("relu", X).chosen == "slow"
    assert opcore.explain("relu", X, backend="slow").chosen == "slow"
    assert opcore.explain("relu", X).chosen == "fast"


def test_a_costly_decline_is_measured_and_overridden_by_the_measurement() -> None:
    calls: list = []
    opcore.register_plugin(
        plugin("thrifty", 500, counting_relu(calls), checker=lambda x: Costly("a constant says it is slow here"))
    )
    opcore.register_plugin(plugin("slow", 400, counting_relu([], SLEEP_S)))
    explanation = opcore.explain("relu", X)
    assert explanation.chosen == "slow"
    declined = next(c for c in explanation.candidates if c.backend == "thrifty")
    assert declined.status.value == "declined" and declined.reason == "a constant says it is slow here"

    result = opcore.tune("relu", X, rounds=ROUNDS)
    assert result.static == "slow" and result.winner == "thrifty"
    assert opcore.explain("relu", X).chosen == "thrifty"
    calls.clear()
    opcore.run("relu", X)
    assert calls


def test_a_plain_decline_is_never_measured() -> None:
    calls: list = []
    opcore.register_plugin(plugin("unable", 500, counting_relu(calls), checker=lambda x: "cannot run it"))
    opcore.register_plugin(plugin("fast", 400, counting_relu([])))
    result = opcore.tune("relu", X, rounds=ROUNDS)
    assert [m.kernel for m in result.entry.measurements] == ["fast"]
    assert not calls
    assert opcore.explain("relu", X).chosen == "fast"


def test_a_kernel_that_raises_is_recorded_as_failed_and_keeps_its_static_place(slow_fast) -> None:
    def broken(x):
        raise RuntimeError("no such luck")

    opcore.register_plugin(plugin("broken", 450, broken))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = opcore.tune("relu", X, rounds=ROUNDS)
    assert dict(result.entry.failed)["broken"].startswith("raised RuntimeError: no such luck")
    assert "broken" not in {m.kernel for m in result.entry.measurements}
    ranked = [c.title for c in opcore.explain("relu", X).candidates if c.priority is not None]
    assert ranked.index("broken") > ranked.index("slow")  # behind every measured kernel


def test_tune_checks_its_arguments_like_run() -> None:
    with pytest.raises(opcore.ShapeError, match=r"^linear\(\)"):
        opcore.tune("linear", X, numpy.ones((3, 4), numpy.float32))
    with pytest.raises(opcore.ArgumentError, match="rounds"):
        opcore.tune("relu", X, rounds=0)
    assert not tuning_file().exists()


# --- stale and unreadable files -----------------------------------------------------------------


def _rewrite(change) -> None:
    data = json.loads(tuning_file().read_text())
    change(data)
    tuning_file().write_text(json.dumps(data))
    opcore.reload_plugins()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d["fingerprint"].update(opcore="0.0.1"), "opcore: 0.0.1 in the file"),
        (lambda d: d["fingerprint"].update(threads=d["fingerprint"]["threads"] + 7), "threads:"),
        (lambda d: d["fingerprint"]["libraries"].update(numpy="1.0"), "libraries numpy: 1.0 in the file"),
        (lambda d: d["fingerprint"]["plugins"].pop("fast"), "plugins fast: absent in the file"),
    ],
)
def test_a_stale_file_is_ignored_and_said_so(slow_fast, change, said) -> None:
    opcore.tune("relu", X, rounds=ROUNDS)
    slow = slow_fast  # the in-process plugins survive the reload
    _rewrite(change)
    with pytest.warns(opcore.StaleTuningWarning, match="is stale and is ignored") as caught:
        explanation = opcore.explain("relu", X)
    assert said in str(caught[0].message)
    assert explanation.chosen == "slow"
    assert explanation.ranking.startswith("static priority (tuning file stale:")
    assert slow is slow_fast


def test_an_unreadable_file_is_ignored_and_said_so(slow_fast) -> None:
    tuning_file().write_text("{not json")
    opcore.reload_plugins()
    with pytest.warns(opcore.StaleTuningWarning, match="unreadable"):
        assert opcore.explain("relu", X).chosen == "slow"


def test_tuning_over_a_stale_file_starts_it_afresh(slow_fast) -> None:
    opcore.tune("relu", numpy.ones((64, 8), numpy.float32), rounds=ROUNDS)
    _rewrite(lambda d: d["fingerprint"].update(opcore="0.0.1"))
    with pytest.warns(opcore.StaleTuningWarning):
        opcore.tune("relu", X, rounds=ROUNDS)
    data = json.loads(tuning_file().read_text())
    assert data["fingerprint"]["opcore"] == opcore.__version__
    assert list(data["entries"]) == ["relu(x=float32[2,8]) on cpu"]


# --- OPCORE_TUNE=1 --------------------------------------------------------------------------------


def test_opcore_tune_measures_a_new_signature_once_and_never_when_warm(slow_fast, monkeypatch) -> None:
    slow_calls, fast_calls = slow_fast
    monkeypatch.setenv("OPCORE_TUNE", "1")
    opcore.reload_plugins()
    numpy.testing.assert_array_equal(opcore.run("relu", X), numpy.maximum(X, 0))
    assert len(slow_calls) > 1  # measured: warm-up and rounds
    entry = json.loads(tuning_file().read_text())["entries"]["relu(x=float32[2,8]) on cpu"]
    slow_calls.clear()
    fast_calls.clear()
    for _ in range(5):
        opcore.run("relu", X)
    assert not slow_calls and len(fast_calls) == 5  # the cached path: no tuning, the measured winner
    opcore.reload_plugins()  # a later process, in effect: the file has it, so nothing is measured again
    opcore.run("relu", X)
    assert not slow_calls
    assert json.loads(tuning_file().read_text())["entries"]["relu(x=float32[2,8]) on cpu"] == entry


def test_without_opcore_tune_run_never_measures(slow_fast) -> None:
    slow_calls, _ = slow_fast
    opcore.run("relu", X)
    assert len(slow_calls) == 1
    assert not tuning_file().exists()


# --- the order rule --------------------------------------------------------------------------------


class K:
    def __init__(self, title: str) -> None:
        self.title = title


def entry_of(iqr: float = 0.0, **medians: float) -> Entry:
    return Entry("k", "", tuple(Measurement(name, us, iqr, us, 3) for name, us in medians.items()))


def test_measured_order_puts_the_fastest_first_but_keeps_static_order_on_a_near_tie() -> None:
    a, b, c, d = K("a"), K("b"), K("c"), K("d")
    assert [k.title for k in measured_order([a, b, c, d], entry_of(a=10.0, b=5.0, c=7.0))] == ["b", "c", "a", "d"]
    assert [k.title for k in measured_order([a, b], entry_of(a=10.2, b=10.0))] == ["a", "b"]  # within 5%
    assert [k.title for k in measured_order([a, b], entry_of(a=11.0, b=10.0))] == ["b", "a"]
    # the spreads overlap (10 +- 1 against 12 +- 1.5 ... ): noise, the static order stays
    assert [k.title for k in measured_order([a, b], entry_of(a=12.0, b=10.0, iqr=3.0))] == ["a", "b"]
    assert [k.title for k in measured_order([a, b], entry_of(a=20.0, b=10.0, iqr=3.0))] == ["b", "a"]


def test_buckets_round_up_to_powers_of_two() -> None:
    assert [bucket(n) for n in (0, 1, 2, 3, 5, 8, 9, 1000)] == [0, 1, 2, 4, 8, 8, 16, 1024]


# --- front ends -----------------------------------------------------------------------------------


def test_the_cli_tunes_and_the_doctor_counts_entries(slow_fast, capsys) -> None:
    from opcore.cli import main

    assert main(["tune", "relu", "--shapes", "2x8", "--rounds", "5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["winner"] == "fast" and data["static"] == "slow"
    assert data["path"] == str(tuning_file())
    assert main(["doctor", "--json", "--quick"]) == 0
    doctor = json.loads(capsys.readouterr().out)
    assert doctor["tuning"] == {"path": str(tuning_file()), "status": "current", "reason": "", "entries": 1}
    assert main(["doctor", "--quick"]) == 0
    assert "1 entry, measured on this machine" in capsys.readouterr().out


def test_the_doctor_says_when_the_file_is_stale(slow_fast, capsys) -> None:
    from opcore.cli import main

    opcore.tune("relu", X, rounds=ROUNDS)
    _rewrite(lambda d: d["fingerprint"].update(opcore="0.0.1"))
    assert main(["doctor", "--json", "--quick"]) == 0
    tuning = json.loads(capsys.readouterr().out)["tuning"]
    assert tuning["status"] == "stale" and "opcore: 0.0.1 in the file" in tuning["reason"]
    assert tuning["entries"] == 0
