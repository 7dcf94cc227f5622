"""Loading what ``Plan.save`` and ``LanguageModel.save`` wrote (``opcore.graph.load``): the plan's
graph and weights read back (``opcore.graph.files``, ``opcore.graph.lm_files`` hold the formats),
every node decided again for this process by the plan's builder (``opcore.graph.assembly``).

>>> plan = opcore.graph.load("model.plan")        # doctest: +SKIP
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from opcore.errors import OpcoreError
from opcore.graph.assembly import assemble
from opcore.graph.errors import PlanFileError
from opcore.graph.files import (
    fingerprint_changes,
    graph_from,
    plan_options,
    read_document,
    read_json,
)
from opcore.graph.generation import GenerationDefaults, LanguageModel
from opcore.graph.ir import FACTORIES, SCALAR_OPS, STATE_OPS, Graph
from opcore.graph.lm_files import FORMAT as LM_FORMAT
from opcore.graph.lm_files import LM_FILE, is_lm_folder
from opcore.graph.lm_files import SCHEMA_VERSION as LM_SCHEMA_VERSION
from opcore.graph.trees import portable_spec
from opcore.graph.weights_file import read as read_weights

__all__ = ["load", "load_lm"]

_LOAD = "opcore.graph.load"


def load(path: Any, *, shared: Mapping[str, Any] | None = None) -> Any:
    """The plan saved in folder ``path``, planned again for this process (kernels resolved, weights
    prepared, partitions loaded from their files); works without the model's Python class. A folder
    that ``LanguageModel.save`` wrote loads as that (``load_lm``).

    ``shared``: tensors already in memory by the model's own names (a state_dict's), used in place of
    the file's copy where shape and dtype agree (a language model's two plans hold one copy).

    >>> plan = opcore.graph.load("llama.plan")        # doctest: +SKIP
    """
    import torch

    if is_lm_folder(path):
        return load_lm(path)
    started = time.perf_counter()
    folder = pathlib.Path(path)
    document = read_document(folder)
    trees: list[str] = []
    for key in ("in_spec", "out_spec"):  # structures named by packages that may not be imported here
        document["graph"][key] = portable_spec(str(document["graph"].get(key, "")), trees)
    graph = graph_from(document["graph"])
    options = plan_options(document["options"])
    _check_names(graph, document.get("kernels", {}), document.get("distributions", {}), options, trees)
    keys = dict((document.get("weights") or {}).get("keys") or {})
    constants = read_weights(folder, graph.constants, keys, options.device, shared or {}, graph.sources)
    notes = list(document.get("notes", ())) + trees
    changed = fingerprint_changes(document["fingerprint"], options.device)
    if changed:
        notes.append(
            "fingerprint differs from the saving machine's ("
            + ", ".join(changed)
            + "): partitions recompiled from their portable files, kernels chosen again"
        )
    saved = _partitions(document.get("partitions", []), folder, notes, options, document.get("distributions", {}))
    with torch.no_grad():
        plan = assemble(graph, constants, options, saved=saved if options.partitions else None)
    if options.route == "torch":
        notes.append(
            "the torch route runs node by node on the torch backend: a loaded plan has no exported program "
            "(plan.json holds opcore's nodes; nothing is unpickled)"
        )
    plan.notes = notes + plan.notes
    plan.fingerprint_changes = tuple(changed)
    _compare_kernels(plan, document.get("kernels", {}))
    plan.timings.load = time.perf_counter() - started
    return plan


def _check_names(
    graph: Graph, kernels: Mapping[str, Any], distributions: Mapping[str, Any], options: Any, notes: list[str]
) -> None:
    """Every op, size computation and kernel the file names must be one this process registered. A
    node whose kernel's backend is not loaded here is chosen again (a note says so), unless the plan is
    pinned to that backend: then, as for an op only that backend defines, the error names the backend
    and the distribution to install."""
    from opcore.runtime import runtime

    rt = runtime().ensure_loaded()
    registry = rt.registry
    known = set(graph.values)
    pinned = set(options.backends or ())
    missing: dict[str, list[str]] = {}
    for backend in sorted(pinned - set(registry.backends)):
        raise _missing_backend(backend, distributions, "the plan was captured with backends= naming it")
    for node in graph.nodes:
        kernel = kernels.get(node.name) or {}
        backend = str(kernel.get("backend") or "")
        if node.scalar:
            if node.op not in SCALAR_OPS and node.op not in FACTORIES and node.op not in STATE_OPS:
                raise PlanFileError(
                    f"node {node.name!r} names the size computation {node.op!r}, which is not one of opcore's", op=_LOAD
                )
        else:
            try:
                registry.contract(node.op)
            except OpcoreError as error:
                if backend and backend not in registry.backends:
                    why = f"node {node.name!r} runs its op {node.op!r}"
                    raise _missing_backend(backend, distributions, why) from error
                raise PlanFileError(
                    f"node {node.name!r} names op {node.op!r}, which is not registered here: {error}", op=_LOAD
                ) from error
        for name in node.refs():
            if name not in known:
                raise PlanFileError(f"node {node.name!r} reads {name!r}, which the graph does not define", op=_LOAD)
        source = kernel.get("source") or ""
        if source and backend and backend not in registry.backends:
            missing.setdefault(backend, []).append(node.name)
            continue
        if source and source not in {k.source for k in registry.kernels_of(node.op)}:
            raise PlanFileError(
                f"node {node.name!r} names kernel {source!r}, which is not a registered kernel of {node.op}",
                op=_LOAD,
                fix="a plan file only refers to kernels installed plugins register; this file was edited or comes "
                "from another installation",
            )
    for backend, names in sorted(missing.items()):
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        notes.append(
            f"backend {backend!r} ({_distribution_of(backend, distributions)}) ran {len(names)} node(s) when saved "
            f"({shown}) and is not loaded here: their kernels are chosen again"
        )


def _distribution_of(backend: str, distributions: Mapping[str, Any]) -> str:
    found = distributions.get(backend)
    return f"distribution {found}" if found else "the distribution that provides it"


def _missing_backend(backend: str, distributions: Mapping[str, Any], why: str) -> PlanFileError:
    """The error of a plan that needs a backend not loaded here, naming it and its distribution."""
    from opcore.runtime import runtime

    report = runtime().ensure_loaded().loader.reports.get(backend)
    state = (
        f"it is {report.status.value} here ({report.reason})"
        if report is not None and report.reason
        else (f"it is {report.status.value} here" if report is not None else "it is not installed here")
    )
    found = str(distributions.get(backend) or "").split(" ")[0]
    install = f"pip install {found}" if found else f"install the distribution that provides backend {backend!r}"
    return PlanFileError(
        f"the plan needs backend {backend!r} ({_distribution_of(backend, distributions)}): {why}, and {state}",
        op=_LOAD,
        fix=f"{install} (then `opcore doctor` lists it), or capture the model again with the backends installed here",
    )


def _partitions(
    records: list[Any], folder: pathlib.Path, notes: list[str], options: Any, distributions: Mapping[str, Any]
) -> dict[str, Any]:
    """name -> (backend, node names, bring_back(spec), note) for each saved partition whose compiler is here."""
    from opcore.graph import partitioning

    found = partitioning.compilers()
    saved: dict[str, Any] = {}
    for record in records:
        name, backend = str(record["name"]), str(record["backend"])
        if not name.isidentifier():
            raise PlanFileError(f"partition name {name!r} is not a plain name", op=_LOAD)
        for file in record.get("record", {}).get("files", []) if isinstance(record.get("record"), dict) else []:
            if not isinstance(file, str) or pathlib.Path(file).name != file:
                raise PlanFileError(f"partition {name} names file {file!r} outside its folder", op=_LOAD)
        compiler = found.get(backend)
        if compiler is None:
            notes.append(
                f"partition {name}: no {backend!r} partition compiler here "
                f"({_distribution_of(backend, distributions)}); its nodes run on kernels"
            )
            continue
        saved[name] = (
            backend,
            tuple(record["node_names"]),
            _bring_back(compiler, folder, record["record"], name, notes, options),
            record.get("note", ""),
        )
    return saved


def _bring_back(
    compiler: Any, folder: pathlib.Path, record: Mapping[str, Any], name: str, notes: list[str], options: Any
) -> Any:
    """bring_back(spec): the partition loaded from its files, else compiled again from the plan; None
    where the backend's compiler fails at both (its nodes then run on kernels), after one warning. A
    failure that may not pass (strict, or the backend pinned) raises the CompilerCrash."""
    from opcore.graph.partition_guard import CompilerCrash, compile_timeout, guarded, raises_for, warn_partition

    backend = compiler.backend

    def declined(error: OpcoreError) -> None:
        if isinstance(error, CompilerCrash) and raises_for(options, backend):
            raise error
        reason = getattr(error, "reason", None) or str(error)
        if isinstance(error, CompilerCrash):
            warn_partition(backend, "at load", reason, "its nodes run on kernels")
        notes.append(
            f"partition {name}: {backend} could neither load nor compile it ({reason}); its nodes run on kernels"
        )

    def bring_back(spec: Any) -> Any:
        timeout = compile_timeout()
        try:
            return guarded(backend, name, "load", partial(compiler.load, folder, record, spec), timeout)
        except OpcoreError as error:
            if isinstance(error, CompilerCrash) and raises_for(options, backend):
                raise
            reason = getattr(error, "reason", None) or str(error)
            if isinstance(error, CompilerCrash):
                warn_partition(backend, "at load", reason, "the partition is compiled again from the plan")
            notes.append(f"partition {name}: loading its files failed ({reason}); compiled again from the plan")
        try:
            return guarded(backend, name, "compile", partial(compiler.compile, spec), timeout)
        except OpcoreError as error:
            declined(error)
            return None

    return bring_back


def _compare_kernels(plan: Any, kernels: Mapping[str, Any]) -> None:
    changed = [
        f"{d.node}: {kernels[d.node].get('kernel') or kernels[d.node].get('backend')} -> {d.kernel or d.backend}"
        for d in plan.decisions
        if d.node in kernels and d.partition is None and (kernels[d.node].get("source") or "") != d.source
    ]
    if changed:
        plan.notes.append(f"{len(changed)} node(s) chose another kernel here: " + "; ".join(changed[:8]))


def load_lm(path: Any) -> Any:
    """The language model ``LanguageModel.save`` wrote to folder ``path``: its plans loaded, one copy
    of the weights shared between them."""
    started = time.perf_counter()
    folder = pathlib.Path(path)
    document = read_json(folder, LM_FILE, "LanguageModel.save")
    if not isinstance(document, dict) or document.get("format") != LM_FORMAT:
        raise PlanFileError(f"{folder / LM_FILE} is not an opcore language model file", op=_LOAD)
    if document.get("schema_version") != LM_SCHEMA_VERSION:
        raise PlanFileError(
            f"{folder / LM_FILE} has schema version {document.get('schema_version')!r}; this opcore reads "
            f"version {LM_SCHEMA_VERSION}",
            op=_LOAD,
            fix="capture the model again with this opcore",
        )
    decode = load(folder / "decode")
    shared = {decode.graph.sources[n]: decode.constants[n] for n in decode.graph.constants if n in decode.graph.sources}
    prefill = load(folder / "prefill", shared=shared) if document.get("prefill") else None
    # folders saved before the verify step existed have none
    verify = load(folder / "verify", shared=shared) if document.get("verify") else None
    lm = LanguageModel(
        prefill,
        decode,
        batch_size=int(document["batch_size"]),
        max_length=int(document["max_length"]),
        defaults=GenerationDefaults.from_json(document.get("defaults", {})),
        verify_plan=verify,
    )
    lm.load_seconds = time.perf_counter() - started
    return lm
