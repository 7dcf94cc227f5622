"""Where a worker finds a plan's files: a path (a shared filesystem, or the same path on every node)
or the object store (``put_plan``: the folder's files as one object, written out once per node).

>>> source = put_plan("llama.plan")                  # doctest: +SKIP
>>> ds.map_batches(PlanPredictor, fn_constructor_args=(source,), num_cpus=2)   # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
from dataclasses import dataclass
from typing import Any

from opcore.graph.errors import PlanFileError

__all__ = ["PlanInStore", "put_plan", "resolve"]

# the files a saved plan or language model holds are small in number; a folder of more is not a plan
_MAX_FILES = 10_000


@dataclass(frozen=True, slots=True)
class PlanInStore:
    """A plan folder's files in Ray's object store. ``files``: the ObjectRef of {relative path: bytes,
    or the relative path of the same file (hard-linked in the folder: a language model's weights)};
    ``name``: the folder's name; ``digest``: sha256 over the files (the folder a node writes them to)."""

    files: Any
    name: str
    digest: str


def put_plan(path: str | os.PathLike[str]) -> PlanInStore:
    """The plan folder ``path`` (Plan.save or LanguageModel.save) put into the object store once, for
    workers that do not share the driver's filesystem.

    >>> source = put_plan("model.plan")                # doctest: +SKIP
    """
    import ray

    folder = _existing(path, "put_plan")
    files, digest = folder_files(folder)
    return PlanInStore(ray.put(files), folder.name, digest)


def folder_files(folder: pathlib.Path) -> tuple[dict[str, bytes | str], str]:
    """{relative path: bytes, or the relative path of the same file (hard-linked)} of a plan folder,
    and the sha256 over them."""
    files: dict[str, bytes | str] = {}
    seen: dict[tuple[int, int], str] = {}  # a hard-linked file (a language model's weights) goes in once
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = file.relative_to(folder).as_posix()
        stat = file.stat()
        first = seen.setdefault((stat.st_dev, stat.st_ino), relative)
        if first != relative:
            files[relative] = first  # the same file: linked when written out
            digest.update(relative.encode() + b"\0link\0" + first.encode())
        else:
            data = file.read_bytes()
            files[relative] = data
            digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
        if len(files) > _MAX_FILES:
            raise PlanFileError(f"{folder} holds more than {_MAX_FILES} files: not a plan folder", op="put_plan")
    return files, digest.hexdigest()


def resolve(source: Any, op: str) -> pathlib.Path:
    """The local folder of ``source``: a path as it is (it must exist on this node), or a
    PlanInStore written out under the temporary folder, once per node (by its digest)."""
    if isinstance(source, PlanInStore):
        return _written_out(source)
    if isinstance(source, (str, os.PathLike)):
        return _existing(source, op)
    raise PlanFileError(
        f"the plan source is a {type(source).__name__}",
        op=op,
        fix="pass a plan folder's path (str or pathlib.Path) or what opcore.ray.put_plan returned",
    )


def _existing(path: str | os.PathLike[str], op: str) -> pathlib.Path:
    folder = pathlib.Path(path)
    if not folder.is_dir():
        import socket

        raise PlanFileError(
            f"the plan folder {str(folder)!r} "
            + ("is a file, not a folder" if folder.is_file() else "does not exist")
            + f" on node {socket.gethostname()}",
            op=op,
            fix="save the plan to a filesystem every node mounts at that path, or pass opcore.ray.put_plan(path) "
            "to send its files through the object store",
        )
    return folder


def _written_out(source: PlanInStore) -> pathlib.Path:
    import ray

    root = pathlib.Path(tempfile.gettempdir()) / "opcore-ray" / source.digest
    folder = root / source.name
    if folder.is_dir():
        return folder
    files = source.files if isinstance(source.files, dict) else ray.get(source.files)
    root.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    for relative in files:
        if ".." in pathlib.PurePosixPath(relative).parts or pathlib.PurePosixPath(relative).is_absolute():
            raise PlanFileError(f"the stored plan names the file {relative!r} outside its folder", op="put_plan")
    for relative, data in sorted(files.items(), key=lambda item: isinstance(item[1], str)):  # bytes first
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):  # the same file as another: a hard link (a copy where there are none)
            if not isinstance(files.get(data), bytes):
                raise PlanFileError(f"the stored plan links {relative!r} to {data!r}, which it lacks", op="put_plan")
            try:
                os.link(staging / data, target)
            except OSError:
                import shutil

                shutil.copyfile(staging / data, target)
        else:
            target.write_bytes(data)
    try:
        os.rename(staging, folder)  # atomic: actors of one node writing at once keep the first complete copy
    except OSError:
        if not folder.is_dir():
            raise
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return folder
