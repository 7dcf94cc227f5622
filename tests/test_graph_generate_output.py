"""generate(..., return_dict_in_generate=True): the sequences with each step's scores and logits,
and beam search's sequence scores and beam indices, against transformers' own records."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError
from opcore.graph.generate_output import GenerateOutput

transformers = pytest.importorskip("transformers", reason="compared with transformers' generate records")

from test_graph_generation import build, left_padded_rows  # noqa: E402


@pytest.fixture(scope="module")
def captured() -> tuple[Any, opcore.graph.LanguageModel]:
    model: Any = build("llama")
    return model, opcore.graph.capture_lm(model, max_length=48, batch_size=8, measure=False)


def assert_steps_close(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> None:
    """Step by step: -inf where transformers has -inf (the processors' bans), the rest within float
    noise of the runtimes' logits."""
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert mine.shape == theirs.shape and torch.equal(torch.isinf(mine), torch.isinf(theirs))
        finite = torch.isfinite(theirs)
        torch.testing.assert_close(mine[finite], theirs[finite], rtol=1e-4, atol=1e-4)


_CASES: dict[str, dict[str, Any]] = {
    "greedy": dict(repetition_penalty=1.3),
    "sampling": dict(do_sample=True, temperature=2.0, top_k=20),
    "beams": dict(num_beams=3, num_return_sequences=2, length_penalty=0.5),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_scores_and_logits_are_those_of_transformers_records(captured, case):
    model, lm = captured
    ids, mask, _, _ = left_padded_rows()
    eos = int(model.generate(ids, attention_mask=mask, max_new_tokens=3, pad_token_id=0, eos_token_id=None)[0, -1])
    options = dict(_CASES[case], max_new_tokens=8, pad_token_id=0, eos_token_id=[eos], return_dict_in_generate=True,
                   output_scores=True, output_logits=True)  # fmt: skip
    torch.manual_seed(5)
    want = model.generate(ids, attention_mask=mask, **options)
    torch.manual_seed(5)
    got = lm.generate(ids, mask, **options)
    assert isinstance(got, GenerateOutput) and torch.equal(got.sequences, want.sequences)
    assert_steps_close(got.scores, want.scores)
    assert_steps_close(got.logits, want.logits)
    if case == "beams":
        assert torch.equal(got.beam_indices, want.beam_indices)
        torch.testing.assert_close(got.sequences_scores, want.sequences_scores, rtol=1e-4, atol=1e-4)
        transition = model.compute_transition_scores(got.sequences, got.scores, got.beam_indices)
        want_transition = model.compute_transition_scores(want.sequences, want.scores, want.beam_indices)
    else:
        assert got.beam_indices is None and got.sequences_scores is None
        transition = model.compute_transition_scores(got.sequences, got.scores, normalize_logits=True)
        want_transition = model.compute_transition_scores(want.sequences, want.scores, normalize_logits=True)
    finite = torch.isfinite(want_transition)
    torch.testing.assert_close(transition[finite], want_transition[finite], rtol=1e-4, atol=1e-4)


def test_the_record_holds_what_was_asked_and_reads_as_transformers_records(captured):
    _, lm = captured
    ids, mask, _, _ = left_padded_rows()
    plain = lm.generate(ids, mask, max_new_tokens=4)
    record = lm.generate(ids, mask, max_new_tokens=4, return_dict_in_generate=True)
    assert torch.equal(record.sequences, plain) and list(record.keys()) == ["sequences"]
    assert record["sequences"] is record.sequences and record[0] is record.sequences
    with pytest.raises(KeyError):
        record["scores"]
    scored = lm.generate(ids, mask, max_new_tokens=4, return_dict_in_generate=True, output_scores=True)
    assert list(scored.keys()) == ["sequences", "scores"] and len(scored.to_tuple()[1]) == 4
    # without return_dict_in_generate the tensor, as transformers returns it
    assert torch.equal(lm.generate(ids, mask, max_new_tokens=4, output_scores=True), plain)
    with pytest.raises(ArgumentError, match=r"output_scores.*True, False or None.*'yes'"):
        lm.generate(ids, mask, max_new_tokens=4, return_dict_in_generate=True, output_scores="yes")
    with pytest.raises(ArgumentError, match=r"output_attentions"):
        lm.generate(ids, mask, max_new_tokens=4, return_dict_in_generate=True, output_attentions=True)


def test_the_generation_config_s_record_options_are_the_defaults(tmp_path):
    model: Any = build("llama")
    model.generation_config.return_dict_in_generate = True
    model.generation_config.output_logits = True
    lm = opcore.graph.capture_lm(model, max_length=40, measure=False)
    ids = left_padded_rows()[2][None]
    out = lm.generate(ids, max_new_tokens=3)
    assert isinstance(out, GenerateOutput) and out.scores is None and len(out.logits) == 3
    lm.save(tmp_path / "lm")
    again = opcore.graph.load(tmp_path / "lm")
    assert len(again.generate(ids, max_new_tokens=3).logits) == 3
    assert isinstance(again.generate(ids, max_new_tokens=3, return_dict_in_generate=False), torch.Tensor)
