"""opcore.distmeta: the METADATA header read directly agrees with importlib.metadata's full parse."""

from __future__ import annotations

from importlib import metadata

import pytest

from opcore import distmeta


@pytest.mark.parametrize("name", ["numpy", "pluggy", "opcore", "opcore-cpu", "torch"])
def test_version_agrees_with_importlib_metadata(name: str) -> None:
    try:
        expected = metadata.version(name)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed here")
    assert distmeta.version(name) == expected


def test_a_missing_distribution_has_no_version() -> None:
    assert distmeta.version("no-such-distribution-anywhere") is None


def test_fields_of_the_entry_points_distributions() -> None:
    for ep in metadata.entry_points(group="opcore.backends"):
        assert ep.dist is not None, f"{ep.name}: an installed entry point has its distribution"
        assert distmeta.field(ep.dist, "Name") == ep.dist.name
        assert distmeta.field(ep.dist, "Version") == ep.dist.version
        assert distmeta.field(ep.dist, "No-Such-Field") is None
