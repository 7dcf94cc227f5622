"""What every opcore.nn module shares: binding once, staying bound to the current weights, and the
policy for gradients.

State. The parameters are ordinary ``nn.Parameter``s holding the original, unpacked weights
(``state_dict`` has torch's keys and values). The prepared kernels are derived from them, so:

- ``.to(dtype)`` / ``.to(device)`` / ``.float()`` / ``to_empty`` (anything through ``_apply``) and
  ``load_state_dict`` re-resolve at once (an error, such as a backend that refuses the new dtype,
  surfaces at that call);
- anything else that changes a weight -- an in-place update (``weight.copy_``, an optimizer step), a
  parameter replaced by assignment, ``weight.data = ...`` -- is noticed at the next forward, which
  compares each parameter's identity, version counter and data pointer with those it was bound to.
- Pickling and ``copy.deepcopy`` leave the prepared kernels behind (ONNX Runtime sessions and
  packed oneDNN tensors do not copy); the copy binds again on its first forward.

Gradients. Prepared kernels compute no gradients. When one is needed -- grad mode is on and the
input or any parameter requires grad -- the module runs ``grad="autograd"`` (default): the plain
``torch.nn.functional`` path on the original parameters, so gradients are exact (at eager speed);
or ``grad="raise"``: a ``GradientError``. It never returns a prepared result where a gradient is
expected. Run under ``torch.no_grad()`` or ``torch.inference_mode()`` (or freeze the parameters)
to get the prepared path.

>>> layer = opcore.nn.Linear(8, 4)          # doctest: +SKIP
>>> with torch.no_grad():                   # doctest: +SKIP
...     y = layer(torch.randn(2, 8))        # the prepared kernel
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from opcore.errors import ArgumentError, DeviceError, DTypeError, OpcoreError, ShapeError
from opcore.nn.binding import BackendRequest, Bound, Step, bind, parse_backend
from opcore.torchkit.watch import TensorWatch

__all__ = [
    "DEFAULT_EXAMPLE_ROWS",
    "GRAD_MODES",
    "GradientError",
    "LinearLike",
    "LinearWeights",
    "PreparedModule",
    "unbound",
]

# Rows (all leading dimensions flattened) of the example inputs a module resolves with. The cpu
# backend decides by size: its checkers keep small GEMMs on ATen (M*K*N below a measured crossover)
# and oneDNN packs weights for this many rows. With 1 row, a 1024x2816 float32 layer would stay on
# unpacked ATen, although it runs oneDNN -- and gains 1.3x from packing -- at every row count above a
# handful. Other row counts always work.
DEFAULT_EXAMPLE_ROWS = 128
GRAD_MODES = ("autograd", "raise")


class GradientError(OpcoreError, RuntimeError):
    """A module built with ``grad="raise"`` was called where a gradient would be needed."""


def unbound(*args: Any) -> Any:
    """What an attribute named in ``_CALLS`` holds until the module binds (and in a pickled copy).

    The forward binds (``_fresh``) before it calls one, so this runs only if a subclass forgets to.
    """
    raise OpcoreError(
        "a resolved call was used before the module bound its kernels",
        op="opcore.nn.PreparedModule",
        fix="call self._fresh() (or self._follow_input(x)) in forward before the calls named by _CALLS",
    )


def _rebind_after_load(module: nn.Module, incompatible_keys: Any) -> None:
    if isinstance(module, PreparedModule):
        module.rebind()


class PreparedModule(nn.Module):
    """Base class: a module whose ops are resolved once, on the backend chosen at construction.

    Subclasses give ``_steps(dtype, device)`` (what to resolve: example inputs, and the weights as
    constants), ``_on_bound(bound)`` (keep the resolved calls in the attributes named by ``_CALLS``)
    and ``_autograd(*inputs)`` (the same computation in ``torch.nn.functional``), and call
    ``rebind()`` at the end of ``__init__``.
    """

    # the attributes _on_bound fills with resolved calls (dropped when pickled or copied)
    _CALLS: tuple[str, ...] = ("_call",)

    def __init__(self, backend: Any, grad: str, example_rows: int) -> None:
        super().__init__()
        what = f"opcore.nn.{type(self).__name__}"
        if grad not in GRAD_MODES:
            raise ArgumentError(op=what, arg="grad", expected="'autograd' or 'raise'", found=repr(grad))
        if not isinstance(example_rows, int) or isinstance(example_rows, bool) or example_rows < 1:
            raise ArgumentError(op=what, arg="example_rows", expected="a positive int", found=repr(example_rows))
        self.backend_request: BackendRequest = parse_backend(backend, what)
        self.grad = grad
        self.example_rows = example_rows
        self._bound: Bound | None = None
        # the bound parameters: where each lives (its module's _parameters, its name), the tensor, its
        # version counter and data pointer then: what _fresh compares (opcore.torchkit.watch)
        self._watch = TensorWatch(())
        # the dtype and device bound for; parameterless modules follow their input's
        self._dtype: torch.dtype | None = None
        self._device: torch.device = torch.device("cpu")
        self.register_load_state_dict_post_hook(_rebind_after_load)

    # --- what subclasses provide ------------------------------------------------------------------

    def _steps(self, dtype: torch.dtype, device: torch.device) -> Sequence[Step]:
        raise NotImplementedError

    def _on_bound(self, bound: Bound) -> None:
        """Keep the calls the forward needs as attributes (one lookup each per forward)."""

    # the same computation in torch.nn.functional, taking the forward's inputs (each subclass its own
    # arity, hence an attribute type rather than a method signature subclasses would have to match)
    _autograd: Callable[..., torch.Tensor]

    # --- binding ----------------------------------------------------------------------------------

    @property
    def bound(self) -> Bound:
        """The resolved ops (binding first if needed): ``.backend``, ``.resolved``, ``.describe()``."""
        return self._fresh()

    @property
    def backend(self) -> str:
        """The backend the module's ops run on (``bound.notes`` names parts that run elsewhere)."""
        return self._fresh().backend

    def rebind(self) -> None:
        """Resolve the ops again for the current parameters (done for you; see the module docstring)."""
        found = [
            (module._parameters, name, value)
            for module in self.modules()
            for name, value in module._parameters.items()
            if value is not None
        ]
        slots = [(name, holder, name) for holder, name, _ in found]
        tensors = [value for _, _, value in found]
        if any(t.is_meta for t in tensors):
            self._bound, self._watch = None, TensorWatch(())
            return
        if tensors:
            self._dtype, self._device = tensors[0].dtype, tensors[0].device
        dtype = self._dtype or torch.get_default_dtype()
        with torch.no_grad():
            what, inputs = f"opcore.nn.{type(self).__name__}", f"{_name(dtype)} on {self._device}"
            bound = bind(self._steps(dtype, self._device), self.backend_request, what, inputs)
        self._on_bound(bound)
        self._bound = bound
        self._watch = TensorWatch.of(slots)

    def _fresh(self) -> Bound:
        """The current binding, after binding again if a parameter changed (see the module docstring)."""
        bound = self._bound
        if bound is not None and not self._watch.stale():
            return bound
        self.rebind()
        if self._bound is None:
            raise DeviceError(
                op=f"opcore.nn.{type(self).__name__}",
                arg="parameters",
                expected="real tensors to prepare the kernels from",
                found="parameters on the meta device",
                fix="load the weights first (load_state_dict(..., assign=True), or to_empty() then load_state_dict)",
            )
        return self._bound

    def _follow_input(self, x: torch.Tensor) -> None:
        """Parameterless modules bind for their input's dtype and device, again when those change."""
        if x.dtype != self._dtype or x.device != self._device or self._bound is None:
            self._dtype, self._device = x.dtype, x.device
            self.rebind()

    def _apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> PreparedModule:
        super()._apply(fn, *args, **kwargs)
        if any(True for _ in self.parameters()):
            self.rebind()  # .to(dtype) and friends: at once, so that a refusal surfaces here
        return self

    # --- the forward's common part ----------------------------------------------------------------

    def _needs_grad(self, x: torch.Tensor) -> bool:
        """True when autograd would want a graph for this call (checked before anything else)."""
        return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters()))

    def _gradient_path(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.grad == "raise":
            raise GradientError(
                "called with gradients required (grad mode on, and the input or a parameter requires grad); "
                "its prepared kernels compute none, and it was built with grad='raise'",
                op=f"opcore.nn.{type(self).__name__}",
                fix="run it under torch.no_grad() or torch.inference_mode(), freeze the parameters "
                "(module.requires_grad_(False)), or build it with grad='autograd' for the torch.nn.functional path",
            )
        return self._autograd(*inputs)

    def _check_trailing(self, x: torch.Tensor, trailing: tuple[int, ...]) -> None:
        """A ShapeError where ``x`` (an input of another rank than the resolved one, flattened around
        the call) does not end with ``trailing``: a reshape would have read its values in other rows."""
        if x.ndim < len(trailing) or tuple(x.shape[x.ndim - len(trailing) :]) != trailing:
            raise ShapeError(
                op=f"opcore.nn.{type(self).__name__}",
                arg="input",
                expected=f"a tensor whose last sizes are {trailing}",
                found=f"shape {tuple(x.shape)}",
            )

    def _check_input(self, x: torch.Tensor) -> None:
        if x.dtype != self._dtype:
            dtype = self._dtype
            raise DTypeError(
                op=f"opcore.nn.{type(self).__name__}",
                arg="input",
                expected=f"{_name(dtype)} (the dtype its kernels were resolved for)",
                found=_name(x.dtype),
                fix=f"cast the input (x.to({dtype})) or the module (module.to({x.dtype}))",
            )
        if x.device != self._device:
            raise DeviceError(
                op=f"opcore.nn.{type(self).__name__}",
                arg="input",
                expected=f"a tensor on {self._device} (where its parameters are)",
                found=f"a tensor on {x.device}",
                fix=f"move the input (x.to('{self._device}')) or the module (module.to('{x.device}'))",
            )

    # --- state ------------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_bound=None, _watch=TensorWatch(()))  # sessions and packed tensors do not copy
        state.update(dict.fromkeys(self._CALLS, unbound))
        return state

    def _common_repr(self) -> str:
        dtype = self._dtype if self._dtype is not None else next((p.dtype for p in self.parameters()), None)
        if self._bound is None:
            request = "ranked default" if self.backend_request is None else list(self.backend_request)
            where = f"backend=unbound ({request})"
        else:
            where = f"backend={self._bound.describe()}"
        return f"dtype={_name(dtype)}, {where}" + (", grad=raise" if self.grad == "raise" else "")


def _name(dtype: torch.dtype | None) -> str:
    return str(dtype).removeprefix("torch.")


def source(value: Any, kinds: tuple[type, ...], op: str, arg: str, expected: str) -> None:
    """An ArgumentError where ``value`` (what a ``from_torch``, ``from_linears`` or ``convert`` builds
    on) is none of ``kinds``."""
    if not isinstance(value, kinds):
        raise ArgumentError(op=op, arg=arg, expected=expected, found=type(value).__name__)


class LinearLike(Protocol):
    """A ``torch.nn.Linear`` or a ``LinearWeights``: the projections ``from_linears`` and ``adopt`` take.

    >>> def width(layer: LinearLike) -> int: return layer.out_features   # doctest: +SKIP
    """

    @property
    def in_features(self) -> int: ...

    @property
    def out_features(self) -> int: ...

    @property
    def weight(self) -> torch.Tensor: ...

    @property
    def bias(self) -> torch.Tensor | None: ...


class LinearWeights(nn.Module):
    """The weight (and bias) of one projection inside a fused module: parameters only, no forward.

    It keeps the state_dict keys of the torch.nn.Linear it replaces (``q_proj.weight``).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        kinds = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **kinds))
        self.bias = nn.Parameter(torch.empty(out_features, **kinds)) if bias else None
        if not self.weight.is_meta:
            init_linear(self.weight, self.bias)

    def forward(self, *args: Any) -> Any:
        raise OpcoreError(
            "holds a projection's parameters for the module around it, which runs them",
            op="opcore.nn.LinearWeights",
            fix="call the parent module",
        )

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    @classmethod
    def adopt(cls, linear: LinearLike, dtype: torch.dtype | None = None) -> LinearWeights:
        """The parameters of ``linear`` (a torch.nn.Linear or LinearWeights), shared unless a dtype is given."""
        holder = cls(linear.in_features, linear.out_features, linear.bias is not None, device="meta")
        holder.weight = share(linear.weight, dtype)
        holder.bias = share(linear.bias, dtype) if linear.bias is not None else None
        return holder


def share(parameter: torch.Tensor, dtype: torch.dtype | None) -> nn.Parameter:
    """The parameter itself, or a copy cast to ``dtype`` (keeping requires_grad); a plain tensor (torch
    types ``Linear.weight`` as one) becomes a parameter on the same memory.
    """
    same = dtype is None or parameter.dtype == dtype
    if same and isinstance(parameter, nn.Parameter):
        return parameter
    data = parameter.detach() if same else parameter.detach().to(dtype)
    return nn.Parameter(data, requires_grad=parameter.requires_grad)


def init_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """torch.nn.Linear's initialisation (kaiming uniform, a=sqrt(5)), so a fresh module matches one."""
    with torch.no_grad():
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        if bias is not None:
            fan_in = weight.shape[1]
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            nn.init.uniform_(bias, -bound, bound)


def torch_dtype(dtype: Any) -> torch.dtype | None:
    """A torch dtype from a torch dtype, an opcore DType or a name; None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    from opcore.types import DType

    return DType.parse(dtype).to_torch()
