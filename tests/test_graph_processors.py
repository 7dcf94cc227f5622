"""generate's choice of each token against transformers' own logits processors and its generate.

opcore.graph.sampling writes transformers' processors again (a loaded plan generates without
transformers): each is compared here with transformers' class on random scores (rows with tokens
dropped already, left padding, n-grams the rows repeat), all of them together with the list
transformers' generate builds from a GenerationConfig (its order), and end to end: greedy and
seeded sampling with each option equal to ``model.generate``'s tokens, from the call and from the
model's generation config.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError
from opcore.graph.sampling import Choice

transformers = pytest.importorskip("transformers", reason="compared with transformers' processors")
process = pytest.importorskip("transformers.generation.logits_process", reason="transformers' logits processors")

from test_graph_generation import SMALL, built, left_padded_rows, prompt  # noqa: E402

VOCAB = 60
EOS = 2


def _case(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(scores (3, VOCAB) with a few -inf, tokens (3, 14) whose rows repeat n-grams, padding (3,))."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, VOCAB, generator=generator) * 3
    scores[0, :5] = -float("inf")
    tokens = torch.randint(3, VOCAB, (3, 14), generator=generator)
    tokens[1, 8:11] = tokens[1, 2:5]  # the row ends where it began an n-gram before
    tokens[1, 11:] = tokens[1, 5:8]
    tokens[2, :4] = 0  # left padding of 4 (pad id 0)
    tokens[2, 10:] = tokens[2, 6:10]
    return scores, tokens, torch.tensor([0, 0, 4])


_ALONE: dict[str, tuple[dict[str, Any], Any]] = {
    "sequence_bias": (
        dict(sequence_bias=(((7,), 2.5), ((11, 13), -4.0), ((5, 6, 9), 1.5))),
        lambda: process.SequenceBiasLogitsProcessor({(7,): 2.5, (11, 13): -4.0, (5, 6, 9): 1.5}),
    ),
    "no_repeat_ngram_1": (dict(no_repeat_ngram_size=1), lambda: process.NoRepeatNGramLogitsProcessor(1)),
    "no_repeat_ngram_3": (dict(no_repeat_ngram_size=3), lambda: process.NoRepeatNGramLogitsProcessor(3)),
    "bad_words": (
        dict(bad_words_ids=((9,), (4, 17), (3, 3, 8))),
        lambda: process.NoBadWordsLogitsProcessor([[9], [4, 17], [3, 3, 8]], eos_token_id=EOS),
    ),
    "min_p": (dict(do_sample=True, min_p=0.1), lambda: process.MinPLogitsWarper(0.1)),
    "typical_p": (dict(do_sample=True, typical_p=0.6), lambda: process.TypicalLogitsWarper(0.6)),
    "epsilon": (dict(do_sample=True, epsilon_cutoff=0.01), lambda: process.EpsilonLogitsWarper(0.01)),
    "eta": (dict(do_sample=True, eta_cutoff=0.05), lambda: process.EtaLogitsWarper(0.05, device="cpu")),
    "top_h": (dict(do_sample=True, top_h=0.4), lambda: process.TopHLogitsWarper(0.4)),
    # the rows are 14 tokens, 3 of them new: a prompt of 11; the penalty starts after the first new one
    "exponential_decay": (
        dict(exponential_decay_length_penalty=(1, 1.5), eos_token_ids=(EOS, 7)),
        lambda: process.ExponentialDecayLengthPenalty((1, 1.5), [EOS, 7], input_ids_seq_length=11),
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_greedy_picks_what_argmax_picks_on_ties_infinities_and_nan(dtype):
    """Greedy search's token is transformers' ``argmax``: the first of tied maxima, the first NaN, the
    first +inf, 0 for a row of -inf (rows of few distinct values, so ties are everywhere)."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randint(-3, 3, (64, 300), generator=generator).to(dtype)
    scores[1, 7] = scores[1, 250] = float("nan")
    scores[2] = -float("inf")
    scores[3, 5] = scores[3, 9] = float("inf")
    scores[4, :] = 2
    got = Choice().pick(scores)
    assert torch.equal(got, scores.argmax(dim=-1))
    assert got[:5].tolist() == [int(scores[0].argmax()), 7, 0, 5, 0]


@pytest.mark.parametrize("name", sorted(_ALONE))
def test_each_processor_computes_what_transformers_class_does(name):
    options, theirs = _ALONE[name]
    for seed in range(4):
        scores, tokens, _ = _case(seed)
        if name == "sequence_bias":  # a row ending with a biased sequence's prefix
            tokens[0, -2:] = torch.tensor([5, 6])
            tokens[1, -1] = 11
        if name == "bad_words":
            tokens[2, -1] = 4
        want = theirs()(tokens, scores.clone())
        got = Choice(**options).scores(scores, tokens, new_tokens=3)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_repetition_penalty_leaves_the_left_padding_out_as_transformers_does():
    scores, tokens, padding = _case()
    want = process.RepetitionPenaltyLogitsProcessor(1.7, prompt_ignore_length=padding)(tokens, scores.clone())
    got = Choice(repetition_penalty=1.7).scores(scores, tokens, new_tokens=3, padding=padding)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.equal(Choice(repetition_penalty=1.7).scores(scores, tokens, new_tokens=3), want)


def test_every_option_together_in_the_order_transformers_generate_applies_them():
    """The processors transformers' generate builds from one GenerationConfig that sets them all."""
    config = transformers.LlamaConfig(**dict(SMALL, vocab_size=VOCAB), num_key_value_heads=2, eos_token_id=EOS)
    model = built(transformers.LlamaForCausalLM, config)
    options: dict[str, Any] = dict(
        do_sample=True, temperature=0.8, top_k=30, top_p=0.95, min_p=0.02, typical_p=0.95, epsilon_cutoff=1e-4,
        eta_cutoff=1e-4, repetition_penalty=1.3, no_repeat_ngram_size=2, bad_words_ids=[[9], [4, 17], [EOS]],
        sequence_bias={(7,): 1.5, (11, 13): -2.0}, min_new_tokens=2, top_h=0.95,
        exponential_decay_length_penalty=(1, 1.3),
    )  # fmt: skip
    scores, tokens, padding = _case(1)
    generation_config = transformers.GenerationConfig(**options, eos_token_id=EOS, pad_token_id=0)
    generation_config._eos_token_tensor = torch.tensor([EOS])  # as generate's _prepare_special_tokens sets it
    processors = model._get_logits_processor(
        generation_config=generation_config,
        input_ids_seq_length=tokens.shape[1] - 3,
        device="cpu",
        model_kwargs={"attention_mask": (torch.arange(tokens.shape[1])[None, :] >= padding[:, None]).long()},
    )
    want = processors(tokens, scores.clone())
    choice = Choice(
        do_sample=True, temperature=0.8, top_k=30, top_p=0.95, min_p=0.02, typical_p=0.95, epsilon_cutoff=1e-4,
        eta_cutoff=1e-4, repetition_penalty=1.3, no_repeat_ngram_size=2, bad_words_ids=((9,), (4, 17)),
        sequence_bias=(((7,), 1.5), ((11, 13), -2.0)), min_new_tokens=2, eos_token_ids=(EOS,), top_h=0.95,
        exponential_decay_length_penalty=(1, 1.3),
    )  # fmt: skip
    torch.testing.assert_close(choice.scores(scores, tokens, new_tokens=3, padding=padding), want, rtol=0, atol=0)


@pytest.fixture(scope="module")
def padded_llama():
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    return model, opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)


_GREEDY: dict[str, dict[str, Any]] = {
    "no_repeat_ngram_size": dict(no_repeat_ngram_size=2),
    "bad_words_ids": dict(bad_words_ids=[[int(t)] for t in range(100, 300)] + [[5, 6]]),
    "sequence_bias": dict(sequence_bias={(int(t),): -3.0 for t in range(150, 250)}),
}


@pytest.mark.parametrize("name", sorted(_GREEDY))
def test_greedy_with_each_ban_or_bias_equals_model_generate(padded_llama, name):
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    options = _GREEDY[name]
    want = model.generate(
        ids, attention_mask=mask, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0, **options
    )
    plain = lm.generate(ids, mask, max_new_tokens=16, eos_token_id=[])
    got = lm.generate(ids, mask, max_new_tokens=16, eos_token_id=[], **options)
    assert torch.equal(got, want), (got[:, 9:].tolist(), want[:, 9:].tolist())
    assert not torch.equal(got, plain)  # the option changed the tokens


@pytest.mark.parametrize(
    "options",
    [dict(min_p=0.3), dict(typical_p=0.5), dict(epsilon_cutoff=0.002), dict(eta_cutoff=0.002), dict(top_h=0.3),
     dict(min_p=0.1, top_k=0, temperature=1.5, no_repeat_ngram_size=3)],
)  # fmt: skip
def test_seeded_sampling_with_each_warper_draws_what_model_generate_draws(padded_llama, options):
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    torch.manual_seed(7)
    want = model.generate(
        ids, attention_mask=mask, max_new_tokens=12, do_sample=True, eos_token_id=None, pad_token_id=0, **options
    )
    torch.manual_seed(7)
    got = lm.generate(ids, mask, max_new_tokens=12, do_sample=True, eos_token_id=[], **options)
    assert torch.equal(got, want), (got[:, 9:].tolist(), want[:, 9:].tolist())


def test_the_generation_config_s_bans_and_warpers_are_applied_without_a_warning():
    import warnings

    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    config = model.generation_config
    config.no_repeat_ngram_size, config.bad_words_ids, config.min_p = 2, [[int(t)] for t in range(100, 300)], 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lm = opcore.graph.capture_lm(model, max_length=40, measure=False)
    assert not lm.defaults.not_applied
    ids = prompt()
    want = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=12, eos_token_id=[]), want)
    torch.manual_seed(3)
    want = model.generate(ids, max_new_tokens=12, do_sample=True, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(3)
    assert torch.equal(lm.generate(ids, max_new_tokens=12, do_sample=True, eos_token_id=[]), want)
    from opcore.graph.generation import GenerationDefaults

    assert GenerationDefaults.from_json(lm.defaults.to_json()) == lm.defaults  # kept in a saved plan


def test_max_time_stops_after_the_token_that_passed_it(padded_llama):
    """transformers' MaxTimeCriteria: checked after each token, from before the prompt; a time already
    past gives one new token."""
    _, lm = padded_llama
    ids = prompt()
    assert lm.generate(ids, max_new_tokens=10, eos_token_id=[], max_time=1e-9).shape == (1, ids.shape[1] + 1)
    assert lm.generate(ids, max_new_tokens=10, eos_token_id=[], max_time=600.0).shape == (1, ids.shape[1] + 10)


@pytest.mark.parametrize(
    ("option", "match"),
    [
        (dict(bad_words_ids=[1, 2]), "bad_words_ids.*list of non-empty lists"),
        (dict(bad_words_ids=[[]]), "bad_words_ids"),
        (dict(bad_words_ids=[[3, 10_000]]), "bad_words_ids.*below the vocabulary's 500.*10000"),
        (dict(sequence_bias={(3,): "a lot"}), "sequence_bias"),
        (dict(sequence_bias={(10_000,): 1.0}), "sequence_bias.*below the vocabulary"),
        (dict(do_sample=True, min_p=1.5), "min_p.*in \\[0, 1\\]"),
        (dict(do_sample=True, typical_p=0.0), "typical_p"),
        (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
        (dict(max_time=0), "max_time"),
        (dict(do_sample=True, top_h=0), "top_h.*in \\(0, 1\\]"),
        (dict(exponential_decay_length_penalty=(2,)), "exponential_decay_length_penalty.*start_index, decay_factor"),
        (dict(logits_processor=[1]), "logits_processor.*list of callables"),
        (dict(stopping_criteria=5), "stopping_criteria.*list of callables"),
        (dict(prefix_allowed_tokens_fn="x"), "prefix_allowed_tokens_fn.*a callable"),
        (dict(prefix_allowed_tokens_fn=lambda batch_id, row: []), "prefix_allowed_tokens_fn.*empty list for batch_id"),
    ],
)
def test_bad_options_are_refused_naming_them_before_any_work(padded_llama, option, match):
    _, lm = padded_llama
    with pytest.raises(ArgumentError, match=match):
        lm.generate(prompt(), max_new_tokens=4, **option)


def _first_five(tokens, scores):
    return scores[:, :5]


@pytest.mark.parametrize(
    "option, match",
    [
        (dict(logits_processor=[lambda tokens, scores: scores, _first_five]), r"processor 1 \(_first_five\) returned"),
        (dict(logits_processor=[lambda tokens, scores: None]), r"shape they were given, \(2, 500\).*returned NoneType"),
        (dict(stopping_criteria=[lambda tokens, scores: "yes"]), r"bool tensor of one per row \(2,\).*returned str"),
        (dict(stopping_criteria=[lambda tokens, scores: torch.zeros(3, dtype=torch.bool)]), r"Tensor of shape \(3,\)"),
        (dict(stopping_criteria=[lambda tokens, scores: torch.zeros(2)]), r"\(torch.float32\)"),
    ],
)
def test_a_processor_or_criterion_answering_the_wrong_thing_is_named(padded_llama, option, match):
    """The caller's processors must return scores of the shape given (a narrower tensor was taken as
    the vocabulary's first ids), criteria a bool or one per row: an ArgumentError naming which, where
    it answered (a processor's own exception stays its own)."""
    _, lm = padded_llama
    with pytest.raises(ArgumentError, match=match):
        lm.generate(prompt(rows=2), max_new_tokens=4, **option)
    with pytest.raises(ZeroDivisionError):
        lm.generate(prompt(rows=2), max_new_tokens=4, logits_processor=[lambda tokens, scores: 1 / 0])
    done = lm.generate(prompt(rows=2), max_new_tokens=4, stopping_criteria=[lambda tokens, scores: True])
    assert done.shape[1] == prompt(rows=2).shape[1] + 1  # a plain bool ends every row


_KEPT: dict[str, tuple[dict[str, Any], Any]] = {
    "top_k": (dict(top_k=1), lambda keep: process.TopKLogitsWarper(1, min_tokens_to_keep=keep)),
    "top_p": (dict(top_p=0.05), lambda keep: process.TopPLogitsWarper(0.05, min_tokens_to_keep=keep)),
    "min_p": (dict(min_p=0.9), lambda keep: process.MinPLogitsWarper(0.9, min_tokens_to_keep=keep)),
    "typical_p": (dict(typical_p=0.05), lambda keep: process.TypicalLogitsWarper(0.05, min_tokens_to_keep=keep)),
    "epsilon": (dict(epsilon_cutoff=0.3), lambda keep: process.EpsilonLogitsWarper(0.3, min_tokens_to_keep=keep)),
    "eta": (dict(eta_cutoff=0.3), lambda keep: process.EtaLogitsWarper(0.3, min_tokens_to_keep=keep, device="cpu")),
}


@pytest.mark.parametrize("name", sorted(_KEPT))
def test_each_warper_keeps_the_tokens_beam_search_keeps_as_transformers_does(name):
    """Beam sampling keeps 1 + the eos ids at least (transformers' min_tokens_to_keep): each warper, set
    to cut all but one token, keeps that many."""
    options, theirs = _KEPT[name]
    for keep in (1, 2, 3):
        scores, tokens, _ = _case(keep)
        want = theirs(keep)(tokens, scores.clone())
        got = Choice(do_sample=True, keep=keep, **options).scores(scores, tokens, new_tokens=3)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert int(torch.isfinite(got).sum(-1).min()) >= keep


class _Banned:
    """A caller's processor: at every other length, the upper half of the vocabulary, the row's
    likeliest token and the one its last token is made impossible (it reads the row and the scores)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] % 2:
            return scores
        banned = torch.cat([scores.argmax(-1, keepdim=True), input_ids[:, -1:] % scores.shape[1]], 1)
        scores = scores.scatter(1, banned, -float("inf"))
        scores[:, scores.shape[1] // 2 :] = -float("inf")
        return scores


class _EndsWith:
    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        return input_ids[:, -1] == self.token


class _Length:
    """Done for every row at once (one bool, as a criterion may answer)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> bool:
        return input_ids.shape[1] >= self.length


def _allowed(batch_id: int, row: torch.Tensor) -> list[int]:
    """Even ids for the first prompt; for the second, ids of the form 3k+1 (the last one's neighbour
    where it is one: the row's own tokens matter)."""
    if batch_id == 0:
        return list(range(0, VOCAB, 2))
    return [int(row[-1]) + 1] if int(row[-1]) % 3 == 0 else list(range(1, VOCAB, 3))


@pytest.fixture(scope="module")
def six_rows() -> tuple[Any, opcore.graph.LanguageModel]:
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    return model, opcore.graph.capture_lm(model, max_length=40, batch_size=6, measure=False)


_CALLERS: dict[str, dict[str, Any]] = {
    "processor": dict(logits_processor=transformers.LogitsProcessorList([_Banned()])),
    "processor_sampled": dict(logits_processor=[_Banned()], do_sample=True, temperature=2.0),
    "processor_beams": dict(logits_processor=[_Banned()], num_beams=3, num_return_sequences=2),
    "length": dict(stopping_criteria=transformers.StoppingCriteriaList([_Length(14)])),
    "ends_with": dict(stopping_criteria=[_EndsWith(-1)]),  # the token: set from the plain run
    "ends_with_beams": dict(stopping_criteria=[_EndsWith(-1)], num_beams=2),
    "prefix": dict(prefix_allowed_tokens_fn=_allowed),
    "prefix_beams": dict(prefix_allowed_tokens_fn=_allowed, num_beams=3),
}


@pytest.mark.parametrize("name", sorted(_CALLERS))
def test_the_caller_s_processors_criteria_and_prefix_function_equal_model_generate(six_rows, name):
    """transformers' logits_processor, stopping_criteria and prefix_allowed_tokens_fn: applied where
    its generate applies them (the caller's processors after the built-in ones, before the warpers),
    with greedy search, sampling and beams; each changes the tokens, and they equal model.generate's."""
    model, lm = six_rows
    ids, mask, _, _ = left_padded_rows()
    options = dict(_CALLERS[name], max_new_tokens=12, pad_token_id=0)
    plain_options = {k: v for k, v in options.items() if k not in _CALLER_OPTIONS}
    torch.manual_seed(2)
    plain = model.generate(ids, attention_mask=mask, eos_token_id=None, **plain_options)
    if name.startswith("ends_with"):  # the token the second row makes third; an eos: stopped rows padded
        options["stopping_criteria"] = [_EndsWith(int(plain[-1, ids.shape[1] + 2]))]
        options["eos_token_id"] = [VOCAB - 1]
    torch.manual_seed(2)
    options.setdefault("eos_token_id", None)
    want = model.generate(ids, attention_mask=mask, **options)
    torch.manual_seed(2)
    got = lm.generate(ids, mask, **dict(options, eos_token_id=options["eos_token_id"] or []))
    assert got.shape == want.shape and torch.equal(got, want), (got[:, 9:].tolist(), want[:, 9:].tolist())
    assert got.shape != plain.shape or not torch.equal(got, plain)  # the caller's option changed the tokens


_CALLER_OPTIONS = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn")


def _replacing_case(name: str, length: int, vocab: int, plain: torch.Tensor) -> tuple[dict[str, Any], list[Any]]:
    """(the option, the caller's processors of the classes transformers builds from it): a strong
    option and mild processors, so that applying both would change the tokens."""
    evens = list(range(0, vocab, 2))
    eos = int(plain[-1, length + 2])  # the token the second row makes third
    if name == "repetition_penalty":
        return dict(repetition_penalty=50.0), [process.RepetitionPenaltyLogitsProcessor(1.0)]
    if name == "no_repeat_ngram_size":
        return dict(no_repeat_ngram_size=1), [process.NoRepeatNGramLogitsProcessor(30)]
    if name == "suppress_tokens":
        return dict(suppress_tokens=evens), [process.SuppressTokensLogitsProcessor([1])]
    if name == "sequence_bias":
        return dict(sequence_bias={(t,): -50.0 for t in evens}), [process.SequenceBiasLogitsProcessor({(1,): -1.0})]
    if name == "min_length":  # the eos allowed by the caller's
        return dict(min_length=length + 6, eos_token_id=[eos]), [process.MinLengthLogitsProcessor(0, eos)]
    if name == "min_new_tokens":  # transformers builds MinLength from it too: both replaced
        both = [process.MinLengthLogitsProcessor(0, eos), process.MinNewTokensLengthLogitsProcessor(length, 0, eos)]
        return dict(min_new_tokens=6, eos_token_id=[eos]), both
    # the caller's forces token 5 as the third new one, and the option's last token is not forced
    return dict(forced_eos_token_id=vocab - 2), [process.ForcedEOSTokenLogitsProcessor(length + 3, 5)]


@pytest.mark.parametrize(
    "name",
    [
        "repetition_penalty", "no_repeat_ngram_size", "suppress_tokens", "sequence_bias", "min_length",
        "min_new_tokens", "forced_eos",
    ],
)  # fmt: skip
def test_the_caller_s_processor_of_a_class_generate_builds_takes_the_option_s_place(padded_llama, name):
    """transformers' merge: a caller's processor of the class its generate builds from an option runs
    at that processor's place instead of it; the tokens equal model.generate's, and the option alone
    gives others."""
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    length, vocab = ids.shape[1], model.config.vocab_size
    base: dict[str, Any] = dict(max_new_tokens=8, pad_token_id=0, eos_token_id=[vocab - 1])
    plain = lm.generate(ids, mask, **base)
    option, processors = _replacing_case(name, length, vocab, plain)
    options = dict(base, **option, logits_processor=transformers.LogitsProcessorList(processors))
    want = model.generate(ids, attention_mask=mask, **options)
    got = lm.generate(ids, mask, **options)
    assert got.shape == want.shape and torch.equal(got, want), (got[:, length:].tolist(), want[:, length:].tolist())
    alone = lm.generate(ids, mask, **dict(base, **option))
    assert alone.shape != got.shape or not torch.equal(alone, got)


def test_a_processor_whose_option_is_unset_or_a_second_of_its_class_runs_after_the_built_in_ones(padded_llama):
    """Where generate builds no processor of that class (its option unset), or the class's first took
    the place, the caller's runs after the built-in processors, as transformers' merge appends it."""
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    vocab = model.config.vocab_size
    options: dict[str, Any] = dict(max_new_tokens=8, pad_token_id=0, eos_token_id=[vocab - 1], repetition_penalty=3.0)
    second = process.RepetitionPenaltyLogitsProcessor(0.2)
    for processors in ([process.RepetitionPenaltyLogitsProcessor(1.0), second], [second]):
        given = dict(options, logits_processor=transformers.LogitsProcessorList(processors))
        if len(processors) == 1:
            given.pop("repetition_penalty")
        assert torch.equal(lm.generate(ids, mask, **given), model.generate(ids, attention_mask=mask, **given))


_OWN_KINDS = ("longer", "shorter", "eos", "time")


@pytest.mark.parametrize("kind", _OWN_KINDS)
def test_the_caller_s_criterion_of_a_kind_generate_makes_takes_its_place(padded_llama, kind):
    """transformers' merge: a caller's MaxLengthCriteria, EosTokenCriteria or MaxTimeCriteria replaces
    the one generate makes from max_new_tokens, eos_token_id or max_time (a longer length runs past
    max_new_tokens; the criterion's eos ends rows instead of the option's); the tokens equal
    model.generate's, and differ from the run without the criterion."""
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    length = ids.shape[1]
    options: dict[str, Any] = dict(max_new_tokens=6, pad_token_id=0, eos_token_id=[VOCAB - 1])
    plain = lm.generate(ids, mask, **options)
    if kind == "longer":
        criterion: Any = transformers.MaxLengthCriteria(length + 14)
    elif kind == "shorter":
        criterion = transformers.MaxLengthCriteria(length + 3)
    elif kind == "eos":  # the token the second row makes third
        criterion = transformers.EosTokenCriteria(int(plain[-1, length + 2]))
    else:  # the option's time is past after the first token; the caller's is not
        criterion, options["max_time"] = transformers.MaxTimeCriteria(600.0), 1e-9
    options["stopping_criteria"] = transformers.StoppingCriteriaList([criterion])
    want = model.generate(ids, attention_mask=mask, **options)
    got = lm.generate(ids, mask, **options)
    assert got.shape == want.shape and torch.equal(got, want), (got[:, length:].tolist(), want[:, length:].tolist())
    without = lm.generate(ids, mask, **{k: v for k, v in options.items() if k != "stopping_criteria"})
    assert got.shape != without.shape or not torch.equal(got, without)


def test_the_exponential_decay_length_penalty_ends_rows_as_model_generate_does(padded_llama):
    """Past its start, each eos score is raised (transformers' ExponentialDecayLengthPenalty): rows end
    sooner than without it, where model.generate's do."""
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    plain = model.generate(ids, attention_mask=mask, max_new_tokens=16, pad_token_id=0, eos_token_id=None)
    eos = sorted({int(t) for t in plain[:, ids.shape[1] + 10 :].flatten()})[:3]  # ids it makes late, made eos
    options = dict(max_new_tokens=16, pad_token_id=0, eos_token_id=eos, exponential_decay_length_penalty=(2, 1.6))
    want = model.generate(ids, attention_mask=mask, **options)
    got = lm.generate(ids, mask, **options)
    assert got.shape == want.shape and torch.equal(got, want), (got[:, 9:].tolist(), want[:, 9:].tolist())
    without = lm.generate(ids, mask, **{**options, "exponential_decay_length_penalty": None})
    assert got.shape[1] < without.shape[1] or not torch.equal(got, without)


def _byte_level_tokenizer() -> Any:
    """A GPT-2 style byte-level BPE tokenizer of the models' vocabulary size, trained here on random words (nothing
    downloaded)."""
    import random

    tokenizers = pytest.importorskip("tokenizers", reason="transformers' fast tokenizers")
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    rng = random.Random(0)
    text = [" ".join("".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 7))) for _ in range(12))
            for _ in range(400)]  # fmt: skip
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    size = SMALL["vocab_size"]
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=size, initial_alphabet=alphabet, show_progress=False)
    bpe.train_from_iterator(text, trainer)
    assert bpe.get_vocab_size() == size
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)


def test_stop_strings_end_rows_as_model_generate_does_with_the_tokenizer(padded_llama):
    """stop_strings with the model's tokenizer (transformers' StopStringCriteria over its token
    strings), from the call and the generation config; without a tokenizer the error transformers
    gives, as an ArgumentError with the fix."""
    model, lm = padded_llama
    tokenizer = _byte_level_tokenizer()
    ids, mask, _, _ = left_padded_rows()
    plain = model.generate(ids, attention_mask=mask, max_new_tokens=12, pad_token_id=0, eos_token_id=None)
    # the second row's third new token or a later one that reads as letters (a byte-level token may be
    # part of a character)
    texts = [tokenizer.decode([int(t)]).strip() for t in plain[1, ids.shape[1] + 2 :]]
    stop = next(text for text in texts if text.isalpha() and text.isascii())
    options: dict[str, Any] = dict(max_new_tokens=12, pad_token_id=0, eos_token_id=[SMALL["vocab_size"] - 1])
    want = model.generate(ids, attention_mask=mask, stop_strings=[stop], tokenizer=tokenizer, **options)
    got = lm.generate(ids, mask, stop_strings=[stop], tokenizer=tokenizer, **options)
    assert torch.equal(got, want), (got[:, 9:].tolist(), want[:, 9:].tolist())
    assert not torch.equal(got, lm.generate(ids, mask, **options))  # a row stopped early
    with pytest.raises(ArgumentError, match=r"tokenizer.*stop strings are set \(stop_strings: .*tokenizer="):
        lm.generate(ids, mask, stop_strings=stop, **options)
    model.generation_config.stop_strings = stop
    configured = opcore.graph.capture_lm(model, max_length=40, batch_size=2, measure=False)
    model.generation_config.stop_strings = None
    assert not configured.defaults.not_applied
    assert torch.equal(configured.generate(ids, mask, tokenizer=tokenizer, **options), want)
    with pytest.raises(ArgumentError, match=r"generation_config.stop_strings"):
        configured.generate(ids, mask, **options)


@pytest.mark.parametrize("sample", [False, True])
def test_renormalize_logits_returns_log_probabilities_as_model_generate_does(padded_llama, sample):
    """transformers' LogitNormalization, after every processor and warper: the same tokens, and each
    step's scores are log-probabilities equal to model.generate's (without it they are not)."""
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    options: dict[str, Any] = dict(
        max_new_tokens=5, pad_token_id=0, eos_token_id=[model.config.vocab_size - 1], repetition_penalty=1.5,
        return_dict_in_generate=True, output_scores=True, renormalize_logits=True,
    )  # fmt: skip
    if sample:
        options.update(do_sample=True, top_k=10, temperature=0.7)
    torch.manual_seed(4)
    want = model.generate(ids, attention_mask=mask, **options)
    torch.manual_seed(4)
    got = lm.generate(ids, mask, **options)
    assert torch.equal(got.sequences, want.sequences)
    for mine, theirs in zip(got.scores, want.scores, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(mine.logsumexp(-1), torch.zeros(mine.shape[0]), rtol=0, atol=1e-5)
    torch.manual_seed(4)
    plain = lm.generate(ids, mask, **dict(options, renormalize_logits=False))
    assert torch.equal(plain.sequences, got.sequences)
    assert not torch.allclose(plain.scores[0].logsumexp(-1), torch.zeros(ids.shape[0]), atol=1e-3)


def test_renormalize_logits_must_be_a_bool(padded_llama):
    _, lm = padded_llama
    with pytest.raises(ArgumentError, match="renormalize_logits.*a bool"):
        lm.generate(prompt(), max_new_tokens=2, renormalize_logits="yes")


def test_remove_invalid_values_makes_the_scores_finite_as_model_generate_does(padded_llama):
    """transformers' InfNanRemoveLogitsProcessor, after the forced tokens: the bad words' -inf becomes
    float32's smallest value; the scores equal model.generate's (without it they hold -inf)."""
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    options: dict[str, Any] = dict(
        max_new_tokens=4, pad_token_id=0, eos_token_id=[model.config.vocab_size - 1], bad_words_ids=[[5], [6]],
        return_dict_in_generate=True, output_scores=True, remove_invalid_values=True,
    )  # fmt: skip
    want = model.generate(ids, attention_mask=mask, **options)
    got = lm.generate(ids, mask, **options)
    assert torch.equal(got.sequences, want.sequences)
    for mine, theirs in zip(got.scores, want.scores, strict=True):
        assert bool(torch.isfinite(mine).all())
        assert bool((mine[:, [5, 6]] == torch.finfo(torch.float32).min).all())
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    plain = lm.generate(ids, mask, **dict(options, remove_invalid_values=False))
    assert bool(torch.isinf(plain.scores[0][:, 5]).all())


@pytest.mark.parametrize("cache", ["static", "dynamic", "sliding_window"])
def test_a_cache_implementation_of_the_same_tokens_is_taken_and_changes_nothing(padded_llama, cache):
    model, lm = padded_llama
    ids, mask, _, _ = left_padded_rows()
    options: dict[str, Any] = dict(max_new_tokens=8, pad_token_id=0, eos_token_id=[model.config.vocab_size - 1])
    want = model.generate(ids, attention_mask=mask, cache_implementation=cache, **options)
    assert torch.equal(lm.generate(ids, mask, cache_implementation=cache, **options), want)
    config = transformers.GenerationConfig(cache_implementation=cache, max_new_tokens=8)
    eos = options["eos_token_id"]
    assert torch.equal(lm.generate(ids, mask, generation_config=config, pad_token_id=0, eos_token_id=eos), want)


def test_a_quantized_or_unknown_cache_implementation_is_refused(padded_llama):
    _, lm = padded_llama
    with pytest.raises(ArgumentError, match=r"cache_implementation.*'quantized'.*model's own generate"):
        lm.generate(prompt(), max_new_tokens=2, cache_implementation="quantized")
    with pytest.raises(ArgumentError, match=r"cache_implementation.*'fastest'"):
        lm.generate(prompt(), max_new_tokens=2, cache_implementation="fastest")
    config = transformers.GenerationConfig(cache_implementation="quantized")
    with pytest.raises(ArgumentError, match=r"generation_config.cache_implementation.*'quantized'"):
        lm.generate(prompt(), max_new_tokens=2, generation_config=config)


def test_options_that_change_nothing_are_taken_and_others_refused_naming_them(padded_llama):
    """Code written for transformers' generate passes its compile, cache-size and sync settings, and
    the options of decodings generate does not do at their off values: taken (NO_EFFECT, IDLE_VALUES),
    the tokens model.generate's; the same options at values that change the decoding are refused."""
    model, lm = padded_llama
    ids = prompt()
    idle: dict[str, Any] = dict(
        prefill_chunk_size=4, disable_compile=True, synced_gpus=False, max_cache_len=40, low_memory=True,
        num_beam_groups=1, diversity_penalty=0.0, penalty_alpha=0.0, token_healing=False, use_mtp=False,
        output_attentions=False, output_hidden_states=False, decoder_start_token_id=1,
    )  # fmt: skip
    want = model.generate(ids, max_new_tokens=6, pad_token_id=0, **idle)
    assert torch.equal(lm.generate(ids, max_new_tokens=6, pad_token_id=0, **idle), want)
    for name, value in dict(num_beam_groups=2, diversity_penalty=0.5, token_healing=True, use_mtp=True).items():
        with pytest.raises(ArgumentError, match=rf"{name}={value!r}"):
            lm.generate(ids, max_new_tokens=2, **{name: value})


def test_without_a_prompt_generate_starts_from_the_bos_token_as_model_generate_does(padded_llama):
    model, lm = padded_llama
    assert lm.defaults.bos_token_id == model.generation_config.bos_token_id == 1
    options: dict[str, Any] = dict(max_new_tokens=6, pad_token_id=0)
    want = model.generate(**options)
    assert want[0, 0] == 1
    assert torch.equal(lm.generate(**options), want)
    assert torch.equal(torch.stack(list(lm.stream(**options)), 1), want[:, 1:])
    assert torch.equal(lm.generate(bos_token_id=7, **options), model.generate(bos_token_id=7, **options))
    with pytest.raises(ArgumentError, match="bos_token_id.*a token id"):
        lm.generate(bos_token_id="<s>", **options)


def test_without_a_prompt_or_a_bos_token_generate_says_what_to_pass():
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, bos_token_id=None))
    lm = opcore.graph.capture_lm(model, max_length=16, measure=False)
    assert lm.defaults.bos_token_id is None
    for call in (lm.generate, lm.stream):
        with pytest.raises(ArgumentError, match=r"input_ids.*found neither.*generate\(bos_token_id=...\)"):
            call(max_new_tokens=2)


def _continued_rows(lm: opcore.graph.LanguageModel) -> tuple[torch.Tensor, torch.Tensor]:
    """left_padded_rows followed by 10 greedy tokens: prompts whose n-grams the model goes on to make."""
    ids, mask, _, _ = left_padded_rows()
    longer = lm.generate(ids, mask, max_new_tokens=10, pad_token_id=0, eos_token_id=[])
    return longer, torch.cat([mask, torch.ones(2, 10, dtype=mask.dtype)], 1)


@pytest.mark.parametrize(
    "options",
    [dict(encoder_repetition_penalty=3.0), dict(encoder_repetition_penalty=0.3), dict(encoder_no_repeat_ngram_size=1),
     dict(encoder_no_repeat_ngram_size=2), dict(encoder_repetition_penalty=2.0, encoder_no_repeat_ngram_size=2)],
)  # fmt: skip
def test_the_encoder_processors_run_over_the_prompt_as_model_generate_s(padded_llama, options):
    """transformers' generate gives a decoder-only model's prompt to its Encoder* processors: the
    prompt's tokens raised (a "hallucination penalty"), its n-grams not continued."""
    model, lm = padded_llama
    ids, mask = _continued_rows(lm)
    base: dict[str, Any] = dict(max_new_tokens=10, pad_token_id=0, eos_token_id=[model.config.vocab_size - 1])
    want = model.generate(ids, attention_mask=mask, **base, **options)
    got = lm.generate(ids, mask, **base, **options)
    assert torch.equal(got, want), (got[:, 19:].tolist(), want[:, 19:].tolist())
    assert not torch.equal(got, lm.generate(ids, mask, **base))


def test_the_encoder_processors_read_the_prompt_of_each_beam_and_of_the_config(padded_llama):
    model, lm = padded_llama
    ids, mask = _continued_rows(lm)
    base: dict[str, Any] = dict(
        max_new_tokens=8, pad_token_id=0, eos_token_id=[model.config.vocab_size - 1], num_beams=2
    )
    for options in (dict(encoder_no_repeat_ngram_size=2), dict(encoder_repetition_penalty=2.0)):
        assert torch.equal(
            lm.generate(ids[:1], mask[:1], **base, **options), model.generate(ids[:1], **base, **options)
        )
    config = transformers.GenerationConfig(encoder_no_repeat_ngram_size=2, max_new_tokens=8)
    want = model.generate(ids, attention_mask=mask, generation_config=config, pad_token_id=0)
    assert torch.equal(lm.generate(ids, mask, generation_config=config, pad_token_id=0), want)
    with pytest.raises(ArgumentError, match="encoder_repetition_penalty.*a float > 0"):
        lm.generate(ids, mask, max_new_tokens=2, encoder_repetition_penalty=0)
    with pytest.raises(ArgumentError, match="encoder_no_repeat_ngram_size.*an int >= 0"):
        lm.generate(ids, mask, max_new_tokens=2, encoder_no_repeat_ngram_size=1.5)
