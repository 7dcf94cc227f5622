"""plugins.json (opcore.discovery): every branch of the entry-point cache, on real distributions.

conftest points OPCORE_TUNE_FILE at the test's own folder, so the cache file is tmp_path/plugins.json.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import opcore
from opcore import discovery
from opcore.runtime import runtime


def _scanned() -> list[discovery.Discovered]:
    return [discovery._record(ep) for ep in discovery.scan()]


def _dist(where: Path, name: str, version: str, entry_point: str = "") -> Path:
    """A minimal installed distribution (a .dist-info folder) under ``where``."""
    info = where / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    if entry_point:
        (info / "entry_points.txt").write_text(f"[opcore.backends]\n{entry_point}\n")
    return info


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path holding one plugin distribution (its module need not exist: nothing is loaded)."""
    folder = tmp_path / "site"
    _dist(folder, "opcore_cachetest", "1.0", "cachetest = opcore_cachetest.plugin")
    monkeypatch.syspath_prepend(str(folder))
    importlib.invalidate_caches()
    return folder


def _names(found: list[discovery.Discovered]) -> dict[str, tuple[str, str | None, str | None]]:
    return {d.name: (d.value, d.distribution, d.version) for d in found}


def test_a_scan_writes_the_file_and_the_next_discovery_reads_it(site: Path) -> None:
    first, outcome = discovery.discover()
    assert (outcome.source, outcome.reason, outcome.written) == ("scan", "no cache file yet", "")
    assert outcome.path == discovery.cache_path() and Path(outcome.path).is_file()
    assert _names(first)["cachetest"] == ("opcore_cachetest.plugin", "opcore_cachetest", "1.0")
    again, hit = discovery.discover()
    assert (hit.source, hit.reason) == ("cache", "")
    assert again == first == _scanned()


def test_the_file_is_plain_json_data(site: Path) -> None:
    discovery.discover()
    data = json.loads(Path(discovery.cache_path()).read_text())
    assert data["format"] == discovery.FORMAT
    assert ["cachetest", "opcore_cachetest.plugin", "opcore_cachetest", "1.0"] in data["entry_points"]
    assert {"opcore", "python", "executable", "sys.path", "metadata"} <= set(data["key"])


def test_disabled_scans_and_writes_nothing(site: Path) -> None:
    found, outcome = discovery.discover(use_cache=False)
    assert outcome.source == "scan" and "OPCORE_LOAD_CACHE=0" in outcome.reason and outcome.path is None
    assert found == _scanned()
    assert not Path(discovery.cache_path()).exists()


def test_opcore_load_cache_0_reaches_the_loader(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_LOAD_CACHE", "0")
    opcore.reload_plugins()
    outcome = runtime().ensure_loaded().loader.discovery
    assert outcome is not None and outcome.source == "scan" and "OPCORE_LOAD_CACHE=0" in outcome.reason
    assert not Path(discovery.cache_path()).exists()
    monkeypatch.setenv("OPCORE_LOAD_CACHE", "1")
    opcore.reload_plugins()
    assert runtime().ensure_loaded().loader.discovery.source == "scan"  # type: ignore[union-attr]
    opcore.reload_plugins()
    assert runtime().ensure_loaded().loader.discovery.source == "cache"  # type: ignore[union-attr]


def test_a_changed_sys_path_is_a_miss(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    discovery.discover()
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    _, outcome = discovery.discover()
    assert (outcome.source, outcome.reason) == ("scan", "sys.path changed")
    assert discovery.discover()[1].source == "cache"


def test_a_distribution_installed_is_a_miss_and_is_found(site: Path) -> None:
    discovery.discover()
    _dist(site, "opcore_cachetest_two", "0.3", "cachetwo = opcore_cachetest_two.plugin")
    importlib.invalidate_caches()
    found, outcome = discovery.discover()
    assert outcome.source == "scan" and outcome.reason == f"the distributions in {site} changed"
    assert _names(found)["cachetwo"] == ("opcore_cachetest_two.plugin", "opcore_cachetest_two", "0.3")


def test_a_distribution_removed_is_a_miss(site: Path) -> None:
    discovery.discover()
    info = site / "opcore_cachetest-1.0.dist-info"
    for file in info.iterdir():
        file.unlink()
    info.rmdir()
    importlib.invalidate_caches()
    found, outcome = discovery.discover()
    assert outcome.source == "scan" and "cachetest" not in _names(found)


def test_entry_points_edited_in_place_are_a_miss(site: Path) -> None:
    discovery.discover()
    (site / "opcore_cachetest-1.0.dist-info" / "entry_points.txt").write_text(
        "[opcore.backends]\ncachetest = opcore_cachetest.other_plugin\n"
    )
    found, outcome = discovery.discover()
    assert outcome.source == "scan" and outcome.reason == f"the distributions in {site} changed"
    assert _names(found)["cachetest"][0] == "opcore_cachetest.other_plugin"


def test_a_plugin_distribution_s_new_version_is_a_miss(site: Path) -> None:
    discovery.discover()
    (site / "opcore_cachetest-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: opcore_cachetest\nVersion: 1.0.post1\n\n"
    )
    found, outcome = discovery.discover()
    assert (outcome.source, outcome.reason) == ("scan", "a plugin distribution's metadata changed")
    assert _names(found)["cachetest"][2] == "1.0.post1"


def _edit(change: Any) -> None:
    path = Path(discovery.cache_path())
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("field", ["opcore", "python", "executable"])
def test_another_opcore_python_or_interpreter_is_a_miss(site: Path, field: str) -> None:
    discovery.discover()
    _edit(lambda data: data["key"].__setitem__(field, "other"))
    _, outcome = discovery.discover()
    assert outcome.source == "scan" and outcome.reason.startswith(f"{field} changed (other -> ")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "the cache file is corrupt"),
        ("[1, 2]", "the cache file has format 'list'"),
        ('{"format": 99}', "the cache file has format 99"),
        ('{"format": 1, "entry_points": [["a", 1, null, null]], "metadata_files": {}}', "corrupt"),
        ('{"format": 1, "entry_points": [], "metadata_files": {"a": 3}}', "corrupt"),
        ('{"format": 1, "entry_points": [], "metadata_files": {}}', "the cache file has no key"),
        # a key whose fields all match but sys.path's entries are no lists (it raised TypeError)
        ("KEY", "the cache file's key is malformed (sys.path)"),
        ("\udcff", "unreadable"),
    ],
)
def test_a_corrupt_file_is_a_miss_and_is_rewritten(site: Path, content: str, reason: str) -> None:
    path = Path(discovery.cache_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == "KEY":
        discovery.discover()
        data = json.loads(path.read_text())
        data["key"]["sys.path"] = [5] * len(data["key"]["sys.path"])
        content = json.dumps(data)
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    found, outcome = discovery.discover()
    assert outcome.source == "scan" and reason in outcome.reason and outcome.written == ""
    assert found == _scanned()
    assert discovery.discover()[1].source == "cache"


def test_an_unwritable_folder_keeps_the_scan_and_says_why(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    # the folder cannot be made (a file is in the way): as a read-only home, even for root
    monkeypatch.setenv("OPCORE_TUNE_FILE", str(blocker / "opcore" / "tuning.json"))
    found, outcome = discovery.discover()
    assert outcome.source == "scan" and outcome.written.startswith("not written (")
    assert found == _scanned()
    again, outcome = discovery.discover()
    assert outcome.source == "scan" and again == found


def test_an_unreadable_and_unreplaceable_file_keeps_the_scan(site: Path) -> None:
    Path(discovery.cache_path()).mkdir(parents=True)  # a folder where the file should be
    found, outcome = discovery.discover()
    assert outcome.source == "scan" and "unreadable" in outcome.reason
    assert outcome.written.startswith("not written (")
    assert found == _scanned()
    assert not list(Path(discovery.cache_path()).parent.glob(".plugins-*"))  # no temporaries left


def test_concurrent_writers_leave_one_whole_file(site: Path) -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(10):
                discovery.discover()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert not list(Path(discovery.cache_path()).parent.glob(".plugins-*"))  # no temporaries left
    assert discovery.discover()[1].source == "cache"


def test_a_custom_distribution_finder_scans_every_time(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Finder:
        @staticmethod
        def find_spec(*args: Any) -> None:
            return None

        @staticmethod
        def find_distributions(*args: Any, **kwargs: Any) -> list[Any]:
            return []

    discovery.discover()
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    found, outcome = discovery.discover()
    assert outcome.source == "scan" and "Finder" in outcome.reason
    assert found == _scanned()


def test_a_cache_hit_still_runs_every_load_check(fixture_plugins: Path) -> None:
    """The fixture plugins (one failing import, one raising hook, a bad API version, a squatted name, ...)
    are reported the same way whether their entry points were scanned or read from the file.
    """
    rt = runtime().ensure_loaded()
    assert rt.loader.discovery is not None and rt.loader.discovery.source == "scan"
    scanned = {r.name: (r.status, r.reason, r.distribution, r.distribution_version) for r in opcore.backends()}
    opcore.reload_plugins()
    rt = runtime().ensure_loaded()
    assert rt.loader.discovery is not None and rt.loader.discovery.source == "cache"
    cached = {r.name: (r.status, r.reason, r.distribution, r.distribution_version) for r in opcore.backends()}
    assert cached == scanned
    assert any(status is opcore.PluginStatus.FAILED for status, *_ in cached.values())


def test_doctor_shows_how_loading_went(site: Path) -> None:
    from opcore.cli.doctor import collect, to_json

    opcore.reload_plugins()
    first = to_json(collect(describe=False))["loading"]
    assert first["entry_points"] == "scan" and first["reason"] == "no cache file yet" and first["seconds"] > 0
    assert first["cache_file"] == discovery.cache_path() and first["not_written"] == ""
    opcore.reload_plugins()
    second = to_json(collect(describe=False))["loading"]
    assert second["entry_points"] == "cache" and second["reason"] == ""
    assert 0 < second["discovery_seconds"] <= second["seconds"]
