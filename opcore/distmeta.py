"""Installed distributions' names and versions, read from their METADATA headers directly.

``importlib.metadata``'s ``Distribution.name`` / ``.version`` and ``metadata.version()`` parse the
whole METADATA file with the ``email`` package: about 1-3 ms each (torch's METADATA is tens of KB),
which was a third of the first ``opcore.run`` with every backend installed. Name and Version are
header lines before the first blank line (core metadata spec), so reading up to there is enough.

>>> version("pluggy") is not None
True
>>> version("no-such-distribution") is None
True
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

__all__ = ["field", "version"]


def field(dist: Any, name: str) -> str | None:
    """A header field ("Name", "Version") of ``dist`` (an importlib.metadata Distribution); None when
    it has no metadata file or no such field.
    """
    try:
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    except Exception:  # an unreadable metadata file is reported as missing, never raised
        return None
    if not text:
        return None
    prefix = name.lower() + ":"
    header = text.split("\n\n", 1)[0]
    for line in header.splitlines():
        if line.lower().startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None when it is not installed (no import)."""
    try:
        found = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken installation must not stop a caller that only asks
        return None
    return field(found, "Version")
