"""The model zoo (bench/zoo_models.py) at its test sizes: every architecture captured with default
arguments runs as eager does; captured with its dynamic dims it plans into no more partitions than
the static capture and runs other shapes (batch and length) as eager does.

Before issue 25's fixes a dynamic sequence dim split a decoder into five partitions with about half
its nodes per node between them: sizes computed at run time were no partition argument, the declared
Dim ranges bounded no value, grouped-query attention's rewrite compared sizes as numbers, and an
index into a dim of the same dynamic size (a mask built from ``arange(s0)``) was not proven in range.
"""

from __future__ import annotations

import pytest
import torch

import opcore.graph

pytest.importorskip("transformers", reason="the zoo is built from transformers configs")

from bench_modules import load_bench

zoo = load_bench("zoo_models")
bench = load_bench("zoo")

# dynamic plans allowed more partitions than the static one: how many more, and why. None left: the
# static captures fold what the dynamic ones compute from sizes per call, and each such computation
# now plans as the static one does. T5's and DeBERTa's float buckets cast to int64 are proven small
# (opcore.graph.branch_ranges); OPT's positions, a float running sum of a run-time mask of ones cast
# to int64, are proven int32 by the sum's count, the sequence's declared largest (real_ranges); and
# Wav2Vec2's size read off its feature encoder's output (s - 1) is computed from the input's size
# (opcore.graph.input_sizes), so no partition splits around the read.
MORE: dict[str, tuple[int, str]] = {}


def eager(model, args, kwargs):
    with torch.no_grad():
        return bench.first_tensor(model(*args, **kwargs))


@pytest.mark.parametrize("name", [case.name for case in zoo.ZOO])
def test_zoo_model_captures_by_default_and_with_dynamic_dims(name):
    case = zoo.by_name(name)
    model = case.build("test")
    args, kwargs = case.inputs(2, case.lengths[0])
    want = eager(model, args, kwargs)

    plan = opcore.graph.capture(model, args, kwargs)  # default arguments, as a user calls it
    assert bench.relative_diff(plan(*args, **kwargs), want) <= 1e-4

    static = opcore.graph.capture(model, args, kwargs, measure=False)
    dynamic = opcore.graph.capture(model, args, kwargs, dynamic_shapes=case.dynamic_shapes(), measure=False)
    other_args, other_kwargs = case.inputs(3, case.lengths[1])
    got = dynamic(*other_args, **other_kwargs)
    assert bench.relative_diff(got, eager(model, other_args, other_kwargs)) <= 1e-4
    allowed = max(len(static.partitions), 1) + MORE.get(name, (0, ""))[0]
    assert len(dynamic.partitions) <= allowed, dynamic.explain()


def test_zoo_covers_the_families_the_issue_names():
    families = {case.family for case in zoo.ZOO}
    assert {"decoder", "encoder", "encoder-decoder", "vision", "audio", "multimodal"} <= families
    assert len(zoo.ZOO) >= 20
    assert len({case.name for case in zoo.ZOO}) == len(zoo.ZOO)
