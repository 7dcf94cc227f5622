"""opcore.graph.score_window: an attention written as matmuls (scores, mask, softmax, weights @ values)
reads the cache's first W slots, as the fused attention's window does.

Decoders following the capture_lm protocol with the forms transformers' eager attentions take (the
key heads repeated by expand + reshape and soft-capped scores, as Llama's and Gemma 2's; heads merged
into the batch with a position bias, as BLOOM's; a softmax written by hand, which opcore's rewrites
make one) are stepped through windows of 32, 64 and 80 slots on each graph runtime and the torch
route, against the module run eagerly, with another conversation's keys in the slots after the
position. Forms whose result depends on the slots past the position (an op after the mask that
makes a masked score finite again, a fill of a finite value over it, weights shifted off zero, no
mask) or that keep a value over every slot (the scores written into a buffer) keep reading every
slot, and still give the module's logits. Two transformers families generate a left-padded batch
through the windows as ``model.generate``.
"""

from __future__ import annotations

import pytest
import torch
from test_graph_split_attention import BATCH, RUNTIMES, VOCAB, MatmulDecoder, _steps_match_eager

import opcore.graph
from opcore.graph.split_attention import WINDOW

LENGTH = 80
LOWEST = torch.finfo(torch.float32).min


class ScoresDecoder(MatmulDecoder):
    """One attention as the model's own matmuls, in the ``form`` given (see the module docstring)."""

    def __init__(self, form="repeat"):
        super().__init__(kv_heads=4 if form == "merged" else 2, length=LENGTH)
        self.form = form
        if form == "scores kept":  # each query row's scores over every slot, kept in a buffer
            self.register_buffer("kept", torch.zeros(BATCH, self.heads, LENGTH, LENGTH))

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.project(input_ids)
        rows, _, tokens, _ = q.shape
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)
        allowed = (torch.arange(LENGTH)[None, :] <= cache_position[:, None])[None, None]
        allowed = allowed & attention_mask[:, None, None, :].bool()
        if self.form == "merged":  # BLOOM's: (rows * heads, slots, dim), a bias per slot, a float mask
            keys = self.keys.reshape(rows * self.heads, -1, self.dim)
            scores = torch.bmm(q.reshape(rows * self.heads, tokens, self.dim), keys.transpose(-1, -2))
            bias = torch.arange(LENGTH, dtype=torch.float32)[None, None, :] * -0.05
            scores = (scores * 0.3 + bias).view(rows, self.heads, tokens, -1)
            weights = torch.softmax(scores + torch.where(allowed, 0.0, LOWEST), dim=-1, dtype=torch.float32)
            y = torch.bmm(
                weights.view(rows * self.heads, tokens, -1), self.values.reshape(rows * self.heads, -1, self.dim)
            )
            return self.logits(y.view(rows, self.heads, tokens, self.dim))
        scores = self.capped_scores(q)
        if self.form == "no mask":
            weights = torch.softmax(scores, dim=-1)
        else:
            scores = scores.masked_fill(~allowed, LOWEST)
            if self.form == "bounded after the mask":  # a masked score made -1: every slot counts
                scores = torch.tanh(scores)
            if self.form == "refilled with a finite value":  # the masked slots made -1 again
                scores = scores.masked_fill(~allowed, -1.0)
            if self.form == "scores kept":  # a write of every slot's score: read whole
                self.kept.index_copy_(2, cache_position, scores)
            if self.form == "softmax by hand":  # opcore's rewrites make it one softmax: taken
                shifted = (scores - scores.amax(-1, keepdim=True)).exp()
                weights = shifted / shifted.sum(-1, keepdim=True)
            else:
                weights = torch.softmax(scores, dim=-1)
            if self.form == "weights shifted":  # a masked slot's weight made 0.01
                weights = weights + 0.01
        return self.logits(torch.matmul(weights, self.repeat(self.values)))


def _captured(model, runtime):
    partitions = runtime != "cpu"
    backends = (runtime, "cpu") if partitions else ("cpu",)
    return opcore.graph.capture_lm(model, backends=backends, measure=False, prefill_partitions=partitions)


def _windowed(plan) -> bool:
    return any("attention window: 1 attention as matmuls" in note for note in plan.notes)


@pytest.mark.parametrize("runtime", [*RUNTIMES, "cpu"])
@pytest.mark.parametrize("form", ["repeat", "merged", "softmax by hand"])
def test_an_attention_as_matmuls_reads_the_window_and_gives_the_modules_logits(form, runtime):
    torch.manual_seed(0)
    model = ScoresDecoder(form).eval()
    lm = _captured(model, runtime)
    assert _windowed(lm.decode_plan) and _windowed(lm.prefill_plan), (lm.decode_plan.notes, lm.prefill_plan.notes)
    assert WINDOW in lm.decode_plan.graph.inputs and WINDOW in lm.prefill_plan.graph.inputs
    if runtime != "cpu":  # the written caches are read at the window's slots alone: no cache-sized temporary
        assert any("2 at the window's slots alone" in note for note in lm.decode_plan.notes), lm.decode_plan.notes
        assert "in 1 partition" in lm.decode_plan.summary(), lm.decode_plan.summary()
    # a conversation to slot 72 (windows of 32, 64 and 80), then cropped back to 40: the slots after
    # hold its keys, which the mask hides
    ids = torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5))
    session = _steps_match_eager(lm, model, ids, 70)
    session.crop(40)
    session.mask[:, 40] = 1
    session.slot.fill_(40)
    given = [torch.tensor([[3], [4]]), session.positions[:, None], session.slot, session.mask]
    with torch.no_grad():
        runs = [lm.decode_plan.program.run([*given, lm.window_slots[:w], *session.state])[0] for w in (64, 41, 80)]
    for other in runs[1:]:
        assert (other - runs[0]).abs().max().item() <= 1e-5


@pytest.mark.parametrize(
    "form", ["bounded after the mask", "refilled with a finite value", "weights shifted", "no mask", "scores kept"]
)
def test_a_form_that_reads_the_slots_past_the_position_reads_every_slot(form):
    # with a window these would lose the empty slots' share: eager's logits tell
    torch.manual_seed(0)
    model = ScoresDecoder(form).eval()
    lm = _captured(model, RUNTIMES[0] if RUNTIMES else "cpu")
    assert not _windowed(lm.decode_plan) and not _windowed(lm.prefill_plan), lm.decode_plan.notes
    ids = torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5))
    _steps_match_eager(lm, model, ids, 32)


GEMMA2 = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
FAMILIES = {
    # heads merged into the batch, ALiBi's bias per slot
    "bloom": lambda t: t.BloomForCausalLM(t.BloomConfig(vocab_size=300, hidden_size=64, n_layer=2, n_head=4)),
    # grouped key heads repeated, soft-capped scores (eager: its attention's default)
    "gemma2": lambda t: t.Gemma2ForCausalLM(t.Gemma2Config(**GEMMA2)),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_eager_attention_families_generate_through_the_windows_as_transformers(family):
    transformers = pytest.importorskip("transformers", reason="the families are transformers models")
    torch.manual_seed(0)
    model = FAMILIES[family](transformers).eval()
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8)  # greedy choices well apart
    lm = opcore.graph.capture_lm(model, max_length=96, batch_size=2, measure=False)
    for plan in (lm.decode_plan, lm.prefill_plan):
        assert any("attention window: 2 attentions as matmuls" in note for note in plan.notes), plan.notes
    ids = torch.randint(3, 300, (2, 21), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :4] = ids[1, :4] = 0
    options = dict(attention_mask=mask, max_new_tokens=60, pad_token_id=0, eos_token_id=None)
    want = model.generate(ids, do_sample=False, min_new_tokens=60, **options)
    assert torch.equal(lm.generate(ids, **options), want)  # windows of 32, 64 and 96
