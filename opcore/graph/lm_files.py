"""A captured language model on disk: ``lm.json`` and the two plans' folders (plan file rules:
JSON, safetensors, portable partition files, a fingerprint; nothing is unpickled).

    folder/lm.json        format "opcore-lm", sizes, generation defaults
    folder/prefill/       Plan.save of the prefill plan (absent when max_length is 1)
    folder/decode/        Plan.save of the decode plan

The model's weights are in both plans' ``weights.safetensors`` (each plan's folder loads on its
own); loading shares one copy in memory between the two plans.

Loading (``opcore.graph.load``) is ``opcore.graph.loading.load_lm``: this module writes and knows
the layout, and imports neither the plans' builder nor the language model record.

>>> lm.save("llama.lm"); again = opcore.graph.load("llama.lm")      # doctest: +SKIP
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

__all__ = ["FORMAT", "LM_FILE", "SCHEMA_VERSION", "is_lm_folder", "save"]

LM_FILE = "lm.json"
FORMAT = "opcore-lm"
SCHEMA_VERSION = 1


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
