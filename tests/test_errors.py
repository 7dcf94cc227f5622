"""The error hierarchy and its one message shape."""

from __future__ import annotations

import pickle

import pytest

import opcore
from opcore.errors import ArgumentError, NoKernelError, OpcoreError, ShapeError, UnknownOpError


def test_message_shape() -> None:
    error = ShapeError(op="linear", arg="w", expected="a 2-D tensor", found="a 3-D tensor", fix="pass (out, in)")
    assert str(error) == "linear(): argument 'w' expected a 2-D tensor, found a 3-D tensor. Fix: pass (out, in)."
    assert str(OpcoreError("took too long", op="bench")) == "bench(): took too long."
    assert str(OpcoreError()) == "OpcoreError"


def test_python_exception_families() -> None:
    assert issubclass(ArgumentError, TypeError) and issubclass(ShapeError, ValueError)
    assert issubclass(UnknownOpError, LookupError) and issubclass(NoKernelError, NotImplementedError)
    assert all(
        issubclass(getattr(opcore, n), OpcoreError)
        for n in (
            "ArgumentError",
            "ShapeError",
            "DTypeError",
            "DeviceError",
            "NoKernelError",
            "Unsupported",
            "PluginError",
            "UnknownOpError",
        )
    )


def test_errors_survive_pickling() -> None:
    error = ShapeError(op="linear", arg="w", expected="2-D", found="3-D")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ShapeError and str(again) == str(error) and again.arg == "w"


@pytest.mark.parametrize("message", ["multi\nline", "ends with a period."])
def test_sentences_are_not_double_punctuated(message: str) -> None:
    assert ".." not in str(OpcoreError(message, fix="do this."))
