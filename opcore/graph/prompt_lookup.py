"""Prompt lookup decoding: tokens drafted from the row's own n-grams, verified in one step.

transformers' ``generate(..., prompt_lookup_num_tokens=n)`` (its ``PromptLookupCandidateGenerator``
and ``_assisted_decoding``, batch 1): the last ``max_matching_ngram_size`` (2) tokens of the row,
then fewer, are looked up in the row itself, first match from the left; the up to ``n`` tokens that
followed that match are the draft (cut before an eos, and to the new tokens and cache slots left).
One call of the verify step (``capture_lm(..., draft_tokens=)``: the last token and the draft in, 2
to draft_tokens + 1 of them, the logits of each position out) scores them all; each position's
logits are processed as generate's step at that length would process them (the row up to it,
drafts included), and the draft is accepted while it agrees with the token chosen there (greedy:
the argmax; sampling: one draw per position, ``torch.multinomial`` over all positions at once, as
transformers draws them). The first disagreement's chosen token comes free: every call makes one
token or more. The cache is cropped back to the accepted tokens (``Session.crop``). Without a match
the step is generate's own one-token decode step.

Greedy tokens are those of greedy search (a draft changes how many steps make them, not which), up
to the rounding of logits computed for several positions at once; the caller's stopping criteria
and max_time are checked once per verify call, as transformers checks them. Candidates are not
pruned by the logits processors (transformers tries each against them with constant logits): a
draft token a processor forbids is never the token chosen there, so it ends the accepted run where
transformers' pruning would have ended the draft.

Where it pays: a decode step here is bound by reading the weights, and the verify step reads them
once for several tokens; its extra arithmetic per position is what an accepted token saves against
a decode step (docs/generate.md, 'Prompt lookup decoding'; bench/prompt_lookup.py).

>>> candidates([5, 6, 7, 8, 5, 6], num_tokens=3, ngram_size=2)
[7, 8, 5]
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opcore.graph.sampling import Choice, one_thread, stopped

if TYPE_CHECKING:
    from opcore.graph.assisted import Assistant

__all__ = ["Lookup", "candidates", "lookup_steps"]

# transformers' max_matching_ngram_size where neither the call nor the generation config sets one
NGRAM_SIZE = 2


@dataclass(frozen=True, slots=True)
class Lookup:
    """Prompt lookup's settings: tokens drafted per verify call, the longest n-gram matched."""

    num_tokens: int
    ngram_size: int = NGRAM_SIZE


def candidates(
    tokens: Sequence[int], num_tokens: int, ngram_size: int = NGRAM_SIZE, eos: Sequence[int] = ()
) -> list[int]:
    """The draft for a row holding ``tokens``: for n-gram sizes from ``ngram_size`` down to 1, the
    first earlier place (from the left) holding the row's last n tokens, and up to ``num_tokens`` of
    what followed it there, cut before the first eos id; [] where nothing matches (transformers'
    ``PromptLookupCandidateGenerator.get_candidates``, batch 1, without its processor pruning)."""
    length = len(tokens)
    row = list(tokens)
    for size in range(min(ngram_size, length - 1), 0, -1):
        tail = row[length - size :]
        first = tail[0]
        for start in range(length - size + 1):
            if row[start] != first or row[start : start + size] != tail:
                continue
            begin = start + size
            end = min(begin + num_tokens, length)
            if begin >= end:
                continue
            chosen = row[begin:end]
            ends = [i for i, token in enumerate(chosen) if token in eos]
            return chosen[: ends[0]] if ends else chosen
    return []


class NGramDrafts:
    """Prompt lookup's drafts: the row's own n-grams (``candidates``)."""

    def __init__(self, lookup: Lookup, eos: tuple[int, ...]) -> None:
        self.lookup, self.eos = lookup, eos

    def propose(self, history: Any, most: int, produced: int) -> tuple[list[int], Any]:
        """Up to ``most`` tokens continuing ``history``'s first row (no scores of their own: None)."""
        return candidates(
            history[0].tolist(), min(most, self.lookup.num_tokens), self.lookup.ngram_size, self.eos
        ), None

    def settle(self, agreed: int) -> None:
        """Nothing to keep in step with."""

    def close(self) -> None:
        """Nothing held."""


def lookup_steps(
    chat: Any,
    ids: Any,
    mask: Any,
    rows: int,
    max_new_tokens: int,
    choice: Choice,
    eos: tuple[int, ...],
    lookup: Lookup | Assistant,
    lead: Any = None,
    max_time: float | None = None,
    record: list[tuple[Any, Any]] | None = None,
    stopping: tuple[Any, ...] = (),
) -> Iterator[Any]:
    """The new tokens (rows,) one at a time, as generate's loop yields them, made by drafts verified
    on session ``chat`` (emptied or continued by the caller) for the prompt ``ids`` (captured batch,
    prompt; the caller's rows first, the rest copies of the first, whose tokens follow its own):
    ``lookup`` a ``Lookup`` (prompt lookup decoding) or an ``opcore.graph.assisted.Assistant``
    (assisted generation). ``lead``: each row's left padding (the repetition penalty leaves it out);
    ``record``: each token's (processed scores, logits) appended where kept."""
    import torch

    from opcore.graph.assisted import ModelDrafts

    if max_new_tokens == 0:
        return
    drafts = NGramDrafts(lookup, eos) if isinstance(lookup, Lookup) else ModelDrafts(lookup, choice, lead, eos, mask)
    try:
        started = time.monotonic()  # transformers' MaxTimeCriteria counts from before the prompt
        batch = ids.shape[0]
        limit = chat.lm.draft_tokens
        history = ids
        logits = chat.prefill(ids, mask)
        produced = 0
        while True:
            drafted: list[int] = []
            scored: Any = None
            budget = max_new_tokens - produced
            if produced and budget > 1:
                # the verify step writes the last token and the drafts: as many as the cache has room for
                room = chat.lm.max_length - chat.length - 1
                most = min(limit, budget - 1, room)
                if most > 0:
                    with torch.no_grad():
                        drafted, scored = drafts.propose(history, most, produced)
            if drafted:
                with torch.no_grad():
                    last = history[:, -1:]
                    draft = torch.tensor(drafted, dtype=torch.long, device=ids.device)[None].expand(batch, -1)
                    verified = chat.verify(torch.cat([last, draft], 1))
                made = _accepted(verified, history, draft, rows, produced, choice, lead, eos, budget, record, scored)
                # the cache holds the last token and the drafts before the last made token, which is new
                chat.crop(chat.length - verified.shape[1] + made.shape[0])
            else:
                if produced:
                    logits = chat.step(history[:, -1:])
                with one_thread(logits):
                    scores = choice.scores(logits[:rows], history[:rows], produced, lead)
                    picked = choice.pick(scores)
                    if record is not None:
                        record.append((scores.clone(), logits[:rows].float().clone()))
                made = picked[:1]
            made = made.to(ids.device)
            history = torch.cat([history, made[None].expand(batch, -1)], 1)
            drafts.settle(history.shape[1] - 1)  # the last made token is in neither cache yet
            for token in made:
                produced += 1
                yield token.expand(rows)
            if eos and int(made[-1]) in eos:
                return
            if stopping and bool(stopped(stopping, history[:rows], record).all()):
                return
            if produced >= max_new_tokens:
                return
            if max_time is not None and time.monotonic() - started > max_time:
                return
    finally:
        drafts.close()


def _accepted(
    verified: Any,
    history: Any,
    draft: Any,
    rows: int,
    produced: int,
    choice: Choice,
    lead: Any,
    eos: tuple[int, ...],
    budget: int,
    record: list[tuple[Any, Any]] | None,
    scored: Any = None,
) -> Any:
    """The tokens (1-D) a verify call made: the drafts up to the first the model disagrees with, and
    the token it chose there (or after the last draft), cut at ``budget`` and after an eos. Greedy
    search processes the positions one at a time and stops at the first disagreement (the later
    positions' tokens would be dropped); sampling processes all and draws them in one call, as
    transformers does (so that a generator's draws do not depend on where the drafts end), or, where
    the drafts come with the assistant's processed scores (``scored``), keeps them by speculative
    sampling (opcore.graph.assisted.speculative)."""
    import torch

    count = verified.shape[1]
    rows_logits = verified[:rows].float()
    processed: list[Any] = []
    with one_thread(verified):

        def score(i: int) -> Any:
            tokens = torch.cat([history[:rows], draft[:rows, :i]], 1)
            return choice.scores(rows_logits[:, i], tokens, produced + i, lead)

        if choice.do_sample:
            processed = [score(i) for i in range(count)]
            if scored is not None:
                from opcore.graph.assisted import speculative

                chosen = speculative(torch.stack(processed, 1)[0], scored, draft[0].tolist(), choice)
            else:
                chosen = choice.pick(torch.stack(processed, 1)[0]).tolist()
        else:
            chosen = []
            for i in range(count):
                processed.append(score(i))
                chosen.append(int(processed[-1][0].argmax()))
                if i < count - 1 and chosen[-1] != int(draft[0, i]):
                    break
    drafts = draft[0].tolist()
    matches = next((i for i, token in enumerate(chosen[:-1]) if token != drafts[i]), len(chosen) - 1)
    made = chosen[: matches + 1][:budget]
    ends = [i for i, token in enumerate(made) if token in eos]
    if ends:
        made = made[: ends[0] + 1]
    if record is not None:
        for i in range(len(made)):
            record.append((processed[i].clone(), rows_logits[:, i].clone()))
    return torch.tensor(made, dtype=torch.long)
