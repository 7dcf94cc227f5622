"""Ray Data batches in and out, in the format they came: numpy (a dict of arrays), pandas (a
DataFrame) or pyarrow (a Table). A column is read as its rows (one array per row: ragged columns
too) and written back as one stacked array, with Ray's tensor extension types where a row is an
array (pandas ``TensorArray``, arrow ``ArrowTensorArray``).

>>> batch = {"id": numpy.arange(2), "x": numpy.zeros((2, 3))}
>>> kind_of(batch), [r.shape for r in rows_of(batch, "x")]
('numpy', [(3,), (3,)])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy

from opcore.errors import ArgumentError

__all__ = ["build", "columns_of", "kind_of", "length_of", "rows_of"]


def kind_of(batch: Any) -> str:
    """'numpy', 'pandas' or 'pyarrow'; anything else is an ArgumentError naming what came."""
    if isinstance(batch, Mapping):
        return "numpy"
    module = type(batch).__module__.split(".")[0]
    if module == "pandas" and type(batch).__name__ == "DataFrame":
        return "pandas"
    if module == "pyarrow" and type(batch).__name__ == "Table":
        return "pyarrow"
    raise ArgumentError(
        op="opcore.ray",
        arg="batch",
        expected="a dict of numpy arrays, a pandas DataFrame or a pyarrow Table",
        found=f"a {type(batch).__module__}.{type(batch).__name__}",
        fix="map_batches(..., batch_format='numpy') (or 'pandas', 'pyarrow')",
    )


def columns_of(batch: Any) -> list[str]:
    if isinstance(batch, Mapping):
        return [str(name) for name in batch]
    return [str(name) for name in batch.columns] if kind_of(batch) == "pandas" else list(batch.column_names)


def length_of(batch: Any) -> int:
    if isinstance(batch, Mapping):
        return len(next(iter(batch.values()))) if batch else 0
    return len(batch) if kind_of(batch) == "pandas" else int(batch.num_rows)


def rows_of(batch: Any, name: str) -> list[Any]:
    """Column ``name`` as one numpy value per row (an array, or a 0-d array for a scalar)."""
    kind = kind_of(batch)
    if kind == "numpy":
        values = batch[name]
    elif kind == "pandas":
        values = batch[name].to_numpy()
    else:
        values = _arrow_values(batch.column(name))
    if isinstance(values, numpy.ndarray) and values.dtype != object:
        return list(values)
    return [numpy.asarray(value) for value in values]


def _arrow_values(column: Any) -> Any:
    chunk = column.combine_chunks()
    to_numpy = getattr(chunk, "to_numpy_ndarray", None)  # pyarrow's fixed_shape_tensor
    if to_numpy is not None:
        return to_numpy()
    try:
        return chunk.to_numpy(zero_copy_only=False)  # primitives, Ray's tensor types (fixed or variable shape)
    except TypeError:
        return chunk.to_numpy()
    except NotImplementedError:
        return [numpy.asarray(value) for value in chunk.to_pylist()]  # nested lists


def _stacked(values: list[Any]) -> Any:
    """One array of the rows where they share a shape, else an object array of them (ragged)."""
    if values and all(v.shape == values[0].shape for v in values):
        return numpy.stack(values) if values[0].ndim else numpy.asarray(values)
    out = numpy.empty(len(values), dtype=object)
    for index, value in enumerate(values):
        out[index] = value
    return out


def _is_tensor(array: Any) -> bool:
    return bool(array.ndim > 1 or (array.dtype == object and len(array) and isinstance(array[0], numpy.ndarray)))


def build(batch: Any, drop: Any, add: Mapping[str, Any]) -> Any:
    """``batch`` in its own format without the columns ``drop``, with the columns ``add`` ({name:
    list of rows, or an array}: rows stacked) after its own; the rows keep their order."""
    kind = kind_of(batch)
    arrays = {name: _stacked(list(v)) if isinstance(v, list) else numpy.asarray(v) for name, v in add.items()}
    if kind == "numpy":
        return {**{k: v for k, v in batch.items() if k not in drop}, **arrays}
    from ray.data.extensions import ArrowTensorArray, TensorArray

    if kind == "pandas":
        frame = batch.drop(columns=[c for c in batch.columns if c in drop])
        for name, array in arrays.items():
            frame[name] = TensorArray(array) if _is_tensor(array) else array
        return frame
    table = batch.drop_columns([c for c in batch.column_names if c in drop])
    for name, array in arrays.items():
        table = table.append_column(name, ArrowTensorArray.from_numpy(array) if _is_tensor(array) else _plain(array))
    return table


def _plain(array: Any) -> Any:
    import pyarrow

    return pyarrow.array(array.tolist() if array.dtype.kind == "U" else array)
