"""opcore.extend: everything a backend or graph-runtime plugin may import, in one module.

A plugin (opcore-cpu, opcore-cuda, opcore-onnxruntime, opcore-openvino, the example vendor, yours)
imports opcore only from here; every other module of opcore is internal and may change in any
release. ``lint-imports`` (pyproject.toml) and tests/test_extend.py hold the in-repo backends to it.

>>> from opcore.extend import API_VERSION, BackendSpec, DeviceType
>>> BackendSpec(name="mine", version="1.0", priority=50, device_types=(DeviceType.CPU,), api_version=API_VERSION).name
'mine'

Three version numbers, each an ``int`` that counts **incompatible** changes (a name removed or
renamed, an argument removed or renamed, a meaning changed) to its part of this surface;
additions never bump one:

- ``API_VERSION``: the backend API, i.e. every name below except the two groups that follow. A
  plugin's ``BackendSpec.api_version`` must equal it, or the plugin fails to load with a message
  saying which versions match.
- ``ONEMODEL_API_VERSION``: the one-model builder API (``opcore.onemodel``) that graph runtimes
  build on ("one-model builders" below).
- ``TORCHKIT_API_VERSION``: the shared torch kernel API (``opcore.torchkit``) that torch-based
  backends build on ("torchkit kernels" below).

A plugin that needs a given builder or kernel surface states the number it was built for and,
in its ``is_available``, returns ``version_mismatch(...)``'s reason where this opcore provides
another: the backend is then unavailable, with why, and never half-loaded.

The names load on first use (PEP 562), like ``opcore``'s own: ``from opcore.extend import
BackendSpec, hookimpl`` imports no torch, no runtime and none of the kit; ``torch_kernels`` and
the ``torchkit`` helpers import torch when they are first read.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> (the module defining it, its name there; None: the module itself)
_EXPORTS: dict[str, tuple[str, str | None]] = {
    # versions
    "API_VERSION": ("opcore.backend", "API_VERSION"),
    "ONEMODEL_API_VERSION": ("opcore.onemodel", "API_VERSION"),
    "TORCHKIT_API_VERSION": ("opcore.torchkit", "API_VERSION"),
    # announcing a backend and registering kernels
    "BackendSpec": ("opcore.backend", "BackendSpec"),
    "DEFAULT_PRIORITIES": ("opcore.backend", "DEFAULT_PRIORITIES"),
    "version_mismatch": ("opcore.backend", "version_mismatch"),
    "hookimpl": ("opcore.hookspecs", "hookimpl"),
    "Registrar": ("opcore.registry", "Registrar"),
    "Kernel": ("opcore.kernel_records", "Kernel"),
    "Checker": ("opcore.kernel_records", "Checker"),
    "Costly": ("opcore.kernel_records", "Costly"),
    # contracts: ops a plugin defines, the built-in ones it serves
    "OpContract": ("opcore.contracts", "OpContract"),
    "define_op": ("opcore.contracts", "define_op"),
    "BUILTIN_CONTRACTS": ("opcore.opset", "BUILTIN_CONTRACTS"),
    "run": ("opcore.dispatch", "run"),  # what a decomposition calls
    # errors
    "OpcoreError": ("opcore.errors", "OpcoreError"),
    "ArgumentError": ("opcore.errors", "ArgumentError"),
    "DTypeError": ("opcore.errors", "DTypeError"),
    "DeviceError": ("opcore.errors", "DeviceError"),
    "PluginError": ("opcore.errors", "PluginError"),
    "ShapeError": ("opcore.errors", "ShapeError"),
    "Unsupported": ("opcore.errors", "Unsupported"),
    # types
    "ArrayKind": ("opcore.types", "ArrayKind"),
    "DType": ("opcore.types", "DType"),
    "Device": ("opcore.types", "Device"),
    "DeviceType": ("opcore.types", "DeviceType"),
    "Layout": ("opcore.types", "Layout"),
    "TensorMeta": ("opcore.types", "TensorMeta"),
    # meta helpers: the building blocks of meta functions and checkers
    "ALL_DTYPES": ("opcore.meta", "ALL_DTYPES"),
    "DEFAULT_FLOAT": ("opcore.meta", "DEFAULT_FLOAT"),
    "FLOATING": ("opcore.meta", "FLOATING"),
    "INTEGRAL": ("opcore.meta", "INTEGRAL"),
    "NUMERIC": ("opcore.meta", "NUMERIC"),
    "broadcast_shapes": ("opcore.meta", "broadcast_shapes"),
    "check_choice": ("opcore.meta", "check_choice"),
    "check_dtype": ("opcore.meta", "check_dtype"),
    "check_floating": ("opcore.meta", "check_floating"),
    "check_max_rank": ("opcore.meta", "check_max_rank"),
    "check_min_rank": ("opcore.meta", "check_min_rank"),
    "check_positive": ("opcore.meta", "check_positive"),
    "check_rank": ("opcore.meta", "check_rank"),
    "check_same_dtype": ("opcore.meta", "check_same_dtype"),
    "normalize_dim": ("opcore.meta", "normalize_dim"),
    "promote_types": ("opcore.meta", "promote_types"),
    "result_type": ("opcore.meta", "result_type"),
    "unary_float": ("opcore.meta", "unary_float"),
    "unary_promote_to_float": ("opcore.meta", "unary_promote_to_float"),
    # op facts shared by backends: one reading of an op's rules, so that no backend keeps its own
    "adaptive_bounds": ("opcore.opset.pooling", "adaptive_bounds"),
    "adaptive_output_size": ("opcore.opset.pooling", "adaptive_output_size"),
    "arange_bounds": ("opcore.opset.creation", "arange_bounds"),
    "arange_dtype": ("opcore.opset.creation", "arange_dtype"),
    "arange_length": ("opcore.opset.creation", "arange_length"),
    "arange_meta": ("opcore.opset.creation", "arange_meta"),
    "check_embedding_range": ("opcore.opset.indexing", "check_embedding_range"),
    "check_index_range": ("opcore.opset.indexing", "check_index_range"),
    "conv2d_meta": ("opcore.opset.nn", "conv2d_meta"),
    "conv_pads": ("opcore.opset.nn", "conv_pads"),
    "fill_dtype": ("opcore.opset.creation", "fill_dtype"),
    "full_meta": ("opcore.opset.creation", "full_meta"),
    "group_of": ("opcore.opset.quantized", "group_of"),
    "narrowing_refused": ("opcore.graph.ranges", "narrowing_refused"),
    "Padding": ("opcore.opset.nn", "Padding"),
    "pooled_size": ("opcore.opset.pooling", "pooled_size"),
    "squeezed_shape": ("opcore.opset.shape", "squeezed_shape"),
    "QuantizedWeight": ("opcore.quantize", "QuantizedWeight"),
    "pack_int4": ("opcore.quantize", "pack_int4"),
    # machine facts and small utilities shared by backends
    "BELOW_AVX512": ("opcore.isacap", "BELOW_AVX512"),
    "ISA_CAP_VARIABLES": ("opcore.isacap", "ISA_CAP_VARIABLES"),
    "onednn_cap_below_avx512": ("opcore.isacap", "onednn_cap_below_avx512"),
    "onednn_isa_cap": ("opcore.isacap", "onednn_isa_cap"),
    "cpu_info": ("opcore.probes", "cpu_info"),
    "distribution_version": ("opcore.distmeta", "version"),
    "capacity_from_env": ("opcore.lru", "capacity_from_env"),
    "runtime_threads": ("opcore.settings", "runtime_threads"),
    "record": ("opcore.fast_records", "record"),
    # the partition protocol (graph runtimes)
    "CompiledPartition": ("opcore.partition_protocol", "CompiledPartition"),
    "PartNode": ("opcore.partition_protocol", "PartNode"),
    "PartitionCompiler": ("opcore.partition_protocol", "PartitionCompiler"),
    "PartitionError": ("opcore.partition_protocol", "PartitionError"),
    "PartitionSpec": ("opcore.partition_protocol", "PartitionSpec"),
    "SavedBytes": ("opcore.partition_protocol", "SavedBytes"),
    "ValueRef": ("opcore.partition_protocol", "ValueRef"),
    "saved_bytes": ("opcore.partition_protocol", "saved_bytes"),
    # the conformance kit: entries for a plugin's own ops, checks for its tests
    "ErrorInput": ("opcore.testing", "ErrorInput"),
    "OpEntry": ("opcore.testing", "OpEntry"),
    "Sample": ("opcore.testing", "Sample"),
    "SampleSet": ("opcore.testing", "SampleSet"),
    "Status": ("opcore.testing", "Status"),
    "TensorInput": ("opcore.testing", "TensorInput"),
    "Tolerance": ("opcore.testing", "Tolerance"),
    "check_error": ("opcore.testing", "check_error"),
    "check_sample": ("opcore.testing", "check_sample"),
    "entry": ("opcore.testing", "entry"),
    "error_inputs_of": ("opcore.testing", "error_inputs_of"),
    "samples_of": ("opcore.testing", "samples_of"),
    "shape_id": ("opcore.testing", "shape_id"),
    "tensor_of": ("opcore.testing", "tensor_of"),
    "z": ("opcore.testing", "z"),
    "PartitionCase": ("opcore.testing.partitions", "PartitionCase"),
    "check_partition": ("opcore.testing.partitions", "check_partition"),
    "check_partition_error": ("opcore.testing.partitions", "check_partition_error"),
    "partition_cases": ("opcore.testing.partitions", "partition_cases"),
    # one-model builders (ONEMODEL_API_VERSION): graph runtimes that build one model per signature
    "ATTRIBUTE": ("opcore.onemodel.op", "ATTRIBUTE"),
    "OPERAND": ("opcore.onemodel.op", "OPERAND"),
    "TENSOR": ("opcore.onemodel.op", "TENSOR"),
    "TENSORS": ("opcore.onemodel.op", "TENSORS"),
    "OneModelOp": ("opcore.onemodel.op", "OneModelOp"),
    "Scalar": ("opcore.onemodel.op", "Scalar"),
    "first_line": ("opcore.onemodel.op", "first_line"),
    "ModelCache": ("opcore.onemodel.cache", "ModelCache"),
    "GraphPartitionCompiler": ("opcore.onemodel.partition", "GraphPartitionCompiler"),
    "chain_nodes": ("opcore.onemodel.partition", "chain_nodes"),
    "compile_or_locate": ("opcore.onemodel.partition", "compile_or_locate"),
    "cat_through": ("opcore.onemodel.builders", "cat_through"),
    "check_embedding_indices": ("opcore.onemodel.builders", "check_embedding_indices"),
    "check_gather_indices": ("opcore.onemodel.builders", "check_gather_indices"),
    "check_index_indices": ("opcore.onemodel.builders", "check_index_indices"),
    "index_layout": ("opcore.onemodel.builders", "index_layout"),
    "piece_bounds": ("opcore.onemodel.builders", "piece_bounds"),
    "promoted": ("opcore.onemodel.builders", "promoted"),
    "result_dtype": ("opcore.onemodel.builders", "result_dtype"),
    "results_dtype": ("opcore.onemodel.builders", "results_dtype"),
    "split_kernels": ("opcore.onemodel.builders", "split_kernels"),
    "transpose_perm": ("opcore.onemodel.builders", "transpose_perm"),
    "view_kernel": ("opcore.onemodel.builders", "view_kernel"),
    "dtype_checker": ("opcore.onemodel.plugin", "dtype_checker"),
    "kernel_layout": ("opcore.onemodel.plugin", "kernel_layout"),
    "kernel_targets": ("opcore.onemodel.plugin", "kernel_targets"),
    "probe": ("opcore.onemodel.plugin", "probe"),
    "register_kernels": ("opcore.onemodel.plugin", "register_kernels"),
    "runtime_available": ("opcore.onemodel.plugin", "runtime_available"),
    "tensor_metas": ("opcore.onemodel.plugin", "tensor_metas"),
    "embedding_wq_kernel": ("opcore.onemodel.quantized", "embedding_wq_kernel"),
    "linear_wq_kernel": ("opcore.onemodel.quantized", "linear_wq_kernel"),
    "nbits_block": ("opcore.onemodel.quantized", "nbits_block"),
    # what a plan asks of the kernels it prepares
    "weight_copies_allowed": ("opcore.weight_copies", "weight_copies_allowed"),
    "shape_compiles_allowed": ("opcore.shape_compiles", "shape_compiles_allowed"),
    # torchkit kernels (TORCHKIT_API_VERSION): torch-based backends; these three import no torch
    "register_aten_fallback": ("opcore.torchkit.registration", "register_aten_fallback"),
    "register_torch_kernels": ("opcore.torchkit.registration", "register_torch_kernels"),
    "torch_dtypes": ("opcore.torchkit.registration", "torch_dtypes"),
    # ... and these import torch
    "torch_kernels": ("opcore.torchkit.torch_kernels", None),  # one device-generic kernel per op
    "batch_rows": ("opcore.torchkit.prepared", "batch_rows"),
    "free_positions": ("opcore.torchkit.prepared", "free_positions"),
    "with_free_args": ("opcore.torchkit.prepared", "with_free_args"),
}

__all__ = [
    # versions
    "API_VERSION",
    "ONEMODEL_API_VERSION",
    "TORCHKIT_API_VERSION",
    # announcing a backend and registering kernels
    "BackendSpec",
    "Checker",
    "Costly",
    "DEFAULT_PRIORITIES",
    "Kernel",
    "Registrar",
    "hookimpl",
    "version_mismatch",
    # contracts
    "BUILTIN_CONTRACTS",
    "OpContract",
    "define_op",
    "run",
    # errors
    "ArgumentError",
    "DTypeError",
    "DeviceError",
    "OpcoreError",
    "PluginError",
    "ShapeError",
    "Unsupported",
    # types
    "ArrayKind",
    "DType",
    "Device",
    "DeviceType",
    "Layout",
    "TensorMeta",
    # meta helpers
    "ALL_DTYPES",
    "DEFAULT_FLOAT",
    "FLOATING",
    "INTEGRAL",
    "NUMERIC",
    "broadcast_shapes",
    "check_choice",
    "check_dtype",
    "check_floating",
    "check_max_rank",
    "check_min_rank",
    "check_positive",
    "check_rank",
    "check_same_dtype",
    "normalize_dim",
    "promote_types",
    "result_type",
    "unary_float",
    "unary_promote_to_float",
    # op facts shared by backends
    "Padding",
    "QuantizedWeight",
    "adaptive_bounds",
    "adaptive_output_size",
    "arange_bounds",
    "arange_dtype",
    "arange_length",
    "arange_meta",
    "check_embedding_range",
    "check_index_range",
    "conv2d_meta",
    "conv_pads",
    "fill_dtype",
    "full_meta",
    "group_of",
    "narrowing_refused",
    "pack_int4",
    "pooled_size",
    "squeezed_shape",
    # machine facts and small utilities shared by backends
    "BELOW_AVX512",
    "ISA_CAP_VARIABLES",
    "capacity_from_env",
    "cpu_info",
    "distribution_version",
    "onednn_cap_below_avx512",
    "onednn_isa_cap",
    "record",
    "runtime_threads",
    # the partition protocol
    "CompiledPartition",
    "PartNode",
    "PartitionCompiler",
    "PartitionError",
    "PartitionSpec",
    "SavedBytes",
    "ValueRef",
    "saved_bytes",
    # the conformance kit
    "ErrorInput",
    "OpEntry",
    "PartitionCase",
    "Sample",
    "SampleSet",
    "Status",
    "TensorInput",
    "Tolerance",
    "check_error",
    "check_partition",
    "check_partition_error",
    "check_sample",
    "entry",
    "error_inputs_of",
    "partition_cases",
    "samples_of",
    "shape_id",
    "tensor_of",
    "z",
    # what a plan asks of the kernels it prepares
    "weight_copies_allowed",
    "shape_compiles_allowed",
    # one-model builders (ONEMODEL_API_VERSION)
    "ATTRIBUTE",
    "GraphPartitionCompiler",
    "ModelCache",
    "OPERAND",
    "OneModelOp",
    "Scalar",
    "TENSOR",
    "TENSORS",
    "cat_through",
    "chain_nodes",
    "check_embedding_indices",
    "check_gather_indices",
    "check_index_indices",
    "compile_or_locate",
    "dtype_checker",
    "embedding_wq_kernel",
    "first_line",
    "index_layout",
    "kernel_layout",
    "kernel_targets",
    "linear_wq_kernel",
    "nbits_block",
    "piece_bounds",
    "probe",
    "promoted",
    "register_kernels",
    "result_dtype",
    "results_dtype",
    "runtime_available",
    "split_kernels",
    "tensor_metas",
    "transpose_perm",
    "view_kernel",
    # torchkit kernels (TORCHKIT_API_VERSION)
    "batch_rows",
    "free_positions",
    "register_aten_fallback",
    "register_torch_kernels",
    "torch_dtypes",
    "torch_kernels",
    "with_free_args",
]


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(
            f"module 'opcore.extend' has no attribute {name!r}: the plugin API is the names in "
            "opcore.extend.__all__ (docs/plugins.md); everything else in opcore is internal"
        )
    module, attribute = where
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what static analysis sees
    from opcore.backend import API_VERSION, DEFAULT_PRIORITIES, BackendSpec, version_mismatch
    from opcore.contracts import OpContract, define_op
    from opcore.dispatch import run
    from opcore.distmeta import version as distribution_version
    from opcore.errors import (
        ArgumentError,
        DeviceError,
        DTypeError,
        OpcoreError,
        PluginError,
        ShapeError,
        Unsupported,
    )
    from opcore.fast_records import record
    from opcore.graph.ranges import narrowing_refused
    from opcore.hookspecs import hookimpl
    from opcore.isacap import BELOW_AVX512, ISA_CAP_VARIABLES, onednn_cap_below_avx512, onednn_isa_cap
    from opcore.kernel_records import Checker, Costly, Kernel
    from opcore.lru import capacity_from_env
    from opcore.meta import (
        ALL_DTYPES,
        DEFAULT_FLOAT,
        FLOATING,
        INTEGRAL,
        NUMERIC,
        broadcast_shapes,
        check_choice,
        check_dtype,
        check_floating,
        check_max_rank,
        check_min_rank,
        check_positive,
        check_rank,
        check_same_dtype,
        normalize_dim,
        promote_types,
        result_type,
        unary_float,
        unary_promote_to_float,
    )
    from opcore.onemodel import API_VERSION as ONEMODEL_API_VERSION
    from opcore.onemodel.builders import (
        cat_through,
        check_embedding_indices,
        check_gather_indices,
        check_index_indices,
        index_layout,
        piece_bounds,
        promoted,
        result_dtype,
        results_dtype,
        split_kernels,
        transpose_perm,
        view_kernel,
    )
    from opcore.onemodel.cache import ModelCache
    from opcore.onemodel.op import ATTRIBUTE, OPERAND, TENSOR, TENSORS, OneModelOp, Scalar, first_line
    from opcore.onemodel.partition import GraphPartitionCompiler, chain_nodes, compile_or_locate
    from opcore.onemodel.plugin import (
        dtype_checker,
        kernel_layout,
        kernel_targets,
        probe,
        register_kernels,
        runtime_available,
        tensor_metas,
    )
    from opcore.onemodel.quantized import (
        embedding_wq_kernel,
        linear_wq_kernel,
        nbits_block,
    )
    from opcore.opset import BUILTIN_CONTRACTS
    from opcore.opset.creation import arange_bounds, arange_dtype, arange_length, arange_meta, fill_dtype, full_meta
    from opcore.opset.indexing import check_embedding_range, check_index_range
    from opcore.opset.nn import Padding, conv2d_meta, conv_pads
    from opcore.opset.pooling import adaptive_bounds, adaptive_output_size, pooled_size
    from opcore.opset.quantized import group_of
    from opcore.opset.shape import squeezed_shape
    from opcore.partition_protocol import (
        CompiledPartition,
        PartitionCompiler,
        PartitionError,
        PartitionSpec,
        PartNode,
        SavedBytes,
        ValueRef,
        saved_bytes,
    )
    from opcore.probes import cpu_info
    from opcore.quantize import QuantizedWeight, pack_int4
    from opcore.registry import Registrar
    from opcore.settings import runtime_threads
    from opcore.shape_compiles import shape_compiles_allowed
    from opcore.testing import (
        ErrorInput,
        OpEntry,
        Sample,
        SampleSet,
        Status,
        TensorInput,
        Tolerance,
        check_error,
        check_sample,
        entry,
        error_inputs_of,
        samples_of,
        shape_id,
        tensor_of,
        z,
    )
    from opcore.testing.partitions import PartitionCase, check_partition, check_partition_error, partition_cases
    from opcore.torchkit import API_VERSION as TORCHKIT_API_VERSION
    from opcore.torchkit import torch_kernels
    from opcore.torchkit.prepared import batch_rows, free_positions, with_free_args
    from opcore.torchkit.registration import register_aten_fallback, register_torch_kernels, torch_dtypes
    from opcore.types import ArrayKind, Device, DeviceType, DType, Layout, TensorMeta
    from opcore.weight_copies import weight_copies_allowed
