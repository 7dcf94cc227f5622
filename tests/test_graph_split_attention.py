"""opcore.graph.split_attention: a decode step's attention over the just-written cache, split into the
cache as it was and the new row, so that the step is one graph-runtime partition.

Decoders following the capture_lm protocol (opcore.graph.decoder) with the attention's variants a
model may use — grouped heads, a bool, float or no mask, per-head masks — are captured on each graph
runtime and their logits compared with the module run eagerly, step by step; the variants the split
must not take keep their attention.
"""

from __future__ import annotations

import re

import pytest
import torch

import opcore.graph
from opcore.graph.partition import compilers

RUNTIMES = [name for name in ("onnxruntime", "openvino") if name in compilers()]
BATCH, LENGTH, VOCAB = 2, 24, 50


class SdpaDecoder(torch.nn.Module):
    """q/k/v projections, the cache written at cache_position (index_copy_), one attention."""

    def __init__(
        self, heads=4, kv_heads=2, dim=8, mask="bool", causal=False, reread=False, head_mask=False, length=LENGTH
    ):
        super().__init__()
        self.batch_size, self.max_length = BATCH, length
        self.heads, self.kv_heads, self.dim = heads, kv_heads, dim
        self.mask, self.causal, self.reread, self.head_mask = mask, causal, reread, head_mask
        width = heads * dim
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.q = torch.nn.Linear(width, width)
        self.kv = torch.nn.Linear(width, 2 * kv_heads * dim)
        self.out = torch.nn.Linear(width, VOCAB)
        self.register_buffer("keys", torch.zeros(BATCH, kv_heads, length, dim))
        self.register_buffer("values", torch.zeros(BATCH, kv_heads, length, dim))

    def project(self, input_ids):
        """The tokens' query, key and value, heads second."""
        rows, length = input_ids.shape
        x = self.embed(input_ids)
        q = self.q(x).view(rows, length, self.heads, self.dim).transpose(1, 2)
        k, v = self.kv(x).view(rows, length, 2 * self.kv_heads, self.dim).transpose(1, 2).chunk(2, 1)
        return q, k, v

    def logits(self, y):
        """The attention's output (rows, heads, length, dim) as scaled logits."""
        rows, _, length, _ = y.shape
        return self.out(y.transpose(1, 2).reshape(rows, length, -1)) * 4

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.project(input_ids)
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)
        slots = torch.arange(self.max_length)
        allowed = (slots[None, :] <= cache_position[:, None])[None, None] & attention_mask[:, None, None, :].bool()
        if self.head_mask:  # one mask per query head: head h also hides the slots before h
            allowed = allowed & (slots >= torch.arange(self.heads)[:, None])[None, :, None, :]
        mask = {"bool": allowed, "float": torch.where(allowed, 0.0, torch.finfo(torch.float32).min), "none": None}
        keys = self.keys * 1.0 if self.reread else self.keys
        y = torch.nn.functional.scaled_dot_product_attention(
            q, keys, self.values, attn_mask=mask[self.mask], is_causal=self.causal,
            enable_gqa=self.heads != self.kv_heads,
        )  # fmt: skip
        return self.logits(y)


def _eager_steps(model, ids, steps):
    """The module's logits for the prompt's last row and each greedy step after it, run eagerly."""
    rows, length = ids.shape
    mask = torch.zeros(rows, model.max_length, dtype=torch.long)
    mask[:, :length] = 1
    for cache in model.buffers():  # every cache empty, as a new session's
        cache.zero_()
    with torch.no_grad():
        logits = [model(ids, torch.arange(length).expand(rows, -1), torch.arange(length), mask)[:, -1]]
        for at in range(length, length + steps):
            mask[:, at] = 1
            token = logits[-1].argmax(-1)[:, None]
            logits.append(model(token, torch.full((rows, 1), at), torch.tensor([at]), mask)[:, -1])
    return logits


def _steps_match_eager(lm, model, ids, steps):
    """A session's prefill and ``steps`` decode steps give the eager module's logits (1e-4); the session."""
    want = _eager_steps(model, ids, steps)
    session = lm.session()
    got = [session.prefill(ids)] + [session.decode(w.argmax(-1)) for w in want[:-1]]
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g - w).abs().max().item() <= 1e-4, f"step {i}"
    return session


def _notes(lm, rewrite="split_attention") -> str:
    return " ".join(note for note in lm.decode_plan.notes if rewrite in note)


VARIANTS = {
    "grouped, bool mask": dict(),
    "heads equal, float mask": dict(kv_heads=4, mask="float"),
    "one key head, no mask": dict(kv_heads=1, mask="none"),
    "a mask per head": dict(head_mask=True),
}


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_split_step_is_one_partition_and_matches_eager(variant, runtime):
    torch.manual_seed(0)
    model = SdpaDecoder(**VARIANTS[variant]).eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert "split_attention: 1 match" in _notes(lm)
    summary = lm.decode_plan.summary()
    assert summary.startswith(f"{runtime} ") and "in 1 partition" in summary, summary
    ids = torch.randint(0, VOCAB, (BATCH, 5), generator=torch.Generator().manual_seed(1))
    _steps_match_eager(lm, model, ids, 8)


def _written_where_eager_wrote(before, state, model, slots):
    """The step wrote its keys and values at ``slots``, as the eager module computed them (a graph
    runtime's projection rounds as its own GEMM does: equal to float32's precision, not bit for bit on
    every CPU), and left every other slot as it was."""
    for old, new, eager in zip(before, state, (model.keys, model.values), strict=True):
        torch.testing.assert_close(new[:, :, slots], eager[:, :, slots], rtol=1e-5, atol=1e-6)
        assert not torch.equal(new[:, :, slots], old[:, :, slots])
        others = [i for i in range(new.shape[2]) if i not in slots]
        assert torch.equal(new[:, :, others], old[:, :, others])


def _twice_on_a_random_state(plan, model, ids, positions, slots, window=None):
    """``plan`` run on a random state and again on the state it wrote (as if its writes had run before
    its reads): both times the module's logits on the random state (1e-4), and the writes where the
    module wrote. ``window``: the slots a windowed plan reads."""
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    state = [torch.randn(BATCH, 4, LENGTH, 8), torch.randn(BATCH, 4, LENGTH, 8)]
    at = torch.tensor(slots)
    with torch.no_grad():
        model.keys.copy_(state[0])
        model.values.copy_(state[1])
        want = model(ids, positions, at, mask)
    before = [tensor.clone() for tensor in state]
    given = [ids, positions, at, mask, *([] if window is None else [window])]
    first = plan.program.run([*given, *state])[0]
    assert (first - want).abs().max().item() <= 1e-4
    _written_where_eager_wrote(before, state, model, slots)
    again = plan.program.run([*given, *state])[0]  # the slots written already
    assert (again - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_row_every_key_masks_gives_zeros_as_torch(runtime):
    torch.manual_seed(0)
    model = SdpaDecoder(kv_heads=4).eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert "split_attention: 1 match" in _notes(lm)
    ids = torch.tensor([[7], [9]])
    positions, slot = torch.tensor([[3], [3]]), torch.tensor([3])
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    mask[1] = 0  # the second row sees nothing, not even its own new key
    state = [torch.randn(BATCH, 4, LENGTH, 8), torch.randn(BATCH, 4, LENGTH, 8)]
    with torch.no_grad():
        model.keys.copy_(state[0])
        model.values.copy_(state[1])
        want = model(ids, positions, slot, mask)
    before = [tensor.clone() for tensor in state]
    got = lm._decode(ids, positions, slot, mask, state, 3)
    assert not got.isnan().any()
    assert (got - want).abs().max().item() <= 1e-4
    _written_where_eager_wrote(before, state, model, [3])


@pytest.mark.parametrize(
    "variant",
    [dict(causal=True, mask="none"), dict(reread=True)],
    ids=["is_causal", "cache read twice"],
)
def test_attention_the_split_does_not_cover_stays_whole(variant):
    torch.manual_seed(0)
    model = SdpaDecoder(**variant).eval()
    lm = opcore.graph.capture_lm(model, measure=False)
    assert _notes(lm) == ""
    assert any(d.op == "scaled_dot_product_attention" for d in lm.decode_plan.decisions)
    ids = torch.randint(0, VOCAB, (BATCH, 4), generator=torch.Generator().manual_seed(2))
    _steps_match_eager(lm, model, ids, 3)


class TwoCaches(SdpaDecoder):
    """A second attention over its own, shorter cache, written at another position (cache_position
    modulo its length, a ring) with its own mask: two cache lengths and two written slots in one step."""

    RING = 16

    def __init__(self):
        super().__init__(kv_heads=4)
        self.register_buffer("ring_keys", torch.zeros(BATCH, 4, self.RING, 8))
        self.register_buffer("ring_values", torch.zeros(BATCH, 4, self.RING, 8))

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.project(input_ids)
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)
        at = cache_position % self.RING
        self.ring_keys.index_copy_(2, at, k * 0.5)
        self.ring_values.index_copy_(2, at, v)
        seen = (torch.arange(self.max_length)[None, :] <= cache_position[:, None])[None, None]
        ring_seen = (torch.arange(self.RING)[None, :] <= at[:, None])[None, None]
        mask = seen & attention_mask[:, None, None, :].bool()
        attend = torch.nn.functional.scaled_dot_product_attention
        y = attend(q, self.keys, self.values, attn_mask=mask) + attend(
            q, self.ring_keys, self.ring_values, attn_mask=ring_seen
        )
        return self.logits(y)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_caches_of_two_lengths_written_at_two_slots_split_alike(runtime):
    torch.manual_seed(0)
    model = TwoCaches().eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert "split_attention: 2 matches" in _notes(lm)
    assert "in 1 partition" in lm.decode_plan.summary()
    ids = torch.randint(0, VOCAB, (BATCH, 5), generator=torch.Generator().manual_seed(3))
    _steps_match_eager(lm, model, ids, 8)


def test_the_torch_route_keeps_the_fused_attention():
    # node by node (no graph runtime to make the step one partition) one SDPA beats the split's ~20 nodes
    torch.manual_seed(0)
    lm = opcore.graph.capture_lm(SdpaDecoder().eval(), backends=("cpu",), measure=False)
    assert _notes(lm) == ""
    assert any(d.op == "scaled_dot_product_attention" for d in lm.decode_plan.decisions)


class MatmulDecoder(SdpaDecoder):
    """Attention written as the model's own matmuls (as Gemma2's soft-capped, BLOOM's and CodeGen's
    are): the key heads repeated by expand + reshape, scores soft-capped, a bool mask by masked_fill."""

    def repeat(self, t):
        """A cache's key heads repeated for each query head of their group (transformers' repeat_kv)."""
        rows, group, length = t.shape[0], self.heads // self.kv_heads, self.max_length
        return t[:, :, None].expand(rows, self.kv_heads, group, length, self.dim).reshape(rows, self.heads, length, -1)

    def capped_scores(self, q):
        """The query's scores over every slot, soft-capped (Gemma 2's form)."""
        scores = torch.matmul(q, self.repeat(self.keys).transpose(2, 3)) / self.dim**0.5
        return torch.tanh(scores / 5.0) * 5.0

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.project(input_ids)
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)
        scores = self.capped_scores(q)
        allowed = (torch.arange(self.max_length)[None, :] <= cache_position[:, None])[None, None]
        allowed = allowed & attention_mask[:, None, None, :].bool()
        weights = torch.softmax(scores.masked_fill(~allowed, torch.finfo(torch.float32).min), dim=-1)
        y = torch.matmul(weights, self.repeat(self.values))
        return self.logits(y)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_cache_read_by_matmuls_is_read_as_a_value_and_the_step_is_one_partition(runtime):
    torch.manual_seed(0)
    model = MatmulDecoder().eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert _notes(lm) == "" and "read_written: 2 matches" in _notes(lm, "read_written"), lm.decode_plan.notes
    summary = lm.decode_plan.summary()
    assert summary.startswith(f"{runtime} ") and "in 1 partition" in summary, summary
    ids = torch.randint(0, VOCAB, (BATCH, 5), generator=torch.Generator().manual_seed(4))
    session = _steps_match_eager(lm, model, ids, 8)
    # the state holds what eager's buffers hold: each step's row written in place, once
    assert torch.allclose(session.state[0], model.keys, atol=1e-5)
    assert torch.allclose(session.state[1], model.values, atol=1e-5)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_reading_the_written_cache_does_not_depend_on_when_the_write_ran(runtime):
    # the step run on a state whose written slot already holds the new row (as if the write had run
    # first) and on one where it holds anything else gives the same logits
    torch.manual_seed(0)
    model = MatmulDecoder(kv_heads=4).eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert "decode_window" in lm.decode_plan.graph.inputs  # its matmuls read the window (opcore.graph.score_window)
    ids, positions = torch.tensor([[7], [9]]), torch.tensor([[3], [3]])
    _twice_on_a_random_state(lm.decode_plan, model, ids, positions, [3], torch.arange(4))


class MatmulThenSdpa(SdpaDecoder):
    """A layer of matmul attention over its own cache before a layer of SDPA: the step reads one
    written cache as a value (read_written) and splits the other's attention, in that order."""

    def __init__(self):
        super().__init__(kv_heads=4)
        self.register_buffer("keys2", torch.zeros(BATCH, 4, LENGTH, 8))
        self.register_buffer("values2", torch.zeros(BATCH, 4, LENGTH, 8))

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.project(input_ids)
        allowed = (torch.arange(LENGTH)[None, :] <= cache_position[:, None])[None, None]
        allowed = allowed & attention_mask[:, None, None, :].bool()
        self.keys2.index_copy_(2, cache_position, k * 0.5)
        self.values2.index_copy_(2, cache_position, v)
        scores = torch.matmul(q, self.keys2.transpose(2, 3)).masked_fill(~allowed, torch.finfo(torch.float32).min)
        h = torch.matmul(torch.softmax(scores, dim=-1), self.values2)
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)
        y = torch.nn.functional.scaled_dot_product_attention(h, self.keys, self.values, attn_mask=allowed)
        return self.logits(y)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_read_as_a_value_before_a_split_attention_is_one_partition(runtime):
    torch.manual_seed(0)
    model = MatmulThenSdpa().eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert "split_attention: 1 match" in _notes(lm) and "read_written: 2 matches" in _notes(lm, "read_written"), (
        lm.decode_plan.notes
    )
    assert "in 1 partition" in lm.decode_plan.summary(), lm.decode_plan.summary()
    ids = torch.randint(0, VOCAB, (BATCH, 5), generator=torch.Generator().manual_seed(5))
    _steps_match_eager(lm, model, ids, 6)


@pytest.mark.parametrize("variant", ["grouped, bool mask", "one key head, no mask"])
def test_a_bfloat16_attention_is_split_where_a_runtime_computes_bfloat16(variant):
    """bfloat16 is split where a partition compiler computes it in float32 (OpenVINO's bfloat16_as):
    the cache read in bfloat16, the step one partition, each step's logits within bfloat16's rounding
    of eager's; a runtime without bfloat16_as (ONNX Runtime) gets no bfloat16 split."""
    if "openvino" not in RUNTIMES:
        pytest.skip("the openvino partition compiler is not installed")
    torch.manual_seed(0)
    model = SdpaDecoder(**VARIANTS[variant]).eval().to(torch.bfloat16)
    lm = opcore.graph.capture_lm(model, backends=("openvino", "cpu"), measure=False)
    assert "split_attention: 1 match" in _notes(lm)
    summary = lm.decode_plan.summary()
    assert summary.startswith("openvino ") and "in 1 partition" in summary, summary
    ids = torch.randint(0, VOCAB, (BATCH, 5), generator=torch.Generator().manual_seed(1))
    want = _eager_steps(model, ids, 8)
    session = lm.session()
    got = [session.prefill(ids)] + [session.decode(w.argmax(-1)) for w in want[:-1]]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == torch.bfloat16
        assert (g.float() - w.float()).abs().max().item() <= 2**-6 * w.float().abs().max().item(), f"step {i}"
    if "onnxruntime" in RUNTIMES:
        plain = opcore.graph.capture_lm(model, backends=("onnxruntime", "cpu"), measure=False)
        assert _notes(plain) == ""


def _prefill_notes(lm) -> str:
    return " ".join(note for note in lm.prefill_plan.notes if "read_written" in note)


def _all_in_one_partition(plan, runtime) -> None:
    """Every node of ``plan`` the runtimes run is in one partition of ``runtime``."""
    summary = plan.summary()
    found = re.match(rf"{runtime} (\d+)/(\d+) nodes in 1 partition;", summary)
    assert found is not None and found[1] == found[2], summary


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("decoder", [SdpaDecoder, MatmulDecoder])
def test_a_prompt_reads_its_written_cache_as_a_value_and_is_one_partition(decoder, runtime):
    # a prompt of any length writes its rows (a dynamic number) and its attention reads the written
    # cache: the readers read it as a value (the slots' rows gathered), so no partition waits for a
    # write; once 31 partitions at the 135M bench shape, one a layer
    torch.manual_seed(0)
    model = decoder(kv_heads=4).eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False, prefill_partitions=True)
    assert "read_written: 2 matches" in _prefill_notes(lm), lm.prefill_plan.notes
    _all_in_one_partition(lm.prefill_plan, runtime)
    for length in (2, 5, 13):
        ids = torch.randint(0, VOCAB, (BATCH, length), generator=torch.Generator().manual_seed(length))
        _steps_match_eager(lm, model, ids, 3)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "slots", [[3, 4, 5, 6], [9, 2, 17], [0, 23]], ids=["after a prompt", "out of order", "first and last"]
)
@pytest.mark.parametrize("decoder", [MatmulDecoder, SdpaDecoder])
def test_a_prompt_s_rows_are_read_where_they_are_written_at_any_slots(decoder, slots, runtime):
    # the slots a prompt writes need not start at 0 nor be in order: each slot reads the row written
    # there, every other slot the cache as it was, whether the writes ran before the read or not; the
    # attention reads a window (the slots up to the last written: the fused one's, and the matmuls'
    # through opcore.graph.score_window), so that value is made at the window's slots alone
    torch.manual_seed(0)
    model = decoder(kv_heads=4).eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False, prefill_partitions=True)
    _all_in_one_partition(lm.prefill_plan, runtime)
    assert "2 at the window's slots alone" in _prefill_notes(lm), lm.prefill_plan.notes
    n = len(slots)
    ids = torch.randint(0, VOCAB, (BATCH, n), generator=torch.Generator().manual_seed(6))
    positions = torch.tensor(slots).expand(BATCH, n).contiguous()
    _twice_on_a_random_state(lm.prefill_plan, model, ids, positions, slots, torch.arange(max(slots) + 1))


class IndexerDecoder(SdpaDecoder):
    """Besides its attention, keys of one head cached as (batch, slots, dim) and written along dim 1
    (a sparse attention's indexer keys, DeepSeek-V3.2's), read by a matmul of its own."""

    def __init__(self):
        super().__init__(kv_heads=4)
        self.register_buffer("indexed", torch.zeros(BATCH, LENGTH, 8))

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.project(input_ids)
        self.indexed.index_copy_(1, cache_position, k[:, 0] * 0.5)
        self.keys.index_copy_(2, cache_position, k)
        self.values.index_copy_(2, cache_position, v)
        allowed = (torch.arange(LENGTH)[None, :] <= cache_position[:, None])[None, None]
        allowed = allowed & attention_mask[:, None, None, :].bool()
        bias = torch.matmul(q[:, 0], self.indexed.transpose(1, 2))[:, None]  # (rows, 1, length, slots)
        scores = torch.matmul(q, self.keys.transpose(2, 3)) / self.dim**0.5 + torch.tanh(bias)
        weights = torch.softmax(scores.masked_fill(~allowed, torch.finfo(torch.float32).min), dim=-1)
        return self.logits(torch.matmul(weights, self.values))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_cache_of_another_rank_written_along_another_dim_is_read_as_a_value(runtime):
    # a 3-D cache written along dim 1: read as a value in the prompt's step and in the decode step alike,
    # both one partition
    torch.manual_seed(0)
    model = IndexerDecoder().eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False, prefill_partitions=True)
    assert "read_written: 3 matches" in _prefill_notes(lm), lm.prefill_plan.notes
    assert "read_written: 3 matches" in _notes(lm, "read_written"), lm.decode_plan.notes
    _all_in_one_partition(lm.prefill_plan, runtime)
    _all_in_one_partition(lm.decode_plan, runtime)
    ids = torch.randint(0, VOCAB, (BATCH, 6), generator=torch.Generator().manual_seed(7))
    _steps_match_eager(lm, model, ids, 6)


def test_the_prompt_s_torch_route_writes_in_place_and_reads_the_cache_after():
    # the written cache as a value costs a gather and a select the size of the cache per write: only
    # the candidates with partitions take it; the torch route keeps the model's own write and read
    torch.manual_seed(0)
    model = MatmulDecoder(kv_heads=4).eval()
    route = opcore.graph.capture_lm(model, measure=False, prefill_partitions=False)
    assert _prefill_notes(route) == "" and not route.prefill_plan.partitions, route.prefill_plan.notes
    ids = torch.randint(0, VOCAB, (BATCH, 5), generator=torch.Generator().manual_seed(8))
    _steps_match_eager(route, model, ids, 3)
    if RUNTIMES:
        planned = opcore.graph.capture_lm(model, measure=False, prefill_partitions=True)
        assert "read_written: 2 matches" in _prefill_notes(planned), planned.prefill_plan.notes


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("mask", ["bool", "float"])
def test_the_windowed_step_reads_the_slots_up_to_its_position_and_gives_every_slots_logits(runtime, mask):
    # 80 slots: the window grows 32 -> 64 -> 80 as the steps pass slots 32 and 64; the slots after the
    # position hold another conversation's keys (a crop leaves them), which the mask hides either way
    from opcore.graph.split_attention import WINDOW, WINDOW_STEP, window_length

    torch.manual_seed(0)
    model = SdpaDecoder(mask=mask, length=80).eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert WINDOW in lm.decode_plan.graph.inputs and lm.window_slots is not None
    assert "decode window" in " ".join(lm.decode_plan.notes)
    assert "in 1 partition" in lm.decode_plan.summary()
    assert [window_length(at, 80) for at in (0, 31, 32, 63, 64, 79)] == [32, 32, 64, 64, 80, 80]
    ids = torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5))
    session = _steps_match_eager(lm, model, ids, 70)  # to slot 72: windows of 32, 64 and 80
    # a step at slot 40 given W = 64 (its window), 41 and 80 (every slot): one set of logits
    session.crop(40)
    token = torch.tensor([[3], [4]])
    session.mask[:, 40] = 1
    session.slot.fill_(40)
    program = lm.decode_plan.program
    given = [token, session.positions[:, None], session.slot, session.mask]
    with torch.no_grad():
        runs = [program.run([*given, lm.window_slots[:w], *session.state])[0] for w in (64, 41, 80)]
    assert WINDOW_STEP == 32
    for other in runs[1:]:
        assert (other - runs[0]).abs().max().item() <= 1e-5


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_attention_without_a_mask_reads_every_slot(runtime):
    # no mask: the empty slots' keys take part (as eager's), so no window may leave them out
    from opcore.graph.split_attention import WINDOW

    torch.manual_seed(0)
    model = SdpaDecoder(mask="none", length=80).eval()
    lm = opcore.graph.capture_lm(model, backends=(runtime, "cpu"), measure=False)
    assert "split_attention: 1 match" in _notes(lm)
    assert WINDOW not in lm.decode_plan.graph.inputs and lm.window_slots is None
    ids = torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5))
    _steps_match_eager(lm, model, ids, 4)


def test_the_torch_routes_fused_attention_reads_the_window_too():
    # no graph runtime: the decode step keeps torch's one attention, given the window's keys, values
    # and mask (opcore.graph.split_attention.window_prompt); without a mask nothing is windowed
    from opcore.graph.split_attention import WINDOW

    torch.manual_seed(0)
    model = SdpaDecoder(length=80).eval()
    lm = opcore.graph.capture_lm(model, backends=("cpu",), measure=False)
    assert WINDOW in lm.decode_plan.graph.inputs and WINDOW in lm.prefill_plan.graph.inputs
    assert "attention window: 1 attention" in " ".join(lm.decode_plan.notes)
    assert any(d.op == "scaled_dot_product_attention" for d in lm.decode_plan.decisions)
    ids = torch.randint(0, VOCAB, (BATCH, 3), generator=torch.Generator().manual_seed(5))
    _steps_match_eager(lm, model, ids, 40)  # windows of 32 and 64
    unmasked = opcore.graph.capture_lm(SdpaDecoder(mask="none", length=80).eval(), backends=("cpu",), measure=False)
    assert unmasked.window_slots is None


@pytest.mark.parametrize("runtime", [*RUNTIMES, "cpu"])
def test_prompts_read_the_window_up_to_their_last_slot_and_give_the_modules_logits(runtime):
    # 80 slots: a prompt of 40 tokens (a window of 64 slots), then one of 30 written after it (80),
    # then, cropped back to 10, one of 7 (32) over slots that still hold the first prompt's keys
    torch.manual_seed(0)
    model = SdpaDecoder(length=80).eval()
    partitions = runtime != "cpu"
    lm = opcore.graph.capture_lm(
        model, backends=(runtime, "cpu") if partitions else ("cpu",), measure=False, prefill_partitions=partitions
    )
    assert "attention window: 1 attention" in " ".join(lm.prefill_plan.notes)
    # on partitions, the written cache is made as a value at the window's slots alone
    assert ("2 at the window's slots alone" in _prefill_notes(lm)) == partitions, lm.prefill_plan.notes
    generator = torch.Generator().manual_seed(6)
    session = lm.session()
    mask = torch.zeros(BATCH, 80, dtype=torch.long)
    for cut, length in ((None, 40), (None, 30), (10, 7)):
        if cut is not None:
            session.crop(cut)
            mask[:, cut:] = 0
        ids = torch.randint(0, VOCAB, (BATCH, length), generator=generator)
        start = session.length
        mask[:, start : start + length] = 1
        slots = torch.arange(start, start + length)
        got = session.prefill(ids)
        with torch.no_grad():
            want = _eager_prompt(model, ids, slots, mask, session)
        assert (got - want).abs().max().item() <= 1e-4, (cut, length)


def _eager_prompt(model, ids, slots, mask, session):
    """The module's logits for the prompt's last row, run eagerly on a copy of the session's cache as
    it was before the prompt (the rows the prompt wrote are written again)."""
    saved = [model.keys.clone(), model.values.clone()]
    try:
        model.keys.copy_(session.state[0])
        model.values.copy_(session.state[1])
        positions = slots.expand(ids.shape[0], -1)
        return model(ids, positions, slots, mask)[:, -1]
    finally:
        model.keys.copy_(saved[0])
        model.values.copy_(saved[1])
