"""Classifier-free guidance (``guidance_scale``, opcore.graph.guidance) against transformers' generate.

transformers builds ``UnbatchedClassifierFreeGuidanceLogitsProcessor`` for a decoder-only model: an
unconditional branch of the same model (a negative prompt, or each row's last prompt token) whose
log-probabilities the step's are mixed with. Here the branch runs on a spare session of the captured
model; its tokens and scores are compared with ``model.generate``'s on greedy search, a negative
prompt, beam search and seeded sampling, then the config, the caller's own processor in its place,
the sessions it leaves alone and the errors.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError, ShapeError

transformers = pytest.importorskip("transformers", reason="compared with transformers' generate")
process = pytest.importorskip("transformers.generation.logits_process", reason="transformers' processors")

from test_graph_generation import SMALL, VOCAB, built, left_padded_rows, prompt  # noqa: E402

NEW = 10


@pytest.fixture(scope="module")
def guided() -> tuple[Any, opcore.graph.LanguageModel]:
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    # a batch of 4: two prompt rows with two beams (or two samples) each
    return model, opcore.graph.capture_lm(model, max_length=40, batch_size=4, measure=False)


def _negative(rows: int = 2, length: int = 5) -> torch.Tensor:
    return torch.randint(3, VOCAB, (rows, length), generator=torch.Generator().manual_seed(11))


_CASES: dict[str, dict[str, Any]] = {
    "last_prompt_token": dict(guidance_scale=1.5),
    "negative_prompt": dict(guidance_scale=3.0, negative_prompt_ids=_negative()),
    # below 1 the negative prompt leads (0: the negative prompt's own scores)
    "negative_prompt_leads": dict(guidance_scale=0.0, negative_prompt_ids=_negative()),
    "beam_search": dict(guidance_scale=1.5, num_beams=2),
    "sampled_twice_per_row": dict(guidance_scale=1.5, do_sample=True, num_return_sequences=2, top_k=20),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_guided_tokens_equal_model_generate_s(guided, name):
    model, lm = guided
    ids, mask, _, _ = left_padded_rows()
    options = dict(max_new_tokens=NEW, pad_token_id=0, eos_token_id=[VOCAB - 1], **_CASES[name])
    torch.manual_seed(5)
    want = model.generate(ids, attention_mask=mask, **options)
    torch.manual_seed(5)
    got = lm.generate(ids, mask, **options)
    assert torch.equal(got, want), (got[:, 9:].tolist(), want[:, 9:].tolist())
    torch.manual_seed(5)
    plain = lm.generate(ids, mask, **dict(options, guidance_scale=None, negative_prompt_ids=None))
    assert not torch.equal(got, plain)  # the guidance changed the tokens


def test_guided_scores_are_model_generate_s_and_the_logits_the_conditional_ones(guided):
    model, lm = guided
    ids, mask, _, _ = left_padded_rows()
    options = dict(
        max_new_tokens=5, pad_token_id=0, eos_token_id=[VOCAB - 1], guidance_scale=1.7,
        return_dict_in_generate=True, output_scores=True, output_logits=True,
    )  # fmt: skip
    want = model.generate(ids, attention_mask=mask, **options)
    got = lm.generate(ids, mask, **options)
    assert torch.equal(got.sequences, want.sequences)
    for mine, theirs in zip(got.scores, want.scores, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(got.logits, want.logits, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


def test_a_left_padded_negative_prompt_gives_a_rotary_model_the_tokens_of_model_generate(guided):
    """transformers' branch counts the padding in its positions, a session does not: a rotary model's
    attention sees the same distances either way (opcore.graph.guidance)."""
    model, lm = guided
    ids, mask, _, _ = left_padded_rows()
    negative = _negative(length=6)
    negative_mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    options = dict(
        max_new_tokens=NEW, pad_token_id=0, eos_token_id=[VOCAB - 1], guidance_scale=2.5,
        negative_prompt_ids=negative, negative_prompt_attention_mask=negative_mask,
    )  # fmt: skip
    want = model.generate(ids, attention_mask=mask, **options)
    assert torch.equal(lm.generate(ids, mask, **options), want)
    unmasked = lm.generate(ids, mask, **dict(options, negative_prompt_attention_mask=None))
    assert not torch.equal(unmasked, want)  # the mask was read


def test_the_generation_config_s_guidance_is_applied_without_a_warning_and_saved(tmp_path):
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    model.generation_config.guidance_scale = 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lm = opcore.graph.capture_lm(model, max_length=32, measure=False)
    assert lm.defaults.guidance_scale == 2.0 and not lm.defaults.not_applied
    ids = prompt()
    want = model.generate(ids, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=NEW, eos_token_id=[]), want)
    unguided = lm.generate(ids, max_new_tokens=NEW, eos_token_id=[], guidance_scale=1.0)
    assert not torch.equal(unguided, want)  # 1: no guidance, from the call over the config
    lm.save(tmp_path / "lm")
    loaded = opcore.graph.load(tmp_path / "lm")
    assert loaded.defaults.guidance_scale == 2.0
    assert torch.equal(loaded.generate(ids, max_new_tokens=NEW, eos_token_id=[]), want)


def test_the_caller_s_guidance_processor_takes_the_built_in_one_s_place(guided):
    """transformers' merge: a caller's UnbatchedClassifierFreeGuidanceLogitsProcessor runs instead of
    the one guidance_scale builds (here one of another scale, on the eager model)."""
    model, lm = guided
    ids, mask, _, _ = left_padded_rows()
    options = dict(max_new_tokens=NEW, pad_token_id=0, eos_token_id=[VOCAB - 1], guidance_scale=1.5)
    want = model.generate(
        ids,
        attention_mask=mask,
        logits_processor=[process.UnbatchedClassifierFreeGuidanceLogitsProcessor(4.0, model)],
        **options,
    )
    got = lm.generate(
        ids, mask, logits_processor=[process.UnbatchedClassifierFreeGuidanceLogitsProcessor(4.0, model)], **options
    )
    assert torch.equal(got, want)
    assert not torch.equal(got, lm.generate(ids, mask, **options))


def test_guidance_leaves_every_other_conversation_as_it_was(guided):
    """The branch runs on a spare session, given back after: a conversation held in the default session
    and one in the caller's go on with the logits they would have had; no session is made per call."""
    _, lm = guided
    ids = prompt(rows=4, length=6)
    mine = lm.session()
    mine.prefill(ids)
    lm.reset()  # the default session, as the calls before left it
    lm.prefill(ids)
    step = torch.full((4,), 7, dtype=torch.long)
    want = lm.session()
    want.prefill(ids)
    expected = want.decode(step).clone()
    lm.generate(prompt(rows=2, length=8, seed=9), session=lm.session(), max_new_tokens=4, guidance_scale=2.0)
    spares = len(lm._spare)
    lm.generate(prompt(rows=2, length=8, seed=9), session=lm.session(), max_new_tokens=4, guidance_scale=2.0)
    assert len(lm._spare) == spares
    torch.testing.assert_close(mine.decode(step), expected, rtol=0, atol=0)
    torch.testing.assert_close(lm.decode(step), expected, rtol=0, atol=0)


_TWOS = torch.full((2, 5), 2)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        (dict(guidance_scale="strong"), ArgumentError, "guidance_scale.*a finite number"),
        (dict(guidance_scale=float("nan")), ArgumentError, "guidance_scale.*a finite number"),
        (dict(guidance_scale=2.0, negative_prompt_ids=_negative(rows=3)), ShapeError, "negative_prompt_ids.*2 row"),
        (
            dict(guidance_scale=2.0, negative_prompt_ids=_negative(), negative_prompt_attention_mask=torch.ones(2, 4)),
            ShapeError,
            "negative_prompt_attention_mask.*shape",
        ),
        (dict(guidance_scale=2.0, negative_prompt_ids=_negative(length=35)), ShapeError, "max_length 40"),
        (
            dict(guidance_scale=2.0, negative_prompt_ids=_negative(), negative_prompt_attention_mask=_TWOS),
            ArgumentError,
            "negative_prompt_attention_mask.*0 .padding. or 1",
        ),
        (dict(guidance_scale=2.0, negative_prompt_ids=_negative() + VOCAB), ArgumentError, "vocabulary"),
    ],
)
def test_bad_guidance_options_are_refused_before_any_work(guided, options, error, match):
    _, lm = guided
    ids, mask, _, _ = left_padded_rows()
    with pytest.raises(error, match=match):
        lm.generate(ids, mask, max_new_tokens=NEW, **options)


def test_guidance_with_drafts_is_refused():
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    lm = opcore.graph.capture_lm(model, max_length=32, measure=False, draft_tokens=3)
    with pytest.raises(ArgumentError, match="guidance_scale.*no guidance with drafts"):
        lm.generate(prompt(), max_new_tokens=4, guidance_scale=2.0, prompt_lookup_num_tokens=3)


def test_stream_yields_the_guided_tokens_generate_returns(guided):
    _, lm = guided
    ids, mask, _, _ = left_padded_rows()
    options = dict(max_new_tokens=NEW, pad_token_id=0, eos_token_id=[VOCAB - 1], guidance_scale=2.0)
    streamed = torch.stack(list(lm.stream(ids, mask, **options)), 1)
    assert torch.equal(torch.cat([ids, streamed], 1), lm.generate(ids, mask, **options))


def test_a_generation_config_given_to_the_call_guides_as_model_generate_s(guided):
    model, lm = guided
    config = transformers.GenerationConfig(guidance_scale=1.8, max_new_tokens=NEW)
    want = model.generate(prompt(), generation_config=config, pad_token_id=0)
    assert torch.equal(lm.generate(prompt(), generation_config=config, pad_token_id=0), want)
    assert not torch.equal(lm.generate(prompt(), max_new_tokens=NEW, pad_token_id=0), want)
