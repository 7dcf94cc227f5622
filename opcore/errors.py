"""The one error hierarchy of opcore.

Every message has one shape: what was called, with what, what was expected,
what was found, and the fix::

    linear(): argument 'w' expected a 2-D tensor, found a 3-D tensor of shape (2, 3, 4).
    Fix: pass the weight as (out_features, in_features).

Errors raised inside a meta function usually leave ``op`` empty; the
dispatcher fills it in before the error reaches the caller.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "DTypeError",
    "DeviceError",
    "FallbackWarning",
    "KernelResultError",
    "NoKernelError",
    "OpcoreError",
    "PluginError",
    "ShapeError",
    "StaleTuningWarning",
    "UnknownOpError",
    "Unsupported",
]


class OpcoreError(Exception):
    """Base class of every error opcore raises on purpose.

    >>> str(OpcoreError(op="relu", arg="x", expected="a tensor", found="a list"))
    "relu(): argument 'x' expected a tensor, found a list."
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        op: str | None = None,
        arg: str | None = None,
        expected: str | None = None,
        found: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.op = op
        self.arg = arg
        self.expected = expected
        self.found = found
        self.fix = fix

    def __str__(self) -> str:
        parts: list[str] = []
        head = f"{self.op}(): " if self.op else ""
        if self.arg is not None and (self.expected is not None or self.found is not None):
            sentence = f"argument '{self.arg}'"
            if self.expected is not None:
                sentence += f" expected {self.expected}"
            if self.found is not None:
                sentence += ("," if self.expected is not None else "") + f" found {self.found}"
            parts.append(head + sentence + ".")
            if self.message:
                parts.append(_sentence(self.message))
        elif self.message:
            parts.append(head + _sentence(self.message))
        else:
            parts.append(head.rstrip(": ") or type(self).__name__)
        if self.fix:
            parts.append("Fix: " + _sentence(self.fix))
        return " ".join(parts)

    def __reduce__(self):  # keep keyword fields through pickling (multiprocessing)
        return (_rebuild, (type(self), self.message, self.__dict__.copy()))


def _rebuild(cls: type[OpcoreError], message: str | None, state: dict) -> OpcoreError:
    error = cls.__new__(cls)
    OpcoreError.__init__(error, message)
    error.__dict__.update(state)
    return error


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) or "\n" in text else text + "."


class ArgumentError(OpcoreError, TypeError):
    """Wrong arity, a wrong argument type, or an attribute value out of range."""


class UnknownOpError(ArgumentError, LookupError):
    """No contract has that name; the message suggests close matches."""


class ShapeError(OpcoreError, ValueError):
    """Ranks or sizes that the contract does not accept."""


class DTypeError(OpcoreError, TypeError):
    """A dtype the contract does not accept, or dtypes that do not match."""


class DeviceError(OpcoreError, ValueError):
    """Inputs on different devices, or on a device no backend can reach."""


class NoKernelError(OpcoreError, NotImplementedError):
    """No kernel could run the call; the message lists every candidate and why it was passed over."""


class Unsupported(OpcoreError):
    """Raised by a kernel at run time to decline the call and hand it to the next candidate."""


class PluginError(OpcoreError):
    """A plugin failed to load, or a backend the user named is missing or failed."""


class KernelResultError(PluginError):
    """A kernel returned something its op's contract does not allow (another kind, dtype, shape or
    count of outputs): a bug in the kernel's plugin, caught before the result reaches the caller.
    """


class FallbackWarning(UserWarning):
    """A kernel crashed and the call fell back to the next candidate (once per op, backend and error type)."""


class StaleTuningWarning(UserWarning):
    """The tuning file was made for other versions or another machine (or cannot be read): it is ignored,
    and kernels rank by static priority (once per file and reason).
    """
