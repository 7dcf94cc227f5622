"""Where the tuning file lives (os only: the dispatcher asks on every first selection of a signature,
and without a file it must not load the rest of opcore.tuning).

>>> default_path().endswith(".json")
True
"""

from __future__ import annotations

import os

__all__ = ["default_path"]


def default_path() -> str:
    """Where the tuning file lives: $OPCORE_TUNE_FILE, else the user's cache directory (XDG)."""
    explicit = os.environ.get("OPCORE_TUNE_FILE", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "opcore", "tuning.json")
