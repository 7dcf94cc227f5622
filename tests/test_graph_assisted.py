"""generate(assistant_model=...): assisted generation, drafts from a smaller captured model.

Greedy tokens are greedy search's (and transformers' assisted generate's) whatever the assistant;
sampling keeps the larger model's distribution (speculative sampling, measured over seeds) and is
reproducible with a seeded generator; the assistant's session is given back and its cache cropped
to what both models agree on; refusals name the fix. Models as in test_graph_generation.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch

import opcore.graph
from opcore.errors import ArgumentError
from opcore.graph.generation import Session

transformers = pytest.importorskip("transformers", reason="compared with transformers' generate")

from test_graph_generation import build, prompt  # noqa: E402

DRAFTS = 6


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    """The larger model (a verify step of DRAFTS), the same model as its own assistant (every draft
    agrees), another family's model of the same vocabulary as an assistant (drafts mostly refused)
    and the larger model with its lm_head perturbed (its distributions near the larger model's)."""
    main: Any = build("llama")
    other: Any = build("qwen2")
    near: Any = copy.deepcopy(main)  # its lm_head perturbed: distributions near the larger model's
    with torch.no_grad():
        head = near.lm_head.weight
        head.add_(torch.randn(head.shape, generator=torch.Generator().manual_seed(1)) * 0.2 * head.std())
    return {
        "main": main,
        "other": other,
        "near": near,
        "lm": opcore.graph.capture_lm(main, max_length=96, measure=False, draft_tokens=DRAFTS),
        "same": opcore.graph.capture_lm(main, max_length=96, measure=False),
        "assistant": opcore.graph.capture_lm(other, max_length=96, measure=False),
        "near assistant": opcore.graph.capture_lm(near, max_length=96, measure=False),
    }


class Verifies:
    """The tokens of each verify call of every session."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        original = Session.verify

        def counted(session: Session, ids: Any) -> Any:
            self.sizes.append(ids.shape[1])
            return original(session, ids)

        monkeypatch.setattr(Session, "verify", counted)


@pytest.mark.parametrize("assistant", ["same", "assistant"])
@pytest.mark.parametrize("threshold", [None, 0.0])
def test_greedy_tokens_are_greedy_search_s_whatever_the_assistant(models, assistant, threshold, monkeypatch):
    verifies = Verifies(monkeypatch)
    ids = prompt(1, 10)
    want = models["main"].generate(ids, max_new_tokens=30, do_sample=False)
    got = models["lm"].generate(
        ids, max_new_tokens=30, assistant_model=models[assistant], assistant_confidence_threshold=threshold
    )
    assert torch.equal(got, want)
    assert verifies.sizes, "no verify call: nothing was drafted"
    if assistant == "same" and threshold == 0.0:  # every draft agrees: full verify calls
        assert verifies.sizes.count(DRAFTS + 1) >= 3, verifies.sizes
    tf_assistant = models["main"] if assistant == "same" else models["other"]
    assisted = models["main"].generate(ids, max_new_tokens=30, do_sample=False, assistant_model=tf_assistant)
    assert torch.equal(assisted, want)


def test_a_left_padded_row_is_padded_for_the_assistant_too(models, monkeypatch):
    """The assistant reads the prompt as the larger model does (its padding masked): as its own
    assistant, every draft of the larger model agrees."""
    verifies = Verifies(monkeypatch)
    ids = prompt(1, 10, seed=5)
    ids[:, :3] = 0
    mask = torch.ones_like(ids)
    mask[:, :3] = 0
    want = models["main"].generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False)
    got = models["lm"].generate(
        ids, attention_mask=mask, max_new_tokens=20, assistant_model=models["same"], assistant_confidence_threshold=0.0
    )
    assert torch.equal(got, want)
    assert verifies.sizes[:2] == [DRAFTS + 1] * 2, verifies.sizes
    held = models["same"].default_session.mask[0]  # the assistant's session, given back after the call
    assert not held[:3].any() and held[3:10].all()


def test_an_eos_the_model_makes_ends_the_row_as_greedy_search(models):
    ids = prompt(1, 10, seed=4)
    plain = models["main"].generate(ids, max_new_tokens=30, do_sample=False)
    eos = int(plain[0, 18])  # a token the model makes: generation stops after it
    want = models["main"].generate(ids, max_new_tokens=30, do_sample=False, eos_token_id=eos, pad_token_id=0)
    got = models["lm"].generate(
        ids, max_new_tokens=30, eos_token_id=eos, pad_token_id=0, assistant_model=models["same"],
        assistant_confidence_threshold=0.0,
    )  # fmt: skip
    assert torch.equal(got, want) and int(got[0, -1]) == eos


def _processed(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """The next token's distribution under temperature 2 and top_k 3 (transformers' warpers)."""
    with torch.no_grad():
        scores = model(ids).logits[0, -1] / 2.0
    kept = scores.topk(3)
    return torch.zeros_like(scores).scatter(0, kept.indices, torch.softmax(kept.values, -1))


def _pairs(first: Any, second: Any, ids: torch.Tensor) -> dict[tuple[int, int], float]:
    """The exact distribution of the first two new tokens: the first from ``first``'s processed
    distribution, the second from ``second``'s after it."""
    p1 = _processed(first, ids)
    exact = {}
    for t1 in p1.nonzero().flatten().tolist():
        p2 = _processed(second, torch.cat([ids, torch.tensor([[t1]])], 1))
        for t2 in p2.nonzero().flatten().tolist():
            exact[(t1, t2)] = float(p1[t1] * p2[t2])
    return exact


def test_sampling_keeps_the_larger_model_s_distribution(models, monkeypatch):
    """Speculative sampling: the first two new tokens (the second the drafted one; top_k=3, temperature
    2: nine outcomes), drawn over 1000 seeds with a near model's drafts, follow the larger model's
    exact distribution (total variation ~0.04 of noise), which the drafts' own is far from; the draft
    is refused and the token drawn from the residual often enough to count."""
    ids = prompt(1, 10, seed=2)
    exact = _pairs(models["main"], models["main"], ids)
    drafts_own = _pairs(models["main"], models["near"], ids)
    keys = set(exact) | set(drafts_own)
    assert sum(abs(exact.get(k, 0.0) - drafts_own.get(k, 0.0)) for k in keys) / 2 > 0.2  # the test can tell
    from opcore.graph import assisted

    kept: Counter[bool] = Counter()
    original = assisted.speculative

    def counted(p: Any, q: Any, draft: list[int], choice: Any) -> list[int]:
        made = original(p, q, draft, choice)
        kept[made[: len(draft)] == draft] += 1
        return made

    monkeypatch.setattr(assisted, "speculative", counted)
    counts: Counter[tuple[int, int]] = Counter()
    runs = 1000
    for seed in range(runs):
        out = models["lm"].generate(
            ids, max_new_tokens=3, do_sample=True, top_k=3, temperature=2.0,
            generator=torch.Generator().manual_seed(seed), assistant_model=models["near assistant"],
            assistant_confidence_threshold=0.0,
        )  # fmt: skip
        first, second = out[0, 10:12].tolist()  # the second drafted and verified (one draft: 3 new tokens)
        counts[(first, second)] += 1
    assert kept[True] > 50 and kept[False] > 50 and sum(kept.values()) == runs, kept
    assert set(counts) <= set(exact), set(counts) - set(exact)
    distance = sum(abs(counts[k] / runs - exact[k]) for k in exact) / 2
    assert distance < 0.1, (distance, counts, exact)


def test_seeded_sampling_is_reproducible_and_the_assistant_s_cache_is_kept_apart(models):
    ids = prompt(1, 10)
    runs = [
        models["lm"].generate(
            ids,
            max_new_tokens=24,
            do_sample=True,
            generator=torch.Generator().manual_seed(7),
            assistant_model=models["assistant"],
            assistant_confidence_threshold=0.0,
        )
        for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])
    # the assistant's session went back to its pool, free: its own generate runs on it unchanged
    alone = models["assistant"].generate(ids, max_new_tokens=8)
    assert torch.equal(alone, models["other"].generate(ids, max_new_tokens=8, do_sample=False))
    assert not models["assistant"]._running


def test_stream_and_records_match_generate(models):
    ids = prompt(1, 10)
    options: dict[str, Any] = {"assistant_model": models["same"], "assistant_confidence_threshold": 0.0}
    want = models["lm"].generate(ids, max_new_tokens=12, **options)
    streamed = torch.stack(list(models["lm"].stream(ids, max_new_tokens=12, **options)), 1)
    assert torch.equal(streamed, want[:, 10:])
    record = models["lm"].generate(ids, max_new_tokens=12, return_dict_in_generate=True, output_scores=True, **options)
    plain = models["lm"].generate(ids, max_new_tokens=12, return_dict_in_generate=True, output_scores=True)
    assert torch.equal(record.sequences, plain.sequences) and len(record.scores) == 12
    for got, expected in zip(record.scores, plain.scores):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_refusals_name_the_fix(models):
    lm, ids = models["lm"], prompt(1, 10)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"assistant_model": models["other"]}, "a LanguageModel"),
        ({"assistant_model": models["same"], "prompt_lookup_num_tokens": 2}, "drafts from one source"),
        ({"assistant_model": models["same"], "num_assistant_tokens": DRAFTS + 1}, f"at most {DRAFTS}"),
        ({"assistant_model": models["same"], "num_assistant_tokens": 0}, "an int >= 1"),
        ({"assistant_model": models["same"], "assistant_confidence_threshold": 1.5}, "a number in [0, 1]"),
        ({"assistant_model": models["same"], "num_beams": 2}, "no beam search with drafts"),
    ]
    for options, expected in cases:
        with pytest.raises(ArgumentError, match=expected.replace("[", r"\[").replace("]", r"\]")):
            lm.generate(ids, max_new_tokens=4, **options)
    with pytest.raises(ArgumentError, match="one prompt row"):
        opcore.graph.capture_lm(models["main"], max_length=48, batch_size=2, measure=False, draft_tokens=2).generate(
            prompt(2, 10), max_new_tokens=4, assistant_model=models["same"]
        )
    with pytest.raises(ArgumentError, match="captured with a verify step"):
        models["same"].generate(ids, max_new_tokens=4, assistant_model=models["same"])
    small_vocab = build("llama")
    small_vocab.resize_token_embeddings(300)
    with pytest.raises(ArgumentError, match="a model of this one's vocabulary"):
        lm.generate(
            ids, max_new_tokens=4, assistant_model=opcore.graph.capture_lm(small_vocab, max_length=48, measure=False)
        )
