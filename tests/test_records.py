"""opcore.fast_records.record: the value semantics of @dataclass(frozen=True, slots=True), built from closures."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import field
from typing import Any

import pytest

from opcore.fast_records import record
from opcore.types import CPU, Device, DeviceType, DType, TensorMeta


@record
class Point:
    """A module-level record, so that pickle can find it."""

    x: int
    y: int = 0
    note: str = field(default="", compare=False, repr=False)


@dataclasses.dataclass(frozen=True, slots=True)
class DataPoint:
    x: int
    y: int = 0
    note: str = field(default="", compare=False, repr=False)


def test_construction_defaults_and_keywords_as_a_dataclass() -> None:
    for cls in (Point, DataPoint):
        assert (cls(1).x, cls(1).y, cls(1, 2).y, cls(y=3, x=4).x, cls(1, note="n").note) == (1, 0, 2, 4, "n")
    assert repr(Point(1, 2, "hidden")) == "Point(x=1, y=2)"
    assert repr(Point(1, 2, "hidden")).replace("Point", "DataPoint") == repr(DataPoint(1, 2, "hidden"))
    assert Point.__match_args__ == ("x", "y", "note") == DataPoint.__match_args__
    assert Point.__slots__ == ("x", "y", "note")  # type: ignore[attr-defined]
    assert not hasattr(Point(1), "__dict__")


def test_equality_and_hash_skip_fields_that_do_not_compare() -> None:
    assert Point(1, 2, "a") == Point(1, 2, "b")
    assert hash(Point(1, 2, "a")) == hash(Point(1, 2, "b"))
    assert Point(1, 2) != Point(1, 3)
    assert Point(1) != DataPoint(1)  # another class: NotImplemented both ways, then identity
    assert len({Point(1), Point(1), Point(2)}) == 2


def test_frozen() -> None:
    point = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'y'"):
        del point.y  # type: ignore[misc]
    assert point.x == 1


def test_dataclasses_functions_work() -> None:
    assert dataclasses.is_dataclass(Point(1))
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "note"]
    assert dataclasses.replace(Point(1, 2, "n"), y=5) == Point(1, 5)
    assert dataclasses.replace(Point(1, 2, "n"), y=5).note == "n"
    assert dataclasses.asdict(Point(1, 2, "n")) == {"x": 1, "y": 2, "note": "n"}
    assert dataclasses.astuple(Point(1, 2)) == (1, 2, "")


def test_pickle_round_trip() -> None:
    point = Point(3, 4, "kept")
    again = pickle.loads(pickle.dumps(point))
    assert again == point and again.note == "kept"
    meta = TensorMeta((2, 3), DType.FLOAT32, Device(DeviceType.CPU))
    assert pickle.loads(pickle.dumps(meta)) == meta


def test_bad_calls_are_type_errors_naming_the_argument() -> None:
    with pytest.raises(TypeError, match=r"Point.__init__\(\) missing 1 required argument\(s\): 'x'"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 4 positional arguments but 5 were given"):
        Point(1, 2, "", 4)  # type: ignore[call-arg]


def test_what_it_does_not_support_says_so() -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("default_factory", {"__annotations__": {"x": "list[int]"}, "x": field(default_factory=list)}),
        ("init=False", {"__annotations__": {"x": "int"}, "x": field(default=0, init=False)}),
        ("ClassVar", {"__annotations__": {"x": "ClassVar[int]"}, "x": 0}),
        ("__post_init__", {"__annotations__": {"x": "int"}, "__post_init__": lambda self: None}),
        ("follows default", {"__annotations__": {"x": "int", "y": "int"}, "x": 0}),
    ]
    for words, namespace in cases:
        with pytest.raises(TypeError, match=words.replace("(", r"\(")):
            record(type("Bad", (), namespace))
    with pytest.raises(TypeError, match="do not inherit"):
        record(type("Child", (Point,), {"__annotations__": {"z": "int"}}))


def test_opcore_records_keep_their_semantics() -> None:
    assert Device.parse("cuda:1") == Device(DeviceType.CUDA, 1)
    assert repr(Device(DeviceType.CUDA, 1)) == "Device(type=<DeviceType.CUDA: 'cuda'>, index=1)"
    meta = TensorMeta((2,), DType.FLOAT32)
    assert meta.device == CPU and meta.replace(shape=(3,)).shape == (3,)
    assert {meta: 1}[TensorMeta((2,), DType.FLOAT32)] == 1
