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

A latent cache (DeepSeek's and MiniCPM3's multi-head latent attention: one latent and one rotary key
per slot, projected up to every head's keys and values at each step, the keys written piece by
piece into a new buffer, then ``scaled_dot_product_attention`` with a mask) reads the window the
same way: the up-projection runs over W slots, not ``max_length``; a latent attention without a
mask reads every slot. DeepSeek-V2 from transformers generates through the windows as its own
``generate``.
"""

from __future__ import annotations

import pytest
import torch
from test_graph_split_attention import BATCH, RUNTIMES, VOCAB, MatmulDecoder, _steps_match_eager

import opcore.graph
from opcore.graph.ir import ValueRef
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


class LatentDecoder(torch.nn.Module):
    """Multi-head latent attention as transformers writes DeepSeek-V2's: a latent of ``rank`` and one
    rotary key per slot cached, each step projecting every cached latent up to the heads' keys and
    values, the keys assembled in a new buffer (``new_empty`` then two ``copy_``), then SDPA."""

    def __init__(self, masked=True, heads=4, rank=12, nope=8, rope=4, dim=8):
        super().__init__()
        self.batch_size, self.max_length, self.masked = BATCH, LENGTH, masked
        self.heads, self.nope, self.rope, self.dim = heads, nope, rope, dim
        width = heads * dim
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.q = torch.nn.Linear(width, heads * (nope + rope))
        self.down = torch.nn.Linear(width, rank + rope)
        self.up = torch.nn.Linear(rank, heads * (nope + dim), bias=False)
        self.out = torch.nn.Linear(width, VOCAB)
        self.register_buffer("latents", torch.zeros(BATCH, 1, LENGTH, rank))
        self.register_buffer("rotary", torch.zeros(BATCH, 1, LENGTH, rope))

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        rows, tokens = input_ids.shape
        x = self.embed(input_ids)
        q = self.q(x).view(rows, tokens, self.heads, -1).transpose(1, 2)
        latent, rotary = self.down(x).split([self.latents.shape[-1], self.rope], dim=-1)
        self.latents.index_copy_(2, cache_position, latent[:, None])
        self.rotary.index_copy_(2, cache_position, torch.sin(rotary + position_ids[..., None])[:, None])
        up = self.up(self.latents).view(rows, LENGTH, self.heads, -1).transpose(1, 2)
        k_nope, values = up.split([self.nope, self.dim], dim=-1)
        keys = k_nope.new_empty(rows, self.heads, LENGTH, self.nope + self.rope)
        keys[..., : self.nope].copy_(k_nope)
        keys[..., self.nope :].copy_(self.rotary.expand(-1, self.heads, -1, -1))
        allowed = (torch.arange(LENGTH)[None, :] <= cache_position[:, None])[None, None]
        allowed = allowed & attention_mask[:, None, None, :].bool()
        y = torch.nn.functional.scaled_dot_product_attention(
            q, keys, values, attn_mask=allowed if self.masked else None
        )
        return self.out(y.transpose(1, 2).reshape(rows, tokens, -1)) * 4


def _captured(model, runtime):
    partitions = runtime != "cpu"
    backends = (runtime, "cpu") if partitions else ("cpu",)
    return opcore.graph.capture_lm(model, backends=backends, measure=False, prefill_partitions=partitions)


def _windowed(plan, count=1) -> bool:
    said = f"attention window: {count} attention{'s' * (count != 1)} reading the cache through other ops"
    return any(said in note for note in plan.notes)


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


def _generates_through_the_windows_as_transformers(model):
    """A transformers model of 2 attentions (vocabulary 300), captured at 96 slots: both read the window
    in each phase, and a left-padded batch of 2 generates ``model.generate``'s 60 greedy tokens."""
    lm = opcore.graph.capture_lm(model, max_length=96, batch_size=2, measure=False)
    for plan in (lm.decode_plan, lm.prefill_plan):
        assert _windowed(plan, 2), plan.notes
    ids = torch.randint(3, 300, (2, 21), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :4] = ids[1, :4] = 0
    options = dict(attention_mask=mask, max_new_tokens=60, pad_token_id=0, eos_token_id=None)
    want = model.generate(ids, do_sample=False, min_new_tokens=60, **options)
    assert torch.equal(lm.generate(ids, **options), want)  # windows of 32, 64 and 96


@pytest.mark.parametrize("family", FAMILIES)
def test_eager_attention_families_generate_through_the_windows_as_transformers(family):
    transformers = pytest.importorskip("transformers", reason="the families are transformers models")
    torch.manual_seed(0)
    model = FAMILIES[family](transformers).eval()
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8)  # greedy choices well apart
    _generates_through_the_windows_as_transformers(model)


@pytest.mark.parametrize("runtime", [*RUNTIMES, "cpu"])
def test_a_latent_cache_is_projected_up_at_the_window_alone(runtime):
    torch.manual_seed(0)
    model = LatentDecoder().eval()
    lm = _captured(model, runtime)
    for plan in (lm.decode_plan, lm.prefill_plan):
        assert _windowed(plan), plan.notes
        # the keys' buffer is not made: its pieces are read where they are made (a cache-sized zeros before)
        assert not any(node.op == "zeros" for node in plan.graph.nodes), [n.op for n in plan.graph.nodes]
        up = _weight(plan, "up")
        ups = [node for node in plan.graph.nodes if node.op == "linear" and node.args[1] == up]
        assert ups and all(plan.graph.values[n.outputs[0]].dims[2] == WINDOW for n in ups), ups
    ids = torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5))
    _steps_match_eager(lm, model, ids, 70)  # windows of 32, 64 and 80


def _weight(plan, name):
    """The graph's reference to the module's ``name`` weight (the latent's up-projection)."""
    found = [ref for ref in plan.graph.constants if ref.endswith(f"{name}_weight")]
    assert len(found) == 1, list(plan.graph.constants)
    return ValueRef(found[0])


def test_a_latent_attention_without_a_mask_reads_every_slot():
    torch.manual_seed(0)
    model = LatentDecoder(masked=False).eval()
    lm = _captured(model, RUNTIMES[0] if RUNTIMES else "cpu")
    assert not _windowed(lm.decode_plan) and not _windowed(lm.prefill_plan), lm.decode_plan.notes
    ids = torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5))
    _steps_match_eager(lm, model, ids, 24)


def test_deepseek_v2s_latent_attention_generates_through_the_windows_as_transformers():
    transformers = pytest.importorskip("transformers", reason="DeepSeek-V2 is a transformers model")
    torch.manual_seed(0)
    config = transformers.DeepseekV2Config(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16,
        v_head_dim=16, first_k_dense_replace=2, max_position_embeddings=256, pad_token_id=0,
    )  # fmt: skip
    model = transformers.DeepseekV2ForCausalLM(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8)  # greedy choices well apart
    _generates_through_the_windows_as_transformers(model)


def test_a_quantized_latent_up_projection_reads_the_window_too():
    # capture_lm(weights="int8"): the up-projection is a linear_wq, over the window's slots as well;
    # the step at its window gives the logits it gives reading every slot
    torch.manual_seed(0)
    model = LatentDecoder().eval()
    lm = opcore.graph.capture_lm(model, measure=False, weights="int8")
    assert _windowed(lm.decode_plan), lm.decode_plan.notes
    assert any(node.op == "linear_wq" for node in lm.decode_plan.graph.nodes)
    session = lm.session()
    logits = session.prefill(torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5)))
    for _ in range(40):
        logits = session.decode(logits.argmax(-1))
    given = [logits.argmax(-1)[:, None], session.positions[:, None], session.slot, session.mask]
    with torch.no_grad():
        runs = [lm.decode_plan.program.run([*given, lm.window_slots[:w], *session.state])[0] for w in (64, LENGTH)]
    assert (runs[0] - runs[1]).abs().max().item() <= 1e-5
