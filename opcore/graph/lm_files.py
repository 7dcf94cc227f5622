"""A captured language model on disk: ``lm.json`` and the plans' folders (plan file rules:
JSON, safetensors, portable partition files, a fingerprint; nothing is unpickled).

    folder/lm.json        format "opcore-lm", sizes, generation defaults
    folder/prefill/       Plan.save of the prefill plan (absent when max_length is 1)
    folder/decode/        Plan.save of the decode plan
    folder/verify/        Plan.save of the verify step's plan (captured with draft_tokens; else absent)

The plans' ``weights.safetensors`` are one file (``opcore.graph.weights_file``: each distinct
tensor once, written in ``decode/`` and hard-linked into the others, copied where the file system
has no links), so each plan's folder still loads on its own; partitions refer to its bytes instead
of holding copies where their runtime can (ONNX Runtime's). Loading shares one copy in memory
between the plans.

Loading (``opcore.graph.load``) is ``opcore.graph.loading.load_lm``: this module writes and knows
the layout, and imports neither the plans' builder nor the language model record.

>>> lm.save("llama.lm"); again = opcore.graph.load("llama.lm")      # doctest: +SKIP
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from opcore.graph.files import made_folder
from opcore.graph.files import save as save_plan
from opcore.graph.weights_file import WEIGHTS_FILE, SharedWeights, weight_table, write

__all__ = ["FORMAT", "LM_FILE", "SCHEMA_VERSION", "is_lm_folder", "save"]

LM_FILE = "lm.json"
FORMAT = "opcore-lm"
SCHEMA_VERSION = 1


def is_lm_folder(path: Any) -> bool:
    return (pathlib.Path(path) / LM_FILE).is_file()


def save(lm: Any, path: Any) -> pathlib.Path:
    folder = made_folder(path, "LanguageModel.save")
    plans = {"decode": lm.decode_plan, **({"prefill": lm.prefill_plan} if lm.prefill_plan is not None else {})}
    if lm.verify_plan is not None:
        plans["verify"] = lm.verify_plan
    table = weight_table(list(plans.values()))
    (folder / "decode").mkdir(parents=True, exist_ok=True)
    file = folder / "decode" / WEIGHTS_FILE
    index = write(table, file)
    for (name, plan), keys in zip(plans.items(), table.keys):
        save_plan(plan, folder / name, weights=SharedWeights(file, keys, index))
    document = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "batch_size": lm.batch_size,
        "max_length": lm.max_length,
        "prefill": lm.prefill_plan is not None,
        "verify": lm.verify_plan is not None,
        "defaults": lm.defaults.to_json(),
    }
    (folder / LM_FILE).write_text(json.dumps(document, indent=1))
    return folder
