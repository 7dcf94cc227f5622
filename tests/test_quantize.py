"""opcore.quantize: the round-to-nearest quantizer, the packed layout and QuantizedWeight."""

from __future__ import annotations

import numpy
import pytest

import opcore
from opcore.quantize import (
    QuantizedWeight,
    default_group_size,
    dequantize,
    pack_int4,
    quantize_weight,
    unpack_int4,
)

RNG = numpy.random.default_rng(7)
WEIGHT = RNG.standard_normal((16, 128)).astype(numpy.float32)


@pytest.mark.parametrize(("bits", "group"), [(8, -1), (8, 32), (4, 32), (4, 64), (4, 128)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_round_to_nearest_error_is_at_most_half_a_step(bits, group, symmetric):
    qw = quantize_weight(WEIGHT, bits=bits, group_size=group, symmetric=symmetric)
    size = 128 if group == -1 else group
    steps = numpy.repeat(qw.scale.astype(numpy.float64), size, axis=1)
    error = numpy.abs(qw.dequantize(numpy.float64) - WEIGHT)
    assert (error <= steps / 2 + 1e-6).all()
    assert qw.qweight.dtype == numpy.uint8 and qw.qweight.shape == (16, 128 * bits // 8)
    assert qw.scale.shape == (16, 128 // size) and qw.scale.dtype == numpy.float32
    assert (qw.zero is None) == symmetric


def test_the_same_weight_gives_the_same_codes_and_torch_gives_torch():
    torch = pytest.importorskip("torch")
    first = quantize_weight(WEIGHT, bits=4, group_size=32, symmetric=False)
    again = quantize_weight(WEIGHT.copy(), bits=4, group_size=32, symmetric=False)
    from_torch = quantize_weight(torch.from_numpy(WEIGHT), bits=4, group_size=32, symmetric=False)
    assert all(isinstance(t, torch.Tensor) for t in from_torch.tensors())
    for a, b, c in zip(first.tensors(), again.tensors(), from_torch.tensors()):
        assert numpy.array_equal(a, b) and numpy.array_equal(a, c.numpy())


@pytest.mark.parametrize(("bits", "group", "symmetric"), [(4, 32, True), (4, 64, False), (8, -1, True), (8, 32, False)])
@pytest.mark.parametrize("shape", [(1000, 192), (3, 69_632)], ids=["rows across chunks", "rows above a chunk"])
def test_a_large_weight_quantizes_as_its_rows_do_one_at_a_time(bits, group, symmetric, shape):
    # quantize_weight works through a large weight a chunk of rows at a time (its float64 passes in
    # the cache): each row's codes, scales and zero points are those of the row quantized alone
    from opcore import quantize

    weight = numpy.random.default_rng(11).standard_normal(shape).astype(numpy.float32)
    weight[shape[0] // 2] = 0.0  # an all-zero row: scale 0, the zero code
    assert shape[0] * shape[1] > quantize._CHUNK
    whole = quantize_weight(weight, bits=bits, group_size=group, symmetric=symmetric)
    rows = [quantize_weight(row[None], bits=bits, group_size=group, symmetric=symmetric) for row in weight]
    for index, part in enumerate(whole.tensors()):
        if part is None:
            assert all(r.tensors()[index] is None for r in rows)
        else:
            assert numpy.array_equal(part, numpy.concatenate([r.tensors()[index] for r in rows]))


def test_symmetric_codes_stay_off_the_lowest_code_and_extremes_map_to_the_ends():
    weight = numpy.array([[-3.0, -0.5, 0.0, 1.2] * 8], numpy.float32)
    qw = quantize_weight(weight, bits=8)
    assert qw.qweight[0, :4].tolist() == [1, 107, 128, 179]  # -127..127 around 128
    asym = quantize_weight(weight, bits=4, group_size=32, symmetric=False)  # scale 4.2 / 15, zero 3 / scale
    assert unpack_int4(asym.qweight)[0, :4].tolist() == [0, 9, 11, 15] and asym.zero.tolist() == [[11]]


def test_all_zero_groups_get_scale_zero_and_dequantize_to_zero():
    weight = numpy.zeros((2, 64), numpy.float32)
    weight[1, 32:] = 1.0
    for symmetric in (True, False):
        qw = quantize_weight(weight, bits=4, group_size=32, symmetric=symmetric)
        assert qw.scale[0].tolist() == [0.0, 0.0] and qw.scale[1, 0] == 0.0
        numpy.testing.assert_allclose(qw.dequantize(), weight, atol=1e-7)


def test_packing_puts_the_even_index_in_the_low_nibble():
    codes = numpy.arange(16, dtype=numpy.uint8).reshape(1, 16)
    packed = pack_int4(codes)
    assert packed[0, 0] == 0x10 and packed[0, 7] == 0xFE
    assert numpy.array_equal(unpack_int4(packed), codes)


def test_dequantize_takes_the_middle_code_as_the_symmetric_zero():
    assert dequantize(numpy.array([[128, 255]], numpy.uint8), numpy.array([[0.5]]), None, 8, -1).tolist() == [
        [0.0, 63.5]
    ]


def test_default_group_sizes_and_bad_requests():
    assert default_group_size(8, 4096) == -1 and default_group_size(4, 4096) == 128 and default_group_size(4, 96) == 32
    with pytest.raises(opcore.ShapeError, match="divisible by 32"):
        quantize_weight(numpy.ones((4, 40), numpy.float32), bits=4)
    with pytest.raises(opcore.ShapeError, match="divisor of in_features = 64"):
        quantize_weight(numpy.ones((4, 64), numpy.float32), bits=4, group_size=48)
    with pytest.raises(opcore.ArgumentError, match="4 or 8"):
        quantize_weight(numpy.ones((4, 64), numpy.float32), bits=2)
    with pytest.raises(opcore.ShapeError, match="2-D floating"):
        quantize_weight(numpy.ones((4, 64), numpy.int32))


def test_a_quantized_weight_runs_its_op_and_counts_its_bytes():
    qw = quantize_weight(WEIGHT, bits=4, group_size=32)
    assert isinstance(qw, QuantizedWeight) and qw.in_features == 128 and qw.out_features == 16
    assert qw.nbytes == 16 * 64 + 16 * 4 * 4  # codes + float32 scales
    x = RNG.uniform(-1, 1, (3, 128)).astype(numpy.float32)
    out = qw.linear(x, backend="reference")
    numpy.testing.assert_allclose(out, x @ qw.dequantize(numpy.float64).T, rtol=1e-5, atol=1e-5)
