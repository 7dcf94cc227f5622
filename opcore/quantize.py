"""Weight-only quantization: ``QuantizedWeight`` (the codes, scales and zero points ``linear_wq``
takes, docs/quantized.md) and ``quantize_weight``, a deterministic round-to-nearest quantizer of a
float weight, per output channel or per group of inputs.

numpy inside (float64): the same weight gives the same codes on every machine; a torch weight
gives torch tensors back (on the CPU), a numpy one numpy arrays.

>>> import numpy
>>> qw = quantize_weight(numpy.linspace(-1, 1, 64, dtype="float32").reshape(2, 32), bits=4, group_size=16)
>>> qw.qweight.shape, qw.scale.shape, qw.zero is None
((2, 16), (2, 2), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy

from opcore.errors import ArgumentError, ShapeError
from opcore.opset.quantized import BITS, group_of

__all__ = [
    "OP",
    "QuantizedWeight",
    "default_group_size",
    "dequantize",
    "no_options_without_weights",
    "pack_int4",
    "quantize_weight",
    "unpack_int4",
]

OP = "linear_wq"  # the op that runs a QuantizedWeight
_F64 = numpy.dtype(numpy.float64)
_CHUNK = 1 << 16  # elements of a weight quantized at once (quantize_weight)


def pack_int4(codes: numpy.ndarray) -> numpy.ndarray:
    """4-bit codes (..., K) in [0, 15], K even, as bytes (..., K // 2): the even index in the low nibble.

    >>> pack_int4(numpy.array([[1, 2, 15, 0]], "uint8")).tolist()
    [[33, 15]]
    """
    codes = numpy.asarray(codes, dtype=numpy.uint8)
    return numpy.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4))


def unpack_int4(packed: numpy.ndarray) -> numpy.ndarray:
    """The codes of ``pack_int4``'s bytes (..., K // 2) as (..., K) uint8.

    >>> unpack_int4(numpy.array([[33, 15]], "uint8")).tolist()
    [[1, 2, 15, 0]]
    """
    packed = numpy.asarray(packed, dtype=numpy.uint8)
    codes = numpy.empty((*packed.shape[:-1], packed.shape[-1] * 2), numpy.uint8)
    codes[..., 0::2] = packed & 15
    codes[..., 1::2] = packed >> 4
    return codes


def codes_of(qweight: numpy.ndarray, bits: int) -> numpy.ndarray:
    """The (N, K) codes of a packed ``qweight``."""
    return unpack_int4(qweight) if bits == 4 else numpy.asarray(qweight, dtype=numpy.uint8)


def dequantize(
    qweight: Any, scale: Any, zero: Any, bits: int, group_size: int, dtype: numpy.dtype | str = _F64
) -> numpy.ndarray:
    """The float weight (N, K) of the codes: ``(code - zero) * scale`` per group (numpy arrays in).

    >>> qw = quantize_weight(numpy.eye(2, 32, dtype="float32"))
    >>> dequantize(qw.qweight, qw.scale, qw.zero, 8, -1)[0, :2].round(6).tolist()
    [1.0, 0.0]
    """
    codes = codes_of(numpy.asarray(qweight), bits).astype(_F64)
    n, k = codes.shape
    group = group_of(group_size, k)
    groups = k // group if group else 0
    zeros = float(1 << (bits - 1)) if zero is None else numpy.asarray(zero).astype(_F64).reshape(n, groups, 1)
    scales = numpy.asarray(scale).astype(_F64).reshape(n, groups, 1)
    weight = (codes.reshape(n, groups, group) - zeros) * scales if groups else codes
    return weight.reshape(n, k).astype(dtype, copy=False)


@dataclass(frozen=True, slots=True, eq=False)
class QuantizedWeight:
    """A weight (out_features, in_features) as ``linear_wq`` takes it: arrays of one kind (numpy or torch).

    ``zero`` None: symmetric codes around 2**(bits-1). ``group_size`` -1: one group per output channel.
    """

    qweight: Any  # uint8 (N, K) for 8 bits, (N, K // 2) for 4 bits (low nibble: even input index)
    scale: Any  # floating (N, K // group)
    zero: Any  # uint8 (N, K // group), or None
    bits: int
    group_size: int

    @property
    def out_features(self) -> int:
        return int(self.qweight.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.qweight.shape[1]) * 8 // self.bits

    @property
    def nbytes(self) -> int:
        """Bytes held by the codes, scales and zero points (what a plan stores and decode streams)."""
        return sum(int(_nbytes(a)) for a in (self.qweight, self.scale, self.zero) if a is not None)

    @property
    def attrs(self) -> dict[str, int]:
        """The op's attributes: ``opcore.run(OP, x, *qw.tensors(), b, **qw.attrs)``."""
        return {"bits": self.bits, "group_size": self.group_size}

    def tensors(self) -> tuple[Any, Any, Any]:
        """(qweight, scale, zero): the op's weight arguments in schema order."""
        return self.qweight, self.scale, self.zero

    def dequantize(self, dtype: numpy.dtype | str = "float32") -> numpy.ndarray:
        """The float weight (N, K) as a numpy array (float32 by default)."""
        return dequantize(_host(self.qweight), _host(self.scale), _host(self.zero), self.bits, self.group_size, dtype)

    def linear(self, x: Any, b: Any = None, **options: Any) -> Any:
        """``opcore.run("linear_wq", x, ...)`` with this weight (``options``: ``backend=``).

        >>> qw = quantize_weight(numpy.ones((4, 32), "float32"))
        >>> qw.linear(numpy.ones((2, 32), "float32")).tolist()[0]
        [32.0, 32.0, 32.0, 32.0]
        """
        import opcore

        return opcore.run(
            OP, x, self.qweight, self.scale, self.zero, b, bits=self.bits, group_size=self.group_size, **options
        )

    def resolve(self, x: Any, b: Any = None, **options: Any) -> Any:
        """``opcore.resolve`` of ``linear_wq`` with this weight (and ``b``) as constants: the chosen
        kernel packs them once (torch's int8/int4 formats, ONNX initializers, OpenVINO constants).

        >>> qw = quantize_weight(numpy.ones((4, 32), "float32"))
        >>> qw.resolve(numpy.ones((2, 32), "float32"))(numpy.ones((2, 32), "float32")).shape
        (2, 4)
        """
        import opcore

        names = ("qweight", "scale") + (("zero",) if self.zero is not None else ()) + (("b",) if b is not None else ())
        attrs: dict[str, Any] = {**self.attrs, **options}
        return opcore.resolve(OP, x, self.qweight, self.scale, self.zero, b, constants=names, **attrs)


def _nbytes(array: Any) -> int:
    nbytes = getattr(array, "nbytes", None)
    return int(nbytes) if nbytes is not None else int(array.numel() * array.element_size())


def _host(array: Any) -> Any:
    """A numpy view of a numpy array or a torch tensor (moved to the CPU; bfloat16 as float32)."""
    if array is None or isinstance(array, numpy.ndarray):
        return array
    tensor = array.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":
        tensor = tensor.float()
    return tensor.numpy()


def no_options_without_weights(op: str, **options: Any) -> None:
    """An ArgumentError naming the first of ``options`` (group_size=, exclude=: how to quantize) that
    is given (not None, not an empty list) where no ``weights=`` format was asked: it would be ignored.

    >>> no_options_without_weights("x", group_size=None, exclude=())
    """
    for name, value in options.items():
        if value is None or (isinstance(value, (list, tuple)) and not value):
            continue
        raise ArgumentError(
            op=op,
            arg=name,
            expected=f"{name} together with weights='int8' or 'int4' (it says how to quantize)",
            found=f"{name}={value!r} without weights=",
            fix=f"add weights='int4' (or 'int8'), or leave {name} out",
        )


def default_group_size(bits: int, in_features: int) -> int:
    """-1 (per output channel) for 8 bits; for 4 bits the largest of 128, 64, 32 dividing in_features.

    >>> default_group_size(8, 896), default_group_size(4, 896)
    (-1, 128)
    """
    if bits == 8:
        return -1
    for group in (128, 64, 32):
        if in_features % group == 0:
            return group
    raise ShapeError(
        op="quantize_weight",
        arg="w",
        expected="in_features divisible by 32 for 4-bit groups",
        found=f"in_features = {in_features}",
        fix="pass group_size= a divisor of in_features, or bits=8",
    )


def quantize_weight(w: Any, *, bits: int = 8, group_size: int | None = None, symmetric: bool = True) -> QuantizedWeight:
    """Round-to-nearest codes of a float weight (out_features, in_features), numpy or torch.

    Symmetric: ``scale = max|w| / (2**(bits-1) - 1)`` per group, codes ``round(w / scale) + 2**(bits-1)``
    (1..255 or 1..15), no zero point. Asymmetric: the group's range [min(w, 0), max(w, 0)] over the
    2**bits codes, ``zero = round(-min / scale)``. A group of zeros gets scale 0 and the zero code.
    Rounding is half to even (numpy.rint) on float64: deterministic. ``group_size`` None:
    ``default_group_size`` (-1 for 8 bits, 128 for 4 bits where it divides in_features).

    >>> qw = quantize_weight(numpy.array([[-1.0, 0.0, 0.5, 1.0]]), symmetric=False)
    >>> qw.qweight.tolist(), qw.zero.tolist()
    ([[0, 128, 192, 255]], [[128]])
    """
    if bits not in BITS:
        raise ArgumentError(op="quantize_weight", arg="bits", expected="4 or 8", found=repr(bits))
    as_torch = not isinstance(w, numpy.ndarray) and hasattr(w, "detach")
    host = _host(w) if as_torch else numpy.asarray(w)
    if host.ndim != 2 or host.dtype.kind != "f":
        raise ShapeError(
            op="quantize_weight",
            arg="w",
            expected="a 2-D floating weight (out_features, in_features)",
            found=f"a {host.ndim}-D {host.dtype} array",
        )
    n, k = host.shape
    group_size = default_group_size(bits, k) if group_size is None else group_size
    group = group_of(group_size, k)
    if group_size != -1 and (group_size <= 0 or k % group):
        raise ShapeError(
            op="quantize_weight",
            arg="group_size",
            expected=f"-1 or a positive divisor of in_features = {k}",
            found=repr(group_size),
        )
    if bits == 4 and k % 2:
        raise ShapeError(op="quantize_weight", arg="w", expected="an even in_features for 4 bits", found=str(k))
    scale_dtype = host.dtype if host.dtype.itemsize >= 4 else numpy.dtype(numpy.float32)
    groups = k // group if group else 0
    codes = numpy.empty((n, k), numpy.uint8)
    scale = numpy.empty((n, groups), scale_dtype)
    zero = None if symmetric else numpy.empty((n, groups), numpy.uint8)
    # rows a chunk at a time: each element is read by ~10 float64 passes, which stay in the cache
    # (a 151,936 x 896 table at once: 23.8 s and 1 GB temporaries; a chunk at a time: 0.55 s, the same codes)
    rows = max(1, _CHUNK // max(1, k))
    for top in range(0, n, rows):
        part = slice(top, min(n, top + rows))
        blocks = host[part].astype(_F64).reshape(-1, groups, group if groups else 0)
        got, got_scale, got_zero = _round_to_nearest(blocks, bits, symmetric, scale_dtype)
        codes[part] = got.reshape(-1, k)
        scale[part] = got_scale.reshape(-1, groups)
        if zero is not None and got_zero is not None:
            zero[part] = got_zero.reshape(-1, groups)
    arrays: tuple[Any, ...] = (pack_int4(codes) if bits == 4 else codes, scale, zero)
    if as_torch:
        import torch

        arrays = tuple(None if a is None else torch.from_numpy(numpy.ascontiguousarray(a)) for a in arrays)
    return QuantizedWeight(arrays[0], arrays[1], arrays[2], bits, group_size)


def _round_to_nearest(
    blocks: numpy.ndarray, bits: int, symmetric: bool, scale_dtype: numpy.dtype
) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray | None]:
    """Codes (uint8, unpacked), scales and zero points of blocks (N, G, group) in float64."""
    middle = 1 << (bits - 1)
    top = (1 << bits) - 1
    empty = blocks.shape[-1] == 0
    if symmetric:
        largest = numpy.abs(blocks).max(axis=-1, keepdims=True) if not empty else numpy.zeros((*blocks.shape[:2], 1))
        scale = (largest / (middle - 1)).astype(scale_dtype)
        zero_f = numpy.full_like(largest, float(middle))
    else:
        low = (
            numpy.minimum(blocks.min(axis=-1, keepdims=True), 0.0) if not empty else numpy.zeros((*blocks.shape[:2], 1))
        )
        high = numpy.maximum(blocks.max(axis=-1, keepdims=True), 0.0) if not empty else low
        scale = ((high - low) / top).astype(scale_dtype)
        exact = scale.astype(_F64)
        with numpy.errstate(divide="ignore", invalid="ignore"):
            zero_f = numpy.where(exact > 0, numpy.clip(numpy.rint(-low / numpy.where(exact > 0, exact, 1)), 0, top), 0)
    exact = scale.astype(_F64)  # the codes round against the scale as stored
    with numpy.errstate(divide="ignore", invalid="ignore"):
        steps = numpy.where(exact > 0, numpy.rint(blocks / numpy.where(exact > 0, exact, 1)), 0.0)
    low_code, high_code = (1, top) if symmetric else (0, top)
    codes = numpy.clip(steps + zero_f, low_code, high_code)
    codes = numpy.where(exact > 0, codes, zero_f).astype(numpy.uint8)
    zero = None if symmetric else zero_f.astype(numpy.uint8)
    return codes, scale, zero
