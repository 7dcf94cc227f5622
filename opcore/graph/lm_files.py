"""A captured language model on disk: ``lm.json`` and the two plans' folders (plan file rules:
JSON, safetensors, portable partition files, a fingerprint; nothing is unpickled).

    folder/lm.json        format "opcore-lm", sizes, generation defaults
    folder/prefill/       Plan.save of the prefill plan (absent when max_length is 1)
    folder/decode/        Plan.save of the decode plan

The model's weights are in both plans' ``weights.safetensors`` (each plan's folder loads on its
own); loading shares one copy in memory between the two plans.

>>> lm.save("llama.lm"); again = opcore.graph.load("llama.lm")      # doctest: +SKIP
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

from opcore.graph.errors import PlanFileError

__all__ = ["LM_FILE", "is_lm_folder", "load", "save"]

LM_FILE = "lm.json"
FORMAT = "opcore-lm"
SCHEMA_VERSION = 1
_LOAD = "opcore.graph.load"


def is_lm_folder(path: Any) -> bool:
    return (pathlib.Path(path) / LM_FILE).is_file()


def save(lm: Any, path: Any) -> pathlib.Path:
    folder = pathlib.Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    if lm.prefill_plan is not None:
        lm.prefill_plan.save(folder / "prefill")
    lm.decode_plan.save(folder / "decode")
    document = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "batch_size": lm.batch_size,
        "max_length": lm.max_length,
        "prefill": lm.prefill_plan is not None,
        "defaults": lm.defaults.to_json(),
    }
    (folder / LM_FILE).write_text(json.dumps(document, indent=1))
    return folder


def load(path: Any) -> Any:
    from opcore.graph.files import load as load_plan
    from opcore.graph.generation import GenerationDefaults, LanguageModel

    started = time.perf_counter()
    folder = pathlib.Path(path)
    try:
        document = json.loads((folder / LM_FILE).read_text())
    except json.JSONDecodeError as error:
        raise PlanFileError(f"{folder / LM_FILE} is not JSON: {error}", op=_LOAD) from error
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise PlanFileError(f"{folder / LM_FILE} is not an opcore language model file", op=_LOAD)
    if document.get("schema_version") != SCHEMA_VERSION:
        raise PlanFileError(
            f"{folder / LM_FILE} has schema version {document.get('schema_version')!r}; this opcore reads "
            f"version {SCHEMA_VERSION}",
            op=_LOAD,
            fix="capture the model again with this opcore",
        )
    decode = load_plan(folder / "decode")
    shared = {decode.graph.sources[n]: decode.constants[n] for n in decode.graph.constants if n in decode.graph.sources}
    prefill = load_plan(folder / "prefill", shared=shared) if document.get("prefill") else None
    lm = LanguageModel(
        prefill,
        decode,
        batch_size=int(document["batch_size"]),
        max_length=int(document["max_length"]),
        defaults=GenerationDefaults.from_json(document.get("defaults", {})),
    )
    lm.load_seconds = time.perf_counter() - started
    return lm
