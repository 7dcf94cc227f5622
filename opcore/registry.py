"""Contracts and kernels: validated at registration, each with its source, ranked into a table.

Plugins never see the Registry; their hooks get a Registrar, which stages what the
plugin adds and validates each item as it comes, so a bad registration fails with a
message naming the plugin and the op, and nothing of that plugin is committed.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from enum import Enum
from types import FunctionType
from typing import Any, TypeVar

from opcore.backend import BackendSpec
from opcore.contracts import OpContract, source_of
from opcore.errors import ArgumentError, PluginError, UnknownOpError
from opcore.kernel_records import Checker, Kernel, Prepare, as_dtypes, load_callable
from opcore.types import ArrayKind, DeviceType, DType

__all__ = ["ContractFactory", "KernelFactory", "Registrar", "Registry", "load_kernel_callable", "reference_problems"]

F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=Enum)

# Called with an op name under a namespace ("aten.add.Tensor"); returns its contract, or
# None when the name does not exist there. Lets a plugin serve a whole family of ops lazily.
ContractFactory = Callable[[str], "OpContract | None"]
# Called with a contract under a namespace; returns the backend's kernels for it (maybe none).
KernelFactory = Callable[[OpContract], Iterable[Kernel]]


# plain slotted classes, not dataclasses: both are created while the first opcore.run loads the
# plugins, where generating a dataclass's methods costs ~0.5-1 ms each (issue 15); only read here
class _Namespace:
    __slots__ = ("factory", "plugin", "prefix")

    def __init__(self, prefix: str, factory: ContractFactory, plugin: str) -> None:
        self.prefix, self.factory, self.plugin = prefix, factory, plugin

    def __repr__(self) -> str:
        return f"_Namespace(prefix={self.prefix!r}, plugin={self.plugin!r})"


class _KernelFactoryEntry:
    __slots__ = ("backend", "factory", "prefix")

    def __init__(self, prefix: str, factory: KernelFactory, backend: BackendSpec) -> None:
        self.prefix, self.factory, self.backend = prefix, factory, backend

    def __repr__(self) -> str:
        return f"_KernelFactoryEntry(prefix={self.prefix!r}, backend={self.backend.name!r})"


class Registry:
    """All contracts and kernels, and the ranked table built from them (thread-safe)."""

    def __init__(self, builtin: Iterable[OpContract] = ()) -> None:
        self._lock = threading.RLock()
        self.contracts: dict[str, OpContract] = {}
        self.contract_owner: dict[str, str] = {}
        self.kernels: dict[str, list[Kernel]] = {}
        self.backends: dict[str, BackendSpec] = {}
        self.namespaces: list[_Namespace] = []
        self.kernel_factories: list[_KernelFactoryEntry] = []
        self._table: dict[str, dict[tuple[DeviceType, DType], tuple[Kernel, ...]]] = {}
        self._expanded: set[str] = set()
        for contract in builtin:
            self.contracts[contract.name] = contract
            self.contract_owner[contract.name] = "opcore"

    # -- lookup ------------------------------------------------------------------------------

    def contract(self, name: str) -> OpContract:
        """The contract of ``name``; a namespaced name is created on first use by its factory.

        Unknown names raise UnknownOpError with the closest known names.
        """
        found = self.contracts.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self.contracts.get(name)
            if found is not None:
                return found
            for namespace in self.namespaces:
                if name.startswith(namespace.prefix):
                    try:
                        made = namespace.factory(name)
                    except Exception as error:  # a plugin's factory must not take the host down
                        raise UnknownOpError(
                            f"the '{namespace.plugin}' plugin could not describe {name!r}: "
                            f"{type(error).__name__}: {error}",
                            op=name,
                        ) from error
                    if made is not None:
                        self._add_dynamic(made, namespace.plugin)
                        return made
        raise UnknownOpError(
            f"unknown op {name!r}",
            op=None,
            fix=self._suggestion(name),
        )

    def _suggestion(self, name: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, list(self.contracts), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        namespaces = ", ".join(f"'{n.prefix}*'" for n in self.namespaces)
        more = f" and {namespaces}" if namespaces else ""
        return hint + f"opcore.ops() lists the {len(self.contracts)} known ops{more}"

    def _add_dynamic(self, contract: OpContract, plugin: str) -> None:
        self.contracts[contract.name] = contract
        self.contract_owner[contract.name] = plugin
        for entry in self.kernel_factories:
            if contract.name.startswith(entry.prefix):
                made = list(entry.factory(contract))
                registrar = Registrar(entry.backend, self)
                for kernel in made:
                    registrar.add(kernel)
                for kernel in registrar.staged_kernels:
                    self.kernels.setdefault(kernel.op, []).append(kernel)
        self._table.pop(contract.name, None)

    def ranked(self, op: str) -> Mapping[tuple[DeviceType, DType], tuple[Kernel, ...]]:
        """Kernels of ``op`` per (device type, dtype), highest effective priority first."""
        table = self._table.get(op)
        if table is None:
            with self._lock:
                table = self._rank(op)
                self._table[op] = table
        return table

    def _rank(self, op: str) -> dict[tuple[DeviceType, DType], tuple[Kernel, ...]]:
        buckets: dict[tuple[DeviceType, DType], list[tuple[int, int, Kernel]]] = {}
        for order, kernel in enumerate(self.kernels.get(op, ())):
            spec = self.backends[kernel.backend]
            for dtype in kernel.dtypes:
                buckets.setdefault((kernel.device_type, dtype), []).append(
                    (-(spec.priority + kernel.priority), order, kernel)
                )
        return {key: tuple(k for *_, k in sorted(items, key=lambda t: t[:2])) for key, items in buckets.items()}

    def kernels_of(self, op: str) -> tuple[Kernel, ...]:
        return tuple(self.kernels.get(op, ()))

    # -- committing a plugin's staged registrations ---------------------------------------------

    def commit(self, registrar: Registrar) -> None:
        with self._lock:
            self.backends[registrar.backend.name] = registrar.backend
            for contract in registrar.staged_contracts:
                self.contracts[contract.name] = contract
                self.contract_owner[contract.name] = registrar.backend.name
            # the CPU and CUDA torch backends both serve "aten." with one shared factory: both entries
            # are kept (the first match answers), so unregistering either leaves the other serving
            self.namespaces.extend(registrar.staged_namespaces)
            for entry in registrar.staged_factories:
                self.kernel_factories.append(entry)
            for kernel in registrar.staged_kernels:
                self.kernels.setdefault(kernel.op, []).append(kernel)
            self._table.clear()

    def commit_backend(self, spec: BackendSpec) -> None:
        with self._lock:
            self.backends[spec.name] = spec

    def remove_backend(self, name: str) -> None:
        with self._lock:
            self.backends.pop(name, None)
            for op in list(self.kernels):
                self.kernels[op] = [k for k in self.kernels[op] if k.backend != name]
            for op, owner in list(self.contract_owner.items()):
                if owner == name:
                    del self.contracts[op]
                    del self.contract_owner[op]
            self.namespaces = [n for n in self.namespaces if n.plugin != name]
            self.kernel_factories = [f for f in self.kernel_factories if f.backend.name != name]
            self._table.clear()


class Registrar:
    """What a plugin's ``opcore_register_*`` hooks receive.

    >>> registrar.add_kernel("relu", relu, dtypes=["float32", "float64"])   # doctest: +SKIP
    >>> @registrar.kernel("gelu", dtypes=["float32"], checker=small_only)    # doctest: +SKIP
    ... def gelu(x, approximate): ...
    """

    def __init__(self, backend: BackendSpec, registry: Registry) -> None:
        self.backend = backend
        self._registry = registry
        self.staged_contracts: list[OpContract] = []
        self.staged_kernels: list[Kernel] = []
        self._staged_by_op: dict[str, list[Kernel]] = {}  # the duplicate check's index (hundreds of kernels)
        self.staged_namespaces: list[_Namespace] = []
        self.staged_factories: list[_KernelFactoryEntry] = []

    @property
    def contracts(self) -> Mapping[str, OpContract]:
        """Every contract known so far (built-in, other plugins', and this plugin's staged ones)."""
        merged = dict(self._registry.contracts)
        merged.update((c.name, c) for c in self.staged_contracts)
        return merged

    def add_contract(self, contract: OpContract) -> OpContract:
        """Contribute a new op (built with ``opcore.define_op``)."""
        if not isinstance(contract, OpContract):
            raise self._error(f"add_contract() expected an OpContract, found {type(contract).__name__}")
        known = self.contracts.get(contract.name)
        if known is not None:
            owner = self._registry.contract_owner.get(contract.name, self.backend.name)
            raise self._error(
                f"op {contract.name!r} is already registered at {known.source} (by {owner!r})",
                fix="choose a namespaced name for a vendor op, e.g. 'myvendor.op'",
            )
        self.staged_contracts.append(replace(contract, source=contract.source or self.backend.name))
        return contract

    def add_op_namespace(self, prefix: str, factory: ContractFactory) -> None:
        """Serve every op whose name starts with ``prefix`` (e.g. ``"aten."``) through ``factory``."""
        if not prefix.endswith("."):
            raise self._error(f"add_op_namespace() expected a prefix ending in '.', found {prefix!r}")
        self.staged_namespaces.append(_Namespace(prefix, factory, self.backend.name))

    def add_kernel_factory(self, prefix: str, factory: KernelFactory) -> None:
        """Give this backend's kernels for namespaced ops, made when an op is first used."""
        self.staged_factories.append(_KernelFactoryEntry(prefix, factory, self.backend))

    def add_kernel(
        self,
        op: str,
        fn: Callable[..., Any] | str,
        *,
        dtypes: Iterable[DType | str] | DType | str,
        device_type: DeviceType | str | None = None,
        array_kind: ArrayKind | str = ArrayKind.NUMPY,
        priority: int = 0,
        checker: Checker | None = None,
        prepare: Prepare | str | None = None,
        label: str = "",
        declined: Mapping[DType, str] | Mapping[str, str] | None = None,
        live_constants: bool = False,
    ) -> Kernel:
        """Register ``fn`` as this backend's kernel for ``op``; see Kernel for the fields.

        device_type None: the backend's first device type. declined: dtypes it never serves, with
        why (not in ``dtypes``; explain shows the reason).
        """
        try:
            kernel = Kernel(
                op=op,
                fn=fn,
                dtypes=as_dtypes(dtypes),
                device_type=_member(DeviceType, device_type)
                if device_type is not None
                else self.backend.device_types[0],
                array_kind=_member(ArrayKind, array_kind),
                priority=priority,
                checker=checker,
                prepare=prepare,
                label=label,
                declined=tuple(sorted((DType.parse(d), why) for d, why in declined.items())) if declined else (),
                live_constants=live_constants,
                # filled in here rather than by add()'s replace(): ~15 us a kernel, 350 at the first call
                backend=self.backend.name,
                source=fn if isinstance(fn, str) else source_of(fn),
            )
        except (ValueError, ArgumentError) as error:
            raise self._error(f"kernel for {op!r}: {error}") from None
        return self.add(kernel)

    def kernel(self, op: str, **options: Any) -> Callable[[F], F]:
        """Decorator form of add_kernel."""

        def register(fn: F) -> F:
            self.add_kernel(op, fn, **options)
            return fn

        return register

    def add(self, kernel: Kernel) -> Kernel:
        """Validate a Kernel record and stage it; returns it with backend and source filled in."""
        kernel = self._typed(kernel)
        if kernel.backend != self.backend.name or not kernel.source:
            source = kernel.fn if isinstance(kernel.fn, str) else source_of(kernel.fn)
            kernel = replace(kernel, backend=self.backend.name, source=kernel.source or source)
        contract = self._contract_for(kernel.op)
        if not kernel.dtypes:
            raise self._error(f"kernel for {kernel.op!r} at {kernel.source} declares no dtypes")
        if kernel.device_type not in self.backend.device_types:
            raise self._error(
                f"kernel for {kernel.op!r} at {kernel.source} is for device type "
                f"{kernel.device_type.value!r}, which the backend does not declare "
                f"({', '.join(d.value for d in self.backend.device_types)})"
            )
        arity = len(contract.schema.arguments)
        for role, function in (("fn", kernel.fn), ("checker", kernel.checker), ("prepare", kernel.prepare)):
            if function is None:
                continue
            if isinstance(function, str) and role != "checker":
                if not _REF.match(function):
                    raise self._error(
                        f"kernel for {kernel.op!r}: {role} {function!r} is not a 'module:qualname' reference"
                    )
                continue  # imported when the kernel first runs; checked then
            if not callable(function):
                raise self._error(f"kernel for {kernel.op!r}: {role} is not callable ({type(function).__name__})")
            wanted = 2 if role == "prepare" else arity
            problem = _arity_problem(function, wanted)
            if problem:
                raise self._error(
                    f"kernel for {kernel.op!r}: {role} {source_of(function)} cannot take "
                    f"{wanted} positional arguments ({problem}); the schema is {contract.schema}"
                    if role != "prepare"
                    else f"kernel for {kernel.op!r}: prepare {source_of(function)} must take "
                    f"(args, constants) ({problem})",
                )
        for other in self._existing(kernel.op):
            if (
                other.backend == kernel.backend
                and other.device_type is kernel.device_type
                and other.label == kernel.label
                and other.dtypes & kernel.dtypes
            ):
                overlap = ", ".join(sorted(d.value for d in other.dtypes & kernel.dtypes))
                raise self._error(
                    f"a kernel for {kernel.op!r} ({overlap} on {kernel.device_type.value}) is already "
                    f"registered at {other.source}; {kernel.source} would shadow it",
                    fix="give one of them a distinct label=, or drop the duplicate",
                )
        self.staged_kernels.append(kernel)
        self._staged_by_op.setdefault(kernel.op, []).append(kernel)
        return kernel

    def _typed(self, kernel: Kernel) -> Kernel:
        """Every field of the record checked for its type (a priority of None would make every call of
        the op raise TypeError later), enums given as names converted.
        """
        if not isinstance(kernel, Kernel):
            raise self._error(f"add() expected a Kernel, found {type(kernel).__name__}")
        problems = []
        if not isinstance(kernel.op, str):
            problems.append(f"op must be a str (found {type(kernel.op).__name__})")
        if type(kernel.priority) is not int:
            problems.append(f"priority must be an int (found {type(kernel.priority).__name__} {kernel.priority!r})")
        if not isinstance(kernel.label, str):
            problems.append(f"label must be a str (found {type(kernel.label).__name__})")
        if kernel.checker is not None and not callable(kernel.checker):
            problems.append(f"checker is not callable ({type(kernel.checker).__name__}): give a callable or None")
        for role in ("fn", "prepare"):
            value = getattr(kernel, role)
            if (role == "fn" or value is not None) and not (callable(value) or isinstance(value, str)):
                problems.append(
                    f"{role} is not callable ({type(value).__name__}): give a callable or 'module:qualname'"
                )
        declined = kernel.declined
        if not (
            isinstance(declined, tuple)
            and all(
                isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], DType) and isinstance(pair[1], str)
                for pair in declined
            )
        ):
            problems.append(f"declined must be a tuple of (DType, reason) pairs (found {declined!r})")
        elif isinstance(kernel.dtypes, frozenset) and kernel.dtypes & {d for d, _ in declined}:
            both = ", ".join(sorted(d.value for d, _ in declined if d in kernel.dtypes))
            problems.append(f"declined names dtypes it also serves ({both})")
        if type(kernel.live_constants) is not bool:
            problems.append(f"live_constants must be True or False (found {kernel.live_constants!r})")
        changes: dict[str, Any] = {}
        try:
            if not isinstance(kernel.dtypes, frozenset) or not all(isinstance(d, DType) for d in kernel.dtypes):
                changes["dtypes"] = as_dtypes(kernel.dtypes)
            if type(kernel.device_type) is not DeviceType:
                changes["device_type"] = DeviceType(kernel.device_type)
            if type(kernel.array_kind) is not ArrayKind:
                changes["array_kind"] = ArrayKind(kernel.array_kind)
        except (ValueError, TypeError, ArgumentError) as error:
            problems.append(str(error))
        if problems:
            op = kernel.op if isinstance(kernel.op, str) else "?"
            raise self._error(f"kernel for {op!r}: " + "; ".join(problems))
        return replace(kernel, **changes) if changes else kernel

    def _existing(self, op: str) -> Iterator[Kernel]:
        yield from self._registry.kernels.get(op, ())
        yield from self._staged_by_op.get(op, ())

    def _contract_for(self, op: str) -> OpContract:
        staged = {c.name: c for c in self.staged_contracts}
        if op in staged:
            return staged[op]
        try:
            return self._registry.contract(op)
        except UnknownOpError as error:
            raise self._error(f"kernel for unknown op {op!r}", fix=error.fix) from None

    def _error(self, message: str, fix: str | None = None) -> PluginError:
        return PluginError(f"plugin {self.backend.name!r}: {message}", fix=fix)


_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_VERIFIED: set[tuple[str, str, int]] = set()  # (reference, role, arity) imported and checked once


def load_kernel_callable(kernel: Kernel, contract: OpContract, role: str = "fn") -> Callable[..., Any]:
    """The kernel's ``fn`` (or ``prepare``), imported if it is a "module:qualname" reference; a
    reference that cannot be imported, or whose callable cannot take the schema's arguments, is a
    PluginError naming the backend and the kernel (the first time it is needed, and under
    ``opcore doctor --deep`` for every kernel).
    """
    value = getattr(kernel, role)
    if not isinstance(value, str):
        return value
    arity = 2 if role == "prepare" else len(contract.schema.arguments)
    key = (value, role, arity)
    try:
        found = load_callable(value)
    except Exception as error:
        raise PluginError(
            f"kernel {kernel.title} for {contract.name}(): {role} {value!r} cannot be imported: "
            f"{type(error).__name__}: {error}",
            op=contract.name,
            fix=f"this is a bug in the {kernel.backend!r} plugin (or its installation): reinstall or report it; "
            f"meanwhile OPCORE_DISABLE={kernel.backend}",
        ) from error
    if key not in _VERIFIED:
        problem = "not callable" if not callable(found) else _arity_problem(found, arity)
        if problem:
            wanted = "(args, constants)" if role == "prepare" else f"{arity} positional arguments ({contract.schema})"
            raise PluginError(
                f"kernel {kernel.title} for {contract.name}(): {role} {value!r} cannot take {wanted}: {problem}",
                op=contract.name,
                fix=f"this is a bug in the {kernel.backend!r} plugin: report it; "
                f"meanwhile OPCORE_DISABLE={kernel.backend}",
            )
        _VERIFIED.add(key)
    return found


def reference_problems(registry: Registry) -> list[tuple[str, str]]:
    """(backend, problem) for every "module:qualname" kernel of the registry that cannot be imported or
    called with its schema's arguments (``opcore doctor --deep``). Imports every backend's runtime.
    """
    problems = []
    for op, kernels in sorted(registry.kernels.items()):
        contract = registry.contracts.get(op)
        if contract is None:
            continue
        for kernel in kernels:
            for role in ("fn", "prepare"):
                if isinstance(getattr(kernel, role), str):
                    try:
                        load_kernel_callable(kernel, contract, role)
                    except PluginError as error:
                        problems.append((kernel.backend, error.message or str(error)))
    return problems


_CO_VARARGS = 0x04  # inspect.CO_VARARGS, without importing inspect (~10 ms)


def _takes_positionals(function: Callable[..., Any], count: int) -> bool:
    """True when a plain Python function can surely be called with ``count`` positional arguments,
    read from its code object (~0.5 us where inspect.signature costs ~50: a plugin registers hundreds
    of kernels at the first call). False means "ask inspect": anything else (a wrapper with
    ``__wrapped__`` or ``__signature__``, a partial, a method, a builtin), or a function that cannot.
    """
    if hasattr(function, "__wrapped__") or hasattr(function, "__signature__"):
        return False
    if type(function) is not FunctionType:
        # an instance of a class whose __call__ is a plain function (a checker object such as the
        # graph backends' DtypeChecker, ~160 at the first call): that function, self bound
        call = next((c.__dict__["__call__"] for c in type(function).__mro__ if "__call__" in c.__dict__), None)
        if type(call) is not FunctionType or isinstance(function, type):
            return False
        function, count = call, count + 1
        if hasattr(function, "__wrapped__") or hasattr(function, "__signature__"):
            return False
    code = function.__code__
    positional = code.co_argcount  # positional-only ones included
    required = positional - len(function.__defaults__ or ())
    kwonly_defaults = function.__kwdefaults__ or {}
    kwonly = code.co_varnames[positional : positional + code.co_kwonlyargcount]
    if any(name not in kwonly_defaults for name in kwonly):
        return False
    return required <= count and (count <= positional or bool(code.co_flags & _CO_VARARGS))


def _member(kind: type[E], value: Any) -> E:
    """``value`` as a member of the enum ``kind``: a member as it is, without Enum.__call__ (~1 us,
    ~350 kernels at the first call); a name through it (ValueError when it names none)."""
    return value if type(value) is kind else kind(value)


def _arity_problem(function: Callable[..., Any], count: int) -> str:
    if _takes_positionals(function, count):
        return ""
    import inspect  # ~10 ms to import: only when a registration needs it

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # builtins and C functions: nothing to check
        return ""
    try:
        signature.bind(*range(count))
    except TypeError as error:
        return str(error)
    return ""
