"""Schema strings: parsing, and binding with checks and normalisation."""

from __future__ import annotations

import numpy
import pytest

from opcore.errors import ArgumentError
from opcore.schema import NO_DEFAULT, BaseType, parse_schema
from opcore.types import DType, TensorMeta

A = numpy.zeros((2, 3), numpy.float32)
CONV = (
    "conv2d(Tensor x, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
    "int[2] dilation=1, int groups=1) -> Tensor"
)


def test_parse_types_defaults_and_keyword_only() -> None:
    schema = parse_schema(
        "f(Tensor x, Tensor? y, Tensor[] xs, Tensor?[] maybe, Tensor|Scalar other, int[] dims, float? eps=None, "
        '*, bool flag=False, str mode="none", Scalar alpha=1) -> (Tensor, Tensor)'
    )
    assert schema.names == ("x", "y", "xs", "maybe", "other", "dims", "eps", "flag", "mode", "alpha")
    by_name = {a.name: a for a in schema.arguments}
    assert by_name["y"].type.optional and by_name["y"].required
    assert by_name["xs"].type.is_list and not by_name["xs"].type.element_optional
    assert by_name["maybe"].type.element_optional
    assert by_name["other"].type.base is BaseType.TENSOR_OR_SCALAR
    assert by_name["mode"].kwarg_only and by_name["mode"].default == "none"
    assert by_name["eps"].default is None and by_name["x"].default is NO_DEFAULT
    assert schema.returns == ("Tensor", "Tensor")
    assert schema.n_positional == 7
    assert schema.tensor_positions == (0, 1, 2, 3, 4)


def test_schema_round_trips_to_text() -> None:
    text = 'gelu(Tensor x, *, str approximate="none") -> Tensor'
    assert str(parse_schema(text)) == text
    assert "int[2] stride=[1, 1]" in str(parse_schema(CONV))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("linear(Tensor x", "expected 'name(Type arg, ...) -> Tensor'"),
        ("f(Tensr x) -> Tensor", "unknown type 'Tensr'"),
        ("f(Tensor x, Tensor x) -> Tensor", "repeats the argument 'x'"),
        ("f(Tensor x=None, Tensor y) -> Tensor", "required argument 'y' follows an argument with a default"),
        ("f(Tensor x, int n=foo) -> Tensor", "the default of 'n' (foo) is not a literal"),
        ("f(Tensor x, int n=1.5) -> Tensor", "expected an int"),
        ("f(Tensor) -> Tensor", "cannot read the argument"),
    ],
)
def test_malformed_schemas_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_schema(text)


def test_bind_fills_defaults_and_normalises() -> None:
    schema = parse_schema(CONV)
    bound = schema.bind((A, A), {"stride": 2, "padding": [1, 0], "groups": numpy.int64(1)})
    assert bound[2:] == (None, (2, 2), (1, 0), (1, 1), 1)
    assert type(bound[-1]) is int


def test_bind_scalars_and_lists() -> None:
    schema = parse_schema("f(Tensor|Scalar other, float f, Tensor[] xs, int[] dims) -> Tensor")
    bound = schema.bind((numpy.float32(2.5), 3, [A, A], (1, 2)), {})
    assert bound[0] == 2.5 and type(bound[0]) is float
    assert bound[1] == 3.0 and type(bound[1]) is float
    assert isinstance(bound[2], tuple) and len(bound[2]) == 2
    assert bound[3] == (1, 2)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((A,), {}, "missing required argument 'weight'"),
        ((A, A, None, 1, 1, 1, 1, 9), {}, "takes 7 positional arguments but 8 were given"),
        ((A, A), {"strides": 1}, "unexpected keyword argument 'strides'"),
        ((A, A), {"x": A}, "multiple values for argument 'x'"),
        ((A, [[1.0]]), {}, "argument 'weight' expected a tensor .* found list"),
        ((A, A, None, (1, 2, 3)), {}, "argument 'stride' expected 2 values, found 3"),
        ((A, A, None, 1.5), {}, "argument 'stride' expected a list of 2 int, found float"),
        ((A, A), {"groups": True}, "argument 'groups' expected an int, found bool"),
        ((A, A), {"groups": "2"}, "argument 'groups' expected an int, found str"),
    ],
)
def test_bind_errors_name_the_argument(args, kwargs, message) -> None:
    with pytest.raises(ArgumentError, match=message) as info:
        parse_schema(CONV).bind(args, kwargs)
    assert info.value.op == "conv2d"


def test_bind_with_metas_for_shape_inference() -> None:
    schema = parse_schema("linear(Tensor x, Tensor w, Tensor? b=None) -> Tensor")
    meta = TensorMeta((2, 3), DType.FLOAT32)
    assert schema.bind((meta, meta), {}, metas=True) == (meta, meta, None)
    with pytest.raises(ArgumentError, match="expected a TensorMeta"):
        schema.bind((A, meta), {}, metas=True)


def test_a_union_takes_either_type_in_order() -> None:
    schema = parse_schema("conv(Tensor x, int[2]|str padding=0, int[]|str? mode=None) -> Tensor")
    padding, mode = schema.arguments[1:]
    assert str(padding.type) == "int[2]|str" and padding.default == (0, 0)
    assert padding.type.alternatives[0].base is BaseType.STR and not padding.type.optional
    assert str(mode.type) == "int[]|str?" and mode.type.optional and mode.default is None
    assert str(schema) == "conv(Tensor x, int[2]|str padding=[0, 0], int[]|str? mode=None) -> Tensor"
    assert parse_schema(str(schema)) == schema
    assert schema.bind((A,), {"padding": 1})[1] == (1, 1)
    assert schema.bind((A,), {"padding": [1, 2]})[1] == (1, 2)
    assert schema.bind((A,), {"padding": "same", "mode": "x"})[1:] == ("same", "x")
    assert schema.bind((A,), {"mode": None})[2] is None
    assert schema.bind((TensorMeta((2,), DType.FLOAT32),), {"padding": "valid"}, metas=True)[1] == "valid"


@pytest.mark.parametrize(
    ("value", "found"), [(1.5, "found float"), ([1, 2, 3], "found list"), (None, "found NoneType")]
)
def test_a_value_no_type_of_the_union_takes_names_them_all(value, found) -> None:
    schema = parse_schema("conv(Tensor x, int[2]|str padding=0) -> Tensor")
    with pytest.raises(ArgumentError) as caught:
        schema.bind((A,), {"padding": value})
    message = str(caught.value)
    assert message.startswith("conv(): argument 'padding' expected a value of type int[2] or str"), message
    assert found in message


def test_a_union_part_cannot_be_optional_alone() -> None:
    with pytest.raises(ArgumentError, match="only the whole union may be optional"):
        parse_schema("f(Tensor x, int?|str a=None) -> Tensor")
