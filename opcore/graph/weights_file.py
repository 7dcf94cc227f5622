"""A saved plan's weights: one safetensors file holding each distinct tensor once.

One file serves several plans (a language model's prefill and decode plans take the same weights:
``lm_files`` writes one table for both and links it into both folders), tied weights (two constants
over the same memory: one entry, ``keys`` maps both names to it), and the partitions saved beside
it: ``places`` says where each constant's bytes lie in the file (after its header), and the plan's
save hands that to the partitions (``opcore.partition_protocol.saving_weights``), whose files may
refer to those bytes instead of holding a copy (ONNX external data with an offset).

``plan.json`` records ``{"weights": {"keys": {constant: key}}}`` for every constant saved under
another key (an alias, or a name the other plan of the file already gave another tensor); a
constant absent from it is saved under its own name (so are plans saved before the table).

>>> import torch
>>> from types import SimpleNamespace
>>> w = torch.ones(2, 3)
>>> plan = SimpleNamespace(graph=SimpleNamespace(constants=("w", "lm_head")), constants={"w": w, "lm_head": w})
>>> table = weight_table([plan])
>>> sorted(table.tensors), table.keys[0]
(['w'], {'w': 'w', 'lm_head': 'w'})
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opcore.graph.errors import PlanFileError
from opcore.partition_protocol import SavedBytes

__all__ = ["WEIGHTS_FILE", "SharedWeights", "WeightTable", "link", "places", "read", "weight_table", "write"]

WEIGHTS_FILE = "weights.safetensors"
_LOAD = "opcore.graph.load"


@dataclass(frozen=True, slots=True)
class WeightTable:
    """The distinct tensors of some plans by key, and per plan (in order) its constants' keys."""

    tensors: dict[str, Any]
    keys: tuple[dict[str, str], ...]


@dataclass(frozen=True, slots=True)
class SharedWeights:
    """A weights file already written (``path``), one plan's constant -> key, and each key's
    (offset, length) in the file: what a plan's save links into its folder instead of writing."""

    path: pathlib.Path
    keys: Mapping[str, str]
    index: Mapping[str, tuple[int, int]]


def weight_table(plans: Sequence[Any]) -> WeightTable:
    """One entry per distinct tensor of ``plans`` (same memory, dtype and shape: one key), keyed by
    the first constant name that holds it; a later tensor whose name is taken gets ``"<plan>.<name>"``
    (``<plan>`` its index). Tensors over memory an entry already uses with another shape are copied
    (safetensors keeps no two views of one storage)."""
    tensors: dict[str, Any] = {}
    seen: dict[tuple[Any, ...], str] = {}
    storages: set[int] = set()
    keys: list[dict[str, str]] = []
    for number, plan in enumerate(plans):
        mine: dict[str, str] = {}
        for name in plan.graph.constants:
            held = plan.constants[name].detach()
            # the tensor as the plans hold it (a cuda plan's too: its host copies below are new each time)
            identity = (str(held.device), held.data_ptr(), held.dtype, tuple(held.shape), held.stride())
            key = seen.get(identity) if held.numel() else None
            if key is None:
                tensor = held.cpu().contiguous()
                key = name if name not in tensors else f"{number}.{name}"
                storage = tensor.untyped_storage().data_ptr()
                if tensor.numel() and storage in storages:
                    tensor = tensor.clone()
                storages.add(storage)
                tensors[key] = tensor
                if held.numel():
                    seen[identity] = key
            mine[name] = key
        keys.append(mine)
    return WeightTable(tensors, tuple(keys))


def write(table: WeightTable, path: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Write ``table`` as safetensors at ``path``; each key's (offset, length) of bytes in the file."""
    from safetensors.torch import save_file

    staged = path.with_name(f".{path.name}.saving")  # renamed over: a reader of the old file keeps it whole
    save_file(table.tensors, str(staged))
    os.replace(staged, path)
    return {key: (entry["offset"], entry["length"]) for key, entry in header(path).items()}


def header(path: pathlib.Path) -> dict[str, dict[str, Any]]:
    """key -> {"dtype", "shape", "offset", "length"} of a safetensors file (offsets from the file's start)."""
    try:
        with open(path, "rb") as file:
            size = int.from_bytes(file.read(8), "little")
            document = json.loads(file.read(size))
    except (OSError, ValueError) as error:
        raise PlanFileError(f"{path} is not a readable safetensors file: {error}", op=_LOAD) from error
    start = 8 + size
    try:
        entries = {
            key: {
                "dtype": entry["dtype"],
                "shape": tuple(entry["shape"]),
                "offset": start + entry["data_offsets"][0],
                "length": entry["data_offsets"][1] - entry["data_offsets"][0],
            }
            for key, entry in document.items()
            if key != "__metadata__"
        }
    except (AttributeError, KeyError, TypeError, IndexError) as error:
        raise PlanFileError(f"{path} is not a readable safetensors file: its header is not one", op=_LOAD) from error
    described = max((entry["offset"] + entry["length"] for entry in entries.values()), default=start)
    held = os.path.getsize(path)
    if held < described:
        raise PlanFileError(
            f"{path} holds {held} bytes where its header describes {described}: the file is cut short "
            "(a copy or a save that did not finish)",
            op=_LOAD,
            fix="save the plan again, or copy the whole folder",
        )
    return entries


def places(
    plan: Any, keys: Mapping[str, str], index: Mapping[str, tuple[int, int]]
) -> dict[tuple[int, int], SavedBytes]:
    """(address, bytes) of each host constant's memory -> where the file holds its bytes."""
    found = {}
    for name in plan.graph.constants:
        tensor = plan.constants[name]
        key = keys.get(name, name)
        if tensor.device.type != "cpu" or not tensor.is_contiguous() or not tensor.numel() or key not in index:
            continue
        offset, length = index[key]
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes == length:
            found[(tensor.data_ptr(), nbytes)] = SavedBytes(WEIGHTS_FILE, offset, length)
    return found


def link(source: pathlib.Path, target: pathlib.Path) -> None:
    """``target`` the same file as ``source``: a hard link (no second copy on disk), a copy where the
    file system has none."""
    if target.exists() and source.resolve() == target.resolve():
        return
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


# safetensors' dtype names of the torch dtypes plans hold (a shared tensor is used only where they agree)
_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}  # fmt: skip


def read(
    folder: pathlib.Path,
    names: Sequence[str],
    keys: Mapping[str, str],
    device: str,
    shared: Mapping[str, Any],
    sources: Mapping[str, str],
) -> dict[str, Any]:
    """The constants ``names`` from ``folder``'s weights file, each key read once (aliases share the
    tensor); a constant whose model weight (``sources``) is in ``shared`` with the file's shape and
    dtype is that tensor, not read."""
    from safetensors import safe_open

    path = folder / WEIGHTS_FILE
    entries = header(path)
    missing = [name for name in names if keys.get(name, name) not in entries]
    if missing:
        raise PlanFileError(f"{WEIGHTS_FILE} lacks {', '.join(missing[:5])}", op=_LOAD)
    found: dict[str, Any] = {}
    by_key: dict[str, Any] = {}
    host = "cpu" if device.startswith("cuda") else device  # read on the host, then moved

    def damaged(error: Exception) -> PlanFileError:  # safetensors' SafetensorError, an OSError
        return PlanFileError(f"{path} is not a readable safetensors file: {error}", op=_LOAD)

    try:
        opened = safe_open(str(path), framework="pt", device=host)
    except Exception as error:
        raise damaged(error) from error
    with opened as file:
        for name in names:
            key = keys.get(name, name)
            held = shared.get(sources.get(name) or "")
            entry = entries[key]
            if held is not None and tuple(held.shape) == entry["shape"]:
                if _DTYPES.get(str(held.dtype).removeprefix("torch.")) == entry["dtype"]:
                    found[name] = held
                    continue
            if key not in by_key:
                try:
                    tensor = file.get_tensor(key)
                except Exception as error:
                    raise damaged(error) from error
                by_key[key] = tensor.to(device)  # on the device: its own errors (out of memory) are its own
            found[name] = by_key[key]
    return found
