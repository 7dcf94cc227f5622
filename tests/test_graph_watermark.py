"""Watermarked generation (``watermarking_config``) against transformers' generate.

transformers' generate builds the watermark processor from the config (``construct_processor``:
a green list's bias seeded by the previous tokens, or SynthID's g-values for sampling) after every
warper and before ``renormalize_logits``; opcore builds the same processor for each call and runs it
there, so the tokens are ``model.generate``'s (those transformers' WatermarkDetector is made for).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError

transformers = pytest.importorskip("transformers", reason="compared with transformers' generate")
generation = pytest.importorskip("transformers.generation", reason="transformers' watermarking configs")

from test_graph_generation import SMALL, VOCAB, built, left_padded_rows, prompt  # noqa: E402

NEW = 10


@pytest.fixture(scope="module")
def watermarked() -> tuple[Any, opcore.graph.LanguageModel]:
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    return model, opcore.graph.capture_lm(model, max_length=40, batch_size=4, measure=False)


def _cases() -> dict[str, dict[str, Any]]:
    synth_keys = [654, 400, 836, 123, 340, 443, 597, 160, 57]
    return {
        "lefthash": dict(watermarking_config=generation.WatermarkingConfig(bias=5.0)),
        "selfhash": dict(watermarking_config=generation.WatermarkingConfig(bias=5.0, seeding_scheme="selfhash")),
        "a_dict_of_options": dict(watermarking_config={"bias": 4.0, "context_width": 2}),
        "sampled": dict(watermarking_config=generation.WatermarkingConfig(bias=3.0), do_sample=True, top_k=20),
        "synth_id_sampled": dict(
            watermarking_config=generation.SynthIDTextWatermarkingConfig(keys=synth_keys, ngram_len=3), do_sample=True
        ),
        "beam_search": dict(watermarking_config=generation.WatermarkingConfig(bias=5.0), num_beams=2),
    }


@pytest.mark.parametrize("name", sorted(_cases()))
def test_watermarked_tokens_equal_model_generate_s(watermarked, name):
    model, lm = watermarked
    ids, mask, _, _ = left_padded_rows()
    options = dict(max_new_tokens=NEW, pad_token_id=0, eos_token_id=[VOCAB - 1], **_cases()[name])
    torch.manual_seed(5)
    want = model.generate(ids, attention_mask=mask, **options)
    torch.manual_seed(5)
    got = lm.generate(ids, mask, **options)
    assert torch.equal(got, want), (got[:, 9:].tolist(), want[:, 9:].tolist())
    torch.manual_seed(5)
    plain = lm.generate(ids, mask, **dict(options, watermarking_config=None))
    assert not torch.equal(got, plain)  # the watermark changed the tokens


def test_the_generation_config_s_watermark_is_applied_without_a_warning_and_saved(tmp_path):
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL, num_key_value_heads=2))
    model.generation_config.watermarking_config = generation.WatermarkingConfig(bias=6.0, context_width=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lm = opcore.graph.capture_lm(model, max_length=32, measure=False)
    assert lm.defaults.watermarking is not None and not lm.defaults.not_applied
    ids = prompt()
    want = model.generate(ids, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(lm.generate(ids, max_new_tokens=NEW, eos_token_id=[]), want)
    lm.save(tmp_path / "lm")
    loaded = opcore.graph.load(tmp_path / "lm")
    assert loaded.defaults.watermarking == lm.defaults.watermarking
    assert torch.equal(loaded.generate(ids, max_new_tokens=NEW, eos_token_id=[]), want)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (5, "watermarking_config.*WatermarkingConfig.*found int"),
        (generation.WatermarkingConfig(greenlist_ratio=1.5), "watermarking_config.*options transformers takes"),
        ({"bias": 2.0, "colour": "green"}, "watermarking_config.*options transformers takes"),
    ],
)
def test_a_bad_watermarking_config_is_refused_before_any_work(watermarked, value, match):
    _, lm = watermarked
    with pytest.raises(ArgumentError, match=match):
        lm.generate(prompt(), max_new_tokens=2, watermarking_config=value)


def test_a_generation_config_given_to_the_call_watermarks_as_model_generate_s(watermarked):
    model, lm = watermarked
    config = transformers.GenerationConfig(
        watermarking_config=generation.WatermarkingConfig(bias=5.0), max_new_tokens=NEW
    )
    want = model.generate(prompt(), generation_config=config, pad_token_id=0)
    assert torch.equal(lm.generate(prompt(), generation_config=config, pad_token_id=0), want)
    assert not torch.equal(lm.generate(prompt(), max_new_tokens=NEW, pad_token_id=0), want)
