"""opcore.graph.specialize: capture_lm exports a decoder once and takes the decode step's graph from the
prefill's at length 1; what it cannot make static sends it back to a second export, never to a wrong
step."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the decoders are transformers models built from configs")

from test_graph_generation import TinyDecoder, build, prompt, protocol_greedy  # noqa: E402

import opcore.graph  # noqa: E402
from opcore.graph import capturing, lm_capture  # noqa: E402
from opcore.graph.ir import SCALAR_OPS  # noqa: E402
from opcore.graph.specialize import NotSpecialized, specialize, symbols_of  # noqa: E402
from opcore.graph.split_attention import WINDOW  # noqa: E402
from opcore.types import Device, TensorMeta  # noqa: E402

CPU = Device.parse("cpu")


def _exports(monkeypatch) -> list[int]:
    """The length of each step capture exports from here on (0: a dynamic one)."""
    lengths: list[int] = []
    original = capturing.export

    def counted(model, args, kwargs, dynamic, **options):
        lengths.append(0 if dynamic else args[0].shape[1])
        return original(model, args, kwargs, dynamic, **options)

    monkeypatch.setattr(capturing, "export", counted)
    return lengths


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma"])
def test_a_decoder_is_exported_once_and_its_steps_equal_transformers(family, monkeypatch):
    model = build(family)
    exports = _exports(monkeypatch)
    lm = opcore.graph.capture_lm(model, max_length=40, measure=False)
    assert exports == [0], "one dynamic export serves both steps"
    ids = prompt()
    want = model.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=16, eos_token_id=[]), want)
    graph = lm.decode_plan.graph
    # the one token made static: the only dynamic size left is the window's (the cache's slots it reads)
    dynamic = {str(info.dims[axis]) for info in graph.values.values() for axis in info.dynamic_axes}
    assert all(WINDOW in size for size in dynamic), dynamic
    assert not any(node.scalar and node.op in SCALAR_OPS for node in graph.nodes), "no size computed per step"
    assert graph.values[graph.inputs[0]].meta.shape == (1, 1)
    assert "decode graph: the prefill's export at 1 token" in lm.decode_plan.explain()
    ranges = lm.prefill_plan.graph.signature.ranges  # exported from 1 token, the prefill still takes 2 and more
    tokens = {size: span for size, span in ranges.items() if size != WINDOW}
    assert tokens and all(lo >= 2 for lo, _ in tokens.values()), ranges


def test_the_specialized_step_computes_what_the_static_export_does():
    """Logits and the cache written, step by step, against the decode step exported on its own."""
    from opcore.graph.decoder import CachedDecoder

    module = CachedDecoder(build("llama"), 1, 32)
    with torch.no_grad():
        both = lm_capture._export_both(module, 1, 32, CPU)
        assert both is not None
        prefill, decode = both
        static = lm_capture._lower_step(module, 1, 32, 1, CPU)
        ours = lm_capture._finish_step(decode, 32)
        plans = [lm_capture._plan(lowered, CPU, ("cpu",), None, False) for lowered in (ours, static)]
        states = [[t.clone() for t in lm_capture.new_state(plan.graph)] for plan in plans]
        for position, token in enumerate([5, 17, 3, 99, 42]):
            ids, positions, slots, mask = lm_capture.step_examples(1, 32, 1, "cpu")
            ids[:] = token
            positions[:] = position
            slots[:] = position
            mask[:, : position + 1] = 1
            window = [torch.arange(32)]  # every slot, where a plan reads a window of them
            got, want = (
                plan.program.run([ids, positions, slots, mask, *window[: WINDOW in plan.graph.inputs], *state])
                for plan, state in zip(plans, states)
            )
            assert torch.allclose(got[0], want[0], atol=1e-5, rtol=1e-5)
            for mine, theirs in zip(*states):
                assert torch.equal(mine, theirs)
    assert prefill.graph.values[prefill.graph.inputs[0]].dims[1] != 1  # the prefill stays dynamic


def test_a_module_whose_export_refuses_a_length_of_one_is_exported_per_step(monkeypatch):
    class OneTokenBranch(TinyDecoder):
        def forward(self, input_ids, position_ids, cache_position, attention_mask):
            logits = super().forward(input_ids, position_ids, cache_position, attention_mask)
            # a branch on the length being 1, which the export from 1 token takes as for 2 and more
            return -logits if input_ids.shape[1] == 1 else logits

    torch.manual_seed(0)
    model = OneTokenBranch().eval()
    exports = _exports(monkeypatch)
    lm = opcore.graph.capture_lm(model, measure=False)
    assert exports == [0, 1], exports  # the prefill's, then the step's own: its graph is not the prefill's at 1
    ids = torch.tensor([[3, 7, 9, 1]])
    assert lm.generate(ids, max_new_tokens=6)[0, 4:].tolist() == protocol_greedy(model, ids, 6)


def test_what_specialize_cannot_make_static_is_said():
    from opcore.graph.decoder import CachedDecoder

    with torch.no_grad():
        exported = lm_capture._export_step(CachedDecoder(build("llama"), 1, 32), 1, 32, 8, CPU, shortest=1)
    graph = exported.graph
    ids = graph.inputs[0]
    (symbol,) = set(symbols_of(graph, {ids: 1}).values())
    with pytest.raises(NotSpecialized, match="is not dynamic"):
        symbols_of(graph, {ids: 0})  # the batch: static
    with pytest.raises(NotSpecialized, match="cannot be read"):
        specialize(graph, {})  # the symbol's value not given
    info = graph.values[ids]
    strided = replace(info, meta=TensorMeta(info.meta.shape, info.meta.dtype, strides=(info.meta.shape[1], 1)))
    with pytest.raises(NotSpecialized, match="strides"):
        specialize(replace(graph, values={**graph.values, ids: strided}), {symbol: 1})
    assert specialize(graph, {symbol: 1}).values[ids].meta.shape == (1, 1)
