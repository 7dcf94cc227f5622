"""generate(num_beams=...): beam search and beam sampling against transformers' generate.

The tokens are ``model.generate``'s on a left-padded batch, with an eos the beams reach (finished
hypotheses, their length penalty, the fill after them), every early_stopping value, several returned
sequences and processors that read the beams' tokens (which the cache reorder must keep right: a
beam that moves takes another row's past). Models as in test_graph_generation (lm_head scaled).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError, ShapeError

transformers = pytest.importorskip("transformers", reason="compared with transformers' beam search")

from test_graph_generation import TinyDecoder, build, left_padded_rows, prompt  # noqa: E402


@pytest.fixture(scope="module")
def beams() -> tuple[Any, opcore.graph.LanguageModel, torch.Tensor, torch.Tensor, list[int]]:
    """The llama, captured for 8 rows (2 prompts x up to 4 beams), a left-padded batch and tokens its
    4-beam search makes (eos ids the beams reach)."""
    model: Any = build("llama")
    lm = opcore.graph.capture_lm(model, max_length=48, batch_size=8, measure=False)
    ids, mask, _, _ = left_padded_rows()
    made = model.generate(ids, attention_mask=mask, max_new_tokens=16, num_beams=4, num_return_sequences=4,
                          pad_token_id=0, eos_token_id=None)  # fmt: skip
    reached = sorted({int(token) for token in made[:, ids.shape[1] + 1 : ids.shape[1] + 5].flatten()})
    return model, lm, ids, mask, reached


_OPTIONS: dict[str, dict[str, Any]] = {
    "four_beams": dict(num_beams=4),
    "three_returned": dict(num_beams=4, num_return_sequences=3),
    "two_beams_penalized": dict(num_beams=2, repetition_penalty=1.4, no_repeat_ngram_size=2),
    "early_stopping": dict(num_beams=3, early_stopping=True),
    "never_longer": dict(num_beams=3, early_stopping="never", length_penalty=2.0),
    "shorter_favoured": dict(num_beams=4, length_penalty=-1.0, num_return_sequences=2),
}


@pytest.mark.parametrize("name", sorted(_OPTIONS))
@pytest.mark.parametrize("pad", [0, 1])
def test_beam_search_equals_transformers_generate(beams, name, pad):
    """With no eos and with eos ids the search reaches (rows finished early, filled after:
    transformers' fill is the first eos id where the pad id is 0)."""
    model, lm, ids, mask, _ = beams
    options = dict(_OPTIONS[name], max_new_tokens=16, pad_token_id=pad)
    plain = model.generate(ids, attention_mask=mask, eos_token_id=None, **options)
    assert torch.equal(lm.generate(ids, mask, eos_token_id=[], **options), plain)
    new = plain[:, ids.shape[1] :]
    reached = sorted({int(token) for token in new[:, 1:5].flatten()})
    changed = 0
    for eos in (reached[:1], reached[1:3], reached[-1:]):
        want = model.generate(ids, attention_mask=mask, eos_token_id=eos, **options)
        got = lm.generate(ids, mask, eos_token_id=eos, **options)
        assert got.shape == want.shape and torch.equal(got, want), f"{name} eos {eos}:\n{got}\n{want}"
        changed += int(not torch.equal(want, plain))
    assert changed  # an eos changed the search: finished hypotheses took part


def test_beam_sampling_draws_what_transformers_draws_from_the_same_seed(beams):
    """do_sample with beams: the warpers keep 1 + the eos ids (transformers' min_tokens_to_keep), the
    continuations drawn from the beams' summed scores."""
    model, lm, ids, mask, reached = beams
    for warpers in (dict(temperature=2.0), dict(top_k=3, top_p=0.8, eos_token_id=reached[:1]), dict(top_k=1)):
        options = dict(warpers, max_new_tokens=12, num_beams=3, do_sample=True, pad_token_id=0)
        options.setdefault("eos_token_id", None)
        torch.manual_seed(21)
        want = model.generate(ids, attention_mask=mask, **options)
        torch.manual_seed(21)
        got = lm.generate(ids, mask, **dict(options, eos_token_id=options["eos_token_id"] or []))
        assert torch.equal(got, want), options


def test_the_generation_config_s_beams_are_the_defaults_and_kept_in_saved_files(tmp_path):
    """num_beams, length_penalty and early_stopping of the model's generation config are generate's
    defaults (no longer an option 'not applied'), a saved model keeps them; stream refuses beams with
    the fix (num_beams=1 streams)."""
    model = build("llama")
    model.generation_config.num_beams, model.generation_config.length_penalty = 3, 0.5
    model.generation_config.early_stopping = "never"
    lm = opcore.graph.capture_lm(model, max_length=40, batch_size=3, measure=False)
    assert not lm.defaults.not_applied
    ids = prompt()
    want = model.generate(ids, max_new_tokens=10, pad_token_id=0, eos_token_id=None)
    assert torch.equal(lm.generate(ids, max_new_tokens=10, eos_token_id=[]), want)
    lm.save(tmp_path / "lm")
    again = opcore.graph.load(tmp_path / "lm")
    assert (again.defaults.num_beams, again.defaults.length_penalty, again.defaults.early_stopping) == (3, 0.5, "never")
    assert torch.equal(again.generate(ids, max_new_tokens=10, eos_token_id=[]), want)
    with pytest.raises(ArgumentError, match=r"num_beams.*generation_config.num_beams.*num_beams=1"):
        next(lm.stream(ids, max_new_tokens=4))
    greedy = model.generate(ids, max_new_tokens=4, num_beams=1, pad_token_id=0, eos_token_id=None)
    streamed = torch.stack(list(lm.stream(ids, max_new_tokens=4, num_beams=1, eos_token_id=[])), 1)
    assert torch.equal(streamed, greedy[:, ids.shape[1] :])


def test_beam_search_runs_on_a_session_of_its_own_and_leaves_it_empty(beams):
    """A session holding a conversation is refused (its beams would take the rows); after a search the
    session holds nothing (its rows held beams, not the sequence returned), and a stream on the
    default session beside it is untouched."""
    model, lm, ids, mask, _ = beams
    chat = lm.session()
    chat.prefill(ids.repeat(4, 1))
    with pytest.raises(ArgumentError, match=r"session.*holding 9 token\(s\).*reset\(\)"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=2, session=chat)
    chat.reset()
    lm.generate(ids, mask, max_new_tokens=4, num_beams=2, session=chat)
    assert chat.length == 0 and int(chat.mask.sum()) == 0
    rows = prompt(rows=8, length=9)  # no padding: transformers reads pad ids as padding without a mask
    tokens = lm.stream(rows, max_new_tokens=6, eos_token_id=[])
    first = [next(tokens)]
    searched = lm.generate(ids, mask, max_new_tokens=8, num_beams=4, eos_token_id=[], pad_token_id=0)
    rest = list(tokens)
    want = model.generate(rows, max_new_tokens=6, pad_token_id=0, eos_token_id=None)
    assert torch.equal(torch.stack(first + rest, 1), want[:, rows.shape[1] :])
    beam_want = model.generate(ids, attention_mask=mask, max_new_tokens=8, num_beams=4, pad_token_id=0,
                               eos_token_id=None)  # fmt: skip
    assert torch.equal(searched, beam_want)


def test_beam_search_s_bad_options_are_refused_before_any_work(beams):
    _, lm, ids, mask, _ = beams
    with pytest.raises(ShapeError, match=r"8 row\(s\).*capture_lm\(\.\.\., batch_size=10\)"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=5)
    with pytest.raises(ArgumentError, match=r"num_return_sequences.*from 1 to num_beams \(2\).*num_beams=3"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=2, num_return_sequences=3)
    with pytest.raises(ArgumentError, match=r"early_stopping.*True, False or \"never\".*'always'"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=2, early_stopping="always")
    with pytest.raises(ArgumentError, match=r"num_beams.*an int >= 1.*0"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=0)
    with pytest.raises(ArgumentError, match=r"streamer.*no streamer with beam search.*num_beams=1"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=2, streamer=lambda tokens: None)
    with pytest.raises(ArgumentError, match=r"length_penalty.*a float"):
        lm.generate(ids, mask, max_new_tokens=4, num_beams=2, length_penalty="long")


class SlotsFirstDecoder(TinyDecoder):
    """TinyDecoder with its cache laid out (max_length, batch, width): the protocol lets a module
    choose, and beam search's reorder moves rows of the first dim."""

    def __init__(self) -> None:
        super().__init__(batch_size=2)
        self.register_buffer("keys", torch.zeros(self.max_length, 2, 16))
        self.register_buffer("values", torch.zeros(self.max_length, 2, 16))

    def forward(self, input_ids, position_ids, cache_position, attention_mask):
        q, k, v = self.qkv(self.embed(input_ids)).chunk(3, -1)
        self.keys.index_copy_(0, cache_position, k.transpose(0, 1))
        self.values.index_copy_(0, cache_position, v.transpose(0, 1))
        slots = torch.arange(self.max_length)
        allowed = (slots[None, :] <= cache_position[:, None])[None] & attention_mask[:, None, :].bool()
        scores = (q @ self.keys.permute(1, 2, 0)).masked_fill(~allowed, float("-inf"))
        return self.head(torch.softmax(scores, -1) @ self.values.transpose(0, 1)) * 4


def test_a_cache_whose_first_dim_is_not_the_batch_is_refused_for_beams():
    lm = opcore.graph.capture_lm(SlotsFirstDecoder().eval(), measure=False)
    ids = torch.tensor([[3, 4, 5]])
    assert lm.generate(ids, max_new_tokens=3).shape == (1, 6)  # greedy runs
    with pytest.raises(ShapeError, match=r"num_beams.*first dim is the batch \(2\).*of shape \(24, 2, 16\)"):
        lm.generate(ids, max_new_tokens=3, num_beams=2)


def test_a_module_of_the_protocol_searches_with_beams_as_its_own_loop_would():
    """TinyDecoder (cache (batch, slots, width)) captured for 3 rows: 3 beams of one prompt equal a
    beam search written here over the module run whole each step (no cache reorder to get wrong)."""
    torch.manual_seed(0)
    module = TinyDecoder(batch_size=3).eval()
    lm = opcore.graph.capture_lm(module, measure=False)
    ids = torch.tensor([[3, 4, 5, 6]])
    got = lm.generate(ids, max_new_tokens=6, num_beams=3, eos_token_id=[], length_penalty=0.0)
    running = [(0.0, ids[0].tolist())]
    for _ in range(6):
        candidates = []
        for score, tokens in running:
            module.keys.zero_(), module.values.zero_()
            row = torch.tensor([tokens])
            n = row.shape[1]
            mask = torch.zeros(1, module.max_length, dtype=torch.long)
            mask[:, :n] = 1
            with torch.no_grad():
                logits = module(row.expand(3, -1), torch.arange(n).expand(3, -1), torch.arange(n), mask.expand(3, -1))
            log_probs = torch.log_softmax(logits[0, -1].float(), -1)
            candidates += [(score + float(p), [*tokens, i]) for i, p in enumerate(log_probs.tolist())]
        running = sorted(candidates, key=lambda c: -c[0])[:3]
    assert got[0].tolist() == running[0][1]


@pytest.mark.gpu
def test_beam_search_on_cuda_reorders_the_replayed_graph_s_cache():
    """On cuda each session's decode step replays as one CUDA graph over the session's buffers: the
    reorder writes those buffers in place, so the graph reads the moved beams' past."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    model: Any = build("llama").cuda()
    lm = opcore.graph.capture_lm(model, max_length=48, batch_size=8, device="cuda", measure=False)
    ids, mask, _, _ = left_padded_rows()
    ids, mask = ids.cuda(), mask.cuda()
    options = dict(max_new_tokens=16, num_beams=4, num_return_sequences=2, pad_token_id=0)
    want = model.generate(ids, attention_mask=mask, eos_token_id=None, **options)
    assert torch.equal(lm.generate(ids, mask, eos_token_id=[], **options), want)
    assert lm.default_session.decode_graph, lm.decode_plan.notes


def _random_options(rng: Any, reached: list[int]) -> dict[str, Any]:
    """One random combination of generate's options: greedy, sampling, beams or beam sampling, with
    any of the processors, warpers, lengths and eos ids (ids the search reaches)."""
    options: dict[str, Any] = dict(max_new_tokens=rng.randint(1, 14), pad_token_id=rng.choice([0, 1]))
    mode = rng.choice(["greedy", "sample", "beams", "beam_sample"])
    if "sample" in mode:
        options["do_sample"] = True
        warpers = [("temperature", rng.choice([0.7, 1.5, 3.0])), ("top_k", rng.choice([0, 5, 50])),
                   ("top_p", rng.choice([0.5, 0.9])), ("min_p", 0.05), ("typical_p", 0.8), ("epsilon_cutoff", 1e-3),
                   ("eta_cutoff", 1e-3), ("top_h", 0.7)]  # fmt: skip
        options.update((name, value) for name, value in warpers if rng.random() < 0.3)
    if mode in ("beams", "beam_sample"):
        options["num_beams"] = rng.choice([2, 3, 4])
        if rng.random() < 0.5:
            options["num_return_sequences"] = rng.randint(1, options["num_beams"])
        if rng.random() < 0.5:
            options["length_penalty"] = rng.choice([-1.0, 0.0, 0.5, 2.0])
        if rng.random() < 0.5:
            options["early_stopping"] = rng.choice([True, False, "never"])
    elif mode == "sample" and rng.random() < 0.3:
        options["num_return_sequences"] = rng.choice([2, 3, 4])
    options["eos_token_id"] = rng.choice([None, reached[:1], reached[1:3], reached[-2:]])
    processors = [("repetition_penalty", rng.choice([0.8, 1.3])), ("no_repeat_ngram_size", rng.choice([1, 2, 3])),
                  ("bad_words_ids", [[reached[0]], [reached[1], reached[2]]]),
                  ("sequence_bias", {(reached[2],): 3.0, (reached[0], reached[3]): -2.0}),
                  ("min_new_tokens", rng.randint(0, options["max_new_tokens"])),
                  ("exponential_decay_length_penalty", (2, 1.5))]  # fmt: skip
    options.update((name, value) for name, value in processors if rng.random() < 0.25)
    if not options["eos_token_id"]:
        options.pop("exponential_decay_length_penalty", None)  # transformers' needs an eos
    return options


@pytest.mark.parametrize("seed", range(3))
def test_random_combinations_of_options_equal_model_generate(beams, seed):
    """Options no test above combines: 20 random combinations a seed (one or two prompt rows), each
    the tokens model.generate makes, from the same torch seed where they sample."""
    import random
    import warnings

    model, lm, ids, mask, reached = beams
    reached = [*reached, 3, 4, 5, 6]
    rng = random.Random(seed)
    compared = 0
    while compared < 20:
        options = _random_options(rng, reached)
        rows, rows_mask = (ids, mask) if rng.random() < 0.7 else (ids[:1], mask[:1])
        copies = max(options.get("num_beams", 1), options.get("num_return_sequences", 1))
        if rows.shape[0] * copies > lm.batch_size:
            continue
        draw = rng.randint(0, 10**6)
        torch.manual_seed(draw)
        with warnings.catch_warnings():  # transformers' notes on option mixes (the reference's, not opcore's)
            warnings.simplefilter("ignore")
            want = model.generate(rows, attention_mask=rows_mask, **options)
        torch.manual_seed(draw)
        got = lm.generate(rows, rows_mask, **dict(options, eos_token_id=options["eos_token_id"] or []))
        assert got.shape == want.shape and torch.equal(got, want), (options, got.tolist(), want.tolist())
        compared += 1
