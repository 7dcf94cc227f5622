"""Choosing the next token from a step's logits, with transformers' semantics and order.

transformers' ``generate`` applies, in this order: the repetition penalty (over every token of the
row so far, prompt included, its left padding not), the minimum of new tokens (eos impossible until reached), the forced
first and last tokens of the model's generation config (``forced_bos_token_id`` where the prompt is
one token, ``forced_eos_token_id`` as the last of ``max_new_tokens``), its suppressed tokens (always,
and ``begin_suppress_tokens`` as the first new token), then for sampling the
temperature, top-k and top-p warpers; greedy takes the argmax of the processed scores,
sampling draws from their softmax (``torch.multinomial``, with the caller's ``torch.Generator``).

>>> import torch
>>> choose = Choice(do_sample=False)
>>> choose.next(torch.tensor([[0.1, 2.0, 0.3]]), torch.tensor([[0]]), new_tokens=0).tolist()
[1]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["Choice"]

_GENERATE = "LanguageModel.generate"


@dataclass(frozen=True, slots=True)
class Choice:
    """How the next token is chosen. temperature / top_k / top_p / repetition_penalty None: not
    applied; eos_token_ids: the ids that end a row (suppressed until ``min_new_tokens``)."""

    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    min_new_tokens: int = 0
    eos_token_ids: tuple[int, ...] = ()
    generator: Any = None  # a torch.Generator for sampling (None: torch's global one)
    forced_bos_token_id: int | None = None  # the first new token's, where set
    forced_eos_token_ids: tuple[int, ...] = ()  # the token(s) allowed as the new token last_new_token
    last_new_token: int | None = None
    suppress_tokens: tuple[int, ...] = ()  # never chosen
    begin_suppress_tokens: tuple[int, ...] = ()  # not chosen as the new token begin_new_token
    begin_new_token: int = 0

    def __post_init__(self) -> None:
        _positive("temperature", self.temperature, strict=True)
        _positive("repetition_penalty", self.repetition_penalty, strict=True)
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 0):
            raise ArgumentError(op=_GENERATE, arg="top_k", expected="an int >= 0", found=repr(self.top_k))
        if self.top_p is not None and not 0.0 < float(self.top_p) <= 1.0:
            raise ArgumentError(op=_GENERATE, arg="top_p", expected="a float in (0, 1]", found=repr(self.top_p))
        if not isinstance(self.min_new_tokens, int) or self.min_new_tokens < 0:
            raise ArgumentError(
                op=_GENERATE, arg="min_new_tokens", expected="an int >= 0", found=repr(self.min_new_tokens)
            )

    def scores(self, logits: Any, tokens: Any, new_tokens: int) -> Any:
        """The processed scores (batch, vocab) of float32 ``logits`` for rows whose tokens so far are
        ``tokens`` (batch, length; None where no option reads them; -1 where a slot holds none: left
        padding, which transformers' repetition penalty leaves out), ``new_tokens`` of them generated."""
        import torch

        scores = logits.float()
        if self.repetition_penalty is not None and self.repetition_penalty != 1.0 and tokens is not None:
            # each id the row holds (an id outside the vocabulary, -1 for a left-padding slot, none),
            # penalized once, as transformers' RepetitionPenaltyLogitsProcessor
            vocab = scores.shape[-1]
            ids = torch.where((tokens >= 0) & (tokens < vocab), tokens, vocab)
            present = torch.zeros((scores.shape[0], vocab + 1), dtype=torch.bool, device=scores.device)
            present = present.scatter(1, ids, True)[:, :vocab]
            penalized = torch.where(scores < 0, scores * self.repetition_penalty, scores / self.repetition_penalty)
            scores = torch.where(present, penalized, scores)
        # an eos id outside the vocabulary (a config's default beside a smaller vocab) can never be
        # produced: nothing to mask, as transformers' MinNewTokensLengthLogitsProcessor does
        held = new_tokens < self.min_new_tokens
        banned = [i for i in self.eos_token_ids if 0 <= i < scores.shape[-1]] if held else []
        if banned:
            scores = scores.clone()
            scores[:, banned] = -float("inf")
        forced = [self.forced_bos_token_id] if self.forced_bos_token_id is not None and new_tokens == 0 else []
        if self.forced_eos_token_ids and new_tokens == self.last_new_token:
            forced = list(self.forced_eos_token_ids)
        forced = [i for i in forced if 0 <= i < scores.shape[-1]]
        if forced:  # every other token impossible, the forced ones at 0
            scores = torch.full_like(scores, -float("inf"))
            scores[:, forced] = 0.0
        suppressed = list(self.suppress_tokens)
        if new_tokens == self.begin_new_token:
            suppressed += self.begin_suppress_tokens
        suppressed = [i for i in suppressed if 0 <= i < scores.shape[-1]]
        if suppressed:
            scores = scores.clone() if scores is logits else scores
            scores[:, suppressed] = -float("inf")
        if not self.do_sample:
            return scores
        if self.temperature is not None and self.temperature != 1.0:
            scores = scores / self.temperature
        if self.top_k:
            k = min(self.top_k, scores.shape[-1])
            kth = torch.topk(scores, k)[0][..., -1, None]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if self.top_p is not None and self.top_p < 1.0:
            ordered, order = torch.sort(scores, descending=False)
            cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative <= (1 - self.top_p)
            drop[..., -1:] = False  # keep at least one token
            scores = scores.masked_fill(drop.scatter(1, order, drop), -float("inf"))
        return scores

    def next(self, logits: Any, tokens: Any, new_tokens: int) -> Any:
        """The next token of each row (batch,)."""
        import torch

        scores = self.scores(logits, tokens, new_tokens)
        if not self.do_sample:
            return scores.argmax(dim=-1)
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, num_samples=1, generator=self.generator).squeeze(1)


def _positive(name: str, value: float | None, *, strict: bool) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (value <= 0 if strict else value < 0):
        raise ArgumentError(op=_GENERATE, arg=name, expected="a number > 0", found=repr(value))
