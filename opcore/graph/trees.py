"""A saved plan's input and output structures, read back without the model's Python package.

A plan records how the model takes and returns its tensors as torch's pytree specs (text). A spec
names each container's type: Python's own (tuple, list, dict) and torch's are always known, but a
model returning transformers' ``BaseModelOutputWithPooling`` names a class that pytree knows only
once ``transformers.modeling_outputs`` is imported. ``portable_spec`` makes a spec readable in this
process: a named type whose module is installed is imported (the plan returns that very class); one
whose module is not installed, with named fields (a ModelOutput, a dict-like record), is rebuilt as
``PlainOutput``, a dict that also reads its fields as attributes and by position, as ModelOutput does;
anything else names the module to install.

>>> out = PlainOutput(last_hidden_state=1, pooler_output=2)
>>> out.last_hidden_state, out[1], out["pooler_output"]
(1, 2, 2)
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from opcore.graph.errors import PlanFileError

__all__ = ["PLAIN_TYPE", "PlainOutput", "portable_spec"]

PLAIN_TYPE = "opcore.graph.trees.PlainOutput"


class PlainOutput(dict):  # type: ignore[type-arg]
    """The fields of a model's output record whose class is not importable here (transformers'
    ModelOutput without transformers): by name (``out["logits"]``, ``out.logits``) and by position
    (``out[0]``), as a ModelOutput reads them."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, slice)):
            return tuple(self.values())[key]
        return super().__getitem__(key)

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self.values())


_registered: list[bool] = []  # [True] once PlainOutput is a pytree node type


def _register() -> None:
    if _registered:
        return
    from torch.utils import _pytree

    def flatten(out: PlainOutput) -> tuple[list[Any], list[str]]:
        return list(out.values()), list(out.keys())

    def unflatten(values: Any, context: Any) -> PlainOutput:
        return PlainOutput(zip(context, values))

    _pytree.register_pytree_node(
        PlainOutput,
        flatten,
        unflatten,
        serialized_type_name=PLAIN_TYPE,
        to_dumpable_context=json.dumps,
        from_dumpable_context=json.loads,
    )
    _registered.append(True)


def portable_spec(text: str, notes: list[str]) -> str:
    """``text`` (a treespec_dumps string) with every type this process can read: imported where
    installed, else rebuilt as PlainOutput (said in ``notes``). PlanFileError names the module to
    install for a type neither can read."""
    if not text:
        return text
    from torch.utils import _pytree

    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise PlanFileError(f"a structure in plan.json is not JSON: {error}", op="opcore.graph.load") from error
    known = _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
    changed: list[str] = []

    def visit(node: Any) -> None:
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind == PLAIN_TYPE:  # a plan saved again after such a load
            _register()
        elif isinstance(kind, str) and kind not in known:
            if not _import_owner(kind) or kind not in known:
                _rebuild(node, kind)
                changed.append(kind)
        for child in node.get("children_spec", ()) or ():
            visit(child)

    if isinstance(document, list) and len(document) == 2:
        visit(document[1])
    if not changed:
        return text
    for kind in sorted(set(changed)):
        notes.append(
            f"the model returns {kind}, which is not importable here: returned as opcore.graph.PlainOutput "
            f"(a dict that reads fields as attributes, as {kind.rsplit('.', 1)[-1]} does); install "
            f"{kind.split('.', maxsplit=1)[0]} for the class itself"
        )
    return json.dumps(document)


def _import_owner(kind: str) -> bool:
    """Import the module that defines ``kind`` ("transformers.modeling_outputs.X") where installed;
    False where it is not (or fails to import)."""
    module = kind.rsplit(".", 1)[0]
    try:
        importlib.import_module(module)
    except Exception:  # not installed, blocked, or broken: the structure is rebuilt without it
        return False
    return True


def _rebuild(node: dict[str, Any], kind: str) -> None:
    """Turn a record of named fields into PlainOutput in place; PlanFileError for anything else."""
    try:
        fields = json.loads(node.get("context") or "null")
    except (TypeError, json.JSONDecodeError):
        fields = None
    children = node.get("children_spec") or []
    if not (isinstance(fields, list) and all(isinstance(f, str) for f in fields) and len(fields) == len(children)):
        package = kind.split(".", maxsplit=1)[0]
        raise PlanFileError(
            f"the model's inputs or outputs use {kind}, which this process cannot import and opcore cannot "
            "rebuild as a plain container",
            op="opcore.graph.load",
            fix=f"install {package} (pip install {package}) in this environment",
        )
    _register()
    node["type"] = PLAIN_TYPE
