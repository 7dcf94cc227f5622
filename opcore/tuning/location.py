"""Where the tuning file lives (os only: the dispatcher asks on every first selection of a signature,
and without a file it must not load the rest of opcore.tuning).

>>> default_path().endswith(".json")
True
"""

from __future__ import annotations

import functools
import os

__all__ = ["default_path"]


def default_path() -> str:
    """Where the tuning file lives: $OPCORE_TUNE_FILE, else the user's cache directory (XDG)."""
    env = os.environ
    return _path(env.get("OPCORE_TUNE_FILE", ""), env.get("XDG_CACHE_HOME", ""), env.get("HOME"), os.getcwd())


@functools.lru_cache(maxsize=8)
def _path(explicit: str, xdg_cache: str, home: str | None, cwd: str) -> str:
    """default_path of these settings (asked once per kernel selection: a capture makes ~25,000)."""
    if explicit.strip():
        return os.path.abspath(os.path.expanduser(explicit.strip()))
    cache = xdg_cache.strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "opcore", "tuning.json")
