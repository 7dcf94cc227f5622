"""Which plugins are installed: the ``opcore.backends`` entry points, remembered between processes.

``importlib.metadata.entry_points()`` opens every installed distribution's ``entry_points.txt``
(~70 here) and parses them, ~5 ms of a first call that must stay under 50 ms. The answer changes
only when a distribution is installed, removed or edited, so the first process writes it to
``plugins.json`` beside the tuning file (``$XDG_CACHE_HOME/opcore/``) and later ones read it back
after checking its key: a few ``stat`` calls instead of reading every distribution's metadata.

The key is everything the scan's result depends on: the file format, opcore's and Python's versions,
the interpreter, ``sys.path`` in order (``''`` resolved to the working directory), and for every
entry of it the metadata folders it holds (``*.dist-info``, ``*.egg-info``, ``*.egg``) with the
``entry_points.txt`` of each (mtime in ns, size, inode; "none" when absent) and, for the
distributions that provide a backend, their ``METADATA``/``PKG-INFO`` (where the name and version
come from). Installing, upgrading, removing or editing a distribution changes one of these; any
difference is a miss: the scan runs and the file is rewritten. A finder on ``sys.meta_path`` that
serves distributions from elsewhere (``find_distributions`` on other than the standard
``PathFinder``) makes the result unkeyable: then the scan runs every time.

The file is plain JSON data: entry-point names, their ``module:attr`` values and the distributions'
names and versions, as the distributions' own metadata says them. Nothing in it is executed; a
plugin is imported exactly as its entry point names it. ``OPCORE_LOAD_CACHE=0`` turns it off. A
missing, unreadable, corrupt or stale file is a miss, never an error; a file that cannot be written
(read-only home) leaves the scan's result in use and says why; writers replace the file atomically.

Only discovery is cached: importing the plugins, their probes and every registration check of
``opcore.plugins`` run on every load.

>>> found, outcome = discover(use_cache=False)
>>> outcome.source, sorted(d.name for d in found)[:1]   # doctest: +SKIP
('scan', ['cpu'])
"""

from __future__ import annotations

import os
import sys
import time
from importlib.metadata import EntryPoint, entry_points
from typing import Any, NamedTuple

from opcore import distmeta
from opcore._version import __version__

__all__ = ["ENTRY_POINT_GROUP", "FORMAT", "Discovered", "DiscoveryOutcome", "cache_path", "discover", "scan"]

ENTRY_POINT_GROUP = "opcore.backends"
FORMAT = 1  # of plugins.json; another number is a miss
_METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg")


class Discovered(NamedTuple):
    """One installed entry point: its name, ``module:attr`` value and its distribution's name and version."""

    name: str
    value: str
    distribution: str | None
    version: str | None

    def load(self) -> Any:
        """Import the plugin object, as ``EntryPoint.load`` does."""
        return EntryPoint(self.name, self.value, ENTRY_POINT_GROUP).load()


class DiscoveryOutcome(NamedTuple):
    """How the entry points were found, for ``opcore doctor``.

    source: "cache" (read from ``path``) or "scan". reason: why the scan ran ("" on a hit).
    written: "" or why the file was not written after a scan. seconds: the whole discovery.
    """

    source: str
    reason: str
    path: str | None
    written: str
    seconds: float


def cache_path() -> str:
    """``plugins.json`` in the tuning file's folder (``$OPCORE_TUNE_FILE``'s, else the user's cache)."""
    from opcore.tuning.location import default_path

    return os.path.join(os.path.dirname(default_path()), "plugins.json")


def scan() -> list[EntryPoint]:
    """The installed entry points of the group, by name then distribution (the first one wins a name)."""
    return sorted(
        entry_points(group=ENTRY_POINT_GROUP),
        key=lambda ep: (ep.name, _field(ep, "Name") or ""),
    )


def discover(use_cache: bool = True) -> tuple[list[Discovered], DiscoveryOutcome]:
    """The installed plugins, from ``plugins.json`` when its key matches, else scanned (and written)."""
    started = time.perf_counter()
    if not use_cache:
        found = [_record(ep) for ep in scan()]
        return found, DiscoveryOutcome("scan", "the cache is off (OPCORE_LOAD_CACHE=0)", None, "", _since(started))
    path = cache_path()
    custom = _custom_finders()
    if custom:
        found = [_record(ep) for ep in scan()]
        reason = f"a distribution finder besides sys.path's is installed ({custom}); scanned every time"
        return found, DiscoveryOutcome("scan", reason, path, "", _since(started))
    stored, reason = _read(path)
    if stored is not None:
        key = stored.get("key")
        reason = _difference(key, _key(stored["metadata_files"], _folders(key)))
        if not reason:
            return [Discovered(*e) for e in stored["entry_points"]], DiscoveryOutcome(
                "cache", "", path, "", _since(started)
            )
    folders = _folders(None)  # before the scan: a change during it makes the next key differ
    eps = scan()
    found = [_record(ep) for ep in eps]
    files = {d.distribution or d.value: _metadata_file(ep) for d, ep in zip(found, eps, strict=True)}
    key = _key(files, folders)
    written = _write(path, {"format": FORMAT, "key": key, "metadata_files": files, "entry_points": found})
    return found, DiscoveryOutcome("scan", reason, path, written, _since(started))


# -- the key ----------------------------------------------------------------------------------------


def _key(metadata_files: dict[str, str | None], folders: list[list[Any]]) -> dict[str, Any]:
    """What the scan's result depends on (see the module docstring), as JSON-ready data."""
    return {
        "opcore": __version__,
        "python": sys.version,
        "executable": sys.executable,
        "sys.path": folders,
        "metadata": {name: _stat(path) for name, path in sorted(metadata_files.items()) if path},
    }


def _folders(stored: Any) -> list[list[Any]]:
    """Each sys.path entry as [entry, absolute path, its stat, its metadata folders (``_holdings``)].

    ``stored``: the key read from the file; a folder whose own stat it matches (no entry added,
    removed or renamed in it) is not listed again, only its metadata folders' files are looked at.
    """
    known: dict[str, Any] = {}
    if isinstance(stored, dict) and isinstance(stored.get("sys.path"), list):
        known = {e[1]: e for e in stored["sys.path"] if isinstance(e, list) and len(e) == 4 and isinstance(e[1], str)}
    entries = []
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        where = os.path.abspath(entry or os.getcwd())
        entries.append([entry, where, *_holdings(where, known.get(where))])
    return entries


def _holdings(where: str, stored: Any) -> tuple[list[int] | None, list[list[Any]] | None]:
    """A sys.path entry's own stat, and the metadata folders in it each with its entry_points.txt's
    stat (None for a zip file or a missing entry). Listing a folder (site-packages: ~1,000 names)
    costs more than the rest of a hit; a folder's stat changes whenever an entry is added, removed or
    renamed in it, so when it matches ``stored`` (the file's entry for it) its names are reused.
    """
    own = _stat(where)
    if own is not None and stored is not None and stored[2] == own and isinstance(stored[3], list):
        names = [n[0] for n in stored[3] if isinstance(n, list) and n and isinstance(n[0], str)]
    else:
        try:
            names = sorted(n for n in os.listdir(where) if n.endswith(_METADATA_SUFFIXES))
        except OSError:  # a zip file, or no such folder: its own stat is the key
            return own, None
    holdings = []
    for name in names:
        # an egg is a zip file or a folder of its own: its stat stands for its entry points
        inside = () if name.endswith(".egg") else ("entry_points.txt",)
        holdings.append([name, _stat(os.path.join(where, name, *inside))])
    return own, holdings


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _metadata_file(ep: EntryPoint) -> str | None:
    """The METADATA (or PKG-INFO) file the distribution's name and version were read from."""
    base = getattr(getattr(ep, "dist", None), "_path", None)  # PathDistribution's folder
    if base is None:
        return None
    for name in ("METADATA", "PKG-INFO"):
        path = os.path.join(os.fspath(base), name)
        if os.path.exists(path):
            return os.path.abspath(path)
    return None


def _difference(stored: Any, here: dict[str, Any]) -> str:
    """What differs between the stored key and this process's, in words; "" when they match."""
    if stored == here:
        return ""
    if not isinstance(stored, dict):
        return "the cache file has no key"
    for field in ("opcore", "python", "executable"):
        if stored.get(field) != here[field]:
            return f"{field} changed ({stored.get(field)} -> {here[field]})"
    old_path, new_path = stored.get("sys.path"), here["sys.path"]
    if not isinstance(old_path, list) or not all(isinstance(e, list) for e in old_path):
        return "the cache file's key is malformed (sys.path)"
    if [e[:2] for e in old_path] != [e[:2] for e in new_path]:
        return "sys.path changed"
    for old, new in zip(old_path, new_path, strict=True):
        if old != new:
            return f"the distributions in {new[1]} changed"  # its own stat, or a metadata folder's
    return "a plugin distribution's metadata changed"


def _custom_finders() -> str:
    """Finders on sys.meta_path other than the standard PathFinder that can serve distributions."""
    from importlib.machinery import PathFinder

    return ", ".join(
        getattr(f, "__name__", type(f).__name__)
        for f in sys.meta_path
        if f is not PathFinder and hasattr(f, "find_distributions")
    )


# -- the file ---------------------------------------------------------------------------------------


def _read(path: str) -> tuple[dict[str, Any] | None, str]:
    """The file's content when well formed, else None and why it cannot be used."""
    import json

    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except FileNotFoundError:
        return None, "no cache file yet"
    except (OSError, UnicodeDecodeError) as error:
        return None, f"the cache file is unreadable ({type(error).__name__}: {error})"
    except ValueError as error:
        return None, f"the cache file is corrupt ({error})"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        return None, f"the cache file has format {found!r}, this opcore writes {FORMAT}"
    eps, files = data.get("entry_points"), data.get("metadata_files")
    if not (isinstance(eps, list) and all(_well_formed(e) for e in eps) and isinstance(files, dict)):
        return None, "the cache file is corrupt (entry_points or metadata_files malformed)"
    if not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in files.items()):
        return None, "the cache file is corrupt (metadata_files malformed)"
    return data, ""


def _well_formed(entry: Any) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 4
        and all(isinstance(v, str) for v in entry[:2])
        and all(v is None or isinstance(v, str) for v in entry[2:])
    )


def _write(path: str, payload: dict[str, Any]) -> str:
    """Write atomically (a temporary file renamed over the old one); "" or why it was not written."""
    import json
    import tempfile

    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".plugins-", suffix=".json", dir=directory)
    except OSError as error:
        return f"not written ({type(error).__name__}: {error})"
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(payload, out, indent=1)
            out.write("\n")
        os.replace(temporary, path)
    except OSError as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return f"not written ({type(error).__name__}: {error})"
    return ""


def _record(ep: EntryPoint) -> Discovered:
    return Discovered(ep.name, ep.value, _field(ep, "Name"), _field(ep, "Version"))


def _field(ep: EntryPoint, name: str) -> str | None:
    """The entry point's distribution's Name or Version, without parsing its whole METADATA."""
    dist = getattr(ep, "dist", None)
    return distmeta.field(dist, name) if dist is not None else None


def _since(started: float) -> float:
    return time.perf_counter() - started
