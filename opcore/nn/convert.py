"""``opcore.nn.convert``: a copy of a torch model with its supported submodules replaced.

What it recognises (exact types: a subclass may have changed ``forward``):

- inside ``torch.nn.Sequential``: ``Linear`` directly followed by ``ReLU`` / ``SiLU`` / ``GELU``
  becomes ``LinearReLU`` / ``LinearSiLU`` / ``LinearGELU`` (the activation's slot becomes
  ``nn.Identity``, so the state_dict keys stay);
- ``torch.nn.Linear`` -> ``Linear``; ``torch.nn.LayerNorm`` -> ``LayerNorm``; ``torch.nn.RMSNorm``
  -> ``RMSNorm``;
- any type given a rule: ``register_conversion(MyMLP, factory)`` (process-wide) or
  ``convert(model, rules={MyMLP: factory})`` (this call; wins over both). A factory is called as
  ``factory(module, backend=..., grad=..., example_rows=...)`` and returns the replacement, or None
  to leave the module as it is (and convert then looks inside it). Rules are how a gated MLP or an
  attention module of your own becomes ``GatedMLP`` / ``Attention`` (``from_linears``).

It does not descend into what it replaced. A module it cannot bind (a backend that refuses the
dtype) raises by default; ``on_error="keep"`` keeps the torch module and records why.

>>> fast, report = opcore.nn.convert(model, backend="cpu")   # doctest: +SKIP
>>> print(report)                                             # doctest: +SKIP
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from opcore.errors import ArgumentError, OpcoreError
from opcore.nn.linear import Linear, LinearGELU, LinearReLU, LinearSiLU
from opcore.nn.normalization import LayerNorm, RMSNorm
from opcore.nn.state import DEFAULT_EXAMPLE_ROWS, PreparedModule, source, torch_dtype

__all__ = ["ConversionReport", "Replacement", "Skipped", "convert", "register_conversion", "unregister_conversion"]

Factory = Callable[..., "nn.Module | None"]

_FUSED_ACTIVATIONS: dict[type[nn.Module], type[Linear]] = {
    nn.ReLU: LinearReLU,
    nn.SiLU: LinearSiLU,
    nn.GELU: LinearGELU,
}


def _builtin_rules() -> dict[type[nn.Module], Factory]:
    return {nn.Linear: Linear.from_torch, nn.LayerNorm: LayerNorm.from_torch, nn.RMSNorm: RMSNorm.from_torch}


_RULES: dict[type[nn.Module], Factory] = _builtin_rules()


def register_conversion(torch_type: type[nn.Module], factory: Factory) -> None:
    """Make ``convert`` replace modules of exactly ``torch_type`` with ``factory(module, **options)``.

    >>> def mlp(m, **options):
    ...     return opcore.nn.GatedMLP.from_linears(m.w1, m.w3, m.w2, names=("w1", "w3", "w2"), **options)
    >>> opcore.nn.register_conversion(MyMLP, mlp)  # doctest: +SKIP
    """
    if not (isinstance(torch_type, type) and issubclass(torch_type, nn.Module)) or not callable(factory):
        raise ArgumentError(
            op="opcore.nn.register_conversion",
            arg="torch_type",
            expected="a torch.nn.Module subclass and a callable factory",
            found=f"{torch_type!r}, {factory!r}",
        )
    _RULES[torch_type] = factory


def unregister_conversion(torch_type: type[nn.Module]) -> None:
    """Drop the rule for ``torch_type`` (a built-in one comes back)."""
    _RULES.pop(torch_type, None)
    builtin = _builtin_rules().get(torch_type)
    if builtin is not None:
        _RULES[torch_type] = builtin


@dataclass(frozen=True, slots=True)
class Replacement:
    """One replaced submodule. path: its name in the model ("layers.0.mlp"; "0+1" for a fused pair)."""

    path: str
    original: str
    replacement: str
    backend: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A recognised submodule left in torch (``on_error="keep"``), and why."""

    path: str
    original: str
    reason: str


@dataclass(frozen=True, slots=True)
class ConversionReport:
    """What ``convert`` replaced, on which backend, and what it left; ``str()`` renders a table."""

    replaced: tuple[Replacement, ...]
    skipped: tuple[Skipped, ...]

    def __str__(self) -> str:
        rows = [("path", "torch", "opcore.nn", "backend")]
        rows += [(r.path, r.original, r.replacement, r.backend) for r in self.replaced]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [f"replaced {len(self.replaced)} module(s)" + (f", kept {len(self.skipped)}" if self.skipped else "")]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3] for row in rows]
        lines += [f"  kept {s.path} ({s.original}): {s.reason}" for s in self.skipped]
        return "\n".join(line.rstrip() for line in lines)

    def backends(self) -> dict[str, int]:
        """How many replacements run on each backend."""
        counts: dict[str, int] = {}
        for r in self.replaced:
            name = r.backend.split(" ")[0]
            counts[name] = counts.get(name, 0) + 1
        return counts


def convert(
    model: nn.Module,
    *,
    backend: str | Sequence[str] | None = None,
    dtype: Any = None,
    grad: str = "autograd",
    example_rows: int = DEFAULT_EXAMPLE_ROWS,
    rules: Mapping[type[nn.Module], Factory] | None = None,
    on_error: str = "raise",
    inplace: bool = False,
) -> tuple[nn.Module, ConversionReport]:
    """A copy of ``model`` (``inplace=True``: the model itself) with supported submodules replaced by
    opcore.nn modules bound to ``backend``; ``dtype`` casts the copy first (``model.to(dtype)``).

    >>> fast, report = opcore.nn.convert(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU()))  # doctest: +SKIP
    >>> type(fast[0]).__name__, report.replaced[0].replacement                                         # doctest: +SKIP
    ('LinearSiLU', 'LinearSiLU')
    """
    source(model, (nn.Module,), "opcore.nn.convert", "model", "a torch.nn.Module")
    if on_error not in ("raise", "keep"):
        raise ArgumentError(op="opcore.nn.convert", arg="on_error", expected="'raise' or 'keep'", found=repr(on_error))
    target = model if inplace else copy.deepcopy(model)
    cast = torch_dtype(dtype)
    if cast is not None:
        target = target.to(cast)
    table = {**_RULES, **(rules or {})}
    options = {"backend": backend, "grad": grad, "example_rows": example_rows}
    replaced: list[Replacement] = []
    skipped: list[Skipped] = []

    def replace(title: str, path: str, make: Callable[[], nn.Module | None]) -> nn.Module | None:
        try:
            new = make()
        except OpcoreError as error:
            if on_error == "raise":
                raise
            skipped.append(Skipped(path or "(model)", title, str(error).splitlines()[0]))
            return None
        if new is not None:
            where = new.bound.describe() if isinstance(new, PreparedModule) else "-"
            replaced.append(Replacement(path or "(model)", title, type(new).__name__, where))
        return new

    def walk(module: nn.Module, prefix: str) -> None:
        if isinstance(module, nn.Sequential):
            _fuse_pairs(module, prefix, options, replace)
        for name, child in list(module._modules.items()):
            if child is None or isinstance(child, PreparedModule):
                continue
            path = f"{prefix}{name}"
            factory = table.get(type(child))
            make = lambda c=child, f=factory: f(c, **options)  # noqa: E731
            new = replace(_title(child), path, make) if factory is not None else None
            if new is not None:
                setattr(module, name, new)
            else:
                walk(child, path + ".")

    root_factory = table.get(type(target))
    if root_factory is not None and not isinstance(target, PreparedModule):
        new = replace(_title(target), "", lambda: root_factory(target, **options))
        if new is not None:
            return new, ConversionReport(tuple(replaced), tuple(skipped))
    walk(target, "")
    return target, ConversionReport(tuple(replaced), tuple(skipped))


def _fuse_pairs(
    sequential: nn.Sequential,
    prefix: str,
    options: dict[str, Any],
    replace: Callable[[str, str, Callable[[], nn.Module | None]], nn.Module | None],
) -> None:
    """Linear then an activation, inside a Sequential: the fused module in the Linear's slot."""
    names = list(sequential._modules)
    for first, second in itertools.pairwise(names):
        linear, activation = sequential._modules[first], sequential._modules[second]
        fused = _FUSED_ACTIVATIONS.get(type(activation))
        if not isinstance(linear, nn.Linear) or type(linear) is not nn.Linear or fused is None:
            continue  # exactly torch.nn.Linear (a subclass may compute otherwise); isinstance narrows the type
        attrs = {"approximate": activation.approximate} if fused is LinearGELU else {}
        path = f"{prefix}{first}+{second}"

        def make(linear: nn.Linear = linear, fused: type[Linear] = fused, attrs: dict[str, Any] = attrs) -> nn.Module:
            return fused.from_torch(linear, **options, **attrs)

        new = replace(f"{_title(linear)}+{_title(activation)}", path, make)
        if new is not None:
            sequential._modules[first] = new
            sequential._modules[second] = nn.Identity()


def _title(module: nn.Module) -> str:
    kind = type(module)
    return kind.__name__ if kind.__module__.startswith("torch.nn") else f"{kind.__module__}.{kind.__qualname__}"
