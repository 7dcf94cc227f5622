"""Saved plans: a folder with ``plan.json``, ``weights.safetensors`` and each partition's files.

Nothing in the folder is executed or imported: ``plan.json`` is data (ops, arguments, metas,
kernel names), and loading resolves every name only against what is registered in this process:
ops against the registry (``aten.*`` names against ``torch.ops.aten``), size computations against
a closed table, kernel sources against the registered kernels of the node's op, partitions against
the loaded partition compilers, which read their own portable files (.onnx, OpenVINO IR). Weights
are safetensors (no pickle). A fingerprint (versions, CPU ISA, GPU) that differs from this
machine's is said in ``plan.notes`` and the partitions are compiled again from their files.

Loading is ``opcore.graph.loading``: this module writes plans and reads the format back, and imports
neither the plan record nor its builder.

>>> plan.save("model.plan")                       # doctest: +SKIP
>>> plan = opcore.graph.load("model.plan")        # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import pathlib
import platform
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from opcore._version import __version__
from opcore.errors import OpcoreError
from opcore.graph.errors import PlanFileError
from opcore.graph.ir import CallSignature, Graph, Node, ValueInfo, ValueRef
from opcore.graph.options import PlanOptions
from opcore.graph.weights_file import WEIGHTS_FILE, SharedWeights, link, places, weight_table, write
from opcore.types import Device, DType, TensorMeta

__all__ = [
    "FORMAT",
    "PLAN_FILE",
    "SCHEMA_VERSION",
    "WEIGHTS_FILE",
    "SavedPlan",
    "fingerprint",
    "fingerprint_changes",
    "graph_from",
    "made_folder",
    "plan_options",
    "read_document",
    "read_json",
    "save",
]

SCHEMA_VERSION = 1
FORMAT = "opcore.graph.plan"
PLAN_FILE = "plan.json"
_LOAD = "opcore.graph.load"


# --- values <-> JSON ------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """A bound argument as JSON: refs, tuples, numbers (inf and nan too), torch dtypes and enums."""
    if isinstance(value, ValueRef):
        return {"ref": value.name}
    if isinstance(value, (tuple, list)):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    kind = type(value).__module__ + "." + type(value).__name__
    if kind == "torch.dtype":
        return {"torch_dtype": DType.from_torch(value).value}
    if kind in ("torch.device",):
        return {"torch_device": str(value)}
    if kind in ("torch.memory_format", "torch.layout"):
        return {"torch_object": str(value).removeprefix("torch.")}
    raise PlanFileError(f"cannot save an argument of type {kind} ({value!r})", op="Plan.save")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        raise PlanFileError(f"unexpected list {value!r} in {PLAN_FILE}", op=_LOAD)
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise PlanFileError(f"unexpected object {value!r} in {PLAN_FILE}", op=_LOAD)
    ((tag, inner),) = value.items()
    if tag == "ref" and isinstance(inner, str):
        return ValueRef(inner)
    if tag == "tuple" and isinstance(inner, list):
        return tuple(decode(v) for v in inner)
    if tag == "float" and inner in ("inf", "-inf", "nan"):
        return float(inner)
    if tag == "torch_dtype":
        return DType.parse(inner).to_torch()
    if tag == "torch_device":
        import torch

        return torch.device(str(inner))
    if tag == "torch_object" and isinstance(inner, str) and inner.isidentifier():
        import torch

        found = getattr(torch, inner, None)
        if isinstance(found, (torch.memory_format, torch.layout)):
            return found
    raise PlanFileError(f"unexpected {tag!r} value {inner!r} in {PLAN_FILE}", op=_LOAD)


def _meta_json(info: ValueInfo) -> dict[str, Any]:
    if info.meta is None:
        return {"scalar": encode(info.example)}
    return {
        "dtype": info.meta.dtype.value,
        "shape": list(info.meta.shape),
        "device": str(info.meta.device),
        "dims": list(info.dims),
    }


def _meta_from(name: str, record: Mapping[str, Any]) -> ValueInfo:
    if "scalar" in record:
        return ValueInfo(name, None, (), decode(record["scalar"]))
    meta = TensorMeta(
        tuple(int(s) for s in record["shape"]), DType.parse(record["dtype"]), Device.parse(record["device"])
    )
    dims = tuple(d if isinstance(d, str) else int(d) for d in record.get("dims", meta.shape))
    return ValueInfo(name, meta, dims)


# --- fingerprint ----------------------------------------------------------------------------


def fingerprint(backends: set[str], device: str) -> dict[str, Any]:
    """What a saved plan's choices depend on: versions of opcore, Python, torch and each backend used
    (with its runtime library), the CPU's ISA as the cpu backend reports it, and the GPU."""
    from opcore import distmeta
    from opcore.runtime import runtime

    rt = runtime().ensure_loaded()
    libraries = {}
    for dist in ("torch", "onnxruntime", "onnx", "openvino", "safetensors"):
        found = distmeta.version(dist)  # the METADATA header alone: importlib.metadata parses all of it (~1 ms each)
        if found is not None:
            libraries[dist] = found
    used = {name: rt.registry.backends[name].version for name in sorted(backends) if name in rt.registry.backends}
    isa = None
    cpu = rt.registry.backends.get("cpu")
    if cpu is not None and cpu.describe is not None:
        isa = dict(cpu.describe()).get("ISA")
    gpu = None
    if device.startswith("cuda"):
        import torch

        gpu = torch.cuda.get_device_name(Device.parse(device).index or 0) if torch.cuda.is_available() else None
    return {
        "opcore": __version__,
        "python": platform.python_version(),
        "libraries": libraries,
        "backends": used,
        "machine": platform.machine(),
        "cpu_isa": isa,
        "gpu": gpu,
    }


def fingerprint_changes(saved: Mapping[str, Any], device: str) -> list[str]:
    """The fields of a saved fingerprint in which this process differs (sorted; [] when none do).

    >>> fingerprint_changes(fingerprint(set(), "cpu"), "cpu")
    []
    """
    here = fingerprint(set(saved.get("backends", {})), device)
    return sorted(k for k in here if here[k] != saved.get(k))


# --- save -----------------------------------------------------------------------------------


def made_folder(path: Any, op: str) -> pathlib.Path:
    """The folder ``path`` (made, with its parents, where missing) a save writes into; a PlanFileError
    naming it where it cannot be (a file there, no permission), before anything is written."""
    folder = pathlib.Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PlanFileError(
            f"cannot write a folder at {folder}: {error.strerror or error}",
            op=op,
            fix="pass the path of a folder (new, or one a save wrote before) where you may write",
        ) from error
    return folder


def save(plan: Any, path: Any, *, weights: SharedWeights | None = None) -> pathlib.Path:
    """Write ``plan`` to folder ``path``; ``weights``: a weights file already written for it (a
    language model's plans share one), linked into the folder instead of written again."""
    from opcore.partition_protocol import saving_weights

    folder = made_folder(path, "Plan.save")
    graph: Graph = plan.graph
    if weights is None:
        table = weight_table([plan])
        keys, index = table.keys[0], write(table, folder / WEIGHTS_FILE)
    else:
        link(weights.path, folder / WEIGHTS_FILE)
        keys, index = dict(weights.keys), dict(weights.index)
    partitions = []
    notes = list(plan.notes)
    with saving_weights(places(plan, keys, index)):  # partitions may refer to the weights' bytes there
        for record in plan.partitions:
            saved = _save_partition(plan, record, folder)
            if saved is None:
                notes.append(
                    f"partition {record.name}: its {record.backend} files could not be saved; its nodes run on kernels"
                )
                continue
            partitions.append({**record.describe(), "record": saved})
    document = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fingerprint": fingerprint(
            {d.backend for d in plan.decisions} - {"python", "decomposition"}, plan.options.device
        ),
        "options": {
            "backends": list(plan.options.backends) if plan.options.backends is not None else None,
            "fallback": plan.options.fallback,
            "device": plan.options.device,
            "partitions": plan.options.partitions,
            "rewrites": plan.options.rewrites,
            "cuda_graph": plan.options.cuda_graph,
            "route": plan.options.route,
            "weight_copies": plan.options.weight_copies,
            "shape_compiles": plan.options.shape_compiles,
        },
        "graph": {
            "inputs": list(graph.inputs),
            "constants": list(graph.constants),
            "sources": dict(graph.sources),
            "outputs": [encode(o) for o in graph.outputs],
            "in_spec": graph.in_spec,
            "out_spec": graph.out_spec,
            "fixed_inputs": [[position, encode(value)] for position, value in graph.fixed_inputs],
            "state": list(graph.state),
            "bounds": {name: list(interval) for name, interval in graph.bounds.items()},
            **_signature_json(graph.signature),
            "values": {name: _meta_json(info) for name, info in graph.values.items()},
            "nodes": [
                {
                    "name": node.name,
                    "op": node.op,
                    "target": node.target,
                    "args": [encode(a) for a in node.args],
                    "outputs": list(node.outputs),
                    **({"scalar": True} if node.scalar else {}),
                }
                for node in graph.nodes
            ],
        },
        "kernels": {
            d.node: {
                "backend": d.backend,
                "kernel": d.kernel,
                "source": d.source,
                "partition": d.partition,
                "note": d.note,
                "verdicts": [[v.backend, v.status, v.reason, v.kernel] for v in d.verdicts],
            }
            for d in plan.decisions
        },
        "weights": {"keys": {name: key for name, key in keys.items() if name != key}},
        "partitions": partitions,
        "notes": notes,
        # backend -> "distribution version", for the error or note of a process that lacks one
        "distributions": _distributions({d.backend for d in plan.decisions}),
    }
    (folder / PLAN_FILE).write_text(json.dumps(document, indent=1))
    return folder


def _distributions(backends: set[str]) -> dict[str, str]:
    from opcore.runtime import runtime

    reports = runtime().ensure_loaded().loader.reports
    found = {}
    for name in sorted(backends):
        report = reports.get(name)
        if report is not None and report.distribution:
            found[name] = f"{report.distribution} {report.distribution_version or ''}".strip()
    return found


def _save_partition(plan: Any, record: Any, folder: pathlib.Path) -> dict[str, Any] | None:
    """The JSON record of ``record``'s files, written by its compiled partition's ``save``; None where the
    backend's save failed (a CompilerCrash where that may not pass: strict, or the backend pinned)."""
    from opcore.graph.partition_guard import CompilerCrash, guarded, raises_for, warn_partition

    try:
        saved = guarded(record.backend, record.name, "save", partial(record.compiled.save, folder))
        try:
            json.dumps(saved)
        except (TypeError, ValueError) as error:
            reason = f"its save() returned a record that is not JSON: {error}"
            raise CompilerCrash(record.name, record.backend, reason) from error
        if not isinstance(saved, dict):
            raise CompilerCrash(record.name, record.backend, f"its save() returned {type(saved).__name__}, not a dict")
    except OpcoreError as error:
        if raises_for(plan.options, record.backend):
            raise
        warn_partition(record.backend, "saving", getattr(error, "reason", error), "the plan is saved without it")
        return None
    return saved


# --- load -----------------------------------------------------------------------------------


def plan_options(saved: Mapping[str, Any]) -> PlanOptions:
    """The options a plan file recorded (JSON holds the backends as a list, the record a tuple)."""
    options = dict(saved)
    if options.get("backends") is not None:
        options["backends"] = tuple(options["backends"])
    return PlanOptions(**options)


def read_document(folder: pathlib.Path) -> dict[str, Any]:
    document = read_json(folder, PLAN_FILE, "Plan.save (or LanguageModel.save: its lm.json)")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        kind = f"format {document.get('format')!r}" if isinstance(document, dict) else type(document).__name__
        raise PlanFileError(f"{folder / PLAN_FILE} is not an opcore plan ({kind})", op=_LOAD)
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PlanFileError(
            f"{folder / PLAN_FILE} has schema version {version!r}; this opcore reads version {SCHEMA_VERSION}",
            op=_LOAD,
            fix="capture the model again with this opcore, or load it with the opcore that saved it",
        )
    return document


def read_json(folder: pathlib.Path, name: str, saver: str) -> Any:
    """The JSON document ``folder / name``; a PlanFileError naming the path where the folder is a
    file or lacks ``name`` (the fix names ``saver``, what writes it), or where it cannot be read or
    is not JSON."""
    path = folder / name
    fix = f"pass the folder {saver} wrote"
    if folder.is_file():
        raise PlanFileError(f"{folder} is a file, not a saved folder", op=_LOAD, fix=fix)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise PlanFileError(f"{folder} has no {name}", op=_LOAD, fix=fix) from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PlanFileError(f"{path} is not JSON: {error}", op=_LOAD) from error
    except OSError as error:
        raise PlanFileError(f"{path} cannot be read: {error.strerror or error}", op=_LOAD) from error


def graph_from(record: Mapping[str, Any]) -> Graph:
    try:
        values = {name: _meta_from(name, info) for name, info in record["values"].items()}
        nodes = tuple(
            Node(
                str(n["name"]),
                str(n["op"]),
                str(n["target"]),
                tuple(decode(a) for a in n["args"]),
                tuple(str(o) for o in n["outputs"]),
                bool(n.get("scalar", False)),
            )
            for n in record["nodes"]
        )
        return Graph(
            inputs=tuple(record["inputs"]),
            constants=tuple(record["constants"]),
            nodes=nodes,
            outputs=tuple(decode(o) for o in record["outputs"]),
            values=values,
            fixed_inputs=tuple((int(p), decode(v)) for p, v in record.get("fixed_inputs", [])),
            in_spec=str(record.get("in_spec", "")),
            out_spec=str(record.get("out_spec", "")),
            sources=dict(record.get("sources", {})),
            state=tuple(str(name) for name in record.get("state", [])),
            bounds={str(k): (int(v[0]), int(v[1])) for k, v in record.get("bounds", {}).items()},
            signature=_signature_from(record),
        )
    except PlanFileError:
        raise
    except (KeyError, TypeError, ValueError, OpcoreError) as error:
        raise PlanFileError(f"{PLAN_FILE} has a malformed graph: {type(error).__name__}: {error}", op=_LOAD) from error


def _signature_json(signature: CallSignature | None) -> dict[str, Any]:
    """The call signature's fields in the graph record (absent where none was recorded)."""
    if signature is None:
        return {}
    return {
        "input_labels": list(signature.labels),
        "size_ranges": {name: [low, high] for name, (low, high) in signature.ranges.items()},
        "size_guards": list(signature.guards),
    }


def _signature_from(record: Mapping[str, Any]) -> CallSignature | None:
    """The call signature of a graph record; None for a plan saved before it was recorded. Guards are
    text that opcore.graph.signature reads with its closed interpreter, never evaluated as code."""
    if "input_labels" not in record:
        return None
    labels = tuple(str(label) for label in record["input_labels"])
    if len(labels) != len(record["inputs"]):
        raise PlanFileError(
            f"{PLAN_FILE} names {len(labels)} input labels for {len(record['inputs'])} inputs", op=_LOAD
        )
    ranges = {
        str(name): (int(low), None if high is None else int(high))
        for name, (low, high) in dict(record.get("size_ranges", {})).items()
    }
    return CallSignature(labels, ranges, tuple(str(g) for g in record.get("size_guards", [])))


class _SavedPartition:
    def __init__(self, record: Mapping[str, Any]) -> None:
        self.record = {k: v for k, v in record.items() if k != "record"}
        self.name, self.backend = str(record["name"]), str(record["backend"])

    def describe(self) -> dict[str, Any]:
        return dict(self.record)


class SavedPlan:
    """A saved plan as data, for showing it (``opcore plan PATH``): nothing is resolved or compiled."""

    def __init__(self, folder: Any) -> None:
        from opcore.graph.planner import Decision, Verdict

        self.folder = pathlib.Path(folder)
        document = read_document(self.folder)
        self.document = document
        self.graph = graph_from(document["graph"])
        kernels = document.get("kernels", {})
        self.decisions = tuple(
            Decision(
                node.name,
                node.op,
                kernels.get(node.name, {}).get("backend", ""),
                kernels.get(node.name, {}).get("kernel", ""),
                kernels.get(node.name, {}).get("source", ""),
                kernels.get(node.name, {}).get("partition"),
                tuple(Verdict(*map(str, row)) for row in kernels.get(node.name, {}).get("verdicts", [])),
                kernels.get(node.name, {}).get("note", ""),
            )
            for node in self.graph.nodes
        )
        self.options = plan_options(document["options"])
        self.partitions = tuple(_SavedPartition(p) for p in document.get("partitions", []))
        self.notes = list(document.get("notes", ()))
        self.fingerprint = document.get("fingerprint", {})
